"""`plan` on the job of each expert-tuned recipe (issue 9 item 5; shared/reference/expert_configs.yaml).

For every recipe the planner can express: the recipe's own layout, with the knobs its framework's
recipe sets (`validate_training` assumptions: NVIDIA's recipes reduce gradients in bf16 and overlap
TP and DP communication), is costed by `explain`; `plan` is asked the same job (model, GPUs,
sequence, global batch, precision, framework, gradient-reduction dtype). Issue 9's bars:
- the plan's predicted step is at least 0.9 x the recipe's predicted step (a plan claiming more
  than 10% over an expert's layout needs a published measurement that agrees);
- no context parallelism above 1 at <= 4K tokens, nor above 2 at <= 8K (NVIDIA's guidance).
Rows the cost model does not meet yet are strict xfails naming the mechanism believed missing, so
a change that fixes one fails here until its marker goes.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from planner import validate_training as vt
from planner.explain import explain
from planner.plan import plan
from planner.specs.cluster import load_cluster

ROWS = {r.id: r for r in vt.load_rows(vt.EXPERT_CONFIGS) if r.not_expressible is None}

KNOWN_GAPS = {
    "E2": "plan dp8 tp8 ZeRO-3 b2 at 0.83x the recipe's tp4 pp8 vpp5; suspected: interleaved "
          "pipelines are searched only when pinned, and Megatron-FSDP's per-micro-batch gathers "
          "are priced as hidden (not verified against a measurement)",
    "E10": "plan tp4 pp16 ep8 at 0.56x the recipe's ep64 (rated at_risk with its mla_up_proj,mlp "
           "recompute): the recipe's DeepEP/HybridEP dispatcher deduplicates routed copies across "
           "nodes, priced here as plain all-to-all",
    "E13": "plan pp4 ep2 at 0.50x the recipe's ep16: the HybridEP flex dispatcher's cross-node "
           "deduplication is not modelled, so EP 16's all-to-all is priced ~4x its bytes",
    "E16": "plan ZeRO-2 b1 with per-layer recompute at 0.60x the recipe's FSDP b16 full recompute; "
           "torch.compile and AsyncTP are costed as eager (issue 9: no compile term)",
    "E18": "plan tp2 ZeRO-2 at 0.79x the recipe's FSDP: FSDP2's ZeRO-3 backward re-gathers are "
           "priced exposed where torchtitan prefetches them",
    "E9": "plan ZeRO-2 b4 at 0.89x the recipe's ZeRO-1 b2 (the edge of the bar)",
}
"""Rows below the 0.9 bar today, with the mechanism believed (or, where it says so, only
suspected) to be missing; docs/validation.md lists each recipe's predicted error."""


@lru_cache(maxsize=None)
def _steps(row_id: str) -> tuple[float, dict]:
    row = ROWS[row_id]
    cluster = load_cluster(row.cluster, gpus=row.gpus)
    recipe = explain(row.model, cluster, row.layout, time_despite_memory=True)["time_s"]["step"]
    best = plan(row.model, cluster, seq_len=row.layout.seq_len,
                global_batch_size=row.layout.global_batch_size, precision=row.layout.precision,
                framework=row.framework, grad_reduce_dtype=row.layout.grad_reduce_dtype,
                top_k=1)["plans"][0]
    return recipe, best


def _marks(row_id: str):
    gap = KNOWN_GAPS.get(row_id)
    return [pytest.mark.xfail(strict=True, reason=gap)] if gap else []


@pytest.mark.parametrize("row_id", [pytest.param(i, marks=_marks(i)) for i in sorted(ROWS)])
def test_plan_is_not_claimed_much_faster_than_the_experts_layout(row_id):
    recipe, best = _steps(row_id)
    assert best["time_s"]["step"] >= 0.9 * recipe, (best["parallelism"], recipe)


CP_GAPS = {"E3": "plan tp8 pp16 cp4 at 8K (1% faster than the recipe's tp8 pp8 vpp8 cp2 in the "
                 "model): 126 layers admit no equal interleaved chunks, and uneven ones are searched "
                 "only when pinned (their stage program is not exact); CP 4's chunk efficiency at "
                 "1K-token chunks is the FlashAttention-3 fit, not a ring-attention measurement"}
"""Rows whose plan splits a short sequence today."""


@pytest.mark.parametrize("row_id", [pytest.param(i, marks=[pytest.mark.xfail(strict=True, reason=CP_GAPS[i])]
                                                 if i in CP_GAPS else []) for i in sorted(ROWS)])
def test_plan_splits_no_short_sequence(row_id):
    _, best = _steps(row_id)
    seq, cp = ROWS[row_id].layout.seq_len, best["parallelism"]["cp"]
    assert not (seq <= 4096 and cp > 1) and not (seq <= 8192 and cp > 2), (seq, best["parallelism"])
