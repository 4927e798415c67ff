"""`planner serve-plan --emit vllm|sglang`: the best serving plan as the engine's launch script,
read back by `planner check` before it is printed.

The script has one command per engine instance of the plan's deployment (each replica of each
replica kind; for a disaggregated plan each prefill and each decode worker, with the engine's
disaggregation flags), each on its own GPUs (`CUDA_VISIBLE_DEVICES`, counted per node) and port;
an instance wider than a node is launched with the engine's node-count flag on each of its nodes
(written once, for node rank 0). The flags come from the engine's table
(`planner.frameworks.vllm` / `sglang`) and the plan's request: max-model-len, the budget
fraction, the batch the plan was costed at (max concurrent sequences), the chunked-prefill size,
the weight and KV formats.
"""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from planner.cost import serving as sv
from planner.errors import SpecError

ENGINES = ("vllm", "sglang")
"""What `serve-plan --emit` writes."""
HALF = "half"
"""The dtype value both engines take for fp16 (vLLM ModelDType, SGLang dtype choices)."""


@dataclass(frozen=True)
class Worker:
    """One replica kind of a plan: its shape, how many, its batch and its role."""

    inst: sv.Instance
    count: int
    concurrency: int
    role: str | None = None
    """prefill / decode (disaggregated), else None."""


def workers(data: dict) -> list[Worker]:
    """The replica kinds of a `serve.serve_plan` result's deployment."""
    dep = data["deployment"]
    rows = dep.get("workers") or dep["mix"]
    out = []
    for row in rows:
        par = row["parallelism"]
        inst = sv.Instance(tp=par["tp"], pp=par["pp"], ep=par["ep"], adp=par["dp"])
        count = row["workers"] if "workers" in row else par["replicas"]
        out.append(Worker(inst=inst, count=count, concurrency=row["concurrency"], role=row.get("role")))
    return out


def script(data: dict, engine: str, model_ref: str, gpus_per_node: int) -> str:
    """The launch script of a serve-plan result for `engine` (module docstring).

    Raises:
        SpecError: an engine `--emit` does not write, or a layout the engine cannot express.
    """
    if engine == "vllm":
        from planner.emit import vllm as writer
    elif engine == "sglang":
        from planner.emit import sglang as writer
    else:
        raise SpecError(f"value {engine!r} not allowed; allowed: {', '.join(ENGINES)}", key="--emit")
    req = data["request"]
    lines = [f"# planner serve-plan --emit {engine}: {req['model']} on up to {req['gpus']} x {req['cluster']} "
             f"({writer.VERSION}; one command per instance, each on its own GPUs and port)"]
    if req.get("checkpoint_weight_dtype") and req["weight_dtype"] == req["checkpoint_weight_dtype"]:
        lines.append(f"# weights {req['weight_dtype']}: the checkpoint's format (its config.json quantization_config), "
                     f"which the engine loads without {writer.FLAG['quantization']}")
    elif req["weight_dtype"] == "fp8-block":
        lines.append("# fp8-block: serve the checkpoint with weight_block_size [128, 128] (the FP8 release); the "
                     "engine reads its block scales (planner check costs it as fp8 per tensor: 4 B per tensor, "
                     "not per 128 x 128 block, 0.02% of the weight bytes)")
    gpu, port = 0, writer.BASE_PORT
    for worker in workers(data):
        for k in range(worker.count):
            size = worker.inst.gpus
            role = f"{worker.role} worker" if worker.role else "replica"
            words = writer.command(model_ref, worker, req)
            if size > gpus_per_node:
                nodes = -(-size // gpus_per_node)
                words += [writer.FLAG["nnodes"], str(nodes), writer.FLAG["node_rank"], "0"]
                lines.append(f"# {role} {k + 1} of {worker.count}: {size} GPUs over {nodes} nodes; run this on each, "
                             f"node rank 0 to {nodes - 1}")
                prefix = ""
            else:
                if gpu % gpus_per_node + size > gpus_per_node:
                    gpu += gpus_per_node - gpu % gpus_per_node
                first = gpu % gpus_per_node
                lines.append(f"# {role} {k + 1} of {worker.count} (node {gpu // gpus_per_node})")
                prefix = "CUDA_VISIBLE_DEVICES=" + ",".join(str(first + i) for i in range(size)) + " "
                gpu += size
            words += [writer.FLAG["port"], str(port)]
            port += 1
            lines.append(prefix + " ".join(shlex.quote(w) for w in words) + " &")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def checked(data: dict, engine: str, model_ref: str, cluster_ref: str, gpus_per_node: int) -> tuple[str, dict]:
    """(the script, `planner check` of it read back with the plan's model, cluster and GPUs)."""
    from planner.check.engine_file import check_launch_file

    text = script(data, engine, model_ref, gpus_per_node)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text, encoding="utf-8")
        verdict = check_launch_file(path, model=data["request"]["model"], cluster=cluster_ref,
                                    gpus=data["request"]["gpus"])
    return text, verdict


def experts_all_or_none(inst: sv.Instance, why: str) -> None:
    """Both engines split the experts over every rank of a stage or none (ep in {1, tp}).

    Raises:
        SpecError: another expert-parallel size (`why`: how the engine spells it)."""
    if inst.ep not in (1, inst.tp):
        raise SpecError(f"ep={inst.ep} of tp={inst.tp}: {why}", key="--emit")


def common(flag: dict, worker: Worker, req: dict, fraction: float, weight_flags: dict, kv_value: str) -> list[str]:
    """The flags both engines spell the same way through their tables: lengths, budget, batch, formats."""
    words = [flag["max_model_len"], str(req["max_model_len"]),
             flag["fraction"], f"{fraction:g}",
             flag["max_num_seqs"], str(worker.concurrency),
             flag["max_num_batched_tokens"], str(req["max_num_batched_tokens"])]
    fmt, own = req["weight_dtype"], req.get("checkpoint_weight_dtype")
    if fmt == "fp16":
        words += [flag["dtype"], HALF]
    elif fmt == "bf16" and own is not None:
        raise SpecError(f"weight format bf16 is not what the engines load: {req['model']}'s checkpoint is {own} "
                        f"(its config.json quantization_config), read whatever the flags say; drop --weight-dtype "
                        f"or serve a bf16 checkpoint", key="--weight-dtype")
    elif fmt not in ("bf16", own):
        if fmt not in weight_flags:
            raise SpecError(f"weight format {fmt!r} has no {flag['quantization']} value here; "
                            f"allowed: bf16, {', '.join(weight_flags)}", key="--weight-dtype")
        words += [flag["quantization"], weight_flags[fmt]]
    if req["kv_dtype"] == "fp8":
        words += [flag["kv_dtype"], kv_value]
    return words


def model_name(spec_hf_id: str | None, ref: str) -> str:
    """What the command serves: the model's Hugging Face id where the catalog has one, else the reference given."""
    return spec_hf_id or ref
