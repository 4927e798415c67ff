"""The training plan file as a type: `PlanFile`, written by `planner plan -o` (`plan.plan_file`)
and read back by `planner check` (`check.plan_file`), with its schema in one place.

A plan file names the model and cluster (catalog names or paths), the GPU count, the request
(sequence length, batch, precision, optimizer, framework, the keys the search pinned, headroom,
reserve), the parallelism (degrees, knobs, pipeline split, per-stage recompute counts and, where
those do not define it, each layer's mode), what
`plan` predicted and the solver's status. `to_dict` gives the file's mapping (key order as
written); `from_dict` checks its structure -- kind, version, no unknown and no missing key in
any section -- and raises one SpecError naming the file and the key path. Values are checked by
the reader (`check.plan_file`), which turns them into a gate `Target`.

Source: this planner's own format (docs/architecture.md §3; README "plan files").
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from planner.errors import SpecError, shown
from planner.placement.layout import OVERLAP_KNOBS, PRECISION_KNOBS

KIND = "training-plan"
"""The `kind` of a training plan file."""
VERSION = 1
"""The plan file version written and read."""

KEYS = {
    "": ("kind", "version", "model", "cluster", "gpus", "request", "plan", "predicted", "solver"),
    "request": ("seq_len", "global_batch_size", "precision", "optimizer", "framework",
                "grad_reduce_dtype", *PRECISION_KNOBS, "recompute_modules", "offload_modules", "fixed",
                "headroom", "reserve_bytes"),
    "plan": ("parallelism",),
    "plan.parallelism": ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "sequence_parallel",
                         "micro_batch_size", "global_batch_size", "num_microbatches", "vpp",
                         "recompute", "pipeline_layers", "overlap", "pipeline_layout", "cp_comm_type",
                         "moe_dispatcher", "compile", "recompute_modules", "offload_modules",
                         "recompute_layers", "fp8_param_gather", "buckets", "offload"),
}
"""Section -> the keys a plan file may hold there (`planner plan -o` writes them)."""
OPTIONAL = frozenset({"predicted", "solver", "fixed", "etp", "pipeline_layout", "recompute_layers", "grad_reduce_dtype",
                      "overlap", "cp_comm_type", "moe_dispatcher", "compile", "recompute_modules", "offload_modules",
                      "buckets", "offload", *PRECISION_KNOBS})
"""Keys that may be absent: `predicted` and `solver` (informational), `request.fixed` (a
hand-written plan pinned nothing), `plan.parallelism.etp` (files written before the expert
tensor-parallel degree was recorded: 1), `plan.parallelism.recompute_layers` (written only where
the per-stage counts do not say which of a stage's layers are recomputed), `plan.parallelism.buckets` (a
DeepSpeed plan's ZeRO bucket sizes, `Layout.buckets`; `plan` writes none), `plan.parallelism.offload`
(the states kept in host memory, `Layout.offload`: written only when any), and the knobs whose absence means
the default."""
OVERLAP_KEYS = OVERLAP_KNOBS
"""Keys of `plan.parallelism.overlap` (each optional: absent = the framework's default)."""


@dataclass(frozen=True, kw_only=True)
class PlanFile:
    """One training plan file (module docstring). Sections are mappings as written."""

    model: object
    """The model's catalog name or path, as the user named it (checked by the reader)."""
    cluster: object
    """The cluster's catalog name or path."""
    gpus: object
    """GPU count of the cluster (checked by the reader: an integer in the CLI's bounds)."""
    request: dict
    """request: {key of KEYS["request"]: value}."""
    parallelism: dict
    """plan.parallelism: {key of KEYS["plan.parallelism"]: value}."""
    predicted: dict | None = None
    """What `plan` predicted (time_s, memory_bytes, ...); None = absent."""
    solver: dict | None = None
    """The solver's status and counters, plan_rank; None = absent."""

    def to_dict(self) -> dict:
        """The file's top-level mapping, keys in the order `planner plan -o` writes them."""
        out = {"kind": KIND, "version": VERSION, "model": self.model, "cluster": self.cluster,
               "gpus": self.gpus, "request": dict(self.request),
               "plan": {"parallelism": dict(self.parallelism)}}
        if self.predicted is not None:
            out["predicted"] = self.predicted
        if self.solver is not None:
            out["solver"] = self.solver
        return out

    @classmethod
    def from_dict(cls, data: dict, file: str = "") -> PlanFile:
        """The PlanFile a parsed mapping holds.

        Raises:
            SpecError (file, key path): a kind other than KIND, a version other than VERSION, a
                section that is not a mapping, an unknown key (with "did you mean" or the section it
                belongs to), a missing key outside OPTIONAL.
        """
        _check_header(data, file)
        _check_keys(data, "", file)
        request = _mapping(data, "request", file, "request")
        _check_keys(request, "request", file)
        plan = _mapping(data, "plan", file, "plan")
        _check_keys(plan, "plan", file)
        par = _mapping(plan, "parallelism", file, "plan.parallelism")
        _check_keys(par, "plan.parallelism", file)
        return cls(model=data["model"], cluster=data["cluster"], gpus=data["gpus"], request=request,
                   parallelism=par, predicted=data.get("predicted"), solver=data.get("solver"))


def looks_like_plan_file(data: dict) -> bool:
    """Whether a parsed mapping claims to be a plan file (its `kind`)."""
    return data.get("kind") == KIND


def _check_header(data: dict, file: str) -> None:
    if data.get("kind") != KIND:
        raise SpecError(f"value {shown(data.get('kind'))} not allowed; allowed: {KIND!r} (a file "
                        f"written by `planner plan -o`)", file=file, key="kind")
    if data.get("version") != VERSION:
        given = "missing key" if data.get("version") is None else f"value {shown(data['version'])} not allowed"
        raise SpecError(f"{given}; this planner reads version {VERSION}", file=file, key="version")


def _check_keys(mapping: dict, section: str, file: str) -> None:
    allowed = KEYS[section]
    for key in mapping:
        if key not in allowed:
            raise SpecError(f"unknown key; {_hint(str(key), section)}", file=file,
                            key=path(section, key))
    for key in allowed:
        if key not in mapping and key not in OPTIONAL:
            raise SpecError("missing; `planner plan -o` writes it (every plan file needs it)",
                            file=file, key=path(section, key))


def _hint(key: str, section: str) -> str:
    """Where an unknown key might have been meant: the section that has this key, a close key of
    this section's degrees by a Megatron-style long name (tensor_parallel -> tp), a close key of this
    section, else the list."""
    allowed = KEYS[section]
    homes = [path(s, key) for s, keys in KEYS.items() if key in keys]
    if homes:
        where = f"under {section}" if section else "at the top level"
        return f"{key} belongs at {' or '.join(homes)}, not {where}"
    close = [k for k in allowed if k == _initials(key)] or difflib.get_close_matches(
        key, allowed, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return f"allowed here: {', '.join(allowed)}"


def _initials(key: str) -> str:
    """tensor_model_parallel_size -> tp: a degree's long name by the initials of its words."""
    words = [w for w in key.lower().replace("-", "_").split("_")
             if w and w not in ("model", "size", "degree")]
    return "".join(w[0] for w in words)


def path(section: str, key: object) -> str:
    """The dotted key path of `key` in `section` ("" = the top level)."""
    return f"{section}.{key}" if section else str(key)


def _mapping(data: dict, key: str, file: str, where: str) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise SpecError(f"{'missing' if key not in data else f'value {shown(value)}'}; must be a mapping",
                        file=file, key=where)
    return value
