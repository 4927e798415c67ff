"""MoE plans and explain say their expert load is taken as balanced (senior review 11 finding 6).

The MoE costs route tokens uniformly (`cost.comm.expected_distinct_bins`), and the published runs
they are checked against force that with random router logits (Megatron-Bridge@067f987
perf_recipes/qwen/h100/qwen3_moe.py l. 39, gpt_oss/h100/gpt_oss.py l. 30:
`moe_router_force_load_balancing`); a trained router is slower by the busiest EP rank's excess.
The output must say so under the step times, for MoE models only."""

from __future__ import annotations

import json

from tests.cli_run import planner

NOTE = "expert load taken as balanced"
MOE_EXPLAIN = ("explain", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--gpus", "64", "--tp", "2", "--ep", "8",
               "--pp", "2", "--sequence-parallel", "--zero-stage", "1")


def test_moe_explain_prints_the_balanced_routing_note():
    out = planner(*MOE_EXPLAIN)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert f"note {NOTE}" in text
    assert "imbalance f" in text and "by about f" in text and "lower bound" in text


def test_moe_explain_json_carries_the_assumption():
    out = planner(*MOE_EXPLAIN, "--format", "json")
    data = json.loads(out.stdout)
    assert len(data["assumptions"]) == 1 and data["assumptions"][0].startswith(NOTE)


def test_dense_explain_has_no_routing_note():
    out = planner("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--zero-stage", "1",
                  "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["time_s"]["step"] > 0 and data["assumptions"] == []


def test_moe_plan_prints_the_balanced_routing_note():
    out = planner("plan", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "--gpus", "8", "--top", "1")
    assert out.returncode == 0, out.stderr
    assert f"note {NOTE}" in " ".join(out.stdout.split())
