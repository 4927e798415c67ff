"""vLLM's launch flags: the names `planner check` reads from a `vllm serve` command line or a
`--config` YAML, and `planner serve-plan --emit vllm` writes, with the defaults the check assumes.

Source: vLLM 0.33.0, PyPI wheel `vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl` (sha256 4b6bdec4...),
built from vllm-project/vllm git commit 4ba787ec9 (its `vllm/_version.py` __commit_id__ 'g4ba787ec9', the
abbreviated hash setuptools-scm records; the full hash is not in the build): `vllm/entrypoints/common/cli_args.py`
make_arg_parser (what `vllm serve` and `python -m vllm.entrypoints.openai.api_server` parse),
`vllm/engine/arg_utils.py` EngineArgs.add_cli_args and `get_batch_defaults` (the H100-class
defaults below), `vllm/config/cache.py` (gpu_memory_utilization default 0.92),
`vllm/config/parallel.py` (enable_expert_parallel: experts over data x tensor ranks; the MoE
layers are tensor-parallel over the same ranks without it), `vllm/utils/argparse_utils.py`
FlexibleArgumentParser (a `--config` YAML's keys are flag names without the dashes; it also
accepts `_` for `-` in flags). Every flag of that parser is recorded in `vllm_flags.txt`
(tools/record_engine_flags.py): a flag not in it is one vLLM refuses. The router of a disaggregated
deployment (ROUTER_*) is vllm-project/router's, PyPI `vllm_router-0.1.17-cp38-abi3-manylinux_2_28_x86_64.whl`
(sha256 85c96bea...; it records no commit): `vllm_router/router_args.py`, its flags in `vllm_router_flags.txt`.
"""

from __future__ import annotations

from pathlib import Path

from planner.frameworks.flag_files import recorded_flags

ENGINE = "vllm"
VERSION = "vLLM 0.33.0 (g4ba787ec9)"
"""The release the names and defaults were read from."""
FLAGS_FILE = Path(__file__).with_name("vllm_flags.txt")
ALL_FLAGS = recorded_flags(FLAGS_FILE.name)
"""Every option string of vLLM's launch parser (long and short forms)."""

LAUNCHERS = (("vllm", "serve"), ("vllm.entrypoints.openai.api_server",))
"""How a command line starts vLLM's OpenAI server: the `vllm serve` CLI, or `python -m` the module."""
IMAGES = {"vllm/vllm-openai": ("vllm", "serve")}
"""vLLM's container image -> its ENTRYPOINT as a launcher: `docker run ... vllm/vllm-openai:TAG MODEL --flag ...`
runs `vllm serve MODEL --flag ...`. Source: vllm-project/vllm@dead20ba `docker/Dockerfile`, target
vllm-openai: `ENTRYPOINT ["vllm", "serve"]`; `docs/deployment/docker.md` (@02319794):
`docker run --gpus all ... vllm/vllm-openai:latest meta-llama/Llama-3.1-8B-Instruct`."""
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
"""The model vLLM serves when --model is absent (`vllm/config/model.py` ModelConfig.model @0.33.0)."""
MODEL_ARG = "--model"
CONFIG = "--config"
"""A YAML file of further flags (FlexibleArgumentParser: the command line wins over it)."""

FLAG = {
    "model": "--model",
    "tp": "--tensor-parallel-size",
    "pp": "--pipeline-parallel-size",
    "dp": "--data-parallel-size",
    "ep": "--enable-expert-parallel",
    "ep_off": "--no-enable-expert-parallel",
    "a2a": "--all2all-backend",
    "fraction": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_pool_bytes": "--kv-cache-memory-bytes",
    "kv_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "dtype": "--dtype",
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "master_addr": "--master-addr",
    "headless": "--headless",
    "executor_backend": "--distributed-executor-backend",
    "dp_backend": "--data-parallel-backend",
    "dp_local": "--data-parallel-size-local",
    "dp_start_rank": "--data-parallel-start-rank",
    "dp_rank": "--data-parallel-rank",
    "dp_address": "--data-parallel-address",
    "port": "--port",
    "kv_transfer": "--kv-transfer-config",
    "chunked_prefill": "--enable-chunked-prefill",
}
"""Planner knob -> vLLM's flag."""
RAY = "ray"
"""The executor / data-parallel backend value under which vLLM places its workers over a Ray cluster's nodes
from one command on the head node (`vllm/config/parallel.py` distributed_executor_backend: "mp" by default, which
refuses a world larger than the node's GPUs unless --nnodes is given, l. 1054-1095 @0.33.0;
docs/serving/parallelism_scaling.md: tp = GPUs per node, pp = nodes, e.g. tp 8 pp 2 on 2 nodes of 8)."""
CHUNKED_PREFILL_OFF = ("--no-enable-chunked-prefill", "--disable-chunked-prefill")
"""The spellings that turn chunked prefill off (EnableDisableAction: `--disable-x` and `--no-enable-x` negate
`--enable-x`; `vllm/utils/argparse_utils.py` @0.33.0). Unset, vLLM turns it on for every generative model
(`engine/arg_utils.py` _set_default_chunked_prefill_and_prefix_caching_args: model_config.is_chunked_prefill_supported)."""
DEEPEP_DECODE = "deepep_low_latency"
DEEPEP_PREFILL = "deepep_high_throughput"
"""`--all2all-backend` values for DeepEP's low-latency (decode) and normal (prefill) kernels.
Source: vLLM 0.33.0 vllm/config/parallel.py `All2AllBackend` (default allgather_reducescatter)."""
ALIASES = {"-tp": FLAG["tp"], "-pp": FLAG["pp"], "-dp": FLAG["dp"], "-ep": FLAG["ep"],
           "-q": FLAG["quantization"], "--device-memory-utilization": FLAG["fraction"],
           "--disable-expert-parallel": FLAG["ep_off"], "-n": FLAG["nnodes"], "-r": FLAG["node_rank"],
           "-dpl": FLAG["dp_local"], "-dpr": FLAG["dp_start_rank"], "-dpn": FLAG["dp_rank"],
           "-dpa": FLAG["dp_address"], "-dpb": FLAG["dp_backend"]}
"""Other spellings of the same options (the parser's option strings)."""
SWITCHES = frozenset({FLAG["ep"], FLAG["ep_off"], "--enforce-eager", "--no-enforce-eager",
                      "--no-enable-chunked-prefill",
                      "--trust-remote-code", FLAG["headless"], "--enable-prefix-caching",
                      "--no-enable-prefix-caching", "--enable-chunked-prefill",
                      "--disable-chunked-prefill", "--grpc", "--disable-log-requests",
                      "--disable-log-stats", "--enable-log-requests"})
"""Flags that take no value (store_true / BooleanOptionalAction)."""
DEFAULT_FRACTION = 0.92
"""gpu_memory_utilization when absent (`vllm/config/cache.py` @0.33.0: Field(default=0.92)),
a fraction of TOTAL GPU memory (`vllm/v1/worker/gpu_worker.py` requested_memory)."""


def default_batch(gpu_memory_gib: float, gpu_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server takes when unset, by the GPU:
    >= 160 GiB: 16384, 1024; >= 70 GiB and not an A100: 8192, 1024; else 2048, 256
    (`arg_utils.py` get_batch_defaults @0.33.0; it reads the device's total memory)."""
    if gpu_memory_gib >= 160:
        return 16384, 1024
    if gpu_memory_gib >= 70 and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


KV_DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8",
             "fp8_e5m2": "fp8"}
"""--kv-cache-dtype values the planner models -> its KV dtype (auto: the model's dtype; 2 and 1
bytes per element). The others vLLM accepts (nvfp4, int4/int8 per-token-head, ...) are not
modelled: bad input naming these."""
QUANTIZATION = {"fp8": "fp8", "mxfp4": "mxfp4", "awq": "int4", "awq_marlin": "int4", "gptq": "int4",
                "gptq_marlin": "int4", "modelopt_fp4": "nvfp4"}
"""--quantization values the planner models -> its weight format (`cost.serving.WEIGHT_FORMATS`).
fp8 names vLLM's Fp8LinearMethod, which reads a block-scaled checkpoint's weight_block_size when
the checkpoint has one (the planner's `fp8-block`, written the same way)."""
WEIGHT_FLAGS = {"fp8": "fp8", "fp8-block": "fp8", "mxfp4": "mxfp4", "int4": "awq", "nvfp4": "modelopt_fp4"}
"""Planner weight format -> the --quantization value `serve-plan --emit vllm` writes (bf16: none)."""
DTYPES = {"auto": None, "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32"}
"""--dtype values (`vllm/config/model.py` ModelDType @0.33.0) -> the activation / unquantized weight
dtype (auto: the checkpoint's torch_dtype where the GPU runs it, else float16: _resolve_auto_dtype)."""
DISAGG_CONNECTOR = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
"""--kv-transfer-config of a disaggregated prefill or decode worker (vLLM docs
`features/nixl_connector_usage.md`: both sides run NixlConnector with kv_role kv_both; a router
routes prompts to prefill, then decode, and tells each which is which)."""
SIDE_CHANNEL_PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"
SIDE_CHANNEL_PORT = 5600
SIDE_CHANNEL_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"
SIDE_CHANNEL_HOST = "localhost"
"""The NIXL handshake listener of a disaggregated worker: each data-parallel rank binds port
VLLM_NIXL_SIDE_CHANNEL_PORT + its data-parallel index on VLLM_NIXL_SIDE_CHANNEL_HOST (defaults 5600 and
localhost: `vllm/envs.py`; `vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py`
side_channel_port = VLLM_NIXL_SIDE_CHANNEL_PORT + data_parallel_index), and the prefill worker hands that
host and port to the decode worker through the request's kv_transfer_params. So two workers of one node need
port ranges that do not overlap, and a worker whose peers run on other nodes names its own address (the
docs' `features/nixl_connector_usage.md`, 'Multi-Instance Setup'). vLLM 0.33.0 (g4ba787ec9)."""
CONNECTORS_OF_ROUTER = {"nixl": ("NixlConnector", "NixlPullConnector"), "mooncake": ("MooncakeConnector",),
                        "moriio": ("MoRIIOConnector",)}
"""vllm-router --kv-connector value -> the --kv-transfer-config kv_connector names of the workers it routes
(vllm-router 0.1.17 `vllm_router/router_args.py`: 'nixl' (default) NIXL's pull-based transfer, 'mooncake'
Mooncake's push-based one, 'moriio' MoRI-IO; the connector names registered by vLLM 0.33.0
`vllm/distributed/kv_transfer/kv_connector/factory.py`)."""
PD_CONNECTORS = frozenset({"NixlConnector", "NixlPullConnector", "NixlPushConnector", "MooncakeConnector",
                           "MoRIIOConnector"})
"""--kv-transfer-config kv_connector values that hand the KV cache from a prefill instance to a decode instance
(a router pairs them); the others vLLM 0.33.0 registers (`vllm/distributed/kv_transfer/kv_connector/factory.py`:
OffloadingConnector, SimpleCPUOffloadConnector, LMCacheConnectorV1, LMCacheMPConnector, MooncakeStoreConnector,
HF3FSKVConnector, FlexKVConnectorV1, HiSparseConnector, DecodeBenchConnector, Example*) store or offload KV
blocks and need no router. MultiConnector runs those of its kv_connector_extra_config connectors list."""
PORT = 8000
"""--port when absent (`vllm/entrypoints/common/cli_args.py` FrontendArgs.port = 8000)."""

ROUTER_FLAGS_FILE = Path(__file__).with_name("vllm_router_flags.txt")
ROUTER_ALL_FLAGS = recorded_flags(ROUTER_FLAGS_FILE.name)
"""Every option string of vLLM's router parser (vllm-router 0.1.17, `tools/record_engine_flags.py`)."""
ROUTER_VERSION = "vllm-router 0.1.17"
ROUTER_LAUNCHERS = (("vllm-router",),)
"""How a command line starts vLLM's router: the `vllm-router` console script of the PyPI package vllm-router
(vllm-project/router; `vllm_router-0.1.17.dist-info/entry_points.txt`: vllm_router.launch_router:main). The
vllm 0.33.0 wheel ships no router or proxy; its docs (`features/nixl_connector_usage.md`) route with the
test script `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py` of the vLLM repository."""
ROUTER_FLAG = {
    "pd": "--vllm-pd-disaggregation",
    "prefill": "--prefill",
    "decode": "--decode",
    "host": "--host",
    "port": "--port",
    "kv_connector": "--kv-connector",
    "workers": "--worker-urls",
}
"""Router knob -> vllm-router 0.1.17's flag (`vllm_router/router_args.py` RouterArgs.add_cli_args:
`--prefill URL [BOOTSTRAP_PORT]` and `--decode URL`, repeated per worker; `--vllm-pd-disaggregation`
(store_true); `--kv-connector nixl|mooncake|moriio` (default nixl); `--host` (default 127.0.0.1: the loopback
only), `--port` (default 30000); in its regular mode the servers' URLs after one `--worker-urls` (nargs '+',
as in sglang-router, whose router vllm-router forks))."""
ROUTER_SWITCHES = frozenset({ROUTER_FLAG["pd"], "--mini-lb", "--service-discovery", "--enable-igw"})
"""Router flags that take no value (store_true)."""
ROUTER_HOST = "0.0.0.0"
"""--host `serve-plan --emit` gives the router: every interface, so that clients on other hosts reach it."""
ROUTER_PORT = 30000
"""--port `serve-plan --emit vllm` gives the router (vllm-router's default; the workers' ports run from 8000)."""
ROUTER_CONNECTOR = "nixl"
"""--kv-connector `serve-plan --emit vllm` gives the router: the workers' NixlConnector (`DISAGG_CONNECTOR`)."""
NODE_HEAD = "HEAD_ADDR"
"""The shell variable a multi-node launch script names for the address of an instance's node rank 0
(--master-addr), suffixed with the instance's number (`planner.frameworks.sglang.NODE_HEAD`)."""
