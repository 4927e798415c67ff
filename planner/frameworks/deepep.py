"""DeepEP (deepseek-ai/DeepEP): the EP sizes its kernels run at, shared by serve-plan (SGLang / vLLM wide EP),
`check` of engine launches and Megatron-LM's flex dispatcher with the DeepEP backend.

DeepEP's normal-mode kernels (SGLang's prefill and mode-auto batches with prefill, vLLM
deepep_high_throughput, Megatron-LM flex training) are compiled for fixed rank counts: within one NVLink
domain (num_ranks <= NVL_PEERS) for `INTRANODE_RANKS`, across nodes for num_ranks / NVL_PEERS (the RDMA
ranks, i.e. nodes of 8 GPUs) in the version's `RDMA_RANKS` entry; any other count stops the first dispatch
with `EP_HOST_ASSERT(false and "Unsupported RDMA ranks")`. The Buffer constructor also asserts num_ranks < 8
or num_ranks % 8 == 0, and num_ranks <= 8 x 20 outside low-latency mode. The low-latency kernels (decode)
have no node-count switch: only those two Buffer asserts (the second lifted in low-latency mode) and experts
divisible by the ranks (`internode_ll.cu`).

Source: deepseek-ai/DeepEP csrc/kernels/launch.cuh SWITCH_RANKS / SWITCH_RDMA_RANKS at each commit in
`RDMA_RANKS` (csrc/kernels/legacy/launch.cuh from b306af0, 2026-04-30); csrc/legacy/buffer.hpp l. 113-116
and csrc/kernels/legacy/compiled.cuh (NUM_MAX_NVL_PEERS 8, NUM_MAX_RDMA_PEERS 20) @dd758ca.
"""

from __future__ import annotations

NVL_PEERS = 8
"""Ranks DeepEP counts per NVLink domain (LEGACY_NUM_MAX_NVL_PEERS, csrc/kernels/legacy/compiled.cuh @dd758ca)."""

INTRANODE_RANKS = (2, 4, 8)
"""Rank counts of the intranode normal kernels (SWITCH_RANKS, csrc/kernels/legacy/launch.cuh @dd758ca; the same
since ebfe47e)."""

RDMA_RANKS = {
    "ebfe47e": (2, 3, 4, 8, 16, 18, 20),          # 2025-02-24 initial commit .. 7b0c25f (2025-06-20)
    "bc118b2": (2, 4, 8, 16),                     # 2025-06-24 RDMA sender window .. b92d0d4
    "d9767ce": (2, 4, 8, 16, 18, 20),             # 2025-08-11 "Add EP144/160"; v1.2.1 = 9af0e0d (2025-09-15)
    "c939644": (2, 4, 6, 8, 12, 16, 18, 20),      # 2025-09-22 "Support EP48/96 for internode kernels"
    "e02e4d2": (2, 3, 4, 6, 8, 12, 16, 18, 20),   # 2025-09-26 "Support EP24"; same at 73b6ea4 and dd758ca
}
"""Supported internode node counts (num_ranks / NVL_PEERS) per DeepEP commit, each valid until the next one.
Source: deepseek-ai/DeepEP `git log -- csrc/kernels/launch.cuh` and SWITCH_RDMA_RANKS at each listed commit
(csrc/kernels/legacy/launch.cuh at b306af0 and HEAD dd758ca, unchanged); branch hybrid-ep @94a9f8f has
(2, 4, 8, 16, 18, 20)."""

ENGINE_VERSION = {"sglang": "d9767ce", "vllm": "e02e4d2", "megatron": "d9767ce"}
ENGINE_PIN = {"sglang": "9af0e0d", "vllm": "73b6ea4", "megatron": "de0dd11"}
"""The `RDMA_RANKS` entry of the DeepEP commit each framework's published image builds (ENGINE_PIN): SGLang docker/Dockerfile DEEPEP_COMMIT=9af0e0d (v1.2.1,
list of d9767ce; the 0.5.23 wheel does not pin one); vLLM docker/Dockerfile DEEPEP_COMMIT_HASH=73b6ea4 (list of
e02e4d2); Megatron-LM docker/Dockerfile.ci.dev DEEPEP_COMMIT=de0dd11 (@d98e8a6; a hybrid-ep branch commit, that
branch's list @94a9f8f = d9767ce's)."""


def normal_mode_problem(ep: int, framework: str) -> str | None:
    """Why DeepEP's normal-mode kernels cannot run over an EP group of `ep` ranks under `framework`'s pinned DeepEP
    (`ENGINE_VERSION`), or None where they can (ep 1: no exchange). Hand check: 40 ranks = 5 nodes, not in
    (2, 4, 8, 16, 18, 20): a problem; 32 ranks = 4 nodes: none."""
    if ep <= 1:
        return None
    if ep <= NVL_PEERS:
        return None if ep in INTRANODE_RANKS else (
            f"DeepEP's intranode kernels run at {', '.join(map(str, INTRANODE_RANKS))} ranks, not {ep}")
    nodes, rest = divmod(ep, NVL_PEERS)
    allowed = RDMA_RANKS[ENGINE_VERSION[framework]]
    if rest or nodes not in allowed:
        return (f"DeepEP's normal-mode (internode) kernels run over {', '.join(map(str, allowed))} nodes of "
                f"{NVL_PEERS} ranks (SWITCH_RDMA_RANKS of DeepEP {ENGINE_PIN[framework]}, which {framework}'s image "
                f"builds); ep {ep} is "
                f"{ep / NVL_PEERS:g} nodes: 'Unsupported RDMA ranks' on the first normal-mode dispatch")
    return None


def supported_eps(framework: str, largest: int) -> list[int]:
    """EP sizes DeepEP's normal kernels run at under `framework`, up to `largest` ranks."""
    allowed = (*INTRANODE_RANKS, *(NVL_PEERS * n for n in RDMA_RANKS[ENGINE_VERSION[framework]]))
    return [ep for ep in allowed if ep <= largest]


def nearest_eps(ep: int, framework: str) -> tuple[int | None, int | None]:
    """The nearest supported EP sizes below and above `ep` (None where there is none). Hand check: sglang ep 40:
    (32, 64)."""
    eps = supported_eps(framework, 10 ** 9)
    return max((e for e in eps if e < ep), default=None), min((e for e in eps if e > ep), default=None)


def fix_words(ep: int, framework: str) -> str:
    """The fix a message gives: the nearest supported EP sizes, or what runs at `ep` (a decode-only serving worker,
    whose low-latency kernels have no node-count limit; Megatron-LM's alltoall dispatcher)."""
    below, above = nearest_eps(ep, framework)
    sizes = " or ".join(str(e) for e in (below, above) if e)
    other = ("the alltoall token dispatcher (any EP size)" if framework == "megatron" else
             f"at ep {ep} only a decode-only worker (DeepEP's low-latency kernels)")
    return f"use ep {sizes} (DeepEP's supported node counts), or {other}"
