"""Per-stage layer split and recompute choice as a CP-SAT integer program whose objective is the
step time of `planner.cost.step_time` itself.

Given one mesh and its discrete knobs, the cost model (`cost.step_time.StageCostModel`) prices a
stage holding c[k,r] layers of kind k in recompute mode r; layers of one kind (all dense layers of
Llama; DeepSeek-V3 has a dense and an MoE kind) cost the same in every term. This module chooses how
many consecutive layers each pipeline stage holds and how many layers of each kind in each stage use
each recompute mode, minimising the step time = the largest per-stage step total. Its memory
data (w, m, M0, W, P0, p below) are those of `cost.memory_model.StageMemoryModel`, the affine
model of `cost.memory.stage_memory` (`plan._stage_problem` copies them in).

Formulation (all data integer after `to_int_problem`, the only place floats become integers:
time in nanoseconds, memory in bytes)::

    Sets     s = 0..S-1 stages, l = 0..L-1 layers in model order, k = 0..K-1 layer kinds,
             r in R recompute modes (none / selective / full), kind(l) the kind of layer l,
             N_k(x) = |{l < x : kind(l) = k}|, the kind-k layers among the first x layers,
             g = 0..G-1 time groups, p in P_g the affine pieces of group g.
    Data     a[g,p,s]    constant of piece p of group g on stage s, ns
             q[g,p,k,r]  what one kind-k layer in mode r adds to that piece, ns (may be < 0)
             w[k]        model-state bytes of one layer (independent of recompute)
             m[s,k,r]    activation bytes of one layer on stage s (in-flight multiplier applied)
             M0[s]       fixed bytes of stage s (embedding / LM head / logits, buffers, transients)
             W[s]        the part of M0[s] only a stage with a fully recomputed layer needs (the
                         full-recompute working set; 0 when `full` is not allowed)
             P0[j,s], p[j,k]  fixed and per-layer bytes of phase j of the step that holds no
                         activations (DeepSpeed ZeRO-1/2's optimizer step per param group)
             C           capacity per GPU, bytes (device memory minus the reserve)
    Vars     b[s] in {s+1 .. L-S+s+1}, s = 0..S-2   end (exclusive) of stage s; b[-1]=0, b[S-1]=L
             n[s,k], c[s,k,r] >= 0                   kind-k layers of stage s, and those in mode r
             y[s,g]                                  value of group g on stage s
             T[s], z                                 stage step total, step time
    s.t.     b[s] >= b[s-1] + 1                                  contiguous, every stage >= 1 layer
             n[s,k] = N_k(b[s]) - N_k(b[s-1])                    (element constraint on table N_k)
             sum_r c[s,k,r] = n[s,k]
             y[s,g] >= a[g,p,s] + sum_{k,r} q[g,p,k,r] c[s,k,r]  for every piece p of group g
             T[s] = sum_g y[s,g] <= z
             M0[s] - W[s] (1 - u[s]) + sum_k w[k] n[s,k] + sum_k sum_r m[s,k,r] c[s,k,r] <= C
             c[s,k,full] <= N_k(L) u[s],  u[s] in {0, 1}         working set only if full used
             P0[j,s] + sum_k p[j,k] n[s,k] <= C                 each activation-free phase j
             z >= LB                                             valid cut, see below
    min      z

Exactness. The step time of a plan is max_s sum_g max_p (a + q.c) (`StageCostModel.time_groups`:
pipeline x (layer comm + max(compute + recompute, ZeRO traffic)) + max(DP sync - overlap, last
bucket) + optimizer + offload). For fixed counts, any feasible (y, T, z) has y[s,g] >= max_p and
z >= T[s], and the choice y = max_p, T = sum_g y, z = max_s T is feasible, so min z over the y's is
exactly the step time of the counts: the program's optimum is the step time's optimum over every
split and mode-count assignment that fits. Layers of one kind have equal q, w and m[s,.,.], so
inside a stage only how many of them use each mode matters: every per-layer assignment maps to
counts with the same time and memory and back, for heterogeneous layers too (at worst every layer
is its own kind). Variables: S*(K*(|R|+1) + G + 2) + S, independent of L.

The cut LB (`split_lower_bound`). Relax every layer to a fictitious kind whose coefficient in
each piece and mode is the least over the real kinds, and whose bytes are the least too; then
stage s's relaxed cost depends only on its layer count n: h_s(n) = min over mode counts with
sum n that fit of sum_g max_p (a + sum_r q~ c_r), enumerated exactly (`_stage_tables`; no
monotonicity in n is assumed: the DP-tail piece falls as a stage grows). For every real plan
and stage, h_s(n_s) <= its stage total (each piece is no larger term by term, fewer bytes fit),
so LB = min over splits of max_s h_s(n_s), found by the exact min-max dynamic program over split
points V_s(x) = min_n max(V_{s-1}(x - n), h_s(n)), is a valid lower bound. With one kind h_s is
the true stage optimum for n layers, so LB is the optimum and the split and mode counts attaining
it are passed to CP-SAT as a complete hint: CP-SAT checks it and closes at once. Only counts n
with sum_g max_p (a + n min_r q~) <= UB can be part of a plan no worse than UB, the step time of a
known feasible plan (least-memory modes on a fitting split), so h_s is tabulated on those only.
After the solve each stage of a one-kind problem gets its least-cost fitting modes from the same
table (never raising a stage's total), so non-bottleneck stages carry no needless recompute.

Who proves optimality (`solve_stage_problem`, `StageSolution.proof`). The split DP is itself a
proof whenever it is exact, and then no CP-SAT model is built (`exact_optimum`): with one kind,
h_s(n) is the exact least total of n layers on stage s (every mode composition of n enumerated),
and the DP over split points takes the least max over every split, so its value is the program's
optimum and its split with each stage's least-cost fitting modes attains it. With several kinds,
`exact_split` runs the same DP with H_s(a, b), the exact least total of stage s holding layers
a..b-1, found by enumerating every per-kind mode composition; a stage is skipped only when its
relaxed bound exceeds the value of a known feasible plan, which no optimal plan's stage can.
Status OPTIMAL then means: exhaustive over splits and mode counts, by dynamic programming, in
the same integer units. Only when some stage's composition grid exceeds `_GRID_LIMIT` (never on
the bench models: at most ~60 layers per stage, 2 kinds) does CP-SAT solve the program, with
the DP's bound as the cut; `method="cp-sat"` forces CP-SAT (hinted with the DP's plan), and the
tests check both against brute force.

Feasibility does not depend on time, so it is decided exactly before CP-SAT by a reachability pass
over split points with every stage in its least-memory assignment (`feasible_split`,
`memory_diagnosis`); an infeasible problem is reported with its binding stage and the bytes by
which the best split still exceeds the capacity.

What was wrong before (issue 13). The least-memory assignment of a stage was taken to be the
least-memory mode on every layer. Once the full-recompute working set W[s] was charged only to a
stage that fully recomputes a layer, that stopped being true: a stage of un-recomputed layers
without W can need fewer bytes than the same layers fully recomputed with W. `feasible_split`
then declared feasible programs infeasible, so the search dropped their candidates and still
reported OPTIMAL (a 4-layer model on 4 GPUs: pp 4, split 1/1/1/1 at 2.572 ms was dropped and
dp 2 cp 2 at 3.140 ms returned). The least bytes of a stage are now the least over two regimes
(`IntStageProblem.memory_regimes`: with `full` allowed and W paid, or without `full` and W
credited), each non-decreasing in the stage's last layer, so the reachability pass stays exact.
CP-SAT, which charged W on every stage (conservative), now carries an indicator per stage, so
every method solves the same program.

Source: CP-SAT (OR-Tools `ortools.sat.python.cp_model`, `AddElement`, `Minimize`), imported only
when a solve needs it; min-max DP over split points (Bellman 1957, the linear-partition
recurrence); max of affine
functions under minimisation by epigraph variables (Boyd & Vandenberghe 2004, Convex Optimization
§4.3.1 and §6.1.1 on piecewise-linear minimisation); the recompute modes are Megatron-LM's
`--recompute-granularity` (selective / full), Korthikanti et al. 2022; the in-flight micro-batch
count of 1F1B stage s is Narayanan et al. 2021 (SC'21) section 2.2.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property, lru_cache

from typing import TYPE_CHECKING

import numpy as np

from planner.errors import SpecError, shown

if TYPE_CHECKING:  # imported where a solve needs CP-SAT (it pulls in pandas: ~0.5 s)
    from ortools.sat.python import cp_model

TIME_UNIT_S = 1e-9
"""One integer time unit of the integer program: a nanosecond (fine enough that the rounding of
tiny instances' coefficients, ~1e-5 s per layer, cannot reorder plans by more than the stated
`rounding_bound_s`)."""

_STATUS_NAMES = ("OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN")

Piece = tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]
"""An affine piece: ([stage] constant, [kind][mode] coefficient per layer)."""


class _Sizes:
    """S and L of a stage program (`StageProblem` and `IntStageProblem` share them)."""

    stage_fixed_memory_bytes: tuple
    layer_kinds: tuple

    @property
    def num_stages(self) -> int:
        """Pipeline stages S."""
        return len(self.stage_fixed_memory_bytes)

    @property
    def num_layers(self) -> int:
        """Decoder layers L."""
        return len(self.layer_kinds)


@dataclass(frozen=True, kw_only=True)
class StageProblem(_Sizes):
    """One mesh's stage-assignment problem, in floating seconds and bytes."""

    layer_kinds: tuple[int, ...]
    """Kind index of each decoder layer in model order (len L); kinds index the `kind_*` tables."""
    time_groups: tuple[tuple[Piece, ...], ...]
    """[group][piece] = ([stage] constant s, [kind][mode] s per layer): stage s's step total is
    sum over groups of the max over the group's pieces (`StageCostModel.time_groups`)."""
    kind_state_bytes: tuple[float, ...]
    """[kind] model-state bytes of one layer on one GPU (params, grads, optimizer), bytes."""
    kind_memory_bytes: tuple[tuple[tuple[float, ...], ...], ...]
    """[stage][kind][mode] activation bytes one layer keeps on stage s, in-flight multiplier
    applied, bytes."""
    stage_fixed_memory_bytes: tuple[float, ...]
    """[stage] bytes not attributable to a decoder layer (embedding, LM head, logits), bytes."""
    capacity_bytes: float
    """Usable memory per GPU (capacity minus reserve), bytes."""
    modes: tuple[str, ...] = ("none", "selective", "full")
    """Recompute modes, in the order of the innermost index of the time and memory tables."""
    layers_per_stage: tuple[int, ...] | None = None
    """Pinned split (len S, each >= 1, sum L); None lets the program choose."""
    full_working_set_bytes: tuple[float, ...] = ()
    """[stage] bytes of `stage_fixed_memory_bytes` that only a stage with a fully recomputed layer
    needs (the full-recompute working set): credited back to a stage without one, by the exact
    enumerations and by CP-SAT (an indicator u[s] per stage). Empty: none charged."""
    phase_memory_bytes: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = ()
    """[phase] ([stage] fixed bytes, [kind] bytes per layer) of each phase of a step that holds
    no activations (DeepSpeed ZeRO-1/2's optimizer step, one phase per optimizer param group):
    stage s holding n[k] layers of kind k needs fixed[s] + sum_k w[k] n[k] <= capacity in each,
    whatever its recompute modes. Empty: none."""

    def __post_init__(self) -> None:
        _check_shapes(self)

    def rounding_bound_s(self) -> float:
        """Most the integer program's value of any plan differs from its float value, s: each
        piece rounds its constant and at most L layer coefficients by half a unit each."""
        return len(self.time_groups) * (self.num_layers + 1) * TIME_UNIT_S / 2


@dataclass(frozen=True, kw_only=True)
class IntStageProblem(_Sizes):
    """`StageProblem` in integer nanoseconds and bytes (see `to_int_problem`)."""

    layer_kinds: tuple[int, ...]
    """Kind index of each layer, model order."""
    time_groups: tuple[tuple[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], ...], ...]
    """[group][piece] = ([stage] constant, [kind][mode] coefficient), ns."""
    kind_state_bytes: tuple[int, ...]
    """[kind] model-state bytes of one layer, bytes."""
    kind_memory_bytes: tuple[tuple[tuple[int, ...], ...], ...]
    """[stage][kind][mode] activation bytes of one layer, bytes."""
    stage_fixed_memory_bytes: tuple[int, ...]
    """[stage] fixed bytes, bytes."""
    capacity_bytes: int
    """Usable bytes per GPU."""
    modes: tuple[str, ...]
    """Recompute mode names."""
    layers_per_stage: tuple[int, ...] | None = None
    """Pinned split or None."""
    full_working_set_bytes: tuple[int, ...] = ()
    """[stage] bytes credited back to a stage without a fully recomputed layer (rounded down)."""
    phase_memory_bytes: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()
    """[phase] ([stage] fixed bytes, [kind] bytes per layer), rounded up."""

    @cached_property
    def phase_arrays(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """[phase] ([stage] fixed bytes, [kind] bytes per layer) as int64 arrays."""
        return [(np.array(fixed, dtype=np.int64), np.array(per, dtype=np.int64))
                for fixed, per in self.phase_memory_bytes]

    def phase_bytes(self, s: int, kind_counts) -> np.ndarray | int:
        """Largest bytes over the activation-free phases of stage s holding `kind_counts`
        ([..., K] layers per kind), 0 without phases."""
        counts = np.asarray(kind_counts, dtype=np.int64)
        values = [fixed[s] + counts @ per for fixed, per in self.phase_arrays]
        return np.max(values, axis=0) if values else 0

    def phase_fits(self, s: int, kind_counts) -> np.ndarray | bool:
        """Whether stage s holding `kind_counts` ([..., K]) fits every activation-free phase."""
        return not self.phase_memory_bytes or self.phase_bytes(s, kind_counts) <= self.capacity_bytes

    def credit(self, s: int, full_counts) -> np.ndarray | int:
        """Bytes credited to stage s where `full_counts` (fully recomputed layers, any array
        shape) is 0: the working set only a fully recomputed layer needs."""
        if not self.full_working_set_bytes:
            return 0
        return np.where(np.asarray(full_counts) == 0, self.full_working_set_bytes[s], 0)

    def full_column(self, comps: np.ndarray) -> np.ndarray:
        """The fully recomputed count of each row of `comps` ([..., R] mode counts); zeros when
        `full` is not a mode."""
        if "full" not in self.modes:
            return np.zeros(comps.shape[:-1], dtype=np.int64)
        return comps[..., self.modes.index("full")]

    @property
    def num_kinds(self) -> int:
        """Layer kinds K."""
        return len(self.kind_state_bytes)

    @cached_property
    def kind_prefix(self) -> np.ndarray:
        """(L+1, K) table N_k(x): kind-k layers among the first x layers."""
        onehot = np.zeros((self.num_layers + 1, self.num_kinds), dtype=np.int64)
        onehot[np.arange(1, self.num_layers + 1), self.layer_kinds] = 1
        return np.cumsum(onehot, axis=0)

    @cached_property
    def relaxed(self):
        """`_relaxed` arrays (computed once)."""
        return _relaxed_arrays(self)

    @cached_property
    def piece_arrays(self) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """[group][piece] = ([stage] constant, [kind, mode] coefficient) as int64 arrays."""
        return [[(np.array(const, dtype=np.int64), np.array(coef, dtype=np.int64))
                 for const, coef in group] for group in self.time_groups]

    @cached_property
    def layer_memory_arrays(self) -> np.ndarray:
        """[stage, kind, mode] bytes of one layer (activations + states) as int64."""
        return np.array(self.kind_memory_bytes, dtype=np.int64) + np.array(
            self.kind_state_bytes, dtype=np.int64)[None, :, None]

    @cached_property
    def optimum(self):
        """`exact_optimum` of this problem, computed once."""
        return _exact_optimum(self)

    @cached_property
    def split_bound(self) -> tuple[int, tuple[int, ...] | None, dict]:
        """`split_lower_bound` of this problem, computed once."""
        return _split_lower_bound(self)

    @cached_property
    def memory_regimes(self) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
        """The least bytes a stage can need, as one or two regimes ([S] fixed bytes, (L+1, S)
        prefix table: bytes of the first x layers on stage s, [S, K] mode each kind uses).

        The least-memory assignment of a stage is not "the least-memory mode on every layer":
        the full-recompute working set is charged only to a stage with a fully recomputed layer,
        so a stage of `none`/`selective` layers without it can need less than the same stage
        fully recomputed with it (issue 13: one layer on the last stage, 105.5 MB without vs
        107.6 MB with full recompute). Regime 0 lets every layer take its least-memory mode and
        pays the working set; regime 1 (present when the working set is charged) keeps every
        layer off `full` and is credited it. A stage's least bytes are the least over regimes
        (`least_stage_bytes`): each is attained by an assignment, and every assignment needs at
        least one regime's value (the regime of whether it fully recomputes a layer). Each
        regime's bytes are non-decreasing in the stage's last layer, so their minimum is too."""
        act = np.array(self.kind_memory_bytes, dtype=np.int64)  # [s, k, r]
        state = np.array(self.kind_state_bytes, dtype=np.int64)[None, :]
        fixed = np.array(self.stage_fixed_memory_bytes, dtype=np.int64)

        def regime(allowed: list[int], fixed_bytes: np.ndarray):
            sub = act[:, :, allowed]
            mode = np.array(allowed, dtype=np.int64)[sub.argmin(axis=2)]  # [s, k]
            return fixed_bytes, self.kind_prefix @ (state + sub.min(axis=2)).T, mode

        modes = list(range(len(self.modes)))
        regimes = [regime(modes, fixed)]
        if self.full_working_set_bytes and len(modes) > 1:
            full = self.modes.index("full")
            credit = np.array(self.full_working_set_bytes, dtype=np.int64)
            regimes.append(regime([r for r in modes if r != full], fixed - credit))
        return tuple(regimes)

    def least_stage_bytes(self, s: int, start: int, end: int) -> int:
        """Least bytes stage s needs holding layers start..end-1: its least-memory assignment
        (`memory_regimes`), or an activation-free phase's bytes if larger (`phase_bytes`)."""
        backward = min(fixed[s] + prefix[end, s] - prefix[start, s]
                       for fixed, prefix, _ in self.memory_regimes)
        return int(max(backward, self.phase_bytes(s, self.kind_prefix[end] - self.kind_prefix[start])))


def to_int_problem(problem: StageProblem) -> IntStageProblem:
    """The one place floats become integers: time to the nearest nanosecond, memory rounded up
    to whole bytes (capacity down), so that an integer plan that fits also fits in floats."""
    def ns(x: float) -> int:
        return round(x / TIME_UNIT_S)

    return IntStageProblem(
        layer_kinds=tuple(problem.layer_kinds),
        time_groups=tuple(tuple((tuple(ns(a) for a in const), tuple(tuple(ns(q) for q in row)
                                                                    for row in coef))
                                for const, coef in group) for group in problem.time_groups),
        kind_state_bytes=tuple(math.ceil(w) for w in problem.kind_state_bytes),
        kind_memory_bytes=tuple(tuple(tuple(math.ceil(m) for m in row) for row in stage)
                                for stage in problem.kind_memory_bytes),
        stage_fixed_memory_bytes=tuple(math.ceil(m) for m in problem.stage_fixed_memory_bytes),
        capacity_bytes=math.floor(problem.capacity_bytes),
        modes=tuple(problem.modes),
        layers_per_stage=problem.layers_per_stage,
        full_working_set_bytes=tuple(math.floor(w) for w in problem.full_working_set_bytes),
        phase_memory_bytes=tuple((tuple(math.ceil(x) for x in fixed), tuple(math.ceil(x) for x in per))
                                 for fixed, per in problem.phase_memory_bytes),
    )


def stage_cost(ip: IntStageProblem, s: int, counts) -> int:
    """Step total of stage s holding counts[k][r] layers: sum_g max_p (a + q.c), ns."""
    return sum(max(const[s] + sum(q * x for row, xs in zip(coef, counts) for q, x in zip(row, xs))
                   for const, coef in group) for group in ip.time_groups)


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
    """Step time (largest stage step total) of the plan found, s (None without a plan)."""
    bound_s: float | None
    """Proven lower bound on it, s (equals objective_s when OPTIMAL)."""
    objective_ns: int | None
    """The objective in the integer units of the program, ns."""
    total_time_ns: int | None
    """Sum of the stage totals of the plan, ns."""
    wall_s: float
    """Wall time of the solve, s."""
    layers_per_stage: tuple[int, ...] | None
    """Decoder layers per stage."""
    recompute_per_stage: tuple[dict[str, int], ...] | None
    """[stage] {mode: layers using it}."""
    layer_recompute: tuple[str, ...] | None
    """Recompute mode of each decoder layer, model order."""
    stage_time_s: tuple[float, ...] | None
    """[stage] step total, s (integer units converted back)."""
    stage_memory_bytes: tuple[int, ...] | None
    """[stage] bytes per GPU under the plan."""
    diagnosis: MemoryDiagnosis | None = None
    """The binding constraint when INFEASIBLE."""
    proof: str | None = None
    """What proves `status`: DP_PROOF (the exact split dynamic program, `exact_optimum`; no
    CP-SAT model was built) or CP_SAT_PROOF; None without a plan."""


def solve_stage_problem(problem: StageProblem | IntStageProblem, *, num_workers: int = 1,
                        max_time_s: float = 10.0, precheck: bool = True,
                        diagnose: bool = True, method: str = "auto") -> StageSolution:
    """Minimise the step time subject to per-stage memory (see module docstring).

    Args:
        problem: the float problem (converted once by `to_int_problem`) or its integer form.
        num_workers: CP-SAT search workers.
        max_time_s: CP-SAT time limit, s.
        precheck: decide infeasibility by the exact `feasible_split` test before building the model.
        diagnose: attach the `memory_diagnosis` of an infeasible problem (a bisection; a search
            that only needs "no plan" skips it).
        method: "auto" returns the plan of the exact split dynamic program (`exact_optimum`)
            without CP-SAT when that program is exact (one kind, or every stage's mode grid
            small enough to enumerate): status OPTIMAL, `proof` "exact split DP"; otherwise, and
            always with "cp-sat", CP-SAT solves the program (hinted with the DP's plan).
    """
    if method not in ("auto", "cp-sat"):
        raise SpecError(f"value {method!r} not allowed; allowed: auto, cp-sat", key="method")
    start = time.perf_counter()
    ip = problem if isinstance(problem, IntStageProblem) else to_int_problem(problem)
    if precheck and feasible_split(ip, ip.capacity_bytes) is None:
        return _without_plan("INFEASIBLE", memory_diagnosis(ip) if diagnose else None,
                             time.perf_counter() - start)
    exact = exact_optimum(ip)
    if method == "auto" and exact is not None and exact[3]:
        value, ends, counts, _ = exact
        return _solution(ip, ends, counts, status="OPTIMAL", bound=value, proof=DP_PROOF,
                         wall_s=time.perf_counter() - start)
    from ortools.sat.python import cp_model

    model, var = _build(ip, exact)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = num_workers
    solver.parameters.max_time_in_seconds = max_time_s
    # One kind: the hint is optimal and meets the bound cut, so presolve would be the only work.
    solver.parameters.cp_model_presolve = ip.num_kinds > 1 or ip.layers_per_stage is not None
    code = solver.Solve(model)
    status = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE",
              cp_model.INFEASIBLE: "INFEASIBLE"}.get(code, "UNKNOWN")
    if status in ("INFEASIBLE", "UNKNOWN"):
        diagnosis = memory_diagnosis(ip) if status == "INFEASIBLE" else None
        return _without_plan(status, diagnosis, time.perf_counter() - start)
    return _extract(ip, solver, var, status, time.perf_counter() - start)


DP_PROOF = "exact split DP"
"""`StageSolution.proof` of a plan the exact split dynamic program proves optimal."""
CP_SAT_PROOF = "CP-SAT"
"""`StageSolution.proof` of a plan CP-SAT solved (its status is CP-SAT's)."""


def exact_optimum(ip: IntStageProblem):
    """(value, stage ends, [stage][kind][mode] counts, exact) of the program without CP-SAT, or
    None when no split fits.

    exact=True: value is the program's optimum and the plan attains it. With one kind this is
    `split_lower_bound` (h_s is then the exact least total of n layers on stage s) with each
    stage's least-cost fitting mode counts; with several kinds it is `exact_split`, the min-max
    DP over split points whose stage costs enumerate every per-kind mode composition that fits.
    Both are exhaustive: every split is covered by the DP's recursion and every mode assignment
    of a stage by its enumeration (layers of one kind are interchangeable), and only stages whose
    lower bound exceeds the value of a known feasible plan are skipped, which no optimal plan
    uses. exact=False (a stage's grid exceeds _GRID_LIMIT): value is the valid lower bound of
    `split_lower_bound` and no plan is given. Computed once per problem (the search's refined
    bound and the solve of a candidate share it)."""
    return ip.optimum


def _exact_optimum(ip: IntStageProblem):
    if ip.num_kinds == 1:
        bound, split, _ = split_lower_bound(ip)
        if split is None:
            return None
        ends = tuple(int(e) for e in np.cumsum(split))
        counts = tuple((_stage_modes(ip, s, n),) for s, n in enumerate(split))
        return bound, ends, counts, True
    ends = feasible_split(ip, ip.capacity_bytes)
    if ends is None:
        return None
    exact = exact_split(ip, _upper_bound(ip, ends))
    if exact is not None and exact[1] is not None:
        return exact[0], exact[1], exact[2], True
    return split_lower_bound(ip)[0], None, None, False


# ---------------------------------------------------------------- model: variables, constraints


def _build(ip: IntStageProblem, exact) -> tuple[cp_model.CpModel, dict]:
    """The CP-SAT program, with the cut z >= the DP's value (a valid lower bound, the optimum
    when exact) and the DP's plan as a complete hint when it has one."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    var = _variables(model, ip)
    _split_constraints(model, ip, var)
    _stage_constraints(model, ip, var)
    if exact is not None:
        value, ends, counts, _ = exact
        if ends is not None:
            _hint(model, ip, var, ends, counts)
        model.Add(var["z"] >= value)
    model.Minimize(var["z"])
    return model, var


def _piece_range(ip: IntStageProblem, const: tuple[int, ...], coef, s: int) -> tuple[int, int]:
    """Least and largest value piece (const, coef) can take on stage s."""
    lo = hi = const[s]
    for k in ip.layer_kinds:
        lo += min(0, *coef[k])
        hi += max(0, *coef[k])
    return lo, hi


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
    y, t_lo, t_hi = {}, [0] * S, [0] * S
    for s in range(S):
        for g, group in enumerate(ip.time_groups):
            ranges = [_piece_range(ip, const, coef, s) for const, coef in group]
            lo, hi = max(r[0] for r in ranges), max(r[1] for r in ranges)
            y[(s, g)] = model.NewIntVar(lo, hi, f"y[{s},{g}]")
            t_lo[s] += lo
            t_hi[s] += hi
    t = {(s,): model.NewIntVar(t_lo[s], t_hi[s], f"T[{s}]") for s in range(S)}
    z = model.NewIntVar(max(t_lo), max(t_hi), "z")
    u = {}
    if ip.full_working_set_bytes and "full" in ip.modes:  # u[s] = 1 iff stage s fully recomputes
        full = ip.modes.index("full")
        for s in range(S):
            u[(s,)] = model.NewBoolVar(f"u[{s}]")
            for k in range(K):
                model.Add(c[(s, k, full)] <= int(totals[k]) * u[(s,)])
    return {"b": b, "n": n, "c": c, "y": y, "z": z, "T": t, "u": u}


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
    var["cum"] = cum
    for s in range(S):
        if s < S - 1:
            model.Add(b[(s,)] >= b[(s - 1,)] + 1)
        for k in range(K):
            model.Add(n[(s, k)] == cum[(s, k)] - cum[(s - 1, k)])


def _piece_expr(ip: IntStageProblem, var: dict, s: int, const, coef):
    """a[s] + sum_{k,r} q[k,r] c[s,k,r] as a linear expression."""
    c = var["c"]
    return const[s] + sum(coef[k][r] * c[(s, k, r)]
                          for k in range(ip.num_kinds) for r in range(len(ip.modes)))


def _stage_constraints(model: cp_model.CpModel, ip: IntStageProblem, var: dict) -> None:
    n, c, y, z = var["n"], var["c"], var["y"], var["z"]
    R = range(len(ip.modes))
    for s in range(ip.num_stages):
        for k in range(ip.num_kinds):
            model.Add(sum(c[(s, k, r)] for r in R) == n[(s, k)])
        for g, group in enumerate(ip.time_groups):
            for const, coef in group:
                model.Add(y[(s, g)] >= _piece_expr(ip, var, s, const, coef))
        model.Add(var["T"][(s,)] == sum(y[(s, g)] for g in range(len(ip.time_groups))))
        model.Add(var["T"][(s,)] <= z)
        memory = ip.stage_fixed_memory_bytes[s] + sum(
            ip.kind_state_bytes[k] * n[(s, k)]
            + sum(ip.kind_memory_bytes[s][k][r] * c[(s, k, r)] for r in R)
            for k in range(ip.num_kinds))
        if (s,) in var["u"]:  # credited back unless the stage fully recomputes a layer
            memory -= ip.full_working_set_bytes[s] * (1 - var["u"][(s,)])
        model.Add(memory <= ip.capacity_bytes)
        for fixed, per in ip.phase_memory_bytes:  # activation-free phases (optimizer step)
            model.Add(fixed[s] + sum(per[k] * n[(s, k)] for k in range(ip.num_kinds))
                      <= ip.capacity_bytes)


# ---------------------------------------------------------------- the split lower bound


_INFEASIBLE = np.iinfo(np.int64).max // 4


@lru_cache(maxsize=1024)
def _compositions(n: int, R: int) -> np.ndarray:
    """Every (c_0, .., c_{R-1}) >= 0 with sum n, R <= 3, as rows (cached, read-only)."""
    if R == 1:
        out = np.array([[n]], dtype=np.int64)
    elif R == 2:
        a = np.arange(n + 1, dtype=np.int64)
        out = np.stack([n - a, a], axis=1)
    elif R == 3:  # first row all in the first mode (the least recompute), as for R = 2
        i, j = np.triu_indices(n + 1)
        out = np.stack([n - j, j - i, i], axis=1).astype(np.int64)
    else:
        raise SpecError(f"at most 3 recompute modes supported, got {R}", key="modes")
    out.flags.writeable = False
    return out


def _relaxed(ip: IntStageProblem):
    """(groups, bytes): each piece with [mode] coefficient min over kinds; [stage][mode] bytes of
    one layer min over kinds (exact when K = 1)."""
    return ip.relaxed


def _relaxed_arrays(ip: IntStageProblem):
    groups = [[(np.array(const, dtype=np.int64), np.array(coef, dtype=np.int64).min(axis=0))
               for const, coef in group] for group in ip.time_groups]
    mem = (np.array(ip.kind_memory_bytes, dtype=np.int64)
           + np.array(ip.kind_state_bytes, dtype=np.int64)[None, :, None]).min(axis=1)
    return groups, mem


def _cost_of(groups, s: int, counts: np.ndarray) -> np.ndarray:
    """sum_g max_p (a[s] + q . counts) for each row of counts (relaxed single kind)."""
    total = np.zeros(len(counts), dtype=np.int64)
    for group in groups:
        total += np.max(np.stack([const[s] + counts @ q for const, q in group]), axis=0)
    return total


@lru_cache(maxsize=16)
def _all_compositions(nmax: int, R: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, starts): the compositions of n = 1..nmax into R parts stacked in order of n, and
    the row where each n begins (starts[n - 1]; starts[nmax] = len(rows))."""
    parts = [_compositions(n, R) for n in range(1, nmax + 1)]
    starts = np.concatenate([[0], np.cumsum([len(p) for p in parts])])
    return np.concatenate(parts), starts


def _stage_tables(ip: IntStageProblem, upper: int) -> np.ndarray:
    """(S, L+1) table h[s, n] for every count n a stage-s plan no worse than `upper` can use
    (module docstring), _INFEASIBLE elsewhere; h_s(n) = least relaxed cost of n layers that
    fit. The counts kept are those with sum_g max_p (a + n min_r q) <= upper, an interval since
    that function is convex in n. Computed for all stages at once over the union of their
    intervals (the compositions' products q . c do not depend on the stage), then masked."""
    groups, mem = _relaxed(ip)
    S, L, R = ip.num_stages, ip.num_layers, len(ip.modes)
    nmax = L - S + 1
    ns = np.arange(1, nmax + 1, dtype=np.int64)
    table = np.full((S, L + 1), _INFEASIBLE, dtype=np.int64)
    low = sum(np.max(np.stack([const[:, None] + ns[None, :] * q.min() for const, q in group]),
                     axis=0) for group in groups)  # [s, n - 1]
    ok = low <= upper
    if ip.layers_per_stage is not None:
        ok &= ns[None, :] == np.array(ip.layers_per_stage)[:, None]
    if not ok.any():
        return table
    used = np.flatnonzero(ok.any(axis=0))
    lo, hi = int(ns[used[0]]), int(ns[used[-1]])
    rows, starts = _all_compositions(nmax, R)
    base = starts[lo - 1]
    comps = rows[base: starts[hi]]
    cost = _stage_totals(groups, lambda q: comps @ q)
    fits = (np.array(ip.stage_fixed_memory_bytes, dtype=np.int64)[:, None]
            + (comps @ mem.T).T - _credits(ip, ip.full_column(comps)) <= ip.capacity_bytes)
    fits &= _relaxed_phase_fits(ip, comps.sum(axis=1))
    cost = np.where(fits, cost, _INFEASIBLE)
    best = np.minimum.reduceat(cost, starts[lo - 1: hi] - base, axis=1)  # [s, n - lo]
    table[:, lo: hi + 1] = np.where(ok[:, lo - 1: hi], best, _INFEASIBLE)
    return table


def _stage_totals(groups, products) -> np.ndarray:
    """[s, row] sum_g max_p (const_p[s] + products(coef_p)[row]) for pieces (const [s], coef) in
    groups: the stages' totals over rows of mode counts, computed once per distinct row of the
    stages' constants (the middle stages share theirs) and then spread to every stage (integers:
    the same values as summing per stage)."""
    consts = np.stack([const for group in groups for const, _ in group], axis=1)  # [s, piece]
    distinct, inverse = np.unique(consts, axis=0, return_inverse=True)
    totals, p = 0, 0
    for group in groups:
        most = None
        for _, coef in group:
            value = distinct[:, p, None] + products(coef)[None, :]
            most = value if most is None else np.maximum(most, value, out=most)
            p += 1
        totals = totals + most
    return totals[inverse.reshape(-1)]


def _relaxed_phase_fits(ip: IntStageProblem, n: np.ndarray) -> np.ndarray | bool:
    """[stage, row] whether n[row] layers of the relaxed kind (each phase's least bytes per layer
    over the kinds) fit every activation-free phase of stage s: a necessary condition."""
    ok = True
    for fixed, per in ip.phase_arrays:
        ok = ok & (fixed[:, None] + np.asarray(n)[None, :] * int(per.min()) <= ip.capacity_bytes)
    return ok


def _least_memory_plan_cost(ip: IntStageProblem, ends) -> int:
    """Exact step total of the split `ends` with each stage in its least-memory assignment (the
    regime of `memory_regimes` needing the fewest bytes, its first least-memory mode per kind),
    vectorised over stages."""
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    counts = ip.kind_prefix[ends] - ip.kind_prefix[starts]  # [s, k]
    stages = np.arange(ip.num_stages)
    need = np.stack([fixed + prefix[ends, stages] - prefix[starts, stages]
                     for fixed, prefix, _ in ip.memory_regimes])  # [regime, s]
    mode = np.stack([m for _, _, m in ip.memory_regimes])[need.argmin(axis=0), stages]  # [s, k]
    kinds = np.arange(ip.num_kinds)[None, :]
    total = 0
    for group in ip.piece_arrays:
        total = total + np.max(np.stack([const + (coef[kinds, mode] * counts).sum(axis=1)
                                         for const, coef in group]), axis=0)
    return int(np.max(total))


def _near_even_ends(ip: IntStageProblem) -> tuple[int, ...]:
    """Stage ends of the pinned split, else of the split with the remainder on the first stages."""
    counts = ip.layers_per_stage
    if counts is None:
        base, extra = divmod(ip.num_layers, ip.num_stages)
        counts = [base + (1 if s < extra else 0) for s in range(ip.num_stages)]
    return tuple(int(e) for e in np.cumsum(counts))


def _fits(ip: IntStageProblem, ends: tuple[int, ...], capacity_bytes: int | None = None) -> bool:
    """Every stage of `ends` fits `capacity_bytes` (default: the problem's) in its least-memory
    assignment (`IntStageProblem.memory_regimes`)."""
    capacity = ip.capacity_bytes if capacity_bytes is None else capacity_bytes
    return all(ip.least_stage_bytes(s, a, e) <= capacity
               for s, (a, e) in enumerate(zip((0, *ends), ends)))


def _upper_bound(ip: IntStageProblem, ends: tuple[int, ...] | None = None) -> int:
    """Value of a known plan (least-memory modes on the fitting split `ends` or the near-even
    split, whichever is cheaper); the problem must be feasible."""
    ends = ends or feasible_split(ip, ip.capacity_bytes)
    upper = _least_memory_plan_cost(ip, ends)
    even = _near_even_ends(ip)
    if even != ends and _fits(ip, even):
        upper = min(upper, _least_memory_plan_cost(ip, even))
    return upper


def split_lower_bound(ip: IntStageProblem) -> tuple[int, tuple[int, ...] | None, dict]:
    """(LB, layers per stage attaining it, tables): the min-max dynamic program over split points
    on the relaxed stage tables (module docstring); LB is the optimum when K = 1. Returns
    (_INFEASIBLE, None, {}) when no split fits. Computed once per problem (a bound and then a
    solve of the same candidate share it)."""
    return ip.split_bound


def _split_lower_bound(ip: IntStageProblem) -> tuple[int, tuple[int, ...] | None, dict]:
    ends = feasible_split(ip, ip.capacity_bytes)
    if ends is None:
        return _INFEASIBLE, None, {}
    h = _stage_tables(ip, _upper_bound(ip, ends))
    tables = {(s, int(n)): int(h[s, n]) for s, n in zip(*np.nonzero(h < _INFEASIBLE))}
    S, L = ip.num_stages, ip.num_layers
    x = np.arange(L + 1)
    width = x[None, :] - x[:, None]  # [a, b] = b - a
    valid = width >= 1
    width = np.where(valid, width, 0)
    value = np.full(L + 1, _INFEASIBLE, dtype=np.int64)
    value[0] = -_INFEASIBLE
    choice = []
    for s in range(S):
        H = np.where(valid, h[s][width], _INFEASIBLE)
        cand = np.maximum(value[:, None], H)
        # ties: the fewest layers on stage s (the largest a), as the count-by-count pass did
        best_a = L - np.argmin(cand[::-1], axis=0)
        value = cand[best_a, x]
        choice.append(np.where(value < _INFEASIBLE, x - best_a, 0))
    if value[L] >= _INFEASIBLE:
        return _INFEASIBLE, None, tables
    split, b = [], L
    for s in reversed(range(S)):
        n = int(choice[s][b])
        split.append(n)
        b -= n
    return int(value[L]), tuple(reversed(split)), tables


_GRID_LIMIT = 200_000
"""Largest number of per-kind mode-count combinations enumerated for one stage's exact cost."""


_BATCH_CELLS = 50_000
"""Most grid cells `_exact_stages` enumerates in one batch of counts: its int64 arrays stay
within a core's cache (400 KB); on the glm-4.5 programs batches of 10^4-5 x 10^4 cells ran
fastest, 2 x 10^5-10^6 about as slow as one count at a time."""


def _exact_stages(ip: IntStageProblem, s: int, rest: tuple[int, ...], ns: list[int]) -> dict:
    """n -> (least stage-s total over the mode counts that fit, [kind][mode] counts attaining it)
    for a stage holding rest[k] layers of kind k and n of the last kind, or None when nothing
    fits, for each n of `ns` (grids within _GRID_LIMIT), by enumerating every per-kind
    composition. The grid of one vector is the product of its kinds' compositions, the last
    kind's the minor axis (ties go to the first cell in that C order); the grids of one `rest`
    share its rows, so the last kind's compositions of several n are laid side by side as
    columns and enumerated together, at most _BATCH_CELLS cells at a time."""
    R, last = len(ip.modes), ip.num_kinds - 1
    rest_comps = [_compositions(n, R) for n in rest]
    rest_shape = tuple(len(c) for c in rest_comps)
    axes = [tuple(-1 if j == k else 1 for j in range(len(rest))) for k in range(len(rest))]

    def rest_grid(per_kind):  # sum over the rest's kinds, flattened in C order, as a column
        out = np.zeros(rest_shape, dtype=np.int64)
        for k, v in enumerate(per_kind):
            out = out + v.reshape(axes[k])
        return out.reshape(-1, 1)

    mem, out, batch = ip.layer_memory_arrays[s], {}, []
    rest_mem = ip.stage_fixed_memory_bytes[s] + rest_grid([c @ mem[k] for k, c in enumerate(rest_comps)])
    rest_full = rest_grid([ip.full_column(c) for c in rest_comps])
    rest_time = [[const[s] + rest_grid([c @ coef[k] for k, c in enumerate(rest_comps)]) for const, coef in group]
                 for group in ip.piece_arrays]
    for index, n in enumerate(ns):
        batch.append(n)
        cells = math.prod(rest_shape) * sum(math.comb(m + R - 1, R - 1) for m in batch)
        if cells < _BATCH_CELLS and index < len(ns) - 1:
            continue
        parts = [_compositions(m, R) for m in batch]
        starts = np.concatenate(([0], np.cumsum([len(p) for p in parts])))
        rows = np.concatenate(parts)
        fits = (rest_mem + (rows @ mem[last])[None, :]
                - ip.credit(s, rest_full + ip.full_column(rows)[None, :]) <= ip.capacity_bytes)
        total = 0
        for group, rest_group in zip(ip.piece_arrays, rest_time):
            most = None
            for (_, coef), rest_value in zip(group, rest_group):
                value = rest_value + (rows @ coef[last])[None, :]
                most = value if most is None else np.maximum(most, value, out=most)
            total = total + most
        total = np.where(fits, total, _INFEASIBLE)
        for j, m in enumerate(batch):
            lo, hi = starts[j], starts[j + 1]
            if not ip.phase_fits(s, (*rest, m)) or not fits[:, lo:hi].any():
                out[m] = None
                continue
            a, b = divmod(int(np.argmin(total[:, lo:hi])), int(hi - lo))
            at = np.unravel_index(a, rest_shape)
            out[m] = (int(total[a, lo + b]),
                      (*(tuple(int(x) for x in rest_comps[k][at[k]]) for k in range(len(rest))),
                       tuple(int(x) for x in rows[lo + b])))
        batch = []
    return out


def exact_split(ip: IntStageProblem, upper: int):
    """(optimum, ends, [stage][kind][mode] counts) of the program by the min-max dynamic program
    over split points V_s(b) = min_a max(V_{s-1}(a), H_s(a, b)), H_s the exact least total of
    stage s holding layers a..b-1 (`_exact_stages`), for any number of kinds; only stages whose
    relaxed count bound is <= `upper` (the value of a known plan) are costed. None when some
    stage's grid is too large to enumerate.

    Vectorised: H_s is a (L+1) x (L+1) table filled per distinct layer-count vector (a stage
    holding one kind only reads a per-count table built in one pass, `_one_kind_stage_table`),
    and each DP step is a column-wise min over a of max(V(a), H(a, b)); ties go to the least a."""
    S, L = ip.num_stages, ip.num_layers
    groups, _ = _relaxed(ip)
    prefix = ip.kind_prefix
    ns = np.arange(L + 1, dtype=np.int64)
    starts, stops = np.meshgrid(ns, ns, indexing="ij")  # [a, b]
    width = stops - starts
    value = np.full(L + 1, _INFEASIBLE, dtype=np.int64)
    value[0] = -_INFEASIBLE
    lows = sum(np.max(np.stack([const[:, None] + ns[None, :] * int(q.min()) for const, q in group]),
                      axis=0) for group in groups)  # [s, n]
    kept = np.flatnonzero((lows <= upper).any(axis=0)[: L - S + 2])
    one_kind = _OneKindTables(ip, int(kept[-1]) if len(kept) else 1, lazy=ip.layers_per_stage is not None)
    chain, clipped, nonempty = [], np.clip(width, 0, L), width >= 1
    for s in range(S):
        ok = nonempty & (stops <= L - S + s + 1) & (lows[s][clipped] <= upper)
        if ip.layers_per_stage is not None:
            ok &= width == ip.layers_per_stage[s]
        ok &= (value < _INFEASIBLE)[:, None]
        table = _stage_cost_table(ip, s, starts[ok], stops[ok], prefix, one_kind)
        if table is None:
            return None
        cost, picks = table
        H = np.full((L + 1, L + 1), _INFEASIBLE, dtype=np.int64)
        H[ok] = cost
        cand = np.maximum(value[:, None], H)  # _INFEASIBLE where H is: value <= _INFEASIBLE
        best_a = np.argmin(cand, axis=0)
        value = cand[best_a, ns]
        chain.append((best_a, picks))
    if value[L] >= _INFEASIBLE:
        return _INFEASIBLE, None, None
    ends, counts, b = [], [], L
    for s in reversed(range(S)):
        best_a, picks = chain[s]
        a = int(best_a[b])
        ends.append(b)
        counts.append(picks(tuple(int(x) for x in prefix[b] - prefix[a])))
        b = a
    return int(value[L]), tuple(reversed(ends)), tuple(reversed(counts))


def _stage_cost_table(ip: IntStageProblem, s: int, a: np.ndarray, b: np.ndarray, prefix,
                      one_kind: _OneKindTables):
    """(exact stage-s cost of holding layers a[i]..b[i]-1, picks) for the given pairs
    (_INFEASIBLE where nothing fits), picks(vec) the [kind][mode] counts attaining the cost of
    kind-count vector vec; None when a grid is too large. A pair holding one kind reads that
    kind's per-count table; each distinct mixed vector is enumerated once (`_exact_stages`)."""
    vecs = prefix[b] - prefix[a]
    nonzero = vecs > 0
    single = nonzero.sum(axis=1) == 1
    costs = np.full(len(vecs), _INFEASIBLE, dtype=np.int64)
    K, R = ip.num_kinds, len(ip.modes)
    tables, mixed = {}, {}
    for k in range(K):
        rows = np.flatnonzero(single & nonzero[:, k])
        if not len(rows):
            continue
        counts = vecs[rows, k]
        if math.comb(int(counts.max()) + R - 1, R - 1) > _GRID_LIMIT:  # its grid size
            return None
        tables[k] = lambda n, k=k: one_kind.comps(k, s, n)
        costs[rows] = one_kind.least(k, s, counts)
    mixed_rows = np.flatnonzero(~single)
    keys = [tuple(int(x) for x in vecs[i]) for i in mixed_rows]
    distinct = list(dict.fromkeys(keys))
    if any(math.prod(math.comb(n + R - 1, R - 1) for n in vec) > _GRID_LIMIT for vec in distinct):
        return None  # a grid too large to enumerate
    by_rest: dict[tuple, list[int]] = {}
    for vec in distinct:
        by_rest.setdefault(vec[:-1], []).append(vec[-1])
    for rest, ns in by_rest.items():
        for n, got in _exact_stages(ip, s, rest, ns).items():
            mixed[(*rest, n)] = got
    for i, vec in zip(mixed_rows, keys):
        if mixed[vec] is not None:
            costs[i] = mixed[vec][0]

    def picks(vec: tuple[int, ...]):
        if vec in mixed:
            return mixed[vec][1]
        k = next(j for j, n in enumerate(vec) if n)
        return tuple(tuple(int(x) for x in tables[k](vec[k])) if j == k else (0,) * R
                     for j in range(K))

    return costs, picks


class _OneKindTables:
    """Per kind k, for every stage s and count n = 1..nmax at once: the least stage-s total of n
    kind-k layers over the mode counts that fit (_INFEASIBLE if none) and the first mode counts
    attaining it in `_compositions` order (as `_exact_stages` picks); built on first use.

    lazy: each (kind, stage, count) computed alone when first asked for, the same numbers from the
    compositions of that count only: with the split pinned each stage asks for one count, and the
    tables over every stage and count 1..nmax would be mostly unread."""

    def __init__(self, ip: IntStageProblem, nmax: int, lazy: bool = False):
        self.ip, self.nmax, self._tables = ip, max(1, nmax), {}
        self.lazy, self._entries = lazy, {}

    def least(self, k: int, s: int, counts: np.ndarray) -> np.ndarray:
        """The least stage-s total of each of `counts` kind-k layers (_INFEASIBLE if none fits)."""
        if not self.lazy:
            return self.table(k)[0][s][counts]
        return np.array([self._entry(k, s, n)[0] for n in counts.tolist()], dtype=np.int64)

    def comps(self, k: int, s: int, n: int) -> np.ndarray:
        """The first mode counts of n kind-k layers attaining `least` on stage s."""
        return self.table(k)[1](s, n) if not self.lazy else self._entry(k, s, n)[1]

    def _entry(self, k: int, s: int, n: int) -> tuple[int, np.ndarray]:
        """`_build`'s numbers for one stage and count: its segment of the rows is
        `_compositions(n, R)` (`_all_compositions`), each row's fit and total computed as there."""
        key = (k, s, n)
        if key not in self._entries:
            ip = self.ip
            rows = _compositions(n, len(ip.modes))
            mem = np.array(ip.kind_memory_bytes[s][k], dtype=np.int64) + ip.kind_state_bytes[k]  # [r]
            fits = (np.int64(ip.stage_fixed_memory_bytes[s]) + rows @ mem
                    - ip.credit(s, ip.full_column(rows)) <= ip.capacity_bytes)
            for fixed, per in ip.phase_arrays:
                fits &= fixed[s] + rows.sum(axis=1) * int(per[k]) <= ip.capacity_bytes
            total = 0
            for group in ip.piece_arrays:
                total = total + np.max(np.stack([const[s] + rows @ coef[k] for const, coef in group]), axis=0)
            total = np.where(fits, total, _INFEASIBLE)
            at = int(np.argmin(total))
            self._entries[key] = (int(total[at]), rows[at])
        return self._entries[key]

    def table(self, k: int):
        """([s, n] least total, comps(s, n) -> mode counts) for kind k."""
        if k not in self._tables:
            self._tables[k] = self._build(k)
        return self._tables[k]

    def _build(self, k: int):
        ip, nmax, R = self.ip, self.nmax, len(self.ip.modes)
        rows, starts = _all_compositions(nmax, R)
        mem = (np.array(ip.kind_memory_bytes, dtype=np.int64)[:, k, :]
               + ip.kind_state_bytes[k])  # [s, r]
        fits = (np.array(ip.stage_fixed_memory_bytes, dtype=np.int64)[:, None]
                + mem @ rows.T - _credits(ip, ip.full_column(rows)) <= ip.capacity_bytes)
        for fixed, per in ip.phase_arrays:
            fits &= fixed[:, None] + rows.sum(axis=1)[None, :] * int(per[k]) <= ip.capacity_bytes
        total = np.where(fits, _stage_totals(ip.piece_arrays, lambda coef: rows @ coef[k]),
                         _INFEASIBLE)
        seg = starts[:-1]
        best = np.full((ip.num_stages, nmax + 1), _INFEASIBLE, dtype=np.int64)
        best[:, 1:] = np.minimum.reduceat(total, seg, axis=1)

        def comps(s: int, n: int) -> np.ndarray:  # the first row of count n attaining best[s, n]
            return rows[starts[n - 1] + int(np.argmin(total[s, starts[n - 1]: starts[n]]))]

        return best, comps


def _hint(model: cp_model.CpModel, ip: IntStageProblem, var: dict, ends, counts) -> None:
    """A complete hint: split `ends`, [stage][kind][mode] `counts`, and the y, T, z they imply."""
    totals = []
    for s in range(ip.num_stages):
        if s < ip.num_stages - 1:
            model.AddHint(var["b"][(s,)], ends[s])
            for k in range(ip.num_kinds if ip.num_kinds > 1 else 0):
                model.AddHint(var["cum"][(s, k)], int(ip.kind_prefix[ends[s], k]))
        for k in range(ip.num_kinds):
            model.AddHint(var["n"][(s, k)], sum(counts[s][k]))
            for r, x in enumerate(counts[s][k]):
                model.AddHint(var["c"][(s, k, r)], x)
        total = 0
        for g, group in enumerate(ip.time_groups):
            y = max(const[s] + sum(q * x for row, xs in zip(coef, counts[s]) for q, x in zip(row, xs))
                    for const, coef in group)
            model.AddHint(var["y"][(s, g)], y)
            total += y
        model.AddHint(var["T"][(s,)], total)
        if (s,) in var["u"]:
            model.AddHint(var["u"][(s,)], int(any(row[ip.modes.index("full")] for row in counts[s])))
        totals.append(total)
    model.AddHint(var["z"], max(totals))


def _stage_modes(ip: IntStageProblem, s: int, n: int) -> tuple[int, ...]:
    """Least-cost fitting mode counts for n kind-0 layers on stage s (one kind), by enumeration."""
    groups, mem = _relaxed(ip)
    comps = _compositions(n, len(ip.modes))
    fits = (ip.stage_fixed_memory_bytes[s] + comps @ mem[s] - ip.credit(s, ip.full_column(comps))
            <= ip.capacity_bytes) & ip.phase_fits(s, [n])
    cost = np.where(fits, _cost_of(groups, s, comps), _INFEASIBLE)
    return tuple(int(x) for x in comps[int(np.argmin(cost))])


# ---------------------------------------------------------------- extraction


def _extract(ip: IntStageProblem, solver: cp_model.CpSolver, var: dict, status: str,
             wall_s: float) -> StageSolution:
    S, K, R = ip.num_stages, ip.num_kinds, len(ip.modes)
    ends = [ip.num_layers if s == S - 1 else solver.Value(var["b"][(s,)]) for s in range(S)]
    counts = [[[solver.Value(var["c"][(s, k, r)]) for r in range(R)] for k in range(K)]
              for s in range(S)]
    if K == 1:  # polish: the least-cost fitting modes of every stage (never raises a stage's total)
        counts = [[list(_stage_modes(ip, s, e - a))] for s, (a, e) in enumerate(zip((0, *ends), ends))]
    return _solution(ip, ends, counts, status=status, bound=math.ceil(solver.BestObjectiveBound()),
                     proof=CP_SAT_PROOF, wall_s=wall_s)


def _solution(ip: IntStageProblem, ends, counts, *, status: str, bound: int, proof: str,
              wall_s: float) -> StageSolution:
    """The StageSolution of stage `ends` and [stage][kind][mode] `counts`."""
    S, K, R = ip.num_stages, ip.num_kinds, len(ip.modes)
    ends = [0, *(int(e) for e in ends)]
    times = [stage_cost(ip, s, counts[s]) for s in range(S)]
    memory = [stage_memory(ip, s, counts[s]) for s in range(S)]
    objective = max(times)
    return StageSolution(
        status=status,
        objective_s=objective * TIME_UNIT_S,
        bound_s=min(bound, objective) * TIME_UNIT_S,
        objective_ns=objective,
        total_time_ns=sum(times),
        wall_s=wall_s,
        layers_per_stage=tuple(ends[s + 1] - ends[s] for s in range(S)),
        recompute_per_stage=tuple(
            {ip.modes[r]: sum(counts[s][k][r] for k in range(K)) for r in range(R)}
            for s in range(S)),
        layer_recompute=_per_layer_modes(ip, ends, counts),
        stage_time_s=tuple(t * TIME_UNIT_S for t in times),
        stage_memory_bytes=tuple(memory),
        proof=proof,
    )


def stage_memory(ip: IntStageProblem, s: int, counts: list[list[int]]) -> int:
    """Bytes on stage s given counts[k][r] of kind-k layers in mode r: the backward phases' or an
    activation-free phase's, whichever is larger."""
    full = sum(int(ip.full_column(np.array(row))) for row in counts)
    backward = ip.stage_fixed_memory_bytes[s] - int(ip.credit(s, full)) + sum(
        ip.kind_state_bytes[k] * sum(counts[k])
        + sum(ip.kind_memory_bytes[s][k][r] * counts[k][r] for r in range(len(ip.modes)))
        for k in range(ip.num_kinds))
    return max(backward, int(ip.phase_bytes(s, [sum(row) for row in counts])))


def _credits(ip: IntStageProblem, full_counts: np.ndarray) -> np.ndarray | int:
    """[stage, row] `IntStageProblem.credit` of every stage for rows of full counts."""
    if not ip.full_working_set_bytes:
        return 0
    ws = np.array(ip.full_working_set_bytes, dtype=np.int64)[:, None]
    return np.where(np.asarray(full_counts)[None, :] == 0, ws, 0)


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
        status=status, objective_s=None, bound_s=None, objective_ns=None, total_time_ns=None,
        wall_s=wall_s, layers_per_stage=None, recompute_per_stage=None, layer_recompute=None,
        stage_time_s=None, stage_memory_bytes=None, diagnosis=diagnosis)


# ---------------------------------------------------------------- feasibility and diagnosis


def feasible_split(ip: IntStageProblem, capacity_bytes: int) -> tuple[int, ...] | None:
    """Stage ends of a split fitting `capacity_bytes` with every stage in its least-memory
    assignment (`IntStageProblem.memory_regimes`), or None when none exists (exact).

    Memory is non-negative, so stage s starting at layer a can end anywhere in (a, R_s(a)], R_s
    the largest end any regime allows, found by binary search on each regime's prefix sums.
    Forward pass: the set of positions where stage s can end is the union of those intervals
    over the positions where stage s-1 can end; a backward pass picks one chain.
    O(S L log L), vectorised.
    """
    if ip.layers_per_stage is not None:
        return _pinned_fits(ip, capacity_bytes)
    S, L = ip.num_stages, ip.num_layers
    starts = np.arange(L + 1)
    reach_tables, ends = [], np.zeros(L + 1, dtype=bool)
    ends[0] = True
    phases = [(fixed, ip.kind_prefix @ per) for fixed, per in ip.phase_arrays]
    for s in range(S):
        reach = np.max([np.searchsorted(prefix[:, s], prefix[:, s] + capacity_bytes - fixed[s],
                                        side="right") - 1
                        for fixed, prefix, _ in ip.memory_regimes], axis=0)
        for fixed, prefix in phases:  # every activation-free phase must fit too
            reach = np.minimum(reach, np.searchsorted(prefix, prefix + capacity_bytes - fixed[s],
                                                      side="right") - 1)
        reach = np.minimum(reach, L - (S - 1 - s))
        ok = ends & (reach > starts)
        reach_tables.append(np.where(ok, reach, -1))
        diff = (np.bincount(starts[ok] + 1, minlength=L + 2)
                - np.bincount(reach[ok] + 1, minlength=L + 2))
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
    return ends if _fits(ip, ends, capacity_bytes) else None


def min_stage_memory_bytes(ip: IntStageProblem) -> tuple[int, ...]:
    """[stage] least bytes stage s can need: its least-memory assignment of its cheapest
    admissible single layer (stage s can hold layer l only if s <= l <= L - S + s)."""
    S, L = ip.num_stages, ip.num_layers
    return tuple(min(ip.least_stage_bytes(s, l, l + 1) for l in range(s, L - S + s + 1))
                 for s in range(S))


def memory_diagnosis(ip: IntStageProblem) -> MemoryDiagnosis:
    """The smallest achievable largest per-stage excess over capacity (least-memory modes), found
    by bisection on the capacity with the exact feasibility test, and the stage that attains it."""
    floors = min_stage_memory_bytes(ip)
    capacity = ip.capacity_bytes
    if feasible_split(ip, capacity) is not None:
        lo, hi = max(floors) - 1, capacity  # smallest feasible capacity lies in (lo, hi]
    else:
        top = max(ip.least_stage_bytes(s, 0, ip.num_layers) for s in range(ip.num_stages))
        lo, hi = max(capacity, max(floors) - 1), top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible_split(ip, mid) is not None else (mid, hi)
    ends = feasible_split(ip, hi)
    used = [ip.least_stage_bytes(s, b, e) for s, (b, e) in enumerate(zip((0, *ends), ends))]
    stage = max(range(len(used)), key=lambda s: used[s])
    return MemoryDiagnosis(stage=stage, excess_bytes=hi - capacity, capacity_bytes=capacity,
                           min_stage_memory_bytes=floors)


# ---------------------------------------------------------------- input validation


def _check_shapes(p: StageProblem) -> None:
    S, L, K, R = (len(p.stage_fixed_memory_bytes), len(p.layer_kinds), len(p.kind_state_bytes),
                  len(p.modes))
    if S < 1 or L < S:
        raise SpecError(f"need 1 <= pipeline stages ({S}) <= layers ({L})", key="layers_per_stage")
    if any(not 0 <= k < K for k in p.layer_kinds):
        raise SpecError(f"layer kinds must lie in 0..{K - 1}", key="layer_kinds")
    shapes = {
        "time_groups": len(p.time_groups) >= 1 and all(
            len(group) >= 1 and all(len(const) == S and len(coef) == K and all(len(row) == R for row in coef)
                                    for const, coef in group) for group in p.time_groups),
        "kind_memory_bytes": len(p.kind_memory_bytes) == S and all(
            len(stage) == K and all(len(row) == R for row in stage) for stage in p.kind_memory_bytes),
    }
    for key, ok in shapes.items():
        if not ok:
            raise SpecError(f"shape must follow stages={S}, kinds={K}, modes={R}", key=key)
    if p.full_working_set_bytes and len(p.full_working_set_bytes) != S:
        raise SpecError(f"shape must follow stages={S}", key="full_working_set_bytes")
    if any(w > f for w, f in zip(p.full_working_set_bytes, p.stage_fixed_memory_bytes)):
        raise SpecError("a working set credited back cannot exceed its stage's fixed bytes",
                        key="full_working_set_bytes")
    if any(len(fixed) != S or len(per) != K for fixed, per in p.phase_memory_bytes):
        raise SpecError(f"shape must follow stages={S}, kinds={K}", key="phase_memory_bytes")
    values = [*p.kind_state_bytes, *np.ravel(p.kind_memory_bytes), *p.stage_fixed_memory_bytes,
              *p.full_working_set_bytes,
              *(x for fixed, per in p.phase_memory_bytes for x in (*fixed, *per))]
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise SpecError("bytes must be finite and >= 0", key="StageProblem")
    times = [x for group in p.time_groups for const, coef in group
             for x in (*const, *np.ravel(coef))]
    if not all(math.isfinite(x) for x in times):
        raise SpecError("times must be finite", key="time_groups")
    pinned = p.layers_per_stage
    if pinned is not None and (len(pinned) != S or min(pinned) < 1 or sum(pinned) != L):
        raise SpecError(f"value {shown(pinned)} must be {S} integers >= 1 summing to {L}",
                        key="layers_per_stage")
