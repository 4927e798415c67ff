"""`planner check` of current torchtitan command lines (`--module M --config C` + dotted overrides,
pytorch/torchtitan b5bcd76): the preset's values (config_registry.py), the overrides, the token
batch as whole sequences, strict field names, and the kind chosen by content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

# The run of tests/data/configs/torchtitan/llama3_8b.toml (local batch 2, global 16, seq 8192,
# FSDP 8, op-level selective AC) in the current form: 2 x 8192 tokens per micro-batch, 16 x 8192
# per step.
LLAMA3_8B = """#!/bin/bash
torchrun --nproc_per_node=8 --rdzv_backend c10d --rdzv_endpoint="localhost:0" \\
  -m torchtitan.train --module llama3 --config llama3_8b \\
  --parallelism.data_parallel_shard_degree 8 \\
  --training.num_tokens_per_microbatch_per_dp_rank 16384 \\
  --training.num_tokens_per_train_step=131072 \\
  activation-checkpoint:selective
"""


def _write(tmp_path, text, name="train.sh"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _check(path, *options):
    return runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100", *options,
                               "--format", "json"])


def test_same_run_as_the_toml_preset_reads_to_the_same_layout(tmp_path):
    new = read_target(_write(tmp_path, LLAMA3_8B), cluster="dgx-h100")
    old = read_target(ROOT / "tests/data/configs/torchtitan/llama3_8b.toml", cluster="dgx-h100",
                      gpus=8)
    assert new.kind == "torchtitan-command" and old.kind == "torchtitan-config"
    assert new.model.name == old.model.name == "llama-3.1-8b"
    # but the loss: the current presets chunk it (ChunkedLossWrapper, 8 chunks), the TOML releases did not;
    # and the attention: the current presets fuse wq, wk, wv into one wqkv (3396a4b), the TOML releases did not
    assert (new.layout.loss_chunks, old.layout.loss_chunks) == (8, 1)
    assert (new.layout.fused_qkv, old.layout.fused_qkv) == (None, False)
    assert new.layout == old.layout.replace(loss_chunks=8, fused_qkv=None)
    assert (new.layout.dp, new.layout.zero_stage, new.layout.micro_batch_size,
            new.layout.global_batch_size, new.layout.seq_len) == (8, 3, 2, 16, 8192)


def test_preset_values_without_overrides(tmp_path):
    """llama3_70b (config_registry.py): tp 8, 8 x 8192 tokens per micro-batch, context 8192,
    FullAC; shard -1 takes the GPUs left: 64 / 8 = 8."""
    path = _write(tmp_path, "torchrun --nproc_per_node 8 --nnodes 8 -m torchtitan.train "
                            "--module llama3 --config llama3_70b\n")
    layout = read_target(path, cluster="dgx-h100").layout
    assert (layout.tp, layout.dp, layout.micro_batch_size, layout.seq_len, layout.recompute) == \
        (8, 8, 8, 8192, "full")
    assert layout.global_batch_size == 8 * 8  # -1: micro-batch x dp
    assert layout.sequence_parallel


def test_qwen3_and_deepseek_presets_name_their_models(tmp_path):
    qwen = read_target(_write(tmp_path, "--module qwen3 --config qwen3_32b\n"),
                       cluster="dgx-h100", gpus=8)
    assert qwen.model.name == "qwen3-32b" and qwen.layout.seq_len == 4096
    assert qwen.layout.micro_batch_size == 2 and qwen.layout.recompute == "full"


def test_overrides_win_and_sequence_parallel_can_be_off(tmp_path):
    text = ("--module llama3 --config llama3_70b --parallelism.tensor_parallel_degree 4 "
            "--parallelism.enable_sequence_parallel false activation-checkpoint:none\n")
    layout = read_target(_write(tmp_path, text), cluster="dgx-h100", gpus=32).layout
    assert (layout.tp, layout.dp, layout.sequence_parallel, layout.recompute) == (4, 8, False, "none")


def test_misspelled_field_fails_naming_the_field(tmp_path):
    result = _check(_write(tmp_path, LLAMA3_8B.replace("shard_degree 8", "shard_degre 8")))
    assert result.exit_code == 1, result.output
    error = {v["rule"]: v for v in json.loads(result.output)["violations"]}["torchtitan_unknown_key"]
    assert "did you mean --parallelism.data_parallel_shard_degree?" in error["message"]
    assert error["line"] == 4


def test_the_old_async_tp_field_names_where_it_moved(tmp_path):
    """senior review 7 M4: the TOML releases' parallelism.enable_async_tensor_parallel moved under compile
    (torchtitan 9810191); the finding named the closest spelling, enable_sequence_parallel."""
    text = LLAMA3_8B.replace("--parallelism.data_parallel_shard_degree 8 \\",
                             "--parallelism.data_parallel_shard_degree 8 --parallelism.enable_async_tensor_parallel \\")
    assert "enable_async_tensor_parallel" in text
    result = _check(_write(tmp_path, text))
    error = {v["rule"]: v for v in json.loads(result.output)["violations"]}["torchtitan_unknown_key"]
    assert "moved to --compile.enable_async_tensor_parallel" in error["message"]
    assert "enable_sequence_parallel" not in error["message"] + error["fix"]


@pytest.mark.parametrize("text, words", [
    ("--module llama3 --config my_run\n", ["--config my_run", "--module llama3 --config llama3_8b"]),
    (LLAMA3_8B.replace("16384", "10000"), ["10000", "multiple of training.max_context_length 8192"]),
    (LLAMA3_8B.replace("activation-checkpoint:selective", "activation-checkpoint:memory-budget"),
     ["'memory-budget' not modelled"]),
])
def test_bad_input_exits_2_naming_the_value(tmp_path, text, words):
    result = _check(_write(tmp_path, text), "--gpus", "8")
    assert result.exit_code == 2, result.output
    for word in words:
        assert word in result.output


def test_gpus_contradicting_torchrun_is_bad_input(tmp_path):
    result = _check(_write(tmp_path, LLAMA3_8B), "--gpus", "16")
    assert result.exit_code == 2 and "--gpus 16 contradicts torchrun's 8 ranks" in result.output


def test_fix_terms_are_command_line_terms(tmp_path):
    # the plain loss (--loss.num_chunks 1) keeps the 16,384 x 128,256 fp32 logits: at risk on 80 GiB
    unchunked = LLAMA3_8B.replace("activation-checkpoint:selective",
                                  "--loss.num_chunks 1 \\\n  activation-checkpoint:selective")
    result = _check(_write(tmp_path, unchunked))
    warning = {v["rule"]: v for v in json.loads(result.output)["violations"]}["memory_at_risk"]
    assert "activation-checkpoint:full (51.2 GiB, " in warning["fix"]
    # half the 16,384-token micro-batch (2 sequences of 8,192): 8,192 tokens, the step's tokens kept
    assert warning["fix"].startswith("any of: --training.num_tokens_per_microbatch_per_dp_rank 8192 "
                                     "(micro-batch 1) with --training.num_tokens_per_train_step kept")


# The fresh user's line: torchtitan's 9810191..78fc8ae spelling of activation checkpointing.
AC_OVERRIDE = ("torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b "
               "--activation_checkpoint.mode {}\n")


@pytest.mark.parametrize("mode", ["full", "none", "selective"])
def test_activation_checkpoint_mode_override_is_costed(tmp_path, mode):
    """Fresh-user defect: `--activation_checkpoint.mode full` was costed as llama3_8b's selective
    AC (config_registry.py). ActivationCheckpointConfig.mode (configs.py at 78fc8ae) chooses it;
    later releases (b5bcd76, the one modelled) spell it `activation-checkpoint:full` and tyro
    exits on the override. Then the check PASSed a launch its own warning said would die: now an
    error (exit 1) naming the subcommand."""
    result = _check(_write(tmp_path, AC_OVERRIDE.format(mode)))
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["parallelism"]["recompute"] == mode and data["verdict"] == "fail"
    warning = {v["rule"]: v for v in data["violations"]}["torchtitan_ac_mode_override"]
    assert warning["severity"] == "error" and warning["line"] == 1
    assert "tyro exits on --activation_checkpoint.mode" in warning["message"]
    assert warning["fix"] == f"write activation-checkpoint:{mode} for current torchtitan"


@pytest.mark.parametrize("text, words", [
    (AC_OVERRIDE.format("selctive"),
     ["--activation_checkpoint.mode", "'selctive' not allowed",
      "allowed: selective, full, memory_budget, none"]),
    (AC_OVERRIDE.format("memory_budget"), ["'memory_budget' not modelled"]),
    (AC_OVERRIDE.format("full").replace("\n", " activation-checkpoint:none\n"),
     ["'full' contradicts the subcommand activation-checkpoint:none"]),
])
def test_activation_checkpoint_mode_torchtitan_rejects_is_bad_input(tmp_path, text, words):
    result = _check(_write(tmp_path, text))
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    for word in words:
        assert word in message, (word, message)


# The fresh user's line: the batch fields of torchtitan before 73aed7f (2026-08-20).
OLD_BATCH = ("torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b "
             "--training.local_batch_size 2 --training.global_batch_size 16 --training.seq_len 4096"
             "{}\n")


def test_old_batch_fields_name_their_replacements():
    """Fresh-user defect: --training.local_batch_size / --training.seq_len got "Fix: remove ...".
    torchtitan 73aed7f replaced them (config/configs.py): local_batch_size -> the tokens of a
    micro-batch per data-parallel rank, 2 x 4096 = 8192; global_batch_size -> tokens per step,
    16 x 4096 = 65536; seq_len -> max_context_length, 4096 unchanged."""
    from planner.check.torchtitan_cli import _unknown_fields
    flags = {"training.local_batch_size": "2", "training.global_batch_size": "16",
             "training.seq_len": "4096"}
    fixes = {v.message.split()[0]: v.fix for v in _unknown_fields(flags, 4096, False, {})}
    assert fixes == {
        "--training.local_batch_size": "write --training.num_tokens_per_microbatch_per_dp_rank "
                                       "8192 (2 sequences x 4096 tokens of "
                                       "--training.max_context_length)",
        "--training.global_batch_size": "write --training.num_tokens_per_train_step 65536 "
                                        "(16 sequences x 4096 tokens of "
                                        "--training.max_context_length)",
        "--training.seq_len": "write --training.max_context_length 4096"}


def test_old_batch_fields_on_the_command_line_fail_with_the_old_context(tmp_path):
    """Read from the file: the old --training.seq_len 4096 (not llama3_8b's 8192) converts the
    batch; the run fails (tyro exits on the old names); with pp 2 the local batch names the
    pipeline micro-batch count instead."""
    result = _check(_write(tmp_path, OLD_BATCH.format("")))
    assert result.exit_code == 1, result.output
    found = [v for v in json.loads(result.output)["violations"]
             if v["rule"] == "torchtitan_unknown_key"]
    assert len(found) == 3 and all("73aed7f" in v["message"] for v in found)
    # fresh-user review 8 #14: the message says which release the check models and that no older one can be named
    assert "the one release command lines are checked against" in found[0]["message"]
    assert "num_tokens_per_microbatch_per_dp_rank 8192 (2 sequences x 4096" in found[0]["fix"]
    piped = _check(_write(tmp_path, OLD_BATCH.format(
        " --parallelism.pipeline_parallel_degree 2"), name="pp.sh"))
    data = json.loads(piped.output)
    fix = data["violations"][0]["fix"]
    # pp 2: the old local batch 2 was 2 pipeline micro-batches of the old default size 1 (73aed7f^ configs.py
    # l. 223): 1 x 4096 tokens per micro-batch and 2 micro-batches, costed so (fresh-user review 9 #4)
    assert ("write --training.num_tokens_per_microbatch_per_dp_rank 4096 (1 sequence of the old pipeline "
            "micro-batch size x 4096 tokens" in fix and fix.endswith("--parallelism.num_pp_microbatches 2"))
    assert (data["parallelism"]["micro_batch_size"], data["parallelism"]["seq_len"]) == (1, 4096)


def test_old_batch_fields_are_costed_as_meant_not_as_the_preset(tmp_path):
    """fresh-user review 7 #7: --training.seq_len 32768 --training.local_batch_size 1 (names
    torchtitan 73aed7f replaced) on llama3_8b (preset context 8192) were costed at the preset's 8,192
    tokens, verdict "fits", a run the user never asked for. Costed as meant: 32,768 tokens, a
    micro-batch of 1 x 32,768 tokens per rank; each error says what it costed."""
    path = _write(tmp_path, "torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config "
                            "llama3_8b --training.seq_len 32768 --training.local_batch_size 1\n")
    result = _check(path)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert (data["parallelism"]["seq_len"], data["parallelism"]["micro_batch_size"]) == (32768, 1)
    messages = {v["message"].split()[0]: v["message"] for v in data["violations"]
                if v["rule"] == "torchtitan_unknown_key"}
    assert messages["--training.seq_len"].endswith("costed here as --training.max_context_length 32768, "
                                                   "what it means")
    assert "num_tokens_per_microbatch_per_dp_rank 32768, what it means" in messages["--training.local_batch_size"]


def test_crlf_torchtitan_command_line_fails_too(tmp_path):
    """LLAMA3_8B saved with CRLF line endings (fresh-user review): line 2 is the first whose
    backslash continuation the carriage return breaks (bash(1) QUOTING)."""
    path = tmp_path / "train.sh"
    path.write_bytes(LLAMA3_8B.replace("\n", "\r\n").encode())
    result = runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100", "--format", "json"])
    data = json.loads(result.output)
    [error] = [v for v in data["violations"] if v["rule"] == "crlf_line_endings"]
    assert result.exit_code == 1 and error["line"] == 2
    path.write_bytes(LLAMA3_8B.encode())
    data = json.loads(runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100",
                                          "--format", "json"]).output)
    assert "crlf_line_endings" not in {v["rule"] for v in data["violations"]}


def test_loss_chunks_override_is_read(tmp_path):
    """`--loss.num_chunks 4` (ChunkedLossWrapper.Config.num_chunks of the preset's loss) sets
    Layout.loss_chunks; 3 does not divide the 16,384 tokens of a micro-batch: torchtitan's
    `torch._check` fails, so check does."""
    text = LLAMA3_8B.replace("activation-checkpoint:selective", "--loss.num_chunks 4 \\\n  activation-checkpoint:selective")
    assert read_target(_write(tmp_path, text), cluster="dgx-h100").layout.loss_chunks == 4
    bad = LLAMA3_8B.replace("activation-checkpoint:selective", "--loss.num_chunks 3 \\\n  activation-checkpoint:selective")
    result = _check(_write(tmp_path, bad, "bad.sh"))
    assert result.exit_code == 1 and "loss_chunks=3" in result.output


def test_compile_enable_is_shown_in_the_header_as_plan_shows_it(tmp_path):
    """Fresh-user review: `--compile.enable` is costed (Layout.torch_compile) but the check header
    did not say "compile"; plan and explain append " · compile" to the layout (report.layout_label)."""
    compiled = LLAMA3_8B.replace("  activation-checkpoint", "  --compile.enable true \\\n  activation-checkpoint")
    path = _write(tmp_path, compiled)
    assert read_target(path, cluster="dgx-h100").layout.torch_compile is True
    result = json.loads(_check(path).stdout)
    assert result["parallelism"]["compile"] is True
    table = runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100"]).stdout
    assert "· compile" in " ".join(table.split())
    plain = runner.invoke(app, ["check", str(_write(tmp_path, LLAMA3_8B, "eager.sh")), "--cluster", "dgx-h100"]).stdout
    assert "· compile" not in " ".join(plain.split())


@pytest.mark.parametrize("compile_on, rules", [("false", ["async_tp_needs_compile"]), ("true", [])])
def test_async_tp_without_compile_fails_on_the_command_line(tmp_path, compile_on, rules):
    """torchtitan@b5bcd76 config/configs.py CompileConfig.__post_init__: enable_async_tensor_parallel
    without compile.enable raises ValueError("Async TP requires 'model' in --compile.components and
    --compile.enable") (review-fresh6 tt_cli_async.sh passed)."""
    path = _write(tmp_path, "torchrun --nproc_per_node 8 --nnodes 8 -m torchtitan.train --module llama3 "
                            "--config llama3_70b --compile.enable_async_tensor_parallel true "
                            f"--compile.enable {compile_on}\n")
    data = json.loads(_check(path).output)
    assert [v["rule"] for v in data["violations"] if v["severity"] == "error"] == rules


def test_old_local_batch_with_pp_is_costed_as_meant_not_at_the_preset():
    """Fresh-user review 9 #4 (their file): llama3_70b on 4 x 8 GPUs, tp 8 pp 2, `--training.local_batch_size 2
    --training.seq_len 8192`. Before 73aed7f the local batch with pp > 1 was local / pipeline_parallel_microbatch_size
    (default 1: 73aed7f^ config/configs.py l. 223) micro-batches of 1 sequence: 2 micro-batches of 1 x 8192
    tokens, dp = 32 / (8 x 2) = 2, global batch 1 x 2 x 2 = 4 sequences (old default -1 = local x dp). The
    preset's 8 x 8192 tokens per micro-batch were costed instead (b8 m1, 126.7 GiB). Oracle: the same run
    written with the current names costs exactly the same memory."""
    old = ROOT / "tests/data/configs/torchtitan/old_batch_pp.sh"
    data = json.loads(_check(old, "--gpus", "32").output)
    par = data["parallelism"]
    assert (par["dp"], par["micro_batch_size"], par["num_microbatches"], par["global_batch_size"],
            par["seq_len"]) == (2, 1, 2, 4, 8192)
    local = next(v for v in data["violations"] if "--training.local_batch_size" in v["message"])
    assert ("costed here as --training.num_tokens_per_microbatch_per_dp_rank 8192 and "
            "--parallelism.num_pp_microbatches 2, what it means") in local["message"]
    assert local["fix"].endswith("--parallelism.num_pp_microbatches 2")
    new = old.read_text().replace("--training.local_batch_size 2 --training.seq_len 8192",
                                  "--training.num_tokens_per_microbatch_per_dp_rank 8192 "
                                  "--training.max_context_length 8192 --parallelism.num_pp_microbatches 2")
    renamed = json.loads(_check(_write_text(new), "--gpus", "32").output)
    assert [s["memory_bytes"] for s in data["stages"]] == [s["memory_bytes"] for s in renamed["stages"]]
    assert data["memory_verdict"] == renamed["memory_verdict"]
    assert not any(v["rule"] == "memory_exceeds" for v in data["violations"])


def _write_text(text):
    import tempfile
    path = Path(tempfile.mkdtemp()) / "train.sh"
    path.write_text(text)
    return path


def test_moved_async_tp_switch_is_costed_as_meant(tmp_path):
    """--parallelism.enable_async_tensor_parallel moved to --compile.enable_async_tensor_parallel (9810191;
    configs.py l. 298 at b5bcd76): an error, costed as the switch it means (AsyncTP on, as the new spelling)."""
    line = ("torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b "
            "--parallelism.tensor_parallel_degree 2 --compile.enable {}\n")
    old = json.loads(_check(_write(tmp_path, line.format("--parallelism.enable_async_tensor_parallel"))).output)
    new = json.loads(_check(_write(tmp_path, line.format("--compile.enable_async_tensor_parallel"),
                                   name="new.sh")).output)
    moved = next(v for v in old["violations"] if "enable_async_tensor_parallel" in v["message"])
    assert "costed here as --compile.enable_async_tensor_parallel true" in moved["message"]
    assert old["parallelism"] == new["parallelism"]
    assert old["parallelism"]["overlap"]["tp_comm_overlap"] is True


def test_every_bad_value_of_a_command_line_in_one_error(tmp_path):
    """One run names every value torchtitan's parser rejects, each on its own line naming the override
    (the readers other than Megatron-LM's stopped at the first)."""
    path = _write(tmp_path, "torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b "
                            "--parallelism.tensor_parallel_degree two --training.max_context_length 0 "
                            "--compile.enable maybe --parallelism.pipeline_parallel_degree $PP "
                            "activation-checkpoint:everything\n")
    result = runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: {path}: {line}" for line in (
        "activation-checkpoint: value 'everything' not modelled; allowed: selective, full, none",
        "--parallelism.tensor_parallel_degree: value 'two' must be an integer >= 1",
        "--training.max_context_length: value '0' must be an integer >= 1",
        "--compile.enable: value 'maybe' must be true or false",
        "--parallelism.pipeline_parallel_degree: value '$PP' uses the shell variable PP, which the file does "
        "not set; set it in the file or write the value")]


def test_transient_memory_term_by_term():
    """Fresh-user review 9 #9: check gave stage 1's 26 GiB transient as one number. JSON now gives each stage's
    `transient_terms` (and `activation_terms`), the table a line of the largest, memory_exceeds its largest
    part. Hand arithmetic of the largest: FSDP with pp holds the stage's fp32 gradients whole (tp-sharded) from
    a chunk's first backward to its last: stage 1 of llama3_70b at tp 8 = 40 layers x (q 8192^2 + k, v
    2 x 8192 x 1024 + o 8192^2 + MLP 3 x 8192 x 28672) + lm_head 128256 x 8192, over tp 8, plus the norms
    (2 x 8192 per layer + the final 8192, replicated), x 4 bytes."""
    path = ROOT / "tests/data/configs/torchtitan/fsdp_pp_transient.sh"
    data = json.loads(_check(path, "--gpus", "32").output)
    stage = data["stages"][1]
    sharded = 40 * (8192**2 + 2 * 8192 * 1024 + 8192**2 + 3 * 8192 * 28672) + 128256 * 8192
    assert stage["transient_terms"]["fsdp_accumulated_gradients"] == 4 * (sharded // 8 + 2 * 8192 * 40 + 8192)
    assert list(stage["transient_terms"])[0] == "fsdp_accumulated_gradients"   # largest first
    assert max(stage["transient_terms"].values()) <= stage["memory_bytes"]["transient"] <= sum(
        stage["transient_terms"].values())   # the peak over phases: at least its largest, at most all
    assert stage["activation_terms"]["layers"] > 0
    exceeds = next(v for v in data["violations"] if v["rule"] == "memory_exceeds" and "stage 1" in v["message"])
    assert "(largest term: transient, 26.0 GiB, of which fsdp accumulated gradients 16.4 GiB;" in exceeds["message"]
    table = runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100", "--gpus", "32"], env={"COLUMNS": "200"})
    assert ("trans of stage 1, the peak over the step's phases of: fsdp accumulated gradients 16.43, "
            "fsdp stage blocks 7.97, loss working set 1.33, fsdp root unit 0.24 (GiB)") in table.stdout
