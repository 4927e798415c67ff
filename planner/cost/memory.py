"""Per-device memory of one pipeline stage, every term separate, derived from the placement.

**Memory rule** (docs/architecture.md §2): a state's bytes on one device = its full size on the stage ÷ the
product of the degrees of every axis the placement shards it over (`GroupPlacement.shard_degree`),
0 when it is offloaded, plus the transient working sets its modes imply. Pipeline parallelism shards
by layer: the "full size on the stage" counts only the stage's layers (and the embedding on the first,
the LM head on the last stage). No term branches on a ZeRO stage or strategy name.

Terms (bytes per device):
- parameters, gradients, optimizer_states: per parameter group (dense / replicated / expert) with the
  per-framework bytes of `planner.placement.precision`;
- activations: Σ over the stage's layers of `cost.activations.layer_activation_bytes` × the pipeline
  in-flight factor, + embedding activations (first stage, in flight), + logits and loss (last stage);
- transient: the gather working set of `sharded_with_gather` parameters (Megatron: largest unit ×
  (1 + prefetch); DeepSpeed: the same, capped by its live-parameter window and its per-parameter
  gradient bucketing, `_deepspeed_zero3_terms`; torchtitan: FSDP2's per-phase residency of its root
  and block units,
  `_torchtitan_fsdp_terms`) and the unreduced gradient of a unit, gradient buckets, offload staging buffers, the
  working set of recomputing one layer under full recompute, the loss backward's working set (last
  stage, `activations.loss_working_set_bytes`); the loss-backward and layer-backward terms are
  never alive together, so `transient` is their peak (`transient_peak`), not their sum;
- reserve: CUDA context + NCCL buffers + allocator fragmentation (DEFAULT_RESERVE_BYTES, overridable).

The stage program reads the same terms as an affine function of a stage's layer counts,
`cost.memory_model.StageMemoryModel` (per-layer terms from `layer_groups`, `_per_kind`,
`layer_working_set_bytes`; the stage-level ones from `stage_memory` of a reference stage).

Verdict: `fits` when total ≤ (1 − margin) · capacity, `at_risk` when ≤ capacity, else `does_not_fit`
(FC-04: the same layout peaks 16 GB apart under FSDP1 and FSDP2, so a margin is kept).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from planner.cost import activations as act
from planner.cost.ep_buffers import FLEX_BUFFER_TERM, flex_buffer_bytes
from planner.cost.params_flops import ParamCounts, count_params, layer_tensors
from planner.cost.pipeline import interleaved_chunk_table, interleaved_warmup_chunks
from planner.errors import SpecError
from planner.frameworks import deepspeed as ds
from planner.placement import mtp, pipeline_layout
from planner.placement.layout import Layout
from planner.placement.precision import (StateBytes, fp8_keeps_transpose, fp8_weight_bytes, fused_qkv, loss_chunks, padded_vocab,
                                        state_bytes, state_key, te_fp8)
from planner.placement.states import GROUPS, Mode, Placement, State
from planner.placement.strategies import placement_for, placement_key
from planner.specs.model import ModelSpec, spec_memo

GIB = 2**30

HELD_OUT_ERROR = 0.039
"""Median |error| of the peak-memory model on the evaluation part of the memory suite
(docs/validation.md, `make validate`: n = 6, 3.9%; tests/test_validate_training.py checks the page
says so): how far apart two predicted peaks must be before the model can tell which needs less.
[Empirical] on those rows; `plan.roomier_alternative` reads it."""

DEFAULT_RESERVE_BYTES = 2 * GIB
"""CUDA context, cuBLAS workspaces, NCCL channel buffers and allocator fragmentation, bytes.

[Empirical] The CUDA context alone takes ~0.5 GiB on H100 (PyTorch `torch.cuda.mem_get_info` before
and after `torch.cuda.init()`); NCCL allocates per-communicator buffers (NCCL_BUFFSIZE = 4 MiB per
channel per peer); the caching allocator keeps fragmented blocks (torchtitan reports `reserved` vs
`active` peaks apart by 1-3 GiB in its benchmark tables). 2 GiB is a stated default, overridable.
torchtitan's published peaks are the allocator's `reserved_bytes.all.peak` (torchtitan @9dec370
torchtitan/metrics.py), which excludes the CUDA context; the same default is used for them."""

DEFAULT_AT_RISK_MARGIN = 0.10
"""Fraction of capacity kept as a safety margin before a plan is called `fits` (FC-04)."""

BUCKET_ELEMENTS = {"megatron": 0, "deepspeed": 500_000_000, "torchtitan": 100 * 2**20 // 4}
"""Gradient communication bucket, elements, beyond the gradients themselves.

Source: Megatron-LM `megatron/core/distributed/param_and_grad_buffer.py` — buckets are views of the
contiguous grad buffer (no extra); DeepSpeed `deepspeed/runtime/zero/config.py` `reduce_bucket_size`
default 5e8 elements, or the config's (`Layout.buckets`, `frameworks.deepspeed.bucket`); torchtitan @9dec370 `parallelize_llama.py::apply_ddp` `replicate(model,
bucket_cap_mb=100)` (fp32 grads) when it runs DDP. Under FSDP2 (`apply_fsdp`) there is no bucket:
each unit's gradients are reduce-scattered from one per-unit input, counted in
`_torchtitan_fsdp_terms` (`unreduced_unit_gradient`), which sets this term to 0."""

OPTIMIZER_STEP_COPY_BYTES = 6
"""Bytes per gradient-partition element DeepSpeed ZeRO-1/2 allocates at the optimizer step, per
optimizer param group, one group at a time: the flattened 16-bit copy of the group's averaged
gradients (2 B, `self.flatten(self.averaged_gradients[i])`) and its fp32 conversion (4 B,
`flat_grad_partition.to(fp32)`), both alive at the conversion; the fp32 copy stays through the
group's `_optimizer_step` and is deleted after it. Activations are freed by then, so this is a
phase of its own (`transient_peak`). Not with the optimizer offloaded (the copy lives in host
memory) nor under ZeRO-3 (stage3.py keeps per-sub-group fp32 gradients instead). Source:
DeepSpeed `deepspeed/runtime/zero/stage_1_and_2.py` `step()` (@edaa722, 2026-08-22); bf16 with
the default grad_accum_dtype runs this optimizer (`engine.py` `_do_optimizer_sanity_check`:
BF16_Optimizer only when grads accumulate in fp32)."""

OPTIMIZER_STEP_TERM = "optimizer_step_gradient_copy"
"""`transient_terms` key of the optimizer step's gradient copy: DeepSpeed's
`OPTIMIZER_STEP_COPY_BYTES` x the largest param group's partition, Megatron-LM's
`StateBytes.step_gradient_copy` (`optimizer_step_copy_bytes`)."""

OFFLOAD_STAGING_ELEMENTS = 2 * 100_000_000
"""Host<->device staging per offloaded state, elements: two buffers of DeepSpeed's default
`offload_param.buffer_size` 1e8 (double-buffered). Source: DeepSpeed `deepspeed/runtime/zero/
offload_config.py`. [Convention]"""


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Per-device memory of one pipeline stage, bytes."""

    stage: int
    """Pipeline stage (0-based) this breakdown is for."""
    parameters: int
    gradients: int
    optimizer_states: int
    activations: int
    """Saved activations of all in-flight micro-batches incl. embedding and logits."""
    transient: int
    """Peak of `transient_terms` over the phases of a step (`transient_peak`: the loss-backward,
    layer-backward and optimizer-step terms never coexist; the optimizer step runs without
    activations), bytes."""
    reserve: int
    """CUDA context + fragmentation."""
    capacity: int
    """GPU memory, bytes (binary GiB × 2**30)."""
    transient_terms: dict[str, int] = field(default_factory=dict)
    activation_terms: dict[str, int] = field(default_factory=dict)
    state_terms: dict[str, int] = field(default_factory=dict)
    """`<state>.<group>` -> bytes."""
    in_flight_microbatches: float = 1.0
    """Micro-batches of layer activations the stage holds at its peak."""
    padded_vocab_size: int = 0
    initialization_peak: int = 0
    """Bytes of the stage's parameters in fp32 if built unsharded on each GPU before wrapping (FC-17)."""
    warnings: tuple[str, ...] = ()
    at_risk_margin: float = DEFAULT_AT_RISK_MARGIN
    optimizer_step_groups: dict[str, int] = field(default_factory=dict)
    """Optimizer param group -> its optimizer-step working set, bytes (`optimizer_step_copy_bytes`;
    the step converts one group at a time, so the `OPTIMIZER_STEP_TERM` is their maximum)."""

    @property
    def model_states(self) -> int:
        """Parameters + gradients + optimizer states on this GPU, bytes."""
        return self.parameters + self.gradients + self.optimizer_states

    @property
    def total(self) -> int:
        """Peak bytes on this GPU: model states + activations + transients + reserve."""
        return self.model_states + self.activations + self.transient + self.reserve

    @property
    def backward_total(self) -> int:
        """Peak bytes of the forward / backward phases alone (every term but the optimizer step's):
        what the stage holds while activations are alive."""
        terms = {**self.transient_terms, OPTIMIZER_STEP_TERM: 0}
        return self.model_states + self.activations + transient_peak(terms) + self.reserve

    def optimizer_step_total(self, group: str | None = None) -> int:
        """Peak bytes of the optimizer step (no activations): model states, the terms present in
        every phase, the working set of optimizer param `group` (None: the largest), the reserve."""
        step = (self.transient_terms.get(OPTIMIZER_STEP_TERM, 0) if group is None
                else self.optimizer_step_groups[group])
        return self.model_states + transient_phases(self.transient_terms)["every"] + step + self.reserve

    @property
    def largest_term(self) -> tuple[str, int]:
        """(name, bytes) of the largest of parameters, gradients, optimizer_states, activations
        and transient (the first on a tie): what to shrink first."""
        terms = {"parameters": self.parameters, "gradients": self.gradients,
                 "optimizer_states": self.optimizer_states, "activations": self.activations,
                 "transient": self.transient}
        name = max(terms, key=terms.get)
        return name, terms[name]

    @property
    def verdict(self) -> str:
        """fits | at_risk | does_not_fit (see memory_verdict)."""
        return memory_verdict(self.total, self.capacity, self.at_risk_margin)


def memory_verdict(total_bytes: int, capacity_bytes: int, margin: float = DEFAULT_AT_RISK_MARGIN) -> str:
    """`fits` / `at_risk` (within `margin` × capacity of it) / `does_not_fit`."""
    if total_bytes > capacity_bytes:
        return "does_not_fit"
    return "at_risk" if total_bytes > (1 - margin) * capacity_bytes else "fits"


def stage_layers(model: ModelSpec, layout: Layout) -> tuple[tuple[int, ...], ...]:
    """Decoder layer indices held by each pipeline stage.

    A `pipeline_layout` gives each virtual stage its layers (chunk c on rank c % pp, layers
    numbered in chunk order: `pipeline_layout.rank_chunks`); else explicit `pipeline_layers` are
    taken as given (contiguous); otherwise an even split, remainder to the first stages. With
    vpp > 1 stage s holds model chunks s, s + pp, ... (Megatron interleaving). The one split used
    by memory, communication and step time.

    Raises:
        SpecError: an explicit layout or `pipeline_layers` whose decoder layers do not sum to the
            model's layers.
    """
    n, pp, vpp = model.num_hidden_layers, layout.pp, layout.vpp
    if layout.pipeline_layout is not None:
        chunks = pipeline_layout.rank_chunks(layout.pipeline_layout, pp)
        total = sum(map(len, (c for rank in chunks for c in rank)))
        if total != n:
            raise SpecError(f"pipeline_layout {pipeline_layout.to_string(layout.pipeline_layout)} has "
                            f"{total} decoder layers, the model has {n}", key="pipeline_layout")
        return tuple(tuple(i for c in rank for i in c) for rank in chunks)
    if layout.pipeline_layers is not None:
        counts = list(layout.pipeline_layers)
        if sum(counts) != n:
            raise SpecError(f"pipeline_layers {tuple(counts)} sum to {sum(counts)}, the model has {n} layers",
                            key="pipeline_layers")
    else:
        chunks = pp * vpp
        per = [n // chunks + (1 if c < n % chunks else 0) for c in range(chunks)]
        starts = [sum(per[:c]) for c in range(chunks)]
        return tuple(tuple(i for c in range(s, chunks, pp) for i in range(starts[c], starts[c] + per[c]))
                     for s in range(pp))
    starts = [sum(counts[:s]) for s in range(pp)]
    return tuple(tuple(range(starts[s], starts[s] + counts[s])) for s in range(pp))


def in_flight_microbatches(layout: Layout, stage: int) -> float:
    """Micro-batches of the stage's layer activations alive at its peak, in units of the whole stage.

    1F1B: stage s holds min(pp − s, m) (Narayanan et al. 2021 §2.2.1; Korthikanti et al. 2022 §4.2.3:
    the first stage holds pp). Interleaved: stage s keeps warmup + 1 = (pp − s − 1)·2 + (vpp − 1)·N + 1
    model chunks in flight (`pipeline.interleaved_warmup_chunks`, N =
    `layout.microbatch_group_size`, default pp), each 1/vpp of the stage, capped at m·vpp; for
    s = 0 and N = pp this is pp·(1 + (pp − 1)/(pp·vpp)) stages (Korthikanti eq. 4.2.3).
    """
    m, pp, vpp = max(1, layout.num_microbatches), layout.pp, layout.vpp
    if vpp == 1:
        return float(min(pp - stage, m))
    warmup = interleaved_warmup_chunks(pp=pp, vpp=vpp, stage=stage, num_microbatches=m,
                                       group_size=layout.microbatch_group_size)
    return min(warmup + 1, m * vpp) / vpp


def _group_counts(model: ModelSpec, counts: ParamCounts, layout: Layout, layers: tuple[int, ...],
                  stage: int) -> dict[str, int]:
    """Parameters of each group held by `stage` (before any sharding)."""
    w, first, last = model.embedding_width, stage == 0, stage == layout.pp - 1
    vocab = padded_vocab(model, layout) * w
    g = {"dense": 0, "replicated": 0, "expert": 0}
    for i in layers:
        for name, n in layer_groups(counts.layers[i]).items():
            g[name] += n
    if first:
        g["dense"] += vocab
        g["replicated"] += counts.embedding - model.padded_vocab_size * w  # positions, norm, project_in
    if last:
        g["replicated"] += counts.final_norm
        # Untied head, or the tied embedding's copy on the last stage under PP (FC-14).
        if not model.tie_word_embeddings or not first:
            g["dense"] += vocab
        # OPT's project_out (h -> word_embed_proj_dim), part of counts.lm_head beyond the vocab matrix.
        g["replicated"] += counts.lm_head - (0 if model.tie_word_embeddings else model.padded_vocab_size * w)
    if stage == mtp.mtp_stage(layout) and (n := mtp.mtp_layers(model, layout)):
        for name, count in mtp_group_counts(model, counts, n).items():
            g[name] += count
        if not first:  # the MTP stage's own embedding (`placement.mtp`)
            g["dense"] += vocab
            g["replicated"] += counts.embedding - model.padded_vocab_size * w
    return g


def mtp_group_counts(model: ModelSpec, counts: ParamCounts, n: int) -> dict[str, int]:
    """Parameters of `n` MTP layers per placement group (`placement.mtp`): each one transformer
    layer of the last decoder layer's kind (`layer_groups`), eh_proj 2h x h (dense: column-parallel
    over tp) and three norms (replicated); the embedding copy on a later stage is `_group_counts`'.
    Source: Megatron-LM@d98e8a6 multi_token_prediction.py l. 1157-1251."""
    h = model.hidden_size
    g = layer_groups(counts.layers[mtp.mtp_block_index(model)])
    norm = model.hidden_size * (2 if model.norm_type == "layernorm" else 1)
    return {"dense": n * (g["dense"] + 2 * h * h), "replicated": n * (g["replicated"] + 3 * norm),
            "expert": n * g["expert"]}


def layer_groups(lp) -> dict[str, int]:
    """Parameters of one decoder layer (a `ParamCounts.layers` entry) per placement group: dense
    (attention, dense MLP, shared experts), replicated (norms, router), expert (routed experts)."""
    return {"dense": lp.attention + lp.dense_mlp + lp.shared_experts,
            "replicated": lp.norms + lp.router, "expert": lp.routed_experts}


def _local_elements(placement: Placement, group: str, n: float) -> float:
    """Elements of `group` one device holds once its sharded_with_gather axes are gathered: `n` divided
    by the degrees of the axes that stay sharded (tp, ep, etp)."""
    gp = placement.groups[group]
    rest = [a for a in gp.shard_axes(State.PARAMETERS) if gp.mode(State.PARAMETERS, a) == Mode.SHARDED]
    return n / math.prod(gp.degrees[a] for a in rest)


def _block_elements(counts: ParamCounts, placement: Placement, layers: tuple[int, ...]) -> list[int]:
    """Gathered local elements of each decoder layer of the stage, in layer order."""
    return [int(_local_elements(placement, "dense", lp.attention + lp.dense_mlp + lp.shared_experts)
                + _local_elements(placement, "replicated", lp.norms + lp.router)
                + _local_elements(placement, "expert", lp.routed_experts))
            for lp in (counts.layers[i] for i in layers)]


def _vocab_units(model: ModelSpec, layout: Layout, stage: int) -> int:
    """Vocabulary matrices on the stage: the embedding (first stage) and the untied LM head, or the
    tied embedding's copy on the last stage under PP (FC-14)."""
    first, last = stage == 0, stage == layout.pp - 1
    own = not first and stage == mtp.mtp_stage(layout) and mtp.mtp_layers(model, layout) > 0  # MTP's
    return int(first) + int(last and (not model.tie_word_embeddings or not first)) + int(own)


def _unit_params(model: ModelSpec, counts: ParamCounts, placement: Placement, layout: Layout,
                 layers: tuple[int, ...], stage: int) -> list[int]:
    """All-gather units on the stage (each layer, the embedding / LM head), largest first, local
    elements after the non-gathered shards (tp, ep). Megatron / DeepSpeed ZeRO-3 gather the unit in
    use plus `prefetch` more (DeepSpeed `stage3_prefetch_bucket_size`); torchtitan's FSDP2 units are
    `_torchtitan_fsdp_terms`."""
    units = _block_elements(counts, placement, layers)
    vocab = _local_elements(placement, "dense", padded_vocab(model, layout) * model.embedding_width)
    units += [int(vocab)] * _vocab_units(model, layout, stage)
    return sorted(units, reverse=True) or [0]


def _torchtitan_fsdp_terms(model: ModelSpec, counts: ParamCounts, placement: Placement, layout: Layout,
                           layers: tuple[int, ...], stage: int, sb: StateBytes) -> dict[str, int]:
    """torchtitan's FSDP2 gathered parameters (bf16) and unsharded gradients, by backward phase.

    Units (torchtitan @9dec370 `torchtitan/parallelisms/parallelize_llama.py::apply_fsdp`): every
    TransformerBlock is its own `fully_shard` unit with `reshard_after_forward = int(layer_id) <
    len(model.layers) - 1` (the last block keeps its unsharded parameters from its forward into its
    backward), or `False` for every block under PP; the root `fully_shard(model)` holds what is left:
    tok_embeddings, the final norm and output (each / tp: `apply_tp` Rowwise / Colwise on the vocab
    dim, SequenceParallel norm replicated). The root never reshards after forward: FSDP2
    `FSDPState._lazy_init` sets the root group's `post_forward_mesh_info = None` ("for the root, do
    not reshard after forward", torch/distributed/_composable/fsdp/_fsdp_state.py @005da465), and
    its post-backward (reshard + reduce-scatter) runs when the gradient reaches its inputs — never
    for token ids, which do not require grad, so `FSDPParamGroup._register_post_backward_hook`
    registers nothing and `_root_post_backward_final_callback` runs it at the end of backward; under
    PP the stage input's gradient is the stage's last: its parameters, and its output / norm
    gradients (bf16, the param dtype of `MixedPrecisionPolicy`; the tied weight's too) from the
    LM-head backward on, stay alive through every block's backward.

    Phases (see `transient_peak`):
    - both: `fsdp_root_unit` (root parameters, bf16); under PP also `fsdp_stage_blocks`, every block;
    - loss backward: `fsdp_last_block` — the last block, not resharded after forward (no PP); the
      root's pre-backward prefetch targets that same block (`FSDPParamGroup._prefetch_unshard`:
      `post_forward_order[curr_index - 1]`), so nothing else is gathered yet;
    - a block's backward: `fsdp_block_pair` — the block and the one its pre-backward prefetches
      (`gather_prefetch` = 1, the same `curr_index - 1`), the largest adjacent pair (no PP);
      `fsdp_root_gradients` — the root's unsharded output + final-norm gradients (last stage);
      `unreduced_unit_gradient` — the block's bf16 gradients + the fp32 reduce-scatter input
      (`reduce_dtype` float32) of one block: the previous block's input is held in
      `comm_ctx.reduce_scatter_state` until this block's post-backward, which then allocates its own.
    """
    blocks = _block_elements(counts, placement, layers) or [0]
    last = stage == layout.pp - 1
    vocab = int(_local_elements(placement, "dense", padded_vocab(model, layout) * model.embedding_width))
    norm = int(_local_elements(placement, "replicated", counts.final_norm)) if last else 0
    head = vocab if last else 0
    terms = {"gradient_buckets": 0,  # FSDP2 has none (BUCKET_ELEMENTS)
             "fsdp_root_unit": (vocab * _vocab_units(model, layout, stage) + norm) * sb.parameter_gather,
             "fsdp_root_gradients": (head + norm) * sb.compute,
             "unreduced_unit_gradient": max(blocks) * (sb.compute + sb.gradient_reduce)}
    if layout.pp > 1:
        # Gradients accumulate unsharded in fp32 across micro-batches (`_torchtitan_pp_accumulation`):
        # the root's and each block's are counted there; beyond them one block's bf16 gradient.
        terms["fsdp_stage_blocks"] = sum(blocks) * sb.parameter_gather
        terms["fsdp_root_gradients"] = 0
        terms["unreduced_unit_gradient"] = max(blocks) * sb.compute
        return terms
    window = 1 + placement.gather_prefetch
    pairs = [sum(blocks[max(0, i - window + 1):i + 1]) for i in range(len(blocks))]
    terms["fsdp_last_block"] = blocks[-1] * sb.parameter_gather
    terms["fsdp_block_pair"] = max(pairs) * sb.parameter_gather
    return terms


def torch_pipeline_ops(layout: Layout, stage: int) -> list[tuple[str, int]]:
    """Compute order of pipeline rank `stage` under torch.distributed.pipelining, as ("F" | "B",
    local chunk) pairs; micro-batch indices follow in order within a chunk.

    vpp = 1, `Schedule1F1B._step_microbatches`: warmup_chunks = min(m, pp − s) forwards, then one
    backward, one forward until the forwards run out, then the remaining backwards. vpp > 1,
    `ScheduleInterleaved1F1B._calculate_single_rank_operations`: warmup = min((vpp − 1)·per_round +
    2·(pp − 1 − s), m·vpp) forwards, then forward-backward pairs, then the remaining backwards; the
    k-th forward runs local chunk (k // per_round) % vpp, the k-th backward chunk vpp − 1 −
    (k // per_round) % vpp, per_round = m // max(1, m // pp).
    Source: torch/distributed/pipelining/schedules.py (torch 2.6, the nightlies torchtitan @9dec370
    ran on; torchtitan `build_pipeline_schedule` builds these classes with n_microbatches = pp
    unless `pipeline_parallel_microbatches` is set).
    """
    m, pp, v = max(1, layout.num_microbatches), layout.pp, layout.vpp
    if v == 1:
        warmup = min(m, pp - stage)
        ops = [("F", 0)] * warmup
        for _ in range(m - warmup):
            ops += [("B", 0), ("F", 0)]
        return ops + [("B", 0)] * (m - len([o for o in ops if o[0] == "B"]))
    per_round = m // max(1, m // pp)
    warmup = min((v - 1) * per_round + 2 * (pp - 1 - stage), m * v)
    return _one_f_one_b([(k // per_round) % v for k in range(m * v)], v, warmup)


def megatron_interleaved_ops(layout: Layout, stage: int) -> list[tuple[str, int]]:
    """Compute order of pipeline rank `stage` under Megatron's interleaved 1F1B, as ("F" | "B",
    local chunk) pairs: warmup = min((pp − s − 1)·2 + (vpp − 1)·g, m·vpp) forwards, then one
    forward and one backward per step, then the remaining backwards; the k-th forward runs local
    chunk table[k], the k-th backward vpp − 1 − table[k], where the table runs each group of g
    micro-batches through chunks 0..vpp−1 in turn (the last group takes the remaining ones) and
    g = `layout.microbatch_group_size` (Megatron's `FLAG["microbatch_group_size"]`,
    default pp): `pipeline.interleaved_warmup_chunks`, `pipeline.interleaved_chunk_table`.
    Source: Megatron-LM d98e8a6 `megatron/core/pipeline_parallel/schedules.py`
    (`get_pp_rank_microbatches`, `get_schedule_table`, `forward_backward_pipelining_with_interleaving`
    `get_model_chunk_id`); `megatron/core/model_parallel_config.py` l. 567-568 (group size default pp).
    """
    m, pp, v = max(1, layout.num_microbatches), layout.pp, layout.vpp
    group = layout.microbatch_group_size or pp
    warmup = interleaved_warmup_chunks(pp=pp, vpp=v, stage=stage, num_microbatches=m, group_size=group)
    return _one_f_one_b(interleaved_chunk_table(num_microbatches=m, vpp=v, group_size=group), v, warmup)


def _one_f_one_b(table: list[int], v: int, warmup: int) -> list[tuple[str, int]]:
    """`warmup` forwards, then forward-backward pairs, then the remaining backwards; forward k runs
    chunk table[k], backward k chunk v − 1 − table[k]."""
    fwd = [("F", c) for c in table]
    bwd = [("B", v - 1 - c) for c in table]
    total = len(table)
    ops = fwd[:warmup]
    for k in range(total - warmup):
        ops += [fwd[warmup + k], bwd[k]]
    return ops + bwd[total - warmup:]


def pipeline_accumulation_peak(ops: list[tuple[str, int]], chunk_activation_bytes: list[int],
                               chunk_gradient_bytes: list[int]) -> tuple[list[int], list[bool]]:
    """Micro-batches alive per chunk and the chunks whose gradients exist, at the peak of saved
    activations + accumulated gradients over the rank's compute order `ops` (`pipeline_schedule_peak`
    with nothing kept to the step's end)."""
    alive, done, _, _ = pipeline_schedule_peak(ops, chunk_activation_bytes, chunk_gradient_bytes)
    return alive, done


def pipeline_schedule_peak(ops: list[tuple[str, int]], chunk_activation_bytes: list[int],
                           chunk_gradient_bytes: list[int], forward_kept_bytes: list[int] | None = None,
                           backward_kept_bytes: list[int] | None = None, chunk_held_bytes: list[int] | None = None,
                           release_after_last_backward: bool = False
                           ) -> tuple[list[int], list[bool], list[int], list[int]]:
    """(micro-batches alive per chunk, chunks whose gradients exist, forwards run per chunk,
    backwards run per chunk) at the peak over the rank's compute order `ops` of

        sum_c alive_c x chunk_activation_bytes[c] + [chunk c has run a backward] x chunk_gradient_bytes[c]
              + forwards_c x forward_kept_bytes[c] + backwards_c x backward_kept_bytes[c],

    the last two for tensors a forward / backward leaves until the step's end (torch pipelining's
    stage outputs and, in torch 2.6, the stage inputs' gradients: `_torchtitan_pp_accumulation`),
    + chunk_held_bytes[c] from the chunk's first forward (FSDP2's gathered parameters). With
    `release_after_last_backward` a chunk's gradient and held bytes are gone once its last backward
    has ended (FSDP2's post-backward reduce-scatters and reshards it); the returned flags then say
    which chunks hold their gradient at the peak.

    A backward is looked at when it starts (its micro-batch still saved) and when it ends (its
    activations freed, its chunk's gradients accumulated): within it the chunk's blocks free their
    activations and gain their gradients one block at a time, so the peak of the sum over the
    backward is at one of its ends, up to one block.
    """
    n = len(chunk_activation_bytes)
    fwd_kept = forward_kept_bytes or [0] * n
    bwd_kept = backward_kept_bytes or [0] * n
    held = chunk_held_bytes or [0] * n
    if release_after_last_backward:  # (backwards per chunk: read only by `live`)
        runs = Counter(c for kind, c in ops if kind == "B")
        total = [runs[chunk] for chunk in range(n)]
    forwards, backwards = [0] * n, [0] * n
    best, at = -1, ([0] * n, [False] * n, [0] * n, [0] * n)

    def live(c: int) -> bool:
        return not (release_after_last_backward and backwards[c] == total[c])

    def share(c: int) -> int:  # chunk c's term of the sum
        f, b = forwards[c], backwards[c]
        return ((f - b) * chunk_activation_bytes[c] + (chunk_gradient_bytes[c] if b and live(c) else 0)
                + f * fwd_kept[c] + b * bwd_kept[c] + (held[c] if f and live(c) else 0))

    # The sum changes only in the chunk an op runs on: kept up to date term by term where every
    # term is whole bytes (exact), rather than summed over the chunks at every look.
    value, whole = 0, all(type(x) is int for xs in (chunk_activation_bytes, chunk_gradient_bytes,
                                                     fwd_kept, bwd_kept, held) for x in xs)

    def look():
        nonlocal best, at
        now = value if whole else sum(share(c) for c in range(n))
        if now > best:
            best = now
            at = ([f - b for f, b in zip(forwards, backwards)],
                  [bool(backwards[c]) and live(c) for c in range(n)], list(forwards), list(backwards))

    if whole and not release_after_last_backward and not any(held):
        # The same sum kept up to date without `share`: a forward adds its chunk's activation and
        # forward-kept bytes, a backward frees the activation, adds its backward-kept bytes and, the
        # first on its chunk, the chunk's gradient (each `share(c)` difference, in whole bytes).
        # `look` inlined: the ops run before the first greatest look are counted once, after.
        act, grad = chunk_activation_bytes, chunk_gradient_bytes
        started, peak_ops = [False] * n, None
        for i, (kind, chunk) in enumerate(ops):
            if kind == "F":
                value += act[chunk] + fwd_kept[chunk]
                continue
            if value > best:
                best, peak_ops = value, i
            value += bwd_kept[chunk] - act[chunk] + (0 if started[chunk] else grad[chunk])
            started[chunk] = True
            if value > best:
                best, peak_ops = value, i + 1
        if peak_ops is None:
            return at
        for kind, chunk in ops[:peak_ops]:
            if kind == "F":
                forwards[chunk] += 1
            else:
                backwards[chunk] += 1
        return ([f - b for f, b in zip(forwards, backwards)], [bool(b) for b in backwards],
                forwards, backwards)
    for kind, chunk in ops:
        before = share(chunk)
        if kind == "F":
            forwards[chunk] += 1
            value += share(chunk) - before
            continue
        look()
        backwards[chunk] += 1
        value += share(chunk) - before
        look()
    return at


def _torchtitan_pp_accumulation(model: ModelSpec, counts: ParamCounts, placement: Placement, layout: Layout,
                                layers: tuple[int, ...], stage: int, sb: StateBytes, per_layer: list[int],
                                act_terms: dict[str, int], transient: dict[str, int],
                                modes: list[str] | None = None) -> float:
    """torchtitan with PP: every micro-batch's backward runs with FSDP2's gradient sync off, so each
    stage keeps its blocks' and root's gradients unsharded, in fp32, until the step's last backward.

    torch.distributed.pipelining `PipelineStage.backward_maybe_with_nosync` (torch 2.6) calls
    `set_is_last_backward(False)`, `set_reshard_after_backward(False)` and
    `set_requires_gradient_sync(False)` on the stage's FSDPModule before every backward and runs the
    post-backward (reduce-scatter) only after the last one. With sync off FSDP2's
    `FSDPParamGroup.post_backward` calls `FSDPParam.to_accumulated_grad_if_needed`, which moves a bf16
    unsharded gradient into `unsharded_accumulated_grad` cast to `reduce_dtype` (torchtitan's
    `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), and later micro-batches add into it
    (`accumulate_unsharded_grad_if_needed`): 4 B × the unsharded (per-tp) elements of every block, and
    of the root's embedding (first stage) / output + final norm (last stage).

    The peak of saved activations + accumulated gradients is taken over the schedule
    (`torch_pipeline_ops`, `pipeline_accumulation_peak`): the stage's blocks are split into vpp equal
    consecutive chunks; the embedding's activations go with chunk 0, the root's gradients with the
    first (embedding) and last (output) chunk.

    torch.distributed.pipelining's own tensors (`PipelineStage`, torch/distributed/pipelining/stage.py;
    B = one micro-batch's stage-boundary activation, tokens / cp x h x 2 B, / tp under sequence
    parallelism as torchtitan's blocks emit it; a virtual stage is one chunk, chunk c of rank s is
    virtual stage s + c pp):
    - `_prepare_forward_infra` allocates a receive buffer for every micro-batch of the step on
      every virtual stage but the first, and `_prepare_backward_infra` a gradient receive buffer for
      every micro-batch on every virtual stage but the last (m B each, kept across steps);
    - `forward_one_chunk` keeps each micro-batch's output in `fwd_cache` until its backward (B;
      on the last virtual stage the logits, tokens / cp x ceil(V / tp) x 2 B, bf16, the head's
      local vocabulary shard; with the chunked loss the model stops before the head,
      `_skip_lm_head`: tokens / cp x h x 2 B), counted with its chunk's alive micro-batches.
    Not counted: what the torch of the Dec-2024 benchmark also kept to the step's end and today's
    releases do not -- every stage's outputs in `output_chunks` (torchtitan passes
    `return_outputs=False` since e5ef99a, 2025-10-22, "Update PP to release memory earlier";
    torch keeps the last stage's only, and only when asked) and the inputs' `.grad` on the receive
    buffers (`stage_backward` now sets `val.grad = None`).
    - under full recompute the first block of a chunk checkpoints its input, which is the receive
      buffer itself: counted twice here (B per alive micro-batch on a non-first virtual stage, an
      upper bound; keeping it mode-free keeps `memory_model` exact).
    Source: torch/distributed/pipelining/stage.py (`_prepare_forward_infra`,
    `_prepare_backward_infra`, `forward_one_chunk`, `backward_maybe_with_nosync`) as of
    pytorch/pytorch 0138610 and of the torch 2.6 era; torchtitan b5bcd76 trainer.py
    (`pp_schedule.step(..., return_outputs=False)`).
    FSDP2's post-backward at a virtual stage's last backward (`backward_maybe_with_nosync`,
    `last_backward`) reduce-scatters its accumulated gradient and reshards its blocks: both are
    gone once that backward ends (`pipeline_schedule_peak` with `release_after_last_backward`), so
    interleaved ranks peak with one chunk's gradient where the chunks finish apart.
    Writes `act_terms` "layers" / "embedding" / "pipeline_outputs" at that peak and `transient`
    "fsdp_accumulated_gradients" and "pipeline_buffers" (the receive buffers and kept input
    gradients); returns the micro-batches of the stage alive then.
    """
    v = layout.vpp
    blocks = _block_elements(counts, placement, layers)
    size = -(-len(layers) // v) if layers else 0
    bounds = [(c * size, min(len(layers), (c + 1) * size)) for c in range(v)]
    act = [sum(per_layer[a:b]) for a, b in bounds]
    grad = [sum(blocks[a:b]) * sb.gradient_reduce for a, b in bounds]
    flight0 = in_flight_microbatches(layout, stage)
    embedding = int(act_terms.get("embedding", 0) / flight0) if flight0 else 0
    act[0] += embedding
    vocab = int(_local_elements(placement, "dense", padded_vocab(model, layout) * model.embedding_width))
    if stage == 0:
        grad[0] += vocab * sb.gradient_reduce
    if stage == layout.pp - 1:
        norm = int(_local_elements(placement, "replicated", counts.final_norm))
        grad[-1] += (vocab * int(not model.tie_word_embeddings or stage != 0) + norm) * sb.gradient_reduce
    m, pp = max(1, layout.num_microbatches), layout.pp
    boundary = _boundary_bytes(model, layout, sb)
    first = [stage == 0 and c == 0 for c in range(v)]
    last = [stage == pp - 1 and c == v - 1 for c in range(v)]
    logits = (layout.micro_batch_size * layout.seq_len // layout.cp * sb.compute
              * (model.hidden_size if loss_chunks(layout) > 1 else -(-model.padded_vocab_size // layout.tp)))
    gathered = [sum(blocks[a:b]) * sb.parameter_gather for a, b in bounds]
    output = [logits if last[c] else boundary for c in range(v)]
    act = [a + o for a, o in zip(act, output)]
    alive, done, forwards, backwards = pipeline_schedule_peak(torch_pipeline_ops(layout, stage), act, grad,
                                                              chunk_held_bytes=gathered,
                                                              release_after_last_backward=True)
    transient["fsdp_stage_blocks"] = sum(g for f, b, g in zip(forwards, backwards, gathered) if f and b < m)
    act_terms["layers"] = sum(n * (a - o - (embedding if c == 0 else 0))
                              for c, (n, a, o) in enumerate(zip(alive, act, output)))
    if "embedding" in act_terms:
        act_terms["embedding"] = alive[0] * embedding
    act_terms["pipeline_outputs"] = sum(n * o for n, o in zip(alive, output))
    transient["fsdp_accumulated_gradients"] = sum(g for d, g in zip(done, grad) if d)
    # receive buffers (non-first virtual stages), gradient receive buffers (non-last)
    transient["pipeline_buffers"] = m * boundary * sum(int(not f) + int(not l) for f, l in zip(first, last))
    return sum(alive) / v


def fsdp_gradient_sharding_with_pp(layout: Layout) -> bool:
    """ZeRO-2 (gradients and optimizer states sharded over dp, bf16 parameters whole) with pipeline
    parallelism outside torchtitan: FSDP gradient sharding as Meta's Llama 3 stack ran it with PP.

    Only FSDP shards gradients under PP (DeepSpeed's pipeline engine refuses ZeRO-2, Megatron-LM
    shards them only through Megatron-FSDP, without PP: rule `zero_with_pp`, which such a layout
    breaks); torchtitan's FSDP2 with PP is its ZeRO-3 (`_torchtitan_pp_accumulation`). Llama 3's
    FSDP shards 'the model, optimizer, and gradients' and does not reshard parameters after
    forward (Dubey et al. 2024, arXiv 2407.21783v3 §3.3.2), accumulates gradients 'in FP32 ...
    over multiple micro-batches' and reduce-scatters them 'in FP32 across data parallel workers'
    (§3.3.4): each chunk's gradients are held unsharded from its first backward until its last,
    then reduce-scattered once (`_fsdp_pp_gradient_peak`; the time side,
    `cost.comm.fsdp_syncs_once_per_step`)."""
    return layout.pp > 1 and layout.zero_stage == 2 and layout.framework != "torchtitan"


def _fsdp_pp_gradient_peak(model: ModelSpec, counts: ParamCounts, placement: Placement, layout: Layout,
                           layers: tuple[int, ...], stage: int, sb: StateBytes, per_layer: list[int],
                           act_terms: dict[str, int]) -> int:
    """Bytes the unsharded fp32 gradients add to the stage's activation peak under
    `fsdp_gradient_sharding_with_pp`: max over the rank's Megatron interleaved compute order
    (`megatron_interleaved_ops`, the schedule the activations are counted on) of saved activations
    + the gradients of the chunks that have run a backward and not yet their last, less the max of
    the activations alone over the same order (`pipeline_schedule_peak` with
    `release_after_last_backward`).

    Per chunk: activations = its layers' saved bytes per micro-batch (+ the embedding's on the
    first rank's chunk 0); gradients = its layers' local (per-tp) elements x
    `StateBytes.gradients` (4 B: fp32 accumulation, §3.3.4), + the vocabulary matrix's on the
    first rank's first chunk and the output matrix + final norm's on the last rank's last chunk
    (the `fsdp_accumulated_gradients` transient term).
    The gradient shard left after each reduce-scatter is the `gradients` state term.

    FSDP2's mechanism for the same run (the public counterpart of Meta's stack, whose source is not
    published): `FSDPParam.to_accumulated_grad_if_needed` / `accumulate_unsharded_grad_if_needed`
    keep `unsharded_accumulated_grad` in the reduce dtype while gradient sync is off, and the
    post-backward of the last micro-batch reduce-scatters and frees it (pytorch/pytorch 0138610
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py, _fsdp_param_group.py)."""
    v = layout.vpp
    sizes = _chunk_sizes(layout, stage)
    if sizes is None or sum(sizes) != len(layers):
        size = -(-len(layers) // v) if layers else 0
        sizes = [max(0, min(len(layers), (c + 1) * size) - c * size) for c in range(v)]
    bounds = [sum(sizes[:c]) for c in range(v + 1)]
    local = _block_elements(counts, placement, layers)
    act = [sum(per_layer[bounds[c]:bounds[c + 1]]) for c in range(v)]
    grad = [sum(local[bounds[c]:bounds[c + 1]]) * sb.gradients for c in range(v)]
    flight = in_flight_microbatches(layout, stage)
    if stage == 0 and flight:
        act[0] += int(act_terms.get("embedding", 0) / flight)
    vocab = int(_local_elements(placement, "dense", padded_vocab(model, layout) * model.embedding_width))
    if stage == 0:
        grad[0] += vocab * sb.gradients
    if stage == layout.pp - 1:
        norm = int(_local_elements(placement, "replicated", counts.final_norm))
        grad[-1] += (vocab + norm) * sb.gradients  # the output matrix (a tied one's copy under PP, FC-14)
    ops = megatron_interleaved_ops(layout, stage) if v > 1 else _one_f_one_b(
        [0] * max(1, layout.num_microbatches), 1, min(layout.pp - stage, max(1, layout.num_microbatches)))

    def peak(g: list[int]) -> int:
        alive, done, _, _ = pipeline_schedule_peak(ops, act, g, release_after_last_backward=True)
        return sum(n * a for n, a in zip(alive, act)) + sum(x for d, x in zip(done, g) if d)

    return max(0, peak(grad) - peak([0] * v))


def _boundary_bytes(model: ModelSpec, layout: Layout, sb: StateBytes) -> int:
    """One micro-batch's activation at a pipeline-stage boundary: tokens / cp x hidden x the compute
    dtype, / tp with sequence parallelism (the blocks' sequence-sharded output), bytes."""
    tokens = layout.micro_batch_size * layout.seq_len // layout.cp
    split = layout.tp if layout.sequence_parallel else 1
    return -(-tokens * model.hidden_size * sb.compute // split)


DEEPSPEED_LIVE_PARAMETERS = ds.DEFAULT["zero3_live_parameters"]
"""DeepSpeed ZeRO-3 `stage3_max_live_parameters` and `stage3_max_reuse_distance` defaults, elements
(a config's own live-parameter cap: `Layout.buckets`, `frameworks.deepspeed.bucket`).

Source: DeepSpeed `deepspeed/runtime/zero/config.py` (`max_live_parameters` = 1e9: "the maximum
number of parameters resident per GPU before releasing"; `max_reuse_distance` = 1e9: a released
parameter is kept if it is used again within this many parameters)."""


def _largest_module_elements(model: ModelSpec, placement: Placement, layout: Layout,
                             layers: tuple[int, ...], stage: int) -> int:
    """Local elements of the largest single `nn.Module`'s own parameters on the stage (one linear
    layer or the vocabulary matrix), after the tp / ep shards.

    Megatron-style fused tensors, the largest way of writing each: QKV h·(a + 2·kv)·d, the output
    projection a·d·h, the MLP up projection h·I (h·2I gated: gate and up fused), the down projection
    I·h, one routed or shared expert's up projection likewise, the vocabulary V·h on the stages that
    hold it. An MLA projection (rank ≤ 1536 inputs) is never the largest of a DeepSeek block.
    Source: Megatron-LM `megatron/core/transformer/mlp.py` (`linear_fc1` of width 2·ffn_hidden_size
    when gated), `attention.py` (`linear_qkv`); DeepSpeed-MoE experts are separate modules.
    """
    h, up = model.hidden_size, 2 if model.gated_mlp else 1
    dense = [h * (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim,
             model.num_attention_heads * model.head_dim * h]
    moe = [bool(model.is_moe and model.moe_layers[i]) for i in layers]
    if not all(moe):
        dense.append(up * h * model.intermediate_size)
    if any(moe) and model.n_shared_experts:
        dense.append(up * h * (model.shared_expert_intermediate_size or model.moe_intermediate_size))
    if _vocab_units(model, layout, stage):
        dense.append(padded_vocab(model, layout) * h)
    expert = up * h * model.moe_intermediate_size if any(moe) else 0
    return int(max(_local_elements(placement, "dense", max(dense)),
                   _local_elements(placement, "expert", expert)))


def _deepspeed_zero3_terms(model: ModelSpec, placement: Placement, layout: Layout, layers: tuple[int, ...],
                           stage: int, unit_gather: int, sb: StateBytes) -> tuple[int, int]:
    """DeepSpeed ZeRO-3 gathered parameters (elements) and unreduced gradient (bytes).

    Gathered: DeepSpeed fetches per submodule (`PartitionedParameterCoordinator.fetch_sub_module`
    gathers the module's own parameters, `recurse=False`), prefetches only while fewer than
    `max_live_parameters` are available, and keeps a released parameter only if it is reused within
    `max_reuse_distance`; so besides the module in use and one module straddling that window at
    most DEEPSPEED_LIVE_PARAMETERS (or the config's live-parameter cap, `Layout.buckets`) are resident. The unit-pair convention (`unit_gather`, the largest
    block and its prefetched neighbour) stands when it is smaller; the cap binds when one block
    exceeds the live window (Narayanan 2021 Table 2: 529.6B, 5.0e9 parameters per block).
    Unreduced gradient: with `contiguous_gradients` (default True) each parameter's gradient is
    copied into the `reduce_bucket_size` buffer (`gradient_buckets`) by its post-accumulate hook as
    soon as autograd produces it and then freed, and the reduction runs in the 16-bit dtype: beyond
    the bucket only the largest module's gradient, 16-bit, exists.
    Source: DeepSpeed `deepspeed/runtime/zero/partitioned_param_coordinator.py`, `stage3.py`
    (`reduce_ready_partitions_and_remove_grads`, `__add_grad_to_ipg_bucket`).
    """
    largest = _largest_module_elements(model, placement, layout, layers, stage)
    live = ds.bucket(layout, "zero3_live_parameters")
    return min(unit_gather, live + 2 * largest), largest * sb.compute


PERSISTENT_TERM = "persistent_parameters"
"""The transient term of DeepSpeed ZeRO-3's persistent parameters (`persistent_parameter_bytes`)."""


def persistent_parameter_bytes(model: ModelSpec, placement: Placement, layout: Layout, sb: StateBytes,
                               layers: tuple[int, ...]) -> int:
    """DeepSpeed ZeRO-3's persistent parameters of decoder `layers`, bytes: every parameter tensor of at
    most the persistence threshold's elements (`frameworks.deepspeed.KEY["zero3_persistence"]`) (after the tp shard: AutoTP slices the linears
    before ZeRO partitions them) is gathered once and kept whole in the 16-bit dtype on every GPU, its
    partition kept as well (so these bytes come on top of the sharded parameters); 0 under any other
    framework or stage. Tensors: `params_flops.layer_tensors` (the Hugging Face model's, which DeepSpeed
    wraps). At the default threshold 1e5 these are the norms, biases and small projections; a
    threshold above a layer's largest tensor keeps the whole layer gathered. The vocabulary matrices
    (> 1e7 elements for every catalog model) and the final norm are not counted.
    Source: DeepSpeed @edaa722 `deepspeed/runtime/zero/parameter_offload.py` l. 311-323
    `mark_persistent_parameters` (`param.ds_numel <= param_threshold`, up to
    `model_persistence_threshold`, default sys.maxsize, not read); `zero/config.py` l. 221."""
    if layout.framework != "deepspeed" or layout.zero_stage != 3:
        return 0
    threshold = ds.bucket(layout, "zero3_persistence")
    elements = 0.0
    for i in layers:
        for group, n in layer_tensors(model, i):
            local = _local_elements(placement, group, n)
            if local <= threshold:
                elements += local
    return int(elements * sb.parameter_gather)


def _activations(model: ModelSpec, layout: Layout, placement: Placement, layers: tuple[int, ...],
                 modes: list[str], stage: int, dtype: int) -> tuple[dict[str, int], float, int, int, list[int]]:
    """Activation terms, in-flight factor, the working set of one fully recomputed layer, the
    loss backward's working set (last stage), and each layer's saved bytes for one micro-batch."""
    kw, kw_layer, key = activation_arguments(layout, placement, dtype)
    known: dict = {}  # (layer kind, mode) -> bytes, for this call
    per_layer = []
    for i, r in zip(layers, modes):
        kind = (act.layer_kind(model, i) if 0 <= i < model.num_hidden_layers else i, r)
        if kind not in known:
            known[kind] = _per_kind(model, "saved", i, r, key, kw_layer)
        per_layer.append(known[kind])
    flight = in_flight_microbatches(layout, stage)
    terms = {"layers": int(sum(per_layer) * flight)}
    if stage == 0:
        terms["embedding"] = int(act.embedding_activation_bytes(model, **kw) * flight)
    sizes = _chunk_sizes(layout, stage)
    if sizes is not None and sum(sizes) == len(per_layer):
        flight = _uneven_chunk_peak(layout, stage, sizes, per_layer, terms)
    loss_ws = 0
    n_mtp = mtp.mtp_layers(model, layout)
    if n_mtp and stage == mtp.mtp_stage(layout):
        terms["mtp_layers"] = mtp.mtp_in_flight(layout, stage) * n_mtp * mtp_layer_activation_bytes(
            model, layout, kw, key, kw_layer, modes)
    if stage == layout.pp - 1:
        chunks = loss_chunks(layout)
        terms["output_logits_loss"] = int(act.output_layer_activation_bytes(
            model, framework=layout.framework, loss_chunks=chunks, **kw))
        if n_mtp:  # the output layer and loss again per MTP layer, as the main ones keep them
            terms["mtp_logits_loss"] = n_mtp * terms["output_logits_loss"]
        loss_ws = act.loss_working_set_bytes(model, seq_len=layout.seq_len, micro_batch_size=layout.micro_batch_size,
                                             tp=layout.tp, cp=layout.cp, framework=layout.framework,
                                             loss_chunks=chunks)
    if layout.offload_modules and layers:
        # Megatron keeps the last group of each offloaded module on the GPU, so that reloading it does
        # not stall the first backward (fine_grained_activation_offload.py l. 497, 625-637
        # `_offload_margin`): one layer's offloaded tensors of one micro-batch stay.
        terms["offload_margin"] = max((_per_kind(model, "offloaded", i, r, key, kw_layer)
                                       for i, r in zip(layers, modes) if 0 <= i < model.num_hidden_layers),
                                      default=0)
    recompute_ws = 0
    if "full" in modes and layers:
        recompute_ws = max(_per_kind(model, "working_set", i, "full", key, kw_layer) for i in layers)
    if placement.activations.get("host") == Mode.OFFLOADED and layers:
        # Offloaded: the device keeps the layer being computed and one prefetched (double buffer).
        terms["layers"] = int(2 * max(per_layer))
    return terms, flight, recompute_ws, loss_ws, per_layer


def mtp_layer_activation_bytes(model: ModelSpec, layout: Layout, kw: dict, key: tuple, kw_layer: dict,
                               modes: list[str]) -> int:
    """Bytes one MTP layer (`placement.mtp`) saves for one micro-batch: its transformer layer's,
    as a decoder layer of its kind (`_per_kind`) in the stage's recompute -- selective when the
    stage's layers are (Megatron's selective modules apply to every layer), full only when all
    of them are (Megatron recomputes the MTP layer under full granularity with the uniform method;
    with the block method it does not: an under-count there), else none -- plus, in compute dtype
    and split like a norm input under SP, the enorm and hnorm inputs (h each) and eh_proj's
    concatenated input (2h) per token; the output layer's pass is `mtp_logits_loss`.
    Source: Megatron-LM@d98e8a6 multi_token_prediction.py l. 1331-1359 (`_concat_embeddings`),
    l. 1705-1712 and 1620-1640 (`_checkpointed_forward`: uniform only)."""
    mode = ("full" if modes and all(m == "full" for m in modes)
            else "selective" if "selective" in modes else "none")
    sp = layout.tp if kw["sequence_parallel"] else 1
    tokens = layout.seq_len * layout.micro_batch_size // layout.cp
    inputs = math.ceil(4 * model.hidden_size * tokens * kw_layer["dtype_bytes"] / sp)
    return _per_kind(model, "saved", mtp.mtp_block_index(model), mode, key, kw_layer) + inputs


def offloaded_host_bytes(model: ModelSpec, layout: Layout, layers: tuple[int, ...], modes: list[str], stage: int,
                         flight: float) -> int:
    """Pinned host memory per GPU that fine-grained activation offloading holds at the stage's peak:
    the offloaded bytes of every layer (`layer_activation_bytes(...).offloaded`) times the
    micro-batches alive, bytes (0 without `offload_modules`)."""
    if not layout.offload_modules:
        return 0
    _, kw_layer, key = activation_arguments(layout, placement_for(layout), state_bytes(layout).compute)
    return int(flight * sum(_per_kind(model, "offloaded", i, r, key, kw_layer)
                            for i, r in zip(layers, modes) if 0 <= i < model.num_hidden_layers))


def activation_arguments(layout: Layout, placement: Placement, dtype: int) -> tuple[dict, dict, tuple]:
    """(keyword arguments of the embedding / output activation functions, those of a decoder
    layer's, the layer's as a memo key) under `layout`: what `_per_kind` is called with."""
    sp = placement.activations.get("tp") == Mode.SHARDED
    kw = dict(seq_len=layout.seq_len, micro_batch_size=layout.micro_batch_size, tp=layout.tp,
              cp=layout.cp, sequence_parallel=sp)
    kw_layer = dict(kw, ep=layout.ep, etp=layout.etp, framework=layout.framework, dtype_bytes=dtype,
                    recompute_modules=layout.selective_modules, offload_modules=layout.offload_modules or (),
                    fp8_recipe=(layout.fp8_recipe or "delayed") if te_fp8(layout) else None,
                    swiglu_fp8_input_store=bool(layout.swiglu_fp8_input_store), fused_qkv=fused_qkv(layout))
    return kw, kw_layer, tuple(kw_layer.values())


def layer_working_set_bytes(model: ModelSpec, layout: Layout, index: int) -> int:
    """Working set of recomputing decoder layer `index` fully in its backward, bytes
    (`stage_memory`'s `recompute_working_set` is the largest of its layers')."""
    _, kw_layer, key = activation_arguments(layout, placement_for(layout), state_bytes(layout).compute)
    return _per_kind(model, "working_set", index, "full", key, kw_layer)


def _chunk_sizes(layout: Layout, stage: int) -> list[int] | None:
    """Decoder layers of each local chunk of `stage` when the interleaved chunks differ, else None."""
    stages = layout.pipeline_layout
    if layout.vpp == 1 or stages is None or pipeline_layout.is_even(stages):
        return None
    return [len(c) for c in pipeline_layout.rank_chunks(stages, layout.pp)[stage]]


def _uneven_chunk_peak(layout: Layout, stage: int, sizes: list[int], per_layer: list[int],
                       terms: dict[str, int]) -> float:
    """Interleaved 1F1B with chunks of different sizes: the peak of saved activations over the
    rank's Megatron compute order (`megatron_interleaved_ops`, `pipeline_accumulation_peak`), each
    forward of local chunk c adding its layers' bytes (the rank's layers taken in order, `sizes`
    per chunk) and, on chunk 0 of the first rank, the embedding's. Writes `terms` "layers" /
    "embedding" at that peak; returns the micro-batches of the stage alive then (chunks / vpp).
    Equal chunks keep `in_flight_microbatches`' closed form (the same peak)."""
    bounds = [sum(sizes[:c]) for c in range(len(sizes) + 1)]
    chunk = [sum(per_layer[bounds[c]:bounds[c + 1]]) for c in range(len(sizes))]
    flight0 = in_flight_microbatches(layout, stage)
    embedding = int(terms.get("embedding", 0) / flight0) if flight0 else 0
    chunk[0] += embedding
    alive, _ = pipeline_accumulation_peak(megatron_interleaved_ops(layout, stage), chunk,
                                          [0] * len(chunk))
    terms["layers"] = sum(n * (a - (embedding if c == 0 else 0)) for c, (n, a) in enumerate(zip(alive, chunk)))
    if "embedding" in terms:
        terms["embedding"] = alive[0] * embedding
    return sum(alive) / layout.vpp


def _per_kind(model: ModelSpec, what: str, index: int, recompute: str, key: tuple, kw_layer: dict) -> int:
    """`layer_activation_bytes(...).total` (what="saved"), its `.offloaded` (what="offloaded") or
    `layer_backward_working_set_bytes` (what="working_set") of layer `index`, computed once per (layer kind, recompute, arguments):
    layers of one `activations.layer_kind` give the same bytes. An index outside the model goes to
    the function itself, which raises its SpecError."""
    if not 0 <= index < model.num_hidden_layers:
        return act.layer_activation_bytes(model, index, recompute=recompute, **kw_layer).total
    memo = spec_memo(model)
    memo_key = ("memory.activations", what, act.layer_kind(model, index), recompute, key)
    if memo_key not in memo:
        if what in ("saved", "offloaded"):
            saved = act.layer_activation_bytes(model, index, recompute=recompute, **kw_layer)
            memo[memo_key] = saved.total if what == "saved" else saved.offloaded
        else:
            memo[memo_key] = act.layer_backward_working_set_bytes(
                model, index, **{k: v for k, v in kw_layer.items()
                                 if k not in ("recompute_modules", "offload_modules", "fp8_recipe",
                                              "swiglu_fp8_input_store", "fused_qkv")})
    return memo[memo_key]


def _modes_by_layer(layers: tuple[int, ...], layout: Layout,
                    layers_by_recompute: dict[str, int] | None) -> list[str]:
    """Recompute mode of each layer: uniform `layout.recompute`, or counts per mode assigned in the
    order full, selective, none over the stage's layers."""
    if layers_by_recompute is None:
        return [layout.recompute] * len(layers)
    modes = [m for m in ("full", "selective", "none") for _ in range(layers_by_recompute.get(m, 0))]
    if len(modes) != len(layers):
        from planner.errors import SpecError
        raise SpecError(f"value {layers_by_recompute} covers {len(modes)} layers; the stage has "
                        f"{len(layers)}", key="layers_by_recompute")
    return modes


def _bucket_bytes(layout: Layout, sb: StateBytes, local_grads: int) -> int:
    """Gradient bucket beyond the gradients themselves (see BUCKET_ELEMENTS; DeepSpeed's is the
    config's `reduce_bucket_size`, `frameworks.deepspeed.bucket`)."""
    elements = (ds.bucket(layout, "reduce_bucket") if layout.framework == "deepspeed"
                else BUCKET_ELEMENTS[layout.framework])
    return min(elements, local_grads) * sb.gradient_reduce


FP8_WORKSPACE_TERM = "fp8_weight_workspace"
FP8_TRANSPOSE_TERM = "fp8_weight_transpose"
LINEAR_GROUPS = ("dense", "expert")
"""Placement groups whose decoder-layer parameters are Transformer Engine linear weights
(`layer_groups`: attention and MLP projections, shared and routed experts; their biases and
q/k-norm weights, < 0.1 %, counted with them); the vocabulary, norms and router are not."""


def fp8_weight_terms(layout: Layout, facts, linear: dict[str, float], *, transpose: bool,
                     parameters: int) -> tuple[dict[str, float], dict[str, float]]:
    """Transformer Engine's fp8 copies of the linear weights under Megatron-LM fp8
    (`precision.te_fp8`), for `linear` weight elements per group (LINEAR_GROUPS, before any
    sharding): ({named term: bytes}, {group: change of its parameters term, bytes}).

    - Without the fp8 parameter gather (`Layout.fp8_param_gather`): Megatron passes
      `is_first_microbatch` to every TE linear (megatron/core/extensions/transformer_engine.py
      l. 1338-1345, 1587-1602, 2721-2728 @d98e8a6; unless `disable_parameter_transpose_cache`),
      so TE quantizes each weight on the first micro-batch into a workspace it keeps in
      `_fp8_workspaces` and reuses for the rest of the step and the next ones
      (NVIDIA/TransformerEngine@d0067d0 module/linear.py l. 1958-1971, 2068-2071, module/base.py
      l. 792-880 `quantize_weight`): `fp8_weight_bytes` per weight element on the GPU after the
      tp / ep split (whole, whatever ZeRO shards: the workspace is the gathered weight's), term
      FP8_WORKSPACE_TERM.
    - With it: the linear weights are TE fp8 parameters whose 1 B data lives in Megatron's uint8
      parameter buffer (param_and_grad_buffer.py l. 921-923, 1279-1292) in place of the 16-bit
      copy (`parameters` B), and the transpose / columnwise data made after each all-gather
      (tensor/utils.py l. 1404-1431) is FP8_TRANSPOSE_TERM, both with the parameters' residency
      (`shard_degree`); under mxfp8 the parameter is an MXFP8 tensor (row + columnwise data and
      scales) and the gather runs through the gradient buffer (l. 1161-1177): no 16-bit copy, no
      other term.
    Source: as listed; bytes per element: `precision.fp8_weight_bytes`.
    """
    if not te_fp8(layout):
        return {}, {}
    per = fp8_weight_bytes(layout, transpose=transpose)
    if not layout.fp8_param_gather:
        return {FP8_WORKSPACE_TERM: sum(linear[g] / facts.model_parallel_degree[g] for g in linear) * per}, {}
    held = {g: 0.0 if facts.offloaded[State.PARAMETERS, g] else linear[g] / facts.shard_degree[State.PARAMETERS, g]
            for g in linear}
    if (layout.fp8_recipe or "delayed") == "mxfp8":
        return {}, {g: n * (per - parameters) for g, n in held.items()}
    return ({FP8_TRANSPOSE_TERM: sum(held.values()) * (per - 1)}, {g: n * (1 - parameters) for g, n in held.items()})


@dataclass(frozen=True, kw_only=True)
class _PlacementFacts:
    """What `stage_memory` reads of a placement, per (state, group) and group."""

    shard_degree: dict
    """(state, group) -> `GroupPlacement.shard_degree(state)`, count."""
    offloaded: dict
    """(state, group) -> `GroupPlacement.offloaded(state)`."""
    term_names: dict
    """(state, group) -> the `state_terms` key `<state>.<group>`."""
    model_parallel_degree: dict
    """group -> `_model_parallel_degree`, count."""
    gathered: bool
    """Some group's parameters are sharded_with_gather along some axis."""


_FACTS: dict[tuple, _PlacementFacts] = {}
"""placement_key(layout) -> _PlacementFacts of placement_for(layout) (same key, same placement)."""


def _placement_facts(layout: Layout, placement: Placement) -> _PlacementFacts:
    """`_PlacementFacts` of `placement` = placement_for(layout), computed once per placement key."""
    key = placement_key(layout)
    facts = _FACTS.get(key)
    if facts is None:
        if len(_FACTS) >= 4096:
            _FACTS.clear()
        pairs = [(s, g) for s in (State.PARAMETERS, State.GRADIENTS, State.OPTIMIZER_STATES)
                 for g in GROUPS]
        facts = _FACTS[key] = _PlacementFacts(
            shard_degree={(s, g): placement.groups[g].shard_degree(s) for s, g in pairs},
            offloaded={(s, g): placement.groups[g].offloaded(s) for s, g in pairs},
            term_names={(s, g): f"{s.value}.{g}" for s, g in pairs},
            model_parallel_degree={g: _model_parallel_degree(placement, g) for g in GROUPS},
            gathered=any(placement.groups[g].mode(State.PARAMETERS, a) == Mode.SHARDED_WITH_GATHER
                         for g in GROUPS for a in placement.groups[g].degrees))
    return facts


def model_state_key(layout: Layout) -> tuple:
    """What `stage_memory` reads of a layout besides its activations, for a stage at a given
    position (first / middle / last) holding given layers: the per-state, per-group shard degrees,
    offloads and model-parallel degrees of its placement, tp / ep / etp (padded vocabulary and the
    shards that stay after a gather), whether pp > 1 (which stage holds the LM head), framework,
    precision, optimizer and offload, the MTP layers (on the last stage). Two layouts with the same key have the same parameters,
    gradients, optimizer states and non-activation transients on such a stage, whatever their dp,
    cp or pp: a ZeRO-0 layout's states do not depend on dp. torchtitan with PP accumulates
    gradients along the schedule (`_torchtitan_pp_accumulation`), which also reads the micro-batch
    count, vpp and the activations: its key is the whole layout; so does FSDP gradient sharding
    with PP (`fsdp_gradient_sharding_with_pp`)."""
    if (layout.framework == "torchtitan" and layout.pp > 1) or fsdp_gradient_sharding_with_pp(layout):
        return (layout,)
    placement = placement_for(layout)
    facts = _placement_facts(layout, placement)
    return (*state_key(layout), layout.tp, layout.ep, layout.etp,
            layout.pp > 1, layout.offload, tuple(facts.shard_degree.values()),
            tuple(facts.offloaded.values()), tuple(facts.model_parallel_degree.values()),
            facts.gathered, placement.gather_prefetch, layout.buckets, layout.mtp_layers)


def stage_memory(model: ModelSpec, cluster, layout: Layout, stage: int, *,
                 layers_by_recompute: dict[str, int] | None = None,
                 layers: tuple[int, ...] | None = None,
                 reserve_bytes: int | None = None,
                 at_risk_margin: float = DEFAULT_AT_RISK_MARGIN) -> MemoryBreakdown:
    """Per-device memory of pipeline `stage` under `layout` on `cluster`.

    Args:
        model: the model.
        cluster: a ClusterSpec (`gpu.memory_bytes`; node and NVLink-domain sizes for the flex
            dispatcher's buffers, `cost.ep_buffers`).
        layout: degrees and knobs.
        stage: 0-based pipeline stage.
        layers_by_recompute: optional {"none"|"selective"|"full": layer count} overriding the
            uniform recompute policy (the ILP's per-layer choice); must cover the stage's layers.
        layers: optional explicit decoder-layer indices of the stage (the ILP's split).
        reserve_bytes: CUDA context + fragmentation; None = DEFAULT_RESERVE_BYTES.
        at_risk_margin: fraction of capacity for the `at_risk` verdict.
    """
    counts = count_params(model)
    placement = placement_for(layout)
    facts = _placement_facts(layout, placement)
    sb = state_bytes(layout)
    if layers is None:
        layers = stage_layers(model, layout)[stage]
    group_counts = _group_counts(model, counts, layout, layers, stage)

    per_state = {State.PARAMETERS: sb.parameters, State.GRADIENTS: sb.gradients,
                 State.OPTIMIZER_STATES: sb.optimizer_states}
    state_terms: dict[str, int] = {}
    totals = dict.fromkeys(per_state, 0)
    local_grads = 0
    host_states = _host_states(group_counts, facts, per_state)  # in pinned host memory instead
    for state, nbytes in per_state.items():
        for g in GROUPS:
            local = group_counts[g] / facts.shard_degree[state, g]
            if state == State.GRADIENTS:
                local_grads += int(local)
            b = 0 if facts.offloaded[state, g] else int(local * nbytes)
            state_terms[facts.term_names[state, g]] = b
            totals[state] += b
    linear = {g: group_counts[g] - (padded_vocab(model, layout) * model.embedding_width
                                    * _vocab_units(model, layout, stage) if g == "dense" else 0)
              for g in LINEAR_GROUPS}
    fp8_terms, fp8_params = fp8_weight_terms(layout, facts, linear, transpose=fp8_keeps_transpose(cluster.gpu.name),
                                             parameters=sb.parameters)
    for g, delta in fp8_params.items():
        state_terms[facts.term_names[State.PARAMETERS, g]] += int(delta)
        totals[State.PARAMETERS] += int(delta)
    step_groups = optimizer_step_copy_bytes(layout, group_counts, facts)

    modes = _modes_by_layer(layers, layout, layers_by_recompute)
    act_terms, flight, recompute_ws, loss_ws, per_layer = _activations(model, layout, placement, layers, modes,
                                                                       stage, sb.compute)
    transient = {"gradient_buckets": _bucket_bytes(layout, sb, local_grads),
                 "recompute_working_set": recompute_ws, "loss_working_set": loss_ws,
                 **{k: int(v) for k, v in fp8_terms.items()}}
    if step_groups:
        transient[OPTIMIZER_STEP_TERM] = max(step_groups.values())
    if flex := flex_buffer_bytes(model, layout, gpus_per_node=cluster.gpus_per_node,
                                 scaleup_domain_gpus=cluster.scaleup_domain_gpus,
                                 ep_gpus_per_domain=layout.mesh.ep_sharing(cluster.scaleup_domain_gpus)):
        transient[FLEX_BUFFER_TERM] = flex
    if fsdp_gradient_sharding_with_pp(layout):
        transient["fsdp_accumulated_gradients"] = _fsdp_pp_gradient_peak(
            model, counts, placement, layout, layers, stage, sb, per_layer, act_terms)
    gathered = facts.gathered
    if gathered and layout.framework == "torchtitan":
        transient |= _torchtitan_fsdp_terms(model, counts, placement, layout, layers, stage, sb)
        if layout.pp > 1:
            flight = _torchtitan_pp_accumulation(model, counts, placement, layout, layers, stage, sb,
                                                 per_layer, act_terms, transient, modes)
    elif gathered:
        units = _unit_params(model, counts, placement, layout, layers, stage)
        gather = sum(units[:1 + placement.gather_prefetch])
        unreduced = units[0] * (sb.compute + sb.gradient_reduce)
        if layout.framework == "deepspeed":
            gather, unreduced = _deepspeed_zero3_terms(model, placement, layout, layers, stage, gather, sb)
            transient[PERSISTENT_TERM] = persistent_parameter_bytes(model, placement, layout, sb, layers)
        transient["gather_working_set"] = gather * sb.parameter_gather
        transient["unreduced_unit_gradient"] = unreduced
    for state, name in ((State.OPTIMIZER_STATES, "optimizer"), (State.PARAMETERS, "parameters")):
        if facts.offloaded[state, "dense"]:
            transient[f"offload_staging_{name}"] = OFFLOAD_STAGING_ELEMENTS * sb.parameter_gather

    init_peak = initialization_peak_bytes(
        sum(group_counts[g] / facts.model_parallel_degree[g] for g in GROUPS), layout, pp_split=False)
    capacity = cluster.gpu.memory_bytes
    warnings = ()
    activations_host = offloaded_host_bytes(model, layout, layers, modes, stage, flight)
    host = activations_host + host_states
    if host * cluster.gpus_per_node > cluster.host_memory_gib * GIB:
        what = " and ".join(name for name, b in (("offloaded model states", host_states),
                                                 ("activation offload", activations_host)) if b)
        warnings += (f"{what}: {host / GIB:.1f} GiB of pinned host memory per GPU, "
                     f"{host * cluster.gpus_per_node / GIB:.0f} GiB per node of {cluster.host_memory_gib:.0f} GiB "
                     f"host DRAM; offload less or use more GPUs",)
    if init_peak > capacity and not _builds_sharded(layout):
        warnings += (f"initialisation peak: building the stage's {init_peak / GIB:.1f} GiB of fp32 "
                    f"parameters unsharded on each GPU before wrapping exceeds the "
                    f"{capacity / GIB:.1f} GiB capacity; initialise on the meta device "
                    f"(torch.device('meta') / low_cpu_mem_usage with sync_module_states) and "
                    f"load sharded",)
    return MemoryBreakdown(
        stage=stage, parameters=totals[State.PARAMETERS], gradients=totals[State.GRADIENTS],
        optimizer_states=totals[State.OPTIMIZER_STATES], activations=sum(act_terms.values()),
        transient=transient_peak(transient, sum(act_terms.values())),
        reserve=DEFAULT_RESERVE_BYTES if reserve_bytes is None else reserve_bytes,
        capacity=capacity, transient_terms=transient, activation_terms=act_terms,
        state_terms=state_terms, in_flight_microbatches=flight,
        padded_vocab_size=padded_vocab(model, layout), initialization_peak=init_peak,
        warnings=warnings, at_risk_margin=at_risk_margin, optimizer_step_groups=step_groups)


HOST_GRADIENT_BYTES = 4
"""Bytes per element of the gradient partition an offloaded optimizer updates from, in host
memory beside its states: DeepSpeed ZeRO-1/2 with the optimizer offloaded gives each fp32 partition
a `.grad` of its dtype on the offload device, pinned by default
(deepspeed/runtime/zero/stage_1_and_2.py `initialize_optimizer_states`, offload_config.py
`pin_memory`, @edaa722)."""


def _host_states(group_counts: dict[str, int], facts: _PlacementFacts, per_state: dict) -> int:
    """Bytes of the stage's offloaded model states one GPU keeps in pinned host memory: each
    offloaded (state, group)'s local shard x its bytes per element, and beside an offloaded
    optimizer its fp32 gradient partition (`HOST_GRADIENT_BYTES`)."""
    states = sum(int(group_counts[g] / facts.shard_degree[state, g] * nbytes)
                 for state, nbytes in per_state.items() for g in GROUPS if facts.offloaded[state, g])
    grads = sum(int(group_counts[g] / facts.shard_degree[State.OPTIMIZER_STATES, g] * HOST_GRADIENT_BYTES)
                for g in GROUPS if facts.offloaded[State.OPTIMIZER_STATES, g])
    return states + grads


def host_state_bytes(model: ModelSpec, layout: Layout) -> int:
    """Pinned host memory one GPU needs for the model states `layout` offloads (`Layout.offload`
    optimizer / parameters), at its largest stage, bytes; 0 without offload. What `stage_memory`
    warns of against the node's host DRAM (`ClusterSpec.host_memory_gib` / GPUs per node), without
    the activations (which `plan` does not offload by itself)."""
    if not (layout.offload - {"activations"}):
        return 0
    counts, placement, sb = count_params(model), placement_for(layout), state_bytes(layout)
    facts = _placement_facts(layout, placement)
    per_state = {State.PARAMETERS: sb.parameters, State.GRADIENTS: sb.gradients,
                 State.OPTIMIZER_STATES: sb.optimizer_states}
    return max(_host_states(_group_counts(model, counts, layout, layers, s), facts, per_state)
               for s, layers in enumerate(stage_layers(model, layout)))


LOSS_PHASE_TERMS = ("loss_working_set", "fsdp_last_block")
"""Transients alive only while the loss backward runs (last stage); torchtitan's last block is
gathered then and is counted again as part of `fsdp_block_pair` in its own backward."""
LAYER_BACKWARD_PHASE_TERMS = ("recompute_working_set", "unreduced_unit_gradient", "fsdp_block_pair",
                              "fsdp_root_gradients")
"""Transients alive only while one decoder layer runs its backward (or, for the root's gradients,
from the LM-head backward on, i.e. through every layer's backward)."""
OPTIMIZER_STEP_PHASE_TERMS = (OPTIMIZER_STEP_TERM,)
"""Transients alive only during the optimizer step, when no activation is (`OPTIMIZER_STEP_COPY_BYTES`)."""


def transient_phases(terms: dict[str, int]) -> dict[str, int]:
    """Bytes of `terms` by phase: `every` (present in every phase), `loss` (loss backward),
    `layer` (a decoder layer's backward), `optimizer_step`."""
    loss = sum(terms.get(k, 0) for k in LOSS_PHASE_TERMS)
    layer = sum(terms.get(k, 0) for k in LAYER_BACKWARD_PHASE_TERMS)
    step = sum(terms.get(k, 0) for k in OPTIMIZER_STEP_PHASE_TERMS)
    return {"every": sum(terms.values()) - loss - layer - step, "loss": loss, "layer": layer,
            "optimizer_step": step}


def transient_peak(terms: dict[str, int], activations: int = 0) -> int:
    """Peak of the transient terms over the phases of a step, beyond the `activations` that the
    backward phases also hold: the always-present terms + the largest of the loss-backward,
    layer-backward and (less the activations it does not hold) optimizer-step phases.

    The loss backward (nll / log-softmax gradients) and a layer's backward (its recomputed
    activations, its unsharded gradient before the reduce-scatter) run one after the other on a
    GPU, never together: the logits' gradient is consumed by the LM head's backward and freed before
    the first decoder layer's backward starts (torch autograd frees a node's inputs once it has run;
    under PP a stage runs one micro-batch's backward at a time). torchtitan's FSDP2 units are split
    the same way (`_torchtitan_fsdp_terms`): its last block is gathered in the loss phase, a block and
    its prefetched neighbour plus the root's unsharded gradients in the layer phase. The optimizer
    step runs after every backward, with the activations freed: its working set
    (`OPTIMIZER_STEP_COPY_BYTES`) competes with activations + backward transients, so
    stage total = states + every + max(activations + max(loss, layer), optimizer_step) + reserve.
    Every other term (the Megatron / DeepSpeed gather working set, torchtitan's root unit,
    buckets, offload staging) is present in every phase. With no loss working set (Megatron's
    in-place fused cross-entropy) and no optimizer-step term this is the plain sum.
    """
    phase = transient_phases(terms)
    return phase["every"] + max(phase["loss"], phase["layer"], phase["optimizer_step"] - activations)


def optimizer_step_copy_bytes(layout: Layout, group_counts: dict[str, float], facts) -> dict[str, int]:
    """{optimizer param group: `OPTIMIZER_STEP_COPY_BYTES` x its gradient partition on this GPU},
    bytes, under DeepSpeed ZeRO-1/2 with the optimizer on the GPU; under Megatron-LM one group
    "weights", `StateBytes.step_gradient_copy` x the optimizer's shard of every group (its fp32
    gradient copy, made for all groups before the step); else empty.

    Param groups: DeepSpeed partitions each optimizer param group separately and converts one
    group at a time. Under the Hugging Face Trainer the groups are weights with / without weight
    decay; here every non-expert parameter is taken as one group (the no-decay norms and biases
    counted in it: an upper bound by their few elements), and routed experts as their own group
    when ep > 1 (DeepSpeed-MoE's `split_params_into_different_moe_groups_for_optimizer`).
    Partition = the group's elements on the stage / its optimizer-state shard degree (ZeRO-1/2
    partition the optimizer over dp). Source: see `OPTIMIZER_STEP_COPY_BYTES`."""
    state = State.OPTIMIZER_STATES
    if any(facts.offloaded[state, g] for g in GROUPS):
        return {}
    copy = state_bytes(layout).step_gradient_copy
    if copy:  # Megatron copies every group's shard before it steps (`StateBytes.step_gradient_copy`)
        return {"weights": int(copy * sum(group_counts[g] / facts.shard_degree[state, g] for g in GROUPS))}
    if layout.framework != "deepspeed" or layout.zero_stage not in (1, 2):
        return {}
    return {name: int(OPTIMIZER_STEP_COPY_BYTES * sum(group_counts[g] / facts.shard_degree[state, g]
                                                      for g in members))
            for name, members in optimizer_param_groups(layout).items()}


def optimizer_param_groups(layout: Layout) -> dict[str, tuple[str, ...]]:
    """DeepSpeed's optimizer param groups as placement groups (`optimizer_step_copy_bytes`):
    every non-expert parameter in one, routed experts in their own when ep > 1."""
    if layout.ep == 1:
        return {"weights": GROUPS}
    return {"weights": tuple(g for g in GROUPS if g != "expert"), "experts": ("expert",)}


def _model_parallel_degree(placement: Placement, group: str) -> int:
    """Degree of the axes that split the math (tp / ep / etp) for `group`: what unsharded loading keeps."""
    gp = placement.groups[group]
    return math.prod(gp.degrees[a] for a in ("tp", "ep", "etp")
                     if a in gp.degrees and gp.mode(State.PARAMETERS, a) in (Mode.SHARDED,))


def _builds_sharded(layout: Layout) -> bool:
    """Whether the framework builds the model already sharded, so no unsharded initialisation peak.

    torchtitan builds every model on the meta device and materialises it after sharding
    (`train.py` `with torch.device("meta")`, then `init_weights` after `parallelize`). DeepSpeed
    ZeRO-3 allocates each parameter partitioned as it is created under `deepspeed.zero.Init`, which
    the Hugging Face Trainer enters automatically when the config has ZeRO stage 3.
    Source: DeepSpeed docs `docs/code-docs/source/zero3.rst` ("Constructing Massive Models":
    `deepspeed.zero.Init` partitions parameters at allocation); transformers
    `integrations/deepspeed.py` `is_deepspeed_zero3_enabled` and `modeling_utils.py`
    (`from_pretrained` / `_from_config` construct under `deepspeed.zero.Init` when it is true).
    """
    return layout.framework == "torchtitan" or (
        layout.framework == "deepspeed" and layout.zero_stage == 3)


def initialization_peak_bytes(num_params: float, layout: Layout, *, pp_split: bool = True) -> int:
    """fp32 bytes of the parameters one GPU holds if the model is built unsharded before wrapping.

    FSDP / ZeRO-3 wrappers shard an already-materialised module unless it is created on the meta
    device (FC-17: 6.74e9 x 4 B = 27 GB on a 24 GB GPU). Only tp (and pp, by layer) split it.
    Source: PyTorch FSDP docs (`param_init_fn`, `sync_module_states`; meta-device init);
    torch.nn.Module default dtype fp32.
    """
    divisor = layout.tp * (layout.pp if pp_split else 1)
    return int(4 * num_params / divisor)


def memory_per_device(model: ModelSpec, cluster, layout: Layout, *, reserve_bytes: int | None = None,
                      at_risk_margin: float = DEFAULT_AT_RISK_MARGIN) -> MemoryBreakdown:
    """Memory of the worst (largest total) pipeline stage."""
    return max((stage_memory(model, cluster, layout, s, reserve_bytes=reserve_bytes,
                             at_risk_margin=at_risk_margin) for s in range(layout.pp)),
               key=lambda m: m.total)


def model_state_bytes(num_params: float, layout: Layout) -> dict[str, float]:
    """Model-state bytes per device for a bare parameter count (ZeRO Table 1, FC-16, FC-17).

    All parameters are treated as one dense group split by the layout's placement (tp, pp evenly,
    the ZeRO shards); the same memory rule as `stage_memory`.
    """
    placement = placement_for(layout)
    gp = placement.groups["dense"]
    sb = state_bytes(layout)
    per_state = {State.PARAMETERS: sb.parameters, State.GRADIENTS: sb.gradients,
                 State.OPTIMIZER_STATES: sb.optimizer_states}
    per_state[State.OPTIMIZER_STATES] += sb.step_gradient_copy  # the step's peak, as the guides count it
    return {s.value: 0.0 if gp.offloaded(s) else num_params / layout.pp * n / gp.shard_degree(s)
            for s, n in per_state.items()}
