"""Transformer Engine fp8 memory under Megatron-LM (issue 8 items 1 and 6): the fp8 weight
workspace, `--fp8-param-gather` (fp8 parameters, their transposes, 1 B parameter gathers), the
linear layers' saved inputs in fp8, and Megatron's own fp8 example on 8 H100s.

Every expected value is hand arithmetic on Llama 3.1 8B (Hugging Face config): h 4096, I 14336,
32 heads of 128, 8 KV heads, 32 layers, vocabulary 128,256 (a multiple of 128: no padding),
untied; 8,030,261,248 parameters = 2 x 128,256 x 4096 = 1,050,673,152 vocabulary + 65 x 4096 =
266,240 RMSNorm weights + 6,979,321,856 TE linear weights (32 x (4096 x 6144 qkv + 4096 x 4096
proj + 2 x 4096 x 14336 fc1 + 14336 x 4096 fc2)).

Sources: NVIDIA/TransformerEngine@d0067d0 (module/linear.py, layernorm_linear.py, base.py
`quantize_weight`, tensor/float8_tensor.py, csrc/quantizer.cpp, utils.py
`is_non_tn_fp8_gemm_supported`); NVIDIA/Megatron-LM@d98e8a6 (extensions/transformer_engine.py
`is_first_microbatch`, distributed/param_and_grad_buffer.py uint8 parameter buffer,
training/arguments.py l. 1095-1097, transformer/attention.py l. 428-444); cited per term in
planner/placement/precision.py, planner/cost/memory.py and planner/cost/activations.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app
from planner.cost import activations as act
from planner.cost import comm
from planner.cost.memory import FP8_TRANSPOSE_TERM, FP8_WORKSPACE_TERM, stage_memory
from planner.emit import checked, search_pins
from planner.placement.layout import Layout
from planner.placement.precision import fp8_keeps_transpose, fp8_saved_input_bytes, fp8_weight_bytes
from planner.placement.rules import check_layout
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests/data/configs/megatron/train_llama3_8b_h100_fp8.sh"
runner = CliRunner()

PARAMS, VOCAB, NORMS = 8_030_261_248, 2 * 128_256 * 4096, 65 * 4096
LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 2 * 4096 * 14336 + 14336 * 4096)
GIB = 2**30


def test_the_parameter_split_adds_up():
    assert LINEAR == 6_979_321_856 and LINEAR + VOCAB + NORMS == PARAMS


@pytest.mark.parametrize("recipe, transpose, expected", [
    (None, True, 1 + 1),          # delayed on Hopper: data + transpose
    ("tensorwise", True, 1 + 1),
    ("delayed", False, 1),        # Blackwell: one buffer serves both GEMM layouts
    ("blockwise", True, 1 + 1),   # rowwise + columnwise data (128 x 128 scales ignored)
    ("blockwise", False, 1 + 1),
    ("mxfp8", False, 2 * (1 + 1 / 32)),  # rowwise + columnwise, each with a scale byte per 32
])
def test_fp8_weight_bytes_per_recipe(recipe, transpose, expected):
    assert fp8_weight_bytes(Layout(precision="fp8", fp8_recipe=recipe), transpose=transpose) == expected


def test_transpose_by_gpu():
    assert fp8_keeps_transpose("H100-SXM5-80GB") and fp8_keeps_transpose("H200-SXM-141GB")
    assert not fp8_keeps_transpose("B200-SXM-180GB") and not fp8_keeps_transpose("B200-in-GB200-186GB")


def _memory(cluster="dgx-h100", **knobs):
    model = load_model("llama-3.1-8b")
    layout = Layout(dp=8, zero_stage=1, precision="fp8", global_batch_size=128, seq_len=8192,
                    grad_reduce_dtype="bf16", **knobs)
    return stage_memory(model, load_cluster(cluster, gpus=8), layout, 0)


def test_workspace_is_charged_without_fp8_param_gather():
    """TE caches every linear weight's fp8 copy (data + transpose on H100): 2 B x 6.98e9 = 13.0 GiB
    beside the bf16 parameters (2 B x 8.03e9)."""
    m = _memory()
    assert m.transient_terms[FP8_WORKSPACE_TERM] == 2 * LINEAR
    assert FP8_TRANSPOSE_TERM not in m.transient_terms
    assert m.parameters == 2 * PARAMS
    b200 = _memory("dgx-b200")
    assert b200.transient_terms[FP8_WORKSPACE_TERM] == 1 * LINEAR


def test_workspace_splits_with_tp():
    model = load_model("llama-3.1-8b")
    layout = Layout(dp=4, tp=2, zero_stage=1, precision="fp8", global_batch_size=128, seq_len=8192,
                    sequence_parallel=True)
    m = stage_memory(model, load_cluster("dgx-h100", gpus=8), layout, 0)
    assert m.transient_terms[FP8_WORKSPACE_TERM] == 2 * LINEAR // 2


def test_fp8_param_gather_stores_the_linear_weights_in_fp8():
    """1 B in Megatron's uint8 buffer + 1 B transpose (H100) per linear weight; vocabulary and
    norms bf16; no workspace. mxfp8: MXFP8 row + column data with scales (2 + 1/16 B) instead of
    the bf16 copy, gathered through the gradient buffer."""
    m = _memory(fp8_param_gather=True)
    assert m.parameters == 1 * LINEAR + 2 * (VOCAB + NORMS)
    assert m.transient_terms[FP8_TRANSPOSE_TERM] == 1 * LINEAR
    assert FP8_WORKSPACE_TERM not in m.transient_terms
    assert _memory("dgx-b200", fp8_param_gather=True).transient_terms[FP8_TRANSPOSE_TERM] == 0
    mx = _memory("dgx-b200", fp8_param_gather=True, fp8_recipe="mxfp8")
    assert mx.parameters == int(LINEAR * (2 + 2 / 32)) + 2 * (VOCAB + NORMS)
    assert FP8_TRANSPOSE_TERM not in mx.transient_terms and FP8_WORKSPACE_TERM not in mx.transient_terms


def test_bf16_has_no_fp8_terms():
    m = stage_memory(load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8),
                     Layout(dp=8, zero_stage=1, global_batch_size=128, seq_len=8192), 0)
    assert FP8_WORKSPACE_TERM not in m.transient_terms and FP8_TRANSPOSE_TERM not in m.transient_terms


def test_parameter_gather_moves_one_byte_per_linear_weight_and_two_per_vocabulary_element():
    """The distributed optimizer's once-per-step gather of updated parameters (ZeRO-1): 2 B x
    8.03e9 (less the 65 x 4096 replicated norms, a group of their own) in bf16; with
    --fp8-param-gather 1 B x 6.98e9 linear + 2 B x 1.05e9 vocabulary."""
    model = load_model("llama-3.1-8b")
    def gathered(**knobs):
        layout = Layout(dp=8, zero_stage=1, precision="fp8", global_batch_size=128, seq_len=8192, **knobs)
        return {c.label: c.message_bytes for c in comm.collectives(model, layout)
                if c.label.startswith("parameters.")}
    assert gathered() == {"parameters.update.dense": 2 * (LINEAR + VOCAB),
                          "parameters.update.replicated": 2 * NORMS}
    assert gathered(fp8_param_gather=True) == {"parameters.update.dense": 1 * LINEAR + 2 * VOCAB,
                                               "parameters.update.replicated": 2 * NORMS}


S, H, I, AD, KV = 8192, 4096, 14336, 32 * 128, 8 * 128


@pytest.mark.parametrize("recipe", [None, "delayed", "tensorwise", "mxfp8"])
def test_linear_inputs_are_saved_in_fp8(recipe):
    """One Llama 3.1 8B layer, s 8192, b 1, tp 1 (bytes): bf16 saves norm inputs 2 x 2sh, qkv
    input 2sh, q 2s·ad, k, v 2s·kv each, LSE 4s·32, proj input 2s·ad, fc1 input 2sh, SwiGLU input
    2s·2I, fc2 input 2sI. TE fp8 saves the qkv, fc1 and fc2 inputs at 1 B (1 + 1/32 mxfp8); under
    delayed linear_proj adds its own fp8 copy of the attention output (1 B x s·ad)."""
    model = load_model("llama-3.1-8b")
    kw = dict(seq_len=S, micro_batch_size=1, tp=1)
    bf16 = act.layer_activation_bytes(model, 0, **kw)
    assert bf16.total == S * (2 * 2 * H + 2 * H + 2 * AD + 2 * 2 * KV + 4 * 32 + 2 * AD + 2 * H + 2 * 2 * I + 2 * I)
    if recipe is None:
        return
    fp8 = act.layer_activation_bytes(model, 0, fp8_recipe=recipe, **kw)
    width = 1 + 1 / 32 if recipe == "mxfp8" else 1
    assert fp8.breakdown["attention.qkv_input"] == S * H * width
    assert fp8.breakdown["mlp.fc1_input"] == S * H * width
    assert fp8.breakdown["mlp.fc2_input"] == S * I * width
    assert fp8.breakdown["attention.o_proj_input"] == 2 * S * AD  # the attention's own O, bf16
    copy = S * AD if recipe == "delayed" else 0
    assert fp8.breakdown.get("attention.o_proj_input_fp8", 0) == copy
    assert fp8.total == bf16.total - S * (2 - width) * (H + H + I) + copy
    assert fp8_saved_input_bytes(recipe) == width


def test_korthikanti_gpt_block_is_unchanged_without_fp8():
    """Table 2 (no parallelism): s·b·h·(34 + 5as/h) for a GPT block without FlashAttention."""
    model = load_model("gpt-3-175b")
    s, h, a = 2048, 12288, 96
    got = act.layer_activation_bytes(model, 0, seq_len=s, micro_batch_size=1, tp=1).total
    assert got == s * h * (34 + 5 * a * s / h)


def test_rules():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    def rules(**kw):
        layout = Layout(dp=8, global_batch_size=8, **kw)
        return {(v.rule, v.severity) for v in check_layout(model, cluster, layout) if "fp8_param_gather" in v.rule}
    assert rules(zero_stage=1, precision="fp8", fp8_param_gather=True) == set()
    assert rules(zero_stage=0, precision="fp8", fp8_param_gather=True) == {("fp8_param_gather", "error")}
    assert rules(zero_stage=1, fp8_param_gather=True) == {("fp8_param_gather_without_fp8", "warning")}
    assert ("fp8_param_gather", "error") in rules(zero_stage=1, precision="fp8", fp8_param_gather=True,
                                                  framework="deepspeed")


def _read(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text)
        return read_target(path, model="llama-3.1-8b", cluster="dgx-h100", gpus=None, seq_len=None)


def test_megatron_reader_takes_the_flag():
    text = EXAMPLE.read_text()
    assert _read(text).layout.fp8_param_gather is True
    assert _read(text.replace('"--fp8-param-gather"', "")).layout.fp8_param_gather is None


def test_plan_writes_and_check_reads_the_flag_back():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework="megatron", precision="fp8",
                precision_knobs={"fp8_param_gather": True}, fixed=search_pins("megatron"), top_k=1)
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert doc["request"]["fp8_param_gather"] is True
    emitted, verdict = checked(doc, "megatron")
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert "--fp8-param-gather" in emitted.text
    assert _read(emitted.text).layout.fp8_param_gather is True


def test_explain_takes_the_option():
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                                 "--zero-stage", "1", "--precision", "fp8", "--fp8-param-gather",
                                 "--seq-len", "8192", "--format", "json"])
    assert result.exit_code in (0, 1), result.output  # 1: this layout's memory overflows; read anyway
    import json
    data = json.loads(result.output)
    assert data["parallelism"]["fp8_param_gather"] is True


def test_megatron_fp8_example_passes_check_on_8_h100():
    """Megatron-LM's own examples/llama/train_llama3_8b_h100_fp8.sh (verbatim): tp 1, dp 8, ZeRO-1,
    b 1, s 8192, fp8 delayed (hybrid), --fp8-param-gather, --grad-reduce-in-bf16,
    --cross-entropy-loss-fusion. Per GPU: parameters 1 x 6.98e9 + 2 x (1.05e9 + 266,240) =
    9.08e9 B; gradients 2 x 8.03e9 (bf16 buffer); optimizer fp32 master + m + v 12 / 8 x 8.03e9
    (the fp32 gradient copy, 4 / 8 B, only at the step); fp8 transposes 1 x 6.98e9; 32 layers
    x 8192 tokens x 120,960 B (139,392 B in bf16 less 2 x 4096 + 14336 - 4096 for the qkv / fc1 /
    fc2 inputs at 1 B and proj's fp8 copy) = 29.5 GiB. Total 78.7 GiB of 79.6: passes, at risk.
    (Without the fp8 terms it needed 86.9 GiB.)"""
    result = runner.invoke(app, ["check", str(EXAMPLE), "-c", "dgx-h100", "-m", "llama-3.1-8b",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    import json
    data = json.loads(result.output)
    assert data["verdict"] == "pass" and data["memory_verdict"] == "at_risk"
    target = _read(EXAMPLE.read_text())
    assert (target.layout.fp8_param_gather, target.layout.precision, target.layout.cross_entropy_fusion) == (
        True, "fp8", "native")
    m = stage_memory(target.model, target.cluster, target.layout, 0)
    assert m.parameters == 1 * LINEAR + 2 * (VOCAB + NORMS)
    assert m.gradients == 2 * PARAMS
    assert m.optimizer_states == 12 * PARAMS // 8
    assert m.transient_terms[FP8_TRANSPOSE_TERM] == LINEAR
    assert m.transient_terms["optimizer_step_gradient_copy"] == 4 * PARAMS // 8
    assert 139_392 - (2 * 4096 + 14336 - 4096) == 120_960
    assert m.activation_terms["layers"] == 32 * S * 120_960
    assert m.total <= m.capacity


def test_explain_names_the_workspace_under_transient():
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                                 "--zero-stage", "1", "--precision", "fp8", "--seq-len", "8192",
                                 "--global-batch-size", "128"])
    line = next(x for x in result.output.splitlines() if "incl. fp8 weight workspace" in x)
    assert f"{2 * LINEAR / GIB:.2f}" in line  # 13.00 GiB


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-b200"])
@pytest.mark.parametrize("knobs", [{}, {"fp8_param_gather": True}])
def test_stage_program_memory_carries_the_fp8_terms(cluster, knobs):
    """The stage program's affine model (`StageMemoryModel`) prices the fp8 weight terms per layer
    as `stage_memory` does, on every stage of a pp 4 layout."""
    from planner.cost.memory import stage_layers
    from planner.cost.memory_model import stage_memory_model
    model, spec = load_model("llama-3.1-8b"), load_cluster(cluster, gpus=32)
    layout = Layout(dp=4, pp=4, tp=2, zero_stage=1, precision="fp8", global_batch_size=64, seq_len=4096,
                    sequence_parallel=True, **knobs)
    mm = stage_memory_model(model, spec, layout)
    for s, layers in enumerate(stage_layers(model, layout)):
        exact = stage_memory(model, spec, layout, s, reserve_bytes=0).total
        assert mm.bytes(s, mm.counts(layers, ["none"] * len(layers))) == pytest.approx(exact, abs=64)


def test_torch_fsdp2_turns_the_flag_off_as_megatron_does():
    text = EXAMPLE.read_text().replace("--use-distributed-optimizer", "--use-torch-fsdp2 --ckpt-format torch_dist")
    target = _read(text)
    assert target.layout.fp8_param_gather is None
    assert "fp8_param_gather_off" in {v.rule for v in target.findings}
