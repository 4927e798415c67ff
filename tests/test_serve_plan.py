"""`planner serve-plan`: serving field cases FC-02, FC-03, FC-18 (tests/data/reference/field_cases.yaml),
the CLI's exits, the latency model's published error, and the program against brute force."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner import serve
from planner.cost import serving as sv
from planner.serve_validate import load_calibration, load_cases, validate, fit
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
FIELD = {c["id"]: c for c in yaml.safe_load((ROOT / "tests/data/reference/field_cases.yaml").read_text())["cases"]}
GIB = 2**30
H100 = load_cluster("dgx-h100")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", "serve-plan", *args], capture_output=True, text=True,
                          cwd=ROOT)


# ---------------------------------------------------------------- field cases

def test_fc02_llama70b_fp8_16k_on_one_h100_fails_with_numbers():
    case = FIELD["FC-02"]["inputs"]
    assert case["max_model_len"] == 16000 and case["gpu_memory_utilization"] == 0.95
    proc = _cli("-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "15000", "--output-len", "1000",
                "--weight-dtype", "fp8", "--mem-fraction", "0.95", "--max-model-len", "16000")
    assert proc.returncode == 1
    # Weights by hand (see test_serve_memory): 68.45e9 fp8 + 2.10e9 bf16 = 67.67 GiB.
    assert "67.67" in proc.stdout
    error = proc.stderr.strip().splitlines()[-1]
    assert "context binds" in error and "16000" in error and "--gpus 2" in error
    # One 16,000-token sequence needs 16,000 x 327,680 B = 4.88 GiB; the pool is smaller.
    spec = load_model("llama-3.1-70b")
    mem = sv.serving_memory(spec, sv.Instance(), capacity=H100.gpu.memory_bytes, weight_format="fp8",
                            kv_dtype="bf16", engine="vllm", fraction=0.95)
    assert mem.kv_cache < 16000 * 327680 < mem.kv_cache + mem.reserve + mem.activations


def test_fc03_reservation_is_not_the_weight_size():
    proc = _cli("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "2048", "--output-len", "2048",
                "--max-model-len", "4096", "--weight-dtype", "fp8", "--engine", "vllm", "--mem-fraction", "0.9",
                "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    mem = data["plans"][0]["memory_bytes"]
    # weights, activation peak and KV pool are separate numbers; together with the reserve they are
    # the 0.9 x capacity vLLM reserves, not the ~8.5 GiB of fp8 weights.
    assert mem["weights"] < 9 * GIB and mem["kv_cache"] > 50 * GIB and mem["activations"] > 0
    assert sum(mem[k] for k in ("weights", "activations", "kv_cache", "reserve")) == pytest.approx(0.9 * mem["capacity"], abs=2)
    assert any("reserves this memory" in n for n in data["notes"])


def test_fc18_gpt_oss_longest_context():
    case = FIELD["FC-18"]
    spec = load_model("gpt-oss-120b")
    full, window = sv.kv_bytes_per_gpu(spec, sv.Instance(), "bf16")
    assert full == 36864  # 18 x 2 x 8 x 64 x 2 B
    # With the reported 1.71 GiB pool the longest context is about 49k tokens ("about 49k").
    pool = int(case["reported"]["kv_pool_gib_at_0_95"] * GIB)
    mem = sv.ServingMemory(weights=0, activations=0, reserve=0, kv_cache=pool, capacity=0, kv_bytes_per_token=full,
                           kv_window_bytes=window, kv_tokens=0, engine="vllm", budget_fraction=0.95)
    longest = sv.longest_context(mem, spec)
    assert longest == (pool - window) // 36864
    assert 49_000 <= longest < 50_000
    # At 0.90 the reported pool is negative: nothing fits.
    assert case["reported"]["kv_pool_gib_at_0_90"] < 0


def test_fc18_refuses_context_beyond_pool_and_proposes_length():
    """gpt-oss-120b, MXFP4 experts, one H100 (79.65 GiB), --max-num-batched-tokens 1024: activations 2.76 GiB, of
    which vLLM's profile-run sampler 1,024 rows (its H100 max_num_seqs default) x 201,088 x 14 B = 2.68 GiB
    (cost.serving.vllm_sampler_bytes), reserve 1.75 GiB. At 0.90: 0.90 x 79.65 - 65.90 - 2.76 - 1.75 = 1.27 GiB of
    pool, 131072 is refused with the safe length (~37k tokens); at 0.88 the pool is negative and 2 GPUs are
    proposed (the field case's "or propose tp=2"). The reports (vLLM 0.10/0.11, torch's 79.19 GiB) had ~7.4 GiB
    of non-KV, non-weight memory (0.9 x 79.19 - 65.97 + 2.14; 0.95 x 79.19 - 65.97 - 1.71); the model now has
    4.51 GiB (2.2 before the sampler term): the rest is not modelled (see the issue's note)."""
    base = ("-m", "gpt-oss-120b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "1024", "--output-len", "1024",
            "--max-model-len", "131072", "--weight-dtype", "mxfp4", "--max-num-batched-tokens", "1024")
    proc = _cli(*base, "--mem-fraction", "0.90")
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert "context binds" in error and "--max-model-len" in error
    safe = int(error.split("--max-model-len ")[1].split()[0])
    assert 36_000 < safe < 38_000  # (0.90 x 79.65 - 65.90 - 2.76 - 1.75) GiB / 36,864 B per token
    proc = _cli(*base, "--mem-fraction", "0.88")
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert "memory binds" in error and "--gpus 2" in error


def test_vllm_sampler_profile_memory_by_hand():
    """vLLM 0.33.0 profiles the sampler at min(max_num_batched_tokens, max_num_seqs) rows of the whole
    (all-gathered) vocabulary, 14 B each (bf16 logits, fp32 copy, fp32 probabilities, fp32 noise):
    gpt-oss-120b 1,024 x 201,088 x 14 = 2,882,797,568 B; llama-3.1-70b at tp 8, 8,192 tokens, 1,024 rows of the
    vocabulary padded to 64 x 8 (128,512): 1,024 x 128,512 x 14 = 1,842,348,032 B on every GPU (not divided by
    tp); A100-80GB's default is 256 rows."""
    oss, llama = load_model("gpt-oss-120b"), load_model("llama-3.1-70b")
    assert sv.vllm_sampler_bytes(oss, sv.Instance(), 1024, 1024) == 2_882_797_568
    assert sv.vllm_sampler_bytes(llama, sv.Instance(tp=8), 8192, 1024) == 1_842_348_032
    kw = dict(weight_format="bf16", kv_dtype="bf16", engine="vllm")
    h100 = sv.serving_memory(llama, sv.Instance(tp=8), capacity=80 * GIB, gpu_name="H100-SXM5-80GB", **kw)
    a100 = sv.serving_memory(llama, sv.Instance(tp=8), capacity=80 * GIB, gpu_name="A100-SXM4-80GB", **kw)
    assert h100.activations - a100.activations == 768 * 128_512 * 14


# ---------------------------------------------------------------- CLI behaviour

def test_bad_input_is_one_line_exit_2():
    # ep=2 on a dense model: bad input as for `plan --fix ep=2` (fresh-user review: it exited 1)
    for args in (("--weight-dtype", "fp3"), ("--concurrency", "4", "--request-rate", "2"), ("--fix", "tp=three"),
                 ("--fix", "ep=2")):
        proc = _cli("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "100", "--output-len", "10", *args)
        assert proc.returncode == 2, args
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_slo_infeasible_names_loosest_slo():
    proc = _cli("-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000", "--output-len", "500",
                "--ttft-ms", "100", "--tpot-ms", "5")
    assert proc.returncode == 1
    assert "SLO binds" in proc.stderr and "--tpot-ms" in proc.stderr


def test_json_schema():
    proc = _cli("-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000", "--output-len", "500",
                "--ttft-ms", "2000", "--tpot-ms", "50", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"status", "objective", "wall_s", "candidates_evaluated"} <= set(data["solver"])
    plan = data["plans"][0]
    assert {"tp", "pp", "ep", "dp", "replicas", "prefill_workers", "decode_workers"} <= set(plan["parallelism"])
    assert {"weights", "activations", "kv_cache", "reserve", "capacity"} <= set(plan["memory_bytes"])
    for key in ("kv_tokens", "max_concurrency", "ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        assert key in plan
    assert plan["ttft_ms"] <= 2000 and plan["tpot_ms"] <= 50
    assert plan["parallelism"]["tp"] * plan["parallelism"]["pp"] * plan["parallelism"]["replicas"] <= 8


# ---------------------------------------------------------------- program vs brute force

@pytest.mark.parametrize("model,cluster,gpus,rate", [("llama-3.1-8b", "dgx-h100", 8, 3.0), ("qwen3-32b", "dgx-h100", 8, 1.5)])
def test_serve_plan_equals_brute_force(model, cluster, gpus, rate):
    """serve-plan's deployment against every one-kind mix (n alike replicas of one candidate: the routers have no
    per-server weight, serve.ROUTER_SPLIT), enumerated here: the most tokens/s on --gpus, the fewest GPUs carrying
    --request-rate (in milli-units, as a plan rounds)."""
    spec, hw = load_model(model), load_cluster(cluster)
    coefficients = load_calibration()["engines"]["vllm"]["dense"]
    req = serve.ServeRequest(gpus=gpus, input_len=2000, output_len=200, tpot_ms=40)
    cands = serve.candidates(spec, hw, req, coefficients)[-1]
    best = max(int(p["tokens_per_s"] * 1000) * n for ev, p in cands for n in range(1, gpus // ev["inst"].gpus + 1))
    data = serve.serve_plan(spec, hw, req)
    mix, = data["deployment"]["mix"]  # one replica kind
    assert abs(mix["tokens_per_s"] - best / 1000) <= 0.06  # plans round to 0.1 tokens/s
    rated = serve.ServeRequest(gpus=gpus, input_len=2000, output_len=200, tpot_ms=40, request_rate=rate)
    cands = serve.candidates(spec, hw, rated, coefficients)[-1]
    fewest = min(ev["inst"].gpus * n for ev, p in cands for n in range(1, gpus // ev["inst"].gpus + 1)
                 if int(p["requests_per_s"] * 1000) * n >= rate * 1000)
    data = serve.serve_plan(spec, hw, rated)
    assert data["deployment"]["gpus"] == fewest and len(data["deployment"]["mix"]) == 1


# ---------------------------------------------------------------- latency accuracy

@pytest.fixture(scope="module")
def cases():
    return load_cases()


def test_calibration_file_is_the_fit_of_the_fit_part(cases):
    shipped = load_calibration()["engines"]
    fresh = fit(cases)
    assert set(fresh) == set(shipped) == {"sglang", "trtllm", "vllm"}
    for engine, classes in fresh.items():
        assert set(classes) == set(shipped[engine]) == {"dense", "moe"}
        for cls, coefficients in classes.items():
            for target in ("ttft", "tpot"):
                for term, value in coefficients[target].items():
                    assert shipped[engine][cls][target][term] == pytest.approx(value, rel=1e-4, abs=1e-6)


def test_evaluation_meets_issue_bars(cases):
    """Error on the EVALUATION part (crc32(id) % 4 == 0; never fitted; each measurement once: 185 of the
    189 evaluation rows are distinct runs) against the issue's bars: TPOT MAPE <= 15 % (9.6 %), TTFT MAPE
    <= 25 % (21.8 %; 26.0 % before each aiconfigurator campaign carried its own start-burst share,
    `cost.serving.UNKNOWN_SHARE_TERMS`, and request path, `cost.serving.PATH_TERMS`). README accuracy table: test_readme_serving_accuracy."""
    summary = validate(cases, part="evaluation")["summary"]
    assert summary["n"] == 185
    assert summary["tpot_mape"] <= 15
    assert summary["ttft_mape"] <= 25


# ---------------------------------------------------------------- planner validate --suite serving

def _validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", "validate", "--suite", "serving", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_validate_serving_json_summary(tmp_path):
    src = (ROOT / "tests/data/reference/serving_measurements.csv").read_text().splitlines()
    header, rows = src[0], [line for line in src[1:] if ",trtllm," in line and "Qwen/Qwen3-32B" in line][:3]
    data = tmp_path / "three.csv"
    data.write_text("\n".join([header, *rows]) + "\n")
    proc = _validate("--data", str(data), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["n"] == 3 and {"ttft_mape", "tpot_mape", "n"} <= set(out["summary"])
    # MAPE by hand from the three rows it printed
    by_hand = sum(abs(r["tpot_pred_ms"] - r["tpot_ms"]) / r["tpot_ms"] for r in out["rows"]) / 3 * 100
    assert out["summary"]["tpot_mape"] == pytest.approx(by_hand, abs=0.05)
    assert set(out["by"]) == {"engine", "gpu", "model"}


def test_validate_bad_data_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,backend,model_path,system,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
                   "x,vllm,some/Model,h100_sxm,1,1,1,1,1,1\n")
    proc = _validate("--data", str(bad))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "model_path" in proc.stderr


# ---------------------------------------------------------------- --disaggregated

def test_disaggregated_one_kind_per_role_and_rate_matches():
    spec, hw = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    req = serve.ServeRequest(gpus=4, input_len=4000, output_len=300, ttft_ms=1500, tpot_ms=40, disaggregated=True)
    data = serve.serve_plan(spec, hw, req)
    workers = data["deployment"]["workers"]
    decode_tokens = sum(w["tokens_per_s"] for w in workers if w["role"] == "decode")
    # one prefill kind and one decode kind (serve.ROUTER_SPLIT): tests/test_serve_emit_round_trip.py compares the
    # split with brute force over such mixes
    assert decode_tokens > 0 and len({w["role"] for w in workers}) == len(workers) == 2
    # the decode workers are reported at the least whole concurrency carrying the prefill side's rate, which can
    # over-serve it by up to one sequence per decode worker, 1 / TPOT tokens/s each (serve._lightest)
    slack = sum(w["workers"] / (w["tpot_ms"] / 1e3) for w in workers if w["role"] == "decode")
    prefill_rate = sum(w["requests_per_s"] for w in workers if w["role"] == "prefill")
    decode_rate = sum(w["requests_per_s"] for w in workers if w["role"] == "decode")
    # rate matching (rounded to 0.001 per row), up to the whole-concurrency step above (serve._lightest: the point
    # returned always carries the share): one more sequence per decode worker, 1 / (O x TPOT) requests/s each
    assert prefill_rate >= decode_rate - slack / 300 - 0.002
    assert data["plans"][0]["parallelism"]["prefill_workers"] >= 1 and data["deployment"]["gpus"] <= 4
    assert data["plans"][0]["ttft_ms"] <= 1500 and data["plans"][0]["tpot_ms"] <= 40


def test_disaggregated_cli_table():
    proc = _cli("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "4", "--input-len", "4000", "--output-len", "300",
                "--ttft-ms", "1500", "--tpot-ms", "40", "--disaggregated")
    assert proc.returncode == 0, proc.stderr
    assert "prefill" in proc.stdout and "decode" in proc.stdout


@pytest.mark.parametrize("model, cluster, gpus, input_len", [
    ("llama-3.1-70b", "hgx-h200", "32", "8000"), ("llama-3.1-8b", "dgx-h100", "16", "4000")])
def test_disaggregated_tp8_finds_a_rate_matched_mix(model, cluster, gpus, input_len):
    """Before: 'no rate-matched prefill + decode mix fits' for any tp >= 4, because a decode worker was offered
    only at its most loaded point: one tp8 decode worker's full rate (~10 requests/s of 70B) needed more tp8
    prefill workers (~2 requests/s each on 8k prompts) than the GPUs left. A decode worker fed less runs a
    smaller batch: it may be chosen at any concurrency meeting the SLO."""
    proc = _cli("-m", model, "-c", cluster, "--gpus", gpus, "--input-len", input_len, "--output-len", "500",
                "--disaggregated", "--fix", "tp=8", "--top", "3", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    workers = data["deployment"]["workers"]
    prefill = sum(w["requests_per_s"] for w in workers if w["role"] == "prefill")
    decode = sum(w["requests_per_s"] for w in workers if w["role"] == "decode")
    # the decode workers run at the load the prefill side feeds them (their batch the least carrying it)
    served = data["deployment"]["requests_per_s"]
    assert 0 < served == pytest.approx(min(prefill, decode), abs=2e-3) and decode >= served - 2e-3
    assert data["deployment"]["gpus"] <= int(gpus) and all(w["parallelism"]["tp"] == 8 for w in workers)
    # every plans row is a whole mix; the first is the deployment, the others within the GPUs too
    first = data["plans"][0]
    assert [(w["role"], w["workers"]) for w in first["workers"]] == [(w["role"], w["workers"]) for w in workers]
    assert first["gpus"] == data["deployment"]["gpus"] and first["tokens_per_s"] == data["deployment"]["tokens_per_s"]
    assert all(p["gpus"] <= int(gpus) and p["tokens_per_s"] <= first["tokens_per_s"] for p in data["plans"])


def test_disaggregated_without_room_names_what_binds_and_the_fix_works():
    """tp8 on 8 GPUs: a disaggregated mix needs at least one prefill and one decode worker, 2 x 8 = 16 GPUs."""
    args = ("-m", "llama-3.1-70b", "-c", "hgx-h200", "--input-len", "8000", "--output-len", "500",
            "--disaggregated", "--fix", "tp=8")
    proc = _cli(*args, "--gpus", "8")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "prefill side binds" in proc.stderr and "--gpus 16 would work" in proc.stderr
    assert _cli(*args, "--gpus", "16").returncode == 0


def test_fix_that_breaks_a_rule_lists_allowed_values():
    proc = _cli("-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000", "--output-len", "500",
                "--fix", "tp=3")
    assert proc.returncode == 1
    assert "allowed tp: 1, 2, 4, 8" in proc.stderr


def test_context_beyond_model_limit_is_bad_input():
    proc = _cli("-m", "qwen3-32b", "-c", "dgx-h100", "--gpus", "8", "--input-len", "40000", "--output-len", "1000")
    assert proc.returncode == 2 and "max_position_embeddings 40960" in proc.stderr


def test_output_file_and_plot_without_matplotlib(tmp_path, monkeypatch):
    out = tmp_path / "serve-plan.yaml"
    proc = _cli("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "1000", "--output-len", "100",
                "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    written = yaml.safe_load(out.read_text())
    assert written["kind"] == "serving-plan" and written["plan"]["parallelism"]["tp"] == 1
    from planner import report
    from planner.errors import SpecError
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as when it is not installed
    with pytest.raises(SpecError, match="matplotlib is not installed"):
        report.plot_pareto({"pareto": [], "request": {}}, str(tmp_path / "x.png"))


def test_without_an_slo_the_latency_of_the_chosen_plan_is_stated():
    """No --ttft-ms/--tpot-ms/--request-latency-ms/--concurrency: tokens/s at any latency, so the
    notes give the chosen instances' TPOT and tokens/s per user (1000 / TPOT ms) and the bound to
    give (senior review: 70B on 8 H200 came back at ~5 tokens/s per user without a word)."""
    spec, hw = load_model("llama-3.1-70b"), load_cluster("hgx-h200", gpus=8)
    out = serve.serve_plan(spec, hw, serve.ServeRequest(gpus=8, input_len=4000, output_len=500))
    (note,) = [n for n in out["notes"] if n.startswith("no --ttft-ms")]
    worst = max(out["deployment"]["mix"], key=lambda p: p["tpot_ms"])
    per_user = worst["tokens_per_s_per_user"]   # printed with :g (7.0 -> "7")
    assert per_user == pytest.approx(1000 / worst["tpot_ms"], rel=0.01)
    assert f"TPOT {worst['tpot_ms']:g} ms" in note and f"({per_user:g} tokens/s per user)" in note
    bounded = serve.serve_plan(spec, hw, serve.ServeRequest(gpus=8, input_len=4000, output_len=500,
                                                            tpot_ms=50))
    assert not [n for n in bounded["notes"] if n.startswith("no --ttft-ms")]


def test_gpu_without_measurements_is_said_with_the_datasheet_numbers_used():
    """serving_measurements.csv has H100/H200 rows only; on an A100 the notes say the latency uses its
    datasheet numbers (hardware/dgx-a100-80g.yaml: 2,039 GB/s HBM, 312 TFLOP/s bf16) under the Hopper-fitted
    efficiencies, and that its error is unknown; on H100 nothing is said."""
    from planner.serve_validate import SYSTEMS, load_cases
    assert {c.cluster for c in load_cases()} == set(SYSTEMS.values()) == {"dgx-h100", "hgx-h200"}
    spec = load_model("llama-3.1-8b")
    req = serve.ServeRequest(gpus=1, input_len=1000, output_len=100)
    a100 = serve.serve_plan(spec, load_cluster("dgx-a100-80g", gpus=1), req)["notes"]
    (note,) = [n for n in a100 if n.startswith("TTFT/TPOT on A100")]
    assert "2,039 GB/s" in note and "bf16 312 TFLOP/s" in note and "unknown" in note
    h100 = serve.serve_plan(spec, load_cluster("dgx-h100", gpus=1), req)["notes"]
    assert not [n for n in h100 if n.startswith("TTFT/TPOT on")]


def test_closed_loop_prompts_per_prefill_by_hand():
    """Schweitzer's approximate MVA (cost.serving.prompts_per_prefill), by hand: C = 2, S = 75 ms,
    Z = 5 s: b = 0.15 - 5 = -4.85, R = (-4.85 + sqrt(23.5225 + 1.5)) / 2 = 0.076125 s, ahead =
    0.076125 / 5.076125 = 0.014997 -> 1.015 prompts; C = 128: b = 4.6, R = (4.6 + sqrt(21.16 + 1.5)) / 2 =
    4.680126 s, ahead = 127 x 4.680126 / 9.680126 = 61.40 -> 62.40."""
    assert sv.prompts_per_prefill(2, 0.075, 5.0) == pytest.approx(1.014997, abs=1e-6)
    assert sv.prompts_per_prefill(128, 0.075, 5.0) == pytest.approx(62.40, abs=0.01)
    # bounds: one prompt alone, never more than the clients, a burst when decode takes no time
    assert sv.prompts_per_prefill(1, 0.075, 5.0) == 1
    assert sv.prompts_per_prefill(64, 1.0, 0.0) == 64
    # staggered arrivals (C S << Z): the request's own prompt only
    assert sv.prompts_per_prefill(16, 0.001, 100.0) == pytest.approx(1.0, abs=0.001)


def test_prefill_allreduce_by_hand_and_no_fitted_collective_latency_in_ttft():
    """llama-3.1-70b tp8, 4,000 tokens over 450 GB/s NVLink: 2 x 80 all-reduces of 4000 x 8192 x 2 B =
    65.536 MB, ring 2 x 7/8 of it per GPU: 160 x 65.536e6 x 1.75 / 450e9 = 40.78 ms; tp1: none. TTFT has no
    fitted per-collective term (an artefact: the count named the model in each engine's data)."""
    spec = load_model("llama-3.1-70b")
    assert sv.tp_allreduce_s(spec, sv.Instance(tp=8), 4000, 450e9) == pytest.approx(0.0407780, rel=1e-5)
    assert sv.tp_allreduce_s(spec, sv.Instance(tp=1), 4000, 450e9) == 0
    assert "collectives" not in sv.TTFT_TERMS and "collectives" in sv.TPOT_TERMS
    terms = {t: 0.0 for t in (*sv.TTFT_TERMS, *sv.TPOT_TERMS, "hop_s", "moe_exchange_prefill_s",
                               "moe_exchange_decode_s", "prefill_allreduce_s")}
    terms["prefill_allreduce_s"] = 0.04
    zero = {"ttft": {t: 0.0 for t in sv.TTFT_TERMS}, "tpot": {t: 0.0 for t in sv.TPOT_TERMS}}
    assert sv.predict_latency(terms, zero) == (pytest.approx(0.04), 0.0)


def test_attention_dp_rows_carry_batch_times_groups_requests():
    """aiconfigurator's batch_size is per attention-DP group: its provenance column gives
    silicon_concurrency=64 for DeepSeek-R1 on 8 H200 with attention DP 8 at batch_size 8."""
    (case,) = [c for c in load_cases() if c.model == "deepseek-v3" and c.engine == "trtllm" and c.inst.adp == 8
               and c.input_len == 8192 and c.ttft_ms == pytest.approx(6421.96, abs=0.01)]
    assert case.concurrency == 8 * 8


def test_attention_dp_prefill_runs_attention_on_one_group():
    """One request's prefill under attention DP: its attention runs on its group's attention-TP GPUs only
    (tp / adp), the experts over all tp (cost.serving.prefill_forward_s: the attention side per GPU of the group,
    the shared side per GPU of the stage): DeepSeek-V3 at tp 8, fp8 on H200. adp 1: the prompt alone on the
    stage; adp 8 on a prefill worker: the other seven groups prefill beside it, and the expert GEMMs (over all 8
    GPUs) run their tokens too -- 8 prompts' shared work as one batch (cost.serving.prefill_groups)."""
    spec = load_model("deepseek-v3")
    gpu = load_cluster("hgx-h200", gpus=8).gpu
    kw = dict(hbm_bytes_per_s=4.8e12, peak_flops=1e15, gpu=gpu, weight_format="fp8-block", kv_dtype="bf16",
              concurrency=8, input_len=1000, output_len=100, max_concurrency_=1000)
    one = sv.prefill_forward_s(spec, sv.Instance(tp=8, ep=8), gpu, "fp8-block", 1000)
    eight = sv.prefill_forward_s(spec, sv.Instance(tp=8, ep=8, adp=8), gpu, "fp8-block", 1000)
    # the same expert / MLP split (tp 8, ep 8); the attention of one group on 1 GPU instead of 8: more per GPU, but
    # under 8x (without sequence parallelism each of 8 attention-TP ranks runs the norms and residual adds on all
    # the prompt's tokens, which a 1-GPU group runs once)
    assert eight.shared == pytest.approx(one.shared, rel=1e-12)
    assert one.attention < eight.attention < 8 * one.attention
    # the eight groups' prompts meet the experts as one batch: 8 x 1,000 tokens' GEMMs (8 x the rows per expert)
    # and one read of the local experts' weights -- no slower than eight prompts one at a time
    batch = sv.prefill_forward_s(spec, sv.Instance(tp=8, ep=8, adp=8), gpu, "fp8-block", 1000, shared_prompts=8)
    assert batch.attention == eight.attention and eight.shared < batch.shared <= 8 * eight.shared
    for adp, worker, shared in ((1, False, one.shared), (8, True, batch.shared)):
        forward = one if adp == 1 else eight
        terms = sv.latency_terms(spec, sv.Instance(tp=8, ep=8, adp=adp), prefill_worker=worker, **kw)
        assert terms["prefill_one_s"] == pytest.approx(forward.attention + shared, rel=1e-12)
    # in a closed loop the other groups prefill only part of the time: between alone and all eight
    mixed = sv.latency_terms(spec, sv.Instance(tp=8, ep=8, adp=8), **kw)["prefill_one_s"]
    alone = eight.attention + eight.shared
    assert alone < mixed < alone + 7 * eight.shared


@pytest.mark.parametrize("model,gpus", [("qwen3-235b-a22b", 8), ("deepseek-v3", 16)])
def test_moe_plans_choose_expert_parallel_with_attention_dp(model, gpus):
    """The issue's MoE questions (4000/500 tokens, TTFT <= 2 s, TPOT <= 50 ms on H200): the chosen
    instances run attention DP with EP over the whole stage (as SGLang / vLLM wide-EP deployments do),
    the expert exchange priced as DeepEP and the note saying which flag turns it on. The same shape
    without EP pays the all-gather/reduce-scatter exchange (cost.serving.moe_exchange_s)."""
    spec, hw = load_model(model), load_cluster("hgx-h200", gpus=gpus)
    fmt, _ = serve.weight_choice(spec, hw, None)  # the checkpoint's format, as `planner serve-plan` costs it
    out = serve.serve_plan(spec, hw, serve.ServeRequest(gpus=gpus, input_len=4000, output_len=500, ttft_ms=2000,
                                                        tpot_ms=50, weight_dtype=fmt))
    par = out["plans"][0]["parallelism"]
    assert par["ep"] == par["tp"] > 1 and par["dp"] > 1
    assert any("DeepEP" in n and "--all2all-backend deepep_low_latency" in n for n in out["notes"])


def test_vllm_throughput_respects_the_per_step_token_budget():
    """Before: tp8 at 3,704 running sequences, ~253k tokens/s through a --max-num-batched-tokens 8192 step
    budget. Each running request needs (1000 + 200) / 200 = 6 tokens a step (1 decode + 5 of prefill), so a
    rank sustains at most 8192 x 200 / 1200 = 1365 sequences; and the tokens an instance takes per second,
    requests/s x 1200, cannot exceed dp x 8192 per step / TPOT."""
    proc = _cli("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "16", "--input-len", "1000", "--output-len", "200",
                "--top", "10", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    for plan in json.loads(proc.stdout)["plans"]:
        par = plan["parallelism"]
        assert plan["concurrency"] <= par["dp"] * 1365, plan
        per_instance_rps = plan["requests_per_s"] / par["replicas"]
        assert per_instance_rps * 1200 <= par["dp"] * 8192 / (plan["tpot_ms"] / 1e3) * 1.001, plan


def test_disaggregated_at_a_request_rate_reports_what_the_mix_serves():
    """--request-rate 5 on tp8: 3 prefill workers (~2.17 requests/s each of 8k prompts) feed 6.5 requests/s;
    the decode worker's slot wait is priced (servefit2); the mix serves the asked 5 requests/s, tokens/s =
    5 x 500, and its capacity is min(prefill, decode) requests/s (it reported the decode worker's full 10.7 requests/s,
    later min(prefill, decode) 5.068, as served: fresh-user review 11, finding 1)."""
    proc = _cli("-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "64", "--input-len", "8000", "--output-len", "500",
                "--disaggregated", "--fix", "tp=8", "--request-rate", "5", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    dep = json.loads(proc.stdout)["deployment"]
    fed = sum(w["requests_per_s"] for w in dep["workers"] if w["role"] == "prefill")
    carried = sum(w["requests_per_s"] for w in dep["workers"] if w["role"] == "decode")
    assert dep["requests_per_s"] == 5 <= dep["capacity_requests_per_s"] == pytest.approx(min(fed, carried), abs=2e-3)
    assert dep["tokens_per_s"] == pytest.approx(5 * 500, rel=1e-3)
    assert dep["utilisation"] == pytest.approx(5 / min(fed, carried), abs=1e-3)
    assert all(w["utilisation"] == pytest.approx(5 / w["requests_per_s"], abs=1e-3) for w in dep["workers"])
    decode = max(w["utilisation"] for w in dep["workers"] if w["role"] == "decode")
    (note,) = [n for n in json.loads(proc.stdout)["notes"] if n.startswith("decode workers at")]
    wait = max(w["queue_wait_ms"] for w in dep["workers"] if w["role"] == "decode")
    assert f"{decode:.1%} of their capacity" in note and f"waits {wait:,.1f} ms" in note and "included in TTFT" in note


def test_pp_that_does_not_divide_the_layers_is_searched_and_costs_the_largest_stage():
    """Fresh-user review: `--gpus 6 --fix pp=3` said "allowed pp: 1, 2, 4" for llama-3.1-70b (80 layers),
    though vLLM and SGLang split layers unevenly (vLLM 0.33.0 `vllm/distributed/utils.py` get_pp_indices:
    80 // 3 = 26 per stage, the remainder 2 one each to stages -2 and -3 -> [27, 27, 26]; SGLang 0.5.23
    `srt/distributed/utils.py` get_pp_indices: the last two -> [26, 27, 27])."""
    spec, hw = load_model("llama-3.1-70b"), load_cluster("hgx-h200")
    # Largest stage by hand (tp 2): 27 layers of q,o 8192x8192, k,v 8192x1024, gate/up/down 8192x28672
    # split over tp, two RMSNorms of 8192 replicated; plus the embedding 128256 x 8192 over tp (vocab
    # 128256 is already a multiple of 64 x tp); bf16. vLLM's first stage (27 layers + embedding) and
    # SGLang's last (27 layers + final norm + LM head, 8192 more) differ by one 16 KiB norm.
    layer = (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672) / 2 + 2 * 8192
    largest = 2 * (27 * layer + 128256 * 8192 / 2)
    for engine in ("vllm", "sglang"):
        out = serve.serve_plan(spec, hw, serve.ServeRequest(gpus=6, input_len=4000, output_len=500,
                                                            engine=engine, fix={"pp": 3}))
        plan = out["plans"][0]
        assert plan["parallelism"]["pp"] == 3 and plan["parallelism"]["tp"] in (1, 2)
        tp2 = [p for p in out["plans"] if p["parallelism"]["tp"] == 2]
        assert tp2 and tp2[0]["memory_bytes"]["weights"] == pytest.approx(largest, abs=2 * 8192 + 1)
    # Unpinned, 6 GPUs: pp 3 (tp 2 x pp 3 = 6) is among the shapes tried; TensorRT-LLM keeps powers of two.
    assert any(s.pp == 3 for s in serve.shapes(spec, hw, 6, {}, "vllm")[0])
    assert not any(s.pp == 3 for s in serve.shapes(spec, hw, 6, {}, "trtllm")[0])


def test_disaggregated_mix_notes_the_aggregated_plan_that_beats_it():
    """Fresh-user review: `--disaggregated` picked a mix at 143 tokens/s/GPU where aggregated serving of
    the same request gives 360.6 and said nothing. The note carries what the aggregated request itself
    reports (a separate serve_plan call), and stays silent when the mix is the better one. At the review's
    4,000 / 500 tokens the mix now wins (260 vs 250 tokens/s/GPU, since a prompt's prefill inside the aggregated
    decode steps and its steady prefill queue are priced at its per-operator forward: `cost.serving.
    prefill_queue_wait_s`), so the note is tested at 2,000 / 2,000, where aggregated serving still wins (809 vs
    777 tokens/s/GPU; at 2,000 / 1,000 the two were within 1% and changed places when the attention core's
    executed work became the causal part, korth #9)."""
    spec, hw = load_model("llama-3.1-70b"), load_cluster("hgx-h200")
    ask = dict(gpus=8, input_len=2000, output_len=2000, ttft_ms=2000, tpot_ms=50)
    agg = serve.serve_plan(spec, hw, serve.ServeRequest(**ask))["deployment"]
    dis = serve.serve_plan(spec, hw, serve.ServeRequest(**ask, disaggregated=True))
    assert dis["deployment"]["tokens_per_s_per_gpu"] < agg["tokens_per_s_per_gpu"]
    [note] = [n for n in dis["notes"] if n.startswith("aggregated serving beats")]
    assert f"gives {agg['tokens_per_s_per_gpu']:g} tokens/s/GPU" in note
    assert f"against this mix's {dis['deployment']['tokens_per_s_per_gpu']:g}" in note
    assert f"on {agg['gpus']} GPUs" in note and "without --disaggregated" in note
    coefficients = serve.coefficients_for(load_calibration(), "vllm", spec)
    req = serve.ServeRequest(**ask, disaggregated=True)
    better = {"gpus": 8, "tokens_per_s_per_gpu": agg["tokens_per_s_per_gpu"] + 0.1}
    assert serve._aggregated_note(spec, hw, req, coefficients, better) == []
    # --request-rate: compared by GPUs. 1 request/s at 2,000 / 1,000: aggregated needs fewer GPUs than the mix.
    rated = dict(ask, output_len=1000, request_rate=1)
    agg_gpus = serve.serve_plan(spec, hw, serve.ServeRequest(**rated))["deployment"]["gpus"]
    dis_rated = serve.serve_plan(spec, hw, serve.ServeRequest(**rated, disaggregated=True))
    assert agg_gpus < dis_rated["deployment"]["gpus"]
    assert any(f"carries 1 requests/s on {agg_gpus} GPUs" in n for n in dis_rated["notes"])
    assert serve._aggregated_note(spec, hw, serve.ServeRequest(**rated, disaggregated=True), coefficients,
                                  {"gpus": agg_gpus, "tokens_per_s_per_gpu": 0.0}) == []
