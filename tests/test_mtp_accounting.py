"""Issue 8: the multi-token-prediction (MTP) layers a layout trains (`placement.mtp`) in the model
FLOPs behind MFU / TFLOP/s per GPU (as Megatron-LM logs them), and in the optimizer step's time
and memory working set -- by hand arithmetic below.

Megatron-LM d98e8a6 megatron/training/training.py `num_floating_point_operations` (BSHD, per
token, expansion 3 x 2 = 6): with `--mtp-num-layers n` it counts n more decoder layers of the last
layer's kind (l. 1042-1046), 6 n (3h + 2h^2) for the MTP norms and eh_proj (l. 1288-1297) and the
logits (n + 1) times (l. 1298-1303); no router FLOPs, MTP or not. The planner's count
(`params_flops.mtp_forward_flops`) has the same terms but the router matmul and not the norms.

Sources: DeepSeek-V3 config.json (models/deepseek-v3.yaml): h 7,168, 128 heads, q_lora_rank 1,536,
kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, 256 routed experts (top 8) + 1 shared, each of
moe_intermediate 2,048, SwiGLU, router with e_score_correction_bias, vocabulary 129,280 (a multiple
of 128: Megatron pads nothing at tp 1), 61 layers, the last MoE; Llama 3.1 8B config.json
(models/llama-3.1-8b.yaml): h 4,096, 32 heads, 8 KV heads of 128, FFN 14,336, vocabulary 128,256,
8,030,261,248 parameters.
"""

from __future__ import annotations

import json

import pytest

from planner.cost import step_time as st
from planner.cost.memory import OPTIMIZER_STEP_TERM, stage_memory
from planner.cost.params_flops import flops_per_token
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from planner.summary import mfu_basis
from tests.cli_run import planner

DSV3 = load_model("deepseek-v3")
LLAMA = load_model("llama-3.1-8b")
S = 4096

# ---- DeepSeek-V3, one MTP layer, Megatron-LM's formula written out (per token, l. 1210-1303)
H, A, V, QL, KVL, NOPE, ROPE, VH = 7168, 128, 129_280, 1536, 512, 128, 64, 128
MEGATRON_MLP = 6 * H * (2048 * 8 * 3 + 2048 * 3)                      # 8 routed + 1 shared expert
MEGATRON_ATTN = 6 * (QL * (H + A * (NOPE + ROPE) + 1)                # q_term (the +1: q norm)
                     + KVL * (H + A * (NOPE + VH) + 1)               # kv lora (+1: kv norm)
                     + H * ROPE + A * VH * H)                        # rope key, o_proj
MEGATRON_CORE = S * 6 * (A * (NOPE + ROPE) // 2 + A * VH // 2)         # s^2 / 2 per sequence / s tokens
MEGATRON_MTP_PROJ = 6 * (3 * H + 2 * H * H)                          # 'MTP norms and proj'
MEGATRON_LOGIT = 6 * H * V                                           # the logits once more
MEGATRON_MTP = MEGATRON_MLP + MEGATRON_ATTN + MEGATRON_CORE + MEGATRON_MTP_PROJ + MEGATRON_LOGIT

ROUTER = H * 256 + 256                                               # weight + score-correction bias


def test_deepseek_v3_mtp_flops_per_token_against_megatrons_formula():
    """Megatron-LM adds 2,378,170,368 (MLP) + 1,122,643,968 (MLA projections) + 503,316,480 (causal
    core at 4,096 tokens) + 616,691,712 (norms, eh_proj) + 5,560,074,240 (logits) = 10,180,896,768
    FLOPs per token for the MTP layer (3.8% more model FLOPs); the planner's training FLOPs grow by the
    same terms, bar the router matmul it counts (6 x 1,835,264 = 11,011,584) and the norms it does not
    (6 x 3h), with PaLM's full attention square (twice Megatron's causal core) and, in its causal
    count, (s + 1) / 2 keys per query where Megatron takes s / 2."""
    assert MEGATRON_MLP == 2_378_170_368
    assert MEGATRON_ATTN == 1_122_643_968
    assert MEGATRON_CORE == 503_316_480
    assert MEGATRON_MTP_PROJ == 616_691_712
    assert MEGATRON_LOGIT == 5_560_074_240
    assert MEGATRON_MTP == 10_180_896_768
    off, on = flops_per_token(DSV3, S), flops_per_token(DSV3, S, mtp_layers=1)
    planner_mtp = on.training - off.training
    assert planner_mtp == 3 * on.mtp_forward
    assert planner_mtp == MEGATRON_MTP + 6 * ROUTER - 6 * 3 * H + MEGATRON_CORE
    causal = (on.training - 3 * (on.attention_forward - on.attention_forward_causal)
              - (off.training - 3 * (off.attention_forward - off.attention_forward_causal)))
    assert causal == MEGATRON_MTP + 6 * ROUTER - 6 * 3 * H + 3 * A * (NOPE + ROPE + VH)
    assert planner_mtp / off.training == pytest.approx(0.0380, abs=0.0005)


def test_two_mtp_layers_count_twice():
    one, two, off = (flops_per_token(DSV3, S, mtp_layers=n) for n in (1, 2, 0))
    assert two.training - off.training == 2 * (one.training - off.training)


# ---- Llama 3.1 8B with one MTP layer (cheap to time): a decoder layer + eh_proj + the head again
h, VOCAB = 4096, 128_256
LLAMA_MATMUL = h * (32 + 2 * 8) * 128 + 32 * 128 * h + 3 * h * 14_336  # 218,103,808
LLAMA_MTP_FORWARD = 2 * (LLAMA_MATMUL + 2 * h * h + VOCAB * h) + 2 * S * 32 * 256
LLAMA_PARAMS = 8_030_261_248
LLAMA_MTP_PARAMS = LLAMA_MATMUL + 2 * h + 2 * h * h + 3 * h        # + block norms, eh_proj, 3 norms


@pytest.fixture(scope="module")
def llama_steps():
    cluster = load_cluster("dgx-h100", gpus=8)
    base = Layout(dp=8, global_batch_size=64)
    return {n: st.step_time(LLAMA, cluster, base.replace(mtp_layers=n)) for n in (0, 1)}


def test_model_flops_of_the_step_include_the_mtp_layer(llama_steps):
    """TFLOP/s per GPU x step x GPUs = (model FLOPs per token with MTP) x tokens; MFU = that / peak."""
    assert LLAMA_MTP_FORWARD == 1_621_098_496
    tokens = 64 * S
    base = flops_per_token(LLAMA, S).training
    for n, flops in ((0, base), (1, base + 3 * LLAMA_MTP_FORWARD)):
        step = llama_steps[n]
        assert step.tflops_per_gpu * 1e12 * step.step * 8 == pytest.approx(flops * tokens, rel=1e-12)
        assert step.mfu == pytest.approx(step.tflops_per_gpu / 989.4, rel=1e-9)  # H100 SXM bf16 dense


def test_optimizer_step_time_includes_the_mtp_parameters(llama_steps):
    """pp 1: the optimizer steps every parameter of the one stage, streaming at HBM speed: with the
    MTP layer 251,678,720 more (a decoder layer 218,112,000 + eh_proj 2h^2 + 3 norms), so the step's
    optimizer time grows by (8,030,261,248 + 251,678,720) / 8,030,261,248."""
    assert LLAMA_MTP_PARAMS == 251_678_720
    ratio = llama_steps[1].optimizer / llama_steps[0].optimizer
    assert ratio == pytest.approx((LLAMA_PARAMS + LLAMA_MTP_PARAMS) / LLAMA_PARAMS, rel=1e-9)


def test_optimizer_step_working_set_includes_the_mtp_parameters():
    """Megatron with bf16 gradient reduction copies the gradient shard to fp32 at the step
    (`StateBytes.step_gradient_copy`, 4 B per parameter): on the last of pp 2 stages, dp 1, the MTP
    layer and its stage's own embedding copy (128,256 x 4,096) add 4 x their parameters."""
    cluster = load_cluster("dgx-h100", gpus=2)
    base = Layout(pp=2, global_batch_size=8, grad_reduce_dtype="bf16")
    off, on = (stage_memory(LLAMA, cluster, base.replace(mtp_layers=n), 1).transient_terms[OPTIMIZER_STEP_TERM]
               for n in (0, 1))
    assert on - off == 4 * (LLAMA_MTP_PARAMS + VOCAB * h)


def test_megatron_mfu_basis_counts_the_mtp_layer():
    """The causal fraction Megatron's convention applies is over the FLOPs with MTP: Llama 3.1 8B,
    matmul forward 2 x 7,504,658,432 + attention 524,288 s; MTP adds 2 x (218,103,808 + 2h^2 +
    vocabulary x h) + 16,384 s; causal counts (s + 1) / 2 keys."""
    gpu = load_cluster("dgx-h100", gpus=8).gpu
    matmul = 2 * 7_504_658_432 + 2 * (LLAMA_MATMUL + 2 * h * h + VOCAB * h)
    attention = (524_288 + 16_384) * S
    basis = mfu_basis(LLAMA, gpu.peak_tflops, "bf16", S, "megatron", mtp_layers=1)
    assert basis["framework_fraction"] == pytest.approx((matmul + attention * (S + 1) / 2 / S) / (matmul + attention),
                                                        rel=1e-12)
    assert mfu_basis(LLAMA, gpu.peak_tflops, "bf16", S, "torchtitan", mtp_layers=0)["framework_fraction"] == 1.0


@pytest.fixture(scope="module")
def explained():
    args = ("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--zero-stage", "2", "--format", "json")
    return {n: json.loads(planner(*args, "--mtp-layers", str(n)).stdout) for n in (0, 1)}


def test_explain_json_mtp_on_versus_off(explained):
    """`explain --zero-stage 2 --mtp-layers 1` (dp 8): the step is longer (the MTP layer, eh_proj and the head again run),
    the model FLOPs per token grow by 3 x 1,621,098,496, so TFLOP/s per GPU = FLOPs x tokens/s / 8
    in both."""
    off, on = explained[0]["time_s"], explained[1]["time_s"]
    assert on["step"] > off["step"]
    assert on["tokens_per_s"] < off["tokens_per_s"]
    base = flops_per_token(LLAMA, S).training
    for t, flops in ((off, base), (on, base + 3 * LLAMA_MTP_FORWARD)):
        assert t["tflops_per_gpu"] * 1e12 == pytest.approx(flops * t["tokens_per_s"] / 8, rel=1e-9)
    assert explained[1]["mfu_basis"]["framework_fraction"] != explained[0]["mfu_basis"]["framework_fraction"]


def test_the_convention_line_names_the_mtp_layers(explained):
    """The MFU line says the FLOPs include the MTP layer where one is trained, and nothing of it
    otherwise."""
    assert "+ 1 MTP layer with the output layer again" in explained[1]["mfu_basis"]["framework_convention"]
    assert "MTP" not in explained[0]["mfu_basis"]["framework_convention"]


def test_plan_json_counts_the_mtp_layer_it_was_asked_to_train():
    """`plan --mtp-layers 1`: the returned TFLOP/s per GPU of the best plan is its tokens/s x model
    FLOPs per token with the MTP layer, 3 x (17,156,800,512 + 1,621,098,496) = 56,333,697,024
    (Llama 3.1 8B at 4,096 tokens: 2 x 7,504,658,432 matmul + 524,288 x 4,096 attention), / 8 GPUs;
    the MFU line says so."""
    assert 3 * (2 * 7_504_658_432 + 524_288 * S + LLAMA_MTP_FORWARD) == 56_333_697_024
    data = json.loads(planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--top", "1",
                              "--mtp-layers", "1", "--format", "json").stdout)
    best = data["plans"][0]
    assert best["tflops_per_gpu"] * 1e12 == pytest.approx(56_333_697_024 * best["tokens_per_s"] / 8, rel=1e-9)
    assert data["request"]["mtp_layers"] == 1
    assert "+ 1 MTP layer" in data["mfu_basis"]["framework_convention"]
