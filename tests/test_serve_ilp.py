"""The serving replica-mix programs equal brute force over every mix on small instances."""

from __future__ import annotations

from budget import examples
from hypothesis import given, settings, strategies as st

from planner.search import serve_ilp

shapes = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.floats(1.0, 5000.0), st.floats(0.01, 20.0)),
                  min_size=1, max_size=4)


@settings(max_examples=examples(40), deadline=None)
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


@settings(max_examples=examples(40), deadline=None)
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


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.floats(0.1, 20.0)), min_size=1, max_size=2),
       st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.floats(0.1, 20.0), st.floats(1.0, 3000.0)), min_size=1, max_size=2),
       st.integers(2, 10))
def test_disaggregated_equals_brute_force(prefill, decode, budget):
    args = ([p[0] for p in prefill], [p[1] for p in prefill], [d[0] for d in decode], [d[1] for d in decode],
            [d[2] for d in decode])
    result = serve_ilp.best_disaggregated(*args, budget)
    best = serve_ilp.brute_disaggregated(*args, budget)
    supplied = sum(int(args[4][i] * serve_ilp.SCALE) * n for i, n in result.decode.items()) / serve_ilp.SCALE
    assert supplied == best


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.floats(0.1, 20.0)), min_size=1, max_size=2),
       st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.floats(0.1, 20.0), st.floats(1.0, 3000.0)), min_size=1, max_size=2),
       st.floats(0.1, 30.0), st.integers(2, 12))
def test_min_gpus_disaggregated_equals_brute_force(prefill, decode, rate, limit):
    p_g, p_r = [p[0] for p in prefill], [p[1] for p in prefill]
    d_g, d_r, d_t = [d[0] for d in decode], [d[1] for d in decode], [d[2] for d in decode]
    result = serve_ilp.min_gpus_disaggregated(p_g, p_r, d_g, d_r, d_t, rate, limit)
    oracle = serve_ilp.brute_min_gpus_disaggregated(p_g, p_r, d_g, d_r, rate, limit)
    assert (result.objective if result.prefill or result.decode else None) == (oracle if oracle else None)
