"""Pipeline schedules against the closed forms of Narayanan 2021 §2.2 and Qi et al. 2023 §3.1."""

import pytest

from planner.cost.pipeline import SCHEDULE_STEP_GAP_S as GAP
from planner.cost.pipeline import pipeline_coefficients, pipeline_time
from planner.errors import SpecError


def test_1f1b_is_m_plus_p_minus_1_slots():
    got = pipeline_time(forward_s=1.0, backward_s=2.0, num_microbatches=8, pp=4)
    # plus the schedule's gap at each of the 2 (m + p - 1) sends
    assert got.total_s == pytest.approx((8 + 4 - 1) * 3.0 + 2 * 11 * GAP)
    assert got.bubble_s == pytest.approx(3 * 3.0)   # bubble fraction (p-1)/m = 3/8


def test_interleaved_divides_bubble_by_v():
    got = pipeline_time(forward_s=1.0, backward_s=2.0, num_microbatches=8, pp=4, vpp=2)
    assert got.bubble_s == pytest.approx(3 * 3.0 / 2)
    assert got.total_s == pytest.approx(8 * 3.0 + 4.5 + 2 * 2 * 11 * GAP)  # v x the sends


def test_zb_h1_is_a_third_of_1f1b_when_f_b_w_equal():
    zb = pipeline_time(forward_s=1.0, backward_s=2.0, num_microbatches=8, pp=4, schedule="zb-h1")
    assert zb.bubble_s == pytest.approx(3 * 3.0 / 3)


def test_p2p_sends_on_critical_path():
    got = pipeline_time(forward_s=1.0, backward_s=2.0, num_microbatches=4, pp=2, p2p_send_s=0.01)
    assert got.p2p_s == pytest.approx(2 * (0.01 + GAP) * (4 + 1))
    assert pipeline_time(forward_s=1.0, backward_s=2.0, num_microbatches=4, pp=1, p2p_send_s=0.01).p2p_s == 0


def test_interleaved_needs_m_multiple_of_p():
    with pytest.raises(SpecError, match="multiple of pp"):
        pipeline_time(forward_s=1.0, backward_s=2.0, num_microbatches=6, pp=4, vpp=2)


@pytest.mark.parametrize("schedule,vpp", [("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_affine_form_equals_pipeline_time(schedule, vpp):
    kw = dict(num_microbatches=8, pp=4, vpp=vpp, schedule=schedule, p2p_send_s=0.01)
    coef = pipeline_coefficients(**kw)
    for f, b in ((1.0, 2.0), (0.3, 0.1), (0.0, 5.0)):
        want = pipeline_time(forward_s=f, backward_s=b, **kw)
        got = coef.time(f, b)
        assert got.total_s == pytest.approx(want.total_s, rel=1e-12)
        assert got.bubble_s == pytest.approx(want.bubble_s, rel=1e-12, abs=1e-15)
    # zb-h1 at w = 1/2: bubble (p - 1) f (Qi et al. 2023 §3.1 with T_B = T_W).
    if schedule == "zb-h1":
        assert (coef.bubble_per_t, coef.bubble_per_forward) == (0.0, 3.0)


def test_every_micro_batch_pays_the_schedule_gap():
    """PP 64 with 4,096 micro-batches and free sends: 2 x (4096 + 63) sends, each leaving the stage
    idle 20 us (SCHEDULE_STEP_GAP_S) = 0.16636 s per step that a deep pipeline does not hide."""
    assert GAP == 20e-6
    got = pipeline_time(forward_s=0.0, backward_s=0.0, num_microbatches=4096, pp=64)
    assert got.total_s == pytest.approx(2 * (4096 + 63) * 20e-6) == pytest.approx(0.16636)


def test_megatron_overlaps_interleaved_sends_with_the_next_chunk():
    """Megatron-LM's interleaved schedule overlaps its p2p sends with compute by default
    (overlap_p2p_comm, frameworks.megatron.p2p_overlap), 1F1B does not; DeepSpeed and torchtitan
    are costed without overlap. Llama 3.1 70B, tp4 pp4 dp4 SP at 4K: one send is 4,096 x 8,192 x
    2 B / 4 = 16.8 MB, under 1 ms even at 25 GB/s, while one chunk (80 / 16 = 5 layers) forward is
    5 x 2 x 0.86e9 params x 4,096 tokens / 4 / 989 TFLOP/s > 8 ms at any efficiency below 1: the
    interleaved send hides whole."""
    from planner.cost.step_time import pipeline_send_s
    from planner.frameworks import deepspeed, megatron, torchtitan
    from planner.placement.layout import Layout
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    assert (megatron.p2p_overlap(1), megatron.p2p_overlap(2)) == (False, True)
    assert not deepspeed.p2p_overlap(4) and not torchtitan.p2p_overlap(2)
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=64)
    base = Layout(dp=4, tp=4, pp=4, sequence_parallel=True, seq_len=4096, global_batch_size=64)
    one_f_one_b = pipeline_send_s(model, cluster, base)
    assert 0 < one_f_one_b < 1e-3
    assert pipeline_send_s(model, cluster, base.replace(vpp=4)) == 0.0
    # torchtitan's interleaved schedule keeps the whole send exposed (the same tensor and mesh)
    assert pipeline_send_s(model, cluster, base.replace(vpp=2, framework="torchtitan")) == \
        pytest.approx(one_f_one_b, rel=1e-12)
