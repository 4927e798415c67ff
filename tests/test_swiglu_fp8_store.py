"""Issue 8: Megatron-LM's fp8 store of the SwiGLU input (`Layout.swiglu_fp8_input_store`,
TransformerConfig.activation_func_fp8_input_store): the fused SwiGLU saves its 2·I-wide input as
float8_e4m3fn (1 B) instead of bf16 (2 B) -- NVIDIA/Megatron-LM@d98e8a6
megatron/core/fusions/fused_bias_swiglu.py l. 180 (`input.to(torch.float8_e4m3fn) if
fp8_input_store`), refused for any activation but SwiGLU (transformer_config.py l. 2467-2469).
Megatron-LM d98e8a6 has no command-line flag for it (arguments.py l. 2329 lists it among the config
fields without one) and no Megatron-Bridge recipe sets it (NVIDIA-NeMo/Megatron-Bridge@067f987:
only scripts/translate_mlm_to_bridge.py names it), so `check` has nothing to read and `--emit`
nothing to write: `explain --swiglu-fp8-input-store` sets it. Expected bytes by hand below
(Llama 3.1 8B and DeepSeek-V3 config.json values)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.cli import app
from planner.cost.activations import layer_activation_bytes
from planner.placement.layout import Layout
from planner.placement.rules import check_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

S = 4096


def _saved(model, index, **kw):
    return layer_activation_bytes(model, index, seq_len=S, micro_batch_size=1, **kw).total


def test_dense_swiglu_input_is_one_byte_per_element():
    """Llama 3.1 8B (intermediate 14,336): the SwiGLU input is s x 2I elements, 2 B -> 1 B:
    4096 x 28,672 = 117,440,512 B less per layer on tp 1, half that on tp 2 (split with the MLP)."""
    llama = load_model("llama-3.1-8b")
    assert _saved(llama, 0, tp=1) - _saved(llama, 0, tp=1, swiglu_fp8_input_store=True) == 117_440_512
    assert _saved(llama, 0, tp=2) - _saved(llama, 0, tp=2, swiglu_fp8_input_store=True) == 117_440_512 // 2


def test_moe_layer_stores_routed_and_shared_inputs_in_fp8():
    """DeepSeek-V3 MoE layer (top-8 of 256 experts of width 2,048, one shared expert of 2,048):
    per token 8 x 2 x 2048 routed + 2 x 2048 shared = 36,864 elements, 1 B each saved:
    4096 x 36,864 = 150,994,944 B less on tp 1, ep 1."""
    dsv3 = load_model("deepseek-v3")
    assert dsv3.moe_layers[3]
    assert _saved(dsv3, 3, tp=1) - _saved(dsv3, 3, tp=1, swiglu_fp8_input_store=True) == 150_994_944


def test_megatron_refuses_it_off_swiglu_and_other_frameworks_have_none():
    cluster = load_cluster("dgx-h100", gpus=8)
    on = Layout(dp=8, global_batch_size=8, swiglu_fp8_input_store=True)
    assert not [v for v in check_layout(load_model("llama-3.1-8b"), cluster, on)
                if v.rule == "swiglu_fp8_input_store"]
    [gelu] = [v for v in check_layout(load_model("gpt-3-175b"), cluster, on) if v.rule == "swiglu_fp8_input_store"]
    assert "not SwiGLU" in gelu.message
    titan = on.replace(framework="torchtitan")
    assert [v.rule for v in check_layout(load_model("llama-3.1-8b"), cluster, titan)
            if v.rule == "swiglu_fp8_input_store"] == ["swiglu_fp8_input_store"]


def test_explain_sets_it_and_reports_the_saving():
    """`explain --swiglu-fp8-input-store` on Llama 3.1 8B, one GPU, no recompute: the stage's 32
    layers each save 117,440,512 B less (one micro-batch in flight)."""
    args = ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1", "--global-batch-size", "1",
            "--format", "json"]
    runner = CliRunner()
    plain, stored = (json.loads(runner.invoke(app, args + extra).stdout)
                     for extra in ([], ["--swiglu-fp8-input-store"]))
    assert stored["parallelism"]["swiglu_fp8_input_store"] is True
    assert plain["memory_bytes"]["activations"] - stored["memory_bytes"]["activations"] == 32 * 117_440_512
