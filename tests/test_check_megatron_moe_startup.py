"""Megatron-LM's start-up assertions on MoE, expert parallelism, the token dispatchers, grouped GEMM,
the router, multi-latent attention (MLA) and multi-token prediction (MTP), as `check` rules: the MoE
part of the start-up assertion tests of `test_check_megatron_startup.py`, on the same recorded copy of
Megatron-LM's parser (`planner/frameworks/megatron_flags.txt`, d98e8a6).

`ASSERTIONS` lists every such assertion of `megatron/training/arguments.py` at
NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22; `git log -1` of the
mirror), and those of the MoE path it starts that concern flags the reader parses
(`transformer_config.py`, `moe_layer.py`, `router.py`), each with the `check` rule that states it or
why none does. The tests below hold the table to the code: every flag it names is a recorded
Megatron flag; a row "not applicable: the reader does not parse ..." fails once the reader parses that
flag (the rule is then due); each rule row is triggered by the file a user would write.

senior9 review finding 2: at d98e8a6 `validate_args` no longer asserts sequence parallelism for MoE at
tp > 1 (the assertion the review quotes left arguments.py in 2024 and survives only in
yaml_arguments.py); the MoE layer raises a ValueError at the first training forward instead
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
from planner.frameworks import megatron as mg
from tests.test_emit_megatron import _flags, _hand

NOT_READ = "not applicable: the reader does not parse "

ASSERTIONS = (
    # (where at d98e8a6, what Megatron-LM asserts, the flags it reads, the check rule or why none)
    ("arguments.py l. 1036", "--use-torch-fsdp2 is not supported with expert parallelism",
     ("--use-torch-fsdp2", "--expert-model-parallel-size"), "torch_fsdp2_args"),
    ("arguments.py l. 1138-1146", "Megatron-FSDP does not support moe_single_grouped_weight / _bias",
     ("--use-megatron-fsdp", "--moe-single-grouped-weight", "--moe-single-grouped-bias"),
     NOT_READ + "--moe-single-grouped-weight / --moe-single-grouped-bias (never written)"),
    ("arguments.py l. 1378-1380", "moe_grouped_gemm: compute capability >= 8 (GroupedGEMM kernels)",
     ("--moe-grouped-gemm",), "grouped_gemm_compute_capability"),
    ("arguments.py l. 1655-1656", "num_experts must be non None to use expert model parallelism",
     ("--expert-model-parallel-size", "--num-experts"), "ep_without_experts"),
    ("arguments.py l. 1657-1658", "Number of experts should be a multiple of expert model parallel_size",
     ("--num-experts", "--expert-model-parallel-size"), "experts_divisible_by_ep"),
    ("arguments.py l. 1756-1757", "Fake process group is not supported with flex token dispatcher",
     ("--fake-process-group", "--moe-token-dispatcher-type"),
     NOT_READ + "--fake-process-group (a testing switch: no collectives run)"),
    ("arguments.py l. 1863-1864", "When using upcycling, the --save option must be specified",
     ("--moe-use-upcycling", "--save"), NOT_READ + "--moe-use-upcycling (dense-to-MoE conversion runs)"),
    ("arguments.py l. 1908-1921", "CUDA graph of moe_router with delay_wgrad_compute: TE >= 2.12 and "
     "gradient accumulation fusion", ("--delay-wgrad-compute", "--cuda-graph-modules"),
     NOT_READ + "--delay-wgrad-compute or --cuda-graph-modules (and the TE version is not known)"),
    ("arguments.py l. 882-886 (and 1942-1947)", "MTP only with rope or no position embedding",
     ("--mtp-num-layers", "--position-embedding-type"), "mtp_position_embedding"),
    ("arguments.py l. 1973-1974", "Group query attention is mutually exclusive with multi latent attention",
     ("--multi-latent-attention", "--group-query-attention"), "mla_with_gqa"),
    ("arguments.py l. 1976-1977", "--mla-down-proj-fusion requires --multi-latent-attention",
     ("--mla-down-proj-fusion", "--multi-latent-attention"), NOT_READ + "--mla-down-proj-fusion"),
    ("arguments.py l. 1980-1982", "MoE latent projections: moe_latent_size > 0 and an MoE model",
     ("--moe-latent-size", "--num-experts"), NOT_READ + "--moe-latent-size"),
    ("arguments.py l. 1661-1664", "(no assertion) a one-element load-balancing type / coefficient list "
     "becomes a scalar", ("--moe-router-load-balancing-type", "--moe-aux-loss-coeff"), "moe_load_balancing_args"),
    ("arguments.py l. 1453-1479", "CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1 before Blackwell, "
     "only a warning under overlap_moe_expert_parallel_comm", ("--overlap-moe-expert-parallel-comm",),
     "device_max_connections"),
    # the MoE path validate_args starts (TransformerConfig.__post_init__, the MoE layer, the router)
    ("moe_layer.py l. 636-640", "MoE with tensor parallelism raises in training without sequence parallelism",
     ("--num-experts", "--tensor-model-parallel-size", "--sequence-parallel"), "moe_tp_needs_sp"),
    ("transformer_config.py l. 1743-1752, 1763-1767", "DeepEP only with the flex dispatcher, one flex backend; "
     "ncclep only with flex", ("--moe-enable-deepep", "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend"),
     "deepep_needs_flex"),
    ("token_dispatcher.py l. 1835, 1854", "deepep / ncclep backends assert tp x ep > 1",
     ("--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend"), "flex_needs_tp_ep"),
    ("transformer_config.py l. 1820-1826", "moe_shared_expert_overlap only works with alltoall or flex token "
     "dispatcher", ("--moe-shared-expert-overlap", "--moe-token-dispatcher-type"), "shared_expert_overlap_dispatcher"),
    ("transformer_config.py l. 1828-1834", "moe_aux_loss_coeff must be a list of the same length as "
     "moe_router_load_balancing_type", ("--moe-router-load-balancing-type", "--moe-aux-loss-coeff"),
     "moe_load_balancing_args"),
    ("router.py l. 298", "Sinkhorn routing does not support aux loss",
     ("--moe-router-load-balancing-type", "--moe-aux-loss-coeff"), "moe_load_balancing_args"),
    ("router.py l. 226-230", "quantile balancing: aux losses must be disabled",
     ("--moe-router-load-balancing-type", "--moe-aux-loss-coeff"),
     "not applicable: unreachable from the flags (alone, quantile balancing's coefficient belongs to no "
     "auxiliary loss, router.py get_aux_loss_coeff; in a list it is not applied, l. 771-773)"),
    ("transformer_config.py l. 1964-1967", "moe_act in recompute_modules only with moe_grouped_gemm",
     ("--recompute-modules", "--moe-grouped-gemm"), "recompute_modules"),
    ("transformer_config.py l. 3002-3041", "overlap_moe_expert_parallel_comm: ep > 1, alltoall / flex, no full "
     "recompute, no shared-expert overlap", ("--overlap-moe-expert-parallel-comm",), "ep_comm_overlap_needs"),
    ("transformer_config.py l. 2617-2625", "expert bias only with sigmoid / sqrtsoftplus scores",
     ("--moe-router-enable-expert-bias", "--moe-router-score-function"),
     NOT_READ + "--moe-router-score-function (emitted only with the bias, `test_expert_bias_only_with_sigmoid`)"),
)


def test_every_flag_of_the_table_is_a_recorded_megatron_flag():
    assert mg.RECORDED_FLAGS_FILE.read_text().startswith("# Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553")
    named = {flag for *_, flags, _ in ASSERTIONS for flag in flags}
    assert named <= mg.recorded_flags(), sorted(named - mg.recorded_flags())


@pytest.mark.parametrize("where, what, flags, rule", [row for row in ASSERTIONS if row[3].startswith(NOT_READ)])
def test_a_row_without_a_rule_is_one_the_reader_cannot_see(where, what, flags, rule):
    """The unread flag stays unread; once a reader parses it, the assertion is due as a rule."""
    unread = rule[len(NOT_READ):].split()[0]
    assert unread in flags and unread not in mg.READ, f"{unread} is now read: state {where} as a rule"


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


@pytest.mark.parametrize("change, rule", [
    (("--swiglu", "--swiglu --group-query-attention --num-query-groups 128"), "mla_with_gqa"),
    (("--position-embedding-type rope", "--position-embedding-type yarn --mtp-num-layers 1"), "mtp_position_embedding"),
    (("--position-embedding-type rope", "--mtp-num-layers 1"), "mtp_position_embedding"),  # learned_absolute default
    (("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep", "--moe-shared-expert-overlap"),
     "shared_expert_overlap_dispatcher"),    # allgather by default; DeepSeek-V3 has a shared expert
    (("--use-distributed-optimizer", "--use-torch-fsdp2"), "torch_fsdp2_args"),
])
def test_mla_mtp_dispatcher_and_fsdp2_assertions_on_a_deepseek_script(tmp_path, change, rule):
    """ASSERTIONS rows on E10's DeepSeek-V3 script, one flag changed as a user would."""
    old, new = change
    assert old in E10.read_text()
    code, data = _check(tmp_path, E10.read_text().replace(old, new), *DSV3)
    assert code == 1 and rule in _rules(data), data["violations"]
    if rule == "torch_fsdp2_args":
        assert "--expert-model-parallel-size 64" in _rules(data)[rule]["message"]
    _, clean = _check(tmp_path, E10.read_text(), *DSV3)
    assert rule not in _rules(clean)


def test_mtp_with_rope_is_not_refused(tmp_path):
    text = E10.read_text().replace("--position-embedding-type rope", "--position-embedding-type rope --mtp-num-layers 1")
    _, data = _check(tmp_path, text, *DSV3)
    assert "mtp_position_embedding" not in _rules(data)


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


def test_every_rule_of_the_table_is_a_rule_of_the_code():
    sources = "".join(p.read_text() for p in Path("planner").rglob("*.py"))
    for *_, rule in ASSERTIONS:
        if not rule.startswith("not applicable"):
            assert f'rule="{rule}"' in sources, rule


def test_grouped_gemm_below_compute_capability_8_fails(tmp_path):
    """arguments.py l. 1378-1380: grouped GEMM asserts compute capability >= 8; V100 is 7.0 (the
    catalog's dgx2-v100, fp16: V100 has no bf16). H100 (9.0) passes that rule."""
    text = MIXTRAL.format(extra="--moe-aux-loss-coeff 0.02").replace("--bf16", "--fp16")
    code, data = _check(tmp_path, text, "-m", "mixtral-8x7b", "-c", "dgx2-v100")
    error = _rules(data)["grouped_gemm_compute_capability"]
    assert code == 1 and "V100-SXM3-32GB" in error["message"] and "--moe-grouped-gemm" in error["fix"]
    _, without = _check(tmp_path, text.replace("--moe-grouped-gemm ", ""), "-m", "mixtral-8x7b", "-c", "dgx2-v100")
    assert "grouped_gemm_compute_capability" not in _rules(without)
    _, h100 = _check(tmp_path, MIXTRAL.format(extra=""), *MIXTRAL_ARGS)
    assert "grouped_gemm_compute_capability" not in _rules(h100)


def test_emit_leaves_grouped_gemm_out_on_v100_and_says_so():
    from planner.emit.megatron import _grouped_gemm_deviations
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model
    mixtral = load_model("mixtral-8x7b")
    [line] = _grouped_gemm_deviations(mixtral, load_cluster("dgx2-v100", gpus=64))
    assert line.startswith("--moe-grouped-gemm left out: V100-SXM3-32GB is below compute capability 8")
    assert _grouped_gemm_deviations(mixtral, load_cluster("dgx-h100", gpus=64)) == []
    assert _grouped_gemm_deviations(load_model("llama-3.1-8b"), load_cluster("dgx2-v100", gpus=64)) == []


def test_explain_refuses_moe_act_recompute_where_grouped_gemm_cannot_run():
    """transformer_config.py l. 1964-1967: moe_act recompute needs grouped GEMM, which V100 cannot run."""
    from planner.placement.layout import Layout
    from planner.placement.rules import check_layout
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model
    layout = Layout(dp=8, tp=2, pp=4, ep=8, sequence_parallel=True, micro_batch_size=1, global_batch_size=256,
                    seq_len=4096, precision="fp16", recompute="selective", recompute_modules=("moe_act",))
    found = {c: [v.message for v in check_layout(load_model("mixtral-8x7b"), load_cluster(c, gpus=64), layout)
                 if v.rule == "recompute_modules"] for c in ("dgx2-v100", "dgx-h100")}
    assert len(found["dgx2-v100"]) == 1 and "GroupedGEMM" in found["dgx2-v100"][0] and not found["dgx-h100"]
