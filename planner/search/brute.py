"""Exhaustive oracle for the stage problem of `planner.search.ilp`, for small instances.

Enumerates every contiguous split of the L layers into S non-empty stages (C(L-1, S-1) of them)
and, per stage, every per-layer recompute assignment (|R|^n for a stage of n layers) -- per layer,
not per kind, so it shares none of the integer program's aggregation. Stages are independent once
the split is fixed (each has its own time and memory), so the best plan of a split takes each
stage's fastest assignment that fits; the optimum is the lexicographic minimum of
(max stage time, sum of stage times) over splits -- the objective of the integer program.

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
    objective_us: int | None
    """Least bottleneck stage time, us."""
    total_time_us: int | None
    """Least sum of stage times among plans with that bottleneck, us."""
    layers_per_stage: tuple[int, ...] | None
    """A split attaining the optimum."""


def splits(num_layers: int, num_stages: int):
    """Every tuple of `num_stages` positive layer counts summing to `num_layers`."""
    for cuts in itertools.combinations(range(1, num_layers), num_stages - 1):
        bounds = (0, *cuts, num_layers)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(num_stages))


def _stage_best(ip: IntStageProblem, s: int, layers: range) -> int | None:
    """Least time of stage s holding `layers` over all per-layer mode assignments that fit."""
    best = None
    for modes in itertools.product(range(len(ip.modes)), repeat=len(layers)):
        memory = ip.stage_fixed_memory_bytes[s]
        time_us = ip.stage_fixed_time_us[s]
        for layer, r in zip(layers, modes):
            k = ip.layer_kinds[layer]
            memory += ip.kind_state_bytes[k] + ip.kind_memory_bytes[s][k][r]
            time_us += ip.kind_time_us[k][r]
        if memory <= ip.capacity_bytes and (best is None or time_us < best):
            best = time_us
    return best


def brute_force(ip: IntStageProblem) -> BruteResult:
    """The exact optimum of `ip` by enumeration (see module docstring)."""
    best: tuple[int, int, tuple[int, ...]] | None = None
    candidates = [ip.layers_per_stage] if ip.layers_per_stage else splits(ip.num_layers,
                                                                            ip.num_stages)
    for split in candidates:
        start, times = 0, []
        for s, count in enumerate(split):
            times.append(_stage_best(ip, s, range(start, start + count)))
            start += count
        if None in times:
            continue
        key = (max(times), sum(times), split)
        if best is None or key[:2] < best[:2]:
            best = key
    if best is None:
        return BruteResult(feasible=False, objective_us=None, total_time_us=None,
                           layers_per_stage=None)
    return BruteResult(feasible=True, objective_us=best[0], total_time_us=best[1],
                       layers_per_stage=best[2])


def min_capacity_bytes(ip: IntStageProblem) -> int:
    """Least capacity at which `ip` has a plan: min over splits of the largest stage memory with
    every layer in its least-memory mode (enumerated per layer)."""
    candidates = [ip.layers_per_stage] if ip.layers_per_stage else splits(ip.num_layers,
                                                                            ip.num_stages)
    best = None
    for split in candidates:
        start, worst = 0, 0
        for s, count in enumerate(split):
            memory = ip.stage_fixed_memory_bytes[s]
            for layer in range(start, start + count):
                k = ip.layer_kinds[layer]
                memory += ip.kind_state_bytes[k] + min(ip.kind_memory_bytes[s][k])
            worst = max(worst, memory)
            start += count
        best = worst if best is None else min(best, worst)
    return best
