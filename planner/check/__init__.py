"""`planner check`: a CI gate for configuration files.

A reader turns a file into a `gate.Target` (model, cluster, Layout, per-stage recompute); the gate
applies the composition rules and the per-stage memory against capacity and returns pass or fail
with every violated rule, its numbers, a fix and the line of the flag or key it concerns.

The kind of a file is decided by what it holds, whatever its name (`READERS`, first match wins):
- `training-plan`: a YAML / JSON mapping with `kind: training-plan` (`planner plan -o`);
- `deepspeed-config`: a JSON / YAML mapping with one of DeepSpeed's batch or ZeRO keys
  (`planner.frameworks.deepspeed.MARKERS`);
- `torchtitan-config`: a TOML document with torchtitan's job-config tables (releases up to
  238fa99; `planner.frameworks.torchtitan`);
- `torchtitan-command`: a torchtitan command line selecting a config function with `--module` and
  `--config`, with dotted overrides (releases since 2026, `planner.check.torchtitan_cli`);
- `megatron-args`: a command line, shell script or arguments file with a Megatron-LM flag the
  planner reads (`planner.frameworks.megatron.READ`);
a serving plan file (`kind: serving-plan`, `planner serve-plan -o`) is checked by
`planner.check.serving_plan`, and a vLLM or SGLang launch (a command line, a vLLM config YAML) by
`planner.check.engine_file` (the command routes them there: they have no training Target);
anything else (`pyproject.toml`, a plain YAML file, a shell script with no such flag) is bad input
naming the kinds accepted, serving plan files among them (`OTHER_KINDS`). A file named `.yaml` / `.yml` / `.json` / `.toml` that does not parse
as such is a syntax error (exit 2), except a DeepSpeed config DeepSpeed's own reader (hjson) takes, which is
read as DeepSpeed reads it, with the warning `json_not_strict` (`_as_deepspeed_reads`). A new reader plugs in with one `Reader` entry.
What a framework config leaves out (the model, the cluster, the GPU count, the sequence length)
comes from `--model`, `--cluster`, `--gpus` and `--seq-len`; a value the file gives and the option
contradicts is bad input.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path


from planner.check import lines as line_index
from planner.check.gate import Target, evaluate
from planner.check import engine_file, serving_plan
from planner.check.plan_file import KIND, looks_like_plan_file, option_findings, read_plan_file
from planner.errors import SpecError
from planner.frameworks import deepspeed as deepspeed_vocabulary
from planner.frameworks import megatron as megatron_vocabulary
from planner.frameworks import torchtitan as torchtitan_vocabulary
from planner.placement.rules import Violation
from planner.specs import files
from planner.specs.limits import MAX_BATCH_TOKENS, MAX_GPUS, MAX_SEQ_LEN, MAX_VPP

__all__ = ["READERS", "Target", "across_files", "check_file", "evaluate", "line_of", "read_target"]

DEEPSPEED_KEYS = deepspeed_vocabulary.MARKERS
"""Top-level keys that mark a mapping as a DeepSpeed config (deepspeed/runtime/config.py)."""
TORCHTITAN_TABLES = frozenset(s for spellings in torchtitan_vocabulary.KEYS.values()
                              for s, _ in spellings)
"""TOML tables that mark a document as a torchtitan job config ([training], [parallelism], ...)."""
_MAPPING_SUFFIXES = (".yaml", ".yml", ".json")


@dataclasses.dataclass(frozen=True)
class Document:
    """A file as the readers see it: its text and, where it parses so, its mapping or TOML tables."""

    path: Path
    text: str
    mapping: dict | None
    """The YAML / JSON top-level mapping; None when the text is not one."""
    tables: dict | None
    """The TOML document; None when the text is not TOML."""
    mapping_error: SpecError | None = None
    """The YAML / JSON syntax error of a text that opens a mapping and then breaks (a suffix-less
    file, standard input): what `read_target` reports when no reader takes the text."""
    json_error: json.JSONDecodeError | None = None
    """Where a DeepSpeed config is not strict JSON but DeepSpeed's own reader takes it (`_as_deepspeed_reads`),
    the strict reading's error: `mapping` is then DeepSpeed's reading and the check warns."""


@dataclasses.dataclass(frozen=True)
class Reader:
    """One kind of configuration file `planner check` reads."""

    kind: str
    """`Target.kind` of what it reads."""
    accepts: str
    """What a file of this kind holds, for the message naming the kinds accepted."""
    matches: Callable[[Document], bool]
    """Whether a document is of this kind (by content)."""
    read: Callable[..., Target]
    """(document, model=, cluster=, gpus=, seq_len=) -> Target; raises SpecError."""
    lines: Callable[[str], dict[str, int]]
    """Text -> {flag or key spelling: line} (`planner.check.lines`)."""
    knobs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Planner knob (`tp`, `micro_batch_size`, ...) -> its spelling in this kind, so that a rule
    naming the knob points at the line that sets it."""


def _read_plan(doc: Document, **given) -> Target:
    """A plan file; options that contradict it are findings on it (`plan_file.option_findings`)."""
    target = read_plan_file(doc.path, doc.mapping)
    return dataclasses.replace(target, findings=(*target.findings,
                                                 *option_findings(target, **given)))


def _read_deepspeed(doc: Document, **given) -> Target:
    from planner.check import deepspeed
    _strict_json(doc)
    target = deepspeed.read(doc.path, doc.mapping, **given)
    if doc.json_error is None:
        return target
    return dataclasses.replace(target, findings=(*target.findings, _not_strict_json(doc.json_error)))


def _as_deepspeed_reads(text: str) -> tuple[dict, json.JSONDecodeError] | None:
    """(the mapping, the strict JSON error) of a text that opens as JSON (`{`), is not strict JSON, and is a
    DeepSpeed config as DeepSpeed itself reads it; None otherwise (strict JSON, or what DeepSpeed refuses too).

    DeepSpeed trains with what hjson reads -- trailing commas, comments, single-quoted strings -- and refuses
    a key given twice: `deepspeed.initialize` loads a config path with `load_ds_config` and `DeepSpeedConfig`
    with `hjson.load(..., object_pairs_hook=dict_raise_error_on_duplicate_keys)` (deepspeedai/DeepSpeed
    edaa722 deepspeed/runtime/tensor_parallel/init_utils.py l. 19-33, deepspeed/runtime/config.py l. 693-699;
    hjson is in its requirements/requirements.txt). So the gate reads such a config as DeepSpeed does rather
    than fail a config that trains (review-fresh11 policy; `_not_strict_json` warns)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        json.loads(text)
        return None
    except json.JSONDecodeError as exc:
        error = exc
    import hjson

    def unique(pairs: list[tuple[str, object]]) -> dict:
        if len({key for key, _ in pairs}) != len(pairs):
            raise ValueError("a key given twice")  # DeepSpeed's dict_raise_error_on_duplicate_keys
        return dict(pairs)

    try:
        mapping = hjson.loads(text, object_pairs_hook=unique)
    except (hjson.HjsonDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(mapping, dict) or not any(key in mapping for key in DEEPSPEED_KEYS):
        return None
    return mapping, error


def _not_strict_json(error: json.JSONDecodeError) -> Violation:
    """The warning `json_not_strict` of a DeepSpeed config DeepSpeed reads but strict JSON does not: the
    Hugging Face Trainer loads the file it is given with json.load (huggingface/accelerate 16cb6eb
    src/accelerate/utils/deepspeed.py HfDeepSpeedConfig l. 141-143, which transformers' Trainer config
    extends), which refuses it."""
    return Violation(rule="json_not_strict", severity="warning", line=error.lineno,
                     message=f"not strict JSON at line {error.lineno}, column {error.colno}: {error.msg}; "
                             f"DeepSpeed reads it (deepspeed.initialize loads a config with hjson, which takes "
                             f"trailing commas, comments and single quotes), and so does this check, but the "
                             f"Hugging Face Trainer's json.load refuses it",
                     fix=f"write strict JSON (line {error.lineno}) so that every launcher reads the config")


def _strict_json(doc: Document) -> None:
    """Bad input when a DeepSpeed config that opens as JSON (`{`) is strict JSON to neither JSON nor DeepSpeed's
    own reader (`_as_deepspeed_reads`), whatever the file's name or on standard input, as a `.json` file already
    is (`files.read_mapping`): a YAML reading took Python's `True` on the line of a closing brace, which hjson
    refuses (fresh-user review 10 #7).

    Raises:
        SpecError: the JSON syntax error's line and column (exit 2)."""
    if doc.json_error is not None or not doc.text.lstrip().startswith("{"):
        return
    try:
        json.loads(doc.text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg} (neither strict "
                        f"JSON nor what DeepSpeed's own reader, hjson, takes: double quotes, true / false / null)",
                        file=str(doc.path), line=exc.lineno) from None


def _read_torchtitan(doc: Document, **given) -> Target:
    from planner.check import torchtitan
    return torchtitan.read(doc.path, **given)


def _torchtitan_cli():
    from planner.check import torchtitan_cli
    return torchtitan_cli


def _read_torchtitan_cli(doc: Document, **given) -> Target:
    return _torchtitan_cli().read(doc.path, **given)


def _read_megatron(doc: Document, **given) -> Target:
    from planner.check import megatron
    return megatron.read(doc.path, **given)


def _megatron_flags(doc: Document) -> bool:
    return bool(set(line_index.flag_lines(doc.text)) & set(megatron_vocabulary.READ))


_TORCHTITAN_KNOBS = {**torchtitan_vocabulary.KEY, "micro_batch_size": torchtitan_vocabulary.KEY[
    "local_batch"], "recompute": torchtitan_vocabulary.KEY["ac_mode"],
    "zero_stage": torchtitan_vocabulary.KEY["shard"]}

READERS: tuple[Reader, ...] = (
    Reader(KIND, f"a plan file (kind: {KIND}, written by `planner plan -o`)",
           lambda d: d.mapping is not None and looks_like_plan_file(d.mapping), _read_plan,
           line_index.mapping_lines),
    Reader("deepspeed-config", f"a DeepSpeed JSON config (one of {', '.join(DEEPSPEED_KEYS)})",
           lambda d: d.mapping is not None and any(k in d.mapping for k in DEEPSPEED_KEYS),
           _read_deepspeed, line_index.mapping_lines,
           {k.knob: k.path for k in deepspeed_vocabulary.KEYS}),
    Reader("torchtitan-config", "a torchtitan TOML job config (tables "
           f"{', '.join(f'[{t}]' for t in sorted(TORCHTITAN_TABLES))})",
           lambda d: d.tables is not None and bool(TORCHTITAN_TABLES & set(d.tables)),
           _read_torchtitan, line_index.toml_lines, _TORCHTITAN_KNOBS),
    Reader("torchtitan-command", "a torchtitan command line (--module M --config C with "
           "--section.field overrides)", lambda d: _torchtitan_cli().looks_like(d.text),
           _read_torchtitan_cli, line_index.flag_lines,
           {**{k: torchtitan_vocabulary.KEY[k] for k in torchtitan_vocabulary.CLI_SETTINGS},
            "recompute": torchtitan_vocabulary.KEY["ac_mode"],
            "micro_batch_size": torchtitan_vocabulary.MICROBATCH_TOKENS,
            "global_batch_size": torchtitan_vocabulary.STEP_TOKENS,
            "seq_len": torchtitan_vocabulary.CONTEXT}),
    Reader("megatron-args", "Megatron-LM arguments (a launch script or arguments file with "
           f"{megatron_vocabulary.FLAG['tp']}, {megatron_vocabulary.FLAG['micro_batch_size']}, ...)",
           _megatron_flags, _read_megatron, line_index.flag_lines,
           {k: f.flag for k, f in megatron_vocabulary.BY_KNOB.items()}),
)
"""The kinds `planner check` reads, in the order they are tried (module docstring)."""

OTHER_KINDS = (f"a serving plan file (kind: {serving_plan.KIND}, written by `planner serve-plan "
               f"-o`)", *engine_file.ACCEPTS)
"""What `planner check` also reads, outside `READERS` (`planner.check.serving_plan.
is_serving_plan` files go to `check_serving_plan`), for the message naming the kinds accepted."""


def read_target(path: str | Path, *, model: str | None = None, cluster: str | None = None,
                gpus: int | None = None, seq_len: int | None = None,
                settings: dict[str, str] | None = None) -> Target:
    """The Target of a configuration file, by what it holds (module docstring), with the line of
    every flag or key it sets (`Target.lines`).

    Args:
        path: the file.
        model, cluster, gpus, seq_len: what the file does not say (a catalog name or path; a GPU
            count; tokens per sequence).
        settings: DeepSpeed only: the values the Hugging Face Trainer fills the file's "auto" keys with
            (`check --set`, `planner.check.deepspeed.resolve_auto`).

    Raises:
        SpecError: unreadable, malformed or unrecognised file (naming the kinds accepted), a value
            the framework rejects, or a missing model / cluster (exit 2).
    """
    doc = _document(Path(path))
    reader = next((r for r in READERS if r.matches(doc)), None)
    if reader is None:
        if doc.mapping is not None and doc.mapping.get("kind") == serving_plan.KIND:
            raise SpecError(f"kind: {serving_plan.KIND} without a `request` mapping giving "
                            f"output_len, which `planner serve-plan -o` writes",
                            file=str(doc.path), key="request.output_len")
        if doc.mapping_error is not None:
            raise doc.mapping_error
        _misspelled_kind(doc)
        raise SpecError("not a configuration `planner check` reads; accepted: "
                        + "; ".join([r.accepts for r in READERS] + list(OTHER_KINDS)),
                        file=str(doc.path))
    if settings and reader.kind != "deepspeed-config":
        raise SpecError(f"--set fills the 'auto' values of a DeepSpeed config that the Hugging Face "
                        f"Trainer resolves; this file is a {reader.kind}", file=str(doc.path), key="--set")
    target = reader.read(doc, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len,
                         **({"settings": settings} if settings else {}))
    found = reader.lines(doc.text)
    for knob, spelling in reader.knobs.items():
        if spelling in found:
            found.setdefault(knob, found[spelling])
    return dataclasses.replace(target, lines=found)


PLAN_KINDS = (KIND, serving_plan.KIND)
"""The `kind:` values of the planner's own files (training and serving plans)."""


def _misspelled_kind(doc: Document) -> None:
    """A mapping whose `kind:` is close to a plan file's kind is that plan file misspelled: bad input naming
    the kind meant (difflib ratio >= 0.6, `difflib.get_close_matches`' default, on the lower-cased value).

    Raises:
        SpecError: key kind, with the value, the kind meant and the kinds allowed."""
    kind = (doc.mapping or {}).get("kind")
    if not isinstance(kind, str):
        return
    close = difflib.get_close_matches(kind.strip().lower(), PLAN_KINDS, n=1)
    if close:
        raise SpecError(f"value {kind!r} is not a kind `planner check` reads; did you mean {close[0]!r}? "
                        f"(allowed: {', '.join(PLAN_KINDS)})", file=str(doc.path), key="kind")


def line_of(path: str | Path, key: str | None) -> int | None:
    """The line of `path` that sets `key` (the flag or key a bad-input error names), or None when
    the file does not read or does not set it (e.g. a command-line option such as --gpus)."""
    if not key:
        return None
    try:
        text = files.read_text(Path(path), kind="configuration file")
    except SpecError:
        return None
    for index in (line_index.flag_lines, line_index.toml_lines, line_index.mapping_lines):
        found = index(text)
        if key in found:
            return found[key]
    return None


def _document(path: Path) -> Document:
    """The file's text, mapping and TOML tables; a suffix that names a syntax makes a syntax error
    in it bad input, any other file is only sniffed (an empty one, or one of blanks only, is bad input
    saying so); a DeepSpeed config that is not strict JSON but trains
    is DeepSpeed's reading of it (`_as_deepspeed_reads`)."""
    text = files.read_text(path, kind="configuration file")
    if not text.strip():  # fresh-user review 12 #8: not the list of every kind accepted
        raise SpecError("the file is empty" + (f" ({len(text)} blank characters)" if text else "") +
                        ": nothing to check", file=str(path))
    mapping_error = None
    lenient = _as_deepspeed_reads(text)
    if lenient is not None:
        return Document(path=path, text=text, mapping=lenient[0], tables=None, json_error=lenient[1])
    if path.suffix in _MAPPING_SUFFIXES:
        mapping = files.read_mapping(path, "configuration keys")
    else:
        try:
            mapping = files.read_mapping(path, "configuration keys")
        except SpecError as exc:
            mapping = None
            if "syntax error" in str(exc) and files.opens_mapping(text):
                mapping_error = exc
    try:
        tables = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if path.suffix == ".toml":
            at = re.search(r"at line (\d+)", str(exc))
            raise SpecError(f"TOML syntax error: {exc}", file=str(path),
                            line=int(at.group(1)) if at else None) from None
        tables = None
    return Document(path=path, text=text, mapping=mapping, tables=tables, mapping_error=mapping_error)


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


def check_file(path: str | Path, *, model: str | None = None, cluster: str | None = None,
               gpus: int | None = None, seq_len: int | None = None,
               recompute: str | None = None, settings: dict[str, str] | None = None) -> dict:
    """`gate.evaluate` of the file's Target: {verdict: pass|fail, violations, stages, ...}.

    Args:
        recompute: the activation recompute a DeepSpeed model applies in its code (DeepSpeed
            checkpoints whole layers from code, not from the JSON: none or full on every layer);
            None = none. Any other file states its own, so giving it there is bad input.
        settings: `read_target`'s (DeepSpeed's "auto" values, `check --set`).
    """
    target = _within_limits(read_target(path, model=model, cluster=cluster, gpus=gpus,
                                        seq_len=seq_len, settings=settings))
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
    # the model code's recompute is now given: the warning that it was assumed no longer holds
    findings = tuple(f for f in target.findings if f.rule != "deepspeed_recompute_assumed")
    return dataclasses.replace(target, layout=target.layout.replace(recompute=recompute),
                               recompute_per_stage=None, findings=findings)


def across_files(results: list[dict]) -> bool:
    """Apply the rules that span the files of one run to their results (`check_file` dicts, in
    place): a Megatron-LM file loading a checkpoint another file saves must pad the vocabulary to
    its rows (`planner.check.megatron.checkpoints_across`). The error is added to the loading
    file's violations with the line of the flag, and its verdict becomes fail. Returns whether any
    was added."""
    from planner.check import megatron

    found = megatron.checkpoints_across(results)
    for index, violation in found:
        result = results[index]
        flag = violation.message.split(" ", 1)[0]
        result["violations"].append({"rule": violation.rule, "severity": violation.severity,
                                     "message": violation.message, "fix": violation.fix,
                                     "line": line_of(result["file"], flag)})
        result["verdict"] = "fail"
    return bool(found)
