"""Cluster specification: the GPU, the node, the scale-up domain, the network, the host.

A cluster comes from a catalog name (`hardware/<name>.yaml`) or a YAML path. Units are in the
key names: capacity in binary GiB (2**30 bytes), bandwidth in decimal GB/s (1e9 bytes/s) per GPU
per direction unless the name says otherwise, NIC speed in Gbit/s (1e9 bits/s), FLOP/s in decimal
TFLOP/s (1e12), latency in seconds.

Conventions (Source: the catalog files' `sources:` mappings):
- `memory_gib` is the capacity the driver reports (nvidia-smi `memory.total` MiB / 1024, rocm-smi
  bytes / 2**30), e.g. H100 SXM 81559 MiB = 79.647 GiB, not the marketed decimal "80 GB". The CUDA
  context and allocator reserve are the memory model's business, not the catalog's.
- Peaks are DENSE (no 2:4 sparsity) tensor-core TFLOP/s with FP32 accumulate; fp32 is the non-tensor
  (vector) peak. A dtype the GPU lacks (bf16 on V100) is absent, and `peak_flops` refuses it.
- Bandwidths are per GPU per direction; host DRAM capacities are binary (2 TB DIMMs = 2048 GiB).
- Latencies are alpha terms per ring step ([Empirical]: NCCL's `hwLat` tuning constants).

YAML layout (flat keys = ClusterSpec fields; `gpu:` = GPUSpec fields):

    name: dgx-h100
    gpu: {name: H100-SXM5-80GB, memory_gib: 79.647, hbm_gb_per_s: 3350,
          peak_tflops: {bf16: 989.4, fp8: 1978.9}, source: "..."}
    gpus_per_node: 8
    scaleup_domain_gpus: 8
    scaleup_gb_per_s: 450
    ...                                  # every ClusterSpec field except num_gpus is required
    num_gpus: 1024                       # optional default size; --gpus overrides
    allow_partial_node: true             # optional (default): jobs on part of one node
    sources: {gpu.memory_gib: "...", "nics_per_node, nic_gbit_per_s": "..."}

`sources` keys are dotted key paths, comma-separated lists of them, or a group prefix such as
`gpu.peak_tflops`; the catalog tests require every number of a shipped file to be covered.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path


from planner.errors import SpecError, number, shown
from planner.specs import files

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
    max_achievable_tflops: dict[str, float] = field(default_factory=dict)
    """Measured ceiling of one large GEMM, TFLOP/s (1e12), by dtype among DTYPES: the best rate the
    vendor's (or a published benchmark's) tuned GEMM reaches at its sustained clock, below the
    datasheet peak (AMD's "Max-Achievable FLOPs"); empty where none is published. It scales the
    stand-in GEMM efficiency of a GPU without measured training runs
    (`cost.compute.ceiling_ratio`). Source: per catalog file."""
    sm_count: int | None = None
    """Streaming multiprocessors (AMD: compute units) of the device, or None where the file does
    not say; the share of them an overlapped communication kernel takes slows the compute beside
    it (`cost.step_time`; None: that contention is not costed). Source: per catalog file."""

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
    host_cpu_cores: int | None = None
    """Physical CPU cores per node (all sockets), which the ranks of the node share when the
    optimizer step runs on the CPU (optimizer offload); None = not given (offload's CPU step cannot
    be costed: `cpu_cores_per_gpu` says so)."""
    allow_partial_node: bool = True
    """Whether fewer GPUs than `gpus_per_node` may be used: a job on part of one node (a 6-GPU
    vLLM engine, a 7-GPU DeepSpeed job under `CUDA_VISIBLE_DEVICES`). True unless the cluster file
    forbids it (a scheduler that allocates whole nodes)."""
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

    def cpu_cores_per_gpu(self) -> float:
        """Physical CPU cores one rank's CPU optimizer gets: host_cpu_cores / gpus_per_node (DeepSpeed's
        `--bind_cores_to_rank` divides the physical cores evenly among the node's ranks:
        docs/_tutorials/zero-offload.md "CPU Adam perf tuning", deepspeedai/DeepSpeed@edaa722).

        Raises:
            SpecError: the cluster file gives no `host_cpu_cores`."""
        if self.host_cpu_cores is None:
            raise SpecError("missing key: the CPU optimizer step of optimizer offload runs on the host's "
                            "cores; give the physical CPU cores per node (all sockets)",
                            file=self.name, key="host_cpu_cores")
        return self.host_cpu_cores / self.gpus_per_node

    @property
    def num_nodes(self) -> int:
        """Nodes used: ceil(num_gpus / gpus_per_node)."""
        return math.ceil(self.num_gpus / self.gpus_per_node)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak of the GPU for `dtype`, FLOP/s (peak_tflops[dtype] * 1e12).

        Raises:
            SpecError: the GPU has no peak listed for `dtype` (e.g. bf16 on V100); names the ones it has.
        """
        tflops = self.gpu.peak_tflops.get(dtype)
        if tflops is None:
            have = ", ".join(sorted(self.gpu.peak_tflops))
            raise SpecError(f"GPU {self.gpu.name} has no {dtype} peak; it supports {have}",
                            file=self.name, key="precision")
        return tflops * 1e12


CATALOG_DIR = files.data_dir("hardware")

_GPU_REQUIRED = ("name", "memory_gib", "hbm_gb_per_s", "peak_tflops")
_GPU_KEYS = _GPU_REQUIRED + ("source", "sm_count", "memory_bytes", "max_achievable_tflops")  # memory_bytes: derived (`_check_derived`)
_INT_KEYS = ("gpus_per_node", "scaleup_domain_gpus", "nics_per_node")
_FLOAT_KEYS = ("scaleup_gb_per_s", "scaleup_latency_s", "nic_gbit_per_s", "network_latency_s",
               "host_memory_gib", "host_link_gb_per_s")
_REQUIRED = ("gpu",) + _INT_KEYS + _FLOAT_KEYS

MAX_GPUS = 2**22
"""Largest cluster accepted (4,194,304 GPUs, as the CLI's --gpus): beyond any cluster built."""
_BOUNDS: dict[str, tuple[float, float]] = {
    "gpu.memory_gib": (1, 2**20),
    "gpu.hbm_gb_per_s": (1, 1e6),
    "gpu.peak_tflops": (1e-3, 1e7),
    "gpu.sm_count": (1, 2**16),
    "gpus_per_node": (1, 2**16), "scaleup_domain_gpus": (1, 2**16), "nics_per_node": (1, 2**10),
    "num_gpus": (1, MAX_GPUS),
    "scaleup_gb_per_s": (1e-3, 1e6), "host_link_gb_per_s": (1e-3, 1e6), "nic_gbit_per_s": (1e-3, 1e7),
    "scaleup_latency_s": (1e-12, 1), "network_latency_s": (1e-12, 1),
    "host_memory_gib": (1, 2**20), "host_cpu_cores": (1, 2**16),
}
"""(smallest, largest) of each number, in the key's unit. [Bound] not physical limits: 1,000x or
more around today's hardware (H100: 80 GiB, 3.35 TB/s, 989 TFLOP/s; NVLink 450 GB/s; 400 Gb/s NICs;
1-10 us latencies), so that the cost model's divisions and products stay finite. The 1 GiB floor of
`memory_gib` is the smallest memory that holds the CUDA context and a plan's buffers."""
_KEYS = _REQUIRED + ("name", "description", "source", "sources", "allow_partial_node", "num_gpus",
                     "host_cpu_cores")
_DERIVED = ("num_nodes", "network_gb_per_s_per_gpu")
"""Values `to_dict` adds (`hardware show --format yaml|json`): read back only when they equal what
the file's own keys give, so that the output loads again as a cluster file (`-c`)."""


def catalog_names() -> list[str]:
    """Names of the shipped cluster catalog entries (`hardware/*.yaml`), sorted."""
    return files.catalog_names(CATALOG_DIR)


def load_cluster(ref: str | Path, *, gpus: int | None = None) -> ClusterSpec:
    """Load a cluster from a catalog name or a YAML path and size it.

    Args:
        ref: catalog name (e.g. `dgx-h100`) or a path to a YAML file.
        gpus: cluster size (`--gpus`): whole nodes (a multiple of gpus_per_node), or fewer GPUs
            than one node unless the spec sets `allow_partial_node: false`. Default: the file's `num_gpus`,
            else the larger of one node and one scale-up domain (72 for GB200 NVL72).

    Returns:
        The validated ClusterSpec.

    Raises:
        SpecError: unknown name (closest catalog names suggested), missing file, YAML syntax error
            (file and line), unknown key (closest key suggested), missing key, wrong type,
            non-positive number, bad GPU count (nearest valid counts named). One line each.
    """
    path, display = files.resolve(str(ref), CATALOG_DIR, "cluster", alternatives="a YAML file")
    file = str(path)
    raw = files.read_mapping(path, "cluster keys")
    _check_keys(raw, _KEYS + _DERIVED, _REQUIRED, file, prefix="")
    gpu = _gpu(raw["gpu"], file)
    ints = {key: _number(raw, key, file, integer=True) for key in _INT_KEYS
            + ("host_cpu_cores",) * ("host_cpu_cores" in raw)}
    floats = {key: _number(raw, key, file) for key in _FLOAT_KEYS}
    partial = raw.get("allow_partial_node", True)
    if not isinstance(partial, bool):
        raise SpecError(f"value {partial!r} must be true or false", file=file, key="allow_partial_node")
    _check_domain(ints["gpus_per_node"], ints["scaleup_domain_gpus"], file)
    default = max(ints["gpus_per_node"], ints["scaleup_domain_gpus"])
    if "num_gpus" in raw:
        default = _number(raw, "num_gpus", file, integer=True)
        _check_gpus(default, ints["gpus_per_node"], partial, file, key="num_gpus")
    num_gpus = default if gpus is None else gpus
    if gpus is not None:
        _check_gpus(gpus, ints["gpus_per_node"], partial, file, key="--gpus")
    spec = ClusterSpec(
        name=_text(raw, "name", file, default=display), gpu=gpu, num_gpus=num_gpus,
        allow_partial_node=partial, source=_text(raw, "source", file),
        sources=_sources(raw.get("sources", {}), raw, file),
        description=_text(raw, "description", file), **ints, **floats)
    _check_derived(raw, dataclasses.replace(spec, num_gpus=default), file)
    return spec


def _check_derived(raw: dict, spec: ClusterSpec, file: str) -> None:
    """A derived value the file gives (`_DERIVED`, gpu.memory_bytes) must equal the one its own
    keys give (the file's num_gpus for num_nodes): a stale one after an edit is bad input."""
    given = {key: raw[key] for key in _DERIVED if key in raw}
    if "memory_bytes" in raw["gpu"]:
        given["gpu.memory_bytes"] = raw["gpu"]["memory_bytes"]
    derived = {"num_nodes": spec.num_nodes, "network_gb_per_s_per_gpu": spec.network_gb_per_s_per_gpu,
               "gpu.memory_bytes": spec.gpu.memory_bytes}
    for key, value in given.items():
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isclose(
            value, derived[key], rel_tol=1e-9)
        if not ok:
            raise SpecError(f"value {_show(value)} is derived from the other keys and they give "
                            f"{number(derived[key])}; drop the key or give {number(derived[key])}", file=file, key=key)


def to_dict(cluster: ClusterSpec) -> dict:
    """Plain dict of the cluster for json/yaml output, units in the keys, derived values included."""
    data = dataclasses.asdict(cluster)
    if data["host_cpu_cores"] is None:   # not given: left out, so the output loads again
        del data["host_cpu_cores"]
    data["gpu"]["memory_bytes"] = cluster.gpu.memory_bytes
    data["num_nodes"] = cluster.num_nodes
    data["network_gb_per_s_per_gpu"] = cluster.network_gb_per_s_per_gpu
    return data


def _check_keys(raw: dict, allowed: tuple[str, ...], required: tuple[str, ...], file: str,
                prefix: str) -> None:
    """Unknown keys (with the closest allowed key) and missing keys, one SpecError each."""
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}"
            raise SpecError(f"unknown key; {hint}", file=file, key=f"{prefix}{key}")
    for key in required:
        if key not in raw:
            raise SpecError("missing key (required)", file=file, key=f"{prefix}{key}")


def _number(raw: dict, key: str, file: str, *, integer: bool = False, prefix: str = "") -> float:
    """A positive number (or positive integer) from `raw[key]`, within `_BOUNDS` of its key path.

    Integers are compared before any float conversion, so a 400-digit integer is an error, not an
    OverflowError; NaN fails every comparison."""
    value, path = raw[key], f"{prefix}{key}"
    lo, hi = _BOUNDS["gpu.peak_tflops" if path.startswith(("gpu.peak_tflops.", "gpu.max_achievable_tflops."))
                     else path]
    bad_type = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if bad_type or not lo <= value <= hi:
        kind = "a positive integer" if integer else "a positive number"
        raise SpecError(f"value {_show(value)} must be {kind} from {_bound(lo)} to {_bound(hi)}",
                        file=file, key=path)
    return value if integer else float(value)


def _bound(x: float) -> str:
    """1048576 -> '1,048,576'; 1e-12 -> '1e-12'."""
    return f"{int(x):,}" if x >= 1 and float(x).is_integer() else f"{x:g}"


def _show(value: object) -> str:
    """A value as the file spells it (`errors.shown`: true, null, [1, 2]), shortened to one readable
    fragment (a 400-digit integer is not)."""
    text = shown(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _text(raw: dict, key: str, file: str, *, default: str = "", prefix: str = "") -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise SpecError(f"value {value!r} must be a string", file=file, key=f"{prefix}{key}")
    return value


def _gpu(raw: object, file: str) -> GPUSpec:
    if not isinstance(raw, dict):
        raise SpecError(f"value {raw!r} must be a mapping with keys {', '.join(_GPU_REQUIRED)}",
                        file=file, key="gpu")
    _check_keys(raw, _GPU_KEYS, _GPU_REQUIRED, file, prefix="gpu.")
    return GPUSpec(
        name=_text(raw, "name", file, prefix="gpu."),
        memory_gib=_number(raw, "memory_gib", file, prefix="gpu."),
        hbm_gb_per_s=_number(raw, "hbm_gb_per_s", file, prefix="gpu."),
        peak_tflops=_peaks(raw["peak_tflops"], file),
        max_achievable_tflops=_ceilings(raw.get("max_achievable_tflops", {}), raw["peak_tflops"], file),
        source=_text(raw, "source", file, prefix="gpu."),
        sm_count=int(_number(raw, "sm_count", file, integer=True, prefix="gpu.")) if "sm_count" in raw else None)


def _peaks(raw: object, file: str) -> dict[str, float]:
    key = "gpu.peak_tflops"
    if not isinstance(raw, dict) or not raw:
        raise SpecError(f"value {raw!r} must be a mapping of dtype to dense TFLOP/s, dtypes among "
                        f"{', '.join(DTYPES)}", file=file, key=key)
    _check_keys(raw, DTYPES, (), file, prefix=f"{key}.")
    if "bf16" not in raw and "fp16" not in raw:
        raise SpecError("needs at least one of bf16, fp16 (dense tensor-core peak)", file=file, key=key)
    return {dtype: _number(raw, dtype, file, prefix=f"{key}.") for dtype in DTYPES if dtype in raw}


def _ceilings(raw: object, peaks: dict, file: str) -> dict[str, float]:
    """`gpu.max_achievable_tflops`: dtype -> TFLOP/s, each dtype one the GPU has a peak for and
    the ceiling not above that peak (a measured GEMM cannot beat the datasheet)."""
    key = "gpu.max_achievable_tflops"
    if not isinstance(raw, dict):
        raise SpecError(f"value {_show(raw)} must be a mapping of dtype to measured GEMM TFLOP/s",
                        file=file, key=key)
    _check_keys(raw, tuple(d for d in DTYPES if d in peaks), (), file, prefix=f"{key}.")
    out = {dtype: _number(raw, dtype, file, prefix=f"{key}.") for dtype in DTYPES if dtype in raw}
    for dtype, tflops in out.items():
        if tflops > peaks[dtype]:
            raise SpecError(f"value {number(tflops)} exceeds the {dtype} peak {number(peaks[dtype])}; a "
                            "measured ceiling is at most the datasheet peak", file=file, key=f"{key}.{dtype}")
    return out


def _sources(raw: object, cluster: dict, file: str) -> dict[str, str]:
    """Per-key sources: each key is a dotted path (or a comma-separated list of them) that exists."""
    if not isinstance(raw, dict):
        raise SpecError(f"value {raw!r} must be a mapping of key path to source text", file=file,
                        key="sources")
    for paths, text in raw.items():
        if not isinstance(text, str) or not text.strip():
            raise SpecError(f"value {text!r} must be non-empty source text", file=file,
                            key=f"sources.{paths}")
        for dotted in str(paths).split(","):
            if _lookup(cluster, dotted.strip()) is None:
                raise SpecError("names no key of this file", file=file, key=f"sources.{dotted.strip()}")
    return {str(k): v for k, v in raw.items()}


def _lookup(data: dict, dotted: str) -> object:
    node: object = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _check_domain(per_node: int, domain: int, file: str) -> None:
    if domain % per_node and per_node % domain:
        raise SpecError(f"value {domain} must divide or be a multiple of gpus_per_node {per_node}",
                        file=file, key="scaleup_domain_gpus")


def _check_gpus(gpus: object, per_node: int, partial: bool, file: str, *, key: str) -> None:
    """Whole nodes, or fewer than one node when partial nodes are allowed."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 < gpus <= MAX_GPUS:
        raise SpecError(f"value {_show(gpus)} must be a positive integer (at most {MAX_GPUS:,})",
                        file=file, key=key)
    if gpus % per_node == 0 or (partial and gpus < per_node):
        return
    below, above = (gpus // per_node) * per_node, (gpus // per_node + 1) * per_node
    nearest = ", ".join(str(n) for n in (below, above) if n > 0)
    rule = "1..{} or a multiple of {}".format(per_node - 1, per_node) if partial else \
        f"a multiple of gpus_per_node {per_node} (whole nodes)"
    raise SpecError(f"value {gpus} must be {rule}; nearest valid: {nearest}", file=file, key=key)
