"""Fit the step-time model's [Empirical] GEMM-efficiency constants per GPU family
(`calibration/training.yaml`, read by `planner.cost.compute`) on published training runs.

Data: every row of `training_runs.yaml` and `expert_configs.yaml` (tests/data/reference, copies of
shared/reference) that `planner.validate_training` expresses, predicted through its `predict`
(the code path of `planner explain` and `planner validate`).

Split (deterministic, `validate_training.part_of`): a row is in the EVALUATION part when
crc32(id) % 4 == 0, else in the FIT part. The fit never sees evaluation rows.

Fit: per GPU family, Gauss-Newton on the log error log(predicted / published) of its fit rows
(each step a numpy.linalg.lstsq of the residuals on a finite-difference Jacobian), parameters:
- e_max (bf16/fp16 linear GEMMs and the attention core) when the family has bf16/fp16 fit rows;
- fp8_e_max when it has fp8 fit rows;
d_half is not fitted: the rows do not determine it (every fit row's narrowest GEMM dimension is
>= 768, and the total sum of squares changes by < 2% for d_half 8-128), so it is carried as the
file's `d_half` (`D_HALF`). A family without fit rows in a precision keeps a stated stand-in
(`_stand_ins`). Nothing is tuned per row; the attention-core constant comes from a paper figure.

`python -m planner.calibrate --write` (Makefile: `make calibrate`) regenerates the file and
prints the evaluation-part error.
"""

from __future__ import annotations

import datetime
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
            "H100-500W": ["H100-SXM-96GB"], "B200": ["GB200"], "MI300X": []}
"""Families written to the file and the GPU-name substrings that alias them (same SM
architecture: Ampere, Hopper, Blackwell, CDNA3). H100-500W is the power-capped H100 SXM 96 GB
HBM2e of Meta's Grand Teton (hardware/grand-teton.yaml, GPU H100-SXM-96GB): its peak is unpublished ("between
SXM and NVL", torchtitan benchmarks/llama3_h100_202412_torchtitan.md footnote 2) and the cluster
file carries the SXM datasheet's, so its own e_max absorbs the unknown derating instead of biasing
the H100 fit."""
DEFAULT_FAMILY = "H100"
D_HALF = 64.0
"""[Empirical] GEMM width at half efficiency, every family: the grid fit (0-512) of the earlier
model on the 10 Narayanan 2021 Table 1 rows; not identifiable from the current fit rows (see the
module docstring), so not refitted."""
START = {"e_max": 0.65, "d_half": D_HALF, "fp8_e_max": 0.45}
BOUNDS = {"e_max": (0.2, 0.95), "fp8_e_max": (0.1, 0.95)}


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


def _log_error(row: vt.Row) -> float:
    """log(1 + throughput error) of the row's prediction (`validate_training.predict`)."""
    return math.log1p(vt.predict(row).error)


def _calibration(families: dict[str, dict]) -> compute.Calibration:
    base = compute.load_calibration()
    consts = {}
    for name, entry in families.items():
        src = families[entry["fallback"]] if "fallback" in entry else entry
        consts[name] = compute.GemmEfficiency(
            family=entry.get("fallback", name), e_max=src["e_max"], d_half=src["d_half"],
            fp8_e_max=src.get("fp8_e_max"), basis=entry.get("basis", ""))
    aliases = {a.upper(): f for f, al in FAMILIES.items() for a in al}
    return replace(base, families=consts, aliases=aliases, default_family=DEFAULT_FAMILY)


def _errors(rows: list[vt.Row], families: dict[str, dict]) -> np.ndarray:
    """log(predicted / published throughput) of `rows` under `families`."""
    compute.use_calibration(_calibration(families))
    st.clear_caches()
    try:
        return np.array([_log_error(r) for r in rows])
    finally:
        compute.use_calibration(None)
        st.clear_caches()


def _fit_family(name: str, rows: list[vt.Row], families: dict[str, dict], params: list[str]) -> dict:
    """Damped Gauss-Newton in log error over log(params) of family `name` (a step is halved until
    the sum of squares falls; bounds `BOUNDS`); returns its entry."""
    lo = np.log([BOUNDS[p][0] for p in params])
    hi = np.log([BOUNDS[p][1] for p in params])
    theta = np.log([families[name][p] for p in params])

    def residual(t: np.ndarray) -> np.ndarray:
        values = dict(zip(params, np.exp(t).tolist()))
        return _errors(rows, {**families, name: {**families[name], **values}})

    r = residual(theta)
    for _ in range(20):
        jac = np.empty((len(rows), len(params)))
        for j in range(len(params)):
            step = theta.copy()
            step[j] += 1e-3
            jac[:, j] = (residual(step) - r) / 1e-3
        delta, *_ = np.linalg.lstsq(jac, -r, rcond=None)
        for alpha in (1.0, 0.5, 0.25, 0.125, 0.0625):
            trial = np.clip(theta + alpha * delta, lo, hi)
            r_trial = residual(trial)
            if r_trial @ r_trial < r @ r:
                break
        else:
            break
        done = np.max(np.abs(trial - theta)) < 1e-4
        theta, r = trial, r_trial
        if done:
            break
    return {**families[name], **{p: round(float(v), 4) for p, v in zip(params, np.exp(theta))}}


def fit(rows: list[vt.Row]) -> dict[str, dict]:
    """Per-family constants fitted on the FIT part of `rows` (see the module docstring)."""
    fit_rows = [r for r in rows if r.part == "fit"]
    families = _start()
    for name in FAMILIES:
        mine = [r for r in fit_rows if family_of(r) == name]
        if not mine:
            continue
        precisions = {r.precision for r in mine}
        params = [p for p, wanted in (("e_max", precisions - {"fp8"}), ("fp8_e_max", precisions & {"fp8"}))
                  if wanted]
        families[name] = _fit_family(name, mine, families, params)
        families[name]["fit_rows"] = sorted(r.id for r in mine)
        families[name]["fitted"] = params
    return _stand_ins(families, fit_rows)


def _stand_ins(families: dict[str, dict], fit_rows: list[vt.Row]) -> dict[str, dict]:
    """Write each family's basis; a family without rows falls back to DEFAULT_FAMILY, a family
    without bf16 rows takes DEFAULT_FAMILY's e_max, one without fp8 rows has no fp8 constant
    (A100: no fp8 tensor cores) or DEFAULT_FAMILY's."""
    out = {}
    for name, entry in families.items():
        fitted = entry.get("fitted", [])
        if not fitted:
            out[name] = {"aliases": entry["aliases"], "fallback": DEFAULT_FAMILY,
                         "basis": f"no fit row of training_runs.yaml / expert_configs.yaml runs on {name}: "
                                  f"the {DEFAULT_FAMILY} constants stand in (explicit fallback, not a fit)"}
            continue
        notes = []
        if "e_max" not in fitted:
            entry["e_max"] = families[DEFAULT_FAMILY]["e_max"]
            notes.append(f"e_max (bf16, attention core) taken from {DEFAULT_FAMILY}: no bf16 fit row")
        if "fp8_e_max" not in fitted:
            if name == "A100":
                entry["fp8_e_max"] = None
                notes.append("no fp8 (Ampere has no fp8 tensor cores)")
            else:
                entry["fp8_e_max"] = families[DEFAULT_FAMILY]["fp8_e_max"]
                notes.append(f"fp8_e_max taken from {DEFAULT_FAMILY}: no fp8 fit row")
        notes.append("d_half not fitted (planner.calibrate.D_HALF)")
        n = len(entry["fit_rows"])
        out[name] = {
            "aliases": entry["aliases"], "e_max": entry["e_max"], "d_half": entry["d_half"],
            "fp8_e_max": entry["fp8_e_max"],
            "basis": f"[Empirical] {', '.join(fitted)} fitted on the {n} FIT rows listed"
                     + ("; " + "; ".join(notes) if notes else ""),
            "fit_rows": entry["fit_rows"]}
    return out


def evaluate(rows: list[vt.Row], families: dict[str, dict] | None = None) -> list[dict]:
    """Predicted vs published per row (all parts) under `families` (None: the file); `error` is
    the throughput error (`validate_training.throughput_error`)."""
    if families is not None:
        compute.use_calibration(_calibration(families))
    st.clear_caches()
    try:
        out = []
        for r in rows:
            pred = vt.predict(r)
            out.append(dict(id=r.id, source=r.source, family=family_of(r), precision=r.precision,
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


def document(families: dict[str, dict], results: list[dict]) -> dict:
    """The calibration file's contents."""
    cal = compute.load_calibration()
    return {
        "description": "[Empirical] GEMM-efficiency constants of the step-time model "
                       "(planner/cost/compute.py) per GPU family: efficiency(d) = e_max d/(d + d_half) "
                       "of the bf16/fp16 peak for linear GEMMs and (times the attention_core factor) "
                       "the attention core; fp8_e_max the same for fp8 linear GEMMs of the fp8 peak.",
        "fitted_on": "tests/data/reference/training_runs.yaml + expert_configs.yaml, every row "
                     "planner.validate_training expresses, FIT part: crc32(id) % 4 != 0; "
                     "evaluation part: crc32(id) % 4 == 0",
        "method": "Gauss-Newton on log(predicted/published), each step numpy.linalg.lstsq on a "
                  "finite-difference Jacobian, per family; regenerate: make calibrate",
        "generated": datetime.date.today().isoformat(),
        "default_family": DEFAULT_FAMILY,
        "attention_core": {"l_half_tokens": cal.attention_l_half,
                           "basis": "FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608) "
                                    "Fig. 5a, forward, head dim 128, H100 SXM5: P L/(L + l_half) least "
                                    "squares in log error on its six points (512-16k), rms 1.8%; not "
                                    "fitted on training rows"},
        "families": families,
        "evaluation": grouped(results)["evaluation"],
    }


def write_calibration(path: Path = compute.CALIBRATION_FILE) -> dict:
    """Fit on the FIT part and write `path` with its provenance; returns the document."""
    rows = all_rows()
    families = fit(rows)
    doc = document(families, evaluate(rows, families))
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100), encoding="utf-8")
    compute._default_calibration.cache_clear()
    return doc


if __name__ == "__main__":
    from planner import report

    if "--write" in sys.argv:
        report.dump(write_calibration()["evaluation"], "yaml")
    else:
        report.dump(grouped(evaluate(all_rows())), "yaml")
