"""The README's examples are real: every ```console block that starts with `$ planner ...` is run
(COLUMNS=110, stdout and stderr together) and must print what the README shows, wall-clock
seconds aside. `python tests/test_readme.py` rewrites the blocks from the running tool.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```console\n\$ (planner [^\n]*)\n(.*?)```", re.S)
WALL = re.compile(r"\d+\.\d+ s$")


def _run(command: str) -> str:
    args = shlex.split(command)[1:]
    env = dict(os.environ, COLUMNS="110")
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True,
                          env=env, cwd=README.parent)
    return _normalise(proc.stdout + proc.stderr)


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def _mask(text: str) -> str:
    """Wall-clock seconds differ run to run: mask a duration that ends a line (the solver line)."""
    return "\n".join(WALL.sub("<wall> s", line) for line in text.splitlines())


EXAMPLES = BLOCK.findall(README.read_text())


def test_readme_has_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_example_output_is_what_the_tool_prints(command, shown):
    assert _mask(_run(command)) == _mask(_normalise(shown))


def update() -> None:
    text = README.read_text()
    text = BLOCK.sub(lambda m: f"```console\n$ {m.group(1)}\n{_run(m.group(1))}\n```", text)
    README.write_text(text)


if __name__ == "__main__":
    update()
