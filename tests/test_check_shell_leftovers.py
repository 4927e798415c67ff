"""`planner check` of the shell forms of launch scripts left unread after gate3-gate5 (issue 11; fresh-user review
11 findings 3, 6 and 9; closing note 8's #11 leftovers): command substitutions `$(...)` and `let`, node ranks from
Slurm (`SLURM_NODEID`) and in every comparison bash runs, vLLM's multi-node form `--node-rank $NODE_RANK` /
`--headless`, an environment prefix on `docker run`, a broken line continuation in a training launch, a launch
inside a shell loop, and the world-size fix of servers on shared nodes. Each script is written as the reviewer or a
launcher writes it; the expected numbers are worked by hand in each test. Source: bash(1) "Command Substitution",
SHELL BUILTIN COMMANDS `let`, "CONDITIONAL EXPRESSIONS"."""

from __future__ import annotations

import json

import pytest

from planner.check import shell
from planner.check.engine_file import check_launch_file
from tests.cli_run import planner

MEGATRON = ("torchrun --nproc_per_node 8 --nnodes {nnodes} pretrain_gpt.py --tensor-model-parallel-size 8 "
            "--sequence-parallel --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size {gbs} "
            "--seq-length 4096 --bf16 --use-distributed-optimizer\n")


def _write(tmp_path, text: str, name: str = "launch.sh"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _json(*args) -> dict:
    out = planner("check", *args, "--format", "json")
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _bad_input(*args) -> str:
    out = planner("check", *args)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    return " ".join(out.stderr.split())


def _errors(result: dict) -> dict[str, str]:
    return {v["rule"]: v["message"] for v in result["violations"] if v["severity"] == "error"}


# ---------------------------------------------------------------- 1. $(...) and let

def test_command_substitution_node_count_falls_back_to_gpus_and_says_so(tmp_path):
    """`NNODES=$(scontrol show hostnames | wc -l)` (review 11 #9) then `torchrun --nnodes $NNODES`: the reader does
    not run the command, so the world size is --gpus's as for an unset variable (16 = tp 8 x pp 2, dp 1), with a
    warning naming the substitution; without --gpus one bad-input line asks for it."""
    path = _write(tmp_path, "#!/bin/bash\nNNODES=$(scontrol show hostnames | wc -l)\n"
                  + MEGATRON.format(nnodes="$NNODES", gbs=64))
    data = _json(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "16")
    assert data["gpus"] == 16 and data["parallelism"]["dp"] == 1
    warning, = [v for v in data["violations"] if v["rule"] == "world_size_from_gpus"]
    assert ("--nnodes $(scontrol show hostnames | wc -l), a command substitution $(...), which this reader does not "
            "run: checked at --gpus 16") in warning["message"]
    text = _bad_input(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100")
    assert (f"{path}: --gpus: --gpus is required: the file's torchrun world size comes from the shell: --nnodes "
            "$(scontrol show hostnames | wc -l), a command substitution") in text


def test_command_substitution_where_no_fallback_is_one_bad_input_line(tmp_path):
    """An engine's tensor-parallel size from `$(nvidia-smi -L | wc -l)`: nothing stands in for it, exit 2 naming the
    flag and the substitution (the `|` inside it is no pipeline of the script)."""
    path = _write(tmp_path, "TP=$(nvidia-smi -L | wc -l)\n"
                            "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size $TP\n")
    text = _bad_input(str(path), "-c", "dgx-h100")
    assert (f"{path}: --tensor-parallel-size: value '$(nvidia-smi -L | wc -l)' is a shell command substitution "
            "$(...), which this reader does not run; write the value") in text


def test_let_is_evaluated_like_arithmetic_expansion(tmp_path):
    """`let GBS=DP*MBS*32` (review 11 #9: 'DP*MBS*32 must be an integer') = 2 x 1 x 32 = 64; `let "GBS2 = GBS*2"`
    = 128 and `let GBS2-=64` = 64 again: the global batch is 64 sequences, 64 micro-batches of 1 at dp 1."""
    path = _write(tmp_path, 'DP=2\nMBS=1\nlet GBS=DP*MBS*32\nlet "GBS2 = GBS*2"\nlet GBS2-=64\n'
                  + MEGATRON.format(nnodes=2, gbs="$GBS2").replace("--micro-batch-size 1", "--micro-batch-size $MBS"))
    par = _json(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100")["parallelism"]
    assert (par["global_batch_size"], par["micro_batch_size"], par["dp"]) == (64, 1, 1)


def test_let_of_an_unset_variable_names_it(tmp_path):
    path = _write(tmp_path, "let GBS=DP*32\n" + MEGATRON.format(nnodes=2, gbs="$GBS"))
    text = _bad_input(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100")
    assert f"{path}: --global-batch-size: value '$((DP*32))' is a shell arithmetic expansion $((...)) of DP" in text


@pytest.mark.parametrize("line, assignments", [
    ("let GBS=DP*MBS*32", "GBS=$((DP*MBS*32))"),
    ('  let "X = Y * 2" Z=3', "  X=$((Y*2)) Z=$((3))"),
    ("let X+=4", "X=$((X+(4)))"),
    ("let i++", "let i++"),            # not an assignment: left as written
    ("echo let X=1", "echo let X=1"),  # not the `let` command
])
def test_let_assignments(line, assignments):
    assert shell.let_assignments(line) == assignments


def test_join_expansions_keeps_a_substitution_one_word():
    words = ["N=$(scontrol", "show", "hostnames", "|", "wc", "-l)", "|", "x", "$((A", "*", "B))"]
    assert shell.join_expansions(words) == ["N=$(scontrol show hostnames | wc -l)", "|", "x", "$((A * B))"]
