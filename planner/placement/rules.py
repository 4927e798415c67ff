"""Correctness conditions and composition rules. A violation is data: rule, message (the numbers), fix.

Two conditions (docs/architecture.md §2) checked on any placement (`check_placement`):
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

from planner import frameworks
from planner.frameworks import deepspeed, megatron, torchtitan
from planner.placement import mtp as mtp_mod, pipeline_layout
from planner.placement.layout import FP8_RECIPES, OPTIMIZER_DTYPES, PRECISIONS, TORCHAO_FP8_RECIPES, Layout
from planner.placement.precision import (allowed_grad_reduce_dtypes, blackwell_or_later, grad_reduce_dtype,
                                         grouped_gemm_supported, loss_chunks, padded_vocab,
                                         supported_precisions)
from planner.placement.states import BATCH_AXES, GROUPS, Mode, Placement, State
from planner.placement.strategies import group_degrees
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
    line: int | None = None
    """The 1-based line of the checked file it concerns, where the reader knows it and no flag or
    key of the message names it (e.g. a line ending); None = located by `check.lines.locate`."""


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
                 _interleaved_microbatches, _microbatch_group,
                 _zero_with_pp, _zero_without_dp, _precision_supported, _tp_domain,
                 _zero_stage_supported, _grad_reduce_supported, _precision_aware_optimizer,
                 _cross_entropy, _mtp_and_swiglu_store, _torchtitan_dims,
                 _deepspeed_autotp, _deepspeed_parallelism, _no_effect, _offload_needs_zero, _moe_dispatcher_supported,
                 _recompute_modules, _ep_comm_overlap, _tp_comm_overlap, _moe_tp_sequence_parallel,
                 _cp_short_chunk):
        out += rule(model, cluster, layout)
    return out


MESH_RULES = ("world_size", "heads_divisible_by_tp", "kv_heads_divisible_by_tp", "pp_exceeds_layers",
              "layers_divisible_by_pp", "pipeline_layers", "pipeline_layout", "ep_without_experts", "experts_divisible_by_ep", "expert_group",
              "sequence_divisible")
"""Rules `check_mesh` checks: those of `check_layout` that read only the degrees (dp, tp, pp, cp,
ep, etp, vpp, pipeline_layers, pipeline_layout) and, for the sequence rule, seq_len and sequence_parallel."""


DEGREE_RULES = ("world_size", "heads_divisible_by_tp", "kv_heads_divisible_by_tp",
                "pp_exceeds_layers", "layers_divisible_by_pp", "pipeline_layers", "pipeline_layout")
"""The rules of MESH_RULES that read neither ep nor etp, all checked by `check_layout` before any
that does: a layout failing one fails it first whatever its ep and etp (`check_degrees`)."""


def check_degrees(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """The errors of `check_mesh` among DEGREE_RULES, in its order."""
    return [v for v in check_mesh(model, cluster, layout) if v.rule in DEGREE_RULES]


def check_experts(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """The errors of the expert rules (experts by ep, the expert grid), which `check_layout`
    checks right after DEGREE_RULES: for a layout passing those, the first error of
    `check_mesh` whenever there is one here (and without building the placement)."""
    return errors(_experts(model, cluster, layout))


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

_CLEAN_SHAPES: dict[tuple, bool] = {}
"""`_batch_axes_shape` -> whether placements of that shape pass `check_placement` (a search meets
thousands of batch-axis degrees but a few dozen shapes)."""


def _batch_axes_shape(layout: Layout) -> tuple:
    """What decides whether `check_placement(placement_for(layout))` is empty: the ZeRO stage and,
    per group, which batch axes it has and which of them have degree > 1.

    Source: `strategies.batch_axes_key` (only `data_parallel` and `zero` set modes on the batch
    axes, each on the axes a group has, by ZeRO stage) and `check_placement` (it compares modes,
    and reads a degree only as `> 1`; the degree's value appears only in a violation's message)."""
    return (layout.zero_stage, *((g, a, d > 1) for g, degrees in group_degrees(layout).items()
                                 for a, d in degrees.items() if a in BATCH_AXES))


def _placement_violations(layout: Layout) -> tuple[Violation, ...]:
    key = batch_axes_key(layout)
    found = _PLACEMENT_VIOLATIONS.get(key)
    if found is None:
        if len(_PLACEMENT_VIOLATIONS) >= 4096:
            _PLACEMENT_VIOLATIONS.clear()
        shape = _batch_axes_shape(layout)
        if _CLEAN_SHAPES.get(shape):
            found = ()
        else:
            found = tuple(check_placement(placement_for(layout)))
            _CLEAN_SHAPES[shape] = not found
        _PLACEMENT_VIOLATIONS[key] = found
    return found


def errors(violations: list[Violation]) -> list[Violation]:
    """The violations that make a layout invalid."""
    return [v for v in violations if v.severity == "error"]


def _divisors(n: int) -> list[int]:
    """Divisors of n >= 1, ascending, by trial division up to isqrt(n) (O(sqrt n): a GPU count of
    3 * 2**40 takes ~1e6 steps, not 3e12)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _world_size(model, cluster, layout: Layout) -> list[Violation]:
    """Degrees multiply to the GPU / rank count (FC-13)."""
    gpus = cluster.num_gpus
    if layout.world_size == gpus:
        return []
    return [Violation(rule="world_size",
                      message=f"dp*tp*pp*cp = {layout.dp}*{layout.tp}*{layout.pp}*{layout.cp} = "
                              f"{layout.world_size} differs from the {gpus} GPUs (ranks) launched",
                      fix=f"launch {layout.world_size} ranks or change the degrees to multiply to {gpus}")]


def _alternatives(model: ModelSpec, gpus: int, layout: Layout) -> str:
    """Layouts of `gpus` GPUs whose tp divides the heads and KV heads: tp x dp (any dp where the framework holds
    the per-rank batch and the global batch follows as per-rank batch x dp, torchtitan; else when dp divides the
    global batch, as the batch rule asks at micro-batch 1: the framework's `BATCH_HELD`), tp x pp (when the
    layers split evenly), and the smallest larger GPU count that allows tp = that count."""
    a, kv, n = model.num_attention_heads, model.num_key_value_heads, model.num_hidden_layers
    batch = layout.global_batch_size
    per_rank = frameworks.BY_NAME[layout.framework].BATCH_HELD == "per_rank"
    # t divides a and kv iff it divides gcd(a, kv): enumerate those (few), not the GPU count's.
    ok = [t for t in reversed(_divisors(math.gcd(a, kv))) if gpus % t == 0]
    options = []
    for t in ok:
        rest = gpus // t
        if per_rank or batch % rest == 0:
            options.append(f"tp={t} x dp={rest}")
        if rest > 1 and n % rest == 0:
            options.append(f"tp={t} x pp={rest} ({n // rest} layers per stage)")
    bigger = next((g for g in range(gpus + 1, 2 * a + 1) if a % g == 0 and kv % g == 0), None)
    if bigger:
        options.append(f"{bigger} GPUs with tp={bigger}")
    if not options:
        return (f"none of tp x dp or tp x pp: {gpus:,} GPUs are more than tp x dp x pp can use "
                f"for a global batch of {batch:,} sequences (dp must divide it)")
    follows = " (the global batch follows as the per-rank batch x dp)" if per_rank and ok else ""
    return "; ".join(options[:5]) + follows


def _heads(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Attention heads split over tp (Megatron `divide(num_attention_heads, tp)`; FC-05, FC-06)."""
    a = model.num_attention_heads
    if a % layout.tp == 0:
        return []
    return [Violation(rule="heads_divisible_by_tp",
                      message=f"num_attention_heads={a} is not divisible by tp={layout.tp}",
                      fix=f"tp must divide {a}; valid layouts: {_alternatives(model, cluster.num_gpus, layout)}")]


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
    """Layers by pp·vpp, or an explicit split that sums to the layers (FC-09, FC-10); never more
    (virtual) stages than layers.

    Source: Megatron-LM `transformer_block.py` `get_num_layers_to_build` (num_layers // pp // vpp per
    chunk: an uneven count silently builds fewer layers; pp·vpp > num_layers builds stages with 0
    layers). Fixes name only what the CLI takes: `--pp`/`--vpp` values that divide the layers, or
    `planner plan --fix pp=N`, whose ILP chooses an uneven split. An explicit split with vpp > 1
    needs each rank's count a multiple of vpp in Megatron (equal chunks) but not in torchtitan,
    which sizes each virtual stage on its own (torchtitan `distributed/pipeline_parallel.py`
    `generate_llm_fqn_per_model_part`: layers spread over pp·vpp stages, the remainder on the
    first ones, so a rank's vpp chunks may differ by one layer)."""
    n, pp, vpp = model.num_hidden_layers, layout.pp, layout.vpp
    if layout.pipeline_layout is not None:
        return _pipeline_layout(model, layout)
    if pp * vpp > n:
        return [_too_many_stages(n, pp, vpp, cluster.num_gpus)]
    if layout.pipeline_layers is not None:
        split = layout.pipeline_layers
        equal_chunks = vpp > 1 and layout.framework != "torchtitan"
        bad = [c for c in split if c % vpp] if equal_chunks else []
        if sum(split) == n and not bad and min(split) >= 1:
            return []
        if sum(split) == n and min(split) >= 1:
            stages = [s for s, c in enumerate(split) if c % vpp]
            even = f"e.g. pipeline_layers={[n // pp] * pp}" if n % (pp * vpp) == 0 else \
                "vpp=1, or pp x vpp dividing the layers"
            even += (f", or keep this split with unequal chunks, "
                     f"{_layout_fix(pipeline_layout.from_rank_counts(tuple(split), vpp), pp)}")
            return [Violation(rule="pipeline_layers",
                              message=f"pipeline_layers={list(split)}: stage(s) {stages} hold "
                                      f"{[split[s] for s in stages]} layers, not multiples of "
                                      f"vpp={vpp} (interleaving builds {vpp} equal model chunks "
                                      f"per stage)",
                              fix=even)]
        return [Violation(rule="pipeline_layers",
                          message=f"pipeline_layers={list(split)} sums to {sum(split)}; the model has "
                                  f"num_hidden_layers={n} (each stage needs >= 1 layer"
                                  f"{f' and a multiple of vpp={vpp}' if equal_chunks else ''})",
                          fix=f"e.g. pipeline_layers={uneven_split(n, pp)}")]
    chunks = pp * vpp
    if n % chunks == 0:
        return []
    built = n // chunks * chunks
    what = f"pp={pp}" if vpp == 1 else f"pp x vpp = {pp} x {vpp} = {chunks} virtual stages"
    uneven = pipeline_layout.uneven_interleaved(n, pp, vpp) if vpp > 1 else None
    keep = _keep_pp_fix(n, pp, vpp)
    if uneven is not None:
        keep = (f"{keep}, or " if n % pp == 0 else "") + f"keep pp x vpp with {_layout_fix(uneven, pp)}"
    return [Violation(rule="layers_divisible_by_pp",
                      message=f"num_hidden_layers={n} is not divisible by {what}: an even split "
                              f"builds {built} layers, not {n}",
                      fix=f"{_pp_fix(n, vpp, cluster.num_gpus, pp)}, or {keep}")]


def _layout_fix(stages: tuple[str, ...], pp: int) -> str:
    """How to ask for `stages`: Megatron's account-for options where they build it, else the
    explicit layout string."""
    options = pipeline_layout.account_for_options(stages, pp)
    string = pipeline_layout.to_string(stages)
    # planner's option and Megatron-LM's flag both named: a Megatron script's check reads the latter
    text = f"`--pipeline-layout \"{string}\"` (Megatron-LM `{megatron.FLAG['pipeline_layout']} \"{string}\"`)"
    if not options or not any(options):
        return text
    flags = " ".join(megatron.FLAG[k] for k, on in zip(("account_for_embedding", "account_for_loss"), options)
                     if on)
    return f"Megatron's account-for split ({flags}: {text})"


def _pipeline_layout(model: ModelSpec, layout: Layout) -> list[Violation]:
    """An explicit virtual-stage layout: Megatron's `validate_layer_layout` model checks (decoder
    layers = num_layers; MTP layers m = the ones trained, `placement.mtp.mtp_layers`, or none,
    which places them before the L); the structure checks run when the layout is parsed
    (`pipeline_layout.parse`). Empty virtual stages are allowed, as Megatron builds them. Only
    Megatron reads such a layout (its layout string, or the account-for options).
    Source: Megatron-LM d98e8a6 `megatron/core/transformer/pipeline_parallel_layer_layout.py`
    (l. 111-115: the MTP count, rule `mtp_layout`)."""
    stages, n, pp = layout.pipeline_layout, model.num_hidden_layers, layout.pp
    text = pipeline_layout.to_string(stages)
    decoders = sum(pipeline_layout.decoder_counts(stages))
    mtp = "".join(stages).count("m")
    out = []
    if layout.framework != "megatron":
        out.append(Violation(rule="pipeline_layout",
                             message=f"pipeline_layout {text}: a virtual-stage layout is Megatron's "
                                     f"{megatron.FLAG['pipeline_layout']}; {layout.framework} reads none",
                             fix="framework=megatron, or drop the layout"))
    if decoders != n:
        uneven = pipeline_layout.uneven_interleaved(n, pp, layout.vpp)
        out.append(Violation(rule="pipeline_layout",
                             message=f"pipeline_layout {text} has {decoders} decoder layers t; the "
                                     f"model has num_hidden_layers={n}",
                             fix=f"e.g. {_layout_fix(uneven, pp)}" if uneven
                             else f"give {n} decoder layers t"))
    trained = mtp_mod.mtp_layers(model, layout)
    if mtp and mtp != trained:
        out.append(Violation(rule="mtp_layout",
                             message=f"pipeline_layout {text} has {mtp} MTP layers m, the layout trains "
                                     f"mtp_layers={trained} ({megatron.FLAG['mtp_num_layers']}): Megatron-LM "
                                     f"asserts they match (pipeline_parallel_layer_layout.py validate_layer_layout)",
                             fix=f"mtp_layers={mtp} ({megatron.FLAG['mtp_num_layers']} {mtp}), or {trained} m "
                                 f"before the L (none: placed there)"))
    ranks = pipeline_layout.rank_counts(stages, pp)
    if layout.pipeline_layers is not None and tuple(layout.pipeline_layers) != ranks:
        out.append(Violation(rule="pipeline_layout",
                             message=f"pipeline_layers={list(layout.pipeline_layers)} disagrees with "
                                     f"pipeline_layout {text}, which puts {list(ranks)} on the ranks",
                             fix="drop pipeline_layers (the layout decides)"))
    return out


def _keep_pp_fix(n: int, pp: int, vpp: int) -> str:
    """Keep pp: a vpp that splits the layers evenly, else `planner plan --fix pp=N` (its ILP
    chooses an uneven split; only vpp = 1 splits unevenly)."""
    if vpp > 1 and n % pp == 0:
        return f"keep pp={pp} with vpp in {{{', '.join(map(str, _divisors(n // pp)))}}}"
    return (f"`planner plan --fix pp={pp}{' --fix vpp=1' if vpp > 1 else ''}`, whose ILP splits "
            f"unevenly, e.g. {uneven_split(n, pp)}")


def _too_many_stages(n: int, pp: int, vpp: int, gpus: int) -> Violation:
    what = f"pp={pp} stages" if vpp == 1 else f"pp x vpp = {pp} x {vpp} = {pp * vpp} virtual stages"
    return Violation(rule="pp_exceeds_layers",
                     message=f"{what} for num_hidden_layers={n}: {pp * vpp - n} of them would hold "
                             f"0 layers (each stage needs >= 1)",
                     fix=_pp_fix(n, vpp, gpus, pp))


def _pp_fix(n: int, vpp: int, gpus: int, near: int) -> str:
    """`use pp=A (k layers per stage) or pp=B (...)`: the two pipeline degrees nearest `near` that
    split n layers evenly into pp·vpp chunks and divide the GPU count (vpp=1 if vpp cannot)."""
    if n % vpp:
        return _pp_fix(n, 1, gpus, near).replace("use ", "use vpp=1 with ", 1)
    per = n // vpp
    options = [p for p in _divisors(per) if p > 1 and gpus % p == 0]
    if not options and vpp > 1:
        return _pp_fix(n, 1, gpus, near).replace("use ", "use vpp=1 with ", 1)
    options = sorted(options, key=lambda p: (abs(p - near), -p))[:2]
    if not options:
        return ("use an uneven split (`planner explain --pipeline-layers`, or `planner plan "
                "--fix pp=N`, whose program splits unevenly), or pp=1")
    where = "stage" if vpp == 1 else "virtual stage"
    text = [f"pp={p} ({per // p} layer{'s' if per // p > 1 else ''} per {where})" for p in options]
    return "use " + " or ".join(text)


def _experts(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Routed experts by ep; ep·etp inside dp·cp·tp (Megatron `parallel_state.py`)."""
    out = []
    if layout.ep > 1 and not model.is_moe:
        out.append(Violation(rule="ep_without_experts",
                             message=f"ep={layout.ep} on a dense model: there are no experts to split "
                                     f"(Megatron-LM asserts \"num_experts must be non None to use expert "
                                     f"model parallelism\", arguments.py validate_args)",
                             fix="set ep=1"))
    if model.is_moe and model.num_experts % layout.ep:
        out.append(Violation(rule="experts_divisible_by_ep",
                             message=f"num_experts={model.num_experts} is not divisible by ep={layout.ep}",
                             fix=f"ep in {{{', '.join(map(str, _divisors(model.num_experts)))}}}"))
    mesh = layout.mesh
    inner = mesh.expert_host
    if not mesh.expert_group_divides():
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
    need = _sequence_divisor(cp, tp, layout.sequence_parallel)
    if s % need == 0:
        return []
    heads = model.num_attention_heads if model.is_mla else math.gcd(
        model.num_attention_heads, model.num_key_value_heads)
    if heads % tp:  # tp breaks the head rules too: the degree is what to change, not seq_len
        fit = [t for t in _divisors(heads)
               if s % _sequence_divisor(cp, t, layout.sequence_parallel) == 0]
        fix = (f"change tp, which does not divide the attention heads either: tp in "
               f"{{{', '.join(map(str, fit))}}} divides both the heads and seq_len={s}")
    else:
        fix = f"use seq_len={-(-s // need) * need}"
        fit = [c for c in _cp_dividing(s, tp, layout.sequence_parallel, 2 * cp)
               if cluster.num_gpus % (tp * layout.pp * c) == 0]  # and the world size keeps a dp
        if cp > 1 and fit:  # the degree is the usual change, not the data's length (fresh-user review)
            fix = f"use cp in {{{', '.join(map(str, fit))}}}, which divide seq_len={s}, or {fix[4:]}"
    return [Violation(rule="sequence_divisible",
                      message=f"seq_len={s} is not divisible by {need} (cp={cp}, tp={tp}, "
                              f"sequence_parallel={layout.sequence_parallel})", fix=fix)]


CP_MIN_TOKENS_PER_RANK = 4096
"""Fewest tokens of a sequence per context-parallel rank (seq_len / cp) NVIDIA's guidance runs CP
at. Source: NVIDIA-NeMo/Megatron-Bridge@067f987 skills/nemo-mbridge-perf-parallelism-strategies/
SKILL.md, "Decision by Sequence Length": no CP below 8K tokens, CP 2 at 8K-32K, CP 4-8 from 32K
(each row's smallest sequence over its CP: 8K / 2 = 32K / 8 = 4,096 tokens per rank); docs/
performance-guide.md l. 44 ("when the sequence length is smaller than the hidden size, CP
produces narrow (or 'skinny') tensor shards on each GPU ... can degrade performance")."""


def _cp_short_chunk(model, cluster, layout: Layout) -> list[Violation]:
    """Context parallelism on a short per-rank chunk (seq_len / cp < CP_MIN_TOKENS_PER_RANK): a
    warning with the chunk and the cp that keeps the guidance's chunk, the rest of the factor
    moved to dp. What it costs in the model: every ring step merges partial outputs and
    gradients in HBM (`cost.step_time.cp_ring_bytes`, cp - 1 steps per layer), the attention
    kernels run on 2 cp load-balancing chunks of seq_len / (2 cp) tokens
    (`compute.attention_efficiency`), and the linear GEMMs on seq_len / cp rows."""
    cp, s = layout.cp, layout.seq_len
    if cp <= 1 or s / cp >= CP_MIN_TOKENS_PER_RANK:
        return []
    keep = max((c for c in _divisors(cp) if s / c >= CP_MIN_TOKENS_PER_RANK
                and s % _sequence_divisor(c, layout.tp, layout.sequence_parallel) == 0), default=1)
    use = "cp=1 (no context parallelism)" if keep == 1 else f"cp={keep}"
    chunks = (f" ({2 * cp} load-balancing chunks of {s // (2 * cp):,})"
              if layout.cp_comm_type != "a2a" else "")
    return [Violation(rule="cp_short_sequence", severity="warning",
                      message=f"cp={cp} splits seq_len={s:,} into {s // cp:,} tokens per rank{chunks}, "
                              f"below the {CP_MIN_TOKENS_PER_RANK:,} per rank of NVIDIA's guidance (no CP "
                              f"below 8K tokens, CP 2 at 8K-32K): each layer's {cp - 1} ring steps merge "
                              f"partial outputs and gradients in HBM and its attention and GEMMs run on short, "
                              f"skinny chunks",
                      fix=f"use {use} and move the factor {cp // keep} to dp (or tp, or pp where memory needs it)")]


def _cp_dividing(seq_len: int, tp: int, sequence_parallel: bool, most: int) -> list[int]:
    """The cp in [2, most] with seq_len % `_sequence_divisor`(cp, tp, sp) == 0, ascending. For
    cp >= 2 the divisor is cp x L with L = lcm(2, tp) under SP with tp > 1, else 2, so these are
    the divisors of seq_len / L (none when L does not divide seq_len): O(sqrt(seq_len)) steps, not
    one per cp (a cp of 10^5 at 10^6 GPUs made every such fix message cost 2 x 10^5 steps)."""
    unit = math.lcm(2, tp) if sequence_parallel and tp > 1 else 2
    if seq_len % unit:
        return []
    return [c for c in _divisors(seq_len // unit) if 2 <= c <= most]


def _sequence_divisor(cp: int, tp: int, sequence_parallel: bool) -> int:
    """What seq_len must be a multiple of (`_sequence`): 2·cp chunks for load-balanced CP, times
    tp (to the lcm with 2) with SP."""
    if sequence_parallel and tp > 1:
        return cp * math.lcm(2 if cp > 1 else 1, tp)
    return 2 * cp if cp > 1 else 1


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
    """Global batch by dp · micro-batch, at least one micro-batch per DP rank (m >= 1).

    Source: Megatron-LM `megatron/core/num_microbatches_calculator.py` (asserts global_batch_size
    divisible by micro_batch_size * data_parallel_size; m = global / (b · dp) >= 1)."""
    gbs, unit = layout.global_batch_size, layout.dp * layout.micro_batch_size
    if gbs % unit == 0:
        return []
    below = gbs // unit * unit
    low, high = (below, below + unit) if below else (unit, 2 * unit)
    few = (f" (fewer sequences than dp*micro_batch_size: m = 0 micro-batches; each DP rank needs "
           f"m >= 1)" if gbs < unit else "")
    return [Violation(rule="batch_divisible",
                      message=f"global_batch_size={gbs} is not divisible by "
                              f"dp*micro_batch_size = {layout.dp}*{layout.micro_batch_size} = {unit}"
                              f"{few}",
                      fix=f"use global_batch_size={low} or {high}")]


def _zero_with_pp(model, cluster, layout: Layout) -> list[Violation]:
    """ZeRO-2/3 with PP: DeepSpeed rejects it; Megatron-LM does not run it; torchtitan runs ZeRO-3
    with PP (no finding: costed as it runs, the stage's parameters gathered and its gradients
    reduce-scattered once per step, accumulated unsharded in between, `comm.fsdp_syncs_once_per_step`).

    Source: DeepSpeed `deepspeed/runtime/pipe/engine.py` (`assert self.zero_optimization_stage() < 2,
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"`); Megatron-LM shards gradients
    and parameters only through Megatron-FSDP (`planner.frameworks.megatron.ZERO_FLAGS`,
    docs/discussions/megatron-fsdp-user-guide),
    which asserts against pipeline parallelism in its version 2 and is untested with it in version 1
    (no Megatron-LM test runs it with pp > 1): a plan must not depend on it. torchtitan composes
    FSDP2 with PP (`parallelize_llama.py` apply_fsdp with pp_enabled; its 3D runs in
    benchmarks/llama3_h100_202412_torchtitan.md). torchtitan's ZeRO-2 (FSDP2 without resharding
    after forward) is its ZeRO-3 under PP: `apply_fsdp` reshards after forward only without PP
    (the reshard policy "default" -> `not pp_enabled`), so a ZeRO-2 layout with pp > 1
    is refused in favour of zero_stage 3, which `cost.memory` charges the resident stage blocks and
    the accumulated fp32 gradients (`_torchtitan_pp_accumulation`)."""
    if layout.pp == 1 or layout.zero_stage < 2:
        return []
    m = layout.num_microbatches
    if layout.framework == "deepspeed":
        return [Violation(rule="zero_with_pp",
                          message=f"ZeRO-{layout.zero_stage} with pp={layout.pp}: DeepSpeed's pipeline "
                                  f"engine rejects ZeRO-2/3",
                          fix="use zero_stage=1 with pipeline parallelism")]
    if layout.framework == "megatron":
        return [Violation(rule="zero_with_pp",
                          message=f"ZeRO-{layout.zero_stage} with pp={layout.pp}: Megatron-LM shards "
                                  f"gradients/parameters only through Megatron-FSDP, which does not "
                                  f"support (v2) or test (v1) pipeline parallelism",
                          fix=f"use zero_stage=1 ({' '.join(megatron.ZERO_FLAGS[1])}) with "
                              f"pipeline parallelism, or framework=torchtitan for FSDP with PP")]
    if layout.zero_stage == 2:
        return [Violation(rule="zero_with_pp",
                          message=f"ZeRO-2 with pp={layout.pp} under torchtitan: with PP torchtitan "
                                  f"never reshards parameters after forward, so its FSDP2 is one run "
                                  f"whatever the ZeRO stage -- sharded parameters with the stage's "
                                  f"blocks kept unsharded, gradients accumulated unsharded in fp32 over "
                                  f"the {m} micro-batches -- which zero_stage=3 costs",
                          fix="use zero_stage=3 (the same torchtitan run; torchtitan has no ZeRO-1)")]
    return []  # torchtitan ZeRO-3 + PP: costed as it runs (comm.fsdp_syncs_once_per_step)


def _mxfp8_supported(cluster, layout: Layout) -> list[Violation]:
    """fp8 with the mxfp8 recipe needs compute capability 10.0 (`precision.blackwell_or_later`).

    Source: NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/quantization.py
    `_compute_mxfp8_support` l. 162-168 ("Device compute capability 10.0 or higher required for
    MXFP8 execution."), which `check_mxfp8_support` returns and the fp8 autocast asserts."""
    if layout.precision != "fp8" or layout.fp8_recipe != "mxfp8" or blackwell_or_later(cluster.gpu.name):
        return []
    return [Violation(rule="precision_supported",
                      message=f"fp8_recipe=mxfp8 on {cluster.gpu.name}: Transformer Engine runs MXFP8 only on "
                              f"compute capability 10.0 or higher (Blackwell); it refuses it here",
                      fix="use fp8_recipe=tensorwise, delayed or blockwise, or a Blackwell GPU")]


def _zero_without_dp(model, cluster, layout: Layout) -> list[Violation]:
    """ZeRO shards only over the data-parallel (dp x cp) axis: at dp·cp = 1 it has no effect (FC-16)."""
    if layout.zero_stage == 0 or layout.dp_shard_degree * layout.cp > 1:
        return []
    return [Violation(rule="zero_without_dp", severity="warning",
                      message=f"ZeRO-{layout.zero_stage} at dp={layout.dp} (shard group "
                              f"{layout.dp_shard_degree * layout.cp}) has no effect: ZeRO shards "
                              f"only over the data-parallel axis",
                      fix="raise dp (lower tp/pp) for ZeRO to save memory")]


def _precision_supported(model, cluster, layout: Layout) -> list[Violation]:
    """The compute precision must be one the GPU's tensor cores run (fp8 on A100, bf16 on V100: no).

    Source: `cluster.gpu.peak_tflops` keys (datasheet dense peaks, only for supported dtypes; see
    `precision.supported_precisions`)."""
    if layout.precision in cluster.gpu.peak_tflops:  # Layout admits only PRECISIONS
        return _mxfp8_supported(cluster, layout)
    have = supported_precisions(cluster.gpu.peak_tflops)
    return [Violation(rule="precision_supported",
                      message=f"GPU {cluster.gpu.name} has no {layout.precision} tensor cores; it "
                              f"supports {', '.join(have) or 'none of ' + ', '.join(PRECISIONS)}",
                      fix=f"use precision={have[0]}" if have else "use a GPU with bf16 or fp16")]


def _tp_domain(model, cluster, layout: Layout) -> list[Violation]:
    """A TP group should sit inside one scale-up (NVLink) domain: TP all-reduces activations in
    every layer (2 in forward, 2 in backward per block), on the critical path. With tp innermost
    in the rank order, a group spans domains when tp exceeds the domain, or (on more GPUs than one
    domain) when tp does not divide it.

    Source: Narayanan et al. 2021 "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM" §3.3 Takeaway #1 (tensor parallelism up to the GPUs of a server, pipeline
    across servers) and §2.3 (two all-reduces each in forward and backward per layer)."""
    tp, domain = layout.tp, cluster.scaleup_domain_gpus
    if layout.mesh.tp_in_domain(domain):
        return []
    inner = max(d for d in _divisors(tp) if d <= domain and domain % d == 0)
    how = (f"exceeds the {domain}-GPU scale-up domain" if tp > domain else
           f"does not divide the {domain}-GPU scale-up domain, so some TP groups straddle two")
    return [Violation(rule="tp_spans_scaleup_domain", severity="warning",
                      message=f"tp={tp} {how}: its per-layer all-reduces cross the scale-out "
                              f"network ({cluster.network_gb_per_s_per_gpu:g} GB/s per GPU instead "
                              f"of {cluster.scaleup_gb_per_s:g} GB/s)",
                      fix=f"use tp={inner} and move the remaining factor {tp // inner} to pp or dp")]


def _zero_stage_supported(model, cluster, layout: Layout) -> list[Violation]:
    """The ZeRO stage must be one the framework implements (its `ZERO_STAGES`, sources there:
    `planner.frameworks.<framework>`)."""
    stages = frameworks.BY_NAME[layout.framework].ZERO_STAGES
    if layout.zero_stage in stages:
        return []
    return [Violation(rule="zero_stage_supported",
                      message=f"{layout.framework} has no ZeRO-{layout.zero_stage}: it implements "
                              f"ZeRO stages {', '.join(map(str, stages))} (FSDP2 shards parameters "
                              f"with the optimizer; nothing shards the optimizer alone)",
                      fix=f"use zero_stage=2 ({torchtitan.NAME['reshard']}="
                          f"{torchtitan.RESHARD_NEVER}) or 0, or framework=megatron/deepspeed for "
                          f"ZeRO-1")]


def _moe_dispatcher_supported(model, cluster, layout: Layout) -> list[Violation]:
    """A token dispatcher (`Layout.moe_dispatcher`) must be one the framework can be set to (its
    `MOE_DISPATCHERS`: Megatron-LM alltoall / flex; torchtitan and DeepSpeed none, their one
    all-to-all being the default None)."""
    allowed = frameworks.BY_NAME[layout.framework].MOE_DISPATCHERS
    if layout.moe_dispatcher is None or layout.moe_dispatcher in allowed:
        return []
    return [Violation(rule="moe_dispatcher_supported",
                      message=f"{layout.framework} has no {layout.moe_dispatcher} token dispatcher "
                              f"(it can be set to: {', '.join(allowed) or 'none, one all-to-all'})",
                      fix="leave moe_dispatcher unset, or framework=megatron")]


def _precision_aware_optimizer(model, cluster, layout: Layout) -> list[Violation]:
    return precision_aware_optimizer_violations(layout)


def precision_aware_optimizer_violations(layout: Layout) -> list[Violation]:
    """Megatron-LM's assertions on the precision-aware optimizer and its dtype knobs (sources:
    `placement.precision` module docstring): only Megatron-LM has it; a dtype other than fp32 needs
    it; it needs Adam and the distributed optimizer (ZeRO >= 1; Megatron-FSDP, ZeRO 2/3, runs it
    with the decoupled gradient, `precision` module docstring, where main_grads_dtype has no effect:
    a warning); main-grads bf16 contradicts an fp32 gradient reduction under bf16 / fp8."""
    given = {name: getattr(layout, name) for name in OPTIMIZER_DTYPES if getattr(layout, name)
             not in (None, "fp32")}
    on = bool(layout.precision_aware_optimizer)
    out = _fp8_recipe(layout) + _fp8_param_gather(layout)
    if not on and not given:
        return out
    named = ", ".join(f"{k}={v}" for k, v in given.items()) or "precision_aware_optimizer=true"
    if layout.framework != "megatron":
        return [Violation(rule="precision_aware_optimizer",
                          message=f"{named}: only Megatron-LM has the precision-aware optimizer; "
                                  f"{layout.framework} keeps fp32 optimizer states",
                          fix="drop it, or framework=megatron")]
    if given and not on:
        out.append(Violation(rule="precision_aware_optimizer",
                             message=f"{named} needs the precision-aware optimizer: Megatron-LM "
                                     f"asserts fp32 without it (optimizer_config.py)",
                             fix="set precision_aware_optimizer=true, or drop it"))
    if on and layout.optimizer != "adamw":
        out.append(Violation(rule="precision_aware_optimizer",
                             message=f"the precision-aware optimizer runs only with Adam, not "
                                     f"optimizer={layout.optimizer}",
                             fix="use optimizer=adamw, or drop precision_aware_optimizer"))
    if on and layout.zero_stage == 0:
        out.append(Violation(rule="precision_aware_optimizer",
                             message="the precision-aware optimizer runs only with the distributed "
                                     "optimizer; zero_stage=0 has none",
                             fix="use zero_stage=1, or drop precision_aware_optimizer"))
    if (on and layout.zero_stage >= 2 and layout.precision == "fp8"
            and layout.fp8_recipe not in (None, "delayed") and layout.main_params_dtype in (None, "fp32")):
        out.append(Violation(rule="precision_aware_optimizer",
                             message=f"the precision-aware optimizer under Megatron-FSDP "
                                     f"(zero_stage={layout.zero_stage}) with fp8_recipe={layout.fp8_recipe} "
                                     f"and fp32 master weights: Megatron-LM hands Megatron-FSDP's gradients "
                                     f"to the optimizer as decoupled_grad (training.py l. 2649-2650) but "
                                     f"builds FusedAdam reading .grad for this recipe (optimizer/__init__.py "
                                     f"l. 576-585), which then skips every parameter (Transformer Engine "
                                     f"fused_adam.py l. 632-638)",
                             fix="use fp8_recipe=delayed or main_params_dtype=fp16, or zero_stage=1"))
    if layout.main_grads_dtype not in (None, "fp32") and layout.zero_stage >= 2:
        out.append(Violation(rule="main_grads_dtype_under_fsdp", severity="warning",
                             message=f"main_grads_dtype={layout.main_grads_dtype} has no effect under "
                                     f"Megatron-FSDP (zero_stage={layout.zero_stage}): Megatron-LM's "
                                     f"--megatron-fsdp-main-grads-dtype replaces it (arguments.py "
                                     f"l. 3691-3694); costed without it",
                             fix="drop main_grads_dtype"))
    if (layout.main_grads_dtype == "bf16" and layout.precision != "fp16"
            and layout.grad_reduce_dtype == "fp32"):
        out.append(Violation(rule="precision_aware_optimizer",
                             message=f"main_grads_dtype=bf16 with grad_reduce_dtype=fp32 at "
                                     f"{layout.precision}: Megatron-LM asserts main grads fp32 when "
                                     f"gradients accumulate and reduce in fp32",
                             fix="drop grad_reduce_dtype=fp32 (main grads bf16 reduce in bf16), or "
                                 "use main_grads_dtype=fp32"))
    return out


def _cross_entropy(model, cluster, layout: Layout) -> list[Violation]:
    """The loss knobs (`Layout.cross_entropy_fusion`, `Layout.loss_chunks`) as the frameworks take
    them: the fusion is Megatron-LM's, and Megatron-LM refuses its Transformer Engine form
    (NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py l. 1697-1702: "Transformer Engine
    cross entropy loss fusion is disabled due to stability issues"); the chunked loss is
    torchtitan's, and its chunks split the micro-batch's tokens on each rank evenly
    (pytorch/torchtitan b5bcd76 torchtitan/components/loss.py `ChunkedLossWrapper`:
    `torch._check(seq_len % num_chunks == 0)` on the local tokens)."""
    out = []
    fusion, chunks = layout.cross_entropy_fusion, layout.loss_chunks
    if fusion is not None and layout.framework != "megatron":
        out.append(Violation(rule="cross_entropy", message=f"cross_entropy_fusion={fusion} is Megatron-LM's; "
                             f"{layout.framework} has no such knob", fix="drop it, or framework=megatron"))
    elif fusion == "te":
        out.append(Violation(rule="cross_entropy",
                             message="cross_entropy_fusion=te: Megatron-LM refuses Transformer Engine's "
                                     "cross-entropy fusion at start-up (stability issues, arguments.py)",
                             fix="use cross_entropy_fusion=native (the same memory), or drop it"))
    if chunks is not None and chunks > 1 and layout.framework != "torchtitan":
        out.append(Violation(rule="cross_entropy", message=f"loss_chunks={chunks}: {layout.framework} has no "
                             f"chunked loss (torchtitan's ChunkedLossWrapper)", fix="drop it, or loss_chunks=1"))
    tokens = layout.micro_batch_size * layout.seq_len // layout.cp
    if layout.framework == "torchtitan" and loss_chunks(layout) > 1 and tokens % loss_chunks(layout):
        out.append(Violation(rule="cross_entropy",
                             message=f"torchtitan's chunked loss splits each rank's {tokens} tokens per "
                                     f"micro-batch into loss_chunks={loss_chunks(layout)}, which must "
                                     f"divide them",
                             fix="pick loss_chunks dividing the tokens per micro-batch, or loss_chunks=1"))
    return out


def _mtp_and_swiglu_store(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """Megatron-LM's knobs `Layout.mtp_layers` (> 0) and `Layout.swiglu_fp8_input_store` under
    another framework (torchtitan's MTP is a DeepSeek-V3 debug config without PP or CP,
    `placement.mtp.TRAINED_BY_DEFAULT`), and the fp8 SwiGLU input store on a model whose MLP is
    not SwiGLU: Megatron-LM raises "Storing activation input in FP8 is supported only for SwiGLU"
    (NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py l. 2467-2469)."""
    out = []
    if layout.framework != "megatron" and layout.mtp_layers:
        out.append(Violation(rule="mtp_layers", message=f"mtp_layers={layout.mtp_layers}: multi-token "
                             f"prediction is costed as Megatron-LM trains it; {layout.framework} has none here",
                             fix="mtp_layers=0, or framework=megatron"))
    if layout.swiglu_fp8_input_store:
        if layout.framework != "megatron":
            out.append(Violation(rule="swiglu_fp8_input_store", message=f"swiglu_fp8_input_store is "
                                 f"Megatron-LM's; {layout.framework} has no such knob", fix="drop it"))
        elif not (model.gated_mlp and model.hidden_act in ("silu", "swish")):
            out.append(Violation(rule="swiglu_fp8_input_store",
                                 message=f"swiglu_fp8_input_store: {model.name}'s MLP is not SwiGLU "
                                         f"({model.hidden_act}); Megatron-LM refuses the fp8 store",
                                 fix="drop it"))
    return out


def _fp8_recipe(layout: Layout) -> list[Violation]:
    """`Layout.fp8_recipe` is Megatron-LM's Transformer Engine recipe (`layout.FP8_RECIPES`) or
    torchtitan's torchao float8 recipe (`layout.TORCHAO_FP8_RECIPES`); it acts only under fp8."""
    if layout.fp8_recipe is None:
        return []
    allowed = {"megatron": FP8_RECIPES, "torchtitan": TORCHAO_FP8_RECIPES}.get(layout.framework, ())
    if layout.fp8_recipe not in allowed:
        return [Violation(rule="precision_aware_optimizer",
                          message=f"fp8_recipe={layout.fp8_recipe} is not a {layout.framework} fp8 recipe"
                                  + (f" (it runs {', '.join(allowed)})" if allowed else "; it has no such knob here"),
                          fix=f"use fp8_recipe={' / '.join(allowed)}" if allowed else "drop it, or framework=megatron")]
    if layout.precision != "fp8":
        return [Violation(rule="fp8_recipe_without_fp8", severity="warning",
                          message=f"fp8_recipe={layout.fp8_recipe} has no effect at "
                                  f"precision={layout.precision}",
                          fix="drop it, or precision=fp8")]
    return []


def _fp8_param_gather(layout: Layout) -> list[Violation]:
    """`Layout.fp8_param_gather` is Megatron-LM's fp8 parameter flag: it acts only under fp8 and
    Megatron asserts the distributed optimizer or an FSDP with it
    (NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py l. 1095-1097)."""
    if not layout.fp8_param_gather:
        return []
    if layout.framework != "megatron":
        return [Violation(rule="fp8_param_gather",
                          message=f"fp8_param_gather=true is Megatron-LM's fp8 parameter gather; "
                                  f"{layout.framework} has no such knob here",
                          fix="drop it, or framework=megatron")]
    out = []
    if layout.precision != "fp8":
        out.append(Violation(rule="fp8_param_gather_without_fp8", severity="warning",
                             message=f"fp8_param_gather=true has no effect at precision={layout.precision}",
                             fix="drop it, or precision=fp8"))
    if layout.zero_stage == 0:
        out.append(Violation(rule="fp8_param_gather",
                             message="fp8_param_gather=true: Megatron-LM asserts the distributed optimizer "
                                     "or Megatron-FSDP with it; zero_stage=0 has neither",
                             fix="use zero_stage=1 (the distributed optimizer), or drop fp8_param_gather"))
    return out


def _grad_reduce_supported(model, cluster, layout: Layout) -> list[Violation]:
    """The gradient-reduction dtype must be one the framework runs at the compute precision
    (`precision.allowed_grad_reduce_dtypes`; sources in `planner.frameworks.<framework>`)."""
    allowed = allowed_grad_reduce_dtypes(layout)
    if grad_reduce_dtype(layout) in allowed:
        return []
    return [Violation(rule="grad_reduce_supported",
                      message=f"{layout.framework} at {layout.precision} cannot reduce gradients in "
                              f"{layout.grad_reduce_dtype}; it reduces in {', '.join(allowed)}",
                      fix=f"use grad_reduce_dtype={allowed[0]}")]


def _torchtitan_dims(model, cluster, layout: Layout) -> list[Violation]:
    """What torchtitan refuses, or runs differently, at start-up for these degrees.

    - cp > 1 turns FSDP on (`fsdp_enabled = dp_shard_enabled or cp_enabled`): parameters are
      sharded over dp_shard x cp whatever the ZeRO stage asked, so only zero_stage 3 (or 2 without
      PP) describes the run;
    - DDP (no sharding) with tp or pp raises "DDP has not supported > 1D parallelism";
    - EP: etp must be 1 or tp, and EP borrows all of cp (x tp when etp = 1) and part of dp_shard:
      ep must be a multiple of that borrow and divide dp_shard x borrow.
    Source: torchtitan `torchtitan/distributed/parallel_dims.py` (`fsdp_enabled`,
    `ParallelDims._validate`), `models/llama3/infra/parallelize.py` (DDP check), at 238fa99."""
    if layout.framework != "torchtitan":
        return []
    out = []
    if layout.cp > 1 and layout.zero_stage < 2:
        out.append(Violation(rule="torchtitan_cp_fsdp",
                             message=f"cp={layout.cp} with zero_stage={layout.zero_stage}: torchtitan "
                                     f"shards parameters with FSDP over dp_shard x cp whenever cp > 1",
                             fix="use zero_stage=3 (what torchtitan runs)"))
    if layout.zero_stage == 0 and layout.dp > 1 and (layout.tp > 1 or layout.pp > 1):
        out.append(Violation(rule="torchtitan_ddp",
                             message=f"DDP (zero_stage=0, dp={layout.dp}) with tp={layout.tp} "
                                     f"pp={layout.pp}: torchtitan raises 'DDP has not supported > 1D "
                                     f"parallelism'",
                             fix="use zero_stage=3 (FSDP) with tp or pp"))
    if layout.ep > 1:
        out += _torchtitan_experts(layout)
    return out


def _deepspeed_autotp(model, cluster, layout: Layout) -> list[Violation]:
    """DeepSpeed's tensor parallelism (AutoTP training) combines with ZeRO stages 0-2 only.

    Source: DeepSpeed tutorial "Automatic Tensor Parallelism (Training)"
    (deepspeed.ai/tutorials/autotp-training: "ZeRO Optimization ... (Stage 0, 1, or 2)");
    DeepSpeedExamples PR 1004 ("AutoTP+ZeRO-3 not supported")."""
    if layout.framework != "deepspeed" or layout.tp == 1 or layout.zero_stage < 3:
        return []
    return [Violation(rule="deepspeed_autotp_zero3",
                      message=f"tp={layout.tp} with ZeRO-3: DeepSpeed's AutoTP training combines with "
                              f"ZeRO stages 0, 1 or 2 only",
                      fix="use zero_stage=2 with tp > 1, or tp=1 with ZeRO-3")]


def _deepspeed_parallelism(model, cluster, layout: Layout) -> list[Violation]:
    """What DeepSpeed's engine cannot build: interleaved virtual pipeline stages (its pipeline
    engine runs one schedule, `TrainSchedule`, non-interleaved 1F1B) and ring (p2p) context
    parallelism (its sequence parallelism is Ulysses, an all-to-all over heads: cp_comm_type a2a).

    Source: deepspeedai/DeepSpeed@edaa722 deepspeed/runtime/pipe/schedule.py (`TrainSchedule`,
    `InferenceSchedule`, `DataParallelSchedule`: no interleaved schedule) and pipe/engine.py
    (`train_batch` builds `schedule.TrainSchedule`); deepspeed/sequence/layer.py
    (`DistributedAttention`: all-to-all before and after the local attention)."""
    if layout.framework != "deepspeed":
        return []
    out = []
    if layout.vpp > 1:
        out.append(Violation(rule="deepspeed_interleaving",
                             message=f"vpp={layout.vpp}: DeepSpeed's pipeline engine runs "
                                     f"non-interleaved 1F1B only (TrainSchedule)",
                             fix="use vpp=1 with framework=deepspeed, or framework=megatron"))
    if layout.cp > 1 and layout.cp_comm_type != "a2a":
        out.append(Violation(rule="deepspeed_ring_context_parallel",
                             message=f"cp={layout.cp} with cp_comm_type={layout.cp_comm_type}: "
                                     f"DeepSpeed's sequence parallelism is Ulysses (all-to-all over "
                                     f"heads), not a ring",
                             fix="use cp_comm_type=a2a (Ulysses) or cp=1 with framework=deepspeed"))
    return out


def _torchtitan_experts(layout: Layout) -> list[Violation]:
    ep, etp, tp, cp = layout.ep, layout.etp, layout.tp, layout.cp
    if etp not in (1, tp):
        return [Violation(rule="torchtitan_parallel_dims",
                          message=f"etp={etp} with ep={ep}: torchtitan supports only etp = tp ({tp}) "
                                  f"or etp = 1",
                          fix=f"use etp=1 or etp={tp}")]
    borrowed = cp * (tp if etp == 1 else 1)
    shard = layout.dp_shard_degree if layout.zero_stage >= 2 else 1
    if ep % borrowed == 0 and (shard * borrowed) % ep == 0:
        return []
    valid = [d for d in range(borrowed, shard * borrowed + 1, borrowed) if (shard * borrowed) % d == 0]
    return [Violation(rule="torchtitan_parallel_dims",
                      message=f"ep={ep} with etp={etp}: torchtitan's EP borrows all of cp"
                              f"{' x tp' if etp == 1 else ''} ({borrowed}) and part of dp_shard "
                              f"({shard}), so ep must be a multiple of {borrowed} dividing "
                              f"{shard * borrowed}",
                      fix=f"use ep in {{{', '.join(map(str, valid))}}}")]


def _no_effect(model, cluster, layout: Layout) -> list[Violation]:
    """Knobs that do nothing in this layout (warnings).

    Sources: Megatron-LM `megatron/training/arguments.py` (interleaving asserts
    pipeline_model_parallel_size > 1; `sequence_parallel` is switched off when
    tensor_model_parallel_size == 1; expert_tensor_parallel_size applies to MoE layers only);
    ZeRO-0 shards nothing, so the HSDP split dp = dp_replicate x dp_shard changes nothing."""
    out = []
    if layout.vpp > 1 and layout.pp == 1:
        out.append(Violation(rule="vpp_without_pp", severity="error",
                             message=f"vpp={layout.vpp} with pp=1: interleaving needs pipeline stages "
                                     f"(Megatron-LM asserts pp > 1 for it)",
                             fix="set vpp=1, or pp >= 2"))
    if layout.sequence_parallel and layout.tp == 1:
        out.append(Violation(rule="sequence_parallel_without_tp", severity="warning",
                             message="sequence_parallel with tp=1 has no effect (Megatron-LM turns "
                                     "it off): SP splits activations over the TP group",
                             fix="drop sequence_parallel, or use tp >= 2"))
    if layout.etp > 1 and not model.is_moe:
        out.append(Violation(rule="etp_without_experts", severity="warning",
                             message=f"etp={layout.etp} on a dense model has no effect: expert tensor "
                                     f"parallelism splits only routed experts",
                             fix="set etp=1"))
    if layout.dp_shard is not None and layout.zero_stage == 0:
        out.append(Violation(rule="dp_shard_without_zero", severity="warning",
                             message=f"dp_shard={layout.dp_shard} with ZeRO-0 has no effect: ZeRO-0 "
                                     f"shards nothing over dp={layout.dp}",
                             fix="use zero_stage=3 for HSDP (or 1/2), or drop dp_shard"))
    moe_only = [m for m in (layout.offload_modules or ()) if m in ("expert_fc1", "moe_act")]
    if moe_only and not model.is_moe:
        # Megatron wraps these modules only inside MoE layers (transformer_config.py l. 1323-1341
        # at d98e8a6): on a dense model they offload nothing (fresh-user review: silently accepted)
        keep = [m for m in layout.offload_modules if m not in moe_only]
        out.append(Violation(rule="offload_modules_without_experts", severity="warning",
                             message=f"offload modules {', '.join(moe_only)} on a dense model have no "
                                     f"effect: they are the routed experts' tensors",
                             fix=f"offload modules {', '.join(keep)}" if keep else "drop the offload modules"))
    return out


def _recompute_modules(model, cluster, layout: Layout) -> list[Violation]:
    """`recompute_module_violations`, and moe_act on a GPU without Megatron-LM's grouped GEMM
    (`precision.grouped_gemm_supported`): moe_act recompute needs moe_grouped_gemm
    (transformer_config.py l. 1964-1967 @d98e8a6), which Megatron refuses there (arguments.py
    l. 1378-1380)."""
    out = recompute_module_violations(model, layout)
    if (layout.framework == "megatron" and layout.recompute == "selective" and model.is_moe
            and "moe_act" in (layout.recompute_modules or ()) and not grouped_gemm_supported(cluster.gpu.name)):
        out.append(Violation(rule="recompute_modules", message=(
            f"recompute_modules={','.join(layout.recompute_modules)} on {cluster.gpu.name}: moe_act needs "
            f"Megatron-LM's grouped GEMM ({megatron.FLAG['moe_grouped_gemm']}), which it refuses below "
            f"compute capability 8 (\"Unsupported compute capability for GroupedGEMM kernels.\", arguments.py)"),
            fix="drop moe_act"))
    return out


def recompute_module_violations(model: ModelSpec, layout: Layout) -> list[Violation]:
    """Megatron-LM's start-up errors on `--recompute-modules` under selective recompute (the list is
    read only then) and on `--offload-modules` beside it, that a Layout can state (the grouped-GEMM
    and shared-expert-overlap flags are the Megatron reader's, `check.megatron`).

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py
    `__post_init__` l. 1943-2012 (under recompute_granularity == "selective": moe_act needs
    moe_grouped_gemm, l. 1964-1967, a MoE flag the planner writes for MoE models only; mla_up_proj
    needs multi_latent_attention, l. 1969-1973; fp8 with the delayed recipe refuses moe_act and
    layernorm, l. 2000-2006) and l. 2164-2174 (fine-grained offloading of moe_act / expert_fc1
    while "moe" is recomputed)."""
    modules = set(layout.recompute_modules or ())
    if layout.framework != "megatron" or layout.recompute != "selective" or not modules:
        return []
    out = []
    listed = f"recompute_modules={','.join(layout.recompute_modules)}"
    if "moe_act" in modules and not model.is_moe:
        out.append(Violation(rule="recompute_modules", message=(
            f"{listed} on {model.name}, which has no MoE layer: Megatron-LM raises \"moe_act in "
            f"recompute_modules is only supported with moe_grouped_gemm.\" (transformer_config.py)"),
            fix="drop moe_act"))
    if "mla_up_proj" in modules and not model.is_mla:
        out.append(Violation(rule="recompute_modules", message=(
            f"{listed} on {model.name}, which has no multi-latent attention: Megatron-LM raises "
            f"\"mla_up_proj in recompute_modules is only supported with multi_latent_attention.\" "
            f"(transformer_config.py)"), fix="drop mla_up_proj"))
    fp8_delayed = layout.precision == "fp8" and (layout.fp8_recipe or "delayed") == "delayed"
    if fp8_delayed and modules & {"moe_act", "layernorm"}:
        out.append(Violation(rule="recompute_modules", message=(
            f"{listed} at fp8 with the delayed recipe: Megatron-LM raises \"Delayed scaling does not "
            f"support moe_act and layernorm recompute for fp8.\" (transformer_config.py)"),
            fix="drop moe_act and layernorm, or fp8_recipe=tensorwise / blockwise / mxfp8"))
    inside = {"moe_act", "expert_fc1"} & set(layout.offload_modules or ())
    if "moe" in modules and inside:
        out.append(Violation(rule="recompute_modules", message=(
            f"{listed} with offload_modules={','.join(layout.offload_modules)}: Megatron-LM asserts "
            f"\"Cannot offload {sorted(inside)} while recomputing the entire MoE layer.\" "
            f"(transformer_config.py)"), fix=f"drop moe from the recompute modules or "
                                             f"{', '.join(sorted(inside))} from the offload modules"))
    return out


def _ep_comm_overlap(model, cluster, layout: Layout) -> list[Violation]:
    return ep_comm_overlap_violations(layout)


def _tp_comm_overlap(model, cluster, layout: Layout) -> list[Violation]:
    """One error (rule `tp_comm_overlap_needs_sp`) when a Megatron-LM layout switches TP
    communication / GEMM overlap on (`Layout.tp_comm_overlap` True) without sequence parallelism:
    Megatron-LM refuses to start. Shared by explain (`--overlap tp-comm=on`) and check (the Megatron
    reader states the overlap and sequence parallelism through the same Layout fields); plan
    switches the overlap on only with sequence parallelism (`overlap.tuned`).
    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py `validate_args`
    (asserts sequence_parallel when tp_comm_overlap is set)."""
    if layout.framework != "megatron" or not layout.tp_comm_overlap or layout.sequence_parallel:
        return []
    flag, sp = megatron.FLAG["tp_comm_overlap"], megatron.FLAG["sequence_parallel"]
    return [Violation(
        rule="tp_comm_overlap_needs_sp", fix=f"add {sp}, or turn the overlap off",
        message=f"TP comm overlap ({flag}) without sequence parallelism ({sp}): Megatron-LM asserts "
                f"TP communication / GEMM overlap only with sequence parallelism (validate_args)")]


def _moe_tp_sequence_parallel(model, cluster, layout: Layout) -> list[Violation]:
    """One error (rule `moe_tp_needs_sp`) when a Megatron-LM layout trains an MoE model with tp > 1
    and no sequence parallelism: Megatron-LM's MoE layer raises at the first training forward
    ("During training, performance may degrade if MoE and tensor parallelism are enabled without
    also enabling sequence parallelism.", a ValueError, not a warning), so the job dies in its first
    step. Shared by plan (whose search then never keeps such a layout, even under `--fix
    sequence_parallel=false`), explain and check (the Megatron reader states --sequence-parallel as
    `Layout.sequence_parallel`); Megatron turns sequence parallelism off itself at tp = 1.

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/moe/moe_layer.py `MoELayer.forward`
    l. 636-640 (`self.training and self.attn_tp_group.size() > 1 and not
    self.config.sequence_parallel` -> ValueError); megatron/core/model_parallel_config.py
    l. 560-565 (ep > 1 and tp > 1 without it: a warning at config time). The assertion in
    `validate_args` that older releases had ("When using MoE and tensor parallelism, sequence
    parallelism must be used.") survives only in megatron/training/yaml_arguments.py (--yaml-cfg)."""
    if layout.framework != "megatron" or not model.is_moe or layout.tp == 1 or layout.sequence_parallel:
        return []
    sp = megatron.FLAG["sequence_parallel"]
    return [Violation(
        rule="moe_tp_needs_sp", fix=f"add {sp} (or tp=1)",
        message=f"{model.name} is an MoE model trained with tp={layout.tp} and no sequence parallelism "
                f"({sp}): Megatron-LM's MoE layer raises at the first training step \"During training, "
                f"performance may degrade if MoE and tensor parallelism are enabled without also "
                f"enabling sequence parallelism.\" (moe_layer.py MoELayer.forward)")]


EP_OVERLAP_ASSERTIONS = {
    "ep": "overlap_moe_expert_parallel_comm is only supported with expert model parallelism",
    "dispatcher": "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher",
    "full": "disable full recomputation when enabling overlap_moe_expert_parallel_comm",
    "moe": "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm",
    "vpp": "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified "
           "when pipeline_model_parallel_size > 1",
}
"""Megatron-LM's assertion messages on the EP all-to-all overlap that a Layout can break, by
condition. Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py
`TransformerConfig.__post_init__` l. 3002-3034 (under overlap_moe_expert_parallel_comm)."""


def ep_comm_overlap_broken(layout: Layout) -> tuple[str, ...]:
    """The conditions of EP_OVERLAP_ASSERTIONS that `layout` breaks were its EP all-to-all overlap
    on (whatever it says), in that order: ep > 1; the alltoall or flex token dispatcher (None is
    Megatron-LM's default, allgather); no full recompute (`Layout.recompute` "full", which a
    Megatron launch states as full recompute granularity with its method and layer count, also
    asserted None); no "moe" among the recompute modules (asserted whether or not granularity is
    selective); with pp > 1, virtual stages (vpp > 1: the virtual-stage size Megatron asserts is
    given, which a plan writes only for vpp > 1). Megatron's other conditions are met by every
    Layout or not stated by one: torch >= 2.6; bf16 or fp16 params (fp8 compute runs with bf16
    params, `frameworks.megatron`); no shared-expert overlap, MTP of at most one layer and no
    CUDA graphs of the MoE / MLP (Megatron flags a Layout does not hold; `check.megatron` reads
    the shared-expert overlap). Empty for frameworks other than Megatron-LM (none has the switch
    with these assertions; `frameworks.<name>.overlap_switches`).

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py l. 3002-3034."""
    if layout.framework != "megatron":
        return ()
    dispatcher = layout.moe_dispatcher or megatron.DEFAULT["moe_token_dispatcher"]
    return tuple(name for name, broken in (
        ("ep", layout.ep <= 1),
        ("dispatcher", dispatcher not in ("alltoall", "flex")),
        ("full", layout.recompute == "full"),
        ("moe", "moe" in (layout.recompute_modules or ())),
        ("vpp", layout.pp > 1 and layout.vpp == 1)) if broken)


def ep_comm_overlap_violations(layout: Layout) -> list[Violation]:
    """One error (rule `ep_comm_overlap_needs`) when `layout` switches Megatron-LM's EP all-to-all
    overlap on (`Layout.ep_comm_overlap` True) and breaks a condition of `ep_comm_overlap_broken`:
    Megatron-LM refuses to start; its assertion messages are quoted. Shared by explain, plan (which
    switches the overlap on only where this is empty, `plan._with_ep_overlap`) and check (the
    Megatron reader states its flags through the same Layout fields)."""
    broken = ep_comm_overlap_broken(layout) if layout.ep_comm_overlap else ()
    if not broken:
        return []
    flag = megatron.FLAG["ep_comm_overlap"]
    state = {"ep": f"ep={layout.ep}",
             "dispatcher": f"{megatron.FLAG['moe_token_dispatcher']} {layout.moe_dispatcher}"
                           if layout.moe_dispatcher else f"the {megatron.DEFAULT['moe_token_dispatcher']} "
                           f"token dispatcher (Megatron-LM's default)",
             "full": "full recompute",
             "moe": f"recompute_modules={','.join(layout.recompute_modules or ())}",
             "vpp": f"pp={layout.pp} and vpp=1"}
    fixes = {"ep": "ep >= 2", "dispatcher": f"{megatron.FLAG['moe_token_dispatcher']} alltoall or flex",
             "full": "selective or no recompute", "moe": "drop moe from the recompute modules",
             "vpp": "vpp >= 2 (interleaved 1F1B), or pp=1"}
    quoted = "; ".join(f'"{EP_OVERLAP_ASSERTIONS[b]}"' for b in broken)
    return [Violation(
        rule="ep_comm_overlap_needs",
        message=f"EP all-to-all overlap ({flag}) with {', '.join(state[b] for b in broken)}: "
                f"Megatron-LM refuses to start: {quoted} (transformer_config.py "
                f"TransformerConfig.__post_init__)",
        fix=f"turn the overlap off, or use {'; '.join(fixes[b] for b in broken)}")]


def _offload_needs_zero(model, cluster, layout: Layout) -> list[Violation]:
    """Parameter offload needs ZeRO-3, optimizer offload ZeRO >= 1 (warnings: the memory model
    counts the offloaded state as 0 bytes on the GPU whatever the stage).

    Source: DeepSpeed `deepspeed/runtime/zero/config.py` `DeepSpeedZeroConfig` (parameter offload
    "Valid only with stage 3", optimizer offload "Valid for ZeRO stage 1, 2, 3"); below those
    stages DeepSpeed's engine does not pass the setting to its optimizer (`runtime/engine.py`
    `_configure_zero_optimizer`), so the state stays on the GPU. torchtitan's CPU offload is an
    FSDP2 `CPUOffloadPolicy` (sharded state only)."""
    out, z = [], layout.zero_stage
    if "parameters" in layout.offload and z < 3:
        out.append(Violation(rule="offload_parameters_needs_zero3", severity="error",
                             message=f"offloading parameters with ZeRO-{z}: DeepSpeed's "
                                     f"{deepspeed.OFFLOAD_SECTIONS['parameters']} is valid only "
                                     f"with ZeRO-3 (below it the parameters stay on the GPU, so "
                                     f"this layout would not free what it claims)",
                             fix="use zero_stage=3 with parameter offload"))
    if "optimizer" in layout.offload and z == 0:
        out.append(Violation(rule="offload_optimizer_needs_zero", severity="error",
                             message=f"offloading optimizer states with ZeRO-0: DeepSpeed's "
                                     f"{deepspeed.OFFLOAD_SECTIONS['optimizer']} is valid for ZeRO "
                                     f"stages 1-3 (at 0 the states stay on the GPU, so this layout "
                                     f"would not free what it claims)",
                             fix="use zero_stage>=1 with optimizer offload"))
    return out


__all__ = ["Violation", "check_layout", "ep_comm_overlap_broken", "ep_comm_overlap_violations", "check_mesh", "MESH_RULES", "check_degrees", "check_experts", "DEGREE_RULES", "check_placement", "check_ulysses", "ulysses_degrees",
           "uneven_split", "errors", "GROUPS"]


BATCH_RULES = ("batch_divisible", "interleaved_microbatches", "microbatch_group_size")
"""The rules of `check_layout` that read the micro-batch size (through the micro-batch count)."""


def check_batch(model: ModelSpec, cluster, layout: Layout) -> list[Violation]:
    """The rules that depend on the micro-batch size (BATCH_RULES), for searches that cache the
    other rules across micro-batch sizes: for every layout, `check_batch(...) ==
    [v for v in check_layout(...) if v.rule in BATCH_RULES]`."""
    return (_batch(model, cluster, layout) + _interleaved_microbatches(model, cluster, layout)
            + _microbatch_group(model, cluster, layout))


def _microbatch_group(model, cluster, layout: Layout) -> list[Violation]:
    """Megatron-LM's micro-batch group N (`megatron.FLAG['microbatch_group_size']`) must lie in [pp, m],
    and the last group (m mod N micro-batches) must be empty or hold at least pp; without
    interleaving it has no effect (a warning).

    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py
    `forward_backward_pipelining_with_interleaving` l. 1160-1181 (ValueError "should range in
    [PP, M]"; RuntimeError on the remainder)."""
    n, m, pp = layout.microbatch_group_size, layout.num_microbatches, layout.pp
    if n is None:
        return []
    if layout.vpp == 1 or pp == 1:
        return [Violation(rule="microbatch_group_size", severity="warning", fix="",
                          message=f"microbatch_group_size={n} has no effect without interleaving "
                                  f"(vpp={layout.vpp}, pp={pp})")]
    if not pp <= n <= m:
        problem = f"must lie in [pp, m] = [{pp}, {m}]"
    elif 0 < m % n < pp:
        problem = f"leaves a last group of m mod N = {m % n} micro-batches, fewer than pp={pp}"
    else:
        return []
    return [Violation(rule="microbatch_group_size",
                      message=f"microbatch_group_size N={n} {problem} (Megatron-LM's interleaved schedule "
                              f"refuses {megatron.FLAG['microbatch_group_size']} {n})",
                      fix=f"microbatch_group_size={pp} (the default), or a divisor of m={m} in [{pp}, {m}]")]


def _interleaved_microbatches(model, cluster, layout: Layout) -> list[Violation]:
    """Interleaved 1F1B (vpp > 1) runs the micro-batches in groups of pp: their count must be a
    multiple of pp.

    Source: Narayanan et al. 2021 (SC'21) §2.2.2; Megatron-LM `pipeline_parallel/schedules.py`
    `forward_backward_pipelining_with_interleaving` ("number of microbatches ... is not divisible
    by pipeline-model-parallel-size when using interleaved schedule")."""
    m, pp = layout.num_microbatches, layout.pp
    if layout.vpp == 1 or pp == 1 or m < 1 or m % pp == 0:
        return []
    unit = layout.dp * layout.micro_batch_size * pp
    return [Violation(rule="interleaved_microbatches",
                      message=f"vpp={layout.vpp}: the interleaved schedule needs the micro-batch count "
                              f"m = {m} to be a multiple of pp={pp}",
                      fix=f"a global_batch_size that is a multiple of dp x micro_batch_size x pp = "
                          f"{unit} (e.g. {max(unit, layout.global_batch_size // unit * unit)}), or vpp=1")]
