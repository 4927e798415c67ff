"""serve-plan names what a plan takes beyond the serving measurements its latency model is fitted and
evaluated on (senior review 8 finding 7: 16K and 32K prompts planned with no word that the measurements
stop at 8K), and its header says the SLOs are compared with mean TTFT / TPOT."""

from dataclasses import replace

from planner import serve
from planner.serve_validate import load_calibration, load_cases, measured_ranges
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.cli_run import planner

MEASURED = {"measured": {"vllm": {"dense": {
    "input_len": [1000, 8192], "output_len": [100, 8192], "concurrency": [4, 144], "instance_gpus": [1, 8],
    "gpus": ["H100-SXM5-80GB", "H200-SXM-141GB"], "models": ["llama-3.1-70b", "llama-3.1-8b", "qwen3-32b"]}}}}


def _chosen(concurrency: int, gpus: int, replicas: int = 1) -> dict:
    return {"parallelism": {"tp": gpus, "pp": 1, "ep": 1, "dp": 1, "replicas": replicas},
            "concurrency": concurrency, "gpus": gpus * replicas}


def test_ranges_are_the_measurements_min_and_max():
    case = next(c for c in load_cases() if c.engine == "vllm" and c.model == "llama-3.1-8b")
    rows = [replace(case, input_len=1000, concurrency=7), replace(case, input_len=32000, concurrency=2)]
    got = measured_ranges(rows)["vllm"]["dense"]
    assert got["input_len"] == [1000, 32000] and got["concurrency"] == [2, 7]
    assert got["models"] == ["llama-3.1-8b"]


def test_the_shipped_calibration_holds_the_reference_files_ranges():
    """The review counted the longest prompt of serving_measurements.csv: 8,192 tokens."""
    measured = load_calibration()["measured"]
    assert measured == measured_ranges(load_cases())
    assert max(m["input_len"][1] for e in measured.values() for m in e.values()) == 8192


def test_within_the_measurements_no_note():
    req = serve.ServeRequest(gpus=8, input_len=4000, output_len=500)
    spec, hw = load_model("llama-3.1-70b"), load_cluster("hgx-h200")
    # 2 replicas of tp4 @68: 4 GPUs per instance, within 1-8; 68 within 4-144
    assert serve._extrapolation_note(spec, hw, req, MEASURED, [_chosen(68, 4, replicas=2)]) == []


def test_each_quantity_beyond_is_named_with_its_range():
    req = serve.ServeRequest(gpus=16, input_len=16000, output_len=500)
    spec, hw = load_model("qwen2.5-72b"), load_cluster("hgx-h200")
    [note] = serve._extrapolation_note(spec, hw, req, MEASURED, [_chosen(200, 16)])
    for part in ("prompt length 16,000 (measured 1,000-8,192)", "concurrency per instance 200 (measured 4-144)",
                 "GPUs per instance 16 (measured 1-8)", "model qwen2.5-72b (measured: llama-3.1-70b"):
        assert part in note
    assert "output length" not in note and "GPU H200" not in note


def test_cli_long_prompt_names_the_extrapolation_and_mean_slos():
    """The review's command: 32K prompts for llama-3.1-8b under vLLM, measured up to 8,192 tokens."""
    out = planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "32000",
                  "--output-len", "500", "--ttft-ms", "3000", "--tpot-ms", "30")
    assert out.returncode == 0, out.stderr
    text = " ".join((out.stdout + out.stderr).split())
    assert "mean TTFT <= 3000 ms, mean TPOT <= 30 ms" in text
    assert "prompt length 32,000 (measured 1,000-8,192)" in text
