"""DeepSpeed's own config model accepts every DeepSpeed JSON `--emit deepspeed` writes and every
gate fixture that is a valid DeepSpeed config (issue 11, "DeepSpeed's config model, as an optional
test extra, skipped with a reason when absent").

The model: `deepspeed.runtime.config.DeepSpeedConfig` (deepspeedai/DeepSpeed edaa722
`deepspeed/runtime/config.py`: the batch triple `_batch_assertion` train = micro x accumulation x
data-parallel world size, `_do_error_check`) and its pydantic sections, among them
`deepspeed.runtime.zero.config.DeepSpeedZeroConfig` (`deepspeed/runtime/zero/config.py`, built on
`DeepSpeedConfigModel`, `extra="forbid"`: an unknown ZeRO key is an error). The data-parallel world
size is what DeepSpeed's engine hands it through `mpu.get_data_parallel_world_size()`: here a
stand-in `mpu` giving the layout's dp (tp ranks are model parallel, not data parallel).

Run: `pip install -e '.[deepspeed]'` (CPU torch suffices; no GPU, no torch.distributed) then
pytest this file. Last run, 2026-12-02 (JSON with optimizer params, gradient_clipping, ZeRO buckets): 14 passed, 3 skipped (llama-3.1-405b on 16,384 and
deepseek-v3 on 2,048 GPUs have no DeepSpeed-launchable layout that fits; ZeRO-3 with AutoTP is
not one DeepSpeed runs) with deepspeed 0.19.8,
torch 2.14.1 (from PyPI), pydantic 2.14.4, Python 3.11.7, no GPU. It found one gate fixture
DeepSpeed rejects (zero3_offload.json's reduce_bucket_size 0; now the gate's bad input too). In
the project's own .venv (no DeepSpeed) every test here is skipped with the reason below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.emit import checked, search_pins
from planner.errors import InfeasibleError, SpecError
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests/data/configs/deepspeed"
CASES = [("llama-3.1-70b", "dgx-h100", 64, 4096, 1024),       # bench/run.py CASES
         ("llama-3.1-405b", "dgx-h100", 16384, 8192, 2048),
         ("mixtral-8x22b", "dgx-h100", 256, 4096, 1024),
         ("deepseek-v3", "hgx-h800", 2048, 4096, 1024)]
REASON = ("DeepSpeed is not installed (optional extra: pip install -e '.[deepspeed]'): its config "
          "model validates the emitted JSON only where it is present")


@pytest.fixture
def model_of_deepspeed(monkeypatch):
    """`DeepSpeedConfig(doc, dp)`: DeepSpeed's config model at data-parallel world size dp."""
    config = pytest.importorskip("deepspeed.runtime.config", reason=REASON)
    # Without torch.distributed DeepSpeedConfig falls back to world size 1 when get_rank raises;
    # rank 0 lets it ask the mpu for the data-parallel world size, as under the engine.
    monkeypatch.setattr(config.dist, "get_rank", lambda *a, **k: 0)

    class Mpu:
        def __init__(self, dp):
            self.dp = dp

        def get_data_parallel_world_size(self):
            return self.dp

    return lambda doc, dp: config.DeepSpeedConfig(doc, mpu=Mpu(dp))


def _accepted(parse, doc: dict, dp: int):
    parsed = parse(json.loads(json.dumps(doc)), dp)
    micro = parsed.train_micro_batch_size_per_gpu
    assert parsed.train_batch_size == micro * parsed.gradient_accumulation_steps * dp
    zero = doc.get("zero_optimization", {}).get("stage", 0)
    assert parsed.zero_optimization_stage == zero
    return parsed


def _emitted(model, cluster, gpus, seq, batch, **fixed):
    try:
        data = plan(load_model(model), load_cluster(cluster, gpus=gpus), framework="deepspeed",
                    fixed={**search_pins("deepspeed"), **fixed}, top_k=1, seq_len=seq,
                    global_batch_size=batch)
    except InfeasibleError:
        pytest.skip(f"no DeepSpeed-launchable layout of {model} on {gpus} GPUs fits")
    try:
        emitted, verdict = checked(plan_file(data, 0, model_ref=model, cluster_ref=cluster),
                                   "deepspeed")
    except SpecError as exc:
        pytest.skip(f"--emit deepspeed refuses this plan: {exc}")
    assert verdict["verdict"] == "pass", verdict["violations"]
    return json.loads(emitted.text), verdict["parallelism"]["dp"]


@pytest.mark.parametrize("model, cluster, gpus, seq, batch", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_emitted_config_of_every_bench_case_is_accepted(model_of_deepspeed, model, cluster, gpus,
                                                        seq, batch):
    doc, dp = _emitted(model, cluster, gpus, seq, batch)
    _accepted(model_of_deepspeed, doc, dp)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("tp", [1, 2])
def test_emitted_config_of_each_zero_stage_and_tp_is_accepted(model_of_deepspeed, zero, tp):
    doc, dp = _emitted("tests/data/models/tiny.yaml", "dgx-h100", 8, 256, 64, zero_stage=zero,
                       tp=tp)
    assert dp == 8 // tp
    parsed = _accepted(model_of_deepspeed, doc, dp)
    assert ("tensor_parallel" in doc) == (tp > 1)
    if tp > 1:
        assert parsed.tensor_parallel_config.autotp_size == tp


# The gate fixtures that are valid DeepSpeed configs, each with its data-parallel world size on
# the GPUs its test checks it at (tests/test_check_deepspeed.py): hf_auto.json holds "auto"
# values the Hugging Face Trainer fills before DeepSpeed reads them, so it is not one.
VALID_FIXTURES = {
    "zero3_offload.json": 8,    # 64 = micro 2 x accumulation 4 x dp 8 (8 GPUs)
    "zero2_bf16.json": 8,       # 256 over micro 1 x dp 8 (8 GPUs): accumulation 32
    "autotp.json": 2,           # 8 GPUs / autotp_size 4 = dp 2; 8 = 1 x 4 x 2
    "fc16_zero2_tp8.json": 1,   # 8 GPUs / autotp_size 8 = dp 1 (FC-16: valid JSON, does not fit)
}


@pytest.mark.parametrize("name, dp", VALID_FIXTURES.items())
def test_valid_gate_fixtures_are_accepted(model_of_deepspeed, name, dp):
    _accepted(model_of_deepspeed, json.loads((DATA / name).read_text()), dp)


def test_the_model_is_strict_where_the_gate_is(model_of_deepspeed):
    """The oracle can fail: a misspelled ZeRO key (the gate's error `deepspeed_unknown_key`) and a
    batch triple off by the world size are rejected by DeepSpeed itself."""
    doc = json.loads((DATA / "zero3_offload.json").read_text())
    with pytest.raises(Exception, match="train_batch_size|64"):
        model_of_deepspeed(doc, 4)
    doc["zero_optimization"]["stage3_prefetch_bucket_sise"] = 1
    with pytest.raises(Exception, match="stage3_prefetch_bucket_sise"):
        model_of_deepspeed(doc, 8)
