"""Serving cost model: memory per GPU of one engine instance, and its TTFT / TPOT.

An engine instance is `tp x pp` GPUs (TensorRT-LLM's convention, also vLLM's and SGLang's):
`tp` GPUs per pipeline stage; inside a stage attention runs `adp` data-parallel groups of
`tp / adp` tensor-parallel GPUs (attention data parallelism: SGLang `--enable-dp-attention`,
TensorRT-LLM `enable_attention_dp`), and the routed experts are split `ep` ways by expert and
`tp / ep` ways inside each expert (`moe_ep_size x moe_tp_size = tp_size`, TensorRT-LLM
`tensorrt_llm/mapping.py`). Dense MLPs, shared experts, the embedding and the LM head are split by `tp`.

Memory (bytes per GPU, worst pipeline stage):
- weights: block linear weights in the weight format (with its scale bytes); embeddings, LM head,
  norms, routers and biases stay in bf16 (vLLM, SGLang and TensorRT-LLM leave `lm_head` and
  `embed_tokens` unquantised in fp8/int4/fp4 checkpoints unless told otherwise). The vocabulary is
  padded to a multiple of 64 x tp (Source: vLLM `vllm/model_executor/layers/vocab_parallel_embedding.py`
  DEFAULT_VOCAB_PADDING_SIZE = 64, pad_vocab_size). K/V projections split over min(attention-tp, n_kv)
  and replicate beyond (vLLM `QKVParallelLinear`: num_kv_head_replicas = tp / n_kv).
- KV cache per token: GQA 2 x n_kv x d per layer split over min(attention-tp, n_kv) (replicated
  beyond); MLA latent kv_lora_rank + qk_rope_head_dim per layer, not split by TP (every TP rank
  holds the whole latent: SGLang `model_runner_kv_cache_mixin.py` get_cell_size_per_token @001ccef0);
  sliding-window layers hold at most the window. Attention sinks are weights (counted in params), not cache.
- activation peak: one forward of `max_num_batched_tokens` tokens (chunked prefill), the largest live
  set of one layer plus the sampler's fp32 logits (vLLM `gpu_model_runner.py` profile_run).
- reserve: CUDA context, cuBLAS/NCCL workspaces (non-torch) and CUDA graphs.
- engine budget rule (`engine_kv_pool_bytes`), each from the engine's source.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from planner.cost.params_flops import count_params, kv_cache_bytes_per_token
from planner.placement.mesh import Mesh
from planner.specs.model import ModelSpec, spec_memo

GIB = 2**30


@dataclass(frozen=True)
class WeightFormat:
    """Storage of a quantised linear weight: `bits` per element plus `scale_bytes` per `group` elements."""

    bits: int
    group: int
    """Elements sharing one scale (0: one scale per tensor, negligible)."""
    scale_bytes: float
    source: str

    def bytes_for(self, elements: float, row: int) -> float:
        """Bytes of `elements` weights (`row`: the input width, the group of per-channel formats)."""
        group = self.group if self.group > 0 else (row if self.group < 0 else 0)
        scales = elements / group * self.scale_bytes if group else 0.0
        return elements * self.bits / 8 + scales


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "bf16": WeightFormat(16, 0, 0, "2 bytes per element"),
    "fp16": WeightFormat(16, 0, 0, "2 bytes per element (GPUs without bf16: V100 runs a bf16 checkpoint in fp16)"),
    "fp8": WeightFormat(8, 0, 4, "FP8 E4M3 with one fp32 scale per tensor (vLLM Fp8LinearMethod, "
                                 "per-tensor checkpoints such as nvidia/*-FP8)"),
    "fp8-block": WeightFormat(8, 128 * 128, 4, "FP8 E4M3 with one fp32 scale per 128x128 block "
                                               "(DeepSeek-V3 / Qwen3-FP8 weight_block_size [128, 128])"),
    "int8": WeightFormat(8, -1, 2, "INT8 with one fp16 scale per output channel (W8A8 per-channel: "
                                   "one scale per row of `input width` elements)"),
    "int4": WeightFormat(4, 128, 2.5, "INT4 with one fp16 scale and one 4-bit zero point per group "
                                      "of 128 (AWQ/GPTQ group_size 128)"),
    "mxfp4": WeightFormat(4, 32, 1, "OCP Microscaling spec v1.0: FP4 E2M1 elements, one E8M0 (1 byte) "
                                    "scale per block of 32"),
    "nvfp4": WeightFormat(4, 16, 1, "NVFP4: FP4 E2M1 elements, one FP8 E4M3 scale per block of 16 "
                                    "(plus one fp32 per tensor, negligible) — NVIDIA Blackwell docs"),
}
"""Weight formats of block linear layers. Source: per entry."""

KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per cached K/V element. Source: element sizes of torch.bfloat16 / float8_e4m3fn."""

def native_dtype(weight_format: str) -> str | None:
    """The tensor-core dtype a weight format's GEMMs run in where the GPU has it (`peak_tflops` key):
    fp8 for the fp8 formats, fp4 for mxfp4 / nvfp4, None for the others (bf16 / fp16 GEMMs)."""
    if weight_format.startswith("fp8"):
        return "fp8"
    return "fp4" if weight_format in ("mxfp4", "nvfp4") else None


DENSE_ONLY_FORMATS = {"mxfp4"}
"""Formats that models ship for the routed experts only (gpt-oss: MXFP4 experts, bf16 attention)."""


@dataclass(frozen=True)
class EngineRule:
    """How an engine sizes its KV pool from the GPU memory."""

    flag: str
    """The engine's own option name."""
    default: float
    basis: str
    """`total`: the fraction is of total GPU memory; `free`: of the memory free after loading."""
    source: str


ENGINES: dict[str, EngineRule] = {
    "vllm": EngineRule(
        "gpu_memory_utilization", 0.9, "total",
        "vllm-project/vllm vllm/v1/worker/gpu_worker.py @35d5cda1 determine_available_memory: "
        "available_kv_cache_memory = requested_memory (total x gpu_memory_utilization) - "
        "non_kv_cache_memory (weights + torch activation peak of profile_run + non-torch increase) - "
        "cudagraph_memory_estimate_applied: the CUDA-graph estimate is subtracted when "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is set, the default from v0.21 (vllm/envs.py; at "
        "@35d5cda1 graphs were still captured outside the budget). Modelled: the current default, graphs inside"),
    "sglang": EngineRule(
        "mem_fraction_static", 0.88, "total",
        "sgl-project/sglang python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py @001ccef0 "
        "profile_max_num_token: rest_memory = available_gpu_memory (free after weight load) - "
        "total_gpu_memory x (1 - mem_fraction_static); activations and CUDA graphs live in the "
        "(1 - mem_fraction_static) headroom. When unset, server_args.py picks the fraction from TP size and "
        "GPU memory (releases seen: 0.88 at tp 1 down to 0.79 at tp >= 16); 0.88 is taken here, pass "
        "--mem-fraction to match a deployment"),
    "trtllm": EngineRule(
        "kv_cache_free_gpu_memory_fraction", 0.9, "free",
        "NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/resource_manager.py @d2a5560a KVCacheManager: "
        "primary_pool_memory_bytes = free_mem (torch.cuda.mem_get_info after weights and the "
        "activation-profiling run) x free_gpu_memory_fraction (default 0.9)"),
}
"""Engine budget rules. Source: per entry."""

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""Tokens per forward (chunked-prefill chunk). Source: vLLM `vllm/engine/arg_utils.py` default for the
OpenAI server on GPUs (8192); SGLang chunked_prefill_size 8192 on >= 80 GB GPUs; TensorRT-LLM
max_num_tokens 8192 (`llm_args.py`)."""
DEFAULT_MAX_NUM_SEQS = 256
"""Sequences per step the sampler is profiled with. Source: vLLM `SchedulerConfig` max_num_seqs default 256."""
NON_TORCH_BYTES = int(0.75 * GIB)
"""[Empirical] CUDA context, cuBLAS workspaces and NCCL buffers outside PyTorch's allocator, per GPU.
Source: vLLM's start-up log line 'non-torch memory' on Hopper (0.5-1 GiB; 0.75 taken). Override: --reserve-gib."""
CUDA_GRAPH_BYTES = int(1.0 * GIB)
"""[Empirical] Memory of captured CUDA graphs (vLLM logs 'Graph capturing finished ... took 0.5-1.5 GiB'
on Hopper for the default capture sizes; 1 GiB taken)."""


@dataclass(frozen=True)
class Instance:
    """Parallel layout of one engine instance: a device mesh (`mesh`: tp x pp GPUs, experts inside
    tp) plus attention data parallelism."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    """Expert-parallel ways inside a stage (divides tp; expert TP = tp / ep)."""
    adp: int = 1
    """Attention data-parallel groups inside a stage (divides tp; attention TP = tp / adp)."""

    @functools.cached_property
    def mesh(self) -> Mesh:
        """The instance's device mesh (`placement.mesh.Mesh`, the one training layouts use): dp 1,
        tp x pp dense ranks, ep x etp = tp expert ranks per stage (etp = tp / ep)."""
        return Mesh(tp=self.tp, pp=self.pp, ep=self.ep, etp=max(1, self.tp // self.ep))

    @property
    def gpus(self) -> int:
        """GPUs of the instance (`Mesh.world_size`: tp x pp)."""
        return self.mesh.world_size

    @property
    def attn_tp(self) -> int:
        return self.tp // self.adp


@dataclass(frozen=True)
class ServingMemory:
    """Bytes per GPU of one instance (worst pipeline stage)."""

    weights: int
    activations: int
    reserve: int
    """Non-torch memory + CUDA graphs."""
    kv_cache: int
    """The engine's KV pool (may be negative: it does not fit)."""
    capacity: int
    kv_bytes_per_token: float
    """KV bytes one token of one sequence costs on this GPU (full-attention layers; window layers aside)."""
    kv_window_bytes: float
    """KV bytes of one sequence's sliding-window layers at a full window, on this GPU."""
    kv_tokens: int
    """Tokens the instance's pool holds (all attention-DP groups; full-attention layers)."""
    engine: str
    budget_fraction: float

    def sequence_bytes(self, context: int, window: int) -> float:
        """KV bytes of one sequence of `context` tokens on one GPU."""
        part = min(context, window) / window if window else 0.0
        return self.kv_bytes_per_token * context + self.kv_window_bytes * part


def vocab_rows(spec: ModelSpec, tp: int) -> int:
    """Embedding rows after padding to a multiple of 64 x tp (vLLM pad_vocab_size)."""
    unit = 64 * tp
    return -(-spec.padded_vocab_size // unit) * unit


def weight_bytes_per_gpu(spec: ModelSpec, inst: Instance, weight_format: str) -> int:
    """Weight bytes on the GPU of the largest pipeline stage (memoised per spec object).

    Source: module docstring (split rules); formats: WEIGHT_FORMATS. Stages hold ceil(L/pp)
    consecutive layers (the last the remainder); the embedding (and learned positions) sits on the
    first stage, the LM head and final norm on the last (a tied head is its own copy when pp > 1);
    the largest stage is returned.
    """
    memo = spec_memo(spec)
    key = ("serving_weights", inst, weight_format)
    if key not in memo:
        memo[key] = _weight_bytes(spec, inst, weight_format)
    return memo[key]


def _weight_bytes(spec: ModelSpec, inst: Instance, weight_format: str) -> int:
    fmt = WEIGHT_FORMATS[weight_format]
    dense_fmt = WEIGHT_FORMATS["bf16"] if weight_format in DENSE_ONLY_FORMATS else fmt
    counts = count_params(spec)
    h = spec.hidden_size
    t, at = inst.tp, inst.attn_tp
    per_layer = []
    for layer in counts.layers:
        if spec.is_mla:
            replicated = h * (spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim)
            attn = dense_fmt.bytes_for((layer.attention - replicated) / at + replicated, h)
        else:
            kv = 2 * h * spec.num_key_value_heads * spec.head_dim
            attn = dense_fmt.bytes_for((layer.attention - kv) / at + kv / min(at, spec.num_key_value_heads), h)
        mlp = dense_fmt.bytes_for((layer.dense_mlp + layer.shared_experts) / t, h)
        experts = fmt.bytes_for(layer.routed_experts / t, h)
        per_layer.append(attn + mlp + experts + 2 * (layer.router + layer.norms))
    vocab = vocab_rows(spec, t) * spec.embedding_width / t * 2
    embedding = vocab + 2 * (counts.embedding - spec.padded_vocab_size * spec.embedding_width)
    head = (0 if spec.tie_word_embeddings and inst.pp == 1 else vocab) + 2 * counts.final_norm
    size = math.ceil(spec.num_hidden_layers / inst.pp)
    stages = [sum(per_layer[k * size:(k + 1) * size]) for k in range(inst.pp)]
    stages[0] += embedding
    stages[-1] += head
    return int(max(stages))


def kv_bytes_per_gpu(spec: ModelSpec, inst: Instance, kv_dtype: str) -> tuple[float, float]:
    """(bytes per token of the full-attention layers, bytes of the sliding layers at a full window)
    of one sequence on one GPU of the largest stage.

    Source: `kv_cache_bytes_per_token` (GQA / MLA / window rules, params_flops.py); TP split over
    min(attention-tp, n_kv) for GQA, none for MLA (module docstring); a stage holds ceil(L/pp) of L layers.
    """
    kv = kv_cache_bytes_per_token(spec, KV_DTYPE_BYTES[kv_dtype])
    split = 1 if spec.is_mla else min(inst.attn_tp, spec.num_key_value_heads)
    stage = math.ceil(spec.num_hidden_layers / inst.pp) / spec.num_hidden_layers
    return kv.per_token * stage / split, kv.sliding_window_bytes * stage / split


def activation_bytes(spec: ModelSpec, inst: Instance, tokens: int, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> int:
    """Activation peak of one forward of `tokens` tokens on one GPU, bytes (bf16 activations).

    Live set of the widest layer op: residual + hidden (2h), plus the widest projection output of the
    layer (q/k/v, or gate+up and the activated half 3I/tp, or for MoE the top_k copies of the
    expert intermediate 3 I_e / (tp/ep)), plus the sampler's fp32 logits and probabilities for
    min(tokens, max_num_seqs) rows of vocab/tp. Source: vLLM `gpu_model_runner.py` profile_run
    (_dummy_run(max_num_batched_tokens) then _dummy_sampler_run); an estimate, not fitted.
    """
    h, t = spec.hidden_size, inst.tp
    qkv = (spec.num_attention_heads + 2 * spec.num_key_value_heads) * spec.head_dim / inst.attn_tp
    mlp = 3 * spec.intermediate_size / t if any(not m for m in spec.moe_layers) or not spec.is_moe else 0
    moe = 0.0
    if spec.is_moe:
        moe = spec.num_experts_per_tok * 3 * spec.moe_intermediate_size / (t // inst.ep) / inst.ep
        moe = max(moe, 3 * spec.shared_expert_intermediate_size / t)
    per_token = (2 * h + max(qkv, mlp, moe)) * 2
    logits = min(tokens, max_num_seqs) * vocab_rows(spec, t) / t * 8
    return int(tokens * per_token + logits)


def engine_kv_pool_bytes(engine: str, capacity: int, weights: int, activations: int, non_torch: int,
                         cuda_graphs: int, fraction: float) -> int:
    """KV pool per GPU under the engine's budget rule (may be negative). Source: ENGINES[engine].source.

    - vllm: fraction x capacity - weights - activations - non_torch - graphs.
    - sglang: fraction x capacity - weights - non_torch (activations and graphs in the headroom).
    - trtllm: fraction x (capacity - weights - activations - non_torch - graphs).
    """
    if engine == "vllm":
        return int(fraction * capacity - weights - activations - non_torch - cuda_graphs)
    if engine == "sglang":
        return int(fraction * capacity - weights - non_torch)
    return int(fraction * (capacity - weights - activations - non_torch - cuda_graphs))


def serving_memory(spec: ModelSpec, inst: Instance, *, capacity: int, weight_format: str, kv_dtype: str,
                   engine: str, fraction: float | None = None,
                   max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                   non_torch: int = NON_TORCH_BYTES, cuda_graphs: int = CUDA_GRAPH_BYTES) -> ServingMemory:
    """Memory of one GPU of `inst` and the tokens its KV pool holds. Units: bytes; tokens.

    Args:
        capacity: GPU memory the driver reports, bytes.
        fraction: the engine's budget knob (None: its default, ENGINES).
    """
    rule = ENGINES[engine]
    fraction = rule.default if fraction is None else fraction
    weights = weight_bytes_per_gpu(spec, inst, weight_format)
    acts = activation_bytes(spec, inst, max_num_batched_tokens)
    pool = engine_kv_pool_bytes(engine, capacity, weights, acts, non_torch, cuda_graphs, fraction)
    per_token, window = kv_bytes_per_gpu(spec, inst, kv_dtype)
    tokens = int(max(pool, 0) // per_token) * inst.adp if per_token else 0
    return ServingMemory(weights=weights, activations=acts, reserve=non_torch + cuda_graphs, kv_cache=pool,
                         capacity=capacity, kv_bytes_per_token=per_token, kv_window_bytes=window,
                         kv_tokens=tokens, engine=engine, budget_fraction=fraction)


def max_concurrency(mem: ServingMemory, spec: ModelSpec, inst: Instance, context: int) -> int:
    """Sequences of `context` tokens the pool holds at once (all attention-DP groups)."""
    per_seq = mem.sequence_bytes(context, spec.sliding_window)
    return int(max(mem.kv_cache, 0) // per_seq) * inst.adp if per_seq > 0 else 0


def pool_context(mem: ServingMemory, spec: ModelSpec) -> int:
    """Longest single sequence the KV pool holds, tokens (window layers at their full window)."""
    pool = max(mem.kv_cache, 0)
    if not mem.kv_bytes_per_token:
        return 0
    window = mem.kv_window_bytes if spec.sliding_window else 0
    return int(max(pool - window, 0) // mem.kv_bytes_per_token)


def longest_context(mem: ServingMemory, spec: ModelSpec) -> int:
    """Longest single sequence an instance serves, tokens: what the KV pool holds (`pool_context`),
    at most the model's max_position_embeddings. Source: vLLM 0.33.0 `vllm/config/model.py`
    _get_and_verify_max_len (a max_model_len above the derived length is refused unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN; for llama3 / yarn / deepseek_yarn RoPE scaling, and without
    scaling, the derived length is max_position_embeddings, no factor applied)."""
    return min(pool_context(mem, spec), spec.max_position_embeddings)


def context_bound(mem: ServingMemory, spec: ModelSpec) -> str:
    """What bounds `longest_context`: `max_position_embeddings` (the pool holds more) or `kv_pool`."""
    return "max_position_embeddings" if pool_context(mem, spec) >= spec.max_position_embeddings else "kv_pool"


# ---------------------------------------------------------------- latency

TTFT_TERMS = ("prefill_one_s", "prefill_batch_s", "weights_per_chunk_s", "collectives", "constant",
              "kv_wait_s")
"""TTFT = sum of fitted coefficient x term (see `latency_terms`)."""
TPOT_TERMS = ("decode_memory_s", "decode_compute_s", "collectives", "constant", "prefill_interference_s")
"""TPOT = sum of fitted coefficient x term (see `latency_terms`)."""
COLLECTIVE_UNIT_S = 1e-6
"""The `collectives` term counts collectives per step in microseconds (its coefficient: us per collective)."""
CONSTANT_UNIT_S = 1e-3
"""The `constant` term is 1 ms (its coefficient: the per-step / per-request overhead in ms)."""


def expected_distinct_experts(experts: int, draws: float) -> float:
    """Expected number of distinct experts hit by `draws` uniform independent draws from `experts`.

    Source: occupancy problem, E[distinct] = E (1 - (1 - 1/E)^n) (Feller, An Introduction to
    Probability Theory, Vol. 1, II.11). Routing is not uniform in practice; the fitted coefficient
    of the decode memory term absorbs the average skew.
    """
    return experts * (1 - (1 - 1 / experts) ** draws)


def latency_terms(spec: ModelSpec, inst: Instance, *, hbm_bytes_per_s: float, peak_flops: float,
                  weight_format: str, kv_dtype: str, concurrency: float, input_len: int, output_len: int,
                  max_concurrency_: int, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                  hop_s: float = 0.0) -> dict[str, float]:
    """Physical terms of TTFT and TPOT for one instance at `concurrency` sequences (closed loop).

    Terms (seconds unless named otherwise), per GPU of one stage; pp stages run in sequence, so the
    decode terms are multiplied by pp (each of pp micro-batches of B/pp sequences reads the stage):
    - decode_memory_s: (weights read + KV read) / HBM bandwidth; MoE layers read only the experts the
      step activates, E[distinct] of B x top_k draws (`expected_distinct_experts`); KV read = B x
      (input + output/2) tokens x KV bytes per token per GPU.
    - decode_compute_s: 2 x active parameters per GPU x B + attention 4 x a x d x context / tp, / peak.
    - collectives: TP all-reduces (2 per layer when tp > 1) + EP dispatch/combine (2 per MoE layer
      when ep > 1) per step, in units of COLLECTIVE_UNIT_S.
    - prefill_interference_s: (B / output_len) x prefill_one_s: every request's prefill lands in the
      decode of the others once per lifetime (chunked prefill mixes them).
    - prefill_one_s: compute of one request's prefill (2 x active params x I + causal attention) / peak.
    - prefill_batch_s: the prefill compute of the B requests' chunks that share the first chunks.
    - weights_per_chunk_s: weights read once per prefill chunk of max_num_batched_tokens tokens.
    - kv_wait_s: when B exceeds what the KV pool holds (C = max_concurrency), only C run; in a closed
      loop each request then waits (B / C - 1) request lifetimes (Little's law: the cycle time is
      B / throughput = B x lifetime / C), lifetime ~ output_len x decode step. The other terms use
      the running batch min(B, C).
    Source: roofline (Williams et al. 2009) per operator; continuous batching with chunked prefill
    (Agrawal et al. 2024, Sarathi-Serve). The coefficients are [Empirical] (`calibration/serving.yaml`).
    """
    fmt = WEIGHT_FORMATS[weight_format]
    counts = count_params(spec)
    h, pp = spec.hidden_size, inst.pp
    weights = weight_bytes_per_gpu(spec, inst, weight_format)
    routed = fmt.bytes_for(sum(l.routed_experts for l in counts.layers) / inst.tp / pp, h)
    queued = concurrency
    concurrency = min(concurrency, max(max_concurrency_, 1))
    local = concurrency / inst.adp
    per_micro = local / pp
    read = weights
    if spec.is_moe:
        share = expected_distinct_experts(spec.num_experts, per_micro * spec.num_experts_per_tok) / spec.num_experts
        read = weights - routed + routed * min(1.0, share)
    kv_token, _ = kv_bytes_per_gpu(spec, inst, kv_dtype)
    context = input_len + output_len / 2
    active = counts.active_per_token - counts.embedding
    flops_token = 2 * active / inst.tp
    attn = 4 * spec.num_attention_heads * spec.head_dim * spec.num_hidden_layers / inst.attn_tp
    decode_memory = pp * (read + per_micro * context * kv_token) / hbm_bytes_per_s
    decode_compute = local * (flops_token + attn * context) / peak_flops
    moe_layers = sum(spec.moe_layers) if spec.is_moe else 0
    collectives = (2 * spec.num_hidden_layers if inst.tp > 1 else 0) + (2 * moe_layers if inst.ep > 1 else 0)
    prefill_one = input_len * (flops_token + attn * input_len / 2) / peak_flops
    first_chunk = min(local * input_len, max(max_num_batched_tokens, input_len))
    chunks = math.ceil(local * input_len / max_num_batched_tokens)
    step = decode_memory + decode_compute
    wait = max(0.0, queued / concurrency - 1) * output_len * step
    return {
        "decode_memory_s": decode_memory, "decode_compute_s": decode_compute,
        "collectives": collectives * pp, "constant": 1.0,
        "prefill_interference_s": local / output_len * prefill_one,
        "prefill_one_s": prefill_one, "prefill_batch_s": prefill_one * first_chunk / input_len,
        "weights_per_chunk_s": chunks * weights * pp / hbm_bytes_per_s, "kv_wait_s": wait,
        "hop_s": hop_s * (pp - 1),
    }


def _unit(term: str) -> float:
    return {"collectives": COLLECTIVE_UNIT_S, "constant": CONSTANT_UNIT_S}.get(term, 1.0)


def predict_latency(terms: dict[str, float], coefficients: dict[str, dict[str, float]]) -> tuple[float, float]:
    """(TTFT s, TPOT s) from `latency_terms` and one engine's fitted coefficients
    ({"ttft": {term: c}, "tpot": {term: c}}). PP hops add unfitted to both."""
    ttft = sum(coefficients["ttft"][t] * terms[t] * _unit(t) for t in TTFT_TERMS) + terms["hop_s"]
    tpot = sum(coefficients["tpot"][t] * terms[t] * _unit(t) for t in TPOT_TERMS) + terms["hop_s"]
    return max(ttft, 0.0), max(tpot, 0.0)
