"""One communication model: `step_time` prices exactly the collectives `comm` reports.

Where the two used to disagree, each test below says which copy was right and why, from the
framework's source (NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553, pytorch/torchtitan at
b5bcd76c66d0acb1a08b176d9639425bc55e0b2a). Expected values are hand arithmetic on the ring /
alpha-beta formulas (`collectives.collective_time` is tested against Thakur 2005 elsewhere).
"""

import dataclasses

import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cost import step_time as stt
from planner.cost.collectives import collective_time
from planner.cost.comm import bytes_per_axis, collectives
from planner.cost.memory import stage_layers
from planner.cost.params_flops import count_params
from planner.placement.layout import Layout
from planner.placement.overlap import resolve
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

H, L, HEADS, KV, FF, V = 1024, 4, 16, 4, 2816, 32000
DENSE = from_config(dict(model_type="llama", hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                         num_key_value_heads=KV, intermediate_size=FF, vocab_size=V,
                         max_position_embeddings=4096, tie_word_embeddings=False), name="tiny")
MOE = from_config(dict(model_type="mixtral", hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                       num_key_value_heads=KV, intermediate_size=FF, vocab_size=V, num_local_experts=8,
                       num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False),
                  name="tiny-moe")
TIED = from_config(dict(model_type="llama", hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                        num_key_value_heads=KV, intermediate_size=FF, vocab_size=V,
                        max_position_embeddings=4096, tie_word_embeddings=True), name="tiny-tied")
MOE16 = from_config(dict(model_type="mixtral", hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                         num_key_value_heads=KV, intermediate_size=FF, vocab_size=V, num_local_experts=16,
                         num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False),
                    name="tiny-moe-16")
A100 = load_cluster("dgx-a100-80g", gpus=64)


def _sync(model, layout, stage=0):
    """E, the end-of-step sync the cost model prices for `stage` (all layers, mode none), with the
    gradient reduction overlapped with backward (phase step; without it the same records are
    priced after the backward, in the after-sync piece)."""
    layout = layout.replace(overlap_grad_reduce=True)
    cm = stt.stage_cost_model(model, A100, layout)
    layers = stage_layers(model, layout)[stage]
    return cm.dp_sync.value(stage, cm.counts(layers, ("none",) * model.num_hidden_layers))


def test_megatron_fp16_reduces_gradients_in_fp16():
    """precision.py was right (2 B), step_time's GRAD_REDUCE_BYTES (4 B) was wrong: Megatron forces
    fp32 gradient reduction only for bf16 (megatron/training/arguments.py l. 1204-1217:
    `if args.bf16: ... args.accumulate_allreduce_grads_in_fp32 = True`); the flag itself is
    `store_true`, default False (l. 3069-3071), and the grad buffer dtype is
    `torch.float if grad_reduce_in_fp32 else param.dtype` (megatron/core/distributed/
    param_and_grad_buffer.py l. 924). So fp16 training all-reduces fp16 gradients."""
    psi = count_params(DENSE).total          # pp = tp = 1: the one stage holds every parameter
    fp16 = Layout(dp=8, precision="fp16", global_batch_size=8, seq_len=1024)
    bf16 = dataclasses.replace(fp16, precision="bf16")
    assert bytes_per_axis(collectives(DENSE, fp16))["dp"] == pytest.approx(2 * 7 / 8 * 2 * psi)
    assert bytes_per_axis(collectives(DENSE, bf16))["dp"] == pytest.approx(2 * 7 / 8 * 4 * psi)
    # one all-reduce over the 8 GPUs of one DGX (k = 8), message 2 B x Psi, is what step_time prices
    expected = collective_time("all_reduce", group_size=8, bytes_per_device=2 * psi, cluster=A100,
                               gpus_per_domain=8)
    assert _sync(DENSE, fp16) == pytest.approx(expected, rel=1e-9)
    assert _sync(DENSE, bf16) == pytest.approx(collective_time(
        "all_reduce", group_size=8, bytes_per_device=4 * psi, cluster=A100, gpus_per_domain=8), rel=1e-9)


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    """comm.py was right, step_time was wrong (it reduced routed experts with the dense gradients
    over dp_shard x cp). Megatron keeps expert parameters in their own buffers whose
    data-parallel group is the expert-data-parallel group (megatron/core/distributed/
    distributed_data_parallel.py l. 282-289: `if buffer_key.is_expert_parallel:
    data_parallel_group = self.intra_expt_dp_group`), of size world / (etp x ep x pp)
    (megatron/core/parallel_state.py l. 874-880), ranks ordered etp, ep, edp (l. 887-895).

    dp = 8, ep = 4 on one DGX: dense gradients all-reduced over 8 GPUs, each GPU's 1/4 of the
    routed experts all-reduced over edp = 8 / 4 = 2 GPUs (stride 4, both in the node: k = 2)."""
    counts = count_params(MOE)
    routed = sum(lp.routed_experts for lp in counts.layers)
    dense = counts.total - routed
    layout = Layout(dp=8, ep=4, global_batch_size=8, seq_len=1024)
    got = bytes_per_axis(collectives(MOE, layout))
    assert got["dp"] == pytest.approx(2 * 7 / 8 * 4 * dense)
    assert got["edp"] == pytest.approx(2 * 1 / 2 * 4 * routed / 4)
    expected = (collective_time("all_reduce", group_size=8, bytes_per_device=4 * dense, cluster=A100,
                                gpus_per_domain=8)
                + collective_time("all_reduce", group_size=2, bytes_per_device=4 * routed / 4,
                                  cluster=A100, gpus_per_domain=2))
    assert _sync(MOE, layout) == pytest.approx(expected, rel=1e-9)


def test_pipeline_send_is_split_over_tp_only_with_sequence_parallelism():
    """comm.py was right, step_time was wrong (it divided every send by tp, the scatter/gather of
    Narayanan et al. 2021 §4.1 that the 2021 code had). Current Megatron sends a
    (s / cp [/ tp with SP], b, h) tensor (megatron/core/pipeline_parallel/schedules.py
    `get_tensor_shapes`, l. 2136-2143). tp = 8, pp = 2, s = 2048, b = 1, h = 1024, bf16; the
    stages are 8 GPUs apart, on two DGX nodes (k = 1)."""
    base = Layout(tp=8, pp=2, global_batch_size=4, seq_len=2048)
    for sp, size in ((False, 2048 * H * 2), (True, 2048 * H * 2 / 8)):
        layout = dataclasses.replace(base, sequence_parallel=sp)
        assert bytes_per_axis(collectives(DENSE, layout))["pp"] == pytest.approx(2 * 4 * size)
        assert stt.pipeline_send_s(DENSE, A100, layout) == pytest.approx(
            collective_time("p2p", group_size=2, bytes_per_device=size, cluster=A100, gpus_per_domain=1))


def test_hsdp_all_reduces_the_reduce_scattered_shard_every_micro_batch():
    """comm.py was right on both counts, step_time was wrong (one all-reduce of 1/dp_shard of the
    gradients per step). FSDP2 HSDP reduce-scatters over the shard mesh (dp_shard x cp in
    torchtitan, `dp_shard_cp`) and all-reduces that 1/(dp_shard x cp) shard over dp_replicate in
    every backward; torchtitan does not turn gradient sync off between micro-batches (its only
    `set_requires_gradient_sync` calls are for the LM head inside one loss, torchtitan/components/
    loss.py l. 665-705). dp = 8 = 2 replicas x 4 shards, cp = 2, 3 micro-batches, fp32 reduce."""
    psi = count_params(DENSE).total
    layout = Layout(dp=8, dp_shard=4, cp=2, zero_stage=3, framework="torchtitan",
                    global_batch_size=24, seq_len=1024)
    ar = [c for c in collectives(DENSE, layout) if c.kind == "all_reduce" and c.axis == "dp"]
    assert {(c.count, c.group_size, c.phase) for c in ar} == {(3, 2, "microbatch")}
    assert sum(c.message_bytes for c in ar) == pytest.approx(4 * psi / 8)   # dense + norms


def test_after_sync_collectives_are_priced():
    """The SP norm all-reduce over tp and the tied-embedding all-reduce between first and last
    stage were reported but never timed; Megatron runs both after the DP sync, before the
    optimizer (megatron/core/distributed/finalize_model_grads.py l. 640-676), so they are exposed."""
    layout = Layout(tp=2, pp=2, sequence_parallel=True, global_batch_size=4, seq_len=1024)
    cm = stt.stage_cost_model(TIED, A100, layout)
    records = {c.label: c for c in collectives(TIED, layout, stage=1)}
    norms, tied = records["gradients.norms_under_sp"], records["gradients.tied_embedding"]
    # vocab 32000 padded to 128 x tp = 256 -> 32000 rows, / tp = 2; fp32 main grads
    assert tied.message_bytes == 32000 * H / 2 * 4
    # last stage: 2 layers x 2 RMSNorms of h + the final norm, replicated over tp, fp32
    assert norms.message_bytes == (2 * 2 * H + H) * 4
    counts = cm.counts(stage_layers(TIED, layout)[1], ("none",) * L)
    # tp pair inside a node (k = 2); stages 2 GPUs apart, inside the node too (k = 2)
    expected = (collective_time("all_reduce", group_size=2, bytes_per_device=norms.message_bytes,
                                cluster=A100, gpus_per_domain=2)
                + collective_time("all_reduce", group_size=2, bytes_per_device=tied.message_bytes,
                                  cluster=A100, gpus_per_domain=2))
    assert cm.after_sync.value(1, counts) == pytest.approx(expected, rel=1e-9)


def _layouts():
    deg = st.sampled_from([1, 2, 4])
    return st.builds(
        lambda tp, pp, cp, dp, ep, z, sp, rc, fw, m, hsdp, off, prec, grad, param: Layout(
            tp=tp, pp=pp, cp=cp, dp=dp, ep=ep if (dp * cp * tp) % ep == 0 else 1, zero_stage=z,
            dp_shard=dp // 2 if hsdp and dp > 1 else None, sequence_parallel=sp and tp > 1,
            recompute=rc, framework=fw, global_batch_size=dp * m, seq_len=1024, offload=off,
            precision=prec, overlap_grad_reduce=grad, overlap_param_gather=param),
        deg, deg, deg, deg, deg, st.integers(0, 3), st.booleans(),
        st.sampled_from(["none", "selective", "full"]),
        st.sampled_from(["megatron", "deepspeed", "torchtitan"]), st.integers(1, 3), st.booleans(),
        st.sampled_from([frozenset(), frozenset({"optimizer"}), frozenset({"parameters"})]),
        st.sampled_from(["bf16", "fp16"]), st.sampled_from([None, True, False]),
        st.sampled_from([None, True, False]))


def _table(colls):
    """(phase, axis, kind, group size, axes, label) -> bytes sent per device per step."""
    out = {}
    for c in colls:
        key = (c.phase, c.axis, c.kind, c.group_size, c.axes, c.label)
        out[key] = out.get(key, 0.0) + c.total_bytes_per_device
    return out


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(layout=_layouts(), model=st.sampled_from([DENSE, MOE, TIED]), data=st.data())
def test_step_time_prices_the_reported_collectives(layout, model, data):
    """For random layouts and stages: the records the cost model prices for a stage are the ones
    `comm.collectives` reports (same collectives, groups, phases and bytes), and its model-state
    pieces are exactly the alpha-beta time of those reported records."""
    stage = data.draw(st.integers(0, layout.pp - 1))
    cm = stt.stage_cost_model(model, A100, layout)
    modes = (layout.recompute,) * model.num_hidden_layers
    counts = cm.counts(stage_layers(model, layout)[stage], modes)
    reported = collectives(model, layout, stage)
    priced, shown = _table(cm.stage_collectives(stage, counts)), _table(reported)
    assert priced.keys() == shown.keys()
    for key in shown:
        assert priced[key] == pytest.approx(shown[key], rel=1e-9), key
    # the pieces are the time of the reported records, phase by phase
    m = layout.num_microbatches
    share = stt._sharing(layout, A100, stt.coll.DEFAULT_RANK_ORDER)

    def t(phases, per=1):
        """Records with equal `Collective.key` are one call over their summed message (one
        bucketed reduction: the dense and replicated groups share Megatron's buffer)."""
        calls = {}
        for c in reported:
            if c.phase in phases.split():
                calls[c.key] = (c, calls.get(c.key, (c, 0.0))[1] + c.message_bytes)
        total = 0.0
        for c, size in calls.values():
            if size > 0:
                k = stt._record_sharing(c, layout, A100, share, stt.coll.DEFAULT_RANK_ORDER)
                total += c.count / per * stt._call_time(c, k, A100, size)
        return total

    for piece, phase, per in (("dp_sync", "step", 1), ("after_sync", "after_sync sync after_step", 1),
                              ("offload", "host", 1), ("param_sync", "param_sync", 1)):
        assert getattr(cm, piece).value(stage, counts) == pytest.approx(t(phase, per), rel=1e-9, abs=1e-15)
    # the re-gathers of fully recomputed layers are hidden with the other gathers only with prefetch
    prefetch = resolve(layout).overlap_param_gather
    z, zx = cm.state_traffic.value(stage, counts), cm.state_exposed.value(stage, counts)
    assert z == pytest.approx(t("microbatch", m) + prefetch * t("recompute", m), rel=1e-9, abs=1e-15)
    assert zx == pytest.approx(t("microbatch_exposed", m) + (not prefetch) * t("recompute", m),
                               rel=1e-9, abs=1e-15)


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(layout=_layouts(), model=st.sampled_from([DENSE, MOE, TIED]))
def test_search_bound_on_state_traffic_is_the_stages_sum(layout, model):
    """`microbatch_state_traffic_s` (the search's cheap bound) at total / pp, times pp, is the sum
    over the stages of the cost model's per-micro-batch model-state traffic with no re-gather:
    the same records, so the bound stays valid (<=) and tight (=)."""
    plain = layout.replace(recompute="none")
    cm = stt.stage_cost_model(model, A100, plain)
    modes = ("none",) * model.num_hidden_layers
    total = sum(cm.state_traffic.value(s, cm.counts(layers, modes))
                for s, layers in enumerate(stage_layers(model, plain)))
    bound = plain.pp * stt.microbatch_state_traffic_s(
        model, A100, plain, stt.total_stage_params(model, plain) / plain.pp)
    assert bound <= total * (1 + 1e-9) + 1e-15
    assert bound == pytest.approx(total, rel=1e-9, abs=1e-15)


BIG = from_config(dict(model_type="llama", hidden_size=8192, num_hidden_layers=2, num_attention_heads=64,
                       num_key_value_heads=8, intermediate_size=28672, vocab_size=V,
                       max_position_embeddings=4096, tie_word_embeddings=False), name="big-layers")


def test_zero3_regather_of_fully_recomputed_layers_follows_the_framework():
    """Neither copy was right: step_time re-gathered every fully recomputed layer once more per
    micro-batch, comm.py never did. FSDP2 (torchtitan) does not: the recompute runs after the
    block's pre-backward unshard, and `_pre_forward` skips the unshard in that state (pytorch
    torch/distributed/fsdp/_fully_shard/_fsdp_state.py). DeepSpeed ZeRO-3 keeps a parameter
    whose module recurs within stage3_max_reuse_distance = 1e9 elements of the trace
    (deepspeedai/DeepSpeed@edaa722 runtime/zero/config.py l. 244, partitioned_param_coordinator.py
    l. 634-664): after a submodule's recompute forward the trace runs twice the layer's later
    parameters before its backward, so the first P - 0.5e9 of a P-parameter layer are released and
    gathered again. Here a Llama-70B-shaped layer: P = 2h^2 + 2h x 1024 + 3 h x 28672 + 2h with
    h = 8192 = 855,654,400, 2 B per bf16 element, dp = 8 in one node, 2 micro-batches."""
    p = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert p == 855_654_400
    base = Layout(dp=8, zero_stage=3, framework="deepspeed", global_batch_size=16, seq_len=1024)
    full = base.replace(recompute="full")
    regather = [c for c in collectives(BIG, full) if c.phase == "recompute"]
    # one all-gather per layer per micro-batch: 2 layers x 2 micro-batches
    # (dense and norm parts of the layer: one key, one call)
    assert {(c.count, c.group_size, c.key) for c in regather} == {(4, 8, regather[0].key)}
    assert sum(c.message_bytes for c in regather) == pytest.approx((p - 5e8) * 2)
    extra = collective_time("all_gather", group_size=8, bytes_per_device=(p - 5e8) * 2, cluster=A100,
                            gpus_per_domain=8)
    cm = stt.stage_cost_model(BIG, A100, base)
    (row,) = cm.state_traffic.coef
    assert row[2] - row[0] == pytest.approx(extra, rel=1e-9)      # per layer, per micro-batch
    # small layers (the 4-layer tiny model, 12.6M per layer) and FSDP2 gather twice, not three times
    for model, layout in ((DENSE, full), (BIG, full.replace(framework="torchtitan"))):
        assert not [c for c in collectives(model, layout) if c.phase == "recompute"]
        assert bytes_per_axis(collectives(model, layout))["dp"] == pytest.approx(
            bytes_per_axis(collectives(model, layout.replace(recompute="none")))["dp"])


def test_dp_sync_bytes_count_unsplit_norms_and_the_padded_vocab():
    """comm.py was right, step_time was wrong (it divided every non-expert parameter, norms
    included, by tp and used the model's unpadded embedding rows). Megatron keeps norm weights
    whole on every tp rank (they are all-reduced over tp under SP by
    `_allreduce_non_tensor_model_parallel_grads`) and pads the vocab to a multiple of
    128 x tp (`--make-vocab-size-divisible-by`, `_vocab_size_with_padding`), so the DP all-reduce
    at tp = 2 carries, per GPU: 4 layers x ((attention 2h^2 + 2h x 256 + MLP 3h x 2816) / 2 + two
    norms 2h) + embedding and LM head 32256 rows x h / 2 each + final norm h, in fp32 (4 B)."""
    model = from_config(dict(model_type="llama", hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                             num_key_value_heads=KV, intermediate_size=FF, vocab_size=32001,
                             max_position_embeddings=4096, tie_word_embeddings=False), name="odd-vocab")
    layer = (2 * H * H + 2 * H * 256 + 3 * H * FF) // 2 + 2 * H
    elements = L * layer + 2 * 32256 * H // 2 + H
    assert elements == 55_583_744
    layout = Layout(tp=2, dp=4, global_batch_size=4, seq_len=1024)
    assert bytes_per_axis(collectives(model, layout))["dp"] == pytest.approx(2 * 3 / 4 * 4 * elements)
    # tp pairs innermost: a dp group of 4 has a stride of 2, all in one node (k = 4)
    assert _sync(model, layout) == pytest.approx(collective_time(
        "all_reduce", group_size=4, bytes_per_device=4 * elements, cluster=A100, gpus_per_domain=4),
        rel=1e-9)


def test_expert_all_to_all_is_split_over_tp_only_with_sequence_parallelism():
    """comm.py was right, step_time was wrong (it divided the routed tokens by tp always).
    Megatron refuses MoE with TP but without SP in training (megatron/core/transformer/moe/
    moe_layer.py l. 636-640), and with SP each tp rank dispatches its s/tp tokens; without SP
    (other frameworks) every tp rank holds all s tokens. Per MoE layer and micro-batch: dispatch +
    combine, forward and backward, of s/cp [/tp] x top-2 x h x 2 B."""
    for sp, tokens in ((True, 1024 // 2), (False, 1024)):
        layout = Layout(tp=2, dp=4, ep=4, sequence_parallel=sp, global_batch_size=4, seq_len=1024)
        routed = tokens * 2 * H * 2
        got = bytes_per_axis(collectives(MOE, layout))["ep"]
        assert got == pytest.approx(L * 4 * 3 / 4 * routed)
        # priced: 2 all-to-alls per forward pass and 2 backward, exposed, per layer
        share = stt._sharing(layout, A100, stt.coll.DEFAULT_RANK_ORDER)
        a2a = collective_time("all_to_all", group_size=4, bytes_per_device=routed, cluster=A100,
                              gpus_per_domain=stt._ep_sharing(layout, A100, stt.coll.DEFAULT_RANK_ORDER))
        terms = stt._layer_comm(MOE, A100, layout, 0, 1.0, stt.coll.DEFAULT_RANK_ORDER)
        tp_ar = collective_time("all_reduce" if not sp else "all_gather", group_size=2,
                                bytes_per_device=1024 * H * 2, cluster=A100, gpus_per_domain=share["tp"])
        tp_per_pass = 2 * tp_ar if not sp else 4 * tp_ar     # 2 AR, or 2 AG + 2 RS (same time each)
        assert terms[0][0] == pytest.approx(tp_per_pass + 2 * a2a, rel=1e-9)


@pytest.mark.parametrize("ep, dp", [(16, 16), (8, 16), (4, 8)])
def test_flex_dispatch_records_priced_are_the_reported_ones(ep, dp):
    """The flex dispatcher's records depend on where the EP group sits (its GPUs per node, 8 on a
    DGX A100): the cost model prices the records `comm.collectives` reports for that placement
    (network part across nodes only when ep > 8, NVLink part inside one)."""
    layout = Layout(dp=dp, ep=ep, global_batch_size=dp, seq_len=1024, moe_dispatcher="flex")
    cluster = load_cluster("dgx-a100-80g", gpus=dp)
    cm = stt.stage_cost_model(MOE16, cluster, layout)
    counts = cm.counts(stage_layers(MOE16, layout)[0], ("none",) * MOE16.num_hidden_layers)
    k = stt._ep_sharing(layout, cluster, stt.coll.DEFAULT_RANK_ORDER)
    priced, shown = _table(cm.stage_collectives(0, counts)), _table(collectives(
        MOE16, layout, 0, ep_gpus_per_domain=k))
    assert priced.keys() == shown.keys()
    for key in shown:
        assert priced[key] == pytest.approx(shown[key], rel=1e-9), key
    labels = {key[5] for key in shown if key[1] == "ep"}
    assert labels == ({"ep.flex.network", "ep.flex.nvlink"} if ep > 8 else {"ep.flex.nvlink"})
