"""review-fresh6 finding 11: counts of one are singular ("1 node", "1 sequence")."""

from __future__ import annotations

from tests.cli_run import planner


def test_one_sequence_is_singular():
    result = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch-size", "1",
                     "--top", "1")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "global batch 1 sequence = 4,096 tokens" in text and "1 sequences" not in text


def test_one_node_is_singular():
    """qwen3-30b-a3b (30.5B parameters, 16 B each of weights, gradients and Adam states: ~490 GB) does not
    fit one 80 GB H100; the least count is a whole node of 8 (the review's case)."""
    result = planner("plan", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "--gpus", "1")
    assert result.returncode == 1
    assert "(1 node of 8)" in result.stderr and "1 nodes" not in result.stderr


def test_cp_fix_keeps_to_the_world_size():
    """review-fresh6 m14_cp3: cp 3 with tp 8 pp 4 on 64 GPUs at seq 4096. Sequence rule: 4096 % (2 x 3)
    != 0; the cp in [2, 6] dividing 4096 / 2 are 2 and 4, but tp x pp x cp = 8 x 4 x 4 = 128 > 64
    GPUs, so only cp 2 (8 x 4 x 2 = 64) is offered."""
    from planner.placement.layout import Layout
    from planner.placement.rules import check_layout
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model
    layout = Layout(dp=1, tp=8, pp=4, cp=3, seq_len=4096, global_batch_size=8)
    found = {v.rule: v for v in check_layout(load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=64), layout)}
    assert found["sequence_divisible"].fix.startswith("use cp in {2}, which divide seq_len=4096")


def test_megatron_architecture_mismatch_names_the_flag_once(tmp_path):
    """review-fresh6 m10_nogqa: --num-query-groups without --group-query-attention trains 64 KV heads
    (Megatron's num_query_groups is read only with the switch); the flag was printed twice."""
    path = tmp_path / "nogqa.txt"
    path.write_text("--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --num-query-groups 8 "
                    "--seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16\n")
    result = planner("check", str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "8")
    assert result.returncode == 2
    assert result.stderr.count("--num-attention-heads") == 1
    assert "without --group-query-attention gives num_key_value_heads=64 but --model llama-3.1-70b has " \
           "num_key_value_heads=8" in " ".join(result.stderr.split())
