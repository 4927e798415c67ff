"""The checkpoint's own weight format (config.json `quantization_config`) and GPUs without bf16, in
`planner check` of vLLM / SGLang launches and in `planner serve-plan`.

Engines load a quantized checkpoint in its format when no quantization flag is given (vLLM
`vllm/config/model.py` ModelConfig._verify_quantization; SGLang `srt/configs/model_config.py`
_verify_quantization), and refuse a flag that names another. Expected weights are hand arithmetic
written out below from the configs (catalog totals: README's `planner models` table)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.check.engine_file import check_launch_file
from planner.cost import serving as sv
from planner.cost.params_flops import count_params
from planner.errors import SpecError
from planner.specs.model import QUANT_METHODS, from_config, load_model

ROOT = Path(__file__).resolve().parents[1]
FIELD = {c["id"]: c for c in yaml.safe_load((ROOT / "tests/data/reference/field_cases.yaml").read_text())["cases"]}
GIB = 2**30

# gpt-oss-120b: 36 layers x 128 experts x (gate_up 2880 x 5760 + down 2880 x 2880) = 114.66e9 routed-expert
# weights in MXFP4 (4 bits + one 1-byte scale per 32: 0.5 + 1/32 B), which vLLM's MXFP4 MoE kernels load
# zero-padded to hidden 3072 / intermediate 2944 (x 3072 x 2944 / 2880^2); the other 116.83e9 - 114.66e9
# in bf16 (expert biases too).
GPT_OSS_EXPERTS = 36 * 128 * 3 * 2880 * 2880
GPT_OSS_WEIGHTS_GIB = (GPT_OSS_EXPERTS * 3072 * 2944 / 2880**2 * (0.5 + 1 / 32)
                       + (116.83e9 - GPT_OSS_EXPERTS) * 2) / GIB  # 65.90
# DeepSeek-V3 at TP 8 (experts split 8 ways): 58 MoE layers x 256 experts x 3 x 7168 x 2048 = 653.91e9
# routed weights and the other 671.03e9 - 653.91e9 - 1.85e9 (embedding + LM head, 2 x 129,280 x 7,168,
# bf16) in fp8 with one 4-byte scale per 128 x 128 block, all / 8 except the MLA down-projections
# (61 x 7168 x (1536 + 576)), whole on every rank.
_DS_ROUTED = 58 * 256 * 3 * 7168 * 2048
_DS_EMBED = 2 * 129280 * 7168
_DS_REPLICATED = 61 * 7168 * (1536 + 576)
_DS_FP8 = 1 + 4 / (128 * 128)
DEEPSEEK_TP8_WEIGHTS_GIB = ((671.03e9 - _DS_EMBED - _DS_REPLICATED) * _DS_FP8 / 8 + _DS_REPLICATED * _DS_FP8
                            + _DS_EMBED * 2 / 8) / GIB  # 79.11


def _file(tmp_path: Path, text: str, name: str = "launch.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rules(result: dict, severity: str = "error") -> list[str]:
    return [v["rule"] for v in result["violations"] if v["severity"] == severity]


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", "serve-plan", *args], capture_output=True, text=True,
                          cwd=ROOT)


# ---------------------------------------------------------------- ModelSpec

@pytest.mark.parametrize("name, expected", [("deepseek-v3", "fp8-block"), ("kimi-k2", "fp8-block"),
                                            ("gpt-oss-120b", "mxfp4"), ("llama-3.1-70b", None)])
def test_catalog_checkpoint_formats(name, expected):
    assert load_model(name).weight_format == expected


def test_quant_methods_map_to_weight_formats():
    assert set(QUANT_METHODS.values()) <= set(sv.WEIGHT_FORMATS)


@pytest.mark.parametrize("config, expected, kept", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block", None),
    ({"quant_method": "fp8", "activation_scheme": "static"}, "fp8", None),
    ({"quant_method": "mxfp4"}, "mxfp4", None),
    ({"quant_method": "fp8", "weight_block_size": [64, 64]}, None, "fp8"),  # another block: not modelled
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4", None),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}, "int4", None),
    ({"quant_method": "awq", "bits": 4, "group_size": 64}, None, "awq (bits 4, group_size 64)"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, None, "gptq (bits 8, group_size 128)"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, None, "bitsandbytes"),
    ({"quant_method": "compressed-tensors"}, None, "compressed-tensors"),
])
def test_quantization_config_read(config, expected, kept):
    raw = yaml.safe_load((ROOT / "models/llama-3.1-8b.yaml").read_text())
    spec = from_config({**raw, "quantization_config": config}, name="q")
    assert spec.weight_format == expected and spec.extra.get("quant_method") == kept


@pytest.mark.parametrize("config", ["fp8", {"bits": 4}, {"quant_method": "fp8", "weight_block_size": [128]},
                                    {"quant_method": "fp8", "weight_block_size": [128, "x"]}])
def test_bad_quantization_config_is_bad_input(config):
    raw = yaml.safe_load((ROOT / "models/llama-3.1-8b.yaml").read_text())
    with pytest.raises(SpecError, match="quantization_config"):
        from_config({**raw, "quantization_config": config}, name="q")


def test_training_sees_the_same_model():
    """Training never reads the checkpoint format: the spec without quantization_config is the same
    model field for field, and its parameter count is unchanged."""
    raw = yaml.safe_load((ROOT / "models/deepseek-v3.yaml").read_text())
    plain = from_config({k: v for k, v in raw.items() if k != "quantization_config"}, name="deepseek-v3")
    quantized = from_config(raw, name="deepseek-v3")
    assert dataclasses.replace(quantized, weight_format=None) == plain
    assert count_params(quantized).total == count_params(plain).total


# ---------------------------------------------------------------- planner check

def test_deepseek_v3_launch_without_flag_is_costed_fp8_block(tmp_path):
    # Before: costed bf16, 157.92 GiB per GPU, no KV pool. The engines load the FP8 release.
    result = check_launch_file(_file(tmp_path, "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8\n"),
                               cluster="hgx-h200", gpus=8)
    weights = result["launches"][0]["recomputed"]["memory_bytes"]["weights"] / GIB
    assert weights == pytest.approx(DEEPSEEK_TP8_WEIGHTS_GIB, rel=0.005)
    assert "memory_exceeds" not in _rules(result)
    same = check_launch_file(_file(tmp_path, "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 "
                                             "--quantization fp8\n", "q.sh"), cluster="hgx-h200", gpus=8)
    assert same["launches"][0]["recomputed"]["memory_bytes"]["weights"] / GIB == pytest.approx(weights)


def test_gpt_oss_launch_without_flag_is_costed_mxfp4_and_fc18(tmp_path):
    # Before: bf16, 217.61 GiB on one H100. FC-18 reports 65.97 GiB of weights under vLLM on Hopper:
    # the padded MXFP4 experts (65.90 GiB by hand) within 0.2 %.
    result = check_launch_file(_file(tmp_path, "vllm serve openai/gpt-oss-120b\n"), cluster="dgx-h100", gpus=1)
    weights = result["launches"][0]["recomputed"]["memory_bytes"]["weights"] / GIB
    assert weights == pytest.approx(GPT_OSS_WEIGHTS_GIB, rel=0.005)
    reported = FIELD["FC-18"]["reported"]["weights_gib"]
    assert abs(weights - reported) / reported < 0.002


@pytest.mark.parametrize("engine_line", [
    "vllm serve openai/gpt-oss-120b --quantization awq\n",
    "python -m sglang.launch_server --model-path openai/gpt-oss-120b --quantization fp8\n"])
def test_quantization_flag_contradicting_the_checkpoint_is_an_error(tmp_path, engine_line):
    result = check_launch_file(_file(tmp_path, engine_line), cluster="dgx-h100", gpus=1)
    v = next(v for v in result["violations"] if v["rule"] == "quantization_mismatch")
    assert "mxfp4" in v["message"] and v["fix"].startswith("remove --quantization")


def test_v100_bf16_in_vllm(tmp_path):
    """vLLM 0.33.0 on a GPU without bf16: an explicit --dtype bfloat16 exits (CudaPlatform.
    check_if_supports_dtype, fix --dtype=half); the default auto dtype falls back to float16
    (_resolve_auto_dtype), same 2 bytes per element: a warning, the launch passes."""
    base = "vllm serve meta-llama/Llama-3.1-8B --max-model-len 8192"
    auto = check_launch_file(_file(tmp_path, base + "\n"), cluster="dgx2-v100", gpus=1)
    assert auto["verdict"] == "pass" and "dtype_fallback" in _rules(auto, "warning")
    explicit = check_launch_file(_file(tmp_path, base + " --dtype bfloat16\n", "b.sh"), cluster="dgx2-v100", gpus=1)
    v = next(v for v in explicit["violations"] if v["rule"] == "dtype_unsupported")
    assert v["fix"] == "--dtype half" and explicit["verdict"] == "fail"
    half = check_launch_file(_file(tmp_path, base + " --dtype half\n", "h.sh"), cluster="dgx2-v100", gpus=1)
    assert half["verdict"] == "pass" and not half["violations"]
    h100 = check_launch_file(_file(tmp_path, base + " --dtype bfloat16\n", "x.sh"), cluster="dgx-h100", gpus=1)
    assert not h100["violations"]


def test_v100_sglang_warns_it_does_not_start(tmp_path):
    result = check_launch_file(_file(tmp_path, "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B "
                                               "--context-length 8192\n"), cluster="dgx2-v100", gpus=1)
    assert "legacy_gpu" in _rules(result, "warning")


# ---------------------------------------------------------------- planner serve-plan

def test_serve_plan_defaults_to_the_checkpoint_format():
    # Before: bf16 (217.61 GiB), "4 GPUs needed". MXFP4 experts fit one H100.
    proc = _serve("-m", "gpt-oss-120b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "1000", "--output-len", "200",
                  "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["request"]["weight_dtype"] == "mxfp4" and "checkpoint" in data["request"]["weight_dtype_reason"]
    assert any(n.startswith("weights mxfp4: the checkpoint's format") for n in data["notes"])
    assert data["plans"][0]["memory_bytes"]["weights"] / GIB == pytest.approx(GPT_OSS_WEIGHTS_GIB, rel=0.005)
    plain = _serve("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--input-len", "1000", "--output-len",
                   "200", "--format", "json")
    assert json.loads(plain.stdout)["request"]["weight_dtype"] == "bf16"


def test_emit_writes_no_redundant_quantization_flag():
    proc = _serve("-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "8", "--input-len", "1000", "--output-len", "200",
                  "--emit", "vllm")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if "vllm serve" in line]
    assert commands and not any("--quantization" in c for c in commands)
    assert "the checkpoint's format" in proc.stdout
    # A bf16 plan of an FP8 checkpoint is not what the engines would load: bad input for --emit.
    bf16 = _serve("-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "16", "--input-len", "1000", "--output-len", "200",
                  "--weight-dtype", "bf16", "--emit", "vllm")
    assert bf16.returncode == 2 and "checkpoint is fp8-block" in bf16.stderr


def test_serve_plan_on_v100_chooses_fp16_and_says_so():
    proc = _serve("-m", "llama-3.1-8b", "-c", "dgx2-v100", "--gpus", "1", "--input-len", "1000", "--output-len", "200",
                  "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["request"]["weight_dtype"] == "fp16" and data["request"]["kv_dtype"] == "fp16"
    assert any("has no bf16: fp16" in n for n in data["notes"])
    emitted = _serve("-m", "llama-3.1-8b", "-c", "dgx2-v100", "--gpus", "1", "--input-len", "1000", "--output-len",
                     "200", "--emit", "vllm")
    assert emitted.returncode == 0 and "--dtype half" in emitted.stdout


@pytest.mark.parametrize("model, cluster, dtype", [("llama-3.1-8b", "dgx2-v100", "fp8"),
                                                   ("llama-3.1-8b", "dgx2-v100", "bf16"),
                                                   ("deepseek-v3", "dgx2-v100", None)])
def test_serve_plan_refuses_formats_the_gpu_cannot_run(model, cluster, dtype):
    proc = _serve("-m", model, "-c", cluster, "--gpus", "8", "--input-len", "1000", "--output-len", "200",
                  *(("--weight-dtype", dtype) if dtype else ()))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "allowed there: fp16" in proc.stderr


def test_nvfp4_on_a100_runs_weight_only():
    """vLLM 0.33.0 ModelOptNvFp4Config.get_min_capability is 75 (Marlin W4A16 on Turing and later):
    A100 runs NVFP4 weights without fp4 tensor cores. Costed as such and said, not refused."""
    proc = _serve("-m", "llama-3.1-8b", "-c", "dgx-a100-80g", "--gpus", "1", "--input-len", "1000", "--output-len",
                  "200", "--weight-dtype", "nvfp4", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "weight-only" in json.loads(proc.stdout)["request"]["weight_dtype_reason"]


def test_checkpoint_format_the_gpu_cannot_run_names_a_bf16_checkpoint(tmp_path):
    # Removing --quantization does not help when the format is the checkpoint's own.
    result = check_launch_file(_file(tmp_path, "vllm serve deepseek-ai/DeepSeek-V3 -tp 16\n"), cluster="dgx2-v100",
                               gpus=16)
    v = next(v for v in result["violations"] if v["rule"] == "quantization_unsupported")
    assert v["message"].startswith("the checkpoint (fp8-block weights)") and v["fix"] == "a bf16 checkpoint of deepseek-v3"


@pytest.mark.parametrize("config", [
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    {"quant_method": "gptq", "bits": 8, "group_size": 128},
    {"quant_method": "compressed-tensors"}])
def test_serving_refuses_a_checkpoint_format_it_does_not_model(tmp_path, config):
    """Before: costed as bf16 with a note and exit 0 (4x the bytes of a 4-bit checkpoint). The engines load
    the checkpoint's format whatever the flags say, so serve-plan and check refuse it, naming the key."""
    raw = yaml.safe_load((ROOT / "models/llama-3.1-8b.yaml").read_text())
    folder = tmp_path / "m"
    folder.mkdir()
    fields = {k: v for k, v in raw.items() if k not in ("name", "hf_id", "hf_aliases", "source")}
    (folder / "config.json").write_text(json.dumps({**fields, "quantization_config": config}))
    proc = _serve("-m", str(folder), "-c", "dgx-h100", "--gpus", "1", "--input-len", "1000", "--output-len", "200")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "quantization_config.quant_method" in proc.stderr and "awq or gptq with bits 4" in proc.stderr
    with pytest.raises(SpecError, match="quantization_config.quant_method"):
        check_launch_file(_file(tmp_path, f"vllm serve {folder}\n"), cluster="dgx-h100", gpus=1)


def test_awq_4bit_group_128_checkpoint_is_costed_int4(tmp_path):
    """4-bit weights + per group of 128 one fp16 scale and one 4-bit zero: 4 + (16 + 4) / 128 = 4.15625 bits per
    weight. Llama-3.1-8B on one GPU: the 32 layers' linear weights (32 x (2 x 4,096^2 + 2 x 4,096 x 1,024 + 3 x
    4,096 x 14,336) = 6,979,321,856 at 4.15625 bits) + embedding and LM head in bf16 (2 x 128,256 x 4,096 x 2
    bytes) + norms (65 x 4,096 x 2 bytes) = 3,625,975,808 + 2,101,346,304 + 532,480 = 5,727,854,592 bytes."""
    raw = yaml.safe_load((ROOT / "models/llama-3.1-8b.yaml").read_text())
    folder = tmp_path / "m"
    folder.mkdir()
    fields = {k: v for k, v in raw.items() if k not in ("name", "hf_id", "hf_aliases", "source")}
    (folder / "config.json").write_text(json.dumps(
        {**fields, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}))
    proc = _serve("-m", str(folder), "-c", "dgx-h100", "--gpus", "1", "--input-len", "1000", "--output-len", "200",
                  "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["request"]["weight_dtype"] == "int4"
    assert data["plans"][0]["memory_bytes"]["weights"] / 2**30 == pytest.approx(5_727_854_592 / 2**30, rel=0.002)


def test_metas_fp8_405b_is_refused_with_why_and_the_ids_that_plan_it(tmp_path):
    """meta-llama/Llama-3.1-405B-Instruct-FP8 (senior review 11): Meta's FP8 release keeps attention and the first
    and last layers in bf16 (Llama 3 paper section 6.2), a mix the planner does not cost; exit 2 naming that and
    the ids it does read (NVIDIA's all-FP8 release, the bf16 catalog model), not a config.json route that is
    refused as well; NVIDIA's release of the same model resolves."""
    from tests.cli_run import planner
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-405B-Instruct-FP8 -tp 8 --max-model-len 16384\n")
    result = planner("check", str(path), "-c", "dgx-h100")
    message = result.stdout + result.stderr
    assert result.returncode == 2, message
    assert "fbgemm_fp8" in message and "self-attention" in message and "first and last layers in bf16" in message
    assert "-m nvidia/Llama-3.1-405B-Instruct-FP8" in message and "`-m llama-3.1-405b`" in message
    assert "download its config.json" not in message
    path.write_text("vllm serve nvidia/Llama-3.1-405B-Instruct-FP8 -tp 8 --max-model-len 16384\n")
    assert planner("check", str(path), "-c", "dgx-h100").returncode == 0
