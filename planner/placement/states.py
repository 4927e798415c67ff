"""States, modes, mesh axes and the `Placement` of states over the mesh.

Every training strategy is a placement: a mode for each (state, axis) of the device mesh
(docs/architecture.md §2). Memory and communication are derived from the placement by one rule each
(`planner/cost/memory.py`, `planner/cost/comm.py`); no cost code branches on a strategy name.

Parameters are split into *groups* that parallelism treats differently (Megatron-LM
`megatron/core/transformer/`: column/row-parallel linears split over tp, norms and the MoE router
replicate over tp, routed experts split over ep and expert-tp and are reduced over the
expert-data-parallel group). Each group has its own degrees and modes.

Source: the placement-semantics paper (arXiv 2601.02311; docs/architecture.md §2) — states x modes x axes;
Rajbhandari et al. 2020 (ZeRO) §5 for the stage definitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


class State(StrEnum):
    """The four training states."""

    PARAMETERS = "parameters"
    GRADIENTS = "gradients"
    OPTIMIZER_STATES = "optimizer_states"
    ACTIVATIONS = "activations"


class Mode(StrEnum):
    """Where a state lives along one axis (docs/architecture.md §2 table)."""

    REPLICATED = "replicated"
    """Every device of the axis group holds the full state."""
    SHARDED = "sharded"
    """Each device holds a disjoint 1/n slice, used locally."""
    SHARDED_WITH_GATHER = "sharded_with_gather"
    """1/n slice, all-gathered to full just before each use and freed after."""
    MATERIALIZED = "materialized"
    """Produced locally during the step and kept until consumed."""
    OFFLOADED = "offloaded"
    """Lives in host memory; the device keeps a staging buffer."""


SHARDING_MODES = frozenset({Mode.SHARDED, Mode.SHARDED_WITH_GATHER})

AXES = ("dp_replicate", "dp_shard", "cp", "tp", "pp", "ep", "etp", "edp", "host")
"""Mesh axes. `dp = dp_replicate x dp_shard`; `edp` is the expert-data-parallel axis of the expert
group (world / (ep * etp * pp), Megatron-LM `parallel_state.py`); `host` is the host<->device link
(mode `offloaded` when a state lives in host memory)."""

BATCH_AXES = frozenset({"dp_replicate", "dp_shard", "cp", "edp"})
"""Axes that split the batch or the sequence: their gradients must be reduced (gradient integrity)."""

GROUPS = ("dense", "replicated", "expert")
"""Parameter groups: `dense` = tp-split matrices (attention, dense MLP, shared experts, vocab-parallel
embedding / LM head); `replicated` = tp-replicated tensors (norms, router); `expert` = routed experts."""


@dataclass(frozen=True, kw_only=True)
class GroupPlacement:
    """Placement of one parameter group's states over its axes."""

    degrees: dict[str, int]
    """Axis -> degree (devices along the axis) for this group."""
    modes: dict[State, dict[str, Mode]]
    """State -> axis -> mode. An axis missing for a state means the state is replicated along it."""

    def mode(self, state: State, axis: str) -> Mode:
        """Mode of `state` along `axis` (replicated when unset)."""
        return self.modes.get(state, {}).get(axis, Mode.REPLICATED)

    def shard_axes(self, state: State) -> tuple[str, ...]:
        """Axes (other than pp, which shards by layer) over which `state` is split 1/n."""
        return tuple(a for a, m in self.modes.get(state, {}).items()
                     if m in SHARDING_MODES and a != "pp")

    def shard_degree(self, state: State) -> int:
        """Memory rule divisor: product of the degrees of every axis `state` is sharded over."""
        return math.prod(self.degrees.get(a, 1) for a in self.shard_axes(state))

    def offloaded(self, state: State) -> bool:
        """True when `state` lives in host memory."""
        return self.mode(state, "host") == Mode.OFFLOADED


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where every state of every parameter group lives, plus the activation policy."""

    groups: dict[str, GroupPlacement]
    """Parameter group name (see GROUPS) -> its placement."""
    activations: dict[str, Mode] = field(default_factory=dict)
    """Axis -> mode of the activations (sharded over cp; over tp with SP; offloaded on host)."""
    recompute: str = "none"
    """Activation recompute policy: none | selective | full."""
    gather_prefetch: int = 1
    """Units all-gathered ahead of use when parameters are sharded_with_gather (FSDP prefetch)."""

    def to_table(self, *, include_experts: bool = True) -> dict[str, dict[str, str]]:
        """{state: {axis: mode}} of the dense group (plus activations), degree > 1 axes only.

        Expert-group modes are reported with the axis prefixed `expert_` (when `include_experts`).
        Without HSDP (no dp_replicate axis) the data-parallel axis is reported as `dp`.
        """
        dense = self.groups["dense"].degrees
        plain_dp = dense.get("dp_replicate", 1) == 1

        def label(axis: str) -> str:
            return "dp" if plain_dp and axis == "dp_shard" else axis

        table: dict[str, dict[str, str]] = {}
        for name, group in self.groups.items():
            if name == "replicated" or (name == "expert" and not include_experts):
                continue
            prefix = "expert_" if name == "expert" else ""
            for state, axes in group.modes.items():
                row = table.setdefault(state.value, {})
                for axis, mode in axes.items():
                    if group.degrees.get(axis, 1) > 1 or axis == "host":
                        row[prefix + label(axis)] = mode.value
        table[State.ACTIVATIONS.value] = {label(a): m.value for a, m in self.activations.items()
                                          if dense.get(a, 1) > 1 or a == "host"}
        return table
