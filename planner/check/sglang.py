"""Reader of SGLang launches for `planner check`: `python -m sglang.launch_server ...` and
`sglang serve ...` command lines (a `.sh` / `.txt` file, one launch per command). Names and
defaults: `planner.frameworks.sglang` (SGLang 0.5.23).

SGLang's layout (flags: `planner.frameworks.sglang.FLAG`): tp_size is the world of one replica
across all its nodes (not per node), of which attn_dp_size groups run attention data parallel (the
deprecated dp_size N with enable_dp_attention means attn_dp_size N); ep_size splits the routed
experts inside the tp ranks, and an all-to-all backend among `A2A_SPANNING` sets it to tp; dp_size
counts replicas of tp x pp ranks (`Instance(tp, pp, ep, adp)`, `replicas = dp`). Under attention data
parallelism each group prefills its share of the chunk: the chunked-prefill size is divided by
attn_dp_size (`srt/arg_groups/parallel_hook.py` @0.5.23), so a GPU's forward holds size / adp tokens,
and the running-requests cap (FLAG['max_num_seqs']) is the instance's total, of which each group runs
max(1, value // adp) (`srt/mem_cache/kv_cache_configurator.py` resolve_max_num_reqs; a value adp does not
divide is a warning).
"""

from __future__ import annotations

import re
from pathlib import Path

from planner.check import engine_launch as el
from planner.cost import serving as sv
from planner.errors import SpecError
from planner.frameworks import sglang as s
from planner.placement.rules import Violation
from planner.specs.cluster import ClusterSpec
from planner.specs.limits import MAX_SEQ_LEN
from planner.specs.model import ModelSpec, engine_context_length

VOCABULARY = s
"""The flag table this reader reads."""
KIND = "sglang-command"
_LAUNCH = re.compile(r"(?<![\w.-])(sglang\.launch_server|sglang\s+serve)(?![\w.-])")


def looks_like(text: str) -> bool:
    """Whether the text launches an SGLang server."""
    return bool(_LAUNCH.search(text))


def commands(path: Path, text: str, mapping: dict | None) -> tuple[str, list[el.Command]]:
    """(kind, the launches of the file). Raises: SpecError (shell syntax, no launch)."""
    found = el.split_commands(text, str(path), s.LAUNCHERS, s.ALIASES, s.SWITCHES, underscores=False,
                                known=s.ALL_FLAGS)
    if not found:
        raise SpecError("no `python -m sglang.launch_server` command line in the file", file=str(path))
    return KIND, found


def model_ref(command: el.Command) -> str | None:
    value = command.flags.get(s.FLAG["model"])
    return value if isinstance(value, str) else None


HUMAN_INT = {**{k: (10**e, True) for k, e in (("k", 3), ("M", 6), ("G", 9), ("T", 12))},
             **{k: (2**e, False) for k, e in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40))}}
"""Suffixes of the integer flags SGLang parses human-readably (suffix -> multiplier, decimals allowed),
case-sensitive: SI k, M, G, T ('25.6k' = 25,600, decimal arithmetic), IEC Ki, Mi, Gi, Ti (no decimals).
Source: SGLang 0.5.23 `srt/utils/common.py` human_readable_int; `srt/arg_groups/fields/model.py`
context_length and `fields/schedule.py` max_total_tokens take it (type_parser=human_readable_int)."""


DEFAULT_PORT = 30000
"""The HTTP server's port when its port flag is absent. Source: SGLang 0.5.23 `srt/arg_groups/fields/serving.py` port."""


def launch(command: el.Command, spec: ModelSpec, hw: ClusterSpec, file: str) -> el.Launch:
    """The Launch of one SGLang command (module docstring), with SGLang's own findings: DP attention
    (deprecated spelling, with replicas, dividing tp), the expert-parallel size against its
    all-to-all backend, and tp_size read as per node.

    Raises:
        SpecError: a degree, length or fraction the parser does not take, a value not modelled.
    """
    f, flags = s.FLAG, command.flags
    tp = el.integer(command, f["tp"], 1, file)
    pp = el.integer(command, f["pp"], 1, file)
    dp = el.integer(command, f["dp"], 1, file)
    adp = el.integer(command, f["adp"], 1, file)
    ep = el.integer(command, f["ep"], 1, file)
    redundant = el.integer(command, f["redundant_experts"], 0, file, low=0)
    nnodes = el.integer(command, f["nnodes"], 1, file)
    a2a = str(flags.get(f["a2a"], s.A2A_NONE))
    findings = el.unknown_flags(command, s.ALL_FLAGS, "SGLang", s.VERSION, s.RENAMED)
    weights, mismatch = el.aside(lambda: el.weight_format(command, f["quantization"], s.QUANTIZATION, spec, file,
                                                          "SGLang"), (spec.weight_format or "bf16", []))
    findings += mismatch
    findings += el.aside(lambda: el.container_gpus(command, file), (None, []))[1]
    if flags.get(f["dp_attention"]) is True:
        if adp == 1 and dp > 1:
            adp, dp = dp, 1
            findings.append(Violation(
                rule="dp_attention_deprecated", severity="warning",
                message=f"{f['dp']} {adp} {f['dp_attention']} is read as {f['adp']} {adp} "
                        f"(attention data parallel inside the {tp} tp ranks, not {adp} replicas)",
                fix=f"write {f['adp']} {adp}"))
        elif dp == 1 and adp == 1:
            findings.append(Violation(rule="dp_attention_unused", severity="warning",
                                      message=f"{f['dp_attention']} without {f['dp']}: one attention group, no effect",
                                      fix=f"{f['adp']} N (N dividing {f['tp']} {tp})"))
    if adp > 1 and dp > 1:
        findings.append(Violation(rule="dp_attention", message=f"{f['dp']} {dp} with {f['adp']} {adp}: SGLang "
                                  f"refuses replicas combined with attention data parallelism",
                                  fix=f"{f['adp']} {adp} alone, or {f['dp']} {dp} alone"))
    if tp % adp:
        findings.append(Violation(rule="dp_attention", message=f"{f['adp']} {adp} does not divide {f['tp']} {tp}",
                                  fix=f"{f['adp']} among the divisors of {tp}"))
        adp = 1
    ep = _expert_parallel(spec, tp, ep, a2a, findings)
    role = el.choice(command, f["disagg_mode"], {m: m for m in s.DISAGG_MODES}, file, "disaggregation roles")
    findings += _deepep(command, ep, a2a, role)
    if "bf16" not in hw.gpu.peak_tflops:
        findings.append(Violation(
            rule="legacy_gpu", severity="warning",
            message=f"{hw.gpu.name} has no bf16: SGLang runs float16 below compute capability 8.0 and exits below 7.5 "
                    f"('SGLang only supports sm75 and above'; {s.VERSION} model_runner_components/load_model_utils.py "
                    f"maybe_downgrade_dtype_for_legacy_gpu): a V100 (7.0) does not start", fix=""))
    node_rank = el.node_rank(command, f["node_rank"], file)
    findings += _multi_node(command, nnodes, dp)
    if nnodes > 1 and tp * pp % nnodes == 0 and tp * pp // nnodes < hw.gpus_per_node:
        findings.append(Violation(
            rule="tp_per_node", severity="warning",
            message=f"{f['tp']} {tp} x {f['pp']} {pp} over {f['nnodes']} {nnodes} uses {tp * pp // nnodes} of the "
                    f"{hw.gpus_per_node} GPUs of each node: {f['tp']} is the total over all nodes, not per node",
            fix=f"{f['tp']} {hw.gpus_per_node * nnodes // pp} to use every GPU"))
    max_running = el.integer(command, f["max_num_seqs"], None, file)
    findings += _running_per_rank(max_running, adp)
    dense_dp = _dense_dp(command, tp, adp, a2a, file, findings)
    gpu_mib = hw.gpu.memory_gib * 1024
    chunk = el.integer(command, f["max_num_batched_tokens"], None, file, low=-2**63)  # argparse type=int
    prefill_cap = el.human_integer(command, f["max_prefill_tokens"], s.MAX_PREFILL_TOKENS, file, HUMAN_INT, exact=True)
    max_model_len = el.human_integer(command, f["max_model_len"], engine_context_length(spec, s.ENGINE), file,
                                     HUMAN_INT, exact=True, high=MAX_SEQ_LEN)
    default_chunk, _ = s.gpu_defaults(gpu_mib, tp)
    default_fraction = s.default_mem_fraction_static(
        gpu_mib, tp=tp, pp=pp, chunked_prefill_size=chunk, max_running_requests=max_running, mla=spec.is_mla,
        attn_dp=adp, role=role, a2a=a2a, max_prefill_tokens=prefill_cap)
    if s.chunking_off(chunk):
        forward_tokens = s.prefill_tokens(prefill_cap, max_model_len)
        findings += _whole_prompt_prefill(command, chunk, prefill_cap, max_model_len)
    else:
        forward_tokens = s.rank_chunk(chunk or default_chunk, adp)
    inst = sv.Instance(tp=tp, pp=pp, ep=ep, adp=adp, redundant=redundant if ep > 1 else 0, dense_dp=dense_dp)
    fraction = el.fraction(command, f["fraction"], default_fraction, file)
    why = "" if f["fraction"] in command.flags or default_fraction > 0 else _negative_default(
        s.default_reserve_mib(gpu_mib, tp=tp, pp=pp, chunked_prefill_size=chunk, max_running_requests=max_running,
                              mla=spec.is_mla, attn_dp=adp, role=role, a2a=a2a, max_prefill_tokens=prefill_cap),
        gpu_mib, adp)
    if adp > hw.scaleup_domain_gpus and not s.chunking_off(chunk) and f["kv_tokens_cap"] not in command.flags:
        findings += _headroom(spec, hw, inst, fraction, forward_tokens, role)
    return el.Launch(
        engine=s.ENGINE, line=command.line, inst=inst, replicas=dp,
        fraction=fraction,
        fraction_given=f["fraction"] in command.flags, fraction_why=why,
        max_model_len=max_model_len,
        kv_tokens_cap=el.human_integer(command, f["kv_tokens_cap"], None, file, HUMAN_INT, exact=True),
        max_num_seqs=None if max_running is None else s.instance_running_requests(max_running, adp),
        max_num_batched_tokens=forward_tokens,
        weight_format=weights,
        kv_dtype=el.choice(command, f["kv_dtype"], s.KV_DTYPES, file, "KV-cache dtypes") or "bf16",
        visible_gpus=el.aside(lambda: el.visible_gpus(command, file), None), visible_from=el.visible_from(command), nnodes=nnodes, node_rank=node_rank,
        rendezvous=el.rendezvous_address(command, f["dist_init"]), role=role,
        flag=f, degrees={k: n for k, n in ((f["tp"], tp), (f["pp"], pp), (f["dp"], dp)) if n > 1 or k == f["tp"]},
        findings=tuple(findings))


def _whole_prompt_prefill(command: el.Command, chunk: int, prefill_cap: int, max_model_len: int) -> list[Violation]:
    """`prefill_not_chunked` (warning): chunked prefill off with a context longer than SGLang's activation
    reserve. SGLang starts (unlike vLLM, which refuses max_num_batched_tokens < max_model_len with chunked
    prefill off, `check.vllm._batched_tokens`): it prefills a prompt of up to the context length in one forward
    (`frameworks.sglang.CHUNKED_PREFILL_OFF`) but sizes mem_fraction_static for max(FLAG['max_prefill_tokens'],
    2048) tokens (`frameworks.sglang.default_mem_fraction_static`). The check costs that forward at the
    whole context (`frameworks.sglang.prefill_tokens`), so whether it fits is the memory verdict."""
    f = s.FLAG
    reserved = max(prefill_cap, 2048)
    if max_model_len <= reserved:
        return []
    spelled = command.spelled.get(f["max_num_batched_tokens"], f["max_num_batched_tokens"])
    return [Violation(
        rule="prefill_not_chunked", severity="warning",
        message=f"{spelled} {chunk} (chunked prefill off) with {f['max_model_len']} {max_model_len:,}: SGLang "
                f"prefills a prompt of up to {max_model_len:,} tokens in one forward (the first request of a batch "
                f"is admitted above {f['max_prefill_tokens']} {prefill_cap:,}; {s.VERSION} "
                f"managers/schedule_policy.py) but reserves activation memory for max({prefill_cap:,}, 2048) "
                f"= {reserved:,} tokens (arg_groups/memory_hook.py); checked with {max_model_len:,} tokens per "
                f"forward",
        fix=f"remove {spelled} {chunk} (chunked prefill splits long prompts), or {f['max_model_len']} {reserved} "
            f"(prompts SGLang's reserve covers)")]


def _headroom(spec: ModelSpec, hw: ClusterSpec, inst: sv.Instance, fraction: float, tokens: int,
              role: str | None) -> list[Violation]:
    """`sglang_headroom` (warning): an instance whose attention DP spans nodes with a mem_fraction_static that leaves
    less beside the weights and KV pool than the planner models it allocating there after the pool
    (`cost.serving.sglang_headroom` without SGLang's floor: the forward's activations at `tokens` per rank, with the
    dense MLPs' gathered tokens under default dense TP, CUDA graphs, DeepEP's buffers); its first large forwards may
    run out of memory. Not checked under a KV token cap (FLAG["kv_tokens_cap"]), whose smaller pool leaves more free.
    LMSYS gives the gathered buffer as its reason for data-parallel dense MLPs (lmsys.org/blog/
    2025-05-05-large-scale-ep, "Dense FFNs")."""
    f = s.FLAG
    _, graph_batch = s.gpu_defaults(hw.gpu.memory_gib * 1024, inst.tp)
    room = sv.sglang_headroom(spec, inst, tokens_per_rank=tokens, decode_batch_per_rank=graph_batch, role=role,
                              capacity=0)
    free = (1 - fraction) * hw.gpu.memory_bytes
    if free >= room.total:
        return []
    gathered = sv.gathered_dense_bytes(spec, inst, tokens) if role != "decode" else 0
    gib = sv.GIB
    return [Violation(
        rule="sglang_headroom", severity="warning",
        message=f"{f['fraction']} {fraction:g} leaves {free / gib:.2f} GiB per GPU beside the weights and KV pool; "
                f"the planner models {room.total / gib:.2f} GiB allocated there (activations {room.activations / gib:.2f} "
                f"at {tokens:,} tokens per attention-DP rank"
                + (f", {gathered / gib:.2f} of them the dense MLPs' gathered tokens" if gathered else "")
                + f", CUDA graphs {room.cuda_graphs / gib:.2f}, DeepEP buffers {room.deepep_buffers / gib:.2f}): "
                  f"the first large forwards may run out of memory",
        fix=f"{f['fraction']} {sv.headroom_fraction(hw.gpu.memory_bytes, room):g}, a smaller "
            f"{f['max_num_batched_tokens']}" + (f", or {f['dense_tp']} 1 {f['dp_lm_head']}" if gathered else ""))]


def _dense_dp(command: el.Command, tp: int, adp: int, a2a: str, file: str, findings: list) -> bool:
    """Whether the launch runs the dense MLPs and the LM head data-parallel (`cost.serving.Instance.dense_dp`):
    FLAG["dense_tp"] 1 with FLAG["dp_lm_head"] under attention DP. SGLang takes the dense size unset, 1 or
    tp_size (`frameworks.sglang.DENSE_TP_VALUES`; another value is its start-up assertion, here `moe_dense_tp_size`,
    an error); 1 without the DP LM head keeps the token gather of every rank (`srt/utils/common.py`
    require_mlp_tp_gather) and is costed as the default (`dense_tp_without_dp_lm_head`, a warning).

    Raises:
        SpecError: a dense size that is not an integer >= 1."""
    f = s.FLAG
    dense = el.integer(command, f["dense_tp"], None, file)
    if dense is None or dense == tp:
        return False
    if dense not in s.DENSE_TP_VALUES:
        findings.append(Violation(rule="moe_dense_tp_size",
                                  message=f"{f['dense_tp']} {dense}: SGLang takes only 1 or {f['tp']} ({tp}) "
                                          f"('moe_dense_tp_size only supports None, 1, or tp_size currently', "
                                          f"{s.VERSION} arg_groups/validation_hook.py)",
                                  fix=f"{f['dense_tp']} 1, or leave it unset"))
        return False
    if adp == 1:
        return False
    if command.flags.get(f["dp_lm_head"]) is not True or a2a == s.A2A_NONE:
        findings.append(Violation(
            rule="dense_tp_without_dp_lm_head", severity="warning",
            message=f"{f['dense_tp']} 1 without {f['dp_lm_head']} and an all-to-all {f['a2a']}: SGLang still gathers "
                    f"every attention-DP rank's tokens (require_mlp_tp_gather), costed here as the default dense TP",
            fix=f"add {f['dp_lm_head']} (with {f['a2a']} {s.A2A_DEFAULT_EMIT})"))
        return False
    return True


def _running_per_rank(max_running: int | None, adp: int) -> list[Violation]:
    """`max_running_requests_per_rank` (warning): a running-requests cap that attention data parallelism does
    not divide: SGLang runs max(1, value // adp) per rank (`frameworks.sglang.rank_running_requests`), so
    the instance runs another number than the flag says."""
    f = s.FLAG
    if max_running is None or adp == 1 or max_running % adp == 0:
        return []
    per_rank = s.rank_running_requests(max_running, adp)
    return [Violation(
        rule="max_running_requests_per_rank", severity="warning",
        message=f"{f['max_num_seqs']} {max_running} over {f['adp']} {adp}: SGLang runs max(1, {max_running} // {adp}) "
                f"= {per_rank} per attention data-parallel rank, {per_rank * adp} in the instance, not {max_running} "
                f"({s.VERSION} kv_cache_configurator.py resolve_max_num_reqs)",
        fix=f"{f['max_num_seqs']} {s.max_running_requests_flag(max_running, adp)} (a multiple of {adp})")]


def _deepep(command: el.Command, ep: int, a2a: str, role: str | None) -> list[Violation]:
    """`engine_launch.deepep_findings` where the launch runs DeepEP's normal-mode kernels: the deepep backend in mode
    normal, or in mode auto (`s.DEEPEP_MODE_DEFAULT`) outside a decode worker (batches with prefill run them)."""
    f = s.FLAG
    mode = str(command.flags.get(f["deepep_mode"], s.DEEPEP_MODE_DEFAULT))
    if a2a != s.A2A_DEEPEP or mode == "low_latency" or (mode == "auto" and role == "decode"):
        return []
    how = f"{f['a2a']} {a2a} ({f['deepep_mode']} {mode}{': its prefill batches' if mode == 'auto' else ''})"
    return el.deepep_findings(ep, "sglang", how)


def _expert_parallel(spec: ModelSpec, tp: int, ep: int, a2a: str, findings: list) -> int:
    """The expert-parallel size SGLang runs (`overrides.py` _a2a_ep_size), with findings."""
    f = s.FLAG
    if not spec.is_moe:
        if ep > 1:
            findings.append(Violation(rule="expert_parallel_unused", severity="warning",
                                      message=f"{f['ep']} {ep} on {spec.name}, which has no routed experts: no effect",
                                      fix=f"remove {f['ep']}"))
        return 1
    if a2a in s.A2A_SPANNING:
        if ep not in (1, tp):
            findings.append(Violation(
                rule="ep_overridden", severity="warning",
                message=f"{f['a2a']} {a2a} sets the expert-parallel size to {f['tp']} {tp}; {f['ep']} {ep} is ignored",
                fix=f"{f['ep']} {tp}"))
        return tp
    if ep > 1:
        findings.append(Violation(
            rule="ep_without_all2all", severity="warning",
            message=f"{f['ep']} {ep} with {f['a2a']} {a2a}: SGLang does split the experts {ep} ways (not EP 1), "
                    f"but with no all-to-all every rank runs all tokens of the tp group through its "
                    f"{spec.num_experts // ep if spec.num_experts % ep == 0 else '?'} experts and the MoE output is "
                    f"all-reduced over {f['tp']} {tp} ({s.VERSION} StandardDispatcher, FusedMoE.forward)",
            fix=f"{f['a2a']} {s.A2A_DEFAULT_EMIT} to dispatch tokens by all-to-all (it sets the EP size to "
                f"{f['tp']} {tp})"))
    if tp % ep:
        findings.append(Violation(rule="experts_by_ep", message=f"{f['ep']} {ep} does not divide {f['tp']} {tp}",
                                  fix=f"{f['ep']} among the divisors of {tp}"))
        return 1
    return ep


def _negative_default(terms: dict[str, float], gpu_mib: float, adp: int) -> str:
    """Why SGLang's default mem_fraction_static is not positive: the reserve of `s.default_reserve_mib` exceeds
    the GPU's memory; its largest term, and what relaxes it (SGLang then cannot start)."""
    f = s.FLAG
    name, largest = max(terms.items(), key=lambda kv: kv[1])
    text = (f"; it is not positive because SGLang's formula reserves {sum(terms.values()) / 1024:.1f} GiB per GPU of "
            f"{gpu_mib / 1024:.2f} GiB, {name} {largest / 1024:.1f} GiB of it")
    if name == "decode graphs" and adp > 1:
        text += (f" ({adp} attention-DP ranks: {s.DEFAULT_RESERVE_WHY}); SGLang cannot start so: set {f['fraction']} "
                 f"or cap the graphs' batch with a smaller {f['max_num_seqs']}")
    else:
        text += f"; SGLang cannot start so: set {f['fraction']}"
    return text


def _multi_node(command: el.Command, nnodes: int, dp: int) -> list[Violation]:
    """An instance over several nodes: every node's command names the rendezvous of node rank 0
    (FLAG['dist_init'] HOST:PORT; without it each node initialises torch.distributed at its own
    127.0.0.1: `srt/distributed/bootstrap.py` _resolve_dist_init_method, so the nodes never form one
    group), and replicas (FLAG['dp']) do not span nodes (`srt/arg_groups/validation_hook.py`
    check_server_args: 'multi-node data-parallel replicas are not supported'). Source: SGLang 0.5.23 wheel."""
    f = s.FLAG
    out = el.rendezvous(command, nnodes, f["dist_init"], "HOST:PORT")
    if nnodes > 1 and dp > 1:
        out.append(Violation(rule="multi_node_replicas",
                             message=f"{f['dp']} {dp} with {f['nnodes']} {nnodes}: SGLang refuses replicas over "
                                     f"several nodes ('multi-node data-parallel replicas are not supported')",
                             fix=f"one launch per replica, or {f['adp']} {dp} (attention data parallel) across "
                                 f"the nodes"))
    return out


def spell(tp: int, pp: int, replicas: int) -> str:
    """A layout in this engine's flags (`engine_launch.spell_layout`)."""
    return el.spell_layout(s.FLAG, tp, pp, replicas)
