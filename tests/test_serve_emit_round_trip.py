"""`serve-plan --emit` -> `planner check`: the tool's own engine scripts earn no finding of `check` (issue 10/11,
fresh-user review 7 item 3: a disaggregated vLLM script warned `kv_pool_concurrency` on its own --max-num-seqs,
and ran two unlike decode workers the router cannot weight). TensorRT-LLM has no emitter (`--emit` writes vllm
and sglang only), so there is nothing of it to round-trip."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import cli_run
import pytest

from planner import serve
from planner.check.engine_file import check_launch_file
from planner.serve_validate import load_calibration
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ASK = ("--input-len", "4000", "--output-len", "500")


def _emit_and_check(tmp_path: Path, model: str, cluster: str, gpus: int, engine: str, *extra: str) -> tuple[str, dict]:
    proc = cli_run.planner("serve-plan", "-m", model, "-c", cluster, "--gpus", str(gpus), *ASK, "--engine", engine,
                           *extra, "--emit", engine)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "launch.sh"
    path.write_text(proc.stdout)
    return proc.stdout, check_launch_file(path, model=model, cluster=cluster, gpus=gpus)


@pytest.mark.parametrize("model, cluster, gpus, engine, extra", [
    # the benchmark's questions (bench/run.py SERVE_CASES), aggregated and disaggregated
    ("llama-3.1-70b", "hgx-h200", 8, "sglang", ("--ttft-ms", "2000", "--tpot-ms", "50")),
    ("qwen3-235b-a22b", "hgx-h200", 16, "sglang", ("--weight-dtype", "fp8-block", "--ttft-ms", "2000",
                                                   "--tpot-ms", "50", "--disaggregated")),
    ("deepseek-v3", "hgx-h200", 16, "vllm", ("--weight-dtype", "fp8-block", "--ttft-ms", "2000", "--tpot-ms", "50")),
    # no SLO: the batch sits at what the pool holds for 4,500-token requests, so at the max-model-len rounded up to
    # 8192 the pool holds fewer than --max-num-seqs sequences that long: check notes it, finds nothing
    ("llama-3.1-8b", "dgx-h100", 1, "vllm", ()),
    ("llama-3.1-8b", "dgx-h100", 1, "sglang", ()),
])
def test_emitted_script_passes_check_without_a_finding(tmp_path, model, cluster, gpus, engine, extra):
    text, result = _emit_and_check(tmp_path, model, cluster, gpus, engine, *extra)
    assert result["verdict"] == "pass" and result["violations"] == [], result["violations"]
    # senior review 8 finding 11: several aggregated servers are said to need a load balancer in front of them
    replicas = len(set(re.findall(r"^\s*# .* replica (\d+) of \d+", text, re.M)))
    assert (f"# {replicas} independent servers of one shape " in text) == (replicas > 1), text[:600]


def _decode_commands(text: str) -> list[list[str]]:
    lines = text.splitlines()
    return [shlex.split(lines[i + 1].strip().rstrip("&")) for i, line in enumerate(lines)
            if re.match(r"\s*# .* decode worker \d+ of \d+", line)]


def test_fresh_user_disaggregated_vllm_runs_alike_decode_workers(tmp_path):
    """Fresh-user review 7 item 3: llama-3.1-70b on 16 H100 at 4000/500, TTFT <= 800 ms, TPOT <= 40 ms: the plan
    was 1 x decode tp4 @16 + 1 x decode tp4 @64 (29% / 71% of the traffic), which vllm-router (per-request policies,
    no per-worker weight: serve.ROUTER_SPLIT) cannot realise; its script warned kv_pool_concurrency (--max-num-seqs
    64 with --max-model-len 8192). Now: every decode worker alike (shape and --max-num-seqs), every prefill worker
    alike, and check finds nothing."""
    text, result = _emit_and_check(tmp_path, "llama-3.1-70b", "dgx-h100", 16, "vllm", "--ttft-ms", "800",
                                   "--tpot-ms", "40", "--disaggregated")
    assert result["verdict"] == "pass" and result["violations"] == [], result["violations"]
    decode = _decode_commands(text)
    assert decode and all(_layout(c) == _layout(decode[0]) for c in decode)
    proc = cli_run.planner("serve-plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "16", *ASK,
                           "--ttft-ms", "800", "--tpot-ms", "40", "--disaggregated", "-f", "json")
    rows = json.loads(proc.stdout)["deployment"]["workers"]
    assert [r["role"] for r in rows] == ["prefill", "decode"]  # one kind per role


def _layout(words: list[str]) -> list[str]:
    """A command's flags without its GPUs, ports and environment."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w == "--port":
            skip = True
        elif "=" not in w or w.startswith("--"):
            out.append(w)
    return out


# ---------------------------------------------------------------- the split and the decode refinement

def test_one_prefill_kind_and_one_decode_kind_equal_brute_force():
    """`serve._solve_split` against every (prefill candidate, decode candidate, n_p, n_d) within the GPUs,
    enumerated here: the most requests/s served, min(n_p r_p, n_d r_d) (in milli-requests/s, as the solver
    rounds), r_p a prefill worker's requests/s within --ttft-ms with its queue's wait (usable_per_s; fresh-user
    review 11, finding 1)."""
    spec, hw = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    coefficients = load_calibration()["engines"]["vllm"]["dense"]
    for gpus in (4, 7):
        req = serve.ServeRequest(gpus=gpus, input_len=4000, output_len=300, ttft_ms=1500, tpot_ms=40,
                                 disaggregated=True)
        _, _, sides = serve.worker_candidates(spec, hw, req, coefficients)
        pre, dec = sides["prefill"], sides["decode"]
        best = 0
        for pe, p in pre:
            for de, d in dec:
                for n_p in range(1, gpus // pe["inst"].gpus + 1):
                    for n_d in range(1, (gpus - n_p * pe["inst"].gpus) // de["inst"].gpus + 1):
                        best = max(best, round(min(n_p * p["usable_per_s"], n_d * d["requests_per_s"]) * 1e3))
        split = serve._solve_split(req, pre, dec)
        (i, n_p), = split.prefill.items()
        (j, n_d), = split.decode.items()
        assert n_p * pre[i][0]["inst"].gpus + n_d * dec[j][0]["inst"].gpus <= gpus
        assert round(min(n_p * pre[i][1]["usable_per_s"], n_d * dec[j][1]["requests_per_s"]) * 1e3) == best > 0


def test_pair_counts_by_hand():
    """16 GPUs, prefill tp2 at 1.5 requests/s, decode tp4 at 2 requests/s: n_d = 1 leaves 6 prefill workers
    (9 requests/s) for 2 served; n_d = 2: 4 prefill (6) for 4; n_d = 3: 2 prefill (3) for 3 -- so 2 decode
    workers fed by ceil(4 / 1.5) = 3 prefill workers (4.5 >= 4), 14 GPUs. (At --request-rate the counts are chosen
    with both queues' waits priced, `serve._rate_split`: tests/test_serve_disagg_rate.py.)"""
    req = serve.ServeRequest(gpus=16, input_len=1000, output_len=100, disaggregated=True)
    assert serve._pair_counts(req, 2, 1.5, 4, 2.0) == (3, 2)
    assert serve._pair_counts(replace(req, gpus=5), 2, 1.5, 4, 2.0) is None  # one of each takes 6


def test_decode_worker_concurrency_is_refined_to_every_value():
    """A decode worker's best tokens/s under --tpot-ms over EVERY concurrency (each evaluated alone, here) is among
    the points the search offers (it offered the power-of-two grid only)."""
    spec, hw = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    coefficients = load_calibration()["engines"]["vllm"]["dense"]
    req = serve.ServeRequest(gpus=2, input_len=2000, output_len=300, tpot_ms=9, disaggregated=True)
    inst = serve.sv.Instance(tp=1)
    ev, points = serve._worker_points(spec, hw, req, inst, coefficients, "decode")
    cap = serve.running_cap(req, inst, ev["max_concurrency"], decode_only=True)
    every = [p for b in range(1, cap + 1)
             for p in serve._decode_points(spec, hw, replace(req, concurrency=b), inst, ev["max_concurrency"],
                                           coefficients)]
    best = max(every, key=lambda p: p["tokens_per_s"])
    assert best["concurrency"] not in serve.CONCURRENCY_STEPS  # the SLO binds between grid points
    assert max(p["tokens_per_s"] for p in points) == pytest.approx(best["tokens_per_s"], rel=1e-12)


def test_longest_at_concurrency_by_hand():
    """A pool of 1,000,000 B at 100 B/token (10,000 tokens, no sliding window): 3 sequences fit up to
    floor(10,000 / 3) = 3,333 tokens each; over 2 attention-DP groups of 500,000 B each, 3 is written as 4
    (a multiple of 2: the emitters' cap), 2 per group, 2,500 tokens each; never below the planned context."""
    spec = load_model("llama-3.1-8b")
    mem = serve.sv.ServingMemory(weights=0, activations=0, reserve=0, kv_cache=1_000_000, capacity=2_000_000,
                                 kv_bytes_per_token=100.0, kv_window_bytes=0.0, kv_tokens=10_000, engine="vllm",
                                 budget_fraction=0.9)
    assert serve.longest_at_concurrency(spec, serve.sv.Instance(tp=1), mem, 3, 1000) == 3333
    half = replace(mem, kv_cache=500_000)
    assert serve.longest_at_concurrency(spec, serve.sv.Instance(tp=2, ep=1, adp=2), half, 3, 1000) == 2500
    assert serve.longest_at_concurrency(spec, serve.sv.Instance(tp=1), mem, 20, 1000) == 1000


def test_served_length_is_the_requests_length_rounded_up_not_cut_to_the_batch():
    """--emit's max-model-len (the decision of closing note 7, #10): 4,500-token requests get 8,192 (a power of two)
    even where a worker's pool holds its planned batch only up to 6,000 tokens each (it was cut to 6,000): the
    scheduler bounds what runs at full length, and the comment says so; where the batch fits at 8,192, no word."""
    from planner.emit.engine_launch import served_length
    data = {"request": {"model": "llama-3.1-70b", "max_model_len": 4500},
            "deployment": {"mix": [{"longest_context": 400_000, "longest_at_concurrency": 6000}]}}
    length, why = served_length(data, "vllm")
    assert length == 8192 and "planned batch fits up to 6,000 each" in why and "scheduler" in why
    data["deployment"]["mix"][0]["longest_at_concurrency"] = 9000
    length, why = served_length(data, "vllm")
    assert length == 8192 and "scheduler" not in why
    # the pool's one-sequence bound still caps it (the engines refuse a longer max-model-len at start-up)
    data["deployment"]["mix"][0]["longest_context"] = 7000
    assert served_length(data, "vllm")[0] == 7000


def test_router_over_unlike_decode_workers_is_a_warning(tmp_path):
    """The script fresh-user review 7 got (two tp4-like decode workers at --max-num-seqs 16 and 64 behind one
    vllm-router), on one node with tp1 workers: check warns router_unlike_workers (the router spreads requests
    evenly); alike workers do not."""
    kv = """--kv-transfer-config '{{"kv_connector":"NixlConnector","kv_role":"kv_both"}}'"""
    worker = ("VLLM_NIXL_SIDE_CHANNEL_PORT={side} CUDA_VISIBLE_DEVICES={gpu} vllm serve meta-llama/Llama-3.1-8B-Instruct "
              "--max-model-len 8192 --max-num-seqs {seqs} " + kv + " --port {port} &\n")
    router = ("vllm-router --vllm-pd-disaggregation --prefill http://127.0.0.1:8000 --decode http://127.0.0.1:8001 "
              "--decode http://127.0.0.1:8002 --host 0.0.0.0 --port 30000 &\nwait\n")
    path = tmp_path / "launch.sh"
    for seqs, warned in ((64, True), (16, False)):
        path.write_text(worker.format(side=5600, gpu=0, seqs=1, port=8000) + worker.format(side=5601, gpu=1, seqs=16,
                        port=8001) + worker.format(side=5602, gpu=2, seqs=seqs, port=8002) + router)
        result = check_launch_file(path, cluster="dgx-h100", gpus=8)
        rules = [v["rule"] for v in result["violations"]]
        assert result["verdict"] == "pass" and ("router_unlike_workers" in rules) is warned, result["violations"]
