"""Command-line interface: thin typer commands that load specs, compute, and hand dicts to report.

Every command takes `--format table|json|yaml`. Errors derived from `planner.errors.PlannerError`
become one line on stderr and an exit code (SpecError 2, InfeasibleError 1), never a traceback;
usage errors (bad option values, unknown commands) become one line too and exit 2.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import sys
from enum import Enum
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from planner import __version__

from planner import report
from planner.errors import InfeasibleError, PlannerError, SpecError
from planner.frameworks import deepspeed as deepspeed_keys
from planner.frameworks import megatron as megatron_flags
from planner.frameworks import torchtitan as torchtitan_flags
from planner.placement import layout as layout_mod
from planner.placement import mtp, overlap, recompute_mix
from planner.placement import pipeline_layout as pipeline_layout_mod
from planner.placement.layout import Layout
from planner.placement.precision import (blackwell_or_later, default_fp8_recipe, published_fp8_recipe,
                                        supported_precisions)
from planner.search.mesh import FIXABLE
from planner.specs import cluster as cluster_spec
from planner.specs import model as model_spec
from planner.specs.limits import MAX_BATCH_TOKENS, MAX_GPUS, MAX_SEQ_LEN, MAX_TOP, MAX_VPP
from planner.summary import model_row, model_summary

DEFAULT_SEQ_LEN = 4096
"""Sequence length for `models show` FLOPs, and for `plan` / `explain` up to the model's context
(`default_seq_len`), when `--seq-len` is not given, tokens."""

_SEQ_LEN_HELP = ("Tokens per sequence (default: 4,096, or the model's max_position_embeddings "
                 "when that is shorter).")


def default_seq_len(spec: model_spec.ModelSpec) -> int:
    """`--seq-len` when not given: DEFAULT_SEQ_LEN, cut to the model's max_position_embeddings
    (OPT-175B, GPT-3 and BLOOM trained 2,048-token sequences: a 4,096 default would plan a context
    the model has no positions for). Source: each model file's max_position_embeddings."""
    return min(DEFAULT_SEQ_LEN, spec.max_position_embeddings)


class Format(str, Enum):
    """Output format of every command."""

    table = "table"
    json = "json"
    yaml = "yaml"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", case_sensitive=False, help="Output format.")]



class _Group(TyperGroup):
    """Root command group: PlannerError -> one line on stderr + its exit code, no traceback;
    click usage errors (bad option value, unknown command) -> one line + exit 2."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PlannerError as exc:
            report.error(str(exc))
            raise typer.Exit(exc.exit_code) from None

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        argv = list(args[0]) if args and args[0] is not None else sys.argv[1:]
        report.prepare_streams()
        repeated = _repeated_option(self, argv)
        if repeated:
            report.error(f"planner: {repeated} given twice; give it once (only --fix and --offload "
                         f"repeat) (see --help)")
            sys.exit(2)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.Abort:
            report.error("aborted")
            sys.exit(1)
        except OSError as exc:  # stdout on a full disk or closed (`>&-`)
            report.error(f"cannot write the output: {exc.strerror or exc}")
            sys.exit(1)
        except Exception as exc:  # click's UsageError / ClickException (vendored by newer typer)
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `planner`: the help, as typed --help
                report.line(exc.format_message())
                sys.exit(0)
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else ""
            hint = " (see --help)" if getattr(exc, "exit_code", 1) == 2 else ""
            message = _usage_message(exc.format_message())
            given = _given_value(getattr(exc, "param", None), args[0] if args else sys.argv[1:])
            if given and (given in message or f" {given} is not in the range" in message):  # click named it
                given = ""
            report.error(f"{where}{message}{f'; got {given!r}' if given else ''}{hint}")
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def _repeated_option(group: Any, argv: list[str]) -> str | None:
    """The first option of the invoked command given twice that does not repeat (click would keep
    the last value silently: `--tp 2 --tp 4` is tp 4), or None."""
    command, rest = group, list(argv)
    while rest and hasattr(command, "commands") and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    names = {}
    for param in getattr(command, "params", ()):
        if getattr(param, "multiple", False) or not getattr(param, "opts", None) or \
                type(param).__name__ == "Argument" or getattr(param, "param_type_name", "") != "option":
            continue
        spellings = (*param.opts, *getattr(param, "secondary_opts", ()))
        for opt in spellings:
            names[opt] = "/".join(spellings)
    seen = set()
    for token in rest:
        opt = token.split("=", 1)[0] if token.startswith("--") else token
        if opt in names:
            if names[opt] in seen:
                return names[opt]
            seen.add(names[opt])
    return None


def _given_value(param: Any, argv: list[str]) -> str:
    """The value of the option a usage error names, from the command line as typed (click's messages for
    a range or type error do not always repeat it); empty when it cannot be found."""
    opts = getattr(param, "opts", None) or []
    for i, token in enumerate(argv):
        for opt in opts:
            if token == opt and i + 1 < len(argv):
                return argv[i + 1]
            if token.startswith(f"{opt}=") and opt.startswith("--"):
                return token.split("=", 1)[1]
    return ""


_CLICK_TYPES = {"int range": "an integer", "integer range": "an integer", "integer": "an integer",
                "float range": "a number", "float": "a number"}
"""click's type names in `'abc' is not a valid int range.` -> what the user is asked for."""


def _usage_message(message: str) -> str:
    """click's usage message as one clause of the error line: its closing period dropped (the line goes on
    with `; got ...` or ` (see --help)`), a type name said as the value asked for (`'abc' is not an
    integer`, not `is not a valid int range.`)."""
    for name, asked in _CLICK_TYPES.items():
        message = message.replace(f"is not a valid {name}.", f"is not {asked}.")
    return message.rstrip().rstrip(".")


def _version(value: bool) -> None:
    if value:
        report.line(f"planner {__version__}")
        raise typer.Exit()


app = typer.Typer(cls=_Group, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan how to lay a large model out over a GPU cluster.")
models_app = typer.Typer(help="Model catalog: list, or `show NAME|PATH` for one model.", rich_markup_mode=None)
hardware_app = typer.Typer(help="Cluster catalog: list, or `show NAME|PATH` for one cluster.", rich_markup_mode=None)
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Plan how to lay a large model out over a GPU cluster."""


def main() -> None:
    """Console-script entry point (`planner`)."""
    app()


def _fmt(ctx: typer.Context, fmt: Format) -> str:
    """The subcommand's --format, or the group's (`planner models -f json show X`) when left default."""
    group = (ctx.parent.obj or {}).get("format") if ctx.parent else None
    return group if fmt == Format.table and group else fmt.value


# ---------------------------------------------------------------- models

@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context, fmt: FormatOpt = Format.table) -> None:
    """List the shipped models."""
    ctx.obj = {"format": fmt.value}
    if ctx.invoked_subcommand is None:
        rows = [model_row(model_spec.load_model(name)) for name in model_spec.catalog_names()]
        report.show_models(rows, fmt.value)


@models_app.command("show")
def models_show(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NAME|PATH|HF-ID",
                                       help="Catalog name, YAML file, config.json, a directory holding one, or a "
                                            "catalog model's Hugging Face id (as -m takes).")],
    seq_len: Annotated[int, typer.Option(min=1, max=MAX_SEQ_LEN, help="Tokens per sequence for the FLOPs.")] = DEFAULT_SEQ_LEN,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one model: parameters (per layer), KV cache per token, FLOPs per token."""
    data = model_summary(model_spec.load_model(ref), seq_len=seq_len)
    # json / yaml carry the model's own config: the output loads again as a model file (`-m`)
    report.show_model(data | {"config": model_spec.model_config(ref)}, _fmt(ctx, fmt))


# ---------------------------------------------------------------- hardware

@hardware_app.callback(invoke_without_command=True)
def hardware(ctx: typer.Context, fmt: FormatOpt = Format.table) -> None:
    """List the shipped clusters."""
    ctx.obj = {"format": fmt.value}
    if ctx.invoked_subcommand is None:
        rows = [cluster_spec.to_dict(cluster_spec.load_cluster(name)) for name in cluster_spec.catalog_names()]
        report.show_clusters(rows, fmt.value)


@hardware_app.command("show")
def hardware_show(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NAME|PATH", help="Catalog name or YAML file.")],
    gpus: Annotated[int | None, typer.Option(max=MAX_GPUS, help="Cluster size in GPUs (whole nodes unless the spec allows less).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one cluster with the source of every number."""
    report.show_cluster(cluster_spec.to_dict(cluster_spec.load_cluster(ref, gpus=gpus)), _fmt(ctx, fmt))


# ---------------------------------------------------------------- explain

ModelOpt = Annotated[str, typer.Option("--model", "-m", metavar="NAME|PATH",
                                       help="Catalog name, YAML file, config.json, or a directory holding one.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", metavar="NAME|PATH", help="Catalog name or YAML file.")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", min=1, max=MAX_GPUS, help=(
    "Cluster size in GPUs (default: the cluster file's num_gpus; one node for the catalog's "
    "clusters)."))]
Recompute = Enum("Recompute", {m: m for m in layout_mod.RECOMPUTE_MODES}, type=str)
Framework = Enum("Framework", {f: f for f in layout_mod.FRAMEWORKS}, type=str)
EmitTarget = Enum("EmitTarget", {f: f for f in ("megatron", "deepspeed", "torchtitan",
                                                "torchtitan-toml")}, type=str)
"""`plan --emit`: a framework's launch configuration (`planner.emit.FRAMEWORKS`)."""
_EMIT_FRAMEWORK = {"torchtitan-toml": "torchtitan"}
"""`--emit` target -> the framework whose conventions the search uses (itself unless listed;
`planner.emit.FRAMEWORK_OF`)."""
CodeRecompute = Enum("CodeRecompute", {m: m for m in ("none", "full")}, type=str)
"""Recompute a DeepSpeed model can apply from code: whole layers (deepspeed.checkpointing)."""
Optimizer = Enum("Optimizer", {o: o for o in layout_mod.OPTIMIZERS}, type=str)
Precision = Enum("Precision", {p: p for p in layout_mod.PRECISIONS}, type=str)
Offload = Enum("Offload", {o: o for o in layout_mod.OFFLOAD_TARGETS}, type=str)
GradReduce = Enum("GradReduce", {d: d for d in layout_mod.GRAD_REDUCE_DTYPES}, type=str)
MoeDispatcher = Enum("MoeDispatcher", {d: d for d in layout_mod.MOE_DISPATCHERS}, type=str)
GradReduceOpt = Annotated[GradReduce | None, typer.Option(
    case_sensitive=False, help="Dtype of the data-parallel gradient reduction (default: the "
                               "framework's: Megatron-LM fp32 for bf16/fp8, fp16 for fp16; DeepSpeed "
                               "the compute dtype; torchtitan fp32).")]

PrecisionAwareOpt = Annotated[bool, typer.Option(
    "--precision-aware-optimizer", help="Megatron-LM's precision-aware optimizer (Transformer Engine "
                                        "FusedAdam; the dtypes below).")]
MainParams = Enum("MainParams", {d: d for d in layout_mod.OPTIMIZER_DTYPES["main_params_dtype"]}, type=str)
MainGrads = Enum("MainGrads", {d: d for d in layout_mod.OPTIMIZER_DTYPES["main_grads_dtype"]}, type=str)
Fp8Recipe = Enum("Fp8Recipe", {r: r for r in layout_mod.ALL_FP8_RECIPES}, type=str)
Fp8RecipeOpt = Annotated[Fp8Recipe | None, typer.Option(
    case_sensitive=False, help="fp8 scaling recipe under --precision fp8: Megatron-LM delayed (its default), "
                               "tensorwise, blockwise, mxfp8; torchtitan rowwise (its default), "
                               "rowwise_with_gw_hp, tensorwise (releases before 2026-04), mxfp8.")]
Fp8ParamGatherOpt = Annotated[bool | None, typer.Option(
    "--fp8-param-gather/--no-fp8-param-gather",
    help=f"Megatron-LM {megatron_flags.FLAG['fp8_param_gather']} under --precision fp8: linear weights stored "
         "and all-gathered in fp8 (explain: off unless given, its default; plan: searched under the "
         "distributed optimizer / Megatron-FSDP unless given).")]
CrossEntropyFusion = Enum("CrossEntropyFusion", {f: f for f in layout_mod.CROSS_ENTROPY_FUSIONS}, type=str)
CrossEntropyFusionOpt = Annotated[CrossEntropyFusion | None, typer.Option(
    case_sensitive=False, help="Megatron-LM's fused cross-entropy (native; te, which Megatron-LM refuses); "
                               "absent: unfused, its default. The same memory either way.")]
LossChunksOpt = Annotated[int | None, typer.Option(
    min=1, max=1_000_000, help="torchtitan's chunked loss: token chunks the head and cross-entropy run on "
                               "(no logits kept; its current presets use 8); absent or 1: the plain "
                               "cross-entropy.")]
MtpLayersOpt = Annotated[int | None, typer.Option(
    min=0, max=1_000, help=f"Multi-token-prediction layers trained (Megatron-LM "
                           f"{megatron_flags.FLAG['mtp_num_layers']}; 0: none); absent: the model's "
                           f"num_nextn_predict_layers under megatron, as NVIDIA's DeepSeek-V3 recipes "
                           f"train them, none under the other frameworks.")]
SwigluStoreOpt = Annotated[bool, typer.Option(
    "--swiglu-fp8-input-store", help="Megatron-LM's activation_func_fp8_input_store: the SwiGLU input "
                                     "saved in fp8 (a TransformerConfig field with no command-line flag "
                                     "in Megatron-LM: check and --emit cannot carry it).")]
Moment = Enum("Moment", {d: d for d in layout_mod.OPTIMIZER_DTYPES["exp_avg_dtype"]}, type=str)
MainParamsOpt = Annotated[MainParams | None, typer.Option(
    case_sensitive=False, help="Master-weight dtype of the precision-aware optimizer (default fp32).")]
MainGradsOpt = Annotated[MainGrads | None, typer.Option(
    case_sensitive=False, help="Gradient dtype of the precision-aware optimizer (default fp32; bf16 "
                               "also reduces in bf16 under bf16/fp8).")]
MomentOpt = Annotated[Moment | None, typer.Option(
    case_sensitive=False, help="Adam moment dtype of the precision-aware optimizer (default fp32).")]


RecomputeModulesOpt = Annotated[str | None, typer.Option(
    metavar="MODULE,...", help=f"Megatron {megatron_flags.FLAG['recompute_modules']}: what selective recompute "
                               f"re-runs ({', '.join(layout_mod.RECOMPUTE_MODULES)}; default core_attn; "
                               f"plan searches it unless given).")]


OffloadModulesOpt = Annotated[str | None, typer.Option(
    metavar="MODULE,...", help=f"Megatron {megatron_flags.FLAG['fine_grained_activation_offloading']} "
                               f"{megatron_flags.FLAG['offload_modules']}: the modules whose saved activations "
                               f"wait in host memory ({', '.join(layout_mod.OFFLOAD_MODULES)}, or none; "
                               f"default off; plan searches it unless given).")]


def _recompute_modules(text: str | None, framework: str) -> tuple[str, ...] | None:
    """`mla_up_proj,mlp` -> ("mla_up_proj", "mlp"); None when absent. Megatron only:
    torchtitan's and DeepSpeed's selective recompute take no module list."""
    return _modules(text, framework, "recompute_modules", layout_mod.RECOMPUTE_MODULES,
                    "its selective recompute is fixed")


def _offload_modules(text: str | None, framework: str) -> tuple[str, ...] | None:
    """`core_attn,attn_proj` -> ("core_attn", "attn_proj"); `none` -> () (off, and `plan` does
    not search it); None when absent. Megatron only."""
    if text is not None and text.strip().lower() == "none":
        return ()
    return _modules(text, framework, "offload_modules", layout_mod.OFFLOAD_MODULES,
                    "it has no module-level activation offloading")


def _modules(text: str | None, framework: str, knob: str, allowed: tuple[str, ...], other: str
             ) -> tuple[str, ...] | None:
    """Comma-separated Megatron module names of `knob` (Layout checks how they combine)."""
    if text is None:
        return None
    key = "--" + knob.replace("_", "-")
    if framework != "megatron":
        raise SpecError(f"value {text!r} is Megatron-LM's {megatron_flags.FLAG[knob]}; {framework}: {other}",
                        key=key)
    modules = tuple(m.strip() for m in text.split(",") if m.strip())
    if not modules:
        raise SpecError(f"value {text!r} names no module; allowed: {', '.join(allowed)}", key=key)
    for module in modules:
        if module not in allowed:
            raise SpecError(f"value {module!r} not allowed; allowed: {', '.join(allowed)}", key=key)
    return modules


def _precision_knobs(on: bool, **dtypes) -> dict:
    """The fp8 recipe and precision-aware optimizer knobs given (Layout field -> value; unset ones
    left out)."""
    return {**({"precision_aware_optimizer": True} if on else {}),
            **{k: _value(v) for k, v in dtypes.items() if v is not None}}


@app.command("explain")
def explain_cmd(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: GpusOpt = None,
    dp: Annotated[int | None, typer.Option(min=1, help="Data-parallel degree (default: GPUs / (tp·pp·cp)).")] = None,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Pipeline stages.")] = 1,
    cp: Annotated[int, typer.Option(min=1, help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(min=1, help="Expert-parallel degree.")] = 1,
    etp: Annotated[int, typer.Option(min=1, help="Expert tensor-parallel degree.")] = 1,
    dp_shard: Annotated[int | None, typer.Option(min=1, help="HSDP shard group (ZeRO over dp_shard, replicate across).")] = None,
    zero_stage: Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage 0-3 (3 = FSDP).")] = 0,
    micro_batch_size: Annotated[int, typer.Option(min=1, help="Sequences per micro-batch per DP rank.")] = 1,
    global_batch_size: Annotated[int | None, typer.Option(min=1, max=MAX_BATCH_TOKENS, help="Sequences per step (default: dp·micro-batch·pp, the smallest batch that fills the pipeline; `plan` defaults to ~4M tokens: give the batch `plan` printed to get its numbers).")] = None,
    seq_len: Annotated[int | None, typer.Option(min=1, max=MAX_SEQ_LEN, help=_SEQ_LEN_HELP)] = None,
    recompute: Annotated[Recompute | None, typer.Option(case_sensitive=False, help="Activation recomputation of every layer (default none).")] = None,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel", help="Megatron SP.")] = False,
    vpp: Annotated[int, typer.Option(min=1, max=MAX_VPP, help="Virtual pipeline stages per rank (interleaved 1F1B).")] = 1,
    microbatch_group_size: Annotated[int | None, typer.Option(min=1, help=(
        "Interleaved 1F1B: micro-batches run back to back through one virtual stage (Megatron "
        f"{megatron_flags.FLAG['microbatch_group_size']}, Llama 3's N; in [pp, m]; default pp). "
        "Larger holds more micro-batches in flight."))] = None,
    pipeline_layers: Annotated[str | None, typer.Option(
        metavar="N,N,...", help="Decoder layers per pipeline stage, e.g. 7,8,8,...,7 (default: even split).")] = None,
    pipeline_layout: Annotated[str | None, typer.Option(
        metavar="STRING", help=_LAYOUT_HELP)] = None,
    account_for_embedding: Annotated[bool, typer.Option(
        "--account-for-embedding", help=_EMBEDDING_HELP)] = False,
    account_for_loss: Annotated[bool, typer.Option(
        "--account-for-loss", help=_LOSS_HELP)] = False,
    recompute_per_stage: Annotated[str | None, typer.Option(
        metavar="17n/2f,20n,...", help="Recompute counts per stage as `plan` prints them (n none, s selective, f full); overrides --recompute.")] = None,
    recompute_layers: Annotated[str | None, typer.Option(
        metavar="f|fn|nn|...", help=(
            "Recompute of each decoder layer as a plan file's plan.parallelism.recompute_layers "
            "(n, s, f per layer in layer order, | between virtual stages); overrides --recompute."))] = None,
    recompute_modules: RecomputeModulesOpt = None,
    offload_modules: OffloadModulesOpt = None,
    offload: Annotated[list[Offload] | None, typer.Option(case_sensitive=False, help="State to keep in host memory (repeatable).")] = None,
    optimizer: Annotated[Optimizer, typer.Option(case_sensitive=False, help="Optimizer.")] = "adamw",
    precision: Annotated[Precision | None, typer.Option(
        case_sensitive=False, help="GEMM precision (default: bf16, or fp16 on GPUs without bf16).")] = None,
    framework: Annotated[Framework, typer.Option(case_sensitive=False, help="Conventions of this framework.")] = "megatron",
    grad_reduce_dtype: GradReduceOpt = None,
    fp8_recipe: Fp8RecipeOpt = None,
    fp8_param_gather: Fp8ParamGatherOpt = None,
    precision_aware_optimizer: PrecisionAwareOpt = False,
    main_params_dtype: MainParamsOpt = None,
    main_grads_dtype: MainGradsOpt = None,
    exp_avg_dtype: MomentOpt = None,
    exp_avg_sq_dtype: MomentOpt = None,
    cross_entropy_fusion: CrossEntropyFusionOpt = None,
    loss_chunks: LossChunksOpt = None,
    mtp_layers: MtpLayersOpt = None,
    swiglu_fp8_input_store: SwigluStoreOpt = False,
    overlap_opt: Annotated[list[str] | None, typer.Option("--overlap", metavar="NAME=on|off", help="Communication overlap (repeatable): tp-comm, grad-reduce, param-gather, ep-a2a; absent: the framework's default.")] = None,
    moe_dispatcher: Annotated[MoeDispatcher | None, typer.Option(case_sensitive=False, help="MoE token dispatcher: alltoall, or flex (DeepEP / HybridEP: one copy per node over the network); absent: the framework's default, costed as alltoall.")] = None,
    reserve_gib: Annotated[float | None, typer.Option(parser=_finite(0, 1024), metavar="FLOAT", help="CUDA context + fragmentation reserve, GiB.")] = None,
    at_risk_margin: Annotated[float, typer.Option(parser=_finite(0, 0.9), metavar="FLOAT", help="Fraction of capacity that counts as at risk.")] = 0.10,
    flash_attention: Annotated[bool, typer.Option("--flash-attention/--no-flash-attention", help=(
        "Fused attention core (FlashAttention); --no-flash-attention costs the s x s scores, as runs before 2022 did."))] = True,
    fmt: FormatOpt = Format.table,
) -> None:
    """Explain one training layout: placement, memory terms vs capacity, communication, correctness."""
    spec = model_spec.load_model(model)
    _quantized_checkpoint_note(spec)
    hw = cluster_spec.load_cluster(cluster, gpus=gpus)
    _experts_given(spec, ep=ep, etp=etp)
    seq_len = seq_len or default_seq_len(spec)
    if dp is None:
        dp = max(1, hw.num_gpus // (tp * pp * cp))
    stages = _virtual_stages(pipeline_layout, account_for_embedding, account_for_loss, spec, pp, vpp)
    vpp = len(stages) // pp if stages else vpp
    layout = Layout(
        dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp_shard=dp_shard, zero_stage=zero_stage,
        micro_batch_size=micro_batch_size, global_batch_size=global_batch_size or dp * micro_batch_size * pp,
        pipeline_layers=_layer_split(pipeline_layers, pp),
        seq_len=seq_len, recompute=_value(recompute) if recompute is not None else "none",
        recompute_modules=_recompute_modules(recompute_modules, _value(framework)),
        offload_modules=_offload_modules(offload_modules, _value(framework)) or None,
        sequence_parallel=sequence_parallel, vpp=vpp, microbatch_group_size=microbatch_group_size,
        pipeline_layout=stages,
        offload=frozenset(_value(o) for o in offload or ()), optimizer=_value(optimizer),
        precision=_precision(precision, hw), framework=_value(framework),
        grad_reduce_dtype=_value(grad_reduce_dtype), moe_dispatcher=_value(moe_dispatcher),
        **_precision_knobs(precision_aware_optimizer, fp8_recipe=_fp8_recipe(
                               fp8_recipe, hw, spec, precision=_precision(precision, hw),
                               framework=_value(framework)),
                               fp8_param_gather=fp8_param_gather or None,
                               main_params_dtype=main_params_dtype,
                               main_grads_dtype=main_grads_dtype, exp_avg_dtype=exp_avg_dtype,
                               exp_avg_sq_dtype=exp_avg_sq_dtype, cross_entropy_fusion=cross_entropy_fusion,
                               loss_chunks=loss_chunks, mtp_layers=mtp_layers,
                               swiglu_fp8_input_store=swiglu_fp8_input_store or None),
        **overlap.parse(overlap_opt))
    if layout.mtp_layers is None and (trained := mtp.mtp_layers(spec, layout)):
        layout = layout.replace(mtp_layers=trained)  # the recipe's MTP layers, shown as costed
    reserve = None if reserve_gib is None else int(reserve_gib * 2**30)
    from planner import explain as explain_api  # imported per command: `--help` stays light

    counts = _stage_recompute(recompute_per_stage, pp)
    for given, name in ((recompute, "--recompute"), (recompute_per_stage, "--recompute-per-stage")):
        if given is not None and recompute_layers is not None:
            raise SpecError(f"value {_value(given)!r} contradicts --recompute-layers {recompute_layers!r}, "
                            f"which gives every layer's recompute; give one of them", key=name)
    if counts is not None and recompute is not None:
        raise SpecError(f"value {_value(recompute)!r} contradicts --recompute-per-stage "
                        f"{recompute_per_stage!r}, which gives every stage's recompute; give one of "
                        f"them", key="--recompute")
    per_layer = _layer_recompute(recompute_layers, spec, layout)
    if per_layer is not None:
        from planner.cost.memory import stage_layers
        from planner.evaluation import stage_modes
        counts = tuple(c for _, c in stage_modes(stage_layers(spec, layout), per_layer))
    if counts is not None:
        layout = layout.replace(recompute=recompute_mix.majority(counts))
    if recompute_modules is not None and not (layout.recompute == "selective" or any(
            c.get("selective") for c in counts or ())):
        raise SpecError(f"value {recompute_modules!r} applies to selective recompute; give --recompute "
                        f"selective (or s layers in --recompute-per-stage)", key="--recompute-modules")
    data = explain_api.explain(spec, hw, layout, reserve_bytes=reserve, at_risk_margin=at_risk_margin,
                               recompute_per_stage=None if per_layer is not None else counts,
                               recompute_layers=per_layer, flash_attention=flash_attention)
    report.show_explain(data, fmt.value)
    if data["memory_verdict"] == "does_not_fit" or any(v["severity"] == "error" for v in data["violations"]):
        raise typer.Exit(1)


def _value(option: object) -> str:
    return getattr(option, "value", option)


def _precision(option: object, hw) -> str:
    """The asked precision, or bf16 where the GPU has it and fp16 where it does not (V100).

    Raises:
        SpecError: a precision the GPU's tensor cores do not run (fp8 on A100, bf16 on V100:
            `placement.precision.supported_precisions`), naming the GPU and what it runs (exit 2,
            as serve-plan refuses a weight format the GPU cannot run)."""
    if option is None:
        return "bf16" if "bf16" in hw.gpu.peak_tflops else "fp16"
    have = supported_precisions(hw.gpu.peak_tflops)
    if _value(option) not in have:
        raise SpecError(f"value {_value(option)!r} not allowed: GPU {hw.gpu.name} has no "
                        f"{_value(option)} tensor cores; it runs {', '.join(have) or 'none of them'}",
                        key="--precision")
    return _value(option)


def _fp8_recipe(option: object, hw, spec, *, precision: str, framework: str) -> str | None:
    """The asked fp8 recipe; not asked, the model's published pre-training recipe under Megatron-LM
    at fp8 (`precision.default_fp8_recipe`, said on stderr with its source), else None (the
    framework's default).

    Raises:
        SpecError: mxfp8 on a GPU before Blackwell, which Transformer Engine refuses (the placement
            rule `precision_supported` for a config file; exit 2 here, as for --precision)."""
    if option is None:
        default = default_fp8_recipe(spec, precision=precision, framework=framework)
        if default is not None:
            report.note(f"--fp8-recipe {default}: {spec.name}'s published pre-training recipe "
                        f"({published_fp8_recipe(spec)[1]}); give --fp8-recipe to cost another")
        elif framework == "torchtitan" and precision == "fp8":
            default = torchtitan_flags.FP8_RECIPE_DEFAULT
            report.note(f"--fp8-recipe {default}: torchtitan {torchtitan_flags.CLI_COMMIT}'s float8 recipe "
                        f"(tensorwise is gone since 6348d93d1; communication stays bf16); give --fp8-recipe "
                        f"tensorwise for an older release")
        return default
    allowed = {"megatron": layout_mod.FP8_RECIPES, "torchtitan": layout_mod.TORCHAO_FP8_RECIPES}.get(framework)
    if allowed is not None and _value(option) not in allowed:
        raise SpecError(f"value {_value(option)!r} not allowed under {framework}; allowed: "
                        f"{', '.join(allowed)}", key="--fp8-recipe")
    if _value(option) == "mxfp8" and not blackwell_or_later(hw.gpu.name):
        # the alternatives named are the framework's own and only on a GPU with fp8 at all (fresh-user
        # review 13, finding 7: torchtitan was told to use delayed / blockwise, an A100 to use any)
        if "fp8" not in hw.gpu.peak_tflops:
            instead = "it has no fp8 tensor cores at all, so no --fp8-recipe applies (train bf16)"
        else:
            others = [r for r in (allowed or layout_mod.FP8_RECIPES) if r != "mxfp8"]
            instead = f"use {', '.join(others[:-1])} or {others[-1]}" if len(others) > 1 else f"use {others[0]}"
        raise SpecError(f"value 'mxfp8' not allowed: GPU {hw.gpu.name} has no MXFP8 (it needs compute "
                        f"capability 10.0, Blackwell); {instead}", key="--fp8-recipe")
    return option


def _experts_given(spec, **degrees: int) -> None:
    """An expert degree above 1 on a model without routed experts is bad input (exit 2), for
    `explain --ep/--etp` as for `plan --fix ep=/etp=` (`planner.specs.model.check_expert_degrees`)."""
    model_spec.check_expert_degrees(spec, degrees, key_of=lambda key: f"--{key}")


# ---------------------------------------------------------------- plan

_LAYOUT_HELP = (f"Layers per virtual stage as Megatron's {megatron_flags.FLAG['pipeline_layout']}, "
                f'e.g. "Et|(tt|)*30mL" (sets vpp).')
_EMBEDDING_HELP = (f"Megatron {megatron_flags.FLAG['account_for_embedding']}: the embedding takes a "
                   f"layer slot of the first virtual stage.")
_LOSS_HELP = (f"Megatron {megatron_flags.FLAG['account_for_loss']}: the loss takes a layer slot of "
              f"the last virtual stage.")
"""explain's help for the pipeline-layout options (Megatron's flag names from its table)."""

_FIX_INTS = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "micro_batch_size", "vpp")


def _check_writable(path: str, inputs: tuple[str, ...] = (), key: str = "--output") -> None:
    """Refuse an -o path (or the file of option `key`, e.g. --plot) that cannot be written, or
    that is one of the command's input files (writing the plan would destroy it), before any work
    is done (exit 2)."""
    import os
    from pathlib import Path

    if path == "-":  # stdout
        return
    target = Path(path)
    for given in inputs:
        source = Path(given)
        source = source / "config.json" if source.is_dir() else source
        if target.exists() and source.is_file() and os.path.samefile(target, source):
            raise SpecError(f"{path} is the input {given}: writing the plan would overwrite it; "
                            f"give another file name", key=key)
    if not path.strip():
        raise SpecError("empty file name", key=key)
    if target.is_dir():
        raise SpecError(f"{path} is a directory; give a file name such as {target / 'plan.yaml'}", key=key)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise SpecError(f"folder {parent} does not exist", key=key)
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise SpecError(f"{path} is not writable", key=key)


def _stage_recompute(text: str | None, pp: int) -> tuple[dict[str, int], ...] | None:
    """`17n/2f,20n,21n,20n` -> ({none: 17, full: 2}, {none: 20}, ...) (`recompute_mix.parse`)."""
    return None if text is None else recompute_mix.parse(text, pp)


def _layer_recompute(text: str | None, spec, layout: Layout) -> tuple[str, ...] | None:
    """`--recompute-layers` (`recompute_mix.parse_layers`) -> each decoder layer's mode; its |
    groups must be those a plan file writes (`evaluation.layer_groups`)."""
    if text is None:
        return None
    from planner.evaluation import layer_groups
    return recompute_mix.parse_layers(text, spec.num_hidden_layers, layer_groups(spec, layout),
                                      key="--recompute-layers")


def _virtual_stages(text: str | None, embedding: bool, loss: bool, spec, pp: int,
                    vpp: int) -> tuple[str, ...] | None:
    """`--pipeline-layout` parsed (its stage count sets vpp), or Megatron's account-for split of
    the model's layers over pp x vpp; None when neither is given. Megatron takes one or the other
    (`transformer_config.py` asserts it)."""
    if text is None:
        if not (embedding or loss):
            return None
        return pipeline_layout_mod.account_for_split(spec.num_hidden_layers, pp, vpp,
                                                     embedding=embedding, loss=loss)
    if embedding or loss:
        raise SpecError("--pipeline-layout places the embedding and loss itself; drop "
                        "--account-for-embedding / --account-for-loss", key="--pipeline-layout")
    stages = pipeline_layout_mod.parse(text, pp)
    if vpp not in (1, len(stages) // pp):
        raise SpecError(f"value {text!r} has {len(stages)} virtual stages = pp x {len(stages) // pp}, "
                        f"not pp x vpp = {pp} x {vpp}; drop --vpp (the layout sets it)",
                        key="--pipeline-layout")
    return stages


def _layer_split(text: str | None, pp: int) -> tuple[int, ...] | None:
    """`--pipeline-layers 7,8,...,7` -> (7, 8, ..., 7); its length must be pp."""
    if text is None:
        return None
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SpecError(f"value {text!r} must be comma-separated integers, one per stage", key="--pipeline-layers") from None
    if len(counts) != pp or min(counts) < 1:
        raise SpecError(f"value {text!r} must list {pp} positive layer counts (one per pipeline stage)",
                        key="--pipeline-layers")
    return counts


FIX_SHORT_NAMES = {"zero": "zero_stage", "b": "micro_batch_size", "mbs": "micro_batch_size",
                   "micro_batch": "micro_batch_size", "sp": "sequence_parallel", "vp": "vpp"}
"""The short names `plan`'s own messages and labels print (`zero=0 b=1`, `SP`) and the field's
abbreviations -> the `--fix` key they stand for, which the unknown-key error suggests."""


def _fix_items(items: list[str]) -> list[str]:
    """The pins of `--fix` values, a comma-separated list in one value being several pins
    (`--fix tp=8,pp=2`, as helm's `--set a=1,b=2`; no pin's value holds a comma): an empty pin is bad
    input."""
    pins = []
    for item in items:
        for pin in item.split(","):
            if not pin.strip():
                raise SpecError(f"{item!r} has an empty pin; write key=value, several as tp=8,pp=2 or one "
                                f"--fix each", key="--fix")
            pins.append(pin.strip())
    return pins


def _unknown_fix_key(key: str, item: str, allowed: tuple[str, ...]) -> SpecError:
    """The bad-input error of a `--fix` key that is not one of `allowed`, suggesting the key a short name
    stands for (`FIX_SHORT_NAMES`: zero -> zero_stage) or the closest allowed key."""
    close = ([FIX_SHORT_NAMES[key]] if FIX_SHORT_NAMES.get(key) in allowed
             else difflib.get_close_matches(key, allowed, n=1, cutoff=0.6))
    hint = f"did you mean {close[0]}? " if close else ""
    return SpecError(f"unknown key {key!r} in {item!r}; {hint}allowed keys: {', '.join(allowed)}", key="--fix")


def parse_fix(items: list[str]) -> dict:
    """`--fix key=value` pins (several in one value as `tp=8,pp=2`, `_fix_items`): integers for degrees
    and knobs, true/false for sequence_parallel, a recompute mode for recompute. Anything else is a
    SpecError naming the allowed keys (and the key a short name such as zero stands for)."""
    fixed: dict = {}
    allowed = ", ".join(FIXABLE)
    for item in _fix_items(items):
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise SpecError(f"{item!r} must be key=value; allowed keys: {allowed}", key="--fix")
        if key not in FIXABLE:
            raise _unknown_fix_key(key, item, FIXABLE)
        value = _fix_value(key, raw.strip())
        if key in fixed and fixed[key] != value:
            raise SpecError(f"{key} pinned twice ({key}={fixed[key]} and {key}={value}); pin it once",
                            key="--fix")
        fixed[key] = value
    if fixed.get("zero_stage", 0) not in (0, 1, 2, 3):
        raise SpecError(f"zero_stage={fixed['zero_stage']} not allowed; allowed: 0, 1, 2, 3", key="--fix")
    return fixed


def _fix_value(key: str, raw: str) -> object:
    if key in _FIX_INTS:
        if not raw.isdigit() or (int(raw) < 1 and key != "zero_stage"):
            raise SpecError(f"{key}={raw!r} must be an integer >= {0 if key == 'zero_stage' else 1}",
                            key="--fix")
        return int(raw)
    if key == "sequence_parallel":
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise SpecError(f"sequence_parallel={raw!r} must be true or false", key="--fix")
        return raw.lower() in ("true", "1", "yes")
    if raw not in layout_mod.RECOMPUTE_MODES:
        raise SpecError(f"recompute={raw!r} not allowed; allowed: {', '.join(layout_mod.RECOMPUTE_MODES)}",
                        key="--fix")
    return raw


def _batch_size(seq_len: int, sequences: int | None, tokens: int | None) -> int:
    if sequences is not None and tokens is not None:
        raise SpecError("give --global-batch-size or --global-batch-tokens, not both",
                        key="--global-batch-tokens")
    if sequences is not None and sequences * seq_len > MAX_BATCH_TOKENS:
        raise SpecError(f"value {sequences} x seq_len {seq_len} exceeds {MAX_BATCH_TOKENS:,} tokens per step",
                        key="--global-batch-size")
    if tokens is not None:
        if tokens % seq_len:
            raise SpecError(f"value {tokens} is not a multiple of --seq-len {seq_len}",
                            key="--global-batch-tokens")
        return tokens // seq_len
    from planner import plan as plan_api  # imports OR-Tools: only for `plan`

    return sequences or plan_api.default_global_batch_size(seq_len)


@app.command("plan")
def plan_cmd(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: GpusOpt = None,
    seq_len: Annotated[int | None, typer.Option(min=1, max=MAX_SEQ_LEN, help=_SEQ_LEN_HELP)] = None,
    global_batch_size: Annotated[int | None, typer.Option(
        min=1, max=MAX_BATCH_TOKENS,
        help="Sequences per step (default: the power of two nearest to 4,194,304 tokens, the 4M of Llama 2/3, over --seq-len: 1,024 at 4,096, 256 at 12,288).")] = None,
    global_batch_tokens: Annotated[int | None, typer.Option(
        min=1, max=MAX_BATCH_TOKENS, help="Tokens per step (a multiple of --seq-len).")] = None,
    precision: Annotated[Precision | None, typer.Option(
        case_sensitive=False, help="GEMM precision (default: bf16, or fp16 on GPUs without bf16).")] = None,
    optimizer: Annotated[Optimizer, typer.Option(case_sensitive=False, help="Optimizer.")] = "adamw",
    framework: Annotated[Framework | None, typer.Option(
        case_sensitive=False, help="Conventions of this framework (default: the --emit framework, else megatron).")] = None,
    grad_reduce_dtype: GradReduceOpt = None,
    fp8_recipe: Fp8RecipeOpt = None,
    fp8_param_gather: Fp8ParamGatherOpt = None,
    precision_aware_optimizer: PrecisionAwareOpt = False,
    main_params_dtype: MainParamsOpt = None,
    main_grads_dtype: MainGradsOpt = None,
    exp_avg_dtype: MomentOpt = None,
    exp_avg_sq_dtype: MomentOpt = None,
    cross_entropy_fusion: CrossEntropyFusionOpt = None,
    loss_chunks: LossChunksOpt = None,
    mtp_layers: MtpLayersOpt = None,
    recompute_modules: RecomputeModulesOpt = None,
    offload_modules: OffloadModulesOpt = None,
    fix: Annotated[list[str] | None, typer.Option(
        "--fix", metavar="KEY=VALUE",
        help=f"Pin a degree or knob (repeatable, or comma-separated: tp=8,pp=2): {', '.join(FIXABLE)}.")] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=MAX_TOP, help="Plans to show.")] = 3,
    reserve_gib: Annotated[float | None, typer.Option(parser=_finite(0, 1024), metavar="FLOAT", help="CUDA context + fragmentation reserve, GiB.")] = None,
    headroom: Annotated[float, typer.Option(
        parser=_finite(0, 0.9), metavar="FLOAT", help="Fraction of GPU memory every plan leaves free (the at-risk margin); 0 admits at-risk plans.")] = 0.10,
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="Write the best plan to this YAML file (YAML whatever --format says); "
                              "`-` writes it to stdout and the report to stderr.")] = None,
    emit: Annotated[EmitTarget | None, typer.Option(
        case_sensitive=False, help="Print the best plan as this framework's launch configuration (Megatron-LM "
                                   "script, DeepSpeed JSON, torchtitan command line; torchtitan-toml: the TOML "
                                   "of older torchtitan releases) instead of the table; what it "
                                   "cannot express and `planner check` of it go to stderr.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Find the fastest layouts that fit: best-first search, an integer program per candidate, proven optimal."""
    from planner import plan as plan_api  # imports the search: only for `plan`

    emit_framework = None if emit is None else _EMIT_FRAMEWORK.get(_value(emit), _value(emit))
    if emit is not None and framework is not None and emit_framework != _value(framework):
        raise SpecError(f"value {_value(emit)!r} contradicts --framework {_value(framework)!r}: a plan "
                        f"is searched under the conventions of the framework it is emitted for; give "
                        f"one of them", key="--emit")
    if emit is not None and output == "-":
        raise SpecError("value '-' (stdout) not allowed with --emit, which prints the framework's "
                        "configuration on stdout; give a file name", key="--output")
    if emit is not None and fmt != Format.table:
        raise SpecError(f"value {fmt.value!r} not allowed with --emit, which prints the framework's own "
                        f"configuration; write the plan as data with -o plan.yaml", key="--format")
    framework = framework or emit_framework or "megatron"
    fixed = parse_fix(fix or [])
    if output is not None:
        _check_writable(output, inputs=(model, cluster, str(model_spec.CATALOG_DIR / f"{model}.yaml"),
                                        str(cluster_spec.CATALOG_DIR / f"{cluster}.yaml")))
    spec = model_spec.load_model(model)
    _quantized_checkpoint_note(spec)
    hw = cluster_spec.load_cluster(cluster, gpus=gpus)
    seq_len = seq_len or default_seq_len(spec)
    reserve = None if reserve_gib is None else int(reserve_gib * 2**30)
    if emit is not None:
        from planner import emit as emit_api
        emit_api.refuse_optimizer(emit_framework, _value(optimizer))
        emit_api.refuse_pins(emit_framework, fixed)
    search = dict(seq_len=seq_len,
                  global_batch_size=_batch_size(seq_len, global_batch_size, global_batch_tokens),
                  precision=_precision(precision, hw), optimizer=_value(optimizer),
                  framework=_value(framework), top_k=top, reserve_bytes=reserve, headroom=headroom,
                  grad_reduce_dtype=_value(grad_reduce_dtype),
                  recompute_modules=_recompute_modules(recompute_modules, _value(framework)),
                  offload_modules=_offload_modules(offload_modules, _value(framework)),
                  precision_knobs=_precision_knobs(
                      precision_aware_optimizer, fp8_recipe=_fp8_recipe(
                          fp8_recipe, hw, spec, precision=_precision(precision, hw), framework=framework),
                      fp8_param_gather=fp8_param_gather,
                      main_params_dtype=main_params_dtype,
                      main_grads_dtype=main_grads_dtype, exp_avg_dtype=exp_avg_dtype,
                      exp_avg_sq_dtype=exp_avg_sq_dtype, cross_entropy_fusion=cross_entropy_fusion,
                      loss_chunks=loss_chunks, mtp_layers=mtp_layers))
    try:
        with report.plan_progress() as tick:
            data = plan_api.plan(spec, hw, fixed=fixed, on_progress=tick, **search)
    except InfeasibleError as exc:
        _launch_note(_value(framework), fixed, spec.is_moe, "--emit" if emit is not None else "--framework")
        if emit is None and output != "-" and fmt != Format.table:  # as serve-plan: the error as data on stdout
            report.dump({"request": {"model": spec.name, "cluster": cluster, "gpu": hw.gpu.name, "gpus": gpus,
                                     "seq_len": seq_len, "global_batch_size": search["global_batch_size"],
                                     "precision": search["precision"], "framework": search["framework"],
                                     "fix": fixed},
                         "error": str(exc), **exc.details}, fmt.value)
        raise
    # after the search, so bad input the search refuses (SpecError) stays one line
    _launch_note(_value(framework), fixed, spec.is_moe, "--emit" if emit is not None else "--framework")
    if emit is None:
        with report.human_report_to_stderr() if output == "-" else contextlib.nullcontext():
            report.show_plan(data, fmt.value)
    else:
        data, index = _emit(data, _value(emit),
                            lambda r, i: plan_api.plan_file(r, i, model_ref=model, cluster_ref=cluster))
    if output:
        report.write_yaml(output, plan_api.plan_file(data, 0 if emit is None else index,
                                                     model_ref=_ref_for(model, output),
                                                     cluster_ref=_ref_for(cluster, output)))


def _launch_note(framework: str, fixed: dict, moe: bool, option: str) -> None:
    """Say on stderr the launch pins `plan()` searches `framework` under where `fixed` gives no
    other value (`frameworks.LAUNCH_PINS`): the space is narrowed to what `--emit framework`
    writes, because the user asked for that framework."""
    from planner.frameworks import LAUNCH_PINS

    shown = {k: v for k, v in LAUNCH_PINS.get(framework, {}).items()
             if k not in fixed and (moe or k not in ("ep", "etp"))}
    if shown:
        launcher = "it" if option == "--emit" else f"--emit {framework}"
        report.note(f"{option} {framework}: searching only layouts {launcher} can launch: "
                    + ", ".join(f"{k}={v}" for k, v in shown.items()))


def _emit(result: dict, framework: str, doc_of) -> tuple[dict, int]:
    """Print the fastest launch configuration (`emit.best_launch`); exit 1 if `planner check` of
    it fails. Returns the `plan()` result and plan index it was emitted from (what `-o` writes)."""
    from planner import emit as emit_api

    launch = emit_api.best_launch(result, framework, doc_of)
    report.show_emitted(launch, result)
    if launch.verdict["verdict"] != "pass":
        raise typer.Exit(1)
    return launch.source, launch.index


def _ref_for(ref: str, output: str) -> str:
    """A model / cluster reference as a plan file at `output` records it: a catalog name as given,
    a file path relative to the plan file's directory (so the file still loads after a move of
    both, from any working directory)."""
    import os

    if not os.path.exists(ref):
        return ref
    return os.path.relpath(os.path.abspath(ref), os.path.dirname(os.path.abspath(output)))


class CheckFormat(str, Enum):
    """Output format of `planner check`: those of every command, GitHub Actions annotations and a
    JUnit XML report (`planner.check.ci_formats`)."""

    table = "table"
    json = "json"
    yaml = "yaml"
    github = "github"
    junit = "junit"


_TRAINER_KEYS = deepspeed_keys.TRAINER_SETTABLE
"""The DeepSpeed keys `check --set` resolves (`planner.frameworks.deepspeed.TRAINER_SETTABLE`)."""

@app.command("check")
def check_cmd(
    paths: Annotated[list[str], typer.Argument(metavar="FILE", help="Configurations to check: plan files (`planner plan -o`), "
                                                 "DeepSpeed JSON, torchtitan command lines or TOML, Megatron-LM arguments, serving plans, "
                                                 "vLLM / SGLang launch commands or vLLM config YAML (the kind is read from the content).")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model (catalog name or path) when the file does not name it.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Cluster (catalog name or path); a framework config never names it.")] = None,
    gpus: Annotated[int | None, typer.Option(min=1, max=MAX_GPUS, help="GPUs the job runs on, when the file does not say.")] = None,
    seq_len: Annotated[int | None, typer.Option(min=1, max=MAX_SEQ_LEN, help="Tokens per sequence, when the file does not say.")] = None,
    recompute: Annotated[CodeRecompute | None, typer.Option(
        case_sensitive=False, help="DeepSpeed only: the activation recompute its model code applies to every layer (default none).")] = None,
    settings: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE", help="DeepSpeed only: the value the Hugging Face Trainer fills an 'auto' key with "
                                           f"(keys: {', '.join(_TRAINER_KEYS)}); repeat for each key.")] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", "-f", case_sensitive=False, help="Output format: table, json, yaml, "
                                             "github (workflow-command annotations), junit (JUnit XML).")] = CheckFormat.table,
) -> None:
    """CI gate: every file is checked and reported; exit 0 when all pass, 1 when any fails a rule
    (each violated rule with its numbers, a fix and its line), 2 when any could not be read."""
    from planner import check as check_api  # imported per command: `--help` stays light
    from planner.check import engine_file, serving_plan

    resolved = _settings(settings or [])
    results, code = [], 0
    with _stdin_file("-" in paths) as stdin:
        for given in paths:
            path = stdin if given == "-" else given
            try:
                if resolved and (serving_plan.is_serving_plan(path) or engine_file.reader_of(path) is not None):
                    raise SpecError("--set is for DeepSpeed configs (the Hugging Face Trainer's 'auto' values)",
                                    file=path, key="--set")
                if serving_plan.is_serving_plan(path):
                    data = serving_plan.check_serving_plan(path, model=model, cluster=cluster, gpus=gpus,
                                                             seq_len=seq_len)
                elif engine_file.reader_of(path) is not None:
                    if recompute is not None:
                        raise SpecError("--recompute is for DeepSpeed configs; an engine launch serves, it "
                                        "does not train", file=path, key="--recompute")
                    data = engine_file.check_launch_file(path, model=model, cluster=cluster, gpus=gpus,
                                                         seq_len=seq_len)
                else:
                    data = check_api.check_file(path, model=model, cluster=cluster, gpus=gpus,
                                                seq_len=seq_len, settings=resolved,
                                                recompute=None if recompute is None else _value(recompute))
            except PlannerError as exc:
                exc.args = tuple(_named(a, stdin) for a in exc.args)
                results.append({"file": given, "verdict": "error", "error": str(exc),
                                "line": getattr(exc, "line", None)
                                or check_api.line_of(path, getattr(exc, "key", None))})
                code = max(code, exc.exit_code)
                if len(paths) == 1 and fmt.value in ("table", "json", "yaml"):
                    raise
                continue
            results.append(_named(data, stdin))
            code = max(code, 0 if data["verdict"] == "pass" else 1)
        if check_api.across_files(results):
            code = max(code, 1)
    report.show_checks(results, fmt.value)
    if code:
        raise typer.Exit(2 if code >= 2 else 1)


def _quantized_checkpoint_note(spec) -> None:
    """The note that a training command given a 4-bit (AWQ / GPTQ) checkpoint plans the architecture's
    training in 16-bit weights, not the checkpoint's int4 (training never reads quantization_config,
    `specs.model`): said, never changed silently."""
    if spec.weight_format == "int4":
        report.note(f"{spec.name} is an int4 checkpoint (its quantization_config); training is planned with "
                    f"16-bit weights and fp32 optimizer states, as full training needs, not on the int4 weights: "
                    f"start from the model's unquantized release")


def _settings(given: list[str]) -> dict[str, str]:
    """`check --set KEY=VALUE` words as {KEY: VALUE}.

    Raises:
        SpecError: a word without `=`, or a key given twice."""
    out: dict[str, str] = {}
    for word in given:
        key, eq, value = word.partition("=")
        if not eq or not key or not value:
            raise SpecError(f"value {word!r} must be KEY=VALUE (e.g. {_TRAINER_KEYS[0]}=4)", key="--set")
        if key in out:
            raise SpecError(f"{key} given twice; give it once", key="--set")
        out[key] = value
    return out


@contextlib.contextmanager
def _stdin_file(wanted: bool):
    """`check -`: standard input copied to a file named `stdin` in a fresh temporary folder (the
    readers read files: content decides the kind, as for a file without a suffix), removed after;
    None when no path is `-`. At most `files.MAX_FILE_BYTES` are read.

    Raises:
        SpecError: standard input closed, or larger than a configuration file (file `-`)."""
    if not wanted:
        yield None
        return
    import tempfile
    from pathlib import Path

    from planner.specs.files import MAX_FILE_BYTES

    if sys.stdin is None:
        raise SpecError("standard input is closed; give the configuration on it, or a file path",
                        file="-")
    data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"standard input larger than {MAX_FILE_BYTES // 2**20} MiB; a "
                        f"configuration file is a few KiB", file="-")
    with tempfile.TemporaryDirectory(prefix="planner-check-") as folder:
        path = Path(folder) / "stdin"
        path.write_bytes(data)
        yield str(path)


def _named(value, stdin: str | None):
    """`value` (a result dict, list or string) with the temporary copy of standard input named `-`,
    as the user gave it."""
    if stdin is None:
        return value
    if isinstance(value, str):
        return value.replace(stdin, "-")
    if isinstance(value, dict):
        return {k: _named(v, stdin) for k, v in value.items()}
    if isinstance(value, list):
        return [_named(v, stdin) for v in value]
    return value


# ---------------------------------------------------------------- serve-plan

WeightDtype = Enum("WeightDtype", {f: f for f in ("bf16", "fp16", "fp8", "fp8-block", "int8", "int4", "mxfp4", "nvfp4")}, type=str)
KvDtype = Enum("KvDtype", {f: f for f in ("bf16", "fp8")}, type=str)
Engine = Enum("Engine", {f: f for f in ("vllm", "sglang", "trtllm")}, type=str)
EmitEngine = Enum("EmitEngine", {f: f for f in ("vllm", "sglang")}, type=str)
"""`serve-plan --emit`: an engine's launch commands (`planner.emit.engine_launch`)."""


def _finite(low: float, high: float = math.inf):
    """Parser of a float option: a finite number in [low, high] (click's range check lets nan and inf
    through or reports them as out of range). Raises typer.BadParameter naming what is allowed."""
    allowed = f"a finite number >= {low:,.10g}" + (f" and <= {high:,.10g}" if math.isfinite(high) else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise typer.BadParameter(f"allowed: {allowed}")
        return value

    return parse


def _serve_fix(items: list[str], spec) -> dict:
    """`--fix tp=4` pins for serve-plan: tp, pp, ep, dp (attention data parallel), positive integers;
    ep above 1 on a dense model is bad input, as for `plan --fix` (`check_expert_degrees`)."""
    from planner.serve import FIXABLE as SERVE_FIXABLE

    fixed: dict = {}
    for item in _fix_items(items):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if sep and key not in SERVE_FIXABLE:
            raise _unknown_fix_key(key, item, SERVE_FIXABLE)
        if not sep or not raw.strip().isdigit() or int(raw) < 1:
            raise SpecError(f"{item!r} must be key=value with key one of {', '.join(SERVE_FIXABLE)} and a "
                            f"positive integer value", key="--fix")
        if key in fixed and fixed[key] != int(raw):
            raise SpecError(f"{key} pinned twice; pin it once", key="--fix")
        fixed[key] = int(raw)
    model_spec.check_expert_degrees(spec, fixed)
    return fixed


@app.command("serve-plan")
def serve_plan_cmd(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: Annotated[int, typer.Option("--gpus", min=1, max=MAX_GPUS, help="GPUs the deployment may use: whole nodes, or part of one node where the cluster allows it (as plan).")],
    input_len: Annotated[int, typer.Option(min=1, max=MAX_SEQ_LEN, help="Prompt tokens per request.")],
    output_len: Annotated[int, typer.Option(min=1, max=MAX_SEQ_LEN, help="Generated tokens per request.")],
    concurrency: Annotated[int | None, typer.Option(min=1, max=1_000_000, help="Requests in flight per instance (default: searched).")] = None,
    request_rate: Annotated[float | None, typer.Option(parser=_finite(0.001, 1e7), metavar="FLOAT", help="Requests/s to carry: answers the fewest GPUs (up to --gpus).")] = None,
    ttft_ms: Annotated[float | None, typer.Option(parser=_finite(0.001), metavar="FLOAT", help="Time-to-first-token SLO, ms.")] = None,
    tpot_ms: Annotated[float | None, typer.Option(parser=_finite(0.001), metavar="FLOAT", help="Time-per-output-token SLO, ms.")] = None,
    request_latency_ms: Annotated[float | None, typer.Option(parser=_finite(0.001), metavar="FLOAT", help="Whole-request latency SLO, ms.")] = None,
    weight_dtype: Annotated[WeightDtype | None, typer.Option(case_sensitive=False, help=(
        "Weight format of the block linear layers (default: the checkpoint's, from its config.json "
        "quantization_config; else bf16, fp16 on GPUs without bf16)."))] = None,
    kv_dtype: Annotated[KvDtype, typer.Option(case_sensitive=False, help="KV-cache dtype.")] = "bf16",
    engine: Annotated[Engine | None, typer.Option(case_sensitive=False, help="Serving engine (its memory-budget rule and latency constants; default: the --emit engine, else vllm).")] = None,
    max_model_len: Annotated[int | None, typer.Option(min=1, max=MAX_SEQ_LEN, help="Longest context one request may reach (default: input + output).")] = None,
    mem_fraction: Annotated[float | None, typer.Option(
        parser=_finite(0.05, 1.0), metavar="FLOAT", help="The engine's budget knob: vLLM gpu_memory_utilization, SGLang mem_fraction_static, "
                                "TensorRT-LLM kv_cache_free_gpu_memory_fraction (default: the engine's).")] = None,
    max_num_batched_tokens: Annotated[int, typer.Option(min=1, max=MAX_SEQ_LEN, help="Tokens per forward (chunked prefill): the engine flag's value; for an SGLang instance whose attention DP spans nodes, the chunk of one attention-DP rank (emitted x the ranks).")] = 8192,
    fix: Annotated[list[str] | None, typer.Option("--fix", metavar="KEY=VALUE", help="Pin tp, pp, ep or dp (repeatable, or comma-separated: tp=8,ep=8).")] = None,
    disaggregated: Annotated[bool, typer.Option("--disaggregated", help="Separate prefill and decode workers, rate-matched.")] = False,
    top: Annotated[int, typer.Option("--top", min=1, max=MAX_TOP, help="Plans to show.")] = 5,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the serving plan to this YAML file (kind: serving-plan; `planner check` accepts it).")] = None,
    plot: Annotated[str | None, typer.Option("--plot", metavar="FILE.png", help="Draw the Pareto front (needs matplotlib).")] = None,
    emit: Annotated[EmitEngine | None, typer.Option(case_sensitive=False, help=(
        "Print the best plan as the engine's launch commands (one per instance) instead of the table; "
        "`planner check` of them goes to stderr."))] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Plan an inference deployment: memory and KV capacity per engine, TTFT/TPOT under SLOs, replicas by integer program."""
    from planner import serve

    if emit is not None and engine is not None and _value(engine) != _value(emit):
        raise SpecError(f"value {_value(emit)!r} contradicts --engine {_value(engine)!r}: a plan is costed under "
                        f"the engine it is emitted for; give one of them", key="--emit")
    if emit is not None and fmt != Format.table:
        raise SpecError(f"value {fmt.value!r} not allowed with --emit, which prints the engine's launch commands; "
                        f"write the plan as data with -o plan.yaml", key="--format")
    engine = engine or emit or "vllm"

    if concurrency is not None and request_rate is not None:
        raise SpecError("give --concurrency or --request-rate, not both", key="--request-rate")
    for path, key in ((output, "--output"), (plot, "--plot")):
        if path is not None:
            _check_writable(path, (model, cluster), key)
    spec = model_spec.load_model(model)
    # the cluster's allocation rule, as `plan` applies it: whole nodes, or part of one node where it allows
    hw = cluster_spec.load_cluster(cluster, gpus=gpus)
    weights, weights_why = serve.weight_choice(spec, hw, _value(weight_dtype) if weight_dtype else None)
    kv = _value(kv_dtype)
    if kv == "bf16" and "bf16" not in hw.gpu.peak_tflops:
        kv = "fp16"  # the KV cache takes the model's dtype: fp16 where the GPU has no bf16
    req = serve.ServeRequest(
        gpus=gpus, input_len=input_len, output_len=output_len, concurrency=concurrency, request_rate=request_rate,
        ttft_ms=ttft_ms, tpot_ms=tpot_ms, request_latency_ms=request_latency_ms, weight_dtype=weights,
        kv_dtype=kv, engine=_value(engine), max_model_len=max_model_len, mem_fraction=mem_fraction,
        max_num_batched_tokens=max_num_batched_tokens, fix=_serve_fix(fix or [], spec), top=top, disaggregated=disaggregated)
    request = {"model": spec.name, "cluster": cluster, "gpu": hw.gpu.name, "gpus": gpus, "input_len": input_len,
               "output_len": output_len, "engine": req.engine, "weight_dtype": req.weight_dtype,
               "weight_dtype_reason": weights_why, "checkpoint_weight_dtype": spec.weight_format,
               "kv_dtype": req.kv_dtype, "concurrency": concurrency, "request_rate": request_rate,
               "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "request_latency_ms": request_latency_ms,
               "max_model_len": req.context, "mem_fraction": mem_fraction,
               "max_num_batched_tokens": max_num_batched_tokens, "disaggregated": disaggregated}
    try:
        data = serve.serve_plan(spec, hw, req)
    except InfeasibleError as exc:
        report.show_serve_infeasible({"request": request, "error": str(exc), **exc.details}, fmt.value)
        raise
    data = {"request": request, **data, "notes": [f"weights {weights}: {weights_why}", *data.get("notes", ())]}
    if plot is not None:
        if not data["pareto"]:
            raise SpecError("--plot draws the aggregated Pareto front; drop --disaggregated or --plot", key="--plot")
        report.plot_pareto(data, plot)
    if output is not None:
        # the file names the model as given (a catalog name or a path), so that `check` loads it
        report.write_yaml(output, {"kind": "serving-plan", "request": {**request, "model": model},
                                   "plan": data["plans"][0], "deployment": data["deployment"]})
    if emit is not None:
        from planner.emit import engine_launch

        text, verdict = engine_launch.checked(
            {**data, "request": {**request, "model": model, "max_model_len_given": max_model_len is not None}},
            _value(emit),
            engine_launch.model_name(spec, model), cluster, hw.gpus_per_node,
            spec.is_mla)
        report.show_serve_emitted(text, verdict, _value(emit))
        if verdict["verdict"] != "pass":
            raise typer.Exit(1)
        return
    report.show_serve_plan(data, fmt.value)


# ---------------------------------------------------------------- validate

Suite = Enum("Suite", {s: s for s in ("training", "memory", "all", "serving")}, type=str)


@app.command("validate")
def validate_cmd(
    suite: Annotated[Suite, typer.Option("--suite", case_sensitive=False, help=(
        "What to validate: training (throughput per GPU), memory (peak memory), all (both), serving (TTFT/TPOT)."))],
    data: Annotated[str | None, typer.Option("--data", metavar="FILE", help=(
        "training/memory/all: a YAML file in the format of training_runs.yaml or expert_configs.yaml "
        "(default: both shipped reference copies); serving: a CSV in the format of serving_measurements.csv."))] = None,
    part: Annotated[str, typer.Option("--part", help="Rows: all, fit or evaluation (crc32(id) % 4 == 0, plus one MoE row per GPU family: validate_training.stratified_parts).")] = "all",
    fmt: FormatOpt = Format.table,
) -> None:
    """Predicted vs published per row of a measurements file, and the error statistics."""
    if part not in ("all", "fit", "evaluation"):
        raise SpecError(f"value {part!r} not allowed; allowed: all, fit, evaluation", key="--part")
    if _value(suite) != "serving":
        from planner import validate_training

        rows = validate_training.load_rows(data) if data else validate_training.default_rows()
        result = validate_training.validate(rows, suite=_value(suite), part=part)
        names = data or f"{validate_training.TRAINING_RUNS.name} + {validate_training.EXPERT_CONFIGS.name}"
        report.show_training_validation({"data": names, **result}, fmt.value)
        return
    from planner import serve_validate

    cases = serve_validate.load_cases(data) if data else serve_validate.load_cases()
    result = serve_validate.validate(cases, part=part)
    report.show_serve_validation({"suite": _value(suite), "data": data or str(serve_validate.DATA.name),
                                  "part": part, **result}, fmt.value)
