"""The aggregated replica search (one replica kind per deployment: `planner.serve.ROUTER_SPLIT`) equals brute force
over every one-kind mix on small instances. The oracles below enumerate every (candidate, replica count) pair
themselves; they share nothing with `serve_ilp` but its milli-unit rounding (a plan never overstates)."""

from __future__ import annotations

import math

from budget import examples
from hypothesis import given, settings, strategies as st

from planner.search import serve_ilp

shapes = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.floats(1.0, 5000.0), st.floats(0.01, 20.0)),
                  min_size=1, max_size=4)


def _one_kind_mixes(gpus: list[int], limit: int):
    """Every (candidate, count) with count >= 1 replicas of it on at most `limit` GPUs."""
    for i, g in enumerate(gpus):
        for n in range(1, limit // g + 1):
            yield i, n


def _oracle_best(gpus, tokens, budget):
    """(most tokens/s in milli-units, fewest GPUs reaching it) over every one-kind mix, None if none fits."""
    found = [(math.floor(tokens[i] * 1000) * n, -gpus[i] * n) for i, n in _one_kind_mixes(gpus, budget)]
    if not found:
        return None
    best = max(found)
    return best[0], -best[1]


def _oracle_fewest(gpus, requests, rate, limit):
    """Fewest GPUs of any one-kind mix within `limit` carrying `rate` (milli-units, as a plan rounds), None if none."""
    need = math.ceil(rate * 1000)
    found = [gpus[i] * n for i, n in _one_kind_mixes(gpus, limit) if math.floor(requests[i] * 1000) * n >= need]
    return min(found) if found else None


@settings(max_examples=examples(40), deadline=None)
@given(shapes, st.integers(1, 16))
def test_best_alike_equals_brute_force(cands, budget):
    gpus = [c[0] for c in cands]
    tokens = [c[1] for c in cands]
    result = serve_ilp.best_alike(gpus, tokens, budget)
    oracle = _oracle_best(gpus, tokens, budget)
    if oracle is None:
        assert result.status == "INFEASIBLE" and not result.counts
        return
    (i, n), = result.counts.items()  # one replica kind
    assert result.status == "OPTIMAL"
    assert (math.floor(tokens[i] * 1000) * n, gpus[i] * n) == oracle
    assert gpus[i] * n <= budget


@settings(max_examples=examples(40), deadline=None)
@given(shapes, st.floats(0.1, 60.0), st.integers(1, 24))
def test_fewest_alike_equals_brute_force(cands, rate, limit):
    gpus = [c[0] for c in cands]
    requests = [c[2] for c in cands]
    result = serve_ilp.fewest_alike(gpus, requests, [c[1] for c in cands], rate, limit)
    oracle = _oracle_fewest(gpus, requests, rate, limit)
    if oracle is None:
        assert not result.counts and result.status == "INFEASIBLE"
    else:
        (i, n), = result.counts.items()
        assert result.gpus(gpus) == oracle and requests[i] * n >= rate - 1e-3


def test_hand_examples():
    # Budget 8: two TP4 replicas (2 x 2500 = 5000) beat one TP8 (4000) and eight TP1 (8 x 500 = 4000).
    assert serve_ilp.best_alike([1, 4, 8], [500.0, 2500.0, 4000.0], 8).counts == {1: 2}
    # Budget 7: 7 x TP1 (3500) beats 1 x TP4 (2500): a 4 + 1 + 1 + 1 mix (4000) is not one kind.
    assert serve_ilp.best_alike([1, 4], [500.0, 2500.0], 7).counts == {0: 7}
    # 7 requests/s with TP1 at 1 req/s and TP4 at 5 req/s: 7 x TP1 = 7 GPUs vs 2 x TP4 = 8 (the mixed 4 + 2 x 1 = 6
    # GPUs would give the TP1 servers as many requests as the TP4 one under round-robin).
    assert serve_ilp.fewest_alike([1, 4], [1.0, 5.0], [1.0, 1.0], 7.0, 16).counts == {0: 7}
    # fresh-user review 9: 5 requests/s from tp2 (2 GPUs, 0.52 requests/s) or tp4 (4 GPUs, 1.16): ceil(5 / 0.52) = 10
    # x 2 = 20 GPUs and ceil(5 / 1.16) = 5 x 4 = 20 GPUs tie; the tp4 replicas carry more (5 x 1.16 = 5.8 against
    # 10 x 0.52 = 5.2, tokens/s in proportion at 800 output tokens), so 5 x tp4.
    assert serve_ilp.fewest_alike([2, 4], [0.52, 1.16], [416.0, 928.0], 5.0, 24).counts == {1: 5}
    # a limit below every candidate's need: none
    assert serve_ilp.fewest_alike([2, 4], [0.52, 1.16], [416.0, 928.0], 5.0, 19).status == "INFEASIBLE"
    # no limit: the GPUs it would take
    assert serve_ilp.fewest_alike([2], [0.52], [416.0], 5.0, None).objective == 20
