"""Fit the step-time model's [Empirical] GEMM-efficiency constants per GPU family
(`calibration/training.yaml`, read by `planner.cost.compute`) on published training runs.

Data: every row of `training_runs.yaml` and `expert_configs.yaml` (tests/data/reference, copies of
shared/reference) that `planner.validate_training` expresses, predicted through its `predict`
(the code path of `planner explain` and `planner validate`).

Split (deterministic, `validate_training.part_of` and `stratified_parts`): a row is in the
EVALUATION part when crc32(id) % 4 == 0, else in the FIT part, except that each GPU family whose MoE
rows all hash into FIT sends its MoE row of the smallest crc32(id) to the evaluation part (rule
fixed on ids and row kinds, not on errors: E9 for B200, E10 for H100). The fit never sees
evaluation rows.

Fit: damped Gauss-Newton on the log error log(predicted / published) of every fit row (each step a
numpy.linalg.lstsq of the residuals on a finite-difference Jacobian), parameters:
- e_max per GPU family with fit rows (bf16/fp16 linear GEMMs and the attention core; its fp8 rows
  inform it too, through the ratio);
- the clock fraction of each power-limited part (`POWER_LIMITED`: Grand Teton's 500 W H100),
  held between the datasheet bounds of the parts that bracket it; its rows share their family's
  e_max with every other framework's rows (no family is one cluster's or one framework's);
- one fp8_ratio shared by every family with fp8 tensor cores: fp8_e_max = fp8_ratio x e_max, the
  fraction of the fp8 peak a large fp8 GEMM reaches relative to a bf16 one. One shared ratio keeps
  fp8 structural (a per-family fp8 constant fitted next to a per-family bf16 one absorbs whatever
  else differs between a family's bf16 and fp8 rows: compile, overlap, and gave fp8 linear-GEMM
  speed-ups of 2.3-3x, beyond the 2x the tensor cores have).
d_half is not fitted: the rows do not determine it (every fit row's narrowest GEMM dimension is
>= 768, and the total sum of squares changes by < 2% for d_half 8-128), so it is carried as the
file's `d_half` (`D_HALF`). A family without fit rows in a precision keeps a stated stand-in
(an explicit `fallback`, written by `fit`). Nothing is tuned per row; the attention-core curves (the fused kernel's and
FlashAttention-2's) are fitted to a paper figure (`FLASH_ATTENTION_FIGURE`), not to training rows.

`python -m planner.calibrate --write` (Makefile: `make calibrate`) regenerates the file and
prints the evaluation-part error.
"""

from __future__ import annotations

import datetime
import functools
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

from planner import validate_training as vt
from planner.cost import compute
from planner.cost import step_time as st

FAMILIES = {"A100": ["A800"], "H100": ["H200", "H800", "H20", "GH200"],
            "B200": ["GB200"], "MI300X": []}
"""Families written to the file and the GPU-name substrings that alias them (same SM
architecture: Ampere, Hopper, Blackwell, CDNA3). One family per architecture, whatever the
framework: what differs between frameworks is priced by its mechanism (fused elementwise
kernels, attention kernel, overlap schemes: `cost.step_time`), and what differs between parts
of one architecture by the part's datasheet (peaks, HBM bandwidth) and, for a power-limited
part, its sustained clock (`POWER_LIMITED`)."""
POWER_LIMITED = {
    "H100-SXM-96GB": {
        "power_limit_w": 500,
        "bounds": (835.5 / 989.4, 1.0),
        "basis": "H100 SXM 96 GB HBM2e of Meta's Grand Teton at its default 500 W limit (hardware/"
                 "grand-teton.yaml; pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md "
                 "@31a17bfd Hardware: 'the default 500W power limit'; footnote 2: 'the actual peak "
                 "TFLOPs number is between SXM and NVL, and we don't know its exact value'). Bounds "
                 "from the datasheets of the two parts that footnote names: H100 NVL (400 W) 835.5 "
                 "dense bf16 TFLOP/s, H100 SXM (700 W) 989.4 (NVIDIA H100 datasheet): the clock "
                 "fraction lies in [835.5/989.4, 1]. No published clock of this part under load: "
                 "[Empirical] fitted within the bounds on the FIT rows of this GPU, with every other "
                 "constant, so that the framework's mechanisms (E18, torchtitan on a 700 W H200, "
                 "shares the H100 e_max) are not absorbed into it.",
    },
}
"""Power-limited GPU parts (name substring -> limit, datasheet bounds of the clock fraction,
basis): `compute.clock_fraction`."""
FLASH_ATTENTION_FIGURE = {
    "seq_len": (512, 1024, 2048, 4096, 8192, 16384),
    "fused": (467, 565, 625, 638, 646, 648),
    "flash_attention_2": (309, 350, 362, 368, 370, 370),
    "fused_causal": (292, 423, 521, 579, 602, 616),
    "flash_attention_2_causal": (191, 260, 298, 319, 333, 335),
    "fused_backward": (316, 424, 501, 542, 559, 561),
    "flash_attention_2_backward": (214, 260, 291, 310, 318, 322),
}
"""TFLOP/s of the attention forward pass, head dim 128, H100 SXM5, B x S = 16k: FlashAttention-3
("fused", the curve cuDNN's bars follow within 8% from 1k) and FlashAttention-2, without a mask and
(`*_causal`) with a causal mask, whose FLOPs the figure counts on half the square; `*_backward`: the
backward pass without a mask, FLOPs counted as 2.5x the forward's (`compute.ATTENTION_BACKWARD_FLOPS`).
Source: Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608) Fig. 5, the panels forward without /
with causal mask, head dim 128, and Fig. 6, backward, head dim 128 (bar labels)."""
DEFAULT_FAMILY = "H100"
D_HALF = 64.0
"""[Empirical] GEMM width at half efficiency, every family: the grid fit (0-512) of the earlier
model on the 10 Narayanan 2021 Table 1 rows; not identifiable from the current fit rows (see the
module docstring), so not refitted."""
NO_FP8 = {"A100"}
"""Families without fp8 tensor cores (Ampere)."""
START = {"e_max": 0.65, "d_half": D_HALF, "fp8_ratio": 0.9, "moe_host_sync_s": 1e-3}
BOUNDS = {"e_max": (0.2, 0.95), "fp8_ratio": (0.4, 1.0), "moe_host_sync_s": (1e-6, 0.05)}
"""fp8_ratio <= 1: an fp8 GEMM reaches no larger fraction of its (2x) peak than a bf16 one of the
same shape (cuBLASLt E4M3 8192^3 on H100 SXM: ~1,610 TFLOP/s, 0.81 of 1,979)."""


def all_rows() -> list[vt.Row]:
    """Every row of both reference files that can be predicted (`validate_training.load_rows`;
    rows not expressible or without a published throughput are left out of the fit)."""
    rows = vt.load_rows(vt.TRAINING_RUNS) + vt.load_rows(vt.EXPERT_CONFIGS)
    return [r for r in rows if not r.not_expressible and r.published]


def family_of(row: vt.Row) -> str:
    """Calibration family of the row's GPU under this module's FAMILIES (`compute.gpu_family`)."""
    return compute.gpu_family(vt._cluster(row.cluster, row.gpus).gpu, _calibration(_start()))


def _start() -> dict[str, dict]:
    return {name: {"aliases": aliases, **START} for name, aliases in FAMILIES.items()}


def _start_clocks() -> dict[str, float]:
    return {part: 1.0 for part in POWER_LIMITED}


def _log_error(row: vt.Row) -> float:
    """log(1 + throughput error) of the row's prediction (`validate_training.predict`)."""
    return math.log1p(vt.predict(row).error)


@functools.cache
def attention_curve(kernel: str) -> tuple[float, float, float]:
    """(plateau TFLOP/s, l_half tokens, rms log error) of P L / (L + l_half) fitted to the
    `kernel`'s bars of FLASH_ATTENTION_FIGURE in log error (numpy least squares for log P at each
    l_half of a 0.5-token grid, the best kept). Cached: FLASH_ATTENTION_FIGURE is constant."""
    seq = np.array(FLASH_ATTENTION_FIGURE["seq_len"], dtype=float)
    y = np.log(np.array(FLASH_ATTENTION_FIGURE[kernel], dtype=float))
    best = (math.inf, 0.0, 0.0)
    for l_half in np.arange(0.5, 2000.0, 0.5):
        shape = np.log(seq) - np.log(seq + l_half)
        log_p = float(np.linalg.lstsq(np.ones((len(seq), 1)), y - shape, rcond=None)[0][0])
        r = y - log_p - shape
        if r @ r < best[0]:
            best = (float(r @ r), float(l_half), math.exp(log_p))
    return best[2], best[1], math.sqrt(best[0] / len(seq))


def _calibration(families: dict[str, dict], moe_host_sync_s: float | None = None,
                 clocks: dict[str, float] | None = None) -> compute.Calibration:
    """The file's calibration with `families`, the power-limited parts' clock fractions and the
    MoE host stall (None: the file's), the attention curves of FLASH_ATTENTION_FIGURE."""
    base = _file_calibration(compute.calibration_path())
    if moe_host_sync_s is not None:
        base = replace(base, moe_host_sync_s=moe_host_sync_s)
    if clocks is not None:
        base = replace(base, clock_fractions={k.upper(): v for k, v in clocks.items()})
    consts = {}
    for name, entry in families.items():
        src = families[entry["fallback"]] if "fallback" in entry else entry
        consts[name] = compute.GemmEfficiency(
            family=entry.get("fallback", name), e_max=src["e_max"], d_half=src["d_half"],
            fp8_e_max=src.get("fp8_e_max"), basis=entry.get("basis", ""))
    aliases = {a.upper(): f for f, al in FAMILIES.items() for a in al}
    fused, fa2 = attention_curve("fused"), attention_curve("flash_attention_2")
    causal, fa2_causal = attention_curve("fused_causal"), attention_curve("flash_attention_2_causal")
    bwd, fa2_bwd = attention_curve("fused_backward"), attention_curve("flash_attention_2_backward")
    return replace(base, families=consts, aliases=aliases, default_family=DEFAULT_FAMILY,
                   attention_l_half=fused[1], fa2_plateau_ratio=round(fa2[0] / fused[0], 4),
                   fa2_l_half=fa2[1], fa2_families=(DEFAULT_FAMILY,),
                   causal_plateau_ratio=round(causal[0] / fused[0], 4), causal_l_half=causal[1],
                   fa2_causal_plateau_ratio=round(fa2_causal[0] / fused[0], 4), fa2_causal_l_half=fa2_causal[1],
                   backward_plateau_ratio=round(bwd[0] / fused[0], 4), backward_l_half=bwd[1],
                   fa2_backward_plateau_ratio=round(fa2_bwd[0] / fused[0], 4), fa2_backward_l_half=fa2_bwd[1])


@functools.cache
def _file_calibration(path: Path) -> compute.Calibration:
    """The committed file's calibration (`compute.load_calibration`), read once per path: a fit
    re-prices every row at each trial parameter vector and the file does not change meanwhile."""
    return compute.load_calibration(path)


def _errors(rows: list[vt.Row], families: dict[str, dict], moe_host_sync_s: float,
            clocks: dict[str, float]) -> np.ndarray:
    """log(predicted / published throughput) of `rows` under `families`, the MoE host stall and
    the clock fractions."""
    compute.use_calibration(_calibration(families, moe_host_sync_s, clocks))
    st.clear_caches()
    try:
        return np.array([_log_error(r) for r in rows])
    finally:
        compute.use_calibration(None)
        st.clear_caches()


def _families_at(theta: np.ndarray, names: list[str]) -> dict[str, dict]:
    """Family entries for log-parameters theta = [log e_max of each of `names`..., log clock
    fraction of each POWER_LIMITED part..., log fp8_ratio, log moe_host_sync_s]: fp8_e_max =
    fp8_ratio x e_max for every family with fp8 tensor cores."""
    families = _start()
    for name, t in zip(names, theta[:len(names)]):
        families[name]["e_max"] = float(np.exp(t))
    for name, entry in families.items():
        entry["fp8_e_max"] = None if name in NO_FP8 else float(np.exp(theta[-2])) * entry["e_max"]
    return families


def _clocks_at(theta: np.ndarray, names: list[str]) -> dict[str, float]:
    """Clock fractions of the POWER_LIMITED parts in theta (`_families_at`)."""
    return {part: float(np.exp(t)) for part, t in zip(POWER_LIMITED, theta[len(names):-2])}


def _gauss_newton(rows: list[vt.Row], names: list[str], groups: list[list[int]]) -> np.ndarray:
    """Damped Gauss-Newton in log error over theta (`_families_at`): column j of the Jacobian is
    computed on the rows `groups[j]` only (a family's e_max moves only its own rows; a part's
    clock only that part's rows; the ratio only the fp8 rows); a step is halved until the sum of
    squares falls."""
    keys = ["e_max"] * len(names) + [None] * len(POWER_LIMITED) + ["fp8_ratio", "moe_host_sync_s"]
    bounds = [BOUNDS[k] if k else POWER_LIMITED[part]["bounds"]
              for k, part in zip(keys, [None] * len(names) + list(POWER_LIMITED) + [None, None])]
    lo, hi = np.log([b[0] for b in bounds]), np.log([b[1] for b in bounds])
    theta = np.log([START[k] if k else 1.0 for k in keys])

    def residual(t: np.ndarray, subset: list[int] | None = None) -> np.ndarray:
        chosen = rows if subset is None else [rows[i] for i in subset]
        return _errors(chosen, _families_at(t, names), float(np.exp(t[-1])), _clocks_at(t, names))

    r = residual(theta)
    for _ in range(30):
        jac = np.zeros((len(rows), len(theta)))
        for j, subset in enumerate(groups):
            if not subset:
                continue
            step = theta.copy()
            step[j] += 1e-3
            jac[subset, j] = (residual(step, subset) - r[subset]) / 1e-3
        delta, *_ = np.linalg.lstsq(jac, -r, rcond=None)
        for alpha in (1.0, 0.5, 0.25, 0.125, 0.0625):
            trial = np.clip(theta + alpha * delta, lo, hi)
            r_trial = residual(trial)
            if r_trial @ r_trial < r @ r:
                break
        else:
            break
        done = np.max(np.abs(trial - theta)) < 1e-5
        theta, r = trial, r_trial
        if done:
            break
    return theta


def _gpu_name(row: vt.Row) -> str:
    return vt._cluster(row.cluster, row.gpus).gpu.name.upper()


def fit(rows: list[vt.Row]) -> tuple[dict[str, dict], float, str, dict, dict]:
    """(family entries of the file, the shared fp8_ratio, a note when the ratio sits at its bound,
    the file's `moe_host_sync` entry, its `power_limited_gpus` entries) fitted on the FIT part of
    `rows` (see the module docstring)."""
    fit_rows = [r for r in rows if r.part == "fit"]
    family = [family_of(r) for r in fit_rows]
    names = [name for name in FAMILIES if name in family]
    groups = [[i for i, f in enumerate(family) if f == name] for name in names]
    groups += [[i for i, r in enumerate(fit_rows) if part.upper() in _gpu_name(r)] for part in POWER_LIMITED]
    groups.append([i for i, r in enumerate(fit_rows) if r.precision == "fp8"])
    groups.append([i for i, r in enumerate(fit_rows) if r.moe])
    theta = _gauss_newton(fit_rows, names, groups)
    ratio = round(float(np.exp(theta[-2])), 4)
    moe_rows = sorted(r.id for r in fit_rows if r.moe)
    host = {"seconds": float(f"{np.exp(theta[-1]):.3g}"),
            "basis": f"[Empirical] host stall of one dropless MoE layer's forward pass "
                     f"(planner.cost.compute.moe_host_sync_s: the device-to-host copy and "
                     f"synchronization of the tokens per expert; the part that does not grow with "
                     f"the local experts, whose launch loop is compute.moe_expert_host_idle_s), "
                     f"one value for every GPU, fitted "
                     f"with the e_max values on the {len(moe_rows)} MoE FIT row(s) listed",
            "fit_rows": moe_rows}
    powered = {}
    for part, fraction in _clocks_at(theta, names).items():
        lo, hi = POWER_LIMITED[part]["bounds"]
        mine = sorted(r.id for r in fit_rows if part.upper() in _gpu_name(r))
        edge = (" At its lower bound: the fit rows ask for less, i.e. not all that slows them is "
                "modelled (the Dec-2024 torchtitan's unfused RMSNorm and older AsyncTP among it, "
                "docs/validation.md)." if fraction <= lo + 1e-4 else "")
        powered[part] = {"power_limit_w": POWER_LIMITED[part]["power_limit_w"],
                         "clock_fraction": round(fraction, 4), "bounds": [round(lo, 4), hi],
                         "basis": POWER_LIMITED[part]["basis"] + edge, "fit_rows": mine}
    at_bound = ratio >= BOUNDS["fp8_ratio"][1] - 1e-4
    out: dict[str, dict] = {}
    for name, aliases in FAMILIES.items():
        mine = sorted(r.id for r, f in zip(fit_rows, family) if f == name)
        if not mine:
            out[name] = {"aliases": aliases, "fallback": DEFAULT_FAMILY,
                         "basis": f"no fit row of training_runs.yaml / expert_configs.yaml runs on {name}: "
                                  f"the {DEFAULT_FAMILY} constants stand in (explicit fallback, not a fit)"}
            continue
        e_max = round(float(np.exp(theta[names.index(name)])), 4)
        precisions = sorted({r.precision for r, f in zip(fit_rows, family) if f == name})
        fp8 = "no fp8 (no fp8 tensor cores)" if name in NO_FP8 else "fp8_e_max = fp8_ratio x e_max"
        out[name] = {"aliases": aliases, "e_max": e_max, "d_half": D_HALF,
                     "fp8_e_max": None if name in NO_FP8 else round(ratio * e_max, 4),
                     "basis": f"[Empirical] e_max fitted on the {len(mine)} FIT rows listed "
                              f"({'/'.join(precisions)}); {fp8}; d_half not fitted (planner.calibrate.D_HALF)",
                     "fit_rows": mine}
    note = (" (at its upper bound: the fp8 fit rows ask for more, i.e. the model under-predicts them "
            "for reasons outside the GEMMs)" if at_bound else "")
    return out, ratio, note, host, powered


def evaluate(rows: list[vt.Row], families: dict[str, dict] | None = None,
             moe_host_sync_s: float | None = None, clocks: dict[str, float] | None = None) -> list[dict]:
    """Predicted vs published per row (all parts) under `families`, the MoE host stall and the
    clock fractions (None: the file's); `error` is the throughput error
    (`validate_training.throughput_error`)."""
    if families is not None:
        compute.use_calibration(_calibration(families, moe_host_sync_s, clocks))
    st.clear_caches()
    try:
        out = []
        for r in rows:
            pred = vt.predict(r)
            out.append(dict(id=r.id, source=r.source, family=family_of(r), precision=r.precision,
                            framework=r.layout.framework,
                            part=r.part, convention=r.convention, published=r.published,
                            predicted=pred.predicted, error=pred.error))
        return out
    finally:
        compute.use_calibration(None)
        st.clear_caches()


def summary(results: list[dict]) -> dict:
    """median / mean / max |error| and signed mean, %, of `results`."""
    if not results:
        return {"n": 0}
    err = np.array([r["error"] for r in results]) * 100
    return {"n": len(results), "median_abs_error_pct": round(float(np.median(np.abs(err))), 1),
            "mean_abs_error_pct": round(float(np.mean(np.abs(err))), 1),
            "max_abs_error_pct": round(float(np.max(np.abs(err))), 1),
            "bias_pct": round(float(np.mean(err)), 1)}


def grouped(results: list[dict]) -> dict:
    """`summary` per part, and per part x family x precision."""
    out = {}
    for part in ("fit", "evaluation"):
        mine = [r for r in results if r["part"] == part]
        groups = {f"{r['family']} {r['precision']}" for r in mine}
        out[part] = {"all": summary(mine),
                     **{g: summary([r for r in mine if f"{r['family']} {r['precision']}" == g])
                        for g in sorted(groups)}}
    return out


def document(families: dict[str, dict], fp8_ratio: float, note: str, host: dict,
             powered: dict, results: list[dict]) -> dict:
    """The calibration file's contents."""
    fused, fa2 = attention_curve("fused"), attention_curve("flash_attention_2")
    causal, fa2_causal = attention_curve("fused_causal"), attention_curve("flash_attention_2_causal")
    bwd, fa2_bwd = attention_curve("fused_backward"), attention_curve("flash_attention_2_backward")
    return {
        "description": "[Empirical] GEMM-efficiency constants of the step-time model "
                       "(planner/cost/compute.py) per GPU family: efficiency(d) = e_max d/(d + d_half) "
                       "of the bf16/fp16 peak for linear GEMMs and (times the attention_core factor) "
                       "the attention core; fp8_e_max the same for fp8 linear GEMMs of the fp8 peak; "
                       "a power-limited part runs its compute at clock_fraction of the peak.",
        "fitted_on": "tests/data/reference/training_runs.yaml + expert_configs.yaml, every row "
                     "planner.validate_training expresses, FIT part: crc32(id) % 4 != 0; "
                     "evaluation part: crc32(id) % 4 == 0, and per GPU family whose MoE rows all "
                     "hash into FIT its MoE row of the smallest crc32(id) "
                     "(planner.validate_training.stratified_parts: E9, E10)",
        "method": "Gauss-Newton on log(predicted/published), each step numpy.linalg.lstsq on a "
                  "finite-difference Jacobian, per family; regenerate: make calibrate",
        "generated": datetime.date.today().isoformat(),
        "default_family": DEFAULT_FAMILY,
        "attention_core": {
            "l_half_tokens": fused[1],
            "basis": f"FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608) Fig. 5, forward, "
                     f"head dim 128, no causal mask, H100 SXM5: P L/(L + l_half) least squares in log "
                     f"error on its six FlashAttention-3 bars (512-16k; planner.calibrate."
                     f"FLASH_ATTENTION_FIGURE), P = {fused[0]:.0f} TFLOP/s, rms {100 * fused[2]:.1f}%; "
                     f"the fused kernel (cuDNN / FlashAttention-3); not fitted on training rows",
            "causal": {
                "plateau_ratio": round(causal[0] / fused[0], 4), "l_half_tokens": causal[1],
                "basis": f"the same figure's causal panel (forward, with causal mask, head dim 128; FLOPs "
                         f"counted on half the square), six FlashAttention-3 bars fitted the same way: Pc = "
                         f"{causal[0]:.0f} TFLOP/s, l_half {causal[1]:g}, rms {100 * causal[2]:.1f}%; "
                         f"plateau_ratio = Pc / P. The rate of the executed (causal) score FLOPs "
                         f"(planner.cost.compute.executed_attention_fraction). Not fitted on training rows"},
            "backward": {
                "plateau_ratio": round(bwd[0] / fused[0], 4), "l_half_tokens": bwd[1],
                "basis": f"Fig. 6 of the same paper (backward, head dim 128, FLOPs counted as 2.5x the "
                         f"forward's, planner.cost.compute.ATTENTION_BACKWARD_FLOPS), six FlashAttention-3 bars "
                         f"fitted the same way: Pb = {bwd[0]:.0f} TFLOP/s, l_half {bwd[1]:g}, rms "
                         f"{100 * bwd[2]:.1f}%; plateau_ratio = Pb / P. Not fitted on training rows"},
            "flash_attention_2": {
                "plateau_ratio": round(fa2[0] / fused[0], 4), "l_half_tokens": fa2[1],
                "families": [DEFAULT_FAMILY],
                "basis": f"the same figure's six FlashAttention-2 bars, fitted the same way: P2 = "
                         f"{fa2[0]:.0f} TFLOP/s, l_half {fa2[1]:g}, rms {100 * fa2[2]:.1f}%; plateau_ratio "
                         f"= P2 / P. Measured on H100 (families); elsewhere the fused curve applies "
                         f"(FlashAttention-3 is Hopper-only). Not fitted on training rows",
                "causal": {
                    "plateau_ratio": round(fa2_causal[0] / fused[0], 4), "l_half_tokens": fa2_causal[1],
                    "basis": f"the causal panel's six FlashAttention-2 bars, fitted the same way: P2c = "
                             f"{fa2_causal[0]:.0f} TFLOP/s, l_half {fa2_causal[1]:g}, rms "
                             f"{100 * fa2_causal[2]:.1f}%; plateau_ratio = P2c / P"},
                "backward": {
                    "plateau_ratio": round(fa2_bwd[0] / fused[0], 4), "l_half_tokens": fa2_bwd[1],
                    "basis": f"Fig. 6's six FlashAttention-2 backward bars, fitted the same way: P2b = "
                             f"{fa2_bwd[0]:.0f} TFLOP/s, l_half {fa2_bwd[1]:g}, rms {100 * fa2_bwd[2]:.1f}%; "
                             f"plateau_ratio = P2b / P"}},
        },
        "fp8_ratio": fp8_ratio,
        "fp8_ratio_basis": "[Empirical] fp8_e_max / e_max, one value for every family with fp8 tensor "
                           "cores, fitted with the e_max values on every fp8 FIT row, bounded by 1 "
                           "(planner.calibrate.BOUNDS)" + note,
        "moe_host_sync": host,
        "power_limited_gpus": powered,
        "families": families,
        "evaluation": grouped(results)["evaluation"],
    }


def write_calibration(path: Path = compute.CALIBRATION_FILE) -> dict:
    """Fit on the FIT part and write `path` with its provenance; returns the document."""
    rows = all_rows()
    families, fp8_ratio, note, host, powered = fit(rows)
    clocks = {part: entry["clock_fraction"] for part, entry in powered.items()}
    doc = document(families, fp8_ratio, note, host, powered,
                   evaluate(rows, families, host["seconds"], clocks))
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100), encoding="utf-8")
    compute._default_calibration.cache_clear()
    _file_calibration.cache_clear()
    return doc


if __name__ == "__main__":
    from planner import report

    if "--write" in sys.argv:
        report.dump(write_calibration()["evaluation"], "yaml")
    else:
        report.dump(grouped(evaluate(all_rows())), "yaml")
