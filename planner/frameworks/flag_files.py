"""The recorded flag lists beside these modules (`*_flags.txt`, written by
`tools/record_engine_flags.py` from each engine's own argument parser): one option string per
line, `#` lines say where and when they were recorded."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Removed(NamedTuple):
    """A flag a framework removed or renamed (its `RENAMED` table): what replaces it and where."""

    replacement: str | None
    """What to write instead, as the framework spells it (a flag and its value); None: nothing (the flag
    had no effect when it was removed)."""
    source: str
    """The framework release or commit that removed it."""


def recorded_flags(name: str) -> frozenset[str]:
    """The option strings of `<name>` in this folder (e.g. `vllm_flags.txt`).

    Raises:
        FileNotFoundError: no such list ships with the package (a packaging error, not input)."""
    text = (Path(__file__).parent / name).read_text()
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))
