"""Command-line interface: thin typer commands that load specs, compute, and hand dicts to report.

Every command takes `--format table|json|yaml`. Errors derived from `planner.errors.PlannerError`
become one line on stderr and an exit code (SpecError 2, InfeasibleError 1), never a traceback;
usage errors (bad option values) exit 2 as click does.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from planner import report
from planner.errors import PlannerError
from planner.specs import cluster as cluster_spec
from planner.specs import model as model_spec
from planner.summary import model_row, model_summary

DEFAULT_SEQ_LEN = 4096
"""Sequence length for `models show` FLOPs when `--seq-len` is not given, tokens."""


class Format(str, Enum):
    """Output format of every command."""

    table = "table"
    json = "json"
    yaml = "yaml"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]


class _Group(TyperGroup):
    """Root command group: PlannerError -> one line on stderr + its exit code, no traceback."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PlannerError as exc:
            report.error(str(exc))
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(cls=_Group, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Plan how to lay a large model out over a GPU cluster.")
models_app = typer.Typer(help="Model catalog: list, or `show NAME|PATH` for one model.")
hardware_app = typer.Typer(help="Cluster catalog: list, or `show NAME|PATH` for one cluster.")
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")


def main() -> None:
    """Console-script entry point (`planner`)."""
    app()


# ---------------------------------------------------------------- models

@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context, fmt: FormatOpt = Format.table) -> None:
    """List the shipped models."""
    if ctx.invoked_subcommand is None:
        rows = [model_row(model_spec.load_model(name)) for name in model_spec.catalog_names()]
        report.show_models(rows, fmt.value)


@models_app.command("show")
def models_show(
    ref: Annotated[str, typer.Argument(metavar="NAME|PATH",
                                       help="Catalog name, YAML file, config.json, or a directory holding one.")],
    seq_len: Annotated[int, typer.Option(min=1, help="Tokens per sequence for the FLOPs.")] = DEFAULT_SEQ_LEN,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one model: parameters (per layer), KV cache per token, FLOPs per token."""
    report.show_model(model_summary(model_spec.load_model(ref), seq_len=seq_len), fmt.value)


# ---------------------------------------------------------------- hardware

@hardware_app.callback(invoke_without_command=True)
def hardware(ctx: typer.Context, fmt: FormatOpt = Format.table) -> None:
    """List the shipped clusters."""
    if ctx.invoked_subcommand is None:
        rows = [cluster_spec.to_dict(cluster_spec.load_cluster(name)) for name in cluster_spec.catalog_names()]
        report.show_clusters(rows, fmt.value)


@hardware_app.command("show")
def hardware_show(
    ref: Annotated[str, typer.Argument(metavar="NAME|PATH", help="Catalog name or YAML file.")],
    gpus: Annotated[int | None, typer.Option(help="Cluster size in GPUs (whole nodes unless the spec allows less).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one cluster with the source of every number."""
    report.show_cluster(cluster_spec.to_dict(cluster_spec.load_cluster(ref, gpus=gpus)), fmt.value)
