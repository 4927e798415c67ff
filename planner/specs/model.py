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
| gpt_oss | GQA with biases and attention sinks, alternating sliding/full attention, MoE with biases |
| gpt, gpt2, opt, bloom | classic GPT: LayerNorm with bias, GELU 4h MLP with bias, learned/ALiBi positions, tied |
| falcon | parallel attention + MLP, fused multi-query/grouped QKV, LayerNorm, GELU 4h MLP |
| nemotron | LayerNorm(1p) with bias, GQA, non-gated squared-ReLU MLP, untied |
"""

from __future__ import annotations

import dataclasses
import difflib
import weakref
from dataclasses import dataclass, field
from pathlib import Path


from planner.errors import SpecError
from planner.specs import files

CATALOG_DIR = Path(__file__).resolve().parents[2] / "models"

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3",
    "gpt_oss", "gpt", "gpt2", "opt", "bloom", "falcon", "nemotron",
)
_CLASSIC = ("gpt", "gpt2", "opt", "bloom")


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

    num_experts: int = 0
    """Routed experts per MoE layer (0: dense model)."""
    num_experts_per_tok: int = 0
    """Routed experts each token visits (top-k)."""
    moe_intermediate_size: int = 0
    """Width of one routed expert."""
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
    extra: dict = field(default_factory=dict, compare=False, repr=False)
    """Descriptive fields kept for output (rope_theta, rope_scaling, ...)."""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def family(self) -> str:
        """Short family label for tables."""
        return self.model_type


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

# Keys every config may carry that do not change the planning arithmetic.
_DESCRIPTIVE_KEYS = {
    "name", "source", "hf_id", "architectures", "torch_dtype", "dtype", "transformers_version",
    "rope_theta", "rope_scaling", "rope_parameters", "initializer_range", "rms_norm_eps",
    "layer_norm_eps", "layer_norm_epsilon", "bos_token_id", "eos_token_id", "pad_token_id",
    "use_cache", "attention_dropout", "hidden_dropout", "dropout", "pretraining_tp", "model_type",
    "official_total_params", "notes", "max_window_layers", "use_sliding_window",
    "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group",
    "norm_topk_prob", "aux_loss_alpha", "router_aux_loss_coef", "output_router_logits",
    "seq_aux", "ep_size", "quantization_config", "swiglu_limit", "initial_context_length",
    "router_jitter_noise", "tie_word_embeddings", "rotary_percent", "partial_rotary_factor",
    "activation_function", "do_layer_norm_before", "word_embed_proj_dim", "enable_bias",
    "apply_residual_connection_post_layernorm", "slow_but_exact", "alibi", "bias",
    "multi_query", "new_decoder_architecture", "num_kv_heads", "parallel_attn",
    "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
}

_INT_KEYS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "num_local_experts",
    "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
    "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace",
    "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "sliding_window", "num_nextn_predict_layers", "padded_vocab_size", "decoder_sparse_step",
    "moe_layer_freq", "ffn_hidden_size", "n_embd", "n_layer", "n_head", "n_inner", "n_positions",
    "ffn_dim", "num_kv_heads", "n_head_kv",
)
_KNOWN_KEYS = _DESCRIPTIVE_KEYS | set(_INT_KEYS) | {
    "attention_bias", "mlp_bias", "hidden_act", "layer_types", "position_embedding_type",
    "norm_type", "qkv_bias", "num_experts_per_token", "experts_per_token",
}


def load_model(ref: str | Path, *, name: str | None = None) -> ModelSpec:
    """Load a model from a catalog name, a YAML file, a `config.json`, or a directory holding one.

    Args:
        ref: catalog name (e.g. `llama-3.1-70b`) or a path.
        name: display name to use instead of the catalog name / file stem.

    Returns:
        The normalised ModelSpec.

    Raises:
        SpecError: unknown name (with the closest catalog names), missing file, syntax error with
            line, unknown or missing key, impossible value, unsupported model_type.
    """
    path, display = _resolve(str(ref))
    raw = files.read_mapping(path, "config keys")
    strict = path.suffix in (".yaml", ".yml")
    return from_config(raw, name=name or raw.get("name") or display, file=str(path), strict=strict)


def catalog_names() -> list[str]:
    """Names of the shipped model catalog entries, sorted."""
    return files.catalog_names(CATALOG_DIR)


def _resolve(ref: str) -> tuple[Path, str]:
    path = Path(ref)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise SpecError("directory holds no config.json", file=str(path))
        return config, path.name
    return files.resolve(ref, CATALOG_DIR, "model", alternatives="a YAML file, config.json or directory")

def from_config(raw: dict, *, name: str, file: str = "<config>", strict: bool = False) -> ModelSpec:
    """Normalise a Hugging Face-style config dict into a ModelSpec.

    Args:
        raw: config keys (Hugging Face names).
        name: display name.
        file: where the dict came from (for messages).
        strict: reject keys the planner does not know (YAML model files); `config.json` files
            carry many unrelated keys and are read leniently.

    Raises:
        SpecError: see `load_model`.
    """
    model_type = raw.get("model_type")
    if model_type is None:
        raise SpecError(f"missing key; allowed model_type values: {', '.join(SUPPORTED_MODEL_TYPES)}",
                        file=file, key="model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise SpecError(f"unsupported value {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}",
                        file=file, key="model_type")
    if strict:
        for key in raw:
            if key not in _KNOWN_KEYS:
                close = difflib.get_close_matches(key, sorted(_KNOWN_KEYS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise SpecError(f"unknown key{hint}", file=file, key=key)
    for key in _INT_KEYS:
        if key in raw and raw[key] is not None:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"value {value!r} must be a non-negative integer", file=file, key=key)
    cfg = _Reader(raw, file)
    builder = _BUILDERS[model_type if model_type not in _CLASSIC else "classic"]
    fields = builder(cfg, model_type)
    fields.update(
        name=str(name), model_type=model_type, source=str(raw.get("source", "")),
        extra={k: raw[k] for k in ("rope_theta", "rope_scaling", "hf_id") if k in raw},
    )
    spec = ModelSpec(**fields)
    _validate(spec, file)
    return spec


class _Reader:
    """Typed access to config keys with messages that name the file and key."""

    def __init__(self, raw: dict, file: str):
        self.raw, self.file = raw, file

    def req(self, *keys: str) -> int:
        for key in keys:
            if self.raw.get(key) is not None:
                return self._positive(key)
        raise SpecError("missing key (required for this model_type)", file=self.file, key=keys[0])

    def opt(self, key: str, default: int = 0) -> int:
        return default if self.raw.get(key) is None else int(self.raw[key])

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(f"value {value!r} must be true or false", file=self.file, key=key)
        return value

    def _positive(self, key: str) -> int:
        value = self.raw[key]
        if value <= 0:
            raise SpecError(f"value {value!r} must be a positive integer", file=self.file, key=key)
        return int(value)


def _attention_core(cfg: _Reader) -> dict:
    hidden = cfg.req("hidden_size")
    heads = cfg.req("num_attention_heads")
    kv_heads = cfg.req("num_key_value_heads") if cfg.raw.get("num_key_value_heads") is not None else heads
    if hidden % heads and cfg.raw.get("head_dim") is None:
        raise SpecError(f"hidden_size {hidden} is not divisible by num_attention_heads {heads}; "
                        "give head_dim", file=cfg.file, key="num_attention_heads")
    head_dim = cfg.req("head_dim") if cfg.raw.get("head_dim") is not None else hidden // heads
    vocab = cfg.req("vocab_size")
    return dict(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
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
        hidden_act=str(cfg.raw.get("hidden_act", "silu")),
        attention_bias=bias, attention_out_bias=bias and model_type not in ("qwen2", "qwen2_moe"),
        mlp_bias=cfg.flag("mlp_bias", False), qk_norm=model_type in ("qwen3", "qwen3_moe"),
        sliding_window=_sliding(cfg, model_type), layer_types=_layer_types(cfg, layers, model_type),
    )
    return fields


def _sliding(cfg: _Reader, model_type: str) -> int:
    window = cfg.raw.get("sliding_window")
    if window is None:
        return 0
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not cfg.raw.get("use_sliding_window"):
        return 0
    return int(window)


def _layer_types(cfg: _Reader, layers: int, model_type: str) -> tuple[str, ...]:
    given = cfg.raw.get("layer_types")
    if given is not None:
        allowed = {"full_attention", "sliding_attention"}
        if not isinstance(given, list) or len(given) != layers or not set(given) <= allowed:
            raise SpecError(f"must be a list of {layers} entries from {sorted(allowed)}",
                            file=cfg.file, key="layer_types")
        return tuple(given)
    if model_type == "gpt_oss":  # Source: transformers GptOssConfig: even layers sliding.
        return tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers))
    if model_type == "mistral" and cfg.raw.get("sliding_window"):
        return ("sliding_attention",) * layers
    return ("full_attention",) * layers


def _experts(cfg: _Reader) -> int:
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if cfg.raw.get(key) is not None:
            return cfg.req(key)
    raise SpecError("missing key (number of routed experts)", file=cfg.file, key="num_local_experts")


def _moe(cfg: _Reader, model_type: str) -> dict:
    """mixtral, qwen2_moe, qwen3_moe. Source: transformers modeling_mixtral.py (router Linear(h,E),
    E SwiGLU experts), modeling_qwen2_moe.py (shared_expert + shared_expert_gate Linear(h,1)),
    modeling_qwen3_moe.py (decoder_sparse_step, mlp_only_layers)."""
    fields = _llama(cfg, model_type)
    layers = fields["num_hidden_layers"]
    experts = _experts(cfg)
    if model_type == "mixtral":
        moe_width = cfg.req("intermediate_size")
        moe_layers = (True,) * layers
    else:
        moe_width = cfg.req("moe_intermediate_size")
        step = cfg.opt("decoder_sparse_step", 1) or 1
        dense_only = set(cfg.raw.get("mlp_only_layers") or [])
        moe_layers = tuple(i not in dense_only and (i + 1) % step == 0 for i in range(layers))
    shared = cfg.opt("shared_expert_intermediate_size") if model_type == "qwen2_moe" else 0
    fields.update(
        num_experts=experts, num_experts_per_tok=cfg.req("num_experts_per_tok"),
        moe_intermediate_size=moe_width, moe_layers=moe_layers,
        n_shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
        shared_expert_gate=bool(shared),
    )
    return fields


def _deepseek_v3(cfg: _Reader, model_type: str) -> dict:
    """deepseek_v3. Source: transformers modeling_deepseek_v3.py (MLA projections q_a/q_b,
    kv_a_proj_with_mqa, kv_b_proj, o_proj; DeepseekV3TopkRouter weight E x h and
    e_score_correction_bias E; shared experts of width n_shared_experts x moe_intermediate_size;
    the first `first_k_dense_replace` layers dense)."""
    fields = _attention_core(cfg)
    layers = fields["num_hidden_layers"]
    nope, rope = cfg.req("qk_nope_head_dim"), cfg.req("qk_rope_head_dim")
    moe_width = cfg.req("moe_intermediate_size")
    shared = cfg.opt("n_shared_experts")
    first_dense = cfg.opt("first_k_dense_replace")
    freq = cfg.opt("moe_layer_freq", 1) or 1
    fields.update(
        head_dim=nope + rope, intermediate_size=cfg.req("intermediate_size"),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False),
        attention_bias=cfg.flag("attention_bias", False),
        q_lora_rank=cfg.opt("q_lora_rank"), kv_lora_rank=cfg.req("kv_lora_rank"),
        qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=cfg.req("v_head_dim"),
        num_experts=_experts(cfg), num_experts_per_tok=cfg.req("num_experts_per_tok"),
        moe_intermediate_size=moe_width, n_shared_experts=shared,
        shared_expert_intermediate_size=shared * moe_width, router_bias=True,
        moe_layers=tuple(i >= first_dense and i % freq == 0 for i in range(layers)),
        num_nextn_predict_layers=cfg.opt("num_nextn_predict_layers"),
        layer_types=("full_attention",) * layers,
    )
    return fields


def _gpt_oss(cfg: _Reader, model_type: str) -> dict:
    """gpt_oss. Source: transformers modeling_gpt_oss.py (q/k/v/o with bias, `sinks` of
    num_attention_heads per layer, router Linear(h,E) with bias, experts gate_up_proj E x h x 2I
    + bias, down_proj E x I x h + bias)."""
    fields = _llama(cfg, model_type)
    experts = cfg.req("num_local_experts") if "num_local_experts" in cfg.raw else _experts(cfg)
    top_k = cfg.raw.get("num_experts_per_tok", cfg.raw.get("experts_per_token"))
    if top_k is None:
        raise SpecError("missing key", file=cfg.file, key="num_experts_per_tok")
    fields.update(
        attention_bias=True, attention_out_bias=True, attention_sinks=True,
        num_experts=experts, num_experts_per_tok=int(top_k),
        moe_intermediate_size=cfg.req("intermediate_size"), router_bias=True, expert_bias=True,
        moe_layers=(True,) * fields["num_hidden_layers"], sliding_window=cfg.opt("sliding_window"),
    )
    return fields


def _classic(cfg: _Reader, model_type: str) -> dict:
    """gpt (GPT-3 / Megatron GPT / MT-NLG), gpt2, opt, bloom. Source: Radford et al. 2019 / Brown
    et al. 2020 block; transformers modeling_gpt2.py, modeling_opt.py (learned positions with an
    offset of 2 rows), modeling_bloom.py (ALiBi, word_embeddings_layernorm)."""
    raw = dict(cfg.raw)
    aliases = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
               "n_positions": "max_position_embeddings", "n_inner": "intermediate_size",
               "ffn_dim": "intermediate_size"}
    for old, new in aliases.items():
        if raw.get(old) is not None and raw.get(new) is None:
            raw[new] = raw[old]
    if model_type == "bloom" and raw.get("max_position_embeddings") is None:
        raw["max_position_embeddings"] = raw.get("seq_length", 2048)
    cfg = _Reader(raw, cfg.file)
    fields = _attention_core(cfg)
    hidden = fields["hidden_size"]
    positions = fields["max_position_embeddings"]
    alibi = model_type == "bloom"
    fields.update(
        intermediate_size=cfg.opt("intermediate_size") or 4 * hidden,
        tie_word_embeddings=cfg.flag("tie_word_embeddings", True),
        norm_type="layernorm", gated_mlp=False, hidden_act=str(raw.get("activation_function") or "gelu"),
        attention_bias=True, attention_out_bias=True, mlp_bias=True,
        position_embedding_type="alibi" if alibi else "learned",
        position_embedding_rows=0 if alibi else positions + (2 if model_type == "opt" else 0),
        embedding_norm=alibi, layer_types=("full_attention",) * fields["num_hidden_layers"],
    )
    return fields


def _falcon(cfg: _Reader, model_type: str) -> dict:
    """falcon. Source: transformers modeling_falcon.py (fused query_key_value of
    h x (a + 2 kv) d; `new_decoder_architecture` uses ln_attn + ln_mlp; bias flag; 4h GELU MLP)."""
    raw = dict(cfg.raw)
    if raw.get("num_key_value_heads") is None:
        raw["num_key_value_heads"] = raw.get("num_kv_heads") or (1 if raw.get("multi_query") else None)
    raw.setdefault("max_position_embeddings", 2048)
    cfg = _Reader(raw, cfg.file)
    fields = _attention_core(cfg)
    bias = cfg.flag("bias", False)
    new_arch = cfg.flag("new_decoder_architecture", False)
    fields.update(
        intermediate_size=cfg.opt("ffn_hidden_size") or 4 * fields["hidden_size"],
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
    fields.update(norm_type="layernorm", gated_mlp=False, hidden_act=str(cfg.raw.get("hidden_act", "relu2")))
    return fields


_BUILDERS = {
    "llama": _llama, "mistral": _llama, "qwen2": _llama, "qwen3": _llama,
    "mixtral": _moe, "qwen2_moe": _moe, "qwen3_moe": _moe, "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss, "classic": _classic, "falcon": _falcon, "nemotron": _nemotron,
}


def _validate(spec: ModelSpec, file: str) -> None:
    """Impossible combinations, each as one SpecError naming the key and value."""
    if spec.num_attention_heads % spec.num_key_value_heads:
        raise SpecError(f"num_attention_heads {spec.num_attention_heads} is not divisible by "
                        f"num_key_value_heads {spec.num_key_value_heads}", file=file, key="num_key_value_heads")
    if spec.padded_vocab_size < spec.vocab_size:
        raise SpecError(f"padded_vocab_size {spec.padded_vocab_size} is below vocab_size {spec.vocab_size}",
                        file=file, key="padded_vocab_size")
    if spec.is_moe and not 0 < spec.num_experts_per_tok <= spec.num_experts:
        raise SpecError(f"num_experts_per_tok {spec.num_experts_per_tok} must be between 1 and the "
                        f"{spec.num_experts} experts", file=file, key="num_experts_per_tok")
    if spec.is_moe and spec.moe_layers and not any(spec.moe_layers):
        raise SpecError("no layer is a MoE layer with these settings", file=file, key="first_k_dense_replace")


def to_dict(spec: ModelSpec) -> dict:
    """Plain dict of the spec (for json/yaml output)."""
    data = dataclasses.asdict(spec)
    data["moe_layers"] = list(spec.moe_layers)
    data["layer_types"] = list(spec.layer_types)
    return data
