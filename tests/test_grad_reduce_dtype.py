"""The gradient-reduction dtype as a framework knob (`Layout.grad_reduce_dtype`, issue 8 item 1).

Expected bytes per parameter are the framework facts written beside each case (sources in
planner/placement/precision.py): Megatron-LM's gradient buffer has the reduction's dtype
(param_and_grad_buffer.py l. 924 @d98e8a6) and a 16-bit buffer makes the optimizer hold an fp32
copy of its gradient shard; DeepSpeed keeps 16-bit gradients and reduces in
`communication_data_type` (default the compute dtype); torchtitan reduces in float32 only.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app
from planner.cost.comm import state_collectives
from planner.emit import checked, search_pins
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.precision import grad_reduce_dtype, state_bytes
from planner.placement.rules import check_layout
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

runner = CliRunner()
LLAMA = Path(__file__).parent / "data" / "configs" / "megatron" / "llama3_8b_h100_fp8.sh"


@pytest.mark.parametrize("framework, precision, dtype, expected", [
    # (parameters, gradients, optimizer states, reduce message, fp32 gradient copy at the optimizer
    # step only) B/param, AdamW
    ("megatron", "bf16", None, (2, 4, 4 + 8, 4, 0)),    # fp32 main grads, fp32 master + m + v
    ("megatron", "fp8", None, (2, 4, 4 + 8, 4, 0)),     # fp8 GEMMs keep bf16 params, fp32 grads
    ("megatron", "bf16", "bf16", (2, 2, 4 + 8, 2, 4)),  # bf16 buffer; the step's fp32 grad copy
    ("megatron", "fp16", None, (2, 2, 4 + 8, 2, 4)),    # fp16 buffer (Megatron's fp16 default)
    ("megatron", "fp16", "fp32", (2, 4, 4 + 8, 4, 0)),  # fp32 buffer: no second fp32 copy
    ("deepspeed", "bf16", None, (2, 2, 4 + 8, 2, 0)),   # reduce in the compute dtype
    ("deepspeed", "fp16", "fp32", (2, 2, 4 + 8, 4, 0)),  # fp32 message, gradients stay fp16
    ("torchtitan", "bf16", None, (4, 4, 8, 4, 0)),      # FSDP2 fp32 sharded params and grads
])
def test_state_bytes_follow_the_reduction_dtype(framework, precision, dtype, expected):
    """Megatron's fp32 copy of a 16-bit gradient shard exists from the optimizer step to the next
    step's zero_grad(set_to_none=True), never beside activations (`StateBytes.step_gradient_copy`)."""
    sb = state_bytes(Layout(framework=framework, precision=precision, grad_reduce_dtype=dtype))
    assert (sb.parameters, sb.gradients, sb.optimizer_states, sb.gradient_reduce,
            sb.step_gradient_copy) == expected


def test_defaults_per_framework():
    """Megatron-LM: fp32 for bf16 (validate_args forces it), fp16 for fp16; DeepSpeed: the compute
    dtype; torchtitan: float32 (its only value)."""
    assert grad_reduce_dtype(Layout(framework="megatron", precision="bf16")) == "fp32"
    assert grad_reduce_dtype(Layout(framework="megatron", precision="fp16")) == "fp16"
    assert grad_reduce_dtype(Layout(framework="deepspeed", precision="bf16")) == "bf16"
    assert grad_reduce_dtype(Layout(framework="torchtitan", precision="bf16")) == "fp32"


def test_gradient_message_halves_with_a_bf16_reduction():
    """The DP gradient collective carries 2 B per element instead of 4 (same element count)."""
    elements = {"dense": 1e9, "replicated": 1e6, "expert": 0.0}

    def grad_bytes(dtype):
        layout = Layout(dp=8, zero_stage=1, global_batch_size=8, grad_reduce_dtype=dtype)
        return sum(c.message_bytes for c in state_collectives(layout, elements)
                   if c.label.startswith("gradients"))

    assert grad_bytes(None) == pytest.approx(4 * (1e9 + 1e6))  # fp32: 4 B per element
    assert grad_bytes("bf16") == pytest.approx(2 * (1e9 + 1e6))


@pytest.mark.parametrize("framework, precision, dtype", [
    ("torchtitan", "bf16", "bf16"),   # mixed_precision_reduce admits only float32
    ("megatron", "bf16", "fp16"),     # no Megatron flag reduces bf16 gradients in fp16
    ("megatron", "fp16", "bf16"),     # grad_reduce_in_bf16 acts only under --bf16
])
def test_a_dtype_the_framework_cannot_run_is_a_violation(framework, precision, dtype):
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    layout = Layout(dp=8, framework=framework, precision=precision, grad_reduce_dtype=dtype,
                    zero_stage=3 if framework == "torchtitan" else 1, global_batch_size=8)
    rules = {v.rule: v for v in check_layout(model, cluster, layout)}
    assert "grad_reduce_supported" in rules
    assert dtype in rules["grad_reduce_supported"].message


def test_plan_refuses_an_unsupported_dtype_with_exit_2():
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100",
                                 "--framework", "torchtitan", "--grad-reduce-dtype", "bf16"])
    assert result.exit_code == 2
    assert "--grad-reduce-dtype" in result.output and "fp32" in result.output
    with pytest.raises(SpecError):
        plan(load_model("llama-3.1-8b"), load_cluster("dgx-h100"), seq_len=4096,
             global_batch_size=64, framework="torchtitan", grad_reduce_dtype="bf16")


def _read(text: str, suffix: str, **options):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"launch{suffix}"
        path.write_text(text)
        return read_target(path, **options)


def test_megatron_reader_takes_the_published_scripts_bf16_reduction():
    """llama3_8b_h100_fp8.sh sets --grad-reduce-in-bf16 (Megatron-LM's example script)."""
    target = read_target(LLAMA, model=None, cluster="dgx-h100", gpus=None, seq_len=None)
    assert target.layout.grad_reduce_dtype == "bf16"
    text = LLAMA.read_text().replace("--grad-reduce-in-bf16", "")
    assert _read(text, ".sh", model=None, cluster="dgx-h100", gpus=None,
                 seq_len=None).layout.grad_reduce_dtype is None


def test_deepspeed_reader_takes_the_communication_dtype():
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
              "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2},
              "bf16": {"enabled": True}, "communication_data_type": "FP32"}
    options = dict(model="llama-3.1-8b", cluster="dgx-h100", gpus=8, seq_len=4096)
    assert _read(json.dumps(config), ".json", **options).layout.grad_reduce_dtype == "fp32"
    config["communication_data_type"] = "int8"
    with pytest.raises(SpecError) as err:
        _read(json.dumps(config), ".json", **options)
    assert err.value.key == "communication_data_type"


@pytest.mark.parametrize("framework, dtype", [("megatron", "bf16"), ("deepspeed", "fp32")])
def test_emitted_configuration_reads_back_with_the_same_dtype(framework, dtype):
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework=framework,
                grad_reduce_dtype=dtype, fixed=search_pins(framework), top_k=1)
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert doc["request"]["grad_reduce_dtype"] == dtype
    emitted, verdict = checked(doc, framework)
    assert verdict["verdict"] == "pass", verdict["violations"]
    suffix = ".sh" if framework == "megatron" else ".json"
    target = _read(emitted.text, suffix, model="llama-3.1-8b", cluster="dgx-h100", gpus=8,
                   seq_len=4096)
    assert target.layout.grad_reduce_dtype == dtype
