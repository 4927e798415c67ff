"""Enumerate candidate layouts: meshes dp*tp*pp*cp = N (ep inside) times the discrete knobs.

Structural rules applied here (everything else is the caller's `validate`):

- dp * tp * pp * cp = N, the GPU count (every ordered factorization; a pinned degree is kept).
- tp <= the scale-up domain (`SearchSpace.max_tp`) unless tp is pinned: a TP group outside
  NVLink pays a network all-reduce per layer. Counted as the rejection reason
  "tp exceeds the scale-up domain".
- cp <= `SearchSpace.max_cp` unless cp is pinned: `plan` passes seq_len / 4,096, NVIDIA's
  guidance of no context parallelism below 4,096 tokens per rank (`rules.CP_MIN_TOKENS_PER_RANK`).
  Counted as the rejection reason "cp below 4,096 tokens per rank".
- Experts: ep * etp divides dp * cp * tp, i.e. world_size % (etp * ep * pp) == 0, and the
  expert-data-parallel degree is world_size // (etp * ep * pp).
  Source: Megatron-LM `megatron/core/parallel_state.py`, `initialize_model_parallel`
  (`expert_tensor_model_pipeline_parallel_size = etp * ep * pp`;
  `expert_data_parallel_size = world_size // expert_tensor_model_pipeline_parallel_size`,
  RuntimeError when not divisible).

Knobs without effect are not enumerated (duplicates, not rejections): sequence parallelism only
when tp > 1, vpp > 1 only when pp > 1, ZeRO stage > 0 only when dp x cp > 1 (the group ZeRO
shards over, `zero_shard_group`), ep > 1 only for MoE.

Rejections are data: every mesh or candidate that fails keeps its reason, counted per reason for
the `rejected: [{reason, count}]` output. A mesh failing `validate_mesh` is counted once (not once
per knob combination).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from functools import lru_cache
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields

from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.mesh import Mesh
from planner.placement.rules import CP_MIN_TOKENS_PER_RANK

DEGREES = ("dp", "tp", "pp", "cp")

CP_SHORT = f"cp below {CP_MIN_TOKENS_PER_RANK:,} tokens per rank"
"""Rejection reason of a free cp above `SearchSpace.max_cp`."""
KNOBS = ("ep", "etp", "micro_batch_size", "zero_stage", "vpp", "sequence_parallel", "offload")
LAYOUT_FIELDS = tuple(f.name for f in fields(Layout))
FIXABLE = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "micro_batch_size", "vpp",
           "sequence_parallel", "recompute")
"""Keys `planner plan --fix` accepts (degrees and knobs a search may pin). Kept here, below the
solver, so the CLI can name them without importing OR-Tools."""

Validator = Callable[[Layout], Sequence[object]]
"""Returns the violations of a layout: strings (the reason) or objects with `.rule` (the reason)
and `.message`; empty when the layout is valid."""


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """What to enumerate for one model on one cluster."""

    num_gpus: int
    """GPUs to use, N = dp * tp * pp * cp."""
    max_tp: int
    """Largest tp enumerated: the scale-up domain (NVLink) size by default, GPUs."""
    max_cp: int | None = None
    """Largest cp enumerated unless cp is pinned (None: no limit); `plan` passes the largest cp
    that keeps `rules.CP_MIN_TOKENS_PER_RANK` tokens of the sequence per rank."""
    moe: bool = False
    """Model has routed experts (enumerate ep)."""
    micro_batch_sizes: tuple[int, ...] = (1, 2, 4)
    """Micro-batch sizes to try, sequences."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    """ZeRO stages to try (when dp x cp > 1, `zero_shard_group`)."""
    vpp_values: tuple[int, ...] = (1,)
    """Virtual pipeline stages per rank to try (when pp > 1)."""
    layers: int | None = None
    """Decoder layers: when given, a searched vpp > 1 must split them into pp x vpp equal chunks
    (interleaving with chunks of different sizes only when pinned: its stage program is not exact,
    `plan._pinned_split`)."""
    sequence_parallel: tuple[bool, ...] = (True, False)
    """Sequence-parallel settings to try (when tp > 1)."""
    offload_options: tuple[frozenset[str], ...] = (frozenset(),)
    """Offload sets to try (each a subset of {optimizer, parameters, activations})."""
    etp_values: tuple[int, ...] = (1,)
    """Expert tensor-parallel degrees to try (MoE)."""
    fixed: Mapping[str, object] = field(default_factory=dict)
    """Pinned Layout fields (`--fix tp=8`): a pinned degree or knob is the only value tried, and
    a pinned tp overrides `max_tp`; other Layout fields pass through to every candidate."""
    base: Mapping[str, object] = field(default_factory=dict)
    """Layout fields common to every candidate: global_batch_size, seq_len, optimizer, ..."""

    def __post_init__(self) -> None:
        for key in (*self.fixed, *self.base):
            if key not in LAYOUT_FIELDS:
                raise SpecError(f"unknown field {key!r}; allowed: {', '.join(LAYOUT_FIELDS)}",
                                key="fix")
        if self.num_gpus < 1 or self.max_tp < 1:
            raise SpecError(f"num_gpus={self.num_gpus} and max_tp={self.max_tp} must be >= 1",
                            key="gpus")


@dataclass
class Rejections:
    """Reasons candidates were rejected, counted (mutable tally filled by the enumerator)."""

    counts: Counter = field(default_factory=Counter)
    """reason -> number of meshes or candidates rejected for it (first violation only)."""
    examples: dict = field(default_factory=dict)
    """reason -> message of the first rejection for it."""

    def add(self, reason: str, message: str = "", count: int = 1) -> None:
        """Count `count` rejections for one reason."""
        self.counts[reason] += count
        self.examples.setdefault(reason, message or reason)

    def merge(self, other: Rejections, times: int = 1) -> None:
        """Count `other`'s rejections here `times` over (its examples where this has none yet)."""
        for reason, count in other.counts.items():
            self.add(reason, other.examples[reason], count * times)

    @property
    def total(self) -> int:
        """Rejections counted."""
        return sum(self.counts.values())

    def as_list(self) -> list[dict]:
        """[{reason, count}] most frequent first, for the plan output."""
        return [{"reason": r, "count": c} for r, c in
                sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))]


@lru_cache(maxsize=4096)
def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending (cached: do not modify the list)."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def factorizations(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every ordered tuple of `parts` positive integers whose product is n."""
    if parts == 1:
        yield (n,)
        return
    for d in divisors(n):
        for rest in factorizations(n // d, parts - 1):
            yield (d, *rest)


def factorization_count(n: int, parts: int) -> int:
    """How many ordered tuples of `parts` positive integers multiply to n (`factorizations`,
    without building them): each prime's exponent a spread over the parts, C(a + parts - 1,
    parts - 1) ways, independently per prime (stars and bars)."""
    if parts == 0:
        return 1 if n == 1 else 0
    count = 1
    for exponent in _prime_exponents(n):
        count *= math.comb(exponent + parts - 1, parts - 1)
    return count


@lru_cache(maxsize=4096)
def _prime_exponents(n: int) -> tuple[int, ...]:
    """Exponents of n's prime factors (trial division, O(sqrt n))."""
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            e = 0
            while n % p == 0:
                n, e = n // p, e + 1
            out.append(e)
        p += 1
    return (*out, 1) if n > 1 else tuple(out)


def meshes(space: SearchSpace, rejections: Rejections) -> Iterator[dict[str, int]]:
    """Degrees {dp, tp, pp, cp} with product N, pinned degrees kept, tp within the domain.

    Meshes come in the order of `factorizations` over the free degrees (DEGREES order). A tp over
    the domain refuses every mesh that has the same degrees before it and that tp: the block is
    counted in one step (`factorization_count` of what is left for the degrees after tp), not
    enumerated (a million-GPU request has tens of thousands)."""
    pinned = {k: int(space.fixed[k]) for k in DEGREES if k in space.fixed}
    product = 1
    for value in pinned.values():
        product *= value
    if product < 1 or space.num_gpus % product:
        named = " x ".join(f"{k}={v}" for k, v in pinned.items())
        named += f" = {product}" if len(pinned) > 1 else ""
        rejections.add("degrees do not multiply to the GPU count",
                       f"pinned {named} does not divide {space.num_gpus} GPUs; "
                       f"fix: pin degrees whose product divides {space.num_gpus} (its divisors: "
                       f"{', '.join(map(str, divisors(space.num_gpus)[:12]))}"
                       f"{', ...' if len(divisors(space.num_gpus)) > 12 else ''})")
        return
    free = [k for k in DEGREES if k not in pinned]
    if not free:
        if product == space.num_gpus:
            yield dict(pinned)
        else:
            rejections.add("degrees do not multiply to the GPU count", str(pinned))
        return
    for values in _free_degrees(space, free, space.num_gpus // product, rejections):
        yield {**pinned, **dict(zip(free, values))}


def _free_degrees(space: SearchSpace, free: list[str], rest: int,
                  rejections: Rejections) -> Iterator[tuple[int, ...]]:
    """`factorizations(rest, len(free))` but for the tuples whose free tp exceeds the domain,
    counted in `rejections` a block at a time (`meshes`)."""
    axis, later = free[0], len(free) - 1
    for value in divisors(rest) if later else (rest,):
        if axis == "tp" and value > space.max_tp:
            rejections.add("tp exceeds the scale-up domain",
                           f"tp={value} > {space.max_tp} GPUs per scale-up domain",
                           factorization_count(rest // value, later))
            continue
        if axis == "cp" and space.max_cp is not None and value > max(1, space.max_cp):
            rejections.add(CP_SHORT, f"cp={value} leaves fewer than {CP_MIN_TOKENS_PER_RANK:,} tokens of "
                                     f"the sequence per rank (pin it with --fix cp={value} to search it)",
                           factorization_count(rest // value, later))
            continue
        if not later:
            yield (value,)
            continue
        for tail in _free_degrees(space, free[1:], rest // value, rejections):
            yield (value, *tail)


def _expert_options(space: SearchSpace, mesh: dict[str, int],
                    rejections: Rejections) -> Iterator[tuple[int, int]]:
    """(ep, etp) with ep * etp dividing dp * cp * tp (Megatron expert grid)."""
    inner = _expert_host(mesh)
    for etp, eps in _expert_candidates(space, inner):
        for ep in _fitting(inner, etp, eps, rejections):
            yield ep, etp


def _passing_experts(mesh: dict[str, int], options: list[tuple[int, int]], validate: Validator,
                     rejections: Rejections) -> list[tuple[int, int]]:
    """The expert options of `mesh` that `validate` (reading only ep, etp and dp * cp * tp)
    passes; each refused one counted under its first violation."""
    return [(ep, etp) for ep, etp in options
            if not _refused(validate({**mesh, "ep": ep, "etp": etp}), rejections)]


def _expert_option_count(space: SearchSpace, mesh: dict[str, int], rejections: Rejections) -> int:
    """How many options `_expert_options` yields for `mesh`, its rejections counted alike, without
    building them (a mesh refused whatever its ep has up to hundreds): every divisor of
    dp * cp * tp / etp fits."""
    inner, count = _expert_host(mesh), 0
    for etp, eps in _expert_candidates(space, inner):
        # the eps tried are then divisors(inner // etp) (`_expert_candidates`): every one fits
        whole = space.moe and "ep" not in space.fixed and inner % etp == 0
        count += len(eps) if whole else sum(1 for _ in _fitting(inner, etp, eps, rejections))
    return count


def _expert_host(mesh: dict[str, int]) -> int:
    """dp * cp * tp of a degrees mapping (`Mesh.expert_host`: the ranks the expert group divides)."""
    return Mesh(dp=mesh["dp"], tp=mesh["tp"], cp=mesh["cp"]).expert_host


def _fitting(inner: int, etp: int, eps: list[int], rejections: Rejections) -> Iterator[int]:
    """The ep of `eps` with ep * etp dividing `inner`; the others counted as rejected."""
    for ep in eps:
        if inner % (ep * etp):
            rejections.add("ep * etp must divide dp * cp * tp", f"ep={ep} etp={etp} vs dp*cp*tp={inner}")
            continue
        yield ep


def _expert_candidates(space: SearchSpace, inner: int) -> Iterator[tuple[int, list[int]]]:
    """(etp, the ep values tried with it) for a mesh whose dp * cp * tp is `inner`."""
    etps = [int(space.fixed["etp"])] if "etp" in space.fixed else list(space.etp_values)
    for etp in etps:
        if "ep" in space.fixed:
            yield etp, [int(space.fixed["ep"])]
        elif not space.moe:
            yield etp, [1]
        else:
            yield etp, divisors(inner // etp) if inner % etp == 0 else [1]


def zero_shard_group(mesh: dict[str, int]) -> int:
    """Ranks ZeRO / FSDP shards the dense model states over: dp x cp (before any HSDP split).

    At dp = 1 with cp > 1 ZeRO still shards (halving the optimizer state at cp = 2), so its stages
    are searched whenever this exceeds 1. Every framework the planner emits shards over dp x cp:
    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/process_groups_config.py l. 373-374
    (`dp_cp_group = parallel_state.get_data_parallel_group(with_context_parallel=True, ...)`), the
    group megatron/core/optimizer/__init__.py l. 1141 hands the distributed optimizer
    (`data_parallel_group=dp_cp_group`) and megatron/core/distributed/fsdp/mcore_fsdp_adapter.py
    l. 352-367 Megatron-FSDP; pytorch/torchtitan@b5bcd76 torchtitan/distributed/parallel_dims.py
    l. 281 (`fsdp = self.dp_shard * self.cp`, the FSDP mesh dim) and l. 644-645 (`fsdp_enabled`:
    dp_shard > 1 or cp > 1); deepspeedai/DeepSpeed@edaa722 deepspeed/runtime/engine.py l. 1839
    and l. 2410 (ZeRO-1/2 `dp_process_group=self.seq_data_parallel_group`, data x sequence
    parallel). The memory model shards over the same axes (`placement.strategies.zero`)."""
    return mesh["dp"] * mesh["cp"]


def _knob_values(space: SearchSpace, mesh: dict[str, int]) -> dict[str, tuple]:
    """Values of each knob for this mesh; pinned knobs keep only their pinned value."""
    values = {
        "micro_batch_size": space.micro_batch_sizes,
        "zero_stage": space.zero_stages if zero_shard_group(mesh) > 1 else (0,),
        # uneven chunks too (a layout string or the account-for split, `plan._with_split`): a
        # virtual stage needs only one slot, and Megatron's account-for options count the
        # embedding and the loss as one slot each (126 layers + 2 = 16 x 8 virtual stages)
        "vpp": tuple(v for v in space.vpp_values if v == 1 or space.layers is None
                     or space.layers + 2 >= mesh["pp"] * v) if mesh["pp"] > 1 else (1,),
        "sequence_parallel": space.sequence_parallel if mesh["tp"] > 1 else (False,),
        "offload": space.offload_options,
    }
    for key in values:
        if key in space.fixed:
            values[key] = (space.fixed[key],)
    return values


def _passthrough(space: SearchSpace) -> dict[str, object]:
    return {**space.base, **{k: v for k, v in space.fixed.items()
                             if k not in DEGREES and k not in KNOBS}}


def candidate_layouts(space: SearchSpace, validate: Validator, rejections: Rejections, *,
                      validate_mesh: Validator | None = None,
                      validate_knobs: Validator | None = None,
                      validate_degrees: Validator | None = None,
                      validate_experts: Validator | None = None) -> Iterator[Layout]:
    """Yield every valid Layout of `space`; count every rejected one in `rejections`.

    Args:
        space: degrees, knobs and pins to enumerate.
        validate: all correctness rules for a full candidate (e.g. the rules of
            `planner.placement`); violations are strings or objects with `.rule`/`.message`.
        rejections: tally filled with one reason per rejected mesh or candidate.
        validate_mesh: optional rules that depend on the degrees only, run once per mesh (with
            the knobs at their first values) so a bad mesh is rejected once, not once per knob.
        validate_knobs: optional rules that do not read the micro-batch size, run once per mesh
            and knob combination (at the first micro-batch size); a rejection counts once per
            micro-batch size, as if each candidate had been built and rejected, and `validate`
            then only needs the rules that read it.
        validate_degrees: optional rules that read only tp, pp, vpp and the split (and the world
            size, always N), checked before any rule that reads ep or etp: run once per (tp, pp)
            (at ep = etp = 1 and the first knob values); when it fails, every expert option of
            every mesh of that tp and pp is rejected with its first violation, counted as
            `validate_mesh` would have counted each (a million-GPU request has millions).
        validate_experts: with `validate_degrees`, the rules checked right after those, reading
            only ep, etp and dp * cp * tp: called with the degrees {dp, tp, pp, cp, ep, etp} of
            each expert option before `validate_mesh` (no Layout is built; the verdicts of one
            dp * cp * tp are reused for every mesh that has it), same counting. `validate_mesh`
            then runs once per mesh, at its first passing expert option: its rules other than
            those two sets must not read ep or etp (a failure counts once per passing option).
    """
    common = _passthrough(space)
    staged = validate_degrees is not None
    degree_verdicts: dict[tuple[int, int], Rejections | None] = {}
    refused_again: Counter = Counter()  # (tp, pp) -> meshes refused after the first, counted at the end
    expert_options: dict[int, tuple[list[tuple[int, int]], Rejections]] = {}
    for mesh in meshes(space, rejections):
        if staged:
            key = (mesh["tp"], mesh["pp"])
            if key not in degree_verdicts:
                degree_verdicts[key] = _degree_verdict(space, mesh, validate_degrees, common)
                if degree_verdicts[key] is not None:
                    rejections.merge(degree_verdicts[key])  # its examples, in enumeration order
                    continue
            if degree_verdicts[key] is not None:
                refused_again[key] += 1
                continue
        inner = _expert_host(mesh)
        if inner not in expert_options:  # the same for every mesh of this dp * cp * tp
            tally = Rejections()
            options = list(_expert_options(space, mesh, tally))
            if staged and validate_experts is not None:
                options = _passing_experts(mesh, options, validate_experts, tally)
            expert_options[inner] = (options, tally)
        options, tally = expert_options[inner]
        rejections.merge(tally)
        knobs = _knob_values(space, mesh)
        first = {k: v[0] for k, v in knobs.items()}
        # In the staged checks, the mesh rules left after the degree and expert rules read
        # neither ep nor etp: checked at the first option, a failure counts once per option.
        if (staged and validate_experts is not None and options and validate_mesh is not None
                and _rejected(validate_mesh, _layout({**mesh, "ep": options[0][0], "etp": options[0][1]},
                                                     first, common), rejections, count=len(options))):
            continue
        sizes = knobs.pop("micro_batch_size")
        for ep, etp in options:
            degrees = {**mesh, "ep": ep, "etp": etp}
            if validate_mesh is not None and not (staged and validate_experts is not None):
                if _rejected(validate_mesh, _layout(degrees, first, common), rejections):
                    continue
            for combo in itertools.product(*knobs.values()):
                fields_ = dict(zip(knobs, combo))
                layouts = [_layout(degrees, {**fields_, "micro_batch_size": sizes[0]}, common)]
                if validate_knobs is not None and _rejected(validate_knobs, layouts[0], rejections,
                                                            count=len(sizes)):
                    continue
                layouts += [_layout(degrees, {**fields_, "micro_batch_size": b}, common)
                            for b in sizes[1:]]
                yield from (layout for layout in layouts if not _rejected(validate, layout, rejections))
    for key, times in refused_again.items():
        rejections.merge(degree_verdicts[key], times)


def _degree_verdict(space: SearchSpace, mesh: dict[str, int], validate_degrees: Validator,
                    common: dict) -> Rejections | None:
    """None when `mesh` passes `validate_degrees`; else the rejections of all its expert options
    (the options' own count, and each counted under the mesh's first violation), the same for
    every mesh of its tp and pp (`candidate_layouts`)."""
    first = {k: v[0] for k, v in _knob_values(space, mesh).items()}
    probe = _layout({**mesh, "ep": 1, "etp": 1}, first, common)
    violations = list(validate_degrees(probe))
    if not violations:
        return None
    tally = Rejections()
    options = _expert_option_count(space, mesh, tally)
    if options:
        _refused(violations, tally, options)
    return tally


def _layout(degrees: dict, knobs: dict, common: dict) -> Layout:
    knobs = {**knobs, "offload": frozenset(knobs["offload"])}
    return Layout(**degrees, **knobs, **common)


def _rejected(validate: Validator, layout: Layout, rejections: Rejections, count: int = 1) -> bool:
    return _refused(validate(layout), rejections, count)


def _refused(violations: Sequence[object], rejections: Rejections, count: int = 1) -> bool:
    """Count `count` rejections under the first of `violations`; whether there is one."""
    violations = list(violations)
    if not violations:
        return False
    first = violations[0]
    fix = getattr(first, "fix", "")
    message = str(getattr(first, "message", first)) + (f"; fix: {fix}" if fix else "")
    rejections.add(str(getattr(first, "rule", first)), message, count)
    return True
