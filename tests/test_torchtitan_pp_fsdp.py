"""torchtitan PP + FSDP as torchtitan runs it (issue 8 item 4): with pipeline parallelism FSDP2
does not reshard after forward (torchtitan `get_fsdp_reshard_after_forward_policy("default",
pp_enabled=True)` is False) and torch.distributed.pipelining turns gradient sync and
reshard-after-backward off for every backward but the last, so each stage's parameters are
gathered once per step and its gradients reduce-scattered once (cost.comm.fsdp_syncs_once_per_step).
Without PP FSDP2 gathers every block in forward and again in backward and reduce-scatters every
micro-batch. Byte counts by hand: bf16 parameters (2 B) gathered, fp32 gradients (4 B, torchtitan's
`reduce_dtype`) reduce-scattered.
"""

from __future__ import annotations

from planner.cost import comm
from planner.placement.layout import Layout

ELEMENTS = {"dense": 1_000_000.0}


def _records(layout: Layout) -> dict[str, comm.Collective]:
    return {c.label: c for c in comm.state_collectives(layout, ELEMENTS) if c.axis == "dp"}


def _layout(pp: int, framework: str = "torchtitan") -> Layout:
    # 8 GPUs: dp 4 x pp 2 (or dp 8), 32 sequences of one -> m = 8 (pp 2) or 4 (pp 1)
    return Layout(dp=8 // pp, pp=pp, zero_stage=3, framework=framework, global_batch_size=32,
                  seq_len=2048)


def test_pp_gathers_and_reduces_once_per_step():
    got = _records(_layout(2))
    gather, reduce = got["parameters.gather.dense"], got["gradients.dense"]
    assert (gather.kind, gather.count, gather.message_bytes) == ("all_gather", 1, 2 * 1_000_000)
    assert (reduce.kind, reduce.count, reduce.message_bytes) == ("reduce_scatter", 1, 4 * 1_000_000)
    assert gather.phase in ("param_sync", "after_step") and reduce.phase in ("step", "sync")


def test_without_pp_fsdp_gathers_twice_and_reduces_every_microbatch():
    layout = _layout(1)
    m = layout.num_microbatches
    assert m == 4
    got = _records(layout)
    assert got["parameters.gather.dense"].count == 2 * m
    assert got["gradients.dense"].count == m


def test_megatron_fsdp_under_pp_keeps_its_per_microbatch_traffic():
    """Megatron-FSDP (ZeRO-3) is not torchtitan's pipelining: unchanged."""
    layout = _layout(2, "megatron")
    got = _records(layout)
    assert got["parameters.gather.dense"].count == 2 * layout.num_microbatches


def test_torchtitan_pp_fsdp_moves_one_gather_and_one_reduce_scatter_per_step():
    """The same mesh: torchtitan PP + FSDP now moves 1 gather + 1 reduce-scatter of the stage per
    step; a Megatron-FSDP layout of the same mesh moves 2m + m. Total dp bytes per step differ by
    exactly that ratio for the dense group (m = 8: (2 + 4) B vs (2 x 2 x 8 + 4 x 8) B per element)."""
    tt, mg = _records(_layout(2)), _records(_layout(2, "megatron"))
    total = lambda r: sum(c.count * c.message_bytes for c in r.values())  # noqa: E731
    assert total(tt) == (2 + 4) * 1_000_000
    assert total(mg) == (2 * 2 * 8 + 4 * 8) * 1_000_000
