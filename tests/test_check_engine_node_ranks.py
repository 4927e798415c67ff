"""`planner check` of an SGLang / vLLM file holding the commands of every node rank of one instance (fresh-user
review 7 item 5): one engine over nnodes x the GPUs of a node, and by default the file may use every node it
names (it was counted as one node: 'the launches need 16 GPUs (8 + 8) ...; 8 are given')."""

from __future__ import annotations

from planner.check.engine_file import check_launch_file

SGLANG = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dist-init-addr {addr}:5000 "
          "--nnodes 2 --node-rank {rank} --trust-remote-code\n")
VLLM = ("vllm serve meta-llama/Llama-3.1-405B-Instruct --tensor-parallel-size 8 --pipeline-parallel-size 2 "
        "--max-model-len 8192 --nnodes 2 --node-rank {rank} --master-addr {addr}{tail}\n")


def _check(tmp_path, text: str, **options) -> dict:
    path = tmp_path / "launch.sh"
    path.write_text(text)
    return check_launch_file(path, cluster="dgx-h100", **options)


def test_sglang_node_ranks_of_one_instance_are_one_engine_over_both_nodes(tmp_path):
    text = SGLANG.format(addr="10.0.0.1", rank=0) + SGLANG.format(addr="10.0.0.1", rank=1)
    result = _check(tmp_path, text)
    assert result["verdict"] == "pass" and result["gpus"] == 16, result["violations"]  # 2 nodes x 8 GPUs
    row, = result["launches"]
    assert (row["world"], row["nnodes"], row["lines"], row["node_ranks"]) == (16, 2, [1, 2], [0, 1])
    # --gpus given still binds: one node's 8 GPUs cannot run both commands' 8 + 8
    assert [v["rule"] for v in _check(tmp_path, text, gpus=8)["violations"]] == ["world_size"]


def test_vllm_node_ranks_of_one_instance_are_one_engine(tmp_path):
    text = VLLM.format(rank=0, addr="10.0.0.1", tail="") + VLLM.format(rank=1, addr="10.0.0.1", tail=" --headless")
    result = _check(tmp_path, text)
    assert result["verdict"] == "pass" and result["gpus"] == 16, result["violations"]
    assert [(r["world"], r["node_ranks"]) for r in result["launches"]] == [(16, [0, 1])]


def test_commands_of_other_rendezvous_are_other_instances(tmp_path):
    """Node rank 1 of an instance whose node rank 0 is elsewhere (another address): two instances, each row its
    own; the file still names a second node, so 16 GPUs by default."""
    text = SGLANG.format(addr="10.0.0.1", rank=0) + SGLANG.format(addr="10.0.0.2", rank=1)
    result = _check(tmp_path, text)
    assert result["gpus"] == 16 and [r.get("node_ranks") for r in result["launches"]] == [None, None]
