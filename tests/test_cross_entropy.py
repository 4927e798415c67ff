"""The loss as framework knobs (issue 8 item 1): Megatron-LM's fused cross-entropy
(`Layout.cross_entropy_fusion`, --cross-entropy-loss-fusion / --cross-entropy-fusion-impl) and
torchtitan's chunked loss (`Layout.loss_chunks`, ChunkedLossWrapper num_chunks). Memory by hand in
tests/test_activations.py; here the defaults per framework, the rules, and read / write / plan.

Sources (in planner/cost/activations.py, planner/placement/precision.py and rules.py):
NVIDIA/Megatron-LM@d98e8a6 model_parallel_config.py l. 320-328 (fusion off, impl native),
arguments.py l. 1697-1702 (te refused); pytorch/torchtitan b5bcd76 components/loss.py and every
preset's `ChunkedLossWrapper.Config` (num_chunks 8); the TOML releases (to 238fa99) had none.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app
from planner.emit import checked, search_pins
from planner.placement.layout import Layout
from planner.placement.precision import loss_chunks
from planner.placement.rules import check_layout
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "tests/data/configs/megatron/llama3_8b_h100_fp8.sh"
runner = CliRunner()


def test_framework_defaults():
    """Megatron-LM and DeepSpeed: no chunked loss, the unfused cross-entropy; torchtitan: the plain
    loss of its TOML releases and measured runs (its current presets' 8 chunks are read from their
    command lines, test_check_torchtitan_cli.py)."""
    assert loss_chunks(Layout(framework="megatron")) == 1
    assert loss_chunks(Layout(framework="deepspeed")) == 1
    assert loss_chunks(Layout(framework="torchtitan")) == 1
    assert loss_chunks(Layout(framework="torchtitan", loss_chunks=8)) == 8
    assert Layout().cross_entropy_fusion is None


def _rules(layout: Layout) -> list[str]:
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    return [v.message for v in check_layout(model, cluster, layout) if v.rule == "cross_entropy"]


@pytest.mark.parametrize("layout, words", [
    (Layout(dp=8, global_batch_size=8, cross_entropy_fusion="te"), "refuses Transformer Engine"),
    (Layout(dp=8, global_batch_size=8, framework="deepspeed", cross_entropy_fusion="native"), "Megatron-LM's"),
    (Layout(dp=8, global_batch_size=8, framework="megatron", loss_chunks=4), "no chunked loss"),
    # 1 x 4096 tokens do not split into 3 chunks (torchtitan's torch._check)
    (Layout(dp=8, zero_stage=3, global_batch_size=8, framework="torchtitan", loss_chunks=3), "must divide"),
])
def test_rules(layout, words):
    messages = _rules(layout)
    assert len(messages) == 1 and words in messages[0], messages


def test_valid_knobs_break_no_rule():
    assert _rules(Layout(dp=8, global_batch_size=8, cross_entropy_fusion="native")) == []
    assert _rules(Layout(dp=8, zero_stage=3, global_batch_size=8, framework="torchtitan", loss_chunks=16)) == []


def _read(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text)
        return read_target(path, model=None, cluster="dgx-h100", gpus=None, seq_len=None)


def test_megatron_reader_takes_the_flags():
    text = LLAMA.read_text()
    assert _read(text).layout.cross_entropy_fusion is None
    assert _read(text.replace("--bf16", "--bf16 --cross-entropy-loss-fusion")).layout.cross_entropy_fusion == "native"
    te = text.replace("--bf16", "--bf16 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te")
    assert _read(te).layout.cross_entropy_fusion == "te"
    # the implementation alone leaves the fusion off (Megatron reads it only with the switch)
    assert _read(text.replace("--bf16", "--bf16 --cross-entropy-fusion-impl te")).layout.cross_entropy_fusion is None


def test_megatron_check_fails_te_as_megatron_does(tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(LLAMA.read_text().replace(
        "--bf16", "--bf16 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te"))
    result = runner.invoke(app, ["check", str(path), "-c", "dgx-h100"])
    assert result.exit_code == 1 and "cross_entropy" in result.output, result.output


def test_plan_writes_and_check_reads_the_fusion_back():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework="megatron",
                precision_knobs={"cross_entropy_fusion": "native"}, fixed=search_pins("megatron"), top_k=1)
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert doc["request"]["cross_entropy_fusion"] == "native"
    emitted, verdict = checked(doc, "megatron")
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert "--cross-entropy-loss-fusion" in emitted.text and "--cross-entropy-fusion-impl" not in emitted.text


def test_torchtitan_command_line_writes_chunks_other_than_the_presets():
    """The presets' 8 is not written; the plan's 4 is, and the plain loss's 1."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework="torchtitan",
                precision_knobs={"loss_chunks": 4}, fixed={**search_pins("torchtitan"), "recompute": "full"},
                top_k=1)
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    emitted, verdict = checked(doc, "torchtitan")
    assert "--loss.num_chunks 4" in emitted.text
    assert verdict["verdict"] == "pass", verdict["violations"]
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework="torchtitan",
                fixed={**search_pins("torchtitan"), "recompute": "full"}, top_k=1)
    emitted, _ = checked(plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100"), "torchtitan")
    assert "--loss.num_chunks 1" in emitted.text


def test_explain_takes_the_knobs_and_the_chunked_loss_frees_the_logits():
    """Llama 3.1 8B, torchtitan FSDP over 8, 2 x 8192 tokens, op-SAC (the t1 row's layout): the
    plain loss holds 4 + 10 B per logit at its backward, 14 x 16,384 x 128,256 B = 27.4 GiB; the
    chunked one an eighth of the logits (3.4 GiB) and 8h per token (0.5 GiB): over 20 GiB less."""
    base = ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--framework", "torchtitan",
            "--zero-stage", "3", "--micro-batch-size", "2", "--seq-len", "8192", "--recompute", "selective",
            "--format", "json"]
    import json
    plain = json.loads(runner.invoke(app, base).output)
    chunked = json.loads(runner.invoke(app, [*base, "--loss-chunks", "8"]).output)
    bad = runner.invoke(app, [*base, "--cross-entropy-fusion", "native"])
    assert bad.exit_code == 1 and "cross_entropy_fusion=native is Megatron-LM's" in bad.output
    assert chunked["memory_bytes"]["total"] < plain["memory_bytes"]["total"] - 20 * 2**30
