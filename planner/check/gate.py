"""The gate: one training configuration -> pass or fail, with the violated rules, numbers and fixes.

A reader (`plan_file`, ...) turns a file into a `Target`: model, cluster, Layout and, where the
file gives one, the recompute mode count of every pipeline stage. `evaluate` applies every rule
`planner explain` and `planner plan` apply -- the composition rules of `placement.rules` and the
per-stage memory of `cost.memory.stage_memory` against capacity -- plus the reader's own
consistency findings, and costs the step where the layout is valid. It fails on any error; a
warning (a stage inside the at-risk margin, a stale prediction) is reported and passes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from planner.check.lines import locate
from planner.cost.comm import balanced_routing_note
from planner.cost.compute import unvalidated_family_note, unvalidated_layout_notes
from planner.cost.memory import (
    DEFAULT_AT_RISK_MARGIN,
    OPTIMIZER_STEP_TERM,
    MemoryBreakdown,
    fsdp_gradient_sharding_with_pp,
    stage_layers,
    stage_memory,
)
from planner.evaluation import Evaluation, cost_stages, cost_step, layer_modes, stage_modes
from planner.errors import SpecError, several
from planner import frameworks
from planner.placement import mtp, overlap
from planner.placement.layout import Layout
from planner.placement.precision import torchao_fp8_recipe
from planner.placement.rules import Violation, check_layout, errors
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.summary import mfu_basis

STALE_TOLERANCE = 0.005
"""Relative difference between a file's `predicted` numbers and the recomputed ones past which
the prediction is reported stale (0.5%: the file was edited, or written by another version)."""

@dataclass(frozen=True, kw_only=True)
class Target:
    """One configuration to check, as a reader found it."""

    file: str
    """The file checked."""
    kind: str
    """What the file is: training-plan, ..."""
    model: ModelSpec
    """The model trained."""
    cluster: ClusterSpec
    """The cluster, with its GPU count."""
    layout: Layout
    """Degrees, knobs and the pipeline split."""
    recompute_per_stage: tuple[dict[str, int], ...] | None = None
    """[stage] {mode: layer count}; None = `layout.recompute` on every layer."""
    recompute_layers: tuple[str, ...] | None = None
    """Each decoder layer's mode where the file says which of a stage's layers are recomputed
    (a plan file's `recompute_layers`; its per-stage counts are `recompute_per_stage`); None =
    each stage's layers take its counts full first (`evaluation.layer_modes`)."""
    reserve_bytes: int | None = None
    """Per-GPU reserve (CUDA context, fragmentation); None = the default."""
    at_risk_margin: float = DEFAULT_AT_RISK_MARGIN
    """Fraction of GPU memory inside which a stage is at risk."""
    predicted: dict | None = None
    """The file's own prediction (`planner plan -o`), compared with the recomputed one."""
    findings: tuple[Violation, ...] = field(default_factory=tuple)
    """What the reader found inconsistent in the file (e.g. num_microbatches vs the batch)."""
    checkpoint: dict | None = None
    """What the file says of the checkpoints it saves and loads, for rules across files
    (`planner.check.megatron.checkpoint_record`); None when it says nothing."""
    lines: dict[str, int] = field(default_factory=dict)
    """{flag or key spelling, planner knob: the 1-based line of the file that sets it}
    (`planner.check.lines`); {} when unknown."""


def attempt(call, missing: list[SpecError]):
    """`call()`, or None when it raises a reader's "OPTION is required" error (its key the
    option), which is added to `missing` for `raise_missing`; any other error propagates."""
    try:
        return call()
    except SpecError as exc:
        if not exc.key or not exc.message.startswith(f"{exc.key} is required"):
            raise
        missing.append(exc)
        return None


def raise_missing(file: str, missing: list[SpecError]) -> None:
    """Every command-line option a file leaves required, in one error (a user adds them all at
    once): the one error as it is, or "required options: --a (why); --b (why)" for several.

    Raises:
        SpecError: when `missing` is not empty (exit 2)."""
    if len(missing) == 1:
        raise missing[0]
    if missing:
        raise SpecError("required options: " + "; ".join(
            f"{e.key} ({e.message.split(': ', 1)[-1]})" for e in missing), file=file)


def collect(call, bad: list[SpecError], fallback):
    """`call()`, or `fallback` when it raises a SpecError, which is added to `bad` (for `raise_bad_values`:
    a reader reads on past a bad value so that one run names them all)."""
    try:
        return call()
    except SpecError as exc:
        bad.append(exc)
        return fallback


def raise_bad_values(file: str, errors: list[SpecError], also: str = "") -> None:
    """Every value a framework rejects in one run, so that one CI run reports them all (fresh-user review 8
    #19): the one error as it is, or each on a line of its own ("error: FILE: KEY: message", `errors.several`;
    a value given twice named once); `also`: text appended to the last (the file's unknown flags, which the
    framework rejects too).

    Raises:
        SpecError: when `errors` is not empty (exit 2)."""
    unique = list({(e.key, e.message): e for e in errors}.values())
    if unique:
        last = unique[-1]
        if also:
            unique[-1] = SpecError(last.message + also, file=last.file or file, key=last.key)
        raise unique[0] if len(unique) == 1 else several(unique)


def evaluate(target: Target) -> dict:
    """Check `target`: {file, kind, verdict: pass|fail, model, cluster, gpus, parallelism,
    violations [{rule, severity, message, fix}], stages [{stage, layers, recompute, memory_bytes,
    verdict}], memory_bytes (the fullest stage), memory_verdict, time_s, tokens_per_s, mfu}.

    A reader's finding replaces the placement rule of the same name. Memory: `stage_memory` of every
    stage with its own recompute counts, also next to other errors (the layout as the file gives
    it); where a broken rule leaves it undefined, the warning `memory_not_costed` names the errors
    and `stages` is empty. A stage over capacity is
    the error `memory_exceeds` (the stage, its total, the capacity, the largest term and what
    shrinks it), one inside the at-risk margin the warning `memory_at_risk`. Times are None when a
    rule is broken (the step is then undefined or meaningless).
    """
    layout = target.layout
    # A reader's finding replaces the placement rule of the same name: it states the framework's
    # own assertion with the file's numbers (e.g. world size vs tp x pp x cp before any dp exists).
    found = {f.rule for f in target.findings}
    violations = [*target.findings, *(v for v in check_layout(target.model, target.cluster, layout)
                                      if v.rule not in found)]
    stages = _stages(target)
    if stages is not None:
        violations += _memory_findings(target, stages)
    else:
        violations.append(_not_costed(violations))
    valid = not errors(violations)
    step = (cost_step(target.model, target.cluster, layout, _layer_modes(target))
            if valid and stages is not None else None)
    record = Evaluation(layout=layout, recompute_per_stage=target.recompute_per_stage,
                        stages=tuple(stages or ()), step=step, stage_recompute=tuple(_counts(target))
                        if stages else ())
    if step is not None and target.predicted:
        violations += _stale(target.predicted, step.step, stages)
    record = dataclasses.replace(record, violations=tuple(violations))
    return {
        "file": target.file, "kind": target.kind, "verdict": record.verdict,
        "model": target.model.name, "cluster": target.cluster.name, "gpus": target.cluster.num_gpus,
        "parallelism": record.check_parallelism(),
        "violations": record.violation_rows(lambda v: _line(target, v), check_order=True),
        "stages": [row | term_rows(m) for row, m in zip(record.stage_rows(), record.stages)],
        "memory_bytes": record.memory_bytes(),
        "memory_verdict": record.memory_verdict,
        "time_s": record.time_s(),
        "tokens_per_s": step.tokens_per_s if step else None,
        "mfu": step.mfu if step else None,
        "mfu_basis": mfu_basis(target.model, target.cluster.gpu.peak_tflops, layout.precision,
                               layout.seq_len, layout.framework, mtp.mtp_layers(target.model, layout))
        if step else None,
        # what the step time takes as given: balanced expert load, which overlap Megatron-FSDP keeps
        "assumptions": [a for a in (balanced_routing_note(target.model),
                                    overlap.connections_note(layout, target.cluster.gpu.name),
                                    unvalidated_family_note(target.model.model_type)) if a]
        + unvalidated_layout_notes(layout.framework, layout.cp, torchao_fp8_recipe(layout)) if step else [],
        **({"checkpoint": target.checkpoint} if target.checkpoint is not None else {}),
    }


def term_rows(m: MemoryBreakdown) -> dict:
    """{transient_terms, activation_terms}: a stage's transient and activation memory term by term, bytes, the
    non-zero ones, largest first (`MemoryBreakdown`; the transient column is the peak of its terms over the
    step's phases, so they need not add up to it: fresh-user review 9 #9, a 26 GiB transient a user could not
    take apart)."""
    return {name: dict(sorted(((k, v) for k, v in terms.items() if v), key=lambda kv: -kv[1]))
            for name, terms in (("transient_terms", m.transient_terms), ("activation_terms", m.activation_terms))}


_LINE_FALLBACK = {"memory_exceeds": ("micro_batch_size", "recompute", "zero_stage"),
                  "memory_at_risk": ("micro_batch_size", "recompute", "zero_stage"),
                  "initialization_peak": ("zero_stage",)}
"""Rule -> the knobs whose line it points at when its message names no flag or key of the file
(a stage's memory: the micro-batch, recompute and ZeRO settings that shrink it)."""


def _line(target: Target, violation: Violation) -> int | None:
    """The line of the first flag or key of the file the violation's message (else its fix)
    names; else of `_LINE_FALLBACK`'s knobs; None when the file sets none of them. A line the
    reader gave (`Violation.line`) comes first."""
    if violation.line is not None:
        return violation.line
    return locate(target.lines, violation.message, violation.fix,
                  fallback=_LINE_FALLBACK.get(violation.rule, ()))


def _layer_modes(target: Target) -> tuple[str, ...]:
    """Each decoder layer's mode: the file's own where it gives them, else its counts'."""
    if target.recompute_layers is not None:
        return target.recompute_layers
    return layer_modes(_counts(target), stage_layers(target.model, target.layout))


def _ranked_layers(target: Target) -> list[tuple[int, ...]] | None:
    """Each stage's layers in the order `cost_stages` hands out its counts (None: `stage_layers`)."""
    if target.recompute_layers is None:
        return None
    return [ls for ls, _ in stage_modes(stage_layers(target.model, target.layout),
                                         target.recompute_layers)]


def _counts(target: Target) -> list[dict[str, int]]:
    layers = stage_layers(target.model, target.layout)
    if target.recompute_per_stage is None:
        return [{target.layout.recompute: len(ls)} for ls in layers]
    return [dict(c) for c in target.recompute_per_stage]


def _stages(target: Target) -> list[MemoryBreakdown] | None:
    """stage_memory of every stage, also where the file breaks other rules (an unknown flag, a
    batch that does not divide: the layout is still the one the file describes, and its memory is
    what a user fixing those errors meets next); None where a broken rule leaves memory undefined
    (e.g. cp does not divide the sequence, per-stage recompute counts that do not cover the split)."""
    try:
        return list(cost_stages(target.model, target.cluster, target.layout, _counts(target),
                                layers=_ranked_layers(target), reserve_bytes=target.reserve_bytes,
                                at_risk_margin=target.at_risk_margin))
    except SpecError:
        if errors([*target.findings,
                   *check_layout(target.model, target.cluster, target.layout)]):
            return None  # the rules already say why
        raise


def _not_costed(violations: list[Violation]) -> Violation:
    """The note that memory was not costed, naming the broken rules that leave it undefined."""
    rules = ", ".join(dict.fromkeys(v.rule for v in errors(violations)))
    return Violation(rule="memory_not_costed", severity="warning",
                     message=f"memory was not costed: the errors above ({rules}) leave the "
                             f"layout's per-GPU memory undefined",
                     fix="fix those errors and check again for the memory per stage")


def _memory_findings(target: Target, stages: list[MemoryBreakdown]) -> list[Violation]:
    out = [Violation(rule="initialization_peak", severity="warning", message=text,
                     fix="build the model on the meta device and load it sharded")
           for text in dict.fromkeys(w for m in stages for w in m.warnings)]
    counts = _counts(target)
    return out + memory_violations(target.model, target.cluster, target.layout, stages,
                                   counts=[counts[m.stage] for m in stages],
                                   reserve_bytes=target.reserve_bytes,
                                   at_risk_margin=target.at_risk_margin, kind=target.kind,
                                   modes=_layer_modes(target))


def memory_violations(model: ModelSpec, cluster: ClusterSpec, layout: Layout,
                      stages: list[MemoryBreakdown], *, counts: list[dict[str, int]] | None = None,
                      reserve_bytes: int | None = None,
                      at_risk_margin: float = DEFAULT_AT_RISK_MARGIN,
                      kind: str = "training-plan",
                      modes: tuple[str, ...] | None = None) -> list[Violation]:
    """`memory_exceeds` (error) for each stage over capacity and `memory_at_risk` (warning) for
    each inside the at-risk margin: the stage, its total, the capacity, the largest term, and the
    single knob changes after which it fits, with their step times (`_memory_fix`).

    Args:
        stages: `stage_memory` of the stages to judge.
        counts: [i] the recompute counts of stages[i] ({mode: layers}); None = layout.recompute.
        kind: the file checked (`Target.kind`): fixes are spelled in its framework's settings.
        modes: each decoder layer's recompute mode (`evaluation.layer_modes`), kept by the changes
            other than recompute when their step is timed; None = layout.recompute on every layer.
    """
    out = []
    gib = 2**30
    for i, m in enumerate(stages):
        if m.verdict == "fits":
            continue
        term, size = m.largest_term
        parts = m.transient_terms if term == "transient" else {}
        part = max(parts, key=parts.get, default=None)
        within = (f", of which {part.replace('_', ' ')} {parts[part] / gib:.1f} GiB"
                  if part and len([v for v in parts.values() if v]) > 1 else "")
        numbers = (f"pipeline stage {m.stage} needs {m.total / gib:.1f} GiB of "
                   f"{m.capacity / gib:.1f} GiB per GPU (largest term: {term.replace('_', ' ')}, "
                   f"{size / gib:.1f} GiB{within}; reserve {m.reserve / gib:.1f} GiB){_phase_note(m)}")
        fix = _memory_fix(model, cluster, layout, m, None if counts is None else counts[i],
                          reserve_bytes, at_risk_margin, kind, modes)
        if m.verdict == "does_not_fit":
            out.append(Violation(rule="memory_exceeds", message=numbers, fix=fix))
        else:
            free = (m.capacity - m.total) / gib
            out.append(Violation(
                rule="memory_at_risk", severity="warning",
                message=f"{numbers}: {free:.1f} GiB free, inside the {at_risk_margin:.0%} "
                        f"at-risk margin (implementations of one layout peak GBs apart, FC-04)",
                fix=fix))
    return out


def _phase_note(m: MemoryBreakdown) -> str:
    """When the peak is the optimizer step (activations freed), what it holds: the step's working
    set by name and size, and the backward phases' peak it exceeds."""
    if m.optimizer_step_total() <= m.backward_total:
        return ""
    gib = 2**30
    step = m.transient_terms.get(OPTIMIZER_STEP_TERM, 0)
    return (f"; the peak is the optimizer step, not the backward: {OPTIMIZER_STEP_TERM} "
            f"{step / gib:.1f} GiB (DeepSpeed's 16-bit flat copy and fp32 copy of the largest "
            f"param group's gradient partition) over the model states, where the backward "
            f"phases peak at {m.backward_total / gib:.1f} GiB")


def _memory_fix(model: ModelSpec, cluster: ClusterSpec, layout: Layout, m: MemoryBreakdown,
                counts: dict[str, int] | None, reserve_bytes: int | None,
                at_risk_margin: float, kind: str, modes: tuple[str, ...] | None = None) -> str:
    """The single-knob changes after which stage `m.stage` fits outside the at-risk margin -- or,
    for a stage that does not fit, inside it (marked "at risk": it starts, as ZeRO-1 with
    Megatron's distributed optimizer often does) -- each with the stage's new total (recomputed by
    `stage_memory`) and the step time it costs (`cost_step`, s), the cheapest in step time first,
    else a pointer to `planner plan`.

    The micro-batch offered is the largest below the file's after which the stage fits (for a
    stage over capacity also a larger one that leaves it at risk, marked), among those the global
    batch keeps valid (`_single_changes`): the global batch is kept and the micro-batches per step
    grow, as Megatron-LM derives them (global / (micro-batch x dp)), DeepSpeed's gradient
    accumulation steps and torchtitan's gradient accumulation do.

    A change is refused when it breaks a placement rule the layout does not already break; a rule
    the layout itself breaks (e.g. layers_divisible_by_pp with a vpp that does not divide the
    layers) is no reason to refuse every change: the fixes are then computed on the layout as
    costed here, in `_single_changes`' order and without step times (the step of a layout that
    breaks a rule is undefined), and the text says that rule must be fixed first."""
    gib = 2**30
    broken = sorted({v.rule for v in errors(check_layout(model, cluster, layout))})
    found, beyond, micro = [], "", None  # micro: the verdict of the micro-batch offered so far
    for label, changed in _single_changes(layout):
        is_micro = label.startswith("micro_batch_size")
        if is_micro and micro == "fits":
            continue  # a larger micro-batch already fits: the smaller ones cost more time
        new_rules = {v.rule for v in errors(check_layout(model, cluster, changed))} - set(broken)
        if new_rules == {"zero_with_pp"} and fsdp_gradient_sharding_with_pp(changed):
            beyond = _gradient_sharding_note(model, cluster, changed, m, counts, reserve_bytes, at_risk_margin)
        if new_rules:
            continue
        try:  # a recompute change applies to every layer; the others keep the stage's modes
            new = stage_memory(model, cluster, changed, m.stage,
                               layers=stage_layers(model, changed)[m.stage],
                               layers_by_recompute=None if label.startswith("recompute") else counts,
                               reserve_bytes=reserve_bytes, at_risk_margin=at_risk_margin)
        except SpecError:
            continue
        if not (new.verdict == "fits" or (new.verdict == "at_risk" and m.verdict == "does_not_fit")):
            continue
        if is_micro:
            if micro == "at_risk" and new.verdict == "at_risk":
                continue  # a larger micro-batch is already offered at risk
            micro = new.verdict
        step = None if broken else _step_s(model, cluster, changed,
                                           None if label.startswith("recompute") else modes)
        risk = ", at risk" if new.verdict == "at_risk" else ""
        time = f", {step:,.3f} s/step" if step is not None else ""
        found.append((step, f"{_spelled(label, kind, changed)} ({new.total / gib:.1f} GiB{risk}{time})"))
    first = (f"first fix {', '.join(broken)} (the memory here is of the layout as costed, which "
             f"the framework does not build as given); then " if broken else "")
    if not found:
        return f"{first}no single change of recompute, micro-batch or ZeRO stage fits this " \
               f"stage; run `planner plan` for the fastest layout that fits{beyond}"
    found.sort(key=lambda change: (change[0] is None, change[0] or 0.0))  # stable: ties keep the order
    return f"{first}any of: " + "; ".join(text for _, text in found) + \
        f" -- or run `planner plan` for the fastest layout that fits{beyond}"


def _step_s(model: ModelSpec, cluster: ClusterSpec, layout: Layout, modes: tuple[str, ...] | None) -> float | None:
    """The step time of a changed layout (`cost_step`; `modes` each layer's recompute, None =
    `layout.recompute`), s; None where the cost model cannot time it."""
    try:
        return cost_step(model, cluster, layout, modes).step
    except SpecError:
        return None


def _gradient_sharding_note(model: ModelSpec, cluster: ClusterSpec, changed: Layout, m: MemoryBreakdown,
                            counts: dict[str, int] | None, reserve_bytes: int | None,
                            at_risk_margin: float) -> str:
    """Where gradient sharding under PP relieves the stage but the framework cannot run it (rule
    `zero_with_pp`): '. Gradients sharded over dp as FSDP shards them with PP ... would need X GiB
    ...', else ''. `changed` is the layout at ZeRO-2, costed as `cost.memory.fsdp_gradient_sharding_with_pp`
    (Meta's Llama 3 stack: fp32 gradients accumulated per chunk, one reduce-scatter per step)."""
    new = stage_memory(model, cluster, changed, m.stage, layers=stage_layers(model, changed)[m.stage],
                       layers_by_recompute=counts, reserve_bytes=reserve_bytes, at_risk_margin=at_risk_margin)
    if new.verdict == "does_not_fit" or new.total >= m.total:
        return ""
    risk = ", at risk" if new.verdict == "at_risk" else ""
    return (f". Gradients sharded over dp as FSDP shards them with PP (ZeRO-2: each chunk's fp32 "
            f"gradients reduce-scattered once per step, as Meta's Llama 3 stack ran it) would need "
            f"{new.total / 2**30:.1f} GiB{risk}, but {_STACK.get(changed.framework, changed.framework)} "
            f"cannot shard gradients with pp={changed.pp} (zero_with_pp)")


_STACK = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed's pipeline engine"}
"""The framework's name in `_gradient_sharding_note` (rule `zero_with_pp` says why each cannot)."""


def _single_changes(layout: Layout) -> list[tuple[str, Layout]]:
    """(change, layout) in the order a user tries them, the expected cheapest in step time
    first (`_memory_fix` reorders by the costed step time where the layout can be timed): ZeRO-1
    and ZeRO-2 (sharded optimizer states / gradients: a reduce-scatter and an all-gather move what
    DP's all-reduce moved, 2 x params, no extra compute -- ZeRO paper, Rajbhandari et al. 2020
    arXiv:1910.02054 §7.2.1; Megatron's distributed optimizer is ZeRO-1), selective
    recompute (the attention core only: a few % more time, Korthikanti et al. 2022 arXiv:2205.05198
    Table 4), the smaller micro-batches, largest first, that keep the global batch a multiple of
    dp x micro-batch (Megatron-LM `megatron/core/num_microbatches_calculator.py` asserts it; the
    global batch is kept, so the micro-batches per step grow), ZeRO-3 (1.5 x the DP traffic,
    §7.2.2), full recompute (one more forward of every layer: a third more compute, and ~36-39% more
    time in Table 4). The ZeRO stages are
    offered whenever dp x cp > 1: Megatron's distributed optimizer shards over the data-parallel group
    with context parallelism folded in (NVIDIA/Megatron-LM d98e8a6 megatron/core/optimizer/__init__.py
    get_megatron_optimizer: `data_parallel_group=intra_dp_cp_group`), so with dp=1 and cp=8 it still
    divides the optimizer states by 8."""
    changes = {f"recompute {mode}": layout.replace(recompute=mode)
               for mode in ("selective", "full") if mode != layout.recompute}
    micro = [f"micro_batch_size {b}" for b in _divisors_below(layout.global_batch_size, layout.dp,
                                                               layout.micro_batch_size)]
    changes.update({label: layout.replace(micro_batch_size=int(label.rsplit(" ", 1)[1])) for label in micro})
    if layout.dp * layout.cp > 1:  # the sharded states split over the dp x cp group, so also dp=1 with cp>1
        changes.update({f"zero_stage {z}": layout.replace(zero_stage=z)
                        for z in range(layout.zero_stage + 1, 4)})
    order = ("zero_stage 1", "zero_stage 2", "recompute selective", *micro, "zero_stage 3", "recompute full")
    return [(label, changes[label]) for label in order if label in changes]


def _divisors_below(global_batch: int, dp: int, micro_batch: int) -> list[int]:
    """The micro-batches below `micro_batch` that divide the sequences per DP rank (global_batch / dp; none
    when dp does not divide it), largest first; O(sqrt) in the sequences per rank (up to 2**34 tokens)."""
    if global_batch % dp:
        return []
    per_rank = global_batch // dp
    small = [d for d in range(1, math.isqrt(per_rank) + 1) if per_rank % d == 0]
    found = set(small) | {per_rank // d for d in small}
    return sorted((d for d in found if d < micro_batch), reverse=True)


_FRAMEWORK_TERMS = {name: vocabulary.FIX_TERMS for name, vocabulary in frameworks.BY_NAME.items()}
"""How each single change of `_single_changes` is spelled in a framework's own config: each
framework's `FIX_TERMS`, built from the flag and key tables its reader and writer share."""


def _spelled(label: str, kind: str, changed: Layout) -> str:
    """`label` in the terms of the file checked: planner's for a plan file (a micro-batch with the
    plan's micro-batches per step, which it states too), else the framework's
    (`FIX_TERMS`: a pipelined layout's `"<knob> pipelined"` entry where the table has one; a
    micro-batch term's `{microbatches}` the micro-batches per step per DP rank after the change and
    `{tokens}` its tokens, `changed.micro_batch_size` x seq_len)."""
    framework = changed.framework
    if kind == "training-plan" and label.startswith("micro_batch_size"):
        return f"{label} with num_microbatches {changed.num_microbatches}"  # the plan file states both
    if kind == "training-plan" or framework not in _FRAMEWORK_TERMS:
        return label
    terms = frameworks.FIX_TERMS_BY_KIND.get(kind, _FRAMEWORK_TERMS[framework])
    if label in terms:
        return terms[label]
    name, value = label.rsplit(" ", 1)
    if changed.pp > 1 and f"{name} pipelined" in terms:
        name = f"{name} pipelined"
    return terms[name].format(value, microbatches=changed.num_microbatches,
                              tokens=changed.micro_batch_size * changed.seq_len) if name in terms else label


def _stale(predicted: dict, step_s: float, stages: list[MemoryBreakdown]) -> list[Violation]:
    """Warn where the file's predicted step time or memory total disagrees with this check."""
    out = []
    pairs = []
    step = (predicted.get("time_s") or {}).get("step")
    if isinstance(step, (int, float)):
        pairs.append(("step time", float(step), step_s, 1.0, "s"))
    total = (predicted.get("memory_bytes") or {}).get("total")
    if isinstance(total, (int, float)):
        pairs.append(("largest stage memory", float(total), float(max(m.total for m in stages)),
                      2**30, "GiB"))
    for name, said, now, scale, unit in pairs:
        if abs(said - now) > STALE_TOLERANCE * max(abs(now), 1e-12):
            said_text, now_text = _apart(said / scale, now / scale)
            out.append(Violation(
                rule="prediction_stale", severity="warning",
                message=f"the file predicts {name} {said_text} {unit}; this check computes "
                        f"{now_text} {unit}",
                fix="re-run `planner plan ... -o` to refresh the file's prediction"))
    return out


def _apart(a: float, b: float) -> tuple[str, str]:
    """a and b as plain decimals (thousands separated, no exponent) with the fewest decimals, from
    two, at which they differ."""
    for places in range(2, 10):
        x, y = f"{a:,.{places}f}", f"{b:,.{places}f}"
        if x != y:
            return x, y
    return x, y

