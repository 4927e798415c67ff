"""A GPU whose family has no measured run in calibration/training.yaml borrows another family's
GEMM efficiency; plan says so instead of printing an MFU as if it were measured (senior review:
MI300X at 55.7% MFU from H100's constants, silently)."""

from __future__ import annotations

import yaml

from planner.cost.compute import CALIBRATION_FILE, unfitted_note
from planner.plan import plan
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model


def test_fallback_family_is_named():
    fallback = yaml.safe_load(CALIBRATION_FILE.read_text())["families"]["MI300X"]["fallback"]
    note = unfitted_note(load_cluster("mi300x", gpus=8).gpu)
    assert note is not None and f"{fallback}'s" in note and "MI300X" in note


def test_fitted_families_carry_no_note():
    for cluster in ("dgx-h100", "dgx-a100-80g", "hgx-h200", "dgx-b200"):
        assert unfitted_note(load_cluster(cluster, gpus=8).gpu) is None, cluster


def test_plan_warns_on_an_unfitted_gpu():
    result = plan(load_model("llama-3.1-8b"), load_cluster("mi300x", gpus=8), seq_len=4096,
                  global_batch_size=128, precision="bf16", optimizer="adamw", framework="megatron",
                  top_k=1)
    assert any("no measured training run" in w for w in result["warnings"])
