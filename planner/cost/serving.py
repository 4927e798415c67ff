"""Serving cost model: memory per GPU of one engine instance, and its TTFT / TPOT.

An engine instance is `tp x pp` GPUs (TensorRT-LLM's convention, also vLLM's and SGLang's):
`tp` GPUs per pipeline stage; inside a stage attention runs `adp` data-parallel groups of
`tp / adp` tensor-parallel GPUs (attention data parallelism: SGLang `--enable-dp-attention`,
TensorRT-LLM `enable_attention_dp`), and the routed experts are split `ep` ways by expert and
`tp / ep` ways inside each expert (`moe_ep_size x moe_tp_size = tp_size`, TensorRT-LLM
`tensorrt_llm/mapping.py`). Dense MLPs, shared experts, the embedding and the LM head are split by `tp`,
except where the engine's attention DP / all-to-all MoE backend replicates them (`splits`).

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
from planner.frameworks import vllm as vllm_flags
from planner.placement.mesh import Mesh
from planner.specs.model import ModelSpec, engine_context_length, spec_memo

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

MXFP4_EXPERT_PAD = (256, 128)
"""(hidden, intermediate-per-partition) multiples MXFP4 expert weights are zero-padded to at load.
Source: vllm-project/vllm 0.33.0 `vllm/model_executor/layers/fused_moe/oracle/mxfp4.py`
mxfp4_round_up_hidden_size_and_intermediate_size: MARLIN / BATCHED_MARLIN (Hopper and older: no native
FP4, the backend vLLM 0.10-0.11 used for gpt-oss on H100, "Weight-only FP4 compression will be used
leveraging the Marlin kernel") and the FlashInfer TRT-LLM backends (Blackwell) round hidden_size up to
256 and intermediate_size_per_partition up to 128; the expert biases are kept in bf16 at the padded
sizes. gpt-oss-120b: 2880 -> 3072 hidden, 2880 -> 2944 intermediate (+9 % expert bytes). vLLM's
OAI-Triton backend (TRITON, rounds the intermediate to 64 only) is not modelled."""


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
        "gpu_memory_utilization", vllm_flags.DEFAULT_FRACTION, "total",
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
        "GPU memory; 0.88 is taken here when no fraction is passed (planner validate's serving cases); "
        "serve-plan, check and --emit sglang pass SGLang's own default instead "
        "(planner.frameworks.sglang.default_mem_fraction_static, from the 0.5.23 memory_hook.py)"),
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
"""Sampler rows of the activation estimate for SGLang and TensorRT-LLM (an estimate borrowed from vLLM's
profile run, not their own). vLLM's own: `vllm_sampler_bytes` with its default max_num_seqs by GPU."""
VLLM_SAMPLER_BYTES_PER_LOGIT = 14
"""Bytes per (request row x vocabulary entry) live at the peak of vLLM's profile-run sampler: the bf16
logits compute_logits all-gathers to the full vocabulary on every TP rank (2), their fp32 copy (4), the fp32
probabilities (4) and the fp32 exponential noise of random sampling (4); temperature, top-k/top-p (the
Triton kernel) and the noise division work in place. Source: vllm-project/vllm 0.33.0 (wheel, commit
g4ba787ec9) `vllm/v1/worker/gpu_model_runner.py` profile_run -> _dummy_sampler_run (rows = min(num_tokens,
max_num_reqs); a second call with a generator takes forward_native), `vllm/v1/sample/sampler.py` forward
(logits.to(torch.float32)), `vllm/v1/sample/ops/topk_topp_sampler.py` forward_native (softmax fp32),
random_sample (empty_exponential_noise_like, div_ in place), `vllm/model_executor/layers/logits_processor.py`
_gather_logits (all-gather on CUDA: `platforms/interface.py` use_all_gather True)."""
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
    redundant: int = 0
    """Redundant routed-expert copies per MoE layer (SGLang's expert-parallel load balancer,
    `planner.frameworks.sglang` FLAG["redundant_experts"]): every GPU holds (experts + redundant) / ep
    physical experts (`physical_experts`)."""
    dense_dp: bool = False
    """The dense layers' MLPs and the LM head data-parallel over the attention-DP ranks, each rank holding them
    whole and running only its own tokens (SGLang's dense-TP-1 and DP LM-head pair, `planner.frameworks.sglang`
    FLAG["dense_tp"] / FLAG["dp_lm_head"]); False: SGLang's default, both split over all tp ranks, the tokens of
    every attention-DP rank gathered to each (`dense_gather_s`). Read only under SGLang with attention DP."""

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

    @property
    def label(self) -> str:
        """The layout in the engines' own terms (review-senior5 L1), `tp` x `pp` GPUs in all: without
        attention data parallelism `tp8 ep8 pp2` (vLLM's tensor-parallel size 8 with expert parallelism:
        experts split over the tp GPUs); with it, the attention groups first, as vLLM's data-parallel
        size / SGLang's dp spell them, then the experts over all of a stage's GPUs:
        `dp8 (attention) ep8` (8 GPUs: attention replicated 8 ways, experts 8 ways), `dp2 tp4
        (attention) ep8`, `dp8 (attention) tp8 (experts)` (no EP: experts tensor-split 8 ways)."""
        pp = f" pp{self.pp}" if self.pp > 1 else ""
        if self.adp == 1:
            return f"tp{self.tp}" + (f" ep{self.ep}" if self.ep > 1 else "") + pp
        attention = f"dp{self.adp}" + (f" tp{self.attn_tp}" if self.attn_tp > 1 else "")
        etp = self.tp // self.ep
        experts = f"ep{self.ep}" + (f" etp{etp}" if etp > 1 else "") if self.ep > 1 else f"tp{self.tp} (experts)"
        spare = f" (+{self.redundant} redundant experts)" if self.redundant else ""
        dense = " (dense MLPs dp)" if self.dense_dp else ""
        return f"{attention} (attention) {experts}{spare}{dense}{pp}"


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


def physical_experts(spec: ModelSpec, inst: Instance) -> int:
    """Routed experts of one MoE layer the instance holds, logical + redundant copies.
    Source: SGLang 0.5.23 wheel `srt/eplb/expert_location.py` _init_common (num_physical_experts =
    num_logical_experts + ep_num_redundant_experts, asserted divisible by ep_size; each rank holds
    num_physical_experts / ep_size of them)."""
    return spec.num_experts + inst.redundant


@dataclass(frozen=True)
class Splits:
    """GPUs each non-expert weight group of one stage is split over (1: every GPU holds all of it)."""

    embedding: int
    head: int
    dense_mlp: int
    shared_experts: int


def splits(inst: Instance, engine: str = "") -> Splits:
    """How `engine` splits the embedding, LM head, dense MLPs and shared experts over the GPUs of `inst`
    (attention is always split attention-TP ways, `Instance.attn_tp`).

    - vLLM with data parallelism (adp > 1): each data-parallel rank is a model replica of tensor-parallel
      size attention-TP, so all four split attention-TP ways; with expert parallelism on and that TP and the
      DP size above 1, vLLM's MoE runs sequence-parallel (`use_sequence_parallel_moe`, every all2all backend
      including the default allgather_reducescatter) and the shared experts are replicated
      (DeepseekV2MLP disable_tp=is_sequence_parallel). Source: vllm-project/vllm 0.33.0 (wheel, commit
      g4ba787ec9) `vllm/config/parallel.py` use_sequence_parallel_moe, `vllm/model_executor/models/
      deepseek_v2.py` DeepseekV2MoE (shared_experts), DeepseekV2Model (VocabParallelEmbedding over the TP
      group), ParallelLMHead.
    - SGLang: under DP attention the embedding splits over the attention-TP group (`srt/layers/
      vocab_parallel_embedding.py` get_embedding_tp_kwargs: use_attn_tp_group=is_dp_attention_enabled();
      Qwen2/3-MoE and GLM-4-MoE pass the same); the LM head over all tp (ParallelLMHead
      use_attn_tp_group=enable_dp_lm_head, off by default) and the dense MLPs over all tp (`srt/layers/
      layer_boundary/layout.py` is_dense_ffn_fully_dp: moe_dense_tp_size == 1, unset by default);
      the shared experts are replicated on every GPU under an all-to-all MoE backend -- DeepEP, which
      `serve-plan --emit sglang` writes whenever ep > 1 (`planner.frameworks.sglang.A2A_DEFAULT_EMIT`)
      and which the cost model prices (`moe_exchange_s`) -- either as a replicated MLP
      (`srt/models/deepseek_v2.py` DeepseekV2MoE: parallel_group "replicated" when the a2a backend is
      deepep, mooncake, nixl, ...) or fused as one shared slot per EP rank (`srt/layers/moe/utils.py`
      has_per_rank_fused_shared_slots: 256 routed + ep shared slots); both hold one whole copy per GPU.
      With `Instance.dense_dp` (`planner.frameworks.sglang` DENSE_TP_VALUES) the dense MLPs are whole on every GPU
      and the LM head splits over the attention-TP group (`srt/layers/logits_processor.py` use_attn_tp_group =
      enable_dp_lm_head). SGLang 0.5.23 wheel.
    - TensorRT-LLM, and an unknown engine (""): everything tp ways (not read for attention DP).
    Hand check (DeepSeek-V3 fp8-block, 58 MoE layers x 3 x 7,168 x 2,048 = 2,554,331,136 shared-expert
    weights, 1 byte + 4 / 16,384 B of scales each = 2.38 GiB per GPU replicated, against 0.30 GiB split 8 ways:
    tests/test_serve_wide_ep.py)."""
    t, at = inst.tp, inst.attn_tp
    expert_parallel = inst.ep > 1
    if engine == "vllm" and inst.adp > 1:
        return Splits(at, at, at, 1 if expert_parallel else at)
    if engine == "sglang":
        if inst.dense_dp and inst.adp > 1:  # dense MLPs whole (tp size 1), LM head over the attention-TP group
            return Splits(at, at, 1, 1 if expert_parallel else t)
        return Splits(at, t, t, 1 if expert_parallel else t)
    return Splits(t, t, t, t)


def weight_bytes_per_gpu(spec: ModelSpec, inst: Instance, weight_format: str, engine: str = "") -> int:
    """Weight bytes on the GPU of the largest pipeline stage (memoised per spec object).

    Source: module docstring (split rules; `splits` for how `engine` lays out the non-expert weights under
    attention DP / expert parallelism); formats: WEIGHT_FORMATS. Stages hold ceil(L/pp)
    consecutive layers (the last the remainder); the embedding (and learned positions) sits on the
    first stage, the LM head and final norm on the last (a tied head is its own copy when pp > 1);
    the largest stage is returned.
    """
    memo = spec_memo(spec)
    key = ("serving_weights", inst, weight_format, engine)
    if key not in memo:
        memo[key] = _weight_bytes(spec, inst, weight_format, splits(inst, engine))
    return memo[key]


def _vocab_bytes(spec: ModelSpec, ways: int) -> float:
    """bf16 bytes of one vocabulary table (embedding or LM head) split `ways` ways, after padding."""
    return vocab_rows(spec, ways) * spec.embedding_width / ways * 2


def _weight_bytes(spec: ModelSpec, inst: Instance, weight_format: str, split: Splits) -> int:
    fmt = WEIGHT_FORMATS[weight_format]
    dense_fmt = WEIGHT_FORMATS["bf16"] if weight_format in DENSE_ONLY_FORMATS else fmt
    counts = count_params(spec)
    h = spec.hidden_size
    at = inst.attn_tp
    per_layer = []
    for layer in counts.layers:
        if spec.is_mla:
            replicated = h * (spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim)
            attn = dense_fmt.bytes_for((layer.attention - replicated) / at + replicated, h)
        else:
            kv = 2 * h * spec.num_key_value_heads * spec.head_dim
            attn = dense_fmt.bytes_for((layer.attention - kv) / at + kv / min(at, spec.num_key_value_heads), h)
        mlp = dense_fmt.bytes_for(layer.dense_mlp / split.dense_mlp + layer.shared_experts / split.shared_experts, h)
        experts = routed_expert_bytes(spec, inst, weight_format, layer.routed_experts)
        per_layer.append(attn + mlp + experts + 2 * (layer.router + layer.norms))
    vocab = _vocab_bytes(spec, split.embedding)
    embedding = vocab + 2 * (counts.embedding - spec.padded_vocab_size * spec.embedding_width)
    head = (0 if spec.tie_word_embeddings and inst.pp == 1 else _vocab_bytes(spec, split.head)) + 2 * counts.final_norm
    size = math.ceil(spec.num_hidden_layers / inst.pp)
    stages = [sum(per_layer[k * size:(k + 1) * size]) for k in range(inst.pp)]
    stages[0] += embedding
    stages[-1] += head
    return int(max(stages))


def routed_expert_bytes(spec: ModelSpec, inst: Instance, weight_format: str, params: float) -> float:
    """Bytes on one GPU of `params` routed-expert parameters of one layer (0 for a dense layer):
    split tp ways (ep x expert-TP) in the weight format, with the redundant copies (`physical_experts`);
    MXFP4 with its kernel padding."""
    if weight_format == "mxfp4" and params:
        return _mxfp4_expert_bytes(spec, inst)
    copies = physical_experts(spec, inst) / spec.num_experts if spec.num_experts else 1.0
    return WEIGHT_FORMATS[weight_format].bytes_for(params * copies / inst.tp, spec.hidden_size)


def _mxfp4_expert_bytes(spec: ModelSpec, inst: Instance) -> float:
    """Bytes of one layer's routed experts on one GPU in MXFP4 after the kernel padding
    (MXFP4_EXPERT_PAD): E / ep experts, each split tp / ep ways along the intermediate dimension;
    gate/up/down weights at 4 bits + one E8M0 byte per 32 (WEIGHT_FORMATS["mxfp4"]), biases in bf16.

    Hand check (gpt-oss-120b, tp 1): 3 x 3072 x 2944 = 27,131,904 weights x 17/32 B = 14,413,824 B plus
    (2 x 2944 + 3072) x 2 B = 17,920 B of biases, x 128 experts = 1,847,287,808 B per layer.
    """
    hidden_pad, inter_pad = MXFP4_EXPERT_PAD
    h = -(-spec.hidden_size // hidden_pad) * hidden_pad
    inter = spec.moe_intermediate_size // (inst.tp // inst.ep)
    inter = -(-inter // inter_pad) * inter_pad
    matrices = 3 if spec.gated_mlp else 2
    weights = WEIGHT_FORMATS["mxfp4"].bytes_for(matrices * h * inter, h)
    bias = ((matrices - 1) * inter + h) * 2 if spec.expert_bias else 0
    return physical_experts(spec, inst) / inst.ep * (weights + bias)


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


def vllm_sampler_bytes(spec: ModelSpec, inst: Instance, tokens: int, max_num_seqs: int) -> int:
    """Peak of vLLM's profile-run sampler on one GPU, bytes: min(tokens, max_num_seqs) rows x the padded
    vocabulary (all-gathered: whole on every TP rank; vLLM slices the padding off as a view, so its fp32
    copies are up to 64 x tp - 1 entries narrower, < 0.5 %) x VLLM_SAMPLER_BYTES_PER_LOGIT.
    Hand check (gpt-oss-120b, vocabulary 201,088, tp 1, 1,024 tokens, max_num_seqs 1,024 on H100):
    1,024 x 201,088 x 14 = 2,882,797,568 B = 2.68 GiB."""
    return min(tokens, max_num_seqs) * vocab_rows(spec, inst.tp) * VLLM_SAMPLER_BYTES_PER_LOGIT


def fused_moe_workspace_elements(spec: ModelSpec, inst: Instance) -> float:
    """bf16 elements per token of the fused-MoE kernel's scratch at the profile run's peak on one GPU:
    top_k x (max(N_act, h) + max(N, h)), where N = the w13 output rows per GPU (2 I_e / (tp / ep) for a
    gated MLP, I_e / (tp / ep) otherwise) and N_act = N / 2 gated, N otherwise. vLLM allocates
    workspace13 (M, top_k, max(N_act, K)) -- also holding the (M, K) output -- and workspace2
    (M, top_k, max(N, K)) for all M tokens of the forward at once (no chunking), through a
    process-wide workspace manager that keeps its high-water mark; K = hidden_size, so on every
    catalog MoE the hidden size, not the expert width, sets the size: both buffers are top_k copies
    of the hidden state (DeepGEMM's contiguous layout, which TritonOrDeepGemmExperts sizes for, is
    within 1% of this at 8,192 tokens: fp8 workspace1 of M_sum = M x top_k + E x 127 rows).
    Hand check (Qwen3-235B-A22B, tp 4: h 4,096, I_e 1,536 -> N 768, top_k 8): 8 x (4,096 + 4,096) =
    65,536 elements = 128 KiB per token, 1 GiB at 8,192 tokens.
    Source: vllm-project/vllm 0.33.0 (wheel) `vllm/model_executor/layers/fused_moe/experts/triton_moe.py`
    TritonExperts.workspace_shapes, `experts/deep_gemm_moe.py` workspace_shapes,
    `modular_kernel.py` _allocate_buffers (M_chunk = M_full; workspace13 and the output share
    storage; current_workspace_manager().get_simultaneous)."""
    h = spec.hidden_size
    n = (2 if spec.gated_mlp else 1) * spec.moe_intermediate_size / (inst.tp // inst.ep)
    n_act = n / 2 if spec.gated_mlp else n
    return spec.num_experts_per_tok * (max(n_act, h) + max(n, h))


def activation_bytes(spec: ModelSpec, inst: Instance, tokens: int, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                     *, engine: str = "") -> int:
    """Activation peak of one forward of `tokens` tokens on one GPU, bytes (bf16 activations).

    Live set of the widest layer op: residual + hidden (2h), plus the widest projection output of the
    layer (q/k/v, or gate+up and the activated half 3I/tp, or for MoE the fused-MoE workspaces,
    `fused_moe_workspace_elements`), plus the sampler: under vLLM `vllm_sampler_bytes`, otherwise
    fp32 logits and probabilities for min(tokens, max_num_seqs) rows of vocab/tp. Source: vLLM
    `gpu_model_runner.py` profile_run (_dummy_run(max_num_batched_tokens) then _dummy_sampler_run);
    the dense layer part an estimate, not fitted.
    """
    h, t = spec.hidden_size, inst.tp
    qkv = (spec.num_attention_heads + 2 * spec.num_key_value_heads) * spec.head_dim / inst.attn_tp
    dense_ways = 1 if inst.dense_dp else t
    mlp = 3 * spec.intermediate_size / dense_ways if any(not m for m in spec.moe_layers) or not spec.is_moe else 0
    moe = 0.0
    if spec.is_moe:
        moe = max(fused_moe_workspace_elements(spec, inst), 3 * spec.shared_expert_intermediate_size / t)
    per_token = (2 * h + max(qkv, mlp, moe)) * 2
    if engine == "vllm":
        logits = vllm_sampler_bytes(spec, inst, tokens, max_num_seqs)
    else:
        logits = min(tokens, max_num_seqs) * vocab_rows(spec, t) / t * 8
    return int(tokens * per_token + logits)


@dataclass(frozen=True)
class Headroom:
    """Bytes per GPU an SGLang instance allocates after its KV pool, which mem_fraction_static must leave free
    (`sglang_headroom`)."""

    activations: int
    cuda_graphs: int
    deepep_buffers: int
    floor: int = 0
    """The least headroom the engine keeps whatever the terms (`planner.frameworks.sglang.min_reserved_mib`)."""

    @property
    def total(self) -> int:
        return max(self.activations + self.cuda_graphs + self.deepep_buffers, self.floor)

    def binding(self) -> str:
        """What sets `total`: the floor, or the largest term, by name."""
        if self.floor >= self.activations + self.cuda_graphs + self.deepep_buffers:
            return "floor"
        return max(("activations", "cuda_graphs", "deepep_buffers"), key=lambda k: getattr(self, k))


def gathered_dense_bytes(spec: ModelSpec, inst: Instance, tokens: int) -> int:
    """Activation bytes per GPU of the dense layers' MLP under SGLang's default dense tensor parallelism with
    attention DP (`dense_gather_s`) for a forward of `tokens` tokens per attention-DP rank: the gathered input and
    the MLP's output before its reduce-scatter, adp x tokens x hidden x 2 B each, plus the gate / up / activated
    intermediate of the gathered tokens, 3 I / tp x 2 B each (`srt/layers/dp_attention.py` dp_gather into a
    global buffer of every rank's tokens). 0 with `Instance.dense_dp`, without attention DP or dense layers.
    LMSYS (lmsys.org/blog/2025-05-05-large-scale-ep, "Dense FFNs") gives this buffer as the reason for DP dense
    MLPs: 'their computation can significantly increase peak memory usage'."""
    dense = spec.num_hidden_layers - (sum(spec.moe_layers) if spec.is_moe else 0)
    if inst.dense_dp or inst.adp == 1 or not dense:
        return 0
    everyone = inst.adp * tokens
    return int(everyone * (2 * spec.hidden_size + 3 * spec.intermediate_size / inst.tp) * 2)


DEEPEP_MAX_DISPATCH_TOKENS_PER_RANK = 128
"""Tokens per rank DeepEP's low-latency kernels are sized for under SGLang (SGLang 0.5.23 wheel `srt/environ.py`
SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = 128; `srt/layers/moe/token_dispatcher/deepep.py` passes it to the
low-latency dispatch)."""


def deepep_masked_bytes(spec: ModelSpec, inst: Instance) -> int:
    """Bytes per GPU of a decode step's expert GEMMs in DeepEP's masked layout: the low-latency dispatch hands each
    rank a [local experts, max tokens per rank x ep, hidden] FP8 tensor with its scales, whatever the batch
    (deepseek-ai/DeepEP docs/legacy.md @0297fc80, low-latency dispatch 'recv_x' shape; SGLang's DeepGEMM masked
    grouped GEMM consumes it), and the grouped GEMMs write gate/up (2 I_e bf16), the activated half (I_e FP8) and the
    down output (h bf16) for every row. Rows: DEEPEP_MAX_DISPATCH_TOKENS_PER_RANK x ep; local experts: the physical
    experts over ep (`physical_experts`). Hand check (DeepSeek-V3 EP64: 4 local experts, 8,192 rows, h 7,168,
    I_e 2,048): 4 x 8,192 x (7,168 + 224 + 8,192 + 2,048 + 14,336) = 1,047,527,424 B."""
    h, inter = spec.hidden_size, spec.moe_intermediate_size
    rows = DEEPEP_MAX_DISPATCH_TOKENS_PER_RANK * inst.ep
    local = physical_experts(spec, inst) // inst.ep
    per_row = h + h // 128 * 4 + 2 * inter * 2 + inter + h * 2
    return local * rows * per_row


def sglang_headroom(spec: ModelSpec, inst: Instance, *, tokens_per_rank: int, decode_batch_per_rank: int,
                    role: str | None, capacity: int) -> Headroom:
    """What one GPU of an SGLang instance allocates after its KV pool (mem_fraction_static must leave it free:
    SGLang sizes the pool as free memory after the weights less total x (1 - mem_fraction_static), `srt/mem_cache/
    kv_cache_configurator.py` _profile_available_bytes; the CUDA graphs, the forward's activations and DeepEP's
    buffers come later), by role (None aggregated, "prefill", "decode" in their disaggregation mode):
    - activations: the peak of one forward (`activation_bytes`) of the chunk per attention-DP rank
      (`tokens_per_rank`) on a role that prefills, of the decode batch per rank (`decode_batch_per_rank`, the
      decode CUDA graph's largest batch) on a decode worker, plus the dense MLPs' gathered tokens under default
      dense TP (`gathered_dense_bytes`) and, in decode with DeepEP, its masked-layout expert GEMMs
      (`deepep_masked_bytes`);
    - cuda_graphs: CUDA_GRAPH_BYTES, plus on an aggregated instance the decode graphs' pool (the decode batch's
      activations with its gathered tokens: the graphs keep their private pool beside the prefill forward);
    - deepep_buffers (ep > 1 under attention DP, where `serve-plan` runs DeepEP): the normal-mode buffers on a
      role that prefills (`cost.ep_buffers.deepep_normal_buffer_bytes`), SGLang's own low-latency reserve,
      `planner.frameworks.sglang.DEEPEP_DECODE_RESERVE_MIB`, on a role that decodes.
    and at least SGLang's own floor for a GPU of `capacity` bytes (`planner.frameworks.sglang.min_reserved_mib`:
    10 GiB above 60 GiB), which stands for what is not modelled here (allocator fragmentation, NCCL's buffers, the
    sampler). Non-torch memory (NON_TORCH_BYTES) sits in the static part (`engine_kv_pool_bytes`), as before.
    On an H100 (79.65 GiB) the floor gives 0.874; LMSYS's launches wrote 0.85 (prefill) and 0.835 (decode).
    Hand check (tests/test_serve_wide_ep.py): DeepSeek-V3 EP32 prefill worker at 8,192 tokens per rank."""
    from planner.cost.ep_buffers import deepep_normal_buffer_bytes
    from planner.frameworks.sglang import DEEPEP_DECODE_RESERVE_MIB, min_reserved_mib

    def peak(tokens: int) -> int:
        return activation_bytes(spec, inst, tokens, engine="sglang") + gathered_dense_bytes(spec, inst, tokens)

    prefills, decodes = role != "decode", role != "prefill"
    decode_peak = 0
    if decodes:
        decode_peak = peak(decode_batch_per_rank)
        if spec.is_moe and inst.ep > 1 and inst.adp > 1:
            decode_peak += deepep_masked_bytes(spec, inst)
    activations = peak(tokens_per_rank) if prefills else decode_peak
    graphs = CUDA_GRAPH_BYTES + (decode_peak if prefills and decodes else 0)
    deepep = 0
    if spec.is_moe and inst.ep > 1 and inst.adp > 1:
        deepep = ((deepep_normal_buffer_bytes(spec.hidden_size, inst.ep) if prefills else 0)
                  + (DEEPEP_DECODE_RESERVE_MIB * 2**20 if decodes else 0))
    return Headroom(activations=activations, cuda_graphs=graphs, deepep_buffers=deepep,
                    floor=int(min_reserved_mib(capacity / 2**20) * 2**20))


def headroom_fraction(capacity: int, headroom: Headroom) -> float:
    """mem_fraction_static that leaves `headroom` free on a GPU of `capacity` bytes, rounded down to the
    thousandth SGLang's own default is rounded to (`planner.frameworks.sglang.default_mem_fraction_static`), at
    least 0 (a headroom above the GPU: no KV pool, the instance does not fit; `serve._memory` names the term)."""
    return max(0.0, math.floor((capacity - headroom.total) / capacity * 1000) / 1000)


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
                   non_torch: int = NON_TORCH_BYTES, cuda_graphs: int = CUDA_GRAPH_BYTES,
                   max_num_seqs: int | None = None, gpu_name: str = "",
                   activations: int | None = None) -> ServingMemory:
    """Memory of one GPU of `inst` and the tokens its KV pool holds. Units: bytes; tokens.

    Args:
        capacity: GPU memory the driver reports, bytes.
        fraction: the engine's budget knob (None: its default, ENGINES).
        max_num_seqs: the sampler rows vLLM profiles (None: vLLM's OpenAI-server default for the GPU,
            `frameworks.vllm.default_batch` from `capacity` and `gpu_name`: 1,024 on H100/H200, 256 on A100).
        activations: the activation peak when the caller has costed it (`sglang_headroom`); None: one forward
            of max_num_batched_tokens (`activation_bytes`).
    """
    rule = ENGINES[engine]
    fraction = rule.default if fraction is None else fraction
    weights = weight_bytes_per_gpu(spec, inst, weight_format, engine)
    if max_num_seqs is None:
        max_num_seqs = vllm_flags.default_batch(capacity / GIB, gpu_name)[1] if engine == "vllm" else DEFAULT_MAX_NUM_SEQS
    acts = activation_bytes(spec, inst, max_num_batched_tokens, max_num_seqs, engine=engine) if activations is None \
        else activations
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


def longest_context(mem: ServingMemory, spec: ModelSpec, max_model_len: int | None = None,
                    engine: str | None = None) -> int:
    """Longest single sequence an instance serves, tokens: what the KV pool holds (`pool_context`),
    at most the context length `engine` derives from the model's config (`specs.model.
    engine_context_length`: max_position_embeddings, times the RoPE scaling factor where the engine
    applies it; None: max_position_embeddings) and the engine's max_model_len when given (the
    scheduler refuses a longer request). Source: vLLM 0.33.0 `vllm/config/model.py`
    _get_and_verify_max_len (a max_model_len above the derived length is refused unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN); a prompt longer than
    max_model_len is rejected (`vllm/v1/engine/input_processor.py` _validate_prompt_len; SGLang 0.5.23
    `srt/managers/tokenizer_manager.py` _validate_one_request against context_len)."""
    derived = engine_context_length(spec, engine)
    return min(pool_context(mem, spec), derived, max_model_len or derived)


def budget_concurrency(budget_tokens: int, input_len: int, output_len: int, *, decode_only: bool = False) -> int:
    """Running sequences one data-parallel rank's per-step token budget sustains when every step mixes
    decode tokens and prefill chunks under one budget (vLLM's scheduler), >= 1.

    Each step schedules at most `budget_tokens` tokens (max_num_batched_tokens): first one decode token
    per running request, then prefill chunks of waiting ones with what is left. In steady state every
    request brings input_len prefill tokens per output_len decode steps, so B running sequences need
    B x (input_len + output_len) / output_len tokens a step: B <= budget x output_len / (input_len +
    output_len); more wait for admission (their prompt is not scheduled), so running more than this
    only lengthens the queue. A decode-only worker (disaggregated) needs B <= budget.
    Source: vLLM 0.33.0 `vllm/v1/core/sched/scheduler.py` Scheduler.schedule (token_budget =
    max_num_scheduled_tokens, the running requests first, then the waiting ones while token_budget > 0);
    steady-state token balance (hand arithmetic). Example: 8192 tokens, 1000 in / 200 out: 8192 x 200 /
    1200 = 1365 sequences."""
    if decode_only:
        return max(1, budget_tokens)
    return max(1, budget_tokens * output_len // (input_len + output_len))


def context_bound(mem: ServingMemory, spec: ModelSpec, max_model_len: int | None = None,
                  engine: str | None = None) -> str:
    """What bounds `longest_context`: `max_model_len` (given, and the smallest), `max_position_embeddings`
    (the model's length as `engine` derives it, `engine_context_length`; the pool holds more) or `kv_pool`."""
    pool, derived = pool_context(mem, spec), engine_context_length(spec, engine)
    if max_model_len and max_model_len < derived and pool >= max_model_len:
        return "max_model_len"
    return "max_position_embeddings" if pool >= derived else "kv_pool"


# ---------------------------------------------------------------- latency

UNKNOWN_SHARE_TERMS = ("burst_unknown_share_s", "burst_unknown_share_sla_s")
"""The TTFT terms that carry a start burst whose share of the measured requests is not recorded, one per
measurement campaign (`planner.serve_validate.Harness.share_term`: aiconfigurator's accuracy grid `sweep`, its
SLA-sized campaigns `sweep-sla`). The share is a parameter of how a campaign was run (requests measured per
client), not of the engine, so two campaigns run by different scripts must not share one coefficient: with one
column for both, each engine's fit had to average the grid's share with the SLA campaigns' (vLLM's came out 0,
its grid rows' TTFT then 0.4-0.6 of measured at 4,096-token prompts). Fitted apart, the grid's coefficient
divided by the engine's one-prompt prefill coefficient -- the share itself -- comes out of the same size for
the two engines whose grid rows carry a burst, 0.14 (vLLM) and 0.09 (TensorRT-LLM) (calibration/serving.yaml;
tests/test_serve_harness.py), as a property of the campaign should."""
PATH_TERMS = ("path_sweep", "path_sweep_sla")
"""The TTFT terms of a campaign's request path beyond an engine's own server, one per campaign
(`planner.serve_validate.Harness.path_term`), in units of CONSTANT_UNIT_S (their coefficients: ms per request).
aiconfigurator's campaigns send their requests through a Dynamo frontend -- its benchmark passes Dynamo's
`nvext` request extension (ai-dynamo/aiconfigurator src/aiconfigurator/generator/config/backend_templates/
benchmark/bench_run.sh.j2 @095f58a5: `--extra-inputs {"nvext":{"ignore_eos":true}}` to the deployment's
frontend port) -- an HTTP frontend, router and transport hop in front of the worker that InferenceX's client,
which talks to `vllm serve` / `trtllm-serve` directly (INFERENCEX source), does not pass. With one per-request
constant per engine for every campaign the fit had to average those paths into one intercept (the 50-200 ms
floor of review-fresh6 finding 4); with the paths apart, `constant` is the engine's own server's per-request
time, which serve-plan's steady state keeps, and each campaign's extra is its own coefficient, 0 in serve-plan."""
TTFT_TERMS = ("prefill_one_s", "weights_per_chunk_s", "constant", "kv_wait_s", "burst_s",
              *UNKNOWN_SHARE_TERMS, "wave_s", *PATH_TERMS)
"""TTFT = sum of fitted coefficient x term (see `latency_terms`) + the unfitted terms of `predict_latency`.
The burst terms describe how a benchmark measured TTFT (the clients' first prompts queued behind each
other in an idle engine: planner.serve_validate.Harness), not the engine: they are 0 in serve-plan's steady
state, and their coefficients (about the prefill's own when the share is known, the prefill's times the
campaign's share when not: UNKNOWN_SHARE_TERMS) only take the burst out of the other terms' fit. `wave_s` (SGLang's lock-step closed loop under a fixed-length benchmark) is likewise a
property of how the measurement was taken, 0 in serve-plan. No per-collective latency term: a prompt's TP all-reduces are bandwidth-bound (`prefill_allreduce_s`,
unfitted). A fitted per-collective coefficient was an artefact: in each engine's data the count,
2 x layers whenever tp > 1, names the model (qwen3-32b 128, llama-3.1-8b 64), so the fit used it as a
per-model intercept -- 2,182 us per all-reduce for SGLang, 370 us for TensorRT-LLM, against ~10-30 us an
NVLink all-reduce of a few MB takes -- and extrapolated it to models it never saw (llama-3.1-70b tp8:
160 x 2.18 ms = 349 ms of SGLang's 626 ms TTFT at concurrency 2)."""
TPOT_TERMS = ("decode_memory_s", "decode_compute_s", "collectives", "layer_steps", "constant", "prefill_interference_s",
              "running_requests")
"""TPOT = sum of fitted coefficient x term (see `latency_terms`), at least the roofline of the step (`decode_floor_s`).
A step's fixed cost has two terms: `layer_steps` (per decoder layer: the kernels each layer launches or
replays) and `constant` (per step: the engine's host work -- scheduling, input preparation, sampling); the
host work that grows with the batch is `running_requests` (per running request per step, not divided by TP).
Fitted per engine, both are identified only when the engine's fit rows span models of different depth: vLLM's
MoE rows are all Qwen3-235B-A22B-FP8, where a per-step constant of 33.2 ms made every MoE model's vLLM TPOT
~34 ms (qwen3-30b-a3b on one H100 at 1 client: 34.7 ms vs SGLang's 2.2 ms). An engine whose MoE rows are one
model therefore takes them (and the per-collective latency) from a joint fit over every engine's MoE rows:
`planner.serve_validate.SHARED_TERMS`."""
COLLECTIVE_UNIT_S = 1e-6
"""The `collectives` term counts collectives per step in microseconds (its coefficient: us per collective)."""
LAYER_UNIT_S = 1e-6
"""The `layer_steps` term counts the decoder layers one decode step runs, in microseconds (its coefficient:
the per-layer overhead of a step in us)."""
REQUEST_UNIT_S = 1e-6
"""The `running_requests` term counts the requests one decode step runs (per attention-DP group), in microseconds
(its coefficient: the host work per running request per step in us)."""
CONSTANT_UNIT_S = 1e-3
"""The `constant` term is 1 ms (its coefficient: the per-step / per-request overhead in ms)."""


def achievable_hbm_fraction() -> float:
    """Fraction of the datasheet HBM bandwidth a streaming kernel sustains, the decode step's weight and KV read
    (`latency_terms` decode_memory_s and the TPOT floor): the training model's `step_time.HBM_EFFICIENCY`, one
    memory-bound rate for training and serving ([Empirical], 0.80: BabelStream / STREAM triad on A100-80GB ~1.7 of
    2.04 TB/s and on H100 SXM ~2.6-2.9 of 3.35 TB/s; step_time's docstring). At the spec bandwidth a batch-1 decode
    of llama-3.1-8b on one H100 came out 4.84 ms, 99% of the roofline (senior review 8, M6)."""
    from planner.cost import step_time

    return step_time.HBM_EFFICIENCY


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
                  hop_s: float = 0.0, link_bytes_per_s: float = 0.0, burst_fraction: float | None = 0.0,
                  wait_steps: float = 0.0, wave_clients: float = 0.0,
                  unknown_share_term: str = UNKNOWN_SHARE_TERMS[0], path_term: str | None = None,
                  prefill_worker: bool = False, first_token_steps: float = 1.0, gpu,
                  engine: str = "") -> dict[str, float]:
    """Physical terms of TTFT and TPOT for one instance at `concurrency` sequences (closed loop).

    Terms (seconds unless named otherwise), per GPU of one stage; pp stages run in sequence, so the
    decode terms are multiplied by pp (each of pp micro-batches of B/pp sequences reads the stage):
    - decode_memory_s: (weights read + KV read) / the achievable HBM bandwidth (`achievable_hbm_fraction` x
      `hbm_bytes_per_s`, the datasheet's); MoE layers read only the experts the
      step activates, E[distinct] of B x top_k draws (`expected_distinct_experts`); KV read = B x
      (input + output/2) tokens x KV bytes per token per GPU.
    - decode_compute_s: (2 x attention parameters / attention-TP + 4 x a x d x context / attention-TP) x
      B / adp (each attention-DP group runs its own sequences) + 2 x the other active parameters / tp x B
      (MLPs and experts see every group's tokens), / peak. One request's prefill (prefill_one_s) runs its
      attention on one attention-DP group: attention parameters split attention-TP ways, not tp.
    - collectives: TP all-reduces (2 per layer when tp > 1) + MoE dispatch/combine (2 per MoE layer
      under attention DP, `moe_exchange_s`) per step, in units of COLLECTIVE_UNIT_S.
    - moe_exchange_decode_s / moe_exchange_prefill_s: bandwidth time of the MoE token exchange of one
      decode step (all running tokens, DeepEP low-latency with EP) / one request's prefill (DeepEP normal
      with EP), `moe_exchange_s` over `link_bytes_per_s`; added unfitted to TPOT / TTFT.
    - layer_steps: decoder layers a step runs (all pp stages), in units of LAYER_UNIT_S: the per-layer fixed
      cost (kernel launches / CUDA-graph replay, host work) of a step.
    - prefill_interference_s: (B - the lock-step wave's own clients) / adp / output_len x prefill_one_s: every
      request's prefill lands in the decode of the others once per lifetime, costed by the same per-operator
      forward as the prompt's own prefill (SGLang runs it as a prefill batch between decode steps, which stall
      for all of it; vLLM mixes its chunk into a decode step). Its fitted coefficient is kept >= 1
      (`planner.serve_validate.LEAST_COEFFICIENT`): a chunk inside a decode step is no faster than alone. Until
      2026-12 it was the prompt's FLOPs at the compute peak with a free coefficient (0.68 vLLM / 0.78 SGLang:
      chunk tokens at 148% / 128% of the peak while a prompt alone ran at ~51%, senior review 10, finding 1;
      fitted freely on the forward the coefficients come out 0.91 SGLang, 0.33 vLLM). Under a lock-step wave
      (`wave_clients`) the wave's own prompts prefill before any of them decodes, so only the clients outside
      the wave interfere in that way; but a wave prompt's first token comes out of its own prefill batch while the
      wave's later prompts still prefill, and its second token waits for them: the wave's tail, W - 1 -
      `start_burst_prompts`(W, per-step prompts) prefills (W = wave_clients / adp: the wave's W prefills less the
      mean ahead of a prompt and its own; 0 for a wave of one step's prompts, which finish together -- vLLM's and
      TensorRT-LLM's lock-step groups), over the O - 1 later tokens. Source: hand arithmetic of first-come-first-served
      prefill batches, as `start_burst_prompts`. Dropping the whole wave from the interference (ttftload, 2026-12)
      without its tail took SGLang's evaluation TPOT MAPE from 6.3 to 13.7 % (4096 / 128 tokens at 64 clients:
      22 ms predicted, 53 measured); with the tail 4.0 % (servefit's refit).
    - prefill_one_s: one request's prefill forward of I tokens costed per operator by the training model's
      functions (`prefill_forward_s`: GEMM efficiency at each GEMM's shape, attention efficiency at the prompt's
      length, elementwise work at the achievable HBM rate; `gpu`, the instance's GPUSpec). Under attention DP
      (adp > 1) the MLP / expert GEMMs run every group's tokens at once, so the prompt's time also holds the
      shared part of the prompts other groups prefill beside it (`prefill_groups`; all adp on a disaggregated
      prefill worker, `prefill_worker`=True, whose prompts come back to back). Its fitted coefficient is the
      measured prefill time over the training model's forward: 1.0 (the `LEAST_COEFFICIENT` bound) for SGLang's
      and vLLM's dense fits and 1.20 for TensorRT-LLM's since the queue's wait is priced (1.26-1.34 before; 2.12-2.36
      over FLOPs at the peak; calibration/serving.yaml).
    - (no prefill_batch_s since 2026-12-02: the prefill compute of the prompts waiting ahead in the closed loop,
      `prompts_per_prefill` - 1, up to one chunk, was a fitted term beside the unfitted prefill queue's wait,
      `prefill_queue_wait_s`, the same prompts by the same MVA -- one mechanism counted twice; the dense fits had
      set its coefficient to 0, the MoE fits kept 0.02-6.5 of it. Dropped: fit-part TTFT MAPE 23.1 -> 23.2 %,
      evaluation 22.2 % either way, servefit's refit.)
    - weights_per_chunk_s: weights read once per prefill chunk of max_num_batched_tokens tokens, over the
      chunks of every client's prompt (ceil(B x input / chunk)): a proxy for the prefill load of one closed-loop
      cycle. Counting only the co-batched prompts' chunks fits worse (evaluation TTFT MAPE 35.4 vs 31.4 %).
    - prefill_allreduce_s: the tensor-parallel all-reduces of one request's prefill (`tp_allreduce_s` of
      input_len tokens), added unfitted to TTFT (0 when attention-TP is 1). The prompt also holds the GPUs for
      them, so the closed-loop prefill service time of `prompts_per_prefill` is prefill_one_s + this.
    - interference_allreduce_s: the same all-reduces of the prompts that land in the others' decode, (B / output_len)
      x prefill_allreduce_s, added unfitted to TPOT: a prefill chunk's all-reduces stall the decode steps
      it shares the GPUs with exactly as its GEMMs do (prefill_interference_s), but they do not shrink with TP
      (bytes per GPU 2 (t - 1) / t x tokens x hidden x 2 B per layer, whatever t), so a fitted multiple of the
      compute cannot carry them: at tp 8 they take about as long as the prefill's FLOPs at peak (llama-3.1-8b
      bf16 on H100: 2.0 us of all-reduce vs 1.8 us of peak FLOPs per prompt token).
    - decode_allreduce_s: the decode step's all-reduces, bandwidth term, added unfitted to TPOT (their per-call
      latency is `collectives`): `tp_allreduce_s` of one micro-batch's B / pp tokens through all layers (pp
      micro-batches, each over 1 / pp of the layers per stage).
    - running_requests: requests a decode step runs per attention-DP group, in units of REQUEST_UNIT_S: the
      engine's host work per running request per step (scheduler bookkeeping, stop checks, streaming each new
      token to the detokenizer), which TP does not divide. Source: SGLang 0.5.23 wheel
      `srt/managers/scheduler_components/batch_result_processor.py` process_batch_result_decode (l. 952: a
      Python loop over batch.reqs every decode step) and `output_streamer.py` stream_output (l. 135); vLLM
      0.33.0 wheel `vllm/v1/core/sched/scheduler.py` update_from_output (l. 2259, loop l. 2313 over the
      scheduled requests), `vllm/v1/engine/output_processor.py` process_outputs (l. 728, per-request
      detokenisation), `vllm/config/scheduler.py` stream_interval ("a larger value ... reduces host overhead").
      Its coefficient is [Empirical] (us per request per step; calibration/serving.yaml). Without it the
      step's only batch-proportional terms were divided by TP (weights, KV, FLOPs), so at 512 clients an 8B
      model's tp8 step came out 10.6 ms against 29.4 measured (SGLang, H200; 24.8 ms with it) and serve-plan
      chose one tp8 instance where the measurements favour tp1 replicas.
    - decode_floor_s: the step's roofline, max(decode_memory_s, decode_compute_s / pp) (HBM bytes or FLOPs at
      peak, pp micro-batches each on 1 / pp of the layers): `predict_latency` never returns a TPOT below it.
    - burst_s: `burst_fraction` x the mean extra wait of a start burst (`start_burst_prompts`): a measurement
      whose clients all send their first prompt at once into an idle engine, whose first prompts then queue
      for prefill behind each other, `max_num_batched_tokens / input_len` (>= 1) per step; burst_fraction is
      the share of the measured requests that were in that burst (1 / requests per client; 0 in steady
      state, what serve-plan predicts).
    - burst_unknown_share_s / burst_unknown_share_sla_s (UNKNOWN_SHARE_TERMS): the same burst wait when the
      share is not known (burst_fraction None), in the campaign's own term `unknown_share_term`: its coefficient
      then carries the share (a parameter of the measurement, not of the engine); 0 otherwise.
    - wave_s: the mean prefill wait of a synchronised wave of `wave_clients` prompts (0: none): an engine that
      runs every waiting prefill before the next decode step (SGLang's default scheduler, `sglang_admitted`)
      under a benchmark whose requests all have the same lengths keeps its closed loop in lock-step -- the
      wave's requests start decoding together, finish on the same step and send their next prompts together --
      so every measured request, not only the first burst's, waits for the prefills of the wave's prompts
      ahead of it: prefill_one_s x `start_burst_prompts`(wave_clients / adp, max_num_batched_tokens / input)
      (callers pass the clients one wave admits, `sglang_admitted`; for engines that mix prefill chunks into
      decode steps, vLLM and TensorRT-LLM, the lock-step unit is the group of prompts one step's budget takes,
      min(clients, max_num_batched_tokens / input), each group waiting for its own step). 0 in serve-plan's
      steady state (lengths vary, the loop does not synchronise), like the burst terms.
    - path_sweep / path_sweep_sla (PATH_TERMS): 1 (a count, in units of CONSTANT_UNIT_S) in the term `path_term`
      names, the measuring campaign's request path beyond the engine's own server; all 0 with path_term None
      (serve-plan: a client on the engine's server).
    - prefill_service_s, prefill_sustained_s, prefill_clients, think_steps, queue_clients: the prefill station of
      the closed loop (`prefill_queue_wait_s`, `ttft_floor_s`): prefill_service_s, one prompt's service on the
      whole instance -- its per-operator forward (`prefill_forward_s`: attention side / adp, the groups running in
      parallel, + the shared side) + its TP all-reduces; prefill_sustained_s, the same without the all-reduces
      (which the engines' custom and NVLS all-reduces may run faster than the bandwidth term assumes: the
      utilisation bound keeps only what must happen); prefill_peak_s, the same work at the compute peak (what
      prefill_service_s was until 2026-12; kept for reference); prefill_clients, every client of the loop (all B:
      those waiting for a running slot queue for their prefill too, the utilisation bound); queue_clients, the
      running requests that queue for the prefill station in a steady loop (0 under a lock-step wave,
      `wave_clients` > 0: the wave is that loop's queue); think_steps, the decode steps each client spends away
      from the station (output_len - 1; 0 for a disaggregated prefill worker, whose prompts come back to back).
    - first_token_steps: `first_token_steps` (the engine's FIRST_TOKEN_STEPS; 0 on a prefill worker), the decode
      steps of `tpot_s` a first token waits for on a loaded instance beside its prefill: added to TTFT (`unfitted_s`,
      weighted by steady_share) and a floor of its own (`ttft_floor_s`). Until 2026-12-02 only that floor, so the
      fitted per-request constant carried the step in flight; added, the fit-part TTFT MAPE went 23.4 -> 23.1 %
      (vLLM 22.6 -> 21.6; servefit's refit).
    - steady_share: 1 - burst_fraction, the share of the measured requests that arrive in the steady loop (1 with an
      unknown share and in serve-plan): the steady prefill queue's wait and the first-token step (`unfitted_s`) are
      theirs; a start burst's prompts meet an idle engine and its own queue, burst_s, instead (until 2026-12-02
      every row of a burst campaign paid both in full).
    - wait_steps: decode steps a new prompt waits by a configured scheduler delay (TensorRT-LLM batch waiting,
      attention-DP balancing: `cost.serving` callers compute it); a count, added to TTFT as wait_steps x TPOT
      (`predict_latency`). 0 with the engines' defaults.
    - kv_wait_s: when B exceeds what the KV pool holds (C = max_concurrency), only C run; in a closed
      loop each request then waits (B / C - 1) request lifetimes (Little's law: the cycle time is
      B / throughput = B x lifetime / C), lifetime ~ output_len x decode step. The other terms use
      the running batch min(B, C).
    Source: roofline (Williams et al. 2009) per operator; continuous batching with chunked prefill
    (Agrawal et al. 2024, Sarathi-Serve). The coefficients are [Empirical] (`calibration/serving.yaml`).
    """
    if unknown_share_term not in UNKNOWN_SHARE_TERMS:
        raise ValueError(f"unknown_share_term {unknown_share_term!r}; allowed: {', '.join(UNKNOWN_SHARE_TERMS)}")
    if path_term not in (None, *PATH_TERMS):
        raise ValueError(f"path_term {path_term!r}; allowed: None, {', '.join(PATH_TERMS)}")
    counts = count_params(spec)
    h, pp = spec.hidden_size, inst.pp
    weights = weight_bytes_per_gpu(spec, inst, weight_format, engine)  # engine: `splits` (replicated shared experts)
    routed = sum(routed_expert_bytes(spec, inst, weight_format, l.routed_experts) for l in counts.layers) / pp
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
    attention = sum(l.attention for l in counts.layers)
    flops_local = 2 * attention / inst.attn_tp
    flops_shared = 2 * (counts.active_per_token - counts.embedding - attention) / inst.tp
    attn = 4 * spec.num_attention_heads * spec.head_dim * spec.num_hidden_layers / inst.attn_tp
    decode_memory = pp * (read + per_micro * context * kv_token) / (hbm_bytes_per_s * achievable_hbm_fraction())
    decode_compute = (local * (flops_local + attn * context) + concurrency * flops_shared) / peak_flops
    moe_layers = sum(spec.moe_layers) if spec.is_moe else 0
    collectives = (2 * spec.num_hidden_layers if inst.tp > 1 else 0) + (2 * moe_layers if inst.adp > 1 else 0)
    step = decode_memory + decode_compute
    allreduce = tp_allreduce_s(spec, inst, input_len, link_bytes_per_s)
    think = 0.0 if prefill_worker else (output_len - 1) * step
    forward = prefill_forward_s(spec, inst, gpu, weight_format, input_len)
    alone = forward.attention + forward.shared
    together = prefill_groups(inst.adp, local, alone + allreduce, think)
    beside = prefill_forward_s(spec, inst, gpu, weight_format, input_len, together).shared if together > 1 \
        else forward.shared
    prefill_one = forward.attention + beside
    chunks = math.ceil(local * input_len / max_num_batched_tokens)
    wait = max(0.0, queued / concurrency - 1) * output_len * step
    per_step = max(1.0, max_num_batched_tokens / input_len)
    burst = prefill_one * start_burst_prompts(local, per_step)
    # the instance's prefill work per prompt at peak: attention on one attention-DP group (groups in parallel),
    # MLP / expert GEMMs over every GPU of the stage, the prompt's TP all-reduces, every pp stage
    prefill_compute = input_len * ((flops_local + attn * input_len / 2) / inst.adp + flops_shared) / peak_flops
    sustained = forward.attention / inst.adp + beside / together  # the same work at the per-op forward's rate
    interfering = max(0.0, concurrency - wave_clients) / inst.adp  # a wave's own prompts prefill before it decodes
    wave = wave_clients / inst.adp
    tail = max(0.0, wave - 1 - start_burst_prompts(wave, per_step)) if wave > 1 else 0.0  # prefills after its 1st token
    stalls = interfering / output_len + tail / max(output_len - 1, 1)
    return {
        "wave_s": prefill_one * start_burst_prompts(wave_clients / inst.adp, per_step),
        "burst_s": (burst_fraction or 0.0) * burst, "steady_share": 1.0 - (burst_fraction or 0.0),
        **{t: burst if burst_fraction is None and t == unknown_share_term else 0.0 for t in UNKNOWN_SHARE_TERMS},
        **{t: 1.0 if t == path_term else 0.0 for t in PATH_TERMS},
        "wait_steps": wait_steps,
        "decode_memory_s": decode_memory, "decode_compute_s": decode_compute,
        "decode_floor_s": max(decode_memory, decode_compute / pp), "running_requests": local,
        "prefill_service_s": sustained + allreduce, "prefill_peak_s": prefill_compute + allreduce,
        "prefill_sustained_s": sustained, "prefill_clients": queued,
        "queue_clients": 0.0 if wave_clients else concurrency,
        "think_steps": 0 if prefill_worker else max(output_len - 1, 0),
        "first_token_steps": 0.0 if prefill_worker else first_token_steps,
        "pp": pp,
        "collectives": collectives * pp, "constant": 1.0, "layer_steps": spec.num_hidden_layers,
        "prefill_interference_s": stalls * prefill_one,
        "prefill_one_s": prefill_one,
        "weights_per_chunk_s": chunks * weights * pp / hbm_bytes_per_s, "kv_wait_s": wait,
        "hop_s": hop_s * (pp - 1),
        "prefill_allreduce_s": allreduce, "interference_allreduce_s": stalls * allreduce,
        "decode_allreduce_s": tp_allreduce_s(spec, inst, per_micro, link_bytes_per_s),
        "moe_exchange_decode_s": moe_exchange_s(spec, inst, concurrency, decode=True, link_bytes_per_s=link_bytes_per_s),
        "moe_exchange_prefill_s": moe_exchange_s(spec, inst, input_len, decode=False, link_bytes_per_s=link_bytes_per_s),
    }


@dataclass(frozen=True)
class PrefillForward:
    """Seconds of one prompt's prefill forward on the GPUs of one instance stage, split by who runs it
    (`prefill_forward_s`): `attention` on each GPU of the prompt's attention group (attention-TP GPUs),
    `shared` on each GPU of the stage (the MLP / expert GEMMs every attention-DP group's tokens meet)."""

    attention: float
    shared: float


def gemm_dtype(gpu, weight_format: str) -> str:
    """Linear GEMM dtype of `weight_format` on `gpu` (a GPUSpec) for `prefill_forward_s`: fp8 for the fp8 formats
    where the GPU has an fp8 peak and its family an fp8 efficiency (`cost.compute.GemmEfficiency.fp8_e_max`), fp4
    for mxfp4 / nvfp4 where it has an fp4 peak (at the bf16 efficiency: no fp4 training row), else bf16 (fp16
    without bf16): int8 / int4 weight-only formats dequantize into bf16 GEMMs."""
    from planner.cost import compute

    native = native_dtype(weight_format)
    if native in gpu.peak_tflops and (native != "fp8" or compute.efficiency_constants(gpu).fp8_e_max is not None):
        return native
    return "bf16" if "bf16" in gpu.peak_tflops else "fp16"


def prefill_forward_s(spec: ModelSpec, inst: Instance, gpu, weight_format: str, tokens: float,
                      shared_prompts: float = 1.0) -> PrefillForward:
    """One prompt's prefill forward of `tokens` tokens through every layer, costed per operator by the TRAINING
    step-time model's functions -- one compute model for training and serving (senior review 8, H1):

    - linear GEMMs at `cost.compute.gemm_efficiency` of their real shape: attention projections (split over
      attention-TP a, narrowest dimension min(hidden / a, tokens)) on the attention side; dense MLP, shared experts
      and router (over tp, min(hidden / tp, tokens)) on the shared side; in `gemm_dtype` at its peak x the
      power-limited clock fraction (`compute.achieved_flops`'s product);
    - routed experts: top_k x one expert's FLOPs per token / tp at the efficiency of a grouped GEMM whose narrowest
      dimension is min(tokens x top_k / experts (each expert's rows: the prompt's tokens it receives), expert
      width / (tp / ep), hidden), or the local experts' weight bytes (`routed_expert_bytes`) at the achievable HBM
      rate, whichever is longer (roofline);
    - the attention core, split over attention-TP: the training model's executed-work function
      (`step_time.attention_core_s`: the causal part of the score FLOPs, about half, at the causal fused
      kernel's rate on a chunk of the prompt's length, the window on sliding layers) -- the engines' causal
      kernels skip the masked tiles as Megatron's and torchtitan's do;
    - memory-bound work at the achievable HBM rate (`step_time.HBM_EFFICIENCY` x the datasheet bandwidth): the
      fused norms, residual adds, RoPE and MLP activation (`step_time.fused_elementwise_bytes`) and MoE routing and
      permutation (`step_time._moe_memory_bytes`). The engines run no sequence parallelism, so every attention-TP
      rank runs the norms and residual adds on all the prompt's tokens, each copy in full (a forward has no backward
      to share them with: the training function's third-weight copies are passed as 1 + 3 (a - 1));
    - under attention DP the shared side runs `shared_prompts` prompts' tokens at once (the groups prefilling
      beside the prompt, `prefill_groups`): its GEMM shapes (rows per expert) and its one read of the local
      experts' weights are those of the batch, and `shared` is the batch's time;
    - the TP all-reduces are not here (`tp_allreduce_s`: added unfitted to TTFT), nor is the LM head (the engines
      compute logits of a prompt's last token only: vLLM `gpu_model_runner.py` logits_indices).
    A dense model's prompt on one GPU therefore costs the training model's forward of one micro-batch of that
    length (Megatron, bf16, fused kernels), less the LM head (tests/test_serving_prefill.py); its fused elementwise kernels are Megatron's, and the engines fuse the same chains
    (vLLM `fused_add_rms_norm`, `silu_and_mul`, rotary kernels).
    Hand check (tests/test_serving_prefill.py): llama-3.1-8b, one H100, 8,192 tokens, bf16.
    Source: planner.cost.compute (gemm_efficiency, attention_flops, clock_fraction; [Empirical] constants of
    calibration/training.yaml, fitted on training runs only), planner.cost.step_time (per-layer FLOPs, fused
    elementwise bytes, HBM_EFFICIENCY)."""
    from planner.cost import compute

    memo = spec_memo(spec)
    key = ("prefill_forward", inst, gpu.name, gpu.hbm_gb_per_s, tuple(sorted(gpu.peak_tflops.items())), weight_format,
           tokens, shared_prompts, id(compute.calibration()))
    if key not in memo:
        memo[key] = _prefill_forward(spec, inst, gpu, weight_format, tokens, shared_prompts)
    return memo[key]


def _prefill_forward(spec: ModelSpec, inst: Instance, gpu, weight_format: str, tokens: float,
                     shared_prompts: float) -> PrefillForward:
    from planner.cost import compute, step_time

    h, a, tp = spec.hidden_size, inst.attn_tp, inst.tp
    dtype = gemm_dtype(gpu, weight_format)
    core = dtype if dtype in ("bf16", "fp16") else "bf16"  # FlashAttention runs bf16 beside fp8 / fp4 GEMMs
    eff_dtype = "fp8" if dtype == "fp8" else "bf16"
    rate = compute.peak_flops(gpu, dtype) * compute.clock_fraction(gpu)
    hbm = gpu.hbm_gb_per_s * 1e9 * step_time.HBM_EFFICIENCY

    def gemm_s(flops: float, dim: float) -> float:
        return flops / (rate * compute.gemm_efficiency(gpu, gemm_dim=max(dim, 1e-9), precision=eff_dtype))

    def layer_s(index: int, layer) -> tuple[float, float]:
        dense, routed, _ = step_time._layer_flops_per_token(spec, index, int(tokens))
        attention = (gemm_s(tokens * 2 * layer.attention / a, min(h / a, tokens))
                     + tokens / a * step_time.attention_core_s(spec, index, tokens, gpu, core)
                     + tokens / a * step_time.fused_elementwise_bytes(spec, index, replicated=1 + 3 * (a - 1)) / hbm)
        batch = tokens * shared_prompts  # the MLP / expert GEMMs run every prefilling group's tokens at once
        shared = gemm_s(batch * (dense - 2 * layer.attention) / tp, min(h / tp, batch))
        if routed:
            rows = batch * spec.num_experts_per_tok / spec.num_experts
            width = spec.moe_intermediate_size / max(1, tp // inst.ep)
            flops_s = gemm_s(batch * routed / tp, min(rows, width, h))
            bytes_s = routed_expert_bytes(spec, inst, weight_format, layer.routed_experts) / hbm
            shared += max(flops_s, bytes_s) + batch / tp * step_time._moe_memory_bytes(spec, index) / hbm
        return attention, shared

    kinds: dict[tuple, list] = {}  # layers of one kind cost the same: price each kind once
    for index, layer in enumerate(count_params(spec).layers):
        kind = (layer, spec.layer_types[index] if spec.layer_types else "", spec.is_moe and spec.moe_layers[index])
        kinds.setdefault(kind, [index, layer, 0])[2] += 1
    parts = [(n, layer_s(index, layer)) for index, layer, n in kinds.values()]
    return PrefillForward(attention=sum(n * t[0] for n, t in parts), shared=sum(n * t[1] for n, t in parts))


def tp_allreduce_s(spec: ModelSpec, inst: Instance, tokens: float, link_bytes_per_s: float) -> float:
    """Seconds of the tensor-parallel all-reduces of one forward of `tokens` tokens through every layer,
    bandwidth term (`latency_terms` prefill_allreduce_s, interference_allreduce_s, decode_allreduce_s).

    2 per layer (attention and MLP outputs, Megatron-style TP: Shoeybi et al. 2019 sec. 3) of
    tokens x hidden x 2 B (bf16 activations) each; a ring (or two-shot) all-reduce moves 2 (t - 1) / t of it
    per GPU (Patarasuk & Yuan 2009; NCCL's busBw = algBw x 2(n-1)/n), t = attention-TP, over `link_bytes_per_s`;
    0 when t = 1. The engines run them on the critical path (no overlap with the GEMMs by default): vLLM 0.33.0
    `vllm/distributed/device_communicators/custom_all_reduce.py` (its own kernels below max_size = 8 MiB, l. 138
    / 510: decode steps; NCCL above: prefill chunks, 8,192 tokens x 4,096 x 2 B = 64 MiB).
    Hand check: llama-3.1-70b (80 layers, hidden 8192), tp 8, 4,000 tokens, 450 GB/s:
    160 x 65.5 MB x 14/8 / 450e9 = 40.8 ms."""
    t = inst.attn_tp
    if t == 1 or not link_bytes_per_s:
        return 0.0
    message = tokens * spec.hidden_size * 2
    return 2 * spec.num_hidden_layers * message * 2 * (t - 1) / t / link_bytes_per_s


def start_burst_prompts(clients: float, per_step: float) -> float:
    """Mean prefills a prompt of a start burst waits for beyond its own, in units of one prompt's prefill:
    `clients` prompts arrive at once at an idle engine, which prefills `per_step` (>= 1) of them per step
    (its per-step token budget / prompt length), each step taking `per_step` prefills' time; the prompt in
    step k sees its first token after k steps. Mean over the burst: (clients + min(clients, per_step)) / 2
    prefills (exact when per_step divides clients), less its own one prefill.

    Source: hand arithmetic of first-come-first-served batches: steps n = clients / per_step, mean step index
    (n + 1) / 2, times per_step prefills a step = (clients + per_step) / 2. Hand checks: 64 prompts, 8 a
    step (8,192-token budget, 1,024-token prompts): (64 + 8) / 2 - 1 = 35 prefills; 8 prompts that fit one
    step: 8 - 1 = 7 (all wait for the whole step); 1 prompt: 0."""
    if clients <= 1:
        return 0.0
    return (clients + min(clients, per_step)) / 2 - 1


SGLANG_INIT_NEW_TOKEN_RATIO = 0.7
"""new_token_ratio SGLang starts at (and resets to when idle): the share of a running request's remaining
max_new_tokens its admission check reserves. Source: SGLang 0.5.23 wheel `srt/environ.py`
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7 (x schedule_conservativeness, default 1.0: `srt/managers/scheduler_components/
new_token_ratio_tracker.py` NewTokenRatioTracker.from_config; reset() when the scheduler idles); the same value in
0.5.1.post1 - 0.5.9 (`srt/managers/scheduler.py` init_new_token_ratio, `scheduler_runtime_checker_mixin.py`
self_check_during_idle in 0.5.8.post1). It decays by (0.7 - 0.7 x 0.14) / 600 per decode step, which a wave's
admission (`sglang_admitted`: prefill batches back to back, no decode step between them) never sees."""
SGLANG_CLIP_MAX_NEW_TOKENS = 4096
"""max_new_tokens the admission check counts at most per request. Source: SGLang 0.5.23 wheel
`srt/managers/schedule_policy.py` CLIP_MAX_NEW_TOKENS (env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096);
the same in 0.5.1.post1 - 0.5.9."""


def sglang_admitted(pool_tokens: int, input_len: int, output_len: int, clients: int, chunk_tokens: int,
                    max_running: int | None = None, ratio: float = SGLANG_INIT_NEW_TOKEN_RATIO) -> int:
    """Requests SGLang's scheduler admits from `clients` prompts that reach an idle engine together (a wave),
    before the first of them finishes: its admission check (`PrefillAdder.add_one_req`, radix cache on, the
    default) and prefill-first loop, per data-parallel rank. >= 1 (a lone request is always tried).

    Each scheduler cycle runs one prefill batch while requests wait and can be admitted, else one decode step
    (`Scheduler.get_next_batch_to_run`: get_new_batch_prefill first), so a wave's prefill batches run back to
    back. A batch takes prompts while its chunk budget lasts (rem_chunk_tokens = chunked_prefill_size; a prompt
    longer than what is left is chunked and finishes in the next batch), each only if
    input + min(max_new_tokens, CLIP) < rem_total_tokens = free pool tokens - the batch's earlier prompts'
    input + min(max_new_tokens, CLIP) - every running request's min(max_new_tokens - generated, CLIP) x
    new_token_ratio; the first refusal (NO_TOKEN) sets batch_is_full, and no prompt is admitted again until a
    running request finishes. In a wave every admitted request holds input + 1 tokens (its prefill made the first
    output token) and runs max_new_tokens = output_len (the benchmark's max_tokens). Capped at `max_running`
    (SGLang's max_running_requests) and `clients`.

    Source: SGLang 0.5.23 wheel `srt/managers/schedule_policy.py` PrefillAdder (rem_total_tokens,
    _get_running_request_total_token_offset, _update_prefill_budget, add_one_req, add_chunked_req),
    `srt/managers/scheduler.py` get_new_batch_prefill (batch_is_full); the same rules in 0.5.1.post1, 0.5.6.post2,
    0.5.8.post1 and 0.5.9 (`schedule_policy.py` / `scheduler.py` of each wheel). Hand check (tests): pool 20,000,
    1,024 in / 512 out, chunk 8,192: the first batch takes 8 (8 x 1,536 = 12,288 < 20,000); the second sees
    8 x (1,025 + 511 x 0.7) = 11,061.6 held, 8,938.4 left, and takes 5 (5 x 1,536 = 7,680 < 8,938.4; a sixth
    needs 9,216): 13 admitted."""
    clip_new = min(output_len, SGLANG_CLIP_MAX_NEW_TOKENS)
    need = input_len + clip_new
    held = input_len + 1 + min(output_len - 1, SGLANG_CLIP_MAX_NEW_TOKENS) * ratio
    cap = min(clients, max_running or clients)
    chunk_tokens = max(1, chunk_tokens)
    running, carried = 0, 0.0
    while running < cap:
        chunk_left = chunk_tokens - carried
        carried = max(0.0, -chunk_left)
        if chunk_left <= 0:  # a prompt longer than a batch's budget fills this batch too
            continue
        rem_total = pool_tokens - running * held
        batch = 0
        while running + batch < cap and chunk_left > 0:
            if need >= rem_total - batch * need:
                return max(1, running + batch)
            batch += 1
            if input_len > chunk_left:
                carried = input_len - chunk_left
            chunk_left -= input_len
        running += batch
    return max(1, running)


def prompts_per_prefill(clients: float, prefill_s: float, decode_s: float) -> float:
    """Prompts one prefill batch holds in a closed loop of `clients` requests (each: a prefill of
    `prefill_s` on the GPU, then `decode_s` decoding), >= 1: the arriving prompt plus those waiting ahead of it.

    Closed queueing network with one queueing station (prefill, service S) and one delay station (decode,
    Z) under Schweitzer's approximate mean-value analysis (Q(C-1) ~ (C-1)/C Q(C); Schweitzer 1979,
    Bard 1979): the prefill residence R solves R = S (1 + (C-1) R / (R + Z)), i.e.
    R = (b + sqrt(b^2 + 4 S Z)) / 2 with b = C S - Z; an arrival sees (C-1) R / (R + Z) prompts ahead
    (arrival theorem, Reiser & Lavenberg 1980). R -> S when C S << Z (arrivals staggered: one prompt
    per batch), R -> C S - Z when the GPU is prefill-bound (every client waiting: a burst). Capped at
    `clients`. Example (hand arithmetic): C = 2, S = 0.075 s, Z = 5 s: b = -4.85, R = 0.0761 s, ahead
    0.0150 -> 1.015 prompts; C = 128, S = 0.075, Z = 5: b = 4.6, R = 4.68 s, ahead 61.4 -> 62.4."""
    if clients <= 1 or prefill_s <= 0:
        return max(1.0, min(clients, 1.0))
    residence = prefill_residence_s(clients, prefill_s, decode_s)
    ahead = (clients - 1) * residence / (residence + decode_s)
    return min(1 + ahead, clients)


def prefill_groups(adp: int, clients: float, prefill_s: float, decode_s: float) -> float:
    """Attention-DP groups prefilling at once, >= 1 (the prompt's own group + each other group with the
    probability that it is prefilling): 1 + (adp - 1) x U, U = the prefill station's utilisation of one group's
    closed loop of `clients` (each: `prefill_s` of prefill, then `decode_s` decoding), X x S with throughput
    X = clients / (R + Z) (`prefill_residence_s`), capped at 1; decode_s = 0 (a prefill worker fed back to back):
    every group, adp. Source: the utilisation law U = X S (Denning & Buzen 1978). SGLang's DP attention runs the
    MoE layers of every attention-DP rank together (srt/layers/dp_attention.py: tokens gathered across the
    attention-DP ranks before the MoE / MLP). Hand checks (tests): adp 8, decode_s 0: 8; adp 1: 1."""
    if adp <= 1:
        return 1.0
    if decode_s <= 0:
        return float(adp)
    residence = prefill_residence_s(clients, prefill_s, decode_s)
    utilisation = min(1.0, clients / (residence + decode_s) * prefill_s)
    return 1 + (adp - 1) * utilisation


def prefill_residence_s(clients: float, prefill_s: float, decode_s: float, residual: float = 1.0) -> float:
    """Mean time a prompt spends at the prefill station of a closed loop of `clients` requests (each: a prefill
    of `prefill_s` seconds on the GPUs, then `decode_s` away decoding), seconds: its own prefill plus the
    prefills queued ahead of it. Schweitzer's approximate mean-value analysis, as `prompts_per_prefill`:
    R = (b + sqrt(b^2 + 4 S Z)) / 2, b = C S - Z; R = S for one client; R = C S when Z = 0 (every client's
    prompt queued: the station's throughput is 1 / S, the utilisation law's bound, Denning & Buzen 1978).
    `residual`: the mean remaining service of the prompt in service when another arrives, in units of S,
    (1 + cv^2) / 2 for service times of squared coefficient of variation cv^2: 1 (exponential, MVA's product
    form, the default) or 1/2 (deterministic: prompts of one length). With it the arrival's wait is
    S x (Q_a - (1 - residual) U_a) (Q_a, U_a: the queue and utilisation an arrival sees, (C - 1) / C of the
    time averages under Schweitzer's approximation), and R solves R^2 - b R - S Z + (1 - residual) (C - 1) S^2 = 0
    (Reiser's residual-service correction of MVA for non-exponential FCFS servers, Reiser 1979; Lazowska et al.,
    Quantitative System Performance, 1984, sec. 6.4; the discriminant is ((C - 1) S - Z)^2 + S^2 + 2 S Z > 0 at
    residual 1/2).
    Hand checks (tests): C = 8, S = 0.16 s, Z = 0: 1.28 s; C = 2, S = 0.075, Z = 5: 0.07612 s."""
    if clients <= 1 or prefill_s <= 0:
        return max(prefill_s, 0.0)
    b = clients * prefill_s - decode_s
    c = prefill_s * decode_s - (1 - residual) * (clients - 1) * prefill_s ** 2
    return (b + math.sqrt(b * b + 4 * c)) / 2


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue of `servers` servers at `offered` load (Erlangs: arrival
    rate x mean service), the Erlang C formula; 1 at offered >= servers (no steady state), 0 at offered <= 0.
    Computed through the Erlang B recursion B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1)) (stable for thousands of
    servers), C = B / (1 - U (1 - B)), U = a / c. Hand check (tests/test_serve_open_loop.py): c = 1: C = U;
    c = 2, a = 1: B = 1/5, C = (1/5) / (1 - 1/2 x 4/5) = 1/3.
    Source: Erlang (1917); Kleinrock, Queueing Systems vol. 1 (1975), eq. 3.40 (M/M/m) and 3.44 (Erlang B)."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    blocked = 1.0
    for k in range(1, servers + 1):
        blocked = offered * blocked / (k + offered * blocked)
    return blocked / (1 - offered / servers * (1 - blocked))


def open_queue_wait_s(rate_per_s: float, servers: int, service_s: float) -> float:
    """Mean wait in the shared queue in front of `servers` identical servers fed an open (Poisson) stream of
    `rate_per_s` requests/s, each holding a server `service_s` seconds (deterministic: one prompt length, one
    output length), seconds: the M/D/c queue by the Allen-Cunneen approximation, the M/M/c wait times
    (c_a^2 + c_s^2) / 2 = 1/2 (Poisson arrivals, c_a^2 = 1; deterministic service, c_s^2 = 0):
    W = C(c, a) S / (c (1 - U)) / 2, a = rate x S, U = a / c (`erlang_c`). Exact for one server: C(1, a) = U and W =
    U S / (2 (1 - U)), the M/D/1 queue's Pollaczek-Khinchine mean. Infinite at U >= 1 (no steady state).
    serve-plan's one model of requests queueing for a server: a disaggregated prefill worker's attention-DP groups,
    each fed its even share by the router (`prefill_worker_wait_s`: c = 1 per group), an aggregated replica's
    running-request slots, one waiting queue in front of its cap (`planner.serve.open_loop_point`: c = the cap), its
    prompts at the prefill station at --request-rate (`open_loop_point`: c = 1, service the station's), and a
    disaggregated decode worker's slots (`planner.serve.decode_wait_s`: c = the cap per attention-DP group).
    Hand checks (tests/test_serve_open_loop.py): c = 1, U = 0.9, S = 1 s: 4.5 s; c = 2, rate 1/s, S = 1 s: a = 1,
    C = 1/3, W = (1/3) / (2 x 1/2) / 2 = 1/6 s.
    Source: Allen, Probability, Statistics, and Queueing Theory (2nd ed., 1990), sec. 6.3 (the Allen-Cunneen
    approximation of the GI/G/c queue); Pollaczek-Khinchine (Kleinrock 1975, ch. 5) for c = 1."""
    if rate_per_s <= 0 or service_s <= 0:
        return 0.0
    offered = rate_per_s * service_s
    if offered >= servers:
        return math.inf
    return erlang_c(servers, offered) * service_s / (servers * (1 - offered / servers)) / 2


def prefill_worker_wait_s(rate_per_s: float, capacity_per_s: float, service_s: float) -> float:
    """Mean wait of a prompt in front of a disaggregated prefill worker fed an open-loop stream of `rate_per_s`
    requests/s, seconds: each of its attention-DP groups (capacity = groups / S, each group one prompt at a time, the
    router spreading the requests evenly over the groups) is one server with its own queue at the same utilisation
    U = rate / capacity, so the wait is `open_queue_wait_s` of one server at rate U / S: the M/D/1 queue's
    Pollaczek-Khinchine mean, W = U S / (2 (1 - U)), S = `service_s`, one prompt's prefill (deterministic: one
    prompt length). Infinite at U >= 1 (no steady state).
    Why an open queue and not `prefill_queue_wait_s`'s closed-loop MVA: the emitted prefill worker runs one prompt at a
    time (a running-request cap of 1, `planner.serve` emit) and is fed by the router as requests arrive -- at
    --request-rate an open arrival stream, not a fixed client population (Poisson arrivals, the load of vLLM's serving
    benchmark at a --request-rate; that script not re-read for this function, VERIFY). Round-robin routing makes the
    arrivals smoother than Poisson, so this is an upper estimate of the wait (Kingman's bound with c_a^2 < 1).
    Hand check (tests/test_serve_plan.py): U = 0.9, S = 1.0 s: 0.9 / 0.2 = 4.5 s.
    Source: the Pollaczek-Khinchine mean-value formula of the M/G/1 queue, W = rate E[S^2] / (2 (1 - U)), with
    E[S^2] = S^2 (Kleinrock, Queueing Systems vol. 1, 1975, ch. 5)."""
    if rate_per_s <= 0 or service_s <= 0:
        return 0.0
    return open_queue_wait_s(rate_per_s / capacity_per_s / service_s, 1, service_s)


def prefill_worker_max_load(wait_budget_s: float, service_s: float) -> float:
    """The highest utilisation U at which `prefill_worker_wait_s` stays within `wait_budget_s` (the TTFT SLO less
    the prompt's own service and its KV transfer): U S / (2 (1 - U)) <= B  <=>  U <= 2 B / (S + 2 B); 0 for B <= 0.
    Source: `prefill_worker_wait_s` solved for U (hand algebra)."""
    if wait_budget_s <= 0:
        return 0.0
    return 2 * wait_budget_s / (service_s + 2 * wait_budget_s)


def link_bytes_per_s(hw, gpus: int) -> float:
    """Per-GPU bandwidth of the slowest link a group of `gpus` GPUs of cluster `hw` (a ClusterSpec)
    spans, bytes/s: scale-up inside one scale-up domain (a node; an NVL72 rack), the network per GPU
    beyond it. Source: the cluster file (scaleup_gb_per_s, scaleup_domain_gpus; NICs per node x NIC
    rate / GPUs per node)."""
    return (hw.network_gb_per_s_per_gpu if gpus > hw.scaleup_domain_gpus else hw.scaleup_gb_per_s) * 1e9


DEEPEP_SCALE_GROUP = 128
"""FP8 dispatch carries one fp32 scale per 128 hidden elements. Source: deepseek-ai/DeepEP docs/legacy.md
@0297fc80 (FP8 dispatching, BF16 combining; per-128-channel scales as in DeepSeek-V3's FP8 recipe)."""


def moe_exchange_s(spec: ModelSpec, inst: Instance, tokens: float, *, decode: bool, link_bytes_per_s: float) -> float:
    """Seconds of the MoE token exchange (dispatch + combine) of one forward of `tokens` tokens
    (the instance's, all attention-DP groups) over every MoE layer, bandwidth term only (the per-op
    latency is in the `collectives` count).

    Without attention DP (adp 1) every TP rank already holds every token and the MoE output joins the
    TP all-reduce: no exchange (EP or expert TP alike). With attention DP each group's tokens must reach
    the experts on all tp GPUs of the stage:
    - ep > 1, DeepEP: decode uses the low-latency kernels (each token sent once per chosen expert:
      tokens x top_k x (h FP8 + scales) out, tokens x top_k x h x 2 B BF16 back), prefill the normal
      kernels (once per destination rank: E[ranks hit] = ep (1 - (1 - 1/ep)^top_k)). Source:
      deepseek-ai/DeepEP docs/legacy.md @0297fc80 (LL dispatch 128 tokens x top-8 x 7168 FP8 at EP8:
      77 us = 7.3 MB / 98 GB/s; combine 114 us = 14.7 MB / 127 GB/s); SGLang 0.5.23
      srt/layers/moe/utils.py DeepEPMode.resolve (auto: normal when the batch has prefill, low_latency
      for decode-only batches); vLLM 0.33.0 config/parallel.py all2all_backend deepep_low_latency /
      deepep_high_throughput.
    - ep = 1 (experts TP-split over the stage): all-gather of every token to every GPU, reduce-scatter
      back, BF16: 2 x tokens x h x 2 B x (tp - 1) / tp received per GPU. Source: vLLM 0.33.0
      config/parallel.py all2all_backend default "allgather_reducescatter" (also its path with EP).
    Traffic per GPU / `link_bytes_per_s` (the slowest link the stage spans), per MoE layer. An EP group over
    several nodes (`planner.serve.wide_ep_shapes`) runs at the per-GPU network rate, all of its traffic priced
    there (the share to peers of its own node, which DeepEP's normal kernels forward over NVLink, included: an
    upper bound by 1 / nodes). DeepEP reaches about that rate across nodes: deepseek-ai/DeepEP docs/legacy.md
    @dd758caf (H800, one CX7 400 Gb/s NIC per GPU, ~50 GB/s): normal kernels 43 / 58 / 51 GB/s RDMA bottleneck
    bandwidth at EP 16 / 32 / 64, low-latency kernels 63 / 48 / 43 / 39 GB/s dispatch at EP 16 / 32 / 64 / 128
    (tests/test_serve_wide_ep.py: EP32 decode of 128 tokens per GPU is within 5% of its 155 + 273 us per layer).
    """
    if not spec.is_moe or inst.adp == 1 or not link_bytes_per_s:
        return 0.0
    h, k, n = spec.hidden_size, spec.num_experts_per_tok, inst.tp
    per_gpu = tokens / n
    fp8 = h + h / DEEPEP_SCALE_GROUP * 4
    if inst.ep > 1:
        fanout = k if decode else inst.ep * (1 - (1 - 1 / inst.ep) ** k)
        traffic = per_gpu * fanout * (fp8 + 2 * h)
    else:
        traffic = 2 * tokens * h * 2 * (n - 1) / n
    return sum(spec.moe_layers) * traffic / link_bytes_per_s


def dense_gather_s(spec: ModelSpec, inst: Instance, tokens: float, *, decode: bool, link_bytes_per_s: float) -> float:
    """Seconds of the token gathers of the dense layers' MLPs under SGLang's default dense tensor parallelism
    with attention DP, for one forward of `tokens` tokens (the instance's, all attention-DP ranks), bandwidth term.

    Under attention DP with the dense MLPs split over all tp ranks (moe_dense_tp_size unset), every rank's tokens
    are gathered to every rank before each dense MLP and the output reduce-scattered back (`srt/utils/common.py`
    require_mlp_tp_gather: True when moe_dense_tp_size is None; `srt/layers/dp_attention.py` dp_gather /
    dp_reduce_scatter_tensor). A prefill batch gathers by an all-reduce of the summed buffer (DpPaddingMode
    SUM_LEN for batches with prefill, 2 (n - 1) / n x the buffer per GPU), a decode batch of even ranks by an
    all-gather (MAX_LEN, (n - 1) / n; the custom all-reduce path is off under an all-to-all MoE backend,
    _decode_sum_len_fits_custom_all_reduce); the reduce-scatter moves (n - 1) / n. Per dense layer and GPU:
    (3 prefill | 2 decode) x (n - 1) / n x tokens x hidden x 2 B (bf16) over `link_bytes_per_s` (the network
    for an instance over nodes, `link_bytes_per_s`). 0 with `Instance.dense_dp` (no gather: each rank runs its
    own tokens), without attention DP, or without dense layers. SGLang 0.5.23 wheel.
    Hand check (tests/test_serve_wide_ep.py): DeepSeek-V3 (3 dense layers, hidden 7,168) at EP32 decode, 4,096
    tokens: 3 x 2 x 31/32 x 4,096 x 7,168 x 2 B / 50 GB/s = 6.83 ms per step."""
    if inst.dense_dp or inst.adp == 1 or not link_bytes_per_s:
        return 0.0
    dense = spec.num_hidden_layers - (sum(spec.moe_layers) if spec.is_moe else 0)
    n = inst.tp
    passes = 2 if decode else 3
    return dense * passes * (n - 1) / n * tokens * spec.hidden_size * 2 / link_bytes_per_s


def two_batch_overlap_tpot_s(rest_s: float, exchange_s: float) -> float:
    """Decode step with two-batch overlap, seconds: the step's work without the MoE exchange (`rest_s`) and the
    exchange (`exchange_s`, `moe_exchange_s` of the whole batch) overlap, so the step takes the longer of the two.

    SGLang's two-batch overlap splits a decode batch into two micro-batches of half the sequences each
    (SGLang 0.5.23 wheel `srt/batch_overlap/two_batch_overlap.py` compute_split_seq_index: decode ->
    (num_tokens // tokens per sequence) // 2) and runs each layer's operations so that one micro-batch's DeepEP
    dispatch / combine is in flight while the other computes (`srt/batch_overlap/operations_strategy.py`
    _compute_moe_deepseek_blog_decode: YieldOperation around op_dispatch_a / op_dispatch_b and op_combine_a /
    op_combine_b), DeepSeek's published decode schedule (LMSYS, lmsys.org/blog/2025-05-05-large-scale-ep,
    "Two-batch Overlap"). Per layer the two halves alternate, so over the step the exposed time is max(compute,
    exchange); the pipeline's fill / drain (one half's exchange of the first and last layer) and the halved
    GEMM batch are not priced (an optimistic bound of the overlap). Hand check (tests): max(0.064, 0.021) = 0.064."""
    return max(rest_s, exchange_s)


def _unit(term: str) -> float:
    if term in PATH_TERMS:
        return CONSTANT_UNIT_S
    return {"collectives": COLLECTIVE_UNIT_S, "layer_steps": LAYER_UNIT_S, "running_requests": REQUEST_UNIT_S,
            "constant": CONSTANT_UNIT_S}.get(term, 1.0)


def predict_latency(terms: dict[str, float], coefficients: dict[str, dict[str, float]]) -> tuple[float, float]:
    """(TTFT s, TPOT s) from `latency_terms` and one engine's fitted coefficients
    ({"ttft": {term: c}, "tpot": {term: c}}). PP hops add unfitted to both, the MoE exchange to each,
    the prefill all-reduces and the steady prefill queue's wait (`prefill_queue_wait_s`) to TTFT, the decode's and the interfering prefills' all-reduces to TPOT (`unfitted_s`).
    TPOT is at least `decode_floor_s`: no step is faster than reading its weights and KV once at the achievable HBM
    rate (`achievable_hbm_fraction`), or
    than its FLOPs at the compute peak (roofline, Williams et al. 2009); the fitted weight-read
    coefficients below 1 (routing skew of large batches, `expected_distinct_experts`) must not carry below it
    at small batches, where the distinct experts are exactly top_k per token."""
    tpot = sum(coefficients["tpot"][t] * terms[t] * _unit(t) for t in TPOT_TERMS) + unfitted_s(terms, "tpot")
    tpot = max(tpot, terms["decode_memory_s"], terms.get("decode_floor_s", 0.0))
    ttft = sum(coefficients["ttft"][t] * terms[t] * _unit(t) for t in TTFT_TERMS) + unfitted_s(terms, "ttft", tpot)
    return max(ttft, ttft_floor_s(terms, tpot)), tpot


FIRST_TOKEN_STEPS = {"vllm": 1.0, "trtllm": 1.0, "sglang": 0.5}
"""Decode steps (of the mean TPOT) a prompt's first token waits for on a loaded instance beside its own prefill, per
engine (`latency_terms` first_token_steps: added to TTFT by `unfitted_s`, and a floor in `ttft_floor_s`). vLLM and TensorRT-LLM mix prefill chunks into the decode
steps: a new prompt's chunk runs in a step that also carries every running request's decode token, so its first
token comes out of a step at least as long as a decode step (vLLM 0.33.0 wheel `vllm/v1/core/sched/scheduler.py`
Scheduler.schedule: the running requests are scheduled first, then the waiting ones within the token budget;
TensorRT-LLM's in-flight batching with chunked context schedules the same way -- its source not re-read for this
constant, VERIFY). SGLang runs a waiting prompt's prefill batch on its own, before the next decode step (SGLang 0.5.23
`srt/managers/scheduler.py` get_next_batch_to_run: get_new_batch_prefill first -- as `sglang_admitted` reads
that scheduler; this ordering not re-read for this constant, VERIFY), so the prompt waits only for the
step in flight: half of one on average for arrivals at random times. A bound: without it a loaded vLLM instance
was credited first tokens in less than one step, more tokens per second than its per-step budget admits
(tests/test_serve_plan.py test_vllm_throughput_respects_the_per_step_token_budget)."""


def ttft_floor_s(terms: dict[str, float], tpot_s: float) -> float:
    """The least TTFT a closed loop allows (`latency_terms` prefill_service_s, prefill_sustained_s, prefill_clients,
    think_steps), seconds, the larger of two bounds, plus the prompt's PP hops and MoE exchange (`unfitted_s`):
    - the prefill station's residence time (`prefill_residence_s`, exponential service) with every prompt's
      prefill at its per-operator forward (S = prefill_service_s; at the compute peak until 2026-12) and each
      client away for think_steps x `tpot_s` decoding;
    - the utilisation law at the rate the training model costs the prompt's forward (S_e = prefill_sustained_s,
      `prefill_forward_s`: every GEMM at its shape's efficiency, attention at the prompt's length, elementwise at
      HBM; until 2026-12 its FLOPs at the large-GEMM e_max, ~0.70 of peak): C clients' requests, TTFT + think each, complete no faster than one per S_e, so
      TTFT >= C S_e - think. It bounds the whole request, not the prefill queue alone: a chunked-prefill engine's
      decode steps (think, whose TPOT already holds the interfering prefills) overlap its queue, and as a
      residence at e_max the bound exceeded 14 measured TTFTs (vLLM llama-3.1-8b tp1 at 112 clients, 1,000 / 100
      tokens: 120 ms against 72 measured).
    - one decode step's share before the first token, first_token_steps x `tpot_s` (FIRST_TOKEN_STEPS: a prompt's
      chunk rides in a step with the running requests' decode tokens, or waits for the step in flight).
    With pp stages the busiest stage is the station (S / pp: pp prompts in flight) and a prompt also crosses the
    other stages, S (pp - 1) / pp. The fitted TTFT terms regress measurements taken at loads where the prefills
    of the other clients rarely queue (each client decodes hundreds of tokens between prompts); without these
    bounds a prefill-heavy load extrapolated them past the roofline: llama-3.1-70b tp8 on 8 H100 at 8,000-token
    prompts and 64 clients carried 42 requests/s, 4.7e16 FLOP/s on 7.9e15 of bf16 peak (fresh-user review 8,
    finding 2); llama-3.1-8b on one H100 at 8K prompts 6.35 requests/s, 93% of the peak on prefill alone (senior
    review 8, H1; the best measured serving row reaches 51.5%; the training model's forward of an 8,000-token
    prompt runs at 0.60 of the peak's causal FLOPs, 4.31 requests/s). 0 for terms without the prefill service.
    Source: roofline (Williams et al. 2009); Schweitzer's MVA (1979); the utilisation law (throughput <=
    1 / service, Denning & Buzen 1978); `prefill_forward_s` ([Empirical] constants of calibration/training.yaml)."""
    service = terms.get("prefill_service_s", 0.0)
    if service <= 0:
        return 0.0
    pp, clients, think = terms.get("pp", 1), terms["prefill_clients"], terms["think_steps"] * tpot_s
    residence = prefill_residence_s(clients, service / pp, think)
    sustained = clients * terms.get("prefill_sustained_s", service) / pp - think
    step = terms.get("first_token_steps", 0.0) * tpot_s
    return (max(residence, sustained, step) + service * (pp - 1) / pp + terms["hop_s"]
            + terms["moe_exchange_prefill_s"])


def prefill_queue_wait_s(terms: dict[str, float], tpot_s: float) -> float:
    """Mean time a prompt waits at the prefill station of a steady closed loop before its own prefill starts,
    seconds: the Schweitzer MVA residence (`prefill_residence_s`) less the prompt's own service, R - S, for
    C = `queue_clients` running requests, each prompt's service S = `prefill_service_s` / pp (its prefill forward
    as the training model costs it per operator, `prefill_forward_s`, at the engine's per-step token budget, with
    its TP all-reduces; the busiest of pp stages is the station) and each client away Z = think_steps x `tpot_s`
    decoding (the decode phase, whose TPOT holds the prefills interleaved into it, prefill_interference_s).

    The prefill station is the instance's GPUs as the engines' schedulers hand them to prompts: SGLang 0.5.23
    runs a waiting prompt's prefill batch before the next decode step (wheel `sglang/srt/managers/scheduler.py`
    get_next_batch_to_run, l. 3894: get_new_batch_prefill (l. 3975) first, "Run prefill first if possible"
    (l. 3992), the decode batch only when it returns none; `enable_mixed_chunk` defaults to False,
    `srt/arg_groups/fields/schedule.py` l. 208), so prompts queue for the GPUs behind each other's prefills;
    vLLM 0.33.0 schedules the running requests' decode tokens first and then waiting prompts' chunks within the
    step's token budget (wheel `vllm/v1/core/sched/scheduler.py` Scheduler.schedule: token_budget l. 719 =
    max_num_scheduled_tokens, RUNNING requests l. 793, WAITING requests l. 1049), one prompt's chunk after
    another, so a prompt waits for the chunks of those ahead of it in the same first-come-first-served order. In
    both a prompt's service is its prefill forward (one chunk of <= the budget per step; the decode tokens that
    share vLLM's steps are priced in TPOT). Zero with fewer than two clients, for a disaggregated prefill worker
    (its queue of back-to-back prompts is the utilisation bound of `ttft_floor_s`), and for a campaign whose
    clients run in lock-step (`queue_clients` 0: the wave, `latency_terms` wave_s, is that loop's queue).
    A prompt's service is near-deterministic (one length, one forward), so the residence is taken with the
    in-service prompt's mean residual S / 2 (`prefill_residence_s` residual=0.5, Reiser's correction), not the
    exponential S of the plain MVA, which doubles the wait at light load (M/D/1 against M/M/1).
    serve-plan's TTFT is the steady-state mean: the fitted terms at no load + this wait, so it rises with the
    load (senior review 10, finding 3: 172 ms at 1, 32 and 128 clients before). `planner.serve.refine` assumes
    TTFT nondecreasing in C; its proof for `prompts_per_prefill` (residual 1) carries over to residual 1/2: with
    g = R^2 - b R - S Z + (C - 1) S^2 / 2, dg/dC = -S (R - S / 2) + (R - S) Z' and dg/dR = 2 R - b > 0 at the
    larger root, and the fixed point R - S = S (C - 1) (R - S / 2) / (R + Z) makes dR/dC >= 0 iff
    R + Z >= (C - 1) Z', the condition proven there (Z concave in C with Z(0) >= 0); S does not move with C and
    `queue_clients` (the running batch) is nondecreasing. The reviewer's requests rise (tests/test_serve_queue.py).
    Hand check (tests/test_serve_queue.py): C = 128, S = 0.1 s, Z = 30 s: b = -17.2, S Z - (C - 1) S^2 / 2 =
    2.365, R = (-17.2 + sqrt(295.84 + 9.46)) / 2 = 0.13642 s, wait 0.03642 s; the open M/D/1 queue at the same
    utilisation, U = X S = 128 / 30.136 x 0.1 = 0.4247, waits U S / (2 (1 - U)) = 0.0369 s (Pollaczek-Khinchine).
    Source: Schweitzer's approximate MVA (1979) for one queueing and one delay station, as `prompts_per_prefill`;
    Reiser (1979) / Lazowska et al. (1984) sec. 6.4 for the residual service."""
    service, clients = terms.get("prefill_service_s", 0.0), terms.get("queue_clients", 0.0)
    if service <= 0 or clients <= 1 or terms.get("think_steps", 0) <= 0:
        return 0.0
    station = service / terms.get("pp", 1)
    return prefill_residence_s(clients, station, terms["think_steps"] * tpot_s, residual=0.5) - station


def unfitted_s(terms: dict[str, float], target: str, tpot_s: float = 0.0) -> float:
    """The physical terms `predict_latency` adds without a coefficient to `target` ("ttft" / "tpot"):
    PP hops, the MoE exchange, the TP all-reduces' bandwidth (TTFT: the prompt's own; TPOT: the decode step's and
    the interfering prefills'), and for TTFT the steady prefill queue's wait (`prefill_queue_wait_s`; the fit
    takes it with the row's measured TPOT) and the decode steps a first token waits for (`first_token_steps` x
    `tpot_s`, FIRST_TOKEN_STEPS), both for the steady share of the requests (`latency_terms` steady_share: a start
    burst's prompts meet an idle engine, burst_s), and the configured scheduler delay (`wait_steps` decode steps of
    `tpot_s` each). The fit regresses what is left."""
    if target == "ttft":
        return (terms["hop_s"] + terms["moe_exchange_prefill_s"] + terms["prefill_allreduce_s"]
                + terms.get("wait_steps", 0.0) * tpot_s
                + terms.get("steady_share", 1.0) * (prefill_queue_wait_s(terms, tpot_s)
                                                    + terms.get("first_token_steps", 0.0) * tpot_s))
    return (terms["hop_s"] + terms["moe_exchange_decode_s"] + terms.get("decode_allreduce_s", 0.0)
            + terms.get("interference_allreduce_s", 0.0))
