"""Writer of a plan as a Megatron-LM launch script (`planner plan --emit megatron`).

The script is `#!/bin/bash`, a comment header (model, cluster, plan summary, deviations), shell
variables for what a plan does not know (data path, tokenizer, checkpoints, iterations: marked
PLACEHOLDER), then one `torchrun ... pretrain_gpt.py` command, one flag per line. The reader of
`planner check` (`planner.check.megatron`) reads it back to the plan's layout.

Flag names (Source: Megatron-LM, commit d98e8a6, `megatron/training/arguments.py` and the
dataclasses its `ArgumentGroupFactory` turns into `--field-name` flags, as cited by
`planner.check.megatron`):
- degrees: --tensor-model-parallel-size, --pipeline-model-parallel-size, --context-parallel-size,
  --expert-model-parallel-size, --expert-tensor-parallel-size, --sequence-parallel
  (`megatron/core/model_parallel_config.py`); dp is what torchrun's world size leaves
  (world / (tp x pp x cp), `validate_args`); virtual stages: --num-layers-per-virtual-pipeline-stage
  (even split), --num-virtual-stages-per-pipeline-rank (with an uneven split, which Megatron asserts);
  uneven split: --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers
  (`transformer_block.py` `get_num_layers_to_build`: the middle stages share the rest evenly);
- batch: --micro-batch-size, --global-batch-size, --seq-length;
- state sharding: ZeRO-1 --use-distributed-optimizer; ZeRO-2 / 3 Megatron-FSDP --use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads / optim_grads_params
  (docs/discussions/megatron-fsdp-user-guide);
- recompute: --recompute-granularity {full, selective}, --recompute-method {uniform, block},
  --recompute-num-layers (`transformer_config.py`; `megatron/core/recompute.py`: uniform with 1
  recomputes every layer, block recomputes the first N layers of every model chunk);
- precision: --bf16, --fp16, fp8 as --bf16 --fp8-format hybrid; --optimizer adam (Megatron's Adam
  is AdamW: decoupled weight decay) | sgd;
- architecture: --num-layers, --hidden-size, --ffn-hidden-size, --num-attention-heads,
  --group-query-attention --num-query-groups, --kv-channels, --max-position-embeddings, --swiglu,
  --normalization, --position-embedding-type, --rotary-base (the model's rope_theta),
  --untie-embeddings-and-output-weights, --disable-bias-linear, --add-qkv-bias, --qk-layernorm, --vocab-size; MoE (`_add_moe_args`):
  --num-experts, --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size,
  --moe-layer-freq;
- torchrun (torch.distributed.run): --nproc_per_node, --nnodes, --node_rank, --master_addr,
  --master_port.

What Megatron cannot state is written as the nearest configuration it can: recompute at least
what the plan recomputes on every layer kept in place, and a moved split only when every stage
still fits the plan's memory budget (capacity less headroom and reserve); each change is one line
of `Emitted.deviations`:
- recompute: one --recompute-granularity for the whole model, and with block one
  --recompute-num-layers N for every model chunk. A per-stage mix becomes: no full layer anywhere ->
  selective on every layer (selective saves a subset of what no recompute saves); any full layer ->
  full, block, N = the largest per-chunk count of recomputed (full or selective) layers of any stage,
  so every stage recomputes fully at least every layer the plan recomputes (a fully recomputed layer
  keeps only its input, less than selective keeps); every layer covered -> uniform 1.
- pipeline split: Megatron gives the first and last stage their own counts and the middle stages an
  even share. Another split moves layers onto some stage, which then needs more memory than the plan
  gave it, so it is used only when every stage still fits the plan's own budget (capacity x
  (1 - headroom), the reserve included, `cost.memory.stage_memory`); the nearest such split (fewest
  layers moved, then the smallest move on one stage) among the `SPLIT_CANDIDATES` nearest is taken,
  else the plan cannot be emitted (SpecError naming what to pin).
A plan Megatron cannot run at all (an optimizer, offload or HSDP group Megatron-LM lacks; a plan
costed under another framework's conventions) raises SpecError with key `--emit`.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from planner.cost.memory import stage_memory
from planner.emit import Emitted
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.plan import plan_layout
from planner.specs.cluster import ClusterSpec, load_cluster
from planner.specs.model import ModelSpec, load_model

SPLIT_CANDIDATES = 64
"""Megatron-expressible pipeline splits tried, nearest first, before giving up on a plan's split."""

PLACEHOLDERS = (
    ("DATA_PATH", "/path/to/dataset_text_document", "Megatron .bin/.idx prefix of the tokenized data"),
    ("TOKENIZER_MODEL", "/path/to/tokenizer", "Hugging Face tokenizer name or directory"),
    ("CHECKPOINT_PATH", "checkpoints/run", "where to save and load checkpoints"),
    ("TRAIN_ITERS", "1000", "optimizer steps to train"),
    ("LR", "3.0e-4", "peak learning rate"),
)
"""(shell variable, default, what to set it to): what a plan does not know."""

_ZERO_FLAGS = {0: (), 1: ("--use-distributed-optimizer",),
               2: ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads"),
               3: ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params")}
"""ZeRO stage -> Megatron flags (Source: Megatron-LM docs/discussions/megatron-fsdp-user-guide;
the reader's `_ZERO_BY_STRATEGY`)."""

_PRECISION_FLAGS = {"bf16": ("--bf16",), "fp16": ("--fp16",), "fp8": ("--bf16", "--fp8-format hybrid")}
"""Plan precision -> Megatron flags (fp8: bf16 master compute with Transformer Engine's hybrid
E4M3 forward / E5M2 backward format, `transformer_config.py` field `fp8`)."""

_OPTIMIZERS = {"adamw": "adam", "sgd": "sgd"}
"""Plan optimizer -> Megatron --optimizer (Megatron's adam applies decoupled weight decay)."""


@dataclass(frozen=True, kw_only=True)
class Recompute:
    """Megatron's recompute options: one granularity, method and layer count for the whole model."""

    granularity: str | None
    """None (no recompute) | selective | full."""
    method: str | None = None
    """uniform | block (full only)."""
    num_layers: int | None = None
    """--recompute-num-layers: uniform chunk size, or layers recomputed per model chunk (block)."""

    def counts(self, layers: int, vpp: int) -> dict[str, int]:
        """{mode: layers} of a stage of `layers` layers in `vpp` model chunks.

        Source: `megatron/core/recompute.py` (block: the first N layers of each model chunk)."""
        if self.granularity is None:
            return {"none": layers}
        if self.granularity == "selective" or self.method == "uniform":
            return {self.granularity: layers}
        full = vpp * min(self.num_layers, layers // vpp) if layers % vpp == 0 else min(
            self.num_layers, layers)
        return {"full": full, "none": layers - full}

    def flags(self) -> list[str]:
        """The recompute flags."""
        if self.granularity is None:
            return []
        out = [f"--recompute-granularity {self.granularity}"]
        if self.granularity == "full":
            out += [f"--recompute-method {self.method}", f"--recompute-num-layers {self.num_layers}"]
        return out


def write(doc: dict) -> Emitted:
    """The Megatron-LM launch script of plan file `doc` (module docstring).

    Raises:
        SpecError: a plan Megatron-LM cannot run (key `--emit`), or a bad plan file.
    """
    model = load_model(doc["model"])
    cluster = load_cluster(doc["cluster"], gpus=doc["gpus"])
    request, par = doc["request"], doc["plan"]["parallelism"]
    _check_runnable(request, par)
    layout = plan_layout(doc["plan"], request)
    plan_counts = _plan_counts(layout, par["recompute"])
    recompute = _recompute(plan_counts, layout)
    budget = int(cluster.gpu.memory_bytes * (1 - request["headroom"]))
    fits = _Fits(model, cluster, request["reserve_bytes"], budget)
    deviations: list[str] = []
    split = _split(layout, recompute, fits, deviations)
    emitted = layout.replace(pipeline_layers=split)
    deviations += _recompute_deviations(plan_counts, recompute, emitted)
    stage, total = fits.peak(emitted, recompute)
    if total > budget:
        raise SpecError(f"the nearest Megatron-LM configuration does not fit: stage {stage} needs "
                        f"{total / 2**30:.1f} GiB, over the plan's budget of {budget / 2**30:.1f} "
                        f"GiB (capacity x (1 - headroom)); re-plan with --fix recompute=full and "
                        f"emit again", key="--emit")
    layout = emitted
    deviations += _architecture_gaps(model)
    if layout.seq_len > model.max_position_embeddings:
        deviations.append(
            f"--max-position-embeddings {layout.seq_len} where the model has "
            f"{model.max_position_embeddings}: the plan trains {layout.seq_len:,}-token sequences "
            f"and Megatron-LM asserts seq_length <= max_position_embeddings (validate_args); the "
            f"model was not trained at this length"
            + (" -- its learned position table grows, new rows untrained"
               if model.position_embedding_type == "learned" else ""))
    text = _script(doc, model, cluster, layout, recompute, deviations)
    return Emitted(framework="megatron", text=text, suffix=".sh", deviations=tuple(deviations))


# ---------------------------------------------------------------- what Megatron cannot run

def _check_runnable(request: dict, par: dict) -> None:
    """SpecError (key --emit) for a plan Megatron-LM cannot run at all."""
    framework = request.get("framework", "megatron")
    if framework != "megatron":
        raise SpecError(f"the plan was costed under {framework}'s conventions, not Megatron-LM's; "
                        f"re-plan with --framework megatron (or --emit megatron)", key="--emit")
    if request["optimizer"] not in _OPTIMIZERS:
        raise SpecError(f"optimizer {request['optimizer']!r} has no Megatron-LM --optimizer (adam, "
                        f"sgd); its adam keeps fp32 states, more memory than the plan: re-plan with "
                        f"--optimizer adamw", key="--emit")
    if par.get("offload"):
        raise SpecError(f"offload {sorted(par['offload'])} is not a Megatron-LM flag this writer "
                        f"states; re-plan without --offload", key="--emit")
    if par.get("dp_shard") not in (None, par["dp"]):
        raise SpecError(f"an HSDP shard group (dp_shard={par['dp_shard']} of dp={par['dp']}) is not "
                        f"a Megatron-LM flag this writer states; re-plan without it", key="--emit")


# ---------------------------------------------------------------- recompute

def _plan_counts(layout: Layout, recompute) -> list[dict[str, int]]:
    """The plan's per-stage {none, selective, full} counts (a mode string: that mode on every layer)."""
    if isinstance(recompute, str):
        return [{m: (n if m == recompute else 0) for m in ("none", "selective", "full")}
                for n in layout.pipeline_layers]
    return [{m: int(c.get(m, 0)) for m in ("none", "selective", "full")} for c in recompute]


def _recompute(plan: list[dict[str, int]], layout: Layout) -> Recompute:
    """Megatron's recompute options for the plan's per-stage counts, no less recompute on any stage
    than the plan (module docstring)."""
    vpp, sizes = layout.vpp, layout.pipeline_layers
    full = sum(c["full"] for c in plan)
    selective = sum(c["selective"] for c in plan)
    none = sum(c["none"] for c in plan)
    if full == 0:
        option = Recompute(granularity="selective") if selective else Recompute(granularity=None)
    elif none == 0 and selective == 0:
        option = Recompute(granularity="full", method="uniform", num_layers=1)
    else:
        n = max(math.ceil((c["full"] + c["selective"]) / vpp) for c in plan)
        option = Recompute(granularity="full", method="block", num_layers=n)
        if all(option.counts(k, vpp)["full"] == k for k in sizes):
            option = Recompute(granularity="full", method="uniform", num_layers=1)
    return option


def _recompute_deviations(plan: list[dict[str, int]], option: Recompute, layout: Layout) -> list[str]:
    """One line per run of consecutive stages whose recompute counts change the same way."""
    why = {"selective": "Megatron's --recompute-granularity is one mode for every layer",
           "full": "Megatron's --recompute-num-layers is one count for every model chunk, and "
                   "selective cannot be mixed with full"}.get(option.granularity or "", "")
    runs: list[tuple[list[int], str]] = []
    for s, (want, n) in enumerate(zip(plan, layout.pipeline_layers)):
        got = option.counts(n, layout.vpp)
        if _counts_text(got) == _counts_text(want):
            continue
        text = f"recompute {_counts_text(got)} where the plan has {_counts_text(want)}"
        if runs and runs[-1][1] == text and runs[-1][0][-1] == s - 1:
            runs[-1][0].append(s)
        else:
            runs.append(([s], text))
    return [f"{_stages(stages)}: {text} ({_flags_text(option)}): {why}" for stages, text in runs]


def _counts_text(counts: dict[str, int]) -> str:
    """'full 2 / none 17' (modes with layers, most recompute first)."""
    return " / ".join(f"{m} {counts[m]}" for m in ("full", "selective", "none") if counts.get(m))


def _stages(stages: list[int]) -> str:
    return f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}-{stages[-1]}"


def _flags_text(option: Recompute) -> str:
    return " ".join(option.flags()) or "no recompute"


# ---------------------------------------------------------------- pipeline split

class _Fits:
    """Per-stage memory of a layout with Megatron's recompute against the plan's budget."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, reserve_bytes: int, budget_bytes: int):
        self.model, self.cluster, self.reserve, self.budget = model, cluster, reserve_bytes, budget_bytes

    def peak(self, layout: Layout, recompute: Recompute) -> tuple[int, int]:
        """(stage, bytes) of the fullest stage (`stage_memory` total, the reserve included)."""
        start, best = 0, (0, -1)
        for s, n in enumerate(layout.pipeline_layers):
            mem = stage_memory(self.model, self.cluster, layout, s,
                               layers=_stage_layer_ids(layout, s, start),
                               layers_by_recompute=recompute.counts(n, layout.vpp),
                               reserve_bytes=self.reserve)
            start += n
            best = max(best, (s, mem.total), key=lambda x: x[1])
        return best


def _stage_layer_ids(layout: Layout, stage: int, start: int) -> tuple[int, ...] | None:
    """The decoder layers of `stage` (contiguous from `start`); None with vpp > 1 (memory's own
    interleaved assignment)."""
    if layout.vpp > 1:
        return None
    return tuple(range(start, start + layout.pipeline_layers[stage]))


def expressible(split: tuple[int, ...], vpp: int) -> bool:
    """Whether Megatron's flags give this split: every middle stage (all but the first and last)
    the same count, none empty; with vpp > 1 each stage's count divisible by vpp (equal chunks).

    Source: `transformer_config.py` `__post_init__` and `transformer_block.py`
    `get_num_layers_to_build`."""
    middle = split[1:-1]
    return (min(split) >= 1 and len(set(middle)) <= 1
            and all(n % vpp == 0 for n in split))


def _split(layout: Layout, recompute: Recompute, fits: _Fits, deviations: list[str]) -> tuple[int, ...]:
    """The plan's split when Megatron gives it, else the nearest one that fits (module docstring)."""
    plan = layout.pipeline_layers
    if expressible(plan, layout.vpp):
        return plan
    tried = _candidates(plan, layout.vpp)[:SPLIT_CANDIDATES]
    for split in tried:
        stage, total = fits.peak(layout.replace(pipeline_layers=split), recompute)
        if total <= fits.budget:
            moved = sum(abs(a - b) for a, b in zip(split, plan)) // 2
            deviations.append(
                f"pipeline split {'/'.join(map(str, plan))} -> {'/'.join(map(str, split))} "
                f"({moved} layer{'s' * (moved != 1)} moved): Megatron gives the first and last "
                f"stage their own counts (--decoder-first/last-pipeline-num-layers) and the middle "
                f"stages one even count; every stage still fits (fullest: stage {stage}, "
                f"{total / 2**30:.1f} GiB of the plan's {fits.budget / 2**30:.1f} GiB budget, "
                f"reserve included)")
            return split
    raise SpecError(
        f"the plan's pipeline split {'/'.join(map(str, plan))} is not one Megatron-LM can give (its "
        f"middle stages share one count) and none of the {len(tried)} nearest splits it can give "
        f"fits in memory; re-plan with another pipeline depth (--fix pp=N) or more recompute "
        f"(--fix recompute=full) and emit again", key="--emit")


def _candidates(plan: tuple[int, ...], vpp: int) -> list[tuple[int, ...]]:
    """Megatron-expressible splits of sum(plan) layers over len(plan) stages, nearest first
    (fewest layers moved, then the smallest change of one stage, then the even split, which needs
    no split flags)."""
    total, pp = sum(plan), len(plan)
    out = []
    for middle in range(1, total + 1):
        for first in range(1, total + 1):
            last = total - first - (pp - 2) * middle
            if last < 1:
                break
            split = (first, *([middle] * (pp - 2)), last)
            if expressible(split, vpp):
                out.append(split)
    return sorted(out, key=lambda s: (sum(abs(a - b) for a, b in zip(s, plan)),
                                      max(abs(a - b) for a, b in zip(s, plan)), len(set(s)), s))


def _split_flags(layout: Layout, num_layers: int) -> list[str]:
    """Virtual-stage and uneven-split flags."""
    split, pp, vpp = layout.pipeline_layers, layout.pp, layout.vpp
    even = len(set(split)) == 1
    out = []
    if vpp > 1:
        out.append(f"--num-layers-per-virtual-pipeline-stage {num_layers // pp // vpp}" if even
                   else f"--num-virtual-stages-per-pipeline-rank {vpp}")
    if even or pp == 1:
        return out
    if pp == 2:
        return out + [f"--decoder-first-pipeline-num-layers {split[0]}"]
    middle = split[1]
    if split[0] != middle:
        out.append(f"--decoder-first-pipeline-num-layers {split[0]}")
    if split[-1] != middle:
        out.append(f"--decoder-last-pipeline-num-layers {split[-1]}")
    return out


# ---------------------------------------------------------------- architecture

def _architecture_flags(model: ModelSpec, seq_len: int) -> list[str]:
    """The model's Megatron architecture flags (module docstring); positions at least seq_len."""
    out = [f"--num-layers {model.num_hidden_layers}", f"--hidden-size {model.hidden_size}",
           f"--ffn-hidden-size {model.intermediate_size}",
           f"--num-attention-heads {model.num_attention_heads}"]
    if model.num_key_value_heads != model.num_attention_heads:
        out += ["--group-query-attention", f"--num-query-groups {model.num_key_value_heads}"]
    out += [f"--kv-channels {model.head_dim}",
            f"--max-position-embeddings {max(model.max_position_embeddings, seq_len)}"]
    if model.gated_mlp and model.hidden_act in ("silu", "swish"):
        out.append("--swiglu")
    out.append(f"--normalization {'RMSNorm' if model.norm_type == 'rmsnorm' else 'LayerNorm'}")
    if model.position_embedding_type in ("rope", "learned"):
        out.append("--position-embedding-type "
                   + ("rope" if model.position_embedding_type == "rope" else "learned_absolute"))
    out += _rotary_base_flags(model)
    if not model.tie_word_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if not model.mlp_bias and not model.attention_out_bias:
        out.append("--disable-bias-linear")
        if model.attention_bias:
            out.append("--add-qkv-bias")
    if model.qk_norm:
        out.append("--qk-layernorm")
    out.append(f"--vocab-size {model.vocab_size}")
    return out + _moe_flags(model)


def _rotary_base_flags(model: ModelSpec) -> list[str]:
    """--rotary-base from the model's rope_theta (Llama 3.1: 500000; Megatron's default 10000).

    Source: Megatron-LM `megatron/training/arguments.py` `_add_network_size_args`
    (`--rotary-base`, type=int, default 10000). A non-integral rope_theta cannot be written (the
    flag is an int) is an architecture gap (a deviation)."""
    theta = model.extra.get("rope_theta")
    if model.position_embedding_type != "rope" or not isinstance(theta, (int, float)) \
            or isinstance(theta, bool) or theta != int(theta):
        return []
    return [f"--rotary-base {int(theta)}"]


def _moe_flags(model: ModelSpec) -> list[str]:
    if not model.is_moe:
        return []
    out = [f"--num-experts {model.num_experts}", f"--moe-router-topk {model.num_experts_per_tok}",
           f"--moe-ffn-hidden-size {model.moe_intermediate_size or model.intermediate_size}"]
    if model.shared_expert_intermediate_size:
        out.append(f"--moe-shared-expert-intermediate-size {model.shared_expert_intermediate_size}")
    if model.moe_layers and not all(model.moe_layers):
        pattern = "[" + ",".join("1" if m else "0" for m in model.moe_layers) + "]"
        out.append(f"--moe-layer-freq {shlex.quote(pattern)}")
    return out


def _architecture_gaps(model: ModelSpec) -> list[str]:
    """Model features the flags above do not state (to add by hand), one deviation line each."""
    gaps = [what for what, present in (
        ("multi-latent attention (q/kv LoRA ranks)", model.kv_lora_rank > 0),
        (f"sliding-window attention ({model.sliding_window} tokens)", model.sliding_window > 0),
        ("attention sinks", model.attention_sinks),
        ("parallel attention + MLP", model.parallel_attention),
        (f"{model.hidden_act} gated MLP", model.gated_mlp and model.hidden_act not in ("silu", "swish")),
        (f"{model.position_embedding_type} positions",
         model.position_embedding_type not in ("rope", "learned")),
        ("MLP biases without attention-output bias (or the reverse)",
         model.mlp_bias != model.attention_out_bias),
        ("embedding LayerNorm", model.embedding_norm),
        ("a shared-expert gate", model.shared_expert_gate),
        (f"rope_theta {model.extra.get('rope_theta')} (--rotary-base takes an integer)",
         model.position_embedding_type == "rope" and "rope_theta" in model.extra
         and not _rotary_base_flags(model)),
    ) if present]
    return [f"architecture: {g} is not written as a flag; add Megatron-LM's option by hand"
            for g in gaps]


# ---------------------------------------------------------------- the script

def _flags(doc: dict, model: ModelSpec, layout: Layout, recompute: Recompute) -> list[str]:
    request = doc["request"]
    out = [f"--tensor-model-parallel-size {layout.tp}", f"--pipeline-model-parallel-size {layout.pp}",
           f"--context-parallel-size {layout.cp}"]
    if model.is_moe:
        out += [f"--expert-model-parallel-size {layout.ep}",
                f"--expert-tensor-parallel-size {layout.etp}"]
    out += _split_flags(layout, model.num_hidden_layers)
    if layout.sequence_parallel:
        out.append("--sequence-parallel")
    out += [f"--micro-batch-size {layout.micro_batch_size}",
            f"--global-batch-size {layout.global_batch_size}", f"--seq-length {layout.seq_len}"]
    out += list(_ZERO_FLAGS[layout.zero_stage]) + list(_PRECISION_FLAGS[layout.precision])
    out.append(f"--optimizer {_OPTIMIZERS[request['optimizer']]}")
    out += recompute.flags() + _architecture_flags(model, layout.seq_len)
    return out + ["--tokenizer-type HuggingFaceTokenizer", '--tokenizer-model "$TOKENIZER_MODEL"',
                  '--data-path "$DATA_PATH"', '--save "$CHECKPOINT_PATH"',
                  '--load "$CHECKPOINT_PATH"', '--train-iters "$TRAIN_ITERS"', '--lr "$LR"']


def _script(doc: dict, model: ModelSpec, cluster: ClusterSpec, layout: Layout,
            recompute: Recompute, deviations: list[str]) -> str:
    per_node = min(cluster.num_gpus, cluster.gpus_per_node)
    nodes = cluster.num_gpus // per_node
    launcher = [f"--nproc_per_node {per_node}", f"--nnodes {nodes}", '--node_rank "$NODE_RANK"',
                '--master_addr "$MASTER_ADDR"', '--master_port "$MASTER_PORT"']
    lines = ["#!/bin/bash", *_header(doc, model, cluster, layout, recompute, deviations), "",
             "# PLACEHOLDER values: the plan does not know them; set these before launching."]
    lines += [f'{var}="${{{var}:-{default}}}"  # {what}' for var, default, what in PLACEHOLDERS]
    lines += ['NODE_RANK="${NODE_RANK:-0}"  # this node, 0..' + str(nodes - 1),
              'MASTER_ADDR="${MASTER_ADDR:-localhost}"', 'MASTER_PORT="${MASTER_PORT:-6000}"', "",
              "export CUDA_DEVICE_MAX_CONNECTIONS=1", "",
              "torchrun \\"]
    body = launcher + ["pretrain_gpt.py"] + _flags(doc, model, layout, recompute)
    lines += [f"    {item} \\" for item in body[:-1]] + [f"    {body[-1]}", ""]
    return "\n".join(lines)


def _header(doc: dict, model: ModelSpec, cluster: ClusterSpec, layout: Layout,
            recompute: Recompute, deviations: list[str]) -> list[str]:
    par = doc["plan"]["parallelism"]
    summary = (f"dp={layout.dp} tp={layout.tp} pp={layout.pp} cp={layout.cp} ep={layout.ep} "
               f"etp={layout.etp} vpp={layout.vpp} zero={layout.zero_stage} "
               f"sp={str(layout.sequence_parallel).lower()} micro-batch={layout.micro_batch_size} "
               f"global-batch={layout.global_batch_size} seq={layout.seq_len} "
               f"precision={layout.precision} optimizer={doc['request']['optimizer']}")
    out = [f"# Megatron-LM launch for {model.name} on {cluster.num_gpus} x {cluster.gpu.name} "
           f"({cluster.name}), written by `planner plan --emit megatron`.",
           f"# Plan: {summary}",
           f"# Pipeline split: {'/'.join(map(str, layout.pipeline_layers))}; plan recompute: "
           f"{_recompute_text(par['recompute'])}; emitted: {_flags_text(recompute)}"]
    step = (doc.get("predicted") or {}).get("time_s", {}).get("step")
    if step is not None:
        out.append(f"# The plan's predicted step time: {step:.2f} s"
                   + (" (this script's deviations change it: `planner check` it for its own)"
                      if deviations else ""))
    if deviations:
        out.append("# Deviations from the plan (every stage still fits the plan's memory budget):")
        out += [f"#   - {d}" for d in deviations]
    else:
        out.append("# Deviations from the plan: none (this is the plan exactly).")
    return out


def _recompute_text(recompute) -> str:
    if isinstance(recompute, str):
        return recompute
    return ", ".join(_counts_text(c) for c in recompute)
