"""A DeepSpeed config is read as DeepSpeed reads it (closing note 8, #11 policy; review-fresh11 gate7 item 4).

DeepSpeed loads a config path with hjson (deepspeedai/DeepSpeed edaa722 deepspeed/runtime/tensor_parallel/
init_utils.py load_ds_config l. 19-33; deepspeed/runtime/config.py DeepSpeedConfig l. 699), so trailing commas,
comments and single-quoted strings train; a key given twice does not (dict_raise_error_on_duplicate_keys).
The gate must not fail a config that trains: such a file is read and warned about (`json_not_strict`: the
Hugging Face Trainer's json.load, huggingface/accelerate 16cb6eb src/accelerate/utils/deepspeed.py
HfDeepSpeedConfig l. 141-143, refuses it). What hjson refuses too stays a syntax error (exit 2).
"""

from __future__ import annotations

import json

import pytest

from tests.cli_run import planner

OPTIONS = ("-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "4096", "--format", "json")
STRICT = """{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 8,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 3}
}
"""
"""The fresh-user review 10 #7 file (tests/data/configs/fresh10/dstc.txt) without its trailing commas."""
TRAILING = STRICT.replace('{"stage": 3}\n', '{"stage": 3,},\n')
"""Its trailing commas: after `"stage": 3` (line 5, column 35) and after the section (column 37)."""


def _run(text: str, tmp_path, name: str):
    path = tmp_path / name
    path.write_text(text)
    return planner("check", str(path), *OPTIONS)


@pytest.mark.parametrize("name", ["ds_config.json", "ds_config.txt"])
def test_a_trailing_comma_deepspeed_takes_is_read_with_a_warning(tmp_path, name):
    """By hand: json.loads stops at the `}` after the comma, line 5, column 36 ("Expecting property name
    enclosed in double quotes"); the layout and verdict are the strict file's."""
    assert TRAILING.splitlines()[4] == '  "zero_optimization": {"stage": 3,},'
    assert TRAILING.splitlines()[4].index("}") + 1 == 36
    strict, lenient = _run(STRICT, tmp_path, "strict.json"), _run(TRAILING, tmp_path, name)
    assert lenient.returncode == strict.returncode != 2, lenient.stderr
    said, read = json.loads(strict.stdout), json.loads(lenient.stdout)
    assert read["parallelism"] == said["parallelism"] and read["verdict"] == said["verdict"]
    (warning,) = [v for v in read["violations"] if v["rule"] == "json_not_strict"]
    assert warning["severity"] == "warning" and warning["line"] == 5
    assert warning["message"].startswith("not strict JSON at line 5, column 36: Expecting property name "
                                         "enclosed in double quotes; DeepSpeed reads it")
    assert "Hugging Face Trainer's json.load refuses it" in warning["message"]
    assert not [v for v in said["violations"] if v["rule"] == "json_not_strict"]


def test_comments_and_standard_input_are_read_as_deepspeed_reads_them(tmp_path):
    """hjson takes `//` and `#` comments; on standard input as in a file. The strict error is at the comment,
    line 2, column 3."""
    text = STRICT.replace("{\n", "{\n  // ZeRO-3 over 8 GPUs\n", 1)
    done = planner("check", "-", *OPTIONS, input=text)
    assert done.returncode != 2, done.stderr
    (warning,) = [v for v in json.loads(done.stdout)["violations"] if v["rule"] == "json_not_strict"]
    assert warning["message"].startswith("not strict JSON at line 2, column 3:")
    assert json.loads(done.stdout)["parallelism"]["zero_stage"] == 3


def test_what_deepspeed_refuses_stays_a_syntax_error(tmp_path):
    """A key given twice (DeepSpeed's object_pairs_hook raises) and a bracket that does not close the mapping
    (hjson raises): exit 2 at the strict error's line, no config read."""
    twice = TRAILING.replace('"gradient_accumulation_steps": 8,', '"gradient_accumulation_steps": 8,\n'
                                                                   '  "gradient_accumulation_steps": 4,')
    done = _run(twice, tmp_path, "twice.json")
    assert done.returncode == 2 and "JSON syntax error at line 6" in done.stderr, done.stderr
    broken = _run(STRICT.replace('{"stage": 3}\n}', '{"stage": 3}\n]'), tmp_path, "broken.txt")
    assert broken.returncode == 2 and "JSON syntax error at line 6, column 1" in broken.stderr, broken.stderr
    # a Python dict YAML reads but hjson does not (`True}}` is one quoteless string to the end of the line)
    python = _run("{'train_micro_batch_size_per_gpu': 1, 'bf16': {'enabled': True}}\n", tmp_path, "py.txt")
    assert python.returncode == 2 and "JSON syntax error at line 1, column 2" in python.stderr, python.stderr
    assert "neither strict JSON nor what DeepSpeed's own reader, hjson, takes" in python.stderr
