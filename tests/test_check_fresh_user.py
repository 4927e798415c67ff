"""What a new user met wiring `planner check` in (issue 11 leftovers): every missing option named in
one run; `--plot` to a missing folder named as --plot; standard input as `-`; ASCII output
where the locale is ASCII although Python writes UTF-8 (PEP 538 / 540)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.report import ascii_locale

ROOT = Path(__file__).resolve().parents[1]
FAILING = ROOT / "examples/llama-3.1-70b-64xh100-tp8.plan.yaml"
runner = CliRunner()


@pytest.mark.parametrize("name, text, options", [
    ("m.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size 2 --micro-batch-size 1 --bf16\n",
     ("--cluster", "--model", "--gpus", "--seq-len")),
    ("ds.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}',
     ("--model", "--cluster", "--gpus", "--seq-len")),
    ("job.toml", "[training]\nlocal_batch_size = 1\n[parallelism]\ntensor_parallel_degree = 2\n",
     ("--model", "--cluster", "--gpus", "--seq-len")),
])
def test_every_missing_option_is_named_in_one_run(tmp_path, name, text, options):
    path = tmp_path / name
    path.write_text(text)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert "required options:" in line
    for option in options:
        assert f"{option} (" in line, (option, line)
    assert "Traceback" not in result.output


def test_one_missing_option_keeps_its_own_message(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1}')
    result = runner.invoke(app, ["check", str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100",
                                 "--gpus", "8"])
    assert result.exit_code == 2
    assert "--seq-len is required" in " ".join(result.output.split())


def test_plot_to_a_missing_folder_names_plot(tmp_path):
    result = runner.invoke(app, ["serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1",
                                 "--input-len", "100", "--output-len", "10",
                                 "--plot", str(tmp_path / "no" / "front.png")])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "--plot" in text and "--output" not in text and "does not exist" in text


def test_check_reads_standard_input_as_dash():
    result = runner.invoke(app, ["check", "-", "--format", "json"], input=FAILING.read_bytes())
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["file"] == "-" and data["kind"] == "training-plan" and data["verdict"] == "fail"


def test_standard_input_next_to_a_file_is_reported_as_dash():
    result = runner.invoke(app, ["check", "-", str(FAILING), "--format", "github"],
                           input=b"not: a config\n")
    assert result.exit_code == 2
    assert "::error file=-," in result.output and "planner-check-" not in result.output


def _run(env_changes: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LC_ALL", "LC_CTYPE", "LANG", "PYTHONIOENCODING", "PYTHONUTF8")}
    env.update(env_changes, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "planner", "check", str(FAILING)],
                          capture_output=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("env", [
    {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},   # stdout encoding ascii
    {"LC_ALL": "C"},              # Python's UTF-8 mode: stdout says utf-8, the terminal is ASCII
    {"LANG": "POSIX"},
    {"LC_ALL": "en_US.ISO-8859-1"},
], ids=["C-ascii-stream", "C-utf8-mode", "POSIX", "latin1"])
def test_ascii_locale_gets_ascii_output(env):
    result = _run(env)
    assert result.returncode == 1, result.stderr
    assert result.stdout and all(b < 128 for b in result.stdout + result.stderr), result.stdout
    assert b"FAIL" in result.stdout and b"ZeRO-1 . SP" in result.stdout


def test_utf8_locale_keeps_the_separators():
    result = _run({"LANG": "C.UTF-8"})
    assert "ZeRO-1 · SP".encode() in result.stdout


@pytest.mark.parametrize("environ, expected", [
    ({}, False), ({"LANG": "C.UTF-8"}, False), ({"LANG": "en_US.utf8"}, False),
    ({"LC_ALL": "C", "LANG": "C.UTF-8"}, True), ({"LC_CTYPE": "POSIX"}, True),
    ({"LANG": "de_DE.ISO-8859-15@euro"}, True), ({"LANG": "en_US"}, False),
    ({"LC_ALL": "C", "PYTHONIOENCODING": "utf-8"}, False),
])
def test_ascii_locale_reads_lc_all_then_lc_ctype_then_lang(environ, expected):
    assert ascii_locale(environ, utf8_mode=0, xoptions={}) is expected


@pytest.mark.parametrize("environ, xoptions, expected", [
    ({}, {}, True),                                  # turned on by a C / POSIX locale (PEP 540)
    ({"PYTHONUTF8": "1", "LANG": "C"}, {}, False),   # asked for by the user
    ({"LANG": "C"}, {"utf8": True}, False),          # python -X utf8
])
def test_automatic_utf8_mode_means_an_ascii_locale(environ, xoptions, expected):
    assert ascii_locale(environ, utf8_mode=1, xoptions=xoptions) is expected


# Line 2 "  bad: [1, 2": its colon is the 6th character, where PyYAML finds a mapping value
# inside a plain scalar's mapping.
BROKEN_YAML = b"model: llama-3.1-8b\n  bad: [1, 2\n"
BROKEN_SAID = "YAML syntax error at line 2, column 6: mapping values are not allowed here"


def test_yaml_syntax_error_on_standard_input_is_reported_with_line_and_column():
    result = runner.invoke(app, ["check", "-", "--cluster", "dgx-h100"], input=BROKEN_YAML)
    assert result.exit_code == 2
    assert result.output.strip() == f"error: -: {BROKEN_SAID}"  # one line, no traceback


@pytest.mark.parametrize("name", ["broken.yaml", "broken"])
def test_yaml_syntax_error_in_a_file_is_reported_alike(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(BROKEN_YAML)
    result = runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100"])
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == f"error: {path}: {BROKEN_SAID}"


def test_json_syntax_error_on_standard_input_names_its_column():
    # '{"train_batch_size": 8,,}': the second comma is the 24th character. JSON text (first character
    # `{`) is named JSON, not YAML (review-fresh5 #8), on standard input as in a .json file.
    result = runner.invoke(app, ["check", "-"], input=b'{"train_batch_size": 8,,}')
    assert result.exit_code == 2
    assert "-: JSON syntax error at line 1, column 24" in result.output
    unclosed = runner.invoke(app, ["check", "-"], input=b'{"train_batch_size": 8\n')
    assert unclosed.exit_code == 2 and "-: JSON syntax error at line 2" in unclosed.output
    assert "YAML" not in unclosed.output


def test_text_that_is_no_mapping_is_still_not_a_configuration():
    # A plain scalar first (a shell line), broken further on: not read as a broken YAML file.
    result = runner.invoke(app, ["check", "-"], input=b"echo start\n  x: y: z\n")
    assert result.exit_code == 2
    assert "not a configuration" in result.output and "syntax error" not in result.output
