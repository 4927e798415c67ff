"""Replica mixes of serving instances as integer programs (CP-SAT through OR-Tools' `pywraplp`
wrapper: `ortools.sat.python.cp_model` imports pandas, ~1 s, too slow for a sub-second command).

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

Disaggregated (`best_disaggregated`, `min_gpus_disaggregated`): prefill candidates p (g[p] GPUs,
q[p] requests/s they prefill) and decode candidates d (g[d], r[d] requests/s they finish, t[d]
tokens/s)::

    Vars   x[p], y[d] >= 0 integer                 prefill and decode workers
    s.t.   sum_p g[p] x[p] + sum_d g[d] y[d] <= N  GPU budget
           sum_p q[p] x[p] >= sum_d r[d] y[d]      rate matching: prefill keeps decode fed
    max    sum_d t[d] y[d]                         (ties: fewer GPUs)
    or, for R requests/s: sum_p q[p] x[p] >= R, sum_d r[d] y[d] >= R, min GPUs (ties: more tokens/s).

Rates become integers here only: tokens/s and requests/s in milli-units (floor for what a plan
supplies, ceil for what is demanded, so a reported plan never overstates). `brute_best_mix` and
`brute_min_gpus` enumerate every mix (small instances) as the test oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def _program(bounds: list[int]):
    """An empty CP-SAT program (one worker: deterministic) with integer n[i] in [0, bounds[i]]."""
    from ortools.linear_solver import pywraplp  # loaded only when solving

    solver = pywraplp.Solver.CreateSolver("SAT")
    solver.SetSolverSpecificParametersAsString("num_workers: 1 max_time_in_seconds: 10")
    n = [solver.IntVar(0, b, f"n{i}") for i, b in enumerate(bounds)]
    return solver, n


def _solve(solver, n: list) -> tuple[dict[int, int], str, float]:
    status = solver.Solve()
    names = {solver.OPTIMAL: "OPTIMAL", solver.FEASIBLE: "FEASIBLE", solver.INFEASIBLE: "INFEASIBLE"}
    label = names.get(status, "UNKNOWN")
    wall = solver.wall_time() / 1e3
    if status not in (solver.OPTIMAL, solver.FEASIBLE):
        return {}, label, wall
    counts = {i: round(v.solution_value()) for i, v in enumerate(n) if round(v.solution_value()) > 0}
    return counts, label, wall


def best_mix(gpus: list[int], tokens_per_s: list[float], budget: int) -> MixResult:
    """Replicas maximising total tokens/s with at most `budget` GPUs (fewest GPUs among ties)."""
    t = _int_rates(tokens_per_s, up=False)
    solver, n = _program([budget // g for g in gpus])
    used = sum(g * v for g, v in zip(gpus, n))
    solver.Add(used <= budget)
    solver.Maximize(sum(ti * (budget + 1) * v for ti, v in zip(t, n)) - used)
    counts, status, wall = _solve(solver, n)
    total = sum(tokens_per_s[i] * c for i, c in counts.items())
    return MixResult(counts, status, total, wall)


def min_gpus(gpus: list[int], requests_per_s: list[float], tokens_per_s: list[float], rate: float,
             limit: int) -> MixResult:
    """Replicas carrying `rate` requests/s with the fewest GPUs (at most `limit`; ties: most tokens/s)."""
    r = _int_rates(requests_per_s, up=False)
    t = _int_rates(tokens_per_s, up=False)
    need = math.ceil(rate * SCALE)
    bounds = [limit // g for g in gpus]
    solver, n = _program(bounds)
    used = sum(g * v for g, v in zip(gpus, n))
    solver.Add(used <= limit)
    solver.Add(sum(ri * v for ri, v in zip(r, n)) >= need)
    big = sum(ti * b for ti, b in zip(t, bounds)) + 1
    solver.Minimize(sum(g * big * v for g, v in zip(gpus, n)) - sum(ti * v for ti, v in zip(t, n)))
    counts, status, wall = _solve(solver, n)
    return MixResult(counts, status, float(sum(gpus[i] * c for i, c in counts.items())), wall)


@dataclass(frozen=True)
class SplitResult:
    """Prefill and decode workers per candidate (zero counts left out)."""

    prefill: dict[int, int]
    decode: dict[int, int]
    status: str
    objective: float
    wall_s: float


def _split_program(p_gpus, d_gpus, limit):
    solver, n = _program([limit // g for g in p_gpus] + [limit // g for g in d_gpus])
    x, y = n[:len(p_gpus)], n[len(p_gpus):]
    used = sum(g * v for g, v in zip(p_gpus, x)) + sum(g * v for g, v in zip(d_gpus, y))
    solver.Add(used <= limit)
    return solver, n, x, y, used


def _split(counts: dict[int, int], k: int) -> tuple[dict[int, int], dict[int, int]]:
    return ({i: c for i, c in counts.items() if i < k}, {i - k: c for i, c in counts.items() if i >= k})


def best_disaggregated(p_gpus: list[int], p_rps: list[float], d_gpus: list[int], d_rps: list[float],
                       d_tokens: list[float], budget: int) -> SplitResult:
    """Prefill and decode workers maximising decode tokens/s within `budget` GPUs, prefill rate >= decode rate."""
    q, r, t = _int_rates(p_rps, up=False), _int_rates(d_rps, up=True), _int_rates(d_tokens, up=False)
    solver, n, x, y, used = _split_program(p_gpus, d_gpus, budget)
    solver.Add(sum(qi * v for qi, v in zip(q, x)) >= sum(ri * v for ri, v in zip(r, y)))
    solver.Maximize(sum(ti * (budget + 1) * v for ti, v in zip(t, y)) - used)
    counts, status, wall = _solve(solver, n)
    pre, dec = _split(counts, len(p_gpus))
    return SplitResult(pre, dec, status, sum(d_tokens[i] * c for i, c in dec.items()), wall)


def min_gpus_disaggregated(p_gpus: list[int], p_rps: list[float], d_gpus: list[int], d_rps: list[float],
                           d_tokens: list[float], rate: float, limit: int) -> SplitResult:
    """Fewest GPUs (at most `limit`) whose prefill and decode workers each carry `rate` requests/s; among
    those, the least decode capacity (the decode workers at the lightest load carrying the rate: the
    smallest batches, so the lowest TPOT; any surplus would go unused, the prefill side feeds `rate`)."""
    q, r, t = _int_rates(p_rps, up=False), _int_rates(d_rps, up=False), _int_rates(d_tokens, up=False)
    need = math.ceil(rate * SCALE)
    solver, n, x, y, used = _split_program(p_gpus, d_gpus, limit)
    solver.Add(sum(qi * v for qi, v in zip(q, x)) >= need)
    solver.Add(sum(ri * v for ri, v in zip(r, y)) >= need)
    big = sum(ti * (limit // g) for ti, g in zip(t, d_gpus)) + 1
    solver.Minimize(used * big + sum(ti * v for ti, v in zip(t, y)))
    counts, status, wall = _solve(solver, n)
    pre, dec = _split(counts, len(p_gpus))
    gpus = sum(p_gpus[i] * c for i, c in pre.items()) + sum(d_gpus[i] * c for i, c in dec.items())
    return SplitResult(pre, dec, status, float(gpus), wall)


def brute_disaggregated(p_gpus, p_rps, d_gpus, d_rps, d_tokens, budget) -> float:
    """Best decode tokens/s of any rate-matched worker mix within `budget` (oracle, milli-units)."""
    q, r, t = _int_rates(p_rps, up=False), _int_rates(d_rps, up=True), _int_rates(d_tokens, up=False)
    gpus = list(p_gpus) + list(d_gpus)
    k = len(p_gpus)
    best = 0
    for cs in _mixes(gpus, budget):
        if sum(qi * c for qi, c in zip(q, cs[:k])) >= sum(ri * c for ri, c in zip(r, cs[k:])):
            best = max(best, sum(ti * c for ti, c in zip(t, cs[k:])))
    return best / SCALE


def brute_min_gpus_disaggregated(p_gpus, p_rps, d_gpus, d_rps, rate, limit) -> int | None:
    """Fewest GPUs of any worker mix within `limit` whose prefill and decode sides each carry `rate` (oracle)."""
    q, r = _int_rates(p_rps, up=False), _int_rates(d_rps, up=False)
    need = math.ceil(rate * SCALE)
    gpus = list(p_gpus) + list(d_gpus)
    k = len(p_gpus)
    found = [sum(g * c for g, c in zip(gpus, cs)) for cs in _mixes(gpus, limit)
             if sum(qi * c for qi, c in zip(q, cs[:k])) >= need and sum(ri * c for ri, c in zip(r, cs[k:])) >= need]
    return min(found) if found else None


def _mixes(gpus: list[int], budget: int, start: int = 0):
    """Every count vector (one count per candidate) whose GPUs fit `budget`, depth-first: a candidate's
    count is tried only up to what the budget left allows, so the work is the number of mixes that
    fit, not the product of all ranges."""
    if start == len(gpus):
        yield ()
        return
    for c in range(budget // gpus[start] + 1):
        for rest in _mixes(gpus, budget - c * gpus[start], start + 1):
            yield (c, *rest)


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
