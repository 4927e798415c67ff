"""`planner check`: a CI gate for configuration files.

A reader turns a file into a `gate.Target` (model, cluster, Layout, per-stage recompute); the gate
applies the composition rules and the per-stage memory against capacity and returns pass or fail
with every violated rule, its numbers and a fix.

Readers, chosen by what the file holds:
- a plan file (`kind: training-plan`, YAML or JSON, written by `planner plan -o`): `plan_file`;
- a DeepSpeed config (JSON with one of its batch or ZeRO keys,
  `planner.frameworks.deepspeed.MARKERS`): `deepspeed`;
- a torchtitan job config (`.toml`): `torchtitan`;
- anything else is read as a Megatron-LM launch command line (`--flag value ...`, a shell script or
  an arguments file): `megatron`; a file whose suffix says none of these is
  sniffed first (JSON when it opens with `{`, TOML with torchtitan's tables).
What a framework config leaves out (the model, the cluster, the GPU count, the sequence length)
comes from `--model`, `--cluster`, `--gpus` and `--seq-len`; a value the file gives and the option
contradicts is bad input. Every reader has the signature
`read(path, [data,] *, model, cluster, gpus, seq_len) -> Target`.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from planner.check.gate import Target, evaluate
from planner.check.plan_file import KIND, looks_like_plan_file, read_plan_file
from planner.errors import SpecError
from planner.frameworks import deepspeed as deepspeed_vocabulary
from planner.specs import files
from planner.specs.limits import MAX_BATCH_TOKENS, MAX_GPUS, MAX_SEQ_LEN, MAX_VPP

__all__ = ["Target", "check_file", "evaluate", "read_target"]

DEEPSPEED_KEYS = deepspeed_vocabulary.MARKERS
"""Top-level keys that mark a JSON file as a DeepSpeed config (deepspeed/runtime/config.py)."""


def read_target(path: str | Path, *, model: str | None = None, cluster: str | None = None,
                gpus: int | None = None, seq_len: int | None = None) -> Target:
    """The Target of a configuration file, by what it holds (module docstring).

    Args:
        path: the file.
        model, cluster, gpus, seq_len: what the file does not say (a catalog name or path; a GPU
            count; tokens per sequence).

    Raises:
        SpecError: unreadable, malformed or unrecognised file, or a missing model / cluster (exit 2).
    """
    path = Path(path)
    given = dict(model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    kind = _kind(path)
    if kind == "toml":
        from planner.check import torchtitan
        return torchtitan.read(path, **given)
    if kind == "mapping":
        data = files.read_mapping(path, "configuration keys")
        if looks_like_plan_file(data):
            _no_options(path, given, "a plan file names its model, cluster and GPU count")
            return read_plan_file(path, data)
        if any(k in data for k in DEEPSPEED_KEYS):
            from planner.check import deepspeed
            return deepspeed.read(path, data, **given)
        raise SpecError(f"not a configuration this planner checks: expected a plan file (kind: "
                        f"{KIND}, written by `planner plan -o`) or a DeepSpeed JSON config (one of "
                        f"{', '.join(DEEPSPEED_KEYS)})", file=str(path), key="kind")
    from planner.check import megatron
    return megatron.read(path, **given)


def _kind(path: Path) -> str:
    """toml | mapping (YAML / JSON) | args, by suffix; a file whose suffix says none of these is
    sniffed: JSON when it opens with `{`, TOML when it parses as TOML into torchtitan's tables
    ([training], [parallelism], [model]), else Megatron-LM arguments."""
    if path.suffix == ".toml":
        return "toml"
    if path.suffix in (".yaml", ".yml", ".json"):
        return "mapping"
    try:
        text = files.read_text(path)
    except SpecError:
        return "args"  # the Megatron reader reports the unreadable file in its own words
    if text.lstrip().startswith("{"):
        return "mapping"  # JSON (read as YAML, its superset, whatever the suffix)
    try:
        tables = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "args"
    return "toml" if {"training", "parallelism", "model"} & set(tables) else "args"


def _within_limits(target: Target) -> Target:
    """The limits `planner plan` puts on its options (`planner.specs.limits`), for what a
    framework config says: a 1e20-sequence batch is bad input, not a 1e19-second step.

    Raises:
        SpecError: naming the file, the quantity, the value and the limit (exit 2).
    """
    layout = target.layout
    tokens = layout.global_batch_size * layout.seq_len
    for key, value, limit in (("seq_len", layout.seq_len, MAX_SEQ_LEN),
                              ("global batch (tokens)", tokens, MAX_BATCH_TOKENS),
                              ("GPUs", target.cluster.num_gpus, MAX_GPUS),
                              ("vpp", layout.vpp, MAX_VPP)):
        if value > limit:
            raise SpecError(f"value {value:,} exceeds the {limit:,} this planner accepts (the "
                            f"limit `planner plan` puts on it)", file=target.file, key=key)
    return target


def _no_options(path: Path, given: dict, why: str) -> None:
    extra = [f"--{k}" for k, v in given.items() if v is not None]
    if extra:
        raise SpecError(f"{', '.join(extra)} not allowed with a plan file: {why}", file=str(path),
                        key=extra[0])


def check_file(path: str | Path, *, model: str | None = None, cluster: str | None = None,
               gpus: int | None = None, seq_len: int | None = None,
               recompute: str | None = None) -> dict:
    """`gate.evaluate` of the file's Target: {verdict: pass|fail, violations, stages, ...}.

    Args:
        recompute: the activation recompute a DeepSpeed model applies in its code (DeepSpeed
            checkpoints whole layers from code, not from the JSON: none or full on every layer);
            None = none. Any other file states its own, so giving it there is bad input.
    """
    target = _within_limits(read_target(path, model=model, cluster=cluster, gpus=gpus,
                                        seq_len=seq_len))
    return evaluate(_with_code_recompute(target, recompute))


def _with_code_recompute(target: Target, recompute: str | None) -> Target:
    if recompute is None:
        return target
    if target.kind != "deepspeed-config":
        raise SpecError(f"--recompute is for DeepSpeed configs, whose recompute lives in the model "
                        f"code; this {target.kind} file states its own", file=target.file,
                        key="--recompute")
    if recompute == "selective":
        raise SpecError("value 'selective' not allowed: DeepSpeed checkpoints whole layers "
                        "(deepspeed.checkpointing.checkpoint); allowed: none, full",
                        file=target.file, key="--recompute")
    return dataclasses.replace(target, layout=target.layout.replace(recompute=recompute),
                               recompute_per_stage=None)
