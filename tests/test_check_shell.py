"""`planner check` of launch scripts written the way Slurm launchers write them (fresh-user review 9 findings
2 and 3): `srun ... bash -c "python pretrain_gpt.py ..."` reads the command inside the `-c` string, and bash's
integer arithmetic `$((...))` of the file's own variables is the number bash computes in every reader that
reads shell (Megatron-LM scripts, torchtitan command lines, vLLM / SGLang launches); an expansion of a
variable the file does not set stays bad input naming it (exit 2). Source: bash(1) "OPTIONS" (-c),
"Arithmetic Expansion"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.check import shell
from tests.cli_run import planner

DATA = Path(__file__).resolve().parent / "data" / "configs" / "shell"


def _json(*args):
    out = planner("check", *args, "--format", "json")
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _bad_input(*args):
    out = planner("check", *args)
    assert out.returncode == 2 and out.stdout == ""
    return " ".join(out.stderr.split())


@pytest.mark.parametrize("name", ["srun_bash_c.sh", "srun_arithmetic.sh"])
def test_srun_script_with_and_without_bash_c_reads_the_same(name):
    """Both scripts: #SBATCH --nodes=4 x --ntasks-per-node=8 = 32 ranks; TP=2, PP=1, --context-parallel-size 2;
    DP=$((WORLD / TP / PP)) = 32 / 2 / 1 = 16 (bash's DP, without cp), GBS=$((DP * MBS * 4)) = 16 x 2 x 4 = 128;
    Megatron's dp = 32 / (2 x 1 x 2) = 8, micro-batches 128 / (2 x 8) = 8."""
    data = _json(str(DATA / name), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    par = data["parallelism"]
    assert data["gpus"] == 32
    assert (par["dp"], par["tp"], par["pp"], par["cp"]) == (8, 2, 1, 2)
    assert (par["micro_batch_size"], par["global_batch_size"], par["seq_len"]) == (2, 128, 16384)
    assert not [v for v in data["violations"] if v["severity"] == "error"], data["violations"]


def test_single_quoted_bash_lc_with_torchrun_inside(tmp_path):
    """`srun bash -lc '...'` with torchrun inside: torchrun's 8 per node x 2 nodes give the 16 ranks (srun's
    tasks do not: torchrun starts the ranks), the flags inside the string are Megatron's."""
    path = tmp_path / "train.sh"
    path.write_text("#!/bin/bash\nTP=4\nsrun --nodes=2 --ntasks-per-node=1 bash -lc 'torchrun --nproc_per_node 8 "
                    "--nnodes 2 pretrain_gpt.py --tensor-model-parallel-size $TP --sequence-parallel "
                    "--micro-batch-size 1 --global-batch-size $((4 * 16)) --seq-length 8192 --bf16 "
                    "--use-distributed-optimizer'\n")
    par = _json(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")["parallelism"]
    assert (par["dp"], par["tp"], par["global_batch_size"]) == (4, 4, 64)   # 16 / 4 = 4; 4 x 16 = 64


def test_unknown_flag_inside_bash_c_is_found(tmp_path):
    """A misspelled flag inside the `-c` string is Megatron's argparse error like one outside it."""
    path = tmp_path / "train.sh"
    path.write_text('srun --ntasks 8 bash -c "python pretrain_gpt.py --tensor-model-parallel-size 2 '
                    '--micro-batch-size 1 --global-batch-size 16 --seq-length 4096 --bf16 --use-flash-atention"\n')
    data = _json(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert data["gpus"] == 8   # srun --ntasks 8
    assert any(v["rule"] == "megatron_unknown_flag" and "--use-flash-atention" in v["message"]
               for v in data["violations"])


def test_flag_in_a_string_no_reader_runs_is_named_where_the_file_writes_it(tmp_path):
    """A flag Megatron asserts is set, written only inside a string this reader does not read as a command
    (here an ssh command string): the message says the file writes it and at which line, not only
    'missing' (fresh-user review 9 #2: the error blamed a flag that is in the file)."""
    path = tmp_path / "train.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 --seq-length 4096 "
                    "--global-batch-size 16 --bf16\n"
                    'ssh node2 "echo --micro-batch-size 4"\n')
    text = _bad_input(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert f"{path}: --micro-batch-size: missing" in text
    assert "the file writes --micro-batch-size at line 2, but not in the training launch" in text


def test_megatron_arithmetic_of_an_unset_variable_names_it(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text("MBS=2\ntorchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size $MBS "
                    "--global-batch-size $((MBS * NODES * 8)) --seq-length 4096 --bf16\n")
    text = _bad_input(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert (f"{path}: --global-batch-size: value '$((MBS * NODES * 8))' is a shell arithmetic expansion $((...)) of "
            "NODES, which the file does not set to an integer" in text)
    assert "set NODES in the file or write the number" in text


def test_torchtitan_command_line_arithmetic(tmp_path):
    """torchtitan: NGPU=8, NODES=2; --nnodes $((NODES)) = 2 -> 16 ranks; tp $((NGPU / 2)) = 4;
    context $((4 * 2048)) = 8192; micro-batch tokens $((2 * 8192)) = 16384 = 2 sequences of 8192."""
    path = tmp_path / "tt.sh"
    path.write_text("NGPU=8\nNODES=2\nCTX=$((4 * 2048))\n"
                    "torchrun --nproc_per_node=$NGPU --nnodes $((NODES)) -m torchtitan.train --module llama3 "
                    "--config llama3_8b --parallelism.tensor_parallel_degree $((NGPU / 2)) "
                    "--training.max_context_length $CTX "
                    "--training.num_tokens_per_microbatch_per_dp_rank $(( 2 * CTX ))\n")
    data = _json(str(path), "-c", "dgx-h100")
    par = data["parallelism"]
    assert data["gpus"] == 16
    assert (par["tp"], par["dp"], par["seq_len"], par["micro_batch_size"]) == (4, 4, 8192, 2)


def test_torchtitan_unset_variable_in_a_costed_override_names_it(tmp_path):
    path = tmp_path / "tt.sh"
    path.write_text("torchrun --nproc_per_node=8 -m torchtitan.train --module llama3 --config llama3_8b "
                    "--parallelism.tensor_parallel_degree $((GPUS / 4))\n")
    text = _bad_input(str(path), "-c", "dgx-h100")
    assert f"{path}: --parallelism.tensor_parallel_degree: value '$((GPUS / 4))'" in text
    assert "of GPUS, which the file does not set" in text


def test_engine_launch_arithmetic(tmp_path):
    """vLLM: TP=4, PP=2; --tensor-parallel-size $((TP * PP / 2)) = 4, --pipeline-parallel-size $(( PP / 2 )) = 1,
    --max-model-len $((8 * 1024)) = 8192."""
    path = tmp_path / "serve.sh"
    path.write_text("TP=4\nPP=2\nvllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size "
                    "$((TP * PP / 2)) --pipeline-parallel-size $(( PP / 2 )) --max-model-len $((8 * 1024))\n")
    out = planner("check", str(path), "-c", "dgx-h100", "--format", "json")
    assert out.returncode == 0, out.stderr
    launch = json.loads(out.stdout)["launches"][0]
    assert (launch["parallelism"]["tp"], launch["parallelism"]["pp"]) == (4, 1)
    assert launch["recomputed"]["max_model_len"] == 8192


def test_engine_launch_unset_variable_names_it(tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size $((NGPU / 2))\n")
    text = _bad_input(str(path), "-c", "dgx-h100")
    assert f"{path}: --tensor-parallel-size: value '$((NGPU / 2))'" in text and "of NGPU" in text


def test_sglang_inside_srun_bash_c(tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text('srun --nodes=1 bash -c "python -m sglang.launch_server --model-path '
                    'meta-llama/Llama-3.1-8B-Instruct --tp 2 --port 30000"\n')
    out = planner("check", str(path), "-c", "dgx-h100", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["launches"][0]["parallelism"]["tp"] == 2


@pytest.mark.parametrize("expression, env, number", [
    ("DP * MBS * 4", {"DP": "16", "MBS": "2"}, 128),
    ("(A + B) * 2", {"A": "3", "B": "1"}, 8),          # parentheses
    ("$WORLD / 3", {"WORLD": "32"}, 10),               # `$NAME` inside; integer division
    ("7 % 4 - -1", {}, 4),
    ("X * 2", {"X": "abc"}, None),                     # not an integer
    ("A / 0", {"A": "1"}, None),                        # bash: division by 0 is an error
    ("A ** 2", {"A": "3"}, None),                       # not an operator evaluated here
    ("$1 * 8", {}, None),                               # a script argument: not the number 1
])
def test_arithmetic_hand_values(expression, env, number):
    assert shell.arithmetic(expression, env) == number


def test_unwrap_and_commands():
    assert shell.unwrap(["srun", "-N2", "/bin/bash", "-ec", "python x.py --a 1 # c"], "f") == \
        ["srun", "-N2", "python", "x.py", "--a", "1"]
    assert shell.unwrap(["bash", "run.sh"], "f") == ["bash", "run.sh"]   # a script, not -c
    assert shell.commands('a "b\nc" \\\nd\ne') == [(1, 'a "b c"  d'), (4, "e")]


def test_router_urls_with_arithmetic(tmp_path):
    """A vLLM router's worker URLs through the script's arithmetic: BASE=8000, $((BASE + 7)) = 8007 names the
    decode worker on port 8007 (the file passes); $((BASE + 9)) = 8009 names none (router_worker_unknown)."""
    path = DATA / "router_arithmetic.sh"
    assert planner("check", str(path), "-c", "dgx-h100").returncode == 0
    wrong = tmp_path / "wrong.sh"
    wrong.write_text(path.read_text().replace("$((BASE + 7))", "$((BASE + 9))"))
    out = planner("check", str(wrong), "-c", "dgx-h100", "--format", "json")
    assert any(v["rule"] == "router_worker_unknown" and "http://127.0.0.1:8009" in v["message"]
               for v in json.loads(out.stdout)["violations"])


def test_gpus_required_names_both_launchers(tmp_path):
    """srun's node count from the job's environment (no literal): the world size is --gpus's, and the message
    names both ways the file could give it (fresh-user review 9 #2: it named torchrun only)."""
    path = tmp_path / "train.sh"
    path.write_text('srun --nodes $SLURM_NNODES --ntasks-per-node 8 bash -c "python pretrain_gpt.py '
                    '--micro-batch-size 1 --global-batch-size 16 --seq-length 4096 --bf16"\n')
    text = _bad_input(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert ("--gpus: --gpus is required: the file has no torchrun --nproc_per_node / --nnodes, nor an srun launch "
            "with literal --ntasks or --nodes x --ntasks-per-node (#SBATCH lines give their defaults)") in text
