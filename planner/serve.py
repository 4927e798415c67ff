"""`planner serve-plan`: inference deployment planning (specs -> instance shapes -> memory and latency
-> replica-mix program -> plans). Returns plain dicts for `report.show_serve_plan`.

Definitions used throughout:
- An instance is one engine process group of tp x pp GPUs (`cost.serving.Instance`); `dp` in the
  output is its attention data-parallel degree, `replicas` how many instances the plan runs.
- `--concurrency C` is the number of requests in flight per instance (closed loop, as in the
  measurements); without it the search tries 1, 2, 4, ... up to what the KV pool holds, then every
  concurrency between those that could do better (`refine`).
- Output throughput of an instance at concurrency b: b x O / request latency, with request latency
  = TTFT + (O - 1) x TPOT; requests/s = b / request latency; tokens/s per user = 1 / TPOT.
- `--request-rate R`: the fewest GPUs whose replicas carry R requests/s within the SLOs (Little's
  law per instance: at concurrency b it carries b / request latency requests/s).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from planner.cost import serving as sv
from planner.errors import InfeasibleError, SpecError, number
from planner.frameworks import deepep
from planner.frameworks import sglang as sglang_flags
from planner.frameworks import vllm as vllm_flags
from planner.search import serve_ilp
from planner.serve_validate import coefficients_for, load_calibration
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec, context_length_words, engine_context_length, require_modelled_checkpoint

CONCURRENCY_STEPS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""Per-instance concurrencies tried first when --concurrency is not given (plus the KV pool's limit); `refine`
searches between them."""
FIXABLE = ("tp", "pp", "ep", "dp")
"""Keys `--fix` accepts for serve-plan."""
CALIBRATED_GPUS = ("H100", "H200")
"""GPU families the serving latency constants were fitted on: serving_measurements.csv holds only
h100_sxm and h200_sxm rows (calibration/serving.yaml `fitted_on`)."""


@dataclass(frozen=True)
class ServeRequest:
    """What the user asked (CLI options, validated there)."""

    gpus: int
    input_len: int
    output_len: int
    concurrency: int | None = None
    request_rate: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    request_latency_ms: float | None = None
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    engine: str = "vllm"
    max_model_len: int | None = None
    mem_fraction: float | None = None
    max_num_batched_tokens: int = sv.DEFAULT_MAX_NUM_BATCHED_TOKENS
    fix: dict = field(default_factory=dict)
    top: int = 5
    disaggregated: bool = False

    @property
    def context(self) -> int:
        """Tokens a request holds at its end: max_model_len when given, else input + output."""
        return self.max_model_len or self.input_len + self.output_len

    @property
    def slos(self) -> bool:
        """Whether any latency SLO (--ttft-ms, --tpot-ms, --request-latency-ms) is given."""
        return (self.ttft_ms, self.tpot_ms, self.request_latency_ms) != (None,) * 3


def weight_choice(spec: ModelSpec, hw: ClusterSpec, given: str | None) -> tuple[str, str]:
    """(the weight format to cost, why): `given` (serve-plan --weight-dtype) when the GPU runs it,
    else the checkpoint's own format (config.json quantization_config, `ModelSpec.weight_format`:
    what vLLM and SGLang load when no quantization flag is given), else bf16 -- fp16 on a GPU without
    bf16 (its peak_tflops has none), as vLLM does there: `vllm/config/model.py` _resolve_auto_dtype
    (0.33.0) falls back to float16 when the platform's supported_dtypes lack bfloat16 (Volta, Turing;
    `vllm/platforms/cuda.py` CudaPlatform.supported_dtypes), and an explicit bfloat16 is refused
    ('Bfloat16 is only supported on GPUs with compute capability of at least 8.0 ... use float16 instead',
    CudaPlatform.check_if_supports_dtype).

    Raises:
        SpecError: bf16 asked on a GPU without bf16, or a quantized format there (vLLM's and SGLang's
            fp8 / int / fp4 kernels need more than such a GPU has; `planner check` rule
            quantization_unsupported), naming what it runs; a checkpoint format not modelled
            (`specs.model.require_modelled_checkpoint`)."""
    require_modelled_checkpoint(spec)
    no_bf16 = "bf16" not in hw.gpu.peak_tflops
    if given is not None:
        fmt, why = given, "as asked (--weight-dtype)"
        native = sv.native_dtype(given)
        if native and native not in hw.gpu.peak_tflops and not no_bf16:
            why += (f"; {hw.gpu.name} has no {native} tensor cores: the engines run it weight-only (Marlin), "
                    f"GEMMs in bf16, memory as {given}")
    elif spec.weight_format is not None:
        fmt, why = spec.weight_format, (f"the checkpoint's format (config.json quantization_config), which the "
                                        f"engines load without a quantization flag")
    elif no_bf16:
        return "fp16", (f"{hw.gpu.name} has no bf16: fp16 (vLLM falls back to float16 there; its dtype half), "
                        f"2 bytes per element as bf16")
    else:
        return "bf16", "the checkpoint is unquantized (no quantization_config)"
    if no_bf16 and fmt != "fp16":
        source = "--weight-dtype" if given is not None else f"{spec.name}'s checkpoint format"
        runs = ("vLLM refuses bfloat16 below compute capability 8.0 (dtype half)" if fmt == "bf16" else
                f"vLLM's and SGLang's {fmt} kernels need a newer GPU")
        raise SpecError(f"{source} {fmt} does not run on {hw.gpu.name}, which has no bf16: {runs}; allowed "
                        f"there: fp16", key="--weight-dtype")
    return fmt, why


def _powers(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


UNEVEN_PP_ENGINES = ("vllm", "sglang")
"""Engines that split layers unevenly over pipeline stages, so pp need not divide num_hidden_layers.
Source: vLLM 0.33.0 `vllm/distributed/utils.py` get_pp_indices (L // pp layers per stage, the remainder
one each to the stages before the last); SGLang 0.5.23 `srt/distributed/utils.py` get_pp_indices (the
remainder one each to the last stages). Either way the largest stage holds ceil(L / pp) layers, which
`cost.serving` costs for memory and per-token latency. TensorRT-LLM's rule is not read here: its pp
stays a power of two, as before."""


def _pp_values(gpus_left: int, engine: str, pinned: int | None) -> list[int]:
    """Pipeline degrees tried for one tp: powers of two, plus (engines that split layers unevenly,
    UNEVEN_PP_ENGINES) the divisors of the GPUs left (so replicas fill a 6- or 12-GPU budget) and a
    pinned `--fix pp`; all <= the GPUs left (pp > layers is rejected by `_indivisible`)."""
    values = set(_powers(gpus_left))
    if engine in UNEVEN_PP_ENGINES:
        values |= {d for d in range(1, gpus_left + 1) if gpus_left % d == 0}
        if pinned is not None and pinned <= gpus_left:
            values.add(pinned)
    return sorted(values)


WIDE_EP_ENGINES = ("sglang", "vllm")
"""Engines serve-plan lays out with expert parallelism over several nodes (`wide_ep_shapes`), each as its
documented multi-node DeepSeek launch (flag names: `planner.frameworks.sglang` / `vllm` FLAG): SGLang with tp_size =
dp_size = the instance's GPUs, DP attention on, the DeepEP all-to-all backend and nnodes nodes (SGLang 0.5.23
wheel `srt/server_args.py`; LMSYS, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism
on 96 H100 GPUs", lmsys.org/blog/2025-05-05-large-scale-ep: prefill EP32 on 4 nodes, decode EP72 on 9, commands in
sgl-project/sglang issue #6017); vLLM with data_parallel_size = the instance's GPUs, tensor parallel 1 and expert
parallelism on, over nodes (vLLM 0.33.0 `vllm/config/parallel.py` data_parallel_size, enable_expert_parallel:
experts split over all tp x dp ranks). TensorRT-LLM's wide EP is not modelled here."""


def wide_ep(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest) -> bool:
    """Whether serve-plan tries `wide_ep_shapes` for this request: an MoE model under a WIDE_EP_ENGINES engine
    on more GPUs than one scale-up domain, and either --disaggregated, a --fix tp / ep / dp wider than the domain,
    or a model whose weights leave no KV pool on one domain's widest expert-parallel shape (`_memory`). Other
    requests keep the single-domain shapes, so the search stays as small as before (bench cases)."""
    node = hw.scaleup_domain_gpus
    if not spec.is_moe or req.engine not in WIDE_EP_ENGINES or req.gpus < 2 * node:
        return False
    if req.disaggregated or any((req.fix.get(k) or 0) > node for k in ("tp", "ep", "dp")):
        return True
    return _memory(spec, hw, req, sv.Instance(tp=node, ep=node, adp=node)).kv_cache <= 0


REDUNDANT_EXPERT_ENGINES = ("sglang",)
"""Engines whose expert parallelism takes redundant expert copies, so that an EP size that does not divide the
routed experts still runs: SGLang's redundant-experts flag (`planner.frameworks.sglang` FLAG
["redundant_experts"]; SGLang 0.5.23 wheel `srt/eplb/expert_location.py` asserts (experts + redundant) % ep_size
== 0). LMSYS's 96-H100 DeepSeek-V3 decode ran EP72 with 32 redundant experts (288 = 4 x 72; lmsys.org/blog/
2025-05-05-large-scale-ep, commands in sgl-project/sglang issue #6017). vLLM's EPLB (enable_eplb,
eplb_config num_redundant_experts) is not written by the emitter, so vLLM keeps EP sizes that divide the experts."""


def redundant_experts(spec: ModelSpec, ep: int, engine: str) -> int:
    """The fewest redundant experts that make ep divide the physical experts under `engine` (0 where ep already
    divides them or the engine takes none, REDUNDANT_EXPERT_ENGINES). Hand check: DeepSeek-V3 (256) at EP72: 32."""
    if not spec.is_moe or engine not in REDUNDANT_EXPERT_ENGINES:
        return 0
    return -spec.num_experts % ep


def wide_ep_shapes(spec: ModelSpec, hw: ClusterSpec, gpus: int, engine: str = "") -> list[sv.Instance]:
    """Instances of one pipeline stage over k >= 2 whole scale-up domains (nodes), k x domain <= `gpus`, two per k:
    - tp = ep = attention-DP = k x domain GPUs: attention data-parallel on every GPU (attention TP 1, so no tensor
      all-reduce crosses the network), the routed experts split over all of them, the MoE token exchange over
      the network (`cost.serving.moe_exchange_s` at `link_bytes_per_s` of tp GPUs);
    - plain tp = k x domain (experts tensor-split, no attention DP): SGLang's documented two-node DeepSeek-V3
      launch (tp 16 over 2 nodes; SGLang docs, DeepSeek V3 usage, "Example: Serving with two H20*8 nodes"),
      its per-layer all-reduces over the network (`cost.serving.tp_allreduce_s` at the same link).
    Layouts as WIDE_EP_ENGINES; whole nodes only, as both engines start world / nnodes ranks per node. Under
    SGLang an EP size that does not divide the routed experts takes the fewest redundant experts that make it
    (`redundant_experts`: DeepSeek-V3 at EP72, 32), their memory counted (`cost.serving.physical_experts`), and
    each expert-parallel shape is tried twice, with SGLang's default dense tensor parallelism (the dense MLPs and
    LM head split over every rank, each rank's tokens gathered over the network: `cost.serving.dense_gather_s`,
    `gathered_dense_bytes`) and with them data-parallel (`cost.serving.Instance.dense_dp`: whole on every GPU,
    no gather; LMSYS's choice), the search keeping the better."""
    node = hw.scaleup_domain_gpus
    out = []
    for k in range(2, gpus // node + 1):
        n = k * node
        ep = sv.Instance(tp=n, ep=n, adp=n, redundant=redundant_experts(spec, n, engine))
        out += [ep, sv.Instance(tp=n)]
        if engine in DENSE_DP_ENGINES and spec.is_moe and not all(spec.moe_layers):
            out.append(replace(ep, dense_dp=True))
    return out


DENSE_DP_ENGINES = ("sglang",)
"""Engines whose wide expert-parallel instances may run the dense layers' MLPs and the LM head data-parallel
(`planner.frameworks.sglang` DENSE_TP_VALUES: SGLang's dense-TP-1 / DP-LM-head pair). vLLM's DP ranks already
hold them whole (`cost.serving.splits`)."""


def deepep_normal_problem(inst: sv.Instance, engine: str, role: str | None) -> str | None:
    """Why `inst` cannot run DeepEP's normal-mode kernels at its EP size (`frameworks.deepep.normal_mode_problem`),
    where it runs them, else None. Those run: SGLang (deepep emitted for every ep > 1, `emit.sglang`) in a prefill
    worker and in an aggregated instance (DeepEP mode auto: normal kernels for batches with prefill, SGLang 0.5.23
    wheel srt/layers/moe/utils.py DeepEPMode.resolve); vLLM only in a prefill worker (deepep_high_throughput;
    its aggregated and decode instances are emitted with deepep_low_latency, `emit.vllm`). Decode-only workers run
    the low-latency kernels, which have no node-count limit (`frameworks.deepep`)."""
    uses = inst.ep > 1 and (engine == "sglang" or engine == "vllm" and inst.adp > 1)
    normal = role == "prefill" or (role is None and engine == "sglang")
    return deepep.normal_mode_problem(inst.ep, engine) if uses and normal else None


def _deepep_runs(found: list[sv.Instance], rejected: dict, engine: str, role: str | None) -> list[sv.Instance]:
    """`found` less the instances whose DeepEP normal kernels cannot run (`deepep_normal_problem`), counted in
    `rejected`."""
    keep = []
    for inst in found:
        if deepep_normal_problem(inst, engine, role):
            reason = "DeepEP normal-mode kernels do not run at that EP size (node count)"
            rejected[reason] = rejected.get(reason, 0) + 1
        else:
            keep.append(inst)
    return keep


def wide_sglang(hw: ClusterSpec, inst: sv.Instance, engine: str) -> bool:
    """Whether `inst` is an SGLang instance whose attention DP spans scale-up domains (`wide_ep_shapes`): its
    chunk is planned per attention-DP rank (`forward_tokens`) and its mem_fraction_static from the memory it
    needs beside the KV pool (`_memory`)."""
    return engine == "sglang" and inst.adp > hw.scaleup_domain_gpus


def shapes(spec: ModelSpec, hw: ClusterSpec, gpus: int, fix: dict,
           engine: str = "vllm", *, wide: bool = False) -> tuple[list[sv.Instance], dict]:
    """Instance shapes that divide the model, with a count of the rejected ones per reason.

    Rules (vLLM `vllm/config/parallel.py` / TensorRT-LLM `mapping.py` checks): attention heads
    divisible by attention-TP; attention-TP divides n_kv or n_kv divides it (K/V replicate);
    routed experts divisible by ep; expert width divisible by tp / ep; pp <= layers, pp values from
    `_pp_values` (uneven layer splits where the engine makes them); tp inside one
    scale-up domain; tp x pp <= GPUs. Attention DP and EP are tried for MoE models only;
    `wide` (`wide_ep`) adds the expert-parallel shapes over several whole nodes (`wide_ep_shapes`).
    """
    rejected: dict[str, int] = {}
    out = []
    tried = []
    for tp in _powers(min(gpus, hw.scaleup_domain_gpus)):
        for pp in _pp_values(gpus // tp, engine, fix.get("pp")):
            eps = sorted({1, tp}) if spec.is_moe else [1]
            adps = sorted({1, tp}) if spec.is_moe else [1]
            tried += [sv.Instance(tp=tp, pp=pp, ep=ep, adp=adp) for ep in eps for adp in adps]
    if wide:
        tried += wide_ep_shapes(spec, hw, gpus, engine)
    for inst in tried:
        if any(fix.get(k) is not None and fix[k] != v for k, v in
               (("tp", inst.tp), ("pp", inst.pp), ("ep", inst.ep), ("dp", inst.adp))):
            continue
        reason = _indivisible(spec, inst)
        if reason:
            rejected[reason] = rejected.get(reason, 0) + 1
        else:
            out.append(inst)
    return out, rejected


def _indivisible(spec: ModelSpec, inst: sv.Instance) -> str | None:
    at, kv = inst.attn_tp, spec.num_key_value_heads
    if spec.num_attention_heads % at:
        return f"num_attention_heads {spec.num_attention_heads} not divisible by attention tp"
    if not spec.is_mla and kv % at and at % kv:
        return f"num_key_value_heads {kv} and attention tp do not divide one another"
    if inst.pp > spec.num_hidden_layers:
        return "more pipeline stages than layers"
    if spec.is_moe and (sv.physical_experts(spec, inst) % inst.ep or spec.moe_intermediate_size % (inst.tp // inst.ep)):
        return "experts not divisible by ep (or expert width by tp/ep)"
    return None


def _peak_dtype(hw: ClusterSpec, weight_dtype: str) -> str:
    """GEMM dtype: fp8 for fp8 weights, fp4 for fp4 weights where the GPU has it, else bf16 (fp16 if no bf16)."""
    peaks, native = hw.gpu.peak_tflops, sv.native_dtype(weight_dtype)
    if native in peaks:
        return native
    return "bf16" if "bf16" in peaks else "fp16"


def _hop_s(hw: ClusterSpec, inst: sv.Instance, spec: ModelSpec, concurrency: float) -> float:
    """One pipeline hop: latency + the step's activations (b x h x 2 bytes) over the link.
    Source: alpha-beta model with the cluster's scale-up / network latency and bandwidth; the hop
    crosses the network only where the instance spans scale-up domains (`Mesh.spans_domains`, as
    training prices its pipeline p2p: an NVL72 rack's trays talk over NVLink)."""
    latency = (hw.network_latency_s if inst.mesh.spans_domains(hw.scaleup_domain_gpus)
               else hw.scaleup_latency_s)
    return latency + concurrency / inst.adp * spec.hidden_size * 2 / sv.link_bytes_per_s(hw, inst.gpus)


def _memory(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance,
            role: str | None = None) -> sv.ServingMemory:
    """`cost.serving.serving_memory` of one shape under the request's formats, engine and budget.

    SGLang without --mem-fraction: its own default (`frameworks.sglang.plan_mem_fraction`) for the role (`role`
    prefill / decode: a disaggregated worker, launched with its disaggregation mode; None aggregated), except on an
    instance whose attention DP spans nodes (`wide_sglang`). There SGLang's rule reserves decode-graph memory of
    max_bs x dp_size x 4.5 MiB and 1.5 MiB per token of the undivided chunk on every GPU (`default_mem_fraction_
    static`): 0.435-0.58 at dp64 on an H100, about half the HBM kept from the KV pool, and below 0 at a 65,536-token
    chunk (senior review 9, finding 6). LMSYS's EP32 / EP72 launches give the fraction explicitly (0.85 prefill,
    0.835 decode, with a chunked-prefill size of 524,288 = 16,384 per rank on the EP32 prefill: sgl-project/sglang issue
    #6017, as ai-dynamo/dynamo@4a2dac13 examples/sglang/utils/deepseek-r1/run_sgl_servers.sh copies them). So the
    planner sizes it from what it models each GPU allocating after the KV pool (`cost.serving.sglang_headroom`:
    the forward's activations at the chunk per rank, the CUDA graphs, DeepEP's buffers) and `--emit` writes it
    (`cost.serving.headroom_fraction`): a planner choice, not SGLang's default. A headroom above the GPU gives
    fraction 0 and no KV pool: the shape does not fit, and the infeasible message names the largest term.
    Inside one node the default is kept, though the headroom model would give more (DeepSeek-V3 dp8 ep8 on an H200:
    SGLang's 0.736 against the floor's 0.928): it is what SGLang runs when the flag is absent, the measured SGLang
    rows the latency model is fitted on ran at it (`planner.serve_validate`), and the headroom model has no
    measurement of its own, so it is used only where the default cannot serve. --mem-fraction, when given, is used
    as given."""
    fraction, activations, graphs = req.mem_fraction, None, sv.CUDA_GRAPH_BYTES
    if fraction is None and wide_sglang(hw, inst, req.engine):
        room = _headroom(spec, hw, req, inst, role)
        fraction = sv.headroom_fraction(hw.gpu.memory_bytes, room)
        activations, graphs = room.activations, room.cuda_graphs + room.deepep_buffers
    elif fraction is None and req.engine == "sglang":
        fraction = sglang_flags.plan_mem_fraction(hw.gpu.memory_gib * 1024, tp=inst.tp, pp=inst.pp, attn_dp=inst.adp,
                                                  ep=inst.ep, mla=spec.is_mla,
                                                  max_num_batched_tokens=req.max_num_batched_tokens, role=role)
    return sv.serving_memory(spec, inst, capacity=hw.gpu.memory_bytes, weight_format=req.weight_dtype,
                             kv_dtype=req.kv_dtype, engine=req.engine, fraction=fraction,
                             max_num_batched_tokens=forward_tokens(req, inst, hw), gpu_name=hw.gpu.name,
                             activations=activations, cuda_graphs=graphs)


def _headroom(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance,
              role: str | None) -> sv.Headroom:
    """`cost.serving.sglang_headroom` of a `wide_sglang` instance: the chunk per rank (`forward_tokens`) and the
    decode CUDA graph's default largest batch per rank for the GPU (`planner.frameworks.sglang.gpu_defaults`: 512 on
    an H100 at tp >= 4; LMSYS's EP72 decode captured up to 256)."""
    _, graph_batch = sglang_flags.gpu_defaults(hw.gpu.memory_gib * 1024, inst.tp)
    return sv.sglang_headroom(spec, inst, tokens_per_rank=forward_tokens(req, inst, hw),
                              decode_batch_per_rank=graph_batch, role=role, capacity=hw.gpu.memory_bytes)


def forward_tokens(req: ServeRequest, inst: sv.Instance, hw: ClusterSpec | None = None) -> int:
    """Tokens one attention data-parallel group's forward takes (the per-step token budget the costs use):
    --max-num-batched-tokens is the engine flag's value; vLLM runs one scheduler per data-parallel rank,
    each with that budget (vLLM 0.33.0 `vllm/v1/engine/core.py` DPEngineCoreProc: one engine core per DP rank, each
    with its own Scheduler, whose step budget is scheduler_config.max_num_batched_tokens,
    `vllm/v1/core/sched/scheduler.py` schedule), SGLang divides
    its chunked-prefill size among the groups (`planner.frameworks.sglang.rank_chunk`), except on an instance whose
    attention DP spans nodes (`wide_sglang`), where --max-num-batched-tokens is the chunk of one rank and the
    engine flag is that x adp (`chunk_flag`; senior review 9, finding 7: 8,192 over 32 ranks left 256-token
    forwards, LMSYS ran 16,384 per rank)."""
    if req.engine == "sglang":
        if hw is not None and wide_sglang(hw, inst, req.engine):
            return req.max_num_batched_tokens
        return max(1, sglang_flags.rank_chunk(req.max_num_batched_tokens, inst.adp))
    return req.max_num_batched_tokens


def chunk_flag(req: ServeRequest, hw: ClusterSpec, inst: sv.Instance) -> int:
    """The chunked-prefill value `--emit` writes for `inst`: the chunk per rank x adp where it is planned per rank
    (`forward_tokens`), which SGLang divides back among the ranks (`planner.frameworks.sglang.rank_chunk`); else
    --max-num-batched-tokens as given. Example: 8,192 per rank over 32 ranks -> 262,144 (LMSYS's EP32 prefill:
    16,384 x 32 = 524,288)."""
    if wide_sglang(hw, inst, req.engine):
        return req.max_num_batched_tokens * inst.adp
    return req.max_num_batched_tokens


def _chunk(req: ServeRequest, hw: ClusterSpec, inst: sv.Instance) -> dict:
    """The plan row's `max_num_batched_tokens` key, the engine flag `--emit` writes (`chunk_flag`), only where it is
    not --max-num-batched-tokens as given (a chunk planned per attention-DP rank, `wide_sglang`)."""
    return {"max_num_batched_tokens": chunk_flag(req, hw, inst)} if wide_sglang(hw, inst, req.engine) else {}


def running_cap(req: ServeRequest, inst: sv.Instance, cmax: int, *, decode_only: bool = False) -> int:
    """Sequences an instance runs at once: what its KV pool holds (`cmax`), and under vLLM at most what
    each data-parallel rank's per-step token budget sustains (`cost.serving.budget_concurrency`); the
    rest of a larger concurrency waits (TTFT's kv_wait term). SGLang does not mix prefill and decode in
    one batch by default (enable_mixed_chunk False, SGLang 0.5.23 `srt/arg_groups/fields/schedule.py`):
    its chunk bounds prefill batches only, so only the KV pool caps it here."""
    if req.engine != "vllm":
        return cmax
    budget = inst.adp * sv.budget_concurrency(forward_tokens(req, inst), req.input_len, req.output_len,
                                              decode_only=decode_only)
    return min(cmax, budget)


def _latency(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance, concurrency: int,
             cmax: int, coefficients: dict, *, interference: bool = True,
             prefill_only: bool = False, parts: dict | None = None) -> tuple[float, float]:
    """(TTFT s, TPOT s) of one shape at `concurrency` (`cost.serving.latency_terms` / `predict_latency`);
    interference=False drops chunked-prefill interference (decode-only workers); prefill_only=True: a
    disaggregated prefill worker, its prompts queued back to back (the TTFT floor's think time 0).
    `parts` (a dict, filled when given): TTFT = max(ttft_base_s + steady_share x the prefill station's wait,
    ttft_floor_s), the wait of a prompt at a station of station_s per prompt -- the closed loop's
    (`cost.serving.prefill_queue_wait_s`) here, the open stream's at --request-rate (`open_loop_point`)."""
    terms = sv.latency_terms(spec, inst, hbm_bytes_per_s=hw.gpu.hbm_gb_per_s * 1e9,
                             peak_flops=hw.peak_flops(_peak_dtype(hw, req.weight_dtype)),
                             weight_format=req.weight_dtype, kv_dtype=req.kv_dtype, concurrency=concurrency,
                             input_len=req.input_len, output_len=req.output_len, max_concurrency_=max(cmax, 1),
                             max_num_batched_tokens=forward_tokens(req, inst, hw),
                             hop_s=_hop_s(hw, inst, spec, concurrency), link_bytes_per_s=sv.link_bytes_per_s(hw, inst.tp),
                             prefill_worker=prefill_only, first_token_steps=sv.FIRST_TOKEN_STEPS[req.engine],
                             gpu=hw.gpu, engine=req.engine)
    if not interference:
        terms["prefill_interference_s"] = terms["interference_allreduce_s"] = 0.0
    if not prefill_only and LOW_LATENCY_PREFILL[req.engine]:
        terms["moe_exchange_prefill_s"] = sv.moe_exchange_s(spec, inst, req.input_len, decode=True,
                                                             link_bytes_per_s=sv.link_bytes_per_s(hw, inst.tp))
    gather = _dense_gathers(spec, hw, req, inst, concurrency)
    exchange = 0.0
    if two_batch_overlap(req.engine, inst):
        exchange, terms["moe_exchange_decode_s"] = terms["moe_exchange_decode_s"], 0.0
    ttft, tpot = sv.predict_latency(terms, coefficients)
    if parts is not None:
        _ttft_parts(terms, coefficients, tpot, gather[0], parts)
    if not two_batch_overlap(req.engine, inst):
        return ttft + gather[0], tpot + gather[1]
    return ttft + gather[0], sv.two_batch_overlap_tpot_s(tpot, exchange) + gather[1]


def _ttft_parts(terms: dict, coefficients: dict, tpot_s: float, gather_s: float, parts: dict) -> None:
    """Fill `parts` (see `_latency`) from the terms `predict_latency` took and its TPOT: ttft_base_s, TTFT without
    the prefill station (its service 0: no queue wait and no floor; prefill_service_s is in no fitted TTFT term),
    ttft_floor_s (`cost.serving.ttft_floor_s`), station_s (prefill_service_s / pp, the busiest stage, as
    `prefill_queue_wait_s` takes it) and steady_share; the two TTFTs + the dense gathers. So the closed-loop TTFT
    is max(ttft_base_s + steady_share x prefill_queue_wait_s, ttft_floor_s), `predict_latency`'s own sum."""
    base = sv.predict_latency({**terms, "prefill_service_s": 0.0}, coefficients)[0]
    parts.update(ttft_base_s=base + gather_s, ttft_floor_s=sv.ttft_floor_s(terms, tpot_s) + gather_s,
                 station_s=terms.get("prefill_service_s", 0.0) / terms.get("pp", 1),
                 steady_share=terms.get("steady_share", 1.0))


def _dense_gathers(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance,
                   concurrency: int) -> tuple[float, float]:
    """(TTFT s, TPOT s) of SGLang's dense-layer token gathers (`cost.serving.dense_gather_s`) on an instance whose
    attention DP spans nodes (`wide_sglang`): one prompt's input tokens, one decode step's running tokens. Added
    unfitted and not overlapped (two-batch overlap hides the MoE exchange in the model, `two_batch_overlap_tpot_s`;
    whether it hides these is not priced). 0 elsewhere: inside one node they run over NVLink at batch sizes the
    fitted constants already hold."""
    if not wide_sglang(hw, inst, req.engine):
        return 0.0, 0.0
    link = sv.link_bytes_per_s(hw, inst.tp)
    return (sv.dense_gather_s(spec, inst, req.input_len, decode=False, link_bytes_per_s=link),
            sv.dense_gather_s(spec, inst, concurrency, decode=True, link_bytes_per_s=link))


TWO_BATCH_OVERLAP_ENGINES = ("sglang",)
"""Engines serve-plan runs with two-batch overlap where they exchange MoE tokens with DeepEP (ep > 1 under attention
DP), and `--emit` asks for it (`planner.frameworks.sglang` FLAG["tbo"]; off by default, SGLang 0.5.23 wheel
`srt/arg_groups/fields/exec_.py` enable_two_batch_overlap = False): LMSYS's 96-H100 DeepSeek-V3 launches turn it on
(sgl-project/sglang issue #6017). Its decode step: `cost.serving.two_batch_overlap_tpot_s`. vLLM's dual-batch
overlap and TensorRT-LLM's are not modelled."""


def two_batch_overlap(engine: str, inst: sv.Instance) -> bool:
    """Whether an instance runs (and is emitted with) two-batch overlap: TWO_BATCH_OVERLAP_ENGINES, DeepEP (ep > 1
    with attention DP)."""
    return engine in TWO_BATCH_OVERLAP_ENGINES and inst.ep > 1 and inst.adp > 1


def evaluate(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance, coefficients: dict) -> dict:
    """Memory and every concurrency point of one shape: {"memory", "points", "reject"}."""
    mem = _memory(spec, hw, req, inst)
    longest = sv.longest_context(mem, spec, engine=req.engine)
    cmax = sv.max_concurrency(mem, spec, inst, req.context)
    result = {"inst": inst, "memory": mem, "longest_context": longest, **_chunk(req, hw, inst),
              "longest_context_bound": sv.context_bound(mem, spec, engine=req.engine), "max_concurrency": cmax,
              "points": []}
    if mem.kv_cache <= 0:
        result["reject"] = "memory"
        return result
    if longest < req.context:
        result["reject"] = "context"
        return result
    cap = running_cap(req, inst, cmax)
    result["running_cap"] = cap

    def point(b: int) -> dict:
        return _closed_point(spec, hw, req, inst, b, cap, coefficients)

    steps = [req.concurrency] if req.concurrency else [b for b in CONCURRENCY_STEPS if b < cap] + [cap]
    points = {b: point(b) for b in steps if inst.adp <= b <= cmax}
    if not req.concurrency:
        refine(points, point, req, inst.adp)
        for b in points.keys() - set(steps):
            points[b]["refined"] = True
    result["points"] = [points[b] for b in sorted(points)]
    if not result["points"]:
        result["reject"] = "concurrency"
    return result


def _closed_point(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance, b: int, cap: int,
                  coefficients: dict) -> dict:
    """One shape's closed-loop point at concurrency b (`_latency`; `cap` the requests it runs at once): TTFT, TPOT,
    request latency L = TTFT + (O - 1) TPOT, tokens/s b O / L and requests/s b / L (Little's law), and TTFT's
    parts (`_latency` parts=) from which `open_loop_point` prices the prefill station's wait at an open rate."""
    parts: dict = {}
    ttft, tpot = _latency(spec, hw, req, inst, b, cap, coefficients, parts=parts)
    latency = ttft + (req.output_len - 1) * tpot
    return {"concurrency": b, "ttft_s": ttft, "tpot_s": tpot, "latency_s": latency,
            "tokens_per_s": b * req.output_len / latency, "requests_per_s": b / latency, **parts}


def replica_load(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance, concurrency: int,
                 running: int, rate: float, coefficients: dict) -> dict:
    """`open_loop_point` of one replica of `inst` capped at `concurrency` requests (`running`: `running_cap`) fed
    `rate` requests/s, from its closed-loop points at `evaluate`'s grid concurrencies below the cap and the cap --
    the points serve-plan's own report interpolates between -- so `planner check` of a plan file written at
    --request-rate recomputes the same loaded TTFT / TPOT."""
    grid = [b for b in CONCURRENCY_STEPS if inst.adp <= b < concurrency] + [concurrency]
    points = [_closed_point(spec, hw, req, inst, b, running, coefficients) for b in grid]
    return open_loop_point({"points": points}, points[-1], rate, req.output_len)


def refine(points: dict[int, dict], point, req: ServeRequest, step: int) -> None:
    """Add to `points` ({concurrency: point}, the grid of one shape) the concurrencies, multiples of
    `step` (the attention-DP degree: each group runs the same share), that make the best point meeting
    the SLOs the best over EVERY such concurrency (and the grid's own points) between the smallest and the
    largest evaluated, not only over the grid. `point(b)` evaluates concurrency b.

    Why it is exact: TTFT, TPOT and request latency L(b) are nondecreasing in the concurrency b, so
    the concurrencies meeting the SLOs are every b up to the largest, b*, which bisection between the
    last grid point meeting them and the next one finds. Each term of `cost.serving.latency_terms` is
    nondecreasing in b and each coefficient is >= 0 (non-negative least squares): the decode weight read
    (E[distinct experts] grows with the draws), KV read, compute, chunked-prefill interference, PP hop
    and MoE exchange bytes grow with b; the chunk count ceil(b x I / chunk) and the KV wait (B / C - 1)
    lifetimes at a fixed running batch C are nondecreasing; the constants do not move; `predict_latency`'s
    max(., decode_memory) and max(., 0) keep order. The co-batched prompts (`prompts_per_prefill`)
    are the one term that needs a proof: its residence R solves g = R^2 - (C S - Z) R - S Z = 0 with
    dg/dR = sqrt((C S - Z)^2 + 4 S Z) > 0, so dR/dC = (S R - (R - S) Z') / dg/dR, and with
    R - S = S (C - 1) R / (R + Z) (the fixed point) this is >= 0 iff R + Z >= (C - 1) Z'; the decode
    lifetime Z(C) is concave with Z(0) >= 0 (an affine KV / compute part plus the concave expert read),
    so Z >= C Z' >= (C - 1) Z', and R > 0. Throughput b x O / L(b) need not grow with b (the chunk
    count's ceil steps), so below b* a branch and bound finds the best: any b strictly between evaluated
    l < r has b x O / L(b) <= b_last x O / L(l), b_last the last multiple of step below r; an interval
    whose bound is not above the best found is dropped, others are split at their middle. Source: hand proof above; bisection / branch and bound
    (Land & Doig 1960)."""
    feasible = [b for b in points if _meets(points[b], req)]
    if not feasible:
        return
    lo = max(feasible)
    above = [b for b in points if b > lo]
    hi = min(above) if above else lo
    while (between := _between(lo, hi, step)):
        mid = between[0] + (between[1] - between[0]) // (2 * step) * step
        points[mid] = point(mid)
        lo, hi = (mid, hi) if _meets(points[mid], req) else (lo, mid)
    kept = sorted(b for b in points if b <= lo)
    best = max(points[b]["tokens_per_s"] for b in kept)
    gaps = list(zip(kept, kept[1:]))
    while gaps:
        left, right = gaps.pop()
        between = _between(left, right, step)
        if not between or between[1] * req.output_len / points[left]["latency_s"] <= best:
            continue
        mid = between[0] + (between[1] - between[0]) // (2 * step) * step
        points[mid] = point(mid)
        best = max(best, points[mid]["tokens_per_s"])
        gaps += [(left, mid), (mid, right)]


def _between(left: int, right: int, step: int) -> tuple[int, int] | None:
    """(first, last) multiple of `step` strictly between `left` and `right`, or None when there is none."""
    first, last = left // step * step + step, (right - 1) // step * step
    return (first, last) if first <= last else None


def _meets(point: dict, req: ServeRequest) -> bool:
    return ((req.ttft_ms is None or point["ttft_s"] * 1e3 <= req.ttft_ms)
            and (req.tpot_ms is None or point["tpot_s"] * 1e3 <= req.tpot_ms)
            and (req.request_latency_ms is None or point["latency_s"] * 1e3 <= req.request_latency_ms))


PARTS = ("ttft_base_s", "ttft_floor_s", "station_s", "steady_share")
"""A closed point's TTFT parts (`_ttft_parts`) that `open_loop_point` re-prices at an open rate."""


def open_loop_point(ev: dict, cap: dict, rate: float, output_len: int) -> dict:
    """One replica of the shape `ev` (`evaluate`: its closed-loop points), its engine capped at cap["concurrency"]
    running requests (the emitted max-num-seqs; `cap` one of ev's points), fed an open (Poisson) stream of `rate`
    requests/s -- a share of --request-rate -- at its mean steady state:
    - in_service: the requests it runs, b = rate x L(b) (Little's law; L the closed-loop request latency at b,
      nondecreasing, linear between ev's grid concurrencies below the cap (`CONCURRENCY_STEPS`, not `refine`'s
      probes: `replica_load` recomputes the same from the shape alone) and the cap, so the least root is found
      segment by segment; below the smallest L is taken there);
    - queue_wait_s: the wait of a request the engine does not admit yet because all cap slots are held:
      `cost.serving.open_queue_wait_s` with c = cap slots, each held a request's latency at the cap (when arrivals
      queue, every slot is busy), the M/D/c queue -- the model of a disaggregated prefill worker's queue
      (`cost.serving.prefill_worker_wait_s`, its c = 1 case), one model of requests queueing for a server;
    - ttft_s = the TTFT at b with the prefill station's wait of the open stream, max(ttft_base_s + steady_share x
      W, ttft_floor_s) (`_ttft_parts`, interpolated as TPOT is), W the M/D/1 wait at rate x station_s
      (`cost.serving.open_queue_wait_s` c = 1) -- not the closed loop's MVA wait at b clients
      (`prefill_queue_wait_s`), which is the M/D/1 wait at the utilisation discounted by (b - 1) / b (its
      docstring's identity: an arrival of a closed loop never queues behind itself), so it under-priced the open
      stream's by up to 1 / b of the utilisation; points without the parts (hand examples) take the closed-loop
      TTFT -- + queue_wait_s; tpot_s = the closed-loop TPOT at b; latency_s = ttft_s + (O - 1) tpot_s;
    - requests_per_s / tokens_per_s: the load served (rate, rate x O); capacity_per_s: the cap point's closed-loop
      requests/s (arrivals at or above it have no steady state: infinite wait); utilisation = rate / capacity_per_s.
    Source: Little (1961); Allen-Cunneen M/D/c (`open_queue_wait_s`), Pollaczek-Khinchine M/D/1 at c = 1
    (Kleinrock 1975, ch. 5); fresh-user review 11, finding 1 (MEDIUM:
    replicas at 95.6% of the closed-loop capacity reported the closed-loop TTFT)."""
    limit, capacity = cap["concurrency"], cap["requests_per_s"]
    grid = [p for p in ev["points"] if p["concurrency"] < limit and not p.get("refined")] + [cap]
    first = grid[0]
    b, low, high, share = rate * first["latency_s"], first, first, 0.0
    if b > first["concurrency"]:
        for low, high in zip(grid, grid[1:]):
            if high["concurrency"] >= rate * high["latency_s"]:
                slope = (high["latency_s"] - low["latency_s"]) / (high["concurrency"] - low["concurrency"])
                b = rate * (low["latency_s"] - low["concurrency"] * slope) / (1 - rate * slope)
                share = (b - low["concurrency"]) / (high["concurrency"] - low["concurrency"])
                break
        else:
            b, low, high = float(limit), cap, cap
    keys = ("ttft_s", "tpot_s") + (PARTS if all(k in p for p in (low, high) for k in PARTS) else ())
    at = {k: low[k] + share * (high[k] - low[k]) for k in keys}
    if "station_s" in at:  # the prefill station fed the open stream: M/D/1 at rate x station_s
        prefill = sv.open_queue_wait_s(rate, 1, at["station_s"])
        at["ttft_s"] = max(at["ttft_base_s"] + at["steady_share"] * prefill, at["ttft_floor_s"])
    wait = sv.open_queue_wait_s(rate, limit, cap["latency_s"])
    ttft = at["ttft_s"] + wait
    return {"concurrency": limit, "in_service": b, "ttft_s": ttft, "tpot_s": at["tpot_s"],
            "latency_s": ttft + (output_len - 1) * at["tpot_s"], "queue_wait_s": wait,
            "requests_per_s": rate, "tokens_per_s": rate * output_len, "capacity_per_s": capacity,
            "utilisation": rate / capacity if capacity > 0 else math.inf}


def usable_rate(ev: dict, cap: dict, req: ServeRequest, above: float = 0.0) -> float:
    """The most requests/s one replica of `ev` capped at `cap` serves with its open-loop point (`open_loop_point`)
    meeting the SLOs, requests/s (0 when none does): every term of that point is nondecreasing in the rate (the
    requests in service grow with it, the closed-loop TTFT / TPOT / latency are nondecreasing in the concurrency,
    `refine`'s proof, and so taken for TTFT's parts without the station, base and floor -- for the floor's
    sustained-rate bound C S_e - think not proven; the open M/D/1 prefill wait and the M/D/c slot wait grow with
    the rate), so the rates meeting the SLOs are an interval from 0, found by bisection to 1e-5 of the capacity (a
    plan's rates are compared in thousandths, `serve_ilp.SCALE`); just under the capacity when it meets them
    there. `cap` may miss the SLOs closed-loop (`_rate_candidates` tries every evaluated concurrency): the loaded
    point runs fewer requests than the cap. 0 when it does not meet them at `above` (> 0: the best rate another
    cap gave; by that monotonicity this cap serves less)."""
    capacity = cap["requests_per_s"]
    top = capacity * (1 - 1e-6)

    def ok(rate: float) -> bool:
        return _meets(open_loop_point(ev, cap, rate, req.output_len), req)

    if above >= top or (above > 0 and not ok(above)):
        return 0.0
    if ok(top):
        return top
    lo, hi = above, top
    while hi - lo > 1e-5 * capacity:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def longest_at_concurrency(spec: ModelSpec, inst: sv.Instance, mem: sv.ServingMemory, concurrency: int,
                           context: int) -> int:
    """The longest max-model-len (tokens, >= `context`, at most what the pool holds for one sequence) at which
    `concurrency` sequences of that length, rounded up to a multiple of the attention-DP groups (as both emitters
    write the engine's cap, `planner.emit`), still fit the KV pool (`cost.serving.max_concurrency`; `planner check`
    notes where the engine's cap is above it, `check.engine_launch._concurrency_note`, and `--emit`'s comment says
    so); `context` when not even that length does. By bisection: the sequences that fit fall as the length grows."""
    need = -(-concurrency // inst.adp) * inst.adp
    lo, hi = context, max(context, sv.pool_context(mem, spec))
    if sv.max_concurrency(mem, spec, inst, lo) < need:
        return context
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sv.max_concurrency(mem, spec, inst, mid) >= need else (lo, mid - 1)
    return lo


def _redundant(inst: sv.Instance) -> dict:
    """The plan's `redundant_experts` key (SGLang's redundant expert copies), only where the instance has some, and
    its `dense_dp` key (`cost.serving.Instance.dense_dp`), only where it is set."""
    return ({"redundant_experts": inst.redundant} if inst.redundant else {}) | ({"dense_dp": True} if inst.dense_dp else {})


def _plan(spec: ModelSpec, ev: dict, point: dict, replicas: int, context: int) -> dict:
    inst, mem = ev["inst"], ev["memory"]
    gpus = inst.gpus * replicas
    return {
        "parallelism": {"tp": inst.tp, "pp": inst.pp, "ep": inst.ep, "dp": inst.adp, "replicas": replicas,
                        "prefill_workers": 0, "decode_workers": 0, **_redundant(inst)},
        "gpus": gpus,
        "concurrency": point["concurrency"],
        "memory_bytes": {"weights": mem.weights, "activations": mem.activations, "kv_cache": mem.kv_cache,
                         "reserve": mem.reserve, "capacity": mem.capacity},
        "mem_fraction": mem.budget_fraction, **{k: ev[k] for k in ("max_num_batched_tokens",) if k in ev},
        "kv_tokens": mem.kv_tokens, "max_concurrency": ev["max_concurrency"],
        "longest_context": ev["longest_context"], "longest_context_bound": ev["longest_context_bound"],
        "longest_at_concurrency": longest_at_concurrency(spec, inst, mem, point["concurrency"], context),
        "ttft_ms": round(point["ttft_s"] * 1e3, 1), "tpot_ms": round(point["tpot_s"] * 1e3, 2),
        "request_latency_ms": round(point["latency_s"] * 1e3, 1),
        "tokens_per_s": round(point["tokens_per_s"] * replicas, 1),
        "tokens_per_s_per_gpu": round(point["tokens_per_s"] / inst.gpus, 1),
        "tokens_per_s_per_user": round(1 / point["tpot_s"], 1) if point["tpot_s"] > 0 else None,
        "requests_per_s": round(point["requests_per_s"] * replicas, 3),
        **({"capacity_requests_per_s": round(point["capacity_per_s"] * replicas, 3),
            "utilisation": round(point["utilisation"], 4), "in_service": round(point["in_service"], 1),
            "queue_wait_ms": round(point["queue_wait_s"] * 1e3, 1)} if "utilisation" in point else {}),
    }


def candidates(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, coefficients: dict):
    """(shapes, rejected counts, evaluated shapes, all (shape, point) pairs, those meeting the SLOs,
    the best point per shape meeting them): the program's candidates are the last."""
    found, rejected = shapes(spec, hw, req.gpus, req.fix, req.engine, wide=wide_ep(spec, hw, req))
    found = _deepep_runs(found, rejected, req.engine, None)
    evaluated = [evaluate(spec, hw, req, inst, coefficients) for inst in found]
    points = [(ev, p) for ev in evaluated for p in ev["points"]]
    good = [(ev, p) for ev, p in points if _meets(p, req)]
    if req.request_rate is not None:
        return found, rejected, evaluated, points, good, _rate_candidates(req, points)
    best_per_shape: dict = {}
    for ev, p in good:
        key = ev["inst"]
        if key not in best_per_shape or p["tokens_per_s"] > best_per_shape[key][1]["tokens_per_s"]:
            best_per_shape[key] = (ev, p)
    return found, rejected, evaluated, points, good, list(best_per_shape.values())


def _rate_candidates(req: ServeRequest, points: list) -> list:
    """At --request-rate, per shape the cap (any evaluated concurrency: the SLOs are asked of the loaded mean TTFT /
    TPOT, so a cap whose closed loop -- every slot held, prompts queued behind each other -- misses them may meet them
    at the load the rate gives; until servefit2 only caps meeting them closed-loop were tried) whose
    replica serves the most requests/s open-loop within the SLOs (`usable_rate`), as (ev, point) with the point's
    requests_per_s that usable rate -- what `_best_mix` sizes replicas with -- capacity_per_s its closed-loop
    requests/s and `closed` the closed-loop point (`_replica_plan` reports the load a replica is given). A cap
    serves at most its capacity, so caps of less capacity than the best usable rate found are not tried, and a cap
    that misses the SLOs at that rate serves less (`usable_rate` above=)."""
    by_shape: dict = {}
    for ev, p in points:
        by_shape.setdefault(ev["inst"], (ev, []))[1].append(p)
    out = []
    for ev, caps in by_shape.values():
        best = None
        for cap in sorted(caps, key=lambda p: -p["requests_per_s"]):
            if best is not None and cap["requests_per_s"] <= best[1]["requests_per_s"]:
                break
            rate = usable_rate(ev, cap, req, best[1]["requests_per_s"] if best else 0.0)
            if rate > 0 and (best is None or rate > best[1]["requests_per_s"]):
                best = (ev, {**cap, "requests_per_s": rate, "capacity_per_s": cap["requests_per_s"], "closed": cap})
        if best is not None:
            out.append(best)
    return out


def _replica_plan(spec: ModelSpec, req: ServeRequest, candidate: tuple, replicas: int) -> dict:
    """`_plan` of `replicas` alike replicas of `candidate` (ev, point): at --request-rate each fed its even share
    (`ROUTER_SPLIT`) and reported at that load (`open_loop_point`), else at the candidate's closed-loop point."""
    ev, point = candidate
    if "closed" in point:
        point = open_loop_point(ev, point["closed"], req.request_rate / replicas, req.output_len)
    return _plan(spec, ev, point, replicas, req.context)


def serve_plan(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, calibration: dict | None = None) -> dict:
    """Plans for serving `spec` on `req.gpus` GPUs of `hw`.

    Returns: {"solver", "request", "plans", "pareto", "notes"}.
    Raises: InfeasibleError (exit 1) naming the binding constraint and what would relax it;
        SpecError for an engine without calibration.
    """
    start = time.perf_counter()
    asked = req.input_len + req.output_len
    if req.max_model_len is not None and req.max_model_len < asked:
        raise SpecError(f"value {req.max_model_len} is shorter than --input-len {req.input_len} + --output-len "
                        f"{req.output_len} = {asked} tokens, the context each request reaches; allowed: at least "
                        f"{asked}", key="--max-model-len")
    if req.request_latency_ms is not None and req.ttft_ms is not None and req.request_latency_ms < req.ttft_ms:
        raise SpecError(f"value {req.request_latency_ms:g} is below --ttft-ms {req.ttft_ms:g}: a request's latency "
                        f"includes its time to first token, so the two SLOs contradict; allowed: at least "
                        f"{req.ttft_ms:g}, or drop --ttft-ms", key="--request-latency-ms")
    limit = engine_context_length(spec, req.engine)
    if req.context > limit:
        key = ("--max-model-len" if req.max_model_len else "--input-len" if req.input_len > limit
               else "--output-len" if req.output_len > limit else "--input-len + --output-len")
        raise SpecError(f"a context of {req.context} tokens exceeds {spec.name}'s context length under {req.engine} "
                        f"({context_length_words(spec, req.engine)}; {req.engine} refuses a longer one at start-up); "
                        f"allowed: up to {limit}", key=key)
    calibration = calibration or load_calibration()
    coefficients = coefficients_for(calibration, req.engine, spec)
    if req.disaggregated:
        return disaggregated_plan(spec, hw, req, coefficients, start)
    found, rejected, evaluated, points, good, cands = candidates(spec, hw, req, coefficients)
    if not cands:
        raise _infeasible(spec, hw, req, evaluated, points, rejected)
    gpus = [ev["inst"].gpus for ev, _ in cands]
    tokens = [p["tokens_per_s"] for _, p in cands]
    mix = _best_mix(req, cands)
    if req.request_rate is not None:
        if not mix.counts:
            needed = serve_ilp.fewest_alike(gpus, [p["requests_per_s"] for _, p in cands], tokens,
                                            req.request_rate, req.gpus * 1024)
            best = max(cands, key=lambda c: c[1]["requests_per_s"] / c[0]["inst"].gpus)
            slos = req.slos
            more = (_rate_hint(hw, int(needed.objective), _carried(needed, cands)) if needed.counts else
                    _beyond_search(req, best, slos))
            plan = _plan(spec, best[0], best[1], max(1, req.gpus // best[0]["inst"].gpus), req.context)
            raise InfeasibleError(
                f"request rate {number(req.request_rate)}/s needs more than {req.gpus} GPUs"
                f"{' within the SLOs' if slos else ''}: the "
                f"best plan carries {plan['requests_per_s']:g} requests/s on {plan['gpus']} GPUs{more}",
                details={"binding": "gpus", "closest_plan": plan,
                         "minimum_gpus": int(needed.objective) if needed.counts else None})
    chosen = [_replica_plan(spec, req, cands[i], n) for i, n in sorted(mix.counts.items())]
    top = _top(spec, req, cands, chosen)
    total_tokens = sum(p["tokens_per_s"] for p in chosen)
    used = _deployment_gpus(chosen)
    best = {id(p) for _, p in cands}
    pareto = _pareto([(ev, p) for ev, p in (good if req.slos else points)
                      if not p.get("refined") or id(p) in best])
    return {
        "solver": {"status": mix.status, "objective": ("min_gpus" if req.request_rate is not None else "max_tokens_per_s"),
                   "objective_value": round(used if req.request_rate is not None else total_tokens, 1),
                   "wall_s": round(time.perf_counter() - start, 3), "candidates_evaluated": len(points),
                   "shapes": len(found), "shapes_rejected": rejected},
        "deployment": {"gpus": used, "tokens_per_s": round(total_tokens, 1),
                       "tokens_per_s_per_gpu": _deployment_per_gpu(chosen),
                       "requests_per_s": round(sum(p["requests_per_s"] for p in chosen), 3), **_capacity(chosen),
                       "mix": chosen},
        "plans": top,
        "pareto": pareto,
        "notes": (_notes(hw, req) + _extrapolation_note(spec, hw, req, calibration, chosen)
                  + _no_slo_note(req, chosen) + _exchange_note(spec, req, chosen) + _wide_note(hw, req, chosen)
                  + _slo_margin_note(req, chosen, calibration)),
    }


def _capacity(chosen: list[dict]) -> dict:
    """At --request-rate (plans carrying `capacity_requests_per_s`): the deployment's closed-loop capacity in
    requests/s and the share of it the served load uses; {} otherwise."""
    if not chosen or "capacity_requests_per_s" not in chosen[0]:
        return {}
    served = sum(p["requests_per_s"] for p in chosen)
    # each record's capacity is rounded to 3 decimals, which at a low rate (0.001 requests/s) is most of it: the
    # capacity is rebuilt from each record's served load and its utilisation, both kept to relative precision
    # (fresh-user review 13, finding 9: "100.0% of its capacity (0.001 requests/s)" beside a utilisation of 0.68)
    if all(p.get("utilisation", 0) > 0 for p in chosen):
        capacity = sum(p["requests_per_s"] / p["utilisation"] for p in chosen)
    else:
        capacity = sum(p["capacity_requests_per_s"] for p in chosen)
    return {"capacity_requests_per_s": float(f"{capacity:.4g}") if capacity < 1 else round(capacity, 3),
            "utilisation": round(served / capacity, 4)}


def _deployment_gpus(chosen: list[dict]) -> int:
    """GPUs of a deployment of `_plan` records."""
    return sum(p["gpus"] for p in chosen)


def _deployment_per_gpu(chosen: list[dict]) -> float:
    """Tokens/s per GPU of a deployment of `_plan` records (0 without GPUs)."""
    used = _deployment_gpus(chosen)
    return round(sum(p["tokens_per_s"] for p in chosen) / used, 1) if used else 0.0


def _best_mix(req: ServeRequest, cands: list):
    """Alike replicas of ONE aggregated candidate (`candidates`; `ROUTER_SPLIT`: the router in front of the
    servers gives each of n replicas R / n of the requests, so replicas of unlike capacity would overload the
    smaller): the fewest GPUs carrying --request-rate (`serve_ilp.fewest_alike`), else the most tokens/s on
    --gpus (`serve_ilp.best_alike`)."""
    gpus = [ev["inst"].gpus for ev, _ in cands]
    tokens = [p["tokens_per_s"] for _, p in cands]
    if req.request_rate is not None:
        return serve_ilp.fewest_alike(gpus, [p["requests_per_s"] for _, p in cands], tokens, req.request_rate,
                                      req.gpus)
    return serve_ilp.best_alike(gpus, tokens, req.gpus)


def _aggregated_note(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, coefficients: dict, plan: dict) -> list[str]:
    """A note when aggregated serving (the same request without --disaggregated, the same latency model
    and coefficients: `candidates` and `_best_mix`) beats the disaggregated mix `plan`: more tokens/s per
    GPU on --gpus, or (--request-rate) the rate on fewer GPUs. Empty when it does not, or when no
    aggregated plan meets the SLOs."""
    cands = candidates(spec, hw, req, coefficients)[-1]
    mix = _best_mix(req, cands) if cands else None
    if mix is None or not mix.counts:
        return []
    chosen = [_replica_plan(spec, req, cands[i], n) for i, n in sorted(mix.counts.items())]
    used, per_gpu = _deployment_gpus(chosen), _deployment_per_gpu(chosen)
    what = " + ".join(f"{n} x {cands[i][0]['inst'].label} @{cands[i][1]['concurrency']}"
                      for i, n in sorted(mix.counts.items()))
    if req.request_rate is not None:
        if used >= plan["gpus"]:
            return []
        gain = f"carries {req.request_rate:g} requests/s on {used} GPUs against this mix's {plan['gpus']}"
    elif per_gpu <= plan["tokens_per_s_per_gpu"]:
        return []
    else:
        gain = f"on {used} GPUs gives {per_gpu:g} tokens/s/GPU against this mix's {plan['tokens_per_s_per_gpu']:g}"
    return [f"aggregated serving beats this disaggregated mix under the same SLOs and model: {what} {gain} "
            f"(run without --disaggregated)"]


def _top(spec: ModelSpec, req: ServeRequest, cands: list, chosen: list) -> list[dict]:
    """The search's choice first (one row: one replica shape, `_best_mix`), then the best homogeneous
    deployments of the other shapes by tokens/s/GPU, `req.top` rows in all."""
    rows = list(chosen)
    seen = {tuple(p["parallelism"][k] for k in FIXABLE) for p in chosen}
    others = sorted(cands, key=lambda c: -c[1]["tokens_per_s"] / c[0]["inst"].gpus)
    for ev, p in others:
        inst = ev["inst"]
        key = (inst.tp, inst.pp, inst.ep, inst.adp)
        if key in seen or len(rows) >= req.top:
            continue
        seen.add(key)
        replicas = max(1, req.gpus // inst.gpus) if req.request_rate is None else \
            serve_ilp.replicas_for(req.request_rate, p["requests_per_s"]) or 1
        rows.append(_replica_plan(spec, req, (ev, p), replicas))
    return rows[:max(req.top, len(chosen))]


def _pareto(points: list) -> list[dict]:
    """Points not dominated in (tokens/s/GPU, tokens/s/user), best tokens/s/GPU first. serve_plan passes
    the grid's points and each shape's best: `refine`'s probes between grid points would crowd the front
    with near-copies of the best one."""
    data = [{"tp": ev["inst"].tp, "pp": ev["inst"].pp, "ep": ev["inst"].ep, "dp": ev["inst"].adp,
             "concurrency": p["concurrency"], "tokens_per_s_per_gpu": round(p["tokens_per_s"] / ev["inst"].gpus, 1),
             "tokens_per_s_per_user": round(1 / p["tpot_s"], 1) if p["tpot_s"] > 0 else 0.0,
             "ttft_ms": round(p["ttft_s"] * 1e3, 1), "tpot_ms": round(p["tpot_s"] * 1e3, 2)} for ev, p in points]
    front = [d for d in data if not any(
        o["tokens_per_s_per_gpu"] >= d["tokens_per_s_per_gpu"] and o["tokens_per_s_per_user"] >= d["tokens_per_s_per_user"]
        and (o["tokens_per_s_per_gpu"], o["tokens_per_s_per_user"]) != (d["tokens_per_s_per_gpu"], d["tokens_per_s_per_user"])
        for o in data)]
    unique = {(d["tokens_per_s_per_gpu"], d["tokens_per_s_per_user"]): d for d in front}
    return sorted(unique.values(), key=lambda d: -d["tokens_per_s_per_gpu"])


LOW_LATENCY_PREFILL = {"vllm": True, "sglang": False, "trtllm": False}
"""Engine -> whether an aggregated server (prefill chunks and decode in one step) with attention DP and EP runs
its prompts' expert exchange through DeepEP's low-latency kernels, each token sent once per chosen expert
(`cost.serving.moe_exchange_s` decode=True) rather than the normal kernels' once per destination rank.
vLLM: yes. Its all2all backend is one per server (vllm/config/parallel.py @840e797 `all2all_backend`), and the aggregated
launch asks for deepep_low_latency (`emit.vllm.command`; vLLM's own aggregated multi-node example does the same:
docs/serving/expert_parallel_deployment.md @13642f1). The low-latency manager sizes its buffers for
VLLM_MOE_DP_CHUNK_SIZE tokens per rank (default 256; vllm/envs.py, `DeepEPLLAll2AllManager` in
vllm/distributed/device_communicators/all2all.py @e04bcc7), so a prompt is dispatched 256 tokens at a time
(vllm/model_executor/layers/fused_moe/runner/chunking_moe_runner.py @25e27f7 `forward_impl`); the per-dispatch
latency of those chunks is not priced. SGLang: no (DeepEP mode auto: normal kernels when the batch has prefill,
srt/layers/moe/utils.py DeepEPMode.resolve @0.5.23). TensorRT-LLM: priced as before (normal kernels in prefill);
no source read. Disaggregated prefill workers are priced with the normal kernels (vLLM: its high-throughput backend)."""
DEEPEP_FLAGS = {"vllm": f"{vllm_flags.FLAG['a2a']} {vllm_flags.DEEPEP_DECODE} ({vllm_flags.DEEPEP_PREFILL} on "
                        f"prefill workers)",
                "sglang": f"{sglang_flags.FLAG['a2a']} {sglang_flags.A2A_DEFAULT_EMIT} (DeepEP mode auto by default: "
                          f"normal kernels with prefill in the batch, low-latency otherwise)",
                "trtllm": "its DeepEP all-to-all"}
"""How each engine is told to exchange MoE tokens with DeepEP (flag names from the engine tables).
Source: vLLM 0.33.0 vllm/config/parallel.py all2all_backend (default allgather_reducescatter); SGLang 0.5.23
srt/layers/moe/utils.py DeepEPMode (the a2a backend flag defaults to none); TensorRT-LLM MoE all-to-all
(DeepEP / DeepEPLowLatency)."""


def _exchange_note(spec: ModelSpec, req: ServeRequest, chosen: list[dict]) -> list[str]:
    """A chosen MoE instance with attention DP and EP is priced with DeepEP's exchange, which the
    engines run only when asked: say so, with the flag (`cost.serving.moe_exchange_s`)."""
    if not spec.is_moe or not any(p["parallelism"]["ep"] > 1 and p["parallelism"]["dp"] > 1 for p in chosen):
        return []
    kernels = ("low-latency kernels in decode and prefill alike: one backend per server, prompts dispatched "
               "256 tokens at a time" if LOW_LATENCY_PREFILL[req.engine] else
               "low-latency kernels in decode, normal kernels in prefill")
    overlap = (f"; decode with two-batch overlap ({sglang_flags.FLAG['tbo']}, written by --emit): the exchange "
               f"hidden behind the other half-batch's step, its fill and the halved batches not priced (an upper "
               f"bound of the overlap)" if req.engine in TWO_BATCH_OVERLAP_ENGINES else "")
    return [f"EP with attention DP: the expert dispatch/combine is priced as DeepEP ({kernels}), which "
            f"{req.engine} runs only with "
            f"{DEEPEP_FLAGS[req.engine]}; its default all-gather/reduce-scatter moves "
            f"every token to every GPU (the price the plans without EP pay){overlap}"]


def _wide_note(hw: ClusterSpec, req: ServeRequest, rows: list[dict]) -> list[str]:
    """A chosen instance over several nodes (`wide_ep_shapes`): its MoE exchange runs over the network, its
    latency constants were fitted on single-node measurements only, and under SGLang with attention DP over nodes
    its chunk is per rank (`forward_tokens`), its budget fraction the planner's (`_memory`, no --mem-fraction), and
    the dense-MLP choice (`wide_ep_shapes`) said."""
    node = hw.scaleup_domain_gpus
    wide = sorted({p["parallelism"]["tp"] for p in rows if p["parallelism"]["tp"] > node})
    if not wide:
        return []
    note = (f"instances over {', '.join(f'{n // node} nodes (tp{n})' for n in wide)}: their expert dispatch/combine "
            f"(EP) or tensor all-reduces (plain tp) cross the network at {hw.network_gb_per_s_per_gpu:g} GB/s per GPU "
            f"(DeepEP's measured internode rate is about the NIC's); the latency constants are fitted on single-node "
            f"measurements only (no multi-node or disaggregated row), so these instances are extrapolated")
    if req.engine == "sglang" and any(p["parallelism"]["dp"] > node for p in rows):
        note += (f"; SGLang with attention DP over nodes: --max-num-batched-tokens is the chunk of one attention-DP "
                 f"rank ({req.max_num_batched_tokens:,} tokens; --emit writes it x the ranks as the chunked-prefill "
                 f"size, which SGLang divides back)")
        if req.mem_fraction is None:
            note += ("; mem_fraction_static is the planner's, written by --emit: what each GPU allocates beside the KV "
                     "pool (the forward's activations at that chunk, CUDA graphs, DeepEP buffers), at least SGLang's "
                     "10 GiB floor -- its " + sglang_flags.DEFAULT_RESERVE_WHY.removeprefix("SGLang's "))
        if any(p["parallelism"].get("dense_dp") for p in rows):
            note += ("; (dense MLPs dp): the dense layers' MLPs and the LM head whole on every GPU, no token gather "
                     "(LMSYS's dense-TP-1 / DP-LM-head flags, written by --emit); without it every rank's tokens cross "
                     "the network before each dense MLP (priced, not overlapped)")
    return [note]


def _slo_margin_note(req: ServeRequest, chosen: list[dict], calibration: dict) -> list[str]:
    """A chosen instance whose predicted TTFT or TPOT lies closer to its SLO than the latency model's
    mean absolute error on the held-out measurements of the engine (`calibration/serving.yaml`
    evaluation.by_engine, else the summary) may miss it: say so, with the SLO that would keep that
    margin. The plan is not changed (senior review 6 H4: plans that sit on the SLO, measured above it)."""
    evaluation = calibration.get("evaluation", {})
    errors = evaluation.get("by_engine", {}).get(req.engine) or evaluation.get("summary")
    if not errors:
        return []
    out = []
    for metric, slo in (("ttft", req.ttft_ms), ("tpot", req.tpot_ms)):
        mape = errors.get(f"{metric}_mape")
        if slo is None or mape is None:
            continue
        margin = slo / (1 + mape / 100)
        close = [p for p in chosen if p[f"{metric}_ms"] > margin]
        if close:
            worst = max(close, key=lambda p: p[f"{metric}_ms"])
            par = worst["parallelism"]
            shape = " ".join(f"{k}{par[k]}" for k in ("tp", "pp", "ep", "dp") if k == "tp" or par[k] > 1)
            out.append(f"{metric.upper()} {worst[f'{metric}_ms']:g} ms of {shape} @{worst['concurrency']:,} "
                       f"is within the model's {mape:g}% {metric.upper()} error on held-out {req.engine} measurements "
                       f"of the {slo:g} ms SLO, so it may miss it; --{metric}-ms {float(f'{margin:.3g}'):g} plans with "
                       f"that margin")  # 3 significant digits, never in exponent form (1670, not 1.67e+03)
    return out


def _no_slo_note(req: ServeRequest, chosen: list[dict]) -> list[str]:
    """Without an SLO or a concurrency the objective is tokens/s at any latency: say what latency
    the chosen concurrency costs each user (a plan at hundreds of requests in flight can stream a
    few tokens/s per user) and how to bound it."""
    if (req.ttft_ms, req.tpot_ms, req.request_latency_ms, req.concurrency) != (None,) * 4 or not chosen:
        return []
    worst = max(chosen, key=lambda p: p["tpot_ms"])
    if "utilisation" in worst:  # --request-rate: the fewest GPUs, each replica loaded up to just under its capacity
        return [f"no --ttft-ms, --tpot-ms or --request-latency-ms given: the plan uses the fewest GPUs carrying the "
                f"rate at any latency; its instances run at {worst['utilisation']:.1%} of their capacity (cap "
                f"{worst['concurrency']:,} running requests) with TPOT {worst['tpot_ms']:g} ms and TTFT "
                f"{worst['ttft_ms']:g} ms, {worst['queue_wait_ms']:g} ms of it waiting for a free slot; give --ttft-ms "
                f"and --tpot-ms to bound them"]
    return [f"no --ttft-ms, --tpot-ms, --request-latency-ms or --concurrency given: the plan maximises "
            f"tokens/s at any latency; its instances run at concurrency {worst['concurrency']:,} with "
            f"TPOT {worst['tpot_ms']:g} ms ({worst['tokens_per_s_per_user']:g} tokens/s per user) and "
            f"TTFT {worst['ttft_ms']:g} ms; give --tpot-ms (e.g. 50 for 20 tokens/s per user) to bound it"]


STEADY_STATE_NOTE = ("TTFT / TPOT: steady-state means of a closed loop at the plan's concurrency per instance, the "
                     "prefill queue's wait included (cost.serving.prefill_queue_wait_s); a benchmark whose clients "
                     "all start at once also measures its start burst ('planner validate --suite serving' costs it)")
"""What serve-plan's latencies are (senior review 10, finding 3: the output did not say)."""
OPEN_LOOP_NOTE = ("TTFT / TPOT at --request-rate: steady-state means of each replica fed its share of the rate as an "
                  "open stream (Poisson arrivals): the requests it runs follow from the load (Little's law), and TTFT "
                  "includes the prefill queue's wait at that rate (M/D/1) and the wait for a free running slot when all of "
                  "the cap (conc.) are held (M/D/c; both cost.serving.open_queue_wait_s); tok/s/GPU is the load served")
"""What serve-plan's latencies are at --request-rate (`open_loop_point`; fresh-user review 11, finding 1)."""
SPLIT_OPEN_LOOP_NOTE = ("TTFT / TPOT at --request-rate: steady-state means of the workers fed the rate as an open "
                        "stream (Poisson arrivals) split evenly over each role's workers: TTFT includes each prefill "
                        "worker's queue wait at its share (M/D/1, cost.serving.prefill_worker_wait_s) and the wait for a "
                        "free decode slot (M/D/c, decode_wait_s)")
"""What `--disaggregated` latencies are at --request-rate (`_rate_split`; senior review 12 #3: the closed-loop note
was printed there, beside the decode slot's open-loop M/D/c note)."""


def _notes(hw: ClusterSpec, req: ServeRequest) -> list[str]:
    rule = sv.ENGINES[req.engine]
    fraction = rule.default if req.mem_fraction is None else req.mem_fraction
    basis = "of total GPU memory" if rule.basis == "total" else "of the memory free after loading"
    value = (f"{fraction:g}" if req.mem_fraction is not None or req.engine != "sglang" else
             "SGLang's own default for each shape (by GPU memory, TP x PP, chunk, DP attention; "
             "planner.frameworks.sglang.default_mem_fraction_static), except where attention DP spans nodes: "
             "the planner's, from the memory it models beside the pool (written by --emit)")
    notes = [f"{req.engine} KV pool: {rule.flag}={value} ({basis}); the engine reserves this "
             f"memory at start-up, whatever the weights take",
             STEADY_STATE_NOTE if req.request_rate is None else
             SPLIT_OPEN_LOOP_NOTE if req.disaggregated else OPEN_LOOP_NOTE]
    if not hw.gpu.name.startswith(CALIBRATED_GPUS):
        notes.append(_uncalibrated_gpu_note(hw, req))
    return notes


def _extrapolation_note(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, calibration: dict,
                        chosen: list[dict]) -> list[str]:
    """What the plan takes beyond the measurements of its engine and model class (calibration/serving.yaml
    `measured`, written from serving_measurements.csv by `serve_validate.measured_ranges`): prompt and output
    lengths, the chosen instances' concurrency and GPUs per instance, the model, the GPU (unless
    `_uncalibrated_gpu_note` says so already). There the latency model extrapolates and its error is unknown.
    Empty when everything lies within the measured ranges (or the file has no `measured` block)."""
    measured = calibration.get("measured", {}).get(req.engine, {}).get("moe" if spec.is_moe else "dense")
    if not measured:
        return []
    outside = []
    asked = [("prompt length", "input_len", [req.input_len]), ("output length", "output_len", [req.output_len]),
             ("concurrency per instance", "concurrency", [p["concurrency"] for p in chosen]),
             ("GPUs per instance", "instance_gpus", [p["gpus"] // p["parallelism"].get("replicas", 1) for p in chosen])]
    for words, key, values in asked:
        low, high = measured[key]
        beyond = [v for v in values if not low <= v <= high]
        if beyond:
            outside.append(f"{words} {', '.join(f'{v:,}' for v in sorted(set(beyond)))} (measured {low:,}-{high:,})")
    if spec.name not in measured["models"]:
        outside.append(f"model {spec.name} (measured: {', '.join(measured['models'])})")
    if hw.gpu.name.startswith(CALIBRATED_GPUS) and hw.gpu.name not in measured["gpus"]:
        outside.append(f"GPU {hw.gpu.name} (measured: {', '.join(measured['gpus'])})")
    if not outside:
        return []
    what = "MoE" if spec.is_moe else "dense"
    return [f"extrapolated beyond the {req.engine} {what} serving measurements the latency model is fitted and "
            f"evaluated on: {'; '.join(outside)}; its TTFT/TPOT error there is unknown"]


def _uncalibrated_gpu_note(hw: ClusterSpec, req: ServeRequest) -> str:
    """What the latency model uses on a GPU without serving measurements: its datasheet HBM bandwidth
    and peak FLOP/s (hardware file) under the efficiency multipliers fitted on H100/H200, i.e. the same
    achieved fraction of datasheet as Hopper; the error there is unmeasured."""
    dtype = _peak_dtype(hw, req.weight_dtype)
    return (f"TTFT/TPOT on {hw.gpu.name}: no serving measurements for this GPU (the latency constants are "
            f"fitted on H100/H200 only); the model uses its datasheet HBM {hw.gpu.hbm_gb_per_s:,.0f} GB/s and "
            f"{dtype} {hw.gpu.peak_tflops[dtype]:,.0f} TFLOP/s with the efficiencies H100/H200 reach, so its "
            f"error on this GPU is unknown (H100/H200 error: README accuracy table)")


def _carried(mix, cands) -> float:
    """Requests/s a replica mix carries: sum over candidates of replicas x the candidate's requests/s."""
    return round(sum(n * cands[i][1]["requests_per_s"] for i, n in mix.counts.items()), 3)


def _infeasible(spec, hw, req, evaluated, points, rejected) -> InfeasibleError:
    """What binds (memory, context, SLO) with its numbers and what would relax it."""
    if not evaluated:
        why = "; ".join(f"{n} x {r}" for r, n in rejected.items()) or "no shape matches --fix"
        if req.fix:
            valid, _ = shapes(spec, hw, req.gpus, {}, req.engine, wide=wide_ep(spec, hw, req))
            valid = _deepep_runs(valid, {}, req.engine, None)
            names = {"tp": "tp", "pp": "pp", "ep": "ep", "dp": "adp"}
            allowed = "; ".join(f"{k}: {', '.join(str(v) for v in sorted({getattr(i, names[k]) for i in valid}))}"
                                for k in req.fix)
            why = f"the pins {' '.join(f'{k}={v}' for k, v in req.fix.items())} leave no valid shape; allowed {allowed}"
            pinned, _ = shapes(spec, hw, req.gpus, req.fix, req.engine, wide=wide_ep(spec, hw, req))
            blocked = [p for p in (deepep_normal_problem(i, req.engine, None) for i in pinned) if p]
            if blocked:
                why += (f"; {blocked[0]} (a --disaggregated decode worker runs DeepEP's low-latency kernels, which "
                        f"have no node-count limit)")
        return InfeasibleError(f"no instance shape of {spec.name} fits {req.gpus} GPUs: {why}",
                               details={"binding": "divisibility", "rejected": rejected})
    fits = [ev for ev in evaluated if ev["memory"].kv_cache > 0]
    if not fits:
        best = max(evaluated, key=lambda ev: ev["memory"].kv_cache)
        mem = best["memory"]
        need = _minimum_gpus(spec, hw, req)
        more = f"; the smallest instance that fits has {need} GPUs (--gpus {need})" if need else ""
        return InfeasibleError(
            f"memory binds: weights {mem.weights / sv.GIB:.2f} GiB + activations {mem.activations / sv.GIB:.2f} GiB "
            f"+ reserve {mem.reserve / sv.GIB:.2f} GiB leave a KV pool of {mem.kv_cache / sv.GIB:.2f} GiB per GPU "
            f"on the best shape (tp={best['inst'].tp} pp={best['inst'].pp}) under {req.engine}'s "
            f"{sv.ENGINES[req.engine].flag}={mem.budget_fraction:g}{_fraction_why(spec, hw, req, best['inst'], mem)}"
            f"{more}",
            details={"binding": "memory", "minimum_gpus": need, "closest_plan": _memory_only(best)})
    long_enough = [ev for ev in fits if ev["longest_context"] >= req.context]
    if not long_enough:
        best = max(fits, key=lambda ev: ev["longest_context"])
        need = _minimum_gpus(spec, hw, req)
        more = f", or --gpus {need}" if need else ""
        return InfeasibleError(
            f"context binds: the KV pool ({best['memory'].kv_cache / sv.GIB:.2f} GiB per GPU on tp={best['inst'].tp} "
            f"pp={best['inst'].pp}) holds at most {best['longest_context']} tokens of one sequence, fewer than "
            f"the {req.context} asked; --max-model-len {best['longest_context']} would work{more}",
            details={"binding": "context", "longest_context": best["longest_context"], "minimum_gpus": need,
                     "closest_plan": _memory_only(best)})
    scored = [(ev, p) for ev, p in points]
    if not scored:
        return InfeasibleError(f"--concurrency {req.concurrency} exceeds what every shape's KV pool holds "
                               f"(largest: {max(ev['max_concurrency'] for ev in fits)})",
                               details={"binding": "concurrency"})

    def excess(item):
        p = item[1]
        ratios = [p["ttft_s"] * 1e3 / req.ttft_ms if req.ttft_ms else 0,
                  p["tpot_s"] * 1e3 / req.tpot_ms if req.tpot_ms else 0,
                  p["latency_s"] * 1e3 / req.request_latency_ms if req.request_latency_ms else 0]
        return max(ratios)
    ev, p = min(scored, key=excess)
    parts = []
    if req.ttft_ms and p["ttft_s"] * 1e3 > req.ttft_ms:
        parts.append(f"TTFT {p['ttft_s'] * 1e3:.0f} ms > {req.ttft_ms:g} ms")
    if req.tpot_ms and p["tpot_s"] * 1e3 > req.tpot_ms:
        parts.append(f"TPOT {p['tpot_s'] * 1e3:.1f} ms > {req.tpot_ms:g} ms")
    if req.request_latency_ms and p["latency_s"] * 1e3 > req.request_latency_ms:
        parts.append(f"request latency {p['latency_s'] * 1e3:.0f} ms > {req.request_latency_ms:g} ms")
    loosest = {k: v for k, v in (("ttft_ms", req.ttft_ms and max(req.ttft_ms, round(p["ttft_s"] * 1e3 + 0.5))),
                                  ("tpot_ms", req.tpot_ms and max(req.tpot_ms, round(p["tpot_s"] * 1e3 + 0.05, 1))),
                                  ("request_latency_ms", req.request_latency_ms and max(req.request_latency_ms, round(p["latency_s"] * 1e3 + 0.5))))
               if v}
    relax = " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in loosest.items())
    return InfeasibleError(
        f"SLO binds: the closest plan (tp={ev['inst'].tp} pp={ev['inst'].pp} ep={ev['inst'].ep} dp={ev['inst'].adp}, "
        f"concurrency {p['concurrency']}) has {', '.join(parts)}; {relax} would work",
        details={"binding": "slo", "closest_plan": _plan(spec, ev, p, 1, req.context), "loosest_slo": loosest})


def _memory_only(ev: dict) -> dict:
    inst, mem = ev["inst"], ev["memory"]
    return {"parallelism": {"tp": inst.tp, "pp": inst.pp, "ep": inst.ep, "dp": inst.adp},
            "memory_bytes": {"weights": mem.weights, "activations": mem.activations, "kv_cache": mem.kv_cache,
                             "reserve": mem.reserve, "capacity": mem.capacity},
            "kv_tokens": mem.kv_tokens, "longest_context": ev["longest_context"],
            "longest_context_bound": ev["longest_context_bound"]}


def _beyond_search(req: ServeRequest, best: tuple, slos: bool) -> str:
    """The end of the GPU-bound message when not even `req.gpus` x 1024 GPUs carry the request rate (the
    search's limit): the GPUs replicas of the plan with the most requests/s per GPU (`best`) would
    need, and, only where SLOs were given, relaxing them as the other way out."""
    ev, point = best
    replicas = math.ceil(req.request_rate / point["requests_per_s"])
    return (f"; {replicas * ev['inst'].gpus:,} GPUs ({replicas:,} x {ev['inst'].label} at "
            f"{point['requests_per_s']:g} requests/s each) would carry it, beyond the {req.gpus * 1024:,} GPUs "
            f"searched (--gpus x 1024)" + ("; or relax the SLOs" if slos else ""))


def _rate_hint(hw: ClusterSpec, used: int, carried: float) -> str:
    """`; --gpus N would work: ...` for a request rate that needs `used` GPUs, N the --gpus the cluster accepts
    (`allowed_gpus`): a count that is no valid --gpus (18 on 8-GPU nodes) is said as part of the valid one
    (fresh-user review 12 #7)."""
    allowed = allowed_gpus(hw, used)
    share = (f"{used:,} GPUs" if allowed == used else
             f"{used:,} of its {allowed:,} GPUs (--gpus takes whole nodes of {hw.gpus_per_node})")
    return f"; --gpus {allowed:,} would work: {share} would carry {carried:g} requests/s"


def allowed_gpus(hw: ClusterSpec, n: int) -> int:
    """The smallest --gpus at least `n` that the cluster's allocation rule accepts: n itself below one node
    where partial nodes are allowed, else whole nodes (`specs.cluster.load_cluster`)."""
    per_node = hw.gpus_per_node
    if n < per_node and hw.allow_partial_node:
        return n
    return -(-n // per_node) * per_node


def smallest_instances(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, keep=lambda inst: True,
                       most: int = 1024) -> list[tuple[sv.Instance, sv.ServingMemory]]:
    """The instance shapes serve-plan would run with the fewest GPUs: `shapes` over up to `most` GPUs (its
    divisibility rules, --fix) that `keep` accepts, each costed by `_memory` (the engine's budget rule: SGLang's
    own mem_fraction_static default for each shape unless req.mem_fraction), whose KV pool holds one sequence
    of req.context (`cost.serving.longest_context`, as `evaluate` rejects the others); those of the smallest
    GPU count, largest KV pool first; [] when none up to `most` GPUs; shapes whose DeepEP normal-mode kernels
    cannot run as an aggregated instance are left out (`deepep_normal_problem`). `planner check` proposes them
    for a launch that does not fit (`planner.check.engine_launch._relief`)."""
    found, _ = shapes(spec, hw, most, req.fix, req.engine, wide=_wide_possible(spec, hw, req, most))
    found = _deepep_runs(found, {}, req.engine, None)
    for gpus in sorted({inst.gpus for inst in found}):
        fits = []
        for inst in (i for i in found if i.gpus == gpus and keep(i)):
            if _holds_context(spec, hw, req, inst):
                fits.append((inst, _memory(spec, hw, req, inst)))
        if fits:
            return sorted(fits, key=lambda f: -f[1].kv_cache)
    return []


def _wide_possible(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, gpus: int) -> bool:
    """Whether `wide_ep_shapes` exist for this model and engine on `gpus` GPUs (an MoE model under a
    WIDE_EP_ENGINES engine, at least two scale-up domains): the smallest-instance searches below try them whatever
    the request, since a model that fits no single node fits only them."""
    return spec.is_moe and req.engine in WIDE_EP_ENGINES and gpus >= 2 * hw.scaleup_domain_gpus


def _minimum_gpus(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest) -> int | None:
    """Smallest instance (GPUs) whose KV pool holds one sequence of the asked context, up to 1024 GPUs: the GPUs
    of the smallest fitting shape among `shapes` (with the multi-node `wide_ep_shapes`) of the first power of two
    above --gpus that has one (DeepEP's node counts as in `smallest_instances`)."""
    for n in _powers(1024):
        if n <= req.gpus:
            continue
        found, _ = shapes(spec, hw, n, req.fix, req.engine, wide=_wide_possible(spec, hw, req, n))
        found = _deepep_runs(found, {}, req.engine, None)
        fits = [inst.gpus for inst in found if inst.gpus > req.gpus and _holds_context(spec, hw, req, inst)]
        if fits:
            return min(fits)
    return None


def _holds_context(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance) -> bool:
    """Whether the KV pool of `inst` holds one sequence of the asked context."""
    mem = _memory(spec, hw, req, inst)
    return mem.kv_cache > 0 and sv.longest_context(mem, spec, engine=req.engine) >= req.context


# ---------------------------------------------------------------- disaggregated prefill / decode

def _transfer_s(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, prefill: sv.Instance) -> float:
    """Moving one request's KV cache from a prefill to a decode worker: latency + I x KV bytes per token
    (every layer, window layers capped) over the prefill worker's links (scale-up inside one node,
    else the scale-out NICs). Source: alpha-beta model; KV bytes from `kv_cache_bytes_per_token`."""
    from planner.cost.params_flops import kv_cache_bytes_per_token

    kv = kv_cache_bytes_per_token(spec, sv.KV_DTYPE_BYTES[req.kv_dtype])
    tokens = req.input_len
    window = min(tokens, spec.sliding_window) if spec.sliding_window else 0
    size = kv.per_token * tokens + (kv.sliding_window_bytes / spec.sliding_window * window if window else 0)
    inside = req.gpus <= hw.gpus_per_node
    bandwidth = (hw.scaleup_gb_per_s if inside else hw.network_gb_per_s_per_gpu) * 1e9 * prefill.gpus
    return (hw.scaleup_latency_s if inside else hw.network_latency_s) + size / bandwidth


def _worker_points(spec, hw, req, inst, coefficients, role: str) -> tuple[dict, list[dict]]:
    """Memory of a prefill (context I) or decode (context I + O) worker and its points meeting the SLOs:
    prefill: prompts one at a time (per attention-DP group), TTFT (+ KV transfer) <= --ttft-ms unloaded,
    requests/s = groups / TTFT without the transfer (the transfer overlaps the next prompt; the capacity), and
    usable_per_s, the requests/s at which the queue's wait (`cost.serving.prefill_worker_wait_s`) still keeps
    TTFT within --ttft-ms (`prefill_worker_max_load`; just under the capacity without --ttft-ms);
    decode: TPOT without prefill interference <= --tpot-ms, requests/s = b / (O x TPOT), tokens/s = b / TPOT."""
    context = req.input_len if role == "prefill" else req.context
    mem = _memory(spec, hw, req, inst, role)
    cmax = sv.max_concurrency(mem, spec, inst, context)
    ev = {"inst": inst, "memory": mem, **_chunk(req, hw, inst),
          "longest_context": sv.longest_context(mem, spec, engine=req.engine),
          "longest_context_bound": sv.context_bound(mem, spec, engine=req.engine), "max_concurrency": cmax}
    if mem.kv_cache <= 0 or ev["longest_context"] < context or cmax < 1:
        return ev, []
    if role == "prefill":  # compute-bound: prompts back to back, one at a time, gain nothing from batching
        if inst.adp > cmax:
            return ev, []
        ttft = _latency(spec, hw, req, inst, inst.adp, running_cap(req, inst, cmax), coefficients,
                        interference=False, prefill_only=True)[0]
        ttft_s = ttft + _transfer_s(spec, hw, req, inst)
        if req.ttft_ms is not None and ttft_s * 1e3 > req.ttft_ms:
            return ev, []
        load = 1.0 if req.ttft_ms is None else sv.prefill_worker_max_load(req.ttft_ms / 1e3 - ttft_s, ttft)
        return ev, [{"concurrency": inst.adp, "ttft_s": ttft_s, "service_s": ttft, "requests_per_s": inst.adp / ttft,
                     "usable_per_s": inst.adp / ttft * min(load, 1 - 1e-6)}]
    return ev, _decode_points(spec, hw, req, inst, cmax, coefficients)


def _decode_points(spec, hw, req: ServeRequest, inst: sv.Instance, cmax: int, coefficients: dict) -> list[dict]:
    """A decode worker's points meeting --tpot-ms: the grid (`CONCURRENCY_STEPS` below what it runs at once, and
    that), then every concurrency `refine` needs for the most tokens/s over EVERY concurrency up to the largest
    meeting --tpot-ms (its proof holds here: a decode-only step is `latency_terms` without the prefill-interference
    terms, each left nondecreasing in the concurrency; TTFT and request latency are not the decode worker's, so
    --tpot-ms alone is asked of it). Each point: TPOT, requests/s = b / (O x TPOT), tokens/s = b / TPOT."""
    cap = running_cap(req, inst, cmax, decode_only=True)
    steps = [req.concurrency] if req.concurrency else [b for b in CONCURRENCY_STEPS if b < cap] + [cap]
    only_tpot = replace(req, ttft_ms=None, request_latency_ms=None)

    def point(b: int) -> dict:
        tpot = _latency(spec, hw, req, inst, b, cap, coefficients, interference=False)[1]
        return {"concurrency": b, "tpot_s": tpot, "ttft_s": 0.0, "latency_s": req.output_len * tpot,
                "requests_per_s": b / (req.output_len * tpot) if tpot > 0 else 0.0,
                "tokens_per_s": b / tpot if tpot > 0 else 0.0}

    points = {b: point(b) for b in steps if inst.adp <= b <= cmax}
    if not req.concurrency:
        refine(points, point, only_tpot, inst.adp)
    return [points[b] for b in sorted(points) if points[b]["tpot_s"] > 0 and _meets(points[b], only_tpot)]


def _worker_row(spec: ModelSpec, req: ServeRequest, ev: dict, point: dict, role: str, count: int) -> dict:
    inst, mem = ev["inst"], ev["memory"]
    context = req.input_len if role == "prefill" else req.context
    row = {"role": role, "parallelism": {"tp": inst.tp, "pp": inst.pp, "ep": inst.ep, "dp": inst.adp, **_redundant(inst)},
           "workers": count, "gpus": inst.gpus * count, "concurrency": point["concurrency"],
           "memory_bytes": {"weights": mem.weights, "activations": mem.activations, "kv_cache": mem.kv_cache,
                            "reserve": mem.reserve, "capacity": mem.capacity},
           "mem_fraction": mem.budget_fraction, **{k: ev[k] for k in ("max_num_batched_tokens",) if k in ev},
           "kv_tokens": mem.kv_tokens, "max_concurrency": ev["max_concurrency"],
           "longest_context": ev["longest_context"], "longest_context_bound": ev["longest_context_bound"],
           "longest_at_concurrency": longest_at_concurrency(spec, inst, mem, point["concurrency"], context),
           "requests_per_s": round(point["requests_per_s"] * count, 3)}
    if role == "prefill":
        row["ttft_ms"] = round(point["ttft_s"] * 1e3, 1)
    else:
        row.update(tpot_ms=round(point["tpot_s"] * 1e3, 2), tokens_per_s=round(point["tokens_per_s"] * count, 1))
    return row


def worker_candidates(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, coefficients: dict):
    """(shapes, rejected counts, {"prefill": [(ev, point)], "decode": [(ev, point)]}): per shape, the
    prefill point meeting --ttft-ms (prompts one at a time) and the decode points meeting --tpot-ms
    (`_decode_points`: the grid and `refine`'s, not only the best): a decode worker fed fewer requests/s than its
    most loaded point runs at a smaller batch, so rate matching may pick one below its best (with only the best
    point, a prefill side slower than one decode worker's full rate, e.g. 8k-token prompts at tp 8, had no mix
    at all; `_lightest` then reports the batch the mix's share keeps it at)."""
    found, rejected = shapes(spec, hw, req.gpus, req.fix, req.engine, wide=wide_ep(spec, hw, req))
    sides = {}
    for role in ("prefill", "decode"):
        sides[role] = []
        for inst in (_deepep_runs(found, rejected, req.engine, role) if role == "prefill" else found):
            ev, pts = _worker_points(spec, hw, req, inst, coefficients, role)
            if role == "prefill" and pts:
                pts = [max(pts, key=lambda p: p["requests_per_s"])]
            sides[role] += [(ev, p) for p in pts]
    return found, rejected, sides


def _no_worker(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, found: list, role: str) -> InfeasibleError:
    """Why no `role` worker shape has a point: memory where no shape's KV pool holds one sequence of the role's
    context (the best shape's terms, and on a `wide_sglang` shape the largest term of the headroom its
    mem_fraction_static keeps, `cost.serving.sglang_headroom`), else the role's SLO (--ttft-ms for prefill,
    --tpot-ms for decode) -- the message no longer blames an SLO that was not given (senior review 9, finding 6)."""
    blocked = [p for p in (deepep_normal_problem(i, req.engine, role) for i in found) if p]
    if found and len(blocked) == len(found):
        return InfeasibleError(f"no {role} worker shape runs on up to {req.gpus} GPUs: {blocked[0]}; "
                               f"{deepep.fix_words(found[0].ep, req.engine).replace('use ep', 'pin ep')}",
                               details={"binding": "deepep_node_count", "role": role})
    found = [i for i in found if not deepep_normal_problem(i, req.engine, role)]
    context = req.input_len if role == "prefill" else req.context
    mems = [(inst, _memory(spec, hw, req, inst, role)) for inst in found]
    fits = [m for _, m in mems if m.kv_cache > 0 and sv.longest_context(m, spec, engine=req.engine) >= context]
    slo = "--ttft-ms" if role == "prefill" else "--tpot-ms"
    given = req.ttft_ms if role == "prefill" else req.tpot_ms
    if fits or not mems:
        return InfeasibleError(f"no {role} worker shape meets {slo} {given:g} on up to {req.gpus} GPUs; "
                               f"loosen {slo} or drop --disaggregated" if given is not None else
                               f"no {role} worker shape has a point on up to {req.gpus} GPUs; drop --disaggregated",
                               details={"binding": f"{role}_slo"})
    inst, mem = max(mems, key=lambda m: m[1].kv_cache)
    why = _fraction_why(spec, hw, req, inst, mem, role)
    return InfeasibleError(
        f"memory binds: no {role} worker shape holds a {context:,}-token sequence on up to {req.gpus} GPUs; the "
        f"best, {inst.label}, has weights {mem.weights / sv.GIB:.2f} GiB + activations {mem.activations / sv.GIB:.2f} "
        f"GiB + reserve {mem.reserve / sv.GIB:.2f} GiB and a KV pool of {mem.kv_cache / sv.GIB:.2f} GiB per GPU under "
        f"{req.engine}'s {sv.ENGINES[req.engine].flag}={mem.budget_fraction:g}{why}; a smaller "
        f"--max-num-batched-tokens, more GPUs or no --disaggregated would relax it",
        details={"binding": "memory", "role": role})


def _fraction_why(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, inst: sv.Instance, mem: sv.ServingMemory,
                  role: str | None = None) -> str:
    """What set an SGLang shape's mem_fraction_static where memory binds ('' otherwise): on a `wide_sglang` shape the
    largest term of the headroom it keeps free (`cost.serving.sglang_headroom`), on another SGLang shape a default
    at or below 0 -- SGLang's own rule keeps 1.5 MiB per token of the chunk (`frameworks.sglang.
    default_mem_fraction_static`), so a large --max-num-batched-tokens leaves nothing for weights and KV."""
    if req.engine != "sglang" or req.mem_fraction is not None:
        return ""
    if wide_sglang(hw, inst, req.engine):
        room = _headroom(spec, hw, req, inst, role)
        term = room.binding()
        size = room.total if term == "floor" else getattr(room, term)
        return (f"; the memory SGLang must keep free beside the pool is {room.total / sv.GIB:.2f} GiB, set by "
                f"{term.replace('_', ' ')} ({size / sv.GIB:.2f} GiB"
                + (f" at {forward_tokens(req, inst, hw):,} tokens per attention-DP rank" if term == "activations" else "")
                + ")")
    if mem.budget_fraction <= 0:
        return (f"; SGLang's own mem_fraction_static default is {mem.budget_fraction:g} here: it keeps 1.5 MiB per "
                f"token of the {req.max_num_batched_tokens:,}-token chunk free, more than the GPU holds "
                f"(--mem-fraction or a smaller --max-num-batched-tokens)")
    return ""


def _no_mix(hw: ClusterSpec, req: ServeRequest, pre: list, dec: list) -> InfeasibleError:
    """Why no rate-matched mix fits: the fewest GPUs of one decode worker (at its lightest point meeting the
    SLOs) fed by enough prefill workers of one shape (or, at --request-rate, both sides carrying the rate)."""
    if req.request_rate is not None:
        wider = _rate_split(replace(req, gpus=req.gpus * 64), pre, dec)
        if wider.decode:
            (i, n_pre), (j, n_dec) = *wider.prefill.items(), *wider.decode.items()
            p, d = pre[i], dec[j]
            gpus = n_pre * p[0]["inst"].gpus + n_dec * d[0]["inst"].gpus
            return InfeasibleError(
                f"no prefill + decode mix fits {req.gpus} GPUs at {req.request_rate:g} requests/s"
                f"{' within --ttft-ms' if req.ttft_ms is not None else ''} (TTFT with both queues' waits): the least "
                f"is {n_pre} {p[0]['inst'].label} prefill worker(s) + {n_dec} {d[0]['inst'].label} decode worker(s) "
                f"@{d[1]['concurrency']} = {gpus} GPUs; --gpus {allowed_gpus(hw, gpus)} would work (or a lower "
                f"--request-rate, a looser --ttft-ms, or no --disaggregated)",
                details={"binding": "prefill_rate", "minimum_gpus": gpus})

    def need(p, d) -> tuple[int, int, int]:
        rate = req.request_rate if req.request_rate is not None else d[1]["requests_per_s"]
        n_pre = math.ceil(rate / p[1]["usable_per_s"] - 1e-9)
        n_dec = math.ceil(rate / d[1]["requests_per_s"] - 1e-9) if req.request_rate is not None else 1
        return p[0]["inst"].gpus * n_pre + d[0]["inst"].gpus * n_dec, n_pre, n_dec
    (gpus, n_pre, n_dec), p, d = min(((need(p, d), p, d) for p in pre for d in dec), key=lambda x: x[0][0])
    at = f" at {req.request_rate:g} requests/s" if req.request_rate is not None else ""
    return InfeasibleError(
        f"no rate-matched prefill + decode mix fits {req.gpus} GPUs{at}: "
        f"{'the rate binds' if at else 'the prefill side binds'} -- a "
        f"{p[0]['inst'].label} prefill worker carries {p[1]['usable_per_s']:.3g} requests/s of {req.input_len}-token "
        f"prompts, and the least mix is {n_pre} of them + {n_dec} {d[0]['inst'].label} decode worker(s) at "
        f"{d[1]['requests_per_s']:.3g} requests/s each = {gpus} GPUs; --gpus {allowed_gpus(hw, gpus)} would work "
        f"(or a shorter "
        f"--input-len, a looser --ttft-ms, or no --disaggregated)",
        details={"binding": "prefill_rate", "minimum_gpus": gpus})


def disaggregated_plan(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, coefficients: dict, start: float) -> dict:
    """Prefill and decode workers (`--disaggregated`): per shape the prefill point and every decode point
    meeting the SLOs (`worker_candidates`), then the best rate-matched mix of one prefill kind and one decode kind
    (`_solve_split`: the routers cannot weight unlike workers, `ROUTER_SPLIT`). TTFT = the prefill worker's TTFT + the KV
    transfer (+ at --request-rate the wait for a free decode slot, `decode_wait_s`);
    TPOT = the decode worker's. --request-latency-ms is checked on the chosen mix (TTFT + (O - 1) x TPOT).
    The plans are whole mixes, best first: the program's choice, then the best mix of each other decode
    shape (up to --top), so every row reads as the deployment line does."""
    found, rejected, sides = worker_candidates(spec, hw, req, coefficients)
    if not sides["prefill"] or not sides["decode"]:
        raise _no_worker(spec, hw, req, found, "prefill" if not sides["prefill"] else "decode")
    pre, dec = sides["prefill"], sides["decode"]
    result = _solve_split(req, pre, dec)
    if not result.decode:
        raise _no_mix(hw, req, pre, dec)
    rows, plan = _mix_plan(spec, req, pre, _lightest(spec, hw, req, coefficients, pre, dec, result), result)
    if req.request_latency_ms is not None and plan["request_latency_ms"] > req.request_latency_ms:
        latency = plan["request_latency_ms"]
        raise InfeasibleError(f"SLO binds: the best disaggregated mix has request latency {latency:.0f} ms > "
                              f"{req.request_latency_ms:g} ms; --request-latency-ms {latency + 0.5:.0f} would work",
                              details={"binding": "slo"})
    plans = [plan]
    for inst in dict.fromkeys(ev["inst"] for ev, _ in dec):
        if len(plans) >= req.top or inst in {dec[i][0]["inst"] for i in result.decode}:
            continue
        only = [(ev, p) for ev, p in dec if ev["inst"] == inst]
        other = _solve_split(req, pre, only)
        if other.decode:
            alt = _mix_plan(spec, req, pre, _lightest(spec, hw, req, coefficients, pre, only, other), other)[1]
            if req.request_latency_ms is None or alt["request_latency_ms"] <= req.request_latency_ms:
                plans.append(alt)
    key = (lambda p: p["gpus"]) if req.request_rate is not None else (lambda p: -p["tokens_per_s"])
    plans = [plan] + sorted(plans[1:], key=key)
    gpus, tokens = plan["gpus"], plan["tokens_per_s"]
    return {
        "solver": {"status": result.status,
                   "objective": "min_gpus" if req.request_rate is not None else "max_tokens_per_s",
                   "objective_value": round(gpus if req.request_rate is not None else tokens, 1),
                   "wall_s": round(time.perf_counter() - start, 3),
                   "candidates_evaluated": len(pre) + len(dec), "shapes": len(found), "shapes_rejected": rejected},
        "deployment": {"gpus": gpus, "tokens_per_s": round(tokens, 1), "tokens_per_s_per_gpu": plan["tokens_per_s_per_gpu"],
                       "requests_per_s": plan["requests_per_s"],
                       **{k: plan[k] for k in ("capacity_requests_per_s", "utilisation") if k in plan}, "workers": rows},
        "plans": plans[:req.top], "pareto": [],
        "notes": _notes(hw, req) + _extrapolation_note(spec, hw, req, load_calibration(), []) + [
            "disaggregated: prefill workers run prompts only, decode workers generate only; TTFT includes the "
            "KV transfer; constants are the aggregated fit's with the prefill-interference term removed; "
            f"{ROUTER_SPLIT}, so a mix has one prefill kind and one decode kind"]
        + _no_slo_split_note(req, plan, rows) + _exchange_note(spec, req, rows) + _wide_note(hw, req, rows)
        + _decode_load_note(rows)
        + _aggregated_note(spec, hw, req, coefficients, plan),
    }


def _no_slo_split_note(req: ServeRequest, plan: dict, rows: list[dict]) -> list[str]:
    """At --request-rate without a latency SLO (`_no_slo_note`'s case, disaggregated): the mix is the fewest GPUs
    whose prefill and decode sides are below their capacity, at any latency, so the prefill workers may run near it,
    where a prompt's mean M/D/1 wait is U / (2 (1 - U)) of its service S (Pollaczek-Khinchine: W = U S / (2 (1 - U)),
    Kleinrock 1975 eq. 5.76 with deterministic service), growing without bound as U -> 1 (senior review 12 #3: 70B
    at 3 requests/s, prefill at 99.2%, a mean TTFT of 43.8 s). Says the TTFT that costs and how to bound it;
    [] with an SLO or without a rate."""
    prefill = [r for r in rows if r["role"] == "prefill" and "utilisation" in r]
    if (req.ttft_ms, req.tpot_ms, req.request_latency_ms) != (None,) * 3 or not prefill:
        return []
    load = max(r["utilisation"] for r in prefill)
    wait = f"{load / (2 * (1 - load)):,.1f}" if load < 1 else "unbounded"
    return [f"no --ttft-ms, --tpot-ms or --request-latency-ms given: the mix uses the fewest GPUs carrying the rate at "
            f"any latency; its prefill workers run at {load:.1%} of their capacity, where a prompt waits on average "
            f"U / (2 (1 - U)) = {wait} prompts' service (M/D/1): TTFT {plan['ttft_ms']:,.0f} ms, TPOT "
            f"{plan['tpot_ms']:g} ms; give --ttft-ms to bound it"]


def _decode_load_note(rows: list[dict]) -> list[str]:
    """At --request-rate (worker rows with a utilisation): the decode workers' share of their capacity and the wait
    for a free decode slot at that load (`decode_wait_s`), which TTFT includes."""
    decode = [r for r in rows if r["role"] == "decode" and "utilisation" in r]
    if not decode:
        return []
    worst = max(decode, key=lambda r: r["utilisation"])
    return [f"decode workers at {worst['utilisation']:.1%} of their capacity at this rate: a request waits "
            f"{worst['queue_wait_ms']:,.1f} ms for a free decode slot (M/D/c over each worker's running-request cap "
            f"{worst['concurrency']}), included in TTFT after the prefill worker's own queue"]


def _lightest(spec, hw, req: ServeRequest, coefficients: dict, pre: list, dec: list, split: Split) -> list:
    """`dec` with the chosen decode point replaced by the concurrency its workers run at: the router gives each of
    the n_d alike workers 1 / n_d of the requests the mix serves (min of the prefill side's rate and the decode
    side's; at --request-rate, the rate), and a worker fed fewer requests/s than its point carries runs a smaller
    batch (Little's law: b = requests/s x O x TPOT(b)). Found by bisection over the multiples of the attention-DP
    degree up to the chosen point's: a concurrency whose requests/s, b / (O x TPOT(b)), carries the share -- the
    least such where that rate grows with b, as it does while TPOT grows less than in proportion to b (a decode
    step's weight read is paid once per step); the point returned always carries the share and meets --tpot-ms
    (the search's points are the grid and `refine`'s, so the chosen one may carry more than the mix feeds it).
    At --request-rate `dec` unchanged: the decode point is the running-request cap whose slot wait `_rate_split`
    priced, and its TPOT (at the cap) bounds the TPOT at the load the worker runs."""
    if req.request_rate is not None:  # the cap `_rate_split` chose: a smaller one has a longer slot wait
        return dec
    (i, n_p), = split.prefill.items()
    (j, n_d), = split.decode.items()
    ev, point = dec[j]
    fed = n_p * pre[i][1]["usable_per_s"]
    share = min(fed, n_d * point["requests_per_s"], req.request_rate or fed) / n_d
    inst, step = ev["inst"], ev["inst"].adp

    def at(b: int) -> dict | None:
        found = _decode_points(spec, hw, replace(req, concurrency=b), inst, ev["max_concurrency"], coefficients)
        return found[0] if found and found[0]["requests_per_s"] >= share * (1 - 1e-9) else None

    lo, hi, best = 1, point["concurrency"] // step, point
    while lo < hi:
        mid = (lo + hi) // 2
        found = at(mid * step)
        if found is None:
            lo = mid + 1
        else:
            hi, best = mid, found
    return [*dec[:j], (ev, best), *dec[j + 1:]]


@dataclass(frozen=True)
class Split:
    """One rate-matched mix: `prefill` and `decode` map a candidate's index to its worker count (one kind each)."""

    prefill: dict[int, int]
    decode: dict[int, int]
    status: str


ROUTER_SPLIT = ("every prefill worker alike and every decode worker alike: the routers split requests over the "
                "workers of a role evenly, with no per-worker weight")
"""Why a disaggregated mix has one prefill kind and one decode kind, and an aggregated deployment one replica
kind (`_best_mix`; the same routers in their regular mode, ROUTER_FLAG["workers"] of `planner.frameworks.vllm` /
`sglang`, or any round-robin balancer). Source: vllm-router 0.1.17
(`vllm_router-0.1.17-cp38-abi3-manylinux_2_28_x86_64.whl`, sha256 85c96bea...; it records no commit)
`vllm_router/router_args.py`: each prefill and decode worker is named by its URL alone (the router flags of
`planner.frameworks.vllm.ROUTER_FLAG`), and the load-balancing policies (default cache_aware; random,
round_robin, kv_aware, power_of_two, consistent_hash, sticky_least_loaded) pick a worker per request, by count,
cache or load, none by a capacity the operator gives; sglang-router 0.3.2
(`sglang_router-0.3.2-cp38-abi3-manylinux_2_17_x86_64...whl`, sha256 ba5a2495...) `sglang_router/router_args.py`:
the same URL-only worker flags (`planner.frameworks.sglang.ROUTER_FLAG`), policies random, round_robin,
cache_aware, power_of_two, manual. Two decode workers planned at 1.5 and 3.6 requests/s would each get half. The
load-aware policies (power_of_two, least-loaded) even out the requests in flight per worker, which is not a
replica's planned batch either: a tp2 server planned at 17 in flight beside tp4 servers planned at 38 would be held
near the same count as they are, above the 17 its SLOs were planned at."""


def _solve_split(req: ServeRequest, pre: list, dec: list) -> Split:
    """The best mix of n_p alike prefill workers of one candidate and n_d alike decode workers of one
    (`ROUTER_SPLIT`), by enumeration over every pair of candidates (exact: `_pair_counts` is): at --request-rate
    the fewest GPUs carrying it with both queues' waits priced (`_rate_split`), else the most requests/s served,
    min(n_p x r_p, n_d x r_d), on --gpus; ties go to fewer GPUs, then the lower decode TPOT (the decode workers at
    the lighter load). status OPTIMAL when a mix exists (the enumeration is exhaustive), else INFEASIBLE."""
    if req.request_rate is not None:
        return _rate_split(req, pre, dec)
    best, found = None, Split({}, {}, "INFEASIBLE")
    for i, (pre_ev, p) in enumerate(pre):
        for j, (dec_ev, d) in enumerate(dec):
            counts = _pair_counts(req, pre_ev["inst"].gpus, p["usable_per_s"], dec_ev["inst"].gpus,
                                  d["requests_per_s"])
            if counts is None:
                continue
            n_p, n_d = counts
            gpus = n_p * pre_ev["inst"].gpus + n_d * dec_ev["inst"].gpus
            served = round(min(n_p * p["usable_per_s"], n_d * d["requests_per_s"]) * 1e3)
            key = (-served, gpus, d["tpot_s"])
            if best is None or key < best:
                best, found = key, Split({i: n_p}, {j: n_d}, "OPTIMAL")
    return found


def decode_wait_s(rate_per_s: float, workers: int, inst: sv.Instance, point: dict) -> float:
    """Mean wait of a request for a free running slot of a decode worker, seconds: one of `workers` alike workers
    of `inst` capped at point["concurrency"] running requests (the emitted running-request cap), fed an even share
    of an open stream of `rate_per_s` requests/s by the router (`ROUTER_SPLIT`), each attention-DP group a queue
    of its own (point["concurrency"] / adp slots at rate / (workers x adp), as a prefill worker's groups,
    `cost.serving.prefill_worker_wait_s`), a request holding its slot for its output_len decode steps,
    point["latency_s"] = O x TPOT at the cap (every slot busy whenever a request waits): the M/D/c queue of
    `cost.serving.open_queue_wait_s`, the one model serve-plan uses for requests queueing for a server. Infinite
    at or above the worker's capacity. Source: Allen (1990) sec. 6.3, Allen-Cunneen (via open_queue_wait_s);
    fresh-user review 11 / servefit: the decode workers of a mix at 98.6% of their capacity had this wait
    (~8.3 s) left out of TTFT."""
    groups = inst.adp
    return sv.open_queue_wait_s(rate_per_s / (workers * groups), point["concurrency"] // groups,
                                point["latency_s"])


def _rate_split(req: ServeRequest, pre: list, dec: list) -> Split:
    """At --request-rate R: the mix of n_p alike prefill workers (candidate i) and n_d alike decode workers
    (candidate j: one shape at one running-request cap c) on the fewest GPUs, n_p g_p + n_d g_d <= --gpus, whose TTFT
    -- the prefill worker's unloaded TTFT + its queue's wait at R / n_p (`_queued_ttft_s`) + the wait for a free
    decode slot at R / n_d (`decode_wait_s`) -- is within --ttft-ms (without it: both waits finite, each side below
    its capacity); ties: the lower request latency TTFT + (O - 1) TPOT (TPOT at the decode cap: a smaller cap lowers
    it but lengthens the slot wait), then the lower TPOT, then the earlier candidates. The prefill and
    decode counts are chosen together: more prefill workers leave more of --ttft-ms to the decode queue, so fewer
    or smaller decode workers may carry the rate. Exact by enumeration: every i, every n_p from the least below
    capacity up to what --gpus holds, and for every j the least n_d whose wait fits what the prefill queue leaves
    (each wait is nonincreasing in its worker count -- the rate per worker falls, and for a fixed c and service the
    Allen-Cunneen wait, C(c, a) S / (2 (c - a)), grows with the offered load a: Erlang C is increasing in a,
    Kleinrock 1975 eq. 3.40, and so is 1 / (c - a) -- and more workers cost more GPUs, so the least n_d meeting
    the budget is the best n_d for that (i, n_p, j); the n_p and n_d loops stop once their own GPUs reach the best
    mix's). tests/test_serve_disagg_rate.py compares it with
    brute force over every (i, n_p, j, n_d)."""
    rate, gpus = req.request_rate, req.gpus
    budget = math.inf if req.ttft_ms is None else req.ttft_ms / 1e3
    waits: dict = {}

    def decode_wait(j: int, n_d: int) -> float:
        if (j, n_d) not in waits:
            ev, d = dec[j]
            waits[j, n_d] = decode_wait_s(rate, n_d, ev["inst"], d)
        return waits[j, n_d]

    best, found = None, Split({}, {}, "INFEASIBLE")
    for i, (pre_ev, p) in enumerate(pre):
        g_p = pre_ev["inst"].gpus
        for n_p in range(max(1, math.floor(rate / p["requests_per_s"]) + 1), gpus // g_p + 1):
            if best is not None and n_p * g_p >= best[0]:
                break  # more prefill workers only cost more
            ttft = _queued_ttft_s(req, (pre_ev, p), n_p, None)
            if ttft > budget:
                continue
            for j, (dec_ev, d) in enumerate(dec):
                g_d = dec_ev["inst"].gpus
                for n_d in range(max(1, math.floor(rate / d["requests_per_s"]) + 1), (gpus - n_p * g_p) // g_d + 1):
                    if best is not None and n_p * g_p + n_d * g_d > best[0]:
                        break  # more decode workers only cost more
                    total = ttft + decode_wait(j, n_d)
                    if total <= budget:
                        key = (n_p * g_p + n_d * g_d, total + (req.output_len - 1) * d["tpot_s"], d["tpot_s"])
                        if best is None or key < best:
                            best, found = key, Split({i: n_p}, {j: n_d}, "OPTIMAL")
                        break
    return found


def _pair_counts(req: ServeRequest, g_p: int, r_p: float, g_d: int, r_d: float) -> tuple[int, int] | None:
    """(prefill workers, decode workers) of one prefill kind (g_p GPUs, r_p requests/s each) and one decode kind
    without --request-rate (at a rate: `_rate_split`): the counts maximising min(n_p r_p, n_d r_d) with n_p g_p + n_d g_d <= --gpus, n_p, n_d >= 1, None when one of each does
    not fit. For n_d decode workers the most prefill workers that fit is a(n_d) = (G - n_d g_d) // g_p,
    nonincreasing in n_d, while n_d r_d grows: the served rate rises up to the last n_d with n_d r_d <= a(n_d) r_p
    (found by bisection) and falls after the next, so one of the two is best; the prefill count is then the
    fewest that still feeds min(n_d r_d, a(n_d) r_p). Source: hand derivation above."""
    budget = req.gpus
    top = (budget - g_p) // g_d
    if top < 1:
        return None
    room = lambda n_d: (budget - n_d * g_d) // g_p  # noqa: E731
    lo, hi = 1, top
    if r_d <= room(1) * r_p:  # the last n_d whose decode side is not above what the prefill side can feed
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if mid * r_d <= room(mid) * r_p else (lo, mid - 1)
    else:
        lo = 0
    best = None
    for n_d in {max(lo, 1), min(lo + 1, top)}:
        served = min(n_d * r_d, room(n_d) * r_p)
        n_p = min(room(n_d), math.ceil(served / r_p - 1e-9))
        key = (-round(served * 1e3), n_p * g_p + n_d * g_d)
        if best is None or key < best[0]:
            best = (key, (n_p, n_d))
    return best[1]


def _queued_ttft_s(req: ServeRequest, candidate: tuple, workers: int, decode_row: dict) -> float:
    """TTFT of a prefill worker of `candidate` (ev, point), one of `workers` alike ones fed by the router,
    seconds: its prompt's service + KV transfer (point ttft_s) + the wait in its queue (fresh-user review 11,
    finding 1: 2 workers at 99.5% of their capacity reported the unloaded 1,905 ms).
    At --request-rate the requests arrive as an open stream at that rate: the M/D/1 wait
    (`cost.serving.prefill_worker_wait_s`) at --request-rate / workers. Without it the mix's load is its decode workers'
    batches, a closed loop of n_d x b requests, each away O x TPOT decoding between prompts: the prompts queue at
    the worker's attention-DP groups as at the aggregated prefill station, Schweitzer's MVA with the deterministic
    residual (`cost.serving.prefill_residence_s` residual 1/2, as `prefill_queue_wait_s`), which stays finite
    where the prefill side binds (an open stream at the prefill side's whole capacity has no steady state).
    Why the closed-loop TTFT stays within --ttft-ms although the workers were sized with the M/D/1 limit
    (`prefill_worker_max_load` U_max: the M/D/1 wait at U_max is the budget --ttft-ms - the unloaded TTFT): the
    residual-1/2 MVA's fixed point, R - S = S (C - 1) / C x X (R - S / 2) with X = C / (R + Z) (the arrival's queue
    and in-service residual, (C - 1) / C of their time averages), is W = a (W + S / 2), i.e. W = a S / (2 (1 - a)):
    the M/D/1 wait at the discounted utilisation a = (C - 1) / C x X S, below the group's utilisation X S. X < C / Z,
    the decode side's requests/s per prefill group, so whenever the decode workers carry at most what the prefill
    side was sized to feed (n_p x usable_per_s, U_max per group), a < U_max and the wait is below the budget; the
    decode batch `_lightest` picks is the least that carries the mix's share, whose requests/s may overshoot it by one
    attention-DP step of the batch, where (C - 1) / C and R in X's denominator are the only margin -- not proven
    there; tests/test_serve_open_loop.py checks the identity by hand and the reported TTFT of every plan of several
    disaggregated requests against --ttft-ms (servefit, 2026-12-02: 58 plans of 12 requests within it).
    Source: Pollaczek-Khinchine (M/D/1) and Schweitzer (1979) / Reiser (1979), as those functions cite."""
    ev, point = candidate
    service = point["service_s"]
    if req.request_rate is not None:
        wait = sv.prefill_worker_wait_s(req.request_rate / workers, point["requests_per_s"], service)
    else:
        clients = decode_row["workers"] * decode_row["concurrency"] / (workers * ev["inst"].adp)
        think = req.output_len * decode_row["tpot_ms"] / 1e3
        wait = sv.prefill_residence_s(clients, service, think, residual=0.5) - service
    return point["ttft_s"] + wait


def mix_ttft_s(spec: ModelSpec, hw: ClusterSpec, req: ServeRequest, coefficients: dict, prefill: tuple,
               decode: tuple) -> float | None:
    """TTFT of a disaggregated mix as `_mix_plan` reports it, seconds: `prefill` = (instance, workers), `decode` =
    (instance, workers, running-request cap); the prefill worker's point (`_worker_points`, its unloaded TTFT + KV
    transfer) + its queue's wait (`_queued_ttft_s`) + at --request-rate the wait for a free decode slot
    (`decode_wait_s`). The points are taken without the SLOs (so a plan beyond them is priced, not dropped).
    None where a worker has no point (its KV pool holds no sequence of its context). `planner check` prices a
    disaggregated plan file with it (fresh-user review 13, finding 5)."""
    free = replace(req, ttft_ms=None, tpot_ms=None, request_latency_ms=None)
    (p_inst, n_p), (d_inst, n_d, b) = prefill, decode
    ev, pre = _worker_points(spec, hw, free, p_inst, coefficients, "prefill")
    dec = _worker_points(spec, hw, replace(free, concurrency=b), d_inst, coefficients, "decode")[1]
    if not pre or not dec:
        return None
    row = {"workers": n_d, "concurrency": b, "tpot_ms": round(dec[0]["tpot_s"] * 1e3, 2)}
    ttft = _queued_ttft_s(req, (ev, pre[0]), n_p, row)
    return ttft + (decode_wait_s(req.request_rate, n_d, d_inst, dec[0]) if req.request_rate is not None else 0.0)


def _mix_plan(spec: ModelSpec, req: ServeRequest, pre: list, dec: list, result) -> tuple[list[dict], dict]:
    """(worker rows, the plan record) of one rate-matched mix: parallelism, batch and memory of its slowest
    decode worker (whose TPOT the plan reports, as `planner check` of the plan file recomputes it) with the
    worker counts, its GPUs, the requests/s it serves (at --request-rate that rate, which both sides carry, with each
    worker row's and the mix's utilisation, rate / capacity, the mix's capacity the slower side's -- fresh-user
    review 11: 4.055 requests/s was reported served at --request-rate 4; else the slower side's: the decode side's
    when rate-matched, the prefill side's when decode capacity is spare) and tokens/s (that x output_len), TTFT / TPOT the worst of its workers, the prefill workers' TTFT with their queue's wait at
    the load the mix gives them (`_queued_ttft_s`), at --request-rate plus the wait for a free decode slot
    (`decode_wait_s`, each decode row's and the plan's queue_wait_ms)."""
    rows = [_worker_row(spec, req, *pre[i], "prefill", n) for i, n in sorted(result.prefill.items())] + \
           [_worker_row(spec, req, *dec[i], "decode", n) for i, n in sorted(result.decode.items())]
    gpus = sum(r["gpus"] for r in rows)
    fed = sum(r["requests_per_s"] for r in rows if r["role"] == "prefill")
    carried = sum(r["requests_per_s"] for r in rows if r["role"] == "decode")
    capacity = min(fed, carried)  # requests/s the mix can serve: the slower side's
    served = capacity if req.request_rate is None else req.request_rate  # at a rate: that rate (both sides carry it)
    for row in rows if req.request_rate is not None else ():
        row["utilisation"] = round(served / row["requests_per_s"], 4)
    decode_row = max((r for r in rows if r["role"] == "decode"), key=lambda r: r["tpot_ms"])
    for (i, n), row in zip(sorted(result.prefill.items()), rows):
        row["ttft_ms"] = round(_queued_ttft_s(req, pre[i], n, decode_row) * 1e3, 1)
    wait = 0.0
    if req.request_rate is not None:
        for (j, n), row in zip(sorted(result.decode.items()), rows[len(result.prefill):]):
            row["queue_wait_ms"] = round(decode_wait_s(req.request_rate, n, dec[j][0]["inst"], dec[j][1]) * 1e3, 1)
            wait = max(wait, row["queue_wait_ms"])
    tokens = served * req.output_len
    ttft = round(max(r["ttft_ms"] for r in rows if r["role"] == "prefill") + wait, 1)
    tpot = max(r["tpot_ms"] for r in rows if r["role"] == "decode")
    latency = ttft + (req.output_len - 1) * tpot
    decode_rows = [r for r in rows if r["role"] == "decode"]
    top = max(decode_rows, key=lambda r: r["tpot_ms"])  # the plan's shape and batch: the worker whose TPOT it reports
    plan = {"parallelism": {**top["parallelism"], "replicas": sum(r["workers"] for r in decode_rows),
                            "prefill_workers": sum(r["workers"] for r in rows if r["role"] == "prefill"),
                            "decode_workers": sum(r["workers"] for r in decode_rows)},
            "prefill_parallelism": next(r["parallelism"] for r in rows if r["role"] == "prefill"),
            "gpus": gpus, "concurrency": top["concurrency"], "memory_bytes": top["memory_bytes"],
            "kv_tokens": top["kv_tokens"], "max_concurrency": top["max_concurrency"],
            "longest_context": top["longest_context"], "longest_context_bound": top["longest_context_bound"],
            "ttft_ms": ttft, "tpot_ms": tpot,
            "request_latency_ms": round(latency, 1), "tokens_per_s": round(tokens, 1),
            "tokens_per_s_per_gpu": round(tokens / gpus, 1), "tokens_per_s_per_user": round(1e3 / tpot, 1),
            "requests_per_s": round(served, 3),
            **({"capacity_requests_per_s": round(capacity, 3), "utilisation": round(served / capacity, 4),
                "queue_wait_ms": wait} if req.request_rate is not None else {}),
            "workers": [{k: r[k] for k in ("role", "parallelism", "workers", "concurrency")} for r in rows]}
    return rows, plan
