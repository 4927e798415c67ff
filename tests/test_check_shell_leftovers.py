"""`planner check` of the shell forms of launch scripts left unread after gate3-gate5 (issue 11; fresh-user review
11 findings 3, 6 and 9; closing note 8's #11 leftovers): command substitutions `$(...)` and `let`, node ranks from
Slurm (`SLURM_NODEID`) and in every comparison bash runs, vLLM's multi-node form `--node-rank $NODE_RANK` /
`--headless`, an environment prefix on `docker run`, a broken line continuation in a training launch, a launch
inside a shell loop, and the world-size fix of servers on shared nodes. Each script is written as the reviewer or a
launcher writes it; the expected numbers are worked by hand in each test. Source: bash(1) "Command Substitution",
SHELL BUILTIN COMMANDS `let`, "CONDITIONAL EXPRESSIONS"."""

from __future__ import annotations

import json

import pytest

from planner.check import shell
from planner.check.engine_file import check_launch_file
from tests.cli_run import planner

MEGATRON = ("torchrun --nproc_per_node 8 --nnodes {nnodes} pretrain_gpt.py --tensor-model-parallel-size 8 "
            "--sequence-parallel --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size {gbs} "
            "--seq-length 4096 --bf16 --use-distributed-optimizer\n")


def _write(tmp_path, text: str, name: str = "launch.sh"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _json(*args) -> dict:
    out = planner("check", *args, "--format", "json")
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _bad_input(*args) -> str:
    out = planner("check", *args)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    return " ".join(out.stderr.split())


def _errors(result: dict) -> dict[str, str]:
    return {v["rule"]: v["message"] for v in result["violations"] if v["severity"] == "error"}


# ---------------------------------------------------------------- 1. $(...) and let

def test_command_substitution_node_count_falls_back_to_gpus_and_says_so(tmp_path):
    """`NNODES=$(scontrol show hostnames | wc -l)` (review 11 #9) then `torchrun --nnodes $NNODES`: the reader does
    not run the command, so the world size is --gpus's as for an unset variable (16 = tp 8 x pp 2, dp 1), with a
    warning naming the substitution; without --gpus one bad-input line asks for it."""
    path = _write(tmp_path, "#!/bin/bash\nNNODES=$(scontrol show hostnames | wc -l)\n"
                  + MEGATRON.format(nnodes="$NNODES", gbs=64))
    data = _json(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "16")
    assert data["gpus"] == 16 and data["parallelism"]["dp"] == 1
    warning, = [v for v in data["violations"] if v["rule"] == "world_size_from_gpus"]
    assert ("--nnodes $(scontrol show hostnames | wc -l), a command substitution $(...), which this reader does not "
            "run: checked at --gpus 16") in warning["message"]
    text = _bad_input(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100")
    assert (f"{path}: --gpus: --gpus is required: the file's torchrun world size comes from the shell: --nnodes "
            "$(scontrol show hostnames | wc -l), a command substitution") in text


def test_command_substitution_where_no_fallback_is_one_bad_input_line(tmp_path):
    """An engine's tensor-parallel size from `$(nvidia-smi -L | wc -l)`: nothing stands in for it, exit 2 naming the
    flag and the substitution (the `|` inside it is no pipeline of the script)."""
    path = _write(tmp_path, "TP=$(nvidia-smi -L | wc -l)\n"
                            "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size $TP\n")
    text = _bad_input(str(path), "-c", "dgx-h100")
    assert (f"{path}: --tensor-parallel-size: value '$(nvidia-smi -L | wc -l)' is a shell command substitution "
            "$(...), which this reader does not run; write the value") in text


def test_let_is_evaluated_like_arithmetic_expansion(tmp_path):
    """`let GBS=DP*MBS*32` (review 11 #9: 'DP*MBS*32 must be an integer') = 2 x 1 x 32 = 64; `let "GBS2 = GBS*2"`
    = 128 and `let GBS2-=64` = 64 again: the global batch is 64 sequences, 64 micro-batches of 1 at dp 1."""
    path = _write(tmp_path, 'DP=2\nMBS=1\nlet GBS=DP*MBS*32\nlet "GBS2 = GBS*2"\nlet GBS2-=64\n'
                  + MEGATRON.format(nnodes=2, gbs="$GBS2").replace("--micro-batch-size 1", "--micro-batch-size $MBS"))
    par = _json(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100")["parallelism"]
    assert (par["global_batch_size"], par["micro_batch_size"], par["dp"]) == (64, 1, 1)


def test_let_of_an_unset_variable_names_it(tmp_path):
    path = _write(tmp_path, "let GBS=DP*32\n" + MEGATRON.format(nnodes=2, gbs="$GBS"))
    text = _bad_input(str(path), "-m", "llama-3.1-70b", "-c", "dgx-h100")
    assert f"{path}: --global-batch-size: value '$((DP*32))' is a shell arithmetic expansion $((...)) of DP" in text


@pytest.mark.parametrize("line, assignments", [
    ("let GBS=DP*MBS*32", "GBS=$((DP*MBS*32))"),
    ('  let "X = Y * 2" Z=3', "  X=$((Y*2)) Z=$((3))"),
    ("let X+=4", "X=$((X+(4)))"),
    ("let i++", "let i++"),            # not an assignment: left as written
    ("echo let X=1", "echo let X=1"),  # not the `let` command
])
def test_let_assignments(line, assignments):
    assert shell.let_assignments(line) == assignments


def test_join_expansions_keeps_a_substitution_one_word():
    words = ["N=$(scontrol", "show", "hostnames", "|", "wc", "-l)", "|", "x", "$((A", "*", "B))"]
    assert shell.join_expansions(words) == ["N=$(scontrol show hostnames | wc -l)", "|", "x", "$((A * B))"]


# ---------------------------------------------------------------- 2. node ranks: Slurm's, and every comparison

SERVER = "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8"


@pytest.mark.parametrize("variable", ["NODE_RANK", "SLURM_NODEID", "SLURM_PROCID"])
@pytest.mark.parametrize("test, first, second", [
    ("-gt 0", "the nodes other than 0", "node 0"),
    ("-ge 1", "the nodes other than 0", "node 0"),
    ("-ne 0", "the nodes other than 0", "node 0"),
    ("-lt 1", "node 0", "the nodes other than 0"),
    ("-le 1", "nodes 0, 1", "the nodes other than 0, 1"),
    ("-eq 0", "node 0", "the nodes other than 0"),
])
def test_rank_comparisons_are_exclusive_branches(tmp_path, variable, test, first, second):
    """`if [ "$VAR" OP N ]; then A; A; else B; B; fi`: bash runs A's two servers on the ranks where the test holds
    and B's on the others, so each pair shares its node(s): the two port clashes name those ranks (before, `-gt`
    was bad input and the else of `-ne 0` was labelled 'other than 0' instead of node 0)."""
    text = (f'if [ "${variable}" {test} ]; then\n  {SERVER} &\n  {SERVER} &\nelse\n  {SERVER} &\n  {SERVER} &\nfi\n')
    found = [v["message"] for v in check_launch_file(_write(tmp_path, text), cluster="dgx-h100", gpus=64)["violations"]
             if v["rule"] == "port_in_use"]
    assert [m.split("(both on ")[1].split(":")[0] for m in found] == [first, second], found


def test_case_of_slurm_nodeid_with_a_default_branch(tmp_path):
    """`case $SLURM_NODEID in 0) A ;; *) B ;; esac`: B runs on the nodes other than 0; 2 nodes named, 16 GPUs."""
    text = f"case $SLURM_NODEID in\n  0) {SERVER} ;;\n  *) {SERVER} --port 8001 ;;\nesac\n"
    result = check_launch_file(_write(tmp_path, text), cluster="dgx-h100")
    assert result["verdict"] == "pass" and result["gpus"] == 16, result["violations"]


# ---------------------------------------------------------------- 3. vLLM over several nodes: --node-rank $NODE_RANK

VLLM_405B = ("vllm serve meta-llama/Llama-3.1-405B-Instruct --tensor-parallel-size 8 --pipeline-parallel-size 2 "
             "--max-model-len 8192 --nnodes 2 --master-addr $HEAD --node-rank ")


def test_vllm_node_rank_variable_is_one_engine_over_its_nodes(tmp_path):
    """One command for every node, `--nnodes 2 --node-rank $NODE_RANK` (vLLM 0.33.0 `vllm/config/parallel.py`
    ParallelConfig.nnodes / node_rank): one instance of tp 8 x pp 2 = 16 ranks, 8 on each of 2 nodes, as the same
    file with literal ranks; it was exit 2 'uses the shell variable NODE_RANK'. 8 GPUs cannot hold it."""
    path = _write(tmp_path, "HEAD=10.0.0.1\n" + VLLM_405B + "$NODE_RANK\n")
    result = check_launch_file(path, cluster="dgx-h100")
    assert result["verdict"] == "pass" and result["gpus"] == 16, result["violations"]
    row, = result["launches"]
    assert (row["world"], row["nnodes"], row["node_rank"]) == (16, 2, 0)
    errors = _errors(check_launch_file(path, cluster="dgx-h100", gpus=8))
    assert "the launches need 16 GPUs (8 x 2 nodes;" in errors["world_size"]


def test_vllm_headless_form_on_the_later_nodes(tmp_path):
    """Node 0 runs the API server, the others `--node-rank $NODE_RANK --headless` (vllm/entrypoints/cli/serve.py
    run_headless: node_rank_within_dp > 0 starts only the multiproc executor's workers): the `else` branch's rank is
    1, so both commands are node ranks 0 and 1 of one instance (one row, 16 GPUs); no headless warning."""
    text = ("HEAD=10.0.0.1\n"
            f'if [ "$NODE_RANK" -eq 0 ]; then\n  {VLLM_405B}0\nelse\n  {VLLM_405B}$NODE_RANK --headless\nfi\n')
    result = check_launch_file(_write(tmp_path, text), cluster="dgx-h100")
    assert result["verdict"] == "pass" and result["gpus"] == 16 and result["violations"] == [], result
    row, = result["launches"]
    assert (row["world"], row["node_ranks"], row["lines"]) == (16, [0, 1], [3, 5])


# ---------------------------------------------------------------- 7. the world size of servers on shared nodes

def test_two_servers_on_one_node_are_the_sharing_error_not_a_larger_job(tmp_path):
    """Review 11 #6, w10: node 0 runs two tp8 servers, node 1 one; 2 nodes x 8 = 16 GPUs is the job. It said
    `world_size: the launches need 24 GPUs ... Fix: check --gpus 24`; the error is gpus_shared on node 0 (each node
    counts at most its 8 GPUs: 8 + 8 = 16), reported first."""
    text = (f'if [ "$NODE_RANK" -eq 0 ]; then\n  {SERVER} --port 8000 &\n  {SERVER} --port 8001 &\n'
            f"else\n  {SERVER} &\nfi\nwait\n")
    violations = check_launch_file(_write(tmp_path, text), cluster="dgx-h100", gpus=16)["violations"]
    assert [v["rule"] for v in violations] == ["gpus_shared"], violations
    assert "both run on node 0" in violations[0]["message"]
    rules = [v["rule"] for v in check_launch_file(_write(tmp_path, text), cluster="dgx-h100", gpus=8)["violations"]]
    assert rules == ["gpus_shared", "world_size"]   # 2 nodes named, 8 GPUs given: both, the sharing first


def test_one_branch_for_two_ranks_starts_a_server_on_each(tmp_path):
    """Review 11 #6, w11: `case "$NODE_RANK" in 0|1) vllm serve ... tp8 ;; esac` starts a server on node 0 and one on
    node 1: 16 GPUs (it said 'up to 8' and passed --gpus 8)."""
    path = _write(tmp_path, f'case "$NODE_RANK" in\n  0|1) {SERVER} ;;\nesac\n')
    assert check_launch_file(path, cluster="dgx-h100")["gpus"] == 16
    assert "the launches need 16 GPUs (8 x 2 nodes;" in _errors(check_launch_file(path, cluster="dgx-h100",
                                                                                     gpus=8))["world_size"]


# ---------------------------------------------------------------- 4. an environment prefix on docker run

DOCKER = ("docker run --gpus all {env}vllm/vllm-openai:latest --model meta-llama/Llama-3.1-70B-Instruct "
          "--tensor-parallel-size 8\n")


def test_prefix_on_docker_run_does_not_reach_the_container(tmp_path):
    """`CUDA_VISIBLE_DEVICES=0 docker run --gpus all ... tp 8`: the prefix is the docker client's environment; the
    container gets only what -e / --env pass (Docker reference, `docker container run` --env), so the engine sees the
    8 GPUs of `--gpus all` and tp 8 starts (it was 'CUDA_VISIBLE_DEVICES gives it 1 GPU')."""
    result = check_launch_file(_write(tmp_path, "CUDA_VISIBLE_DEVICES=0 " + DOCKER.format(env="")), cluster="dgx-h100")
    assert result["verdict"] == "pass", result["violations"]


@pytest.mark.parametrize("prefix, env", [
    ("CUDA_VISIBLE_DEVICES=0,1 ", "-e CUDA_VISIBLE_DEVICES "),   # -e NAME copies the client's (prefix) value
    ("", "-e CUDA_VISIBLE_DEVICES=0,1 "),                        # -e NAME=VALUE sets it inside
    ("", "--env=CUDA_VISIBLE_DEVICES=0,1 "),
])
def test_env_option_passes_visible_devices_into_the_container(tmp_path, prefix, env):
    """Passed with -e / --env, CUDA_VISIBLE_DEVICES=0,1 limits the engine inside: 2 GPUs for 8 ranks."""
    errors = _errors(check_launch_file(_write(tmp_path, prefix + DOCKER.format(env=env)), cluster="dgx-h100"))
    assert "starts 8 ranks (--tensor-parallel-size 8) but CUDA_VISIBLE_DEVICES gives it 2 GPUs" in errors["world_size"]


# ---------------------------------------------------------------- 5. the launch ends at a broken continuation

def test_megatron_layout_is_the_launch_bash_runs(tmp_path):
    """Line 5 has no backslash, so bash ends the torchrun command there and runs line 6
    (`--pipeline-model-parallel-size 2`) as a command of its own: Megatron starts with pp 1, dp = 8 / 4 = 2. The
    reader showed the intended pp 2 beside the line_continuation error; it shows what runs."""
    path = _write(tmp_path, "#!/bin/bash\ntorchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
                            "  --tensor-model-parallel-size 4 --sequence-parallel \\\n"
                            "  --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 \\\n"
                            "  --bf16 --use-distributed-optimizer\n"
                            "  --pipeline-model-parallel-size 2\n")
    data = _json(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert (data["parallelism"]["tp"], data["parallelism"]["pp"], data["parallelism"]["dp"]) == (4, 1, 2)
    assert [v["line"] for v in data["violations"] if v["rule"] == "line_continuation"] == [5]  # the line without its backslash


def test_launch_without_a_required_flag_after_the_break_fails_on_the_break(tmp_path):
    """`\\ ` (backslash, space) ends the command at line 3: --seq-length on line 4 never reaches Megatron, which
    exits without it. The file is no unreadable input but a failing launch: FAIL (exit 1) on line_continuation at
    line 3, with the layout the file means (tp 4, dp 2, seq 4,096)."""
    path = _write(tmp_path, "torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
                            "  --tensor-model-parallel-size 4 --sequence-parallel \\\n"
                            "  --micro-batch-size 1 --global-batch-size 64 \\ \n"
                            "  --seq-length 4096 --bf16 --use-distributed-optimizer\n")
    data = _json(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert data["verdict"] == "fail"
    assert [v["line"] for v in data["violations"] if v["rule"] == "line_continuation"] == [3]
    assert (data["parallelism"]["tp"], data["parallelism"]["dp"], data["parallelism"]["seq_len"]) == (4, 2, 4096)


def test_torchtitan_layout_is_the_launch_bash_runs(tmp_path):
    """torchtitan command line, the pipeline override after a line without its backslash: pp 1 runs, tp 2, dp 4."""
    path = _write(tmp_path, "torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b \\\n"
                            "  --parallelism.tensor_parallel_degree 2\n"
                            "  --parallelism.pipeline_parallel_degree 2\n")
    data = _json(str(path), "-c", "dgx-h100")
    assert (data["parallelism"]["tp"], data["parallelism"]["pp"]) == (2, 1)
    assert "line_continuation" in _errors(data)


# ---------------------------------------------------------------- 6. a training launch inside a shell loop

def test_training_sweep_in_a_for_loop_is_bad_input(tmp_path):
    """`for TP in 1 2 4; do torchrun ... --tensor-model-parallel-size $TP`: three launches, one per value; it said
    'uses the shell variable TP, which the file does not set'. Now one line naming the loop and its variable."""
    path = _write(tmp_path, "#!/bin/bash\nfor TP in 1 2 4; do\n  torchrun --nproc_per_node 8 pretrain_gpt.py "
                            "--tensor-model-parallel-size $TP --micro-batch-size 1 --global-batch-size 64 "
                            "--seq-length 4096 --bf16\ndone\n")
    text = _bad_input(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert (f"{path}: line 3: the training launch of line 3 runs inside the loop `for TP ...` (line 2) and takes $TP "
            "from it: one launch per value, which this reader does not unroll") in text


def test_restart_loop_around_a_launch_is_read_once_with_a_warning(tmp_path):
    """`until torchrun ...; do sleep 30; done` restarts the same job: read as one launch (tp 2, dp 4), warned."""
    path = _write(tmp_path, "until torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
                            "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 "
                            "--use-distributed-optimizer; do\n  sleep 30\ndone\n")
    data = _json(str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert (data["parallelism"]["tp"], data["parallelism"]["dp"]) == (2, 4)
    warning, = [v for v in data["violations"] if v["rule"] == "launch_in_loop"]
    assert "runs inside a shell `until` loop (lines 1-3): read once" in warning["message"]


def test_torchtitan_sweep_in_a_for_loop_is_bad_input(tmp_path):
    path = _write(tmp_path, "for PP in 2 4; do\n  torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 "
                            "--config llama3_8b --parallelism.pipeline_parallel_degree ${PP}\ndone\n")
    text = _bad_input(str(path), "-c", "dgx-h100")
    assert "runs inside the loop `for PP ...` (line 1) and takes $PP from it" in text


@pytest.mark.parametrize("text, found", [
    ("for i in 1 2; do\n  echo $i\ndone\n", [(1, 3, "for", "i")]),
    ("while true; do x; done\nuntil y\ndo\n  z\ndone\n", [(1, 1, "while", None), (2, 5, "until", None)]),
])
def test_loops(text, found):
    assert shell.loops(text) == found


def test_one_line_case_and_an_unread_rank_pattern(tmp_path):
    """`case $NODE_RANK in 0|1) ... ;; esac` on one line is read as on several (the command was dropped with the
    `case` words: 'no vllm serve command line'); a pattern that is not ranks (`x`) or a rank beyond the 65,536 nodes
    read is one bad-input line naming it."""
    path = _write(tmp_path, f"case $NODE_RANK in 0|1) {SERVER} ;; esac\n")
    assert check_launch_file(path, cluster="dgx-h100")["gpus"] == 16   # tp 8 on nodes 0 and 1
    for text, what in [(f"case $NODE_RANK in 0|x) {SERVER} ;; esac\n", "the case pattern '0|x)'"),
                       (f'if [ "$NODE_RANK" -lt 99999999999 ]; then {SERVER}; fi\n',
                        "the condition '[ $NODE_RANK -lt 99999999999 ]'")]:
        message = _bad_input(str(_write(tmp_path, text)), "-c", "dgx-h100")
        assert f"the `vllm serve` command runs in a branch that {what} (line 1) selects in a form" in message


def test_unclosed_substitution_does_not_swallow_the_launch():
    """`X=$(foo` never closes (bash: a syntax error): the words after it stay words of their own."""
    assert shell.join_expansions(["X=$(foo", "--seq-length", "4096"]) == ["X=$(foo", "--seq-length", "4096"]
