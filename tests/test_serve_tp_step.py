"""The serving step's costs that tensor parallelism does not divide (senior review 5, H1): the TP all-reduces of the
decode step and of the prefills that land in it, the engine's host work per running request, and the step's
roofline floor. Hand arithmetic below; the last test checks serve-plan's pick against the measured SGLang rows."""

from __future__ import annotations

import functools

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cost import serving as sv
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
H100 = load_cluster("dgx-h100", gpus=1).gpu  # prefill costed per operator (cost.serving.prefill_forward_s)
LLAMA_8B = load_model("llama-3.1-8b")  # 32 layers, hidden 4096


def _terms(inst: sv.Instance, concurrency: int = 256) -> dict[str, float]:
    return sv.latency_terms(LLAMA_8B, inst, hbm_bytes_per_s=3.35e12, peak_flops=989e12, gpu=H100, weight_format="bf16",
                            kv_dtype="bf16", concurrency=concurrency, input_len=1024, output_len=512,
                            max_concurrency_=10_000, link_bytes_per_s=450e9)


def test_tp_allreduce_by_hand_does_not_shrink_with_tp():
    """llama-3.1-8b, 512 tokens over 450 GB/s: 2 x 32 all-reduces of 512 x 4096 x 2 B = 4,194,304 B; a ring moves
    2 (t - 1) / t of it per GPU. tp8: 64 x 4,194,304 x 1.75 / 450e9 = 1.04392 ms; tp2: x 1.0 = 0.59652 ms -- more
    TP, more bytes per GPU, while the GEMMs' share falls as 1 / t."""
    assert sv.tp_allreduce_s(LLAMA_8B, sv.Instance(tp=8), 512, 450e9) == pytest.approx(1.043916e-3, rel=1e-5)
    assert sv.tp_allreduce_s(LLAMA_8B, sv.Instance(tp=2), 512, 450e9) == pytest.approx(0.596523e-3, rel=1e-5)
    assert sv.tp_allreduce_s(LLAMA_8B, sv.Instance(tp=1), 512, 450e9) == 0


def test_decode_and_interfering_prefill_allreduces_by_hand():
    """tp8, 256 running requests, 1,024 in / 512 out:
    - a prompt's all-reduces: 64 x 1024 x 4096 x 2 B x 1.75 / 450e9 = 2.08783 ms (TTFT, as before);
    - the prompts that land in one decode step: 256 / 512 = 0.5 of a prompt a step -> 1.04392 ms (TPOT);
    - the decode step's own: 64 x 256 x 4096 x 2 B x 1.75 / 450e9 = 0.52196 ms (TPOT);
    - pp 2: two micro-batches of 128 tokens, each through all 32 layers (16 a stage): 0.26098 ms;
    - the host works for all 256 running requests a step, whatever tp or pp."""
    terms = _terms(sv.Instance(tp=8))
    assert terms["prefill_allreduce_s"] == pytest.approx(2.087831e-3, rel=1e-5)
    assert terms["interference_allreduce_s"] == pytest.approx(1.043916e-3, rel=1e-5)
    assert terms["decode_allreduce_s"] == pytest.approx(0.521958e-3, rel=1e-5)
    assert terms["running_requests"] == 256
    piped = _terms(sv.Instance(tp=8, pp=2))
    assert piped["decode_allreduce_s"] == pytest.approx(0.260979e-3, rel=1e-5)
    assert piped["running_requests"] == 256
    alone = _terms(sv.Instance(tp=1))
    assert alone["interference_allreduce_s"] == alone["decode_allreduce_s"] == 0
    assert alone["running_requests"] == 256


def test_predict_latency_adds_the_allreduces_unfitted_and_counts_requests_in_us():
    """Every coefficient 0 but 30 us per running request: TPOT = 1 ms decode all-reduces + 2 ms interfering
    prefills' all-reduces + 100 x 30 us = 6 ms; TTFT carries none of them. The roofline floor (10 ms) wins
    over a smaller sum."""
    names = (*sv.TTFT_TERMS, *sv.TPOT_TERMS, "hop_s", "moe_exchange_prefill_s", "moe_exchange_decode_s",
             "prefill_allreduce_s", "decode_allreduce_s", "interference_allreduce_s", "decode_floor_s")
    terms = dict.fromkeys(names, 0.0)
    terms.update(decode_allreduce_s=1e-3, interference_allreduce_s=2e-3, running_requests=100)
    coefficients = {"ttft": dict.fromkeys(sv.TTFT_TERMS, 0.0), "tpot": dict.fromkeys(sv.TPOT_TERMS, 0.0)}
    coefficients["tpot"]["running_requests"] = 30.0
    ttft, tpot = sv.predict_latency(terms, coefficients)
    assert tpot == pytest.approx(6e-3) and ttft == 0
    terms["decode_floor_s"] = 10e-3
    assert sv.predict_latency(terms, coefficients)[1] == pytest.approx(10e-3)


def test_decode_floor_by_hand():
    """decode_floor_s: the larger of the step's HBM time (at the achievable 0.80 of the datasheet bandwidth,
    BabelStream: cost.serving.achievable_hbm_fraction) and its FLOP time at peak. llama-3.1-8b tp8 bf16, one
    client: the weight read binds, at least 1 / 8 of 16.06e9 B / (0.80 x 3.35e12 B/s) = 0.749 ms, while its FLOPs
    take 2 x 8.03e9 / 8 / 989e12 = 2 us. At 1e-3 of the FLOP peak (989 GFLOP/s) and 256 clients the FLOPs bind:
    256 x 2 x 6.98e9 (non-embedding params) / 8 / 989e9 = 0.45 s, far above the 2 ms of bytes."""
    one = _terms(sv.Instance(tp=8), concurrency=1)
    assert one["decode_floor_s"] == one["decode_memory_s"] == pytest.approx(0.749e-3, rel=0.05)
    slow = sv.latency_terms(LLAMA_8B, sv.Instance(tp=8), hbm_bytes_per_s=3.35e12, peak_flops=989e9, gpu=H100,
                            weight_format="bf16", kv_dtype="bf16", concurrency=256, input_len=1024, output_len=512,
                            max_concurrency_=10_000, link_bytes_per_s=450e9)
    assert slow["decode_floor_s"] == slow["decode_compute_s"] > 0.45


@functools.lru_cache(maxsize=None)
def _sglang_8b_plans() -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "planner", "serve-plan", "-m", "llama-3.1-8b", "-c", "hgx-h200",
                           "--gpus", "8", "--input-len", "1000", "--output-len", "1000", "--engine", "sglang",
                           "--tpot-ms", "40", "--weight-dtype", "fp8-block", "--top", "6", "-f", "json"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["plans"]


def test_serve_plan_8b_on_8_h200_sglang_picks_tp1_replicas_as_the_measurements_do():
    """SGLang, Llama-3.1-8B fp8 (block), 8 H200, 1,000 in / 1,000 out (serving_measurements.csv):
    - ..._1000x1000_c352_tp1_epnone_9: TTFT 938.6 ms, TPOT 36.55 ms -> 352 x 1000 / (0.9386 + 999 x 0.03655) / 1
      GPU = 9,398 output tokens/s/GPU;
    - ..._1000x1000_c512_tp4_epnone_11: TTFT 2,215.55 ms, TPOT 24.88 ms -> 512,000 / 27.071 / 4 = 4,728.
    Under TPOT <= 40 ms the measured best is tp1 replicas at twice tp4's tokens/s/GPU; the plan (one tp8 or 2 x tp4
    before the per-request host term) must be tp1 replicas (its tp4 alternative below half of it: the strict xfail
    below)."""
    best = _sglang_8b_plans()[0]
    assert best["parallelism"]["tp"] == 1 and best["parallelism"]["replicas"] == 8
    # at the measured concurrency (352 per tp1 instance) the prediction is the measured 9,398 within 20%
    # (the plan itself runs the concurrency its TPOT limit allows, not the measured one). It was +13.5% before the
    # prefill was costed per operator (cost.serving.prefill_forward_s), +15.2% after: the TPOT is unchanged (32.5 ms
    # against 36.55 measured), serve-plan's steady-state TTFT at 352 clients fell from 519 to 46 ms (SGLang's
    # fitted weights_per_chunk_s, 5.7 over FLOPs at the peak, is 0 over the per-operator forward). Since the
    # interfering prefills are costed at their per-operator forward (coefficient >= 1, 2026-12) the TPOT at 352 is
    # 41.0 ms (+12%), above the 40 ms limit, so the point is taken without --tpot-ms (the measurement had none).
    pinned = subprocess.run([sys.executable, "-m", "planner", "serve-plan", "-m", "llama-3.1-8b", "-c", "hgx-h200",
                             "--gpus", "8", "--input-len", "1000", "--output-len", "1000", "--engine", "sglang",
                             "--weight-dtype", "fp8-block", "--fix", "tp=1", "--concurrency",
                             "352", "-f", "json"], capture_output=True, text=True, cwd=ROOT)
    assert json.loads(pinned.stdout)["plans"][0]["tokens_per_s_per_gpu"] == pytest.approx(9398, rel=0.20)


def test_serve_plan_8b_on_8_h200_sglang_tp4_below_half_of_tp1():
    """The measured tp1 / tp4 ratio above is 9,398 / 4,728 = 1.99; the plan's must be at least 1.8. (A strict xfail
    from ttftload, 2026-12-02, to servefit's refit the same day: with the wave's tail priced in SGLang's TPOT fit,
    its dense per-step costs no longer take what the sweep rows' lock-step waves left.)"""
    plans = _sglang_8b_plans()
    best = plans[0]
    tp4 = [p for p in plans if p["parallelism"]["tp"] == 4 and p["parallelism"]["pp"] == 1]
    assert tp4 and tp4[0]["tokens_per_s_per_gpu"] < best["tokens_per_s_per_gpu"] / 1.8
