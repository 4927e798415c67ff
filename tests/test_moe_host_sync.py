"""The host stall of a dropless MoE layer's forward pass (`compute.moe_host_sync_s`, issue 9
item 1): Megatron copies the tokens per expert to the host and synchronizes once per MoE layer
forward (token_dispatcher.py), so the stall is added once per forward pass of a MoE layer --
not to its backward, not to dense layers -- and again when a full recompute re-runs the forward.
Values by hand: the term is set to 5 ms and to 0 through `use_calibration`, and the layer times
differ by exactly that."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost import compute
from planner.cost import step_time as st
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

H100 = load_cluster("dgx-h100", gpus=16)


def _times(model, layout, index, host_s):
    compute.use_calibration(replace(compute.load_calibration(), moe_host_sync_s=host_s))
    st.clear_caches()
    try:
        return st.layer_time_modes(model, H100, layout, index)
    finally:
        compute.use_calibration(None)
        st.clear_caches()


@pytest.mark.parametrize("model_name, index, moe", [("qwen3-30b-a3b", 0, True),
                                                    ("deepseek-v3", 0, False),   # first 3 dense
                                                    ("deepseek-v3", 5, True),
                                                    ("llama-3.1-8b", 0, False)])
def test_stall_once_per_forward_pass_of_a_moe_layer(model_name, index, moe):
    model = load_model(model_name)
    layout = Layout(tp=1, ep=16 if model.is_moe else 1, dp=16, micro_batch_size=1, seq_len=4096,
                    global_batch_size=64)
    with_stall, without = _times(model, layout, index, 0.005), _times(model, layout, index, 0.0)
    added = 0.005 if moe else 0.0
    for mode, a, b in zip(st.RECOMPUTE_MODES, with_stall, without):
        assert a.forward_s == pytest.approx(b.forward_s + added, abs=1e-12), mode
        assert a.backward_s == pytest.approx(b.backward_s, abs=1e-12), mode     # sizes reused
        assert a.comm_s == pytest.approx(b.comm_s, abs=1e-12), mode             # hides nothing
        rerun = added if mode == "full" else 0.0
        assert a.recompute_s == pytest.approx(b.recompute_s + rerun, abs=1e-12), mode


def test_the_committed_stall_is_a_fitted_host_cost():
    cal = compute.load_calibration()
    assert 1e-4 < cal.moe_host_sync_s < 0.02    # a host stall of 0.1-20 ms, not a GPU-scale term
    assert compute.moe_host_sync_s() == cal.moe_host_sync_s
