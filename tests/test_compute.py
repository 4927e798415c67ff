"""Compute model: fp8 on linear GEMMs only, grouped expert GEMMs at their own shape, FlashAttention
at short chunks, and the per-family calibration data (`calibration/training.yaml`)."""

import zlib
from pathlib import Path

import pytest
import yaml

from planner import calibrate
from planner.cost import compute
from planner.cost.compute import load_calibration
from planner.cost.step_time import layer_time
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

H, A, S = 1024, 16, 1024
GPT = from_config(dict(model_type="gpt", hidden_size=H, num_attention_heads=A, num_hidden_layers=2,
                       vocab_size=1024, intermediate_size=4 * H, max_position_embeddings=S,
                       tie_word_embeddings=True), name="tiny-gpt")
E, K, F = 64, 2, 512          # experts, top_k, expert width
MOE = from_config(dict(model_type="mixtral", hidden_size=H, num_attention_heads=A, num_key_value_heads=A,
                       num_hidden_layers=2, vocab_size=1024, intermediate_size=F, num_local_experts=E,
                       num_experts_per_tok=K, max_position_embeddings=S, tie_word_embeddings=True),
                  name="tiny-moe")
H100 = load_cluster("dgx-h100", gpus=8)
A100 = load_cluster("dgx-a100-80g", gpus=8)
CAL = load_calibration()


def test_fp8_speeds_only_the_linear_gemms():
    # One GPT layer, one GPU, 1024 tokens: linear FLOPs 2 (12 H^2 + 9 H) per token (Kaplan, with
    # biases), attention core 4 S H per token = 4096/(24*1024 + 18 + 4096) = 14.3% of the FLOPs.
    h100 = CAL.families["H100"]
    lin, att = 2 * (12 * H * H + 9 * H), 4 * S * H
    gemm = 1024 / (1024 + h100.d_half)                     # d = min(h/tp, tokens) = 1024
    # FlashAttention chunk = S (no CP), causal: (S + 1) / 2S of the square at the causal curve
    flash = CAL.causal_plateau_ratio * S / (S + CAL.causal_l_half)
    attn_s = S * att * (S + 1) / (2 * S) / (989.4e12 * h100.e_max * flash)  # bf16 core in both precisions
    bf16 = S * lin / (989.4e12 * h100.e_max * gemm) + attn_s
    # fp8: linear at the fp8 peak and fp8_e_max; the casts move 6 bytes per linear input /
    # output-gradient element (amax read 2, cast read 2, two fp8 copies 1 + 1): Q/K/V in h + out
    # 3h, O in h + out h, up in h + out 4h, down 4h + h = 16 h elements per token, a third of them
    # per forward-equivalent pass, at 0.8 x 3350 GB/s.
    cast_s = S * 6 * 16 * H / 3 / (3350e9 * 0.8)
    # fused elementwise kernels (step_time.fused_elementwise_bytes), both precisions: two norms
    # 8 H + two residual adds 12 H + the GeLU's read and write of the 4H-wide MLP 16 H bytes per
    # token (no RoPE: GPT's positions are learned), at 0.8 x 3350 GB/s
    elementwise_s = S * (20 * H + 4 * 4 * H) / (3350e9 * 0.8)
    bf16 += elementwise_s
    fp8 = S * lin / (1978.9e12 * h100.fp8_e_max * gemm) + attn_s + cast_s + elementwise_s
    layout = Layout(seq_len=S, global_batch_size=1)
    got_bf16 = layer_time(GPT, H100, layout, 0, "none").forward_s
    got_fp8 = layer_time(GPT, H100, layout.replace(precision="fp8"), 0, "none").forward_s
    assert got_bf16 == pytest.approx(bf16, rel=1e-9)
    assert got_fp8 == pytest.approx(fp8, rel=1e-9)
    # the attention core's time is the same in both: fp8 cannot speed a layer by the full 2x
    assert layer_time(GPT, H100, layout.replace(precision="fp8"), 0, "selective").recompute_s == \
        pytest.approx(attn_s, rel=1e-9)


def test_grouped_expert_gemm_efficiency_falls_with_fewer_tokens_per_expert():
    a100 = CAL.families["A100"]

    def forward_by_hand(ep: int) -> float:
        # tokens per local expert = b s ep top_k / E (tp = cp = etp = 1): 32 at ep 1, 256 at ep 8;
        # the expert GEMMs' narrowest dimension is min(that, F = 512, H)
        tokens_per_expert = S * ep * K / E
        d_e = min(tokens_per_expert, F, H)
        rate = 312e12 * a100.e_max
        attention_params = 4 * H * H                        # q, k, v, o (kv heads = heads)
        dense = S * 2 * attention_params / (rate * 1024 / (1024 + a100.d_half))
        experts = S * 2 * K * 3 * H * F / (rate * d_e / (d_e + a100.d_half))
        # roofline: the local experts' weights read twice (forward, data gradient) in bf16 (2 B)
        # and their fp32 gradients (Megatron bf16: 4 B) read + written, over forward + backward
        weight_bytes = E / ep * 3 * H * F * (2 * 2 + 2 * 4)
        experts = max(experts, weight_bytes / 3 / (2039e9 * 0.8))
        core = S * 4 * S * H * (S + 1) / (2 * S) / (rate * CAL.causal_plateau_ratio * S / (S + CAL.causal_l_half))
        # router 2h + 12 E bytes per token, permute + unpermute 8 h per routed copy; fused
        # elementwise: norms + residual adds 20 h, RoPE on q and k (16 + 16 heads of 64) 4 B each,
        # SwiGLU 6 B per element of the top_k routed copies' width
        memory = S * (2 * H + 12 * E + 8 * H * K + 20 * H + 4 * 32 * 64 + 6 * K * F) / (2039e9 * 0.8)
        # the host issues 2 launches per local expert in bf16 (TE GroupedLinear fc1 + fc2: one
        # GEMM each) at 10 us: at ep 1, 64 x 2 x 10 us = 1.28 ms, more than the experts' GPU time
        launch_loop = max(0.0, E / ep * 2 * 10e-6 - experts)
        return dense + experts + core + memory + CAL.moe_host_sync_s + launch_loop  # + host stalls

    times = {}
    for ep in (1, 8):
        layout = Layout(dp=8, ep=ep, seq_len=S, global_batch_size=8)
        times[ep] = layer_time(MOE, A100, layout, 0, "none").forward_s
        assert times[ep] == pytest.approx(forward_by_hand(ep), rel=1e-9)
    assert times[1] > times[8]     # the same FLOPs per GPU, slower in 32-row expert GEMMs
    # at ep 1 the 64 local experts' weight traffic, 64 x 3 x 1024 x 512 x 12 B = 1.21 GB per
    # micro-batch, binds (0.25 ms of forward-equivalent time against 0.09 ms of FLOPs)
    flops_ep1 = S * 2 * K * 3 * H * F / (312e12 * CAL.families["A100"].e_max * 32 / (32 + 64.0))
    assert E * 3 * H * F * 12 / 3 / (2039e9 * 0.8) > flops_ep1


def test_attention_core_slows_at_short_per_rank_chunks():
    # CP 4 at 2,048 tokens: the ring runs the kernel on chunks of 2048 / (2 x 4) = 256 tokens
    assert compute.attention_efficiency(256) == pytest.approx(256 / (256 + CAL.attention_l_half))
    one = layer_time(GPT, H100, Layout(seq_len=2048, global_batch_size=1), 0, "selective").recompute_s
    cp4 = layer_time(GPT, H100, Layout(cp=4, seq_len=2048, global_batch_size=1), 0, "selective").recompute_s
    # a quarter of the work, at the chunks' efficiency instead of the whole sequence's, plus the
    # ring's merges (Transformer Engine P2P, step_time.cp_ring_bytes): per element 4 + 6 x 3 = 22 B
    # (forward output), 22 (dQ), 4 + 8 + 6 x 3 = 30 (K/V, forward + backward); 512 tokens per rank,
    # 16 heads of 64: 512 x (16 x 64 x (22 + 22) + 16 x 128 x 30) = 54,525,952 B, a third of it
    # in the forward at 0.8 x 3,350 GB/s
    ring = 512 * (16 * 64 * (22 + 22) + 16 * 128 * 30)
    assert ring == 54_525_952
    # the ring's 4 steps (load balancing, chunks of c = 256): step 0 the causal kernel on the rank's
    # 2c = 512 queries and keys, a quarter of its executed work; steps 1-3 unmasked on c-token rows
    core = compute.attention_efficiency(2048, causal=True) * (
        0.25 / compute.attention_efficiency(512, causal=True) + 0.75 / compute.attention_efficiency(256))
    expected = one / 4 * core + ring / 3 / (0.8 * 3350e9)
    assert cp4 == pytest.approx(expected, rel=1e-9)


def test_every_family_has_constants_and_a_basis():
    for family in ("A100", "H100", "B200", "MI300X"):
        c = CAL.families[family]
        assert c.basis and 0 < c.e_max < 1 and c.d_half > 0
    assert CAL.families["A100"].fp8_e_max is None                  # Ampere has no fp8
    assert CAL.families["MI300X"].family == "H100" and "stand in" in CAL.families["MI300X"].basis
    names = {"dgx-a100-80g": "A100", "dgx-h100": "H100", "hgx-h200": "H100", "hgx-h800": "H100",
             "dgx-b200": "B200", "gb200-nvl72": "B200", "mi300x": "MI300X", "grand-teton": "H100"}
    for cluster, family in names.items():
        assert compute.gpu_family(load_cluster(cluster).gpu) == family


def test_fit_rows_are_listed_and_are_all_in_the_fit_part():
    doc = yaml.safe_load(compute.calibration_path().read_text())
    rows = {r.id: r for r in calibrate.all_rows()}
    listed = [row for entry in doc["families"].values() for row in entry.get("fit_rows", [])]
    assert len(listed) >= 40 and len(set(listed)) == len(listed)
    for row in listed:   # the hash rule, and no MoE row the stratified split evaluates
        assert row in rows and zlib.crc32(rows[row].row_id.encode()) % 4 != 0, row
        assert rows[row].part == "fit" and row not in ("E9", "E10"), row


def test_make_calibrate_reproduces_the_committed_constants():
    fitted, ratio, _, host, powered = calibrate.fit(calibrate.all_rows())
    doc = yaml.safe_load(compute.calibration_path().read_text())
    assert ratio == pytest.approx(doc["fp8_ratio"], abs=2e-3)
    for part, entry in doc["power_limited_gpus"].items():
        assert powered[part]["clock_fraction"] == pytest.approx(entry["clock_fraction"], abs=2e-3)
        assert powered[part]["fit_rows"] == entry["fit_rows"]
    assert host["seconds"] == pytest.approx(doc["moe_host_sync"]["seconds"], rel=0.02)
    assert host["fit_rows"] == doc["moe_host_sync"]["fit_rows"] == ["E13"]   # the MoE FIT rows
    for family, entry in doc["families"].items():
        for key in ("e_max", "fp8_e_max", "d_half", "fallback", "fit_rows"):
            got, want = fitted[family].get(key), entry.get(key)
            assert got == (pytest.approx(want, abs=2e-3) if isinstance(want, float) else want), (family, key)


def test_the_installed_copy_is_read_when_the_clone_has_none(tmp_path, monkeypatch):
    installed = tmp_path / "training.yaml"
    installed.write_text(compute.CALIBRATION_FILE.read_text())
    monkeypatch.setattr(compute, "CALIBRATION_FILE", tmp_path / "absent.yaml")
    monkeypatch.setattr(compute, "INSTALLED_CALIBRATION_FILE", installed)
    assert compute.calibration_path() == installed
    assert load_calibration().families["H100"] == CAL.families["H100"]


def test_a_broken_calibration_file_is_one_line(tmp_path):
    bad = tmp_path / "training.yaml"
    bad.write_text("families: {}\n")
    with pytest.raises(SpecError, match="calibration file .*missing a key .*make calibrate"):
        load_calibration(Path(bad))


def test_one_family_per_architecture_whatever_the_framework():
    # torchtitan's Grand Teton rows and Megatron's DGX H100 rows share the H100 e_max: no family
    # is named after a cluster or fitted on one framework's rows only
    doc = yaml.safe_load(compute.calibration_path().read_text())
    assert set(doc["families"]) == {"A100", "H100", "B200", "MI300X"}
    frameworks = {r.id: r.layout.framework for r in calibrate.all_rows()}
    assert {frameworks[r] for r in doc["families"]["H100"]["fit_rows"]} == {"megatron", "torchtitan"}


def test_the_power_limited_part_runs_its_compute_at_a_clock_between_its_datasheet_bounds():
    # H100 NVL (400 W) 835.5 and H100 SXM (700 W) 989.4 dense bf16 TFLOP/s bracket the 500 W part
    teton, h100 = load_cluster("grand-teton", gpus=8), H100
    fraction = compute.clock_fraction(teton.gpu)
    assert 835.5 / 989.4 - 1e-4 <= fraction <= 1.0
    assert compute.clock_fraction(h100.gpu) == 1.0
    for precision in ("bf16", "fp8"):
        assert compute.achieved_flops(teton.gpu, precision, gemm_dim=4096) == pytest.approx(
            fraction * compute.achieved_flops(h100.gpu, precision, gemm_dim=4096), rel=1e-12)
    assert compute.attention_flops(teton.gpu, "bf16", chunk_tokens=8192) == pytest.approx(
        fraction * compute.attention_flops(h100.gpu, "bf16", chunk_tokens=8192), rel=1e-12)
    # MFU's denominator stays the datasheet peak
    assert compute.peak_flops(teton.gpu, "bf16") == compute.peak_flops(h100.gpu, "bf16") == 989.4e12


def test_attention_curves_reproduce_the_flashattention_3_figure():
    # Shah et al. 2024 Fig. 5, head dim 128, no causal mask, H100 SXM5, TFLOP/s at 512 ... 16k
    seq = (512, 1024, 2048, 4096, 8192, 16384)
    fa3 = (467, 565, 625, 638, 646, 648)
    fa2 = (309, 350, 362, 368, 370, 370)
    for s, want3, want2 in zip(seq, fa3, fa2):
        fused = compute.attention_efficiency(s)
        flash2 = compute.attention_efficiency(s, "flash_attention_2", H100.gpu)
        assert flash2 / fused == pytest.approx(want2 / want3, rel=0.04), s
    # both curves are fits of their own bars (the fused l_half of 209 tokens, the constant the
    # file has carried since it was taken from the figure)
    assert CAL.attention_l_half == pytest.approx(209, abs=0.5)
    # FlashAttention-3 is Hopper-only: elsewhere the fused curve stands for both
    assert compute.attention_efficiency(2048, "flash_attention_2", A100.gpu) == \
        compute.attention_efficiency(2048)
    with pytest.raises(SpecError, match="attention_kernel"):
        compute.attention_efficiency(2048, "flash_attention_9")


def test_torchtitan_attention_core_runs_flash_attention_2_on_hopper():
    # compiled (no eager elementwise bytes), so the layers differ only in the attention kernel:
    # 2,048 tokens, the core's causal forward FLOPs 4 S H x 2049 / 4096 per token at the bf16 peak
    # x e_max x the kernel's causal curve
    layout = Layout(seq_len=2048, global_batch_size=1)
    titan = layout.replace(framework="torchtitan", torch_compile=True)
    e_max = CAL.families["H100"].e_max
    core = 2048 * 4 * 2048 * H * 2049 / 4096 / 989.4e12 / e_max
    fused = core / compute.attention_efficiency(2048, causal=True)
    flash2 = core / compute.attention_efficiency(2048, "flash_attention_2", H100.gpu, causal=True)
    got = layer_time(GPT, H100, titan, 0, "none").forward_s - layer_time(GPT, H100, layout, 0, "none").forward_s
    assert got == pytest.approx(flash2 - fused, rel=1e-6)
    assert flash2 / fused == pytest.approx(521 / 298, rel=0.04)   # the causal panel's bars at 2k
    # on A100 both frameworks run FlashAttention-2, the fitted fused curve
    assert layer_time(GPT, A100, titan, 0, "none").forward_s == pytest.approx(
        layer_time(GPT, A100, layout, 0, "none").forward_s, rel=1e-12)


def test_fused_elementwise_bytes_by_hand():
    """step_time.fused_elementwise_bytes, Llama 3.1 8B (h 4,096, 32 + 8 heads of 128, SwiGLU 14,336):
    norms + residual adds 20 h = 81,920 B, RoPE 4 x 40 x 128 = 20,480, SwiGLU 6 x 14,336 = 86,016 per
    token forward; without SP at tp 8 the 20 h of norms and adds run on every rank, the 7 extra
    copies priced in the forward only (a third of their bytes in the x 3 forward + backward form):
    20 h x (1 + 7 / 3). The composite RMSNorm of torchtitan@9dec370 adds 2 norms x 32 h."""
    from planner.cost.step_time import composite_norm_bytes, fused_elementwise_bytes
    from planner.specs.model import load_model

    llama = load_model("llama-3.1-8b")
    assert fused_elementwise_bytes(llama, 0) == 81_920 + 20_480 + 86_016
    assert fused_elementwise_bytes(llama, 0, replicated=8) == pytest.approx(
        81_920 * (1 + 7 / 3) + 20_480 + 86_016, rel=1e-12)
    assert composite_norm_bytes(llama) == 2 * 32 * 4096
    # a layout with the composite norm is slower only when the elementwise kernels are unfused
    eager = Layout(seq_len=S, global_batch_size=1, framework="torchtitan", torch_compile=False)
    plain = layer_time(GPT, H100, eager, 0, "none").forward_s
    composite = layer_time(GPT, H100, eager.replace(norm_kernel="composite"), 0, "none").forward_s
    assert composite - plain == pytest.approx(S * 2 * 32 * H / (3350e9 * 0.8), rel=1e-9)
    compiled = eager.replace(torch_compile=True)
    assert layer_time(GPT, H100, compiled.replace(norm_kernel="composite"), 0, "none").forward_s == \
        layer_time(GPT, H100, compiled, 0, "none").forward_s


def test_causal_attention_executes_the_lower_triangle():
    # sum_{i=1..s} min(i, w) / (s w): s = w = 4: (1 + 2 + 3 + 4) / 16; a window w = 4 over s = 8:
    # (1 + 2 + 3 + 4 + 4 x 4) / 32
    assert compute.executed_attention_fraction(4, 4) == pytest.approx(10 / 16)
    assert compute.executed_attention_fraction(8, 4) == pytest.approx(26 / 32)
    with pytest.raises(SpecError, match="seq_len"):
        compute.executed_attention_fraction(4, 8)


def test_attention_causal_and_backward_curves_reproduce_the_flashattention_3_figures():
    # Shah et al. 2024 Fig. 5 causal panel and Fig. 6 backward, head dim 128, H100 SXM5, TFLOP/s at
    # 512 ... 16k (causal FLOPs counted on half the square, backward on 2.5x the forward's), each
    # relative to the unmasked forward bars of FlashAttention-3
    seq = (512, 1024, 2048, 4096, 8192, 16384)
    fa3 = (467, 565, 625, 638, 646, 648)
    curves = {(False, False, "fused"): fa3,
              (True, False, "fused"): (292, 423, 521, 579, 602, 616),
              (True, False, "flash_attention_2"): (191, 260, 298, 319, 333, 335),
              (False, True, "fused"): (316, 424, 501, 542, 559, 561),
              (False, True, "flash_attention_2"): (214, 260, 291, 310, 318, 322)}
    for (causal, backward, kernel), bars in curves.items():
        for s, want, base in zip(seq, bars, fa3):
            got = compute.attention_efficiency(s, kernel, H100.gpu, causal=causal, backward=backward)
            assert got / compute.attention_efficiency(s) == pytest.approx(want / base, rel=0.06), (kernel, s)


def test_flash_attention_backward_is_two_and_a_half_forwards_at_the_backward_rate():
    # one GPT layer, 1,024 tokens, H100: the layer's backward is 2 x its forward except the fused
    # core, whose backward runs 2.5 x its causal forward FLOPs at the backward curve: the excess is
    # S x 4 S H x (S + 1) / 2S x (2.5 / rate_b - 2 / rate_c)
    layout = Layout(seq_len=S, global_batch_size=1)
    lt = layer_time(GPT, H100, layout, 0, "none")
    peak = 989.4e12 * CAL.families["H100"].e_max
    executed = S * 4 * S * H * (S + 1) / (2 * S)
    rate_c = peak * CAL.causal_plateau_ratio * S / (S + CAL.causal_l_half)
    rate_b = peak * CAL.backward_plateau_ratio * S / (S + CAL.backward_l_half)
    assert lt.backward_s - 2 * lt.forward_s == pytest.approx(executed * (2.5 / rate_b - 2 / rate_c), rel=1e-9)
    # the unfused core stores its probabilities: 4 backward matmuls, 2 x the forward
    plain = layer_time(GPT, H100, layout, 0, "none", flash_attention=False)
    assert plain.backward_s == pytest.approx(2 * plain.forward_s, rel=1e-12)
