"""Megatron-LM's precision-aware optimizer as framework knobs (`Layout.precision_aware_optimizer`,
`main_params_dtype`, `main_grads_dtype`, `exp_avg_dtype`, `exp_avg_sq_dtype`; issue 8 item 1).

Expected bytes per parameter are the framework facts written beside each case (sources in
planner/placement/precision.py, NVIDIA/Megatron-LM@d98e8a6): with the optimizer on and the fp8
recipe none or delayed, Transformer Engine's FusedAdam owns the master weights (an fp32 master of
bf16 parameters stored as int16 remainders, 2 B; fp16 master 2 B) and reads the gradient buffer
shard directly (no fp32 copy); exp_avg / exp_avg_sq take their dtype (fp32 4, 16-bit 2, fp8 1);
main grads bf16 under bf16 leaves the fp32 accumulation off (arguments.py l. 1204-1216).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app
from planner.emit import checked, search_pins
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.precision import grad_reduce_dtype, state_bytes
from planner.placement.rules import check_layout
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

runner = CliRunner()
LLAMA = Path(__file__).parent / "data" / "configs" / "megatron" / "llama3_8b_h100_fp8.sh"
ON = dict(framework="megatron", zero_stage=1, precision_aware_optimizer=True)


@pytest.mark.parametrize("precision, knobs, expected", [
    # (gradients, optimizer states) B/param, AdamW with the precision-aware optimizer
    ("bf16", {}, (4, 2 + 4 + 4)),                      # fp32 buffer; int16 remainders + m + v fp32
    ("bf16", {"main_grads_dtype": "bf16"}, (2, 2 + 4 + 4)),  # bf16 buffer, read as decoupled grad
    ("bf16", {"main_grads_dtype": "bf16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
     (2, 2 + 2 + 2)),                                  # the DeepSeek-V3 recipe's dtypes
    ("bf16", {"main_params_dtype": "fp16", "exp_avg_dtype": "fp8", "exp_avg_sq_dtype": "fp16"},
     (4, 2 + 1 + 2)),                                  # fp16 master, fp8 m, fp16 v
    ("fp8", {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}, (4, 2 + 2 + 2)),  # delayed recipe
    # another fp8 recipe with an fp32 master: Megatron keeps the fp32 master (4) and hands the
    # optimizer main_grad.float() (an fp32 copy of a 16-bit buffer, 4, at the step only:
    # test_step_gradient_copy_of_megatrons_own_master)
    ("fp8", {"fp8_recipe": "tensorwise", "main_grads_dtype": "bf16", "exp_avg_dtype": "bf16",
             "exp_avg_sq_dtype": "bf16"}, (2, 4 + 2 + 2)),  # Megatron-Bridge's DeepSeek-V3
    ("fp8", {"fp8_recipe": "blockwise"}, (4, 4 + 0 + 4 + 4)),  # fp32 buffer: .float() copies nothing
    ("fp8", {"fp8_recipe": "delayed"}, (4, 2 + 4 + 4)),        # Megatron's default recipe
    ("fp8", {"fp8_recipe": "mxfp8", "main_params_dtype": "fp16"}, (4, 2 + 4 + 4)),  # TE's fp16 master
    ("bf16", {"fp8_recipe": "tensorwise"}, (4, 2 + 4 + 4)),   # no fp8: the recipe does nothing
    ("fp16", {}, (2, 4 + 4 + 4)),                      # fp32 master of fp16 params: no remainders
    ("fp16", {"main_params_dtype": "fp16"}, (2, 2 + 4 + 4)),
])
def test_state_bytes_per_combination(precision, knobs, expected):
    sb = state_bytes(Layout(precision=precision, **ON, **knobs))
    assert (sb.parameters, sb.gradients, sb.optimizer_states) == (2, *expected)


def test_step_gradient_copy_of_megatrons_own_master():
    """The fp32 gradient copy exists only where Megatron owns the fp32 master and the buffer is
    16-bit: 4 B/param at the optimizer step (distrib_optimizer.py l. 2791-2792 @d98e8a6)."""
    own = dict(precision="fp8", fp8_recipe="tensorwise", main_grads_dtype="bf16")
    assert state_bytes(Layout(**ON, **own)).step_gradient_copy == 4
    assert state_bytes(Layout(**ON, precision="fp8", fp8_recipe="blockwise")).step_gradient_copy == 0  # fp32 buffer
    assert state_bytes(Layout(**ON, main_grads_dtype="bf16")).step_gradient_copy == 0  # TE reads the buffer


def test_off_is_megatrons_default_and_other_optimizers_keep_their_bytes():
    """Without the optimizer: fp32 master + m + v (12) beside fp32 main grads (4)."""
    assert state_bytes(Layout(zero_stage=1)).optimizer_states == 4 + 8
    assert state_bytes(Layout(zero_stage=1, precision_aware_optimizer=False)).optimizer_states == 12
    sgd = state_bytes(Layout(zero_stage=1, optimizer="sgd", precision_aware_optimizer=True))
    assert sgd.optimizer_states == 4 + 4  # costed as plain SGD; the rule below rejects it


def test_main_grads_bf16_reduces_in_bf16_under_bf16_and_fp8_only():
    assert grad_reduce_dtype(Layout(**ON, main_grads_dtype="bf16")) == "bf16"
    assert grad_reduce_dtype(Layout(**ON, precision="fp8", main_grads_dtype="bf16")) == "bf16"
    assert grad_reduce_dtype(Layout(**ON, precision="fp16", main_grads_dtype="bf16")) == "fp16"
    assert grad_reduce_dtype(Layout(**ON, main_grads_dtype="fp32")) == "fp32"


def test_optimizer_state_memory_shrinks_by_the_byte_ratio():
    """DeepSeek-V3 at E10's layout (1024 H100, tp 2, pp 8, vpp 4, ep 64, ZeRO-1): every parameter
    keeps the same shard, so the optimizer-state term scales by (2 + 2 + 2) / (4 + 8) = 6/12
    with the recipe's dtypes and main grads bf16 (reducing in bf16 either way; the plain
    optimizer's fp32 gradient copy, 4, lives only at the step)."""
    from planner.cost.memory import stage_memory
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100", gpus=1024)
    base = Layout(dp=64, tp=2, pp=8, vpp=4, ep=64, etp=1, zero_stage=1, sequence_parallel=True,
                  seq_len=4096, global_batch_size=8192, precision="fp8", recompute="selective",
                  grad_reduce_dtype="bf16")
    on = base.replace(grad_reduce_dtype=None, precision_aware_optimizer=True, main_grads_dtype="bf16",
                      exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    before, after = stage_memory(model, cluster, base, 0), stage_memory(model, cluster, on, 0)
    assert after.optimizer_states == pytest.approx(before.optimizer_states * 6 / 12, rel=1e-9)
    assert after.gradients == before.gradients


@pytest.mark.parametrize("layout, words", [
    (Layout(zero_stage=1, exp_avg_dtype="bf16"), "needs the precision-aware optimizer"),
    (Layout(zero_stage=1, main_params_dtype="fp16"), "needs the precision-aware optimizer"),
    (Layout(**{**ON, "zero_stage": 0}), "distributed optimizer"),
    (Layout(**ON, optimizer="sgd"), "only with Adam"),
    (Layout(**{**ON, "dp": 8, "zero_stage": 3}, precision="fp8", fp8_recipe="tensorwise"), "decoupled_grad"),
    (Layout(**ON, main_grads_dtype="bf16", grad_reduce_dtype="fp32"), "grad_reduce_dtype=fp32"),
    (Layout(framework="deepspeed", zero_stage=1, precision_aware_optimizer=True), "only Megatron-LM"),
    (Layout(framework="torchtitan", dp=2, zero_stage=3, exp_avg_sq_dtype="fp8"), "only Megatron-LM"),
    (Layout(framework="deepspeed", zero_stage=1, precision="fp8", fp8_recipe="tensorwise"),
     "fp8 recipe"),
    (Layout(zero_stage=1, precision="bf16", fp8_recipe="blockwise"), "no effect"),
])
def test_megatrons_assertions_are_violations_with_a_fix(layout, words):
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=layout.dp)
    found = [v for v in check_layout(model, cluster, layout)
             if v.rule in ("precision_aware_optimizer", "fp8_recipe_without_fp8")]
    assert found and any(words in v.message for v in found) and all(v.fix for v in found)


def test_a_valid_combination_breaks_no_rule():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=1)
    layout = Layout(**ON, main_grads_dtype="bf16", exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    assert not [v for v in check_layout(model, cluster, layout) if v.rule == "precision_aware_optimizer"]


def test_layout_rejects_a_dtype_the_knob_does_not_take():
    with pytest.raises(SpecError) as err:
        Layout(main_params_dtype="bf16")  # Megatron: --main-params-dtype fp32 | fp16
    assert err.value.key == "main_params_dtype"
    with pytest.raises(SpecError):
        Layout(precision_aware_optimizer="yes")


@pytest.mark.parametrize("args, key", [
    (["--exp-avg-dtype", "int4"], "--exp-avg-dtype"),
    (["--main-grads-dtype", "bf16"], "--main-grads-dtype"),  # without the optimizer
    (["--framework", "deepspeed", "--precision-aware-optimizer"], "--precision-aware-optimizer"),
    (["--precision-aware-optimizer", "--optimizer", "sgd"], "--precision-aware-optimizer"),
    (["--precision", "fp8", "--fp8-recipe", "tensorwise", "--exp-avg-dtype", "bf16"], "--exp-avg-dtype"),
    (["--fp8-recipe", "current"], "--fp8-recipe"),
])
def test_plan_refuses_bad_input_with_exit_2(args, key):
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", *args])
    assert result.exit_code == 2, result.output
    assert key in result.output and "Traceback" not in result.output


def _read(text: str, **options):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text)
        return read_target(path, **options)


OPTIONS = dict(model=None, cluster="dgx-h100", gpus=None, seq_len=None)


def test_megatron_reader_takes_the_flags():
    text = LLAMA.read_text().replace("--grad-reduce-in-bf16", "")
    flags = (" --use-distributed-optimizer --use-precision-aware-optimizer --main-grads-dtype bf16"
             " --exp-avg-dtype bf16 --exp-avg-sq-dtype fp8 --main-params-dtype fp16")
    layout = _read(text.replace("--bf16", "--bf16" + flags), **OPTIONS).layout
    assert (layout.precision_aware_optimizer, layout.main_params_dtype, layout.main_grads_dtype,
            layout.exp_avg_dtype, layout.exp_avg_sq_dtype) == (True, "fp16", "bf16", "bf16", "fp8")
    assert grad_reduce_dtype(layout) == "bf16"
    plain = _read(text, **OPTIONS).layout
    assert (plain.precision_aware_optimizer, plain.exp_avg_dtype) == (None, None)
    with pytest.raises(SpecError) as err:
        _read(text.replace("--bf16", "--bf16 --exp-avg-dtype int4"), **OPTIONS)
    assert err.value.key == "--exp-avg-dtype"


def test_megatron_reader_finds_main_grads_bf16_with_fp32_accumulation():
    """arguments.py l. 1209-1211 asserts main grads fp32 with --accumulate-allreduce-grads-in-fp32."""
    text = LLAMA.read_text().replace("--grad-reduce-in-bf16", "").replace(
        "--bf16", "--bf16 --use-distributed-optimizer --use-precision-aware-optimizer "
                  "--main-grads-dtype bf16 --accumulate-allreduce-grads-in-fp32")
    assert _read(text, **OPTIONS).layout.grad_reduce_dtype == "fp32"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text)
        result = runner.invoke(app, ["check", str(path), "-c", "dgx-h100"])
    assert result.exit_code == 1, result.output
    assert "precision_aware_optimizer" in result.output and "grad_reduce_dtype=fp32" in result.output


def test_emitted_script_and_plan_file_read_back_with_the_same_knobs(tmp_path):
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    knobs = {"fp8_recipe": "tensorwise", "precision_aware_optimizer": True,
             "main_grads_dtype": "bf16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework="megatron",
                precision="fp8", precision_knobs=knobs, fixed=search_pins("megatron"), top_k=1)
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert {k: doc["request"][k] for k in knobs} == knobs
    assert "main_params_dtype" not in doc["request"]  # unset knobs stay out of the file
    emitted, verdict = checked(doc, "megatron")
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert "--use-precision-aware-optimizer" in emitted.text
    assert "--exp-avg-sq-dtype bf16" in emitted.text and "--main-params-dtype" not in emitted.text
    assert "--fp8-recipe tensorwise" in emitted.text
    path = tmp_path / "best.plan.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    layout = _read(emitted.text, model="llama-3.1-8b", cluster="dgx-h100", gpus=8,
                   seq_len=4096).layout
    assert {k: getattr(layout, k) for k in knobs} == knobs
    assert layout.zero_stage >= 1  # the distributed optimizer the knob needs


def test_e10_runs_the_recipes_precision_aware_optimizer():
    """E10 (DeepSeek-V3, 1024 H100, Megatron-Bridge fp8 current scaling) inherits the DeepSeek-V3
    recipe's optimizer (fp32 master, bf16 main grads, bf16 moments; RECIPE_OVERRIDES): Megatron
    keeps the fp32 master (4) + 2 + 2 = 8 B/param against 4 + 8 = 12 before, so every stage's
    optimizer term shrinks by 8/12 (the fp32 copy of the bf16 gradients, 4, at the step in both)."""
    from planner.cost.memory import stage_memory
    from planner.validate_training import RECIPE_OVERRIDES, default_rows
    row = next(r for r in default_rows() if r.id == "E10")
    assert {k: getattr(row.layout, k) for k in RECIPE_OVERRIDES["E10"]} == RECIPE_OVERRIDES["E10"]
    assert state_bytes(row.layout).optimizer_states == 4 + 2 + 2
    assert state_bytes(row.layout).step_gradient_copy == 4
    plain = row.layout.replace(fp8_recipe=None, precision_aware_optimizer=None, main_grads_dtype=None,
                               exp_avg_dtype=None, exp_avg_sq_dtype=None)
    assert state_bytes(plain).optimizer_states == 4 + 8
    cluster = load_cluster("dgx-h100", gpus=1024)
    before = stage_memory(row.model, cluster, plain, 3).optimizer_states
    after = stage_memory(row.model, cluster, row.layout, 3).optimizer_states
    assert after == pytest.approx(before * 8 / 12, rel=1e-9)


def test_megatron_fsdp_runs_the_precision_aware_optimizer():
    """Megatron-LM d98e8a6 supports it under Megatron-FSDP v1: training.py l. 2649-2650 sets
    megatron_fsdp_use_decoupled_grad from it, the gradient shard reaches FusedAdam uncast
    (megatron_fsdp/param_and_grad_buffer.py l. 3377-3410), FusedAdam's parameters are the fp32 main
    weight shards (--megatron-fsdp-main-params-dtype fp32) and TE keeps a master copy of them
    (optimizer/__init__.py l. 576-585, only FSDP v2 excluded), whole fp32 for fp32 parameters
    (TE fused_adam.py l. 626: int16 remainders only for bf16 ones). Per parameter, by hand:
    4 main + 4 TE master + 4 + 4 moments = 16 B (12 without the optimizer: 4 main + 8 moments);
    bf16 moments 4 + 4 + 2 + 2 = 12; fp16 master 4 + 2 + 8 = 14; tensorwise fp8 with fp8 moments
    and fp16 master 4 + 2 + 1 + 1 = 8."""
    fsdp = dict(framework="megatron", dp=8, zero_stage=3, precision_aware_optimizer=True, global_batch_size=8)
    assert state_bytes(Layout(**fsdp)).optimizer_states == 16
    assert state_bytes(Layout(**{**fsdp, "precision_aware_optimizer": None})).optimizer_states == 12
    assert state_bytes(Layout(**fsdp, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")).optimizer_states == 12
    assert state_bytes(Layout(**fsdp, main_params_dtype="fp16")).optimizer_states == 14
    assert state_bytes(Layout(**fsdp, precision="fp8", fp8_recipe="tensorwise", main_params_dtype="fp16",
                              exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8")).optimizer_states == 8
    assert state_bytes(Layout(**fsdp)).step_gradient_copy == 0          # decoupled, uncast
    assert state_bytes(Layout(**{**fsdp, "zero_stage": 2})).optimizer_states == 16   # optim_grads alike
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    assert not [v for v in check_layout(model, cluster, Layout(**fsdp)) if v.severity == "error"]
    # --main-grads-dtype does nothing there: a warning, and the gradients cost as without it
    grads = Layout(**fsdp, main_grads_dtype="bf16")
    [warning] = [v for v in check_layout(model, cluster, grads) if v.rule == "main_grads_dtype_under_fsdp"]
    assert warning.severity == "warning" and "--megatron-fsdp-main-grads-dtype" in warning.message
    assert state_bytes(grads).gradients == state_bytes(Layout(**fsdp)).gradients
