"""Kimi K2 (model_type kimi_k2) and GLM-4.5 / GLM-4.5-Air (model_type glm4_moe).

Expected values are hand arithmetic from the config.json fields, written out below, and the
published totals of the model cards (which are rounded, so they are compared with a stated
tolerance; the exact numbers are the hand arithmetic). Sources of the configs: the `source:` lines of
models/kimi-k2.yaml, models/glm-4.5.yaml, models/glm-4.5-air.yaml. Structure: transformers
modeling_deepseek_v3.py (Kimi K2 ships `architectures: [DeepseekV3ForCausalLM]`) and
modeling_glm4_moe.py @a0699c97.
"""

from __future__ import annotations

import json

import pytest

from planner.cost.activations import layer_activation_bytes
from planner.cost.params_flops import count_params, flops_per_token, kv_cache_bytes_per_token
from planner.errors import SpecError
from planner.specs.model import from_config, load_model

# ---------------------------------------------------------------- Kimi K2 by hand
# h 7168, L 61 (layer 0 dense, 60 MoE), a 64, q_lora 1536, kv_lora 512, qk 128 + 64, v 128,
# I 18432, 384 experts of 2048, top-8, 1 shared expert of 2048, V 163840, untied.
#   attention (MLA)
#     q_a 7168*1536 = 11,010,048; q_a_layernorm 1,536; q_b 1536*64*192 = 18,874,368
#     kv_a_proj_with_mqa 7168*(512+64) = 4,128,768; kv_a_layernorm 512; kv_b 512*64*(128+128) = 8,388,608
#     o 64*128*7168 = 58,720,256                                       -> 101,124,096
#   norms 2*7168                                                       ->      14,336
#   dense MLP 3*7168*18432                                             -> 396,361,728
#   one expert 3*7168*2048 = 44,040,192; 384 of them                   -> 16,911,433,728
#   shared expert 44,040,192; router 384*7168 + 384 (score bias)       -> 2,752,896
#   dense layer 101,124,096 + 14,336 + 396,361,728                     = 497,500,160
#   MoE layer 101,124,096 + 14,336 + 16,911,433,728 + 44,040,192 + 2,752,896 = 17,059,365,248
#   embedding 163840*7168 = 1,174,405,120; LM head the same; final norm 7,168
#   total 497,500,160 + 60*17,059,365,248 + 2*1,174,405,120 + 7,168 = 1,026,408,232,448
#   active: the MoE layer keeps 8 of 384 experts: 17,059,365,248 - 376*44,040,192 = 500,253,056
#           497,500,160 + 60*500,253,056 + 2*1,174,405,120 + 7,168     = 32,861,500,928
KIMI_ATTENTION = 11_010_048 + 1_536 + 18_874_368 + 4_128_768 + 512 + 8_388_608 + 58_720_256
KIMI_DENSE_LAYER = 497_500_160
KIMI_MOE_LAYER = 17_059_365_248
KIMI_TOTAL = 1_026_408_232_448
KIMI_ACTIVE = 32_861_500_928

# ---------------------------------------------------------------- GLM-4.5 by hand
# h 5120, L 92 (layers 0-2 dense, 89 MoE), a 96, kv 8, head_dim 128 (config key; 5120/96 is not an
# integer), q/k/v bias, o_proj without bias, use_qk_norm true, I 12288, 160 experts of 1536, top-8,
# 1 shared expert of 1536, V 151552, untied.
#   attention q 5120*12288 = 62,914,560; k, v 2*5120*1024 = 10,485,760; q/k/v bias (12288 + 2*1024)
#     = 14,336; o 12288*5120 = 62,914,560; q_norm + k_norm 2*128 = 256   -> 136,329,472
#   norms 2*5120 = 10,240; dense MLP 3*5120*12288 = 188,743,680
#   one expert 3*5120*1536 = 23,592,960; 160 of them 3,774,873,600; shared 23,592,960;
#   router 160*5120 + 160 = 819,360
#   dense layer 136,329,472 + 10,240 + 188,743,680                     = 325,083,392
#   MoE layer 136,329,472 + 10,240 + 3,774,873,600 + 23,592,960 + 819,360 = 3,935,625,632
#   embedding 151552*5120 = 775,946,240; LM head the same; final norm 5,120
#   total 3*325,083,392 + 89*3,935,625,632 + 2*775,946,240 + 5,120     = 352,797,829,024
#   active MoE layer 3,935,625,632 - 152*23,592,960 = 349,495,712
#          3*325,083,392 + 89*349,495,712 + 2*775,946,240 + 5,120      = 33,632,266,144
#   MTP layer (checkpoint layer 92, not instantiated by transformers): one MoE decoder layer
#     3,935,625,632 + eh_proj 2*5120*5120 = 52,428,800 + enorm, hnorm, shared_head.norm 3*5120
#     = 3,988,069,792
GLM_TOTAL = 3 * 325_083_392 + 89 * 3_935_625_632 + 2 * 775_946_240 + 5_120
GLM_ACTIVE = 3 * 325_083_392 + 89 * 349_495_712 + 2 * 775_946_240 + 5_120
GLM_MTP = 3_935_625_632 + 2 * 5_120 * 5_120 + 3 * 5_120

# ---------------------------------------------------------------- GLM-4.5-Air by hand
# h 4096, L 46 (layer 0 dense, 45 MoE), a 96, kv 8, head_dim 128, q/k/v bias, no qk norm,
# I 10944, 128 experts of 1408, top-8, 1 shared of 1408, V 151552, untied.
#   attention q 4096*12288 = 50,331,648; k, v 2*4096*1024 = 8,388,608; bias 14,336;
#     o 50,331,648                                                      -> 109,066,240
#   norms 8,192; dense MLP 3*4096*10944 = 134,479,872
#   one expert 3*4096*1408 = 17,301,504; 128 of them 2,214,592,512; shared 17,301,504;
#   router 128*4096 + 128 = 524,416
#   dense layer 109,066,240 + 8,192 + 134,479,872                      = 243,554,304
#   MoE layer 109,066,240 + 8,192 + 2,214,592,512 + 17,301,504 + 524,416 = 2,341,492,864
#   embedding 151552*4096 = 620,756,992; LM head the same; final norm 4,096
#   total 243,554,304 + 45*2,341,492,864 + 2*620,756,992 + 4,096       = 106,852,251,264
#   active MoE layer 2,341,492,864 - 120*17,301,504 = 265,312,384
#          243,554,304 + 45*265,312,384 + 2*620,756,992 + 4,096        = 13,424,129,664
AIR_TOTAL = 243_554_304 + 45 * 2_341_492_864 + 2 * 620_756_992 + 4_096
AIR_ACTIVE = 243_554_304 + 45 * 265_312_384 + 2 * 620_756_992 + 4_096


def test_kimi_k2_exact_counts_by_hand():
    counts = count_params(load_model("kimi-k2"))
    assert counts.layers[0].attention == KIMI_ATTENTION == 101_124_096
    assert counts.layers[0].total == KIMI_DENSE_LAYER
    assert counts.layers[1].total == counts.layers[60].total == KIMI_MOE_LAYER
    assert counts.total == KIMI_DENSE_LAYER + 60 * KIMI_MOE_LAYER + 2 * 1_174_405_120 + 7_168 == KIMI_TOTAL
    assert counts.active_per_token == KIMI_ACTIVE


def test_kimi_k2_against_published_totals():
    """Kimi K2 technical report (arXiv 2507.20534): 1.04T total, 32B activated; the README's
    model summary (MoonshotAI/Kimi-K2 @11062d11) rounds to 1T / 32B. The exact count
    1,026,408,232,448 is 1.3% below 1.04T (the report does not say what its figure adds; the
    config has no MTP layer) and 32,861,500,928 active (embedding and LM head included) is 2.7%
    above 32B."""
    counts = count_params(load_model("kimi-k2"))
    assert counts.total == pytest.approx(1.04e12, rel=0.015)
    assert counts.active_per_token == pytest.approx(32e9, rel=0.03)


def test_glm_4_5_exact_counts_by_hand():
    counts = count_params(load_model("glm-4.5"))
    assert counts.layers[0].attention == 136_329_472
    assert [layer.total for layer in counts.layers[:4]] == [325_083_392] * 3 + [3_935_625_632]
    assert counts.total == GLM_TOTAL == 352_797_829_024
    assert counts.active_per_token == GLM_ACTIVE == 33_632_266_144


def test_glm_4_5_air_exact_counts_by_hand():
    counts = count_params(load_model("glm-4.5-air"))
    assert counts.layers[0].attention == 109_066_240
    assert [layer.total for layer in counts.layers[:2]] == [243_554_304, 2_341_492_864]
    assert counts.total == AIR_TOTAL == 106_852_251_264
    assert counts.active_per_token == AIR_ACTIVE == 13_424_129_664


@pytest.mark.parametrize(("name", "total", "active"), [("glm-4.5", 355e9, 32e9), ("glm-4.5-air", 106e9, 12e9)])
def test_glm_against_published_totals(name, total, active):
    """zai-org/GLM-4.5 README: GLM-4.5 355B total / 32B active; GLM-4.5-Air 106B / 12B. Totals
    without the MTP layer are within 1% (352.80B: -0.6%; 106.85B: +0.8%). The active figures match
    the count without the input embedding and LM head (32.08B, 12.18B), within 2%."""
    counts = count_params(load_model(name))
    assert counts.total == pytest.approx(total, rel=0.01)
    assert counts.active_per_token - counts.embedding - counts.lm_head == pytest.approx(active, rel=0.02)


def test_mtp_layers_are_counted_only_on_request():
    """The catalog (and transformers) total leaves the MTP layer out; include_mtp adds it:
    GLM-4.5 one layer of 3,988,069,792 (hand arithmetic above); GLM-4.5-Air
    2,341,492,864 + 2*4096*4096 + 3*4096 = 2,375,059,584; Kimi K2 has num_nextn_predict_layers 0."""
    glm, air, kimi = (load_model(n) for n in ("glm-4.5", "glm-4.5-air", "kimi-k2"))
    assert glm.num_nextn_predict_layers == air.num_nextn_predict_layers == 1
    assert count_params(glm, include_mtp=True).mtp == GLM_MTP == 3_988_069_792
    assert count_params(glm, include_mtp=True).total == GLM_TOTAL + GLM_MTP
    assert count_params(air, include_mtp=True).mtp == 2_341_492_864 + 2 * 4096 * 4096 + 3 * 4096
    assert count_params(kimi, include_mtp=True).total == KIMI_TOTAL


def test_kv_cache_bytes_per_token_by_hand():
    """Kimi K2 (MLA) caches the latent and the RoPE key: 61 x (512 + 64) x 2 B = 70,272 B
    (DeepSeek-V2 report §2.1; the same as DeepSeek-V3, whose latent is the same size).
    GLM-4.5 (GQA): 92 layers x (K, V) x 8 KV heads x 128 x 2 B = 376,832 B; Air 46 layers: 188,416 B.
    fp8 halves each."""
    assert kv_cache_bytes_per_token(load_model("kimi-k2"), 2).per_token == 61 * (512 + 64) * 2 == 70_272
    assert kv_cache_bytes_per_token(load_model("kimi-k2"), 1).per_token == 35_136
    assert kv_cache_bytes_per_token(load_model("glm-4.5"), 2).per_token == 92 * 2 * 8 * 128 * 2 == 376_832
    assert kv_cache_bytes_per_token(load_model("glm-4.5-air"), 2).per_token == 46 * 2 * 8 * 128 * 2 == 188_416


def test_glm_attention_flops_use_head_dim_128():
    """The attention term is 2·s·a·(d + d) per layer with d = head_dim 128 (not 5120/96):
    92 x 2 x 4096 x 96 x 256 = 18,522,046,464 at s = 4096."""
    flops = flops_per_token(load_model("glm-4.5"), 4096)
    assert flops.attention_forward == 92 * 2 * 4096 * 96 * 256 == 18_522_046_464


# ---------------------------------------------------------------- loaders

KIMI_CONFIG = {
    "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 64, "num_key_value_heads": 64, "n_shared_experts": 1, "n_routed_experts": 384,
    "num_experts_per_tok": 8, "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "num_nextn_predict_layers": 0, "vocab_size": 163840, "max_position_embeddings": 131072,
    "norm_topk_prob": True, "routed_scaling_factor": 2.827, "tie_word_embeddings": False,
}
GLM_AIR_CONFIG = {
    "model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True,
    "first_k_dense_replace": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 10944, "max_position_embeddings": 131072, "moe_intermediate_size": 1408,
    "n_group": 1, "n_routed_experts": 128, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 46, "num_key_value_heads": 8,
    "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5, "rope_theta": 1000000,
    "routed_scaling_factor": 1.0, "tie_word_embeddings": False, "topk_group": 1, "use_qk_norm": False,
    "vocab_size": 151552,
}


def test_kimi_k2_is_read_as_deepseek_v3():
    """Every field but model_type equals the same config read as deepseek_v3."""
    kimi = from_config(KIMI_CONFIG, name="k")
    deepseek = from_config({**KIMI_CONFIG, "model_type": "deepseek_v3"}, name="k")
    assert kimi.model_type == "kimi_k2" and kimi.is_mla and kimi.router_bias
    assert kimi == type(kimi)(**{**vars(deepseek), "model_type": "kimi_k2"})
    assert kimi.moe_layers == (False,) + (True,) * 60


def test_glm4_moe_config_json_loads(tmp_path):
    """A config.json as Hugging Face ships it (JSON, lenient reading) gives the catalog's counts."""
    folder = tmp_path / "GLM-4.5-Air"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GLM_AIR_CONFIG))
    spec = load_model(folder)
    assert spec.name == "GLM-4.5-Air"
    assert (spec.head_dim, spec.attention_bias, spec.attention_out_bias, spec.qk_norm) == (128, True, False, False)
    assert spec.moe_layers == (False,) + (True,) * 45
    assert (spec.n_shared_experts, spec.shared_expert_intermediate_size) == (1, 1408)
    assert spec.extra["partial_rotary_factor"] == 0.5
    assert count_params(spec).total == AIR_TOTAL


def test_glm4_moe_absent_keys_take_transformers_defaults():
    """Glm4MoeConfig (configuration_glm4_moe.py @c7ec229a) defaults: attention_bias false,
    use_qk_norm false, n_shared_experts 1, first_k_dense_replace 1."""
    cfg = {k: v for k, v in GLM_AIR_CONFIG.items()
           if k not in ("attention_bias", "use_qk_norm", "n_shared_experts", "first_k_dense_replace")}
    spec = from_config(cfg, name="air")
    assert (spec.attention_bias, spec.qk_norm, spec.n_shared_experts) == (False, False, 1)
    assert spec.moe_layers[:2] == (False, True)
    # GLM-4.5's flags: q/k norm of head_dim each, first 3 dense.
    glm = load_model("glm-4.5")
    assert glm.qk_norm and glm.moe_layers[:4] == (False, False, False, True)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("partial_rotary_factor", 0, "number in (0, 1]"),
    ("partial_rotary_factor", 1.5, "number in (0, 1]"),
    ("partial_rotary_factor", "half", "number in (0, 1]"),
    ("use_qk_norm", "yes", "true or false"),
    ("norm_topk_prob", 1, "true or false"),
    ("n_shared_experts", -1, "non-negative integer"),
    ("first_k_dense_replace", 46, "no layer is a MoE layer"),
])
def test_glm4_moe_bad_values_name_the_key(key, value, message):
    with pytest.raises(SpecError) as err:
        from_config({**GLM_AIR_CONFIG, key: value}, name="air", file="config.json")
    text = str(err.value)
    assert key in text and message in text


def test_glm4_moe_without_head_dim_needs_one_when_heads_do_not_divide():
    """GLM-4.5: 5120 / 96 heads is not an integer; the config's head_dim 128 is required."""
    cfg = {**GLM_AIR_CONFIG, "hidden_size": 5120}
    del cfg["head_dim"]
    with pytest.raises(SpecError, match="give head_dim"):
        from_config(cfg, name="glm", file="config.json")


# ---------------------------------------------------------------- activations (no new rule needed)

def test_glm_4_5_moe_layer_activations_by_hand():
    """GQA with q/k/v bias, partial RoPE and q/k RMSNorm, then a routed + shared MoE block, tp 1,
    Megatron, FlashAttention, per token (bytes): norm input 2h; QKV input 2h; q_norm input 2·a·d,
    k_norm input 2·kv·d; q 2·a·d, k 2·kv·d (after the partial RoPE: same width); LSE 4a; v 2·kv·d;
    o_proj input 2·a·d; MLP norm input 2h; router input 2h, probabilities 4E (sigmoid, fp32), top-k
    indices 8k, permutation map 4k; per routed assignment (k of them) fc1 input 2h, SwiGLU input
    2·2·1536, fc2 input 2·1536 (no expert output: Megatron-LM weights by the probs inside the
    SwiGLU, activations.py `_moe`); shared expert 2·2·1536 + 2·1536. The q/k/v bias is added
    inside the linear (nothing saved); the score-correction bias only reorders the top-k."""
    model = load_model("glm-4.5")
    h, a, kv, d, e, k, w = 5120, 96, 8, 128, 160, 8, 1536
    attention = 2 * h + 2 * h + 2 * a * d + 2 * kv * d + 2 * a * d + 2 * kv * d + 4 * a + 2 * kv * d + 2 * a * d
    moe = 2 * h + 2 * h + 4 * e + 8 * k + 4 * k + k * (2 * h + 2 * 2 * w + 2 * w) + 2 * 2 * w + 2 * w
    got = layer_activation_bytes(model, 3, seq_len=4096, micro_batch_size=1, tp=1)
    assert got.block == "moe"
    assert got.total == 4096 * (attention + moe)
    assert got.breakdown["attention.q_norm_input"] == 4096 * 2 * a * d
    dense = layer_activation_bytes(model, 0, seq_len=4096, micro_batch_size=1, tp=1)
    assert dense.block == "dense"
    assert dense.total == 4096 * (attention + 2 * h + 2 * h + 2 * 2 * 12288 + 2 * 12288)


def test_kimi_k2_moe_layer_activations_by_hand():
    """MLA with 64 heads (DeepSeek-V3's list): norm input 2h, down-projection input 2h, q_a norm input
    and q_b input 2·1536 each, kv_a norm input and kv_b input 2·512 each, q and k 2·64·192 each,
    v 2·64·128, LSE 4·64, o_proj input 2·64·128; then the MoE block of 384 experts, top-8, width 2048
    (no expert output saved under Megatron-LM, activations.py `_moe`), one shared expert of 2048."""
    model = load_model("kimi-k2")
    h, a, e, k, w = 7168, 64, 384, 8, 2048
    attention = 2 * h + 2 * h + 2 * 2 * 1536 + 2 * 2 * 512 + 2 * (2 * a * 192) + 2 * a * 128 + 4 * a + 2 * a * 128
    moe = 2 * h + 2 * h + 4 * e + 8 * k + 4 * k + k * (2 * h + 2 * 2 * w + 2 * w) + 2 * 2 * w + 2 * w
    got = layer_activation_bytes(model, 1, seq_len=4096, micro_batch_size=1, tp=1)
    assert got.block == "mla+moe"
    assert got.total == 4096 * (attention + moe)
    assert layer_activation_bytes(model, 0, seq_len=4096, micro_batch_size=1, tp=1).block == "mla"


# ---------------------------------------------------------------- through the CLI

def test_explain_runs_for_kimi_k2_and_glm():
    """`planner explain` on each new family with a valid layout (experts divisible by ep, heads and
    KV heads by tp, an uneven pipeline split summing to the layers: Kimi K2 2+1+1+28x2+1 = 61, GLM-4.5
    3+2+2+28x3+1 = 92): exit 0 and no broken rule."""
    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    layouts = (
        ("kimi-k2", "hgx-h800", 2048, ["--dp", "8", "--tp", "2", "--cp", "4", "--ep", "8", "--sequence-parallel",
                                       "--pipeline-layers", ",".join(["2", "1", "1"] + ["2"] * 28 + ["1"])]),
        ("glm-4.5", "dgx-h100", 512, ["--dp", "2", "--tp", "1", "--cp", "8", "--ep", "2",
                                      "--pipeline-layers", ",".join(["3", "2", "2"] + ["3"] * 28 + ["1"])]),
    )
    for model, cluster, gpus, layout in layouts:
        result = runner.invoke(app, ["explain", "-m", model, "-c", cluster, "--gpus", str(gpus), "--pp", "32",
                                     "--zero-stage", "1", "--global-batch-size", "1024", *layout,
                                     "--format", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert data["parallelism"]["pp"] == 32
        # cp 4 / 8 at the default 4,096 tokens is CP on a short chunk (a warning, and right); the
        # layout breaks no other rule
        assert [v["rule"] for v in data["violations"]] == ["cp_short_sequence"]
        assert data["violations"][0]["severity"] == "warning"
