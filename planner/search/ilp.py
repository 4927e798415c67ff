"""Per-stage layer split and recompute choice as a CP-SAT integer program.

Given one mesh and its discrete knobs, the cost model prices one layer of each *kind* (all dense
layers of Llama are one kind; DeepSeek-V3 has a dense kind for its first 3 layers and an MoE kind)
under each recompute mode. This module chooses how many consecutive layers each pipeline stage
holds and how many layers of each kind in each stage use each recompute mode.

Formulation (all data integer after `to_int_problem`, the only place floats become integers:
time in microseconds, memory in bytes)::

    Sets     s = 0..S-1 stages, l = 0..L-1 layers in model order, k = 0..K-1 layer kinds,
             r in R recompute modes (none / selective / full), kind(l) the kind of layer l,
             N_k(x) = |{l < x : kind(l) = k}|, the kind-k layers among the first x layers.
    Data     t[k,r]    time of one layer (forward + backward + recompute), us
             w[k]      model-state bytes of one layer (independent of recompute)
             m[s,k,r]  activation bytes of one layer on stage s (the caller applies the 1F1B
                       in-flight multiplier: stage s holds up to S - s micro-batches)
             T0[s]     fixed time of stage s (embedding on the first, LM head + loss on the last)
             M0[s]     fixed bytes of stage s (embedding / LM head / logits, buffers, transients)
             C         capacity per GPU, bytes (device memory minus the reserve)
    Vars     b[s] in {s+1 .. L-S+s+1}, s = 0..S-2   end (exclusive) of stage s; b[-1]=0, b[S-1]=L
             n[s,k] >= 0                             kind-k layers held by stage s
             c[s,k,r] >= 0                           of those, layers using mode r
             T[s], z >= 0                            stage time, bottleneck stage time
    s.t.     b[s] >= b[s-1] + 1                                  contiguous, every stage >= 1 layer
             n[s,k] = N_k(b[s]) - N_k(b[s-1])                    (element constraint on table N_k)
             sum_r c[s,k,r] = n[s,k]
             T[s] = T0[s] + sum_k sum_r t[k,r] c[s,k,r] <= z
             M0[s] + sum_k w[k] n[s,k] + sum_k sum_r m[s,k,r] c[s,k,r] <= C
             z >= LB                                             valid cut, see below
    min      z

The cut LB (`count_lower_bound_us`): relax every layer to a fictitious kind no slower and no
larger than any real kind in each mode; g_s(n), the least time of n such layers on stage s, is
exact by enumeration (`count_table`) and non-decreasing in n, so a plan of bottleneck z needs
sum_s max{n : g_s(n) <= z} >= L; LB is the least table value satisfying that. With a single kind
g_s is the true stage time, LB is attained, and the plan attaining it is passed to CP-SAT as a
complete hint: CP-SAT checks it against the model and closes at once. With several kinds (DeepSeek
dense + MoE, alternating attention) the cut only tightens the search. After the solve each stage of
a one-kind problem gets its fastest fitting modes (`count_assignment`), which never raises a stage's
time, so the non-bottleneck stages carry no needless recompute.

Exactness of the aggregation: layers of one kind have equal t, w and m[s,.,.], so inside a stage
only *how many* of them use each mode matters; every per-layer assignment maps to counts with the
same time and memory and back. The count model is therefore exact for heterogeneous layers too
(in the worst case every layer is its own kind). Variables: S*K*(|R|+1) + 2S, independent of L.

Feasibility does not depend on time, so it is decided exactly before CP-SAT by a reachability pass
over split points with the least-memory mode on every layer (`feasible_split`,
`memory_diagnosis`); an infeasible problem is reported with its binding stage and the bytes by
which the best split still exceeds the capacity.

Source: CP-SAT (OR-Tools `ortools.sat.python.cp_model`, `AddElement`, `Minimize`); the recompute
modes are Megatron-LM's `--recompute-granularity` (selective / full), Korthikanti et al. 2022;
the in-flight micro-batch count of 1F1B stage s is Narayanan et al. 2021 (SC'21) section 2.2.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from ortools.sat.python import cp_model

from planner.errors import SpecError

TIME_UNIT_S = 1e-6
"""One integer time unit of the integer program: a microsecond."""

_STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.UNKNOWN: "UNKNOWN",
}


@dataclass(frozen=True, kw_only=True)
class StageProblem:
    """One mesh's stage-assignment problem, in floating seconds and bytes."""

    layer_kinds: tuple[int, ...]
    """Kind index of each decoder layer in model order (len L); kinds index the `kind_*` tables."""
    kind_time_s: tuple[tuple[float, ...], ...]
    """[kind][mode] time of one layer for one micro-batch (forward + backward + recompute), s."""
    kind_state_bytes: tuple[float, ...]
    """[kind] model-state bytes of one layer on one GPU (params, grads, optimizer), bytes."""
    kind_memory_bytes: tuple[tuple[tuple[float, ...], ...], ...]
    """[stage][kind][mode] activation bytes one layer keeps on stage s, in-flight multiplier
    applied, bytes."""
    stage_fixed_time_s: tuple[float, ...]
    """[stage] time not attributable to a decoder layer (embedding, LM head, loss), s."""
    stage_fixed_memory_bytes: tuple[float, ...]
    """[stage] bytes not attributable to a decoder layer (embedding, LM head, logits), bytes."""
    capacity_bytes: float
    """Usable memory per GPU (capacity minus reserve), bytes."""
    modes: tuple[str, ...] = ("none", "selective", "full")
    """Recompute modes, in the order of the innermost index of the time and memory tables."""
    layers_per_stage: tuple[int, ...] | None = None
    """Pinned split (len S, each >= 1, sum L); None lets the program choose."""

    def __post_init__(self) -> None:
        _check_shapes(self)

    @property
    def num_stages(self) -> int:
        """Pipeline stages S."""
        return len(self.stage_fixed_time_s)

    @property
    def num_layers(self) -> int:
        """Decoder layers L."""
        return len(self.layer_kinds)


@dataclass(frozen=True, kw_only=True)
class IntStageProblem:
    """`StageProblem` in integer microseconds and bytes (see `to_int_problem`)."""

    layer_kinds: tuple[int, ...]
    """Kind index of each layer, model order."""
    kind_time_us: tuple[tuple[int, ...], ...]
    """[kind][mode] layer time, us."""
    kind_state_bytes: tuple[int, ...]
    """[kind] model-state bytes of one layer, bytes."""
    kind_memory_bytes: tuple[tuple[tuple[int, ...], ...], ...]
    """[stage][kind][mode] activation bytes of one layer, bytes."""
    stage_fixed_time_us: tuple[int, ...]
    """[stage] fixed time, us."""
    stage_fixed_memory_bytes: tuple[int, ...]
    """[stage] fixed bytes, bytes."""
    capacity_bytes: int
    """Usable bytes per GPU."""
    modes: tuple[str, ...]
    """Recompute mode names."""
    layers_per_stage: tuple[int, ...] | None = None
    """Pinned split or None."""

    @property
    def num_stages(self) -> int:
        """Pipeline stages S."""
        return len(self.stage_fixed_time_us)

    @property
    def num_layers(self) -> int:
        """Decoder layers L."""
        return len(self.layer_kinds)

    @property
    def num_kinds(self) -> int:
        """Layer kinds K."""
        return len(self.kind_time_us)

    @cached_property
    def kind_prefix(self) -> np.ndarray:
        """(L+1, K) table N_k(x): kind-k layers among the first x layers."""
        onehot = np.zeros((self.num_layers + 1, self.num_kinds), dtype=np.int64)
        onehot[np.arange(1, self.num_layers + 1), self.layer_kinds] = 1
        return np.cumsum(onehot, axis=0)

    @cached_property
    def least_memory_prefix(self) -> np.ndarray:
        """(L+1, S) table: bytes of the first x layers on stage s, least-memory mode each."""
        per_kind = np.array(self.kind_state_bytes, dtype=np.int64)[None, :] + np.array(
            self.kind_memory_bytes, dtype=np.int64).min(axis=2)
        return self.kind_prefix @ per_kind.T


def to_int_problem(problem: StageProblem) -> IntStageProblem:
    """The one place floats become integers: time to the nearest microsecond, memory rounded up
    to whole bytes (capacity down), so that an integer plan that fits also fits in floats."""
    def us(x: float) -> int:
        return round(x / TIME_UNIT_S)

    return IntStageProblem(
        layer_kinds=tuple(problem.layer_kinds),
        kind_time_us=tuple(tuple(us(t) for t in row) for row in problem.kind_time_s),
        kind_state_bytes=tuple(math.ceil(w) for w in problem.kind_state_bytes),
        kind_memory_bytes=tuple(tuple(tuple(math.ceil(m) for m in row) for row in stage)
                                for stage in problem.kind_memory_bytes),
        stage_fixed_time_us=tuple(us(t) for t in problem.stage_fixed_time_s),
        stage_fixed_memory_bytes=tuple(math.ceil(m) for m in problem.stage_fixed_memory_bytes),
        capacity_bytes=math.floor(problem.capacity_bytes),
        modes=tuple(problem.modes),
        layers_per_stage=problem.layers_per_stage,
    )


@dataclass(frozen=True, kw_only=True)
class MemoryDiagnosis:
    """Why a stage problem has no feasible plan: its binding memory constraint."""

    stage: int
    """Binding stage (0 = first): the stage over capacity in the least-memory split."""
    excess_bytes: int
    """Bytes by which that stage still exceeds capacity in the split that minimises the largest
    excess, with the least-memory recompute mode on every layer; <= 0 means feasible."""
    capacity_bytes: int
    """Usable bytes per GPU."""
    min_stage_memory_bytes: tuple[int, ...]
    """[stage] least bytes stage s can need: its fixed bytes plus its cheapest single layer in its
    least-memory mode."""

    @property
    def message(self) -> str:
        """One line naming the stage, the excess and the capacity, in GiB."""
        gib = 2**30
        worst = max(range(len(self.min_stage_memory_bytes)),
                    key=lambda s: self.min_stage_memory_bytes[s])
        return (f"pipeline stage {self.stage} exceeds the {self.capacity_bytes / gib:.2f} GiB per-GPU "
                f"capacity by {self.excess_bytes / gib:.2f} GiB even with the least-memory recompute "
                f"on every layer and the best layer split (stage {worst} alone needs at least "
                f"{self.min_stage_memory_bytes[worst] / gib:.2f} GiB for one layer)")


@dataclass(frozen=True, kw_only=True)
class StageSolution:
    """Result of `solve_stage_problem`."""

    status: str
    """OPTIMAL | FEASIBLE (time limit hit with a plan) | INFEASIBLE | UNKNOWN (time limit, no plan)."""
    objective_s: float | None
    """Bottleneck stage time of the plan found, s (None without a plan)."""
    bound_s: float | None
    """Proven lower bound on the bottleneck stage time, s (equals objective_s when OPTIMAL)."""
    objective_us: int | None
    """Bottleneck stage time in the integer units of the program, us."""
    total_time_us: int | None
    """Sum of stage times of the plan, us."""
    wall_s: float
    """Wall time of the solve, s."""
    layers_per_stage: tuple[int, ...] | None
    """Decoder layers per stage."""
    recompute_per_stage: tuple[dict[str, int], ...] | None
    """[stage] {mode: layers using it}."""
    layer_recompute: tuple[str, ...] | None
    """Recompute mode of each decoder layer, model order."""
    stage_time_s: tuple[float, ...] | None
    """[stage] time per micro-batch, s (integer units converted back)."""
    stage_memory_bytes: tuple[int, ...] | None
    """[stage] bytes per GPU under the plan."""
    diagnosis: MemoryDiagnosis | None = None
    """The binding constraint when INFEASIBLE."""


def solve_stage_problem(problem: StageProblem, *, num_workers: int = 1,
                        max_time_s: float = 10.0, precheck: bool = True,
                        diagnose: bool = True) -> StageSolution:
    """Minimise the bottleneck stage time subject to per-stage memory (see module docstring).

    Args:
        problem: the float problem; converted once by `to_int_problem`.
        num_workers: CP-SAT search workers.
        max_time_s: CP-SAT time limit, s.
        precheck: decide infeasibility by the exact `feasible_split` test before building the model.
        diagnose: attach the `memory_diagnosis` of an infeasible problem (a bisection; a search
            that only needs "no plan" skips it).
    """
    start = time.perf_counter()
    ip = to_int_problem(problem)
    if precheck and feasible_split(ip, ip.capacity_bytes) is None:
        return _without_plan("INFEASIBLE", memory_diagnosis(ip) if diagnose else None,
                             time.perf_counter() - start)
    model, var = _build(ip)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = num_workers
    solver.parameters.max_time_in_seconds = max_time_s
    # One kind: the hint is optimal and meets the bound cut, so presolve would be the only work.
    solver.parameters.cp_model_presolve = ip.num_kinds > 1 or ip.layers_per_stage is not None
    status = _STATUS.get(solver.Solve(model), "UNKNOWN")
    if status in ("INFEASIBLE", "UNKNOWN"):
        diagnosis = memory_diagnosis(ip) if status == "INFEASIBLE" else None
        return _without_plan(status, diagnosis, time.perf_counter() - start)
    return _extract(ip, solver, var, status, time.perf_counter() - start)


# ---------------------------------------------------------------- model: variables, constraints


def _build(ip: IntStageProblem) -> tuple[cp_model.CpModel, dict]:
    model = cp_model.CpModel()
    var = _variables(model, ip)
    _split_constraints(model, ip, var)
    _stage_constraints(model, ip, var)
    tables = _relaxed_tables(ip)
    bound = count_lower_bound_us(ip, tables)
    model.Add(var["z"] >= bound)
    _hint_one_kind(model, ip, var, bound, tables)
    model.Minimize(var["z"])
    return model, var


def _variables(model: cp_model.CpModel, ip: IntStageProblem) -> dict:
    S, L, K, R = ip.num_stages, ip.num_layers, ip.num_kinds, len(ip.modes)
    totals = ip.kind_prefix[-1]
    b: dict[tuple[int], object] = {(-1,): 0, (S - 1,): L}
    for s in range(S - 1):
        lo, hi = (s + 1, L - S + s + 1)
        if ip.layers_per_stage is not None:
            lo = hi = sum(ip.layers_per_stage[: s + 1])
        b[(s,)] = model.NewIntVar(lo, hi, f"b[{s}]")
    n = {(s, k): model.NewIntVar(0, int(totals[k]), f"n[{s},{k}]")
         for s in range(S) for k in range(K)}
    c = {(s, k, r): model.NewIntVar(0, int(totals[k]), f"c[{s},{k},{r}]")
         for s in range(S) for k in range(K) for r in range(R)}
    z = model.NewIntVar(0, _time_ceiling(ip), "z")
    t = {(s,): model.NewIntVar(0, _time_ceiling(ip), f"T[{s}]") for s in range(S)}
    return {"b": b, "n": n, "c": c, "z": z, "T": t}


def _split_constraints(model: cp_model.CpModel, ip: IntStageProblem, var: dict) -> None:
    S, K = ip.num_stages, ip.num_kinds
    b, n = var["b"], var["n"]
    cum: dict[tuple[int, int], object] = {}
    for k in range(K):
        table = [int(x) for x in ip.kind_prefix[:, k]]
        cum[(-1, k)], cum[(S - 1, k)] = 0, table[-1]
        for s in range(S - 1):
            if K == 1:
                cum[(s, k)] = b[(s,)]
                continue
            cum[(s, k)] = model.NewIntVar(0, table[-1], f"cum[{s},{k}]")
            model.AddElement(b[(s,)], table, cum[(s, k)])
    for s in range(S):
        if s < S - 1:
            model.Add(b[(s,)] >= b[(s - 1,)] + 1)
        for k in range(K):
            model.Add(n[(s, k)] == cum[(s, k)] - cum[(s - 1, k)])


def _stage_time(ip: IntStageProblem, var: dict, s: int):
    """T[s] as a linear expression of the counts."""
    c = var["c"]
    return ip.stage_fixed_time_us[s] + sum(
        ip.kind_time_us[k][r] * c[(s, k, r)]
        for k in range(ip.num_kinds) for r in range(len(ip.modes)))


def _stage_constraints(model: cp_model.CpModel, ip: IntStageProblem, var: dict) -> None:
    n, c, z = var["n"], var["c"], var["z"]
    R = range(len(ip.modes))
    for s in range(ip.num_stages):
        for k in range(ip.num_kinds):
            model.Add(sum(c[(s, k, r)] for r in R) == n[(s, k)])
        model.Add(var["T"][(s,)] == _stage_time(ip, var, s))
        model.Add(var["T"][(s,)] <= z)
        memory = ip.stage_fixed_memory_bytes[s] + sum(
            ip.kind_state_bytes[k] * n[(s, k)]
            + sum(ip.kind_memory_bytes[s][k][r] * c[(s, k, r)] for r in R)
            for k in range(ip.num_kinds))
        model.Add(memory <= ip.capacity_bytes)


def _relaxed_tables(ip: IntStageProblem) -> list[np.ndarray]:
    """[stage] table g_s(n): least time of n layers on stage s, T0 included, where each layer is a
    fictitious kind no slower and no larger than any real kind in every mode (exact when K=1)."""
    R, nmax = len(ip.modes), ip.num_layers - ip.num_stages + 1
    tmin = [min(ip.kind_time_us[k][r] for k in range(ip.num_kinds)) for r in range(R)]
    tables = []
    for s in range(ip.num_stages):
        mmin = [min(ip.kind_state_bytes[k] + ip.kind_memory_bytes[s][k][r]
                    for k in range(ip.num_kinds)) for r in range(R)]
        budget = ip.capacity_bytes - ip.stage_fixed_memory_bytes[s]
        table = count_table(tmin, mmin, 0, budget, nmax)
        tables.append(np.where(table < _INFEASIBLE, table + ip.stage_fixed_time_us[s], _INFEASIBLE))
    return tables


def _max_counts(tables: list[np.ndarray], z: int) -> list[int]:
    """[stage] most layers stage s can hold within time z (tables are non-decreasing in n)."""
    return [int(np.searchsorted(t, z, side="right")) - 1 for t in tables]


def count_lower_bound_us(ip: IntStageProblem, tables: list[np.ndarray] | None = None) -> int:
    """Valid lower bound on the bottleneck z (exact when all layers are one kind).

    With g_s the relaxed tables, a plan of bottleneck z gives each stage n_s >= 1 layers with
    g_s(n_s) <= z and sum_s n_s = L; since g_s is non-decreasing (dropping a layer frees memory
    and time), that needs sum_s max{n : g_s(n) <= z} >= L. The least such z among the table
    values is found by bisection. With one kind g_s is the exact stage time and any counts under
    those maxima are a plan, so the bound is attained.
    """
    tables = _relaxed_tables(ip) if tables is None else tables
    values = np.unique(np.concatenate(tables))
    values = values[values < _INFEASIBLE]

    def enough(z: int) -> bool:
        counts = _max_counts(tables, z)
        return min(counts) >= 1 and sum(counts) >= ip.num_layers

    lo, hi = 0, len(values) - 1
    if hi < 0 or not enough(int(values[hi])):
        return 0
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(int(values[mid])) else (mid + 1, hi)
    return int(values[lo])


def _hint_one_kind(model: cp_model.CpModel, ip: IntStageProblem, var: dict, z: int,
                   tables: list[np.ndarray]) -> None:
    """With one kind, hand CP-SAT the plan the count bound proves optimal: the most layers each
    stage can hold within z, trimmed from the last stage to sum to L, each stage's modes from
    `count_assignment`."""
    if ip.num_kinds != 1 or ip.layers_per_stage is not None:
        return
    counts = _max_counts(tables, z)
    excess = sum(counts) - ip.num_layers
    for s in reversed(range(ip.num_stages)):
        cut = min(excess, counts[s] - 1)
        counts[s] -= cut
        excess -= cut
    end = 0
    for s, n in enumerate(counts):
        end += n
        if s < ip.num_stages - 1:
            model.AddHint(var["b"][(s,)], end)
        model.AddHint(var["n"][(s, 0)], n)
        modes = _stage_modes(ip, s, n)
        for r, x in enumerate(modes):
            model.AddHint(var["c"][(s, 0, r)], x)
        model.AddHint(var["T"][(s,)], ip.stage_fixed_time_us[s] + sum(
            ip.kind_time_us[0][r] * x for r, x in enumerate(modes)))
    model.AddHint(var["z"], z)


def _stage_modes(ip: IntStageProblem, s: int, n: int) -> tuple[int, ...]:
    """Fastest mode counts for n kind-0 layers on stage s (one kind)."""
    return count_assignment(ip.kind_time_us[0], ip.kind_memory_bytes[s][0], ip.kind_state_bytes[0],
                            ip.capacity_bytes - ip.stage_fixed_memory_bytes[s], n)


_INFEASIBLE = np.iinfo(np.int64).max // 4


def _count_grid(time_us, memory_bytes, state_bytes: int, budget_bytes: int, counts: np.ndarray):
    """For each layer count (rows) and each count c1 of the second mode (columns): the least time
    and the mode counts attaining it (see `count_table`)."""
    R = len(time_us)
    if R > 3:
        raise SpecError(f"at most 3 recompute modes supported, got {R}", key="modes")
    r0 = min(range(R), key=lambda r: (memory_bytes[r], time_us[r]))
    rest_modes = [r for r in range(R) if r != r0]
    r1, r2 = (rest_modes[0], rest_modes[1]) if R == 3 else (r0, (rest_modes or [r0])[0])
    count = counts[:, None]
    width = int(counts.max()) + 1 if R == 3 else 1
    c1 = np.arange(width, dtype=np.int64)[None, :]
    rest = count - c1
    left = budget_bytes - count * state_bytes - c1 * memory_bytes[r1] - rest * memory_bytes[r0]
    gain, extra = time_us[r0] - time_us[r2], memory_bytes[r2] - memory_bytes[r0]
    if gain > 0 and r2 != r0:
        x = rest if extra == 0 else np.clip(left // max(extra, 1), 0, rest)
    else:
        x = np.zeros_like(rest)
    total = c1 * time_us[r1] + rest * time_us[r0] - x * gain
    total = np.where((rest >= 0) & (left >= 0), total, _INFEASIBLE)
    return total, (r0, r1, r2), c1, rest, x


def count_table(time_us, memory_bytes, state_bytes: int, budget_bytes: int,
                max_count: int) -> np.ndarray:
    """[n] least time of n identical layers whose memory fits `budget_bytes`, n = 0..max_count
    (`_INFEASIBLE` where none fits). Exact for up to 3 modes: with r0 the least-memory mode, for
    each count c1 of a second mode the third mode r2 is taken for as many layers as fit when it is
    faster than r0 (each r0 -> r2 switch adds the same memory and changes time linearly), else
    for none."""
    counts = np.arange(max_count + 1, dtype=np.int64)
    return _count_grid(time_us, memory_bytes, state_bytes, budget_bytes, counts)[0].min(axis=1)


def count_assignment(time_us, memory_bytes, state_bytes: int, budget_bytes: int,
                     n: int) -> tuple[int, ...]:
    """Mode counts (aligned with the modes) of the fastest fitting choice for n identical layers."""
    total, (r0, r1, r2), c1, rest, x = _count_grid(time_us, memory_bytes, state_bytes,
                                                   budget_bytes, np.array([n], dtype=np.int64))
    j = int(np.argmin(total[0]))
    modes = [0] * len(time_us)
    picked_c1, picked_rest = int(c1[0, j]), int(rest[0, j])
    picked_x = int(x[0, j]) if x.shape[1] > 1 else int(x[0, 0])
    modes[r1] += picked_c1 if len(time_us) == 3 else 0
    modes[r2] += picked_x
    modes[r0] += picked_rest - picked_x
    return tuple(modes)


def _time_ceiling(ip: IntStageProblem) -> int:
    """Largest possible sum of stage times (also an upper bound on any one stage)."""
    per_layer = sum(max(ip.kind_time_us[k]) for k in ip.layer_kinds)
    return sum(ip.stage_fixed_time_us) + per_layer


# ---------------------------------------------------------------- extraction


def _extract(ip: IntStageProblem, solver: cp_model.CpSolver, var: dict, status: str,
             wall_s: float) -> StageSolution:
    S, K, R = ip.num_stages, ip.num_kinds, len(ip.modes)
    ends = [0] + [ip.num_layers if s == S - 1 else solver.Value(var["b"][(s,)]) for s in range(S)]
    counts = [[[solver.Value(var["c"][(s, k, r)]) for r in range(R)] for k in range(K)]
              for s in range(S)]
    if K == 1:  # polish: the fastest fitting modes of every stage (never raises a stage's time)
        counts = [[list(_stage_modes(ip, s, ends[s + 1] - ends[s]))] for s in range(S)]
    times = [ip.stage_fixed_time_us[s] + sum(ip.kind_time_us[k][r] * counts[s][k][r]
             for k in range(K) for r in range(R)) for s in range(S)]
    memory = [stage_memory(ip, s, counts[s]) for s in range(S)]
    objective_us = max(times)
    bound_us = math.ceil(solver.BestObjectiveBound())
    return StageSolution(
        status=status,
        objective_s=objective_us * TIME_UNIT_S,
        bound_s=min(bound_us, objective_us) * TIME_UNIT_S,
        objective_us=objective_us,
        total_time_us=sum(times),
        wall_s=wall_s,
        layers_per_stage=tuple(ends[s + 1] - ends[s] for s in range(S)),
        recompute_per_stage=tuple(
            {ip.modes[r]: sum(counts[s][k][r] for k in range(K)) for r in range(R)}
            for s in range(S)),
        layer_recompute=_per_layer_modes(ip, ends, counts),
        stage_time_s=tuple(t * TIME_UNIT_S for t in times),
        stage_memory_bytes=tuple(memory),
    )


def stage_memory(ip: IntStageProblem, s: int, counts: list[list[int]]) -> int:
    """Bytes on stage s given counts[k][r] of kind-k layers in mode r."""
    return ip.stage_fixed_memory_bytes[s] + sum(
        ip.kind_state_bytes[k] * sum(counts[k])
        + sum(ip.kind_memory_bytes[s][k][r] * counts[k][r] for r in range(len(ip.modes)))
        for k in range(ip.num_kinds))


def _per_layer_modes(ip: IntStageProblem, ends: list[int], counts) -> tuple[str, ...]:
    """Hand each stage's per-kind mode counts to its layers in order (layers of one kind are
    interchangeable, so any such hand-out has the same cost)."""
    modes: list[str] = []
    for s in range(ip.num_stages):
        left = [list(row) for row in counts[s]]
        for layer in range(ends[s], ends[s + 1]):
            k = ip.layer_kinds[layer]
            r = next(r for r, x in enumerate(left[k]) if x > 0)
            left[k][r] -= 1
            modes.append(ip.modes[r])
    return tuple(modes)


def _without_plan(status: str, diagnosis: MemoryDiagnosis | None, wall_s: float) -> StageSolution:
    return StageSolution(
        status=status, objective_s=None, bound_s=None, objective_us=None, total_time_us=None,
        wall_s=wall_s, layers_per_stage=None, recompute_per_stage=None, layer_recompute=None,
        stage_time_s=None, stage_memory_bytes=None, diagnosis=diagnosis)


# ---------------------------------------------------------------- feasibility and diagnosis


def feasible_split(ip: IntStageProblem, capacity_bytes: int) -> tuple[int, ...] | None:
    """Stage ends of a split fitting `capacity_bytes` with the least-memory mode on every layer,
    or None when none exists (exact).

    Memory is non-negative, so stage s starting at layer a can end anywhere in (a, R_s(a)], R_s
    found by binary search on the stage's prefix sums. Forward pass: the set of positions where
    stage s can end is the union of those intervals over the positions where stage s-1 can end;
    a backward pass picks one chain. O(S L log L), vectorised.
    """
    if ip.layers_per_stage is not None:
        return _pinned_fits(ip, capacity_bytes)
    S, L = ip.num_stages, ip.num_layers
    prefix = ip.least_memory_prefix
    starts = np.arange(L + 1)
    reach_tables, ends = [], np.zeros(L + 1, dtype=bool)
    ends[0] = True
    for s in range(S):
        budget = prefix[:, s] + capacity_bytes - ip.stage_fixed_memory_bytes[s]
        reach = np.searchsorted(prefix[:, s], budget, side="right") - 1
        reach = np.minimum(reach, L - (S - 1 - s))
        ok = ends & (reach > starts)
        reach_tables.append(np.where(ok, reach, -1))
        diff = np.zeros(L + 2, dtype=np.int64)
        np.add.at(diff, starts[ok] + 1, 1)
        np.add.at(diff, reach[ok] + 1, -1)
        ends = np.cumsum(diff)[: L + 1] > 0
    if not ends[L]:
        return None
    chain, end = [L], L
    for s in range(S - 1, 0, -1):
        start = int(np.flatnonzero((reach_tables[s] >= end) & (starts < end))[0])
        chain.append(start)
        end = start
    return tuple(reversed(chain))


def _pinned_fits(ip: IntStageProblem, capacity_bytes: int) -> tuple[int, ...] | None:
    ends = tuple(int(e) for e in np.cumsum(ip.layers_per_stage))
    prefix = ip.least_memory_prefix
    for s, (b, e) in enumerate(zip((0, *ends), ends)):
        if ip.stage_fixed_memory_bytes[s] + prefix[e, s] - prefix[b, s] > capacity_bytes:
            return None
    return ends


def min_stage_memory_bytes(ip: IntStageProblem) -> tuple[int, ...]:
    """[stage] least bytes stage s can need: fixed bytes + its cheapest admissible single layer
    (stage s can hold layer l only if s <= l <= L - S + s)."""
    S, L = ip.num_stages, ip.num_layers
    single = np.diff(ip.least_memory_prefix, axis=0)  # (L, S) bytes of layer l on stage s
    return tuple(int(ip.stage_fixed_memory_bytes[s] + single[s: L - S + s + 1, s].min())
                 for s in range(S))


def memory_diagnosis(ip: IntStageProblem) -> MemoryDiagnosis:
    """The smallest achievable largest per-stage excess over capacity (least-memory modes), found
    by bisection on the capacity with the exact feasibility test, and the stage that attains it."""
    floors = min_stage_memory_bytes(ip)
    capacity = ip.capacity_bytes
    if feasible_split(ip, capacity) is not None:
        lo, hi = max(floors) - 1, capacity  # smallest feasible capacity lies in (lo, hi]
    else:
        top = int(max(ip.stage_fixed_memory_bytes[s] + ip.least_memory_prefix[-1, s]
                      for s in range(ip.num_stages)))
        lo, hi = max(capacity, max(floors) - 1), top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible_split(ip, mid) is not None else (mid, hi)
    ends = feasible_split(ip, hi)
    used = [ip.stage_fixed_memory_bytes[s] + int(ip.least_memory_prefix[e, s]
            - ip.least_memory_prefix[b, s]) for s, (b, e) in enumerate(zip((0, *ends), ends))]
    stage = max(range(len(used)), key=lambda s: used[s])
    return MemoryDiagnosis(stage=stage, excess_bytes=hi - capacity, capacity_bytes=capacity,
                           min_stage_memory_bytes=floors)


# ---------------------------------------------------------------- input validation


def _check_shapes(p: StageProblem) -> None:
    S, L, K, R = len(p.stage_fixed_time_s), len(p.layer_kinds), len(p.kind_time_s), len(p.modes)
    if S < 1 or L < S:
        raise SpecError(f"need 1 <= pipeline stages ({S}) <= layers ({L})", key="layers_per_stage")
    if any(not 0 <= k < K for k in p.layer_kinds):
        raise SpecError(f"layer kinds must lie in 0..{K - 1}", key="layer_kinds")
    shapes = {
        "kind_time_s": all(len(row) == R for row in p.kind_time_s),
        "kind_state_bytes": len(p.kind_state_bytes) == K,
        "kind_memory_bytes": len(p.kind_memory_bytes) == S and all(
            len(stage) == K and all(len(row) == R for row in stage) for stage in p.kind_memory_bytes),
        "stage_fixed_memory_bytes": len(p.stage_fixed_memory_bytes) == S,
    }
    for key, ok in shapes.items():
        if not ok:
            raise SpecError(f"shape must follow stages={S}, kinds={K}, modes={R}", key=key)
    values = [*np.ravel(p.kind_time_s), *p.kind_state_bytes, *np.ravel(p.kind_memory_bytes),
              *p.stage_fixed_time_s, *p.stage_fixed_memory_bytes]
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise SpecError("times and bytes must be finite and >= 0", key="StageProblem")
    pinned = p.layers_per_stage
    if pinned is not None and (len(pinned) != S or min(pinned) < 1 or sum(pinned) != L):
        raise SpecError(f"value {pinned!r} must be {S} integers >= 1 summing to {L}",
                        key="layers_per_stage")
