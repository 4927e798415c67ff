"""Context parallelism on short sequences (issue 9, senior review M1 / H4): the check / explain
warning `cp_short_sequence` and the ring's per-step HBM work the step time charges.

Expected values are hand arithmetic written next to each assert: the threshold is NVIDIA's
Megatron-Bridge guidance (no CP below 8K tokens, CP 2 at 8K-32K: 4,096 tokens per rank), the
bytes are Transformer Engine's P2P ring (`frameworks.megatron.cp_ring_bytes`).
"""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.cost.step_time import cp_ring_bytes
from planner.placement.layout import Layout
from planner.placement.rules import check_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

LLAMA_8B = load_model("llama-3.1-8b")    # 32 heads, 8 KV heads, head dim 128
H100_16 = dataclasses.replace(load_cluster("dgx-h100"), num_gpus=16)
runner = CliRunner()

# senior review M1: Llama 3 8B on 16 H100, CP 8 at 4,096 tokens (512 per rank)
SCRIPT = """torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
  --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 131072 \\
  --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu \\
  --untie-embeddings-and-output-weights --disable-bias-linear \\
  --context-parallel-size 8 --use-distributed-optimizer --micro-batch-size 1 --global-batch-size 1024 \\
  --bf16 --use-flash-attn --recompute-activations
"""


def _short(layout: Layout):
    return [v for v in check_layout(LLAMA_8B, H100_16, layout) if v.rule == "cp_short_sequence"]


def test_cp8_at_4k_is_a_warning_with_the_chunk_and_cp1_as_the_fix():
    (v,) = _short(Layout(dp=2, cp=8, seq_len=4096, global_batch_size=1024))
    assert v.severity == "warning"
    # 4,096 / 8 = 512 tokens per rank, in 2 x 8 = 16 chunks of 4,096 / 16 = 256; 7 ring steps
    assert "cp=8 splits seq_len=4,096 into 512 tokens per rank (16 load-balancing chunks of 256)" in v.message
    assert "4,096 per rank" in v.message and "7 ring steps" in v.message
    # no cp keeps 4,096 tokens per rank at 4,096: all of cp's factor 8 goes to dp
    assert v.fix.startswith("use cp=1 (no context parallelism) and move the factor 8 to dp")


def test_cp4_at_8k_keeps_cp2_and_cp2_at_8k_and_cp16_at_128k_pass():
    (v,) = _short(Layout(dp=4, cp=4, seq_len=8192, global_batch_size=64))
    assert "2,048 tokens per rank" in v.message          # 8,192 / 4
    assert v.fix.startswith("use cp=2 and move the factor 2 to dp")   # 8,192 / 2 = 4,096
    assert not _short(Layout(dp=8, cp=2, seq_len=8192, global_batch_size=64))       # 4,096 per rank
    assert not _short(Layout(dp=1, cp=16, seq_len=131072, global_batch_size=1))     # 8,192 per rank
    assert not _short(Layout(dp=16, seq_len=2048, global_batch_size=16))             # no CP


def test_check_and_explain_warn_on_the_reviewers_4k_cp_script(tmp_path):
    path = tmp_path / "mg_cp_short.sh"
    path.write_text(SCRIPT)
    result = runner.invoke(app, ["check", str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output          # a warning, not a failure
    rules = {v["rule"]: v for v in json.loads(result.output)["violations"]}
    assert rules["cp_short_sequence"]["severity"] == "warning"
    assert "512 tokens per rank" in rules["cp_short_sequence"]["message"]
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "16",
                                 "--cp", "8", "--seq-len", "4096", "--global-batch-size", "1024",
                                 "--zero-stage", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    found = [v for v in json.loads(result.output)["violations"] if v["rule"] == "cp_short_sequence"]
    assert found and found[0]["message"] == rules["cp_short_sequence"]["message"]


def test_ring_bytes_by_hand():
    # Megatron (Transformer Engine P2P) at cp 8, tp 1, 4,096 tokens: 512 tokens per rank; per
    # element 4 + 6 x 7 = 46 B (output, dQ), K/V 4 + (8 + 6 x 7) = 54; 32 heads x 128 query-side,
    # 8 KV heads x 256 K/V: 512 x (32 x 128 x (46 + 46) + 8 x 256 x 54) = 249,561,088 B
    layout = Layout(dp=2, cp=8, seq_len=4096, global_batch_size=1024)
    assert cp_ring_bytes(LLAMA_8B, layout) == 512 * (32 * 128 * 92 + 8 * 256 * 54) == 249_561_088
    # tp 2 halves the heads on a rank: 512 x (16 x 128 x 92 + 4 x 256 x 54)
    assert cp_ring_bytes(LLAMA_8B, dataclasses.replace(layout, dp=1, tp=2)) == 512 * (16 * 128 * 92 + 4 * 256 * 54)
    # torchtitan (PyTorch's ring, fp32 merges) at cp 2, 32,768 tokens: 16,384 per rank; one later
    # step: 38 + 10 = 48 B query-side, 4 + 25 = 29 B K/V -- on all 32 heads: torchtitan's repeat_kv
    # expands the 8 KV heads to the query heads before the attention call
    tt = Layout(dp=4, cp=2, seq_len=32768, global_batch_size=4, framework="torchtitan")
    assert cp_ring_bytes(LLAMA_8B, tt) == pytest.approx(16384 * (32 * 128 * 48 + 32 * 256 * 29), rel=1e-12)
    # no ring: cp 1, or all-to-all CP
    assert cp_ring_bytes(LLAMA_8B, dataclasses.replace(layout, dp=16, cp=1)) == 0.0
    assert cp_ring_bytes(LLAMA_8B, dataclasses.replace(layout, cp_comm_type="a2a")) == 0.0


def test_plan_searches_cp_only_down_to_4096_tokens_per_rank_unless_pinned():
    """senior review 6 H2: `plan` proposed cp 4 at 8,192 tokens (2,048 per rank), the layout its
    own check warns against. The search now enumerates cp <= seq_len / 4,096 (8,192: cp 1 or 2;
    4,096: cp 1), counts the rest under their own reason, and a pinned cp is still searched."""
    from planner import plan as P

    base = dict(seq_len=4096, global_batch_size=256)
    free = P.plan(LLAMA_8B, H100_16, **base, top_k=3)
    assert {p["parallelism"]["cp"] for p in free["plans"]} == {1}
    reasons = {r["reason"]: r["count"] for r in free["rejected"]}
    assert reasons.get("cp below 4,096 tokens per rank", 0) > 0
    pinned = P.plan(LLAMA_8B, H100_16, **base, fixed={"cp": 2}, top_k=1)
    assert pinned["plans"][0]["parallelism"]["cp"] == 2
    long = P.plan(LLAMA_8B, H100_16, seq_len=8192, global_batch_size=128, top_k=3)
    assert {p["parallelism"]["cp"] for p in long["plans"]} <= {1, 2}


def test_torchtitan_ring_gathers_query_head_kv_once_and_passes_fp32_dkv_each_step():
    """PyTorch's ring (`frameworks.torchtitan.cp_ring_exchange`): torchtitan's repeat_kv sends all
    32 heads, its default "allgather" rotation gathers the sequence's K/V in one all-gather waited
    for before step 1, and the fp32 dK/dV accumulator goes to the next rank after every backward
    step, the last one waited for after the loop. With no compute to hide under (attention 0 s) the
    exposed ring is exactly: forward one all-gather; backward one all-gather + cp dK/dV sends.
    Megatron (Transformer Engine P2P) sends the 8 KV heads, cp - 1 steps, bf16."""
    from planner.cost import collectives as coll
    from planner.cost import comm
    from planner.cost.step_time import _layer_comm

    tt = Layout(dp=1, cp=8, seq_len=262144, global_batch_size=1, framework="torchtitan")
    mg = dataclasses.replace(tt, framework="megatron")
    rec = {c.label: c for c in comm.layer_collectives(LLAMA_8B, tt, 0)}
    # 32 heads x 128 x (K + V) x 2 B = 16,384 B per token over the 262,144-token sequence
    assert rec["cp.kv.forward"].message_bytes == rec["cp.kv.backward"].message_bytes == 262144 * 16384
    assert rec["cp.dkv.backward"].message_bytes == 2 * 262144 * 16384          # fp32 accumulators
    mrec = {c.label: c for c in comm.layer_collectives(LLAMA_8B, mg, 0)}
    assert mrec["cp.kv.forward"].message_bytes == 262144 * 8 * 128 * 2 * 2      # the 8 KV heads, bf16
    assert mrec["cp.dkv.backward"].message_bytes == mrec["cp.kv.forward"].message_bytes

    cluster = dataclasses.replace(load_cluster("dgx-h100"), num_gpus=8)        # the cp group in one node
    gather = coll.collective_time("all_gather", group_size=8, bytes_per_device=262144 * 16384,
                                  cluster=cluster, gpus_per_domain=8)
    dkv_step = coll.collective_time("p2p", group_size=2, bytes_per_device=2 * 262144 * 16384 / 8,
                                    cluster=cluster, gpus_per_domain=2)
    cp_f, cp_b = _layer_comm(LLAMA_8B, cluster, tt, 0, 0.0, ("tp", "cp", "ep", "dp", "pp"))[1]
    assert cp_f == pytest.approx(gather, rel=1e-12)
    assert cp_b == pytest.approx(gather + 8 * dkv_step, rel=1e-12)
    kv_step = coll.collective_time("p2p", group_size=2, bytes_per_device=262144 * 4096 / 8,
                                   cluster=cluster, gpus_per_domain=2)
    m_f, m_b = _layer_comm(LLAMA_8B, cluster, mg, 0, 0.0, ("tp", "cp", "ep", "dp", "pp"))[1]
    assert m_f == pytest.approx(7 * kv_step, rel=1e-12) and m_b == pytest.approx(14 * kv_step, rel=1e-12)
