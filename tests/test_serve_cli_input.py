"""`planner serve-plan` bad input and messages: a context shorter than the request, non-finite numbers,
the whole GPU-bound infeasible message, thousands separators in the concurrency columns."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = ("serve-plan", "-m", "llama-3.1-70b", "-c", "hgx-h200")


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *BASE, *args], capture_output=True, text=True, cwd=ROOT)


def _one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def test_max_model_len_below_input_plus_output_is_bad_input():
    err = _one_line(_serve("--gpus", "8", "--input-len", "100", "--output-len", "100", "--max-model-len", "50"), 2)
    # 100 + 100 = 200 tokens per request; 50 cannot hold it
    assert "--max-model-len" in err and "50" in err and "--input-len 100" in err and "--output-len 100" in err
    assert "at least 200" in err


def test_max_model_len_equal_to_input_plus_output_is_accepted():
    proc = _serve("--gpus", "8", "--input-len", "100", "--output-len", "100", "--max-model-len", "200", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["request"]["max_model_len"] == 200


@pytest.mark.parametrize("option, value, allowed", [
    ("--request-rate", "nan", ">= 0.001 and <= 10,000,000"),
    ("--request-rate", "inf", ">= 0.001 and <= 10,000,000"),
    ("--ttft-ms", "inf", ">= 0.001"),
    ("--tpot-ms", "nan", ">= 0.001"),
    ("--request-latency-ms", "-inf", ">= 0.001"),
    ("--mem-fraction", "nan", ">= 0.05 and <= 1"),
])
def test_non_finite_numbers_are_bad_input(option, value, allowed):
    err = _one_line(_serve("--gpus", "8", "--input-len", "100", "--output-len", "100", option, value), 2)
    assert option in err and f"'{value}'" in err and f"a finite number {allowed}" in err
    assert "less than or equal" not in err
