"""Reader of torchtitan job configs (TOML, `train_configs/*.toml`) into a gate `Target`.

Key names, their older spellings, defaults and sources: `planner.frameworks.torchtitan` (the table
the writer shares; pytorch/torchtitan 238fa99, the last commit with TOML configs). Every spelling
of a setting is read; a setting given under both its old and its new name is bad input.

Mapping (DESIGN.md placement semantics):
- dp = replicate degree x shard degree (shard -1 = the GPUs left after replicate x cp x tp x pp:
  `parallel_dims.py` `ParallelDims._validate`); FSDP2 (zero_stage 3, dp_shard = shard) when shard
  > 1 or cp > 1 (`ParallelDims.fsdp_enabled`; FSDP runs over dp_shard x cp), else DDP (zero_stage
  0); the reshard policy "never" without PP is ZeRO-2. torchtitan TP always shards norms over the
  sequence (`parallelize.py` `apply_tp`: SequenceParallel): sequence_parallel = tp > 1.
- micro_batch_size = the pipeline micro-batch size when pp > 1 (the older micro-batch count: the
  local batch over it), else the local batch; the global batch -1 / absent = local batch x dp
  (`train.py` `Trainer.__init__`).
- Pipeline: torchtitan's own split, `generate_llm_fqn_per_model_part` (num_layers + first/last
  stage weights spread evenly over the virtual stages; the embedding and output count as the first
  / last stage's "less layers"), or the module names per model part; virtual stage s runs on rank
  s mod pp (`pipeline_module_split`, loop style). Supported schedules: 1F1B (vpp 1) and
  Interleaved1F1B (vpp = stages per rank: from the layers per stage, else 2, as `pipeline_llm`
  chooses). GPipe, LoopedBFS, the zero-bubble and V schedules and CSV schedules hold
  micro-batches differently and are not modelled (bad input, exit 2).
- Activation checkpointing (`activation_checkpoint.py`): mode none | full | selective with option
  "op" (the op-level policy = this planner's `selective`) or an integer N (layer SAC: every N-th
  block of a rank fully checkpointed, the others none; 0 = all). `memory_budget` (a compiler
  partitioner setting) is not modelled.
- Precision: mixed-precision parameters bfloat16 -> bf16, fp8 when a float8 linear converter is on;
  float32 parameters, a bfloat16 training dtype (no fp32 master weights) and MX converters are not
  modelled (bad input). CPU offload -> parameters and optimizer offloaded.
- Model: [model] name "llama3" with flavor 8B / 70B / 405B -> llama-3.1-8b / -70b / -405b
  (`torchtitan/models/llama3/__init__.py` llama3_args); anything else needs --model.

Findings (torchtitan refuses these at start-up; the gate's own rules cover world size, heads,
layers, sequence by cp and global batch by dp x micro-batch):
- `torchtitan_parallel_dims`: ep > 1 with etp not in {1, tp} (`ParallelDims._validate`);
- `torchtitan_ddp`: DDP (replicate > 1, no FSDP) combined with tp/pp (`parallelize.py`:
  "DDP has not supported > 1D parallelism");
- `torchtitan_batch`: global batch not a multiple of local batch x dp (`train.py`); local batch not
  a multiple of the pipeline micro-batch (`pipeline_parallel.py` `build_pipeline_schedule`);
- `torchtitan_pipeline_stages`: virtual stages not a multiple of pp, or a stage count per rank the
  schedule refuses (`pipeline_parallel.py` `pipeline_llm`);
- `async_tp_needs_compile`: AsyncTP with tp > 1 without torch.compile of the model (`_async_tp`).
A key of [training], [parallelism], [model] or [activation_checkpoint] that is neither read nor a
known field is the warning `torchtitan_unknown_key`: the TOML releases from eadca48 (2025-08-28)
reject unknown fields at start-up, but the field list here is that of two commits and fields
differ between releases, so the message says the list may be stale rather than fail the file.
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from planner.check.gate import Target, attempt, raise_bad_values, raise_missing
from planner.errors import SpecError
from planner.frameworks import torchtitan as tt
from planner.frameworks.torchtitan import NAME as N
from planner.placement.layout import Layout
from planner.placement.rules import Violation
from planner.specs import files
from planner.specs.cluster import load_cluster
from planner.specs.model import ModelSpec, load_model

KIND = "torchtitan-config"
"""The Target kind of a torchtitan job config."""
FRAMEWORK = "torchtitan"

_KEYS = {setting: tt.KEYS[setting] for setting in tt.READ}
"""Setting -> (section, key) spellings this reader reads, the current one first."""


def read(path: Path, *, model: str | None, cluster: str | None, gpus: int | None,
         seq_len: int | None) -> Target:
    """The Target a torchtitan TOML job config describes (module docstring).

    Args:
        path: the .toml file.
        model: catalog name or path; required unless [model] names a catalog model.
        cluster: catalog name or path (a job config never names it); required.
        gpus: GPU count; required when the shard degree is -1.
        seq_len: tokens per sequence; required when [training] seq_len is absent.

    Raises:
        SpecError: TOML syntax error (file and line), a wrong type or unknown value (file and key),
            an unmodelled feature, a missing option, or an option the file contradicts.
    """
    path = Path(path)
    return read_doc(parse_toml(path), str(path), model=model, cluster=cluster, gpus=gpus,
                    seq_len=seq_len)


def read_doc(doc: dict, file: str, *, model: str | None, cluster: str | None, gpus: int | None,
             seq_len: int | None) -> Target:
    """`read` of a parsed job config ({section: {key: value}}, `tt.KEYS` spellings); `file`
    names it in messages (the command-line reader, `torchtitan_cli`, builds one)."""
    cfg = _Config(doc, file)
    try:
        target = _read_config(cfg, file, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    except SpecError:
        raise_bad_values(file, cfg.bad)  # the bad values first: a later error may follow from one set aside
        raise
    raise_bad_values(file, cfg.bad)
    return target


def _read_config(cfg: "_Config", file: str, *, model: str | None, cluster: str | None, gpus: int | None,
                 seq_len: int | None) -> Target:
    """`read_doc` of the typed settings (`_Config`)."""
    missing: list[SpecError] = []   # every required option left out, in one error
    spec = attempt(lambda: _model(cfg, model), missing)
    if cluster is None:
        missing.append(SpecError("--cluster is required: a torchtitan job config does not name "
                                 "the cluster", file=file, key="--cluster"))
    degrees = _degrees(cfg)
    world = attempt(lambda: _world_size(cfg, degrees, gpus), missing)
    attempt(lambda: _seq_len(cfg, seq_len), missing)
    raise_missing(file, missing)
    clus = _cluster(cfg, cluster, world, degrees)
    if degrees["shard"] == -1:
        rest = degrees["replicate"] * degrees["cp"] * degrees["tp"] * degrees["pp"]
        degrees["shard"] = max(1, world // rest)  # gate's world_size rule reports a remainder
    layout, per_stage, findings = _layout(cfg, spec, degrees, seq_len)
    findings += cfg.typos + _unknown_keys(cfg)
    return Target(file=file, kind=KIND, model=spec, cluster=clus, layout=layout,
                  recompute_per_stage=per_stage, findings=tuple(findings))


def parse_toml(path: Path) -> dict:
    """The TOML document of `path`.

    Raises:
        SpecError: unreadable, not UTF-8, a TOML syntax error (exit 2)."""
    text = files.read_text(path, kind="TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"TOML syntax error: {exc}", file=str(path)) from None


class _Config:
    """Typed access to the settings of `_KEYS`, whichever spelling the file uses. A value of the wrong type
    or range is added to `bad` and read as its default, so that one run names every bad value
    (`gate.raise_bad_values`; fresh-user review 9: this reader stopped at the first)."""

    def __init__(self, doc: dict, file: str):
        self.doc, self.file = doc, file
        self.bad: list[SpecError] = []
        for section in {s for spellings in _KEYS.values() for s, _ in spellings}:
            if section in doc and not isinstance(doc[section], dict):
                raise SpecError(f"value {doc[section]!r} must be a table ([{section}])", file=file,
                                key=section)
        self._check_typos()

    def _check_typos(self) -> None:
        """A key that is not one this reader reads but close to one (difflib ratio >= 0.8) is a
        typo: torchtitan rejects unknown fields at start-up (`config/manager.py`
        `_dict_to_dataclass`: "Invalid field names"), so it is the error `torchtitan_unknown_key`
        in `typos` (exit 1, as Megatron-LM's unknown flags and torchtitan's unknown command-line
        fields; the file is read). Other unknown keys (other versions' fields) are left alone."""
        self.typos: list[Violation] = []
        self.typo_keys: set[str] = set()
        known: dict[str, set[str]] = {}
        for spellings in _KEYS.values():
            for section, key in spellings:
                known.setdefault(section, set()).add(key)
        for section, keys in known.items():
            for key in self.doc.get(section, {}):
                close = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.8)
                if key not in keys and close:
                    self.typo_keys.add(f"{section}.{key}")
                    self.typos.append(Violation(
                        rule="torchtitan_unknown_key",
                        message=f"{section}.{key} is not a field; did you mean {section}.{close[0]}? "
                                f"(torchtitan rejects unknown fields at start-up: 'Invalid field "
                                f"names'; the value is not read, {section}.{close[0]} is costed at "
                                f"its {'default' if close[0] not in self.doc[section] else 'own value'})",
                        fix=f"write {section}.{close[0]}"))

    def where(self, name: str) -> str | None:
        """The dotted key the file gives `name` under, or None."""
        found = [f"{s}.{k}" for s, k in _KEYS[name] if k in self.doc.get(s, {})]
        if len(found) > 1:
            raise SpecError(f"given twice, as {' and as '.join(found)}: keep the current name "
                            f"{found[0]}", file=self.file, key=found[-1])
        return found[0] if found else None

    def get(self, name: str, default=None):
        key = self.where(name)
        if key is None:
            return default
        section, k = key.split(".")
        return self.doc[section][k]

    def int(self, name: str, default: int | None, *, minimum: int = 1,
            allow: tuple[int, ...] = ()) -> int | None:
        value = self.get(name, default)
        if value is None and default is None:
            return None
        if type(value) is not int or (value < minimum and value not in allow):
            extra = f" or {', '.join(map(str, allow))}" if allow else ""
            self.bad.append(SpecError(f"value {value!r} must be an integer >= {minimum}{extra}",
                                      file=self.file, key=self.where(name)))
            return default if default is not None else max(minimum, 1)  # given, so not read as absent
        return value

    def text(self, name: str, default: str, allowed: tuple[str, ...] | None = None) -> str:
        value = self.get(name, default)
        if not isinstance(value, str) or (allowed and value not in allowed):
            what = f"one of {', '.join(allowed)}" if allowed else "a string"
            self.bad.append(SpecError(f"value {value!r} not allowed; allowed: {what}", file=self.file,
                                      key=self.where(name)))
            return default
        return value

    def flag(self, name: str) -> bool:
        value = self.get(name, False)
        if not isinstance(value, bool):
            self.bad.append(SpecError(f"value {value!r} must be true or false", file=self.file,
                                      key=self.where(name)))
            return False
        return value

    def fail(self, name: str, message: str) -> SpecError:
        key = self.where(name) or f"{_KEYS[name][0][0]}.{_KEYS[name][0][1]}"
        return SpecError(message, file=self.file, key=key)


def _async_tp(cfg: _Config, tp: int) -> list[Violation]:
    """AsyncTP with tp > 1 needs torch.compile of the model: torchtitan raises at start-up.

    Source: pytorch/torchtitan@238fa99 (TOML releases) torchtitan/distributed/tensor_parallel.py
    `maybe_enable_async_tp` (called under TP only: raise RuntimeError("Async TP requires 'model' in
    --compile.components and --compile.enable")); at b5bcd76 (command line) `config/configs.py`
    `CompileConfig.__post_init__` l. 306-313 raises the same as a ValueError."""
    components = cfg.doc.get("compile", {}).get("components", ["model"])
    compiled = cfg.flag("compile") and isinstance(components, list) and "model" in components
    if tp == 1 or not cfg.flag("async_tp") or compiled:
        return []
    return [Violation(
        rule="async_tp_needs_compile",
        message=f"{tt.KEY['async_tp']} with tp={tp} without torch.compile of the model: torchtitan raises "
                f"\"Async TP requires 'model' in --compile.components and --compile.enable\" at start-up",
        fix=f"set {tt.KEY['compile']} = true (with 'model' in compile.components), or drop "
            f"{tt.KEY['async_tp']}")]


def _unknown_keys(cfg: _Config) -> list[Violation]:
    """A warning for each key of [training], [parallelism], [model], [activation_checkpoint] that
    is neither read here nor a known field (`planner.frameworks.torchtitan.OTHER_FIELDS`).
    torchtitan from eadca48 (2025-08-28, "enforce existence of .toml args in JobConfig dataclasses")
    to the TOML removal 9810191 rejects unknown fields at start-up (`config/manager.py`
    `ConfigManager._dict_to_dataclass`: "Invalid field names"); this reader's field list is of
    000204a and 238fa99, and fields differ between releases, so a key it does not know may be a
    field of the user's release: a warning that says so, not a failure."""
    out = []
    for section, others in tt.OTHER_FIELDS.items():
        read = {k for spellings in _KEYS.values() for s, k in spellings if s == section}
        for key in cfg.doc.get(section, {}):
            if key not in read and key not in others and f"{section}.{key}" not in cfg.typo_keys:
                out.append(Violation(
                    rule="torchtitan_unknown_key", severity="warning",
                    message=f"{section}.{key} is not a field of the torchtitan releases this "
                            f"check knows (000204a, 238fa99; the list may be stale for yours): if "
                            f"your release has no such field, it exits at start-up ('Invalid "
                            f"field names', config/manager.py ConfigManager, since eadca48)",
                    fix=f"remove {section}.{key} or check its spelling against your torchtitan "
                        f"version's job_config.py"))
    return out


def _model(cfg: _Config, option: str | None) -> ModelSpec:
    """The catalog model [model] names, or --model; both must agree."""
    section = cfg.doc.get("model", {})
    if not isinstance(section, dict):
        raise SpecError(f"value {section!r} must be a table ([model])", file=cfg.file, key="model")
    name, flavor = section.get("name"), section.get("flavor")
    for key, value in (("name", name), ("flavor", flavor)):
        if value is not None and not isinstance(value, str):
            raise SpecError(f"value {value!r} must be a string", file=cfg.file, key=f"model.{key}")
    named = tt.CATALOG.get((name, flavor))
    if option is None and named is None:
        known = ", ".join(f"{n} {f}" for n, f in tt.CATALOG)
        raise SpecError(f"--model is required: model.name={name!r} flavor={flavor!r} is not a "
                        f"catalog model (known: {known})", file=cfg.file, key="--model")
    if option is not None and named is not None and option != named:
        raise SpecError(f"--model {option} contradicts model.name={name!r} flavor={flavor!r} "
                        f"(= {named}); omit --model or fix the file", file=cfg.file, key="--model")
    return load_model(option or named)


def _degrees(cfg: _Config) -> dict[str, int]:
    """Degrees as the file gives them (shard may be -1). Defaults: `job_config.py` Parallelism."""
    out = {k: cfg.int(k, tt.DEFAULT[k]) for k in ("replicate", "tp", "pp", "cp", "ep", "etp")}
    out["shard"] = cfg.int("shard", tt.DEFAULT["shard"], allow=(-1,))
    return out


def _world_size(cfg: _Config, degrees: dict[str, int], gpus: int | None) -> int:
    """The ranks launched: --gpus (torchrun's ranks) when given, else the product of the degrees (with
    shard -1, --gpus is required). Ranks the degrees do not multiply to are torchtitan's start-up
    assertion (ParallelDims._validate: dp_replicate x dp_shard x cp x tp x pp == world_size), the
    gate's rule `world_size` (exit 1, as Megatron-LM's), not bad input."""
    rest = degrees["replicate"] * degrees["cp"] * degrees["tp"] * degrees["pp"]
    if degrees["shard"] == -1:
        if gpus is None:
            raise SpecError(f"--gpus is required: {cfg.where('shard') or tt.KEY['shard']}"
                            f" is -1 (all GPUs left after replicate x cp x tp x pp = {rest})",
                            file=cfg.file, key="--gpus")
        return gpus
    return rest * degrees["shard"] if gpus is None else gpus


def _cluster(cfg: _Config, cluster: str, world: int, degrees: dict[str, int]):
    """The cluster at the world size; a world size from the file's degrees that the cluster refuses
    is the file's fault, so the error names the file and its degrees (load_cluster's text kept:
    it says --gpus, an option the user may never have passed)."""
    try:
        return load_cluster(cluster, gpus=world)
    except SpecError as exc:
        if exc.key != "--gpus" or degrees["shard"] == -1:
            raise
        product = "x".join(str(degrees[k]) for k in ("replicate", "shard", "cp", "tp", "pp"))
        raise SpecError(f"the degrees replicate x shard x cp x tp x pp = {product} give world "
                        f"size {world}, which the cluster refuses ({exc})", file=cfg.file,
                        key=cfg.where("shard") or tt.KEY["shard"]) from None


def _seq_len(cfg: _Config, option: int | None) -> int:
    given = cfg.int("seq_len", None)
    if given is None and option is None:
        raise SpecError("--seq-len is required: the file does not set training.seq_len",
                        file=cfg.file, key="--seq-len")
    if given is not None and option is not None and given != option:
        raise SpecError(f"--seq-len {option} contradicts training.seq_len = {given}",
                        file=cfg.file, key="--seq-len")
    return given if given is not None else option


def _precision(cfg: _Config) -> str:
    """bf16, or fp8 with a float8 linear converter (module docstring)."""
    param = cfg.text("param_dtype", tt.DEFAULT["param_dtype"], ("bfloat16", "float32"))
    if param == "float32":
        raise cfg.fail("param_dtype", "value 'float32' not modelled (fp32 compute); "
                                                "allowed: bfloat16")
    cfg.text("reduce_dtype", tt.DEFAULT["reduce_dtype"], tuple(tt.REDUCE_DTYPES))  # float32 only
    if cfg.text("dtype", tt.DEFAULT["dtype"], ("float32", "bfloat16")) == "bfloat16":
        raise cfg.fail("dtype", "value 'bfloat16' (pure bf16 training, no fp32 master weights) is "
                                "not modelled; allowed: float32 (mixed precision)")
    converters = cfg.get("converters", [])
    if isinstance(converters, str):  # torchtitan splits a comma-separated string
        converters = [c.strip() for c in converters.split(",") if c.strip()]
    if not isinstance(converters, list) or not all(isinstance(c, str) for c in converters):
        raise cfg.fail("converters", f"value {converters!r} must be a list of converter names")
    mx = [c for c in converters if c in tt.UNMODELLED_CONVERTERS]
    if mx:
        raise cfg.fail("converters", f"converter {mx[0]!r} (MX block-scaled GEMMs) is not "
                                     f"modelled; allowed: {', '.join(tt.FP8_CONVERTERS)}")
    fp8 = any(c in tt.FP8_CONVERTERS for c in converters) or cfg.flag("float8_linear")
    return "fp8" if fp8 else "bf16"


def _fp8_recipe(cfg: _Config, precision: str) -> str | None:
    """The float8 recipe under fp8: the file's recipe (`tt.FP8_RECIPE_KEYS`; a current command
    line's is its config function's, `check.torchtitan_cli`), absent the TOML releases' tensorwise
    (`tt.TOML_FP8_RECIPE_DEFAULT`); None under bf16.

    Raises:
        SpecError: a recipe the releases do not take (`tt.FP8_RECIPES`), naming the key."""
    if precision != "fp8":
        return None
    for path in tt.FP8_RECIPE_KEYS:
        table = cfg.doc
        for part in path[:-1]:
            table = table.get(part) if isinstance(table, dict) else None
        if isinstance(table, dict) and path[-1] in table:
            value, allowed = table[path[-1]], sorted(set(tt.FP8_RECIPES["toml"] + tt.FP8_RECIPES["cli"]))
            if value not in allowed:
                raise SpecError(f"value {value!r} not allowed; allowed: {', '.join(allowed)}",
                                file=cfg.file, key=".".join(path))
            return value
    return tt.TOML_FP8_RECIPE_DEFAULT


def _layout(cfg: _Config, spec: ModelSpec, degrees: dict[str, int], seq_len: int | None
            ) -> tuple[Layout, tuple[dict[str, int], ...] | None, list[Violation]]:
    """The Layout, per-stage recompute counts and the start-up findings."""
    rep, shard, tp, pp, cp = (degrees[k] for k in ("replicate", "shard", "tp", "pp", "cp"))
    ep, etp = degrees["ep"], degrees["etp"]
    dp = rep * shard
    local = cfg.int("local_batch", tt.DEFAULT["local_batch"])
    given = cfg.int("global_batch_size", tt.DEFAULT["global_batch_size"], minimum=1, allow=(-1,))
    global_batch = local * dp if given == -1 else given
    split, vpp, findings = _pipeline(cfg, spec, pp)
    micro, more = _micro_batch(cfg, local, pp)
    findings += more + _dims_findings(degrees) + _batch_findings(global_batch, local, dp, micro)
    findings += _async_tp(cfg, tp)
    rank_layers = list(split) if split else ([spec.num_hidden_layers] if pp == 1 else None)
    mode, per_stage = _recompute(cfg, rank_layers)
    fsdp = shard > 1 or cp > 1  # ParallelDims.fsdp_enabled
    # FSDP2 that keeps parameters unsharded after forward is ZeRO-2 (parallelize.py apply_fsdp:
    # reshard_after_forward = "never" -> False; "default" -> not pp_enabled). Under PP both are
    # the run zero_stage 3 costs (rules: torchtitan ZeRO-2 with PP is its ZeRO-3).
    reshard = cfg.text("reshard", tt.DEFAULT["reshard"], ("default", "always", tt.RESHARD_NEVER))
    zero = (2 if reshard == tt.RESHARD_NEVER and pp == 1 else 3) if fsdp else 0
    tokens, precision = _seq_len(cfg, seq_len), _precision(cfg)
    offload = cfg.flag("offload")
    try:
        layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp if ep > 1 else 1,
                        dp_shard=shard if fsdp else None, zero_stage=zero,
                        sequence_parallel=tp > 1, vpp=vpp, pipeline_layers=split,
                        micro_batch_size=micro, global_batch_size=global_batch,
                        seq_len=tokens, recompute=mode,
                        offload=frozenset({"parameters", "optimizer"} if offload else ()),
                        precision=precision, framework=FRAMEWORK, fp8_recipe=_fp8_recipe(cfg, precision),
                        # AsyncTP acts only under torch.compile; absent: torchtitan's default (off)
                        tp_comm_overlap=True if cfg.flag("async_tp") and cfg.flag("compile")
                        else None,
                        # compile fuses the blocks' elementwise kernels; absent: off (eager)
                        torch_compile=True if cfg.flag("compile") else None,
                        # the TOML releases ran the plain cross-entropy (tt.CLI_LOSS_CHUNKS) and
                        # separate wq, wk, wv (fused from 3396a4b, after them: Layout.fused_qkv)
                        loss_chunks=1, fused_qkv=False)
    except SpecError as exc:
        raise SpecError(str(exc).split(": ", 1)[-1], file=cfg.file, key=exc.key) from None
    return layout, per_stage, findings


def _micro_batch(cfg: _Config, local: int, pp: int) -> tuple[int, list[Violation]]:
    """Sequences per forward: the local batch, or the pipeline micro-batch when pp > 1.

    Source: `pipeline_parallel.py` `build_pipeline_schedule` (n_microbatches = local batch //
    pipeline micro-batch size; ValueError unless it divides); the older micro-batch count setting
    was the count (default pp)."""
    if cfg.where("pp_microbatch_size") and cfg.where("pp_microbatches"):
        raise cfg.fail("pp_microbatches", f"given with {cfg.where('pp_microbatch_size')}: give "
                                          f"the micro-batch size only")
    size = cfg.int("pp_microbatch_size", tt.DEFAULT["pp_microbatch_size"])
    count = cfg.int("pp_microbatches", None)
    if count is None and (cfg.where("pp") or "").startswith("experimental."):
        count = pp  # pre-[parallelism] files (before 785c34c): microbatches defaulted to pp
    if pp == 1:
        return local, []
    if count is not None:
        if local % count:
            return max(1, local // count), [Violation(
                rule="torchtitan_batch",
                message=f"local batch {local} is not divisible into {cfg.where('pp_microbatches')}"
                        f" = {count} micro-batches",
                fix=f"use a local batch that is a multiple of {count}")]
        return local // count, []
    if local % size:
        return size, [Violation(
            rule="torchtitan_batch",
            message=f"{N['local_batch']} {local} is not divisible by {N['pp_microbatch_size']}"
                    f" {size} (torchtitan build_pipeline_schedule raises ValueError)",
            fix=f"use {N['local_batch']} {max(size, local // size * size)} or a micro-batch size "
                f"dividing {local}")]
    return size, []


def _dims_findings(d: dict[str, int]) -> list[Violation]:
    """ParallelDims._validate (etp) and the DDP-only-1D check of `parallelize.py`."""
    out = []
    if d["ep"] > 1 and d["etp"] not in (1, d["tp"]):
        out.append(Violation(rule="torchtitan_parallel_dims",
                             message=f"{N['etp']}={d['etp']} with "
                                     f"{N['ep']}={d['ep']}: torchtitan supports only "
                                     f"etp = tp ({d['tp']}) or etp = 1 (ParallelDims._validate)",
                             fix=f"set {N['etp']} to 1 or {d['tp']}"))
    fsdp = d["shard"] > 1 or d["cp"] > 1
    if d["replicate"] > 1 and not fsdp and (d["tp"] > 1 or d["pp"] > 1):
        out.append(Violation(rule="torchtitan_ddp",
                             message=f"DDP ({N['replicate']}={d['replicate']}, no "
                                     f"sharding) with tp={d['tp']} pp={d['pp']}: torchtitan raises "
                                     f"'DDP has not supported > 1D parallelism' (parallelize.py)",
                             fix=f"use {N['shard']} > 1 (FSDP/HSDP) with tp or pp"))
    return out


def _batch_findings(global_batch: int, local: int, dp: int, micro: int) -> list[Violation]:
    """global batch % (local batch x dp) (`train.py` Trainer.__init__ assert), where the
    gate's batch_divisible rule (global by dp x micro-batch) does not already say so."""
    if global_batch % (local * dp) == 0 or global_batch % (dp * micro):
        return []
    return [Violation(rule="torchtitan_batch",
                      message=f"global_batch_size {global_batch} is not a multiple of "
                              f"{N['local_batch']} x dp = {local} x {dp} = {local * dp} "
                              f"(torchtitan train.py asserts it)",
                      fix=f"use global_batch_size {max(1, global_batch // (local * dp)) * local * dp}")]


def _pipeline(cfg: _Config, spec: ModelSpec, pp: int
              ) -> tuple[tuple[int, ...] | None, int, list[Violation]]:
    """(decoder layers per pipeline rank, vpp, findings) as torchtitan splits the model."""
    if cfg.where("pp_split_points"):
        raise cfg.fail("pp_split_points", f"not modelled; use {N['pp_layers_per_stage']} or "
                                          f"{N['pp_fqns']}")
    if pp == 1:
        return None, 1, []
    if cfg.get("pp_schedule_csv"):
        raise cfg.fail("pp_schedule_csv", "CSV pipeline schedules are not modelled; supported: "
                                          "1F1B, Interleaved1F1B")
    name = cfg.text("pp_schedule", tt.DEFAULT["pp_schedule"])
    if name.lower() not in tt.SCHEDULES:
        known = name.lower() in {s.lower() for s in tt.OTHER_SCHEDULES}
        raise cfg.fail("pp_schedule", f"value {name!r} {'not modelled' if known else 'unknown'};"
                                      f" supported: 1F1B, Interleaved1F1B")
    single = tt.SCHEDULES[name.lower()] == 1
    parts, findings = _stages(cfg, spec.num_hidden_layers, pp, single)
    if parts is None:
        return None, 1, findings
    return tuple(sum(parts[r::pp]) for r in range(pp)), len(parts) // pp, findings


def _stages(cfg: _Config, n: int, pp: int, single: bool
            ) -> tuple[list[int] | None, list[Violation]]:
    """Decoder layers per virtual stage, or None with the finding torchtitan would raise.

    Source: `pipeline_parallel.py` `pipeline_llm` (stage count from
    the layers per stage: ceil((n + first + last) / per), a multiple of pp, one per
    rank for single-stage schedules, >= 2 per rank for multi-stage ones; default 1 or 2 per rank)
    and `pipeline_module_split` (num_stages % pp_degree == 0)."""
    fqns = cfg.get("pp_fqns")
    first = cfg.int("pp_first_less", tt.DEFAULT["pp_first_less"], minimum=0)
    last = cfg.int("pp_last_less", tt.DEFAULT["pp_last_less"], minimum=0)
    per = cfg.int("pp_layers_per_stage", None)
    if fqns is not None:
        parts = _fqn_layers(cfg, fqns)
        stages = len(parts)
    else:
        stages = -(-(n + first + last) // per) if per is not None else pp * (1 if single else 2)
        parts = None
    per_rank = stages // pp
    problem = None
    if stages % pp:
        problem = f"{stages} virtual stages are not divisible by {N['pp']} {pp}"
    elif single and per_rank != 1:
        problem = f"a single-stage schedule (1F1B) needs 1 stage per rank, got {per_rank}"
    elif not single and per_rank < 2:
        problem = f"a multi-stage schedule (Interleaved1F1B) needs >= 2 stages per rank, got {per_rank}"
    if problem is None and parts is None:
        parts, problem = _split(n, stages, first, last)
    if problem is not None:
        return None, [Violation(rule="torchtitan_pipeline_stages",
                                message=f"{problem} ({n} layers; torchtitan pipeline_llm raises)",
                                fix=f"change {N['pp_layers_per_stage']}, the schedule or pp")]
    return parts, []


def _split(n: int, stages: int, first: int, last: int) -> tuple[list[int] | None, str | None]:
    """Decoder layers per stage of `generate_llm_fqn_per_model_part`: n + first + last
    "effective" layers spread evenly (the remainder to the first stages); the first stage gives
    `first` of its share to the embedding, the last `last` to norm + output."""
    if stages == 1:
        return [n], None
    eff = n + first + last
    base, extra = divmod(eff, stages)
    if base == 0 or first > base or last > base:
        return None, (f"{stages} stages over {eff} effective layers (first/last stage weights "
                      f"{first}/{last}) leave {base} per stage")
    share = [base + (1 if s < extra else 0) for s in range(stages)]
    share[0] -= first
    share[-1] -= last
    return share, None


def _fqn_layers(cfg: _Config, fqns: object) -> list[int]:
    """Decoder layers (`layers.N` entries) of each model part of the module names per part."""
    if not isinstance(fqns, list) or not fqns or not all(
            isinstance(p, list) and all(isinstance(m, str) for m in p) for p in fqns):
        raise cfg.fail("pp_fqns", f"value {fqns!r} must be a list of lists of module names")
    return [sum(1 for m in part if m.startswith("layers.")) for part in fqns]


def _recompute(cfg: _Config, rank_layers: list[int] | None
               ) -> tuple[str, tuple[dict[str, int], ...] | None]:
    """(uniform mode, per-stage counts or None). Source: `activation_checkpoint.py` (`apply_ac`,
    `_apply_layer_sac`: block k of a rank, counted from 1, is fully checkpointed when k % N == 0;
    N = 0 checkpoints every block). Default mode "selective", option "2" (`job_config.py`)."""
    mode = cfg.get("ac_mode", tt.DEFAULT["ac_mode"])
    if mode == "memory_budget":
        raise cfg.fail("ac_mode", "value 'memory_budget' (compiler partitioner budget) is not "
                                  f"modelled; allowed: {', '.join(tt.AC_MODES)}")
    mode = cfg.text("ac_mode", tt.DEFAULT["ac_mode"], tt.AC_MODES)
    if mode != "selective":
        return mode, None
    option = cfg.get("ac_option", tt.DEFAULT["ac_option"])
    if option == tt.OP_SAC:
        return "selective", None
    if type(option) is int and option >= 0 or isinstance(option, str) and option.isdigit():
        every = int(option)
    else:
        raise cfg.fail("ac_option", f"value {option!r} not allowed; allowed: 'op' or a "
                                    f"non-negative integer (checkpoint every N-th block)")
    if rank_layers is None:  # a pipeline finding already fails the file
        return "none", None
    counts = tuple({"none": n - (n if every == 0 else n // every), "selective": 0,
                    "full": n if every == 0 else n // every} for n in rank_layers)
    modes = {m for c in counts for m in ("none", "full") if c[m]}
    if len(modes) == 1:
        return modes.pop(), None
    most = max(("none", "full"), key=lambda m: sum(c[m] for c in counts))
    return most, counts
