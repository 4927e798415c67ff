"""`plan` against exhaustive enumeration on small random instances (issue 4 "done when").

The oracle shares none of the search: for EVERY valid candidate layout (the same enumeration and
placement rules `plan` uses), EVERY contiguous split and EVERY per-layer recompute assignment, it
judges fit with `stage_memory` itself (what `plan` reports) and takes `step_time(...).step`.
Megatron-LM and DeepSpeed conventions, and torchtitan without pipeline parallelism (its schedule
peak under PP is additive per layer only in 1F1B's steady state: `plan` re-costs such plans and
may answer FEASIBLE, see
`test_torchtitan_pipeline_plans_are_never_below_the_oracle`). Stage s's total depends only on its own
layers and modes (`StepTime.stage_step`; step = their max), so each stage's assignments are
enumerated separately and the best assignment of a split is re-costed whole by `step_time`.
The plan's best step time must equal that minimum (up to the program's stated rounding bound,
a few nanoseconds), with status OPTIMAL.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from budget import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner import plan as P
from planner.cost.memory import stage_memory
from planner.cost.step_time import step_time
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

ROUNDING_S = 2 * 3 * (8 + 1) * 1e-9 / 2
"""Twice the stage program's rounding bound G (L + 1) / 2 ns (G = 3 groups, L <= 8): the plan
picked in integers can exceed the float optimum by at most twice that bound (27 ns)."""


@st.composite
def tiny_cases(draw, frameworks=("megatron", "deepspeed", "torchtitan"), pipeline_free=True):
    """A Llama-like model of 2-8 layers on 4 GPUs with a GPU small enough that recompute and the
    split matter (some cases fit nothing), under each framework's conventions (torchtitan without
    PP unless `pipeline_free` is False)."""
    framework = draw(st.sampled_from(frameworks))
    heads = draw(st.sampled_from([4, 8]))
    # at most 6 layers without PP: 3^L per-layer assignments per candidate stay affordable
    layers = draw(st.integers(2, 6 if framework == "torchtitan" and pipeline_free else 8))
    model = from_config({
        "model_type": "llama", "hidden_size": 64 * heads, "intermediate_size": 128 * heads,
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": heads // 2, "vocab_size": draw(st.sampled_from([1000, 3000])),
        "max_position_embeddings": 4096}, name=f"tiny-{layers}")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    gib = draw(st.floats(0.02, 0.4))
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, memory_gib=gib))
    base = dict(seq_len=draw(st.sampled_from([512, 1024, 2048])),
                global_batch_size=draw(st.sampled_from([8, 16])), precision="bf16",
                optimizer="adamw", framework=framework)
    fixed = {"micro_batch_size": draw(st.sampled_from([1, 2]))}
    if framework == "torchtitan" and pipeline_free:
        fixed["pp"] = 1
    elif layers > 6:  # keep 3^L per-layer assignments per pipeline-free candidate affordable
        fixed["pp"] = draw(st.sampled_from([2, 4]))
    return model, cluster, base, fixed


def splits(num_layers: int, stages: int):
    for cuts in itertools.combinations(range(1, num_layers), stages - 1):
        ends = (0, *cuts, num_layers)
        yield tuple(ends[i + 1] - ends[i] for i in range(stages))


def _fits(model, cluster, layout, s, layers, modes, capacity, cache) -> bool:
    """`stage_memory` of stage s holding `layers` in `modes` within capacity (per multiset of
    modes: layers of a tiny case are one kind)."""
    key = (layout, s, tuple(sorted(modes)))
    if key not in cache:
        mem = stage_memory(model, cluster, layout, s, layers=layers, reserve_bytes=0,
                           layers_by_recompute={m: modes.count(m) for m in set(modes)})
        cache[key] = mem.total <= capacity
    return cache[key]


def exhaustive_best(model, cluster, base, fixed) -> float | None:
    """Least step_time over every candidate x split x per-layer recompute assignment that fits.

    An interleaved candidate (vpp > 1) has the one split its framework builds (equal chunks, the
    account-for layout or torchtitan's remainder-first split: `plan._pinned_split`); every other
    candidate every split."""
    layouts, _, _ = P._candidates(model, cluster, fixed, base, 0, 0.0)
    allowed = P._modes_for(fixed)
    capacity, L = cluster.gpu.memory_bytes, model.num_hidden_layers
    best, cache = None, {}
    for layout in layouts:
        pinned = P._pinned_split(model, layout)
        if pinned is not None:
            layout = P._with_split(model, layout)
        if P._uneven(layout):
            value = _joint_best(model, cluster, layout, allowed, capacity)
            if value is not None:
                best = value if best is None else min(best, value)
            continue
        for split in ([pinned] if pinned is not None else splits(L, layout.pp)):
            cand = dataclasses.replace(layout, pipeline_layers=tuple(split))
            chosen, start = ["none"] * L, 0
            for s, n in enumerate(split):
                layers = tuple(range(start, start + n))
                start += n
                fastest = None
                for modes in itertools.product(allowed, repeat=n):
                    if not _fits(model, cluster, cand, s, layers, modes, capacity, cache):
                        continue
                    trial = list(chosen)
                    for i, m in zip(layers, modes):
                        trial[i] = m
                    t = step_time(model, cluster, cand, recompute_layers=trial).stage_step[s]
                    if fastest is None or t < fastest[0]:
                        fastest = (t, modes)
                if fastest is None:
                    break
                for i, m in zip(layers, fastest[1]):
                    chosen[i] = m
            else:
                value = step_time(model, cluster, cand, recompute_layers=chosen).step
                best = value if best is None else min(best, value)
    return best


def _joint_best(model, cluster, layout, allowed, capacity) -> float | None:
    """Least step_time of an interleaved layout with chunks of different sizes over every
    per-layer recompute assignment of the whole model whose stages all fit (`stage_memory`, which
    reads a stage's mode counts): the bubble is (pp - 1) x the slowest chunk of any stage, so
    the stages are not separable and are enumerated jointly."""
    best, cache = None, {}
    stages = P._layer_sets(layout)
    for modes in itertools.product(allowed, repeat=model.num_hidden_layers):
        if all(_fits(model, cluster, layout, s, layers, [modes[i] for i in layers], capacity, cache)
               for s, layers in enumerate(stages)):
            value = step_time(model, cluster, layout, recompute_layers=modes).step
            best = value if best is None else min(best, value)
    return best


def issue_13_case():
    """The counterexample of issue 13: plan said OPTIMAL at 3.140 ms (dp 2, cp 2, ZeRO-1) while
    pp 4, split 1/1/1/1 with layer 0 fully recomputed takes 2.572 ms. `feasible_split` took the
    least-memory mode on every layer (full) as each stage's least memory, but full recompute
    also pays the working set: the last stage fits its layer without recompute (105.5 MB) and
    not fully recomputed (107.6 MB) in 106.95 MB, so the pp 4 program was called infeasible."""
    model = from_config({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 3000, "max_position_embeddings": 4096}, name="tiny-4")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu,
                                                                   memory_gib=0.099609375))
    base = dict(seq_len=2048, global_batch_size=8, precision="bf16", optimizer="adamw",
                framework="megatron")
    return model, cluster, base, {"micro_batch_size": 2}


def torchtitan_working_set_case():
    """Found while fixing issue 13: under torchtitan the last stage's loss-backward working set
    (fp32 logits gradients) is a phase of its own, and `transient_peak` takes the larger phase, so
    a fully recomputed layer's working set raises the peak by less than its size. The stage
    program charged all of it and called full recompute unaffordable: plan said OPTIMAL at
    8.189 ms (selective recompute) where 3.874 ms fits."""
    model = from_config({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 3000, "max_position_embeddings": 4096}, name="tiny-5")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(
        cluster.gpu, memory_gib=0.13620832264780228))
    base = dict(seq_len=512, global_batch_size=16, precision="bf16", optimizer="adamw",
                framework="torchtitan")
    return model, cluster, base, {"micro_batch_size": 2, "pp": 1}


@settings(max_examples=examples(24, deep=2000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_cases())
@example(issue_13_case())
@example(torchtitan_working_set_case())
def test_plan_equals_exhaustive_step_time_minimum(case):
    model, cluster, base, fixed = case
    oracle = exhaustive_best(model, cluster, base, fixed)
    if oracle is None:
        with pytest.raises(P.InfeasibleError):
            P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, headroom=0.0, **base)
        return
    result = P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, headroom=0.0, **base)
    _assert_matches_oracle(result, oracle)


def _assert_matches_oracle(result, oracle) -> None:
    """OPTIMAL: the plan's step is the exhaustive minimum. FEASIBLE only where an interleaved
    candidate with chunks of different sizes was not proven (`plan._uneven_bound` below the best
    step), and then the reported bound is at most the minimum and the plan at least it."""
    solver, step = result["solver"], result["plans"][0]["time_s"]["step"]
    assert step >= oracle * (1 - 1e-12)
    if solver["status"] == "OPTIMAL":
        assert step == pytest.approx(oracle, rel=1e-12, abs=ROUNDING_S)
    else:
        assert solver["status"] == "FEASIBLE" and solver["uneven_interleaved_solved"] > 0
        assert solver["bound_s"] <= oracle + ROUNDING_S


def _tiny_interleaved_case(layers: int, memory_gib: float, **fixed):
    model = from_config({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 3000, "max_position_embeddings": 4096}, name=f"tiny-{layers}")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, memory_gib=memory_gib))
    base = dict(seq_len=2048, global_batch_size=16, precision="bf16", optimizer="adamw",
                framework="megatron")
    return model, cluster, base, {"micro_batch_size": 1, **fixed}


@pytest.mark.parametrize("case", [
    # 6 layers over pp 2 x vpp 2 chunks (Megatron's account-for split Et|tt|tt|tL): memory binds
    _tiny_interleaved_case(6, 0.08, pp=2, vpp=2),
    # roomy: no recompute needed, the bubble-free bound is met
    _tiny_interleaved_case(6, 0.4, pp=2, vpp=2),
    # vpp searched (1, 2, 4), 7 layers: uneven chunks on every interleaved candidate
    _tiny_interleaved_case(7, 0.4, pp=2),
], ids=["6-layers-tight", "6-layers-roomy", "7-layers-searched"])
def test_uneven_interleaved_plans_equal_the_joint_exhaustive_minimum(case):
    """Interleaved 1F1B with chunks of different sizes: the exhaustive oracle enumerates every
    per-layer recompute assignment of the whole model jointly (`_joint_best`), since the bubble
    (pp - 1) x the slowest chunk couples the stages."""
    model, cluster, base, fixed = case
    oracle = exhaustive_best(model, cluster, base, fixed)
    result = P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, headroom=0.0, **base)
    _assert_matches_oracle(result, oracle)
    if fixed.get("vpp") == 2:
        assert result["plans"][0]["parallelism"]["vpp"] == 2


def test_stage_totals_depend_only_on_their_own_layers():
    """What the oracle relies on: changing other stages' modes leaves a stage's total unchanged,
    and the step is the largest stage total."""
    model = from_config({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                         "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                         "vocab_size": 1000, "max_position_embeddings": 4096}, name="tiny")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    layout = P.Layout(dp=2, pp=2, zero_stage=3, pipeline_layers=(1, 3), seq_len=1024,
                      global_batch_size=8)
    a = step_time(model, cluster, layout, recompute_layers=("none", "full", "none", "selective"))
    b = step_time(model, cluster, layout, recompute_layers=("none", "none", "full", "full"))
    assert a.stage_step[0] == b.stage_step[0] and a.stage_step[1] != b.stage_step[1]
    assert a.step == max(a.stage_step) and b.step == max(b.stage_step)


@pytest.mark.parametrize("seed", range(6))
def test_bounds_never_exceed_the_objective(seed):
    """Both bounds of every candidate are <= its step_time (the proof in planner/plan.py)."""
    model, cluster, base, fixed = _seeded_case(seed)
    layouts, _, costs = P._candidates(model, cluster, fixed, base, 0, 0.0)
    for layout in layouts:
        evaluated = P._solve(costs, layout, P.RECOMPUTE_MODES)
        if evaluated is None:
            continue
        cheap = P._cheap_bound(costs, layout, P.RECOMPUTE_MODES)
        refined = P._refined_bound(costs, layout, P.RECOMPUTE_MODES)
        assert cheap <= evaluated.objective_s * (1 + 1e-12), layout
        assert refined <= evaluated.objective_s * (1 + 1e-12), layout
        assert not math.isinf(refined)


def _seeded_case(seed: int):
    import random
    rng = random.Random(seed)
    heads = rng.choice([4, 8])
    model = from_config({
        "model_type": "llama", "hidden_size": 64 * heads, "intermediate_size": 128 * heads,
        "num_hidden_layers": rng.choice([3, 4, 5]), "num_attention_heads": heads,
        "num_key_value_heads": heads // 2, "vocab_size": 1000, "max_position_embeddings": 4096},
        name=f"tiny-{seed}")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    gpu = dataclasses.replace(cluster.gpu, memory_gib=rng.uniform(0.05, 0.4))
    base = dict(seq_len=rng.choice([512, 1024]), global_batch_size=8, precision="bf16",
                optimizer="adamw", framework="megatron")
    return model, dataclasses.replace(cluster, gpu=gpu), base, {}


def test_may_fit_rejects_only_candidates_without_a_plan():
    """`_may_fit` (the summed memory constraints) is a necessary condition: every candidate it
    rejects has no split that fits even with the least-memory modes (`feasible_split`)."""
    from planner.search.ilp import feasible_split
    rejected = kept = 0
    for seed in range(12):
        model, cluster, base, fixed = _seeded_case(seed)
        layouts, _, costs = P._candidates(model, cluster, fixed, base, 0, 0.0)
        for layout in layouts:
            ip = costs.int_problem(layout, P.RECOMPUTE_MODES)
            if P._may_fit(costs, layout, P.RECOMPUTE_MODES):
                kept += 1
            else:
                rejected += 1
                assert feasible_split(ip, ip.capacity_bytes) is None, layout
    assert rejected > 0 and kept > 0  # both sides exercised


def test_issue_13_case_returns_the_pipelined_plan():
    """The oracle's plan of issue 13, as the issue reports it (pp 4, split 1/1/1/1, layer 0 fully
    recomputed; 2.572 ms under the compute constants and without the pipeline schedule gap of
    then), with status OPTIMAL and the exhaustive oracle's step time under today's model."""
    model, cluster, base, fixed = issue_13_case()
    result = P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, headroom=0.0, **base)
    best = result["plans"][0]
    assert result["solver"]["status"] == "OPTIMAL"
    assert best["time_s"]["step"] == pytest.approx(exhaustive_best(model, cluster, base, fixed), rel=1e-9)
    assert (best["parallelism"]["pp"], best["parallelism"]["pipeline_layers"]) == (4, [1, 1, 1, 1])
    assert [stage["full"] for stage in best["parallelism"]["recompute"]] == [1, 0, 0, 0]


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_cases(frameworks=("torchtitan",), pipeline_free=False))
def test_torchtitan_pipeline_plans_are_never_below_the_oracle(case):
    """torchtitan with PP: the stage program's memory (`memory_model.StageMemoryModel`) follows
    the schedule's peak only in 1F1B's steady state (m > pp); out of it the peak is not additive
    per layer, so `plan` re-costs every plan by `stage_memory` before it offers it. What it offers therefore fits and can never beat the exhaustive minimum, and
    OPTIMAL is claimed only when it equals it."""
    model, cluster, base, fixed = case
    oracle = exhaustive_best(model, cluster, base, fixed)
    try:
        result = P.plan(model, cluster, fixed=fixed, top_k=1, reserve_bytes=0, headroom=0.0,
                        **base)
    except P.InfeasibleError:
        assert oracle is None
        return
    step = result["plans"][0]["time_s"]["step"]
    assert oracle is not None and step >= oracle * (1 - 1e-12)
    if result["solver"]["status"] == "OPTIMAL":
        assert step == pytest.approx(oracle, rel=1e-12, abs=ROUNDING_S)
