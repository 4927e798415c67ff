"""`plan` says when the batch is small for the GPUs: the fastest plan's bubble above a quarter of its
step (senior review 7 M1: Llama 3.1 405B on 16,384 H100 at 8,192 tokens and the default 4M-token batch,
pp 64 with 32 micro-batches, bubble 2.208 of a 3.497 s step)."""

from types import SimpleNamespace

from planner.plan import BUBBLE_SHARE, _bubble_heavy

CLUSTER = SimpleNamespace(num_gpus=16384)


def _best(bubble: float, step: float) -> dict:
    return {"time_s": {"pipeline_bubble": bubble, "step": step},
            "parallelism": {"pp": 64, "num_microbatches": 32}}


def test_the_reviewers_plan_is_warned_with_the_share_a_4x_batch_leaves():
    # 2.208 / 3.497 = 63%; 4x the batch: 2.208 / (2.208 + 4 x (3.497 - 2.208)) = 2.208 / 7.364 = 30%
    (warning,) = _bubble_heavy(_best(2.208, 3.497), CLUSTER, 512)
    assert "idles 63% of its step" in warning and "pp 64, 32 micro-batches" in warning
    assert "4x the batch (2,048 sequences" in warning and "about 30%" in warning


def test_a_bubble_at_or_below_a_quarter_of_the_step_is_not_warned():
    assert BUBBLE_SHARE == 0.25
    assert _bubble_heavy(_best(1.0, 4.0), CLUSTER, 512) == []
    assert _bubble_heavy(_best(0.0, 4.0), CLUSTER, 512) == []
