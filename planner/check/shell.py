"""Shell variables in launch scripts, as bash expands them, for the readers that split scripts into words
(`planner.check.megatron`, `planner.check.engine_launch`): `NAME=value` sets a variable, `$NAME`, `${NAME}`
and `${NAME:-default}` expand to it, and a word whose text came from a variable is split at whitespace as
bash splits an unquoted expansion. Nothing is run: `$(...)` and `$((...))` stay as written.

Source: bash(1) "Parameter Expansion" (`${parameter:-word}`: word when unset or null) and "Word Splitting"
(default IFS: space, tab, newline; the results of unquoted expansions are split).
"""

from __future__ import annotations

import re

VAR = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")
"""`$NAME`, `${NAME}`, `${NAME:-default}`."""
ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)
"""`NAME=value` (one shell word)."""


def substitute(word: str, env: dict[str, str]) -> str:
    """`word` with each variable `env` sets (non-empty) replaced by its value, else by its `:-` default, else
    left as written."""
    return VAR.sub(lambda m: _value(m, env), word)


def _value(match: re.Match, env: dict[str, str]) -> str:
    name = match.group(1) or match.group(3)
    if name in env and env[name] != "":
        return env[name]
    return match.group(2) if match.group(2) is not None else match.group(0)


def fields(word: str, raw: str) -> list[str]:
    """The words `word` (`raw` after `substitute`) stands for: split at whitespace when a variable gave its
    text (not when it still holds a `$(` substitution this reader does not run) or when it is a quoted
    `"--flag value"` pair; else itself."""
    if (word != raw and "$(" not in word) or (word.startswith("--") and any(c.isspace() for c in word)):
        return word.split()
    return [word]
