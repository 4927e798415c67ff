"""Reader of vLLM launches for `planner check`: `vllm serve MODEL ...` and `python -m
vllm.entrypoints.openai.api_server ...` command lines (a `.sh` / `.txt` file, one launch per
command; `--config FILE` merged under the command line's flags), and vLLM `--config` YAML files
on their own (`is_config`: a mapping with `model` whose every key is a vLLM flag without its
dashes). Names and defaults: `planner.frameworks.vllm` (vLLM 0.33.0).

vLLM's layout (`vllm/config/parallel.py`): one server of tp x pp x dp ranks. For a dense model
the dp ranks are independent replicas (`replicas = dp`); for an MoE model attention runs data
parallel over dp groups of tp ranks and the experts span all dp x tp ranks, split by expert
with expert parallelism on (FLAG['ep']) and tensor-parallel without it (`Instance(tp=dp x tp, adp=dp)`).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import yaml

from planner.check import engine_launch as el
from planner.cost import serving as sv
from planner.errors import SpecError
from planner.frameworks import vllm as v
from planner.placement.rules import Violation
from planner.specs.cluster import ClusterSpec
from planner.specs.limits import MAX_SEQ_LEN
from planner.specs.model import ModelSpec, engine_context_length

VOCABULARY = v
"""The flag table this reader reads."""
KIND_COMMAND = "vllm-command"
KIND_CONFIG = "vllm-config"
_LAUNCH = re.compile(r"(?<![\w.-])(vllm\s+serve|vllm\.entrypoints\.openai\.api_server)(?![\w.-])"
                     r"|(?<![\w.-])vllm/vllm-openai(?![\w.-]|/)")


def looks_like(text: str) -> bool:
    """Whether the text launches vLLM's OpenAI server."""
    return bool(_LAUNCH.search(text))


def _flag_of(key: str) -> str:
    return "--" + str(key).replace("_", "-")


def is_config(mapping: dict | None) -> bool:
    """A vLLM `--config` YAML: `model`, no `kind` (planner's own files), and at least two keys that
    are vLLM flags (dash or underscore form) making at least half of its keys; the others are
    checked as unknown flags."""
    if not isinstance(mapping, dict) or "model" not in mapping or "kind" in mapping:
        return False
    known = sum(_flag_of(k) in v.ALL_FLAGS for k in mapping)
    return known >= 2 and 2 * known >= len(mapping)


def config_flags(mapping: dict) -> dict[str, str | bool]:
    """A config mapping's keys as flags (FlexibleArgumentParser: `key: value` is `--key value`,
    `key: true` a switch, `key: false` leaves it unset; parsed as the command line, abbreviations
    included: `engine_launch.option`)."""
    out: dict[str, str | bool] = {}
    for key, value in mapping.items():
        flag = el.option(_flag_of(key), v.ALL_FLAGS, v.ALIASES)
        if value is True:
            out[flag] = True
        elif value is False or value is None:
            continue
        else:
            out[flag] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return out


def commands(path: Path, text: str, mapping: dict | None) -> tuple[str, list[el.Command]]:
    """(kind, the launches of the file).

    Raises:
        SpecError: shell syntax, a `--config` file that does not read, no launch in the file.
    """
    file = str(path)
    if mapping is not None and is_config(mapping):
        flags = config_flags(mapping)
        return KIND_CONFIG, [el.Command(line=1, env={}, positional=[], flags=flags,
                                        spelled={f: f for f in flags})]
    found = el.split_commands(text, file, v.LAUNCHERS, v.ALIASES, v.SWITCHES, underscores=True,
                              known=v.ALL_FLAGS, images=v.IMAGES)
    out = []
    for command in found:
        if command.doubled:
            raise SpecError(f"the image {command.image}'s entrypoint is already `vllm serve`: the words after the image "
                            f"are its arguments, so `{' '.join(command.doubled)}` again makes vLLM exit 'unrecognized "
                            f"arguments' (vllm-project/vllm docker/Dockerfile: ENTRYPOINT [\"vllm\", \"serve\"]); write "
                            f"the model and the flags right after the image", file=file, key=f"line {command.line}")
        config = command.flags.get(v.CONFIG)
        if isinstance(config, str):
            from planner.specs import files
            where = Path(config) if Path(config).is_absolute() else path.parent / config
            extra = files.read_mapping(where, "vLLM config keys")
            unknown = [k for k in extra if el.option(_flag_of(k), v.ALL_FLAGS, {}) not in v.ALL_FLAGS]
            if unknown:
                raise SpecError(f"key {unknown[0]!r} is not a vLLM flag (vLLM's config parser exits on it)",
                                file=str(where), key=str(unknown[0]))
            given = config_flags(extra)
            merged = {**given, **command.flags}
            from_file = [f for f in given if f not in command.flags]  # the command line's flags win
            keys = {el.option(_flag_of(k), v.ALL_FLAGS, v.ALIASES): str(k) for k in extra}
            command = replace(command, flags=merged,
                              spelled={**{f: f for f in merged}, **{f: keys[f] for f in from_file}, **command.spelled},
                              origin={f: str(where) for f in from_file})
        out.append(command)
    if not out:
        raise SpecError("no `vllm serve` command line in the file", file=file)
    return KIND_COMMAND, out


def model_ref(command: el.Command) -> str | None:
    """The model a command means: its model flag, else its first positional word (what `vllm serve` reads:
    it moves `--model M` to the front as its positional model_tag; the api_server module ignores a
    positional word, `stray_arguments` says so)."""
    value = command.flags.get(v.FLAG["model"])
    if not isinstance(value, str) and command.positional:
        value = command.positional[0]
    return value if isinstance(value, str) else None


def stray_arguments(command: el.Command) -> list[Violation]:
    """Positional words vLLM's parser does not take. Its launch parser has one positional argument, the
    model (`model_tag`, nargs '?': vLLM 0.33.0 `vllm/entrypoints/common/cli_args.py` make_arg_parser), and
    `vllm serve` moves `--model M` to the front as that positional (`vllm/utils/argparse_utils.py`
    FlexibleArgumentParser.parse_args), so with `vllm serve` every word past the model is left over and
    argparse exits 2 'unrecognized arguments: WORD' (rule unrecognized_argument, an error like an unknown
    flag). A word after a switch is the usual cause: `--enforce-eager true` -- the switch takes no value
    (BooleanOptionalAction, `--no-enforce-eager` its negation). The module `python -m
    vllm.entrypoints.openai.api_server` parses the same positional but never reads it
    (`vllm/entrypoints/launchers/api_server/entry.py` main passes args.model, default Qwen/Qwen3-0.6B; only
    `vllm/entrypoints/cli/serve.py` copies model_tag into model): rule model_ignored (error) when it is the
    only model named, a warning when --model names one."""
    model_flag, words = v.FLAG["model"], command.positional
    serve = command.launcher == v.LAUNCHERS[0]
    has_flag = isinstance(command.flags.get(model_flag), str)
    out = []
    if not serve and words:
        first = words[0]
        out.append(Violation(
            rule="model_ignored", severity="warning" if has_flag else "error",
            message=f"python -m {v.LAUNCHERS[1][0]} ignores the positional word {first!r} (only `vllm serve` reads "
                    f"a positional model); it serves {model_flag} "
                    + (f"{command.flags[model_flag]}" if has_flag else f"(absent: {v.DEFAULT_MODEL}, vLLM's default)")
                    + f" ({v.VERSION} entrypoints/launchers/api_server/entry.py)",
            fix=f"remove {first}" if has_flag else f"{model_flag} {first}, or `vllm serve {first}`"))
        words = words[1:]
    elif serve:
        words = words if has_flag else words[1:]
    for word in words:
        switch = command.after_switch.get(word)
        why = f"{switch} is a switch and takes no value, so {word!r} is read as a positional argument; " if switch else ""
        negation = f"--no-{switch[2:]}" if switch and f"--no-{switch[2:]}" in v.ALL_FLAGS else None
        out.append(Violation(
            rule="unrecognized_argument",
            message=f"{why}vLLM's argument parser exits with 'unrecognized arguments: {word}' (its only positional "
                    f"argument is the model{', already given' if serve else ''}; {v.VERSION} "
                    f"entrypoints/common/cli_args.py make_arg_parser)",
            fix=f"remove {word}" + (f" ({switch} alone turns it on" + (f", {negation} off)" if negation else ")")
                                     if switch else "")))
    return out


HUMAN_INT = {**{k: (10**e, True) for k, e in (("k", 3), ("m", 6), ("g", 9), ("t", 12))},
             **{k: (2**e, False) for k, e in (("K", 10), ("M", 20), ("G", 30), ("T", 40))}}
"""Suffixes of the integer flags vLLM parses human-readably (suffix -> multiplier, decimals allowed): lower case
decimal ('1k' = 1,000, '25.6k' = 25,600), upper case binary ('1K' = 1,024; no decimals). Source: vLLM 0.33.0
(g4ba787ec9) `vllm/utils/argparse_utils.py` human_readable_int / human_readable_int_or_auto ('-1' or 'auto': fit
max_model_len to memory); `vllm/engine/arg_utils.py` EngineArgs.add_cli_args: max_model_len takes
human_readable_int_or_auto; max_num_batched_tokens, kv_cache_memory_bytes (and others) human_readable_int."""


def _instance_seqs(seqs: int | None, dp: int, spec: ModelSpec) -> int | None:
    """The running sequences a command allows its instance: the max-num-seqs cap applies per data-parallel
    rank (vLLM 0.33.0 vllm/config/scheduler.py), and an MoE model's dp ranks form one instance
    (attention DP); a dense model's dp ranks are replicas, each holding `seqs`."""
    return seqs * dp if seqs is not None and spec.is_moe else seqs


DEFAULT_PORT = 8000
"""The HTTP server's port when its port flag is absent. Source: vLLM 0.33.0 `vllm/entrypoints/common/cli_args.py` FrontendArgs.port."""


_RELEASE_TAG = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+.].*)?")
"""An image tag that names a release: `v0.6.3`, `0.10.1`, `v0.11.0-cu128`."""


def image_version(command: el.Command) -> list[Violation]:
    """Rule image_version (warning): the command runs vLLM's image at a tag naming another release than the
    one modelled (`v.VERSION`), whose defaults cost it -- the check cannot know an old release's defaults.
    gpu_memory_utilization is named when the launch leaves it to the default (0.92 in 0.33.0,
    `vllm/config/cache.py` line 215; 0.9 in older releases: vllm-project/vllm pull request 2162, 2023, documents
    'default value of 0.9'; the release that changed it is not established here)."""
    tag = (command.image or "").split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    match = _RELEASE_TAG.fullmatch(tag)
    modelled = v.VERSION.split()[1]
    if not match or tuple(int(x or 0) for x in match.groups()) == tuple(int(x) for x in modelled.split(".")):
        return []
    named = ".".join(x for x in match.groups() if x is not None)
    fraction = v.FLAG["fraction"]
    default = (f"; with no {fraction} the KV budget is 0.33.0's default {v.DEFAULT_FRACTION:g} of GPU memory "
               f"(older releases used 0.9)" if fraction not in command.flags else "")
    return [Violation(rule="image_version", severity="warning",
                      message=f"the image {command.image} runs vLLM {named}; this check models {v.VERSION} and "
                              f"costs the launch with that release's defaults{default}",
                      fix=f"pass {fraction} to pin the budget" if default else "")]


def launch(command: el.Command, spec: ModelSpec, hw: ClusterSpec, file: str) -> el.Launch:
    """The Launch of one vLLM command (module docstring).

    Raises:
        SpecError: a degree, length or fraction that is no number the parser takes, a value the
            planner does not model (the KV-cache dtype, the quantization method).
    """
    f, flags = v.FLAG, command.flags
    tp = el.integer(command, f["tp"], 1, file)
    pp = el.integer(command, f["pp"], 1, file)
    dp = el.integer(command, f["dp"], 1, file)
    ep_on = flags.get(f["ep"]) is True and f["ep_off"] not in flags
    findings = el.unknown_flags(command, v.ALL_FLAGS, "vLLM", v.VERSION) + stray_arguments(command)
    weights, mismatch = el.aside(lambda: el.weight_format(command, f["quantization"], v.QUANTIZATION, spec, file,
                                                          "vLLM"), (spec.weight_format or "bf16", []))
    findings += mismatch or _quantization_source(command, spec)
    if ep_on and not spec.is_moe:
        findings.append(Violation(rule="expert_parallel_unused", severity="warning",
                                  message=f"{f['ep']} on {spec.name}, which has no routed experts: no effect",
                                  fix=f"remove {f['ep']}"))
    if f["a2a"] in flags and not ep_on:
        findings.append(Violation(rule="all2all_unused", severity="warning",
                                  message=f"{f['a2a']} {flags[f['a2a']]} without {f['ep']}: vLLM dispatches "
                                          f"tokens to experts by all-to-all only under expert parallelism",
                                  fix=f"add {f['ep']} or remove {f['a2a']}"))
    findings += el.aside(lambda: _dtype_findings(command, hw, weights, file), [])
    findings += image_version(command)
    findings += el.aside(lambda: el.container_gpus(command, file), (None, []))[1]
    nnodes = el.integer(command, f["nnodes"], 1, file)
    node_rank = el.node_rank(command, f["node_rank"], file)
    findings += _multi_node(command, nnodes, node_rank)
    if ep_on and flags.get(f["a2a"]) == v.DEEPEP_PREFILL:   # DeepEP's normal-mode kernels over the tp x dp ranks
        findings += el.deepep_findings(tp * dp, "vllm", f"{f['a2a']} {v.DEEPEP_PREFILL}")
    if spec.is_moe:
        inst = sv.Instance(tp=tp * dp, pp=pp, ep=tp * dp if ep_on else 1, adp=dp)
        replicas = 1
    else:
        inst, replicas = sv.Instance(tp=tp, pp=pp), dp
    max_model_len = el.human_integer(command, f["max_model_len"], engine_context_length(spec, v.ENGINE), file,
                                     HUMAN_INT, auto=True, high=MAX_SEQ_LEN)
    length = engine_context_length(spec, v.ENGINE) if max_model_len == -1 else max_model_len
    seqs = el.integer(command, f["max_num_seqs"], None, file)
    batched, batch_findings = _batched_tokens(command, hw, length, seqs, file)
    findings += batch_findings
    return el.Launch(
        engine=v.ENGINE, line=command.line, inst=inst, replicas=replicas,
        fraction=el.fraction(command, f["fraction"], v.DEFAULT_FRACTION, file),
        fraction_given=f["fraction"] in command.flags,
        max_model_len=length,
        fit_max_model_len=max_model_len == -1,
        max_num_seqs=_instance_seqs(seqs, dp, spec),
        max_num_batched_tokens=batched,
        kv_pool_bytes=el.human_integer(command, f["kv_pool_bytes"], None, file, HUMAN_INT),
        weight_format=weights,
        kv_dtype=el.choice(command, f["kv_dtype"], v.KV_DTYPES, file, "KV-cache dtypes") or "bf16",
        visible_gpus=el.aside(lambda: el.visible_gpus(command, file), None), visible_from=el.visible_from(command), nnodes=nnodes, node_rank=node_rank,
        rendezvous=el.rendezvous_address(command, f["master_addr"]),
        role="disaggregated" if _hands_over_kv(flags.get(f["kv_transfer"])) else None, flag=f,
        degrees={k: n for k, n in ((f["tp"], tp), (f["pp"], pp), (f["dp"], dp)) if n > 1 or k == f["tp"]},
        findings=tuple(findings))


def chunked_prefill(command: el.Command) -> bool:
    """Whether the command leaves chunked prefill on: the last of FLAG['chunked_prefill'] and its negations
    (`planner.frameworks.vllm.CHUNKED_PREFILL_OFF`) it gives, on when it gives none."""
    given = [flag for flag in command.flags if flag in (v.FLAG["chunked_prefill"], *v.CHUNKED_PREFILL_OFF)]
    return not given or given[-1] == v.FLAG["chunked_prefill"]


def _batched_tokens(command: el.Command, hw: ClusterSpec, max_model_len: int, seqs: int | None,
                    file: str) -> tuple[int, list[Violation]]:
    """(the tokens one forward pass schedules, findings), as vLLM 0.33.0 (g4ba787ec9) sets and checks them.

    Unset, max_num_batched_tokens is the GPU's default (`default_batch`), raised to max_model_len when chunked
    prefill is off (a whole prompt is one pass) and cut to max_num_seqs x max_model_len (`engine/arg_utils.py`
    _set_default_max_num_seqs_and_batched_tokens_args). Given, vLLM refuses at start-up (ValueError from
    `config/scheduler.py` SchedulerConfig.verify_max_model_len): with chunked prefill off, fewer than
    max_model_len ('max_num_batched_tokens (B) is smaller than max_model_len (L). This effectively limits the
    maximum sequence length to max_num_batched_tokens ...'; rule batched_tokens_below_max_model_len), and with
    max_num_seqs given, fewer than max_num_seqs ('must be greater than or equal to max_num_seqs'; rule
    batched_tokens_below_max_num_seqs; unset, max_num_seqs is cut to the batched tokens instead)."""
    f = v.FLAG
    default, default_seqs = v.default_batch(hw.gpu.memory_gib, hw.gpu.name)
    chunked = chunked_prefill(command)
    given = el.human_integer(command, f["max_num_batched_tokens"], None, file, HUMAN_INT)
    if given is None:
        batched = default if chunked else max(max_model_len, default)
        return min((seqs or default_seqs) * max_model_len, batched), []
    out = []
    if not chunked and given < max_model_len:
        off = next(flag for flag in reversed(list(command.flags)) if flag in v.CHUNKED_PREFILL_OFF)
        out.append(Violation(
            rule="batched_tokens_below_max_model_len",
            message=f"{f['max_num_batched_tokens']} {given} < {f['max_model_len']} {max_model_len} with "
                    f"{command.spelled.get(off, off)}: a prompt is prefilled in one pass of at most {given} tokens, "
                    f"so vLLM refuses to start ('max_num_batched_tokens ({given}) is smaller than max_model_len "
                    f"({max_model_len})'; {v.VERSION} config/scheduler.py verify_max_model_len)",
            fix=f"{f['max_num_batched_tokens']} {max_model_len}, or {f['max_model_len']} {given}, or remove "
                f"{command.spelled.get(off, off)} (chunked prefill splits long prompts)"))
    if seqs is not None and given < seqs:
        out.append(Violation(
            rule="batched_tokens_below_max_num_seqs",
            message=f"{f['max_num_batched_tokens']} {given} < {f['max_num_seqs']} {seqs}: vLLM refuses to start "
                    f"('max_num_batched_tokens ({given}) must be greater than or equal to max_num_seqs ({seqs})'; "
                    f"{v.VERSION} config/scheduler.py verify_max_model_len)",
            fix=f"{f['max_num_batched_tokens']} {seqs}, or {f['max_num_seqs']} {given}"))
    return given, out


def _hands_over_kv(config) -> bool:
    """Whether a KV-transfer config (FLAG["kv_transfer"]) runs a connector that hands KV from prefill to decode
    instances (`planner.frameworks.vllm.PD_CONNECTORS`, also inside a MultiConnector): a disaggregated worker.
    A value that is no JSON object counts as one (vLLM refuses it at start-up; the flag's intent is
    disaggregation)."""
    if config is None:
        return False
    try:
        parsed = json.loads(config) if isinstance(config, str) else None
    except ValueError:
        return True
    if not isinstance(parsed, dict):
        return True
    names = {parsed.get("kv_connector")}
    extra = parsed.get("kv_connector_extra_config")
    inner = extra.get("connectors") if isinstance(extra, dict) else None
    names |= {c.get("kv_connector") for c in inner if isinstance(c, dict)} if isinstance(inner, list) else set()
    return bool(names & v.PD_CONNECTORS)


CHECKPOINT_CONFIG_FILES = {"awq": ("quantize_config.json", "quant_config.json"),
                           "awq_marlin": ("quantize_config.json", "quant_config.json"),
                           "gptq": ("quantize_config.json",), "gptq_marlin": ("quantize_config.json",),
                           "modelopt_fp4": ("hf_quant_config.json",)}
"""Quantization methods (the quantization flag) that read the checkpoint's quantization parameters -> the files vLLM looks for when
config.json has no quantization_config. Source: vLLM 0.33.0 (g4ba787ec9)
`vllm/model_executor/model_loader/weight_utils.py` get_quant_config (config.json's quantization_config,
else a file named by the method's get_config_filenames, else 'Cannot find the config file for <method>');
`layers/quantization/auto_awq.py` AutoAWQConfig (awq, awq_marlin) and `auto_gptq.py` AutoGPTQConfig (gptq,
gptq_marlin) get_config_filenames; `modelopt.py` hf_quant_config.json. fp8 and mxfp4 have no such files:
on an unquantized checkpoint they quantize online."""
METHOD_FAMILIES = {"awq": ("awq", "awq_marlin", "auto_awq", "marlin"), "gptq": ("gptq", "gptq_marlin", "auto_gptq",
                                                                             "marlin")}
"""A checkpoint's quant_method -> the quantization flag values vLLM accepts for it. Source: vLLM 0.33.0
`vllm/config/model.py` ModelConfig._verify_quantization (an override method claims the checkpoint only
for these user values: `auto_awq.py` / `auto_gptq.py` override_quantization_method; any other value
that differs from the checkpoint's quant_method raises 'Quantization method specified in the model
config (awq) does not match the quantization method specified in the `quantization` argument (gptq)')."""


def _quantization_source(command: el.Command, spec: ModelSpec) -> list[Violation]:
    """Rule quantization_mismatch for what `el.weight_format` cannot see (both are int4 to the cost
    model): an AWQ checkpoint given the method gptq or the reverse (METHOD_FAMILIES), and a method that
    reads the checkpoint's quantization parameters on a checkpoint that has none (CHECKPOINT_CONFIG_FILES:
    no quantization_config in config.json, and, for a local model directory, none of the method's files)."""
    flag = v.FLAG["quantization"]
    method = command.flags.get(flag)
    own = spec.extra.get("checkpoint_quant_method")
    if not isinstance(method, str):
        return []
    if own in METHOD_FAMILIES and method in v.QUANTIZATION and method not in METHOD_FAMILIES[own]:
        return [Violation(rule="quantization_mismatch",
                          message=f"{flag} {method} but {spec.name}'s checkpoint is quant_method {own} (config.json "
                                  f"quantization_config): vLLM refuses the mismatch at start-up ('Quantization method "
                                  f"specified in the model config ({own}) does not match ...'; {v.VERSION} "
                                  f"config/model.py _verify_quantization)",
                          fix=f"{flag} {own}, or remove {flag} (the checkpoint's method is read)")]
    files = CHECKPOINT_CONFIG_FILES.get(method)
    if own is not None or files is None:
        return []
    ref = model_ref(command)
    if ref and Path(ref).is_dir() and any((Path(ref) / name).is_file() for name in files):
        return []
    return [Violation(rule="quantization_mismatch",
                      message=f"{flag} {method} on {spec.name}, an unquantized checkpoint (no quantization_config, "
                              f"no {' / '.join(files)}): vLLM fails at load ('Cannot find the config file for "
                              f"{method}'; {v.VERSION} model_loader/weight_utils.py get_quant_config) -- {method} "
                              f"loads pre-quantized weights, it does not quantize",
                      fix=f"serve a checkpoint quantized with {method.split('_')[0].upper()}, or remove {flag} "
                          f"(fp8 quantizes online)")]


def _dtype_findings(command: el.Command, hw: ClusterSpec, weights: str, file: str) -> list[Violation]:
    """The dtype flag on a GPU without bf16 (its peak_tflops has none: V100). vLLM 0.33.0 refuses an explicit
    bfloat16 there (`vllm/platforms/cuda.py` CudaPlatform.check_if_supports_dtype: 'Bfloat16 is only
    supported on GPUs with compute capability of at least 8.0 ... use float16 instead', called by
    `vllm/v1/worker/gpu_worker.py` at start-up); with dtype auto (the default) it falls back to
    float16 with a warning (`vllm/config/model.py` _resolve_auto_dtype: bfloat16 is not among
    CudaPlatform.supported_dtypes below 8.0), 2 bytes per element as bf16."""
    flag = v.FLAG["dtype"]
    dtype = el.choice(command, flag, v.DTYPES, file, "dtypes")
    if dtype == "fp32":
        raise SpecError(f"value {command.flags[flag]!r} not modelled: vLLM then holds unquantized weights and the "
                        f"KV cache in 4 bytes per element, twice bf16, and the serving cost model has 2-byte and "
                        f"quantized formats only; allowed: "
                        f"{', '.join(k for k, d in v.DTYPES.items() if d != 'fp32')}",
                        file=file, key=command.spelled.get(flag, flag))
    if "bf16" in hw.gpu.peak_tflops:
        return []
    half = next(k for k, d in v.DTYPES.items() if d == "fp16")
    if dtype == "bf16":
        return [Violation(rule="dtype_unsupported",
                          message=f"{flag} {command.flags[flag]} on {hw.gpu.name}, which has no bf16: vLLM exits at "
                                  f"start-up ('Bfloat16 is only supported on GPUs with compute capability of at "
                                  f"least 8.0'; {v.VERSION} platforms/cuda.py check_if_supports_dtype)",
                          fix=f"{flag} {half}")]
    if dtype is None and weights == "bf16":
        return [Violation(rule="dtype_fallback", severity="warning",
                          message=f"{hw.gpu.name} has no bf16: vLLM runs the bf16 checkpoint in float16 (its auto "
                                  f"dtype falls back, config/model.py _resolve_auto_dtype); same 2 bytes per element",
                          fix=f"{flag} {half} to say so")]
    return []


def _multi_node(command: el.Command, nnodes: int, node_rank: int) -> list[Violation]:
    """An instance over several nodes (multiprocessing backend, what vLLM picks on CUDA when
    nnodes > 1: `vllm/config/parallel.py` ParallelConfig.__post_init__): every node names node rank
    0's address (FLAG['master_addr']; its default 127.0.0.1 makes each node rendezvous with itself), and the
    nodes after the first run FLAG['headless'] (`vllm/entrypoints/cli/serve.py` run_headless: a node whose
    node_rank_within_dp > 0 starts the headless multiproc executor for multi-node TP/PP; the API server
    runs on node rank 0). Source: vLLM 0.33.0 (g4ba787ec9)."""
    f = v.FLAG
    out = el.rendezvous(command, nnodes, f["master_addr"], "HOST")
    if nnodes > 1 and node_rank > 0 and command.flags.get(f["headless"]) is not True:
        out.append(Violation(rule="multi_node_headless", severity="warning",
                             message=f"{f['node_rank']} {node_rank} without {f['headless']}: a node after the first "
                                     f"runs only workers (vLLM's headless executor); the API server is node rank 0's",
                             fix=f"add {f['headless']}"))
    return out


def spell(tp: int, pp: int, replicas: int) -> str:
    """A layout in this engine's flags (`engine_launch.spell_layout`)."""
    return el.spell_layout(v.FLAG, tp, pp, replicas)
