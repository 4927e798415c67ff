"""The shipped model catalog against published / reference numbers, and the model loaders.

Expected values come from tests/data/reference/models.yaml (copy of shared/reference/models.yaml) (derived counts that reproduce the
official totals), the numbers quoted in issue 2, and hand arithmetic written out below.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.cost.params_flops import count_params, flops_per_token, kv_cache_bytes_per_token
from planner.specs.model import CATALOG_DIR, catalog_names, load_model

DATA = Path(__file__).parent / "data" / "models"
REFERENCE = Path(__file__).resolve().parent / "data" / "reference" / "models.yaml"

CATALOG = [
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3",
    "qwen2.5-72b", "qwen3-32b", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b", "gpt-3-175b",
    "bloom-176b", "opt-175b", "mt-nlg-530b", "nemotron-4-340b", "falcon-180b",
    "kimi-k2", "glm-4.5", "glm-4.5-air",  # issue 8 item 7; hand arithmetic in test_model_families.py
]

# Issue 2, "Done when": what transformers instantiates for these configs.
ISSUE_TOTALS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mixtral-8x7b": 46_702_792_704,
    "bloom-176b": 176_247_271_424,
}

# ../shared/reference/models.yaml, derived_total_params (inlined so the test runs on a clean clone).
REFERENCE_TOTALS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mixtral-8x7b": 46_702_792_704,
    "mixtral-8x22b": 140_620_634_112,
    "deepseek-v3": 671_026_419_200,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-235b-a22b": 235_093_634_560,
    "qwen3-30b-a3b": 30_532_122_624,
    "gpt-oss-120b": 116_829_156_672,
    "gpt-3-175b": 174_604_259_328,
    "bloom-176b": 176_247_271_424,
    # models.yaml lists 174,604,443,648 with 2,048 learned position rows; transformers'
    # OPTLearnedPositionalEmbedding allocates max_position_embeddings + 2 = 2,050 rows:
    # 174,604,443,648 + 2 * 12,288 = 174,604,468,224.
    "opt-175b": 174_604_443_648 + 2 * 12_288,
    "mt-nlg-530b": 529_581_506_560,
    "nemotron-4-340b": 341_029_195_776,
    "falcon-180b": 179_522_565_120,
    # Qwen3-32B (not in models.yaml), by hand from its config.json (h 5120, L 64, a 64, kv 8, d 128,
    # I 25600, V 151936, untied):
    #   attention  q 5120*8192 + k,v 2*5120*1024 + o 8192*5120 + q_norm,k_norm 2*128 = 94,372,096
    #   MLP        3*5120*25600                                                = 393,216,000
    #   norms      2*5120                                                      =      10,240
    #   64 layers  64 * 487,598,336                                            = 31,206,293,504
    #   embedding + LM head 2 * 151936*5120 = 1,555,824,640; final norm 5,120
    #   total 32,762,123,264 (model card: 32.8B total, 31.2B non-embedding)
    "qwen3-32b": 64 * (94_372_096 + 393_216_000 + 10_240) + 2 * 151_936 * 5_120 + 5_120,
    # Not in models.yaml: hand arithmetic written out in tests/test_model_families.py.
    "kimi-k2": 1_026_408_232_448,
    "glm-4.5": 352_797_829_024,
    "glm-4.5-air": 106_852_251_264,
}

# derived_active_params in models.yaml.
REFERENCE_ACTIVE = {
    "mixtral-8x7b": 12_879_925_248,
    "mixtral-8x22b": 39_152_031_744,
    "deepseek-v3": 37_552_297_472,
    "qwen3-235b-a22b": 22_190_763_520,
    "qwen3-30b-a3b": 3_353_032_704,
    "gpt-oss-120b": 5_711_982_912,
    "kimi-k2": 32_861_500_928,  # tests/test_model_families.py
    "glm-4.5": 33_632_266_144,
    "glm-4.5-air": 13_424_129_664,
}

# kv_cache_bytes_per_token_bf16 in models.yaml (every layer keeping the full context).
REFERENCE_KV_BF16 = {
    "llama-3.1-8b": 131_072, "llama-3.1-70b": 327_680, "llama-3.1-405b": 516_096,
    "mixtral-8x7b": 131_072, "mixtral-8x22b": 229_376, "deepseek-v3": 70_272,
    "qwen2.5-72b": 327_680, "qwen3-235b-a22b": 192_512, "qwen3-30b-a3b": 98_304,
    "gpt-oss-120b": 73_728, "gpt-3-175b": 4_718_592, "bloom-176b": 4_014_080,
    "opt-175b": 4_718_592, "mt-nlg-530b": 8_601_600, "nemotron-4-340b": 589_824,
    "falcon-180b": 163_840,
    "qwen3-32b": 64 * 2 * 8 * 128 * 2,  # layers x (K,V) x kv heads x head_dim x 2 bytes = 262,144
    "kimi-k2": 61 * (512 + 64) * 2,  # MLA: layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes
    "glm-4.5": 92 * 2 * 8 * 128 * 2,
    "glm-4.5-air": 46 * 2 * 8 * 128 * 2,
}


def test_catalog_holds_exactly_the_issue_names():
    assert catalog_names() == sorted(CATALOG)


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_yaml_loads_and_names_its_source(name):
    spec = load_model(name)
    raw = yaml.safe_load((CATALOG_DIR / f"{name}.yaml").read_text())
    assert spec.name == name == raw["name"]
    assert raw["source"].strip() and spec.source == raw["source"]


@pytest.mark.parametrize("name", sorted(ISSUE_TOTALS))
def test_total_params_equal_issue_numbers(name):
    assert count_params(load_model(name)).total == ISSUE_TOTALS[name]


@pytest.mark.parametrize("name", CATALOG)
def test_total_params_equal_reference(name):
    assert count_params(load_model(name)).total == REFERENCE_TOTALS[name]


def test_inlined_reference_numbers_match_models_yaml():
    """Guard against typos in the inlined tables above."""
    ref = {m["name"].lower(): m for m in yaml.safe_load(REFERENCE.read_text())["models"]}
    for name in CATALOG:
        if name not in ref:
            continue
        expected = ref[name]["derived_total_params"] + (2 * 12_288 if name == "opt-175b" else 0)
        assert REFERENCE_TOTALS[name] == expected, name
        assert REFERENCE_KV_BF16[name] == ref[name]["kv_cache_bytes_per_token_bf16"], name
        if "derived_active_params" in ref[name]:
            assert REFERENCE_ACTIVE[name] == ref[name]["derived_active_params"], name


@pytest.mark.parametrize("name", sorted(REFERENCE_ACTIVE))
def test_active_params_of_moe_models(name):
    assert count_params(load_model(name)).active_per_token == REFERENCE_ACTIVE[name]


def test_dense_models_are_fully_active():
    for name in sorted(set(CATALOG) - set(REFERENCE_ACTIVE)):
        counts = count_params(load_model(name))
        assert counts.active_per_token == counts.total, name


@pytest.mark.parametrize("name", CATALOG)
def test_kv_cache_bytes_per_token_bf16(name):
    assert kv_cache_bytes_per_token(load_model(name), 2).per_token_all_layers == REFERENCE_KV_BF16[name]


def test_gpt_oss_kv_grows_only_on_full_attention_layers():
    """FC-18: only the 18 full-attention layers grow with context: 18 x 2 x 8 x 64 x 2 B = 36,864 B;
    the 18 sliding layers hold a 128-token window: 18 x 2 x 8 x 64 x 2 x 128 B."""
    kv = kv_cache_bytes_per_token(load_model("gpt-oss-120b"), 2)
    assert kv.per_token == 18 * 2 * 8 * 64 * 2 == 36_864
    assert kv.sliding_window_bytes == 18 * 2 * 8 * 64 * 2 * 128


def test_deepseek_v3_kv_is_latent_plus_rope_key():
    """MLA caches kv_lora_rank + qk_rope_head_dim per layer: 61 x (512 + 64) x 2 B = 70,272 B."""
    assert kv_cache_bytes_per_token(load_model("deepseek-v3"), 2).per_token == 61 * (512 + 64) * 2


def test_bloom_uses_padded_vocabulary():
    spec = load_model("bloom-176b")
    assert (spec.vocab_size, spec.padded_vocab_size) == (250_680, 250_880)


# ---------------------------------------------------------------- loaders and a tiny model by hand

# Tiny llama (tests/data/models/tiny.yaml and tiny-llama/config.json): h 64, L 2, a 4, kv 2,
# d = 64/4 = 16, I 128, V 100, untied.
#   attention  q 64*64 + k,v 2*64*(2*16) + o 64*64 = 4096 + 4096 + 4096 = 12,288
#   MLP        3*64*128                            = 24,576
#   norms      2*64                                = 128
#   per layer  36,992; two layers 73,984
#   embedding 100*64 = 6,400; LM head 6,400; final norm 64; total 86,848
TINY_TOTAL = 86_848


@pytest.mark.parametrize("ref", [DATA / "tiny.yaml", DATA / "tiny-llama" / "config.json", DATA / "tiny-llama"])
def test_tiny_model_loads_from_yaml_config_json_and_directory(ref):
    spec = load_model(ref)
    counts = count_params(spec)
    assert counts.total == TINY_TOTAL
    assert (counts.embedding, counts.lm_head, counts.final_norm) == (6_400, 6_400, 64)
    layer = counts.layers[0]
    assert (layer.attention, layer.dense_mlp, layer.norms) == (12_288, 24_576, 128)


def test_directory_takes_its_name_from_the_folder():
    assert load_model(DATA / "tiny-llama").name == "tiny-llama"


def test_tiny_flops_per_token_by_hand():
    """forward = 2 x matmul params + attention term, at s = 32:
    matmul params = 2 layers x (12,288 + 24,576) + LM head 6,400 = 80,128 -> 160,256 FLOPs;
    attention = 2 layers x 2 x s x a x (d + d) = 2 x 2*32*4*32 = 16,384 FLOPs;
    forward 176,640; training = 6N + 3 x attention = 480,768 + 49,152 = 529,920; full recompute 4 x."""
    flops = flops_per_token(load_model(DATA / "tiny.yaml"), 32)
    assert flops.attention_forward == 16_384
    assert flops.forward == 176_640
    assert flops.training == 6 * 80_128 + 3 * 16_384 == 529_920
    assert flops.training_full_recompute == 4 * 176_640


def test_tiny_moe_active_params_by_hand():
    """tiny-moe: 4 SwiGLU experts of 3*64*128 = 24,576, top-2, router 64*4 = 256.
    per layer total 12,288 + 4*24,576 + 256 + 128 = 110,976; active 12,288 + 2*24,576 + 256 + 128 = 61,824.
    total 2*110,976 + 12,864 = 234,816; active 2*61,824 + 12,864 = 136,512."""
    counts = count_params(load_model(DATA / "tiny-moe.yaml"))
    assert counts.total == 234_816
    assert counts.active_per_token == 136_512
