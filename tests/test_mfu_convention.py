"""The MFU that plan / explain / check print says what it is (review-senior5 M2): model FLOPs per
PaLM (Chowdhery et al. 2022, Appendix B: 6 x active parameters + attention without the causal-mask
discount), divided by the dense peak of the compute dtype (the catalog's datasheet values); beside
it the causal-discounted value where it is 5% or more lower, and the value against the bf16 peak
for fp8 (what torchtitan and NVIDIA quote).

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
    basis = mfu_basis(load_model("llama-3.1-8b"), gpu.peak_tflops, "bf16", seq_len)
    assert basis["causal_fraction"] == pytest.approx(_fraction(seq_len), rel=1e-9)
    assert basis["peak_tflops"] == gpu.peak_tflops["bf16"]
    # 4,096: attention 12.5% of the FLOPs, discount 6.3%; 131,072: 82% -> 59% of the value
    assert _fraction(4096) == pytest.approx(0.9374, abs=1e-4)
    assert _fraction(131072) == pytest.approx(0.5896, abs=1e-4)


def test_note_names_the_convention_the_peak_and_the_other_values():
    basis = {"convention": "model FLOPs per PaLM App. B", "peak_precision": "fp8",
             "peak_tflops": 1978.9, "bf16_peak_tflops": 989.4, "causal_fraction": 0.5}
    note = mfu_note(basis, 0.40, "#1")
    assert note.startswith("MFU: model FLOPs per PaLM App. B / dense fp8 peak 1,979 TFLOP/s; #1: ")
    assert "20.0% with causal attention FLOPs" in note
    assert f"{100 * 0.40 * 1978.9 / 989.4:.1f}% of the bf16 peak (989)" in note  # 80.0%
    # bf16, short sequence (discount under 5%): the convention only
    plain = mfu_note({**basis, "peak_precision": "bf16", "peak_tflops": 989.4, "causal_fraction": 0.97}, 0.4)
    assert plain == "MFU: model FLOPs per PaLM App. B / dense bf16 peak 989 TFLOP/s"


def test_explain_prints_the_convention_under_its_mfu():
    args = ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--zero-stage", "2",
            "--precision", "fp8"]  # ZeRO-1 with TE's fp8 weight workspace (13 GiB) does not fit: no step
    data = json.loads(runner.invoke(app, [*args, "--format", "json"]).output)
    basis, mfu = data["mfu_basis"], data["time_s"]["mfu"]
    assert basis["peak_precision"] == "fp8" and basis["causal_fraction"] == pytest.approx(_fraction(4096))
    table = runner.invoke(app, args, env={"COLUMNS": "400"}).output
    assert (f"MFU: model FLOPs per PaLM App. B (6 x active params + attention, no causal discount, "
            f"no recompute) / dense fp8 peak {basis['peak_tflops']:,.0f} TFLOP/s; "
            f"{100 * mfu * _fraction(4096):.1f}% with causal attention FLOPs, "
            f"{100 * mfu * basis['peak_tflops'] / basis['bf16_peak_tflops']:.1f}% of the bf16 peak") in table
