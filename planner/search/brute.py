"""Exhaustive oracle for the stage problem of `planner.search.ilp`, for small instances.

Enumerates every contiguous split of the L layers into S non-empty stages (C(L-1, S-1) of them)
and, per stage, every per-layer recompute assignment (|R|^n for a stage of n layers) -- per layer,
not per kind, so it shares none of the integer program's aggregation. Stages are independent once
the split is fixed (each has its own step total and memory), so the best plan of a split takes
each stage's cheapest assignment that fits; the optimum is the least over splits of the largest
stage total, each total summed layer by layer piece by piece (sum over groups of the max over
pieces), the objective of the integer program. A stage's memory is its fixed bytes, less the
full-recompute working set when none of its layers is fully recomputed, plus each layer's bytes.

Meant for L <= 8, S <= 4, 3 modes (at most 35 splits x 3^8 assignments).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from planner.search.ilp import IntStageProblem


@dataclass(frozen=True, kw_only=True)
class BruteResult:
    """Optimum found by enumeration, in the integer units of the program."""

    feasible: bool
    """Some split and assignment fits every stage."""
    objective_ns: int | None
    """Least step time (largest stage total), ns."""
    layers_per_stage: tuple[int, ...] | None
    """A split attaining the optimum."""


def splits(num_layers: int, num_stages: int):
    """Every tuple of `num_stages` positive layer counts summing to `num_layers`."""
    for cuts in itertools.combinations(range(1, num_layers), num_stages - 1):
        bounds = (0, *cuts, num_layers)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(num_stages))


def _memory(ip: IntStageProblem, s: int, layers: range, modes: tuple[int, ...]) -> int:
    """Bytes of stage s holding `layers` in `modes` (one mode index per layer): fixed bytes, less
    the full-recompute working set when no layer is fully recomputed, plus each layer's bytes."""
    memory = ip.stage_fixed_memory_bytes[s]
    full = ip.modes.index("full") if "full" in ip.modes else None
    if ip.full_working_set_bytes and full not in modes:
        memory -= ip.full_working_set_bytes[s]
    for layer, r in zip(layers, modes):
        k = ip.layer_kinds[layer]
        memory += ip.kind_state_bytes[k] + ip.kind_memory_bytes[s][k][r]
    return memory


def _assignments(ip: IntStageProblem, layers: range):
    return itertools.product(range(len(ip.modes)), repeat=len(layers))


def _stage_best(ip: IntStageProblem, s: int, layers: range) -> int | None:
    """Least step total of stage s holding `layers` over all per-layer mode assignments that fit."""
    best = None
    for modes in _assignments(ip, layers):
        if _memory(ip, s, layers, modes) > ip.capacity_bytes:
            continue
        total = 0
        for group in ip.time_groups:
            values = []
            for const, coef in group:
                value = const[s]
                for layer, r in zip(layers, modes):
                    value += coef[ip.layer_kinds[layer]][r]
                values.append(value)
            total += max(values)
        if best is None or total < best:
            best = total
    return best


def brute_force(ip: IntStageProblem) -> BruteResult:
    """The exact optimum of `ip` by enumeration (see module docstring)."""
    best: tuple[int, tuple[int, ...]] | None = None
    candidates = [ip.layers_per_stage] if ip.layers_per_stage else splits(ip.num_layers,
                                                                            ip.num_stages)
    for split in candidates:
        start, times = 0, []
        for s, count in enumerate(split):
            times.append(_stage_best(ip, s, range(start, start + count)))
            start += count
        if None in times:
            continue
        if best is None or max(times) < best[0]:
            best = (max(times), split)
    if best is None:
        return BruteResult(feasible=False, objective_ns=None, layers_per_stage=None)
    return BruteResult(feasible=True, objective_ns=best[0], layers_per_stage=best[1])


def min_capacity_bytes(ip: IntStageProblem) -> int:
    """Least capacity at which `ip` has a plan: min over splits of the largest stage memory, each
    stage in its least-memory per-layer assignment (every assignment enumerated)."""
    candidates = [ip.layers_per_stage] if ip.layers_per_stage else splits(ip.num_layers,
                                                                            ip.num_stages)
    best = None
    for split in candidates:
        start, worst = 0, 0
        for s, count in enumerate(split):
            layers = range(start, start + count)
            memory = min(_memory(ip, s, layers, modes) for modes in _assignments(ip, layers))
            worst = max(worst, memory)
            start += count
        best = worst if best is None else min(best, worst)
    return best
