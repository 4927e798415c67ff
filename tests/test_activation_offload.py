"""Megatron-LM fine-grained activation offloading (issue 8 item 5): `--fine-grained-activation-offloading
--offload-modules ...` moves the tensors autograd saves inside each listed module to host memory in
forward and back before backward (Megatron-LM@d98e8a6 fine_grained_activation_offload.py; what
each module's scope saves: `cost.activations.OFFLOAD_MIN_ELEMENTS`). Byte counts by hand from the
Hugging Face configs (Llama 3.1 8B: h 4096, 32 heads, 8 KV heads of 128; DeepSeek-V3: h 7168,
experts 2048 wide, top-8), bf16 activations (2 B), tensors under 1,048,576 elements stay.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app
from planner.cost import step_time as st
from planner.cost.activations import layer_activation_bytes
from planner.cost.memory import stage_memory
from planner.emit import checked, search_pins
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

runner = CliRunner()
LLAMA, DSV3 = load_model("llama-3.1-8b"), load_model("deepseek-v3")
T = 4096


def _offloaded(model, layer, modules, **kw) -> int:
    args = dict(seq_len=T, micro_batch_size=1, tp=1) | kw
    return layer_activation_bytes(model, layer, offload_modules=modules, **args).offloaded


def test_llama_attention_scopes():
    """core_attn: q 4096 + k 1024 + v 1024 per token (the fp32 LSE, 32 x 4096 elements, is under the
    size floor): 2 x 4096 x 6144. qkv_linear: TE's fused LayerNormLinear keeps its input and the
    normalised output, 2 x 4096 each. attn_norm: the norm is fused (IdentityOp), nothing."""
    assert _offloaded(LLAMA, 0, ("core_attn",)) == 2 * T * 6144 == 50_331_648
    assert _offloaded(LLAMA, 0, ("qkv_linear",)) == 2 * 2 * T * 4096
    assert _offloaded(LLAMA, 0, ("attn_norm",)) == 0
    assert _offloaded(LLAMA, 0, ("core_attn", "attn_proj")) == 2 * T * (6144 + 4096)


def test_deepseek_expert_scopes():
    """tp 2 with SP: expert_fc1 the 8 routed copies' fc1 input, 7168 each: 2 x 4096 x 8 x 7168 / 2;
    moe_act the SwiGLU input, 2 x 2048 per copy: 2 x 4096 x 8 x 4096 / 2. A dense layer has none."""
    kw = dict(tp=2, sequence_parallel=True)
    assert _offloaded(DSV3, 3, ("expert_fc1",), **kw) == 2 * T * 8 * 7168 // 2 == 234_881_024
    assert _offloaded(DSV3, 3, ("moe_act",), **kw) == 2 * T * 8 * 4096 // 2 == 134_217_728
    assert _offloaded(DSV3, 0, ("expert_fc1", "moe_act"), **kw) == 0


def test_stage_memory_keeps_one_layer_on_the_gpu():
    """No PP: one micro-batch in flight; the 32 layers keep what is not offloaded and Megatron's
    margin keeps one layer's offloaded tensors (the last group of each module) on the GPU."""
    cluster = load_cluster("dgx-h100", gpus=8)
    base = Layout(dp=8, seq_len=T, global_batch_size=64)
    off = base.replace(offload_modules=("core_attn", "attn_proj"))
    before, after = stage_memory(LLAMA, cluster, base, 0), stage_memory(LLAMA, cluster, off, 0)
    moved = 2 * T * (6144 + 4096)
    assert before.activation_terms["layers"] - after.activation_terms["layers"] == 32 * moved
    assert after.activation_terms["offload_margin"] == moved


def test_host_memory_shortfall_is_a_warning():
    cluster = dataclasses.replace(load_cluster("dgx-h100", gpus=8), host_memory_gib=1)
    layout = Layout(dp=8, seq_len=T, global_batch_size=64, offload_modules=("qkv_linear", "core_attn"))
    warnings = stage_memory(LLAMA, cluster, layout, 0).warnings
    # 32 layers x (2 x 4096 x 4096 x 2 + 2 x 4096 x 6144) B = 3.5 GiB per GPU, 28 GiB per node of 1
    assert any("pinned host memory" in w and "3.5 GiB" in w for w in warnings), warnings


def test_step_time_shows_the_copies_beyond_the_neighbouring_compute():
    """tp 8 without SP: each GPU moves the whole qkv_linear tensors (2 x 2 x 4096 x 4096 B) while its
    compute is an eighth of the layer's; exposed = max(0, copy - forward) + max(0, copy - backward)
    with copy = bytes / host link."""
    cluster = load_cluster("dgx-h100", gpus=8)
    base = Layout(tp=8, seq_len=T, global_batch_size=8)
    off = base.replace(offload_modules=("qkv_linear",))
    a, b = st.layer_time(LLAMA, cluster, base, 0, "none"), st.layer_time(LLAMA, cluster, off, 0, "none")
    copy = 2 * 2 * T * 4096 / (cluster.host_link_gb_per_s * 1e9)
    expected = max(0.0, copy - a.forward_s) + max(0.0, copy - 2 * a.forward_s)
    assert expected > 0
    assert b.comm_s - a.comm_s == pytest.approx(expected, rel=1e-12)
    assert st.layer_time(LLAMA, cluster, off, 0, "full").comm_s == st.layer_time(
        LLAMA, cluster, base, 0, "full").comm_s  # full recompute saves only the layer input


@pytest.mark.parametrize("extra, words", [
    (["--offload-modules", "attn_proj"], ["attn_proj", "core_attn"]),
    (["--offload-modules", "mlp"], ["--offload-modules", "mlp"]),
    (["--framework", "torchtitan", "--offload-modules", "core_attn"], ["--offload-modules", "torchtitan"]),
])
def test_explain_refuses_bad_offload_modules(extra, words):
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", *extra])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and all(w in result.output for w in words), result.output


def test_explain_reports_less_activation_memory():
    args = ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--format", "json"]
    plain = json.loads(runner.invoke(app, args).output)
    off = json.loads(runner.invoke(app, [*args, "--offload-modules", "core_attn,attn_proj"]).output)
    assert off["parallelism"]["offload_modules"] == ["core_attn", "attn_proj"]
    assert off["memory_bytes"]["activations"] < plain["memory_bytes"]["activations"]


def _read(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text)
        return read_target(path, model="llama-3.1-8b", cluster="dgx-h100", gpus=8, seq_len=4096)


def test_plan_emits_and_check_reads_the_offload_flags():
    data = plan(LLAMA, load_cluster("dgx-h100"), seq_len=4096, global_batch_size=64, framework="megatron",
                offload_modules=("core_attn", "attn_proj"), fixed=search_pins("megatron"), top_k=1)
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert doc["request"]["offload_modules"] == ["core_attn", "attn_proj"]
    emitted, verdict = checked(doc, "megatron")
    assert verdict["verdict"] == "pass", verdict["violations"]
    lines = [line.strip(" \\") for line in emitted.text.splitlines()]
    assert "--fine-grained-activation-offloading" in lines and "--offload-modules core_attn attn_proj" in lines
    assert _read(emitted.text).layout.offload_modules == ("core_attn", "attn_proj")
    # without the switch Megatron ignores the module list
    text = emitted.text.replace("--fine-grained-activation-offloading \\\n", "")
    assert "--fine-grained-activation-offloading" not in text
    assert _read(text).layout.offload_modules is None
    with pytest.raises(SpecError):
        _read(emitted.text.replace("--offload-modules core_attn", "--offload-modules core_attention"))


def test_whole_layer_offload_is_priced_on_the_host_link():
    """The `offload activations` target (every saved tensor of a layer on the host, DeepSpeed
    cpu_checkpointing): under full recompute the layer input, 2 x 4096 x 4096 B per micro-batch on
    tp 1, moves each way; exposed beyond the neighbouring forward / backward as above."""
    cluster = load_cluster("dgx-h100", gpus=8)
    base = Layout(dp=8, seq_len=T, global_batch_size=64, recompute="full")
    off = base.replace(offload=frozenset({"activations"}))
    a, b = st.layer_time(LLAMA, cluster, base, 0, "full"), st.layer_time(LLAMA, cluster, off, 0, "full")
    copy = 2 * T * 4096 / (cluster.host_link_gb_per_s * 1e9)
    expected = max(0.0, copy - a.forward_s) + max(0.0, copy - 2 * a.forward_s)
    assert b.comm_s - a.comm_s == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # without recompute every saved tensor moves: more than the compute hides on tp 8
    tp8 = Layout(tp=8, seq_len=T, global_batch_size=8)
    plain = st.layer_time(LLAMA, cluster, tp8, 0, "none")
    moved = layer_activation_bytes(LLAMA, 0, seq_len=T, micro_batch_size=1, tp=8).total
    copy = moved / (cluster.host_link_gb_per_s * 1e9)
    exposed = max(0.0, copy - plain.forward_s) + max(0.0, copy - 2 * plain.forward_s)
    assert exposed > 0
    assert st.layer_time(LLAMA, cluster, tp8.replace(offload=frozenset({"activations"})), 0, "none").comm_s \
        == pytest.approx(plain.comm_s + exposed, rel=1e-12)
