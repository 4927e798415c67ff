"""Strategies as constructors of placements.

Each constructor takes a `_Builder` (mutable modes per group) and sets the modes its strategy
implies (docs/architecture.md §2 strategy table); `placement_for(layout)` composes them in a fixed order. The cost
code never sees a strategy name, only the resulting modes.

Source: ZeRO stages — Rajbhandari et al. 2020 §5.1-5.3 (P_os, P_os+g, P_os+g+p); FSDP/HSDP — Zhao et
al. 2023 "PyTorch FSDP" §3.2 (full / hybrid sharding) and torchtitan `parallel_dims.py` (dp_replicate
x dp_shard, FSDP over dp_shard x cp); TP/SP — Shoeybi et al. 2019 §3, Korthikanti et al. 2022 §4.2;
PP — Narayanan et al. 2021 §2.2; CP — Megatron-LM `docs/source/api-guide/context_parallel.rst`;
EP — Megatron-LM `megatron/core/parallel_state.py` (expert groups); offload — Ren et al. 2021
(ZeRO-Offload) §4; recompute — Korthikanti et al. 2022 §5.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.placement.layout import Layout
from planner.placement.states import GROUPS, GroupPlacement, Mode, Placement, State

MODEL_STATES = (State.PARAMETERS, State.GRADIENTS, State.OPTIMIZER_STATES)
_OFFLOAD_STATE = {"optimizer": (State.OPTIMIZER_STATES,), "parameters": (State.PARAMETERS,)}


@dataclass
class _Builder:
    degrees: dict[str, dict[str, int]]
    modes: dict[str, dict[State, dict[str, Mode]]] = field(default_factory=dict)
    activations: dict[str, Mode] = field(default_factory=dict)
    recompute: str = "none"

    def set(self, groups: tuple[str, ...], states: tuple[State, ...], axes: tuple[str, ...],
            mode: Mode) -> None:
        for g in groups:
            for s in states:
                row = self.modes.setdefault(g, {}).setdefault(s, {})
                for a in axes:
                    if a in self.degrees[g]:
                        row[a] = mode

    def build(self) -> Placement:
        groups = {g: GroupPlacement(degrees=self.degrees[g], modes=self.modes.get(g, {}))
                  for g in GROUPS}
        return Placement(groups=groups, activations=dict(self.activations), recompute=self.recompute)


def group_degrees(layout: Layout) -> dict[str, dict[str, int]]:
    """Axis degrees per parameter group (`Mesh.group_degrees`); the expert group runs over
    ep x etp x edp x pp."""
    return layout.mesh.group_degrees()


def data_parallel(b: _Builder) -> None:
    """DDP: every model state replicated over dp (and cp); gradients all-reduced."""
    b.set(GROUPS, MODEL_STATES, ("dp_replicate", "dp_shard", "cp", "edp"), Mode.REPLICATED)
    b.activations |= {"dp_replicate": Mode.MATERIALIZED, "dp_shard": Mode.MATERIALIZED}


def zero(b: _Builder, stage: int) -> None:
    """ZeRO-1/2/3 (FSDP = 3): shard optimizer (1), + gradients (2), + parameters with gather (3).

    Sharding runs over dp_shard x cp for dense groups and over the expert-data-parallel axis for
    experts; dp_replicate stays replicated (HSDP). Source: ZeRO §5; Megatron distributed optimizer
    shards over the dp x cp group (`parallel_state.get_data_parallel_group(with_context_parallel=True)`);
    torchtitan FSDP mesh `dp_shard_cp`.
    """
    axes = ("dp_shard", "cp", "edp")
    if stage >= 1:
        b.set(GROUPS, (State.OPTIMIZER_STATES,), axes, Mode.SHARDED)
    if stage >= 2:
        b.set(GROUPS, (State.GRADIENTS,), axes, Mode.SHARDED)
    if stage >= 3:
        b.set(GROUPS, (State.PARAMETERS,), axes, Mode.SHARDED_WITH_GATHER)


def tensor_parallel(b: _Builder, sequence_parallel: bool) -> None:
    """TP splits the dense matrices' math (no gather); norms/router replicate; SP splits activations."""
    b.set(("dense",), MODEL_STATES, ("tp",), Mode.SHARDED)
    b.set(("replicated",), MODEL_STATES, ("tp",), Mode.REPLICATED)
    b.set(("expert",), MODEL_STATES, ("etp",), Mode.SHARDED)
    b.activations["tp"] = Mode.SHARDED if sequence_parallel else Mode.REPLICATED


def pipeline(b: _Builder) -> None:
    """PP shards every model state by layer; activations are materialized per in-flight micro-batch."""
    b.set(GROUPS, MODEL_STATES, ("pp",), Mode.SHARDED)
    b.activations["pp"] = Mode.MATERIALIZED


def context_parallel(b: _Builder) -> None:
    """CP splits activations along the sequence; model states stay replicated over cp (see zero)."""
    b.activations["cp"] = Mode.SHARDED


def expert_parallel(b: _Builder) -> None:
    """EP shards the routed experts over ep; their gradients are reduced over edp."""
    b.set(("expert",), MODEL_STATES, ("ep",), Mode.SHARDED)


def offload(b: _Builder, targets: frozenset[str]) -> None:
    """Move the chosen states to host memory (mode `offloaded` on the host axis)."""
    for target in targets:
        for state in _OFFLOAD_STATE.get(target, ()):
            b.set(GROUPS, (state,), ("host",), Mode.OFFLOADED)
    if "activations" in targets:
        b.activations["host"] = Mode.OFFLOADED


def recompute(b: _Builder, policy: str) -> None:
    """Recompute: only checkpoints stay materialized (none | selective | full)."""
    b.recompute = policy


def placement_key(layout: Layout) -> tuple:
    """The Layout fields `placement_for` reads (degrees, ZeRO stage, SP, offload, recompute): two
    layouts with the same key have the same placement."""
    return (layout.dp, layout.dp_shard, layout.tp, layout.pp, layout.cp, layout.ep, layout.etp,
            layout.zero_stage, layout.sequence_parallel, layout.offload, layout.recompute)


def batch_axes_key(layout: Layout) -> tuple:
    """The Layout fields that set the degrees and modes of every group along the batch axes
    (`states.BATCH_AXES`: dp_replicate, dp_shard, cp, edp): the ZeRO stage (`zero`) and the
    degrees of those axes (`group_degrees`; edp = world / (ep·etp·pp)). Only `data_parallel` and `zero`
    set modes on them; tp, pp, ep, etp, SP, offload and recompute act on other axes."""
    return (layout.zero_stage, layout.dp_replicate_degree, layout.dp_shard_degree, layout.cp,
            layout.expert_dp)


_PLACEMENTS: dict[tuple, Placement] = {}
"""placement_key -> Placement built by `_compose` (a search asks for the same few hundred)."""

_PLACEMENTS_SIZE = 4096
"""Entries kept before the cache is emptied."""


def placement_for(layout: Layout) -> Placement:
    """Compose the strategy constructors for `layout` into one Placement.

    Built once per `placement_key` and shared between callers: treat the result (and its dicts)
    as read-only."""
    key = placement_key(layout)
    placement = _PLACEMENTS.get(key)
    if placement is None:
        if len(_PLACEMENTS) >= _PLACEMENTS_SIZE:
            _PLACEMENTS.clear()
        placement = _PLACEMENTS[key] = _compose(layout)
    return placement


def _compose(layout: Layout) -> Placement:
    b = _Builder(degrees=group_degrees(layout))
    data_parallel(b)
    zero(b, layout.zero_stage)
    tensor_parallel(b, layout.sequence_parallel)
    pipeline(b)
    context_parallel(b)
    expert_parallel(b)
    offload(b, layout.offload)
    recompute(b, layout.recompute)
    return b.build()
