"""A pipeline stage's memory as an affine function of its layer counts (`StageMemoryModel`): the
twin of `cost.step_time.StageCostModel` for bytes, read by the stage program (`plan.py` ->
`search.ilp`).

`cost.memory.stage_memory` prices one stage holding given layers term by term (docs/architecture.md
§2). For a stage s holding c[k][r] decoder layers of kind k (`step_time.layer_kinds`) in recompute
mode r (`RECOMPUTE_MODES`), n[k] = sum_r c[k][r], the model is

    backward(s, c) = M0[s] + W[s] [some layer fully recomputed]
                     + sum_k w[k] n[k] + sum_k sum_r a[s][k][r] c[k][r]
    phase_j(s, n)  = P0[j][s] + sum_k p[j][k] n[k]          (a phase without activations)
    bytes(s, c)    = max(backward(s, c), max_j phase_j(s, n))

with, per term of `stage_memory` (the same functions compute both):
- w[k]: what one layer adds in every phase that holds activations besides its activations: its
  parameters, gradients and optimizer states per placement group (`memory.layer_groups`, divided
  by each state's shard degree, 0 offloaded), Transformer Engine's fp8 copies of its linear
  weights (`memory.fp8_weight_terms`); DeepSpeed ZeRO-3's persistent parameters of the layer
  (`memory.persistent_parameter_bytes`); the gradient bucket's slope (`BUCKET_ELEMENTS`:
  min(bucket, gradients) is concave, its forward difference at the reference stage (stage 0, 2 -> 3
  layers of the kind) is taken: exact while the stages stay on the reference's side of the bucket,
  an upper bound across it); torchtitan with PP: its gathered block (`fsdp_stage_blocks`) and,
  as an explicit term, its fp32 gradient accumulated unsharded over the micro-batches
  (`memory._torchtitan_pp_accumulation`, every chunk's gradient present at the peak);
- a[s][k][r]: the layer's saved activations for one micro-batch (`memory._per_kind`) x the
  stage's in-flight micro-batches (`memory.in_flight_microbatches`); 0 with activations offloaded
  (the device keeps two layers, counted in M0);
- M0[s]: the rest, the bytes of no decoder layer: the embedding / LM head states and activations,
  logits, the working sets of gathered units (the largest 1 + prefetch units, torchtitan's root
  unit and block pair), offload staging, the loss backward's phase peak. These are constant once
  the stage holds two layers of each kind, so M0[s] = `stage_memory` of stage s holding them, all
  `none`, less their w and a parts (middle stages with one in-flight count share one value);
- W[s]: what the full-recompute working set (`memory.layer_working_set_bytes`, the largest kind's)
  adds to the stage's transient peak, as far as it exceeds the loss-backward phase
  (`memory.transient_peak`);
- phase j: DeepSpeed ZeRO-1/2's optimizer step, one per optimizer param group
  (`memory.optimizer_step_copy_bytes`): p[j][k] = w[k] + the group's copy of the layer's gradient
  partition; P0[j][s] as M0.

Exactness (`tests/test_stage_program_memory.py` checks bytes(s, c) = `stage_memory(...).total` for
every split and mode mix): exact for models of one layer kind under Megatron-LM, DeepSpeed and
torchtitan, torchtitan with PP included when every stage reaches 1F1B's steady state (vpp = 1 and
m > pp: each stage then peaks with `in_flight_microbatches` micro-batches alive and every
gradient accumulated). Otherwise:
- several layer kinds: the stage-level working sets (largest gathered units, the recompute
  working set, DeepSpeed's largest module, torchtitan's largest adjacent block pair) are the
  largest a stage can have (`_probe`): an upper bound for a stage that lacks a kind; torchtitan's
  last block (without PP: the one stage's, exact) is that of the model's last layer;
- a stage of a single layer where units are gathered under PP (a combination the placement rules
  refuse for Megatron-LM and DeepSpeed): the gathered units of two, an upper bound;
- the bucket across its size: an upper bound (see w);
- activations offloaded: an upper bound (M0 keeps two layers of the largest kind in `none`);
- MTP layers (`placement.mtp`): M0 of the last stage holds them, their activations without
  recompute (the probe's mode): an upper bound where the stage recomputes selectively or fully; a
  layout string that puts them on another rank is costed by `stage_memory` alone;
- `exact` False: torchtitan with PP and some stage without a steady phase (m <= pp - s, its peak is
  max(m a, (m - 1) a + g)) or interleaved (its chunks' peak over the schedule), or a Megatron
  interleaved layout with chunks of different sizes (`memory._uneven_chunk_peak`): the model is
  calibrated on the reference stage and `stage_memory` can exceed it; `plan` re-costs every plan
  with `stage_memory` (`plan._fits_as_costed`).

Source: every term is `cost.memory`'s, with the framework source cited there; the affine form and
its use in the program follow `cost.step_time.StageCostModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

from planner.cost import memory as mem
from planner.cost.params_flops import count_params
from planner.cost.step_time import layer_kinds
from planner.placement import pipeline_layout
from planner.placement.layout import RECOMPUTE_MODES, Layout
from planner.placement.precision import fp8_keeps_transpose, state_bytes
from planner.placement.rules import uneven_split
from planner.placement.states import GROUPS, Mode, State
from planner.placement.strategies import placement_for
from planner.specs.model import ModelSpec, spec_memo

_FULL = RECOMPUTE_MODES.index("full")


@dataclass(frozen=True, kw_only=True)
class MemoryPhase:
    """A phase of the step that holds no activations, affine in the stage's layers per kind."""

    name: str
    """What runs (e.g. `optimizer_step.weights`)."""
    fixed_bytes: tuple[float, ...]
    """[stage] bytes with no decoder layer, bytes."""
    kind_bytes: tuple[float, ...]
    """[kind] bytes one layer of the kind adds, whatever its recompute mode, bytes."""

    def value(self, stage: int, kind_counts: Sequence[int]) -> float:
        """fixed_bytes[stage] + sum_k kind_bytes[k] n[k], bytes."""
        return self.fixed_bytes[stage] + sum(p * n for p, n in zip(self.kind_bytes, kind_counts))


@dataclass(frozen=True, kw_only=True)
class StageMemoryModel:
    """Per-GPU bytes of every pipeline stage of one Layout (any split, any per-layer recompute)
    as an affine function of the stage's per-kind-per-mode layer counts (module docstring).
    Modes index `RECOMPUTE_MODES`; the reserve is not included."""

    layer_kinds: tuple[int, ...]
    """Kind index of each decoder layer (`step_time.layer_kinds`)."""
    kind_state_bytes: tuple[float, ...]
    """w[k]: bytes one layer adds besides its activations in the phases that hold activations."""
    kind_activation_bytes: tuple[tuple[tuple[float, ...], ...], ...]
    """a[s][k][r]: saved activations of one layer x stage s's in-flight micro-batches, bytes."""
    stage_fixed_bytes: tuple[float, ...]
    """M0[s]: bytes of stage s that belong to no decoder layer (full-recompute working set aside)."""
    full_working_set_bytes: tuple[float, ...]
    """W[s]: bytes stage s adds when some layer of it is fully recomputed."""
    phases: tuple[MemoryPhase, ...] = ()
    """Phases without activations (DeepSpeed ZeRO-1/2's optimizer step per param group)."""
    exact: bool = True
    """False where `stage_memory` follows a schedule the model does not (module docstring)."""

    @property
    def num_stages(self) -> int:
        """Pipeline stages."""
        return len(self.stage_fixed_bytes)

    def counts(self, layers: Sequence[int], modes: Sequence[str]) -> list[list[int]]:
        """[kind][mode] counts of decoder `layers` in `modes` (one mode name per layer)."""
        out = [[0] * len(RECOMPUTE_MODES) for _ in self.kind_state_bytes]
        for i, m in zip(layers, modes):
            out[self.layer_kinds[i]][RECOMPUTE_MODES.index(m)] += 1
        return out

    def backward_bytes(self, stage: int, counts: Sequence[Sequence[int]]) -> float:
        """M0 + W [some layer full] + sum w n + sum a c of stage `stage`, bytes."""
        full = any(row[_FULL] for row in counts)
        return (self.stage_fixed_bytes[stage] + (self.full_working_set_bytes[stage] if full else 0.0)
                + sum(w * sum(row) + sum(a * x for a, x in zip(acts, row))
                      for w, acts, row in zip(self.kind_state_bytes,
                                              self.kind_activation_bytes[stage], counts)))

    def bytes(self, stage: int, counts: Sequence[Sequence[int]]) -> float:
        """Peak bytes of stage `stage` holding counts[k][r] layers: the backward phases' or a phase
        without activations', whichever is larger (`stage_memory(...).total` less the reserve)."""
        kind_counts = [sum(row) for row in counts]
        return max([self.backward_bytes(stage, counts),
                    *(p.value(stage, kind_counts) for p in self.phases)])


def kind_state_bytes(model: ModelSpec, layout: Layout, *, transpose: bool = True
                     ) -> tuple[tuple[float, ...], dict[str, tuple[float, ...]]]:
    """(w[k], {optimizer param group: [k] bytes one layer adds to its optimizer step}) of `layout`
    (module docstring), per `memory.model_state_key` (what these terms read) and whether the GPU
    keeps fp8 transposes (`precision.fp8_keeps_transpose`, `memory.fp8_weight_terms`)."""
    memo, key = spec_memo(model), ("memory_model.states", mem.model_state_key(layout), transpose)
    if key not in memo:
        memo[key] = _kind_state_bytes(model, layout, transpose)
    return memo[key]


def _kind_state_bytes(model: ModelSpec, layout: Layout, transpose: bool):
    counts, (_, reps) = count_params(model), layer_kinds(model)
    placement = placement_for(layout)
    facts = mem._placement_facts(layout, placement)
    sb = state_bytes(layout)
    per_state = {State.PARAMETERS: sb.parameters, State.GRADIENTS: sb.gradients,
                 State.OPTIMIZER_STATES: sb.optimizer_states}
    fsdp2 = facts.gathered and layout.framework == "torchtitan"
    out, steps = [], {}
    for k, rep in enumerate(reps):
        groups = mem.layer_groups(counts.layers[rep])
        w = sum(0.0 if facts.offloaded[state, g] else groups[g] / facts.shard_degree[state, g] * nbytes
                for state, nbytes in per_state.items() for g in GROUPS)
        fp8_terms, fp8_params = mem.fp8_weight_terms(layout, facts, {g: groups[g] for g in mem.LINEAR_GROUPS},
                                                     transpose=transpose, parameters=sb.parameters)
        w += sum(fp8_terms.values()) + sum(fp8_params.values())
        if not fsdp2:  # FSDP2 has no bucket (`memory.BUCKET_ELEMENTS`)
            w += _bucket_slope(model, counts, layout, facts, sb, rep)
        elif layout.pp > 1:  # gathered block + its accumulated fp32 gradient, every micro-batch
            block = mem._block_elements(counts, placement, (rep,))[0]
            w += block * (sb.parameter_gather + sb.gradient_reduce)
        w += mem.persistent_parameter_bytes(model, placement, layout, sb, (rep,))
        out.append(w)
        for group, copy in mem.optimizer_step_copy_bytes(layout, groups, facts).items():
            steps.setdefault(group, [0.0] * len(reps))[k] = w + copy
    return tuple(out), {g: tuple(v) for g, v in steps.items()}


def _bucket_slope(model, counts, layout, facts, sb, rep: int) -> float:
    """Forward difference of the gradient-bucket term on stage 0 from 2 to 3 layers like `rep`."""
    def bucket(n: int) -> int:
        groups = mem._group_counts(model, counts, layout, (rep,) * n, 0)
        grads = sum(int(groups[g] / facts.shard_degree[State.GRADIENTS, g]) for g in GROUPS)
        return mem._bucket_bytes(layout, sb, grads)
    return float(bucket(3) - bucket(2))


def kind_activation_bytes(model: ModelSpec, layout: Layout) -> tuple[tuple[float, ...], ...]:
    """[kind][mode] saved-activation bytes of one layer for one micro-batch (`memory._per_kind`, as
    `stage_memory` sums them); 0 with activations offloaded (the device keeps two layers whatever
    the count, a stage-level term)."""
    placement = placement_for(layout)
    _, kw_layer, key = mem.activation_arguments(layout, placement, state_bytes(layout).compute)
    offloaded = placement.activations.get("host") == Mode.OFFLOADED
    memo, memo_key = spec_memo(model), ("memory_model.activations", key, offloaded)
    if memo_key not in memo:
        _, reps = layer_kinds(model)
        memo[memo_key] = tuple(
            tuple(0.0 if offloaded else float(mem._per_kind(model, "saved", rep, m, key, kw_layer))
                  for m in RECOMPUTE_MODES) for rep in reps)
    return memo[memo_key]


def stage_memory_model(model: ModelSpec, cluster, layout: Layout) -> StageMemoryModel:
    """The `StageMemoryModel` of `layout` (its split and recompute fields are ignored but for
    `exact`); `cluster` as `stage_memory` takes it."""
    ref = reference_layout(model, layout)
    kinds, reps = layer_kinds(model)
    state, step_slopes = kind_state_bytes(model, ref, transpose=fp8_keeps_transpose(cluster.gpu.name))
    act = kind_activation_bytes(model, ref)
    working = max(mem.layer_working_set_bytes(model, ref, rep) for rep in reps)
    probe = _probe(model, reps)
    pp = layout.pp
    flights = [mem.in_flight_microbatches(ref, s) for s in range(pp)]
    # (position: 0 first, 1 middle, 2 last; in-flight micro-batches) -> (M0, W, {group: P0}): the
    # middle stages share one value per in-flight count (torchtitan's pipeline keeps each alive
    # micro-batch's stage output, a stage-level term x the stage's in-flight count)
    at: dict[tuple, tuple] = {}
    fixed, extra, phase_fixed = [], [], {g: [] for g in step_slopes}
    for s in range(pp):
        position = (0 if s == 0 else 2 if s == pp - 1 else 1, flights[s])
        if position not in at:
            m = mem.stage_memory(model, cluster, ref, s, layers=probe, reserve_bytes=0,
                                 layers_by_recompute={"none": len(probe)})
            linear = sum(state[kinds[i]] + act[kinds[i]][0] * flights[s] for i in probe)
            terms = {**m.transient_terms, mem.OPTIMIZER_STEP_TERM: 0}  # the backward phases alone
            peak = mem.transient_peak({**terms, "recompute_working_set": working})
            at[position] = (max(0.0, m.backward_total - linear), peak - mem.transient_peak(terms),
                            {g: max(0.0, m.optimizer_step_total(g) - sum(p[kinds[i]] for i in probe))
                             for g, p in step_slopes.items()})
        m0, w, p0 = at[position]
        fixed.append(m0)
        extra.append(w)
        for g in phase_fixed:
            phase_fixed[g].append(p0[g])
    return StageMemoryModel(
        layer_kinds=kinds, kind_state_bytes=state,
        kind_activation_bytes=tuple(tuple(tuple(x * f for x in row) for row in act) for f in flights),
        stage_fixed_bytes=tuple(fixed), full_working_set_bytes=tuple(extra),
        phases=tuple(MemoryPhase(name=f"optimizer_step.{g}", fixed_bytes=tuple(phase_fixed[g]),
                                 kind_bytes=step_slopes[g]) for g in step_slopes),
        exact=exact(model, layout))


def _probe(model: ModelSpec, reps: tuple[int, ...]) -> tuple[int, ...]:
    """The layers M0 is measured on: two adjacent layers of each kind (the same gathered units,
    largest module and recompute working set as a stage holding every kind; torchtitan's largest
    adjacent block pair is at least any two adjacent layers', x + y <= 2 max(x, y)), the kind of the
    model's last layer last (torchtitan's loss-phase last block, present only without PP, is then
    the single stage's own)."""
    kinds, _ = layer_kinds(model)
    last = reps[kinds[-1]]
    return tuple(rep for rep in (*(r for r in reps if r != last), last) for _ in range(2))


def reference_layout(model: ModelSpec, layout: Layout) -> Layout:
    """`layout` with the near-even contiguous split (`rules.uneven_split`), no virtual-stage
    layout and no recompute: what the model is calibrated on."""
    return layout.replace(pipeline_layers=tuple(uneven_split(model.num_hidden_layers, layout.pp)),
                          pipeline_layout=None, recompute="none")


def exact(model: ModelSpec, layout: Layout) -> bool:
    """Whether `stage_memory` follows the model's in-flight micro-batches (module docstring)."""
    if layout.pipeline_layout is not None and layout.vpp > 1 and not pipeline_layout.is_even(
            layout.pipeline_layout):
        return False
    fsdp2 = layout.framework == "torchtitan" and mem._placement_facts(layout, placement_for(layout)).gathered
    return not (fsdp2 and layout.pp > 1 and (layout.vpp > 1 or layout.num_microbatches <= layout.pp))
