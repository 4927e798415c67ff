"""`planner check` of the fresh-user review 10 files (/work/notes/review-fresh10.md; the reviewer's own files, copied
into tests/data/configs/fresh10/): node-selecting branches of multi-node serving scripts (#2), launches inside
loops (#14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.check.engine_file import check_launch_file
from tests.cli_run import planner

DATA = Path(__file__).parent / "data" / "configs" / "fresh10"


def _rules(result: dict) -> list[str]:
    return [v["rule"] for v in result["violations"] if v["severity"] == "error"]


@pytest.mark.parametrize("name", ["w1.sh", "w3.sh", "w4.sh", "w5.sh", "v5.sh", "w6.sh"])
def test_node_rank_branches_are_exclusive(name):
    """Two tp8 servers on port 8000, one per node, selected by `if [ "$NODE_RANK" = 0 ]` blocks (w1, the emitted
    form), `==` (w3), `-eq` (w4), `else` (w5), `elif` (v5), `case ... ;; esac` (w6): bash runs one branch per node,
    so neither the port nor the GPUs are shared (review #2: port_in_use / gpus_shared / ';' as an argument; without
    --gpus, world_size: need 16 GPUs)."""
    result = check_launch_file(DATA / name, cluster="dgx-h100", gpus=16)
    assert result["verdict"] == "pass" and _rules(result) == [], result["violations"]
    assert len(result["launches"]) == 2
    # without --gpus the file may use the nodes its branches name (2 x 8 GPUs), as with --node-rank flags
    result = check_launch_file(DATA / name, cluster="dgx-h100")
    assert result["verdict"] == "pass" and result["gpus"] == 16, result["violations"]


def test_servers_of_one_else_branch_share_its_nodes(tmp_path):
    """Two servers in one `else` branch both run on every node but 0: the second's port and GPUs are taken."""
    path = tmp_path / "else.sh"
    server = "  vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 4 --port 8000\n"
    path.write_text('if [ "$NODE_RANK" = 0 ]; then\n' + server + "else\n" + server + server + "fi\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=16)
    clash = {v["rule"]: v["message"] for v in result["violations"]}
    assert set(_rules(result)) == {"port_in_use", "gpus_shared"}, result["violations"]
    assert "line 5 listens on port 8000, as does line 4 (both on the nodes other than 0" in clash["port_in_use"]


def test_one_line_if_else(tmp_path):
    path = tmp_path / "one_line.sh"
    server = "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 8 --port 8000"
    path.write_text(f'if [ "$NODE_RANK" = 0 ]; then {server}; else {server}; fi\n')
    assert _rules(check_launch_file(path, cluster="dgx-h100", gpus=16)) == []


def test_node_rank_test_not_read_is_bad_input(tmp_path):
    path = tmp_path / "gt.sh"
    path.write_text('if [ -z "$NODE_RANK" ]; then NODE_RANK=0; fi\n'  # a default: no engine in it, no error
                    'if [[ $NODE_RANK =~ ^[1-9] ]]; then\n  vllm serve meta-llama/Llama-3.1-8B-Instruct\nfi\n')
    done = planner("check", str(path), "-c", "dgx-h100")
    assert done.returncode == 2
    assert ("line 3: the `vllm serve` command runs in a branch that the condition '[[ $NODE_RANK =~ ^[1-9] ]]' "
            "(line 2) selects in a form this reader does not read") in done.stderr
    assert "`case \"$NODE_RANK\" in N|M) ... ;; *) ... ;; esac`" in done.stderr
    path.write_text('if [ -z "$NODE_RANK" ]; then NODE_RANK=0; fi\n'
                    'vllm serve meta-llama/Llama-3.1-8B-Instruct\n')
    assert planner("check", str(path), "-c", "dgx-h100").returncode == 0


@pytest.mark.parametrize("name, line", [("v2.sh", 6), ("v3.sh", 3)])
def test_servers_launched_in_a_loop_are_bad_input(name, line):
    """Review #14: `for i in 0 1 2 3; do ... vllm serve ... --port $((8000+i)) & done` said `CUDA_VISIBLE_DEVICES:
    value '$((i*2)),$((i*2+1))' must list GPU indices`; the message names the loop and the way out."""
    done = planner("check", str(DATA / name), "-c", "dgx-h100")
    assert done.returncode == 2, done.stdout
    assert (f"{name}: line {line}: the `vllm serve` command runs inside a shell loop (for / while / until), which this "
            f"reader does not unroll: write one command per server") in done.stderr


@pytest.mark.parametrize("name, model, line, what", [
    ("vbs.sh", None, 1, "line 1 ends in a backslash followed by a space: bash reads `\\ ` as an escaped space"),
    ("tbs.sh", "llama-3.1-8b", 1, "line 1 ends in a backslash followed by a space"),
    ("o5.sh", "llama-3.1-8b", 1, "line 1 ends in a backslash followed by a space"),
    ("o6.sh", "llama-3.1-8b", 2, "line 2 is a comment (a backslash inside a comment does not continue it) inside "
                                 "the command continued from line 1: bash ends the command at line 2; line 3 runs "
                                 "as a command of its own"),
    ("o6c.sh", "llama-3.1-8b", 3, "line 3 is blank inside the command continued from line 2: bash ends the command "
                                  "at line 3; line 4 runs as a command of its own"),
    ("vbl.sh", None, 3, "line 3 is blank inside the command continued from line 2"),
    ("c1.sh", "llama-3.1-8b", 9, "line 9 is a comment (a backslash inside a comment does not continue it) inside "
                                 "the command continued from line 8"),
])
def test_broken_continuations_fail_at_their_line(name, model, line, what):
    """Review #1: a backslash before a trailing space, a comment or blank line inside a continued command: bash
    ends the command there (vLLM, Megatron-LM and torchtitan readers alike; c1.sh's commented-out flag ending in
    a backslash was `--micro-batch-size: missing`, exit 2, its comment having swallowed the next line)."""
    done = planner("check", str(DATA / name), "-c", "dgx-h100", *(["-m", model] if model else []),
                   "--format", "json")
    result = json.loads(done.stdout)
    found = [v for v in result["violations"] if v["rule"] == "line_continuation"]
    assert done.returncode == 1 and result["verdict"] == "fail", done.stdout
    assert [v["line"] for v in found] == [line] and what in found[0]["message"], found
    assert "bash continues a command only with a backslash right before the newline" in found[0]["fix"]


def test_byte_order_mark_fails():
    """Review #1: bash runs `\\xef\\xbb\\xbfvllm` (command not found); the reader's UTF-8 decoding dropped it."""
    done = planner("check", str(DATA / "bom.sh"), "-c", "dgx-h100", "--format", "json")
    found = [v for v in json.loads(done.stdout)["violations"] if v["rule"] == "byte_order_mark"]
    assert done.returncode == 1 and [v["line"] for v in found] == [1]
    assert found[0]["message"].startswith("the file starts with a UTF-8 byte-order mark (bytes EF BB BF)")


def test_continuations_bash_accepts_pass(tmp_path):
    """What bash continues or ends harmlessly is no finding: a trailing backslash at a command's end before a blank
    line and a new command, a comment above a command, a bash array's lines, a heredoc, a script's own option
    parsing (`case` patterns `--tp)`)."""
    path = tmp_path / "ok.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --tensor-parallel-size 4 \\\n\n"
                    "# the second server\n"
                    "CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8001 \\\n"
                    "  --tensor-parallel-size 4\nARGS=(\n  --a 1\n\n  --b 2\n)\ncat <<EOF\n--not-a-command\nEOF\n"
                    'while [ $# -gt 0 ]; do\n  case "$1" in\n    --tp) TP=$2; shift 2 ;;\n    -h|--help) exit 0 ;;\n'
                    "  esac\ndone\n")
    assert [v for v in check_launch_file(path, cluster="dgx-h100")["violations"]
            if v["rule"] in ("line_continuation", "byte_order_mark")] == []


def test_flag_line_without_backslash_before_it(tmp_path):
    path = tmp_path / "missing.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct\n  --tensor-parallel-size 4\n")
    found = [v for v in check_launch_file(path, cluster="dgx-h100")["violations"] if v["rule"] == "line_continuation"]
    assert [v["line"] for v in found] == [2]  # the flag's line, where annotations point
    assert found[0]["message"].startswith("line 2 begins with the flag --tensor-parallel-size, but line 1 does not "
                                          "end in a backslash: bash ends the command at line 1")


def test_deepspeed_config_deepspeed_refuses_is_a_syntax_error_whatever_its_name():
    """Review #7: a Python dict (single quotes, `True}`) on standard input passed (`PASS (deepspeed-config)`, a
    YAML reading). DeepSpeed's own reader, hjson, refuses it too (`True}` is one quoteless string to the end
    of the line): bad input at the strict JSON error. (Trailing commas, which DeepSpeed takes, are read as it
    reads them: tests/test_check_deepspeed_json.py.)"""
    options = ("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "4096")
    text = (DATA / "dssq.json").read_text()
    for done in (planner("check", str(DATA / "dssq.json"), *options), planner("check", "-", *options, input=text)):
        assert done.returncode == 2, done.stdout
        assert "JSON syntax error at line 1, column 2: Expecting property name enclosed in double quotes" \
            in done.stderr


def test_torchtitan_run_train_without_its_toml_is_bad_input():
    """Review #6: torchtitan's classic run_train.sh (`-m torchtitan.train --job.config_file ${CONFIG_FILE}`) was
    read as a Megatron-LM script (`--micro-batch-size: missing`); its TOML (a path relative to the torchtitan
    checkout) is not here, so the message names it and the override to write into it."""
    done = planner("check", str(DATA / "tt3.sh"), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--seq-len", "8192")
    assert done.returncode == 2 and "Megatron" not in done.stderr, done.stderr
    assert ("--job.config_file: the command line gives a TOML job config (--job.config_file "
            "./torchtitan/models/llama3/train_configs/llama3_8b.toml), the form of torchtitan releases before 2026-02"
            in done.stderr)
    assert ("check the TOML itself, `planner check ./torchtitan/models/llama3/train_configs/llama3_8b.toml`, with its "
            "overrides (--parallelism.tensor_parallel_degree 2) written into it" in done.stderr)


def test_torchtitan_run_train_reads_its_toml_with_the_overrides(tmp_path):
    """The same run_train.sh beside its TOML (torchtitan's llama3_8b.toml at 238fa99, tests/data/configs/torchtitan:
    local batch 2, shard degree -1, tp 1): the TOML as torchtitan read it, `--parallelism.tensor_parallel_degree 2`
    over it, on torchrun's 8 ranks: tp 2, dp 8 / 2 = 4, global batch 2 x 4 = 8 sequences of 8,192."""
    (tmp_path / "llama3_8b.toml").write_text((DATA.parent / "torchtitan" / "llama3_8b.toml").read_text())
    script = tmp_path / "run_train.sh"
    script.write_text((DATA / "tt3.sh").read_text().replace("./torchtitan/models/llama3/train_configs/", "./"))
    done = planner("check", str(script), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--format", "json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["kind"] == "torchtitan-command", done.stdout + done.stderr
    layout = data["parallelism"]
    assert (layout["tp"], layout["dp"], layout["global_batch_size"], layout["seq_len"]) == (2, 4, 8, 8192)


@pytest.mark.parametrize("name", ["o2.sh", "o3.sh"])
def test_deepspeed_and_accelerate_launchers_give_the_world_size(name):
    """Review #14: `deepspeed --num_gpus 8 pretrain_gpt.py` (Megatron-DeepSpeed's launch) and `accelerate launch
    --num_processes 8 pretrain_gpt.py` said `--gpus is required`; 8 ranks, no tp/pp flags: dp 8."""
    done = planner("check", str(DATA / name), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--format", "json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["gpus"] == 8 and data["parallelism"]["dp"] == 8, done.stdout + done.stderr


def test_deepspeed_launcher_nodes_and_hostfile(tmp_path):
    """--num_gpus 4 x --num_nodes 2 = 8 ranks (a --gpus that differs contradicts them); with a hostfile and no
    --num_nodes the launcher takes the hosts it lists, which the file does not show: --gpus is required."""
    flags = (DATA / "o2.sh").read_text().split("pretrain_gpt.py", 1)[1]
    path = tmp_path / "ds.sh"
    path.write_text("deepspeed --num_gpus 4 --num_nodes 2 pretrain_gpt.py" + flags)
    done = planner("check", str(path), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--format", "json")
    assert json.loads(done.stdout)["gpus"] == 8, done.stderr
    done = planner("check", str(path), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--gpus", "16")
    assert done.returncode == 2 and "--gpus 16 contradicts the file's deepspeed --num_gpus x --num_nodes = 8" in done.stderr
    path.write_text("deepspeed --hostfile hosts --num_gpus 8 pretrain_gpt.py" + flags)
    done = planner("check", str(path), "-c", "dgx-h100", "-m", "llama-3.1-8b")
    assert done.returncode == 2 and "--gpus is required" in done.stderr
    assert "nor a literal deepspeed --num_gpus or accelerate launch --num_processes" in done.stderr
