"""`planner plan --emit megatron` writes the model's training recipe, not Megatron-LM's defaults:
the router, multi-token prediction and q/k norms from the model's Hugging Face config, the model
family's published optimizer hyper-parameters (else marked placeholders), the fp8 scaling the plan
was costed with, and the flex dispatcher's backend for the cluster (issue 11, What to build 4).

Expected values come from the models' config.json fields (models/*.yaml, copies of the Hugging
Face configs), the DeepSeek-V3 Technical Report (arXiv:2412.19437) §4.2, the Llama 3 paper
(arXiv:2407.21783) §3.4.1 with Llama 2 (arXiv:2307.09288) §2.2, Megatron-LM d98e8a6's argparse
defaults (`megatron/training/arguments.py` l. 2611-2625) and its MoE README's dispatcher table.
"""

from __future__ import annotations

import dataclasses

from planner.emit import emit
from planner.emit.megatron import _architecture_flags, _architecture_gaps, _router_flags
from planner.frameworks import megatron as mg
from planner.specs.model import load_model
from tests.test_emit_megatron import _flags, _hand, _read_back

DSV3_SPLIT = (4,) * 15 + (1,)  # 61 layers over pp 16


def _dsv3(**kw) -> dict:
    return _hand(model="deepseek-v3", gpus=256, tp=2, pp=16, cp=1, dp=8, ep=8, etp=1, zero=1,
                 mbs=1, gbs=256, recompute="full", split=DSV3_SPLIT, **kw)


def test_deepseek_v3_router_mtp_and_qk_norm_from_its_config(tmp_path):
    """DeepSeek-V3 config.json: scoring_func sigmoid, topk_method noaux_tc (selection on score +
    e_score_correction_bias), routed_scaling_factor 2.5, n_group 8, topk_group 4 (8 experts / 4
    groups = top-2 per group, as HF sums), num_nextn_predict_layers 1, q_a_layernorm /
    kv_a_layernorm (Megatron's MLA q/kv layernorm under --qk-layernorm), an fp32 router. The
    script reads back to the plan's layout with no error."""
    emitted, target = _read_back(_dsv3(), tmp_path)
    flags = _flags(emitted.text)
    for flag in ("--moe-router-score-function sigmoid", "--moe-router-enable-expert-bias",
                 "--moe-router-topk-scaling-factor 2.5", "--moe-router-num-groups 8",
                 "--moe-router-group-topk 4", "--moe-router-dtype fp32",
                 "--qk-layernorm", "--moe-router-topk 8"):
        assert flag in flags, flag
    assert "--moe-router-pre-softmax" not in flags  # norm_topk_prob true: weights sum to 1
    assert not [v.message for v in target.findings if v.severity == "error"]
    # num_nextn_predict_layers 1: trained and costed, as NVIDIA's Megatron-Bridge DeepSeek-V3
    # recipes train it, with the report's MTP loss weight 0.3; `check` reads the same MTP layer back
    assert "--mtp-num-layers 1" in flags and "--mtp-loss-scaling-factor 0.3" in flags
    assert not any("multi-token" in d for d in emitted.deviations)
    assert target.layout.mtp_layers == 1
    assert not [v for v in target.findings if v.rule.startswith("mtp")]
    assert not any("router" in d for d in emitted.deviations)
    assert set(f.split()[0] for f in flags) <= mg.recorded_flags()  # Megatron's parser has them


def test_check_costs_a_scripts_mtp_layer(tmp_path):
    """A script's --mtp-num-layers is read and costed (no `mtp_not_costed` warning any more): the
    emitted DeepSeek-V3 script trains one MTP layer; without the flag `check` reads none (Megatron-LM's
    default) and its last stage holds less; a layout string whose `m` count differs from
    --mtp-num-layers is Megatron's start-up assertion (pipeline_parallel_layer_layout.py
    l. 111-115 @d98e8a6: 'Number of mtp layers in layout must match mtp_num_layers')."""
    from planner.check import evaluate, read_target
    from planner.cost.memory import stage_memory
    from planner.specs.cluster import load_cluster

    emitted, with_mtp = _read_back(_dsv3(), tmp_path)
    plain = tmp_path / "plain.sh"
    plain.write_text(emitted.text.replace(" --mtp-num-layers 1 \\\n", " \\\n").replace(
        "    --mtp-num-layers 1 \\\n", ""))
    without = read_target(plain, model="deepseek-v3", cluster="dgx-h100", gpus=256, seq_len=4096)
    assert (with_mtp.layout.mtp_layers, without.layout.mtp_layers) == (1, 0)
    assert not [v for v in with_mtp.findings + without.findings if v.rule.startswith("mtp")]
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100", gpus=256)
    assert (stage_memory(model, cluster, with_mtp.layout, 15).total
            > stage_memory(model, cluster, without.layout, 15).total)

    mismatch = tmp_path / "layout.sh"
    mismatch.write_text(plain.read_text().replace("--qk-layernorm", "--qk-layernorm --pipeline-model-"
                                                  "parallel-layout 'Etttt|(tttt|)*14tmL'"))
    verdict = evaluate(read_target(mismatch, model="deepseek-v3", cluster="dgx-h100", gpus=256, seq_len=4096))
    [found] = [v for v in verdict["violations"] if v["rule"] == "mtp_layout"]
    assert found["severity"] == "error" and "--mtp-num-layers 1" in found["fix"]


def test_deepseek_v3_published_hyper_parameters():
    """DeepSeek-V3 Technical Report §4.2: AdamW beta1 0.9, beta2 0.95, weight_decay 0.1; init std
    0.006; gradient clipping 1.0; warm-up over the first 2K steps; bias update speed 0.001;
    sequence-wise balance loss alpha 0.0001 (§2.1.2); MTP loss weight 0.3 (first 10T tokens)."""
    text = emit(_dsv3(), "megatron").text
    for var, value in (("ADAM_BETA1", "0.9"), ("ADAM_BETA2", "0.95"), ("WEIGHT_DECAY", "0.1"),
                       ("INIT_METHOD_STD", "0.006"), ("CLIP_GRAD", "1.0"),
                       ("LR_WARMUP_ITERS", "2000"), ("MOE_ROUTER_BIAS_UPDATE_RATE", "0.001"),
                       ("MOE_ROUTER_LOAD_BALANCING_TYPE", "seq_aux_loss"),
                       ("MOE_AUX_LOSS_COEFF", "0.0001")):
        assert f'{var}="${{{var}:-{value}}}"' in text, var
    assert "--mtp-loss-scaling-factor 0.3" in text  # written with the MTP layer (`_mtp_flags`)
    assert "arXiv:2412.19437" in text
    flags = _flags(text)
    assert "--init-method-std $INIT_METHOD_STD" in flags and "--weight-decay $WEIGHT_DECAY" in flags


def test_llama_3_published_hyper_parameters():
    """Llama 3 (§3.4.1): linear warm-up of 8,000 steps, cosine decay; AdamW beta2 0.95, eps 1e-5,
    weight decay 0.1, clipping 1.0 as Llama 2 §2.2. No MoE or MTP knob on a dense model."""
    text = emit(_hand(), "megatron").text
    for var, value in (("ADAM_BETA2", "0.95"), ("WEIGHT_DECAY", "0.1"), ("ADAM_EPS", "1e-05"),
                       ("LR_WARMUP_ITERS", "8000"), ("LR_DECAY_STYLE", "cosine")):
        assert f'{var}="${{{var}:-{value}}}"' in text, var
    assert "MOE_" not in text and "MTP_" not in text
    # Llama 3 publishes no init std: Megatron's default 0.02, marked as a placeholder
    assert 'INIT_METHOD_STD="${INIT_METHOD_STD:-0.02}"  # PLACEHOLDER' in text
    assert 'WEIGHT_DECAY="${WEIGHT_DECAY:-0.1}"\n' in text  # published: no placeholder mark


def test_published_learning_rates_are_written_where_the_header_cites_them():
    """Fresh-user review 10 finding 10: the 405B script cited Llama 3 §3.4.1 and wrote LR=3.0e-4 (the
    placeholder) and no --min-lr (Megatron-LM's default 0). Published: Llama 3 (arXiv:2407.21783) §3.4.1,
    405B peak 8 x 10^-5 decaying to 8 x 10^-7; Table 3, peaks 3 x 10^-4 (8B) and 1.5 x 10^-4 (70B), no final
    rate; DeepSeek-V3 (arXiv:2412.19437) §4.2, peak 2.2 x 10^-4, cosine decay to 2.2 x 10^-5. A peak without
    a published final rate leaves MIN_LR at Megatron-LM's 0, marked PLACEHOLDER."""
    from tests.cli_run import planner

    user = planner("plan", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "1024", "--emit", "megatron", "--top", "1")
    assert user.returncode == 0, user.stderr
    texts = {"llama-3.1-405b": user.stdout,  # the review's command, at a GPU count that searches in seconds
             "llama-3.1-70b": emit(_hand(model="llama-3.1-70b", gpus=32, tp=8, pp=4, dp=1, recompute="full",
                                         split=(20, 20, 20, 20)), "megatron").text,
             "llama-3.1-8b": emit(_hand(), "megatron").text}
    cases = {"llama-3.1-405b": ("8e-05", "8e-07"), "llama-3.1-70b": ("1.5e-04", None), "llama-3.1-8b": ("3e-04", None)}
    for name, (lr, min_lr) in cases.items():
        text = texts[name]
        assert f'LR="${{LR:-{lr}}}"\n' in text, name
        assert text.count('LR="${LR:-') == 1 and "PLACEHOLDER" not in text.split('LR="${LR:-')[1].split("\n")[0]
        assert (f'MIN_LR="${{MIN_LR:-{min_lr}}}"\n' if min_lr else
                'MIN_LR="${MIN_LR:-0}"  # PLACEHOLDER') in text, name
        flags = _flags(text)
        assert flags.count("--lr $LR") == 1 and flags.count("--min-lr $MIN_LR") == 1
        assert "Learning rate: The Llama 3 Herd of Models (arXiv:2407.21783)" in " ".join(
            line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    text = emit(_dsv3(), "megatron").text
    assert 'LR="${LR:-2.2e-04}"\n' in text and 'MIN_LR="${MIN_LR:-2.2e-05}"\n' in text


def test_an_unpublished_learning_rate_is_called_a_placeholder_in_the_header():
    """Where no learning rate is published (Qwen3-32B, Mixtral) the header says the LR is a PLACEHOLDER, and
    the LR line stays in the PLACEHOLDER block."""
    for doc in (_hand(model="qwen3-32b", gpus=16, tp=8, dp=1, recompute="full", split=(32, 32)),):
        text = emit(doc, "megatron").text
        header = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
        assert "The peak learning rate LR above is a PLACEHOLDER" in header
        placeholders = text.split("# PLACEHOLDER values")[1].split("\n\n")[0]
        assert 'LR="${LR:-3.0e-4}"' in placeholders


def test_model_without_a_published_recipe_gets_marked_placeholders():
    """Qwen3-32B: no recipe recorded -> the five knobs at Megatron-LM's argparse defaults
    (weight decay 0.01, adam beta2 0.999, init std 0.02 (transformer_config.py l. 400), no
    warm-up (training_config.py l. 190), min LR 0 (arguments.py l. 2991)), each line marked PLACEHOLDER."""
    doc = _hand(model="qwen3-32b", gpus=16, tp=8, dp=1, recompute="full", split=(32, 32))
    text = emit(doc, "megatron").text
    assert "no published recipe of qwen3-32b is recorded" in text
    for var, value in (("ADAM_BETA2", "0.999"), ("WEIGHT_DECAY", "0.01"),
                       ("INIT_METHOD_STD", "0.02"), ("LR_WARMUP_ITERS", "0"), ("MIN_LR", "0")):
        assert f'{var}="${{{var}:-{value}}}"  # PLACEHOLDER' in text, var
    assert "--qk-layernorm" in _flags(text)  # Qwen3's per-head q_norm / k_norm


def test_router_flags_are_derived_from_config_fields_not_the_model_name():
    """The same fields on other models: Kimi-K2 (routed_scaling_factor 2.827, n_group 1: no group
    limit), GLM-4.5 (no scoring_func in its config: its HF router is a sigmoid with the
    correction bias, `ROUTER_DEFAULTS`; routed_scaling_factor 2.5), a softmax router without
    renormalisation (Qwen2-MoE style norm_topk_prob false -> pre-softmax), and what Megatron
    cannot state (an unknown score function; groups scored other than by their top 2)."""
    kimi, _ = _router_flags(load_model("kimi-k2"))
    assert "--moe-router-topk-scaling-factor 2.827" in kimi
    assert not [f for f in kimi if "num-groups" in f or "group-topk" in f]
    assert "--moe-router-score-function sigmoid" in kimi and "--moe-router-enable-expert-bias" in kimi
    glm, _ = _router_flags(load_model("glm-4.5"))
    assert {"--moe-router-score-function sigmoid", "--moe-router-enable-expert-bias",
            "--moe-router-topk-scaling-factor 2.5"} <= set(glm)
    qwen = load_model("qwen3-235b-a22b")  # softmax, norm_topk_prob true: Megatron's defaults
    assert _router_flags(qwen) == ([], [])
    unnormalised = dataclasses.replace(qwen, extra={**qwen.extra, "norm_topk_prob": False})
    assert _router_flags(unnormalised)[0] == ["--moe-router-pre-softmax"]
    odd = dataclasses.replace(qwen, extra={**qwen.extra, "scoring_func": "tanh"})
    assert _router_flags(odd)[0] == []
    assert any("scoring_func 'tanh'" in g for g in _architecture_gaps(odd))
    dsv3 = load_model("deepseek-v3")
    grouped = dataclasses.replace(dsv3, topk_group=2)  # 8 // 2 = 4 per group, HF sums 2
    flags, gaps = _router_flags(grouped)
    assert not [f for f in flags if "num-groups" in f] and gaps


def test_expert_bias_only_with_sigmoid():
    """Megatron asserts the expert bias only with sigmoid / sqrtsoftplus scores
    (`transformer_config.py` l. 2617-2625 @d98e8a6); noaux_tc under softmax is a gap instead."""
    for name in ("deepseek-v3", "kimi-k2", "glm-4.5", "qwen3-235b-a22b", "mixtral-8x7b"):
        flags, _ = _router_flags(load_model(name))
        if "--moe-router-enable-expert-bias" in flags:
            assert "--moe-router-score-function sigmoid" in flags, name
    softmax = dataclasses.replace(load_model("deepseek-v3"),
                                  extra={**load_model("deepseek-v3").extra, "scoring_func": "softmax"})
    flags, gaps = _router_flags(softmax)
    assert "--moe-router-enable-expert-bias" not in flags and any("noaux_tc" in g for g in gaps)


def test_qk_layernorm_only_where_the_model_has_q_k_norms():
    """Llama 3.1 has none; DeepSeek-V3's MLA normalises the q and kv latents; Qwen3 per head."""
    assert "--qk-layernorm" not in _architecture_flags(load_model("llama-3.1-8b"), 4096)
    assert "--qk-layernorm" in _architecture_flags(load_model("deepseek-v3"), 4096)
    assert "--qk-layernorm" in _architecture_flags(load_model("qwen3-30b-a3b"), 4096)


def test_fp8_recipe_is_the_costed_one_with_a_note_of_the_familys():
    """A DeepSeek-V3 plan costed with Megatron's default delayed scaling runs delayed (no flag) and
    notes the blockwise scaling DeepSeek trained with (report §3.3.2); a plan costed blockwise
    writes --fp8-recipe blockwise and no note. (Both with --fp8-param-gather: without it TE's fp8
    weight workspace, 2 B per local linear weight, does not fit this hand layout.)"""
    doc = _dsv3(precision="fp8")
    doc["request"]["fp8_param_gather"] = True
    delayed = emit(doc, "megatron").text
    assert "--fp8-recipe" not in " ".join(_flags(delayed))
    assert "re-plan with --fp8-recipe blockwise" in delayed
    doc = _dsv3(precision="fp8")
    doc["request"]["fp8_param_gather"] = True
    doc["request"]["fp8_recipe"] = "blockwise"
    blockwise = emit(doc, "megatron").text
    assert "--fp8-recipe blockwise" in _flags(blockwise)
    assert "re-plan with --fp8-recipe" not in blockwise


def test_flex_backend_follows_the_nvlink_domain():
    """Megatron-LM's MoE README (d98e8a6): DeepEP for cross-node EP over the network (H100 / H800
    nodes of 8, one NVLink domain each), HybridEP for multi-node NVLink (GB200 NVL72: 72 GPUs, 4
    per node)."""
    assert mg.flex_backend(8, 8) == "deepep"
    assert mg.flex_backend(4, 72) == "hybridep"
    doc = _dsv3()
    doc["plan"]["parallelism"]["moe_dispatcher"] = "flex"
    flags = _flags(emit(doc, "megatron").text)
    assert "--moe-token-dispatcher-type flex" in flags
    assert "--moe-flex-dispatcher-backend deepep" in flags  # dgx-h100: 8 GPUs, 8-GPU NVLink domain
