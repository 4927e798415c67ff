"""`planner check` of the fresh-user review 12 files (/work/notes/review-fresh12.md; the reviewer's own files, copied
into tests/data/configs/fresh12/): a `#` inside a word is no comment (#1), the torchtitan fix's valid layouts (#2),
and the LOW findings of the same review."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from planner.check import shell
from planner.check.engine_file import check_launch_file
from planner.placement import overlap
from planner.placement.layout import Layout
from planner.placement.rules import check_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model
from tests.cli_run import planner

DATA = Path(__file__).parent / "data" / "configs" / "fresh12"


def _errors(result: dict) -> dict[str, str]:
    return {v["rule"]: v["message"] for v in result["violations"] if v["severity"] == "error"}


@pytest.mark.parametrize("text, words", [
    # bash(1) COMMENTS: a word *beginning* with # starts a comment; a # inside a word is part of it
    ("srun --container-image=nvcr.io#nvidia/nemo:25.04 python x.py",
     ["srun", "--container-image=nvcr.io#nvidia/nemo:25.04", "python", "x.py"]),
    ("--data-path /data/run#7/x --micro-batch-size 8", ["--data-path", "/data/run#7/x", "--micro-batch-size", "8"]),
    ("--a 1 # --b 2", ["--a", "1"]),                       # a word starting with # is a comment
    ("--a 1;# --b 2", ["--a", "1;"]),                      # after the metacharacter ; a word starts
    ('--a "x #y" --b 2', ["--a", "x #y", "--b", "2"]),     # quoted: no comment
    ("--a 'x #y' --b 2", ["--a", "x #y", "--b", "2"]),
    ("--a x\\ #y --b 2", ["--a", "x #y", "--b", "2"]),     # an escaped blank is inside the word
    ("N=${#ARR[@]} M=$# --b 2", ["N=${#ARR[@]}", "M=$#", "--b", "2"]),
    ('A="1\n# still quoted" --b 2', ["A=1\n# still quoted", "--b", "2"]),  # a quote open across a line
])
def test_split_comments_as_bash(text, words):
    assert shell.split(text) == words


def test_container_image_with_hash_passes():
    """pretrain_srun4.sh: srun --container-image=nvcr.io#nvidia/nemo:25.04 bash -c "python pretrain_gpt.py ...": the
    launch after the # is read (tp8 pp4 on 4 nodes x 8 tasks = 32 GPUs), as the same file without # passes."""
    result = planner("check", str(DATA / "pretrain_srun4.sh"), "-c", "dgx-h100", "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "pass" and doc["gpus"] == 32
    assert (doc["parallelism"]["tp"], doc["parallelism"]["pp"], doc["parallelism"]["global_batch_size"]) == (8, 4, 128)


def test_hash_in_a_data_path_keeps_the_flags_after_it():
    """pretrain_hash.sh: `--data-path /data/run#7/text_document --micro-batch-size 8` reads micro-batch 8 (the
    reviewer's file without # gets the memory verdict at b8), not "--micro-batch-size: missing"."""
    result = planner("check", str(DATA / "pretrain_hash.sh"), "-c", "dgx-h100", "--format", "json")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["parallelism"]["micro_batch_size"] == 8
    assert "memory_exceeds" in {v["rule"] for v in doc["violations"] if v["severity"] == "error"}


def test_engine_launch_reads_past_a_hash_in_a_path(tmp_path):
    """vLLM: `--download-dir /cache/run#7 --tensor-parallel-size 3` reads tp 3: 64 heads are not divisible by 3
    (without the fix, the default tp 1 was read)."""
    path = tmp_path / "v.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-70B-Instruct --download-dir /cache/run#7 "
                    "--tensor-parallel-size 3\n")
    errors = _errors(check_launch_file(path, cluster="dgx-h100"))
    assert "num_attention_heads 64 is not divisible by --tensor-parallel-size 3" in errors["heads_divisible"]


def test_torchtitan_cli_reads_past_a_hash_in_a_path(tmp_path):
    """torchtitan CLI: `--job.dump_folder /out/run#1 --parallelism.tensor_parallel_degree 3` reads tp 3: llama3 8B's
    8 KV heads are not divisible by 3 (without the fix, tp 1 was read and the file passed)."""
    path = tmp_path / "tt.sh"
    path.write_text("torchrun --nproc_per_node=8 -m torchtitan.train --module llama3 --config llama3_8b \\\n"
                    "  --job.dump_folder /out/run#1 --parallelism.tensor_parallel_degree 3 \\\n"
                    "  --training.local_batch_size 1 --training.seq_len 8192\n")
    result = planner("check", str(path), "-c", "dgx-h100", "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["parallelism"]["tp"] == 3
    assert "kv_heads_divisible_by_tp" in {v["rule"] for v in doc["violations"]}


def test_torchtitan_heads_fix_holds_the_per_rank_batch(tmp_path):
    """t1.toml (torchtitan's llama3_8b preset, local_batch_size 2, tp 3) on 24 GPUs: torchtitan's global batch is
    local_batch_size x dp (global_batch_size -1, train.py), so every tp dividing gcd(32 heads, 8 KV heads) = 8 and
    24 is a valid layout: tp 8 x dp 3, tp 4 x dp 6, tp 2 x dp 12, tp 1 x dp 24 -- not "none" for a fixed batch of
    2 x 8 = 16 sequences (which dp 3 does not divide)."""
    result = planner("check", str(DATA / "t1.toml"), "-c", "dgx-h100", "--gpus", "24", "--format", "json")
    fix = next(v["fix"] for v in json.loads(result.stdout)["violations"] if v["rule"] == "heads_divisible_by_tp")
    assert fix == ("tp must divide 32; valid layouts: tp=8 x dp=3; tp=4 x dp=6; tp=2 x dp=12; tp=1 x dp=24 "
                   "(the global batch follows as the per-rank batch x dp)")
    # the first layout offered passes: dp 3 x local batch 2 = a global batch of 6 sequences
    fixed = tmp_path / "t7.toml"
    fixed.write_text((DATA / "t1.toml").read_text().replace("tensor_parallel_degree = 3", "tensor_parallel_degree = 8"))
    doc = json.loads(planner("check", str(fixed), "-c", "dgx-h100", "--gpus", "24", "--format", "json").stdout)
    assert doc["verdict"] == "pass"
    assert (doc["parallelism"]["dp"], doc["parallelism"]["tp"], doc["parallelism"]["global_batch_size"]) == (3, 8, 6)


def test_megatron_heads_fix_still_holds_the_global_batch():
    """Megatron-LM holds --global-batch-size: at 24 GPUs and a batch of 16 sequences, tp in {1, 2, 4, 8} leaves dp
    24, 12, 6, 3, none dividing 16, and pp 3 / 6 / 12 / 24 does not divide 32 layers: none is valid, as before."""
    fix = next(v.fix for v in check_layout(load_model("llama-3.1-8b"), dataclasses.replace(load_cluster("dgx-h100"), num_gpus=24),
                                           Layout(tp=3, dp=8, global_batch_size=16))
               if v.rule == "heads_divisible_by_tp")
    assert fix == ("tp must divide 32; valid layouts: none of tp x dp or tp x pp: 24 GPUs are more than tp x dp x pp "
                   "can use for a global batch of 16 sequences (dp must divide it)")


@pytest.mark.parametrize("value, says", [
    ("Et|(tt|)*x", "value 'Et|(tt|)*x': a repeat needs a count n after its *: '(tt|)*' has none; unknown symbol(s) x; "
                   "allowed: "),
    ("Et|t*|tL", "value 'Et|t*|tL': a repeat needs a count n after its *: 't*' has none; allowed: "),
    ("Etq|tL", "value 'Etq|tL': unknown symbol(s) q; allowed: "),
])
def test_pipeline_layout_syntax_is_not_called_an_unknown_symbol(value, says):
    """Review #4: `(`, `)` and `*` of a repeat without its count were listed as unknown symbols, then as allowed."""
    result = planner("explain", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64", "--tp", "8", "--pp", "8",
                     "--pipeline-layout", value)
    assert result.returncode == 2
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_overlap_label_lists_only_overlaps_that_act():
    """Review #5: `planner plan -m llama-3.1-8b -c dgx-h100 --gpus 7` is dp1 tp1 pp7: no DP traffic to overlap, so no
    `overlap grad-reduce` in its summary line (Megatron's default overlaps stay set; they have nothing to hide)."""
    result = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "7")
    assert result.returncode == 0, result.stderr
    summary = [line for line in result.stdout.splitlines() if "1: dp1 tp1 pp7" in line]
    assert summary and "grad-reduce" not in summary[0] and "overlap" not in summary[0]


@pytest.mark.parametrize("degrees, on", [
    ({"dp": 1, "tp": 8, "cp": 1, "ep": 1}, ["tp-comm"]),                 # 405B on 72 GB200: dp1 tp8 pp9
    ({"dp": 1, "tp": 8, "cp": 2, "ep": 1}, ["tp-comm", "grad-reduce"]),  # CP ranks reduce gradients too
    ({"dp": 4, "tp": 1, "cp": 1, "ep": 1}, ["grad-reduce"]),             # no TP traffic at tp1
])
def test_names_on_degrees(degrees, on):
    given = {"tp_comm_overlap": True, "overlap_grad_reduce": True, "overlap_param_gather": False,
             "ep_comm_overlap": True}
    assert overlap.names_on(given, None, 1, degrees) == on
    assert overlap.names_on(given, None, 1) == ["tp-comm", "grad-reduce", "ep-a2a"]  # no degrees: as given


@pytest.mark.parametrize("value, says", [
    ("abc", "Invalid value for '--gpus': 'abc' is not an integer (see --help)"),
    ("1.5", "Invalid value for '--gpus': '1.5' is not an integer (see --help)"),
    ("0", "Invalid value for '--gpus': 0 is not in the range 1<=x<=4194304 (see --help)"),
])
def test_usage_errors_read_as_one_clause(value, says):
    """Review #6: `'abc' is not a valid int range.` and `1<=x<=4194304.; got '0'` (doubled punctuation)."""
    result = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", value)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: planner plan: {says}"


def test_gpu_counts_read_as_numbers():
    """Review #6: `on 4194304 GPUs` without separators; `fully sharded over all 1 GPUs`."""
    big = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "4194304")
    assert big.returncode == 1 and "no valid layout of llama-3.1-8b on 4,194,304 GPUs: " in big.stderr
    one = planner("plan", "-m", "llama-3.1-8b", "-c", "rtx-4090x8", "--gpus", "1")
    assert one.returncode == 1 and "fully sharded over 1 GPU (ZeRO-3)" in one.stderr and "1 GPUs" not in one.stderr


def test_set_shows_the_word_given():
    """Review #6: `--set nokey=1` was shown as `value 'nokey'`."""
    result = planner("check", str(DATA / "ds_t9.json"), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--gpus", "8",
                     "--seq-len", "4096", "--set", "nokey=1")
    assert result.returncode == 2
    assert "--set: value 'nokey=1': --set resolves the Hugging Face Trainer's 'auto' values of " in result.stderr


@pytest.mark.parametrize("name, text, says", [
    ("empty.sh", "", "empty.sh: the file is empty: nothing to check"),
    ("ds_empty.json", "", "ds_empty.json: the file is empty: nothing to check"),
    ("blank.toml", "\n  \n", "blank.toml: the file is empty (4 blank characters): nothing to check"),
])
def test_empty_file_says_so(tmp_path, name, text, says):
    """Review #8: an empty file got the 875-character list of every kind `check` reads."""
    path = tmp_path / name
    path.write_text(text)
    result = planner("check", str(path), "-c", "dgx-h100")
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / says}"


def test_megatron_flag_given_twice_warns(tmp_path):
    """Review #9: `--global-batch-size 64` (line 7) and `--global-batch-size 128` (line 8) in one launch: argparse
    keeps 128 silently; the check reads 128 and warns, naming both lines and the value that wins."""
    path = tmp_path / "dup.sh"
    path.write_text((DATA / "pretrain_hash.sh").read_text().replace(
        "--micro-batch-size 8", "--micro-batch-size 1 --global-batch-size 128"))
    doc = json.loads(planner("check", str(path), "-c", "dgx-h100", "--format", "json").stdout)
    assert doc["parallelism"]["global_batch_size"] == 128
    warning = next(v for v in doc["violations"] if v["rule"] == "duplicate_flag")
    assert warning["severity"] == "warning" and warning["line"] == 8
    assert warning["message"] == ("--global-batch-size is given more than once (lines 7 and 8): argparse keeps the "
                                  "last, 128, not 64")


def test_plan_json_on_an_infeasible_request():
    """Review #11: `plan --format json` that finds nothing (exit 1) printed nothing on stdout; now, as serve-plan, the
    request, the error line and what binds: 405B on 8 H100s needs at least 104 GPUs (its message says so)."""
    result = planner("plan", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "8", "--format", "json")
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["request"]["gpus"] == 8 and doc["minimum_gpus"] == 104
    assert doc["error"] in result.stderr and "use at least 104 GPUs" in doc["error"]
    bad = planner("plan", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "abc", "--format", "json")
    assert bad.returncode == 2 and bad.stdout == ""  # bad input: the stderr line only
