"""The host's per-local-expert launch loop of a MoE layer (`compute.moe_expert_host_idle_s`,
issue 9): Megatron's TEGroupedMLP runs two Transformer Engine GroupedLinears whose GEMMs (and,
under fp8 current scaling, whose per-expert input / output-gradient quantizations) are launched
one expert at a time; the GPU idles by max(0, local experts x launches x KERNEL_LAUNCH_HOST_S -
the experts' GPU time) per pass. Launch counts by hand from the TransformerEngine sources cited
in `compute.EXPERT_HOST_LAUNCHES`; idle values by hand; the layer-level increments by hand with
a launch time large enough that the loop is host-bound."""

from __future__ import annotations

import pytest

from planner.cost import compute
from planner.cost import step_time as st
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

H100 = load_cluster("dgx-h100", gpus=16)


def test_launches_per_local_expert_by_hand():
    # fp8 current scaling, forward: fc1 and fc2 each 1 GEMM + 1 quantization of the expert's input
    # (zero-amax, amax, scale, cast = 4 launches): 2 x (1 + 4) = 10; bf16: 2 x 1 = 2
    assert compute.expert_host_launches("megatron", "forward", "fp8") == 2 * (1 + 4)
    assert compute.expert_host_launches("megatron", "forward", "bf16") == 2 * 1
    # backward: data- and weight-gradient GEMMs, fp8 after quantizing the output gradient:
    # 2 x (2 + 4) = 12; bf16 2 x 2 = 4
    assert compute.expert_host_launches("megatron", "backward", "fp8") == 2 * (2 + 4)
    assert compute.expert_host_launches("megatron", "backward", "bf16") == 2 * 2
    # torchtitan: one torch._grouped_mm per projection for all local experts, nothing per expert
    assert compute.expert_host_launches("torchtitan", "forward", "fp8") == 0
    assert compute.expert_host_launches("torchtitan", "backward", "bf16") == 0


def test_idle_by_hand():
    # Qwen3-30B-A3B at ep 1: 128 local experts x 10 launches x 10 us = 12.8 ms of host issue
    assert compute.moe_expert_host_idle_s(128, 10, 1.0e-3) == pytest.approx(12.8e-3 - 1.0e-3)
    # at ep 16: 8 x 10 x 10 us = 0.8 ms, covered by 1 ms of expert GEMMs
    assert compute.moe_expert_host_idle_s(8, 10, 1.0e-3) == 0.0
    assert compute.moe_expert_host_idle_s(8, 0, 0.0) == 0.0
    with pytest.raises(SpecError):
        compute.moe_expert_host_idle_s(0, 10, 0.0)
    with pytest.raises(SpecError):
        compute.moe_expert_host_idle_s(8, -1, 0.0)


@pytest.fixture
def launch_s(monkeypatch):
    """Set KERNEL_LAUNCH_HOST_S; layer-time caches dropped around it."""
    def set_launch(value: float) -> None:
        monkeypatch.setattr(compute, "KERNEL_LAUNCH_HOST_S", value)
        st.clear_caches()
    yield set_launch
    monkeypatch.undo()
    st.clear_caches()


@pytest.mark.parametrize("model_name, index, ep, framework, precision, fwd, bwd", [
    ("qwen3-30b-a3b", 0, 16, "megatron", "fp8", 128 // 16 * 10, 128 // 16 * 12),
    ("qwen3-30b-a3b", 0, 4, "megatron", "bf16", 128 // 4 * 2, 128 // 4 * 4),
    ("qwen3-30b-a3b", 0, 16, "torchtitan", "fp8", 0, 0),
    ("deepseek-v3", 0, 16, "megatron", "fp8", 0, 0),         # first 3 layers dense
    ("deepseek-v3", 5, 16, "megatron", "fp8", 256 // 16 * 10, 256 // 16 * 12),
])
def test_loop_once_per_pass_per_local_expert(launch_s, model_name, index, ep, framework, precision,
                                             fwd, bwd):
    # a launch time far above any GPU work, so the loop is host-bound: raising it by 1 s adds
    # (local experts x launches) s to that pass -- forward, backward, and a full recompute's
    # second forward
    model = load_model(model_name)
    layout = Layout(tp=1, ep=ep, dp=16, micro_batch_size=1, seq_len=4096, global_batch_size=64,
                    precision=precision, framework=framework)
    launch_s(1.0)
    low = st.layer_time_modes(model, H100, layout, index)
    launch_s(2.0)
    high = st.layer_time_modes(model, H100, layout, index)
    for mode, a, b in zip(st.RECOMPUTE_MODES, high, low):
        assert a.forward_s == pytest.approx(b.forward_s + fwd, abs=1e-9), mode
        assert a.backward_s == pytest.approx(b.backward_s + bwd, abs=1e-9), mode
        assert a.comm_s == pytest.approx(b.comm_s, abs=1e-12), mode
        rerun = fwd if mode == "full" else 0.0
        assert a.recompute_s == pytest.approx(b.recompute_s + rerun, abs=1e-9), mode


def test_fewer_local_experts_less_idle():
    # Qwen3-30B-A3B fp8 on one DGX at micro-batch 1: ep 1 holds 128 experts (12.8 ms of forward
    # launches against few tokens each), ep 8 holds 16 (1.6 ms)
    model, dgx = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100", gpus=8)

    def forward(ep: int) -> float:
        layout = Layout(dp=8, ep=ep, micro_batch_size=1, seq_len=4096, global_batch_size=64,
                        precision="fp8")
        return st._moe_host_s(model, dgx, layout, 0)[0] - compute.moe_host_sync_s()

    assert forward(1) > 1e-3
    assert forward(1) <= 128 * 10 * 10e-6
    assert forward(8) < forward(1) / 4
