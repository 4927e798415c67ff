"""Plain-dict summaries of a model for `planner models` and `planner models show`.

Computes nothing of its own: it gathers planner.cost.params_flops results into the JSON shape the
CLI promises (issue 2: name, family, params {total, embedding, lm_head, active_per_token, per-layer
breakdown}, kv_cache_bytes_per_token (bf16), flops_per_token).
"""

from __future__ import annotations

from planner.cost.params_flops import LayerParams, count_params, flops_per_token, kv_cache_bytes_per_token
from planner.specs.model import ModelSpec

MFU_CONVENTION = (
    "MFU = model FLOPs per token x tokens/s / peak FLOP/s, with model FLOPs = training = 3 x forward, "
    "forward = 2 x active matmul parameters (LM head included, embedding lookup and norms excluded) "
    "+ attention 2*seq_len*heads*(d_qk + d_v) per layer, no causal-mask discount, no recomputation "
    "(PaLM, Chowdhery et al. 2022, Appendix B); recomputation counts toward HFU only; plan, explain "
    "and check print MFU in the convention of the framework planned for (Megatron-LM: causal attention; "
    "torchtitan, DeepSpeed: this one)"
)
"""Source: Chowdhery et al. 2022 (PaLM) Appendix B; Kaplan et al. 2020 Table 1."""

CAUSAL_NOTE_FRACTION = 0.05
"""The causal-discounted MFU is printed beside the convention's when it is this much (relative) or
more lower: at 4,096 tokens Llama-3.1-8B's attention is 12% of its model FLOPs, so the discount
is 6%; at 131,072 it is two thirds of the FLOPs and the discounted value a third lower."""


PALM_CONVENTION = "model FLOPs per PaLM App. B (6 x active params + attention, no causal discount, no recompute)"
"""MFU_CONVENTION's short form, as the output names it."""

FRAMEWORK_CAUSAL = {"megatron": True, "torchtitan": False, "deepspeed": False}
"""Whether the MFU a framework logs counts attention with the causal-mask discount: the convention a
plan's MFU and TFLOP/s columns use under that framework's conventions, so a user compares them with
the figures their run prints.
Source: Megatron-LM@d98e8a6 megatron/training/training.py num_floating_point_operations
(the core-attention term '/ 2 # causal mask (only half of the mask is non-zero)', s^2/2 per
sequence; `flops_per_token`'s causal count is (s + 1) / 2 keys per query, 1/s apart; Megatron-LM
logged the full square from 2748e7c7d4 (2023-11-26, `--log-throughput`, s / 6h) until 8873b55d6a
(2025-03-06, s / 2h: "Fixes in number of floating-point operation estimates"), so a Megatron TFLOP/s
published between those dates counts the full square);
torchtitan@b5bcd76 torchtitan/models/utils.py get_dense_model_nparams_and_flops /
get_moe_model_nparams_and_flops (6 x params + 6 x layers x heads x (d_qk + d_v) x seq_len, 'we follow
the convention and do not account for sparsity in causal attention', PaLM's); DeepSpeed@edaa722
deepspeed/profiling/flops_profiler/profiler.py _attn_flops_compute (every query x every key of
scaled_dot_product_attention: no discount)."""


_LOGGED = {"megatron": "as Megatron-LM logs them", "torchtitan": "as torchtitan logs them",
           "deepspeed": "as DeepSpeed's flops profiler counts them"}


def framework_convention(framework: str, mtp_layers: int = 0) -> str:
    """The MFU convention `framework` logs in, as the output names it (`FRAMEWORK_CAUSAL`), naming
    the `mtp_layers` trained MTP layers it counts (`params_flops.mtp_forward_flops`)."""
    mtp = (f" + {mtp_layers} MTP layer{'s' * (mtp_layers != 1)} with the output layer again"
           if mtp_layers else "")
    if FRAMEWORK_CAUSAL[framework]:
        return (f"model FLOPs with causal attention, {_LOGGED[framework]} (6 x active params + "
                f"attention over the keys a causal query sees{mtp}, no recompute)")
    return (f"PaLM App. B model FLOPs, {_LOGGED[framework]} (6 x active params + attention{mtp}, "
            f"no causal discount, no recompute)")


def mfu_basis(spec: ModelSpec, peak_tflops: dict[str, float], precision: str, seq_len: int,
              framework: str, mtp_layers: int = 0) -> dict:
    """What an MFU figure of `spec` at `seq_len` under `precision` is measured against:
    {convention: MFU_CONVENTION's short form (PALM_CONVENTION; the `mfu` and `tflops_per_gpu` the
    commands return are in it), peak_precision, peak_tflops (the dense peak MFU divides by: the
    compute dtype's, `cost.compute.peak_flops`), bf16_peak_tflops (None when the GPU lists none),
    causal_fraction: model FLOPs with causal attention (query i attends to min(i, window) keys,
    what a causal kernel executes) / model FLOPs without the discount, in (0, 1],
    framework_convention: the convention `framework` logs its MFU in (`framework_convention`),
    framework_fraction: its FLOPs / PALM_CONVENTION's (causal_fraction or 1)}.
    Multiply an MFU by causal_fraction for the causal-discounted value, by framework_fraction for
    the framework's (what the plan table prints), by peak_tflops / bf16_peak_tflops for the value
    against the bf16 peak (torchtitan's and NVIDIA's fp8 figures).
    `mtp_layers`: the MTP layers the layout trains (`placement.mtp.mtp_layers`); both conventions
    then count them as Megatron-LM logs them (`params_flops.mtp_forward_flops`), and the MFU the
    commands return includes them (`step_time._summary`).
    Source: MFU_CONVENTION; FRAMEWORK_CAUSAL; `flops_per_token` (attention_forward_causal)."""
    f = flops_per_token(spec, seq_len, mtp_layers)
    causal = (f.forward - f.attention_forward + f.attention_forward_causal) / f.forward
    own = FRAMEWORK_CAUSAL[framework]
    return {"convention": PALM_CONVENTION,
            "peak_precision": precision, "peak_tflops": peak_tflops[precision],
            "bf16_peak_tflops": peak_tflops.get("bf16"), "causal_fraction": causal,
            "framework": framework, "framework_convention": framework_convention(framework, mtp_layers),
            "framework_fraction": causal if own else 1.0}


def model_row(spec: ModelSpec) -> dict:
    """One catalog row: name, family, total/active params, shape, context."""
    counts = count_params(spec)
    return dict(name=spec.name, family=spec.family, params_total=counts.total,
                params_active=counts.active_per_token, layers=spec.num_hidden_layers,
                hidden_size=spec.hidden_size, heads=spec.num_attention_heads,
                kv_heads=spec.num_key_value_heads, context=spec.max_position_embeddings)


def model_summary(spec: ModelSpec, *, seq_len: int, kv_dtype_bytes: int = 2) -> dict:
    """Everything `models show` reports, as a plain dict (bf16 KV cache by default)."""
    counts = count_params(spec)
    flops = flops_per_token(spec, seq_len)
    kv = kv_cache_bytes_per_token(spec, kv_dtype_bytes)
    mtp = count_params(spec, include_mtp=True).mtp
    params = dict(total=counts.total, embedding=counts.embedding, lm_head=counts.lm_head,
                  final_norm=counts.final_norm, active_per_token=counts.active_per_token,
                  per_layer=layer_groups(spec, counts.layers))
    if mtp:
        params["mtp_excluded"] = mtp
    return dict(
        name=spec.name, family=spec.family, source=spec.source, architecture=_architecture(spec),
        params=params, kv_cache_bytes_per_token=kv.per_token,
        kv_cache=dict(dtype={2: "bf16", 1: "fp8", 4: "fp32"}.get(kv_dtype_bytes, f"{kv_dtype_bytes}B"),
                      bytes_per_token=kv.per_token, bytes_per_token_all_layers=kv.per_token_all_layers,
                      sliding_window_tokens=spec.sliding_window if kv.sliding_window_bytes else 0,
                      sliding_window_bytes=kv.sliding_window_bytes),
        flops_per_token=dict(seq_len=seq_len, forward=flops.forward, attention_forward=flops.attention_forward,
                             attention_forward_causal=flops.attention_forward_causal,
                             training=flops.training, training_full_recompute=flops.training_full_recompute),
        mfu_convention=MFU_CONVENTION,
    )


def _architecture(spec: ModelSpec) -> dict:
    arch = dict(hidden_size=spec.hidden_size, num_hidden_layers=spec.num_hidden_layers,
                num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
                head_dim=spec.head_dim, intermediate_size=spec.intermediate_size,
                vocab_size=spec.vocab_size, padded_vocab_size=spec.padded_vocab_size,
                max_position_embeddings=spec.max_position_embeddings,
                tie_word_embeddings=spec.tie_word_embeddings)
    if spec.is_moe:
        arch.update(num_experts=spec.num_experts, num_experts_per_tok=spec.num_experts_per_tok,
                    moe_intermediate_size=spec.moe_intermediate_size, n_shared_experts=spec.n_shared_experts)
    if spec.is_mla:
        arch.update(q_lora_rank=spec.q_lora_rank, kv_lora_rank=spec.kv_lora_rank,
                    qk_rope_head_dim=spec.qk_rope_head_dim)
    sliding = sum(t == "sliding_attention" for t in spec.layer_types)
    if spec.sliding_window and sliding:
        arch.update(sliding_window=spec.sliding_window, sliding_attention_layers=sliding)
    return arch


def layer_groups(spec: ModelSpec, layers: tuple[LayerParams, ...]) -> list[dict]:
    """Runs of consecutive identical layers: [{layers: "0-2", kind: "dense", count, attention, ...}]."""
    groups: list[dict] = []
    start = 0
    for i in range(1, len(layers) + 1):
        if i < len(layers) and layers[i] == layers[start]:
            continue
        layer = layers[start]
        span = f"{start}" if i - 1 == start else f"{start}-{i - 1}"
        groups.append(dict(layers=span, count=i - start, kind="moe" if layer.routed_experts else "dense",
                           attention=layer.attention, dense_mlp=layer.dense_mlp,
                           routed_experts=layer.routed_experts, shared_experts=layer.shared_experts,
                           router=layer.router, norms=layer.norms, total=layer.total,
                           expert_size=layer.expert_size))
        start = i
    return groups
