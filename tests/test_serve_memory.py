"""Serving memory (planner/cost/serving.py) against published numbers and hand arithmetic.

KV bytes per token: tests/data/reference/models.yaml `kv_cache_bytes_per_token_bf16` (copy of
shared/reference), which counts every layer at full context (its gpt-oss note says so); fp8 caches
one byte per element, so its figure is exactly half (element size of float8_e4m3fn).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.cost import serving as sv
from planner.specs.model import load_model

REFERENCE = Path(__file__).parent / "data" / "reference" / "models.yaml"
CATALOG = {m["name"]: m for m in yaml.safe_load(REFERENCE.read_text())["models"]}
CATALOG_NAME = {"Llama-3.1-8B": "llama-3.1-8b", "Llama-3.1-70B": "llama-3.1-70b", "Llama-3.1-405B": "llama-3.1-405b",
                "Mixtral-8x7B": "mixtral-8x7b", "Mixtral-8x22B": "mixtral-8x22b", "DeepSeek-V3": "deepseek-v3",
                "Qwen2.5-72B": "qwen2.5-72b", "Qwen3-235B-A22B": "qwen3-235b-a22b", "Qwen3-30B-A3B": "qwen3-30b-a3b",
                "gpt-oss-120b": "gpt-oss-120b", "GPT-3-175B": "gpt-3-175b", "BLOOM-176B": "bloom-176b",
                "OPT-175B": "opt-175b", "MT-NLG-530B": "mt-nlg-530b", "Falcon-180B": "falcon-180b",
                "Nemotron-4-340B": "nemotron-4-340b"}
GIB = 2**30
FIELD = {c["id"]: c for c in yaml.safe_load((Path(__file__).parent / "data" / "reference" / "field_cases.yaml").read_text())["cases"]}


def _all_layers(name: str, dtype: str) -> float:
    """KV bytes per token over every layer at full context (the reference's convention), tp=1."""
    spec = load_model(name)
    full, window = sv.kv_bytes_per_gpu(spec, sv.Instance(), dtype)
    return full + (window / spec.sliding_window if spec.sliding_window else 0)


@pytest.mark.parametrize("ref", sorted(CATALOG_NAME))
@pytest.mark.parametrize("dtype,per_byte", [("bf16", 2), ("fp8", 1)])
def test_kv_bytes_per_token_equal_reference(ref, dtype, per_byte):
    expected = CATALOG[ref]["kv_cache_bytes_per_token_bf16"] * per_byte // 2
    assert _all_layers(CATALOG_NAME[ref], dtype) == expected


BY_HAND = {
    "qwen3-32b": 64 * 2 * 8 * 128 * 2,     # 64 layers x (K, V) x 8 KV heads x 128 x 2 B
    "kimi-k2": 61 * (512 + 64) * 2,       # MLA: 61 layers x (kv_lora_rank + qk_rope_head_dim) x 2 B
    "glm-4.5": 92 * 2 * 8 * 128 * 2,      # 92 layers (the MTP layer has no serving cache here)
    "glm-4.5-air": 46 * 2 * 8 * 128 * 2,
}
"""bf16 KV bytes per token of catalog models the reference does not list, by hand from their configs."""


def test_every_catalog_model_is_covered():
    from planner.specs.model import catalog_names
    assert set(catalog_names()) == set(CATALOG_NAME.values()) | set(BY_HAND)


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_kv_bytes_by_hand_for_models_outside_the_reference(name):
    assert _all_layers(name, "bf16") == BY_HAND[name]
    assert _all_layers(name, "fp8") == BY_HAND[name] // 2


def test_gqa_split_and_replication_beyond_n_kv():
    spec = load_model("llama-3.1-8b")  # 8 KV heads: split over min(tp, 8), replicated beyond
    assert sv.kv_bytes_per_gpu(spec, sv.Instance(tp=4), "bf16")[0] == 131072 / 4
    assert sv.kv_bytes_per_gpu(spec, sv.Instance(tp=16), "bf16")[0] == 131072 / 8
    # attention DP 4 inside tp 8: attention TP 2
    assert sv.kv_bytes_per_gpu(spec, sv.Instance(tp=8, adp=4), "bf16")[0] == 131072 / 2


def test_mla_latent_not_split_by_tp():
    spec = load_model("deepseek-v3")  # 61 x (512 + 64) x 2 B, on every TP rank
    assert sv.kv_bytes_per_gpu(spec, sv.Instance(tp=8), "bf16")[0] == 61 * 576 * 2
    assert sv.kv_bytes_per_gpu(spec, sv.Instance(tp=8, pp=2), "bf16")[0] == pytest.approx(31 * 576 * 2)


def test_sliding_window_layers_capped():
    spec = load_model("gpt-oss-120b")  # FC-18: 18 full layers x 2 x 8 x 64 x 2 B = 36,864 B/token
    full, window = sv.kv_bytes_per_gpu(spec, sv.Instance(), "bf16")
    assert full == 36864
    assert window == 18 * 2 * 8 * 64 * 2 * 128  # 18 sliding layers hold 128 tokens


def test_llama_8b_bf16_weights_exact():
    spec = load_model("llama-3.1-8b")
    total = 8_030_261_248  # models.yaml derived_total_params; vocab 128,256 = 2004 x 64, no padding at tp 1, 2
    norms = 32 * 2 * 4096 + 4096
    assert sv.weight_bytes_per_gpu(spec, sv.Instance(), "bf16") == total * 2
    assert sv.weight_bytes_per_gpu(spec, sv.Instance(tp=2), "bf16") == ((total - norms) // 2 + norms) * 2


def test_fp8_weights_keep_embeddings_bf16():
    # FC-02: fp8 weights with bf16 embeddings and LM head; per-tensor scales are 4 B per tensor (not counted).
    spec = load_model("llama-3.1-70b")
    total, vocab = 70_553_706_496, 2 * 128256 * 8192
    norms = 80 * 2 * 8192 + 8192
    expected = (total - vocab - norms) * 1 + (vocab + norms) * 2
    assert sv.weight_bytes_per_gpu(spec, sv.Instance(), "fp8") == expected


@pytest.mark.parametrize("fmt,bytes_per_4096", [("int4", 4096 / 2 + 4096 / 128 * 2.5), ("mxfp4", 4096 / 2 + 4096 / 32),
                                                ("nvfp4", 4096 / 2 + 4096 / 16), ("fp8-block", 4096 + 4096 / 16384 * 4),
                                                ("int8", 4096 + 2 * 4096 / 4096), ("bf16", 8192)])
def test_scale_bytes(fmt, bytes_per_4096):
    assert sv.WEIGHT_FORMATS[fmt].bytes_for(4096, 4096) == pytest.approx(bytes_per_4096)


def test_mxfp4_applies_to_experts_only_with_kernel_padding():
    """gpt-oss-120b in MXFP4 on one GPU (FC-18: vLLM on H100 logs 'Model loading took 65.9651 GiB',
    vllm-project/vllm issues 23278 and 27508, Marlin MXFP4 backend). By hand: the experts are padded
    to hidden 3072 (multiple of 256) and intermediate 2944 (multiple of 128) (vLLM fused_moe/oracle/
    mxfp4.py); gate_up 2 x 2944 x 3072 + down 3072 x 2944 elements at 4 bits + 1 B per 32, biases
    2 x 2944 + 3072 in bf16; attention (with sinks), router, norms, embedding and LM head in bf16."""
    spec = load_model("gpt-oss-120b")
    per_expert = 3 * 3072 * 2944 * (0.5 + 1 / 32) + (2 * 2944 + 3072) * 2
    experts = 36 * 128 * per_expert
    unpadded = 36 * 128 * (2880 * 5760 + 5760 + 2880 * 2880 + 2880)  # gate_up + bias, down + bias
    rest = 116_829_156_672 - unpadded  # models.yaml derived_total_params
    vocab_pad = (-(-201088 // 64) * 64 - 201088) * 2880 * 2  # embedding and head rows padded to 64
    expected = experts + (rest + vocab_pad) * 2
    got = sv.weight_bytes_per_gpu(spec, sv.Instance(), "mxfp4")
    assert got == pytest.approx(expected, abs=2)
    # 65.90 GiB vs the 65.97 GiB reported: within 0.15 % (unpadded, the model said 60.7 GiB)
    assert abs(got / GIB - FIELD["FC-18"]["reported"]["weights_gib"]) / 65.97 < 0.0015


def test_mxfp4_padding_is_per_partition():
    """tp 8 (expert TP 8): intermediate 2880 / 8 = 360 -> 384 per rank; ep 8: whole experts, 16 per rank."""
    spec = load_model("gpt-oss-120b")
    tp8 = sv.routed_expert_bytes(spec, sv.Instance(tp=8), "mxfp4", 1)
    assert tp8 == pytest.approx(128 * (3 * 3072 * 384 * 17 / 32 + (2 * 384 + 3072) * 2))
    ep8 = sv.routed_expert_bytes(spec, sv.Instance(tp=8, ep=8), "mxfp4", 1)
    assert ep8 == pytest.approx(16 * (3 * 3072 * 2944 * 17 / 32 + (2 * 2944 + 3072) * 2))


def test_expert_parallel_splits_experts():
    spec = load_model("qwen3-235b-a22b")
    one = sv.weight_bytes_per_gpu(spec, sv.Instance(), "bf16")
    eight = sv.weight_bytes_per_gpu(spec, sv.Instance(tp=8, ep=8), "bf16")
    assert one / 8 < eight < one / 8 * 1.05  # experts, attention, vocab all split 8 ways; norms/router whole


def test_engine_budget_rules_by_hand():
    cap, w, a, nt, g = 80 * GIB, 40 * GIB, 2 * GIB, GIB, GIB
    assert sv.engine_kv_pool_bytes("vllm", cap, w, a, nt, g, 0.9) == 0.9 * 80 * GIB - 44 * GIB
    assert sv.engine_kv_pool_bytes("sglang", cap, w, a, nt, g, 0.88) == int(0.88 * 80 * GIB - 41 * GIB)
    assert sv.engine_kv_pool_bytes("trtllm", cap, w, a, nt, g, 0.9) == int(0.9 * (80 - 44) * GIB)


def test_longest_context_and_concurrency():
    spec = load_model("llama-3.1-8b")
    mem = sv.serving_memory(spec, sv.Instance(), capacity=80 * GIB, weight_format="bf16", kv_dtype="bf16",
                            engine="vllm", fraction=0.9)
    assert sv.pool_context(mem, spec) == mem.kv_cache // 131072 > 131072  # ~444k tokens in the pool
    assert sv.longest_context(mem, spec) == 131072  # max_position_embeddings binds
    assert mem.kv_tokens == mem.kv_cache // 131072
    assert sv.max_concurrency(mem, spec, sv.Instance(), 4096) == mem.kv_cache // (131072 * 4096)


@pytest.mark.parametrize("pool_tokens, longest, bound", [(200_000, 163_840, "max_position_embeddings"),
                                                         (100_000, 100_000, "kv_pool")])
def test_longest_context_capped_at_the_model_maximum(pool_tokens, longest, bound):
    """DeepSeek-V3 caches 61 x (512 + 64) x 2 = 70,272 B per token; a pool of 200,000 tokens still
    serves one sequence of at most max_position_embeddings 163,840 (the engines refuse a longer
    max_model_len), a pool of 100,000 tokens binds at 100,000."""
    spec = load_model("deepseek-v3")
    assert spec.max_position_embeddings == 163_840
    mem = sv.ServingMemory(weights=0, activations=0, reserve=0, kv_cache=pool_tokens * 70_272, capacity=0,
                           kv_bytes_per_token=70_272, kv_window_bytes=0, kv_tokens=0, engine="vllm",
                           budget_fraction=0.9)
    assert sv.pool_context(mem, spec) == pool_tokens
    assert sv.longest_context(mem, spec) == longest and sv.context_bound(mem, spec) == bound


# ---------------------------------------------------------------- MoE token exchange (EP dispatch/combine)

def test_moe_exchange_deepep_low_latency_matches_deepep_published_times():
    """DeepEP's low-latency table (deepseek-ai/DeepEP docs/legacy.md @0297fc80, H800 + CX7): 128 tokens
    per rank, hidden 7168, top-8, FP8 dispatch, BF16 combine, EP8: dispatch 77 us at 98 GB/s, combine
    114 us at 127 GB/s. By hand: dispatch 128 x 8 x (7168 + 7168 / 128 x 4) = 7,569,408 B (77.2 us at
    98 GB/s), combine 128 x 8 x 7168 x 2 = 14,680,064 B (115.6 us at 127 GB/s)."""
    spec = load_model("deepseek-v3")
    inst = sv.Instance(tp=8, ep=8, adp=8)
    layers = sum(spec.moe_layers)
    assert layers == 58
    per_layer_bytes = 7_569_408 + 14_680_064
    got = sv.moe_exchange_s(spec, inst, 128 * 8, decode=True, link_bytes_per_s=1e11)
    assert got == pytest.approx(layers * per_layer_bytes / 1e11)
    assert 7_569_408 / 98e9 == pytest.approx(77e-6, rel=0.01) and 14_680_064 / 127e9 == pytest.approx(114e-6, rel=0.02)


def test_moe_exchange_without_attention_dp_is_the_tp_all_reduce():
    spec = load_model("qwen3-235b-a22b")
    for inst in (sv.Instance(tp=8), sv.Instance(tp=8, ep=8)):
        assert sv.moe_exchange_s(spec, inst, 64, decode=True, link_bytes_per_s=450e9) == 0.0


def test_moe_exchange_allgather_and_deepep_normal_by_hand():
    """Expert TP under attention DP (vLLM's default allgather_reducescatter): every GPU receives the
    other 7/8 of the tokens, BF16, and sends its share back: 2 x T x h x 2 x 7/8 per layer. DeepEP normal
    (prefill): each token goes once to each rank its top-k experts live on, E = ep (1 - (1 - 1/ep)^k)."""
    spec = load_model("qwen3-235b-a22b")  # hidden 4096, 128 experts, top-8, 94 MoE layers
    h, layers, tokens, bw = 4096, 94, 4000, 450e9
    assert (spec.hidden_size, sum(spec.moe_layers), spec.num_experts_per_tok) == (h, layers, 8)
    ag = sv.moe_exchange_s(spec, sv.Instance(tp=8, adp=8), tokens, decode=False, link_bytes_per_s=bw)
    assert ag == pytest.approx(layers * 2 * tokens * h * 2 * 7 / 8 / bw)
    normal = sv.moe_exchange_s(spec, sv.Instance(tp=8, ep=8, adp=8), tokens, decode=False, link_bytes_per_s=bw)
    ranks = 8 * (1 - (7 / 8) ** 8)  # 5.25 of 8 ranks
    assert normal == pytest.approx(layers * tokens / 8 * ranks * (h + h / 128 * 4 + 2 * h) / bw)
    assert normal < ag  # DeepEP moves each token to the ranks that need it, not to all


def test_fused_moe_workspace_sets_the_moe_profile_peak():
    """review-senior5 H5: vLLM 0.33.0's fused-MoE kernel holds workspace13 (M, top_k, max(N_act, K))
    and workspace2 (M, top_k, max(N, K)) for all M tokens of the profile run (modular_kernel.py
    _allocate_buffers; experts/triton_moe.py workspace_shapes), K = hidden_size -- not top_k copies of
    the expert width. Qwen3-235B-A22B at tp 4 (h 4,096, moe_intermediate_size 1,536 -> N = 2 x 384 =
    768, top_k 8): 8 x (4,096 + 4,096) = 65,536 elements per token. Profile run of 8,192 tokens:
    layer part 8,192 x (2 x 4,096 + 65,536) x 2 B = 1,207,959,552 B; sampler 1,024 rows (H100
    max_num_seqs) x 152,064 (151,936 padded to 64 x 4) x 14 B = 2,179,989,504 B."""
    spec = load_model("qwen3-235b-a22b")
    assert sv.fused_moe_workspace_elements(spec, sv.Instance(tp=4)) == 65_536
    assert sv.activation_bytes(spec, sv.Instance(tp=4), 8192, 1024, engine="vllm") == \
        1_207_959_552 + 2_179_989_504
    # Mixtral-8x7B at tp 8 with ep 8 (h 4,096, I_e 14,336 whole per GPU -> N 28,672, N_act 14,336):
    # 2 x (14,336 + 28,672) = 86,016 elements per token, the expert width now the larger
    assert sv.fused_moe_workspace_elements(load_model("mixtral-8x7b"), sv.Instance(tp=8, ep=8)) == 86_016


@pytest.mark.parametrize("inst, label", [
    # review-senior5 L1: 8 GPUs serving attention data-parallel with experts over all 8 are vLLM's
    # --data-parallel-size 8 --enable-expert-parallel (tp 1): "tp8 ... dp8" read as 64 GPUs
    (sv.Instance(tp=8, ep=8, adp=8), "dp8 (attention) ep8"),
    (sv.Instance(tp=8, ep=8, adp=2), "dp2 tp4 (attention) ep8"),
    (sv.Instance(tp=8, ep=4, adp=8), "dp8 (attention) ep4 etp2"),
    (sv.Instance(tp=8, adp=8), "dp8 (attention) tp8 (experts)"),
    (sv.Instance(tp=8, ep=8), "tp8 ep8"),
    (sv.Instance(tp=8, pp=2), "tp8 pp2"),
])
def test_instance_label_in_the_engines_terms(inst, label):
    assert inst.label == label
