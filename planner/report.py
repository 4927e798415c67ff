"""All terminal output of planner: the only module that prints.

Each `show_<thing>(data, fmt)` takes plain dicts (what the command computed) and writes them as a
rich table (`table`), JSON (`json.dumps(indent=2)`) or YAML (`yaml.safe_dump`). Machine formats
print the dict unchanged, so `--format json` output is the data, never a rendering of it. Errors go
to stderr as one line through `error`. To add a command's output, add a `show_<thing>` function
that builds its tables from the same dict it would dump.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from planner.cost.serving import Instance
from planner.errors import SEVERAL, counted, number, shorten
from planner.placement import overlap, recompute_mix
from planner.summary import CAUSAL_NOTE_FRACTION

FORMATS = ("table", "json", "yaml")
"""Values accepted by every command's `--format`."""

_WIDTH_WHEN_PIPED = 160
"""Columns used when stdout is not a terminal and COLUMNS is unset (rich's 80 wraps wide tables)."""


# ---------------------------------------------------------------- streams

ASCII_FALLBACK = str.maketrans({"·": ".", "×": "x", "—": "-", "–": "-", "−": "-", "≤": "<",
                                "≥": ">", "→": ">", "←": "<", "↓": "v", "↑": "^", "…": ".",
                                "±": "~", "≈": "~", "÷": "/", "Ψ": "P", "²": "2", "µ": "u",
                                "✓": "+", "✗": "x"})
"""What this module's own separators and symbols become on a stream that cannot encode them (a
non-UTF-8 locale such as `PYTHONIOENCODING=ascii`): one character each, so rich's column widths
(measured before the stream writes) stay right; any other such character becomes `?`."""


class _Stream(io.TextIOBase):
    """A text stream over `raw` that never raises what a command cannot act on:

    - characters its encoding cannot hold are written as ASCII (`ASCII_FALLBACK`, then `?`;
      a non-UTF-8 locale), never UnicodeEncodeError; rich reads `encoding` and draws ASCII boxes;
    - once the reader has left (`planner ... | head`: BrokenPipeError), writes go to /dev/null,
      so the command ends with its own exit code (a passing gate stays 0 under pipefail);
    - a closed stdout (`>&-`: Python has no sys.stdout) raises OSError "standard output is
      closed" on the first write, which the CLI reports as one line after any bad-input error;
      what goes to a closed stderr (`2>&-`) is dropped, so the exit code still tells."""

    def __init__(self, raw, name: str) -> None:
        self._raw, self._name, self._left = raw, name, False
        self._ascii = ascii_locale()
        try:
            "·×—≤→…─━┃".encode(self.encoding)
        except (UnicodeEncodeError, LookupError):
            self._ascii = True

    @property
    def encoding(self) -> str:
        return "ascii" if self._ascii else getattr(self._raw, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        if self._raw is None and self._name == "standard output":
            raise OSError(errno.EBADF, f"{self._name} is closed")
        if self._raw is None or self._left:
            return len(text)
        if self._ascii:
            text = text.translate(ASCII_FALLBACK).encode(self.encoding, "replace").decode(self.encoding)
        try:
            return self._raw.write(text)
        except BrokenPipeError:
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        if self._raw is None or self._left:
            return
        try:
            self._raw.flush()
        except BrokenPipeError:
            self._reader_left()

    def _reader_left(self) -> None:
        self._left = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._raw.fileno())  # Python's final flush

    def isatty(self) -> bool:
        return self._raw is not None and self._raw.isatty()

    def fileno(self) -> int:
        if self._raw is None:
            raise OSError(errno.EBADF, f"{self._name} is closed")
        return self._raw.fileno()


def ascii_locale(environ=os.environ, utf8_mode: int | None = None,
                 xoptions: dict | None = None) -> bool:
    """Whether the user's locale holds ASCII only although Python's stream may say UTF-8.

    Python turns the C and POSIX locales into UTF-8 output (PEP 540's UTF-8 mode, PEP 538's
    coercion, which also sets LC_CTYPE=C.UTF-8 in the environment), so `sys.stdout.encoding` says
    utf-8 under `LC_ALL=C` while the terminal reading it has ASCII. Hence: PYTHONIOENCODING,
    PYTHONUTF8=1 or -X utf8, given, are the user's choice (False: the stream's own encoding
    decides); UTF-8 mode on without them was turned on by a C or POSIX locale (True); else the first set of
    LC_ALL, LC_CTYPE, LANG (POSIX.1 "Internationalization Variables") is C, POSIX or a codeset
    other than UTF-8 (True).

    Args:
        environ, utf8_mode, xoptions: the process's (`os.environ`, `sys.flags.utf8_mode`,
            `sys._xoptions`) by default."""
    utf8_mode = sys.flags.utf8_mode if utf8_mode is None else utf8_mode
    xoptions = sys._xoptions if xoptions is None else xoptions
    if environ.get("PYTHONIOENCODING") or environ.get("PYTHONUTF8") == "1" or "utf8" in xoptions:
        return False
    if utf8_mode:
        return True
    value = next((environ[k] for k in ("LC_ALL", "LC_CTYPE", "LANG") if environ.get(k)), None)
    if value is None:
        return False
    if value in ("C", "POSIX"):
        return True
    codeset = value.partition(".")[2].partition("@")[0].lower().replace("-", "")
    return bool(codeset) and codeset != "utf8"


def prepare_streams() -> None:
    """Wrap stdout and stderr in `_Stream` (encoding fallback, reader gone, stream closed)."""
    for name, label in (("stdout", "standard output"), ("stderr", "standard error")):
        stream = getattr(sys, name)
        if not isinstance(stream, _Stream):
            setattr(sys, name, _Stream(stream, label))


_HUMAN: list = []
"""The stream of the human-readable report while `human_report_to_stderr` is active."""


def _out():
    """Where the report goes: stdout, or stderr while stdout carries data (`-o -`)."""
    return _HUMAN[-1] if _HUMAN else sys.stdout


@contextlib.contextmanager
def human_report_to_stderr() -> Iterator[None]:
    """Send the report (tables, json, yaml) to stderr while stdout carries a file (`-o -`)."""
    _HUMAN.append(sys.stderr)
    try:
        yield
    finally:
        _HUMAN.pop()


# ---------------------------------------------------------------- primitives


class _PlainDumper(yaml.SafeDumper):
    """YAML without anchors and aliases: a value shared by two keys is written out twice, so the
    file reads and diffs as the data it is (`&id001` / `*id001` otherwise)."""

    def ignore_aliases(self, data) -> bool:
        return True


def _yaml(data) -> str:
    """Block-style YAML of `data`, keys in insertion order, no anchors."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)

def error(message: str) -> None:
    """Print one line `error: <message>` to stderr (whitespace runs become one space; a long value it
    echoes is cut to its start and length, `errors.shorten`); a message of several errors
    (`errors.SpecError.several`: one per line) prints one such line each."""
    for text in str(message).split(SEVERAL):
        sys.stderr.write(f"error: {' '.join(shorten(text).split())}\n")


def note(text: str) -> None:
    """Print one line `note: <text>` to stderr (what a command assumed or narrowed)."""
    sys.stderr.write(f"note: {' '.join(str(text).split())}\n")


def line(text: str) -> None:
    """Print one plain line to stdout."""
    _out().write(f"{text}\n")


def dump(data: object, fmt: str) -> None:
    """Print `data` as JSON (indent 2) or YAML (block style, keys in insertion order)."""
    if fmt == "json":
        _out().write(json.dumps(data, indent=2) + "\n")
    elif fmt == "yaml":
        _out().write(_yaml(data))
    else:
        raise ValueError(f"dump() handles json and yaml, not {fmt!r}")


def _console() -> Console:
    out = _out()
    width = _columns() or (shutil.get_terminal_size().columns if out.isatty() else _WIDTH_WHEN_PIPED)
    return Console(file=out, width=width, highlight=False)


def _columns() -> int | None:
    """COLUMNS as a usable width, else None: rich renders nothing at COLUMNS=0 and garbles a negative or
    non-numeric value (fresh-user review 13, finding 6), so those fall back as if unset."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return columns if columns >= 20 else None


def _table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]],
           *, right_from: int = 1) -> Table:
    """A table whose first `right_from` columns are left-aligned text and the rest numbers.
    Cells fold (never truncate) when the terminal is too narrow."""
    table = Table(title=None if title is None else Text(title), title_justify="left", show_edge=False,
                  pad_edge=False)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < right_from else "right", no_wrap=i == 0,
                         overflow="fold")
    for row in rows:
        table.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
    return table


def count(n: int | None) -> str:
    """A count with thousands separators and a short form: 8,030,261,248 (8.03B)."""
    if n is None:
        return "-"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n:,} ({n / scale:.2f}{suffix})"
    return f"{n:,}"


def short(n: float | None) -> str:
    """Short form only: 70.55B, 12.9M, 512."""
    if n is None:
        return "-"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return f"{n:g}"


def size_bytes(n: float) -> str:
    """Bytes with a binary unit: 131,072 B (128.0 KiB)."""
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= scale:
            return f"{n:,.0f} B ({n / scale:.1f} {unit})"
    return f"{n:,.0f} B"


# ---------------------------------------------------------------- models

def show_models(rows: list[dict], fmt: str) -> None:
    """The model catalog: one dict per model with name, family, params_total, params_active,
    layers, hidden_size, heads, kv_heads, context."""
    if fmt != "table":
        return dump(rows, fmt)
    _console().print(_table(
        None, ("name", "family", "total\nparams", "active\nparams", "layers", "hidden", "heads\n/KV",
               "context"),
        ([r["name"], r["family"], short(r["params_total"]), short(r["params_active"]), r["layers"],
          r["hidden_size"], f"{r['heads']}/{r['kv_heads']}", f"{r['context']:,}"] for r in rows),
        right_from=2))


def show_model(data: dict, fmt: str) -> None:
    """One model: architecture, parameter counts with the per-layer breakdown, KV cache, FLOPs."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    arch = data["architecture"]
    params, kv, flops = data["params"], data["kv_cache"], data["flops_per_token"]
    summary = [
        ("family", data["family"]), ("source", data["source"]),
        *((key, _cell(value)) for key, value in arch.items()),
        ("params total", count(params["total"])),
        ("params active per token", count(params["active_per_token"])),
        ("params embedding", count(params["embedding"])),
        ("params lm_head", count(params["lm_head"]) if params["lm_head"] else "0 (tied to the embedding)"),
        ("params final norm", count(params["final_norm"])),
    ]
    if params.get("mtp_excluded"):
        summary.append(("params MTP module (excluded)", count(params["mtp_excluded"])))
    summary += [
        (f"KV cache per token ({kv['dtype']})", size_bytes(kv["bytes_per_token"])),
        ("KV cache per token, all layers", size_bytes(kv["bytes_per_token_all_layers"])),
    ]
    if kv["sliding_window_tokens"]:
        summary.append(("KV cache of sliding layers (full window)", size_bytes(kv["sliding_window_bytes"])))
    console.print(_table(data["name"], ("field", "value"), summary, right_from=2))
    console.print()
    parts = ("attention", "dense_mlp", "routed_experts", "shared_experts", "router", "norms", "total")
    console.print(_table(
        "parameters per layer", ("layers", "kind", *(p.replace("_", "\n") for p in parts)),
        ([g["layers"], g["kind"], *(f"{g[p]:,}" for p in parts)] for g in params["per_layer"]),
        right_from=2))
    console.print()
    console.print(_table(
        f"FLOPs per token at seq_len {flops['seq_len']:,}", ("quantity", "FLOPs"),
        ((key, count(flops[key])) for key in ("forward", "attention_forward", "training",
                                              "training_full_recompute"))))
    console.print(Text(f"MFU convention: {data['mfu_convention']}"))


def _cell(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


# ---------------------------------------------------------------- hardware

def show_clusters(rows: list[dict], fmt: str) -> None:
    """The cluster catalog: one `to_dict` cluster per entry."""
    if fmt != "table":
        return dump(rows, fmt)
    _console().print(_table(
        None, ("name", "gpu", "memory\nGiB", "HBM\nGB/s", "bf16\nTFLOP/s", "fp8\nTFLOP/s", "GPUs\n/node",
               "scale-up\nGPUs", "scale-up\nGB/s", "network\nGB/s/GPU"),
        ([c["name"], c["gpu"]["name"], f"{c['gpu']['memory_gib']:g}", f"{c['gpu']['hbm_gb_per_s']:g}",
          _peak(c, "bf16") if "bf16" in c["gpu"]["peak_tflops"] else f"{_peak(c, 'fp16')} (fp16)",
          _peak(c, "fp8"), c["gpus_per_node"], c["scaleup_domain_gpus"],
          f"{c['scaleup_gb_per_s']:g}", f"{c['network_gb_per_s_per_gpu']:g}"] for c in rows),
        right_from=2))


def _fp8_scaling(req: dict) -> str:
    """' (<recipe> scaling)' where a plan's request costed an fp8 recipe (torchtitan's always, written
    down by `plan.plan`), else ''."""
    return f" ({req['fp8_recipe']} scaling)" if req.get("precision") == "fp8" and req.get("fp8_recipe") else ""


def _peak(cluster: dict, dtype: str) -> str:
    value = cluster["gpu"]["peak_tflops"].get(dtype)
    return "-" if value is None else f"{value:g}"


def show_cluster(data: dict, fmt: str) -> None:
    """One cluster (`planner.specs.cluster.to_dict`), each number with its source."""
    if fmt != "table":
        return dump(data, fmt)
    sources = data.get("sources", {})
    rows = []
    for key, value in _flatten(data):
        if key in ("sources", "name") or key.startswith("sources."):
            continue
        rows.append((key, _cell(value), _source_of(key, sources)))
    title = data["name"] + (f" — {data['description']}" if data.get("description") else "")
    _console().print(_table(title, ("key", "value", "source"), rows, right_from=3))


def _flatten(data: dict, prefix: str = "") -> list[tuple[str, object]]:
    items: list[tuple[str, object]] = []
    for key, value in data.items():
        if isinstance(value, dict) and value and key != "sources":
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _source_of(key: str, sources: dict[str, str]) -> str:
    """The source whose (comma-separated) dotted path is `key` or a prefix of it."""
    best, best_len = "", -1
    for paths, text in sources.items():
        for path in (p.strip() for p in paths.split(",")):
            if (key == path or key.startswith(path + ".")) and len(path) > best_len:
                best, best_len = text, len(path)
    return best


# ---------------------------------------------------------------- explain

_MEMORY_TERMS = ("parameters", "gradients", "optimizer_states", "activations", "transient", "reserve")
_AXIS_ORDER = ("dp_replicate", "dp_shard", "dp", "cp", "tp", "pp", "ep", "etp", "edp", "host")


def gib(n: float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / 2**30:,.2f}"


def layout_label(par: dict, framework: str | None = None) -> str:
    """Compact layout: `dp4 tp8 pp2 cp1 ep1 · ZeRO-1 · SP · b1 m16 · recompute selective · overlap
    grad-reduce`; the overlaps on as `framework` resolves them (`overlap.names_on`; None: the
    parallelism's own `framework`, else as given)."""
    mesh = " ".join(f"{axis}{par[axis]}" for axis in ("dp", "tp", "pp", "cp", "ep") if axis in par)
    if par.get("etp", 1) > 1:
        mesh += f" etp{par['etp']}"
    parts = [mesh]
    zero = f"ZeRO-{par['zero_stage']}"
    if par.get("dp_shard") not in (None, par.get("dp")):
        zero += f" over dp_shard {par['dp_shard']} (HSDP)"
    parts.append(zero)
    if par.get("sequence_parallel") and par.get("tp", 1) > 1:   # Megatron-LM turns SP off at tp 1
        parts.append("SP")
    if par.get("vpp", 1) > 1:
        parts.append(f"vpp{par['vpp']}")
    parts.append(f"b{par['micro_batch_size']} m{par['num_microbatches']}")
    recompute = par.get("recompute")
    parts.append(f"recompute {recompute}" if isinstance(recompute, str) else "recompute per layer")
    if par.get("recompute_modules") and recompute != "none":
        parts[-1] += f" ({','.join(par['recompute_modules'])})"
    if par.get("offload"):
        parts.append("offload " + ",".join(par["offload"]))
    if par.get("offload_modules"):
        parts.append("offload activations of " + ",".join(par["offload_modules"]))
    if par.get("fp8_param_gather"):
        parts.append("fp8 param gather")
    # plan / check nest the overlaps as costed under "overlap"; explain's full parallelism has them flat
    overlaps = par.get("overlap") or {knob: par.get(knob) for knob in overlap.NAMES.values()}
    on = overlap.names_on(overlaps, framework or par.get("framework"), par["zero_stage"], par)
    if on:
        parts.append("overlap " + ",".join(on))
    if par.get("compile"):
        parts.append("compile")
    return " · ".join(parts)


def _split(par: dict) -> str:
    """A plan's pipeline split as `explain` takes it: `pipeline layers 7, 8x14, 7`
    (`--pipeline-layers`), or for chunks of different sizes the virtual-stage layout that defines
    them (`--pipeline-layout`, which sets vpp) with the layers per rank it gives."""
    layers = _runs(par["pipeline_layers"])
    if par.get("pipeline_layout"):
        return f"pipeline layout {par['pipeline_layout']} (layers per rank {layers})"
    return f"pipeline layers {layers}"


def show_explain(data: dict, fmt: str) -> None:
    """One layout (planner.explain.explain): placement, memory vs capacity, communication, violations."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    par = data["parallelism"]
    console.print(Text(f"{data['model']} on {data['gpus']} x {data['cluster']}: {layout_label(par)}", style="bold"))
    if par.get("pipeline_layout"):
        console.print(Text(f"pipeline layout {par['pipeline_layout']}"))
    console.print(Text(f"{par['framework']} conventions, seq {par['seq_len']:,}, "
                       f"global batch {par['global_batch_size']:,} sequence{'s' * (par['global_batch_size'] != 1)}"
                       + (f", fp8 ({data['fp8_recipe']} scaling)" if data.get("fp8_recipe") else "")))
    console.print()
    console.print(_placement_table(data["placement"]))
    console.print()
    if data["memory_bytes"] is None:
        console.print(Text("memory and communication not costed: the layout breaks a rule below"))
    else:
        console.print(_memory_table(data["memory_bytes"], data["memory_verdict"], data["details"]))
        console.print()
        comm = data["communication_bytes_per_step"]
        console.print(_table(None, ("axis", "communication\nGiB/GPU/step"),
                             ((axis, gib(comm[axis])) for axis in sorted(comm, key=_axis_rank))))
    if data.get("time_s"):
        t = data["time_s"]
        console.print()
        console.print(Text(f"step {t['step']:.3f} s (compute {t['compute']:.3f}, exposed comm "
                           f"{t['communication_exposed']:.3f}, bubble {t['pipeline_bubble']:.3f}, recompute "
                           f"{t['recompute']:.3f}, optimizer {t['optimizer']:.3f}); {t['tokens_per_s']:,.0f} "
                           f"tokens/s, {t['tflops_per_gpu'] * _own(data['mfu_basis']):.0f} TFLOP/s per GPU, "
                           f"MFU {100 * t['mfu'] * _own(data['mfu_basis']):.1f}%"))
        console.print(Text(mfu_note(data["mfu_basis"], t["mfu"])))
    _print_findings(console, data["violations"], [*data["details"].get("warnings", ()), *data.get("assumptions", ())])


def _own(basis: dict | None) -> float:
    """The factor from the returned (PaLM-convention) MFU and TFLOP/s to the framework's own
    convention, which the tables and lines print (`summary.mfu_basis` framework_fraction)."""
    return basis["framework_fraction"] if basis else 1.0


def mfu_note(basis: dict, mfu: float, which: str = "") -> str:
    """One line saying what an MFU / TFLOP/s column or figure means (`summary.mfu_basis`): the FLOPs
    convention -- the one the framework logs its MFU in (`summary.FRAMEWORK_CAUSAL`: Megatron-LM
    counts causal attention, torchtitan and DeepSpeed do not) --, the peak divided by, and -- for
    `mfu` (of plan `which`; the returned PaLM-convention value) -- its value in the other convention
    where the two differ by `summary.CAUSAL_NOTE_FRACTION` or more, and against the bf16 peak where
    the peak is another dtype's."""
    own = basis["framework_fraction"]
    text = (f"MFU, TFLOP/s: {basis['framework_convention']} / dense {basis['peak_precision']} peak "
            f"{basis['peak_tflops']:,.0f} TFLOP/s")
    other = []
    if basis["causal_fraction"] <= 1 - CAUSAL_NOTE_FRACTION:
        other.append(f"{100 * mfu:.1f}% without the causal discount (PaLM App. B, torchtitan's)" if own != 1.0
                     else f"{100 * mfu * basis['causal_fraction']:.1f}% with causal attention FLOPs (Megatron-LM's)")
    if basis["peak_precision"] != "bf16" and basis["bf16_peak_tflops"]:
        other.append(f"{100 * mfu * own * basis['peak_tflops'] / basis['bf16_peak_tflops']:.1f}% of "
                     f"the bf16 peak ({basis['bf16_peak_tflops']:,.0f})")
    return text + (f"; {which + ': ' if which else ''}{', '.join(other)}" if other else "")


def _axis_rank(axis: str) -> int:
    return _AXIS_ORDER.index(axis) if axis in _AXIS_ORDER else len(_AXIS_ORDER)


def _placement_table(placement: dict) -> Table:
    axes = sorted({axis for modes in placement.values() for axis in modes}, key=_axis_rank)
    return _table(None, ("placement\nstate ↓ axis →", *axes),
                  ([state, *(modes.get(axis, "-") for axis in axes)] for state, modes in placement.items()),
                  right_from=len(axes) + 1)


def _memory_table(mem: dict, verdict: str, details: dict) -> Table:
    capacity = mem["capacity"]
    rows = [(term.replace("_", " "), gib(mem[term]), f"{100 * mem[term] / capacity:.1f}%") for term in _MEMORY_TERMS]
    named = {k: v for k, v in details.get("transient_terms", {}).items() if k.startswith("fp8_weight") and v}
    at = next((i for i, row in enumerate(rows) if row[0] == "transient"), len(rows) - 1)
    rows[at + 1:at + 1] = [(f"  incl. {k.replace('_', ' ')}", gib(v), f"{100 * v / capacity:.1f}%")
                           for k, v in named.items()]  # TE's fp8 weight copies (cost.memory.fp8_weight_terms)
    rows += [("total", gib(mem["total"]), f"{100 * mem['total'] / capacity:.1f}%"),
             ("capacity", gib(capacity), "100.0%"), ("verdict", verdict.replace("_", " ").upper(), "")]
    return _table(f"memory per GPU (worst stage: {details.get('stage', 0)})", ("term", "GiB", "of capacity"), rows)


def _print_findings(console: Console, violations: list[dict], warnings: Iterable[str]) -> None:
    for v in violations:
        fix = f" Fix: {v['fix']}" if v.get("fix") else ""
        style = "red" if v.get("severity") == "error" else "yellow"
        console.print(Text.assemble((v.get("severity", "error"), style), f" {v['rule']}: {v['message']}{fix}"))
    for w in warnings:
        console.print(Text.assemble(("note", "yellow"), f" {w}"))


# ---------------------------------------------------------------- plan


def show_plan(data: dict, fmt: str) -> None:
    """`planner plan` (planner.plan.plan): top plans, time split, memory vs capacity, solver, rejections."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    req, solver = data["request"], data["solver"]
    console.print(f"[bold]{escape(req['model'])}[/bold] on {req['gpus']:,} x {escape(req['cluster'])}  (seq "
                  f"{req['seq_len']:,}, global batch {req['global_batch_size']:,} sequence{'s' * (req['global_batch_size'] != 1)} = "
                  f"{req['global_batch_size'] * req['seq_len']:,} tokens, "
                  f"{req['precision']}{_fp8_scaling(req)}{' (fp8 param gather)' if req.get('fp8_param_gather') else ''}, "
                  f"{req['optimizer']}, {req['framework']} conventions"
                  + (f", {req['mtp_layers']} MTP layer{'s' * (req['mtp_layers'] != 1)} trained" if req.get("mtp_layers")
                     else "") + ")")
    console.print(f"solver: [bold]{solver['status']}[/bold]  objective {solver['objective_s']:.3f} s/step, "
                  f"bound {solver['bound_s']:.3f} s; {solver['candidates_evaluated']:,} of "
                  f"{solver['candidates_total']:,} candidates solved, {solver['pruned']:,} pruned by "
                  f"their bound; {solver['wall_s']:.2f} s")
    for why in solver.get("unproven", ()):  # what a FEASIBLE status leaves open (senior review 9 finding 11)
        console.print(Text(f"  not proven: {why}"))
    capacity, usable = data["plans"][0]["memory_bytes"]["capacity"], solver["memory_budget_bytes"]
    # the memory column counts the reserve, so the limit it is held to does too (fresh-user review)
    reserve = req["reserve_bytes"]
    # FEASIBLE: some candidate's bound was not closed (solver.recost_rejected, inexact_memory_programs, an open
    # uneven split), so the plan is not claimed optimal (senior review 8 finding 11)
    claim = "optimal" if solver["status"] == "OPTIMAL" else "the best found (not proven optimal)"
    console.print(f"{claim} among layouts whose memory is within {(usable + reserve) / 2**30:.1f} of "
                  f"{capacity / 2**30:.1f} GiB per GPU ({req['headroom']:.0%} headroom; the "
                  f"{reserve / 2**30:.1f} GiB reserve included; --headroom sets it)")
    console.print()
    console.print(_table("plans (step time split, s)",
                         ("#", "mesh", "step", "compute", "exposed\ncomm", "bubble", "recomp",
                          "optim", "tokens/s", "TFLOP/s\n/GPU", "MFU", "memory\nGiB"),
                         (_plan_row(i, p, _own(data["mfu_basis"])) for i, p in enumerate(data["plans"], 1)),
                         right_from=2))
    for i, p in enumerate(data["plans"], 1):
        par = p["parallelism"]
        console.print(f"  {i}: {layout_label(par, data['request']['framework'])}; {_split(par)}"
                      + ("" if isinstance(par["recompute"], str) else
                         "; recompute per stage " + recompute_mix.format_stages(par["recompute"]))
                      + (f"; {p['connections']}" if p.get("connections") else ""))
    console.print(Text(mfu_note(data["mfu_basis"], data["plans"][0]["mfu"], "#1")))
    if data.get("simpler_alternative"):
        console.print(Text(simpler_note(data["simpler_alternative"], data["plans"])))
    if data.get("roomier_alternative"):
        console.print(Text(roomier_note(data["roomier_alternative"], data["plans"])))
    console.print()
    top = data["plans"][0]
    console.print(_memory_table(top["memory_bytes"], top["memory_verdict"],
                                {"stage": top["memory_bytes"].get("stage", 0)}))
    for warning in data.get("warnings", ()):
        console.print(Text.assemble(("warning", "yellow"), f" {warning}"))
    for assumption in data.get("assumptions", ()):   # what the step times take as given (plan.plan)
        console.print(Text.assemble(("note", "yellow"), f" {assumption}"))
    if data["rejected"]:
        console.print()
        console.print(_table("rejected candidates", ("reason", "count"),
                             ((r["reason"].replace("_", " "), f"{r['count']:,}") for r in data["rejected"])))


def simpler_note(alt: dict, plans: list[dict]) -> str:
    """One line: runner-up `alt` (`plan.simpler_alternative`) ties #1 within the model's error and
    has fewer moving parts."""
    first, other = plans[0]["parallelism"], plans[alt["plan"] - 1]["parallelism"]
    fewer = ", ".join(f"{axis} {_axis_value(other, axis)} vs {_axis_value(first, axis)}"
                      for axis in alt["fewer"])
    return (f"tie within the model: #{alt['plan']} is {100 * alt['slower_fraction']:.1f}% slower than "
            f"#1 with fewer moving parts ({fewer}), inside the step-time model's "
            f"{100 * alt['model_error_fraction']:.1f}% median error on held-out runs; the simpler "
            f"#{alt['plan']} is as sound a choice unless measured")


def roomier_note(alt: dict, plans: list[dict]) -> str:
    """One line: runner-up `alt` (`plan.roomier_alternative`) ties #1 within the model's error and
    leaves more memory under the at-risk line."""
    gib = 2**30
    return (f"memory headroom: #1 leaves {alt['first_free_bytes'] / gib:.1f} GiB under the at-risk line; "
            f"#{alt['plan']}, {100 * alt['slower_fraction']:.1f}% slower (inside the step-time model's "
            f"{100 * alt['model_error_fraction']:.1f}% median error on held-out runs), leaves "
            f"{alt['free_bytes'] / gib:.1f} GiB: the roomier launch unless measured")


def _axis_value(par: dict, axis: str) -> int | str:
    if axis == "pipeline stages":
        return par["pp"] * par["vpp"]
    if axis == "ZeRO-3":
        return "yes" if par["zero_stage"] == 3 else "no"
    if axis == "fully recomputed layers":
        return recompute_mix.full_layers(par)
    if axis == "offloaded states":
        return ",".join(par.get("offload", ())) or "none"
    return par[axis]


def _plan_row(i: int, p: dict, own: float) -> list:
    """One plan's cells; `own`: the factor to the framework's MFU convention (`_own`)."""
    t, mem = p["time_s"], p["memory_bytes"]
    par = p["parallelism"]
    mesh = " ".join(f"{a}{par[a]}" for a in ("dp", "tp", "pp", "cp", "ep") if a != "ep" or par[a] > 1)
    return [i, mesh, f"{t['step']:.3f}", f"{t['compute']:.3f}",
            f"{t['communication_exposed']:.3f}", f"{t['pipeline_bubble']:.3f}",
            f"{t['recompute']:.3f}", f"{t['optimizer']:.3f}", f"{p['tokens_per_s']:,.0f}",
            f"{p['tflops_per_gpu'] * own:.0f}", f"{100 * p['mfu'] * own:.1f}%",
            gib(mem["total"])]


def _runs(values: list[int]) -> str:
    """[8, 8, 8, 7] -> `8x3, 7` (run-length)."""
    out, i = [], 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        out.append(f"{values[i]}x{j - i}" if j - i > 1 else str(values[i]))
        i = j
    return ", ".join(out)


# ---------------------------------------------------------------- check


def show_checks(results: list[dict], fmt: str) -> None:
    """`planner check FILE...`: every file's result in order (`show_check`); json / yaml: one
    file's dict, or the list of them for several; github / junit: `planner.check.ci_formats`. A
    file that could not be read (`{file, verdict: error, error}`) is an error line on stderr
    (and an entry of the list, the annotation, the JUnit `<error>`)."""
    from planner.check import ci_formats

    if fmt == "github":
        return line("\n".join(ci_formats.github(results)))
    if fmt == "junit":
        return line(ci_formats.junit(results))
    if fmt != "table":
        for result in results:
            if result["verdict"] == "error":
                error(result["error"])
        return dump(results[0] if len(results) == 1 else results, fmt)
    for i, result in enumerate(results):
        if result["verdict"] == "error":
            _out().flush()
            error(result["error"])
            continue
        if i:
            _console().print()
        kind = result.get("kind")
        (show_serve_check if kind == "serving-plan" else show_engine_check if "launches" in result
         else show_check)(result, fmt)


def show_check(data: dict, fmt: str) -> None:
    """`planner check` (planner.check.check_file): verdict, layout, memory per stage, findings."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    verdict = data["verdict"].upper()
    console.print(Text.assemble((verdict, "bold green" if verdict == "PASS" else "bold red"),
                                f" {data['file']} ({data['kind']}): {data['model']} on "
                                f"{data['gpus']:,} x {data['cluster']}"))
    par = data["parallelism"]
    split = f"; pipeline layers {_runs(par['pipeline_layers'])}" if par.get("pipeline_layers") else ""
    console.print(Text(f"{layout_label(par)}{split}; {par['framework']} conventions, seq "
                       f"{par['seq_len']:,}, global batch {par['global_batch_size']:,} sequence{'s' * (par['global_batch_size'] != 1)}"))
    if data["stages"]:
        console.print()
        console.print(_table("memory per GPU by pipeline stage (GiB)",
                             ("stage", "recompute", "params", "grads", "optim", "activ", "trans",
                              "reserve", "total", "capacity", "verdict"),
                             (_stage_cells(row) for row in data["stages"]), right_from=2))
        if _transient_line(data["stages"]):
            console.print(Text(_transient_line(data["stages"])))
    if data.get("time_s"):
        t = data["time_s"]
        console.print(Text(f"step {t['step']:.3f} s (compute {t['compute']:.3f}, exposed comm "
                           f"{t['communication_exposed']:.3f}, bubble {t['pipeline_bubble']:.3f}, "
                           f"recompute {t['recompute']:.3f}, optimizer {t['optimizer']:.3f}); "
                           f"{data['tokens_per_s']:,.0f} tokens/s, "
                           f"MFU {100 * data['mfu'] * _own(data['mfu_basis']):.1f}%"))
        console.print(Text(mfu_note(data["mfu_basis"], data["mfu"])))
    if data["violations"]:
        console.print()
    _print_findings(console, data["violations"], data.get("assumptions", ()))


def _transient_line(stages: list[dict]) -> str:
    """The largest transient of the stages term by term (`gate.term_rows`; JSON has every stage's): the
    column is the peak of these over the step's phases (loss backward, layer backward, optimizer step never
    coexist), so they need not add up to it."""
    row = max(stages, key=lambda r: r["memory_bytes"]["transient"])
    terms = [f"{k.replace('_', ' ')} {gib(v)}" for k, v in list(row.get("transient_terms", {}).items())[:4]
             if v >= 2**20]
    return (f"trans of stage {row['stage']}, the peak over the step's phases of: {', '.join(terms)} (GiB)"
            if terms else "")


def _stage_cells(row: dict) -> list:
    mem = row["memory_bytes"]
    recompute = recompute_mix.format_stage(row["recompute"])
    return [row["stage"], recompute, *(gib(mem[t]) for t in _MEMORY_TERMS), gib(mem["total"]),
            gib(mem["capacity"]), row["verdict"].replace("_", " ")]


def show_emitted(launch, searched: dict) -> None:
    """`plan --emit`: the launch configuration on stdout (nothing else, so it can be redirected to
    a file; nothing when it fails its check); on stderr which plan it is, each deviation from
    that plan, and the verdict and step time of `planner check` on the configuration against the
    search's best plan."""
    emitted, verdict = launch.emitted, launch.verdict
    best = searched["plans"][0]["time_s"]["step"]
    which = _which_plan(launch, best)
    if verdict["verdict"] == "pass":  # a configuration that fails its check is not printed
        text = emitted.text if emitted.text.endswith("\n") else emitted.text + "\n"
        sys.stdout.write(_header_comment(text, emitted.suffix, which))
    if which:
        note(which)
    for line_ in emitted.deviations + emitted.placeholders:
        note(line_)
    step = verdict.get("time_s") and verdict["time_s"]["step"]
    timing = f"; {step:.3f} s/step as emitted (search's best plan: {best:.3f} s)" if step else ""
    sys.stderr.write(f"check: {verdict['verdict'].upper()} (the {emitted.framework} configuration "
                     f"read back by `planner check`{timing})\n")
    for v in verdict["violations"]:
        if v["severity"] == "error":
            sys.stderr.write(f"error: {v['rule']}: {' '.join(v['message'].split())}\n")


def _header_comment(text: str, suffix: str, which: str | None) -> str:
    """`text` with `which` (the emitted plan is not the table's #1) as a comment after the shebang of a
    script or at the top of a TOML file, so that it survives copy-paste (senior review 8 finding 11); a
    JSON config has no comments: unchanged."""
    if not which or suffix not in (".sh", ".toml"):
        return text
    head, _, rest = text.partition("\n") if text.startswith("#!") else ("", "", text)
    comment = "# NOTE: " + which + "\n"
    return f"{head}\n{comment}{rest}" if head else comment + rest


def _which_plan(launch, best: float) -> str | None:
    """Which plan an `--emit` configuration launches when it is not the search's best plan as planned
    (None when it is)."""
    if launch.instead_of is not None or launch.index:
        chosen, first = launch.source["plans"][launch.index], launch.instead_of
        if first is None:
            as_emitted = "cannot be launched by it"
        elif first.verdict["verdict"] == "pass":
            as_emitted = f"runs {first.step_s:.3f} s/step"
        else:
            as_emitted = "fails `planner check`"
        rank = "the best plan" if launch.index == 0 else f"plan #{launch.index + 1}"
        which = f"the search's {rank}"
        framework = launch.emitted.framework
        return (f"emitted {which} ({layout_label(chosen['parallelism'], framework)}), "
                f"{launch.step_s:.3f} s/step as {framework} launches it: the search's best plan ({best:.3f} s/step as "
                f"planned) {as_emitted}"
                + (f" with the changes {framework} needs ({len(first.emitted.deviations)} "
                   f"deviation(s))" if first is not None else ""))
    return None


class plan_progress:  # noqa: N801  (used as a context manager: `with plan_progress() as tick`)
    """A transient progress bar on stderr, shown once a search has run for `delay_s`; yields the
    `on_progress(visited, total)` callback for `planner.plan.plan`."""

    def __init__(self, delay_s: float = 1.0):
        import time

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        self._clock = time.perf_counter
        self._start = self._clock()
        self._delay = delay_s
        self._progress = Progress(TextColumn("searching layouts"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(file=sys.stderr),
                                  transient=True)
        self._task = None

    def __enter__(self):
        return self._tick

    def _tick(self, visited: int, total: int) -> None:
        if self._task is None:
            if self._clock() - self._start < self._delay or not self._progress.console.is_terminal:
                return
            self._progress.start()
            self._task = self._progress.add_task("search", total=total)
        self._progress.update(self._task, completed=visited, total=total)

    def __exit__(self, *exc) -> None:
        if self._task is not None:
            self._progress.stop()


def wrote(path: str) -> None:
    """One line on stderr saying a file was written."""
    sys.stderr.write(f"wrote {path}\n")


def write_yaml(path: str, data: dict) -> None:
    """Write `data` as block-style YAML to `path` and say so on stderr; `-` is stdout.

    Raises:
        SpecError: the path cannot be opened for writing (permissions changed meanwhile: exit 2).
        OutputError: the write failed (full disk, quota, I/O error: exit 1), `errors.write_failure`.
    """
    from planner.errors import write_failure

    if path == "-":
        sys.stdout.write(_yaml(data))
        return
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(_yaml(data))
    except OSError as exc:
        raise write_failure(path, exc, "--output") from None
    wrote(path)


# ---------------------------------------------------------------- serve-plan

def _serve_label(par: dict) -> str:
    """A serving layout record (tp, pp, ep, dp) as `cost.serving.Instance.label` spells it."""
    return Instance(tp=par["tp"], pp=par.get("pp", 1), ep=par.get("ep", 1), adp=par.get("dp", 1),
                    redundant=par.get("redundant_experts", 0), dense_dp=par.get("dense_dp", False)).label


def _workers_label(workers: list[dict]) -> str:
    """A disaggregated mix: `3 x prefill tp8 @1 + 1 x decode tp8 @64`."""
    return " + ".join(f"{w['workers']:,} x {w['role']} {_serve_label(w['parallelism'])} @{w['concurrency']:,}"
                      for w in workers)


def show_serve_plan(data: dict, fmt: str) -> None:
    """`planner serve-plan` (planner.serve.serve_plan): deployment, top plans, memory of the best, Pareto front."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    req, solver, dep = data["request"], data["solver"], data["deployment"]
    slo = ", ".join(f"{'' if k == 'request_latency_ms' else 'mean '}{k.replace('_ms', '').replace('_', ' ').upper()} "
                    f"<= {req[k]:g} ms"
                    for k in ("ttft_ms", "tpot_ms", "request_latency_ms") if req.get(k)) or "no SLO"
    load = (f"{number(req['request_rate'])} requests/s" if req.get("request_rate") else
            f"concurrency {req['concurrency']:,} per instance" if req.get("concurrency") else "concurrency searched")
    console.print(f"[bold]{escape(req['model'])}[/bold] on up to {req['gpus']:,} x {escape(req['gpu'])}  "
                  f"({req['engine']}, weights {req['weight_dtype']}, KV {req['kv_dtype']}, "
                  f"{req['input_len']:,} in / {req['output_len']:,} out tokens, {slo}, {load})")
    console.print(f"solver: [bold]{solver['status']}[/bold]  {solver['objective'].replace('_', ' ')} "
                  f"{solver['objective_value']:,}; {solver['candidates_evaluated']:,} candidates of "
                  f"{solver['shapes']} shapes; {solver['wall_s']:.2f} s")
    if "workers" in dep:
        mix = _workers_label(dep["workers"])
    else:
        mix = " + ".join(f"{p['parallelism']['replicas']:,} x {_serve_label(p['parallelism'])} @{p['concurrency']:,}"
                         for p in dep["mix"])
    served = (f"serves {number(dep['requests_per_s'])} requests/s, {dep['tokens_per_s']:,.0f} output tokens/s "
              f"({dep['tokens_per_s_per_gpu']:,.1f} /GPU), {dep['utilisation']:.1%} of its capacity "
              f"({number(dep['capacity_requests_per_s'])} requests/s)" if "utilisation" in dep else
              f"{dep['tokens_per_s']:,.0f} output tokens/s ({dep['tokens_per_s_per_gpu']:,.1f} /GPU), "
              f"{number(dep['requests_per_s'])} requests/s")
    console.print(f"deployment: {mix} on {counted(dep['gpus'], 'GPU')}: {served}")
    console.print()
    # at a request rate the engine's cap on running requests and the requests it runs at that load differ;
    # TTFT / TPOT are those at the load (fresh-user review 12, finding 3)
    loaded = any("in_service" in p for p in data["plans"])
    console.print(_table("plans", ("#", "instance", "replicas", "cap\n(running)" if loaded else "conc.", "TTFT\nms",
                                   "TPOT\nms", "output\ntok/s/GPU", "output\ntok/s/user", "KV pool\nGiB",
                                   "max\nconc."),
                         ([i, _workers_label(p["workers"]) if "workers" in p else _serve_label(p["parallelism"]),
                           f"{sum(w['workers'] for w in p.get('workers', ())) or p['parallelism']['replicas']:,}",
                           f"{p['concurrency']:,}" + (f" ({p['in_service']:,.1f})" if "in_service" in p else ""),
                           f"{p['ttft_ms']:,.0f}", f"{p['tpot_ms']:,.1f}", f"{p['tokens_per_s_per_gpu']:,.1f}",
                           f"{p['tokens_per_s_per_user']:,.1f}", gib(p["memory_bytes"]["kv_cache"]),
                           f"{p['max_concurrency']:,}"] for i, p in enumerate(data["plans"], 1)), right_from=2))
    console.print()
    _serve_memory(console, data["plans"][0])
    if "workers" in dep:
        console.print()
        console.print(_table("workers", ("role", "instance", "workers", "conc.", "TTFT\nms", "TPOT\nms", "requests/s",
                                         "output\ntok/s", "KV pool\nGiB"),
                             ([w["role"], _serve_label(w["parallelism"]), f"{w['workers']:,}", f"{w['concurrency']:,}",
                               w.get("ttft_ms", ""), w.get("tpot_ms", ""), number(w['requests_per_s']),
                               f"{w.get('tokens_per_s', 0):,.0f}" if w["role"] == "decode" else "",
                               gib(w["memory_bytes"]["kv_cache"])] for w in dep["workers"]), right_from=2))
    if not data["pareto"]:
        for text in data.get("notes", ()):
            console.print(f"note: {escape(text)}")
        return
    console.print()
    console.print(_table("Pareto front (output tokens/s/GPU vs /user)", ("instance", "conc.", "output\ntok/s/GPU",
                                                                        "output\ntok/s/user", "TTFT\nms", "TPOT\nms"),
                         ([_serve_label(p), f"{p['concurrency']:,}", f"{p['tokens_per_s_per_gpu']:,.1f}",
                           f"{p['tokens_per_s_per_user']:,.1f}", f"{p['ttft_ms']:,.0f}", f"{p['tpot_ms']:,.1f}"]
                          for p in data["pareto"][:10]), right_from=1))
    for text in data.get("notes", ()):
        console.print(f"note: {escape(text)}")


def _longest(rec: dict) -> str:
    """The longest single context, with what bounds it when the model's own maximum does."""
    text = f"{rec['longest_context']:,} tokens"
    if rec.get("longest_context_bound") == "max_position_embeddings":
        text += " (the model's max_position_embeddings binds; the KV pool holds more)"
    elif rec.get("longest_context_bound") == "max_model_len":
        text += " (max_model_len binds: the engine refuses longer requests; the KV pool holds more)"
    return text


def _serve_memory(console: Console, plan: dict) -> None:
    mem = plan["memory_bytes"]
    rows = [("weights", mem["weights"]), ("activation peak", mem["activations"]),
            ("reserve (non-torch + CUDA graphs)", mem["reserve"]), ("KV pool", mem["kv_cache"]),
            ("capacity", mem["capacity"])]
    console.print(_table(f"memory per GPU of {_serve_label(plan['parallelism'])}", ("term", "GiB"),
                         ((name, gib(value)) for name, value in rows)))
    console.print(f"KV pool holds {plan['kv_tokens']:,} tokens: {plan['max_concurrency']:,} sequences at the "
                  f"asked length; longest single context {_longest(plan)}")


def show_serve_infeasible(data: dict, fmt: str) -> None:
    """What `serve-plan` prints before its error line when nothing fits: the closest plan's numbers."""
    if fmt != "table":
        return dump(data, fmt)
    plan = data.get("closest_plan")
    if plan and "memory_bytes" in plan:
        console = _console()
        console.print(f"closest plan ({data.get('binding', '?')} binds):")
        _serve_memory(console, {"longest_context": plan.get("longest_context", 0),
                                "max_concurrency": plan.get("max_concurrency", 0), **plan})


def plot_pareto(data: dict, path: str) -> None:
    """Draw the Pareto front (tokens/s/GPU vs tokens/s/user) to `path` with matplotlib (optional extra).

    Raises:
        SpecError: matplotlib is not installed (`pip install 'planner[plot]'`), or the path cannot
            be opened for writing; OutputError: the write failed (`errors.write_failure`).
    """
    from planner.errors import SpecError, write_failure

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecError("matplotlib is not installed; install it with pip install 'planner[plot]' "
                        "(or drop --plot)", key="--plot") from None
    front = data["pareto"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p["tokens_per_s_per_user"] for p in front], [p["tokens_per_s_per_gpu"] for p in front], "o-")
    for p in front:
        ax.annotate(f"{_serve_label(p)} @{p['concurrency']}", (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]),
                    fontsize=7)
    ax.set_xlabel("tokens/s per user")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title(f"{data['request']['model']} on {data['request']['gpu']}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise write_failure(path, exc, "--plot") from None
    plt.close(fig)
    wrote(path)


def show_serve_validation(data: dict, fmt: str) -> None:
    """`planner validate --suite serving`: MAPE overall and per engine, GPU and model (rows in json/yaml)."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    s = data["summary"]
    console.print(f"{data['suite']} validation on {escape(data['data'])} ({data['part']} rows): "
                  f"TTFT MAPE {s['ttft_mape']}%, TPOT MAPE {s['tpot_mape']}%, n = {s['n']}")
    harness = data.get("harness", {})
    console.print("measurement harness: " + ", ".join(f"{name} {n}" for name, n in harness.items()))
    if "plain" in harness:
        console.print("  plain: rows without a `harness` value (no such column in the file), costed as a steady "
                      "closed loop at exactly isl / osl tokens, no start burst; name inferencex, sweep or sweep-sla "
                      "in a `harness` column to cost a row as that campaign ran it")
    for key in ("engine", "gpu", "model"):
        console.print()
        console.print(_table(f"by {key}", (key, "n", "TTFT MAPE %", "TPOT MAPE %"),
                             ([name, m["n"], m["ttft_mape"], m["tpot_mape"]] for name, m in data["by"][key].items())))


def _pool_basis(row: dict) -> str:
    """What set an engine launch's KV pool: a flag (vLLM kv_cache_memory_bytes, SGLang max_total_tokens) or
    the engine's budget fraction of the GPU's capacity."""
    rec = row["recomputed"]
    return rec.get("kv_pool_set_by") or (f"{row['engine']} budget {rec['budget_fraction']:g} x "
                                         f"{gib(rec['memory_bytes']['capacity'])} GiB")


def show_serve_check(data: dict, fmt: str) -> None:
    """`planner check` of a serving plan file (planner.check.serving_plan): verdict, recomputed numbers, findings."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    verdict = data["verdict"].upper()
    par = data["parallelism"]
    console.print(Text.assemble((verdict, "bold green" if verdict == "PASS" else "bold red"),
                                f" {data['file']} ({data['kind']}): {data['model']} on up to "
                                f"{data['gpus']:,} x {data['cluster']}: {par['replicas']} x {_serve_label(par)}"))
    rec = data["recomputed"]
    if rec:
        mem = rec["memory_bytes"]
        line_ = (f"weights {gib(mem['weights'])} GiB, activations {gib(mem['activations'])}, reserve "
                 f"{gib(mem['reserve'])}, KV pool {gib(mem['kv_cache'])} of {gib(mem['capacity'])} GiB: "
                 f"{rec['kv_tokens']:,} tokens, {rec['max_concurrency']:,} sequences, longest context "
                 f"{_longest(rec)}")
        if "ttft_ms" in rec:
            line_ += f"; TTFT {rec['ttft_ms']:,} ms, TPOT {rec['tpot_ms']} ms"
        console.print(Text(line_))
    if data["violations"]:
        console.print()
    _print_findings(console, data["violations"], data["warnings"])


# ---------------------------------------------------------------- validate --suite training|memory|all

def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _value_text(value: float | None, convention: str) -> str:
    """A published or predicted number in its convention's precision."""
    if value is None:
        return "-"
    digits = {"tokens_per_s_per_gpu": 0, "step_time_s": 2}.get(convention, 1)
    return f"{value:,.{digits}f}"


_CONVENTION_SHORT = {"tokens_per_s_per_gpu": "tok/s/GPU", "model_tflops_per_gpu": "TFLOP/s",
                     "hardware_tflops_per_gpu": "hw TFLOP/s", "step_time_s": "step s",
                     "peak_memory_gib": "peak GiB"}
"""Units of the published numbers (hw TFLOP/s count recomputation, TFLOP/s do not)."""


def _summary_line(s: dict) -> str:
    return (f"n = {s['n']}: median |error| {_pct(s['median_abs_error'])}, mean {_pct(s['mean_abs_error'])}, "
            f"max {_pct(s['max_abs_error'])}, within 10% {s['within_10']}, within 25% {s['within_25']}, "
            f"bias {_pct(s['bias'], True)}; rated does_not_fit {s['does_not_fit']}, "
            f"not expressible {s['not_expressible']}")


def _group_rows(result: dict) -> list[list]:
    return [[f"{_GROUP_LABEL[key]}{name}", s["n"], _pct(s["median_abs_error"]), _pct(s["mean_abs_error"]),
             _pct(s["max_abs_error"]), s["within_10"], s["within_25"], _pct(s["bias"], True), s["does_not_fit"]]
            for key, groups in result["by"].items() for name, s in groups.items()]


_GROUP_LABEL = {"gpu_family": "GPU ", "model_class": "model ", "precision": "precision ", "gpu_family x precision": ""}
_GROUP_COLUMNS = ("group", "n", "median", "mean", "max", "≤10%", "≤25%", "bias", "does_not_fit")
"""Statistics columns: median, mean and max of |error|, counts within 10 % and 25 %, mean signed error."""


def _result_rows(result: dict) -> list[list]:
    return [[r["id"], r["part"][:4], _CONVENTION_SHORT[r["convention"]],
             _value_text(r["published"], r["convention"]), _value_text(r["predicted"], r["convention"]),
             _pct(r["error"], True), r["verdict"]] for r in result["rows"] if r["not_expressible"] is None]


_ROW_COLUMNS = ("run", "part", "unit", "published", "predicted", "error", "verdict")


def show_training_validation(data: dict, fmt: str) -> None:
    """`planner validate --suite training|memory|all`: statistics, per group, per row, and the rows
    that cannot be expressed with why (json/yaml: the whole result)."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    results = data["suites"].values() if "suites" in data else [data]
    for i, result in enumerate(results):
        if i:
            console.print()
        if not result["rows"]:
            what = "publishes a peak memory" if result["suite"] == "memory" else "is in this part"
            console.print(Text(f"{result['suite']} validation on {data['data']} ({result['part']} rows): "
                               f"no row {what}"))
            continue
        console.print(Text(f"{result['suite']} validation on {data['data']} ({result['part']} rows): "
                           + _summary_line(result["summary"])))
        console.print()
        console.print(_table("by group (|error| statistics; bias = mean signed error)", _GROUP_COLUMNS,
                             _group_rows(result)))
        console.print()
        console.print(_table("by row (error: + = predicted faster / larger than published)", _ROW_COLUMNS,
                             _result_rows(result), right_from=3))
        missing = [r for r in result["rows"] if r["not_expressible"] is not None]
        if missing:
            console.print()
            console.print(_table("not expressible", ("run", "why"),
                                 ([r["id"], r["not_expressible"]] for r in missing), right_from=2))


def _md_table(columns: Sequence[str], rows: Iterable[Sequence[object]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(columns))]
    return [f"| {' | '.join(columns)} |", f"| {' | '.join(align)} |",
            *("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows)]


def training_validation_markdown(everything: dict, evaluation: dict) -> str:
    """docs/validation.md: `validate --suite all` over all rows and over the evaluation part (text only;
    `python -m planner.validate_training --write` writes it)."""
    lines = [
        "# Validation: predicted vs published training throughput and memory",
        "",
        "Generated by `make validate` (`python -m planner.validate_training --write`) from "
        "`tests/data/reference/training_runs.yaml` and `expert_configs.yaml` (copies of shared/reference); do not "
        "edit by hand (tests/test_validate_training.py checks it is current). The same numbers: "
        "`planner validate --suite all [--part evaluation] [--format json]`.",
        "",
        "Every prediction goes through `planner.explain.explain` (the code path of `planner explain`). Rows "
        "are split by crc32(id) % 4 == 0 into an EVALUATION part (never used to fit a constant) and a FIT part; "
        "each GPU family whose MoE rows all hash into FIT sends its MoE row of the smallest crc32(id) to the "
        "EVALUATION part (`validate_training.stratified_parts`). "
        "`error` is the throughput error: predicted / published - 1 for throughputs, published / predicted - 1 "
        "for a step time, so + means the tool is optimistic; memory: predicted / published peak - 1.",
        "",
    ]
    for name in ("training", "memory"):
        ev, al = evaluation["suites"][name], everything["suites"][name]
        lines += [f"## {name} suite", "",
                  f"- evaluation part: {_summary_line(ev['summary'])}",
                  f"- all rows: {_summary_line(al['summary'])}", "",
                  "Evaluation part by group:", "", *_md_table(_GROUP_COLUMNS, _group_rows(ev)), "",
                  "All rows by group:", "", *_md_table(_GROUP_COLUMNS, _group_rows(al)), "",
                  "Every row:", "",
                  *_md_table(("run", "part", "cluster", "layout", "published as", "published", "predicted",
                              "error", "verdict"),
                             ([r["id"], r["part"], r["cluster"], r["layout"], _CONVENTION_SHORT[r["convention"]],
                               _value_text(r["published"], r["convention"]),
                               _value_text(r["predicted"], r["convention"]), _pct(r["error"], True), r["verdict"]]
                              for r in al["rows"] if r["not_expressible"] is None), right_from=5), ""]
        missing = [r for r in al["rows"] if r["not_expressible"] is not None]
        if missing:
            lines += ["Rows the tool cannot express (kept, never dropped):", "",
                      *_md_table(("run", "why"), ([r["id"], r["not_expressible"]] for r in missing), 2), ""]
    used = everything["suites"]["training"]["assumptions"] | everything["suites"]["memory"]["assumptions"]
    lines += ["## Assumptions where a row is silent", "",
              "One per group, written as data (`planner/validate_training.py` ASSUMPTIONS); each row lists the "
              "keys it uses in `planner validate --format json`.", "",
              *(f"- `{key}`: {text}" for key, text in used.items())]
    return "\n".join(lines) + "\n"


def show_engine_check(data: dict, fmt: str) -> None:
    """`planner check` of a vLLM / SGLang launch (planner.check.engine_launch): verdict, each launch's
    layout and memory per GPU under the engine's budget, findings."""
    if fmt != "table":
        return dump(data, fmt)
    console = _console()
    verdict = data["verdict"].upper()
    console.print(Text.assemble((verdict, "bold green" if verdict == "PASS" else "bold red"),
                                f" {data['file']} ({data['kind']}): {data['model']} on up to "
                                f"{data['gpus']:,} x {data['cluster']}"))
    for row in data["launches"]:
        par = row["parallelism"]
        role = f" {row['role']} worker" if row["role"] else ""
        head = f"line {row['line']}:{role} {par['replicas']} x {_serve_label(par)} ({counted(row['world'], 'GPU')})"
        rec = row["recomputed"]
        if rec:
            mem = rec["memory_bytes"]
            head += (f"; per GPU: weights {gib(mem['weights'])} GiB, activation peak {gib(mem['activations'])}, "
                     f"reserve {gib(mem['reserve'])}, KV pool {gib(mem['kv_cache'])} ({_pool_basis(row)}): "
                     f"{rec['kv_tokens']:,} tokens, "
                     f"longest context {_longest(rec)}, {counted(rec['max_concurrency'], 'sequence')} of "
                     f"{rec['max_model_len']:,}")
        console.print(Text(head))
    for row in data.get("routers", ()):
        port = f", requests to port {row['port']}" if row["port"] else ""
        over = (f"{len(row['servers'])} server(s)" if row.get("servers") else
                f"{len(row['prefill'])} prefill and {len(row['decode'])} decode worker(s)")
        console.print(Text(f"line {row['line']}: router ({row['router']}) over {over}{port}"))
    if data["violations"] or data["warnings"]:
        console.print()
    _print_findings(console, data["violations"], data["warnings"])


def show_serve_emitted(text: str, verdict: dict, engine: str) -> None:
    """`serve-plan --emit`: the launch script on stdout (nothing when it fails its check), and on
    stderr the verdict of `planner check` on it with its errors."""
    if verdict["verdict"] == "pass":
        sys.stdout.write(text)
    sys.stderr.write(f"check: {verdict['verdict'].upper()} (the {engine} launch read back by `planner check`)\n")
    for v in verdict["violations"]:
        if v["severity"] == "error":
            sys.stderr.write(f"error: {v['rule']}: {' '.join(v['message'].split())}\n")
