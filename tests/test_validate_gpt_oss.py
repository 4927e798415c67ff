"""GPT-OSS-120B on 64 H100: an EVALUATION case outside the fit (senior review 11 finding 2).

Published: Megatron-Bridge@067f987 docs/performance-summary-archive.md, 26.04.01 NeMo container, "Model:
GPT OSS 120B", DGX-H100 | 64 | BF16 | GBS 1280 | MBS 1 | seq 4096 | FSDP 0 | TP 1 | PP 4 | CP 1 | EP 8 |
5,824 tokens/s/GPU | 158 model TFLOP/s/GPU (5,810 / 5,984 / 5,993 in the 26.04, 26.02.01 and earlier
releases). Recipe: src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py l. 25-56
(gpt_oss_120b_pretrain_64gpu_h100_bf16_config): distributed optimizer, selective recompute of
layernorm and moe_act, router fusion, forced load balancing, gradients reduced in bf16
(`_benchmark_common`, perf_recipes/_common.py: `ddp.grad_reduce_in_fp32 = False`; at the measured
container, Megatron-Bridge v0.4.1 = f9b6319e5, the perf harness's `set_gpt_oss_common_configs`,
scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py l. 30-36, sets the same). Tolerance: the issue's evaluation bar for
one row, max |error| 25% (issue 9 "Done when").

Mechanisms checked (none explains the gap: 1280 x 4096 / (5,824 x 64) = 14.07 s measured against
9.91 s predicted, over (80 micro-batches + 3) pipeline slots x 9 layers per stage = 18.8 ms against
13.3 ms per layer per micro-batch, ~5.6 ms missing):
- attention sinks + sliding window: at the measured container, Transformer Engine runs learnable-softmax
  (sink) attention in bf16 on FusedAttention (cuDNN), not an unfused path (NVIDIA/TransformerEngine@d0067d0
  transformer_engine/pytorch/attention/dot_product_attention/utils.py l. 1113-1153: only FlashAttention
  is disabled for softmax_type != vanilla; sink support added by PR #2148, 2025-09-22, before the 26.x
  containers). The attention core is ~0.03 ms (sliding) / 0.43 ms (full) of a ~4.6 ms layer forward:
  even at a third of the modelled rate it adds ~1.3 ms per layer per micro-batch (fwd + bwd).
- grouped-GEMM shape: each GPU's 16 local experts see 8 ranks x 4,096 tokens x top-4 / 128 experts
  = 1,024 tokens each (128 is the per-source-rank share), hidden and expert width 2,880: priced at
  e_max x 1024 / (1024 + 64) = 63% of peak, 1.3 ms per layer forward; halving that rate adds ~3.9 ms
  per layer per micro-batch (fwd + bwd), most of the gap, with no measurement that says it is so slow.
- clamped SwiGLU, biases: Megatron-Bridge sets bias_activation_fusion with quick_gelu, clamp 7.0 and
  glu_linear_offset 1.0 (models/gpt_oss/gpt_oss_bridge.py l. 73, 82-84), which TEGroupedMLP runs as one
  fused kernel with the expert bias and routing probabilities (NVIDIA/Megatron-LM@d98e8a6
  megatron/core/transformer/moe/experts.py l. 973-981 `weighted_bias_quick_geglu_impl`): one pass over
  the 4,096 x 4 x 5,760 expert activations, tens of microseconds per layer.
- host: at hidden 2,880 a layer's GPU work is small (~2 ms forward), so a per-kernel launch cost of
  the eager MoE layer beyond the fitted moe_host_sync (2.54 ms, one MoE fit row) would show. Against
  it: the same archive's DGX-B200 row of the same recipe family (26.04.01, 64 GPUs, BF16, GBS 1280,
  MBS 4, TP1 PP1 EP8: 13,568 tokens/s/GPU; `B200_RECIPE` below, the same knobs but PP, MBS and the
  flex dispatcher) is over-predicted by more (+61%, against +43% here) with 4x the tokens per
  micro-batch, which would amortize a per-kernel cost 4x: the missing time scales with the work, not
  the launches.
- head dim 64: the attention curve is FlashAttention-3's head-dim-128 figure (compute.attention_efficiency);
  head dim 64 runs slower, but the attention core is too small here for that to matter (above).
- the one MoE fit row: `moe_host_sync_s` (2.54 ms per MoE layer forward, calibration/training.yaml) is
  fitted on E13 alone (Qwen3-30B-A3B, 16 x H100 fp8, TP1 EP16 MBS 1: hidden 2,048, head dim 128, top-8,
  no sinks, biases or sliding window), where it carries most of a layer's forward; here it is 2.54 ms x
  9 layers x 83 pipeline slots = 1.9 s of the 9.9 s step. Whatever that constant stands for in E13 may
  not carry over to this family; one MoE fit row cannot tell.
The cause stays unknown, so the row stays out of the fit and plans print a caveat for the family
(`cost.compute.UNVALIDATED_TRAINING_FAMILIES`)."""

from __future__ import annotations

import json

import pytest

from tests.cli_run import planner

PUBLISHED_TOKENS_PER_S_PER_GPU = 5824
TOLERANCE = 0.25
RECIPE = ("explain", "-m", "gpt-oss-120b", "-c", "dgx-h100", "--gpus", "64", "--tp", "1", "--pp", "4", "--ep", "8",
          "--micro-batch-size", "1", "--global-batch-size", "1280", "--seq-len", "4096", "--zero-stage", "1",
          "--recompute", "selective", "--recompute-modules", "layernorm,moe_act",
          "--overlap", "grad-reduce=on", "--overlap", "param-gather=on", "--grad-reduce-dtype", "bf16",
          "--format", "json")

B200_RECIPE = dict(dp=64, tp=1, pp=1, ep=8, micro_batch_size=4, global_batch_size=1280, seq_len=4096,
                   zero_stage=1, framework="megatron", precision="bf16", recompute="selective",
                   recompute_modules=("layernorm", "moe_act"), overlap_grad_reduce=True, overlap_param_gather=True,
                   grad_reduce_dtype="bf16", moe_dispatcher="flex")
"""The published DGX-B200 row (26.04.01 container, Megatron-Bridge v0.4.1 f9b6319e5, which pins
NVIDIA/Megatron-LM d7288711): scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py
`GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2` (64 GPUs, EP 8, MBS 4, GBS 1280, recompute_modules
layernorm + moe_act, TP/PP 1 by `WorkloadBaseConfig`'s defaults, moe_flex_dispatcher_backend
hybridep, which `apply_flex_dispatcher_backend` turns into the flex dispatcher) on
gpt_oss_120b_pretrain_config (distributed optimizer, overlapped grad reduce and param gather, fp32
optimizer states without the precision-aware optimizer, native cross-entropy fusion: v0.4.1
src/megatron/bridge/recipes/gpt_oss/gpt_oss.py l. 224-255) with
`set_gpt_oss_common_configs` (gpt_oss_llm_pretrain.py l. 30-36: `ddp.grad_reduce_in_fp32 = False`,
so Megatron's gradient buffer is the parameters' bf16: Megatron-LM@d7288711
megatron/core/distributed/distributed_data_parallel.py l. 147). Today's flat recipe
perf_recipes/gpt_oss/b200/gpt_oss.py l. 25-41 (@067f987) states the same knobs but the dispatcher
(alltoall) through `_benchmark_common`."""


@pytest.fixture(scope="module")
def recipe():
    out = planner(*RECIPE)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.xfail(strict=True, reason="predicted ~8,350 tokens/s/GPU, +43% over the published 5,824; the "
                   "mechanism is not found (attention sinks run cuDNN FusedAttention, grouped GEMMs at 1,024 "
                   "tokens/expert, fused clamped SwiGLU: none explains ~5.6 ms per layer per micro-batch)")
def test_gpt_oss_120b_h100_recipe_within_the_evaluation_bar(recipe):
    per_gpu = recipe["time_s"]["tokens_per_s"] / 64
    assert abs(per_gpu / PUBLISHED_TOKENS_PER_S_PER_GPU - 1) <= TOLERANCE


@pytest.mark.xfail(strict=True, reason="predicted ~21,900 tokens/s/GPU, +61% over the published 13,568: the "
                   "same unexplained over-prediction as the H100 row at 4x the tokens per micro-batch (+37% "
                   "before the recipe's bf16 gradient reduction was stated: its fp32 reduce-scatter was "
                   "priced at twice the bytes)")
def test_gpt_oss_120b_b200_recipe_within_the_evaluation_bar():
    from planner.explain import explain
    from planner.placement.layout import Layout
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model
    result = explain(load_model("gpt-oss-120b"), load_cluster("dgx-b200", gpus=64), Layout(**B200_RECIPE))
    assert abs(result["time_s"]["tokens_per_s"] / 64 / 13568 - 1) <= TOLERANCE


B200_GPU_PARAMS = (36 * 16 * (2880 * 5760 + 5760 + 2880 * 2880 + 2880) + 2 * 201088 * 2880
                   + 36 * (2880 * 5120 + 5120 + 4096 * 2880 + 2880 + 64 + 2880 * 128 + 128 + 2 * 2880) + 2880)
"""Parameters on one GPU of the B200 recipe, by hand: 36 layers x 16 local experts (128 / EP 8) x
(fc1 2,880 x 5,760 + bias, fc2 2,880 x 2,880 + bias) = 14,337,699,840, plus every non-expert
parameter, whole on each GPU (TP 1, PP 1): embedding and untied output layer 2 x 201,088 x 2,880
= 1,158,266,880, per layer attention 2,880 x (64 + 2 x 8) x 64 + bias 5,120 + output 4,096 x 2,880
+ bias 2,880 + sinks 64, router 2,880 x 128 + bias 128 and two RMSNorm weights 2 x 2,880
(26,924,672 x 36 = 969,288,192), final norm 2,880: 2,127,557,952 non-expert, 16,465,257,792 in all
(gpt-oss-120b.yaml fields)."""


def _b200_memory(**knobs):
    from planner.cost.memory import memory_per_device
    from planner.placement.layout import Layout
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model
    return memory_per_device(load_model("gpt-oss-120b"), load_cluster("dgx-b200", gpus=64),
                             Layout(**{**B200_RECIPE, **knobs}))


def test_gpt_oss_120b_b200_recipe_fits_with_its_knobs():
    """Issue 8's bar: the published run trained, so with its recipe's knobs (B200_RECIPE: bf16
    gradient buffer, distributed optimizer, layernorm + moe_act recompute, EP 8, MBS 4) it is rated
    fits or at_risk on 180 GB B200s (it was does_not_fit, 191 vs 179 GiB, with fp32 gradients)."""
    memory = _b200_memory()
    assert memory.verdict in ("fits", "at_risk")
    assert memory.gradients == memory.parameters == 2 * B200_GPU_PARAMS  # bf16 buffer, bf16 weights


def test_fp32_gradient_buffer_is_what_rated_the_b200_recipe_over_capacity():
    """Megatron-Bridge's library recipe default (`ddp.grad_reduce_in_fp32 = True`, v0.4.1
    recipes/gpt_oss/gpt_oss.py l. 255; recipes/gpt_oss/h100/gpt_oss.py l. 263 @067f987), which the
    perf harness turns off, doubles the gradient buffer: +2 B per parameter on the GPU,
    2 x 16,465,257,792 B = 30.67 GiB, the whole difference at the peak (the optimizer step's fp32
    copy of the bf16 gradient shard, 4 B x 14,337,699,840 / 8 + 4 B x 2,127,557,952 / 64 = 7.3 GB,
    lives after backward has freed the activations, so it does not move the peak)."""
    bf16, fp32 = _b200_memory(), _b200_memory(grad_reduce_dtype="fp32")
    assert fp32.total - bf16.total == 2 * B200_GPU_PARAMS
    assert fp32.verdict == "does_not_fit"


def test_tokens_per_local_expert_is_1024_not_128():
    from planner.cost.step_time import _expert_gemm_dim
    from planner.placement.layout import Layout
    from planner.specs.model import load_model
    layout = Layout(dp=16, tp=1, pp=4, ep=8, micro_batch_size=1, global_batch_size=1280, seq_len=4096)
    assert _expert_gemm_dim(load_model("gpt-oss-120b"), layout) == 8 * 4096 * 4 / 128


def test_gpt_oss_plans_carry_the_unvalidated_caveat(recipe):
    [caveat] = [a for a in recipe["assumptions"] if a.startswith("gpt_oss training step times are not validated")]
    assert "5,824 tokens/s/GPU" in caveat


def test_other_families_carry_no_such_caveat():
    out = planner("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--zero-stage", "1",
                  "--format", "json")
    assert not [a for a in json.loads(out.stdout)["assumptions"] if "not validated" in a]
