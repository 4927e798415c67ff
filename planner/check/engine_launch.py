"""Serving engine launch commands (vLLM, SGLang) for `planner check`: the command lines a file
holds, split into flags, and the rules every launch must meet, with numbers and fixes in the
engine's own flags.

A file is an engine launch when one of its command lines starts an engine (`vllm serve`,
`python -m vllm.entrypoints.openai.api_server`, `python -m sglang.launch_server`, `sglang serve`, or a
`docker run` of an engine image whose entrypoint is one: `CONTAINER_RUN`, each reader's IMAGES;
a `.sh` / `.txt` / any text file; `#` comments, backslash continuations and redirections as in a shell), or
when it is a vLLM `--config` YAML (`planner.check.vllm.is_config`). Every launch of a file is
checked; together they must fit the GPUs given (`check --gpus`, else the cluster's count). An
environment prefix `CUDA_VISIBLE_DEVICES=0,1` gives the GPUs one launch sees. The script's variables, integer
arithmetic and `bash -c "..."` strings are read as `planner.check.shell` reads them; every bad value of a
launch's number, fraction and choice flags is reported in one run (`values_collected`).

The engine readers (`planner.check.vllm`, `planner.check.sglang`) turn a command's flags into a
`Launch` (the engine's parallel layout as a `cost.serving.Instance`, its budget knob, lengths and
formats); `evaluate` applies the rules: heads and KV heads by attention TP (KV heads replicate when
TP is a multiple of them, as both engines do), layers by PP, experts by EP, the world size against
the GPUs, the memory of `cost.serving.serving_memory` under the engine's budget rule, one sequence
of max_model_len in the KV pool, the weight format on the GPU; the readers add their own
(unknown flags, SGLang's DP attention and all-to-all backend).
"""

from __future__ import annotations

import csv

import difflib
import math
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

from planner.check import shell
from planner.check.gate import raise_bad_values

from planner.cost import serving as sv
from planner.errors import PlannerError, SpecError, counted
from planner.frameworks import deepep
from planner.placement.rules import Violation
from planner.specs.cluster import ClusterSpec
from planner.specs.limits import MAX_FLAG_INT
from planner.specs.model import ModelSpec, context_length_words, engine_context_length, require_modelled_checkpoint

GIB = sv.GIB
VISIBLE = "CUDA_VISIBLE_DEVICES"
"""The environment variable that selects the GPUs a process sees (CUDA runtime)."""


@dataclass(frozen=True)
class Command:
    """One engine command line of a file."""

    line: int
    """1-based line where it starts."""
    env: dict[str, str]
    """Environment prefix (NAME=value words before the program)."""
    positional: list[str]
    """Words after the launcher that are no flag's value (vllm serve MODEL)."""
    flags: dict[str, str | bool]
    """--flag (canonical spelling) -> its value (True for a switch); the last given wins."""
    spelled: dict[str, str] = field(default_factory=dict)
    """Canonical flag -> how the command spelled it."""
    launcher: tuple[str, ...] = ()
    """The launcher that starts the engine (`("vllm", "serve")`, `("vllm.entrypoints.openai.api_server",)`): the
    one the command names, or the entrypoint of the container image it runs (`IMAGE_ENTRYPOINTS`)."""
    image: str | None = None
    """The container image the command runs (`docker run ... IMAGE ARGS`), or None."""
    after_switch: dict[str, str] = field(default_factory=dict)
    """A positional word -> the switch (a flag that takes no value) it follows (`--enforce-eager true`)."""
    doubled: tuple[str, ...] | None = None
    """A launcher written again after a container image whose ENTRYPOINT is one (`vllm/vllm-openai vllm serve`)."""
    origin: dict[str, str] = field(default_factory=dict)
    """Canonical flag -> the file that gave it, where not the command's own file (a vLLM `--config` YAML; its
    key as written is in `spelled`)."""
    container_options: tuple[str, ...] = ()
    """A container command's words before its image (`docker run` and its options: `-p 8001:8000`), or ()."""
    gpu_request: str | None = None
    """The value of the container runtime's GPU option (`docker run --gpus VALUE`, `CONTAINER_GPUS`) before the
    image, as the runtime receives it after shell quoting (`"device=0,1"` with its inner quotes), or None."""
    container_visible: str | None = None
    """The value of `CONTAINER_VISIBLE` the container command sets (`-e NVIDIA_VISIBLE_DEVICES=0,1`, `--env`)
    before the image, or None (not set, or passed from the host's environment by name alone)."""
    node: "Ranks | None" = None
    """The node ranks the command runs on where the file says (a branch testing NODE_RANK, `split_commands`), else
    None (every node the file runs on)."""


@dataclass(frozen=True, kw_only=True)
class Launch:
    """What one engine command runs, in the planner's terms."""

    engine: str
    line: int
    inst: sv.Instance
    replicas: int
    """Independent copies of `inst` the command starts (vLLM DP of a dense model, SGLang dp_size)."""
    fraction: float
    max_model_len: int
    max_num_seqs: int | None
    """The concurrency the command asks for (None: the engine's default, not checked)."""
    max_num_batched_tokens: int
    weight_format: str
    kv_dtype: str
    visible_gpus: int | None
    """GPUs the command's process sees (`visible_gpus`), None: every GPU of the node."""
    nnodes: int
    """Nodes the instance spans (the engine's node-count flag); the command runs on one of them."""
    node_rank: int = 0
    rendezvous: str | None = None
    """Node rank 0's address as the command names it (SGLang's dist-init address, vLLM's master address), which
    the commands of one instance over several nodes share; None when not given."""
    role: str | None = None
    """prefill / decode for a disaggregated worker, else None."""
    flag: dict[str, str]
    """The engine's flag table (planner knob -> flag), for messages and fixes."""
    degrees: dict[str, int]
    """The degrees as the command gives them (flag -> value), for the world-size message."""
    findings: tuple[Violation, ...] = ()
    kv_pool_bytes: int | None = None
    """KV pool per GPU a flag sets outright, whatever the budget fraction (vLLM kv_cache_memory_bytes)."""
    kv_tokens_cap: int | None = None
    """Tokens a flag caps each pool at (SGLang max_total_tokens; the smaller of it and what fits)."""
    fraction_given: bool = False
    """Whether the command sets the budget fraction (else `fraction` is the engine's default for it)."""
    fraction_why: str = ""
    """Why the engine's default fraction is what it is, where a message needs it (SGLang's negative default)."""
    visible_from: str = VISIBLE
    """What limits the GPUs seen, for messages (`visible_from`)."""
    copies: int = 1
    """Nodes this command runs on (`Command.node`, as `planner.check.engine_file` counts them): a server in a
    branch of several node ranks (`case "$NODE_RANK" in 0|1)`) starts on each; a per-node command of an instance
    over several nodes (`--node-rank $NODE_RANK`) is every node's of those it runs on."""
    node: Ranks | None = None
    """The node ranks the command runs on (`Command.node`), None where the file does not branch on them."""
    fit_max_model_len: bool = False
    """max_model_len asked as auto / -1 (vLLM): the model's length if one sequence of it fits, else the longest
    the KV pool holds (`max_model_len` holds the model's length until `fitted`)."""

    on_node: int | None = None
    """GPUs this command's node runs where the engine places the ranks itself rather than evenly over a node-count
    flag (vLLM's Ray executor, its data-parallel ranks per node); None: world / nnodes."""
    spans_itself: bool = False
    """The command starts the ranks on every node itself (vLLM's Ray executor run on a Ray cluster's head node),
    so the file's GPUs count all of them, not its own node's."""
    nodes_fix: str = ""
    """The fix where the ranks on one node exceed its GPUs, in the engine's own terms (empty: the node-count flag)."""

    @property
    def world(self) -> int:
        """Ranks of the whole launch, over all its nodes."""
        return self.inst.gpus * self.replicas

    @property
    def here(self) -> int | None:
        """GPUs this command starts on its own node: `on_node`, else world / nnodes (None: they do not divide)."""
        if self.on_node is not None:
            return self.on_node
        return self.world // self.nnodes if self.world % self.nnodes == 0 else None


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each command, backslash continuations and multi-line quoted strings
    joined (`shell.commands`)."""
    return shell.commands(text)


def find_launcher(words: list[str], launchers: tuple[tuple[str, ...], ...]) -> int | None:
    """Index just past the launcher words (`vllm serve`, `-m sglang.launch_server`, `vllm-router`), or
    None. A one-word launcher with a dot is a module (`python -m` it), without one a program."""
    found = _launcher_at(words, launchers)
    return None if found is None else found[0]


def _launcher_at(words: list[str], launchers) -> tuple[int, tuple[str, ...]] | None:
    """(index just past the launcher words, the launcher) of `find_launcher`, or None."""
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        for launcher in launchers:
            if len(launcher) == 1 and base == launcher[0] and ("." not in base or i and words[i - 1] == "-m"):
                return i + 1, launcher
            if len(launcher) == 2 and base == launcher[0] and words[i + 1:i + 2] == [launcher[1]]:
                return i + 2, launcher
    return None


CONTAINER_RUN = (("docker", "run"), ("podman", "run"), ("nerdctl", "run"))
"""Commands that start a container: `docker run [OPTIONS] IMAGE [ARGS...]`; the words after the image are
appended to the image's ENTRYPOINT (Docker reference, `docker run`: 'ARGS ... override CMD'; an ENTRYPOINT
in exec form receives them as arguments)."""


def image_name(word: str) -> str:
    """An image reference without its registry host, tag and digest (`docker.io/vllm/vllm-openai:v0.33.0`
    -> `vllm/vllm-openai`): a first path part with a dot or colon, or `localhost`, is a registry host
    (Docker's reference grammar, distribution/reference)."""
    name = word.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[:len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 2 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    return "/".join(parts)


def _container_launch(words: list[str], images: dict[str, tuple[str, ...]], launchers=()):
    """(index of the launcher's first argument, the launcher, the image) of a `docker run` command whose image
    is one of `images` (image name -> its ENTRYPOINT as a launcher), or None. An `--entrypoint PROGRAM` option
    replaces the image's ENTRYPOINT, and PROGRAM then receives the words after the image (Docker reference,
    `docker run` --entrypoint: 'Overwrite the default ENTRYPOINT of the image'): the launch is read from
    `PROGRAM ARGS...` when that starts one of `launchers` (`--entrypoint vllm vllm/vllm-openai serve MODEL`
    is `vllm serve MODEL`); otherwise None, and the command is read as any other."""
    for i in range(len(words) - 1):
        if tuple(w.rsplit("/", 1)[-1] for w in words[i:i + 2]) not in CONTAINER_RUN:
            continue
        options = words[i + 2:]
        entrypoint = next((w.split("=", 1)[1] if "=" in w else options[k + 1] if k + 1 < len(options) else ""
                           for k, w in enumerate(options) if w == "--entrypoint" or w.startswith("--entrypoint=")),
                          None)
        for j, word in enumerate(options):
            if image_name(word) not in images:
                continue
            if entrypoint is None:
                return i + 3 + j, images[image_name(word)], word
            found = _launcher_at([entrypoint, *options[j + 1:]], launchers)
            return None if found is None else (i + 2 + j + found[0], found[1], word)
    return None


def option(name: str, known: frozenset[str], aliases: dict[str, str]) -> str:
    """The option a command-line word names, resolved as the engine's argparse parser does it, in
    its canonical spelling (`aliases`): the word itself when the parser defines it, else the one
    option string a `--` word is an unambiguous prefix of (argparse `allow_abbrev`, default True,
    which neither engine turns off: vLLM 0.33.0 `vllm/utils/argparse_utils.py`
    FlexibleArgumentParser(ArgumentParser) and its `vllm serve` subparser; SGLang 0.5.23
    `srt/server_args.py` prepare_server_args builds a plain `argparse.ArgumentParser`; Python's
    `argparse.ArgumentParser._get_option_tuples` matches every option string that starts with the
    word, and more than one match is its 'ambiguous option' error). An unknown or ambiguous word
    comes back as written; `unknown_flags` reports it.

    Example: SGLang's documented `--tp 8` is its tensor-parallel size flag (the only one of its
    option strings that starts with `--tp`)."""
    if name not in known and name.startswith("--"):
        matches = prefix_matches(name, known)
        if len(matches) == 1:
            name = matches[0]
    return aliases.get(name, name)


def prefix_matches(name: str, known: frozenset[str]) -> list[str]:
    """The option strings a `--` word abbreviates (argparse prefix matching), sorted."""
    return sorted(k for k in known if k.startswith(name)) if name.startswith("--") else []


NODE_RANK = "NODE_RANK"
"""The shell variable a launch script over several nodes reads to start only that node's commands (written by
`planner.emit.engine_launch.by_node`, read back by `split_commands`)."""
RANK_VARIABLES = (NODE_RANK, "SLURM_NODEID", "SLURM_PROCID")
"""Variables whose value is the node's rank where a script branches on it: NODE_RANK (torchrun's and the engines'
docs' name), Slurm's node index of the task (SLURM_NODEID) and task rank (SLURM_PROCID, the node's rank where srun
starts one task per node, as a script that starts one engine per node runs). Source: Slurm srun(1) "OUTPUT
ENVIRONMENT VARIABLES" (SLURM_NODEID: the relative node ID of the current node; SLURM_PROCID: the MPI rank or
relative process ID of the current process)."""
_RANK_WORD = re.compile(rf"\$\{{?({'|'.join(RANK_VARIABLES)})\}}?")
"""A word that is one rank variable's value (`$NODE_RANK`, `${SLURM_NODEID}`)."""

NODE_TESTS = {"=": "eq", "==": "eq", "-eq": "eq", "!=": "ne", "-ne": "ne", "-lt": "lt", "-le": "le", "-gt": "gt",
              "-ge": "ge"}
"""Test operators on a node rank that `split_commands` reads (`Ranks.compared`). Source: bash(1) "CONDITIONAL
EXPRESSIONS" (`=` / `==` / `!=` string comparison; `-eq`, `-ne`, `-lt`, `-le`, `-gt`, `-ge` integer)."""

READ_FORMS = ('`if [ "$NODE_RANK" = N ]` (also `==`, `-eq`, `!=`, `-ne`, `-lt`, `-le`, `-gt`, `-ge`, `[[ ]]`; '
              'SLURM_NODEID / SLURM_PROCID in place of NODE_RANK) with `elif` / `else` / `fi`, '
              'and `case "$NODE_RANK" in N|M) ... ;; *) ... ;; esac`')
"""The node-selecting forms `split_commands` reads, for its bad-input message."""


MAX_NODE_RANK = 2**16
"""The largest node rank a branch test is read with (65,536 nodes; a larger one is a form not read)."""


@dataclass(frozen=True)
class Ranks:
    """A set of node ranks: those of `low` (each below `cut`) and, when `tail`, every rank from `cut` on (a branch
    of `-gt 0` runs on ranks 1, 2, ...: Ranks(cut=1, tail=True))."""

    low: frozenset = frozenset()
    cut: int = 0
    tail: bool = False

    @staticmethod
    def compared(op: str, number: int) -> "Ranks":
        """The ranks r for which `r OP number` holds (`NODE_TESTS`' names)."""
        below = {"lt": number, "le": number + 1, "gt": number + 1, "ge": number}
        if op in ("eq", "ne"):
            one = Ranks(frozenset({number}), number + 1)
            return one if op == "eq" else EVERY - one
        ranks = Ranks(frozenset(range(below[op])), below[op])
        return ranks if op in ("lt", "le") else EVERY - ranks

    def has(self, rank: int) -> bool:
        return self.tail if rank >= self.cut else rank in self.low

    def _combine(self, other: "Ranks", keep) -> "Ranks":
        cut, tail = max(self.cut, other.cut), keep(self.tail, other.tail)
        low = {r for r in range(cut) if keep(self.has(r), other.has(r))}
        while cut > 0 and ((cut - 1) in low) == tail:  # one form per set: the tail starts where it starts
            low.discard(cut - 1)
            cut -= 1
        return Ranks(frozenset(low), cut, tail)

    def __and__(self, other: "Ranks") -> "Ranks":
        return self._combine(other, lambda a, b: a and b)

    def __or__(self, other: "Ranks") -> "Ranks":
        return self._combine(other, lambda a, b: a or b)

    def __sub__(self, other: "Ranks") -> "Ranks":
        return self._combine(other, lambda a, b: a and not b)

    @property
    def first(self) -> int | None:
        """The lowest rank of the set (None: empty)."""
        return min(self.low) if self.low else self.cut if self.tail else None

    @property
    def nodes_named(self) -> int:
        """Nodes a file needs for every rank the set names to exist, one past the tail's first (0: empty)."""
        return self.cut + 1 if self.tail else max(self.low, default=-1) + 1

    def count(self, nodes: int) -> int:
        """Ranks of the set among the first `nodes`."""
        return sum(1 for r in self.low if r < nodes) + (max(0, nodes - self.cut) if self.tail else 0)

    def __str__(self) -> str:
        if not self.tail:
            ranks = sorted(self.low)
            return f"node {ranks[0]}" if len(ranks) == 1 else "nodes " + ", ".join(map(str, ranks))
        others = [r for r in range(self.cut) if r not in self.low]
        return "the nodes other than " + ", ".join(map(str, others)) if others else "every node"


EVERY = Ranks(tail=True)
"""Every node rank."""


@dataclass
class _Block:
    """One open `if` / `case` / loop of a script while `split_commands` walks it."""

    kind: str
    """if, case or loop."""
    node: Ranks | None
    """The ranks the commands now run on (the current branch's within the outer block's), None: every rank."""
    outer: Ranks | None
    left: Ranks = EVERY
    """Ranks no branch so far has taken (an `elif` / `else` / later case pattern runs on those only)."""
    ranked: bool = False
    """Whether the block tests a node rank (`RANK_VARIABLES`)."""
    unread: str | None = None
    """A node-rank test of the current branch in a form not read (`_rank_test`), for the error if the branch
    starts an engine."""
    line: int = 0
    """The line the block opens on."""

    def take(self, ranks: Ranks) -> None:
        """The next branch runs on `ranks` of those left (bash runs the first branch whose test holds)."""
        self.node = _within(self.outer, self.left & ranks)
        self.left = self.left - ranks


def _within(outer: Ranks | None, ranks: Ranks) -> Ranks | None:
    """`ranks` inside the outer block's, None for every rank."""
    inside = ranks if outer is None else outer & ranks
    return None if inside == EVERY else inside


def _rank_test(words: list[str]) -> Ranks | str | None:
    """The ranks for which a `[ "$NODE_RANK" OP N ]` / `[[ ... ]]` / `test ...` condition holds (`NODE_TESTS`,
    any of `RANK_VARIABLES`); the condition's text when it names a rank variable in another form
    (`[ -z "$NODE_RANK" ]`); None when it names none."""
    if not any(_RANK_WORD.search(w) for w in words):
        return None
    inner = [w for w in words if w not in ("[", "]", "[[", "]]", "test")]
    if (len(inner) == 3 and _RANK_WORD.fullmatch(inner[0]) and inner[1] in NODE_TESTS
            and re.fullmatch(r"\d+", inner[2]) and int(inner[2]) <= MAX_NODE_RANK):
        return Ranks.compared(NODE_TESTS[inner[1]], int(inner[2]))
    return " ".join(words)


def _control(segment: list[str], blocks: list[_Block], line: int, file: str) -> list[str]:
    """The command words of one segment after the shell keywords that open, switch or close a block
    (`if` / `elif` / `else` / `fi`, `case` / `N)` / `;;` / `esac`, `for` / `while` / `until` / `do` / `done`),
    `blocks` updated; [] when the segment holds no command."""
    top = blocks[-1] if blocks else None
    head = segment[0]
    if head in ("if", "elif"):
        test = _rank_test(segment[1:])
        if head == "if" or top is None or top.kind != "if":
            outer = top.node if top else None
            blocks.append(_Block("if", outer, outer, line=line))
            top = blocks[-1]
        top.unread = f"the condition {test!r} (line {line})" if isinstance(test, str) else None
        if isinstance(test, Ranks):
            top.ranked = True
            top.take(test)
        elif top.ranked:  # a test of something else: the branch may run on any rank left
            top.node = _within(top.outer, top.left)
        return []
    if head in ("then", "do", "else"):
        if head == "else" and top is not None and top.kind == "if" and top.ranked:
            top.take(EVERY)
        if head == "else" and top is not None:
            top.unread = None if top.unread is None else top.unread.replace("the condition", "the `else` of the condition")
        return segment[1:]
    if head in ("fi", "esac", "done"):
        if blocks:
            blocks.pop()
        return segment[1:]
    if head in shell.LOOPS:
        blocks.append(_Block("loop", top.node if top else None, top.node if top else None, line=line))
        return []
    if head == "case":
        ranked = len(segment) >= 2 and _RANK_WORD.fullmatch(segment[1]) is not None
        blocks.append(_Block("case", top.node if top else None, top.node if top else None, ranked=ranked, line=line))
        rest = segment[3:] if segment[2:3] == ["in"] else []  # `case $NODE_RANK in 0) cmd ;;` on one line
        return _control(rest, blocks, line, file) if rest else []
    if top is not None and top.kind == "case":
        pattern = re.fullmatch(r"\(?([^()]*)\)", head)
        if pattern is not None:
            ranks = pattern[1].split("|")
            top.unread = None
            if top.ranked and all(r == "*" or r.isdigit() and int(r) <= MAX_NODE_RANK for r in ranks):
                top.take(EVERY if "*" in ranks else Ranks(frozenset(map(int, ranks)), max(map(int, ranks)) + 1))
            elif top.ranked:
                top.unread = f"the case pattern {head!r} (line {line})"
            return segment[1:]
    return segment


def split_commands(text: str, file: str, launchers, aliases: dict[str, str],
                   switches: frozenset[str], underscores: bool, known: frozenset[str],
                   images: dict[str, tuple[str, ...]] | None = None) -> list[Command]:
    """Every command line of `text` that starts an engine (`launchers`, or a `docker run` of one of the
    engine's `images`: image name -> its ENTRYPOINT, the words after the image its arguments), split into
    flags; a flag the command abbreviates is read as the flag it stands for (`option`; `known`: every option
    string of the engine's parser). A command in a branch that tests NODE_RANK (`READ_FORMS`: `if` / `elif` /
    `else`, `case`, one line or many) runs on that node (`Command.node`: the rank, or a label such as
    "other than 0" for an `else` branch), as bash runs only the branch whose test holds.

    Raises:
        SpecError: a shell syntax error; an engine command in a branch of a NODE_RANK test in a form not read,
            or inside a
            `for` / `while` / `until` loop, which this reader does not unroll (exit 2).
    """
    out, variables, blocks, exported = [], {}, [], set()
    for line, code in logical_lines(text):
        try:
            words = shell.join_expansions(shell.split(shell.let_assignments(code)))
        except ValueError as exc:
            raise SpecError(f"shell syntax error: {exc}", file=file, key=f"line {line}") from None
        for segment in shell.segments(shell.unwrap(words, file)):
            segment = _control(segment, blocks, line, file)
            if not segment:
                continue
            command = _command(segment, variables, line, launchers, aliases, switches, underscores, known,
                               images or {}, exported)
            if command is None:
                continue
            unread = next((b.unread for b in blocks if b.unread), None)
            if unread is not None:
                raise SpecError(f"the `{' '.join(command.launcher)}` command runs in a branch that {unread} selects "
                                f"in a form this reader does not read; it reads {READ_FORMS}", file=file,
                                key=f"line {line}")
            if any(b.kind == "loop" for b in blocks):
                raise SpecError(f"the `{' '.join(command.launcher)}` command runs inside a shell loop (for / while / "
                                f"until), which this reader does not unroll: write one command per server, with its "
                                f"own port and GPUs", file=file, key=f"line {line}")
            out.append(replace(command, node=blocks[-1].node if blocks else None))
    return out


_REDIRECT = re.compile(r"(\d*|&)(>>?|<<?<?|>&|<&)(.*)")
"""A shell redirection word: an optional descriptor (or `&`), the operator, and its target when written in the
same word (`>log`, `2>&1`, `<<<text`); without one the next word is the target (POSIX shell, 2.7 Redirection)."""


def _without_redirections(words: list[str]) -> list[str]:
    """The words of a command without its redirections (`> vllm.log 2>&1 < /dev/null`): the shell applies them
    and never passes them to the program, so they are no arguments of the engine."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        match = _REDIRECT.fullmatch(word)
        if match is None:
            out.append(word)
        elif not match[3]:
            skip = True
    return out


def _command(segment: list[str], variables: dict[str, str], line: int, launchers, aliases: dict[str, str],
             switches: frozenset[str], underscores: bool, known: frozenset[str],
             images: dict[str, tuple[str, ...]], exported: set[str]) -> Command | None:
    """One shell command's Command, its `$VAR` words expanded from the script's earlier assignments
    (`planner.check.shell`, as the Megatron reader does); a command of assignments only (`export` or not)
    sets them and is None, as is any command that starts no engine. Its environment (`Command.env`) is the
    script's `exported` variables (`export CUDA_VISIBLE_DEVICES=0,1` on a line of its own) overridden by its
    prefix, as bash builds a child's environment; a container command's is what its `-e` / `--env` options pass
    (`_container_env`): a prefix on `docker run` (`CUDA_VISIBLE_DEVICES=0 docker run ...`) is the docker client's
    environment, not the container's."""
    expanded = shell.expand_command(segment, variables, exported)
    if expanded is None:
        return None
    words = _without_redirections(expanded)
    image, doubled, gpu_request, container_visible, options = None, None, None, None, ()
    found = _container_launch(words, images, launchers)
    if found is not None:
        at, launcher, image = found
        options = tuple(words[:words.index(image)])
        gpu_request = _container_option(list(options), CONTAINER_GPUS)
        inside = _container_env(list(options), {**_exported(variables, exported), **_leading(words)})
        container_visible = inside.get(CONTAINER_VISIBLE)
        again = _launcher_at(words[at:], launchers)
        doubled = again[1] if again is not None else None
    else:
        found = _launcher_at(words, launchers)
        if found is None:
            return None
        at, launcher = found
    env = inside if image is not None else {**_exported(variables, exported), **_prefix(words[:at])}
    flags, spelled, positional, after_switch = {}, {}, [], {}
    i, last_switch = at, None
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            positional.append(word)
            if last_switch is not None:
                after_switch.setdefault(word, last_switch)
            last_switch = None
            continue
        name, eq, value = word.partition("=")
        if underscores and name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        canonical = option(name, known, aliases)
        last_switch = None
        if not eq:
            if canonical in switches or i >= len(words) or words[i].startswith("--"):
                value = True
                last_switch = name if canonical in switches else None
            else:
                value, i = words[i], i + 1
        flags[canonical] = value
        spelled[canonical] = name
    return Command(line=line, env=env, positional=positional, flags=flags, spelled=spelled, launcher=launcher,
                   image=image, after_switch=after_switch, doubled=doubled, gpu_request=gpu_request,
                   container_visible=container_visible, container_options=options)


def _prefix(words: list[str]) -> dict[str, str]:
    """The `NAME=value` environment prefix among a command's words before its program."""
    return dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Za-z_]\w*=.*", w))


def _exported(variables: dict[str, str], exported: set[str]) -> dict[str, str]:
    """The script's exported variables with the values they hold now (`shell.expand_command`)."""
    return {name: variables[name] for name in exported if name in variables}


def _container_option(words: list[str], name: str) -> str | None:
    """The last value of option `name` among a container command's words before its image (`--gpus 2`,
    `--gpus=2`; the runtime's flag parser, pflag, keeps the last of a repeated scalar), or None."""
    value = None
    for k, word in enumerate(words):
        if word == name and k + 1 < len(words):
            value = words[k + 1]
        elif word.startswith(name + "="):
            value = word[len(name) + 1:]
    return value


def _leading(words: list[str]) -> dict[str, str]:
    """The `NAME=value` words before a command's program (bash's assignments for that command alone)."""
    out = {}
    for word in words:
        match = shell.ASSIGN.match(word)
        if match is None:
            break
        out[match[1]] = match[2]
    return out


def _container_env(words: list[str], host: dict[str, str]) -> dict[str, str]:
    """The environment a container command's options give the container: each `-e NAME=VALUE` / `--env NAME=VALUE`
    / `--env=NAME=VALUE` / `-eNAME=VALUE` (the last of a name wins: the runtime builds the environment in order),
    and `-e NAME` alone copying `host`'s value (the client's environment: the script's exported variables and the
    command's own prefix), left out where the file does not show one. Nothing else of the client's environment
    enters the container (`--env-file` lists are not read). Source: Docker reference, `docker container run`
    "Set environment variables (-e, --env, --env-file)" ("If no = is provided and that variable isn't exported in
    your local environment, the variable isn't set in the container"); docker/cli issue #1780 (`-e VAR` takes the
    client's value)."""
    out: dict[str, str] = {}
    for k, word in enumerate(words):
        if word in ("-e", "--env") and k + 1 < len(words):
            text = words[k + 1]
        elif word.startswith("--env="):
            text = word[len("--env="):]
        elif word.startswith("-e") and not word.startswith("--") and len(word) > 2:
            text = word[2:]
        else:
            continue
        key, eq, val = text.partition("=")
        if eq:
            out[key] = val
        elif key in host:
            out[key] = host[key]
        else:
            out.pop(key, None)
    return out


def unknown_flags(command: Command, known: frozenset[str], engine: str, version: str,
                  renamed: dict | None = None) -> list[Violation]:
    """`unknown_flag` (error) for each flag the engine's parser does not define, with what replaces it
    where the engine removed it (`renamed`, the engine table's RENAMED: flag -> `Removed`), else the
    closest one, and for each abbreviation that more than one of its flags starts with (argparse exits:
    'ambiguous option')."""
    out = []
    for name, spelled in command.spelled.items():
        if name in known or spelled in known:
            continue
        removed = (renamed or {}).get(spelled)
        if removed is not None:
            then = (f"{engine} replaced it with {removed.replacement}" if removed.replacement else
                    f"{engine} removed it")
            out.append(Violation(
                rule="unknown_flag",
                message=f"{spelled} is not a flag of {engine} (its argument parser exits on it; {version}): "
                        f"{then} ({removed.source})",
                fix=f"write {removed.replacement}" if removed.replacement else f"remove {spelled}"))
            continue
        matches = prefix_matches(spelled, known)
        if len(matches) > 1:
            out.append(Violation(
                rule="unknown_flag",
                message=f"{spelled} is ambiguous: {engine}'s argument parser exits with 'ambiguous option: "
                        f"{spelled} could match {', '.join(matches)}' ({version})",
                fix=f"write the whole flag, one of {', '.join(matches)}"))
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        out.append(Violation(
            rule="unknown_flag",
            message=f"{spelled} is not a flag of {engine} (its argument parser exits on it; {version})"
                    + (f"; did you mean {close[0]}?" if close else ""),
            fix=f"write {close[0]}" if close else f"remove {spelled}"))
    return out


def rendezvous_address(command: Command, flag: str) -> str | None:
    """The address a command names with the rendezvous `flag` (None: absent, or given without a value)."""
    value = command.flags.get(flag)
    return value if isinstance(value, str) else None


def one_instance(launches: list[Launch]) -> list[list[Launch]]:
    """The launches grouped by the engine instance they start: the commands of one instance over several nodes
    (the same layout, node count, role and rendezvous address, each a node rank of its own: both engines start
    one process group over nnodes x world / nnodes ranks from them, `srt/entrypoints/engine.py`
    _calculate_rank_ranges in SGLang 0.5.23, `vllm/config/parallel.py` nnodes / node_rank in vLLM 0.33.0) are one
    group, in node-rank order; every other launch is a group of its own."""
    groups: dict[tuple, list[Launch]] = {}
    for k, launch in enumerate(launches):
        key = ((launch.engine, launch.inst, launch.replicas, launch.nnodes, launch.role, launch.rendezvous)
               if launch.nnodes > 1 and launch.rendezvous is not None else (k,))
        group = groups.setdefault(key, [])
        if any(other.node_rank == launch.node_rank for other in group):  # a second command of one node rank
            groups[(k,)] = [launch]
        else:
            group.append(launch)
    return [sorted(group, key=lambda l: l.node_rank) for group in groups.values()]


def spanned_gpus(launches: list[Launch], gpus_per_node: int | None = None) -> int:
    """GPUs the launches of a file start over all the nodes they name: each command the GPUs of its own node
    (`Launch.here`, else its world -- `node_gpus`) on each node it runs on (`Launch.copies`); with `gpus_per_node`, the
    one-node servers of one node-rank branch (`if [ "$NODE_RANK" = 0 ]`) at most the GPUs of the nodes it runs on -- more
    is their clash there (`engine_file`'s gpus_shared), not a larger job."""
    total, branches = 0, {}
    for launch in launches:
        gpus = node_gpus(launch) * launch.copies
        if gpus_per_node and launch.node is not None and launch.nnodes == 1:
            used, _ = branches.get(launch.node, (0, 0))
            branches[launch.node] = (used + gpus, gpus_per_node * launch.copies)
        else:
            total += gpus
    return total + sum(min(used, most) for used, most in branches.values())


def node_gpus(launch: Launch) -> int:
    """GPUs one launch counts in its file: the ranks it starts on its own node (`Launch.here`), else (or where it
    starts every node's ranks itself, `Launch.spans_itself`) its world."""
    return launch.world if launch.spans_itself else launch.here or launch.world


def rendezvous(command: Command, nnodes: int, flag: str, value: str) -> list[Violation]:
    """`multi_node_rendezvous` (error): an instance over `nnodes` > 1 nodes whose command does not name node
    rank 0's address with `flag` (`value`: what it takes). Both engines then default to 127.0.0.1, so each
    node rendezvouses with itself and the nodes never form one process group (the readers cite where)."""
    if nnodes == 1 or isinstance(command.flags.get(flag), str):
        return []
    return [Violation(rule="multi_node_rendezvous",
                      message=f"an instance over {nnodes} nodes without {flag} {value}: the address defaults to "
                              f"127.0.0.1, so each node rendezvouses with itself and the {nnodes} nodes never join",
                      fix=f"{flag} {value} (node rank 0's address) on every node")]


def source(command: Command, flag: str, file: str) -> dict[str, str]:
    """{file, key} a finding on `flag` names: the file that gave it (`Command.origin`, else `file`, the
    command's) and the flag or key as written there."""
    return {"file": command.origin.get(flag, file), "key": command.spelled.get(flag, flag)}


def argument(command: Command, flag: str, file: str):
    """A value flag's value (None when absent).

    Raises:
        SpecError: the flag is given without its value (the next word is a flag, or the line ends): the
            engine's argparse parser exits 'argument FLAG: expected one argument'."""
    value = command.flags.get(flag)
    if value is True:
        raise SpecError(f"expected one argument (the engine's argument parser exits on {flag} without its value; "
                        f"the next word is a flag or the command ends)", **source(command, flag, file))
    return value


def node_rank(command: Command, flag: str, file: str) -> int:
    """The node rank the command gives with `flag` (default 0); for a per-node value (`per_node`: `--node-rank
    $NODE_RANK`) the lowest rank of the branch it runs in (`Command.node`: 1 in the `else` of `-eq 0`), else 0.
    Both engines take the rank per node: SGLang 0.5.23 `srt/arg_groups/parallel_hook.py`; vLLM 0.33.0 `engine/arg_utils.py`
    (l. 1177-1178: node count and rank of ParallelConfig), its later nodes headless (`entrypoints/common/cli_args.py`
    l. 445; `entrypoints/cli/serve.py` run_headless starts only the workers where node_rank_within_dp > 0).

    Raises:
        SpecError: not an integer >= 0 (`integer`)."""
    if per_node(command, flag):
        return command.node.first if command.node is not None and command.node.first is not None else 0
    return integer(command, flag, 0, file, low=0)


def per_node(command: Command, flag: str) -> bool:
    """Whether the command gives `flag` (a node-rank flag) as one shell variable the file does not set
    (`--node-rank $NODE_RANK`, SGLang's multi-node docs' form): the launcher sets it on each node, so the one
    command is every node's; it is read as node 0's, whose launch the file's rules count (the instance spans the
    node-count flag's nodes whatever the rank)."""
    value = command.flags.get(flag)
    return isinstance(value, str) and shell.VAR.fullmatch(value) is not None


def integer(command: Command, flag: str, default: int | None, file: str, low: int = 1) -> int | None:
    """A flag's integer value (argparse `type=int`), or `default` when absent.

    Raises:
        SpecError: not an integer >= low (the engine's parser or config exits on it), or one beyond
            `MAX_FLAG_INT` in magnitude (`within_limit`).
    """
    value = argument(command, flag, file)
    if value is None:
        return default
    try:
        literal(command, flag, value, file)
        if not re.fullmatch(r"-?\d+", str(value)) or int(value) < low:
            raise SpecError(f"value {value!r} must be an integer >= {low} (a literal, not a shell variable)",
                            **source(command, flag, file))
        return within_limit(command, flag, int(value), MAX_FLAG_INT, file)
    except SpecError as exc:
        return set_aside(exc, default if default is not None else max(low, 1))


_SET_ASIDE: ContextVar[list[SpecError] | None] = ContextVar("set_aside", default=None)
"""The bad values of the launch being read (`values_collected`), or None outside one."""


def set_aside(exc: SpecError, fallback):
    """`fallback` in place of a bad value, `exc` kept for `values_collected` to report with the launch's other
    bad values; outside `values_collected`, `exc` is raised."""
    bad = _SET_ASIDE.get()
    if bad is None:
        raise exc
    bad.append(exc)
    return fallback


def aside(call, fallback):
    """`call()`, or `fallback` with its SpecError set aside (`set_aside`): a launch's other bad input (a weight
    format, dtype or GPU list the reader refuses) reported with its bad values, the command read on."""
    try:
        return call()
    except SpecError as exc:
        return set_aside(exc, fallback)


@contextmanager
def values_collected(file: str):
    """Read a launch with every bad value of its value flags (`integer`, `human_integer`, `fraction`, `choice`)
    set aside and reported together when the block ends, one line each (`gate.raise_bad_values`), also when
    the block raises another error, which may follow from a value set aside (fresh-user review 9: the engine
    readers stopped at the first)."""
    bad: list[SpecError] = []
    token = _SET_ASIDE.set(bad)
    try:
        yield
    except SpecError:
        raise_bad_values(file, bad)
        raise
    finally:
        _SET_ASIDE.reset(token)
    raise_bad_values(file, bad)


def literal(command: Command, flag: str, value, file: str) -> None:
    """Nothing when a number flag's value holds no shell expansion left unexpanded (the script's own variables
    and integer arithmetic are expanded already: `shell.substitute`).

    Raises:
        SpecError: naming the variable the file does not set, or the `$(...)` it would have to run
            (`shell.unresolved`)."""
    why = shell.unresolved(str(value), {}) if "$" in str(value) else None
    if why is not None:
        raise SpecError(why, **source(command, flag, file))


def within_limit(command: Command, flag: str, value: int, limit: int, file: str) -> int:
    """`value` when its magnitude is at most `limit` (`planner.specs.limits`: MAX_SEQ_LEN for a context
    length, MAX_FLAG_INT for any other integer), else bad input naming the limit.

    Raises:
        SpecError: beyond the limit (exit 2; the value shortened when long, `planner.errors.shorten`)."""
    if abs(value) > limit:
        raise SpecError(f"value {str(value)!r} exceeds the {limit:,} this planner accepts (the limit `planner "
                        f"plan` puts on it, beyond any real run)", **source(command, flag, file))
    return value


def human_integer(command: Command, flag: str, default: int | None, file: str, suffixes: dict[str, tuple[int, bool]],
                  *, auto: bool = False, exact: bool = False, high: int = MAX_FLAG_INT) -> int | None:
    """A flag the engine parses as a human-readable integer >= 1: digits, or a number and one of `suffixes`
    (suffix -> (multiplier, decimals allowed); each engine's table, in its reader), `default` when absent;
    with `auto`, -1 for 'auto' / '-1' (any case of auto). A decimal number times its multiplier is truncated
    as float arithmetic does (vLLM: int(float(number) * mult)), or, with `exact`, as decimal arithmetic does
    (SGLang: int(Decimal(number) * mult)).

    Raises:
        SpecError: anything else, naming the spellings the engine takes; a value beyond `high` (MAX_SEQ_LEN
            for a context length; `within_limit`)."""
    value = argument(command, flag, file)
    if value is None:
        return default
    try:
        return _human(command, flag, value, file, suffixes, auto=auto, exact=exact, high=high)
    except SpecError as exc:
        return set_aside(exc, default)


def _human(command: Command, flag: str, value, file: str, suffixes: dict[str, tuple[int, bool]], *, auto: bool,
           exact: bool, high: int) -> int:
    """`human_integer` of a value given."""
    literal(command, flag, value, file)
    text = str(value).strip()
    if auto and (text == "-1" or text.lower() == "auto"):
        return -1
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", text)
    if match and (match[2] in suffixes or (not match[2] and "." not in match[1])):
        number, (scale, decimals) = match[1], suffixes.get(match[2], (1, False))
        if "." not in number or decimals:
            if len(match[1]) > len(str(MAX_FLAG_INT)) + 1:  # float(number) would overflow (or be inf)
                within_limit(command, flag, int(match[1].split(".")[0]) * scale, high, file)
            result = (int((Decimal(number) if exact else float(number)) * scale) if "." in number
                      else int(number) * scale)
            if result >= 1:
                return within_limit(command, flag, result, high, file)
    examples = ", ".join(f"8{k} = {8 * m:,}" for k, (m, _) in suffixes.items() if m in (10**3, 2**10))
    raise SpecError(f"value {value!r} must be an integer >= 1{', auto or -1' if auto else ''}, or a number with "
                    f"one of the suffixes {' '.join(suffixes)} ({examples}; a literal, not a shell variable)",
                    **source(command, flag, file))


def fraction(command: Command, flag: str, default: float, file: str) -> float:
    """A budget fraction in (0, 1]."""
    value = argument(command, flag, file)
    if value is None:
        return default
    try:
        literal(command, flag, value, file)
    except SpecError as exc:
        return set_aside(exc, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not 0 < number <= 1:
        return set_aside(SpecError(f"value {value!r} must be a number in (0, 1] (a fraction of GPU memory)",
                                   **source(command, flag, file)), default)
    return number


def choice(command: Command, flag: str, table: dict, file: str, what: str):
    """The planner's value for a flag whose values map through `table` (None when absent).

    Raises:
        SpecError: a value the planner does not model, naming those it does.
    """
    value = argument(command, flag, file)
    if value is None:
        return None
    if value not in table:
        return set_aside(SpecError(f"value {value!r} not modelled ({what}); allowed: {', '.join(table)}",
                                   **source(command, flag, file)), None)
    return table[value]


def weight_format(command: Command, flag: str, table: dict, spec: ModelSpec, file: str,
                  engine: str) -> tuple[str, list[Violation]]:
    """(the weight format a launch runs, findings): the format the command's quantization `flag`
    names (`table`: its values -> the planner's formats), else the checkpoint's own (config.json
    quantization_config, `ModelSpec.weight_format`), which both engines load when `flag` is
    absent; `fp8` on a block-scaled fp8 checkpoint runs its blocks; bf16 when neither names one.
    Another format than the checkpoint's is an error: both engines refuse it at start-up ('Quantization
    method specified in the model config (...) does not match the quantization method specified in
    the `quantization` argument': vLLM 0.33.0 `vllm/config/model.py` ModelConfig._verify_quantization,
    SGLang 0.5.23 `srt/configs/model_config.py` _verify_quantization)."""
    require_modelled_checkpoint(spec)
    given = choice(command, flag, table, file, "weight formats")
    own = spec.weight_format
    if given is None:
        return own or "bf16", []
    if own is None or given == own:
        return given, []
    if given == "fp8" and own == "fp8-block":
        return own, []
    return own, [Violation(
        rule="quantization_mismatch",
        message=f"{flag} {command.flags[flag]} ({given} weights) but {spec.name}'s checkpoint is {own} (its "
                f"config.json quantization_config); {engine} refuses the mismatch at start-up",
        fix=f"remove {flag} (the checkpoint's {own} is loaded), or serve a {given} checkpoint")]


CONTAINER_GPUS = "--gpus"
"""`docker run`'s GPU request (also podman's and nerdctl's): a CSV record of fields, each `all` or a count
(integer), or `count=`, `device=` (ids, comma-separated: inside one CSV field only when quoted,
`'"device=0,1"'`), `capabilities=`, `driver=`, `options=`; a key given twice, another key or a count that is
no integer is the CLI's error; neither count nor device means count 1. Source: docker/cli@f79193c
`opts/gpus.go` GpuOpts.Set / parseCount. The daemon then exposes the devices listed, else GPUs 0..count-1,
all for `all` (count -1), none for 0, and refuses a request with both a count and devices: 'cannot set both
Count and DeviceIDs on device request' (moby/moby@5c48736 `daemon/nvidia_linux.go` setNvidiaGPUs), the
classic `--gpus device=0,1`, which the CSV reads as device 0 plus a count of 1."""


CONTAINER_VISIBLE = "NVIDIA_VISIBLE_DEVICES"
"""The NVIDIA Container Toolkit's device variable, which a container started with the NVIDIA runtime
(`docker run --runtime=nvidia`, or a daemon whose default runtime it is) gets its GPUs from when there is no
`--gpus` request: a comma-separated list of indices / UUIDs, `all`, `none` (no GPU, driver only) or `void` /
empty (no GPU). Unset, the image's own value applies: the CUDA base images the vLLM and SGLang images build on
set `all`. Source: NVIDIA/nvidia-container-toolkit@d34b304 `internal/config/image/cuda_image.go`
devicesFromEnvvars (`void` / empty -> no devices; unset on a legacy image -> all) and VisibleDevices. A
`--gpus` request wins: moby@5c48736 `daemon/nvidia_linux.go` setNvidiaGPUs appends its own
NVIDIA_VISIBLE_DEVICES after the user's."""


def container_gpus(command: Command, file: str) -> tuple[int | None, list[Violation]]:
    """(GPUs the container exposes -- None: all of the node, no request, or one the daemon refuses --,
    findings: the daemon's count-and-devices refusal, `docker_gpus`). The `CONTAINER_GPUS` request when
    given, else the `CONTAINER_VISIBLE` the command sets (`-e NVIDIA_VISIBLE_DEVICES=0,1`: 2), else None
    (`--runtime=nvidia` alone: the image's `all`).

    Raises:
        SpecError: a request the CLI refuses (unknown key, repeated key, count not an integer)."""
    value = command.gpu_request
    if value is None:
        return _nvidia_visible(command.container_visible, file), []
    where = {"file": file, "key": f"{CONTAINER_GPUS} (line {command.line})"}
    try:
        fields = next(csv.reader([value]))
    except (csv.Error, StopIteration):
        raise SpecError(f"value {value!r} is not a GPU request", **where) from None
    count, devices, bare, seen = None, None, None, set()
    for text in fields:
        key, eq, val = text.partition("=")
        name = key if eq else "count"
        if name in seen:
            raise SpecError(f"value {value!r}: gpu request key '{name}' can be specified only once (docker's error)",
                            **where)
        seen.add(name)
        if name == "count":
            number = val if eq else key
            if number != "all" and not re.fullmatch(r"-?\d+", number):
                raise SpecError(f"value {value!r}: count {number!r} must be an integer or all (docker's error)",
                                **where)
            count, bare = (-1 if number == "all" else int(number)), (None if eq else number)
        elif key == "device":
            devices = val.split(",")
        elif key not in ("driver", "capabilities", "options"):
            raise SpecError(f"value {value!r}: unexpected key '{key}' (allowed: count, device, capabilities, "
                            f"driver, options)", **where)
    if devices is None:
        return (1 if count is None else None if count < 0 else count), []
    if count in (None, 0):
        return len(devices), []
    meant = ",".join(devices + ([bare] if bare is not None else []))
    fix = (f"quote the device list inside the value: {CONTAINER_GPUS} '\"device={meant}\"'" if bare is not None
           else "give a count or a device list, not both")
    return None, [Violation(  # no container starts: no GPU count to check the ranks against
        rule="docker_gpus",
        message=f"{CONTAINER_GPUS} {value} asks for device(s) {','.join(devices)} and a count of {count}: the Docker "
                f"daemon refuses to start the container ('cannot set both Count and DeviceIDs on device request'"
                + ("; unquoted, a device list's commas split it into a device and a count)" if bare is not None
                   else ")"),
        fix=fix)]


def _nvidia_visible(value: str | None, file: str) -> int | None:
    """GPUs a `CONTAINER_VISIBLE` value exposes; None for `all` or not set.

    Raises:
        SpecError: a value that lists no devices the toolkit reads (exit 2)."""
    if value is None:
        return None
    ids = [v.strip() for v in value.split(",") if v.strip()]
    if "all" in ids:
        return None
    if not ids or "void" in ids or ids == ["none"]:
        return 0
    if any(not re.fullmatch(r"\d+|GPU-[\w-]+|MIG-[\w-]+", v) for v in ids):
        raise SpecError(f"value {value!r} must list GPU indices or UUIDs (e.g. 0,1,2,3), or be all, none or void",
                        file=file, key=CONTAINER_VISIBLE)
    return len(ids)


CONTAINER_PUBLISH = ("-p", "--publish")
CONTAINER_NETWORK = ("--network", "--net")
"""`docker run`'s port mapping, `-p [IP:]HOST_PORT:CONTAINER_PORT[/PROTOCOL]` (also `-p8001:8000`, `--publish=...`;
`-p CONTAINER_PORT`: a random
host port), and network option (`host`: the container shares the host's ports). A container on the default
bridge network binds a host port only through a mapping, so containers whose servers listen on one port
inside do not collide (Docker reference, `docker run` --publish and --network)."""


def host_port(command: Command, port: int) -> int | None:
    """The host port through which the server of `command` (listening on `port`) is bound: `port` itself for a
    bare command or a container on the host's network, the host side of the container's mapping of `port`,
    None when nothing binds a fixed host port (no mapping, or a random one)."""
    if command.image is None:
        return port
    words, mapped, network = command.container_options, None, None
    for k, word in enumerate(words):
        for names, kind in ((CONTAINER_PUBLISH, "publish"), (CONTAINER_NETWORK, "network")):
            name = next((n for n in names if word == n or word.startswith(n + "=")
                         or (len(n) == 2 and word.startswith(n) and word[2:3].isdigit())), None)
            if name is None or (word == name and k + 1 >= len(words)):
                continue
            value = words[k + 1] if word == name else word[len(name) + (word[len(name)] == "="):]
            if kind == "network":
                network = value
                continue
            parts = value.split("/", 1)[0].rsplit(":", 2)
            if len(parts) >= 2 and parts[-1] == str(port) and parts[-2].isdigit():
                mapped = int(parts[-2])
    return port if network == "host" else mapped


def container_devices(command: Command, gpus_per_node: int) -> list[str] | None:
    """The node's GPU ids the container's `CONTAINER_GPUS` request exposes (`device=` ids, else 0..count-1, all
    for `all`), or None: no container request, or one `container_gpus` refuses or flags."""
    if command.gpu_request is None:
        return None
    try:
        fields = next(csv.reader([command.gpu_request]))
    except (csv.Error, StopIteration):
        return None
    given = dict(text.partition("=")[::2] if "=" in text else ("count", text) for text in fields)
    if "device" in given:
        return None if "count" in given else [d.strip() for d in given["device"].split(",") if d.strip()]
    count = given.get("count", "1")
    number = gpus_per_node if count == "all" else int(count) if re.fullmatch(r"\d+", count) else None
    return None if number is None else [str(i) for i in range(number)]


def visible_from(command: Command) -> str:
    """What sets the GPUs the command's process sees, as messages name it: the CUDA_VISIBLE_DEVICES prefix,
    else the container's GPU request, else the NVIDIA_VISIBLE_DEVICES the container gets."""
    if VISIBLE in command.env or (command.gpu_request is None and command.container_visible is None):
        return VISIBLE
    if command.gpu_request is None:
        return f"{CONTAINER_VISIBLE}={command.container_visible}"
    return f"{CONTAINER_GPUS} {command.gpu_request}"


def visible_gpus(command: Command, file: str) -> int | None:
    """GPUs the command's process sees: the CUDA_VISIBLE_DEVICES prefix's, else those the container's GPU
    request exposes (`container_gpus`); None: not limited (every GPU of the node)."""
    value = command.env.get(VISIBLE)
    if value is None:
        return container_gpus(command, file)[0]
    ids = [v for v in value.split(",") if v.strip()]
    if not ids or any(not re.fullmatch(r"\d+|GPU-[\w-]+|MIG-[\w-]+", v.strip()) for v in ids):
        raise SpecError(f"value {value!r} must list GPU indices (e.g. 0,1,2,3)", file=file, key=VISIBLE)
    return len(ids)


def resolve_model(ref: str | None, given: str | None, file: str, flag: str) -> ModelSpec:
    """The model a command serves: `check --model` when given, else its model path (a catalog name,
    a local directory with config.json, or a Hugging Face id of a catalog model: its hf_id or hf_aliases,
    or one with its publisher's release / quantization suffix, `planner.specs.hf_ids`:
    Qwen/Qwen3-235B-A22B-FP8 is qwen3-235b-a22b with its block-scaled fp8 checkpoint).

    Raises:
        SpecError: neither resolves (exit 2), naming the option that supplies it.
    """
    from planner.specs import hf_ids
    from planner.specs.model import CATALOG_DIR, load_model, unknown_hugging_face_id

    if given is not None:
        return load_model(given)
    if ref is None:
        raise SpecError(f"no model: give the model path or {flag}, or check --model", file=file, key=flag)
    if Path(ref).exists() or (CATALOG_DIR / f"{ref}.yaml").exists():
        return load_model(ref)
    found = hf_ids.lookup(ref)
    if found is not None:
        return found
    raise SpecError(f"model {ref!r} is no local directory with config.json and no catalog name: "
                    f"{unknown_hugging_face_id(ref)}; or give check --model NAME|PATH", file=file, key=flag)


def load_cluster_for(cluster: str | None, file: str) -> ClusterSpec:
    from planner.specs.cluster import load_cluster

    if cluster is None:
        raise SpecError("an engine command does not name its GPUs: give check --cluster NAME|PATH", file=file,
                        key="--cluster")
    return load_cluster(cluster)


# ---------------------------------------------------------------- rules

def deepep_findings(ep: int, framework: str, kernels: str) -> list[Violation]:
    """One error (rule `deepep_node_count`) when a launch that runs DeepEP's normal-mode kernels (`kernels` says
    how, in the engine's flags) does so over an EP group of `ep` ranks they are not compiled for
    (`frameworks.deepep.normal_mode_problem` under the framework's pinned DeepEP); the fix names the nearest
    supported EP sizes."""
    problem = deepep.normal_mode_problem(ep, framework)
    if not problem:
        return []
    return [Violation(rule="deepep_node_count", message=f"{kernels} at ep {ep}: {problem}",
                      fix=deepep.fix_words(ep, framework))]


def _shape_findings(spec: ModelSpec, launch: Launch) -> list[Violation]:
    """Heads and KV heads by attention TP, layers by PP, experts by EP (each engine's start-up checks)."""
    inst, f = launch.inst, launch.flag
    at, kv, out = inst.attn_tp, spec.num_key_value_heads, []
    tp_text = _tp_text(launch)
    if spec.num_attention_heads % at:
        out.append(Violation(
            rule="heads_divisible",
            message=f"num_attention_heads {spec.num_attention_heads} is not divisible by {tp_text} "
                    f"(each rank needs whole heads; {launch.engine} refuses it at start-up)",
            fix=""))
    elif not spec.is_mla and kv % at and at % kv:
        out.append(Violation(
            rule="kv_heads_divisible",
            message=f"num_key_value_heads {kv} and {tp_text} do not divide one another (KV heads are "
                    f"split when tp divides them and replicated when tp is a multiple of them)", fix=""))
    if inst.pp > spec.num_hidden_layers:
        out.append(Violation(rule="layers_by_pp",
                             message=f"{f['pp']} {inst.pp} exceeds num_hidden_layers {spec.num_hidden_layers}",
                             fix=f"{f['pp']} {spec.num_hidden_layers} or fewer"))
    physical = sv.physical_experts(spec, inst) if spec.is_moe else 0
    if spec.is_moe and inst.ep > 1 and physical % inst.ep:
        spare = f" + {inst.redundant} redundant" if inst.redundant else ""
        out.append(Violation(rule="experts_by_ep",
                             message=f"{spec.num_experts}{spare} routed experts are not divisible by expert-parallel "
                                     f"size {inst.ep}",
                             fix="an expert-parallel size that divides the experts" + (
                                 f", or {f['redundant_experts']} {-spec.num_experts % inst.ep}"
                                 if "redundant_experts" in f else "")))
    elif spec.is_moe and spec.moe_intermediate_size % (inst.tp // inst.ep):
        out.append(Violation(rule="experts_by_ep",
                             message=f"moe_intermediate_size {spec.moe_intermediate_size} is not divisible by the "
                                     f"expert tensor-parallel size {inst.tp // inst.ep}", fix=""))
    return out


def _tp_text(launch: Launch) -> str:
    inst = launch.inst
    if inst.adp > 1:
        return f"attention TP {inst.attn_tp} ({launch.flag['tp']} {launch.degrees.get(launch.flag['tp'], inst.tp)} " \
               f"over {inst.adp} attention data-parallel groups)"
    return f"{launch.flag['tp']} {inst.tp}"


def _kv_replication(spec: ModelSpec, launch: Launch) -> list[str]:
    at, kv = launch.inst.attn_tp, spec.num_key_value_heads
    if spec.is_mla or at <= kv or at % kv:
        return []
    return [f"attention TP {at} > num_key_value_heads {kv}: vLLM and SGLang replicate each KV head on "
            f"{at // kv} ranks (vLLM QKVParallelLinear num_kv_head_replicas), so the KV cache per GPU "
            f"stops shrinking past TP {kv}: {at} ranks hold what {kv} would"]


def alternatives(spec: ModelSpec, hw: ClusterSpec, gpus: int, launch: Launch, spell) -> tuple[list[str], list[str]]:
    """(layouts that fit, each in the engine's flags with its KV pool; layouts that divide the model
    but leave no room for one sequence of max_model_len): per TP degree (inside one scale-up
    domain) the fewest pipeline stages that fit on up to `gpus` GPUs, the rest of them as replicas."""
    fits, short = [], []
    for tp in range(1, min(gpus, hw.scaleup_domain_gpus) + 1):
        for pp in range(1, gpus // tp + 1):
            trial = _with(spec, hw, launch, sv.Instance(tp=tp, pp=pp))
            if _shape_findings(spec, trial):
                break
            mem = _memory(spec, hw, trial)
            text = spell(tp, pp, gpus // (tp * pp))
            if mem.kv_cache > 0 and sv.pool_context(mem, spec) >= launch.max_model_len:
                fits.append(f"{text} (KV pool {mem.kv_cache / GIB:.1f} GiB per GPU)")
                break
            if pp == 1:
                short.append(f"{text} (KV pool {max(mem.kv_cache, 0) / GIB:.1f} GiB per GPU)")
    return fits, short


def _more_gpus(spec: ModelSpec, hw: ClusterSpec, room: int, launch: Launch, spell) -> str | None:
    """The smallest tensor-parallel layout wider than `room` GPUs (inside one scale-up domain) that
    divides the model and holds one sequence of max_model_len, in the engine's flags, or None."""
    for tp in range(room + 1, hw.scaleup_domain_gpus + 1):
        trial = _with(spec, hw, launch, sv.Instance(tp=tp))
        if _shape_findings(spec, trial):
            continue
        mem = _memory(spec, hw, trial)
        if mem.kv_cache > 0 and sv.pool_context(mem, spec) >= launch.max_model_len:
            return f"{spell(tp, 1, 1)} on {tp} GPUs (KV pool {mem.kv_cache / GIB:.1f} GiB per GPU)"
    return None


def _with(spec: ModelSpec, hw: ClusterSpec, launch: Launch, inst: sv.Instance) -> Launch:
    """The launch as one instance of another shape; an SGLang command that does not set mem_fraction_static gets
    SGLang's default for that shape, as serve-plan costs it (`planner.frameworks.sglang.plan_mem_fraction`), not
    the default of the command's own shape."""
    fraction = launch.fraction
    if launch.engine == "sglang" and not launch.fraction_given:
        from planner.frameworks import sglang

        fraction = sglang.plan_mem_fraction(hw.gpu.memory_gib * 1024, tp=inst.tp, pp=inst.pp, attn_dp=inst.adp,
                                            ep=inst.ep, mla=spec.is_mla,
                                            max_num_batched_tokens=launch.max_num_batched_tokens * launch.inst.adp)
    return replace(launch, inst=inst, replicas=1, fraction=fraction)


def _memory(spec: ModelSpec, hw: ClusterSpec, launch: Launch) -> sv.ServingMemory:
    return _pool_set_by_flag(spec, launch, _budget_memory(spec, hw.gpu.memory_bytes, launch, hw.gpu.name))


def _budget_memory(spec: ModelSpec, capacity: int, launch: Launch, gpu_name: str) -> sv.ServingMemory:
    """Memory under the engine's budget rule alone (no flag setting the pool); `gpu_name` picks vLLM's
    default max_num_seqs (`cost.serving.serving_memory`)."""
    return sv.serving_memory(spec, launch.inst, capacity=capacity, weight_format=launch.weight_format,
                             kv_dtype=launch.kv_dtype, engine=launch.engine, fraction=launch.fraction,
                             max_num_batched_tokens=launch.max_num_batched_tokens, gpu_name=gpu_name)


def _pool_set_by_flag(spec: ModelSpec, launch: Launch, mem: sv.ServingMemory) -> sv.ServingMemory:
    """The KV pool as a flag sets it: `Launch.kv_pool_bytes` replaces the budget rule's pool (vLLM 0.33.0
    `vllm/v1/worker/gpu_worker.py` determine_available_memory returns kv_cache_memory_bytes as it is, 'This does
    not respect the gpu_memory_utilization config'; `vllm/config/cache.py` CacheConfig.kv_cache_memory_bytes:
    'Size of KV Cache per GPU in bytes'); `Launch.kv_tokens_cap` caps each pool's tokens (SGLang 0.5.23
    `srt/mem_cache/kv_cache_configurator.py` _apply_token_constraints: min(profiled capacity, max_total_tokens),
    per scheduler, i.e. per attention-DP group)."""
    pool = mem.kv_cache if launch.kv_pool_bytes is None else launch.kv_pool_bytes
    if launch.kv_tokens_cap is not None and mem.kv_bytes_per_token:
        window = mem.kv_window_bytes if spec.sliding_window else 0
        pool = min(pool, int(launch.kv_tokens_cap * mem.kv_bytes_per_token + window))
    if pool == mem.kv_cache:
        return mem
    tokens = int(max(pool, 0) // mem.kv_bytes_per_token) * launch.inst.adp if mem.kv_bytes_per_token else 0
    return replace(mem, kv_cache=pool, kv_tokens=tokens)


def fitted(spec: ModelSpec, hw: ClusterSpec, launch: Launch) -> tuple[Launch, list[str]]:
    """(the launch with max_model_len auto resolved, a note saying what it became): vLLM 0.33.0 auto / -1
    'Automatically choose the maximum model length that fits in GPU memory. This will use the model's maximum
    context length if it fits, otherwise it will find the largest length that can be accommodated'
    (`vllm/config/model.py` ModelConfig.max_model_len; `_get_and_verify_max_len` takes the derived length
    first)."""
    if not launch.fit_max_model_len:
        return launch, []
    mem = _memory(spec, hw, launch)
    longest = min(sv.pool_context(mem, spec), spec.max_position_embeddings)
    if mem.kv_cache <= 0 or longest <= 0:
        return launch, []   # no pool: memory_exceeds says so
    flag = launch.flag["max_model_len"]
    why = ("the model's max_position_embeddings fits" if longest == spec.max_position_embeddings
           else f"the longest sequence the {mem.kv_cache / GIB:.2f} GiB KV pool per GPU holds")
    return (replace(launch, max_model_len=longest, fit_max_model_len=False),
            [f"{flag} auto: {launch.engine} fits it to {longest:,} tokens ({why})"])


def _memory_findings(spec: ModelSpec, hw: ClusterSpec, launch: Launch, mem: sv.ServingMemory,
                     relief: str) -> list[Violation]:
    f, out = launch.flag, []
    cap = mem.capacity / GIB
    budget = launch.fraction * cap
    longest = sv.pool_context(mem, spec)
    terms = (f"weights {mem.weights / GIB:.2f} GiB + activation peak {mem.activations / GIB:.2f} GiB "
             f"(--{f['max_num_batched_tokens'].lstrip('-')} {launch.max_num_batched_tokens}) + reserve "
             f"{mem.reserve / GIB:.2f} GiB")
    if launch.engine == "sglang":
        head = (1 - launch.fraction) * cap
        if mem.activations + mem.reserve > (1 - launch.fraction) * mem.capacity:
            out.append(Violation(
                rule="memory_headroom",
                message=f"activation peak {mem.activations / GIB:.2f} GiB + reserve {mem.reserve / GIB:.2f} GiB "
                        f"exceed the {head:.2f} GiB SGLang leaves outside {f['fraction']} {launch.fraction:g} "
                        f"(1 - {launch.fraction:g} of {cap:.2f} GiB)",
                fix=f"{f['fraction']} {max(0.05, 1 - (mem.activations + mem.reserve) / mem.capacity - 0.01):.2f} "
                    f"or a smaller {f['max_num_batched_tokens']}"))
        default = ("" if launch.fraction_given else
                   f", SGLang's own default for this command: it does not set it{launch.fraction_why}")
        pool_text = (f"{f['fraction']} {launch.fraction:g} x {cap:.2f} GiB = {budget:.2f} GiB (SGLang: the "
                     f"static pool of weights and KV is a fraction of TOTAL memory{default}) - weights "
                     f"{mem.weights / GIB:.2f} GiB - non-torch {sv.NON_TORCH_BYTES / GIB:.2f} GiB")
    else:
        pool_text = (f"{f['fraction']} {launch.fraction:g} x {cap:.2f} GiB = {budget:.2f} GiB (a fraction of "
                     f"TOTAL GPU memory, not of what is free) - {terms}")
    set_text, set_findings = _pool_flag_text(spec, launch, mem, hw.gpu.name)
    pool_text, out = set_text or pool_text, out + set_findings
    if mem.kv_cache <= 0:
        out.append(Violation(rule="memory_exceeds",
                             message=f"no KV pool: {pool_text} = {mem.kv_cache / GIB:.2f} GiB per GPU", fix=relief))
    elif longest < launch.max_model_len:
        need = mem.sequence_bytes(launch.max_model_len, spec.sliding_window)
        out.append(Violation(
            rule="kv_pool_too_small",
            message=f"one sequence of {f['max_model_len']} {launch.max_model_len} needs {need / GIB:.2f} GiB of KV "
                    f"cache per GPU ({mem.kv_bytes_per_token:,.0f} B/token); the KV pool is {pool_text} = "
                    f"{mem.kv_cache / GIB:.2f} GiB, which holds {longest:,} tokens",
            fix=f"{f['max_model_len']} {longest}" + (f"; or {relief}" if relief else "")))
    return out


def _concurrency_note(spec: ModelSpec, launch: Launch, mem: sv.ServingMemory) -> list[str]:
    """A note (not a finding) when the KV pool holds fewer than the engine's cap of running sequences at full
    max-model-len. Both engines allocate KV as a sequence grows and their schedulers admit a request only while
    the pool has room (the rest wait, or are preempted), so a cap above the full-length count is the normal
    setting -- vLLM's own defaults (max-model-len = the model's context, 256+ sequences) are such a setting, and
    vLLM reports the count at start-up as information ('GPU KV cache size: N tokens, Maximum concurrency for L
    tokens per request: X.XXx', logger.info_once in `vllm/v1/core/kv_cache_utils.py` update_kv_cache_capacity).
    It was a warning (rule kv_pool_concurrency), which fired on every default launch and, once serve-plan's
    scripts give max-model-len the requests' length rounded up (`planner.emit.engine_launch.served_length`), on
    those too."""
    f = launch.flag
    if launch.max_num_seqs is None or mem.kv_cache <= 0 or sv.pool_context(mem, spec) < launch.max_model_len:
        return []
    fit = sv.max_concurrency(mem, spec, launch.inst, launch.max_model_len)
    if fit >= launch.max_num_seqs:
        return []
    return [f"{f['max_num_seqs']} {launch.max_num_seqs}: the {mem.kv_cache / GIB:.2f} GiB KV pool per GPU holds "
            f"{fit:,} of {counted(launch.max_num_seqs, 'sequence')} at the full {f['max_model_len']} "
            f"{launch.max_model_len:,} tokens; the engine allocates KV as a sequence grows and admits requests while "
            f"the pool has room, so shorter requests run more at once and the rest wait (if requests do reach "
            f"{launch.max_model_len:,} tokens: {f['max_num_seqs']} {max(fit, 1)} states what runs, or more GPUs "
            f"per instance hold more)"]


def _pool_source(spec: ModelSpec, launch: Launch, mem: sv.ServingMemory, gpu_name: str) -> str | None:
    """The flag that set the KV pool, as the command gives it (None: the budget rule did)."""
    if mem.kv_cache == _budget_memory(spec, mem.capacity, launch, gpu_name).kv_cache:
        return None
    flag = launch.flag["kv_pool_bytes" if launch.kv_pool_bytes is not None else "kv_tokens_cap"]
    value = launch.kv_pool_bytes if launch.kv_pool_bytes is not None else launch.kv_tokens_cap
    return f"{flag} {value:,}"


def _pool_flag_text(spec: ModelSpec, launch: Launch, mem: sv.ServingMemory,
                    gpu_name: str) -> tuple[str | None, list[Violation]]:
    """(how a flag set the pool, for the messages, or None; rule memory_exceeds when vLLM's set pool does not fit
    beside the weights, activation peak and reserve: the allocation fails at start-up)."""
    f = launch.flag
    if launch.kv_pool_bytes is not None:
        room = mem.capacity - mem.weights - mem.activations - mem.reserve
        out = [] if launch.kv_pool_bytes <= room else [Violation(
            rule="memory_exceeds",
            message=f"{f['kv_pool_bytes']} {launch.kv_pool_bytes:,} B ({launch.kv_pool_bytes / GIB:.2f} GiB) of KV cache "
                    f"per GPU, but {mem.capacity / GIB:.2f} GiB - weights {mem.weights / GIB:.2f} - activation peak "
                    f"{mem.activations / GIB:.2f} - reserve {mem.reserve / GIB:.2f} leaves {room / GIB:.2f} GiB",
            fix=f"{f['kv_pool_bytes']} {max(int(room), 0) // 2**20}M or less")]
        return (f"{f['kv_pool_bytes']} {launch.kv_pool_bytes / GIB:.2f} GiB per GPU (set outright: "
                f"{launch.engine} ignores {f['fraction']} then)"), out
    if launch.kv_tokens_cap is not None:
        budget = _budget_memory(spec, mem.capacity, launch, gpu_name).kv_cache
        if budget > mem.kv_cache:
            return (f"{f['kv_tokens_cap']} {launch.kv_tokens_cap:,} tokens x {mem.kv_bytes_per_token:,.0f} B/token "
                    f"(the cap binds: {f['fraction']} {launch.fraction:g} would give {budget / GIB:.2f} GiB)"), []
    return None, []


def _format_findings(spec: ModelSpec, hw: ClusterSpec, launch: Launch, quant_flag: str) -> list[Violation]:
    """Weight format vs the GPU: fp8 / int / fp4 kernels need Ampere or later (no bf16 tensor cores:
    pre-Ampere); without native fp8 / fp4 the engines run weight-only kernels (Marlin), GEMMs in bf16.
    A format that is the checkpoint's own is not undone by removing the flag: the fix names a bf16 checkpoint."""
    fmt, peaks = launch.weight_format, hw.gpu.peak_tflops
    if fmt == "bf16":
        return []
    if "bf16" not in peaks:
        own = fmt == spec.weight_format
        return [Violation(rule="quantization_unsupported",
                          message=f"{'the checkpoint' if own else quant_flag} ({fmt} weights) needs Ampere or later; "
                                  f"{hw.gpu.name} has no bf16 tensor cores, and vLLM's and SGLang's {fmt} kernels "
                                  f"(native or Marlin weight-only) need compute capability 8.0",
                          fix=f"a bf16 checkpoint of {spec.name}" if own else f"remove {quant_flag}")]
    native = sv.native_dtype(fmt)
    if native and native not in peaks:
        return [Violation(rule="quantization_weight_only", severity="warning",
                          message=f"{hw.gpu.name} has no {native} tensor cores: {launch.engine} runs {fmt} as "
                                  f"weight-only (Marlin) kernels, GEMMs in bf16, memory as {fmt}", fix="")]
    return []


def evaluate(file: str, kind: str, spec: ModelSpec, hw: ClusterSpec, gpus: int, launches: list[Launch],
             spell, notes: list[str] | None = None, given: bool = True) -> dict:
    """Check the launches of one file: {file, kind, verdict, model, cluster, gpus, launches [{line,
    engine, role, parallelism, world, recomputed}], violations [{rule, severity, message, fix, line}],
    warnings}.

    Args:
        gpus: GPUs the file may use (check --gpus, else the cluster's count).
        spell: (tp, pp, replicas) -> that layout in the engine's flags (the fixes' spelling).
        given: whether `gpus` was given (check --gpus, the cluster) rather than counted from the
            launches' CUDA_VISIBLE_DEVICES (then each launch is checked against its own list only).
    """
    violations: list[tuple[int, Violation]] = []
    rows, warnings = [], list(notes or [])
    for launch in launches:
        launch, note = fitted(spec, hw, launch)
        warnings += note
        room = min(gpus, launch.visible_gpus or gpus)
        shape = _shape_findings(spec, launch)
        if shape and not shape[0].fix:
            fits, short = alternatives(spec, hw, room, launch, spell)
            fix = "any of: " + "; ".join(fits[:3]) if fits else f"no layout of {room} GPUs fits"
            if short:
                fix += "; divisible but short of memory: " + "; ".join(short[:2])
            wider = _more_gpus(spec, hw, room, launch, spell)
            if wider:
                fix += f"; with more GPUs: {wider}"
            shape[0] = replace(shape[0], fix=fix)
        found = [*launch.findings, *_world_findings(hw, launch), *shape, *_length_findings(spec, launch),
                 *_format_findings(spec, hw, launch, launch.flag["quantization"])]
        row = {"line": launch.line, "engine": launch.engine, "role": launch.role,
               "parallelism": {"tp": launch.inst.tp, "pp": launch.inst.pp, "ep": launch.inst.ep,
                               "dp": launch.inst.adp, "replicas": launch.replicas,
                               **({"redundant_experts": launch.inst.redundant} if launch.inst.redundant else {}),
                               **({"dense_dp": True} if launch.inst.dense_dp else {})},
               "world": launch.world, "nnodes": launch.nnodes, "node_rank": launch.node_rank, "recomputed": {}}
        if not shape:
            mem = _memory(spec, hw, launch)
            found += _memory_findings(spec, hw, launch, mem, _relief(spec, hw, room, launch, mem, spell))
            row["recomputed"] = {
                "memory_bytes": {"weights": mem.weights, "activations": mem.activations, "kv_cache": mem.kv_cache,
                                 "reserve": mem.reserve, "capacity": mem.capacity},
                "budget_fraction": launch.fraction, "kv_pool_set_by": _pool_source(spec, launch, mem, hw.gpu.name),
                "kv_bytes_per_token": mem.kv_bytes_per_token,
                "kv_tokens": mem.kv_tokens,
                "longest_context": sv.longest_context(mem, spec, launch.max_model_len, launch.engine),
                "longest_context_bound": sv.context_bound(mem, spec, launch.max_model_len, launch.engine),
                "max_model_len": launch.max_model_len,
                "max_concurrency": sv.max_concurrency(mem, spec, launch.inst, launch.max_model_len),
                "vocab_rows": sv.vocab_rows(spec, launch.inst.tp)}
            warnings += _kv_replication(spec, launch) + _concurrency_note(spec, launch, mem)
            if spec.tie_word_embeddings and launch.inst.pp > 1:
                copy = spec.padded_vocab_size * spec.embedding_width * 2
                warnings.append(f"tie_word_embeddings with {launch.flag['pp']} {launch.inst.pp}: the last stage "
                                f"holds its own copy of the embedding, {copy:,} B (vocab {spec.padded_vocab_size:,} x "
                                f"hidden {spec.embedding_width:,} x 2 B), counted in its weights")
        seen = {(v.rule, v.message) for _, v in violations}
        violations += [(launch.line, v) for v in found if (v.rule, v.message) not in seen]
        rows.append(row)
    rows = _instance_rows(launches, rows)
    used = spanned_gpus(launches, hw.gpus_per_node)
    if given and used > gpus:
        terms = [f"{node_gpus(l)}" + (f" x {l.copies} nodes" if l.copies > 1 else "") for l in launches]
        capped = ", one node-rank branch at most its nodes' GPUs" if used < spanned_gpus(launches) else ""
        violations.append((launches[0].line, Violation(
            rule="world_size",
            message=f"the launches need {used} GPUs ({' + '.join(terms)}; a command of an instance over several "
                    f"nodes counts the GPUs of its own node{capped}); "
                    f"{gpus} are given", fix=f"check --gpus {used}, or fewer replicas")))
    return {"file": file, "kind": kind, "verdict": "fail" if any(v.severity == "error" for _, v in violations)
            else "pass", "model": spec.name, "cluster": hw.name, "gpus": gpus, "launches": rows,
            "violations": [{"rule": v.rule, "severity": v.severity, "message": v.message, "fix": v.fix,
                            "line": line} for line, v in violations],
            "warnings": list(dict.fromkeys(warnings))}


def _instance_rows(launches: list[Launch], rows: list[dict]) -> list[dict]:
    """One row per engine instance (`one_instance`): the commands of one instance over several nodes are one row,
    its first command's, with `lines` and `node_ranks` [the commands' lines and node ranks]."""
    index = {id(launch): row for launch, row in zip(launches, rows)}
    out = []
    for group in one_instance(launches):
        row = dict(index[id(group[0])])
        if len(group) > 1:
            row.update(lines=[l.line for l in group], node_ranks=[l.node_rank for l in group])
        out.append(row)
    return sorted(out, key=lambda r: r["line"])


def _length_findings(spec: ModelSpec, launch: Launch) -> list[Violation]:
    """A max_model_len past the context length the engine derives from the model's config
    (`engine_context_length`: RoPE scaling factors applied as each engine does): both engines refuse it
    at start-up (vLLM 0.33.0 `vllm/config/model.py` _get_and_verify_max_len, unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; SGLang 0.5.23 `srt/configs/model_config.py`, unless
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)."""
    flag, most = launch.flag["max_model_len"], engine_context_length(spec, launch.engine)
    if launch.max_model_len <= most:
        return []
    return [Violation(rule="context_exceeds_model",
                      message=f"{flag} {launch.max_model_len} exceeds {spec.name}'s context length under "
                              f"{launch.engine} ({context_length_words(spec, launch.engine)}): "
                              f"{launch.engine} refuses it at start-up", fix=f"{flag} {most}")]


def _relief(spec: ModelSpec, hw: ClusterSpec, room: int, launch: Launch, mem: sv.ServingMemory, spell) -> str:
    """What makes one sequence of max_model_len fit: the budget fraction it needs (when <= 0.98 and,
    for SGLang, the headroom still holds the activations), or a layout of the GPUs that fits."""
    need = mem.sequence_bytes(launch.max_model_len, spec.sliding_window)
    if launch.kv_pool_bytes is not None:  # the flag sets the pool: it is the knob
        return f"{launch.flag['kv_pool_bytes']} {math.ceil(need / 2**20)}M or more"
    static = mem.weights + (sv.NON_TORCH_BYTES if launch.engine == "sglang" else mem.activations + mem.reserve)
    wanted = math.ceil((static + need) / mem.capacity * 100) / 100
    parts = []
    headroom_ok = launch.engine != "sglang" or (1 - wanted) * mem.capacity >= mem.activations + mem.reserve
    if launch.fraction < wanted <= 0.98 and headroom_ok:
        parts.append(f"{launch.flag['fraction']} {wanted:.2f}")
    return "; ".join(parts + _smallest(spec, hw, room, launch, spell)) or f"more GPUs than {room} per instance"


def _smallest(spec: ModelSpec, hw: ClusterSpec, room: int, launch: Launch, spell) -> list[str]:
    """The layouts of the smallest instance serve-plan would run for this launch (`serve.smallest_instances`: its
    shapes and its memory model, SGLang's own mem_fraction_static default for each shape unless the command sets
    the fraction), in the engine's flags, at most two, fewest pipeline stages first (serve-plan prices each stage's
    hop per decode step, `serve._hop_s`), as many replicas as `room` GPUs hold where one fits a node (else one
    launch per instance), with its GPU count where it needs more than `room`; shapes the fix can spell (tp x pp, no attention data parallelism; expert parallelism on
    where the command turns it on, since its flags make ep follow tp)."""
    from planner import serve

    req = serve.ServeRequest(
        gpus=room, input_len=max(launch.max_model_len - 1, 1), output_len=1, max_model_len=launch.max_model_len,
        weight_dtype=launch.weight_format, kv_dtype=launch.kv_dtype, engine=launch.engine,
        mem_fraction=launch.fraction if launch.fraction_given else None,
        max_num_batched_tokens=launch.max_num_batched_tokens * (launch.inst.adp if launch.engine == "sglang" else 1))
    ep_on = launch.inst.ep > 1
    found = serve.smallest_instances(spec, hw, req, keep=lambda i: i.adp == 1 and (i.ep > 1) == (ep_on and i.tp > 1))
    out = []
    for inst, mem in sorted(found, key=lambda f: f[0].pp)[:2]:  # fewest pipeline stages first, then the larger pool
        nodes = -(-inst.gpus // hw.gpus_per_node)
        if nodes > 1:  # replicas do not span nodes (SGLang refuses them): one launch per instance
            text = f"{spell(inst.tp, inst.pp, 1)} on {inst.gpus} GPUs ({nodes} nodes)"
        else:
            text = spell(inst.tp, inst.pp, max(1, room // inst.gpus))
            text += f" on {inst.gpus} GPUs" if inst.gpus > room else ""
        fraction = ("" if launch.fraction_given or launch.engine != "sglang"
                    else f", {launch.flag['fraction']} {mem.budget_fraction:g}: SGLang's default for it")
        out.append(f"{text} (KV pool {mem.kv_cache / GIB:.1f} GiB per GPU{fraction})")
    return out


def _world_findings(hw: ClusterSpec, launch: Launch) -> list[Violation]:
    """The ranks a launch starts against the GPUs it sees and the nodes it spans."""
    out, f = [], launch.flag
    product = " x ".join(f"{k} {v}" for k, v in launch.degrees.items()) or "1"
    per_node = launch.here
    if launch.visible_gpus is not None and per_node is not None and per_node > launch.visible_gpus:
        where = "" if launch.nnodes == 1 else f" on each of its {launch.nnodes} nodes ({f['nnodes']} {launch.nnodes})"
        out.append(Violation(
            rule="world_size",
            message=f"the command starts {per_node} ranks{where} ({product}) but {launch.visible_from} gives it "
                    f"{counted(launch.visible_gpus, 'GPU')}",
            fix=f"{'give' if launch.visible_from.startswith(CONTAINER_GPUS) else 'list'} {per_node} GPUs in "
                f"{re.split('[ =]', launch.visible_from)[0]}"
                + (f", or degrees whose product is {launch.visible_gpus * launch.nnodes}" if launch.visible_gpus else "")))
    if launch.node_rank >= launch.nnodes:
        out.append(Violation(rule="node_rank",
                             message=f"{f['node_rank']} {launch.node_rank} with {f['nnodes']} {launch.nnodes}: "
                                     f"node ranks run from 0 to {launch.nnodes - 1} ({launch.engine} refuses it)",
                             fix=f"{f['node_rank']} 0 to {launch.nnodes - 1}, one per node"))
    if launch.nnodes > 1 and per_node is None:
        out.append(Violation(rule="world_size",
                             message=f"{launch.world} ranks ({product}) do not divide over {launch.flag['nnodes']} "
                                     f"{launch.nnodes}", fix=f"degrees whose product is a multiple of {launch.nnodes}"))
    elif per_node is not None and per_node > hw.gpus_per_node:
        out.append(Violation(
            rule="world_size",
            message=f"{launch.world} ranks ({product}) over {counted(launch.nnodes, 'node')} need {per_node} GPUs per "
                    f"node; "
                    f"{hw.name} has {hw.gpus_per_node}",
            fix=launch.nodes_fix or f"{launch.flag['nnodes']} {-(-launch.world // hw.gpus_per_node)}"))
    return out


def spell_layout(flag: dict[str, str], tp: int, pp: int, replicas: int) -> str:
    """tp x pp with `replicas` copies in an engine's flags (its table `flag`: tp, pp, dp)."""
    out = f"{flag['tp']} {tp}"
    if pp > 1:
        out += f" {flag['pp']} {pp}"
    if replicas > 1:
        out += f" {flag['dp']} {replicas}"
    return out
