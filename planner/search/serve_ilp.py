"""Replica mixes of serving instances as CP-SAT integer programs.

Each candidate i is one engine-instance shape at one concurrency that meets the SLOs, with
g[i] GPUs, t[i] output tokens/s and r[i] requests/s it sustains. Two questions:

Throughput (`best_mix`)::

    Vars   n[i] in {0 .. floor(N / g[i])}         replicas of candidate i
    s.t.   sum_i g[i] n[i] <= N                    GPU budget
    max    sum_i t[i] n[i]                         tokens/s of the deployment
           (ties: fewer GPUs, via the lexicographic weight below)

Sizing (`min_gpus`)::

    s.t.   sum_i r[i] n[i] >= R                    carries R requests/s
    min    sum_i g[i] n[i]                         GPUs (ties: more tokens/s)

Rates become integers here only: tokens/s and requests/s in milli-units (floor for what a plan
supplies, ceil for what is demanded, so a reported plan never overstates). `brute_best_mix` and
`brute_min_gpus` enumerate every mix (small instances) as the test oracle.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

SCALE = 1000
"""Rates are optimised in milli-units (tokens/s x 1000, requests/s x 1000)."""


@dataclass(frozen=True)
class MixResult:
    """Replicas per candidate (index -> count, zero counts left out) and the solver's account."""

    counts: dict[int, int]
    status: str
    objective: float
    wall_s: float

    def gpus(self, gpus: list[int]) -> int:
        return sum(gpus[i] * n for i, n in self.counts.items())


def _int_rates(rates: list[float], up: bool) -> list[int]:
    return [math.ceil(r * SCALE) if up else math.floor(r * SCALE) for r in rates]


def _solve(model: cp_model.CpModel, n: list, name: str) -> tuple[dict[int, int], str, float]:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 10.0
    status = solver.Solve(model)
    label = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {}, label, solver.WallTime()
    counts = {i: int(solver.Value(v)) for i, v in enumerate(n) if solver.Value(v) > 0}
    return counts, label, solver.WallTime()


def best_mix(gpus: list[int], tokens_per_s: list[float], budget: int) -> MixResult:
    """Replicas maximising total tokens/s with at most `budget` GPUs (fewest GPUs among ties)."""
    model = cp_model.CpModel()
    t = _int_rates(tokens_per_s, up=False)
    n = [model.NewIntVar(0, budget // g, f"n{i}") for i, g in enumerate(gpus)]
    used = sum(g * v for g, v in zip(gpus, n))
    model.Add(used <= budget)
    model.Maximize(sum(ti * v for ti, v in zip(t, n)) * (budget + 1) - used)
    counts, status, wall = _solve(model, n, "best_mix")
    total = sum(tokens_per_s[i] * c for i, c in counts.items())
    return MixResult(counts, status, total, wall)


def min_gpus(gpus: list[int], requests_per_s: list[float], tokens_per_s: list[float], rate: float,
             limit: int) -> MixResult:
    """Replicas carrying `rate` requests/s with the fewest GPUs (at most `limit`; ties: most tokens/s)."""
    model = cp_model.CpModel()
    r = _int_rates(requests_per_s, up=False)
    t = _int_rates(tokens_per_s, up=False)
    need = math.ceil(rate * SCALE)
    n = [model.NewIntVar(0, limit // g + 1, f"n{i}") for i, g in enumerate(gpus)]
    used = sum(g * v for g, v in zip(gpus, n))
    model.Add(used <= limit)
    model.Add(sum(ri * v for ri, v in zip(r, n)) >= need)
    big = sum(ti * (limit // g + 1) for ti, g in zip(t, gpus)) + 1
    model.Minimize(used * big - sum(ti * v for ti, v in zip(t, n)))
    counts, status, wall = _solve(model, n, "min_gpus")
    return MixResult(counts, status, float(sum(gpus[i] * c for i, c in counts.items())), wall)


def _mixes(gpus: list[int], budget: int):
    ranges = [range(budget // g + 1) for g in gpus]
    for counts in itertools.product(*ranges):
        if sum(g * c for g, c in zip(gpus, counts)) <= budget:
            yield counts


def brute_best_mix(gpus: list[int], tokens_per_s: list[float], budget: int) -> tuple[float, int]:
    """(best total tokens/s, fewest GPUs reaching it) over every mix within `budget` (oracle, milli-units)."""
    t = _int_rates(tokens_per_s, up=False)
    best = max(((sum(ti * c for ti, c in zip(t, cs)), -sum(g * c for g, c in zip(gpus, cs)))
                for cs in _mixes(gpus, budget)))
    return best[0] / SCALE, -best[1]


def brute_min_gpus(gpus: list[int], requests_per_s: list[float], rate: float, limit: int) -> int | None:
    """Fewest GPUs of any mix within `limit` carrying `rate` requests/s (oracle), None if none does."""
    r = _int_rates(requests_per_s, up=False)
    need = math.ceil(rate * SCALE)
    found = [sum(g * c for g, c in zip(gpus, cs)) for cs in _mixes(gpus, limit)
             if sum(ri * c for ri, c in zip(r, cs)) >= need]
    return min(found) if found else None
