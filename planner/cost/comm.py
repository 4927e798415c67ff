"""Collectives per training step implied by a placement: the one list that is reported to the user
and that `planner.cost.step_time` prices (data only; times are computed there).

**Communication rule** (docs/architecture.md §2): each (state, axis, mode) implies collectives; a collective on
one axis moves the *local* shard left after the other axes' sharding. For a parameter group with
batch axes B (dp_replicate, dp_shard, cp; edp for experts):

| modes over B | collectives per step |
|---|---|
| gradients replicated, optimizer replicated | all-reduce of the gradient, once (accumulated locally over m) |
| gradients replicated, optimizer sharded over O | reduce-scatter over O once + all-gather of updated parameters over O once |
| gradients sharded over O | reduce-scatter over O per micro-batch (no full local accumulator) |
| parameters replicated, optimizer sharded over O | all-gather of updated parameters over O once (torchtitan's ZeRO-2: once per micro-batch, `fsdp_regathers_every_microbatch`) |
| parameters sharded_with_gather over O | all-gather per micro-batch in forward and again in backward (and once more for a fully recomputed layer's re-run forward) |
| any of the above also replicated over R | all-reduce of the 1/|O| shard over R (HSDP), as often as the reduce-scatter |
| offloaded state | device->host / host->device copies of the local shard (`_offload`) |

Activations: TP all-reduce (or SP all-gather + reduce-scatter) 2 per layer forward, 2 backward, 2 more
on full recompute (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2); PP one send forward and
one backward per micro-batch per virtual stage (Narayanan et al. 2021 §2.2); CP ring exchange of the
local K/V (cp − 1) times forward, K/V + dK/dV backward, recorded as the ring all-gather of the
sequence's K/V and the reduce-scatter of its dK/dV they amount to (Liu et al. 2023 Ring Attention;
Megatron-LM `context_parallel.rst`); EP all-to-all dispatch + combine forward and backward (Lepikhin et al. 2020
GShard §3; Megatron `token_dispatcher.py`), or with the flex dispatcher (DeepEP / HybridEP) one copy
per destination node over the network and one per destination GPU over NVLink (`_flex_dispatch`); tied embedding all-reduce between first and last stage
(Megatron `_allreduce_word_embedding_grads`, FC-14); norm gradients all-reduced over tp under SP
(Megatron `_allreduce_layernorm_grads`).

Every record says which phase of the step it belongs to (`PHASES`), i.e. what it overlaps with;
the time model reads the phase, never a second list of its own. In-layer collectives come per layer
and micro-batch (`layer_collectives`), model-state collectives per step for a set of local parameter
elements (`state_collectives`, affine in them), and `collectives` adds them up for one stage.

Ring convention, `M` = message as in `planner.cost.collectives` (all-reduce: the buffer; all-gather:
the gathered output; reduce-scatter: the full input; all-to-all: the buffer a GPU sends): bytes sent per
device = 2(n−1)/n·M, (n−1)/n·M, (n−1)/n·M, (n−1)/n·M; p2p and host copies M.
Source: Thakur, Rabenseifner & Gropp 2005 §3-4; ZeRO (Rajbhandari et al. 2020) §7 (2Ψ vs 3Ψ).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from planner.cost.collectives import DEFAULT_RANK_ORDER
from planner.cost.memory import _group_counts, _vocab_units, fsdp_gradient_sharding_with_pp, stage_layers
from planner.cost.params_flops import count_params
from planner.frameworks import BY_NAME
from planner.placement import overlap
from planner.placement.layout import Layout
from planner.placement.precision import padded_vocab, state_bytes, state_key
from planner.placement.states import GROUPS, Mode, State
from planner.placement.strategies import placement_for
from planner.specs.model import ModelSpec

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p", "device_to_host",
         "host_to_device")
_BATCH = ("dp_replicate", "dp_shard", "cp", "edp")

PHASES = {
    "forward": "each forward pass of a layer (a second one under full recompute); exposed",
    "backward": "the backward of a layer; exposed",
    "attention.forward": "under the attention core of each forward pass; only the excess shows",
    "attention.backward": "under the attention core's backward (2x its forward); only the excess shows",
    "microbatch": "model-state traffic of every micro-batch (ZeRO-2/3 reduce-scatter and gathers, "
                  "HSDP all-reduce, parameter offload), overlapping the micro-batch's compute",
    "microbatch_exposed": "model-state traffic of every micro-batch the framework does not overlap "
                          "(ZeRO-2/3 reduce-scatter without gradient-reduce overlap, ZeRO-3 "
                          "gathers without prefetch); exposed",
    "recompute": "ZeRO-3 re-gather of one fully recomputed layer's parameters, every micro-batch "
                 "(part of the micro-batch's model-state traffic: overlapped with parameter "
                 "prefetch, else exposed)",
    "step": "end-of-step gradient sync, overlapping the last micro-batch's backward (gradient-reduce "
            "overlap)",
    "sync": "end-of-step gradient sync after the last backward (no gradient-reduce overlap); exposed",
    "param_sync": "all-gather of the updated parameters, bucket by bucket under the next step's "
                  "first forward (parameter-gather overlap)",
    "after_step": "all-gather of the updated parameters after the optimizer step (no "
                  "parameter-gather overlap); exposed",
    "after_sync": "after the data-parallel sync, before the optimizer (Megatron "
                  "`finalize_model_grads`); exposed",
    "pipeline": "stage-boundary sends; the schedule decides how many sit on the critical path",
    "host": "the updated parameter shard copied up after the CPU optimizer step (optimizer "
            "offload), once per step; exposed",
}
"""Phase of a collective -> what it overlaps with (how `step_time` prices it)."""
PER_MICROBATCH = ("microbatch", "microbatch_exposed")
"""Model-state phases whose records run once per micro-batch."""


@dataclass(frozen=True, kw_only=True)
class Collective:
    """One kind of collective a device takes part in during one step (or, from
    `layer_collectives`, one layer's micro-batch)."""

    axis: str
    """Reporting axis: dp, edp, tp, pp, cp, ep or host."""
    kind: str
    """One of KINDS."""
    count: int
    """Calls per step (per layer and micro-batch from `layer_collectives`)."""
    message_bytes: float
    """M of one call (see module docstring)."""
    group_size: int
    """Devices in the group n."""
    axes: tuple[str, ...] = ()
    """Mesh axes the group spans (for placing it in the cluster hierarchy)."""
    label: str = ""
    """What it moves (e.g. `gradients.dense`, `tp.layers`)."""
    phase: str = "step"
    """Where it sits in the step, one of PHASES."""

    @property
    def bytes_per_device(self) -> float:
        """Bytes one device sends in one call (ring convention)."""
        return ring_bytes(self.kind, self.message_bytes, self.group_size)

    @property
    def total_bytes_per_device(self) -> float:
        """Bytes one device sends per step: count × bytes_per_device."""
        return self.count * self.bytes_per_device

    @cached_property
    def key(self) -> tuple:
        """What one call of the collective is, besides its message: records with equal keys over the
        same local data are one collective (one bucketed reduction, one latency)."""
        return (self.phase, self.kind, self.axes, self.group_size, self.count, self.axis)


def ring_bytes(kind: str, message_bytes: float, n: int) -> float:
    """Bytes a device sends for one collective of `kind` over `n` devices (ring)."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n * message_bytes
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * message_bytes
    return float(message_bytes)


# ---------------------------------------------------------------- model states


def state_collectives(layout: Layout, elements: Mapping[str, float], *, vocab: float = 0.0) -> list[Collective]:
    """Per-step gradient / parameter / offload collectives of a device holding `elements` local
    parameter elements of each group (GROUPS; after the tp / ep / etp split, before any batch-axis
    sharding), plus the tp all-reduce of the replicated group's gradients under SP (Megatron
    `_allreduce_non_tensor_model_parallel_grads`, run by `finalize_model_grads` after the DP sync:
    NVIDIA/Megatron-LM@d98e8a6 megatron/core/distributed/finalize_model_grads.py l. 640-661).

    Messages are linear in `elements`, so the records of a stage are the sums of its layers' and
    fixed parts' records with the same `Collective.key` (Megatron buckets dense and replicated
    gradients in one buffer; experts in another over the expert-data-parallel group:
    megatron/core/distributed/distributed_data_parallel.py l. 282-289).

    `vocab`: how many of the dense elements are the vocabulary (embedding / LM head,
    `fixed_vocab_elements`): not Transformer Engine linears, so their parameter gathers move
    `StateBytes.parameter_gather` where the linear weights move `linear_gather` (fp8 under
    Megatron-LM's fp8 parameter gather).
    """
    out, m = [], max(1, layout.num_microbatches)
    sb = state_bytes(layout)
    extra = vocab * (sb.parameter_gather - sb.linear_gather)
    for g, c in unit_state_collectives(layout):
        n = elements.get(g, 0.0)
        if n or c.axis == "host":   # offload copies are listed (empty) even for an empty group
            count = c.count * m if c.phase in PER_MICROBATCH else c.count
            message = c.message_bytes * n
            if extra and g == "dense" and c.axis != "host" and c.label.startswith("parameters."):
                message += extra
            out.append(replace(c, message_bytes=message, count=count))
    rep = elements.get("replicated", 0.0)
    if rep and _sequence_parallel(layout):
        out.append(Collective(axis="tp", kind="all_reduce", count=1, group_size=layout.tp, axes=("tp",),
                              message_bytes=rep * state_bytes(layout).gradient_reduce,
                              label="gradients.norms_under_sp", phase="after_sync"))
    return out


def unit_state_collectives(layout: Layout) -> tuple[tuple[str, Collective], ...]:
    """(group, record) of the data-parallel and offload records of `state_collectives` for one
    element of every group and one micro-batch: they are linear in each group's elements, phase
    microbatch ones run m times, and per group they read only its batch axes' degrees, the ZeRO
    stage and offload targets that set its modes there (`strategies.data_parallel`, `zero`,
    `offload`) and the bytes per element."""
    ov = overlap.resolve(layout)
    once, again = fsdp_syncs_once_per_step(layout), fsdp_regathers_every_microbatch(layout)
    rep, common = layout.dp_replicate_degree, (layout.zero_stage, layout.offload, *state_key(layout),
                                                ov.overlap_grad_reduce, ov.overlap_param_gather, once, again)
    # the groups' batch-axis degrees (`strategies.group_degrees`): dense and replicated run over
    # dp_replicate x dp_shard x cp, experts over dp_replicate x edp
    dense = (rep, layout.dp_shard_degree, layout.cp) + common
    expert = (rep, layout.expert_dp) + common
    whole = _UNITS.get(dense + expert)
    if whole is None:
        if len(_UNITS) >= 4096:
            _UNITS.clear()
        out = []
        for g, key in (("dense", dense), ("replicated", dense), ("expert", expert)):
            hit = _UNITS.get((g,) + key)
            if hit is None:
                hit = _UNITS[(g,) + key] = tuple(_group_collectives(
                    g, placement_for(layout).groups[g], 1.0, 1, state_bytes(layout), ov, once, again))
            out += [(g, c) for c in hit]
        whole = _UNITS[dense + expert] = tuple(out)
    return whole


_UNITS: dict[tuple, tuple] = {}
"""Cache of `unit_state_collectives` (a search asks for the same few batch-axis placements)."""


def _sequence_parallel(layout: Layout) -> bool:
    """Activations sharded over tp (SP): the knob `strategies.tensor_parallel` turns into the tp
    mode of the activations (read here without building the placement, which costs more than the
    records)."""
    return layout.tp > 1 and bool(layout.sequence_parallel)


REUSE_DISTANCE_ELEMENTS = 1_000_000_000
"""DeepSpeed ZeRO-3 keeps a gathered parameter instead of releasing it when its module is used again
within this many parameter elements of the recorded module trace (`stage3_max_reuse_distance`
default 1e9: deepspeedai/DeepSpeed@edaa722 deepspeed/runtime/zero/config.py l. 244;
partitioned_param_coordinator.py `__params_to_release` l. 634-664)."""


def regather_fraction(layout: Layout, layer_elements: float) -> float:
    """Share of a fully recomputed layer's parameters (`layer_elements` local elements, as ZeRO-3
    counts them after the tp / ep split) gathered a third time in a micro-batch, for its backward
    after the recompute forward's own gather.

    - torchtitan (FSDP2): 0. The recompute runs inside the block's backward, after the pre-backward
      hook has unsharded it; FSDP2's pre-forward hook skips the unshard in that state
      (pytorch torch/distributed/fsdp/_fully_shard/_fsdp_state.py `_pre_forward`: "When composing
      with module-hook-based activation checkpointing, the pre-backward hook is responsible for
      the unshard").
    - deepspeed: after the recompute forward of a submodule, the trace runs the rest of the
      layer's recompute and then its backward back to that submodule, i.e. twice the parameters
      after it; ZeRO-3 releases it (and gathers it again for backward) only when that exceeds
      REUSE_DISTANCE_ELEMENTS. With the layer's parameters spread evenly along it, the share
      released is max(0, P - REUSE_DISTANCE_ELEMENTS / 2) / P.
    - megatron (its FSDP): 1, a full re-gather (not checked against Megatron-FSDP's source).
    """
    if layout.framework == "torchtitan" or layer_elements <= 0:
        return 0.0
    if layout.framework == "deepspeed":
        return max(0.0, layer_elements - REUSE_DISTANCE_ELEMENTS / 2) / layer_elements
    return 1.0


def recompute_collectives(layout: Layout, elements: Mapping[str, float]) -> list[Collective]:
    """Per-step ZeRO-3 re-gather of one fully recomputed layer holding `elements` (as in
    `state_collectives`): the `regather_fraction` of its parameters is gathered once more every
    micro-batch (ZeRO/FSDP gather module by module: Rajbhandari et al. 2020 §7.2.2; Zhao et al. 2023
    (PyTorch FSDP) §3.3)."""
    share = regather_fraction(layout, sum(elements.values()))
    if not share:
        return []
    placement, sb = placement_for(layout), state_bytes(layout)
    m = max(1, layout.num_microbatches)
    out = []
    for g in GROUPS:
        gp, n = placement.groups[g], elements.get(g, 0.0)
        gath = [a for a in _BATCH if gp.degrees.get(a, 1) > 1
                and gp.mode(State.PARAMETERS, a) == Mode.SHARDED_WITH_GATHER]
        if gath and n:
            out.append(Collective(axis="edp" if g == "expert" else "dp", kind="all_gather", count=m,
                                  message_bytes=share * n * (sb.parameter_gather if g == "replicated"
                                                             else sb.linear_gather),
                                  group_size=math.prod(gp.degrees[a] for a in gath), axes=tuple(gath),
                                  label=f"parameters.regather.{g}", phase="recompute"))
    return out


def fsdp_syncs_once_per_step(layout: Layout) -> bool:
    """torchtitan with pipeline parallelism: FSDP2 gathers each stage's parameters once per step
    and reduce-scatters its gradients once, after the last micro-batch's backward.

    torchtitan resolves its default reshard-after-forward policy to `not pp_enabled`
    (pytorch/torchtitan@b5bcd76 torchtitan/distributed/fsdp.py l. 112-137
    `get_fsdp_reshard_after_forward_policy`: "For PP, by default do not reshard after forward to
    avoid per-microbatch all-gathers"), and torch.distributed.pipelining's
    `PipelineStage.backward_maybe_with_nosync` sets `set_reshard_after_backward(False)` and
    `set_requires_gradient_sync(False)` on every backward but the last, so the unsharded parameters
    stay from the first forward to the last backward and the gradients accumulate unsharded
    (the memory side: `cost.memory._torchtitan_pp_accumulation`, `fsdp_stage_blocks`). FSDP
    gradient sharding with PP outside torchtitan (`cost.memory.fsdp_gradient_sharding_with_pp`,
    Meta's Llama 3 stack) reduce-scatters once per step too: gradients accumulated in fp32 over the
    micro-batches, then reduce-scattered (Dubey et al. 2024 §3.3.4)."""
    return (layout.framework == "torchtitan" and layout.pp > 1) or fsdp_gradient_sharding_with_pp(layout)


def fsdp_regathers_every_microbatch(layout: Layout) -> bool:
    """torchtitan without `fsdp_syncs_once_per_step`: FSDP2 reshards every unit's parameters after
    each micro-batch's backward, so a ZeRO-2 layout (parameters kept gathered from forward to
    backward, `frameworks.torchtitan.RESHARD_NEVER`) gathers them again in the next micro-batch's
    forward: one all-gather per micro-batch, not one per step as a sharded optimizer's update
    gather. FSDP2's `reshard_after_backward` defaults to True ("only useful for gradient
    accumulation": pytorch/pytorch@002a76f torch/distributed/fsdp/_fully_shard/
    _fsdp_param_group.py `FSDPParamGroup.__init__`) and torchtitan turns it off only for the
    chunked loss's output layer (pytorch/torchtitan@b5bcd76 torchtitan/components/loss.py
    l. 664-705), not across micro-batches."""
    return layout.framework == "torchtitan" and not fsdp_syncs_once_per_step(layout)


def _group_collectives(group: str, gp, elems: float, m: int, sb, ov: overlap.Overlaps,
                       once: bool = False, again: bool = False) -> list[Collective]:
    """Gradient / parameter / offload collectives of one parameter group (the table above), in the
    phase the overlaps `ov` put them: gradient reductions overlap backward (phase step, or
    microbatch when reduced every micro-batch) only with `overlap_grad_reduce`, else they run after
    it (sync, microbatch_exposed); ZeRO-3 gathers overlap compute only with `overlap_param_gather`
    (prefetch), else microbatch_exposed; the once-per-step gather of updated parameters overlaps the
    next step's first forward with it (param_sync), else runs after the optimizer (after_step).
    `once` (`fsdp_syncs_once_per_step`): the sharded gradients are reduce-scattered once (phase
    step / sync) and the ZeRO-3 parameters gathered once per step (phase param_sync / after_step).
    `again` (`fsdp_regathers_every_microbatch`): sharded gradients with unsharded parameters (ZeRO-2)
    gather the parameters every micro-batch (phase microbatch, as ZeRO-3's gathers)."""
    batch = [a for a in _BATCH if gp.degrees.get(a, 1) > 1]
    if not batch or elems == 0:
        return _offload(group, gp, elems, m, sb, ov, per_microbatch=False)
    grad_sh = [a for a in batch if gp.mode(State.GRADIENTS, a) in (Mode.SHARDED,)]
    opt_sh = [a for a in batch if gp.mode(State.OPTIMIZER_STATES, a) == Mode.SHARDED]
    gath = [a for a in batch if gp.mode(State.PARAMETERS, a) == Mode.SHARDED_WITH_GATHER]
    owner = grad_sh or opt_sh
    rep = [a for a in batch if a not in owner]
    deg = lambda axes: math.prod(gp.degrees[a] for a in axes)  # noqa: E731
    axis = "edp" if group == "expert" else "dp"
    grads = elems * sb.gradient_reduce
    params = elems * (sb.parameter_gather if group == "replicated" else sb.linear_gather)
    out: list[Collective] = []

    def add(kind, count, message, axes, label, phase):
        out.append(Collective(axis=axis, kind=kind, count=count, message_bytes=message,
                              group_size=deg(axes), axes=tuple(axes), label=f"{label}.{group}",
                              phase=phase))

    if grad_sh and not once:
        grad_phase = "microbatch" if ov.overlap_grad_reduce else "microbatch_exposed"
    else:
        grad_phase = "step" if ov.overlap_grad_reduce else "sync"
    per_mb = m if grad_sh and not once else 1
    if owner:
        add("reduce_scatter", per_mb, grads, owner, "gradients", grad_phase)
    if rep:
        add("all_reduce", per_mb, grads / deg(owner) if owner else grads, rep, "gradients", grad_phase)
    if gath and once:
        add("all_gather", 1, params, gath, "parameters.gather",
            "param_sync" if ov.overlap_param_gather else "after_step")
    elif gath:
        add("all_gather", 2 * m, params, gath, "parameters.gather",
            "microbatch" if ov.overlap_param_gather else "microbatch_exposed")
    elif grad_sh and again:
        add("all_gather", m, params, owner, "parameters.gather",
            "microbatch" if ov.overlap_param_gather else "microbatch_exposed")
    elif owner:
        add("all_gather", 1, params, owner, "parameters.update",
            "param_sync" if ov.overlap_param_gather else "after_step")
    return out + _offload(group, gp, elems / deg(owner) if owner else elems, m, sb, ov,
                          per_microbatch=bool(grad_sh) and not once)


OFFLOAD_MASTER_GRADIENT_BYTES = 4
"""Bytes per element of the gradient shard DeepSpeed copies to host memory for the CPU optimizer
at the accumulation boundary: fp32, its `master_weights_and_grads_dtype` default (the 16-bit
gradient is cast on the GPU, then copied: `async_inplace_copy_grad_to_fp32_buffer_from_gpu`,
deepspeed/runtime/zero/stage_1_and_2.py l. 1590-1605; ZeRO-3 `_offload_grad_partition_at_boundary`,
stage3.py l. 1393-1407; deepspeedai/DeepSpeed@edaa722)."""


def _offload(group: str, gp, local: float, m: int, sb, ov: overlap.Overlaps, *,
             per_microbatch: bool) -> list[Collective]:
    """Host<->device traffic of offloaded model states, as DeepSpeed's ZeRO-Offload runs it
    (deepspeedai/DeepSpeed@edaa722; ZeRO-Offload, Ren et al. 2021 §4.1: gradients down, updated
    parameters up):

    - at the accumulation boundary the rank's gradient shard goes down in fp32
      (`OFFLOAD_MASTER_GRADIENT_BYTES`), on the stream of the gradient reduction that produced it
      (stage_1_and_2.py `copy_grads_in_partition` l. 1650-1668 under `reduce_ipg_grads`, stage3.py
      `partition_grads` l. 1886-1933): in the gradient-sync phase, overlapping the last backward with
      DeepSpeed's communication overlap (`overlap.resolve` overlap_grad_reduce; on by default only
      at ZeRO-3: zero/config.py l. 383-386), else after it;
    - with gradients reduce-scattered every micro-batch (ZeRO-2/3) the shard is accumulated in host
      memory: every micro-batch moves the 16-bit partial sum down and back up (ZeRO-3 keeps its
      gradient accumulator in pinned host memory and adds on the GPU: stage3.py l. 1902-1919;
      ZeRO-1/2 `async_accumulate_grad_in_cpu_via_gpu`, stage_1_and_2.py l. 1516-1557, which moves
      m copies down and m - 1 up and none at m = 1 -- charged one pair per micro-batch like ZeRO-3,
      one or two 16-bit copies per step more than ZeRO-2 makes);
    - after the CPU optimizer step the updated 16-bit shard goes up (stage_1_and_2.py
      l. 2321-2341), exposed before the parameter all-gather (phase host) -- unless the parameters
      are offloaded too (ZeRO-Infinity), where the CPU step writes them in host memory;
    - offloaded parameters are fetched for each forward and backward (ZeRO-3 parameter offload).
    Copies run at the host link's bandwidth from pinned buffers (`pin_memory` defaults True:
    zero/offload_config.py l. 45, 75). Their phases add them to the same sums as the data-parallel
    collectives of that phase: DeepSpeed issues them on the reduction's stream after the reduction
    (serialized with it), and on PCIe nodes a GPU's network traffic (GPUDirect RDMA) crosses the
    same x16 link."""
    out = []
    if gp.offloaded(State.OPTIMIZER_STATES):
        sync = "step" if ov.overlap_grad_reduce else "sync"
        if per_microbatch:
            each = "microbatch" if ov.overlap_grad_reduce else "microbatch_exposed"
            out += [Collective(axis="host", kind=kind, count=1, group_size=1, phase=each,
                               message_bytes=local * sb.compute, label=f"gradients.accumulate.{group}")
                    for kind in ("device_to_host", "host_to_device")]
        out.append(Collective(axis="host", kind="device_to_host", count=1, group_size=1, phase=sync,
                              message_bytes=local * OFFLOAD_MASTER_GRADIENT_BYTES,
                              label=f"gradients.{group}"))
        if not gp.offloaded(State.PARAMETERS):
            out.append(Collective(axis="host", kind="host_to_device", count=1, group_size=1, phase="host",
                                  message_bytes=local * sb.parameter_gather, label=f"parameters.{group}"))
    if gp.offloaded(State.PARAMETERS):
        out.append(Collective(axis="host", kind="host_to_device", count=2 * m, group_size=1,
                              message_bytes=local * sb.parameter_gather, phase="microbatch",
                              label=f"parameters.fetch.{group}"))
    return out


def local_elements(layout: Layout, elements: Mapping[str, float]) -> dict[str, float]:
    """Per group, elements left after the model-parallel (non-batch) shards tp / ep / etp."""
    placement = placement_for(layout)
    out = {}
    for g in GROUPS:
        gp = placement.groups[g]
        axes = [a for a in gp.shard_axes(State.PARAMETERS) if a not in _BATCH]
        out[g] = elements.get(g, 0) / math.prod(gp.degrees[a] for a in axes)
    return out


def layer_elements(model: ModelSpec, layout: Layout, index: int) -> dict[str, float]:
    """Local parameter elements of decoder layer `index` per group (`local_elements`)."""
    lp = count_params(model).layers[index]
    return local_elements(layout, {"dense": lp.attention + lp.dense_mlp + lp.shared_experts,
                                   "replicated": lp.norms + lp.router, "expert": lp.routed_experts})


def fixed_vocab_elements(model: ModelSpec, layout: Layout, stage: int) -> float:
    """Local elements of `stage`'s vocabulary matrices (the embedding on the first stage, the LM
    head on the last), part of `fixed_elements`' dense group (`state_collectives` `vocab`)."""
    rows = padded_vocab(model, layout) * model.embedding_width * _vocab_units(model, layout, stage)
    return local_elements(layout, {"dense": rows})["dense"]


def fixed_elements(model: ModelSpec, layout: Layout, stage: int) -> dict[str, float]:
    """Local parameter elements of `stage` outside its decoder layers (embedding on the first stage,
    final norm and LM head on the last, the tied embedding's copy there under PP; vocab padded as
    the framework pads it, `precision.padded_vocab`)."""
    return local_elements(layout, _group_counts(model, count_params(model), layout, (), stage))


# ---------------------------------------------------------------- activations


def layer_collectives(model: ModelSpec, layout: Layout, index: int,
                      ep_gpus_per_domain: int | None = None) -> list[Collective]:
    """TP, CP and EP collectives of decoder layer `index` for one micro-batch; counts are per
    forward pass (phase forward / attention.forward: twice under full recompute) or per backward.

    TP: 2 all-reduces (SP: 2 all-gathers + 2 reduce-scatters, same bytes and time) of the b·s/cp·h
    activations per pass. CP: ring attention passes the local K/V around the cp ranks (cp − 1 sends
    of the local chunk, the bytes of a ring all-gather of the sequence's K/V) forward, and K/V
    again plus the dK/dV accumulation ring (a reduce-scatter) backward, under the attention core
    (Megatron / Transformer Engine `cp_comm_type` "p2p"). EP: dispatch + combine all-to-all of the
    routed tokens, b·s/cp (/tp with SP, which Megatron requires for MoE with TP in training:
    NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/moe/moe_layer.py l. 636) x top-k x h
    with the alltoall dispatcher; with flex (DeepEP / HybridEP) the deduplicated copies of
    `_flex_dispatch`, which need `ep_gpus_per_domain` (GPUs of one EP group per scale-up domain,
    `ep_gpus_per_domain()`; None: the whole group in one domain).
    """
    moe = bool(layout.ep > 1 and model.is_moe and model.moe_layers[index])
    k = min(layout.ep, ep_gpus_per_domain or layout.ep)
    key = (id(model), moe, layout.micro_batch_size, layout.seq_len, layout.cp, layout.tp, layout.ep,
           layout.sequence_parallel, layout.cp_comm_type, layout.framework, layout.moe_dispatcher,
           k if layout.moe_dispatcher == "flex" else None)   # what the records read
    hit = _LAYER_RECORDS.get(key)
    if hit is None or hit[0] is not model:
        if len(_LAYER_RECORDS) >= 4096:
            _LAYER_RECORDS.clear()
        hit = _LAYER_RECORDS[key] = (model, tuple(_layer_collectives(model, layout, moe, k)))
    return list(hit[1])


_LAYER_RECORDS: dict = {}
"""Cache of `layer_collectives` (each entry keeps its model alive, so ids are not reused)."""


def _layer_collectives(model: ModelSpec, layout: Layout, moe: bool, ep_k: int) -> list[Collective]:
    b, h = layout.micro_batch_size, model.hidden_size
    tokens = b * layout.seq_len // layout.cp
    act = tokens * h * 2
    sp = _sequence_parallel(layout)
    out = []
    if layout.tp > 1:
        for kind in (("all_gather", "reduce_scatter") if sp else ("all_reduce",)):
            for phase in ("forward", "backward"):
                out.append(Collective(axis="tp", kind=kind, count=2, message_bytes=act,
                                      group_size=layout.tp, axes=("tp",), label="tp.layers", phase=phase))
    if layout.cp > 1 and layout.cp_comm_type == "a2a":
        out += _cp_all_to_all(model, layout, tokens)
    elif layout.cp > 1:
        _, repeated, dkv_bytes = BY_NAME[layout.framework].cp_ring_exchange()
        kv = _kv_bytes_per_token(model, layout.tp, repeated) * tokens * layout.cp
        cp = dict(axis="cp", count=1, group_size=layout.cp, axes=("cp",))
        out += [Collective(kind="all_gather", label="cp.kv.forward", phase="attention.forward",
                           message_bytes=kv, **cp),
                Collective(kind="all_gather", label="cp.kv.backward", phase="attention.backward",
                           message_bytes=kv, **cp),
                Collective(kind="reduce_scatter", label="cp.dkv.backward", phase="attention.backward",
                           message_bytes=kv * dkv_bytes // 2, **cp)]
    if moe and layout.moe_dispatcher == "flex":
        out += _flex_dispatch(model, layout, tokens // (layout.tp if sp else 1) * h * 2, ep_k)
    elif moe:
        routed = tokens // (layout.tp if sp else 1) * model.num_experts_per_tok * h * 2
        for phase in ("forward", "backward"):
            out.append(Collective(axis="ep", kind="all_to_all", count=2, message_bytes=routed,
                                  group_size=layout.ep, axes=("ep",), label="ep.dispatch_combine",
                                  phase=phase))
    return out


FLEX_NETWORK, FLEX_NVLINK = "ep.flex.network", "ep.flex.nvlink"
"""Labels of the two parts of a flex (DeepEP / HybridEP) dispatch or combine (`_flex_dispatch`):
the inter-node part over the NICs and the intra-node fan-out over NVLink."""


def expected_distinct_bins(bins: int, experts: int, top_k: int) -> float:
    """Expected number of the `bins` equal bins (EP ranks, or the nodes they sit on) holding at
    least one of a token's `top_k` experts, the experts chosen uniformly without repeats from
    `experts` spread evenly over the bins.

    A given bin holds e = experts / bins of them and is missed with probability
    C(experts - e, top_k) / C(experts, top_k) = prod_{i < top_k} (experts - e - i) / (experts - i)
    (hypergeometric; the product is used as is when e is not whole), so
    E[distinct] = bins (1 - that). For many experts per bin it tends to the occupancy formula
    bins (1 - (1 - 1/bins)^top_k) of `cost.serving.expected_distinct_experts` (Feller, An
    Introduction to Probability Theory, Vol. 1, II.11), which assumes independent draws. Routing
    is taken as uniform (balanced by the auxiliary loss, or forced uniform by the benchmark
    recipes' `moe_router_force_load_balancing`); group-limited routing narrows the draw first
    (`routed_bins`).

    Raises:
        ValueError: bins or top_k < 1, or top_k > experts.
    """
    if bins < 1 or top_k < 1 or top_k > experts:
        raise ValueError(f"{experts} experts over {bins} bins with top-{top_k}")
    outside = experts - experts / bins
    miss = math.prod(max(0.0, outside - i) / (experts - i) for i in range(top_k))
    return bins * (1 - miss)


def balanced_routing_note(model: ModelSpec) -> str | None:
    """For an MoE model, the line plan / explain print under their step times: the expert load is
    taken as balanced (`expected_distinct_bins`, the routed-expert GEMMs at tokens x top_k / experts
    each), and what imbalance does; None for a dense model.

    Why it matters: the published runs the MoE costs are checked against force that balance --
    Megatron-Bridge@067f987 src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py l. 39, 79,
    147, 200 and gpt_oss/h100/gpt_oss.py l. 30, 66 set `moe_router_force_load_balancing`, which
    replaces the router's logits with random ones (Megatron-LM@d98e8a6
    megatron/core/transformer/moe/router.py l. 861-863 `apply_random_logits`). A trained router is
    not uniform (early in training, or with aux-loss-free balancing, DeepSeek-V3 technical report
    arXiv 2412.19437 §2.1.2). Mechanism of the slowdown: each MoE layer's combine all-to-all waits for
    every EP rank, so the rank holding f times the mean routed tokens (f = busiest / mean) sets
    the layer: its expert GEMMs do f times the work and it receives f times the dispatch bytes."""
    if not model.is_moe:
        return None
    return ("expert load taken as balanced (every expert gets tokens x top_k / experts, as NVIDIA's "
            "benchmark recipes force with random router logits, Megatron-Bridge perf_recipes "
            "qwen3_moe.py / gpt_oss.py); a trained router's imbalance f (busiest EP rank's tokens / the "
            "mean) stretches the routed-expert GEMMs and the all-to-all by about f, so the MoE step "
            "times here are a lower bound")


def routed_bins(model: ModelSpec, bins: int) -> tuple[int, int]:
    """(bins, experts) a token's top-k experts are drawn from, of `bins` equal bins holding the
    model's experts in order (EP rank r holds experts r E/ep ...; a node holds its ranks'):
    with group-limited routing (`ModelSpec.n_group` groups of consecutive experts, `topk_group` of
    them chosen per token) and each group filling bins / n_group whole bins, the chosen groups'
    bins and experts; otherwise all of them (uniform routing; groups that split a bin are not
    narrowed: the chosen groups' bins would be a random count). Source: Megatron-LM@d98e8a6
    megatron/core/transformer/moe/moe_utils.py `group_limited_topk` (scores viewed as
    [tokens, num_groups, experts / num_groups], the group_topk best groups masked in) via
    router.py `topk_routing_with_score_function` (l. 779-784), which the random logits of
    `moe_router_force_load_balancing` (l. 861-863) pass through too; DeepSeek-V3 technical report
    (arXiv 2412.19437) §2.1.2 node-limited routing (each token to at most M = 4 nodes)."""
    groups, chosen = model.n_group, model.topk_group
    if groups > 1 and 0 < chosen < groups and bins % groups == 0:
        return bins * chosen // groups, model.num_experts * chosen // groups
    return bins, model.num_experts


def _flex_dispatch(model: ModelSpec, layout: Layout, token_bytes: int, k: int) -> list[Collective]:
    """Dispatch + combine of Megatron's flex dispatcher (DeepEP / HybridEP), forward and backward,
    for the local tokens (`token_bytes` = tokens x h x 2 B, bf16) of one layer: a token goes once to
    each destination NODE over the network (RDMA, to the GPU of the same local index) and is
    fanned out there over NVLink to each GPU holding one of its experts, instead of one copy per
    routed expert (DeepSeek-V3 technical report, arXiv 2412.19437 §3.2.2: "transmitted via IB to the
    GPUs with the same in-node index on their target nodes ... forwarded via NVLink"; deepseek-ai/
    DeepEP README "asymmetric-domain bandwidth forwarding, such as forwarding data from NVLink
    domain to RDMA domain"; Megatron `MoEFlexTokenDispatcher` -> fused_a2a.py `fused_dispatch`
    (DeepEP `Buffer.dispatch` with `num_tokens_per_rdma_rank`, `is_token_in_rank`) and
    `hybrid_ep_dispatch`, NVIDIA/Megatron-LM@d98e8a6). Both send bf16: HybridEP asserts no fp8
    dispatch (fused_a2a.py l. 327, 402) and `fused_dispatch` passes the bf16 activations as they are.

    With the EP group of G = ep GPUs over N nodes of k (`ep_gpus_per_domain`) and D_n, D_g the
    expected distinct nodes / GPUs a token's experts sit on (`expected_distinct_bins` over the
    bins group-limited routing leaves, `routed_bins`), one GPU
    sends per token (N - 1)/N x D_n copies over the network (its own node's share stays local) and
    (G - N)/G x D_g over NVLink (every GPU hit but the one the token arrives at, once per node).
    In the all-to-all convention (message incl. the own slice, bytes sent (n-1)/n M) that is an
    all-to-all over the N nodes' same-index GPUs of message token_bytes x D_n and one over the k
    GPUs of a node of message token_bytes x D_g; the two run at once in one kernel, so
    `step_time` prices a phase's flex records as the slower of the two. Combine sends the same
    bytes back; backward runs both again.

    Checked against published kernel times (tests/test_moe_dispatcher.py): HybridEP's H100 table
    (deepseek-ai/DeepEP branch hybrid-ep @94a9f8f docs/README_Hybrid-EP.md l. 51-77, kernel only,
    8 SMs, 4,096 tokens x 7,168, top-8, uniform routing) on 2 / 4 / 8 nodes: this price is 0.91 /
    0.97 / 1.05 of its dispatch and 0.81 / 1.00 / 1.06 of its combine. Those benchmarks, like
    DeepEP's ("the results are logical bandwidth ... contains local rank traffic", DeepEP README
    @dd758ca l. 53), divide all D_n copies by the time, so their 77 / 55 / 51 GB/s are 38 / 41 /
    44 GB/s of network bytes per GPU: the network rate is flat in the nodes spanned, the bytes grow
    as D_n (N-1)/N; HybridEP's design overlaps the two parts (docs/Hybrid-EP_Implementation.md
    l. 464), as the max here does. The residual: on 2 nodes the published rate is ~15% under the
    model's, so the model's growth from 2 to 8 nodes is 1.15x (dispatch) to 1.32x (combine)
    steeper than HybridEP's. DeepEP V1 on H800 (docs/legacy.md, EP 16: 43 GB/s logical) is bound
    by that GPU's ~160 GB/s NVLink, not the network."""
    g, top_k = layout.ep, model.num_experts_per_tok
    nodes = -(-g // k)
    parts = []
    if nodes > 1:
        parts.append((FLEX_NETWORK, nodes, token_bytes * expected_distinct_bins(
            *routed_bins(model, nodes), top_k)))
    if k > 1:
        parts.append((FLEX_NVLINK, k, token_bytes * expected_distinct_bins(*routed_bins(model, g), top_k)))
    return [Collective(axis="ep", kind="all_to_all", count=2, message_bytes=message, group_size=n,
                       axes=("ep",), label=label, phase=phase)
            for phase in ("forward", "backward") for label, n, message in parts]


def ep_gpus_per_domain(layout: Layout, domain_gpus: int,
                       order: tuple[str, ...] | list[str] = DEFAULT_RANK_ORDER) -> int:
    """GPUs of an EP group per scale-up domain: EP is carved from the dense tp*cp*dp ranks
    (innermost first), after expert-tp when tp is inside ep in `order`.

    Source: Megatron-LM parallel_state expert groups (ep inside the dp*cp*tp ranks, after etp);
    the arithmetic is the mesh's (`Mesh.ep_sharing`)."""
    return layout.mesh.ep_sharing(domain_gpus, tuple(order))


def _cp_all_to_all(model: ModelSpec, layout: Layout, tokens: int) -> list[Collective]:
    """All-to-all context parallelism (DeepSpeed-Ulysses, Megatron's cp_comm_type a2a): before
    the attention core the local tokens' Q, K and V are exchanged so each cp rank holds the whole
    sequence for 1/cp of its heads, after it the output goes back; backward exchanges dO and then
    dQ, dK, dV the same way (NVIDIA/TransformerEngine@d0067d0 `context_parallel.py`
    AttnFuncWithCPAndQKVOA2A: `flash_attn_a2a_communicate` l. 4339, 4485, 4677, 4837). Each is one
    all-to-all over cp of the local tokens' tensors on this tp rank (bf16), on the critical path:
    phase forward / backward (exposed). Sizes: Q and O a x d_head / tp, K and V kv heads (at least
    one per tp rank) x d_head each."""
    q = model.num_attention_heads // layout.tp * (
        model.qk_nope_head_dim + model.qk_rope_head_dim if model.is_mla else model.head_dim)
    o = model.num_attention_heads // layout.tp * (model.v_head_dim if model.is_mla else model.head_dim)
    kv = _kv_bytes_per_token(model, layout.tp) // 2   # K and V elements per token
    qkv, out = tokens * (q + kv) * 2, tokens * o * 2
    common = dict(axis="cp", kind="all_to_all", count=1, group_size=layout.cp, axes=("cp",))
    return [Collective(message_bytes=qkv, label="cp.a2a.qkv", phase="forward", **common),
            Collective(message_bytes=out, label="cp.a2a.out", phase="forward", **common),
            Collective(message_bytes=out, label="cp.a2a.dout", phase="backward", **common),
            Collective(message_bytes=qkv, label="cp.a2a.dqkv", phase="backward", **common)]


def _kv_bytes_per_token(model: ModelSpec, tp: int, repeated: bool = False) -> int:
    """K and V bytes per token on one TP rank (bf16); KV heads replicate when tp > n_kv, and are
    the query heads when the framework expands them before attention (`repeated`:
    `frameworks.<framework>.cp_ring_exchange`); MLA ships the up-projected per-head K (nope + rope)
    and V."""
    if model.is_mla:
        a = model.num_attention_heads // tp
        return a * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim) * 2
    heads = -(-(model.num_attention_heads if repeated else model.num_key_value_heads) // tp)
    return 2 * heads * model.head_dim * 2


def stage_collectives(model: ModelSpec, layout: Layout, stage: int) -> list[Collective]:
    """Per-step collectives of `stage` that are neither in-layer nor per parameter element: the
    pipeline sends (one activation forward and one gradient backward per micro-batch per virtual
    stage, s/cp (/tp with SP) x b x h: NVIDIA/Megatron-LM@d98e8a6
    megatron/core/pipeline_parallel/schedules.py `get_tensor_shapes` l. 2136-2143) and the tied
    embedding's all-reduce between the first and last stage (`_allreduce_word_embedding_grads`,
    after the DP sync, FC-14)."""
    m, sb, out = max(1, layout.num_microbatches), state_bytes(layout), []
    sp = _sequence_parallel(layout)
    if layout.pp > 1:
        act = layout.micro_batch_size * layout.seq_len // layout.cp * model.hidden_size * 2
        out.append(Collective(axis="pp", kind="p2p", count=2 * m * layout.vpp, group_size=2,
                              message_bytes=act / (layout.tp if sp else 1), axes=("pp",),
                              label="pp.boundary", phase="pipeline"))
    if model.tie_word_embeddings and layout.pp > 1 and stage in (0, layout.pp - 1):
        out.append(Collective(axis="pp", kind="all_reduce", count=1, group_size=2, axes=("pp",),
                              message_bytes=padded_vocab(model, layout) * model.embedding_width
                              / layout.tp * sb.gradient_reduce, label="gradients.tied_embedding",
                              phase="after_sync"))
    return out


# ---------------------------------------------------------------- one stage


def merge(records: list[Collective]) -> list[Collective]:
    """Records with equal key and label summed into one, in first-seen order: model-state records
    add their messages (one bucketed collective over all the local data), in-layer ones (phases
    forward, backward, attention.*, recompute) their counts (one call per layer)."""
    out: dict[tuple, Collective] = {}
    for c in records:
        per_call = c.phase in ("forward", "backward", "attention.forward", "attention.backward",
                               "recompute")
        k = c.key[:4] + (c.axis, c.label) + ((c.message_bytes,) if per_call else (c.count,))
        seen = out.get(k)
        if seen is None:
            out[k] = c
        elif per_call:
            out[k] = replace(seen, count=seen.count + c.count)
        else:
            out[k] = replace(seen, message_bytes=seen.message_bytes + c.message_bytes)
    return list(out.values())


def collectives(model: ModelSpec, layout: Layout, stage: int | None = None,
                recompute_layers: tuple[str, ...] | None = None,
                ep_gpus_per_domain: int | None = None) -> list[Collective]:
    """Every collective one device of `stage` runs per step.

    `stage=None` picks the stage with the most decoder layers (first on ties): the bottleneck for
    in-layer communication. `recompute_layers`: recompute mode per decoder layer (None: the
    layout's); a fully recomputed layer runs its forward collectives twice and, under ZeRO-3,
    gathers its parameters once more. `ep_gpus_per_domain`: as in `layer_collectives` (read by
    the flex dispatcher only).
    """
    split = stage_layers(model, layout)
    if stage is None:
        stage = max(range(layout.pp), key=lambda s: (len(split[s]), -s))
    modes = recompute_layers or (layout.recompute,) * model.num_hidden_layers
    m = max(1, layout.num_microbatches)
    elements = defaultdict(float, fixed_elements(model, layout, stage))
    layer_records, regather = [], []
    for i in split[stage]:
        for g, n in layer_elements(model, layout, i).items():
            elements[g] += n
        passes = 2 if modes[i] == "full" else 1
        for c in layer_collectives(model, layout, i, ep_gpus_per_domain):
            layer_records.append(replace(c, count=c.count * m * (passes if c.phase in (
                "forward", "attention.forward") else 1)))
        if modes[i] == "full":
            regather += recompute_collectives(layout, layer_elements(model, layout, i))
    return merge(state_collectives(layout, elements, vocab=fixed_vocab_elements(model, layout, stage)) + regather
                 + stage_collectives(model, layout, stage) + layer_records)


def bytes_per_axis(colls: list[Collective]) -> dict[str, float]:
    """Σ total_bytes_per_device per reporting axis."""
    totals: dict[str, float] = defaultdict(float)
    for c in colls:
        totals[c.axis] += c.total_bytes_per_device
    return dict(totals)
