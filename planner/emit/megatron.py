"""Writer of a plan as a Megatron-LM launch script (`planner plan --emit megatron`).

The script is `#!/bin/bash`, a comment header (model, cluster, plan summary, deviations), shell
variables for what a plan does not know (data path, tokenizer, checkpoints, iterations: marked
PLACEHOLDER), then one `torchrun ... pretrain_gpt.py` command, one flag per line. The reader of
`planner check` (`planner.check.megatron`) reads it back to the plan's layout.

Flag names, defaults and sources: `planner.frameworks.megatron` (the table the reader shares).
Degrees as given (dp is what torchrun's world size leaves: world / (tp x pp x cp), `validate_args`);
virtual stages as layers per virtual stage with an even split, else as stages per rank (Megatron
asserts that form with an uneven split); an uneven split as first / last stage layer counts when
the middle stages share one count (`transformer_block.py` `get_num_layers_to_build`), any other
(vpp 1 included) as the pipeline-model-parallel layout string, which gives every virtual stage its
own count (`_as_launched`); ZeRO, precision and optimizer through `ZERO_FLAGS`, `PRECISION_FLAGS`,
`OPTIMIZERS`; recompute through `recompute_flags`; the architecture and MoE shape from the model;
torchrun's launcher flags.

What Megatron cannot state is written as the nearest configuration it can: recompute at least
what the plan recomputes on every layer, and only when every stage still fits the plan's memory
budget (capacity x (1 - headroom), the reserve included, `cost.memory.stage_memory`); each change
is one line of `Emitted.deviations`:
- recompute: one granularity for the whole model, and with block one layer count N for every
  model chunk, its first N layers (`megatron/core/recompute.py`). The plan's per-layer mix (its
  `recompute_layers`, else its per-stage counts full first) becomes: no full layer anywhere ->
  selective on every layer (selective saves a subset of what no recompute saves); any full layer ->
  full, block, N = the most layers the plan recomputes (full or selective) in one model chunk, so
  every chunk recomputes fully at least as many layers as the plan recomputes there (a fully
  recomputed layer keeps only its input, less than selective keeps); N covering every chunk ->
  uniform 1. A stage is a deviation where one of its chunks then recomputes other layers (by layer
  kind and mode) than the plan's.
A plan Megatron cannot run at all (an optimizer, offload or HSDP group Megatron-LM lacks; a plan
costed under another framework's conventions) raises SpecError with key `--emit`.
"""

from __future__ import annotations

import dataclasses
import shlex
import textwrap
from dataclasses import dataclass

from planner.cost import activations as act
from planner.cost.activations import DROPOUT_MODEL_TYPES
from planner.cost.memory import stage_layers
from planner.emit import Emitted
from planner.evaluation import cost_stages, layer_groups, layer_modes, model_chunks, stage_modes
from planner.errors import SpecError
from planner.frameworks import megatron as mg
from planner.frameworks.megatron import FLAG as F
from planner.placement import mtp, overlap, pipeline_layout, recompute_mix
from planner.placement.layout import OPTIMIZER_DTYPES, Layout
from planner.placement.precision import grouped_gemm_supported, published_fp8_recipe
from planner.plan import plan_layout
from planner.specs.cluster import ClusterSpec, load_cluster
from planner.specs.model import ModelSpec, load_model

PLACEHOLDERS = (
    ("DATA_PATH", "/path/to/dataset_text_document", "Megatron .bin/.idx prefix of the tokenized data"),
    ("TOKENIZER_MODEL", "/path/to/tokenizer", "Hugging Face tokenizer name or directory"),
    ("CHECKPOINT_PATH", "checkpoints/run", "where to save and load checkpoints"),
    ("TRAIN_ITERS", "1000", "optimizer steps to train"),
    ("LR", "3.0e-4", "peak learning rate"),
)
"""(shell variable, default, what to set it to): what a plan does not know."""
_PLACEHOLDER_FLAGS = (("tokenizer_model", "TOKENIZER_MODEL"), ("data_path", "DATA_PATH"),
                      ("save", "CHECKPOINT_PATH"), ("load", "CHECKPOINT_PATH"),
                      ("train_iters", "TRAIN_ITERS"), ("lr", "LR"))
"""(knob, shell variable of `PLACEHOLDERS`) written as `--flag "$VAR"`."""


@dataclass(frozen=True, kw_only=True)
class Recompute:
    """Megatron's recompute options: one granularity, method and layer count for the whole model."""

    granularity: str | None
    """None (no recompute) | selective | full."""
    method: str | None = None
    """uniform | block (full only)."""
    num_layers: int | None = None
    """Uniform chunk size, or layers recomputed per model chunk (block)."""
    modules: tuple[str, ...] | None = None
    """Selective only: the modules it re-runs (None: Megatron's default, core_attn)."""

    def modes(self, chunks, num_hidden_layers: int) -> tuple[str, ...]:
        """Each decoder layer's mode under these options, `chunks` the model chunks' layers
        (`mg.recomputed_modes`: block recomputes the first N layers of each chunk)."""
        return mg.recomputed_modes(self.granularity, self.method, self.num_layers, chunks,
                                   num_hidden_layers)

    def flags(self) -> list[str]:
        """The recompute flags."""
        return mg.recompute_flags(self.granularity, self.method, self.num_layers, self.modules)


def write(doc: dict) -> Emitted:
    """The Megatron-LM launch script of plan file `doc` (module docstring).

    Raises:
        SpecError: a plan Megatron-LM cannot run (key `--emit`), or a bad plan file.
    """
    model = load_model(doc["model"])
    cluster = load_cluster(doc["cluster"], gpus=doc["gpus"])
    request, par = doc["request"], doc["plan"]["parallelism"]
    _check_runnable(request, par, model)
    layout = plan_layout(doc["plan"], request)
    emitted = _as_launched(layout)
    chunks = model_chunks(model, emitted)
    want = _plan_modes(model, layout, par)
    groups = _groups(emitted, chunks, par)
    recompute = _recompute(want, groups, layout)
    got = recompute.modes(chunks, model.num_hidden_layers)
    budget = int(cluster.gpu.memory_bytes * (1 - request["headroom"]))
    deviations = _recompute_deviations(model, emitted, groups, want, got, recompute,
                                       per_chunk="recompute_layers" in par)
    stage, total = _peak(model, cluster, emitted, got, request["reserve_bytes"])
    if total > budget:
        raise SpecError(f"the nearest Megatron-LM configuration does not fit: stage {stage} needs "
                        f"{total / 2**30:.1f} GiB, over the plan's budget of {budget / 2**30:.1f} "
                        f"GiB (capacity x (1 - headroom)); re-plan with --fix recompute=full and "
                        f"emit again", key="--emit")
    layout = emitted
    deviations += _architecture_gaps(model) + _grouped_gemm_deviations(model, cluster)
    if layout.seq_len > model.max_position_embeddings:
        deviations.append(
            f"{F['max_position_embeddings']} {layout.seq_len} where the model has "
            f"{model.max_position_embeddings}: the plan trains {layout.seq_len:,}-token sequences "
            f"and Megatron-LM asserts seq_length <= max_position_embeddings (validate_args); the "
            f"model was not trained at this length"
            + (" -- its learned position table grows, new rows untrained"
               if model.position_embedding_type == "learned" else ""))
    text = _script(doc, model, cluster, layout, recompute, deviations)
    return Emitted(framework="megatron", text=text, suffix=".sh", deviations=tuple(deviations))


# ---------------------------------------------------------------- what Megatron cannot run

def _check_runnable(request: dict, par: dict, model: ModelSpec) -> None:
    """SpecError (key --emit) for a plan Megatron-LM cannot run at all: another framework's
    conventions, an optimizer, offload or HSDP group Megatron lacks, or an MoE model at tp > 1
    without sequence parallelism (the placement rule `moe_tp_needs_sp`: Megatron's MoE layer raises
    at the first training step; `plan` never proposes it, a hand-edited plan file can)."""
    framework = request.get("framework", "megatron")
    if framework != "megatron":
        raise SpecError(f"the plan was costed under {framework}'s conventions, not Megatron-LM's; "
                        f"re-plan with --framework megatron (or --emit megatron)", key="--emit")
    if request["optimizer"] not in mg.OPTIMIZERS:
        raise SpecError(f"optimizer {request['optimizer']!r} has no Megatron-LM {F['optimizer']} "
                        f"({', '.join(mg.OPTIMIZERS.values())}); its adam keeps fp32 states, more "
                        f"memory than the plan: re-plan with --optimizer adamw", key="--emit")
    if par.get("offload"):
        raise SpecError(f"offload {sorted(par['offload'])} is not a Megatron-LM flag this writer "
                        f"states; re-plan without --offload", key="--emit")
    if model.is_moe and par.get("tp", 1) > 1 and not par.get("sequence_parallel"):
        raise SpecError(f"the plan trains the MoE model {model.name} at tp={par['tp']} without sequence "
                        f"parallelism, which Megatron-LM's MoE layer refuses at the first training step "
                        f"(rule moe_tp_needs_sp); re-plan with --fix sequence_parallel=true, or tp=1",
                        key="--emit")
    if par.get("dp_shard") not in (None, par["dp"]):
        raise SpecError(f"an HSDP shard group (dp_shard={par['dp_shard']} of dp={par['dp']}) is not "
                        f"a Megatron-LM flag this writer states; re-plan without it", key="--emit")


# ---------------------------------------------------------------- recompute

def _plan_modes(model: ModelSpec, layout: Layout, par: dict) -> tuple[str, ...]:
    """The plan's mode of each decoder layer: its `recompute_layers` where the file gives them
    (which layers of a stage, in which chunk), else its per-stage counts full first
    (`evaluation.layer_modes`, as memory charges them), or one mode on every layer."""
    if "recompute_layers" in par:
        return recompute_mix.parse_layers(par["recompute_layers"], model.num_hidden_layers,
                                          layer_groups(model, layout), "plan.parallelism.recompute_layers")
    recompute = par["recompute"]
    if isinstance(recompute, str):
        return (recompute,) * model.num_hidden_layers
    counts = [c if isinstance(c, dict) else {"none": c} for c in recompute]
    return layer_modes(counts, stage_layers(model, layout))


def _groups(layout: Layout, chunks, par: dict) -> list[list[tuple[int, ...]]]:
    """What the plan fixes the recompute of: each model chunk where it gives `recompute_layers`,
    else each stage (its chunks together: per-stage counts say how many of a stage's layers, not
    which)."""
    if "recompute_layers" in par:
        return [[c] for c in chunks]
    return [list(chunks[s::layout.pp]) for s in range(layout.pp)]


def _recompute(modes: tuple[str, ...], groups, layout: Layout) -> Recompute:
    """Megatron's recompute options for the plan's per-layer modes, no less recompute in any group
    (`_groups`) than the plan (module docstring): block with the least N whose first N layers of
    each chunk reach the layers the plan recomputes (full or selective) in every group; uniform 1
    where N covers every chunk."""
    if "full" not in modes:
        return (Recompute(granularity="selective", modules=layout.recompute_modules) if "selective" in modes
                else Recompute(granularity=None))
    longest = max(len(c) for g in groups for c in g)
    n = next((n for n in range(1, longest) if all(
        sum(min(n, len(c)) for c in g) >= sum(1 for c in g for i in c if modes[i] != "none")
        for g in groups)), longest)
    if n >= longest:
        return Recompute(granularity="full", method="uniform", num_layers=1)
    return Recompute(granularity="full", method="block", num_layers=n)


def _recompute_deviations(model: ModelSpec, layout: Layout, groups, want: tuple[str, ...],
                          got: tuple[str, ...], option: Recompute, per_chunk: bool) -> list[str]:
    """One line per run of consecutive stages whose recompute changes the same way: a stage
    changes where one of its groups (`_groups`) recomputes other layers (by layer kind and mode)
    than the plan's (`per_chunk`: the groups are the model chunks, chunk k on stage k mod pp);
    then the line also spells each chunk's layers (n / s / f, | between chunks)."""
    why = {"selective": f"Megatron's {F['recompute_granularity']} is one mode for every layer",
           "full": f"Megatron's {F['recompute_num_layers']} is one count for every model chunk (its "
                   f"first layers), and selective cannot be mixed with full"}.get(option.granularity or "", "")

    def kinds(group, modes):
        return sorted((act.layer_kind(model, i), modes[i]) for c in group for i in c)

    runs: list[tuple[list[int], str]] = []
    for s in range(layout.pp):
        mine = groups[s::layout.pp] if per_chunk else [groups[s]]
        if all(kinds(g, want) == kinds(g, got) for g in mine):
            continue
        chunks = [c for g in mine for c in g]
        text = f"recompute {_mix(chunks, got, per_chunk)} where the plan has {_mix(chunks, want, per_chunk)}"
        if runs and runs[-1][1] == text and runs[-1][0][-1] == s - 1:
            runs[-1][0].append(s)
        else:
            runs.append(([s], text))
    return [f"{_stages(stages)}: {text} ({_flags_text(option)}): {why}" for stages, text in runs]


def _mix(chunks, modes: tuple[str, ...], letters: bool) -> str:
    """'full 2 / none 6' of a stage's chunks, with 'f|fn|nn|nn' beside it (`letters`, several
    chunks)."""
    counts = {m: sum(1 for c in chunks for i in c if modes[i] == m) for m in ("full", "selective", "none")}
    spelled = "|".join("".join(modes[i][0] for i in c) for c in chunks)
    return _counts_text(counts) + (f" ({spelled})" if letters and len(chunks) > 1 else "")


def _counts_text(counts: dict[str, int]) -> str:
    """'full 2 / none 17' (modes with layers, most recompute first)."""
    return " / ".join(f"{m} {counts[m]}" for m in ("full", "selective", "none") if counts.get(m))


def _stages(stages: list[int]) -> str:
    return f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}-{stages[-1]}"


def _flags_text(option: Recompute) -> str:
    return " ".join(option.flags()) or "no recompute"


# ---------------------------------------------------------------- pipeline split

def _peak(model: ModelSpec, cluster: ClusterSpec, layout: Layout, modes: tuple[str, ...],
          reserve_bytes: int) -> tuple[int, int]:
    """(stage, bytes) of the fullest stage of `layout` whose decoder layers have `modes`
    (`stage_memory` total, the reserve included; each layer charged its own mode, as `check`
    charges the emitted script)."""
    ranked, counts = zip(*stage_modes(stage_layers(model, layout), modes))
    stages = cost_stages(model, cluster, layout, counts, layers=ranked, reserve_bytes=reserve_bytes)
    return max(((s, m.total) for s, m in enumerate(stages)), key=lambda x: x[1])


def expressible(split: tuple[int, ...], vpp: int) -> bool:
    """Whether Megatron's split flags give this split (no layout string): every middle stage (all
    but the first and last) the same count, none empty; with vpp > 1 each stage's count divisible
    by vpp (equal chunks).

    Source: `transformer_config.py` `__post_init__` and `transformer_block.py`
    `get_num_layers_to_build`."""
    middle = split[1:-1]
    return (min(split) >= 1 and len(set(middle)) <= 1
            and all(n % vpp == 0 for n in split))


def _as_launched(layout: Layout) -> Layout:
    """The layout with the virtual-stage layout Megatron is given: its own when it has one; a split
    the split flags cannot give (`expressible`) as the layout string of its per-rank counts
    (`pipeline_layout.from_rank_counts`: vpp 1 -> one stage per rank, the embedding on the first,
    the loss on the last, as Megatron places them without the string); else unchanged.

    Source: Megatron-LM d98e8a6 `megatron/training/arguments.py` `validate_args` (a layout of pp x
    vpp stages sets vpp, None when it is 1: plain 1F1B) and
    `megatron/core/transformer/pipeline_parallel_layer_layout.py` (any decoder count per stage)."""
    plan = layout.pipeline_layers
    if layout.pipeline_layout is not None or plan is None or expressible(plan, layout.vpp):
        return layout
    return layout.replace(pipeline_layout=pipeline_layout.from_rank_counts(plan, layout.vpp))


def _split_flags(model: ModelSpec, layout: Layout) -> list[str]:
    """Virtual-stage and uneven-split flags: a layout of unequal stages (`_as_launched`) as the
    account-for-embedding / loss options when they build an interleaved one, else as the layout
    string (which sets vpp itself); otherwise layers per virtual stage or first / last stage
    counts."""
    split, pp, vpp = layout.pipeline_layers, layout.pp, layout.vpp
    stages = layout.pipeline_layout
    if stages is not None and not pipeline_layout.is_even(stages):
        options = pipeline_layout.account_for_options(stages, pp) if vpp > 1 else None
        if options is None:
            text = pipeline_layout.to_string(_with_mtp(stages, mtp.mtp_layers(model, layout)))
            return [f"{F['pipeline_layout']} '{text}'"]
        return [f"{F['vpp']} {vpp}"] + [F[k] for k, on in zip(
            ("account_for_embedding", "account_for_loss"), options) if on]
    even = len(set(split)) == 1
    out = []
    if vpp > 1:
        out.append(f"{F['layers_per_virtual_stage']} {model.num_hidden_layers // pp // vpp}" if even
                   else f"{F['vpp']} {vpp}")
    if even or pp == 1:
        return out
    if pp == 2:
        return out + [f"{F['first_stage_layers']} {split[0]}"]
    middle = split[1]
    if split[0] != middle:
        out.append(f"{F['first_stage_layers']} {split[0]}")
    if split[-1] != middle:
        out.append(f"{F['last_stage_layers']} {split[-1]}")
    return out


# ---------------------------------------------------------------- architecture

def _architecture_flags(model: ModelSpec, seq_len: int) -> list[str]:
    """The model's Megatron architecture flags (module docstring); positions at least seq_len."""
    out = [_flag(model, k) for k in ("num_hidden_layers", "hidden_size", "intermediate_size",
                                     "num_attention_heads")]
    if model.num_key_value_heads != model.num_attention_heads:
        out += [F["group_query_attention"], _flag(model, "num_key_value_heads")]
    out += [_flag(model, "head_dim"),
            f"{F['max_position_embeddings']} {max(model.max_position_embeddings, seq_len)}"]
    if model.gated_mlp and model.hidden_act in ("silu", "swish"):
        out.append(F["swiglu"])
    out.append(f"{F['normalization']} {'RMSNorm' if model.norm_type == 'rmsnorm' else 'LayerNorm'}")
    if model.position_embedding_type in ("rope", "learned"):
        out.append(f"{F['position_embedding_type']} "
                   + ("rope" if model.position_embedding_type == "rope" else "learned_absolute"))
    out += _rotary_base_flags(model)
    if not model.tie_word_embeddings:
        out.append(F["untie_embeddings"])
    if not model.mlp_bias and not model.attention_out_bias:
        out.append(F["disable_bias_linear"])
        if model.attention_bias:
            out.append(F["add_qkv_bias"])
    if model.qk_norm or model.is_mla:
        out.append(F["qk_norm"])
    out.append(_flag(model, "vocab_size"))
    return out + _dropout_flags(model) + _rope_scaling_flags(model) + _mla_flags(model) + \
        _moe_flags(model)


def _dropout_flags(model: ModelSpec) -> list[str]:
    """Dropout 0 where the cost model assumes none (`cost.activations.DROPOUT_MODEL_TYPES`: every
    family but GPT / OPT); Megatron's default is 0.1 on both (`transformer_config.py`
    hidden_dropout, attention_dropout), which keeps dropout masks the plan did not cost."""
    if model.model_type in DROPOUT_MODEL_TYPES:
        return []
    return [f"{F['hidden_dropout']} 0", f"{F['attention_dropout']} 0"]


LLAMA3_SCALING = {"low_freq_factor": 1, "high_freq_factor": 4,
                  "original_max_position_embeddings": 8192}
"""The Llama 3 rope-scaling constants Megatron-LM fixes (only the factor is a flag). Source:
Megatron-LM d98e8a6 `megatron/core/models/common/embeddings/rotary_pos_embedding.py`
`_apply_scaling` defaults."""


def _rope_scaling(model: ModelSpec) -> dict:
    scaling = model.extra.get("rope_scaling")
    return scaling if isinstance(scaling, dict) else {}


def _rope_scaling_flags(model: ModelSpec) -> list[str]:
    """Llama 3 rope scaling (`rope_type: llama3`) as Megatron's rope-scaling switch and factor, when the
    other constants are Megatron's (`LLAMA3_SCALING`); otherwise an architecture gap. YaRN scaling
    of an MLA model goes with `_mla_flags`."""
    scaling = _rope_scaling(model)
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind != "llama3" or any(scaling.get(k, v) != v for k, v in LLAMA3_SCALING.items()):
        return []
    return [F["use_rope_scaling"], f"{F['rope_scaling_factor']} {scaling.get('factor', 8.0):g}"]


def _mla_flags(model: ModelSpec) -> list[str]:
    """Multi-latent attention (DeepSeek-V2/V3): the low-rank query / key-value projections and
    head widths. Source: Megatron-LM d98e8a6 `arguments.py` `_add_mla_args` and
    `transformer_config.py` MLATransformerConfig (rope_type yarn by default; the YaRN factor and
    mscale flags)."""
    if not model.is_mla:
        return []
    out = [F["multi_latent_attention"]]
    if model.q_lora_rank:
        out.append(_flag(model, "q_lora_rank"))
    out += [_flag(model, k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                      "v_head_dim")]
    scaling = _rope_scaling(model)
    if (scaling.get("rope_type") or scaling.get("type")) == "yarn":
        out += [f"{F[knob]} {scaling[key]:g}" for knob, key in (
            ("rotary_scaling_factor", "factor"), ("mscale", "mscale"),
            ("mscale_all_dim", "mscale_all_dim"), ("yarn_beta_fast", "beta_fast"),
            ("yarn_beta_slow", "beta_slow"),
            ("yarn_original_positions", "original_max_position_embeddings")) if key in scaling]
    return out


def _flag(spec: ModelSpec | Layout, knob: str) -> str:
    """`--flag value` of the model's or layout's field `knob` (the flag's knob in the table)."""
    return f"{F[knob]} {getattr(spec, knob)}"


def _rotary_base_flags(model: ModelSpec) -> list[str]:
    """The rotary base from the model's rope_theta (Llama 3.1: 500000; Megatron's default 10000).

    Source: Megatron-LM `megatron/training/arguments.py` `_add_network_size_args` (type=int,
    `planner.frameworks.megatron`). A non-integral rope_theta cannot be written (the flag is an
    int) is an architecture gap (a deviation)."""
    theta = model.extra.get("rope_theta")
    if model.position_embedding_type != "rope" or not isinstance(theta, (int, float)) \
            or isinstance(theta, bool) or theta != int(theta):
        return []
    return [f"{F['rope_theta']} {int(theta)}"]


MOE_DISPATCHER = "alltoall"
"""The token dispatcher written when the layout leaves it to the framework (moe_dispatcher None):
the one the cost model then prices (all-to-all over ep, `cost.comm`); Megatron's default is
allgather (`transformer_config.py` moe_token_dispatcher_type). Grouped GEMM (off by default,
`moe_grouped_gemm`) runs a rank's experts as one kernel, as the compute cost assumes."""


def _dispatcher_flags(layout: Layout, cluster: ClusterSpec) -> list[str]:
    """The token dispatcher the layout is priced with (`Layout.moe_dispatcher`): flex with the
    backend for the cluster's NVLink domain (`frameworks.megatron.flex_backend`), else alltoall."""
    if layout.moe_dispatcher == "flex":
        backend = mg.flex_backend(cluster.gpus_per_node, cluster.scaleup_domain_gpus)
        return [f"{F['moe_token_dispatcher']} flex", f"{F['moe_flex_backend']} {backend}"]
    return [f"{F['moe_token_dispatcher']} {MOE_DISPATCHER}"]


def _moe_flags(model: ModelSpec) -> list[str]:
    if not model.is_moe:
        return []
    out = [_flag(model, "num_experts"), _flag(model, "num_experts_per_tok"),
           f"{F['moe_intermediate_size']} {model.moe_intermediate_size or model.intermediate_size}",
           F["moe_grouped_gemm"]]
    if model.shared_expert_intermediate_size:
        out.append(_flag(model, "shared_expert_intermediate_size"))
    if model.moe_layers and not all(model.moe_layers):
        pattern = "[" + ",".join("1" if m else "0" for m in model.moe_layers) + "]"
        out.append(f"{F['moe_layers']} {shlex.quote(pattern)}")
    return out + _router_flags(model)[0]


FP32_ROUTER_MODEL_TYPES = ("deepseek_v3", "kimi_k2", "glm4_moe")
"""Model types whose Hugging Face router computes its logits in fp32 (`F.linear` of the hidden
states and the weight cast to float32), written as router dtype fp32 (Megatron's moe_router_dtype; default:
the logits' dtype). Source: transformers modeling_deepseek_v3.py DeepseekV3TopkRouter.forward,
modeling_glm4_moe.py Glm4MoeTopkRouter.forward (Kimi-K2 runs DeepSeek-V3's code)."""
ROUTER_DEFAULTS = {"glm4_moe": {"scoring_func": "sigmoid", "topk_method": "noaux_tc"}}
"""Router fields a model type's config leaves out because its Hugging Face code fixes them:
GLM-4.5's router is a sigmoid with e_score_correction_bias for selection. Source: transformers
modeling_glm4_moe.py @a0699c97 Glm4MoeTopkRouter / Glm4MoeMoE.route_tokens_to_experts."""
HF_GROUP_SCORE_TOP = 2
"""The experts per group whose scores sum to a group's score in Hugging Face's group-limited
routing (`topk(2)` in DeepseekV3TopkRouter.get_topk_indices); Megatron sums the top
num_experts_per_tok // topk_group (`moe_utils.py` `group_limited_topk` l. 712 @d98e8a6), the same
only when that quotient is 2."""


def _router_flags(model: ModelSpec) -> tuple[list[str], list[str]]:
    """(flags, gaps): the router of the model's Hugging Face config as Megatron's router flags, and
    what they cannot state. From `specs.model.ROUTER_KEYS` (their model type's `ROUTER_DEFAULTS`
    where the config leaves them out) and n_group / topk_group:
    - scoring_func sigmoid -> score function sigmoid (softmax: the default);
    - topk_method noaux_tc (selection on score + e_score_correction_bias) -> expert bias;
    - routed_scaling_factor (not 1) -> the top-k scaling factor;
    - n_group > 1 -> the router's number of groups / group top-k;
    - norm_topk_prob false under softmax -> pre-softmax (softmax over all experts,
      then top-k: the weights do not sum to 1); Megatron's sigmoid always renormalises (k > 1);
    - fp32 router logits (`FP32_ROUTER_MODEL_TYPES`) -> router dtype fp32.
    Source: Megatron-LM d98e8a6 `megatron/core/transformer/moe/moe_utils.py`
    `topk_routing_with_score_function` (post-softmax top-k by default; sigmoid scores plus the
    expert bias for selection, renormalised when topk > 1; x scaling factor) and
    `transformer_config.py` (expert bias only with sigmoid / sqrtsoftplus); transformers
    modeling_deepseek_v3.py DeepseekV3TopkRouter / DeepseekV3MoE.route_tokens_to_experts."""
    if not model.is_moe:
        return [], []
    extra, out, gaps = {**ROUTER_DEFAULTS.get(model.model_type, {}), **model.extra}, [], []
    score = extra.get("scoring_func", "softmax")
    if score not in ("softmax", "sigmoid"):
        return [], [f"router scoring_func {score!r}"]
    if score == "sigmoid":
        out.append(f"{F['moe_router_score_function']} sigmoid")
    normalised = extra.get("norm_topk_prob", True)
    if score == "softmax" and normalised is False:
        out.append(F["moe_router_pre_softmax"])
    elif score == "sigmoid" and normalised is False and model.num_experts_per_tok > 1:
        gaps.append("sigmoid router weights without renormalisation (norm_topk_prob false)")
    if extra.get("topk_method") == "noaux_tc":
        if score == "sigmoid":
            out.append(F["moe_router_enable_expert_bias"])
        else:
            gaps.append("expert-bias (noaux_tc) routing under softmax")
    factor = extra.get("routed_scaling_factor")
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0 and factor != 1:
        out.append(f"{F['moe_router_topk_scaling_factor']} {factor:g}")
    if model.n_group > 1:
        if model.num_experts_per_tok // model.topk_group == HF_GROUP_SCORE_TOP:
            out += [f"{F['moe_router_num_groups']} {model.n_group}",
                    f"{F['moe_router_group_topk']} {model.topk_group}"]
        else:
            gaps.append(f"group-limited routing (n_group {model.n_group}, topk_group "
                        f"{model.topk_group}: group score of the top {HF_GROUP_SCORE_TOP})")
    if model.model_type in FP32_ROUTER_MODEL_TYPES:
        out.append(f"{F['moe_router_dtype']} fp32")
    return out, gaps


def _mtp_flags(model: ModelSpec, layout: Layout) -> list[str]:
    """The multi-token-prediction flags of the MTP layers the plan trains and costs
    (`placement.mtp.mtp_layers`: by default the model's num_nextn_predict_layers, as NVIDIA's
    Megatron-Bridge DeepSeek-V3 performance recipes train it): mtp_num_layers, and the family's
    published MTP loss weight where `RECIPES` records one (else Megatron-LM's default, 0.1). A
    layout string gets the `m`s before its `L` (`_with_mtp`), where the plan costs them.
    Source: NVIDIA-NeMo/Megatron-Bridge@067f987 src/megatron/bridge/recipes/deepseek/h100/
    deepseek_v3.py l. 136-138 (mtp_num_layers 1, loss scaling 0.1) and perf_recipes/deepseek/
    h100/deepseek_v3.py l. 48 (layout "Et|(tt|)*30mL"); Megatron-LM d98e8a6
    multi_token_prediction.py (what is trained); DeepSeek-V3 report (arXiv:2412.19437) §4.2 (MTP
    loss weight 0.3 for the first 10T tokens)."""
    n = mtp.mtp_layers(model, layout)
    if not n:
        return []
    found = recipe(model)
    weight = dict(found.values).get("mtp_loss_scaling_factor") if found else None
    return [f"{F['mtp_num_layers']} {n}"] + ([f"{F['mtp_loss_scaling_factor']} {weight}"] if weight else [])


def _with_mtp(stages: tuple[str, ...], n: int) -> tuple[str, ...]:
    """`stages` with `n` MTP layers m before the loss L when it has none (the plan costs them on
    the loss's stage, `placement.mtp.mtp_stage`)."""
    if not n or "m" in "".join(stages):
        return stages
    return tuple(s.replace("L", "m" * n + "L") for s in stages)


def _grouped_gemm_deviations(model: ModelSpec, cluster: ClusterSpec) -> list[str]:
    """One deviation where the script leaves grouped GEMM out of an MoE model: on a GPU below compute
    capability 8 Megatron-LM refuses it (`precision.grouped_gemm_supported`), so each local expert
    runs its own GEMMs (SequentialMLP), slower than the one grouped kernel the compute cost assumes."""
    if not model.is_moe or grouped_gemm_supported(cluster.gpu.name):
        return []
    return [f"{F['moe_grouped_gemm']} left out: {cluster.gpu.name} is below compute capability 8, where "
            f"Megatron-LM refuses it (arguments.py validate_args); each local expert runs its own GEMMs, "
            f"slower than the grouped kernel the plan's step time assumes"]


def _architecture_gaps(model: ModelSpec) -> list[str]:
    """Model features the flags above do not state (to add by hand), one deviation line each."""
    gaps = [what for what, present in (
        (f"rope scaling {_rope_scaling(model)}", bool(_rope_scaling(model)) and not (
            _rope_scaling_flags(model) or model.is_mla)),
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
        *((g, True) for g in _router_flags(model)[1]),
        (f"rope_theta {model.extra.get('rope_theta')} ({F['rope_theta']} takes an integer)",
         model.position_embedding_type == "rope" and "rope_theta" in model.extra
         and not _rotary_base_flags(model)),
    ) if present]
    return [f"architecture: {g} is not written as a flag; add Megatron-LM's option by hand"
            for g in gaps]


# ---------------------------------------------------------------- training hyper-parameters

@dataclass(frozen=True)
class Recipe:
    """A model family's published training hyper-parameters (Megatron knobs of the flag table)."""

    hf_id_prefix: str
    """Models whose Hugging Face id starts with this (`ModelSpec.extra['hf_id']`)."""
    source: str
    """Where the values are published."""
    values: tuple[tuple[str, str], ...]
    """(knob, value as written)."""


RECIPES = (
    Recipe("deepseek-ai/DeepSeek-V3", "DeepSeek-V3 Technical Report (arXiv:2412.19437) §4.2 "
           "Hyper-Parameters; §2.1.2 complementary sequence-wise balance loss", (
               ("adam_beta1", "0.9"), ("adam_beta2", "0.95"), ("weight_decay", "0.1"),
               ("init_method_std", "0.006"), ("clip_grad", "1.0"), ("lr_warmup_iters", "2000"),
               ("moe_router_load_balancing_type", "seq_aux_loss"), ("moe_aux_loss_coeff", "0.0001"),
               ("moe_router_bias_update_rate", "0.001"), ("mtp_loss_scaling_factor", "0.3"))),
    Recipe("meta-llama/Llama-3", "The Llama 3 Herd of Models (arXiv:2407.21783) §3.4.1 (AdamW, "
           "linear warm-up of 8,000 steps, cosine decay: the 405B schedule, the only one it "
           "gives); betas, epsilon, weight decay and clipping "
           "as Llama 2 (arXiv:2307.09288 §2.2), which Llama 3 does not restate", (
               ("adam_beta1", "0.9"), ("adam_beta2", "0.95"), ("adam_eps", "1e-05"),
               ("weight_decay", "0.1"), ("clip_grad", "1.0"), ("lr_warmup_iters", "8000"),
               ("lr_decay_style", "cosine"))),
)
"""The model families whose training hyper-parameters are published (each value cited above)."""

PLACEHOLDER_HYPERPARAMETERS = ("adam_beta2", "weight_decay", "init_method_std", "lr_warmup_iters", "min_lr")
"""Knobs written as marked placeholders (Megatron-LM's default, to set) for a model with no
`RECIPES` entry: the ones whose Megatron default differs from common LLM practice (min_lr: Megatron
decays to 0, Llama 2 (arXiv:2307.09288 §2.2) to 10% of the peak)."""


@dataclass(frozen=True)
class LearningRate:
    """One model's published peak learning rate, and the one its decay ends at where published."""

    hf_id: str
    """The model's Hugging Face id (`ModelSpec.extra['hf_id']`), matched exactly (case aside)."""
    lr: str
    """Peak learning rate, as written."""
    min_lr: str | None
    """Learning rate at the end of the decay (None: not published)."""
    source: str
    """Where both are published."""


_LLAMA3 = "The Llama 3 Herd of Models (arXiv:2407.21783)"
LEARNING_RATES = (
    LearningRate("meta-llama/Llama-3.1-405B", "8e-05", "8e-07",
                 f"{_LLAMA3} §3.4.1: peak 8 x 10^-5, cosine decay to 8 x 10^-7 over 1,200,000 steps"),
    LearningRate("meta-llama/Llama-3.1-70B", "1.5e-04", None,
                 f"{_LLAMA3} Table 3: peak 1.5 x 10^-4; its final rate is given for 405B only"),
    LearningRate("meta-llama/Llama-3.1-8B", "3e-04", None,
                 f"{_LLAMA3} Table 3: peak 3 x 10^-4; its final rate is given for 405B only"),
    LearningRate("deepseek-ai/DeepSeek-V3", "2.2e-04", "2.2e-05",
                 "DeepSeek-V3 Technical Report (arXiv:2412.19437) §4.2: peak 2.2 x 10^-4, held to 10T tokens, "
                 "then a cosine decay to 2.2 x 10^-5 over 4.3T tokens and constant tails (2.2 x 10^-5, then "
                 "7.3 x 10^-6 for the last 167B tokens); the script decays from the end of the warm-up in "
                 "Megatron-LM's default style (its WSD style with a cosine decay is the nearest to the published "
                 "schedule)"),
)
"""The catalog models whose peak learning rate is published (fresh-user review 10 finding 10: the 405B
script cited Llama 3 §3.4.1 and wrote the 3.0e-4 placeholder, 3.75x the published peak). Every other
model's LR is the marked `PLACEHOLDERS` value and its MIN_LR Megatron-LM's default, marked. torchtitan's
presets carry the same peaks (pytorch/torchtitan@b5bcd76 `torchtitan/models/llama3/config_registry.py`
llama3_8b l. 211, llama3_70b l. 284, llama3_405b l. 336; `models/deepseek_v3/config_registry.py`
deepseek_v3_671b l. 225, with a cosine decay to 0.1 x the peak)."""


def learning_rate(model: ModelSpec) -> LearningRate | None:
    """The `LEARNING_RATES` entry of the model (by Hugging Face id), or None."""
    hf_id = str(model.extra.get("hf_id", "")).lower()
    return next((r for r in LEARNING_RATES if r.hf_id.lower() == hf_id), None)


def _placeholder_default(model: ModelSpec, var: str, default: str) -> str:
    """A placeholder's default; TRAIN_ITERS at least twice the family's published warm-up, since Megatron-LM
    asserts the warm-up is shorter than the decay, which defaults to the training length (check rule
    `lr_warmup_not_below_decay`; Megatron-LM d98e8a6 `megatron/core/optimizer_param_scheduler.py` l. 160)."""
    found = recipe(model)
    warmup = dict(found.values).get("lr_warmup_iters") if found else None
    if var == "TRAIN_ITERS" and warmup is not None:
        return str(max(int(default), 2 * int(warmup)))
    return default


def recipe(model: ModelSpec) -> Recipe | None:
    """The `RECIPES` entry of the model's family (by Hugging Face id), or None."""
    hf_id = str(model.extra.get("hf_id", ""))
    return next((r for r in RECIPES if hf_id.startswith(r.hf_id_prefix)), None)


def _hyperparameters(model: ModelSpec) -> tuple[str, list[tuple[str, str, str, str]]]:
    """(comment, [(knob, shell variable, value, line comment)]) of the training hyper-parameters:
    the family's published values (`RECIPES`) with their source; each knob of
    `PLACEHOLDER_HYPERPARAMETERS` no source gives at Megatron-LM's default
    (`frameworks.megatron.DEFAULT`), its line marked PLACEHOLDER. MoE knobs are left out of a dense
    model, MTP ones always (`_mtp_flags` writes them with the MTP layers)."""
    found, rate = recipe(model), learning_rate(model)
    published = [] if found is None else [
        (k, k.upper(), v, "") for k, v in found.values
        if not (k.startswith("moe_") and not model.is_moe)
        and not k.startswith("mtp_")]  # written by `_mtp_flags` when MTP is trained
    if rate is not None:
        published += [("lr", "LR", rate.lr, "")] + ([("min_lr", "MIN_LR", rate.min_lr, "")] if rate.min_lr else [])
    given = {k for k, *_ in published}
    placeholders = [(k, k.upper(), f"{mg.DEFAULT[k]:g}",
                     "  # PLACEHOLDER: Megatron-LM's default; no published value recorded")
                    for k in PLACEHOLDER_HYPERPARAMETERS if k not in given]
    comment = (f"{model.name}'s published values. Source: {found.source}." if found else
               f"no published recipe of {model.name} is recorded: set the model's own.")
    comment += (f" Learning rate: {rate.source}." if rate else
                f" The peak learning rate LR above is a PLACEHOLDER: no published value of {model.name} is "
                f"recorded.")
    balancing, note = _aux_loss(model) if "moe_aux_loss_coeff" not in given else ([], "")
    return comment + note, published + balancing + placeholders


AUX_LOSS_PLACEHOLDER = "1e-2"
"""The auxiliary-loss coefficient written for an MoE model whose config gives none (and whose router
has no expert bias): Megatron-LM's recommended starting value. Source: NVIDIA/Megatron-LM@d98e8a6
megatron/training/arguments.py l. 3536-3537 (the coefficient flag's help: "a starting value of 1e-2
is recommended")."""


def _aux_loss(model: ModelSpec) -> tuple[list[tuple[str, str, str, str]], str]:
    """([(knob, shell variable, value, line comment)], header sentence) of the router's
    auxiliary-loss coefficient for an MoE model without a published one: the model's Hugging Face
    router_aux_loss_coef (Mixtral 0.02, Qwen3-30B-A3B 0.001: the coefficient its transformers
    training code scales the load-balancing loss by) as the recipe default, else
    `AUX_LOSS_PLACEHOLDER` marked PLACEHOLDER. Megatron-LM's default coefficient is 0.0, which skips
    the loss (router.py `_apply_aux_loss` l. 418-420 @d98e8a6): without it the router trains with no
    load balancing (`planner check` warns, rule `moe_no_load_balancing`). None for a dense model or a
    router balanced by its expert bias (`_router_flags`: aux-loss-free balancing)."""
    if not model.is_moe or F["moe_router_enable_expert_bias"] in _router_flags(model)[0]:
        return [], ""
    var = "moe_aux_loss_coeff".upper()
    value = model.extra.get("router_aux_loss_coef")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return [("moe_aux_loss_coeff", var, f"{value:g}", "  # the model's router_aux_loss_coef")], (
            f" {var} is the model's Hugging Face router_aux_loss_coef ({value:g}), as the recipe "
            f"default: Megatron-LM's default 0.0 trains the router with no load balancing.")
    return [("moe_aux_loss_coeff", var, AUX_LOSS_PLACEHOLDER,
             "  # PLACEHOLDER: Megatron-LM's recommended starting value; the model file gives no "
             "router_aux_loss_coef")], (
        f" {var} is a placeholder: the model file gives no router_aux_loss_coef, and Megatron-LM's "
        f"default 0.0 trains the router with no load balancing.")


def _fp8_note(model: ModelSpec, layout: Layout) -> list[str]:
    """A header note where the plan trains fp8 with another scaling recipe than the model's
    published one (`precision.published_fp8_recipe`, which `plan` costs unless asked otherwise)."""
    found = published_fp8_recipe(model)
    costed = layout.fp8_recipe or mg.DEFAULT["fp8_recipe"]
    if layout.precision != "fp8" or found is None or found[0] == costed:
        return []
    return [f"# Note: the plan was costed with {costed} fp8 scaling and the script runs it "
            f"({F['fp8_recipe']} {costed}, written where it is not Megatron's default); "
            f"{model.name} trained with "
            f"{found[0]} scaling ({found[1]}): re-plan with --fp8-recipe "
            f"{found[0]} to train and cost that recipe."]


# ---------------------------------------------------------------- the script

def _overlap_flags(layout: Layout) -> list[str]:
    """The switches of the overlaps the plan's layout resolves to on (`placement.overlap`; a plan
    sets the ones a tuned recipe uses, `overlap.tuned`), Megatron's default being off for each
    (`frameworks.megatron` OVERLAP_SWITCHES)."""
    on = overlap.resolve(layout)
    return [F[knob] for knob in mg.OVERLAP_SWITCHES if getattr(on, knob)]


def _grad_reduce_flags(layout: Layout) -> list[str]:
    """The flag of a gradient-reduction dtype other than Megatron's default for the precision
    (`frameworks.megatron.GRAD_REDUCE_DTYPES`: the default first)."""
    dtype = layout.grad_reduce_dtype
    if dtype is None or dtype == mg.GRAD_REDUCE_DTYPES[layout.precision][0]:
        return []
    return [F["grad_reduce_in_bf16"] if dtype == "bf16" else F["grads_in_fp32"]]


def _optimizer_precision_flags(layout: Layout) -> list[str]:
    """The fp8 recipe other than Megatron's default (delayed) under fp8, the fp8 parameter gather
    switch when on (`Layout.fp8_param_gather`), the precision-aware optimizer switch when on, each dtype knob other than Megatron's fp32 default with its
    value (`frameworks.megatron` flags of `layout.OPTIMIZER_DTYPES`), and the cross-entropy fusion
    switch with its implementation when not native (`Layout.cross_entropy_fusion`)."""
    out = ([f"{F['fp8_recipe']} {layout.fp8_recipe}"] if layout.precision == "fp8"
           and layout.fp8_recipe not in (None, mg.DEFAULT["fp8_recipe"]) else [])
    out += [F["fp8_param_gather"]] if layout.fp8_param_gather else []
    out += [F["precision_aware_optimizer"]] if layout.precision_aware_optimizer else []
    out += [f"{F[name]} {getattr(layout, name)}" for name in OPTIMIZER_DTYPES
            if getattr(layout, name) not in (None, mg.DEFAULT[name])]
    if layout.cross_entropy_fusion is not None:  # the fused loss; its implementation when not the default
        out.append(F["cross_entropy_loss_fusion"])
        if layout.cross_entropy_fusion != mg.DEFAULT["cross_entropy_fusion_impl"]:
            out.append(f"{F['cross_entropy_fusion_impl']} {layout.cross_entropy_fusion}")
    return out


def _flags(doc: dict, model: ModelSpec, cluster: ClusterSpec, layout: Layout,
           recompute: Recompute) -> list[str]:
    request = doc["request"]
    out = [_flag(layout, k) for k in ("tp", "pp", "cp")]
    if model.is_moe:
        out += [_flag(layout, "ep"), _flag(layout, "etp")] + _dispatcher_flags(layout, cluster)
    out += _split_flags(model, layout)
    if layout.sequence_parallel:
        out.append(F["sequence_parallel"])
    out += [_flag(layout, k) for k in ("micro_batch_size", "global_batch_size", "seq_len")]
    out += list(mg.ZERO_FLAGS[layout.zero_stage]) + list(mg.PRECISION_FLAGS[layout.precision])
    out += _overlap_flags(layout) + _grad_reduce_flags(layout) + _optimizer_precision_flags(layout)
    if layout.cp > 1 and layout.cp_comm_type != mg.DEFAULT["cp_comm_type"]:
        out.append(f"{F['cp_comm_type']} {layout.cp_comm_type}")
    out.append(f"{F['optimizer']} {mg.OPTIMIZERS[request['optimizer']]}")
    out += recompute.flags() + [f for f in _architecture_flags(model, layout.seq_len)
                                if f != F["moe_grouped_gemm"] or not _grouped_gemm_deviations(model, cluster)]
    out += _mtp_flags(model, layout)
    out += [f'{F[knob]} "${var}"' for knob, var, _, _ in _hyperparameters(model)[1]
            if knob != "lr"]  # the lr flag is written with the placeholders' flags, published or not
    if layout.offload_modules:
        out += [F["fine_grained_activation_offloading"], f"{F['offload_modules']} {' '.join(layout.offload_modules)}"]
    return out + [f"{F['tokenizer_type']} HuggingFaceTokenizer",
                  *(f'{F[knob]} "${var}"' for knob, var in _PLACEHOLDER_FLAGS)]



def _script(doc: dict, model: ModelSpec, cluster: ClusterSpec, layout: Layout,
            recompute: Recompute, deviations: list[str]) -> str:
    per_node = min(cluster.num_gpus, cluster.gpus_per_node)
    nodes = cluster.num_gpus // per_node
    launcher = [f"{F['nproc_per_node']} {per_node}", f"{F['nnodes']} {nodes}",
                *(f'{F[knob]} "${knob.upper()}"' for knob in ("node_rank", "master_addr",
                                                               "master_port"))]
    lines = ["#!/bin/bash", *_header(doc, model, cluster, layout, recompute, deviations), "",
             "# PLACEHOLDER values: the plan does not know them; set these before launching."]
    lines += [f'{var}="${{{var}:-{_placeholder_default(model, var, default)}}}"  # {what}'
              for var, default, what in PLACEHOLDERS
              if not (var == "LR" and learning_rate(model))]  # a published LR is a hyper-parameter line
    comment, values = _hyperparameters(model)
    lines += ["", *textwrap.wrap(f"Training hyper-parameters: {comment}", 96, initial_indent="# ",
                                 subsequent_indent="# ")]
    lines += [f'{var}="${{{var}:-{value}}}"{note}' for _, var, value, note in values] + [""]
    lines += ['NODE_RANK="${NODE_RANK:-0}"  # this node, 0..' + str(nodes - 1),
              'MASTER_ADDR="${MASTER_ADDR:-localhost}"', 'MASTER_PORT="${MASTER_PORT:-6000}"', "",
              *_environment(layout, cluster.gpu.name), "torchrun \\"]
    body = launcher + ["pretrain_gpt.py"] + _flags(doc, model, cluster, layout, recompute)
    lines += [f"    {item} \\" for item in body[:-1]] + [f"    {body[-1]}", ""]
    return "\n".join(lines)


def _environment(layout: Layout, gpu_name: str) -> list[str]:
    """`export CUDA_DEVICE_MAX_CONNECTIONS=1` (and a blank line) where Megatron-LM wants it: with
    tp or cp > 1 on GPUs before Blackwell it asserts the value 1 unless FSDP runs; Megatron-FSDP
    (ZeRO-2 / 3 here) asserts it is not 1 (`validate_args`), so it is left unset there, and where
    tp or cp > 1 before Blackwell (`overlap.connections_conflict`) the script unsets it (a container
    or cluster default of 1 would stop the run) under a comment saying which overlap the plan keeps
    (`overlap.connections_note`). With fine-grained activation offloading, NVTE_CPU_OFFLOAD_V1=1,
    which `validate_args` asserts under Transformer Engine >= 2.10 (`mg.CPU_OFFLOAD_V1`)."""
    offload = [f"export {mg.CPU_OFFLOAD_V1}=1", ""] if layout.offload_modules else []
    if overlap.connections_conflict(layout, gpu_name):
        note = textwrap.wrap(overlap.connections_note(layout, gpu_name), 96, initial_indent="# ",
                             subsequent_indent="# ")
        return [*note, f"unset {mg.DEVICE_MAX_CONNECTIONS}", ""] + offload
    if layout.zero_stage >= 2:
        return offload
    return [f"export {mg.DEVICE_MAX_CONNECTIONS}=1", ""] + offload


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
    out += _fp8_note(model, layout) + _offload_note(layout)
    if deviations:
        out.append("# Deviations from the plan (a recompute change keeps every stage within the plan's "
                   "memory budget):")
        out += [f"#   - {d}" for d in deviations]
    else:
        out.append("# Deviations from the plan: none (this is the plan exactly).")
    return out


def with_search_note(emitted: Emitted, note: str) -> Emitted:
    """`emitted` with `note` as a header comment line after the plan summary lines (before the
    deviations): what `emit.best_launch` says when it launches a plan other than the search's
    best (a comment, so `planner check` reads the script as before)."""
    lines = emitted.text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("# Deviations from the plan"))
    return dataclasses.replace(emitted, text="\n".join([*lines[:at], f"# {note}", *lines[at:]]))


def _offload_note(layout: Layout) -> list[str]:
    """The header's line on fine-grained activation offloading, where the plan offloads: the run
    then depends on pinned host memory and the host link, which the step time and memory assume
    (senior review 8 finding 4: a script with offloading on said only "this is the plan exactly")."""
    if not layout.offload_modules:
        return []
    return [f"# Activation offloading ON (fine-grained, modules {', '.join(layout.offload_modules)}; "
            f"{mg.CPU_OFFLOAD_V1}=1): their saved inputs wait in pinned host memory "
            f"between forward and backward; the plan's step time and memory count on that host "
            f"memory and on the host-link (PCIe) copies overlapping compute."]


def _recompute_text(recompute) -> str:
    if isinstance(recompute, str):
        return recompute
    return ", ".join(_counts_text(c) for c in recompute)
