"""Reader of a current torchtitan launch command line (`--module M --config C` plus dotted
overrides, torchtitan since 2026) into a gate `Target`.

Source: pytorch/torchtitan `planner.frameworks.torchtitan.CLI_COMMIT` (b5bcd76):
`config/manager.py` (ConfigManager: `--module`/`--config` pick a config function, then tyro
parses `--section.field value` / `--section.field=value` overrides, which take precedence),
`config/configs.py` (TrainingConfig, ParallelismConfig), `run_train.sh` (torchrun's
GPUs per node give the ranks).

The file is split like a shell command line (`shlex`; backslash continuations, `#` comments), its
shell variables, integer arithmetic and `bash -c` strings expanded as the Megatron-LM reader expands them
(`NGPU=${NGPU:-8}`; a torchrun size from a variable the file does not set leaves the world size to
--gpus; a costed override left with a `$` is bad input naming the variable); every bad value of the
costed overrides is reported in one run (`_bad_values`); the
config function's values the planner costs come from `tt.PRESETS` (a function not listed there is
bad input naming those that are), the overrides replace them, the rest are torchtitan's defaults.
The batch is in tokens: micro-batch = `tt.MICROBATCH_TOKENS` / `tt.CONTEXT` sequences (a
remainder is bad input), `tt.PP_MICROBATCHES` micro-batches per step with pp > 1, the global batch
`tt.STEP_TOKENS` / `tt.CONTEXT` (-1: micro-batch x pp micro-batches x dp). The settings then map to a Layout as the TOML reader maps them (`torchtitan.read_doc`),
with the sequence-parallel switch (`tt.SEQUENCE_PARALLEL`) false turning it off. The module names
per pipeline model part (`tt.CLI_PARTS`) are the words after the flag, one per part, its names
comma-separated (as tyro parses them at `CLI_COMMIT`).

Activation checkpointing is the config function's unless the `activation-checkpoint:MODE`
subcommand (`CLI_COMMIT`) or the `--activation_checkpoint.mode MODE` override of the releases
before it (`tt.AC_MODE_COMMIT`; an error, since tyro exits on it at `CLI_COMMIT`, its fix naming
the subcommand) chooses another; a mode torchtitan rejects is bad input naming those it accepts.

A `--training.F` or `--parallelism.F` that is no field of those dataclasses is the error
`torchtitan_unknown_key` with the closest field (tyro exits on it); other sections are not
costed and not checked.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path

from planner.check import megatron, shell, torchtitan
from planner.check.gate import Target, raise_bad_values
from planner.check.lines import as_bash_runs, shell_layout
from planner.errors import SpecError, counted
from planner.frameworks import megatron as megatron_vocabulary
from planner.frameworks import torchtitan as tt
from planner.placement.rules import Violation
from planner.specs import files

KIND = "torchtitan-command"
"""The `kind` of a torchtitan command line."""
MODULE, CONFIG = "--module", "--config"
"""ConfigManager's two selecting flags."""
_NPROC = megatron_vocabulary.NPROC_PER_NODE
_NNODES = megatron_vocabulary.FLAG["nnodes"]
"""torchrun's flags (kept with Megatron-LM's, whose scripts launch with torchrun too)."""


def looks_like(text: str) -> bool:
    """Whether the text selects a torchtitan config function (`--module` and `--config`), or runs torchtitan's
    trainer (`tt.ENTRY_POINTS`: `-m torchtitan.train`, as run_train.sh of every release launches it)."""
    return bool(re.search(rf"(?<![\w-]){MODULE}[\s=]", text)
                and re.search(rf"(?<![\w-]){CONFIG}[\s=]", text)) or any(
        re.search(rf"(?<![\w./-]){re.escape(entry)}(?![\w.-])", line)
        for entry in tt.ENTRY_POINTS for line in shell.uncommented(text.splitlines()))


def _job_config_file(words: list[str], path: Path) -> Path | None:
    """The TOML job config of a pre-2026 command line (`tt.JOB_CONFIG_FILE`, as run_train.sh writes
    `--job.config_file ${CONFIG_FILE}` with `--section.field` overrides), where it names an existing file (as
    written, else beside the script), read by `_from_toml`; None when the line has no such flag.

    Raises:
        SpecError: a TOML the file names that is not there (a path relative to where the job runs, a variable the
            file does not set), naming it and the overrides, with `planner check TOML` as the way out (exit 2)."""
    file = str(path)
    at = next((k for k, w in enumerate(words) if w.split("=", 1)[0] == tt.JOB_CONFIG_FILE), None)
    if at is None:
        return None
    word = words[at]
    toml = word.split("=", 1)[1] if "=" in word else (words[at + 1] if at + 1 < len(words) else "?")
    for candidate in (Path(toml), path.parent / toml):
        if "$" not in toml and candidate.is_file():
            return candidate
    overrides = [w + ("" if "=" in w or k + 1 >= len(words) or words[k + 1].startswith("-") else f" {words[k + 1]}")
                 for k, w in enumerate(words) if w.startswith("--") and "." in w.split("=", 1)[0] and k != at]
    also = f", with its overrides ({' '.join(overrides)}) written into it" if overrides else ""
    raise SpecError(f"the command line gives a TOML job config ({tt.JOB_CONFIG_FILE} {toml}), the form of torchtitan "
                    f"releases before 2026-02, and no such file is here (as written or beside the script): check "
                    f"the TOML itself, `planner check {toml}`{also}", file=file, key=tt.JOB_CONFIG_FILE)


def _from_toml(toml: Path, flags: dict, text: str, file: str, *, model: str | None, cluster: str | None,
               gpus: int | None, seq_len: int | None) -> Target:
    """The Target of a pre-2026 command line: its TOML job config (`torchtitan.read_doc`, the release's own key
    names) with the line's `--section.field value` overrides set in it, as torchtitan's config manager applied
    them over the file; torchrun's ranks the GPU count."""
    doc = torchtitan.parse_toml(toml)
    for key, value in flags.items():
        if "." not in key or key.startswith("-") or key == tt.JOB_CONFIG_FILE.lstrip("-"):
            continue
        *sections, name = key.split(".")
        node = doc
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = _value(value) if isinstance(value, str) else value
    ranks = _ranks(flags, file)
    if ranks is not None and gpus is not None and gpus != ranks:
        raise SpecError(f"--gpus {gpus} contradicts torchrun's {ranks} ranks", file=file, key="--gpus")
    target = torchtitan.read_doc(doc, file, model=model, cluster=cluster, gpus=gpus if gpus is not None else ranks,
                                 seq_len=seq_len)
    return dataclasses.replace(target, kind=KIND, findings=(*shell_layout(text, file), *target.findings))


def read(path: Path, *, model: str | None, cluster: str | None, gpus: int | None,
         seq_len: int | None) -> Target:
    """The Target of a torchtitan command line (module docstring).

    Raises:
        SpecError: unreadable file, shell syntax error, a missing --module / --config or one not in
            `tt.PRESETS`, an override without a value or with a value torchtitan rejects, a batch
            that is not whole sequences, an activation-checkpoint mode torchtitan rejects or the
            planner does not model (or two that disagree), --gpus
            contradicting torchrun's ranks, and what `torchtitan.read_doc` raises.
    """
    text = files.read_text(path, kind="text file (a torchtitan command line)")
    try:  # the launch bash runs: a flag line after a broken continuation is no part of it
        return _read(path, as_bash_runs(text), text, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    except SpecError:
        if as_bash_runs(text) == text:
            raise
    # unreadable without the lines after the break (torchtitan would exit on it): the layout the file means, failed
    # by the rule line_continuation
    return _read(path, text, text, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)


def _read(path: Path, launch: str, text: str, *, model: str | None, cluster: str | None, gpus: int | None,
          seq_len: int | None) -> Target:
    """`read` of the `launch` as bash runs it, the file's `text` for its layout rules."""
    file = str(path)
    looped = megatron.launch_loops(text, file)
    words = _words(launch, file)
    toml = _job_config_file(words, Path(path))
    bad: list[SpecError] = []
    flags, ac = _flags(words, file, bad)
    if toml is not None:
        return _from_toml(toml, flags, text, file, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    bad += _bad_values(flags, file)
    raise_bad_values(file, bad)  # every value torchtitan (tyro) rejects, in one error
    preset = _preset(flags, file)
    given = {k: v if isinstance(v, list) else _value(v) for k, v in flags.items() if "." in k}
    base = {**tt.CLI_DEFAULT, **{k: v for k, v in preset.items() if "." in k}}
    meant = _meant(given, {**base, **given}, preset)
    settings = {**base, **meant, **given}
    ranks = _ranks(flags, file)
    if ranks is not None and gpus is not None and gpus != ranks:
        raise SpecError(f"--gpus {gpus} contradicts torchrun's {ranks} ranks", file=file,
                        key="--gpus")
    ac, findings = _ac_mode(flags, ac, preset, file)
    findings += shell_layout(text, file) + looped
    findings += _unknown_fields(flags, _value(flags.get(tt.KEY["seq_len"], "")) or
                                settings[tt.CONTEXT], settings.get(tt.KEY["pp"], 1) != 1, meant)
    doc = _job_doc(settings, preset, ac, file)
    target = torchtitan.read_doc(doc, file, model=model, cluster=cluster,
                                 gpus=gpus if gpus is not None else ranks, seq_len=seq_len)
    layout = target.layout
    if settings[tt.SEQUENCE_PARALLEL] is False and layout.sequence_parallel:
        layout = layout.replace(sequence_parallel=False)
    chunks = settings.get(tt.CLI_LOSS_CHUNKS, tt.CLI_LOSS_CHUNKS_DEFAULT)
    if type(chunks) is not int or chunks < 1:
        raise SpecError(f"value {chunks!r} must be an integer >= 1", file=file, key=f"--{tt.CLI_LOSS_CHUNKS}")
    layout = layout.replace(loss_chunks=chunks, fused_qkv=None)  # `CLI_COMMIT`'s presets fuse wqkv (Layout.fused_qkv)
    return dataclasses.replace(target, kind=KIND, layout=layout,
                               findings=tuple(findings) + target.findings)


def _words(text: str, file: str) -> list[str]:
    """The command line's shell words, its variables expanded as the Megatron-LM reader expands them
    (`megatron.shell_words`: `NGPU=${NGPU:-8}`, then torchrun's GPUs per node `$NGPU`, as torchtitan's
    own run_train.sh writes)."""
    return megatron.shell_words(text, file)[0]


def _flags(words: list[str], file: str, bad: list[SpecError]) -> tuple[dict[str, str], str | None]:
    """({--flag or dotted key: value string}, the activation-checkpoint subcommand or None); the
    last of a flag given twice wins (tyro / argparse); a subcommand mode torchtitan rejects is added to `bad`."""
    out: dict[str, str] = {}
    ac = None
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        prefix, colon, choice = word.partition(":")
        if colon and prefix in tt.AC_SUBCOMMANDS:
            if choice not in tt.AC_CHOICES:
                bad.append(SpecError(f"value {choice!r} not modelled; allowed: "
                                     f"{', '.join(tt.AC_CHOICES)}", file=file, key=prefix))
                continue
            ac = tt.AC_CHOICES[choice]
            continue
        if not word.startswith("--"):
            continue
        name, eq, value = word.partition("=")
        if name[2:] == tt.CLI_PARTS:  # one word per model part, its module names comma-separated
            parts = [value] if eq else []
            while not eq and i < len(words) and not words[i].startswith("--") and \
                    words[i].partition(":")[0] not in tt.AC_SUBCOMMANDS:
                parts.append(words[i])
                i += 1
            out[name[2:]] = [part.split(",") for part in parts]
            continue
        if not eq:
            if i < len(words) and not words[i].startswith("--") and ":" not in words[i]:
                value, i = words[i], i + 1
            else:
                value = "true"  # a tyro boolean flag given alone
        out[name[2:] if "." in name else name] = value
    return out, ac


def _bad_values(flags: dict[str, str], file: str) -> list[SpecError]:
    """Every costed override whose value torchtitan's parser (tyro) rejects or the planner cannot read: a shell
    expansion the file leaves open (`shell.unresolved`), a non-integer or out-of-range `tt.CLI_INTEGERS` field,
    a non-boolean `tt.CLI_SWITCHES` one, and a `--activation_checkpoint.mode` outside its values (`_ac_mode`);
    each named by its override (fresh-user review 9: the readers other than Megatron-LM's stopped at the first)."""
    out = []
    for key, text in flags.items():
        if not isinstance(text, str) or (key not in tt.CLI_INTEGERS and key not in tt.CLI_SWITCHES):
            continue
        value, least = _value(text), tt.CLI_INTEGERS.get(key)
        why = shell.unresolved(text, {})
        if why is None and least is not None and not (type(value) is int and (value >= max(least, 0 if least == 0 else 1)
                                                                             or value == least == -1)):
            why = f"value {text!r} must be an integer >= {max(least, 0 if least == 0 else 1)}" + (
                " or -1" if least == -1 else "")
        if why is None and least is None and type(value) is not bool:
            why = f"value {text!r} must be true or false"
        if why is not None:
            out.append(SpecError(why, file=file, key=f"--{key}"))
    if tt.KEY["ac_mode"] in flags:
        try:
            _ac_mode({tt.KEY["ac_mode"]: flags[tt.KEY["ac_mode"]]}, None, {"ac": None}, file)
        except SpecError as exc:
            out.append(exc)
    return out


def _ac_mode(flags: dict[str, str], subcommand: str | None, preset: dict,
             file: str) -> tuple[str, list[Violation]]:
    """The activation checkpointing read: the `--activation_checkpoint.mode` override of releases
    9810191 to `tt.AC_MODE_COMMIT` (an error finding: at `tt.CLI_COMMIT`, the release modelled,
    tyro exits on it, so a gate must fail the launch; the fix names the subcommand), else the
    subcommand, else the config function's.

    Raises:
        SpecError: a mode torchtitan rejects (naming `tt.AC_MODE_VALUES`), memory_budget (not
            modelled), or an override that contradicts the subcommand.
    """
    key = tt.KEY["ac_mode"]
    value = flags.get(key)
    if value is None:
        return subcommand or preset["ac"], []
    if value not in tt.AC_MODE_VALUES:
        raise SpecError(f"value {value!r} not allowed; allowed: {', '.join(tt.AC_MODE_VALUES)} "
                        f"(torchtitan config/configs.py ActivationCheckpointConfig.mode at "
                        f"{tt.AC_MODE_COMMIT}; tyro exits on any other)", file=file, key=f"--{key}")
    if value not in tt.AC_CHOICES:
        raise SpecError(f"value {value!r} not modelled (a compiler memory budget); allowed: "
                        f"{', '.join(tt.AC_CHOICES)}", file=file, key=f"--{key}")
    mode = tt.AC_CHOICES[value]
    subcommand_text = f"{tt.AC_SUBCOMMANDS[0]}:{value}"
    if subcommand is not None and subcommand != mode:
        raise SpecError(f"value {value!r} contradicts the subcommand {tt.AC_SUBCOMMANDS[0]}:"
                        f"{subcommand}; give one of them", file=file, key=f"--{key}")
    return mode, [Violation(
        rule="torchtitan_ac_mode_override",
        message=f"--{key} {value} is the spelling of torchtitan up to {tt.AC_MODE_COMMIT}; since "
                f"c5d93d1 (2026-06-15, and at {tt.CLI_COMMIT}) activation checkpointing is the "
                f"subcommand {subcommand_text} and tyro exits on --{key}",
        fix=f"write {subcommand_text} for current torchtitan")]


def _value(text: str):
    """A command-line value as tyro types it: integers, booleans, else the string."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _preset(flags: dict[str, str], file: str) -> dict:
    module, config = flags.get(MODULE), flags.get(CONFIG)
    preset = tt.PRESETS.get((module, config))
    if preset is None:
        known = ", ".join(f"{MODULE} {m} {CONFIG} {c}" for m, c in tt.PRESETS)
        raise SpecError(f"{MODULE} {module} {CONFIG} {config} is not a torchtitan config function "
                        f"this planner knows (it reads the values a function sets from a table, "
                        f"not by running it); known: {known}", file=file,
                        key=CONFIG if module else MODULE)
    return preset


def _ranks(flags: dict[str, str], file: str) -> int | None:
    """torchrun's ranks: GPUs per node x nodes, or None when the line does not launch torchrun."""
    given = [f for f in _NPROC if f in flags]
    if not given:
        return None
    values = [flags[given[-1]], flags.get(_NNODES, "1")]
    if any("$" in value for value in values):
        return None  # a variable the file does not set (a job's environment) or a $(...) not run: --gpus's
    for flag, value in zip((given[-1], _NNODES), values):
        if not re.fullmatch(r"\d+", value) or int(value) < 1:
            raise SpecError(f"value {value!r} must be an integer >= 1 (a literal, not a shell "
                            f"variable)", file=file, key=flag)
    return int(values[0]) * int(values[1])


def _unknown_fields(flags: dict[str, str], context, piped: bool, meant: dict) -> list[Violation]:
    """`torchtitan_unknown_key` for each override no field of `tt.CLI_FIELDS` takes: a field
    renamed in `tt.BATCH_RENAME_COMMIT` names its replacement (the value converted to tokens with
    `context`, the old --training.seq_len or the context length read; `piped`: pp > 1, where the
    old local batch was a step's pipeline micro-batches), any other the closest field."""
    out = []
    for key in flags:
        section, _, field = key.partition(".")
        fields = tt.CLI_FIELDS.get(section)
        if fields is None or field in fields:
            continue
        if key in tt.CLI_RENAMED:
            out.append(_renamed(key, _value(flags[key]), context, piped, meant))
            continue
        if key in tt.CLI_MOVED:
            out.append(Violation(
                rule="torchtitan_unknown_key",
                message=f"--{key} moved to --{tt.CLI_MOVED[key]} (tyro exits on the old name; "
                        f"config/configs.py at {tt.CLI_COMMIT}); costed here as --{tt.CLI_MOVED[key]} "
                        f"{str(meant.get(tt.CLI_MOVED[key], flags[key])).lower()}, what it means",
                fix=f"write --{tt.CLI_MOVED[key]} (with --{tt.CLI_COMPILE})"))
            continue
        close = difflib.get_close_matches(field, fields, n=1, cutoff=0.6)
        out.append(Violation(
            rule="torchtitan_unknown_key",
            message=f"--{key} is not a field of torchtitan's {section} config"
                    + (f"; did you mean --{section}.{close[0]}?" if close else "")
                    + f" (tyro exits on it; config/configs.py at {tt.CLI_COMMIT})",
            fix=f"write --{section}.{close[0]}" if close else f"remove --{key}"))
    return out


def _meant(given: dict, settings: dict, preset: dict) -> dict:
    """{current field: value} for the renamed and moved fields given (`tt.CLI_RENAMED`, `tt.CLI_MOVED`) whose
    current field is not given itself, converted as `_renamed`'s fix says: what the user meant, so the costing
    follows it rather than the config function's values (an error either way: tyro exits on the old name).
    --training.seq_len is the context as is; a batch in sequences is that many x the context; with pp > 1 the
    old local batch L was L / S pipeline micro-batches of S sequences, S the old pipeline micro-batch size
    (default `tt.OLD_PP_MICROBATCH_SIZE`; L the config function's sequences per micro-batch when only S is
    given): micro-batch tokens S x context and `tt.PP_MICROBATCHES` L / S (left to the config function when S
    does not divide L, which the old releases refused). AsyncTP's old switch is the new one."""
    out = {}
    seq = given.get(tt.KEY["seq_len"])
    if type(seq) is int and seq >= 1 and tt.CONTEXT not in given:
        out[tt.CONTEXT] = seq
    context = out.get(tt.CONTEXT, settings[tt.CONTEXT])
    piped = settings.get(tt.KEY["pp"], 1) != 1
    local, size = given.get(tt.KEY["local_batch"]), given.get(tt.KEY["pp_microbatch_size"])
    step = given.get(tt.KEY["global_batch_size"])
    if type(step) is int and (step >= 1 or step == -1):
        out[tt.STEP_TOKENS] = step * context if step != -1 else -1
    if piped and (local is not None or size is not None):
        size = tt.OLD_PP_MICROBATCH_SIZE if size is None else size
        local = preset[tt.MICROBATCH_TOKENS] // preset[tt.CONTEXT] if local is None else local
        if type(local) is int and type(size) is int and size >= 1 and local >= 1 and local % size == 0:
            out[tt.MICROBATCH_TOKENS] = size * context
            out[tt.PP_MICROBATCHES] = local // size
    elif not piped and type(local) is int and local >= 1:
        out[tt.MICROBATCH_TOKENS] = local * context
    for old, new in tt.CLI_MOVED.items():
        if old in given:
            out[new] = given[old]
    return {k: v for k, v in out.items() if k not in given}


def _renamed(key: str, value, context, piped: bool, meant: dict) -> Violation:
    """The finding for a field `tt.BATCH_RENAME_COMMIT` renamed, its fix the replacement; the message
    says what the check costs in its place (`meant`), else that the config function's value is costed."""
    new, how = tt.CLI_RENAMED[key]
    if key in (tt.KEY["local_batch"], tt.KEY["pp_microbatch_size"]) and piped and tt.PP_MICROBATCHES in meant:
        size = meant[new] // context if type(context) is int else None
        fix = (f"with pipeline parallelism the old local batch is a step's pipeline micro-batches: write "
               f"--{new} {meant[new]} ({counted(size, 'sequence')} of the old pipeline micro-batch size x "
               f"{context} tokens of --{tt.CONTEXT}) and --{tt.PP_MICROBATCHES} {meant[tt.PP_MICROBATCHES]}")
    elif key == tt.KEY["local_batch"] and piped:
        fix = (f"with pipeline parallelism the old local batch is a step's pipeline micro-batches: "
               f"write --{new} = the pipeline micro-batch size x --{tt.CONTEXT} and "
               f"--{tt.PP_MICROBATCHES} = {value} / that size")
    elif how == "same":
        fix = f"write --{new} {value}"
    elif type(value) is int and type(context) is int:
        fix = (f"write --{new} {value * context} ({value} sequences x {context} tokens of "
               f"--{tt.CONTEXT})")
    else:
        fix = f"write --{new} in tokens (this value in sequences x --{tt.CONTEXT})"
    if key == tt.KEY["pp_microbatch_size"] and not piped:
        fix += f" (ignored: --{tt.KEY['pp']} is 1)"
    elif key == tt.KEY["pp_microbatch_size"] and tt.PP_MICROBATCHES not in meant:
        fix += (f", and --{tt.PP_MICROBATCHES} = the local batch / {value} (a count of pipeline "
                f"micro-batches)")
    pipelined = (f" and --{tt.PP_MICROBATCHES} {meant[tt.PP_MICROBATCHES]}"
                 if new == tt.MICROBATCH_TOKENS and tt.PP_MICROBATCHES in meant else "")
    costed = (f"costed here as --{new} {meant[new]}{pipelined}, what it means" if new in meant
              else f"costed here at the config function's --{new}")
    return Violation(
        rule="torchtitan_unknown_key",
        message=f"--{key} was replaced by --{new} in torchtitan {tt.BATCH_RENAME_COMMIT} (2026-08-20); "
                f"tyro exits on the old name (config/configs.py at {tt.CLI_COMMIT}, the one release command "
                f"lines are checked against: nothing names an older one, where the old name is right); {costed}",
        fix=fix)


def _job_doc(settings: dict, preset: dict, ac: str, file: str) -> dict:
    """The settings as the TOML reader's {section: {key: value}} (`tt.KEYS` spellings)."""
    doc: dict[str, dict] = {}

    def put(setting: str, value) -> None:
        section, key = tt.KEYS[setting][0]
        doc.setdefault(section, {})[key] = value

    for setting in tt.CLI_SETTINGS:
        if tt.KEY[setting] in settings:
            put(setting, settings[tt.KEY[setting]])
    if tt.CLI_PARTS in settings:
        put("pp_fqns", settings[tt.CLI_PARTS])
    seq = _positive(settings, tt.CONTEXT, file)
    micro = _sequences(settings, tt.MICROBATCH_TOKENS, seq, file)
    pp = settings.get(tt.KEY["pp"], 1)
    per_step = _positive(settings, tt.PP_MICROBATCHES, file) if pp != 1 else 1
    put("seq_len", seq)
    put("local_batch", micro * per_step)
    if pp != 1:
        put("pp_microbatch_size", micro)
    step = settings[tt.STEP_TOKENS]
    put("global_batch_size", -1 if step == -1 else _sequences(settings, tt.STEP_TOKENS, seq, file))
    put("ac_mode", ac)
    if ac == "selective":
        put("ac_option", tt.OP_SAC)
    name, flavor = preset["model"]
    put("model_name", name)
    put("model_flavor", flavor)
    if preset.get("float8"):
        put("converters", [tt.FP8_CONVERTER])
        *tables, key = tt.FP8_RECIPE_KEYS[0]   # the config function's recipe (rowwise at tt.CLI_COMMIT)
        table = doc
        for part in tables:
            table = table.setdefault(part, {})
        table[key] = preset["float8"]
    for setting, key in (("compile", tt.CLI_COMPILE), ("async_tp", tt.CLI_ASYNC_TP)):
        if key in settings:
            put(setting, settings[key])
    return doc


def _positive(settings: dict, key: str, file: str) -> int:
    value = settings[key]
    if type(value) is not int or value < 1:
        raise SpecError(f"value {value!r} must be an integer >= 1", file=file, key=f"--{key}")
    return value


def _sequences(settings: dict, key: str, seq: int, file: str) -> int:
    tokens = _positive(settings, key, file)
    if tokens % seq:
        raise SpecError(f"value {tokens} is not a multiple of {tt.CONTEXT} {seq}: this planner "
                        f"costs whole sequences", file=file, key=f"--{key}")
    return tokens // seq
