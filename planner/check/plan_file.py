"""Reader of plan files (`planner plan -o plan.yaml`) into a gate `Target`.

The file's type and schema (sections, keys, optional keys, kind, version) are
`planner.plan_document.PlanFile`, which the writer (`plan.plan_file`) fills and whose `from_dict`
checks the structure; this module checks the values and their consistency.

A plan file names the model and cluster (catalog names, or paths: a relative path is looked up from
the plan file's directory, as `planner plan -o` writes it, then from the working directory), the
GPU count, the request (sequence length, batch, precision, optimizer, framework, the keys the
search pinned, headroom, reserve), the parallelism with its pipeline split and per-stage recompute
counts (and, where those do not say which of a stage's layers are recomputed, `recompute_layers`:
each layer's mode, `recompute_mix.format_layers`), and what `plan` predicted.

Structure is bad input (SpecError, exit 2, one line naming the file and the key path, once):
- a key `plan -o` does not write, at the top level, in `request`, `plan` or `plan.parallelism`
  ("did you mean" a close key, or the section a key belongs to);
- a missing key: every key `plan -o` writes there is required, except `request.fixed` (a
  hand-written plan pinned nothing) and `plan.parallelism.etp` (absent from files written before
  the expert tensor-parallel degree was recorded; it defaults to 1, the only value those had);
- a wrong type or a value outside the CLI's bounds (`planner.specs.limits`; headroom in [0, 0.9],
  reserve in [0, 1024 GiB] as `--headroom` / `--reserve-gib`), a value no Layout takes;
- a model or cluster that does not load (its message, under the plan file's `model` / `cluster` /
  `gpus` key). `predicted` and `solver` are informational and free-form, except that
  `predicted.time_s.step` and `predicted.memory_bytes.total`, where present, must be numbers.

Values that are well-formed but inconsistent with each other (num_microbatches vs the batch, the
parallelism's batch vs the request's, recompute counts vs the split, a pinned `request.fixed`
value vs the parallelism) are findings (rule plan_consistency) the gate fails on.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path

from planner.check.gate import Target, collect, raise_bad_values
from planner.cost.memory import stage_layers
from planner.evaluation import stage_modes
from planner.errors import SpecError, shown
from planner.placement import pipeline_layout, recompute_mix
from planner.placement.layout import (OFFLOAD_MODULES, OFFLOAD_TARGETS, OVERLAP_KNOBS, PRECISION_KNOBS, RECOMPUTE_MODES,
                                      RECOMPUTE_MODULES, Layout)
from planner.placement.rules import Violation
from planner.plan_document import KIND, VERSION, PlanFile, looks_like_plan_file  # noqa: F401 (check reads them here)
from planner.plan_document import KEYS as _KEYS, OPTIONAL as _OPTIONAL, path as _path  # noqa: F401
from planner.search.mesh import FIXABLE
from planner.specs import files
from planner.specs.cluster import load_cluster
from planner.specs.limits import MAX_BATCH_TOKENS, MAX_GPUS, MAX_SEQ_LEN, MAX_VPP
from planner.specs.model import load_model

MAX_HEADROOM = 0.9
"""Largest request.headroom accepted: `planner plan --headroom`'s bound (planner/cli.py)."""
MAX_RESERVE_BYTES = 1024 * 2**30
"""Largest request.reserve_bytes accepted: `--reserve-gib`'s bound, 1024 GiB (planner/cli.py)."""

_PAR_INTS = {"dp": (1, MAX_GPUS), "tp": (1, MAX_GPUS), "pp": (1, MAX_GPUS), "cp": (1, MAX_GPUS),
             "ep": (1, MAX_GPUS), "etp": (1, MAX_GPUS), "zero_stage": (0, 3),
             "micro_batch_size": (1, MAX_BATCH_TOKENS), "global_batch_size": (1, MAX_BATCH_TOKENS),
             "num_microbatches": (1, MAX_BATCH_TOKENS), "vpp": (1, MAX_VPP)}
"""plan.parallelism integer -> [min, max]: a degree cannot exceed the largest GPU count, a batch
count the largest batch in tokens (each sequence holds >= 1 token)."""
_REQUEST_LAYOUT = ("seq_len", "global_batch_size", "precision", "optimizer", "framework",
                   "grad_reduce_dtype", "recompute_modules", "offload_modules", *PRECISION_KNOBS)
"""request keys that are Layout fields (a Layout error on them is reported under `request.`)."""


def read_plan_file(path: str | Path, data: dict | None = None) -> Target:
    """The Target a plan file describes.

    Args:
        path: the plan file (YAML or JSON).
        data: its parsed top level, when the caller has read it already.

    Raises:
        SpecError: unreadable file, syntax error, unknown, missing or mistyped key, value out of
            bounds, unknown kind or version, a model or cluster that does not load, a value no
            Layout accepts (module docstring).
    """
    path = Path(path)
    file = str(path)
    data = files.read_mapping(path, "plan file keys") if data is None else data
    doc = PlanFile.from_dict(data, file)
    request, par = doc.request, doc.parallelism
    bad: list[SpecError] = []  # every bad value of the file, one line each (`gate.raise_bad_values`)
    req = collect(lambda: _request(request, file), bad, None)
    values = {k: collect(lambda k=k: _int(par, k, file, f"plan.parallelism.{k}", *_PAR_INTS[k]), bad, 1)
              for k in _PAR_INTS if k in par}
    per_stage, uniform = collect(lambda: _recompute(par["recompute"], file), bad, (None, "none"))
    if "predicted" in data:
        collect(lambda: _check_predicted(doc.predicted, file), bad, None)
    gpus = collect(lambda: _int(data, "gpus", file, "gpus", 1, MAX_GPUS), bad, 1)
    raise_bad_values(file, bad)
    layout = _layout(par, values, req, uniform, file)
    model = load_beside(load_model, data, "model", path)
    cluster = load_beside(load_cluster, data, "cluster", path, gpus=gpus)
    per_layer = (_recompute_layers(par["recompute_layers"], model, layout, per_stage, file)
                 if "recompute_layers" in par else None)
    return Target(file=file, kind=KIND, model=model, cluster=cluster, layout=layout,
                  recompute_per_stage=per_stage, recompute_layers=per_layer,
                  reserve_bytes=req["reserve_bytes"],
                  at_risk_margin=req["headroom"], predicted=doc.predicted,
                  findings=tuple(_consistency(values, layout, per_stage, model, req["fixed"])))


# ---------------------------------------------------------------- values


def _request(request: dict, file: str) -> dict:
    """The request's values: the Layout fields, headroom, reserve_bytes, fixed."""
    seq_len = _int(request, "seq_len", file, "request.seq_len", 1, MAX_SEQ_LEN)
    gbs = _int(request, "global_batch_size", file, "request.global_batch_size", 1, MAX_BATCH_TOKENS)
    if gbs * seq_len > MAX_BATCH_TOKENS:
        raise SpecError(f"value {gbs} x seq_len {seq_len} = {gbs * seq_len:,} tokens per step; at most "
                        f"{MAX_BATCH_TOKENS:,}", file=file, key="request.global_batch_size")
    headroom = request["headroom"]
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not (
            0 <= headroom <= MAX_HEADROOM):
        raise SpecError(f"value {shown(headroom)} must be a number in [0, {MAX_HEADROOM}] (as --headroom)",
                        file=file, key="request.headroom")
    reserve = _int(request, "reserve_bytes", file, "request.reserve_bytes", 0, MAX_RESERVE_BYTES)
    return {"seq_len": seq_len, "global_batch_size": gbs, "headroom": float(headroom),
            "reserve_bytes": reserve, "fixed": _fixed(request.get("fixed", {}), file),
            "grad_reduce_dtype": request.get("grad_reduce_dtype"),
            **{k: request[k] for k in (*PRECISION_KNOBS, "recompute_modules", "offload_modules") if k in request},
            **{k: request[k] for k in ("precision", "optimizer", "framework")}}


def _fixed(value, file: str) -> dict:
    """request.fixed: the keys the search pinned (FIXABLE), each with a value of its kind."""
    if not isinstance(value, dict):
        raise SpecError(f"value {shown(value)} must be a mapping of pinned keys ({', '.join(FIXABLE)})",
                        file=file, key="request.fixed")
    for key, pinned in value.items():
        where = f"request.fixed.{key}"
        if key not in FIXABLE:
            close = difflib.get_close_matches(str(key), FIXABLE, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            raise SpecError(f"unknown key; {hint}allowed: {', '.join(FIXABLE)}", file=file, key=where)
        if key == "sequence_parallel" and not isinstance(pinned, bool):
            raise SpecError(f"value {shown(pinned)} must be true or false", file=file, key=where)
        if key == "recompute" and pinned not in RECOMPUTE_MODES:
            raise SpecError(f"value {shown(pinned)} not allowed; allowed: {', '.join(RECOMPUTE_MODES)}",
                            file=file, key=where)
        if key in _PAR_INTS:
            _int(value, key, file, where, *_PAR_INTS[key])
    return dict(value)


def _layout(par: dict, values: dict, req: dict, uniform: str, file: str) -> Layout:
    sp = par["sequence_parallel"]
    if not isinstance(sp, bool):
        raise SpecError(f"value {shown(sp)} must be true or false", file=file,
                        key="plan.parallelism.sequence_parallel")
    split = par["pipeline_layers"]
    if split is not None and (not isinstance(split, list)
                              or not all(type(n) is int and n >= 0 for n in split)):
        raise SpecError(f"value {shown(split)} must be a list of layer counts (integers >= 0), one per "
                        f"stage, or null (an even split)", file=file,
                        key="plan.parallelism.pipeline_layers")
    degrees = {k: v for k, v in values.items() if k not in ("global_batch_size", "num_microbatches")}
    lists = _module_lists(par, file)
    try:
        text = par.get("pipeline_layout")
        if text is not None and not isinstance(text, str):
            raise SpecError(f"value {shown(text)} must be a layout string such as 'Et|(tt|)*30mL' "
                            f"(Megatron's pipeline-model-parallel layout string) or null",
                            key="pipeline_layout")
        stages = pipeline_layout.parse(text, values["pp"]) if text is not None else None
        return Layout(**degrees, sequence_parallel=sp, recompute=uniform, **_overlaps(par, file),
                      cp_comm_type=par.get("cp_comm_type", "p2p"),
                      moe_dispatcher=par.get("moe_dispatcher"), torch_compile=par.get("compile"),
                      buckets=_buckets(par.get("buckets")),
                      pipeline_layers=tuple(split) if split is not None else None,
                      pipeline_layout=stages, **({k: req.get(k) for k in _REQUEST_LAYOUT} | lists
                                                 | _fp8_param_gather(par, file) | _offload(par, file)))
    except SpecError as exc:
        section = "request" if exc.key in _REQUEST_LAYOUT else "plan.parallelism"
        whole = str(exc.key).startswith(("plan.", "request."))   # already the full path (fresh6 #11)
        raise SpecError(_bare(exc), file=file, key=exc.key if whole else _path(section, exc.key)) from None


def _buckets(given) -> tuple | None:
    """plan.parallelism.buckets (a hand-written DeepSpeed plan's ZeRO bucket sizes, {knob: elements} of
    `Layout.buckets`, which `--emit deepspeed` writes) as Layout pairs; Layout checks the knobs and values."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise SpecError(f"value {shown(given)} must be a mapping of bucket knob -> elements", key="buckets")
    return tuple(given.items())


def _module_lists(par: dict, file: str) -> dict:
    """plan.parallelism's recompute / offload module lists (what the search chose), which take the
    place of the request's (what it was given), as `plan.module_lists`."""
    out = {}
    for key, allowed in (("recompute_modules", RECOMPUTE_MODULES), ("offload_modules", OFFLOAD_MODULES)):
        if key not in par:
            continue
        value = par[key]
        if not isinstance(value, list) or not value or not all(m in allowed for m in value):
            raise SpecError(f"value {shown(value)} must be a list of module names ({', '.join(allowed)})",
                            file=file, key=f"plan.parallelism.{key}")
        out[key] = tuple(value)
    return out


def _offload(par: dict, file: str) -> dict:
    """plan.parallelism.offload: the states the search keeps in host memory (`Layout.offload`,
    `plan.searched_offload`); {} when absent (none)."""
    if "offload" not in par:
        return {}
    value = par["offload"]
    if not isinstance(value, list) or not value or not all(t in OFFLOAD_TARGETS for t in value):
        raise SpecError(f"value {shown(value)} must be a list of offloaded states ({', '.join(OFFLOAD_TARGETS)})",
                        file=file, key="plan.parallelism.offload")
    return {"offload": frozenset(value)}


def _fp8_param_gather(par: dict, file: str) -> dict:
    """plan.parallelism.fp8_param_gather: Megatron-LM's fp8 parameter gather as the search chose it
    (`plan._with_fp8_param_gather`), in place of the request's; {} when absent."""
    if "fp8_param_gather" not in par:
        return {}
    if type(par["fp8_param_gather"]) is not bool:
        raise SpecError(f"value {shown(par['fp8_param_gather'])} must be true or false", file=file,
                        key="plan.parallelism.fp8_param_gather")
    return {"fp8_param_gather": par["fp8_param_gather"]}


def _overlaps(par: dict, file: str) -> dict:
    """plan.parallelism.overlap: {knob: true | false} of `OVERLAP_KNOBS`, each optional (absent:
    the framework's default)."""
    value = par.get("overlap", {})
    if not isinstance(value, dict):
        raise SpecError(f"value {shown(value)} must be a mapping of {', '.join(OVERLAP_KNOBS)} to true "
                        "or false", file=file, key="plan.parallelism.overlap")
    for key, on in value.items():
        if key not in OVERLAP_KNOBS:
            raise SpecError(f"unknown key; allowed: {', '.join(OVERLAP_KNOBS)}", file=file,
                            key=f"plan.parallelism.overlap.{key}")
        if not isinstance(on, bool):
            raise SpecError(f"value {shown(on)} must be true or false", file=file,
                            key=f"plan.parallelism.overlap.{key}")
    if "compile" in par and par["compile"] is not None and not isinstance(par["compile"], bool):
        raise SpecError(f"value {shown(par['compile'])} must be true or false (torch.compile)", file=file,
                        key="compile")   # the caller prefixes plan.parallelism
    return dict(value)


def _check_predicted(predicted, file: str) -> None:
    """`predicted` is free-form, but the two numbers the gate compares must be numbers."""
    if not isinstance(predicted, dict):
        raise SpecError(f"value {shown(predicted)} must be a mapping (what `planner plan` predicted)",
                        file=file, key="predicted")
    for section, key in (("time_s", "step"), ("memory_bytes", "total")):
        part = predicted.get(section, {})
        if not isinstance(part, dict):
            raise SpecError(f"value {shown(part)} must be a mapping", file=file, key=f"predicted.{section}")
        value = part.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0):
            raise SpecError(f"value {shown(value)} must be a number >= 0", file=file,
                            key=f"predicted.{section}.{key}")


def _recompute(value, file: str) -> tuple[tuple[dict[str, int], ...] | None, str]:
    """(per-stage counts or None, the Layout's uniform mode: the most used one)."""
    key = "plan.parallelism.recompute"
    if isinstance(value, str):
        if value not in RECOMPUTE_MODES:
            raise SpecError(f"value {shown(value)} not allowed; allowed: {', '.join(RECOMPUTE_MODES)}, "
                            f"or one {{mode: count}} mapping per stage", file=file, key=key)
        return None, value
    if not isinstance(value, list) or not value:
        raise SpecError(f"value {shown(value)} must be a mode ({', '.join(RECOMPUTE_MODES)}) or one "
                        f"{{mode: count}} mapping per stage", file=file, key=key)
    stages = []
    for s, counts in enumerate(value):
        if not isinstance(counts, dict) or any(k not in RECOMPUTE_MODES for k in counts) or any(
                type(n) is not int or n < 0 for n in counts.values()):
            raise SpecError(f"stage {s}: value {shown(counts)} must map modes "
                            f"({', '.join(RECOMPUTE_MODES)}) to layer counts >= 0", file=file, key=key)
        stages.append({m: counts.get(m, 0) for m in RECOMPUTE_MODES})
    return tuple(stages), recompute_mix.majority(stages)


def _recompute_layers(value, model, layout: Layout, per_stage, file: str) -> tuple[str, ...]:
    """plan.parallelism.recompute_layers (`recompute_mix.format_layers`): each layer's mode, which
    must give every stage the counts `recompute` states.

    Raises:
        SpecError: a malformed string (`recompute_mix.parse_layers`), or per-stage counts that
            differ from `recompute`'s."""
    key = "plan.parallelism.recompute_layers"
    try:
        stages = stage_layers(model, layout)
    except SpecError as exc:
        raise SpecError(_bare(exc), file=file, key=key) from None
    groups = (pipeline_layout.decoder_counts(layout.pipeline_layout)
              if layout.pipeline_layout is not None else tuple(map(len, stages)))
    try:
        modes = recompute_mix.parse_layers(value, model.num_hidden_layers, groups, key)
    except SpecError as exc:
        raise SpecError(_bare(exc), file=file, key=key) from None
    got = [counts for _, counts in stage_modes(stages, modes)]
    want = ([{m: len(ls) if m == layout.recompute else 0 for m in RECOMPUTE_MODES} for ls in stages]
            if per_stage is None else [dict(c) for c in per_stage])
    if got != want:
        raise SpecError(f"value {shown(value)} gives stages {recompute_mix.format_stages(got)}; "
                        f"plan.parallelism.recompute gives {recompute_mix.format_stages(want)}",
                        file=file, key=key)
    return modes


def _int(data: dict, key: str, file: str, where: str, low: int, high: int) -> int:
    value = data.get(key)
    if type(value) is not int or not low <= value <= high:
        given = "missing" if key not in data else f"value {shown(value)}"
        raise SpecError(f"{given}; must be an integer in [{low}, {high:,}]", file=file, key=where)
    return value


def _bare(exc: SpecError) -> str:
    """An error's message without its `file: key: ` prefix."""
    return exc.message


# ---------------------------------------------------------------- model and cluster


def load_beside(loader, data: dict, key: str, plan_path: Path, where: str | None = None, **options):
    """The model / cluster a plan file names under `key` of `data` (a relative path is looked up
    beside the plan file, then from the working directory), its errors under the file's key `where`
    (default `key`). Training and serving plan files both read their model and cluster through it."""
    file = str(plan_path)
    ref = data[key]
    key = where or key
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError(f"value {shown(ref)} must be a non-empty string", file=file, key=key)
    beside = plan_path.parent / ref
    found = ref if Path(ref).is_absolute() or not beside.exists() else str(beside)
    try:
        return loader(found, **options)
    except SpecError as exc:
        if exc.key == "--gpus":  # the plan file's `gpus`, not an option the user passed
            raise SpecError(f"{_bare(exc)} (cluster {ref})", file=file, key="gpus") from None
        text = str(exc)
        if exc.file == ref and not Path(ref).is_absolute() and not beside.exists():
            text += (f" (a relative path is resolved from the plan file's directory, "
                     f"{plan_path.parent}, then from the working directory)")
        raise SpecError(text, file=file, key=key) from None


# ---------------------------------------------------------------- options given with a plan file

def option_findings(target: Target, *, model: str | None = None, cluster: str | None = None,
                    gpus: int | None = None, seq_len: int | None = None) -> list[Violation]:
    """Findings (rule plan_options) for `planner check` options that contradict the plan file's
    own model, cluster, GPU count or sequence length; options that agree are accepted (a CI hook
    passes one set of options to every file, plan files and framework configs alike). A model or
    cluster is compared as loaded (a catalog name and its file agree).

    Raises:
        SpecError: an option's model or cluster that does not load (bad input).
    """
    layout = target.layout
    given = {"--model": (model, lambda v: load_model(v) == target.model, target.model.name),
             "--cluster": (cluster, lambda v: load_cluster(v, gpus=target.cluster.num_gpus)
                           == target.cluster, target.cluster.name),
             "--gpus": (gpus, lambda v: v == target.cluster.num_gpus, target.cluster.num_gpus),
             "--seq-len": (seq_len, lambda v: v == layout.seq_len, layout.seq_len)}
    return contradictions(given, "plan files")


def contradictions(given: dict, files_: str) -> list[Violation]:
    """Rule plan_options: one finding per option -> (value given or None, whether it agrees with the
    file, the file's own value) that was given and disagrees; `files_` names the kind of file in the fix
    (training plan files here, serving plan files in `check.serving_plan`)."""
    return [Violation(rule="plan_options",
                      message=f"{option} {value} given, but the plan file is for {own}",
                      fix=f"give {option} {own}, or leave it out for {files_} (they name their "
                          f"model, cluster, GPU count and sequence length; keep other jobs' "
                          f"options in a separate hook entry)")
            for option, (value, agrees, own) in given.items()
            if value is not None and not agrees(value)]


# ---------------------------------------------------------------- findings


def _consistency(values: dict, layout: Layout, per_stage, model, fixed: dict) -> list[Violation]:
    """Well-formed values that contradict each other or the layout they describe."""
    return [*_microbatch_findings(values, layout), *_fixed_findings(fixed, layout, per_stage),
            *_recompute_findings(per_stage, layout, model)]


def _microbatch_findings(values: dict, layout: Layout) -> list[Violation]:
    out = []
    gbs, dp, b = layout.global_batch_size, layout.dp, layout.micro_batch_size
    m = values["num_microbatches"]
    if m != layout.num_microbatches:  # a batch that does not divide is the rule batch_divisible
        out.append(Violation(rule="plan_consistency",
                             message=f"num_microbatches={m} but global_batch_size / (dp x "
                                     f"micro_batch_size) = {gbs} / ({dp} x {b}) = {gbs / (dp * b):g}",
                             fix=_batch_fix(layout)))
    if values["global_batch_size"] != gbs:
        out.append(Violation(rule="plan_consistency",
                             message=f"plan.parallelism.global_batch_size={values['global_batch_size']} "
                                     f"but request.global_batch_size={gbs}",
                             fix="give both the same value"))
    return out


def _batch_fix(layout: Layout) -> str:
    """A change after which num_microbatches = global_batch_size / (dp x micro_batch_size) is a
    whole number >= 1 (Megatron-LM num_microbatches_calculator.py asserts it): the count itself
    where the batch divides, else a batch that divides or a smaller micro-batch."""
    gbs, dp, b = layout.global_batch_size, layout.dp, layout.micro_batch_size
    unit = dp * b
    if gbs % unit == 0:
        return f"set num_microbatches: {gbs // unit}"
    below = gbs // unit * unit
    sizes = [n for n in (below, below + unit) if n]
    fix = (f"set global_batch_size (request and plan.parallelism) to a multiple of dp x "
           f"micro_batch_size = {unit}: " + " or ".join(f"{n} (num_microbatches: {n // unit})"
                                                       for n in sizes))
    if gbs % dp == 0:  # a micro-batch that divides the per-rank batch: gcd, or all of it
        per_rank = gbs // dp
        smaller = per_rank if b > per_rank else math.gcd(per_rank, b)
        fix += f"; or micro_batch_size: {smaller} (num_microbatches: {per_rank // smaller})"
    return fix


def _fixed_findings(fixed: dict, layout: Layout, per_stage) -> list[Violation]:
    out = []
    for key, pinned in fixed.items():
        if key == "recompute":
            used = {m for c in per_stage for m, n in c.items() if n} if per_stage else {layout.recompute}
            actual = layout.recompute if per_stage is None else ", ".join(sorted(used))
            agrees = used == {pinned}
        else:
            actual = getattr(layout, key)
            agrees = actual == pinned
        if not agrees:
            out.append(Violation(
                rule="plan_consistency",
                message=f"request.fixed pins {key}={pinned!r} but plan.parallelism.{key} is {actual!r}",
                fix=f"set plan.parallelism.{key} to {pinned!r}, or re-run `planner plan` without "
                    f"--fix {key}={pinned} (then the file pins nothing of {key})"))
    return out


def _recompute_findings(per_stage, layout: Layout, model) -> list[Violation]:
    if per_stage is None:
        return []
    split = layout.pipeline_layers
    if len(per_stage) != layout.pp:
        return [Violation(rule="plan_consistency",
                          message=f"recompute lists {len(per_stage)} stages; pp={layout.pp}",
                          fix="give one {none, selective, full} count mapping per stage")]
    if split is None:
        return [Violation(rule="plan_consistency",
                          message="per-stage recompute counts need pipeline_layers",
                          fix=f"give pipeline_layers ({layout.pp} counts summing to "
                              f"{model.num_hidden_layers})")]
    return [Violation(rule="plan_consistency",
                      message=f"stage {s}: recompute counts {dict(counts)} cover "
                              f"{sum(counts.values())} layers; pipeline_layers gives it {n}",
                      fix=f"make stage {s}'s counts sum to {n}")
            for s, (counts, n) in enumerate(zip(per_stage, split)) if sum(counts.values()) != n]
