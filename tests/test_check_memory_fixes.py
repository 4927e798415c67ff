"""`memory_exceeds` / `memory_at_risk` fixes offer the largest micro-batch that fits (review-fresh11 #4).

The fresh user edited the emitted Llama 3.1 8B dp4 pp2 Megatron-LM script (micro-batch 1) to
`--micro-batch-size 16`: the fix listed only full recompute, and a `plan -o` file edited to
`micro_batch_size: 64` said "no single change of recompute, micro-batch or ZeRO stage fits", though
micro-batch 1 is the plan that was written. Every expectation below is hand arithmetic on the
memory terms the check itself prints for the edited file (activations are linear in the
micro-batch) or the plan's own step time, never the fix text read back.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from planner.check import gate
from planner.placement.layout import Layout
from tests.cli_run import planner

GIB = 2**30
CAPACITY_GIB = 79.65
"""The H100 SXM5's usable capacity as the check prints it (catalog dgx-h100)."""
AT_RISK_GIB = 0.9 * CAPACITY_GIB
"""The 10% at-risk line."""


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """(plan file, Megatron-LM script, the plan's step time): Llama 3.1 8B on 8 H100, dp4 pp2, micro-batch 1."""
    folder = tmp_path_factory.mktemp("fresh11_4")
    plan_file = folder / "plan.yaml"
    run = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--fix", "dp=4,pp=2",
                  "-o", str(plan_file), "--emit", "megatron")
    assert run.returncode == 0, run.stderr
    doc = yaml.safe_load(plan_file.read_text())
    assert doc["plan"]["parallelism"]["micro_batch_size"] == 1
    return doc, run.stdout, doc["predicted"]["time_s"]["step"]


def _fixes(path, *options) -> dict[int, str]:
    run = planner("check", str(path), *options, "--format", "json")
    assert run.returncode == 1, run.stdout + run.stderr
    data = json.loads(run.stdout)
    over = {int(v["message"].split("pipeline stage ")[1].split()[0]): v["fix"]
            for v in data["violations"] if v["rule"] == "memory_exceeds"}
    return over, data


def _offered(fix: str, spelling: str) -> tuple[float, bool, float | None]:
    """(GiB, at risk, s/step) of the fix spelled `spelling`."""
    inside = fix.split(spelling + " (", 1)[1].split(")", 1)[0]
    gib = float(inside.split(" GiB")[0])
    step = re.search(r"([\d,]+\.\d+) s/step", inside)
    return gib, "at risk" in inside, float(step.group(1).replace(",", "")) if step else None


def test_megatron_script_at_micro_batch_16_is_offered_micro_batch_1(emitted, tmp_path):
    """Stage 0 at micro-batch 16: the activations are 16 sequences' worth. Per sequence a, the
    stage's other terms S: micro-batch b needs about S + b x a. By hand from the check's own terms:
    b = 2 lands inside the at-risk line and b = 1 under it, so the largest that fits is 1 and 2 is
    offered at risk; 1,024 / dp 4 = 256 sequences per rank, divisible by both (Megatron-LM derives 256 and
    128 micro-batches per step). Micro-batch 1 is the plan itself: its step time is the plan's."""
    _, script, plan_step = emitted
    path = tmp_path / "l8.sh"
    assert "--micro-batch-size 1 " in script
    path.write_text(script.replace("--micro-batch-size 1 ", "--micro-batch-size 16 "))
    over, data = _fixes(path, "-c", "dgx-h100", "-m", "llama-3.1-8b")
    memory = data["stages"][0]["memory_bytes"]
    per_sequence = memory["activations"] / 16 / GIB
    states = (memory["parameters"] + memory["gradients"] + memory["optimizer_states"] + memory["reserve"]) / GIB
    assert states + 2 * per_sequence > AT_RISK_GIB > states + per_sequence  # hand: 2 at risk, 1 fits
    assert states + 2 * per_sequence < CAPACITY_GIB
    gib1, risk1, step1 = _offered(over[0], "--micro-batch-size 1")
    gib2, risk2, step2 = _offered(over[0], "--micro-batch-size 2")
    assert not risk1 and risk2
    assert gib1 >= states + per_sequence - 0.05 and gib2 >= states + 2 * per_sequence - 0.05
    assert step1 == pytest.approx(plan_step, abs=0.0005)
    assert "--micro-batch-size 4" not in over[0]
    # the cheapest in step time first: full recompute re-runs every layer's forward
    assert over[0].index("--micro-batch-size 1") < over[0].index("--recompute-granularity full")
    times = [float(t.replace(",", "")) for t in re.findall(r"([\d,]+\.\d+) s/step", over[0])]
    assert times == sorted(times) and len(times) == 3
    # stage 1 is offered a micro-batch too (it had "no single change fits")
    assert "--micro-batch-size" in over[1]


def test_plan_file_edited_to_micro_batch_64_is_offered_micro_batch_1(emitted, tmp_path):
    """The plan file edited to micro-batch 64 (num_microbatches 1,024 / (4 x 64) = 4): micro-batch 32,
    the old single halving, needs 32 sequences of activations and does not fit, but micro-batch 1,
    the plan written, does -- with 256 micro-batches per step, the plan's own, and its step time."""
    doc, _, plan_step = emitted
    par = doc["plan"]["parallelism"]
    par.update(micro_batch_size=64, num_microbatches=4)
    path = tmp_path / "plan64.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    over, data = _fixes(path)
    assert "no single change" not in over[0]
    gib, risk, step = _offered(over[0], "micro_batch_size 1 with num_microbatches 256")
    assert not risk and gib < AT_RISK_GIB and step == pytest.approx(plan_step, abs=0.0005)
    assert "micro_batch_size 32" not in over[0]  # 32 x (activations / 64) alone exceeds 80 GiB
    assert data["stages"][0]["memory_bytes"]["activations"] / 64 * 32 / GIB > CAPACITY_GIB


def test_deepspeed_config_is_offered_its_micro_batch_key_with_the_accumulation_steps(tmp_path):
    """DeepSpeed's ZeRO tutorial stage-2 block at train_batch_size 256 on 8 GPUs, micro-batch edited to 32.
    By hand from the check's terms: micro-batch 4 needs 8/32 of the activations, which alone with the
    model states pass the at-risk line; micro-batch 2 needs 2/32 and fits, with 256 / (8 x 2) = 16
    gradient accumulation steps (DeepSpeed asserts train_batch_size = micro x accumulation x dp)."""
    text = open("tests/data/configs/deepspeed/zero2_bf16.json").read()
    assert '"train_micro_batch_size_per_gpu": 1,' in text
    path = tmp_path / "ds32.json"
    path.write_text(text.replace('"train_micro_batch_size_per_gpu": 1,', '"train_micro_batch_size_per_gpu": 32,'))
    over, data = _fixes(path, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "4096")
    memory = data["stages"][0]["memory_bytes"]
    states = (memory["parameters"] + memory["gradients"] + memory["optimizer_states"] + memory["reserve"]) / GIB
    per_sequence = memory["activations"] / 32 / GIB
    assert states + 4 * per_sequence > AT_RISK_GIB and states + 2 * per_sequence < AT_RISK_GIB
    spelled = "train_micro_batch_size_per_gpu 2 with gradient_accumulation_steps 16 (train_batch_size kept)"
    gib, risk, step = _offered(over[0], spelled)
    assert not risk and states + 2 * per_sequence - 0.05 <= gib < AT_RISK_GIB and step is not None
    assert "train_micro_batch_size_per_gpu 4" not in over[0]


def test_torchtitan_toml_is_offered_its_local_batch(tmp_path):
    """torchtitan's llama3_8b TOML (FSDP 8, selective AC, seq 8,192) at local batch 16, global 256: local
    batch 1 fits, 2 is offered at risk (no PP: the local batch is the micro-batch, global / (local x dp)
    the gradient accumulation steps, 256 / 8 = 32 sequences per rank divisible by both)."""
    text = open("tests/data/configs/torchtitan/llama3_8b.toml").read()
    path = tmp_path / "tt16.toml"
    path.write_text(text.replace("local_batch_size = 2\n", "local_batch_size = 16\nglobal_batch_size = 256\n"))
    over, _ = _fixes(path, "-c", "dgx-h100", "--gpus", "8")
    gib1, risk1, _ = _offered(over[0], "local_batch_size 1 with global_batch_size kept (gradient accumulation)")
    gib2, risk2, _ = _offered(over[0], "local_batch_size 2 with global_batch_size kept (gradient accumulation)")
    assert not risk1 and risk2 and gib1 < AT_RISK_GIB < gib2 < CAPACITY_GIB
    assert "local_batch_size 4 " not in over[0]


def test_smaller_micro_batches_keep_the_global_batch_a_multiple_of_dp_times_micro_batch():
    """Exact oracle: global 96 over dp 4 is 24 sequences per rank; below micro-batch 12 the
    micro-batches dividing 24 are 8, 6, 4, 3, 2, 1 (not 11, 10, 9, 7, 5), largest first."""
    layout = Layout(dp=4, micro_batch_size=12, global_batch_size=96)
    labels = [label for label, _ in gate._single_changes(layout) if label.startswith("micro_batch_size")]
    assert labels == [f"micro_batch_size {b}" for b in (8, 6, 4, 3, 2, 1)]


def test_torchtitan_pipelined_micro_batch_is_the_pipeline_micro_batch_size():
    """Under PP torchtitan's micro-batch is pipeline_parallel_microbatch_size (the local batch over it the
    pipeline's micro-batches: pipeline_parallel.py build_pipeline_schedule); without PP the local batch."""
    flat = Layout(dp=8, micro_batch_size=2, global_batch_size=64, framework="torchtitan")
    piped = flat.replace(dp=4, pp=2, global_batch_size=32)
    assert gate._spelled("micro_batch_size 2", "torchtitan-config", flat).startswith("local_batch_size 2 ")
    assert gate._spelled("micro_batch_size 2", "torchtitan-config", piped).startswith(
        "pipeline_parallel_microbatch_size 2 ")

