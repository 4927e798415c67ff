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
    "E10": "plan tp1 pp16 ep16 (flex) at 0.76x the recipe's tp2 pp8 vpp4 ep64 (19.5 vs 25.6 s; "
           "measured 25.3 s): compute 14.0 vs 15.3 s, exposed communication 3.3 vs 9.8 s: "
           "an EP group on 2 nodes sends each token over the network to ~1 other node, on 8 nodes "
           "with DeepSeek-V3's 4-of-8 group routing to ~3.2 (comm._flex_dispatch), a per-byte rate "
           "HybridEP's published H100 kernels keep flat from 2 to 8 nodes (test_moe_dispatcher."
           "test_flex_call_time_tracks_hybridep_published_h100_kernels: the model's growth is at "
           "most 1.35x too steep, worth <= 0.9 s here); the plan also offloads expert_fc1 "
           "activations and pays a 2.0 s bubble at pp16; the dispatcher's buffers (cost.ep_buffers) "
           "leave it feasible; no measurement of DeepSeek-V3 at ep16",
    "E13": "plan tp1 pp1 ep16 ZeRO-3 micro-batch 2 at 0.81x the recipe's ep16 micro-batch 1: the "
           "MoE host stall (compute.moe_host_sync_s, 2.54 ms per MoE layer per micro-batch) is "
           "fitted on this row alone (the only MoE FIT row), so the recipe is exact by construction "
           "and the stall, ~7.8 s of its 29.3 s, carries ~1.9 ms per sync beyond the 0.62 ms idle "
           "NVIDIA's Nsight A/B of this shape measures (the docstring's (a)-(c)); charged per "
           "micro-batch it rewards micro-batch 2. Split as that 0.62 ms plus a per-token rest the "
           "B200 pair below falls to 1.33x (measured 2.75x); as 0.62 ms plus the 8 local experts' "
           "launch loop at HTA's 20 us (compute.KERNEL_LAUNCH_HOST_S) E9 is predicted 12.6% fast, "
           "E10 7.0%. NVIDIA's H100 Qwen3-30B-A3B "
           "recipes keep micro-batch 1 in every release (performance-summary-archive.md 26.02-26.06) "
           "while their B200 one moved to 4 (test_moe_micro_batch_gain_is_within_nvidias_b200_"
           "measurement); no H100 run at micro-batch > 1 of the same stack measures the gain",
    "E16": "plan tp4 pp2 cp2 ZeRO-3 b1 with per-layer recompute at 0.75x the recipe's tp8 FSDP "
           "b16 full recompute (both compiled): in the model the recipe's full recompute is 3.8 s and "
           "its exposed tp8 communication 2.4 s of its 18.0 s step (the plan's 0.5 and 0.8 s); the model over-predicts torchtitan's pipelined rows by 9-10% "
           "(docs/validation.md t5: +8.9% / +10.4%), so even corrected the plan would claim ~0.82x; "
           "no measurement of the plan's layout",
    "E9": "plan ep2 ZeRO-2 micro-batch 4 at 0.88x the recipe's ep8 micro-batch 2 (0.884 vs 1.003 s; "
          "measured 1.060 s, the row is held out). Micro-batch 4 makes the step one micro-batch, "
          "which the model prices through two mechanisms Megatron has: one MoE host stall per layer "
          "instead of two (0.081 s; compute.moe_host_sync_s, fitted on E13 only), and the "
          "data-parallel sync (the expert gradients reduced over edp 8 = one GPU on each of 8 "
          "nodes) hidden under one micro-batch's backward twice as long (Megatron reduces in the "
          "last micro-batch only; exposed 0.209 -> 0.115 s without the stall). The model predicts "
          "the recipe 5.7% fast with that stall; NVIDIA's B200 Qwen3-30B-A3B runs gained more "
          "from micro-batch 4 than the model gives (test_moe_micro_batch_gain_is_within_nvidias_"
          "b200_measurement); NeMo keeps Mixtral 8x7B at micro-batch 2 on B200/GB200 (25.02, "
          "25.04); no Mixtral run at micro-batch 4 measures it",
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
                precision_knobs={"fp8_param_gather": row.layout.fp8_param_gather},  # the recipe's, as the row
                top_k=1)["plans"][0]
    return recipe, best


def _marks(row_id: str):
    gap = KNOWN_GAPS.get(row_id)
    return [pytest.mark.xfail(strict=True, reason=gap)] if gap else []


@pytest.mark.parametrize("row_id", [pytest.param(i, marks=_marks(i)) for i in sorted(ROWS)])
def test_plan_is_not_claimed_much_faster_than_the_experts_layout(row_id):
    recipe, best = _steps(row_id)
    assert best["time_s"]["step"] >= 0.9 * recipe, (best["parallelism"], recipe)


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
