"""Usage errors, help, version and formats at the CLI boundary (the real console entry point)."""

import json
import subprocess
import sys

import pytest
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
