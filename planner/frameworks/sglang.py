"""SGLang's launch flags: the names `planner check` reads from a `python -m sglang.launch_server`
command line and `planner serve-plan --emit sglang` writes, with the defaults the check assumes.

Source: SGLang 0.5.23, the PyPI wheel `sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl` (built
2026-10-30; sha256 00b3cd5b265ac76c...). ENGINE COMMIT: NOT RECORDED. The wheel's `sglang/_version.py` says `__commit_id__ = None`,
PyPI has no 0.5.23 sdist, the git snapshot of sgl-project/sglang (1.2 GB) is over what `fetch` brings,
and the stored file versions of the repository predate this release (their
`arg_groups/fields/parallel.py`, e.g. @00ac7105, has no `--attn-dp-size` flag, which 0.5.23 defines),
so the release could not be tied to a commit; every citation below is of files of that wheel.
Files read: `srt/server_args.py` ServerArgs.add_cli_args and the dataclass fields it turns into
flags (`srt/arg_groups/fields/parallel.py`: --tp-size is the WORLD of one replica across all its
nodes, --attn-dp-size splits it into attention data-parallel groups, --dp-size counts replicas;
`srt/arg_groups/parallel_hook.py`: the deprecated `--dp-size N --enable-dp-attention` is read as
`--attn-dp-size N`, --attn-dp-size must divide --tp-size, --dp-size with --attn-dp-size is
refused; `srt/runtime_context.py` launch_world_size_of = tp_size x pp_size;
`srt/arg_groups/overrides.py` _a2a_ep_size: an all-to-all backend among
`A2A_SPANNING` sets ep_size to tp_size whatever --ep-size says). Every flag of that parser is
recorded in `sglang_flags.txt` (tools/record_engine_flags.py). The router of a disaggregated deployment
(ROUTER_*) is the separate PyPI package sglang-router, `sglang_router-0.3.2-cp38-abi3-manylinux_2_17_x86_64
.manylinux2014_x86_64.whl` (sha256 ba5a2495...; it records no commit): `sglang_router/router_args.py`,
`launch_router.py`, its flags in `sglang_router_flags.txt`.
"""

from __future__ import annotations

from pathlib import Path

from planner.frameworks.flag_files import Removed, recorded_flags

ENGINE = "sglang"
VERSION = "SGLang 0.5.23"
FLAGS_FILE = Path(__file__).with_name("sglang_flags.txt")
ALL_FLAGS = recorded_flags(FLAGS_FILE.name)
"""Every option string of SGLang's launch parser."""

LAUNCHERS = (("sglang.launch_server",), ("sglang", "serve"))
"""How a command line starts SGLang: `python -m sglang.launch_server`, or the `sglang serve` CLI. SGLang's
container image `lmsysorg/sglang` sets no serving entrypoint: its documented launch names the launcher after
the image, `docker run --gpus all ... lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path ...`
(sgl-project/sglang@010db98c `docs/get_started/install.md`, 'Method 3: Using docker'), which these launchers
find."""
FLAG = {
    "model": "--model-path",
    "tp": "--tp-size",
    "pp": "--pp-size",
    "dp": "--dp-size",
    "adp": "--attn-dp-size",
    "dp_attention": "--enable-dp-attention",
    "ep": "--ep-size",
    "a2a": "--moe-a2a-backend",
    "deepep_mode": "--deepep-mode",
    "redundant_experts": "--ep-num-redundant-experts",
    "tbo": "--enable-two-batch-overlap",
    "dense_tp": "--moe-dense-tp-size",
    "dp_lm_head": "--enable-dp-lm-head",
    "fraction": "--mem-fraction-static",
    "max_model_len": "--context-length",
    "max_num_seqs": "--max-running-requests",
    "max_num_batched_tokens": "--chunked-prefill-size",
    "max_prefill_tokens": "--max-prefill-tokens",
    "kv_tokens_cap": "--max-total-tokens",
    "kv_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "dtype": "--dtype",
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "dist_init": "--dist-init-addr",
    "port": "--port",
    "disagg_mode": "--disaggregation-mode",
    "disagg_backend": "--disaggregation-transfer-backend",
    "bootstrap_port": "--disaggregation-bootstrap-port",
    "host": "--host",
}
"""Planner knob -> SGLang's flag."""
_DEPRECATED = ("sgl-project/sglang@d5fd0ab2 docs/references/deprecated_items.md, 'MoE Runner Backend "
               "Arguments'; gone from the 0.5.23 parser")
RENAMED = {
    "--enable-ep-moe": Removed(f"{FLAG['ep']} equal to {FLAG['tp']}", _DEPRECATED),
    "--enable-deepep-moe": Removed(f"{FLAG['a2a']} deepep", _DEPRECATED),
    **{f"--enable-{name.replace('_', '-')}-moe": Removed(f"--moe-runner-backend {name}", _DEPRECATED)
       for name in ("flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm", "triton_kernel",
                    "flashinfer_mxfp4")},
}
"""Flags SGLang removed -> what replaces them (`Removed`), from SGLang's own deprecation list; none of
them is in `sglang_flags.txt` (0.5.23). The unknown-flag check gives this replacement before any
closest-name guess: --enable-ep-moe is nearest to --enable-eplb, the expert load balancer, an unrelated
feature (fresh-user review 10 finding 11)."""
ALIASES = {"--tensor-parallel-size": FLAG["tp"], "--pipeline-parallel-size": FLAG["pp"],
           "--data-parallel-size": FLAG["dp"], "--attention-data-parallel-size": FLAG["adp"],
           "--expert-parallel-size": FLAG["ep"], "--ep": FLAG["ep"], "--model": FLAG["model"]}
"""Other option strings of the same options."""
SWITCHES = frozenset({FLAG["dp_attention"], FLAG["tbo"], "--trust-remote-code", "--enable-torch-compile",
                      "--disable-radix-cache", FLAG["dp_lm_head"], "--skip-server-warmup",
                      "--disable-cuda-graph", "--enable-metrics"})
"""Flags that take no value."""
A2A_SPANNING = frozenset({"megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep",
                          "flashinfer", "flashinfer_megamoe", "mori", "pplx"})
"""--moe-a2a-backend values that set ep_size = tp_size (`overrides.py` _A2A_EP_SPANNING_BACKENDS)."""
A2A_NONE = "none"
"""--moe-a2a-backend default: no all-to-all dispatch. --ep-size still splits the experts (it is
not reset to 1): `srt/runtime_context.py` parallel_widths_of takes moe_ep_size = ep_size;
`srt/layers/moe/fused_moe_triton/layer.py` FusedMoE holds num_experts / moe_ep_size routed experts
per rank (asserting that they divide) and, for a2a `none`, `create_moe_dispatcher` builds the
StandardDispatcher (`srt/layers/moe/token_dispatcher/standard.py`), which maps the global top-k
ids to this rank's local experts and masks the others; every rank already holds all tokens (the
attention output is replicated over the tp group), runs them through its own experts, and the
layer's output is summed by `tensor_model_parallel_all_reduce` over the tp group (FusedMoE.forward:
reduce_results when moe_tp_size > 1 or moe_ep_size > 1). So EP runs, with an all-reduce of the
whole hidden state instead of an all-to-all of the routed tokens (SGLang 0.5.23 wheel)."""
A2A_DEFAULT_EMIT = "deepep"
"""The all-to-all backend `serve-plan --emit sglang` writes for an expert-parallel plan."""
A2A_DEEPEP = "deepep"
"""The --moe-a2a-backend value that runs DeepEP's legacy kernels (`frameworks.deepep`; deepep_v2 runs EPv2's
ElasticBuffer, JIT-compiled, without their node-count list): SGLang 0.5.23 wheel
srt/layers/moe/token_dispatcher/deepep.py (deep_ep.Buffer) and deepep_v2.py (deep_ep.ElasticBuffer)."""
DEEPEP_MODE_DEFAULT = "auto"
"""--deepep-mode default. auto runs the normal kernels for a batch with prefill (extend) and the low-latency ones
for a decode batch; normal / low_latency always the one (SGLang 0.5.23 wheel srt/layers/moe/utils.py
DeepEPMode.resolve)."""

KV_DTYPES = {"auto": None, "bf16": "bf16", "bfloat16": "bf16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
"""--kv-cache-dtype values the planner models -> its KV dtype (auto: the model's dtype)."""
QUANTIZATION = {"fp8": "fp8", "w8a8_fp8": "fp8", "mxfp4": "mxfp4", "awq": "int4", "awq_marlin": "int4",
                "gptq": "int4", "gptq_marlin": "int4", "w8a8_int8": "int8", "modelopt_fp4": "nvfp4"}
"""--quantization values the planner models -> its weight format."""
WEIGHT_FLAGS = {"fp8": "fp8", "fp8-block": "fp8", "mxfp4": "mxfp4", "int4": "awq", "int8": "w8a8_int8",
                "nvfp4": "modelopt_fp4"}
"""Planner weight format -> the --quantization value `serve-plan --emit sglang` writes."""
DISAGG_MODES = ("prefill", "decode")
DISAGG_BACKEND = "nixl"
"""--disaggregation-transfer-backend `serve-plan --emit sglang` writes (default mooncake needs
its own service; nixl runs over UCX)."""
BOOTSTRAP_PORT = 8998
"""--disaggregation-bootstrap-port when absent: the port of the KV bootstrap server a prefill worker starts
(`srt/arg_groups/fields/disagg.py` disaggregation_bootstrap_port = 8998; `srt/managers/disagg_service.py`
start_disagg_service binds it on --host on a prefill worker). A decode worker takes the prefill's port from
each request, filled by the router, else its own value of the flag (`srt/managers/scheduler.py`: a request
whose bootstrap_port is None gets the server's disaggregation_bootstrap_port). Two prefill workers of one node
need two ports. SGLang 0.5.23 wheel."""
HOST = "127.0.0.1"
"""--host when absent (`srt/arg_groups/fields/serving.py`): the HTTP server and a prefill worker's bootstrap
server listen on the loopback only, out of reach of a router or decode worker on another node; `0.0.0.0`
listens on every interface (`srt/disaggregation/common/conn.py` register_to_bootstrap rewrites the wildcard
to the loopback for its own registration)."""
ANY_HOST = "0.0.0.0"
PORT = 30000
"""--port when absent (`srt/arg_groups/fields/serving.py` port = 30000)."""

ROUTER_FLAGS_FILE = Path(__file__).with_name("sglang_router_flags.txt")
ROUTER_ALL_FLAGS = recorded_flags(ROUTER_FLAGS_FILE.name)
"""Every option string of SGLang's router parser (sglang-router 0.3.2, `tools/record_engine_flags.py`)."""
ROUTER_VERSION = "sglang-router 0.3.2"
ROUTER_LAUNCHERS = (("sglang_router.launch_router",),)
"""How a command line starts SGLang's router: `python -m sglang_router.launch_router` (PyPI package
sglang-router, which sglang 0.5.23 does not install; its own test fixture
`sglang/test/server_fixtures/disaggregation_fixture.py` launch_lb and `srt/mem_cache/storage/mooncake_store/
README.md` start the router of a disaggregated deployment this way)."""
ROUTER_FLAG = {
    "pd": "--pd-disaggregation",
    "prefill": "--prefill",
    "decode": "--decode",
    "host": "--host",
    "port": "--port",
    "workers": "--worker-urls",
}
"""Router knob -> sglang-router 0.3.2's flag (`sglang_router/router_args.py` RouterArgs.add_cli_args:
`--prefill URL [BOOTSTRAP_PORT]` (nargs '+', repeated per prefill worker; the port a number or 'none', absent:
none), `--decode URL` (repeated), `--pd-disaggregation` (store_true), `--host` (default 0.0.0.0), `--port`
(default 30000); in its regular mode the servers' URLs after one `--worker-urls` (nargs '+')."""
ROUTER_SWITCHES = frozenset({ROUTER_FLAG["pd"], "--mini-lb", "--service-discovery", "--enable-igw"})
"""Router flags that take no value (store_true)."""
ROUTER_HOST = "0.0.0.0"
"""--host `serve-plan --emit` gives the router: every interface, so that clients on other hosts reach it."""
ROUTER_PORT = 8000
"""--port `serve-plan --emit sglang` gives the router (the port clients send requests to), out of the workers'
range (`BASE_PORT` of the emitter, 30000 up, the router's own default) and the bootstrap ports (8998 up)."""

NODE_HEAD = "HEAD_ADDR"
"""The shell variable a multi-node launch script names for the address of an instance's node rank 0
(`--dist-init-addr HOST:PORT`), suffixed with the instance's number; the user sets it, the shell
refuses to run a command while it is unset (`${VAR:?message}`)."""
DIST_INIT_BASE_PORT = 20000
"""--dist-init-addr port of the first multi-node instance (the next ones add 100: SGLang derives
up to 6 more ports from it, `server_args.py` PortArgs.init_new)."""


CHUNKED_PREFILL_OFF = -1
"""--chunked-prefill-size that switches chunked prefill off ('Setting this to -1 means disabling chunked
prefill', `srt/arg_groups/fields/schedule.py` l. 52-55; the scheduler takes any value <= 0 as off,
`srt/managers/scheduler.py` init_chunked_prefill l. 1372-1373). Off, a forward admits requests up to
--max-prefill-tokens of input but always the first one whatever its length ('Without chunking, allow the
first request even above the input cap', `srt/managers/schedule_policy.py` l. 1627-1632), so a prompt of
the whole context is one forward (`prefill_tokens`)."""
MAX_PREFILL_TOKENS = 16384
"""--max-prefill-tokens when absent: the input tokens of one prefill batch ('The real bound will be the
maximum of this value and the model's maximum context length', `srt/arg_groups/fields/schedule.py`
l. 71-81)."""


DEEPEP_DECODE_RESERVE_MIB = 2048
"""MiB SGLang reserves for DeepEP's low-latency all-to-all buffers outside a prefill worker when the decode CUDA
graph is on ('DeepEP all-to-all buffers captured in the decode graph are real extra allocations'): SGLang 0.5.23
wheel `srt/arg_groups/memory_hook.py` reserve_for_deepep_a2a_mb."""
DENSE_TP_VALUES = (1,)
"""--moe-dense-tp-size values the planner models besides unset (all tp ranks): 1, the dense MLPs whole on every
rank (`cost.serving.Instance.dense_dp`); SGLang takes None, 1 or tp_size (`srt/arg_groups/validation_hook.py`
'moe_dense_tp_size only supports None, 1, or tp_size currently'). serve-plan writes it together with
FLAG["dp_lm_head"], as LMSYS's 96-H100 DeepSeek launches do (sgl-project/sglang issue #6017; LMSYS,
lmsys.org/blog/2025-05-05-large-scale-ep, "Dense FFNs" and "LM Head"): with the LM head still split over all
ranks SGLang keeps gathering every rank's tokens (`srt/utils/common.py` require_mlp_tp_gather: True unless
moe_dense_tp_size is set, enable_dp_lm_head is on and an all-to-all backend runs)."""


def chunking_off(chunked_prefill_size: int | None) -> bool:
    """Whether --chunked-prefill-size switches chunked prefill off (<= 0, `CHUNKED_PREFILL_OFF`)."""
    return chunked_prefill_size is not None and chunked_prefill_size <= 0


def prefill_tokens(max_prefill_tokens: int, context_length: int) -> int:
    """Input tokens one forward of an instance with chunked prefill off holds at most: the larger of
    --max-prefill-tokens and one whole prompt of the context length (`CHUNKED_PREFILL_OFF`)."""
    return max(max_prefill_tokens, context_length)


def default_mem_fraction_static(gpu_memory_mib: float, *, tp: int, pp: int, chunked_prefill_size: int | None,
                                max_running_requests: int | None, mla: bool, attn_dp: int, role: str | None,
                                a2a: str, max_prefill_tokens: int = MAX_PREFILL_TOKENS) -> float:
    """mem_fraction_static SGLang takes when --mem-fraction-static is not given, for a text-only model on
    a CUDA GPU with the default CUDA-graph settings.

    Source: SGLang 0.5.23 wheel `srt/arg_groups/memory_hook.py` handle_gpu_memory_settings (run by
    `srt/arg_groups/pipeline.py` run_resolution_pipeline before the DP-attention division of the
    chunked-prefill size): with gpu_mem the smallest nvidia-smi memory.total in MiB
    (`srt/utils/common.py` get_nvgpu_memory_capacity),
        reserved_mib = 512 + 1.5 x max(chunked_prefill_size, 2048) + tp x pp / 8 x 1024 + graphs,
        reserved_mib = max(reserved_mib, 10240) when gpu_mem > 60 x 1024,
        reserved_mib += 2048 for moe_a2a_backend deepep outside a prefill worker (reserve_for_deepep_a2a_mb),
        fraction = round((gpu_mem - reserved_mib) / gpu_mem, 3);
    a decode worker uses max(max_running_requests (else the decode graph's max batch) x 1, 2048) tokens
    instead of the chunk, and chunked prefill off (`chunking_off`) max(max_prefill_tokens, 2048) (l. 303-307),
    with no prefill graph captured (its max batch defaults to the chunk size, -1, l. 233-236). graphs (reserve_for_graph_mb): decode graph max batch x 2 outside a prefill
    worker, plus max_bs x attn_dp x 3 (and x 1.5 more when max_bs > 300) under DP attention; outside a
    decode worker the breakable prefill graph (the CUDA default, `model_executor/cuda_graph_config.py`;
    off when pp > 1, `arg_groups/cuda_graph_hook.py` apply_cuda_graph_compatibility): 1536 for an MLA
    model, else 8 per captured size (generate_prefill_cuda_graph_batch_sizes up to the chunk), plus 1024
    with deepep. The decode graph's max batch by GPU memory: < 20 GiB 8; < 35 GiB 48 (160 at tp >= 4);
    < 60 GiB 32 (160); < 160 GiB 256 (512); else 512; capped by --max-running-requests. Default chunk:
    < 20 GiB 2048; < 60 GiB 4096; < 160 GiB 8192; else 16384. With deepep the prefill sizes are those up
    to 2048 rounded up to multiples of 8 (apply_deepep_adjustments). Not modelled: VLM adjustment
    (adjust_mem_fraction_for_vlm), SGLANG_ENABLE_POST_CAPTURE_KV_SIZING (off by default), non-CUDA devices.

    Example (hand arithmetic): H200, nvidia-smi 143771 MiB, Llama tp 8, pp 1, chunk 8192: decode max_bs
    512, 58 prefill sizes up to 8192 -> graphs 1024 + 464; reserved 512 + 12288 + 1024 + 1488 = 15312;
    (143771 - 15312) / 143771 = 0.8935 -> 0.893.
    """
    terms = default_reserve_mib(gpu_memory_mib, tp=tp, pp=pp, chunked_prefill_size=chunked_prefill_size,
                                max_running_requests=max_running_requests, mla=mla, attn_dp=attn_dp, role=role,
                                a2a=a2a, max_prefill_tokens=max_prefill_tokens)
    return round((gpu_memory_mib - sum(terms.values())) / gpu_memory_mib, 3)


DEFAULT_RESERVE_WHY = ("SGLang's own default reserves decode-graph memory per DP rank of the whole instance and 1.5 MiB "
                       "per token of the undivided chunk")
"""Why SGLang's default mem_fraction_static is small (or negative) for an instance with attention DP over many
ranks (`default_reserve_mib`), as serve-plan's note and check's memory message say it."""


def default_reserve_mib(gpu_memory_mib: float, *, tp: int, pp: int, chunked_prefill_size: int | None,
                        max_running_requests: int | None, mla: bool, attn_dp: int, role: str | None,
                        a2a: str, max_prefill_tokens: int = MAX_PREFILL_TOKENS) -> dict[str, float]:
    """The terms (MiB per GPU) SGLang's default keeps out of mem_fraction_static, by name: "base" (512), "chunk"
    (1.5 per token), "tp x pp" (1024 per 8 ranks), "decode graphs" (max_bs x 2, plus max_bs x attn_dp x 3 (x 1.5
    more above 300) under DP attention), "prefill graphs", "floor" (what lifts the first five to the 10 GiB
    floor), "deepep" (2048 outside a prefill worker). Their sum is reserved_mib of `default_mem_fraction_static`
    (its Source and arguments)."""
    chunk, max_bs = gpu_defaults(gpu_memory_mib, tp)
    chunk = chunked_prefill_size or chunk
    off = chunking_off(chunk)
    if max_running_requests is not None:
        max_bs = min(max_bs, max_running_requests)
    deepep = a2a == "deepep"
    if role == "decode":
        tokens = max(max_running_requests or max_bs or 1, 2048)
    else:
        tokens = max(max_prefill_tokens if off else chunk, 2048)
    decode = prefill = 0.0
    if role != "prefill":
        decode += max_bs * 2
        if attn_dp > 1:
            decode += max_bs * attn_dp * 3 + (max_bs * attn_dp * 1.5 if max_bs > 300 else 0)
    if role != "decode" and pp == 1:
        if mla:
            prefill += 1536
        else:
            sizes = prefill_graph_sizes(2048 if deepep else chunk)  # none when off (chunk <= 0)
            prefill += 8 * len({-(-b // 8) * 8 for b in sizes} if deepep else sizes)
        prefill += 1024 if deepep else 0
    terms = {"base": 512.0, "chunk": tokens * 1.5, "tp x pp": tp * pp / 8 * 1024, "decode graphs": decode,
             "prefill graphs": prefill}
    terms["floor"] = max(0.0, min_reserved_mib(gpu_memory_mib) - sum(terms.values()))
    terms["deepep"] = DEEPEP_DECODE_RESERVE_MIB if deepep and role != "prefill" else 0.0
    return terms


def min_reserved_mib(gpu_memory_mib: float) -> float:
    """The least memory SGLang keeps out of mem_fraction_static on a GPU of `gpu_memory_mib` MiB: 10 GiB above
    60 GiB of memory, else none (SGLang 0.5.23 wheel `srt/arg_groups/memory_hook.py` handle_gpu_memory_settings,
    `default_mem_fraction_static`)."""
    return 10 * 1024 if gpu_memory_mib > 60 * 1024 else 0


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """Token counts SGLang captures prefill CUDA graphs at, up to `max_bs` (4..32 by 4, 48..256 by 16,
    288..512 by 32, 576..1024 by 64, 1280..4096 by 256, 4608.. by 512). Source: SGLang 0.5.23 wheel
    `srt/arg_groups/cuda_graph_hook.py` generate_prefill_cuda_graph_batch_sizes."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256), (4608, max_bs, 512))
    return [s for lo, hi, step in steps for s in range(lo, hi + 1, step) if s <= max_bs]


def gpu_defaults(gpu_memory_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max batch) SGLang takes when unset, by the GPU's
    nvidia-smi memory (MiB) and --tp-size. Source: SGLang 0.5.23 wheel `srt/arg_groups/memory_hook.py`
    handle_gpu_memory_settings (< 20 GiB: 2048, 8; < 35 GiB: 4096, 48 (160 at tp >= 4); < 60 GiB:
    4096, 32 (160); < 160 GiB: 8192, 256 (512); else 16384, 512)."""
    gib = 1024
    if gpu_memory_mib < 20 * gib:
        return 2048, 8
    if gpu_memory_mib < 35 * gib:
        return 4096, 48 if tp < 4 else 160
    if gpu_memory_mib < 60 * gib:
        return 4096, 32 if tp < 4 else 160
    if gpu_memory_mib < 160 * gib:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def plan_mem_fraction(gpu_memory_mib: float, *, tp: int, pp: int, attn_dp: int, ep: int, mla: bool,
                      max_num_batched_tokens: int, role: str | None = None) -> float:
    """The mem_fraction_static `serve-plan` costs an SGLang instance at, and `--emit sglang` writes,
    when --mem-fraction is not given: SGLang's own default (`default_mem_fraction_static`) for the
    command the emitter writes: --chunked-prefill-size max_num_batched_tokens as given (the formula
    reads it before SGLang divides it among the attention data-parallel groups, `rank_chunk`),
    --moe-a2a-backend `A2A_DEFAULT_EMIT` when ep > 1, the decode graph at its default max batch (the
    plan's concurrency is not known when memory is sized), the disaggregation mode `role` (None: aggregated)."""
    return default_mem_fraction_static(gpu_memory_mib, tp=tp, pp=pp, chunked_prefill_size=max_num_batched_tokens,
                                       max_running_requests=None, mla=mla, attn_dp=attn_dp, role=role,
                                       a2a=A2A_DEFAULT_EMIT if ep > 1 else A2A_NONE)


def rank_chunk(chunked_prefill_size: int, attn_dp: int) -> int:
    """Prefill tokens one attention data-parallel group takes per forward: --chunked-prefill-size is the
    instance's total, which SGLang divides among the groups (chunked_prefill_size // attn_dp_size).
    Source: SGLang 0.5.23 wheel `srt/arg_groups/parallel_hook.py` handle_data_parallelism ('DP attention is
    enabled. chunked prefill size is adjusted ...'), run after `srt/arg_groups/memory_hook.py`
    handle_gpu_memory_settings has sized mem_fraction_static from the undivided value
    (`srt/arg_groups/pipeline.py` run_resolution_pipeline runs the memory hook first).
    Example: 8192 over 8 groups -> 1024 tokens per group per forward."""
    return chunked_prefill_size // attn_dp


def rank_running_requests(max_running_requests: int, attn_dp: int) -> int:
    """Requests one attention data-parallel rank's scheduler runs at once under --max-running-requests:
    the flag is the instance's total, which SGLang divides among the attention data-parallel ranks,
    rounding down, at least 1 (the KV pool's token capacity // 2 caps it further, not modelled here).
    Source: SGLang 0.5.23 wheel `srt/mem_cache/kv_cache_configurator.py` resolve_max_num_reqs
    ('max concurrent requests (per dp worker)': requested_per_worker = max(1, max_running_requests //
    attn_dp_size)), which `srt/model_executor/model_runner.py` takes as the scheduler's max_running_requests.
    (The decode CUDA graph's default max batch is capped by the undivided value:
    `srt/arg_groups/memory_hook.py`, `default_mem_fraction_static`.)
    Example: 100 over 8 ranks -> 12 per rank, 96 in the instance; 4 over 8 -> 1 per rank, 8 in the instance."""
    return max(1, max_running_requests // attn_dp)


def instance_running_requests(max_running_requests: int, attn_dp: int) -> int:
    """Requests an instance runs at once under --max-running-requests: attn_dp x `rank_running_requests`."""
    return attn_dp * rank_running_requests(max_running_requests, attn_dp)


def max_running_requests_flag(concurrency: int, attn_dp: int) -> int:
    """The --max-running-requests value that runs at least `concurrency` requests in an instance of
    `attn_dp` attention data-parallel ranks: the concurrency rounded up to a multiple of attn_dp, which
    SGLang divides exactly (`rank_running_requests`). Example: 100 over 8 ranks -> 104 (13 per rank)."""
    return attn_dp * -(-concurrency // attn_dp)
