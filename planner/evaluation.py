"""One layout evaluated: the record `plan`, `explain` and `check` build once and render.

`Evaluation` holds a layout's numbers as the cost model gives them -- every pipeline stage's
`MemoryBreakdown`, the `StepTime`, the step's collectives, the violations and notes -- and
renders each part of the commands' results from them (`memory_bytes`, `time_s`,
`communication_bytes_per_step`, `violation_rows`, `stage_rows`, `parallelism`), so a number is
named, rounded and keyed in one place whichever command shows it. `cost_stages` and `cost_step`
are the one way the commands cost a layout's stages and step.

The commands' results stay plain data (JSON-serialisable; `report.py` prints them, tests and
`validate` read them): each command picks the parts its output has (`plan` the solver's status,
`explain` the placement and the memory terms, `check` the file and lines).
Data flow: docs/architecture.md §1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.cost.comm import Collective, bytes_per_axis
from planner.cost.memory import DEFAULT_AT_RISK_MARGIN, MemoryBreakdown, stage_layers, stage_memory
from planner.cost.step_time import StepTime, step_time
from planner.placement import overlap, pipeline_layout
from planner.placement.layout import OVERLAP_KNOBS, RECOMPUTE_MODES, Layout
from planner.placement.rules import Violation, errors

ASSIGN_ORDER = ("full", "selective", "none")
"""Order in which a stage's layers take their recompute modes (`stage_memory`'s convention)."""

_MEMORY_KEYS = ("parameters", "gradients", "optimizer_states", "activations", "transient",
                "reserve", "total", "capacity")
_TIME_KEYS = ("step", "compute", "communication_exposed", "pipeline_bubble", "recompute",
              "optimizer")
_RATE_KEYS = ("tokens_per_s", "tflops_per_gpu", "hardware_tflops_per_gpu", "mfu")


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """A layout's memory, time, communication, violations and notes (module docstring)."""

    layout: Layout
    """The layout evaluated."""
    recompute_per_stage: tuple[dict[str, int], ...] | None = None
    """[stage] {mode: layers}; None = `layout.recompute` on every layer."""
    stages: tuple[MemoryBreakdown, ...] = ()
    """Every pipeline stage's memory; () when a broken rule leaves memory undefined."""
    step: StepTime | None = None
    """The step time; None when not costed (a broken rule, memory overflow)."""
    collectives: tuple[Collective, ...] | None = None
    """The step's collectives (`cost.comm.collectives`); None when not costed."""
    violations: tuple[Violation, ...] = ()
    """Rules broken (errors) or at risk (warnings)."""
    notes: tuple[dict, ...] = ()
    """Findings that are not rules ({rule, severity, message, fix})."""
    stage_recompute: tuple[dict[str, int], ...] = ()
    """[stage] {mode: layers} as costed, for `stage_rows` (one per entry of `stages`)."""

    @property
    def worst(self) -> MemoryBreakdown | None:
        """The fullest stage (the first of equals), None when memory is not costed."""
        return max(self.stages, key=lambda m: m.total) if self.stages else None

    @property
    def verdict(self) -> str:
        """fail when a violation is an error, else pass."""
        return "fail" if errors(list(self.violations)) else "pass"

    @property
    def memory_verdict(self) -> str:
        """The fullest stage's verdict (fits | at_risk | exceeds), not_costed without memory."""
        worst = self.worst
        return worst.verdict if worst else "not_costed"

    def memory_bytes(self, stage: MemoryBreakdown | None = None, *, with_stage: bool = True) -> dict | None:
        """{parameters, gradients, optimizer_states, activations, transient, reserve, total,
        capacity[, stage]} of `stage` (default the fullest), bytes; None when not costed."""
        m = self.worst if stage is None else stage
        if m is None:
            return None
        out = {k: getattr(m, k) for k in _MEMORY_KEYS}
        return out | {"stage": m.stage} if with_stage else out

    def time_s(self, *, rates: bool = False) -> dict | None:
        """{step, compute, communication_exposed, pipeline_bubble, recompute, optimizer} seconds,
        with `rates` also {tokens_per_s, tflops_per_gpu, hardware_tflops_per_gpu, mfu}; None when
        the step is not costed."""
        if self.step is None:
            return None
        keys = _TIME_KEYS + _RATE_KEYS if rates else _TIME_KEYS
        return {k: getattr(self.step, k) for k in keys}

    def communication_bytes_per_step(self) -> dict[str, float]:
        """{mesh axis: bytes per GPU per step} of the step's collectives ({} when not costed)."""
        return bytes_per_axis(list(self.collectives)) if self.collectives is not None else {}

    def violation_rows(self, line: Callable[[Violation], int | None] | None = None,
                       *, check_order: bool = False) -> list[dict]:
        """[{rule, message, fix, severity}] of the violations (`check_order`: {rule, severity,
        message, fix, line}, `line` giving each one's line in the file), then the notes."""
        if check_order:
            rows = [{"rule": v.rule, "severity": v.severity, "message": v.message, "fix": v.fix,
                     "line": line(v) if line else None} for v in self.violations]
        else:
            rows = [{"rule": v.rule, "message": v.message, "fix": v.fix, "severity": v.severity}
                    for v in self.violations]
        return rows + list(self.notes)

    def stage_rows(self) -> list[dict]:
        """[{stage, layers, recompute {mode: layers}, memory_bytes, verdict}] per stage."""
        return [{"stage": m.stage, "layers": sum(c.values()),
                 "recompute": {k: c.get(k, 0) for k in RECOMPUTE_MODES},
                 "memory_bytes": self.memory_bytes(m), "verdict": m.verdict}
                for m, c in zip(self.stages, self.stage_recompute)]

    def parallelism(self, *, full: bool = False) -> dict:
        """The layout's parallelism as `plan` and `check` write it: degrees, ZeRO, SP, batch,
        vpp, recompute (a mode, or per-stage counts), pipeline split, overlaps; with `full`
        (`explain`) every Layout field plus the mesh's derived degrees and the overlaps as
        costed (the framework's defaults filled in)."""
        layout = self.layout
        recompute = (layout.recompute if self.recompute_per_stage is None
                     else [dict(c) for c in self.recompute_per_stage])
        if full:
            stages = layout.pipeline_layout
            return dataclasses.asdict(layout) | {
                "pipeline_layout": None if stages is None else pipeline_layout.to_string(stages),
                "offload": sorted(layout.offload), "world_size": layout.world_size,
                "num_microbatches": layout.num_microbatches, "expert_dp": layout.expert_dp,
                **dataclasses.asdict(overlap.resolve(layout))}
        return {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp,
                "ep": layout.ep, "etp": layout.etp, "zero_stage": layout.zero_stage,
                "sequence_parallel": layout.sequence_parallel,
                "micro_batch_size": layout.micro_batch_size,
                "global_batch_size": layout.global_batch_size,
                "num_microbatches": layout.num_microbatches, "vpp": layout.vpp,
                "recompute": recompute}

    def plan_parallelism(self, recompute) -> dict:
        """`plan`'s parallelism: `parallelism()` with the solved recompute (a mode or per-stage
        counts), the split, the overlaps the layout sets, the states kept in host memory when any
        (searched, `plan.searched_offload`), Megatron-LM's fp8 parameter gather when
        on (searched, `plan._with_fp8_param_gather`) and its pipeline layout string."""
        layout = self.layout
        return self.parallelism() | {
            "recompute": recompute,
            **({} if layout.recompute_modules is None else {"recompute_modules": list(layout.recompute_modules)}),
            **({} if layout.offload_modules is None else {"offload_modules": list(layout.offload_modules)}),
            **({"offload": sorted(layout.offload)} if layout.offload else {}),
            **({"fp8_param_gather": True} if layout.fp8_param_gather else {}),
            "pipeline_layers": list(layout.pipeline_layers),
            "overlap": {k: getattr(layout, k) for k in OVERLAP_KNOBS if getattr(layout, k) is not None},
            **({} if layout.moe_dispatcher is None else {"moe_dispatcher": layout.moe_dispatcher}),
            **({} if layout.torch_compile is None else {"compile": layout.torch_compile}),
            **({} if layout.pipeline_layout is None else
               {"pipeline_layout": pipeline_layout.to_string(layout.pipeline_layout)})}

    def check_parallelism(self) -> dict:
        """`check`'s parallelism: `parallelism()` with the split, the run's dtypes and framework,
        offload, Megatron-LM's fp8 parameter gather when on, the overlaps as costed, torch.compile where
        the file sets it (as `plan_parallelism`) and DeepSpeed's bucket sizes where the file sets other
        than the defaults (`Layout.buckets`)."""
        layout = self.layout
        return self.parallelism() | {
            "pipeline_layers": list(layout.pipeline_layers) if layout.pipeline_layers else None,
            "seq_len": layout.seq_len, "precision": layout.precision,
            "optimizer": layout.optimizer, "framework": layout.framework,
            "offload": sorted(layout.offload), "moe_dispatcher": layout.moe_dispatcher,
            **({"fp8_param_gather": True} if layout.fp8_param_gather else {}),
            "overlap": dataclasses.asdict(overlap.resolve(layout)),
            **({} if layout.torch_compile is None else {"compile": layout.torch_compile}),
            **({} if layout.buckets is None else {"buckets": dict(layout.buckets)})}


def layer_modes(counts: Sequence[dict[str, int]],
                stages: Sequence[Sequence[int]]) -> tuple[str, ...]:
    """Per decoder layer (index order), the modes of per-stage counts: stage s's layers
    `stages[s]` (`stage_layers`: under interleaving a rank's chunks, not a contiguous run) take
    them in `stage_memory`'s order (full first), as `cost_stages` charges them."""
    out = [""] * sum(map(len, stages))
    for layers, c in zip(stages, counts):
        for i, m in zip(layers, (m for m in ASSIGN_ORDER for _ in range(c.get(m, 0)))):
            out[i] = m
    return tuple(out)


def layer_groups(model, layout: Layout) -> tuple[int, ...]:
    """Decoder layers of each group a plan file's `recompute_layers` separates by | (`planner plan`'s
    `_layer_groups`): each virtual stage's with a layout string, else each stage's."""
    if layout.pipeline_layout is not None:
        return pipeline_layout.decoder_counts(layout.pipeline_layout)
    return tuple(map(len, stage_layers(model, layout)))


def model_chunks(model, layout: Layout) -> tuple[tuple[int, ...], ...]:
    """Decoder layers of each model chunk (virtual stage), chunk k on stage k mod pp: the layout
    string's (a chunk holding only the embedding or loss is empty), else each stage's layers
    (`stage_layers`) in vpp consecutive equal parts, as Megatron's interleaving builds them. The
    chunks whose first layers Megatron's block recompute takes (`megatron/core/recompute.py`)."""
    if layout.pipeline_layout is not None:
        counts = pipeline_layout.decoder_counts(layout.pipeline_layout)
        starts = [sum(counts[:c]) for c in range(len(counts))]
        return tuple(tuple(range(a, a + n)) for a, n in zip(starts, counts))
    stages, v = stage_layers(model, layout), layout.vpp
    parts = [[ls[len(ls) * k // v:len(ls) * (k + 1) // v] for k in range(v)] for ls in stages]
    return tuple(tuple(parts[c % layout.pp][c // layout.pp]) for c in range(layout.pp * v))


def stage_modes(stages: Sequence[Sequence[int]], modes: Sequence[str]):
    """Per stage, from per-layer `modes`: (its layers ordered full, selective, none -- the order
    `stage_memory` hands out `layers_by_recompute` -- and its {mode: layers} counts), so that
    `cost_stages(..., counts, layers=...)` charges each layer the mode it has."""
    order = {m: k for k, m in enumerate(ASSIGN_ORDER)}
    for layers in stages:
        ranked = tuple(sorted(layers, key=lambda i: order[modes[i]]))
        yield ranked, {m: sum(1 for i in layers if modes[i] == m) for m in RECOMPUTE_MODES}


def cost_stages(model, cluster, layout: Layout, counts: Sequence[dict[str, int]] | None = None,
                *, layers: Sequence[Sequence[int]] | None = None, reserve_bytes: int | None = None,
                at_risk_margin: float = DEFAULT_AT_RISK_MARGIN) -> tuple[MemoryBreakdown, ...]:
    """`stage_memory` of every pipeline stage: with per-stage recompute `counts` the stage's
    layers (`layers`, default `stage_layers`) take them in `ASSIGN_ORDER`; without, every layer
    uses `layout.recompute`.

    Raises:
        SpecError: a layout whose costing is undefined (`stage_memory`'s).
    """
    if counts is None:
        return tuple(stage_memory(model, cluster, layout, s, reserve_bytes=reserve_bytes,
                                  at_risk_margin=at_risk_margin) for s in range(layout.pp))
    layers = stage_layers(model, layout) if layers is None else layers
    return tuple(stage_memory(model, cluster, layout, s, layers=ls, layers_by_recompute=c,
                              reserve_bytes=reserve_bytes, at_risk_margin=at_risk_margin)
                 for s, (ls, c) in enumerate(zip(layers, counts)))


def cost_step(model, cluster, layout: Layout, modes: tuple[str, ...] | None = None,
              **options) -> StepTime:
    """`step_time` of `layout` with per-layer recompute `modes` (None = `layout.recompute`);
    `options`: step_time's flash_attention / rank_order."""
    return step_time(model, cluster, layout, recompute_layers=modes, **options)
