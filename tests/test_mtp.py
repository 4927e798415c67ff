"""Issue 8 item 6: the multi-token-prediction (MTP) module as a costed term (`placement.mtp`): its
parameters, gradients and optimizer states and its embedding copy on the stage that builds it,
its activations and the output layer's second pass, and its time -- by hand arithmetic below.

Sources: DeepSeek-V3 technical report (arXiv:2412.19437) and its README ("685B: 671B of the main
model weights and 14B of the Multi-Token Prediction (MTP) Module weights"; README_WEIGHTS.md:
the MTP module's 11.5B unique parameters besides the shared embedding and output head, which the
checkpoint stores again); DeepSeek-V3's config.json (models/deepseek-v3.yaml); Llama 3.1 8B's
config.json (models/llama-3.1-8b.yaml); Megatron-LM d98e8a6 multi_token_prediction.py (what one
MTP layer builds).
"""

from __future__ import annotations

import pytest

from planner.cost import step_time as st
from planner.cost.activations import layer_activation_bytes
from planner.cost.memory import mtp_group_counts, stage_memory
from planner.cost.params_flops import count_params
from planner.placement.layout import Layout
from planner.placement.mtp import mtp_layers, mtp_stage
from planner.placement.rules import check_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

DSV3 = load_model("deepseek-v3")
LLAMA = load_model("llama-3.1-8b")

# DeepSeek-V3 config.json: h 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128,
# qk_rope 64, v_head 128, 256 routed experts + 1 shared of moe_intermediate 2048, sigmoid router
# with e_score_correction_bias, RMSNorm (weight only), vocab 129,280, untied.
H, V = 7168, 129_280
MLA = (H * 1536 + 1536 + 1536 * 128 * (128 + 64)        # q_a, q_a_layernorm, q_b
       + H * (512 + 64) + 512 + 512 * 128 * (128 + 128)  # kv_a (with the rope key), kv_a_layernorm, kv_b
       + 128 * 128 * H)                                   # o_proj
EXPERT = 3 * H * 2048
MOE_BLOCK = MLA + 256 * EXPERT + EXPERT + (H * 256 + 256) + 2 * H  # experts, shared, router, 2 norms
MTP_LAYER = MOE_BLOCK + 2 * H * H + 3 * H  # + eh_proj (2h -> h) + enorm, hnorm, final_layernorm


def test_deepseek_v3_mtp_parameters_by_hand_and_against_the_report():
    """187,107,328 attention + 11,274,289,152 routed + 44,040,192 shared + 1,835,264 router + 14,336
    norms = 11,507,286,272 (the README's "11.5B unique"); + eh_proj 102,760,448 + 3 norms = 11.61B.
    With the embedding and output head the checkpoint stores again (2 x 0.927B) the MTP module is
    13.46B and the model 684.5B: the report's 685B (= 671B + 14B) within 0.1%."""
    assert MOE_BLOCK == 11_507_286_272
    assert sum(mtp_group_counts(DSV3, count_params(DSV3), 1).values()) == MTP_LAYER == 11_610_068_224
    assert count_params(DSV3, include_mtp=True).mtp == MTP_LAYER  # the Hugging Face count agrees
    assert MOE_BLOCK == pytest.approx(11.5e9, rel=0.005)
    total = count_params(DSV3).total + MTP_LAYER + 2 * V * H
    assert total == pytest.approx(685e9, rel=0.001)
    assert count_params(DSV3).total == pytest.approx(671e9, rel=0.001)


def test_defaults_follow_the_recipes():
    """Megatron: the model's num_nextn_predict_layers (NVIDIA's DeepSeek-V3 recipes train 1);
    torchtitan / DeepSpeed: none; a given value wins; no MTP on a model without it by default."""
    assert mtp_layers(DSV3, Layout()) == 1
    assert mtp_layers(DSV3, Layout(framework="torchtitan")) == 0
    assert mtp_layers(DSV3, Layout(framework="deepspeed")) == 0
    assert mtp_layers(DSV3, Layout(mtp_layers=0)) == 0
    assert mtp_layers(LLAMA, Layout()) == 0
    assert mtp_layers(LLAMA, Layout(mtp_layers=2)) == 2
    cluster = load_cluster("dgx-h100", gpus=8)
    assert [v.rule for v in check_layout(DSV3, cluster, Layout(dp=8, global_batch_size=8, framework="torchtitan",
                                                                  mtp_layers=1)) if v.rule == "mtp_layers"] == ["mtp_layers"]


# Llama 3.1 8B config.json: h 4096, 32 heads, 8 KV heads of 128, intermediate 14,336, SwiGLU,
# RMSNorm, vocab 128,256 (a multiple of 128: Megatron pads nothing at tp 1), untied.
h, I, VOCAB, S = 4096, 14_336, 128_256, 4096
LLAMA_LAYER = h * (32 + 2 * 8) * 128 + 32 * 128 * h + 3 * h * I + 2 * h  # 218,112,000
LLAMA_MTP = LLAMA_LAYER + 2 * h * h + 3 * h                              # 251,678,720


def test_last_stage_memory_of_one_mtp_layer_by_hand():
    """Llama 3.1 8B, pp 2, tp 1, ZeRO 0, bf16 under Megatron (2 + 4 + 12 = 18 B per parameter:
    bf16 weight, fp32 main gradient, fp32 master weight and two Adam moments): one MTP layer adds on
    the last stage (251,678,720 + the MTP stage's own embedding 128,256 x 4096) x 18 B of states;
    its activations for the one micro-batch in flight on the last stage: a decoder layer's saved
    tensors + 4 h per token in bf16 (enorm, hnorm inputs and eh_proj's 2h input); and the output
    layer again: final norm input and head input 2 x 2 x s x h + fp32 logits 4 x s x V. The first
    stage is unchanged."""
    cluster = load_cluster("dgx-h100", gpus=2)
    base = Layout(pp=2, global_batch_size=8)
    without, with_mtp = (stage_memory(LLAMA, cluster, base.replace(mtp_layers=n), 1) for n in (0, 1))
    states = (LLAMA_MTP + VOCAB * h) * 18
    assert LLAMA_MTP == 251_678_720
    assert (with_mtp.parameters + with_mtp.gradients + with_mtp.optimizer_states
            - without.parameters - without.gradients - without.optimizer_states) == states
    layer = layer_activation_bytes(LLAMA, 31, seq_len=S, micro_batch_size=1, tp=1).total
    assert with_mtp.activation_terms["mtp_layers"] == layer + 4 * h * S * 2
    assert with_mtp.activation_terms["mtp_logits_loss"] == 2 * 2 * S * h + 4 * S * VOCAB == 2_168_455_168
    assert with_mtp.total - without.total == states + layer + 4 * h * S * 2 + 2_168_455_168
    first = [stage_memory(LLAMA, cluster, base.replace(mtp_layers=n), 0).total for n in (0, 1)]
    assert first[0] == first[1]


def test_a_layout_string_places_the_mtp_layer_on_its_rank():
    """pp 4, vpp 1: `E t*8 | t*8 | t*16 m | L` builds the MTP layer (and its embedding) on rank 2
    (Megatron's standalone MTP, pipeline_parallel_layer_layout.py l. 138-145) while the output
    layer's second pass stays with the loss on rank 3; rank 2 holds min(pp - 2, m) = 2 micro-batches
    of its activations in flight."""
    cluster = load_cluster("dgx-h100", gpus=4)
    stages = ("E" + "t" * 8, "t" * 8, "t" * 16 + "m", "L")
    layout = Layout(pp=4, global_batch_size=8, pipeline_layout=stages, mtp_layers=1)
    assert mtp_stage(layout) == 2
    assert not [v for v in check_layout(LLAMA, cluster, layout) if v.severity == "error"]
    off = layout.replace(mtp_layers=0, pipeline_layout=("E" + "t" * 8, "t" * 8, "t" * 16, "L"))
    two, three = (stage_memory(LLAMA, cluster, layout, s) for s in (2, 3))
    two_off, three_off = (stage_memory(LLAMA, cluster, off, s) for s in (2, 3))
    layer = layer_activation_bytes(LLAMA, 31, seq_len=S, micro_batch_size=1, tp=1).total
    assert two.activation_terms["mtp_layers"] == 2 * (layer + 4 * h * S * 2)
    assert (two.parameters - two_off.parameters) == (LLAMA_MTP + VOCAB * h) * 2
    assert "mtp_layers" not in three.activation_terms
    assert three.activation_terms["mtp_logits_loss"] == 2_168_455_168
    assert three.parameters == three_off.parameters


def test_step_time_adds_the_mtp_layer_and_the_second_head_pass():
    """The stage's fixed time grows by the output layer again (6 V h FLOPs per token), eh_proj
    (6 x 2h x h per token, the same GEMM rate: its share of the head's time is 2h / V) and one decoder
    layer of the last layer's kind (its `layer_time`)."""
    cluster = load_cluster("dgx-h100", gpus=8)
    base = Layout(dp=8, global_batch_size=64)
    head = st.stage_fixed_times(LLAMA, cluster, base.replace(mtp_layers=0))[-1]
    with_mtp = st.stage_fixed_times(LLAMA, cluster, base.replace(mtp_layers=1))[-1]
    layer = st.layer_time(LLAMA, cluster, base.replace(mtp_layers=1), 31, "none").total_s
    assert with_mtp == pytest.approx(head * (2 + 2 * h / VOCAB) + layer, rel=1e-12)
    slower = st.step_time(LLAMA, cluster, base.replace(mtp_layers=1)).step
    assert slower > st.step_time(LLAMA, cluster, base.replace(mtp_layers=0)).step


@pytest.mark.parametrize("framework, why", [
    ("torchtitan", "torchtitan builds MTP only in its DeepSeek-V3 debug config, without PP or CP"),
    ("deepspeed", "DeepSpeed has no MTP")])
def test_plan_refuses_mtp_layers_of_a_framework_without_them_upfront(framework, why):
    """review-fresh11 #5, the reviewer's command: `plan --framework torchtitan --mtp-layers 1` ran the whole search and
    failed with a pipeline-split hint that did not help; every candidate breaks the rule `mtp_layers`, so it is bad
    input (exit 2) naming the flag, the framework and what is allowed."""
    from tests.cli_run import planner

    done = planner("plan", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "1024", "--framework", framework,
                   "--mtp-layers", "1")
    assert done.returncode == 2, done.stderr
    assert (f"--mtp-layers: value 1: {framework} cannot train MTP (multi-token prediction) layers ({why}); the "
            "planner costs them as Megatron-LM trains them; allowed: 0, or --framework megatron") in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
