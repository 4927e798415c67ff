"""`serve-plan --emit sglang`: one `python -m sglang.launch_server` command of a plan's instance,
in the flags of `planner.frameworks.sglang` (tp_size the instance's GPUs per stage, attn_dp_size
its attention data-parallel groups, expert parallelism through the all-to-all backend, which sets
ep to tp; disaggregated workers with their disaggregation mode)."""

from __future__ import annotations

from planner.cost import serving as sv
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
    fraction = req["mem_fraction"] if req.get("mem_fraction") is not None else sv.ENGINES["sglang"].default
    # SGLang divides the chunked-prefill size among the attention data-parallel groups (check.sglang)
    per_gpu = {**req, "max_num_batched_tokens": req["max_num_batched_tokens"] * inst.adp}
    words += el.common(FLAG, worker, per_gpu, fraction, s.WEIGHT_FLAGS, "fp8_e4m3")
    if worker.role:
        words += [FLAG["disagg_mode"], worker.role, FLAG["disagg_backend"], s.DISAGG_BACKEND]
    return words
