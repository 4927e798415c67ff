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
