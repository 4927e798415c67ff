"""Activation memory: bytes one decoder layer saves for backward, per micro-batch, per GPU.

One rule costs every block type. Each family is described as a short list of `SavedTensor`s
(name, elements per token, element type, how parallelism splits it, whether selective recompute
drops it); `layer_activation_bytes` multiplies by the tokens on the GPU and divides by the degree
of the axis that splits each tensor. The derivation of every list (which tensor, which op saves
it, why that size) is in docs/activations.md.

Conventions (Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, §4.1-4.3, eq. 1-6, Table 2):
- s sequence length, b micro-batch size, h hidden size, a heads, t tensor-parallel degree.
- Activations are `dtype_bytes` wide (2 for bf16/fp16); dropout masks 1 byte per element;
  FlashAttention's log-sum-exp and router probabilities are fp32 (4 bytes); top-k indices int64.
- Per-token statistics of LayerNorm/RMSNorm (mean, rstd: 4-8 bytes per token) and the int64 token
  ids are ignored, as Korthikanti does; they are < 0.1 % of a layer.
- Splits: `tp` tensors are divided by t (heads or MLP columns); `kv` tensors by min(t, n_kv)
  (KV heads replicate when t > n_kv, as Megatron does); `sp` tensors are whole on every TP rank
  unless sequence parallelism splits them along s by t; context parallelism divides every
  tensor's token count by cp (each rank keeps s/cp queries; non-flash score tensors keep a row of
  s keys per query).
- Recompute (Megatron's definitions, megatron/core/transformer/transformer_config.py
  `recompute_granularity`): `selective` recomputes the attention core (QK^T, softmax, dropout,
  softmax·V) and drops the tensors only it saves; `full` keeps only the layer input (2·s·b·h,
  /t with SP, /cp) and recomputes the rest. With `framework="torchtitan"`, `selective` is
  torchtitan's op-level selective AC for dense blocks (`torchtitan_op_sac_tensors`).

For a GPT block (LayerNorm, MHA without FlashAttention, 4h GeLU MLP, dropout) the lists reproduce
Korthikanti's Table 2 exactly: s·b·h·(34 + 5as/h) without parallelism; s·b·h·(10 + 24/t + 5as/(ht))
with TP; s·b·h/t·(34 + 5as/h) with TP+SP; s·b·h·(10 + 24/t) with TP + selective; 34·s·b·h/t with
TP+SP+selective; 2·s·b·h for full recompute.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from planner.errors import SpecError
from planner.placement.layout import OFFLOAD_MODULES, RECOMPUTE_MODULES
from planner.placement.precision import fp8_saved_input_bytes
from planner.specs.model import ModelSpec, spec_memo

RECOMPUTE_MODES = ("none", "selective", "full")
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
DROPOUT_MODEL_TYPES = ("gpt", "gpt2", "opt")
"""Families whose reference training recipes use dropout 0.1 (GPT-3, Brown et al. 2020 §2.3 /
Megatron GPT defaults `--hidden-dropout 0.1 --attention-dropout 0.1`; OPT, Zhang et al. 2022 §2.2).
BLOOM (hidden_dropout 0.0), Falcon, Llama-style and MoE families train without dropout."""
NON_FLASH_MODEL_TYPES = ("gpt", "gpt2", "opt", "bloom")
"""Families costed without FlashAttention by default (the 2022 GPT/OPT/BLOOM runs materialised
the s×s scores); pass `flash_attention=True` to cost them as a modern Megatron run would."""

"""RECOMPUTE_MODULES (`placement.layout`): Megatron-LM's `--recompute-modules` choices costed here
(under selective granularity; default `("core_attn",)`). Source: NVIDIA/Megatron-LM@d98e8a6
megatron/core/transformer/transformer_config.py l. 560-583 (`recompute_modules`, default
["core_attn"] at l. 1940-1941); the GatedDeltaNet / HyperConnection entries (gdn_*, gdp_*, mhc)
are for architectures planner does not model. What each drops (`saved_tensors` tags):
- core_attn: the attention core's own saved tensors (scores, dropout, FlashAttention's LSE):
  transformer_block.py / attention.py `_checkpointed_attention_forward` (a normal checkpoint that
  keeps q, k, v as its inputs);
- mla_up_proj: q_b / kv_b inputs (the normalised latents) and the up-projected, RoPE-applied
  q, k, v: multi_latent_attention.py l. 983-987 runs the up projections (TE LayerNormLinear with
  the q/kv latent norms fused, gpt_layer_specs.py l. 246-255) and RoPE under
  `CheckpointWithoutOutput`, which keeps only the compressed latents (its inputs) and frees q, k,
  v after the core attention (`discard_output_and_register_recompute`, l. 455-458);
- mlp: the dense MLP's inner tensors (not its input, the checkpoint's argument); only dense
  layers: transformer_layer.py l. 537-539 sets `recompute_mlp` only when not `is_moe_layer`;
- moe_act: the routed experts' activation output (fc2 input): experts.py l. 1019-1030
  (`CheckpointWithoutOutput` around the SwiGLU, output discarded after linear_fc2);
- moe: every tensor of the MoE block but its input: moe_layer.py l. 247-251, 701 (the whole
  `custom_forward` under `tensor_parallel.checkpoint` / `te_checkpoint`);
- shared_experts: the shared experts' inner tensors: shared_experts.py l. 158;
- layernorm: the output of each norm that is a module of its own (the next linear saves it):
  transformer_layer.py l. 475-530 (input_layernorm unless an IdentityOp, pre_mlp_layernorm);
  Megatron-core's TE specs fuse the norm into the next linear (IdentityOp) except MLA's input
  norm (gpt_layer_specs.py l. 296) and the pre-MLP norm of every layer of a model with experts
  (l. 313), so only those outputs are dropped: MLA `down_proj_input`, MoE `router_input`, and a
  dense layer's `mlp.fc1_input` in a model with experts.
"""
_CORE = ("core_attn",)
OFFLOAD_MIN_ELEMENTS = 1024 * 1024
"""Smallest tensor (elements on the GPU) fine-grained offloading moves: Megatron-LM's
`min_offloaded_tensor_size` default (transformer_config.py l. 1343 @d98e8a6;
fine_grained_activation_offload.py `ChunkOffloadHandler.tensor_push` skips smaller ones).

What each OFFLOAD_MODULES entry moves (`SavedTensor.offload`; the scopes of
megatron/core/transformer/transformer_layer.py l. 709, 819, 1544-1556, attention.py /
multi_latent_attention.py l. 343-463, moe/experts.py l. 928-941, all @d98e8a6): attn_norm the
input norm's input where that norm is a module (MLA; TE fuses it into linear_qkv otherwise);
qkv_linear what the QKV projections save (the fused norm's input and output; MLA's down / up
projections and latent norms); core_attn q, k, v and the core's own tensors; attn_proj the
output projection's input; mlp_norm the pre-MLP norm's input where it is a module (models with
experts); expert_fc1 the routed experts' fc1 input; moe_act their activation's input."""

_ELEMENT_BYTES = {"mask": 1, "fp32": 4, "int64": 8, "int32": 4, "fp8": 1}


@dataclass(frozen=True, kw_only=True)
class SavedTensor:
    """One tensor a layer keeps for backward, before any parallel split."""

    name: str
    """Dotted name: `<part>.<tensor>` (e.g. `attention.q`, `mlp.fc2_input`)."""
    elements_per_token: float
    """Elements per token of the micro-batch (a·s for an s×s score row of a heads)."""
    dtype: str = "act"
    """`act` (dtype_bytes), `mask` (1 B), `fp32` (4 B), `int64` (8 B) or `int32` (4 B)."""
    split: str = "tp"
    """`tp`: /t; `kv`: /min(t, n_kv); `sp`: /t only with sequence parallelism; `none`: whole on
    every rank (a row-parallel matmul's partial-sum output over the gathered sequence)."""
    modules: tuple[str, ...] = ()
    """The Megatron `--recompute-modules` entries whose checkpoint drops this tensor under
    selective recompute (`RECOMPUTE_MODULES`); empty = kept by every module set."""
    offload: str = ""
    """The Megatron fine-grained offloading module (`OFFLOAD_MODULES`) in whose scope autograd saves
    this tensor (its saved-tensor hooks move it to host); empty = in none of them."""
    linear_input: bool = False
    """Saved by a Transformer Engine linear (Linear, LayerNormLinear's norm output, GroupedLinear)
    for its weight-gradient GEMM: quantized under TE fp8 (`fp8_recipe` of
    `layer_activation_bytes`, `placement.precision.fp8_saved_input_bytes`)."""


@dataclass(frozen=True, kw_only=True)
class ActivationBytes:
    """Bytes one layer saves for backward for one micro-batch on one GPU."""

    total: int
    """Sum of `breakdown`, bytes."""
    breakdown: dict[str, int]
    """Bytes per saved tensor (name -> bytes), in forward order."""
    block: str
    """Block kind costed: gpt, dense, moe, mla, mla+moe, parallel (Falcon)."""
    recompute: str
    """Recompute mode applied: none, selective or full."""
    offloaded: int = 0
    """Bytes of the saved tensors moved to host memory by fine-grained activation offloading (not
    in `total`), bytes."""


def layer_activation_bytes(model: ModelSpec, layer_index: int, *, seq_len: int, micro_batch_size: int,
                           tp: int, cp: int = 1, sequence_parallel: bool = False, recompute: str = "none",
                           ep: int = 1, moe_overload_factor: float = 1.0, dtype_bytes: int = 2,
                           etp: int = 1, framework: str = "megatron",
                           flash_attention: bool | None = None,
                           recompute_modules: tuple[str, ...] = _CORE,
                           offload_modules: tuple[str, ...] = (),
                           fp8_recipe: str | None = None,
                           swiglu_fp8_input_store: bool = False, fused_qkv: bool = False) -> ActivationBytes:
    """Bytes saved for backward by layer `layer_index` for one micro-batch on one GPU.

    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §4, eq. 1-6, Table 2 for the GPT block; the
    other blocks by the same per-tensor accounting of what autograd saves (docs/activations.md).

    Args:
        model: the model.
        layer_index: 0-based decoder layer (MoE vs dense and MLA come from the spec).
        seq_len: tokens per sequence s.
        micro_batch_size: sequences per micro-batch b.
        tp: tensor-parallel degree t.
        cp: context-parallel degree (divides the tokens on a GPU).
        sequence_parallel: Megatron SP (splits the non-TP activations along s by t).
        recompute: none | selective | full.
        ep: expert-parallel degree (routed tokens per rank = ep·T·k / ep = T·k under balanced routing).
        moe_overload_factor: routed tokens on the busiest rank / the balanced count (>= 1).
        dtype_bytes: bytes per activation element (bf16/fp16: 2).
        etp: expert tensor-parallel degree (expert width / etp, tokens gathered over etp).
        framework: megatron | deepspeed (TE/fused kernels) | torchtitan (eager PyTorch modules).
        flash_attention: None = family default (off for gpt/gpt2/opt/bloom, on otherwise).
        recompute_modules: under `selective` (megatron / deepspeed), the Megatron
            `--recompute-modules` set (`RECOMPUTE_MODULES`): every tensor tagged with one of them
            is dropped; default ("core_attn",), Korthikanti's selective recompute.
        offload_modules: Megatron fine-grained activation offloading (`OFFLOAD_MODULES`): the
            tensors saved in these modules' scopes, of at least OFFLOAD_MIN_ELEMENTS elements on
            the GPU, go to `offloaded` instead of `total`.
        fp8_recipe: None, or the Transformer Engine fp8 recipe the layer runs (Megatron-LM at
            precision fp8, `placement.precision.te_fp8`): see `_te_fp8`.
        swiglu_fp8_input_store: Megatron-LM's activation_func_fp8_input_store
            (`Layout.swiglu_fp8_input_store`): the SwiGLU's saved input (`*.fc1_output`, 2·I per
            token of the dense MLP, routed and shared experts) kept as float8_e4m3fn, 1 B per
            element, cast back for the backward, in any compute precision. Source:
            NVIDIA/Megatron-LM@d98e8a6 megatron/core/fusions/fused_bias_swiglu.py l. 168-186,
            221-237, 268-272 (`input.to(torch.float8_e4m3fn) if fp8_input_store`), mlp.py l. 283-312
            and moe/experts.py l. 970-978 (passed to every fused SwiGLU), extensions/
            transformer_engine.py l. 621-622 (TE's op fuser: `cache_quantized_input`).
        fused_qkv: torchtitan's fused `wqkv` projection (`Layout.fused_qkv`), read by its selective
            op AC alone (`torchtitan_op_sac_tensors`); False = separate wq, wk, wv (before 3396a4b).

    Raises:
        SpecError: a value outside its allowed range (names the key, the value and what is allowed).
    """
    _check(model, layer_index, seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp,
           recompute=recompute, ep=ep, etp=etp, moe_overload_factor=moe_overload_factor,
           dtype_bytes=dtype_bytes, framework=framework)
    for module in recompute_modules:
        if module not in RECOMPUTE_MODULES:
            raise SpecError(f"value {module!r} not allowed; allowed: {', '.join(RECOMPUTE_MODULES)}",
                            key="recompute_modules")
    flash = flash_attention if flash_attention is not None else model.model_type not in NON_FLASH_MODEL_TYPES
    tensors = _saved_tensors_of_kind(model, layer_index, seq_len=seq_len, ep=ep, etp=etp,
                                     moe_overload_factor=moe_overload_factor, framework=framework,
                                     flash_attention=flash)
    if recompute == "selective" and framework == "torchtitan" and _op_sac_applies(model, layer_index):
        tensors = torchtitan_op_sac_tensors(model, tp=tp, sequence_parallel=sequence_parallel, fused_qkv=fused_qkv)
    elif recompute == "selective":
        drop = set(recompute_modules)
        tensors = [x for x in tensors if drop.isdisjoint(x.modules)]
    elif recompute == "full":
        tensors = [SavedTensor(name="layer_input", elements_per_token=model.hidden_size, split="sp")]
    if swiglu_fp8_input_store:
        tensors = [dataclasses.replace(x, dtype="fp8") if x.name.endswith(".fc1_output") else x
                   for x in tensors]
    fp8_bytes = None
    if fp8_recipe is not None:
        tensors, fp8_bytes = _te_fp8(tensors, fp8_recipe, offload_modules), fp8_saved_input_bytes(fp8_recipe)
    tokens = seq_len * micro_batch_size // cp
    breakdown = {x.name: _bytes(x, model, tokens=tokens, tp=tp, sequence_parallel=sequence_parallel,
                                dtype_bytes=dtype_bytes, fp8_bytes=fp8_bytes) for x in tensors}
    moved = {x.name for x in tensors if x.offload and x.offload in offload_modules
             and breakdown[x.name] >= OFFLOAD_MIN_ELEMENTS * _ELEMENT_BYTES.get(x.dtype, dtype_bytes)}
    offloaded = sum(breakdown[n] for n in moved)
    breakdown = {n: b for n, b in breakdown.items() if n not in moved}
    return ActivationBytes(total=sum(breakdown.values()), breakdown=breakdown,
                           block=_block_kind(model, layer_index, flash), recompute=recompute,
                           offloaded=offloaded)


def layer_kind(model: ModelSpec, layer_index: int) -> bool:
    """What the layer index selects in this module: whether layer `layer_index` is a routed-expert
    block (`saved_tensors`, `_op_sac_applies`, `_block_kind` read nothing else of the index). Two
    layers of the same kind save the same bytes under the same arguments, so callers may cache
    per kind (`cost.memory` does); a rule that reads more of the index must extend this."""
    return bool(model.is_moe and model.moe_layers[layer_index])


def _te_fp8(tensors: list[SavedTensor], recipe: str, offload_modules: tuple[str, ...]) -> list[SavedTensor]:
    """The saved tensors under Transformer Engine fp8 with `recipe` (Megatron-LM's TE layer specs):

    - every `linear_input` is saved quantized (`fp8_saved_input_bytes`; TE Linear /
      LayerNormLinear / GroupedLinear keep only the quantized copy: the LayerNormLinear's bf16 norm
      output is not kept, its norm input is, `_norm`), except the routed experts' fc1 input when
      their fc1 is offloaded and the recipe is not mxfp8 (Megatron sets `save_original_input`:
      NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/moe/experts.py l. 278-284);
    - the attention output projection's input is the core attention's saved output O; under the
      delayed recipe linear_proj also saves its own quantized copy (1 B/element,
      `attention.o_proj_input_fp8`); under the other recipes Megatron makes it save the original
      (attention.py l. 428-444, `set_save_original_input`, TE >= 2.6 assumed), nothing extra.

    Source: NVIDIA/TransformerEngine@d0067d0 module/linear.py l. 372-440, 596-621,
    module/layernorm_linear.py l. 222-317, 462-536, module/grouped_linear.py l. 896-936. Not
    modelled (kept 16-bit, an over-count): MLA's projections (its two down projections each save
    their own quantized copy of one input) and, under delayed, the shared experts' fc1 copy of the
    router input (shared_experts.py l. 146-161)."""
    keep_fc1 = "expert_fc1" in offload_modules and recipe != "mxfp8"
    out = [dataclasses.replace(x, linear_input=False) if keep_fc1 and x.name == "experts.fc1_input" else x
           for x in tensors]
    if (recipe or "delayed") == "delayed":
        out += [dataclasses.replace(x, name="attention.o_proj_input_fp8", dtype="fp8", modules=x.modules)
                for x in tensors if x.name == "attention.o_proj_input"]
    return out


def _bytes(x: SavedTensor, model: ModelSpec, *, tokens: int, tp: int, sequence_parallel: bool,
           dtype_bytes: int, fp8_bytes: float | None = None) -> int:
    """tokens · elements · bytes / split degree, rounded up to whole bytes; a `linear_input` is
    `fp8_bytes` wide when given (TE fp8)."""
    divisor = {"tp": tp, "kv": min(tp, model.num_key_value_heads),
               "sp": tp if sequence_parallel else 1, "none": 1}[x.split]
    width = fp8_bytes if x.linear_input and fp8_bytes else _ELEMENT_BYTES.get(x.dtype, dtype_bytes)
    return math.ceil(tokens * x.elements_per_token * width / divisor)


def _saved_tensors_of_kind(model: ModelSpec, layer_index: int, **kw) -> tuple[SavedTensor, ...]:
    """`saved_tensors(model, layer_index, **kw)` as a tuple, once per (`layer_kind`, arguments) of
    the model (`spec_memo`): two layers of one kind save the same tensors, and the search asks
    the bytes of thousands of layouts that share a few such argument sets (issue 11 speed)."""
    memo, key = spec_memo(model), ("activations.saved_tensors", layer_kind(model, layer_index),
                                   *sorted(kw.items()))
    if key not in memo:
        memo[key] = tuple(saved_tensors(model, layer_index, **kw))
    return memo[key]


def saved_tensors(model: ModelSpec, layer_index: int, *, seq_len: int, ep: int = 1, etp: int = 1,
                  moe_overload_factor: float = 1.0, framework: str = "megatron",
                  flash_attention: bool = True) -> list[SavedTensor]:
    """The tensors layer `layer_index` saves without recompute, in forward order.

    GPT block (Korthikanti §4.1; bytes for s·b tokens, no parallelism): attention_norm.input 2sbh;
    attention.qkv_input 2sbh; attention.q, attention.k 2sbh each (QK^T inputs); softmax_output
    2as²b; softmax_dropout_mask as²b; softmax_dropout_output 2as²b; attention.v 2sbh;
    o_proj_input 2sbh; output_dropout_mask sbh; mlp_norm.input 2sbh; mlp.fc1_input 2sbh;
    mlp.activation_input (GeLU input) 8sbh; mlp.fc2_input 8sbh; mlp.dropout_mask sbh
    = 34sbh + 5as²b.
    Llama-style (FlashAttention, no dropout): norm inputs 2sbh ×2; qkv_input 2sbh; q 2sb·a·d;
    k, v 2sb·kv·d each (after RoPE); softmax_lse 4sb·a (fp32); o_proj_input 2sb·a·d (= flash's
    O); fc1_input 2sbh; fc1_output (SwiGLU input) 2sb·2I; fc2_input 2sb·I.
    MoE, MLA, Falcon, Nemotron, torchtitan variants: docs/activations.md, one table per block type,
    each row naming the op that saves it.
    """
    dropout = model.model_type in DROPOUT_MODEL_TYPES
    h = model.hidden_size
    tensors = _norm("attention_norm", h, framework, offload="attn_norm" if model.is_mla else "qkv_linear")
    tensors += _mla(model, framework) if model.is_mla else _attention(model, seq_len, framework,
                                                                      flash_attention, dropout)
    if dropout:
        tensors.append(SavedTensor(name="attention.output_dropout_mask", elements_per_token=h,
                                   dtype="mask", split="sp"))
    if model.parallel_attention:
        # Falcon: the MLP reads the block input too (Source: modeling_falcon.py FalconDecoderLayer);
        # with two norms (new_decoder_architecture) ln_mlp has its own output, else it shares ln_attn's.
        if model.norms_per_layer == 2:
            tensors.append(SavedTensor(name="mlp_norm.output", elements_per_token=h, split="sp"))
        return tensors + _dense_mlp(model, model.intermediate_size, framework, with_input=False)
    tensors += _norm("mlp_norm", h, framework, offload="mlp_norm" if model.is_moe else "")
    if model.is_moe and model.moe_layers[layer_index]:
        tensors += _moe(model, ep=ep, etp=etp, overload=moe_overload_factor, framework=framework)
    else:
        tensors += _dense_mlp(model, model.intermediate_size, framework)
    if dropout:
        tensors.append(SavedTensor(name="mlp.dropout_mask", elements_per_token=h, dtype="mask", split="sp"))
    return tensors


def _norm(prefix: str, width: float, framework: str, split: str = "sp", offload: str = "") -> list[SavedTensor]:
    """Norm inputs. Megatron/TE fused LayerNorm/RMSNorm saves its input (and per-token statistics).

    Source: TE `LayerNormLinear` / apex `FusedLayerNormAffineFunction` save the input + mu/rsigma;
    torchtitan models/norms.py `RMSNorm.forward`: `self._norm(x.float()).type_as(x) * weight` —
    autograd keeps the fp32 copy of x (for pow and mul) and the bf16 normalised tensor (for the
    weight gradient of `* weight`).
    """
    if framework == "torchtitan":
        return [SavedTensor(name=f"{prefix}.input_fp32", elements_per_token=width, dtype="fp32", split=split),
                SavedTensor(name=f"{prefix}.normalized", elements_per_token=width, split=split)]
    return [SavedTensor(name=f"{prefix}.input", elements_per_token=width, split=split, offload=offload)]


def _attention(model: ModelSpec, seq_len: int, framework: str, flash: bool, dropout: bool) -> list[SavedTensor]:
    """GQA/MHA attention: QKV input, q/k/v, the core (scores or LSE), the attention output.

    Source: Korthikanti 2022 §4.1 (QKV input 2sbh, Q and K 4sbh, softmax output 2as²b, its dropout
    mask as²b and output 2as²b, V 2sbh, projection input 2sbh); FlashAttention-2 (Dao 2023) §3.1
    saves q, k, v, O and the log-sum-exp L (fp32, one per head per query), not the s×s scores.
    """
    a, kv, d = model.num_attention_heads, model.num_key_value_heads, model.head_dim
    torchtitan = framework == "torchtitan"
    kv_elems, kv_split = (a * d, "tp") if torchtitan else (kv * d, "kv")  # torchtitan repeat_kv copies
    qkv, core = "qkv_linear", "core_attn"
    tensors = [SavedTensor(name="attention.qkv_input", elements_per_token=model.hidden_size,
                           split=_gathered_input_split(framework), offload=qkv, linear_input=True)]
    if model.qk_norm:  # Qwen3: q_norm/k_norm inputs (the q/k projection outputs)
        tensors += [SavedTensor(name="attention.q_norm_input", elements_per_token=a * d, offload=qkv),
                    SavedTensor(name="attention.k_norm_input", elements_per_token=kv * d, split="kv", offload=qkv)]
    tensors += [SavedTensor(name="attention.q", elements_per_token=a * d, offload=core),
                SavedTensor(name="attention.k", elements_per_token=kv_elems, split=kv_split, offload=core)]
    if flash:
        tensors.append(SavedTensor(name="attention.softmax_lse", elements_per_token=a, dtype="fp32", modules=_CORE,
                                   offload=core))
    else:
        tensors.append(SavedTensor(name="attention.softmax_output", elements_per_token=a * seq_len, modules=_CORE,
                                   offload=core))
        if dropout:
            tensors += [SavedTensor(name="attention.softmax_dropout_mask", elements_per_token=a * seq_len,
                                    dtype="mask", modules=_CORE, offload=core),
                        SavedTensor(name="attention.softmax_dropout_output", elements_per_token=a * seq_len,
                                    modules=_CORE, offload=core)]
    tensors.append(SavedTensor(name="attention.v", elements_per_token=kv_elems, split=kv_split, offload=core))
    if torchtitan and flash:  # SDPA keeps O; `.transpose(1, 2).contiguous()` makes wo's input a copy
        tensors.append(SavedTensor(name="attention.sdpa_output", elements_per_token=a * d, modules=_CORE))
    tensors.append(SavedTensor(name="attention.o_proj_input", elements_per_token=a * d, offload="attn_proj"))
    return tensors


def _mla(model: ModelSpec, framework: str) -> list[SavedTensor]:
    """DeepSeek-V3 multi-head latent attention with FlashAttention (training form: latents are
    up-projected, no weight absorption).

    Source: DeepSeek-V3 technical report §2.1.1 eq. 1-11; transformers modeling_deepseek_v3.py
    DeepseekV3Attention.forward (q_a_proj → q_a_layernorm → q_b_proj; kv_a_proj_with_mqa →
    kv_a_layernorm → kv_b_proj; k_pe broadcast to all heads; o_proj); Megatron-core
    multi_latent_attention.py (down projections duplicated over TP, up projections column-parallel).
    """
    a, h = model.num_attention_heads, model.hidden_size
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    up, qkv, core = ("mla_up_proj",), "qkv_linear", "core_attn"
    tensors = [SavedTensor(name="attention.down_proj_input", elements_per_token=h, split="sp",
                           modules=("layernorm",), offload=qkv)]
    if model.q_lora_rank:
        tensors += _norm("attention.q_a_norm", model.q_lora_rank, framework, offload=qkv)
        tensors.append(SavedTensor(name="attention.q_b_input", elements_per_token=model.q_lora_rank, split="sp",
                                   modules=up, offload=qkv))
    tensors += _norm("attention.kv_a_norm", model.kv_lora_rank, framework, offload=qkv)
    tensors += [
        SavedTensor(name="attention.kv_b_input", elements_per_token=model.kv_lora_rank, split="sp", modules=up,
                    offload=qkv),
        SavedTensor(name="attention.q", elements_per_token=a * qk, modules=up, offload=core),
        SavedTensor(name="attention.k", elements_per_token=a * qk, modules=up, offload=core),
        SavedTensor(name="attention.v", elements_per_token=a * model.v_head_dim, modules=up, offload=core),
        SavedTensor(name="attention.softmax_lse", elements_per_token=a, dtype="fp32", modules=_CORE, offload=core),
    ]
    if framework == "torchtitan":
        tensors.append(SavedTensor(name="attention.sdpa_output", elements_per_token=a * model.v_head_dim, modules=_CORE))
    tensors.append(SavedTensor(name="attention.o_proj_input", elements_per_token=a * model.v_head_dim,
                               offload="attn_proj"))
    return tensors


def _mlp_body(prefix: str, model: ModelSpec, width: float, framework: str, tokens: float = 1,
              split: str = "tp", modules: tuple[str, ...] = ()) -> list[SavedTensor]:
    """Tensors inside an MLP after its input: activation inputs and the down-projection input.

    Source: Megatron-core mlp.py (linear_fc1 emits [gate|up] of 2·I; fused `bias_swiglu_impl`
    saves that 2·I input; linear_fc2 saves the I-wide product) and Korthikanti §4.1 (GeLU input
    8sbh and fc2 input 8sbh for I = 4h); torchtitan FeedForward `w2(F.silu(w1(x)) * w3(x))`:
    silu saves w1's output, mul saves silu's output and w3's output, w2 saves the product.
    Squared ReLU (Nemotron): relu output kept for the square, the square's output for fc2.
    """
    def t(name: str, elems: float, extra: tuple[str, ...] = ()) -> SavedTensor:
        return SavedTensor(name=f"{prefix}.{name}", elements_per_token=tokens * elems, split=split,
                           modules=modules + extra, linear_input=name == "fc2_input")
    act = ("moe_act",) if prefix == "experts" else ()  # the activation's output: fc2's input
    moe_act = "moe_act" if prefix == "experts" else ""  # its scope: the activation, which saves its input
    if not model.gated_mlp:
        return [dataclasses.replace(t("activation_input", width), offload=moe_act), t("fc2_input", width, act)]
    if framework == "torchtitan":
        return [t("gate_output", width), t("silu_output", width), t("up_output", width), t("fc2_input", width)]
    return [dataclasses.replace(t("fc1_output", 2 * width), offload=moe_act), t("fc2_input", width, act)]


def _dense_mlp(model: ModelSpec, width: int, framework: str, with_input: bool = True) -> list[SavedTensor]:
    """A dense MLP: its input (the norm output, split only by SP; a separate norm's output, dropped
    by `layernorm`, in a model with experts) then its body (split by TP; dropped by `mlp`)."""
    norm = ("layernorm",) if model.is_moe else ()
    head = [SavedTensor(name="mlp.fc1_input", elements_per_token=model.hidden_size,
                        split=_gathered_input_split(framework), modules=norm, linear_input=True)] if with_input else []
    return head + _mlp_body("mlp", model, width, framework, modules=("mlp",))


def _gathered_input_split(framework: str) -> str:
    """Split of the norm output that feeds the column-parallel projections (wq/wk/wv, w1/w3).

    Megatron / DeepSpeed (TE): `sp` — with SP the linear saves its *sharded* input and all-gathers
    it again in backward (Korthikanti §4.2.2; Megatron-core `tensor_parallel/layers.py`
    `LinearWithGradAccumulationAndAsyncCommunication` saves `input` before the gather).
    torchtitan: `none` — `PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=
    Replicate())` on `attention` / `feed_forward` all-gathers the sequence in a forward pre-hook
    (DTensor `redistribute`), and the `nn.Linear`s (ColwiseParallel, input already Replicate) save
    that gathered s·b·h tensor: whole on every TP rank. Source: torchtitan @9dec370
    torchtitan/parallelisms/parallelize_llama.py `apply_tp` (layer_plan).
    """
    return "none" if framework == "torchtitan" else "sp"


def _moe(model: ModelSpec, *, ep: int, etp: int, overload: float, framework: str) -> list[SavedTensor]:
    """Routed-expert block: router, dispatched tokens through each expert MLP, shared experts.

    Tokens: each rank contributes T local tokens (s·b/cp, /t under SP, which Megatron requires for
    MoE with TP); the EP group routes ep·T·k assignments to its ep ranks, so a balanced rank
    receives ep·T·k/ep = T·k, times `overload` on the busiest rank, times etp when expert TP
    gathers the tokens of etp ranks (each then holds 1/etp of the expert width).

    Source: Megatron-core moe/router.py (softmax/sigmoid scores in fp32, top-k), moe/moe_utils.py
    `permute`/`unpermute` (row-id map), moe/experts.py TEGroupedMLP (fc1 input, SwiGLU input 2·I, fc2
    input I per assignment), moe/shared_experts.py (dense MLP of the shared width, TP-split; Qwen2-MoE
    gate). The expert output: Megatron-LM multiplies each assignment by its router probability inside
    the activation (`weighted_bias_swiglu_impl`, which saves its input and the probs; or
    `intermediate * permuted_probs` after the activation), and every token dispatcher unpermutes
    without probs, so no h-wide expert output is saved (NVIDIA/Megatron-LM@d98e8a6
    moe/experts.py l. 943-1027, fusions/fused_bias_swiglu.py l. 266-276, moe/token_dispatcher.py
    l. 346, 891, 1460); a combine weighted after the experts (DeepSpeed-MoE's einsum with the combine
    weights, torchtitan's scores after the experts) keeps it (`experts.output`, h per assignment).
    """
    h, k = model.hidden_size, model.num_experts_per_tok
    assignments = ep * k / ep * overload * etp
    sp, moe, shared = "sp", ("moe",), ("moe", "shared_experts")
    tensors = [
        SavedTensor(name="moe.router_input", elements_per_token=h, split=sp, modules=("layernorm",)),
        SavedTensor(name="moe.router_probs", elements_per_token=model.num_experts, dtype="fp32", split=sp,
                    modules=moe),
        SavedTensor(name="moe.topk_indices", elements_per_token=k, dtype="int64", split=sp, modules=moe),
        SavedTensor(name="moe.permutation_map", elements_per_token=assignments, dtype="int32", split=sp,
                    modules=moe),
        SavedTensor(name="experts.fc1_input", elements_per_token=assignments * h, split=sp, modules=moe,
                    offload="expert_fc1", linear_input=True),
    ]
    tensors += _mlp_body("experts", model, model.moe_intermediate_size / etp, framework, tokens=assignments,
                         split=sp, modules=moe)
    if framework != "megatron":  # Megatron weights by the probs inside the activation (docstring)
        tensors.append(SavedTensor(name="experts.output", elements_per_token=assignments * h, split=sp, modules=moe))
    if model.shared_expert_intermediate_size:
        tensors += _mlp_body("shared_experts", model, model.shared_expert_intermediate_size, framework,
                             modules=shared)
        if model.shared_expert_gate:
            tensors.append(SavedTensor(name="shared_experts.gate_output", elements_per_token=1, split=sp,
                                       modules=shared))
    return tensors


def _op_sac_applies(model: ModelSpec, layer_index: int) -> bool:
    """torchtitan's op-level SAC is costed for the dense attention + MLP block it was written for."""
    return not (model.is_mla or model.parallel_attention or (model.is_moe and model.moe_layers[layer_index]))


def _block_matmuls(model: ModelSpec, fused_qkv: bool = False) -> list[SavedTensor]:
    """Outputs of every `aten.mm` of a dense block's forward, in call order (torchtitan modules).

    Source: torchtitan models/llama/model.py @9dec370: `Attention.forward` calls
    `self.wq(x), self.wk(x), self.wv(x)` then, after SDPA, `self.wo(output)`; `FeedForward.forward`
    is `self.w2(F.silu(self.w1(x)) * self.w3(x))` (w1 runs before w3). Each `nn.Linear` on a 3-D
    bf16 input lowers to one `aten.mm` on the flattened tokens. Under TP (ColwiseParallel wq/wk/wv/
    w1/w3, RowwiseParallel wo/w2, parallelize_llama.py `apply_tp`) the column-parallel outputs are
    /t; a row-parallel mm emits the partial sum over the whole gathered sequence, h wide (`none`).

    `fused_qkv` (`Layout.fused_qkv`, torchtitan from 3396a4b, 2026-06-24): one `wqkv` mm of
    (a + 2·kv)·d outputs replaces wq, wk, wv (pytorch/torchtitan@b5bcd76 torchtitan/models/common/
    attention.py `FusedQKVLinear.forward`: `self.wqkv(x).view(...)`, then `torch.split` and
    `.contiguous()` copies, which are not matmuls; models/llama3/__init__.py `fuse_qkv: bool = True`).
    Under TP its weight (n_kv, R, d, h) is column-sharded over the KV-head dim, so its output is /t.
    The MLP is unchanged (common/feed_forward.py `FeedForward.forward`, as above).
    """
    a, kv, d, h = model.num_attention_heads, model.num_key_value_heads, model.head_dim, model.hidden_size
    width = model.intermediate_size
    if fused_qkv:
        mms = [SavedTensor(name="attention.wqkv_output", elements_per_token=(a + 2 * kv) * d)]
    else:
        mms = [SavedTensor(name="attention.wq_output", elements_per_token=a * d),
               SavedTensor(name="attention.wk_output", elements_per_token=kv * d, split="kv"),
               SavedTensor(name="attention.wv_output", elements_per_token=kv * d, split="kv")]
    mms.append(SavedTensor(name="attention.wo_output", elements_per_token=h, split="none"))
    if model.gated_mlp:
        mms += [SavedTensor(name="mlp.w1_output", elements_per_token=width),
                SavedTensor(name="mlp.w3_output", elements_per_token=width)]
    else:
        mms.append(SavedTensor(name="mlp.fc1_output", elements_per_token=width))
    mms.append(SavedTensor(name="mlp.w2_output", elements_per_token=h, split="none"))
    return mms


_MM_INPUT = {"attention.wq_output": "h", "attention.wk_output": "h", "attention.wv_output": "h",
             "attention.wqkv_output": "h", "attention.wo_output": "ad", "mlp.w1_output": "h",
             "mlp.w3_output": "h", "mlp.fc1_output": "h", "mlp.w2_output": "I"}
"""Left operand width of each `_block_matmuls` mm: the block's (normed) input h, the attention
output a·d, or the MLP's inner width I."""


def _mm_weight_elements(model: ModelSpec, mm: SavedTensor) -> float:
    """Weight elements of the mm whose output is `mm` (input width x output elements per token)."""
    width = {"h": model.hidden_size, "ad": model.num_attention_heads * model.head_dim,
             "I": model.intermediate_size}[_MM_INPUT[mm.name]]
    return width * mm.elements_per_token


def op_sac_recomputed_matmuls(model: ModelSpec, layer_index: int, fused_qkv: bool = False) -> float | None:
    """Weight elements per token of the matmuls torchtitan's selective op AC re-runs in layer
    `layer_index` (the even-numbered `aten.mm` of `_block_matmuls`: Llama wk, wo, w3; with
    `fused_qkv` wo, w3), None where the op policy is not costed (`_op_sac_applies`). Source:
    `torchtitan_op_sac_tensors`."""
    if not _op_sac_applies(model, layer_index):
        return None
    return float(sum(_mm_weight_elements(model, t) for t in _block_matmuls(model, fused_qkv)[1::2]))


def op_sac_regather_consumers(model: ModelSpec, layer_index: int,
                              fused_qkv: bool = False) -> tuple[float, float] | None:
    """(attention, MLP) weight elements per token of the matmuls torchtitan's selective op AC
    re-runs that read the block's sequence-parallel all-gathered input (Llama: wk; w3; with
    `fused_qkv` none in the attention, whose wqkv output is saved; w3), None where the op policy is
    not costed (`_op_sac_applies`). Source: `torchtitan_op_sac_tensors`."""
    if not _op_sac_applies(model, layer_index):
        return None
    redo = [t for t in _block_matmuls(model, fused_qkv)[1::2] if _MM_INPUT[t.name] == "h"]
    attn, mlp = (float(sum(_mm_weight_elements(model, t) for t in redo if t.name.startswith(part)))
                 for part in ("attention.", "mlp."))
    return attn, mlp


def torchtitan_op_sac_tensors(model: ModelSpec, *, tp: int = 1, sequence_parallel: bool = False,
                              fused_qkv: bool = False) -> list[SavedTensor]:
    """What one block keeps under torchtitan's selective *op* AC (`mode = "selective"`,
    `selective_ac_option = "op"`), for a dense attention + MLP block.

    Source: pytorch/torchtitan @9dec370 (2024-12-26) torchtitan/parallelisms/parallelize_llama.py,
    `_apply_ac_to_transformer_block` and `_save_list`: the block runs under
    `ptd_checkpoint_wrapper(..., context_fn=create_selective_checkpoint_contexts(policy))`; the policy
    returns MUST_SAVE for ops in `_save_list` = {aten.mm, aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention, _c10d_functional.reduce_scatter_tensor, aten.abs,
    aten.max}, *except* every second `aten.mm` (`meta["forward_mm_count"] % 2 == 0` -> recompute),
    and PREFER_RECOMPUTE for everything else (norms, RoPE, repeat_kv, silu, mul, adds). `meta` is
    fresh per block (a new context per checkpoint call), so the count restarts at each layer. The
    non-reentrant checkpoint keeps the block's input for the recompute. train_configs/llama3_8b.toml
    selects `selective_ac_option = 'op'` (config_manager.py's own default is "2", every 2nd layer).

    Saved per token (Llama: mm order wq, wk, wv, wo, w1, w3, w2 -> the 1st, 3rd, 5th, 7th are kept):
    - `block_input` 2h (sp): the checkpointed function's argument;
    - `attention.wq_output` 2·a·d (tp), `attention.wv_output` 2·kv·d (kv), `mlp.w1_output` 2·I (tp),
      `mlp.w2_output` 2h (whole: a row-parallel partial sum) — the odd-numbered mm outputs;
    - `attention.sdpa_output` 2·a·d (tp) and `attention.softmax_lse` 4·a (fp32, tp): the outputs of
      the flash/efficient SDPA op (its RNG seed/offset scalars are ignored);
    - with TP + SP: `attention.reduce_scatter_output` and `mlp.reduce_scatter_output`, 2h/t each, the
      `reduce_scatter_tensor` outputs of the two row-parallel layers.
    `aten.abs`/`aten.max` outputs exist only under Float8 scaling and are per-tensor scalars: ignored.
    Llama 3.1 8B: 2·(4096 + 4096 + 1024 + 14336 + 4096 + 4096) + 4·32 = 63,616 B per token.

    With `fused_qkv` (current torchtitan, `_block_matmuls`; the policy is unchanged at
    pytorch/torchtitan@b5bcd76 torchtitan/distributed/activation_checkpoint.py l. 243-276
    `_get_custom_policy`: the mm count restarts per block, every second mm recomputed, l. 31-93
    `_get_default_save_ops` the compute and reduce-scatter / all-to-all ops saved) the mm order is
    wqkv, wo, w1, w3, w2: the 1st, 3rd, 5th are kept, so `attention.wqkv_output` 2·(a + 2·kv)·d (tp)
    replaces wq's and wv's outputs, and wo, w3 are re-run. Llama 3.1 8B:
    2·(4096 + 6144 + 4096 + 14336 + 4096) + 4·32 = 65,664 B per token.
    """
    saved = [SavedTensor(name="block_input", elements_per_token=model.hidden_size, split="sp")]
    kept = _block_matmuls(model, fused_qkv)[0::2]
    saved += [t for t in kept if t.name.startswith("attention.")]
    saved += [SavedTensor(name="attention.sdpa_output", elements_per_token=model.num_attention_heads * model.head_dim),
              SavedTensor(name="attention.softmax_lse", elements_per_token=model.num_attention_heads, dtype="fp32")]
    saved += [t for t in kept if not t.name.startswith("attention.")]
    if tp > 1 and sequence_parallel:
        saved += [SavedTensor(name=f"{part}.reduce_scatter_output", elements_per_token=model.hidden_size, split="sp")
                  for part in ("attention", "mlp")]
    return saved


def layer_backward_working_set_bytes(model: ModelSpec, layer_index: int, *, seq_len: int, micro_batch_size: int,
                                     tp: int, cp: int = 1, sequence_parallel: bool = False, ep: int = 1,
                                     moe_overload_factor: float = 1.0, dtype_bytes: int = 2, etp: int = 1,
                                     framework: str = "megatron") -> int:
    """Bytes of one fully recomputed layer at the peak of its backward, per micro-batch, per GPU.

    megatron / deepspeed: the layer's saved set without recompute (`layer_activation_bytes(...,
    recompute="none")`), the convention the memory model has always used for full recompute.

    torchtitan (`ptd_checkpoint_wrapper`, non-reentrant `torch.utils.checkpoint`): the first unpack
    in the block's backward recomputes the whole forward, so every tensor of the `none` list is
    alive (under TP + SP including the all-gathered norm outputs, s·b·h each, see
    `_gathered_input_split`), plus, for a dense block, the gradients alive at the peak of the
    SwiGLU backward, the first op to run (T tokens, I the MLP width, t the TP degree):
    - the block's output gradient, 2h per token (/t under SP);
    - then either (a) w2's backward: under TP + SP the output gradient all-gathered over the
      sequence (the backward of the Shard(1) reduce-scatter is an all-gather: 2h, whole; without
      SP it is the output gradient itself) and w2's input gradient 2·I/t — every saved tensor
      still alive; or (b) the `*` backward after w2's node has
      released the product (2·I/t): its input gradient plus the gradients of silu's and w3's
      outputs, 3 × 2·I/t − 2·I/t. The peak is max(a, b).
    Source: torchtitan @9dec370 parallelize_llama.py (`_apply_ac_to_transformer_block`: `mode =
    "full"` -> `ptd_checkpoint_wrapper(module, preserve_rng_state=False)`), models/llama/model.py
    `FeedForward.forward` = `w2(F.silu(w1(x)) * w3(x))`; PyTorch autograd releases a node's saved
    tensors and input gradients once the node has run. MoE / MLA / parallel blocks: the `none`
    list only.
    """
    kw = dict(seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp, sequence_parallel=sequence_parallel,
              ep=ep, moe_overload_factor=moe_overload_factor, dtype_bytes=dtype_bytes, etp=etp, framework=framework)
    saved = layer_activation_bytes(model, layer_index, recompute="none", **kw).total
    if framework != "torchtitan" or not _op_sac_applies(model, layer_index):
        return saved
    tokens = seq_len * micro_batch_size // cp
    h, width = model.hidden_size, model.intermediate_size
    output_grad = math.ceil(dtype_bytes * tokens * h / (tp if sequence_parallel else 1))
    input_grad = math.ceil(dtype_bytes * tokens * width / tp)
    gathered = dtype_bytes * tokens * h if tp > 1 and sequence_parallel else 0  # else it is `output_grad` itself
    w2_backward = gathered + input_grad
    mul_backward = 2 * input_grad if model.gated_mlp else 0
    return saved + output_grad + max(w2_backward, mul_backward)


def _block_kind(model: ModelSpec, layer_index: int, flash: bool) -> str:
    moe = model.is_moe and model.moe_layers[layer_index]
    if model.is_mla:
        return "mla+moe" if moe else "mla"
    if moe:
        return "moe"
    if model.parallel_attention:
        return "parallel"
    return "dense" if flash or model.model_type not in NON_FLASH_MODEL_TYPES else "gpt"


def output_layer_activation_bytes(model: ModelSpec, *, seq_len: int, micro_batch_size: int, tp: int, cp: int = 1,
                                  sequence_parallel: bool = False, framework: str = "megatron",
                                  loss_chunks: int = 1) -> int:
    """Bytes the last stage saves for the final norm, the LM head and the loss, per micro-batch.

    megatron / deepspeed: final norm input 2·s·b·h + LM-head input 2·s·b·h (both /t with SP) + fp32
    logits 4·s·b·⌈V/t⌉ kept by the cross-entropy (V = padded vocabulary), all /cp. With SP this is
    Korthikanti §4.3's 4·s·b·h/t·(1 + v/h).
    Source: Korthikanti et al. 2022 §4.3; Megatron-LM megatron/core/tensor_parallel/cross_entropy.py
    (`VocabParallelCrossEntropy.calculate_logits_max` casts the vocab-parallel logits to fp32; the
    softmax computed in place on that fp32 copy is what `save_for_backward` keeps, and its backward
    writes the gradient into that same buffer). The bf16 logits (2·s·b·V/t) exist transiently during
    the loss forward; they are not saved.

    torchtitan (eager `RMSNorm`, `nn.Linear` head, `F.cross_entropy` on `.float()` logits): final norm
    keeps its fp32 input 4h and the bf16 normalised tensor 2h (/t with SP); the head keeps its bf16
    input 2h, whole on every TP rank (ColwiseParallel all-gathers the Shard(1) sequence first); the
    cross-entropy keeps the fp32 log-softmax output 4·⌈V/t⌉ per token (`_log_softmax` saves its
    result; `nll_loss` saves the same tensor). The bf16 logits and their fp32 copy are freed before
    backward (train.py `del pred`; `_to_copy` saves nothing); see `loss_working_set_bytes`.
    Source: torchtitan @9dec370 train.py `loss_fn` (`cross_entropy(pred.flatten(0, 1).float(), ...)`),
    torchtitan/models/norms.py `RMSNorm`, parallelize_llama.py `apply_tp` (`"output": ColwiseParallel(
    input_layouts=Shard(1), ...)`); ATen `cross_entropy_loss` = `nll_loss_nd(log_softmax(x))`.

    torchtitan's chunked loss (`loss_chunks` > 1, `ChunkedLossWrapper`, pytorch/torchtitan b5bcd76
    torchtitan/components/loss.py; every model preset's loss there, `num_chunks` default 8): the
    model stops before the head (`_skip_lm_head`), and the loss runs the head, the cross-entropy and
    their backward chunk by chunk inside the forward, gathering the head input's gradient in an fp32
    buffer (`GradAccumulator`) that leaves as a bf16 copy saved for the backward
    (`_DecoderOutputGradientBackProp` saves `accumulated_grad.to(hidden dtype)`): the final norm's
    6h (/t with SP) + that 2h gradient (the head input is TP-replicated, whole h) per token; no
    logits are kept. See `loss_working_set_bytes`.
    """
    _check_common(seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp)
    tokens = seq_len * micro_batch_size // cp
    sp = tp if sequence_parallel else 1
    vocab = -(-model.padded_vocab_size // tp)
    if framework == "torchtitan":
        norm = math.ceil(6 * tokens * model.hidden_size / sp)
        kept = 0 if loss_chunks > 1 else 4 * tokens * vocab  # chunked: the head input's saved gradient
        return norm + 2 * tokens * model.hidden_size + kept
    return math.ceil(2 * 2 * tokens * model.hidden_size / sp) + 4 * tokens * vocab


def loss_working_set_bytes(model: ModelSpec, *, seq_len: int, micro_batch_size: int, tp: int, cp: int = 1,
                           framework: str = "megatron", loss_chunks: int = 1) -> int:
    """Bytes the loss backward needs beyond what `output_layer_activation_bytes` keeps, per micro-batch.

    torchtitan, TP = 1 (plain `F.cross_entropy` on fp32 logits): 10 B per logit element, T·⌈V/t⌉ elements
    with T = s·b/cp tokens. At the log-softmax backward these coexist with the saved fp32 log-softmax
    output (4 B, already counted): `nll_loss_backward`'s dense fp32 gradient (4 B: ATen allocates
    `zeros_like(self)` and scatters −1/N), `_log_softmax_backward_data`'s fp32 result (4 B), and the
    block of the bf16 logits (2 B). The bf16 logits tensor is dead (`del pred`), but torchtitan
    reports the caching allocator's `reserved_bytes.all.peak` (torchtitan/metrics.py
    `DeviceMemoryMonitor.get_peak_stats`, logged as "memory: … GiB" and `memory/max_reserved(GiB)`):
    a freed block stays reserved, and it cannot serve the two 4 B/element requests that follow (each
    twice its size), whereas the freed fp32 copy's block is reused, exactly, by the nll gradient.
    The forward peak of the loss (bf16 logits 2 + fp32 copy 4 + log-softmax 4 = 10 B) is smaller
    than this backward one (4 saved + 10 = 14 B).

    megatron / deepspeed: 2 B per local logit element, T·⌈V/t⌉. Every cross-entropy Megatron-LM
    runs keeps one fp32 T·⌈V/t⌉ buffer between forward and backward and hands the output layer a
    bf16 gradient made from it while it is still held: the unfused `_VocabParallelCrossEntropy`
    (core/tensor_parallel/cross_entropy.py: `calculate_logits_max` copies the bf16 logits to fp32,
    softmax and gradient in place in that copy; its backward returns it in fp32 and autograd casts
    it to the logits' bf16 before the node releases its saved tensors), the native fusion
    (`Layout.cross_entropy_fusion` native; core/fusions/fused_cross_entropy.py: the same fp32 buffer,
    `calculate_gradients` ends with `grad_input.to(torch.bfloat16)`) and Transformer Engine's
    `parallel_cross_entropy` (cross_entropy_fusion te; transformer_engine/pytorch/
    cross_entropy.py @d0067d0: the forward writes the fp32 gradient into `torch.empty_like(_input,
    dtype=torch.float32)` and saves it; the bf16 logits are freed). The forward holds the same 6 B
    (bf16 logits + fp32 copy) before the bf16 logits are dropped. So fusion changes kernels, not
    bytes: 4 B kept (`output_layer_activation_bytes`) + 2 B here for all three. Source:
    NVIDIA/Megatron-LM@d98e8a6 (files above; models/common/language_module/language_module.py
    `compute_language_model_loss` picks among them); PyTorch autograd `validate_outputs` (casts a
    gradient to its input's dtype).

    torchtitan with TP > 1 (`loss_parallel`, on by default: parallel_dims.py `loss_parallel_enabled
    = tp > 1 and enable_loss_parallel`; train.py enters `torch.distributed.tensor.parallel.
    loss_parallel()`; the head's output stays a vocab-sharded DTensor, `use_local_output=False`):
    14 B per local logit element. The handlers of torch/distributed/tensor/parallel/loss.py replace
    the ATen kernels on the local shard (T·⌈V/t⌉ fp32 elements):
    - forward `_log_softmax`: `shifted = x - all_reduce(amax(x))` (4 B), `exp(shifted)` (4 B,
      freed after its `sum`), `result = shifted - log(all_reduce(sum))` (4 B, reuses exp's block);
      with the bf16 logits 2 + the fp32 copy 4 that is 14 B allocated, 14 B reserved;
    - backward `_nll_loss_and_log_softmax_backward` (nll and log-softmax backward fused; the
      `_log_softmax_backward_data` handler only returns `grad_output.to(input_dtype)`, no copy in
      fp32): `grad_input = zeros_like(x)` (4 B, reuses the freed fp32 copy's block), then
      `(grad_input + torch.exp(x)) * grad_output`: `exp(x)` (4 B, reuses `shifted`'s block), the
      sum (4 B, a new block: the only cached block left is the 2 B bf16 one), the product (4 B,
      reuses exp's block). Alive with the saved output: 4 + 4 + 4 + 4 = 16 B allocated; reserved
      18 B with the cached bf16 block — 14 B beyond the saved 4 B.
    Source: torchtitan @9dec370 train.py (`loss = loss_fn(pred, labels); del pred; loss.backward()`),
    torchtitan/utils.py `get_train_context`; PyTorch torch/distributed/tensor/parallel/loss.py
    (`_log_softmax`, `_log_softmax_backward_handler`, `_nll_loss_and_log_softmax_backward`; the
    file as stored in the index, a later revision than the benchmark's torch 1963fc8 of 2024-12-23).

    torchtitan chunked (`loss_chunks` = N > 1, `ChunkedLossWrapper` at b5bcd76, see
    `output_layer_activation_bytes`): inside the loss call, with every layer's activations alive,
    the model's output (the head input, 2h per token, whole under TP), its detached contiguous
    chunks (`h_chunks`, 2h) and the fp32 gradient buffer (4h) exist together; on top, one chunk's
    head + cross-entropy as above on T/N tokens (4 B saved + 14 B, or 10 B at TP = 1, per local
    logit element) and its head-input gradient (2h). At the end the bf16 copy of the buffer (2h,
    counted as saved) joins them: the larger of 2h + 2h + 4h - 2h + (T/N)(⌈V/t⌉(4 + 14|10) + 2h)
    and 2h + 2h + 4h per token.

    Source (both): ATen LossNLL.cpp (`cross_entropy_loss` -> `nll_loss_nd(log_softmax(self))`),
    derivatives.yaml (`_log_softmax` saves `result`; `nll_loss_forward` saves `self`), PyTorch
    CUDACachingAllocator (freed blocks are cached, best-fit reuse, released only on an allocation
    failure; a block is not grown — torchtitan's run_llama_train.sh sets `expandable_segments:True`,
    under which a free block at a segment's end can be extended, which this rule ignores);
    torchtitan b5bcd76 torchtitan/components/loss.py (`ChunkedLossWrapper`, `GradAccumulator`).
    """
    _check_common(seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp)
    tokens = seq_len * micro_batch_size // cp
    vocab = -(-model.padded_vocab_size // tp)
    if framework != "torchtitan":
        return 2 * tokens * vocab
    per_element = (4 + 4 + 4 + 2) if tp > 1 else (4 + 4 + 2)
    if loss_chunks <= 1:
        return per_element * tokens * vocab
    h, chunk = model.hidden_size, -(-tokens // loss_chunks)
    return max(6 * h * tokens + chunk * (vocab * (4 + per_element) + 2 * h), 8 * h * tokens)


def embedding_activation_bytes(model: ModelSpec, *, seq_len: int, micro_batch_size: int, tp: int, cp: int = 1,
                               sequence_parallel: bool = False) -> int:
    """Bytes the first stage saves for the embedding, per micro-batch.

    The lookup's backward needs only the token ids (int64, ignored like other per-token scalars)
    and its output is the first layer's input, counted there; what remains is the embedding
    dropout mask, s·b·h bytes (/t with SP, /cp), for families trained with dropout, else 0.

    Source: Korthikanti et al. 2022 §4.3 ("dropout for the positional embedding ... s·b·h·p/t" for
    the p in-flight micro-batches of the first stage under SP; here one micro-batch).
    """
    _check_common(seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp)
    if model.model_type not in DROPOUT_MODEL_TYPES:
        return 0
    mask = seq_len * micro_batch_size // cp * model.hidden_size
    return math.ceil(mask / tp) if sequence_parallel else mask


def _check_common(*, seq_len: int, micro_batch_size: int, tp: int, cp: int) -> None:
    for key, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size), ("tp", tp), ("cp", cp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"value {value!r} must be a positive integer", key=key)
    if seq_len % cp:
        raise SpecError(f"value {seq_len} must be divisible by cp={cp} (context parallelism splits the sequence)",
                        key="seq_len")


def _check(model: ModelSpec, layer_index: int, *, seq_len: int, micro_batch_size: int, tp: int, cp: int,
           recompute: str, ep: int, etp: int, moe_overload_factor: float, dtype_bytes: int, framework: str) -> None:
    _check_common(seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp)
    if not 0 <= layer_index < model.num_hidden_layers:
        raise SpecError(f"value {layer_index} must be in 0..{model.num_hidden_layers - 1}", key="layer_index")
    if recompute not in RECOMPUTE_MODES:
        raise SpecError(f"value {recompute!r} must be one of {', '.join(RECOMPUTE_MODES)}", key="recompute")
    if framework not in FRAMEWORKS:
        raise SpecError(f"value {framework!r} must be one of {', '.join(FRAMEWORKS)}", key="framework")
    for key, value in (("ep", ep), ("etp", etp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"value {value!r} must be a positive integer", key=key)
    if not moe_overload_factor >= 1.0:
        raise SpecError(f"value {moe_overload_factor!r} must be >= 1.0 (busiest rank / balanced load)",
                        key="moe_overload_factor")
    if dtype_bytes not in (1, 2, 4):
        raise SpecError(f"value {dtype_bytes!r} must be 1 (fp8), 2 (bf16/fp16) or 4 (fp32)", key="dtype_bytes")
