"""vLLM runs one `--all2all-backend` per server, and serve-plan's aggregated DP+EP launch asks for
deepep_low_latency: its prompts' expert exchange is priced with the low-latency kernels' traffic (each token once
per chosen expert), not the normal kernels' (once per destination rank), so that emit and pricing agree (senior
review 8 finding 10). SGLang's DeepEP auto mode runs the normal kernels when the batch has prefill: unchanged."""

import pytest

from planner import serve
from planner.cost import serving as sv
from planner.serve_validate import coefficients_for, load_calibration
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model


@pytest.mark.parametrize("engine, low_latency", [("vllm", True), ("sglang", False)])
def test_aggregated_prefill_exchange_follows_the_engines_kernels(engine, low_latency, monkeypatch):
    spec, hw = load_model("deepseek-v3"), load_cluster("hgx-h200")
    inst = sv.Instance(tp=8, pp=1, ep=8, adp=8)
    req = serve.ServeRequest(gpus=8, input_len=2000, output_len=1000, weight_dtype="fp8", engine=engine)
    coefficients = coefficients_for(load_calibration(), engine, spec)
    args = (spec, hw, req, inst, 64, 1000, coefficients)
    ttft, tpot = serve._latency(*args)
    monkeypatch.setitem(serve.LOW_LATENCY_PREFILL, engine, not low_latency)
    ttft_other, tpot_other = serve._latency(*args)
    normal = sv.moe_exchange_s(spec, inst, 2000, decode=False, link_bytes_per_s=sv.link_bytes_per_s(hw, 8))
    # DeepSeek-V3 top-8 of 256 experts at ep8: low-latency sends 8 copies per token, normal kernels one per rank hit,
    # E = 8 (1 - (7/8)^8) = 5.2511; the prompt's exchange grows by 8 / 5.2511 - 1 = 52.35%
    extra = normal * (8 / (8 * (1 - (7 / 8) ** 8)) - 1)
    assert extra > 0 and tpot == tpot_other
    assert (ttft - ttft_other) == pytest.approx(extra if low_latency else -extra, rel=1e-6)


def test_prefill_workers_keep_the_normal_kernels(monkeypatch):
    """A disaggregated prefill worker is launched with deepep_high_throughput: the flag does not apply to it."""
    spec, hw = load_model("deepseek-v3"), load_cluster("hgx-h200")
    inst = sv.Instance(tp=8, pp=1, ep=8, adp=8)
    req = serve.ServeRequest(gpus=8, input_len=2000, output_len=1000, weight_dtype="fp8", engine="vllm")
    coefficients = coefficients_for(load_calibration(), "vllm", spec)
    args = (spec, hw, req, inst, 8, 1000, coefficients)
    worker = serve._latency(*args, prefill_only=True)
    monkeypatch.setitem(serve.LOW_LATENCY_PREFILL, "vllm", False)
    assert serve._latency(*args, prefill_only=True) == worker
