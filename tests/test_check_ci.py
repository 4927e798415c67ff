"""`planner check` wired into CI: several files per run (each reported; exit 0 / 1 / 2), GitHub
Actions annotations at the line of the flag or key, a JUnit XML report (parsed back with
xml.etree), the pre-commit hook file, and the kind of a file read from its content."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.check import ci_formats
from planner.cli import app

ROOT = Path(__file__).resolve().parents[1]
PASSING = "examples/llama-3.1-70b-64xh100.plan.yaml"
FAILING = "examples/llama-3.1-70b-64xh100-tp8.plan.yaml"

# Llama 3.1 8B has 8 KV heads (models/llama-3.1-8b): tp 16 on 16 GPUs breaks
# kv_heads_divisible_by_tp; the tp flag is on line 3 of this script.
SCRIPT = """#!/bin/bash
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
  --tensor-model-parallel-size 16 \\
  --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 --rotary-base 500000
"""
SCRIPT_OPTIONS = ["-m", "llama-3.1-8b", "-c", "dgx-h100"]

runner = CliRunner()


def _check(*args):
    return runner.invoke(app, ["check", *map(str, args)])


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_two_files_both_reported_and_any_failure_exits_1():
    result = _check(PASSING, FAILING)
    assert result.exit_code == 1, result.output
    assert f"PASS {PASSING}" in result.output and f"FAIL {FAILING}" in result.output


def test_all_passing_exits_0_and_json_lists_every_file():
    result = _check(PASSING, PASSING, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [d["verdict"] for d in data] == ["pass", "pass"]


def test_an_unreadable_file_exits_2_and_the_others_are_still_reported(tmp_path):
    missing = tmp_path / "missing.yaml"
    result = _check(FAILING, missing, PASSING)
    assert result.exit_code == 2
    assert f"FAIL {FAILING}" in result.output and f"PASS {PASSING}" in result.output
    assert f"error: {missing}" in result.output


def test_github_annotation_points_at_the_line_of_the_flag(tmp_path):
    script = tmp_path / "pretrain_llama.sh"
    script.write_text(SCRIPT)
    result = _check(script, *SCRIPT_OPTIONS, "--format", "github")
    assert result.exit_code == 1, result.output
    line = next(s for s in result.output.splitlines() if "title=kv_heads_divisible_by_tp" in s)
    assert line.startswith(f"::error file={script},line=3,title=kv_heads_divisible_by_tp::")
    assert "num_key_value_heads=8 is not divisible by tp=16" in line
    assert result.output.splitlines()[-1] == f"FAIL {script} (megatron-args): 1 error(s), " \
                                             f"2 warning(s)"


def test_github_annotation_of_a_plan_file_memory_failure_points_at_a_knob_it_sets():
    """memory_exceeds names no key: it points at the first knob its fix names (the fixes list the
    cheapest in step time first: here half the micro-batch, review-fresh11 #4)."""
    result = _check(FAILING, "--format", "github")
    text = (ROOT / FAILING).read_text().splitlines()
    micro_line = 1 + next(i for i, s in enumerate(text) if s.strip().startswith("micro_batch_size:"))
    assert f"::error file={FAILING},line={micro_line},title=memory_exceeds::pipeline stage 0 " \
           f"needs 85.3 GiB of 79.6 GiB" in result.output
    assert "Fix: any of: micro_batch_size 1 " in result.output


def test_github_escapes_data_and_properties():
    result = {"file": "a,b:c.sh", "verdict": "fail", "kind": "megatron-args", "violations": [
        {"rule": "r", "severity": "error", "message": "100% of\nit", "fix": "", "line": 2}]}
    first = ci_formats.github([result])[0]
    assert first == "::error file=a%2Cb%3Ac.sh,line=2,title=r::100%25 of it"
    unreadable = ci_formats.github([{"file": "x", "verdict": "error", "error": "50%\r\n"}])[0]
    assert unreadable == "::error file=x,title=planner check::50%25%0D%0A"


def test_junit_report_parses_with_one_case_per_file_and_rule(tmp_path):
    script = tmp_path / "pretrain_llama.sh"
    script.write_text(SCRIPT)
    missing = tmp_path / "missing.toml"
    result = _check(PASSING, script, missing, *SCRIPT_OPTIONS[2:], "-m", "llama-3.1-8b",
                    "--format", "junit")
    assert result.exit_code == 2
    root = ET.fromstring(result.output)
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    by_file: dict[str, list[str]] = {}
    for case in cases:
        by_file.setdefault(case.get("classname"), []).append(case.get("name"))
    # The plan file names its own model: --model llama-3.1-8b contradicts its llama-3.1-70b, a
    # finding on that file (rule plan_options), not a read error.
    assert sorted(by_file[PASSING]) == ["plan_options", "verdict", "vocab_padding"]
    assert sorted(by_file[str(script)]) == sorted(
        ["kv_heads_divisible_by_tp", "vocab_padding", "tp_spans_scaleup_domain", "verdict"])
    assert by_file[str(missing)] == ["read"]
    failures = [c.get("name") for c in cases if c.find("failure") is not None]
    assert sorted(failures) == ["kv_heads_divisible_by_tp", "plan_options", "verdict", "verdict"]
    assert int(suite.get("tests")) == len(cases) == 8
    assert int(suite.get("failures")) == 4 and int(suite.get("errors")) == 1
    kv = next(c for c in cases if c.get("name") == "kv_heads_divisible_by_tp")
    assert kv.get("line") == "3" and "tp=16" in kv.find("failure").get("message")


def test_pre_commit_hook_file_is_valid_with_the_fields_pre_commit_requires():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "planner-check"
    assert {"id", "name", "entry", "language"} <= set(hook) and ("files" in hook or "types" in hook)
    assert hook["entry"] == "planner check" and hook["language"] == "python"
    pattern = re.compile(hook["files"])
    for path in (PASSING, "configs/ds_config.json", "llama3/train_configs/llama3_8b.toml",
                 "examples/pretrain_llama3_8b.sh",
                 # review-fresh6 finding 12: serving launches and DeepSpeed files named by stage
                 "serve_vllm.sh", "deploy/launch_sglang.sh", "zero3.json", "configs/ds_zero3.json",
                 # review-fresh7: serve-plan's -o name in the README, torchtitan's launcher
                 "serve-plan.yaml", "torchtitan/run_train.sh"):
        assert pattern.search(path), path
    for path in ("pyproject.toml", "docs/config.json", "package.json", "vllm/notes.md"):
        assert not pattern.search(path), path
    # files given together are checked against each other: pre-commit must not split them
    assert hook["require_serial"] is True


# ---------------------------------------------------------------- kind by content


def test_a_plan_file_saved_as_txt_is_read_as_a_plan_file(tmp_path):
    copy = tmp_path / "plan.txt"
    copy.write_text((ROOT / PASSING).read_text())
    result = _check(copy, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kind"] == "training-plan"


@pytest.mark.parametrize("name, text", [
    ("pyproject.toml", '[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n'),
    ("values.yaml", "replicas: 3\nimage: nginx\n"),
    ("build.sh", "#!/bin/sh\nmake -j8 --keep-going\n"),
    ("data.json", '{"a": 1}'),
])
def test_a_file_of_no_kind_read_is_bad_input_naming_the_kinds(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    result = _check(path, "-c", "dgx-h100", "--gpus", "8")
    assert result.exit_code == 2, result.output
    message = result.output.strip()
    assert message.startswith(f"error: {path}: not a configuration `planner check` reads")
    for kind in ("a plan file", "a DeepSpeed JSON config", "a torchtitan TOML job config",
                 "a torchtitan command line", "Megatron-LM arguments",
                 "a serving plan file (kind: serving-plan, written by `planner serve-plan -o`)"):
        assert kind in message
    assert "Traceback" not in result.output


def test_a_serving_plan_kind_without_its_request_names_the_missing_key(tmp_path):
    """`kind: serving-plan` is read as a serving plan only with request.output_len (what
    `planner serve-plan -o` writes); without it the error says so, not "not a configuration"."""
    path = tmp_path / "serve.yaml"
    path.write_text("kind: serving-plan\nplan: {}\n")
    result = _check(path)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "request.output_len" in message and "not a configuration" not in message


def test_megatron_args_without_kv_channels_derive_it_as_hidden_over_heads(tmp_path):
    """Megatron's validate_args: kv_channels = hidden_size / num_attention_heads when absent; with
    --ffn-hidden-size given this used to be a KeyError traceback."""
    args = tmp_path / "llama.args"
    args.write_text(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention\n"
        "--num-query-groups 8 --ffn-hidden-size 14336 --seq-length 4096 --max-position-embeddings"
        " 8192\n--micro-batch-size 1 --global-batch-size 128 --tensor-model-parallel-size 2 --bf16"
        " --swiglu\n--normalization RMSNorm --position-embedding-type rope --vocab-size 128256\n")
    from planner.check import read_target
    target = read_target(args, cluster="dgx-h100", gpus=8)
    assert target.kind == "megatron-args"
    assert target.model.head_dim == 4096 // 32 == 128
    result = _check(args, "-c", "dgx-h100", "--gpus", "8")
    assert result.exit_code == 0, result.output


def test_bad_input_annotation_points_at_the_key_it_names(tmp_path):
    """A torchtitan degree that is no positive integer is bad input: the annotation and the JUnit
    error point at its line (6). A key one letter off a field is torchtitan's start-up error
    (unknown fields), the check failure torchtitan_unknown_key (exit 1), at the same line."""
    path = tmp_path / "job.toml"
    path.write_text("[training]\nlocal_batch_size = 2\nseq_len = 8192\n\n[parallelism]\n"
                    "tensor_parallel_degree = 0\n")
    options = ["-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8"]
    result = _check(path, *options, "--format", "github")
    assert result.exit_code == 2
    assert result.output.startswith(f"::error file={path},line=6,title=planner check::")
    assert "parallelism.tensor_parallel_degree: value 0 must be an integer >= 1" in result.output
    junit = ET.fromstring(_check(path, *options, "--format", "junit").output)
    assert junit.find("testsuite/testcase").get("line") == "6"
    path.write_text(path.read_text().replace("tensor_parallel_degree = 0", "tensor_paralel_degree = 2"))
    typo = _check(path, *options, "--format", "github")
    assert typo.exit_code == 1
    assert typo.output.startswith(f"::error file={path},line=6,title=torchtitan_unknown_key::")
    assert "did you mean parallelism.tensor_parallel_degree?" in typo.output


def _readme_stanza_args() -> list[str]:
    """The `args` of the README's pre-commit stanza, as pre-commit passes them."""
    text = (ROOT / "README.md").read_text()
    (args,) = re.findall(r"- id: planner-check\n\s+args: (\[.*\])", text)
    return [str(a) for a in yaml.safe_load(args)]


def test_readme_pre_commit_args_on_a_plan_file_and_a_config_report_each_file():
    """Fresh-user defect: the README's stanza (--model llama-3.1-8b --cluster dgx-h100 --gpus 8
    --seq-len 8192) on a commit touching a plan file and a torchtitan config exited 2 for the
    whole run ("--model, --cluster, --gpus, --seq_len not allowed with a plan file", the option
    misspelled). Now each file is reported: the torchtitan Llama 3 8B config passes with them;
    the 70B plan (llama-3.1-70b, dgx-h100, 64 GPUs, 4,096 tokens) fails on the three that
    contradict it -- the cluster agrees -- with exit 1, not 2."""
    args = _readme_stanza_args()
    assert args == ["--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--gpus", "8",
                    "--seq-len", "8192"]
    config = "tests/data/configs/torchtitan/llama3_8b.toml"
    result = _check(PASSING, config, *args, "--format", "json")
    assert result.exit_code == 1, result.output
    plan, titan = json.loads(result.output)
    assert titan["verdict"] == "pass"
    found = [v for v in plan["violations"] if v["rule"] == "plan_options"]
    assert plan["verdict"] == "fail" and [v["message"] for v in found] == [
        "--model llama-3.1-8b given, but the plan file is for llama-3.1-70b",
        "--gpus 8 given, but the plan file is for 64",
        "--seq-len 8192 given, but the plan file is for 4096"]


def test_options_that_agree_with_a_plan_file_are_accepted():
    """The plan's own model, cluster, GPU count and sequence length, as options (the model as
    its catalog file): the plan passes, as without them."""
    result = _check(PASSING, "-m", "models/llama-3.1-70b.yaml", "-c", "dgx-h100", "--gpus", "64",
                    "--seq-len", "4096", "--format", "json")
    assert result.exit_code == 0, result.output
    assert not [v for v in json.loads(result.output)["violations"] if v["rule"] == "plan_options"]


@pytest.mark.parametrize("name, text, line", [
    ("bad.yaml", "a: [1,\n b: 2\n", 3),               # the flow sequence is still open at the end
    ("bad.json", '{"train_batch_size": 8,\n]\n', 2),   # `]` closing `{` on line 2 (DeepSpeed's hjson refuses it too)
    ("bad.toml", "[training]\nseq_len = \n", 2),       # a key without its value on line 2
])
def test_syntax_error_annotation_carries_its_line(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    result = _check(path, "--format", "github")
    assert result.exit_code == 2
    assert f"::error file={path},line={line},title=planner check::" in result.output
