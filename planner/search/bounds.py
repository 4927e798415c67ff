"""Cheap lower bounds on step time and the best-first branch-and-bound driver over candidates.

The driver is generic over callables: `lower_bound(candidate) -> float` must never exceed the
objective `solve(candidate)` returns (math.inf marks a candidate known to be infeasible), so
visiting candidates in ascending bound order and stopping once the next bound reaches the K-th
best objective found loses no plan better than those K.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from planner.search.ilp import (
    TIME_UNIT_S,
    IntStageProblem,
    StageProblem,
    exact_optimum,
    to_int_problem,
)

C = TypeVar("C")


def compute_lower_bound_s(*, flops_per_step: float, num_gpus: int, peak_flops_per_gpu: float,
                          max_efficiency: float, pp: int = 1, vpp: int = 1,
                          num_microbatches: int = 1, zero_bubble: bool = False) -> float:
    """Least step time any layout of this mesh can reach: its FLOP share at the best efficiency,
    stretched by the pipeline bubble.

    compute = flops_per_step / (N * peak * max_efficiency); the bottleneck stage carries at least
    the average share, and 1F1B runs m + (pp - 1)/vpp bottleneck slots, so
    step >= compute * (1 + (pp - 1) / (vpp * m)); zero-bubble schedules drop the bubble term.
    Valid for a step-time model that charges each GPU its FLOPs at no more than max_efficiency
    of peak and schedules 1F1B / interleaved 1F1B as above.

    Source: bubble fraction (p - 1)/m for 1F1B and (p - 1)/(v m) interleaved: Narayanan et al.
    2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
    (SC'21), sections 2.2.1-2.2.2; zero bubble: Qi et al. 2024 (ICLR), "Zero Bubble Pipeline
    Parallelism".
    """
    compute_s = flops_per_step / (num_gpus * peak_flops_per_gpu * max_efficiency)
    if zero_bubble or pp == 1:
        return compute_s
    return compute_s * (1 + (pp - 1) / (vpp * num_microbatches))


def stage_problem_lower_bound_s(problem: StageProblem | IntStageProblem) -> float:
    """Lower bound on the optimum of `problem` (its step time) without CP-SAT, in the program's
    rounded units (math.inf when no split fits in memory): `planner.search.ilp.exact_optimum`,
    the split dynamic program -- the optimum itself whenever it is exact (one kind, or every
    stage's mode grid small enough to enumerate), else the relaxed `split_lower_bound`."""
    ip = problem if isinstance(problem, IntStageProblem) else to_int_problem(problem)
    got = exact_optimum(ip)
    return math.inf if got is None else got[0] * TIME_UNIT_S


def split_free_bound(groups, layer_kinds: tuple[int, ...], num_stages: int) -> float:
    """min over every split of the layers into `num_stages` contiguous runs (a run may be empty)
    of max_s f_s(run_s), f_s(run) = sum_g max_p (const[g][p][s] + sum_{l in run} inc[g][p][kind l]).

    groups: [group][piece] = ([stage] constant, [kind] increment per layer >= 0), any unit.

    With every increment >= 0, f_s only grows as its run does. One kind: f_s depends only on the
    run's length n, a split exists with max_s f_s(n_s) <= T exactly when sum_s N_s(T) >= L, N_s(T)
    the largest n with f_s(n) <= T (-1 when even f_s(0) > T), and the least such T is one of the
    values f_s(n): the first of them, sorted, that passes. Several kinds: the min-max dynamic
    program over split points, V_s(b) = min_{a <= b} max(V_{s-1}(a), f_s(a..b-1)) (Bellman 1957,
    the linear-partition recurrence). Stages with equal constants share one table (every stage
    but the first and the last, as a rule). Exact for these f; a lower bound on the stage
    program's optimum when each f_s is at most the stage's total (`plan._split_free_bound`).

    Raises:
        ValueError: an increment < 0.
    """
    L, S = len(layer_kinds), num_stages
    kinds = np.asarray(layer_kinds, dtype=np.int64)
    classes: dict[tuple, list[int]] = {}
    for s in range(S):
        classes.setdefault(tuple(p[0][s] for group in groups for p in group), []).append(s)
    if any(x < 0 for group in groups for _, inc in group for x in inc):
        raise ValueError("increments must be >= 0")
    prefix = [[np.concatenate(([0.0], np.cumsum(np.asarray(inc, dtype=float)[kinds])))
               for _, inc in group] for group in groups]  # [g][p] (L + 1,)
    if len({int(k) for k in layer_kinds}) <= 1:
        tables, weights = [], []
        for stages in classes.values():
            s = stages[0]
            tables.append(sum(np.max([p[0][s] + u for p, u in zip(group, pre)], axis=0)
                              for group, pre in zip(groups, prefix)))
            weights.append(len(stages))
        values = np.sort(np.concatenate(tables))  # the distinct values, ascending (np.unique's,
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]  # without numpy.ma)
        reach = [np.searchsorted(t, values, side="right") - 1 for t in tables]
        ok = np.all([r >= 0 for r in reach], axis=0) & (
            sum(w * r for w, r in zip(weights, reach)) >= L)
        return float(values[int(np.argmax(ok))])
    upper = np.triu(np.ones((L + 1, L + 1), dtype=bool))  # [a, b]: a <= b
    built: dict[tuple, np.ndarray] = {}
    class_of = {s: key for key, stages in classes.items() for s in stages}
    value, scratch = None, np.empty((L + 1, L + 1))
    for s in range(S):
        key = class_of[s]
        if key not in built:
            built[key] = np.where(upper, sum(
                np.max([p[0][s] + u[None, :] - u[:, None] for p, u in zip(group, pre)], axis=0)
                for group, pre in zip(groups, prefix)), np.inf)
        table = built[key]
        if value is None:
            value = table[0]
        else:
            value = np.minimum.reduce(np.maximum(value[:, None], table, out=scratch), axis=0)
    return float(value[L])


@dataclass(frozen=True, kw_only=True)
class Ranked(Generic[C]):
    """One solved candidate."""

    candidate: C
    """What was solved."""
    objective_s: float
    """Its objective (step time), s."""
    lower_bound_s: float
    """The bound it was visited by, s."""
    result: Any
    """What `solve` returned (e.g. a StageSolution or a full plan)."""


@dataclass(frozen=True, kw_only=True)
class SearchResult(Generic[C]):
    """Outcome of `search`."""

    best: tuple[Ranked[C], ...]
    """Up to top_k plans, best first."""
    status: str
    """OPTIMAL (every candidate solved to optimality or pruned by its bound), FEASIBLE (some
    solve was not proven optimal) or INFEASIBLE (no candidate has a plan)."""
    bound_s: float
    """Proven lower bound on the best objective over all candidates, s."""
    candidates_total: int
    """Candidates offered."""
    candidates_evaluated: int
    """Candidates solved."""
    pruned: int
    """Candidates skipped because their bound reached the K-th best objective (or was inf)."""
    infeasible: int
    """Solved candidates without a plan."""
    wall_s: float
    """Wall time of the search, s."""


def _objective(result: Any) -> float:
    if isinstance(result, (int, float)):
        return float(result)
    return float(result.objective_s)


def search(candidates: Iterable[C], lower_bound: Callable[[C], float],
           solve: Callable[[C], Any], *, top_k: int = 1, prune: bool = True,
           refine: Callable[[C], float] | None = None,
           on_progress: Callable[[int, int], None] | None = None,
           tie_break: Callable[[C], Any] | None = None,
           expand: Callable[[C], Iterable[C] | None] | None = None,
           screen: Callable[[C], float] | Sequence[Callable[[C], float]] | None = None
           ) -> SearchResult[C]:
    """Best-first search: solve candidates in ascending bound order, stop when the next bound is
    at least the K-th best objective found.

    Args:
        candidates: what to rank.
        lower_bound: cheap valid lower bound on a candidate's objective, s (math.inf: infeasible).
        solve: the candidate's objective: None when infeasible, else a number or an object with
            `objective_s` (and optionally `status` and `bound_s`).
        top_k: plans to keep.
        prune: False solves every candidate (for testing the pruning).
        refine: optional dearer valid bound, computed lazily when a candidate reaches the front
            of the queue; the candidate is re-queued under max(cheap, refined) before solving.
        on_progress: called with (visited, total) after each candidate.
        tie_break: among objectives equal to the nanosecond, the candidate with the smaller key
            ranks first (e.g. the simpler layout); candidates whose bound equals the K-th best are
            then still solved, since they may tie it.
        expand: optional; a candidate for which it returns an iterable (not None) is a group
            standing for those candidates (members), never solved itself: when it reaches the
            front of the queue they are queued under their own lower bounds, and counted in
            `candidates_total` instead of it. Its lower bound must not exceed any member's
            objective (a pruned group prunes them); expand returns None for a member.
        screen: optional valid bound dearer than `lower_bound` and cheaper than `refine`, applied
            as `refine` is, before it: a candidate reaching the front is re-queued under
            max(cheap, screened), then max(cheap, screened, refined), and solved only after both;
            one whose screened bound already reaches the K-th best is pruned without `refine`.
            A sequence of screens is applied in its order, each before the next.
    """
    start = time.perf_counter()
    screens = () if screen is None else (screen,) if callable(screen) else tuple(screen)
    refiners = [*screens, *(() if refine is None else (refine,))]
    queue = [(lower_bound(c), i, 0, c) for i, c in enumerate(candidates)]
    total = len(queue)
    index = itertools.count(total)
    heapq.heapify(queue)
    best: list[Ranked[C]] = []
    evaluated = infeasible = visited = 0
    open_bounds: list[float] = []
    while queue:
        bound, i, refined, candidate = heapq.heappop(queue)
        kth = best[top_k - 1].objective_s if len(best) >= top_k else math.inf
        beaten = bound > kth if tie_break is not None else bound >= kth
        if prune and (beaten or math.isinf(bound)):
            open_bounds.append(bound)
            pruned = len(queue) + 1
            return _result(best, total, evaluated, pruned, infeasible, open_bounds, start)
        members = expand(candidate) if expand is not None else None
        if members is not None:
            members = list(members)
            total += len(members) - 1
            for member in members:
                heapq.heappush(queue, (max(bound, lower_bound(member)), next(index), 0, member))
            continue
        if refined < len(refiners):
            heapq.heappush(queue, (max(bound, refiners[refined](candidate)), i, refined + 1,
                                   candidate))
            continue
        result = solve(candidate)
        evaluated += 1
        visited += 1
        if on_progress is not None:
            on_progress(visited, total)
        if result is None:
            infeasible += 1
            continue
        if getattr(result, "status", "OPTIMAL") != "OPTIMAL":
            open_bounds.append(float(getattr(result, "bound_s", bound) or bound))
        best.append(Ranked(candidate=candidate, objective_s=_objective(result),
                           lower_bound_s=bound, result=result))
        best.sort(key=lambda r: (round(r.objective_s, 9), tie_break(r.candidate) if tie_break else 0))
        del best[top_k:]
    return _result(best, total, evaluated, 0, infeasible, open_bounds, start)


def _result(best, total, evaluated, pruned, infeasible, open_bounds, start) -> SearchResult:
    incumbent = best[0].objective_s if best else math.inf
    bound = min([incumbent, *open_bounds])
    unproven = any(getattr(r.result, "status", "OPTIMAL") != "OPTIMAL" for r in best)
    status = "INFEASIBLE" if not best else ("FEASIBLE" if unproven or bound < incumbent
                                            else "OPTIMAL")
    return SearchResult(best=tuple(best), status=status, bound_s=bound,
                        candidates_total=total, candidates_evaluated=evaluated,
                        pruned=pruned, infeasible=infeasible,
                        wall_s=time.perf_counter() - start)
