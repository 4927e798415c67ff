"""The CLI never answers with a traceback: random argument vectors to `planner check` (and the
light commands) -- real and missing files, files of random or near-valid content, options with
random values, unknown options, standard input as `-` -- exit 0, 1 or 2 with no traceback; random
vectors again in a subprocess with standard output closed or in an ASCII locale (C, with and
without Python's UTF-8 mode), where every byte written is ASCII."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from budget import examples
from planner.cli import app

ROOT = Path(__file__).resolve().parents[1]
REAL_FILES = ("examples/llama-3.1-70b-64xh100.plan.yaml",
              "examples/llama-3.1-70b-64xh100-tp8.plan.yaml",
              "examples/pretrain_llama3_8b_tp16.sh",
              "tests/data/configs/torchtitan/llama3_8b.toml",
              "tests/data/configs/deepspeed/zero2_bf16.json",
              "tests/data/configs/megatron/llama3_8b_h100_fp8.sh",
              "pyproject.toml", "README.md", "no/such/file.yaml", "-")
CONTENTS = (
    "", "{", "[training]\nlocal_batch_size = 'x'\n", "kind: training-plan\nversion: 1\n",
    '{"train_batch_size": -1, "zero_optimization": {"stage": 9}}',
    "--num-layers 2 --hidden-size 8 --num-attention-heads 0 --micro-batch-size 1\n",
    "--tensor-model-parallel-size $((2*\n", "\x00\xff binary", "- a\n- b\n",
    "--module llama3 --config llama3_8b --parallelism.tensor_parallel_degree 3\n",
)
SUFFIXES = (".yaml", ".json", ".toml", ".sh", ".txt", "")
OPTIONS = ("--model", "-m", "--cluster", "-c", "--gpus", "--seq-len", "--recompute", "--format",
           "-f", "--help", "--bogus", "-o")
VALUES = st.one_of(
    st.sampled_from(("llama-3.1-8b", "llama-3.1-70b", "dgx-h100", "nope", "json", "yaml", "table",
                     "github", "junit", "full", "selective", "none", "0", "-1", "8", "64",
                     "1" + "0" * 30, "", " ", "--", "=", "é")),
    st.integers(-(2**40), 2**40).map(str),
    st.text(max_size=12))

runner = CliRunner()


def _argv(draw_files, options, values, command):
    argv = list(command) + list(draw_files)
    for option, value in zip(options, values):
        argv += [option, value]
    return argv


@st.composite
def _vectors(draw):
    files = draw(st.lists(st.sampled_from(REAL_FILES + ("@content",)), max_size=3))
    options = draw(st.lists(st.sampled_from(OPTIONS), max_size=4))
    values = draw(st.lists(VALUES, min_size=len(options), max_size=len(options)))
    command = draw(st.sampled_from((("check",), ("check",), ("check",), ("models",),
                                    ("models", "show"), ("clusters",), ("bogus",), ())))
    content = draw(st.sampled_from(CONTENTS))
    suffix = draw(st.sampled_from(SUFFIXES))
    shuffle = draw(st.booleans())
    argv = _argv(files, options, values, command)
    if shuffle:
        argv = argv[len(command):] + argv[:len(command)]
    return argv, content, suffix


def _materialise(argv, content, suffix, folder):
    path = Path(folder) / f"random{suffix}"
    path.write_bytes(content.encode("utf-8", "surrogateescape")
                     if "\x00" not in content else content.encode("latin-1"))
    return [str(path) if a == "@content" else a for a in argv]


@settings(max_examples=examples(60), deadline=None)
@given(_vectors())
def test_random_argument_vectors_exit_0_1_2_without_a_traceback(vector):
    argv, content, suffix = vector
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        argv = _materialise(argv, content, suffix, folder)
        os.chdir(ROOT)
        try:
            result = runner.invoke(app, argv, input=content.encode("utf-8", "surrogateescape"))
        finally:
            os.chdir(cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv, repr(result.exception))
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output)
    assert "Traceback" not in result.output, (argv, result.output)


SUBPROCESS_CASES = (
    ["check", "examples/llama-3.1-70b-64xh100-tp8.plan.yaml"],
    ["check", "examples/llama-3.1-70b-64xh100.plan.yaml", "pyproject.toml", "--format", "junit"],
    ["check", "examples/pretrain_llama3_8b_tp16.sh", "-m", "llama-3.1-8b", "-c", "dgx-h100",
     "--format", "github"],
    ["check", "no/such/file.sh", "--format", "yaml"],
)


@settings(max_examples=examples(4), deadline=None)
@given(st.sampled_from(SUBPROCESS_CASES), st.sampled_from(("closed", "ascii")))
def test_closed_or_ascii_stdout_in_a_subprocess(argv, stream):
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONIOENCODING="") if stream == "ascii" \
        else dict(os.environ)
    command = [sys.executable, "-m", "planner", *argv]
    if stream == "closed":
        proc = subprocess.run(["sh", "-c", " ".join(f"'{a}'" for a in command) + " >&-"],
                              capture_output=True, text=True, cwd=ROOT, env=env)
    else:
        proc = subprocess.run(command, capture_output=True, cwd=ROOT, env=env)
        proc.stderr = proc.stderr.decode("ascii", "replace")
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


STREAMS = {
    "closed": {},
    "C-ascii-stream": {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
    "C-utf8-mode": {"LC_ALL": "C"},
}
"""How the subprocess's standard output is set up: closed (`>&-`), or an ASCII locale in which
Python's stream says ascii (no coercion, no UTF-8 mode) or utf-8 (PEP 540's automatic UTF-8 mode)."""


@settings(max_examples=examples(6), deadline=None)
@given(_vectors(), st.sampled_from(sorted(STREAMS)))
def test_random_vectors_with_closed_or_ascii_stdout_in_a_subprocess(vector, stream):
    argv, content, suffix = vector
    env = {k: v for k, v in os.environ.items()
           if k not in ("LC_ALL", "LC_CTYPE", "LANG", "PYTHONIOENCODING", "PYTHONUTF8")}
    env.update(STREAMS[stream])
    with tempfile.TemporaryDirectory() as folder:
        argv = _materialise(argv, content, suffix, folder)
        command = [sys.executable, "-m", "planner", *argv]
        stdin = content.encode("utf-8", "surrogateescape") if "\x00" not in content else \
            content.encode("latin-1")
        if stream == "closed":
            quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in command)
            proc = subprocess.run(["sh", "-c", quoted + " >&-"], input=stdin, capture_output=True,
                                  cwd=ROOT, env=env, timeout=120)
        else:
            proc = subprocess.run(command, input=stdin, capture_output=True, cwd=ROOT, env=env,
                                  timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in (0, 1, 2), (argv, stream, err)
    assert "Traceback" not in err, (argv, stream, err)
    if stream != "closed":
        assert all(b < 128 for b in proc.stdout + proc.stderr), (argv, stream, proc.stdout[:400])
