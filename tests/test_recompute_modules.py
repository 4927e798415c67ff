"""Module-level selective recompute (issue 8 item 2): Megatron-LM's `--recompute-granularity
selective --recompute-modules ...`.

What each module frees comes from the Megatron-LM source named in `placement.layout.RECOMPUTE_MODULES`
and `cost.activations`; the byte counts below are worked by hand from the model's Hugging Face
config (DeepSeek-V3: h 7168, a 128, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64,
v 128, dense MLP 18432 in layers 0-2, experts 2048 wide, top-8) with bf16 activations (2 B).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.check import read_target
from planner.cli import app
from planner.cost import step_time as st
from planner.cost.activations import layer_activation_bytes
from planner.cost.compute import achieved_flops
from planner.emit import checked, search_pins
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

runner = CliRunner()
DSV3 = load_model("deepseek-v3")
LLAMA = load_model("llama-3.1-8b")
T = 4096  # tokens of one micro-batch (s 4096, b 1, cp 1)
KW = dict(seq_len=T, micro_batch_size=1, tp=2, sequence_parallel=True)
MOE_LAYER, DENSE_LAYER = 3, 0


def _dropped(model, layer, modules, **kw) -> int:
    """Bytes the module set frees beyond saving everything (recompute none)."""
    args = {**KW, **kw}
    none = layer_activation_bytes(model, layer, recompute="none", **args).total
    return none - layer_activation_bytes(model, layer, recompute="selective", recompute_modules=modules,
                                         **args).total


def test_mla_up_proj_frees_the_up_projected_qkv_and_the_normalised_latents():
    """q, k (a x (128 + 64)) and v (a x 128), /t = 2 by heads; the q_b / kv_b inputs (1536 + 512),
    /t = 2 by SP: 2 B x 4096 x (128 x 512 + 2048) / 2 = 276,824,064 B."""
    expected = 2 * T * (128 * (192 + 192 + 128) + 1536 + 512) // 2
    assert expected == 276_824_064
    assert _dropped(DSV3, MOE_LAYER, ("mla_up_proj",)) == expected
    assert _dropped(DSV3, DENSE_LAYER, ("mla_up_proj",)) == expected  # attention is the same in both
    with pytest.raises(SpecError):  # not a module name
        layer_activation_bytes(DSV3, 0, recompute="selective", recompute_modules=("mla",), **KW)


def test_mlp_frees_the_dense_mlp_body_and_nothing_in_an_moe_layer():
    """SwiGLU fc1 output 2 x 18432 and fc2 input 18432 per token, /t: 2 B x 4096 x 3 x 18432 / 2 =
    226,492,416 B; Megatron sets recompute_mlp only when the layer is not an MoE layer."""
    assert _dropped(DSV3, DENSE_LAYER, ("mlp",)) == 2 * T * 3 * 18432 // 2 == 226_492_416
    assert _dropped(DSV3, MOE_LAYER, ("mlp",)) == 0


def test_moe_act_frees_the_expert_activation_output():
    """fc2 input of each of the 8 routed copies, 2048 wide, /t by SP: 2 B x 4096 x 8 x 2048 / 2."""
    assert _dropped(DSV3, MOE_LAYER, ("moe_act",)) == 2 * T * 8 * 2048 // 2 == 67_108_864
    assert _dropped(DSV3, DENSE_LAYER, ("moe_act",)) == 0


def test_layernorm_frees_only_the_outputs_of_separate_norms():
    """DeepSeek-V3 (MLA, experts): the input norm's output (down-projection input) and the pre-MLP
    norm's (router input; a dense layer's fc1 input), h each, /t by SP: 2 x 2 B x 4096 x 7168 / 2.
    Llama (TE fuses both norms into the next linear): nothing."""
    assert _dropped(DSV3, MOE_LAYER, ("layernorm",)) == 2 * 2 * T * 7168 // 2
    assert _dropped(DSV3, DENSE_LAYER, ("layernorm",)) == 2 * 2 * T * 7168 // 2
    assert _dropped(LLAMA, 0, ("layernorm",)) == 0


def test_moe_keeps_only_the_blocks_input():
    """The whole MoE block checkpointed: of its tensors only the router input (the checkpoint's
    argument) stays; the shared experts go with it, and `shared_experts` alone frees their body:
    SwiGLU 2 x 2048 + 2048 per token /t = 2 B x 4096 x 3 x 2048 / 2."""
    kept = layer_activation_bytes(DSV3, MOE_LAYER, recompute="selective", recompute_modules=("moe",),
                                  **KW).breakdown
    assert not [k for k in kept if k.split(".")[0] in ("experts", "shared_experts")]
    assert [k for k in kept if k.startswith("moe.")] == ["moe.router_input"]
    assert _dropped(DSV3, MOE_LAYER, ("shared_experts",)) == 2 * T * 3 * 2048 // 2


def test_default_modules_are_core_attn_and_sets_add_up():
    """None (Megatron's default) = core_attn = the attention core's tensors; disjoint modules free
    the sum of what each frees."""
    default = layer_activation_bytes(DSV3, MOE_LAYER, recompute="selective", **KW).total
    core = layer_activation_bytes(DSV3, MOE_LAYER, recompute="selective", recompute_modules=("core_attn",),
                                  **KW).total
    assert default == core
    both = _dropped(DSV3, MOE_LAYER, ("mla_up_proj", "moe_act"))
    assert both == _dropped(DSV3, MOE_LAYER, ("mla_up_proj",)) + _dropped(DSV3, MOE_LAYER, ("moe_act",))


def test_recompute_flops_and_time_of_mla_up_proj():
    """The up projections re-run: 2 x (1536 x 128 x 192 + 512 x 128 x (128 + 128)) = 109,051,904
    FLOPs per token; their time is the local tokens (4096 / 2) over the dense linear rate, and the
    attention core is no longer re-run."""
    flops = 2 * (1536 * 128 * 192 + 512 * 128 * 256)
    assert flops == 109_051_904
    assert st.selective_flops_per_token(DSV3, MOE_LAYER, T, ("mla_up_proj",)) == (flops, 0.0, 0.0)
    cluster = load_cluster("dgx-h100", gpus=16)
    layout = Layout(dp=8, tp=2, seq_len=T, global_batch_size=64, sequence_parallel=True,
                    recompute="selective", recompute_modules=("mla_up_proj",))
    got = st.layer_time(DSV3, cluster, layout, MOE_LAYER, "selective").recompute_s
    rate = achieved_flops(cluster.gpu, "bf16", gemm_dim=min(7168 / 2, T))
    assert got == pytest.approx(T / 2 * flops / rate, rel=1e-12)


def test_default_modules_recompute_the_attention_core_as_before():
    cluster = load_cluster("dgx-h100", gpus=16)
    layout = Layout(dp=8, tp=2, seq_len=T, global_batch_size=64, sequence_parallel=True, recompute="selective")
    core = layout.replace(recompute_modules=("core_attn",))
    a = st.layer_time(LLAMA, cluster, layout, 0, "selective")
    b = st.layer_time(LLAMA, cluster, core, 0, "selective")
    assert a == b and a.recompute_s > 0
    # dense 8B layer, the mlp module: 2 x 3 x 4096 x 14336 FLOPs per token re-run
    assert st.selective_flops_per_token(LLAMA, 0, T, ("mlp",)) == (2 * 3 * 4096 * 14336, 0.0, 0.0)


def test_hardware_flops_count_the_modules_rerun():
    """HFU numerator: model FLOPs + the re-run FLOPs of every selective layer (Narayanan 2021 eq. 3)."""
    cluster = load_cluster("dgx-h100", gpus=8)
    base = Layout(dp=8, seq_len=T, global_batch_size=64, recompute="none")
    sel = base.replace(recompute="selective", recompute_modules=("mlp",))
    a, b = st.step_time(LLAMA, cluster, base), st.step_time(LLAMA, cluster, sel)
    extra = 32 * 2 * 3 * 4096 * 14336 * 64 * T  # layers x FLOPs/token x tokens per step
    assert b.hardware_tflops_per_gpu * b.step * 8 * 1e12 == pytest.approx(
        a.hardware_tflops_per_gpu * a.step * 8 * 1e12 + extra, rel=1e-9)


# ---------------------------------------------------------------- E10 and the CLI

E10_ARGS = ["explain", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "1024", "--tp", "2", "--pp", "8",
            "--ep", "64", "--zero-stage", "1", "--global-batch-size", "8192", "--seq-len", "4096",
            "--precision", "fp8", "--recompute", "selective", "--sequence-parallel",
            "--pipeline-layout", "Et|(tt|)*30mL", "--format", "json"]
E10_RECIPE = ["--grad-reduce-dtype", "bf16", "--fp8-recipe", "tensorwise", "--precision-aware-optimizer",
              "--main-grads-dtype", "bf16", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
"""E10's knobs besides recompute (Megatron-Bridge perf_recipes/deepseek/h100/deepseek_v3.py @067f987
`deepseek_v3_pretrain_1024gpu_h100_fp8cs_config`; validate_training.RECIPE_OVERRIDES)."""


def test_e10_fits_with_its_recipes_recompute_modules():
    """E10 (DeepSeek-V3 on 1024 H100, Megatron-Bridge): the recipe recomputes mla_up_proj and mlp
    (l. 92). Both are accepted and rated fits or at_risk (with Megatron's default, core_attn, too,
    since the expert output is not saved: Megatron applies the router probs inside the SwiGLU,
    activations.py `_moe`); the recipe's modules save activation memory."""
    default = runner.invoke(app, [*E10_ARGS, *E10_RECIPE])
    recipe = runner.invoke(app, [*E10_ARGS, *E10_RECIPE, "--recompute-modules", "mla_up_proj,mlp"])
    assert recipe.exit_code == 0, recipe.output
    before, after = json.loads(default.output), json.loads(recipe.output)
    assert before["memory_verdict"] in ("fits", "at_risk") and after["memory_verdict"] in ("fits", "at_risk")
    assert after["parallelism"]["recompute_modules"] == ["mla_up_proj", "mlp"]
    assert after["memory_bytes"]["activations"] < before["memory_bytes"]["activations"]


@pytest.mark.parametrize("extra, words", [
    (["--recompute-modules", "mlp"], ["--recompute-modules", "selective"]),  # no selective layer
    (["--recompute", "selective", "--recompute-modules", "attn"], ["--recompute-modules", "attn"]),
    (["--recompute", "selective", "--recompute-modules", ","], ["--recompute-modules"]),
    (["--recompute", "selective", "--framework", "torchtitan", "--recompute-modules", "mlp"],
     ["--recompute-modules", "torchtitan"]),
])
def test_explain_refuses_bad_recompute_modules(extra, words):
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", *extra])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and all(w in result.output for w in words), result.output


def _read(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.sh"
        path.write_text(text)
        return read_target(path, model="llama-3.1-8b", cluster="dgx-h100", gpus=8, seq_len=4096)


def test_plan_emits_and_check_reads_the_modules(tmp_path):
    """plan --recompute-modules with selective pinned -> the Megatron script says
    `--recompute-granularity selective --recompute-modules core_attn mlp` (nargs "+"), `check`
    reads the same set back, and the plan file round-trips it."""
    model, cluster = LLAMA, load_cluster("dgx-h100")
    data = plan(model, cluster, seq_len=4096, global_batch_size=64, framework="megatron",
                recompute_modules=("core_attn", "mlp"),
                fixed={**search_pins("megatron"), "recompute": "selective"}, top_k=1)
    assert data["plans"][0]["parallelism"]["recompute_modules"] == ["core_attn", "mlp"]
    doc = plan_file(data, 0, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert doc["request"]["recompute_modules"] == ["core_attn", "mlp"]
    emitted, verdict = checked(doc, "megatron")
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert "--recompute-granularity selective --recompute-modules core_attn mlp" in emitted.text
    assert _read(emitted.text).layout.recompute_modules == ("core_attn", "mlp")
    path = tmp_path / "best.plan.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert runner.invoke(app, ["check", str(path)]).exit_code == 0


def test_megatron_reader_refuses_an_unknown_module():
    text = "torchrun pretrain_gpt.py --micro-batch-size 1 --recompute-granularity selective " \
           "--recompute-modules core_attn mlpx --bf16\n"
    with pytest.raises(SpecError) as err:
        _read(text)
    assert err.value.key == "--recompute-modules"


def test_module_lists_are_megatron_only():
    """torchtitan's selective recompute is its op policy and DeepSpeed checkpoints whole layers:
    neither takes Megatron's module lists, also when a layout changes framework."""
    with pytest.raises(SpecError) as err:
        Layout(framework="torchtitan", recompute="selective", recompute_modules=("mlp",))
    assert err.value.key == "recompute_modules"
    with pytest.raises(SpecError):
        Layout(recompute_modules=("mlp",)).replace(framework="deepspeed")
    with pytest.raises(SpecError):
        Layout(offload_modules=("core_attn",)).replace(framework="torchtitan")
