"""A model's published fp8 pre-training recipe is the default one (issue 8, senior7 M3): DeepSeek-V3
trained with 1x128 activation tiles and 128x128 weight blocks (DeepSeek-V3 Technical Report,
arXiv:2412.19437 §3.3.2), Transformer Engine's blockwise recipe; its model file says so
(`fp8_training`), and `explain` / `plan` cost and `--emit megatron` writes that recipe under
Megatron-LM at fp8 unless another is asked. A config file `check` reads keeps what it says.
"""

from __future__ import annotations

import json

import pytest

from cli_run import planner
from planner.errors import SpecError
from planner.placement.precision import default_fp8_recipe, published_fp8_recipe
from planner.specs.model import from_config, load_model

EXPLAIN = ("explain", "-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "1024", "--tp", "2", "--pp", "16",
           "--ep", "16", "--seq-len", "4096", "--global-batch-size", "8192", "--sequence-parallel",
           "--format", "json")


def test_deepseek_v3_file_states_blockwise_with_its_source():
    recipe, source = published_fp8_recipe(load_model("deepseek-v3"))
    assert recipe == "blockwise" and "2412.19437" in source and "128x128" in source
    assert published_fp8_recipe(load_model("llama-3.1-70b")) is None
    # Kimi K2 ships block-fp8 weights too, but no fp8 pre-training recipe is recorded for it
    assert published_fp8_recipe(load_model("kimi-k2")) is None


def test_default_only_for_megatron_at_fp8():
    model = load_model("deepseek-v3")
    assert default_fp8_recipe(model, precision="fp8", framework="megatron") == "blockwise"
    assert default_fp8_recipe(model, precision="bf16", framework="megatron") is None
    assert default_fp8_recipe(model, precision="fp8", framework="torchtitan") is None


@pytest.mark.parametrize("value", ["blockwise", {"recipe": "blockwise"}, {"recipe": "", "source": "x"}])
def test_bad_fp8_training_is_named(value):
    raw = {"model_type": "llama", "name": "m", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000,
           "max_position_embeddings": 512, "fp8_training": value}
    with pytest.raises(SpecError) as err:
        from_config(raw, name="m")
    assert err.value.key == "fp8_training"


def test_unknown_recipe_name_is_bad_input():
    raw = {"model_type": "llama", "name": "m", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000,
           "max_position_embeddings": 512, "fp8_training": {"recipe": "tilewise", "source": "paper"}}
    with pytest.raises(SpecError) as err:
        published_fp8_recipe(from_config(raw, name="m"))
    assert err.value.key == "fp8_training.recipe"


def test_explain_costs_the_published_recipe_unless_asked():
    out = planner(*EXPLAIN, "--precision", "fp8")
    assert out.returncode in (0, 1), out.stderr   # 1: this hand layout's memory verdict
    assert json.loads(out.stdout)["parallelism"]["fp8_recipe"] == "blockwise"
    assert "--fp8-recipe blockwise" in out.stderr and "2412.19437" in out.stderr
    asked = planner(*EXPLAIN, "--precision", "fp8", "--fp8-recipe", "delayed")
    assert json.loads(asked.stdout)["parallelism"]["fp8_recipe"] == "delayed"
    bf16 = planner(*EXPLAIN)
    assert json.loads(bf16.stdout)["parallelism"]["fp8_recipe"] is None


DEEPSEEK_V3_OWN = ("explain", "-m", "deepseek-v3", "-c", "hgx-h800", "--gpus", "2048", "--tp", "1", "--pp", "16",
                   "--ep", "64", "--zero-stage", "1", "--micro-batch-size", "1", "--global-batch-size", "15360",
                   "--seq-len", "4096", "--precision", "fp8", "--recompute", "selective",
                   "--recompute-modules", "layernorm,mla_up_proj", "--moe-dispatcher", "flex",
                   "--pipeline-layers", "3,4,4,4,4,4,4,4,4,4,4,4,4,4,4,2", "--precision-aware-optimizer",
                   "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--format", "json")
"""DeepSeek-V3's own layout (technical report arXiv:2412.19437): 2,048 H800 (§3.1), pp 16, ep 64 over
8 nodes, ZeRO-1 DP, no TP (§3.2); RMSNorm and MLA up-projections recomputed (§3.2.3); AdamW moments
in bf16 (§3.3.3); blockwise fp8 (§3.3.2: the default now); 4K sequences and the final 15,360-sequence
batch (§4.2). Assumed: micro-batch 1; 61 layers over 16 stages as 3, 4 x 14, 2 (the first stage
holds the embedding, the last the head). Not modelled: DualPipe (§3.2.1) -- its second copy of the
parameters is added by hand below; its PP + 1 in-flight micro-batches on one rank instead of 1F1B's
pp (Table 2) -- and the SwiGLU input cached in fp8 (§3.3.3; Megatron-LM's
--activation-func-fp8-input-store, not a knob here: kept bf16, an over-count); DeepEP's
communication buffers (not a memory term); the MTP module."""


def test_deepseek_v3_own_layout_fits():
    out = planner(*DEEPSEEK_V3_OWN)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["parallelism"]["fp8_recipe"] == "blockwise"
    mem = data["memory_bytes"]
    assert data["memory_verdict"] in ("fits", "at_risk")
    # DualPipe keeps two copies of the parameters (§3.2.1): one more copy still leaves room
    assert mem["total"] + mem["parameters"] < mem["capacity"]
