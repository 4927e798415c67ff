"""vLLM's documented multi-node launches under `planner check` (senior review 11 #1): the Ray executor (one
`vllm serve` on a Ray cluster's head node, tp x pp over the cluster's nodes: vLLM docs
serving/parallelism_scaling.md, tp 8 pp 2 on 2 nodes of 8 GPUs) and data parallelism over nodes with
--data-parallel-size-local (serving/data_parallel_deployment.md: the head node's command, the others'
--headless --data-parallel-start-rank). Node counts by hand: GPUs per node of dgx-h100 / hgx-h200 = 8."""

from __future__ import annotations

import json

from tests.cli_run import planner

V405 = "vllm serve meta-llama/Llama-3.1-405B-Instruct --tensor-parallel-size 8 --pipeline-parallel-size 2 " \
       "--max-model-len 32768 --gpu-memory-utilization 0.9"
DSV3 = "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --data-parallel-size 2 " \
       "--enable-expert-parallel --max-model-len 32768"
HEAD = " --data-parallel-size-local 1 --data-parallel-address 10.0.0.1 --data-parallel-rpc-port 13345"


def _check(tmp_path, text: str, *args: str):
    path = tmp_path / "serve.sh"
    path.write_text(text + "\n")
    result = planner("check", str(path), *args, "--format", "json")
    return result.returncode, json.loads(result.stdout)


def _errors(doc: dict) -> list[dict]:
    return [v for v in doc["violations"] if v["severity"] == "error"]


def test_ray_executor_spreads_tp8_pp2_over_two_nodes_of_the_ray_cluster(tmp_path):
    code, doc = _check(tmp_path, V405 + " --distributed-executor-backend ray", "-c", "dgx-h100", "--gpus", "16")
    assert code == 0, _errors(doc)
    (launch,) = doc["launches"]
    assert (launch["world"], launch["nnodes"]) == (16, 2)  # 8 x 2 ranks, 8 GPUs per node


def test_ray_executor_needs_the_whole_world_in_the_cluster(tmp_path):
    """The head-node command starts all 16 ranks: a cluster of 8 GPUs cannot hold them."""
    code, doc = _check(tmp_path, V405 + " --distributed-executor-backend ray", "-c", "dgx-h100", "--gpus", "8")
    assert code == 1
    (error,) = _errors(doc)
    assert error["rule"] == "world_size" and "need 16 GPUs" in error["message"]
    assert error["fix"].startswith("check --gpus 16")


def test_default_executor_refuses_a_world_over_the_node_and_names_both_multi_node_forms(tmp_path):
    """vLLM 0.33.0's default (mp) raises 'World size (16) is larger than the number of available GPUs (8)'
    unless --distributed-executor-backend ray or --nnodes is set (vllm/config/parallel.py l. 1066-1078)."""
    code, doc = _check(tmp_path, V405, "-c", "dgx-h100", "--gpus", "16")
    assert code == 1
    (error,) = _errors(doc)
    assert error["rule"] == "world_size" and "need 16 GPUs per node" in error["message"]
    assert "--nnodes 2" in error["fix"] and "--distributed-executor-backend ray" in error["fix"]


def test_data_parallel_head_node_runs_one_rank_of_two(tmp_path):
    code, doc = _check(tmp_path, DSV3 + HEAD, "-c", "hgx-h200", "--gpus", "16")
    assert code == 0, _errors(doc)
    (launch,) = doc["launches"]
    assert (launch["world"], launch["nnodes"], launch["node_rank"]) == (16, 2, 0)


def test_data_parallel_second_node_is_node_one(tmp_path):
    text = DSV3 + " --data-parallel-size-local 1 --data-parallel-start-rank 1 --data-parallel-address 10.0.0.1 " \
                  "--data-parallel-rpc-port 13345 --headless"
    code, doc = _check(tmp_path, text, "-c", "hgx-h200", "--gpus", "16")
    assert code == 0, _errors(doc)
    assert doc["launches"][0]["node_rank"] == 1


def test_too_many_local_data_parallel_ranks_fail_with_the_local_size_fix(tmp_path):
    """--data-parallel-size-local 2 x tp 8 = 16 GPUs on one 8-GPU node: one local rank per node fits."""
    text = DSV3 + " --data-parallel-size-local 2 --data-parallel-address 10.0.0.1"
    code, doc = _check(tmp_path, text, "-c", "hgx-h200", "--gpus", "16")
    assert code == 1
    (error,) = _errors(doc)
    assert error["rule"] == "world_size" and "need 16 GPUs per node" in error["message"]
    assert error["fix"].startswith("--data-parallel-size-local 1 ")


def test_data_parallel_over_nodes_without_the_head_address_fails(tmp_path):
    """Without --data-parallel-address (or --master-addr) the address is 127.0.0.1 on every node."""
    code, doc = _check(tmp_path, DSV3 + " --data-parallel-size-local 1", "-c", "hgx-h200", "--gpus", "16")
    assert code == 1
    assert [e["rule"] for e in _errors(doc)] == ["multi_node_rendezvous"]
    assert "--data-parallel-address" in _errors(doc)[0]["message"]
