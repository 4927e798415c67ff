"""Device memory the flex MoE token dispatcher (DeepEP / HybridEP) holds for its communication
buffers: allocated at a rank's first dispatch and kept for the run, so present in every phase of a
step (`cost.memory.stage_memory` adds it as the transient term `FLEX_BUFFER_TERM`).

Which library: `frameworks.megatron.flex_backend` (DeepEP on clusters of one NVLink domain per
node, HybridEP on multi-node NVLink), as `plan --emit megatron` writes it.
"""

from __future__ import annotations

from planner.frameworks.megatron import flex_backend
from planner.placement.layout import Layout
from planner.specs.model import ModelSpec

FLEX_BUFFER_TERM = "ep_dispatch_buffers"
"""`MemoryBreakdown.transient_terms` key of the flex dispatcher's buffers."""

DEEPEP_NUM_SMS = 20
"""SMs Megatron-LM gives DeepEP when `moe_flex_dispatcher_num_sms` is unset (NVIDIA/Megatron-LM@
d98e8a6 megatron/core/transformer/moe/token_dispatcher.py l. 1287-1291, "DeepEP's historical mcore
default"); DeepEP runs num_sms / 2 channels."""

DEEPEP_RECV_TOKENS = ((8, 256), (64, 288), (96, 480), (128, 560), (160, 720))
"""(largest EP size, NVLink receive-buffer tokens per channel and peer) of DeepEP's recommended
dispatch and combine configs (deepseek-ai/DeepEP@92fe2de deep_ep/buffer.py `get_dispatch_config`
l. 245-258, `get_combine_config` l. 276-287: the third Config field, the same in both); the RDMA
receive buffer is 128 tokens at every size. EP sizes outside the table take the next listed one."""

DEEPEP_RDMA_RECV_TOKENS = 128

DEEPEP_TOKEN_META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4
"""Bytes a DeepEP buffer slot holds per token beside the hidden state: source meta (two int32),
kNumMaxTopK = 128 int64 top-k indices (TOPK_IDX_BITS 64 by default, csrc/kernels/configs.cuh
l. 64-70), 128 fp32 weights and kNumMaxScales = 128 fp32 scales (csrc/config.hpp
`get_nvl_buffer_size_hint`, l. 52-74; the RDMA hint adds 16 B of int4 per slot, l. 76-100)."""


def flex_buffer_bytes(model: ModelSpec, layout: Layout, *, gpus_per_node: int, scaleup_domain_gpus: int,
                      ep_gpus_per_domain: int) -> int:
    """Bytes of the flex dispatcher's buffers on one GPU; 0 without flex, EP or MoE layers.

    DeepEP (Megatron `fused_a2a.get_buffer`, Megatron-LM@d98e8a6 megatron/core/transformer/moe/
    fused_a2a.py l. 36-68: the larger of the dispatch and combine configs' hints for the EP group,
    bf16 hidden bytes 2 h): with C = DEEPEP_NUM_SMS / 2 channels, P = min(ep, 8) NVLink peers, R =
    ep / 8 RDMA ranks, T the config's receive tokens: NVLink C P T (2 h + meta); RDMA (EP over
    8) C R 128 x 2 (2 h + meta + 16). A fixed size: it does not grow with the tokens.
    HybridEP (deepseek-ai/DeepEP branch hybrid-ep @94a9f8f): the expert-side NVLink buffer is sized
    for every token of the EP group landing on one GPU, "the worst case, all tokens are routed to
    the same expert" (csrc/hybrid_ep/buffer/intranode.cu l. 126-129: tokens per rank x ranks per
    NVLink domain x domains), bf16, dispatch and combine sharing it (`use_shared_buffer`, l. 173)
    plus fp32 probabilities of the domain's experts and fp32 scales per 128 elements; across
    domains the RDMA buffers hold the local tokens once and three times per other domain
    (buffer/internode_doca.cu l. 383-430, 557-590). Tokens per rank: the micro-batch's b s / cp,
    over tp (Megatron runs MoE with tp under sequence parallelism, moe_layer.py l. 636)."""
    if not (model.is_moe and layout.ep > 1 and layout.moe_dispatcher == "flex"):
        return 0
    h, ep = model.hidden_size, layout.ep
    if flex_backend(gpus_per_node, scaleup_domain_gpus) == "deepep":
        return deepep_normal_buffer_bytes(h, ep)
    tokens = layout.micro_batch_size * layout.seq_len // (layout.cp * layout.tp)
    k = min(ep, ep_gpus_per_domain)
    domains = (ep + k - 1) // k
    per_token = 2 * h + 4 * (model.num_experts // ep) * k + 4 * (h // 128)
    rdma = tokens * 2 * h * (1 + 3 * (domains - 1)) if domains > 1 else 0
    return tokens * ep * per_token + rdma


def deepep_normal_buffer_bytes(hidden_size: int, ep: int) -> int:
    """Bytes of DeepEP's normal-mode (intranode NVLink + internode RDMA) buffers on one GPU of an EP group of
    `ep` ranks, bf16 hidden states, DEEPEP_NUM_SMS SMs: NVLink C P T (2 h + meta), RDMA (ep over 8)
    C R 128 x 2 (2 h + meta + 16) (`flex_buffer_bytes` for the symbols and sources). SGLang sizes its buffer
    the same way: the larger of the recommended dispatch and combine configs' hints for the group
    (SGLang 0.5.23 wheel `srt/layers/moe/token_dispatcher/deepep.py` DeepEPBuffer.get_deepep_buffer,
    Buffer.get_dispatch_config / get_combine_config; its DeepEPConfig num_sms is DeepEP's Buffer.num_sms, 20).
    A fixed size: it does not grow with the tokens. Hand check (EP32, hidden 7,168): NVLink 10 x 8 x 288 x
    16,392 = 377,671,680 B, RDMA 10 x 4 x 128 x 2 x 16,408 = 168,017,920 B."""
    channels, peers, rdma_ranks = DEEPEP_NUM_SMS // 2, min(ep, 8), max(ep // 8, 1)
    tokens = next((t for size, t in DEEPEP_RECV_TOKENS if ep <= size), DEEPEP_RECV_TOKENS[-1][1])
    nvl = channels * peers * tokens * (2 * hidden_size + DEEPEP_TOKEN_META_BYTES)
    rdma = (channels * rdma_ranks * DEEPEP_RDMA_RECV_TOKENS * 2 * (2 * hidden_size + DEEPEP_TOKEN_META_BYTES + 16)
            if ep > 8 else 0)
    return nvl + rdma
