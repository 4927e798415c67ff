"""The memory the stage program reads is `stage_memory`'s, for every split and every per-stage
mix of recompute modes (the property `plan`'s OPTIMAL rests on, checked directly rather than
through the plan's step time).

`cost.memory_model.StageMemoryModel` is the affine model memory exports (fixed bytes, per-layer
state bytes, per-stage per-mode activation bytes, the full-recompute working set charged only with
a fully recomputed layer, and the phases without activations: DeepSpeed ZeRO-1/2's optimizer step).
Two checks against `cost.memory.stage_memory` of the same stage, the oracle, term by term:
- the model's evaluation equals it for every split and mode mix of random valid layouts (random
  framework, mesh, micro-batch, ZeRO stage, sequence and batch) of a dense and an MoE model of one
  layer kind, torchtitan with PP included where the model says it is exact (every stage in 1F1B's
  steady state);
- with two layer kinds (a DeepSeek-shaped model) the model is an upper bound, never below it,
  and equal where a stage holds what the model's probe holds;
- the integer program built from the model by `plan` (`search.ilp.stage_memory`) equals it for
  every candidate the search offers on 8 GPUs, up to the program's rounding of each coefficient up
  to whole bytes.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import plan as P
from planner.cost.memory import stage_memory
from planner.cost.memory_model import stage_memory_model
from planner.search import ilp
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

ROUNDING_BYTES = 64
"""Each of the program's coefficients (fixed, per-layer state, per-layer per-mode activation) is
rounded up to whole bytes and `stage_memory` truncates each term: a few bytes apart at most."""


def _splits(layers: int, stages: int):
    if stages == 1:
        yield (layers,)
        return
    for first in range(1, layers - stages + 2):
        for rest in _splits(layers - first, stages - 1):
            yield (first, *rest)


def _stage_mixes(model, cluster, layout):
    """(stage, its layers, {mode: layers}, stage_memory of it) for every split of `layout`'s
    layers over its pp stages and every mix of recompute modes on each stage."""
    for split in _splits(model.num_hidden_layers, layout.pp):
        candidate = layout.replace(pipeline_layers=split)
        start = 0
        for s, n in enumerate(split):
            layers = tuple(range(start, start + n))
            start += n
            for comp in ilp._compositions(n, 3):
                counts = dict(zip(P.RECOMPUTE_MODES, (int(x) for x in comp)))
                yield s, layers, counts, stage_memory(model, cluster, candidate, s, layers=layers,
                                                      reserve_bytes=0, layers_by_recompute=counts)


@pytest.mark.parametrize("framework, layers, gpus, seq_len", [
    ("megatron", 5, 8, 1024), ("deepspeed", 5, 8, 1024), ("torchtitan", 5, 8, 1024),
    ("deepspeed", 4, 4, 512)])  # short sequences: DeepSpeed's optimizer step is the peak on some
def test_program_memory_equals_stage_memory_for_every_split_and_mode_mix(framework, layers, gpus,
                                                                          seq_len):
    model = from_config({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                         "num_hidden_layers": layers, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "vocab_size": 3000,
                         "max_position_embeddings": 4096}, name=f"tiny-{layers}")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=gpus)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, memory_gib=80))
    base = dict(seq_len=seq_len, global_batch_size=16, precision="bf16", optimizer="adamw",
                framework=framework)
    layouts, _, costs = P._candidates(model, cluster, {}, base, 0, 0.0)
    checked = step_peaks = 0
    for layout in layouts:
        layout = P._with_split(model, layout)
        if not stage_memory_model(model, cluster, layout).exact:
            continue  # torchtitan with PP out of its steady state, interleaved chunks of different
            # sizes (`memory_model` docstring): plan re-costs those
        ip = costs.int_problem(layout, P.RECOMPUTE_MODES)
        for s, _, counts, want in _stage_mixes(model, cluster, layout):
            got = ilp.stage_memory(ip, s, [list(counts.values())])
            assert abs(got - want.total) <= ROUNDING_BYTES, (layout, s, counts)
            checked += 1
            step_peaks += want.optimizer_step_total() > want.backward_total
    assert checked > 500  # every framework's candidates exercised
    if seq_len == 512:  # the optimizer step (a phase without activations) is exercised
        assert step_peaks > 0


_CONFIGS = {
    "dense": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 3000, "max_position_embeddings": 4096},
    "moe": {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 384,
            "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 3000, "max_position_embeddings": 4096, "num_local_experts": 4,
            "num_experts_per_tok": 2},
    # two layer kinds: two dense layers, then MoE layers with a shared expert (DeepSeek-V3's shape)
    "two-kinds": {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512,
                  "moe_intermediate_size": 128, "num_hidden_layers": 5, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "vocab_size": 3000, "max_position_embeddings": 4096,
                  "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
                  "first_k_dense_replace": 2, "q_lora_rank": 64, "kv_lora_rank": 32,
                  "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32},
}
ONE_KIND = ("dense", "moe")


@lru_cache(maxsize=None)
def _setting(name: str, framework: str, gpus: int, seq_len: int, batch: int):
    """(model, cluster, every valid candidate layout) of one request (the search's own list)."""
    model = from_config(_CONFIGS[name], name=f"tiny-{name}")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=gpus)
    base = dict(seq_len=seq_len, global_batch_size=batch, precision="bf16", optimizer="adamw",
                framework=framework)
    layouts, _, _ = P._candidates(model, cluster, {}, base, 0, 0.0)
    return model, cluster, layouts


@settings(max_examples=examples(40), deadline=None)
@given(name=st.sampled_from(ONE_KIND),
       framework=st.sampled_from(["megatron", "deepspeed", "torchtitan"]),
       gpus=st.sampled_from([4, 8]), seq_len=st.sampled_from([256, 1024]),
       batch=st.sampled_from([8, 32]), pick=st.integers(0, 10**6))
def test_stage_memory_model_equals_stage_memory_for_every_split(name, framework, gpus, seq_len,
                                                                 batch, pick):
    model, cluster, layouts = _setting(name, framework, gpus, seq_len, batch)
    layout = layouts[pick % len(layouts)]
    memory = stage_memory_model(model, cluster, layout)
    if not memory.exact:  # stated: torchtitan with PP and a stage out of 1F1B's steady state
        assert framework == "torchtitan" and layout.pp > 1 and layout.num_microbatches <= layout.pp
        return
    for s, layers, counts, want in _stage_mixes(model, cluster, layout):
        modes = [m for m in ("full", "selective", "none") for _ in range(counts[m])]
        got = memory.bytes(s, memory.counts(layers, modes))
        # stage_memory truncates each of its ~20 terms to whole bytes; the model does not
        assert abs(got - want.total) <= ROUNDING_BYTES, (layout, s, counts, got, want.total)

def test_the_random_layouts_cover_every_framework_and_torchtitan_with_pp_exactly():
    """The layouts the property test draws from include torchtitan with PP in its steady state
    (m > pp: the model is exact there) and out of it (m <= pp: re-costed), and ZeRO-3 gathers."""
    exact_pp = loose_pp = gathered = 0
    for name in ONE_KIND:
        for batch in (8, 32):
            model, cluster, layouts = _setting(name, "torchtitan", 8, 1024, batch)
            for layout in layouts:
                if layout.pp > 1:
                    exact = stage_memory_model(model, cluster, layout).exact
                    exact_pp += exact
                    loose_pp += not exact
                gathered += layout.zero_stage == 3
    assert exact_pp > 0 and loose_pp > 0 and gathered > 0


def _assert_bound(model, cluster, layout) -> int:
    """Assert the model never below `stage_memory` on any split and mode mix of `layout`; the
    number of stages where the two are equal."""
    memory = stage_memory_model(model, cluster, layout)
    equal = 0
    if memory.exact:
        for s, layers, counts, want in _stage_mixes(model, cluster, layout):
            modes = [m for m in ("full", "selective", "none") for _ in range(counts[m])]
            got = memory.bytes(s, memory.counts(layers, modes))
            assert got >= want.total - ROUNDING_BYTES, (layout, s, counts, got, want.total)
            equal += got <= want.total + ROUNDING_BYTES
    return equal


@settings(max_examples=examples(20), deadline=None)
@given(framework=st.sampled_from(["megatron", "deepspeed"]), gpus=st.sampled_from([4, 8]),
       pick=st.integers(0, 10**6))
def test_stage_memory_model_bounds_stage_memory_with_two_layer_kinds(framework, gpus, pick):
    """Two layer kinds: the stage-level working sets are taken for a stage holding both kinds,
    so the model is an upper bound, never below `stage_memory` (a stage program's plan never needs
    more than it says), and equal on the stages that hold what the probe holds."""
    model, cluster, layouts = _setting("two-kinds", framework, gpus, 1024, 32)
    _assert_bound(model, cluster, layouts[pick % len(layouts)])


def test_stage_memory_model_bounds_torchtitan_with_two_layer_kinds_on_every_candidate():
    """torchtitan's FSDP2 terms follow the layer order (the last block, the largest adjacent
    block pair): the model's probe ends with the model's last kind and holds each kind twice in a
    row, so it bounds every stage of every candidate and equals the single stage without PP."""
    model, cluster, layouts = _setting("two-kinds", "torchtitan", 8, 1024, 32)
    assert sum(_assert_bound(model, cluster, layout) for layout in layouts) > 0
