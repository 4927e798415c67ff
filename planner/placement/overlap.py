"""Which communication a layout overlaps with compute: its overlap knobs (`Layout.tp_comm_overlap`,
`overlap_grad_reduce`, `overlap_param_gather`, `ep_comm_overlap`), each taken from the layout or,
where it says None, from its framework's default (`frameworks.<framework>.overlap_defaults`).

The cost model reads only the resolved values (`resolve`): `cost.comm` gives the data-parallel
collectives the phase their overlap puts them in, `cost.step_time` hides TP/SP and EP traffic
under the compute it overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.frameworks import BY_NAME
from planner.placement.layout import OVERLAP_KNOBS, Layout


@dataclass(frozen=True)
class Overlaps:
    """The resolved overlap knobs of one layout (True: overlapped)."""

    tp_comm_overlap: bool
    """TP/SP all-gathers / reduce-scatters pipelined with the neighbouring linear GEMMs."""
    overlap_grad_reduce: bool
    """Gradient reduction bucket by bucket during backward."""
    overlap_param_gather: bool
    """Parameter all-gathers ahead of their use in forward (prefetch)."""
    ep_comm_overlap: bool
    """Dispatch / combine all-to-alls under another micro-batch's compute."""


def resolve(layout: Layout) -> Overlaps:
    """The `Overlaps` of `layout`: each knob as given, None replaced by the framework's default for
    the layout's ZeRO stage."""
    key = (layout.framework, layout.zero_stage) + tuple(getattr(layout, k) for k in OVERLAP_KNOBS)
    hit = _RESOLVED.get(key)
    if hit is None:
        defaults = BY_NAME[layout.framework].overlap_defaults(layout.zero_stage)
        hit = _RESOLVED[key] = Overlaps(**{
            k: defaults[k] if v is None else v for k, v in zip(OVERLAP_KNOBS, key[2:])})
    return hit


_RESOLVED: dict[tuple, Overlaps] = {}
"""Cache of `resolve` (a handful of distinct keys)."""


def tuned(layout: Layout) -> Layout:
    """`layout` with the overlaps a tuned recipe switches on where the framework has them (TP comm
    overlap with SP, gradient-reduce and parameter-gather overlap; NVIDIA's Megatron-Bridge
    performance recipes set all three), knobs the layout sets explicitly kept; EP all-to-all
    overlap stays as given (Megatron asserts it off with full recompute, which a plan may mix in)."""
    changes = {k: True for k in ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather")
               if getattr(layout, k) is None
               and k in BY_NAME[layout.framework].overlap_switches(layout.zero_stage)}
    return layout.replace(**changes) if changes else layout
