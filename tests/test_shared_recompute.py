"""`search.shared_recompute` (one recompute_num_layers N for every stage) against enumeration.

The oracle walks every contiguous split (`search.brute.splits`) and every N = 0 .. L, gives each
layer its mode by hand (full when it is among the first N layers of its stage, else none), and
judges the plan by the stage program's own per-stage functions (`ilp.stage_cost`,
`ilp.stage_memory`), which share nothing with the prefix-sum tables `block_splits` vectorises.
The random programs are those of tests/test_search_ilp.py (several layer kinds, pieces that fall
as a stage grows, the full-recompute working set, activation-free phases)."""

from __future__ import annotations

import dataclasses

from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_search_ilp import small_problems

from planner.search.brute import splits
from planner.search.ilp import stage_cost, stage_memory, to_int_problem
from planner.search.shared_recompute import best_block_plans


def _counts(ip, start: int, end: int, n: int) -> list[list[int]]:
    """[kind][mode] counts of layers start..end-1 with the first n fully recomputed."""
    rows = [[0] * len(ip.modes) for _ in range(ip.num_kinds)]
    for i in range(start, end):
        rows[ip.layer_kinds[i]][ip.modes.index("full" if i - start < n else "none")] += 1
    return rows


def _oracle(ip):
    """Least step over every split x N whose stages all fit, or None."""
    best = None
    pinned = [ip.layers_per_stage] if ip.layers_per_stage is not None else splits(
        ip.num_layers, ip.num_stages)
    for split in pinned:
        ends = [sum(split[:s + 1]) for s in range(len(split))]
        starts = [0, *ends[:-1]]
        for n in range(ip.num_layers + 1):
            stages = [_counts(ip, a, b, n) for a, b in zip(starts, ends)]
            if all(stage_memory(ip, s, c) <= ip.capacity_bytes for s, c in enumerate(stages)):
                value = max(stage_cost(ip, s, c) for s, c in enumerate(stages))
                best = value if best is None else min(best, value)
    return best


def _check(ip) -> None:
    oracle, plans = _oracle(ip), best_block_plans(ip)
    if oracle is None:
        assert plans == []
        return
    value, n, ends, counts = plans[0]
    assert value == oracle
    starts = [0, *ends[:-1]]
    # the plan is what it says: its counts are the first n layers of each stage, and they fit
    assert [list(map(list, c)) for c in counts] == [_counts(ip, a, b, n) for a, b in zip(starts, ends)]
    assert max(stage_cost(ip, s, c) for s, c in enumerate(counts)) == value
    assert all(stage_memory(ip, s, c) <= ip.capacity_bytes for s, c in enumerate(counts))
    assert [p[:2] for p in plans] == sorted(p[:2] for p in plans)


@settings(max_examples=examples(40), deadline=None)
@given(small_problems(feasible=True))
def test_best_block_plan_equals_enumeration(p):
    _check(to_int_problem(p))


@settings(max_examples=examples(20), deadline=None)
@given(small_problems(feasible=True), st.data())
def test_best_block_plan_on_a_pinned_split_equals_enumeration(p, data):
    pinned = data.draw(st.sampled_from(list(splits(p.num_layers, p.num_stages))))
    _check(to_int_problem(dataclasses.replace(p, layers_per_stage=pinned)))
