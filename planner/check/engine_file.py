"""`planner check` of a serving engine's launch file (vLLM or SGLang): which engine a file
launches (`reader_of`), and its check (`check_launch_file`): the readers of `planner.check.vllm`
and `planner.check.sglang`, the rules of `planner.check.engine_launch`.

A file is a vLLM launch when it holds a `vllm serve` / `vllm.entrypoints.openai.api_server`
command line or is a vLLM `--config` YAML, an SGLang launch when it holds a
`sglang.launch_server` / `sglang serve` command line (whatever its name: .sh, .txt, .yaml).
CRLF line endings of a command-line file (not of a YAML config), which break a command's backslash
continuations (bash runs each line as a command of its own), are the error `crlf_line_endings`
(`planner.check.lines.shell_layout`, shared with the Megatron-LM and torchtitan readers, with broken
backslash continuations and a byte-order mark).
The model is the command's (model path, catalog name or a catalog model's Hugging Face id) unless
`--model` gives it; `--cluster` gives the GPUs (required); `--gpus` the GPUs the file may use
(default: those the commands' CUDA_VISIBLE_DEVICES list, else the cluster's count, or more where the commands
name node ranks after the first: every node they name).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from planner.check import engine_launch as el
from planner.check import engine_router
from planner.check import lines as line_index
from planner.check import sglang, vllm
from planner.errors import SpecError
from planner.placement.rules import Violation
from planner.specs import files, hf_ids

READERS = (vllm, sglang)
"""Engine readers, tried in order."""
ACCEPTS = ("a vLLM launch (`vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server ...`, "
           "or a vLLM --config YAML)", "an SGLang launch (`python -m sglang.launch_server ...`)")
"""What these readers accept, for the message naming the kinds `planner check` reads."""


def reader_of(path: str | Path):
    """The engine reader of a file (`vllm` or `sglang` module), or None (unreadable files too:
    the other readers report them)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if vllm.looks_like(text):
        return vllm
    if sglang.looks_like(text):
        return sglang
    if Path(path).suffix in (".yaml", ".yml"):
        try:
            mapping = files.read_mapping(Path(path), "vLLM config keys")
        except SpecError:
            return None
        return vllm if vllm.is_config(mapping) else None
    return None


def check_launch_file(path: str | Path, *, model: str | None = None, cluster: str | None = None,
                      gpus: int | None = None, seq_len: int | None = None) -> dict:
    """`engine_launch.evaluate` of every launch in the file (module docstring), and of its router when the
    launches are disaggregated workers (`engine_router.findings`: its findings among the violations, and
    `routers` [{line, router, port, prefill, decode}] when the file has one).

    Raises:
        SpecError: not an engine launch, no --cluster, a model that does not resolve, a value the engine
            refuses. --seq-len is not applied (the command's max-model-len / context-length says the context):
            the warning `option_not_used` says so.
    """
    reader = reader_of(path)
    file = str(path)
    if reader is None:
        raise SpecError("not a vLLM or SGLang launch", file=file)
    text = files.read_text(Path(path), kind="engine launch")
    mapping = None
    if Path(path).suffix in (".yaml", ".yml"):
        mapping = files.read_mapping(Path(path), "vLLM config keys")
    kind, commands = reader.commands(Path(path), text, mapping)
    hw = el.load_cluster_for(cluster, file)
    refs = {reader.model_ref(c) for c in commands}
    model_flag = reader.VOCABULARY.FLAG["model"]
    if model is None and len(refs) > 1:
        raise SpecError(f"the launches serve different models ({', '.join(sorted(map(str, refs)))}); check one "
                        f"model per file", file=file, key=model_flag)
    spec = el.resolve_model(next(iter(refs)), model, file, model_flag)
    if model is not None:
        _quantized_name(commands, reader, spec, model, file)
    with el.values_collected(file):  # every command's bad input in one run, as every bad value of one
        launches = [el.aside(lambda c=c: reader.launch(c, spec, hw, file), None) for c in commands]
    named = max((c.node.nodes_named for c in commands if c.node is not None), default=0)
    nodes = max(gpus // hw.gpus_per_node if gpus else 0, named, 1)
    launches = [_placed(c, launch, reader, nodes) for c, launch in zip(commands, launches)]
    visible = [launch.visible_gpus for launch in launches]
    allowed = gpus or (sum(visible) if all(visible) else hw.num_gpus)
    if gpus is None and any(launch.node_rank > 0 or launch.copies > 1 for launch in launches):
        # the file names nodes after the first itself (node ranks of an instance over several nodes, a branch of
        # several nodes): the GPUs of every node it names, as a torchrun node count in a Megatron script does
        allowed = max(allowed, el.spanned_gpus(launches, hw.gpus_per_node))
    if gpus is None:  # the nodes the file's NODE_RANK branches name (an `else` branch: one node more)
        allowed = max(allowed, named * hw.gpus_per_node)
    result = el.evaluate(file, kind, spec, hw, allowed, launches, reader.spell,
                         given=gpus is not None or not all(visible))
    rows, found = engine_router.findings(reader.VOCABULARY.ENGINE, reader.VOCABULARY, text, commands, launches)
    if rows:
        result["routers"] = rows
    result["violations"] += [{"rule": v.rule, "severity": v.severity, "message": v.message, "fix": v.fix,
                              "line": line} for line, v in found]
    if any(v.severity == "error" for _, v in found):
        result["verdict"] = "fail"
    clashes = [{"rule": v.rule, "severity": v.severity, "message": v.message, "fix": v.fix, "line": line}
               for line, v in one_machine(commands, launches, reader, hw.gpus_per_node, file)]
    clashes += [{"rule": v.rule, "severity": v.severity, "message": v.message, "fix": v.fix, "line": v.line}
                for v in (line_index.shell_layout(text, file) if mapping is None else [])]
    shared = [v for v in clashes if v["rule"] == "gpus_shared"]  # the cause of a world size over a node's GPUs
    result["violations"] = shared + result["violations"] + [v for v in clashes if v["rule"] != "gpus_shared"]
    result["verdict"] = "fail" if clashes else result["verdict"]
    if seq_len is not None:
        result["violations"].append(_unused_seq_len(seq_len, reader, commands[0].line))
    _point_at_flags(result, text, sorted({c.line for c in commands} | {r["line"] for r in rows}))
    return result


def _placed(command: el.Command, launch: el.Launch, reader, nodes: int) -> el.Launch:
    """`launch` with the nodes its command runs on (`el.Launch.node`, `.copies`) among the file's `nodes`: a server
    in a branch of several node ranks starts on each (at least one); a per-node command of an instance over several
    nodes (`--node-rank $NODE_RANK`, `el.per_node`) on each of the instance's nodes its branch covers (all of them
    outside a branch); another command of a multi-node instance on its own node."""
    ranks = command.node
    if el.per_node(command, reader.VOCABULARY.FLAG["node_rank"]) and launch.nnodes > 1:
        copies = ranks.count(launch.nnodes) if ranks is not None else launch.nnodes
    elif launch.nnodes > 1 or ranks is None:
        copies = 1
    else:
        copies = ranks.count(nodes)
    return replace(launch, node=ranks, copies=max(copies, 1))


def _unused_seq_len(seq_len: int, reader, line: int) -> dict:
    """The warning `option_not_used` for --seq-len: a launch's context is its own max-model-len flag (or the
    model's length), so the option is not applied; a warning, not bad input, so that one `planner check` (a
    pre-commit hook's args) can cover training configs that need --seq-len and engine launches together."""
    flag = reader.VOCABULARY.FLAG["max_model_len"]
    return {"rule": "option_not_used", "severity": "warning", "line": line,
            "message": f"--seq-len {seq_len} is not used for an engine launch: its context is its {flag} (or the "
                       f"model's length without it); the option applies to the training configs checked with it",
            "fix": f"set {flag} in the launch to change its context"}




def _quantized_name(commands: list[el.Command], reader, spec, model: str, file: str) -> None:
    """Bad input when `check --model` gives 16-bit weights (no quantization) for a launch that serves a checkpoint
    its id names quantized and whose command sets no quantization flag: the check would cost the weights at twice
    (fp8) or four times (4-bit) their size, a false out-of-memory (fresh-user review 8 finding 12).

    Raises:
        SpecError: naming the id, the word and the two ways out."""
    flag = reader.VOCABULARY.FLAG["quantization"]
    if spec.weight_format is not None:
        return
    for command in commands:
        ref = str(reader.model_ref(command) or "")
        quantized = hf_ids.quantized_name(ref)
        if quantized is not None and flag not in command.flags:
            raise SpecError(f"--model {model} has 16-bit weights, but the launch serves {ref}, named a "
                            f"{quantized.upper()} checkpoint: its weights would be costed at 16 bits; give --model "
                            f"the checkpoint's directory with its config.json (its quantization_config is read), or "
                            f"omit --model if the catalog knows the id, or set {flag} in the launch",
                            file=file, key="--model")


def _point_at_flags(result: dict, text: str, starts: list[int]) -> None:
    """Move each finding's line from its command's first line to the line of the first flag its
    message (else its fix) names, inside that command (`planner.check.lines`)."""
    rows = text.splitlines()
    for violation in result["violations"]:
        start = violation["line"]
        end = next((s for s in sorted(starts) if s > start), len(rows) + 1)
        found = line_index.locate(line_index.flag_lines("\n".join(rows[start - 1:end - 1])),
                                  violation["message"], violation["fix"])
        if found:
            violation["line"] = start + found - 1




def one_machine(commands: list[el.Command], launches: list[el.Launch], reader, gpus_per_node: int,
                file: str) -> list[tuple[int, Violation]]:
    """(line, finding) for servers of one file that would share a port or GPUs (the second fails at start-up:
    its HTTP server cannot bind the port, or its KV pool finds the memory taken). Servers are the commands
    that start an API server (node rank 0 of a multi-node instance; later nodes run workers only). The port
    is the port flag or the engine's default (`reader.DEFAULT_PORT`), for a container the host port it is
    published on (`el.host_port`; none without a mapping): rule port_in_use. GPUs are those a container's GPU
    request exposes (`el.container_devices`), else those CUDA_VISIBLE_DEVICES lists, else the first ones of the
    node: rule gpus_shared. Servers inside a node's
    block (`if [ "$NODE_RANK" = N ]; then ... fi`, as `serve-plan --emit` writes a file over several nodes)
    are compared with those of their block only; servers outside any block, only when together they fit on
    one node (a hand-written file of several nodes' commands lists the same device numbers on each node)."""
    flag, out = reader.VOCABULARY.FLAG["port"], []
    nodes: dict[int | None, list] = {}
    for command, launch in zip(commands, launches):
        if launch.node_rank == 0:
            nodes.setdefault(command.node, []).append((command, launch))
    for node, servers in nodes.items():
        out += _one_node(servers, node, flag, reader, gpus_per_node, file)
    return out


def _one_node(servers: list, node: el.Ranks | None, flag: str, reader, gpus_per_node: int,
              file: str) -> list[tuple[int, Violation]]:
    """`one_machine`'s findings among the servers of one node (`node`: the NODE_RANK block they are in;
    None: servers outside any block, taken as one machine where they fit one node's GPUs)."""
    out, ports = [], {}
    where = "" if node is None else f" (both on {_node_words(node)}: {NODE_RANK_WORDS})"
    for command, launch in servers:
        inside = el.integer(command, flag, reader.DEFAULT_PORT, file)
        port = el.host_port(command, inside)
        if port is None:
            continue
        if port in ports:
            out.append((command.line, Violation(
                rule="port_in_use", message=f"the server of line {command.line} listens on port {port}, as does "
                                            f"line {ports[port]}{where}: the second fails to bind it at start-up",
                fix=(f"{flag} {max(ports) + 1} (a port of its own)" if command.image is None else
                     f"publish it on a host port of its own: {el.CONTAINER_PUBLISH[0]} {max(ports) + 1}:{inside}"))))
        ports.setdefault(port, command.line)
    if node is None and sum(launch.here or launch.world for _, launch in servers) > gpus_per_node:
        return out
    taken: dict[str, int] = {}
    for command, launch in servers:
        listed = command.env.get(el.VISIBLE)
        devices = el.container_devices(command, gpus_per_node)
        seen, where_set = f"{el.CONTAINER_GPUS} {command.gpu_request}", f'{el.CONTAINER_GPUS} \'"device=..."\''
        if devices is None:
            devices = ([d.strip() for d in listed.split(",") if d.strip()] if listed is not None
                       else [str(i) for i in range(launch.here or launch.world)])
            seen = f"{el.VISIBLE} {listed if listed is not None else 'unset: the first GPUs'}"
            where_set = el.VISIBLE
        shared = sorted({d for d in devices if d in taken}, key=str)
        if shared:
            fits = ("the servers of this file fit on one node" if node is None
                    else f"both run on {_node_words(node)} ({NODE_RANK_WORDS})")
            out.append((command.line, Violation(
                rule="gpus_shared",
                message=f"the server of line {command.line} runs on GPU(s) {','.join(shared)}, as does line "
                        f"{taken[shared[0]]} ({seen}); "
                        f"{fits}, where the second finds the memory taken",
                fix=f"give each server its own GPUs in {where_set}")))
        for d in devices:
            taken.setdefault(d, command.line)
    return out


NODE_RANK_WORDS = "the same node-rank branch"
"""How a finding names the node block two servers share."""


def _node_words(node: el.Ranks) -> str:
    """`node N`, `nodes 0, 1`, or for an `else` branch `the nodes other than N` (`el.Ranks`)."""
    return str(node)


