"""`serve-plan --emit vllm`: one `vllm serve` command of a plan's instance, in the flags of
`planner.frameworks.vllm` (the layout mapping is the reader's, `planner.check.vllm`, reversed:
an MoE instance with attention data parallelism runs as data_parallel_size adp of
tensor_parallel_size tp / adp, expert parallel when ep = tp, with DeepEP's all-to-all (low-latency
kernels; high-throughput on prefill workers) as the cost model prices it; the max-num-seqs cap is per
data-parallel rank, so the instance's concurrency / adp: vLLM 0.33.0 vllm/config/scheduler.py,
"max_num_seqs, which applies per data-parallel rank"; vllm/config/parallel.py All2AllBackend)."""

from __future__ import annotations

import dataclasses

from planner.cost import serving as sv
from planner.emit import engine_launch as el
from planner.frameworks import vllm as v

VERSION = v.VERSION
FLAG = v.FLAG
BASE_PORT = 8000


def command(model: str, worker: el.Worker, req: dict) -> list[str]:
    """The words of one `vllm serve` command (no GPUs, no port)."""
    inst = worker.inst
    el.experts_all_or_none(inst, "vLLM splits experts over all tp x dp ranks or none")
    words = ["vllm", "serve", model, FLAG["tp"], str(inst.attn_tp)]
    if inst.pp > 1:
        words += [FLAG["pp"], str(inst.pp)]
    if inst.adp > 1:
        words += [FLAG["dp"], str(inst.adp)]
    if inst.ep > 1:
        words.append(FLAG["ep"])
        if inst.adp > 1:   # priced as DeepEP (`cost.serving.moe_exchange_s`): ask vLLM for it
            words += [FLAG["a2a"], v.DEEPEP_PREFILL if worker.role == "prefill" else v.DEEPEP_DECODE]
    fraction = req["mem_fraction"] if req.get("mem_fraction") is not None else sv.ENGINES["vllm"].default
    per_rank = dataclasses.replace(worker, concurrency=-(-worker.concurrency // inst.adp))
    words += el.common(FLAG, per_rank, req, fraction, v.WEIGHT_FLAGS, "fp8")
    if worker.role:
        words += [FLAG["kv_transfer"], v.DISAGG_CONNECTOR]
    return words


NODE_HEAD = v.NODE_HEAD


def node_flags(nodes: int, rank: int, head: str, number: int) -> list[str]:
    """The flags of node `rank` of an instance over `nodes` nodes: FLAG nnodes, node_rank, master_addr,
    and headless after node rank 0 (workers only; the API server is node rank 0's). Source: vLLM
    0.33.0 (g4ba787ec9) `vllm/config/parallel.py` (master_addr, node_rank, nnodes: 'multi-node
    distributed inference when distributed_executor_backend is mp', the backend picked on CUDA when
    nnodes > 1), `vllm/entrypoints/cli/serve.py` run_headless (node_rank_within_dp > 0: headless
    multiproc executor for multi-node TP/PP), `vllm/engine/arg_utils.py` (data_parallel_size_local and
    the data-parallel rank inferred from the node rank, the DP address defaulting to the master address)."""
    words = [FLAG["nnodes"], str(nodes), FLAG["node_rank"], str(rank), FLAG["master_addr"], head]
    return words + ([FLAG["headless"]] if rank else [])


def disaggregation(worker: el.Worker, seen: el.Seen, address) -> tuple:
    """(environment words by node, extra flags, router entry words) of a disaggregated worker: its NIXL
    handshake listener on ports VLLM_NIXL_SIDE_CHANNEL_PORT up to + its data-parallel ranks - 1, after those
    of the workers before it (`seen.dp_ranks`), so that no two workers of a node bind one port; where the
    deployment spans nodes (`address(node)`: that node's address placeholder, else None), the address it
    advertises to its peers, VLLM_NIXL_SIDE_CHANNEL_HOST, instead of localhost
    (`planner.frameworks.vllm.SIDE_CHANNEL_PORT`). The router names the worker by its URL alone."""
    port = v.SIDE_CHANNEL_PORT + seen.dp_ranks

    def env(node: int) -> list[str]:
        words = [f"{v.SIDE_CHANNEL_PORT_ENV}={port}"]
        return words + ([el.Raw(f"{v.SIDE_CHANNEL_HOST_ENV}={address(node)}")] if address else [])

    return env, [], []


def router(prefill: list[list[str]], decode: list[list[str]]) -> list[str]:
    """The words of the vllm-router command of a disaggregated deployment: its PD switch, each prefill
    worker's URL, each decode worker's URL, the workers' connector (nixl), every interface and the router's
    port (`planner.frameworks.vllm.ROUTER_FLAG`)."""
    f = v.ROUTER_FLAG
    words = [*v.ROUTER_LAUNCHERS[0], f["pd"]]
    for entry in prefill:
        words += [f["prefill"], *entry]
    for entry in decode:
        words += [f["decode"], *entry]
    return words + [f["kv_connector"], v.ROUTER_CONNECTOR, f["host"], v.ROUTER_HOST, f["port"], str(v.ROUTER_PORT)]


ROUTER_VERSION = v.ROUTER_VERSION
ROUTER_PORT = v.ROUTER_PORT
