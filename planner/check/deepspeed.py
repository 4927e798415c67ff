"""Reader of DeepSpeed JSON configs (`deepspeed.initialize(config=...)`) into a gate `Target`.

Key names, defaults and sources: `planner.frameworks.deepspeed` (the table the writer shares). How
they are read, as DeepSpeed reads them (deepspeedai/DeepSpeed edaa722 and
https://www.deepspeed.ai/docs/config-json/):
- global batch, micro-batch and gradient accumulation steps: `deepspeed/runtime/config.py`
  `DeepSpeedConfig._set_batch_related_parameters` derives a missing one from the other two by floor
  division and `_batch_assertion` asserts each > 0 and global = micro x gas x world_size, where
  world_size is the data-parallel size (`mpu.get_data_parallel_world_size()`). This reader
  reproduces both; a failed assertion is the finding `deepspeed_batch_size` with the three numbers
  and dp, and the layout is then costed at the batch its fix gives (micro x gas x dp), so the placement
  rule batch_divisible does not report the same mismatch a second time with another fix.
- the ZeRO stage 0-3 (the deprecated boolean form of the section reads as stage 1 / 0,
  `read_zero_config_deprecated`); the optimizer and parameter offload devices in none | cpu | nvme
  and their deprecated booleans -> offload optimizer / parameters. Whether the stage admits the
  offload is the gate's rule, not repeated here.
- precision: the bf16 (or legacy bfloat16) and fp16 sections' `enabled`; both true is what
  `DeepSpeedConfig.__init__` asserts against ('bfloat16 and fp16 modes cannot be simultaneously
  enabled'): finding `deepspeed_fp16_and_bf16`. Neither: DeepSpeed keeps fp32 weights and compute,
  which the cost model does not cover (SpecError).
- the optimizer type (`config.py` `get_optimizer_name`): names in `DEEPSPEED_OPTIMIZERS` are matched
  lower-cased, so Adam / AdamW in any case -> adamw (same states); any other name is looked up
  case-sensitively in `torch.optim` (`runtime/engine.py` `_configure_basic_optimizer`), so `SGD`
  -> sgd. No optimizer section: the client code passes its own; checked as AdamW (the HF
  Trainer's default and the largest state of those costed, so a pass cannot come from this
  assumption) with the warning `deepspeed_optimizer_assumed`.
- the AutoTP size (0 = off) -> tp; dp = gpus / tp (`deepspeed/utils/groups.py`
  `_init_tp_mesh_device` builds a (world // tp, tp) mesh: a tp not dividing the GPU count is the
  finding `deepspeed_autotp`, as is an inner tp size other than 1 or the AutoTP size, which
  `engine.py` `_apply_autotp_partitioning` raises on).

Not in a DeepSpeed JSON, so fixed or asked for: pipeline parallelism is built in code
(`PipelineModule(num_stages=...)`; the `pipeline` section holds only options): pp = 1. Activation
checkpointing is switched on by the model code (`deepspeed.checkpointing.checkpoint`, HF
`gradient_checkpointing_enable`), not by the JSON (its activation-checkpointing section only
tunes it): recompute "none", the most memory, with the warning `deepspeed_recompute_assumed`
when that section is present. The model, cluster, GPU count and sequence length come from
--model, --cluster, --gpus and --seq-len (required). Values the Hugging Face Trainer fills
("auto") must be resolved numbers, except the global batch, which the Trainer and DeepSpeed both
set to micro x gas x dp. Ulysses sequence parallelism > 1 and AutoEP are not read: bad input rather
than a silently different layout.

DeepSpeed ignores a top-level key it does not know, so a misspelled `zero_optimisation` runs (and
is checked) as ZeRO-0; a top-level key close to one read is the warning `deepspeed_unknown_key`
naming the key meant. A number written as a JSON string ("3") is bad input saying so.
"""

from __future__ import annotations

import difflib
import json
import math
import shlex
from pathlib import Path

from planner.check.gate import Target, collect, raise_bad_values, raise_missing
from planner.errors import SpecError, shown
from planner.frameworks import deepspeed as ds
from planner.frameworks.deepspeed import KEY as K
from planner.placement.layout import Layout
from planner.placement.rules import Violation
from planner.specs.cluster import load_cluster
from planner.specs.limits import MAX_BATCH_TOKENS
from planner.specs.model import load_model

KIND = "deepspeed-config"
"""The `kind` of a DeepSpeed config Target."""
FRAMEWORK = "deepspeed"
"""The Layout framework of a DeepSpeed config."""

TRAIN, MICRO, GAS = K["global_batch_size"], K["micro_batch_size"], K["num_microbatches"]
"""The three batch keys DeepSpeed derives one another from."""
_NEAR_MISS_RATIO = 0.75
"""difflib ratio at or above which an unknown top-level key is reported as a misspelling of a
key read. [Empirical] chosen on the misspellings zero_optimisation, optimiser, bf_16,
train_micro_batch_size, activation_checkpoint, tensor_paralel (all >= 0.8) and DeepSpeed's other
top-level keys (`planner.frameworks.deepspeed.OTHER_TOP_LEVEL`: none >= 0.75 against a key read)."""

def read(path: Path, data: dict, *, model: str | None, cluster: str | None, gpus: int | None,
         seq_len: int | None, settings: dict[str, str] | None = None) -> Target:
    """The Target a DeepSpeed JSON config describes, on the options' model, cluster and GPUs.

    Args:
        path: the config file (for messages).
        data: its parsed top level.
        model, cluster: catalog names or paths (--model, --cluster); required.
        gpus: GPUs the job runs on (--gpus); required.
        seq_len: tokens per sequence (--seq-len); required.
        settings: the values the Hugging Face Trainer would fill the file's "auto" keys with (`check --set
            KEY=VALUE`, `resolve_auto`).

    Raises:
        SpecError: a missing option, a malformed or unsupported value (file and key named), an
            option the file contradicts, a model or cluster that does not load.
    """
    file = str(path)
    _require(file, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    data = resolve_auto(data, settings or {}, file)
    spec = load_model(model)
    bad: list[SpecError] = []  # each section read on past a bad value: one run names them all
    tp, findings = collect(lambda: _tensor_parallel(data, file, gpus, bad), bad, (1, []))
    dp = max(1, gpus // tp)
    collect(lambda: _unsupported(data, file, dp, gpus, tp, bad), bad, None)
    train, micro, gas, batch_findings = collect(lambda: _batch(data, file, dp, bad), bad, (dp, 1, 1, []))
    collect(lambda: _bound(file, train, micro, seq_len), bad, None)
    stage, offload = collect(lambda: _zero(data, file, bad), bad, (ds.DEFAULT["zero_stage"], frozenset()))
    buckets, bucket_findings = collect(lambda: _buckets(data, file, stage, spec.hidden_size), bad, ({}, []))
    precision, precision_findings = collect(lambda: _precision(data, file), bad, ("bf16", []))
    optimizer, optimizer_findings = collect(lambda: _optimizer(data, file), bad, ("adamw", []))
    collect(lambda: (_communication_dtype(data, file), _overlaps(data, file, stage, buckets)), bad, None)
    keys: set[str] = set()  # one line per key: a bucket size below the ZeRO bounds is also `_buckets`' bad value
    raise_bad_values(file, [e for e in bad if e.key is None or not (e.key in keys or keys.add(e.key))])
    layout = Layout(dp=dp, tp=tp, pp=1, zero_stage=stage, micro_batch_size=max(1, micro),
                    global_batch_size=max(1, micro) * max(1, gas) * dp if batch_findings else max(1, train),
                    seq_len=seq_len, recompute="none",
                    offload=offload, optimizer=optimizer, precision=precision, framework=FRAMEWORK,
                    grad_reduce_dtype=_communication_dtype(data, file),
                    buckets=tuple(sorted((k, v) for k, v in buckets.items() if v != ds.DEFAULT[k])) or None,
                    **_overlaps(data, file, stage, buckets))
    findings += (bucket_findings + batch_findings + precision_findings + optimizer_findings + _recompute_note(data, file)
                 + _near_misses(data) + _unknown_zero_keys(data))
    return Target(file=file, kind=KIND, model=spec,
                  cluster=load_cluster(cluster, gpus=gpus), layout=layout,
                  findings=tuple(findings))


def _require(file: str, **given) -> None:
    """Every option of `given` that is None, in one error (`gate.raise_missing`)."""
    what = {"model": "the model", "cluster": "the cluster", "gpus": "the GPU count",
            "seq_len": "the sequence length"}
    raise_missing(file, [SpecError(f"{option} is required: a DeepSpeed config does not name "
                                   f"{what[name]}", file=file, key=option)
                         for name, value in given.items() if value is None
                         for option in ["--" + name.replace("_", "-")]])


def _section(data: dict, key: str, file: str, where: str | None = None) -> dict:
    """data[key] as a mapping ({} when absent)."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise SpecError(f"value {value!r} must be a JSON object", file=file, key=where or key)
    return value


def _quoted_int(value: object, file: str, where: str) -> None:
    """A JSON string holding an integer ("3") is refused as a string, not as an unknown value."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        raise SpecError(f"value {value!r} is a string; it must be an integer: write "
                        f"{int(value)} without quotes", file=file, key=where)


def _auto_refused(file: str, where: str, what: str) -> SpecError:
    """The bad input of an "auto" the check was not given the Trainer's value of (`resolve_auto`), or of one
    the Trainer does not fill (DeepSpeed itself takes no "auto" there)."""
    if where not in ds.TRAINER_SETTABLE:
        return SpecError(f"value 'auto' is not one the Hugging Face Trainer fills here (it fills "
                         f"{', '.join(ds.TRAINER_FILLS)}); give the {what}", file=file, key=where)
    return SpecError(f"value 'auto' is filled in by the Hugging Face Trainer from its "
                     f"{ds.TRAINER_FILLS[where]}; give the {what} it resolves to: `planner check "
                     f"{shlex.quote(file)} --set {where}=VALUE`", file=file, key=where)


def resolve_auto(data: dict, settings: dict[str, str], file: str) -> dict:
    """`data` with the "auto" values of `settings`' keys (`ds.TRAINER_SETTABLE`, dotted) replaced by the
    values given (JSON scalars: 4, true), as the Hugging Face Trainer replaces them with its arguments
    (`ds.TRAINER_FILLS`); the file is not changed.

    Raises:
        SpecError (key --set): a key the check does not resolve, or one the file does not set to "auto"
            (the Trainer fills only "auto"; a number written in the file is what runs).
        SpecError (key: the first open one): "auto" left in keys the check reads, all named with the
            `--set` words that resolve them (the global batch follows from the other two)."""
    out = json.loads(json.dumps(data))
    for key, text in settings.items():
        if key not in ds.TRAINER_SETTABLE:
            raise SpecError(f"value {key + '=' + text!r}: --set resolves the Hugging Face Trainer's 'auto' values of "
                            f"{', '.join(ds.TRAINER_SETTABLE)}", file=file, key="--set")
        *sections, name = ds.section(key)
        node = _value_at(out, ".".join(sections)) if sections else out
        if not isinstance(node, dict) or node.get(name) != "auto":
            raise SpecError(f"{key} is not 'auto' in the file: the Trainer fills only 'auto' values, so "
                            f"the file's own value is what runs; drop --set {key}", file=file, key="--set")
        try:
            node[name] = json.loads(text)
        except json.JSONDecodeError:
            node[name] = text
    open_keys = [key for key in ds.TRAINER_SETTABLE if _value_at(out, key) == "auto"]
    if TRAIN in open_keys and MICRO in out and GAS in out:
        open_keys.remove(TRAIN)  # the Trainer and DeepSpeed both make it micro x accumulation x dp
    if open_keys:
        raise SpecError(f"value 'auto' is filled in by the Hugging Face Trainer (from "
                        + "; ".join(f"{key}: its {ds.TRAINER_FILLS[key]}" for key in open_keys)
                        + f"); give what it resolves to: `planner check {shlex.quote(file)} "
                        + " ".join(f"--set {key}={_PLACEHOLDER.get(key, 'N')}" for key in open_keys) + "`",
                        file=file, key=open_keys[0])
    return out


_PLACEHOLDER = {K["bf16"]: "true|false", K["fp16"]: "true|false"}
"""What `resolve_auto`'s message writes for a key's value (N: a number)."""


def _value_at(data: dict, key: str) -> object:
    """The value at dotted `key` of `data` (None: absent)."""
    for part in ds.section(key):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _int(data: dict, key: str, file: str, where: str, *, minimum: int) -> int | None:
    """data[key] as an integer >= minimum; None when absent; "auto" is `_auto_refused`."""
    value = data.get(key)
    if value is None:
        return None
    if value == "auto":
        raise _auto_refused(file, where, "number")
    _quoted_int(value, file, where)
    if type(value) is not int or value < minimum:
        raise SpecError(f"value {value!r} must be an integer >= {minimum}", file=file, key=where)
    return value


def _bool(data: dict, key: str, file: str, where: str) -> bool:
    value = data.get(key, False)
    if value == "auto":
        raise _auto_refused(file, where, "true or false")
    if not isinstance(value, bool):
        raise SpecError(f"value {value!r} must be true or false", file=file, key=where)
    return value


def _tensor_parallel(data: dict, file: str, gpus: int, bad: list[SpecError]) -> tuple[int, list[Violation]]:
    """tp from the AutoTP size (0 = off), and what DeepSpeed raises on it; each bad value added to `bad`."""
    top, size_key = ds.section(K["tp"])
    section = _section(data, top, file)
    size = collect(lambda: _int(section, size_key, file, K["tp"], minimum=0), bad, None) or ds.DEFAULT["tp"]
    tp = max(1, size)
    out = []
    if gpus % tp:
        out.append(Violation(rule="deepspeed_autotp",
                             message=f"{K['tp']}={tp} does not divide the {gpus} "
                                     f"GPUs: DeepSpeed builds a (dp={gpus // tp}, tp={tp}) mesh "
                                     f"that does not cover the world",
                             fix=f"run on a multiple of {tp} GPUs, or pick an {size_key} "
                                 f"dividing {gpus}"))
    _, inner_key, tp_size_key = ds.section(K["tp_size"])
    inner = collect(lambda: _section(section, inner_key, file, f"{top}.{inner_key}"), bad, {})
    tp_size = collect(lambda: _int(inner, tp_size_key, file, K["tp_size"], minimum=1), bad, None)
    if tp > 1 and tp_size not in (None, 1, tp):
        out.append(Violation(rule="deepspeed_autotp",
                             message=f"{K['tp_size']}={tp_size} but {K['tp']}={tp}: DeepSpeed "
                                     f"raises on the mismatch",
                             fix=f"drop {K['tp_size']} or set it to {tp}"))
    return tp, out


def _unsupported(data: dict, file: str, dp: int, gpus: int, tp: int, bad: list[SpecError]) -> None:
    """Ulysses and AutoEP change the layout in ways this reader does not map; a data-parallel
    size that --gpus contradicts is bad input; each added to `bad`, so one run names them all."""
    collect(lambda: _ulysses(data, file), bad, None)
    collect(lambda: _auto_ep(data, file), bad, None)
    collect(lambda: _data_parallel(data, file, dp, gpus, tp), bad, None)


def _ulysses(data: dict, file: str) -> None:
    sp = data.get(K["cp"], ds.DEFAULT["cp"])
    _quoted_int(sp, file, K["cp"])
    if type(sp) is not int or sp != 1:
        raise SpecError(f"value {sp!r}: Ulysses sequence parallelism is not read by this check; "
                        f"check the layout with `planner explain --cp`", file=file, key=K["cp"])


def _auto_ep(data: dict, file: str) -> None:
    top, enabled = ds.section(K["ep"])
    if _section(data, top, file).get(enabled, ds.DEFAULT["ep"]) is not False:
        raise SpecError(f"AutoEP ({K['ep']}) is not read by this check; check the layout with "
                        f"`planner explain --ep`", file=file, key=K["ep"])


def _data_parallel(data: dict, file: str, dp: int, gpus: int, tp: int) -> None:
    given = data.get(K["dp"])
    _quoted_int(given, file, K["dp"])
    if given is not None and given != dp:
        raise SpecError(f"{K['dp']}={given!r} but --gpus {gpus} / tp {tp} gives dp={dp}; "
                        f"give consistent values", file=file, key=K["dp"])


def _batch(data: dict, file: str, dp: int, bad: list[SpecError]) -> tuple[int, int, int, list[Violation]]:
    """(global batch, micro-batch, gradient accumulation steps, findings) as DeepSpeed derives
    and asserts them (`DeepSpeedConfig._set_batch_related_parameters`, `_batch_assertion`); each bad one of
    the three added to `bad` (then (dp, 1, 1, []))."""
    before = len(bad)
    micro = collect(lambda: _int(data, MICRO, file, MICRO, minimum=1), bad, None)
    gas = collect(lambda: _int(data, GAS, file, GAS, minimum=1), bad, None)
    if data.get(TRAIN) == "auto" and micro is not None and gas is not None:
        train = None  # the Trainer fills micro x gas x dp: what DeepSpeed derives below
    else:
        train = collect(lambda: _int(data, TRAIN, file, TRAIN, minimum=1), bad, None)
    if len(bad) > before:
        return dp, 1, 1, []
    derived = ""
    if train is not None and micro is not None and gas is None:
        gas, derived = train // micro // dp, f"{GAS} derived as {train} // {micro} // {dp}"
    elif train is not None and gas is not None and micro is None:
        micro, derived = train // dp // gas, f"{MICRO} derived as {train} // {dp} // {gas}"
    elif micro is not None and gas is not None and train is None:
        train = micro * gas * dp
    elif train is not None and micro is None and gas is None:
        gas, micro, derived = 1, train // dp, f"{MICRO} derived as {train} // {dp}"
    elif micro is not None and train is None:
        train, gas = micro * dp, 1
    elif train is None and micro is None:
        raise SpecError(f"missing: give {TRAIN} or {MICRO} (DeepSpeed asserts one of them is "
                        f"provided)", file=file, key=MICRO)
    if micro > 0 and gas > 0 and train == micro * gas * dp:
        return train, micro, gas, []
    return train, micro, gas, [_batch_finding(train, micro, gas, dp, derived)]


def _bound(file: str, train: int, micro: int, seq_len: int) -> None:
    for key, sequences in ((MICRO, micro), (TRAIN, train)):
        if sequences * seq_len > MAX_BATCH_TOKENS:
            raise SpecError(f"{sequences:,} sequences x --seq-len {seq_len:,} exceeds "
                            f"{MAX_BATCH_TOKENS:,} tokens per step", file=file, key=key)


def _batch_finding(train: int, micro: int, gas: int, dp: int, derived: str) -> Violation:
    product = micro * gas * dp
    why = f" ({derived})" if derived else ""
    unit = max(1, micro) * dp
    fix = f"set {TRAIN}: {max(product, unit)}"
    if train % unit == 0:
        fix += f", or {GAS}: {train // unit}"
    return Violation(rule="deepspeed_batch_size",
                     message=f"{TRAIN}={train} != {MICRO} {micro} x {GAS} {gas} x dp {dp} = "
                             f"{product}{why}: DeepSpeed asserts they are equal and each > 0",
                     fix=fix)


def _zero(data: dict, file: str, bad: list[SpecError]) -> tuple[int, frozenset[str]]:
    """(ZeRO stage, offloaded states) from the ZeRO section; each bad value (the stage, an offload device or its
    deprecated switch, a value below DeepSpeed's bounds) added to `bad` and read as its default, so that one run
    names them all."""
    top, stage_key = ds.section(K["zero_stage"])
    section = data.get(top, {})
    if isinstance(section, bool):
        return int(section), frozenset()  # deprecated form: true = stage 1
    section = _section(data, top, file)
    stage = collect(lambda: _stage(section, stage_key, file), bad, ds.DEFAULT["zero_stage"])
    offload = set()
    for state, knob in ds.OFFLOAD.items():
        if collect(lambda: _offloaded(section, top, knob, file), bad, False):
            offload.add(state)
    for key, least in ds.ZERO_BOUNDS.items():
        collect(lambda: _bounded(section, top, key, least, file), bad, None)
    return stage, frozenset(offload)


def _stage(section: dict, stage_key: str, file: str) -> int:
    stage = section.get(stage_key, ds.DEFAULT["zero_stage"])
    _quoted_int(stage, file, K["zero_stage"])
    if type(stage) is not int or stage not in ds.ZERO_STAGES:
        allowed = ", ".join(map(str, ds.ZERO_STAGES))
        raise SpecError(f"value {stage!r} not allowed; allowed: {allowed}", file=file,
                        key=K["zero_stage"])
    return stage


def _offloaded(section: dict, top: str, knob: str, file: str) -> bool:
    """Whether the ZeRO section offloads the state of `knob` (its device, or the deprecated switch)."""
    _, key, device_key = ds.section(K[knob])
    old = ds.section(K[f"{knob}_deprecated"])[1]
    where = f"{top}.{key}"
    device = _section(section, key, file, where).get(device_key, ds.DEFAULT[knob]) \
        if section.get(key) is not None else ds.DEFAULT[knob]
    if device not in ds.OFFLOAD_DEVICES:
        raise SpecError(f"value {device!r} not allowed; allowed: "
                        f"{', '.join(ds.OFFLOAD_DEVICES)}", file=file, key=K[knob])
    deprecated = section.get(old)
    if deprecated is not None and not isinstance(deprecated, bool):
        raise SpecError(f"value {deprecated!r} must be true or false", file=file,
                        key=K[f"{knob}_deprecated"])
    return device != "none" or bool(deprecated)


def _bounded(section: dict, top: str, key: str, least: int, file: str) -> None:
    value = section.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if not math.isfinite(value) or value < least or value != int(value):
        raise SpecError(f"value {value!r} must be an integer {'> 0' if least else '>= 0'}: "
                        f"DeepSpeed's ZeRO config model rejects it at start-up "
                        f"(DeepSpeedZeroConfig)", file=file, key=f"{top}.{key}")


def _buckets(data: dict, file: str, stage: int, hidden_size: int) -> tuple[dict[str, int], list[Violation]]:
    """({knob: elements}, findings): the ZeRO bucket and threshold sizes the ZeRO section sets
    (`ds.BUCKETS`, under the `stage3_` alias or the field name, as DeepSpeed's config model takes
    either); those other than DeepSpeed's defaults become `Layout.buckets` (a default written out
    costs what it costs absent). "auto" is what the Hugging Face Trainer fills from the model's hidden_size
    (`ds.TRAINER_HIDDEN_SIZE`; the ZeRO-3 ones only at ZeRO-3, else left to DeepSpeed's default). An
    integer-valued JSON number (5e8) is the integer, as
    pydantic reads it; other values are `_zero`'s bad input. The finding: ZeRO-1/2 assert
    the all-gather bucket size % 2 == 0 at start-up (`ds.BUCKETS` docstring)."""
    top = ds.section(K["zero_stage"])[0]
    section = data.get(top)
    if not isinstance(section, dict):
        return {}, []
    out = {}
    for knob, field in ds.BUCKETS.items():
        alias = ds.section(K[knob])[1]
        given = [key for key in dict.fromkeys((alias, field)) if section.get(key) is not None]
        if len(given) > 1:
            raise SpecError(f"{alias} and {field} are the same DeepSpeed setting; give one",
                            file=file, key=f"{top}.{field}")
        if not given:
            continue
        value = section[given[0]]
        if value == "auto":
            if knob in ds.TRAINER_HIDDEN_SIZE and (stage == 3 or knob == "reduce_bucket"):
                out[knob] = ds.TRAINER_HIDDEN_SIZE[knob](hidden_size)
            continue
        _quoted_int(value, file, f"{top}.{given[0]}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
            raise SpecError(f"value {shown(value)} must be an integer >= 0 (elements)", file=file,
                            key=f"{top}.{given[0]}")
        out[knob] = int(value)
    findings = []
    gather = out.get("allgather_bucket")
    if stage in (1, 2) and gather is not None and gather % 2:
        findings.append(Violation(
            rule="deepspeed_bucket_alignment",
            message=f"{K['allgather_bucket']}={gather:,} is odd: ZeRO-{stage} asserts "
                    f"'{ds.BUCKETS['allgather_bucket']} must be a multiple of nccl_start_alignment_factor, 2' "
                    f"at start-up (deepspeed/runtime/zero/stage_1_and_2.py)",
            fix=f"set {K['allgather_bucket']}: {gather + 1}"))
    return out, findings


def _overlaps(data: dict, file: str, stage: int, buckets) -> dict[str, bool]:
    """The overlap knobs the ZeRO section sets (`frameworks.deepspeed` module docstring): the
    gradient-reduce overlap from its comm-overlap switch, the ZeRO-3 parameter prefetch from its
    prefetch bucket size (> 0: on; `buckets`, read by `_buckets`); a key absent leaves its knob to
    DeepSpeed's default."""
    top, overlap_key = ds.section(K["overlap_grad_reduce"])
    section = data.get(top, {})
    if not isinstance(section, dict):
        return {}
    out = {}
    if section.get(overlap_key) is not None:
        out["overlap_grad_reduce"] = _bool(section, overlap_key, file, K["overlap_grad_reduce"])
    prefetch = buckets.get("zero3_prefetch")
    if prefetch is not None and stage == 3:
        out["overlap_param_gather"] = prefetch > 0
    return out


def _precision(data: dict, file: str) -> tuple[str, list[Violation]]:
    """bf16 | fp16 from the bf16 (legacy bfloat16) and fp16 sections."""
    current, enabled = ds.section(K["bf16"])
    legacy, fp16_top = ds.section(K["bf16_legacy"])[0], ds.section(K["fp16"])[0]
    bf16_key = current if current in data or legacy not in data else legacy
    bf16 = _bool(_section(data, bf16_key, file), enabled, file, f"{bf16_key}.{enabled}")
    fp16 = _bool(_section(data, fp16_top, file), enabled, file, K["fp16"])
    if bf16 and fp16:
        return "bf16", [Violation(rule="deepspeed_fp16_and_bf16",
                                  message=f"{bf16_key}.{enabled} and {K['fp16']} are both true: "
                                          f"DeepSpeed asserts 'bfloat16 and fp16 modes cannot be "
                                          f"simultaneously enabled'",
                                  fix="enable one of them (bf16 on GPUs that have it)")]
    if not (bf16 or fp16):
        raise SpecError(f"neither {K['bf16']} nor {K['fp16']} is true: DeepSpeed then trains in "
                        f"fp32, which the cost model does not cover; enable bf16 or fp16",
                        file=file, key=K["bf16"])
    return ("bf16" if bf16 else "fp16"), []


def _communication_dtype(data: dict, file: str) -> str | None:
    """The communication dtype key `K["grad_reduce_dtype"]` (fp16 | bf16 | fp32, any case; absent
    or null: the compute dtype, `ds.GRAD_REDUCE_DTYPES`)."""
    value = data.get(K["grad_reduce_dtype"])
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in ds.GRAD_REDUCE_DTYPES:
        return value.lower()
    raise SpecError(f"value {value!r} not allowed; allowed: {', '.join(ds.GRAD_REDUCE_DTYPES)} "
                    f"(deepspeed/runtime/config.py)", file=file,
                    key=K["grad_reduce_dtype"])


def _optimizer(data: dict, file: str) -> tuple[str, list[Violation]]:
    """The costed optimizer of `optimizer.type` (module docstring)."""
    top, type_key = ds.section(K["optimizer"])
    name = _section(data, top, file).get(type_key)
    if name is None:
        return "adamw", [Violation(
            rule="deepspeed_optimizer_assumed", severity="warning",
            message="no optimizer.type: the training code passes its own optimizer; checked as "
                    "AdamW (fp32 master, m, v), the largest optimizer state costed",
            fix='name it in the config (e.g. "optimizer": {"type": "AdamW"}) if it is not AdamW')]
    if isinstance(name, str) and name.lower() in ds.OPTIMIZER_NAMES:
        return ds.OPTIMIZER_NAMES[name.lower()], []
    if isinstance(name, str) and name in ds.TORCH_OPTIMIZERS:
        return ds.TORCH_OPTIMIZERS[name], []
    hint = (f" (torch.optim names are case-sensitive: {name.upper()!r})"
            if isinstance(name, str) and name.upper() in ds.TORCH_OPTIMIZERS else "")
    raise SpecError(f"value {name!r} not supported{hint}; supported: Adam, AdamW (any case), SGD",
                    file=file, key=K["optimizer"])


def _recompute_note(data: dict, file: str) -> list[Violation]:
    """The warning that the config's checkpointing section does not say whether layers are
    recomputed; its fix is the same check with the model code's recompute (`planner check
    --recompute`, which drops this warning)."""
    if K["recompute_tuning"] not in data:
        return []
    return [Violation(rule="deepspeed_recompute_assumed", severity="warning",
                      message=f"{K['recompute_tuning']} only tunes checkpointing; whether layers "
                              f"are recomputed is set in the model code: checked without recompute "
                              f"(the most activation memory)",
                      fix=f"if the model checkpoints its layers, check again with "
                          f"`planner check {shlex.quote(file)} --recompute full`")]


def _unknown_zero_keys(data: dict) -> list[Violation]:
    """An error for each key of the ZeRO section DeepSpeed's config model does not define
    (`ds.ZERO_FIELDS`: the model forbids extra keys), with the closest one."""
    section_name = ds.section(K["zero_stage"])[0]
    section = data.get(section_name)
    if not isinstance(section, dict):
        return []
    out = []
    for key in section:
        if key in ds.ZERO_FIELDS:
            continue
        close = difflib.get_close_matches(key, sorted(ds.ZERO_FIELDS), n=1, cutoff=0.6)
        out.append(Violation(
            rule="deepspeed_unknown_key",
            message=f"{section_name}.{key} is not a field of DeepSpeed's ZeRO config"
                    + (f"; did you mean {close[0]!r}?" if close else "")
                    + " DeepSpeed's config model forbids unknown fields and stops at start-up "
                      "(runtime/zero/config.py, config_utils.py extra='forbid')",
            fix=f"rename it to {close[0]!r}" if close else f"remove {section_name}.{key}"))
    return out


def _near_misses(data: dict) -> list[Violation]:
    """A warning for each unknown top-level key close to a key read: DeepSpeed ignores unknown
    top-level keys (`DeepSpeedConfig._initialize_params` reads each key with a default), so
    `zero_optimisation` runs as ZeRO-0, which is what this check costs."""
    out = []
    for key in data:
        if key in ds.TOP_LEVEL or key in ds.OTHER_TOP_LEVEL:
            continue
        close = difflib.get_close_matches(key.lower(), ds.TOP_LEVEL, n=1, cutoff=_NEAR_MISS_RATIO)
        if close:
            out.append(Violation(
                rule="deepspeed_unknown_key", severity="warning",
                message=f"top-level key {key!r} is not a DeepSpeed key; did you mean "
                        f"{close[0]!r}? DeepSpeed ignores it, and so does this check (its "
                        f"setting is not applied)",
                fix=f"rename {key!r} to {close[0]!r}"))
    return out
