"""`planner check` of the fresh-user review 10 files (/work/notes/review-fresh10.md; the reviewer's own files, copied
into tests/data/configs/fresh10/): node-selecting branches of multi-node serving scripts (#2), launches inside
loops (#14)."""

from __future__ import annotations

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
    so neither the port nor the GPUs are shared (review #2: port_in_use / gpus_shared / ';' as an argument)."""
    result = check_launch_file(DATA / name, cluster="dgx-h100", gpus=16)
    assert result["verdict"] == "pass" and _rules(result) == [], result["violations"]
    assert len(result["launches"]) == 2


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
    path.write_text('if [ "$NODE_RANK" -gt 0 ]; then\n  vllm serve meta-llama/Llama-3.1-8B-Instruct\nfi\n')
    done = planner("check", str(path), "-c", "dgx-h100")
    assert done.returncode == 2
    assert "line 1: the condition '[ $NODE_RANK -gt 0 ]' selects the node in a form this reader does not read" in done.stderr
    assert "`case \"$NODE_RANK\" in N) ... ;; esac`" in done.stderr


@pytest.mark.parametrize("name, line", [("v2.sh", 6), ("v3.sh", 3)])
def test_servers_launched_in_a_loop_are_bad_input(name, line):
    """Review #14: `for i in 0 1 2 3; do ... vllm serve ... --port $((8000+i)) & done` said `CUDA_VISIBLE_DEVICES:
    value '$((i*2)),$((i*2+1))' must list GPU indices`; the message names the loop and the way out."""
    done = planner("check", str(DATA / name), "-c", "dgx-h100")
    assert done.returncode == 2, done.stdout
    assert (f"{name}: line {line}: the `vllm serve` command runs inside a shell loop (for / while / until), which this "
            f"reader does not unroll: write one command per server") in done.stderr
