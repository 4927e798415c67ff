"""Megatron-LM's start-up assertions on MoE as `check` rules: the MoE part of the start-up assertion
tests of `test_check_megatron_startup.py`.

senior9 review finding 2: at NVIDIA/Megatron-LM@d98e8a6 `validate_args` no longer asserts sequence
parallelism for MoE at tp > 1 (the assertion the review quotes left arguments.py in 2024 and survives
only in yaml_arguments.py); the MoE layer raises a ValueError at the first training forward instead
(moe_layer.py l. 636-640), so the job still dies in its first step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli_run
from planner.emit import emit
from planner.errors import SpecError
from tests.test_emit_megatron import _flags, _hand

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
