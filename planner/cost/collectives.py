"""Alpha-beta time of one collective over a group of GPUs placed in the cluster hierarchy.

A group of `n` GPUs of which `k` share each scale-up domain (NVLink/NVSwitch) spans `n / k` domains.
Inside a domain it moves data at `scaleup_gb_per_s`; across domains each GPU has its own share of the
node's NICs, `network_gb_per_s_per_gpu`. `M` is always the buffer size per device:

| kind | M is | bytes each GPU sends (flat ring) |
|---|---|---|
| all_reduce | the buffer reduced in place | 2 (n-1)/n M |
| all_gather | the gathered (output) buffer | (n-1)/n M |
| reduce_scatter | the input buffer (full size) | (n-1)/n M |
| all_to_all | the buffer a GPU sends out (incl. its own slice) | (n-1)/n M |
| p2p | the message | M |

Source: Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication Operations in
MPICH" (IJHPCA 19(1)) §3-4 (ring / bucket algorithms: (p-1) alpha + (p-1)/p n beta for all-gather and
reduce-scatter, all-reduce = reduce-scatter + all-gather); NVIDIA nccl-tests doc/PERFORMANCE.md (bus
bandwidth convention: busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather /
reduce-scatter / all-to-all). Groups spanning domains run hierarchically: reduce-scatter inside the
domain, all-reduce of the 1/k shard across domains (each of the k GPUs on its own NIC), all-gather
inside (Narayanan et al. 2021 SC21 §4.1 "scatter/gather" and §3.2 on keeping tensor-parallel groups
inside a node; NCCL's multi-ring / NVLS-tree algorithms reach the same per-node network volume).
"""

from __future__ import annotations

from planner.errors import SpecError
from planner.placement.mesh import DEFAULT_RANK_ORDER, axis_domain_sharing  # noqa: F401 (owned by the mesh)
from planner.specs.cluster import ClusterSpec

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")

SCALEUP_BUS_EFFICIENCY = 0.80
"""[Empirical] achieved bus bandwidth / per-direction link peak inside an NVLink/NVSwitch domain.
Basis: nccl-tests all_reduce_perf busbw at >= 256 MiB on one node: ~230-240 GB/s of 300 GB/s on DGX
A100 and ~360-370 GB/s of 450 GB/s on DGX H100 (NVIDIA DGX user guides and public nccl-tests logs);
not fitted on the validation runs."""

NETWORK_BUS_EFFICIENCY = 0.85
"""[Empirical] achieved bus bandwidth / NIC line rate across nodes. Basis: multi-node nccl-tests
all_reduce busbw ~ 180-190 GB/s per DGX A100 node on 8x200 Gb/s HDR (200 GB/s line rate) and ~ 330-
350 GB/s per DGX H100 node on 8x400 Gb/s NDR without SHARP; not fitted on the validation runs."""


def _ring_time(kind: str, n: int, size_bytes: float, bw_bytes_per_s: float, latency_s: float) -> float:
    """Flat ring/bucket time of `kind` over n GPUs on one link class (Thakur 2005 §3-4)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    if kind == "all_reduce":
        return 2 * (n - 1) * latency_s + 2 * (n - 1) / n * size_bytes / bw_bytes_per_s
    return (n - 1) * latency_s + (n - 1) / n * size_bytes / bw_bytes_per_s


def collective_time(kind: str, *, group_size: int, bytes_per_device: float, cluster: ClusterSpec,
                    gpus_per_domain: int | None = None) -> float:
    """Seconds one collective takes (alpha-beta, hierarchical when the group spans domains).

    Args:
        kind: one of KINDS.
        group_size: n, GPUs in the group (for p2p: 2).
        bytes_per_device: M, see the module table.
        cluster: bandwidths and latencies.
        gpus_per_domain: k, GPUs of the group inside one scale-up domain (from
            `axis_domain_sharing`); None = min(n, scaleup_domain_gpus), i.e. packed. For p2p: 2 if
            both ends share a domain, 1 if not.

    Returns:
        Seconds. all_reduce with 1 < k < n = reduce-scatter(k) + all-reduce(n/k, M/k) across +
        all-gather(k); all-gather / reduce-scatter likewise in two levels; all_to_all sends
        (k-1)/n M over the domain and (n-k)/n M over the network at the same time (max of the two).

    Raises:
        SpecError: unknown kind, group_size < 1, negative bytes.
    """
    if kind not in KINDS:
        raise SpecError(f"collective {kind!r} not allowed; allowed: {', '.join(KINDS)}", key="kind")
    if group_size < 1 or bytes_per_device < 0:
        raise SpecError(f"group_size {group_size!r} must be >= 1 and bytes {bytes_per_device!r} >= 0",
                        key="group_size")
    n = group_size
    m = float(bytes_per_device)
    if n <= 1 or m <= 0:
        return 0.0
    k = min(n, cluster.scaleup_domain_gpus) if gpus_per_domain is None else max(1, min(n, gpus_per_domain))
    intra_bw = cluster.scaleup_gb_per_s * 1e9 * SCALEUP_BUS_EFFICIENCY
    net_bw = cluster.network_gb_per_s_per_gpu * 1e9 * NETWORK_BUS_EFFICIENCY
    a_in, a_net = cluster.scaleup_latency_s, cluster.network_latency_s
    if kind == "p2p":
        return (a_in + m / intra_bw) if k >= 2 else (a_net + m / net_bw)
    if k == n:
        return _ring_time(kind, n, m, intra_bw, a_in)
    nodes = n // k if n % k == 0 else -(-n // k)
    if kind == "all_to_all":
        inside = (k - 1) / n * m / intra_bw + (k - 1) * a_in
        across = (n - k) / n * m / net_bw + (nodes - 1) * a_net
        return max(inside, across)
    across = _ring_time(kind, nodes, m / k, net_bw, a_net)
    if kind == "all_reduce":
        return 2 * _ring_time("reduce_scatter", k, m, intra_bw, a_in) + across
    return _ring_time(kind, k, m, intra_bw, a_in) + across
