"""Predicted peak memory vs the published torchtitan peaks (training_runs.yaml, group
torchtitan-H100-2024-12: Llama 3.1 8B and 70B on H100 96 GB HBM2e @500W). Target: within 10%.

The published number is torchtitan's `memory/max_reserved(GiB)` — the caching allocator's
`reserved_bytes.all.peak` (torchtitan @9dec370 torchtitan/metrics.py `DeviceMemoryMonitor.
get_peak_stats`; train.py logs "memory: {max_reserved_gib} GiB"), binary GiB. It excludes the CUDA
context, includes cached-but-free blocks. Capacity (catalog H100) only sets the verdict.

Every term is derived (docs/activations.md, `cost/activations.py`, `cost/memory.py`); the reserve
is the stated default (2 GiB), the same for every row. Prediction beside published (pytest -s):

| row | layout | recompute | predicted GiB | published GiB | error |
|---|---|---|---:|---:|---:|
| t1-fsdp | FSDP 8, b 2, s 8192 | op-SAC | 78.3 | 82.4 | −5.0 % |
| t1-compile | same + compile | op-SAC | 78.3 | 77.0 | +1.7 % |
| t1-fp8 | same + compile + Float8 | op-SAC | 78.3 | 76.8 | +1.9 % |
| t2-cp1..cp8 | FSDP 8/cp, CP 1..8, s 32k·cp | full | 83.1 | 83.9–84.5 | −0.9 … −1.6 % |
| t3-fsdp | FSDP 128, b 2, s 8192 | op-SAC | 64.3 | 67.0 | −4.1 % |
| t3-compile / fp8 | same + compile (+ Float8) | op-SAC | 64.3 | 62.0 / 61.8 | +3.6 / +4.0 % |
| t4-2d (70B) | FSDP 32, TP 8, b 16 | full | 64.8 | 71.9 | −9.9 % |
| t4-2d-asynctp (70B) | same + AsyncTP | full | 64.8 | 67.6 | −4.2 % |

8B peak = model states 16 B/param (fp32 params, grads, Adam m, v over the FSDP group) + per-layer
saved tensors × 32 + final norm / LM-head input + the loss (14 B per logit element at the
log-softmax backward) + FSDP2 gathered units + 2 GiB reserve. torch.compile and Float8 are costed as
eager bf16 (the model has no fusion term): the compiled rows come out high by 2–4 %.

FSDP2 units (cost/memory.py `_torchtitan_fsdp_terms`, from torchtitan @9dec370 `apply_fsdp` and
FSDP2's root handling): at the loss backward the root unit (embedding + output + final norm, bf16,
never resharded after forward) and the last block (reshard_after_forward=False) are gathered —
8B: 1.96 + 0.41 GiB; during a block's backward the block, its prefetched neighbour and the root's
output gradient instead. FSDP2 has no gradient bucket.

70B 2D peak (the loss backward; T = 16·8192 = 131,072 tokens, V/t = 16,032): model states 4.1 GiB
+ 80 checkpointed block inputs (2h/t each: 20.0 GiB) + final norm (6h/t: 0.75) + the all-gathered
LM-head input (2h, whole: 2.0) + the saved log-softmax (4 B × T·V/t: 7.8) + loss_parallel's backward
temporaries and the cached bf16 logits block (14 B × T·V/t: 27.4) + FSDP2 root unit 0.49 + the last
block's unsharded parameters 0.20 + 2 GiB reserve = 64.8 GiB (−9.9 %, 0.06 GiB inside the 10 %
band). The layer-backward phase (one recomputed block with its all-gathered norm outputs and the
SwiGLU-backward gradients, two gathered blocks, the root's output gradient: 14.6 GiB) is lower. The
model does not tell AsyncTP apart: the
symmetric-memory workspaces (torch/distributed/_symmetric_memory `get_symm_mem_workspace`, allocated
by `empty_strided_p2p`, outside the caching allocator) are not in `reserved_bytes`, and the fused
ops still take `ag_out` / `stacked_partials` from the caching allocator as the plain collectives do,
so the published 4.3 GiB difference between the two rows is not derivable from the source.
"""

import re
from pathlib import Path

import pytest
import yaml

from planner.cost.memory import memory_per_device
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

GIB = 2**30
RUNS = yaml.safe_load((Path(__file__).resolve().parent / "data" / "reference" / "training_runs.yaml").read_text())["training_runs"]
ROWS = [r for r in RUNS if r.get("group") == "torchtitan-H100-2024-12"
        and re.fullmatch(r"FSDP \d+(, (CP|TP) \d+)?", r["parallelism"])]
PP_ROWS = [r for r in RUNS if r.get("group") == "torchtitan-H100-2024-12" and ", PP " in r["parallelism"]]
MODELS = {"Llama 3.1 8B": "llama-3.1-8b", "Llama 3.1 70B": "llama-3.1-70b", "Llama 3.1 405B": "llama-3.1-405b"}


def degree(row, axis: str) -> int:
    match = re.search(rf"{axis} (\d+)", row["parallelism"])
    return int(match.group(1)) if match else 1


def layout_of(row) -> Layout:
    """The row's layout. With PP: micro-batch = local batch / pp (torchtitan @9dec370
    `build_pipeline_schedule`: n_microbatches = `pipeline_parallel_microbatches`, default None ->
    `pipeline_parallel_degree`), layers as evenly as possible (`uneven_split`; interleaved rows at 2
    stages per rank, `generate_split_points` for PipelineScheduleMulti, in even chunks)."""
    fsdp, cp, tp, pp = degree(row, "FSDP"), degree(row, "CP"), degree(row, "TP"), degree(row, "PP")
    lay = _base_layout(row, fsdp, cp, tp)
    if pp == 1:
        return lay
    from planner.placement.rules import uneven_split
    n = load_model(MODELS[row["model"]]).num_hidden_layers
    vpp = 2 if "Interleaved" in row["techniques"] else 1
    split = tuple(2 * c for c in uneven_split(n // 2, pp)) if vpp == 2 else tuple(uneven_split(n, pp))
    return lay.replace(pp=pp, vpp=vpp, pipeline_layers=split, micro_batch_size=row["local_batch"] // pp)


def _base_layout(row, fsdp: int, cp: int, tp: int) -> Layout:
    return Layout(dp=fsdp, cp=cp, tp=tp, zero_stage=3, framework="torchtitan", loss_chunks=1, fused_qkv=False,
                  sequence_parallel=tp > 1,  # torchtitan apply_tp: SequenceParallel norms whenever TP
                  micro_batch_size=row["local_batch"],
                  global_batch_size=row.get("global_batch_seqs", fsdp * row["local_batch"]),
                  seq_len=row["seq_len"], recompute=row["activation_checkpointing"],
                  precision="fp8" if "Float8" in row["techniques"] else "bf16")


def predict(row) -> float:
    cluster = load_cluster("dgx-h100", gpus=row["gpus"])
    return memory_per_device(load_model(MODELS[row["model"]]), cluster, layout_of(row)).total / GIB


def test_rows_found():
    """Table 1 (3), Table 2 (4), Table 3 (3) of the 8B and Table 4 (2) of the 70B."""
    assert len(ROWS) == 12


def test_model_states_exact():
    """FSDP over 8: 16 B x 8,030,261,248 params / 8 (torchtitan fp32 params + grads + Adam m, v)."""
    cluster = load_cluster("dgx-h100", gpus=8)
    m = memory_per_device(load_model("llama-3.1-8b"), cluster, layout_of(ROWS[0]))
    assert m.model_states == pytest.approx(16 * 8_030_261_248 / 8, rel=1e-6)


def test_8b_selective_activation_terms_by_hand():
    """t1: op-SAC keeps 63,616 B per token per layer (docs/activations.md) x 16,384 tokens x 32 layers;
    the log-softmax output 4 B x 16,384 x 128,256 plus the final norm (4h + 2h) and head input 2h."""
    cluster = load_cluster("dgx-h100", gpus=8)
    m = memory_per_device(load_model("llama-3.1-8b"), cluster, layout_of(ROWS[0]))
    tokens = 2 * 8192
    assert m.activation_terms["layers"] == 63_616 * tokens * 32
    assert m.activation_terms["output_logits_loss"] == 4 * tokens * 128_256 + 8 * 4096 * tokens
    assert m.transient_terms["loss_working_set"] == 10 * tokens * 128_256


def test_70b_2d_loss_phase_terms_by_hand():
    """t4 (FSDP 32 x TP 8, b 16, s 8192, full AC), T = 131,072 tokens on each rank, h = 8192, V/8 = 16,032:
    80 block inputs 2h/8 each; final norm 6h/8 + all-gathered head input 2h + log-softmax 4 B x V/8;
    loss_parallel backward 14 B x V/8 (exp, sum, zeros_like + the cached bf16 logits block)."""
    row = next(r for r in ROWS if r["id"] == "torchtitan-202412-t4-2d")
    cluster = load_cluster("dgx-h100", gpus=256)
    m = memory_per_device(load_model("llama-3.1-70b"), cluster, layout_of(row))
    tokens, h, v = 16 * 8192, 8192, 128_256 // 8
    assert m.activation_terms["layers"] == 80 * tokens * 2 * h // 8
    assert m.activation_terms["output_logits_loss"] == tokens * (6 * h // 8 + 2 * h + 4 * v)
    assert m.transient_terms["loss_working_set"] == 14 * tokens * v
    assert m.transient_terms["loss_working_set"] > (m.transient_terms["recompute_working_set"]
                                                    + m.transient_terms["unreduced_unit_gradient"])


def test_70b_2d_fsdp2_units_by_hand():
    """t4: root unit = embedding + output (V/8 x h each) + final norm h (replicated under SP), bf16;
    last block (not resharded after forward) = (attention 2h^2 + 2h*1024 + MLP 3h*28672) / 8 + norms
    2h, bf16; the loss phase is the peak, so transient = root + loss working set + last block."""
    row = next(r for r in ROWS if r["id"] == "torchtitan-202412-t4-2d")
    m = memory_per_device(load_model("llama-3.1-70b"), load_cluster("dgx-h100", gpus=256), layout_of(row))
    t, h, v = m.transient_terms, 8192, 128_256 // 8
    block = (2 * h * h + 2 * h * 1024 + 3 * h * 28_672) // 8 + 2 * h          # 106,971,136
    assert t["fsdp_root_unit"] == (2 * v * h + h) * 2
    assert t["fsdp_last_block"] == block * 2
    assert m.transient == (2 * v * h + h) * 2 + 14 * 16 * 8192 * v + block * 2


def test_prediction_table():
    """Prints every row's prediction beside the published peak (run with -s)."""
    lines = [f"{r['id']:<40} predicted {predict(r):6.1f} GiB   published {r['peak_memory_gib']:5.1f} GiB"
             f"   {100 * (predict(r) / r['peak_memory_gib'] - 1):+6.1f} %" for r in ROWS]
    print("\n" + "\n".join(lines))
    assert len(lines) == len(ROWS)


@pytest.mark.parametrize("row", [pytest.param(r, id=r["id"]) for r in ROWS])
def test_peak_within_10_percent(row):
    assert predict(row) == pytest.approx(row["peak_memory_gib"], rel=0.10)


PP_GAP = {
    "torchtitan-202412-t6-4d-cp8": "predicted 74.6 GiB vs published 84.9 (-12.1 %): 1.8 GiB beyond the "
                                   "10 % band; the model's per-rank terms do not change with cp at fixed "
                                   "tokens per rank, the published peak rises 9.6 GiB from cp1 to cp8 "
                                   "(7.8 of it from cp4 to cp8). Table 6 runs torch.compile + Float8 + "
                                   "AsyncTP (its caption, benchmarks/llama3_h100_202412_torchtitan.md "
                                   "l. 62), which the row does not record and the model costs as eager "
                                   "bf16; Table 2 (8B, FSDP + CP + compile + Float8, no TP / PP) stays "
                                   "at 83.9-84.5 GiB over cp 1-8, so the rise comes with TP (AsyncTP) or "
                                   "PP beside CP. Checked and too small: ring attention's backward "
                                   "(torch _templated_ring_attention_backward, the all-gather rotater "
                                   "by default) holds the whole sequence's K/V after repeat_kv (16 local "
                                   "heads, not the 1 KV head: 262,144 x 8 KiB = 2 GiB at cp8, 1 GiB at "
                                   "cp4) with fp32 dq/dk/dv accumulators and rotating dk/dv buffers, "
                                   "about 4.6 GiB beside the recomputed attention's own tensors, against "
                                   "about 4.5 GiB the SwiGLU-backward peak already counted holds beside "
                                   "them: a tie at cp8, below it at cp1-4; the sequence-long RoPE table "
                                   "(2 x 262,144 x 64 complex64 = 256 MiB per stage: train.py @9dec370 "
                                   "shards `model.freqs_cis`, not the stages'); torchtitan's stage "
                                   "buffers sized by the global sequence were removed before these runs "
                                   "(@1629fb9, 2024-10-14; 9dec370 pipeline_llama.py passes no shapes)",
}
"""PP rows outside the 10 % band: id -> the remaining gap (xfail strict)."""


def test_pp_rows_found():
    """Table 5 (1F1B, interleaved) and Table 6 (CP 1, 2, 4, 8) of the 405B."""
    assert len(PP_ROWS) == 6


def test_405b_pp_accumulated_gradients_by_hand():
    """t5-1f1b, stage 0 (16 blocks of the 126 / 8 uneven split): FSDP2 with sync off under PP keeps
    fp32 unsharded gradients of every block, (attention 2h^2 + 2h*1024 + MLP 3h*53248) / 8 + norms
    2h, and of the embedding V/8 x h: 4 B each. 1F1B, m = pp = 8: the second backward starts with
    7 micro-batches saved and every gradient accumulated."""
    from planner.cost.memory import stage_memory
    row = next(r for r in PP_ROWS if r["id"] == "torchtitan-202412-t5-3d-1f1b")
    m = stage_memory(load_model("llama-3.1-405b"), load_cluster("dgx-h100", gpus=512), layout_of(row), 0)
    h = 16384
    block = (2 * h * h + 2 * h * 1024 + 3 * h * 53_248) // 8 + 2 * h
    assert m.transient_terms["fsdp_accumulated_gradients"] == 4 * (16 * block + 128_256 // 8 * h)
    assert m.transient_terms["fsdp_stage_blocks"] == 2 * 16 * block
    assert m.in_flight_microbatches == 7
    # full AC: 16 block inputs of 2h/8 bytes per token (SP), 4 x 8192 tokens per micro-batch, 7 in flight
    assert m.activation_terms["layers"] == 7 * 16 * 4 * 8192 * 2 * h // 8


def test_405b_pp_pipelining_buffers_by_hand():
    """t5-1f1b, torch.distributed.pipelining's own tensors (B = 4 x 8192 tokens x h / 8 x 2 B =
    128 MiB, the stage-boundary activation; m = 8 micro-batches): stage 0 (first) keeps a gradient
    receive buffer per micro-batch (8 B) and each alive micro-batch's output until its backward
    (7 alive at its peak, the start of its second backward: 7 B); stage 1 also a receive buffer per
    micro-batch (8 B + 8 B; 7 alive: 7 B of outputs); the last stage a receive buffer per
    micro-batch (8 B) and its one alive micro-batch's bf16 logits, 4 x 8192 x 128,256 / 8 x 2 B."""
    row = next(r for r in PP_ROWS if r["id"] == "torchtitan-202412-t5-3d-1f1b")
    model, cluster, lay = load_model("llama-3.1-405b"), load_cluster("dgx-h100", gpus=512), layout_of(row)
    from planner.cost.memory import stage_memory
    b = 4 * 8192 * 16384 // 8 * 2
    s0, s1, s7 = (stage_memory(model, cluster, lay, s) for s in (0, 1, 7))
    assert (s0.in_flight_microbatches, s1.in_flight_microbatches, s7.in_flight_microbatches) == (7, 7, 1)
    assert s0.transient_terms["pipeline_buffers"] == 8 * b
    assert s0.activation_terms["pipeline_outputs"] == 7 * b
    assert s1.transient_terms["pipeline_buffers"] == 16 * b
    assert s1.activation_terms["pipeline_outputs"] == 7 * b
    assert s7.transient_terms["pipeline_buffers"] == 8 * b
    assert s7.activation_terms["pipeline_outputs"] == 4 * 8192 * (128_256 // 8) * 2


def test_405b_interleaved_chunk_released_after_its_last_backward():
    """t5-interleaved, last rank (local chunks 0 and 1, 8 blocks each; ops: 8 forwards of chunk 0,
    8 F/B pairs of chunk 1, 8 backwards of chunk 0). FSDP2's post-backward at a chunk's last
    backward reduce-scatters its fp32 gradient and reshards its blocks, so chunk 1's are gone before
    chunk 0's backwards start. The peak is the start of chunk 1's last backward: chunk 0's 8
    micro-batches and chunk 1's last alive (9 chunk-micro-batches = 4.5 stage micro-batches),
    chunk 1's gradient alone accumulated (8 blocks + output V/8 x h + final norm h, 4 B each:
    not both chunks' 16 blocks), every block of both chunks gathered."""
    row = next(r for r in PP_ROWS if r["id"] == "torchtitan-202412-t5-3d-interleaved")
    from planner.cost.memory import stage_memory
    m = stage_memory(load_model("llama-3.1-405b"), load_cluster("dgx-h100", gpus=512), layout_of(row), 7)
    h = 16384
    block = (2 * h * h + 2 * h * 1024 + 3 * h * 53_248) // 8 + 2 * h
    assert m.in_flight_microbatches == 4.5
    assert m.transient_terms["fsdp_accumulated_gradients"] == 4 * (8 * block + 128_256 // 8 * h + h)
    assert m.transient_terms["fsdp_stage_blocks"] == 2 * 16 * block


def test_pp_prediction_table():
    """Prints every PP row's prediction beside the published peak (run with -s)."""
    lines = [f"{r['id']:<40} predicted {predict(r):6.1f} GiB   published {r['peak_memory_gib']:5.1f} GiB"
             f"   {100 * (predict(r) / r['peak_memory_gib'] - 1):+6.1f} %" for r in PP_ROWS]
    print("\n" + "\n".join(lines))
    assert len(lines) == len(PP_ROWS)


@pytest.mark.parametrize("row", [pytest.param(r, id=r["id"], marks=[pytest.mark.xfail(strict=True, reason=PP_GAP[r["id"]])]
                                              if r["id"] in PP_GAP else []) for r in PP_ROWS])
def test_pp_peak_within_10_percent(row):
    assert predict(row) == pytest.approx(row["peak_memory_gib"], rel=0.10)
