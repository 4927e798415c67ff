"""Megatron-LM's learning-rate schedule assertion as a `check` rule, and `--emit megatron` scripts that pass it
(senior review 8: the emitted Llama script set 8,000 warm-up steps with 1,000 training steps, and Megatron-LM
d98e8a6 `megatron/core/optimizer_param_scheduler.py` l. 160 asserts lr_warmup_steps < lr_decay_steps, the decay
defaulting to --train-iters: `megatron/training/training.py` l. 2559-2569)."""
import json

import pytest

from tests.cli_run import planner


@pytest.fixture(scope="module")
def llama_script() -> str:
    result = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--emit", "megatron")
    assert result.returncode == 0, result.stderr
    return result.stdout


def _check(tmp_path, text: str) -> tuple[int, list[str]]:
    path = tmp_path / "train.sh"
    path.write_text(text)
    result = planner("check", str(path), "-m", "llama-3.1-8b", "-c", "dgx-h100", "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    report = doc["files"][0] if "files" in doc else doc
    return result.returncode, [v["rule"] for v in report.get("violations", report.get("errors", []))]


def test_emitted_llama_script_trains_past_its_warm_up(llama_script, tmp_path):
    """Llama 3's published warm-up is 8,000 steps (arXiv:2407.21783 §3.4.1): the emitted TRAIN_ITERS default is
    at least twice that, and the script passes the rule."""
    assert 'LR_WARMUP_ITERS="${LR_WARMUP_ITERS:-8000}"' in llama_script
    assert 'TRAIN_ITERS="${TRAIN_ITERS:-16000}"' in llama_script
    code, rules = _check(tmp_path, llama_script)
    assert code == 0 and "lr_warmup_not_below_decay" not in rules


@pytest.mark.parametrize("replace, fails", [
    (("${TRAIN_ITERS:-16000}", "${TRAIN_ITERS:-1000}"), True),      # 8,000 warm-up >= 1,000 steps
    (("${TRAIN_ITERS:-16000}", "${TRAIN_ITERS:-8000}"), True),      # equal: not below
    (("${TRAIN_ITERS:-16000}", "${TRAIN_ITERS:-8001}"), False),
    (('--train-iters "$TRAIN_ITERS"', '--train-iters "$TRAIN_ITERS" --lr-decay-iters 20000'), False),
    (('--train-iters "$TRAIN_ITERS"', '--train-iters "$JOB_ITERS"'), False),  # the job's environment: unread
])
def test_warm_up_not_below_decay_is_megatrons_start_up_error(llama_script, tmp_path, replace, fails):
    text = llama_script.replace(*replace)
    assert text != llama_script
    code, rules = _check(tmp_path, text)
    assert ("lr_warmup_not_below_decay" in rules) is fails
    assert (code == 1) is fails
