"""`planner serve-plan --emit vllm|sglang`: the best serving plan as the engine's launch script,
read back by `planner check` before it is printed.

The script has one command per engine instance of the plan's deployment (each replica of each
replica kind; for a disaggregated plan each prefill and each decode worker, with the engine's
disaggregation flags), each on its own GPUs (`CUDA_VISIBLE_DEVICES`, counted per node) and port;
an instance wider than a node starts on a node boundary and has one command per node it spans
(`_multi_node`: the engine's node count, node rank and node rank 0's address, a shell placeholder
the user sets: SGLang's node count, node rank and rendezvous HOST:PORT, vLLM's node count, node
rank, master address and headless workers after the first node; `writer.node_flags`). A disaggregated
plan ends with the engine's router over its workers (`writer.router`: each worker's URL under its role),
and each worker gets what the KV hand-over needs (`writer.disaggregation`: a port of its own on its node;
where the workers span nodes, the node's address, `NODE_ADDR_N`, as a placeholder). The lines of every node
are in the one script; where they span nodes, each node's lines are inside a guard on `NODE_RANK` (`by_node`):
run the script on every node with its number. The flags come from the engine's table
(`planner.frameworks.vllm` / `sglang`) and the plan's request: max-model-len, the budget
fraction, the batch the plan was costed at (max concurrent sequences), the chunked-prefill size,
the weight and KV formats.
"""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from planner.check.engine_launch import NODE_RANK
from planner.cost import serving as sv
from planner.errors import SpecError, number

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
    gpu_memory_mib: float | None = None
    """The GPU's memory as nvidia-smi reports it (the plan's capacity), MiB."""
    mla: bool = False
    """Whether the model's attention is MLA (SGLang's default budget depends on it)."""
    mem_fraction: float | None = None
    """The engine budget fraction the plan costed this shape at (the row's mem_fraction), None if not given."""
    max_num_batched_tokens: int | None = None
    """The chunk flag the plan costed this shape at where it is not the request's (the row's max_num_batched_tokens:
    a chunk planned per attention-DP rank, `planner.serve.chunk_flag`), None otherwise."""


def workers(data: dict, mla: bool = False) -> list[Worker]:
    """The replica kinds of a `serve.serve_plan` result's deployment (`mla`: the model's attention is MLA)."""
    dep = data["deployment"]
    rows = dep.get("workers") or dep["mix"]
    out = []
    for row in rows:
        par = row["parallelism"]
        inst = sv.Instance(tp=par["tp"], pp=par["pp"], ep=par["ep"], adp=par["dp"], redundant=par.get("redundant_experts", 0),
                           dense_dp=par.get("dense_dp", False))
        count = row["workers"] if "workers" in row else par["replicas"]
        capacity = row.get("memory_bytes", {}).get("capacity")
        out.append(Worker(inst=inst, count=count, concurrency=row["concurrency"], role=row.get("role"),
                          gpu_memory_mib=capacity / 2**20 if capacity else None, mla=mla,
                          mem_fraction=row.get("mem_fraction"), max_num_batched_tokens=row.get("max_num_batched_tokens")))
    return out


def _balance_comment(data: dict, servers: int, router: str) -> list[str]:
    """How requests are spread over the independent servers of an aggregated deployment: evenly, by a load
    balancer in front of their ports. serve-plan deploys one replica kind (`planner.serve.ROUTER_SPLIT`: the
    routers of both engines have no per-server weight), so an even split gives each server its planned share:
    at --request-rate R over n servers, R / n, at most what one carries at its planned batch."""
    row, = data["deployment"]["mix"]
    rate = data["request"].get("request_rate")
    each = row.get("capacity_requests_per_s", row["requests_per_s"]) / servers  # at a rate requests_per_s is served
    share = (f"{number(round(rate / servers, 3))} of the {number(rate)} requests/s each, within the "
             f"{number(round(each, 3))} one carries at its planned batch" if rate
             else f"{number(round(each, 3))} requests/s each at its planned batch")
    return [f"# {servers} independent servers of one shape ({_shape(row['parallelism'])} @{row['concurrency']}): "
            f"spread requests evenly over them ({share}): put a load balancer in front of their ports "
            f"(round-robin; {router} does this), or send each client to one server in turn"]


def _shape(par: dict) -> str:
    return " ".join(f"{k}{par[k]}" for k in ("tp", "pp", "ep", "dp") if par.get(k, 1) > 1) or "tp1"


@dataclass(frozen=True)
class Slot:
    """Where one engine instance of the script runs."""

    worker: Worker
    number: int
    """Its number among the instances of its replica kind, from 1."""
    gpu: int
    """Its first GPU, counted over the deployment's nodes (its first node: gpu // GPUs per node)."""
    port: int
    """Its HTTP port (node rank 0's, for an instance over several nodes)."""
    spanning: int
    """Its number among the instances over several nodes, from 1 (0: it runs on one node)."""


def slots(rows: list[Worker], gpus_per_node: int, base_port: int) -> list[Slot]:
    """Every instance of a deployment on its GPUs and port: one after another, each on a node of its own
    when it does not fit the rest of the current one, an instance wider than a node from a node boundary,
    the ports from `base_port` up."""
    out, gpu, port, spanning = [], 0, base_port, 0
    for worker in rows:
        size = worker.inst.gpus
        for k in range(worker.count):
            if size > gpus_per_node:
                spanning += 1
                gpu = -(-gpu // gpus_per_node) * gpus_per_node
                out.append(Slot(worker, k + 1, gpu, port, spanning))
                gpu += -(-size // gpus_per_node) * gpus_per_node
            else:
                if gpu % gpus_per_node + size > gpus_per_node:
                    gpu += gpus_per_node - gpu % gpus_per_node
                out.append(Slot(worker, k + 1, gpu, port, 0))
                gpu += size
            port += 1
    return out


def script(data: dict, engine: str, model_ref: str, gpus_per_node: int, mla: bool = False) -> str:
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
    length, why = served_length(data, engine)
    if why:
        lines.append(why)
    req = {**req, "max_model_len": length}
    if req.get("checkpoint_weight_dtype") and req["weight_dtype"] == req["checkpoint_weight_dtype"]:
        lines.append(f"# weights {req['weight_dtype']}: the checkpoint's format (its config.json quantization_config), "
                     f"which the engine loads without {writer.FLAG['quantization']}")
    elif req["weight_dtype"] == "fp8-block":
        lines.append("# fp8-block: serve the checkpoint with weight_block_size [128, 128] (the FP8 release); the "
                     "engine reads its block scales (planner check costs it as fp8 per tensor: 4 B per tensor, "
                     "not per 128 x 128 block, 0.02% of the weight bytes)")
    placed = slots(workers(data, mla), gpus_per_node, writer.BASE_PORT)
    disaggregated = any(s.worker.role for s in placed)
    last = placed[-1]
    several = (last.gpu + last.worker.inst.gpus - 1) // gpus_per_node > 0
    if not disaggregated and len(placed) > 1:  # senior review 8 finding 11: no word that load must be spread
        lines += _balance_comment(data, len(placed), writer.ROUTER_VERSION)
    if disaggregated and several:
        lines.append(f"# the workers span nodes 0 to {(last.gpu + last.worker.inst.gpus - 1) // gpus_per_node}: set "
                     f"{NODE_ADDR}_N to the address of node N wherever a line names it (the router's line, on "
                     f"node 0, names the node of every worker)")
    seen = Seen()
    body: list[tuple[int, list[str]]] = []  # (node, its lines) in the order written
    routed: dict[str, list] = {"prefill": [], "decode": []}
    for slot in placed:
        worker, size = slot.worker, slot.worker.inst.gpus
        role = f"{_label(worker)} {worker.role} worker" if worker.role else f"{_label(worker)} replica"
        title = f"{role} {slot.number} of {worker.count}"
        words, node = writer.command(model_ref, worker, req), slot.gpu // gpus_per_node
        env = lambda _node: []  # noqa: E731 (a worker outside disaggregation sets no environment)
        if worker.role:
            address = node_address if several else None
            env, extra, entry = writer.disaggregation(worker, seen, address)
            words += extra
            routed[worker.role].append([url(node if several else None, slot.port), *entry])
            seen = Seen(prefill=seen.prefill + (worker.role == "prefill"), dp_ranks=seen.dp_ranks + worker.inst.adp)
        if slot.spanning:
            body += _multi_node(writer, words, size, gpus_per_node, node, slot.spanning, title, slot.port, env)
        else:
            body.append((node, [f"# {title} (node {node})",
                                _line(env(node) + [_visible(slot.gpu % gpus_per_node, size)] + words
                                      + [writer.FLAG["port"], str(slot.port)]) + " &"]))
    if disaggregated:
        body.append((0, [f"# router ({writer.ROUTER_VERSION}, a package of its own: pip install "
                         f"{writer.ROUTER_VERSION.replace(' ', '==')}), on node 0: it sends each request to a prefill "
                         f"worker, then to a decode worker; clients send requests to its port {writer.ROUTER_PORT}",
                         _line(writer.router(routed["prefill"], routed["decode"])) + " &"]))
    lines += by_node(body) if several else [line for _, block in body for line in block]
    lines.append("wait")
    return "\n".join(lines) + "\n"


def by_node(body: list[tuple[int, list[str]]]) -> list[str]:
    """The lines of a script over several nodes: a line that refuses to run until NODE_RANK is set, then each
    node's lines (in node order, each node's in the order written) inside `if [ "$NODE_RANK" = N ]; then ... fi`,
    so that the one file, run on every node with that node's number, starts there only that node's commands
    (run on one node as it is, it does not start every node's servers on that node's GPUs); `planner check` reads
    the blocks back (`planner.check.engine_launch.split_commands`)."""
    nodes: dict[int, list[str]] = {}
    for node, block in body:
        nodes.setdefault(node, []).extend(block)
    last = max(nodes)
    out = [f"# the commands span nodes 0 to {last}: run this script on each node with {NODE_RANK} set to that "
           f"node's number (e.g. {NODE_RANK}=1 bash launch.sh); each starts only its own node's commands",
           f': "${{{NODE_RANK}:?set {NODE_RANK} to the number of this node, 0 to {last}}}"']
    for node in sorted(nodes):
        out += [f'if [ "${NODE_RANK}" = {node} ]; then', *("  " + line for line in nodes[node]), "fi"]
    return out


def served_length(data: dict, engine: str) -> tuple[int, str | None]:
    """(the max-model-len the script gives the engine, the comment line saying why, or None).

    When serve-plan's --max-model-len was given (request `max_model_len_given`), that length, unchanged.
    Otherwise the requests' input + output tokens rounded up to a power of two, at most the model's context under
    the engine (`specs.model.engine_context_length`) and at most the longest sequence every worker's KV pool holds
    (plan rows' `longest_context`: both engines refuse at start-up a max-model-len one sequence of which does not
    fit, vLLM 0.33.0 `vllm/v1/core/kv_cache_planning.py` check_enough_kv_cache_memory), never below input + output.

    Why a margin: the engines count the prompt after the chat template is applied, and at exactly input + output
    a templated prompt a few tokens longer than planned gets less than it asked: vLLM 0.33.0 cuts max_tokens to
    max-model-len - prompt and refuses a prompt longer than max-model-len ('Input length ... exceeds model's
    maximum context length', `vllm/entrypoints/serve/utils/api_utils.py` get_max_tokens); SGLang 0.5.23 refuses
    prompt + max_new_tokens > context-length ('Requested token count exceeds the model's maximum context length',
    `srt/managers/tokenizer_manager.py` _validate_one_request, unless auto-truncation is on).

    Why not shorter where the pool would not hold the planned batch (max-num-seqs) of sequences that long (rows'
    `longest_at_concurrency`; the length was capped there until 2026-12-02, so the README's 8B example of
    2,300-token requests served at max-model-len 2,306): an operator sets max-model-len to the context the
    requests need and lets the scheduler bound concurrency. Neither engine reserves max-model-len per request
    (KV blocks / tokens are allocated as a sequence grows) and both admit a request only while the pool has room,
    so the batch of planned-length requests runs as planned, and only requests that use the margin hold more KV
    (and may wait); vLLM itself reports the full-length count at start-up as information (`planner check` notes
    it the same way: `planner.check.engine_launch._concurrency_note`). The comment then says so."""
    req = data["request"]
    context = req["max_model_len"]
    if req.get("max_model_len_given"):
        return context, None
    from planner.specs.model import engine_context_length, load_model

    limit = engine_context_length(load_model(req["model"]), engine)
    rows = data["deployment"].get("workers") or data["deployment"]["mix"]
    pools = [row["longest_context"] for row in rows if row.get("longest_context")]
    rounded = 1 << max(context - 1, 0).bit_length()
    length = max(context, min([rounded, limit, *pools]))
    if length == context:
        return context, None
    binds = ("a power of two" if length == rounded else "the model's context under the engine" if length == limit
             else "the longest sequence a worker's KV pool holds")
    batches = [row["longest_at_concurrency"] for row in rows if row.get("longest_at_concurrency")]
    fuller = (f"; at the full {length:,} tokens a pool holds fewer than its max-num-seqs sequences (the planned batch "
              f"fits up to {min(batches):,} each): the scheduler then runs fewer at once" if batches
              and min(batches) < length else "")
    return length, (f"# max-model-len {length}: input + output = {context:,} tokens rounded up to {binds}, so that a "
                    f"prompt a few chat-template tokens longer is not refused; the KV pool and concurrency are "
                    f"planned for {context:,}-token requests (the engine allocates KV as a sequence grows){fuller}")


@dataclass(frozen=True)
class Seen:
    """Disaggregated workers written before the current one: prefill workers, data-parallel ranks."""

    prefill: int = 0
    dp_ranks: int = 0


NODE_ADDR = "NODE_ADDR"
"""The shell variable, suffixed with a node's number, that a disaggregated script spanning nodes names for
the address of that node (the router's worker URLs, the workers' advertised addresses)."""


def node_address(node: int) -> Raw:
    """The address of `node` as a shell placeholder the shell refuses to expand while unset."""
    name = f"{NODE_ADDR}_{node}"
    return Raw(f'"${{{name}:?set {name} to the address of node {node}}}"')


def url(node: int | None, port: int) -> Raw | str:
    """A worker's URL for the router: the loopback when the deployment is on one node (None), else the
    address of its node as a placeholder (`node_address`)."""
    if node is None:
        return f"http://127.0.0.1:{port}"
    return Raw(f'"http://{node_address(node)[1:-1]}:{port}"')


def _label(worker: Worker) -> str:
    """A replica kind as the plan's tables spell it (`tp8 dp8 @64`: shape, then its batch), so that the
    comments of different kinds differ."""
    return f"{worker.inst.label} @{worker.concurrency:,}"


class Raw(str):
    """A word written into the script as it is, not shell-quoted (a `${VAR:?message}` placeholder)."""


def _line(words: list[str]) -> str:
    return " ".join(w if isinstance(w, Raw) else shlex.quote(w) for w in words if w)


def _visible(first: int, size: int) -> str:
    return "CUDA_VISIBLE_DEVICES=" + ",".join(str(first + i) for i in range(size))


def placeholder(name: str, node: int) -> Raw:
    """The shell placeholder for the address of node rank 0 of a multi-node instance: `${NAME:?...}`,
    which the shell refuses to expand (the command does not start) until the user sets NAME."""
    return Raw(f'"${{{name}:?set {name} to the address of node {node}, node rank 0 of this instance}}"')


def _multi_node(writer, words: list[str], size: int, gpus_per_node: int, first_node: int, number: int,
                title: str, port: int, env) -> list[tuple[int, list[str]]]:
    """(node, its lines) of one instance over several nodes: one command per node, node rank 0 first,
    each with the engine's node flags (`writer.node_flags`) and the address of node rank 0 as a
    placeholder the user sets; the HTTP port on node rank 0 only (the other nodes serve no API);
    `env(node)`: the environment words of the command on that node.

    Raises:
        SpecError: GPUs that do not divide evenly over the nodes (both engines need world % nnodes == 0).
    """
    nodes = -(-size // gpus_per_node)
    if size % nodes:
        raise SpecError(f"an instance of {size} GPUs does not divide over {nodes} nodes of {gpus_per_node} "
                        f"GPUs; both engines start world / nnodes ranks per node", key="--emit")
    per_node, head = size // nodes, f"{writer.NODE_HEAD}_{number}"
    out = []
    prefix = _visible(0, per_node) if per_node < gpus_per_node else ""
    for rank in range(nodes):
        node_words = words + writer.node_flags(nodes, rank, placeholder(head, first_node), number)
        if rank == 0:
            node_words += [writer.FLAG["port"], str(port)]
        out.append((first_node + rank, [
            f"# {title}: {size} GPUs over {nodes} nodes ({per_node} per node), nodes {first_node} to "
            f"{first_node + nodes - 1}, with {head} set to the address of node {first_node} (node rank 0); "
            f"node rank {rank}: node {first_node + rank}",
            _line(env(first_node + rank) + [prefix] + node_words) + " &"]))
    return out


def checked(data: dict, engine: str, model_ref: str, cluster_ref: str, gpus_per_node: int,
            mla: bool = False) -> tuple[str, dict]:
    """(the script, `planner check` of it read back with the plan's model, cluster and GPUs)."""
    from planner.check.engine_file import check_launch_file

    text = script(data, engine, model_ref, gpus_per_node, mla)
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
             flag["max_num_batched_tokens"], str(worker.max_num_batched_tokens or req["max_num_batched_tokens"])]
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


def model_name(spec, ref: str) -> str:
    """What the command serves: the model's serving Hugging Face id (`planner.specs.hf_ids.serving_id`: the id
    given as the model, else a catalog model's -Instruct release where it lists one, else its hf_id), else the
    reference given (a local checkpoint's path)."""
    from planner.specs.hf_ids import serving_id

    return serving_id(spec) or ref
