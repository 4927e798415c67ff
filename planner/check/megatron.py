"""Reader of Megatron-LM launch arguments (a shell script or an arguments file) into a gate `Target`.

The file is split like a shell command line (`shlex`: quotes, `#` comments, backslash line
continuations). Tokens of the form `NAME=value` set shell variables that later `$NAME`, `${NAME}`
and `${NAME:-default}` expand to (Megatron-LM's example scripts keep their numbers in variables and
their flags in bash arrays; a quoted array element such as `"--flag value"` is split again). A
variable's value expanded in a word is split at whitespace as bash splits an unquoted `$VAR`, so
flags kept in a quoted string variable of one line or many (`GPT_ARGS="..."`, older examples) read
as if written on the launch line.
`--flag value` and `--flag=value` are read for the flags below; other tokens (python, torchrun,
pretrain_gpt.py, environment assignments, data paths, flags the planner does not cost) are not
read, but every `--flag` must be one Megatron-LM (`planner.frameworks.megatron.recorded_flags`) or
torchrun defines: any other is the error `megatron_unknown_flag` with the closest Megatron flag, as
Megatron's argparse exits on it. A flag given twice takes its last value, as argparse does. The text is read, not run:
both branches of a shell `if` are read, `$(...)` is not run, integer arithmetic `$((...))` of the file's own
variables is evaluated as bash does, and a command inside `bash -c "..."` (`srun ... bash -c "python
pretrain_gpt.py ..."`) is read as the command (`planner.check.shell`); a flag whose value is left with a `$`
is bad input naming the flag and the variable the file does not set.

Flags read: those of `planner.frameworks.megatron.FLAGS` marked `read` (names, defaults and
sources there): the degrees, virtual stages and uneven split; micro-batch, global batch and
sequence length; ZeRO through the distributed optimizer, Megatron-FSDP's sharding strategy or torch
FSDP2; recompute granularity, method and layer count; precision and optimizer; the architecture
(compared with --model, the MoE layer pattern flag included, or the model itself: a rotary base differing
from --model's rope_theta is the warning `megatron_rotary_base`); torchrun's GPUs per node x nodes = world size,
else srun's tasks where the file gives them (`slurm_world`: --ntasks, or --nodes x --ntasks-per-node,
`#SBATCH` lines giving defaults).
A launcher's options before the training script (srun's --container-image, --cpu-bind) are the launcher's,
not Megatron's (`launcher_words`).

What Megatron itself asserts at start-up and the gate's rules do not already check is a finding
(`Violation`, each citing the Megatron function): world size divisible by tp x pp x cp, the
recompute flags' combinations, the virtual-pipeline flags, the uneven split of the middle stages,
seq-length within max-position-embeddings, interleaving with pp = 2 without p2p overlap, FSDP's
CUDA_DEVICE_MAX_CONNECTIONS (set in the script) and checkpoint format, CUDA_DEVICE_MAX_CONNECTIONS=1
with tp or cp > 1 before Blackwell (`_device_connections`), torch FSDP2's flags, and
all-to-all context parallelism's heads per rank divisible by cp (`_startup`); CRLF line endings,
which break the script's backslash continuations, are the error `crlf_line_endings`
(`planner.check.lines.shell_layout`, with broken continuations and a byte-order mark). The global
batch by micro-batch x dp is the gate's `batch_divisible` rule.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import operator
import difflib
import re
from pathlib import Path

from planner.check import shell
from planner.check.engine_launch import deepep_findings
from planner.check.gate import Target, attempt, raise_bad_values, raise_missing
from planner.check.lines import as_bash_runs, flag_lines, flag_occurrences, shell_layout
from planner.cost.memory import stage_layers
from planner.emit import MODEL_LINE
from planner.errors import SpecError
from planner.evaluation import model_chunks, stage_modes
from planner.frameworks import megatron as mg
from planner.frameworks.megatron import FLAG as F
from planner.placement import pipeline_layout
from planner.placement.layout import CP_COMM_TYPES, OPTIMIZER_DTYPES, Layout
from planner.placement.precision import blackwell_or_later, grouped_gemm_supported
from planner.placement.rules import Violation, ep_comm_overlap_violations
from planner.specs import files
from planner.specs.cluster import load_cluster
from planner.specs.model import ModelSpec, from_config, load_model

KIND = "megatron-args"
"""The `kind` of a Megatron-LM arguments file."""

_ARCH = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "head_dim",
         "vocab_size", "num_experts")
"""Knobs (= ModelSpec fields) compared when both the file and --model give the model."""

_OPTIMIZERS = {name: optimizer for optimizer, name in mg.OPTIMIZERS.items()}
"""Megatron optimizer name -> the costed optimizer."""

_VAR, _ASSIGN = shell.VAR, shell.ASSIGN


def read(path: Path, *, model: str | None, cluster: str | None, gpus: int | None,
         seq_len: int | None) -> Target:
    """The Target a Megatron-LM launch script or arguments file describes (module docstring).

    Args:
        path: the script or arguments file.
        model: catalog name or path; required unless the file's flags build the model (`_flags_model`) or
            its model line (`planner.emit.MODEL_LINE`) names it.
        cluster: catalog name or path (always required: Megatron arguments never name the GPU).
        gpus: GPU count, required unless torchrun's GPUs per node (x nodes) give it.
        seq_len: tokens per sequence, required unless the file gives the sequence length.

    Raises:
        SpecError: unreadable file, unbalanced quotes, a flag without its value or with a value
            Megatron rejects, an unset shell variable in a flag read, a missing required option, an
            option that contradicts the file, a model that disagrees with the file's architecture.
    """
    text = files.read_text(path, kind="text file (a shell script or Megatron-LM arguments file)")
    try:
        try:
            return _read(path, as_bash_runs(text), text, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
        except SpecError:
            if as_bash_runs(text) == text:
                raise
        # the launch bash runs is unreadable without the flags after a broken continuation (Megatron would exit on
        # it): the layout the file means, failed by the rule line_continuation
        return _read(path, text, text, model=model, cluster=cluster, gpus=gpus, seq_len=seq_len)
    except SpecError as exc:
        raise _unread(exc, text) from None


def _unread(exc: SpecError, text: str) -> SpecError:
    """`exc`, or for a flag it calls missing that the file writes outside what this reader reads (another
    command than the training launch, a heredoc, a string no launch expands), `exc` saying where the file
    writes it, so the message does not contradict the file (fresh-user review 9 #2)."""
    written = flag_lines(text)
    at = written.get(exc.key or "") if exc.key and exc.key.startswith("--") else None
    if at is None or not exc.message.startswith("missing"):
        return exc
    return SpecError(f"{exc.message}; the file writes {exc.key} at line {at}, but not in the training launch this "
                     f"reader reads (a torchrun / pretrain_*.py command, possibly inside `bash -c \"...\"`, the bash "
                     f"arrays and string variables it expands): write it there", file=exc.file, key=exc.key)


def _read(path: Path, text: str, written: str, *, model: str | None, cluster: str | None, gpus: int | None,
          seq_len: int | None) -> Target:
    """`read` of the launch's text (`as_bash_runs`: a flag line after a broken continuation is no part of the
    launch bash runs), the file's `written` text for its layout rules."""
    file = str(path)
    bad: list[SpecError] = []
    looped = launch_loops(written, file)
    repeated: list[tuple[str, str, str]] = []
    args = parse_args(text, file, bad, repeated)
    launchers = launcher_words(text, file)
    slurm = slurm_world(text, launchers)
    launched = ((slurm, f"srun tasks ({mg.SRUN_NODES[0]} x {mg.SRUN_TASKS_PER_NODE[0]}, or {mg.SRUN_TASKS[0]})")
                if slurm is not None else launcher_world(launchers))
    _bad_values(args, file, _unknown_flags(text, launchers), bad)
    line = _model_line(text)
    _missing_options(args, model, cluster, gpus, seq_len, path, launched, line)
    spec, findings = _model(args, model, path, line)
    world = _world(args, gpus, file, launched)
    findings += _rotary_base(args, spec, file) if model is not None or line is not None else []
    findings += _unknown_flags(text, launchers) + shell_layout(written, file) + world_from_gpus(args, gpus) + looped
    findings += duplicate_flags(repeated, text)
    layout = _layout(args, spec, world, seq_len, file, findings)
    tokens, env = shell_words(text, file)
    target_cluster = _cluster(cluster, world, args, file)
    findings += _startup(args, env, spec, layout, file)
    findings += _device_connections(args, env, layout, target_cluster.gpu.name)
    findings += _grouped_gemm(args, target_cluster.gpu.name)
    record = checkpoint_record(args, tokens, spec, layout.tp, file)
    findings += own_checkpoint_vocab(record, spec) if record else []
    if _on(args, "use_checkpoint_args"):
        layout, found = checkpoint_args_vocab(tokens, spec, layout)
        findings += found
    per_layer = _block_recompute(args, spec, layout, file, findings)
    per_stage = None
    with contextlib.suppress(SpecError):  # a split the rules reject: they say why
        per_stage = per_layer and tuple({"full": c["full"], "none": c["none"]}  # block: no selective
                                        for _, c in stage_modes(stage_layers(spec, layout), per_layer))
    if per_stage is None:
        per_layer = None
    else:
        totals = {m: sum(c.get(m, 0) for c in per_stage) for m in ("full", "none")}
        layout = layout.replace(recompute="full" if totals["full"] >= totals["none"] else "none")
    return Target(file=file, kind=KIND, model=spec, cluster=target_cluster,
                  layout=layout, recompute_per_stage=per_stage, recompute_layers=per_layer,
                  findings=tuple(findings), checkpoint=record)


_LAUNCH = re.compile(r"(?<![\w.-])(torchrun|torch\.distributed\.(run|launch)|pretrain_\w+\.py)\b")
"""What marks a shell command as the training launch (torchrun, or Megatron's pretrain_*.py)."""
_ARRAY_OPEN = re.compile(r"^\s*(export\s+)?[A-Za-z_]\w*=\(")


def launch_loops(text: str, file: str) -> list[Violation]:
    """The warning `launch_in_loop` for a training launch (`_LAUNCH`: torchrun, `python -m torch.distributed.run`,
    a pretrain_*.py script under any launcher) inside a shell loop that starts the same launch on each pass (a
    `while` / `until` restart loop, a `for` loop whose variable the launch does not use): it is read once, as one
    pass runs it.

    Raises:
        SpecError: the launch takes a `for` loop's variable (`for TP in 1 2 4; do torchrun ... $TP`): one launch per
            value, which this reader does not unroll (exit 2, naming the loop, its variable and the launch's line).
    """
    lines, out = shell.uncommented(text.splitlines()), []
    for start, end, keyword, name in shell.loops(text):
        at = next((k for k in range(start, min(end, len(lines)) + 1) if _LAUNCH.search(lines[k - 1])), None)
        if at is None:
            continue
        body = "\n".join(lines[start:end])
        if name is not None and re.search(rf"\$\{{?{name}\b", body):
            raise SpecError(f"the training launch of line {at} runs inside the loop `for {name} ...` (line {start}) "
                            f"and takes ${name} from it: one launch per value, which this reader does not unroll; "
                            f"check one launch per file, its values written", file=file, key=f"line {at}")
        out.append(Violation(rule="launch_in_loop", severity="warning", line=at,
                             message=f"the training launch of line {at} runs inside a shell `{keyword}` loop (lines "
                                     f"{start}-{end}): read once, as each pass starts it",
                             fix="nothing, if the loop restarts the same job; else check one launch per file"))
    return out


def launch_text(text: str) -> str:
    """The text with every line blanked that belongs to neither the launch command, a bash array
    (Megatron's example scripts keep the launch's flags in arrays) nor a quoted string variable
    the launch expands (`_keep_strings`): the flags of other
    commands in a script (`mkdir -p`, `pip install --upgrade`, a preprocessing step) are not
    Megatron's. A file with no launch command (an arguments file) is kept whole."""
    lines = text.splitlines()
    codes = shell.uncommented(lines)
    if not any(_LAUNCH.search(code) for code in codes):
        return text
    keep, more = [False] * len(lines), shell.continues(lines)
    start, depth = 0, 0
    for i, code in enumerate(codes):
        if depth == 0 and _ARRAY_OPEN.match(code):
            depth = 1
            keep[i] = True
            depth += code.count("(") - code.count(")") - 1
            start = i + 1
            continue
        if depth > 0:
            keep[i] = True
            depth += code.count("(") - code.count(")")
            start = i + 1
            continue
        if not more[i]:  # the end of one logical command (no backslash, no quote left open)
            if any(_LAUNCH.search(codes[j]) for j in range(start, i + 1)):
                keep[start:i + 1] = [True] * (i + 1 - start)
            start = i + 1
    _keep_strings(lines, keep)
    return "\n".join(line if k else "" for line, k in zip(lines, keep))


def arrays_apart(text: str) -> str:
    """`text` with each bash array's opening `(` and closing `)` set apart from the words next to
    them (`_array_words`), line by line, nesting counted as `launch_text` counts it."""
    lines, depth = text.splitlines(keepends=True), 0
    codes = shell.uncommented([line.rstrip("\r\n") for line in lines])
    for i, (line, code) in enumerate(zip(lines, codes)):
        body = line.rstrip("\r\n")
        end = line[len(body):]
        if depth == 0 and _ARRAY_OPEN.match(code):
            depth = code.count("(") - code.count(")")
            lines[i] = _array_words(body, opens=True, closes=depth == 0) + end
        elif depth > 0:
            depth += code.count("(") - code.count(")")
            lines[i] = _array_words(body, opens=False, closes=depth == 0) + end
    return "".join(lines)


def _array_words(line: str, *, opens: bool, closes: bool) -> str:
    """A bash array's line with its parentheses set apart from the words next to them: the `(` of
    `ARGS=(--first-flag 80` and the `)` of `--last-flag)` are bash syntax, not part of the first or
    last flag (bash reads `ARGS=(--a --b)` as the words --a and --b, as it does with each
    parenthesis on a line of its own; bash(1) "Arrays"; senior review 7 H4)."""
    code = shell.code(line)
    comment = line[len(code):]
    if opens:
        code = code.replace("=(", "=( ", 1)
    if closes and code.rstrip().endswith(")"):
        stripped = code.rstrip()
        code = stripped[:-1] + " )" + code[len(stripped):]
    return code + comment


_STRING_OPEN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=([\"'])")
_CLOSE = {'"': re.compile(r'(?<!\\)"'), "'": re.compile("'")}


def _keep_strings(lines: list[str], keep: list[bool]) -> None:
    """Mark the lines of each quoted string assignment (`GPT_ARGS="..."`, one line or many) whose
    variable a kept line expands (`$GPT_ARGS`, `${GPT_ARGS}`), until no more are found."""
    while True:
        used = {m.group(1) or m.group(3) for line, k in zip(shell.uncommented(lines), keep) if k
                for m in _VAR.finditer(line)}
        found = False
        for i, line in enumerate(lines):
            opening = _STRING_OPEN.match(line)
            if keep[i] or not opening or opening.group(1) not in used:
                continue
            rest = "\n".join(lines[i:])[opening.end():]
            close = _CLOSE[opening.group(2)].search(rest)
            end = i + (rest[:close.start()].count("\n") if close else len(lines) - 1 - i)
            keep[i:end + 1] = [True] * (end + 1 - i)
            found = True
        if not found:
            return


_LAUNCHER_PROGRAMS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
"""Launchers that start one rank per GPU themselves (their GPUs per node give the world size, not srun's tasks)."""


def launcher_words(text: str, file: str) -> list[list[str]]:
    """The words before the training script (the first `*.py` word) of each launch command (`launch_text`,
    backslash continuations joined, the file's variables expanded): the launcher's and its options (srun,
    torchrun, `python -m torch.distributed.run`, deepspeed), which are not Megatron-LM's arguments."""
    env = shell_words(text, file)[1]
    out = []
    for _, line in shell.commands(launch_text(text)):
        try:
            words = shell.unwrap(shell.join_expansions(shell.split(line)), file)
        except (ValueError, SpecError):
            continue
        words = [shell.substitute(w, env) for w in words]
        script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
        if script:
            out.append(words[:script])
    return out


def slurm_world(text: str, launchers: list[list[str]]) -> int | None:
    """Ranks an `srun` launch starts (`mg.SRUN`: --ntasks, else --nodes x --ntasks-per-node), its options after
    the file's `#SBATCH` directives, which give their defaults; None (the world size is then --gpus's) when no
    launch runs srun, when srun starts torchrun (whose GPUs per node count), or when the file does not give
    both numbers or one is no integer (inside an allocation srun takes them from the job's environment)."""
    directives = [w for line in text.splitlines() if line.startswith(mg.SBATCH)
                  for w in shell.code(line[len(mg.SBATCH):]).split()]
    for words in launchers:
        bases = [w.rsplit("/", 1)[-1] for w in words]
        if mg.SRUN not in bases:
            continue
        if any(b in _LAUNCHER_PROGRAMS for b in bases):
            return None
        options = directives + words[bases.index(mg.SRUN) + 1:]
        tasks = _option(options, mg.SRUN_TASKS)
        values = [tasks] if tasks is not None else [_option(options, mg.SRUN_NODES),
                                                    _option(options, mg.SRUN_TASKS_PER_NODE)]
        if not all(v is not None and re.fullmatch(r"\d{1,9}", v) and int(v) >= 1 for v in values):
            return None
        return int(values[0]) * (int(values[1]) if len(values) > 1 else 1)
    return None


def launcher_world(launchers: list[list[str]]) -> tuple[int, str] | None:
    """(ranks, what gives them) of a DeepSpeed or Accelerate launch of the training script: DeepSpeed's --num_gpus x
    --num_nodes (`mg.DEEPSPEED_GPUS`; one node when the line names neither nodes nor hosts), Accelerate's
    --num_processes (`mg.ACCELERATE_PROCESSES`, all ranks); None when no launch uses them, or a count is not a
    positive literal integer (the default -1 is every GPU of the hosts the launcher finds: --gpus then)."""
    for words in launchers:
        bases = [w.rsplit("/", 1)[-1] for w in words]
        if mg.DEEPSPEED_LAUNCHER in bases:
            options = words[bases.index(mg.DEEPSPEED_LAUNCHER) + 1:]
            nodes = _option(options, mg.DEEPSPEED_NODES)
            if nodes is None and any(w.split("=", 1)[0] in mg.DEEPSPEED_HOSTS for w in options):
                return None
            values = [_option(options, mg.DEEPSPEED_GPUS), nodes or "1"]
            what = f"{mg.DEEPSPEED_LAUNCHER} {mg.DEEPSPEED_GPUS[0]} x {mg.DEEPSPEED_NODES[0]}"
        elif any(bases[k:k + 2] == list(mg.ACCELERATE_LAUNCHER) for k in range(len(bases))):
            values = [_option(words, mg.ACCELERATE_PROCESSES), "1"]
            what = f"{' '.join(mg.ACCELERATE_LAUNCHER)} {mg.ACCELERATE_PROCESSES[0]}"
        else:
            continue
        if not all(v is not None and re.fullmatch(r"\d{1,9}", v) and int(v) >= 1 for v in values):
            return None
        return int(values[0]) * int(values[1]), what
    return None


def _option(words: list[str], names: tuple[str, ...]) -> str | None:
    """The last value of a launcher option among `words` (`--name value`, `--name=value`, `-N value`, `-N8`)."""
    value = None
    for k, word in enumerate(words):
        for name in names:
            if word == name and k + 1 < len(words):
                value = words[k + 1]
            elif word.startswith(name + "=") and name.startswith("--"):
                value = word[len(name) + 1:]
            elif not name.startswith("--") and word.startswith(name) and word[len(name):].isdigit():
                value = word[len(name):]
    return value


def _unknown_flags(text: str, launchers: list[list[str]]) -> list[Violation]:
    """An error for each `--flag` of the launch (`launch_text`) that neither Megatron-LM
    (`mg.recorded_flags()`) nor torchrun defines and no launcher takes before the training script
    (`launcher_words`: srun's --container-image is srun's), with the Megatron flag of the knob it abbreviates
    (`mg.ABBREVIATIONS`), the replacement of a flag it removed (`mg.RENAMED`), or else the closest one: Megatron's
    argparse exits on it ("unrecognized arguments"; `parse_args`, allow_abbrev=False, so a prefix
    is no flag either)."""
    known = mg.recorded_flags()
    launcher = {w.split("=", 1)[0] for words in launchers for w in words if w.startswith("--")}
    out = []
    for flag in flag_lines(launch_text(text)):
        if not flag.startswith("--") or flag in known or flag in mg.TORCHRUN_FLAGS or flag in launcher:
            continue
        if flag in mg.RENAMED:
            out.append(_removed_flag(flag, mg.RENAMED[flag]))
            continue
        knob = mg.ABBREVIATIONS.get(flag)
        close = [F[knob]] if knob in F else [] if knob else difflib.get_close_matches(
            flag, known, n=1, cutoff=0.6)
        hint = (f"; did you mean {close[0]}?" if close else
                f"; Megatron-LM has no {knob} flag: it derives {knob} = world size / "
                f"(tp x pp x cp)." if knob else ".")
        out.append(Violation(
            rule="megatron_unknown_flag",
            message=f"{flag} is not a Megatron-LM flag{hint} Megatron-LM's argparse exits on an "
                    f"unrecognized argument before training starts (arguments.py parse_args)",
            fix=f"write {close[0]}" if close else f"remove {flag}"))
    return out


def _removed_flag(flag: str, removed: mg.Removed) -> Violation:
    """The unknown-flag error of a flag Megatron-LM removed (`mg.RENAMED`): its replacement and the commit
    that removed it, not the closest name (fresh-user review 10 finding 11)."""
    then = (f"Megatron-LM replaced it with {removed.replacement}" if removed.replacement else
            "Megatron-LM removed it")
    return Violation(
        rule="megatron_unknown_flag",
        message=f"{flag} is not a Megatron-LM flag: {then} ({removed.source}). Megatron-LM's argparse exits "
                f"on an unrecognized argument before training starts (arguments.py parse_args)",
        fix=f"write {removed.replacement}" if removed.replacement else f"remove {flag}")


def _overlap_startup(args: dict, layout: Layout) -> list[Violation]:
    """Megatron-LM's start-up assertions on the overlap switches (NVIDIA/Megatron-LM@d98e8a6
    megatron/training/arguments.py `validate_args` l. 1024-1029: the parameter-gather overlap
    needs a distributed optimizer or Megatron-FSDP and the gradient-reduce overlap; l. 1441-1442:
    the TP comm overlap needs sequence parallelism); the EP all-to-all overlap's assertions are the
    placement rule `rules.ep_comm_overlap_violations`, applied here to the layout before a
    per-stage recompute split replaces its granularity (a file's full recompute granularity
    breaks it however many layers it recomputes), and its assertion on a flag a Layout does not
    hold: no shared-expert overlap (transformer_config.py l. 3039-3041)."""
    out = list(ep_comm_overlap_violations(layout))
    if layout.ep_comm_overlap and _on(args, "moe_shared_expert_overlap"):
        out.append(Violation(
            rule="ep_comm_overlap_shared_expert_overlap", fix=f"drop {F['moe_shared_expert_overlap']}",
            message=f"{F['ep_comm_overlap']} with {F['moe_shared_expert_overlap']}: Megatron-LM asserts "
                    f"\"disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm\" "
                    f"(transformer_config.py TransformerConfig.__post_init__ l. 3039-3041)"))
    if _on(args, "overlap_param_gather"):
        needs = [F[k] for k in ("overlap_grad_reduce",) if not _on(args, k)]
        if not (_on(args, "distributed_optimizer") or _on(args, "megatron_fsdp")):
            needs.append(f"{F['distributed_optimizer']} (or {F['megatron_fsdp']})")
        if needs:
            out.append(Violation(
                rule="overlap_param_gather_needs", fix=f"add {' and '.join(needs)}",
                message=f"{F['overlap_param_gather']} without {' and '.join(needs)}: Megatron-LM "
                        f"asserts both (validate_args)"))
    return out


def _dispatcher_startup(args: dict, spec: ModelSpec, layout: Layout) -> list[Violation]:
    """Megatron-LM's start-up checks on the MoE token dispatcher flags (NVIDIA/Megatron-LM@d98e8a6
    megatron/core/transformer/transformer_config.py `__post_init__` l. 1743-1768: the deprecated DeepEP
    switch raises without the flex dispatcher or with the hybridep backend, the ncclep backend without
    flex; megatron/core/transformer/moe/token_dispatcher.py `MoEFlexTokenDispatcher.__init__`
    (l. 1835, 1854): the deepep and ncclep backends assert tp x ep > 1; transformer_config.py
    l. 1820-1826: the shared-expert overlap of a model with shared experts only with the alltoall or
    flex dispatcher)."""
    kind = args.get(F["moe_token_dispatcher"]) or mg.DEFAULT["moe_token_dispatcher"]
    backend = args.get(F["moe_flex_backend"]) or mg.DEFAULT["moe_flex_backend"]
    deepep, flex = _on(args, "moe_enable_deepep"), F["moe_token_dispatcher"] + " flex"
    out = []
    if deepep and kind != "flex":
        out.append(Violation(
            rule="deepep_needs_flex", fix=f"give {flex}, or drop {F['moe_enable_deepep']}",
            message=f"{F['moe_enable_deepep']} with {F['moe_token_dispatcher']} {kind}: Megatron-LM "
                    "raises \"DeepEP backend is only supported with flex token dispatcher\" "
                    "(TransformerConfig.__post_init__)"))
    if deepep and backend == "hybridep":
        out.append(Violation(
            rule="deepep_and_hybridep", fix=f"drop {F['moe_enable_deepep']} (deprecated)",
            message=f"{F['moe_enable_deepep']} with {F['moe_flex_backend']} hybridep: Megatron-LM "
                    "raises \"Only one backend is supported for flex token dispatcher\" "
                    "(TransformerConfig.__post_init__)"))
    if _on(args, "moe_shared_expert_overlap") and spec.shared_expert_intermediate_size and kind == "allgather":
        out.append(Violation(
            rule="shared_expert_overlap_dispatcher", fix=f"{F['moe_token_dispatcher']} alltoall (or flex)",
            message=f"{F['moe_shared_expert_overlap']} with {F['moe_token_dispatcher']} {kind}"
                    f"{'' if F['moe_token_dispatcher'] in args else ' (the default)'}: Megatron-LM raises "
                    "\"moe_shared_expert_overlap only works with alltoall or flex token dispatcher.\" "
                    "(TransformerConfig.__post_init__)"))
    if backend == "ncclep" and kind != "flex":
        out.append(Violation(
            rule="ncclep_needs_flex", fix=f"give {flex}",
            message=f"{F['moe_flex_backend']} ncclep with {F['moe_token_dispatcher']} {kind}: "
                    "Megatron-LM raises that ncclep requires the flex dispatcher "
                    "(TransformerConfig.__post_init__)"))
    if spec.is_moe and kind == "flex" and (deepep or backend == "deepep"):   # DeepEP's buffer: the tp_ep group
        out += deepep_findings(layout.etp * layout.ep, "megatron", f"{flex} with backend deepep over expert tp x ep")
    if (spec.is_moe and kind == "flex" and (deepep or backend in ("deepep", "ncclep"))
            and layout.tp * layout.ep == 1):
        out.append(Violation(
            rule="flex_needs_tp_ep", fix=f"{F['moe_token_dispatcher']} alltoall, or ep > 1",
            message=f"{flex} with backend {'deepep' if deepep else backend} and tp x ep = 1: "
                    "Megatron-LM asserts tp x ep > 1 (MoEFlexTokenDispatcher)"))
    return out


MTP_POSITIONS = ("rope", "none")
"""The position embedding types multi-token prediction starts with. Source: NVIDIA/Megatron-LM@d98e8a6
megatron/training/arguments.py `validate_args` l. 882-886 (rope or none; the later check at
l. 1942-1947 also lists learned_absolute and mrope, but this one runs first)."""


def _attention_startup(args: dict, file: str) -> list[Violation]:
    """Megatron-LM's start-up assertions on multi-latent attention and multi-token prediction over
    flags the reader parses: MLA refuses grouped-query attention (rule `mla_with_gqa`), MTP needs
    rope or no position embedding (rule `mtp_position_embedding`, `MTP_POSITIONS`).

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py `validate_args` l. 1973-1974
    ("Group query attention is mutually exclusive with multi latent attention.") and l. 882-886."""
    out = []
    if _on(args, "multi_latent_attention") and _on(args, "group_query_attention"):
        out.append(Violation(
            rule="mla_with_gqa", fix=f"drop {F['group_query_attention']} (and {F['num_key_value_heads']})",
            message=f"{F['multi_latent_attention']} with {F['group_query_attention']}: Megatron-LM asserts "
                    f"\"Group query attention is mutually exclusive with multi latent attention.\" "
                    f"(validate_args)"))
    position = _choice(args, "position_embedding_type", file) or mg.DEFAULT["position_embedding_type"]
    mtp = _int(args, "mtp_num_layers", file, 0)
    if mtp and position not in MTP_POSITIONS:
        out.append(Violation(
            rule="mtp_position_embedding",
            fix=f"{F['position_embedding_type']} rope, or drop {F['mtp_num_layers']}",
            message=f"{F['mtp_num_layers']} {mtp} with {F['position_embedding_type']} {position}"
                    f"{'' if F['position_embedding_type'] in args else ' (the default)'}: Megatron-LM "
                    f"asserts multi-token prediction runs with rope or none (validate_args)"))
    return out


AUX_LOSS_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss")
"""Load-balancing types that are an auxiliary loss scaled by their coefficient (0: no loss).
Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/moe/router.py
`is_aux_loss_enabled` l. 403-408."""


def _load_balancing(args: dict, spec: ModelSpec, file: str) -> list[Violation]:
    """The router's load balancing: Megatron-LM's start-up checks on the type and coefficient lists
    (error `moe_load_balancing_args`), and the warning `moe_no_load_balancing` when an MoE script
    trains with none -- every auxiliary-loss type at coefficient 0 (Megatron's default: type
    aux_loss, coefficient 0.0), no sinkhorn / quantile balancing and no expert bias
    (aux-loss-free balancing) -- unless the file chooses type none explicitly (a deliberate
    balancing-free run). Without balancing dropless routing drifts to hot experts, and the costed
    step time assumes uniform routing.

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py `_add_moe_args`
    l. 3532-3537 (nargs "+"; "a starting value of 1e-2 is recommended") and `validate_args`
    l. 1661-1664 (a one-element list becomes a scalar); transformer_config.py l. 1828-1834 (a list
    of types asserts a coefficient list of the same length); router.py `get_aux_loss_coeff` /
    `is_aux_loss_enabled` l. 388-408 (coefficient 0 skips the loss, l. 419, 467, 516), l. 771-773
    (sinkhorn and quantile balancing apply only as the one type), l. 298 (sinkhorn asserts
    coefficient 0; quantile balancing's assertion, l. 226-230, cannot fail from the flags: alone, its
    coefficient belongs to no auxiliary loss), l. 180 and 733-745 (the expert bias updated from the
    token counts)."""
    if not spec.is_moe:
        return []
    kinds = _words(args, "moe_router_load_balancing_type", file) or (mg.DEFAULT["moe_router_load_balancing_type"],)
    given = str(args.get(F["moe_aux_loss_coeff"], mg.DEFAULT["moe_aux_loss_coeff"])).split()
    try:
        coeffs = [float(word) for word in given]
    except ValueError:
        raise SpecError(f"value {' '.join(given)!r} must be numbers (one coefficient per "
                        f"{F['moe_router_load_balancing_type']})", file=file, key=F["moe_aux_loss_coeff"]) from None
    type_flag, coeff_flag = F["moe_router_load_balancing_type"], F["moe_aux_loss_coeff"]
    if len(kinds) > 1 and len(coeffs) != len(kinds):
        return [Violation(
            rule="moe_load_balancing_args", fix=f"give {coeff_flag} {len(kinds)} values, one per type",
            message=f"{type_flag} {' '.join(kinds)} with {len(coeffs)} {coeff_flag} value(s): Megatron-LM "
                    f"asserts \"moe_aux_loss_coeff must be a list of the same length as "
                    f"moe_router_load_balancing_type\" (TransformerConfig.__post_init__)")]
    coeff = dict(zip(kinds, coeffs)) if len(kinds) > 1 else {kinds[0]: coeffs[0]}
    aux_on = [k for k in AUX_LOSS_TYPES if coeff.get(k, 0.0) > 0]
    alone = kinds[0] if len(kinds) == 1 else None  # sinkhorn / quantile balancing act only alone (l. 771-773)
    if alone == "sinkhorn" and coeffs[0] != 0:
        return [Violation(
            rule="moe_load_balancing_args", fix=f"{coeff_flag} 0 with sinkhorn",
            message=f"{type_flag} sinkhorn with {coeff_flag} {' '.join(given)}: Megatron-LM's router "
                    f"asserts \"Sinkhorn routing does not support aux loss.\" (router.py)")]
    balanced = aux_on or alone in ("sinkhorn", "quantile_balancing") or _on(args, "moe_router_enable_expert_bias")
    if balanced or (type_flag in args and "none" in kinds):
        return []
    model_coeff = spec.extra.get("router_aux_loss_coef")
    value = f"{model_coeff:g} (the model's router_aux_loss_coef)" if isinstance(model_coeff, (int, float)) \
        and model_coeff > 0 else "1e-2 (Megatron-LM's recommended starting value)"
    return [Violation(
        rule="moe_no_load_balancing", severity="warning",
        message=f"the MoE router trains with no load balancing: {type_flag} {' '.join(kinds)} at "
                f"{coeff_flag} {' '.join(given)} (Megatron-LM's default 0.0 skips the loss) and no "
                f"{F['moe_router_enable_expert_bias']}; dropless routing then drifts to hot experts "
                f"(the costed step time assumes uniform routing)",
        fix=f"{coeff_flag} {value}, or {F['moe_router_enable_expert_bias']} with "
            f"{F['moe_router_score_function']} sigmoid; {type_flag} none if the run is meant to have none")]


def _startup(args: dict, env: dict[str, str], spec: ModelSpec, layout: Layout,
             file: str) -> list[Violation]:
    """Megatron-LM's start-up assertions on FSDP and context parallelism the placement rules do
    not state (a layout string's MTP count against the MTP layers trained is the placement rule
    `mtp_layout`, `rules._pipeline_layout`, which reads the mtp_num_layers flag as `Layout.mtp_layers`).

    Source: Megatron-LM d98e8a6 `megatron/training/arguments.py` `validate_args`: Megatron-FSDP
    asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 and args.ckpt_format == "fsdp_dtensor"; that format
    asserts args.use_megatron_fsdp; torch FSDP2 asserts CUDA_DEVICE_MAX_CONNECTIONS != 1,
    ckpt_format torch_dist or torch_dcp, untied embeddings, no fp16 and ep = 1 (l. 1036).
    TransformerEngine d0067d0 `pytorch/attention/dot_product_attention/context_parallel.py`
    (cp_comm_type a2a: the Q and K heads of each tensor-parallel rank divisible by cp)."""
    out = (_overlap_startup(args, layout) + _dispatcher_startup(args, spec, layout)
           + _module_startup(args, env, spec, layout) + _schedule(args)
           + _load_balancing(args, spec, file) + _attention_startup(args, file))
    ckpt = _choice(args, "ckpt_format", file) or mg.DEFAULT["ckpt_format"]
    connections = env.get(mg.DEVICE_MAX_CONNECTIONS)
    for knob in ("megatron_fsdp", "torch_fsdp2"):
        if _on(args, knob) and connections == "1":
            out.append(Violation(
                rule="megatron_fsdp_device_connections",
                message=f"{mg.DEVICE_MAX_CONNECTIONS}=1 with {F[knob]}: Megatron-LM asserts FSDP "
                        f"runs with {mg.DEVICE_MAX_CONNECTIONS} > 1 or unset (validate_args)",
                fix=f"remove {mg.DEVICE_MAX_CONNECTIONS}=1 from the script"))
    fsdp_format = mg.BY_KNOB["ckpt_format"].choices[-1]
    if _on(args, "megatron_fsdp") != (ckpt == fsdp_format):
        message = (f"{F['megatron_fsdp']} with {F['ckpt_format']} {ckpt}: Megatron-LM asserts "
                   f"Megatron-FSDP saves {fsdp_format}" if _on(args, "megatron_fsdp") else
                   f"{F['ckpt_format']} {fsdp_format} without {F['megatron_fsdp']}: Megatron-LM "
                   f"asserts {fsdp_format} only with Megatron-FSDP")
        out.append(Violation(rule="megatron_fsdp_ckpt_format", message=message + " (validate_args)",
                             fix=f"{F['ckpt_format']} {fsdp_format}" if _on(args, "megatron_fsdp")
                             else f"add {F['megatron_fsdp']} or another {F['ckpt_format']}"))
    if _on(args, "torch_fsdp2"):
        broken = [what for what, bad in (
            (f"{F['ckpt_format']} {ckpt} (torch_dist or torch_dcp)", ckpt not in ("torch_dist",
                                                                                   "torch_dcp")),
            (f"no {F['untie_embeddings']}", not _on(args, "untie_embeddings")),
            (F["fp16"], _on(args, "fp16")),
            (f"{F['ep']} {layout.ep} (\"not supported with expert parallelism\", l. 1036)", layout.ep > 1)) if bad]
        if broken:
            out.append(Violation(rule="torch_fsdp2_args", message=(
                f"{F['torch_fsdp2']} with {', '.join(broken)}: Megatron-LM asserts against it "
                f"(validate_args)"), fix="change those flags"))
    comm = args.get(F["cp_comm_type"])
    if comm == "a2a" and layout.cp > 1:
        q, k = spec.num_attention_heads // layout.tp, max(1, spec.num_key_value_heads // layout.tp)
        if q % layout.cp or k % layout.cp:
            out.append(Violation(
                rule="ulysses_heads",
                message=f"{F['cp_comm_type']} a2a splits each tensor-parallel rank's heads over "
                        f"cp={layout.cp}: num_attention_heads={spec.num_attention_heads} / tp="
                        f"{layout.tp} = {q} query and {k} key/value heads per rank, not both "
                        f"divisible by {layout.cp} (Transformer Engine asserts it at the first "
                        f"attention)",
                fix=f"{F['cp_comm_type']} p2p (ring attention: no head constraint), or cp in "
                    f"{[d for d in range(1, q + 1) if q % d == 0 and k % d == 0]}"))
    return out


def _device_connections(args: dict, env: dict[str, str], layout: Layout, gpu_name: str) -> list[Violation]:
    """CUDA_DEVICE_MAX_CONNECTIONS with tp or cp > 1 before Blackwell: Megatron-LM asserts the
    value "1" unless Megatron-FSDP / torch FSDP2 or the EP all-to-all overlap runs (those only
    warn). A script that sets another value is an error; one that leaves it unset a warning (the
    job's environment may set it; Megatron reads `os.environ`).

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py `validate_args` l. 1453-1479
    (`get_device_arch_version() < 10`; assert "Using tensor model parallelism or context
    parallelism require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1")."""
    exempt = any(_on(args, k) for k in ("megatron_fsdp", "torch_fsdp2", "ep_comm_overlap"))
    if (layout.tp == 1 and layout.cp == 1) or exempt or blackwell_or_later(gpu_name):
        return []
    value, name = env.get(mg.DEVICE_MAX_CONNECTIONS), mg.DEVICE_MAX_CONNECTIONS
    if value == "1":
        return []
    why = (f"with tp={layout.tp} cp={layout.cp} on {gpu_name} (before Blackwell) Megatron-LM asserts "
           f"{name} == \"1\" at start-up (validate_args)")
    if value is None:
        return [Violation(rule="device_max_connections", severity="warning",
                          message=f"the script does not set {name}: {why}; the job's environment must set it",
                          fix=f"export {name}=1 before the launch")]
    return [Violation(rule="device_max_connections", message=f"{name}={value} in the script: {why}",
                      fix=f"export {name}=1")]


def _grouped_gemm(args: dict, gpu_name: str) -> list[Violation]:
    """Grouped GEMM below compute capability 8 (`precision.grouped_gemm_supported`): Megatron-LM
    asserts "Unsupported compute capability for GroupedGEMM kernels." (NVIDIA/Megatron-LM@d98e8a6
    megatron/training/arguments.py `validate_args` l. 1378-1380)."""
    if not _on(args, "moe_grouped_gemm") or grouped_gemm_supported(gpu_name):
        return []
    return [Violation(
        rule="grouped_gemm_compute_capability", fix=f"drop {F['moe_grouped_gemm']} (and moe_act recompute)",
        message=f"{F['moe_grouped_gemm']} on {gpu_name} (compute capability below 8): Megatron-LM asserts "
                f"\"Unsupported compute capability for GroupedGEMM kernels.\" (validate_args)")]


def _module_startup(args: dict, env: dict[str, str], spec: ModelSpec, layout: Layout) -> list[Violation]:
    """Megatron-LM's start-up checks on the recompute / offload module lists that read flags a
    Layout does not hold (the others are the placement rule `recompute_modules`,
    `rules.recompute_module_violations`).

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py
    `__post_init__` (under selective granularity: moe_act needs moe_grouped_gemm, l. 1964-1967;
    shared_experts refuses the shared-expert overlap, l. 1991-1998; the module list is read
    only under selective granularity: l. 1943, transformer_layer.py l. 473) and
    megatron/training/arguments.py `validate_args` l. 1935-1940 (fine-grained offloading under
    Transformer Engine >= 2.10 asserts NVTE_CPU_OFFLOAD_V1=1)."""
    out = []
    modules = set(layout.recompute_modules or ())
    flag = F["recompute_modules"]
    if flag in args and layout.recompute != "selective":
        out.append(Violation(
            rule="recompute_modules_unused", severity="warning",
            message=f"{flag} with {F['recompute_granularity']} {layout.recompute}: Megatron-LM reads "
                    f"the module list only under selective granularity, so it has no effect",
            fix=f"{F['recompute_granularity']} selective, or drop {flag}"))
    if layout.recompute == "selective" and spec.is_moe and "moe_act" in modules and not _on(args, "moe_grouped_gemm"):
        out.append(Violation(
            rule="recompute_modules",
            message=f"{flag} moe_act without {F['moe_grouped_gemm']}: Megatron-LM raises \"moe_act in "
                    f"recompute_modules is only supported with moe_grouped_gemm.\" (transformer_config.py)",
            fix=f"add {F['moe_grouped_gemm']}, or drop moe_act"))
    if (layout.recompute == "selective" and "shared_experts" in modules and spec.shared_expert_intermediate_size
            and _on(args, "moe_shared_expert_overlap")):
        out.append(Violation(
            rule="recompute_modules",
            message=f"{flag} shared_experts with {F['moe_shared_expert_overlap']}: Megatron-LM raises "
                    f"\"shared_experts recompute cannot work with {F['moe_shared_expert_overlap']}.\" "
                    f"(transformer_config.py)",
            fix=f"drop shared_experts or {F['moe_shared_expert_overlap']}"))
    if layout.offload_modules and env.get(mg.CPU_OFFLOAD_V1) != "1":
        out.append(Violation(
            rule="offload_environment", severity="warning",
            message=f"{F['fine_grained_activation_offloading']} without {mg.CPU_OFFLOAD_V1}=1 in the "
                    f"script: under Transformer Engine >= 2.10 Megatron-LM asserts it (validate_args)",
            fix=f"export {mg.CPU_OFFLOAD_V1}=1 before the launch"))
    return out


# ---------------------------------------------------------------- checkpoint vocabulary

_LOADS = ("load", "pretrained_checkpoint")
"""The knobs of the flags that load a checkpoint's weights (`megatron/training/checkpointing.py`
`load_checkpoint`: args.load, and args.pretrained_checkpoint for fine-tuning)."""


def checkpoint_record(args: dict, tokens: list[str], spec: ModelSpec, tp: int,
                      file: str) -> dict | None:
    """What the file says of the checkpoints it saves and loads (None when it neither saves nor
    loads one): {file, save: path or None,
    loads: {flag: path}, vocab_size, divisible_by, tp, padded_vocab_size (`mg.padded_vocab_size`),
    use_checkpoint_args, vocab_file}. A path holding a shell variable the file does not set is
    left out (unknown). The vocabulary is the file's vocab_size flag, else the model's."""
    paths = {knob: _text_value(tokens, F[knob]) for knob in ("save", *_LOADS)}
    if not any(paths.values()):
        return None
    vocab = _int(args, "vocab_size", file) or spec.vocab_size
    divisible = _int(args, "vocab_divisible_by", file)
    return {"file": file, "save": paths["save"],
            "loads": {F[k]: paths[k] for k in _LOADS if paths[k] is not None},
            "vocab_size": vocab, "divisible_by": divisible, "tp": tp,
            "padded_vocab_size": mg.padded_vocab_size(vocab, divisible, tp),
            "use_checkpoint_args": _on(args, "use_checkpoint_args"),
            "vocab_file": _text_value(tokens, F["vocab_file"]) is not None}


def checkpoint_args_vocab(tokens: list[str], spec: ModelSpec, layout: Layout) -> tuple[Layout, list[Violation]]:
    """(layout, findings) of a file with the use_checkpoint_args switch: what the costed
    vocabulary rows are and how far they are known.

    Megatron-LM (d98e8a6 `megatron/training/arguments.py` `parse_and_validate_args`) asserts a
    load or pretrained_checkpoint path beside the switch, then `checkpointing.py`
    `load_args_from_checkpoint` sets padded_vocab_size from the checkpoint's saved args (not
    forced, but nothing sets it before), which `build_tokenizer.py` `_set_padded_vocab_size` keeps
    instead of padding the vocabulary to vocab_divisible_by x tp; it also forces architecture args
    from the checkpoint (num_query_groups, swiglu, normalization,
    untie_embeddings_and_output_weights, num_experts, moe_router_topk, ...) and takes num_layers,
    hidden_size, ffn_hidden_size, num_attention_heads where the file leaves them unset. A checkpoint
    without saved args (a converted one) leaves every arg as given. The planner does not read the
    checkpoint: where the model states the rows its checkpoint holds (`padded_vocab_size` differing
    from `vocab_size`, e.g. BLOOM) they are costed (`Layout.vocab_rows`); else the padding the run
    would compute is costed and a warning says so, with the rows of a checkpoint saved at tp 1."""
    if not any(word.partition("=")[0] in (F[k] for k in _LOADS) for word in tokens):
        return layout, [Violation(
            rule="megatron_checkpoint_args_without_load",
            message=f"{F['use_checkpoint_args']} without {F['load']} or {F['pretrained_checkpoint']}: "
                    f"Megatron-LM asserts one of them at start-up (arguments.py "
                    f"parse_and_validate_args)",
            fix=f"add {F['load']} PATH, or drop {F['use_checkpoint_args']}")]
    if spec.padded_vocab_size != spec.vocab_size:
        return layout.replace(vocab_rows=spec.padded_vocab_size), []
    divisible = layout.vocab_divisible_by or mg.DEFAULT["vocab_divisible_by"]
    rows = mg.padded_vocab_size(spec.vocab_size, divisible, layout.tp)
    at_tp1 = mg.padded_vocab_size(spec.vocab_size, divisible, 1)
    return layout, [Violation(
        rule="megatron_checkpoint_args_vocab", severity="warning",
        message=f"{F['use_checkpoint_args']}: Megatron-LM takes the embedding rows (padded_vocab_size) "
                f"and the architecture from the checkpoint's saved args, which the planner does not "
                f"read; memory counts {rows} rows, the vocabulary {spec.vocab_size} padded to a "
                f"multiple of {divisible} x tp {layout.tp} as this run would pad it (a checkpoint "
                f"saved at tp 1 with {F['vocab_divisible_by']} {divisible} holds {at_tp1}) and "
                f"{spec.name}'s architecture",
        fix="give --model a config whose padded_vocab_size is the checkpoint's rows to cost them "
            "exactly")]


def _text_value(tokens: list[str], flag: str) -> str | None:
    """The last value the words give `flag` (`--flag value` or `--flag=value`); None when absent
    or when it still holds a `$` (a variable the file does not set, a substitution)."""
    value = None
    for i, word in enumerate(tokens):
        name, eq, given = word.partition("=")
        if name == flag:
            value = given if eq else (tokens[i + 1] if i + 1 < len(tokens) else None)
    return None if value is None or "$" in value or value.startswith("--") else value


def own_checkpoint_vocab(record: dict, spec: ModelSpec) -> list[Violation]:
    """`megatron_checkpoint_vocab` for a checkpoint of the model itself: where the model states
    the rows its checkpoint holds (`padded_vocab_size` differing from `vocab_size`, e.g. BLOOM's
    250,680 tokens in 250,880 rows, FC-08) and the file loads a checkpoint other than the one it
    saves (a resumed run reloads its own rows), Megatron-LM's padded vocabulary must equal them."""
    if spec.padded_vocab_size == spec.vocab_size:
        return []
    out = []
    for flag, path in record["loads"].items():
        if path == record["save"]:
            continue
        found = vocab_mismatch(record, flag, spec.padded_vocab_size, None,
                               f"the checkpoint of {spec.name} holds {spec.padded_vocab_size} rows "
                               f"(its padded_vocab_size)")
        out += [found] if found else []
    return out


def vocab_mismatch(record: dict, flag: str, rows: int, checkpoint_divisible_by: int | None,
                   holds: str) -> Violation | None:
    """The error `megatron_checkpoint_vocab` when the rows Megatron-LM pads the file's vocabulary
    to (`record`, from `checkpoint_record`) differ from the `rows` of the checkpoint it loads with
    `flag`; None when they agree or the use_checkpoint_args switch takes the checkpoint's padded size.

    Source: Megatron-LM d98e8a6: the padded size (`mg.padded_vocab_size`) sizes the word
    embedding and output layer; `megatron/core/dist_checkpointing/strategies/torch.py`
    `_validate_global_shapes` raises "Global shape mismatch" for a torch_dist checkpoint of other
    rows, `megatron/training/checkpointing.py` `check_checkpoint_args` asserts padded_vocab_size
    (legacy format) and make_vocab_size_divisible_by (when a vocab_file is given) equal the
    checkpoint's. The fix keeps tp: a divisible-by whose multiple of tp pads the vocabulary to
    `rows` (not offered with a vocab_file unless it is the checkpoint's own), or
    use_checkpoint_args (the checkpoint's padded size, `load_args_from_checkpoint`), which the
    vocab-parallel embedding takes when tp divides it."""
    vocab, divisible, tp = record["vocab_size"], record["divisible_by"], record["tp"]
    padded = record["padded_vocab_size"]
    if padded == rows or record["use_checkpoint_args"]:
        return None
    fixes = []
    choice = _divisible_by_for(vocab, tp, rows)
    if choice is not None and (not record["vocab_file"] or choice == checkpoint_divisible_by):
        fixes.append(f"{F['vocab_divisible_by']} {choice} (pads {vocab} to {rows} at tp {tp})")
    if rows % tp == 0:
        fixes.append(f"{F['use_checkpoint_args']} (takes the checkpoint's {rows} rows)")
    return Violation(
        rule="megatron_checkpoint_vocab",
        message=f"{flag} {record['loads'][flag]}: Megatron-LM pads the vocabulary {vocab} to a "
                f"multiple of {F['vocab_divisible_by']} {divisible} x tp {tp} = {divisible * tp}, "
                f"{padded} embedding rows, but {holds}: loading stops on the embedding's shape "
                f"(torch_dist: \"Global shape mismatch\"; legacy format: check_checkpoint_args)",
        fix=" or ".join(fixes) if fixes else
            f"a tp at which {F['vocab_divisible_by']} pads {vocab} to {rows} rows")


def _divisible_by_for(vocab: int, tp: int, rows: int) -> int | None:
    """The power of two d nearest Megatron's default 128 (the smaller of two as near), else the
    smallest d, for which Megatron pads `vocab` to `rows` at `tp` (`mg.padded_vocab_size`); None
    when none does."""
    if rows < vocab or rows % tp:
        return None
    powers = sorted((2**k for k in range(21)), key=lambda d: (abs(d.bit_length() - 8), d))
    found = [d for d in powers if mg.padded_vocab_size(vocab, d, tp) == rows]
    if found:
        return found[0]
    return next((d for d in range(1, rows // tp + 1) if rows % (d * tp) == 0
                 and mg.padded_vocab_size(vocab, d, tp) == rows), None)


def checkpoints_across(results: list[dict]) -> list[tuple[int, Violation]]:
    """`megatron_checkpoint_vocab` across the files of one `planner check` run: a Megatron file
    that loads (`_LOADS`) the path another checked file saves
    must pad the vocabulary to the rows that file writes (`vocab_mismatch`). Paths are compared
    as written (after the files' own variables). Returns (index of the loading result, error)."""
    saved = {r["checkpoint"]["save"]: r["checkpoint"] for r in results
             if (r.get("checkpoint") or {}).get("save")}
    out = []
    for i, r in enumerate(results):
        record = r.get("checkpoint")
        for flag, path in (record or {}).get("loads", {}).items():
            writer = saved.get(path)
            if writer is None or writer["file"] == record["file"]:
                continue
            found = vocab_mismatch(
                record, flag, writer["padded_vocab_size"], writer["divisible_by"],
                f"{writer['file']} saves {writer['padded_vocab_size']} rows there ("
                f"{F['save']} {path}: vocabulary {writer['vocab_size']} at "
                f"{F['vocab_divisible_by']} {writer['divisible_by']} x tp {writer['tp']})")
            if found:
                out.append((i, found))
    return out


# ---------------------------------------------------------------- tokens

def parse_args(text: str, file: str, bad: list[SpecError] | None = None,
               repeated: list[tuple[str, str, str]] | None = None) -> dict[str, str | bool]:
    """The Megatron / torchrun flags of a command line or script: {flag: value string, or True for a
    store_true flag}; other tokens are ignored, shell variables set in the text are expanded.

    Args:
        bad: where given, each bad value below is added to it (its flag left out) instead of raised, so that
            the reader reports it with the file's other bad values (`_bad_values`).
        repeated: where given, (flag, earlier value, later value) of each value flag given again, whose later
            value argparse keeps (`duplicate_flags`).

    Raises:
        SpecError: unbalanced quotes; without `bad`: a value flag without a value, a value given to a store_true
            flag, an unset variable in the value of a flag read.
    """
    def reject(exc: SpecError) -> None:
        if bad is None:
            raise exc
        bad.append(exc)

    out: dict[str, str | bool] = {}
    tokens, env = shell_words(text, file)
    i = 0
    while i < len(tokens):
        name, eq, value = tokens[i].partition("=")
        i += 1
        kind = mg.READ[name].kind if name in mg.READ else None
        if kind == mg.SWITCH:
            if eq:
                reject(SpecError(f"takes no value (got {value!r}); it is a switch", file=file, key=name))
                continue
            out[name] = True
        elif kind is not None:
            if not eq:
                if i >= len(tokens) or tokens[i].startswith("--"):
                    reject(SpecError("missing value", file=file, key=name))
                    continue
                value, i = tokens[i], i + 1
                while kind == mg.LIST and i < len(tokens) and not tokens[i].startswith("--"):
                    value, i = f"{value} {tokens[i]}", i + 1  # nargs "+": the words up to the next flag
            if "$" in value and name in mg.SCHEDULE_FLAGS:
                continue  # the job's environment sets it: Megatron checks it at start-up
            why = shell.unresolved(value, env)  # the file's own integer arithmetic is evaluated already
            if why is not None and name not in _LAUNCHER_SIZE:
                reject(SpecError(why, file=file, key=name))
                continue
            if repeated is not None and name in out:
                repeated.append((name, out[name], value))
            out[name] = value
    return out


def duplicate_flags(repeated: list[tuple[str, str, str]], text: str) -> list[Violation]:
    """The warning `duplicate_flag` for each value flag the launch gives more than once (`parse_args`): argparse
    keeps the last value without a word, which is mostly an editing slip (fresh-user review 12 #9); naming the
    lines that write it and the value that wins. Source: Python `argparse` (an optional argument's action
    "store" overwrites the namespace attribute on each occurrence)."""
    found, out = flag_occurrences(text), []
    for name, earlier, later in repeated:
        numbers = found.get(name, [])
        where = (f"lines {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}" if len(set(numbers)) > 1 else
                 f"line {numbers[0]}" if numbers else "the launch (through shell variables)")
        same = " (the same value twice)" if earlier == later else f", not {earlier}"
        out.append(Violation(rule="duplicate_flag", severity="warning", line=numbers[-1] if numbers else None,
                             message=f"{name} is given more than once ({where}): argparse keeps the last, "
                                     f"{later}{same}",
                             fix=f"give {name} once"))
    return out


def shell_words(text: str, file: str) -> tuple[list[str], dict[str, str]]:
    """(shell words with `$VAR` and integer arithmetic `$(( a * b ))` of the file's variables expanded from
    earlier `VAR=value` words (`shell.substitute`), a `bash -c STRING` read as STRING's words
    (`shell.unwrap`), quoted `"--flag value"` words split again; the variables set).

    A word holding a variable's value is split at whitespace, as bash splits an unquoted `$VAR`
    (default IFS: space, tab, newline; no quote removal), so a string variable of flags on one
    line or many (with or without backslash continuations) gives one word per flag and value; an
    assignment's value, and a word left with `$(` (a substitution this reader does not run), are
    not split.
    Source: bash(1) "Word Splitting"."""
    try:
        words = shell.join_expansions(shell.split(shell.let_assignments(shell.join_continued(arrays_apart(text)))))
    except ValueError as exc:
        raise SpecError(f"shell syntax error: {exc}", file=file) from None
    words = shell.unwrap(words, file)
    env: dict[str, str] = {}
    out: list[str] = []
    for raw in words:
        if raw.endswith(";") and len(raw) > 1:   # `TP=2; PP=8`: the separator ends a command
            raw = raw[:-1]
        word = shell.substitute(raw, env)
        assign = _ASSIGN.match(word)
        if assign and not word.startswith("-"):
            env[assign.group(1)] = assign.group(2)
            continue
        out += shell.fields(word, raw)
    return out, env


_TABLE = object()
"""`_int`'s default: Megatron's own (`planner.frameworks.megatron.DEFAULT`)."""


def _int(args: dict, knob: str, file: str, default=_TABLE) -> int | None:
    """The integer the file gives the flag of `knob`, else `default` (Megatron's by default)."""
    flag = F[knob]
    value = args.get(flag)
    if value is None:
        return mg.DEFAULT[knob] if default is _TABLE else default
    if not re.fullmatch(r"\d+", value) or int(value) < 1:
        raise SpecError(f"value {value!r} must be an integer >= 1", file=file, key=flag)
    return int(value)


def _choice(args: dict, knob: str, file: str) -> str | None:
    """The value the file gives the choice flag of `knob` (None when absent)."""
    flag = mg.BY_KNOB[knob]
    value = args.get(flag.flag)
    if value is not None and value not in flag.choices:
        raise SpecError(f"value {value!r} not allowed; allowed: {', '.join(flag.choices)}",
                        file=file, key=flag.flag)
    return value


def _bad_values(args: dict, file: str, unknown: list[Violation], bad: list[SpecError] = ()) -> None:
    """Every value Megatron-LM's argparse rejects (an integer flag's non-positive-integer, a choice flag's value
    outside its choices: `_int` / `_choice`), in one error that also names the file's unknown flags
    (`_unknown_flags`), so that one CI run reports them all (fresh-user review 8 #19: a recompute granularity
    `ful` hid a misspelled flag until the next run). A value from a shell variable is left to the reader.

    Raises:
        SpecError: each bad value on a line of its own, the unknown flags appended to the last
            (`gate.raise_bad_values`; exit 2)."""
    errors = list(bad)  # `parse_args`'s: a value left with a shell expansion, a switch with a value, ...
    for name, value in args.items():
        flag = mg.READ.get(name)
        if flag is None or "$" in str(value):
            continue
        check = {mg.INT: (F, _int), mg.CHOICE: ({k: f.flag for k, f in mg.BY_KNOB.items()}, _choice)}.get(flag.kind)
        if check is None or check[0].get(flag.knob) != name:
            continue
        try:
            check[1](args, flag.knob, file)
        except SpecError as exc:
            errors.append(exc)
    if errors:
        raise_bad_values(file, errors, "".join("; also " + v.message.split(" Megatron-LM's argparse")[0]
                                               for v in unknown))


def _on(args: dict, knob: str) -> bool:
    """Whether the file gives the switch of `knob`."""
    return bool(args.get(F[knob]))


# ---------------------------------------------------------------- model, world

def _missing_options(args: dict, model: str | None, cluster: str | None, gpus: int | None,
                     seq_len: int | None, path: Path, launched: tuple[int, str] | None = None,
                     line: str | None = None) -> None:
    """Every command-line option the file leaves required, in one error (`gate.raise_missing`):
    --cluster always, --model unless the file's flags or model line give the model (`_model`), --gpus unless
    torchrun's GPUs per node do, --seq-len unless the file's sequence length does."""
    file = str(path)
    missing: list[SpecError] = []
    if cluster is None:
        missing.append(SpecError("--cluster is required: Megatron-LM arguments do not name the "
                                 "cluster", file=file, key="--cluster"))
    if model is None:
        attempt(lambda: _model(args, None, path, line), missing)
    if gpus is None:
        attempt(lambda: _world(args, None, file, launched), missing)
    if seq_len is None and F["seq_len"] not in args:
        missing.append(SpecError(f"--seq-len is required: the file gives no {F['seq_len']}",
                                 file=file, key="--seq-len"))
    raise_missing(file, missing)


def _model(args: dict, model: str | None, path: Path, line: str | None = None) -> tuple[ModelSpec, list[Violation]]:
    """(--model, checked against the file's architecture flags; else the model of the file's model line
    `line` (`_model_line`) where its flags agree with it; else the model its flags build, `_flags_model`;
    the warning `megatron_model_line` where the flags and the model line disagree).

    Raises:
        SpecError: --model disagrees with the flags; without --model, neither the flags nor a model line
            give the model (key --model, naming what the flags lack), or the flags build no model and the
            model line's disagrees with them."""
    file = str(path)
    given = _architecture(args, file)
    if model is None and line is not None:
        return _lined_model(args, given, line, path)
    if model is None:
        return _flags_model(args, given, file, path.stem), []
    return _named_model(args, given, model, file), []


def _named_model(args: dict, given: dict, model: str, file: str) -> ModelSpec:
    """`model` (a catalog name or path), checked against the file's architecture flags (`given`)."""
    spec = load_model(model)
    for flag, (field, value) in given.items():
        if getattr(spec, field) != value:
            key, _, condition = flag.partition(" ")  # a flag, or a flag and the switch it lacks
            raise SpecError(f"{condition + ' ' if condition else ''}gives {field}={value} but --model {model} "
                            f"has {field}={getattr(spec, field)}", file=file, key=key)
    _moe_layers(args, spec, model, file)
    return spec


def _model_line(text: str) -> str | None:
    """The model reference of the file's model line (`planner.emit.MODEL_LINE`, written by `planner plan
    --emit megatron`), or None."""
    found = re.search(rf"^{re.escape(MODEL_LINE)}(\S+)[ \t]*$", text, re.MULTILINE)
    return found.group(1) if found else None


_FLAG_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "tie_word_embeddings", "norm_type", "gated_mlp",
                "position_embedding_type", "attention_bias", "mlp_bias", "qk_norm", "num_experts",
                "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "router_bias",
                "expert_bias", "n_group", "topk_group", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                "v_head_dim")
"""ModelSpec fields a Megatron-LM script's flags fix (`_flags_model`), compared with its model line's model;
the MoE layer pattern is compared too (`_moe_pattern_of`). Not compared: max_position_embeddings (an emitted
script writes at least the planned sequence length), the MTP layers (a training choice the layout reads)."""


def _field(spec: ModelSpec, field: str):
    """`spec`'s `field`, with one expert group (n_group / topk_group 1, which restricts no routing) as none, and
    no MLP bias where no layer has a dense MLP (every layer MoE, no shared experts: GPT-OSS)."""
    if field in ("n_group", "topk_group") and spec.n_group <= 1:
        return 0
    if field == "mlp_bias" and all(_moe_pattern_of(spec) or (False,)) and not spec.shared_expert_intermediate_size:
        return False
    return getattr(spec, field)


def _moe_pattern_of(spec: ModelSpec) -> tuple[bool, ...]:
    """The MoE layers of `spec` (all layers when its pattern is empty; none for a dense model)."""
    if not spec.is_moe:
        return ()
    return tuple(spec.moe_layers) or (True,) * spec.num_hidden_layers


def _lined_model(args: dict, given: dict, line: str, path: Path) -> tuple[ModelSpec, list[Violation]]:
    """The model of the file's model line, where the flags build no model or build the same one (on
    `_FLAG_FIELDS`); where they disagree, that model with the flags' values of the fields they fix (what the
    flags do not state -- sliding windows, attention sinks, rope scaling -- stays the model line's) and the
    warning `megatron_model_line`: the script is run by its flags, whatever its comment says."""
    file = str(path)
    try:
        built = _flags_model(args, given, file, path.stem)
    except SpecError:
        built = None
    try:
        named = load_model(line)
    except SpecError as exc:
        if built is None:
            raise SpecError(f"the model line names {line!r}, which is no model here: {exc.message}; pass --model",
                            file=file, key="--model") from None
        return built, [Violation(rule="megatron_model_line", severity="warning",
                                 message=f"the model line names {line!r}, which is no model here; checked as the "
                                         f"flags build the model", fix="pass --model")]
    if built is None:  # the flags alone do not give the model (a GPT-style or partial set): the line's, checked
        try:
            return _named_model(args, given, line, file), []
        except SpecError as exc:
            raise SpecError(f"{exc.message} (the model line's)", file=file, key=exc.key) from None
    fields = [field for field in _FLAG_FIELDS if _field(built, field) != _field(named, field)]
    differ = [f"{field} {_field(built, field)} (model line: {_field(named, field)})" for field in fields]
    if _moe_pattern_of(built) != _moe_pattern_of(named):
        differ.append(f"{sum(_moe_pattern_of(built))} MoE layers (model line: {sum(_moe_pattern_of(named))})")
        fields.append("moe_layers")
    if not differ:
        return named, []
    if "shared_expert_intermediate_size" in fields:
        fields.append("n_shared_experts")
    warning = Violation(rule="megatron_model_line", severity="warning",
                        message=f"the flags build another model than the model line's {line}: "
                                f"{'; '.join(differ)}; checked with the flags' values",
                        fix=f"correct the flags, or the model line ({MODEL_LINE}NAME), or pass --model")
    return dataclasses.replace(named, **{f: getattr(built, f) for f in fields}), [warning]


def _moe_layers(args: dict, spec: ModelSpec, model: str, file: str) -> None:
    """The MoE layer frequency flag (`F["moe_layers"]`) compared with the model's MoE layers (`ModelSpec.moe_layers`): an integer N
    puts experts in layers i with i % N == 0; a list expression gives one 0/1 per layer.

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py `moe_freq_type` (an int, or a
    Python list expression such as "([0]*3+[1]*58)") and megatron/core/models/gpt/gpt_layer_specs.py
    l. 643-661 (the pattern; a list must have num_layers entries).

    Raises:
        SpecError: an unreadable value, or a pattern other than the model's (the cost model would
            charge experts in layers the run makes dense, or the reverse).
    """
    flag = F["moe_layers"]
    value = args.get(flag)
    if value is None or not spec.is_moe:
        return
    pattern = _moe_pattern(value, spec.num_hidden_layers)
    if pattern is None:
        raise SpecError(f"value {value!r} must be an integer >= 1 or a list expression of 0/1 such as "
                        f"'([0]*3+[1]*58)'", file=file, key=flag)
    want = tuple(spec.moe_layers) or (True,) * spec.num_hidden_layers
    if pattern != want:
        def count(p):
            return f"{sum(p)} MoE layers of {len(p)}"
        differ = next((i for i, (a, b) in enumerate(zip(pattern, want)) if a != b), min(len(pattern), len(want)))
        raise SpecError(f"value {value!r} gives {count(pattern)} but --model {model} has {count(want)} "
                        f"(first difference at layer {differ}); write the model's pattern or pass its model "
                        f"file", file=file, key=flag)


def _moe_pattern(value: str, layers: int) -> tuple[bool, ...] | None:
    """The MoE layers the MoE layer frequency flag `value` builds over `layers` layers (see `_moe_layers`),
    or None when the value is neither an integer >= 1 nor a list expression of integers, `+`, `*`."""
    if re.fullmatch(r"\d+", value.strip()):
        freq = int(value)
        return tuple(i % freq == 0 for i in range(layers)) if freq >= 1 else None
    try:
        tree = ast.parse(value.strip(), mode="eval").body
    except SyntaxError:
        return None

    def evaluate(node: ast.AST):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            items = [evaluate(e) for e in node.elts]
            return items if all(type(e) is int for e in items) else None
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Mult):
            left, right = evaluate(node.left), evaluate(node.right)
            if left is None or right is None or (type(node.op) is ast.Add) != (type(left) is type(right)):
                return None
            if type(node.op) is ast.Mult and isinstance(left, list) == isinstance(right, list):
                return None
            if type(node.op) is ast.Mult and not 0 <= len(left if isinstance(left, list) else right) * (
                    right if isinstance(left, list) else left) <= 100_000:
                return None  # no pattern of more layers than any model is built
            return left + right if type(node.op) is ast.Add else left * right
        return None
    result = evaluate(tree)
    if not isinstance(result, list) or len(result) > 100_000 or any(v not in (0, 1) for v in result):
        return None
    return tuple(bool(v) for v in result)


def _rotary_base(args: dict, spec: ModelSpec, file: str) -> list[Violation]:
    """A warning when the rotary base differs from the model's rope_theta (no effect on memory or
    time; Megatron-LM's own llama3 example script uses 1000000 where Llama 3.1 has 500000)."""
    base, theta = _int(args, "rope_theta", file), spec.extra.get("rope_theta")
    if spec.position_embedding_type != "rope" or not isinstance(theta, (int, float)) or base == theta:
        return []
    flag = F["rope_theta"]
    given = f"{flag} {base}" if flag in args else f"no {flag} ({mg.DEFAULT['rope_theta']})"
    return [Violation(rule="megatron_rotary_base", severity="warning",
                      message=f"{given} but {spec.name} has rope_theta={theta:g}: the model trains "
                              f"with other rotary frequencies than its checkpoint",
                      fix=f"set {flag} {theta:.0f}" if theta == int(theta) else
                          f"set {flag} to the model's rope_theta")]


def _architecture(args: dict, file: str) -> dict[str, tuple[str, int]]:
    """{flag: (ModelSpec field, value Megatron builds)} for the architecture the file gives.

    Source: Megatron-LM `argument_utils.py` (num_query_groups only with group_query_attention,
    whose argparse default is 1; without it every head has its own KV head) and `validate_args`
    (ffn_hidden_size defaults to int(4h x 2/3 / 64) x 64 with swiglu, else 4h; kv_channels to
    hidden / heads)."""
    out = {F[field]: (field, _int(args, field, file)) for field in _ARCH if F[field] in args}
    heads = _int(args, "num_attention_heads", file)
    if heads is not None:
        gqa = _on(args, "group_query_attention")
        kv = _int(args, "num_key_value_heads", file) if gqa else heads
        flag = F["num_key_value_heads"] if gqa else \
            f"{F['num_attention_heads']} without {F['group_query_attention']}"
        out[flag] = ("num_key_value_heads", kv)
    hidden = _int(args, "hidden_size", file)
    if hidden is not None and F["intermediate_size"] not in args:
        out[F["intermediate_size"]] = ("intermediate_size", int(4 * hidden * 2 / 3 / 64) * 64
                                       if _on(args, "swiglu") else 4 * hidden)
    if hidden is not None and heads is not None and F["head_dim"] not in args:
        out[F["head_dim"]] = ("head_dim", hidden // heads)
    if _on(args, "multi_latent_attention"):
        # MLA sizes its heads from the qk, rope and v head dims; kv_channels is
        # not read (NVIDIA/Megatron-LM@d98e8a6 multi_latent_attention.py l. 165-168; NVIDIA's own
        # DeepSeek-V3 launch examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh l. 64 sets 128)
        out.pop(F["head_dim"], None)
    return out


def _llama_config(args: dict, given: dict, file: str) -> dict:
    """Hugging Face llama config keys from the file's architecture flags (`_architecture`).

    Source: Megatron-LM `transformer_config.py` (add_bias_linear is on unless the file disables
    bias; normalization LayerNorm unless RMSNorm is given).

    Raises:
        SpecError (key --model): a size flag absent, or a shape this reader does not build; the message
            names only flags the file lacks or values it gives (never a flag it has as missing)."""
    need = [F[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                           "max_position_embeddings", "vocab_size") if F[k] not in args]
    shape = [f"{want} (the file gives {got})" for want, got, ok in (
        (F["swiglu"], f"no {F['swiglu']}", _on(args, "swiglu")),
        (f"{F['normalization']} RMSNorm", _choice(args, "normalization", file) or mg.DEFAULT["normalization"],
         _choice(args, "normalization", file) == "RMSNorm"),
        (f"{F['position_embedding_type']} rope",
         _choice(args, "position_embedding_type", file) or mg.DEFAULT["position_embedding_type"],
         _choice(args, "position_embedding_type", file) == "rope")) if not ok]
    if need or shape:
        why = (f"the file does not give {', '.join(need)}" if need else
               f"this reader builds models from flags only with {', '.join(shape)}")
        raise SpecError(f"--model is required: {why}", file=file, key="--model")
    values = {field: value for field, value in given.values()}
    values.setdefault("head_dim", values["hidden_size"] // values["num_attention_heads"])  # MLA: `_flags_model`
    bias = not _on(args, "disable_bias_linear")
    return {
        "model_type": "llama", **{k: values[k] for k in (
            "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "vocab_size")},
        "max_position_embeddings": _int(args, "max_position_embeddings", file),
        "tie_word_embeddings": not _on(args, "untie_embeddings"),
        "attention_bias": bias, "mlp_bias": bias,
        "rope_theta": _int(args, "rope_theta", file),
        "source": f"Megatron-LM arguments in {file}",
    }


def _flags_model(args: dict, given: dict, file: str, name: str) -> ModelSpec:
    """The model the file's architecture flags build: the llama-style core (`_llama_config`) with
    Megatron-LM's q/k/v bias and q/k layernorm switches, multi-latent attention and experts.

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py `_add_mla_args` (q_lora_rank None =
    no query compression; kv_lora_rank 32, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128 by
    default), `_add_moe_args` and `validate_args` l. 1650-1652 (moe_ffn_hidden_size defaults to
    ffn_hidden_size); megatron/core/transformer/transformer_config.py (moe_router_topk 2 by default;
    moe_shared_expert_intermediate_size: the shared experts' total width; moe_router_enable_expert_bias: the
    per-expert bias buffer; add_qkv_bias: bias on the q/k/v projections only; qk_layernorm, which MLA applies
    to its latent projections rather than per-head q/k, multi_latent_attention.py); the MoE layer pattern as
    `_moe_pattern`; mtp_num_layers as the model's MTP layers.

    Raises:
        SpecError: see `_llama_config`; a top-k over the experts, an unreadable or all-dense MoE layer pattern."""
    spec = from_config(_llama_config(args, given, file), name=name, file=file)
    mla = _on(args, "multi_latent_attention")
    qkv_bias = _on(args, "add_qkv_bias")
    fields = dict(qk_norm=_on(args, "qk_norm") and not mla, attention_bias=spec.attention_bias or qkv_bias,
                  num_nextn_predict_layers=_int(args, "mtp_num_layers", file, 0))
    if mla:
        nope, rope = _int(args, "qk_nope_head_dim", file), _int(args, "qk_rope_head_dim", file)
        fields.update(q_lora_rank=_int(args, "q_lora_rank", file, 0), kv_lora_rank=_int(args, "kv_lora_rank", file),
                      qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=_int(args, "v_head_dim", file),
                      head_dim=nope + rope)
    experts = _int(args, "num_experts", file, 0)
    if experts:
        fields.update(_flags_experts(args, experts, spec, file))
    return dataclasses.replace(spec, **fields)


def _flags_experts(args: dict, experts: int, spec: ModelSpec, file: str) -> dict:
    """The expert fields of `_flags_model` (its sources); n_shared_experts = shared width / expert width
    where it divides, else one shared expert of the given width; a router bias with add_bias_linear or the
    expert-bias buffer, expert biases with add_bias_linear (NVIDIA/Megatron-LM@d98e8a6
    megatron/core/transformer/moe/router.py l. 67-72, 180-201)."""
    top_k = _int(args, "num_experts_per_tok", file)
    if top_k > experts:
        raise SpecError(f"value {top_k} must be at most {F['num_experts']} {experts}", file=file,
                        key=F["num_experts_per_tok"])
    width = _int(args, "moe_intermediate_size", file, spec.intermediate_size)
    shared = _int(args, "shared_expert_intermediate_size", file, 0)
    pattern = _moe_pattern(str(args.get(F["moe_layers"], mg.DEFAULT["moe_layers"])), spec.num_hidden_layers)
    if pattern is None or len(pattern) != spec.num_hidden_layers or not any(pattern):
        raise SpecError(f"value {args.get(F['moe_layers'])!r} must give {spec.num_hidden_layers} layers (one per "
                        f"{F['num_hidden_layers']}), at least one of them MoE: an integer >= 1 or a list expression "
                        f"of 0/1 such as '([0]*3+[1]*58)'", file=file, key=F["moe_layers"])
    bias = not _on(args, "disable_bias_linear")  # router and expert linears: bias with add_bias_linear
    return dict(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width,
                shared_expert_intermediate_size=shared,
                n_shared_experts=(shared // width if shared % width == 0 else 1) if shared else 0,
                router_bias=bias or _on(args, "moe_router_enable_expert_bias"), expert_bias=bias, moe_layers=pattern,
                n_group=_int(args, "moe_router_num_groups", file, 0),
                topk_group=_int(args, "moe_router_group_topk", file, 0))


_LAUNCHER_SIZE = frozenset(F[k] for k in ("nnodes", "nproc_per_node", "nproc_per_node_dashed"))
"""torchrun's size flags, which a Slurm launcher fills from the job's environment (`$SLURM_JOB_NUM_NODES`,
`$1`, `$(scontrol show hostnames | wc -l)`): a variable the file does not set, or a command substitution this
reader does not run, there leaves the world size to --gpus (`_world`, the warning `world_size_from_gpus`)
instead of being bad input (fresh-user reviews 7 and 11)."""


def _world(args: dict, gpus: int | None, file: str, launched: tuple[int, str] | None = None) -> int:
    """torchrun's GPUs per node x nodes (nodes default to 1), else the ranks another launcher starts (`launched`:
    srun's tasks, `slurm_world`; DeepSpeed's or Accelerate's, `launcher_world`), else --gpus; --gpus also where a
    torchrun size flag takes a variable the file does not set."""
    unset = [flag for flag in sorted(_LAUNCHER_SIZE) if "$" in str(args.get(flag, ""))]
    if unset:
        if gpus is None:
            raise SpecError(f"--gpus is required: the file's torchrun world size comes from {_unrun(args, unset)}",
                            file=file, key="--gpus")
        return gpus
    per_node = _per_node(args)
    if not per_node and launched is not None:
        if gpus is not None and gpus != launched[0]:
            raise SpecError(f"--gpus {gpus} contradicts the file's {launched[1]} = {launched[0]}", file=file,
                            key="--gpus")
        return launched[0]
    if not per_node:
        if gpus is None:
            raise SpecError(f"--gpus is required: the file has no torchrun {F['nproc_per_node']} / "
                            f"{F['nnodes']}, nor an srun launch with literal {mg.SRUN_TASKS[0]} or "
                            f"{mg.SRUN_NODES[0]} x {mg.SRUN_TASKS_PER_NODE[0]} (#SBATCH lines give their defaults), "
                            f"nor a literal {mg.DEEPSPEED_LAUNCHER} {mg.DEEPSPEED_GPUS[0]} or "
                            f"{' '.join(mg.ACCELERATE_LAUNCHER)} {mg.ACCELERATE_PROCESSES[0]}",
                            file=file, key="--gpus")
        return gpus
    world = _int(args, per_node[-1], file) * _int(args, "nnodes", file)
    if gpus is not None and gpus != world:
        raise SpecError(f"--gpus {gpus} contradicts the file's torchrun world size "
                        f"{F['nproc_per_node']} x {F['nnodes']} = {world}", file=file, key="--gpus")
    return world


def _unrun(args: dict, flags: list[str]) -> str:
    """What the shell would give torchrun's size `flags` that this reader does not (`_LAUNCHER_SIZE`)."""
    return "the shell: " + "; ".join(
        f"{f} {args[f]}, " + ("a command substitution $(...), which this reader does not run" if "$(" in str(args[f])
                              else "a shell variable the file does not set") for f in flags)


def world_from_gpus(args: dict, gpus: int | None) -> list[Violation]:
    """The warning `world_size_from_gpus` where torchrun's size flags come from the shell (`_LAUNCHER_SIZE`) and
    --gpus gives the world size in their place (`_world`), so the output says which number it checked."""
    unset = [flag for flag in sorted(_LAUNCHER_SIZE) if "$" in str(args.get(flag, ""))]
    if not unset or gpus is None:
        return []
    return [Violation(rule="world_size_from_gpus", severity="warning",
                      message=f"torchrun's world size comes from {_unrun(args, unset)}: checked at --gpus {gpus}",
                      fix="write the number in the file to have it checked against --gpus")]


def _per_node(args: dict) -> list[str]:
    """The knobs of torchrun's GPUs-per-node spellings the file gives (the last one counts)."""
    return [k for k in ("nproc_per_node", "nproc_per_node_dashed") if F[k] in args]


def _cluster(cluster: str, world: int, args: dict, file: str):
    """The cluster at the world size; a world size from the file's torchrun flags that the cluster
    refuses is the file's fault, so the error names the file and those flags (load_cluster's text
    kept: it says --gpus, an option the user may never have passed)."""
    try:
        return load_cluster(cluster, gpus=world)
    except SpecError as exc:
        per_node = [F[k] for k in _per_node(args)]
        if exc.key != "--gpus" or not per_node:
            raise
        nodes = F["nnodes"]
        flags = f"{per_node[-1]} {args[per_node[-1]]}" + (
            f" x {nodes} {args[nodes]}" if nodes in args else "")
        raise SpecError(f"torchrun {flags} gives world size {world}, which the cluster refuses "
                        f"({exc})", file=file, key=per_node[-1]) from None


# ---------------------------------------------------------------- layout

def _layout(args: dict, spec: ModelSpec, world: int, seq_len: int | None, file: str,
            findings: list[Violation]) -> Layout:
    tp, pp, cp = (_int(args, k, file) for k in ("tp", "pp", "cp"))
    if world % (tp * pp * cp):
        findings.append(Violation(
            rule="world_size",
            message=f"world size {world} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} = "
                    f"{tp * pp * cp}: Megatron-LM asserts it (arguments.py validate_args)",
            fix=f"use a GPU count that is a multiple of {tp * pp * cp}, or change tp/pp/cp"))
    dp = max(1, world // (tp * pp * cp))
    mbs = _int(args, "micro_batch_size", file)
    if mbs is None:
        raise SpecError(f"missing: Megatron-LM asserts {F['micro_batch_size']} is set "
                        f"(validate_args)", file=file, key=F["micro_batch_size"])
    vpp = _vpp(args, spec, pp, file, findings)
    stages = _virtual_stages(args, spec, pp, vpp, file, findings)
    if stages is not None:
        vpp, split = len(stages) // pp, pipeline_layout.rank_counts(stages, pp)
    else:
        split = _split(args, spec, pp, vpp, file, findings)
    return Layout(
        dp=dp, tp=tp, pp=pp, cp=cp, ep=_int(args, "ep", file),
        etp=_int(args, "etp", file, tp if spec.is_moe else 1),
        zero_stage=_zero(args, file), sequence_parallel=_on(args, "sequence_parallel"),
        vpp=vpp, pipeline_layers=split, pipeline_layout=stages,
        microbatch_group_size=_int(args, "microbatch_group_size", file, None),
        micro_batch_size=mbs, global_batch_size=_int(args, "global_batch_size", file, mbs * dp),
        seq_len=_seq_len(args, seq_len, file, findings), recompute=_uniform_recompute(args, file),
        recompute_modules=_words(args, "recompute_modules", file),
        offload_modules=_words(args, "offload_modules", file) if _on(args, "fine_grained_activation_offloading")
        else None,
        optimizer=_OPTIMIZERS[_choice(args, "optimizer", file) or mg.DEFAULT["optimizer"]],
        precision=(precision := _precision(args, file)), framework="megatron",
        grad_reduce_dtype=_grad_reduce(args, precision),
        fp8_recipe=_choice(args, "fp8_recipe", file),
        fp8_param_gather=_fp8_param_gather(args, findings),
        precision_aware_optimizer=True if _on(args, "precision_aware_optimizer") else None,
        cross_entropy_fusion=((_choice(args, "cross_entropy_fusion_impl", file)
                               or mg.DEFAULT["cross_entropy_fusion_impl"])
                              if _on(args, "cross_entropy_loss_fusion") else None),
        **{name: _choice(args, name, file) for name in OPTIMIZER_DTYPES},
        cp_comm_type=_cp_comm_type(args, cp, findings),
        moe_dispatcher=_moe_dispatcher(args, file, findings),
        vocab_divisible_by=_int(args, "vocab_divisible_by", file, None),
        mtp_layers=_int(args, "mtp_num_layers", file, 0),  # absent: none (Megatron-LM's default)
        **{knob: True if _on(args, knob) else None for knob in mg.OVERLAP_SWITCHES})  # None: default


def _schedule(args: dict) -> list[Violation]:
    """The learning-rate schedule's start-up assertion: warm-up shorter than the decay, the error
    `lr_warmup_not_below_decay` otherwise (a value that is not a plain number, e.g. a shell expression the
    reader cannot evaluate, is left to Megatron).

    Source: Megatron-LM d98e8a6 `megatron/training/training.py` get_optimizer_param_scheduler l. 2559-2569
    (lr_decay_iters defaults to train_iters; warm-up = lr_warmup_fraction x decay when given, else
    lr_warmup_iters) and `megatron/core/optimizer_param_scheduler.py` l. 160
    (assert lr_warmup_steps < lr_decay_steps): a script whose warm-up is at least its training length dies at
    start-up (senior review 8: the emitted Llama script's 8,000 warm-up steps with 1,000 training steps)."""
    def number(knob):
        value = args.get(F[knob])
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None
    decay = number("lr_decay_iters") or number("train_iters")
    fraction, warmup = number("lr_warmup_fraction"), number("lr_warmup_iters") or 0.0
    if decay is None or fraction is not None:
        return []
    if warmup < decay:
        return []
    named = F["lr_decay_iters"] if number("lr_decay_iters") else F["train_iters"]
    return [Violation(rule="lr_warmup_not_below_decay",
                      message=f"{F['lr_warmup_iters']} {warmup:g} is not below {named} {decay:g}: Megatron-LM "
                              f"asserts the warm-up is shorter than the decay (optimizer_param_scheduler.py)",
                      fix=f"{named} above {warmup:g}, or a shorter {F['lr_warmup_iters']}")]


def _fp8_param_gather(args: dict, findings: list[Violation]) -> bool | None:
    """`Layout.fp8_param_gather`: the switch, except under torch FSDP2, where Megatron-LM turns it
    off at start-up with TE >= 2.0 (a warning here; arguments.py l. 1051-1056 @d98e8a6)."""
    if not _on(args, "fp8_param_gather"):
        return None
    if _on(args, "torch_fsdp2"):
        findings.append(Violation(rule="fp8_param_gather_off", severity="warning",
                                  message=f"{F['fp8_param_gather']} with {F['torch_fsdp2']}: Megatron-LM turns "
                                          f"the fp8 parameter gather off (TE >= 2.0) and gathers bf16; costed so",
                                  fix=f"drop {F['fp8_param_gather']}, or use {F['megatron_fsdp']}"))
        return None
    return True


def _moe_dispatcher(args: dict, file: str, findings: list[Violation]) -> str | None:
    """The token dispatcher costed (`Layout.moe_dispatcher`): alltoall; flex with the deepep or
    hybridep backend (or the deprecated DeepEP switch); None for Megatron's default
    allgather, costed as alltoall; flex with the ncclep backend is costed as alltoall, with a
    warning (NCCL EP's traffic is not modelled).

    Raises:
        SpecError: a dispatcher type or backend outside Megatron's choices."""
    kind = _choice(args, "moe_token_dispatcher", file) or mg.DEFAULT["moe_token_dispatcher"]
    backend = _choice(args, "moe_flex_backend", file) or mg.DEFAULT["moe_flex_backend"]
    if kind == "flex" and backend == "ncclep" and not _on(args, "moe_enable_deepep"):
        findings.append(Violation(
            rule="moe_dispatcher_not_costed", severity="warning",
            message=f"{F['moe_flex_backend']} ncclep: NCCL EP's traffic is not modelled; costed as "
                    f"{F['moe_token_dispatcher']} alltoall",
            fix=f"{F['moe_flex_backend']} deepep or hybridep"))
        return "alltoall"
    return None if kind == "allgather" else kind


def _cp_comm_type(args: dict, cp: int, findings: list[Violation]) -> str:
    """The context-parallel communication costed: the file's cp_comm_type flag when it is one costed
    type (`CP_COMM_TYPES`) for every layer, else ring attention (p2p) with a warning naming what
    is not costed (all_gather, a2a+p2p, a per-layer mix)."""
    given = str(args.get(F["cp_comm_type"]) or mg.DEFAULT["cp_comm_type"]).split()
    if len(set(given)) == 1 and given[0] in CP_COMM_TYPES:
        return given[0]
    if cp > 1:
        findings.append(Violation(
            rule="cp_comm_type_not_costed", severity="warning",
            message=f"{F['cp_comm_type']} {' '.join(given)}: only {' and '.join(CP_COMM_TYPES)} "
                    f"for every layer are costed; costed as p2p (ring attention)",
            fix=f"{F['cp_comm_type']} p2p or a2a"))
    return mg.DEFAULT["cp_comm_type"]


def _seq_len(args: dict, seq_len: int | None, file: str, findings: list[Violation]) -> int:
    seq = _int(args, "seq_len", file)
    if seq is None and seq_len is None:
        raise SpecError(f"--seq-len is required: the file gives no {F['seq_len']}", file=file,
                        key="--seq-len")
    if seq is not None and seq_len is not None and seq != seq_len:
        raise SpecError(f"--seq-len {seq_len} contradicts the file's {F['seq_len']} {seq}",
                        file=file, key="--seq-len")
    seq = seq or seq_len
    positions = _int(args, "max_position_embeddings", file)
    if positions is not None and seq > positions:
        findings.append(Violation(
            rule="seq_length_exceeds_positions",
            message=f"{F['seq_len']} {seq} exceeds {F['max_position_embeddings']} {positions}: "
                    f"Megatron-LM asserts max_position_embeddings >= seq_length (arguments.py "
                    f"validate_args)",
            fix=f"set {F['max_position_embeddings']} {seq} or {F['seq_len']} {positions}"))
    return seq


def _precision(args: dict, file: str) -> str:
    if _on(args, "bf16") and _on(args, "fp16"):
        raise SpecError(f"both {F['bf16']} and {F['fp16']} given; Megatron-LM trains in one of "
                        f"them", file=file, key=F["fp16"])
    if _choice(args, "fp8_format", file):
        return "fp8"
    if _on(args, "bf16") or _on(args, "fp16"):
        return "bf16" if _on(args, "bf16") else "fp16"
    raise SpecError(f"missing {F['bf16']}, {F['fp16']} or {F['fp8_format']}: without them "
                    f"Megatron-LM trains in fp32, which this planner does not cost", file=file,
                    key=F["bf16"])


def _grad_reduce(args: dict, precision: str) -> str | None:
    """The gradient-reduction dtype the flags set, None for Megatron's default: under bf16 (and
    fp8 on bf16) the grad_reduce_in_bf16 switch turns the fp32 reduction off (and an explicit
    accumulate_allreduce_grads_in_fp32 is kept: the precision-aware optimizer rule reads it); under fp16
    accumulate_allreduce_grads_in_fp32 turns it on (`validate_args` l. 1204-1216 @d98e8a6; each
    flag has no effect under the other precision)."""
    if precision != "fp16" and _on(args, "grad_reduce_in_bf16"):
        return "bf16"
    if precision != "fp16" and _on(args, "grads_in_fp32"):
        return "fp32"  # Megatron's default, given: it asserts --main-grads-dtype fp32 (l. 1209-1211)
    if precision == "fp16" and _on(args, "grads_in_fp32"):
        return "fp32"
    return None


def _zero(args: dict, file: str) -> int:
    """The distributed optimizer: 1; Megatron-FSDP: its sharding strategy; torch FSDP2: 3."""
    strategy = _choice(args, "sharding_strategy", file) or mg.DEFAULT["sharding_strategy"]
    if _on(args, "torch_fsdp2"):
        return 3
    if _on(args, "megatron_fsdp"):
        return mg.ZERO_BY_STRATEGY[strategy]
    return 1 if _on(args, "distributed_optimizer") else 0


def _vpp(args: dict, spec: ModelSpec, pp: int, file: str, findings: list[Violation]) -> int:
    """Virtual stages per rank. Source: `validate_args` (at most one of the two flags; layers per
    virtual stage needs num_layers % pp == 0 and divides the layers per stage; not with an uneven
    split; with interleaving pp > 2 unless p2p communication overlaps, the default)."""
    per_rank = _int(args, "vpp", file)
    per_stage = _int(args, "layers_per_virtual_stage", file)
    # the account-for options make the embedding / loss a layer slot of the split
    n = spec.num_hidden_layers + _on(args, "account_for_embedding") + _on(args, "account_for_loss")
    rank_flag, stage_flag = F["vpp"], F["layers_per_virtual_stage"]
    equal = [v for v in range(2, n // pp + 1) if n % (pp * v) == 0]
    fix = (f"give {rank_flag} {equal[0]} ({n // (pp * equal[0])} layers per virtual stage) instead of "
           f"{stage_flag}" if equal else f"drop {stage_flag}: {n} layers over pp={pp} have no equal "
           f"interleaved split")
    if per_stage is not None and per_rank is not None:
        findings.append(Violation(rule="virtual_pipeline_args", fix=f"give only {rank_flag} {per_rank}", message=(
            f"{stage_flag} {per_stage} and {rank_flag} {per_rank} both given: Megatron-LM allows "
            f"one")))
    elif per_stage is not None:
        uneven = [F[k] for k in ("first_stage_layers", "last_stage_layers") if F[k] in args]
        if uneven:
            findings.append(Violation(rule="virtual_pipeline_args", fix=fix, message=(
                f"{stage_flag} with {uneven[0]}: Megatron-LM asserts {rank_flag} for uneven "
                f"pipeline parallelism")))
        elif n % pp or (n // pp) % per_stage:
            chunks = n // pp // per_stage
            built = pp * chunks * per_stage
            findings.append(Violation(rule="virtual_pipeline_args", fix=fix, message=(
                f"num_layers={n} over pp={pp} is {n / pp:g} layers per stage, not a multiple of "
                f"{stage_flag} {per_stage}: {pp} stages x {chunks} virtual stages x {per_stage} "
                f"layers build {built} layers, not {n}")))
        else:
            per_rank = n // pp // per_stage
    vpp = per_rank or 1
    if vpp > 1 and pp == 2 and _on(args, "no_p2p_overlap"):
        findings.append(Violation(
            rule="interleaved_pp_needs_overlap",
            message=f"vpp={vpp} with pp=2 and {F['no_p2p_overlap']}: Megatron-LM asserts "
                    f"pp > 2 for the interleaved schedule without p2p overlap (validate_args)",
            fix=f"drop {F['no_p2p_overlap']}, or use pp >= 3"))
    return vpp


def _virtual_stages(args: dict, spec: ModelSpec, pp: int, vpp: int, file: str,
                    findings: list[Violation]) -> tuple[str, ...] | None:
    """The virtual-stage layout the file asks for: the layout string (its stage
    count sets vpp) or the account-for-embedding / loss split of (layers + e + l) slots over
    pp x vpp; None with neither. Megatron refuses the layout string together with the vpp flags,
    the first/last-stage flags or the account-for flags, and an account-for split whose slots do
    not divide (`arguments.py`, `transformer_config.py` @d98e8a6): those are findings here."""
    text = args.get(F["pipeline_layout"])
    embedding, loss = _on(args, "account_for_embedding"), _on(args, "account_for_loss")
    if text is not None:
        others = [F[k] for k in ("vpp", "layers_per_virtual_stage", "first_stage_layers",
                                 "last_stage_layers", "account_for_embedding", "account_for_loss")
                  if F[k] in args]
        if others:
            findings.append(Violation(rule="pipeline_layout_args", message=(
                f"{F['pipeline_layout']} with {', '.join(others)}: Megatron-LM takes the layout "
                f"alone (it sets vpp and places the embedding and loss)"),
                fix=f"drop {', '.join(others)}"))
        try:
            return pipeline_layout.parse(text, pp)
        except SpecError as exc:
            raise SpecError(exc.message, file=file, key=F["pipeline_layout"]) from None
    if not (embedding or loss) or vpp == 1 and not spec.num_hidden_layers % pp:
        return None
    try:
        return pipeline_layout.account_for_split(spec.num_hidden_layers, pp, vpp,
                                                 embedding=embedding, loss=loss)
    except SpecError as exc:
        findings.append(Violation(rule="pipeline_layout", message=exc.message,
                                  fix="choose pp, vpp and the account-for flags so the slots divide"))
        return None


def _split(args: dict, spec: ModelSpec, pp: int, vpp: int, file: str,
           findings: list[Violation]) -> tuple[int, ...] | None:
    """The uneven split: first / last stage as given, the rest evenly over the middle stages.

    Source: Megatron-LM `megatron/core/transformer/transformer_block.py` `get_num_layers_to_build`
    and `transformer_config.py` `__post_init__` (the middle layers must divide over the middle
    stages; no middle stage leaves no middle layer)."""
    first = _int(args, "first_stage_layers", file)
    last = _int(args, "last_stage_layers", file)
    if first is None and last is None:
        return None
    ends = [n for n in (first, last) if n is not None]
    middle_stages = pp - len(ends)
    rest = spec.num_hidden_layers - sum(ends)
    if middle_stages < 0 or rest < 0 or bool(rest) != bool(middle_stages) or (
            middle_stages and rest % middle_stages):
        findings.append(Violation(
            rule="uneven_pipeline",
            message=f"num_layers={spec.num_hidden_layers} minus first/last stage layers "
                    f"{' + '.join(map(str, ends))} leaves {rest} layers for {max(middle_stages, 0)} "
                    f"middle stages (pp={pp}): Megatron-LM needs them to divide evenly "
                    f"(transformer_config.py)",
            fix="choose first/last stage layer counts that leave a multiple of pp - "
                f"{len(ends)} layers"))
        return None
    each = rest // middle_stages if middle_stages else 0
    return tuple([first] if first is not None else []) + (each,) * middle_stages + tuple(
        [last] if last is not None else [])


# ---------------------------------------------------------------- recompute

def _uniform_recompute(args: dict, file: str) -> str:
    granularity = _choice(args, "recompute_granularity", file)
    if granularity is None and _on(args, "recompute_activations"):
        granularity = "selective"
    return granularity or "none"


def _words(args: dict, knob: str, file: str) -> tuple[str, ...] | None:
    """The words of a LIST flag (None: absent). --recompute-modules (absent: Megatron's default
    core_attn) is read only under selective granularity (transformer_layer.py l. 473, moe_layer.py
    l. 247-254) and --offload-modules only with fine-grained activation offloading on
    (transformer_layer.py l. 1546); the Layout carries the first either way, and only selective
    layers use it."""
    flag = F[knob]
    if flag not in args:
        return None
    words = str(args[flag]).split()
    for word in words:
        if word not in mg.BY_KNOB[knob].choices:
            raise SpecError(f"value {word!r} not allowed; allowed: "
                            f"{', '.join(mg.BY_KNOB[knob].choices)}", file=file, key=flag)
    return tuple(dict.fromkeys(words))


def _block_recompute(args: dict, spec: ModelSpec, layout: Layout, file: str,
                     findings: list[Violation]) -> tuple[str, ...] | None:
    """Each decoder layer's mode under the block recompute method (the first recompute_num_layers
    layers of each model chunk full, `mg.recomputed_modes` over `evaluation.model_chunks`); None
    for a uniform mode.

    Source: Megatron-LM `transformer_config.py` `__post_init__` (full needs a method and
    recompute_num_layers; selective takes neither), `validate_args` (selective takes no method)
    and `megatron/core/recompute.py` (uniform checkpoints every layer in chunks of
    recompute_num_layers; block checkpoints the first recompute_num_layers layers of each model
    chunk, one chunk per virtual stage, and none of the rest)."""
    granularity = layout.recompute
    method = _choice(args, "recompute_method", file)
    count = _int(args, "recompute_num_layers", file)
    method_flag, count_flag = F["recompute_method"], F["recompute_num_layers"]
    if granularity == "selective" and (method or count):
        findings.append(Violation(
            rule="recompute_args",
            message=f"{mg.recompute_flags('selective')[0]} with "
                    f"{f'{method_flag} {method}' if method else f'{count_flag} {count}'}"
                    f": Megatron-LM rejects a method or layer count for selective recompute",
            fix=f"drop {method_flag} and {count_flag}"))
    if granularity != "full":
        return None
    if method is None or count is None:
        missing = method_flag if method is None else count_flag
        every_layer = mg.recompute_flags("full", "uniform", 1)
        findings.append(Violation(
            rule="recompute_args",
            message=f"{F['recompute_granularity']} full without {missing}: Megatron-LM raises "
                    f"(transformer_config.py)",
            fix=f"add {' '.join(every_layer[1:])} (every layer)"))
        return None
    if method == "uniform":
        return None
    if layout.pipeline_layout is None and layout.pipeline_layers is None and _even(
            spec.num_hidden_layers, layout.pp) is None:
        return None
    try:
        chunks = model_chunks(spec, layout)
    except SpecError:  # a split the rules reject: they say why
        return None
    return mg.recomputed_modes("full", "block", count, chunks, spec.num_hidden_layers)


def _even(layers: int, pp: int) -> tuple[int, ...] | None:
    return (layers // pp,) * pp if layers % pp == 0 else None
