"""The CP-SAT stage program against brute force and hand arithmetic."""

from __future__ import annotations

import dataclasses
import time

import pytest
from budget import examples
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from planner.errors import SpecError
from planner.search.brute import brute_force, min_capacity_bytes
from planner.search.ilp import (
    CP_SAT_PROOF,
    DP_PROOF,
    StageProblem,
    memory_diagnosis,
    solve_stage_problem,
    to_int_problem,
)

GIB = 2**30
MS = 1e-3


def linear(fixed_time_s, kind_time_s):
    """One group of one piece: stage time = fixed + sum of layer times (the old bottleneck model)."""
    return (((tuple(fixed_time_s), tuple(tuple(row) for row in kind_time_s)),),)


def uniform(*, layers, stages, time_s, memory_bytes, capacity_bytes, state_bytes=0.0,
            fixed_time_s=None, fixed_memory_bytes=None, in_flight=None, pinned=None, modes=None):
    """Identical layers; memory of stage s multiplied by in_flight[s]."""
    in_flight = in_flight or [1] * stages
    modes = modes or ("none", "selective", "full")[: len(time_s)]
    return StageProblem(
        layer_kinds=(0,) * layers,
        time_groups=linear(fixed_time_s or [0.0] * stages, [time_s]),
        kind_state_bytes=(state_bytes,),
        kind_memory_bytes=tuple(((tuple(m * in_flight[s] for m in memory_bytes)),)
                                for s in range(stages)),
        stage_fixed_memory_bytes=tuple(fixed_memory_bytes or [0.0] * stages),
        capacity_bytes=capacity_bytes,
        layers_per_stage=pinned,
        modes=modes,
    )


# ---------------------------------------------------------------- hand arithmetic


def test_even_split_when_memory_is_free():
    # 8 layers of 1 ms on 4 stages: 2 layers each, bottleneck 2 ms.
    p = uniform(layers=8, stages=4, time_s=[1 * MS, 1.3 * MS, 1.4 * MS],
                memory_bytes=[1, 1, 1], capacity_bytes=100)
    sol = solve_stage_problem(p)
    assert sol.status == "OPTIMAL"
    assert sol.objective_ns == 2_000_000 and sol.bound_s == pytest.approx(2 * MS)
    assert sol.layers_per_stage == (2, 2, 2, 2)
    assert sol.layer_recompute == ("none",) * 8


def test_lm_head_stage_gets_fewer_layers():
    # 6 layers of 1 ms, last stage has 2 ms of LM head: split (4, 2) gives 4 ms on both stages.
    p = uniform(layers=6, stages=2, time_s=[1 * MS, 2 * MS, 3 * MS], memory_bytes=[0, 0, 0],
                capacity_bytes=1, fixed_time_s=[0.0, 2 * MS])
    sol = solve_stage_problem(p)
    assert (sol.status, sol.objective_ns, sol.layers_per_stage) == ("OPTIMAL", 4_000_000, (4, 2))


def test_memory_forces_mixed_recompute():
    # One stage, 4 layers: none = 1 ms / 10 GiB, full = 1.33 ms / 1 GiB, capacity 22 GiB.
    # x layers without recompute: 10x + (4 - x) <= 22  ->  x <= 2; time = 2*1 + 2*1.33 = 4.66 ms.
    p = uniform(layers=4, stages=1, time_s=[1 * MS, 1.33 * MS], memory_bytes=[10 * GIB, 1 * GIB],
                capacity_bytes=22 * GIB, modes=("none", "full"))
    sol = solve_stage_problem(p)
    assert sol.status == "OPTIMAL" and sol.objective_ns == 4_660_000
    assert sol.recompute_per_stage == ({"none": 2, "full": 2},)
    assert sol.stage_memory_bytes == (22 * GIB,)


def test_in_flight_multiplier_unbalances_the_split():
    # 1F1B on 2 stages: stage 0 holds 2 micro-batches. 6 layers of 1 ms, 1 GiB each (no recompute
    # mode); 5 GiB per GPU -> stage 0 holds at most 2 layers (4 GiB), stage 1 the other 4 (4 GiB).
    p = uniform(layers=6, stages=2, time_s=[1 * MS], memory_bytes=[1 * GIB], capacity_bytes=5 * GIB,
                in_flight=[2, 1])
    sol = solve_stage_problem(p)
    assert (sol.objective_ns, sol.layers_per_stage) == (4_000_000, (2, 4))


def test_pinned_split_is_respected():
    p = uniform(layers=8, stages=2, time_s=[1 * MS], memory_bytes=[0], capacity_bytes=1,
                pinned=(5, 3))
    sol = solve_stage_problem(p)
    assert (sol.objective_ns, sol.layers_per_stage) == (5_000_000, (5, 3))


def test_pinned_split_takes_the_least_recompute_that_fits_each_stage():
    # Hand arithmetic for two kinds on a pinned split (each stage's table built for its one count):
    # kind 0 (stage 0) 1 ms / 10 B per micro-batch without recompute, 2 ms / 1 B fully recomputed;
    # kind 1 (stage 1) 3 ms / 5 B and 4 ms / 1 B; 12 B per GPU. Stage 0 keeps 2 micro-batches:
    # none+none 40 B, none+full 22 B, full+full 4 B -> 2 + 2 ms. Stage 1 keeps 1: none+none 10 B
    # fits -> 3 + 3 ms. Step: max(4, 6) = 6 ms.
    p = StageProblem(
        layer_kinds=(0, 0, 1, 1), time_groups=linear([0.0, 0.0], [[1 * MS, 2 * MS], [3 * MS, 4 * MS]]),
        kind_state_bytes=(0.0, 0.0),
        kind_memory_bytes=(((20, 2), (10, 2)), ((10, 1), (5, 1))),  # [stage][kind][mode] x in-flight
        stage_fixed_memory_bytes=(0.0, 0.0), capacity_bytes=12, layers_per_stage=(2, 2),
        modes=("none", "full"))
    sol = solve_stage_problem(p)
    assert (sol.status, sol.objective_ns, sol.layers_per_stage) == ("OPTIMAL", 6_000_000, (2, 2))
    assert [{m: n for m, n in stage.items() if n} for stage in sol.recompute_per_stage] == [
        {"full": 2}, {"none": 2}]


def test_heterogeneous_first_dense_layers():
    # DeepSeek-like: 3 dense layers (1 ms) then 5 MoE layers (3 ms), 2 stages.
    # Prefix sums 1,2,3,6,9,12,15,18: the split after 5 layers gives 9 | 9 ms.
    p = StageProblem(
        layer_kinds=(0, 0, 0, 1, 1, 1, 1, 1),
        time_groups=linear((0.0, 0.0), ((1 * MS,), (3 * MS,))),
        kind_state_bytes=(0.0, 0.0),
        kind_memory_bytes=(((0.0,), (0.0,)), ((0.0,), (0.0,))),
        stage_fixed_memory_bytes=(0.0, 0.0),
        capacity_bytes=1.0,
        modes=("none",),
    )
    sol = solve_stage_problem(p)
    assert (sol.objective_ns, sol.layers_per_stage) == (9_000_000, (5, 3))


@pytest.mark.parametrize("batch_cells", [1, 1_000_000])
def test_mixed_stages_enumerated_in_batches_equal_brute_force(monkeypatch, batch_cells):
    # Two dense layers then six MoE layers over 3 stages, memory forcing recompute: the stages that
    # hold both kinds are enumerated one count at a time (1 cell) or all counts together; both the
    # exhaustive optimum.
    import planner.search.ilp as ilp
    monkeypatch.setattr(ilp, "_BATCH_CELLS", batch_cells)
    p = StageProblem(
        layer_kinds=(0, 0, 1, 1, 1, 1, 1, 1),
        time_groups=linear((0.5 * MS, 0.0, 2 * MS), ((1 * MS, 1.3 * MS, 2 * MS), (3 * MS, 3.5 * MS, 4.5 * MS))),
        kind_state_bytes=(1.0, 2.0),
        kind_memory_bytes=tuple(((4.0 * f, 2.0 * f, 1.0 * f), (6.0 * f, 3.0 * f, 1.0 * f)) for f in (3, 2, 1)),
        stage_fixed_memory_bytes=(1.0, 0.0, 3.0),
        capacity_bytes=24.0,
    )
    sol = solve_stage_problem(p)
    assert (sol.status, sol.proof) == ("OPTIMAL", DP_PROOF)
    assert sol.objective_ns == brute_force(to_int_problem(p)).objective_ns


def test_to_int_problem_rounds_in_one_direction():
    p = uniform(layers=2, stages=1, time_s=[1.2344e-6, 2.0006e-6], memory_bytes=[1000.2, 7.0],
                capacity_bytes=5000.9, state_bytes=3.5)
    ip = to_int_problem(p)
    assert ip.time_groups == ((((0,), ((1234, 2001),)),),)   # nearest nanosecond
    assert ip.kind_memory_bytes == (((1001, 7),),)     # bytes rounded up
    assert ip.kind_state_bytes == (4,)
    assert ip.capacity_bytes == 5000                   # capacity rounded down


def test_bad_shapes_raise_spec_error():
    with pytest.raises(SpecError, match="layers_per_stage"):
        uniform(layers=2, stages=3, time_s=[MS], memory_bytes=[0], capacity_bytes=1)
    with pytest.raises(SpecError, match="kind_memory_bytes"):
        StageProblem(layer_kinds=(0,), time_groups=linear((0,), ((MS,),)), kind_state_bytes=(0,),
                     kind_memory_bytes=(((0, 0),),),
                     stage_fixed_memory_bytes=(0,), capacity_bytes=1, modes=("none",))


# ---------------------------------------------------------------- infeasible: binding constraint


def test_infeasible_reports_binding_stage_and_excess():
    # 2 stages, 4 layers, least-memory (full) 1 GiB per layer, in flight (2, 1); fixed bytes
    # (1 GiB embedding, 2 GiB LM head); capacity 4 GiB.
    # Splits (1,3): 1+2=3 | 2+3=5 -> worst 5;  (2,2): 1+4=5 | 2+2=4 -> 5;  (3,1): 7 | 3 -> 7.
    # Best worst = 5 GiB: 1 GiB over. Stage minima: 1+2 = 3 GiB, 2+1 = 3 GiB.
    p = uniform(layers=4, stages=2, time_s=[1 * MS, 2 * MS], memory_bytes=[4 * GIB, 1 * GIB],
                capacity_bytes=4 * GIB, in_flight=[2, 1],
                fixed_memory_bytes=[1 * GIB, 2 * GIB], modes=("none", "full"))
    sol = solve_stage_problem(p)
    assert sol.status == "INFEASIBLE" and sol.objective_s is None
    d = sol.diagnosis
    assert d.excess_bytes == 1 * GIB
    assert d.min_stage_memory_bytes == (3 * GIB, 3 * GIB)
    assert d.stage in (0, 1)
    assert "exceeds the 4.00 GiB" in d.message and "by 1.00 GiB" in d.message
    # CP-SAT itself agrees when asked without the feasibility pre-check.
    assert solve_stage_problem(p, precheck=False).status == "INFEASIBLE"


def test_single_layer_too_big_names_that_stage():
    p = uniform(layers=3, stages=3, time_s=[MS], memory_bytes=[1 * GIB], capacity_bytes=2 * GIB,
                in_flight=[3, 2, 1])
    d = solve_stage_problem(p).diagnosis
    assert (d.stage, d.excess_bytes) == (0, 1 * GIB)


def test_stage_without_full_recompute_can_need_less_than_least_memory_modes():
    """Issue 13 in hand arithmetic. One stage, one layer; fixed bytes 100 of which 60 are the
    full-recompute working set; activations none 50, selective 45, full 5; capacity 100.
    Full: 100 + 5 = 105 > 100. None: 100 - 60 + 50 = 90 fits, selective 85 fits. Times 1, 2,
    3 us: the optimum is `none` at 1 us (the old least-memory test called this infeasible)."""
    p = dataclasses.replace(
        uniform(layers=1, stages=1, time_s=[1e-6, 2e-6, 3e-6], memory_bytes=[50, 45, 5],
                capacity_bytes=100, fixed_memory_bytes=[100]),
        full_working_set_bytes=(60,))
    for method in ("auto", "cp-sat"):
        sol = solve_stage_problem(p, method=method)
        assert (sol.status, sol.layer_recompute, sol.objective_ns) == ("OPTIMAL", ("none",), 1000)
        assert sol.stage_memory_bytes == (90,)
    assert memory_diagnosis(to_int_problem(p)).min_stage_memory_bytes == (85,)


# ---------------------------------------------------------------- brute force, hypothesis


@st.composite
def small_problems(draw, feasible: bool):
    stages = draw(st.integers(1, 4))
    layers = draw(st.integers(stages, 8))
    kinds = draw(st.integers(1, 3))
    modes = ("none", "selective", "full")
    us = st.integers(0, 5000).map(lambda x: x * 1e-9 + 0.3e-9)   # non-integer nanoseconds
    signed = st.integers(-3000, 5000).map(lambda x: x * 1e-9 + 0.3e-9)
    byte = st.integers(0, 10_000)

    def piece(coef):
        return (tuple(draw(us) for _ in range(stages)),
                tuple(tuple(draw(coef) for _ in modes) for _ in range(kinds)))

    # Step-time shape: a linear group, then groups that are the max of 1-3 pieces (some
    # decreasing in layers, like the DP tail's sync minus overlap), so stage costs are not monotone.
    fixed = [float(draw(byte)) for _ in range(stages)]
    groups = [(piece(us),)] + [tuple(piece(signed) for _ in range(draw(st.integers(1, 3))))
                               for _ in range(draw(st.integers(0, 2)))]
    p = StageProblem(
        layer_kinds=tuple(draw(st.lists(st.integers(0, kinds - 1), min_size=layers,
                                        max_size=layers))),
        time_groups=tuple(groups),
        kind_state_bytes=tuple(float(draw(byte)) for _ in range(kinds)),
        kind_memory_bytes=tuple(tuple(tuple(float(draw(byte)) for _ in modes)
                                      for _ in range(kinds)) for _ in range(stages)),
        stage_fixed_memory_bytes=tuple(fixed),
        capacity_bytes=1.0,
        modes=modes,
        # the full-recompute working set: part of the fixed bytes, credited back to a stage
        # without a fully recomputed layer (issue 13: the least-memory assignment of a stage is
        # then not the least-memory mode on every layer)
        full_working_set_bytes=tuple(float(draw(st.integers(0, int(f)))) for f in fixed)
        if draw(st.booleans()) else (),
        # phases without activations (DeepSpeed's optimizer step, one per param group): a cap on
        # the layers a stage holds, whatever their modes
        phase_memory_bytes=tuple((tuple(float(draw(byte)) for _ in range(stages)),
                                  tuple(float(draw(st.integers(0, 15_000))) for _ in range(kinds)))
                                 for _ in range(draw(st.integers(0, 2)))),
    )
    floor = min_capacity_bytes(to_int_problem(p))
    assume(feasible or floor >= 1)
    slack = draw(st.integers(0, 30_000)) if feasible else -draw(st.integers(1, floor))
    return dataclasses.replace(p, capacity_bytes=floor + slack + 0.5)


@settings(max_examples=examples(40), deadline=None)
@given(small_problems(feasible=True), st.sampled_from(["auto", "cp-sat"]))
@example(StageProblem(  # issue 13: fits only without full recompute (its working set credited)
    layer_kinds=(0,), time_groups=((((3e-10,), ((3e-10, 3e-10, 3e-10),)),),),
    kind_state_bytes=(0.0,), kind_memory_bytes=(((0.0, 0.0, 0.0),),),
    stage_fixed_memory_bytes=(1.0,), capacity_bytes=0.5, full_working_set_bytes=(1.0,)), "auto")
def test_solver_equals_brute_force_on_feasible_instances(p, method):
    # "auto": the exact split DP's plan, no CP-SAT; "cp-sat": CP-SAT's; both against exhaustion.
    ip = to_int_problem(p)
    oracle = brute_force(ip)
    sol = solve_stage_problem(p, method=method)
    assert oracle.feasible and sol.status == "OPTIMAL"
    assert sol.proof == {"auto": DP_PROOF, "cp-sat": CP_SAT_PROOF}[method]
    assert sol.objective_ns == oracle.objective_ns
    assert max(sol.stage_time_s) == pytest.approx(sol.objective_s)
    assert sol.bound_s == sol.objective_s
    assert memory_diagnosis(ip).excess_bytes == min_capacity_bytes(ip) - ip.capacity_bytes <= 0
    assert max(sol.stage_memory_bytes) <= ip.capacity_bytes
    assert len(sol.layer_recompute) == p.num_layers and sum(sol.layers_per_stage) == p.num_layers


@settings(max_examples=examples(25), deadline=None)
@given(small_problems(feasible=False))
def test_infeasible_instances_agree_and_report_excess(p):
    ip = to_int_problem(p)
    assert not brute_force(ip).feasible
    assert solve_stage_problem(p, precheck=False).status == "INFEASIBLE"
    sol = solve_stage_problem(p)
    assert sol.status == "INFEASIBLE"
    assert sol.diagnosis.excess_bytes == min_capacity_bytes(ip) - ip.capacity_bytes > 0


@settings(max_examples=examples(30), deadline=None)
@given(small_problems(feasible=True), st.data())
def test_pinned_split_equals_brute_force(p, data):
    from planner.search.brute import splits
    pinned = data.draw(st.sampled_from(list(splits(p.num_layers, p.num_stages))))
    p = dataclasses.replace(p, layers_per_stage=pinned)
    oracle = brute_force(to_int_problem(p))
    sol = solve_stage_problem(p, method=data.draw(st.sampled_from(["auto", "cp-sat"])))
    if not oracle.feasible:
        assert sol.status == "INFEASIBLE"
        return
    assert (sol.status, sol.objective_ns, sol.layers_per_stage) == ("OPTIMAL", oracle.objective_ns,
                                                                    pinned)


def test_cpsat_solves_when_a_stage_grid_is_too_large_to_enumerate(monkeypatch):
    # Two kinds (dense first layer, like DeepSeek-V3): with the enumeration limit at 0 the DP is
    # not exact, so CP-SAT is the proof; the optimum is still the brute-force one.
    import planner.search.ilp as ilp
    p = uniform(layers=5, stages=2, time_s=[MS, 1.2 * MS, 1.5 * MS],
                memory_bytes=[2 * GIB, GIB, 0.2 * GIB], capacity_bytes=5 * GIB)
    p = dataclasses.replace(p, layer_kinds=(1, 0, 0, 0, 0),
                            time_groups=tuple(((const, coef + tuple(tuple(2 * q for q in row)
                                                                    for row in coef)),)
                                              for (const, coef), in p.time_groups),
                            kind_state_bytes=p.kind_state_bytes * 2,
                            kind_memory_bytes=tuple(stage * 2 for stage in p.kind_memory_bytes))
    monkeypatch.setattr(ilp, "_GRID_LIMIT", 0)
    sol = solve_stage_problem(p)
    assert (sol.status, sol.proof) == ("OPTIMAL", CP_SAT_PROOF)
    assert sol.objective_ns == brute_force(to_int_problem(p)).objective_ns


def test_unknown_method_is_a_spec_error():
    p = uniform(layers=2, stages=1, time_s=[MS], memory_bytes=[GIB], capacity_bytes=3 * GIB)
    with pytest.raises(SpecError):
        solve_stage_problem(p, method="guess")


def test_diagnosis_reports_nonpositive_excess_when_feasible():
    p = uniform(layers=4, stages=2, time_s=[MS], memory_bytes=[GIB], capacity_bytes=3 * GIB)
    # Best split (2, 2) needs 2 GiB: 1 GiB to spare.
    assert memory_diagnosis(to_int_problem(p)).excess_bytes == -1 * GIB


# ---------------------------------------------------------------- size: the 405B case is tiny


def test_llama_405b_sized_problem_is_fast():
    # 126 identical layers on 16 stages, 1F1B in-flight multipliers, fixed LM-head time on the last.
    stages = 16
    p = uniform(layers=126, stages=stages, time_s=[10 * MS, 11 * MS, 13.3 * MS],
                memory_bytes=[3 * GIB, 1 * GIB, 0.1 * GIB], state_bytes=1.2 * GIB,
                capacity_bytes=70 * GIB, in_flight=[stages - s for s in range(stages)],
                fixed_time_s=[1 * MS] + [0.0] * 14 + [8 * MS],
                fixed_memory_bytes=[4 * GIB] + [0.0] * 14 + [8 * GIB])
    start = time.perf_counter()
    sol = solve_stage_problem(p)
    assert time.perf_counter() - start < 1.0
    assert sol.status == "OPTIMAL" and sum(sol.layers_per_stage) == 126
    # Average-load bound: (126 layers x 10 ms + 9 ms fixed) / 16 stages = 79.3 ms.
    assert sol.objective_s >= (126 * 10 * MS + 9 * MS) / 16


def test_one_kind_stages_of_different_kinds_keep_their_own_modes():
    # Found by hypothesis: stages holding only kind 0 and only kind 2 must each take the modes
    # of their own kind's table (kind 0 pays 1 ns for selective, kind 2 for full).
    ns = 1e-9
    p = StageProblem(
        layer_kinds=(0, 0, 2, 0),
        time_groups=((((0.3 * ns,) * 3, ((0.3 * ns, 1.3 * ns, 0.3 * ns), (0.3 * ns,) * 3,
                                          (0.3 * ns, 0.3 * ns, 1.3 * ns))),),),
        kind_state_bytes=(0.0,) * 3,
        kind_memory_bytes=(((0.0,) * 3,) * 3,) * 3,
        stage_fixed_memory_bytes=(0.0,) * 3,
        capacity_bytes=0.5,
    )
    for method in ("auto", "cp-sat"):
        sol = solve_stage_problem(p, method=method)
        assert sol.objective_ns == brute_force(to_int_problem(p)).objective_ns == 0
