"""Collectives from the placement equal the closed forms (ring convention), for random degrees."""

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.comm import bytes_per_axis, collectives, ring_bytes
from planner.cost.params_flops import count_params
from planner.placement.layout import Layout
from planner.specs.model import from_config, load_model

H, L, HEADS, KV, D, FF, V = 1024, 8, 16, 4, 64, 2816, 32000
MODEL = from_config(dict(model_type="llama", hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                         num_key_value_heads=KV, intermediate_size=FF, vocab_size=V,
                         max_position_embeddings=4096, tie_word_embeddings=False), name="tiny")


def test_ring_convention():
    assert ring_bytes("all_reduce", 80, 8) == 2 * 7 / 8 * 80
    assert ring_bytes("all_gather", 80, 8) == ring_bytes("reduce_scatter", 80, 8) == 70
    assert ring_bytes("all_to_all", 80, 4) == 60 and ring_bytes("p2p", 80, 2) == 80


@settings(max_examples=examples(150), deadline=None)
@given(dp=st.sampled_from([2, 3, 4, 8, 16]), z=st.integers(0, 3), m=st.integers(1, 4))
def test_dp_volume_closed_form(dp, z, m):
    """ZeRO §7: DP / ZeRO-1 / ZeRO-2 move 2Psi per step (ZeRO-2: reduce-scatter per micro-batch),
    ZeRO-3 3Psi per micro-batch step (all-gather fwd + bwd + reduce-scatter); deepspeed 2-byte grads."""
    layout = Layout(dp=dp, zero_stage=z, framework="deepspeed", global_batch_size=dp * m)
    psi = count_params(MODEL).total
    got = bytes_per_axis(collectives(MODEL, layout))["dp"]
    f = (dp - 1) / dp * 2 * psi          # (n-1)/n x M with M = 2 B x Psi
    expected = {0: 2 * f, 1: 2 * f, 2: (m + 1) * f, 3: 3 * m * f}[z]
    assert got == pytest.approx(expected, rel=1e-9)


@settings(max_examples=examples(100), deadline=None)
@given(tp=st.sampled_from([2, 4, 8]), sp=st.booleans(), m=st.integers(1, 3),
       rc=st.sampled_from(["none", "selective", "full"]), s=st.sampled_from([512, 2048]))
def test_tp_volume_closed_form(tp, sp, m, rc, s):
    """Shoeybi §3 / Korthikanti §4.2.2: per layer per micro-batch 2 all-reduces forward, 2 backward,
    +2 with full recompute, of b·s·h·2 B; SP replaces each with all-gather + reduce-scatter (same bytes)."""
    layout = Layout(tp=tp, sequence_parallel=sp, recompute=rc, global_batch_size=m, seq_len=s)
    colls = [c for c in collectives(MODEL, layout) if c.label == "tp.layers"]
    passes = 3 if rc == "full" else 2
    expected = L * m * 2 * passes * 2 * (tp - 1) / tp * s * H * 2
    assert sum(c.total_bytes_per_device for c in colls) == pytest.approx(expected)


@settings(max_examples=examples(60), deadline=None)
@given(cp=st.sampled_from([2, 4, 8]), tp=st.sampled_from([1, 2, 4]), m=st.integers(1, 3))
def test_cp_volume_closed_form(cp, tp, m):
    """Ring attention: (cp-1) K/V chunk sends forward, (cp-1) K/V + dK/dV backward, per layer per
    micro-batch; local K/V = 2 x ceil(n_kv/tp) x d x s/cp x 2 B."""
    s = 4096
    layout = Layout(cp=cp, tp=tp, global_batch_size=m, seq_len=s)
    kv = 2 * -(-KV // tp) * D * (s // cp) * 2
    got = sum(c.total_bytes_per_device for c in collectives(MODEL, layout) if c.axis == "cp")
    assert got == pytest.approx(L * m * (cp - 1) * 3 * kv)


@settings(max_examples=examples(60), deadline=None)
@given(pp=st.sampled_from([2, 4]), vpp=st.sampled_from([1, 2]), m=st.integers(1, 8))
def test_pp_volume_closed_form(pp, vpp, m):
    """One activation send forward and one gradient send backward per micro-batch per virtual stage."""
    layout = Layout(pp=pp, vpp=vpp, global_batch_size=m, seq_len=1024)
    got = bytes_per_axis(collectives(MODEL, layout)).get("pp", 0)
    assert got == 2 * m * vpp * 1024 * H * 2


def test_ep_all_to_all_closed_form():
    """Mixtral-8x7B, ep=4: per MoE layer per micro-batch 4 all-to-alls (dispatch+combine, fwd+bwd) of
    s x top-2 x h x 2 B, (ep-1)/ep of it leaves each device."""
    model = load_model("mixtral-8x7b")
    layout = Layout(dp=4, ep=4, global_batch_size=4, seq_len=4096)
    got = bytes_per_axis(collectives(model, layout))["ep"]
    assert got == pytest.approx(32 * 4 * 3 / 4 * 4096 * 2 * 4096 * 2)


def test_megatron_fp32_grad_reduce_and_hsdp():
    """Megatron bf16 reduces fp32 main grads: DP all-reduce of 4 B x Psi; HSDP reduce-scatters over
    dp_shard then all-reduces the 1/dp_shard shard over dp_replicate."""
    psi = count_params(MODEL).total
    got = bytes_per_axis(collectives(MODEL, Layout(dp=4, global_batch_size=4)))["dp"]
    assert got == pytest.approx(2 * 3 / 4 * 4 * psi)
    colls = collectives(MODEL, Layout(dp=8, dp_shard=4, zero_stage=3, framework="torchtitan",
                                      global_batch_size=8))
    ar = [c for c in colls if c.kind == "all_reduce" and c.axis == "dp"]
    assert {c.group_size for c in ar} == {2}
    assert sum(c.message_bytes for c in ar) == pytest.approx(4 * psi / 4)


def test_torchtitan_zero2_gathers_parameters_every_microbatch():
    """FSDP2 reshards after every backward (`reshard_after_backward` default True), so torchtitan's
    ZeRO-2 (reshard-after-forward "never") all-gathers the bf16 parameters once per micro-batch:
    m (n-1)/n 2 Psi, beside the m fp32 reduce-scatters m (n-1)/n 4 Psi (torchtitan reduces in
    fp32); Megatron's ZeRO-2 gathers the updated parameters once per step."""
    psi, dp, m = count_params(MODEL).total, 4, 3
    f = (dp - 1) / dp * psi
    titan = collectives(MODEL, Layout(dp=dp, zero_stage=2, framework="torchtitan", global_batch_size=dp * m))
    gathers = [c for c in titan if c.kind == "all_gather" and c.axis == "dp"]
    assert {c.phase for c in gathers} == {"microbatch"} and {c.count for c in gathers} == {m}
    assert bytes_per_axis(titan)["dp"] == pytest.approx(m * 2 * f + m * 4 * f)
    megatron = collectives(MODEL, Layout(dp=dp, zero_stage=2, framework="megatron", global_batch_size=dp * m))
    assert {c.count for c in megatron if c.kind == "all_gather" and c.axis == "dp"} == {1}


def test_offload_traffic():
    """ZeRO-Offload §4 as DeepSpeed runs it (`comm._offload`): one micro-batch of ZeRO-2 moves the
    bf16 gradient shard to the host accumulator and back (2 + 2 B), the fp32 shard down at the
    boundary (4 B), the updated bf16 parameter shard up after the CPU step (2 B)."""
    psi = count_params(MODEL).total
    colls = collectives(MODEL, Layout(dp=4, zero_stage=2, framework="deepspeed", global_batch_size=4,
                                      offload=frozenset({"optimizer"})))
    host = bytes_per_axis(colls)["host"]
    assert host == pytest.approx((2 + 2 + 4 + 2) * psi / 4)
