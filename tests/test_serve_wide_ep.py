"""serve-plan's expert parallelism over several nodes (senior review 8, finding 2): the multi-node shapes,
the MoE token exchange priced over the network, the experts split over the whole EP group, and the
`--emit sglang` / `--emit vllm` -> `planner check` round trip of one such instance."""

from __future__ import annotations

import shlex

import cli_run
import pytest

from planner.check.engine_file import check_launch_file
from planner.cost import serving as sv
from planner.cost.params_flops import count_params
from planner.serve import ServeRequest, shapes, wide_ep
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


def test_wide_shapes_are_whole_nodes_dividing_the_experts(dsv3):
    """DeepSeek-V3 (256 routed experts, 128 heads) disaggregated on 96 H100 (12 nodes of 8): over 2 to 12 whole
    nodes, plain tp where 128 heads divide by tp: 16, 32, 64; EP under vLLM where 256 divides by ep (16, 32, 64);
    under SGLang at every node count, with the fewest redundant experts that make (256 + r) % ep == 0: by hand
    256 = 10 x 24 + 16 -> 8 (264 = 11 x 24); 40 -> 24 (280 = 7 x 40); 48 -> 32 (288 = 6 x 48); 56 -> 24 (280);
    72 -> 32 (288 = 4 x 72, LMSYS's EP72 decode); 80 -> 64 (320); 88 -> 8 (264 = 3 x 88); 96 -> 32 (288)."""
    hw = load_cluster("dgx-h100")
    req = ServeRequest(gpus=96, input_len=2000, output_len=1000, engine="sglang", disaggregated=True,
                       weight_dtype="fp8-block")
    assert wide_ep(dsv3, hw, req)
    found, _ = shapes(dsv3, hw, 96, {}, "sglang", wide=True)
    plain = sorted(i.tp for i in found if i.tp > 8 and i.ep == 1)
    assert plain == [16, 32, 64]
    ep = {i.ep: i.redundant for i in found if i.tp > 8 and i.ep > 1}
    assert all(i.adp == i.ep == i.tp and i.pp == 1 for i in found if i.tp > 8 and i.ep > 1)
    assert ep == {16: 0, 24: 8, 32: 0, 40: 24, 48: 32, 56: 24, 64: 0, 72: 32, 80: 64, 88: 8, 96: 32}
    vllm, _ = shapes(dsv3, hw, 96, {}, "vllm", wide=True)
    assert sorted((i.ep, i.redundant) for i in vllm if i.tp > 8 and i.ep > 1) == [(16, 0), (32, 0), (64, 0)]
    narrow, _ = shapes(dsv3, hw, 96, {}, "sglang")
    assert max(i.tp for i in narrow) == 8


def test_redundant_experts_memory_by_hand(dsv3):
    """EP72 with 32 redundant experts (LMSYS's decode layout): 288 / 72 = 4 experts per GPU of one MoE layer, each
    3 x 7168 x 2048 = 44,040,192 weights, fp8-block 1 B + 4 / 16,384 B of scale each: 4 x 44,040,192 x
    (1 + 4 / 16,384) = 176,203,776 B; EP64 without redundancy holds the same 4."""
    layer = next(l for l in count_params(dsv3).layers if l.routed_experts)
    ep72 = sv.Instance(tp=72, ep=72, adp=72, redundant=32)
    assert sv.physical_experts(dsv3, ep72) == 288
    assert sv.routed_expert_bytes(dsv3, ep72, "fp8-block", layer.routed_experts) == pytest.approx(176_203_776)
    ep64 = sv.Instance(tp=64, ep=64, adp=64)
    assert sv.routed_expert_bytes(dsv3, ep64, "fp8-block", layer.routed_experts) == pytest.approx(176_203_776)
    assert ep72.label == "dp72 (attention) ep72 (+32 redundant experts)"


def test_shared_experts_and_embedding_replicated_under_deepep_by_hand(dsv3):
    """SGLang's DeepEP backend replicates the shared experts on every GPU and, under DP attention, the embedding
    over the attention-TP group (`cost.serving.splits`); the LM head and the 3 dense MLPs stay split over tp.
    By hand, DeepSeek-V3 fp8-block at EP32 (attention TP 1):
    - shared experts: 58 MoE layers x 3 x 7168 x 2048 = 2,554,331,136 weights, x (1 + 4 / 16,384) B =
      2,554,954,752 B whole, against 2,554,954,752 / 32 = 79,842,336 B split 32 ways;
    - embedding: 129,280 rows (a multiple of 64) x 7168 x 2 B = 1,853,358,080 B whole, against
      vocab padded to 64 x 32 = 2,048 -> 129,024 + 2,048 = 131,072 rows / 32 x 7168 x 2 = 58,720,256 B split.
    Difference = (2,554,954,752 - 79,842,336) + (1,853,358,080 - 58,720,256) = 4,269,750,240 B (3.98 GiB).
    vLLM's DP ranks (tensor-parallel 1) hold the LM head and dense MLPs whole too; TensorRT-LLM is unchanged."""
    inst = sv.Instance(tp=32, ep=32, adp=32)
    old = sv.weight_bytes_per_gpu(dsv3, inst, "fp8-block")
    sglang = sv.weight_bytes_per_gpu(dsv3, inst, "fp8-block", "sglang")
    assert sglang - old == pytest.approx(4_269_750_240, abs=64)
    assert sv.weight_bytes_per_gpu(dsv3, inst, "fp8-block", "trtllm") == old
    vllm = sv.weight_bytes_per_gpu(dsv3, inst, "fp8-block", "vllm")
    head = 1_853_358_080 - 58_720_256
    dense = 3 * 3 * 7168 * 18432 * (1 + 4 / 16_384) * (1 - 1 / 32)
    assert vllm - sglang == pytest.approx(head + dense, abs=64)
    # one node, EP8 with DP attention (SGLang dp8 ep8): the shared experts whole, 2,554,954,752 x 7 / 8 more
    eight = sv.Instance(tp=8, ep=8, adp=8)
    embed8 = 1_853_358_080 - 129_536 * 7168 * 2 / 8  # 129,280 rows padded to 64 x 8 = 512: 129,536
    assert (sv.weight_bytes_per_gpu(dsv3, eight, "fp8-block", "sglang") - sv.weight_bytes_per_gpu(dsv3, eight, "fp8-block")
            == pytest.approx(2_554_954_752 * 7 / 8 + embed8, abs=64))


def test_wide_shapes_only_where_asked_or_needed(dsv3):
    """Kept bounded (bench): not for a dense model, not on one node, not for an aggregated MoE that fits one node
    (DeepSeek-V3 fp8 on 8 x H200: 87.8 GiB of weights per GPU of 141), not under TensorRT-LLM; yes when the
    model leaves no KV pool on one node (DeepSeek-V3 fp8 on H100: 87.8 GiB > 80) or a pin is wider than a node."""
    h100, h200 = load_cluster("dgx-h100"), load_cluster("hgx-h200")
    base = dict(gpus=32, input_len=2000, output_len=1000, engine="sglang", weight_dtype="fp8-block")
    assert not wide_ep(load_model("llama-3.1-405b"), h100, ServeRequest(**{**base, "weight_dtype": "bf16"}))
    assert not wide_ep(dsv3, h100, ServeRequest(**{**base, "gpus": 8}))
    assert not wide_ep(dsv3, h200, ServeRequest(**base))
    assert not wide_ep(dsv3, h100, ServeRequest(**{**base, "engine": "trtllm"}))
    assert wide_ep(dsv3, h100, ServeRequest(**base))
    assert wide_ep(dsv3, h200, ServeRequest(**base, fix={"ep": 16}))


def test_routed_experts_split_over_the_whole_ep_group_by_hand(dsv3):
    """One MoE layer's routed experts at EP32: 256 x 3 x 7168 x 2048 = 11,274,289,152 parameters / 32 =
    352,321,536 per GPU; fp8-block: 1 byte each + one fp32 scale per 128 x 128 block = 352,321,536 x
    (1 + 4 / 16,384) = 352,407,552 bytes. EP64 holds half of it."""
    layer = next(l for l in count_params(dsv3).layers if l.routed_experts)
    assert layer.routed_experts == 256 * 3 * 7168 * 2048
    ep32 = sv.routed_expert_bytes(dsv3, sv.Instance(tp=32, ep=32, adp=32), "fp8-block", layer.routed_experts)
    assert ep32 == pytest.approx(352_407_552)
    ep64 = sv.routed_expert_bytes(dsv3, sv.Instance(tp=64, ep=64, adp=64), "fp8-block", layer.routed_experts)
    assert ep64 == pytest.approx(352_407_552 / 2)


def test_exchange_over_the_network_matches_deepep_internode_low_latency(dsv3):
    """An EP32 instance spans 4 nodes, so its exchange runs at the per-GPU network rate: 8 x 400 Gb/s NICs /
    8 GPUs = 50 GB/s (`link_bytes_per_s`), not NVLink's 450. By hand, 128 tokens per GPU (4,096 in the
    instance), top-8: 128 x 8 x ((7168 + 7168 / 128 x 4) + 7168 x 2) = 22,249,472 B per MoE layer, x 58 layers
    / 50e9 = 25.81 ms per step. DeepEP's published low-latency kernels at EP32 (deepseek-ai/DeepEP
    docs/legacy.md @dd758caf, H800 + CX7 400 Gb/s, 128 tokens, hidden 7168, top-8, FP8 dispatch / BF16 combine):
    dispatch 155 us + combine 273 us = 428 us per layer, x 58 = 24.82 ms: within 5%."""
    hw = load_cluster("dgx-h100")
    inst = sv.Instance(tp=32, ep=32, adp=32)
    link = sv.link_bytes_per_s(hw, inst.tp)
    assert link == 50e9
    got = sv.moe_exchange_s(dsv3, inst, 128 * 32, decode=True, link_bytes_per_s=link)
    assert got == pytest.approx(58 * 22_249_472 / 50e9)
    assert got == pytest.approx(58 * (155e-6 + 273e-6), rel=0.05)
    assert sv.link_bytes_per_s(hw, 8) == 450e9  # one node: NVLink


def test_sglang_tp16_over_two_nodes_is_its_documented_launch(tmp_path):
    """SGLang's documented two-node DeepSeek-V3 launch, tp 16 with 2 nodes: pinned tp=16 ep=1 on 16 H100 (tp=16 alone
    now plans dp16 ep16), serve-plan plans it, writes it as one command per node, and `planner check` reads it back
    as one 16-rank engine."""
    proc = cli_run.planner("serve-plan", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "16", "--input-len", "2000",
                           "--output-len", "1000", "--engine", "sglang", "--fix", "tp=16", "--fix", "ep=1",
                           "--emit", "sglang")
    assert proc.returncode == 0 and "check: PASS" in proc.stderr, proc.stderr
    commands = [shlex.split(l.strip()) for l in proc.stdout.splitlines() if l.strip().startswith("python -m sglang")]
    assert [(w[w.index("--tp-size") + 1], w[w.index("--nnodes") + 1], "--attn-dp-size" in w) for w in commands] == \
        [("16", "2", False)] * 2
    path = tmp_path / "launch.sh"
    path.write_text(proc.stdout)
    result = check_launch_file(path, cluster="dgx-h100", gpus=16)
    assert result["verdict"] == "pass" and [(r["world"], r["nnodes"]) for r in result["launches"]] == [(16, 2)]


@pytest.mark.parametrize("engine, head", [("sglang", "--dist-init-addr"), ("vllm", "--master-addr")])
def test_emit_ep32_over_four_nodes_round_trips_through_check(tmp_path, engine, head):
    """DeepSeek-V3 on 32 H100 pinned to EP32: one instance over 4 nodes, one command per node (node ranks 0-3,
    the API port on node rank 0), SGLang `--tp-size 32 --attn-dp-size 32 --ep-size 32 --moe-a2a-backend deepep`
    / vLLM `--data-parallel-size 32 --enable-expert-parallel`; read back by `planner check`: one launch of
    32 ranks over 4 nodes, PASS."""
    proc = cli_run.planner("serve-plan", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "32", "--input-len", "2000",
                           "--output-len", "1000", "--engine", engine, "--fix", "ep=32", "--emit", engine)
    assert proc.returncode == 0, proc.stderr
    assert "check: PASS" in proc.stderr
    commands = [shlex.split(l.strip()) for l in proc.stdout.splitlines()
                if l.strip().startswith(("python -m sglang", "vllm serve"))]
    assert len(commands) == 4
    for rank, words in enumerate(commands):
        assert words[words.index("--nnodes") + 1] == "4" and words[words.index("--node-rank") + 1] == str(rank)
        assert head in words and ("--port" in words) == (rank == 0)
        if engine == "sglang":
            assert [words[words.index(f) + 1] for f in ("--tp-size", "--attn-dp-size", "--ep-size")] == ["32"] * 3
            assert words[words.index("--moe-a2a-backend") + 1] == "deepep"
            assert "--enable-two-batch-overlap" in words  # priced with two-batch overlap, so asked for
            # senior review 9, finding 7: the chunk is planned per rank (8,192) and written x 32 ranks
            assert words[words.index("--chunked-prefill-size") + 1] == str(8192 * 32)
            assert float(words[words.index("--mem-fraction-static") + 1]) > 0.8  # modelled, not SGLang's 0.4-0.6
        else:
            assert words[words.index("--data-parallel-size") + 1] == "32" and "--enable-expert-parallel" in words
    path = tmp_path / "launch.sh"
    path.write_text(proc.stdout)
    result = check_launch_file(path, cluster="dgx-h100", gpus=32)
    assert result["verdict"] == "pass", result["violations"]
    assert [(r["world"], r["nnodes"], r["node_ranks"]) for r in result["launches"]] == [(32, 4, [0, 1, 2, 3])]
    if engine == "sglang":  # the plan's dense-dp choice written and read back
        dense = "--moe-dense-tp-size" in commands[0]
        assert dense == ("--enable-dp-lm-head" in commands[0])
        assert result["launches"][0]["parallelism"].get("dense_dp", False) == dense


def test_ep72_with_redundant_experts_round_trips_through_check(tmp_path):
    """LMSYS's decode layout, EP72 over 9 H100 nodes: 256 experts do not divide by 72, so serve-plan gives SGLang
    32 redundant experts (288 = 4 x 72) and writes them (`--ep-num-redundant-experts 32`); `planner check` reads the
    script back (PASS), and the same command without the flag fails `experts_by_ep`, its fix naming the flag."""
    proc = cli_run.planner("serve-plan", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "72", "--input-len", "2000",
                           "--output-len", "1000", "--engine", "sglang", "--fix", "ep=72", "--emit", "sglang")
    assert proc.returncode == 0 and "check: PASS" in proc.stderr, proc.stderr
    commands = [shlex.split(l.strip()) for l in proc.stdout.splitlines() if l.strip().startswith("python -m sglang")]
    assert len(commands) == 9
    assert {w[w.index("--ep-num-redundant-experts") + 1] for w in commands} == {"32"}
    path = tmp_path / "launch.sh"
    path.write_text(proc.stdout.replace(" --ep-num-redundant-experts 32", ""))
    result = check_launch_file(path, cluster="dgx-h100", gpus=72)
    bad = [v for v in result["violations"] if v["rule"] == "experts_by_ep"]
    assert result["verdict"] == "fail" and bad and "--ep-num-redundant-experts 32" in bad[0]["fix"], result


def test_smallest_instances_know_multi_node_shapes(dsv3):
    """DeepSeek-V3 fp8 does not fit one 8 x H100 node; the smallest instances `check` proposes and the infeasibility
    message's GPU count now include the multi-node shapes: pinned tp=16 (SGLang's two-node launch) the smallest
    instance is 16 GPUs (it was none: single-node shapes stop at tp 8)."""
    from planner.serve import _minimum_gpus, smallest_instances

    hw = load_cluster("dgx-h100")
    req = ServeRequest(gpus=8, input_len=2000, output_len=1000, engine="sglang", weight_dtype="fp8-block",
                       fix={"tp": 16})
    assert _minimum_gpus(dsv3, hw, req) == 16
    found = smallest_instances(dsv3, hw, ServeRequest(gpus=8, input_len=2000, output_len=1000, engine="sglang",
                                                      weight_dtype="fp8-block"), keep=lambda i: i.tp > 8)
    assert found and {i.gpus for i, _ in found} == {16}


def test_wide_sglang_fraction_from_the_modelled_headroom_by_hand(dsv3):
    """senior review 9, finding 6: a wide SGLang instance's mem_fraction_static is built from what each GPU allocates
    beside the KV pool (`cost.serving.sglang_headroom`), at least SGLang's own 10 GiB floor. By hand, DeepSeek-V3
    EP32 prefill worker on H100 (85,520,315,056 B), 8,192 tokens per attention-DP rank, default dense TP:
    - forward activations: per token (2 x 7,168 + 8 x (7,168 + 7,168)) x 2 B = 258,048 B (the MoE workspace is the
      widest op: 3 x 18,432 / 32 = 1,728 and (128 + 2 x 128) x 192 = 73,728 are narrower) x 8,192 = 2,113,929,216,
      + logits 256 rows x 131,072 / 32 x 8 B = 8,388,608: 2,122,317,824 B;
    - the dense MLPs' gathered tokens: 32 x 8,192 x (2 x 7,168 + 3 x 18,432 / 32) x 2 B = 8,422,162,432 B;
    - CUDA graphs 1 GiB; DeepEP normal buffers NVLink 10 x 8 x 288 x 16,392 + RDMA 10 x 4 x 128 x 2 x 16,408 =
      545,689,600 B;
    total 12,163,911,680 B > 10 GiB: (85,520,315,056 - 12,163,911,680) / 85,520,315,056 = 0.8578 -> 0.857, set by
    the activations. With the dense MLPs data-parallel no gather: 3,741,749,248 B < 10 GiB, the floor binds:
    1 - 10 / 79.647 = 0.8744 -> 0.874 (LMSYS wrote 0.85 on its prefill nodes, 0.835 on decode)."""
    from planner.cost.ep_buffers import deepep_normal_buffer_bytes
    from planner.serve import _memory

    hw = load_cluster("dgx-h100")
    assert hw.gpu.memory_bytes == 85_520_315_056
    inst = sv.Instance(tp=32, ep=32, adp=32)
    assert sv.activation_bytes(dsv3, inst, 8192, engine="sglang") == 8192 * 258_048 + 8_388_608
    assert sv.gathered_dense_bytes(dsv3, inst, 8192) == 8_422_162_432
    assert deepep_normal_buffer_bytes(7168, 32) == 377_671_680 + 168_017_920
    room = sv.sglang_headroom(dsv3, inst, tokens_per_rank=8192, decode_batch_per_rank=512, role="prefill",
                              capacity=hw.gpu.memory_bytes)
    assert room.total == 12_163_911_680 and room.binding() == "activations"
    req = ServeRequest(gpus=96, input_len=2000, output_len=1000, engine="sglang", weight_dtype="fp8-block")
    assert _memory(dsv3, hw, req, inst, "prefill").budget_fraction == 0.857
    dense = sv.Instance(tp=32, ep=32, adp=32, dense_dp=True)
    assert sv.gathered_dense_bytes(dsv3, dense, 8192) == 0
    assert _memory(dsv3, hw, req, dense, "prefill").budget_fraction == 0.874
    assert _memory(dsv3, hw, ServeRequest(**{**req.__dict__, "mem_fraction": 0.835}), dense, "prefill").budget_fraction \
        == 0.835  # --mem-fraction as given


def test_lmsys_ep72_decode_worker_headroom_and_masked_layout_by_hand(dsv3):
    """LMSYS's EP72 decode worker (288 physical experts, dense MLPs dp): DeepEP's masked layout holds 288 / 72 = 4
    local experts x 128 x 72 = 9,216 rows x (7,168 + 224 + 8,192 + 2,048 + 14,336) B = 1,178,468,352 B; with the
    decode batch's activations, 1 GiB of graphs and SGLang's 2 GiB DeepEP low-latency reserve it stays under the
    10 GiB floor, so the fraction is 0.874 (LMSYS: 0.835)."""
    from planner.serve import _memory

    hw = load_cluster("dgx-h100")
    inst = sv.Instance(tp=72, ep=72, adp=72, redundant=32, dense_dp=True)
    assert sv.deepep_masked_bytes(dsv3, inst) == 1_178_468_352
    room = sv.sglang_headroom(dsv3, inst, tokens_per_rank=8192, decode_batch_per_rank=512, role="decode",
                              capacity=hw.gpu.memory_bytes)
    assert room.deepep_buffers == 2 * 2**30 and room.binding() == "floor"
    req = ServeRequest(gpus=96, input_len=2000, output_len=1000, engine="sglang", weight_dtype="fp8-block")
    assert _memory(dsv3, hw, req, inst, "decode").budget_fraction == 0.874


def test_dense_layer_gathers_over_the_network_by_hand(dsv3):
    """SGLang's default dense TP under attention DP gathers every rank's tokens before each of DeepSeek-V3's 3 dense
    MLPs and reduce-scatters after: decode (all-gather + reduce-scatter) at EP32, 4,096 tokens, 50 GB/s:
    3 x 2 x 31/32 x 4,096 x 7,168 x 2 B / 50e9 = 6.826 ms; prefill (all-reduce gather + reduce-scatter) 3 passes;
    0 with the dense MLPs data-parallel. Their weights: 3 x 3 x 7,168 x 18,432 fp8-block whole instead of / 32, and
    the LM head 129,280 rows whole (padded to 64) instead of 131,072 / 32."""
    inst, dense = sv.Instance(tp=32, ep=32, adp=32), sv.Instance(tp=32, ep=32, adp=32, dense_dp=True)
    got = sv.dense_gather_s(dsv3, inst, 4096, decode=True, link_bytes_per_s=50e9)
    assert got == pytest.approx(3 * 2 * 31 / 32 * 4096 * 7168 * 2 / 50e9)
    assert sv.dense_gather_s(dsv3, inst, 4096, decode=False, link_bytes_per_s=50e9) == pytest.approx(got * 1.5)
    assert sv.dense_gather_s(dsv3, dense, 4096, decode=True, link_bytes_per_s=50e9) == 0
    mlp = 3 * 3 * 7168 * 18432 * (1 + 4 / 16_384) * (1 - 1 / 32)
    head = 129_280 * 7168 * 2 - 131_072 / 32 * 7168 * 2
    assert (sv.weight_bytes_per_gpu(dsv3, dense, "fp8-block", "sglang") - sv.weight_bytes_per_gpu(dsv3, inst, "fp8-block", "sglang")
            == pytest.approx(mlp + head, abs=64))
    assert dense.label == "dp32 (attention) ep32 (dense MLPs dp)"


def test_memory_binding_names_memory_not_the_slo():
    """senior review 9, finding 6: a prefill chunk of 262,144 tokens per rank leaves no KV pool on any prefill worker;
    the error names memory and the activations at that chunk, not --ttft-ms (which was never given)."""
    proc = cli_run.planner("serve-plan", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "64", "--input-len", "2000",
                           "--output-len", "1000", "--engine", "sglang", "--disaggregated", "--fix", "ep=32",
                           "--max-num-batched-tokens", "262144")
    assert proc.returncode == 1, proc.stderr
    assert "memory binds" in proc.stderr and "--ttft-ms" not in proc.stderr, proc.stderr
    assert "set by activations" in proc.stderr and "262,144 tokens per attention-DP rank" in proc.stderr


def test_lmsys_decode_launch_passes_check(tmp_path):
    """senior review 9, finding 5: LMSYS's EP72 decode worker (sgl-project/sglang issue #6017 as ai-dynamo/dynamo@4a2dac13
    examples/sglang/utils/deepseek-r1/run_sgl_servers.sh copies it; the review's file was not kept), in 0.5.23's spellings:
    --attn-dp-size for --dp-size --enable-dp-attention, --moe-a2a-backend deepep for --enable-deepep-moe,
    --cuda-graph-bs-decode for --cuda-graph-bs, which 0.5.23's parser finds ambiguous, passes `planner check`: the 32
    redundant experts make 288 = 4 x 72, and --moe-dense-tp-size 1 --enable-dp-lm-head read as dense MLPs dp; its
    file-system and EPLB flags (--init-expert-location, --deepep-config) left out."""
    path = tmp_path / "sgl_lmsys_decode2.sh"
    path.write_text(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --disaggregation-mode decode "
        "--dist-init-addr 10.0.0.1:5757 --nnodes 9 --node-rank 0 --tp-size 72 --attn-dp-size 72 --ep-size 72 "
        "--moe-a2a-backend deepep --deepep-mode low_latency --page-size 1 --host 0.0.0.0 --trust-remote-code "
        "--moe-dense-tp-size 1 --enable-dp-lm-head --disable-radix-cache --watchdog-timeout 1000000 "
        "--enable-two-batch-overlap --mem-fraction-static 0.835 --max-running-requests 18432 --context-length 4500 "
        "--ep-num-redundant-experts 32 --cuda-graph-bs-decode 256\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=72, model="deepseek-v3")
    assert result["verdict"] == "pass", result["violations"]
    par = result["launches"][0]["parallelism"]
    assert (par["tp"], par["ep"], par["dp"], par["redundant_experts"], par["dense_dp"]) == (72, 72, 72, 32, True)


def test_two_batch_overlap_hides_the_decode_exchange_behind_the_step(dsv3):
    """SGLang with DeepEP runs two-batch overlap (`serve.two_batch_overlap`): the decode step's exchange overlaps
    the other half-batch's work, so TPOT = max(step without it, exchange). By hand, EP32 at 128 tokens per GPU:
    exchange 58 x 22,249,472 B / 50 GB/s = 25.81 ms (test above); behind a 64 ms step it is hidden (64 ms, not
    89.81), ahead of a 20 ms step it binds (25.81 ms). vLLM and instances without DeepEP (adp 1 or ep 1) run without."""
    from planner.serve import two_batch_overlap

    exchange = 58 * 22_249_472 / 50e9
    assert sv.two_batch_overlap_tpot_s(0.064, exchange) == 0.064
    assert sv.two_batch_overlap_tpot_s(0.020, exchange) == pytest.approx(0.025809, abs=1e-6)
    assert two_batch_overlap("sglang", sv.Instance(tp=32, ep=32, adp=32))
    assert not two_batch_overlap("vllm", sv.Instance(tp=32, ep=32, adp=32))
    assert not two_batch_overlap("sglang", sv.Instance(tp=8, ep=8))
    assert not two_batch_overlap("sglang", sv.Instance(tp=8, adp=8))


def test_negative_sglang_default_fraction_is_explained():
    """senior review 9, finding 6: SGLang's own default keeps 1.5 MiB per token of the chunk, so a 131,072-token chunk
    on one H200 node gives a default below 0 (by hand: 512 + 131,072 x 1.5 + 1,024 + graphs > 143,771 MiB); the
    memory error says so and what relaxes it, instead of a bare negative fraction."""
    proc = cli_run.planner("serve-plan", "-m", "deepseek-v3", "-c", "hgx-h200", "--gpus", "8", "--input-len", "2000",
                           "--output-len", "1000", "--engine", "sglang", "--max-num-batched-tokens", "131072")
    assert proc.returncode == 1, proc.stderr
    assert "memory binds" in proc.stderr and "SGLang's own mem_fraction_static default is -" in proc.stderr
    assert "1.5 MiB per token of the 131,072-token chunk" in proc.stderr and "--mem-fraction" in proc.stderr


def test_check_warns_when_the_fraction_leaves_no_room_for_gathered_dense_tokens(tmp_path):
    """LMSYS's EP32 prefill worker (sgl-project/sglang issue #6017, ai-dynamo/dynamo@4a2dac13 examples/sglang/utils/
    deepseek-r1/run_sgl_servers.sh: --mem-fraction-static 0.85, --chunked-prefill-size
    524,288 = 16,384 per rank, dense MLPs dp; here without its --max-total-tokens cap) passes `check` quietly; without
    --moe-dense-tp-size 1 --enable-dp-lm-head the dense MLPs gather 32 x 16,384 tokens: 524,288 x (2 x 7,168 +
    3 x 18,432 / 32) x 2 B = 16,844,324,864 B = 15.69 GiB on top of the forward, more than the 0.15 x 79.65 = 11.95
    GiB the fraction leaves: a `sglang_headroom` warning whose fix names the dense flags (LMSYS's reason for them)."""
    words = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --disaggregation-mode prefill "
             "--dist-init-addr 10.0.0.1:5757 --nnodes 4 --node-rank 0 --tp-size 32 --attn-dp-size 32 --ep-size 32 "
             "--moe-a2a-backend deepep --deepep-mode normal --host 0.0.0.0 --moe-dense-tp-size 1 --enable-dp-lm-head "
             "--enable-two-batch-overlap --mem-fraction-static 0.85 --chunked-prefill-size 524288 "
             "--max-running-requests 8192 --context-length 8192 --ep-num-redundant-experts 32\n")
    dsv3 = load_model("deepseek-v3")
    assert sv.gathered_dense_bytes(dsv3, sv.Instance(tp=32, ep=32, adp=32), 16384) == 16_844_324_864
    rules = {}
    for name, text in (("dense_dp", words), ("default", words.replace(" --moe-dense-tp-size 1 --enable-dp-lm-head", ""))):
        path = tmp_path / f"{name}.sh"
        path.write_text(text)
        result = check_launch_file(path, cluster="dgx-h100", gpus=32, model="deepseek-v3")
        assert result["verdict"] == "pass", result["violations"]
        rules[name] = [v for v in result["violations"] if v["rule"] == "sglang_headroom"]
    assert not rules["dense_dp"]
    warning, = rules["default"]
    assert "11.95 GiB" in warning["message"] and "15.69 of them the dense MLPs' gathered tokens" in warning["message"]
    assert "--moe-dense-tp-size 1 --enable-dp-lm-head" in warning["fix"]


def test_wide_plan_file_with_dense_dp_passes_check(tmp_path):
    """A serving plan file (`serve-plan -o`) of a wide SGLang instance carries `dense_dp` and the per-rank chunk's
    flag value (`max_num_batched_tokens` 8,192 x 32) in its rows; `planner check` reads it back (it refused the
    unknown key) and recomputes the dense-dp weights."""
    import yaml

    path = tmp_path / "plan.yaml"
    proc = cli_run.planner("serve-plan", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "32", "--input-len", "2000",
                           "--output-len", "1000", "--engine", "sglang", "--fix", "ep=32", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(path.read_text())
    row, = data["deployment"]["mix"]
    assert row["parallelism"]["dense_dp"] is True and row["max_num_batched_tokens"] == 8192 * 32
    check = cli_run.planner("check", str(path))
    assert check.returncode == 0 and "(dense MLPs dp)" in check.stdout, check.stdout + check.stderr
