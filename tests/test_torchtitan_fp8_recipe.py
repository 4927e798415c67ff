"""torchtitan's float8 recipe as a framework knob (issue 9 item 2).

At the commit the planner targets (pytorch/torchtitan b5bcd76) the float8 linear converter runs
rowwise scaling only (`Float8LinearConverter.Config.recipe_name: Literal["rowwise",
"rowwise_with_gw_hp"] = "rowwise"` since 6348d93d1, 2026-04-27), with all communication in high
precision (components/quantization/float8.md). The releases before it built tensorwise scaling when
no recipe_name was given, which is what every measured torchtitan fp8 run here ran.

Published numbers (not in any fit): pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md
(@b5bcd76) l. 20-26, Llama 3.1 70B on 256 H100 (Grand Teton, 500 W), FSDP 32, TP 8, torch.compile,
full AC, local batch 16, tokens/s/GPU vanilla TP / AsyncTP: bf16 597.3 / 652.4, float8 tensorwise
809.8 / 942.4, float8 rowwise 599.6 / 624.8.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache

import pytest

from planner import validate_training as vt
from planner.check import read_target
from planner.check.gate import evaluate
from planner.cost.compute import TORCHTITAN_ROWWISE_FP8_NOTE
from planner.emit.torchtitan import write, write_command
from planner.errors import SpecError
from planner.explain import explain
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.cli_run import planner
from tests.test_check_torchtitan import LLAMA_8B, _edit
from tests.test_emit_torchtitan import _hand_plan

E16 = next(r for r in vt.load_rows(vt.EXPERT_CONFIGS) if r.id == "E16")
"""Llama 3.1 70B, 256 GPUs, tp 8 FSDP 32, local batch 16, full recompute, fp8, compile: the same job."""


@lru_cache(maxsize=None)
def _tokens_per_s(recipe: str | None, async_tp: bool, precision: str = "fp8") -> float:
    layout = E16.layout.replace(tp_comm_overlap=async_tp, precision=precision, fp8_recipe=recipe)
    step = explain(load_model("llama-3.1-70b"), load_cluster(E16.cluster, gpus=256), layout,
                   time_despite_memory=True)["time_s"]["step"]
    return layout.global_batch_size * layout.seq_len / 256 / step


def test_rows_that_ran_tensorwise_are_costed_tensorwise():
    rows = [r for r in vt.load_rows(vt.TRAINING_RUNS) + vt.load_rows(vt.EXPERT_CONFIGS)
            if r.not_expressible is None and r.framework == "torchtitan" and r.precision == "fp8"]
    assert {r.id for r in rows} >= {"E16", "E18", "torchtitan-202412-t1-fp8"}
    assert {r.layout.fp8_recipe for r in rows} == {"tensorwise"}


def test_the_default_recipe_is_rowwise_and_costs_more_than_tensorwise():
    """A torchtitan fp8 layout without a recipe is costed as b5bcd76 runs it (rowwise)."""
    assert _tokens_per_s(None, False) == _tokens_per_s("rowwise", False)
    assert _tokens_per_s("rowwise", False) < _tokens_per_s("tensorwise", False)


@pytest.mark.parametrize("async_tp, published_rowwise", [(False, 599.6), (True, 624.8)])
def test_rowwise_is_costed_nearer_its_run_than_tensorwise_pricing_was(async_tp, published_rowwise):
    """Costing b5bcd76's rowwise runs as tensorwise (the planner before this knob) was 31% / 46%
    optimistic on this job (model 787 / 911 tokens/s/GPU); the rowwise cost must be nearer."""
    rowwise, tensorwise = _tokens_per_s("rowwise", async_tp), _tokens_per_s("tensorwise", async_tp)
    assert abs(rowwise - published_rowwise) < abs(tensorwise - published_rowwise)


@pytest.mark.xfail(strict=True, reason=(
    "rowwise under tp 8 ran at bf16 speed (599.6 / 624.8 vs bf16 597.3 / 652.4): the model gives "
    "760 / 876 tokens/s/GPU (+27% / +40%) with rowwise GEMMs at 0.95 of tensorwise (pytorch/pytorch#147971: "
    "'most shapes within 90-100%'; not fitted) and torchao's rowwise cast bytes. What it lacks is "
    "TP-specific: pytorch/torchtitan#1207 'float8 rowwise vanilla TP low "
    "throughput' and #866 'Rowwise with AsyncTP runs at roughly same perf as vanilla TP' (AsyncTP gains "
    "1.04x with rowwise, 1.16x with tensorwise; the model gives AsyncTP 1.13x for both); no mechanism "
    "for either is published"))
@pytest.mark.parametrize("async_tp, published", [(False, 599.6), (True, 624.8)])
def test_rowwise_runs_of_2025_06_are_predicted_within_10_percent(async_tp, published):
    assert _tokens_per_s("rowwise", async_tp) == pytest.approx(published, rel=0.10)


# --- published 8B rowwise runs (evaluation: never fitted; senior review 12 #4) -----------------------

@lru_cache(maxsize=None)
def _8b_tokens_per_s(precision: str, recipe: str | None, batch: int = 1) -> float:
    """Llama 3.1 8B on 8 H100 (dgx-h100), FSDP 8, local batch `batch`, sequence 8192, selective recompute,
    torchtitan; torchao's README ran batch 2."""
    layout = Layout(dp=8, zero_stage=3, micro_batch_size=batch, global_batch_size=8 * batch, seq_len=8192,
                    recompute="selective", framework="torchtitan", precision=precision, fp8_recipe=recipe)
    step = explain(load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8), layout,
                   time_despite_memory=True)["time_s"]["step"]
    return 8 * batch * 8192 / step


def test_rowwise_over_tensorwise_of_torchao_readme_within_10_percent():
    """pytorch/ao@9519beb torchao/float8/README.md "Training benchmarks" (Llama3-8B, 8 H100, FSDP2, sequence
    8192, batch 2, compile): rowwise 6,768 vs tensorwise (fp8 all-gather) 7,689.5 tokens/s = 0.8802; the model
    gives 0.964 (+9.5%), inside the bar, though on the optimistic side the note states."""
    ratio = _8b_tokens_per_s("fp8", "rowwise", 2) / _8b_tokens_per_s("fp8", "tensorwise", 2)
    assert ratio == pytest.approx(6768 / 7689.5, rel=0.10)
    assert ratio > 6768 / 7689.5


def test_the_rowwise_note_quotes_what_the_model_gives():
    """The note's predicted figures are the model's (so a change to the rowwise cost must update it):
    0.96x of tensorwise at batch 2."""
    assert round(_8b_tokens_per_s("fp8", "rowwise", 2) / _8b_tokens_per_s("fp8", "tensorwise", 2), 2) == 0.96
    assert "predicted 0.96x" in TORCHTITAN_ROWWISE_FP8_NOTE


def test_rowwise_note_on_explain_and_check_not_on_tensorwise(tmp_path):
    def notes(**layout):
        base = dict(dp=8, zero_stage=3, micro_batch_size=1, global_batch_size=8, framework="torchtitan")
        return explain(load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8), Layout(**base, **layout),
                       time_despite_memory=True)["assumptions"]
    assert TORCHTITAN_ROWWISE_FP8_NOTE in notes(precision="fp8")   # the default recipe, rowwise
    assert TORCHTITAN_ROWWISE_FP8_NOTE not in notes(precision="fp8", fp8_recipe="tensorwise")
    assert TORCHTITAN_ROWWISE_FP8_NOTE not in notes(precision="bf16")
    rowwise = evaluate(read_target(_float8(tmp_path, new=TABLE + 'recipe_name = "rowwise"\n'),
                                   cluster="dgx-h100", gpus=8))
    assert TORCHTITAN_ROWWISE_FP8_NOTE in rowwise["assumptions"]
    assert TORCHTITAN_ROWWISE_FP8_NOTE not in evaluate(read_target(_float8(tmp_path), cluster="dgx-h100",
                                                                   gpus=8))["assumptions"]   # TOML: tensorwise


def test_high_precision_weight_gradient_costs_more_than_rowwise():
    """rowwise_with_gw_hp runs the weight-gradient GEMM in bf16 (torchao roofline's
    gemm_dtype_grad_weight = bfloat16), a third of the linear FLOPs at half the fp8 rate."""
    assert _tokens_per_s("rowwise_with_gw_hp", False) < _tokens_per_s("rowwise", False)
    assert _tokens_per_s("rowwise_with_gw_hp", False) > _tokens_per_s(None, False, precision="bf16")


# --- check reads the recipe; --emit writes it -----------------------------------------------------

TABLE = "[quantize.linear.float8]\n"


def _float8(tmp_path, old: str = TABLE, new: str = TABLE):
    path = _edit(tmp_path, '# converters = ["float8"]', 'converters = ["float8"]')
    path.write_text(path.read_text().replace(old, new, 1))
    return path


@pytest.mark.parametrize("new, recipe", [
    (TABLE, "tensorwise"),   # the TOML releases' default (recipe_name None -> tensorwise)
    (TABLE + 'recipe_name = "rowwise"\n', "rowwise"),
    ("[float8]\nrecipe_name = \"rowwise_with_gw_hp\"\n\n" + TABLE, "rowwise_with_gw_hp"),
])
def test_toml_reader_takes_the_recipe(tmp_path, new, recipe):
    path = _float8(tmp_path, new=new)
    assert read_target(path, cluster="dgx-h100", gpus=8).layout.fp8_recipe == recipe


def test_toml_reader_refuses_an_unknown_recipe(tmp_path):
    path = _float8(tmp_path, new=TABLE + 'recipe_name = "blockwise"\n')
    with pytest.raises(SpecError, match="blockwise"):
        read_target(path, cluster="dgx-h100", gpus=8)


def test_current_command_line_runs_the_config_functions_recipe(tmp_path):
    """llama3_405b (models/llama3/config_registry.py l. 310-320 @b5bcd76): Float8LinearConverter
    with no recipe_name -> rowwise."""
    path = tmp_path / "train.sh"
    path.write_text("torchrun --nproc_per_node 8 --nnodes 16 -m torchtitan.train "
                    "--module llama3 --config llama3_405b\n")
    layout = read_target(path, cluster="dgx-h100").layout
    assert (layout.precision, layout.fp8_recipe) == ("fp8", "rowwise")


def test_toml_emit_writes_the_costed_recipe_and_reads_back(tmp_path):
    doc = _hand_plan()
    doc["request"].update(precision="fp8", fp8_recipe="rowwise_with_gw_hp")
    text = write(doc).text
    assert tomllib.loads(text)["quantize"]["linear"]["float8"]["recipe_name"] == "rowwise_with_gw_hp"
    path = tmp_path / "emitted.toml"
    path.write_text(text)
    assert read_target(path, model="llama-3.1-8b", cluster="dgx-h100", gpus=16,
                       seq_len=4096).layout.fp8_recipe == "rowwise_with_gw_hp"


def test_command_line_emit_refuses_a_recipe_the_preset_does_not_run():
    doc = _hand_plan()
    doc.update(model="llama-3.1-405b")
    doc["request"].update(precision="fp8", fp8_recipe="tensorwise")
    with pytest.raises(SpecError, match="rowwise"):
        write_command(doc)


# --- plan / explain say which recipe they costed -------------------------------------------------

def test_explain_names_the_costed_recipe():
    out = planner("explain", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--gpus", "8",
                  "--precision", "fp8", "--framework", "torchtitan", "--zero-stage", "3")
    assert out.returncode == 0, out.stderr
    assert "fp8 (rowwise scaling)" in " ".join(out.stdout.split())  # the table may wrap
    assert "--fp8-recipe rowwise" in out.stderr
    assert "torchtitan rowwise fp8 step times are optimistic" in " ".join(out.stdout.split())


def test_a_megatron_recipe_is_refused_under_torchtitan():
    out = planner("explain", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--gpus", "8",
                  "--precision", "fp8", "--framework", "torchtitan", "--zero-stage", "3",
                  "--fp8-recipe", "delayed")
    assert out.returncode == 2 and "rowwise" in out.stdout + out.stderr
