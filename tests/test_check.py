"""`planner check` on plan files: the file `plan -o` writes passes unchanged; edits that break a
rule, overflow memory or contradict themselves fail (exit 1) naming the rule, the numbers and a
fix; malformed files are bad input (exit 2, one line naming the file and the key)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory):
    """A plan file of llama-3.1-70b on 64 H100s written by `plan -o`, pinned to dp2 tp2 pp4 cp4
    ZeRO-1 (its split 19/20/21/20 with per-stage recompute is what the tests below edit)."""
    path = tmp_path_factory.mktemp("plan") / "plan.yaml"
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64",
                                 "--fix", "tp=2", "--fix", "pp=4", "--fix", "cp=4",
                                 "--fix", "zero_stage=1", "--format", "json", "-o", str(path)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(path.read_text())
    doc["request"]["fixed"] = {}   # the tests edit the degrees: a file that pins none of them
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, doc


def _write(tmp_path, doc, name="edited.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _check(path, *extra):
    return runner.invoke(app, ["check", str(path), *extra])


def test_plan_file_passes_unchanged_with_its_own_prediction(plan_doc):
    path, doc = plan_doc
    result = _check(path, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["verdict"] == "pass" and data["kind"] == "training-plan"
    assert not [v for v in data["violations"] if v["severity"] == "error"]
    # Recomputed, not copied: the step time and the fullest stage equal the file's prediction.
    assert data["time_s"]["step"] == pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-9)
    assert data["memory_bytes"]["total"] == doc["predicted"]["memory_bytes"]["total"]
    assert [row["layers"] for row in data["stages"]] == doc["plan"]["parallelism"]["pipeline_layers"]
    assert all(row["verdict"] == "fits" for row in data["stages"])


def test_table_output_names_the_verdict_and_every_stage(plan_doc):
    path, doc = plan_doc
    result = _check(path)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("PASS")
    assert "memory per GPU by pipeline stage" in result.output


def test_memory_overflow_fails_naming_stage_numbers_and_fix(plan_doc, tmp_path):
    """dp=64 tp=1 pp=1 ZeRO-0: every GPU holds all of Llama-3.1-70B's 70.55e9 parameters' states,
    18 B each under Megatron (bf16 weight 2 + fp32 main grad 4 + fp32 master, m, v 12) =
    1.27e12 B = 1,182 GiB of states alone, far over 80 GB."""
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    par = doc["plan"]["parallelism"]
    par.update(dp=64, tp=1, pp=1, cp=1, zero_stage=0, sequence_parallel=False, recompute="full",
               pipeline_layers=[80], num_microbatches=16, overlap={})
    result = _check(_write(tmp_path, doc), "--format", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    (over,) = [v for v in data["violations"] if v["rule"] == "memory_exceeds"]
    capacity = data["memory_bytes"]["capacity"] / 2**30  # the catalog's H100 SXM5 (79.6 GiB)
    assert "pipeline stage 0 needs" in over["message"] and f"of {capacity:.1f} GiB" in over["message"]
    gib = data["memory_bytes"]["total"] / 2**30
    assert 1150 < gib < 1250
    # Per GPU, 70.55e9 params: ZeRO-1 keeps 2 + 4 + 12/64 = 6.19 B/param (407 GiB), ZeRO-2
    # 2 + 16/64 = 2.25 B/param (148 GiB): neither fits; ZeRO-3 shards all 18 B over dp=64:
    # 19.8 GB = 18.5 GiB of states, which fits. Every higher stage is tried, not only the next.
    assert over["fix"].startswith("any of: zero_stage 3 (") and "planner plan" in over["fix"]
    assert "zero_stage 1" not in over["fix"] and "zero_stage 2" not in over["fix"]
    assert data["verdict"] == "fail" and data["time_s"] is None


def test_memory_fix_lists_the_single_changes_that_fit(tmp_path):
    """The shipped failing example: TP8 x DP8, one stage, no recompute, micro-batch 2. Megatron's
    fp32 main gradients of 70.55e9 / 8 parameters are 4 B x 8.82e9 = 32.9 GiB per GPU; ZeRO-2
    shards them over dp=8, leaving 1/8: the stage total drops by 7/8 x 32.9 = 28.8 GiB."""
    result = _check("examples/llama-3.1-70b-64xh100-tp8.plan.yaml", "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    (over,) = [v for v in data["violations"] if v["rule"] == "memory_exceeds"]
    mem = data["memory_bytes"]
    assert mem["gradients"] / 2**30 == pytest.approx(4 * 70_553_706_496 / 8 / 2**30, rel=0.01)
    after = (mem["total"] - 7 / 8 * mem["gradients"]) / 2**30
    assert f"zero_stage 2 ({after:.1f} GiB, " in over["fix"]
    assert "recompute full (" in over["fix"]
    # half the micro-batch halves the activations but stays inside the 10% at-risk margin: offered
    # for a stage that does not fit, marked at risk (review-senior5 M5), with the plan file's
    # micro-batches per step it implies, 1024 / (dp 8 x 1) = 128
    assert "micro_batch_size 1 with num_microbatches 128 (" in over["fix"]
    assert over["fix"].split("micro_batch_size 1 with num_microbatches 128 (")[1].split(",")[1] == " at risk"
    # each with its step time, the cheapest first (the README's promise)
    times = [float(t.replace(",", "")) for t in re.findall(r"([\d,]+\.\d+) s/step\)", over["fix"])]
    assert len(times) == 4 and times == sorted(times)


def test_rule_violation_fails_with_the_rule_and_its_numbers(plan_doc, tmp_path):
    """FC-05 kind: tp=3 does not divide Llama-3.1-70B's 64 attention heads."""
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    pp = doc["plan"]["parallelism"]["pp"]   # kept: the per-stage split and recompute stay valid
    doc["plan"]["parallelism"].update(dp=2, tp=3, cp=1)
    doc["gpus"] = 2 * 3 * pp
    result = _check(_write(tmp_path, doc))
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert text.startswith("FAIL") and "heads_divisible_by_tp" in text and "64" in text


def test_world_size_mismatch_prints_both_numbers(plan_doc, tmp_path):
    """FC-13: the degrees multiply to 64 (dp x tp x pp x cp of the plan); the file asks for 128 GPUs."""
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    doc["gpus"] = 128
    result = _check(_write(tmp_path, doc), "--format", "json")
    assert result.exit_code == 1
    (v,) = [v for v in json.loads(result.output)["violations"] if v["rule"] == "world_size"]
    assert "64" in v["message"] and "128" in v["message"]


def test_inconsistent_counts_fail_as_plan_consistency(plan_doc, tmp_path):
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    par = doc["plan"]["parallelism"]
    par["num_microbatches"] = 7
    par["recompute"][1] = {"none": 3, "selective": 0, "full": 0}
    result = _check(_write(tmp_path, doc), "--format", "json")
    assert result.exit_code == 1
    found = [v for v in json.loads(result.output)["violations"] if v["rule"] == "plan_consistency"]
    messages = " ".join(v["message"] for v in found)
    # 1024 sequences / (dp x b 1) micro-batches; stage 1 holds the plan's split, not 3 layers.
    assert par["dp"] * par["tp"] * par["pp"] * par["cp"] == 64 and par["micro_batch_size"] == 1
    assert "num_microbatches=7" in messages and str(1024 // par["dp"]) in messages
    stage1 = par["pipeline_layers"][1]
    assert "stage 1" in messages and "cover 3 layers" in messages and f"gives it {stage1}" in messages


def test_stale_prediction_and_at_risk_are_warnings_that_pass(plan_doc, tmp_path):
    """The fullest stage of the file's plan fills ~90% of the GPU; a 50% at-risk margin (request
    headroom) puts every stage inside it: warnings, not failures. An edited predicted step time
    is reported stale."""
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    doc["request"]["headroom"] = 0.5
    doc["predicted"]["time_s"]["step"] *= 2
    result = _check(_write(tmp_path, doc), "--format", "json")
    assert result.exit_code == 0, result.output
    rules = {v["rule"]: v["severity"] for v in json.loads(result.output)["violations"]}
    # the fixture's pinned cp4 at 4,096 tokens (1,024 per rank) is warned about too
    assert rules == {"memory_at_risk": "warning", "prediction_stale": "warning",
                     "cp_short_sequence": "warning"}


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["plan"]["parallelism"].pop("tp"), "plan.parallelism.tp"),
    (lambda d: d["plan"]["parallelism"].update(tp="eight"), "plan.parallelism.tp"),
    (lambda d: d["plan"]["parallelism"].update(zero_stage=5), "plan.parallelism.zero_stage"),
    (lambda d: d["plan"]["parallelism"].update(recompute="sometimes"), "plan.parallelism.recompute"),
    (lambda d: d["plan"]["parallelism"].update(sequence_parallel="yes"), "plan.parallelism.sequence_parallel"),
    (lambda d: d["request"].update(precision="fp4"), "precision"),
    (lambda d: d["request"].update(headroom=2), "request.headroom"),
    (lambda d: d.update(kind="serving-plan"), "kind"),
    (lambda d: d.update(version=9), "version"),
    (lambda d: d.update(model="llama-9"), "llama-9"),
    (lambda d: d.pop("request"), "request"),
    (lambda d: d["plan"]["parallelism"].update(tensor_parallel=8), "plan.parallelism.tensor_parallel"),
    (lambda d: d["plan"]["parallelism"].pop("sequence_parallel"), "plan.parallelism.sequence_parallel"),
    (lambda d: d["request"].update(precision="fp32"), "request.precision"),
    (lambda d: d.update(gpus=63), "gpus: value 63"),
])
def test_malformed_plan_files_are_bad_input(plan_doc, tmp_path, edit, key):
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    edit(doc)
    path = _write(tmp_path, doc)
    result = _check(path)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output
    assert key in lines[0]
    assert lines[0].startswith(f"error: {path}: ")


def test_files_that_are_not_plans_are_bad_input(tmp_path):
    model = "tests/data/models/tiny.yaml"
    result = _check(model)
    assert result.exit_code == 2 and "plan file" in result.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: training-plan\nplan: [\n")
    result = _check(broken)
    assert result.exit_code == 2 and "YAML syntax error" in result.output
    result = _check(tmp_path / "absent.yaml")
    assert result.exit_code == 2 and "absent.yaml" in result.output


def test_model_and_cluster_paths_are_found_beside_the_plan_file(tmp_path, monkeypatch):
    """A plan of a model and cluster given as files records them relative to the plan file, so
    `check` loads them from any working directory."""
    from pathlib import Path

    root = Path.cwd()
    out = tmp_path / "plans" / "p.yaml"
    out.parent.mkdir()
    result = runner.invoke(app, ["plan", "-m", "tests/data/models/tiny.yaml", "-c",
                                 "tests/data/clusters/custom-pcie.yaml", "--gpus", "4",
                                 "--format", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text())
    assert not Path(doc["model"]).is_absolute()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["check", str(out.relative_to(tmp_path))])
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(root)


def test_memory_fixes_are_spelled_in_the_checked_frameworks_own_flags(tmp_path):
    """A Megatron-LM script's memory fix names Megatron flags, not planner's knobs: Megatron-LM's
    Llama 3 8B H100 example at TP1 without its --fp8-param-gather (91.7 GiB: TE's 13 GiB fp8
    weight workspace) fits with full recompute or Megatron-FSDP."""
    path = tmp_path / "no_fp8_param_gather.sh"
    text = Path("tests/data/configs/megatron/llama3_8b_h100_fp8.sh").read_text()
    assert '"--fp8-param-gather"' in text
    path.write_text(text.replace('"--fp8-param-gather"', ""))
    result = _check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b", "--format", "json")
    assert result.exit_code == 1
    (over,) = [v for v in json.loads(result.output)["violations"] if v["rule"] == "memory_exceeds"]
    assert "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" in over["fix"]
    assert "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params" in over["fix"]
    assert "zero_stage" not in over["fix"] and "recompute full (" not in over["fix"]


def test_megatron_zero0_oom_offers_the_distributed_optimizer_first(tmp_path):
    """review-senior5 M5: Llama-3.1-70B at TP8 x DP8 (64 H100), no --use-distributed-optimizer:
    every GPU holds the fp32 master weights, Adam m and v of its 70.55e9 / 8 parameters (12 B
    each, 98.6 GiB). Megatron's distributed optimizer (ZeRO-1) shards them over dp 8, so the stage
    total drops by 7/8 of the optimizer term -- to about 74.5 GiB, inside the 10% at-risk margin
    of 79.6 GiB (over 71.7): listed first, marked at risk, before Megatron-FSDP's stages."""
    script = tmp_path / "llama70b_zero0.sh"
    script.write_text(
        "torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \\\n"
        "  --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 \\\n"
        "  --group-query-attention --num-query-groups 8 --seq-length 4096 \\\n"
        "  --max-position-embeddings 131072 --position-embedding-type rope --rotary-base 500000 \\\n"
        "  --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights \\\n"
        "  --disable-bias-linear --tensor-model-parallel-size 8 --sequence-parallel \\\n"
        "  --micro-batch-size 1 --global-batch-size 512 --bf16 --use-flash-attn\n")
    result = _check(str(script), "--cluster", "dgx-h100", "--model", "llama-3.1-70b", "--format", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    (over,) = [v for v in data["violations"] if v["rule"] == "memory_exceeds"]
    mem = data["memory_bytes"]
    assert mem["optimizer_states"] / 2**30 == pytest.approx(12 * 70_553_706_496 / 8 / 2**30, rel=0.01)
    after = (mem["total"] - 7 / 8 * mem["optimizer_states"]) / 2**30
    assert 0.9 * 79.65 < after < 79.65  # inside the at-risk margin: at risk, not over
    assert over["fix"].startswith(f"any of: --use-distributed-optimizer ({after:.1f} GiB, at risk, ")
    assert over["fix"].index("--use-distributed-optimizer") < over["fix"].index("--use-megatron-fsdp")


def test_framework_config_values_beyond_the_planners_limits_are_bad_input(tmp_path):
    """Fresh-user defect: `--global-batch-size 1e20` in a Megatron script passed with a
    1.1e19-second step. 1e20 sequences x 4,096 tokens is far over the 2**34-token cap `plan` has."""
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py "
                      "--tensor-model-parallel-size 2 --micro-batch-size 1 "
                      "--global-batch-size 100000000000000000000 --seq-length 4096 --bf16\n")
    result = _check(script, "--model", "llama-3.1-8b", "--cluster", "dgx-h100")
    assert result.exit_code == 2
    assert f"{script}: global batch (tokens): value" in result.output
    assert "17,179,869,184" in result.output


@pytest.mark.parametrize(("source", "name", "kind"), [
    ("tests/data/configs/torchtitan/llama3_8b.toml", "job.sh", "torchtitan-config"),
    ("tests/data/configs/deepspeed/zero2_bf16.json", "ds_config.yaml", "deepspeed-config"),
    ("tests/data/configs/deepspeed/zero2_bf16.json", "ds_config.txt", "deepspeed-config"),
])
def test_config_saved_under_another_suffix_is_read_by_its_content(tmp_path, source, name, kind):
    """Fresh-user defect: a torchtitan TOML saved as .sh was parsed as Megatron arguments
    ("--micro-batch-size: missing"); a DeepSpeed config saved as .yaml was "not a configuration"."""
    import shutil

    path = tmp_path / name
    shutil.copy(source, path)
    args = ["--cluster", "dgx-h100", "--gpus", "8", "--format", "json"]
    if kind == "deepspeed-config":
        args += ["--model", "llama-3.1-8b", "--seq-len", "4096"]
    result = _check(path, *args)
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.output)["kind"] == kind


def test_stale_prediction_prints_gib_and_seconds_not_scientific_bytes(tmp_path, plan_doc):
    """A predicted memory total edited to 1.1 x its value is reported in GiB with two decimals
    (the file's number / 2^30, computed here) and the step time in seconds, never as 7.8e+10 B."""
    _, doc = plan_doc
    doc = copy.deepcopy(doc)
    total = doc["predicted"]["memory_bytes"]["total"]
    doc["predicted"]["memory_bytes"]["total"] = total * 1.1
    doc["predicted"]["time_s"]["step"] *= 2
    result = _check(_write(tmp_path, doc), "--format", "json")
    stale = [v["message"] for v in json.loads(result.output)["violations"]
             if v["rule"] == "prediction_stale"]
    memory = next(m for m in stale if "memory" in m)
    assert f"predicts largest stage memory {total * 1.1 / 2**30:,.2f} GiB" in memory
    assert f"this check computes {total / 2**30:,.2f} GiB" in memory
    assert not any("e+" in m or " B" in m for m in stale), stale
    step = next(m for m in stale if "step time" in m)
    assert f"{doc['predicted']['time_s']['step']:,.2f} s" in step


@pytest.fixture(scope="module")
def interleaved_doc(tmp_path_factory):
    """An uneven interleaved plan file: llama-3.1-405b (126 layers) on 16,384 H100s, pp16 vpp4
    (Megatron's account-for split Et|(tt|)*62tL), whose recompute puts a stage's layers in
    particular chunks (the per-stage counts alone do not say which)."""
    path = tmp_path_factory.mktemp("interleaved") / "l405.yaml"
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "16384",
                                 "--seq-len", "8192", "--global-batch-size", "2048", "--fix", "cp=1",
                                 "--fix", "pp=16", "--fix", "vpp=4", "--format", "json", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path, yaml.safe_load(path.read_text())


def test_fresh_interleaved_plan_file_checks_with_its_own_prediction(interleaved_doc):
    path, doc = interleaved_doc
    par = doc["plan"]["parallelism"]
    assert par["vpp"] == 4 and "recompute_layers" in par
    result = _check(path, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert "prediction_stale" not in {v["rule"] for v in data["violations"]}
    assert data["time_s"]["step"] == pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-9)
    assert data["memory_bytes"]["total"] == doc["predicted"]["memory_bytes"]["total"]
    # the per-layer modes are what the counts say per stage (the reader checks it) ...
    assert [sum(c.values()) for c in par["recompute"]] == par["pipeline_layers"]
    # ... and they matter: without them the counts re-expand full first and the step differs
    bare = copy.deepcopy(doc)
    del bare["plan"]["parallelism"]["recompute_layers"]
    other = json.loads(_check(_write(path.parent, bare, "bare.yaml"), "--format", "json").output)
    assert other["time_s"]["step"] != pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-6)


@pytest.mark.parametrize("value, says", [
    ("fx", "one letter per decoder layer"),
    ("f" * 125, "gives 125 layers; the model has 126"),
    ("n" * 126, "gives stages"),
])
def test_malformed_recompute_layers_are_bad_input(interleaved_doc, tmp_path, value, says):
    _, doc = interleaved_doc
    doc = copy.deepcopy(doc)
    doc["plan"]["parallelism"]["recompute_layers"] = value
    result = _check(_write(tmp_path, doc))
    assert result.exit_code == 2, result.output
    assert "plan.parallelism.recompute_layers" in result.output and says in result.output
    assert "Traceback" not in result.output


def _explain_args(doc: dict) -> list[str]:
    """`planner explain` flags that state the plan file's layout (the pasted plan)."""
    par, req = doc["plan"]["parallelism"], doc["request"]
    args = ["explain", "-m", doc["model"], "-c", doc["cluster"], "--gpus", str(doc["gpus"]),
            "--tp", str(par["tp"]), "--pp", str(par["pp"]), "--cp", str(par["cp"]), "--dp", str(par["dp"]),
            "--zero-stage", str(par["zero_stage"]), "--micro-batch-size", str(par["micro_batch_size"]),
            "--global-batch-size", str(par["global_batch_size"]), "--seq-len", str(req["seq_len"]),
            "--pipeline-layout", par["pipeline_layout"], "--format", "json"]
    args += ["--sequence-parallel"] if par["sequence_parallel"] else []
    names = {"tp_comm_overlap": "tp-comm", "overlap_grad_reduce": "grad-reduce",
             "overlap_param_gather": "param-gather", "ep_comm_overlap": "ep-a2a"}
    for knob, on in par.get("overlap", {}).items():
        args += ["--overlap", f"{names[knob]}={'on' if on else 'off'}"]
    return args


def test_explain_with_the_plans_recompute_layers_matches_its_step(interleaved_doc):
    """The interleaved plan pasted into `explain` with its per-layer recompute
    (`--recompute-layers`, the plan file's string) gives the plan's own step time and memory; with
    the per-stage counts alone the counts re-expand full first and the step differs."""
    _, doc = interleaved_doc
    par = doc["plan"]["parallelism"]
    result = runner.invoke(app, _explain_args(doc) + ["--recompute-layers", par["recompute_layers"]])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["time_s"]["step"] == pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-9)
    assert data["memory_bytes"]["total"] == doc["predicted"]["memory_bytes"]["total"]
    counts = ",".join("/".join(f"{c[m]}{m[0]}" for m in ("none", "selective", "full") if c.get(m))
                      for c in (dict(c) if isinstance(c, dict) else {"none": c} for c in par["recompute"]))
    by_stage = json.loads(runner.invoke(app, _explain_args(doc) + ["--recompute-per-stage", counts]).output)
    assert by_stage["time_s"]["step"] != pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-6)


@pytest.mark.parametrize("extra, key", [
    (["--recompute", "full"], "--recompute"),
    (["--recompute-per-stage", "8n," * 15 + "6n"], "--recompute-per-stage"),
])
def test_explain_recompute_layers_conflicts_are_bad_input(interleaved_doc, extra, key):
    _, doc = interleaved_doc
    result = runner.invoke(app, _explain_args(doc) + ["--recompute-layers", "n" * 126] + extra)
    assert result.exit_code == 2, result.output
    assert key in result.output and "--recompute-layers" in result.output and "Traceback" not in result.output


def test_explain_recompute_layers_must_match_the_virtual_stages(interleaved_doc):
    _, doc = interleaved_doc
    result = runner.invoke(app, _explain_args(doc) + ["--recompute-layers", "nn|" * 62 + "nn"])
    assert result.exit_code == 2, result.output
    assert "--recompute-layers" in result.output and "virtual stages hold" in result.output


def test_shipped_example_plan_is_plan_one_and_not_stale():
    """review-fresh5 #11: README calls examples/llama-3.1-70b-64xh100.plan.yaml "the plan above" (its
    `make plan` plan #1) and says `plan -o` files pass unchanged; the shipped file predicted 56.24 s
    against 50.80 s computed (prediction_stale). It passes with no stale warning, its prediction is the
    step time check computes, and it is plan #1 of `planner plan` of the same request."""
    example = Path(__file__).resolve().parents[1] / "examples/llama-3.1-70b-64xh100.plan.yaml"
    doc = yaml.safe_load(example.read_text())
    result = _check(example, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert "prediction_stale" not in {v["rule"] for v in data["violations"]}
    assert data["time_s"]["step"] == pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-9)
    planned = runner.invoke(app, ["plan", "-m", doc["model"], "-c", doc["cluster"], "--gpus", str(doc["gpus"]),
                                  "--format", "json"])
    assert planned.exit_code == 0, planned.output
    best = json.loads(planned.output)["plans"][0]
    assert best["time_s"]["step"] == pytest.approx(doc["predicted"]["time_s"]["step"], rel=1e-9)
