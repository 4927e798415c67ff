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
(tools/record_engine_flags.py): a flag not in it is one vLLM refuses.
"""

from __future__ import annotations

from pathlib import Path

ENGINE = "vllm"
VERSION = "vLLM 0.33.0 (g4ba787ec9)"
"""The release the names and defaults were read from."""
FLAGS_FILE = Path(__file__).with_name("vllm_flags.txt")
ALL_FLAGS = frozenset(line for line in FLAGS_FILE.read_text().splitlines()
                      if line and not line.startswith("#"))
"""Every option string of vLLM's launch parser (long and short forms)."""

LAUNCHERS = (("vllm", "serve"), ("vllm.entrypoints.openai.api_server",))
"""How a command line starts vLLM's OpenAI server: the `vllm serve` CLI, or `python -m` the module."""
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
    "port": "--port",
    "kv_transfer": "--kv-transfer-config",
}
"""Planner knob -> vLLM's flag."""
DEEPEP_DECODE = "deepep_low_latency"
DEEPEP_PREFILL = "deepep_high_throughput"
"""`--all2all-backend` values for DeepEP's low-latency (decode) and normal (prefill) kernels.
Source: vLLM 0.33.0 vllm/config/parallel.py `All2AllBackend` (default allgather_reducescatter)."""
ALIASES = {"-tp": FLAG["tp"], "-pp": FLAG["pp"], "-dp": FLAG["dp"], "-ep": FLAG["ep"],
           "-q": FLAG["quantization"], "--device-memory-utilization": FLAG["fraction"],
           "--disable-expert-parallel": FLAG["ep_off"], "-n": FLAG["nnodes"], "-r": FLAG["node_rank"]}
"""Other spellings of the same options (the parser's option strings)."""
SWITCHES = frozenset({FLAG["ep"], FLAG["ep_off"], "--enforce-eager",
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
`features/disagg_prefill` / `examples/online_serving/disaggregated_serving`: both sides run
NixlConnector with kv_role kv_both; a proxy routes prompts to prefill, then decode)."""
NODE_HEAD = "HEAD_ADDR"
"""The shell variable a multi-node launch script names for the address of an instance's node rank 0
(--master-addr), suffixed with the instance's number (`planner.frameworks.sglang.NODE_HEAD`)."""
