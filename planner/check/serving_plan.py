"""Serving plan files (`kind: serving-plan`, written by `planner serve-plan -o`) for `planner check`.

The file records the request (model, cluster, GPUs, lengths, engine, formats, budget knob, SLOs)
and the chosen plan (instance parallelism, replicas, concurrency, predicted numbers). The check
re-derives the instance's memory and latency with the same cost model and fails (exit 1) on:
a shape the model cannot be split into, more GPUs than the file allows, a KV pool that is empty
or cannot hold the asked context or concurrency, or an SLO the recomputed latency breaks. A
prediction in the file that differs from the recomputed one by more than 1 % is a warning
(the file is stale: the model or calibration changed since it was written).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from planner.errors import SpecError

KIND = "serving-plan"
STALE_TOLERANCE = 0.01
"""Relative difference between a file's prediction and the recomputed one reported as stale."""
_REQUEST_KEYS = ("model", "cluster", "gpus", "input_len", "output_len", "engine", "weight_dtype", "kv_dtype",
                 "max_model_len")
_INT_KEYS = ("tp", "pp", "ep", "dp", "replicas")


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


def _read(path: str) -> tuple[dict, dict]:
    data = yaml.safe_load(Path(path).read_text())
    request, plan = data.get("request"), data.get("plan")
    if not isinstance(request, dict) or not isinstance(plan, dict) or not isinstance(plan.get("parallelism"), dict):
        raise SpecError("a serving plan needs `request` and `plan.parallelism` mappings", file=path, key="plan")
    for key in _REQUEST_KEYS:
        if request.get(key) is None:
            raise SpecError("missing value", file=path, key=f"request.{key}")
    for key in _INT_KEYS:
        value = plan["parallelism"].get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"value {value!r} must be a positive integer", file=path, key=f"plan.parallelism.{key}")
    if not isinstance(plan.get("workers") or [], list):
        raise SpecError("value must be a list of worker kinds", file=path, key="plan.workers")
    for i, worker in enumerate(plan.get("workers") or ()):
        par = worker.get("parallelism") if isinstance(worker, dict) else None
        values = [worker.get("workers")] + [par.get(k, 1) for k in ("tp", "pp")] if isinstance(par, dict) else [None]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise SpecError("a worker needs a positive integer `workers` and `parallelism` tp (and pp)", file=path,
                            key=f"plan.workers[{i}]")
    return request, plan


def check_serving_plan(path: str) -> dict:
    """{file, kind, verdict, model, cluster, gpus, parallelism, recomputed, violations, warnings}.

    Raises:
        SpecError: the file lacks a key the check needs, or names an unknown model, cluster or option value.
    """
    from planner import serve
    from planner.check.plan_file import load_beside
    from planner.cost import serving as sv
    from planner.serve_validate import coefficients_for, load_calibration
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    request, plan = _read(path)
    par = plan["parallelism"]
    for key, allowed in (("engine", sv.ENGINES), ("weight_dtype", sv.WEIGHT_FORMATS), ("kv_dtype", sv.KV_DTYPE_BYTES)):
        if request[key] not in allowed:
            raise SpecError(f"value {request[key]!r} not allowed; allowed: {', '.join(allowed)}", file=path,
                            key=f"request.{key}")
    spec = load_beside(load_model, request, "model", Path(path), where="request.model")
    hw = load_beside(load_cluster, request, "cluster", Path(path), where="request.cluster")
    req = serve.ServeRequest(
        gpus=request["gpus"], input_len=request["input_len"], output_len=request["output_len"],
        ttft_ms=request.get("ttft_ms"), tpot_ms=request.get("tpot_ms"),
        request_latency_ms=request.get("request_latency_ms"), weight_dtype=request["weight_dtype"],
        kv_dtype=request["kv_dtype"], engine=request["engine"], max_model_len=request["max_model_len"],
        mem_fraction=request.get("mem_fraction"),
        max_num_batched_tokens=request.get("max_num_batched_tokens") or sv.DEFAULT_MAX_NUM_BATCHED_TOKENS)
    inst = sv.Instance(tp=par["tp"], pp=par["pp"], ep=par["ep"], adp=par["dp"])
    violations, warnings, recomputed = [], [], {}

    def fail(rule: str, message: str, fix: str) -> None:
        violations.append({"rule": rule, "severity": "error", "message": message, "fix": fix})

    if inst.tp % inst.ep or inst.tp % inst.adp:
        fail("shape", f"ep={inst.ep} and dp={inst.adp} must divide tp={inst.tp}", "choose divisors of tp")
    else:
        reason = serve._indivisible(spec, inst)
        if reason:
            fail("shape", f"tp={inst.tp} pp={inst.pp} ep={inst.ep} dp={inst.adp}: {reason}",
                 "re-plan with planner serve-plan")
    prefill = plan.get("prefill_parallelism") or {}
    if plan.get("workers"):  # a disaggregated mix lists each worker kind (decode shapes may differ)
        gpus = sum(w["parallelism"]["tp"] * w["parallelism"].get("pp", 1) * w["workers"] for w in plan["workers"])
    else:
        gpus = inst.gpus * par["replicas"] + prefill.get("tp", 0) * prefill.get("pp", 1) * par.get("prefill_workers", 0)
    if gpus > req.gpus:
        fail("gpus", f"the plan uses {gpus} GPUs, the request allows {req.gpus}", f"--gpus {gpus} or fewer replicas")
    if not violations:
        mem = serve._memory(spec, hw, req, inst)
        longest = sv.longest_context(mem, spec)
        cmax = sv.max_concurrency(mem, spec, inst, req.context)
        recomputed = {"memory_bytes": {"weights": mem.weights, "activations": mem.activations,
                                       "kv_cache": mem.kv_cache, "reserve": mem.reserve, "capacity": mem.capacity},
                      "kv_tokens": mem.kv_tokens, "max_concurrency": cmax, "longest_context": longest,
                      "longest_context_bound": sv.context_bound(mem, spec)}
        concurrency = plan.get("concurrency") or 1
        if mem.kv_cache <= 0:
            fail("memory", f"weights {mem.weights / sv.GIB:.2f} GiB leave no KV pool ({mem.kv_cache / sv.GIB:.2f} GiB) "
                           f"under {req.engine} {sv.ENGINES[req.engine].flag}={mem.budget_fraction:g}",
                 "more tp or pp, or a smaller weight format")
        elif longest < req.context:
            fail("context", f"the KV pool holds {longest} tokens of one sequence, fewer than max_model_len "
                            f"{req.context}", f"max_model_len {longest} or more tp/pp")
        elif concurrency > cmax:
            fail("concurrency", f"concurrency {concurrency} exceeds the {cmax} sequences the KV pool holds",
                 f"concurrency {cmax}")
        else:
            coefficients = coefficients_for(load_calibration(), req.engine, spec)
            disaggregated = bool(par.get("prefill_workers"))
            cap = serve.running_cap(req, inst, cmax, decode_only=disaggregated)
            ttft, tpot = serve._latency(spec, hw, req, inst, concurrency, cap, coefficients,
                                        interference=not disaggregated)
            recomputed.update(ttft_ms=round(ttft * 1e3, 1), tpot_ms=round(tpot * 1e3, 2))
            for name, value, slo in (("TTFT", ttft * 1e3, req.ttft_ms), ("TPOT", tpot * 1e3, req.tpot_ms)):
                if slo is not None and value > slo and not (name == "TTFT" and par.get("prefill_workers")):
                    fail("slo", f"{name} {value:.1f} ms > {slo:g} ms", "re-plan with planner serve-plan")
            for key in ("ttft_ms", "tpot_ms"):
                given = plan.get(key)
                if key == "ttft_ms" and par.get("prefill_workers"):
                    continue
                if given and abs(given - recomputed[key]) > STALE_TOLERANCE * recomputed[key]:
                    warnings.append(f"stale prediction: the file says {key} {given}, the model now gives {recomputed[key]}")
    return {"file": str(path), "kind": KIND, "verdict": "fail" if violations else "pass", "model": spec.name,
            "cluster": hw.name, "gpus": req.gpus, "parallelism": par, "recomputed": recomputed,
            "violations": violations, "warnings": warnings}
