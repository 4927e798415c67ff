"""`planner validate --suite serving --data F`: every bad field of a measurements row is one line on
stderr naming the file, the row, the column, the value and what is allowed; exit 2, no traceback."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests/data/reference/serving_measurements.csv"


def _first_row() -> tuple[list[str], dict]:
    with REFERENCE.open(newline="") as handle:
        reader = csv.DictReader(line for line in handle if not line.startswith("#"))
        return list(reader.fieldnames), next(reader)


def _write(path: Path, header: list[str], row: dict) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerow({k: row[k] for k in header})
    return path


def _validate(data: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", "validate", "--suite", "serving", "--data", str(data)],
                          capture_output=True, text=True, cwd=ROOT)


def _one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def test_unchanged_row_validates(tmp_path):
    header, row = _first_row()
    proc = _validate(_write(tmp_path / "one.csv", header, row))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("key, value, allowed", [
    ("silicon_ttft_ms", "0", "positive finite number"),
    ("silicon_tpot_ms", "-3", "positive finite number"),
    ("silicon_tpot_ms", "nan", "positive finite number"),
    ("silicon_ttft_ms", "inf", "positive finite number"),
    ("silicon_ttft_ms", "fast", "positive finite number"),
    ("backend", "tgi", "vllm, sglang, trtllm"),
    ("tp_size", "0", "positive integer"),
    ("pp_size", "-1", "positive integer"),
    ("moe_ep_size", "2.5", "positive integer"),
    ("isl", "0", "positive integer"),
    ("osl", "-100", "positive integer"),
    ("batch_size", "1e3", "positive integer"),
])
def test_bad_field_names_file_row_key_value_allowed(tmp_path, key, value, allowed):
    header, row = _first_row()
    path = _write(tmp_path / "bad.csv", header, {**row, key: value})
    err = _one_line_exit_2(_validate(path))
    assert str(path) in err and f"row {row['id']}" in err and f"{key}:" in err
    assert repr(value) in err and allowed in err


def test_missing_id_column_names_the_column(tmp_path):
    header, row = _first_row()
    path = _write(tmp_path / "noid.csv", [k for k in header if k != "id"], row)
    err = _one_line_exit_2(_validate(path))
    assert str(path) in err and "id" in err and "missing from the header" in err and "row ?" not in err


def test_row_without_id_is_named_by_line(tmp_path):
    header, row = _first_row()
    path = tmp_path / "blank_id.csv"
    path.write_text("# a comment line\n")  # line 1; header line 2; the row is line 3
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerow({**row, "id": ""})
    err = _one_line_exit_2(_validate(path))
    assert "line 3" in err and "id:" in err


def test_directory_is_not_file_not_found(tmp_path):
    err = _one_line_exit_2(_validate(tmp_path))
    assert str(tmp_path) in err and "directory" in err and "not found" not in err
