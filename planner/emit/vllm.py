"""`serve-plan --emit vllm`: one `vllm serve` command of a plan's instance, in the flags of
`planner.frameworks.vllm` (the layout mapping is the reader's, `planner.check.vllm`, reversed:
an MoE instance with attention data parallelism runs as data_parallel_size adp of
tensor_parallel_size tp / adp, expert parallel when ep = tp)."""

from __future__ import annotations

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
    fraction = req["mem_fraction"] if req.get("mem_fraction") is not None else sv.ENGINES["vllm"].default
    words += el.common(FLAG, worker, req, fraction, v.WEIGHT_FLAGS, "fp8")
    if worker.role:
        words += [FLAG["kv_transfer"], v.DISAGG_CONNECTOR]
    return words
