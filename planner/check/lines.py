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

import yaml

from planner.placement.rules import Violation

_FLAG = re.compile(r"(?<![\w.-])(--[A-Za-z][\w.-]*)")


def flag_lines(text: str) -> dict[str, int]:
    """{`--flag`: line} of every flag outside a `#` comment; the last occurrence wins (argparse)."""
    out: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for match in _FLAG.finditer(code):
            flag = match.group(1).split("=", 1)[0]
            out[flag] = number
            out[flag.lstrip("-")] = number
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
