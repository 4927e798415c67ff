"""One vocabulary per framework: each Megatron-LM flag, DeepSpeed key and torchtitan key the planner
knows is spelled in its `planner/frameworks/<framework>.py` table and in no other module under
planner/ (readers, writers, the gate's fixes and the rules read the tables).

The scan is a grep: the raw text of every planner/**/*.py file (code, strings, docstrings and
comments), the name delimited as a whole word. Names that are also someone else's words are
left out and listed below with why; occurrences in modules outside this vocabulary's users
(citations in cost/ and placement docstrings) are listed in `ELSEWHERE` with the module.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from planner.cli import app
from planner.frameworks import deepspeed, megatron, torchtitan

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted((ROOT / "planner").rglob("*.py"))}

PLANNER_OPTIONS_SHARED = {"--global-batch-size", "--micro-batch-size", "--optimizer", "--sequence-parallel",
                          "--main-params-dtype", "--main-grads-dtype", "--exp-avg-dtype",
                          "--exp-avg-sq-dtype", "--fp8-recipe", "--fp8-param-gather", "--recompute-modules",
                          "--offload-modules"}
"""Megatron flags spelled like `planner`'s own CLI options (`planner explain --micro-batch-size`,
`plan --optimizer`): a grep cannot tell the two apart, so they are not scanned (their Megatron use
goes through the table all the same)."""

DEEPSPEED_SHARED = {"bf16", "bfloat16", "fp16", "optimizer", "type", "stage", "enabled", "device", "params",
                    "tp", "tp_size", "tensor_parallel", "expert_parallel", "data_parallel_size"}
"""DeepSpeed key segments that are also the planner's own terms (bf16, optimizer, stage), torch or
JSON words (type, device, enabled, params), other frameworks' names (vLLM tp_size, Megatron's
data_parallel_size argument, its `tensor_parallel/` package) or planner function names
(`strategies.tensor_parallel`, `expert_parallel`): not scanned."""

TORCHTITAN_SHARED = {"batch_size", "global_batch_size", "seq_len", "dtype", "mode", "converters",
                     "name", "flavor", "description", "enable"}
"""torchtitan keys that are also the planner's own field names or common words: not scanned."""

ELSEWHERE = {
    "planner/placement/layout.py": {"--num-layers-per-virtual-pipeline-stage", "--recompute-granularity"},
    "planner/search/ilp.py": {"--recompute-granularity"},
    "planner/cost/memory.py": {"offload_param", "pipeline_parallel_microbatches",
                               "stage3_prefetch_bucket_size", "reduce_bucket_size", "stage3_max_live_parameters"},
    "planner/cost/activations.py": {"selective_ac_option", "--hidden-dropout", "--attention-dropout"},
    "planner/placement/precision.py": {"mixed_precision_param", "--make-vocab-size-divisible-by"},
    "planner/validate_training.py": {"activation_checkpointing"},
    "planner/frameworks/vllm.py": {"--nnodes"},
    "planner/frameworks/sglang.py": {"--nnodes"},
}
"""Docstring citations in modules outside the framework readers, writers, gate and rules (the
Layout's field docs, the ILP's and the cost model's sources), left to their owners; and the
training_runs.yaml column `activation_checkpointing` that validate_training reads (a data-file key
of the torchtitan rows, not a DeepSpeed config key)."""


def _word(name: str) -> re.Pattern:
    """`name` as a whole flag or key: not inside a longer flag (`-`) or identifier (`_`, letters)."""
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")


RUNS = {path: set(re.findall(r"[\w-]+", text)) for path, text in SOURCES.items()}
"""Each file's maximal runs of word characters and hyphens: a name made of those characters
occurs as a whole word (`_word`) exactly where it is one of the file's runs."""


def _holders(name: str) -> set[str]:
    if re.fullmatch(r"[\w-]+", name):
        return {path for path, runs in RUNS.items() if name in runs}
    pattern = _word(name)
    return {path for path, text in SOURCES.items() if pattern.search(text)}


def _check(names: set[str], home: str) -> None:
    for name in sorted(names):
        holders = _holders(name)
        assert home in holders, f"{name}: the scan does not find it in its own table {home}"
        stray = holders - {home} - {path for path, known in ELSEWHERE.items() if name in known}
        assert not stray, f"{name} is spelled outside {home}: {sorted(stray)} (read it from the table)"


def _planner_options() -> set[str]:
    options: set[str] = set()

    def walk(command) -> None:
        for param in command.params:
            options.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return options


def test_megatron_flags_live_in_the_megatron_table_only():
    flags = {f.flag for f in megatron.FLAGS}
    assert len(flags) == len(megatron.FLAGS), "a flag listed twice"
    _check(flags - PLANNER_OPTIONS_SHARED, "planner/frameworks/megatron.py")


def test_megatron_flags_spelled_like_planner_options_are_exactly_the_listed_ones():
    """A new planner option named like a Megatron flag would hide that flag from the scan."""
    flags = {f.flag for f in megatron.FLAGS}
    assert flags & _planner_options() == PLANNER_OPTIONS_SHARED


def test_deepspeed_keys_live_in_the_deepspeed_table_only():
    segments = {part for key in deepspeed.KEYS for part in key.path.split(".")}
    assert {"train_micro_batch_size_per_gpu", "zero_optimization", "autotp_size"} <= segments
    _check(segments - DEEPSPEED_SHARED, "planner/frameworks/deepspeed.py")


def test_torchtitan_keys_live_in_the_torchtitan_table_only():
    keys = {key for spellings in torchtitan.KEYS.values() for _, key in spellings}
    assert {"tensor_parallel_degree", "local_batch_size", "selective_ac_option"} <= keys
    _check(keys - TORCHTITAN_SHARED, "planner/frameworks/torchtitan.py")


def test_torchtitan_command_line_fields_live_in_the_torchtitan_table_only():
    """The command line's fields the planner reads or writes (b5bcd76): its token batch keys and
    switches (the degrees share `KEYS`' spellings, scanned above)."""
    fields = {key.split(".")[1] for key in (torchtitan.MICROBATCH_TOKENS, torchtitan.STEP_TOKENS,
                                            torchtitan.CONTEXT, torchtitan.PP_MICROBATCHES,
                                            torchtitan.SEQUENCE_PARALLEL)}
    assert {"num_tokens_per_microbatch_per_dp_rank", "num_pp_microbatches"} <= fields
    _check(fields, "planner/frameworks/torchtitan.py")


@pytest.mark.parametrize("name, text, found", [
    ("--seq-length", "x --seq-length 8", True),
    ("--seq-length", "x --seq-length=8", True),
    ("--seq-length", "x --encoder-seq-length 8", False),
    ("--num-layers", "x --num-layers-per-virtual-pipeline-stage 2", False),
    ("offload_param", "zero_optimization.offload_param.device", True),
    ("cpu_offload", "cpu_offload_param", False),
])
def test_the_scan_matches_whole_names_only(name, text, found):
    assert bool(_word(name).search(text)) is found


def test_gate_fix_terms_are_the_tables():
    """The gate spells its single-knob fixes with each framework's table (hand-written expectations:
    the flags of a ZeRO-3 Megatron-FSDP run and DeepSpeed's ZeRO key)."""
    from planner.check.gate import _spelled
    from planner.placement.layout import Layout

    megatron = Layout(dp=8, micro_batch_size=4, global_batch_size=64)
    deepspeed = megatron.replace(framework="deepspeed")
    # Megatron-FSDP asserts the fsdp_dtensor checkpoint format (arguments.py validate_args).
    assert _spelled("zero_stage 3", "megatron-args", megatron) == \
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params " \
        "--ckpt-format fsdp_dtensor"
    assert _spelled("zero_stage 2", "deepspeed-config", deepspeed) == "zero_optimization.stage 2"
    assert _spelled("micro_batch_size 4", "megatron-args", megatron) == "--micro-batch-size 4"
    # 64 sequences / (dp 8 x micro-batch 4) = 2 accumulation steps
    assert _spelled("micro_batch_size 4", "deepspeed-config", deepspeed) == \
        "train_micro_batch_size_per_gpu 4 with gradient_accumulation_steps 2 (train_batch_size kept)"
    assert _spelled("zero_stage 2", "training-plan", megatron) == "zero_stage 2"


ENGINE_SHARED = {"--model", "--port", "--config", "--ep", "--max-model-len", "--max-num-batched-tokens",
                 "--nnodes", "--node-rank", "--master-addr", "-n", "-r"}
"""Engine flags also spelled as planner's own options (`serve-plan --max-model-len`,
`--max-num-batched-tokens`), torchrun's (--nnodes, --node-rank, --master-addr: Megatron-LM's table) or common
words (--model, --port, --config; vLLM's one-letter -n, -r for --nnodes, --node-rank): not scanned."""


ENGINE_ELSEWHERE = {"planner/cost/serving.py": {"--enable-dp-attention"}}
"""Citations of engine flags in the serving cost model's docstrings, left to their owner."""


@pytest.mark.parametrize("vocabulary", ["vllm", "sglang"])
def test_engine_flags_live_in_the_engine_tables_only(vocabulary):
    """vLLM's and SGLang's flags the planner reads or writes are spelled in their tables (the two
    engines share some spellings, so either table is their home) and nowhere else under planner/."""
    from planner.frameworks import sglang, vllm

    table = {"vllm": vllm, "sglang": sglang}[vocabulary]
    names = set(table.FLAG.values()) | set(table.ALIASES) | set(table.ALIASES.values()) | set(table.ROUTER_FLAG.values())
    homes = {"planner/frameworks/vllm.py", "planner/frameworks/sglang.py"}
    for name in sorted(names - ENGINE_SHARED):
        homes_here = homes | {p for p, known in ENGINE_ELSEWHERE.items() if name in known}
        holders = _holders(name)
        assert f"planner/frameworks/{vocabulary}.py" in holders, name
        assert not holders - homes_here, f"{name} is spelled outside the engine tables: {sorted(holders - homes_here)}"


@pytest.mark.parametrize("vocabulary", ["vllm", "sglang"])
def test_engine_table_flags_are_in_the_recorded_parser(vocabulary):
    """Every flag the table names (and its aliases) is one the engine's recorded parser defines."""
    from planner.frameworks import sglang, vllm

    table = {"vllm": vllm, "sglang": sglang}[vocabulary]
    names = set(table.FLAG.values()) | set(table.ALIASES) | set(table.ALIASES.values()) | set(table.SWITCHES)
    assert names <= table.ALL_FLAGS, names - table.ALL_FLAGS
    assert table.FLAGS_FILE.read_text().startswith(f"# {vocabulary} ")
    # the router of disaggregated serving: its own package and parser (tools/record_engine_flags.py)
    router = set(table.ROUTER_FLAG.values()) | set(table.ROUTER_SWITCHES)
    assert router <= table.ROUTER_ALL_FLAGS, router - table.ROUTER_ALL_FLAGS
    assert table.ROUTER_FLAGS_FILE.read_text().startswith(f"# {table.ROUTER_VERSION} ")
