"""The prefill roofline of serve-plan's TTFT (cost.serving.ttft_floor_s, prefill_groups, prefill_residence_s):
no plan may carry more prompt tokens than its GPUs can prefill at their peak FLOP/s (fresh-user review 8,
finding 2: llama-3.1-70b tp8 at 8,000-token prompts and 64 clients carried 41.6 requests/s, 6x the bf16 peak;
a DeepSeek-V3 prefill worker with attention DP was charged one group's MoE GEMMs for eight groups' prompts)."""
import json

import pytest

from planner.cost import serving as sv
from tests.cli_run import planner


def test_prefill_residence_by_hand():
    """Schweitzer MVA: C = 8, S = 0.16 s, Z = 0: every prompt queued, R = C S = 1.28 s; C = 2, S = 0.075,
    Z = 5: b = 0.15 - 5 = -4.85, R = (-4.85 + sqrt(4.85^2 + 4 x 0.075 x 5)) / 2 = (-4.85 + 5.002249) / 2."""
    assert sv.prefill_residence_s(8, 0.16, 0.0) == pytest.approx(1.28)
    assert sv.prefill_residence_s(2, 0.075, 5.0) == pytest.approx(0.0761245, abs=1e-6)
    assert sv.prefill_residence_s(1, 0.2, 3.0) == pytest.approx(0.2)


def test_prefill_groups_by_hand():
    """adp 1: one group; a prefill worker (no decode between prompts): all 8; C = 2, S = 0.075, Z = 5:
    R = 0.0761245, X = 2 / 5.0761245 = 0.394, U = X S = 0.02955, 1 + 7 U = 1.2069."""
    assert sv.prefill_groups(1, 64, 0.1, 5.0) == 1
    assert sv.prefill_groups(8, 1, 0.1, 0.0) == 8
    assert sv.prefill_groups(8, 2, 0.075, 5.0) == pytest.approx(1.2069, abs=1e-3)


def _deployment(*args: str) -> dict:
    result = planner("serve-plan", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["deployment"]


def test_prefill_heavy_load_within_the_peak():
    """llama-3.1-70b (70.6e9 parameters) on 8 H100 (989.4 TFLOP/s bf16 each), 8,000-token prompts, 1 output
    token, 64 clients: requests/s x 8,000 x 2 x 70.6e9 (the GEMMs alone, attention left out) <= 8 x 989.4e12."""
    dep = _deployment("-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "8", "--input-len", "8000",
                      "--output-len", "1", "--concurrency", "64")
    assert dep["requests_per_s"] * 8000 * 2 * 70.6e9 <= 8 * 989.4e12


def test_attention_dp_prefill_worker_within_the_peak():
    """DeepSeek-V3 (37e9 active parameters; MLA: 61 layers x 128 heads x (192 q/k + 128 v) head dims) on H200
    (1,978.9 TFLOP/s fp8 dense), a disaggregated SGLang prefill worker dp8 ep8: its prompts' FLOPs -- 2 x 37e9
    per token + causal attention 2 x 61 x 128 x 320 x I / 2 per token -- at most 8 x the fp8 peak."""
    dep = _deployment("-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "32", "--input-len", "8000",
                      "--output-len", "1000", "--ttft-ms", "3000", "--tpot-ms", "40", "--disaggregated",
                      "--engine", "sglang")
    prefill = [w for w in dep["workers"] if w["role"] == "prefill"]
    assert prefill
    per_token = 2 * 37e9 + 2 * 61 * 128 * 320 * 8000 / 2
    for w in prefill:
        assert w["requests_per_s"] * 8000 * per_token <= w["gpus"] * 1978.9e12


def test_fitted_prefill_never_beats_the_peak():
    """Every engine's and class's fitted prefill_one_s coefficient (a prompt's FLOPs at the compute peak) is at
    least 1 in the committed calibration: no fit may credit a prefill faster than the peak
    (serve_validate.LEAST_COEFFICIENT; before it, the MoE fits had 0 and 0.76)."""
    from planner.serve_validate import load_calibration

    for engine, classes in load_calibration()["engines"].items():
        for cls, coefficients in classes.items():
            assert coefficients["ttft"]["prefill_one_s"] >= 1.0, (engine, cls)


def test_long_prompts_within_the_sustained_gemm_rate():
    """senior review 8 H1: llama-3.1-8b (8.03e9 parameters) on one H100 at 8,000-token prompts carried 6.35
    requests/s, 93% of the bf16 peak on prefill GEMMs alone. The GEMMs of the prompts it carries now fit in the
    rate the H100 family's large GEMMs sustain in the training calibration (e_max of calibration/training.yaml,
    fitted on measured training runs), the whole-request utilisation law of cost.serving.ttft_floor_s."""
    from planner.cost import compute
    from planner.specs.cluster import load_cluster

    e_max = compute.efficiency_constants(load_cluster("dgx-h100", gpus=1).gpu).e_max
    dep = _deployment("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "8000",
                      "--output-len", "100")
    assert dep["requests_per_s"] * 8000 * 2 * 8.03e9 <= e_max * 989.4e12
