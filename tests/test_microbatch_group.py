"""The interleaved schedule's micro-batch group N (Megatron-LM's
`--microbatch-group-size-per-virtual-pipeline-stage`, the N of Llama 3's schedule) and the
micro-batches it keeps in flight, by hand.

Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py `get_pp_rank_microbatches`:
rank s runs warm-up = (pp − s − 1)·2 + (vpp − 1)·N forwards (capped at m·vpp) before its first
backward; its saved activations peak one forward later (warm-up + 1 model chunks, each 1/vpp of the
stage). `get_schedule_table` runs each group of N micro-batches through the chunks in turn."""

import pytest

from planner.cost.memory import in_flight_microbatches, megatron_interleaved_ops
from planner.cost.pipeline import interleaved_chunk_table, interleaved_warmup_chunks
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.rules import check_layout, errors
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model


def _layout(m: int, pp: int = 16, vpp: int = 8, group: int | None = None) -> Layout:
    return Layout(dp=1, tp=8, pp=pp, vpp=vpp, micro_batch_size=1, global_batch_size=m, seq_len=8192,
                  microbatch_group_size=group)


def test_megatron_docstring_example_order():
    """model_parallel_config.py l. 441-446: pp 2, vpp 2, N 3, m 5 runs forwards of micro-batches
    0 1 2 0 1 2 3 4 3 4, i.e. chunks 0 0 0 1 1 1 0 0 1 1."""
    assert interleaved_chunk_table(num_microbatches=5, vpp=2, group_size=3) == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    # and N = 2, m = 4: 0 1 0 1 2 3 2 3
    assert interleaved_chunk_table(num_microbatches=4, vpp=2, group_size=2) == [0, 0, 1, 1, 0, 0, 1, 1]


def test_warmup_by_hand():
    # pp 16, vpp 8, rank 1, N = pp = 16: (16 - 1 - 1)·2 + 7·16 = 28 + 112 = 140 forwards
    assert interleaved_warmup_chunks(pp=16, vpp=8, stage=1, num_microbatches=32) == 140
    # N = 32: 28 + 7·32 = 252
    assert interleaved_warmup_chunks(pp=16, vpp=8, stage=1, num_microbatches=32, group_size=32) == 252
    # m = 16: m·vpp = 128 < 140, every forward is warm-up
    assert interleaved_warmup_chunks(pp=16, vpp=8, stage=1, num_microbatches=16) == 128
    with pytest.raises(SpecError):
        interleaved_warmup_chunks(pp=16, vpp=8, stage=16, num_microbatches=32)


@pytest.mark.parametrize("m, group, stage, chunks", [
    (32, None, 1, 140 + 1),      # 141 chunks of 1/8 stage
    (32, 16, 0, 30 + 112 + 1),   # rank 0: (16 - 0 - 1)·2 = 30
    (32, 32, 1, 28 + 224 + 1),   # N = m: 253 of the 256 forwards before the peak
    (16, None, 1, 128),          # capped at m·vpp: all 16 micro-batches of the whole stage
])
def test_in_flight_by_hand(m, group, stage, chunks):
    assert in_flight_microbatches(_layout(m, group=group), stage) == chunks / 8


def test_pp4_vpp2_rank0_holds_pp_plus_three_halves():
    """Korthikanti et al. 2022 eq. 4.2.3 at N = pp: rank 0 holds pp·(1 + (pp − 1)/(pp·vpp)) =
    4·(1 + 3/8) = 5.5 stages: (4 − 1)·2 + 1·4 + 1 = 11 chunks of 1/2."""
    assert in_flight_microbatches(_layout(8, pp=4, vpp=2), 0) == 11 / 2 == 4 * (1 + 3 / 8)


def test_schedule_order_peaks_at_the_closed_form():
    """The compute order `megatron_interleaved_ops` builds holds warm-up + 1 chunks at its peak."""
    for group in (16, 32):
        ops = megatron_interleaved_ops(_layout(32, group=group), 1)
        alive = peak = 0
        for kind, _ in ops:
            alive += 1 if kind == "F" else -1
            peak = max(peak, alive)
        assert peak == 28 + 7 * group + 1


def test_group_size_rule():
    """schedules.py l. 1160-1181: N in [pp, m]; a last group of m mod N micro-batches, if any,
    at least pp."""
    model, cluster = load_model("llama-3.1-405b"), load_cluster("dgx-h100", gpus=128)

    def rules(m, group, vpp=8):
        return {v.rule: v.severity for v in check_layout(model, cluster, _layout(m, vpp=vpp, group=group))
                if v.rule == "microbatch_group_size"}
    assert rules(32, 16) == {} and rules(32, 32) == {} and rules(48, 32) == {}   # 48 mod 32 = 16 >= pp
    assert rules(32, 8) == {"microbatch_group_size": "error"}      # below pp
    assert rules(32, 33) == {"microbatch_group_size": "error"}     # above m
    assert rules(40, 32) == {"microbatch_group_size": "error"}     # 40 mod 32 = 8 < pp
    assert rules(32, 16, vpp=1) == {"microbatch_group_size": "warning"}
    assert not [v for v in errors(check_layout(model, cluster, _layout(32, group=32)))
                if v.rule == "microbatch_group_size"]
