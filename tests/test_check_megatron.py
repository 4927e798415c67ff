"""`planner check` on Megatron-LM launch scripts and arguments files (planner/check/megatron.py).

Fixtures mirror Megatron-LM's own example scripts (tests/data/configs/megatron/*.sh, each says
which); variants are made here by editing one line of the script's text. Expected values come from
the scripts' numbers and the arithmetic written beside each assertion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check.megatron import parse_args
from planner.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "configs" / "megatron"
LLAMA = DATA / "llama3_8b_h100_fp8.sh"
GPT3 = DATA / "gpt3_175b_distributed.sh"
LLAMA_8B_PARAMS = 8_030_261_248
"""Llama 3.1 8B parameters (Hugging Face model card / safetensors total)."""


def _check(path, *extra, fmt="json"):
    return runner.invoke(app, ["check", str(path), *extra, "--format", fmt])


def _variant(tmp_path, source: Path, *edits: tuple[str, str], name="variant.sh") -> Path:
    """`source` with each (old, new) text replaced once (each old must occur)."""
    text = source.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


def _llama(tmp_path, *edits, tp=2):
    """The llama3-8b script at TP_SIZE=tp (the script's own comment: SP 'with TP_SIZE=2')."""
    return _variant(tmp_path, LLAMA, ("TP_SIZE=1", f"TP_SIZE={tp}"), *edits)


def _data(result):
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


def _bad_input(result, *words):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _rules(data, severity="error"):
    return {v["rule"]: v for v in data["violations"] if v["severity"] == severity}


# ---------------------------------------------------------------- valid configs

def test_llama3_8b_script_at_tp2_passes_with_the_scripts_layout(tmp_path):
    """8 GPUs (torchrun 8 per node x 1 node) / (tp 2 x pp 1 x cp 1) = dp 4; 128 sequences /
    (dp 4 x micro-batch 1) = 32 micro-batches; FP8 hybrid; distributed optimizer = ZeRO-1."""
    data = _data(_check(_llama(tmp_path), "--cluster", "dgx-h100"))
    assert data["verdict"] == "pass" and data["kind"] == "megatron-args", data["violations"]
    assert data["gpus"] == 8
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["pp"], par["cp"], par["ep"], par["etp"]) == (4, 2, 1, 1, 1, 1)
    assert par["zero_stage"] == 1 and par["sequence_parallel"] is True
    assert (par["micro_batch_size"], par["global_batch_size"], par["num_microbatches"]) == (1, 128, 32)
    assert par["seq_len"] == 8192 and par["precision"] == "fp8"
    assert par["optimizer"] == "adamw" and par["framework"] == "megatron"
    assert par["recompute"] == "none" and par["vpp"] == 1 and par["pipeline_layers"] is None
    assert [row["layers"] for row in data["stages"]] == [32]


def test_model_from_the_script_equals_the_catalog_llama_3_1_8b(tmp_path):
    """The script's architecture flags (32 layers, 4096 hidden, 14336 FFN, 32 heads, 8 query
    groups, vocab 128256, untied) are Llama 3.1 8B: the same memory as with --model."""
    path = _llama(tmp_path)
    own = _data(_check(path, "--cluster", "dgx-h100"))
    named = _data(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b"))
    assert named["verdict"] == "pass" and named["model"] == "llama-3.1-8b"
    assert own["memory_bytes"] == named["memory_bytes"]
    # the script's --fp8-param-gather: the TE linear weights (all but the two 128,256 x 4096
    # vocabulary matrices and the 2 x 32 + 1 RMSNorm weights of 4096) are fp8 parameters, 1 B in
    # Megatron's uint8 buffer, split over tp 2; the vocabulary bf16 (2 B) split over tp 2; the norms
    # bf16 replicated on both ranks (their transposes: a term of their own, below)
    norms, vocab = (2 * 32 + 1) * 4096, 2 * 128_256 * 4096
    linear = LLAMA_8B_PARAMS - norms - vocab
    assert own["memory_bytes"]["parameters"] == 1 * linear // 2 + 2 * vocab // 2 + 2 * norms == 4_540_866_560


def test_table_output_starts_with_pass(tmp_path):
    result = _check(_llama(tmp_path), "--cluster", "dgx-h100", fmt="table")
    assert result.exit_code == 0 and result.output.startswith("PASS")


def test_arguments_file_with_equals_form_and_gpus_option(tmp_path):
    """A bare arguments file (no torchrun): the GPU count comes from --gpus, the model from --model;
    16 GPUs / (tp 4 x pp 2) = dp 2; global batch 64 / (2 x 2) = 16 micro-batches."""
    path = tmp_path / "args.txt"
    path.write_text("--tensor-model-parallel-size=4 --pipeline-model-parallel-size=2\n"
                    "--micro-batch-size=2 --global-batch-size=64 --seq-length=4096 --bf16\n"
                    "--use-distributed-optimizer --sequence-parallel\n"
                    "--recompute-activations  # deprecated alias of --recompute-granularity selective\n")
    data = _data(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b", "--gpus", "16"))
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["pp"], par["num_microbatches"]) == (2, 4, 2, 16)
    assert par["recompute"] == "selective" and par["precision"] == "bf16"
    assert data["verdict"] == "pass", data["violations"]


def test_parse_args_reads_variables_quoted_pairs_and_continuations():
    text = ('TP=4\nexport X=${UNSET:-7}\nARGS=(\n "--fp8-format hybrid"  # comment\n)\n'
            'torchrun --nproc_per_node $TP pretrain_gpt.py \\\n  --tensor-model-parallel-size ${TP} '
            '--context-parallel-size $X --lr 1e-4 --seq-length=2048 --bf16 --data-path /d/x')
    assert parse_args(text, "t.sh") == {
        "--fp8-format": "hybrid", "--nproc_per_node": "4", "--tensor-model-parallel-size": "4",
        "--context-parallel-size": "7", "--seq-length": "2048", "--bf16": True}


# ---------------------------------------------------------------- memory

def test_llama3_8b_script_states_and_its_fit():
    """TP1 on 8 GPUs: every GPU holds all 8.03e9 parameters: the script's --fp8-param-gather keeps
    the 6.98e9 TE linear weights in fp8, 1 B, and the two vocabulary matrices and the norms bf16,
    2 B; the script's --grad-reduce-in-bf16 makes the gradient buffer bf16, 2 B (14.96 GiB), and
    the distributed optimizer then keeps fp32 master 4 + an fp32 copy of its gradient shard 4 +
    Adam m, v 8 = 16 B sharded over dp=8 (14.96 GiB) (Megatron-LM param_and_grad_buffer.py l. 924,
    DistributedOptimizer `main_grad.float()`), which exists only at the optimizer step: 12 B
    resident. The published script itself: test_megatron_fp8_example.py."""
    result = _check(LLAMA, "--cluster", "dgx-h100")
    assert result.exit_code == 0
    data = _data(result)
    mem = data["memory_bytes"]
    vocab, norms = 2 * 128_256 * 4096, (2 * 32 + 1) * 4096
    assert mem["parameters"] == 1 * LLAMA_8B_PARAMS + vocab + norms  # 1 B each + 1 B more for the 16-bit ones
    assert mem["gradients"] == pytest.approx(2 * LLAMA_8B_PARAMS, rel=1e-6)
    assert mem["optimizer_states"] == pytest.approx(12 * LLAMA_8B_PARAMS / 8, rel=1e-6)
    assert data["memory_verdict"] == "at_risk" and "memory_exceeds" not in _rules(data)
    assert data["parallelism"]["dp"] == 8 and data["parallelism"]["tp"] == 1


def test_gpt3_175b_script_reads_torchrun_world_and_stage_0_is_at_risk():
    """torchrun 8 per node x 16 nodes = 128 GPUs = tp 8 x pp 16 x dp 1; fp16, Adam without the
    distributed optimizer (ZeRO-0); no recompute: stage 0 holds pp = 16 micro-batches in flight.
    Its optimizer keeps fp32 master + m + v (12 B/param); the fp32 copy of the fp16 gradients
    (4 B/param) exists only from the optimizer step to the next zero_grad (Megatron-LM
    optimizer.py l. 1048-1061, 1092-1100 @d98e8a6), never beside the 16 micro-batches' activations."""
    result = _check(GPT3, "--cluster", "dgx-h100", "--model", "gpt-3-175b")
    data = _data(result)
    assert result.exit_code == 0 and data["gpus"] == 128
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["pp"], par["zero_stage"]) == (1, 8, 16, 0)
    assert par["precision"] == "fp16" and par["global_batch_size"] == 1536
    assert [row["layers"] for row in data["stages"]] == [6] * 16  # 96 / 16
    assert data["stages"][0]["verdict"] == "at_risk" and data["stages"][1]["verdict"] == "fits"
    stage0 = data["stages"][0]["memory_bytes"]
    # ZeRO-0: every state holds the stage's same parameters; fp16 2 B vs optimizer 12 B
    assert stage0["optimizer_states"] == pytest.approx(12 / 2 * stage0["parameters"], rel=1e-9)


# ---------------------------------------------------------------- consistency findings

def test_world_not_divisible_by_model_parallel_size(tmp_path):
    """FC-13: 128 GPUs over tp 8 x pp 12 = 96: Megatron asserts world % (tp*pp*cp) == 0."""
    path = _variant(tmp_path, GPT3, ("--pipeline-model-parallel-size 16",
                                     "--pipeline-model-parallel-size 12"))
    result = _check(path, "--cluster", "dgx-h100", "--model", "gpt-3-175b")
    assert result.exit_code == 1
    data = _data(result)
    v = _rules(data)["world_size"]
    assert "128" in v["message"] and "96" in v["message"]
    # the reader's finding replaces the gate's rule of the same name (one report, not two)
    assert [x["rule"] for x in data["violations"]].count("world_size") == 1


def test_global_batch_not_divisible_by_micro_batch_times_dp(tmp_path):
    """126 sequences over dp 4 x micro-batch 1 = 4 (num_microbatches_calculator asserts)."""
    path = _llama(tmp_path, ("GLOBAL_BATCH_SIZE=128", "GLOBAL_BATCH_SIZE=126"))
    result = _check(path, "--cluster", "dgx-h100")
    assert result.exit_code == 1
    v = _rules(_data(result))["batch_divisible"]
    assert "126" in v["message"] and "= 4" in v["message"]


def test_seq_length_beyond_max_position_embeddings(tmp_path):
    path = _llama(tmp_path, ("SEQ_LENGTH=8192", "SEQ_LENGTH=16384"))
    result = _check(path, "--cluster", "dgx-h100")
    assert result.exit_code == 1
    v = _rules(_data(result))["seq_length_exceeds_positions"]
    assert "16384" in v["message"] and "8192" in v["message"]


@pytest.mark.parametrize("flags, words", [
    ("--recompute-granularity full", ["full", "--recompute-method"]),
    ("--recompute-granularity full --recompute-method block", ["--recompute-num-layers"]),
    ("--recompute-granularity selective --recompute-method uniform", ["selective", "uniform"]),
    ("--recompute-granularity selective --recompute-num-layers 2", ["selective", "2"]),
])
def test_recompute_flag_combinations_megatron_rejects(tmp_path, flags, words):
    path = _llama(tmp_path, ("--disable-bias-linear", f"--disable-bias-linear {flags}"))
    result = _check(path, "--cluster", "dgx-h100")
    assert result.exit_code == 1
    v = _rules(_data(result))["recompute_args"]
    for word in words:
        assert word in v["message"]


def test_block_recompute_counts_per_stage(tmp_path):
    """pp 2 over 32 layers = 16 per stage; block with 5: the first 5 of each stage full, 11 none."""
    path = _llama(tmp_path, ("--disable-bias-linear", "--disable-bias-linear "
                             "--pipeline-model-parallel-size 2 --recompute-granularity full "
                             "--recompute-method block --recompute-num-layers 5"))
    data = _data(_check(path, "--cluster", "dgx-h100"))
    assert data["parallelism"]["dp"] == 2  # 8 / (tp 2 x pp 2)
    assert [row["recompute"] for row in data["stages"]] == [
        {"none": 11, "selective": 0, "full": 5}] * 2


def test_block_recompute_with_virtual_stages_counts_each_chunk(tmp_path):
    """vpp 2: each stage's 16 layers are 2 chunks of 8; block 5 recomputes 5 per chunk = 10."""
    path = _llama(tmp_path, ("--disable-bias-linear", "--disable-bias-linear "
                             "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                             "--recompute-granularity full --recompute-method block "
                             "--recompute-num-layers 5"))
    data = _data(_check(path, "--cluster", "dgx-h100"))
    assert data["parallelism"]["vpp"] == 2
    assert [row["recompute"]["full"] for row in data["stages"]] == [10, 10]


def test_uniform_full_recompute_is_every_layer(tmp_path):
    path = _llama(tmp_path, ("--disable-bias-linear", "--disable-bias-linear "
                             "--recompute-granularity full --recompute-method uniform "
                             "--recompute-num-layers 1"))
    data = _data(_check(path, "--cluster", "dgx-h100"))
    assert data["parallelism"]["recompute"] == "full"
    assert data["stages"][0]["recompute"] == {"none": 0, "selective": 0, "full": 32}


def test_uneven_first_and_last_stage(tmp_path):
    """pp 4 over 32 layers with 6 on the first and last stage: (32 - 12) / 2 middle = 10 each."""
    path = _llama(tmp_path, ("--disable-bias-linear", "--disable-bias-linear "
                             "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                             "--decoder-last-pipeline-num-layers 6"), tp=1)
    data = _data(_check(path, "--cluster", "dgx-h100"))
    assert data["parallelism"]["pipeline_layers"] == [6, 10, 10, 6]
    assert [row["layers"] for row in data["stages"]] == [6, 10, 10, 6]


def test_uneven_middle_layers_not_divisible(tmp_path):
    """32 - 7 - 6 = 19 layers over 2 middle stages: Megatron raises."""
    path = _llama(tmp_path, ("--disable-bias-linear", "--disable-bias-linear "
                             "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 7 "
                             "--decoder-last-pipeline-num-layers 6"), tp=1)
    result = _check(path, "--cluster", "dgx-h100")
    assert result.exit_code == 1
    v = _rules(_data(result))["uneven_pipeline"]
    assert "19" in v["message"] and "2 middle stages" in v["message"]


@pytest.mark.parametrize("flags, rule, words, fix", [
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4 "
     "--num-virtual-stages-per-pipeline-rank 2", "virtual_pipeline_args", ["4", "2", "both"],
     "give only --num-virtual-stages-per-pipeline-rank 2"),
    # 32 / 2 = 16 layers per stage, not a multiple of 5; the fix: the least equal interleaving,
    # 32 % (2 x 2) == 0, 8 layers per virtual stage (fresh-user review: the fix gave no value)
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 5",
     "virtual_pipeline_args", ["16", "5"], "--num-virtual-stages-per-pipeline-rank 2 (8 layers"),
    ("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
     "--no-overlap-p2p-communication", "interleaved_pp_needs_overlap", ["vpp=2", "pp=2"], "pp >= 3"),
])
def test_virtual_pipeline_flags_megatron_rejects(tmp_path, flags, rule, words, fix):
    path = _llama(tmp_path, ("--disable-bias-linear", f"--disable-bias-linear {flags}"))
    result = _check(path, "--cluster", "dgx-h100")
    assert result.exit_code == 1
    v = _rules(_data(result))[rule]
    for word in words:
        assert word in v["message"]
    assert fix in v["fix"]


def test_layers_per_virtual_stage_gives_vpp(tmp_path):
    """32 layers / pp 2 = 16 per stage; 4 per virtual stage -> vpp 4."""
    path = _llama(tmp_path, ("--disable-bias-linear", "--disable-bias-linear "
                             "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4"))
    data = _data(_check(path, "--cluster", "dgx-h100"))
    assert data["parallelism"]["vpp"] == 4


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("old, new, key", [
    ("MICRO_BATCH_SIZE=1", "MICRO_BATCH_SIZE=two", "--micro-batch-size"),
    ("--normalization RMSNorm", "--normalization RMSNorm --recompute-granularity partial",
     "--recompute-granularity"),
    ("--clip-grad 1.0", "--clip-grad 1.0 --optimizer muon", "--optimizer"),
    ("--tensor-model-parallel-size $TP_SIZE", "--tensor-model-parallel-size $TP", "--tensor-model-parallel-size"),
    ("--bf16", "--bf16 --fp16", "--fp16"),
    ("--sequence-parallel", "--sequence-parallel=yes", "--sequence-parallel"),
])
def test_malformed_values_name_file_and_flag(tmp_path, old, new, key):
    path = _llama(tmp_path, (old, new))
    line = _bad_input(_check(path, "--cluster", "dgx-h100"), str(path), key)
    assert "Traceback" not in line


def test_flag_without_value_and_unbalanced_quote(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("--bf16 --seq-length 2048 --micro-batch-size\n")
    _bad_input(_check(path, "--cluster", "dgx-h100", "--gpus", "8", "--model", "llama-3.1-8b"),
               str(path), "--micro-batch-size", "missing value")
    path.write_text('--bf16 --micro-batch-size "1\n')
    _bad_input(_check(path, "--cluster", "dgx-h100", "--gpus", "8", "--model", "llama-3.1-8b"),
               str(path), "syntax")


def test_missing_options_are_named(tmp_path):
    _bad_input(_check(LLAMA), "--cluster")
    _bad_input(_check(GPT3, "--cluster", "dgx-h100"), "--model", "--vocab-size")
    path = tmp_path / "args.txt"
    path.write_text("--micro-batch-size 1 --bf16\n")
    _bad_input(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b"), "--gpus")
    _bad_input(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b", "--gpus", "8"),
               "--seq-len")


def test_options_that_contradict_the_file(tmp_path):
    _bad_input(_check(LLAMA, "--cluster", "dgx-h100", "--gpus", "16"), "--gpus", "16", "8")
    _bad_input(_check(LLAMA, "--cluster", "dgx-h100", "--seq-len", "4096"), "4096", "8192")
    # Llama 3.1 70B has 80 layers; the script builds 32
    _bad_input(_check(LLAMA, "--cluster", "dgx-h100", "--model", "llama-3.1-70b"),
               "--num-layers", "32", "80")


def test_model_disagreeing_on_kv_heads_or_derived_ffn(tmp_path):
    """Without --group-query-attention Megatron builds 32 KV heads (Llama 3.1 8B has 8); without
    --ffn-hidden-size and with --swiglu it builds int(4 x 4096 x 2/3 / 64) x 64 = 10880 (not 14336)."""
    path = _llama(tmp_path, ("    --group-query-attention\n", ""))
    _bad_input(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b"),
               "--group-query-attention", "num_key_value_heads=32", "8")
    path = _llama(tmp_path, ("    --ffn-hidden-size 14336\n", ""))
    _bad_input(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b"),
               "--ffn-hidden-size", "10880", "14336")


def test_moe_expert_degrees_and_expert_tp_default(tmp_path):
    """Mixtral 8x7B (8 experts) on 16 GPUs, tp 2 x ep 4: dp 8; etp defaults to tp = 2 for an MoE
    model (validate_args); ep x etp = 8 divides dp x cp x tp = 16. A dense model keeps etp 1."""
    path = tmp_path / "moe.txt"
    path.write_text("--tensor-model-parallel-size 2 --expert-model-parallel-size 4 --num-experts 8 "
                    "--micro-batch-size 1 --global-batch-size 256 --seq-length 4096 --bf16 "
                    "--use-distributed-optimizer --sequence-parallel --recompute-granularity full "
                    "--recompute-method uniform --recompute-num-layers 1\n")
    data = _data(_check(path, "--cluster", "dgx-h100", "--model", "mixtral-8x7b", "--gpus", "16"))
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["ep"], par["etp"]) == (8, 2, 4, 2)
    # Qwen3-30B-A3B has 128 routed experts, not the file's 8
    _bad_input(_check(path, "--cluster", "dgx-h100", "--model", "qwen3-30b-a3b", "--gpus", "16"),
               "--num-experts", "num_experts=8", "128")
    path.write_text(path.read_text().replace("--num-experts 8 ", ""))
    dense = _data(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b", "--gpus", "16"))
    assert dense["parallelism"]["etp"] == 1


@pytest.mark.parametrize("expr, number", [
    ("$((MICRO_BATCH_SIZE*64))", 64),               # MICRO_BATCH_SIZE=1 in the script: 1 x 64
    ("$(( MICRO_BATCH_SIZE * 64 / 4 ))", 16),       # 1 x 64 / 4 = 16 (bash integer division)
])
def test_arithmetic_expansion_of_the_files_integers_is_evaluated(tmp_path, expr, number):
    """bash(1) Arithmetic Expansion: `$((...))` of the file's own integer variables is the number bash computes
    (fresh-user review 9: `GBS=$((DP * MBS * 4))` is how Slurm launchers write batch sizes)."""
    path = _llama(tmp_path, ("--global-batch-size $GLOBAL_BATCH_SIZE", f"--global-batch-size {expr}"))
    assert _data(_check(path, "--cluster", "dgx-h100"))["parallelism"]["global_batch_size"] == number


def test_arithmetic_expansion_of_an_unset_variable_is_named(tmp_path):
    path = _llama(tmp_path, ("--global-batch-size $GLOBAL_BATCH_SIZE", "--global-batch-size $((NODES*64))"))
    line = _bad_input(_check(path, "--cluster", "dgx-h100"), str(path), "--global-batch-size",
                      "arithmetic expansion $((...))", "not evaluate", "write the number")
    assert "shell variable the file does not set" not in line


def test_command_substitution_is_named(tmp_path):
    path = _llama(tmp_path, ("--global-batch-size $GLOBAL_BATCH_SIZE", "--global-batch-size $(nproc)"))
    line = _bad_input(_check(path, "--cluster", "dgx-h100"), "--global-batch-size",
                      "command substitution")
    assert "shell variable" not in line


def test_torchrun_world_size_the_cluster_refuses_names_the_script(tmp_path):
    """GPUS_PER_NODE=6 -> torchrun --nproc_per_node 6 x --nnodes 2 = 12 GPUs, neither part of one
    8-GPU dgx-h100 node nor whole nodes: the error names the script and its torchrun flags (no
    --gpus was passed)."""
    path = _llama(tmp_path, ("GPUS_PER_NODE=8", "GPUS_PER_NODE=6"), ("NUM_NODES=1", "NUM_NODES=2"))
    line = _bad_input(_check(path, "--cluster", "dgx-h100"), str(path), "--nproc_per_node 6",
                      "--nnodes 2", "world size 12", "1..7 or a multiple of 8")
    assert line.startswith(f"error: {path}")


def test_rotary_base_differing_from_the_model_is_a_warning(tmp_path):
    """Megatron-LM's llama3 example sets --rotary-base 1000000; Llama 3.1 8B has rope_theta 500000
    (config.json): a warning, not a failure. 500000 matches; the script's own model takes its
    --rotary-base as rope_theta."""
    data = _data(_check(_llama(tmp_path), "--cluster", "dgx-h100", "--model", "llama-3.1-8b"))
    warning = _rules(data, "warning")["megatron_rotary_base"]
    assert "--rotary-base 1000000" in warning["message"] and "rope_theta=500000" in warning["message"]
    assert warning["fix"] == "set --rotary-base 500000"
    path = _llama(tmp_path, ("--rotary-base 1000000", "--rotary-base 500000"))
    data = _data(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b"))
    assert "megatron_rotary_base" not in _rules(data, "warning")
    assert "megatron_rotary_base" not in _rules(_data(_check(_llama(tmp_path), "--cluster",
                                                             "dgx-h100")), "warning")


def test_misspelled_flag_is_an_error_naming_the_flag_it_resembles(tmp_path):
    """Fresh-user defect: `--sequence-paralel` was dropped silently (the stages moved to at risk).
    Megatron-LM's argparse exits on it; here it is an error naming --sequence-parallel. A flag in
    a comment is not an argument."""
    text = LLAMA.read_text().replace("--sequence-parallel", "--sequence-paralel") + "\n# --frobnicate 3\n"
    path = tmp_path / "typo.sh"
    path.write_text(text)
    result = _check(path, "--cluster", "dgx-h100")
    assert result.exit_code == 1, result.output
    errors = _rules(_data(result))
    assert "did you mean --sequence-parallel?" in errors["megatron_unknown_flag"]["message"]
    assert "frobnicate" not in result.output


_STRING_SCRIPT = """#!/bin/bash
GPUS_PER_NODE=4
NNODES=2
DISTRIBUTED_ARGS="
    --nproc_per_node $GPUS_PER_NODE \\
    --nnodes $NNODES \\
    --master_addr localhost \\
    --master_port 6000
"
GPT_ARGS="
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2 \\
    --micro-batch-size 1 \\
    --global-batch-size 32
    --seq-length 4096
    --bf16
"
DATA_ARGS="--data-path /data/x_text_document --split 949,50,1"
PIP_ARGS="--upgrade"
pip install $PIP_ARGS regex

torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS $DATA_ARGS
"""
"""The string-variable pattern of Megatron-LM's older examples (`examples/pretrain_gpt_distributed.sh`
style): flags in quoted multi-line strings, lines with and without a trailing backslash, expanded
unquoted on the torchrun line."""


def test_multi_line_string_variables_are_word_split_as_bash_does(tmp_path):
    """Fresh-user defect: `GPT_ARGS="<newline> --micro-batch-size 1 ..."` was one word, so
    --micro-batch-size was "missing" and `torchrun $DISTRIBUTED_ARGS` gave no world size. bash splits
    an unquoted `$GPT_ARGS` at spaces and newlines: torchrun 4 per node x 2 nodes = 8 GPUs;
    8 / (tp 2 x pp 2) = dp 2; 32 sequences / (micro-batch 1 x dp 2) = 16 micro-batches."""
    path = tmp_path / "train.sh"
    path.write_text(_STRING_SCRIPT)
    data = _data(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b"))
    assert data["gpus"] == 8
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["pp"]) == (2, 2, 2)
    assert (par["micro_batch_size"], par["global_batch_size"], par["num_microbatches"]) == (1, 32, 16)
    assert par["seq_len"] == 4096 and par["precision"] == "bf16"
    assert "megatron_unknown_flag" not in _rules(data), "pip's --upgrade is not Megatron's"


def test_parse_args_splits_a_string_variable_but_not_its_assignment():
    text = 'A="\n  --num-layers 4 \\\n  --hidden-size 64\n"\nB=$A\npython pretrain_gpt.py $B'
    assert parse_args(text, "t.sh") == {"--num-layers": "4", "--hidden-size": "64"}


def test_misspelled_flag_inside_a_string_variable_is_an_error(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(_STRING_SCRIPT.replace("    --bf16\n", "    --bf16\n    --sequence-paralel\n"))
    errors = _rules(_data(_check(path, "--cluster", "dgx-h100", "--model", "llama-3.1-8b")))
    assert "did you mean --sequence-parallel?" in errors["megatron_unknown_flag"]["message"]


def test_current_torchrun_flags_are_not_unknown_megatron_flags(tmp_path):
    """torchrun's --signals-to-handle and --event-log-handler (PyTorch torch/distributed/run.py
    `get_args_parser` @010929fd) belong to the launcher, not to Megatron-LM's parser."""
    path = _variant(tmp_path, LLAMA, ("--nnodes $NUM_NODES",
                                      "--nnodes $NUM_NODES --signals-to-handle SIGTERM,SIGUSR1 "
                                      "--event-log-handler null"))
    rules = _rules(_data(_check(path, "--cluster", "dgx-h100")))
    assert "megatron_unknown_flag" not in rules
    typo = _variant(tmp_path, LLAMA, ("--nnodes $NUM_NODES", "--nnodes $NUM_NODES --signal-to-handle X"),
                    name="typo.sh")
    assert "megatron_unknown_flag" in _rules(_data(_check(typo, "--cluster", "dgx-h100")))


def test_microbatch_group_size_is_read_and_keeps_more_in_flight(tmp_path):
    """GPT-3 175B script (tp 8, pp 16, 128 GPUs: dp 1, m = 1536) made interleaved with 3 layers per
    virtual stage (96 / 16 / 3 = vpp 2), then with `--microbatch-group-size-per-virtual-pipeline-stage
    32`: rank 0 holds warm-up + 1 = (16 − 1)·2 + (2 − 1)·N + 1 chunks of 1/2 stage, N = 16 (Megatron's
    default, pp) -> 47 / 2 = 23.5 stages, N = 32 -> 63 / 2 = 31.5 (schedules.py
    get_pp_rank_microbatches)."""
    from planner.check.megatron import read
    from planner.cost.memory import in_flight_microbatches

    interleaved = ("--pipeline-model-parallel-size 16",
                   "--pipeline-model-parallel-size 16 --num-layers-per-virtual-pipeline-stage 3")
    flights = []
    for extra in ("", " --microbatch-group-size-per-virtual-pipeline-stage 32"):
        path = _variant(tmp_path, GPT3, (interleaved[0], interleaved[1] + extra))
        layout = read(path, model="gpt-3-175b", cluster="dgx-h100", gpus=None, seq_len=None).layout
        assert layout.vpp == 2 and layout.num_microbatches == 1536
        assert layout.microbatch_group_size == (32 if extra else None)
        flights.append(in_flight_microbatches(layout, 0))
    assert flights == [47 / 2, 63 / 2]
    # a group below pp is the schedule's ValueError, as a rule naming the flag's knob
    path = _variant(tmp_path, GPT3, (interleaved[0], interleaved[1]
                                     + " --microbatch-group-size-per-virtual-pipeline-stage 8"))
    data = _data(_check(path, "--cluster", "dgx-h100", "--model", "gpt-3-175b"))
    assert "microbatch_group_size" in {v["rule"] for v in data["violations"] if v["severity"] == "error"}


def test_every_bad_value_and_unknown_flag_in_one_error(tmp_path):
    """Fresh-user review 8 #19: `--recompute-granularity ful` stopped the file, so a second bad value and a
    misspelled flag surfaced only on the next CI run. One run now names all three, one line each (exit 2)."""
    from tests.cli_run import planner

    path = tmp_path / "train.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 8 "
                    "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 "
                    "--recompute-granularity ful --overlap-grad-reduc --pipeline-model-parallel-size x2\n")
    out = planner("check", str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8")
    assert out.returncode == 2
    text = " ".join(out.stderr.split())
    assert len(out.stderr.splitlines()) == text.count("error:") == 2   # one line each, the unknown flag on the last
    for part in ("--recompute-granularity: value 'ful' not allowed; allowed: full, selective",
                 "--pipeline-model-parallel-size: value 'x2' must be an integer >= 1",
                 "also --overlap-grad-reduc is not a Megatron-LM flag; did you mean --overlap-grad-reduce?"):
        assert part in text
