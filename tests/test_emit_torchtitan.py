"""`planner plan --emit torchtitan` (planner/emit/torchtitan.py): the TOML job config of a plan.

Round trips: real plans (`planner.plan.plan` + `plan_file`, framework torchtitan, small cases) are
written, parsed with tomllib, read back by `planner check`'s torchtitan reader, and the Target's
layout and per-stage recompute compared with the plan's field by field; a field may differ only
where a deviation names it. Known text: a hand-written plan whose keys are derived by hand below.
"""

from __future__ import annotations

import copy
import tomllib

import pytest

from planner.check import evaluate, read_target
from planner.emit import emit
from planner.emit.torchtitan import default_split, write, write_command
from planner.errors import SpecError
from planner.plan import plan, plan_file, plan_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "sequence_parallel", "vpp",
          "pipeline_layers", "micro_batch_size", "global_batch_size", "seq_len", "offload",
          "optimizer", "precision", "torch_compile")


def _plan(model: str, gpus: int, seq_len: int, batch: int, fixed: dict | None = None,
          framework: str = "torchtitan") -> dict:
    data = plan(load_model(model), load_cluster("dgx-h100", gpus=gpus), seq_len=seq_len,
                global_batch_size=batch, framework=framework, fixed=fixed or {}, top_k=1)
    return plan_file(data, model_ref=model, cluster_ref="dgx-h100")


def _read(doc: dict, tmp_path):
    emitted = write(doc)
    tomllib.loads(emitted.text)  # valid TOML
    path = tmp_path / f"emitted{emitted.suffix}"
    path.write_text(emitted.text)
    target = read_target(path, model=doc["model"], cluster=doc["cluster"], gpus=doc["gpus"],
                         seq_len=doc["request"]["seq_len"])
    return emitted, target


def _stage_counts(recompute, split) -> list[dict]:
    if isinstance(recompute, str):
        return [{m: (n if m == recompute else 0) for m in ("none", "selective", "full")}
                for n in split]
    return [{m: c.get(m, 0) for m in ("none", "selective", "full")} for c in recompute]


def _assert_round_trip(doc: dict, emitted, target) -> None:
    """Every layout field and every stage's recompute equals the plan's, except what a deviation
    names: "ZeRO-" lines zero_stage / the shard group, "sequence parallelism" lines
    sequence_parallel, "stage N:" lines stage N's recompute. A ZeRO-2 plan is written exactly
    (fsdp_reshard_after_forward = "never"), which the reader reads back as ZeRO-2 at pp 1
    (parallelize.py apply_fsdp: "never" keeps parameters unsharded after forward)."""
    planned, got = plan_layout(doc["plan"], doc["request"]), target.layout
    text = " | ".join(emitted.deviations)
    for name in FIELDS:
        want, have = getattr(planned, name), getattr(got, name)
        if name == "pipeline_layers" and got.pp == 1:  # the reader leaves pp 1 unsplit
            have = have or (target.model.num_hidden_layers,)
        if name == "zero_stage" and want == 2:
            assert have == 2 and 'fsdp_reshard_after_forward = "never"' in emitted.text
        elif name == "zero_stage" and "ZeRO-" in text:
            assert have != want
        elif name == "sequence_parallel" and "sequence parallelism" in text:
            assert have != want
        else:
            assert have == want, (name, want, have)
    if got.zero_stage:
        assert got.dp_shard_degree == planned.dp_shard_degree
    split = list(planned.pipeline_layers)
    plan_counts = _stage_counts(doc["plan"]["parallelism"]["recompute"], split)
    read_counts = _stage_counts(target.recompute_per_stage or got.recompute, split)
    for s, (want, have) in enumerate(zip(plan_counts, read_counts)):
        named = any(d.startswith(f"stage {s}:") for d in emitted.deviations)
        assert (want != have) == named, (s, want, have, emitted.deviations)
        if named:  # conservative: at least as many layers recomputed fully, and no fewer at all
            assert have["full"] >= want["full"] and have["none"] <= want["none"]


# --- (1) round trips of real plans ---------------------------------------------------------

TINY = "tests/data/models/tiny.yaml"
CASES = [
    ("llama-3.1-8b", 8, 8192, 16, None),  # FSDP over dp x cp, pp 1
    ("llama-3.1-8b", 16, 4096, 64, {"pp": 2, "zero_stage": 3}),  # 1F1B
    ("llama-3.1-8b", 16, 4096, 64, {"pp": 4, "vpp": 2}),  # Interleaved1F1B
    ("llama-3.1-8b", 8, 4096, 32, {"tp": 4, "zero_stage": 0, "recompute": "full"}),
    (TINY, 8, 256, 32, {"tp": 1, "pp": 1, "cp": 1, "zero_stage": 0}),  # DDP
    ("mixtral-8x7b", 16, 4096, 64, {"ep": 8, "zero_stage": 3}),
    ("llama-3.1-70b", 64, 4096, 256, {"zero_stage": 3}),  # per-stage recompute mix
]


@pytest.mark.parametrize("model, gpus, seq_len, batch, fixed", CASES)
def test_round_trip_real_plans(tmp_path, model, gpus, seq_len, batch, fixed):
    doc = _plan(model, gpus, seq_len, batch, fixed)
    emitted, target = _read(doc, tmp_path)
    assert emitted.framework == "torchtitan" and emitted.suffix == ".toml"
    _assert_round_trip(doc, emitted, target)
    assert target.layout.framework == "torchtitan"
    assert evaluate(target)["verdict"] == "pass", evaluate(target)["violations"]


def test_emit_dispatches_here():
    doc = _plan("llama-3.1-8b", 8, 8192, 16)
    assert emit(doc, "torchtitan-toml").text == write(doc).text
    assert emit(doc, "torchtitan").text == write_command(doc).text


COMMAND_CASES = CASES + [
    ("llama-3.1-8b", 16, 4096, 64, {"pp": 1, "tp": 2}),
    ("llama-3.1-8b", 8, 4096, 32, {"pp": 1, "tp": 4, "zero_stage": 3, "recompute": "full"}),
    ("llama-3.1-70b", 64, 4096, 256, {"pp": 1}),
    ("llama-3.1-8b", 16, 8192, 64, {"pp": 1, "cp": 2, "recompute": "selective"}),
    ("qwen3-32b", 16, 4096, 64, {"pp": 1}),
]


@pytest.mark.parametrize("model, gpus, seq_len, batch, fixed", COMMAND_CASES)
def test_command_line_reads_back_to_the_toml_layout(tmp_path, model, gpus, seq_len, batch, fixed):
    """`--emit torchtitan` (b5bcd76 command line) says what the TOML says: both read back to one
    Layout. Plans a command line cannot give (a model torchtitan ships no preset of, module names
    per stage, layer-level checkpointing of a per-layer recompute mix) are refused naming why."""
    doc = _plan(model, gpus, seq_len, batch, fixed)
    _, toml_target = _read(doc, tmp_path)
    try:
        command = write_command(doc)
    except SpecError as exc:
        reasons = ("ships no config function", "is set by a config function, not the command line")
        assert any(why in str(exc) for why in reasons), str(exc)
        assert model not in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b") or reasons[1] in str(exc), str(exc)
        return
    assert command.suffix == ".sh" and "-m torchtitan.train --module" in \
        command.text.replace(" \\\n    ", " ")
    path = tmp_path / "launch.sh"
    path.write_text(command.text)
    target = read_target(path, model=doc["model"], cluster=doc["cluster"], gpus=doc["gpus"],
                         seq_len=doc["request"]["seq_len"])
    assert target.kind == "torchtitan-command"
    # the two releases differ where neither file says anything: the TOML ones run separate wq, wk,
    # wv, the command line's (b5bcd76) one fused wqkv (`Layout.fused_qkv`, pytorch/torchtitan 3396a4b)
    assert (target.layout.fused_qkv, toml_target.layout.fused_qkv) == (None, False)
    assert target.layout.replace(fused_qkv=False) == toml_target.layout
    assert target.recompute_per_stage == toml_target.recompute_per_stage
    assert evaluate(target)["verdict"] == evaluate(toml_target)["verdict"]


def test_command_line_of_a_qwen3_plan_uses_torchtitans_qwen3_preset(tmp_path):
    """torchtitan b5bcd76 ships qwen3_32b (models/qwen3/config_registry.py)."""
    doc = _plan("qwen3-32b", 16, 4096, 64, {"pp": 1, "cp": 1, "tp": 1})
    command = write_command(doc)
    assert "--module qwen3" in command.text and "--config qwen3_32b" in command.text


def test_ddp_plan_is_written_as_ddp(tmp_path):
    """zero 0, tp = pp = cp = 1, dp 8: replicate 8 x shard 1 (DDP), no deviation."""
    doc = _plan(TINY, 8, 256, 32, {"tp": 1, "pp": 1, "cp": 1, "zero_stage": 0})
    emitted, target = _read(doc, tmp_path)
    par = tomllib.loads(emitted.text)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (8, 1)
    assert target.layout.zero_stage == 0
    assert [d[:30] for d in emitted.deviations] == ["[model] name/flavor left out: "]


# --- (2) known text ---------------------------------------------------------------------------

def _hand_plan(**changes) -> dict:
    """llama-3.1-8b on 16 dgx-h100: dp 2 x tp 2 x pp 4 (x cp 1) = 16; ZeRO-3; b 1, global 32 ->
    m = 32 / (2 x 1) = 16 micro-batches; split [8, 8, 8, 8]; full recompute."""
    par = {"dp": 2, "tp": 2, "pp": 4, "cp": 1, "ep": 1, "etp": 1, "zero_stage": 3,
           "sequence_parallel": True, "micro_batch_size": 1, "global_batch_size": 32,
           "num_microbatches": 16, "vpp": 1, "recompute": "full", "pipeline_layers": [8, 8, 8, 8]}
    par.update(changes)
    return {"kind": "training-plan", "version": 1, "model": "llama-3.1-8b", "cluster": "dgx-h100",
            "gpus": 16, "request": {"seq_len": 4096, "global_batch_size": par["global_batch_size"],
                                    "precision": "bf16", "optimizer": "adamw",
                                    "framework": "torchtitan", "fixed": {}, "headroom": 0.1,
                                    "reserve_bytes": 2**31},
            "plan": {"parallelism": par}}


def test_known_text_of_a_hand_written_plan():
    """By hand: FSDP over dp 2 -> replicate 1, shard 2; pp > 1 -> local batch = 32 / dp 2 = 16 in
    micro-batches of 1. torchtitan's own split of 32 layers over 4 stages: 34 effective / 4 = 8
    rem 2 -> [9, 9, 8, 8] less the embedding and the output -> [8, 9, 8, 7] != [8, 8, 8, 8], so
    module_fqns_per_model_part gives layers 0-7, 8-15, 16-23, 24-31."""
    cfg = tomllib.loads(write(_hand_plan()).text)
    assert cfg["model"] == {"name": "llama3", "flavor": "8B"}
    assert cfg["optimizer"] == {"name": "AdamW"}
    assert cfg["training"] == {"local_batch_size": 16, "global_batch_size": 32, "seq_len": 4096,
                               "mixed_precision_param": "bfloat16"}
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    fqns = [["tok_embeddings", *(f"layers.{i}" for i in range(8))],
            [f"layers.{i}" for i in range(8, 16)], [f"layers.{i}" for i in range(16, 24)],
            [*(f"layers.{i}" for i in range(24, 32)), "norm", "output"]]
    assert cfg["parallelism"] == {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 2,
        "tensor_parallel_degree": 2, "context_parallel_degree": 1,
        "pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "1F1B",
        "pipeline_parallel_microbatch_size": 1, "module_fqns_per_model_part": fqns}
    assert write(_hand_plan()).deviations == ()


def test_torchtitans_own_split_needs_no_fqns(tmp_path):
    """The plan's split [8, 9, 8, 7] is torchtitan's default (above): no module_fqns key."""
    doc = _hand_plan(pipeline_layers=[8, 9, 8, 7])
    emitted, target = _read(doc, tmp_path)
    assert "module_fqns_per_model_part" not in tomllib.loads(emitted.text)["parallelism"]
    assert target.layout.pipeline_layers == (8, 9, 8, 7)


def test_default_split_by_hand():
    """80 layers over 8 stages: 82 / 8 = 10 rem 2 -> [11, 11, 10 x 6] -> [10, 11, 10, 10, 10, 10,
    10, 9] (torchtitan's 70B split quoted in tests/test_check_torchtitan.py)."""
    assert default_split(80, 8) == [10, 11, 10, 10, 10, 10, 10, 9]
    assert default_split(32, 1) == [32]


def test_interleaved_three_chunks_uses_layers_per_stage(tmp_path):
    """pp 2 x vpp 3 = 6 virtual stages: 34 / 6 = 5 rem 4 -> [6, 6, 6, 6, 5, 5] -> [5, 6, 6, 6, 5,
    4]; rank 0 holds stages 0, 2, 4 = 16, rank 1 stages 1, 3, 5 = 16. ceil(34 / 6) = 6 stages ->
    pipeline_parallel_layers_per_stage 6 (ceil(34 / 5) = 7, ceil(34 / 7) = 5)."""
    doc = _hand_plan(tp=4, pp=2, vpp=3, pipeline_layers=[16, 16])
    emitted, target = _read(doc, tmp_path)
    par = tomllib.loads(emitted.text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] == 6
    assert (target.layout.vpp, target.layout.pipeline_layers) == (3, (16, 16))


def test_fp8_adds_the_float8_converter(tmp_path):
    doc = _hand_plan()
    doc["request"]["precision"] = "fp8"
    emitted, target = _read(doc, tmp_path)
    assert tomllib.loads(emitted.text)["model"]["converters"] == ["quantize.linear.float8"]
    assert target.layout.precision == "fp8"


# --- (3) deviations ---------------------------------------------------------------------------

def test_per_stage_full_mix_becomes_layer_sac(tmp_path):
    """Plan: full 2 of 8 layers on stage 0, none elsewhere. Layer SAC N gives 8 // N full on every
    stage; stage 0 needs 8 // N >= 2 -> N <= 4; N = 3 and N = 4 both give 2 (the fewest changes:
    2 on each of stages 1-3), N = 2 gives 4, mode full 8; the first of the ties, N = 3, is taken.
    Stages 1-3 recompute 2 layers the plan keeps: three deviation lines."""
    doc = _hand_plan(recompute=[{"none": 6, "selective": 0, "full": 2}] +
                     [{"none": 8, "selective": 0, "full": 0}] * 3)
    emitted, target = _read(doc, tmp_path)
    ac = tomllib.loads(emitted.text)["activation_checkpoint"]
    assert ac == {"mode": "selective", "selective_ac_option": "3"}
    assert [d.split(":")[0] for d in emitted.deviations] == ["stage 1", "stage 2", "stage 3"]
    assert "none 6, selective 0, full 2 (plan: none 8, selective 0, full 0)" in emitted.deviations[0]
    _assert_round_trip(doc, emitted, target)
    assert evaluate(target)["verdict"] == "pass"


def test_selective_mix_without_full_becomes_op_sac(tmp_path):
    """Plan: selective 3 + none 5 per stage. Op SAC everywhere changes the 5 kept layers per stage
    (none -> selective); layer SAC needs 8 // N >= 3 full (the selective ones become full) -> N
    <= 2: N = 2 gives 4 full (the 3 selective + 1 kept), 4 changes per stage, fewer than 5; mode
    full changes 8. So N = 2: none 4, full 4 on every stage, four deviation lines."""
    doc = _hand_plan(recompute=[{"none": 5, "selective": 3, "full": 0}] * 4)
    emitted, target = _read(doc, tmp_path)
    ac = tomllib.loads(emitted.text)["activation_checkpoint"]
    assert ac == {"mode": "selective", "selective_ac_option": "2"}
    assert len(emitted.deviations) == 4
    _assert_round_trip(doc, emitted, target)
    assert evaluate(target)["verdict"] == "pass"


def test_zero1_becomes_fsdp(tmp_path):
    doc = _hand_plan(zero_stage=1)
    emitted, target = _read(doc, tmp_path)
    assert [d for d in emitted.deviations if d.startswith("ZeRO-1")]
    assert target.layout.zero_stage == 3
    _assert_round_trip(doc, emitted, target)
    assert evaluate(target)["verdict"] == "pass"


def test_ddp_with_tp_becomes_fsdp_and_tp_gets_sequence_parallel(tmp_path):
    """zero 0 with tp 2 / pp 4: torchtitan refuses DDP with > 1-D parallelism -> FSDP, listed;
    sequence_parallel False at tp 2 -> on in torchtitan, listed."""
    doc = _hand_plan(zero_stage=0, sequence_parallel=False)
    emitted, target = _read(doc, tmp_path)
    assert any(d.startswith("ZeRO-0 (DDP") for d in emitted.deviations)
    assert any(d.startswith("sequence parallelism on at tp=2") for d in emitted.deviations)
    _assert_round_trip(doc, emitted, target)
    assert evaluate(target)["verdict"] == "pass"


def test_other_models_leave_model_to_the_user(tmp_path):
    doc = _plan("mixtral-8x7b", 16, 4096, 64, {"ep": 8})
    emitted, _ = _read(doc, tmp_path)
    assert "model" not in tomllib.loads(emitted.text)
    assert any(d.startswith("[model] name/flavor left out") for d in emitted.deviations)


def test_megatron_costed_plan_says_so():
    doc = _hand_plan()
    doc["request"]["framework"] = "megatron"
    assert any("costed with megatron" in d for d in write(doc).deviations)


# --- (4) plans torchtitan cannot run ------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"request": {"optimizer": "sgd"}}, "--optimizer adamw"),
    ({"request": {"precision": "fp16"}}, "--precision bf16"),
    ({"plan": {"ep": 1, "etp": 2}}, "--fix etp=1"),
    ({"plan": {"ep": 2, "etp": 4, "tp": 2}}, "etp = tp"),
    # pp 4, vpp 2, m = 10: rounds = 10 // 4 = 2 divides 10 -> fine; m = 9 cannot be (dp 2 x b 1
    # x 9 = 18 sequences): rounds 2, 9 % 2 = 1.
    ({"plan": {"vpp": 2, "global_batch_size": 18, "num_microbatches": 9}}, "--fix vpp=1"),
])
def test_unrunnable_plans_raise(change, words):
    doc = copy.deepcopy(_hand_plan())
    doc["request"].update(change.get("request", {}))
    doc["plan"]["parallelism"].update(change.get("plan", {}))
    with pytest.raises(SpecError) as err:
        write(doc)
    assert err.value.key == "--emit" and words in str(err.value)


def test_zero2_with_pipeline_is_the_zero3_run_under_torchtitan():
    """Under PP torchtitan never reshards after forward, so ZeRO-2 and ZeRO-3 are one run; the
    rules refuse ZeRO-2 + PP (costed as ZeRO-3, with the resident stage blocks and accumulated fp32
    gradients) and the search never returns it: llama-3.1-70b on 64 GPUs, pp pinned to 8."""
    from planner.errors import InfeasibleError

    with pytest.raises(InfeasibleError, match="zero_with_pp"):
        _plan("llama-3.1-70b", 64, 4096, 256, {"zero_stage": 2, "pp": 8})
    doc = _plan("llama-3.1-70b", 64, 4096, 256, {"pp": 8})
    assert doc["plan"]["parallelism"]["zero_stage"] != 2


def test_command_line_writes_a_split_other_than_torchtitans_as_module_names(tmp_path):
    """A plan split 8/8/8/8 (torchtitan's own split of 32 layers over 4 stages is 8/9/8/7, by hand
    as in the known-text test) is written as the module names of each model part on the command
    line (`tt.CLI_PARTS`: one word per part, names comma-separated; b5bcd76's output modules
    norm, lm_head) and reads back to the plan's split."""
    doc = _hand_plan()
    command = write_command(doc)
    text = command.text.replace(" \\\n    ", " ")
    parts = [",".join(["tok_embeddings"] + [f"layers.{i}" for i in range(8)]),
             ",".join(f"layers.{i}" for i in range(8, 16)),
             ",".join(f"layers.{i}" for i in range(16, 24)),
             ",".join([f"layers.{i}" for i in range(24, 32)] + ["norm", "lm_head"])]
    assert f"--parallelism.module_fqns_per_model_part {' '.join(parts)} " in text, text
    path = tmp_path / "launch.sh"
    path.write_text(command.text)
    target = read_target(path, model=doc["model"], cluster=doc["cluster"],
                         seq_len=doc["request"]["seq_len"])
    assert target.kind == "torchtitan-command"
    assert target.layout.pipeline_layers == (8, 8, 8, 8) and target.layout.pp == 4
    assert evaluate(target)["verdict"] == "pass", evaluate(target)["violations"]


def test_command_line_split_with_virtual_stages_reads_back(tmp_path):
    """pp 2 x vpp 2 with 16/16 per rank: torchtitan's default split of 32 layers over 4 stages
    (34 effective: 9/9/8/8, minus the embedding and output: 8/9/8/7 -> ranks 16/16) is the plan's
    per rank; 20/12 is not, so module names are written: rank 0 holds stages 0 and 2 (10 + 10
    layers), rank 1 stages 1 and 3 (6 + 6)."""
    doc = _hand_plan(pp=2, vpp=2, dp=4, num_microbatches=8, pipeline_layers=[20, 12])
    command = write_command(doc)
    path = tmp_path / "launch.sh"
    path.write_text(command.text)
    target = read_target(path, model=doc["model"], cluster=doc["cluster"],
                         seq_len=doc["request"]["seq_len"])
    assert target.layout.pipeline_layers == (20, 12) and target.layout.vpp == 2


def test_command_line_refusal_of_layer_sac_names_the_pin():
    """A per-stage mix whose nearest single rule is layer SAC (torchtitan's own split 8/9/8/7;
    every 2nd block fully recomputed gives 4/4/4/3 full layers, covering the plan's 4 on stage 0
    with 4 + 4 + 3 = 11 layers changed, where full everywhere changes 4 + 9 + 8 + 7 = 28) is a
    config function's setting: the refusal names --fix recompute=full."""
    mix = [{"none": 4, "selective": 0, "full": 4}] + [
        {"none": n, "selective": 0, "full": 0} for n in (9, 8, 7)]
    with pytest.raises(SpecError) as exc:
        write_command(_hand_plan(recompute=mix, pipeline_layers=[8, 9, 8, 7]))
    assert "--fix recompute=full" in str(exc.value)


def test_command_line_names_the_model_by_its_config_function_without_a_model_note():
    """Fresh-user defect: the command line of a qwen3 (or DeepSeek-V3) plan names the model with
    --module / --config, yet carried the TOML writer's note "[model] name/flavor left out:
    torchtitan has no preset ...". The note belongs to the TOML form only (its releases shipped
    llama3 alone)."""
    doc = _plan("qwen3-32b", 16, 4096, 64, {"pp": 1, "cp": 1, "tp": 1})
    command = write_command(doc)
    assert "--module qwen3" in command.text and "--config qwen3_32b" in command.text
    assert not any("name/flavor" in d for d in command.deviations)
    assert "name/flavor" not in command.text
    assert any(d.startswith("[model] name/flavor left out") for d in write(doc).deviations)


def test_command_line_refusal_of_a_model_without_preset_says_why():
    """Mixtral (MoE) has no torchtitan model and no command line through the Hugging Face backend
    (b5bcd76: model_spec off the command line, MoE flavors fixed to Qwen3-30B-A3B, no MoE PP);
    a dense model without a preset is pointed at the backend's --hf_model form."""
    with pytest.raises(SpecError) as exc:
        write_command(_plan("mixtral-8x7b", 16, 4096, 64, {"ep": 8}))
    text = str(exc.value)
    assert "ships no config function" in text and "model_spec is tyro.conf.Suppress" in text
    assert "Qwen3-30B-A3B" in text and "\n" not in text
    doc = _hand_plan()
    doc["model"] = "qwen2.5-72b"
    with pytest.raises(SpecError) as exc:
        _preset_of(doc)
    assert "--hf_model Qwen/Qwen2.5-72B" in str(exc.value)


def _preset_of(doc):
    from planner.emit.torchtitan import _preset
    return _preset(doc, {})


# --- review-fresh11 #7: the command line's learning rate ----------------------------------------

def test_command_line_states_the_learning_rate_it_runs():
    """llama3_8b (torchtitan b5bcd76 models/llama3/config_registry.py l. 211) runs AdamW at 3e-4, Llama 3
    8B's published peak (Llama 3 paper Table 3), with LRSchedulersContainer's defaults (lr_scheduler.py
    l. 51-82: 200 warm-up steps, linear decay to 3e-4 x 0 = 0): said in the launch and on stderr, unmarked,
    since b5bcd76 has no command-line field for the rate (it is the config function's param group)."""
    command = write_command(_hand_plan())
    (note,) = command.placeholders
    assert f"# {note}" in command.text.splitlines()
    assert note.startswith("learning rate: llama3_8b runs AdamW at lr 0.0003 with 200 warm-up steps and a "
                           "linear decay to 0 at --training.steps")
    assert "llama-3.1-8b's published peak is 0.0003" in note and "PLACEHOLDER" not in note
    assert "--lr_scheduler.{warmup_steps,decay_ratio,decay_type,min_lr_factor}" in note


def test_command_line_names_the_published_floor_the_preset_does_not_decay_to():
    """llama3_405b: lr 8e-5 = the published peak (Llama 3 §3.4.1), 600 warm-up steps (l. 336-337), decay to 0;
    the published decay ends at 8e-7 = 8e-5 x 0.01, the min_lr_factor that gives it."""
    from planner.emit.torchtitan import _cli_lr_note
    from planner.specs.model import load_model

    note = _cli_lr_note(load_model("llama-3.1-405b"), ("llama3", "llama3_405b"))
    assert "lr 8e-05 with 600 warm-up steps and a linear decay to 0 " in note
    assert note.endswith("the published decay ends at 8e-07: --lr_scheduler.min_lr_factor 0.01")
    # deepseek_v3_671b (l. 225-231): cosine over the last 80%, floor 2.2e-4 x 0.1 = 2.2e-5, the published one
    note = _cli_lr_note(load_model("deepseek-v3"), ("deepseek_v3", "deepseek_v3_671b"))
    assert "lr 0.00022 with 2000 warm-up steps and a cosine decay over the last 80% of the steps, held " \
           "before, to 2.2e-05 " in note
    assert "published decay ends" not in note and not note.startswith("PLACEHOLDER")


def test_command_line_marks_an_unpublished_learning_rate_placeholder():
    """qwen3_32b runs lr 8e-4 (models/qwen3/config_registry.py l. 353-354); no Qwen3 rate is recorded: a
    PLACEHOLDER the user sets, as the TOML writer marks it."""
    doc = _plan("qwen3-32b", 16, 4096, 64, {"pp": 1, "cp": 1, "tp": 1})
    (note,) = write_command(doc).placeholders
    assert note.startswith("PLACEHOLDER: qwen3_32b runs AdamW at lr 0.0008 with 600 warm-up steps")
    assert note.endswith("no published learning rate of qwen3-32b is recorded: set yours in a config "
                         "function before launching")
