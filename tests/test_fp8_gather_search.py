"""`plan` searches Megatron-LM's `--fp8-param-gather` (issue 8; closing note 5): for fp8 candidates
under the distributed optimizer / Megatron-FSDP, with it off and on, where the request leaves it
(`plan._with_fp8_param_gather`, the rule check applies: `rules._fp8_param_gather`, Megatron-LM@d98e8a6
arguments.py l. 1095-1097); the chosen value is reported in the plan, written by `--emit megatron`
and read back by `check`.

The case: Megatron-LM's own examples/llama/train_llama3_8b_h100_fp8.sh layout (Llama 3.1 8B, 8 H100,
tp 1, ZeRO-1, b 1, s 8192, no recompute). With the fp8 parameter gather its linear weights are 1 B
fp8 parameters (+ 1 B transpose) where without it they are 2 B bf16 plus TE's 2 B fp8 workspace:
6.98e9 x 2 B = 13 GiB less (tests/test_fp8_memory.py), and the updated parameters are gathered in
1 B instead of 2.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.emit import checked
from planner.placement.layout import Layout
from planner.plan import _with_fp8_param_gather, plan, plan_file, plan_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

LLAMA8, H100 = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
PINS = {"tp": 1, "pp": 1, "zero_stage": 1, "recompute": "none", "micro_batch_size": 1}


def test_fp8_candidates_under_the_distributed_optimizer_get_both_values():
    fp8 = Layout(dp=8, zero_stage=1, precision="fp8", global_batch_size=8)
    assert [c.fp8_param_gather for c in _with_fp8_param_gather([fp8])] == [None, True]
    assert [c.fp8_param_gather for c in _with_fp8_param_gather([fp8.replace(zero_stage=3)])] == [None, True]
    for kept in (fp8.replace(zero_stage=0),                       # Megatron asserts a distributed optimizer
                 fp8.replace(precision="bf16"),                   # no effect without fp8
                 fp8.replace(framework="torchtitan"),             # not a torchtitan knob
                 fp8.replace(fp8_param_gather=False)):            # the request's own value
        assert _with_fp8_param_gather([kept]) == [kept]


@pytest.fixture(scope="module")
def searched():
    return plan(LLAMA8, H100, seq_len=8192, global_batch_size=64, framework="megatron", precision="fp8",
                fixed=PINS, headroom=0.0, top_k=1)


def test_plan_chooses_the_fp8_gather_where_it_is_faster_and_reports_it(searched):
    # without the gather the 8B does not fit at cp 1 or 2 (86.9 GiB at cp 1), nor at cp 4 without
    # activation offloading (0.3 GiB over; the search offloads only with a recipe's recompute list:
    # search.module_sets); cp 8 (1,024 tokens per rank, below what the search enumerates unless
    # pinned) does
    off = plan(LLAMA8, H100, seq_len=8192, global_batch_size=64, framework="megatron", precision="fp8",
               precision_knobs={"fp8_param_gather": False}, fixed={**PINS, "cp": 8}, headroom=0.0, top_k=1)
    best, without = searched["plans"][0], off["plans"][0]
    assert best["parallelism"]["fp8_param_gather"] is True
    assert "fp8_param_gather" not in without["parallelism"]
    assert best["time_s"]["step"] < without["time_s"]["step"]
    assert "fp8_param_gather" not in searched["request"]          # searched, not asked
    assert plan_layout(best, searched["request"]).fp8_param_gather is True


def test_searched_gather_is_emitted_and_read_back(searched):
    doc = plan_file(searched, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    emitted, verdict = checked(doc, "megatron")
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert "--fp8-param-gather" in emitted.text.split()


def test_plan_file_with_the_searched_gather_passes_check(searched, tmp_path):
    import yaml
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_file(searched, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")))
    result = CliRunner().invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    import json
    assert json.loads(result.output)["parallelism"].get("fp8_param_gather") is True
