"""Reader of DeepSpeed JSON configs (`deepspeed.initialize(config=...)`) into a gate `Target`.

Keys read, each verified in DeepSpeed's source (deepspeedai/DeepSpeed, master of 2026-08) and in
https://www.deepspeed.ai/docs/config-json/:
- `train_batch_size`, `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`
  (`deepspeed/runtime/constants.py`; `deepspeed/runtime/config.py` `DeepSpeedConfig.
  _set_batch_related_parameters` derives a missing one from the other two by floor division and
  `_batch_assertion` asserts each > 0 and train_batch == micro x gas x world_size, where world_size
  is the data-parallel size (`mpu.get_data_parallel_world_size()`)). This reader reproduces both;
  a failed assertion is the finding `deepspeed_batch_size` with the three numbers and dp.
- `zero_optimization.stage` 0-3 (`deepspeed/runtime/zero/config.py` `ZeroStageEnum`; the
  deprecated boolean form reads as stage 1 / 0, `read_zero_config_deprecated`);
  `zero_optimization.offload_optimizer.device` / `offload_param.device` in none | cpu | nvme
  (`deepspeed/runtime/zero/offload_config.py` `OffloadDeviceEnum`) and the deprecated booleans
  `cpu_offload` / `cpu_offload_param` (same file's `new_param_fn`s) -> offload optimizer /
  parameters. Whether the stage admits the offload is the gate's rule, not repeated here.
- `bf16.enabled` (or the legacy `bfloat16` section) and `fp16.enabled`
  (`deepspeed/runtime/precision_config.py` `get_bfloat16_config` / `get_float16_config`); both
  true is what `DeepSpeedConfig.__init__` asserts against ('bfloat16 and fp16 modes cannot be
  simultaneously enabled'): finding `deepspeed_fp16_and_bf16`. Neither: DeepSpeed keeps fp32
  weights and compute, which the cost model does not cover (SpecError).
- `optimizer.type` (`config.py` `get_optimizer_name`): names in `DEEPSPEED_OPTIMIZERS` are matched
  lower-cased, so Adam / AdamW in any case -> adamw (same states); any other name is looked up
  case-sensitively in `torch.optim` (`runtime/engine.py` `_configure_basic_optimizer`), so `SGD`
  -> sgd. No optimizer section: the client code passes its own; checked as AdamW (the HF
  Trainer's default and the largest state of those costed, so a pass cannot come from this
  assumption) with the warning `deepspeed_optimizer_assumed`.
- `tensor_parallel.autotp_size` (`deepspeed/runtime/tensor_parallel/config.py` `TPTrainingConfig`;
  0 = off) -> tp; dp = gpus / tp (`deepspeed/utils/groups.py` `_init_tp_mesh_device` builds a
  (world // tp, tp) mesh: a tp not dividing the GPU count is the finding `deepspeed_autotp`, as
  is `tensor_parallel.tp.tp_size` other than 1 or autotp_size, which `engine.py`
  `_apply_autotp_partitioning` raises on).

Not in a DeepSpeed JSON, so fixed or asked for: pipeline parallelism is built in code
(`PipelineModule(num_stages=...)`; the `pipeline` section holds only options): pp = 1. Activation
checkpointing is switched on by the model code (`deepspeed.checkpointing.checkpoint`, HF
`gradient_checkpointing_enable`), not by the JSON (its `activation_checkpointing` section only
tunes it): recompute "none", the most memory, with the warning `deepspeed_recompute_assumed`
when that section is present. The model, cluster, GPU count and sequence length come from
--model, --cluster, --gpus and --seq-len (required). Values the Hugging Face Trainer fills
("auto") must be resolved numbers, except `train_batch_size`, which the Trainer and DeepSpeed both
set to micro x gas x dp. Ulysses `sequence_parallel_size` > 1 and AutoEP (`expert_parallel`) are
not read: bad input rather than a silently different layout.

DeepSpeed ignores a top-level key it does not know, so a misspelled `zero_optimisation` runs (and
is checked) as ZeRO-0; a top-level key close to one read is the warning `deepspeed_unknown_key`
naming the key meant. A number written as a JSON string ("3") is bad input saying so.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from planner.check.gate import Target
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.rules import Violation
from planner.specs.cluster import load_cluster
from planner.specs.limits import MAX_BATCH_TOKENS
from planner.specs.model import load_model

KIND = "deepspeed-config"
"""The `kind` of a DeepSpeed config Target."""
FRAMEWORK = "deepspeed"
"""The Layout framework of a DeepSpeed config."""

_OFFLOAD_DEVICES = ("none", "cpu", "nvme")
"""`OffloadDeviceEnum` values (deepspeed/runtime/zero/offload_config.py)."""
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw"}
"""DeepSpeed optimizer names (matched lower-cased) -> the costed optimizer (Adam and AdamW keep
the same fp32 master, m and v states)."""
_READ_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
              "zero_optimization", "bf16", "bfloat16", "fp16", "optimizer", "tensor_parallel",
              "activation_checkpointing", "sequence_parallel_size", "expert_parallel",
              "data_parallel_size")
"""Top-level keys this reader reads (module docstring)."""
_OTHER_KEYS = frozenset((
    "scheduler", "communication_data_type", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "amp", "gradient_clipping", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "flops_profiler", "autotuning", "steps_per_print",
    "wall_clock_breakdown", "dump_state", "memory_breakdown", "tensorboard", "wandb", "csv_monitor",
    "comet", "elasticity", "data_efficiency", "curriculum_learning", "compression_training",
    "checkpoint", "aio", "data_types", "sparse_attention", "pipeline", "disable_allgather",
    "seq_parallel_communication_data_type", "torch_autocast", "compile", "nebula",
    "hybrid_engine", "weight_quantization", "use_data_before_expert_parallelism", "timers",
    "graph_harvesting", "eigenvalue", "progressive_layer_drop", "quantize_training"))
"""Other DeepSpeed top-level keys, never reported as near misses of the keys read.
Source: https://www.deepspeed.ai/docs/config-json/ and `deepspeed/runtime/config.py`."""
_NEAR_MISS_RATIO = 0.75
"""difflib ratio at or above which an unknown top-level key is reported as a misspelling of a
key read. [Empirical] chosen on the misspellings zero_optimisation, optimiser, bf_16,
train_micro_batch_size, activation_checkpoint, tensor_paralel (all >= 0.8) and the keys of
_OTHER_KEYS (none >= 0.75 against a key read)."""
_TORCH_OPTIMIZERS = {"SGD": "sgd"}
"""torch.optim class names (matched exactly, as `getattr(torch.optim, name)`) -> costed optimizer."""


def read(path: Path, data: dict, *, model: str | None, cluster: str | None, gpus: int | None,
         seq_len: int | None) -> Target:
    """The Target a DeepSpeed JSON config describes, on the options' model, cluster and GPUs.

    Args:
        path: the config file (for messages).
        data: its parsed top level.
        model, cluster: catalog names or paths (--model, --cluster); required.
        gpus: GPUs the job runs on (--gpus); required.
        seq_len: tokens per sequence (--seq-len); required.

    Raises:
        SpecError: a missing option, a malformed or unsupported value (file and key named), an
            option the file contradicts, a model or cluster that does not load.
    """
    file = str(path)
    _require(file, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    tp, findings = _tensor_parallel(data, file, gpus)
    dp = max(1, gpus // tp)
    _unsupported(data, file, dp, gpus, tp)
    train, micro, gas, batch_findings = _batch(data, file, dp)
    _bound(file, train, micro, seq_len)
    stage, offload = _zero(data, file)
    precision, precision_findings = _precision(data, file)
    optimizer, optimizer_findings = _optimizer(data, file)
    layout = Layout(dp=dp, tp=tp, pp=1, zero_stage=stage, micro_batch_size=max(1, micro),
                    global_batch_size=max(1, train), seq_len=seq_len, recompute="none",
                    offload=offload, optimizer=optimizer, precision=precision, framework=FRAMEWORK)
    findings += (batch_findings + precision_findings + optimizer_findings + _recompute_note(data)
                 + _near_misses(data))
    return Target(file=file, kind=KIND, model=load_model(model),
                  cluster=load_cluster(cluster, gpus=gpus), layout=layout,
                  findings=tuple(findings))


def _require(file: str, **given) -> None:
    for name, value in given.items():
        if value is None:
            option = "--" + name.replace("_", "-")
            what = {"model": "the model", "cluster": "the cluster", "gpus": "the GPU count",
                    "seq_len": "the sequence length"}[name]
            raise SpecError(f"{option} is required: a DeepSpeed config does not name {what}",
                            file=file, key=option)


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


def _int(data: dict, key: str, file: str, where: str, *, minimum: int, auto: str = "") -> int | None:
    """data[key] as an integer >= minimum; None when absent. `auto`: why "auto" is refused."""
    value = data.get(key)
    if value is None:
        return None
    if value == "auto":
        raise SpecError(f"value 'auto' is filled in by the Hugging Face Trainer; give the resolved "
                        f"number{auto}", file=file, key=where)
    _quoted_int(value, file, where)
    if type(value) is not int or value < minimum:
        raise SpecError(f"value {value!r} must be an integer >= {minimum}", file=file, key=where)
    return value


def _bool(data: dict, key: str, file: str, where: str, auto: str) -> bool:
    value = data.get(key, False)
    if value == "auto":
        raise SpecError(f"value 'auto' is filled in by the Hugging Face Trainer{auto}; give true "
                        f"or false", file=file, key=where)
    if not isinstance(value, bool):
        raise SpecError(f"value {value!r} must be true or false", file=file, key=where)
    return value


def _tensor_parallel(data: dict, file: str, gpus: int) -> tuple[int, list[Violation]]:
    """tp from `tensor_parallel.autotp_size` (0 = off), and what DeepSpeed raises on it."""
    section = _section(data, "tensor_parallel", file)
    size = _int(section, "autotp_size", file, "tensor_parallel.autotp_size", minimum=0) or 0
    tp = max(1, size)
    out = []
    if gpus % tp:
        out.append(Violation(rule="deepspeed_autotp",
                             message=f"tensor_parallel.autotp_size={tp} does not divide the {gpus} "
                                     f"GPUs: DeepSpeed builds a (dp={gpus // tp}, tp={tp}) mesh "
                                     f"that does not cover the world",
                             fix=f"run on a multiple of {tp} GPUs, or pick an autotp_size "
                                 f"dividing {gpus}"))
    inner = _section(section, "tp", file, "tensor_parallel.tp")
    tp_size = _int(inner, "tp_size", file, "tensor_parallel.tp.tp_size", minimum=1)
    if tp > 1 and tp_size not in (None, 1, tp):
        out.append(Violation(rule="deepspeed_autotp",
                             message=f"tensor_parallel.tp.tp_size={tp_size} but "
                                     f"tensor_parallel.autotp_size={tp}: DeepSpeed raises on the "
                                     f"mismatch",
                             fix=f"drop tensor_parallel.tp.tp_size or set it to {tp}"))
    return tp, out


def _unsupported(data: dict, file: str, dp: int, gpus: int, tp: int) -> None:
    """Ulysses and AutoEP change the layout in ways this reader does not map; a
    `data_parallel_size` that --gpus contradicts is bad input."""
    sp = data.get("sequence_parallel_size", 1)
    _quoted_int(sp, file, "sequence_parallel_size")
    if type(sp) is not int or sp != 1:
        raise SpecError(f"value {sp!r}: Ulysses sequence parallelism is not read by this check; "
                        f"check the layout with `planner explain --cp`", file=file,
                        key="sequence_parallel_size")
    if _section(data, "expert_parallel", file).get("enabled", False) is not False:
        raise SpecError("AutoEP (expert_parallel.enabled) is not read by this check; check the "
                        "layout with `planner explain --ep`", file=file,
                        key="expert_parallel.enabled")
    given = data.get("data_parallel_size")
    _quoted_int(given, file, "data_parallel_size")
    if given is not None and given != dp:
        raise SpecError(f"data_parallel_size={given!r} but --gpus {gpus} / tp {tp} gives dp={dp}; "
                        f"give consistent values", file=file, key="data_parallel_size")


def _batch(data: dict, file: str, dp: int) -> tuple[int, int, int, list[Violation]]:
    """(train_batch_size, micro-batch, gradient accumulation steps, findings) as DeepSpeed derives
    and asserts them (`DeepSpeedConfig._set_batch_related_parameters`, `_batch_assertion`)."""
    micro = _int(data, "train_micro_batch_size_per_gpu", file, "train_micro_batch_size_per_gpu",
                 minimum=1, auto=" (--per_device_train_batch_size)")
    gas = _int(data, "gradient_accumulation_steps", file, "gradient_accumulation_steps", minimum=1,
               auto=" (--gradient_accumulation_steps)")
    if data.get("train_batch_size") == "auto" and micro is not None and gas is not None:
        train = None  # the Trainer fills micro x gas x dp: what DeepSpeed derives below
    else:
        train = _int(data, "train_batch_size", file, "train_batch_size", minimum=1,
                     auto=" (or resolve train_micro_batch_size_per_gpu and "
                          "gradient_accumulation_steps, from which it follows)")
    derived = ""
    if train is not None and micro is not None and gas is None:
        gas, derived = train // micro // dp, f"gradient_accumulation_steps derived as {train} // {micro} // {dp}"
    elif train is not None and gas is not None and micro is None:
        micro, derived = train // dp // gas, f"train_micro_batch_size_per_gpu derived as {train} // {dp} // {gas}"
    elif micro is not None and gas is not None and train is None:
        train = micro * gas * dp
    elif train is not None and micro is None and gas is None:
        gas, micro, derived = 1, train // dp, f"train_micro_batch_size_per_gpu derived as {train} // {dp}"
    elif micro is not None and train is None:
        train, gas = micro * dp, 1
    elif train is None and micro is None:
        raise SpecError("missing: give train_batch_size or train_micro_batch_size_per_gpu "
                        "(DeepSpeed asserts one of them is provided)", file=file,
                        key="train_micro_batch_size_per_gpu")
    if micro > 0 and gas > 0 and train == micro * gas * dp:
        return train, micro, gas, []
    return train, micro, gas, [_batch_finding(train, micro, gas, dp, derived)]


def _bound(file: str, train: int, micro: int, seq_len: int) -> None:
    for key, sequences in (("train_micro_batch_size_per_gpu", micro), ("train_batch_size", train)):
        if sequences * seq_len > MAX_BATCH_TOKENS:
            raise SpecError(f"{sequences:,} sequences x --seq-len {seq_len:,} exceeds "
                            f"{MAX_BATCH_TOKENS:,} tokens per step", file=file, key=key)


def _batch_finding(train: int, micro: int, gas: int, dp: int, derived: str) -> Violation:
    product = micro * gas * dp
    why = f" ({derived})" if derived else ""
    unit = max(1, micro) * dp
    fix = f"set train_batch_size: {max(product, unit)}"
    if train % unit == 0:
        fix += f", or gradient_accumulation_steps: {train // unit}"
    return Violation(rule="deepspeed_batch_size",
                     message=f"train_batch_size={train} != train_micro_batch_size_per_gpu {micro} x "
                             f"gradient_accumulation_steps {gas} x dp {dp} = {product}{why}: "
                             f"DeepSpeed asserts they are equal and each > 0",
                     fix=fix)


def _zero(data: dict, file: str) -> tuple[int, frozenset[str]]:
    """(ZeRO stage, offloaded states) from `zero_optimization`."""
    section = data.get("zero_optimization", {})
    if isinstance(section, bool):
        return int(section), frozenset()  # deprecated form: true = stage 1
    section = _section(data, "zero_optimization", file)
    stage = section.get("stage", 0)
    _quoted_int(stage, file, "zero_optimization.stage")
    if type(stage) is not int or stage not in (0, 1, 2, 3):
        raise SpecError(f"value {stage!r} not allowed; allowed: 0, 1, 2, 3", file=file,
                        key="zero_optimization.stage")
    offload = set()
    for key, state, old in (("offload_optimizer", "optimizer", "cpu_offload"),
                            ("offload_param", "parameters", "cpu_offload_param")):
        where = f"zero_optimization.{key}"
        device = _section(section, key, file, where).get("device", "none") \
            if section.get(key) is not None else "none"
        if device not in _OFFLOAD_DEVICES:
            raise SpecError(f"value {device!r} not allowed; allowed: {', '.join(_OFFLOAD_DEVICES)}",
                            file=file, key=f"{where}.device")
        deprecated = section.get(old)
        if deprecated is not None and not isinstance(deprecated, bool):
            raise SpecError(f"value {deprecated!r} must be true or false", file=file,
                            key=f"zero_optimization.{old}")
        if device != "none" or deprecated:
            offload.add(state)
    return stage, frozenset(offload)


def _precision(data: dict, file: str) -> tuple[str, list[Violation]]:
    """bf16 | fp16 from the `bf16` (legacy `bfloat16`) and `fp16` sections."""
    bf16_key = "bf16" if "bf16" in data or "bfloat16" not in data else "bfloat16"
    bf16 = _bool(_section(data, bf16_key, file), "enabled", file, f"{bf16_key}.enabled",
                 " from --bf16")
    fp16 = _bool(_section(data, "fp16", file), "enabled", file, "fp16.enabled", " from --fp16")
    if bf16 and fp16:
        return "bf16", [Violation(rule="deepspeed_fp16_and_bf16",
                                  message=f"{bf16_key}.enabled and fp16.enabled are both true: "
                                          f"DeepSpeed asserts 'bfloat16 and fp16 modes cannot be "
                                          f"simultaneously enabled'",
                                  fix="enable one of them (bf16 on GPUs that have it)")]
    if not (bf16 or fp16):
        raise SpecError("neither bf16.enabled nor fp16.enabled is true: DeepSpeed then trains in "
                        "fp32, which the cost model does not cover; enable bf16 or fp16",
                        file=file, key="bf16.enabled")
    return ("bf16" if bf16 else "fp16"), []


def _optimizer(data: dict, file: str) -> tuple[str, list[Violation]]:
    """The costed optimizer of `optimizer.type` (module docstring)."""
    section = _section(data, "optimizer", file)
    name = section.get("type")
    if name is None:
        return "adamw", [Violation(
            rule="deepspeed_optimizer_assumed", severity="warning",
            message="no optimizer.type: the training code passes its own optimizer; checked as "
                    "AdamW (fp32 master, m, v), the largest optimizer state costed",
            fix='name it in the config (e.g. "optimizer": {"type": "AdamW"}) if it is not AdamW')]
    if isinstance(name, str) and name.lower() in _OPTIMIZERS:
        return _OPTIMIZERS[name.lower()], []
    if isinstance(name, str) and name in _TORCH_OPTIMIZERS:
        return _TORCH_OPTIMIZERS[name], []
    hint = (f" (torch.optim names are case-sensitive: {name.upper()!r})"
            if isinstance(name, str) and name.upper() in _TORCH_OPTIMIZERS else "")
    raise SpecError(f"value {name!r} not supported{hint}; supported: Adam, AdamW (any case), SGD",
                    file=file, key="optimizer.type")


def _recompute_note(data: dict) -> list[Violation]:
    if "activation_checkpointing" not in data:
        return []
    return [Violation(rule="deepspeed_recompute_assumed", severity="warning",
                      message="activation_checkpointing only tunes checkpointing; whether layers "
                              "are recomputed is set in the model code: checked without recompute "
                              "(the most activation memory)",
                      fix="if the model checkpoints its layers, check the layout with "
                          "`planner explain --recompute full`")]


def _near_misses(data: dict) -> list[Violation]:
    """A warning for each unknown top-level key close to a key read: DeepSpeed ignores unknown
    top-level keys (`DeepSpeedConfig._initialize_params` reads each key with a default), so
    `zero_optimisation` runs as ZeRO-0, which is what this check costs."""
    out = []
    for key in data:
        if key in _READ_KEYS or key in _OTHER_KEYS:
            continue
        close = difflib.get_close_matches(key.lower(), _READ_KEYS, n=1, cutoff=_NEAR_MISS_RATIO)
        if close:
            out.append(Violation(
                rule="deepspeed_unknown_key", severity="warning",
                message=f"top-level key {key!r} is not a DeepSpeed key; did you mean "
                        f"{close[0]!r}? DeepSpeed ignores it, and so does this check (its "
                        f"setting is not applied)",
                fix=f"rename {key!r} to {close[0]!r}"))
    return out
