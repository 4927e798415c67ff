"""DeepEP's normal-mode kernels run only at the node counts compiled into SWITCH_RDMA_RANKS (senior review 10,
finding 1): the table in `planner.frameworks.deepep` and the vLLM check rule. Expected lists are copied by hand from
deepseek-ai/DeepEP csrc/kernels/launch.cuh at 9af0e0d (v1.2.1: 2, 4, 8, 16, 18, 20) and 73b6ea4 (2, 3, 4, 6, 8, 12,
16, 18, 20)."""

from __future__ import annotations

import json
from pathlib import Path

import cli_run

from planner.check.engine_file import check_launch_file
from planner.frameworks import deepep

VLLM = ("vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 1 --data-parallel-size {dp} --enable-expert-parallel "
        "--all2all-backend {backend} --nnodes {nodes} --node-rank {rank} --master-addr 10.0.0.1 --max-model-len 4096\n")


def test_normal_mode_node_counts_by_hand():
    # SGLang's image (9af0e0d): 5 and 6 nodes unsupported, 4 and 8 supported; one node: the intranode kernels
    assert deepep.normal_mode_problem(40, "sglang") and deepep.normal_mode_problem(48, "sglang")
    assert deepep.normal_mode_problem(32, "sglang") is None and deepep.normal_mode_problem(64, "sglang") is None
    assert deepep.normal_mode_problem(8, "sglang") is None and deepep.normal_mode_problem(1, "sglang") is None
    assert deepep.normal_mode_problem(6, "sglang")                       # SWITCH_RANKS: 2, 4, 8
    assert deepep.normal_mode_problem(20, "sglang")                      # 20 % 8: not whole nodes
    # vLLM's image (73b6ea4) adds 3, 6, 12 nodes: 48 runs there, 40 (5 nodes) still not
    assert deepep.normal_mode_problem(48, "vllm") is None and deepep.normal_mode_problem(40, "vllm")
    assert deepep.nearest_eps(40, "sglang") == (32, 64) and deepep.nearest_eps(40, "vllm") == (32, 48)
    assert deepep.nearest_eps(72, "sglang") == (64, 128)
    assert deepep.normal_mode_problem(168, "vllm")                       # 21 nodes: past NUM_MAX_RDMA_PEERS 20


def _vllm(tmp_path, dp: int, backend: str) -> dict:
    nodes = dp // 8
    path = tmp_path / "launch.sh"
    path.write_text("".join(VLLM.format(dp=dp, backend=backend, nodes=nodes, rank=r) for r in range(nodes)))
    return check_launch_file(path, cluster="dgx-h100", gpus=dp)


def test_vllm_high_throughput_over_five_nodes_fails_low_latency_passes(tmp_path):
    rules = [v["rule"] for v in _vllm(tmp_path, 40, "deepep_high_throughput")["violations"]]
    assert "deepep_node_count" in rules
    bad = next(v for v in _vllm(tmp_path, 40, "deepep_high_throughput")["violations"] if v["rule"] == "deepep_node_count")
    assert "5 nodes" in bad["message"] and "ep 32 or 48" in bad["fix"]
    assert "deepep_node_count" not in [v["rule"] for v in _vllm(tmp_path, 40, "deepep_low_latency")["violations"]]
    assert "deepep_node_count" not in [v["rule"] for v in _vllm(tmp_path, 48, "deepep_high_throughput")["violations"]]


GLM45_EP40 = Path(__file__).parent / "data" / "configs" / "megatron" / "glm45_ep40_flex_deepep_320xh100.sh"


def test_megatron_flex_deepep_over_five_nodes_fails_check(tmp_path):
    """GLM-4.5 (160 experts) at ep 40 (etp 1) on 320 H100: Megatron-LM's flex dispatcher with the DeepEP backend
    builds its Buffer over the expert tp x ep group (token_dispatcher.py tp_ep_group), 40 ranks = 5 nodes, which the
    DeepEP Megatron's image builds (hybrid-ep branch: 2, 4, 8, 16, 18, 20 nodes) does not run; with alltoall: no error."""
    proc = cli_run.planner("check", str(GLM45_EP40), "-m", "glm-4.5", "-c", "dgx-h100", "--gpus", "320",
                           "--format", "json")
    bad = [v for v in json.loads(proc.stdout)["violations"] if v["rule"] == "deepep_node_count"]
    assert proc.returncode == 1 and len(bad) == 1, proc.stdout
    assert "5 nodes" in bad[0]["message"] and "ep 32 or 64" in bad[0]["fix"] and "alltoall" in bad[0]["fix"]
    path = tmp_path / "run.sh"
    path.write_text(GLM45_EP40.read_text().replace("--moe-token-dispatcher-type flex", "--moe-token-dispatcher-type "
                                                   "alltoall").replace("    --moe-flex-dispatcher-backend deepep \\\n", ""))
    proc = cli_run.planner("check", str(path), "-m", "glm-4.5", "-c", "dgx-h100", "--gpus", "320", "--format", "json")
    assert "deepep_node_count" not in [v["rule"] for v in json.loads(proc.stdout)["violations"]], proc.stdout


def test_plan_prices_alltoall_where_deepep_cannot_run():
    """A tuned plan picks flex when EP spans nodes (`overlap.tuned_dispatcher`), but not where the cluster's flex
    backend is DeepEP and the expert tp x ep group is a node count it does not run: ep 40 (5 nodes) -> alltoall,
    ep 32 (4 nodes) -> flex; HybridEP (NVL72 clusters) is not bound by this table."""
    from planner.placement.layout import Layout
    from planner.placement.overlap import tuned_dispatcher

    def chosen(ep: int, backend: str) -> str:
        return tuned_dispatcher(Layout(dp=ep, ep=ep, framework="megatron"), 8, backend).moe_dispatcher

    assert chosen(40, "deepep") == "alltoall" and chosen(32, "deepep") == "flex"
    assert chosen(40, "hybridep") == "flex" and chosen(40, None) == "flex"


def test_explain_flex_over_five_nodes_is_the_same_error():
    """`explain --moe-dispatcher flex` on an InfiniBand cluster (backend DeepEP) at ep 40 = 5 nodes: deepep_node_count;
    at ep 32 = 4 nodes: none."""
    def rules(ep: int) -> str:
        proc = cli_run.planner("explain", "-m", "glm-4.5", "-c", "dgx-h100", "--gpus", "320", "--tp", "2", "--pp", "4",
                               "--ep", str(ep), "--seq-len", "4096", "--sequence-parallel", "--moe-dispatcher", "flex")
        return proc.stdout + proc.stderr
    assert "deepep_node_count" in rules(40) and "deepep_node_count" not in rules(32)
