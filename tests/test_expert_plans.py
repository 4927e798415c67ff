"""`plan` on the job of each expert-tuned recipe (issue 9 item 5; shared/reference/expert_configs.yaml).

For every recipe the planner can express: the recipe's own layout, with the knobs its framework's
recipe sets (`validate_training` assumptions: NVIDIA's recipes reduce gradients in bf16 and overlap
TP and DP communication), is costed by `explain`; `plan` is asked the same job (model, GPUs,
sequence, global batch, precision, framework, gradient-reduction dtype). Issue 9's bars:
- the plan's predicted step is at least 0.9 x the recipe's predicted step (a plan claiming more
  than 10% over an expert's layout needs a published measurement that agrees);
- no context parallelism above 1 at <= 4K tokens, nor above 2 at <= 8K (NVIDIA's guidance).
Rows the cost model does not meet yet are strict xfails naming the mechanism believed missing, so
a change that fixes one fails here until its marker goes.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from planner import validate_training as vt
from planner.explain import explain
from planner.plan import plan
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROWS = {r.id: r for r in vt.load_rows(vt.EXPERT_CONFIGS) if r.not_expressible is None}

KNOWN_GAPS = {
    "E10": "plan tp1 pp16 ep16 (flex) at 0.75x the recipe's tp2 pp8 vpp4 ep64 (20.4 vs 27.2 s; "
           "measured 25.3 s): exposed communication 1.2 vs 7.4 s -- an EP group on 2 nodes sends "
           "each token over the network to ~1 other node, on 8 nodes with DeepSeek-V3's 4-of-8 group "
           "routing to ~3.5 (comm._flex_dispatch, checked against HybridEP's H100 kernel table). "
           "But the row's knobs are not its measured run's: NeMo 25.09 ran H100 with DeepEP and the "
           "1F1B all-to-all overlap (test_deepseek_v3_h100_row_with_its_measured_runs_knobs); with "
           "it the recipe is predicted 26% fast and the plan (no overlap without vpp) is at 1.02x. "
           "NVIDIA's DGX-B200 recipe of the plan's own structure (tp1 pp16 ep8) is over-predicted "
           "by 28% (test_deepseek_v3_b200_recipe_of_the_plans_structure), while NeMo 25.11's "
           "GB200 DeepSeek-V3 rows (EP 32/64 inside NVLink, no MTP: 4,018 / 3,139 tokens/s/GPU) "
           "are predicted +1.1% / +3.8%, so what the two DGX rows miss (~5 ms per MoE layer per "
           "micro-batch each) is not a DeepSeek-V3 cost in general: on B200 (32 local experts) "
           "the per-expert launch loop at 20 us (compute.KERNEL_LAUNCH_HOST_S) closes it (+2%), "
           "on E10 (4 local experts) nothing found does. A 5 ms probe per DeepSeek-V3 MoE layer "
           "with the 25.09 knobs gives E10 +2.8% and its plan 0.91x -- a probe, not a mechanism",
    "E13": "plan tp1 pp1 ep16 ZeRO-3 micro-batch 2 at 0.81x the recipe's ep16 micro-batch 1 (23.8 "
           "vs 29.3 s): the MoE host stall (compute.moe_host_sync_s, 2.54 ms per MoE layer per "
           "micro-batch, fitted on this row, the only MoE FIT row) is paid 32 times instead of 64. "
           "The stall is held-out checked: NeMo 25.11's Blackwell pair of this model (B200 "
           "micro-batch 1 +9%, GB200 micro-batch 4 +3%; without the stall micro-batch 1 is +56%, "
           "test_moe_host_stall_is_held_out_checked_on_one_release_pair) and 26.02's (test_moe_micro"
           "_batch_gain_is_within_nvidias_b200_measurement: the model gives less gain than measured). "
           "On H100 the one profile (bf16, EP overlap off) measures 0.62 ms of GPU idle per sync: "
           "with that stall and the rest charged per token (fitted on E13) the plan is at 0.91x, but "
           "E10 moves to -11% and the fp8 evaluation group's bias to -5.4% (bar 5%), and a stall "
           "that hides under GPU work (max(0, host - GPU), the form the Blackwell pairs suggest) "
           "puts the plan at 0.69-0.71x. NVIDIA's H100 Qwen3-30B-A3B recipes keep micro-batch 1 in every "
           "release (26.02-26.06); no H100 run at micro-batch 2 of the same stack measures the gain",
    "E16": "not a MoE row: Llama 3.1 70B under torchtitan. plan tp4 pp4 cp2 ZeRO-3 b1 (no recompute) "
           "at 0.76x the recipe's tp8 FSDP b16 full recompute (13.6 vs 18.0 s); layouts without PP or "
           "CP follow at 0.78-0.79x (tp2 dp128 b1 op-SAC 14.0 s, tp4 dp64 b2 op-SAC 14.2 s), so the "
           "torchtitan pipeline and CP terms do not decide the ratio. What separates them is the "
           "recipe's own choice: full recompute 3.8 s (the block's forward re-run, its TP "
           "collectives with it: 80 layers x 9.1 ms exposed under AsyncTP = 0.7 s of its 2.4 s "
           "exposed communication) against op-SAC's 1.1 s (wk, wo, w3, elementwise and the two "
           "re-gathered SP inputs, step_time._op_sac_regather_s). Each term is "
           "checked on measurements outside the fit: the recipe family (tp8 + SP, FSDP, full "
           "recompute, fp8 tensorwise, Grand Teton) is predicted -3.3% / -2.8% against torchtitan's "
           "2025-06 run of this very job with / without AsyncTP and -5.4% / +2.9% against its 405B "
           "128-GPU rows (test_tp8_full_recompute_family_is_predicted_within_10_percent), so the "
           "recipe is not costed slow; op-SAC + FSDP at dp128 is checked on the 8B rows (Tables 1/3 "
           "and E18: -2.0..+4.5%, t1-fsdp and t3-compile held out). No published run of a 70B tp2/tp4 op-SAC layout on these GPUs measures "
           "the plan, so the bar stays unmet without evidence either way. The torchtitan pipelined "
           "rows' +8.9% / +10.4% (t5) are not a pipeline term: t5-1f1b and t6-4d-cp1 share mesh, "
           "schedule, recompute and 32,768 tokens per micro-batch and differ only in sequence "
           "(8K vs 32K); measured 100 / 76 tokens/s (x1.32), model x1.52; the attention core "
           "priced as the full square is what differs (torchtitan 9dec370 models/llama/model.py "
           "l. 209 SDPA is_causal=True: the causal half gives x1.30 per layer)",
    "E9": "plan ep2 ZeRO-2 micro-batch 4 at 0.88x the recipe's ep8 micro-batch 2 (0.884 vs 1.003 s; "
          "measured 1.060 s, the row is held out). Micro-batch 4 makes the step one micro-batch, "
          "which the model prices through two mechanisms Megatron has: one MoE host stall per layer "
          "instead of two (0.081 s; compute.moe_host_sync_s, fitted on E13, held-out checked on "
          "NeMo's Blackwell Qwen3-30B-A3B pairs, see E13) and the data-parallel sync hidden under "
          "one micro-batch's backward twice as long (Megatron reduces in the last micro-batch "
          "only). The model predicts the recipe 5.7% fast with that stall; NeMo keeps Mixtral 8x7B "
          "at micro-batch 2 on B200/GB200 (25.02, 25.04); no Mixtral run at micro-batch 4 "
          "measures it",
}
"""Rows below the 0.9 bar today, with the mechanism believed (or, where it says so, only
suspected) to be missing; docs/validation.md lists each recipe's predicted error."""


@lru_cache(maxsize=None)
def _steps(row_id: str) -> tuple[float, dict]:
    row = ROWS[row_id]
    cluster = load_cluster(row.cluster, gpus=row.gpus)
    recipe = explain(row.model, cluster, row.layout, time_despite_memory=True)["time_s"]["step"]
    best = plan(row.model, cluster, seq_len=row.layout.seq_len,
                global_batch_size=row.layout.global_batch_size, precision=row.layout.precision,
                framework=row.framework, grad_reduce_dtype=row.layout.grad_reduce_dtype,
                precision_knobs={"fp8_param_gather": row.layout.fp8_param_gather,  # the recipe's, as the row
                                 "fp8_recipe": row.layout.fp8_recipe},
                top_k=1)["plans"][0]
    return recipe, best


def _marks(row_id: str):
    gap = KNOWN_GAPS.get(row_id)
    return [pytest.mark.xfail(strict=True, reason=gap)] if gap else []


@pytest.mark.parametrize("row_id", [pytest.param(i, marks=_marks(i)) for i in sorted(ROWS)])
def test_plan_is_not_claimed_much_faster_than_the_experts_layout(row_id):
    recipe, best = _steps(row_id)
    assert best["time_s"]["step"] >= 0.9 * recipe, (best["parallelism"], recipe)


@pytest.mark.parametrize("model_name, gpus, micro_batch, global_batch, async_tp, published", [
    # pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (@b5bcd76) l. 20-25:
    # E16's own job (70B, 256 GPUs, FSDP 32, TP 8, compile, full AC, local batch 16), float8
    # tensorwise, vanilla TP 809.8 / AsyncTP 942.4 tokens/s/GPU
    ("llama-3.1-70b", 256, 16, 512, False, 809.8),
    ("llama-3.1-70b", 256, 16, 512, True, 942.4),
    # pytorch/torchtitan@3faaa1a0d docs/performance.md l. 11-13 and footnote l. 57 (Grand Teton's
    # HBM2e lower-TDP H100): 405B on 128 GPUs, FSDP 16, TP 8, full AC, local batch 2, Float8
    # 177 / Float8 + AsyncTP 185; train_configs/llama3_405b.toml at that commit: seq_len 8192,
    # compile, TP 8 (l. 29-37)
    ("llama-3.1-405b", 128, 2, 32, False, 177),
    ("llama-3.1-405b", 128, 2, 32, True, 185),
])
def test_tp8_full_recompute_family_is_predicted_within_10_percent(model_name, gpus, micro_batch,
                                                                   global_batch, async_tp, published):
    """E16's KNOWN_GAPS claim that the recipe side is not costed slow: the recipe's family (tp8
    with SP, FSDP, full recompute, compiled, fp8 tensorwise, Grand Teton) on published runs that are
    in neither part of the validation data. Model: -2.8%, -3.3%, -5.4%, +2.9%."""
    row = ROWS["E16"]
    layout = row.layout.replace(dp=gpus // 8, micro_batch_size=micro_batch,
                                global_batch_size=global_batch, tp_comm_overlap=async_tp)
    step = explain(load_model(model_name), load_cluster(row.cluster, gpus=gpus), layout,
                   time_despite_memory=True)["time_s"]["step"]
    assert global_batch * layout.seq_len / gpus / step == pytest.approx(published, rel=0.10)


def test_fine_grained_moe_is_planned_with_expert_parallelism():
    # Qwen3-30B-A3B (128 experts) on 16 H100 in fp8: NVIDIA's measured H100 layouts are ep16 pp1
    # (E13, 8,960 tokens/s/GPU) and ep8 pp2 vpp12 (Megatron-Bridge performance-summary-archive.md
    # 26.02.01, 9,058); at ep 1 each GPU's host issues the launch loop of 128 local experts per MoE
    # layer pass (compute.moe_expert_host_idle_s), which the plan must not ignore
    _, best = _steps("E13")
    assert best["parallelism"]["ep"] >= 4, best["parallelism"]


@lru_cache(maxsize=None)
def _qwen3_bf16_plan(framework: str) -> dict:
    """`plan` of senior9 #4's job: Qwen3-30B-A3B on 16 H100, 4,096 x 512 sequences, bf16."""
    return plan(load_model("qwen3-30b-a3b"), load_cluster("dgx-h100", gpus=16), seq_len=4096,
                global_batch_size=512, precision="bf16", framework=framework, top_k=1)["plans"][0]


def test_fine_grained_moe_in_bf16_is_planned_with_expert_parallelism():
    # senior9 #4, the bf16 job at global batch 512 (NVIDIA's H100 layouts as above). Per layer and
    # micro-batch the model gives ep1 and ep8 the same GPU work (the routed GEMMs' narrowest
    # dimension is the expert width 768 once an expert gets more tokens), so ep1 saves the whole
    # all-to-all; what ep1 costs is the host's launch loop over 128 local experts, one cuBLASLt
    # call per expert GEMM (compute.KERNEL_LAUNCH_HOST_S, moe_expert_host_idle_s). At the 5 us
    # low end of HTA's 5-20 us that loop hid under micro-batch 4's GEMMs and the plan was dp2 pp8
    # ep1 micro-batch 4 with per-layer recompute and offload (12.37 s; ep4 12.94 s, ep8 13.43 s)
    best = _qwen3_bf16_plan("megatron")
    assert best["parallelism"]["ep"] >= 4, best["parallelism"]


def test_fine_grained_moe_under_torchtitan_is_sharded_not_pipelined():
    # torchtitan's own Qwen3-30B-A3B config shards over every rank with FSDP and no pipeline,
    # tp 1, and keeps the expert-parallel default 1 (pytorch/torchtitan@b5bcd76
    # torchtitan/models/qwen3/config_registry.py l. 305-337 `qwen3_30b_a3b`:
    # data_parallel_shard_degree=-1, pipeline_parallel_degree=1; torchtitan/config/configs.py
    # l. 282 expert_parallel_degree = 1): its grouped GEMM is one `torch._grouped_mm` for all
    # local experts (models/common/moe.py l. 95-106), so ep1 costs it no per-expert launch loop.
    # senior9 #4 saw pp16 ep1 here; the plan must not pipeline what torchtitan shards.
    best = _qwen3_bf16_plan("torchtitan")
    assert best["parallelism"]["pp"] == 1 and best["parallelism"]["zero_stage"] == 3, best["parallelism"]


def test_moe_micro_batch_gain_is_within_nvidias_b200_measurement():
    """What the plans of E9 and E13 gain over their recipes comes from larger micro-batches (one
    MoE host stall per layer per micro-batch, `compute.moe_host_sync_s`). The one published pair
    on one system: Qwen3-30B-A3B pretraining on 8 DGX-B200, MXFP8, EP8, global batch 512 x 4,096,
    micro-batch 1 -> 9,691 tokens/s/GPU (NeMo 26.02) and micro-batch 4 -> 26,695 (26.02.01):
    2.75x (Megatron-Bridge@067f987 docs/performance-summary-archive.md l. 529 and l. 444; 25.11's
    micro-batch 1, l. 582: 9,299; 26.04.01's micro-batch 4, l. 247: 27,136). Between the two
    the recipe also moved from the alltoall dispatcher to HybridEP and added the attention to its
    CUDA graphs (scripts/performance/configs/qwen/qwen3_workload_base_configs.py, commit
    0ec1df783), both said to help (skills/nemo-mbridge-perf-moe-dispatcher-selection/SKILL.md:
    "HybridEP is usually modestly faster than alltoall"), so the micro-batch alone is worth at
    most the 2.75x. The model: 2.22x (10,153 -> 22,526 tokens/s/GPU); without the MoE host stall
    1.86x (the launch loop of the 16 local experts, `compute.moe_expert_host_idle_s`, is also paid
    per micro-batch), with neither about 1.5x, below the 1.6 this asserts: the host's costs per
    micro-batch are what the pair checks. Split as the Nsight profile's 0.62 ms idle per sync
    plus the rest per token (fitted on E13: 0.47 us per token per MoE layer forward) the model
    gives 1.61x with micro-batch 4 at 16,322 tokens/s/GPU, 39% under its measurement: the pair
    asks for more cost per micro-batch than the profile's idle, not less (compute.moe_host_sync_s)."""
    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster("dgx-b200", gpus=8)
    step = {mb: explain(model, cluster, Layout(
        dp=8, ep=8, micro_batch_size=mb, global_batch_size=512, seq_len=4096, precision="fp8",
        fp8_recipe="mxfp8", zero_stage=1, grad_reduce_dtype="bf16", moe_dispatcher="alltoall"),
        time_despite_memory=True)["time_s"]["step"] for mb in (1, 4)}
    assert 1.6 <= step[1] / step[4] <= 26695 / 9691, step
    # each within 25% of its own measurement (model +12% at micro-batch 1, -12% at 4)
    for mb, published in ((1, 9691), (4, 26695)):
        assert 512 * 4096 / 8 / step[mb] == pytest.approx(published, rel=0.25), (mb, step[mb])



def _qwen3_ep8_tokens_per_gpu_s(cluster: str, micro_batch: int, dispatcher: str) -> float:
    """Predicted tokens/s/GPU of NVIDIA's 8-GPU Qwen3-30B-A3B MXFP8 EP8 recipe (global batch 512 x 4,096)."""
    layout = Layout(dp=8, ep=8, micro_batch_size=micro_batch, global_batch_size=512, seq_len=4096,
                    precision="fp8", fp8_recipe="mxfp8", zero_stage=1, grad_reduce_dtype="bf16",
                    moe_dispatcher=dispatcher)
    step = explain(load_model("qwen3-30b-a3b"), load_cluster(cluster, gpus=8), layout,
                   time_despite_memory=True)["time_s"]["step"]
    return 512 * 4096 / 8 / step


def test_moe_host_stall_is_held_out_checked_on_one_release_pair():
    """A held-out check of `compute.moe_host_sync_s` (fitted on E13, H100) within ONE release: NeMo
    25.11, Qwen3-30B-A3B, 8 GPUs, EP8, MXFP8, global batch 512 x 4,096 (Megatron-Bridge@067f987
    docs/performance-summary-archive.md l. 582: DGX-B200 micro-batch 1, 9,299 tokens/s/GPU;
    l. 571: DGX-GB200 micro-batch 4, 23,766). The 25.11 workload presets (scripts/performance/configs/
    qwen/qwen3_workload_base_configs.py @2effdfa31 l. 193-219): GB200 MXFP8 micro-batch 4 with the
    HybridEP flex dispatcher, B200 MXFP8 the default micro-batch 1 and all-to-all dispatcher, both
    with CUDA graphs of the router and preprocess only. The same notes say every MoE benchmark of
    that release is dropless (l. 597), so both pay the per-layer device-to-host sync. Model: +9.2%
    (10,153) / +3.1% (24,511). Without the stall micro-batch 1 is +56.5% (14,550); with only the
    0.62 ms per sync NVIDIA's bf16 Nsight profile of E13's shape measures as GPU idle (the
    docstring's A/B) +41.5%: on Blackwell at micro-batch 1 the host costs per micro-batch are as
    large as the H100 fit says, which is what E9's and E13's plans exploit (KNOWN_GAPS)."""
    b200_mb1 = _qwen3_ep8_tokens_per_gpu_s("dgx-b200", 1, "alltoall")
    gb200_mb4 = _qwen3_ep8_tokens_per_gpu_s("gb200-nvl72", 4, "flex")
    assert b200_mb1 == pytest.approx(9299, rel=0.25), b200_mb1
    assert gb200_mb4 == pytest.approx(23766, rel=0.25), gb200_mb4


@pytest.mark.xfail(strict=True, reason=(
    "the model over-predicts NVIDIA's DGX-B200 DeepSeek-V3 recipe, which has the structure of "
    "E10's plan (tp1, pp16 with the last stage 1 layer + MTP + loss, EP inside one node), by "
    "27.8% (2,733 vs 2,139 tokens/s/GPU); NeMo 25.11's GB200 DeepSeek-V3 rows (EP in NVLink, "
    "no MTP) are within 4%; at HTA's 20 us per expert launch (32 local experts here) it is +2%, "
    "but that constant moves E9 to +12% (compute.moe_host_sync_s, forms tried)"))
def test_deepseek_v3_b200_recipe_of_the_plans_structure():
    """NeMo 25.11, DeepSeek-V3 with MTP on 256 DGX-B200, MXFP8, global batch 2,048 x 4,096,
    micro-batch 1, TP1 PP16 VP1 EP8: 2,139 tokens/s/GPU (Megatron-Bridge@067f987
    docs/performance-summary-archive.md l. 580; preset scripts/performance/configs/deepseek/
    deepseek_workload_base_configs.py @2effdfa31 `DEEPSEEK_V3_PRETRAIN_CONFIG_B200`: pp 16, ep 8,
    recompute_modules mla_up_proj, moe_a2a_overlap False; the all-to-all dispatcher of the
    DeepSeek-V3 provider; pipeline layout of recipes/deepseek/h100/deepseek_v3.py
    `_get_deepseek_v3_pipeline_layout` (16, 1): embedding + 4 layers, 14 x 4, 1 layer + MTP + loss).
    On a DGX (8-GPU NVLink domain, one NIC per GPU) NVIDIA keeps DeepSeek-V3's all-to-all in a
    node and pipelines 16 deep where memory allows (B200, 180 GB) -- what `plan` picks for E10 on
    H100 (tp1 pp16 ep16). The model's error on it bounds what E10's plan claims."""
    layout = Layout(dp=16, tp=1, pp=16, ep=8, micro_batch_size=1, global_batch_size=2048, seq_len=4096,
                    precision="fp8", fp8_recipe="mxfp8", zero_stage=1, grad_reduce_dtype="bf16",
                    recompute="selective", recompute_modules=("mla_up_proj",), fp8_param_gather=True,
                    moe_dispatcher="alltoall", overlap_grad_reduce=True, overlap_param_gather=True,
                    pipeline_layout=("Etttt",) + ("tttt",) * 14 + ("tmL",))
    step = explain(load_model("deepseek-v3"), load_cluster("dgx-b200", gpus=256), layout,
                   time_despite_memory=True)["time_s"]["step"]
    assert 2048 * 4096 / 256 / step == pytest.approx(2139, rel=0.15), step



@pytest.mark.parametrize("precision, pp, ep, published", [("mxfp8", 8, 32, 4018), ("bf16", 4, 64, 3139)])
def test_deepseek_v3_gb200_recipes_with_ep_inside_nvlink(precision, pp, ep, published):
    """NeMo 25.11, DeepSeek-V3 without MTP on 256 GB200 (NVL72), global batch 4,096 x 4,096,
    micro-batch 1, TP1, VP4: FP8-MX PP8 EP32 4,018 and BF16 PP4 EP64 3,139 tokens/s/GPU
    (Megatron-Bridge@067f987 docs/performance-summary-archive.md l. 568-569); HybridEP flex
    dispatcher and mla_up_proj recompute (deepseek_workload_base_configs.py @2effdfa31
    `DEEPSEEK_V3_PRETRAIN_CONFIG_GB200`), pipeline layouts of `_get_deepseek_v3_pipeline_layout`
    without the MTP layer. The model: +1.1% / +3.8%. With these the DGX rows' misses (the B200
    recipe above, E10) are not a DeepSeek-V3 cost in general."""
    layout = ("Et",) + ("tt",) * 30 + ("L",) if pp == 8 else ("Etttt",) + ("tttt",) * 14 + ("tL",)
    layout = Layout(dp=256 // pp, tp=1, pp=pp, vpp=4, ep=ep, micro_batch_size=1, global_batch_size=4096,
                    seq_len=4096, precision="fp8" if precision == "mxfp8" else "bf16",
                    fp8_recipe="mxfp8" if precision == "mxfp8" else None, zero_stage=1,
                    grad_reduce_dtype="bf16", recompute="selective", recompute_modules=("mla_up_proj",),
                    moe_dispatcher="flex", mtp_layers=0, overlap_grad_reduce=True,
                    overlap_param_gather=True, pipeline_layout=layout)
    step = explain(load_model("deepseek-v3"), load_cluster("gb200-nvl72", gpus=256), layout,
                   time_despite_memory=True)["time_s"]["step"]
    assert 4096 * 4096 / 256 / step == pytest.approx(published, rel=0.15), step

@pytest.mark.xfail(strict=True, reason=(
    "with the 1F1B all-to-all overlap its measured run switched on, the model predicts E10 26% "
    "fast (and E10's plan at 1.02x the recipe: no gap); E10's row keeps today's recipe knobs "
    "(no overlap), which put its error at -7% and the gap at 0.75x"))
def test_deepseek_v3_h100_row_with_its_measured_runs_knobs():
    """E10's 1,297 tokens/s/GPU is NeMo 25.09's (performance-summary-archive.md l. 631). The 25.09
    benchmark script for DeepSeek-V3 (NVIDIA-NeMo/Megatron-Bridge@f37f883a8 "dsv3 2509",
    scripts/performance/run_script.py l. 52-83) ran H100 with DeepEP, `A2A_1F1B` for h100:
    `overlap_moe_expert_parallel_comm = True`, `delay_wgrad_compute = True`,
    `moe_shared_expert_overlap = False`; its config (configs/deepseek/deepseek_v3_llm_pretrain.yaml)
    keeps `overlap_grad_reduce: false  # TODO: enable when 1F1B_A2A is fixed`. The row's knobs
    (validate_training.RECIPE_OVERRIDES) follow today's perf_recipes/deepseek/h100/deepseek_v3.py,
    which no longer overlaps the all-to-all. With the overlap the model hides ~7 s of E10's
    exposed dispatch/combine and over-predicts by 26% (evaluation bar: 25%); the B200 recipe of
    the plan's structure is over-predicted by as much (test above)."""
    row = ROWS["E10"]
    layout = row.layout.replace(ep_comm_overlap=True)
    step = explain(row.model, load_cluster(row.cluster, gpus=row.gpus), layout,
                   time_despite_memory=True)["time_s"]["step"]
    assert row.layout.global_batch_size * row.layout.seq_len / row.gpus / step == pytest.approx(
        row.published, rel=0.15), step

CP_GAPS: dict[str, str] = {}
"""Rows whose plan splits a short sequence today."""
# E3 (Llama 3.1 405B fp8 at 8K) planned tp4 pp16 cp4 until the ring's per-step HBM work was costed
# (`step_time.cp_ring_bytes`): it now plans tp8 pp8 vpp2 cp2, cp4 0.4% behind; tp8 cp1 and tp4 cp2
# do not fit in memory.


@pytest.mark.parametrize("row_id", [pytest.param(i, marks=[pytest.mark.xfail(strict=True, reason=CP_GAPS[i])]
                                                 if i in CP_GAPS else []) for i in sorted(ROWS)])
def test_plan_splits_no_short_sequence(row_id):
    _, best = _steps(row_id)
    seq, cp = ROWS[row_id].layout.seq_len, best["parallelism"]["cp"]
    assert not (seq <= 4096 and cp > 1) and not (seq <= 8192 and cp > 2), (seq, best["parallelism"])
