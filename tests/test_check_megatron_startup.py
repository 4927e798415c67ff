"""`planner check` on Megatron-LM arguments is as strict as Megatron-LM itself: a flag its argparse
does not define is an error naming the closest real flag (argparse exits on it), and the start-up
assertions of `validate_args` that concern the layout are rules (issue 11's false PASSes).

The flag names come from the recorded copy of Megatron-LM's parser
(`planner/frameworks/megatron_flags.txt`, d98e8a6, `tools/record_megatron_flags.py`); the
assertions are read from `megatron/training/arguments.py` at that commit (cited per test)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.frameworks import megatron as mg

runner = CliRunner()

# A 40-head, 8-KV-head llama-style model given by flags (Qwen/Llama-2-13B-like widths).
ARGS_40_HEADS = """--num-layers 40 --hidden-size 5120 --num-attention-heads 40
--group-query-attention --num-query-groups 8 --ffn-hidden-size 13824 --max-position-embeddings 32768
--swiglu --normalization RMSNorm --position-embedding-type rope --vocab-size 152064
--seq-length 32768 --micro-batch-size 1 --global-batch-size 64 --bf16
--use-distributed-optimizer
"""


def _run(tmp_path, text, *options, name="args.txt"):
    path = tmp_path / name
    path.write_text(text)
    result = runner.invoke(app, ["check", str(path), "--cluster", "dgx-h100", *options,
                                 "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.output)


def _errors(data):
    return {v["rule"]: v for v in data["violations"] if v["severity"] == "error"}


def test_recorded_parser_holds_every_flag_the_planner_reads_or_writes():
    recorded = mg.recorded_flags()
    assert mg.RECORDED_FLAGS_FILE.read_text().startswith(
        "# Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553")
    megatron_flags = {f.flag for f in mg.FLAGS} - mg.TORCHRUN_FLAGS
    assert megatron_flags <= recorded, sorted(megatron_flags - recorded)
    # What the start-up assertions below read (validate_args argument names, dashed):
    assert {"--use-megatron-fsdp", "--use-torch-fsdp2", "--ckpt-format", "--cp-comm-type",
            "--untie-embeddings-and-output-weights", "--fp16"} <= recorded
    # Real flags the misspellings resemble; the misspellings are not flags.
    assert {"--tensor-model-parallel-size", "--use-flash-attn"} <= recorded
    assert not {"--tensor-model-paralel-size", "--use-flash-atention"} & recorded


@pytest.mark.parametrize("typo, real", [("--tensor-model-paralel-size 2", "--tensor-model-parallel-size"),
                                        ("--use-flash-atention", "--use-flash-attn")])
def test_misspelled_flag_fails_naming_the_real_flag(tmp_path, typo, real):
    """Issue 11: both passed before (a warning, or nothing); Megatron's argparse exits on both."""
    code, data = _run(tmp_path, ARGS_40_HEADS + typo + "\n", "--gpus", "8")
    assert code == 1
    error = _errors(data)["megatron_unknown_flag"]
    assert f"{typo.split()[0]} is not a Megatron-LM flag; did you mean {real}?" in error["message"]
    assert error["fix"] == f"write {real}" and error["line"] == 6


@pytest.mark.parametrize("short, real", [
    ("--tp 2", "--tensor-model-parallel-size"), ("--pp 2", "--pipeline-model-parallel-size"),
    ("--cp 2", "--context-parallel-size"), ("--ep 2", "--expert-model-parallel-size"),
    ("--vpp 2", "--num-virtual-stages-per-pipeline-rank"), ("--sp", "--sequence-parallel"),
    ("--mbs 1", "--micro-batch-size"), ("--gbs 64", "--global-batch-size"),
    ("--seq-len 4096", "--seq-length"), ("--recompute full", "--recompute-granularity")])
def test_a_knobs_short_name_suggests_its_megatron_flag(tmp_path, short, real):
    """Fresh-user defect: `--tp 2` suggested "did you mean --sft?" (the closest spelling); a
    planner knob's short name suggests the Megatron flag that sets the knob."""
    code, data = _run(tmp_path, ARGS_40_HEADS + short + "\n", "--gpus", "8")
    error = _errors(data)["megatron_unknown_flag"]
    assert f"{short.split()[0]} is not a Megatron-LM flag; did you mean {real}?" in error["message"]
    assert error["fix"] == f"write {real}" and code == 1


def test_dp_is_named_as_derived_not_as_a_flag(tmp_path):
    code, data = _run(tmp_path, ARGS_40_HEADS + "--dp 4\n", "--gpus", "8")
    error = _errors(data)["megatron_unknown_flag"]
    assert "no dp flag: it derives dp = world size / (tp x pp x cp)" in error["message"]
    assert error["fix"] == "remove --dp" and code == 1


def test_an_unknown_flag_far_from_any_flag_fails_too(tmp_path):
    code, data = _run(tmp_path, ARGS_40_HEADS + "--frobnicate-everything\n", "--gpus", "8")
    assert code == 1 and "megatron_unknown_flag" in _errors(data)


def test_torchrun_flags_of_a_script_are_not_megatron_flags(tmp_path):
    script = ("torchrun --nproc_per_node 8 --rdzv_backend c10d --max-restarts 0 pretrain_gpt.py \\\n"
              + ARGS_40_HEADS.replace("\n", " \\\n"))
    code, data = _run(tmp_path, script, name="pretrain.sh")
    assert "megatron_unknown_flag" not in _errors(data), data["violations"]


def test_cp_a2a_needs_heads_divisible_by_cp(tmp_path):
    """Issue 11: `--cp-comm-type a2a` with cp 16 on a 40-head model passed. Transformer Engine
    (d0067d0, context_parallel.py) asserts the Q and K heads of each TP rank divisible by cp:
    40 % 16 = 8 and 8 % 16 = 8. The same layout with ring attention (p2p) has no head rule."""
    layout = "--context-parallel-size 16\n"
    code, data = _run(tmp_path, ARGS_40_HEADS + layout + "--cp-comm-type a2a\n", "--gpus", "16")
    assert code == 1
    error = _errors(data)["ulysses_heads"]
    assert "num_attention_heads=40 / tp=1 = 40 query and 8 key/value heads per rank" in error["message"]
    assert "cp in [1, 2, 4, 8]" in error["fix"] and error["line"] == 7
    _, ring = _run(tmp_path, ARGS_40_HEADS + layout + "--cp-comm-type p2p\n", "--gpus", "16")
    assert "ulysses_heads" not in _errors(ring)
    # cp 8 divides 40 and 8: a2a passes that rule.
    _, eight = _run(tmp_path, ARGS_40_HEADS + "--context-parallel-size 8\n--cp-comm-type a2a\n",
                    "--gpus", "16")
    assert "ulysses_heads" not in _errors(eight)


FSDP = ARGS_40_HEADS.replace("--use-distributed-optimizer", "--use-megatron-fsdp")


def test_megatron_fsdp_with_device_connections_1_fails(tmp_path):
    """validate_args: `assert os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') != "1"` under
    use_megatron_fsdp (and under use_torch_fsdp2)."""
    script = ("export CUDA_DEVICE_MAX_CONNECTIONS=1\npython pretrain_gpt.py \\\n"
              + FSDP.replace("\n", " \\\n") + "--ckpt-format fsdp_dtensor\n")
    code, data = _run(tmp_path, script, "--gpus", "8", name="fsdp.sh")
    assert code == 1
    _, without = _run(tmp_path, script.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", ""),
                      "--gpus", "8", name="fsdp.sh")
    # the export adds exactly this error (memory is costed either way: 32K tokens, no recompute)
    assert set(_errors(data)) - set(_errors(without)) == {"megatron_fsdp_device_connections"}
    assert "megatron_fsdp_device_connections" not in _errors(without)


def test_megatron_fsdp_needs_the_fsdp_dtensor_checkpoint_format_and_only_it(tmp_path):
    """validate_args: Megatron-FSDP asserts ckpt_format == "fsdp_dtensor" (the default is
    torch_dist, training_config.py); --ckpt-format fsdp_dtensor asserts use_megatron_fsdp."""
    code, data = _run(tmp_path, FSDP, "--gpus", "8")
    assert code == 1
    assert "--ckpt-format torch_dist" in _errors(data)["megatron_fsdp_ckpt_format"]["message"]
    code, data = _run(tmp_path, FSDP + "--ckpt-format fsdp_dtensor\n", "--gpus", "8")
    assert "megatron_fsdp_ckpt_format" not in _errors(data)
    code, data = _run(tmp_path, ARGS_40_HEADS + "--ckpt-format fsdp_dtensor\n", "--gpus", "8")
    assert code == 1 and "megatron_fsdp_ckpt_format" in _errors(data)


def test_torch_fsdp2_assertions(tmp_path):
    """validate_args under use_torch_fsdp2: ckpt_format torch_dist or torch_dcp, untied embeddings,
    no fp16."""
    fsdp2 = ARGS_40_HEADS.replace("--use-distributed-optimizer", "--use-torch-fsdp2")
    code, data = _run(tmp_path, fsdp2, "--gpus", "8")
    assert code == 1
    assert "no --untie-embeddings-and-output-weights" in _errors(data)["torch_fsdp2_args"]["message"]
    _, data = _run(tmp_path, fsdp2 + "--untie-embeddings-and-output-weights\n", "--gpus", "8")
    assert "torch_fsdp2_args" not in _errors(data)


def test_flags_of_other_commands_in_a_script_are_not_megatron_flags(tmp_path):
    """`mkdir --parents`, `pip install --upgrade` and a preprocessing step's flags are not the
    launch's; a misspelling inside the bash array the launch expands, or on the launch line, is."""
    args = ARGS_40_HEADS.replace("\n", "\n    ")
    script = ("#!/bin/bash\nmkdir -p --parents /tmp/run\npip install --upgrade foo\n"
              f"MODEL_ARGS=(\n    {args}--use-flash-atention\n)\n"
              "torchrun --nproc_per_node 8 pretrain_gpt.py \\\n    ${MODEL_ARGS[@]} \\\n"
              "    --tensor-model-paralel-size 2\n"
              "python tools/preprocess_data.py --frobnicate\n")
    code, data = _run(tmp_path, script, name="pretrain.sh")
    unknown = [v["message"].split()[0] for v in data["violations"]
               if v["rule"] == "megatron_unknown_flag"]
    assert sorted(unknown) == ["--tensor-model-paralel-size", "--use-flash-atention"]


@pytest.mark.parametrize("extra, rule, present", [
    ("--overlap-param-gather", "overlap_param_gather_needs", True),        # l. 1028: grad reduce
    ("--overlap-param-gather --overlap-grad-reduce", "overlap_param_gather_needs", False),
    ("--tensor-model-parallel-size 2 --tp-comm-overlap", "tp_comm_overlap_needs_sp", True),  # l. 1442
    ("--tensor-model-parallel-size 2 --tp-comm-overlap --sequence-parallel",
     "tp_comm_overlap_needs_sp", False),
])
def test_overlap_switches_follow_megatrons_assertions(tmp_path, extra, rule, present):
    """arguments.py d98e8a6 l. 1024-1029 (--overlap-param-gather asserts a distributed optimizer
    or Megatron-FSDP and --overlap-grad-reduce) and l. 1441-1442 (--tp-comm-overlap asserts
    --sequence-parallel); the file's switches reach the costed layout."""
    _, data = _run(tmp_path, ARGS_40_HEADS + extra + "\n", "--gpus", "8")
    assert (rule in _errors(data)) == present
    if not present:
        costed = data["parallelism"]["overlap"]
        for flag, knob in (("--tp-comm-overlap", "tp_comm_overlap"),
                           ("--overlap-grad-reduce", "overlap_grad_reduce"),
                           ("--overlap-param-gather", "overlap_param_gather")):
            assert costed[knob] is (flag in extra)


def test_ep_all_to_all_overlap_follows_megatrons_assertions(tmp_path):
    """transformer_config.py d98e8a6 l. 3002-3032: --overlap-moe-expert-parallel-comm asserts
    ep > 1, the alltoall / flex dispatcher (default allgather) and no full recompute: one finding
    quoting Megatron-LM's three messages (the placement rule, not repeated by check_layout)."""
    _, data = _run(tmp_path, ARGS_40_HEADS + "--overlap-moe-expert-parallel-comm "
                   "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1\n",
                   "--gpus", "8")
    message = _errors(data)["ep_comm_overlap_needs"]["message"]
    assert "ep=1" in message and "allgather token dispatcher" in message and "full recompute" in message
    assert '"disable full recomputation when enabling overlap_moe_expert_parallel_comm"' in message
    assert "without no" not in message
    assert [v["rule"] for v in data["violations"]].count("ep_comm_overlap_needs") == 1


def test_ep_all_to_all_overlap_refuses_the_shared_expert_overlap(tmp_path):
    """transformer_config.py d98e8a6 l. 3039-3041: 'disable moe_shared_expert_overlap when
    enabling overlap_moe_expert_parallel_comm'; without the shared-expert overlap no such finding."""
    text = ARGS_40_HEADS + "--overlap-moe-expert-parallel-comm --moe-shared-expert-overlap\n"
    _, data = _run(tmp_path, text, "--gpus", "8")
    assert "ep_comm_overlap_shared_expert_overlap" in _errors(data)
    _, data = _run(tmp_path, ARGS_40_HEADS + "--overlap-moe-expert-parallel-comm\n", "--gpus", "8")
    assert "ep_comm_overlap_shared_expert_overlap" not in _errors(data)


# ---- review-fresh6 finding 2: start-up assertions of NVIDIA/Megatron-LM@d98e8a6 arguments.py

def test_ep_on_a_dense_model_fails_as_megatron_asserts(tmp_path):
    """validate_args l. 1655-1656: `if args.expert_model_parallel_size > 1: assert args.num_experts
    is not None, "num_experts must be non None to use expert model parallelism"` (was a warning,
    PASS); the same request is bad input to `explain --ep 2`."""
    code, data = _run(tmp_path, ARGS_40_HEADS + "--expert-model-parallel-size 2\n", "--gpus", "8")
    assert code == 1
    error = _errors(data)["ep_without_experts"]
    assert "num_experts must be non None" in error["message"] and error["fix"] == "set ep=1"


TP2 = ARGS_40_HEADS + "--tensor-model-parallel-size 2\n"


def _script(export, args=TP2):
    return f"{export}\npython pretrain_gpt.py \\\n" + args.replace("\n", " \\\n") + "--log-interval 1\n"


@pytest.mark.parametrize("export, cluster, severity", [
    ("export CUDA_DEVICE_MAX_CONNECTIONS=32", "dgx-h100", "error"),
    ("", "dgx-h100", "warning"),                   # may come from the job's environment
    ("export CUDA_DEVICE_MAX_CONNECTIONS=1", "dgx-h100", None),
    ("export CUDA_DEVICE_MAX_CONNECTIONS=32", "dgx-a100-80g", "error"),
    ("export CUDA_DEVICE_MAX_CONNECTIONS=32", "dgx-b200", None),   # arch 10: no assertion
])
def test_device_max_connections_with_tp_before_blackwell(tmp_path, export, cluster, severity):
    """validate_args l. 1453-1479: with tp or cp > 1 and get_device_arch_version() < 10, and neither
    FSDP nor overlap_moe_expert_parallel_comm, `assert os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')
    == "1"`."""
    path = tmp_path / "run.sh"
    path.write_text(_script(export))
    result = runner.invoke(app, ["check", str(path), "--cluster", cluster, "--gpus", "8", "--format", "json"])
    found = [v for v in json.loads(result.output)["violations"] if v["rule"] == "device_max_connections"]
    assert [v["severity"] for v in found] == ([severity] if severity else [])
    if severity:
        assert "CUDA_DEVICE_MAX_CONNECTIONS" in found[0]["message"] and "tp=2" in found[0]["message"]


@pytest.mark.parametrize("args", [ARGS_40_HEADS, TP2.replace("--use-distributed-optimizer", "--use-megatron-fsdp")
                                  + "--ckpt-format fsdp_dtensor\n"])
def test_device_max_connections_not_asked_at_tp1_nor_under_fsdp(tmp_path, args):
    """tp = cp = 1: the assertion's condition is false; Megatron-FSDP: validate_args only warns."""
    _, data = _run(tmp_path, _script("export CUDA_DEVICE_MAX_CONNECTIONS=32", args), "--gpus", "8", name="run.sh")
    assert not [v for v in data["violations"] if v["rule"] == "device_max_connections"]


MIXTRAL = """--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-experts 8
--group-query-attention --num-query-groups 8 --swiglu --ffn-hidden-size 14336
--expert-model-parallel-size 8 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64
--use-distributed-optimizer --bf16
"""


def _mixtral(tmp_path, extra):
    path = tmp_path / "mixtral.txt"
    path.write_text(MIXTRAL + extra)
    return runner.invoke(app, ["check", str(path), "-m", "mixtral-8x7b", "-c", "dgx-h100", "--gpus", "8",
                               "--format", "json"])


def test_moe_layer_freq_other_than_the_models_is_bad_input(tmp_path):
    """gpt_layer_specs.py l. 647-649: an int N puts experts in layers i with i % N == 0, so N = 2
    over Mixtral's 32 layers (all MoE, HF MixtralDecoderLayer) gives 16 MoE layers, first dense
    layer 1."""
    result = _mixtral(tmp_path, "--moe-layer-freq 2\n")
    assert result.exit_code == 2
    assert "--moe-layer-freq" in result.output and "16 MoE layers of 32" in result.output
    assert "32 MoE layers of 32 (first difference at layer 1)" in result.output
    for same in ("1", "'([1]*32)'", "'[1]*16+[1]*16'"):
        assert _mixtral(tmp_path, f"--moe-layer-freq {same}\n").exit_code in (0, 1), same
    assert _mixtral(tmp_path, "--moe-layer-freq '__import__(\"os\")'\n").exit_code == 2


def test_moe_layer_freq_pattern_matches_megatrons_docstring():
    """arguments.py `moe_freq_type` docstring: "([1]*3+[0]*1)*3" evaluates to
    [1,1,1,0,1,1,1,0,1,1,1,0]; "([0]+[1]*23)" is 1 dense layer then 23 expert layers."""
    from planner.check.megatron import _moe_pattern
    assert _moe_pattern("([1]*3+[0]*1)*3", 12) == (True, True, True, False) * 3
    assert _moe_pattern("([0]+[1]*23)", 24) == (False,) + (True,) * 23
    assert _moe_pattern("[1]*999999999", 3) is None       # refused before it is built


def test_ep_with_fp16_is_not_refused(tmp_path):
    """The "Expert parallelism is not supported with fp16 training." assertion the review cites
    (arguments.py at 000c4ac) was removed by Megatron-LM 4193f3aa9b ("remove fp16 assert in
    moe_grouped_gemm & EP (#2495)", 2025-12-22); d98e8a6 validate_args l. 1654-1658 asserts only
    num_experts and its divisibility by ep."""
    bf16 = json.loads(_mixtral(tmp_path, "").output)
    path = tmp_path / "fp16.txt"
    path.write_text(MIXTRAL.replace("--bf16", "--fp16"))
    fp16 = json.loads(runner.invoke(app, ["check", str(path), "-m", "mixtral-8x7b", "-c", "dgx-h100",
                                          "--gpus", "8", "--format", "json"]).output)
    assert fp16["parallelism"]["ep"] == 8 and fp16["parallelism"]["precision"] == "fp16"
    assert {v["rule"] for v in fp16["violations"] if v["severity"] == "error"} == \
        {v["rule"] for v in bf16["violations"] if v["severity"] == "error"}
