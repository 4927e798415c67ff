"""Achievable throughput per GPU: dense peak x an efficiency that depends on each GEMM's real shape,
the GPU family and the precision the GEMM runs in.

Linear-layer GEMMs (dense, shared and routed experts): efficiency(d) = e_max x d / (d + d_half),
d the narrowest dimension of the GEMM on one GPU (for a layer: min(hidden / tp, tokens per
micro-batch on the GPU); for a routed expert: min(tokens routed to one local expert, expert width /
etp, hidden)). A saturating (Michaelis-Menten / roofline knee) form: large GEMMs approach e_max, a
GEMM of width d_half runs at half of it. Source of the form: the measured GEMM-throughput-vs-size
curves of NVIDIA's "Matrix Multiplication Background User's Guide" (deep-learning-performance docs,
Fig. "performance vs. N" for A100) and Narayanan et al. 2021 (SC21) §5.1 / Fig. 9 (throughput per
GPU rising with hidden size / tp).

Precision: with `precision: fp8` only the linear-layer GEMMs run on the fp8 tensor cores, at the
family's `fp8_e_max` of the fp8 peak (= the fitted fp8_ratio x e_max, one ratio for every family,
`planner.calibrate`); the attention core (FlashAttention) and the LM head stay bf16.
Source: Transformer Engine (NVIDIA/TransformerEngine@d0067d0, transformer_engine/pytorch/module/
linear.py: the fp8 recipe quantizes the inputs and weights of `Linear`/`LayerNormLinear`/
`GroupedLinear` only; DotProductAttention runs the bf16 fused kernel unless fp8 attention is asked
for separately) and torchao float8 as torchtitan applies it (pytorch/torchtitan@b5bcd76,
torchtitan/components/quantization/float8.py: swaps `Linear` modules; float8.md l. 24 filters
the `output` projection). `fp8_cast_bytes` prices the quantization itself.

The attention core runs at the bf16 e_max times `attention_efficiency(chunk)`: FlashAttention's
throughput falls for short sequences (a kernel launch per head tile, fewer tiles to fill the SMs).
A fused kernel with a causal mask executes `executed_attention_fraction` (about half) of the score
FLOPs, at the causal curve of the same figure (the diagonal tiles' overhead included).

The constants are [Empirical], per GPU family, in `calibration/training.yaml` (`make calibrate`
refits them): they fold in everything the step-time model does not model explicitly (kernel launch
gaps, tile and wave quantization), so they are end-to-end
GEMM efficiencies, not cuBLAS peaks. The memory-bound work beside the GEMMs -- the fused norms,
residual adds, RoPE and MLP activation (`step_time.fused_elementwise_bytes`), their unfused eager
extra, fp8 casts, MoE routing -- is priced at HBM bandwidth instead: folded into e_max it scaled
with FLOPs, and over-predicted small hidden sizes and parts with little HBM bandwidth per FLOP
(docs/validation.md: torchtitan's 8B on the 2.4 TB/s Grand Teton H100 against Llama 3 405B).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from planner.errors import SpecError
from planner.specs import files
from planner.specs.cluster import GPUSpec

CALIBRATION_FILE = files.CLONE_ROOT / "calibration" / "training.yaml"
"""The per-family constants (written by `make calibrate`, `planner.calibrate`) in a clone or an
editable install."""
INSTALLED_CALIBRATION_FILE = files.INSTALLED_ROOT / "calibration" / "training.yaml"
"""Where a wheel puts the same file (pyproject.toml `[tool.setuptools.data-files]`)."""


def calibration_path() -> Path:
    """The calibration file in force: the clone's, else the installed package's."""
    return CALIBRATION_FILE if CALIBRATION_FILE.exists() or not INSTALLED_CALIBRATION_FILE.exists() \
        else INSTALLED_CALIBRATION_FILE


@dataclass(frozen=True, kw_only=True)
class GemmEfficiency:
    """Constants of efficiency(d) = e_max * d / (d + d_half) for one GPU family."""

    family: str
    """Family whose constants these are (the GPU's own family when it has fit rows)."""
    e_max: float
    """Fraction of the dense bf16/fp16 peak reached by large layers, dimensionless."""
    d_half: float
    """GEMM width (elements) at which the efficiency is half of e_max."""
    fp8_e_max: float | None
    """Fraction of the dense fp8 peak reached by large fp8 linear GEMMs (None: no fp8 fit)."""
    basis: str
    """What the constants were fitted on, or which family's constants stand in and why."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The contents of `calibration/training.yaml`."""

    families: dict[str, GemmEfficiency]
    """Family name (matched as a substring of `GPUSpec.name`) -> its constants (fallbacks resolved)."""
    aliases: dict[str, str]
    """GPU name substring -> family (H200 -> H100, GB200 -> B200, ...)."""
    default_family: str
    """Family for a GPU that matches no family or alias."""
    attention_l_half: float
    """Per-rank attention chunk (tokens) at which FlashAttention runs at half its plateau."""
    moe_host_sync_s: float = 0.0
    """Host stall of one dropless MoE layer's forward pass, s (`moe_host_sync_s`)."""
    fa2_plateau_ratio: float = 1.0
    """FlashAttention-2's long-sequence throughput / the fused kernel's (`attention_efficiency`)."""
    fa2_l_half: float = 0.0
    """Per-rank chunk (tokens) at which FlashAttention-2 runs at half its own plateau."""
    fa2_families: tuple[str, ...] = ()
    """Families whose GPUs the FlashAttention-2 curve was measured on (elsewhere: the fused curve)."""
    causal_plateau_ratio: float = 1.0
    """The fused kernel's long-sequence throughput with a causal mask, counted on the causal half of
    the scores (FlashAttention-3's convention) / its plateau without a mask (`attention_efficiency`)."""
    causal_l_half: float = 0.0
    """Chunk (tokens) at which the causal fused kernel runs at half its own plateau (0: no causal curve
    in the file; the unmasked one applies)."""
    fa2_causal_plateau_ratio: float = 1.0
    """FlashAttention-2's causal plateau (counted on the causal half) / the fused kernel's unmasked one."""
    fa2_causal_l_half: float = 0.0
    """Chunk (tokens) at which causal FlashAttention-2 runs at half its own plateau (0: none in the file)."""
    backward_plateau_ratio: float = 1.0
    """The fused kernel's long-sequence backward throughput (on ATTENTION_BACKWARD_FLOPS x the forward's
    FLOPs) / its unmasked forward plateau."""
    backward_l_half: float = 0.0
    """Chunk (tokens) at which the fused backward runs at half its plateau (0: none in the file; the
    forward curve applies)."""
    fa2_backward_plateau_ratio: float = 1.0
    """FlashAttention-2's backward plateau / the fused kernel's unmasked forward one."""
    fa2_backward_l_half: float = 0.0
    """Chunk (tokens) at which FlashAttention-2's backward runs at half its plateau (0: none in the file)."""
    clock_fractions: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU name substring -> sustained tensor-core clock of a power-limited part / the clock its
    datasheet peak assumes (`clock_fraction`); GPUs not listed: 1."""


def load_calibration(path: Path | None = None) -> Calibration:
    """Read the per-family constants file (see the module docstring and the file's own
    `description`). A family entry with `fallback: F` takes F's numbers and keeps its own basis.

    Raises:
        SpecError: the file is missing or malformed (one line naming the key).
    """
    path = calibration_path() if path is None else path
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        raw, aliases = doc["families"], {}
        families: dict[str, GemmEfficiency] = {}
        for name, entry in raw.items():
            for alias in entry.get("aliases", ()):
                aliases[str(alias).upper()] = name
        for name, entry in raw.items():
            source = raw[entry["fallback"]] if "fallback" in entry else entry
            families[name] = GemmEfficiency(
                family=entry.get("fallback", name), e_max=float(source["e_max"]),
                d_half=float(source["d_half"]),
                fp8_e_max=None if source.get("fp8_e_max") is None else float(source["fp8_e_max"]),
                basis=str(entry["basis"]))
        fa2 = doc["attention_core"].get("flash_attention_2", {})
        causal, fa2_causal = doc["attention_core"].get("causal", {}), fa2.get("causal", {})
        bwd, fa2_bwd = doc["attention_core"].get("backward", {}), fa2.get("backward", {})
        return Calibration(families=families, aliases=aliases,
                           default_family=str(doc["default_family"]),
                           attention_l_half=float(doc["attention_core"]["l_half_tokens"]),
                           moe_host_sync_s=float(doc.get("moe_host_sync", {}).get("seconds", 0.0)),
                           fa2_plateau_ratio=float(fa2.get("plateau_ratio", 1.0)),
                           fa2_l_half=float(fa2.get("l_half_tokens", doc["attention_core"]["l_half_tokens"])),
                           fa2_families=tuple(fa2.get("families", ())),
                           causal_plateau_ratio=float(causal.get("plateau_ratio", 1.0)),
                           causal_l_half=float(causal.get("l_half_tokens", 0.0)),
                           fa2_causal_plateau_ratio=float(fa2_causal.get("plateau_ratio", 1.0)),
                           fa2_causal_l_half=float(fa2_causal.get("l_half_tokens", 0.0)),
                           backward_plateau_ratio=float(bwd.get("plateau_ratio", 1.0)),
                           backward_l_half=float(bwd.get("l_half_tokens", 0.0)),
                           fa2_backward_plateau_ratio=float(fa2_bwd.get("plateau_ratio", 1.0)),
                           fa2_backward_l_half=float(fa2_bwd.get("l_half_tokens", 0.0)),
                           clock_fractions={str(name).upper(): float(entry["clock_fraction"])
                                            for name, entry in doc.get("power_limited_gpus", {}).items()})
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"calibration file {path} unreadable or missing a key ({exc!s}); "
                        "regenerate it with `make calibrate`", key="calibration") from None


@lru_cache(maxsize=1)
def _default_calibration() -> Calibration:
    return load_calibration()


@lru_cache(maxsize=1)
def held_out_error() -> float:
    """Median |error| of the step-time model's throughput on the evaluation part of the reference
    runs (the calibration file's `evaluation.all.median_abs_error_pct` / 100, written by
    `make calibrate`): how far apart two predicted step times must be before the model can tell
    which layout is faster.

    Raises:
        SpecError: the file has no evaluation entry (regenerate with `make calibrate`)."""
    path = calibration_path()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        return float(doc["evaluation"]["all"]["median_abs_error_pct"]) / 100
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"calibration file {path} unreadable or missing a key ({exc!s}); "
                        "regenerate it with `make calibrate`", key="calibration") from None


_ACTIVE: list[Calibration] = []
"""Calibration set by `use_calibration` (the fit tries candidate constants); empty = the file."""


def calibration() -> Calibration:
    """The constants in force: those `use_calibration` set, else `calibration/training.yaml`."""
    return _ACTIVE[-1] if _ACTIVE else _default_calibration()


def use_calibration(cal: Calibration | None) -> None:
    """Put `cal` in force (None: back to the file). Callers that cache times computed with the
    constants (step_time) must drop those caches (`step_time.clear_caches`)."""
    _ACTIVE.clear()
    if cal is not None:
        _ACTIVE.append(cal)


def gpu_family(gpu: GPUSpec, cal: Calibration | None = None) -> str:
    """Family name of `gpu` in `cal` (default: the constants in force): aliases first, then family
    names, then the default family."""
    cal = cal or calibration()
    name = gpu.name.upper()
    for alias, family in cal.aliases.items():
        if alias in name:
            return family
    for family in cal.families:
        if family.upper() in name:
            return family
    return cal.default_family


def _stand_in(gpu_name: str, cal: Calibration) -> str | None:
    """The family whose constants stand in for the GPU named `gpu_name` (an explicit `fallback`,
    or the default family for a name that matches none), or None when its own family was fitted."""
    name = gpu_name.upper()
    family = next((f for alias, f in cal.aliases.items() if alias in name), None) or next(
        (f for f in cal.families if f.upper() in name), None)
    if family is not None and cal.families[family].family == family:
        return None
    return cal.families[family or cal.default_family].family


def unfitted_note(gpu: GPUSpec) -> str | None:
    """A warning when no measured run of `gpu`'s family is in the calibration data, so its GEMM
    efficiency is another family's (`_stand_in`), scaled by the two GPUs' measured GEMM ceilings
    where both have one (`ceiling_ratio`); None when its own family was fitted. The step times of
    such a GPU are extrapolated from datasheet peaks with borrowed efficiencies: their error is
    unknown."""
    cal = calibration()
    stand_in = _stand_in(gpu.name, cal)
    if stand_in is None:
        return None
    constants = cal.families[stand_in]
    ratio = ceiling_ratio(gpu, "bf16")
    if ratio == 1.0:
        how = f"is {stand_in}'s (e_max {constants.e_max:.3f} of its datasheet peak)"
    else:
        how = (f"is {stand_in}'s shape curve scaled by the two GPUs' measured GEMM ceilings "
               f"({gpu.max_achievable_tflops['bf16']:,.0f} of {gpu.peak_tflops['bf16']:,.0f} bf16 TFLOP/s "
               f"against {stand_in}'s {_reference(stand_in, 'bf16', id(cal))[1]}): e_max "
               f"{constants.e_max * ratio:.3f} of its datasheet peak")
    return (f"{gpu.name}: no measured training run of this GPU is in the calibration data; its GEMM "
            f"efficiency {how}, so its step times are an extrapolation of unknown error")


UNVALIDATED_TRAINING_FAMILIES = {
    "gpt_oss": ("NVIDIA's measured H100 recipe (Megatron-Bridge gpt_oss_120b_pretrain_64gpu_h100_bf16_config: "
                "64 GPUs, TP1 PP4 EP8, bf16, GBS 1280, MBS 1, seq 4096) ran 5,824 tokens/s/GPU, and this model "
                "predicts about 1.4x that; the cause is not found (tests/test_validate_gpt_oss.py)"),
}
"""HF `model_type` -> why its training step times are not validated: a family with a published
measurement the step-time model misses beyond the evaluation bars (issue 9: max 25%), cause
unknown, which is therefore not fitted around. Source: Megatron-Bridge@067f987
docs/performance-summary-archive.md, 26.04.01 container, GPT OSS 120B DGX-H100 row (5,824 tokens/s/GPU,
158 model TFLOP/s; 5,810 / 5,984 / 5,993 in the other releases listed); recipe
src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py l. 25-56."""


def unvalidated_family_note(model_type: str) -> str | None:
    """The caveat plan / explain / check print under a training step time of a model family in
    `UNVALIDATED_TRAINING_FAMILIES`, else None."""
    why = UNVALIDATED_TRAINING_FAMILIES.get(model_type)
    return None if why is None else (f"{model_type} training step times are not validated: {why}; "
                                     "read its tokens/s as optimistic")


TORCHTITAN_ROWWISE_FP8_NOTE = (
    "torchtitan rowwise fp8 step times are optimistic: published rowwise runs measured 9-29% slower than this model "
    "predicts -- torchao's README pair 0.880x tensorwise (6,768 vs 7,689.5 tokens/s, Llama3-8B on 8 H100; predicted "
    "0.96x), Llama 3.1 70B tp8 on 256 H100 599.6 / 624.8 tokens/s/GPU without / with AsyncTP (torchtitan benchmarks "
    "2025-06; predicted +27% / +40%); the cause is not found (tests/test_torchtitan_fp8_recipe.py)")
"""Senior review 12 #4. The 9-29% is 1 - measured / predicted speed: 0.880 / 0.964 = 0.913 (9%), 1 / 1.27 = 0.787
(21%), 1 / 1.40 = 0.714 (29%); the 8B pair is a ratio to the same run's tensorwise measurement, against the model's
ratio. Sources: pytorch/ao@9519beb torchao/float8/README.md "Training benchmarks" (`ROWWISE_GEMM_FRACTION`);
pytorch/torchtitan@b5bcd76 benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md l. 20-26. (Senior review 12 also
quoted a torchtitan commit 7a04053 with bf16 5,760 / rowwise 6,424 tokens/s on 8B; that commit is not in the
torchtitan history read here, so it is not used.) Not fitted around: the guide forbids tuning a constant to these
rows outside the fit data."""

TORCHTITAN_CP_NOTE = (
    "torchtitan context-parallel step times at cp >= 4 are optimistic: its published CP runs measured 11-24% slower "
    "than this model predicts (torchtitan benchmarks/llama3_h100_202412: Llama 3.1 8B cp4 / cp8 at 128K / 256K "
    "tokens 1,071 / 548 tokens/s/GPU, predicted +26.8% / +31.5%; 405B tp8 pp8 cp4 / cp8 31 / 16, predicted +12.7% / "
    "+20.7%); the cause is not found (docs/validation.md)")
"""Senior review 12 #5: 1 - 1 / 1.268 = 21%, 1 / 1.315 -> 24%, 1 / 1.127 -> 11%, 1 / 1.207 -> 17%, the rows
torchtitan-202412-t2-cp4, -t2-cp8, -t6-4d-cp4 (evaluation) and -t6-4d-cp8 of docs/validation.md (cp 1 / 2: +1% / -6%
and +4.3% / +15.3%). Source: pytorch/torchtitan@31a17bfd benchmarks/llama3_h100_202412_torchtitan.md Tables 2 and 6
(tests/data/reference/training_runs.yaml). Cause not found (the ring's exposure is the suspect, senior review 12 #5:
0.22 s of 24.4 s exposed at 8B cp4), so not fitted around; tests/test_torchtitan_cp_caveat.py keeps the note true."""


def unvalidated_layout_notes(framework: str, cp: int, torchao_recipe: str | None) -> list[str]:
    """The caveats plan / explain / check print under the step time of a layout whose framework feature has
    published runs the step-time model misses beyond the evaluation bars (issue 9: 10%), cause unknown:
    torchtitan's rowwise fp8 (`torchao_recipe`, `precision.torchao_fp8_recipe` of the layout, is "rowwise";
    `TORCHTITAN_ROWWISE_FP8_NOTE`) and torchtitan context parallel at `cp` >= 4 (`TORCHTITAN_CP_NOTE`); [] else."""
    return ([TORCHTITAN_ROWWISE_FP8_NOTE] if torchao_recipe == "rowwise" else []) + (
        [TORCHTITAN_CP_NOTE] if framework == "torchtitan" and cp >= 4 else [])


def _ceiling_fraction(gpu: GPUSpec, precision: str) -> float | None:
    """`gpu`'s measured GEMM ceiling over its datasheet peak in `precision`, or None."""
    ceiling = gpu.max_achievable_tflops.get(precision)
    return None if ceiling is None or precision not in gpu.peak_tflops else ceiling / gpu.peak_tflops[precision]


@lru_cache(maxsize=64)
def _reference(family: str, precision: str, _cal_id: int) -> tuple[float, str] | None:
    """(ceiling / peak, description) of the shipped catalog GPU of `family` that lists a measured
    GEMM ceiling (`GPUSpec.max_achievable_tflops`), in `precision`, else in bf16 where it lists
    none for `precision` ([Assumption]: its fp8 / fp16 GEMMs reach the same fraction of their
    peak; the H100 ceiling published is bf16 only); None when no such GPU is shipped. `_cal_id`
    keys the cache to the calibration in force (its families decide which GPU is whose)."""
    from planner.specs.cluster import catalog_names, load_cluster   # the catalog, read once
    cal = calibration()
    for name in catalog_names():
        gpu = load_cluster(name).gpu
        if not gpu.max_achievable_tflops or gpu_family(gpu, cal) != family or _stand_in(gpu.name, cal):
            continue
        dtype = precision if precision in gpu.max_achievable_tflops else "bf16"
        fraction = _ceiling_fraction(gpu, dtype)
        if fraction is not None:
            return fraction, (f"{gpu.max_achievable_tflops[dtype]:,.0f} of {gpu.peak_tflops[dtype]:,.0f}"
                              f" {dtype} on {gpu.name}")
    return None


def ceiling_ratio(gpu: GPUSpec, precision: str) -> float:
    """Factor on the stand-in family's e_max for a GPU without measured training runs
    (`_stand_in`): (its measured GEMM ceiling / its datasheet peak) / (the same for the stand-in
    family's reference GPU, `_reference`), so the borrowed end-to-end efficiency keeps the
    stand-in's software and shape losses and takes this GPU's own gap between datasheet and
    reachable GEMM rate (clock under load, kernel efficiency). 1 for a fitted family, or where
    either GPU lists no ceiling.

    Source: the ceilings in the catalog files (`gpu.max_achievable_tflops` and their sources:
    MI300X AMD's published Max-Achievable FLOPs, H100 the ml-engineering MAMF table). Example:
    MI300X bf16 (708 / 1307.4) / (792.1 / 989.4) = 0.5415 / 0.8006 = 0.676."""
    cal = calibration()
    key = (id(gpu), precision, id(cal))
    hit = _RATIOS.get(key)   # once per GPU object, precision and calibration: it runs for every GEMM costed
    if hit is not None and hit[0] is gpu and hit[1] is cal:
        return hit[2]
    own = _ceiling_fraction(gpu, precision)
    stand_in = None if own is None else _stand_in(gpu.name, cal)
    reference = None if stand_in is None else _reference(stand_in, precision, id(cal))
    ratio = 1.0 if reference is None else own / reference[0]
    if len(_RATIOS) > 256:
        _RATIOS.clear()
    _RATIOS[key] = (gpu, cal, ratio)
    return ratio


_RATIOS: dict[tuple[int, str, int], tuple[GPUSpec, Calibration, float]] = {}
"""Cache of `ceiling_ratio` (the entry keeps its GPU and calibration alive, so their ids are not reused)."""


def efficiency_constants(gpu: GPUSpec) -> GemmEfficiency:
    """The fitted constants for `gpu` (by family name in `gpu.name`)."""
    return calibration().families[gpu_family(gpu)]


def gemm_efficiency(gpu: GPUSpec, *, gemm_dim: float, precision: str = "bf16") -> float:
    """Fraction of the `precision` dense peak a GEMM whose narrowest per-GPU dimension is
    `gemm_dim` reaches: e_max x d / (d + d_half), e_max = the family's fp8_e_max for fp8, times
    `ceiling_ratio` for a GPU whose family has no fit of its own.

    Args:
        gpu: the accelerator.
        gemm_dim: narrowest GEMM dimension on one GPU, elements.
        precision: the GEMM's input dtype.

    Raises:
        SpecError: gemm_dim is not positive; fp8 on a family without an fp8 constant.
    """
    if gemm_dim <= 0:
        raise SpecError(f"value {gemm_dim!r} must be > 0", key="gemm_dim")
    c = efficiency_constants(gpu)
    e_max = c.e_max
    if precision == "fp8":
        if c.fp8_e_max is None:
            raise SpecError(f"GPU {gpu.name} (family {gpu_family(gpu)}) has no fp8 efficiency "
                            "in calibration/training.yaml", key="precision")
        e_max = c.fp8_e_max
    return e_max * ceiling_ratio(gpu, precision) * gemm_dim / (gemm_dim + c.d_half)


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


def core_precision(precision: str) -> str:
    """dtype of the attention core and the LM head: bf16 when the layout runs fp8 GEMMs
    (Transformer Engine / torchao float8 convert linear layers only; module docstring)."""
    return "bf16" if precision == "fp8" else precision


def clock_fraction(gpu: GPUSpec) -> float:
    """Sustained tensor-core clock of `gpu` under its power limit / the clock its catalog peak
    assumes, dimensionless (1 for a GPU at its rated power): compute-bound kernels run at
    peak x this fraction; memory-bound ones do not slow (a power cap lowers the SM clock, not
    the HBM clock). [Empirical] per power-limited part, `calibration/training.yaml`
    `power_limited_gpus` (its basis: the datasheet bounds the fit is held within)."""
    name = gpu.name.upper()
    for part, fraction in calibration().clock_fractions.items():
        if part in name:
            return fraction
    return 1.0


def achieved_flops(gpu: GPUSpec, precision: str, *, gemm_dim: float) -> float:
    """FLOP/s one GPU sustains on a linear GEMM of narrowest dimension `gemm_dim` in `precision`:
    peak_flops x clock_fraction x gemm_efficiency."""
    return (peak_flops(gpu, precision) * clock_fraction(gpu)
            * gemm_efficiency(gpu, gemm_dim=gemm_dim, precision=precision))


ATTENTION_KERNELS = ("fused", "flash_attention_2")
"""Attention-core kernels the frameworks run (`frameworks.<framework>.attention_kernel`): "fused",
cuDNN fused attention / FlashAttention-3 (Transformer Engine on Hopper); "flash_attention_2",
FlashAttention-2 (PyTorch's scaled_dot_product_attention flash backend)."""


ATTENTION_BACKWARD_FLOPS = 2.5
"""Backward / forward matmul FLOPs of a FlashAttention core: the forward runs 2 matmuls (Q K^T, P V),
the backward 5 (Q K^T again to recompute P, then dV, dP, dQ, dK), so 2.5x, not the 2x of a linear
layer. Source: Dao 2023 (FlashAttention-2, arXiv 2307.08691) §4.1, the FLOP count of its
benchmarks ("backward pass ... 2.5x ... due to recomputation"), the count Shah et al. 2024's Fig. 6
backward TFLOP/s use. An unfused attention stores P and runs 4 backward matmuls: 2x."""


def attention_efficiency(chunk_tokens: float, kernel: str = "fused", gpu: GPUSpec | None = None, *,
                         causal: bool = False, backward: bool = False) -> float:
    """Fraction of the fused kernel's unmasked long-sequence throughput the attention core reaches on
    a per-rank chunk of `chunk_tokens` queries (and keys); with `causal`, the throughput of the
    causal kernel counted on the causal half of the scores (`executed_attention_fraction`).

    fused: L / (L + l_half). Source: Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608) Fig. 5,
    forward, head dim 128, no causal mask, H100 SXM5, B x S = 16k tokens: FlashAttention-3 467,
    565, 625, 638, 646, 648 TFLOP/s at S = 512 ... 16k; l_half ([Empirical], calibration/
    training.yaml `attention_core`) is the least-squares fit of P L / (L + l_half) to those six
    points in log error (P = 669, l_half = 209, rms 1.8%). cuDNN's bars in the same figure (497,
    574, 617, 609, 600, 595) stay within 8% of them from 1k up: Transformer Engine's
    FusedAttention (cuDNN), which it prefers on Hopper (NVIDIA/TransformerEngine@d0067d0
    transformer_engine/pytorch/attention/dot_product_attention/utils.py l. 1647-1653), runs
    this curve too.

    causal (fused): ratio_c x L / (L + l_half_c), fitted the same way to the same figure's causal
    panel (forward, with causal mask, head dim 128: FlashAttention-3 292, 423, 521, 579, 602, 616
    TFLOP/s, FLOPs counted on half the square): a causal kernel skips the key tiles above the
    diagonal and computes the diagonal tiles in full, so per counted FLOP it is slower than the
    unmasked kernel, the more so the fewer tiles a row has (0.63x at 512, 0.95x at 16k): the
    block-diagonal overhead and the shorter rows' load imbalance are in this curve.

    flash_attention_2: ratio x L / (L + l_half2), ratio = P2 / P, fitted the same way to the
    FlashAttention-2 bars of the same figure (309, 350, 362, 368, 370, 370: P2 = 377, l_half2 =
    104, rms 1.3%; causal: 191, 260, 298, 319, 333, 335), on the GPUs of the families it was
    measured on (`fa2_families`: the H100 family; FlashAttention-3 is Hopper-only, so elsewhere
    FlashAttention-2 is what the fused curve's fit rows ran and the fused curve applies).

    backward: the same form fitted to Shah et al. 2024 Fig. 6 (backward, head dim 128, H100 SXM5,
    FLOPs counted as ATTENTION_BACKWARD_FLOPS x the forward's): FlashAttention-3 316, 424, 501, 542,
    559, 561 TFLOP/s, FlashAttention-2 214, 260, 291, 310, 318, 322 at 512 ... 16k. The figure has
    no causal panel: a causal backward is priced on this unmasked curve over the executed (causal)
    FLOPs, without the diagonal tiles' overhead the forward's causal curve shows (an assumption).

    Raises:
        SpecError: chunk_tokens is not positive; an unknown kernel.
    """
    if chunk_tokens <= 0:
        raise SpecError(f"value {chunk_tokens!r} must be > 0", key="chunk_tokens")
    if kernel not in ATTENTION_KERNELS:
        raise SpecError(f"value {kernel!r} not allowed; allowed: {', '.join(ATTENTION_KERNELS)}",
                        key="attention_kernel")
    cal = calibration()
    fa2 = kernel == "flash_attention_2" and (gpu is None or gpu_family(gpu, cal) in cal.fa2_families)
    if backward:
        ratio, l_half = (cal.fa2_backward_plateau_ratio, cal.fa2_backward_l_half) if fa2 else \
            (cal.backward_plateau_ratio, cal.backward_l_half)
        if l_half > 0:
            return ratio * chunk_tokens / (chunk_tokens + l_half)
    if fa2:
        if causal and cal.fa2_causal_l_half > 0:
            return cal.fa2_causal_plateau_ratio * chunk_tokens / (chunk_tokens + cal.fa2_causal_l_half)
        return cal.fa2_plateau_ratio * chunk_tokens / (chunk_tokens + cal.fa2_l_half)
    if causal and cal.causal_l_half > 0:
        return cal.causal_plateau_ratio * chunk_tokens / (chunk_tokens + cal.causal_l_half)
    return chunk_tokens / (chunk_tokens + cal.attention_l_half)


def attention_flops(gpu: GPUSpec, precision: str, *, chunk_tokens: float, kernel: str = "fused",
                    causal: bool = False, backward: bool = False) -> float:
    """FLOP/s of the attention core on a chunk of `chunk_tokens`: the core dtype's peak x
    `clock_fraction` x the family's bf16 e_max x `attention_efficiency` of the framework's
    `kernel` (the core dtype is bf16 under fp8); `causal`: per executed (causal-half) FLOP;
    `backward`: the backward kernel's rate on its ATTENTION_BACKWARD_FLOPS x forward FLOPs."""
    core = core_precision(precision)
    return (peak_flops(gpu, core) * clock_fraction(gpu) * efficiency_constants(gpu).e_max
            * attention_efficiency(chunk_tokens, kernel, gpu, causal=causal, backward=backward))


def executed_attention_fraction(seq_len: float, context: float) -> float:
    """Share of the attention-core FLOPs counted over the whole s x w score band (what MFU
    conventions count: `params_flops.flops_per_token` attention, 2 w a (d_qk + d_v) per token) that a
    fused causal kernel executes: query i attends to min(i, w) keys, so
    sum_{i=1..s} min(i, w) / (s w) = (w (w + 1) + 2 (s - w) w) / (2 s w); (s + 1) / 2s on a full
    layer (w = s), 1 - (w - 1) / 2s under a sliding window w.

    The executed-work model of every attention core the planner prices, training
    (`step_time._layer_compute_s`) and serving prefill (`serving.prefill_forward_s`) alike: a
    causal FlashAttention / cuDNN kernel skips the key tiles wholly above the diagonal
    (FlashAttention-2, Dao 2023 arXiv 2307.08691 §3.1.1 "Causal masking": blocks with all column
    indices above the row indices are skipped, "about 1.7-1.8x speedup"; FlashAttention-3 Fig. 5
    counts causal FLOPs as half). The tiles on the diagonal are computed in full and masked: that
    overhead is in the causal curve of `attention_efficiency`, not in this fraction. An unfused
    attention (no FlashAttention) computes the whole square and masks it afterwards: fraction 1,
    the caller's choice. What MFU reports is a separate convention (`planner.summary.mfu_basis`).

    Raises:
        SpecError: seq_len or context not positive, or context > seq_len.
    """
    if seq_len <= 0 or context <= 0 or context > seq_len:
        raise SpecError(f"seq_len {seq_len!r} and context {context!r} must be positive with context <= "
                        "seq_len", key="seq_len")
    w = context
    return (w * (w + 1) + 2 * (seq_len - w) * w) / (2 * seq_len * w)


FP8_CAST_BYTES_PER_ELEMENT = 6
"""HBM bytes moved to quantize one bf16 element for an fp8 GEMM with current (per-tensor dynamic)
scaling: the amax pass reads it (2), the fused cast-transpose reads it again (2) and writes the
row-wise fp8 copy (1) and the column-wise (transposed) copy (1) the backward's GEMMs need. Applies
to every linear input (forward) and output gradient (backward); weights are quantized once per
step (the fp8 weight cache kept across micro-batches, `is_first_microbatch`). Current scaling is
what the recipes measured here run (Megatron-Bridge `fp8cs` / FP8-CS; torchao float8 tensorwise
dynamic scaling, torchtitan's default); delayed scaling would skip the amax read (4 bytes).
Source: NVIDIA/TransformerEngine@d0067d0 transformer_engine/common/recipe/current_scaling.cu
(amax_kernel l. 33, launched before the cast l. 73), transformer_engine/pytorch/module/linear.py
l. 420-433 (input quantizer set to row-wise and column-wise usage when backward needs the input)
and l. 455-480 (weight quantizer, workspace updated on the first micro-batch only)."""


TORCHAO_CAST_BYTES_PER_ELEMENT = {"tensorwise": 6, "rowwise": 8, "rowwise_with_gw_hp": 3, "mxfp8": 6}
"""HBM bytes per linear input / output-gradient element of torchao's float8 casts in a forward +
backward pass (torchtitan's float8 converter), by recipe, with no fusion into the producing op:
- tensorwise: amax read (2), then one cast reading bf16 (2) and writing the row- and column-major
  fp8 copies (1 + 1): 6, as `FP8_CAST_BYTES_PER_ELEMENT`;
- rowwise: one kernel reads bf16 (2), writes the dim-0 fp8 copy (1) and a transposed bf16 copy
  (2); a second reads that (2) and writes the dim-1 fp8 copy (1): 8 -- each GEMM operand needs
  scales along its own reduction axis, so the backward's copies are re-cast from 16 bits;
- rowwise_with_gw_hp: the dim-0 cast only (2 + 1): 3; the weight-gradient GEMM reads bf16;
- mxfp8: two casts, each reading bf16 and writing fp8 (3 + 3): 6 (E8M0 scales ignored).
Source: pytorch/ao@0598012 torchao/testing/training/roofline_utils.py
`get_tensor_memory_traffic_ovhd_s` (tensor_role input / grad_output, fuse_with_prev False), the
roofline torchao's float8 README reproduces its H100 speedup tables with."""

ROWWISE_GEMM_FRACTION = 0.95
"""Speed of torchao's rowwise-scaled fp8 linear GEMMs relative to tensorwise ones on H100 (forward
and backward together), dimensionless: the middle of "most shapes within 90-100% of tensor-wise
efficiency, a long tail down to 50%" for `_scaled_mm` row-wise (a CUTLASS kernel; tensor-wise is
cuBLAS), Source: pytorch/pytorch#147971. Not fitted: no table of the rowwise kernel's own speed was
found in text (torchao's README per-shape speedups are images), and the one published training pair
(pytorch/ao@9519beb torchao/float8/README.md "Training benchmarks", NVIDIA H100, Llama3-8B, 8 GPUs
FSDP2, sequence 8192, torch.compile, per-op SAC: tensorwise with float8 all-gather 7,689.5 tokens/s,
rowwise with bf16 all-gather 6,768, ratio 0.880) is evaluation, not fit: the model gives 0.963 for
that job with the rowwise casts of `TORCHAO_CAST_BYTES_PER_ELEMENT` (tests/test_torchtitan_fp8_recipe.py).
Not modelled: torchao's backward GEMMs run without fast accumulation, where it calls the tensorwise
GEMM and rescales the output in an extra kernel per GEMM (pytorch/ao#2184), and the 2025-06
torchtitan rowwise runs under tp 8 ran at bf16 speed (pytorch/torchtitan#1207, "float8 rowwise
vanilla TP low throughput"), a TP interaction without a published mechanism; both make rowwise
slower than this prices it."""


def fp8_cast_bytes(linear_io_elements: float, torchao_recipe: str | None = None) -> float:
    """HBM bytes of the fp8 casts of a forward + backward pass whose linear GEMMs read
    `linear_io_elements` input elements (forward) plus output-gradient elements (backward):
    Transformer Engine's current scaling (`FP8_CAST_BYTES_PER_ELEMENT`), or with
    `torchao_recipe` (`precision.torchao_fp8_recipe`) torchao's (`TORCHAO_CAST_BYTES_PER_ELEMENT`)."""
    per_element = (FP8_CAST_BYTES_PER_ELEMENT if torchao_recipe is None
                   else TORCHAO_CAST_BYTES_PER_ELEMENT[torchao_recipe])
    return per_element * linear_io_elements


def torchao_fp8_linear_factor(gpu: GPUSpec, recipe: str | None, *, gemm_dim: float) -> float:
    """Time of torchtitan's fp8 linear GEMMs (forward + backward, priced as 3 x the forward) under
    torchao `recipe` over their time at the fp8 rate (`achieved_flops(gpu, "fp8", ...)`),
    dimensionless: 1 for tensorwise, mxfp8 and None (not torchao); 1 / ROWWISE_GEMM_FRACTION for
    rowwise; rowwise_with_gw_hp runs the output and input-gradient GEMMs rowwise and the
    weight-gradient GEMM in bf16 (torchao `Float8LinearConfig.from_recipe_name`: "high precision
    grad weight"; the roofline's `gemm_dtype_grad_weight = torch.bfloat16`, pytorch/ao@0598012
    torchao/testing/training/roofline_utils.py `get_gemm_time_sympy`):
    (2 / ROWWISE_GEMM_FRACTION + fp8 rate / bf16 rate) / 3."""
    if recipe == "rowwise":
        return 1.0 / ROWWISE_GEMM_FRACTION
    if recipe == "rowwise_with_gw_hp":
        ratio = achieved_flops(gpu, "fp8", gemm_dim=gemm_dim) / achieved_flops(gpu, "bf16", gemm_dim=gemm_dim)
        return (2.0 / ROWWISE_GEMM_FRACTION + ratio) / 3.0
    return 1.0


EXPERT_HOST_LAUNCHES = {
    "megatron": {("forward", "fp8"): 10, ("forward", "default"): 2,
                 ("backward", "fp8"): 12, ("backward", "default"): 4},
    "torchtitan": {},
    "deepspeed": {},
}
"""Kernel launches the host issues per LOCAL expert in one pass of a MoE layer's routed experts,
per framework and (pass, precision) -- the host work that grows with num_experts / ep
(`moe_expert_host_idle_s`); absent: 0.

megatron (TEGroupedMLP -> two Transformer Engine `GroupedLinear`s, fc1 and fc2; the
`moe_grouped_gemm` default of the recipes here): each GroupedLinear runs one cuBLAS GEMM per expert
(NVIDIA/TransformerEngine@d0067d0 transformer_engine/common/gemm/cublaslt_gemm.cu
`multi_stream_cublas_gemm`, l. 970-1011: one cublasLt call per GEMM of the group). Forward: 1 GEMM;
under fp8 current scaling (the H100 fp8 recipes' `fp8_cs`, NVIDIA-NeMo/Megatron-Bridge@067f987
perf_recipes/_common.py `_perf_precision`) also one quantization of that expert's input
(transformer_engine/pytorch/module/grouped_linear.py `_split_quantize`, l. 816 -> pytorch/csrc/
extensions/cast.cpp `multi_tensor_quantize_impl`, l. 894-935: a fused multi-tensor kernel only for
delayed scaling, else one quantizer call per split) = zero-amax + amax + scale + cast (pytorch/csrc/
quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl`; common/recipe/current_scaling.cu):
2 x (1 + 4) = 10; bf16 2. Backward (grouped_linear.py `backward`, l. 1262-1400): a data-gradient and
a weight-gradient GEMM per expert, under fp8 after the same per-split quantization of that expert's
output gradient (`_split_quantize(grad_output_view, ctx.m_splits, ...)`): 2 x (2 + 4) = 12; bf16 4.
Weights add none per micro-batch (the fp8 recipes keep them in fp8, `fp8_param_gather`).
torchtitan: one `torch._grouped_mm` per projection for all local experts (pytorch/torchtitan@b5bcd76
torchtitan/models/common/moe.py l. 95-106): nothing per expert. deepspeed: no MoE row to check
its expert loop against; none counted."""


def expert_host_launches(framework: str, phase: str, precision: str) -> int:
    """Launches per local expert in one `phase` ("forward" / "backward") pass
    (EXPERT_HOST_LAUNCHES); 0 for a framework that issues none per expert."""
    table = EXPERT_HOST_LAUNCHES.get(framework, {})
    return table.get((phase, precision), table.get((phase, "default"), 0))


KERNEL_LAUNCH_HOST_S = 1e-5
"""Host time of one kernel launch, s: 10 us, the geometric middle of "the launch time on the CPU
side is between 5-20 microseconds" (facebookresearch/HolisticTraceAnalysis docs/source/features/
cuda_kernel_launch_stats.rst, measured over PyTorch traces). Not its low end: a Megatron expert
GEMM is more host work than a bare launch -- Transformer Engine issues each through its own
cuBLASLt call, which creates the matrix layouts, the operation and preference descriptors and
queries the heuristic (~25 host API calls, NVIDIA/TransformerEngine@d0067d0 transformer_engine/
common/gemm/cublaslt_gemm.cu `cublas_gemm`, l. 315-775), and Megatron's DDP runs a Python hook per
expert weight per backward (NVIDIA/Megatron-LM@d98e8a6 megatron/core/distributed/
distributed_data_parallel.py l. 553-586; TE registers weight{i} per expert, pytorch/module/
grouped_linear.py l. 1738-1752); NVIDIA's MoE tuning card: "FP8 shifts bottleneck from
memory/compute to CPU overhead" (NVIDIA-NeMo/Megatron-Bridge@067f987 skills/nemo-mbridge-perf-moe-
optimization-workflow/card.yaml l. 192). No published host time per grouped-GEMM member narrows the
range. Not fitted; checked against the held-out MoE evidence after refitting `moe_host_sync_s` on
E13 (5 us -> 10 us): E10 -4.4% -> -1.3%, E9 +1.4% -> +5.7% (docs/validation.md), NVIDIA's B200
Qwen3-30B-A3B micro-batch 1 / 4 +18% / -10% -> +5% / -16% (tests/test_expert_plans.py). Decides
the Qwen3-30B-A3B bf16 job on 16 H100 (senior9 #4): at 5 us the 128 local experts' loop hides under
micro-batch 4's GEMMs and the plan is ep1 pp8; at 10 us ep4 pp4; at 20 us ep8 pp2."""


def moe_expert_host_idle_s(local_experts: int, launches_per_expert: int, gpu_experts_s: float) -> float:
    """GPU idle, s, while the host issues the routed-expert phase of one pass of a dropless MoE
    layer: max(0, local_experts x launches_per_expert x KERNEL_LAUNCH_HOST_S - gpu_experts_s),
    `gpu_experts_s` the GPU time of that phase's kernels.

    Mechanism: the per-expert launch loop sizes each launch by that expert's token count, which
    the host holds only after the layer's device-to-host synchronization (`moe_host_sync_s`), so in
    the forward the GPU's queue is empty when the loop starts and the phase takes the longer of
    its host issue and its GPU work; the backward has no sync, but each expert's launches follow
    the previous expert's in one host thread, so a loop issued slower than it runs leaves the same
    idle (an upper bound there: the host may have run ahead before the loop). Grows with the
    local experts (num_experts / ep) and shrinks with the tokens each receives: the host side of
    "CPU Overhead Bottleneck ... Decrease TP size or increase micro-batch size" in Megatron's MoE
    README (NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/moe/README.md).

    Raises:
        SpecError: local_experts < 1 or launches_per_expert < 0."""
    if local_experts < 1:
        raise SpecError(f"value {local_experts!r} must be >= 1", key="local_experts")
    if launches_per_expert < 0:
        raise SpecError(f"value {launches_per_expert!r} must be >= 0", key="launches_per_expert")
    return max(0.0, local_experts * launches_per_expert * KERNEL_LAUNCH_HOST_S - gpu_experts_s)


def moe_host_sync_s() -> float:
    """Time one dropless MoE layer's forward pass stalls the GPU on the host, s: [Empirical]
    (`calibration/training.yaml` `moe_host_sync`, fitted by `make calibrate` on the MoE FIT rows),
    the same on every GPU (a host-side cost).

    Mechanism: without a capacity factor the number of tokens each local expert receives is known
    only on the GPU, and the host needs it before it can size the buffers and launch the grouped
    expert GEMMs, so every MoE layer's forward copies it to the host and synchronizes: the GPU's
    queue drains, and the kernels after the sync wait for the host to issue them (router, permute
    and the per-expert fp8 casts are many small kernels). Backward reuses the sizes (no sync);
    a full recompute re-runs the forward and its sync. Sources: NVIDIA/Megatron-LM@d98e8a6
    megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher.
    _maybe_dtoh_and_synchronize` (l. 921-958, `d2h_event.synchronize()` unless drop-and-pad),
    `_HybridEPManager.dispatch` (l. 1111, 1173-1178: "CPU sync" when num_permuted_tokens is
    None, the dropless default), `_DeepepManager` (l. 1450, `.item()`); experts.py TEGroupedMLP
    (l. 897, `tokens_per_expert.tolist()` under fp8); README.md of that folder ("CPU Overhead
    Bottleneck": gaps between kernels; CUDA graphs for attn / moe_router / moe_preprocess);
    torchtitan syncs likewise for its all-to-all splits (pytorch/torchtitan@b5bcd76
    torchtitan/models/common/token_dispatcher.py l. 307-308, `.tolist()`). Applied to every
    framework's MoE layers; DeepSpeed's capacity-padded MoE may not sync (not verified, no
    DeepSpeed MoE row to test it on).
    Evidence it is a fixed host cost, not GPU work: Megatron-Bridge performance-summary-archive.md
    (NVIDIA-NeMo/Megatron-Bridge@067f987) 25.11, Qwen3-30B-A3B, 8 GPUs EP8 MXFP8: DGX-B200 at
    micro-batch 1, 9,299 tokens/s/GPU, DGX-GB200 at micro-batch 4, 23,766 (2.6x from a larger
    micro-batch of the same GEMM shapes per expert).
    Why a per-sync addend and not max(0, host time - GPU time): in the Nsight A/B of E13's shape in
    bf16 (Megatron-Bridge@067f987 skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md, EP overlap
    off) the host thread spent 3.109 s per step in the "HybridEP metadata-preprocess" NVTX range
    (an NVTX range times the host thread; this one holds the dispatcher's wait for the token
    counts, `_HybridEPManager.dispatch`), 1.01 ms per MoE layer forward (64 micro-batches x 48
    layers = 3,072): the host mostly waited for the GPU there, i.e. it was ahead, yet the GPU
    idled 24.714 - 22.821 s (step - GPU-active union) = 0.62 ms per sync -- after the sync the
    queue refills only as the host issues. The part
    that grows with the local experts is a separate term (`moe_expert_host_idle_s`); this constant
    is the rest. What it absorbs beyond that 0.62 ms, per sync of the fitted 3.83 ms (11.8 s of
    E13's step), against that profile: (a) communication, 0.46 ms: the profile's 8.25 s of
    communication kernels (9.079 ms / 0.11%) include the permute and unpermute, which that bf16
    recipe fuses into HybridEP's kernels (Megatron-Bridge@067f987 perf_recipes/qwen/h100/
    qwen3_moe.py l. 40 `moe_permute_fusion_into_hybridep = True`; Megatron-LM@d98e8a6
    transformer_config.py l. 904: default False, as the fp8 recipe leaves it) and the model
    prices as compute (`step_time._moe_memory_bytes`, 1.93 s): 4.95 + 1.93 = 6.9 s against
    8.25 s, the 2-node shortfall of the flex price against HybridEP's own kernel table
    (`comm._flex_dispatch`); (b) the rest of the GPU work, 1.07 ms: 14.57 s of non-communication
    kernels (22.821 - 8.25) against the model's 11.3 s in bf16; (c) 1.47 ms: the fp8 row (NeMo
    26.04.01) is 4.5 s slower than that bf16 run, which was measured later (2026-07-25) with the
    permute fused -- not all of it is fp8, and no sourced fp8 term explains it. (a) and (b)
    grow with the tokens, not the micro-batches; a held-out check of the per-micro-batch part:
    NVIDIA's 8-GPU B200 Qwen3-30B-A3B runs, micro-batch 1 -> 4 (tests/test_expert_plans.py
    `test_moe_micro_batch_gain_is_within_nvidias_b200_measurement`: 2.75x measured with other
    changes, 2.22x modelled, 1.86x without this stall). Split by that reading -- 0.62 ms per sync
    and the rest per token ((2.54 - 0.62) ms / 4,096 tokens = 0.47 us per token per MoE layer
    forward, E13 still exact) -- the pair falls to 1.61x with micro-batch 4 at 16,322 tokens/s/GPU,
    39% under the 26,695 measured: the one published micro-batch pair asks for more cost per
    micro-batch than the profile's idle, so the split is not made. Split as 0.62 ms plus the launch
    loop at HTA's 20 us (`KERNEL_LAUNCH_HOST_S`, E13 then 1.7% fast) it holds (2.39x) but the
    held-out E9 (one local expert: no loop) is predicted 12.6% fast and E10 7.0%. A candidate that
    fits all three, not built: the host's issue time of a MoE layer's kernels after the sync
    against their GPU time (as `moe_expert_host_idle_s` does for the expert loop), which grows on
    a B200 (half the GPU time per layer, the same host) and at micro-batch 1. (The (a)-(c) split
    above was computed when the fit gave 3.83 ms at a 5 us launch; it gives 2.54 ms at 10 us.)
    Fit / evaluation: fitted on E13 only (H100, the one MoE FIT row); evaluated, never fitted, on
    E9 (B200, +5.7%) and E10 (H100, -7.2%; docs/validation.md) and on NVIDIA's Qwen3-30B-A3B
    8-GPU MXFP8 EP8 runs outside the shared files (tests/test_expert_plans.py): NeMo 25.11 B200
    micro-batch 1 +9.2% and GB200 micro-batch 4 +3.1% (one release; without this stall micro-batch
    1 is +56%, with only the profile's 0.62 ms +41%), 26.02 / 26.02.01 B200 micro-batch 1 / 4
    +4.8% / -15.6%. Not fitted there: the issue fits on the shared files only.
    Forms tried and not built (2026-12-02, expert3; ratios are tests/test_expert_plans.py's plan /
    recipe step): (1) 0.62 ms per sync plus the rest as GPU work per token (HBM bytes per token,
    fitted on E13): E13 0.91, E9 0.92, but E10 -11% and the H100/H200 fp8 evaluation bias -5.4%
    (bar 5%); (2) max(0, S - the layer's forward GPU time), S fitted on E13 (the host-bound form
    NeMo's 25.09 token-drop vs 25.11 dropless B200 micro-batch 1 rows, 18,066 vs 9,299, and the
    GB200 micro-batch 4 pair, 22,775 vs 23,766, point to): B200 26.02 pair 2.84x (above the
    2.75x bound), E9 +12.3%, E13's plan 0.69; (3) `KERNEL_LAUNCH_HOST_S` 20 us and this refitted
    on E13 (0.78 ms, near the profile's 0.62): NVIDIA's DeepSeek-V3 B200 recipe +28% -> +2%, E10
    -1.5%, but E9 +12.0% and the 26.02 B200 micro-batch 4 -24%."""
    return calibration().moe_host_sync_s

