"""Replica mixes of aggregated serving instances: one replica kind per deployment.

Each candidate i is one engine-instance shape at one concurrency that meets the SLOs, with g[i] GPUs,
t[i] output tokens/s and r[i] requests/s it sustains. A deployment is n alike replicas of ONE candidate:
the routers an operator puts in front of independent engine servers spread requests over them with no
per-server weight (`planner.serve.ROUTER_SPLIT` cites vllm-router 0.1.17 and sglang-router 0.3.2; their
load-aware policies even out the requests in flight, not each server's planned share), so replicas of
unlike capacity would each get R / n and the smaller ones would queue (fresh-user review 9, finding 1:
1 x tp2 @17 + 4 x tp4 @38 behind round-robin ran the tp2 server at ~190% of its capacity). With one kind
the best count is closed-form, so no program is solved:

Throughput (`best_alike`)::

    n[i] = floor(N / g[i])                         the most replicas of i on the N GPUs
    max_i  t[i] n[i]                               tokens/s of the deployment (ties: fewer GPUs, then the
                                                   earlier candidate)

Sizing (`fewest_alike`)::

    n[i] = ceil(R / r[i])                          the fewest replicas of i carrying R requests/s
    min_i  g[i] n[i]  subject to g[i] n[i] <= L    GPUs (ties: more tokens/s, then the earlier candidate)

Each is exhaustive over the candidates (status OPTIMAL; INFEASIBLE when none fits). Rates are compared
in milli-units (tokens/s and requests/s x 1000: floor for what a plan supplies, ceil for what is demanded,
so a reported plan never overstates). Source: the formulas above (hand derivation; for fixed i, the
tokens/s grow and the GPUs grow with n, so the largest n fitting N, resp. the smallest n carrying R, is
best for that i). `tests/test_serve_ilp.py` compares both with brute force over every one-kind mix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCALE = 1000
"""Rates are compared in milli-units (tokens/s x 1000, requests/s x 1000)."""


@dataclass(frozen=True)
class MixResult:
    """Replicas per candidate (index -> count: one entry, or none when infeasible) and the search's account."""

    counts: dict[int, int]
    status: str
    objective: float
    wall_s: float = 0.0

    def gpus(self, gpus: list[int]) -> int:
        return sum(gpus[i] * n for i, n in self.counts.items())


def _milli(rate: float, up: bool) -> int:
    return math.ceil(rate * SCALE) if up else math.floor(rate * SCALE)


def replicas_for(rate: float, per_replica: float) -> int | None:
    """ceil(rate / per_replica) in milli-units (at least 1; None when a replica carries less than 0.001/s): the
    fewest replicas of `per_replica` requests/s each carrying `rate`, never overstating what they supply."""
    per = _milli(per_replica, up=False)
    return max(1, -(-_milli(rate, up=True) // per)) if per > 0 else None


def best_alike(gpus: list[int], tokens_per_s: list[float], budget: int) -> MixResult:
    """floor(budget / g[i]) replicas of the candidate whose replicas give the most tokens/s on `budget` GPUs
    (ties: fewer GPUs, then the earlier candidate). objective: those tokens/s; INFEASIBLE when no candidate
    fits `budget`."""
    best = None
    for i, (g, t) in enumerate(zip(gpus, tokens_per_s)):
        n = budget // g
        if n < 1:
            continue
        key = (-_milli(t, up=False) * n, g * n, i)
        if best is None or key < best[0]:
            best = (key, i, n)
    if best is None:
        return MixResult({}, "INFEASIBLE", 0.0)
    _, i, n = best
    return MixResult({i: n}, "OPTIMAL", tokens_per_s[i] * n)


def fewest_alike(gpus: list[int], requests_per_s: list[float], tokens_per_s: list[float], rate: float,
                 limit: int | None) -> MixResult:
    """ceil(rate / r[i]) replicas of the candidate needing the fewest GPUs to carry `rate` requests/s, at most
    `limit` (None: no limit; ties: more tokens/s, then the earlier candidate). objective: those GPUs;
    INFEASIBLE when no candidate carries `rate` within `limit`."""
    best = None
    for i, (g, r, t) in enumerate(zip(gpus, requests_per_s, tokens_per_s)):
        n = replicas_for(rate, r)
        if n is None:
            continue
        if limit is not None and g * n > limit:
            continue
        key = (g * n, -_milli(t, up=False) * n, i)
        if best is None or key < best[0]:
            best = (key, i, n)
    if best is None:
        return MixResult({}, "INFEASIBLE", 0.0)
    _, i, n = best
    return MixResult({i: n}, "OPTIMAL", float(gpus[i] * n))
