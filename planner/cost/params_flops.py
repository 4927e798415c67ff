"""Exact parameter counts, FLOPs per token and KV-cache bytes per token.

Parameter counts equal what `transformers` instantiates for the same config (every weight and
bias, norms, routers, LM head unless tied). Per-layer terms are kept apart because parallelism
splits them differently: attention, dense MLP and shared experts split over TP; routed experts over
EP (and expert TP); router and norms replicate.

FLOPs convention (Source: Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1;
Chowdhery et al. 2022, PaLM, Appendix B): a forward pass costs 2 FLOPs per active parameter used in
a matrix multiply (every parameter except the input embedding lookup, norms and biases are counted
as in Kaplan, i.e. 2 per active non-embedding parameter, LM head included) plus the attention
score/value term 2·s_ctx·(d_qk + d_v)·a per layer per token. Training = 3 × forward (backward is 2×);
full recomputation adds one more forward (4 ×) and counts toward HFU, not MFU. MFU follows PaLM
Appendix B: model FLOPs without recomputation and without the causal-mask discount.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.model import ModelSpec, spec_memo


@dataclass(frozen=True, kw_only=True)
class LayerParams:
    """Parameters of one decoder block, by the part that parallelism splits differently."""

    attention: int
    """Q/K/V/O projections (incl. MLA LoRA projections and their norms, biases, q/k norms, sinks)."""
    dense_mlp: int
    """Dense MLP (0 in MoE layers)."""
    routed_experts: int
    """All routed experts of the layer (E × one expert)."""
    shared_experts: int
    """Shared experts (+ their gate)."""
    router: int
    """Router weight (+ bias / score-correction bias)."""
    norms: int
    """Block norms (input and post-attention)."""
    expert_size: int = 0
    """Parameters of one routed expert (for active counts)."""

    @property
    def total(self) -> int:
        """Parameters of the block, count."""
        return self.attention + self.dense_mlp + self.routed_experts + self.shared_experts + self.router + self.norms

    def active(self, top_k: int) -> int:
        """Parameters one token touches: everything but the routed experts it is not sent to."""
        return self.total - self.routed_experts + top_k * self.expert_size


@dataclass(frozen=True, kw_only=True)
class ParamCounts:
    """Whole-model parameter counts."""

    embedding: int
    """Input word embedding (padded rows x embedding_width) + learned positions + embedding norm
    + OPT's project_in (word_embed_proj_dim x h, when word_embed_proj_dim != hidden_size)."""
    lm_head: int
    """Output projection (0 when tied to the embedding) + OPT's project_out (h x word_embed_proj_dim,
    when word_embed_proj_dim != hidden_size)."""
    final_norm: int
    """Norm after the last block (0 for post-LN OPT: do_layer_norm_before false)."""
    layers: tuple[LayerParams, ...]
    mtp: int = 0
    """Multi-token-prediction module(s) (DeepSeek-V3, GLM-4.5), counted only on request."""
    top_k: int = 0

    @property
    def total(self) -> int:
        """Parameters of the model (MTP only when counted), count."""
        return self.embedding + self.lm_head + self.final_norm + sum(l.total for l in self.layers) + self.mtp

    @property
    def active_per_token(self) -> int:
        """Total minus the routed experts a token does not visit (embedding and LM head included)."""
        inactive = sum(l.routed_experts - self.top_k * l.expert_size for l in self.layers)
        return self.total - inactive


def _norm(spec: ModelSpec, width: int) -> int:
    """RMSNorm holds a weight; LayerNorm a weight and a bias."""
    return width * (2 if spec.norm_type == "layernorm" else 1)


def _mlp(spec: ModelSpec, width: int, bias: bool) -> int:
    """Dense MLP: gated (gate, up, down) or plain (up, down), with optional biases."""
    h = spec.hidden_size
    if spec.gated_mlp:
        return 3 * h * width + (2 * width + h if bias else 0)
    return 2 * h * width + (width + h if bias else 0)


def _attention(spec: ModelSpec) -> int:
    """Attention projections of one block.

    Source: transformers modeling_llama.py (q h→a·d, k/v h→kv·d, o a·d→h), modeling_deepseek_v3.py
    (MLA, also Kimi K2: q_a h→q_lora, q_a_layernorm, q_b q_lora→a(nope+rope), kv_a_proj_with_mqa
    h→kv_lora+rope, kv_a_layernorm, kv_b kv_lora→a(nope+v), o a·v→h), modeling_qwen3.py (q_norm,
    k_norm of d), modeling_glm4_moe.py @a0699c97 (q/k/v bias, o_proj without bias, q_norm/k_norm of
    d when use_qk_norm; partial RoPE adds no weight), modeling_gpt_oss.py (sinks: a per layer).
    """
    h, a, kv = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads
    if spec.is_mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        if spec.q_lora_rank:
            q = h * spec.q_lora_rank + spec.q_lora_rank + spec.q_lora_rank * a * qk
        else:
            q = h * a * qk
        kv_part = h * (spec.kv_lora_rank + spec.qk_rope_head_dim) + spec.kv_lora_rank
        kv_part += spec.kv_lora_rank * a * (spec.qk_nope_head_dim + spec.v_head_dim)
        return q + kv_part + a * spec.v_head_dim * h
    d = spec.head_dim
    qkv = h * (a + 2 * kv) * d + ((a + 2 * kv) * d if spec.attention_bias else 0)
    out = a * d * h + (h if spec.attention_out_bias else 0)
    extras = (2 * d if spec.qk_norm else 0) + (a if spec.attention_sinks else 0)
    return qkv + out + extras


def _layer(spec: ModelSpec, index: int) -> LayerParams:
    h = spec.hidden_size
    is_moe = spec.is_moe and spec.moe_layers[index]
    norms = spec.norms_per_layer * _norm(spec, h)
    attention = _attention(spec)
    if not is_moe:
        return LayerParams(attention=attention, dense_mlp=_mlp(spec, spec.intermediate_size, spec.mlp_bias),
                           routed_experts=0, shared_experts=0, router=0, norms=norms)
    expert = _mlp(spec, spec.moe_intermediate_size, spec.expert_bias)
    shared = 0
    if spec.shared_expert_intermediate_size:
        shared = _mlp(spec, spec.shared_expert_intermediate_size, False) + (h if spec.shared_expert_gate else 0)
    router = h * spec.num_experts + (spec.num_experts if spec.router_bias else 0)
    return LayerParams(attention=attention, dense_mlp=0, routed_experts=spec.num_experts * expert,
                       shared_experts=shared, router=router, norms=norms, expert_size=expert)


def layer_tensors(spec: ModelSpec, index: int) -> tuple[tuple[str, int], ...]:
    """Every parameter tensor of decoder block `index` as the Hugging Face model holds it (weights and
    biases apart, q / k / v and gate / up / down unfused, each routed expert its own tensors), as
    (placement group, elements) pairs: dense (attention incl. its q/k/MLA norms and sinks, dense MLP,
    shared experts), replicated (block norms, router), expert (routed experts). They sum to the
    block's `LayerParams.total`; what reads them is per-tensor (DeepSpeed ZeRO-3's persistence
    threshold, `cost.memory.persistent_parameter_bytes`).
    Source: the same transformers modeling files as `_attention`, `_mlp` and `_layer`."""
    h, a, kv = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads
    dense: list[int] = []
    if spec.is_mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        dense += ([h * spec.q_lora_rank, spec.q_lora_rank, spec.q_lora_rank * a * qk] if spec.q_lora_rank
                  else [h * a * qk])
        dense += [h * (spec.kv_lora_rank + spec.qk_rope_head_dim), spec.kv_lora_rank,
                  spec.kv_lora_rank * a * (spec.qk_nope_head_dim + spec.v_head_dim), a * spec.v_head_dim * h]
    else:
        d = spec.head_dim
        dense += [h * a * d, h * kv * d, h * kv * d, a * d * h]
        dense += [a * d, kv * d, kv * d] if spec.attention_bias else []
        dense += [h] if spec.attention_out_bias else []
        dense += [d, d] if spec.qk_norm else []
        dense += [a] if spec.attention_sinks else []
    norm = [h] * (_norm(spec, h) // h)
    replicated = norm * spec.norms_per_layer
    expert: list[int] = []
    if spec.is_moe and spec.moe_layers[index]:
        replicated += [h * spec.num_experts] + ([spec.num_experts] if spec.router_bias else [])
        expert = list(_mlp_tensors(spec, spec.moe_intermediate_size, spec.expert_bias)) * spec.num_experts
        if spec.shared_expert_intermediate_size:
            dense += _mlp_tensors(spec, spec.shared_expert_intermediate_size, False)
            dense += [h] if spec.shared_expert_gate else []
    else:
        dense += _mlp_tensors(spec, spec.intermediate_size, spec.mlp_bias)
    return (tuple(("dense", n) for n in dense) + tuple(("replicated", n) for n in replicated)
            + tuple(("expert", n) for n in expert))


def _mlp_tensors(spec: ModelSpec, width: int, bias: bool) -> list[int]:
    """The tensors of `_mlp`: gate / up / down weights (plain: up / down) and their biases."""
    h, n = spec.hidden_size, 3 if spec.gated_mlp else 2
    weights = [h * width] * n
    return weights + ([width] * (n - 1) + [h] if bias else [])


def count_params(spec: ModelSpec, *, include_mtp: bool = False) -> ParamCounts:
    """Exact parameter counts of `spec` (computed once per spec object; ModelSpec and ParamCounts
    are frozen, so the cached result is shared safely).

    Args:
        spec: the model.
        include_mtp: add the multi-token-prediction modules of DeepSeek-V3 / GLM-4.5 (each: enorm,
            hnorm, eh_proj 2h→h, one decoder block with a MoE MLP, shared-head norm; embedding and
            head shared, so not counted again). transformers does not instantiate them (GLM-4.5:
            Glm4MoeModel `_keys_to_ignore_on_load_unexpected` drops checkpoint layers 92 / 46), so
            the default total leaves them out; the checkpoint holds them. Source: DeepSeek-V3
            technical report §2.2 and README_WEIGHTS.md; transformers modeling_glm4_moe.py @a0699c97;
            vLLM glm4_moe_mtp.py @028aedf6 (Glm4MoeMultiTokenPredictorLayer: enorm, hnorm, eh_proj
            Linear(2h, h, bias=False), shared_head.norm, mtp_block = one Glm4MoeDecoderLayer; it
            also loads a `shared_head.head` vocab x h tensor of the checkpoint, a copy of the head
            that this count, like the DeepSeek-V3 one, does not add).

    Returns:
        ParamCounts (counts of scalars, not bytes).
    """
    memo = spec_memo(spec)
    key = ("count_params", include_mtp)
    if key not in memo:
        memo[key] = _count_params(spec, include_mtp)
    return memo[key]


def _projection(spec: ModelSpec) -> int:
    """OPT's project_in (and, equally, project_out): word_embed_proj_dim x h, bias-free, present only
    when the embedding width differs from hidden_size. Source: transformers modeling_opt.py OPTDecoder."""
    e, h = spec.embedding_width, spec.hidden_size
    return e * h if e != h else 0


def _count_params(spec: ModelSpec, include_mtp: bool) -> ParamCounts:
    """Source: transformers modeling_*.py of the family (see the ModelSpec loader's builders); OPT
    (OPTDecoder): embed_tokens vocab x word_embed_proj_dim, positions (max_pos + 2) x h, project_in,
    project_out, final_layer_norm only when pre-LN, LM head word_embed_proj_dim -> vocab tied."""
    h = spec.hidden_size
    embedding = spec.padded_vocab_size * spec.embedding_width + spec.position_embedding_rows * h
    embedding += _projection(spec)
    if spec.embedding_norm:
        embedding += _norm(spec, h)
    lm_head = (0 if spec.tie_word_embeddings else spec.padded_vocab_size * spec.embedding_width)
    lm_head += _projection(spec)
    layers = tuple(_layer(spec, i) for i in range(spec.num_hidden_layers))
    mtp = 0
    if include_mtp and spec.num_nextn_predict_layers:
        moe_index = max(i for i in range(spec.num_hidden_layers) if not spec.is_moe or spec.moe_layers[i])
        block = _layer(spec, moe_index).total
        mtp = spec.num_nextn_predict_layers * (block + 2 * h * h + 3 * _norm(spec, h))
    final_norm = _norm(spec, h) if spec.final_norm else 0
    return ParamCounts(embedding=embedding, lm_head=lm_head, final_norm=final_norm, layers=layers,
                       mtp=mtp, top_k=spec.num_experts_per_tok)


def _attention_context(spec: ModelSpec, index: int, seq_len: int) -> int:
    """Keys each query attends to on average at full context: the window on sliding layers."""
    if spec.layer_types and spec.layer_types[index] == "sliding_attention" and spec.sliding_window:
        return min(seq_len, spec.sliding_window)
    return seq_len


@dataclass(frozen=True, kw_only=True)
class FlopsPerToken:
    """FLOPs per token (PaLM Appendix B convention; see module docstring)."""

    forward: int
    """2 × active matmul parameters + attention term."""
    attention_forward: int
    """The attention score/value part of `forward`: Σ_layers 2·s_ctx·a·(d_qk + d_v)."""
    training: int
    """3 × forward (model FLOPs; the numerator of MFU)."""
    training_full_recompute: int
    """4 × forward (hardware FLOPs with full recomputation; the numerator of HFU)."""
    attention_forward_causal: int
    """The attention term with causal masking: query i attends to min(i, window) keys, averaged
    over the sequence ((s+1)/2 keys on full layers). What an efficient causal kernel executes."""
    mtp_forward: int = 0
    """The part of `forward` the trained MTP layers add (`mtp_forward_flops`; 0 without them)."""


def flops_per_token(spec: ModelSpec, seq_len: int, mtp_layers: int = 0) -> FlopsPerToken:
    """FLOPs per token at sequence length `seq_len`, with `mtp_layers` multi-token-prediction
    layers trained (`placement.mtp.mtp_layers`; their FLOPs are `mtp_forward_flops`, part of
    `forward` and of the attention terms).

    Source: Kaplan et al. 2020 Table 1 (C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn per token, with
    d_attn = a·d for each of QK^T and AV); PaLM (Chowdhery et al. 2022) Appendix B (6N + 12·L·H·Q·T
    for training, no causal discount).

    Args:
        spec: the model.
        seq_len: tokens per sequence (context of each query, before causal masking).
        mtp_layers: MTP layers trained (>= 0).
    """
    counts = count_params(spec)
    matmul = counts.active_per_token - counts.embedding - counts.final_norm
    matmul -= sum(l.norms for l in counts.layers)
    if spec.tie_word_embeddings:
        matmul += spec.padded_vocab_size * spec.embedding_width  # the tied head is still a matmul
    matmul += _projection(spec)  # OPT's project_in is a matmul, though counted in `embedding`
    d_qk, d_v = _head_dims(spec)
    a = spec.num_attention_heads
    attention = sum(2 * _attention_context(spec, i, seq_len) * a * (d_qk + d_v)
                    for i in range(spec.num_hidden_layers))
    causal = sum(2 * _causal_keys_x2(spec, i, seq_len) * a * (d_qk + d_v) // (2 * seq_len)
                 for i in range(spec.num_hidden_layers))
    mtp_matmul, mtp_attention, mtp_causal = mtp_forward_flops(spec, seq_len, mtp_layers)
    attention += mtp_attention
    causal += mtp_causal
    forward = 2 * matmul + attention + mtp_matmul
    return FlopsPerToken(forward=forward, attention_forward=attention, training=3 * forward,
                         training_full_recompute=4 * forward, attention_forward_causal=causal,
                         mtp_forward=mtp_matmul + mtp_attention)


def mtp_forward_flops(spec: ModelSpec, seq_len: int, mtp_layers: int) -> tuple[int, int, int]:
    """(matmul, attention, causal attention) forward FLOPs per token of `mtp_layers` MTP layers, in
    `flops_per_token`'s convention: each layer runs one decoder layer of the last layer's kind
    (its active matmul parameters x 2, router included, norms excluded, and that layer's attention
    term), eh_proj (2h -> h: 2 x 2h^2) and the output layer again (2 x padded vocab x h).
    What each framework logs: Megatron-LM counts the MTP layers as decoder layers of the last
    layer's kind, eh_proj, the three norms (6 x 3h, < 1e-6 of the total, left out here) and the
    logits once more per MTP layer; it counts no router FLOPs at all, MTP or not
    (NVIDIA/Megatron-LM@d98e8a6 megatron/training/training.py `num_floating_point_operations`
    l. 1042-1046: num_layers + mtp_num_layers; l. 1288-1297: 'MTP norms and proj' 3h + 2h^2;
    l. 1298-1303: logits x (mtp_num_layers + 1)). torchtitan's 6 x parameters counts its MTP
    modules' parameters once (the head only once) and no MTP attention
    (pytorch/torchtitan@b5bcd76 torchtitan/models/utils.py get_moe_model_nparams_and_flops
    l. 493-545: every named parameter, attention over `model_config.layers` only), but the planner
    costs MTP only under Megatron (`placement.mtp.TRAINED_BY_DEFAULT`, rule `mtp_layers`).
    Source: `placement.mtp` (what one MTP layer is)."""
    if not mtp_layers:
        return 0, 0, 0
    counts, h = count_params(spec), spec.hidden_size
    index = spec.num_hidden_layers - 1  # `placement.mtp.mtp_block_index`
    layer = counts.layers[index]
    matmul = layer.active(spec.num_experts_per_tok) - layer.norms + 2 * h * h
    matmul += spec.padded_vocab_size * spec.embedding_width
    d_qk, d_v = _head_dims(spec)
    a = spec.num_attention_heads
    attention = 2 * _attention_context(spec, index, seq_len) * a * (d_qk + d_v)
    causal = 2 * _causal_keys_x2(spec, index, seq_len) * a * (d_qk + d_v) // (2 * seq_len)
    return mtp_layers * 2 * matmul, mtp_layers * attention, mtp_layers * causal


def _head_dims(spec: ModelSpec) -> tuple[int, int]:
    """(query/key, value) head dimensions: MLA's nope + rope and v_head_dim, else head_dim."""
    if spec.is_mla:
        return spec.qk_nope_head_dim + spec.qk_rope_head_dim, spec.v_head_dim
    return spec.head_dim, spec.head_dim


def _causal_keys_x2(spec: ModelSpec, index: int, seq_len: int) -> int:
    """2 × Σ_{i=1..s} min(i, w): twice the keys all queries of a causal sequence attend to."""
    w = _attention_context(spec, index, seq_len)
    return w * (w + 1) + 2 * (seq_len - w) * w


@dataclass(frozen=True, kw_only=True)
class KVCacheBytes:
    """KV-cache bytes per token of context for one sequence."""

    per_token: int
    """Bytes each extra token adds at long context (sliding layers excluded: they hold a window)."""
    per_token_all_layers: int
    """Bytes per token if every layer kept the full context (what most calculators print)."""
    sliding_window_bytes: int
    """Fixed bytes of the sliding layers once their window is full."""

    def for_context(self, tokens: int, window: int) -> int:
        """Bytes for one sequence of `tokens` tokens, sliding layers capped at `window` tokens."""
        sliding_per_token = self.per_token_all_layers - self.per_token
        return self.per_token * tokens + sliding_per_token * min(tokens, window or tokens)


def kv_cache_bytes_per_token(spec: ModelSpec, dtype_bytes: int = 2) -> KVCacheBytes:
    """KV-cache bytes per token.

    Source: GQA caches K and V: 2·n_kv·d per layer (Ainslie et al. 2023); MLA caches the compressed
    latent and the decoupled RoPE key: kv_lora_rank + qk_rope_head_dim per layer (DeepSeek-V2 report
    §2.1, Table 1); sliding-window layers keep only the window (Beltagy et al. 2020; gpt-oss).

    Args:
        spec: the model.
        dtype_bytes: bytes per cached element (bf16: 2, fp8: 1).
    """
    if spec.is_mla:
        per_layer = (spec.kv_lora_rank + spec.qk_rope_head_dim) * dtype_bytes
    else:
        per_layer = 2 * spec.num_key_value_heads * spec.head_dim * dtype_bytes
    sliding = sum(1 for t in spec.layer_types if t == "sliding_attention") if spec.sliding_window else 0
    full = spec.num_hidden_layers - sliding
    return KVCacheBytes(per_token=full * per_layer, per_token_all_layers=spec.num_hidden_layers * per_layer,
                        sliding_window_bytes=sliding * per_layer * spec.sliding_window)
