"""`planner check FILE -c CLUSTER` (no --model) of a Megatron-LM MoE script (senior review 11 #4): an
emitted script names its model on its model line (`planner.emit.MODEL_LINE`), and the flags alone build the
MoE / MLA model (`planner.check.megatron._flags_model`); either way the check is the plan's (same layout,
same step time as the emitter's own check, which passes the model); flags that disagree with the model
line win, with a warning; the error for a model the flags cannot build never calls a present flag missing."""

from __future__ import annotations

import dataclasses

import pytest

from planner.check import evaluate, read_target
from planner.emit import MODEL_LINE, checked
from tests.cli_run import planner

MOE_PLANS = {
    # (gpus, tp, pp, ep, vpp, micro-batch, recompute, split): layouts `planner plan` picks on dgx-h100
    # (mixtral 64 GPUs; qwen3 / glm 256 GPUs bf16), vpp 1 to keep the splits simple
    "mixtral-8x7b": (64, 1, 4, 8, 1, 1, "selective", (8, 8, 8, 8)),
    "qwen3-235b-a22b": (256, 2, 8, 16, 1, 1, "selective", (11, 12, 12, 12, 12, 12, 12, 11)),
    "glm-4.5": (256, 2, 8, 16, 1, 1, "full", (12, 11, 12, 12, 12, 12, 12, 9)),
    "deepseek-v3": (256, 2, 16, 8, 1, 1, "full", (4,) * 15 + (1,)),
}


def _doc(model: str, shape: tuple | None = None) -> dict:
    """A plan file (the keys `plan_file` writes) of `shape`, by default `MOE_PLANS[model]`."""
    gpus, tp, pp, ep, vpp, mbs, recompute, split = shape or MOE_PLANS[model]
    dp, gbs = gpus // (tp * pp), 256
    return {
        "kind": "training-plan", "version": 1, "model": model, "cluster": "dgx-h100", "gpus": gpus,
        "request": {"seq_len": 4096, "global_batch_size": gbs, "precision": "bf16", "optimizer": "adamw",
                    "framework": "megatron", "fixed": {}, "headroom": 0.1, "reserve_bytes": 2 * 2**30},
        "plan": {"parallelism": {
            "dp": dp, "tp": tp, "pp": pp, "cp": 1, "ep": ep, "etp": 1, "zero_stage": 1,
            "sequence_parallel": tp > 1, "micro_batch_size": mbs, "global_batch_size": gbs,
            "num_microbatches": gbs // (mbs * dp), "vpp": vpp, "recompute": recompute,
            "pipeline_layers": list(split),
            "overlap": {"overlap_grad_reduce": True, "overlap_param_gather": True}}},
    }


def _checked_without_model(text: str, tmp_path, doc: dict) -> dict:
    """`planner check FILE -c CLUSTER` of `text` (no --model, --gpus or --seq-len: the script gives them),
    evaluated with the plan's reserve and headroom as `emit.checked` evaluates it."""
    path = tmp_path / "launch.sh"
    path.write_text(text)
    target = read_target(path, cluster=doc["cluster"])
    return evaluate(dataclasses.replace(target, reserve_bytes=doc["request"]["reserve_bytes"],
                                        at_risk_margin=doc["request"]["headroom"]))


@pytest.fixture(scope="module", params=sorted(MOE_PLANS))
def emitted(request):
    doc = _doc(request.param)
    script, verdict = checked(doc, "megatron")
    return doc, script.text, verdict


def test_emitted_script_names_its_model_and_checks_to_the_plan_without_model(emitted, tmp_path):
    doc, text, planned = emitted
    assert f"\n{MODEL_LINE}{doc['model']}\n" in text
    got = _checked_without_model(text, tmp_path, doc)
    assert got["model"] == doc["model"]
    assert got["parallelism"] == planned["parallelism"]
    assert got["time_s"] == planned["time_s"]
    assert got["verdict"] == planned["verdict"]
    assert not [v for v in got["violations"] if v["rule"] == "megatron_model_line"]


def test_the_flags_alone_build_the_same_moe_model(emitted, tmp_path):
    """The model line removed (a hand-written script): --num-experts, --moe-router-topk,
    --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size, --moe-layer-freq, the MLA flags and
    --mtp-num-layers build the model, whose step time is the plan's to the last digit."""
    doc, text, planned = emitted
    bare = "\n".join(line for line in text.splitlines() if not line.startswith(MODEL_LINE)) + "\n"
    got = _checked_without_model(bare, tmp_path, doc)
    assert got["model"] == "launch"  # named after the file: no catalog model was read
    assert got["parallelism"] == planned["parallelism"]
    assert got["time_s"] == planned["time_s"]
    assert got["memory_bytes"] == planned["memory_bytes"]


def test_flags_that_disagree_with_the_model_line_win_with_a_warning(tmp_path):
    """Mixtral's script edited to top-1 routing (--moe-router-topk 1) keeps its model line: the check
    costs the flags' model (half the routed expert work: a shorter step) and says why."""
    doc = _doc("mixtral-8x7b")
    script, planned = checked(doc, "megatron")
    assert "    --moe-router-topk 2 \\\n" in script.text
    got = _checked_without_model(script.text.replace("--moe-router-topk 2 ", "--moe-router-topk 1 "),
                                 tmp_path, doc)
    warning = [v for v in got["violations"] if v["rule"] == "megatron_model_line"]
    assert len(warning) == 1 and warning[0]["severity"] == "warning"
    assert "num_experts_per_tok 1 (model line: 2)" in warning[0]["message"]
    assert got["time_s"]["step"] < planned["time_s"]["step"]


def test_a_present_flag_is_never_called_missing(tmp_path):
    """A GPT-style script (no swiglu, LayerNorm, learned positions) with experts: the error names
    what the reader needs and what the file gives, never a present flag as missing."""
    path = tmp_path / "gpt_moe.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
                    "--num-attention-heads 16 --max-position-embeddings 4096 --vocab-size 50304 "
                    "--num-experts 8 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16\n")
    result = planner("check", str(path), "-c", "dgx-h100")
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr + result.stdout
    assert "--model is required" in message
    assert "missing" not in message and "no --num-experts" not in message
    assert "--swiglu (the file gives no --swiglu)" in message
    assert "--normalization RMSNorm (the file gives LayerNorm)" in message


def test_gpt_oss_script_checks_to_the_plan_by_its_model_line(tmp_path):
    """GPT-OSS's flags cannot state its attention sinks or YaRN scaling (deviations of the script), so its
    model line gives the model: the same step time as the emitter's check, with its sliding windows; all
    of its layers are MoE, so the MLP-bias flag (biases on, as the model's experts have) is no disagreement."""
    doc = _doc("gpt-oss-120b", (64, 1, 4, 8, 1, 1, "selective", (9, 9, 9, 9)))
    script, planned = checked(doc, "megatron")
    assert "    --window-attn-skip-freq 2 \\\n" in script.text
    got = _checked_without_model(script.text, tmp_path, doc)
    assert (got["model"], got["parallelism"], got["time_s"]) == ("gpt-oss-120b", planned["parallelism"],
                                                                 planned["time_s"])
    assert not [v for v in got["violations"] if v["rule"] == "megatron_model_line"]


def test_a_model_line_naming_no_model_here_falls_back_to_the_flags(tmp_path):
    """A script emitted from a model file that the CI checkout lacks: the flags build the model, with a warning."""
    doc = _doc("mixtral-8x7b")
    script, planned = checked(doc, "megatron")
    text = script.text.replace(f"{MODEL_LINE}mixtral-8x7b\n", f"{MODEL_LINE}models/gone.yaml\n")
    got = _checked_without_model(text, tmp_path, doc)
    assert got["time_s"] == planned["time_s"]
    assert [v["rule"] for v in got["violations"] if v["severity"] == "warning"].count("megatron_model_line") == 1
