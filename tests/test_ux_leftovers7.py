"""Review leftovers of the seventh session (review-fresh7, review-senior7 M5, review-fresh6 #10): the
MFU column's convention, infeasible answers that name what binds, torchtitan exit codes, Hugging Face
id hints and suffixes, docker's NVIDIA_VISIBLE_DEVICES, the default sequence length of 2,048-token
models. Expected values from the frameworks' sources and hand arithmetic, cited per test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import planner
from planner.check.engine_file import check_launch_file
from planner.errors import SpecError


def _file(tmp_path: Path, text: str, name: str = "launch.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- default --seq-len (fresh6 #11)

@pytest.mark.parametrize("model, seq", [("opt-175b", 2048), ("llama-3.1-8b", 4096)])
def test_default_seq_len_is_cut_to_the_models_context(model, seq):
    """OPT-175B's config.json has max_position_embeddings 2048 (models/opt-175b.yaml): without --seq-len
    the layout is costed at 2,048 tokens, not at a 4,096 the model has no positions for; Llama 3.1
    (131,072) keeps the 4,096 default."""
    out = planner("explain", "-m", model, "-c", "dgx-h100", "--gpus", "64", "--tp", "8", "--pp", "8",
                  "--recompute", "full", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["parallelism"]["seq_len"] == seq


# ---------------------------------------------------------------- docker NVIDIA_VISIBLE_DEVICES (closing6 #11)

def _docker(tmp_path, options: str) -> dict:
    """tp 2 x pp 2 = 4 ranks of vLLM in its image (ENTRYPOINT `vllm serve`)."""
    path = _file(tmp_path, f"docker run --rm {options} -p 8000:8000 vllm/vllm-openai:latest "
                           "meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --pipeline-parallel-size 2 "
                           "--max-model-len 8192\n")
    return check_launch_file(path, cluster="dgx-h100")


@pytest.mark.parametrize("options, seen", [
    ("-e NVIDIA_VISIBLE_DEVICES=0,1", 2), ("--runtime=nvidia --env NVIDIA_VISIBLE_DEVICES=0,1", 2),
    ("--runtime nvidia --env=NVIDIA_VISIBLE_DEVICES=GPU-3f2a,GPU-77b1,GPU-0c1d", 3),
    ("--runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=none", 0), ("-eNVIDIA_VISIBLE_DEVICES=void", 0)])
def test_nvidia_visible_devices_of_the_container_limits_the_gpus(tmp_path, options, seen):
    """nvidia-container-toolkit@d34b304 internal/config/image/cuda_image.go devicesFromEnvvars: a list gives
    its devices, `none` / `void` none. 4 ranks on `seen` GPUs fail vLLM's start-up, as with --gpus."""
    result = _docker(tmp_path, options)
    (found,) = [v for v in result["violations"] if v["rule"] == "world_size"]
    text = " ".join(found["message"].split())
    assert "starts 4 ranks" in text and f"NVIDIA_VISIBLE_DEVICES=" in text and f"gives it {seen} GPU" in text
    assert found["fix"].startswith("list 4 GPUs in NVIDIA_VISIBLE_DEVICES")


@pytest.mark.parametrize("options", ["--runtime=nvidia", "--runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all",
                                     "-e NVIDIA_VISIBLE_DEVICES=0,1,2,3",
                                     "--gpus 4 -e NVIDIA_VISIBLE_DEVICES=0"])
def test_nvidia_runtime_with_enough_devices_passes(tmp_path, options):
    """--runtime=nvidia alone: the CUDA base image's NVIDIA_VISIBLE_DEVICES=all; four listed devices hold 4
    ranks; a --gpus request wins over the user's variable (moby@5c48736 daemon/nvidia_linux.go
    setNvidiaGPUs appends its own NVIDIA_VISIBLE_DEVICES after it)."""
    result = _docker(tmp_path, options)
    assert result["verdict"] == "pass", result["violations"]


def test_nvidia_visible_devices_the_toolkit_cannot_read_is_bad_input(tmp_path):
    with pytest.raises(SpecError, match="NVIDIA_VISIBLE_DEVICES.*'gpu0'"):
        _docker(tmp_path, "-e NVIDIA_VISIBLE_DEVICES=gpu0")


# ---------------------------------------------------------------- Hugging Face ids (fresh7 #8b, closing6 #11)

@pytest.mark.parametrize("ref, base", [
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", "llama-3.1-70b"),
    ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "llama-3.1-70b"),
    ("RedHatAI/Mixtral-8x7B-Instruct-v0.1-FP8", "mixtral-8x7b"),
    ("RedHatAI/Qwen3-32B-FP8-dynamic", "qwen3-32b")])
def test_llm_compressor_fp8_releases_are_the_catalog_model_in_fp8(ref, base):
    """llm-compressor@0c1928e examples/quantization_w8a8_fp8/README.md: FP8_DYNAMIC, saved as `-FP8-Dynamic`,
    one byte per weight (per-channel weight scales): the planner's fp8, on the base id's architecture."""
    from planner.specs.hf_ids import lookup
    from planner.specs.model import load_model

    spec, catalog = lookup(ref), load_model(base)
    assert spec.weight_format == "fp8"
    assert (spec.num_hidden_layers, spec.hidden_size, spec.num_key_value_heads, spec.vocab_size) == \
        (catalog.num_hidden_layers, catalog.hidden_size, catalog.num_key_value_heads, catalog.vocab_size)


@pytest.mark.parametrize("ref", ["hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
                                 "hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4",
                                 "TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ"])
def test_int4_releases_of_llama_and_mixtral_are_int4(ref):
    """4-bit weights in groups of 128 (AutoAWQ / AutoGPTQ defaults): the planner's int4."""
    from planner.specs.hf_ids import lookup

    assert lookup(ref).weight_format == "int4"


@pytest.mark.parametrize("ref, hint", [("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
                                       ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
                                       ("TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ", "mixtral-8x7b")])
def test_an_id_extending_a_catalog_id_names_the_catalog_model(tmp_path, ref, hint):
    """fresh7 #8b: `vllm serve Qwen/Qwen2.5-72B-Instruct` was refused without saying that `-m qwen2.5-72b`
    works; the refusal stays (the Instruct release's context differs), now with the hint and the fields to
    compare. TheBloke's GPTQ main branches vary in group size: not read, hinted."""
    path = _file(tmp_path, f"vllm serve {ref} -tp 8\n")
    out = planner("check", str(path), "-c", "dgx-h100")
    assert out.returncode == 2
    text = " ".join(out.stderr.split())
    assert f"`-m {hint}` plans it as" in text and "max_position_embeddings" in text
    passed = planner("check", str(path), "-c", "dgx-h100", "-m", hint)
    if "GPTQ" in ref:  # a quantized release: the hint asks for its config.json, -m BASE would cost 16-bit weights
        assert "give -m the directory of that config.json" in text
        assert passed.returncode == 2 and "--quantization" in passed.stderr
        return
    assert passed.returncode in (0, 1), passed.stderr  # read (the verdict is the layout's)


def test_an_id_of_no_catalog_model_gets_no_hint():
    out = planner("models", "show", "foo/bar-7B")
    assert out.returncode == 2 and "-m " not in out.stderr.split("download")[0]


# ---------------------------------------------------------------- infeasible answers name what binds (fresh7 #5, fresh6 #10)

def _infeasible(*args: str) -> str:
    out = planner("plan", *args)
    assert out.returncode == 1, out.stdout
    return " ".join(out.stderr.split())


def test_a_million_gpus_name_the_batch_that_binds_and_a_batch_that_plans():
    """Llama-3.1-8B (32 layers) on 1,048,576 H100 at 4,096 tokens: tp <= 8 (the NVLink domain), pp <= 32
    (the layers), cp 1 (4,096 tokens leave no 4,096-token shard for cp 2), so dp >= 1,048,576 / (8 x 32)
    = 4,096 and the default batch of 1,024 sequences feeds no layout; 4,096 sequences do. The answer
    said "e.g. tp=16 > 8 GPUs per scale-up domain", a rejection that is not what binds."""
    text = _infeasible("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1048576", "--top", "1")
    assert ("what binds is the global batch: 1,024 sequences are fewer than the least dp x micro-batch, "
            "4,096, of any layout the other rules allow; smallest change: --global-batch-size 4,096") in text
    assert "tp=16" not in text
    relaxed = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1048576", "--top", "1",
                      "--global-batch-size", "4096", "--format", "json")
    assert relaxed.returncode == 0


def test_an_awkward_gpu_count_gets_the_nearest_batch_that_plans_not_one_candidates_fix():
    """fresh6 #10: Llama-3.1-70B on 1,000 GPUs (2^3 x 5^3), 1,024 sequences (2^10): dp must divide both,
    dp <= 8 leaves tp x pp x cp >= 125 > 8 x 80, so no layout; the answer gave the fix of the dp=5
    candidate (1,020 or 1,025). Now the nearest batches with a plan: 1,020 = 20 x 51 (dp 20, tp x pp
    = 50) below, 1,025 = 25 x 41 (dp 25, tp x pp = 40) above -- 1,021-1,023 share with 1,000 only
    divisors up to 2, which leave 500 ranks for tp x pp. Or the batch kept on the nearest whole-node
    counts that plan: 992 = 32 x 31 (dp 32 / 16 / 8 / 4 with tp x pp = 31 x 1 / 2 / 4 / 8) below, and
    1,008 = 16 x 63 above, the next node count (dp 16 / 8 / 4 with tp 1 / 2 / 4 x pp 63)."""
    text = _infeasible("-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "1000", "--top", "1")
    assert "what binds is the global batch: 1,024 sequences divide into no layout" in text
    assert text.endswith("smallest change: --global-batch-size 1,020 or 1,025 (each has a plan); or keep "
                         "the batch on 992 or 1,008 GPUs")
    assert "dp*micro_batch_size = 5*1" not in text
    for option in (("--gpus", "1000", "--global-batch-size", "1020"), ("--gpus", "992")):
        relaxed = planner("plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--top", "1", *option,
                          "--format", "json")
        assert relaxed.returncode == 0, option


def test_an_odd_sequence_is_not_offered_more_cp():
    """fresh7 #5: --seq-len 131073 (odd) on 8 H100 was told "split it (more cp)"; load-balanced CP needs
    2 x cp chunks (Megatron-LM / TE get_batch_on_this_cp_rank) and SP a multiple of tp, so no cp > 1 and
    no even tp splits it; 131,072 (2^17) is what plans."""
    text = _infeasible("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "131073")
    assert "more cp" not in text
    assert "smallest change: --seq-len 131,072 has a plan on these 8 GPUs (seq_len=131,073 is not divisible by 4" in text
