"""Which communication a layout overlaps with compute: its overlap knobs (`Layout.tp_comm_overlap`,
`overlap_grad_reduce`, `overlap_param_gather`, `ep_comm_overlap`), each taken from the layout or,
where it says None, from its framework's default (`frameworks.<framework>.overlap_defaults`).

The cost model reads only the resolved values (`resolve`): `cost.comm` gives the data-parallel
collectives the phase their overlap puts them in, `cost.step_time` hides TP/SP and EP traffic
under the compute it overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError
from planner.frameworks import BY_NAME
from planner.placement.layout import OVERLAP_KNOBS, Layout


NAMES = {"tp-comm": "tp_comm_overlap", "grad-reduce": "overlap_grad_reduce",
         "param-gather": "overlap_param_gather", "ep-a2a": "ep_comm_overlap"}
"""Short name (`planner explain --overlap NAME=on|off`, a plan's summary line) -> overlap knob."""


def parse(items: list[str] | None) -> dict[str, bool]:
    """{knob: on} of `--overlap NAME=on|off` options (NAMES), the last one of a name winning.

    Raises:
        SpecError: an item that is not NAME=on|off with a name of NAMES (key --overlap)."""
    out = {}
    for item in items or ():
        name, _, value = item.partition("=")
        if name not in NAMES or value not in ("on", "off"):
            raise SpecError(f"value {item!r} must be NAME=on or NAME=off with NAME one of "
                            f"{', '.join(NAMES)}", key="--overlap")
        out[NAMES[name]] = value == "on"
    return out


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
    """`layout` with the overlaps a tuned recipe switches on, where its framework can switch them
    (`overlap_switches`): TP comm overlap where tp > 1 with SP (which it needs), gradient-reduce
    and parameter-gather overlap -- the three switches of Megatron-LM's own release run
    (NVIDIA/Megatron-LM@d98e8a6
    tests/functional_tests/test_cases/gpt/gpt3_15b_8t_release_gb200/model_config.yaml l. 15-24:
    TP 4 with SP and all three switched on, `frameworks.megatron` FLAG). Knobs the layout
    sets (not None) are kept. EP all-to-all overlap stays as given: Megatron asserts it off with
    full recompute, which a plan may mix in per layer."""
    wanted = ("tp_comm_overlap",) * (layout.tp > 1 and bool(layout.sequence_parallel)) + (
        "overlap_grad_reduce", "overlap_param_gather")
    changes = {k: True for k in wanted if getattr(layout, k) is None
               and k in BY_NAME[layout.framework].overlap_switches(layout.zero_stage)}
    return layout.replace(**changes) if changes else layout


def tuned_dispatcher(layout: Layout, ep_gpus_per_domain: int) -> Layout:
    """`layout` with the MoE token dispatcher a tuned recipe picks, where the layout leaves it to
    the framework (None), ep > 1 and the framework can be set (`MOE_DISPATCHERS`): flex (DeepEP /
    HybridEP) when the EP group spans scale-up domains (`ep_gpus_per_domain` < ep), as NVIDIA's
    recipes for EP across nodes do (NVIDIA-NeMo/Megatron-Bridge@067f987 perf_recipes/qwen/h100/
    qwen3_moe.py l. 90-91, EP 16 on 2 DGX H100; recipes/deepseek/h100/deepseek_v3.py l. 160, 256
    via training/flex_dispatcher_backend.py, EP 64), else alltoall (one node: the all-to-all over
    NVLink, as written explicitly by `planner plan --emit`)."""
    if (layout.moe_dispatcher is not None or layout.ep <= 1
            or "flex" not in BY_NAME[layout.framework].MOE_DISPATCHERS):
        return layout
    return layout.replace(moe_dispatcher="flex" if layout.ep > ep_gpus_per_domain else "alltoall")
