"""The MFU that plan / explain / check print says what it is (review-senior5 M2) and is the one the
framework's own log prints (review-senior7 M5): model FLOPs (6 x active parameters + attention),
with the attention core counted over the keys a causal query sees under Megatron-LM conventions
(Megatron-LM@d98e8a6 training.py num_floating_point_operations: '/ 2 # causal mask'), without the
discount under torchtitan's and DeepSpeed's (PaLM, Chowdhery et al. 2022, Appendix B; torchtitan@b5bcd76
models/utils.py 'do not account for sparsity in causal attention'; DeepSpeed@edaa722 flops_profiler
_attn_flops_compute), divided by the dense peak of the compute dtype (the catalog's datasheet values);
beside it the other convention's value where they differ by 5% or more, and the value against the
bf16 peak for fp8 (what torchtitan and NVIDIA quote). The commands' returned `mfu` stays PaLM's.

Hand arithmetic, Llama-3.1-8B (32 layers, h 4,096, 32 heads, 8 KV heads, head 128, FFN 14,336,
vocabulary 128,256, untied): matmul parameters per layer 2 x 4,096^2 + 2 x 4,096 x 1,024 +
3 x 4,096 x 14,336 = 218,103,808, x 32 = 6,979,321,856, + LM head 525,336,576 = 7,504,658,432;
forward FLOPs per token 2 x that = 15,009,316,864 + attention 32 x 2 x s x 32 x 256 = 524,288 s;
causal attention counts (s + 1) / 2 keys per query on average."""

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.report import mfu_note
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from planner.summary import mfu_basis

runner = CliRunner()
MATMUL_FORWARD = 2 * 7_504_658_432


def _fraction(s: int) -> float:
    return (MATMUL_FORWARD + 524_288 * (s + 1) / 2) / (MATMUL_FORWARD + 524_288 * s)


@pytest.mark.parametrize("seq_len", [4096, 131072])
def test_causal_fraction_by_hand(seq_len):
    gpu = load_cluster("dgx-h100", gpus=8).gpu
    basis = mfu_basis(load_model("llama-3.1-8b"), gpu.peak_tflops, "bf16", seq_len, "megatron")
    assert basis["causal_fraction"] == pytest.approx(_fraction(seq_len), rel=1e-9)
    assert basis["framework_fraction"] == basis["causal_fraction"]
    titan = mfu_basis(load_model("llama-3.1-8b"), gpu.peak_tflops, "bf16", seq_len, "torchtitan")
    assert titan["framework_fraction"] == 1.0
    assert basis["peak_tflops"] == gpu.peak_tflops["bf16"]
    # 4,096: attention 12.5% of the FLOPs, discount 6.3%; 131,072: 82% -> 59% of the value
    assert _fraction(4096) == pytest.approx(0.9374, abs=1e-4)
    assert _fraction(131072) == pytest.approx(0.5896, abs=1e-4)


def _basis(framework: str, **changes) -> dict:
    from planner.summary import FRAMEWORK_CAUSAL, framework_convention
    basis = {"convention": "model FLOPs per PaLM App. B", "peak_precision": "fp8",
             "peak_tflops": 1978.9, "bf16_peak_tflops": 989.4, "causal_fraction": 0.5,
             "framework": framework, "framework_convention": framework_convention(framework)}
    basis = {**basis, **changes}
    return {**basis, "framework_fraction": basis["causal_fraction"] if FRAMEWORK_CAUSAL[framework] else 1.0}


def test_note_names_the_convention_the_peak_and_the_other_values():
    note = mfu_note(_basis("torchtitan"), 0.40, "#1")
    assert note.startswith("MFU, TFLOP/s: PaLM App. B model FLOPs, as torchtitan logs them (6 x active params "
                           "+ attention, no causal discount, no recompute) / dense fp8 peak 1,979 TFLOP/s; #1: ")
    assert "20.0% with causal attention FLOPs (Megatron-LM's)" in note
    assert f"{100 * 0.40 * 1978.9 / 989.4:.1f}% of the bf16 peak (989)" in note  # 80.0%
    # Megatron-LM: the figure is causal already; the other one is PaLM's (0.40 before the discount)
    megatron = mfu_note(_basis("megatron"), 0.40, "#1")
    assert megatron.startswith("MFU, TFLOP/s: model FLOPs with causal attention, as Megatron-LM logs them")
    assert "#1: 40.0% without the causal discount (PaLM App. B, torchtitan's)" in megatron
    assert f"{100 * 0.40 * 0.5 * 1978.9 / 989.4:.1f}% of the bf16 peak" in megatron  # 40.0%
    # bf16, short sequence (discount under 5%): the convention only
    plain = mfu_note(_basis("deepspeed", peak_precision="bf16", peak_tflops=989.4, causal_fraction=0.97), 0.4)
    assert plain == ("MFU, TFLOP/s: PaLM App. B model FLOPs, as DeepSpeed's flops profiler counts them (6 x "
                     "active params + attention, no causal discount, no recompute) / dense bf16 peak 989 TFLOP/s")


def test_explain_prints_the_convention_under_its_mfu():
    args = ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--zero-stage", "2",
            "--precision", "fp8"]  # ZeRO-1 with TE's fp8 weight workspace (13 GiB) does not fit: no step
    data = json.loads(runner.invoke(app, [*args, "--format", "json"]).output)
    basis, mfu = data["mfu_basis"], data["time_s"]["mfu"]
    assert basis["peak_precision"] == "fp8" and basis["causal_fraction"] == pytest.approx(_fraction(4096))
    table = runner.invoke(app, args, env={"COLUMNS": "400"}).output
    causal = mfu * _fraction(4096)
    assert f"MFU {100 * causal:.1f}%" in table  # Megatron-LM conventions: the causal figure
    assert (f"MFU, TFLOP/s: model FLOPs with causal attention, as Megatron-LM logs them (6 x active params + "
            f"attention over the keys a causal query sees, no recompute) / dense fp8 peak "
            f"{basis['peak_tflops']:,.0f} TFLOP/s; {100 * mfu:.1f}% without the causal discount (PaLM App. B, "
            f"torchtitan's), {100 * causal * basis['peak_tflops'] / basis['bf16_peak_tflops']:.1f}% of the "
            f"bf16 peak") in table


@pytest.fixture(scope="module")
def long_context_plan():
    """senior7 M5: Llama-3.1-8B at 131,072 tokens on 8 H100 (seq 131,072: attention 82% of the FLOPs)."""
    args = ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "131072",
            "--global-batch-size", "8", "--top", "1", "--fix", "tp=8", "--fix", "cp=1"]
    data = json.loads(runner.invoke(app, [*args, "--format", "json"]).output)
    return args, data


def test_plan_table_prints_megatrons_causal_mfu_at_long_context(long_context_plan):
    """The column is what Megatron-LM logs for the run, the PaLM figure (62% in the review) beside it:
    MFU x causal fraction, 0.5896 at 131,072 tokens (hand arithmetic above)."""
    args, data = long_context_plan
    plan = data["plans"][0]
    causal = plan["mfu"] * _fraction(131072)
    row = next(line for line in runner.invoke(app, args, env={"COLUMNS": "200"}).output.splitlines()
               if line.startswith("1 "))
    cells = [c.strip() for c in row.split("│")]
    assert cells[-2] == f"{100 * causal:.1f}%" and cells[-3] == f"{plan['tflops_per_gpu'] * _fraction(131072):.0f}"
    assert causal < 0.6 * plan["mfu"]


def test_torchtitan_plan_table_prints_palms_mfu():
    """torchtitan logs 6N + 6 L H (d_qk + d_v) s per token, no causal discount: the column is the
    returned mfu itself."""
    args = ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--top", "1",
            "--framework", "torchtitan"]
    plan = json.loads(runner.invoke(app, [*args, "--format", "json"]).output)["plans"][0]
    row = next(line for line in runner.invoke(app, args, env={"COLUMNS": "200"}).output.splitlines()
               if line.startswith("1 "))
    assert [c.strip() for c in row.split("│")][-2] == f"{100 * plan['mfu']:.1f}%"


def test_every_framework_names_its_mfu_convention():
    from planner.placement.layout import FRAMEWORKS
    from planner.summary import FRAMEWORK_CAUSAL
    assert set(FRAMEWORK_CAUSAL) == set(FRAMEWORKS)
