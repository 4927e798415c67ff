"""`plan`, `explain` and `check` print one overlap label for one layout (review-fresh11 #8)."""

from __future__ import annotations

import json

from tests.cli_run import planner


def test_plan_and_check_print_one_overlap_label_for_a_torchtitan_layout(tmp_path):
    """`plan --framework torchtitan` printed `overlap tp-comm` and `check` of its emitted launch `overlap
    tp-comm,grad-reduce,param-gather` at the same step time: the plan file form leaves FSDP2's overlaps at
    torchtitan's default (absent), which is on (parameter prefetch and gradient reduce-scatter overlap
    the compute: `frameworks.torchtitan.overlap_defaults`). Both labels now come from
    `overlap.names_on`: the same layout, the same label."""
    from planner.report import layout_label

    run = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--framework", "torchtitan",
                  "--fix", "dp=2,tp=2,pp=2", "--emit", "torchtitan")
    assert run.returncode == 0, run.stderr
    script = tmp_path / "run_train.sh"
    script.write_text(run.stdout)
    checked = planner("check", str(script), "-c", "dgx-h100", "--format", "json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    check_par = json.loads(checked.stdout)["parallelism"]
    planned = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--framework", "torchtitan",
                      "--fix", "dp=2,tp=2,pp=2", "--format", "json")
    plan_par = json.loads(planned.stdout)["plans"][0]["parallelism"]
    assert plan_par["overlap"].get("overlap_grad_reduce") is None  # the plan file form: absent = default
    assert check_par["overlap"]["overlap_grad_reduce"] is True      # check: resolved
    label = layout_label(plan_par, "torchtitan")
    assert "overlap tp-comm,grad-reduce,param-gather · compile" in label
    assert layout_label(check_par).split(" · overlap ")[1] == label.split(" · overlap ")[1]
    table = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--framework", "torchtitan",
                    "--fix", "dp=2,tp=2,pp=2")
    assert "overlap tp-comm,grad-reduce,param-gather · compile" in table.stdout


def test_overlap_names_on_resolve_absent_knobs_to_the_frameworks_default():
    """Exact: Megatron-LM switches none on by default; torchtitan's FSDP2 overlaps both DP collectives;
    a knob given keeps its value; with no framework only what is given."""
    from planner.placement import overlap

    assert overlap.names_on({}, "megatron", 1) == []
    assert overlap.names_on({}, "torchtitan", 3) == ["grad-reduce", "param-gather"]
    assert overlap.names_on({"overlap_param_gather": False}, "torchtitan", 3) == ["grad-reduce"]
    assert overlap.names_on({"tp_comm_overlap": True}, None, 3) == ["tp-comm"]
