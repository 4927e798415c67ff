"""Achievable matrix-multiply throughput per GPU: peak x an efficiency that falls for small GEMMs.

efficiency(d) = e_max x d / (d + d_half), with d the narrowest dimension of the layer's GEMMs on one
GPU: min(hidden / tp, tokens per micro-batch on the GPU). A saturating (Michaelis-Menten / roofline
knee) form: large GEMMs approach e_max, a GEMM of width d_half runs at half of it.

Source of the form: the measured GEMM-throughput-vs-size curves of NVIDIA's "Matrix Multiplication
Background User's Guide" (deep-learning-performance docs, Fig. "performance vs. N" for A100) and
Narayanan et al. 2021 (SC21) §5.1 / Fig. 9 (throughput per GPU rising with hidden size / tp).
The constants are [Empirical] (see `GEMM_EFFICIENCY`): they fold in everything the step-time model
does not model explicitly (kernel launch gaps, elementwise kernels, softmax, layer norms, dropout),
so they are *end-to-end* layer efficiencies, not cuBLAS peaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError
from planner.specs.cluster import GPUSpec


@dataclass(frozen=True, kw_only=True)
class GemmEfficiency:
    """Constants of efficiency(d) = e_max * d / (d + d_half) for one GPU family."""

    e_max: float
    """Fraction of dense peak reached by large layers, dimensionless."""
    d_half: float
    """GEMM width (elements) at which the efficiency is half of e_max."""
    basis: str
    """What the constants were fitted on."""


GEMM_EFFICIENCY: dict[str, GemmEfficiency] = {
    "A100": GemmEfficiency(
        e_max=0.70, d_half=64.0,
        basis="[Empirical] least squares in log error (grid e_max 0.56-0.74 step 0.01, d_half "
              "0-512) on the 10 Narayanan 2021 Table 1 rows (megatron-sc21-t1-*, fp16, full "
              "recompute, unfused attention) in reference/training_runs.yaml, rms error 2.7% "
              "when fitted; the other A100 rows are out of sample. Since the pipeline sends "
              "follow Megatron's shapes (split over tp only with SP; tests/test_one_comm.py) the "
              "same rows give rms 3.5%, and the same grid refits to 0.73 / 96 (rms 3.0%): not "
              "applied, the per-family recalibration with a fit and an evaluation part is open"),
    "H100": GemmEfficiency(
        e_max=0.63, d_half=64.0,
        basis="[Empirical] e_max fitted (grid step 0.01) on the one row llama3-405b-8192-8192 "
              "(430 TFLOP/s, bf16, FlashAttention) in reference/training_runs.yaml, d_half taken "
              "from A100; the other H100 rows are out of sample"),
}
"""[Empirical] per GPU family (matched by substring of `GPUSpec.name`); H200/H800/H20 use the H100
constants (same SM architecture, Hopper), others fall back to `DEFAULT_FAMILY`."""

_ALIASES = {"H200": "H100", "H800": "H100", "H20": "H100", "GH200": "H100", "A800": "A100"}
DEFAULT_FAMILY = "H100"
"""Family used for GPUs without fitted constants (the newest fitted architecture)."""


def efficiency_constants(gpu: GPUSpec) -> GemmEfficiency:
    """The fitted constants for `gpu` (by family name in `gpu.name`)."""
    name = gpu.name.upper()
    for alias, family in _ALIASES.items():
        if alias in name:
            return GEMM_EFFICIENCY[family]
    for family, constants in GEMM_EFFICIENCY.items():
        if family in name:
            return constants
    return GEMM_EFFICIENCY[DEFAULT_FAMILY]


def gemm_efficiency(gpu: GPUSpec, *, gemm_dim: float) -> float:
    """Fraction of dense peak a layer whose narrowest per-GPU GEMM dimension is `gemm_dim` reaches.

    Args:
        gpu: the accelerator.
        gemm_dim: min(hidden / tp, tokens per micro-batch per GPU), elements.

    Raises:
        SpecError: gemm_dim is not positive.
    """
    if gemm_dim <= 0:
        raise SpecError(f"value {gemm_dim!r} must be > 0", key="gemm_dim")
    c = efficiency_constants(gpu)
    return c.e_max * gemm_dim / (gemm_dim + c.d_half)


def peak_flops(gpu: GPUSpec, precision: str) -> float:
    """Dense peak FLOP/s for the compute dtype (`peak_tflops[precision] * 1e12`).

    Source: the GPU datasheet values in the cluster catalog (dense, no 2:4 sparsity).

    Raises:
        SpecError: the GPU lists no peak for `precision`.
    """
    tflops = gpu.peak_tflops.get(precision)
    if tflops is None:
        have = ", ".join(sorted(gpu.peak_tflops))
        raise SpecError(f"GPU {gpu.name} has no {precision} peak; it has {have}", key="precision")
    return tflops * 1e12


def achieved_flops(gpu: GPUSpec, precision: str, *, gemm_dim: float) -> float:
    """FLOP/s one GPU sustains on a layer: peak_flops x gemm_efficiency."""
    return peak_flops(gpu, precision) * gemm_efficiency(gpu, gemm_dim=gemm_dim)
