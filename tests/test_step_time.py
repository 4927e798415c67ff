"""Step-time model: a single-GPU step by hand arithmetic, then the structure of the split."""

import pytest

from planner.cost.compute import load_calibration
from planner.cost.step_time import layer_times, stage_layers, step_time
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config, load_model

H, A, L, V, S = 1024, 16, 2, 1024, 1024
TINY = from_config(dict(model_type="gpt", hidden_size=H, num_attention_heads=A, num_hidden_layers=L,
                        vocab_size=V, intermediate_size=4 * H, max_position_embeddings=S,
                        tie_word_embeddings=True), name="tiny-gpt")
A100 = load_cluster("dgx-a100-80g", gpus=64)


def test_single_gpu_step_by_hand():
    layout = Layout(seq_len=S, global_batch_size=1)
    cal = load_calibration()                                  # the committed A100 constants
    e_max, d_half = cal.families["A100"].e_max, cal.families["A100"].d_half
    # linear GEMMs: e_max * d / (d + d_half) with d = min(h/tp, tokens) = 1024; the FlashAttention
    # core (L = S, no CP) runs the causal (S + 1) / 2S of its 4 S H FLOPs per token forward at
    # e_max * r_c L / (L + l_c), and 2.5 x those backward at e_max * r_b L / (L + l_b)
    rate = 312e12 * e_max * 1024 / (1024 + d_half)
    causal_rate = 312e12 * e_max * cal.causal_plateau_ratio * S / (S + cal.causal_l_half)
    backward_rate = 312e12 * e_max * cal.backward_plateau_ratio * S / (S + cal.backward_l_half)
    core = 4 * S * H * (S + 1) / (2 * S)
    per_token_linear = 2 * (12 * H * H + 9 * H) / rate       # Kaplan terms
    # fused elementwise kernels (step_time.fused_elementwise_bytes): norms + residual adds 20 H and
    # the GeLU's read + write of the 4H-wide MLP 16 H bytes per token forward, x 3 with the backward
    elementwise = (20 * H + 4 * 4 * H) / (2039e9 * 0.8)
    layers = L * S * (3 * (per_token_linear + elementwise)    # forward + backward (2x)
                      + core / causal_rate + 2.5 * core / backward_rate)
    head = 6 * S * V * H / rate                               # LM head fwd + bwd
    params = (V + S) * H + L * (12 * H * H + 13 * H) + 2 * H  # embeddings, blocks, final LayerNorm
    optimizer = params * 30 / (2039e9 * 0.8)                  # adamw bytes / (HBM x 0.8)
    got = step_time(TINY, A100, layout)
    assert got.step == pytest.approx(layers + head + optimizer, rel=1e-9)
    assert got.optimizer == pytest.approx(optimizer, rel=1e-9)
    assert got.tokens_per_s == pytest.approx(S / got.step)
    assert got.mfu == pytest.approx(got.hfu)   # no recompute


def test_split_adds_up_and_full_recompute_costs_a_forward():
    layout = Layout(tp=2, pp=2, dp=2, seq_len=S, global_batch_size=16, micro_batch_size=1)
    none = step_time(TINY, A100, layout)
    full = step_time(TINY, A100, Layout(**{**layout.__dict__, "recompute": "full"}))
    for t in (none, full):
        parts = t.compute + t.communication_exposed + t.pipeline_bubble + t.recompute + t.optimizer
        assert parts == pytest.approx(t.step, rel=1e-9)
    # full recompute re-runs the layers forward (1/3 of their fwd+bwd); the LM head is not re-run
    assert none.recompute == 0 and 0.8 * full.compute / 3 < full.recompute <= full.compute / 3
    assert full.hfu > full.mfu and full.step > none.step


def test_layer_times_ordered_and_tp_comm_exposed():
    layout = Layout(tp=8, seq_len=S, global_batch_size=1)
    t = layer_times(TINY, A100, layout, 0)
    assert t["none"] < t["selective"] < t["full"]
    one = layer_times(TINY, A100, Layout(seq_len=S, global_batch_size=1), 0)["none"]
    assert t["none"] > one / 8        # TP all-reduces are not free


def test_bubble_follows_1f1b():
    base = dict(tp=1, pp=2, dp=1, seq_len=S, micro_batch_size=1)
    t4 = step_time(TINY, A100, Layout(**base, global_batch_size=4))
    slot = (t4.compute + t4.recompute) / 4
    assert t4.pipeline_bubble == pytest.approx(slot, rel=0.05)   # (pp - 1) slots of one stage


def test_stage_layers_even_split_and_errors():
    assert stage_layers(TINY, Layout(pp=2)) == ((0,), (1,))
    with pytest.raises(SpecError, match="recompute_layers"):
        step_time(TINY, A100, Layout(seq_len=S), recompute_layers=("full",))
    with pytest.raises(SpecError, match="pipeline_layers"):
        step_time(TINY, A100, Layout(pp=2, pipeline_layers=(2, 1), seq_len=S, global_batch_size=2))


def test_per_layer_recompute_mix_between_uniform_choices():
    layout = Layout(seq_len=S, global_batch_size=2)
    none = step_time(TINY, A100, layout).step
    full = step_time(TINY, A100, layout, recompute_layers=("full", "full")).step
    mixed = step_time(TINY, A100, layout, recompute_layers=("full", "none")).step
    assert none < mixed < full


def test_layer_time_cache_equals_a_fresh_evaluation():
    # The cache keys on the axes' domain sharing instead of dp/pp: every entry must equal the
    # uncached function, for layouts that share an entry and for ones that must not.
    from planner.cost import step_time as st
    mixtral = load_model("mixtral-8x7b")
    layouts = [Layout(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, seq_len=4096, global_batch_size=512,
                      micro_batch_size=b)
               for tp, cp, dp, pp, ep, b in [(2, 1, 4, 8, 1, 1), (2, 1, 8, 4, 1, 1), (2, 1, 1, 32, 1, 1),
                                             (4, 2, 8, 1, 8, 2), (4, 2, 1, 8, 1, 2), (8, 1, 8, 1, 8, 1)]]
    for layout in layouts:
        for mode in ("none", "selective", "full"):
            got = st.layer_time(mixtral, A100, layout, 0, mode)
            parts = st._layer_parts(mixtral, A100, layout, 0, st.coll.DEFAULT_RANK_ORDER, True)
            fresh = st._layer_time(parts, mode)
            assert got == fresh
    # layer_time_modes is layer_time per mode, in RECOMPUTE_MODES order, cold cache or warm.
    st._LAYER_TIMES.clear()
    for layout in layouts:
        for index in (0, 1):
            got = st.layer_time_modes(mixtral, A100, layout, index)
            fresh = [st._layer_time(st._layer_parts(mixtral, A100, layout, index,
                                                    st.coll.DEFAULT_RANK_ORDER, True), mode)
                     for mode in ("none", "selective", "full")]
            assert list(got) == fresh
            assert got == st.layer_time_modes(mixtral, A100, layout, index)
    # The same cache entry is not served to another cluster object, even an equal one.
    other = load_cluster("dgx-a100-80g", gpus=64)
    assert st.layer_time(mixtral, other, layouts[0], 0, "none") == st.layer_time(
        mixtral, A100, layouts[0], 0, "none")


@pytest.mark.parametrize("name, gpus, degrees", [
    ("mixtral-8x7b", 64, dict(dp=8, tp=2, pp=4, ep=8, zero_stage=1, sequence_parallel=True)),
    ("mixtral-8x7b", 64, dict(dp=16, pp=4, ep=4, zero_stage=1)),  # ZeRO-2 reduces per micro-batch
    ("llama-3.1-8b", 16, dict(dp=4, tp=2, pp=2, zero_stage=1, sequence_parallel=True)),
    ("llama-3.1-8b", 16, dict(dp=2, cp=2, pp=4, zero_stage=0))])
def test_step_sync_total_is_the_sum_of_the_stages_dp_sync_for_any_split(name, gpus, degrees):
    """What the search's cheap bound relies on (`plan._cheap_bound`): the end-of-step DP sync
    summed over the stages does not depend on the split, and `step_sync_total_s` is that sum."""
    from planner.cost.step_time import layer_kinds, stage_cost_model, step_sync_total_s

    model, cluster = load_model(name), load_cluster("dgx-h100", gpus=gpus)
    layout = Layout(global_batch_size=256, seq_len=4096, overlap_grad_reduce=True, **degrees)
    costs, (kinds, reps) = stage_cost_model(model, cluster, layout), layer_kinds(model)
    n, pp = model.num_hidden_layers, layout.pp
    for split in ([n // pp + (s < n % pp) for s in range(pp)], [n - pp + 1] + [1] * (pp - 1)):
        total, start = 0.0, 0
        for s, k in enumerate(split):
            counts = [[0, 0, 0] for _ in reps]
            for i in range(start, start + k):
                counts[kinds[i]][0] += 1
            start += k
            total += costs.dp_sync.value(s, counts)
        assert total == pytest.approx(step_sync_total_s(model, cluster, layout), rel=1e-12)
    assert total > 0


def test_torchtitan_selective_recompute_is_its_op_policy_not_the_attention_core():
    """torchtitan's selective op AC saves the SDPA output and every odd-numbered matmul and re-runs
    the even ones (Llama 3.1 8B: wk 4096 x 1024, wo 4096 x 4096, w3 4096 x 14336 = 79,691,776
    weight elements per token, hand arithmetic) and the elementwise ops: its recompute grows
    linearly with the tokens, where Megatron's default (the attention core) grows with s^2."""
    from planner.cost.activations import op_sac_recomputed_matmuls
    from planner.cost.step_time import layer_time

    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    assert op_sac_recomputed_matmuls(model, 0) == 4096 * 1024 + 4096 * 4096 + 4096 * 14336

    def recompute(framework: str, seq: int) -> float:
        layout = Layout(dp=8, zero_stage=3, framework=framework, seq_len=seq, global_batch_size=8,
                        recompute="selective", torch_compile=framework == "torchtitan")
        return layer_time(model, cluster, layout, 0, "selective").recompute_s

    titan = recompute("torchtitan", 16384) / recompute("torchtitan", 8192)
    megatron = recompute("megatron", 16384) / recompute("megatron", 8192)
    assert titan == pytest.approx(2.0, rel=0.02) and megatron > 3.0, (titan, megatron)


def test_torchtitan_op_sac_with_the_fused_wqkv_reruns_wo_and_w3():
    """With one wqkv mm (torchtitan from 3396a4b, `Layout.fused_qkv`, the default) the re-run mms
    are the 2nd and 4th of wqkv, wo, w1, w3, w2: wo 4096 x 4096 + w3 4096 x 14336 per token (Llama
    3.1 8B; wk's 4096 x 1024 is no longer re-run), and no re-run mm reads the attention's gathered
    input (Llama 3.1 70B: (0, w3 8192 x 28672)), so under AsyncTP nothing hides that re-gather and
    the recompute grows against the unfused block's."""
    from planner.cost import step_time as st
    from planner.cost.activations import op_sac_recomputed_matmuls, op_sac_regather_consumers

    assert op_sac_recomputed_matmuls(load_model("llama-3.1-8b"), 0, True) == 4096 * 4096 + 4096 * 14336
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=8)
    assert op_sac_regather_consumers(model, 0, True) == (0, 8192 * 28672)

    def regather(fused: bool) -> float:
        lay = Layout(tp=8, dp=1, sequence_parallel=True, framework="torchtitan", seq_len=8192, global_batch_size=1,
                     recompute="selective", tp_comm_overlap=True, torch_compile=True, fused_qkv=fused)
        return (st.layer_time(model, cluster, lay, 0, "selective").recompute_s
                - st._torchtitan_op_sac_s(model, cluster, lay, 0))

    assert regather(True) > regather(False) > 0


def test_torchtitan_op_sac_regathers_the_sequence_parallel_inputs():
    """torchtitan's op policy saves reduce-scatter outputs but not all-gather outputs, so with TP and
    SP its recompute gathers the block's two normed inputs again (attention, MLP): without AsyncTP
    that adds two forward all-gathers -- half of one forward pass's exposed TP traffic (2 all-gathers
    + 2 reduce-scatters of the same b s h bytes, Korthikanti 2022 §4.2.2) -- to the recompute; under
    AsyncTP the re-run w3 GEMM hides part of its gather, so the addition is positive and smaller.
    At tp 1 the recompute is the op policy's compute alone. Llama 3.1 70B, one DGX H100, seq 8192,
    micro-batch 1."""
    from planner.cost import step_time as st
    from planner.cost.activations import op_sac_regather_consumers

    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=8)
    # the re-run matmuls reading the gathered inputs: wk 8192 x 1024, w3 8192 x 28672 (per token)
    assert op_sac_regather_consumers(model, 0) == (8192 * 1024, 8192 * 28672)

    def layout(tp: int, async_tp: bool) -> Layout:
        return Layout(tp=tp, dp=8 // tp, sequence_parallel=tp > 1, framework="torchtitan", seq_len=8192,
                      global_batch_size=8 // tp, recompute="selective", tp_comm_overlap=async_tp,
                      torch_compile=True)

    def added(tp: int, async_tp: bool) -> float:
        lay = layout(tp, async_tp)
        return (st.layer_time(model, cluster, lay, 0, "selective").recompute_s
                - st._torchtitan_op_sac_s(model, cluster, lay, 0))

    forward_pass_tp = st.layer_time(model, cluster, layout(8, False), 0, "none").comm_s / 2
    assert added(8, False) == pytest.approx(forward_pass_tp / 2, rel=1e-9)
    assert 0 < added(8, True) < added(8, False)
    assert added(1, False) == 0
