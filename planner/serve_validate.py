"""Serving measurements: read them, fit the latency model's [Empirical] coefficients, validate.

Data format: the columns of `serving_measurements.csv` (NVIDIA ai-dynamo/aiconfigurator
`silicon_sample.csv`, Apache-2.0; see tests/data/reference/serving_measurements.NOTICE): backend,
model_path, system, gemm_quant_mode / moe_quant_mode, isl, osl, batch_size (concurrency per
attention-DP group: the benchmark ran batch_size x attention_dp_size concurrent requests — the
file's dropped provenance column reads silicon_concurrency=64 for batch 8 x attention-DP 8, =256 for
4 x 64, ai-dynamo/aiconfigurator silicon_sample.csv @095f58a5), tp_size,
pp_size, attention_dp_size, moe_tp_size, moe_ep_size, silicon_ttft_ms, silicon_tpot_ms.

Split (deterministic, documented): a row is in the EVALUATION part when crc32(id) % 4 == 0, else in
the FIT part (about 25 % / 75 %). The fit never sees evaluation rows. Fit: per engine, non-negative numpy least
squares of sum_j c_j term_j on the terms of `cost.serving.latency_terms`, each row weighted by
1 / measured (so the fit minimises squared relative error, the quantity MAPE reports), one set of
constants per engine and model class (dense / MoE). The file has no KV-dtype column: the KV cache is
taken as bf16 for every row.

`python -m planner.serve_validate --write` (Makefile: `make calibrate-serving`) regenerates
`calibration/serving.yaml` from the reference data.
"""

from __future__ import annotations

import csv
import datetime
import math
import sys
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from planner.cost import serving as sv
from planner.errors import SpecError
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "reference" / "serving_measurements.csv"
CALIBRATION = ROOT / "calibration" / "serving.yaml"

MODEL_NAMES = {
    "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
}
"""Hugging Face id in the data -> catalog model (DeepSeek-R1 has the DeepSeek-V3 architecture)."""
SYSTEMS = {"h100_sxm": "dgx-h100", "h200_sxm": "hgx-h200"}
"""aiconfigurator system name -> catalog cluster."""
REQUIRED = ("id", "backend", "model_path", "system", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms")


_model = lru_cache(maxsize=None)(load_model)
_cluster = lru_cache(maxsize=None)(load_cluster)


@dataclass(frozen=True)
class Case:
    """One measured (or asked) serving point."""

    id: str
    engine: str
    model: str
    cluster: str
    weight_format: str
    inst: sv.Instance
    concurrency: int
    input_len: int
    output_len: int
    ttft_ms: float
    tpot_ms: float

    @property
    def evaluation(self) -> bool:
        """In the evaluation part: crc32(id) % 4 == 0."""
        return zlib.crc32(self.id.encode()) % 4 == 0


INTEGER_COLUMNS = ("isl", "osl", "batch_size", "tp_size")
"""Required positive integers: lengths, concurrency and the TP degree."""
DEGREE_COLUMNS = {"pp_size": "", "attention_dp_size": "", "moe_tp_size": "0", "moe_ep_size": "0"}
"""Optional degrees: a positive integer, or empty (1); moe_*: also 0 (aiconfigurator writes 0 when unused)."""
TIME_COLUMNS = ("silicon_ttft_ms", "silicon_tpot_ms")
"""Measured times: positive finite numbers of ms."""


def _bad(row_name: str, key: str, value: str, allowed: str, file: str) -> SpecError:
    return SpecError(f"{row_name}: value {value!r} not allowed; allowed: {allowed}", file=file, key=key)


def _field_int(row: dict, key: str, row_name: str, file: str, unset: tuple[str, ...] = ()) -> int:
    """A positive integer column; values in `unset` read as 1. Raises SpecError otherwise."""
    value = (row.get(key) or "").strip()
    if value in unset:
        return 1
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        allowed = "a positive integer" + "".join(f" or {u!r} (unset)" if u else " or empty (unset)" for u in unset)
        raise _bad(row_name, key, value, allowed, file)
    return int(value)


def _field_time(row: dict, key: str, row_name: str, file: str) -> float:
    """A positive finite number (ms). Raises SpecError otherwise."""
    value = row[key].strip()
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise _bad(row_name, key, value, "a positive finite number of ms", file)
    return number


def weight_format_of(row: dict) -> str:
    """gemm_quant_mode fp8 / fp8_block, else the checkpoint's own format (-FP8 ids: DeepSeek and Qwen
    ship 128x128 block scales, nvidia/*-FP8 per-tensor; DeepSeek-R1 is FP8 block natively), else bf16."""
    mode, path = row.get("gemm_quant_mode", ""), row["model_path"]
    if mode in ("fp8_block", "fp8"):
        return "fp8-block" if mode == "fp8_block" else "fp8"
    if "DeepSeek" in path or ("FP8" in path and not path.startswith("nvidia/")):
        return "fp8-block"
    if "FP8" in path or row.get("precision") == "fp8":
        return "fp8"
    return "bf16"


def case_of(row: dict, file: str, line: int | None = None) -> Case:
    """One CSV row -> Case. Raises SpecError naming the file, the row (its id, else `line`), the column,
    the value and what is allowed, for what cannot be read."""
    row_name = f"row {row['id']}" if row.get("id") else f"line {line if line is not None else '?'}"
    for key in REQUIRED:
        if row.get(key) in (None, ""):
            raise SpecError(f"{row_name}: missing value", file=file, key=key)
    checks = (("backend", sv.ENGINES), ("model_path", MODEL_NAMES), ("system", SYSTEMS))
    for key, allowed in checks:
        if row[key] not in allowed:
            raise _bad(row_name, key, row[key], ", ".join(allowed), file)
    isl, osl, batch, tp = (_field_int(row, key, row_name, file) for key in INTEGER_COLUMNS)
    pp, adp, moe_tp, moe_ep = (_field_int(row, key, row_name, file, ("", unset) if unset else ("",))
                               for key, unset in DEGREE_COLUMNS.items())
    ttft_ms, tpot_ms = (_field_time(row, key, row_name, file) for key in TIME_COLUMNS)
    spec = _model(MODEL_NAMES[row["model_path"]])
    gpus = max(tp, adp, moe_tp * moe_ep) if spec.is_moe else max(tp, adp)
    ep = moe_ep if spec.is_moe and gpus % moe_ep == 0 else 1
    inst = sv.Instance(tp=gpus, pp=pp, ep=ep, adp=adp if gpus % adp == 0 else 1)
    return Case(id=row["id"], engine=row["backend"], model=MODEL_NAMES[row["model_path"]],
                cluster=SYSTEMS[row["system"]], weight_format=weight_format_of(row), inst=inst,
                concurrency=batch * inst.adp, input_len=isl, output_len=osl, ttft_ms=ttft_ms, tpot_ms=tpot_ms)


def load_cases(path: str | Path = DATA) -> list[Case]:
    """All rows of a measurements CSV (comment lines starting with # skipped)."""
    path = Path(path)
    if path.is_dir():
        raise SpecError("is a directory; give a measurements CSV file", file=str(path), key="--data")
    if not path.is_file():
        raise SpecError("file not found", file=str(path), key="--data")
    with path.open(newline="") as handle:
        numbered = [(n, line) for n, line in enumerate(handle, 1) if not line.startswith("#")]
    reader = csv.DictReader(line for _, line in numbered)
    missing = [key for key in REQUIRED if key not in (reader.fieldnames or ())]
    if missing:
        raise SpecError(f"column(s) {', '.join(missing)} missing from the header; required: {', '.join(REQUIRED)}",
                        file=str(path), key=missing[0])
    cases = [case_of(row, str(path), numbered[reader.line_num - 1][0]) for row in reader]
    if not cases:
        raise SpecError("no rows", file=str(path), key="--data")
    return cases


def case_terms(case: Case) -> dict[str, float]:
    """`latency_terms` of a case, with the KV-pool concurrency limit of its engine's default budget and, under
    vLLM, the running sequences its default per-step token budget sustains (`cost.serving.budget_concurrency`)."""
    spec, hw = _model(case.model), _cluster(case.cluster)
    kv_dtype = "bf16"
    mem = sv.serving_memory(spec, case.inst, capacity=hw.gpu.memory_bytes, weight_format=case.weight_format,
                            kv_dtype=kv_dtype, engine=case.engine, gpu_name=hw.gpu.name)
    cmax = max(1, sv.max_concurrency(mem, spec, case.inst, case.input_len + case.output_len))
    if case.engine == "vllm":  # the running sequences the per-step token budget sustains (serve.running_cap)
        cmax = min(cmax, case.inst.adp * sv.budget_concurrency(sv.DEFAULT_MAX_NUM_BATCHED_TOKENS, case.input_len,
                                                                case.output_len))
    dtype = "bf16" if case.weight_format == "bf16" else "fp8"
    return sv.latency_terms(spec, case.inst, hbm_bytes_per_s=hw.gpu.hbm_gb_per_s * 1e9,
                            peak_flops=hw.peak_flops(dtype), weight_format=case.weight_format,
                            kv_dtype=kv_dtype, concurrency=case.concurrency, input_len=case.input_len,
                            output_len=case.output_len, max_concurrency_=cmax,
                            link_bytes_per_s=sv.link_bytes_per_s(hw, case.inst.tp))


def _columns(terms: dict[str, float], names: tuple[str, ...]) -> list[float]:
    return [terms[n] * sv._unit(n) for n in names]


def model_class(model: str) -> str:
    """`moe` for models with routed experts, else `dense`: the two run different kernels (fused MoE /
    grouped GEMMs and expert all-to-all vs dense GEMMs), so each engine has one set of constants per class."""
    return "moe" if _model(model).is_moe else "dense"


LOW_LOAD_CLIENTS = 8
"""Rows with at most this many concurrent requests are `low load`: a prompt mostly meets an empty prefill queue."""


def _one_model(rows: list[Case]) -> bool:
    return len({c.model for c in rows}) == 1


def _without_low_load(rows: list[Case]) -> bool:
    return min(c.concurrency for c in rows) > LOW_LOAD_CLIENTS


SHARED_TERMS = {
    ("moe", "tpot"): (("layer_steps", "collectives", "constant"), _one_model),
    ("dense", "ttft"): (("prefill_one_s", "constant"), _without_low_load),
}
"""(class, target) -> (terms, rule): an engine whose FIT rows of the class meet `rule` takes these terms'
coefficients from a joint fit over every engine's FIT rows of the class (one pooled column per term, the
other terms one column per engine), and fits only its remaining terms on its own rows; other engines fit
every term on their own rows.

Why: a per-engine coefficient is only a mechanism when the engine's fit rows vary what the term counts.
- MoE TPOT, engines whose MoE rows are one model: vLLM's are all Qwen3-235B-A22B-FP8 (94 layers) at tp 2 / 4,
  so its per-step constant, per-layer overhead (`layer_steps` = 94 on every row) and per-collective latency
  (`collectives` = 188 on every row) are three columns that each equal a constant: fitted alone they become
  one per-model constant (33.2 ms per step; 146 us per all-reduce + 73 us per layer when split), which
  serve-plan then applied to every MoE model (qwen3-30b-a3b on one H100: 34.7 ms TPOT under vLLM, 2.2 ms
  under SGLang). Pooled, they are identified by all engines' MoE rows (DeepSeek-V3 61 layers and Qwen3-235B
  94; tp 2-8; with and without attention DP), and what vLLM's rows need beyond them goes to its own
  weight-read coefficient (`decode_memory_s`: the achieved fraction of HBM bandwidth of its fused-MoE
  kernels), which scales with the bytes a step reads and so transfers across models.
- dense TTFT, engines with no FIT row at <= LOW_LOAD_CLIENTS clients: SGLang's dense rows all have >= 16,
  where one prompt's prefill (`prefill_one_s`) and the per-request constant are collinear with the queueing
  terms; fitted alone they grew to 6.7 x the prefill's FLOP time and 188 ms, and at 1-2 clients SGLang's
  TTFT became 2.5 x the other engines' (llama-3.1-70b tp8 at 2 clients: 762 ms vs vLLM's 300 ms). Pooled,
  they are identified by vLLM's and TensorRT-LLM's low-load rows (one prompt's prefill is the same GEMMs
  and attention kernels' work in every engine).
"""


def fit(cases: list[Case]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Coefficients {engine: {class: {"ttft": {term: c}, "tpot": {term: c}, "fit_rows": n}}} fitted on
    the FIT part, class = `model_class`.

    Source: numpy.linalg.lstsq on rows scaled by 1/measured (relative least squares), negative terms
    dropped (`_nonnegative_lstsq`), on the measured time less the unfitted physical terms
    (`cost.serving.unfitted_s`) that `predict_latency` adds. Per engine, except the pooled terms of
    `SHARED_TERMS`, which come from one joint least-squares problem over every engine's FIT rows of the class
    (a pooled term one column for all engines, every other term one column per engine)."""
    terms = {c.id: case_terms(c) for c in cases}
    result: dict = {}
    for cls in ("dense", "moe"):
        part = [c for c in cases if model_class(c.model) == cls and not c.evaluation]
        engines = sorted({c.engine for c in part})
        for engine in engines:
            result.setdefault(engine, {})[cls] = {"fit_rows": sum(c.engine == engine for c in part)}
        for target, names in (("ttft", sv.TTFT_TERMS), ("tpot", sv.TPOT_TERMS)):
            shared, rule = SHARED_TERMS.get((cls, target), ((), None))
            pooled = _solve(part, terms, target, [(None, n) for n in shared] +
                            [(e, n) for e in engines for n in names if n not in shared]) if shared else {}
            for engine in engines:
                rows = [c for c in part if c.engine == engine]
                given = {n: pooled[(None, n)] for n in shared} if shared and rule(rows) else {}
                own = _solve(rows, terms, target, [(engine, n) for n in names if n not in given], given)
                coef = {n: given.get(n, own.get((engine, n), 0.0)) for n in names}
                result[engine][cls][target] = {n: round(float(coef[n]), 6) for n in names}
    for classes in result.values():
        for cls in classes:
            classes[cls] = {k: classes[cls][k] for k in ("ttft", "tpot", "fit_rows")}
    return dict(sorted(result.items()))


def _solve(rows: list[Case], terms: dict, target: str, columns: list[tuple[str | None, str]],
           given: dict[str, float] | None = None) -> dict[tuple[str | None, str], float]:
    """Non-negative relative least squares of `target` over `rows`: {(engine or None, term): coefficient};
    a column (engine, term) is the term on that engine's rows and 0 on the others' ((None, term): on every row);
    `given` {term: coefficient} is subtracted from the measured time first, like the unfitted terms."""
    import numpy as np  # only for fitting: serve-plan itself does not load numpy

    y = np.array([getattr(c, f"{target}_ms") / 1e3 for c in rows])
    fixed = np.array([sv.unfitted_s(terms[c.id], target)
                      + sum(k * terms[c.id][n] * sv._unit(n) for n, k in (given or {}).items()) for c in rows])
    a = np.array([[terms[c.id][n] * sv._unit(n) if e in (None, c.engine) else 0.0 for e, n in columns]
                  for c in rows])
    return dict(zip(columns, _nonnegative_lstsq(a / y[:, None], 1 - fixed / y)))


def coefficients_for(calibration: dict, engine: str, model: str) -> dict:
    """The engine's constants for the model's class. Raises SpecError when none were fitted."""
    engines = calibration["engines"]
    cls = model_class(model) if isinstance(model, str) else ("moe" if model.is_moe else "dense")
    if engine not in engines or cls not in engines[engine]:
        have = ", ".join(f"{e} ({'/'.join(engines[e])})" for e in engines)
        raise SpecError(f"value {engine!r} has no latency calibration for {cls} models; calibrated: {have}",
                        key="--engine")
    return engines[engine][cls]


def _nonnegative_lstsq(a, b):
    """Least squares with coefficients >= 0 (a slower time never makes a request faster): solve,
    drop the most negative term, re-solve until none is negative (active-set elimination).
    a: (rows, terms) numpy array; b: (rows,); returns (terms,)."""
    import numpy as np

    keep = list(range(a.shape[1]))
    while True:
        coef = np.zeros(a.shape[1])
        coef[keep], *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
        if coef.min() >= 0 or len(keep) == 1:
            return np.maximum(coef, 0)
        keep.remove(int(np.argmin(coef)))


def load_calibration(path: Path = CALIBRATION) -> dict:
    """The coefficients file (see `fit`)."""
    return yaml.safe_load(path.read_text())


def validate(cases: list[Case], calibration: dict | None = None, *, part: str = "all") -> dict:
    """Predicted vs measured TTFT / TPOT per row; MAPE overall and per engine, GPU and model.

    Args:
        part: `all`, `fit` or `evaluation` (the split rule of this module).
    Returns:
        {"rows": [...], "summary": {ttft_mape, tpot_mape, n}, "by": {"engine": {...}, ...}} (MAPE in %).
    """
    calibration = calibration or load_calibration()
    chosen = [c for c in cases if part == "all" or (c.evaluation == (part == "evaluation"))]
    rows = []
    for case in chosen:
        ttft, tpot = sv.predict_latency(case_terms(case), coefficients_for(calibration, case.engine, case.model))
        rows.append(dict(id=case.id, engine=case.engine, gpu=case.cluster, model=case.model,
                         part="evaluation" if case.evaluation else "fit",
                         ttft_ms=case.ttft_ms, ttft_pred_ms=ttft * 1e3, tpot_ms=case.tpot_ms, tpot_pred_ms=tpot * 1e3))
    return {"rows": rows, "summary": _mape(rows),
            "by": {key: {v: _mape([r for r in rows if r[key] == v]) for v in sorted({r[key] for r in rows})}
                   for key in ("engine", "gpu", "model")}}


def _mape(rows: list[dict]) -> dict:
    n = len(rows)
    if not n:
        return {"ttft_mape": None, "tpot_mape": None, "n": 0}
    err = lambda k: round(100 * sum(abs(r[f"{k}_pred_ms"] - r[f"{k}_ms"]) / r[f"{k}_ms"] for r in rows) / n, 1)
    return {"ttft_mape": err("ttft"), "tpot_mape": err("tpot"), "n": n}


def write_calibration(path: Path = CALIBRATION, data: Path = DATA) -> dict:
    """Fit on the FIT part of `data` and write the coefficients file with its provenance."""
    cases = load_cases(data)
    engines = fit(cases)
    doc = {
        "description": "[Empirical] coefficients of the serving latency model (planner/cost/serving.py "
                       "latency_terms / predict_latency), per engine and model class (dense / moe), "
                       "Hopper GPUs (H100/H200 SXM).",
        "fitted_on": f"{data.name}: rows with crc32(id) % 4 != 0 (FIT part); evaluation part: crc32(id) % 4 == 0",
        "method": "numpy.linalg.lstsq with negative terms dropped (non-negative), rows scaled by 1/measured (relative least squares); "
                  "regenerate: make calibrate-serving",
        "generated": datetime.date.today().isoformat(),
        "units": {"collectives": "us per collective (TPOT)", "layer_steps": "us per decoder layer per step (TPOT)",
                  "constant": "ms (TTFT)", "other terms": "dimensionless multipliers"},
        "pooled": {f"{cls}.{target}": f"{', '.join(names)} (engines whose FIT rows: {rule.__name__.strip('_').replace('_', ' ')})"
                   for (cls, target), (names, rule) in SHARED_TERMS.items()},
        "engines": engines,
    }
    evaluation = validate(cases, doc, part="evaluation")
    doc["evaluation"] = {"summary": evaluation["summary"], "by_engine": evaluation["by"]["engine"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc


if __name__ == "__main__":
    if "--write" in sys.argv:
        result = write_calibration()
        from planner import report

        report.dump(result["evaluation"], "yaml")
