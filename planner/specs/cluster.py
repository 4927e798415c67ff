"""Cluster specification: the GPU, the node, the scale-up domain, the network, the host.

A cluster comes from a catalog name (`hardware/<name>.yaml`) or a YAML path. Units are in the
key names: capacity in binary GiB (2**30 bytes), bandwidth in decimal GB/s (1e9 bytes/s) per GPU
per direction unless the name says otherwise, NIC speed in Gbit/s (1e9 bits/s), FLOP/s in decimal
TFLOP/s (1e12), latency in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
"""Keys allowed in `GPUSpec.peak_tflops`."""


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    """One accelerator."""

    name: str
    """Marketing name with the memory variant, e.g. `H100-SXM5-80GB`."""
    memory_gib: float
    """HBM capacity the device reports, GiB (2**30 bytes). Source: per catalog file."""
    hbm_gb_per_s: float
    """Peak HBM bandwidth, GB/s (1e9 bytes/s). Source: per catalog file."""
    peak_tflops: dict[str, float]
    """DENSE (no 2:4 sparsity) peak, TFLOP/s (1e12), by dtype among DTYPES; only the dtypes the
    tensor cores (or, for fp32, the vector units) support. Source: per catalog file."""
    source: str
    """Where the GPU numbers come from (summary; per-key sources are in `ClusterSpec.sources`)."""

    @property
    def memory_bytes(self) -> int:
        """HBM capacity in bytes: memory_gib * 2**30."""
        return int(self.memory_gib * 2**30)


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """A homogeneous cluster of `num_gpus` GPUs in nodes of `gpus_per_node`."""

    name: str
    """Catalog name or file stem."""
    gpu: GPUSpec
    """The accelerator, one type for the whole cluster."""
    num_gpus: int
    """Cluster size, GPUs (set by `--gpus`; default one node or one scale-up domain)."""
    gpus_per_node: int
    """GPUs sharing one host (one OS image, one set of NICs)."""
    scaleup_domain_gpus: int
    """GPUs reachable over the scale-up fabric (NVLink/NVSwitch, xGMI, PCIe): 8 for DGX, 72 for NVL72."""
    scaleup_gb_per_s: float
    """Scale-up bandwidth per GPU per direction inside the domain, GB/s."""
    scaleup_latency_s: float
    """Latency of one message over the scale-up fabric (the alpha of an alpha-beta model), s."""
    nics_per_node: int
    """Scale-out (compute) NICs per node; storage/management NICs are not counted."""
    nic_gbit_per_s: float
    """Line rate of one scale-out NIC, Gbit/s per direction."""
    network_latency_s: float
    """Latency of one message across the scale-out network (alpha), s."""
    host_memory_gib: float
    """CPU DRAM per node, GiB (what CPU offload can use at most)."""
    host_link_gb_per_s: float
    """Host<->device bandwidth per GPU per direction (PCIe or NVLink-C2C), GB/s."""
    allow_partial_node: bool = False
    """Whether fewer GPUs than `gpus_per_node` may be used (workstations)."""
    source: str = ""
    """Where the cluster numbers come from (summary)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Source per numeric key (dotted path, or a group prefix such as `gpu.peak_tflops`)."""
    description: str = ""
    """One line on what the machine is."""

    @property
    def network_gb_per_s_per_gpu(self) -> float:
        """Scale-out bandwidth per GPU per direction, GB/s: nics_per_node * nic_gbit_per_s / 8 / gpus_per_node."""
        return self.nics_per_node * self.nic_gbit_per_s / 8 / self.gpus_per_node

    @property
    def num_nodes(self) -> int:
        """Nodes used: ceil(num_gpus / gpus_per_node)."""
        return math.ceil(self.num_gpus / self.gpus_per_node)
