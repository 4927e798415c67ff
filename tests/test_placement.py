"""Placement model: strategies as placements, correctness conditions, monotonicity properties."""

import dataclasses

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.memory import model_state_bytes, stage_memory
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.rules import check_placement, uneven_split
from planner.placement.states import GroupPlacement, Mode, Placement, State
from planner.placement.strategies import placement_for
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

P, G, O = State.PARAMETERS, State.GRADIENTS, State.OPTIMIZER_STATES


def test_strategy_table_zero_stages():
    """DESIGN.md §2 table: ZeRO-1 shards optimizer, 2 + gradients, 3 + parameters with gather."""
    expected = {0: (Mode.REPLICATED, Mode.REPLICATED, Mode.REPLICATED),
                1: (Mode.REPLICATED, Mode.REPLICATED, Mode.SHARDED),
                2: (Mode.REPLICATED, Mode.SHARDED, Mode.SHARDED),
                3: (Mode.SHARDED_WITH_GATHER, Mode.SHARDED, Mode.SHARDED)}
    for stage, modes in expected.items():
        gp = placement_for(Layout(dp=8, zero_stage=stage)).groups["dense"]
        assert (gp.mode(P, "dp_shard"), gp.mode(G, "dp_shard"), gp.mode(O, "dp_shard")) == modes


def test_hsdp_shards_inside_replicates_across():
    gp = placement_for(Layout(dp=8, dp_shard=4, zero_stage=3)).groups["dense"]
    assert gp.degrees["dp_shard"] == 4 and gp.degrees["dp_replicate"] == 2
    assert gp.mode(P, "dp_shard") == Mode.SHARDED_WITH_GATHER and gp.mode(P, "dp_replicate") == Mode.REPLICATED
    assert gp.shard_degree(O) == 4


def test_tp_sp_cp_ep_offload_modes():
    p = placement_for(Layout(dp=2, tp=2, cp=2, ep=2, sequence_parallel=True, offload=frozenset({"optimizer"})))
    assert p.groups["dense"].mode(P, "tp") == Mode.SHARDED
    assert p.groups["replicated"].mode(P, "tp") == Mode.REPLICATED
    assert p.groups["expert"].mode(P, "ep") == Mode.SHARDED
    assert p.groups["expert"].degrees["edp"] == 2 * 2 * 2 // 2   # world/(ep*etp*pp) = 8/2
    assert p.activations["tp"] == Mode.SHARDED and p.activations["cp"] == Mode.SHARDED
    assert p.groups["dense"].offloaded(O) and not p.groups["dense"].offloaded(P)
    assert p.to_table()["optimizer_states"]["host"] == "offloaded"


def test_constructed_placements_are_consistent():
    for z in range(4):
        for dps in (None, 2):
            assert check_placement(placement_for(Layout(dp=4, dp_shard=dps, zero_stage=z, cp=2))) == []


def _group(modes):
    return Placement(groups={"dense": GroupPlacement(degrees={"dp_shard": 4}, modes=modes)})


def test_state_consistency_violation_params_sharded_optimizer_replicated():
    bad = _group({P: {"dp_shard": Mode.SHARDED_WITH_GATHER}, G: {"dp_shard": Mode.SHARDED}})
    v = check_placement(bad)
    assert [x.rule for x in v] == ["state_consistency"] and "optimizer_states" in v[0].message


def test_gradient_integrity_violation_unreduced_gradients():
    v = check_placement(_group({G: {"dp_shard": Mode.MATERIALIZED}}))
    assert v[0].rule == "gradient_integrity" and "dp_shard" in v[0].message


def test_layout_field_domains():
    for kwargs in ({"tp": 0}, {"zero_stage": 4}, {"recompute": "some"}, {"dp": 4, "dp_shard": 3},
                   {"offload": frozenset({"gpu"})}, {"pp": 2, "pipeline_layers": (1, 2, 3)}):
        with pytest.raises(SpecError):
            Layout(**kwargs)
    assert Layout(dp=4, global_batch_size=32, micro_batch_size=2).num_microbatches == 4


def test_uneven_split():
    assert uneven_split(30, 4) == [8, 7, 7, 8]
    assert uneven_split(10, 3) == [4, 3, 3]
    assert sum(uneven_split(61, 8)) == 61


# --- properties -------------------------------------------------------------------------------

@settings(max_examples=examples(200), deadline=None)
@given(dp=st.sampled_from([1, 2, 4, 8, 16, 64, 256]), z1=st.integers(0, 3), z2=st.integers(0, 3),
       tp=st.sampled_from([1, 2, 8]), fw=st.sampled_from(["megatron", "deepspeed", "torchtitan"]))
def test_more_sharding_never_increases_state_memory(dp, z1, z2, tp, fw):
    """Moving a state from replicated to sharded (a higher ZeRO stage) never increases any state."""
    lo, hi = sorted((z1, z2))
    a = model_state_bytes(1e9, Layout(dp=dp, tp=tp, zero_stage=lo, framework=fw))
    b = model_state_bytes(1e9, Layout(dp=dp, tp=tp, zero_stage=hi, framework=fw))
    assert all(b[k] <= a[k] for k in a)


@settings(max_examples=examples(200), deadline=None)
@given(k1=st.integers(0, 6), k2=st.integers(0, 6), z=st.integers(1, 3))
def test_larger_shard_group_never_increases_state_memory(k1, k2, z):
    """HSDP: sharding over a larger dp_shard group (same dp) never increases memory."""
    small, large = sorted((2**k1, 2**k2))
    a = model_state_bytes(7e9, Layout(dp=64, dp_shard=small, zero_stage=z))
    b = model_state_bytes(7e9, Layout(dp=64, dp_shard=large, zero_stage=z))
    assert all(b[k] <= a[k] for k in a)
    # and exactly by the ratio for the sharded optimizer state
    assert b["optimizer_states"] * large == pytest.approx(a["optimizer_states"] * small)


MODEL = from_config(dict(model_type="llama", hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=4, intermediate_size=2816, vocab_size=32000,
                         max_position_embeddings=4096, tie_word_embeddings=False), name="tiny")


@settings(max_examples=examples(40), deadline=None)
@given(dp=st.sampled_from([2, 4, 8]), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2]),
       z1=st.integers(0, 2), z2=st.integers(0, 2))
def test_stage_memory_states_monotone_in_zero_stage(dp, tp, pp, z1, z2):
    lo, hi = sorted((z1, z2))
    c = dataclasses.replace(load_cluster("dgx-h100"), num_gpus=dp * tp * pp)
    kw = dict(dp=dp, tp=tp, pp=pp, global_batch_size=dp * 4, seq_len=1024)
    a = stage_memory(MODEL, c, Layout(zero_stage=lo, **kw), 0)
    b = stage_memory(MODEL, c, Layout(zero_stage=hi, **kw), 0)
    assert b.parameters <= a.parameters and b.gradients <= a.gradients and b.optimizer_states <= a.optimizer_states
