"""Training field cases from tests/data/reference/field_cases.yaml (copy of shared/reference): each for its input and its kind."""

import dataclasses

import pytest

from planner.cost.comm import _kv_bytes_per_token, collectives
from planner.cost.memory import (initialization_peak_bytes, memory_per_device, memory_verdict,
                                 model_state_bytes, stage_layers, stage_memory)
from planner.explain import explain
from planner.placement.layout import Layout
from planner.placement.precision import padded_vocab
from planner.placement.rules import check_layout, check_ulysses, ulysses_degrees
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

GB, GIB = 1e9, 2**30


def llama(name="m", *, h=4096, layers=32, heads=32, kv=None, inter=11008, vocab=32000, tie=False):
    return from_config(dict(model_type="llama", hidden_size=h, num_hidden_layers=layers,
                            num_attention_heads=heads, num_key_value_heads=kv or heads,
                            intermediate_size=inter, vocab_size=vocab, max_position_embeddings=4096,
                            tie_word_embeddings=tie), name=name)


def cluster(gpus, name="dgx-h100"):
    c = load_cluster(name)
    return dataclasses.replace(c, num_gpus=gpus)


def rules(violations):
    return {v.rule: v for v in violations}


# FC-01: model states alone (0.49 GB) are not "memory per GPU" (measured 14.3 GiB / 20.8 GiB peak).
def test_fc01_zero3_offload_reports_every_term():
    model = llama("llama-2-7b")  # 6.74e9 params, largest layer 2.02e8 (FC-01: 6.8e9, 1.31e8)
    layout = Layout(dp=4, zero_stage=3, offload=frozenset({"parameters", "optimizer"}),
                    framework="deepspeed", precision="fp16", global_batch_size=4, seq_len=2048)
    r = explain(model, cluster(4), layout)
    mem, terms = r["memory_bytes"], r["details"]["transient_terms"]
    assert mem["parameters"] == 0 and mem["optimizer_states"] == 0       # offloaded
    # gradients: 2 B x 6.74e9 / 4 shards
    assert mem["gradients"] == pytest.approx(2 * 6_738_415_616 / 4, rel=1e-6)
    # gather working set >= the largest layer in fp16: (4*4096^2 + 3*4096*11008) x 2 B
    assert terms["gather_working_set"] >= (4 * 4096**2 + 3 * 4096 * 11008) * 2
    assert terms["gradient_buckets"] > 0 and mem["reserve"] > 0 and mem["activations"] > 0
    assert mem["total"] > 10 * 0.49 * GB
    assert mem["total"] > mem["parameters"] + mem["gradients"] + mem["optimizer_states"] + mem["activations"]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_fc01_kind_total_always_exceeds_model_states(stage):
    m = memory_per_device(llama(), cluster(8), Layout(dp=8, zero_stage=stage, global_batch_size=8))
    assert m.total >= m.model_states + m.activations + m.reserve > m.model_states


# FC-04: the same layout peaks 71 vs 87 GB under FSDP1/FSDP2 -> keep a margin; say the implementation.
def test_fc04_verdict_margin():
    cap = 80 * GIB
    assert memory_verdict(int(0.95 * cap), cap) == "at_risk"
    assert memory_verdict(int(0.85 * cap), cap) == "fits"
    assert memory_verdict(cap + 1, cap) == "does_not_fit"
    assert memory_verdict(int(0.85 * cap), cap, margin=0.20) == "at_risk"


def test_fc04_input_states_implementation_and_prediction_in_published_band():
    model = llama("llama-2-13b", h=5120, layers=40, heads=40, inter=13824)
    # The reporter's run used torchtitan's llama_13b.toml of that week (commit c233ecdd9, 2024-04-03):
    # batch_size 8, seq_len 4096, selective_ac_option "op".
    layout = Layout(dp=2, dp_shard=2, tp=4, zero_stage=3, sequence_parallel=True, micro_batch_size=8,
                    global_batch_size=16, seq_len=4096, recompute="selective", framework="torchtitan")
    r = explain(model, cluster(8), layout)
    assert r["details"]["framework"] == "torchtitan" and r["details"]["at_risk_margin"] == 0.10
    # published peaks 71 GB (FSDP1) and 87 GB (FSDP2): the prediction sits in that band (-10%).
    assert 0.9 * 71 * GB <= r["memory_bytes"]["total"] <= 87 * GB


# FC-05 / FC-06: heads must divide by tp; alternatives offered.
def test_fc05_heads_52_tp3_and_tp8_rejected_with_alternatives():
    model = llama("fc05", h=6656, layers=60, heads=52, inter=17920)
    for tp, gpus in ((3, 3), (8, 8)):
        v = rules(check_layout(model, cluster(gpus), Layout(tp=tp)))["heads_divisible_by_tp"]
        assert "num_attention_heads=52" in v.message and f"tp={tp}" in v.message
    fix = rules(check_layout(model, cluster(3), Layout(tp=3)))["heads_divisible_by_tp"].fix
    assert "tp=1 x pp=3 (20 layers per stage)" in fix and "4 GPUs with tp=4" in fix
    assert "heads_divisible_by_tp" not in rules(check_layout(model, cluster(4), Layout(tp=4)))


def test_fc06_heads_28_tp8_offers_tp4_dp2():
    model = llama("qwen2-7b", h=3584, layers=28, heads=28, kv=4, inter=18944, vocab=152064)
    # a global batch of 8 sequences: the suggested dp must divide it (dp 2 does)
    v = rules(check_layout(model, cluster(8), Layout(tp=8, global_batch_size=8)))
    assert "num_attention_heads=28" in v["heads_divisible_by_tp"].message
    assert "tp=4 x dp=2" in v["heads_divisible_by_tp"].fix
    assert not [x for x in check_layout(model, cluster(8), Layout(tp=4, dp=2, global_batch_size=2))
                if x.severity == "error"]


# FC-07: tp > n_kv valid only where KV heads replicate (serving engines), not in training frameworks.
def test_fc07_kv_heads_4_tp8():
    model = llama("fc07", heads=32, kv=4)
    v = rules(check_layout(model, cluster(8), Layout(tp=8)))["kv_heads_divisible_by_tp"]
    assert "num_key_value_heads=4" in v.message and "tp=8" in v.message
    assert "vllm" in v.message and "megatron" in v.message
    assert "kv_heads_divisible_by_tp" not in rules(check_layout(model, cluster(8), Layout(tp=4, dp=2,
                                                                                         global_batch_size=2)))
    # KV bytes per GPU stop shrinking past 1 KV head per rank: 2 x 1 x 128 x 2 B at tp 4 and 8.
    assert _kv_bytes_per_token(model, 4) == _kv_bytes_per_token(model, 8) == 2 * 128 * 2


# FC-08: vocab 250682 at tp=8 -> Megatron pads to a multiple of 128 x 8 = 1024: 250880.
def test_fc08_vocab_padding_counted():
    model = llama("fc08", vocab=250682)
    layout = Layout(tp=8)
    assert padded_vocab(model, layout) == 250880
    v = rules(check_layout(model, cluster(8), layout))["vocab_padding"]
    assert "250682" in v.message and "250880" in v.message and v.severity == "warning"
    padded_model = llama("fc08p", vocab=250880)
    a = stage_memory(model, cluster(8), layout, 0).state_terms["parameters.dense"]
    b = stage_memory(padded_model, cluster(8), layout, 0).state_terms["parameters.dense"]
    assert a == b  # the 198 padding rows (x2: embedding + untied head) are in memory
    # torchtitan shards unevenly: ceil(250682 / 8) x 8 = 250688
    assert padded_vocab(model, Layout(tp=8, framework="torchtitan")) == 250688


# FC-09 / FC-10: layers by pp x vpp, or an explicit uneven split.
def test_fc09_30_layers_pp4():
    model = llama("fc09", layers=30)
    v = rules(check_layout(model, cluster(4), Layout(pp=4)))["layers_divisible_by_pp"]
    assert all(s in v.message for s in ("num_hidden_layers=30", "pp=4", "builds 28 layers"))
    assert "[8, 7, 7, 8]" in v.fix
    uneven = Layout(pp=4, pipeline_layers=(8, 7, 7, 8))
    assert not [x for x in check_layout(model, cluster(4), uneven) if x.rule.startswith(("layers", "pipeline"))]
    assert [len(s) for s in stage_layers(model, uneven)] == [8, 7, 7, 8]
    bad = rules(check_layout(model, cluster(4), Layout(pp=4, pipeline_layers=(8, 8, 8, 8))))
    assert "sums to 32" in bad["pipeline_layers"].message


def test_fc10_80_layers_pp16_vpp2():
    model = llama("fc10", layers=80)
    v = rules(check_layout(model, cluster(16), Layout(pp=16, vpp=2)))["layers_divisible_by_pp"]
    assert all(s in v.message for s in ("80", "16 x 2 = 32 virtual stages", "builds 64 layers"))
    assert "layers_divisible_by_pp" not in rules(check_layout(model, cluster(16), Layout(pp=16, vpp=5)))


# FC-11: Ulysses degrees for 40 heads / 8 KV heads.
def test_fc11_ulysses():
    model = llama("fc11", h=5120, heads=40, kv=8)
    assert ulysses_degrees(model) == [1, 2, 4, 8, 40]
    v = check_ulysses(model, 16)
    assert v and "context parallelism" in v[0].fix and "[1, 2, 4, 8, 40]" in v[0].message
    assert check_ulysses(model, 8) == []


# FC-12: sequence by cp x lcm(2, tp) with SP.
@pytest.mark.parametrize(("cp", "tp", "sp", "need"), [(2, 4, True, 8), (3, 3, True, 18), (2, 1, False, 4)])
def test_fc12_sequence_divisibility(cp, tp, sp, need):
    model = llama("fc12", heads=36, kv=36, h=4608)
    gpus = cp * tp
    bad = rules(check_layout(model, cluster(gpus), Layout(cp=cp, tp=tp, sequence_parallel=sp,
                                                          seq_len=need * 512 + 2)))
    assert f"not divisible by {need}" in bad["sequence_divisible"].message
    ok = check_layout(model, cluster(gpus), Layout(cp=cp, tp=tp, sequence_parallel=sp, seq_len=need * 512))
    assert "sequence_divisible" not in rules(ok)


def test_fc12_suggests_4104():
    v = rules(check_layout(llama(), cluster(8), Layout(cp=2, tp=4, sequence_parallel=True, seq_len=4100)))
    assert v["sequence_divisible"].fix == "use seq_len=4104"


# FC-13: rank count differs from the product of the degrees.
def test_fc13_world_size():
    v = rules(check_layout(llama(), cluster(1), Layout(tp=2)))["world_size"]
    assert "= 2 differs from the 1 GPUs" in v.message
    assert "world_size" not in rules(check_layout(llama(), cluster(2), Layout(tp=2)))


# FC-14: tied embeddings under PP: a copy on the last stage and an all-reduce between first and last.
def test_fc14_tied_embedding_copy_and_allreduce():
    model = llama("llama-3.2-1b", h=2048, layers=16, heads=32, kv=8, inter=8192, vocab=128256, tie=True)
    layout = Layout(pp=2, global_batch_size=1)
    last = stage_memory(model, cluster(2), layout, 1).state_terms["parameters.dense"]
    # 8 layers x (2048*(32+16)*64 + 32*64*2048 + 3*2048*8192) + 128256*2048 copy, bf16 (2 B)
    layer = 2048 * 48 * 64 + 32 * 64 * 2048 + 3 * 2048 * 8192
    assert last == (8 * layer + 128256 * 2048) * 2
    assert 128256 * 2048 * 2 == 525_336_576
    tied = [c for c in collectives(model, layout, stage=1) if c.label == "gradients.tied_embedding"]
    assert len(tied) == 1 and tied[0].kind == "all_reduce" and tied[0].group_size == 2
    assert tied[0].message_bytes == 128256 * 2048 * 4   # Megatron fp32 main grads
    single = Layout(pp=1)
    assert stage_memory(model, cluster(1), single, 0).state_terms["parameters.dense"] == \
        (16 * layer + 128256 * 2048) * 2
    assert not [c for c in collectives(model, single) if c.label == "gradients.tied_embedding"]


# FC-16: ZeRO at dp=1 has no effect: 16 B/param / tp 8 = 60 GB > 32 GB.
def test_fc16_zero_at_dp1():
    layout = Layout(tp=8, dp=1, zero_stage=2, framework="deepspeed", precision="fp16")
    states = model_state_bytes(3.0e10, layout)
    assert sum(states.values()) == pytest.approx(60e9)
    v100 = load_cluster("dgx2-v100")
    assert memory_verdict(int(sum(states.values())), v100.gpu.memory_bytes) == "does_not_fit"
    v = rules(check_layout(llama(), dataclasses.replace(v100, num_gpus=8), layout))["zero_without_dp"]
    assert "no effect" in v.message
    # kind: the same ZeRO stage over dp=8 does shard: 2 + 14/8 B/param
    assert sum(model_state_bytes(3.0e10, Layout(dp=8, zero_stage=2, framework="deepspeed",
                                                global_batch_size=8)).values()) == pytest.approx(3.0e10 * 3.75)


# FC-17: FSDP steady state fits (13.5 GB) but unsharded fp32 initialisation (27 GB) does not.
def test_fc17_initialisation_peak():
    layout = Layout(dp=8, zero_stage=3, framework="deepspeed", global_batch_size=8)
    assert sum(model_state_bytes(6.74e9, layout).values()) == pytest.approx(16 * 6.74e9 / 8)
    assert initialization_peak_bytes(6.74e9, layout) == pytest.approx(4 * 6.74e9, rel=1e-9)
    rtx = cluster(8, "rtx-4090x8")          # 24 GB cards, like the RTX 3090 of the report
    m = memory_per_device(llama("llama-2-7b"), rtx, Layout(dp=8, zero_stage=3, framework="megatron",
                                                         global_batch_size=8, seq_len=512))
    assert m.initialization_peak == 4 * 6_738_415_616 > m.capacity
    assert any("meta device" in w for w in m.warnings)


def test_sequence_fix_offers_a_context_degree_first():
    """Fresh-user review: `explain --cp 3` at 4,096 tokens said only "use seq_len=4098". Load-balanced
    CP needs seq_len % (2 cp) == 0 (TE's 2 x cp chunks): cp 2 (4096 / 4) and 4 (4096 / 8) divide
    it, 3 (4096 / 6) and 5, 6 do not; the 6-multiple above 4,096 is 4,098. On 4 GPUs both cp keep a
    whole world (4 / 2, 4 / 4); on 3 GPUs neither does, and only the length is offered (review-fresh6)."""
    v = rules(check_layout(llama(), cluster(4), Layout(cp=3, seq_len=4096)))
    assert v["sequence_divisible"].fix == "use cp in {2, 4}, which divide seq_len=4096, or seq_len=4098"
    v = rules(check_layout(llama(), cluster(3), Layout(cp=3, seq_len=4096)))
    assert v["sequence_divisible"].fix == "use seq_len=4098"
