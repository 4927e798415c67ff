"""Serving plan files (`kind: serving-plan`, written by `planner serve-plan -o`) for `planner check`.

The file records the request (model, cluster, GPUs, lengths, engine, formats, budget knob, SLOs)
and the chosen plan (instance parallelism, replicas, concurrency, predicted numbers) and the
deployment (its mix of instance shapes, or its prefill / decode worker kinds).

Bad input (SpecError, exit 2, one line naming the file, the key path, the value and what is allowed),
checked up front for the whole file (`SCHEMA`): a missing key, a key `serve-plan -o` does not write in
`request` or `plan.parallelism`, a wrong type (a quoted number, a word where a number goes, a non-boolean
`disaggregated`), a value outside `serve-plan`'s own option bounds (positive integers up to
`planner.specs.limits`; finite SLOs and request rate > 0; `mem_fraction` in [0.05, 1] as
`--mem-fraction`), and what `serve-plan` itself refuses as input: a `max_model_len` shorter than
input + output, a context beyond the model's max_position_embeddings, both a concurrency and a request
rate, `disaggregated` that contradicts the plan's worker list.

The check re-derives each instance shape's memory and latency with the same cost model and fails
(exit 1) on: a shape the model cannot be split into, more GPUs than the file allows (counted over the
deployment's mix or workers), a plan that is not one of its deployment's shapes, a KV pool that is
empty or cannot hold the asked context or concurrency, an SLO the recomputed latency breaks (a
disaggregated plan's TTFT: its prefill workers' with their queues' waits, `planner.serve.mix_ttft_s`), a
request rate the deployment does not carry, and `planner check` options (--model, --cluster, --gpus,
--seq-len) that contradict the file (rule plan_options, as for training plan files). A prediction in
the file that differs from the recomputed one by more than 1 % is a warning (the file is stale: the
model or calibration changed since it was written).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from pathlib import Path

import yaml

from planner.check.gate import raise_bad_values
from planner.errors import SpecError, number
from planner.specs.limits import MAX_GPUS, MAX_SEQ_LEN
from planner.specs.model import context_length_words, engine_context_length

KIND = "serving-plan"
STALE_TOLERANCE = 0.01
"""Relative difference between a file's prediction and the recomputed one reported as stale."""
MAX_CONCURRENCY = 1_000_000
"""Largest concurrency: `serve-plan --concurrency`'s bound (planner/cli.py)."""


def is_serving_plan(path: str | Path) -> bool:
    """The file is YAML/JSON whose top level says `kind: serving-plan` and whose `request` has output_len
    (anything else, unreadable files included: False, left to the other readers to report)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return False
    request = data.get("request")
    return isinstance(request, dict) and "output_len" in request


# ---------------------------------------------------------------- schema

Rule = tuple[str, Callable[[object], bool]]
"""(what is allowed, in words; whether a value is allowed): one value's rule."""


def _integer(low: int, high: int) -> Rule:
    return (f"an integer in [{low:,}, {high:,}]", lambda v: type(v) is int and low <= v <= high)


def _number(low: float, high: float = math.inf, *, open_low: bool = False) -> Rule:
    bound = f"> {low:g}" if open_low else f">= {low:g}"
    words = f"a finite number {bound}" + (f" and <= {high:g}" if math.isfinite(high) else "")
    return (words, lambda v: type(v) in (int, float) and math.isfinite(v)
            and (v > low if open_low else v >= low) and v <= high)


def _choice(allowed) -> Rule:
    return ("one of " + ", ".join(map(str, allowed)), lambda v: isinstance(v, str) and v in allowed)


_TEXT: Rule = ("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))
_BOOL: Rule = ("true or false", lambda v: isinstance(v, bool))
_DEGREE = _integer(1, MAX_GPUS)
_COUNT = _integer(0, MAX_GPUS)
_LENGTH = _integer(1, MAX_SEQ_LEN)
_AMOUNT = _number(0)
_MS = _number(0.001)


def _schema() -> dict:
    """Key -> (rule or nested schema, required). A nested schema is a dict (a mapping; closed, unknown
    keys refused, when it holds the key `...` set to False) or a one-element list (a list of such)."""
    from planner.cost import serving as sv

    shape = {"tp": (_DEGREE, True), "pp": (_DEGREE, True), "ep": (_DEGREE, False), "dp": (_DEGREE, False),
             "redundant_experts": (_COUNT, False), "dense_dp": (_BOOL, False)}
    memory = {k: (_AMOUNT, False) for k in ("weights", "activations", "kv_cache", "reserve", "capacity")}
    numbers = {"gpus": (_DEGREE, False), "concurrency": (_integer(1, 2**62), False),  # the search's: up to the pool's
               "memory_bytes": (memory, False), "mem_fraction": (_number(0.0, 1.0), False),
               "kv_tokens": (_integer(0, 2**62), False),
               "max_concurrency": (_integer(0, 2**62), False), "longest_context": (_integer(0, 2**62), False),
               "longest_context_bound": (_TEXT, False), "max_num_batched_tokens": (_integer(1, 2**62), False),
               **{k: (_AMOUNT, False) for k in ("ttft_ms", "tpot_ms", "request_latency_ms", "tokens_per_s",
                                                 "tokens_per_s_per_gpu", "tokens_per_s_per_user",
                                                 "requests_per_s", "capacity_requests_per_s", "utilisation",
                                                 "in_service", "queue_wait_ms")}}
    parallelism = {**shape, "replicas": (_DEGREE, True), "prefill_workers": (_COUNT, False),
                   "decode_workers": (_COUNT, False), ...: False}
    worker = {"role": (_choice(("prefill", "decode")), True), "parallelism": (shape, True),
              "workers": (_DEGREE, True), **numbers}
    plan = {"parallelism": (parallelism, True), "prefill_parallelism": (shape, False), "workers": ([worker], False),
            **numbers}
    request = {
        "model": (_TEXT, True), "cluster": (_TEXT, True), "gpu": (_TEXT, False), "gpus": (_DEGREE, True),
        "input_len": (_LENGTH, True), "output_len": (_LENGTH, True), "engine": (_choice(sv.ENGINES), True),
        "weight_dtype": (_choice(sv.WEIGHT_FORMATS), True), "weight_dtype_reason": (_TEXT, False),
        "checkpoint_weight_dtype": (_TEXT, False),
        "kv_dtype": (_choice(sv.KV_DTYPE_BYTES), True), "concurrency": (_integer(1, MAX_CONCURRENCY), False),
        "request_rate": (_number(0.001, 1e7), False), "ttft_ms": (_MS, False), "tpot_ms": (_MS, False),
        "request_latency_ms": (_MS, False), "max_model_len": (_LENGTH, True),
        "mem_fraction": (_number(0.05, 1.0), False), "max_num_batched_tokens": (_LENGTH, False),
        "disaggregated": (_BOOL, False), ...: False}
    deployment = {"gpus": (_DEGREE, False), "mix": ([{"parallelism": (parallelism, True), **numbers}], False),
                  "workers": ([{**worker, "gpus": (_DEGREE, False)}], False),
                  **{k: (_AMOUNT, False) for k in ("tokens_per_s", "tokens_per_s_per_gpu", "requests_per_s",
                                                   "capacity_requests_per_s", "utilisation")}}
    return {"kind": (_choice((KIND,)), True), "request": (request, True), "plan": (plan, True),
            "deployment": (deployment, False)}


def validate(data: object, file: str) -> None:
    """Every value of a serving plan file against `_schema` (module docstring).

    Raises:
        SpecError: every value that breaks it, one line each (`gate.raise_bad_values`), naming its key path,
            the value and what is allowed."""
    bad: list[SpecError] = []
    _validate(data, _schema(), file, "", bad)
    raise_bad_values(file, bad)


def _validate(value: object, schema, file: str, where: str, bad: list[SpecError]) -> None:
    """Add to `bad` each value under `where` that breaks `schema`."""
    if isinstance(schema, list):
        if not isinstance(value, list):
            bad.append(SpecError(f"value {value!r} must be a list", file=file, key=where))
            return
        for i, item in enumerate(value):
            _validate(item, schema[0], file, f"{where}[{i}]", bad)
        return
    if isinstance(schema, tuple):
        allowed, ok = schema
        if not ok(value):
            bad.append(SpecError(f"value {value!r} not allowed; allowed: {allowed}", file=file, key=where))
        return
    if not isinstance(value, dict):
        bad.append(SpecError(f"value {value!r} must be a mapping", file=file, key=where or None))
        return
    keys = [k for k in schema if k is not ...]
    if schema.get(...) is False:
        for key in value:
            if key not in schema:
                close = difflib.get_close_matches(str(key), keys, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(keys)}"
                bad.append(SpecError(f"unknown key; {hint}", file=file, key=_join(where, key)))
    for key in keys:
        rule, required = schema[key]
        if value.get(key) is None:
            if required:
                bad.append(SpecError("missing value", file=file, key=_join(where, key)))
            else:
                value.pop(key, None)  # an optional key set to null (YAML `~`) reads as the key left out
            continue
        _validate(value[key], rule, file, _join(where, key), bad)


def _join(where: str, key) -> str:
    return f"{where}.{key}" if where else str(key)


# ---------------------------------------------------------------- input that serve-plan refuses


def _refused_input(request: dict, plan: dict, spec, file: str) -> None:
    """What `serve-plan` refuses as input (exit 2 there), refused here too (module docstring).

    Raises:
        SpecError: naming the key, the value and what is allowed."""
    asked = request["input_len"] + request["output_len"]
    if request["max_model_len"] < asked:
        raise SpecError(f"value {request['max_model_len']} is shorter than input_len {request['input_len']} + "
                        f"output_len {request['output_len']} = {asked} tokens, the context each request reaches; "
                        f"allowed: at least {asked}", file=file, key="request.max_model_len")
    most = engine_context_length(spec, request["engine"])
    if request["max_model_len"] > most:
        raise SpecError(f"value {request['max_model_len']}: a context beyond {spec.name}'s "
                        f"{context_length_words(spec, request['engine'])} (the engine refuses it at start-up); "
                        f"allowed: up to {most}", file=file, key="request.max_model_len")
    if request.get("concurrency") is not None and request.get("request_rate") is not None:
        raise SpecError("give concurrency or request_rate, not both (as serve-plan)", file=file,
                        key="request.request_rate")
    workers = bool(plan.get("workers"))
    if bool(request.get("disaggregated")) != workers:
        raise SpecError(f"value {bool(request.get('disaggregated'))} contradicts the plan, which "
                        f"{'lists' if workers else 'has no'} prefill / decode workers; allowed: {workers}",
                        file=file, key="request.disaggregated")


def _options_findings(spec, hw, request: dict, file: str, *, model: str | None, cluster: str | None,
                      gpus: int | None, seq_len: int | None) -> list[dict]:
    """Rule plan_options: `planner check` options that contradict the file (`plan_file.contradictions`);
    --seq-len is compared with the file's max_model_len (the context one request may reach)."""
    from planner.check.plan_file import contradictions, load_beside
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    def same_cluster(ref: str) -> bool:
        return load_beside(load_cluster, {"c": ref}, "c", Path(file), where="--cluster",
                           gpus=hw.num_gpus) == hw

    given = {"--model": (model, lambda ref: load_beside(load_model, {"m": ref}, "m", Path(file),
                                                          where="--model") == spec, spec.name),
             "--cluster": (cluster, same_cluster, hw.name),
             "--gpus": (gpus, lambda n: n == request["gpus"], request["gpus"]),
             "--seq-len": (seq_len, lambda n: n == request["max_model_len"], request["max_model_len"])}
    return [_fail(v.rule, v.message, v.fix) for v in contradictions(given, "serving plan files")]


# ---------------------------------------------------------------- the check


def check_serving_plan(path: str, *, model: str | None = None, cluster: str | None = None,
                       gpus: int | None = None, seq_len: int | None = None) -> dict:
    """{file, kind, verdict, model, cluster, gpus, parallelism, recomputed, violations, warnings}
    (module docstring); model, cluster, gpus, seq_len: `planner check`'s options, compared with the file.

    Raises:
        SpecError: a value the schema refuses, input serve-plan refuses, an unknown model, cluster or
            option value.
    """
    from planner import serve
    from planner.check.plan_file import load_beside
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    file = str(path)
    data = yaml.safe_load(Path(path).read_text())
    validate(data, file)
    request, plan, deployment = data["request"], data["plan"], data.get("deployment") or {}
    spec = load_beside(load_model, request, "model", Path(path), where="request.model")
    hw = load_beside(load_cluster, request, "cluster", Path(path), where="request.cluster")
    _refused_input(request, plan, spec, file)
    violations = _options_findings(spec, hw, request, file, model=model, cluster=cluster, gpus=gpus,
                                   seq_len=seq_len)
    req = serve.ServeRequest(
        gpus=request["gpus"], input_len=request["input_len"], output_len=request["output_len"],
        concurrency=request.get("concurrency"), request_rate=request.get("request_rate"),
        ttft_ms=request.get("ttft_ms"), tpot_ms=request.get("tpot_ms"),
        request_latency_ms=request.get("request_latency_ms"), weight_dtype=request["weight_dtype"],
        kv_dtype=request["kv_dtype"], engine=request["engine"], max_model_len=request["max_model_len"],
        mem_fraction=request.get("mem_fraction"), disaggregated=bool(request.get("disaggregated")),
        max_num_batched_tokens=request.get("max_num_batched_tokens") or serve.sv.DEFAULT_MAX_NUM_BATCHED_TOKENS)
    par = plan["parallelism"]
    disaggregated = bool(plan.get("workers"))
    violations += _deployment_findings(plan, deployment, req)
    found, recomputed = _shape_findings(spec, hw, req, par, plan.get("concurrency") or 1, disaggregated)
    violations += found
    others = ([(w["parallelism"], w.get("concurrency") or 1, f"{w['role']} worker") for w in plan.get("workers") or ()]
              if disaggregated else
              [(m["parallelism"], m.get("concurrency") or 1, "deployment.mix") for m in deployment.get("mix") or ()])
    seen = {_key(par, plan.get("concurrency") or 1)}
    for shape, concurrency, where in others:
        if _key(shape, concurrency) not in seen:
            seen.add(_key(shape, concurrency))
            more, _ = _shape_findings(spec, hw, req, shape, concurrency, disaggregated, latency=not disaggregated,
                                      where=f"{where} {_label(shape)} @{concurrency}: ")
            violations += more
    failed = lambda: any(v["severity"] == "error" for v in violations)  # noqa: E731
    if disaggregated and not failed() and "ttft_ms" in recomputed:  # every worker shape sound: price the mix
        violations += _mix_ttft_findings(spec, hw, req, plan, recomputed)
    warnings = _stale(plan, recomputed, disaggregated)
    if not failed() and req.request_rate is not None:
        violations += _rate_findings(spec, hw, req, plan, deployment, recomputed, disaggregated)
    return {"file": file, "kind": KIND, "verdict": "fail" if failed() else "pass", "model": spec.name,
            "cluster": hw.name, "gpus": req.gpus, "parallelism": par, "recomputed": recomputed,
            "violations": violations, "warnings": warnings}


def _fail(rule: str, message: str, fix: str) -> dict:
    return {"rule": rule, "severity": "error", "message": message, "fix": fix}


def _key(shape: dict, concurrency: int) -> tuple:
    return tuple(shape.get(k, 1) for k in ("tp", "pp", "ep", "dp")) + (concurrency,)


def _label(shape: dict) -> str:
    return " ".join(f"{k}{shape.get(k, 1)}" for k in ("tp", "pp", "ep", "dp") if k == "tp" or shape.get(k, 1) > 1)


def _instance(shape: dict):
    from planner.cost import serving as sv

    return sv.Instance(tp=shape["tp"], pp=shape["pp"], ep=shape.get("ep", 1), adp=shape.get("dp", 1),
                       redundant=shape.get("redundant_experts", 0), dense_dp=shape.get("dense_dp", False))


def _deployment_findings(plan: dict, deployment: dict, req) -> list[dict]:
    """Rules gpus and plan_deployment: the GPUs the deployment uses (its mix: tp x pp x replicas per entry,
    or the plan's alone where more; a disaggregated one: tp x pp x workers per worker kind) within the request's, and the plan one of the
    deployment's shapes (an edit to one and not the other would be checked against the wrong one)."""
    par, out = plan["parallelism"], []
    if plan.get("workers"):
        kinds = [(w["role"], _key(w["parallelism"], 0), w["workers"]) for w in plan["workers"]]
        used = sum(w["parallelism"]["tp"] * w["parallelism"]["pp"] * w["workers"] for w in plan["workers"])
        listed = deployment.get("workers")
        if listed is not None and sorted(kinds) != sorted((w["role"], _key(w["parallelism"], 0), w["workers"])
                                                          for w in listed):
            out.append(_fail("plan_deployment", "plan.workers and deployment.workers list different worker kinds",
                             "make the two lists agree, or re-plan with planner serve-plan"))
    else:
        mix = deployment.get("mix") or [{"parallelism": par}]
        used = max(sum(_instance(m["parallelism"]).gpus * m["parallelism"]["replicas"] for m in mix),
                   _instance(par).gpus * par["replicas"])
        if all(_key(m["parallelism"], 0) + (m["parallelism"]["replicas"],)
               != _key(par, 0) + (par["replicas"],) for m in mix):
            entries = ", ".join(f"{m['parallelism']['replicas']} x {_label(m['parallelism'])}" for m in mix)
            out.append(_fail("plan_deployment", f"plan.parallelism ({par['replicas']} x {_label(par)}) is none of "
                                                f"deployment.mix's entries ({entries})",
                             "make plan.parallelism one of deployment.mix, or re-plan with planner serve-plan"))
        out += _unlike_mix(deployment.get("mix") or [])
    if used > req.gpus:
        out.append(_fail("gpus", f"the deployment uses {used} GPUs, the request allows {req.gpus}",
                         f"--gpus {used} or fewer replicas / workers"))
    return out


def _unlike_mix(mix: list[dict]) -> list[dict]:
    """Rule router_unlike_servers (warning): a deployment.mix of replicas unlike in shape or batch (a plan file
    written before serve-plan deployed one replica shape, or edited). The servers of one deployment sit behind one
    balancer, and the engines' routers have no per-server weight (`planner.serve.ROUTER_SPLIT`): each of n servers
    gets ~1/n of the requests, so one that carries less than that (its requests/s) is overloaded."""
    kinds = {_key(m["parallelism"], m.get("concurrency") or 1) for m in mix}
    if len(kinds) < 2:
        return []
    n = sum(m["parallelism"]["replicas"] for m in mix)
    total = sum(m.get("requests_per_s") or 0 for m in mix)
    each = "; ".join(f"{m['parallelism']['replicas']} x {_label(m['parallelism'])} @{m.get('concurrency') or 1}"
                     + (f" carrying {m['requests_per_s'] / m['parallelism']['replicas']:.3g} requests/s each"
                        if m.get("requests_per_s") else "") for m in mix)
    share = f" ({total / n:.3g} requests/s each of the {total:.3g} the mix carries)" if total else ""
    return [{"rule": "router_unlike_servers", "severity": "warning",
             "message": f"deployment.mix has {len(kinds)} unlike replica kinds ({each}): a balancer without "
                        f"per-server weights gives each of the {n} servers ~1/{n} of the requests{share}, beyond "
                        f"what the smaller ones carry",
             "fix": "re-plan with planner serve-plan (one replica shape per deployment), or weight each server by "
                    "its requests/s in the balancer"}]


def _shape_findings(spec, hw, req, shape: dict, concurrency: int, disaggregated: bool, *, latency: bool = True,
                    where: str = "") -> tuple[list[dict], dict]:
    """(violations, recomputed numbers) of one instance shape at `concurrency`: rules shape, memory,
    context, concurrency, slo (TTFT not for a disaggregated plan: its prefill workers answer it, `_mix_ttft_findings`). At a request rate
    (aggregated) TTFT / TPOT are recomputed at the load each of the shape's `replicas` gets, as serve-plan reports
    them (`planner.serve.replica_load`); requests_per_s stays the closed-loop capacity at `concurrency`."""
    from planner import serve
    from planner.cost import serving as sv
    from planner.serve_validate import coefficients_for, load_calibration

    inst, out = _instance(shape), []
    if inst.tp % inst.ep or inst.tp % inst.adp:
        return [_fail("shape", f"{where}ep={inst.ep} and dp={inst.adp} must divide tp={inst.tp}",
                      "choose divisors of tp")], {}
    reason = serve._indivisible(spec, inst)
    if reason:
        return [_fail("shape", f"{where}tp={inst.tp} pp={inst.pp} ep={inst.ep} dp={inst.adp}: {reason}",
                      "re-plan with planner serve-plan")], {}
    mem = serve._memory(spec, hw, req, inst)
    longest = sv.longest_context(mem, spec, engine=req.engine)
    cmax = sv.max_concurrency(mem, spec, inst, req.context)
    recomputed = {"memory_bytes": {"weights": mem.weights, "activations": mem.activations,
                                   "kv_cache": mem.kv_cache, "reserve": mem.reserve, "capacity": mem.capacity},
                  "kv_tokens": mem.kv_tokens, "max_concurrency": cmax, "longest_context": longest,
                  "longest_context_bound": sv.context_bound(mem, spec, engine=req.engine)}
    if mem.kv_cache <= 0:
        out.append(_fail("memory", f"{where}weights {mem.weights / sv.GIB:.2f} GiB leave no KV pool "
                                   f"({mem.kv_cache / sv.GIB:.2f} GiB) under {req.engine} "
                                   f"{sv.ENGINES[req.engine].flag}={mem.budget_fraction:g}",
                         "more tp or pp, or a smaller weight format"))
    elif longest < req.context:
        out.append(_fail("context", f"{where}the KV pool holds {longest} tokens of one sequence, fewer than "
                                    f"max_model_len {req.context}", f"max_model_len {longest} or more tp/pp"))
    elif concurrency > cmax:
        out.append(_fail("concurrency", f"{where}concurrency {concurrency} exceeds the {cmax} sequences the KV "
                                        f"pool holds", f"concurrency {cmax}"))
    elif latency:
        coefficients = coefficients_for(load_calibration(), req.engine, spec)
        cap = serve.running_cap(req, inst, cmax, decode_only=disaggregated)
        ttft, tpot = serve._latency(spec, hw, req, inst, concurrency, cap, coefficients,
                                    interference=not disaggregated)
        recomputed.update(ttft_ms=round(ttft * 1e3, 1), tpot_ms=round(tpot * 1e3, 2),
                          requests_per_s=concurrency / (ttft + (req.output_len - 1) * tpot))
        load = serve.replica_load(spec, hw, req, inst, concurrency, cap, req.request_rate / shape.get("replicas", 1),
                                  coefficients) if req.request_rate is not None and not disaggregated else None
        if load is not None and load["utilisation"] < 1:  # at or above the capacity: rule request_rate says so
            ttft, tpot = load["ttft_s"], load["tpot_s"]
            recomputed.update(ttft_ms=round(ttft * 1e3, 1), tpot_ms=round(tpot * 1e3, 2))
        for name, value, slo in (("TTFT", ttft * 1e3, req.ttft_ms), ("TPOT", tpot * 1e3, req.tpot_ms)):
            if slo is not None and value > slo and not (name == "TTFT" and disaggregated):
                out.append(_fail("slo", f"{where}{name} {value:.1f} ms > {slo:g} ms", "re-plan with planner serve-plan"))
    return out, recomputed


def _mix_ttft_findings(spec, hw, req, plan: dict, recomputed: dict) -> list[dict]:
    """Rule slo for a disaggregated plan's TTFT: recomputed as serve-plan reports it (`planner.serve.mix_ttft_s`:
    the prefill workers' TTFT + KV transfer + their queue's wait at the file's worker counts, + at a request rate
    the wait for a free decode slot), the worst over the file's prefill and decode worker kinds; it replaces the
    decode shape's aggregated TTFT in `recomputed` (fresh-user review 13, finding 5: a file whose request.ttft_ms
    was set below its plan's TTFT passed with the decode shape's aggregated one)."""
    from planner import serve
    from planner.serve_validate import coefficients_for, load_calibration

    coefficients = coefficients_for(load_calibration(), req.engine, spec)
    workers = plan["workers"]
    pairs = [((_instance(p["parallelism"]), p["workers"]),
              (_instance(d["parallelism"]), d["workers"], d.get("concurrency") or 1))
             for p in workers if p["role"] == "prefill" for d in workers if d["role"] == "decode"]
    ttfts = [serve.mix_ttft_s(spec, hw, req, coefficients, *pair) for pair in pairs]
    if not ttfts or None in ttfts:
        recomputed.pop("ttft_ms", None)
        return [_fail("memory", "a prefill or decode worker's KV pool holds no sequence of its context",
                      "re-plan with planner serve-plan")]
    ttft_ms = max(ttfts) * 1e3
    if math.isinf(ttft_ms):  # a side at or above its capacity at the request rate: rule request_rate says so
        recomputed.pop("ttft_ms", None)
        return []
    recomputed["ttft_ms"] = round(ttft_ms, 1)
    if req.ttft_ms is not None and ttft_ms > req.ttft_ms:
        return [_fail("slo", f"TTFT {ttft_ms:.1f} ms > {req.ttft_ms:g} ms (prefill workers' TTFT with their queue's "
                             f"wait{' and the decode slot wait' if req.request_rate is not None else ''})",
                      "re-plan with planner serve-plan")]
    return []


def _stale(plan: dict, recomputed: dict, disaggregated: bool) -> list[str]:
    warnings = []
    for key in ("ttft_ms", "tpot_ms"):
        given = plan.get(key)
        if given and key in recomputed and abs(given - recomputed[key]) > STALE_TOLERANCE * recomputed[key]:
            warnings.append(f"stale prediction: the file says {key} {given}, the model now gives {recomputed[key]}")
    return warnings


def _rate_findings(spec, hw, req, plan: dict, deployment: dict, recomputed: dict, disaggregated: bool) -> list[dict]:
    """Rule request_rate: the deployment carries request.request_rate. Aggregated: the recomputed
    concurrency / (TTFT + (output_len - 1) x TPOT) of each instance (Little's law, as serve-plan rates a
    shape), times its replicas, summed over the mix. Disaggregated: the rate the file states (deployment,
    else plan requests_per_s), its prefill and decode workers' rate matching not recomputed here."""
    if disaggregated:
        # the mix's capacity where the file states it (serve-plan at a rate: requests_per_s is then the rate served)
        key = "capacity_requests_per_s" if "capacity_requests_per_s" in deployment else "requests_per_s"
        carried = deployment.get(key, plan.get("requests_per_s"))
        how = f"the file's deployment.{key}"
        if carried is None:
            return [_fail("request_rate", "a disaggregated plan without requests_per_s: the rate it carries is "
                                          "unknown", "re-plan with planner serve-plan")]
    else:
        carried, par = 0.0, plan["parallelism"]
        for m in deployment.get("mix") or [{"parallelism": par, "concurrency": plan.get("concurrency")}]:
            own = recomputed if _key(m["parallelism"], m.get("concurrency") or 1) == _key(par, plan.get("concurrency") or 1) \
                else _shape_findings(spec, hw, req, m["parallelism"], m.get("concurrency") or 1, False)[1]
            carried += own.get("requests_per_s", 0.0) * m["parallelism"]["replicas"]
        how = "recomputed: concurrency / request latency x replicas"
    if req.request_rate > carried * (1 + STALE_TOLERANCE):
        return [_fail("request_rate", f"request_rate {number(req.request_rate)}/s, but the deployment carries "
                                      f"{carried:.3f} requests/s ({how})",
                      f"request_rate {carried:.3f} or less, or re-plan with planner serve-plan --request-rate "
                      f"{req.request_rate:g}")]
    return []
