"""`planner check` on hand-edited plan files: every key `plan -o` does not write is rejected, every
key it writes is required (etp and request.fixed excepted), errors name the plan file and the key
where the value is, once, the CLI's bounds hold, and the num_microbatches finding's fix is a change
that makes the batch divide (planner/check/plan_file.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.check import plan_file
from planner.cli import app
from planner.placement.layout import PRECISION_KNOBS

runner = CliRunner()
BASE = Path("tests/data/plans/llama-3.1-70b-64xh100-pp4-cp4.plan.yaml")
"""`planner plan -o` of llama-3.1-70b on 64 H100s pinned to tp2 pp4 cp4 ZeRO-1 (request.fixed then
emptied): dp2 tp2 pp4 cp4, b1, batch 1024, per-stage recompute, the tuned overlaps."""
PAR_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "sequence_parallel",
            "micro_batch_size", "global_batch_size", "num_microbatches", "vpp", "recompute",
            "pipeline_layers", "overlap")
REQUEST_KEYS = ("seq_len", "global_batch_size", "precision", "optimizer", "framework",
                "grad_reduce_dtype", "fixed", "headroom", "reserve_bytes")


def _doc() -> dict:
    return copy.deepcopy(yaml.safe_load(BASE.read_text()))


def _section(doc: dict, section: str) -> dict:
    """The mapping at a dotted key path ("" = the top level)."""
    for part in filter(None, section.split(".")):
        doc = doc[part]
    return doc


def _check(tmp_path, doc, *extra, name="edited.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, runner.invoke(app, ["check", str(path), *extra])


def _bad_input(tmp_path, doc) -> tuple[str, str]:
    """(the one error line, the plan file's path) of a file that must be bad input."""
    path, result = _check(tmp_path, doc)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    return lines[0], str(path)


def _consistency(tmp_path, doc) -> list[dict]:
    _, result = _check(tmp_path, doc, "--format", "json")
    assert result.exit_code == 1, result.output
    return [v for v in json.loads(result.output)["violations"] if v["rule"] == "plan_consistency"]


def test_the_base_file_passes():
    result = runner.invoke(app, ["check", str(BASE)])
    assert result.exit_code == 0, result.output


def test_reader_allows_exactly_the_keys_plan_writes(tmp_path):
    """A fresh `plan -o` has the reader's key set at every level: a key the writer adds, or drops,
    fails here before users meet it."""
    out = tmp_path / "tiny.plan.yaml"
    result = runner.invoke(app, ["plan", "-m", "tests/data/models/tiny.yaml", "-c",
                                 "tests/data/clusters/custom-pcie.yaml", "--gpus", "4",
                                 "--format", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text())
    assert list(doc) == ["kind", "version", "model", "cluster", "gpus", "request", "plan",
                         "predicted", "solver"]
    # the precision-aware optimizer's knobs and the recompute modules are written only when given
    # (tests/test_precision_aware_optimizer.py, test_recompute_modules.py read them back)
    assert tuple(doc["request"]) == REQUEST_KEYS == tuple(
        k for k in plan_file._KEYS["request"] if k not in (*PRECISION_KNOBS, "recompute_modules", "offload_modules"))
    assert list(doc["plan"]) == ["parallelism"]
    assert tuple(doc["plan"]["parallelism"]) == PAR_KEYS
    # `pipeline_layout` is written only for uneven interleaved plans, the module lists only when
    # asked for or chosen by the search (Megatron-LM), `compile` (torch.compile) only where the
    # layout sets it (torchtitan plans), `recompute_layers` only where the per-stage counts do not
    # say which layers are recomputed (tests/test_check.py, interleaved plans), `fp8_param_gather`
    # only where the search chose it on (tests/test_fp8_gather_search.py), `buckets` never (a
    # hand-written DeepSpeed plan's ZeRO bucket sizes, tests/test_emit_deepspeed.py), `offload`
    # only where the search offloads a state (tests/test_offload_search.py)
    assert plan_file._KEYS["plan.parallelism"] == (*PAR_KEYS, "pipeline_layout", "cp_comm_type",
                                                   "moe_dispatcher", "compile", "recompute_modules",
                                                   "offload_modules", "recompute_layers", "fp8_param_gather",
                                                   "buckets", "offload")
    assert {"pipeline_layout", "cp_comm_type", "overlap", "compile", "moe_dispatcher", "recompute_modules",
            "offload_modules", "recompute_layers", "buckets", "offload"} <= plan_file._OPTIONAL
    assert runner.invoke(app, ["check", str(out)]).exit_code == 0


@pytest.mark.parametrize("section, key, value, hint", [
    ("plan.parallelism", "tensor_parallel", 8, "did you mean 'tp'?"),
    ("plan.parallelism", "pipeline_model_parallel_size", 4, "did you mean 'pp'?"),
    ("plan.parallelism", "offload_module", ["core_attn"], "did you mean 'offload_modules' or 'offload'?"),
    ("plan.parallelism", "dp_shard", 3, "allowed here: dp, tp"),
    ("plan.parallelism", "seq_len", 8192, "belongs at request.seq_len"),
    ("plan.parallelism", "precision", "fp8", "belongs at request.precision"),
    ("plan.parallelism", "zero_stag", 1, "did you mean 'zero_stage'?"),
    ("plan", "recompute", "full", "belongs at plan.parallelism.recompute"),
    ("request", "seqlen", 8192, "did you mean 'seq_len'?"),
    ("request", "gpus", 64, "belongs at gpus, not under request"),
    ("request", "at_risk_margin", 0.2, "allowed here: seq_len"),
    ("", "notes", "tuned by hand", "allowed here: kind, version"),
    ("", "parallelism", {"tp": 8}, "belongs at plan.parallelism, not at the top level"),
])
def test_unknown_keys_are_bad_input_with_their_path_and_a_hint(tmp_path, section, key, value, hint):
    doc = _doc()
    _section(doc, section)[key] = value
    line, _ = _bad_input(tmp_path, doc)
    path = f"{section}.{key}" if section else key
    assert f": {path}: unknown key; " in line and hint in line


def test_predicted_and_solver_are_free_form(tmp_path):
    doc = _doc()
    doc["predicted"]["note"] = "measured 41.2 s on the real cluster"
    doc["predicted"]["time_s"]["measured"] = "41.2 s"
    doc["solver"]["anything"] = [1, 2]
    _, result = _check(tmp_path, doc)
    assert result.exit_code == 0, result.output
    del doc["predicted"], doc["solver"]
    _, result = _check(tmp_path, doc)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("edit, key", [
    (lambda p: p["time_s"].update(step="fast"), "predicted.time_s.step"),
    (lambda p: p["time_s"].update(step=None), "predicted.time_s.step"),
    (lambda p: p["time_s"].update(step=float("nan")), "predicted.time_s.step"),
    (lambda p: p["memory_bytes"].update(total=True), "predicted.memory_bytes.total"),
    (lambda p: p["memory_bytes"].update(total="80 GB"), "predicted.memory_bytes.total"),
    (lambda p: p.update(time_s=12.5), "predicted.time_s"),
])
def test_predicted_numbers_the_gate_compares_must_be_numbers(tmp_path, edit, key):
    doc = _doc()
    edit(doc["predicted"])
    line, _ = _bad_input(tmp_path, doc)
    assert f": {key}: value " in line


@pytest.mark.parametrize("section, key", [
    *(("plan.parallelism", k) for k in PAR_KEYS if k not in ("etp", "overlap")),
    *(("request", k) for k in REQUEST_KEYS if k not in ("fixed", "grad_reduce_dtype")),
    *(("", k) for k in ("model", "cluster", "gpus", "request", "plan")),
])
def test_every_key_plan_writes_is_required(tmp_path, section, key):
    """Deleting sequence_parallel used to check with SP off, deleting recompute with none."""
    doc = _doc()
    del _section(doc, section)[key]
    line, _ = _bad_input(tmp_path, doc)
    path = f"{section}.{key}" if section else key
    assert f": {path}: missing" in line


def test_etp_and_fixed_may_be_absent(tmp_path):
    """Files written before etp was recorded have none (etp was then 1); a hand-written plan pins
    nothing."""
    doc = _doc()
    del doc["plan"]["parallelism"]["etp"], doc["request"]["fixed"]
    _, result = _check(tmp_path, doc, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["parallelism"]["etp"] == 1


@pytest.mark.parametrize("fixed, key", [
    ([8], "request.fixed"),
    (None, "request.fixed"),
    ({"tensor": 2}, "request.fixed.tensor"),
    ({"seq_len": 4096}, "request.fixed.seq_len"),
    ({"tp": "two"}, "request.fixed.tp"),
    ({"tp": 0}, "request.fixed.tp"),
    ({"sequence_parallel": "yes"}, "request.fixed.sequence_parallel"),
    ({"recompute": "sometimes"}, "request.fixed.recompute"),
])
def test_fixed_must_map_fixable_keys_to_their_kind_of_value(tmp_path, fixed, key):
    doc = _doc()
    doc["request"]["fixed"] = fixed
    line, _ = _bad_input(tmp_path, doc)
    assert f": {key}: " in line


def test_fixed_values_that_agree_with_the_plan_pass(tmp_path):
    doc = _doc()
    doc["request"]["fixed"] = {"tp": 2, "cp": 4, "sequence_parallel": True, "zero_stage": 1}
    _, result = _check(tmp_path, doc)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("fixed, shown", [
    ({"tp": 3}, "request.fixed pins tp=3 but plan.parallelism.tp is 2"),
    ({"sequence_parallel": False}, "pins sequence_parallel=False but plan.parallelism.sequence_parallel is True"),
    # the file's stage 0 recomputes 2 layers full, the rest none: not all selective
    ({"recompute": "selective"}, "pins recompute='selective'"),
])
def test_fixed_value_contradicting_the_plan_is_a_finding(tmp_path, fixed, shown):
    doc = _doc()
    doc["request"]["fixed"] = fixed
    found = _consistency(tmp_path, doc)
    assert any(shown in v["message"] for v in found), found


def test_unknown_model_names_the_plan_file_and_key(tmp_path):
    doc = _doc()
    doc["model"] = "nope"
    line, path = _bad_input(tmp_path, doc)
    assert line.startswith(f"error: {path}: model: unknown model 'nope'")


@pytest.mark.parametrize("key", ["model", "cluster"])
def test_relative_path_that_does_not_resolve_says_where_it_was_looked_up(tmp_path, key):
    doc = _doc()
    doc[key] = "configs/missing.yaml"
    line, _ = _bad_input(tmp_path, doc)
    assert f": {key}: configs/missing.yaml: no such file" in line
    assert f"relative path is resolved from the plan file's directory, {tmp_path}" in line


def test_gpu_count_error_names_plan_file_gpus(tmp_path):
    """dgx-h100 has 8 GPUs per node: 63 is not whole nodes; 56 and 64 are."""
    doc = _doc()
    doc["gpus"] = 63
    line, path = _bad_input(tmp_path, doc)
    assert line.startswith(f"error: {path}: gpus: value 63 must be 1..7 or a multiple of 8")
    assert "56, 64" in line and "--gpus" not in line and "hardware/" not in line


@pytest.mark.parametrize("key, value", [
    ("precision", "fp32"), ("optimizer", "lion"), ("framework", "jax"), ("seq_len", 0),
    ("global_batch_size", 0),
])
def test_request_errors_are_reported_under_request(tmp_path, key, value):
    doc = _doc()
    doc["request"][key] = value
    line, _ = _bad_input(tmp_path, doc)
    assert f": request.{key}: value {value!r}" in line and "parallelism" not in line


@pytest.mark.parametrize("key", ["etp", "tp", "vpp", "micro_batch_size"])
def test_parallelism_errors_name_the_key_once(tmp_path, key):
    doc = _doc()
    doc["plan"]["parallelism"][key] = 0
    line, path = _bad_input(tmp_path, doc)
    assert line.startswith(f"error: {path}: plan.parallelism.{key}: value 0")
    assert line.count("plan.parallelism") == 1


def test_pipeline_split_of_the_wrong_length_is_reported_under_its_key(tmp_path):
    doc = _doc()
    doc["plan"]["parallelism"]["pipeline_layers"] = [40, 40]  # pp is 4
    line, _ = _bad_input(tmp_path, doc)
    assert ": plan.parallelism.pipeline_layers: value [40, 40] must be 4 " in line


@pytest.mark.parametrize("where, key, value", [
    ("request", "headroom", 0.95),
    ("request", "headroom", -0.1),
    ("request", "headroom", "10%"),
    ("request", "reserve_bytes", 1024 * 2**30 + 1),
    ("request", "reserve_bytes", -1),
    ("request", "seq_len", 2**24 + 1),
    # 1,025 x 2**24 tokens = 2**34 + 2**24 > MAX_BATCH_TOKENS = 2**34
    ("request", "global_batch_size", 1025),
    ("request", "global_batch_size", -1024),
    ("", "gpus", 2**22 + 8),
    ("", "gpus", 0),
    ("plan.parallelism", "vpp", 129),
    ("plan.parallelism", "num_microbatches", -512),
    ("plan.parallelism", "num_microbatches", 0),
    ("plan.parallelism", "global_batch_size", -1024),
    ("plan.parallelism", "zero_stage", 4),
    ("plan.parallelism", "dp", 2**22 + 1),
])
def test_values_outside_the_cli_bounds_are_bad_input(tmp_path, where, key, value):
    doc = _doc()
    if key == "global_batch_size" and value == 1025:
        doc["request"]["seq_len"] = 2**24
        doc["plan"]["parallelism"]["global_batch_size"] = 1025
    _section(doc, where)[key] = value
    line, _ = _bad_input(tmp_path, doc)
    assert f": {f'{where}.{key}' if where else key}: value " in line


def test_bounds_are_inclusive(tmp_path):
    """--headroom max 0.9 and --reserve-gib max 1024 are accepted (the stages then fail memory)."""
    doc = _doc()
    doc["request"].update(headroom=0.9, reserve_bytes=1024 * 2**30)
    _, result = _check(tmp_path, doc)
    assert result.exit_code == 1, result.output


def _set_batch(doc, gbs, **par):
    doc["request"]["global_batch_size"] = gbs
    doc["plan"]["parallelism"].update(global_batch_size=gbs, **par)


def _divides(gbs, dp, b) -> bool:
    return gbs % (dp * b) == 0 and gbs // (dp * b) >= 1


def test_batch_smaller_than_one_micro_batch_per_rank_fix_changes_the_batch(tmp_path):
    """dp=2, b=1, one sequence: 1 / (2 x 1) = 0.5 micro-batches. No micro-batch size helps (dp=2
    does not divide 1); the fix names 2 = the least multiple of dp x b, which gives m = 1."""
    doc = _doc()
    _set_batch(doc, 1, num_microbatches=1)
    (v,) = [v for v in _consistency(tmp_path, doc) if "num_microbatches" in v["message"]]
    assert "1 / (2 x 1) = 0.5" in v["message"]
    assert "num_microbatches: 0" not in v["fix"]
    assert "global_batch_size" in v["fix"] and "2 (num_microbatches: 1)" in v["fix"]
    assert "micro_batch_size:" not in v["fix"] and _divides(2, 2, 1)


def test_micro_batch_too_large_for_the_batch_fix_offers_a_smaller_micro_batch(tmp_path):
    """dp=2, b=4, batch 6: 6 / 8 = 0.75. Fixes: batch 8 (m = 1), or b = 3 (6 / (2 x 3) = 1)."""
    doc = _doc()
    _set_batch(doc, 6, micro_batch_size=4, num_microbatches=1)
    (v,) = [v for v in _consistency(tmp_path, doc) if "num_microbatches" in v["message"]]
    assert "num_microbatches: 0" not in v["fix"]
    assert "8 (num_microbatches: 1)" in v["fix"] and _divides(8, 2, 4)
    assert "micro_batch_size: 3 (num_microbatches: 1)" in v["fix"] and _divides(6, 2, 3)


def test_batch_not_divisible_fix_offers_both_neighbours_and_a_divisor(tmp_path):
    """dp=2, b=4, batch 1020: 1020 / 8 = 127.5. Batches 1016 (m 127) or 1024 (m 128); or b = 2,
    gcd(510, 4): 1020 / (2 x 2) = 255."""
    doc = _doc()
    _set_batch(doc, 1020, micro_batch_size=4, num_microbatches=128)
    (v,) = [v for v in _consistency(tmp_path, doc) if "num_microbatches" in v["message"]]
    assert "1016 (num_microbatches: 127) or 1024 (num_microbatches: 128)" in v["fix"]
    assert "micro_batch_size: 2 (num_microbatches: 255)" in v["fix"] and _divides(1020, 2, 2)


def test_num_microbatches_off_with_a_dividing_batch_fix_sets_it(tmp_path):
    """1024 / (2 x 1) = 512."""
    doc = _doc()
    doc["plan"]["parallelism"]["num_microbatches"] = 500
    (v,) = _consistency(tmp_path, doc)
    assert v["fix"] == "set num_microbatches: 512"


def test_an_uneven_interleaved_plan_file_round_trips(tmp_path):
    """`plan --fix pp=4 --fix vpp=3` for llama-3.1-8b (32 layers, 12 virtual stages: not equal
    chunks) writes `pipeline_layout` (Megatron's layout string, 1 + 30 + 1 layers around the
    embedding and loss); `check` reads it back unchanged and passes; a non-string layout is bad
    input naming the key."""
    out = tmp_path / "il.yaml"
    made = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                               "--fix", "pp=4", "--fix", "vpp=3", "--top", "1", "-o", str(out)])
    assert made.exit_code == 0, made.output
    doc = yaml.safe_load(out.read_text())
    text = doc["plan"]["parallelism"]["pipeline_layout"]
    # 34 slots (32 layers, embedding, loss) over 12 virtual stages: 10 of 3, the first and last
    # of 2, the embedding / loss taking a slot each -> 1 + 10 x 3 + 1 = 32 layers
    stages = [len(part) for part in ("t" + "|ttt" * 10 + "|t").split("|")]
    assert text == "Et|(t*3|)*10tL" and sum(stages) == 32 and len(stages) == 12
    result = runner.invoke(app, ["check", str(out)])
    assert result.exit_code == 0, result.output
    doc["plan"]["parallelism"]["pipeline_layout"] = 7
    line, _ = _bad_input(tmp_path, doc)
    assert "plan.parallelism.pipeline_layout: value 7 must be a layout string" in line


@pytest.mark.parametrize("kind", ["trainingplan", "Training-Plan", "training_plan", "serving-plans"])
def test_misspelled_kind_names_the_kind_meant(tmp_path, kind):
    """Fresh-user review #8: `kind: trainingplan` was the generic 'not a configuration' list; now the key, the value
    and the kind meant (difflib)."""
    from planner.check import read_target
    from planner.errors import SpecError as _SpecError
    path = tmp_path / "p.yaml"
    path.write_text(f"kind: {kind}\nversion: 1\n")
    meant = "serving-plan" if "serv" in kind else "training-plan"
    with pytest.raises(_SpecError, match=f"did you mean '{meant}'"):
        read_target(path)


def test_a_bad_overlap_value_names_its_key_path_once(tmp_path):
    """Fresh-user review 6 finding 11: `plan.parallelism.plan.parallelism.overlap.tp_comm_overlap`."""
    doc = _doc()
    doc["plan"]["parallelism"]["overlap"]["tp_comm_overlap"] = "yes"
    line, path = _bad_input(tmp_path, doc)
    assert line == f"error: {path}: plan.parallelism.overlap.tp_comm_overlap: value 'yes' must be true or false"
