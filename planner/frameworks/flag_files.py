"""The recorded flag lists beside these modules (`*_flags.txt`, written by
`tools/record_engine_flags.py` from each engine's own argument parser): one option string per
line, `#` lines say where and when they were recorded."""

from __future__ import annotations

from pathlib import Path


def recorded_flags(name: str) -> frozenset[str]:
    """The option strings of `<name>` in this folder (e.g. `vllm_flags.txt`).

    Raises:
        FileNotFoundError: no such list ships with the package (a packaging error, not input)."""
    text = (Path(__file__).parent / name).read_text()
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))
