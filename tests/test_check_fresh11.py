"""`planner check` of the fresh-user review 11 files (/work/notes/review-fresh11.md; the reviewer's own files, copied
into tests/data/configs/fresh11/): GPUs pinned by `export CUDA_VISIBLE_DEVICES=...` on a line of its own (#2),
SGLang's multi-node form `--node-rank $NODE_RANK` (#3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.check.engine_file import check_launch_file
from tests.cli_run import planner

DATA = Path(__file__).parent / "data" / "configs" / "fresh11"


def _errors(result: dict) -> dict[str, str]:
    return {v["rule"]: v["message"] for v in result["violations"] if v["severity"] == "error"}


@pytest.mark.parametrize("name, flag", [("h3.sh", "--tensor-parallel-size 8"), ("h3b.sh", "--tensor-parallel-size 8"),
                                        ("h3c.sh", "--tp-size 8")])
def test_exported_visible_devices_limit_the_launch(name, flag):
    """`export CUDA_VISIBLE_DEVICES=0,1,2,3` then a tp8 server (h3: vLLM, h3c: SGLang) fails as the inline prefix
    (h3b) does: bash passes exported variables to every later command, so the engine sees 4 GPUs for 8 ranks."""
    errors = _errors(check_launch_file(DATA / name, cluster="dgx-h100"))
    assert set(errors) == {"world_size"}, errors
    assert f"starts 8 ranks ({flag}) but CUDA_VISIBLE_DEVICES gives it 4 GPUs" in errors["world_size"]


def test_exported_visible_devices_shared_by_two_servers():
    """h3d: two tp4 servers after one `export CUDA_VISIBLE_DEVICES=0,1,2,3` both run on GPUs 0-3."""
    errors = _errors(check_launch_file(DATA / "h3d.sh", cluster="dgx-h100"))
    assert set(errors) == {"gpus_shared"}, errors
    assert "runs on GPU(s) 0,1,2,3, as does line 2 (CUDA_VISIBLE_DEVICES 0,1,2,3)" in errors["gpus_shared"]


@pytest.mark.parametrize("script", [
    "DEVICES=0,1,2,3\nexport CUDA_VISIBLE_DEVICES=$DEVICES\n",  # exported with a variable's value
    "CUDA_VISIBLE_DEVICES=0,1,2,3\nexport CUDA_VISIBLE_DEVICES\n",  # assigned, then exported by name
    "export CUDA_VISIBLE_DEVICES\nCUDA_VISIBLE_DEVICES=0,1,2,3\n",  # exported, then assigned: still exported
])
def test_assigned_and_exported_forms(tmp_path, script):
    path = tmp_path / "e.sh"
    path.write_text(script + "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8\n")
    assert "gives it 4 GPUs" in _errors(check_launch_file(path, cluster="dgx-h100"))["world_size"]


@pytest.mark.parametrize("script", [
    "CUDA_VISIBLE_DEVICES=0,1,2,3\n",  # assigned, never exported: not in the server's environment
    "export CUDA_VISIBLE_DEVICES=0,1,2,3\nunset CUDA_VISIBLE_DEVICES\n",  # unset again
])
def test_unexported_visible_devices_do_not_apply(tmp_path, script):
    path = tmp_path / "u.sh"
    path.write_text(script + "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8\n")
    assert _errors(check_launch_file(path, cluster="dgx-h100")) == {}


def test_container_copies_exported_nvidia_visible_devices(tmp_path):
    """`docker run -e NVIDIA_VISIBLE_DEVICES` (by name) copies the exported host value into the container: 2 GPUs
    for tp 8. The host's CUDA_VISIBLE_DEVICES does not enter a container."""
    path = tmp_path / "d.sh"
    path.write_text("export NVIDIA_VISIBLE_DEVICES=0,1\n"
                    "docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES vllm/vllm-openai:latest "
                    "--model meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8\n")
    assert "NVIDIA_VISIBLE_DEVICES=0,1 gives it 2 GPUs" in _errors(check_launch_file(path, cluster="dgx-h100"))[
        "world_size"]
    path.write_text("export CUDA_VISIBLE_DEVICES=0,1\n"
                    "docker run --gpus all vllm/vllm-openai:latest "
                    "--model meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8\n")
    assert "world_size" not in _errors(check_launch_file(path, cluster="dgx-h100"))


def test_sglang_node_rank_variable_is_the_multi_node_engine():
    """sg48.sh: `--nnodes 6 --node-rank $NODE_RANK --dist-init-addr $HEAD:5000` (SGLang's multi-node docs' form) was
    exit 2 ('uses the shell variable NODE_RANK'); the rank is per node, the engine spans 6 nodes of 8: ep 48 over 6
    nodes meets the DeepEP node-count rule, as the same file with `--node-rank 0` does (review #3)."""
    result = check_launch_file(DATA / "sg48.sh", cluster="dgx-h100", gpus=48)
    errors = _errors(result)
    assert {"deepep_node_count", "memory_exceeds"} <= set(errors), errors
    assert "ep 48 is 6 nodes" in errors["deepep_node_count"]
    launch = result["launches"][0]
    assert (launch["world"], launch["nnodes"], launch["node_rank"]) == (48, 6, 0), launch


def test_sglang_negative_default_fraction_says_why():
    """SGLang's default for sg48 (H100 80 GB: nvidia-smi 79.65 x 1024 MiB; tp 48, attn-dp 48, MLA, deepep, chunk
    8192, decode graphs' max batch 512 at tp >= 4), hand arithmetic of `default_mem_fraction_static`'s terms:
    512 + 1.5 x 8192 = 12288 + 48 / 8 x 1024 = 6144 + decode graphs 512 x 2 + 512 x 48 x 3 + 512 x 48 x 1.5 = 111616
    + prefill graphs 1536 + 1024 + deepep 2048 = 135168 MiB = 132.0 GiB; (81561.6 - 135168) / 81561.6 = -0.657."""
    errors = _errors(check_launch_file(DATA / "sg48.sh", cluster="dgx-h100", gpus=48))
    message = errors["memory_exceeds"]
    assert "--mem-fraction-static -0.657 x 79.65 GiB" in message
    assert ("it is not positive because SGLang's formula reserves 132.0 GiB per GPU of 79.65 GiB, decode graphs "
            f"{111616 / 1024:.1f} GiB of it (48 attention-DP ranks: SGLang's own default reserves decode-graph memory "
            "per DP rank") in message
    assert "set --mem-fraction-static or cap the graphs' batch with a smaller --max-running-requests" in message
