"""`serve-plan --emit sglang`: one `python -m sglang.launch_server` command of a plan's instance,
in the flags of `planner.frameworks.sglang` (tp_size the instance's GPUs per stage, attn_dp_size
its attention data-parallel groups, expert parallelism through the all-to-all backend, which sets
ep to tp; disaggregated workers with their disaggregation mode; the running-requests cap the instance's
concurrency rounded up to a multiple of attn_dp_size, which SGLang divides among the attention
data-parallel ranks: `planner.frameworks.sglang.rank_running_requests`)."""

from __future__ import annotations

import dataclasses

from planner.emit import engine_launch as el
from planner.frameworks import sglang as s

VERSION = s.VERSION
FLAG = s.FLAG
BASE_PORT = 30000


def command(model: str, worker: el.Worker, req: dict) -> list[str]:
    """The words of one SGLang launch command (no GPUs, no port)."""
    inst = worker.inst
    el.experts_all_or_none(inst, "written as an all-to-all backend, which sets ep to tp")
    words = ["python", "-m", s.LAUNCHERS[0][0], FLAG["model"], model, FLAG["tp"], str(inst.tp)]
    if inst.pp > 1:
        words += [FLAG["pp"], str(inst.pp)]
    if inst.adp > 1:
        words += [FLAG["adp"], str(inst.adp)]
    if inst.ep > 1:
        words += [FLAG["ep"], str(inst.ep), FLAG["a2a"], s.A2A_DEFAULT_EMIT]
    if inst.redundant:  # (experts + redundant) % ep == 0: the plan's EP size needs them (`serve.redundant_experts`)
        words += [FLAG["redundant_experts"], str(inst.redundant)]
    if inst.ep > 1 and inst.adp > 1:  # priced with two-batch overlap (`serve.two_batch_overlap`)
        words.append(FLAG["tbo"])
    if inst.dense_dp and inst.adp > 1:  # dense MLPs and LM head data-parallel (`cost.serving.Instance.dense_dp`)
        words += [FLAG["dense_tp"], str(s.DENSE_TP_VALUES[0]), FLAG["dp_lm_head"]]
    fraction = req.get("mem_fraction")
    if fraction is None:  # the fraction the plan costed this shape at (`planner.serve._memory`)
        fraction = worker.mem_fraction
    if fraction is None:  # a plan without it: SGLang's default for this command (frameworks.sglang.plan_mem_fraction)
        fraction = s.plan_mem_fraction(worker.gpu_memory_mib, tp=inst.tp, pp=inst.pp, attn_dp=inst.adp, ep=inst.ep,
                                       mla=worker.mla, max_num_batched_tokens=req["max_num_batched_tokens"])
    # the chunked-prefill size (FLAG["max_num_batched_tokens"]) is the plan's budget as given, or where the plan
    # costed a chunk per attention-DP rank that x the ranks (worker.max_num_batched_tokens, `serve.chunk_flag`):
    # SGLang divides it among the attention data-parallel groups itself (frameworks.sglang.rank_chunk)
    # the running-requests cap is the instance's total, divided among the attention data-parallel ranks
    # rounding down (frameworks.sglang.rank_running_requests): a multiple of adp runs what the plan priced
    whole = dataclasses.replace(worker, concurrency=s.max_running_requests_flag(worker.concurrency, inst.adp))
    words += el.common(FLAG, whole, req, fraction, s.WEIGHT_FLAGS, "fp8_e4m3")
    if worker.role:
        words += [FLAG["disagg_mode"], worker.role, FLAG["disagg_backend"], s.DISAGG_BACKEND]
    return words


NODE_HEAD = s.NODE_HEAD


def node_flags(nodes: int, rank: int, head: str, number: int) -> list[str]:
    """The flags of node `rank` of an instance over `nodes` nodes: FLAG nnodes, node_rank
    and dist_init HEAD:PORT (one port per multi-node instance, `number` counting them from 1).
    Source: SGLang 0.5.23 wheel `srt/arg_groups/fields/parallel.py` (nnodes, node_rank, dist_init_addr
    'e.g. 192.168.0.2:25000'); `srt/entrypoints/engine.py` _calculate_rank_ranges gives node i the
    tp ranks tp / nnodes x i onward (pp ranks when pp >= nnodes)."""
    port = s.DIST_INIT_BASE_PORT + 100 * (number - 1)
    return [FLAG["nnodes"], str(nodes), FLAG["node_rank"], str(rank), FLAG["dist_init"], type(head)(f"{head}:{port}")]


def disaggregation(worker: el.Worker, seen: el.Seen, address) -> tuple:
    """(environment words by node, extra flags, router entry words) of a disaggregated worker: a prefill
    worker's KV bootstrap server on port 8998 + the prefill workers before it (`seen.prefill`), so that no two
    of a node bind one port, which the router passes on to the decode workers (after the prefill URL); where
    the deployment spans nodes (`address` not None), the host 0.0.0.0, so that the router and the other nodes'
    workers reach its HTTP and bootstrap servers (SGLang's default host is the loopback:
    `planner.frameworks.sglang.BOOTSTRAP_PORT`, `HOST`)."""
    extra, entry = [], []
    if worker.role == "prefill":
        port = s.BOOTSTRAP_PORT + seen.prefill
        extra, entry = [FLAG["bootstrap_port"], str(port)], [str(port)]
    if address:
        extra += [FLAG["host"], s.ANY_HOST]
    return (lambda node: []), extra, entry


def router(prefill: list[list[str]], decode: list[list[str]]) -> list[str]:
    """The words of the SGLang router command of a disaggregated deployment: `python -m
    sglang_router.launch_router`, its PD switch, each prefill worker's URL and bootstrap port, each decode
    worker's URL, every interface and the router's port (`planner.frameworks.sglang.ROUTER_FLAG`)."""
    f = s.ROUTER_FLAG
    words = ["python", "-m", s.ROUTER_LAUNCHERS[0][0], f["pd"]]
    for entry in prefill:
        words += [f["prefill"], *entry]
    for entry in decode:
        words += [f["decode"], *entry]
    return words + [f["host"], s.ROUTER_HOST, f["port"], str(s.ROUTER_PORT)]


ROUTER_VERSION = s.ROUTER_VERSION
ROUTER_PORT = s.ROUTER_PORT
