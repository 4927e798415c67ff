"""The one-line layout label (`report.layout_label`) names sequence parallelism only where it acts:
Megatron-LM turns `--sequence-parallel` off at tp 1 (rule sequence_parallel_without_tp says so), so the
label of a tp 1 layout must not print `SP` (fresh-user review 6 finding 11)."""

from planner.report import layout_label

PAR = {"dp": 8, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero_stage": 1, "sequence_parallel": True,
       "micro_batch_size": 1, "num_microbatches": 4, "recompute": "none"}


def test_sp_is_not_shown_at_tp_1_and_is_at_tp_2():
    assert " SP " not in f" {layout_label(PAR)} ".replace("·", " ")
    assert "· SP ·" in layout_label({**PAR, "tp": 2, "dp": 4})
