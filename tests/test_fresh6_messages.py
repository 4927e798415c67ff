"""review-fresh6 finding 11: counts of one are singular ("1 node", "1 sequence")."""

from __future__ import annotations

from tests.cli_run import planner


def test_one_sequence_is_singular():
    result = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch-size", "1",
                     "--top", "1")
    assert result.returncode == 0
    assert "global batch 1 sequence = 4,096 tokens" in result.stdout and "1 sequences" not in result.stdout


def test_one_node_is_singular():
    """qwen3-30b-a3b (30.5B parameters, 16 B each of weights, gradients and Adam states: ~490 GB) does not
    fit one 80 GB H100; the least count is a whole node of 8 (the review's case)."""
    result = planner("plan", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "--gpus", "1")
    assert result.returncode == 1
    assert "(1 node of 8)" in result.stderr and "1 nodes" not in result.stderr
