"""Megatron-FSDP with tp or cp > 1 before Blackwell (senior review 11 finding 5): the two want
different CUDA work-queue settings. Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1
(NVIDIA/Megatron-LM@d98e8a6 arguments.py l. 1166) and only warns beside tp/cp > 1 (l. 1454-1466), so
the run has the default queues. Transformer Engine's userbuffers TP overlap orders its own kernels
(comm_gemm_overlap.cpp l. 162-177, 486-487: a launch event on Hopper with more than one queue; the
pipelined overlaps run the GEMM on the SMs the communication leaves), so it is kept; the
context-parallel ring's NCCL transfers lose their order before the persistent attention kernels
(TE base.py `set_nccl_overlap_warning_if_tp`), so the ring is costed unhidden. The plan line states
it and the emitted script unsets the variable."""

from __future__ import annotations

import json

import pytest

from planner.cost import step_time
from planner.placement import overlap
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.cli_run import planner
from tests.test_emit_megatron import _hand, _read_back

MODEL = load_model("llama-3.1-8b")


def _layout(**kw) -> Layout:
    base = dict(dp=2, tp=2, pp=1, cp=2, zero_stage=2, sequence_parallel=True, micro_batch_size=1,
                global_batch_size=16, seq_len=16384, framework="megatron", tp_comm_overlap=True)
    return Layout(**{**base, **kw})


@pytest.mark.parametrize("kw, gpu, conflict", [
    ({}, "H100-SXM5-80GB", True), ({"zero_stage": 3}, "H100-SXM5-80GB", True),
    ({"tp": 1, "sequence_parallel": False, "tp_comm_overlap": False}, "A100-SXM4-80GB", True),  # cp 2
    ({"zero_stage": 1}, "H100-SXM5-80GB", False),     # distributed optimizer: the value 1 is set
    ({"pp": 2, "dp": 1}, "H100-SXM5-80GB", False),    # not a layout Megatron-FSDP runs (zero_with_pp)
    ({}, "B200-180GB", False),                        # Blackwell: no requirement (arguments.py l. 1454)
    ({"framework": "torchtitan"}, "H100-SXM5-80GB", False),
    ({"tp": 1, "cp": 1, "dp": 8, "sequence_parallel": False, "tp_comm_overlap": False}, "H100-SXM5-80GB", False)])
def test_which_layouts_conflict(kw, gpu, conflict):
    assert overlap.connections_conflict(_layout(**kw), gpu) is conflict


def _cp_term(layout: Layout, cluster) -> tuple[float, float]:
    attn = 0.05   # s of attention core per micro-batch: far longer than one ring step's transfer
    return step_time._layer_comm(MODEL, cluster, layout, 0, attn, step_time.coll.DEFAULT_RANK_ORDER)[1]


def test_cp_ring_is_unhidden_only_under_megatron_fsdp_before_blackwell():
    h100 = load_cluster("dgx-h100", gpus=8)
    fsdp, dist_opt = _cp_term(_layout(), h100), _cp_term(_layout(zero_stage=1), h100)
    # hidden under 50 ms of attention, a ring step shows only the SM share of its NCCL kernel
    # (`_hidden_excess`); unhidden it shows whole: more than 1 / that share x the hidden price
    share = overlap.sm_share(overlap.NCCL_CHANNEL_SMS, h100.gpu.sm_count)
    assert fsdp[0] == pytest.approx(dist_opt[0] / share) and fsdp[1] == pytest.approx(dist_opt[1] / share)
    b200 = load_cluster("dgx-b200", gpus=8)
    assert _cp_term(_layout(), b200) == _cp_term(_layout(zero_stage=1), b200)


def test_plan_line_states_the_setting_and_the_kept_overlap():
    note = overlap.connections_note(_layout(), "H100-SXM5-80GB")
    assert note.startswith("CUDA_DEVICE_MAX_CONNECTIONS unset")
    assert "TP comm overlap kept" in note and "context-parallel ring costed unhidden" in note
    assert overlap.connections_note(_layout(zero_stage=1), "H100-SXM5-80GB") is None


def test_explain_prints_it():
    out = planner("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--tp", "2", "--cp", "2",
                  "--sequence-parallel", "--zero-stage", "2", "--seq-len", "16384", "--global-batch-size", "16",
                  "--format", "json")
    assert any(a.startswith("CUDA_DEVICE_MAX_CONNECTIONS unset") for a in json.loads(out.stdout)["assumptions"])


def test_emitted_fsdp_tp_script_unsets_the_variable_and_checks(tmp_path):
    emitted, target = _read_back(_hand(zero=2, pp=1, dp=8, split=(32,)), tmp_path)   # tp 2 with SP, dgx-h100
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in emitted.text
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" not in emitted.text
    assert "# CUDA_DEVICE_MAX_CONNECTIONS unset: Megatron-FSDP asserts it is not 1" in emitted.text
    assert not [v for v in target.findings if v.severity == "error"]


def test_check_of_the_emitted_script_states_it(tmp_path):
    emitted, _ = _read_back(_hand(zero=2, pp=1, dp=8, split=(32,)), tmp_path)
    path = tmp_path / "fsdp_tp2.sh"
    path.write_text(emitted.text)
    out = planner("check", str(path), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--format", "json")
    data = json.loads(out.stdout)
    assert data["verdict"] != "fail" and any("TP comm overlap kept" in a for a in data["assumptions"])
    # the same script with the variable set to 1 stops at Megatron-FSDP's assertion (existing rule)
    path.write_text(emitted.text.replace("unset CUDA_DEVICE_MAX_CONNECTIONS", "export CUDA_DEVICE_MAX_CONNECTIONS=1"))
    out = planner("check", str(path), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--format", "json")
    assert "megatron_fsdp_device_connections" in {v["rule"] for v in json.loads(out.stdout)["violations"]}
