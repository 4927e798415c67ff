"""`planner validate --suite training|memory|all` (issue 9 items 3-4): the loader on both data formats,
the statistics by hand, bad input, the issue's Done-when bars, and docs/validation.md being current.

Published values are read from tests/data/reference (copies of shared/reference) and checked against
the numbers printed in the papers / benchmark pages quoted beside them; statistics against hand
arithmetic written here.
"""

from __future__ import annotations

import json
import statistics
import zlib
from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

from planner import validate_training as vt
from planner.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def rows():
    return vt.default_rows()


@pytest.fixture(scope="module")
def evaluation(rows):
    return vt.validate(rows, suite="training", part="evaluation")


@pytest.fixture(scope="module")
def everything(rows):
    return vt.validate(rows, suite="all")


# ---------------------------------------------------------------- statistics by hand

def test_error_stats_by_hand():
    s = vt.error_stats([0.1, -0.2, 0.05, 0.3])
    # |e| = 0.1, 0.2, 0.05, 0.3 -> sorted 0.05, 0.1, 0.2, 0.3: median (0.1 + 0.2) / 2
    assert s["n"] == 4
    assert s["median_abs_error"] == pytest.approx(0.15)
    assert s["mean_abs_error"] == pytest.approx(0.65 / 4)
    assert s["max_abs_error"] == pytest.approx(0.3)
    assert s["within_10"] == 2 and s["within_25"] == 3
    assert s["bias"] == pytest.approx((0.1 - 0.2 + 0.05 + 0.3) / 4)       # +0.0625


def test_error_stats_of_nothing():
    assert vt.error_stats([]) == {"n": 0, "median_abs_error": None, "mean_abs_error": None,
                                  "max_abs_error": None, "within_10": 0, "within_25": 0, "bias": None}


def test_summarize_counts_verdicts_and_unexpressible_rows():
    base = dict(gpu_family="A100", model_class="dense", precision="bf16/fp16", not_expressible=None)
    rows = [dict(base, error=0.2, verdict="fits"), dict(base, error=-0.4, verdict="does_not_fit"),
            dict(base, gpu_family="unknown", error=None, verdict="not_expressible", not_expressible="why"),
            dict(base, precision="fp8", error=0.05, verdict="at_risk")]
    summary, by = vt.summarize(rows)
    assert summary["rows"] == 4 and summary["n"] == 3
    assert summary["does_not_fit"] == 1 and summary["not_expressible"] == 1
    assert summary["median_abs_error"] == pytest.approx(0.2)               # 0.05, 0.2, 0.4
    assert summary["bias"] == pytest.approx((0.2 - 0.4 + 0.05) / 3)
    assert set(by["gpu_family"]) == {"A100"}                               # unexpressible rows are not grouped
    assert by["gpu_family x precision"]["A100 bf16/fp16"]["n"] == 2
    assert by["precision"]["fp8"]["max_abs_error"] == pytest.approx(0.05)


def test_throughput_error_sign_convention():
    # step time: published 2.0 s, predicted 1.6 s -> the tool claims 2.0 / 1.6 = 1.25x the throughput
    assert vt.throughput_error(1.6, 2.0, "step_time_s") == pytest.approx(0.25)
    assert vt.throughput_error(120.0, 100.0, "tokens_per_s_per_gpu") == pytest.approx(0.2)


# ---------------------------------------------------------------- loader

def test_training_runs_rows_and_published_values(rows):
    by_id = {r.id: r for r in rows}
    # 53 rows in the file; Korthikanti's 4 give 2 comparisons each (full, selective + SP)
    assert len([r for r in rows if r.source == "training_runs"]) == 57
    assert by_id["megatron-sc21-t1-1008.0B"].published == 163                 # Narayanan 2021 Table 1
    assert by_id["megatron-sc21-t1-1008.0B"].convention == "hardware_tflops_per_gpu"
    assert by_id["llama3-405b-16384-8192"].published == 400                   # Llama 3 Table 4
    assert by_id["llama3-405b-16384-8192"].convention == "model_tflops_per_gpu"
    assert by_id["korthikanti2022-1T/full"].published == 94.42                # Korthikanti 2022 Table 5
    assert by_id["korthikanti2022-1T/sel+sp"].published == 71.49
    assert by_id["korthikanti2022-1T/full"].flash_attention is False
    tt = by_id["torchtitan-202412-t4-2d-asynctp"]                             # torchtitan Table 4
    assert (tt.published, tt.published_memory_gib, tt.cluster) == (876, 67.6, "grand-teton")
    assert (tt.layout.dp, tt.layout.tp, tt.layout.zero_stage, tt.layout.precision) == (32, 8, 3, "fp8")
    assert "async-tp" in tt.assumptions and "torch-compile" in tt.assumptions
    # AsyncTP is the TP overlap knob: on for the AsyncTP row, off for its 2D twin (Table 4)
    assert tt.layout.tp_comm_overlap is True
    assert by_id["torchtitan-202412-t4-2d"].layout.tp_comm_overlap is False
    # torch.compile as named in the techniques: Table 1 "FSDP" eager, "FSDP + torch.compile" compiled
    assert tt.layout.torch_compile is True
    assert by_id["torchtitan-202412-t1-fsdp"].layout.torch_compile is False
    assert by_id["torchtitan-202412-t1-compile"].layout.torch_compile is True


def test_torchtitan_table6_rows_take_the_caption(rows):
    """Table 6's caption: '+ torch.compile + Float8 + AsyncTP + 1F1B' (the rows say only '4D, 1F1B')."""
    t6 = next(r for r in rows if r.id == "torchtitan-202412-t6-4d-cp8")
    assert t6.layout.precision == "fp8" and (t6.layout.cp, t6.layout.dp, t6.layout.seq_len) == (8, 1, 262144)
    assert {"torchtitan-table6", "torch-compile", "async-tp"} <= set(t6.assumptions)
    assert t6.layout.torch_compile is True


def test_torchtitan_pipeline_rows_split_the_local_batch(rows):
    """Table 5: local batch 32 over pp 8 -> micro-batch 4 (torchtitan n_microbatches = pp); the
    interleaved row at 2 stages per rank: 126 layers as 2 x (8, 8, 8, 8, 7, 8, 8, 8)-like even chunks."""
    by_id = {r.id: r for r in rows}
    one, inter = by_id["torchtitan-202412-t5-3d-1f1b"].layout, by_id["torchtitan-202412-t5-3d-interleaved"].layout
    assert (one.pp, one.vpp, one.micro_batch_size, one.global_batch_size) == (8, 1, 4, 256)
    assert sum(one.pipeline_layers) == 126 and max(one.pipeline_layers) - min(one.pipeline_layers) <= 1
    assert inter.vpp == 2 and sum(inter.pipeline_layers) == 126 and all(n % 2 == 0 for n in inter.pipeline_layers)


def test_llama3_layout_is_the_papers_split(rows):
    """Llama 3 405B at pp 16 x vpp 4: 126 layers, the first and last stage one layer fewer (§3.3.2)."""
    lay = next(r for r in rows if r.id == "llama3-405b-8192-8192").layout
    from planner.placement import pipeline_layout
    counts = pipeline_layout.rank_counts(lay.pipeline_layout, lay.pp)
    assert counts == (7,) + (8,) * 14 + (7,)
    assert lay.recompute == "none"                      # '8K tokens without activation checkpointing'


def test_llama3_rows_are_fsdp_gradient_sharding_with_pp(rows):
    """Meta's FSDP (§3.3.2, §3.3.4) is costed as ZeRO-2 with PP with rule zero_with_pp waived (a
    Megatron / DeepSpeed rule), its gradients reduce-scattered once per step: the step time equals
    the ZeRO-1 layout's (one gradient reduce-scatter + one parameter all-gather per step either way),
    and the 16,384-GPU rows are no longer rated does_not_fit (83.7 GiB under ZeRO-1's whole fp32
    gradient buffer, senior7 H3). The 8,192-GPU row (m = 32) still is: docs/feasibility.md."""
    import dataclasses
    llama = {r.id: r for r in rows if r.group == "Llama3-405B-Table4"}
    assert all(r.layout.zero_stage == 2 for r in llama.values())
    row = llama["llama3-405b-16384-8192"]
    z2 = vt.predict(row)
    z1 = vt.predict(dataclasses.replace(row, layout=row.layout.replace(zero_stage=1)))
    assert z2.violations == () and z2.verdict in ("fits", "at_risk") and z1.verdict == "does_not_fit"
    assert z2.predicted == z1.predicted
    assert vt.predict(llama["llama3-405b-16384-131072"]).verdict in ("fits", "at_risk")
    assert vt.predict(llama["llama3-405b-8192-8192"]).verdict == "does_not_fit"


def test_expert_configs_rows(rows):
    by_id = {r.id: r for r in rows if r.source == "expert_configs"}
    assert set(by_id) == {"E1", "E2", "E3", "E6", "E9", "E10", "E13", "E16", "E18"}
    e13 = by_id["E13"]
    assert (e13.layout.dp, e13.layout.ep, e13.published, e13.moe) == (16, 16, 8960, True)
    assert by_id["E16"].cluster == "grand-teton"
    assert by_id["E2"].layout.dp == 64 // (4 * 8)
    assert all(r.convention == "tokens_per_s_per_gpu" for r in by_id.values())


def test_loader_reads_either_format_from_any_path(tmp_path):
    doc = yaml.safe_load(vt.EXPERT_CONFIGS.read_text())
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"expert_configs": doc["expert_configs"][:2]}))
    assert [r.id for r in vt.load_rows(path)] == ["E1", "E2"]
    runs = yaml.safe_load(vt.TRAINING_RUNS.read_text())["training_runs"]
    path.write_text(yaml.safe_dump({"training_runs": [r for r in runs if r["group"].startswith("Korthikanti")]}))
    assert len(vt.load_rows(path)) == 8


def test_split_rule_is_crc32_stratified_for_moe(rows):
    """crc32(id) % 4 == 0 for every dense row; MoE rows by the stratum rule, worked by hand:
    crc32 E9 = 2480021943 (% 4 = 3), E10 = 1771348263 (3), E13 = 4036882589 (1) -- all FIT by
    the hash, so B200's only MoE row E9 and H100's smaller-hash E10 are evaluated, E13 is fitted."""
    for r in rows:
        if not r.moe:
            assert r.part == ("evaluation" if zlib.crc32(r.row_id.encode()) % 4 == 0 else "fit")
    assert {r.part for r in rows if r.row_id.startswith("korthikanti2022-1T")} == {"fit"}
    assert {r.row_id: r.part for r in rows if r.moe} == {"E9": "evaluation", "E10": "evaluation",
                                                         "E13": "fit"}


def test_moe_stratum_keeps_a_hashed_evaluation_row_and_moves_nothing():
    """A family whose MoE rows already include an evaluation row by the hash keeps the hash."""
    base = next(r for r in vt.load_rows(vt.EXPERT_CONFIGS) if r.row_id == "E13")
    hashed = next(i for i in (f"m{n}" for n in range(100)) if vt.part_of(i) == "evaluation")
    fitted = next(i for i in (f"m{n}" for n in range(100)) if vt.part_of(i) == "fit")
    out = vt.stratified_parts([replace(base, id=i, row_id=i, part=vt.part_of(i))
                               for i in (hashed, fitted)])
    assert [r.part for r in out] == ["evaluation", "fit"]


def test_rows_that_cannot_be_expressed_stay_with_the_reason(everything):
    missing = {r["id"]: r["not_expressible"] for r in everything["suites"]["training"]["rows"]
               if r["not_expressible"]}
    assert set(missing) == {"opt-175b", "torchtitan-perfdoc-405b-128gpu"}
    assert "1024" in missing["opt-175b"] and "124" in missing["opt-175b"]    # batch 1024 over 124 hosts
    assert everything["suites"]["training"]["summary"]["not_expressible"] == 2


def test_json_has_the_issue_keys():
    result = runner.invoke(app, ["validate", "--suite", "training", "--part", "evaluation", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {"median_abs_error", "mean_abs_error", "max_abs_error", "n", "does_not_fit"} <= set(data["summary"])
    assert all("error" in r and "verdict" in r for r in data["rows"])
    assert set(data["by"]) == {"gpu_family", "model_class", "precision", "gpu_family x precision"}
    errors = [r["error"] for r in data["rows"] if r["error"] is not None]
    assert data["summary"]["median_abs_error"] == pytest.approx(statistics.median(abs(e) for e in errors))


def test_memory_suite_is_the_published_peaks():
    result = runner.invoke(app, ["validate", "--suite", "memory", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data["rows"]) == 18                       # torchtitan 2024-12 Tables 1-6
    t1 = next(r for r in data["rows"] if r["id"] == "torchtitan-202412-t1-fsdp")
    assert t1["published"] == 82.4 and t1["convention"] == "peak_memory_gib"
    assert t1["error"] == pytest.approx(t1["predicted"] / 82.4 - 1)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize(("content", "expected"), [
    ("runs: []\n", "top-level key(s) runs not allowed; allowed: exactly one of training_runs, expert_configs"),
    ("training_runs: [\n", "not readable as YAML"),
    ("id,tp\na,8\n", "is not a YAML mapping; allowed: one top-level key, training_runs or expert_configs"),
    ("training_runs:\n- {id: a, group: MT-NLG-530B, achieved_tflops_per_gpu: fast}\n",
     "training_runs[a].achieved_tflops_per_gpu: value 'fast' not allowed; allowed: a positive finite number"),
    ("training_runs: []\n", "training_runs: must be a non-empty list of rows"),
    ("training_runs:\n- group: x\n", "training_runs[0]: each row must be a mapping with a string `id`"),
    ("training_runs:\n- {id: a, group: Narayanan2021-Table1-weak-scaling, tp: eight}\n",
     "training_runs[a].tp: value 'eight' not allowed; allowed: a positive integer"),
    ("expert_configs:\n- {id: E1, model: llama-3.1-8b}\n", "expert_configs[0].cluster: missing value"),
    ("training_runs:\n- {id: a, group: x}\n- {id: a, group: y}\n",
     "training_runs[1].id: value 'a' given twice; each row needs its own id"),
    ("expert_configs:\n- {id: E1, model: llama-3.1-8b, cluster: dgx-h100, gpus: 8, seq_len: 8192, "
     "global_batch_seqs: 8, precision: fp4, framework: megatron, layout: {tp: 1}, "
     "measured_tokens_per_s_per_gpu: 100}\n", "expert_configs[0].precision: value 'fp4' not allowed"),
    ("expert_configs:\n- {id: E1, model: no-such-model, cluster: dgx-h100, gpus: 8, seq_len: 8192, "
     "global_batch_seqs: 8, precision: bf16, framework: megatron, layout: {tp: 1}, "
     "measured_tokens_per_s_per_gpu: 100}\n", "expert_configs[0].model: value 'no-such-model'"),
    ("expert_configs:\n- {id: E1, model: llama-3.1-8b, cluster: dgx-h100, gpus: 8, seq_len: 8192, "
     "global_batch_seqs: 8, precision: bf16, framework: megatron, layout: {tp: 1, tpp: 2}, "
     "measured_tokens_per_s_per_gpu: 100}\n", "expert_configs[0].layout.tpp: key 'tpp' not allowed"),
    ("expert_configs:\n- {id: E1, model: llama-3.1-8b, cluster: dgx-h100, gpus: 8, seq_len: 8192, "
     "global_batch_seqs: 8, precision: bf16, framework: megatron, layout: {recompute: some}, "
     "measured_tokens_per_s_per_gpu: 100}\n", "expert_configs[0].layout.recompute: value 'some'"),
])
def test_bad_data_file_is_one_line_exit_2(tmp_path, content, expected):
    path = tmp_path / "runs.yaml"
    path.write_text(content)
    result = runner.invoke(app, ["validate", "--suite", "training", "--data", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert str(path) in lines[0] and expected in lines[0], lines[0]


@pytest.mark.parametrize(("args", "expected"), [
    (["--data", "/no/such/file.yaml"], "/no/such/file.yaml: --data: file not found"),
    (["--part", "some"], "--part: value 'some' not allowed; allowed: all, fit, evaluation"),
])
def test_bad_options_are_one_line_exit_2(args, expected):
    result = runner.invoke(app, ["validate", "--suite", "training", *args])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output


def test_bad_suite_is_a_usage_error():
    result = runner.invoke(app, ["validate", "--suite", "speed"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_suite_without_rows_says_so():
    """expert_configs.yaml publishes no peak memory: one line, exit 0."""
    result = runner.invoke(app, ["validate", "--suite", "memory", "--data", str(vt.EXPERT_CONFIGS)],
                           env={"COLUMNS": "400"})  # one line however wide the terminal is
    assert result.exit_code == 0
    assert result.output.strip() == (f"memory validation on {vt.EXPERT_CONFIGS} (all rows): no row publishes a "
                                     f"peak memory")


def test_directory_as_data(tmp_path):
    result = runner.invoke(app, ["validate", "--suite", "memory", "--data", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.output


# ---------------------------------------------------------------- issue 4 guard and issue 9 Done-when

OLD_GROUPS = ("Narayanan2021", "Korthikanti2022", "Llama3-405B", "BLOOM", "MT-NLG")


def test_issue4_rows_at_least_80_percent_within_25_percent(everything):
    """Issue 4's bar on the runs with a fully given layout (Megatron SC21, Korthikanti, Llama 3,
    BLOOM, MT-NLG): >= 80 % of predictions within +-25 %."""
    old = [r for r in everything["suites"]["training"]["rows"]
           if r["group"].startswith(OLD_GROUPS) and r["error"] is not None]
    assert len(old) >= 37
    assert sum(abs(r["error"]) <= 0.25 for r in old) >= 0.8 * len(old)


def _now(s: dict) -> str:
    return (f"now median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} over n = {s['n']} "
            f"(2026-12-01, before the issue 9 item 1-2 cost-model work is merged)")


def test_done_when_evaluation_median_and_max(evaluation):
    """Met 2026-12-01 (zero9: SMs held by overlapped NCCL collectives): median 3.6%, max 24.9%
    (MT-NLG 3,360 GPUs, DeepSpeed; no mechanism found for it) over 17 rows; 2026-12-02 (bias):
    median 5.3%, max 24.0% (the same row); 2026-12-02 (mtnlg: DeepSpeed's gradient accumulation,
    BLOOM on jean-zay): median 4.0%, max 13.2% (llama3-405b-16384-131072), MT-NLG 3,360 +7.8%."""
    s = evaluation["summary"]
    assert s["median_abs_error"] <= 0.10 and s["max_abs_error"] <= 0.25, _now(s)


def test_done_when_bias_per_gpu_family_and_precision(evaluation):
    """Issue 9's bias bar: in every GPU family x precision group of >= 3 evaluation rows the mean of
    predicted / published - 1 (published / predicted - 1 for a step time), recomputed here from
    each row's published measurement and prediction, is within +-5%. Met 2026-12-02 (bias): A100
    bf16/fp16 +4.4% (8 rows; was +6.4%), H100/H200 bf16/fp16 +1.0% (3; was +7.2%), H100/H200 fp8
    -2.2% (5), by the fused elementwise kernels' HBM bytes, the 2024-12 torchtitan's composite
    RMSNorm and Megatron's interleaved p2p overlap (step_time, frameworks.megatron.p2p_overlap);
    A100 bf16/fp16 +1.0% after DeepSpeed's gradient accumulation (2026-12-02, mtnlg)."""
    groups = {name: s for name, s in evaluation["by"]["gpu_family x precision"].items() if s["n"] >= 3}
    assert {"A100 bf16/fp16", "H100/H200 bf16/fp16", "H100/H200 fp8"} <= set(groups)
    biased = {}
    for name, summary in groups.items():
        family, precision = name.split(" ")
        mine = [r for r in evaluation["rows"] if r["gpu_family"] == family and r["precision"] == precision
                and r["predicted"] is not None]
        errors = [r["published"] / r["predicted"] - 1 if r["convention"] == "step_time_s"
                  else r["predicted"] / r["published"] - 1 for r in mine]
        assert len(errors) == summary["n"] and statistics.fmean(errors) == pytest.approx(summary["bias"])
        if abs(statistics.fmean(errors)) > 0.05:
            biased[name] = f"{statistics.fmean(errors):+.1%} over {len(errors)} rows"
    assert not biased, biased


# ---------------------------------------------------------------- Korthikanti 2022 Table 5 through the CLI

KORTHIKANTI = [r for r in yaml.safe_load(vt.TRAINING_RUNS.read_text())["training_runs"]
               if r["group"] == "Korthikanti2022-Table5"]


def _gpt_file(tmp_path, row: dict):
    """The row's GPT: h, heads, layers from Table 5; 4h MLP, padded GPT-2 vocab 51,200, tied embedding."""
    path = tmp_path / f"{row['id']}.yaml"
    path.write_text(yaml.safe_dump(dict(
        name=row["id"], model_type="gpt", hidden_size=row["hidden_size"], intermediate_size=4 * row["hidden_size"],
        num_attention_heads=row["num_attention_heads"], num_hidden_layers=row["num_layers"], vocab_size=51200,
        max_position_embeddings=2048, tie_word_embeddings=True)))
    return str(path)


def _explain_step_s(tmp_path, row: dict, selective: bool, flash: bool = False) -> float:
    args = ["explain", "-m", _gpt_file(tmp_path, row), "-c", "dgx-a100-80g", "--gpus", str(row["gpus"]),
            "--tp", str(row["tp"]), "--pp", str(row["pp"]), "--dp", "1",
            "--vpp", str(row["pipeline_interleave_stages_in_calculon_config"]),
            "--micro-batch-size", str(row["micro_batch"]), "--global-batch-size", str(row["global_batch_seqs"]),
            "--seq-len", "2048", "--recompute", "selective" if selective else "full",
            "--flash-attention" if flash else "--no-flash-attention", "--format", "json"]
    if selective:
        args.append("--sequence-parallel")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["time_s"]["step"]


@pytest.fixture(scope="module")
def korthikanti_points(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("korthikanti")
    return [(row["id"], sel, _explain_step_s(tmp, row, sel),
             row["iteration_time_s_selective_plus_sp" if sel else "iteration_time_s_full_recompute"])
            for row in KORTHIKANTI for sel in (False, True)]


def test_korthikanti_cli_matches_validate(korthikanti_points, everything):
    """The CLI path and `planner validate` give the same step time for all eight points."""
    by_id = {r["id"]: r for r in everything["suites"]["training"]["rows"]}
    assert len(korthikanti_points) == 8
    for row_id, sel, step, published in korthikanti_points:
        row = by_id[row_id + ("/sel+sp" if sel else "/full")]
        assert row["published"] == published and row["predicted"] == pytest.approx(step, rel=1e-12)


def test_flash_attention_switch_changes_the_step(tmp_path):
    """s = 2048, h = 6144: without FlashAttention the s x s scores add memory traffic, so the step is longer."""
    row = KORTHIKANTI[0]
    assert _explain_step_s(tmp_path, row, False, flash=False) > _explain_step_s(tmp_path, row, False, flash=True)


@pytest.mark.xfail(strict=True, reason="Table 5 (2026-12-02, mtnlg): mean |error| 4.3%, max 13.8% (1T at pp 64 "
                                       "without interleaving predicted too slow, full recompute 13.8%, selective + "
                                       "SP 9.6%; korth's 5.4 / 15.2 / 11.0 before the A100 e_max refit 0.7095 -> "
                                       "0.7199 that followed DeepSpeed's gradient accumulation; the stage times "
                                       "below are korth's). Not the schedule: with the model's own per-micro-batch stage "
                                       "times any vpp-1 schedule takes at least m t_last + (p - 1) t_mid (the last "
                                       "stage, with the LM head, runs every micro-batch; the others fill and drain "
                                       "it) = 512 x 0.1367 + 63 x 0.1273 = 78.0 s against 71.49 (+9.1%; full "
                                       "102.5 against 94.42, +8.5%), and 575 x t_mid = 73.2 s (+2.4%) even with no "
                                       "LM head at all: the per-layer time at h 25,600 is over-estimated by >= 5% "
                                       "relative to 530B at h 20,480 (same narrowest GEMM width 2,048, so the same "
                                       "efficiency here), as Narayanan 2021's 1T row (same pp 64, vpp 1 per "
                                       "Megatron-LM examples/sc21/run_table_1.sh @2e90a342f5, -6.0%) also shows; "
                                       "mechanism not identified. Known smaller terms not modelled: the 2022 "
                                       "scatter/gather of non-SP boundary tensors (~-4.4% on 1T full), the fill/"
                                       "drain at the other stages' time (-0.8%); Calculon: 3.65% / 8.87%")
def test_done_when_korthikanti_table5(korthikanti_points):
    errors = [abs(step / published - 1) for _, _, step, published in korthikanti_points]
    text = ", ".join(f"{i}{'/sel' if s else '/full'} {step:.2f} s vs {p} s"
                     for i, s, step, p in korthikanti_points)
    assert statistics.fmean(errors) <= 0.035 and max(errors) <= 0.08, text


# ---------------------------------------------------------------- docs/validation.md

def test_doc_is_current():
    assert vt.DOC.read_text(encoding="utf-8") == vt.doc_text(), "run make validate"
