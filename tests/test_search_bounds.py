"""Lower bounds and the best-first driver: pruning never changes the best plans."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.search.bounds import (
    compute_lower_bound_s,
    search,
    split_free_bound,
    stage_problem_lower_bound_s,
)
from planner.search.ilp import solve_stage_problem
from test_search_ilp import GIB, MS, small_problems, uniform


def test_compute_lower_bound_by_hand():
    # 1e18 FLOPs on 1000 GPUs of 1e15 FLOP/s at 50 %: 2 s; 1F1B pp=4, m=8: x (1 + 3/8) = 2.75 s;
    # interleaved vpp=3: x (1 + 3/24) = 2.25 s; zero bubble: 2 s.
    kw = dict(flops_per_step=1e18, num_gpus=1000, peak_flops_per_gpu=1e15, max_efficiency=0.5)
    assert compute_lower_bound_s(**kw) == pytest.approx(2.0)
    assert compute_lower_bound_s(**kw, pp=4, num_microbatches=8) == pytest.approx(2.75)
    assert compute_lower_bound_s(**kw, pp=4, vpp=3, num_microbatches=8) == pytest.approx(2.25)
    assert compute_lower_bound_s(**kw, pp=4, num_microbatches=8, zero_bubble=True) == 2.0


def test_stage_bound_is_exact_for_identical_layers_and_inf_when_nothing_fits():
    # 8 layers of 1 ms on 4 stages, memory free: the bottleneck is exactly 2 ms.
    p = uniform(layers=8, stages=4, time_s=[1 * MS], memory_bytes=[0], capacity_bytes=1)
    assert stage_problem_lower_bound_s(p) == pytest.approx(2 * MS)
    too_big = uniform(layers=2, stages=2, time_s=[MS], memory_bytes=[2 * GIB], capacity_bytes=GIB)
    assert stage_problem_lower_bound_s(too_big) == math.inf


@st.composite
def bounded_candidates(draw):
    """(bound, objective or None) pairs with bound <= objective; inf bounds are infeasible."""
    items = []
    for _ in range(draw(st.integers(0, 30))):
        bound = draw(st.integers(0, 50))
        if draw(st.integers(0, 9)) == 0:
            items.append((math.inf, None))
        elif draw(st.booleans()) and draw(st.integers(0, 3)) == 0:
            items.append((float(bound), None))
        else:
            items.append((float(bound), float(bound + draw(st.integers(0, 40)))))
    return items


@settings(max_examples=examples(200), deadline=None)
@given(bounded_candidates(), st.integers(1, 4), st.booleans(), st.booleans(), st.data())
def test_pruning_keeps_the_best_objectives(items, top_k, lazy, screened, data):
    index = list(range(len(items)))
    # A dearer bound somewhere between the cheap bound and the objective, and a screen between
    # the cheap bound and that one.
    finer = [b if o is None or math.isinf(b) else data.draw(st.floats(b, o)) for b, o in items]
    middle = [b if math.isinf(b) else data.draw(st.floats(b, f)) for (b, _), f in zip(items, finer)]
    refined = []

    def refine(i):
        refined.append(i)
        return finer[i]

    def bound(i):
        return items[i][0]

    def solve(i):
        return items[i][1]

    full = search(index, bound, solve, top_k=top_k, prune=False)
    fast = search(index, bound, solve, top_k=top_k, refine=refine if lazy else None,
                  screen=middle.__getitem__ if screened else None)
    assert [r.objective_s for r in fast.best] == [r.objective_s for r in full.best]
    assert fast.candidates_evaluated + fast.pruned == len(items)
    if lazy and screened:  # the screen only spares refinements: the solves keep their order
        with_screen = set(refined)
        refined.clear()
        plain = search(index, bound, solve, top_k=top_k, refine=refine)
        assert with_screen <= set(refined)
        assert plain.candidates_evaluated == fast.candidates_evaluated
    assert fast.status == full.status
    if fast.best:
        assert fast.status == "OPTIMAL" and fast.bound_s == fast.best[0].objective_s
    else:
        assert fast.status == "INFEASIBLE"


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(small_problems(feasible=True), min_size=1, max_size=6),
       st.lists(st.integers(0, 3000), min_size=6, max_size=6))
def test_pruned_search_over_stage_problems_matches_exhaustive(problems, shrink):
    # Some instances made infeasible by cutting capacity, so the bound returns inf for them.
    import dataclasses
    problems = [dataclasses.replace(p, capacity_bytes=max(p.capacity_bytes - s, 0.0))
                for p, s in zip(problems, shrink)]

    def solve(p):
        sol = solve_stage_problem(p)
        return sol if sol.status == "OPTIMAL" else None

    full = search(problems, stage_problem_lower_bound_s, solve, prune=False)
    # The cheap bound must be valid: these problems have signed time coefficients, so an
    # objective can be below 0 (a cheap bound of 0.0 pruned a -11 ns optimum once its 0.0 tie
    # was found); -1 s is below any of them (at most 8 layers x 3 us per piece).
    fast = search(problems, lambda p: -1.0, solve, refine=stage_problem_lower_bound_s)
    # Equal up to the integer-nanosecond rounding the bounds are stated with (ilp.StageProblem.
    # rounding_bound_s: a few ns here): two candidates within rounding may swap.
    assert [r.objective_s for r in fast.best] == pytest.approx([r.objective_s for r in full.best], abs=1e-8)
    for p in problems:
        sol = solve_stage_problem(p)
        if sol.status == "OPTIMAL":
            assert stage_problem_lower_bound_s(p) <= sol.objective_s + 1e-12


def test_unproven_solve_makes_the_search_feasible_only():
    result = SimpleNamespace(objective_s=5.0, status="FEASIBLE", bound_s=3.0)
    out = search(["a", "b"], {"a": 1.0, "b": 4.0}.get, {"a": result, "b": 6.0}.get)
    assert out.status == "FEASIBLE" and out.bound_s == 3.0
    assert out.best[0].objective_s == 5.0 and out.candidates_evaluated == 2


def test_pruning_counts():
    # Bounds 1, 2, 10, 20 with objectives 3, 2, 11, 21: solve 1 -> 3, solve 2 -> 2; next bound 10
    # >= 2 -> the last two are pruned.
    bounds = {"a": 1.0, "b": 2.0, "c": 10.0, "d": 20.0}
    objectives = {"a": 3.0, "b": 2.0, "c": 11.0, "d": 21.0}
    out = search(list(bounds), bounds.get, objectives.get)
    assert (out.candidates_evaluated, out.pruned) == (2, 2)
    assert out.best[0].candidate == "b" and out.status == "OPTIMAL"


@st.composite
def split_free_cases(draw):
    """(groups, layer kinds, stages) for `split_free_bound`: 1-6 layers of 1-2 kinds, 1-4 stages,
    1-3 groups of 1-2 pieces; stage constants drawn from a few values so that stages share them."""
    layers = draw(st.integers(1, 6))
    kinds = tuple(draw(st.lists(st.integers(0, draw(st.integers(0, 1))), min_size=layers,
                                max_size=layers)))
    stages = draw(st.integers(1, min(layers, 4)))
    num_kinds = max(kinds) + 1
    small = st.integers(0, 9).map(float)
    groups = [[(tuple(draw(st.sampled_from([0.0, 2.0, 5.0])) for _ in range(stages)),
                tuple(draw(small) for _ in range(num_kinds)))
               for _ in range(draw(st.integers(1, 2)))] for _ in range(draw(st.integers(1, 3)))]
    return groups, kinds, stages


@settings(max_examples=examples(50), deadline=None)
@given(split_free_cases())
def test_split_free_bound_equals_every_split_enumerated(case):
    """The least over every split into contiguous runs (empty ones too) of the largest stage
    value, enumerated split by split, equals `split_free_bound`'s (its one-kind count form and
    its several-kind dynamic program)."""
    groups, kinds, stages = case

    def f(s, run):
        return sum(max(const[s] + sum(inc[kinds[l]] for l in run) for const, inc in group)
                   for group in groups)

    best = math.inf
    for cuts in itertools.combinations_with_replacement(range(len(kinds) + 1), stages - 1):
        ends = (0, *cuts, len(kinds))
        best = min(best, max(f(s, range(a, b)) for s, (a, b) in enumerate(zip(ends, ends[1:]))))
    assert split_free_bound(groups, kinds, stages) == pytest.approx(best)
    with pytest.raises(ValueError):
        split_free_bound([[((0.0,) * stages, (-1.0,) * (max(kinds) + 1))]], kinds, stages)
