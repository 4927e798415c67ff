"""Reader of plan files (`planner plan -o plan.yaml`, DESIGN.md §5) into a gate `Target`.

A plan file names the model and cluster (catalog names, or paths: a relative path is looked up from
the plan file's directory, as `planner plan -o` writes it, then from the working directory), the request (sequence length, batch,
precision, optimizer, framework, headroom, reserve), the parallelism with its pipeline split and
per-stage recompute counts, and what `plan` predicted. Structure -- a missing key, a wrong type, a
value no Layout takes -- is bad input (SpecError, exit 2, naming the file and the key path);
values that are well-formed but inconsistent with each other (num_microbatches vs the batch,
recompute counts vs the split) are findings the gate fails on.
"""

from __future__ import annotations

from pathlib import Path

from planner.check.gate import Target
from planner.cost.memory import DEFAULT_AT_RISK_MARGIN
from planner.errors import SpecError
from planner.placement.layout import RECOMPUTE_MODES, Layout
from planner.placement.rules import Violation
from planner.specs import files
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

KIND = "training-plan"
"""The `kind` of a training plan file."""
VERSION = 1
"""The plan file version this reader reads."""

_INT_KEYS = ("dp", "tp", "pp", "cp", "ep", "zero_stage", "micro_batch_size", "vpp")
_REQUEST_KEYS = ("seq_len", "global_batch_size", "precision", "optimizer", "framework")


def looks_like_plan_file(data: dict) -> bool:
    """Whether a parsed mapping claims to be a plan file (its `kind`)."""
    return data.get("kind") == KIND


def read_plan_file(path: str | Path, data: dict | None = None) -> Target:
    """The Target a plan file describes.

    Args:
        path: the plan file (YAML or JSON).
        data: its parsed top level, when the caller has read it already.

    Raises:
        SpecError: unreadable file, syntax error, missing key, wrong type, unknown kind or version,
            a model or cluster that does not load, a value no Layout accepts.
    """
    path = Path(path)
    file = str(path)
    data = files.read_mapping(path, "plan file keys") if data is None else data
    if data.get("kind") != KIND:
        raise SpecError(f"value {data.get('kind')!r} not allowed; allowed: {KIND!r} (a file "
                        f"written by `planner plan -o`)", file=file, key="kind")
    if data.get("version") != VERSION:
        raise SpecError(f"value {data.get('version')!r} not allowed; this planner reads version "
                        f"{VERSION}", file=file, key="version")
    request = _mapping(data, "request", file)
    par = _mapping(_mapping(data, "plan", file, "plan"), "parallelism", file, "plan.parallelism")
    gpus = _int(data, "gpus", file, "gpus")
    model = load_model(_ref(_string(data, "model", file, "model"), path))
    cluster = load_cluster(_ref(_string(data, "cluster", file, "cluster"), path), gpus=gpus)
    values = {k: _int(par, k, file, f"plan.parallelism.{k}", minimum=0 if k == "zero_stage" else 1)
              for k in _INT_KEYS}
    req = {k: (_int if k in ("seq_len", "global_batch_size") else _string)(request, k, file, f"request.{k}")
           for k in _REQUEST_KEYS}
    headroom = _number(request, "headroom", file, "request.headroom", DEFAULT_AT_RISK_MARGIN)
    reserve = request.get("reserve_bytes")
    if reserve is not None:
        reserve = _int(request, "reserve_bytes", file, "request.reserve_bytes", minimum=0)
    split = par.get("pipeline_layers")
    if split is not None and (not isinstance(split, list)
                              or not all(type(n) is int and n >= 0 for n in split)):
        raise SpecError(f"value {split!r} must be a list of layer counts (integers >= 0), one per "
                        f"stage", file=file, key="plan.parallelism.pipeline_layers")
    per_stage, uniform = _recompute(par.get("recompute", "none"), file)
    sp = par.get("sequence_parallel", False)
    if not isinstance(sp, bool):
        raise SpecError(f"value {sp!r} must be true or false", file=file,
                        key="plan.parallelism.sequence_parallel")
    try:
        layout = Layout(**values, etp=_int(par, "etp", file, "plan.parallelism.etp", default=1),
                        sequence_parallel=sp,
                        pipeline_layers=tuple(split) if split is not None else None,
                        recompute=uniform, **req)
    except SpecError as exc:
        raise SpecError(str(exc).split(": ", 1)[-1], file=file,
                        key=f"plan.parallelism.{exc.key}" if exc.key else None) from None
    return Target(file=file, kind=KIND, model=model, cluster=cluster, layout=layout,
                  recompute_per_stage=per_stage, reserve_bytes=reserve, at_risk_margin=headroom,
                  predicted=data.get("predicted") if isinstance(data.get("predicted"), dict) else None,
                  findings=tuple(_consistency(par, layout, per_stage, model)))


def _consistency(par: dict, layout: Layout, per_stage, model) -> list[Violation]:
    """Well-formed values that contradict each other or the layout they describe."""
    out = []
    m = par.get("num_microbatches")
    if m is not None and m != layout.num_microbatches:
        out.append(Violation(rule="plan_consistency",
                             message=f"num_microbatches={m!r} but global_batch_size / (dp x "
                                     f"micro_batch_size) = {layout.global_batch_size} / "
                                     f"({layout.dp} x {layout.micro_batch_size}) = "
                                     f"{layout.global_batch_size / (layout.dp * layout.micro_batch_size):g}",
                             fix=f"set num_microbatches: {layout.num_microbatches} or change the batch"))
    gbs = par.get("global_batch_size")
    if gbs is not None and gbs != layout.global_batch_size:
        out.append(Violation(rule="plan_consistency",
                             message=f"plan.parallelism.global_batch_size={gbs!r} but "
                                     f"request.global_batch_size={layout.global_batch_size}",
                             fix="give both the same value"))
    if per_stage is not None:
        split = layout.pipeline_layers
        if len(per_stage) != layout.pp:
            out.append(Violation(rule="plan_consistency",
                                 message=f"recompute lists {len(per_stage)} stages; pp={layout.pp}",
                                 fix="give one {none, selective, full} count mapping per stage"))
        elif split is not None and len(split) == layout.pp:
            for s, (counts, n) in enumerate(zip(per_stage, split)):
                if sum(counts.values()) != n:
                    out.append(Violation(
                        rule="plan_consistency",
                        message=f"stage {s}: recompute counts {dict(counts)} cover "
                                f"{sum(counts.values())} layers; pipeline_layers gives it {n}",
                        fix=f"make stage {s}'s counts sum to {n}"))
        elif split is None:
            out.append(Violation(rule="plan_consistency",
                                 message="per-stage recompute counts need pipeline_layers",
                                 fix=f"give pipeline_layers ({layout.pp} counts summing to "
                                     f"{model.num_hidden_layers})"))
    return out


def _recompute(value, file: str) -> tuple[tuple[dict[str, int], ...] | None, str]:
    """(per-stage counts or None, the Layout's uniform mode: the most used one)."""
    key = "plan.parallelism.recompute"
    if isinstance(value, str):
        if value not in RECOMPUTE_MODES:
            raise SpecError(f"value {value!r} not allowed; allowed: {', '.join(RECOMPUTE_MODES)}, "
                            f"or one {{mode: count}} mapping per stage", file=file, key=key)
        return None, value
    if not isinstance(value, list) or not value:
        raise SpecError(f"value {value!r} must be a mode ({', '.join(RECOMPUTE_MODES)}) or one "
                        f"{{mode: count}} mapping per stage", file=file, key=key)
    stages = []
    for s, counts in enumerate(value):
        if not isinstance(counts, dict) or any(k not in RECOMPUTE_MODES for k in counts) or any(
                type(n) is not int or n < 0 for n in counts.values()):
            raise SpecError(f"stage {s}: value {counts!r} must map modes "
                            f"({', '.join(RECOMPUTE_MODES)}) to layer counts >= 0", file=file, key=key)
        stages.append({m: counts.get(m, 0) for m in RECOMPUTE_MODES})
    totals = {m: sum(c[m] for c in stages) for m in RECOMPUTE_MODES}
    most = max(RECOMPUTE_MODES, key=lambda m: (totals[m], -RECOMPUTE_MODES.index(m)))
    return tuple(stages), most


def _ref(ref: str, plan_path: Path) -> str:
    """A model / cluster reference: a catalog name as given; a relative path from the plan file's
    directory (as `planner plan -o` writes it), else from the working directory."""
    beside = plan_path.parent / ref
    if Path(ref).is_absolute() or not beside.exists():
        return ref
    return str(beside)


def _mapping(data: dict, key: str, file: str, where: str | None = None) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise SpecError(f"missing or not a mapping (got {value!r})", file=file, key=where or key)
    return value


def _string(data: dict, key: str, file: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"value {value!r} must be a non-empty string", file=file, key=where)
    return value


def _int(data: dict, key: str, file: str, where: str, default: int | None = None,
         minimum: int = 1) -> int:
    value = data.get(key, default)
    if type(value) is not int or value < minimum:
        shown = "missing" if key not in data else f"value {value!r}"
        raise SpecError(f"{shown}; must be an integer >= {minimum}", file=file, key=where)
    return value


def _number(data: dict, key: str, file: str, where: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise SpecError(f"value {value!r} must be a number in [0, 1)", file=file, key=where)
    return float(value)
