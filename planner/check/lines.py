"""Where a configuration file sets each flag or key: {spelling: 1-based line}, for annotations
(`planner check --format github` points at the line of the flag or key a rule names).

One indexer per syntax, reading the text only (no values): command-line flags (a Megatron-LM
script or arguments file, a torchtitan command line), TOML tables and keys, YAML / JSON mappings.
Every indexer records a key both dotted from the top (`section.key`) and by its own name
(`key`); a name set more than once keeps the line argparse / the parser keeps: the last for
flags, the first for mapping keys (a mapping key given twice is bad input before this runs).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from planner.check import shell
from planner.placement.rules import Violation

_FLAG = re.compile(r"(?<![\w.-])(--[A-Za-z][\w.-]*)")


def flag_lines(text: str) -> dict[str, int]:
    """{`--flag`: line} of every flag outside a `#` comment; the last occurrence wins (argparse)."""
    out: dict[str, int] = {}
    for flag, numbers in flag_occurrences(text).items():
        out[flag] = out[flag.lstrip("-")] = numbers[-1]
    return out


def flag_occurrences(text: str) -> dict[str, list[int]]:
    """{`--flag`: [line of each occurrence, in order]} of every flag written outside a `#` comment
    (`shell.uncommented`); a line holding a flag twice is listed twice."""
    out: dict[str, list[int]] = {}
    for number, code in enumerate(shell.uncommented(text.splitlines()), 1):
        for match in _FLAG.finditer(code):
            out.setdefault(match.group(1).split("=", 1)[0], []).append(number)
    return out


_TABLE = re.compile(r"^\s*\[\[?\s*([\w.\"' -]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([\w.\"-]+)\s*=")


def toml_lines(text: str) -> dict[str, int]:
    """{`section.key`, `key`, `section`: line} of a TOML file's tables and top-level keys of each."""
    out: dict[str, int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        table = _TABLE.match(line)
        if table:
            section = table.group(1).replace('"', "").replace("'", "")
            out.setdefault(section, number)
            continue
        key = _KEY.match(line)
        if key:
            name = key.group(1).replace('"', "")
            out.setdefault(f"{section}.{name}" if section else name, number)
            out.setdefault(name.rsplit(".", 1)[-1], number)
    return out


def mapping_lines(text: str) -> dict[str, int]:
    """{dotted key path, key name: line} of a YAML or JSON document's mapping keys ({} when it
    does not parse)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return {}
    out: dict[str, int] = {}
    stack = [("", root)]
    while stack:
        prefix, node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value)
                path = f"{prefix}.{name}" if prefix else name
                out.setdefault(path, key.start_mark.line + 1)
                out.setdefault(name, key.start_mark.line + 1)
                stack.append((path, value))
        elif isinstance(node, yaml.SequenceNode):
            stack += [(prefix, item) for item in node.value]
    return out


def locate(lines: dict[str, int], *texts: str, fallback: tuple[str, ...] = ()) -> int | None:
    """The line of the first spelling of `lines` that `texts` name (earliest in the text; a longer
    spelling wins at one position), else of the first of `fallback` the file sets, else None."""
    best: tuple[int, int, int] | None = None
    for order, text in enumerate(texts):
        for spelling, number in lines.items():
            for match in re.finditer(rf"(?<![\w.-]){re.escape(spelling)}(?![\w-])", text):
                rank = (order, match.start(), -len(spelling))
                if best is None or rank < best[:3]:
                    best = (*rank, number)
                break
    if best is not None:
        return best[3]
    return next((lines[name] for name in fallback if name in lines), None)


def line_endings(text: str, file: str) -> list[Violation]:
    """The error `crlf_line_endings` when the file has CRLF (Windows) line endings, at the first
    line whose backslash continuation they break, else at the first CRLF line: bash reads a
    backslash before a carriage return as an escaped carriage return, so the command ends on that
    line and the next line runs as a command of its own ("--flag: command not found"); on any
    line the carriage return stays in the last word (a switch `--flag\\r`, which an argument
    parser rejects), and `#!/bin/bash\\r` names no interpreter. Source: bash(1) "QUOTING" (a
    backslash escapes the next character; only backslash-newline is a line continuation)."""
    lines = text.split("\n")
    crlf = [n for n, line in enumerate(lines, 1) if line.endswith("\r")]
    if not crlf:
        return []
    broken = [n for n in crlf if lines[n - 1].endswith("\\\r")]
    at = broken[0] if broken else crlf[0]
    what = (f"line {at} ends in a backslash and a carriage return (CRLF line endings): bash reads "
            f"them as an escaped carriage return, not a line continuation, so the command ends at "
            f"line {at} and line {at + 1} runs as a command of its own; the launch fails"
            if broken else
            f"the file has CRLF line endings (line {at} first): bash keeps the carriage return in "
            f"the last word of each line (e.g. a switch written `--flag\\r`, which the framework's "
            f"argument parser rejects) and a `#!` line naming `bash\\r` names no interpreter")
    return [Violation(rule="crlf_line_endings", message=what, line=at,
                      fix=f"convert the file to LF line endings: dos2unix {file} "
                          f"(or sed -i 's/\\r$//' {file})")]


def shell_layout(text: str, file: str) -> list[Violation]:
    """Every way the script's lines split into commands other than its layout shows, as bash splits them:
    CRLF line endings (`line_endings`), a broken backslash continuation (`continuation_breaks`), a UTF-8
    byte-order mark (`byte_order_mark`). Shared by the readers of shell scripts (Megatron-LM, torchtitan command
    lines, vLLM / SGLang launches)."""
    return line_endings(text, file) + continuation_breaks(text, file) + byte_order_mark(file)


_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_ARRAY = re.compile(r"^\s*(export\s+)?[A-Za-z_]\w*=\(")
_PATTERN = re.compile(r"^\s*[^\s()]*\)")
"""A `case` pattern (`--tp)`, `-h|--help)`): a script's own option parsing, not a command."""


def continuation_breaks(text: str, file: str) -> list[Violation]:
    """The error `line_continuation` for each line where bash ends a command that the script's layout continues
    (`shell.line_ends`): a backslash followed by a space or tab (bash reads an escaped blank, a word ' ' of the
    command, and the newline ends it), and a line that begins with a flag (`-...`) while the line before does not
    continue the command -- a comment line (its backslash is part of the comment) or a blank line inside the
    continued command, or a line without its backslash: bash runs the flag line as a command of its own
    ("--flag: command not found") and starts the launch without the flags from there on. Lines inside a bash
    array `NAME=( ... )` (where newlines separate words), `case` patterns (`--tp)`) and here-documents are not
    commands, nor are the
    lines of an arguments file (flags line after line, no command: Megatron-LM's `--flag value` files).
    Source: bash(1) "QUOTING" (only backslash-newline is a line continuation), "COMMENTS", "Arrays"."""
    lines = text.replace("\r\n", "\n").split("\n")
    ends = shell.line_ends(lines)
    out: dict[int, Violation] = {}
    for k in _flag_commands(lines, ends, out, file):
        if ends[k - 1] != shell.ESCAPED_BLANK:
            cause = _cause(lines, ends, k)
            if cause is not None:
                out.setdefault(cause[0], _break(cause[0], cause[1], cause[2], file, k + 1))
    return [out[n] for n in sorted(out)]


def _flag_commands(lines: list[str], ends: list[str], out: dict[int, Violation] | None = None,
                   file: str = "") -> list[int]:
    """The 0-based lines that begin with a flag (`-...`) while the line before does not continue the command
    (`continuation_breaks`), outside arrays, here-documents and `case` patterns; with `out`, the escaped-blank
    breaks (`\\ ` at a line's end) are added to it as errors."""
    found, depth, heredoc = [], 0, None
    for k, (line, end, code) in enumerate(zip(lines, ends, shell.uncommented(lines))):
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        opens = _HEREDOC.search(code)
        if depth or _ARRAY.match(code):
            depth += code.count("(") - code.count(")")
            depth = max(depth, 0)
            continue
        if end == shell.ESCAPED_BLANK and out is not None:
            out[k + 1] = _break(k + 1, f"line {k + 1} ends in a backslash followed by a space: bash reads `\\ ` as an "
                                       f"escaped space (an argument ' ' of the command), not a line continuation, so "
                                       f"the command ends at line {k + 1}", "delete the spaces after the backslash",
                                file, k + 1)
        if (line.lstrip().startswith("-") and not _PATTERN.match(line) and k > 0
                and ends[k - 1] not in (shell.CONTINUE, shell.QUOTE)):
            found.append(k)
        if opens:
            heredoc = opens.group(1)
    return found


def as_bash_runs(text: str) -> str:
    """`text` with each command that begins with a flag after a broken continuation (`continuation_breaks`: bash
    runs it as a command of its own, '--flag: command not found', and the launch goes without its words) blanked,
    its lines kept empty so that line numbers hold: what the launch reads as bash runs it. An arguments file
    (flags line after line, no command before them) is kept whole."""
    lines = text.split("\n")
    ends = shell.line_ends([line.rstrip("\r") for line in lines])
    for k in _flag_commands([line.rstrip("\r") for line in lines], ends):
        if ends[k - 1] != shell.ESCAPED_BLANK and _cause(lines, ends, k) is None:
            continue
        j = k
        while True:
            lines[j] = ""
            if ends[j] not in (shell.CONTINUE, shell.QUOTE) or j + 1 >= len(lines):
                break
            j += 1
    return "\n".join(lines)


def _cause(lines: list[str], ends: list[str], k: int) -> tuple[int, str, str] | None:
    """(line, what, fix) of why the flag line `k` (0-based) starts a command of its own: the nearest comment or
    blank line after a continued line, else the line before without a backslash."""
    j = k - 1
    while j >= 0 and (not lines[j].strip() or lines[j].lstrip().startswith("#")):
        j -= 1
    start = j
    while start > 0 and ends[start - 1] in (shell.CONTINUE, shell.QUOTE):
        start -= 1
    if j < 0 or lines[start].lstrip().startswith("-"):
        return None  # the file's first line, or flags line after line: an arguments file, not a script
    if j == k - 1:
        return (k, f"line {k + 1} begins with the flag {lines[k].split()[0]}, but line {k} does not end in a "
                   f"backslash: bash ends the command at line {k}", f"end line {k} with a backslash")
    if ends[j] != shell.CONTINUE:
        gap = k  # a comment / blank block between two commands: the flag line still starts a command
        return (gap, f"line {k + 1} begins with the flag {lines[k].split()[0]}, but the line before does not "
                     f"continue a command: bash runs it as a command of its own",
                f"end the command's last line with a backslash and move the comment or blank line out of it")
    first = j + 2
    what = "blank" if not lines[j + 1].strip() else "a comment (a backslash inside a comment does not continue it)"
    return (first, f"line {first} is {what} inside the command continued from line {j + 1}: bash ends the "
                   f"command at line {first}", f"delete line {first} or move it above the command")


def _break(at: int, what: str, fix: str, file: str, flag_line: int) -> Violation:
    """A `line_continuation` error at line `at`, saying what bash runs."""
    return Violation(rule="line_continuation", line=at,
                     message=f"{what}; line {flag_line + (0 if flag_line > at else 1)} runs as a command of its own "
                             f"and the launch starts without the arguments from there on",
                     fix=f"{fix} (bash continues a command only with a backslash right before the newline; "
                         f"{file})")


def byte_order_mark(file: str) -> list[Violation]:
    """The error `byte_order_mark` when the script starts with a UTF-8 byte-order mark (EF BB BF, which the
    reader's UTF-8 decoding drops): bash reads the three bytes as part of the first word (`\\xef\\xbb\\xbfvllm:
    command not found`), and a `#!` line after them names no interpreter. Source: bash(1) "DEFINITIONS" (a
    word is any sequence of characters other than metacharacters); execve(2) (`#!` must be the first two
    bytes)."""
    try:
        with open(Path(file), "rb") as handle:
            start = handle.read(3)
    except OSError:
        return []
    if start != b"\xef\xbb\xbf":
        return []
    return [Violation(rule="byte_order_mark", line=1,
                      message="the file starts with a UTF-8 byte-order mark (bytes EF BB BF): bash reads them as "
                              "part of the first word of line 1 (its command is then not found) and a `#!` line "
                              "after them names no interpreter",
                      fix=f"remove the mark: sed -i '1s/^\\xEF\\xBB\\xBF//' {file}")]
