"""`planner check` of vLLM and SGLang launches: the serving field cases of
tests/data/reference/field_cases.yaml as command lines / config YAML in each engine's format, with
the reported numbers; bad input; and `serve-plan --emit` -> `check` round trips for every serve-plan
bench case, every emitted flag in the engine's recorded flag list."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import cli_run
import pytest
import yaml

from planner.check.engine_file import check_launch_file
from planner.frameworks import sglang as sglang_flags
from planner.frameworks import vllm as vllm_flags

ROOT = Path(__file__).resolve().parents[1]
FIELD = {c["id"]: c for c in yaml.safe_load((ROOT / "tests/data/reference/field_cases.yaml").read_text())["cases"]}
GIB = 2**30
sys.path.insert(0, str(ROOT / "bench"))
from run import SERVE_CASES  # noqa: E402


def _planner(*args: str) -> subprocess.CompletedProcess:
    return cli_run.planner(*args)


def _file(tmp_path: Path, text: str, name: str = "launch.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _model_dir(tmp_path: Path, **fields) -> Path:
    """A local model directory with a Hugging Face config.json (what `vllm serve PATH` reads)."""
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, **fields}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _rules(result: dict, severity: str = "error") -> list[str]:
    return [v["rule"] for v in result["violations"] if v["severity"] == severity]


# ---------------------------------------------------------------- field cases

def test_fc02_vllm_fp8_70b_16k_on_one_h100_fails_with_numbers(tmp_path):
    case = FIELD["FC-02"]["inputs"]
    path = _file(tmp_path, f"vllm serve meta-llama/Llama-3.1-70B --quantization fp8 \\\n"
                           f"  --max-model-len {case['max_model_len']} "
                           f"--gpu-memory-utilization {case['gpu_memory_utilization']}\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=case["gpus"])
    assert result["verdict"] == "fail" and _rules(result) == ["kv_pool_too_small"]
    rec = result["launches"][0]["recomputed"]
    # Weights by hand (test_serve_memory): 68.45e9 fp8 + 2.10e9 bf16 = 67.67 GiB; 327,680 B/token (80 x 2 x 8 x 128 x 2).
    assert round(rec["memory_bytes"]["weights"] / GIB, 2) == 67.67
    assert rec["kv_bytes_per_token"] == 327680
    message = result["violations"][0]["message"]
    assert "16000 needs 4.88 GiB" in message  # 16,000 x 327,680 B = 4.88 GiB
    assert "0.95 x 79.65 GiB" in message and "TOTAL" in message
    # Under 2 GiB short of the weights + one sequence: the pool is smaller than 4.88 GiB.
    assert rec["memory_bytes"]["kv_cache"] < 16000 * 327680
    assert result["violations"][0]["fix"].startswith(f"--max-model-len {rec['longest_context']}")
    assert result["violations"][0]["line"] == 2  # the line of --max-model-len, for CI annotations


def test_fc02_under_sglang_budget_semantics(tmp_path):
    """SGLang's mem_fraction_static holds weights and KV only; activations and CUDA graphs live in
    the (1 - fraction) headroom. At 0.95 the same deployment leaves a pool larger than vLLM's by vLLM's
    activation peak (its profile run, sampler included) + graphs, and one sequence fits; at 0.97 the
    headroom no longer holds SGLang's own."""
    vllm = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B --quantization fp8 "
                                             "--max-model-len 16000 --gpu-memory-utilization 0.95\n", "v.sh"),
                             cluster="dgx-h100", gpus=1)["launches"][0]["recomputed"]["memory_bytes"]
    text = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --quantization fp8 "
            "--context-length 16000 --mem-fraction-static {}\n")
    result = check_launch_file(_file(tmp_path, text.format(0.95)), cluster="dgx-h100", gpus=1)
    mem = result["launches"][0]["recomputed"]["memory_bytes"]
    graphs = mem["reserve"] - 0.75 * GIB  # reserve = non-torch 0.75 GiB + CUDA graphs
    assert mem["kv_cache"] - vllm["kv_cache"] == pytest.approx(vllm["activations"] + graphs, abs=2)
    assert result["verdict"] == "pass"
    proc = _planner("check", str(_file(tmp_path, text.format(0.97), "s97.sh")), "-c", "dgx-h100", "--gpus", "1")
    assert proc.returncode == 1 and "memory_headroom" in proc.stdout and "--mem-fraction-static 0.97" in proc.stdout


def test_fc03_reservation_is_the_budget_not_the_weights(tmp_path):
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --quantization fp8 --max-model-len 4096 "
                           "--gpu-memory-utilization 0.9\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert result["verdict"] == "pass"
    mem = result["launches"][0]["recomputed"]["memory_bytes"]
    assert mem["weights"] < 9 * GIB and mem["activations"] > 0 and mem["kv_cache"] > 50 * GIB
    # weights + activation peak + reserve + KV pool = 0.9 x capacity: what vLLM occupies.
    total = sum(mem[k] for k in ("weights", "activations", "kv_cache", "reserve"))
    assert total == pytest.approx(0.9 * mem["capacity"], abs=2)
    proc = _planner("check", str(path), "-c", "dgx-h100", "--gpus", "1")
    assert proc.returncode == 0 and "weights" in proc.stdout and "activation peak" in proc.stdout
    assert "KV pool" in proc.stdout and "budget 0.9 x 79.65 GiB" in proc.stdout


def _fc05_model(tmp_path):
    case = FIELD["FC-05"]["inputs"]
    # LLaMA-30B (published config): 52 heads, 60 layers, hidden 6656, FFN 17920, vocab 32000.
    return _model_dir(tmp_path, hidden_size=case["hidden_size"], intermediate_size=17920,
                      num_hidden_layers=case["num_hidden_layers"], num_attention_heads=case["num_attention_heads"],
                      num_key_value_heads=case["num_key_value_heads"], vocab_size=case["vocab_size"],
                      max_position_embeddings=2048, torch_dtype="float16")


@pytest.mark.parametrize("tp", [3, 8])
def test_fc05_tp_not_dividing_52_heads_rejected_with_what_works(tmp_path, tp):
    model = _fc05_model(tmp_path)
    path = _file(tmp_path, f"vllm serve {model} --tensor-parallel-size {tp}\n")
    result = check_launch_file(path, cluster="dgx2-v100", gpus=3 if tp == 3 else 8)
    assert result["verdict"] == "fail" and "heads_divisible" in _rules(result)
    v = next(v for v in result["violations"] if v["rule"] == "heads_divisible")
    assert "num_attention_heads 52" in v["message"] and f"--tensor-parallel-size {tp}" in v["message"]
    if tp == 3:
        # 3 V100-32GB: 65 GB of fp16 weights; tp=2 leaves nothing (32.5 GB > 31.7 GiB per GPU), pp=3 fits.
        assert "--tensor-parallel-size 1 --pipeline-parallel-size 3" in v["fix"]
        assert "--tensor-parallel-size 2 (KV pool 0.0 GiB" in v["fix"].split("short of memory")[1]
        assert "with more GPUs: --tensor-parallel-size 4 on 4 GPUs" in v["fix"]  # 52 = 4 x 13
        assert "--tensor-parallel-size 2 (KV pool" not in v["fix"].split("short of memory")[0]


def test_fc05_pp3_passes_and_tp4_on_4_gpus_passes(tmp_path):
    model = _fc05_model(tmp_path)
    for flags, gpus in (("--pipeline-parallel-size 3", 3), ("--tensor-parallel-size 4", 4)):
        path = _file(tmp_path, f"vllm serve {model} {flags} --max-model-len 2048\n", name=f"l{gpus}.sh")
        assert check_launch_file(path, cluster="dgx2-v100", gpus=gpus)["verdict"] == "pass", flags


def test_fc06_tp8_of_28_heads_rejected_offering_tp4_dp2(tmp_path):
    case = FIELD["FC-06"]["inputs"]
    model = _model_dir(tmp_path, hidden_size=case["hidden_size"], intermediate_size=18944,
                       num_hidden_layers=case["num_hidden_layers"], num_attention_heads=case["num_attention_heads"],
                       num_key_value_heads=case["num_key_value_heads"], vocab_size=case["vocab_size"])
    for engine, text in (("vllm", f"vllm serve {model} --tensor-parallel-size 8\n"),
                         ("sglang", f"python -m sglang.launch_server --model-path {model} --tp-size 8\n")):
        result = check_launch_file(_file(tmp_path, text, f"{engine}.sh"), cluster="dgx-h100", gpus=case["gpus"])
        v = next(v for v in result["violations"] if v["rule"] == "heads_divisible")
        assert "num_attention_heads 28" in v["message"]
        tp, dp = (vllm_flags if engine == "vllm" else sglang_flags).FLAG["tp"], \
            (vllm_flags if engine == "vllm" else sglang_flags).FLAG["dp"]
        assert f"{tp} 4 {dp} 2" in v["fix"]


def test_fc07_tp8_over_4_kv_heads_replicates_and_kv_stops_shrinking(tmp_path):
    case = FIELD["FC-07"]["inputs"]
    model = _model_dir(tmp_path, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=case["num_attention_heads"],
                       num_key_value_heads=case["num_key_value_heads"], head_dim=case["head_dim"], vocab_size=128256)
    per_token = {}
    for tp in (4, 8):
        path = _file(tmp_path, f"vllm serve {model} --tensor-parallel-size {tp}\n", f"tp{tp}.sh")
        result = check_launch_file(path, cluster="dgx-h100", gpus=case["gpus"])
        assert result["verdict"] == "pass"
        per_token[tp] = result["launches"][0]["recomputed"]["kv_bytes_per_token"]
        if tp == 8:
            assert any("replicate each KV head on 2 ranks" in w for w in result["warnings"])
    # 32 layers x 2 x 4 heads x 128 x 2 B / 4 ranks = 32,768 B/token per GPU at tp 4 and at tp 8.
    assert per_token[4] == per_token[8] == 32 * 2 * 4 * 128 * 2 / 4
    # A tp that neither divides nor is a multiple of 4 KV heads: rejected naming both.
    (tmp_path / "m6").mkdir()
    model6 = _model_dir(tmp_path / "m6", hidden_size=4608, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=36, num_key_value_heads=4, head_dim=128, vocab_size=128256)
    result = check_launch_file(_file(tmp_path, f"vllm serve {model6} --tensor-parallel-size 6\n", "tp6.sh"),
                               cluster="dgx-h100", gpus=8)
    v = next(v for v in result["violations"] if v["rule"] == "kv_heads_divisible")
    assert "num_key_value_heads 4" in v["message"] and "--tensor-parallel-size 6" in v["message"]


def test_fc08_vocab_padded_rows_reported(tmp_path):
    case = FIELD["FC-08"]["inputs"]
    model = _model_dir(tmp_path, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=case["vocab_size"])
    result = check_launch_file(_file(tmp_path, f"vllm serve {model} --tensor-parallel-size {case['tp']}\n"),
                               cluster="dgx-h100", gpus=8)
    # vLLM pads to a multiple of 64 per rank (pad_vocab_size): 64 x 8 = 512; ceil(250682 / 512) x 512 = 250880.
    assert result["launches"][0]["recomputed"]["vocab_rows"] == 250880


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fc13_ranks_differ_from_product_of_degrees(tmp_path, engine):
    case = FIELD["FC-13"]["inputs"]
    tp, ranks = case["tp"], case["launcher_ranks"]
    text = (f"CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size {tp}\n"
            if engine == "vllm" else
            f"CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size {tp}\n")
    proc = _planner("check", str(_file(tmp_path, text)), "-c", "dgx-h100")
    assert proc.returncode == 1
    assert f"starts {tp * case['pp']} ranks" in proc.stdout and f"gives it {ranks} GPU" in proc.stdout


def test_fc14_tied_embedding_copy_on_the_last_stage(tmp_path):
    case = FIELD["FC-14"]["inputs"]
    model = _model_dir(tmp_path, hidden_size=case["hidden_size"], intermediate_size=8192,
                       num_hidden_layers=case["num_hidden_layers"], num_attention_heads=32, num_key_value_heads=8,
                       vocab_size=case["vocab_size"], tie_word_embeddings=case["tie_word_embeddings"])
    result = check_launch_file(_file(tmp_path, f"vllm serve {model} --pipeline-parallel-size {case['pp']}\n"),
                               cluster="dgx-h100", gpus=2)
    assert any("525,336,576 B" in w for w in result["warnings"])  # 128256 x 2048 x 2 B


def test_fc18_gpt_oss_refuses_default_context_and_proposes_length_or_tp2(tmp_path):
    # As tests/test_serve_plan.py: 65.90 GiB of padded MXFP4 weights (65.97 reported), 2.76 GiB of activations
    # (vLLM's profile-run sampler 2.68 of them) and 1.75 GiB reserve leave a 1.27 GiB pool at 0.90; the reports'
    # ~7.4 GiB of non-KV memory (vLLM 0.10/0.11; the model: 4.51) put theirs at -2.14 (0.90) and 1.71 GiB (0.95).
    case = FIELD["FC-18"]["inputs"]
    path = _file(tmp_path, f"vllm serve openai/gpt-oss-120b --quantization mxfp4 --gpu-memory-utilization 0.90 "
                           f"--max-num-batched-tokens {case['max_num_batched_tokens']}\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    rec = result["launches"][0]["recomputed"]
    assert rec["kv_bytes_per_token"] == 36864  # 18 full layers x 2 x 8 x 64 x 2 B
    assert rec["max_model_len"] == 131072 and "kv_pool_too_small" in _rules(result)
    v = next(v for v in result["violations"] if v["rule"] == "kv_pool_too_small")
    assert v["fix"].startswith(f"--max-model-len {rec['longest_context']}") and rec["longest_context"] < 131072
    two = check_launch_file(path, cluster="dgx-h100", gpus=2)
    assert "--tensor-parallel-size 2 (KV pool" in next(v["fix"] for v in two["violations"]
                                                     if v["rule"] == "kv_pool_too_small")


# ---------------------------------------------------------------- engine-specific rules

def test_unknown_flag_is_an_error_with_the_closest_real_flag(tmp_path):
    # Misspelt (not abbreviated: argparse takes an unambiguous prefix, see below).
    result = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --tensor-paralel-size 1\n"),
                               cluster="dgx-h100")
    v = next(v for v in result["violations"] if v["rule"] == "unknown_flag")
    assert "did you mean --tensor-parallel-size" in v["message"]
    result = check_launch_file(_file(tmp_path, "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B "
                                               "--mem-fracton-static 0.8\n", "s.sh"), cluster="dgx-h100")
    assert "did you mean --mem-fraction-static" in result["violations"][0]["message"]


def test_sglang_documented_tp_dp_abbreviations_are_read_as_the_flags(tmp_path):
    """SGLang's docs write `--tp 8 --dp 8`: its plain argparse parser takes an unambiguous prefix
    (allow_abbrev), and sglang_flags.txt has one flag starting with `--tp` (--tp-size) and one with
    `--dp` (--dp-size). The deprecated --dp-size N --enable-dp-attention is attention DP N inside
    the 8 tp ranks: 8 GPUs, no replicas."""
    assert [f for f in sglang_flags.ALL_FLAGS if f.startswith("--tp")] == ["--tp-size"]
    assert [f for f in sglang_flags.ALL_FLAGS if f.startswith("--dp")] == ["--dp-size"]
    text = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --enable-dp-attention "
            "--dp 8 --mem-fraction-static 0.95\n")
    result = check_launch_file(_file(tmp_path, text), cluster="hgx-h200")
    assert "unknown_flag" not in _rules(result)
    row = result["launches"][0]
    assert row["parallelism"]["tp"] == 8 and row["parallelism"]["dp"] == 8 and row["parallelism"]["replicas"] == 1
    assert row["world"] == 8 and "dp_attention_deprecated" in _rules(result, "warning")
    eq = check_launch_file(_file(tmp_path, text.replace("--tp 8", "--tp=4"), "eq.sh"), cluster="hgx-h200")
    assert eq["launches"][0]["parallelism"]["tp"] == 4


def test_vllm_abbreviations_follow_argparse(tmp_path):
    """vLLM 0.33.0's FlexibleArgumentParser leaves allow_abbrev on: `--tensor-parallel 4` is
    --tensor-parallel-size 4 (its only flag with that prefix); `--dp` starts four flags
    (--dp-supervisor-*) and argparse exits with 'ambiguous option'; `--tp` starts none."""
    model = "vllm serve meta-llama/Llama-3.1-70B "
    short = check_launch_file(_file(tmp_path, model + "--tensor-parallel 4\n"), cluster="hgx-h200")
    assert short["launches"][0]["parallelism"]["tp"] == 4 and "unknown_flag" not in _rules(short)
    dp = check_launch_file(_file(tmp_path, model + "--dp 2\n", "dp.sh"), cluster="hgx-h200")
    v = next(v for v in dp["violations"] if v["rule"] == "unknown_flag")
    assert "ambiguous" in v["message"] and "--dp-supervisor-probe-interval-s" in v["message"]
    tp = check_launch_file(_file(tmp_path, model + "--tp 4\n", "tp.sh"), cluster="hgx-h200")
    assert "is not a flag of vLLM" in next(v for v in tp["violations"] if v["rule"] == "unknown_flag")["message"]


def test_sglang_dp_attention_deprecated_spelling_and_refused_mix(tmp_path):
    base = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --quantization fp8 --tp-size 8 "
    old = check_launch_file(_file(tmp_path, base + "--dp-size 8 --enable-dp-attention\n"), cluster="hgx-h200")
    assert old["launches"][0]["parallelism"]["dp"] == 8 and old["launches"][0]["parallelism"]["replicas"] == 1
    assert "dp_attention_deprecated" in _rules(old, "warning")
    mixed = check_launch_file(_file(tmp_path, base + "--dp-size 2 --attn-dp-size 4\n", "m.sh"), cluster="hgx-h200",
                              gpus=16)
    assert "dp_attention" in _rules(mixed)


def test_sglang_ep_without_all2all_backend_and_backend_overriding_ep(tmp_path):
    base = "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp-size 8 "
    plain = check_launch_file(_file(tmp_path, base + "--ep-size 8\n"), cluster="dgx-h100")
    assert "ep_without_all2all" in _rules(plain, "warning") and plain["verdict"] == "pass"
    # SGLang 0.5.23 keeps ep_size 8 without a backend (not EP 1): 128 experts / 8 = 16 per rank, output all-reduced
    assert plain["launches"][0]["parallelism"]["ep"] == 8
    v = next(v for v in plain["violations"] if v["rule"] == "ep_without_all2all")
    assert "does split the experts 8 ways (not EP 1)" in v["message"] and "its 16 experts" in v["message"]
    over = check_launch_file(_file(tmp_path, base + "--ep-size 4 --moe-a2a-backend deepep\n", "o.sh"),
                             cluster="dgx-h100")
    assert "ep_overridden" in _rules(over, "warning") and over["launches"][0]["parallelism"]["ep"] == 8


def test_sglang_tp_size_read_as_per_node(tmp_path):
    text = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --quantization fp8 --tp-size 8 "
            "--nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000\n")
    result = check_launch_file(_file(tmp_path, text), cluster="hgx-h200", gpus=16)
    v = next(v for v in result["violations"] if v["rule"] == "tp_per_node")
    assert "uses 4 of the 8 GPUs" in v["message"] and v["fix"] == "--tp-size 16 to use every GPU"


def test_quantization_on_a_gpu_without_the_kernels(tmp_path):
    result = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --quantization fp8\n"),
                               cluster="dgx2-v100", gpus=1)
    assert "quantization_unsupported" in _rules(result)
    a100 = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --quantization fp8\n", "a.sh"),
                             cluster="dgx-a100-80g", gpus=1)
    assert "quantization_weight_only" in _rules(a100, "warning") and a100["verdict"] == "pass"


def test_vllm_config_yaml_and_config_flag(tmp_path):
    config = _file(tmp_path, "model: meta-llama/Llama-3.1-70B\ntensor-parallel-size: 4\nmax_model_len: 8192\n"
                             "gpu-memory-utilization: 0.9\n", "serve.yaml")
    result = check_launch_file(config, cluster="hgx-h200")
    assert result["kind"] == "vllm-config" and result["verdict"] == "pass"
    assert result["launches"][0]["parallelism"]["tp"] == 4
    typo = _file(tmp_path, "model: meta-llama/Llama-3.1-70B\ntensor-parallel-size: 4\ngpu-memory-utilisation: 0.9\n",
                 "typo.yaml")
    v = next(v for v in check_launch_file(typo, cluster="hgx-h200")["violations"] if v["rule"] == "unknown_flag")
    assert "did you mean --gpu-memory-utilization" in v["message"]
    command = _file(tmp_path, "vllm serve --config serve.yaml --tensor-parallel-size 3\n")
    over = check_launch_file(command, cluster="hgx-h200")
    assert over["launches"][0]["parallelism"]["tp"] == 3 and "heads_divisible" in _rules(over)


@pytest.mark.parametrize("text, args", [
    ("vllm serve meta-llama/Llama-3.1-8B\n", ()),  # no --cluster
    ("vllm serve some/unknown-model\n", ("-c", "dgx-h100")),
    ("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size four\n", ("-c", "dgx-h100")),
    ("vllm serve meta-llama/Llama-3.1-8B --gpu-memory-utilization 1.5\n", ("-c", "dgx-h100")),
    ("vllm serve meta-llama/Llama-3.1-8B --kv-cache-dtype nvfp4\n", ("-c", "dgx-h100")),
    ("vllm serve meta-llama/Llama-3.1-8B 'unclosed\n", ("-c", "dgx-h100")),
    # --seq-len on a launch is a warning, option_not_used, since review 8 (tests/test_check_fresh8_gate.py)
])
def test_bad_input_is_one_line_exit_2(tmp_path, text, args):
    proc = _planner("check", str(_file(tmp_path, text)), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- emit -> check round trips

def _lines(text: str) -> list[str]:
    """The lines of an emitted script, unindented, without a node guard's `if` / `fi` / NODE_RANK lines
    (`emit.engine_launch.by_node`)."""
    return [l.strip() for l in text.splitlines()
            if not re.match(r'\s*(if \[ "\$NODE_RANK"|fi$|: "\$\{NODE_RANK)', l)]


def _emitted_flags(text: str) -> list[str]:
    out = []
    for line in _lines(text):
        if line.startswith("#") or line == "wait":
            continue
        out += [w.split("=", 1)[0] for w in shlex.split(line) if w.startswith("-") and w != "-m"]
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("case", SERVE_CASES, ids=[c[0] for c in SERVE_CASES])
def test_emit_round_trip_every_bench_case(tmp_path, engine, case):
    model, cluster, gpus, extra = case
    written = tmp_path / "plan.yaml"
    proc = _planner("serve-plan", "-m", model, "-c", cluster, "--gpus", str(gpus), *extra, "--emit", engine,
                    "-o", str(written))
    assert proc.returncode == 0, proc.stderr
    assert "check: PASS" in proc.stderr
    # Exactly one trailing newline (fresh-user review: a script ending in "wait" with none printed
    # "waitcheck: PASS" when stderr followed on a terminal).
    assert proc.stdout.endswith("wait\n") and not proc.stdout.endswith("\n\n")
    known = (vllm_flags if engine == "vllm" else sglang_flags).ALL_FLAGS
    flags = _emitted_flags(proc.stdout)
    assert flags and set(flags) <= known, set(flags) - known
    # Read back by `planner check` from a file, as a user would: it passes and runs the plan's GPUs.
    path = _file(tmp_path, proc.stdout)
    result = check_launch_file(path, cluster=cluster, gpus=gpus)
    assert result["verdict"] == "pass"
    assert set(_rules(result, "warning")) <= {"quantization_weight_only"}
    # The emitted max-model-len has a margin over input + output (emit.engine_launch.served_length); the pool is
    # planned for input + output tokens per request: at that length every planned sequence fits (no full-length
    # concurrency note, `check.engine_launch._concurrency_note`), only requests using the margin may wait.
    request = yaml.safe_load(written.read_text())["request"]
    planned = request["input_len"] + request["output_len"]
    flag = (vllm_flags if engine == "vllm" else sglang_flags).FLAG["max_model_len"]
    exact = _file(tmp_path, re.sub(rf"{flag} \d+", f"{flag} {planned}", proc.stdout), "exact.sh")
    assert not [w for w in check_launch_file(exact, cluster=cluster, gpus=gpus)["warnings"]
                if "at the full" in w and "sequences" in w]
    mix = yaml.safe_load(written.read_text())["deployment"]["mix"]  # the plan emitted, as `-o` wrote it
    assert len(result["launches"]) == sum(p["parallelism"]["replicas"] for p in mix)
    shapes = sorted((p["parallelism"]["tp"], p["parallelism"]["pp"], p["parallelism"]["ep"], p["parallelism"]["dp"])
                    for p in mix for _ in range(p["parallelism"]["replicas"]))
    read = sorted((r["parallelism"]["tp"], r["parallelism"]["pp"], r["parallelism"]["ep"], r["parallelism"]["dp"])
                  for r in result["launches"])
    assert read == shapes


def _commands(text: str) -> list[list[str]]:
    return [[w for w in shlex.split(l) if w != "&"] for l in _lines(text)
            if l and not l.startswith("#") and l != "wait"]


def _after(words: list[str], flag: str) -> list[str]:
    """The words after each occurrence of `flag` (up to the next flag)."""
    out = []
    for i, w in enumerate(words):
        if w == flag:
            j = i + 1
            while j < len(words) and not words[j].startswith("-"):
                j += 1
            out.append(words[i + 1:j])
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_emit_disaggregated_workers_and_their_router(tmp_path, engine):
    """A disaggregated plan on one node: the prefill and decode workers, then the engine's router naming each
    worker by its URL (the loopback: one node) under its role, in flags recorded from the router's own parser.
    SGLang: each prefill worker its own bootstrap port, 8998 up (two on one node cannot share SGLang's default
    8998), passed by the router as `--prefill URL PORT`. vLLM: each worker its own NIXL handshake port,
    5600 + the data-parallel ranks before it (tp1 workers: 5600, 5601, ...). Read back by check: it passes
    (warning at most that the max-model-len margin exceeds what the planned concurrency holds) and reports the
    router over the workers."""
    table = vllm_flags if engine == "vllm" else sglang_flags
    proc = _planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "4", "--input-len", "2000",
                    "--output-len", "300", "--ttft-ms", "1500", "--tpot-ms", "40", "--disaggregated", "--emit", engine)
    assert proc.returncode == 0 and "check: PASS" in proc.stderr, proc.stderr
    assert proc.stdout.endswith("wait\n") and not proc.stdout.endswith("\n\n")  # one trailing newline
    lines = proc.stdout.splitlines()
    roles = [("prefill" if "prefill worker" in l else "decode") for l in lines if l.startswith("# tp")]
    commands = _commands(proc.stdout)
    workers, router = commands[:-1], commands[-1]
    assert len(workers) == len(roles) >= 2 and {"prefill", "decode"} <= set(roles)  # the mix depends on the fit
    ports = [w[w.index("--port") + 1] for w in workers]
    urls = {role: [f"http://127.0.0.1:{p}" for p, r in zip(ports, roles) if r == role] for role in ("prefill", "decode")}
    if engine == "sglang":
        assert router[:4] == ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        boot = [w[w.index("--disaggregation-bootstrap-port") + 1] for w, r in zip(workers, roles) if r == "prefill"]
        assert boot == [str(8998 + i) for i in range(len(boot))]
        assert _after(router, "--prefill") == [[u, b] for u, b in zip(urls["prefill"], boot)]
        assert all(w[w.index("--disaggregation-mode") + 1] == r for w, r in zip(workers, roles))
    else:
        assert router[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
        assert [w[0] for w in workers] == [f"VLLM_NIXL_SIDE_CHANNEL_PORT={5600 + i}" for i in range(len(workers))]
        assert _after(router, "--prefill") == [[u] for u in urls["prefill"]]
        assert router[router.index("--kv-connector") + 1] == "nixl"
        assert all("--kv-transfer-config" in w for w in workers)
    assert _after(router, "--decode") == [[u] for u in urls["decode"]]
    assert router[-4:] == ["--host", "0.0.0.0", "--port", str(table.ROUTER_PORT)]
    assert {w for w in router if w.startswith("--")} <= table.ROUTER_ALL_FLAGS
    assert set(_emitted_flags("\n".join(proc.stdout.splitlines()[:-2]))) <= table.ALL_FLAGS
    result = check_launch_file(_file(tmp_path, proc.stdout), cluster="dgx-h100", gpus=4)
    # no finding on the tool's own script: the emitted max-model-len is 2,300 rounded up to a power of two (4096;
    # served_length: the scheduler, not a shorter max-model-len, bounds what runs at full length)
    length = int(workers[0][workers[0].index(table.FLAG["max_model_len"]) + 1])
    assert length == 4096 and result["verdict"] == "pass" and not result["violations"], result["violations"]
    row, = result["routers"]
    assert (row["prefill"], row["decode"], row["port"]) == (urls["prefill"], urls["decode"], str(table.ROUTER_PORT))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_emit_disaggregated_over_nodes_names_each_node(tmp_path, engine):
    """deepseek-v3 disaggregated on 32 H200 (four 8-GPU workers, one per node): the router's URLs name each
    worker's node by a placeholder the shell refuses to run unset; SGLang workers listen on every interface
    (--host 0.0.0.0: its default, the loopback, is out of the router's reach), vLLM workers advertise their
    node's address for the NIXL handshake and take ports 5600 + 8 x the workers before them (8 data-parallel
    ranks each). Read back it passes; without those settings check fails with the rule that says why. (tp pinned
    to 8: unpinned, SGLang's plan runs its decode worker as EP16 over two nodes, `serve.wide_ep_shapes`.)"""
    proc = _planner("serve-plan", "-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "32", "--input-len", "4000",
                    "--output-len", "500", "--weight-dtype", "fp8-block", "--disaggregated", "--fix", "tp=8",
                    "--emit", engine)
    assert proc.returncode == 0 and "check: PASS" in proc.stderr, proc.stderr
    nodes = [int(l.rsplit("(node ", 1)[1].rstrip(")")) for l in _lines(proc.stdout)
             if l.startswith("# ") and " worker " in l]
    commands = _commands(proc.stdout)
    workers = [c for c in commands if "--prefill" not in c]
    (router,) = [c for c in commands if "--prefill" in c]
    assert nodes == [0, 1, 2, 3] and len(workers) == 4
    # each worker, and the router (on node 0), inside its node's NODE_RANK block
    blocks = re.findall(r'if \[ "\$NODE_RANK" = (\d) \]; then\n((?:  .*\n)+)fi', proc.stdout)
    assert [int(n) for n, _ in blocks] == [0, 1, 2, 3]
    assert ["--prefill" in body for _, body in blocks] == [True, False, False, False]
    ports = [w[w.index("--port") + 1] for w in workers]
    named = [u[0] for u in _after(router, "--prefill") + _after(router, "--decode")]
    assert sorted(named) == sorted(f"http://${{NODE_ADDR_{n}:?set NODE_ADDR_{n} to the address of node {n}}}:{p}"
                                   for n, p in zip(nodes, ports))
    path = _file(tmp_path, proc.stdout)
    assert check_launch_file(path, cluster="hgx-h200", gpus=32)["verdict"] == "pass"
    if engine == "sglang":
        assert all(w[w.index("--host") + 1] == "0.0.0.0" for w in workers)
        broken, rule = proc.stdout.replace(" --host 0.0.0.0 --port 3", " --port 3"), "worker_unreachable"
    else:
        assert [w[:2] for w in workers] == [
            [f"VLLM_NIXL_SIDE_CHANNEL_PORT={5600 + 8 * n}",
             f"VLLM_NIXL_SIDE_CHANNEL_HOST=${{NODE_ADDR_{n}:?set NODE_ADDR_{n} to the address of node {n}}}"]
            for n in nodes]
        broken = re.sub(r'VLLM_NIXL_SIDE_CHANNEL_HOST="[^"]*" ', "", proc.stdout)
        rule = "nixl_side_channel_host"
    result = check_launch_file(_file(tmp_path, broken, "broken.sh"), cluster="hgx-h200", gpus=32)
    assert result["verdict"] == "fail" and rule in _rules(result), result["violations"]


SGLANG_PD = """\
CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
CUDA_VISIBLE_DEVICES=1 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --disaggregation-mode prefill --disaggregation-transfer-backend nixl --disaggregation-bootstrap-port 8999 --port 30001 &
CUDA_VISIBLE_DEVICES=2 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30002 &
python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 --prefill http://127.0.0.1:30001 8999 --decode http://127.0.0.1:30002 &
"""
VLLM_PD = """\
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8100 &
VLLM_NIXL_SIDE_CHANNEL_PORT=5601 CUDA_VISIBLE_DEVICES=1 vllm serve meta-llama/Llama-3.1-8B --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8200 &
vllm-router --vllm-pd-disaggregation --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200 &
"""


@pytest.mark.parametrize("base, old, new, rule, severity", [
    # the unchanged files pass: the first prefill worker's bootstrap port is not passed, so the decode worker
    # uses its own default 8998, the prefill's (SGLang scheduler.py: a request without one takes the server's)
    (SGLANG_PD, "", "", None, None),
    (VLLM_PD, "", "", None, None),
    (SGLANG_PD, "python -m sglang_router", "# python -m sglang_router", "router_missing", "warning"),
    (SGLANG_PD, "--pd-disaggregation ", "", "router_mode", "error"),
    (SGLANG_PD, "30001 8999", "30001 9000", "bootstrap_port_mismatch", "error"),
    # the decode worker's own 9001 is what it uses for the prefill the router gives no port: not that one's 8998
    (SGLANG_PD, "decode --disaggregation-transfer-backend nixl", "decode --disaggregation-transfer-backend nixl "
     "--disaggregation-bootstrap-port 9001", "bootstrap_port_mismatch", "error"),
    # two prefill workers of one host (the router's URL host) on bootstrap port 8998
    (SGLANG_PD, "--disaggregation-bootstrap-port 8999 --port 30001", "--port 30001", "bootstrap_port_conflict", "error"),
    (SGLANG_PD, "--decode http://127.0.0.1:30002", "--decode http://127.0.0.1:30001", "router_role_mismatch", "error"),
    (SGLANG_PD, "--decode http://127.0.0.1:30002", "--decode http://127.0.0.1:30009", "router_worker_unknown", "error"),
    (SGLANG_PD, "--decode http://127.0.0.1:30002", "--decode http://10.0.0.2:30002", "worker_unreachable", "error"),
    (SGLANG_PD, "30002 &", "30002 --polcy random &", "unknown_flag", "error"),
    (VLLM_PD, "--prefill http://127.0.0.1:8100 ", "", "router_worker_unrouted", "warning"),
    (VLLM_PD, "PORT=5601", "PORT=5600", "nixl_side_channel_conflict", "error"),
    # dense llama with --data-parallel-size 2: two ranks on handshake ports 5600 and 5601, the decode's 5601
    (VLLM_PD, "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B", "CUDA_VISIBLE_DEVICES=0,3 vllm serve "
     "meta-llama/Llama-3.1-8B --data-parallel-size 2", "nixl_side_channel_conflict", "error"),
    (VLLM_PD, "--decode http://127.0.0.1:8200", "--decode http://10.0.0.2:8200", "nixl_side_channel_host", "error"),
    (VLLM_PD, "--decode http://127.0.0.1:8200", "--decode http://127.0.0.1:8200 --kv-connector mooncake",
     "router_kv_connector", "error"),
])
def test_router_rules(tmp_path, base, old, new, rule, severity):
    text = base.replace(old, new, 1) if old else base
    assert text != base or rule is None
    result = check_launch_file(_file(tmp_path, text), cluster="dgx-h100", gpus=4)
    found = [(v["rule"], v["severity"]) for v in result["violations"]]
    if rule is None:
        assert result["verdict"] == "pass" and not found, found
        assert len(result["routers"]) == 1
    else:
        assert (rule, severity) in found, found
        assert result["verdict"] == ("fail" if severity == "error" else "pass")


@pytest.mark.parametrize("config, paired", [
    ('{"kv_connector":"NixlConnector","kv_role":"kv_both"}', True),
    ('{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}', False),
    ('{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":'
     '[{"kv_connector":"NixlConnector","kv_role":"kv_both"},{"kv_connector":"OffloadingConnector"}]}}', True),
])
def test_vllm_kv_connector_that_pairs_prefill_and_decode(tmp_path, config, paired):
    """A worker is disaggregated (and wants a router) when its connector hands KV from prefill to decode
    (NIXL, Mooncake, MoRI-IO: vLLM 0.33.0 factory.py), also inside a MultiConnector; a CPU-offloading
    connector caches KV on its own: no router, no warning."""
    text = f"vllm serve meta-llama/Llama-3.1-8B --kv-transfer-config '{config}'\n"
    result = check_launch_file(_file(tmp_path, text), cluster="dgx-h100", gpus=1)
    assert (result["launches"][0]["role"] == "disaggregated") is paired
    assert ("router_missing" in _rules(result, "warning")) is paired


def test_router_rule_numbers_by_hand(tmp_path):
    """The numbers the router rules print: the prefill on 30001 listens on bootstrap port 8999, the router
    passes 9000; vLLM's dp-2 prefill binds 5600 + data-parallel index 0 and 1 = 5600-5601, overlapping the
    decode's 5601, fix: start the decode at 5602."""
    sg = check_launch_file(_file(tmp_path, SGLANG_PD.replace("30001 8999", "30001 9000")), cluster="dgx-h100", gpus=4)
    v = next(v for v in sg["violations"] if v["rule"] == "bootstrap_port_mismatch")
    assert "passes --prefill http://127.0.0.1:30001 9000" in v["message"] and "listens on 8999" in v["message"]
    assert v["fix"] == "--prefill http://127.0.0.1:30001 8999"
    assert v["line"] == 4
    vl = check_launch_file(_file(tmp_path, VLLM_PD.replace(
        "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B",
        "CUDA_VISIBLE_DEVICES=0,3 vllm serve meta-llama/Llama-3.1-8B --data-parallel-size 2"), "v.sh"),
        cluster="dgx-h100", gpus=4)
    v = next(v for v in vl["violations"] if v["rule"] == "nixl_side_channel_conflict")
    assert "ports 5600-5601 and 5601" in v["message"]
    assert v["fix"] == "VLLM_NIXL_SIDE_CHANNEL_PORT=5602 on http://127.0.0.1:8200"


def test_emit_contradicting_engine_is_bad_input():
    proc = _planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "100",
                    "--output-len", "10", "--engine", "vllm", "--emit", "sglang")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_longest_context_capped_and_max_model_len_past_the_model(tmp_path):
    """DeepSeek-V3 FP8 on 8 H200: the KV pool holds far more than one 163,840-token sequence
    (47.7 GiB / 70,272 B per token ~ 729k), but the longest context is the model's maximum, and
    the output says which bound binds; a --max-model-len past it is the engines' start-up error."""
    result = check_launch_file(_file(tmp_path, "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8\n"),
                               cluster="hgx-h200", gpus=8)
    rec = result["launches"][0]["recomputed"]
    assert rec["kv_tokens"] > 163_840 and rec["longest_context"] == 163_840
    assert rec["longest_context_bound"] == "max_position_embeddings"
    longer = check_launch_file(_file(tmp_path, "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 "
                                               "--max-model-len 200000\n", "l.sh"), cluster="hgx-h200", gpus=8)
    v = next(v for v in longer["violations"] if v["rule"] == "context_exceeds_model")
    assert v["fix"] == "--max-model-len 163840" and "kv_pool_too_small" not in _rules(longer)


def test_instruct_checkpoint_resolves_to_its_base_entry(tmp_path):
    """meta-llama/Llama-3.1-70B-Instruct has the base's architecture (hidden 8192, 80 layers, 64 / 8
    heads, intermediate 28672, vocab 128256, max_position_embeddings 131072): the catalog lists it in
    hf_aliases. An id of another publisher's naming stays bad input (planner.specs.hf_ids reads only the
    suffixes of the publishers it lists)."""
    ok = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4\n"),
                           cluster="hgx-h200", gpus=4)
    assert ok["model"] == "llama-3.1-70b" and ok["verdict"] == "pass"
    sglang = check_launch_file(_file(tmp_path, "python -m sglang.launch_server --model-path "
                                               "meta-llama/llama-3.1-8b-instruct\n", "s.sh"), cluster="dgx-h100", gpus=1)
    assert sglang["model"] == "llama-3.1-8b"
    proc = subprocess.run([sys.executable, "-m", "planner", "check", str(_file(
        tmp_path, "vllm serve meta-llama/Llama-3.1-70B-Instruct-FP8 -tp 8\n", "q.sh")), "-c", "hgx-h200"],
        capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "hf_aliases" in proc.stderr


# ---------------------------------------------------------------- instances over several nodes

def _emit(engine: str, model: str, *extra: str) -> subprocess.CompletedProcess:
    return _planner("serve-plan", "-m", model, "-c", "hgx-h200", "--gpus", "16", "--input-len", "4000",
                    "--output-len", "500", "--fix", "tp=8", "--fix", "pp=2", *extra, "--emit", engine)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("model, extra", [("deepseek-v3", ("--weight-dtype", "fp8-block")), ("llama-3.1-405b", ())])
def test_emit_instance_over_two_nodes_one_command_per_node(tmp_path, engine, model, extra):
    """A 16-GPU instance (tp 8 x pp 2) on 8-GPU nodes: one command per node with the engine's node flags, node
    rank 0's address a placeholder the shell refuses to run without, the API port on node rank 0 only (vLLM:
    the others --headless); read back, the two commands are one instance of 16 ranks, 8 GPUs on each node."""
    proc = _emit(engine, model, *extra)
    assert proc.returncode == 0, proc.stderr
    assert "check: PASS" in proc.stderr
    commands = [l for l in _lines(proc.stdout) if not l.startswith("#") and l != "wait"]
    assert len(commands) == 2
    words = [shlex.split(c) for c in commands]
    for rank, w in enumerate(words):
        assert w[w.index("--nnodes") + 1] == "2" and w[w.index("--node-rank") + 1] == str(rank)
    head = "--dist-init-addr" if engine == "sglang" else "--master-addr"
    assert all('"${HEAD_ADDR_1:?set HEAD_ADDR_1 to the address of node 0' in c for c in commands)
    assert all(head in w for w in words)
    if engine == "sglang":
        assert all(w[w.index(head) + 1].endswith(":20000") for w in words)
    port = "--port"
    assert port in words[0] and port not in words[1]
    if engine == "vllm":
        assert "--headless" not in words[0] and "--headless" in words[1]
    known = (vllm_flags if engine == "vllm" else sglang_flags).ALL_FLAGS
    flags = _emitted_flags(proc.stdout)
    assert set(flags) <= known, set(flags) - known
    path = _file(tmp_path, proc.stdout)
    result = check_launch_file(path, cluster="hgx-h200", gpus=16)
    assert result["verdict"] == "pass", result["violations"]
    # the two node ranks are one engine instance: one row, over both commands' lines
    assert [(r["world"], r["nnodes"], r["node_ranks"], len(r["lines"])) for r in result["launches"]] == \
        [(16, 2, [0, 1], 2)]
    # the GPUs are counted per node: 8 + 8, so the file does not fit 8 GPUs
    small = check_launch_file(path, cluster="hgx-h200", gpus=8)
    assert "world_size" in _rules(small) and "the launches need 16 GPUs (8 + 8" in small["violations"][-1]["message"]


def test_sglang_multi_node_needs_dist_init_addr_and_refuses_replicas_over_nodes(tmp_path):
    base = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-405B --tp-size 8 --pp-size 2 --nnodes 2 "
    bare = check_launch_file(_file(tmp_path, base + "--node-rank 0\n"), cluster="hgx-h200", gpus=16)
    assert _rules(bare) == ["multi_node_rendezvous"] and "--dist-init-addr HOST:PORT" in bare["violations"][0]["fix"]
    dp = check_launch_file(_file(tmp_path, base + "--node-rank 0 --dist-init-addr 10.0.0.1:20000 --dp-size 2\n",
                                 "dp.sh"), cluster="hgx-h200", gpus=32)
    assert "multi_node_replicas" in _rules(dp)
    rank = check_launch_file(_file(tmp_path, base + "--node-rank 2 --dist-init-addr 10.0.0.1:20000\n", "r.sh"),
                             cluster="hgx-h200", gpus=16)
    assert _rules(rank) == ["node_rank"]


def test_vllm_multi_node_needs_master_addr_and_headless_workers(tmp_path):
    base = "vllm serve meta-llama/Llama-3.1-405B -tp 8 -pp 2 --nnodes 2 "
    bare = check_launch_file(_file(tmp_path, base + "--node-rank 0\n"), cluster="hgx-h200", gpus=16)
    assert _rules(bare) == ["multi_node_rendezvous"]
    worker = check_launch_file(_file(tmp_path, base + "-r 1 --master-addr 10.0.0.1\n", "w.sh"), cluster="hgx-h200",
                               gpus=16)
    assert worker["verdict"] == "pass" and "multi_node_headless" in _rules(worker, "warning")
    assert worker["launches"][0]["node_rank"] == 1


def test_multi_node_command_sees_its_node_gpus(tmp_path):
    """CUDA_VISIBLE_DEVICES counts the GPUs of the command's own node: tp 8 x pp 2 over 2 nodes needs 8 there."""
    text = ("CUDA_VISIBLE_DEVICES=0,1,2,3 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-405B "
            "--tp-size 8 --pp-size 2 --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:20000\n")
    result = check_launch_file(_file(tmp_path, text), cluster="hgx-h200", gpus=16)
    v = next(v for v in result["violations"] if v["rule"] == "world_size")
    assert "starts 8 ranks on each of its 2 nodes" in v["message"] and "gives it 4 GPUs" in v["message"]


# ---------------------------------------------------------------- SGLang's default mem_fraction_static

@pytest.mark.parametrize("kwargs, expected", [
    # H200 (nvidia-smi 143771 MiB), Llama tp 8: chunk 8192, decode graph max batch 512, 58 prefill graph sizes
    # (8 + 14 + 8 + 8 + 12 + 8 up to 8192): reserved 512 + 1.5 x 8192 + 8 x 1 / 8 x 1024 + (2 x 512 + 8 x 58)
    # = 512 + 12288 + 1024 + 1488 = 15312 MiB; (143771 - 15312) / 143771 = 0.89350 -> 0.893
    (dict(gpu_memory_mib=143771, tp=8, pp=1, mla=False, attn_dp=1), 0.893),
    # H100 (81559 MiB) tp 1: decode max batch 256; 512 + 12288 + 128 + (512 + 464) = 13904; 67655 / 81559 = 0.8295
    (dict(gpu_memory_mib=81559, tp=1, pp=1, mla=False, attn_dp=1), 0.83),
    # H200 tp 8 pp 2: no prefill graph under PP; 512 + 12288 + 2048 + 1024 = 15872; 127899 / 143771 = 0.8896
    (dict(gpu_memory_mib=143771, tp=8, pp=2, mla=False, attn_dp=1), 0.89),
    # DeepSeek (MLA) on H200, tp 8, attention DP 8, deepep: graphs 2 x 512 + 512 x 8 x 3 + 512 x 8 x 1.5 + 1536
    # + 1024 = 22016; 512 + 12288 + 1024 + 22016 = 35840 (above the 10240 floor) + 2048 deepep = 37888;
    # 105883 / 143771 = 0.73647 -> 0.736
    (dict(gpu_memory_mib=143771, tp=8, pp=1, mla=True, attn_dp=8, a2a="deepep"), 0.736),
    # A100-40GB (40960 MiB) tp 1: chunk 4096, decode max batch 32, 50 prefill sizes up to 4096 (8 + 14 + 8 + 8 +
    # 12; no 10 GiB floor below 60 GiB): 512 + 6144 + 128 + (64 + 400) = 7248; 33712 / 40960 = 0.82305 -> 0.823
    (dict(gpu_memory_mib=40960, tp=1, pp=1, mla=False, attn_dp=1), 0.823),
    # a decode worker (H200 tp 8, --max-running-requests 128): tokens max(128, 2048) = 2048, decode graph 128,
    # no prefill graph: 512 + 3072 + 1024 + 256 = 4864 -> floor 10240; 133531 / 143771 = 0.92877 -> 0.929
    (dict(gpu_memory_mib=143771, tp=8, pp=1, mla=False, attn_dp=1, role="decode", max_running_requests=128), 0.929),
])
def test_sglang_default_mem_fraction_static_by_hand(kwargs, expected):
    args = dict(chunked_prefill_size=None, max_running_requests=None, role=None, a2a="none") | kwargs
    mib = args.pop("gpu_memory_mib")
    assert sglang_flags.default_mem_fraction_static(mib, **args) == expected


def test_sglang_reader_takes_the_derived_default_and_emit_writes_the_plans(tmp_path):
    text = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --tp-size 8 --context-length 8192\n"
    result = check_launch_file(_file(tmp_path, text), cluster="hgx-h200")
    assert result["launches"][0]["recomputed"]["budget_fraction"] == 0.893  # as by hand above
    proc = _planner("serve-plan", "-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000",
                    "--output-len", "500", "--fix", "tp=8", "--emit", "sglang")
    assert proc.returncode == 0, proc.stderr
    assert "--tp-size 8 " in proc.stdout and "--mem-fraction-static 0.893 " in proc.stdout


@pytest.mark.parametrize("model, extra, fraction", [
    # Qwen3-235B-A22B (not MLA), tp 8 ep 8 attention-DP 8, deepep, chunk 8192 as given: decode graphs 2 x 512 +
    # 512 x 8 x 3 + 512 x 8 x 1.5 = 19456; deepep prefill sizes up to 2048 rounded to multiples of 8: 4 + 14 + 8
    # + 8 + 4 = 38 -> 304, + 1024 deepep = 20784; reserved 512 + 1.5 x 8192 + 1024 + 20784 = 34608, + 2048
    # deepep = 36656; (143771 - 36656) / 143771 = 0.74504 -> 0.745
    ("qwen3-235b-a22b", ["--ttft-ms", "2000", "--tpot-ms", "50", "--weight-dtype", "fp8-block", "--fix", "ep=8"],
     0.745),
    # DeepSeek-V3 (MLA), tp 8 attention-DP 8, no EP: graphs 1024 + 12288 + 6144 + 1536 = 20992; reserved 512 +
    # 12288 + 1024 + 20992 = 34816; (143771 - 34816) / 143771 = 0.75784 -> 0.758
    ("deepseek-v3", ["--fix", "ep=1"], 0.758),
])
def test_sglang_attention_dp_plan_keeps_the_chunk_and_a_sane_fraction(model, extra, fraction):
    """--chunked-prefill-size is the instance's total, divided by SGLang among the attention-DP groups after
    mem_fraction_static is sized from it (parallel_hook.py after memory_hook.py, 0.5.23): the emitter writes
    the asked budget unchanged, not x dp (x 8 made the fraction 0.16 and the KV pool negative)."""
    proc = _planner("serve-plan", "-m", model, "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000",
                    "--output-len", "500", "--engine", "sglang", "--fix", "dp=8", *extra, "--emit", "sglang")
    assert proc.returncode == 0, proc.stderr
    assert "--attn-dp-size 8 " in proc.stdout and "--chunked-prefill-size 8192 " in proc.stdout
    assert f"--mem-fraction-static {fraction} " in proc.stdout
    assert "check: PASS" in proc.stderr + proc.stdout


def test_sglang_reader_divides_the_chunk_per_attention_dp_group(tmp_path):
    """8192 over 8 attention-DP groups: 1024 tokens per group's forward; the fraction from the undivided
    8192 (0.736 by hand in test_sglang_default_mem_fraction_static_by_hand)."""
    text = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 --attn-dp-size 8 "
            "--ep-size 8 --moe-a2a-backend deepep --context-length 4500 --chunked-prefill-size 8192\n")
    result = check_launch_file(_file(tmp_path, text), cluster="hgx-h200", gpus=8)
    assert result["launches"][0]["recomputed"]["budget_fraction"] == 0.736
    assert sglang_flags.rank_chunk(8192, 8) == 1024


def test_vllm_default_gpu_memory_utilization_is_one_value_in_plan_emit_and_check(tmp_path):
    """vLLM 0.33.0 `vllm/config/cache.py`: gpu_memory_utilization Field(default=0.92); EngineArgs takes
    CacheConfig.gpu_memory_utilization (`vllm/engine/arg_utils.py`). serve-plan costs, --emit writes and
    check assumes that one value (it was 0.9 in serve-plan and 0.92 in check)."""
    assert vllm_flags.DEFAULT_FRACTION == 0.92
    proc = _planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "1000",
                    "--output-len", "200", "--emit", "vllm")
    assert proc.returncode == 0, proc.stderr
    assert "--gpu-memory-utilization 0.92 " in proc.stdout
    text = "vllm serve meta-llama/Llama-3.1-8B --max-model-len 4096\n"
    result = check_launch_file(_file(tmp_path, text), cluster="dgx-h100", gpus=1)
    assert result["launches"][0]["recomputed"]["budget_fraction"] == 0.92


def test_vllm_longest_context_is_capped_by_max_model_len(tmp_path):
    """The engine rejects a prompt longer than max_model_len (vLLM 0.33.0 input_processor.py
    _validate_prompt_len): with --max-model-len 32768 the longest context is 32,768, not the 131,072 of
    max_position_embeddings, though the pool (8B bf16 on one H100, ~55 GiB / 128 KiB per token, ~450k
    tokens) holds more."""
    result = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --max-model-len 32768\n"),
                               cluster="dgx-h100", gpus=1)
    rec = result["launches"][0]["recomputed"]
    assert rec["longest_context"] == 32768 and rec["longest_context_bound"] == "max_model_len"
    assert rec["kv_tokens"] > 400_000


def _sglang_launch(tmp_path: Path, flags: str):
    from planner.check import sglang as reader
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    path = _file(tmp_path, "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 "
                           f"--attn-dp-size 8 --context-length 4500 {flags}\n", "mrr.sh")
    _, commands = reader.commands(path, path.read_text(), None)
    return reader.launch(commands[0], load_model("deepseek-v3"), load_cluster("hgx-h200"), str(path))


@pytest.mark.parametrize("value, per_rank, instance", [(100, 12, 96), (4, 1, 8), (96, 12, 96)])
def test_sglang_max_running_requests_is_divided_per_attention_dp_rank(tmp_path, value, per_rank, instance):
    """SGLang 0.5.23 kv_cache_configurator.py resolve_max_num_reqs: each attention-DP rank runs
    max(1, max_running_requests // attn_dp_size). By hand: 100 // 8 = 12 per rank, 8 x 12 = 96 in the
    instance (not 100; fix 104 = 8 x 13); 4 // 8 = 0 -> 1 per rank, 8 in the instance (more than asked);
    96 // 8 = 12, divides: no warning. The reader checks the KV pool against the instance's number."""
    launch = _sglang_launch(tmp_path, f"--max-running-requests {value}")
    assert sglang_flags.rank_running_requests(value, 8) == per_rank
    assert launch.max_num_seqs == instance
    found = [v for v in launch.findings if v.rule == "max_running_requests_per_rank"]
    if value % 8 == 0:
        assert not found
    else:
        assert len(found) == 1 and found[0].severity == "warning"
        assert f"= {per_rank} per attention data-parallel rank, {instance} in the instance, not {value}" \
            in found[0].message
        assert found[0].fix.startswith(f"--max-running-requests {8 * -(-value // 8)} ")


def test_sglang_emit_writes_running_requests_as_a_multiple_of_attention_dp():
    """A plan instance at concurrency 20 over 8 attention-DP ranks: SGLang would run 20 // 8 = 2 per rank,
    16 in all; the emitter writes 24 (3 per rank, 20 / 8 rounded up, as vLLM's per-rank --max-num-seqs), and
    the read back passes without the per-rank warning."""
    proc = _planner("serve-plan", "-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000",
                    "--output-len", "500", "--engine", "sglang", "--fix", "dp=8", "--fix", "ep=1",
                    "--concurrency", "20", "--emit", "sglang")
    assert proc.returncode == 0 and "check: PASS" in proc.stderr, proc.stderr
    words = shlex.split(next(l for l in _lines(proc.stdout) if l.startswith("CUDA_VISIBLE_DEVICES")))
    assert words[words.index(sglang_flags.FLAG["adp"]) + 1] == "8"
    assert words[words.index(sglang_flags.FLAG["max_num_seqs"]) + 1] == "24"


# ---------------------------------------------------------------- vLLM attention DP + EP (senior review)

def test_vllm_attention_dp_emits_deepep_and_per_rank_sequences(tmp_path):
    """deepseek-v3 on 16 H200 is planned as tp8 ep8 dp8 instances priced with DeepEP: vLLM must be told
    (`--all2all-backend deepep_low_latency`; its default is allgather_reducescatter) and its
    `--max-num-seqs` applies per data-parallel rank (vllm/config/scheduler.py), so an instance running
    C sequences over dp 8 writes C / 8; read back, the instance allows 8 x that."""
    proc = _planner("serve-plan", "-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "16", "--input-len", "4000",
                    "--output-len", "500", "--ttft-ms", "2000", "--tpot-ms", "50", "--weight-dtype", "fp8-block",
                    "--fix", "dp=8", "--fix", "ep=8", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    concurrency = json.loads(proc.stdout)["plans"][0]["concurrency"]
    emitted = _planner("serve-plan", "-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "16", "--input-len", "4000",
                       "--output-len", "500", "--ttft-ms", "2000", "--tpot-ms", "50", "--weight-dtype",
                       "fp8-block", "--fix", "dp=8", "--fix", "ep=8", "--emit", "vllm")
    assert emitted.returncode == 0 and "check: PASS" in emitted.stderr, emitted.stderr
    words = shlex.split(next(l for l in _lines(emitted.stdout) if l.startswith("CUDA_VISIBLE_DEVICES")))
    assert words[words.index(vllm_flags.FLAG["dp"]) + 1] == "8"
    assert words[words.index(vllm_flags.FLAG["a2a"]) + 1] == vllm_flags.DEEPEP_DECODE
    assert int(words[words.index(vllm_flags.FLAG["max_num_seqs"]) + 1]) == -(-concurrency // 8)


# ---------------------------------------------------------------- vLLM quantization and dtype (fresh-user review)

_LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
             "num_hidden_layers": 32, "vocab_size": 128256}


@pytest.mark.parametrize("method", ["awq", "gptq", "awq_marlin", "gptq_marlin"])
def test_vllm_prequantized_method_on_an_unquantized_checkpoint_fails(tmp_path, method):
    """vLLM 0.33.0 get_quant_config (model_loader/weight_utils.py): AWQ / GPTQ read the checkpoint's
    quantization parameters (config.json quantization_config, else quantize_config.json / quant_config.json);
    without them it raises 'Cannot find the config file for <method>'. fp8 quantizes online: no finding."""
    folder = _model_dir(tmp_path, **_LLAMA_8B)
    result = check_launch_file(_file(tmp_path, f"vllm serve {folder} --quantization {method}\n"), cluster="dgx-h100",
                               gpus=1)
    assert "quantization_mismatch" in _rules(result)
    assert f"Cannot find the config file for {method}" in result["violations"][0]["message"]
    (folder / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 128}))  # an old GPTQ/AWQ layout
    again = check_launch_file(_file(tmp_path, f"vllm serve {folder} --quantization {method}\n"), cluster="dgx-h100",
                              gpus=1)
    assert "quantization_mismatch" not in _rules(again)
    fp8 = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --quantization fp8\n"),
                            cluster="dgx-h100", gpus=1)
    assert "quantization_mismatch" not in _rules(fp8)


@pytest.mark.parametrize("own, given, refused", [("awq", "gptq", True), ("gptq", "awq", True),
                                                  ("awq", "awq_marlin", False), ("gptq", "gptq_marlin", False),
                                                  ("awq", "awq", False)])
def test_vllm_awq_checkpoint_with_gptq_flag_is_a_mismatch(tmp_path, own, given, refused):
    """Both are int4 to the cost model, but vLLM 0.33.0 config/model.py _verify_quantization raises 'Quantization
    method specified in the model config (awq) does not match ... (gptq)': auto_awq.py / auto_gptq.py claim a
    checkpoint only for their own family of --quantization values."""
    folder = _model_dir(tmp_path, **_LLAMA_8B, quantization_config={"quant_method": own, "bits": 4, "group_size": 128})
    result = check_launch_file(_file(tmp_path, f"vllm serve {folder} --quantization {given}\n"), cluster="dgx-h100",
                               gpus=1)
    assert ("quantization_mismatch" in _rules(result)) is refused
    if refused:
        assert f"quant_method {own}" in result["violations"][0]["message"]


@pytest.mark.parametrize("dtype", ["float32", "float"])
def test_vllm_dtype_float32_is_not_costed_as_bf16(tmp_path, dtype):
    """--dtype float32 doubles unquantized weights and the KV cache (4 bytes per element); the cost model has no
    fp32: bad input saying so, never costed as bf16."""
    proc = _planner("check", str(_file(tmp_path, f"vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 "
                                                 f"--dtype {dtype}\n")), "-c", "hgx-h200")
    assert proc.returncode == 2 and "--dtype" in proc.stderr and "not modelled" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- flags that set the KV pool; human-readable integers

def test_vllm_kv_cache_memory_bytes_is_the_pool_and_fails_a_long_context(tmp_path):
    """vLLM 0.33.0 gpu_worker.py determine_available_memory: kv_cache_memory_bytes is the KV pool per GPU as
    given, gpu_memory_utilization ignored. 1G = 2**30 B (argparse_utils.py human_readable_int: upper case
    binary). llama-3.1-70b tp8: 80 layers x 2 (K, V) x 1 KV head per GPU (8 / 8) x 128 x 2 B = 40,960 B/token;
    131,072 tokens need 131,072 x 40,960 B = 5 GiB > 1 GiB; the pool holds 2**30 / 40,960 = 26,214 tokens."""
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 --max-model-len 131072 "
                           "--kv-cache-memory-bytes 1G\n")
    result = check_launch_file(path, cluster="hgx-h200")
    rec = result["launches"][0]["recomputed"]
    assert rec["memory_bytes"]["kv_cache"] == 2**30 and rec["kv_bytes_per_token"] == 40960
    assert rec["kv_tokens"] == 26214 and rec["kv_pool_set_by"] == "--kv-cache-memory-bytes 1,073,741,824"
    assert _rules(result) == ["kv_pool_too_small"]
    message = result["violations"][0]["message"]
    assert "needs 5.00 GiB" in message and "holds 26,214 tokens" in message
    assert result["violations"][0]["fix"].startswith("--max-model-len 26214; or --kv-cache-memory-bytes 5120M")
    fits = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 "
                                             "--max-model-len 8192 --kv-cache-memory-bytes 1G\n"), cluster="hgx-h200")
    assert fits["verdict"] == "pass"


def test_vllm_kv_cache_memory_bytes_beyond_the_free_memory_fails(tmp_path):
    """200 GiB of KV cache on a 141 GB H200 (140.40 GiB): it cannot be allocated beside the weights."""
    result = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 "
                                               "--max-model-len 8192 --kv-cache-memory-bytes 200G\n"),
                               cluster="hgx-h200")
    assert _rules(result) == ["memory_exceeds"] and "214,748,364,800 B (200.00 GiB)" in result["violations"][0]["message"]


def test_sglang_max_total_tokens_caps_the_pool(tmp_path):
    """SGLang 0.5.23 kv_cache_configurator.py _apply_token_constraints: min(profiled capacity, max_total_tokens).
    1,000 tokens x 40,960 B/token (70B tp8, as above) = 40,960,000 B; --context-length 8Ki = 8,192 (IEC suffix,
    common.py human_readable_int) does not fit in 1,000 tokens."""
    path = _file(tmp_path, "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --tp-size 8 "
                           "--context-length 8Ki --max-total-tokens 1000\n")
    result = check_launch_file(path, cluster="hgx-h200")
    rec = result["launches"][0]["recomputed"]
    assert rec["memory_bytes"]["kv_cache"] == 1000 * 40960 and rec["kv_tokens"] == 1000
    assert rec["max_model_len"] == 8192 and _rules(result) == ["kv_pool_too_small"]
    loose = check_launch_file(_file(tmp_path, "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B "
                                              "--tp-size 8 --max-total-tokens 100M\n"), cluster="hgx-h200")
    assert loose["launches"][0]["recomputed"]["kv_pool_set_by"] is None  # above what fits: the profiled pool


@pytest.mark.parametrize("engine, value, expected", [
    ("vllm", "8k", 8000), ("vllm", "32K", 32768), ("vllm", "25.6k", 25600), ("vllm", "8192", 8192),
    ("sglang", "8k", 8000), ("sglang", "8Ki", 8192), ("sglang", "25.6k", 25600)])
def test_human_readable_max_model_len(tmp_path, engine, value, expected):
    """vLLM 0.33.0 argparse_utils.py human_readable_int: k = 10**3, K = 2**10; SGLang 0.5.23 common.py
    human_readable_int: k = 10**3, Ki = 2**10 (case-sensitive)."""
    text = (f"vllm serve meta-llama/Llama-3.1-8B --max-model-len {value}\n" if engine == "vllm" else
            f"python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --context-length {value}\n")
    result = check_launch_file(_file(tmp_path, text), cluster="dgx-h100", gpus=1)
    assert result["launches"][0]["recomputed"]["max_model_len"] == expected


@pytest.mark.parametrize("engine, value", [("vllm", "1.5K"), ("vllm", "8x"), ("vllm", "0"), ("sglang", "8K"),
                                           ("sglang", "auto"), ("sglang", "8m")])
def test_human_readable_integers_the_engine_refuses_are_bad_input(tmp_path, engine, value):
    """Decimals with binary suffixes, unknown or wrong-case suffixes (SGLang has no K or m), auto outside vLLM's
    max_model_len: the engine's parser exits on them."""
    text = (f"vllm serve meta-llama/Llama-3.1-8B --max-model-len {value}\n" if engine == "vllm" else
            f"python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --context-length {value}\n")
    proc = _planner("check", str(_file(tmp_path, text)), "-c", "dgx-h100", "--gpus", "1")
    assert proc.returncode == 2 and "suffixes" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["auto", "-1", "AUTO"])
def test_vllm_max_model_len_auto_fits_the_pool(tmp_path, value):
    """auto / -1: the model's length if one sequence fits, else the longest the KV pool holds (vLLM 0.33.0
    config/model.py max_model_len). 70B bf16 on 8 H200: 131,072 fits. On 2 H100 (tp2) the pool of 0.92 x 79.65 GiB
    minus ~65.7 GiB of weights holds far fewer: auto resolves to what it holds, by hand pool // bytes per token
    (80 x 2 x 4 KV heads per GPU x 128 x 2 B = 163,840 B/token), and passes."""
    big = check_launch_file(_file(tmp_path, f"vllm serve meta-llama/Llama-3.1-70B -tp 8 --max-model-len {value}\n"),
                            cluster="hgx-h200")
    assert big["verdict"] == "pass" and big["launches"][0]["recomputed"]["max_model_len"] == 131072
    small = check_launch_file(_file(tmp_path, f"vllm serve meta-llama/Llama-3.1-70B -tp 2 --max-model-len {value}\n"),
                              cluster="dgx-h100")
    rec = small["launches"][0]["recomputed"]
    assert small["verdict"] == "pass" and rec["kv_bytes_per_token"] == 163840
    assert rec["max_model_len"] == rec["memory_bytes"]["kv_cache"] // 163840 < 131072
    assert any("fits it to" in w for w in small["warnings"])


# ---------------------------------------------------------------- scripts: missing values, variables, shared machine

def test_value_flag_without_its_value_says_expected_one_argument(tmp_path):
    """argparse exits 'argument --tensor-parallel-size: expected one argument' when the next word is a flag."""
    proc = _planner("check", str(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size "
                                                 "--max-model-len 8192\n")), "-c", "hgx-h200")
    assert proc.returncode == 2 and "--tensor-parallel-size: expected one argument" in proc.stderr, proc.stderr
    assert "True" not in proc.stderr


def test_shell_variables_of_the_script_are_expanded(tmp_path):
    """`MODEL=...; TP=8` then `vllm serve $MODEL --tensor-parallel-size $TP`: expanded as bash does (the Megatron
    reader's expansion, planner.check.shell): tp 8, context 8k = 8,000, ${SEQS:-64} its default 64."""
    text = ("MODEL=meta-llama/Llama-3.1-70B; TP=8\nexport LEN=8k\n"
            "vllm serve $MODEL --tensor-parallel-size $TP --max-model-len ${LEN} --max-num-seqs ${SEQS:-64}\n")
    result = check_launch_file(_file(tmp_path, text), cluster="hgx-h200")
    row = result["launches"][0]
    assert result["verdict"] == "pass" and row["parallelism"]["tp"] == 8 and row["line"] == 3
    assert row["recomputed"]["max_model_len"] == 8000
    unset = _planner("check", str(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B -tp $TP\n", "unset.sh")),
                     "-c", "hgx-h200")
    assert unset.returncode == 2 and "'$TP'" in unset.stderr


def test_two_servers_on_one_port_or_the_same_gpus_fail(tmp_path):
    """Two servers without --port both listen on vLLM's 8000 (entrypoints/common/cli_args.py) and, without
    CUDA_VISIBLE_DEVICES, both start on GPU 0; the second fails at start-up."""
    both = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B &\nvllm serve meta-llama/Llama-3.1-8B "
                                             "&\nwait\n"), cluster="dgx-h100")
    assert sorted(_rules(both)) == ["gpus_shared", "port_in_use"]
    assert [v["line"] for v in both["violations"]] == [2, 2]
    overlap = check_launch_file(_file(tmp_path, "CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-8B -tp 2 "
                                                "--port 8000 &\nCUDA_VISIBLE_DEVICES=1,2 vllm serve "
                                                "meta-llama/Llama-3.1-8B -tp 2 --port 8001 &\n"), cluster="dgx-h100")
    assert _rules(overlap) == ["gpus_shared"] and "GPU(s) 1" in overlap["violations"][0]["message"]
    apart = check_launch_file(_file(tmp_path, "CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server --model-path "
                                              "meta-llama/Llama-3.1-8B --tp-size 2 &\nCUDA_VISIBLE_DEVICES=2,3 python -m "
                                              "sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 2 "
                                              "--port 30001 &\n"), cluster="dgx-h100")
    assert apart["verdict"] == "pass"   # SGLang's default port is 30000 (srt/arg_groups/fields/serving.py)


def test_emit_replicas_on_two_nodes_are_guarded_by_node_rank(tmp_path):
    """review-fresh5 #6: two tp8 replicas of 70B on 16 H100 land on nodes 0 and 1. The emitted script puts each
    node's server inside `if [ "$NODE_RANK" = N ]; then ... fi` and refuses to run with NODE_RANK unset, so
    `bash launch.sh` on one node cannot start both on GPUs 0-7. Run under bash with a stub `vllm`, NODE_RANK=1
    starts only the second replica (port 8001). Read back, check places each server on its block's node: it
    passes; the same two servers in node 0's block share GPUs 0-7 there (gpus_shared, the rule for servers
    of one node)."""
    proc = _planner("serve-plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "16", "--input-len", "2000",
                    "--output-len", "300", "--ttft-ms", "1000", "--tpot-ms", "40", "--fix", "tp=8",
                    "--emit", "vllm")  # tp 8 pinned: one whole-node replica per node, whatever the search prefers
    assert proc.returncode == 0 and "check: PASS" in proc.stderr, proc.stderr
    blocks = re.findall(r'if \[ "\$NODE_RANK" = (\d) \]; then\n((?:  .*\n)+)fi\n', proc.stdout)
    assert [n for n, _ in blocks] == ["0", "1"]
    assert [body.count("vllm serve") for _, body in blocks] == [1, 1]
    path = _file(tmp_path, proc.stdout)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "vllm").write_text('#!/bin/sh\nfor a in "$@"; do [ "$prev" = --port ] && echo "port $a"; prev=$a; done\n')
    (stub / "vllm").chmod(0o755)
    env = {"PATH": f"{stub}:/usr/bin:/bin"}
    ran = subprocess.run(["bash", str(path)], capture_output=True, text=True, env={**env, "NODE_RANK": "1"})
    assert ran.returncode == 0 and ran.stdout.split() == ["port", "8001"], ran
    unset = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env)
    assert unset.returncode != 0 and "NODE_RANK" in unset.stderr and not unset.stdout
    result = check_launch_file(path, cluster="dgx-h100", gpus=16)
    assert result["verdict"] == "pass", result["violations"]
    one_node = _file(tmp_path, proc.stdout.replace('"$NODE_RANK" = 1', '"$NODE_RANK" = 0'), "one.sh")
    shared = check_launch_file(one_node, cluster="dgx-h100", gpus=16)
    assert "gpus_shared" in _rules(shared) and "node 0" in shared["violations"][0]["message"]


def test_bad_value_in_a_vllm_config_yaml_names_the_yaml_file_and_key(tmp_path):
    """review-fresh5 #8: `vllm serve --config vcfg.yaml` whose YAML has `max-model-len: "lots"` was reported
    against the launch script (`vc.sh: --max-model-len`); the value is the YAML's, so the error names that
    file and its key as written. A value the command line gives (it wins over the YAML) is the script's."""
    _file(tmp_path, 'max_model_len: "lots"\n', "vcfg.yaml")
    script = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --config vcfg.yaml\n", "vc.sh")
    proc = _planner("check", str(script), "-c", "dgx-h100")
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'vcfg.yaml'}: max_model_len: value 'lots'" in proc.stderr and "vc.sh" not in proc.stderr
    bad_flag = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --config vcfg.yaml --max-model-len lots2\n", "vd.sh")
    proc = _planner("check", str(bad_flag), "-c", "dgx-h100")
    assert proc.returncode == 2 and f"{bad_flag}: --max-model-len: value 'lots2'" in proc.stderr, proc.stderr


def test_full_length_concurrency_is_a_note_not_a_finding(tmp_path):
    """Senior review 8 finding 11: an ordinary 70B launch (max-model-len 131,072 as a ceiling, 256 sequences) was
    told `Fix: --max-num-seqs 10`, which would cut a chat load's decode batch ~25x. The engine allocates KV as a
    sequence grows and admits requests while the pool has room (vLLM logs the full-length count at start-up as
    information), so check notes the count and finds nothing. By hand: 70B bf16 KV is 80 layers x 8 KV heads x 128
    x 2 (K, V) x 2 B = 327,680 B/token, 40,960 per GPU at tp8; a pool of ~50 GiB per GPU (0.9 x 79.6 GiB less 16.4
    GiB of weights and a few GiB of activations and reserve) holds ~1.3M tokens, about 10 sequences of 131,072."""
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8 --max-model-len "
                           "131072 --gpu-memory-utilization 0.9 --max-num-seqs 256\n")
    proc = _planner("check", str(path), "-c", "dgx-h100", "--gpus", "8", "--format", "json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["verdict"] == "pass" and data["violations"] == [], data["violations"]
    [note] = [w for w in data["warnings"] if w.startswith("--max-num-seqs 256:")]
    fit = int(note.split(" holds ")[1].split(" of ")[0])
    assert 8 <= fit <= 12 and "at the full --max-model-len 131,072 tokens" in note
    assert "admits requests while the pool has room" in note
