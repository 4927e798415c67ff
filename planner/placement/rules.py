"""Correctness conditions and composition rules. A violation is data: rule, message (the numbers), fix.

Two conditions (DESIGN.md §2) checked on any placement (`check_placement`):
- *gradient integrity*: every axis that splits the batch or the sequence reduces the gradient
  (gradients `replicated` = all-reduced, or `sharded` = reduce-scattered; never left `materialized`);
- *state consistency*: each element has one owner that updates it — over every batch axis the
  optimizer is sharded wherever the gradients are, and the gradients wherever the parameters are
  (ZeRO-1 ⊂ 2 ⊂ 3; Rajbhandari et al. 2020 §5), and no state is sharded over an axis of degree 1.

Composition rules on a model + cluster + layout (`check_layout`), each citing the framework behaviour
it encodes. Severity `error` makes the layout invalid; `warning` keeps it valid but says what it costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.placement.layout import Layout
from planner.placement.precision import padded_vocab
from planner.placement.states import BATCH_AXES, GROUPS, Mode, Placement, State
from planner.placement.strategies import batch_axes_key, placement_for
from planner.specs.model import ModelSpec

KV_REPLICATING_FRAMEWORKS = ("vllm", "sglang", "tensorrt-llm")
"""Serving engines that replicate KV heads when tp is a multiple of num_key_value_heads.

Source: vLLM `vllm/model_executor/layers/linear.py` `QKVParallelLinear` (tp_size >= total_num_kv_heads:
one KV head per rank, `num_kv_head_replicas = tp_size // total_num_kv_heads`); SGLang
`python/sglang/srt/layers/linear.py` (same class); TensorRT-LLM `num_kv_heads` duplication in its
checkpoint converters. Training frameworks here (Megatron-LM `megatron/core/transformer/attention.py`
`divide(num_query_groups, world_size)`, torchtitan's colwise-split wk/wv, DeepSpeed/Megatron-DeepSpeed)
do not replicate: they need num_key_value_heads % tp == 0."""


@dataclass(frozen=True, kw_only=True)
class Violation:
    """One broken rule."""

    rule: str
    """Rule name (snake_case)."""
    message: str
    """What is wrong, with the numbers."""
    fix: str = ""
    """A suggested change that satisfies the rule."""
    severity: str = "error"
    """`error` (layout invalid) or `warning` (valid, with a cost or no effect)."""


def check_placement(placement: Placement) -> list[Violation]:
    """Gradient integrity and state consistency of `placement` (module docstring)."""
    out: list[Violation] = []
    order = (State.PARAMETERS, State.GRADIENTS, State.OPTIMIZER_STATES)
    for name, gp in placement.groups.items():
        for axis in BATCH_AXES & set(gp.degrees):
            if gp.degrees[axis] > 1 and gp.mode(State.GRADIENTS, axis) == Mode.MATERIALIZED:
                out.append(Violation(rule="gradient_integrity",
                                     message=f"{name} gradients are never reduced over {axis} "
                                             f"(degree {gp.degrees[axis]})",
                                     fix=f"all-reduce or reduce-scatter the gradients over {axis}"))
            sharded = [gp.mode(s, axis) in (Mode.SHARDED, Mode.SHARDED_WITH_GATHER) for s in order]
            for (s1, a), (s2, b) in zip(zip(order, sharded), zip(order[1:], sharded[1:])):
                if a and not b:
                    out.append(Violation(rule="state_consistency",
                                         message=f"{name} {s1.value} sharded over {axis} but "
                                                 f"{s2.value} replicated: no single owner updates "
                                                 f"each element",
                                         fix=f"shard {s2.value} over {axis} too"))
    return out


def check_layout(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Every composition rule for `layout` of `model` on `cluster` (errors and warnings)."""
    out = list(_placement_violations(layout))
    for rule in (_world_size, _heads, _kv_heads, _layers, _experts, _vocab, _sequence, _batch,
                 _zero_with_pp, _zero_without_dp):
        out += rule(model, cluster, layout)
    return out


MESH_RULES = ("world_size", "heads_divisible_by_tp", "kv_heads_divisible_by_tp",
              "layers_divisible_by_pp", "pipeline_layers", "experts_divisible_by_ep", "expert_group",
              "sequence_divisible")
"""Rules `check_mesh` checks: those of `check_layout` that read only the degrees (dp, tp, pp, cp,
ep, etp, vpp, pipeline_layers) and, for the sequence rule, seq_len and sequence_parallel."""


def check_mesh(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """The errors of `check_layout` among MESH_RULES, in its order: world size, heads and KV heads
    by tp, layers by pp (or the explicit split), experts by ep and the expert grid, and the
    sequence by cp (and tp with sequence parallelism, as the layout sets it).

    None of these reads the micro-batch size, the ZeRO stage, offload or recompute, so a search can
    reject a bad mesh once instead of once per knob combination: for every layout,
    `check_mesh(...) == [v for v in errors(check_layout(...)) if v.rule in MESH_RULES]`.
    """
    out = []
    for rule in (_world_size, _heads, _kv_heads, _layers, _experts, _sequence):
        out += rule(model, cluster, layout)
    return [v for v in out if v.severity == "error"]


_PLACEMENT_VIOLATIONS: dict[tuple, tuple[Violation, ...]] = {}
"""batch_axes_key -> check_placement(placement_for(layout)): `check_placement` reads only the
batch axes' degrees and modes, which `batch_axes_key` determines."""


def _placement_violations(layout: Layout) -> tuple[Violation, ...]:
    key = batch_axes_key(layout)
    found = _PLACEMENT_VIOLATIONS.get(key)
    if found is None:
        if len(_PLACEMENT_VIOLATIONS) >= 4096:
            _PLACEMENT_VIOLATIONS.clear()
        found = _PLACEMENT_VIOLATIONS[key] = tuple(check_placement(placement_for(layout)))
    return found


def errors(violations: list[Violation]) -> list[Violation]:
    """The violations that make a layout invalid."""
    return [v for v in violations if v.severity == "error"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _world_size(model, cluster, layout: Layout) -> list[Violation]:
    """Degrees multiply to the GPU / rank count (FC-13)."""
    gpus = cluster.num_gpus
    if layout.world_size == gpus:
        return []
    return [Violation(rule="world_size",
                      message=f"dp*tp*pp*cp = {layout.dp}*{layout.tp}*{layout.pp}*{layout.cp} = "
                              f"{layout.world_size} differs from the {gpus} GPUs (ranks) launched",
                      fix=f"launch {layout.world_size} ranks or change the degrees to multiply to {gpus}")]


def _alternatives(model: ModelSpec, gpus: int) -> str:
    """Layouts of `gpus` GPUs whose tp divides the heads and KV heads: tp x dp, tp x pp (when the
    layers split evenly), and the smallest larger GPU count that allows tp = that count."""
    a, kv, n = model.num_attention_heads, model.num_key_value_heads, model.num_hidden_layers
    ok = [t for t in sorted(_divisors(gpus), reverse=True) if a % t == 0 and kv % t == 0]
    options = []
    for t in ok:
        rest = gpus // t
        options.append(f"tp={t} x dp={rest}")
        if rest > 1 and n % rest == 0:
            options.append(f"tp={t} x pp={rest} ({n // rest} layers per stage)")
    bigger = next((g for g in range(gpus + 1, 2 * a + 1) if a % g == 0 and kv % g == 0), None)
    if bigger:
        options.append(f"{bigger} GPUs with tp={bigger}")
    return "; ".join(options[:5])


def _heads(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Attention heads split over tp (Megatron `divide(num_attention_heads, tp)`; FC-05, FC-06)."""
    a = model.num_attention_heads
    if a % layout.tp == 0:
        return []
    return [Violation(rule="heads_divisible_by_tp",
                      message=f"num_attention_heads={a} is not divisible by tp={layout.tp}",
                      fix=f"tp must divide {a}; valid layouts: {_alternatives(model, cluster.num_gpus)}")]


def _kv_heads(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """KV heads split over tp; replication (tp a multiple of n_kv) only in serving engines (FC-07)."""
    kv, tp = model.num_key_value_heads, layout.tp
    if model.is_mla or kv % tp == 0:
        return []
    replicable = tp % kv == 0
    hint = (f"tp={tp} is a multiple of {kv}: {', '.join(KV_REPLICATING_FRAMEWORKS)} replicate KV heads "
            f"(KV cache per GPU stops shrinking past 1 KV head per rank), but {layout.framework} "
            f"does not" if replicable else f"tp must divide {kv}")
    return [Violation(rule="kv_heads_divisible_by_tp",
                      message=f"num_key_value_heads={kv} is not divisible by tp={tp}; {hint}",
                      fix=f"use tp in {{{', '.join(str(d) for d in _divisors(kv))}}}")]


def uneven_split(layers: int, stages: int) -> list[int]:
    """Layers per stage differing by at most one, extra layers to the outer stages first
    (e.g. 30 over 4 -> [8, 7, 7, 8])."""
    key = (layers, stages)
    if key not in _SPLITS:
        base, extra = divmod(layers, stages)
        out = [base] * stages
        order = [i for pair in zip(range(stages), reversed(range(stages))) for i in pair]
        for i in list(dict.fromkeys(order))[:extra]:
            out[i] += 1
        _SPLITS[key] = tuple(out)
    return list(_SPLITS[key])


_SPLITS: dict[tuple[int, int], tuple[int, ...]] = {}
"""(layers, stages) -> `uneven_split` (a search asks for the same few splits thousands of times)."""


def _layers(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Layers by pp·vpp, or an explicit split that sums to the layers (FC-09, FC-10).

    Source: Megatron-LM `transformer_block.py` `get_num_layers_to_build` (num_layers // pp // vpp per
    chunk: an uneven count silently builds fewer layers)."""
    n, pp, vpp = model.num_hidden_layers, layout.pp, layout.vpp
    if layout.pipeline_layers is not None:
        split = layout.pipeline_layers
        bad = [c for c in split if c % vpp] if vpp > 1 else []
        if sum(split) == n and not bad and min(split) >= 1:
            return []
        return [Violation(rule="pipeline_layers",
                          message=f"pipeline_layers={list(split)} sums to {sum(split)}; the model has "
                                  f"num_hidden_layers={n} (each stage needs >= 1 layer"
                                  f"{f' and a multiple of vpp={vpp}' if vpp > 1 else ''})",
                          fix=f"e.g. pipeline_layers={uneven_split(n, pp)}")]
    chunks = pp * vpp
    if n % chunks == 0:
        return []
    built = n // chunks * chunks
    what = f"pp={pp}" if vpp == 1 else f"pp x vpp = {pp} x {vpp} = {chunks} virtual stages"
    return [Violation(rule="layers_divisible_by_pp",
                      message=f"num_hidden_layers={n} is not divisible by {what}: an even split "
                              f"builds {built} layers, not {n}",
                      fix=f"use an explicit uneven split pipeline_layers={uneven_split(n, pp)}"
                          + (", vpp=1" if vpp > 1 else "")
                          + f", or a pp dividing {n}")]


def _experts(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Routed experts by ep; ep·etp inside dp·cp·tp (Megatron `parallel_state.py`)."""
    out = []
    if layout.ep > 1 and not model.is_moe:
        out.append(Violation(rule="ep_without_experts", severity="warning",
                             message=f"ep={layout.ep} on a dense model has no effect",
                             fix="set ep=1"))
    if model.is_moe and model.num_experts % layout.ep:
        out.append(Violation(rule="experts_divisible_by_ep",
                             message=f"num_experts={model.num_experts} is not divisible by ep={layout.ep}",
                             fix=f"ep in {{{', '.join(map(str, _divisors(model.num_experts)))}}}"))
    inner = layout.dp * layout.cp * layout.tp
    if inner % (layout.ep * layout.etp):
        out.append(Violation(rule="expert_group",
                             message=f"ep*etp = {layout.ep * layout.etp} does not divide "
                                     f"dp*cp*tp = {inner}",
                             fix="choose ep*etp dividing dp*cp*tp"))
    return out


def _vocab(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Vocabulary by tp, or padded (FC-08): a warning naming the padded size counted in memory."""
    v = model.padded_vocab_size
    padded = padded_vocab(model, layout)
    if padded == v:
        return []
    return [Violation(rule="vocab_padding", severity="warning",
                      message=f"vocab_size={v} is padded to {padded} rows by {layout.framework} "
                              f"at tp={layout.tp} ({padded - v} padding rows counted in memory)",
                      fix="")]


def _sequence(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Sequence by cp·lcm(2, tp) with SP, 2·cp for load-balanced CP, tp with SP (FC-12).

    Source: Megatron-LM / Transformer Engine load-balanced CP splits the sequence into 2·cp chunks
    (`get_batch_on_this_cp_rank`); SP scatters each rank's tokens over tp (`scatter_to_sequence_
    parallel_region` needs divisibility)."""
    cp, tp, s = layout.cp, layout.tp, layout.seq_len
    need = (2 * cp if cp > 1 else 1)
    if layout.sequence_parallel and tp > 1:
        need = cp * math.lcm(2 if cp > 1 else 1, tp)
    if s % need == 0:
        return []
    return [Violation(rule="sequence_divisible",
                      message=f"seq_len={s} is not divisible by {need} (cp={cp}, tp={tp}, "
                              f"sequence_parallel={layout.sequence_parallel})",
                      fix=f"use seq_len={-(-s // need) * need}")]


def check_ulysses(model: ModelSpec, degree: int) -> list[Violation]:
    """Head-splitting sequence parallelism (DeepSpeed-Ulysses) needs heads % degree == 0 and KV heads
    divisible by the degree or replicable (degree a multiple of n_kv) (FC-11).

    Source: DeepSpeed-Ulysses (Jacobs et al. 2023) §3 (all-to-all over heads); verl
    `ulysses_sequence_parallel_size` KV-head repeat."""
    valid = ulysses_degrees(model)
    if degree in valid:
        return []
    return [Violation(rule="ulysses_heads",
                      message=f"Ulysses degree {degree} does not split num_attention_heads="
                              f"{model.num_attention_heads} / num_key_value_heads="
                              f"{model.num_key_value_heads}; valid degrees: {valid}",
                      fix="use one of those, or ring-style context parallelism (cp), which has "
                          "no head constraint")]


def ulysses_degrees(model: ModelSpec) -> list[int]:
    """Valid Ulysses degrees: divisors d of the heads with n_kv % d == 0 or d % n_kv == 0."""
    kv = model.num_key_value_heads
    return [d for d in _divisors(model.num_attention_heads) if kv % d == 0 or d % kv == 0]


def _batch(model, cluster, layout: Layout) -> list[Violation]:
    """Global batch by dp · micro-batch (Megatron `num_microbatches_calculator.py`)."""
    unit = layout.dp * layout.micro_batch_size
    if layout.global_batch_size % unit == 0:
        return []
    return [Violation(rule="batch_divisible",
                      message=f"global_batch_size={layout.global_batch_size} is not divisible by "
                              f"dp*micro_batch_size = {layout.dp}*{layout.micro_batch_size} = {unit}",
                      fix=f"use global_batch_size={max(unit, layout.global_batch_size // unit * unit)}"
                          f" or {-(-layout.global_batch_size // unit) * unit}")]


def _zero_with_pp(model, cluster, layout: Layout) -> list[Violation]:
    """ZeRO-2/3 with PP: DeepSpeed rejects it; elsewhere it is costed (one reduction per micro-batch).

    Source: DeepSpeed `deepspeed/runtime/pipe/engine.py` (`assert self.zero_optimization_stage() < 2,
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"`)."""
    if layout.pp == 1 or layout.zero_stage < 2:
        return []
    m = layout.num_microbatches
    if layout.framework == "deepspeed":
        return [Violation(rule="zero_with_pp",
                          message=f"ZeRO-{layout.zero_stage} with pp={layout.pp}: DeepSpeed's pipeline "
                                  f"engine rejects ZeRO-2/3",
                          fix="use zero_stage=1 with pipeline parallelism")]
    return [Violation(rule="zero_with_pp", severity="warning",
                      message=f"ZeRO-{layout.zero_stage} with pp={layout.pp}: sharded gradients are "
                              f"reduce-scattered for each of the {m} micro-batches (costed)",
                      fix="zero_stage=1 reduces gradients once per step")]


def _zero_without_dp(model, cluster, layout: Layout) -> list[Violation]:
    """ZeRO shards only over the data-parallel (dp x cp) axis: at dp·cp = 1 it has no effect (FC-16)."""
    if layout.zero_stage == 0 or layout.dp_shard_degree * layout.cp > 1:
        return []
    return [Violation(rule="zero_without_dp", severity="warning",
                      message=f"ZeRO-{layout.zero_stage} at dp={layout.dp} (shard group "
                              f"{layout.dp_shard_degree * layout.cp}) has no effect: ZeRO shards "
                              f"only over the data-parallel axis",
                      fix="raise dp (lower tp/pp) for ZeRO to save memory")]


__all__ = ["Violation", "check_layout", "check_mesh", "MESH_RULES", "check_placement", "check_ulysses", "ulysses_degrees",
           "uneven_split", "errors", "GROUPS"]


def check_batch(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """The global-batch rule alone (the only rule that depends on the micro-batch size besides
    messages), for searches that cache the other rules across micro-batch sizes."""
    return _batch(model, cluster, layout)
