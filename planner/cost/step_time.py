"""Time of one training step for a model, a cluster and a layout.

Per pipeline stage and micro-batch: forward + backward compute of its layers (FLOPs / (peak x
efficiency), `compute.py`), the recompute its recompute mode adds, the tensor/sequence/context/expert
parallel communication that sits on the critical path (`collectives.py`), and for ZeRO-3 the parameter
gathers that compute does not hide. The schedule (`pipeline.py`) turns the bottleneck stage's
per-micro-batch time into the pipelined time. Then the data-parallel gradient reduction that the last
backward does not hide, the collectives after it, the optimizer step (memory-bound) and offload traffic.

    step = pipeline(m, pp, vpp; t_f, t_b) + DP tail + after-sync + optimizer + offload

Every collective priced here is a record of `planner.cost.comm` (the list the user is shown): its
phase says what it overlaps with, its mesh axes and the rank order where its group sits in the
cluster (`_record_sharing`), `collectives.collective_time` its alpha-beta time. This module keeps
no list of its own.

Model FLOPs (MFU numerator) follow `params_flops.flops_per_token(...).training` (PaLM appendix B),
with the trained MTP layers (`placement.mtp`) included;
hardware FLOPs (HFU numerator) add what recompute executes again (Narayanan et al. 2021 eq. (3)
counts full recompute as a 4th pass of the layers, the LM head not recomputed).

Rank order (which axes sit inside a scale-up domain) is an argument, default
`collectives.DEFAULT_RANK_ORDER` (tp innermost, then cp, ep, dp, pp).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from planner.cost import collectives as coll
from planner.cost import comm
from planner.cost.comm import Collective
from planner.cost.compute import (ATTENTION_BACKWARD_FLOPS, achieved_flops, attention_flops, core_precision,
                                   executed_attention_fraction,
                                   expert_host_launches, fp8_cast_bytes, moe_expert_host_idle_s, moe_host_sync_s,
                                   peak_flops, torchao_fp8_linear_factor)
from planner.cost.activations import layer_activation_bytes, op_sac_recomputed_matmuls, op_sac_regather_consumers
from planner.cost.memory import activation_arguments, mtp_group_counts, stage_layers
from planner.cost.params_flops import count_params, flops_per_token
from planner.cost.pipeline import (PipelineCoefficients, pipeline_coefficients,
                                   uneven_interleaved_bubble_s)
from planner.errors import SpecError
from planner.frameworks import BY_NAME
from planner.placement import mtp, overlap, pipeline_layout
from planner.placement.precision import fused_qkv, state_bytes, state_key, torchao_fp8_recipe
from planner.placement.layout import RECOMPUTE_MODES, Layout
from planner.placement.states import GROUPS
from planner.placement.strategies import placement_for, placement_key
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec

HBM_EFFICIENCY = 0.80
"""[Empirical] sustained / peak HBM bandwidth for streaming kernels (optimizer step). Basis:
BabelStream/STREAM triad on A100-80GB ~1.7 TB/s of 2.04 TB/s and on H100-SXM ~2.6-2.9 TB/s of 3.35
(public BabelStream results); not fitted on the validation runs."""

SHARDED_DP_FLAT_RING = frozenset({"deepspeed"})
"""[Empirical] Frameworks whose ZeRO-2/3 per-micro-batch gathers and reduce-scatters we model with
their network part at one NIC per GPU (no k-fold aggregation over the scale-up domain): DeepSpeed
only. Basis: Narayanan et al. 2021 Table 2 ZeRO-3 rows (DeepSpeed; 174.6B on 384/768/1536 GPUs,
529.6B on 640/1120/2240): at a fixed global batch the step time stays constant as GPUs double, at a
level of traffic per GPU ~ 4 x params x 2 B at ~21 GB/s per GPU (25 GB/s HDR x 0.85); the
mechanism in DeepSpeed is not identified. Not for PyTorch FSDP2 (torchtitan) or Megatron-FSDP:
they issue each unit's all_gather_into_tensor / reduce_scatter_tensor on one NCCL communicator of
the whole data-parallel group, whose rings run one channel per NIC (NVIDIA/nccl@5067397
src/graph/search.cc `ncclTopoCompute`), so the traffic crossing nodes is the per-node volume of
every other collective here (`collectives.collective_time`, hierarchical). Measured: torchtitan
FSDP 128 vs 8 H100 (benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd Tables 3 vs 1, same
local batch) lost 2.7% / 2.3% / 1.8% (FSDP / + compile / + Float8) of its throughput, where one
NIC per GPU would put 1.47 s of gathers beside 2.3 s of compute and predicted 1.13x; 32 -> 64 H200
lost 1.7% (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md)."""

OPTIMIZER_BYTES_PER_PARAM = {"adamw": 30, "sgd": 22, "adam8bit": 18}
"""HBM bytes read + written per parameter by one optimizer step (mixed precision). adamw: fp32 master
r/w 8, m r/w 8, v r/w 8, fp32 grad read 4, bf16 param write 2; sgd: master 8 + momentum 8 + grad 4 +
param 2; adam8bit: master 8 + two 1-byte states r/w 4 + grad 4 + param 2. Source: Rajbhandari et al.
2020 (ZeRO) §3.1 state sizes (K = 12 for Adam); Dettmers et al. 2022 (8-bit optimizers) §2."""

CPU_OPTIMIZER_PARAMS_PER_CORE_S = {"deepspeed": 8.1e7, "pytorch": 1.4e7}
"""[Empirical] Adam(W) parameters one physical CPU core updates per second when the optimizer step
runs on the host (optimizer offload): DeepSpeed's vectorized CPU-Adam (`DeepSpeedCPUAdam`, the
optimizer DeepSpeed builds for an offloaded Adam(W)), and PyTorch's Adam on the CPU for the other
frameworks (torchtitan's FSDP2 `CPUOffloadPolicy` steps torch.optim on the host-resident shards).
Fitted, least squares through the origin (p = r t), on the 1, 4 and 10 billion rows of ZeRO-Offload
(Ren et al. 2021, USENIX ATC) Table 4 "Adam latency (s)" -- CPU-Adam 0.22 / 1.03 / 2.57 s, PT-CPU
1.39 / 5.71 / 14.76 s -- on its DGX-2 host (Table 2: two Xeon Platinum 8168, 48 cores): 3.89e9 and
6.81e8 parameters/s, / 48 cores; the 2 and 8 billion rows are the evaluation part (CPU-Adam
0.51 / 2.41 s predicted 0.51 / 2.05 s, -15% at 8B; PT-CPU 2.75 / 11.93 s predicted 2.94 / 11.75 s).
Assumes the rate scales with the cores a rank gets (`ClusterSpec.cpu_cores_per_gpu`) and per core
across CPU generations; the host's DRAM bandwidth is not modelled (CPU-Adam moves about 30 B per
parameter: 117 GB/s at the DGX-2 rate, under its 2 x 128 GB/s DDR4-2666)."""

UNFUSED_SCORE_BYTES = 13
"""HBM bytes moved per attention-score element in one forward pass of an unfused (pre-FlashAttention)
attention core: write QK^T 2, softmax read 2 + write 2, dropout read 2 + write 2 + mask 1, AV read 2.
Backward moves twice that. Source: the tensors Korthikanti et al. 2022 §4.1 lists for the attention
core (2as^2b softmax output, as^2b dropout mask, 2as^2b dropout output, plus the QK^T result)."""

@dataclass(frozen=True, kw_only=True)
class LayerTime:
    """One decoder layer, one micro-batch, one GPU."""

    forward_s: float
    """Forward compute, s, with a MoE layer's host stall and launch-loop idle (`_moe_host_s`)."""
    backward_s: float
    """Backward compute (2 x the forward's GPU work), s, with a MoE layer's launch-loop idle."""
    recompute_s: float
    """Compute executed again in backward by the recompute mode, s."""
    comm_s: float
    """Exposed TP/SP, CP and EP communication (forward, backward and recompute), s."""

    @property
    def total_s(self) -> float:
        """Forward + backward + recompute + exposed communication of the layer, s."""
        return self.forward_s + self.backward_s + self.recompute_s + self.comm_s


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """Time of one optimizer step and its split (all times in seconds)."""

    step: float
    """Wall time of one step, s."""
    compute: float
    """Forward + backward compute on the bottleneck stage (no recompute), s."""
    communication_exposed: float
    """Communication not hidden by compute (TP/CP/EP, p2p, DP/ZeRO tail, offload), s."""
    pipeline_bubble: float
    """Idle time of the bottleneck stage in the schedule, s."""
    recompute: float
    """Recompute on the bottleneck stage, s."""
    optimizer: float
    """Optimizer step, s: memory-bound on the GPU, or on the host's CPU cores with the optimizer
    offloaded (`_optimizer_time`)."""
    tokens_per_s: float
    """Global batch tokens / step, tokens/s."""
    tflops_per_gpu: float
    """Model FLOPs (no recompute) per GPU per second, TFLOP/s (1e12)."""
    hardware_tflops_per_gpu: float
    """Model + recompute FLOPs per GPU per second, TFLOP/s (Narayanan 2021 eq. (3) convention)."""
    mfu: float
    """tflops_per_gpu / dense peak of the compute dtype."""
    hfu: float
    """hardware_tflops_per_gpu / dense peak."""
    stage_step: tuple[float, ...] = ()
    """[stage] that stage's step total (`StageCostModel.stage_total`); step is their maximum, s."""


# ---------------------------------------------------------------- per layer


def _layer_flops_per_token(model: ModelSpec, index: int, seq_len: int) -> tuple[float, float, float]:
    """(dense matmul, routed-expert matmul, attention core) forward FLOPs per token of layer `index`.

    Source: Kaplan et al. 2020 Table 1 (2 FLOPs per matmul parameter; attention 2 n_ctx d_attn per
    QK^T and per AV), as in `params_flops.flops_per_token`.
    """
    layer = _counts(model).layers[index]
    routed = 2 * model.num_experts_per_tok * layer.expert_size
    dense = 2 * (layer.total - layer.routed_experts - layer.norms)
    ctx = seq_len
    if model.layer_types and model.layer_types[index] == "sliding_attention" and model.sliding_window:
        ctx = min(seq_len, model.sliding_window)
    if model.is_mla:
        d_sum = model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim
    else:
        d_sum = 2 * model.head_dim
    attention = 2 * ctx * model.num_attention_heads * d_sum
    return float(dense), float(routed), float(attention)


@lru_cache(maxsize=64)
def _counts(model: ModelSpec):
    return count_params(model)


def _sharing(layout: Layout, cluster: ClusterSpec, order: Sequence[str]) -> dict[str, int]:
    return layout.mesh.domain_sharing(cluster.scaleup_domain_gpus, order)


def axes_sharing(layout: Layout, cluster: ClusterSpec,
                 rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER) -> tuple[tuple[str, int], ...]:
    """GPUs of one group of each dense axis (tp, cp, dp, pp) inside one scale-up domain, as a
    hashable key (for callers' caches)."""
    return tuple(_sharing(layout, cluster, rank_order).items())


def layer_time_key(layout: Layout, sharing: tuple[tuple[str, int], ...]) -> tuple:
    """Everything of `layout` and its `axes_sharing` that `layer_time` reads (b, s, tp, cp, ep,
    etp, SP, precision, the tp and cp groups' domain sharing, the only ones `_layer_comm` uses, the
    TP / EP overlaps (and with TP overlap or CP the framework, whose scheme / ring prices it), whether it is
    Megatron-FSDP (whose CP ring `_cp_ring_exposed` leaves unhidden before Blackwell), whether the
    elementwise kernels are fused, the framework's attention kernel, the gradient buffer's bytes
    the expert GEMMs accumulate into (`_expert_weight_bytes`) and the framework's host launches
    per local expert (`_moe_host_s`), the framework's gradient-accumulation bytes per parameter
    (`_grad_accumulation_s`)): layouts with equal keys have equal layer times (for callers' caches)."""
    share = dict(sharing)
    ov = overlap.resolve(layout)
    return (layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp, layout.ep, layout.etp,
            layout.precision, torchao_fp8_recipe(layout), share["tp"], share["cp"], layout.sequence_parallel,
            ov.tp_comm_overlap, ov.ep_comm_overlap, layout.cp_comm_type, state_bytes(layout).gradients,
            layout.moe_dispatcher, layout.framework if ov.tp_comm_overlap or layout.cp > 1 else None,
            BY_NAME[layout.framework].fused_elementwise(layout.torch_compile), layout.norm_kernel,
            BY_NAME[layout.framework].attention_kernel(),
            layout.selective_modules, layout.offload_modules, "activations" in layout.offload, fused_qkv(layout),
            layout.framework == "megatron" and layout.zero_stage >= 2 and layout.pp == 1,  # `overlap.connections_conflict`
            tuple(expert_host_launches(layout.framework, phase, layout.precision)
                  for phase in ("forward", "backward")),
            BY_NAME[layout.framework].grad_accumulation_bytes_per_param(layout.precision, layout.zero_stage,
                                                                        layout.pp))


def _ep_sharing(layout: Layout, cluster: ClusterSpec, order: Sequence[str]) -> int:
    """GPUs of an EP group per domain (`Mesh.ep_sharing`)."""
    return layout.mesh.ep_sharing(cluster.scaleup_domain_gpus, order)


def layer_time(model: ModelSpec, cluster: ClusterSpec, layout: Layout, layer_index: int,
               recompute: str, *, rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER,
               flash_attention: bool = True) -> LayerTime:
    """Time components of one layer for one micro-batch on one GPU under recompute mode `recompute`.

    Compute: per-GPU FLOPs = b*s * FLOPs/token / (tp*cp) (experts balanced over ep*etp of the same
    ranks); backward = 2 x forward (Narayanan 2021 §5.1), except a fused attention core's
    (`_attention_backward_excess_s`: 2.5x its FLOPs at the backward kernel's rate). Recompute:
    selective re-runs the attention core (Korthikanti et al. 2022 §5), full re-runs the forward and
    its TP/EP communication.
    Communication: the records of `comm.layer_collectives`, priced by phase (`_layer_comm`).
    TP/SP: 2 all-reduces (or all-gathers + reduce-scatters, same time) of b*s/cp*h activations
    forward and 2 backward, all exposed (Korthikanti 2022 §4.2.2; Shoeybi et al. 2019 §3). CP: the
    ring passes K and V (an all-gather of the sequence's KV) forward and K, V, dK, dV backward,
    overlapped with the attention core; only the excess shows (Liu et al. 2023, Ring Attention §3;
    Megatron-LM CP docs). EP: dispatch + combine all-to-all of the routed tokens forward and
    backward, exposed (Lepikhin et al. 2020 GShard §2; Megatron-Core MoE docs). Without FlashAttention (Dao et al. 2022) the
    attention core also streams the b*a*s^2 score matrix through HBM (UNFUSED_SCORE_BYTES per element
    per forward), which counts as part of its time. Executed attention work: a fused (Flash)
    kernel runs the causal part of the scores (`compute.executed_attention_fraction`, about half)
    at the causal kernel's rate; the unfused core computes the whole square. Reported MFU / TFLOP/s
    count model FLOPs in their own convention (`_summary`, `planner.summary.mfu_basis`), not this.
    """
    if recompute not in RECOMPUTE_MODES:
        raise SpecError(f"value {recompute!r} not allowed; allowed: {', '.join(RECOMPUTE_MODES)}",
                        key="recompute")
    if not 0 <= layer_index < model.num_hidden_layers:
        raise SpecError(f"layer {layer_index} outside 0..{model.num_hidden_layers - 1}", key="layer_index")
    # Everything the result depends on: the layout enters through these fields and the axes'
    # domain sharing (so meshes differing only in outer dp/pp degrees share an entry).
    key = (id(model), id(cluster), layer_index, recompute,
           layer_time_key(layout, tuple(_sharing(layout, cluster, rank_order).items())),
           tuple(rank_order), flash_attention)
    hit = _LAYER_TIMES.get(key)
    if hit is not None and hit[0] is model and hit[1] is cluster:
        return hit[2]
    if len(_LAYER_TIMES) >= 65536:
        _LAYER_TIMES.clear()
    # One miss costs every mode: they share the compute and the collectives (`_layer_parts`).
    parts = _layer_parts(model, cluster, layout, layer_index, rank_order, flash_attention)
    for mode in RECOMPUTE_MODES:
        _LAYER_TIMES[key[:3] + (mode,) + key[4:]] = (model, cluster, _layer_time(parts, mode))
    return _LAYER_TIMES[key][2]  # the tuple keeps both alive, so their ids are not reused


def layer_time_modes(model: ModelSpec, cluster: ClusterSpec, layout: Layout, layer_index: int, *,
                     rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER,
                     flash_attention: bool = True) -> tuple[LayerTime, ...]:
    """`layer_time` under each of RECOMPUTE_MODES, in that order (one cache key built, not one
    per mode: the first call fills every mode's entry)."""
    first = layer_time(model, cluster, layout, layer_index, RECOMPUTE_MODES[0],
                       rank_order=rank_order, flash_attention=flash_attention)
    key = (id(model), id(cluster), layer_index, None,
           layer_time_key(layout, tuple(_sharing(layout, cluster, rank_order).items())),
           tuple(rank_order), flash_attention)
    out = [first]
    for mode in RECOMPUTE_MODES[1:]:
        hit = _LAYER_TIMES.get(key[:3] + (mode,) + key[4:])
        out.append(hit[2] if hit is not None and hit[0] is model and hit[1] is cluster else
                   layer_time(model, cluster, layout, layer_index, mode, rank_order=rank_order,
                              flash_attention=flash_attention))
    return tuple(out)


_LAYER_TIMES: dict = {}
"""Cache of `layer_time` keyed by the identities of model and cluster (ClusterSpec is unhashable)."""


def _layer_parts(model, cluster, layout, layer_index, rank_order, flash_attention):
    """(forward, attention-core forward, [exposed comm of one forward pass + backward, of a
    second forward pass], (GPU time beyond the parts' 1:2 split in the forward, in the backward),
    selective recompute, offload) of one layer, s: what every recompute mode combines (`_layer_time`).

    Forward = dense linear GEMMs + routed-expert grouped GEMMs + attention core + memory-bound
    terms (`_layer_compute_s`); a MoE layer's passes also leave the GPU idle on the host
    (`_moe_host_s`: forward, backward), which hides no communication."""
    fwd, attn_fwd = _layer_compute_s(model, cluster, layout, layer_index, flash_attention)
    comm = _layer_comm(model, cluster, layout, layer_index, attn_fwd, rank_order, fwd)
    host = _moe_host_s(model, cluster, layout, layer_index)
    selective = _selective_recompute_s(model, cluster, layout, layer_index, attn_fwd) + _op_sac_regather_s(
        model, cluster, layout, layer_index, _sharing(layout, cluster, rank_order))
    host = (host[0], host[1] + _attention_backward_excess_s(model, cluster, layout, layer_index, flash_attention)
            + _grad_accumulation_s(cluster, layout, _layer_params_per_gpu(model, layout, layer_index)))
    return fwd, attn_fwd, comm, host, selective, _offload_s(model, cluster, layout, layer_index)


def _layer_params_per_gpu(model: ModelSpec, layout: Layout, index: int) -> float:
    """Parameters of decoder layer `index` on one GPU: dense / tp, routed experts / (ep x etp)."""
    layer = _counts(model).layers[index]
    return (layer.total - layer.routed_experts) / layout.tp + layer.routed_experts / (layout.ep * layout.etp)


def _grad_accumulation_s(cluster: ClusterSpec, layout: Layout, params: float) -> float:
    """Gradient accumulation outside the GEMMs in one micro-batch's backward, s, for `params`
    parameters on the GPU: the framework's bytes per parameter
    (`frameworks.<framework>.grad_accumulation_bytes_per_param`: DeepSpeed's in-place add into the
    16-bit `.grad`, and under its BF16_Optimizer the zeroing and fp32 copy) at the achievable HBM
    bandwidth (memory-bound elementwise kernels, `HBM_EFFICIENCY`). Carried with the backward (it is
    not recomputed and hides no communication)."""
    per_param = BY_NAME[layout.framework].grad_accumulation_bytes_per_param(layout.precision, layout.zero_stage,
                                                                            layout.pp)
    return params * per_param / _hbm_bytes_per_s(cluster)


def _attention_backward_excess_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int,
                                 flash_attention: bool) -> float:
    """What a fused attention core's backward takes beyond the 2 x forward every part of a layer is
    given (`_layer_time`), s per micro-batch on one GPU: FlashAttention recomputes the scores in its
    backward (`compute.ATTENTION_BACKWARD_FLOPS` = 2.5x the forward's FLOPs) at its backward kernel's
    rate (`compute.attention_efficiency`, backward), `attention_core_s` both ways; 0 for the unfused
    core (it stores the probabilities: 4 backward matmuls, 2x). Carried with the backward's host idle
    (it hides no communication either way). Source: Dao 2023 §4.1; Shah et al. 2024 Fig. 6."""
    if not flash_attention:
        return 0.0
    local = layout.micro_batch_size * layout.seq_len / (layout.tp * layout.cp)
    kernel = BY_NAME[layout.framework].attention_kernel()
    core = {bwd: attention_core_s(model, index, layout.seq_len, cluster.gpu, layout.precision, cp=_ring_cp(layout),
                                  kernel=kernel, backward=bwd) for bwd in (False, True)}
    return max(0.0, local * (core[True] - 2 * core[False]))


def _moe_host_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int) -> tuple[float, float]:
    """(forward, backward) GPU idle on the host of one pass of layer `index` (one micro-batch), s:
    (0, 0) for a dense layer; for a MoE layer the forward's synchronization stall
    (`compute.moe_host_sync_s`) plus, in each pass, the idle of the per-local-expert launch loop
    (`compute.moe_expert_host_idle_s`) of num_experts / ep local experts against the GPU time of the
    routed-expert GEMMs (`_routed_experts_s`; backward 2x, Narayanan 2021 §5.1)."""
    if not (model.is_moe and model.moe_layers[index]):
        return 0.0, 0.0
    local = max(1, model.num_experts // layout.ep)
    gpu_s = _routed_experts_s(model, cluster, layout, index)
    idle = {phase: moe_expert_host_idle_s(
        local, expert_host_launches(layout.framework, phase, layout.precision), gpu_s * passes)
        for phase, passes in (("forward", 1), ("backward", 2))}
    return moe_host_sync_s() + idle["forward"], idle["backward"]


def _routed_experts_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int) -> float:
    """GPU time, s, of one MoE layer's routed-expert grouped GEMMs in one forward pass (one
    micro-batch, one GPU): the larger of their FLOPs at the rate of their own shape and their weight
    bytes (`_expert_weight_bytes`), as `_layer_compute_s` counts them."""
    _, routed, _ = _layer_flops_per_token(model, index, layout.seq_len)
    local = layout.micro_batch_size * layout.seq_len / (layout.tp * layout.cp)
    flops_s = local * routed / achieved_flops(cluster.gpu, layout.precision,
                                              gemm_dim=_expert_gemm_dim(model, layout))
    return max(flops_s, _expert_weight_bytes(model, layout, index) / 3 / _hbm_bytes_per_s(cluster))


def _layer_compute_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int,
                     flash_attention: bool) -> tuple[float, float]:
    """(forward compute, its attention-core part) of one layer, one micro-batch, one GPU, s.

    A GPU does the work of b*s/(tp*cp) tokens (`layer_time`). Its parts:
    - dense linear GEMMs (attention projections, dense MLP, shared experts) at the linear
      precision's rate for d = min(h/tp, b*s/cp) (`compute.achieved_flops`);
    - routed experts as grouped GEMMs at the rate of their own shape (`_expert_gemm_dim`);
    - the attention core: the framework's fused kernel (`frameworks.<framework>.attention_kernel`:
      cuDNN / FlashAttention-3 or FlashAttention-2) at the core precision (bf16 under fp8) and the
      per-rank chunk's efficiency (`compute.attention_flops`); unfused, at the GEMM rate plus the
      s^2 score traffic (UNFUSED_SCORE_BYTES);
    - memory-bound (at HBM_EFFICIENCY x HBM bandwidth): the router GEMM and its softmax/top-k,
      permute/unpermute of the routed copies (`_moe_memory_bytes`), under fp8 the casts of
      every linear input and output gradient (`compute.fp8_cast_bytes`), and without fused
      elementwise kernels (torchtitan in eager mode, `frameworks.<framework>.fused_elementwise`)
      the bytes unfused kernels move beyond fused ones (`unfused_elementwise_bytes`, and with
      `layout.norm_kernel` composite the op-by-op RMSNorm's, `composite_norm_bytes`); the fused
      kernels' own bytes are part of what the fitted GEMM efficiency absorbs on every row.
    Backward = 2 x forward for every part here (Narayanan 2021 §5.1; the fused attention core's excess
    over that is `_attention_backward_excess_s`, added by `_layer_parts`), so memory terms that run once
    per forward + backward enter as a third of their bytes.
    """
    b, s, tp, cp = layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp
    gpu, precision = cluster.gpu, layout.precision
    dense, routed, attention = _layer_flops_per_token(model, index, s)
    router = 2.0 * _counts(model).layers[index].router
    local = b * s / (tp * cp)
    lin = precision        # linear GEMMs run in the layout's precision (fp8 included)
    gemm_dim = min(model.hidden_size / tp, b * s / cp)
    torchao = torchao_fp8_recipe(layout)   # torchtitan's float8 recipe (rowwise GEMMs, bf16 wgrad)
    fwd = (local * (dense - router) / achieved_flops(gpu, lin, gemm_dim=gemm_dim)
           * torchao_fp8_linear_factor(gpu, torchao, gemm_dim=gemm_dim))
    if routed:
        fwd += _routed_experts_s(model, cluster, layout, index)
    if flash_attention:
        attn_fwd = local * attention_core_s(model, index, s, gpu, precision, cp=_ring_cp(layout),
                                            kernel=BY_NAME[layout.framework].attention_kernel())
        attn_fwd += cp_ring_bytes(model, layout) / 3 / _hbm_bytes_per_s(cluster)
    else:
        attn_fwd = local * attention / achieved_flops(gpu, core_precision(precision), gemm_dim=gemm_dim)
        scores = b * model.num_attention_heads / tp * s * s / cp
        attn_fwd += scores * UNFUSED_SCORE_BYTES / _hbm_bytes_per_s(cluster)
    memory = _moe_memory_bytes(model, index) if routed else 0.0
    memory += fused_elementwise_bytes(model, index, replicated=tp if tp > 1 and not layout.sequence_parallel else 1)
    if not BY_NAME[layout.framework].fused_elementwise(layout.torch_compile):
        memory += unfused_elementwise_bytes(model, index)
        if layout.norm_kernel == "composite":
            memory += composite_norm_bytes(model)
    if lin == "fp8":
        memory += fp8_cast_bytes(sum(_linear_io_per_token(model, index)), torchao) / 3
    fwd += attn_fwd + local * memory / _hbm_bytes_per_s(cluster)
    return fwd, attn_fwd


def _mlp_width(model: ModelSpec, index: int) -> float:
    """Width of layer `index`'s MLP activations per token: the dense MLP's intermediate size, or a
    MoE layer's shared experts' plus top_k routed copies' (each of moe_intermediate_size)."""
    if model.is_moe and model.moe_layers[index]:
        return float((model.shared_expert_intermediate_size or 0)
                     + model.num_experts_per_tok * model.moe_intermediate_size)
    return float(model.intermediate_size)


def _rotated_elements(model: ModelSpec) -> float:
    """Elements per token RoPE rotates: q (heads x head dim; MLA: heads x rope dim) and k (kv heads x
    head dim; MLA: the shared rope key); 0 without rotary position embeddings."""
    if model.position_embedding_type != "rope":
        return 0.0
    if model.is_mla:
        return float(model.num_attention_heads * model.qk_rope_head_dim + model.qk_rope_head_dim)
    return float((model.num_attention_heads + model.num_key_value_heads) * model.head_dim)


def fused_elementwise_bytes(model: ModelSpec, index: int, *, replicated: int = 1) -> float:
    """HBM bytes per local token (one GPU's b*s/(tp*cp) tokens) that layer `index`'s memory-bound
    kernels move in one forward pass when every elementwise chain is one fused kernel (Megatron /
    Transformer Engine's fused kernels; torch.compile), bf16 activations (2 B per element):

    - the two norms (RMSNorm or LayerNorm before attention and before the MLP): read h, write h
      elements each: 8h B;
    - the two residual adds (Megatron's fused bias-dropout-add): read the residual and the block
      output, write the sum: 12h B;
      without sequence parallelism every tp rank runs the norms and adds on the whole sequence
      (Korthikanti et al. 2022 §4.2.2: SP splits exactly these ops along the sequence), so the
      forward moves `replicated` (= tp) times these 20h B per local token. Only the forward's
      copies are priced: Korthikanti et al. 2022 Table 4 (22B layer, tp 8, A100) measured SP saving
      0.5 ms of the forward (7.7 -> 7.2 ms; these bytes predict 0.54 ms) but 0.1 ms of the
      backward (11.9 -> 11.8), so the (replicated - 1) extra copies enter once, not x 3;
    - RoPE: read and write each rotated element of q and k (`_rotated_elements`), 4 B each;
    - the MLP activation: gated (SwiGLU) reads the gate and up outputs and writes their product,
      6 B per width element; plain (GeLU, with its bias fused) reads and writes, 4 B
      (`_mlp_width`, per tp rank I/tp on b*s/cp tokens = I per local token).
    The backward pass moves about twice these bytes (each op's autograd reads the saved input and
    the incoming gradient and writes the outgoing one); `_layer_compute_s` counts memory terms x 3
    over forward + backward, at HBM_EFFICIENCY x the datasheet HBM bandwidth (so the returned value
    holds the replicated copies at a third of their bytes).

    Why priced, not folded into the fitted GEMM efficiency: these bytes grow with h (and I) per
    token while the GEMM FLOPs grow with h^2, and the ratio of a GPU's FLOP/s to its HBM bandwidth
    differs between parts of one family (H100 SXM 989 TFLOP/s on 3.35 TB/s; the 500 W HBM2e H100
    of Grand Teton 836-989 on 2.4; H200 989 on 4.8): folded into one e_max, an 8B model (h 4096)
    on a 2.4 TB/s part was over-predicted and a 405B (h 16384) or an H200 run under-predicted
    (docs/validation.md). Source of the op list: NVIDIA/Megatron-LM@d98e8a6 megatron/core/
    transformer/transformer_layer.py (input_layernorm, self_attention, self_attn_bda,
    pre_mlp_layernorm, mlp, mlp_bda), megatron/core/fusions/fused_bias_swiglu.py and
    fused_bias_gelu.py; pytorch/torchtitan@b5bcd76 torchtitan/models/common/decoder.py
    (x + attn(norm(x)); x + ffn(norm(x))), feed_forward.py l. 53-54, rope.py l. 254-264."""
    h = model.hidden_size
    per_width = 6.0 if model.gated_mlp else 4.0
    return (20.0 * h * (1.0 + (replicated - 1) / 3.0) + 4.0 * _rotated_elements(model)
            + per_width * _mlp_width(model, index))


COMPOSITE_NORM_BYTES_PER_ELEMENT = 32
"""HBM bytes per element of one RMSNorm's input that the op-by-op (composite) RMSNorm moves in a
forward pass beyond one fused kernel (read 2 + write 2): x.float() reads 2, writes 4; pow(2) reads
4, writes 4; mean reads 4; x * rsqrt(...) reads 4, writes 4; .type_as(x) reads 4, writes 2;
* weight reads 2, writes 2 = 36 B, 32 more (the per-token mean, eps and rsqrt are h times
smaller). Source: pytorch/torchtitan@9dec370 torchtitan/models/norms.py `RMSNorm._norm` /
`forward` (l. 96-101), each op one eager kernel."""


def composite_norm_bytes(model: ModelSpec) -> float:
    """HBM bytes per token one decoder layer's two RMSNorms (attention and MLP inputs) move in one
    forward pass as composite eager ops beyond fused ones (`layout.NORM_KERNELS` "composite"):
    2 x COMPOSITE_NORM_BYTES_PER_ELEMENT x h; backward about twice (`_layer_compute_s`'s x 3)."""
    return 2.0 * COMPOSITE_NORM_BYTES_PER_ELEMENT * model.hidden_size


def unfused_elementwise_bytes(model: ModelSpec, index: int) -> float:
    """HBM bytes per token that layer `index`'s elementwise ops move in one forward pass in eager
    PyTorch beyond what torch.compile's fused kernels move (bf16 activations, 2 B; fp32 4 B):

    - SwiGLU `w2(silu(w1 x) * w3 x)` (gated MLPs: dense, shared experts, each of the top_k routed
      copies; width w): eager writes silu's output and reads it back for the product, 2 x 2w B;
      fused, silu and the product are one kernel: 4w B more eager;
    - RoPE (Llama 3's ComplexRoPE): eager upcasts q and k to fp32 (read 2, write 4 B per element),
      multiplies by the rotation (read 4, write 4) and casts back (read 4, write 2): 20 B per element
      against 4 B fused, 16 B more per rotated element of q (heads x head dim; MLA: heads x rope
      dim) and k (kv heads x head dim; MLA: the shared rope key);
    - residual add + RMSNorm: inside one compiled block the attention residual's sum feeds the FFN
      norm in the same kernel; eager reads the sum back, 2h B more (the block's last add and the
      next block's norm sit in different compiled regions; RMSNorm itself is one fused kernel in
      eager PyTorch too: pytorch/pytorch aten/src/ATen/native/layer_norm.cpp rms_norm_symint calls
      at::_fused_rms_norm).
    The backward pass moves about twice these bytes (the autograd of each op: `_layer_compute_s`
    counts memory terms x 3 over forward + backward). Source: pytorch/torchtitan@b5bcd76
    torchtitan/models/common/feed_forward.py l. 53-54, rope.py l. 254-264 (ComplexRoPE, Llama 3's:
    models/llama3/__init__.py l. 136), models/common/decoder.py (x + attn(norm(x)); x + ffn(norm(x))),
    torchtitan/distributed/compile.py apply_compile (one compiled region per TransformerBlock).
    Not modelled: fp8 cast fusion under compile."""
    h = model.hidden_size
    if model.is_mla:
        rotated = model.num_attention_heads * model.qk_rope_head_dim + model.qk_rope_head_dim
    else:
        rotated = (model.num_attention_heads + model.num_key_value_heads) * model.head_dim
    width = 0.0
    if model.gated_mlp:
        if model.is_moe and model.moe_layers[index]:
            width = ((model.shared_expert_intermediate_size or 0)
                     + model.num_experts_per_tok * model.moe_intermediate_size)
        else:
            width = model.intermediate_size
    return 4.0 * width + 16.0 * rotated + 2.0 * h


def selective_flops_per_token(model: ModelSpec, index: int, seq_len: int,
                              modules: Sequence[str]) -> tuple[float, float, float]:
    """(dense GEMM, routed-expert GEMM, attention-core) forward FLOPs per token that selective
    recompute of Megatron `modules` re-runs in layer `index` (`placement.layout.RECOMPUTE_MODULES`;
    which tensors each frees: `cost.activations`).

    - core_attn: the attention core (`_layer_flops_per_token`'s third part);
    - mla_up_proj: the q and kv up projections, 2 x (q_lora_rank x a(d_nope + d_rope) +
      kv_lora_rank x a(d_nope + d_v)) (without q_lora_rank the q projection h x a(d_nope + d_rope)
      runs inside the checkpoint instead): Megatron-LM@d98e8a6 multi_latent_attention.py l. 855-880
      (`qkv_up_proj_and_rope_apply`, checkpointed at l. 983-987);
    - mlp: the dense MLP, 2 x its parameters (dense layers only, transformer_layer.py l. 537-539);
    - shared_experts: 2 x the shared experts' parameters (MoE layers);
    - moe: the whole MoE block: routed experts (2 x top_k x one expert), shared experts, router;
    - moe_act and layernorm re-run element-wise ops only (no GEMM FLOPs; their HBM time:
      `_selective_recompute_s`).
    Source: Kaplan et al. 2020 Table 1 (2 FLOPs per matmul parameter per token)."""
    layer = _counts(model).layers[index]
    moe_layer = model.is_moe and model.moe_layers[index]
    _, routed_all, attention = _layer_flops_per_token(model, index, seq_len)
    dense = routed = 0.0
    if "mla_up_proj" in modules and model.is_mla:
        a, qk = model.num_attention_heads, model.qk_nope_head_dim + model.qk_rope_head_dim
        q_in = model.q_lora_rank or model.hidden_size
        dense += 2.0 * (q_in * a * qk + model.kv_lora_rank * a * (model.qk_nope_head_dim + model.v_head_dim))
    if "mlp" in modules and not moe_layer:
        dense += 2.0 * layer.dense_mlp
    if moe_layer and "moe" in modules:
        dense += 2.0 * (layer.shared_experts + layer.router)
        routed = routed_all
    elif moe_layer and "shared_experts" in modules:
        dense += 2.0 * layer.shared_experts
    return dense, routed, (attention if "core_attn" in modules else 0.0)


def _selective_recompute_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int,
                           attn_fwd_s: float) -> float:
    """Seconds selective recompute of `layout.selective_modules` re-runs in layer `index`, one
    micro-batch, one GPU: the attention core's forward time (core_attn), the GEMMs of
    `selective_flops_per_token` at the rates `_layer_compute_s` uses (dense linear rate; routed
    experts at their grouped-GEMM rate, or their weight-read bound, plus the router and
    permutation bytes), and HBM time for the element-wise re-runs: moe_act re-reads each routed
    copy's fc1 output (2 I/etp elements gated, I/etp plain) and writes the activation (I/etp), 2 B
    each; layernorm reads and writes h elements (2 B each) per separate norm (MLA's input norm, the
    pre-MLP norm of a model with experts: `cost.activations.RECOMPUTE_MODULES`). The EP dispatch /
    combine that `moe` re-runs is not priced (not in this model yet)."""
    if layout.framework == "torchtitan" and layout.recompute_modules is None:
        op_sac = _torchtitan_op_sac_s(model, cluster, layout, index)
        if op_sac is not None:
            return op_sac
    modules = layout.selective_modules
    if modules == ("core_attn",):
        return attn_fwd_s
    b, s, tp, cp = layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp
    local = b * s / (tp * cp)
    dense, routed, _ = selective_flops_per_token(model, index, s, modules)
    seconds = attn_fwd_s if "core_attn" in modules else 0.0
    gemm_dim = min(model.hidden_size / tp, b * s / cp)
    seconds += local * dense / achieved_flops(cluster.gpu, layout.precision, gemm_dim=gemm_dim)
    memory = 0.0
    if routed:
        flops_s = local * routed / achieved_flops(cluster.gpu, layout.precision,
                                                  gemm_dim=_expert_gemm_dim(model, layout))
        seconds += max(flops_s, _expert_weight_bytes(model, layout, index) / 3 / _hbm_bytes_per_s(cluster))
        memory += _moe_memory_bytes(model, index)
    moe_layer = model.is_moe and model.moe_layers[index]
    if moe_layer and "moe_act" in modules and "moe" not in modules:
        width = model.moe_intermediate_size / layout.etp
        memory += 2.0 * model.num_experts_per_tok * width * (3 if model.gated_mlp else 2)
    if "layernorm" in modules:
        memory += 4.0 * model.hidden_size * (int(model.is_mla) + int(model.is_moe))
    return seconds + local * memory / _hbm_bytes_per_s(cluster)


def _torchtitan_op_sac_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int) -> float | None:
    """Seconds torchtitan's selective op AC re-runs in the backward of dense layer `index`, one
    micro-batch, one GPU; None where `cost.activations` does not cost the op policy (MoE, MLA,
    parallel-attention blocks: those keep the Megatron-style module pricing).

    The policy keeps every odd-numbered `aten.mm` output and the SDPA outputs and recomputes the
    rest (`cost.activations.torchtitan_op_sac_tensors`): the even-numbered matmuls (Llama: wk, wo,
    w3; with the fused wqkv of current torchtitan, `Layout.fused_qkv`, wo and w3;
    `activations.op_sac_recomputed_matmuls`) at the linear GEMM rate `_layer_compute_s` uses,
    and every elementwise op of the block (norms, RoPE, SwiGLU, residual adds: one forward's
    `fused_elementwise_bytes`, plus the unfused and composite-norm extras in eager mode) at HBM
    speed; the attention core is not re-run (its output is saved). Not priced: the fp8 casts of
    the recomputed matmuls' inputs. Source: pytorch/torchtitan@e7c0cae
    torchtitan/models/llama3/parallelize_llama.py l. 218-280 (`_save_list`, `_custom_policy`:
    "Saves output of all compute ops, except every second mm"), as at @9dec370."""
    matmuls = op_sac_recomputed_matmuls(model, index, fused_qkv(layout))
    if matmuls is None:
        return None
    b, s, tp, cp = layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp
    local = b * s / (tp * cp)
    gemm_dim = min(model.hidden_size / tp, b * s / cp)
    memory = fused_elementwise_bytes(model, index, replicated=tp if tp > 1 and not layout.sequence_parallel else 1)
    if not BY_NAME[layout.framework].fused_elementwise(layout.torch_compile):
        memory += unfused_elementwise_bytes(model, index)
        if layout.norm_kernel == "composite":
            memory += composite_norm_bytes(model)
    return (local * 2.0 * matmuls / achieved_flops(cluster.gpu, layout.precision, gemm_dim=gemm_dim)
            + local * memory / _hbm_bytes_per_s(cluster))


def _offload_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int) -> dict[str, float]:
    """{recompute mode: seconds of one direction of the layer's activation offload}, one
    micro-batch: the bytes Megatron's fine-grained activation offloading moves
    (`layer_activation_bytes(...).offloaded`, `layout.offload_modules`) over the host link, each way
    (device-to-host in forward, host-to-device before backward). The copies run on their own CUDA
    streams (megatron/core/pipeline_parallel/fine_grained_activation_offload.py @d98e8a6: D2H on
    the offload stream after the module's forward, H2D prefetched one layer ahead of backward), so
    `_layer_time` shows only their excess over the neighbouring layer's forward (offload) and
    backward (reload). Full recompute keeps only the layer input, which no module scope holds.

    With the whole layer's activations offloaded (`offload` target "activations", the device
    keeping two layers: `cost.memory`) every saved byte of the layer moves, the layer input under
    full recompute: DeepSpeed's CPU checkpointing (its checkpointing config's `cpu_checkpointing`,
    `frameworks.deepspeed`: the checkpointed inputs copied to host). Empty without offload."""
    whole = "activations" in layout.offload
    if not (layout.offload_modules or whole):
        return {}
    _, kw, _ = activation_arguments(layout, placement_for(layout), state_bytes(layout).compute)
    link = cluster.host_link_gb_per_s * 1e9
    out = {}
    for mode in RECOMPUTE_MODES:
        saved = layer_activation_bytes(model, index, recompute=mode, **kw)
        out[mode] = (saved.offloaded + (saved.total if whole else 0)) / link
    return out


def _hbm_bytes_per_s(cluster: ClusterSpec) -> float:
    return cluster.gpu.hbm_gb_per_s * 1e9 * HBM_EFFICIENCY


def _expert_gemm_dim(model: ModelSpec, layout: Layout) -> float:
    """Narrowest dimension of one local expert's GEMMs: min(tokens routed to it, expert width /
    etp, hidden).

    Tokens per local expert = b*s/(cp*tp) tokens on a rank (sequence parallel splits the MoE
    layer's input over tp) x etp (the expert-TP group gathers its ranks' tokens) x top_k copies,
    sent by the ep ranks of the EP group to the num_experts/ep experts each holds, dropless
    (no capacity-factor padding, Megatron's default `moe_expert_capacity_factor` None):
    b*s*etp*ep*top_k / (cp*tp*num_experts). Every local expert runs one GEMM of the group (TE
    `GroupedLinear`). Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/moe/
    token_dispatcher.py (MoEAlltoAllTokenDispatcher: tokens_per_expert over tp_size * ep_size
    source ranks, l. 428-440, 557-591) and experts.py TEGroupedMLP (l. 183: one grouped GEMM over
    the local experts with `tokens_per_expert` rows each).
    """
    b, s = layout.micro_batch_size, layout.seq_len
    tokens = (b * s * layout.etp * layout.ep * model.num_experts_per_tok
              / (layout.cp * layout.tp * model.num_experts))
    return max(1e-9, min(tokens, model.moe_intermediate_size / layout.etp, model.hidden_size))


def _expert_weight_bytes(model: ModelSpec, layout: Layout, index: int) -> float:
    """HBM bytes the grouped expert GEMMs of one MoE layer move per micro-batch on a rank (forward
    + backward) for their weights: the local experts' weights (num_experts / ep experts, split over
    etp) read by the forward GEMM and by the backward data-gradient GEMM, in the GEMM's precision
    (1 B under fp8, 2 B otherwise), and the weight gradients accumulated into the gradient buffer
    (read + write, `state_bytes(layout).gradients` B each: Megatron's gradient-accumulation fusion
    adds each micro-batch's wgrad into main_grad). With few tokens per expert these bytes, not the
    FLOPs, bound the grouped GEMMs (roofline: Williams et al. 2009, CACM 52(4)); the expert
    layer's time is the larger of the two (`_layer_compute_s`). Source: NVIDIA/Megatron-LM@d98e8a6
    megatron/core/transformer/moe/experts.py (TEGroupedMLP: one grouped GEMM over the local
    experts) and megatron/core/tensor_parallel/layers.py (gradient_accumulation_fusion into
    main_grad)."""
    layer = _counts(model).layers[index]
    local_params = layer.routed_experts / (layout.ep * layout.etp)
    weight = 1.0 if layout.precision == "fp8" else 2.0
    return local_params * (2 * weight + 2 * state_bytes(layout).gradients)


def _moe_memory_bytes(model: ModelSpec, index: int) -> float:
    """HBM bytes per token of one MoE layer's router and token permutation, forward pass.

    Router: read the bf16 input (2 h), write the logits and read/write them in softmax and top-k
    (3 x 4 bytes x num_experts, fp32 scores). Permute gathers each routed copy (read + write 2 h
    bytes, `index_select`) and unpermute scatters it back (read + write 2 h, `scatter_add_`):
    8 h bytes per copy, top_k copies. Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/
    transformer/moe/router.py (Router.gating, l. 90-112; scores kept in fp32 for top-k) and
    moe_utils.py permute (l. 344, index_select l. 486) / unpermute (l. 497, scatter_add_ l. 615).
    """
    h = model.hidden_size
    return 2.0 * h + 12.0 * model.num_experts + 8.0 * h * model.num_experts_per_tok


def _ring_cp(layout: Layout) -> int:
    """The ring's steps of a layout: its cp under ring context parallelism, 1 under all-to-all CP
    (Ulysses: each rank runs the whole sequence on cp-th of the heads, `comm._cp_all_to_all`)."""
    return 1 if layout.cp_comm_type == "a2a" else layout.cp


def _attention_chunk(model: ModelSpec, index: int, seq_len: int, cp: int) -> float:
    """Queries (and keys) of one attention kernel call on a rank: the context of the layer
    (the window on sliding layers), and with context parallelism one of the 2*cp load-balancing
    chunks the ring passes (Megatron CP splits the sequence into 2*cp chunks, rank i holding
    chunks i and 2cp-1-i; each ring step runs the kernel on chunk pairs). Source: Megatron-LM
    docs/source/api-guide/context_parallel.rst @d98e8a6; TransformerEngine@d0067d0
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py."""
    ctx = seq_len
    if model.layer_types and model.layer_types[index] == "sliding_attention" and model.sliding_window:
        ctx = min(seq_len, model.sliding_window)
    return ctx if cp == 1 else min(ctx, seq_len / (2 * cp))


def attention_core_s(model: ModelSpec, index: int, seq_len: float, gpu, precision: str, *, cp: int = 1,
                     kernel: str = "fused", backward: bool = False) -> float:
    """Seconds per token (all heads, one GPU) of layer `index`'s fused causal attention core forward
    (`backward`: its backward): the executed part of its score FLOPs
    (`compute.executed_attention_fraction` of the layer's context: the window on sliding layers) at
    the causal kernel's rate on the rank's chunk (`_attention_chunk`, `compute.attention_flops`,
    causal); the backward runs `compute.ATTENTION_BACKWARD_FLOPS` times those FLOPs at the backward
    kernel's rate. One executed-work model for training
    (`_layer_compute_s`, divided over tp x cp by the caller's token count) and serving prefill
    (`serving.prefill_forward_s`).

    Ring context parallelism (`cp` > 1; all-to-all CP runs the whole sequence, cp 1 here) with load
    balancing on a full-attention layer: the sequence is cut into 2 cp chunks of c = s / 2cp tokens,
    rank r holding chunks r and 2cp-1-r, and each of the cp ring steps runs one kernel call:
    step 0 the causal kernel on the rank's own 2c queries and keys (2 c^2 executed score pairs per
    head); every later step an unmasked call on 2 c^2 pairs, either all 2c queries against the first
    chunk of the arriving K/V (source rank before r) or the later chunk's c queries against both
    arriving chunks (source after r): nothing is skipped, no step masks. So 1/cp of the executed work
    runs at the causal rate on 2c tokens, (cp - 1)/cp at the unmasked rate on c-token rows.
    Source: pytorch/pytorch torch/distributed/tensor/experimental/_attention.py @0123248a
    (`_is_causal_behavior`: IS_CAUSAL at i = 0, NOT_IS_CAUSAL after under load balancing;
    `_templated_ring_attention`: `key.chunk(2)[0]` for i <= rank, `query.chunk(2)[1]` otherwise;
    the backward likewise), the same split as NVIDIA/TransformerEngine@d0067d0
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
    (`AttnFuncWithCPAndKVP2P`: causal step 0, `kv_inputs[..][:, 0]` / `q[:, 1]` after). Sliding
    layers keep the causal rate on min(window, c). Kaplan et al. 2020 Table 1 (the FLOPs,
    `_layer_flops_per_token`); Shah et al. 2024 Fig. 5 (the rates); Dao 2023 §3.1.1 (the skipped
    tiles)."""
    _, _, attention = _layer_flops_per_token(model, index, int(seq_len))
    context = _attention_chunk(model, index, seq_len, 1)
    executed = attention * executed_attention_fraction(seq_len, context) \
        * (ATTENTION_BACKWARD_FLOPS if backward else 1.0)

    def seconds(flops: float, tokens: float, causal: bool) -> float:
        return flops / attention_flops(gpu, precision, chunk_tokens=tokens, kernel=kernel, causal=causal,
                                       backward=backward)

    if cp <= 1 or context < seq_len:
        return seconds(executed, _attention_chunk(model, index, seq_len, cp), True)
    chunk = seq_len / (2 * cp)
    return seconds(executed / cp, 2 * chunk, True) + seconds(executed * (cp - 1) / cp, chunk, False)


def cp_ring_bytes(model: ModelSpec, layout: Layout) -> float:
    """HBM bytes one GPU moves per layer and micro-batch, forward + backward, in the ring
    context-parallel attention's work outside its kernels: merging each step's partial output and
    accumulating each step's dQ, dK, dV (`frameworks.<framework>.cp_ring_bytes`: bytes per element
    for the layout's cp), over the rank's b x s / cp tokens x its heads (a / tp query heads of
    d_v output and d_qk dQ elements; kv / tp K/V heads of d_qk + d_v elements, a / tp where the
    framework expands K/V to the query heads (`cp_ring_exchange`, torchtitan's `repeat_kv`); MLA:
    the a / tp up-projected heads). 0 without ring CP (cp 1, or all-to-all CP).

    Why it matters at short sequences: these bytes grow with the rank's tokens times the ring
    steps (cp - 1), the attention FLOPs with the tokens times the keys (s), so their ratio to the
    attention time grows as cp^2 / s at a fixed per-GPU token count. `_layer_compute_s` adds them
    to the attention core at HBM speed (a third in the forward, the model's 1:2 split of a pass).
    """
    if layout.cp <= 1 or layout.cp_comm_type == "a2a":
        return 0.0
    f_out, f_kv, b_q, b_kv = BY_NAME[layout.framework].cp_ring_bytes(layout.cp)
    heads = model.num_attention_heads / layout.tp
    if model.is_mla:
        d_qk, d_v = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim
        kv_heads = heads
    else:
        d_qk = d_v = model.head_dim
        repeated = BY_NAME[layout.framework].cp_ring_exchange()[1]
        kv_heads = heads if repeated else max(1.0, model.num_key_value_heads / layout.tp)
    tokens = layout.micro_batch_size * layout.seq_len / layout.cp
    return tokens * (heads * (f_out * d_v + b_q * d_qk) + kv_heads * (d_qk + d_v) * (f_kv + b_kv))


def _linear_io_per_token(model: ModelSpec, index: int) -> tuple[float, float]:
    """(input + output elements per token of the dense linear GEMMs, of the routed experts' GEMMs
    summed over the top_k copies) of layer `index`: what an fp8 recipe casts (each GEMM's input in
    forward, its output gradient in backward). Attention: Q/K/V (or MLA's down/up projections)
    and O; MLP: up (+gate) and down. Source: the projections `params_flops._attention` / `_mlp`
    count (transformers modeling_llama.py, modeling_deepseek_v3.py)."""
    h = model.hidden_size
    a, kv = model.num_attention_heads, model.num_key_value_heads
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        q = (h + model.q_lora_rank + model.q_lora_rank + a * qk) if model.q_lora_rank else h + a * qk
        kvp = h + model.kv_lora_rank + model.qk_rope_head_dim + model.kv_lora_rank \
            + a * (model.qk_nope_head_dim + model.v_head_dim)
        attn = q + kvp + a * model.v_head_dim + h
    else:
        d = model.head_dim
        attn = h + (a + 2 * kv) * d + a * d + h

    def mlp(width: int) -> float:
        return (h + (2 if model.gated_mlp else 1) * width) + (width + h) if width else 0.0

    if model.is_moe and model.moe_layers[index]:
        dense = attn + mlp(model.shared_expert_intermediate_size or 0)
        return dense, model.num_experts_per_tok * mlp(model.moe_intermediate_size)
    return attn + mlp(model.intermediate_size), 0.0


def _layer_time(parts, recompute: str) -> LayerTime:
    fwd, _, comm, (host, host_bwd), selective, offload = parts
    recompute_s = {"none": 0.0, "selective": selective, "full": fwd + host}[recompute]
    fwd_passes = 2 if recompute == "full" else 1
    total = 0.0
    for per_pass, once in comm:  # summed term by term in the order of `_layer_comm`
        total += per_pass * (fwd_passes + 1) if once is None else fwd_passes * per_pass + once
    copy = offload.get(recompute, 0.0)
    if copy:  # offload under the next layer's forward, reload under the previous one's backward
        total += max(0.0, copy - fwd) + max(0.0, copy - 2 * fwd)
    return LayerTime(forward_s=fwd + host, backward_s=2 * fwd + host_bwd, recompute_s=recompute_s,
                     comm_s=total)


def _layer_comm(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int,
                attn_fwd_s: float, order: Sequence[str], fwd_s: float | None = None
                ) -> list[tuple[float, float | None]]:
    """Exposed in-layer communication of one layer, one micro-batch (see `layer_time`): the
    collectives `comm.layer_collectives` lists, priced by phase, as terms (x, y): x per forward
    pass plus y once (backward). `fwd_s`: the layer's forward compute (None: attn_fwd_s, no linear
    GEMMs to hide under).

    - tp (phases forward / backward): exposed, or with TP comm overlap (`placement.overlap`; Megatron
      requires SP for it) what the framework's chunked pipelining leaves exposed beside the
      linear GEMMs each collective is paired with (`_tp_overlap_exposed`).
    - ep (phases forward / backward): exposed (flex: the slower of its network and NVLink parts,
      which DeepEP / HybridEP run in one kernel, `comm._flex_dispatch`), or with EP all-to-all overlap only the excess over
      the other micro-batch's pass it runs beside (Megatron 1F1B A2A overlap merges micro-batch i's
      forward with micro-batch i-1's backward: forward dispatch / combine under 2 fwd_s, backward
      under fwd_s).
    - cp ring (phases attention.*): `_cp_ring_exposed`; cp all-to-all (phases forward /
      backward): exposed.
    The overlaps are priced independently against the compute they run beside (TP on the linear
    GEMMs, EP on the whole layer), which assumes their links do not contend; the overlapped EP and
    CP transfers are NCCL kernels holding SMs while they run (`_hidden_excess`)."""
    share = _sharing(layout, cluster, order)
    ov = overlap.resolve(layout)
    fwd_s = attn_fwd_s if fwd_s is None else fwd_s
    t = {(axis, phase): 0.0 for axis in ("tp", "ep", comm.FLEX_NETWORK, comm.FLEX_NVLINK, "other")
         for phase in ("forward", "backward")}
    cp = []
    for c in comm.layer_collectives(model, layout, index, _ep_sharing(layout, cluster, order)):
        k = _record_sharing(c, layout, cluster, share, order)
        if c.phase.startswith("attention."):   # the ring, under the attention core
            cp.append((c, k))
            continue
        axis = c.label if c.label in (comm.FLEX_NETWORK, comm.FLEX_NVLINK) else (
            c.axis if c.axis in ("tp", "ep") else "other")
        t[(axis, c.phase)] += c.count * _call_time(c, k, cluster)
    for phase in ("forward", "backward"):   # flex: network and NVLink parts run at once
        t[("ep", phase)] += max(t[(comm.FLEX_NETWORK, phase)], t[(comm.FLEX_NVLINK, phase)])
    ep_hides = ov.ep_comm_overlap
    if ov.tp_comm_overlap and _tp_overlap_applies(layout):
        tp_f, tp_b = _tp_overlap_exposed(model, cluster, layout, index, share)
    else:
        tp_f, tp_b = t[("tp", "forward")], t[("tp", "backward")]
    k_sm = overlap.sm_share(overlap.NCCL_CHANNEL_SMS, cluster.gpu.sm_count)
    ep_f = _hidden_excess(t[("ep", "forward")], 2 * fwd_s, k_sm) if ep_hides else t[("ep", "forward")]
    ep_b = _hidden_excess(t[("ep", "backward")], fwd_s, k_sm) if ep_hides else t[("ep", "backward")]
    cp_f, cp_b = _cp_ring_exposed(cp, cluster, layout, attn_fwd_s,
                                  hidden=not overlap.connections_conflict(layout, cluster.gpu.name))
    return [(tp_f + ep_f + t[("other", "forward")], tp_b + ep_b + t[("other", "backward")]),
            (cp_f, cp_b)]


def _tp_block_gemm_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int
                     ) -> list[tuple[float, float] | None]:
    """[block] (column-parallel GEMM, row-parallel GEMM) forward seconds of one micro-batch on one
    GPU for the two blocks of layer `index` that carry the TP collectives of
    `comm.layer_collectives` (attention: QKV, output projection; MLP: FC1 (+ gate), FC2), at the
    dense linear GEMMs' rate (`_layer_compute_s`); None for the MLP of an MoE layer, whose
    experts are not Transformer Engine linears with userbuffers nor matched by AsyncTP's
    all-gather-matmul pattern (its TP collectives stay exposed). Data- and weight-gradient GEMMs
    have the forward GEMM's FLOPs (Narayanan 2021 §5.1)."""
    b, s, tp, cp = layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp
    rate = achieved_flops(cluster.gpu, layout.precision,
                          gemm_dim=min(model.hidden_size / tp, b * s / cp))
    local = b * s / (tp * cp) * 2 / rate       # s per parameter of a GEMM
    layer, h = _counts(model).layers[index], model.hidden_size
    v = model.v_head_dim if model.is_mla else model.head_dim
    row_attn = model.num_attention_heads * v * h
    blocks: list[tuple[float, float] | None] = [
        (local * (layer.attention - row_attn), local * row_attn)]
    if layer.dense_mlp:
        row_mlp = model.intermediate_size * h
        blocks.append((local * (layer.dense_mlp - row_mlp), local * row_mlp))
    else:
        blocks.append(None)
    return blocks


def _tp_overlap_exposed(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int,
                        share: dict[str, int]) -> tuple[float, float]:
    """(forward, backward) exposed time of one layer's TP/SP collectives under the framework's TP
    comm overlap (`overlap.TP_OVERLAP_SCHEMES`), s per micro-batch.

    Per block (`_tp_block_gemm_s`: column GEMM G_c, row GEMM G_r) and per collective of time C
    (one call of its `comm.layer_collectives` record, alpha-beta), paired with the GEMM it runs
    beside (`overlap.Pipelining`), with r = sm_count / (sm_count - comm_sms) the GEMM's slowdown
    while the communication holds SMs:
    - ring over tp chunks: (tp - 1) max(0, C / (tp - 1) - G / tp) (a ring collective is tp - 1
      steps of C / (tp - 1); the local chunk needs no transfer);
    - pipeline over n chunks: g + (n - 1) max(g, c) + c - G with g = r G / n and c one call of a
      message / n (the last chunk's collective exposed);
    - bulk: max(r G, C) - G;
    forward: all-gather before G_c, reduce-scatter after G_r; backward: all-gather before the row
    data gradient (G_r), reduce-scatter beside the column weight gradient (G_c), and the input
    all-gather beside the column data gradient (G_c) where the scheme has it. Under an fp8
    recipe with fp8 all-gather buffers the all-gathers move half the bytes. Staging copies
    (AsyncTP): the local shard's copy (read + write of message / tp) before the all-gather and the
    sum of the tp partials (read message, write message / tp) after the reduce-scatter, at HBM
    speed. Blocks without overlap (None) show C. Not modelled: the chunk GEMMs' lower efficiency
    (each chunk has 1/n of the rows), which the efficiency fit absorbs."""
    scheme = overlap.TP_OVERLAP_SCHEMES[layout.framework]
    tp, sms = layout.tp, cluster.gpu.sm_count
    records = {(c.kind, c.phase): c for c in comm.layer_collectives(model, layout, index)
               if c.axis == "tp"}
    hbm = _hbm_bytes_per_s(cluster)

    def call(kind: str, phase: str, split: float = 1.0) -> float:
        c = records[(kind, phase)]
        size = c.message_bytes * (0.5 if kind == "all_gather" and scheme.all_gather_fp8
                                  and layout.precision == "fp8" else 1.0)
        return _call_time(c, share["tp"], cluster, message_bytes=size / split)

    def exposed(how: overlap.Pipelining, kind: str, phase: str, gemm: float) -> float:
        r = 1.0 / (1.0 - overlap.sm_share(how.comm_sms, sms))
        if how.method == "ring":
            staging = (2 / tp if kind == "all_gather" else 1 + 1 / tp) * records[(kind, phase)] \
                .message_bytes / hbm if scheme.staging_copies else 0.0
            return staging + _ring_exposed_s(call(kind, phase), gemm, tp)
        if how.method == "pipeline":
            g, c = r * gemm / how.splits, call(kind, phase, how.splits)
            return g + (how.splits - 1) * max(g, c) + c - gemm
        return max(r * gemm, call(kind, phase)) - gemm

    fwd = bwd = 0.0
    for block in _tp_block_gemm_s(model, cluster, layout, index):
        if block is None:
            fwd += call("all_gather", "forward") + call("reduce_scatter", "forward")
            bwd += call("all_gather", "backward") + call("reduce_scatter", "backward")
            continue
        col, row = block
        fwd += (exposed(scheme.forward_all_gather, "all_gather", "forward", col)
                + exposed(scheme.forward_reduce_scatter, "reduce_scatter", "forward", row))
        bwd += (exposed(scheme.backward_all_gather, "all_gather", "backward", row)
                + exposed(scheme.backward_reduce_scatter, "reduce_scatter", "backward", col))
        if scheme.backward_input_all_gather is not None:
            bwd += exposed(scheme.backward_input_all_gather, "all_gather", "backward", col)
    return fwd, bwd


def _tp_overlap_applies(layout: Layout) -> bool:
    """TP comm overlap needs tp > 1 with sequence parallelism (Megatron `validate_args`: "Tensor
    parallel communication/GEMM overlap can happen only when sequence parallelism is enabled";
    torchtitan's AsyncTP runs on its sequence-parallel plan)."""
    return layout.tp > 1 and bool(layout.sequence_parallel)


def _ring_exposed_s(comm_s: float, gemm_s: float, tp: int) -> float:
    """What a ring collective of `comm_s` (tp - 1 steps of comm_s / (tp - 1), the local chunk
    needing no transfer) leaves exposed beside a GEMM of `gemm_s` cut into tp chunks, s:
    (tp - 1) max(0, comm_s / (tp - 1) - gemm_s / tp) (`overlap.Pipelining` "ring")."""
    return (tp - 1) * max(0.0, comm_s / (tp - 1) - gemm_s / tp)


def _op_sac_regather_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, index: int,
                       share: dict[str, int]) -> float:
    """Exposed time of the sequence-parallel all-gathers torchtitan's selective op AC re-runs in
    the backward of dense layer `index`, one micro-batch, one GPU, s (counted as recompute time).

    The op policy saves the output of `reduce_scatter_tensor` but not of `all_gather_into_tensor`
    (pytorch/torchtitan@9dec370 torchtitan/parallelisms/parallelize_llama.py l. 214-223
    `_save_list`; @b5bcd76 torchtitan/distributed/activation_checkpoint.py l. 61-64, "Communication
    ops whose outputs should be saved": reduce_scatter_tensor, all_to_all_single), so the block's
    recompute gathers its two normed inputs (attention, MLP) again: the weight gradients of every
    matmul reading them need the gathered tensor. Under AsyncTP each re-gather is fused with the
    re-run matmul reading it as its left operand (Llama: wk, w3; `op_sac_regather_consumers`;
    inductor's micro-pipeline pass, `overlap.ASYNC_TP`) and shows what the ring leaves beside
    that GEMM plus the local shard's staging copy (`_tp_overlap_exposed`); without AsyncTP, or
    with no re-run matmul reading it, it is exposed. 0 without tp > 1 with SP, outside torchtitan,
    with named recompute modules, or where the op policy is not costed. The readers follow the
    block as `layout` runs it (`activations._block_matmuls`): wq, wk, wv apart before torchtitan
    3396a4b, where wk is the attention's reader; fused into one wqkv since (`Layout.fused_qkv`),
    saved as the first matmul, so the attention re-gather has no re-run reader and shows whole."""
    consumers = op_sac_regather_consumers(model, index, fused_qkv(layout))
    if (consumers is None or layout.framework != "torchtitan" or layout.recompute_modules is not None
            or not _tp_overlap_applies(layout)):
        return 0.0
    gather = next(c for c in comm.layer_collectives(model, layout, index)
                  if c.axis == "tp" and c.kind == "all_gather" and c.phase == "forward")
    one = _call_time(gather, share["tp"], cluster)
    if not overlap.resolve(layout).tp_comm_overlap:
        return len(consumers) * one
    b, s, tp, cp = layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp
    per_elem = b * s / (tp * cp) * 2 / achieved_flops(cluster.gpu, layout.precision,
                                                      gemm_dim=min(model.hidden_size / tp, b * s / cp))
    staging = 2 / tp * gather.message_bytes / _hbm_bytes_per_s(cluster) \
        if overlap.TP_OVERLAP_SCHEMES[layout.framework].staging_copies else 0.0
    return sum(staging + _ring_exposed_s(one, per_elem * elems, tp) if elems else one for elems in consumers)


def _cp_ring_exposed(records, cluster: ClusterSpec, layout: Layout, attn_fwd_s: float, *,
                     hidden: bool = True) -> tuple[float, float]:
    """(forward, backward) exposed time of the context-parallel ring of one layer, s.

    Ring attention with load balancing (2 cp chunks, rank r holding chunks r and 2cp-1-r) runs cp
    steps per pass (`attention_core_s`); one step computes about 1/cp of the rank's attention core
    (attn_fwd_s / cp forward, twice that backward). A record of `comm.layer_collectives` carries
    the bytes of the whole ring (message = the sequence's K/V, or dK/dV); one step's share is
    message / cp, point-to-point inside the scale-up domain when the whole cp group sits in one,
    else over the network (the slowest hop paces every step). Transfers overlapped with a kernel
    hold `overlap.NCCL_CHANNEL_SMS` SMs while they run (NCCL send/receive spread over the
    communicator's p2p channels, at most its collective channels: NVIDIA/nccl@5067397
    src/graph/paths.cc l. 980 `p2pnChannels = min(nChannels, ...)`, and an NVLink peer asks 2 per
    link, l. 936), so each shows `_hidden_excess` over the compute it runs beside. By the
    framework's exchange (`frameworks.<framework>.cp_ring_exchange`):

    - "p2p" (Transformer Engine): step i+1 waits for the K/V sent during step i before its kernel
      starts (NVIDIA/TransformerEngine@d0067d0
      `transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`
      AttnFuncWithCPAndKVP2P.forward l. 1698-1715: `req.wait()` then the next send, then the step's
      attention): cp - 1 transfers, each beside one step; backward K/V and dK/dV each step (two
      messages) beside the step's backward;
    - "all_gather" (PyTorch's ring, torchtitan): one all-gather of every rank's K/V is issued before
      step 0 and waited for whole before step 1, so it hides under step 0 alone, forward and
      backward; the fp32 dK/dV accumulator travels to the next rank after each backward step,
      beside the next step's kernel, and the last one is waited for after the loop, beside nothing
      (pytorch/pytorch torch/distributed/tensor/experimental/_attention.py @0123248a
      `_AllGatherRotater`, `_templated_ring_attention_backward`: `dkv_rotater.next_buffer()` after
      the loop).

    `hidden` False (Megatron-FSDP before Blackwell, `overlap.connections_conflict`: the NCCL transfers are not
    ordered before the attention kernels): every transfer shows whole."""
    cp = layout.cp
    if cp <= 1 or not records:
        return 0.0, 0.0
    rotation = BY_NAME[layout.framework].cp_ring_exchange()[0]
    one, k_sm = attn_fwd_s / cp, overlap.sm_share(overlap.NCCL_CHANNEL_SMS, cluster.gpu.sm_count)
    step = {"attention.forward": 0.0, "attention.backward": 0.0}
    gathered = dict(step)
    dkv_step = 0.0
    for c, k in records:
        p2p = Collective(axis="cp", kind="p2p", count=1, message_bytes=c.message_bytes / cp,
                         group_size=2, axes=("cp",), phase=c.phase)
        per_step = c.count * _call_time(p2p, 2 if k >= c.group_size else 1, cluster)
        if rotation == "all_gather" and c.label.startswith("cp.kv."):
            gathered[c.phase] += c.count * _call_time(c, k, cluster)
        elif rotation == "all_gather":
            dkv_step += per_step
        else:
            step[c.phase] += per_step
    if not hidden and rotation == "all_gather":
        return gathered["attention.forward"], gathered["attention.backward"] + cp * dkv_step
    if not hidden:
        return (cp - 1) * step["attention.forward"], (cp - 1) * step["attention.backward"]
    if rotation == "all_gather":
        return (_hidden_excess(gathered["attention.forward"], one, k_sm),
                _hidden_excess(gathered["attention.backward"], 2 * one, k_sm)
                + (cp - 1) * _hidden_excess(dkv_step, 2 * one, k_sm) + dkv_step)
    return ((cp - 1) * _hidden_excess(step["attention.forward"], one, k_sm),
            (cp - 1) * _hidden_excess(step["attention.backward"], 2 * one, k_sm))


def _hidden_excess(comm_s: float, compute_s: float, k: float) -> float:
    """What a transfer of `comm_s` started beside `compute_s` of compute adds to it, s: max(k comm,
    comm - compute), the compute running on 1 - k of the SMs while the NCCL kernel holds k of them
    (`overlap.sm_share`: the two end at max(compute + k comm, comm))."""
    return max(k * comm_s, comm_s - compute_s)


def _call_time(c: Collective, k: int, cluster: ClusterSpec, message_bytes: float | None = None) -> float:
    """Seconds of one call of `c` (its message, or `message_bytes`) with k of its GPUs per scale-up
    domain: alpha-beta (`collectives.collective_time`); host copies at the host link's bandwidth."""
    size = c.message_bytes if message_bytes is None else message_bytes
    if c.kind in ("device_to_host", "host_to_device"):
        return size / (cluster.host_link_gb_per_s * 1e9)
    return coll.collective_time(c.kind, group_size=c.group_size, bytes_per_device=size, cluster=cluster,
                                gpus_per_domain=k)


_PER_MICROBATCH = frozenset({"microbatch", "microbatch_exposed", "recompute"})


def _record_sharing(c: Collective, layout: Layout, cluster: ClusterSpec, share: dict[str, int],
                    order: Sequence[str]) -> int:
    """GPUs of the record's group inside one scale-up domain (from its mesh axes and the rank order).

    Dense data-parallel groups (dp_shard, cp, dp_replicate) span dp x cp ranks; dp_replicate alone
    runs across domains (HSDP replicas are outermost); expert-data-parallel groups follow Megatron's
    expert rank order (etp, ep, edp, pp, no cp: NVIDIA/Megatron-LM@d98e8a6
    megatron/core/parallel_state.py l. 887-895). ZeRO-2/3 per-micro-batch traffic runs as a flat
    ring under DeepSpeed (SHARDED_DP_FLAT_RING). The tied-embedding all-reduce joins the first and
    last stage.
    """
    axes = c.axes
    if axes in (("tp",), ("cp",)):
        return share[axes[0]]
    if axes == ("ep",):   # flex: a network part across nodes, an NVLink part inside one
        return {comm.FLEX_NETWORK: 1, comm.FLEX_NVLINK: c.group_size}.get(
            c.label, _ep_sharing(layout, cluster, order))
    if axes == ("pp",):
        if c.kind == "p2p":
            return 2 if share["pp"] >= 2 else 1
        return 2 if share["pp"] >= layout.pp else 1
    if axes == ("dp_replicate",):
        return 1
    if c.axis == "edp":
        inner = [a for a in axes if a != "dp_replicate"]
        k = 1 if len(inner) < len(axes) else min(_edp_sharing(layout, cluster, order), c.group_size)
    else:
        k = min(share["dp"] * share["cp"], c.group_size)
    flat = layout.framework in SHARDED_DP_FLAT_RING and k < c.group_size and c.phase in _PER_MICROBATCH
    return 1 if flat else k


def _edp_sharing(layout: Layout, cluster: ClusterSpec, order: Sequence[str]) -> int:
    """GPUs of an expert-data-parallel group per scale-up domain (`Mesh.edp_sharing`: Megatron's
    expert rank order, expert-tp innermost, then ep, then edp; `_record_sharing`)."""
    return layout.mesh.edp_sharing(cluster.scaleup_domain_gpus, order)


def layer_times(model: ModelSpec, cluster: ClusterSpec, layout: Layout, layer_index: int, *,
                rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER,
                flash_attention: bool = True) -> dict[str, float]:
    """Seconds one layer adds to its stage's per-micro-batch time, per recompute mode (for the ILP)."""
    return {mode: layer_time(model, cluster, layout, layer_index, mode, rank_order=rank_order,
                             flash_attention=flash_attention).total_s
            for mode in RECOMPUTE_MODES}


# ---------------------------------------------------------------- per stage


def stage_fixed_times(model: ModelSpec, cluster: ClusterSpec, layout: Layout) -> tuple[float, ...]:
    """Per stage, seconds per micro-batch that do not depend on layer choices: the gradient
    accumulation of the embedding (first stage) and of the output layer and final norm (last
    stage; `_grad_accumulation_s`), the LM head (fwd +
    bwd, 6 V h FLOPs per token / tp, on the last stage; Narayanan 2021 eq. (3) logit term), in
    bf16 under fp8: Megatron builds the output layer as a plain ColumnParallelLinear unless an
    mxfp8 output projection is asked for (NVIDIA/Megatron-LM@d98e8a6 megatron/core/models/gpt/
    gpt_model.py l. 272-276), torchtitan's float8 recipes filter it out (pytorch/torchtitan@b5bcd76
    torchtitan/components/quantization/float8.md l. 24, filter_fqns=["output"]). With MTP layers
    (`placement.mtp`), each adds the output layer again on the last stage and, on its own stage,
    one decoder layer of the last layer's kind (`layer_time`, no recompute) plus eh_proj's
    2h x h GEMM (6 x 2h^2 FLOPs per token / tp) -- Megatron's own FLOP count
    (NVIDIA/Megatron-LM@d98e8a6 megatron/training/training.py l. 1005, 1042-1046). That layer is
    timed as its kind's representative (`layer_kinds`: layers of one kind cost the same in every
    term, `layer_time` reads the index only through them), whose entry the layer-time cache
    already holds wherever the kinds' times were asked (the search's bounds, the stage cost model)."""
    b, s, tp, cp = layout.micro_batch_size, layout.seq_len, layout.tp, layout.cp
    rate = achieved_flops(cluster.gpu, core_precision(layout.precision),
                          gemm_dim=min(model.hidden_size, b * s / cp))
    head = 6 * b * s * model.padded_vocab_size * model.hidden_size / (tp * cp) / rate
    out = [head if i == layout.pp - 1 else 0.0 for i in range(layout.pp)]
    counts = _counts(model)   # the embedding's and the output layer's gradient accumulation
    out[0] += _grad_accumulation_s(cluster, layout, counts.embedding / tp)
    out[-1] += _grad_accumulation_s(cluster, layout, (counts.lm_head + counts.final_norm) / tp)
    if n := mtp.mtp_layers(model, layout):  # MTP: each layer and the output layer again
        out[-1] += n * head
        proj = 6 * b * s * 2 * model.hidden_size ** 2 / (tp * cp) / rate
        kinds, reps = layer_kinds(model)
        block = layer_time(model, cluster, layout, reps[kinds[mtp.mtp_block_index(model)]], "none").total_s
        out[mtp.mtp_stage(layout)] += n * (block + proj)
    return tuple(out)


def _stage_param_count(model: ModelSpec, layout: Layout, layers: Sequence[int], stage: int) -> float:
    """Parameters one GPU of `stage` holds before ZeRO sharding (dense / tp, routed / (ep*etp))."""
    counts = _counts(model)
    dense = sum(counts.layers[i].total - counts.layers[i].routed_experts for i in layers)
    routed = sum(counts.layers[i].routed_experts for i in layers)
    if stage == 0:
        dense += counts.embedding
    if stage == layout.pp - 1:
        dense += counts.lm_head + counts.final_norm
    return dense / layout.tp + routed / (layout.ep * layout.etp)


def _mtp_param_count(model: ModelSpec, layout: Layout, stage: int) -> float:
    """Parameters of the trained MTP layers one GPU of `stage` holds before ZeRO sharding (dense and
    replicated / tp, routed / (ep*etp), as `_stage_param_count`), with the MTP stage's own copy of
    the word embedding when it is not the first stage: what the optimizer steps there besides the
    decoder layers (`memory.mtp_group_counts`, `memory._group_counts`; DeepSeek-V3's MTP layer is
    11.61B parameters before its embedding copy). 0 on every other stage.
    Source: `placement.mtp` (Megatron-LM@d98e8a6 multi_token_prediction.py l. 1157-1251,
    gpt_model.py l. 166-181)."""
    n = mtp.mtp_layers(model, layout)
    if not n or stage != mtp.mtp_stage(layout):
        return 0.0
    counts = _counts(model)
    g = mtp_group_counts(model, counts, n)
    own_embedding = counts.embedding if stage != 0 else 0
    return (g["dense"] + g["replicated"] + own_embedding) / layout.tp + g["expert"] / (layout.ep * layout.etp)


# ---------------------------------------------------------------- data parallel, optimizer


def _optimizer_time(cluster: ClusterSpec, layout: Layout, params: float) -> float:
    """Optimizer step of the rank's shard of `params`, s. On the GPU memory-bound: bytes touched /
    (HBM bandwidth x HBM_EFFICIENCY). Offloaded (`Layout.offload` "optimizer"), the step runs on the
    host's CPU cores the rank gets, after the last backward and before the updated parameters go
    up: nothing overlaps it (DeepSpeed's `step` runs the CPU optimizer, then copies the 16-bit
    shard to the GPU, then all-gathers: deepspeed/runtime/zero/stage_1_and_2.py l. 2279-2400,
    deepspeedai/DeepSpeed@edaa722; its one-step-delayed update, ZeRO-Offload §5.2, is not a
    config option): shard / (CPU_OPTIMIZER_PARAMS_PER_CORE_S x cores per GPU), other optimizers
    scaled by their bytes per parameter against Adam(W)'s (`OPTIMIZER_BYTES_PER_PARAM`, a
    streaming update). The host copies it needs are `comm._offload`'s records.

    Raises:
        SpecError: optimizer offload on a cluster file without `host_cpu_cores`."""
    local = params / (layout.dp_shard_degree * layout.cp if layout.zero_stage >= 1 else 1)
    per_param = OPTIMIZER_BYTES_PER_PARAM[layout.optimizer]
    if "optimizer" in layout.offload:
        rate = CPU_OPTIMIZER_PARAMS_PER_CORE_S["deepspeed" if layout.framework == "deepspeed" else "pytorch"]
        return local * per_param / OPTIMIZER_BYTES_PER_PARAM["adamw"] / (rate * cluster.cpu_cores_per_gpu())
    return local * per_param / (cluster.gpu.hbm_gb_per_s * 1e9 * HBM_EFFICIENCY)


@dataclass(frozen=True, kw_only=True)
class StateRecords:
    """The model-state collectives of a layout (`comm.state_collectives`, `comm.recompute_collectives`,
    `comm.stage_collectives`), split the way the stage cost model needs them."""

    per_kind: tuple[tuple[Collective, ...], ...]
    """[kind] per-step records of one decoder layer of that kind."""
    regather: tuple[tuple[Collective, ...], ...]
    """[kind] extra per-step records of one fully recomputed layer of that kind."""
    fixed: tuple[tuple[Collective, ...], ...]
    """[stage] per-step records of the stage's embedding / head / final norm, its pipeline sends
    and its tied-embedding all-reduce."""


def state_records(model: ModelSpec, layout: Layout) -> StateRecords:
    """`StateRecords` of `layout` (its split and recompute fields are ignored)."""
    ov = overlap.resolve(layout)
    key = (id(model), placement_key(layout), layout.num_microbatches, *state_key(layout),
           ov.overlap_grad_reduce, ov.overlap_param_gather,  # what `comm.state_collectives` reads
           layout.mtp_layers)  # and the MTP layers' states on their stage (`memory._group_counts`)
    hit = _STATE_RECORDS.get(key)
    if hit is None or hit[0] is not model:
        if len(_STATE_RECORDS) >= 4096:
            _STATE_RECORDS.clear()
        hit = _STATE_RECORDS[key] = (model, _state_parts(model, layout))
    per_kind, regather, fixed = hit[1]
    stage = {s: tuple(comm.stage_collectives(model, layout, s)) for s in {0, 1 % layout.pp, layout.pp - 1}}
    return StateRecords(per_kind=per_kind, regather=regather, fixed=tuple(
        f + stage[s if s in (0, layout.pp - 1) else 1] for s, f in enumerate(fixed)))


_STATE_RECORDS: dict = {}
"""Cache of the model-state part of `state_records` (each entry keeps its model alive)."""


def _state_parts(model: ModelSpec, layout: Layout):
    _, reps = layer_kinds(model)
    per = [comm.layer_elements(model, layout, j) for j in reps]
    fixed, seen = [], {}
    for s in range(layout.pp):
        edge = s if s in (0, layout.pp - 1) else 1   # middle stages hold no fixed parameters
        if edge not in seen:
            seen[edge] = tuple(comm.state_collectives(layout, comm.fixed_elements(model, layout, s),
                                                      vocab=comm.fixed_vocab_elements(model, layout, s)))
        fixed.append(seen[edge])
    return (tuple(tuple(comm.state_collectives(layout, e)) for e in per),
            tuple(tuple(comm.recompute_collectives(layout, e)) for e in per), tuple(fixed))


def _by_key(records) -> dict[tuple, tuple[Collective, float]]:
    """key -> (a record of that key, summed message bytes)."""
    out: dict[tuple, tuple[Collective, float]] = {}
    for c in records:
        seen = out.get(c.key)
        out[c.key] = (c, c.message_bytes + (seen[1] if seen else 0.0))
    return out


class _Pricer:
    """Alpha-beta of one call of each record key for one layout on one cluster."""

    def __init__(self, layout: Layout, cluster: ClusterSpec, share: dict[str, int], order):
        self.layout, self.cluster, self.share, self.order = layout, cluster, share, order
        self._ab: dict[tuple, tuple[float, float]] = {}

    def sharing(self, c: Collective) -> int:
        return _record_sharing(c, self.layout, self.cluster, self.share, self.order)

    def alpha_beta(self, c: Collective) -> tuple[float, float]:
        """(alpha, beta): one call of `c`'s key with M bytes takes alpha + beta M for M > 0."""
        hit = self._ab.get(c.key)
        if hit is None:
            k = self.sharing(c)
            key = (id(self.cluster), c.kind, c.group_size, k)
            known = _ALPHA_BETA.get(key)
            if known is None or known[0] is not self.cluster:
                if len(_ALPHA_BETA) >= 4096:
                    _ALPHA_BETA.clear()
                known = _ALPHA_BETA[key] = (self.cluster, _affine_in(
                    lambda x: _call_time(c, k, self.cluster, x)))
            hit = self._ab[c.key] = known[1]
        return hit

    def time(self, records, per: float = 1.0) -> float:
        """Seconds of `records` (merged by key: one call per key and count), divided by `per`."""
        total = 0.0
        for c, size in _by_key(records).values():
            if size > 0:
                total += c.count / per * _call_time(c, self.sharing(c), self.cluster, size)
        return total


_ALPHA_BETA: dict = {}
"""(cluster id, kind, group size, GPUs per domain) -> (cluster, (alpha, beta)) of one call (the
entry keeps its cluster alive, so ids are not reused)."""


# ---------------------------------------------------------------- the per-stage cost as affine pieces


@dataclass(frozen=True, kw_only=True)
class AffinePiece:
    """A per-stage quantity affine in the stage's layer counts: for stage s holding c[k][r] layers
    of kind k in recompute mode r (modes ordered as `RECOMPUTE_MODES`),

        value(s, c) = const_s[s] + sum_k sum_r coef[k][r] c[k][r]    (seconds).
    """

    const_s: tuple[float, ...]
    """[stage] part that does not depend on the stage's layers, s."""
    coef: tuple[tuple[float, ...], ...]
    """[kind][mode] seconds one layer of kind k in mode r adds, s."""

    def value(self, stage: int, counts: Sequence[Sequence[int]]) -> float:
        """const_s[stage] + sum coef[k][r] counts[k][r], s."""
        return self.const_s[stage] + sum(a * x for row, xs in zip(self.coef, counts)
                                         for a, x in zip(row, xs))


def _beside(edge_s: float, comm_s: float, k: float) -> float:
    """Time an overlapped collective of `comm_s` adds to the compute it runs beside: its `edge_s`
    that nothing hides (a first gather the compute waits for, a last bucket after it) plus the
    SM share k of the rest, which runs beside the compute (`overlap.sm_share`), s."""
    return edge_s + k * (comm_s - edge_s)


def _combine(*terms: tuple[float, AffinePiece]) -> AffinePiece:
    """sum_i w_i piece_i, again affine."""
    S, K, R = len(terms[0][1].const_s), len(terms[0][1].coef), len(RECOMPUTE_MODES)
    return AffinePiece(
        const_s=tuple(sum(w * p.const_s[s] for w, p in terms) for s in range(S)),
        coef=tuple(tuple(sum(w * p.coef[k][r] for w, p in terms) for r in range(R))
                   for k in range(K)))


@dataclass(frozen=True, kw_only=True)
class StageCostModel:
    """The step time of one Layout (mesh + knobs, any split, any per-layer recompute) as a convex
    piecewise-linear function of each stage's per-kind-per-mode layer counts c[k][r]. Every field
    is an `AffinePiece` (seconds per micro-batch unless stated); for stage s:

        t_s     = X + Zx + max(Cmp + R + Ze + k (Z - Ze), Z)   per-micro-batch stage time
        pipe_s  = (m + B_t) t_s + B_f F + P             `pipeline.pipeline_coefficients`
        dp_s    = max(E - O, D + k (E - D)) + max(G - F, Dg + k (G - Dg))   exposed DP/ZeRO sync
        total_s = pipe_s + dp_s + Y + Zl + Opt + Off     step = max_s total_s

    i.e. total_s = [A (X + Zx) + B_f F + Y + Zl + Opt + Off + P]
    + max(A (Cmp + R + Ze + k (Z - Ze)), A Z) + max(E - O, D + k (E - D)) + max(G - F, Dg + k (G - Dg))
    with
    A = m + B_t > 0: a sum of maxima of affine pieces with positive weights (`time_groups`), which an
    integer program represents exactly with one auxiliary variable per maximum under minimisation.

    The nonlinear terms of the earlier model are replaced by affine ones:
    - DP tail. The gradient sync E of a stage (affine in its parameters: alpha-beta collectives
      are affine in bytes, Thakur et al. 2005 §3-4) overlaps its last micro-batch's backward except
      the backward of the first layer processed, since buckets are reduced as soon as they fill
      (PyTorch DDP, Li et al. 2020 VLDB §3.2.3; Megatron-LM `overlap_grad_reduce`). The window O is
      the stage's backward (compute, recompute, in-layer communication, LM-head backward) less W1,
      the least backward of any one layer (so O >= 0 and a stage without sync shows none); the
      exposed tail is at least D, the sync of the last bucket: the gradients produced last, one
      layer's (the largest kind) plus the embedding on stage 0 (its gradient comes after the first
      layer's). It replaces max(E - backward (n-1)/n, E/n), which divides by the layer count.
    - ZeRO-3 re-gathers a fully recomputed layer's parameters for its forward re-run, per layer
      (FSDP/ZeRO-3 gather module by module: Rajbhandari et al. 2020 §7.2.2; Zhao et al. 2023
      (PyTorch FSDP) §3.3): an affine term per full-recompute layer, replacing a third gather of
      the whole stage when the layout's majority mode is full.
    - Parameter gather. With parameter-gather overlap the all-gather of the updated parameters G
      runs bucket by bucket under the next step's first forward F (Megatron's forward pre-hooks:
      NVIDIA/Megatron-LM@d98e8a6 megatron/core/distributed/distributed_data_parallel.py
      l. 517-545), at least the first bucket Dg (one layer's, the embedding's on stage 0);
      without it G is exposed after the optimizer (`comm` phase after_step, part of Y), as is the
      gradient sync without gradient-reduce overlap (phase sync).
    - ZeRO-3 prefetch. The per-micro-batch gathers Z run one unit ahead of the compute that needs
      them (FSDP / ZeRO-3 prefetch: Zhao et al. 2023 (PyTorch FSDP) §3.3.2; DeepSpeed's
      ZeRO-3 prefetch bucket, `frameworks.deepspeed`), so the first unit's gather has nothing to run under: the
      compute waits for it (Ze, one layer's gather, the embedding's with it on stage 0), while the
      links stay busy for Z in all: max(Cmp + R + Ze, Z). The reduce-scatter of the last unit of
      the step's last micro-batch runs after all compute (its gradients come last), before the
      optimizer: Zl, one layer's reduce-scatter per step (`_microbatch_edges`).
    The exposed ZeRO excess max(0, Z - Cmp - R) is not part of the window O: it occupies the same
    data-parallel links the sync needs.
    - SMs held by overlapped collectives. Every overlapped data-parallel / ZeRO collective (Z, E, G)
      is an NCCL kernel holding k = `overlap.NCCL_CHANNEL_SMS` / sm_count of the GPU while it runs,
      so the compute beside it runs on 1 - k: compute C beside Z s of communication ends at
      max(C + k Z, Z) (`overlap.sm_share`), the same SM share that slows a GEMM beside Transformer
      Engine's userbuffers (`_tp_overlap_exposed`). The part that runs with no compute beside it
      (Ze, D, Dg) takes nothing from it: a hidden sync lengthens its window by k (E - D)
      (k (G - Dg)).
    """

    layer_kinds: tuple[int, ...]
    """Kind index of each decoder layer (`layer_kinds`)."""
    forward: AffinePiece
    """F: forward compute (LM head forward = 1/3 of its fwd + bwd on the last stage)."""
    compute: AffinePiece
    """Cmp: forward + backward compute incl. the LM head."""
    recompute: AffinePiece
    """R: compute re-run by the recompute modes."""
    layer_comm: AffinePiece
    """X: exposed TP/SP, CP and EP communication of the layers."""
    state_traffic: AffinePiece
    """Z: ZeRO-2/3 reduce-scatter + gathers, HSDP all-reduce and parameter-offload traffic per
    micro-batch (`comm` phase microbatch; re-gathers of fully recomputed layers, phase recompute)."""
    dp_sync: AffinePiece
    """E: end-of-step gradient/parameter sync of the stage (`comm` phase step), s per step."""
    dp_window: AffinePiece
    """O: backward of the last micro-batch that the sync overlaps, s."""
    dp_last_bucket: AffinePiece
    """D: sync of the last bucket (constant per stage), s per step."""
    state_edge: AffinePiece
    """Ze: the first unit's prefetched gather of every micro-batch, which no compute hides (constant
    per stage), s per micro-batch."""
    state_exposed: AffinePiece
    """Zx: per-micro-batch model-state traffic the framework does not overlap (`comm` phase
    microbatch_exposed; the re-gathers of phase recompute too without parameter prefetch), s per
    micro-batch."""
    param_sync: AffinePiece
    """G: all-gather of the updated parameters overlapping the next step's first forward F
    (`comm` phase param_sync), s per step."""
    param_first_bucket: AffinePiece
    """Dg: gather of the first bucket the forward waits for (constant per stage), s per step."""
    optimizer: AffinePiece
    """Opt: memory-bound optimizer step, s per step."""
    offload: AffinePiece
    """Off: per-step host<->device traffic of optimizer offload, s per step."""
    state_last_bucket: AffinePiece
    """Zl: reduce-scatter of the last unit of the step's last micro-batch, after all compute
    (constant per stage), s per step."""
    after_sync: AffinePiece
    """Y: collectives after the DP sync (SP norm and tied-embedding all-reduces), s per step."""
    pipeline: PipelineCoefficients
    """Schedule coefficients (m, B_t, B_f, P)."""
    records: StateRecords | None = None
    """The model-state, pipeline and after-sync collectives the pieces price (`comm`)."""
    layer_records: tuple[tuple[Collective, ...], ...] = ()
    """[kind] in-layer collectives of one layer, one micro-batch (`comm.layer_collectives`)."""
    comm_sm_share: float = 0.0
    """k: fraction of the SMs an overlapped data-parallel / ZeRO collective (NCCL) holds while it
    runs (`overlap.sm_share` of `overlap.NCCL_CHANNEL_SMS`)."""

    @property
    def num_kinds(self) -> int:
        """Layer kinds the coefficient tables are indexed by."""
        return len(self.forward.coef)

    def time_groups(self) -> tuple[tuple[AffinePiece, ...], ...]:
        """total_s = sum over groups of the max over the group's pieces (see class docstring);
        built once per model (every stage total reads it)."""
        groups = self.__dict__.get("_time_groups")
        if groups is None:
            groups = self._build_time_groups()
            object.__setattr__(self, "_time_groups", groups)
        return groups

    def _build_time_groups(self) -> tuple[tuple[AffinePiece, ...], ...]:
        a = self.pipeline.slots + self.pipeline.bubble_per_t
        p2p = AffinePiece(const_s=(self.pipeline.p2p_s,) * len(self.forward.const_s),
                          coef=tuple((0.0,) * len(RECOMPUTE_MODES) for _ in self.forward.coef))
        base = _combine((a, self.layer_comm), (a, self.state_exposed),
                        (self.pipeline.bubble_per_forward, self.forward),
                        (1.0, self.optimizer), (1.0, self.offload), (1.0, self.after_sync),
                        (1.0, self.state_last_bucket), (1.0, p2p))
        k = self.comm_sm_share
        busy = _combine((a, self.compute), (a, self.recompute), (a * (1 - k), self.state_edge),
                        (a * k, self.state_traffic))
        return ((base,), (busy, _combine((a, self.state_traffic),)),
                (_combine((1.0, self.dp_sync), (-1.0, self.dp_window)),
                 _combine((1 - k, self.dp_last_bucket), (k, self.dp_sync))),
                (_combine((1.0, self.param_sync), (-1.0, self.forward)),
                 _combine((1 - k, self.param_first_bucket), (k, self.param_sync))))

    def counts(self, layers: Sequence[int], modes: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        """c[k][r] of a stage holding `layers` with per-layer `modes` (indexed by layer)."""
        out = [[0] * len(RECOMPUTE_MODES) for _ in range(self.num_kinds)]
        for j in layers:
            out[self.layer_kinds[j]][RECOMPUTE_MODES.index(modes[j])] += 1
        return tuple(tuple(row) for row in out)

    def stage_total(self, stage: int, counts) -> float:
        """total_s of `stage` with layer counts `counts`, s (the quantity the ILP bounds by z)."""
        return sum(max(p.value(stage, counts) for p in group) for group in self.time_groups())

    def stage_parts(self, stage: int, counts) -> tuple[float, ...]:
        """(total, compute, exposed comm, bubble, recompute, optimizer) of one stage, s per step."""
        v = {name: getattr(self, name).value(stage, counts) for name in (
            "forward", "compute", "recompute", "layer_comm", "state_traffic", "dp_sync",
            "dp_window", "dp_last_bucket", "optimizer", "offload", "after_sync", "state_exposed",
            "param_sync", "param_first_bucket", "state_edge", "state_last_bucket")}
        busy, k = v["compute"] + v["recompute"], self.comm_sm_share
        comm = (v["layer_comm"] + v["state_exposed"] + max(
            _beside(v["state_edge"], v["state_traffic"], k), v["state_traffic"] - busy))
        pipe = self.pipeline.time(v["forward"], busy + comm - v["forward"])
        dp = (max(v["dp_sync"] - v["dp_window"], _beside(v["dp_last_bucket"], v["dp_sync"], k))
              + max(v["param_sync"] - v["forward"],
                    _beside(v["param_first_bucket"], v["param_sync"], k)))
        m = self.pipeline.slots
        return (self.stage_total(stage, counts), m * v["compute"],
                m * comm + pipe.p2p_s + dp + v["offload"] + v["after_sync"] + v["state_last_bucket"],
                pipe.bubble_s,
                m * v["recompute"], v["optimizer"])

    def microbatch_s(self, stage: int, counts, const_share: float = 1.0) -> float:
        """t = X + Zx + max(Cmp + R + Ze, Z): per-micro-batch time of `stage`'s layers `counts` with
        `const_share` of its layer-independent part (a chunk's share of its stage), s."""
        def value(piece: AffinePiece) -> float:
            return piece.value(stage, counts) - (1 - const_share) * piece.const_s[stage]
        z = value(self.state_traffic)
        busy = (value(self.compute) + value(self.recompute)
                + _beside(value(self.state_edge), z, self.comm_sm_share))
        return value(self.layer_comm) + value(self.state_exposed) + max(busy, z)

    def stage_collectives(self, stage: int, counts) -> list[Collective]:
        """The collectives the pieces of `stage` with layer counts `counts` price, per step and
        merged as `comm.collectives` reports them (same records, groups and bytes)."""
        m = self.pipeline.slots
        full = RECOMPUTE_MODES.index("full")
        out = list(self.records.fixed[stage])
        for k, row in enumerate(counts):
            n = sum(row)
            if not n:
                continue
            out += [dataclasses.replace(c, message_bytes=c.message_bytes * n)
                    for c in self.records.per_kind[k]]
            out += [dataclasses.replace(c, count=c.count * row[full]) for c in self.records.regather[k]
                    if row[full]]
            passes = n + row[full]
            out += [dataclasses.replace(c, count=int(c.count * m) * (
                passes if c.phase in ("forward", "attention.forward") else n))
                for c in self.layer_records[k]]
        return comm.merge(out)


def layer_kinds(model: ModelSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(kind index of each layer, representative layer of each kind): layers with the same
    parameter counts, attention type and MoE flag cost the same in every term."""
    hit = _LAYER_KINDS.get(id(model))
    if hit is None or hit[0] is not model:
        hit = (model, _layer_kinds(model))
        _LAYER_KINDS[id(model)] = hit
    return hit[1]


_LAYER_KINDS: dict = {}
"""Cache of `layer_kinds` by model identity (each entry keeps its model alive)."""


def _layer_kinds(model: ModelSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    counts = _counts(model)
    keys: dict = {}
    kinds = []
    for i, lp in enumerate(counts.layers):
        key = (lp, model.layer_types[i] if model.layer_types else None,
               bool(model.is_moe and model.moe_layers[i]))
        kinds.append(keys.setdefault(key, len(keys)))
    reps = tuple(kinds.index(k) for k in range(len(keys)))
    return tuple(kinds), reps


def _affine_in(fn, scale: float = 2.0**30) -> tuple[float, float]:
    """(alpha, beta) with fn(x) = alpha + beta x for x > 0, for fn affine on x > 0 (alpha-beta
    collectives, which are 0 only at 0 bytes); read off two large points to limit cancellation."""
    f1, f2 = fn(scale), fn(2 * scale)
    beta = (f2 - f1) / scale
    return f1 - beta * scale, beta


def stage_cost_model(model: ModelSpec, cluster: ClusterSpec, layout: Layout, *,
                     rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER,
                     schedule: str | None = None, flash_attention: bool = True) -> StageCostModel:
    """The `StageCostModel` of `layout` (its split and recompute fields are ignored)."""
    key = (model, id(cluster), layout.replace(pipeline_layers=None, pipeline_layout=None, recompute="none"),
           tuple(rank_order), schedule, flash_attention)
    hit = _COST_MODELS.get(key)
    if hit is None or hit[0] is not cluster:  # ClusterSpec is unhashable: keyed by identity
        if len(_COST_MODELS) >= 512:
            _COST_MODELS.clear()
        hit = (cluster, _stage_cost_model(model, cluster, *key[2:]))
        _COST_MODELS[key] = hit
    return hit[1]


_COST_MODELS: dict = {}
"""Cache of `stage_cost_model` (each entry keeps its cluster alive, so ids are not reused)."""


def clear_caches() -> None:
    """Drop the cached layer times and stage cost models (after `compute.use_calibration`)."""
    _LAYER_TIMES.clear()
    _COST_MODELS.clear()
    _STATE_PIECES.clear()


def _stage_cost_model(model, cluster, layout, order, schedule, flash) -> StageCostModel:
    kinds, reps = layer_kinds(model)
    S, modes = layout.pp, RECOMPUTE_MODES
    share = _sharing(layout, cluster, order)
    lt = [[layer_time(model, cluster, layout, j, r, rank_order=order, flash_attention=flash)
           for r in modes] for j in reps]
    head = stage_fixed_times(model, cluster, layout)
    st = _state_pieces(model, cluster, layout, order)
    zero = tuple(0.0 for _ in range(S))

    def piece(const, fn) -> AffinePiece:
        return AffinePiece(const_s=tuple(const), coef=tuple(tuple(fn(k, r) for r in range(len(modes)))
                                                            for k in range(len(reps))))

    full = modes.index("full")
    hid, shown = st.hidden_regather, st.shown_regather
    w1 = min(x[0].backward_s + x[0].recompute_s + x[0].comm_s for x in lt)
    return StageCostModel(
        layer_kinds=kinds,
        forward=piece([h / 3 for h in head], lambda k, r: lt[k][r].forward_s),
        compute=piece(head, lambda k, r: lt[k][r].forward_s + lt[k][r].backward_s),
        recompute=piece(zero, lambda k, r: lt[k][r].recompute_s),
        layer_comm=piece(zero, lambda k, r: lt[k][r].comm_s),
        state_traffic=piece(st.z_const, lambda k, r: st.z_coef[k] + (hid[k] if r == full else 0.0)),
        dp_sync=piece(st.e_const, lambda k, r: st.e_coef[k]),
        dp_window=piece([2 * h / 3 - w1 for h in head],
                        lambda k, r: lt[k][r].backward_s + lt[k][r].recompute_s + lt[k][r].comm_s),
        dp_last_bucket=piece(st.last_bucket, lambda k, r: 0.0),
        state_edge=piece(st.first_gather, lambda k, r: 0.0),
        state_exposed=piece(st.zx_const, lambda k, r: st.zx_coef[k] + (shown[k] if r == full else 0.0)),
        param_sync=piece(st.g_const, lambda k, r: st.g_coef[k]),
        param_first_bucket=piece(st.first_bucket, lambda k, r: 0.0),
        optimizer=piece([st.opt_b * f for f in st.fixed], lambda k, r: st.opt_b * st.per_layer[k]),
        offload=piece(st.h_const, lambda k, r: st.h_coef[k]),
        after_sync=piece(st.x_const, lambda k, r: st.x_coef[k]),
        state_last_bucket=piece(st.last_scatter, lambda k, r: 0.0),
        pipeline=pipeline_coefficients(num_microbatches=layout.num_microbatches, pp=layout.pp,
                                       vpp=layout.vpp, schedule=schedule,
                                       p2p_send_s=_p2p_time(model, cluster, layout, share)),
        records=st.records,
        layer_records=st.layer_records,
        comm_sm_share=overlap.sm_share(overlap.NCCL_CHANNEL_SMS, cluster.gpu.sm_count),
    )


@dataclass(frozen=True)
class _StatePieces:
    """The parts of a `StageCostModel` that read no layer time: the model-state records priced by
    phase (`_phase_piece`: [stage] const, [kind] coefficient), the full-recompute re-gathers
    ([kind] hidden / shown), the edge buckets, the optimizer's slope and per-stage / per-kind
    parameters, the layer collectives' records."""

    records: StateRecords
    layer_records: tuple
    z_const: list
    z_coef: list
    zx_const: list
    zx_coef: list
    e_const: list
    e_coef: list
    g_const: list
    g_coef: list
    x_const: list
    x_coef: list
    h_const: list
    h_coef: list
    hidden_regather: list
    shown_regather: list
    opt_b: float
    fixed: list
    per_layer: list
    last_bucket: list
    first_bucket: list
    first_gather: list
    last_scatter: list


def _state_pieces(model: ModelSpec, cluster: ClusterSpec, layout: Layout, order) -> _StatePieces:
    """`_StatePieces` of `layout`, once per (model, cluster, layout without its recompute and
    offload module lists, split or recompute, rank order): the module-set variants of one candidate
    (`search.module_sets`) share them. What they read names no module list: `state_records` and
    `comm.layer_collectives` (their cache keys list what they read), `_Pricer` (the record's axes,
    the mesh's domain sharing, pp), `_optimizer_time` (optimizer, ZeRO stage, sharding degree, cp,
    the offload set, framework), `overlap.resolve` (framework, ZeRO stage, the overlap knobs) and
    the parameter counts (tp, ep, etp, pp); the module lists reach the stage cost model only
    through `layer_time` (`layer_time_key`), which `_stage_cost_model` reads per layout."""
    key = (model, id(cluster), layout.replace(pipeline_layers=None, pipeline_layout=None,
                                              recompute="none", recompute_modules=None,
                                              offload_modules=None), tuple(order),
           mtp.mtp_stage(layout))  # the layout string places the MTP parameters (`_mtp_param_count`)
    hit = _STATE_PIECES.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_STATE_PIECES) >= 512:
        _STATE_PIECES.clear()
    kinds, reps = layer_kinds(model)
    S = layout.pp
    share = _sharing(layout, cluster, order)
    counts = _counts(model)
    per_layer = [(counts.layers[j].total - counts.layers[j].routed_experts) / layout.tp
                 + counts.layers[j].routed_experts / (layout.ep * layout.etp) for j in reps]
    fixed = [(counts.embedding if s == 0 else 0.0) + (counts.lm_head + counts.final_norm
                                                      if s == S - 1 else 0.0) for s in range(S)]
    fixed = [x / layout.tp + _mtp_param_count(model, layout, s) for s, x in enumerate(fixed)]
    records = state_records(model, layout)
    price = _Pricer(layout, cluster, share, order)
    m = max(1, layout.num_microbatches)
    z_const, z_coef, _ = _phase_piece(records, price, ("microbatch",), per=m)
    zx_const, zx_coef, _ = _phase_piece(records, price, ("microbatch_exposed",), per=m)
    e_const, e_coef, _ = _phase_piece(records, price, ("step",))
    g_const, g_coef, _ = _phase_piece(records, price, ("param_sync",))
    x_const, x_coef, _ = _phase_piece(records, price, ("after_sync", "sync", "after_step"))
    h_const, h_coef, _ = _phase_piece(records, price, ("host",))
    regather = [price.time(r, per=m) for r in records.regather]
    # a fully recomputed layer's re-gather is hidden like the other gathers only with prefetch
    hidden = overlap.resolve(layout).overlap_param_gather
    hid, shown = (regather, [0.0] * len(regather)) if hidden else ([0.0] * len(regather), regather)
    opt_b = _affine_in(lambda p: _optimizer_time(cluster, layout, p))[1]
    first_gather, last_scatter = _microbatch_edges(records, price)
    pieces = _StatePieces(
        records=records,
        layer_records=tuple(tuple(comm.layer_collectives(
            model, layout, j, _ep_sharing(layout, cluster, order))) for j in reps),
        z_const=z_const, z_coef=z_coef, zx_const=zx_const, zx_coef=zx_coef, e_const=e_const,
        e_coef=e_coef, g_const=g_const, g_coef=g_coef, x_const=x_const, x_coef=x_coef,
        h_const=h_const, h_coef=h_coef, hidden_regather=hid, shown_regather=shown, opt_b=opt_b,
        fixed=fixed, per_layer=per_layer,
        last_bucket=_edge_bucket(records, price, "step", S),
        first_bucket=_edge_bucket(records, price, "param_sync", S),
        first_gather=first_gather, last_scatter=last_scatter)
    _STATE_PIECES[key] = (cluster, pieces)
    return pieces


_STATE_PIECES: dict = {}
"""Cache of `_state_pieces` (each entry keeps its cluster alive, so ids are not reused)."""


def _edge_bucket(records: StateRecords, price: _Pricer, phase: str, stages: int) -> list[float]:
    """[stage] time of the one bucket of `phase` that nothing hides, s per step: one layer's
    records (the largest kind), with the embedding's on stage 0 (its gradient comes last in the
    backward, its parameters are used first in the forward)."""
    per = [[c for c in r if c.phase == phase] for r in records.per_kind]
    first = [c for c in records.fixed[0] if c.phase == phase]
    later = max(price.time(r) for r in per)   # every stage but the first (no embedding)
    return [max(price.time(r + first) for r in per) if s == 0 else later for s in range(stages)]


def _microbatch_edges(records: StateRecords, price: _Pricer) -> tuple[list[float], list[float]]:
    """([stage] one call of the first unit's parameter gather, s per micro-batch; [stage] one call
    of the last unit's gradient reduce-scatter, s per step) of the model-state collectives that run
    every micro-batch overlapped (phase microbatch; see `StageCostModel`): one layer's (the largest
    kind), with the stage's fixed part (embedding, head) on the stage that holds it (the root unit
    that FSDP gathers first and reduces last). Zero without such collectives."""
    def one_call(rs, kind: str) -> float:   # one bucket: the records merged by key
        sel = [c for c in rs if c.phase == "microbatch" and c.kind == kind and c.axis in ("dp", "edp")]
        return price.time(sel, per=sel[0].count) if sel else 0.0

    out = []
    for kind in ("all_gather", "reduce_scatter"):
        out.append([max(one_call(r + f, kind) for r in records.per_kind) for f in records.fixed])
    return out[0], out[1]


def _phase_piece(records: StateRecords, price: _Pricer, phases: tuple[str, ...],
                 per: float = 1.0) -> tuple[list[float], list[float], float]:
    """([stage] const, [kind] coefficient, alpha part of each const) of the time of the records in `phases`, divided by
    `per`: each key is one call per count over the stage's summed message (alpha once, beta per
    byte), so const = sum count (alpha + beta M_fixed) and coef[k] = sum count beta M_k. Every key
    any part lists pays its alpha on every stage (as one bucketed collective)."""
    keys: dict[tuple, Collective] = {}
    for r in (*records.per_kind, *records.fixed):
        for c in r:
            if c.phase in phases:
                keys.setdefault(c.key, c)
    ab = {key: price.alpha_beta(c) for key, c in keys.items()}
    layered = {c.key for r in records.per_kind for c in r if c.key in ab}
    alpha = sum(keys[key].count / per * ab[key][0] for key in layered)

    def slope(r) -> float:
        return sum(c.count / per * ab[c.key][1] * c.message_bytes for c in r if c.key in ab)

    def fixed_alpha(r) -> float:  # keys only the stage's fixed part has (tied embedding, ...)
        own = {c.key: c for c in r if c.key in ab and c.key not in layered}
        return sum(c.count / per * ab[key][0] for key, c in own.items())

    return ([alpha + fixed_alpha(r) + slope(r) for r in records.fixed],
            [slope(r) for r in records.per_kind], alpha)


# ---------------------------------------------------------------- step


def step_time(model: ModelSpec, cluster: ClusterSpec, layout: Layout, *,
              recompute_layers: Sequence[str] | None = None,
              rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER,
              schedule: str | None = None, flash_attention: bool = True) -> StepTime:
    """Time of one training step and tokens/s, TFLOP/s per GPU, MFU and HFU: the maximum over
    pipeline stages of `StageCostModel.stage_total` (the function `planner plan` minimises).

    Args:
        model, cluster, layout: what to cost.
        recompute_layers: recompute mode per decoder layer (len = layers); None = layout.recompute.
        rank_order: mesh axes innermost first (decides which groups stay in a scale-up domain).
        schedule: pipeline schedule (`pipeline.SCHEDULES`); None = interleaved when vpp > 1.
        flash_attention: fused attention core (no s^2 score traffic); False for pre-2022 Megatron.

    Raises:
        SpecError: recompute_layers of the wrong length or with unknown modes; a layout whose
            micro-batches do not divide the batch.
    """
    modes = _modes(model, layout, recompute_layers)
    m = layout.num_microbatches
    if m < 1 or layout.global_batch_size % (layout.dp * layout.micro_batch_size):
        raise SpecError(f"global_batch_size {layout.global_batch_size} must be a multiple of dp x "
                        f"micro_batch_size = {layout.dp * layout.micro_batch_size}", key="global_batch_size")
    cm = stage_cost_model(model, cluster, layout, rank_order=rank_order, schedule=schedule,
                          flash_attention=flash_attention)
    parts = [cm.stage_parts(i, cm.counts(layers, modes))
             for i, layers in enumerate(stage_layers(model, layout))]
    if layout.vpp > 1 and layout.pipeline_layout is not None and not pipeline_layout.is_even(
            layout.pipeline_layout):
        bubble = uneven_interleaved_bubble_s(chunk_times(cm, layout, modes), layout.pp)
        parts = [(p[0] - p[3] + bubble, p[1], p[2], bubble, *p[4:]) for p in parts]
    best = max(parts)
    return _summary(model, cluster, layout, modes, *best,
                    stage_step=tuple(p[0] for p in parts))

def chunk_times(cm: StageCostModel, layout: Layout, modes: Sequence[str]) -> list[float]:
    """Per-micro-batch time of every virtual stage (`StageCostModel.microbatch_s` of its layers):
    a rank's layer-independent part (the LM head, its fixed collectives) goes with the chunk that
    holds the loss on the last rank and the embedding on the first; a middle rank's (none but
    per-stage collective latencies) is shared equally by its chunks."""
    chunks = pipeline_layout.rank_chunks(layout.pipeline_layout, layout.pp)
    v, last = layout.vpp, layout.pp - 1
    out = []
    for r, rank in enumerate(chunks):
        for j, layers in enumerate(rank):
            share = (float(j == v - 1) if r == last else float(j == 0) if r == 0 else 1 / v)
            out.append(cm.microbatch_s(r, cm.counts(layers, modes), share))
    return out


def _modes(model: ModelSpec, layout: Layout, recompute_layers: Sequence[str] | None) -> tuple[str, ...]:
    if recompute_layers is None:
        return (layout.recompute,) * model.num_hidden_layers
    modes = tuple(recompute_layers)
    if len(modes) != model.num_hidden_layers or any(x not in RECOMPUTE_MODES for x in modes):
        raise SpecError(f"recompute_layers must give one of {', '.join(RECOMPUTE_MODES)} for each of "
                        f"the {model.num_hidden_layers} layers", key="recompute_layers")
    return modes


def _p2p_time(model: ModelSpec, cluster: ClusterSpec, layout: Layout, share: dict[str, int]) -> float:
    """Exposed time of one pipeline send of a micro-batch's boundary activations
    (`comm.stage_collectives`), s: the whole send, or where the framework overlaps its sends with
    the next model chunk's compute (`frameworks.<framework>.p2p_overlap`: Megatron's interleaved
    schedule) only its excess over the forward of the smallest chunk (layers // (pp x vpp), at
    least one, of the cheapest layer kind; a backward chunk is twice as long)."""
    sends = [c for c in comm.stage_collectives(model, layout, 0) if c.phase == "pipeline"]
    if not sends:
        return 0.0
    send = _call_time(sends[0], 2 if share["pp"] >= 2 else 1, cluster)
    if not BY_NAME[layout.framework].p2p_overlap(layout.vpp):
        return send
    layers = max(1, model.num_hidden_layers // (layout.pp * layout.vpp))
    chunk = layers * min(layer_time(model, cluster, layout, i, "none").forward_s for i in layer_kinds(model)[1])
    return max(0.0, send - chunk)


@lru_cache(maxsize=256)
def _flops(model: ModelSpec, seq_len: int, mtp_layers: int):
    return flops_per_token(model, seq_len, mtp_layers)


def _summary(model, cluster, layout, modes, step, compute, comm, bubble, recompute, optimizer,
             stage_step=()) -> StepTime:
    """Model FLOPs include the trained MTP layers (`params_flops.mtp_forward_flops`), which
    `stage_fixed_times` runs; the MTP layer is never recomputed there, so it adds no hardware FLOPs
    of its own."""
    tokens = layout.global_batch_size * layout.seq_len
    f = _flops(model, layout.seq_len, mtp.mtp_layers(model, layout))
    model_flops = f.training * tokens
    extra = 0.0
    for j, mode in enumerate(modes):
        if mode == "selective":
            extra += sum(selective_flops_per_token(model, j, layout.seq_len, layout.selective_modules))
        elif mode == "full":
            extra += sum(_layer_flops_per_token(model, j, layout.seq_len))
    hardware_flops = model_flops + extra * tokens
    world = layout.world_size
    peak = peak_flops(cluster.gpu, layout.precision)
    tflops = model_flops / step / world / 1e12
    hw_tflops = hardware_flops / step / world / 1e12
    return StepTime(step=step, compute=compute, communication_exposed=comm, pipeline_bubble=bubble,
                    recompute=recompute, optimizer=optimizer, tokens_per_s=tokens / step,
                    tflops_per_gpu=tflops, hardware_tflops_per_gpu=hw_tflops,
                    mfu=tflops * 1e12 / peak, hfu=hw_tflops * 1e12 / peak, stage_step=stage_step)


# ---------------------------------------------------------------- for the search's bounds


def total_stage_params(model: ModelSpec, layout: Layout) -> float:
    """Sum over pipeline stages of the parameters one GPU of each stage holds before ZeRO
    (`_stage_param_count` of every stage; independent of the split)."""
    key = (id(model), layout.tp, layout.ep, layout.etp)
    hit = _TOTALS.get(key)
    if hit is None or hit[0] is not model:
        one_stage = Layout(tp=layout.tp, ep=layout.ep, etp=layout.etp)
        hit = _TOTALS[key] = (model, _stage_param_count(model, one_stage, range(model.num_hidden_layers), 0))
    return hit[1]


_TOTALS: dict = {}
"""Caches of `total_stage_params` and `_element_totals` by model identity and the degrees they
read (each entry keeps its model alive)."""


def _element_totals(model: ModelSpec, layout: Layout) -> tuple[dict[str, float], dict[str, float]]:
    """(local elements per group of all decoder layers, of every stage's fixed part) on the GPUs
    of one pipeline column (`comm.layer_elements`, `comm.fixed_elements`)."""
    key = ("elements", id(model), layout.tp, layout.ep, layout.etp, layout.pp, layout.framework, layout.mtp_layers)
    hit = _TOTALS.get(key)
    if hit is None or hit[0] is not model:
        kinds, reps = layer_kinds(model)
        layers = dict.fromkeys(GROUPS, 0.0)
        for k, j in enumerate(reps):
            for g, n in comm.layer_elements(model, layout, j).items():
                layers[g] += kinds.count(k) * n
        fixed = dict.fromkeys(GROUPS, 0.0)
        for st in {0, layout.pp - 1}:   # stages in between hold no fixed parameters
            for g, n in comm.fixed_elements(model, layout, st).items():
                fixed[g] += n
        hit = _TOTALS[key] = (model, (layers, fixed))
    return hit[1]


def microbatch_state_traffic_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, params: float, *,
                               rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER) -> float:
    """Per-micro-batch ZeRO-2/3 + parameter-offload traffic (the Z of `step_time`'s
    max(0, Z - compute - recompute), no re-gather) of a stage holding the share
    params / `total_stage_params` of every stage's model states, s: the latency of every
    collective the layers take part in plus that share of the bytes of all of them, so pp times
    its value at total / pp is at most the sum of Z over the stages (Z is affine in the bytes)."""
    alpha, slope = _unit_phase_time(model, cluster, layout, "microbatch", rank_order)
    return alpha + slope * params / total_stage_params(model, layout)


def _unit_phase_time(model: ModelSpec, cluster: ClusterSpec, layout: Layout, phase: str,
                     rank_order: Sequence[str]) -> tuple[float, float]:
    """(latency of every model-state collective of `phase` the decoder layers take part in, per
    stage; per-byte time of all of them over every element of the model), s: the records are
    linear in each group's elements (`comm.unit_state_collectives`, one element, one micro-batch)."""
    price = _Pricer(layout, cluster, _sharing(layout, cluster, rank_order), rank_order)
    layers, fixed = _element_totals(model, layout)
    alpha, slope, seen = 0.0, 0.0, set()
    for g, c in comm.unit_state_collectives(layout):
        if c.phase != phase:
            continue
        a, b = price.alpha_beta(c)
        if layers[g] > 0 and c.key not in seen:
            seen.add(c.key)
            alpha += c.count * a
        slope += c.count * b * c.message_bytes * (layers[g] + fixed[g])
    return alpha, slope


def step_sync_total_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, *,
                      rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER) -> float:
    """Sum over the pipeline stages of the end-of-step data-parallel sync E_s (the `dp_sync` piece
    of `StageCostModel`), s, whatever the split: each stage pays the latency of every collective
    the layers take part in, and the bytes of all the stages' elements are paid once in total
    (E is affine in each group's elements, `_phase_piece`), so the sum is pp x the latencies +
    the per-byte time of every element of the model (decoder layers and fixed parts)."""
    alpha, slope = _unit_phase_time(model, cluster, layout, "step", rank_order)
    return layout.pp * alpha + slope


def pipeline_send_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, *,
                    rank_order: Sequence[str] = coll.DEFAULT_RANK_ORDER) -> float:
    """One pipeline send of a micro-batch's boundary activations, s (as `step_time` charges it)."""
    return _p2p_time(model, cluster, layout, _sharing(layout, cluster, rank_order))
