"""MXFP8 needs compute capability 10.0 (Blackwell): NVIDIA/TransformerEngine@d0067d0
transformer_engine/pytorch/quantization.py `_compute_mxfp8_support` ("Device compute capability
10.0 or higher required for MXFP8 execution."). H100 is 9.0, A100 8.0, B200 10.0 (NVIDIA CUDA
GPUs compute-capability table). Asking it elsewhere is bad input in plan / explain (exit 2) and
the rule precision_supported in check (review-fresh6 finding 7)."""

from __future__ import annotations

import json

import pytest

from planner.placement.layout import Layout
from planner.placement.rules import check_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.cli_run import planner

LLAMA_8B = load_model("llama-3.1-8b")


@pytest.mark.parametrize("cluster, refused", [("dgx-h100", True), ("hgx-h200", True), ("dgx-b200", False)])
def test_mxfp8_rule_follows_compute_capability(cluster, refused):
    layout = Layout(dp=8, global_batch_size=8, precision="fp8", fp8_recipe="mxfp8")
    found = [v for v in check_layout(LLAMA_8B, load_cluster(cluster, gpus=8), layout)
             if v.rule == "precision_supported"]
    assert bool(found) == refused
    if refused:
        assert found[0].severity == "error" and "10.0" in found[0].message
    # another recipe on the same GPU: no finding
    assert not [v for v in check_layout(LLAMA_8B, load_cluster(cluster, gpus=8),
                                        layout.replace(fp8_recipe="tensorwise")) if v.rule == "precision_supported"]


@pytest.mark.parametrize("command", [
    ("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--precision", "fp8", "--fp8-recipe", "mxfp8"),
    ("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--dp", "8", "--precision", "fp8", "--fp8-recipe", "mxfp8"),
])
def test_plan_and_explain_refuse_mxfp8_before_blackwell(command):
    result = planner(*command)
    assert result.returncode == 2
    assert "--fp8-recipe" in result.stderr and "H100-SXM5-80GB" in result.stderr and "10.0" in result.stderr


def test_check_fails_a_megatron_script_asking_mxfp8_on_h100(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
                      "--tensor-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 8 "
                      "--seq-length 4096 --bf16 --fp8-format e4m3 --fp8-recipe mxfp8 --rotary-base 500000\n")
    result = planner("check", str(script), "-m", "llama-3.1-8b", "-c", "dgx-h100", "--format", "json")
    assert result.returncode == 1
    rules = [v["rule"] for v in json.loads(result.stdout)["violations"] if v["severity"] == "error"]
    assert "precision_supported" in rules
