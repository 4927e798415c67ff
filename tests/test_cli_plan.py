"""`planner plan` through typer's CliRunner: formats, pins, exit codes, plan file round trip."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from planner import plan as P
from planner.cli import app
from planner.cost.step_time import step_time
from planner.explain import explain
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

runner = CliRunner()
BASE = ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--seq-len", "2048",
        "--global-batch-size", "64"]


def _run(*args: str):
    return runner.invoke(app, [*BASE, *args])


@pytest.fixture(scope="module")
def pinned_json():
    """A search with recompute pinned, so the top plan's Layout is exactly what explain costs."""
    result = _run("--fix", "recompute=selective", "--fix", "tp=2", "--format", "json", "--top", "2")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_has_the_issue_keys(pinned_json):
    data = pinned_json
    assert set(data["solver"]) >= {"status", "objective_s", "bound_s", "wall_s", "candidates_evaluated"}
    assert data["solver"]["status"] == "OPTIMAL"
    plan = data["plans"][0]
    assert set(plan["parallelism"]) >= {"dp", "tp", "pp", "cp", "ep", "zero_stage", "sequence_parallel",
                                        "micro_batch_size", "num_microbatches", "vpp", "recompute",
                                        "pipeline_layers"}
    assert set(plan["time_s"]) == {"step", "compute", "communication_exposed", "pipeline_bubble",
                                   "recompute", "optimizer"}
    assert {"memory_bytes", "memory_verdict", "communication_bytes_per_step", "tokens_per_s",
            "tflops_per_gpu", "mfu"} <= set(plan)
    assert isinstance(data["rejected"], list)
    # Pins are honoured, never dropped.
    assert all(p["parallelism"]["tp"] == 2 and p["parallelism"]["recompute"] == "selective"
               for p in data["plans"])
    # ranked by the solver's objective; the reported step is re-costed, equal to ~1e-15 on ties
    assert len(data["plans"]) == 2
    assert data["plans"][0]["time_s"]["step"] <= data["plans"][1]["time_s"]["step"] * (1 + 1e-12)


def test_top_plan_is_what_explain_and_step_time_say(pinned_json):
    """The reported plan is exactly `planner explain` + step_time of its Layout."""
    data = pinned_json
    layout = P.plan_layout(data["plans"][0], data["request"])
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", gpus=8)
    ex = explain(model, cluster, layout)
    plan = data["plans"][0]
    mem = {k: v for k, v in plan["memory_bytes"].items() if k != "stage"}
    assert mem == ex["memory_bytes"]
    assert plan["memory_verdict"] == ex["memory_verdict"]
    assert plan["communication_bytes_per_step"] == ex["communication_bytes_per_step"]
    st = step_time(model, cluster, layout)
    assert plan["time_s"]["step"] == pytest.approx(st.step, rel=1e-12)
    assert plan["mfu"] == pytest.approx(st.mfu, rel=1e-12)


def test_plan_file_round_trips_to_the_same_layout(tmp_path, pinned_json):
    out = tmp_path / "plan.yaml"
    result = _run("--fix", "recompute=selective", "--fix", "tp=2", "-o", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text())
    assert doc["model"] == "llama-3.1-8b" and doc["gpus"] == 8
    assert doc["solver"]["status"] == "OPTIMAL"
    assert P.plan_layout(doc["plan"], doc["request"]) == P.plan_layout(pinned_json["plans"][0],
                                                                       pinned_json["request"])
    assert doc["predicted"]["time_s"]["step"] == pytest.approx(pinned_json["plans"][0]["time_s"]["step"])


def test_table_shows_plans_status_memory_and_rejections():
    result = runner.invoke(app, [*BASE, "--fix", "tp=8", "--top", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("solver: OPTIMAL", "plans", "tokens/s", "MFU", "memory per GPU", "capacity", "tp8"):
        assert text in result.output


@pytest.mark.parametrize("fix, word", [("tq=2", "allowed"), ("tp=two", "integer"), ("tp", "key=value"), ("tq=2", "zero_stage, micro_batch_size"),
                                       ("recompute=most", "allowed"), ("sequence_parallel=maybe", "true"),
                                       ("zero_stage=5", "0, 1, 2, 3")])
def test_bad_pin_exits_2_naming_what_is_allowed(fix, word):
    result = _run("--fix", fix)
    assert result.exit_code == 2
    assert word in result.output


def test_both_batch_options_exit_2():
    result = _run("--global-batch-tokens", "131072")
    assert result.exit_code == 2 and "not both" in result.output


def test_global_batch_tokens_become_sequences():
    result = runner.invoke(app, [*BASE[:9], "--global-batch-tokens", "131072", "--fix", "tp=8",
                                 "--fix", "micro_batch_size=1", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["request"]["global_batch_size"] == 131072 // 2048


def test_405b_on_8_gpus_exits_1_with_the_minimum_gpu_count():
    """405B: 405.9e9 params x 18 B (Megatron: bf16 param 2 + fp32 main grad 4 + Adam fp32
    master/m/v 12) = 7.31e12 B; over 77.6 GiB = 8.33e10 B usable per H100 that is > 87 GPUs
    before any activation, i.e. at least 11 nodes of 8 = 88 GPUs. Over the 8 GPUs asked for
    (69.7 GiB usable each: 10% headroom, 2 GiB reserve) the states are 7.31e12 / 8 B = 850.5 GiB
    per GPU, which the message names as what binds, without a search (fresh-user review 6,
    finding 5)."""
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "8"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "use at least" in text and "GPUs" in text and "model states alone" in text
    assert "are 850.5 GiB per GPU" in text and "405.9B parameters x 18 bytes" in text
    gpus = int(text.split("use at least ")[1].split(" GPUs")[0])
    assert gpus >= 88 and gpus % 8 == 0


def test_expert_pins_on_a_dense_model_and_an_oversized_reserve_are_bad_input():
    from typer.testing import CliRunner

    from planner.cli import app
    runner = CliRunner()
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--fix", "ep=2"])
    assert result.exit_code == 2 and "routed experts" in result.output
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--reserve-gib", "80"])
    assert result.exit_code == 2 and "--reserve-gib" in result.output


def test_a_precision_the_gpu_cannot_run_is_bad_input():
    """A100 tensor cores run bf16 and fp16, not fp8 (hardware/dgx-a100-80g.yaml peak_tflops):
    asking fp8 is bad input (exit 2, one line naming the GPU), as serve-plan refuses a weight
    format the GPU cannot run -- not an infeasible search (exit 1)."""
    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-a100-80g", "--gpus", "8",
                                      "--precision", "fp8"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "--precision" in text and "A100-SXM4-80GB has no fp8 tensor cores; it runs bf16, fp16" in text
    assert len(result.output.strip().splitlines()) <= 2  # one error line (wrapped at most once)


def test_output_that_is_an_input_file_is_refused(tmp_path):
    """Fresh-user defect: `-o` pointed at the model's own config.json destroyed it. The model file,
    a model directory's config.json, and the catalog's own files are refused before any work."""
    import shutil

    from typer.testing import CliRunner

    from planner.cli import app
    runner = CliRunner()
    model = tmp_path / "tiny.yaml"
    shutil.copy("tests/data/models/tiny.yaml", model)
    before = model.read_bytes()
    cluster = "tests/data/clusters/custom-pcie.yaml"
    for args in (["-m", str(model), "-c", cluster, "--gpus", "4", "-o", str(model)],
                 ["-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "-o", "models/llama-3.1-8b.yaml"],
                 ["-m", "llama-3.1-8b", "-c", cluster, "--gpus", "4", "-o", cluster]):
        result = runner.invoke(app, ["plan", *args])
        assert result.exit_code == 2 and "would overwrite it" in result.output, result.output
    assert model.read_bytes() == before
    hf = tmp_path / "hf"
    hf.mkdir()
    shutil.copy("tests/data/models/tiny-llama/config.json", hf / "config.json")
    result = runner.invoke(app, ["plan", "-m", str(hf), "-c", cluster, "--gpus", "4",
                                 "-o", str(hf / "config.json")])
    assert result.exit_code == 2 and "would overwrite it" in result.output


def test_pinned_degree_that_cannot_divide_the_gpus_names_it_and_the_divisors():
    """Fresh-user defect: `--fix tp=3 --gpus 64` said "pinned {'tp': 3} do not divide 64 GPUs"
    (a Python dict) with no alternative. 64 = 2^6: its divisors are 1, 2, 4, ..., 64."""
    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus",
                                      "64", "--fix", "tp=3"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "pinned tp=3 does not divide 64 GPUs" in text and "1, 2, 4, 8, 16, 32, 64" in text
    assert "{" not in text


def test_infeasible_message_terms_add_up():
    """Fresh-user defect: "exceeds it by 306.3 GiB, dominated by activations (726.0 GiB)" -- a term
    larger than the whole stage, costed with no recompute while the message says least-memory
    recompute. The dominant term can be no larger than usable + excess (the stage's total)."""
    import re

    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus",
                                      "8", "--seq-len", "131072", "--global-batch-size", "8",
                                      "--fix", "cp=1", "--fix", "tp=1"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    usable = float(re.search(r"\(([\d.]+) GiB usable", text).group(1))
    excess = float(re.search(r"by ([\d.]+) GiB, dominated", text).group(1))
    term = float(re.search(r"dominated by [a-z ]+ \(([\d.]+) GiB\)", text).group(1))
    assert term <= usable + excess + 2.0  # + the 2 GiB reserve, which usable excludes
    # no GPU count helps a sequence that one GPU's activations cannot hold: the advice says so
    assert "more cp" in text and "offload optimizer states" not in text


def test_unknown_fix_key_is_named_as_unknown():
    """Fresh-user defect: `--fix foo=1` said "'foo=1' must be key=value", which it is."""
    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--fix", "foo=1"])
    assert result.exit_code == 2 and "unknown key 'foo'" in result.output


@pytest.mark.parametrize(("seq_len", "sequences"), [
    (12288, 256),   # 4,194,304 / 12,288 = 341.3, log2 8.415: 2**8 (floored it was 341 = 11 x 31)
    (6144, 512),    # 4,194,304 / 6,144 = 682.7, log2 9.415: 2**9
    (4097, 1024),   # 4,194,304 / 4,097 = 1,023.75, log2 9.9994: 2**10 (floored 1,023 = 3 x 11 x 31)
    (4096, 1024),   # a power of two: exactly 4M tokens, as before
    (8192, 512),
])
def test_default_global_batch_is_the_nearest_power_of_two_of_sequences(seq_len, sequences):
    """Fresh-user defect: the default batch floored 4M tokens to whole sequences, an odd count at
    seq-len 12,288 (341 -> a dp-1 plan) or 4,097 (1,023 -> dp1 pp8 m1023)."""
    assert P.default_global_batch_size(seq_len) == sequences
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                                 "--seq-len", str(seq_len), "--format", "json", "--top", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["request"]["global_batch_size"] == sequences


def test_plan_states_the_memory_budget_its_optimum_is_under():
    """OPTIMAL is the optimum among layouts within capacity x (1 - headroom) - reserve (senior review:
    a faster layout set aside by the 10% headroom went unsaid): the JSON carries the budget and the
    table says it, with the headroom and reserve asked for."""
    args = ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--headroom", "0.2",
            "--reserve-gib", "3"]
    data = json.loads(runner.invoke(app, [*args, "--format", "json"]).output)
    capacity = data["plans"][0]["memory_bytes"]["capacity"]
    assert data["solver"]["memory_budget_bytes"] == int(capacity * 0.8) - 3 * 2**30
    table = runner.invoke(app, args, env={"COLUMNS": "200"}).output
    # the table's limit counts the reserve, as its memory column does (fresh-user review)
    assert f"within {int(capacity * 0.8) / 2**30:.1f} of {capacity / 2**30:.1f} GiB" in table
    assert "20% headroom; the 3.0 GiB reserve included" in table


L405 = ["plan", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus", "16384", "--seq-len", "8192",
        "--global-batch-size", "2048", "--fix", "cp=1", "--fix", "pp=16"]
"""Llama 3.1 405B (126 decoder layers) on 16,384 H100s at pp 16: every vpp > 1 splits unevenly."""


def test_uneven_interleaved_plan_prints_the_layout_explain_takes():
    result = runner.invoke(app, [*L405, "--fix", "vpp=4", "--format", "table"])
    assert result.exit_code == 0, result.output
    # 126 layers + embedding + loss = 128 slots = 64 virtual stages x 2 (Megatron's account-for
    # split): chunk 0 holds the embedding and 1 layer, the last 1 layer and the loss
    text = " ".join(result.output.split())  # the console wraps long lines
    plan_1 = text.split(" 1: ")[1].split(" 2: ")[0]
    assert "pipeline layout Et|(tt|)*62tL (layers per rank 7, 8x14, 7)" in plan_1
    layout = plan_1.split("pipeline layout ")[1].split(" (")[0]
    explained = runner.invoke(app, ["explain", "-m", "llama-3.1-405b", "-c", "dgx-h100", "--gpus",
                                    "16384", "--seq-len", "8192", "--global-batch-size", "2048",
                                    "--tp", "8", "--pp", "16", "--pipeline-layout", layout,
                                    "--format", "json"])
    assert explained.exit_code in (0, 1), explained.output  # 1: a memory verdict, not bad input
    par = json.loads(explained.output)["parallelism"]
    assert par["vpp"] == 4 and par["pipeline_layout"] == "Et|(tt|)*62tL"


def test_vpp_whose_virtual_stages_exceed_the_layers_but_not_the_slots_is_planned():
    # 16 x 8 = 128 virtual stages > 126 layers, = 126 + 2 slots: explain takes it with
    # --account-for-embedding --account-for-loss (chunk 0 the embedding alone, the last the loss)
    result = runner.invoke(app, [*L405, "--fix", "vpp=8", "--format", "json"])
    assert result.exit_code == 0, result.output
    par = json.loads(result.output)["plans"][0]["parallelism"]
    assert par["vpp"] == 8 and par["pipeline_layout"] == "E|(t|)*126L"
    assert par["pipeline_layers"] == [7] + [8] * 14 + [7]


def test_interleaved_candidate_the_stage_program_misjudges_is_solved_exactly():
    # vpp 7: 112 virtual stages over 126 layers + 2 slots, chunks of 1 or 2 layers. The stage
    # program's memory is not exact for chunks of different sizes; the none / full copies are
    # solved by costing every --recompute-num-layers (0, 1, 2: each chunk's first N layers) with
    # `stage_memory` and `step_time` themselves (`plan._solve_block`), so the plan fits and the
    # status is OPTIMAL (it was FEASIBLE while a per-stage mix was searched and re-costed).
    result = runner.invoke(app, [*L405, "--fix", "vpp=7", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    best = data["plans"][0]
    assert best["parallelism"]["vpp"] == 7 and best["memory_verdict"] == "fits"
    assert data["solver"]["status"] == "OPTIMAL"


def test_infeasible_message_never_states_a_negative_excess(monkeypatch):
    # with the none / full copies of the vpp 7 candidates given no plan although their split fits
    # with every layer recomputed, the message says so and names the pin that finds it (the
    # candidates' copies with selective recompute on every layer, which fit, left out)
    monkeypatch.setattr(P, "_solve_block", lambda costs, layout, modes: costs.infeasible.append(layout))
    modes_of = P._modes_of
    monkeypatch.setattr(P, "_modes_of", lambda layout, modes: modes_of(
        layout.replace(recompute="none"), modes))
    result = runner.invoke(app, [*L405, "--fix", "vpp=7"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "by -" not in text
    assert "fits with recompute=full on every layer" in text
    assert "smallest change: --fix recompute=full" in text


def test_an_infeasible_sequence_beyond_the_context_says_so():
    """fresh-user review 7: --seq-len 131073 on Llama 3.1 8B (max_position_embeddings 131,072) was told to
    split the sequence (more cp) without a word that the model was not built for that length."""
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                                 "--seq-len", "131073"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "seq_len=131,073 also exceeds llama-3.1-8b's max_position_embeddings=131,072" in text


def test_a_feasible_search_does_not_claim_optimal():
    """Senior review 8 finding 11: `solver: FEASIBLE` was followed by "optimal among layouts ...". A FEASIBLE
    status (here torchtitan's conventions: some candidate's bound is not closed) says "not proven optimal"."""
    from tests.cli_run import planner

    out = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--framework", "torchtitan",
                  "--top", "1")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "solver: FEASIBLE" in text
    assert "the best found (not proven optimal) among layouts" in text and "optimal among" not in text.replace(
        "not proven optimal) among", "")
