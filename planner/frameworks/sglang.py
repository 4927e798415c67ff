"""SGLang's launch flags: the names `planner check` reads from a `python -m sglang.launch_server`
command line and `planner serve-plan --emit sglang` writes, with the defaults the check assumes.

Source: SGLang 0.5.23 (PyPI wheel, built 2026-10-30; the build records no commit):
`python/sglang/srt/server_args.py` ServerArgs.add_cli_args and the dataclass fields it turns into
flags (`srt/arg_groups/fields/parallel.py`: --tp-size is the WORLD of one replica across all its
nodes, --attn-dp-size splits it into attention data-parallel groups, --dp-size counts replicas;
`srt/arg_groups/parallel_hook.py`: the deprecated `--dp-size N --enable-dp-attention` is read as
`--attn-dp-size N`, --attn-dp-size must divide --tp-size, --dp-size with --attn-dp-size is
refused; `srt/runtime_context.py` launch_world_size_of = tp_size x pp_size;
`srt/arg_groups/overrides.py` _a2a_ep_size: an all-to-all backend among
`A2A_SPANNING` sets ep_size to tp_size whatever --ep-size says). Every flag of that parser is
recorded in `sglang_flags.txt` (tools/record_engine_flags.py).
"""

from __future__ import annotations

from pathlib import Path

ENGINE = "sglang"
VERSION = "SGLang 0.5.23"
FLAGS_FILE = Path(__file__).with_name("sglang_flags.txt")
ALL_FLAGS = frozenset(line for line in FLAGS_FILE.read_text().splitlines()
                      if line and not line.startswith("#"))
"""Every option string of SGLang's launch parser."""

LAUNCHERS = (("sglang.launch_server",), ("sglang", "serve"))
"""How a command line starts SGLang: `python -m sglang.launch_server`, or the `sglang serve` CLI."""
FLAG = {
    "model": "--model-path",
    "tp": "--tp-size",
    "pp": "--pp-size",
    "dp": "--dp-size",
    "adp": "--attn-dp-size",
    "dp_attention": "--enable-dp-attention",
    "ep": "--ep-size",
    "a2a": "--moe-a2a-backend",
    "fraction": "--mem-fraction-static",
    "max_model_len": "--context-length",
    "max_num_seqs": "--max-running-requests",
    "max_num_batched_tokens": "--chunked-prefill-size",
    "kv_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "dtype": "--dtype",
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "dist_init": "--dist-init-addr",
    "port": "--port",
    "disagg_mode": "--disaggregation-mode",
    "disagg_backend": "--disaggregation-transfer-backend",
}
"""Planner knob -> SGLang's flag."""
ALIASES = {"--tensor-parallel-size": FLAG["tp"], "--pipeline-parallel-size": FLAG["pp"],
           "--data-parallel-size": FLAG["dp"], "--attention-data-parallel-size": FLAG["adp"],
           "--expert-parallel-size": FLAG["ep"], "--ep": FLAG["ep"], "--model": FLAG["model"]}
"""Other option strings of the same options."""
SWITCHES = frozenset({FLAG["dp_attention"], "--trust-remote-code", "--enable-torch-compile",
                      "--disable-radix-cache", "--enable-dp-lm-head", "--skip-server-warmup",
                      "--disable-cuda-graph", "--enable-metrics"})
"""Flags that take no value."""
A2A_SPANNING = frozenset({"megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep",
                          "flashinfer", "flashinfer_megamoe", "mori", "pplx"})
"""--moe-a2a-backend values that set ep_size = tp_size (`overrides.py` _A2A_EP_SPANNING_BACKENDS)."""
A2A_NONE = "none"
"""--moe-a2a-backend default: no all-to-all dispatch (tokens reach the experts through the
tensor-parallel group's collectives)."""
A2A_DEFAULT_EMIT = "deepep"
"""The all-to-all backend `serve-plan --emit sglang` writes for an expert-parallel plan."""

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
