"""The serving replica-mix programs equal brute force over every mix on small instances."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from planner.search import serve_ilp

shapes = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.floats(1.0, 5000.0), st.floats(0.01, 20.0)),
                  min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 16))
def test_best_mix_equals_brute_force(cands, budget):
    gpus = [c[0] for c in cands]
    tokens = [c[1] for c in cands]
    result = serve_ilp.best_mix(gpus, tokens, budget)
    best, fewest = serve_ilp.brute_best_mix(gpus, tokens, budget)
    assert result.status == "OPTIMAL"
    supplied = sum(int(tokens[i] * serve_ilp.SCALE) * n for i, n in result.counts.items()) / serve_ilp.SCALE
    assert supplied == best
    assert result.gpus(gpus) == fewest
    assert result.gpus(gpus) <= budget


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(0.1, 60.0), st.integers(1, 24))
def test_min_gpus_equals_brute_force(cands, rate, limit):
    gpus = [c[0] for c in cands]
    requests = [c[2] for c in cands]
    result = serve_ilp.min_gpus(gpus, requests, [c[1] for c in cands], rate, limit)
    oracle = serve_ilp.brute_min_gpus(gpus, requests, rate, limit)
    if oracle is None:
        assert not result.counts and result.status == "INFEASIBLE"
    else:
        assert result.gpus(gpus) == oracle


def test_hand_example():
    # Budget 8: two TP4 replicas (2 x 2500) beat one TP8 (4000) and eight TP1 (8 x 500 = 4000).
    result = serve_ilp.best_mix([1, 4, 8], [500.0, 2500.0, 4000.0], 8)
    assert result.counts == {1: 2}
    # 7 requests/s with TP1 at 1 req/s and TP4 at 5 req/s: 4 + 2 x 1 = 6 GPUs (brute: 7 TP1 = 7).
    assert serve_ilp.min_gpus([1, 4], [1.0, 5.0], [1.0, 1.0], 7.0, 16).gpus([1, 4]) == 6
