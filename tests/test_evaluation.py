"""The evaluation record (`planner.evaluation.Evaluation`) that plan, explain and check build once:
the three commands report the same numbers for the same layout, and the record's verdicts follow
its violations. The plan is the oracle for explain and check here only in the sense that all
three must agree: each number itself is tested against published / hand values elsewhere
(tests/test_step_time.py, tests/test_memory.py, tests/test_zero_table1.py)."""

from __future__ import annotations

import pytest

from planner import plan as plan_api
from planner.check.gate import Target, evaluate
from planner.cost.memory import stage_memory
from planner.evaluation import Evaluation, cost_stages, layer_modes, stage_modes
from planner.explain import explain
from planner.placement.layout import Layout
from planner.placement.rules import Violation
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

MODEL = load_model("llama-3.1-70b")
CLUSTER = load_cluster("dgx-h100", gpus=64)


@pytest.fixture(scope="module")
def planned():
    data = plan_api.plan(MODEL, CLUSTER, seq_len=4096, global_batch_size=256, top_k=1)
    entry = data["plans"][0]
    return entry, plan_api.plan_layout(entry, data["request"])


def _counts(entry) -> tuple[dict[str, int], ...] | None:
    rec = entry["parallelism"]["recompute"]
    return None if isinstance(rec, str) else tuple(rec)


def test_plan_explain_and_check_report_one_record(planned):
    entry, layout = planned
    counts = _counts(entry)
    ex = explain(MODEL, CLUSTER, layout, recompute_per_stage=counts)
    ck = evaluate(Target(file="p.yaml", kind="training-plan", model=MODEL, cluster=CLUSTER,
                         layout=layout, recompute_per_stage=counts))
    memory = {k: v for k, v in entry["memory_bytes"].items() if k != "stage"}
    assert ex["memory_bytes"] == memory
    assert ck["memory_bytes"] == entry["memory_bytes"]
    assert ex["memory_verdict"] == ck["memory_verdict"] == entry["memory_verdict"]
    assert ex["communication_bytes_per_step"] == entry["communication_bytes_per_step"]
    assert ck["time_s"] == entry["time_s"]
    assert {k: ex["time_s"][k] for k in entry["time_s"]} == entry["time_s"]
    assert ex["time_s"]["mfu"] == ck["mfu"] == entry["mfu"]
    assert ex["time_s"]["tokens_per_s"] == ck["tokens_per_s"] == entry["tokens_per_s"]
    assert ck["verdict"] == "pass"


def test_record_verdicts_follow_violations_and_stages():
    layout = Layout(tp=8, dp=8, global_batch_size=64)
    stages = cost_stages(MODEL, CLUSTER, layout)
    record = Evaluation(layout=layout, stages=stages)
    assert record.verdict == "pass"
    # one stage (pp 1): the record's memory is that stage's, every term
    direct = stage_memory(MODEL, CLUSTER, layout, 0)
    assert record.memory_bytes() == {"parameters": direct.parameters, "gradients": direct.gradients,
                                     "optimizer_states": direct.optimizer_states,
                                     "activations": direct.activations, "transient": direct.transient,
                                     "reserve": direct.reserve, "total": direct.total,
                                     "capacity": direct.capacity, "stage": 0}
    assert record.time_s() is None and record.communication_bytes_per_step() == {}
    warned = Evaluation(layout=layout, violations=(Violation(rule="r", message="m", fix="",
                                                             severity="warning"),))
    assert warned.verdict == "pass" and warned.memory_verdict == "not_costed"
    failed = Evaluation(layout=layout, violations=(Violation(rule="r", message="m", fix=""),))
    assert failed.verdict == "fail"
    assert failed.memory_bytes() is None


def test_layer_modes_give_each_stage_full_then_selective_then_none():
    assert layer_modes(({"none": 1, "full": 2}, {"selective": 1, "none": 1}),
                       ((0, 1, 2), (3, 4))) == ("full", "full", "none", "selective", "none")


def test_layer_modes_follow_each_stage_s_own_layers_under_interleaving():
    # pp=2, vpp=2, 8 layers: rank 0 holds chunks 0 and 2 (layers 0, 1, 4, 5), rank 1 chunks 1
    # and 3 (layers 2, 3, 6, 7); rank 0 recomputes 1 layer fully, rank 1 none -> only layer 0
    modes = layer_modes(({"none": 3, "full": 1}, {"none": 4}), ((0, 1, 4, 5), (2, 3, 6, 7)))
    assert modes == ("full",) + ("none",) * 7
    # and stage_modes inverts it: each stage's layers ranked full first, with their counts
    assert list(stage_modes(((0, 1, 4, 5), (2, 3, 6, 7)), ("none", "none", "none", "none",
                                                            "full", "none", "none", "none"))) == [
        ((4, 0, 1, 5), {"none": 3, "selective": 0, "full": 1}),
        ((2, 3, 6, 7), {"none": 4, "selective": 0, "full": 0})]
