"""Usage errors, help, version and formats at the CLI boundary (the real console entry point)."""

import json
import re
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


def _planner(*args: str) -> subprocess.CompletedProcess:
    """Run `python -m planner` as a user would: the entry point's own error handling applies."""
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args", [
    ["models", "show", "llama-3.1-8b", "--format", "XML"],
    ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--tp", "0"],
    ["explain", "-c", "dgx-h100"],
    ["bogus"],
    ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "9999999999"],
    ["explain", "-m", "llama-3.1-8b", "-c", "dgx-a100-80g", "--reserve-gib", "inf"],
    ["models", "show", "llama-3.1-8b", "--seq-len", "99999999999"],
])
def test_usage_errors_are_one_line_and_exit_2(args):
    proc = _planner(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "shown"), [
    (["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--tp", "0"], "'--tp': 0 is not in the range x>=1 (see"),
    (["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus=-8"], ": -8 is not in the range 1<=x<=4194304 (see"),
    (["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "007x"], ": '007x' is not an integer (see"),
    (["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "0000"], "0 is not in the range 1<=x<=4194304; got '0000'"),
])
def test_range_and_type_errors_repeat_the_value_given(args, shown):
    """click's messages name the value (its range error as the number it read: the value as typed follows where
    that differs); one clause, no doubled punctuation (fresh-user review 12 #6: "'eight' is not a valid int
    range." and "1<=x<=4194304.; got '0'")."""
    proc = _planner(*args)
    assert proc.returncode == 2 and shown in proc.stderr and proc.stderr.count("\n") == 1


def test_help_and_version():
    assert _planner("-h").returncode == 0
    proc = _planner("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("planner ")


def test_formats_are_case_insensitive_and_the_group_format_applies():
    result = runner.invoke(app, ["models", "show", "llama-3.1-8b", "--format", "JSON"])
    assert result.exit_code == 0 and json.loads(result.output)["name"] == "llama-3.1-8b"
    result = runner.invoke(app, ["models", "-f", "json", "show", "llama-3.1-8b"])
    assert json.loads(result.output)["name"] == "llama-3.1-8b"
    result = runner.invoke(app, ["hardware", "-f", "json", "show", "dgx-h100"])
    assert json.loads(result.output)["name"] == "dgx-h100"


def test_precision_defaults_to_fp16_on_a_gpu_without_bf16():
    # V100 (dgx2-v100) has no bf16 tensor cores: the default follows the GPU, an explicit value is kept.
    data = json.loads(runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx2-v100", "--zero-stage", "3",
                                          "--format", "json"]).output)
    assert data["parallelism"]["precision"] == "fp16"
    data = json.loads(runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--zero-stage", "1",
                                          "--format", "json"]).output)
    assert data["parallelism"]["precision"] == "bf16"


@pytest.mark.parametrize("target", ["{tmp}", "{tmp}/missing/plan.yaml", ""])
def test_unwritable_plan_file_is_refused_before_planning(tmp_path, target):
    proc = _planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "-o",
                    target.format(tmp=tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""  # refused before any planning output
    assert len(proc.stderr.strip().splitlines()) == 1 and "--output" in proc.stderr


def test_pinning_a_key_twice_with_different_values_is_refused():
    proc = _planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--fix", "tp=2", "--fix", "tp=4")
    assert proc.returncode == 2 and "pinned twice" in proc.stderr


def test_batch_beyond_the_token_limit_is_refused():
    proc = _planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch-size", "999999999")
    assert proc.returncode == 2 and "tokens per step" in proc.stderr and "Traceback" not in proc.stderr


def test_bare_planner_prints_help():
    proc = _planner()
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: ") and "COMMAND" in proc.stdout


def test_explain_takes_an_uneven_pipeline_split():
    # Llama 3 405B's published split (Dubey et al. 2024 §3.3.2: first and last stage one layer fewer).
    split = ",".join(["7"] + ["8"] * 14 + ["7"])
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "16384",
                                 "--tp", "8", "--pp", "16", "--zero-stage", "1", "--pipeline-layers", split,
                                 "--seq-len", "8192", "--global-batch-size", "2048", "--format", "json"])
    data = json.loads(result.output)
    assert data["parallelism"]["pipeline_layers"] == [7] + [8] * 14 + [7]
    assert "layers_divisible_by_pp" not in {v["rule"] for v in data["violations"]}
    bad = runner.invoke(app, ["explain", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "16384",
                              "--tp", "8", "--pp", "16", "--pipeline-layers", "8,8"])
    assert bad.exit_code == 2


def test_unwritable_stdout_is_one_line_not_a_traceback():
    """Fresh-user defect: `planner models show ... > /dev/full` printed a rich traceback."""
    import os

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "planner", "models", "show", "llama-3.1-8b"],
                              stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: cannot write the output: No space left on device"


@pytest.mark.parametrize(("args", "named"), [
    (["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--tp", "2", "--tp", "4"], "--tp"),
    (["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--sequence-parallel", "--no-sequence-parallel"],
     "--sequence-parallel/--no-sequence-parallel"),
    (["models", "show", "llama-3.1-8b", "-f", "json", "--format=yaml"], "--format/-f"),
])
def test_an_option_given_twice_is_refused_not_overridden(args, named):
    """Fresh-user defect: `--tp 2 --tp 4` silently meant tp 4 (click keeps the last value)."""
    proc = _planner(*args)
    assert proc.returncode == 2 and f"{named} given twice" in proc.stderr, proc.stderr


def test_repeatable_options_still_repeat():
    proc = _planner("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--dp", "8", "--zero-stage",
                    "3", "--offload", "optimizer", "--offload", "parameters", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["parallelism"]["offload"] == ["optimizer", "parameters"]


def _run(argv, **kw):
    return subprocess.run([sys.executable, "-m", "planner", *argv], capture_output=True, text=True,
                          **kw)


def test_closed_stdout_is_one_line_not_a_traceback():
    """Issue 11: `planner ... >&-` ended in a traceback (Python has no sys.stdout then)."""
    proc = subprocess.run(["sh", "-c", f"'{sys.executable}' -m planner models >&-"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: cannot write the output: standard output is closed"


def test_ascii_locale_prints_ascii_separators_not_a_traceback():
    """Issue 11: `PYTHONIOENCODING=ascii planner plan ...` raised UnicodeEncodeError on '·'."""
    import os

    env = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, "-m", "planner", "plan", "-m", "llama-3.1-8b", "-c",
                           "dgx-h100", "--gpus", "8", "--top", "1"],
                          capture_output=True, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("ascii")  # raises if anything but ASCII came out
    assert re.search(r"dp\d+ tp\d+ pp\d+", out) and "ZeRO-" in out
    assert "Traceback" not in proc.stderr.decode("ascii")
    assert " . ZeRO-" in out  # the plan line's '·' separators became '.'


def test_output_dash_writes_the_plan_file_to_stdout_and_the_report_to_stderr(tmp_path):
    """Issue 11: `-o -` wrote a file named '-'. Now stdout is the plan file alone (what
    `planner check -` style pipelines read) and the table goes to stderr."""
    proc = _run(["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--top", "1",
                 "-o", "-"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert doc["kind"] == "training-plan" and doc["gpus"] == 8
    assert "solver: OPTIMAL" in proc.stderr
    assert not (tmp_path / "-").exists()


def test_output_dash_with_emit_is_bad_input():
    proc = _run(["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--emit",
                 "megatron", "-o", "-"])
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --output: value '-' (stdout) not allowed with --emit")


def test_bad_input_with_stdout_closed_is_still_bad_input():
    """Fresh-user defect: `planner plan -m nope ... >&-` said "standard output is closed" (exit 1)
    instead of the unknown-model error (exit 2): the closed stream is met only when writing."""
    proc = subprocess.run(["sh", "-c", f"'{sys.executable}' -m planner plan -m nope -c dgx-h100 >&-"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown model 'nope'")


def test_a_reader_that_leaves_keeps_the_commands_exit_code():
    """Fresh-user defect: `planner check ... | head -1` exited 1 (the code of a failed check) when
    head closed the pipe, so a passing gate failed under `set -o pipefail`; now the command ends
    with its own code."""
    script = (f"set -o pipefail; '{sys.executable}' -m planner check "
              "tests/data/configs/deepspeed/zero2_bf16.json -m llama-3.1-8b -c dgx-h100 --gpus 8 "
              "--seq-len 4096 | head -c 0")  # the reader is gone before the first write
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""


def test_written_yaml_has_no_anchors(tmp_path):
    """Fresh-user defect: `serve-plan -o` wrote `plan: &id001` ... `- *id001` (the best plan is
    also the first of the list): awkward to hand-edit or diff. Shared values are written out."""
    out = tmp_path / "sp.yaml"
    proc = _run(["serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1",
                 "--input-len", "1000", "--output-len", "200", "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "&id" not in text and "*id" not in text
    assert _run(["check", str(out)]).returncode == 0


def test_ascii_fallback_keeps_table_columns_aligned():
    """Fresh-user defect: under PYTHONIOENCODING=ascii explain's header `state ↓ axis →` became
    `state ? axis ->`, one character wider than the rows. Every fallback is one character, so
    the widths rich measured still hold: every line of the placement table is equally long."""
    import os

    env = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "100"}
    proc = subprocess.run([sys.executable, "-m", "planner", "explain", "-m", "llama-3.1-8b", "-c",
                           "dgx-h100", "--tp", "2"], capture_output=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr  # 1: this layout does not fit; its table shows
    lines = proc.stdout.decode("ascii").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("state v axis >"))
    head, rule, row = lines[header:header + 3]
    assert head.index("|") == rule.index("+") == row.index("|"), (head, rule, row)


@pytest.mark.parametrize(("args", "option"), [
    (["plan", "--reserve-gib", "nan"], "--reserve-gib"),
    (["plan", "--headroom", "inf"], "--headroom"),
    (["explain", "--at-risk-margin", "nan"], "--at-risk-margin"),
    (["explain", "--reserve-gib", "-1"], "--reserve-gib")])
def test_float_options_refuse_nan_inf_and_out_of_range_naming_what_is_allowed(args, option):
    """Fresh-user defect: `--reserve-gib nan` said "Input should be less than or equal to 1024"."""
    result = runner.invoke(app, [args[0], "-m", "llama-3.1-8b", "-c", "dgx-h100", *args[1:]])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': allowed: a finite number >= 0 and <= " in result.output


@pytest.mark.parametrize("command", [
    ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8"],
    ["serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--input-len", "1000",
     "--output-len", "100"],
])
def test_output_file_on_a_full_disk_is_one_line_and_exit_1(command, tmp_path):
    """Fresh-user defect: `-o /dev/full` exited 2 (bad input) where `> /dev/full` exits 1; the
    README's rule: output that cannot be written is one line, exit 1. A path that cannot be
    opened (a missing folder, a directory) stays bad input, exit 2."""
    import os

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    proc = _planner(*command, "-f", "json", "-o", "/dev/full")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == "error: --output: cannot write /dev/full: No space left on device"
    for bad in (tmp_path / "missing" / "plan.yaml", tmp_path):
        proc = _planner(*command, "-f", "json", "-o", str(bad))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(("code", "exit_code"), [
    (28, 1),   # ENOSPC: the disk is full
    (122, 1),  # EDQUOT (Linux): over quota
    (5, 1),    # EIO
    (21, 2),   # EISDIR: the path is a directory
    (2, 2),    # ENOENT: no such folder
    (13, 2),   # EACCES: no permission on the path
])
def test_write_failure_sorts_by_errno(code, exit_code):
    """Errno values from Linux's errno-base.h / errno.h, written out by hand."""
    from planner.errors import write_failure

    error = write_failure("out.yaml", OSError(code, "reason"), "--output")
    assert error.exit_code == exit_code and "out.yaml" in str(error) and "reason" in str(error)


@pytest.mark.parametrize("columns", ["0", "-5", "abc"])
def test_an_unusable_columns_value_still_prints_the_table(columns):
    """Fresh-user review 13, finding 6: `COLUMNS=0 planner plan ...` printed nothing and exited 0 (rich renders
    nothing at width 0); an unusable COLUMNS reads as unset."""
    import os

    env = {**os.environ, "COLUMNS": columns}
    proc = subprocess.run([sys.executable, "-m", "planner", "models"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "llama-3.1-8b" in proc.stdout


@pytest.mark.parametrize("args, says, never", [
    (["-c", "dgx-h100", "--precision", "fp8", "--framework", "torchtitan"], "use rowwise, rowwise_with_gw_hp or tensorwise",
     "delayed"),
    (["-c", "dgx-h100", "--precision", "fp8"], "use delayed, tensorwise or blockwise", "rowwise"),
    (["-c", "dgx-a100-80g"], "no fp8 tensor cores at all", "use "),
])
def test_mxfp8_before_blackwell_names_the_frameworks_own_recipes(args, says, never):
    """Fresh-user review 13, finding 7: the refusal told torchtitan to use Megatron-LM's recipes (delayed,
    blockwise, which torchtitan refuses) and an A100, which has no fp8, to use any fp8 recipe."""
    import cli_run

    proc = cli_run.planner("plan", "-m", "llama-3.1-8b", "--gpus", "8", "--fp8-recipe", "mxfp8", *args)
    assert proc.returncode == 2 and says in proc.stderr and never not in proc.stderr.split("Blackwell")[1]
    assert len(proc.stderr.strip().splitlines()) == 1
