"""Run the planner CLI in the test process, through the same entry point `python -m planner` runs
(`planner.cli.app`: its own error handling applies), and return what a subprocess would.

In-process saves the interpreter start and imports of a subprocess per call (~0.5 s CPU each);
tests of the process itself (closed stdout, encodings, signals) keep `subprocess`."""

from __future__ import annotations

import subprocess

from typer.testing import CliRunner

from planner.cli import app


def planner(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """`planner ARGS...`: returncode, stdout and stderr as text. An exception the entry point let
    through (a traceback to a user) is raised here, so the test fails on it."""
    result = CliRunner().invoke(app, list(args), input=input, prog_name="planner")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)
