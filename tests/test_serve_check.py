"""`planner check` accepts what `planner serve-plan -o` writes, unchanged, and fails edited copies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _planner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    folder = tmp_path_factory.mktemp("serve")
    for name, extra in (("agg", ()), ("disagg", ("--disaggregated",))):
        path = folder / f"{name}.yaml"
        proc = _planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "4", "--input-len", "2000",
                        "--output-len", "300", "--ttft-ms", "1500", "--tpot-ms", "40", "-o", str(path), *extra)
        assert proc.returncode == 0, proc.stderr
        out[name] = path
    return out


@pytest.mark.parametrize("name", ["agg", "disagg"])
def test_plan_file_passes_unchanged(written, name):
    proc = _planner("check", str(written[name]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS") and "stale" not in proc.stdout


def _edited(written, tmp_path, change) -> Path:
    data = yaml.safe_load(written["agg"].read_text())
    change(data)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_indivisible_tp_fails(written, tmp_path):
    path = _edited(written, tmp_path, lambda d: d["plan"]["parallelism"].update(tp=3))
    proc = _planner("check", str(path))
    assert proc.returncode == 1 and "not divisible" in proc.stdout  # 32 heads / 3


def test_too_many_gpus_fails(written, tmp_path):
    path = _edited(written, tmp_path, lambda d: d["plan"]["parallelism"].update(replicas=9))
    proc = _planner("check", str(path))
    assert proc.returncode == 1 and "GPUs" in proc.stdout


def test_context_beyond_pool_fails(written, tmp_path):
    # 8B bf16 on one H100 at 0.9: ~ 0.9 x 79.6 - 15 - ~3 GiB = ~53 GiB / 128 KiB per token ~ 430k tokens
    def change(d):
        d["request"]["max_model_len"] = 131072
        d["request"]["mem_fraction"] = 0.25  # 19.9 GiB budget: the weights alone nearly fill it
    proc = _planner("check", str(_edited(written, tmp_path, change)))
    assert proc.returncode == 1 and ("context" in proc.stdout or "memory" in proc.stdout)


def test_stale_prediction_warns(written, tmp_path):
    path = _edited(written, tmp_path, lambda d: d["plan"].update(tpot_ms=d["plan"]["tpot_ms"] * 0.5))
    proc = _planner("check", str(path))
    assert proc.returncode == 0 and "stale prediction" in proc.stdout


def test_missing_key_is_bad_input(written, tmp_path):
    path = _edited(written, tmp_path, lambda d: d["request"].pop("engine"))
    proc = _planner("check", str(path))
    assert proc.returncode == 2 and "request.engine" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_disaggregated_plan_file_of_mixed_decode_shapes_counts_each_workers_gpus(tmp_path):
    """A mix whose decode workers differ in shape: the GPU count is the sum over its worker kinds (tp x pp x
    workers), not the slowest decode shape times every decode worker; the file passes unchanged."""
    path = tmp_path / "mix.yaml"
    proc = _planner("serve-plan", "-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "32", "--input-len", "8000",
                    "--output-len", "500", "--disaggregated", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    plan = yaml.safe_load(path.read_text())["plan"]
    assert sum(w["parallelism"]["tp"] * w["parallelism"]["pp"] * w["workers"] for w in plan["workers"]) == plan["gpus"]
    check = _planner("check", str(path))
    assert check.returncode == 0 and check.stdout.startswith("PASS"), check.stdout + check.stderr
    broken = tmp_path / "broken.yaml"
    data = yaml.safe_load(path.read_text())
    data["plan"]["workers"] = 3
    broken.write_text(yaml.safe_dump(data))
    bad = _planner("check", str(broken))
    assert bad.returncode == 2 and "plan.workers" in bad.stderr, bad.stdout + bad.stderr


def test_model_path_is_looked_up_beside_the_plan_file(tmp_path):
    """A serving plan file naming a local model folder by a relative path reads it beside the file, as a
    training plan file does (check/plan_file.load_beside), so the pair can be moved together and checked
    from any directory (fresh-user review: it was resolved from the working directory only)."""
    folder = tmp_path / "deploy"
    (folder / "tiny").mkdir(parents=True)
    (folder / "tiny" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16,
        "num_key_value_heads": 8, "num_hidden_layers": 16, "vocab_size": 32000, "max_position_embeddings": 8192,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False}))
    plan = folder / "plan.yaml"
    made = subprocess.run([sys.executable, "-m", "planner", "serve-plan", "-m", "tiny", "-c", "dgx-h100",
                           "--gpus", "1", "--input-len", "1000", "--output-len", "100", "-o", str(plan)],
                          capture_output=True, text=True, cwd=folder)
    assert made.returncode == 0, made.stderr
    assert yaml.safe_load(plan.read_text())["request"]["model"] == "tiny"
    checked = _planner("check", str(plan))   # run from the repository root, not from `folder`
    assert checked.returncode == 0, checked.stdout + checked.stderr
