"""explain(): the JSON shape of issue 3 part 5, consistent with its parts."""

import json

from planner.explain import explain
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model


def test_explain_shape_and_consistency():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    r = explain(model, cluster, Layout(dp=2, tp=2, pp=2, zero_stage=1, sequence_parallel=True,
                                       global_batch_size=8, seq_len=4096, recompute="selective"))
    json.dumps(r)   # serialisable
    assert set(r) >= {"parallelism", "placement", "memory_bytes", "memory_verdict",
                      "communication_bytes_per_step", "violations", "details"}
    mem = r["memory_bytes"]
    assert set(mem) == {"parameters", "gradients", "optimizer_states", "activations", "transient",
                        "reserve", "total", "capacity"}
    assert mem["total"] == sum(mem[k] for k in mem if k not in ("total", "capacity"))
    assert mem["capacity"] == cluster.gpu.memory_bytes
    assert r["memory_verdict"] in ("fits", "at_risk", "does_not_fit")
    assert r["placement"]["optimizer_states"]["dp"] == "sharded"
    assert r["placement"]["activations"]["tp"] == "sharded"
    assert set(r["communication_bytes_per_step"]) == {"dp", "tp", "pp"}
    assert r["violations"] == []
    total = sum(c["total_bytes_per_device"] for c in r["details"]["collectives"])
    assert total == sum(r["communication_bytes_per_step"].values())


def test_explain_reports_violations():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    r = explain(model, cluster, Layout(tp=3, dp=2))
    rules = {v["rule"] for v in r["violations"]}
    assert {"heads_divisible_by_tp", "world_size"} <= rules
    assert all(set(v) >= {"rule", "message"} for v in r["violations"])


def test_layout_that_overflows_memory_names_the_rule_numbers_and_fix():
    """Fresh-user defect: explain said DOES NOT FIT but listed no rule and still printed a step
    time. Llama-3.1-70B, dp8 tp8 ZeRO-0: Adam's fp32 master, m and v = 12 B x 70.55e9 / 8
    parameters = 1.058e11 B = 98.6 GiB of optimizer states alone per GPU, over 80 GB."""
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=64)
    data = explain(model, cluster, Layout(dp=8, tp=8, global_batch_size=64))
    (v,) = [v for v in data["violations"] if v["rule"] == "memory_exceeds"]
    assert v["severity"] == "error" and "optimizer states, 98.6 GiB" in v["message"]
    assert "planner plan" in v["fix"]
    assert data["memory_verdict"] == "does_not_fit" and data["time_s"] is None
