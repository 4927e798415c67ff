"""torchtitan context parallel at cp >= 4 is predicted fast against every published run (senior review 12 #5):
the rows stay evaluation targets (strict xfail beyond the 10% bar, never fitted around: cause unknown), and plan /
explain / check say so on such layouts (`compute.TORCHTITAN_CP_NOTE`, `unvalidated_layout_notes`).

Published (pytorch/torchtitan@31a17bfd benchmarks/llama3_h100_202412_torchtitan.md, copied into
tests/data/reference/training_runs.yaml): Table 2, Llama 3.1 8B on 8 H100 fp8 full AC, cp4 at 131,072 tokens
1,071 and cp8 at 262,144 tokens 548 tokens/s/GPU; Table 6, 405B on 512 H100 tp8 pp8, cp4 31 and cp8 16."""
import pytest

from planner import validate_training as vt
from planner.check import read_target
from planner.check.gate import evaluate
from planner.cost.compute import TORCHTITAN_CP_NOTE, unvalidated_layout_notes
from planner.explain import explain
from planner.placement.layout import Layout
from planner.plan import plan
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.test_check_torchtitan import _edit

PUBLISHED = {"torchtitan-202412-t2-cp4": 1071, "torchtitan-202412-t2-cp8": 548,
             "torchtitan-202412-t6-4d-cp4": 31, "torchtitan-202412-t6-4d-cp8": 16}
NOTED = {"torchtitan-202412-t2-cp4": "+26.8%", "torchtitan-202412-t2-cp8": "+31.5%",
         "torchtitan-202412-t6-4d-cp4": "+12.7%", "torchtitan-202412-t6-4d-cp8": "+20.7%"}
ROWS = {r.id: r for r in vt.load_rows(vt.TRAINING_RUNS) if r.id in PUBLISHED}


@pytest.mark.xfail(strict=True, reason=(
    "torchtitan CP at cp >= 4 is predicted 13-32% fast (8B cp4 / cp8 +26.8 / +31.5%, 405B tp8 pp8 cp4 / cp8 "
    "+12.7 / +20.7%; cp 1 / 2 within +1 / -6% and +4.3 / +15.3%), cause not found: compute.TORCHTITAN_CP_NOTE "
    "says so on every such plan"))
@pytest.mark.parametrize("row_id", sorted(PUBLISHED))
def test_cp4_and_cp8_runs_within_10_percent(row_id):
    row = ROWS[row_id]
    assert row.published == PUBLISHED[row_id]
    assert vt.predict(row).predicted == pytest.approx(row.published, rel=0.10)


@pytest.mark.parametrize("row_id", sorted(PUBLISHED))
def test_the_note_quotes_the_models_error(row_id):
    """The note's figures are the model's against the row (a change to the CP cost must update the note)."""
    assert f"{vt.predict(ROWS[row_id]).error:+.1%}" == NOTED[row_id]
    assert NOTED[row_id] in TORCHTITAN_CP_NOTE and f" {PUBLISHED[row_id]:,}" in TORCHTITAN_CP_NOTE


def test_which_layouts_get_the_note():
    assert unvalidated_layout_notes("torchtitan", 4, None) == [TORCHTITAN_CP_NOTE]
    assert unvalidated_layout_notes("torchtitan", 2, None) == []
    assert unvalidated_layout_notes("megatron", 8, None) == []   # no published Megatron run is missed so


def test_explain_check_and_plan_say_it(tmp_path):
    model, cluster = load_model("llama-3.1-8b"), load_cluster("grand-teton", gpus=8)
    base = dict(dp=2, cp=4, zero_stage=3, micro_batch_size=1, global_batch_size=2, seq_len=131072,
                recompute="full", framework="torchtitan")
    assert TORCHTITAN_CP_NOTE in explain(model, cluster, Layout(**base), time_despite_memory=True)["assumptions"]
    assert TORCHTITAN_CP_NOTE not in explain(model, cluster, Layout(**{**base, "dp": 4, "cp": 2}),
                                             time_despite_memory=True)["assumptions"]
    path = _edit(tmp_path, "context_parallel_degree = 1", "context_parallel_degree = 4")
    assert TORCHTITAN_CP_NOTE in evaluate(read_target(path, cluster="grand-teton", gpus=8))["assumptions"]
    found = plan(model, cluster, seq_len=131072, global_batch_size=2, framework="torchtitan",
                 fixed={"cp": 4, "zero_stage": 3}, top_k=1)
    assert TORCHTITAN_CP_NOTE in found["assumptions"]
