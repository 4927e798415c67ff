"""Serving measurements: read them, fit the latency model's [Empirical] coefficients, validate.

Data format: the columns of `serving_measurements.csv` (NVIDIA ai-dynamo/aiconfigurator
`silicon_sample.csv`, Apache-2.0; see tests/data/reference/serving_measurements.NOTICE): backend,
model_path, system, gemm_quant_mode / moe_quant_mode, isl, osl, batch_size (concurrency per
attention-DP group: the benchmark ran batch_size x attention_dp_size concurrent requests — the
file's dropped provenance column reads silicon_concurrency=64 for batch 8 x attention-DP 8, =256 for
4 x 64, ai-dynamo/aiconfigurator silicon_sample.csv @095f58a5), tp_size,
pp_size, attention_dp_size, moe_tp_size, moe_ep_size, silicon_ttft_ms, silicon_tpot_ms; optional
`backend_version` (the engine release: SGLang rows take that release's launch defaults, `sglang_defaults`)
and `harness` (how the row was measured, a key of HARNESSES; absent or empty: `plain`, a steady closed loop
with no start burst -- the shipped reference copy names every row's).

Split (deterministic, documented): a row is in the EVALUATION part when crc32(id) % 4 == 0, else in
the FIT part (about 25 % / 75 %). The fit never sees evaluation rows. Each measurement counts once
(`distinct_measurements`: the file files fifteen runs twice). Fit: per engine, non-negative least squares
(Lawson-Hanson) of sum_j c_j term_j on the terms of `cost.serving.latency_terms`, each row weighted by
1 / measured (so the fit minimises squared relative error, the quantity MAPE reports), one set of
constants per engine and model class (dense / MoE). Each row is costed as its campaign measured it
(`harness_of`): the InferenceX campaigns' published launch flags and benchmark client (KV dtype, per-step
token budget, scheduler waits, drawn lengths, the start burst of 10 x concurrency measured prompts), the
lock-step waves of aiconfigurator's fixed-length grid, SGLang's admission rule and release defaults, and for
each aiconfigurator campaign its own start-burst share and request-path time (`Harness.share_term`,
`Harness.path_term`: how a campaign ran, not the engine; serve-plan's steady state has neither); the
file has no KV-dtype column, so the other campaigns' KV cache is taken as bf16.

`python -m planner.serve_validate --write` (Makefile: `make calibrate-serving`) regenerates
`calibration/serving.yaml` from the reference data.
"""

from __future__ import annotations

import csv
import datetime
import math
import statistics
import sys
import zlib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import yaml

from planner.cost import serving as sv
from planner.errors import SpecError
from planner.specs import files
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "reference" / "serving_measurements.csv"
CALIBRATION = files.data_dir("calibration") / "serving.yaml"
"""The serving coefficients: the clone's, else the installed package's (`files.data_dir`)."""

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
    harness: str = "plain"
    """How the row was measured: a key of HARNESSES (the file's `harness` column; `plain` when absent or empty)."""
    engine_version: str = ""
    """The engine's release (the file's `backend_version` column; empty: the release the planner models)."""

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
    harness = (row.get("harness") or "").strip() or PLAIN.name
    if harness not in HARNESSES:
        raise _bad(row_name, "harness", harness, ", ".join(HARNESSES) + " or empty (plain)", file)
    spec = _model(MODEL_NAMES[row["model_path"]])
    clients = batch * adp
    if spec.is_moe and legacy_tp_times_ep(max(tp, adp), moe_tp, moe_ep, _cluster(SYSTEMS[row["system"]]).scaleup_domain_gpus):
        tp, adp, moe_tp = min(tp, moe_tp), min(adp, moe_tp), 1
    gpus = max(tp, adp, moe_tp * moe_ep) if spec.is_moe else max(tp, adp)
    ep = moe_ep if spec.is_moe and gpus % moe_ep == 0 else 1
    inst = sv.Instance(tp=gpus, pp=pp, ep=ep, adp=adp if gpus % adp == 0 else 1)
    return Case(id=row["id"], engine=row["backend"], model=MODEL_NAMES[row["model_path"]],
                cluster=SYSTEMS[row["system"]], weight_format=weight_format_of(row), inst=inst,
                concurrency=clients if inst.adp == adp else batch * inst.adp, input_len=isl, output_len=osl,
                ttft_ms=ttft_ms, tpot_ms=tpot_ms, harness=harness,
                engine_version=(row.get("backend_version") or "").strip())


def legacy_tp_times_ep(gpus: int, moe_tp: int, moe_ep: int, node_gpus: int) -> bool:
    """True for a row that records a one-node instance as `gpus` = max(tp_size, attention_dp_size) =
    moe_tp_size x moe_ep_size GPUs (the GPUs are `moe_tp_size`, the experts split `moe_ep_size` ways among
    them): the count exceeds one node while both factors are > 1 and multiply to it.

    Source: ai-dynamo/aiconfigurator's accuracy cohort script (scripts/e2e_accuracy, stored copy)
    measurement_gpu_count: 'Keep legacy TP*EP candidates' -- a single-node row whose GPU count equals
    tp x ep counts tp GPUs ('Historical wheels may inflate TP*EP'). In serving_measurements.csv the five
    TensorRT-LLM DeepSeek-R1 rows of 2026_04_06 that read tp_size 64, moe_tp 8, moe_ep 8 (ids say tp8_ep8)
    carry the very TTFT / TPOT of 2026_03_25 rows read tp_size 8, moe_ep 8 (digit-identical), and the
    attention-DP rows of that campaign read attention_dp 64 x batch 4 for the 8 x 32 of the same run."""
    return moe_tp > 1 and moe_ep > 1 and gpus == moe_tp * moe_ep and gpus > node_gpus


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
    return distinct_measurements(cases)


SAME_RUN_DIGITS = 9
"""Significant digits to which two rows' measured TTFT and TPOT must agree to be one run filed twice. The
file's refiled runs differ at most in the 17th digit (a re-serialised float: TPOT 14.368894163450031 vs
...033 ms); two runs agreeing in 9 digits of both means by chance is not credible."""


def distinct_measurements(cases: list[Case]) -> list[Case]:
    """`cases` with each measurement once: a row whose engine, model, GPU, layout, lengths, concurrency and
    both measured times (to SAME_RUN_DIGITS significant digits) equal an earlier row's is the same run filed
    twice (the first row kept).

    Why: serving_measurements.csv files seven SGLang DeepSeek-R1 runs twice (2026_03_25 and 2026_04_06 ids)
    and eight TensorRT-LLM DeepSeek-R1 runs twice, under two layout encodings (`legacy_tp_times_ep`); counted
    twice they would weigh double in the fit and in the MAPE."""
    seen: set[tuple] = set()
    distinct = []
    digits = f".{SAME_RUN_DIGITS}g"
    for case in cases:
        key = (case.engine, case.model, case.cluster, case.weight_format, case.inst, case.concurrency,
               case.input_len, case.output_len, format(case.ttft_ms, digits), format(case.tpot_ms, digits))
        if key not in seen:
            seen.add(key)
            distinct.append(case)
    return distinct


@dataclass(frozen=True)
class Harness:
    """How a campaign of the measurements file was run: its benchmark client and the engine flags it
    launched with, where the campaign's scripts are published. Every field is read from a cited script."""

    name: str
    burst_fraction: float | None
    """Share of the measured requests sent in the start burst (1 / measured requests per client); None: not
    known (the fit then gives the burst its own coefficient, `cost.serving.latency_terms` burst_unknown_share_s)."""
    length_range_ratio: float
    """Lengths drawn uniform over integers [floor(ratio x L), L] (1: exactly L)."""
    kv_dtype: dict[str, str]
    """engine -> KV-cache dtype the campaign launched it with (absent: bf16)."""
    source: str
    synchronised: bool = False
    """All requests of the same lengths and all clients started together: under a prefill-first scheduler
    (SGLang) the closed loop then runs in lock-step waves (`cost.serving.latency_terms` wave_s)."""
    path_term: str | None = None
    """The TTFT term of the campaign's request path beyond the engine's own server (`cost.serving.PATH_TERMS`);
    None: the client talks to the engine's server directly, as serve-plan's steady state assumes."""
    share_term: str = sv.UNKNOWN_SHARE_TERMS[0]
    """The TTFT term whose coefficient carries this campaign's start-burst share when it is not known
    (burst_fraction None; `cost.serving.UNKNOWN_SHARE_TERMS`): one per campaign, since the share is how the
    campaign was run, not the engine."""

    def mean_length(self, nominal: int) -> int:
        """Mean drawn length for the nominal `nominal` (the row's isl / osl)."""
        return (math.floor(self.length_range_ratio * nominal) + nominal) // 2


INFERENCEX = Harness(
    "inferencex", burst_fraction=1 / 10, length_range_ratio=0.8, kv_dtype={"vllm": "fp8", "trtllm": "fp8"},
    source="SemiAnalysisAI/InferenceX benchmarks/70b_fp8_h200_slurm.sh @409e9a48 (vllm serve: kv-cache-dtype fp8, "
           "max-num-batched-tokens 8192), benchmarks/70b_fp8_h200_trt_slurm.sh @73ef9225 (trtllm-serve: "
           "kv_cache_config dtype fp8, max_num_tokens = max_seq_len; 1k/1k below tp 8: batch_wait_timeout_iters 20, "
           "batch_wait_max_tokens_ratio 0.9), benchmarks/dsr1_fp8_h200_trt_slurm.sh @2e46dba0 (kv dtype fp8, "
           "free_gpu_memory_fraction 0.75, max_num_tokens = (conc + isl + 64) rounded up to 64, attention DP: "
           "attention_dp_config enable_balance, timeout_iters 60); every script runs benchmark_serving.py "
           "--num-prompts conc x 10 --max-concurrency conc --request-rate inf --random-range-ratio; "
           "utils/bench_serving/benchmark_serving.py @d39a07fd: warm-ups are awaited before the measured phase, "
           "which then launches all prompts at once (no wait at rate inf) behind a semaphore of max_concurrency, "
           "lengths uniform over [int(L x ratio), L]; range ratio 0.8 as ai-dynamo/aiconfigurator's replay of this "
           "cohort (scripts/e2e_accuracy, random_range_ratio 0.8)")
"""The InferenceX campaigns (the file's `inferencex` rows, ids `YYYY_MM_DD_...`): SemiAnalysis runs (workloads 1k/1k, 1k/8k, 8k/1k,
the TP x EP encoding of `legacy_tp_times_ep`)."""
SWEEP = Harness(
    "sweep", burst_fraction=None, length_range_ratio=1.0, kv_dtype={},
    source="ai-dynamo/aiconfigurator src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2 "
           "@00fe6de3: aiperf --concurrency C --num-requests C x BENCH_MULTI_ROUND (default 50) "
           "--warmup-request-count 2C, fixed lengths (isl / osl stddev, ignore_eos); an earlier version of the "
           "template measured 20 C (README note of the fourth session). Which version measured each undated "
           "campaign is not recorded, so the burst share is left to the fit (burst_fraction None); every request "
           "has exactly isl / osl tokens (stddev 0 in the accuracy sweeps, ignore_eos) and max_tokens = osl",
    synchronised=True, path_term="path_sweep")
"""aiconfigurator's accuracy grid (the file's `sweep` rows: input and output lengths powers of two, 128-4096
and 128-1024 tokens, at the template's base concurrencies 8-128; lengths named exactly in the id)."""
SWEEP_SLA = Harness(
    "sweep-sla", burst_fraction=None, length_range_ratio=1.0, kv_dtype={},
    source=SWEEP.source.split("; every request")[0] + "; the SLA-sized campaigns (the file's `sweep-sla` rows: "
           "lengths 1000-8000 / 100-2000 tokens at concurrencies from aiconfigurator's estimate, e.g. 80, 208, 352 "
           "clients: bench_run.sh.j2 estimated_concurrency x 0.95 / 1 / 1.05). Their length spread "
           "(isl_stddev / osl_stddev) is not recorded; their clients were not in lock-step: SGLang's TTFT there "
           "lies below the floor of a lock-step wave (llama-3.1-8b tp1, 2,000 / 100 tokens, 80 clients: 362 ms "
           "measured, while a wave's mean wait is at least 41 prefills of 15.7 ms at the H200's dense bf16 peak, "
           "660 ms), so synchronised is False (an inference from the data, not from a published script)",
    share_term="burst_unknown_share_sla_s", path_term="path_sweep_sla")
"""aiconfigurator's SLA-sized campaigns (decimal lengths; the file's `sweep-sla` rows)."""
PLAIN = Harness(
    "plain", burst_fraction=0.0, length_range_ratio=1.0, kv_dtype={},
    source="no benchmark harness recorded: a steady closed loop of `batch_size` clients at exactly isl / osl tokens, "
           "no start burst, the engines' default launch flags (what serve-plan predicts)")
"""A row whose file names no harness (a user's measurements without the `harness` column)."""
HARNESSES = {h.name: h for h in (INFERENCEX, SWEEP, SWEEP_SLA, PLAIN)}
"""The `harness` column's values. The shipped reference copy (tests/data/reference/serving_measurements.csv)
names each row's: `inferencex` for the SemiAnalysis InferenceX campaigns (ids YYYY_MM_DD_...), `sweep` /
`sweep-sla` for aiconfigurator's own (power-of-two lengths / the others)."""


def harness_of(case: Case) -> Harness:
    """The harness the case's row names (`Case.harness`)."""
    return HARNESSES[case.harness]


def steady_case(case: Case) -> Case:
    """The same measured point under the `plain` harness: the row's engine (and release), model, GPU, layout,
    lengths and concurrency in a steady closed loop with the engines' default flags -- the question serve-plan
    answers (for the release it models).

    serve-plan and `validate` are one latency model (`cost.serving.latency_terms` / `predict_latency`, the same
    coefficients); what a row's harness adds is only how its benchmark ran (start burst, lock-step wave,
    drawn lengths, launch flags, configured waits). For a plain row the two agree except in three stated places
    (tests/test_serve_harness.py test_serve_plan_is_validate_without_the_harness checks the identity below
    them): the running cap -- serve-plan counts every sequence at input + output (or --max-model-len) tokens,
    the guarantee a deployment needs, `validate` vLLM's input + output / 2 (blocks allocated as tokens are
    computed) and SGLang's admission rule (`cost.serving.sglang_admitted`); and PP hops, which only serve-plan
    adds (the measurements have no pp > 1 row)."""
    return replace(case, harness=PLAIN.name)


TRTLLM_BATCH_WAIT = (20, 0.9)
"""(batch_wait_timeout_iters, batch_wait_max_tokens_ratio) of InferenceX's TensorRT-LLM Llama-3.1-70B 1k/1k runs
below tp 8 (INFERENCEX source). TensorRT-LLM holds new context requests back while generation runs until their
tokens reach ratio x max_num_tokens or the timeout passes: tensorrt_llm/_torch/pyexecutor/py_executor.py
PyExecutor._waiting_requests (stored 1.1-era copy; commit not recorded by the index)."""
TRTLLM_ADP_BALANCE_TIMEOUT_ITERS = 60
"""attention_dp_config timeout_iters of InferenceX's TensorRT-LLM DeepSeek-R1 runs with attention DP (enable_balance
true, batching_wait_iters 0). PyExecutor._balance_adp_requests (same file) schedules no context request until every
attention-DP rank has one, or the timeout passes."""
TRTLLM_DSR1_FREE_FRACTION = 0.75
"""kv_cache_config free_gpu_memory_fraction of InferenceX's TensorRT-LLM DeepSeek-R1 runs (INFERENCEX source)."""


SGLANG_INFERENCEX_LAUNCH = (32768, 0.82)
"""(chunked_prefill_size, mem_fraction_static) InferenceX's SGLang DeepSeek-R1 runs on H200 launch with (also
max_prefill_tokens 32768 and the radix cache disabled; flag spellings: planner.frameworks.sglang.FLAG). Source: SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_h200.sh
@1fc5d73c and benchmarks/dsr1_fp8_h200_slurm.sh @11cc03bb (both versions launch the same values)."""
SGLANG_INFERENCEX_MAX_RUNNING = {(1024, 1024): 512}
"""max_running_requests of those runs by (isl, osl): 512 for 1k/1k, else SGLANG_INFERENCEX_MAX_RUNNING_OTHER
(same scripts)."""
SGLANG_INFERENCEX_MAX_RUNNING_OTHER = 256


def _launch(case: Case, harness: Harness, input_len: int, output_len: int) -> tuple[int, float | None, float]:
    """(per-step token budget, KV budget fraction or None for the engine default, scheduler wait in decode
    steps) the case's campaign launched its engine with (`INFERENCEX` source; defaults elsewhere). SGLang: InferenceX's
    flags (SGLANG_INFERENCEX_LAUNCH), else the defaults of the row's release (`sglang_defaults`), the chunk per
    attention-DP rank.

    Wait steps: TensorRT-LLM batch waiting holds a prompt until enough prompt tokens accumulate -- n =
    ceil(ratio x budget / input) prompts, the next n - 1 arriving (a closed loop of C clients brings one
    prompt per C / output steps) -- or the timeout: min(timeout, (n - 1) x output / C). Attention-DP
    balancing holds it until each of the adp ranks has one: min(timeout, (adp - 1) x output / C)."""
    budget, fraction, steps = sv.DEFAULT_MAX_NUM_BATCHED_TOKENS, None, 0.0
    if case.engine == "sglang" and harness is INFERENCEX:
        return SGLANG_INFERENCEX_LAUNCH[0], SGLANG_INFERENCEX_LAUNCH[1], steps
    if case.engine == "sglang":
        hw, spec = _cluster(case.cluster), _model(case.model)
        chunk, fraction = sglang_defaults(case.engine_version, hw.gpu.memory_gib * 1024, tp=case.inst.tp,
                                          pp=case.inst.pp, adp=case.inst.adp, mla=spec.is_mla)
        return chunk // case.inst.adp, fraction, steps
    if harness is not INFERENCEX or case.engine != "trtllm":
        return budget, fraction, steps
    per_arrival = output_len / case.concurrency
    if case.model == "deepseek-v3":
        budget = -(-(case.concurrency + case.input_len + 64) // 64) * 64
        fraction = TRTLLM_DSR1_FREE_FRACTION
        if case.inst.adp > 1:
            steps = min(TRTLLM_ADP_BALANCE_TIMEOUT_ITERS, (case.inst.adp - 1) * per_arrival)
        return budget, fraction, steps
    budget = case.input_len + case.output_len + 200
    if case.input_len == case.output_len == 1024 and case.inst.tp < 8:
        timeout, ratio = TRTLLM_BATCH_WAIT
        steps = min(timeout, (math.ceil(ratio * budget / input_len) - 1) * per_arrival)
    return budget, fraction, steps


SGLANG_CURRENT = "0.5.23"
"""The SGLang release the planner models (planner.frameworks.sglang); rows of older releases get theirs."""


def sglang_defaults(version: str, gpu_mib: float, *, tp: int, pp: int, adp: int, mla: bool) -> tuple[int, float]:
    """(chunked_prefill_size, mem_fraction_static) SGLang `version` takes when neither flag is given, on a GPU
    whose nvidia-smi memory.total is `gpu_mib` MiB (the sweeps' and InferenceX's SGLang launches set neither).

    - 0.5.1.post1 (`srt/server_args.py` ServerArgs.__post_init__): chunk 2048 below 35 GiB, 8192 below
      160 GiB, else 16384; reserved GiB by GPU memory: < 35 GiB 2.8 + tp x pp / 10, < 90 GiB 9.5 + tp x pp / 2,
      < 160 GiB 12 + tp x pp / 2, else 32; + 4 with DP attention; fraction = round((gpu - reserved) / gpu, 3).
    - 0.5.6.post2, 0.5.8.post1, 0.5.9 (`srt/server_args.py` _handle_gpu_memory_settings, the same in the
      three wheels): chunk and decode CUDA-graph max batch as `planner.frameworks.sglang.gpu_defaults`
      (8192 and 256 / 512 at tp >= 4 on 60-160 GiB GPUs); reserved MiB = 512 + 1.5 x max(chunk, 2048) +
      2 x max_bs + tp x pp / 8 x 1024 (+ 3 x max_bs x dp, + 1.5 x max_bs x dp when max_bs > 300, under DP
      attention), at least 10,240 above 60 GiB; no prefill CUDA graphs (piecewise graphs off by default).
    - otherwise (0.5.23, or no version): `planner.frameworks.sglang.default_mem_fraction_static`.
    Hand check: H100 (81,559 MiB), 0.5.1.post1, tp 2: reserved 10.5 GiB = 10,752 MiB, (81,559 - 10,752) /
    81,559 = 0.868; 0.5.8.post1, tp 1: 512 + 12,288 + 512 + 128 = 13,440, 0.835."""
    from planner.frameworks import sglang

    chunk, max_bs = sglang.gpu_defaults(gpu_mib, tp)
    if version.startswith("0.5.1."):
        chunk = 2048 if gpu_mib < 35 * 1024 else 8192 if gpu_mib < 160 * 1024 else 16384
        parallel = tp * pp
        reserved_gib = (2.8 + parallel / 10 if gpu_mib < 35 * 1024 else 9.5 + parallel / 2 if gpu_mib < 90 * 1024
                        else 12 + parallel / 2 if gpu_mib < 160 * 1024 else 32) + (4 if adp > 1 else 0)
        return chunk, round((gpu_mib - reserved_gib * 1024) / gpu_mib, 3)
    if version.split(".post")[0] in ("0.5.6", "0.5.8", "0.5.9"):
        reserved = 512 + 1.5 * max(chunk, 2048) + 2 * max_bs + tp * pp / 8 * 1024
        if adp > 1:
            reserved += max_bs * adp * 3 + (max_bs * adp * 1.5 if max_bs > 300 else 0)
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        return chunk, round((gpu_mib - reserved) / gpu_mib, 3)
    return chunk, sglang.default_mem_fraction_static(gpu_mib, tp=tp, pp=pp, chunked_prefill_size=chunk,
                                                     max_running_requests=None, mla=mla, attn_dp=adp, role=None,
                                                     a2a=sglang.A2A_NONE)


def case_terms(case: Case) -> dict[str, float]:
    """`latency_terms` of a case as its campaign ran it (`harness_of`: mean lengths, KV dtype, per-step token
    budget, start burst, scheduler waits), with the KV-pool concurrency limit of the engine's budget and, under
    vLLM, the running sequences its per-step token budget sustains (`cost.serving.budget_concurrency`).

    KV occupancy per sequence: TensorRT-LLM (GUARANTEED_NO_EVICT) reserves input + output at admission, and
    SGLang is taken the same (its reservation of remaining output tokens by new_token_ratio is not modelled);
    vLLM allocates blocks for the tokens each step computes and preempts the newest running request
    when none are free (vllm-project/vllm 0.33.0 wheel `vllm/v1/core/sched/scheduler.py` Scheduler.schedule:
    kv_cache_manager.allocate_slots(request, num_new_tokens), else preempt self.running[-1]), so its
    sequences hold input + output / 2 tokens on average over their lifetime.

    SGLang (`sglang_defaults` of the row's release, `cost.serving.sglang_admitted`): the requests its admission
    check lets run at once replace the pool / (input + output) count, and under a synchronised harness the
    lock-step wave (`cost.serving.latency_terms` wave_s) of the clients it admits replaces the start-burst terms.
    vLLM and TensorRT-LLM under a synchronised harness: every step mixes decode tokens and prefills, so a wave
    splits into groups of the prompts one step's token budget takes, which start, finish and return together:
    wave_s of min(clients, budget / input) prompts (each group waits for its own step only), next to the
    start-burst terms."""
    spec, hw = _model(case.model), _cluster(case.cluster)
    harness = harness_of(case)
    input_len, output_len = harness.mean_length(case.input_len), harness.mean_length(case.output_len)
    kv_dtype = harness.kv_dtype.get(case.engine, "bf16")
    budget, fraction, wait_steps = _launch(case, harness, input_len, output_len)
    mem = sv.serving_memory(spec, case.inst, capacity=hw.gpu.memory_bytes, weight_format=case.weight_format,
                            kv_dtype=kv_dtype, engine=case.engine, gpu_name=hw.gpu.name, fraction=fraction)
    resident = input_len + (output_len // 2 if case.engine == "vllm" else output_len)
    cmax = max(1, sv.max_concurrency(mem, spec, case.inst, resident))
    wave = 0
    if case.engine == "vllm":  # the running sequences the per-step token budget sustains (serve.running_cap)
        cmax = min(cmax, case.inst.adp * sv.budget_concurrency(budget, input_len, output_len))
    if case.engine == "sglang":
        pool = mem.kv_tokens // case.inst.adp
        per_rank = -(-case.concurrency // case.inst.adp)
        max_running = pool // 2
        if harness is INFERENCEX:
            max_running = min(max_running, SGLANG_INFERENCEX_MAX_RUNNING.get((case.input_len, case.output_len),
                                                                             SGLANG_INFERENCEX_MAX_RUNNING_OTHER))
        cmax = case.inst.adp * sv.sglang_admitted(pool, input_len, output_len, per_rank, budget, max_running=max_running)
        wave = min(case.concurrency, cmax) if harness.synchronised else 0
    elif harness.synchronised:  # engines that mix prefill into decode steps: lock-step groups of one step's prompts
        wave = min(case.concurrency, cmax, case.inst.adp * max(1, budget // input_len))
    dtype = "bf16" if case.weight_format == "bf16" else "fp8"
    return sv.latency_terms(spec, case.inst, hbm_bytes_per_s=hw.gpu.hbm_gb_per_s * 1e9,
                            peak_flops=hw.peak_flops(dtype), weight_format=case.weight_format,
                            kv_dtype=kv_dtype, concurrency=case.concurrency, input_len=input_len,
                            output_len=output_len, max_concurrency_=cmax, max_num_batched_tokens=budget,
                            link_bytes_per_s=sv.link_bytes_per_s(hw, case.inst.tp),
                            burst_fraction=0.0 if wave and case.engine == "sglang" else harness.burst_fraction, wait_steps=wait_steps,
                            wave_clients=wave, unknown_share_term=harness.share_term,
                            path_term=harness.path_term, first_token_steps=sv.FIRST_TOKEN_STEPS[case.engine],
                            gpu=hw.gpu, engine=case.engine)


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

    Source: relative least squares (rows scaled by 1/measured) with non-negative coefficients -- TTFT exactly
    (`_nonnegative_lstsq`, Lawson-Hanson), TPOT by dropping the most negative term and re-solving
    (`_drop_negative_lstsq`, see TPOT_SOLVER) -- on the measured time less the unfitted physical terms
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
    least = {col: LEAST_COEFFICIENT.get((target, col[1]), 0.0) for col in columns}
    fixed = np.array([sv.unfitted_s(terms[c.id], target, c.tpot_ms / 1e3)
                      + sum(k * terms[c.id][n] * sv._unit(n) for n, k in (given or {}).items())
                      + sum(least[(e, n)] * terms[c.id][n] for e, n in columns if e in (None, c.engine))
                      for c in rows])
    a = np.array([[terms[c.id][n] * sv._unit(n) if e in (None, c.engine) else 0.0 for e, n in columns]
                  for c in rows])
    solver = _nonnegative_lstsq if target == "ttft" else TPOT_SOLVER
    return {col: least[col] + x for col, x in zip(columns, solver(a / y[:, None], 1 - fixed / y))}


LEAST_COEFFICIENT = {("ttft", "prefill_one_s"): 1.0, ("tpot", "prefill_interference_s"): 1.0}
"""Lower bounds of fitted coefficients: a prompt's prefill (`prefill_one_s`: its forward as the training model costs
it, `cost.serving.prefill_forward_s`; until 2026-12 its FLOPs at the compute peak) is taken no faster than the
training model's forward, so its coefficient is at least 1 (the fit solves for the excess, non-negative); fitted
freely before the prefill queue's wait was priced (`cost.serving.prefill_queue_wait_s`), the dense fits came out
1.26-1.34 for all three engines (2.12-2.36 over FLOPs at the peak); with the wait priced SGLang's and vLLM's sit at
this bound (1.0) and TensorRT-LLM's at 1.20 (calibration/serving.yaml). Without the bound the MoE fits, whose rows cannot tell the prefill from the
co-batched prompts and the constant apart, put it at 0 (TensorRT-LLM) and 0.76 (SGLang): a DeepSeek-V3 prefill
worker was credited near the fp8 peak, about 3x the 50-74K prompt tokens/s per 8-GPU node that LMSYS and
DeepSeek publish (fresh-user review 8, finding 2). Likewise a prefill's work inside the others' decode steps
(`prefill_interference_s`, the same per-operator forward) is taken no faster than the prompt alone: fitted freely,
vLLM's came out 0.33 (a chunk at ~3x its standalone rate, above the peak; SGLang's 0.91), the two errors of
senior review 10 (finding 1) cancelling. Source: roofline (Williams et al. 2009)."""


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
    """min |a x - b|^2 subject to x >= 0 (a slower time never makes a request faster), exactly: the
    Lawson-Hanson active-set algorithm (Lawson & Hanson, Solving Least Squares Problems, 1974, ch. 23
    NNLS). Columns enter the passive set by the largest gradient a^T (b - a x); a step that would make a
    passive coefficient negative stops at the boundary and moves it back to zero. Unlike dropping the most
    negative coefficient of an unconstrained solve, the result does not depend on the columns' scale or order.
    a: (rows, terms) numpy array; b: (rows,); returns (terms,)."""
    import numpy as np

    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    tol = 1e-12 * max(1.0, float(np.abs(a).max()) * n)
    for _ in range(3 * n + 10):
        gradient = a.T @ (b - a @ x)
        if passive.all() or gradient[~passive].max() <= tol:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, gradient)))] = True
        while True:
            z = np.zeros(n)
            z[passive], *_ = np.linalg.lstsq(a[:, passive], b, rcond=None)
            if z[passive].min() > 0:
                x = z
                break
            blocking = passive & (z <= 0)
            step = np.min(x[blocking] / (x[blocking] - z[blocking]))
            x = x + step * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x


def _drop_negative_lstsq(a, b):
    """Least squares with coefficients >= 0 by elimination: solve, drop the most negative term, re-solve until
    none is negative. Not the constrained optimum in general (the answer depends on the columns' scale and
    order). a: (rows, terms) numpy array; b: (rows,); returns (terms,)."""
    import numpy as np

    keep = list(range(a.shape[1]))
    while True:
        coef = np.zeros(a.shape[1])
        coef[keep], *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
        if coef.min() >= 0 or len(keep) == 1:
            return np.maximum(coef, 0)
        keep.remove(int(np.argmin(coef)))


TPOT_SOLVER = _drop_negative_lstsq
"""The TPOT fit keeps the elimination solver the TPOT constants and their tests were built with: the exact
optimum moves the pooled MoE TPOT terms (vLLM's per-layer step cost 0 -> 101 us; qwen3-30b-a3b at one client
9.2 ms under vLLM vs 2.1 ms under SGLang, against the 3.5x engine agreement of tests/test_serve_moe_tpot.py)
without lowering the evaluation TPOT error (13.2 % both). Left to whoever owns the TPOT pooling next."""


def load_calibration(path: Path | None = None) -> dict:
    """The coefficients file (see `fit`); `CALIBRATION` by default.

    Raises:
        SpecError: the default file is absent (an install without its data files), naming where it looked.
    """
    return yaml.safe_load((path or files.data_file("calibration", "serving.yaml")).read_text())


def validate(cases: list[Case], calibration: dict | None = None, *, part: str = "all") -> dict:
    """Predicted vs measured TTFT / TPOT per row; MAPE overall and per engine, GPU and model.

    Args:
        part: `all`, `fit` or `evaluation` (the split rule of this module).
    Returns:
        {"rows": [...], "summary": {ttft_mape, tpot_mape, n}, "harness": {name: rows costed with it},
        "by": {"engine": {...}, ...}} (MAPE in %); a row without a harness value counts under `plain`.
    """
    calibration = calibration or load_calibration()
    chosen = [c for c in cases if part == "all" or (c.evaluation == (part == "evaluation"))]
    rows = []
    for case in chosen:
        coefficients = coefficients_for(calibration, case.engine, case.model)
        ttft, tpot = sv.predict_latency(case_terms(case), coefficients)
        steady, _ = sv.predict_latency(case_terms(steady_case(case)), coefficients)
        rows.append(dict(id=case.id, engine=case.engine, gpu=case.cluster, model=case.model,
                         part="evaluation" if case.evaluation else "fit",
                         ttft_ms=case.ttft_ms, ttft_pred_ms=ttft * 1e3, tpot_ms=case.tpot_ms, tpot_pred_ms=tpot * 1e3,
                         ttft_steady_ms=steady * 1e3))
    harnesses = {h: sum(c.harness == h for c in chosen) for h in HARNESSES if any(c.harness == h for c in chosen)}
    return {"rows": rows, "summary": _mape(rows), "harness": harnesses, "steady_state": _steady(rows),
            "by": {key: {v: _mape([r for r in rows if r[key] == v]) for v in sorted({r[key] for r in rows})}
                   for key in ("engine", "gpu", "model")}}


def _steady(rows: list[dict]) -> dict:
    """How far serve-plan's steady state (`steady_case`: the row without its harness) is from the rows:
    its TTFT MAPE against the measured values, and the median of steady / harness-costed predicted TTFT.
    On the evaluation part (2026-12-02, with the steady prefill queue's wait, `cost.serving.prefill_queue_wait_s`):
    58.8 % / 0.44 (sweep), 58.6 % / 0.47 (sweep-sla), 44.7 % / 0.65 (inferencex), 55.2 % / 0.47 over all (before
    it: 62.4 / 0.37, 60.1 / 0.46, 44.3 / 0.65, 57.5 / 0.41; with the first-token step added and the wave's tail in
    TPOT, servefit's refit: 57.2 / 0.44, 56.7 / 0.50, 42.2 / 0.71, 53.3 / 0.48) -- a benchmark's burst, waves and
    request path about double the steady-state TTFT."""
    if not rows:
        return {"ttft_mape": None, "median_steady_over_predicted": None, "n": 0}
    ratios = sorted(r["ttft_steady_ms"] / r["ttft_pred_ms"] for r in rows if r["ttft_pred_ms"] > 0)
    return {"ttft_mape": round(100 * sum(abs(r["ttft_steady_ms"] - r["ttft_ms"]) / r["ttft_ms"] for r in rows)
                               / len(rows), 1),
            "median_steady_over_predicted": round(statistics.median(ratios), 2) if ratios else None,
            "n": len(rows)}


def _mape(rows: list[dict]) -> dict:
    n = len(rows)
    if not n:
        return {"ttft_mape": None, "tpot_mape": None, "n": 0}
    err = lambda k: round(100 * sum(abs(r[f"{k}_pred_ms"] - r[f"{k}_ms"]) / r[f"{k}_ms"] for r in rows) / n, 1)
    return {"ttft_mape": err("ttft"), "tpot_mape": err("tpot"), "n": n}


def measured_ranges(cases: list[Case]) -> dict[str, dict[str, dict]]:
    """{engine: {class: {input_len, output_len, concurrency, instance_gpus: [min, max]; gpus, models: [names]}}}
    of the measurements (fit and evaluation parts): where the latency model's error is known. serve-plan names
    what a plan takes beyond these (`planner.serve._extrapolation_note`)."""
    groups: dict[tuple[str, str], list[Case]] = {}
    for case in cases:
        groups.setdefault((case.engine, model_class(case.model)), []).append(case)
    out: dict[str, dict[str, dict]] = {}
    for (engine, cls), rows in sorted(groups.items()):
        span = lambda values: [min(values), max(values)]  # noqa: E731
        out.setdefault(engine, {})[cls] = {
            "input_len": span([c.input_len for c in rows]), "output_len": span([c.output_len for c in rows]),
            "concurrency": span([c.concurrency for c in rows]), "instance_gpus": span([c.inst.gpus for c in rows]),
            "gpus": sorted({_cluster(c.cluster).gpu.name for c in rows}), "models": sorted({c.model for c in rows})}
    return out


def write_calibration(path: Path = CALIBRATION, data: Path = DATA) -> dict:
    """Fit on the FIT part of `data` and write the coefficients file with its provenance."""
    cases = load_cases(data)
    engines = fit(cases)
    doc = {
        "description": "[Empirical] coefficients of the serving latency model (planner/cost/serving.py "
                       "latency_terms / predict_latency), per engine and model class (dense / moe), "
                       "Hopper GPUs (H100/H200 SXM).",
        "fitted_on": f"{data.name}: rows with crc32(id) % 4 != 0 (FIT part); evaluation part: crc32(id) % 4 == 0; "
                     "each measurement once (distinct_measurements); rows costed as their campaign ran them (harness_of)",
        "method": "non-negative least squares (Lawson-Hanson), rows scaled by 1/measured (relative least squares); "
                  "regenerate: make calibrate-serving",
        "generated": datetime.date.today().isoformat(),
        "units": {"collectives": "us per collective (TPOT)", "layer_steps": "us per decoder layer per step (TPOT)",
                  "running_requests": "us per running request per step (TPOT)",
                  "constant": "ms (TTFT)", **{t: "ms per request of the campaign's request path (TTFT)" for t in sv.PATH_TERMS},
                  "other terms": "dimensionless multipliers"},
        "pooled": {f"{cls}.{target}": f"{', '.join(names)} (engines whose FIT rows: {rule.__name__.strip('_').replace('_', ' ')})"
                   for (cls, target), (names, rule) in SHARED_TERMS.items()},
        "engines": engines,
    }
    evaluation = validate(cases, doc, part="evaluation")
    doc["evaluation"] = {"summary": evaluation["summary"], "by_engine": evaluation["by"]["engine"]}
    doc["measured"] = measured_ranges(cases)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc


if __name__ == "__main__":
    if "--write" in sys.argv:
        result = write_calibration()
        from planner import report

        report.dump(result["evaluation"], "yaml")
