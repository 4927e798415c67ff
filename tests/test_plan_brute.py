"""`plan` against exhaustive enumeration on small random instances (issue 4 "done when").

The search model (planner/plan.py docstring) has two levels; each is checked by an oracle that
shares none of the search's aggregation:

1. Per candidate layout, the stage program's optimum equals the least bottleneck per-micro-batch
   stage time over EVERY contiguous split x EVERY per-layer recompute assignment, each stage's
   time summed from `layer_times` + `stage_fixed_times` and its memory from `stage_memory` (plus
   the full-recompute working set charged on every stage, the model's stated conservative rule).
2. `plan`'s best step time equals the least step_time over every valid candidate solved without
   pruning (the best-first bounds never drop the optimum), with status OPTIMAL.
"""

from __future__ import annotations

import itertools
import random

import pytest

from planner import plan as P
from planner.cost.memory import stage_memory
from planner.cost.step_time import layer_times, stage_fixed_times
from planner.placement.layout import RECOMPUTE_MODES
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

GIB = 2**30


def tiny_case(seed: int):
    """A small Llama-like model on 4 GPUs with a GPU memory small enough for recompute to matter."""
    rng = random.Random(seed)
    heads = rng.choice([4, 8])
    model = from_config({
        "model_type": "llama", "hidden_size": 64 * heads, "intermediate_size": 128 * heads,
        "num_hidden_layers": rng.choice([3, 4, 5]), "num_attention_heads": heads,
        "num_key_value_heads": heads // 2, "vocab_size": rng.choice([1000, 3000]),
        "max_position_embeddings": 4096}, name=f"tiny-{seed}")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    seq = rng.choice([512, 1024, 2048])
    base = dict(seq_len=seq, global_batch_size=rng.choice([8, 16]), precision="bf16",
                optimizer="adamw", framework="megatron")
    # Memory: between a generous and a tight budget, so some cases need recompute or fail.
    gpu = cluster.gpu.__class__(**{**cluster.gpu.__dict__, "memory_gib": rng.uniform(0.02, 0.4)})
    import dataclasses
    cluster = dataclasses.replace(cluster, gpu=gpu)
    fixed = {"micro_batch_size": rng.choice([1, 2])} if rng.random() < 0.5 else {}
    return model, cluster, base, fixed


def splits(num_layers: int, stages: int):
    for cuts in itertools.combinations(range(1, num_layers), stages - 1):
        ends = (0, *cuts, num_layers)
        yield tuple(ends[i + 1] - ends[i] for i in range(stages))


def exhaustive_bottleneck(model, cluster, layout, reserve: int) -> float | None:
    """Least max_s T_s over every split and per-layer mode assignment that fits (oracle)."""
    import dataclasses
    times = [layer_times(model, cluster, layout, i) for i in range(model.num_hidden_layers)]
    fixed = stage_fixed_times(model, cluster, layout)
    capacity = cluster.gpu.memory_bytes - reserve
    best = None
    cache: dict = {}
    for split in splits(model.num_hidden_layers, layout.pp):
        candidate = dataclasses.replace(layout, pipeline_layers=split)
        working = _working_set(model, cluster, candidate)
        start, stage_best = 0, []
        for s, n in enumerate(split):
            layers = tuple(range(start, start + n))
            start += n
            fastest = None
            for modes in itertools.product(RECOMPUTE_MODES, repeat=n):
                t = fixed[s] + sum(times[i][m] for i, m in zip(layers, modes))
                key = (split, s, tuple(sorted(modes)))
                if key not in cache:
                    order = sorted(zip(layers, modes), key=lambda x: ("full", "selective", "none").index(x[1]))
                    mem = stage_memory(model, cluster, candidate, s, layers=tuple(i for i, _ in order),
                                       reserve_bytes=0, layers_by_recompute={
                                           m: modes.count(m) for m in RECOMPUTE_MODES})
                    cache[key] = mem.total - mem.transient_terms.get("recompute_working_set", 0) + working
                if cache[key] <= capacity and (fastest is None or t < fastest):
                    fastest = t
            stage_best.append(fastest)
        if all(x is not None for x in stage_best):
            value = max(stage_best)
            best = value if best is None else min(best, value)
    return best


def _working_set(model, cluster, layout) -> int:
    """One layer's saved activations (no recompute): what stage_memory adds under full recompute."""
    mem = stage_memory(model, cluster, layout, 0, layers=(0, 0), reserve_bytes=0,
                       layers_by_recompute={"none": 1, "full": 1})
    return mem.transient_terms.get("recompute_working_set", 0)


SEEDS = list(range(24))


@pytest.mark.parametrize("seed", SEEDS)
def test_stage_program_equals_exhaustive_split_and_recompute(seed):
    model, cluster, base, fixed = tiny_case(seed)
    reserve = 0
    layouts, _, costs = P._candidates(model, cluster, fixed, base, reserve)
    rng = random.Random(1000 + seed)
    for layout in rng.sample(layouts, min(4, len(layouts))):
        solution = P.solve_stage_problem(costs.problem(layout, P.RECOMPUTE_MODES))
        oracle = exhaustive_bottleneck(model, cluster, layout, reserve)
        if oracle is None:
            assert solution.layers_per_stage is None, layout
            continue
        assert solution.status == "OPTIMAL"
        slack = 1e-6 * (model.num_hidden_layers + 1)
        assert solution.objective_s == pytest.approx(oracle, abs=slack), layout


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_best_equals_every_candidate_solved(seed):
    model, cluster, base, fixed = tiny_case(seed)
    layouts, _, costs = P._candidates(model, cluster, fixed, base, 0)
    solved = [P._solve(costs, c, P.RECOMPUTE_MODES) for c in layouts]
    objectives = [e.objective_s for e in solved if e is not None]
    if not objectives:
        with pytest.raises(P.InfeasibleError):
            P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, **base)
        return
    result = P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, **base)
    assert result["solver"]["status"] == "OPTIMAL"
    assert result["plans"][0]["time_s"]["step"] == pytest.approx(min(objectives), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_bounds_never_exceed_the_objective(seed):
    """Both bounds of every candidate are <= its step_time (the proof in planner/plan.py)."""
    model, cluster, base, fixed = tiny_case(seed)
    layouts, _, costs = P._candidates(model, cluster, fixed, base, 0)
    for layout in layouts:
        evaluated = P._solve(costs, layout, P.RECOMPUTE_MODES)
        if evaluated is None:
            continue
        cheap = P._cheap_bound(costs, layout, P.RECOMPUTE_MODES)
        refined = P._refined_bound(costs, layout, P.RECOMPUTE_MODES)
        assert cheap <= evaluated.objective_s * (1 + 1e-12), layout
        assert refined <= evaluated.objective_s * (1 + 1e-12), layout
