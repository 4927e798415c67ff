"""`explain`: one layout -> its placement, memory terms and verdict, communication and violations.

Returns plain data (JSON-serialisable); `planner/report.py` renders it. Shape (issue 3 part 5):
`parallelism`, `placement` {state: {axis: mode}}, `memory_bytes` {parameters, gradients,
optimizer_states, activations, transient, reserve, total, capacity}, `memory_verdict`,
`communication_bytes_per_step` {axis: bytes}, `violations` [{rule, message, fix, severity}] (the
composition rules, and the worst stage's memory against capacity as `planner check` judges it:
`memory_exceeds` / `memory_at_risk` with the single changes that fit), `time_s` (the step-time
split, tokens/s, TFLOP/s per GPU and MFU of a valid layout that fits; None when a rule is broken or
memory overflows), plus `details`.
"""

from __future__ import annotations

import dataclasses

from planner.cost.comm import bytes_per_axis, collectives, ep_gpus_per_domain
from planner.check.gate import memory_violations
from planner.cost.memory import (
    DEFAULT_AT_RISK_MARGIN,
    MemoryBreakdown,
    memory_per_device,
    stage_layers,
    stage_memory,
)
from planner.cost.step_time import step_time
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.rules import check_layout, errors
from planner.placement import overlap, pipeline_layout
from planner.placement.strategies import placement_for
from planner.specs.model import ModelSpec


def explain(model: ModelSpec, cluster, layout: Layout, *, reserve_bytes: int | None = None,
            at_risk_margin: float = DEFAULT_AT_RISK_MARGIN,
            recompute_per_stage: tuple[dict[str, int], ...] | None = None,
            flash_attention: bool = True, rank_order: tuple[str, ...] | None = None,
            time_despite_memory: bool = False) -> dict:
    """Everything the placement implies for `layout` of `model` on `cluster` (see module docstring).

    `flash_attention`: the attention core is fused (FlashAttention, Dao et al. 2022: no s^2 score
    traffic); False for runs that predate it (Megatron-LM before 2022). `rank_order`: mesh axes
    innermost first (None = `cost.collectives.DEFAULT_RANK_ORDER`). Both reach the step time only.
    `time_despite_memory`: give `time_s` for a layout whose only errors are memory verdicts
    (`memory_exceeds`): what `planner validate` needs for a published run the memory model rejects.

    `recompute_per_stage`: [stage] {none|selective|full: layers}, the per-stage mix `planner plan`
    prints ("recompute per stage 17n/2f, 20n, ..."); each stage's layers take the modes in the
    order full, selective, none (`stage_memory`'s), for memory and step time alike. None: every
    layer uses `layout.recompute`.

    A layout that breaks a composition rule is still costed where the cost model can (world size,
    ZeRO at dp = 1, ...); where a broken rule makes the costing itself undefined (a sequence that
    cp does not divide, ...) `memory_bytes` is None, `memory_verdict` is `not_costed`, and the
    violations say why.

    Raises:
        SpecError: only for bad input that no rule describes.
    """
    violations = check_layout(model, cluster, layout)
    notes = []
    if layout.seq_len > model.max_position_embeddings:
        notes.append({"rule": "seq_len_beyond_context", "severity": "warning", "fix": "",
                      "message": f"seq_len={layout.seq_len:,} exceeds the model's max_position_embeddings="
                                 f"{model.max_position_embeddings:,}: the model was not built for this length (extend its positions first)"})
    header = {"model": model.name, "cluster": cluster.name, "gpus": cluster.num_gpus,
              "parallelism": _parallelism(layout),
              "placement": placement_for(layout).to_table(include_experts=model.is_moe),
              "violations": _rows(violations) + notes}
    try:
        costed, worst = _costs(model, cluster, layout, reserve_bytes, at_risk_margin,
                               recompute_per_stage)
    except SpecError:
        if not errors(violations):
            raise
        costed = {"memory_bytes": None, "memory_verdict": "not_costed", "communication_bytes_per_step": {},
                  "details": {"warnings": [], "framework": layout.framework, "at_risk_margin": at_risk_margin}}
    else:
        violations += memory_violations(model, cluster, layout, [worst], reserve_bytes=reserve_bytes,
                                        at_risk_margin=at_risk_margin)
        header["violations"] = _rows(violations) + notes
    if recompute_per_stage is not None:
        header["parallelism"]["recompute"] = [{m: c.get(m, 0) for m in ("none", "selective", "full")}
                                              for c in recompute_per_stage]
    blocking = [v for v in errors(violations) if not (time_despite_memory and v.rule == "memory_exceeds")]
    return header | costed | {"time_s": None if blocking
                              else _times(model, cluster, layout, recompute_per_stage,
                                          flash_attention=flash_attention, rank_order=rank_order)}


def _rows(violations: list) -> list[dict]:
    return [{"rule": v.rule, "message": v.message, "fix": v.fix, "severity": v.severity}
            for v in violations]


def _layer_modes(counts: tuple[dict[str, int], ...]) -> tuple[str, ...]:
    """Per decoder layer, the modes of per-stage counts in stage_memory's order (full first)."""
    return tuple(m for c in counts for m in ("full", "selective", "none") for _ in range(c.get(m, 0)))


def _times(model: ModelSpec, cluster, layout: Layout,
           counts: tuple[dict[str, int], ...] | None = None, *, flash_attention: bool = True,
           rank_order: tuple[str, ...] | None = None) -> dict:
    """The step-time split of a valid layout (the numbers `planner plan` reports for it);
    `hardware_tflops_per_gpu` counts recomputed FLOPs too (Narayanan 2021 eq. (3)), `tflops_per_gpu`
    the model FLOPs only (the MFU numerator)."""
    order = {} if rank_order is None else {"rank_order": rank_order}
    t = step_time(model, cluster, layout, flash_attention=flash_attention, **order,
                  recompute_layers=None if counts is None else _layer_modes(counts))
    return {"step": t.step, "compute": t.compute, "communication_exposed": t.communication_exposed,
            "pipeline_bubble": t.pipeline_bubble, "recompute": t.recompute, "optimizer": t.optimizer,
            "tokens_per_s": t.tokens_per_s, "tflops_per_gpu": t.tflops_per_gpu,
            "hardware_tflops_per_gpu": t.hardware_tflops_per_gpu, "mfu": t.mfu}


def _parallelism(layout: Layout) -> dict:
    stages = layout.pipeline_layout
    return dataclasses.asdict(layout) | {
        "pipeline_layout": None if stages is None else pipeline_layout.to_string(stages),
        "offload": sorted(layout.offload), "world_size": layout.world_size,
        "num_microbatches": layout.num_microbatches, "expert_dp": layout.expert_dp,
        # each overlap knob as costed: the layout's, or its framework's default where absent
        **dataclasses.asdict(overlap.resolve(layout))}


def _costs(model: ModelSpec, cluster, layout: Layout, reserve_bytes: int | None,
           at_risk_margin: float,
           counts: tuple[dict[str, int], ...] | None = None) -> tuple[dict, MemoryBreakdown]:
    if counts is None:
        mem = memory_per_device(model, cluster, layout, reserve_bytes=reserve_bytes,
                                at_risk_margin=at_risk_margin)
    else:
        layers = stage_layers(model, layout)
        if len(counts) != layout.pp or any(sum(c.values()) != len(ls) for c, ls in zip(counts, layers)):
            raise SpecError(f"value {[sum(c.values()) for c in counts]} layers per stage must match "
                            f"the split {[len(ls) for ls in layers]}", key="--recompute-per-stage")
        mem = max((stage_memory(model, cluster, layout, s, layers=ls, layers_by_recompute=c,
                                reserve_bytes=reserve_bytes, at_risk_margin=at_risk_margin)
                   for s, (ls, c) in enumerate(zip(layers, counts))), key=lambda m: m.total)
    colls = collectives(model, layout,
                        recompute_layers=None if counts is None else _layer_modes(counts),
                        ep_gpus_per_domain=ep_gpus_per_domain(layout, cluster.scaleup_domain_gpus))
    return {
        "memory_bytes": {"parameters": mem.parameters, "gradients": mem.gradients,
                         "optimizer_states": mem.optimizer_states, "activations": mem.activations,
                         "transient": mem.transient, "reserve": mem.reserve, "total": mem.total,
                         "capacity": mem.capacity},
        "memory_verdict": mem.verdict,
        "communication_bytes_per_step": bytes_per_axis(colls),
        "details": {
            "stage": mem.stage,
            "in_flight_microbatches": mem.in_flight_microbatches,
            "padded_vocab_size": mem.padded_vocab_size,
            "state_terms": mem.state_terms,
            "activation_terms": mem.activation_terms,
            "transient_terms": mem.transient_terms,
            "initialization_peak_bytes": mem.initialization_peak,
            "warnings": list(mem.warnings),
            "at_risk_margin": at_risk_margin,
            "framework": layout.framework,
            "collectives": [dataclasses.asdict(c) | {"bytes_per_device": c.bytes_per_device,
                                                     "total_bytes_per_device": c.total_bytes_per_device}
                            for c in colls],
        },
    }, mem
