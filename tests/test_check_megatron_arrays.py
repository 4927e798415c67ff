"""A bash array whose `(` or `)` touches a flag (`ARGS=(--num-layers 80 ...` / `... --use-distributed-optimizer)`)
holds the same words as one with each parenthesis on its own line: bash(1) "Arrays" reads
`NAME=(value1 ... valueN)`, the parentheses are syntax. `check` read `--use-distributed-optimizer)` as an
unknown word and `ARGS=(--num-layers` as a variable, so a valid 70B script failed with a fix already in the
file (senior review 7 H4)."""

from pathlib import Path

import cli_run

from planner.check import megatron

SCRIPT = Path("tests/data/configs/megatron/llama70b_array_closing_on_last_flag.sh")
ARGS = ("-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64", "--format", "json")


def test_parentheses_touching_flags_are_bash_syntax():
    args = megatron.parse_args(SCRIPT.read_text(), str(SCRIPT))
    assert args["--num-layers"] == "80" and args["--use-distributed-optimizer"] is True
    assert not any(k.endswith(")") or k.startswith("(") for k in args)


def test_the_same_verdict_as_with_each_parenthesis_on_its_own_line(tmp_path):
    text = SCRIPT.read_text()
    apart = tmp_path / "apart.sh"
    apart.write_text(text.replace("ARGS=(", "ARGS=(\n").replace("--use-distributed-optimizer)",
                                                                  "--use-distributed-optimizer\n)"))
    glued, spaced = cli_run.planner("check", str(SCRIPT), *ARGS), cli_run.planner("check", str(apart), *ARGS)
    assert glued.returncode == spaced.returncode == 0, glued.stdout + glued.stderr
    import json
    one, two = json.loads(glued.stdout), json.loads(spaced.stdout)
    assert one["parallelism"] == two["parallelism"] and one["parallelism"]["zero_stage"] == 1


def test_a_quoted_element_ending_in_a_parenthesis_keeps_it(tmp_path):
    path = tmp_path / "freq.sh"
    path.write_text('ARGS=(--num-experts 8 --moe-layer-freq "([1]*32)")\ntorchrun pretrain_gpt.py "${ARGS[@]}"\n')
    assert megatron.parse_args(path.read_text(), str(path))["--moe-layer-freq"] == "([1]*32)"


def test_assignments_separated_by_semicolons_are_each_read(tmp_path):
    """fresh-user review 7: `TP=2; PP=8` on one line gave `value '2;'` (bash(1): `;` ends a command)."""
    path = tmp_path / "semi.sh"
    path.write_text("TP=2; PP=8\ntorchrun pretrain_gpt.py --tensor-model-parallel-size $TP "
                    "--pipeline-model-parallel-size $PP\n")
    args = megatron.parse_args(path.read_text(), str(path))
    assert args["--tensor-model-parallel-size"] == "2" and args["--pipeline-model-parallel-size"] == "8"


def test_a_launcher_size_from_the_jobs_environment_leaves_the_world_to_gpus(tmp_path):
    """fresh-user review 7: `--nnodes $SLURM_JOB_NUM_NODES` (Slurm fills it) was bad input even with
    --gpus; now --gpus gives the world size, and without --gpus the message names the variable."""
    path = tmp_path / "slurm.sh"
    path.write_text(
        "torchrun --nproc_per_node 8 --nnodes $SLURM_JOB_NUM_NODES pretrain_gpt.py --num-layers 32 "
        "--hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096 --max-position-embeddings 131072 --position-embedding-type rope "
        "--rotary-base 500000 --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
        "--disable-bias-linear --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
        "--micro-batch-size 1 --global-batch-size 128 --bf16\n")
    given = cli_run.planner("check", str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "16")
    assert given.returncode == 0 and "on 16 x dgx-h100" in given.stdout, given.stderr
    missing = cli_run.planner("check", str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert missing.returncode == 2 and "--nnodes $SLURM_JOB_NUM_NODES" in missing.stderr
