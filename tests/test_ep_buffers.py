"""The flex MoE dispatcher's communication buffers in device memory (`cost.ep_buffers`): DeepEP's
size hints (deepseek-ai/DeepEP@92fe2de csrc/config.hpp, deep_ep/buffer.py) and HybridEP's buffer
sizes (DeepEP branch hybrid-ep @94a9f8f csrc/hybrid_ep/buffer/), hand arithmetic written out."""

from __future__ import annotations

from planner.cost.ep_buffers import FLEX_BUFFER_TERM, flex_buffer_bytes
from planner.cost.memory import stage_memory
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

DSV3 = load_model("deepseek-v3")      # hidden 7168, 256 experts
QWEN = load_model("qwen3-30b-a3b")    # hidden 2048, 128 experts


def test_deepep_buffer_of_deepseek_v3_at_ep64_and_ep16():
    """Megatron's DeepEP buffer (20 SMs: 10 channels), bf16 hidden 2 x 7168 = 14,336 B, per-token
    meta 8 + 1,024 + 512 + 512 = 2,056 B. EP 64: NVLink 10 x 8 peers x 288 tokens x 16,392 =
    377,671,680; RDMA 10 x 8 ranks x 128 x 2 x 16,408 = 336,035,840. EP 16: the same NVLink part,
    RDMA over 2 ranks: 84,008,960. A fixed size (micro-batch and sequence do not enter)."""
    h100 = dict(gpus_per_node=8, scaleup_domain_gpus=8, ep_gpus_per_domain=8)
    at = Layout(tp=2, pp=8, dp=64, ep=64, sequence_parallel=True, moe_dispatcher="flex")
    assert flex_buffer_bytes(DSV3, at, **h100) == 377_671_680 + 336_035_840
    assert flex_buffer_bytes(DSV3, at.replace(ep=16), **h100) == 377_671_680 + 84_008_960
    assert flex_buffer_bytes(DSV3, at.replace(micro_batch_size=4, seq_len=8192), **h100) == \
        377_671_680 + 336_035_840
    # one node: NVLink only, 256 tokens per channel and peer
    assert flex_buffer_bytes(DSV3, at.replace(ep=8), **h100) == 10 * 8 * 256 * 16_392
    # not flex, not EP, not MoE: none
    assert flex_buffer_bytes(DSV3, at.replace(moe_dispatcher="alltoall"), **h100) == 0
    assert flex_buffer_bytes(DSV3, at.replace(ep=1), **h100) == 0
    assert flex_buffer_bytes(load_model("llama-3.1-8b"), at, **h100) == 0


def test_hybridep_buffer_grows_with_the_ep_groups_tokens():
    """HybridEP (multi-node NVLink: a 72-GPU domain): Qwen3-30B-A3B at EP 16 inside one domain,
    4,096 tokens per rank: the expert-side buffer holds 4,096 x 16 tokens of 2 x 2,048 B + fp32
    probabilities of the domain's 8 x 16 experts (512 B) + fp32 scales per 128 (64 B) = 4,672 B:
    306,184,192 B; no RDMA. Split over two domains of 8 (EP 16 over 2 NVL8 domains as HybridEP sees
    them): probabilities of 8 x 8 experts (256 B) -> 4,416 B per token, 289,406,976, plus RDMA
    4,096 x 4,096 B x (1 + 3) = 67,108,864."""
    gb200 = dict(gpus_per_node=4, scaleup_domain_gpus=72)
    layout = Layout(dp=16, ep=16, seq_len=4096, moe_dispatcher="flex")
    assert flex_buffer_bytes(QWEN, layout, ep_gpus_per_domain=16, **gb200) == 306_184_192
    assert flex_buffer_bytes(QWEN, layout, ep_gpus_per_domain=8, **gb200) == 289_406_976 + 67_108_864
    assert flex_buffer_bytes(QWEN, layout.replace(micro_batch_size=2), ep_gpus_per_domain=16,
                             **gb200) == 2 * 306_184_192


def test_stage_memory_holds_the_buffer_in_every_phase():
    """E10's recipe (DeepSeek-V3, 1,024 H100, tp2 pp8 ep64, flex): the buffer is a transient term
    present in every phase, so the stage total grows by exactly its bytes."""
    cluster = load_cluster("dgx-h100", gpus=1024)
    flex = Layout(tp=2, pp=8, dp=64, ep=64, sequence_parallel=True, seq_len=4096, global_batch_size=8192,
                  zero_stage=1, precision="fp8", moe_dispatcher="flex", recompute="selective")
    with_buffer = stage_memory(DSV3, cluster, flex, 3)
    without = stage_memory(DSV3, cluster, flex.replace(moe_dispatcher="alltoall"), 3)
    assert with_buffer.transient_terms[FLEX_BUFFER_TERM] == 377_671_680 + 336_035_840
    assert with_buffer.total - without.total == 377_671_680 + 336_035_840
