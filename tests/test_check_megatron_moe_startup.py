"""Megatron-LM's start-up assertions on MoE as `check` rules: the MoE part of the start-up assertion
tests of `test_check_megatron_startup.py`.

senior9 review finding 2: at NVIDIA/Megatron-LM@d98e8a6 `validate_args` no longer asserts sequence
parallelism for MoE at tp > 1 (the assertion the review quotes left arguments.py in 2024 and survives
only in yaml_arguments.py); the MoE layer raises a ValueError at the first training forward instead
(moe_layer.py l. 636-640), so the job still dies in its first step. Finding 3: Megatron's defaults
(load-balancing type aux_loss, coefficient 0.0) train the router with no balancing at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli_run
from planner.emit import emit
from planner.errors import SpecError
from tests.test_emit_megatron import _flags, _hand

E10 = Path("tests/data/configs/megatron/deepseek_v3_e10_1024xh100.sh")
DSV3 = ("-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "1024")


def _check(tmp_path, text: str, *options: str, name: str = "run.sh"):
    path = tmp_path / name
    path.write_text(text)
    proc = cli_run.planner("check", str(path), *options, "--format", "json")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _rules(data, severity="error") -> dict:
    return {v["rule"]: v for v in data["violations"] if v["severity"] == severity}


def test_moe_at_tp2_without_sequence_parallel_fails(tmp_path):
    """senior9 #2: DeepSeek-V3 at tp2 pp8 ep64 on 1,024 H100 (E10's recipe) without --sequence-parallel
    passed and was priced; Megatron's MoE layer raises at the first step. With the flag: no such error."""
    text = E10.read_text().replace("--sequence-parallel ", "")
    code, data = _check(tmp_path, text, *DSV3)
    error = _rules(data)["moe_tp_needs_sp"]
    assert code == 1 and "tp=2 and no sequence parallelism" in error["message"]
    assert error["fix"] == "add --sequence-parallel (or tp=1)"
    _, ok = _check(tmp_path, E10.read_text(), *DSV3)
    assert "moe_tp_needs_sp" not in _rules(ok)


def test_plan_never_keeps_moe_tp_without_sequence_parallel():
    """`--fix sequence_parallel=false` with tp pinned to 2: every candidate breaks the rule, and the
    refusal names it (exit 1, infeasible)."""
    proc = cli_run.planner("plan", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--gpus", "64", "--seq-len", "4096",
                           "--global-batch-size", "256", "--fix", "tp=2", "--fix", "sequence_parallel=false")
    assert proc.returncode == 1 and "moe_tp_needs_sp" in proc.stderr + proc.stdout


def _mixtral_tp2(*, sp: bool) -> dict:
    return _hand(model="mixtral-8x7b", gpus=32, tp=2, pp=2, dp=8, ep=8, sp=sp, recompute="full", split=(16, 16))


def test_emit_refuses_a_hand_edited_moe_plan_at_tp2_without_sequence_parallel():
    with pytest.raises(SpecError, match="moe_tp_needs_sp") as exc:
        emit(_mixtral_tp2(sp=False), "megatron")
    assert exc.value.key == "--emit"
    flags = _flags(emit(_mixtral_tp2(sp=True), "megatron").text)
    assert "--sequence-parallel" in flags and "--tensor-model-parallel-size 2" in flags


# ---- senior9 #3: load balancing

MIXTRAL = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \\
    --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --position-embedding-type rope \\
    --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \\
    --expert-model-parallel-size 8 --seq-length 4096 --max-position-embeddings 32768 \\
    --micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer \\
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 {extra}
"""
MIXTRAL_ARGS = ("-m", "mixtral-8x7b", "-c", "dgx-h100")


@pytest.mark.parametrize("extra, warned", [
    ("", True),                                                    # Megatron's defaults: aux_loss at 0.0
    ("--moe-aux-loss-coeff 0", True),
    ("--moe-router-load-balancing-type seq_aux_loss", True),       # still coefficient 0.0
    ("--moe-aux-loss-coeff 0.02", False),
    ("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4", False),
    ("--moe-router-load-balancing-type aux_loss global_aux_loss --moe-aux-loss-coeff 0 1e-3", False),
    ("--moe-router-score-function sigmoid --moe-router-enable-expert-bias", False),   # aux-loss-free
    ("--moe-router-load-balancing-type sinkhorn", False),
    ("--moe-router-load-balancing-type quantile_balancing", False),
    ("--moe-router-load-balancing-type sinkhorn aux_loss --moe-aux-loss-coeff 0 0", True),  # in a list sinkhorn
                                                                                          # does nothing (l. 771)
    ("--moe-router-load-balancing-type none", False),              # chosen explicitly: deliberate
])
def test_an_moe_script_without_load_balancing_is_warned(tmp_path, extra, warned):
    """router.py @d98e8a6: each auxiliary loss is skipped at coefficient 0 (l. 419, 467, 516); the
    expert bias, sinkhorn and quantile balancing balance without one. A warning (exit unchanged): a
    balancing-free run can be deliberate, and then says so with type none."""
    code, data = _check(tmp_path, MIXTRAL.format(extra=extra), *MIXTRAL_ARGS)
    found = _rules(data, "warning").get("moe_no_load_balancing")
    assert (found is not None) == warned, data["violations"]
    assert "moe_no_load_balancing" not in _rules(data)
    if warned:
        assert "--moe-aux-loss-coeff 0.02 (the model's router_aux_loss_coef)" in found["fix"]
        assert "--moe-router-load-balancing-type none" in found["fix"]


@pytest.mark.parametrize("extra", [
    "--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-2",   # 2 types, 1 value
    "--moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff 1e-2",
])
def test_load_balancing_lists_megatron_refuses(tmp_path, extra):
    code, data = _check(tmp_path, MIXTRAL.format(extra=extra), *MIXTRAL_ARGS)
    assert code == 1 and "moe_load_balancing_args" in _rules(data)


def test_a_coefficient_that_is_not_a_number_is_bad_input(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text(MIXTRAL.format(extra="--moe-aux-loss-coeff lots"))
    proc = cli_run.planner("check", str(path), *MIXTRAL_ARGS)
    assert proc.returncode == 2 and "--moe-aux-loss-coeff" in proc.stderr + proc.stdout


def test_a_dense_model_is_not_warned(tmp_path):
    from tests.test_check_megatron_startup import ARGS_40_HEADS
    _, data = _check(tmp_path, ARGS_40_HEADS, "-c", "dgx-h100", "--gpus", "8", name="args.txt")
    assert "moe_no_load_balancing" not in _rules(data, "warning")


@pytest.mark.parametrize("model, gpus, split, coeff, placeholder", [
    ("mixtral-8x7b", 32, (8,) * 4, "0.02", False),      # config.json router_aux_loss_coef
    ("qwen3-30b-a3b", 16, (12,) * 4, "0.001", False),   # config.json router_aux_loss_coef
    ("qwen3-235b-a22b", 128, (11,) + (12,) * 6 + (11,), "1e-2", True),  # no field: Megatron's starting value
])
def test_emitted_moe_scripts_train_with_the_models_aux_loss(tmp_path, model, gpus, split, coeff, placeholder):
    """senior9 #3: the emitted scripts left --moe-aux-loss-coeff at Megatron's 0.0. The coefficient is
    the model's router_aux_loss_coef (models/*.yaml copies of the Hugging Face configs), the header says
    so, and the script reads back without the load-balancing warning."""
    from planner.check import read_target
    pp = len(split)
    doc = _hand(model=model, gpus=gpus, tp=1, pp=pp, dp=gpus // pp, ep=8 if model == "mixtral-8x7b" else gpus // pp,
                sp=False, recompute="full", split=split)
    text = emit(doc, "megatron").text
    line = f'MOE_AUX_LOSS_COEFF="${{MOE_AUX_LOSS_COEFF:-{coeff}}}"'
    assert line in text and "--moe-aux-loss-coeff $MOE_AUX_LOSS_COEFF" in _flags(text)
    assert ("PLACEHOLDER" in text.split(line)[1].split("\n")[0]) == placeholder
    comments = " ".join(line[1:].strip() for line in text.splitlines() if line.startswith("#"))
    assert (f"MOE_AUX_LOSS_COEFF is the model's Hugging Face router_aux_loss_coef ({coeff}), as the recipe default"
            in comments) != placeholder
    path = tmp_path / "emitted.sh"
    path.write_text(text)
    target = read_target(path, model=model, cluster="dgx-h100", gpus=gpus, seq_len=None)
    assert "moe_no_load_balancing" not in {v.rule for v in target.findings}


def test_expert_bias_routers_and_published_recipes_keep_their_balancing():
    """DeepSeek-V3 keeps its report's seq_aux_loss 1e-4 with the expert bias; Kimi-K2's expert bias
    (noaux_tc) balances without an auxiliary loss, so none is added."""
    dsv3 = emit(_hand(model="deepseek-v3", gpus=256, tp=2, pp=16, dp=8, ep=8, mbs=1, gbs=256, recompute="full",
                      split=(4,) * 15 + (1,)), "megatron").text
    assert dsv3.count("MOE_AUX_LOSS_COEFF=") == 1 and 'MOE_AUX_LOSS_COEFF="${MOE_AUX_LOSS_COEFF:-0.0001}"' in dsv3
    from planner.emit.megatron import _aux_loss
    from planner.specs.model import load_model
    assert _aux_loss(load_model("kimi-k2")) == ([], "")
    assert _aux_loss(load_model("llama-3.1-8b")) == ([], "")
