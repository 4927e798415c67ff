"""Collectives per training step implied by a placement (data only; times are computed elsewhere).

**Communication rule** (docs/architecture.md §2): each (state, axis, mode) implies collectives; a collective on
one axis moves the *local* shard left after the other axes' sharding. For a parameter group with
batch axes B (dp_replicate, dp_shard, cp; edp for experts):

| modes over B | collectives per step |
|---|---|
| gradients replicated, optimizer replicated | all-reduce of the gradient, once (accumulated locally over m) |
| gradients replicated, optimizer sharded over O | reduce-scatter over O once + all-gather of updated parameters over O once |
| gradients sharded over O | reduce-scatter over O per micro-batch (no full local accumulator) |
| parameters replicated, optimizer sharded over O | all-gather of updated parameters over O once |
| parameters sharded_with_gather over O | all-gather per micro-batch in forward and again in backward |
| any of the above also replicated over R | all-reduce of the 1/|O| shard over R (HSDP) |
| offloaded state | device->host / host->device copies of the local shard |

Activations: TP all-reduce (or SP all-gather + reduce-scatter) 2 per layer forward, 2 backward, 2 more
on full recompute (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2); PP one send forward and
one backward per micro-batch per virtual stage (Narayanan et al. 2021 §2.2); CP ring exchange of the
local K/V (cp − 1) times forward, K/V + dK/dV backward (Liu et al. 2023 Ring Attention; Megatron-LM
`context_parallel.rst`); EP all-to-all dispatch + combine forward and backward (Lepikhin et al. 2020
GShard §3; Megatron `token_dispatcher.py`); tied embedding all-reduce between first and last stage
(Megatron `_allreduce_word_embedding_grads`, FC-14); norm gradients all-reduced over tp under SP
(Megatron `_allreduce_layernorm_grads`).

Ring convention, `M` = message as in `planner.cost.collectives` (all-reduce: the buffer; all-gather:
the gathered output; reduce-scatter: the full input; all-to-all: the buffer a GPU sends): bytes sent per
device = 2(n−1)/n·M, (n−1)/n·M, (n−1)/n·M, (n−1)/n·M; p2p and host copies M.
Source: Thakur, Rabenseifner & Gropp 2005 §3-4; ZeRO (Rajbhandari et al. 2020) §7 (2Ψ vs 3Ψ).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from planner.cost.memory import _group_counts, stage_layers
from planner.cost.params_flops import count_params
from planner.placement.layout import Layout
from planner.placement.precision import padded_vocab, state_bytes
from planner.placement.states import GROUPS, Mode, Placement, State
from planner.placement.strategies import placement_for
from planner.specs.model import ModelSpec

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p", "device_to_host",
         "host_to_device")
_BATCH = ("dp_replicate", "dp_shard", "cp", "edp")


@dataclass(frozen=True, kw_only=True)
class Collective:
    """One kind of collective a device takes part in during one step."""

    axis: str
    """Reporting axis: dp, edp, tp, pp, cp, ep or host."""
    kind: str
    """One of KINDS."""
    count: int
    """Calls per step."""
    message_bytes: float
    """M of one call (see module docstring)."""
    group_size: int
    """Devices in the group n."""
    axes: tuple[str, ...] = ()
    """Mesh axes the group spans (for placing it in the cluster hierarchy)."""
    label: str = ""
    """What it moves (e.g. `gradients.dense`, `tp.forward`)."""

    @property
    def bytes_per_device(self) -> float:
        """Bytes one device sends in one call (ring convention)."""
        return ring_bytes(self.kind, self.message_bytes, self.group_size)

    @property
    def total_bytes_per_device(self) -> float:
        """Bytes one device sends per step: count × bytes_per_device."""
        return self.count * self.bytes_per_device


def ring_bytes(kind: str, message_bytes: float, n: int) -> float:
    """Bytes a device sends for one collective of `kind` over `n` devices (ring)."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n * message_bytes
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * message_bytes
    return float(message_bytes)


def _state_collectives(group: str, gp, elems: float, m: int, sb) -> list[Collective]:
    """Gradient / parameter / offload collectives of one parameter group (the table above)."""
    batch = [a for a in _BATCH if gp.degrees.get(a, 1) > 1]
    if not batch or elems == 0:
        return _offload(group, gp, elems, m, sb)
    grad_sh = [a for a in batch if gp.mode(State.GRADIENTS, a) in (Mode.SHARDED,)]
    opt_sh = [a for a in batch if gp.mode(State.OPTIMIZER_STATES, a) == Mode.SHARDED]
    gath = [a for a in batch if gp.mode(State.PARAMETERS, a) == Mode.SHARDED_WITH_GATHER]
    owner = grad_sh or opt_sh
    rep = [a for a in batch if a not in owner]
    deg = lambda axes: math.prod(gp.degrees[a] for a in axes)  # noqa: E731
    axis = "edp" if group == "expert" else "dp"
    grads, params = elems * sb.gradient_reduce, elems * sb.parameter_gather
    out: list[Collective] = []

    def add(kind, count, message, axes, label):
        out.append(Collective(axis=axis, kind=kind, count=count, message_bytes=message,
                              group_size=deg(axes), axes=tuple(axes), label=f"{label}.{group}"))

    if owner:
        add("reduce_scatter", m if grad_sh else 1, grads, owner, "gradients")
    if rep:
        add("all_reduce", m if grad_sh else 1, grads / deg(owner) if owner else grads, rep, "gradients")
    if gath:
        add("all_gather", 2 * m, params, gath, "parameters.gather")
    elif owner:
        add("all_gather", 1, params, owner, "parameters.update")
    return out + _offload(group, gp, elems / deg(owner) if owner else elems, m, sb)


def _offload(group: str, gp, local: float, m: int, sb) -> list[Collective]:
    """Host<->device traffic of offloaded model states (ZeRO-Offload §4: gradients down, updated
    parameters up once per step; offloaded parameters fetched for forward and backward)."""
    out = []
    if gp.offloaded(State.OPTIMIZER_STATES):
        out += [Collective(axis="host", kind="device_to_host", count=1, group_size=1,
                           message_bytes=local * sb.gradient_reduce, label=f"gradients.{group}"),
                Collective(axis="host", kind="host_to_device", count=1, group_size=1,
                           message_bytes=local * sb.parameter_gather, label=f"parameters.{group}")]
    if gp.offloaded(State.PARAMETERS):
        out.append(Collective(axis="host", kind="host_to_device", count=2 * m, group_size=1,
                              message_bytes=local * sb.parameter_gather,
                              label=f"parameters.fetch.{group}"))
    return out


def _local_elems(gp, n: int) -> float:
    """Elements left after the model-parallel (non-batch) shards: tp / ep / etp."""
    axes = [a for a in gp.shard_axes(State.PARAMETERS) if a not in _BATCH]
    return n / math.prod(gp.degrees[a] for a in axes)


def _activation_collectives(model: ModelSpec, layout: Layout, placement: Placement,
                            layers: tuple[int, ...], stage: int) -> list[Collective]:
    """TP, PP, CP and EP collectives of the stage's activations (module docstring)."""
    m, b, h = max(1, layout.num_microbatches), layout.micro_batch_size, model.hidden_size
    tokens = b * layout.seq_len // layout.cp
    act = tokens * h * 2
    passes = 3 if placement.recompute == "full" else 2   # forward, backward, + recompute forward
    sp = placement.activations.get("tp") == Mode.SHARDED
    n_layers, out = len(layers), []
    if layout.tp > 1 and n_layers:
        kinds = ("all_gather", "reduce_scatter") if sp else ("all_reduce",)
        for kind in kinds:
            out.append(Collective(axis="tp", kind=kind, count=2 * passes * n_layers * m,
                                  message_bytes=act, group_size=layout.tp, axes=("tp",),
                                  label="tp.layers"))
    if layout.pp > 1:
        out.append(Collective(axis="pp", kind="p2p", count=2 * m * layout.vpp, group_size=2,
                              message_bytes=act / (layout.tp if sp else 1), axes=("pp",),
                              label="pp.boundary"))
    if layout.cp > 1 and n_layers:
        kv = _kv_bytes_per_token(model, layout.tp) * tokens
        steps = (layout.cp - 1) * n_layers * m
        out.append(Collective(axis="cp", kind="p2p", count=steps * (passes - 1), group_size=layout.cp,
                              message_bytes=kv, axes=("cp",), label="cp.kv.forward"))
        out.append(Collective(axis="cp", kind="p2p", count=steps, group_size=layout.cp,
                              message_bytes=2 * kv, axes=("cp",), label="cp.kv_dkv.backward"))
    moe = sum(1 for i in layers if model.is_moe and model.moe_layers[i])
    if layout.ep > 1 and moe:
        routed = tokens // (layout.tp if sp else 1) * model.num_experts_per_tok * h * 2
        out.append(Collective(axis="ep", kind="all_to_all", count=2 * passes * moe * m,
                              message_bytes=routed, group_size=layout.ep, axes=("ep",),
                              label="ep.dispatch_combine"))
    return out


def _kv_bytes_per_token(model: ModelSpec, tp: int) -> int:
    """K and V bytes per token on one TP rank (bf16); KV heads replicate when tp > n_kv; MLA ships
    the up-projected per-head K (nope + rope) and V."""
    if model.is_mla:
        a = model.num_attention_heads // tp
        return a * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim) * 2
    heads = -(-model.num_key_value_heads // tp)
    return 2 * heads * model.head_dim * 2


def collectives(model: ModelSpec, layout: Layout, stage: int | None = None) -> list[Collective]:
    """Every collective one device of `stage` runs per step.

    `stage=None` picks the stage with the most decoder layers (first on ties): the bottleneck for
    in-layer communication.
    """
    counts, placement, sb = count_params(model), placement_for(layout), state_bytes(layout)
    split = stage_layers(model, layout)
    if stage is None:
        stage = max(range(layout.pp), key=lambda s: (len(split[s]), -s))
    layers = split[stage]
    group_counts = _group_counts(model, counts, layout, layers, stage)
    m = max(1, layout.num_microbatches)
    out: list[Collective] = []
    for g in GROUPS:
        gp = placement.groups[g]
        out += _state_collectives(g, gp, _local_elems(gp, group_counts[g]), m, sb)
    if layout.tp > 1 and placement.activations.get("tp") == Mode.SHARDED and group_counts["replicated"]:
        out.append(Collective(axis="tp", kind="all_reduce", count=1, group_size=layout.tp, axes=("tp",),
                              message_bytes=group_counts["replicated"] * sb.gradient_reduce,
                              label="gradients.norms_under_sp"))
    if model.tie_word_embeddings and layout.pp > 1 and stage in (0, layout.pp - 1):
        out.append(Collective(axis="pp", kind="all_reduce", count=1, group_size=2, axes=("pp",),
                              message_bytes=padded_vocab(model, layout) * model.embedding_width
                              / layout.tp * sb.gradient_reduce, label="gradients.tied_embedding"))
    return out + _activation_collectives(model, layout, placement, layers, stage)


def bytes_per_axis(colls: list[Collective]) -> dict[str, float]:
    """Σ total_bytes_per_device per reporting axis."""
    totals: dict[str, float] = defaultdict(float)
    for c in colls:
        totals[c.axis] += c.total_bytes_per_device
    return dict(totals)
