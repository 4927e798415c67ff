"""Predicted peak memory vs the published torchtitan peaks (training_runs.yaml, group
torchtitan-H100-2024-12, Llama 3.1 8B on H100 96 GB @500W). Target: within 10%.

Each row prints its prediction beside the published number (pytest -s). Capacity is the catalog
H100's and is used only for the verdict, not for the comparison.

STATUS: the predictions are NOT yet within 10%, so the comparison is marked xfail(strict=True) —
it turns into a failure the moment it passes, forcing the marker's removal. The gap is in the
activation model, not the state terms (model states 15.0 GiB = 16 B x 8.03e9 / 8 are exact):
- t1/t3 (`selective`): torchtitan's default selective AC is *op-level SAC* (`selective_ac_option =
  "op"`: saves sdpa and every other matmul output, recomputes the rest), not Megatron's selective
  recompute of the attention core; `cost/activations.py` models the latter (112 GiB vs ~60 expected).
- t2 (`full`, s = 32k..262k per row, 32k tokens per GPU): the loss on un-chunked 128k-vocab logits
  keeps bf16 logits + fp32 upcast + fp32 log-softmax (~42 GB at 32k tokens); the output-layer term
  counts only the fp32 logits.
"""

import re
from pathlib import Path

import pytest
import yaml

from planner.cost.memory import memory_per_device
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

GIB = 2**30
RUNS = yaml.safe_load(Path("/work/shared/reference/training_runs.yaml").read_text())["training_runs"]
ROWS = [r for r in RUNS if r.get("group") == "torchtitan-H100-2024-12"
        and re.fullmatch(r"FSDP \d+(, CP \d+)?", r["parallelism"])]


def layout_of(row) -> Layout:
    fsdp = int(re.search(r"FSDP (\d+)", row["parallelism"]).group(1))
    cp_match = re.search(r"CP (\d+)", row["parallelism"])
    cp = int(cp_match.group(1)) if cp_match else 1
    return Layout(dp=fsdp, cp=cp, zero_stage=3, framework="torchtitan",
                  micro_batch_size=row["local_batch"],
                  global_batch_size=row.get("global_batch_seqs", fsdp * row["local_batch"]),
                  seq_len=row["seq_len"], recompute=row["activation_checkpointing"],
                  precision="fp8" if "Float8" in row["techniques"] else "bf16")


def predict(row) -> float:
    cluster = load_cluster("dgx-h100", gpus=row["gpus"])
    return memory_per_device(load_model("llama-3.1-8b"), cluster, layout_of(row)).total / GIB


def test_rows_found():
    assert len(ROWS) >= 7


def test_model_states_exact():
    """FSDP over 8: 16 B x 8,030,261,248 params / 8 (torchtitan fp32 params + grads + Adam m, v)."""
    cluster = load_cluster("dgx-h100", gpus=8)
    m = memory_per_device(load_model("llama-3.1-8b"), cluster, layout_of(ROWS[0]))
    assert m.model_states == pytest.approx(16 * 8_030_261_248 / 8, rel=1e-6)


@pytest.mark.xfail(strict=True, reason="activation model vs torchtitan op-level SAC / un-chunked loss; "
                                       "see module docstring")
@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_peak_within_10_percent(row):
    predicted = predict(row)
    print(f"{row['id']}: predicted {predicted:.1f} GiB, published {row['peak_memory_gib']} GiB")
    assert predicted == pytest.approx(row["peak_memory_gib"], rel=0.10)
