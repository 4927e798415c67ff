"""`planner check`: a CI gate for configuration files.

A reader turns a file into a `gate.Target` (model, cluster, Layout, per-stage recompute); the gate
applies the composition rules and the per-stage memory against capacity and returns pass or fail
with every violated rule, its numbers and a fix. Readers: plan files (`planner plan -o`).
"""

from __future__ import annotations

from pathlib import Path

from planner.check.gate import Target, evaluate
from planner.check.plan_file import KIND, looks_like_plan_file, read_plan_file
from planner.errors import SpecError
from planner.specs import files

__all__ = ["Target", "check_file", "evaluate", "read_target"]


def read_target(path: str | Path) -> Target:
    """The Target of a configuration file, by what it holds.

    Raises:
        SpecError: unreadable, malformed or unrecognised file (exit 2).
    """
    path = Path(path)
    data = files.read_mapping(path, "configuration keys")
    if looks_like_plan_file(data):
        return read_plan_file(path, data)
    raise SpecError(f"not a configuration this planner checks: expected a plan file (kind: {KIND}, "
                    f"written by `planner plan -o`)", file=str(path), key="kind")


def check_file(path: str | Path) -> dict:
    """`gate.evaluate` of the file's Target: {verdict: pass|fail, violations, stages, ...}."""
    return evaluate(read_target(path))
