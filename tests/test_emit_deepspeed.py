"""`planner plan --emit deepspeed`: the DeepSpeed JSON writer, read back by `planner check`'s reader.

Round trips run real plans (`planner.plan.plan` + `plan_file`, framework deepspeed, pp / cp pinned
to 1 since a DeepSpeed JSON cannot build a pipeline or Ulysses groups) through `write` and
`planner.check.read_target`, and compare the Target's layout with `plan_layout` field by field.
Expected keys in the known-text tests are derived by hand in each test from the plan dict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.check import evaluate, read_target
from planner.check.gate import Target
from planner.cost.memory import stage_layers
from planner.emit import emit
from planner.emit import checked
from planner.emit.deepspeed import code_recompute, write
from planner.errors import SpecError
from planner.plan import plan, plan_file, plan_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.cli_run import planner

EXACT_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "sequence_parallel", "vpp",
                "micro_batch_size", "global_batch_size", "seq_len", "optimizer", "precision",
                "framework", "offload")
"""Layout fields a DeepSpeed JSON states exactly (recompute is checked per stage, separately)."""


def _plan(model: str, gpus: int, *, seq_len: int = 4096, global_batch_size: int = 64,
          fixed: dict) -> dict:
    data = plan(load_model(model), load_cluster("dgx-h100", gpus=gpus), seq_len=seq_len,
                global_batch_size=global_batch_size, framework="deepspeed", fixed=fixed, top_k=1)
    return plan_file(data, model_ref=model, cluster_ref="dgx-h100")


def _doc(**par) -> dict:
    """A hand-written plan file: llama-3.1-8b on 16 dgx-h100 GPUs; `par` replaces parallelism keys
    (request keys precision / optimizer / framework taken from `par` when given)."""
    request = {"seq_len": 4096, "global_batch_size": 128, "precision": par.pop("precision", "bf16"),
               "optimizer": par.pop("optimizer", "adamw"),
               "framework": par.pop("framework", "deepspeed"), "fixed": {}, "headroom": 0.1,
               "reserve_bytes": 2 * 2**30}
    parallelism = {"dp": 8, "tp": 2, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "zero_stage": 1,
                   "sequence_parallel": False, "micro_batch_size": 2, "global_batch_size": 128,
                   "num_microbatches": 8, "vpp": 1, "recompute": "none", "pipeline_layers": [32]}
    parallelism.update(par)
    return {"kind": "training-plan", "version": 1, "model": "llama-3.1-8b", "cluster": "dgx-h100",
            "gpus": 16, "request": request, "plan": {"parallelism": parallelism}}


def _read_back(doc: dict, tmp_path: Path):
    emitted = write(doc)
    path = tmp_path / f"launch{emitted.suffix}"
    path.write_text(emitted.text, encoding="utf-8")
    target = read_target(path, model=doc["model"], cluster=doc["cluster"], gpus=doc["gpus"],
                         seq_len=doc["request"]["seq_len"])
    return emitted, target


def _plan_counts(doc: dict) -> list[dict[str, int]]:
    """The plan's per-stage recompute counts (zero counts dropped)."""
    rec, layers = doc["plan"]["parallelism"]["recompute"], doc["plan"]["parallelism"]["pipeline_layers"]
    counts = [{rec: n} for n in layers] if isinstance(rec, str) else rec
    return [{m: n for m, n in c.items() if n} for c in counts]


def _assert_layout(doc: dict, target: Target, offload: frozenset = frozenset()) -> None:
    want = plan_layout(doc["plan"], doc["request"]).replace(offload=offload)
    for name in EXACT_FIELDS:
        assert getattr(target.layout, name) == getattr(want, name), name
    model = load_model(doc["model"])
    assert stage_layers(model, target.layout) == stage_layers(model, want)


def _with_recompute(target: Target, counts: list[dict[str, int]]) -> Target:
    """The Target as run with the recompute a deviation line tells the user to add in code."""
    return Target(file=target.file, kind=target.kind, model=target.model, cluster=target.cluster,
                  layout=target.layout, recompute_per_stage=tuple(counts),
                  findings=target.findings)


# ---------------------------------------------------------------- (1) round trip


@pytest.mark.parametrize("model, gpus, fixed", [
    ("llama-3.1-8b", 8, {"pp": 1, "cp": 1}),  # dp 8, ZeRO-3, no recompute
    ("llama-3.1-8b", 8, {"pp": 1, "cp": 1, "tp": 2, "sequence_parallel": False}),  # AutoTP 2
    ("llama-3.1-8b", 16, {"pp": 1, "cp": 1, "tp": 1, "zero_stage": 2}),
])
def test_round_trip_exact(model, gpus, fixed, tmp_path):
    doc = _plan(model, gpus, fixed=fixed)
    assert _plan_counts(doc) == [{"none": 32}]  # these plans keep every activation
    emitted, target = _read_back(doc, tmp_path)
    assert emitted.deviations == ()
    _assert_layout(doc, target)
    assert target.recompute_per_stage is None and target.layout.recompute == "none"
    assert code_recompute(doc) is None
    result = evaluate(target)
    assert result["verdict"] == "pass", result["violations"]
    # Only warnings the reader adds for what a JSON leaves to the code (none here: it names the
    # optimizer and has no activation_checkpointing section).
    assert [v["rule"] for v in result["violations"] if v["severity"] == "error"] == []


def test_round_trip_tp_writes_autotp(tmp_path):
    doc = _plan("llama-3.1-8b", 8, fixed={"pp": 1, "cp": 1, "tp": 2, "sequence_parallel": False})
    config = json.loads(write(doc).text)
    assert config["tensor_parallel"] == {"autotp_size": 2}
    _, target = _read_back(doc, tmp_path)
    assert (target.layout.tp, target.layout.dp) == (2, 4)  # dp = 8 GPUs / autotp 2


def test_emit_dispatches_here():
    doc = _plan("llama-3.1-8b", 8, fixed={"pp": 1, "cp": 1})
    assert emit(doc, "deepspeed") == write(doc)


# ---------------------------------------------------------------- (2) known text


def test_known_text_bf16_adamw_autotp_offload():
    # By hand: train_batch_size = 128; micro = 2; gas = 128 / (2 x dp 8) = 8; tp 2 -> autotp 2;
    # ZeRO-1 with the optimizer offloaded -> offload_optimizer device cpu; bf16; AdamW with Llama's
    # published betas (0.9, 0.95), eps 1e-5, weight decay 0.1 and clip 1.0 (Llama 2 paper §2.2, restated
    # for Llama 3 by emit.megatron.RECIPES), lr the placeholder 3.0e-4 --emit megatron writes (LR=3.0e-4), marked on stderr;
    # ZeRO-1 buckets: reduce and all-gather 5e8 elements (deepspeed/runtime/zero/config.py defaults).
    emitted = write(_doc(offload=["optimizer"]))
    assert emitted.suffix == ".json" and emitted.framework == "deepspeed"
    assert emitted.deviations == ()
    assert json.loads(emitted.text) == {
        "train_batch_size": 128,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 8,
        "zero_optimization": {"stage": 1, "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000,
                              "offload_optimizer": {"device": "cpu"}},
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-5,
                                                  "weight_decay": 0.1}},
        "tensor_parallel": {"autotp_size": 2},
        "gradient_clipping": 1.0,
    }


def test_known_text_fp16_sgd_zero3_param_offload_no_tp(tmp_path):
    # By hand: dp 16 x tp 1 = 16 GPUs; micro 1, gas 128 / (1 x 16) = 8; no tensor_parallel section;
    # ZeRO-3 with parameters and optimizer offloaded; fp16; torch.optim's "SGD" (case-sensitive) with the placeholder
    # lr 3.0e-4 and a momentum (the costed momentum buffer); ZeRO-3 buckets: reduce 5e8, live
    # parameters 1e9, persistence threshold 1e5 (zero/config.py defaults); clip 1.0 (Llama's published clip).
    doc = _doc(dp=16, tp=1, zero_stage=3, micro_batch_size=1, num_microbatches=8,
               offload=["parameters", "optimizer"], precision="fp16", optimizer="sgd")
    emitted, target = _read_back(doc, tmp_path)
    assert json.loads(emitted.text) == {
        "train_batch_size": 128,
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 8,
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 500_000_000,
                              "stage3_max_live_parameters": 1_000_000_000,
                              "stage3_param_persistence_threshold": 100_000, "offload_optimizer": {"device": "cpu"},
                              "offload_param": {"device": "cpu"}},
        "fp16": {"enabled": True},
        "optimizer": {"type": "SGD", "params": {"lr": 3e-4, "momentum": 0.9}},
        "gradient_clipping": 1.0,
    }
    _assert_layout(doc, target, offload=frozenset({"optimizer", "parameters"}))


def test_buckets_written_are_the_cost_models_and_deepspeeds_defaults():
    """The gradient bucket the memory model charges (cost.memory.BUCKET_ELEMENTS) and ZeRO-3's live-parameter
    window (DEEPSPEED_LIVE_PARAMETERS) are what the JSON states; both equal DeepSpeed's defaults at edaa722
    (zero/config.py: reduce_bucket_size pp_int(5e8), max_live_parameters pp_int(1e9))."""
    from planner.cost import memory
    for stage in (1, 2, 3):
        zero = json.loads(write(_doc(zero_stage=stage)).text)["zero_optimization"]
        assert zero["reduce_bucket_size"] == memory.BUCKET_ELEMENTS["deepspeed"] == 500_000_000
        assert zero.get("stage3_max_live_parameters") == (memory.DEEPSPEED_LIVE_PARAMETERS if stage == 3 else None)
        assert zero.get("stage3_param_persistence_threshold") == (100_000 if stage == 3 else None)
    assert memory.DEEPSPEED_LIVE_PARAMETERS == 1_000_000_000
    assert "reduce_bucket_size" not in json.loads(write(_doc(zero_stage=0)).text).get("zero_optimization", {})


def test_plan_buckets_are_written_and_read_back(tmp_path):
    """A plan's own bucket sizes (parallelism.buckets) are what the JSON states, and `check` of the JSON
    carries them on the layout (DeepSpeed's defaults written out read back as absent)."""
    doc = _doc(dp=16, tp=1, zero_stage=3, micro_batch_size=1, num_microbatches=8)
    doc["plan"]["parallelism"]["buckets"] = {"reduce_bucket": 200_000_000, "zero3_live_parameters": 300_000_000,
                                             "zero3_persistence": 1_000_000}
    emitted, target = _read_back(doc, tmp_path)
    zero = json.loads(emitted.text)["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_max_live_parameters"],
            zero["stage3_param_persistence_threshold"]) == (200_000_000, 300_000_000, 1_000_000)
    assert target.layout.buckets == (("reduce_bucket", 200_000_000), ("zero3_live_parameters", 300_000_000),
                                     ("zero3_persistence", 1_000_000))


def test_family_without_recipe_gets_deepspeeds_own_defaults():
    """Mixtral has no RECIPES entry: AdamW params are FusedAdam's defaults (betas (0.9, 0.999), eps 1e-8,
    weight_decay 0; lr the placeholder 3.0e-4) and the clip DeepSpeed's GRADIENT_CLIPPING_DEFAULT 1.0 (runtime/constants.py @edaa722)."""
    from planner.emit.deepspeed import _clip, _optimizer_params
    model = load_model("mixtral-8x7b")
    assert _optimizer_params(model, "adamw") == {"lr": 3e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    assert _clip(model) == 1.0
    # DeepSeek-V3 publishes betas (0.9, 0.95), weight decay 0.1, clip 1.0 and the peak learning rate 2.2e-4
    # (arXiv:2412.19437 §4.2), no epsilon.
    ds3 = _optimizer_params(load_model("deepseek-v3"), "adamw")
    assert ds3 == {"lr": 2.2e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}


def test_learning_rate_is_a_marked_placeholder():
    """Senior review 8 finding 8: a 70B JSON carried DeepSpeed's lr 1e-3 unmarked. For a model with no published
    learning rate (Qwen3-32B) the JSON writes the placeholder 3.0e-4 of --emit megatron's script (LR=3.0e-4) and
    says on stderr it is one."""
    out = planner("plan", "-m", "qwen3-32b", "-c", "dgx-h100", "--gpus", "16", "--emit", "deepspeed", "--top", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["optimizer"]["params"]["lr"] == 3e-4
    assert "PLACEHOLDER: optimizer.params.lr is 0.0003" in " ".join(out.stderr.split())


def test_a_published_learning_rate_is_written_with_its_source():
    """Fresh-user review 10 finding 10, the DeepSpeed side: Llama-3.1-70B's published peak 1.5 x 10^-4 (Llama 3,
    arXiv:2407.21783 Table 3), not the placeholder, named on stderr with its source and no PLACEHOLDER mark."""
    out = planner("plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64", "--emit", "deepspeed", "--top", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["optimizer"]["params"]["lr"] == 1.5e-4
    stderr = " ".join(out.stderr.split())
    assert "optimizer.params.lr is llama-3.1-70b's published peak learning rate 0.00015 (The Llama 3 Herd" in stderr
    assert "PLACEHOLDER: optimizer.params.lr" not in stderr


# ---------------------------------------------------------------- (3) deviations


def test_mixed_recompute_is_a_code_instruction(tmp_path):
    # 8B on 8 GPUs at 8k tokens, ZeRO-1, b=1: memory needs recompute. The search weighs only what
    # DeepSpeed runs, one mode on every layer (`plan._uniform_modes`): full on all 32.
    doc = _plan("llama-3.1-8b", 8, seq_len=8192, global_batch_size=32,
                fixed={"pp": 1, "cp": 1, "tp": 1, "zero_stage": 1, "micro_batch_size": 1})
    assert _plan_counts(doc) == [{"full": 32}]
    # A plan file edited to recompute 12 of 32 layers in full: written as the instruction to wrap
    # every layer (more recompute, never more memory).
    full = 12
    doc["plan"]["parallelism"]["recompute"] = [{"none": 32 - full, "selective": 0, "full": full}]
    emitted, target = _read_back(doc, tmp_path)
    (line,) = emitted.deviations
    assert line.startswith("recompute is not a DeepSpeed JSON key: wrap every one of the 32 "
                           "decoder layers in deepspeed.checkpointing.checkpoint")
    assert f"the plan recomputes {full} in full of 32" in line
    assert line.endswith("--gpus 8 --seq-len 8192 --recompute full`")
    _assert_layout(doc, target)
    assert target.layout.recompute == "none"  # the deviation: the JSON cannot carry it
    # Run as the deviation says (every layer, one mode: what `check --recompute full` states),
    # the config fits.
    assert code_recompute(doc) == ({"full": 32},)
    assert evaluate(_with_recompute(target, [{"full": 32}]))["verdict"] == "pass"


def test_every_layer_recomputed_names_all_layers(tmp_path):
    doc = _plan("llama-3.1-8b", 8, fixed={"pp": 1, "cp": 1, "tp": 1, "recompute": "full"})
    emitted, target = _read_back(doc, tmp_path)
    assert len(emitted.deviations) == 1
    line = emitted.deviations[0]
    assert "wrap every one of the 32 decoder layers" in line
    assert "gradient_checkpointing_enable()" in line and "recomputes 32 in full" in line
    assert code_recompute(doc) == ({"full": 32},)
    assert evaluate(_with_recompute(target, [{"full": 32}]))["verdict"] == "pass"


def test_selective_becomes_full_with_no_more_memory(tmp_path):
    doc = _doc(dp=16, tp=1, micro_batch_size=1, num_microbatches=8,
               recompute=[{"none": 20, "selective": 8, "full": 4}])
    emitted, target = _read_back(doc, tmp_path)
    (line,) = emitted.deviations
    assert "wrap every one of the 32 decoder layers" in line
    assert "recomputes 4 in full and 8 selectively of 32" in line
    as_planned = evaluate(_with_recompute(target, [{"none": 20, "selective": 8, "full": 4}]))
    assert code_recompute(doc) == ({"full": 32},)  # whole layers, one mode for all
    as_emitted = evaluate(_with_recompute(target, [{"full": 32}]))
    assert as_emitted["verdict"] == "pass"
    assert as_emitted["memory_bytes"]["total"] <= as_planned["memory_bytes"]["total"]


def test_sequence_parallel_at_tp1_is_named(tmp_path):
    doc = _doc(dp=16, tp=1, micro_batch_size=1, num_microbatches=8, sequence_parallel=True)
    emitted, target = _read_back(doc, tmp_path)
    assert emitted.deviations == ("sequence_parallel=true not written: at tp=1 there is nothing "
                                  "to split the sequence over (no effect on memory or time)",)
    assert target.layout.sequence_parallel is False
    assert evaluate(target)["verdict"] == "pass"


# ---------------------------------------------------------------- (4) unrunnable


@pytest.mark.parametrize("changes, fix", [
    ({"pp": 2, "dp": 4, "pipeline_layers": [16, 16], "recompute": [{"none": 16}, {"none": 16}]},
     "--fix pp=1"),
    ({"cp": 2, "dp": 4}, "--fix cp=1"),
    ({"sequence_parallel": True}, "--fix sequence_parallel=false"),
    ({"precision": "fp8"}, "--precision bf16"),
    ({"optimizer": "adam8bit"}, "--optimizer adamw"),
    ({"framework": "megatron"}, "--emit deepspeed"),
    ({"offload": ["activations"]}, "without activation offload"),
    ({"num_microbatches": 4}, "DeepSpeed asserts they are equal"),
    ({"dp": 4}, "DeepSpeed's mesh is (gpus // tp, tp)"),
    ({"dp_shard": 2}, "'dp_shard' has no DeepSpeed JSON mapping"),
])
def test_unrunnable_plan_names_the_fix(changes, fix):
    with pytest.raises(SpecError, match="--emit") as err:
        write(_doc(**changes))
    assert fix in str(err.value)


def test_expert_parallel_plan_is_refused():
    # ep > 1 only as the user's own pin: the DeepSpeed search holds ep = 1 otherwise (LAUNCH_PINS)
    doc = _plan("mixtral-8x7b", 16, fixed={"ep": 2})
    assert doc["plan"]["parallelism"]["ep"] == 2
    with pytest.raises(SpecError, match=r"ep=\d+ cannot be run from a DeepSpeed JSON.*--fix ep=1"):
        write(doc)


def test_pipelined_example_plan_is_refused():
    doc = yaml.safe_load(Path("tests/data/plans/llama-3.1-70b-64xh100-pp4-cp4.plan.yaml").read_text())
    doc["request"]["framework"] = "deepspeed"
    with pytest.raises(SpecError, match="pp=4 cannot be run from a DeepSpeed JSON.*--fix pp=1"):
        write(doc)


@pytest.mark.parametrize("model, gpus", [("llama-3.1-70b", 64), ("mixtral-8x7b", 16)])
def test_deepspeed_search_gives_emittable_plans(model, gpus, tmp_path):
    # Under Megatron's conventions these searches choose pipelines / context or expert parallelism /
    # SP at tp > 1; under DeepSpeed's the search holds the launch pins itself (no --fix given).
    doc = _plan(model, gpus, global_batch_size=256, fixed={})
    emitted, target = _read_back(doc, tmp_path)
    _assert_layout(doc, target)
    recompute = code_recompute(doc)
    assert (recompute is None) == (emitted.deviations == ())
    if recompute is not None:
        target = _with_recompute(target, list(recompute))
    assert evaluate(target)["verdict"] == "pass"


@pytest.mark.parametrize("pin, named", [
    ("pp=2", "pp=2"), ("cp=2", "cp=2"), ("recompute=selective", "recompute=selective"),
])
def test_pin_no_deepspeed_json_runs_contradicts_the_emit(pin, named):
    """review-fresh5 #7: `plan --emit deepspeed --fix pp=2` asks for a pipeline a DeepSpeed JSON cannot
    build (its stages are built in code): a contradiction of the two options, bad input (exit 2)
    naming both and why, before any search -- not an infeasible plan (exit 1) after one."""
    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "16",
                                      "--emit", "deepspeed", "--fix", pin])
    assert result.exit_code == 2, result.output
    assert named in result.output and "--emit deepspeed" in result.output and "--fix" in result.output
    assert "Traceback" not in result.output


def test_plan_file_buckets_are_costed_by_check(tmp_path):
    """A hand-written DeepSpeed plan's parallelism.buckets is what `check` of the plan file costs (the same
    sizes `--emit deepspeed` writes), and bad ones are bad input at the key."""
    import yaml as _yaml

    from planner.check import read_target
    from planner.errors import SpecError as _SpecError
    doc = _doc(dp=16, tp=1, zero_stage=3, micro_batch_size=1, num_microbatches=8)
    doc["plan"]["parallelism"]["buckets"] = {"reduce_bucket": 200_000_000}
    path = tmp_path / "p.yaml"
    path.write_text(_yaml.safe_dump(doc))
    assert read_target(path).layout.buckets == (("reduce_bucket", 200_000_000),)
    doc["plan"]["parallelism"]["buckets"] = {"reduce_buckets": 1}
    path.write_text(_yaml.safe_dump(doc))
    with pytest.raises(_SpecError, match="buckets"):
        read_target(path)


def test_plan_framework_deepspeed_best_is_what_emit_writes():
    """Senior review 12 finding 6: `plan -m llama-3.1-70b -c dgx-h100 --gpus 16 --framework
    deepspeed` ranked dp2 tp2 pp4 with Megatron SP and an uneven 18/21/21/20 split first (231.7 s),
    which no DeepSpeed JSON launches (pipeline stages are PipelineModule code; AutoTP has no SP);
    `--emit deepspeed` gave 292.7 s. Now the search holds `frameworks.deepspeed.LAUNCH_PINS`, so its
    #1 is the plan the emitter writes: the JSON read back by `planner check` costs exactly the
    search's step time (the round trip `plan --emit` prints as "as emitted" vs "search's best")."""
    data = plan(load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=16), seq_len=4096,
                global_batch_size=1024, framework="deepspeed", top_k=1)
    par = data["plans"][0]["parallelism"]
    assert (par["pp"], par["vpp"], par["cp"], par["sequence_parallel"]) == (1, 1, 1, False), par
    assert data["solver"]["status"] == "OPTIMAL"
    emitted, verdict = checked(plan_file(data, 0, model_ref="llama-3.1-70b", cluster_ref="dgx-h100"),
                               "deepspeed")
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert verdict["time_s"]["step"] == pytest.approx(data["plans"][0]["time_s"]["step"], rel=1e-12)


def test_plan_framework_deepspeed_keeps_a_users_pin():
    """The launch pins give way to the user's own (`{**LAUNCH_PINS, **fixed}`): `--fix pp=2` under
    `--framework deepspeed` is searched as asked (PipelineModule code), not silently changed; the
    emitter refuses such a plan (test_pipelined_example_plan_is_refused above)."""
    data = plan(load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8), seq_len=4096,
                global_batch_size=64, framework="deepspeed", fixed={"pp": 2}, top_k=1)
    assert data["plans"][0]["parallelism"]["pp"] == 2
    assert data["request"]["fixed"]["pp"] == 2 and data["request"]["fixed"]["cp"] == 1


def test_plan_framework_deepspeed_says_what_it_searches():
    """The narrowed space is said, not silent: one note naming the pins the user did not give
    (`cli._launch_note`; a dense model: no ep/etp)."""
    out = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--framework", "deepspeed",
                  "--fix", "cp=1", "--top", "1")
    assert out.returncode == 0, out.stderr
    assert ("note: --framework deepspeed: searching only layouts --emit deepspeed can launch: pp=1, vpp=1, "
            "sequence_parallel=False") in out.stderr
