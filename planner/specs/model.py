"""Model specification: one frozen dataclass, normalised from a Hugging Face `config.json`.

A model comes from a catalog name (`models/<name>.yaml`), a YAML file, a Hugging Face `config.json`,
or a directory holding one. Catalog YAML files hold the Hugging Face config fields of the model plus
`name` and `source`; so the same loader reads both. Field names follow the Hugging Face configs.

Supported `model_type` values and what they imply about the block (Source: the matching
`transformers/models/<type>/modeling_<type>.py`):

| model_type | block |
|---|---|
| llama, mistral | RMSNorm, RoPE, GQA, SwiGLU MLP, optional attention/MLP bias |
| qwen2 | llama + q/k/v bias |
| qwen3 | llama + per-head RMSNorm on q and k (`q_norm`, `k_norm`) |
| mixtral | llama attention + routed SwiGLU experts (`num_local_experts`), router without bias |
| qwen2_moe | qwen2 attention + routed experts + one gated shared expert |
| qwen3_moe | qwen3 attention + routed experts (`decoder_sparse_step`, `mlp_only_layers`) |
| deepseek_v3 | MLA (q/kv LoRA ranks, decoupled RoPE key) + routed and shared experts, first_k_dense_replace |
| kimi_k2 | deepseek_v3 (Moonshot Kimi K2 ships `architectures: [DeepseekV3ForCausalLM]`; same fields, same builder) |
| glm4_moe | GQA with q/k/v bias (o_proj bias-free), partial RoPE, optional per-head q/k RMSNorm (`use_qk_norm`), first_k_dense_replace dense layers, routed + shared experts, sigmoid router with e_score_correction_bias |
| gpt_oss | GQA with biases and attention sinks, alternating sliding/full attention, MoE with biases |
| gpt, gpt2, opt, bloom | classic GPT: LayerNorm with bias, GELU 4h MLP with bias, learned/ALiBi positions, tied (OPT: see below) |
| falcon | parallel attention + MLP, fused multi-query/grouped QKV, LayerNorm, GELU 4h MLP |
| nemotron | LayerNorm(1p) with bias, GQA, non-gated squared-ReLU MLP, untied |

OPT: `word_embed_proj_dim` != hidden_size (opt-350m) adds project_in/project_out and narrows the
embedding and tied LM head; `do_layer_norm_before: false` (post-LN) drops the final layer norm;
`enable_bias` sets the linear biases (Source: transformers modeling_opt.py OPTDecoder).

Keys read (anything else is ignored; `null` means absent):

| model_type | keys |
|---|---|
| all | model_type, name, source, hf_id, quantization_config, fp8_training, rope_theta, rope_scaling, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, vocab_size, padded_vocab_size, max_position_embeddings, tie_word_embeddings |
| llama, mistral, qwen2, qwen3, nemotron | intermediate_size, hidden_act, attention_bias, mlp_bias, sliding_window, use_sliding_window (qwen), layer_types |
| mixtral, qwen2_moe, qwen3_moe | the above + num_local_experts / num_experts, num_experts_per_tok, moe_intermediate_size, decoder_sparse_step, mlp_only_layers, shared_expert_intermediate_size (qwen2_moe) |
| deepseek_v3, kimi_k2 | intermediate_size, hidden_act, attention_bias, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace, moe_layer_freq, num_nextn_predict_layers, norm_topk_prob, n_group, topk_group |
| glm4_moe | head_dim (GLM-4.5: 128, not hidden_size / heads), intermediate_size, hidden_act, attention_bias, use_qk_norm, partial_rotary_factor, n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace, norm_topk_prob, num_nextn_predict_layers, n_group, topk_group |
| gpt_oss | the llama keys + num_local_experts, num_experts_per_tok / experts_per_token |
| gpt, gpt2, opt, bloom | n_embd, n_layer, n_head, n_positions, n_inner, ffn_dim, seq_length (bloom), activation_function; opt: word_embed_proj_dim, do_layer_norm_before, _remove_final_layer_norm, enable_bias, layer_norm_elementwise_affine |
| falcon | num_kv_heads / n_head_kv, multi_query, new_decoder_architecture, parallel_attn, bias, alibi, ffn_hidden_size |

Checks on every key read: integers are ints (not bools, floats or strings) within
`_INT_RULES` (sizes >= 1, at most MAX_LAYERS / MAX_WIDTH / MAX_COUNT; only n_shared_experts,
first_k_dense_replace, num_nextn_predict_layers and sliding_window may be 0); flags are strictly
true/false; partial_rotary_factor is a number in (0, 1] (it sets which head channels RoPE rotates,
not a size: no count, FLOP or cache byte depends on it; it is kept in `extra`); norm_topk_prob
(router weight normalisation) is read for its type only, for the same reason; names and
activations are non-empty strings; layer lists hold valid indices or
`full_attention`/`sliding_attention`. Two names of one quantity (n_embd and hidden_size,
experts_per_token and num_experts_per_tok) must agree. A zero or a wrong type is an error naming
the key the file used, never replaced by a default.

quantization_config (the checkpoint's own weight format; what vLLM and SGLang load when no
quantization flag is given: vLLM `vllm/config/model.py` ModelConfig._verify_quantization reads the
config's quantization_config quant_method; SGLang `srt/configs/model_config.py`
_verify_quantization likewise) is read into `weight_format` (`QUANT_METHODS`): quant_method `fp8`
with weight_block_size [128, 128] is `fp8-block`, `fp8` without a block size is `fp8` (one scale
per tensor), `mxfp4` is `mxfp4` (gpt-oss: routed experts only), `awq` / `gptq` with bits 4 and
group_size 128 are `int4` (`INT4_METHODS`). Any other quant_method (compressed-tensors, modelopt,
bitsandbytes, awq / gptq at other bits or group sizes, fp8 with another block size, ...) is not
modelled: `weight_format` stays None and the method is kept in `extra['quant_method']`; serving
(serve-plan, check of engine launches) refuses such a checkpoint (`require_modelled_checkpoint`), and
training ignores it. It must be a mapping with a string quant_method.
Training never reads it (a training run keeps bf16 master weights whatever the release format).
fp8_training ({recipe, source}: not a Hugging Face key) is the fp8 scaling recipe the model was
pre-trained with, where published: the default fp8 recipe of its Megatron-LM plans
(`placement.precision.published_fp8_recipe`).

Unknown keys: a Hugging Face config pasted as YAML carries keys the planner does not need
(attn_pdrop, summary_type, init_std, ...); they are ignored, as in `config.json`. In a YAML file
(written by hand) an unknown key whose difflib ratio to a known key is >= 0.8 is taken for a typo
and rejected with the close matches (`num_key_value_head` -> `num_key_value_heads`); `config.json`
files are machine-written and never checked for typos.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path


from planner.errors import SpecError, shown
from planner.specs import files

CATALOG_DIR = files.data_dir("models")

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3",
    "kimi_k2", "glm4_moe", "gpt_oss", "gpt", "gpt2", "opt", "bloom", "falcon", "nemotron",
)
_CLASSIC = ("gpt", "gpt2", "opt", "bloom")
_FIRST_DENSE_TYPES = ("deepseek_v3", "kimi_k2", "glm4_moe")
"""Families whose leading dense layers are set by `first_k_dense_replace`."""

HF_ACTIVATIONS = (
    "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh",
    "gelu_python_tanh", "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish",
    "quick_gelu", "relu", "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh",
    "prelu", "xielu",
)
"""Values `hidden_act` (`activation_function` in GPT-2 / OPT configs) may take: the keys of
transformers' activation registry. Source: transformers `src/transformers/activations.py`
(`ACT2CLS`); a config naming anything else does not load in transformers either."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A transformer decoder, normalised across families. Sizes are counts, not bytes."""

    name: str
    """Catalog name or file stem."""
    model_type: str
    """Hugging Face `model_type` (one of SUPPORTED_MODEL_TYPES)."""
    hidden_size: int
    """Residual stream width h."""
    num_hidden_layers: int
    """Decoder blocks L (the MTP module of DeepSeek-V3 is not one of them)."""
    num_attention_heads: int
    """Query heads a."""
    num_key_value_heads: int
    """Key/value heads (GQA groups); equals `num_attention_heads` for MHA."""
    head_dim: int
    """Per-head width d (for MLA: qk_nope_head_dim + qk_rope_head_dim)."""
    intermediate_size: int
    """Dense MLP width (per projection)."""
    vocab_size: int
    """Tokenizer vocabulary as given in the config."""
    padded_vocab_size: int
    """Embedding rows actually allocated (BLOOM: 250,880 for 250,680); >= vocab_size."""
    max_position_embeddings: int
    """Longest context the model was built for, tokens."""
    tie_word_embeddings: bool
    """LM head shares the input embedding matrix."""
    source: str = ""
    """Where the numbers come from."""

    norm_type: str = "rmsnorm"
    """`rmsnorm` (weight only) or `layernorm` (weight + bias)."""
    gated_mlp: bool = True
    """SwiGLU-style gate+up+down (3 matrices) vs up+down (2 matrices)."""
    hidden_act: str = "silu"
    """Activation function name as in the config."""
    attention_bias: bool = False
    """Bias on the q/k/v projections."""
    attention_out_bias: bool = False
    """Bias on the attention output projection."""
    mlp_bias: bool = False
    """Bias on the MLP projections."""
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys (Qwen3)."""
    parallel_attention: bool = False
    """Attention and MLP read the same input (Falcon, GPT-J)."""
    norms_per_layer: int = 2
    """Norm modules per block."""
    position_embedding_type: str = "rope"
    """`rope`, `learned` or `alibi`."""
    position_embedding_rows: int = 0
    """Rows of a learned position table (OPT allocates max_position_embeddings + 2)."""
    embedding_norm: bool = False
    """LayerNorm right after the word embedding (BLOOM)."""
    word_embed_proj_dim: int = 0
    """Width of the word embedding and of the tied LM head when it differs from hidden_size (OPT-350m:
    512), with project_in/project_out matrices to and from hidden_size; 0: same as hidden_size."""
    final_norm: bool = True
    """A norm after the last block (OPT: only with do_layer_norm_before, i.e. pre-LN)."""

    num_experts: int = 0
    """Routed experts per MoE layer (0: dense model)."""
    num_experts_per_tok: int = 0
    """Routed experts each token visits (top-k)."""
    moe_intermediate_size: int = 0
    """Width of one routed expert."""
    n_group: int = 0
    """Expert groups of group-limited routing (DeepSeek-V3 `n_group`: the router picks
    `topk_group` groups, then the top-k experts inside them); 0: no groups."""
    topk_group: int = 0
    """Groups a token's experts may come from (`n_group`); 0: no limit."""
    n_shared_experts: int = 0
    """Shared experts per MoE layer (DeepSeek; Qwen2-MoE has 1)."""
    shared_expert_intermediate_size: int = 0
    """Width of the shared expert block (DeepSeek: n_shared_experts x moe_intermediate_size)."""
    shared_expert_gate: bool = False
    """Sigmoid gate h->1 on the shared expert (Qwen2-MoE)."""
    router_bias: bool = False
    """Router has a bias (gpt-oss) or an expert-score correction bias (DeepSeek-V3), E values."""
    expert_bias: bool = False
    """Expert projections have biases (gpt-oss)."""
    moe_layers: tuple[bool, ...] = ()
    """Per layer: True where the MLP is a routed-expert block."""

    q_lora_rank: int = 0
    """MLA query down-projection rank (0: plain q_proj)."""
    kv_lora_rank: int = 0
    """MLA compressed KV latent width (0: not MLA)."""
    qk_rope_head_dim: int = 0
    """MLA decoupled RoPE key width, shared by all heads."""
    qk_nope_head_dim: int = 0
    """MLA per-head non-RoPE query/key width."""
    v_head_dim: int = 0
    """MLA per-head value width."""

    sliding_window: int = 0
    """Window of sliding-attention layers, tokens (0: none)."""
    layer_types: tuple[str, ...] = ()
    """Per layer: `full_attention` or `sliding_attention`."""
    attention_sinks: bool = False
    """One learned sink logit per head per layer (gpt-oss)."""
    num_nextn_predict_layers: int = 0
    """Multi-token-prediction modules (DeepSeek-V3), excluded from counts unless asked."""
    weight_format: str | None = None
    """The checkpoint's weight format, a key of `cost.serving.WEIGHT_FORMATS` read from config.json
    `quantization_config` (module docstring); None: unquantized, or a method not modelled."""
    extra: dict = field(default_factory=dict, compare=False, repr=False)
    """Descriptive fields kept for output (rope_theta, rope_scaling, ...)."""

    @property
    def is_moe(self) -> bool:
        """The model has routed experts."""
        return self.num_experts > 0

    @property
    def embedding_width(self) -> int:
        """Columns of the word embedding (and tied LM head): word_embed_proj_dim, else hidden_size."""
        return self.word_embed_proj_dim or self.hidden_size

    @property
    def is_mla(self) -> bool:
        """Attention is multi-head latent attention (DeepSeek)."""
        return self.kv_lora_rank > 0

    @property
    def family(self) -> str:
        """Short family label for tables."""
        return self.model_type


VLLM_UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
"""RoPE scaling types whose `factor` vLLM does not apply to max_position_embeddings (the checkpoint's
max_position_embeddings is already the extended length). Source: vllm-project/vllm 0.33.0 (g4ba787ec9)
`vllm/config/model.py` _get_and_verify_max_len."""


UNSCALED_OVERRIDE = {
    "vllm": "it takes max_position_embeddings as the extended length; a longer context needs "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or a larger max_position_embeddings",
    "sglang": "not when rope_scaling has original_max_position_embeddings or rope_type llama3; a longer "
              "context needs SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 or a larger "
              "max_position_embeddings",
}
"""Why each engine leaves a rope_scaling factor unapplied, and the engine's own override, for messages.
Source: vLLM 0.33.0 (g4ba787ec9) `vllm/config/model.py` lines 2610-2634 (the comment 'YaRN variants leave
max_position_embeddings already scaled') and 2657-2684 (VLLM_ALLOW_LONG_MAX_MODEL_LEN); SGLang 0.5.23
`srt/utils/hf_transformers/common.py` lines 677-693 and `srt/configs/model_config.py` lines 1295-1315
(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN)."""


def engine_context_length(spec: ModelSpec, engine: str) -> int:
    """Longest context (tokens) `engine` derives from the model's config: its default max_model_len /
    context_length and the most it accepts without an override.

    - vllm: max_position_embeddings x rope_scaling `factor`, except for the rope types in
      VLLM_UNSCALED_ROPE_TYPES, a type without a factor (default), and gemma3 models
      (vLLM 0.33.0 `vllm/config/model.py` _get_and_verify_max_len);
    - sglang: max_position_embeddings x rope_scaling `factor` unless rope_scaling holds
      original_max_position_embeddings or rope_type is llama3 (SGLang 0.5.23
      `srt/utils/hf_transformers/common.py` get_context_length);
    - anything else (trtllm): max_position_embeddings (its rule not read here).
    The rope type is rope_scaling's `rope_type`, else its legacy `type` (both engines' config loaders
    copy one to the other). Examples: linear factor 4 on 4,096 positions -> 16,384 in both; yarn factor
    4 with original_max_position_embeddings 32,768 on 40,960 positions (Qwen3's YaRN recipe) -> 40,960 in
    both: vLLM 0.33.0 takes a yarn checkpoint's max_position_embeddings as already extended (`vllm/config/
    model.py` lines 2610-2620) and never reads original_max_position_embeddings for the limit (only longrope's
    default, lines 2643-2649), so original x factor = 131,072 needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or a larger
    max_position_embeddings (lines 2657-2684); SGLang 0.5.23 uses factor 1 when original_max_position_embeddings
    is present (`common.py` lines 680-686). Messages say so (`UNSCALED_OVERRIDE`).
    """
    base = spec.max_position_embeddings
    scaling = spec.extra.get("rope_scaling") or {}
    factor = scaling.get("factor")
    if not scaling or not isinstance(factor, (int, float)) or isinstance(factor, bool):
        return base
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if engine == "vllm" and rope_type not in VLLM_UNSCALED_ROPE_TYPES and "gemma3" not in spec.model_type:
        return int(base * factor)
    if engine == "sglang" and "original_max_position_embeddings" not in scaling and rope_type != "llama3":
        return int(base * factor)
    return base


def context_length_words(spec: ModelSpec, engine: str) -> str:
    """`engine_context_length` in words for messages: `max_position_embeddings 40960`, or with the
    factor the engine applies, `max_position_embeddings 4096 x rope_scaling factor 4 = 16384`."""
    base, derived = spec.max_position_embeddings, engine_context_length(spec, engine)
    scaling = spec.extra.get("rope_scaling") or {}
    factor = scaling.get("factor")
    if derived == base and isinstance(factor, (int, float)) and factor != 1 and engine in UNSCALED_OVERRIDE:
        rope_type = scaling.get("rope_type", scaling.get("type"))
        return (f"max_position_embeddings {base}, to which {engine} does not apply rope_scaling {rope_type} factor "
                f"{factor:g}: {UNSCALED_OVERRIDE[engine]}")
    if derived == base:
        return f"max_position_embeddings {base}"
    return f"max_position_embeddings {base} x rope_scaling factor {spec.extra['rope_scaling']['factor']:g} = {derived}"


_MEMOS: dict[int, dict] = {}
"""id(spec) -> that spec object's memo dict (see `spec_memo`); dropped when the spec is collected."""


def spec_memo(spec: ModelSpec) -> dict:
    """A dict private to this ModelSpec object, for caching values derived from it.

    ModelSpec is frozen, so anything computed from its fields stays valid for the object's
    lifetime; the dict is keyed by the object's identity (not equality: hashing a spec costs
    more than most of what is cached) and removed when the object is garbage-collected, so an id
    is never reused while its memo lives. Callers key their entries by a tuple starting with
    their own name, e.g. `("count_params", include_mtp)`.
    """
    memo = _MEMOS.get(id(spec))
    if memo is None:
        memo = _MEMOS[id(spec)] = {}
        weakref.finalize(spec, _MEMOS.pop, id(spec), None)
    return memo


# ---------------------------------------------------------------- loading

MAX_LAYERS = 10_000
"""Largest num_hidden_layers (and layer-index key) accepted. [Bound] ~80x the deepest published
decoder (Llama 3.1 405B: 126 layers; MT-NLG: 105); per-layer loops of the cost model stay fast."""
MAX_WIDTH = 2**31
"""Largest width, vocabulary or context length accepted (2,147,483,648). [Bound] the int32 index
range of the frameworks' tensor dimensions; real models are below 2**20."""
MAX_COUNT = 65_536
"""Largest head or expert count accepted. [Bound] 256x DeepSeek-V3's 256 routed experts and 512x
the 128 heads of the widest published models."""

_POSITIVE_WIDTHS = (
    "hidden_size", "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "moe_intermediate_size", "shared_expert_intermediate_size", "q_lora_rank", "kv_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "padded_vocab_size", "ffn_hidden_size",
    "n_embd", "n_inner", "n_positions", "ffn_dim", "seq_length", "word_embed_proj_dim",
)
_POSITIVE_COUNTS = (
    "num_attention_heads", "num_key_value_heads", "num_local_experts", "num_experts",
    "n_routed_experts", "num_experts_per_tok", "experts_per_token", "num_experts_per_token",
    "n_head", "num_kv_heads", "n_head_kv", "n_group", "topk_group",
)
_INT_RULES: dict[str, tuple[int, int]] = {
    **{key: (1, MAX_WIDTH) for key in _POSITIVE_WIDTHS},
    **{key: (1, MAX_COUNT) for key in _POSITIVE_COUNTS},
    "num_hidden_layers": (1, MAX_LAYERS), "n_layer": (1, MAX_LAYERS),
    "decoder_sparse_step": (1, MAX_LAYERS), "moe_layer_freq": (1, MAX_LAYERS),
    "first_k_dense_replace": (0, MAX_LAYERS), "num_nextn_predict_layers": (0, MAX_LAYERS),
    "n_shared_experts": (0, MAX_COUNT),
    "sliding_window": (0, MAX_WIDTH),  # 0 or null: no window (Hugging Face tests `if sliding_window`)
}
"""(smallest, largest) allowed for every integer key the loader reads."""
_BOOL_KEYS = (
    "attention_bias", "mlp_bias", "tie_word_embeddings", "bias", "new_decoder_architecture",
    "parallel_attn", "alibi", "multi_query", "use_sliding_window", "do_layer_norm_before",
    "enable_bias", "_remove_final_layer_norm", "layer_norm_elementwise_affine", "use_qk_norm",
    "norm_topk_prob",
)
ROUTER_KEYS = ("scoring_func", "topk_method", "routed_scaling_factor", "norm_topk_prob", "router_aux_loss_coef")
"""Router fields of Hugging Face MoE configs kept in `ModelSpec.extra` as written (no count, FLOP or
byte depends on them; the Megatron emitter writes them as router flags): the score function
(softmax | sigmoid), the top-k method (noaux_tc: selection on scores plus the
e_score_correction_bias), the factor the top-k weights are multiplied by, whether they are
renormalised to sum 1, and the load-balancing loss coefficient (transformers
`load_balancing_loss_func` scaled by router_aux_loss_coef, e.g. modeling_mixtral.py). Source: transformers modeling_deepseek_v3.py DeepseekV3TopkRouter /
DeepseekV3MoE.route_tokens_to_experts."""
_TEXT_KEYS = ("name", "source", "hf_id", "hidden_act", "activation_function")
_OTHER_READ_KEYS = ("model_type", "layer_types", "mlp_only_layers", "rope_theta", "rope_scaling",
                    "partial_rotary_factor", "quantization_config", "fp8_training")
_READ_KEYS = frozenset(_INT_RULES) | set(_BOOL_KEYS) | set(_TEXT_KEYS) | set(_OTHER_READ_KEYS)
"""Every key some model_type reads (see the table in the module docstring)."""

# Keys of Hugging Face / catalog configs that do not change the planning arithmetic: accepted and
# ignored. Any other key is ignored too unless it looks like a typo of one of these or of a read key.
_IGNORED_KEYS = frozenset({
    "architectures", "torch_dtype", "dtype", "transformers_version", "rope_parameters",
    "initializer_range", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "bos_token_id",
    "eos_token_id", "pad_token_id", "use_cache", "attention_dropout", "hidden_dropout", "dropout",
    "pretraining_tp", "official_total_params", "notes", "max_window_layers", "routed_scaling_factor",
    "scoring_func", "topk_method", "aux_loss_alpha",
    "router_aux_loss_coef", "output_router_logits", "seq_aux", "ep_size",
    "swiglu_limit", "initial_context_length", "router_jitter_noise", "rotary_percent",
    "apply_residual_connection_post_layernorm", "slow_but_exact",
    "attn_pdrop", "resid_pdrop", "embd_pdrop", "n_ctx", "scale_attn_weights", "reorder_and_upcast_attn",
    "scale_attn_by_inverse_layer_idx", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "activation_dropout",
    "layerdrop", "init_std", "prefix", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "tokenizer_class", "output_attentions", "output_hidden_states", "return_dict", "torchscript",
    "is_encoder_decoder", "bias_dropout_fusion", "ffn_dropout", "pretraining_tp", "attn_logit_softcapping",
    "final_logit_softcapping", "attention_multiplier", "use_bfloat16", "kv_channels",
    "hf_aliases",  # catalog: Hugging Face ids sharing this config's architecture (check's model lookup)
})
QUANT_METHODS = {("fp8", (128, 128)): "fp8-block", ("fp8", None): "fp8", ("mxfp4", None): "mxfp4"}
"""(quantization_config quant_method, weight_block_size or None) -> the planner's weight format
(`cost.serving.WEIGHT_FORMATS`). Source: DeepSeek-V3 README_WEIGHTS.md (fp8 e4m3, 128x128 blocks,
one fp32 weight_scale_inv per block); transformers docs quantization/mxfp4 (gpt-oss: quant_method
mxfp4, attention / router / embedding / LM head in modules_to_not_convert)."""
INT4_METHODS = ("awq", "gptq")
INT4_GROUP = 128
"""quant_method values read as the planner's `int4` (`cost.serving.WEIGHT_FORMATS`: 4-bit weights, one fp16
scale and one 4-bit zero point per group of 128) when bits is 4 and group_size is 128 (AWQ's zero_point
true, its default; a GPTQ checkpoint stores qzeros whether sym or not). Source: transformers
`utils/quantization_config.py` AwqConfig (bits, group_size, zero_point) / GPTQConfig (bits, group_size,
sym); AutoAWQ / AutoGPTQ pack 8 4-bit weights per int32 with fp16 scales and packed 4-bit zeros per group.
Other bits or group sizes, and bitsandbytes (NF4 / FP4 with absmax per 64-element block), are not modelled."""
_TYPO_CUTOFF = 0.8
"""difflib ratio above which an unknown key in a YAML model file is taken for a typo of a known key
(num_key_value_head -> num_key_value_heads: 0.97; attn_pdrop -> attention_bias: 0.58)."""


def load_model(ref: str | Path, *, name: str | None = None) -> ModelSpec:
    """Load a model from a catalog name, a YAML file, a `config.json`, or a directory holding one.

    Args:
        ref: catalog name (e.g. `llama-3.1-70b`), a path, or a catalog model's Hugging Face id
            (`meta-llama/Llama-3.1-70B-Instruct`, `Qwen/Qwen3-235B-A22B-FP8`: `planner.specs.hf_ids`).
        name: display name to use instead of the config's `name` / catalog name / file stem.

    Returns:
        The normalised ModelSpec. Its `name` is the one name every command reports (`models
        show`, `plan`, `explain`, `check`, `serve-plan`): `name` if given, else the file's own
        `name` key, else the catalog name, else the folder of a `config.json` (a Hugging Face
        checkout), else the file's stem (`bnb.json` -> bnb).

    Raises:
        SpecError: empty or unknown name (with the closest catalog names), missing or unreadable
            file, syntax error with line, likely typo of a key, missing key, wrong type or range,
            impossible combination, unsupported model_type.
    """
    by_id = _hugging_face_id(str(ref))
    if by_id is not None:
        return by_id if name is None else dataclasses.replace(by_id, name=name)
    path, display = _resolve(str(ref))
    raw = files.read_mapping(path, "config keys")
    strict = path.suffix in (".yaml", ".yml")
    file = str(path)
    if _is_shown(raw):  # `planner models show --format yaml|json` output: its `config` is the model
        raw, strict = {"name": raw.get("name"), **raw["config"]}, False
    given = raw.get("name")
    if given is not None and (not isinstance(given, str) or not given.strip()):
        raise SpecError(f"value {_show(given)} must be a non-empty string", file=file, key="name")
    return from_config(raw, name=name or given or display, file=file, strict=strict)


HF_URL = re.compile(r"https?://(?:www\.)?(?:huggingface\.co|hf\.co)/([\w.-]+/[\w.-]+)(?:/.*)?")
"""A model page's address on the Hugging Face Hub (`https://huggingface.co/ORG/NAME[/tree/main...]`): group 1 is the id."""


def hugging_face_id(ref: str) -> str | None:
    """The Hugging Face id `ref` spells -- `owner/name` that is no existing path and has no file suffix
    (.yaml, .yml, .json), or a Hub address (`HF_URL`) -- else None."""
    url = HF_URL.fullmatch(ref.strip())
    if url:
        return url.group(1)
    if (not re.fullmatch(r"[\w.-]+/[\w.-]+", ref) or Path(ref).exists()
            or ref.lower().endswith((".yaml", ".yml", ".json"))):
        return None
    return ref


def unknown_hugging_face_id(hf_id: str) -> str:
    """What to do with a Hugging Face id the catalog does not hold (message text, no file/key prefix): for an id
    of a publisher whose naming the planner reads, first why it does not resolve (its suffix named,
    `hf_ids.unknown_suffix`); for a release in a format the planner does not model (`hf_ids.UNMODELLED`) only
    that, since its config.json is refused as well."""
    from planner.specs.hf_ids import unknown_suffix, unmodelled_release

    why = unknown_suffix(hf_id)
    if unmodelled_release(hf_id) is not None:  # its config.json is refused too: no download advice
        return why
    return ((f"{why}; " if why else "")
            + f"a Hugging Face id that is not in the catalog (and no such file; the planner downloads nothing); "
            f"download its config.json (https://huggingface.co/{hf_id}/blob/main/config.json, or "
            f"`huggingface-cli download {hf_id} config.json`) and pass that file or its folder as the model, "
            f"or pick a catalog model: `planner models` lists them, and the model option takes their "
            f"Hugging Face ids too (their hf_id and hf_aliases)")


def _hugging_face_id(ref: str) -> ModelSpec | None:
    """The catalog model a Hugging Face id or Hub address names (`planner.specs.hf_ids.lookup`: hf_id,
    hf_aliases, or a publisher's release / quantization suffix), when `ref` is one (`hugging_face_id`);
    else None.

    Raises:
        SpecError: an id the catalog does not hold (`unknown_hugging_face_id`)."""
    hf_id = hugging_face_id(ref)
    if hf_id is None:
        return None
    from planner.specs import hf_ids

    found = hf_ids.lookup(hf_id)
    if found is None:
        raise SpecError(unknown_hugging_face_id(hf_id), file=ref)
    return found


def model_config(ref: str | Path) -> dict:
    """The config mapping `load_model(ref)` reads (the model file's keys as written), for
    `planner models show` to print as its `config`, so that its YAML / JSON output loads again
    as a model file (`load_model` reads a shown model's `config`).

    Raises:
        SpecError: as `load_model` for a reference or file that does not load."""
    if _hugging_face_id(str(ref)) is not None:  # raises for an id the catalog does not hold
        from planner.specs import hf_ids

        return hf_ids.lookup_config(hugging_face_id(str(ref)))
    path, _ = _resolve(str(ref))
    raw = files.read_mapping(path, "config keys")
    return dict(raw["config"]) if _is_shown(raw) else raw


def _is_shown(raw: dict) -> bool:
    """Whether a mapping is `planner models show` output rather than a config: no model_type of
    its own and a `config` mapping that has one."""
    return ("model_type" not in raw and isinstance(raw.get("config"), dict)
            and "model_type" in raw["config"])


def catalog_names() -> list[str]:
    """Names of the shipped model catalog entries, sorted."""
    return files.catalog_names(CATALOG_DIR)


def _resolve(ref: str) -> tuple[Path, str]:
    if not ref.strip():
        raise SpecError("empty model name; pass a catalog name (see `planner models`), a YAML file, "
                        "config.json or a directory holding one")
    path = Path(ref)
    if files.path_problem(path) == "is a directory; expected a YAML or JSON file":
        config = path / "config.json"
        if files.path_problem(config) is not None:
            catalog = CATALOG_DIR / f"{ref.rstrip('/')}.yaml"
            hint = (f"; it shadows the catalog model {ref.rstrip('/')!r} (rename the directory or "
                    f"pass {catalog})" if catalog.is_file() else "")
            raise SpecError(f"directory holds no config.json{hint}", file=str(path))
        return config, path.resolve().name
    found, display = files.resolve(ref, CATALOG_DIR, "model",
                                   alternatives="a YAML file, config.json or directory")
    if found.name == "config.json" and display == "config":  # a Hugging Face checkout: its folder
        display = found.resolve().parent.name
    return found, display


def from_config(raw: dict, *, name: str, file: str = "<config>", strict: bool = False) -> ModelSpec:
    """Normalise a Hugging Face-style config dict into a ModelSpec.

    Every key the loader reads is type- and range-checked (see the module docstring); keys it does
    not read are ignored, except that `strict` (YAML model files) rejects an unknown key that looks
    like a typo of a known one.

    Args:
        raw: config keys (Hugging Face names).
        name: display name.
        file: where the dict came from (for messages).
        strict: reject likely typos of known keys (YAML model files); `config.json` files are
            machine-written and read leniently.

    Raises:
        SpecError: see `load_model`.
    """
    model_type = raw.get("model_type")
    if model_type is None:
        raise SpecError(f"missing key; allowed model_type values: {', '.join(SUPPORTED_MODEL_TYPES)}",
                        file=file, key="model_type")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise SpecError(f"unsupported value {_show(model_type)}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}",
                        file=file, key="model_type")
    for key in raw:
        if not isinstance(key, str):
            raise SpecError(f"key {_show(key)} must be a string (a config key name)", file=file)
        if strict:
            _check_typo(key, file)
    _check_types(raw, file)
    cfg = _Reader(raw, file)
    builder = _BUILDERS[model_type if model_type not in _CLASSIC else "classic"]
    fields = builder(cfg, model_type)
    fields.update(
        name=str(name), model_type=model_type, source=cfg.text("source", ""),
        extra={k: raw[k] for k in ("rope_theta", "rope_scaling", "hf_id", "partial_rotary_factor",
                                   *ROUTER_KEYS) if raw.get(k) is not None},
    )
    weight_format, method = _checkpoint_format(raw.get("quantization_config"), file)
    if method is not None and weight_format is None:
        fields["extra"]["quant_method"] = method
    if raw.get("quantization_config") is not None:  # as written (awq, gptq, fp8, ...): the engines match flags to it
        fields["extra"]["checkpoint_quant_method"] = raw["quantization_config"]["quant_method"]
    if raw.get("fp8_training") is not None:
        fields["extra"]["fp8_training"] = _fp8_training(raw["fp8_training"], file)
    spec = ModelSpec(**fields, weight_format=weight_format)
    _validate(spec, file)
    return spec


def _fp8_training(value: object, file: str) -> dict[str, str]:
    """`fp8_training` of a model file: {recipe, source}, the fp8 scaling recipe the model was
    pre-trained with and where that is published (`placement.precision.published_fp8_recipe`
    checks the recipe's name). Not a Hugging Face key: written in a catalog file beside its
    source.

    Raises:
        SpecError: not a mapping of exactly a non-empty string recipe and source."""
    if (not isinstance(value, dict) or set(value) != {"recipe", "source"}
            or not all(isinstance(v, str) and v.strip() for v in value.values())):
        raise SpecError(f"value {_show(value)} must be a mapping {{recipe: <fp8 recipe>, source: <where it is "
                        f"published>}}", file=file, key="fp8_training")
    return {"recipe": value["recipe"], "source": value["source"], "file": file}


def _checkpoint_format(config: object, file: str) -> tuple[str | None, str | None]:
    """(the planner's weight format or None, the quant_method) of a `quantization_config` (None: absent).

    Raises:
        SpecError: not a mapping with a string quant_method, or a weight_block_size that is not
            two positive integers."""
    if config is None:
        return None, None
    key = "quantization_config"
    if not isinstance(config, dict) or not isinstance(config.get("quant_method"), str):
        raise SpecError(f"value {_show(config)} must be a mapping with a string quant_method", file=file, key=key)
    block = config.get("weight_block_size")
    if block is not None and not (isinstance(block, list) and len(block) == 2 and all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise SpecError(f"value {_show(block)} must be two positive integers", file=file,
                        key=f"{key}.weight_block_size")
    method = config["quant_method"]
    if method in INT4_METHODS:
        group, bits, zero = config.get("group_size"), config.get("bits"), config.get("zero_point", True)
        return ("int4" if (bits, group) == (4, INT4_GROUP) and zero is not False else None), \
            f"{method} (bits {bits}, group_size {group}{', no zero point' if zero is False else ''})"
    return QUANT_METHODS.get((method, tuple(block) if block else None)), method


def require_modelled_checkpoint(spec: ModelSpec) -> None:
    """Serving costs the checkpoint's own format, which the engines load: one the planner does not model
    is refused, never costed as another (vLLM and SGLang load it whatever --weight-dtype says).

    Raises:
        SpecError: a quantization_config whose format is not among QUANT_METHODS / INT4_METHODS."""
    method = spec.extra.get("quant_method")
    if method is not None:
        raise SpecError(f"value {method!r} of {spec.name} is not modelled (the engines load this format, which the planner "
                        f"cannot cost); allowed: fp8 with weight_block_size [128, 128] or none, mxfp4, awq or "
                        f"gptq with bits 4 and group_size {INT4_GROUP}; or serve an unquantized checkpoint",
                        key="quantization_config.quant_method")


def _show(value: object) -> str:
    """A value as the file spells it (`errors.shown`: true, null, [1, 2]), shortened to one readable
    fragment (a 4,000-digit integer is not)."""
    text = shown(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _check_typo(key: str, file: str) -> None:
    """In a YAML model file, an unknown key close to a known one is a typo; others are ignored."""
    if key in _READ_KEYS or key in _IGNORED_KEYS or key.startswith("_"):
        return
    close = difflib.get_close_matches(key, sorted(_READ_KEYS | _IGNORED_KEYS), n=3, cutoff=_TYPO_CUTOFF)
    if close:
        raise SpecError(f"unknown key; did you mean {' or '.join(repr(c) for c in close)}? (the keys "
                        "read for each model_type are listed in the docstring of planner/specs/model.py)",
                        file=file, key=key)


def _check_types(raw: dict, file: str) -> None:
    """Type and range of every scalar key the loader reads, wherever it is present and not null."""
    for key, (lo, hi) in _INT_RULES.items():
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            kind = "a positive integer" if lo == 1 else "a non-negative integer"
            raise SpecError(f"value {_show(value)} must be {kind} (at most {hi:,})", file=file, key=key)
    for key in _BOOL_KEYS:
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise SpecError(f"value {_show(raw[key])} must be true or false", file=file, key=key)
    for key in _TEXT_KEYS:
        if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise SpecError(f"value {_show(raw[key])} must be a non-empty string", file=file, key=key)
    factor = raw.get("partial_rotary_factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not 0 < factor <= 1):
        raise SpecError(f"value {_show(factor)} must be a number in (0, 1] (the fraction of each head's "
                        "channels RoPE rotates)", file=file, key="partial_rotary_factor")
    theta = raw.get("rope_theta")
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float))
                              or not 0 < theta < float("inf")):
        raise SpecError(f"value {_show(theta)} must be a positive number", file=file, key="rope_theta")
    scaling = raw.get("rope_scaling")
    if scaling is not None and not (isinstance(scaling, dict) and all(
            isinstance(v, (str, int, float, bool, type(None))) or
            (isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)) for v in scaling.values())):
        raise SpecError(f"value {_show(scaling)} must be a mapping of scalars (or lists of numbers)",
                        file=file, key="rope_scaling")
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not 0 < factor < float("inf")):
        raise SpecError(f"value {_show(factor)} must be a positive number (the RoPE scaling factor the engines "
                        "multiply positions or max_position_embeddings by; null or absent means 1)",
                        file=file, key="rope_scaling.factor")


class _Reader:
    """Access to config keys already checked by `_check_types`, with messages naming file and key."""

    def __init__(self, raw: dict, file: str):
        self.raw, self.file = raw, file

    def given(self, *keys: str) -> str | None:
        """The first of `keys` present and not null; SpecError when two of them disagree."""
        present = [key for key in keys if self.raw.get(key) is not None]
        for other in present[1:]:
            if self.raw[other] != self.raw[present[0]]:
                raise SpecError(f"value {_show(self.raw[other])} disagrees with {present[0]} "
                                f"{_show(self.raw[present[0]])}; give one", file=self.file, key=other)
        return present[0] if present else None

    def req(self, *keys: str) -> int:
        key = self.given(*keys)
        if key is None:
            raise SpecError("missing key (required for this model_type)", file=self.file, key=keys[0])
        return self.raw[key]

    def opt(self, key: str, default: int = 0) -> int:
        return default if self.raw.get(key) is None else self.raw[key]

    def flag(self, key: str, default: bool = False) -> bool:
        return default if self.raw.get(key) is None else self.raw[key]

    def text(self, key: str, default: str) -> str:
        return default if self.raw.get(key) is None else self.raw[key]


def _attention_core(cfg: _Reader) -> dict:
    hidden = cfg.req("hidden_size")
    heads = cfg.req("num_attention_heads")
    kv_heads = cfg.opt("num_key_value_heads", heads)
    if hidden % heads and cfg.raw.get("head_dim") is None:
        raise SpecError(f"value {heads} does not divide hidden_size {hidden}; give head_dim",
                        file=cfg.file, key="num_attention_heads")
    vocab = cfg.req("vocab_size")
    return dict(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=cfg.opt("head_dim", hidden // heads),
        num_hidden_layers=cfg.req("num_hidden_layers"), vocab_size=vocab,
        padded_vocab_size=cfg.opt("padded_vocab_size", vocab),
        max_position_embeddings=cfg.req("max_position_embeddings"),
    )


def _llama(cfg: _Reader, model_type: str) -> dict:
    """llama, mistral, qwen2, qwen3. Source: transformers modeling_llama.py / modeling_qwen2.py /
    modeling_qwen3.py (q/k/v bias in Qwen2; q_norm/k_norm of head_dim in Qwen3)."""
    fields = _attention_core(cfg)
    bias = cfg.flag("attention_bias", model_type in ("qwen2", "qwen2_moe"))
    layers = fields["num_hidden_layers"]
    fields.update(
        intermediate_size=cfg.req("intermediate_size"),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False),
        hidden_act=cfg.text("hidden_act", "silu"),
        attention_bias=bias, attention_out_bias=bias and model_type not in ("qwen2", "qwen2_moe"),
        mlp_bias=cfg.flag("mlp_bias", False), qk_norm=model_type in ("qwen3", "qwen3_moe"),
        sliding_window=_sliding(cfg, model_type), layer_types=_layer_types(cfg, layers, model_type),
    )
    return fields


def _sliding(cfg: _Reader, model_type: str) -> int:
    """Window in tokens; Qwen configs apply it only with `use_sliding_window: true`."""
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not cfg.flag("use_sliding_window"):
        return 0
    return cfg.opt("sliding_window")


def _layer_types(cfg: _Reader, layers: int, model_type: str) -> tuple[str, ...]:
    given = cfg.raw.get("layer_types")
    if given is not None:
        allowed = ("full_attention", "sliding_attention")
        if not isinstance(given, list) or len(given) != layers or any(t not in allowed for t in given
                                                                        if isinstance(t, str)) \
                or not all(isinstance(t, str) for t in given):
            raise SpecError(f"value {_show(given)} must be a list of {layers} entries (one per layer), "
                            f"each {' or '.join(allowed)}", file=cfg.file, key="layer_types")
        return tuple(given)
    if model_type == "gpt_oss":  # Source: transformers GptOssConfig: even layers sliding.
        return tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers))
    if model_type == "mistral" and cfg.opt("sliding_window"):
        return ("sliding_attention",) * layers
    return ("full_attention",) * layers


def _layer_indices(cfg: _Reader, key: str, layers: int) -> set[int]:
    """A list of layer indices, each an integer in 0..layers-1 (empty when absent)."""
    given = cfg.raw.get(key)
    if given is None:
        return set()
    if not isinstance(given, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in given):
        raise SpecError(f"value {_show(given)} must be a list of layer indices, integers from 0 to "
                        f"{layers - 1}", file=cfg.file, key=key)
    return set(given)


def _experts(cfg: _Reader) -> int:
    """Routed experts per MoE layer, under whichever of its names the config uses."""
    keys = ("num_local_experts", "num_experts", "n_routed_experts")
    if cfg.given(*keys) is None:
        raise SpecError("missing key (number of routed experts)", file=cfg.file, key=keys[0])
    return cfg.req(*keys)


def _top_k(cfg: _Reader, experts: int) -> int:
    """Experts per token, 1..experts; errors name the key the config used (gpt-oss: experts_per_token)."""
    keys = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token")
    key = cfg.given(*keys) or keys[0]
    top_k = cfg.req(*keys)
    if top_k > experts:
        raise SpecError(f"value {top_k} must be between 1 and the {experts} experts", file=cfg.file, key=key)
    return top_k


def _moe(cfg: _Reader, model_type: str) -> dict:
    """mixtral, qwen2_moe, qwen3_moe. Source: transformers modeling_mixtral.py (router Linear(h,E),
    E SwiGLU experts), modeling_qwen2_moe.py (shared_expert + shared_expert_gate Linear(h,1)),
    modeling_qwen3_moe.py (MoE where layer not in mlp_only_layers and (layer+1) % decoder_sparse_step == 0)."""
    fields = _llama(cfg, model_type)
    layers = fields["num_hidden_layers"]
    experts = _experts(cfg)
    if model_type == "mixtral":
        moe_width = cfg.req("intermediate_size")
        moe_layers = (True,) * layers
    else:
        moe_width = cfg.req("moe_intermediate_size")
        step = cfg.opt("decoder_sparse_step", 1)
        dense_only = _layer_indices(cfg, "mlp_only_layers", layers)
        moe_layers = tuple(i not in dense_only and (i + 1) % step == 0 for i in range(layers))
    shared = cfg.opt("shared_expert_intermediate_size") if model_type == "qwen2_moe" else 0
    fields.update(
        num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
        moe_intermediate_size=moe_width, moe_layers=moe_layers,
        n_shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
        shared_expert_gate=bool(shared),
    )
    return fields


def _deepseek_v3(cfg: _Reader, model_type: str) -> dict:
    """deepseek_v3 and kimi_k2. Source: transformers modeling_deepseek_v3.py (MLA projections q_a/q_b,
    kv_a_proj_with_mqa, kv_b_proj, o_proj; experts as in `_shared_expert_moe`); DeepSeek's
    modeling_deepseek.py: MoE every `moe_layer_freq`-th layer after the dense ones. Kimi K2's
    config.json names `architectures: [DeepseekV3ForCausalLM]` and the same keys; Moonshot's Kimi-K2
    deployment guide ("Others") says K2 reuses the DeepSeek-V3 architecture, sets `model_type:
    kimi_k2` only so that engines can tell it apart, and runs with model_type changed to
    deepseek_v3. So this builder reads it unchanged."""
    fields = _attention_core(cfg)
    layers = fields["num_hidden_layers"]
    nope, rope = cfg.req("qk_nope_head_dim"), cfg.req("qk_rope_head_dim")
    fields.update(
        head_dim=nope + rope, intermediate_size=cfg.req("intermediate_size"),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False),
        attention_bias=cfg.flag("attention_bias", False), hidden_act=cfg.text("hidden_act", "silu"),
        q_lora_rank=cfg.opt("q_lora_rank"), kv_lora_rank=cfg.req("kv_lora_rank"),
        qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=cfg.req("v_head_dim"),
        layer_types=("full_attention",) * layers,
        **_shared_expert_moe(cfg, layers, shared=cfg.opt("n_shared_experts"),
                             first_dense=cfg.opt("first_k_dense_replace"), freq=cfg.opt("moe_layer_freq", 1)),
    )
    return fields


def _glm4_moe(cfg: _Reader, model_type: str) -> dict:
    """glm4_moe (GLM-4.5, GLM-4.5-Air). Source: transformers modeling_glm4_moe.py @a0699c97
    (Glm4MoeAttention: q/k/v_proj with bias=attention_bias, o_proj bias=False, q_norm/k_norm
    RMSNorm(head_dim) when use_qk_norm, RoPE on the first partial_rotary_factor of each head;
    Glm4MoeDecoderLayer: MoE where layer_idx >= first_k_dense_replace, no moe_layer_freq; experts as
    in `_shared_expert_moe`) and configuration_glm4_moe.py @c7ec229a for the defaults of an absent
    key (attention_bias false, use_qk_norm false, n_shared_experts 1, first_k_dense_replace 1)."""
    fields = _attention_core(cfg)
    layers = fields["num_hidden_layers"]
    fields.update(
        intermediate_size=cfg.req("intermediate_size"),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False), hidden_act=cfg.text("hidden_act", "silu"),
        attention_bias=cfg.flag("attention_bias", False), attention_out_bias=False,
        qk_norm=cfg.flag("use_qk_norm", False), layer_types=("full_attention",) * layers,
        **_shared_expert_moe(cfg, layers, shared=cfg.opt("n_shared_experts", 1),
                             first_dense=cfg.opt("first_k_dense_replace", 1), freq=1),
    )
    return fields


def _shared_expert_moe(cfg: _Reader, layers: int, *, shared: int, first_dense: int, freq: int) -> dict:
    """The DeepSeek-style expert block of deepseek_v3, kimi_k2 and glm4_moe: `n_routed_experts`
    SwiGLU experts of moe_intermediate_size; a router weight E x h plus the E-wide
    `e_score_correction_bias` (a persistent buffer: in the state dict and the checkpoint, so counted);
    the `shared` shared experts fused into one MLP of shared x moe_intermediate_size; layers below
    `first_dense` dense, then every `freq`-th layer MoE; the multi-token-prediction layers
    (`num_nextn_predict_layers`) kept apart. Source: transformers modeling_deepseek_v3.py
    (DeepseekV3TopkRouter, DeepseekV3MoE) and modeling_glm4_moe.py @a0699c97 (Glm4MoeTopkRouter,
    Glm4MoeMoE: shared_experts = Glm4MoeMLP(intermediate_size=moe_intermediate_size x n_shared_experts))."""
    width = cfg.req("moe_intermediate_size")
    experts = _experts(cfg)
    top_k = _top_k(cfg, experts)
    return dict(
        num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width,
        **_expert_groups(cfg, experts, top_k),
        n_shared_experts=shared, shared_expert_intermediate_size=shared * width, router_bias=True,
        moe_layers=tuple(i >= first_dense and i % freq == 0 for i in range(layers)),
        num_nextn_predict_layers=cfg.opt("num_nextn_predict_layers"),
    )


def _expert_groups(cfg: _Reader, experts: int, top_k: int) -> dict:
    """n_group / topk_group of group-limited routing (both absent: none). Source: transformers
    modeling_deepseek_v3.py DeepseekV3TopkRouter.get_topk_indices (scores viewed as n_group groups
    of experts / n_group consecutive experts, the topk_group best groups kept, then the top-k
    experts among them); Megatron-Bridge reads them as moe_router_num_groups / moe_router_group_topk
    (NVIDIA-NeMo/Megatron-Bridge@067f987 models/conversion/model_bridge.py l. 487-488)."""
    groups, chosen = cfg.opt("n_group"), cfg.opt("topk_group")
    if not groups and not chosen:
        return {}
    if not groups or experts % groups:
        raise SpecError(f"value {groups} must divide the {experts} experts", file=cfg.file, key="n_group")
    if not chosen or chosen > groups or chosen * (experts // groups) < top_k:
        raise SpecError(f"value {chosen} must be between 1 and n_group = {groups} and leave the top "
                        f"{top_k} experts to choose from", file=cfg.file, key="topk_group")
    return dict(n_group=groups, topk_group=chosen)


def _gpt_oss(cfg: _Reader, model_type: str) -> dict:
    """gpt_oss. Source: transformers modeling_gpt_oss.py (q/k/v/o with bias, `sinks` of
    num_attention_heads per layer, router Linear(h,E) with bias, experts gate_up_proj E x h x 2I
    + bias, down_proj E x I x h + bias)."""
    fields = _llama(cfg, model_type)
    experts = _experts(cfg)
    fields.update(
        attention_bias=True, attention_out_bias=True, attention_sinks=True,
        num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
        moe_intermediate_size=cfg.req("intermediate_size"), router_bias=True, expert_bias=True,
        moe_layers=(True,) * fields["num_hidden_layers"], sliding_window=cfg.opt("sliding_window"),
    )
    return fields


_CLASSIC_ALIASES = {
    "hidden_size": ("hidden_size", "n_embd"), "num_hidden_layers": ("num_hidden_layers", "n_layer"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "seq_length"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
}
"""HF names of the classic families (GPT-2 n_*, OPT ffn_dim, BLOOM seq_length) -> ModelSpec names."""


def _classic(cfg: _Reader, model_type: str) -> dict:
    """gpt (GPT-3 / Megatron GPT / MT-NLG), gpt2, opt, bloom. Source: Radford et al. 2019 / Brown
    et al. 2020 block; transformers modeling_gpt2.py (n_inner null -> 4h), modeling_bloom.py (ALiBi,
    word_embeddings_layernorm), modeling_opt.py (see `_opt`)."""
    raw = dict(cfg.raw)
    for new, names in _CLASSIC_ALIASES.items():
        key = cfg.given(*names)
        if key is not None:
            raw[new] = raw[key]
    if model_type == "bloom":  # BloomConfig has no position limit (ALiBi); 2048 is its seq_length default
        raw.setdefault("max_position_embeddings", 2048)
    cfg = _Reader(raw, cfg.file)
    fields = _attention_core(cfg)
    hidden = fields["hidden_size"]
    alibi = model_type == "bloom"
    fields.update(
        intermediate_size=cfg.opt("intermediate_size", 4 * hidden),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", True),
        norm_type="layernorm", gated_mlp=False, hidden_act=cfg.text("activation_function", "gelu"),
        attention_bias=True, attention_out_bias=True, mlp_bias=True,
        position_embedding_type="alibi" if alibi else "learned",
        position_embedding_rows=0 if alibi else fields["max_position_embeddings"],
        embedding_norm=alibi, layer_types=("full_attention",) * fields["num_hidden_layers"],
    )
    if model_type == "opt":
        fields.update(_opt(cfg, fields))
    return fields


def _opt(cfg: _Reader, fields: dict) -> dict:
    """OPT. Source: transformers modeling_opt.py: OPTLearnedPositionalEmbedding allocates
    max_position_embeddings + 2 rows; OPTDecoder embeds tokens at `word_embed_proj_dim` and, when it
    differs from hidden_size, adds project_in Linear(word_embed_proj_dim, h, bias=False) and
    project_out Linear(h, word_embed_proj_dim, bias=False), the LM head being
    Linear(word_embed_proj_dim, vocab) tied to the embedding; final_layer_norm exists only when
    `do_layer_norm_before and not _remove_final_layer_norm`; `enable_bias` sets the q/k/v/out and
    fc1/fc2 biases."""
    key = "layer_norm_elementwise_affine"
    if not cfg.flag(key, True):
        raise SpecError("value false (LayerNorms without weights) is not supported; allowed: true",
                        file=cfg.file, key=key)
    bias = cfg.flag("enable_bias", True)
    width = cfg.opt("word_embed_proj_dim", fields["hidden_size"])
    return dict(
        position_embedding_rows=fields["max_position_embeddings"] + 2,
        attention_bias=bias, attention_out_bias=bias, mlp_bias=bias,
        word_embed_proj_dim=0 if width == fields["hidden_size"] else width,
        final_norm=cfg.flag("do_layer_norm_before", True) and not cfg.flag("_remove_final_layer_norm"),
    )


def _falcon(cfg: _Reader, model_type: str) -> dict:
    """falcon. Source: transformers modeling_falcon.py (fused query_key_value of
    h x (a + 2 kv) d; `new_decoder_architecture` uses ln_attn + ln_mlp; bias flag; 4h GELU MLP)."""
    raw = dict(cfg.raw)
    key = cfg.given("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if key is not None:
        raw["num_key_value_heads"] = raw[key]
    elif cfg.flag("multi_query"):
        raw["num_key_value_heads"] = 1
    raw.setdefault("max_position_embeddings", 2048)  # FalconConfig default
    cfg = _Reader(raw, cfg.file)
    fields = _attention_core(cfg)
    bias = cfg.flag("bias", False)
    new_arch = cfg.flag("new_decoder_architecture", False)
    fields.update(
        intermediate_size=cfg.opt("ffn_hidden_size", 4 * fields["hidden_size"]),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", True),
        norm_type="layernorm", gated_mlp=False, hidden_act="gelu",
        attention_bias=bias, attention_out_bias=bias, mlp_bias=bias,
        parallel_attention=cfg.flag("parallel_attn", True), norms_per_layer=2 if new_arch else 1,
        position_embedding_type="alibi" if cfg.flag("alibi", False) else "rope",
        layer_types=("full_attention",) * fields["num_hidden_layers"],
    )
    return fields


def _nemotron(cfg: _Reader, model_type: str) -> dict:
    """nemotron. Source: transformers modeling_nemotron.py (NemotronLayerNorm1P with bias,
    up_proj/down_proj with relu2, attention_bias/mlp_bias flags)."""
    fields = _llama(cfg, model_type)
    fields.update(norm_type="layernorm", gated_mlp=False, hidden_act=cfg.text("hidden_act", "relu2"))
    return fields


_BUILDERS = {
    "llama": _llama, "mistral": _llama, "qwen2": _llama, "qwen3": _llama,
    "mixtral": _moe, "qwen2_moe": _moe, "qwen3_moe": _moe, "deepseek_v3": _deepseek_v3,
    "kimi_k2": _deepseek_v3, "glm4_moe": _glm4_moe, "gpt_oss": _gpt_oss, "classic": _classic, "falcon": _falcon, "nemotron": _nemotron,
}


def _validate(spec: ModelSpec, file: str) -> None:
    """Impossible combinations, each as one SpecError naming the key and value."""
    if spec.hidden_act not in HF_ACTIVATIONS:
        key = "activation_function" if spec.model_type in ("gpt", "gpt2", "opt") else "hidden_act"
        raise SpecError(f"value {_show(spec.hidden_act)} is not an activation transformers knows; "
                        f"allowed: {', '.join(HF_ACTIVATIONS)}", file=file, key=key)
    if spec.num_attention_heads % spec.num_key_value_heads:
        raise SpecError(f"value {spec.num_key_value_heads} must divide num_attention_heads "
                        f"{spec.num_attention_heads} ({spec.num_attention_heads} is not divisible by "
                        f"{spec.num_key_value_heads})", file=file, key="num_key_value_heads")
    if spec.padded_vocab_size < spec.vocab_size:
        raise SpecError(f"value {spec.padded_vocab_size} must be at least vocab_size {spec.vocab_size}",
                        file=file, key="padded_vocab_size")
    if spec.is_moe and spec.moe_layers and not any(spec.moe_layers):
        key = "first_k_dense_replace" if spec.model_type in _FIRST_DENSE_TYPES else "mlp_only_layers"
        raise SpecError("no layer is a MoE layer with these settings", file=file, key=key)


def to_dict(spec: ModelSpec) -> dict:
    """Plain dict of the spec (for json/yaml output)."""
    data = dataclasses.asdict(spec)
    data["moe_layers"] = list(spec.moe_layers)
    data["layer_types"] = list(spec.layer_types)
    return data


def check_expert_degrees(model: ModelSpec, degrees: dict, *, key_of=lambda key: "--fix") -> None:
    """ep or etp above 1 on a model without routed experts: bad input, the same line for
    `plan --fix ep=2` and `explain --ep 2` (it splits nothing).

    Args:
        degrees: {ep / etp: degree}; other keys are ignored.
        key_of: the option a degree came from, for the message.

    Raises:
        SpecError: naming the degree and the model (exit 2)."""
    for key in ("ep", "etp"):
        if degrees.get(key, 1) > 1 and not model.is_moe:
            raise SpecError(f"{key}={degrees[key]} applies to routed experts; {model.name} has none "
                            f"(a dense model: use {key}=1)", key=key_of(key))
