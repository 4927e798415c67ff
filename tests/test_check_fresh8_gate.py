"""`planner check` as a CI gate, the findings of fresh-user review 8 (/work/notes/review-fresh8.md):
huge engine lengths are bad input (#1), srun's options are srun's (#3), docker replicas on their own GPUs and
host ports do not collide (#4), CRLF engine scripts fail as Megatron scripts do (#5), torchtitan command lines
expand shell variables (#7), and the memory fix offers ZeRO-1 when dp=1 and cp>1 (#8).

Every expected value is written here from the tools' documentation (srun(1), `docker run`), bash(1), or
hand arithmetic in the test; none is copied from the planner's output."""

from __future__ import annotations

import json

import pytest

from tests.cli_run import planner


def _check(path, *options: str):
    """(exit code, JSON report or None, stderr) of `planner check PATH OPTIONS --format json`."""
    run = planner("check", str(path), *options, "--format", "json")
    report = json.loads(run.stdout) if run.stdout.strip().startswith("{") else None
    return run.returncode, report, run.stderr + run.stdout


def _rules(report: dict) -> list[str]:
    return [v["rule"] for v in report["violations"]]


# ---------------------------------------------------------------- #1 huge context lengths

@pytest.mark.parametrize("command, flag", [
    ("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len {}", "--max-model-len"),
    ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --context-length {}",
     "--context-length"),
])
def test_a_320_digit_context_length_is_one_line_of_bad_input(tmp_path, command, flag):
    """A 320-digit length overflowed float arithmetic (a traceback); a 25-digit one is beyond the 2**24 =
    16,777,216 tokens `planner plan --seq-len` accepts: both exit 2 naming the flag, the value shortened
    (first 60 characters and the length: 322 with the quotes)."""
    for digits in (320, 25):
        path = tmp_path / f"launch{digits}.sh"
        path.write_text(command.format("9" * digits) + "\n")
        code, _, text = _check(path, "-c", "dgx-h100")
        assert code == 2, text
        assert flag in text and "16,777,216" in text and "Traceback" not in text
        assert ("(322 characters)" in text) == (digits == 320), text


def test_a_length_within_the_limit_is_still_checked(tmp_path):
    """16,777,216 itself is accepted: the check runs (the KV cache of one such sequence of Llama 3.1 8B is
    16,777,216 x 128 KiB = 2 TiB, so the verdict is a FAIL, exit 1, not bad input)."""
    path = tmp_path / "edge.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16777216\n")
    code, report, text = _check(path, "-c", "dgx-h100")
    assert code == 1, text
    assert report["verdict"] == "fail"


# ---------------------------------------------------------------- #3 srun launches

_ARGS = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
         "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --max-position-embeddings 131072 "
         "--micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 2 --bf16 "
         "--use-distributed-optimizer --sequence-parallel --recompute-granularity selective")


def test_srun_options_are_not_megatron_flags(tmp_path):
    """`srun --container-image ... --ntasks-per-node ... --cpu-bind ... python pretrain_gpt.py ARGS`: the
    options before the training script are srun's (pyxis' --container-image), not Megatron-LM's arguments."""
    path = tmp_path / "pretrain_slurm.sh"
    path.write_text("srun --container-image nvcr.io/nvidia/nemo:25.04 --gpus-per-node=8 --cpu-bind=none \\\n"
                    f"  python pretrain_gpt.py {_ARGS}\n")
    code, report, text = _check(path, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "16")
    assert report is not None, text
    assert "megatron_unknown_flag" not in _rules(report), text
    misspelled = tmp_path / "typo.sh"
    misspelled.write_text(f"srun --cpu-bind=none python pretrain_gpt.py {_ARGS} --overlap-grad-reduc\n")
    _, report, text = _check(misspelled, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "16")
    assert [v["message"].split()[0] for v in report["violations"] if v["rule"] == "megatron_unknown_flag"] \
        == ["--overlap-grad-reduc"], text


def test_srun_tasks_give_the_world_size(tmp_path):
    """srun(1): one rank per task, --nodes 2 x --ntasks-per-node 8 = 16 ranks; `#SBATCH` lines give srun's
    defaults (sbatch(1)); --gpus that disagrees is bad input, as with torchrun's sizes."""
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=8\n"
                    f"srun --cpu-bind=none python pretrain_gpt.py {_ARGS}\n")
    code, report, text = _check(path, "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert report is not None, text
    assert report["gpus"] == 2 * 8
    code, _, text = _check(path, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "32")
    assert code == 2 and "srun" in text and "16" in text
    inline = tmp_path / "inline.sh"
    inline.write_text(f"srun -N 4 --ntasks-per-node 8 python pretrain_gpt.py {_ARGS}\n")
    _, report, text = _check(inline, "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert report is not None and report["gpus"] == 4 * 8, text


def test_srun_starting_torchrun_takes_torchrun_sizes(tmp_path):
    """`srun --ntasks-per-node=1 torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py`: srun starts one torchrun
    per node, torchrun starts the ranks: 8 x 2 = 16 (srun's one task per node is not the world size)."""
    path = tmp_path / "srun_torchrun.sh"
    path.write_text("srun --nodes=2 --ntasks-per-node=1 torchrun --nproc_per_node 8 --nnodes 2 "
                    f"pretrain_gpt.py {_ARGS}\n")
    _, report, text = _check(path, "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert report is not None and report["gpus"] == 16, text
    assert "megatron_unknown_flag" not in _rules(report)


def test_srun_without_task_counts_needs_gpus(tmp_path):
    """Without --ntasks or --nodes and --ntasks-per-node, srun takes them from the allocation (the job's
    environment), which the file does not say: --gpus is required."""
    path = tmp_path / "bare.sh"
    path.write_text(f"srun python pretrain_gpt.py {_ARGS}\n")
    code, _, text = _check(path, "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert code == 2 and "--gpus is required" in text


# ---------------------------------------------------------------- #4 docker replicas on one node

_IMAGE = "vllm/vllm-openai:v0.33.0 --model meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2"


def test_docker_replicas_on_their_own_gpus_and_host_ports_pass(tmp_path):
    """`--gpus '"device=0,1"' -p 8000:8000` and `--gpus '"device=2,3"' -p 8001:8000`: container port 8000 is
    namespaced, published on host ports 8000 and 8001; the GPUs are disjoint."""
    path = tmp_path / "two_docker.sh"
    path.write_text(f"docker run -d --gpus '\"device=0,1\"' -p 8000:8000 {_IMAGE}\n"
                    f"docker run -d --gpus '\"device=2,3\"' -p 8001:8000 {_IMAGE}\n")
    code, report, text = _check(path, "-c", "dgx-h100")
    assert code == 0 and report["verdict"] == "pass", text


def test_docker_replicas_that_do_share_fail(tmp_path):
    """Device 1 in both requests, host port 8000 published twice (and a third time as `-p8000:8000`, pflag's
    attached short form): both clashes at line 2, the port at line 3; a container
    without -p binds no host port, so it clashes with no bare server; `--network host` shares the host's."""
    path = tmp_path / "clash.sh"
    path.write_text(f"docker run -d --gpus '\"device=0,1\"' -p 8000:8000 {_IMAGE}\n"
                    f"docker run -d --gpus '\"device=1,2\"' -p 0.0.0.0:8000:8000/tcp {_IMAGE}\n"
                    f"docker run -d --gpus '\"device=6,7\"' -p8000:8000 {_IMAGE}\n")
    code, report, text = _check(path, "-c", "dgx-h100")
    assert code == 1
    found = {(v["rule"], v["line"]) for v in report["violations"]}
    assert found == {("port_in_use", 2), ("gpus_shared", 2), ("port_in_use", 3)}, text
    shared = next(v for v in report["violations"] if v["rule"] == "gpus_shared")
    assert "GPU(s) 1," in shared["message"]
    mixed = tmp_path / "mixed.sh"
    mixed.write_text("CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2\n"
                     f"docker run -d --gpus '\"device=2,3\"' {_IMAGE}\n"
                     f"docker run -d --gpus '\"device=4,5\"' --network host {_IMAGE}\n")
    code, report, text = _check(mixed, "-c", "dgx-h100")
    assert [(v["rule"], v["line"]) for v in report["violations"]] == [("port_in_use", 3)], text


# ---------------------------------------------------------------- #5 CRLF engine scripts

def test_a_crlf_engine_script_fails_as_bash_runs_it(tmp_path):
    """bash(1) QUOTING: backslash-CR is an escaped CR, not a continuation, so `--tensor-parallel-size 4` runs
    as a command of its own: the error crlf_line_endings at line 1, as the Megatron reader reports it."""
    path = tmp_path / "crlf70.sh"
    path.write_bytes(b"vllm serve meta-llama/Llama-3.1-70B-Instruct \\\r\n  --tensor-parallel-size 4 \\\r\n"
                     b"  --max-model-len 8192\r\n")
    code, report, text = _check(path, "-c", "dgx-h100")
    assert code == 1
    assert [(v["rule"], v["line"]) for v in report["violations"] if v["rule"] == "crlf_line_endings"] \
        == [("crlf_line_endings", 1)], text
    path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n"))
    code, report, text = _check(path, "-c", "dgx-h100")
    assert "crlf_line_endings" not in _rules(report) and code == 0, text


# ---------------------------------------------------------------- #7 torchtitan shell variables

@pytest.mark.parametrize("script, gpus", [
    ('NGPU=${NGPU:-"8"}\ntorchrun --nproc_per_node=$NGPU -m torchtitan.train --module llama3 --config llama3_8b\n',
     None),
    ("export NGPU=8\ntorchrun --nproc_per_node=${NGPU} -m torchtitan.train --module llama3 --config llama3_8b\n",
     None),
    ("torchrun --nproc_per_node=${NGPU} -m torchtitan.train --module llama3 --config llama3_8b\n", "8"),
])
def test_torchtitan_command_lines_expand_shell_variables(tmp_path, script, gpus):
    """torchtitan's run_train.sh sets `NGPU=${NGPU:-"8"}` (bash: the default when unset) and launches
    `torchrun --nproc_per_node=${NGPU}`: 8 ranks; a variable the file does not set leaves it to --gpus."""
    path = tmp_path / "run_train.sh"
    path.write_text(script)
    code, report, text = _check(path, "-c", "dgx-h100", *(["--gpus", gpus] if gpus else []))
    assert report is not None, text
    assert report["gpus"] == 8
    code, _, text = _check(path, "-c", "dgx-h100", "--gpus", "16")
    assert code == 2 if gpus is None else report is not None


# ---------------------------------------------------------------- #8 ZeRO-1 with dp=1, cp>1

def test_the_memory_fix_offers_the_distributed_optimizer_with_dp1_and_cp8():
    """8 GPUs, cp=8, so dp=1: Megatron's distributed optimizer shards over dp x cp = 8 (Megatron-LM d98e8a6
    megatron/core/optimizer/__init__.py: `data_parallel_group=intra_dp_cp_group`). Llama 3.1 8B's 8.03e9
    parameters' fp32 master weights and Adam moments are 12 B each = 89.7 GiB unsharded; a sharded copy is
    89.7 / 8 = 11.2 GiB, which brings the 146.6 GiB stage under 80 GiB: ZeRO-1 must be the first fix."""
    run = planner("explain", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--cp", "8",
                  "--seq-len", "16384")
    text = " ".join(run.stdout.split())
    assert "optimizer states, 89.7 GiB" in text
    assert "Fix: any of: zero_stage 1 (" in text
    gib = float(text.split("Fix: any of: zero_stage 1 (", 1)[1].split(" GiB", 1)[0])
    assert gib <= 146.6 - 89.7 * (1 - 1 / 8) + 0.1


# ---------------------------------------------------------------- #6 the README's pre-commit stanza

def test_the_readme_pre_commit_stanza_covers_training_configs_and_engine_launches(tmp_path):
    """The stanza's args (--seq-len 8192 among them) on a commit touching a DeepSpeed config, which needs
    --seq-len, and a vLLM launch, which takes its context from --max-model-len: no file is bad input (the hook
    exited 2 on the launch); the launch passes with the warning option_not_used, the config is checked."""
    from tests.test_check_ci import _readme_stanza_args

    args = _readme_stanza_args()
    assert "--seq-len" in args
    launch = tmp_path / "serve_vllm.sh"
    launch.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n")
    config = "tests/data/configs/deepspeed/zero2_bf16.json"
    run = planner("check", config, str(launch), *args, "--format", "json")
    assert run.returncode in (0, 1), run.stdout + run.stderr
    deepspeed, engine = json.loads(run.stdout)
    assert deepspeed["verdict"] in ("pass", "fail") and engine["verdict"] == "pass"
    assert [(v["rule"], v["severity"]) for v in engine["violations"] if v["rule"] == "option_not_used"] \
        == [("option_not_used", "warning")]


# ---------------------------------------------------------------- #12 -m on a checkpoint named quantized

def test_model_override_on_a_checkpoint_named_fp8_is_bad_input(tmp_path):
    """`-m llama-3.1-70b` (bf16 weights: 70.6e9 x 2 B = 131 GiB) on neuralmagic/...-FP8 (70.6e9 x 1 B = 66 GiB)
    was a false OOM; now it is bad input naming the id; the launch's own --quantization fp8 makes the weight format
    explicit, so the check runs (and the 66 GiB of weights fit one 80 GB GPU: below 79.65 GiB)."""
    path = tmp_path / "vllm_fp8ckpt.sh"
    path.write_text("vllm serve neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8 --max-model-len 8192 "
                    "--gpu-memory-utilization 0.95\n")
    code, _, text = _check(path, "-c", "dgx-h100", "-m", "llama-3.1-70b")
    assert code == 2 and "Meta-Llama-3.1-70B-Instruct-FP8" in text and "FP8" in text, text
    path.write_text(path.read_text().replace("--max-model-len", "--quantization fp8 --max-model-len"))
    code, report, text = _check(path, "-c", "dgx-h100", "-m", "llama-3.1-70b")
    assert report is not None and report["verdict"] == "pass", text


def test_a_320_digit_concurrency_is_bad_input_shortened(tmp_path):
    """Review 8 finding 16: a 320-digit --max-num-seqs printed in full twice in a warning and PASSed; any engine
    integer beyond 2**53 (9,007,199,254,740,992, the largest a float holds exactly) is now bad input, the value
    shown as its first 60 characters and its length."""
    path = tmp_path / "v320b.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs " + "9" * 320 + "\n")
    code, _, text = _check(path, "-c", "dgx-h100")
    assert code == 2 and "9,007,199,254,740,992" in text and "(322 characters)" in text, text
    assert "9" * 61 not in text


# ---------------------------------------------------------------- #20 one DeepSpeed batch finding

def test_a_deepspeed_batch_mismatch_is_reported_once(tmp_path):
    """train_batch_size 100 against micro 3 x gas 4 x dp 8 = 96: DeepSpeed's assertion is the one finding, its
    fix 96; the placement rule batch_divisible (100 % 24 != 0, 'use 96 or 120', where 120 does not match
    gas 4) is not reported again, and the memory fix does not send the user to it first."""
    path = tmp_path / "ds_bad_batch.json"
    path.write_text(json.dumps({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 3,
                                "gradient_accumulation_steps": 4, "fp16": {"enabled": True},
                                "zero_optimization": {"stage": 2}}))
    code, report, text = _check(path, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "4096")
    assert code == 1
    rules = _rules(report)
    assert "deepspeed_batch_size" in rules and "batch_divisible" not in rules, text
    finding = next(v for v in report["violations"] if v["rule"] == "deepspeed_batch_size")
    assert "train_batch_size: 96" in finding["fix"] and "= 96" in finding["message"]
    assert "batch_divisible" not in json.dumps(report["violations"])
