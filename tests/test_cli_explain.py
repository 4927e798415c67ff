"""`planner explain` through typer's CliRunner: formats, exit codes, and the ZeRO headline."""

import json

import yaml
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
BASE = ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8"]


def _run(*args: str):
    return runner.invoke(app, [*BASE, *args])


def test_table_shows_placement_memory_and_communication():
    result = _run("--zero-stage", "1")
    assert result.exit_code == 0, result.output
    for text in ("placement", "optimizer_states", "memory per GPU", "capacity", "communication"):
        assert text in result.output


def test_json_has_the_issue_keys():
    result = _run("--zero-stage", "3", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) >= {"parallelism", "placement", "memory_bytes", "memory_verdict",
                         "communication_bytes_per_step", "violations"}
    assert set(data["memory_bytes"]) >= {"parameters", "gradients", "optimizer_states", "activations",
                                         "transient", "reserve", "total", "capacity"}
    assert data["parallelism"]["dp"] == 8  # derived from --gpus 8 at tp = pp = cp = 1
    assert data["placement"]["parameters"]["dp"] == "sharded_with_gather"


def test_yaml_parses():
    result = _run("--zero-stage", "1", "--format", "yaml")
    assert result.exit_code == 0
    assert yaml.safe_load(result.output)["memory_verdict"] in ("fits", "at_risk", "does_not_fit")


def test_zero3_is_8x_less_model_state_memory_at_1_5x_communication():
    """ZeRO (Rajbhandari et al. 2020) §5 / Table 1 at N = 8 under ZeRO's precision convention
    (DeepSpeed: 2 B params, 2 B grads, 12 B Adam): DP 16Ψ vs ZeRO-3 16Ψ/8 -> 8x; communication 2Ψ vs 3Ψ."""
    def state_and_comm(stage: str):
        out = json.loads(_run("--framework", "deepspeed", "--zero-stage", stage, "--format", "json").output)
        mem = out["memory_bytes"]
        return mem["parameters"] + mem["gradients"] + mem["optimizer_states"], out["communication_bytes_per_step"]["dp"]
    dp_mem, dp_comm = state_and_comm("0")
    z3_mem, z3_comm = state_and_comm("3")
    assert round(dp_mem / z3_mem, 3) == 8.0
    assert round(z3_comm / dp_comm, 3) == 1.5


def test_violation_exits_1_and_names_the_numbers():
    # 32 heads are not divisible by tp = 3 (field case FC-05's kind).
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--tp", "3"])
    assert result.exit_code == 1
    assert "32" in result.output and "3" in result.output


def test_layout_that_does_not_fit_exits_1():
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "8"])
    assert result.exit_code == 1
    assert "DOES NOT FIT" in result.output


def test_bad_inputs_exit_2_without_traceback():
    for args in (["--recompute", "sometimes"], ["--tp", "0"], ["--zero-stage", "4"], ["--format", "xml"]):
        result = _run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-7b", "-c", "dgx-h100"])
    assert result.exit_code == 2 and "llama-3.1-8b" in result.output


def test_rule_that_makes_costing_undefined_is_a_violation_not_a_crash():
    # cp=3 does not divide seq 4096: the layout is reported (exit 1) with the rule, memory not costed.
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                                 "--cp", "3", "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["memory_verdict"] == "not_costed"
    assert "sequence_divisible" in {v["rule"] for v in data["violations"]}


def test_without_gpus_the_cluster_keeps_its_size_and_dp_fills_it():
    data = json.loads(runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--tp", "2",
                                          "--zero-stage", "1", "--format", "json"]).output)
    assert data["gpus"] == 8 and data["parallelism"]["dp"] == 4  # one DGX H100 node: 8 / tp 2


def test_user_text_is_not_rich_markup(tmp_path):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("name: '[/bold] x [red]y[/red]'\nmodel_type: llama\nhidden_size: 64\nintermediate_size: 128\n"
                   "num_hidden_layers: 2\nnum_attention_heads: 4\nnum_key_value_heads: 2\nvocab_size: 100\n"
                   "max_position_embeddings: 64\n")
    result = runner.invoke(app, ["explain", "-m", str(cfg), "-c", "dgx-h100", "--gpus", "8", "--seq-len", "64"])
    assert result.exit_code == 0, result.output
    assert "[/bold] x [red]y[/red]" in result.output


def test_sequence_beyond_the_models_context_is_flagged():
    data = json.loads(runner.invoke(app, ["explain", "-m", "gpt-3-175b", "-c", "dgx-a100-80g", "--gpus", "64",
                                          "--tp", "8", "--pp", "8", "--seq-len", "4096", "--recompute", "full",
                                          "--format", "json"]).output)
    note = next(v for v in data["violations"] if v["rule"] == "seq_len_beyond_context")
    assert note["severity"] == "warning" and "2,048" in note["message"]


def test_valid_layout_reports_the_step_time_plan_would():
    from planner.cost.step_time import step_time
    from planner.placement.layout import Layout
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    data = json.loads(_run("--zero-stage", "1", "--format", "json").output)
    expected = step_time(load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8),
                         Layout(dp=8, zero_stage=1, global_batch_size=8)).step
    assert data["time_s"]["step"] == expected and 0 < data["time_s"]["mfu"] < 1
    broken = json.loads(runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--tp", "3",
                                            "--format", "json"]).output)
    assert broken["time_s"] is None


def test_explain_reproduces_a_plan_with_per_stage_recompute():
    """Expert-review finding: the plan's per-stage recompute mix (e.g. 17n/2f, 20n, 21n, 20n) could
    not be given to explain, so the chosen layout was not explainable exactly. With
    --recompute-per-stage it is: the same step time and the same fullest-stage memory."""
    import pytest

    from planner import plan as P
    from planner.cli import app
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    from planner.placement.overlap import NAMES

    # pinned to a mesh whose best plan mixes recompute per stage (dp2 tp2 pp4 cp4)
    data = P.plan(load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=64), seq_len=4096,
                  global_batch_size=1024, top_k=1, fixed={"tp": 2, "pp": 4, "cp": 4, "zero_stage": 1})
    par = data["plans"][0]["parallelism"]
    assert not isinstance(par["recompute"], str)  # the case: a per-stage mix
    text = ",".join("/".join(f"{n}{m[0]}" for m, n in c.items() if n) for c in par["recompute"])
    args = ["explain", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64",
            "--tp", str(par["tp"]), "--pp", str(par["pp"]), "--cp", str(par["cp"]),
            "--zero-stage", str(par["zero_stage"]), "--micro-batch-size", str(par["micro_batch_size"]),
            "--global-batch-size", "1024", "--pipeline-layers", ",".join(map(str, par["pipeline_layers"])),
            "--recompute-per-stage", text, "--format", "json"]
    if par["sequence_parallel"]:
        args.append("--sequence-parallel")
    for name, knob in NAMES.items():   # the overlaps the plan switched on
        if knob in par["overlap"]:
            args += ["--overlap", f"{name}={'on' if par['overlap'][knob] else 'off'}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["time_s"]["step"] == pytest.approx(data["plans"][0]["time_s"]["step"], rel=1e-12)
    assert out["memory_bytes"]["total"] == data["plans"][0]["memory_bytes"]["total"]
    assert out["parallelism"]["recompute"] == par["recompute"]


def test_recompute_and_recompute_per_stage_together_is_bad_input():
    """Fresh-user defect: `--recompute full --recompute-per-stage 20n,20n,20n,20n` silently
    dropped --recompute full; the two contradict (each gives every layer's mode)."""
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64",
                                 "--tp", "8", "--pp", "4", "--recompute", "full",
                                 "--recompute-per-stage", "20n,20n,20n,20n"])
    assert result.exit_code == 2
    assert result.output.strip().startswith(
        "error: --recompute: value 'full' contradicts --recompute-per-stage '20n,20n,20n,20n'")


def test_memory_fix_is_offered_when_another_rule_is_also_broken():
    """Fresh-user defect: `--pp 2 --vpp 3` (32 layers, not divisible into 6 virtual stages) said
    "no single change ... fits", though without --vpp ZeRO-1 fits: every change was refused for
    still breaking layers_divisible_by_pp, the rule the layout itself breaks. Now a change is
    refused only for a rule it newly breaks, and the fix says to fix the layout's rule first.
    By hand: ZeRO-1 shards the optimizer states over dp = 8 / 2 = 4, keeping a quarter: the
    stage's total less 3/4 of them."""
    result = _run("--pp", "2", "--vpp", "3", "--format", "json")
    data = json.loads(result.output)
    found = {v["rule"]: v for v in data["violations"]}
    assert "layers_divisible_by_pp" in found
    fix = found["memory_exceeds"]["fix"]
    assert fix.startswith("first fix layers_divisible_by_pp")
    gib = 2**30
    memory = data["memory_bytes"]
    zero1 = (memory["total"] - 3 / 4 * memory["optimizer_states"]) / gib
    assert f"zero_stage 1 ({zero1:.1f} GiB)" in fix


def test_tp_comm_overlap_without_sequence_parallel_is_the_rule_check_applies():
    """review-fresh5 #2: Megatron-LM asserts sequence parallelism under --tp-comm-overlap
    (arguments.py validate_args); explain states the same error `check` gives a script with the
    flags (one placement rule), exit 1, naming the fix -- not an overlap it records but does not cost."""
    result = _run("--tp", "8", "--overlap", "tp-comm=on", "--format", "json")
    assert result.exit_code == 1, result.output
    rows = {v["rule"]: v for v in json.loads(result.output)["violations"]}
    assert rows["tp_comm_overlap_needs_sp"]["severity"] == "error"
    assert "--sequence-parallel" in rows["tp_comm_overlap_needs_sp"]["fix"]
    ok = _run("--tp", "8", "--sequence-parallel", "--overlap", "tp-comm=on", "--format", "json")
    assert ok.exit_code == 0, ok.output
    assert "tp_comm_overlap_needs_sp" not in {v["rule"] for v in json.loads(ok.output)["violations"]}


def test_contradicting_overlap_options_are_bad_input():
    """review-fresh5 #7: `--overlap tp-comm=on --overlap tp-comm=off` is a contradiction, bad input
    naming both (as a repeated --tp is), not the last one silently winning; a repeat that agrees
    and different names still pass."""
    result = _run("--tp", "8", "--sequence-parallel", "--overlap", "tp-comm=on", "--overlap", "tp-comm=off")
    assert result.exit_code == 2, result.output
    assert "tp-comm=on" in result.output and "tp-comm=off" in result.output
    assert "Traceback" not in result.output
    fine = _run("--tp", "8", "--sequence-parallel", "--overlap", "tp-comm=on", "--overlap", "grad-reduce=off")
    assert fine.exit_code == 0, fine.output


# ---------------------------------------------------------------- review leftovers (issue 11)

def test_explain_header_lists_the_overlaps_on():
    """The explain header names the overlaps as `plan` and `check` do (fresh-user review #12): tp-comm with SP."""
    from typer.testing import CliRunner as _Runner

    from planner.cli import app as _app
    args = ["explain", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64", "--tp", "8", "--pp", "8"]
    on = _Runner().invoke(_app, [*args, "--sequence-parallel", "--overlap", "tp-comm=on"])
    off = _Runner().invoke(_app, args)
    assert on.exit_code == 0 and off.exit_code == 0
    header = lambda r: " ".join(r.output.split("conventions")[0].split())  # noqa: E731 (wrapped or not)
    assert "recompute none · overlap tp-comm megatron" in header(on)
    assert "overlap" not in header(off)


def test_training_an_int4_checkpoint_says_so():
    """Qwen/Qwen3-32B-AWQ is qwen3-32b with AWQ int4 weights (planner.specs.hf_ids); a training command plans
    16-bit weights and says it in one note (fresh-user review #12), never silently."""
    from typer.testing import CliRunner as _Runner

    from planner.cli import app as _app
    result = _Runner().invoke(_app, ["explain", "-m", "Qwen/Qwen3-32B-AWQ", "-c", "dgx-h100", "--gpus", "8",
                                     "--tp", "8"])
    assert result.exit_code in (0, 1)  # the note comes first, whatever the layout's verdict
    text = " ".join(result.output.split())
    assert "note: qwen3-32b-awq is an int4 checkpoint" in text and "16-bit weights" in text
    plain = _Runner().invoke(_app, ["explain", "-m", "qwen3-32b", "-c", "dgx-h100", "--gpus", "8", "--tp", "8"])
    assert "int4 checkpoint" not in plain.output
