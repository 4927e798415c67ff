"""`rules.check_mesh`: the degree-only rules of `check_layout`, and the caches behind `check_layout`."""

import dataclasses

from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.placement.layout import Layout
from planner.placement.rules import (
    MESH_RULES,
    check_layout,
    check_mesh,
    check_placement,
    errors,
    uneven_split,
)
from planner.placement.strategies import _compose, placement_for
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

LLAMA_70B = load_model("llama-3.1-70b")  # 64 heads, 8 KV heads, 80 layers
MIXTRAL = load_model("mixtral-8x22b")    # 48 heads, 8 KV heads, 56 layers, 8 experts


def test_kv_heads_rejected_by_mesh_alone():
    """tp=16 divides the 64 heads but not the 8 KV heads (Megatron needs kv % tp == 0)."""
    layout = Layout(dp=2, tp=16, pp=2, global_batch_size=64)
    rules = [v.rule for v in check_mesh(LLAMA_70B, load_cluster("dgx-h100", gpus=64), layout)]
    assert rules == ["kv_heads_divisible_by_tp"]


def test_layers_experts_world_size_sequence():
    """80 layers over pp=3 do not split evenly; 8 experts over ep=3 neither; 1*8*3*1 = 24 GPUs of
    a 32-GPU cluster; seq 4080 with cp=4, tp=8 and SP needs a multiple of cp*lcm(2, tp) = 32
    (4080 = 32 * 127.5)."""
    cluster = load_cluster("dgx-h100", gpus=32)
    got = [v.rule for v in check_mesh(LLAMA_70B, cluster, Layout(tp=8, pp=3, global_batch_size=8))]
    assert got == ["world_size", "layers_divisible_by_pp"]
    moe = Layout(dp=3, tp=8, global_batch_size=24, ep=3)
    assert [v.rule for v in check_mesh(MIXTRAL, load_cluster("dgx-h100", gpus=24), moe)] == [
        "experts_divisible_by_ep"]
    seq = Layout(dp=1, tp=8, cp=4, seq_len=4080, sequence_parallel=True, global_batch_size=8)
    assert [v.rule for v in check_mesh(LLAMA_70B, cluster, seq)] == ["sequence_divisible"]


def test_good_mesh_passes_and_knob_rules_are_not_mesh_rules():
    """DeepSpeed rejects ZeRO-2 with PP and the batch must divide by dp*b: knob rules, not mesh."""
    cluster = load_cluster("dgx-h100", gpus=64)
    layout = Layout(dp=4, tp=8, pp=2, zero_stage=2, framework="deepspeed", micro_batch_size=3,
                    global_batch_size=64)
    assert check_mesh(LLAMA_70B, cluster, layout) == []
    assert {v.rule for v in errors(check_layout(LLAMA_70B, cluster, layout))} == {
        "zero_with_pp", "batch_divisible"}


@settings(max_examples=examples(150), deadline=None)
@given(dp=st.sampled_from([1, 2, 3, 4, 8]), tp=st.sampled_from([1, 2, 4, 8, 16]),
       pp=st.sampled_from([1, 2, 3, 4, 5, 8]), cp=st.sampled_from([1, 2, 3]),
       ep=st.sampled_from([1, 2, 3, 4, 8]), vpp=st.sampled_from([1, 2]),
       zero=st.sampled_from([0, 1, 2, 3]), b=st.sampled_from([1, 2, 3]),
       sp=st.booleans(), seq=st.sampled_from([4096, 4000, 8192, 6000]),
       framework=st.sampled_from(["megatron", "deepspeed", "torchtitan"]),
       moe=st.booleans(), gpus=st.sampled_from([16, 32, 64]))
def test_check_mesh_equals_filtered_check_layout(dp, tp, pp, cp, ep, vpp, zero, b, sp, seq, framework,
                                                 moe, gpus):
    """Exact oracle: check_mesh == the MESH_RULES errors of check_layout, in its order, and does not
    change with the knobs (micro-batch, ZeRO stage, recompute, offload)."""
    model, cluster = (MIXTRAL if moe else LLAMA_70B), load_cluster("dgx-h100", gpus=gpus)
    layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, zero_stage=zero, micro_batch_size=b,
                    sequence_parallel=sp, seq_len=seq, framework=framework, global_batch_size=96)
    expected = [v for v in errors(check_layout(model, cluster, layout)) if v.rule in MESH_RULES]
    assert check_mesh(model, cluster, layout) == expected
    knobs = dataclasses.replace(layout, micro_batch_size=1, zero_stage=0, recompute="full",
                                offload=frozenset({"optimizer"}))
    assert check_mesh(model, cluster, knobs) == expected


@settings(max_examples=examples(100), deadline=None)
@given(dp=st.sampled_from([1, 2, 4, 6, 8]), tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 4]),
       cp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 2, 4]), etp=st.sampled_from([1, 2]),
       zero=st.sampled_from([0, 1, 2, 3]), shard=st.sampled_from([None, 1, 2]), sp=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]),
       offload=st.sampled_from([frozenset(), frozenset({"optimizer"}), frozenset({"parameters"})]))
def test_cached_placement_and_its_violations_equal_fresh_ones(dp, tp, pp, cp, ep, etp, zero, shard, sp,
                                                              recompute, offload):
    """placement_for (cached per key) equals a freshly composed placement, and check_layout's
    placement part (cached per batch-axes key) equals check_placement of the fresh placement."""
    if shard is not None and dp % shard:
        shard = None
    layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, zero_stage=zero, dp_shard=shard,
                    sequence_parallel=sp, recompute=recompute, offload=offload)
    fresh = _compose(layout)
    assert placement_for(layout) == fresh
    placement_rules = ("gradient_integrity", "state_consistency")
    cached = [v for v in check_layout(LLAMA_70B, load_cluster("dgx-h100", gpus=64), layout)
              if v.rule in placement_rules]
    assert cached == check_placement(fresh)


def test_uneven_split_returns_a_fresh_list():
    """30 layers over 4 stages: [8, 7, 7, 8] (outer stages first); the cached split is not shared."""
    first = uneven_split(30, 4)
    assert first == [8, 7, 7, 8]
    first[0] = 99
    assert uneven_split(30, 4) == [8, 7, 7, 8]


def test_cp_fix_list_is_the_divisor_count_not_a_scan():
    """`rules._cp_dividing` (the cp values a sequence_divisible message suggests) equals checking
    every cp in [2, most] against `_sequence_divisor`, the rule's own divisor (hand oracle: the
    scan the message used to run), and answers a cp of 10^5 (1M GPUs) without scanning."""
    from planner.placement.rules import _cp_dividing, _sequence_divisor
    for seq in (1, 7, 4095, 4096, 8192, 12288):
        for tp in (1, 2, 3, 6, 8):
            for sp in (True, False):
                for most in (2, 9, 64):
                    scan = [c for c in range(2, most + 1) if seq % _sequence_divisor(c, tp, sp) == 0]
                    assert _cp_dividing(seq, tp, sp, most) == scan
    # 4096 = 2^12: with tp 8 and SP the unit is lcm(2, 8) = 8, so cp divides 4096 / 8 = 512
    assert _cp_dividing(4096, 8, True, 200_000) == [2, 4, 8, 16, 32, 64, 128, 256, 512]
