"""Emit -> check round trips for every emitter on every `make bench` case (bench/run.py CASES):
the best plan under the emitter's framework conventions is emitted, read back by `planner check`'s
reader of that kind, and passes; or the emitter refuses it with one line naming why (`--emit`
SpecError: a model torchtitan ships no preset of, a split only a config function gives) -- never a
configuration that fails its own check or a reader that cannot read what a writer wrote."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from planner.emit import FRAMEWORK_OF, FRAMEWORKS, checked, search_pins
from planner.errors import InfeasibleError, SpecError
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
BENCH = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BENCH)
KIND = {"megatron": "megatron-args", "deepspeed": "deepspeed-config",
        "torchtitan": "torchtitan-command", "torchtitan-toml": "torchtitan-config"}


def _request(extra: list[str]) -> dict:
    options = dict(zip(extra[::2], extra[1::2]))
    seq = int(options.get("--seq-len", 4096))
    tokens = options.get("--global-batch-tokens")
    return {"seq_len": seq, "global_batch_size": int(tokens) // seq if tokens else 1024}


@pytest.mark.parametrize("emitter", FRAMEWORKS)
@pytest.mark.parametrize("model, cluster, gpus, extra", BENCH.CASES,
                         ids=[f"{m}-{g}" for m, _, g, _ in BENCH.CASES])
def test_emitted_configuration_reads_back_and_passes(model, cluster, gpus, extra, emitter):
    framework = FRAMEWORK_OF.get(emitter, emitter)
    try:
        data = plan(load_model(model), load_cluster(cluster, gpus=gpus), framework=framework,
                    fixed=search_pins(framework), top_k=1, **_request(extra))
    except InfeasibleError:
        pytest.skip(f"no {framework}-launchable layout of {model} on {gpus} GPUs fits")
    doc = plan_file(data, 0, model_ref=model, cluster_ref=cluster)
    try:
        emitted, verdict = checked(doc, emitter)
    except SpecError as exc:
        assert exc.key == "--emit" and "\n" not in str(exc), str(exc)
        return
    assert verdict["kind"] == KIND[emitter]
    # Exactly one trailing newline: a saved file or a terminal shows the next output on its own line.
    assert emitted.text.endswith("\n") and not emitted.text.endswith("\n\n"), repr(emitted.text[-40:])
    assert verdict["verdict"] == "pass", verdict["violations"]
    planned = doc["plan"]["parallelism"]
    if not emitted.deviations:
        assert {k: verdict["parallelism"][k] for k in ("tp", "pp", "cp", "ep")} == \
            {k: planned[k] for k in ("tp", "pp", "cp", "ep")}


# DeepSpeed's own config model on every emitted DeepSpeed JSON: tests/test_deepspeed_config_model.py.
