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

from planner.check.gate import memory_violations
from planner.cost.comm import balanced_routing_note, collectives, ep_gpus_per_domain
from planner.cost.compute import unvalidated_family_note, unvalidated_layout_notes
from planner.cost.memory import DEFAULT_AT_RISK_MARGIN, stage_layers
from planner.errors import SpecError
from planner.evaluation import Evaluation, cost_stages, cost_step, layer_modes, stage_modes
from planner.frameworks import deepep
from planner.frameworks import megatron as mg
from planner.placement import mtp, overlap
from planner.placement.layout import Layout
from planner.placement.precision import torchao_fp8_recipe
from planner.placement.rules import Violation, check_layout, errors
from planner.placement.strategies import placement_for
from planner.specs.model import ModelSpec
from planner.summary import mfu_basis


def explain(model: ModelSpec, cluster, layout: Layout, *, reserve_bytes: int | None = None,
            at_risk_margin: float = DEFAULT_AT_RISK_MARGIN,
            recompute_per_stage: tuple[dict[str, int], ...] | None = None,
            recompute_layers: tuple[str, ...] | None = None,
            flash_attention: bool = True, rank_order: tuple[str, ...] | None = None,
            time_despite_memory: bool = False, waived_rules: tuple[str, ...] = ()) -> dict:
    """Everything the placement implies for `layout` of `model` on `cluster` (see module docstring).

    `flash_attention`: the attention core is fused (FlashAttention, Dao et al. 2022: no s^2 score
    traffic); False for runs that predate it (Megatron-LM before 2022). `rank_order`: mesh axes
    innermost first (None = `cost.collectives.DEFAULT_RANK_ORDER`). Both reach the step time only.
    `time_despite_memory`: give `time_s` for a layout whose only errors are memory verdicts
    (`memory_exceeds`): what `planner validate` needs for a published run the memory model rejects.
    `waived_rules`: placement rules that do not apply to the run costed (a published run on a stack
    the rules' frameworks do not describe: `validate_training.GROUP_SETTINGS`); their findings are
    dropped.

    `recompute_per_stage`: [stage] {none|selective|full: layers}, the per-stage mix `planner plan`
    prints ("recompute per stage 17n/2f, 20n, ..."); each stage's layers take the modes in the
    order full, selective, none (`stage_memory`'s), for memory and step time alike. None: every
    layer uses `layout.recompute`.

    `recompute_layers`: each decoder layer's mode (a plan file's `plan.parallelism.recompute_layers`,
    `recompute_mix.parse_layers`), which says which of a stage's layers are recomputed where the
    per-stage counts do not; memory, communication and step time charge each layer its own mode,
    as `planner check` does for a plan file. Given, it sets the per-stage counts (do not pass
    both).

    A layout that breaks a composition rule is still costed where the cost model can (world size,
    ZeRO at dp = 1, ...); where a broken rule makes the costing itself undefined (a sequence that
    cp does not divide, ...) `memory_bytes` is None, `memory_verdict` is `not_costed`, and the
    violations say why.

    Raises:
        SpecError: only for bad input that no rule describes.
    """
    violations = [v for v in [*check_layout(model, cluster, layout), *_deepep(cluster, layout)]
                  if v.rule not in waived_rules]
    ranked = None
    if recompute_layers is not None:
        if recompute_per_stage is not None:
            raise SpecError("give recompute_layers or recompute_per_stage, not both", key="--recompute-layers")
        ranked, recompute_per_stage = map(tuple, zip(*stage_modes(stage_layers(model, layout), recompute_layers)))
    notes = []
    if layout.seq_len > model.max_position_embeddings:
        notes.append({"rule": "seq_len_beyond_context", "severity": "warning", "fix": "",
                      "message": f"seq_len={layout.seq_len:,} exceeds the model's max_position_embeddings="
                                 f"{model.max_position_embeddings:,}: the model was not built for this length (extend its positions first)"})
    record = Evaluation(layout=layout, recompute_per_stage=recompute_per_stage,
                        violations=tuple(violations), notes=tuple(notes))
    header = {"model": model.name, "cluster": cluster.name, "gpus": cluster.num_gpus,
              "parallelism": record.parallelism(full=True),
              **({"fp8_recipe": recipe} if (recipe := torchao_fp8_recipe(layout)) else {}),
              "placement": placement_for(layout).to_table(include_experts=model.is_moe),
              "violations": record.violation_rows()}
    try:
        record = _costed(model, cluster, record, reserve_bytes, at_risk_margin, ranked, recompute_layers)
    except SpecError:
        if not errors(violations):
            raise
        costed = {"memory_bytes": None, "memory_verdict": "not_costed", "communication_bytes_per_step": {},
                  "details": {"warnings": [], "framework": layout.framework, "at_risk_margin": at_risk_margin}}
    else:
        violations += memory_violations(model, cluster, layout, [record.worst], reserve_bytes=reserve_bytes,
                                        at_risk_margin=at_risk_margin,
                                        modes=_modes(model, layout, recompute_per_stage, recompute_layers))
        record = dataclasses.replace(record, violations=tuple(violations))
        header["violations"] = record.violation_rows()
        costed = _memory_and_communication(record, at_risk_margin)
    if recompute_per_stage is not None:
        header["parallelism"]["recompute"] = [{m: c.get(m, 0) for m in ("none", "selective", "full")}
                                              for c in recompute_per_stage]
    blocking = [v for v in errors(violations) if not (time_despite_memory and v.rule == "memory_exceeds")]
    if not blocking:
        order = {} if rank_order is None else {"rank_order": rank_order}
        record = dataclasses.replace(record, step=cost_step(
            model, cluster, layout, _modes(model, layout, recompute_per_stage, recompute_layers),
            flash_attention=flash_attention, **order))
    basis = mfu_basis(model, cluster.gpu.peak_tflops, layout.precision, layout.seq_len, layout.framework,
                      mtp.mtp_layers(model, layout)) if record.step else None
    assumed = [balanced_routing_note(model), overlap.connections_note(layout, cluster.gpu.name),
               unvalidated_family_note(model.model_type),
               *unvalidated_layout_notes(layout.framework, layout.cp, torchao_fp8_recipe(layout))] if record.step else []
    return header | costed | {"time_s": record.time_s(rates=True), "mfu_basis": basis,
                              "assumptions": [a for a in assumed if a]}


def _modes(model: ModelSpec, layout: Layout, recompute_per_stage, recompute_layers) -> tuple[str, ...] | None:
    """Each decoder layer's recompute mode: `--recompute-layers` as given, else the per-stage counts'
    (`evaluation.layer_modes`); None = `layout.recompute` on every layer."""
    if recompute_layers is None and recompute_per_stage is not None:
        return layer_modes(recompute_per_stage, stage_layers(model, layout))
    return recompute_layers


def _costed(model: ModelSpec, cluster, record: Evaluation, reserve_bytes: int | None,
            at_risk_margin: float, ranked=None, modes: tuple[str, ...] | None = None) -> Evaluation:
    """`record` with every stage's memory and the step's collectives; `ranked` / `modes`: each
    stage's layers in the order its counts are handed out and each layer's mode, where the
    caller knows them per layer (`evaluation.stage_modes`).

    Raises:
        SpecError: per-stage counts that do not match the split (key --recompute-per-stage), or a
            layout whose costing is undefined."""
    layout, counts = record.layout, record.recompute_per_stage
    if counts is not None:
        layers = stage_layers(model, layout)
        if len(counts) != layout.pp or any(sum(c.values()) != len(ls) for c, ls in zip(counts, layers)):
            raise SpecError(f"value {[sum(c.values()) for c in counts]} layers per stage must match "
                            f"the split {[len(ls) for ls in layers]}", key="--recompute-per-stage")
    stages = cost_stages(model, cluster, layout, counts, layers=ranked, reserve_bytes=reserve_bytes,
                         at_risk_margin=at_risk_margin)
    if modes is None and counts is not None:
        modes = layer_modes(counts, layers)
    colls = collectives(model, layout, recompute_layers=modes,
                        ep_gpus_per_domain=ep_gpus_per_domain(layout, cluster.scaleup_domain_gpus))
    return dataclasses.replace(record, stages=stages, collectives=tuple(colls))


def _memory_and_communication(record: Evaluation, at_risk_margin: float) -> dict:
    """explain's memory terms (the fullest stage), verdict, communication and details."""
    mem, layout = record.worst, record.layout
    return {
        "memory_bytes": record.memory_bytes(with_stage=False),
        "memory_verdict": record.memory_verdict,
        "communication_bytes_per_step": record.communication_bytes_per_step(),
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
                            for c in record.collectives],
        },
    }


def _deepep(cluster, layout: Layout) -> list[Violation]:
    """The error `deepep_node_count` for a flex dispatcher whose backend on this cluster is DeepEP
    (`frameworks.megatron.flex_backend`) over an expert tp x ep group DeepEP's normal kernels do not run at
    (`placement.overlap.deepep_blocked`); the same rule `check` applies to a script's flags."""
    why = overlap.deepep_blocked(layout, mg.flex_backend(cluster.gpus_per_node, cluster.scaleup_domain_gpus))
    return [Violation(rule="deepep_node_count", message=f"flex dispatcher with DeepEP at expert tp x ep "
                      f"{layout.etp * layout.ep}: {why}", fix=deepep.fix_words(layout.etp * layout.ep, "megatron"))
            ] if why else []
