"""`planner check` on torchtitan TOML job configs (planner/check/torchtitan.py), through the CLI.

Data: tests/data/configs/torchtitan/llama3_8b.toml and llama3_70b.toml mirror torchtitan's own
presets (torchtitan/models/llama3/train_configs/*.toml at pytorch/torchtitan 238fa99); the 8B one
carries the batch of the Llama 3.1 8B / 8 H100 FSDP row (training_runs.yaml
torchtitan-202412-t1-fsdp). Variants are those files with one setting edited, written to tmp_path.
Expected values come from the config text and the hand arithmetic written beside each assert.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "configs" / "torchtitan"
LLAMA_8B = DATA / "llama3_8b.toml"
LLAMA_70B = DATA / "llama3_70b.toml"
H100 = ["--cluster", "dgx-h100"]


def _check(path, *extra):
    return runner.invoke(app, ["check", str(path), *extra])


def _json(path, *extra):
    result = _check(path, *extra, "--format", "json")
    return result, (json.loads(result.output) if result.exit_code in (0, 1) else None)


def _edit(tmp_path, old: str, new: str, source: Path = LLAMA_8B, name: str = "edited.toml") -> Path:
    text = source.read_text()
    assert old in text, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def _rules(data) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in data["violations"]:
        out.setdefault(v["rule"], []).append(v["message"])
    return out


def _one_line_error(result, *words):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    for w in words:
        assert w in lines[0], (w, lines[0])


# --- valid configs ---------------------------------------------------------------------------

def test_llama3_8b_fsdp8_row_passes_with_the_files_layout():
    """8 GPUs, data_parallel_shard_degree = -1 -> FSDP over all 8 (replicate 1 x tp 1 x pp 1 x cp 1
    leaves 8): dp 8, ZeRO-3; pp = 1 -> micro-batch = local_batch_size 2; global batch absent ->
    2 x 8 = 16 sequences (the row's global_batch_seqs); selective_ac_option "op" -> selective."""
    result, data = _json(LLAMA_8B, *H100, "--gpus", "8")
    assert result.exit_code == 0, result.output
    assert data["verdict"] == "pass" and data["kind"] == "torchtitan-config"
    assert data["model"] == "llama-3.1-8b" and data["gpus"] == 8
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["pp"], par["cp"], par["zero_stage"]) == (8, 1, 1, 1, 3)
    assert par["micro_batch_size"] == 2 and par["global_batch_size"] == 16
    assert par["num_microbatches"] == 1 and par["seq_len"] == 8192
    assert par["recompute"] == "selective" and par["precision"] == "bf16"
    assert par["framework"] == "torchtitan" and par["sequence_parallel"] is False
    assert not [v for v in data["violations"] if v["severity"] == "error"]


def test_llama3_70b_preset_on_its_64_gpus_passes():
    """The preset's 64 GPUs: tp 8, shard -1 -> 64 / 8 = 8; local batch 8 -> global 8 x 8 = 64."""
    result, data = _json(LLAMA_70B, *H100, "--gpus", "64")
    assert result.exit_code == 0, result.output
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["zero_stage"], par["sequence_parallel"]) == (8, 8, 3, True)
    assert par["micro_batch_size"] == 8 and par["global_batch_size"] == 64
    assert par["recompute"] == "full"


def test_hsdp_cp_and_explicit_degrees_need_no_gpus_option(tmp_path):
    """replicate 2 x shard 2 x cp 2 = 8 GPUs without --gpus; FSDP over shard x cp -> ZeRO-3 with
    dp = 2 x 2 = 4, dp_shard 2; global 16 = local 2 x dp 4 x 2 accumulation steps."""
    path = _edit(tmp_path, "data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = -1",
                 "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 2")
    path.write_text(path.read_text().replace("context_parallel_degree = 1", "context_parallel_degree = 2")
                    .replace("local_batch_size = 2", "local_batch_size = 2\nglobal_batch_size = 16"))
    result, data = _json(path, *H100)
    assert result.exit_code == 0, result.output
    par = data["parallelism"]
    assert (par["dp"], par["cp"], par["zero_stage"], par["global_batch_size"]) == (4, 2, 3, 16)
    assert par["num_microbatches"] == 16 // (4 * 2)
    assert data["gpus"] == 8


def test_pipeline_split_follows_torchtitan(tmp_path):
    """pp 4, 1F1B: 32 layers + 1 (embedding) + 1 (output) = 34 effective over 4 stages = 8 rem 2
    -> shares [9, 9, 8, 8]; stage 0 gives 1 to the embedding, stage 3 one to the output:
    [8, 9, 8, 7]. dp = 8 / 4 = 2; global batch absent -> local 2 x dp 2 = 4; micro-batch =
    pipeline_parallel_microbatch_size 1 -> m = 4 / (2 x 1) = 2."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 "pipeline_parallel_degree = 4\npipeline_parallel_microbatch_size = 1")
    result, data = _json(path, *H100, "--gpus", "8")
    par = data["parallelism"]
    assert par["pp"] == 4 and par["dp"] == 2 and par["vpp"] == 1
    assert par["pipeline_layers"] == [8, 9, 8, 7]
    assert par["global_batch_size"] == 4
    assert par["micro_batch_size"] == 1 and par["num_microbatches"] == 2


def test_interleaved_schedule_two_stages_per_rank(tmp_path):
    """pp 2, Interleaved1F1B, no layers_per_stage -> 2 stages per rank, 4 virtual stages: 34 over 4
    = 8 rem 2 -> [9-1, 9, 8, 8-1] = [8, 9, 8, 7]; rank 0 holds stages 0 and 2 (16 layers), rank 1
    stages 1 and 3 (16)."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "Interleaved1F1B"')
    result, data = _json(path, *H100, "--gpus", "8")
    par = data["parallelism"]
    assert (par["pp"], par["vpp"], par["pipeline_layers"]) == (2, 2, [16, 16])


def test_interleaved_uneven_chunks_pass_the_layer_rule(tmp_path):
    """The 70B preset with pp 4, Interleaved1F1B (2 stages per rank), on 64 GPUs: 80 layers + 1 + 1
    = 82 over 8 virtual stages = 10 rem 2 -> [11-1, 11, 10, 10, 10, 10, 10, 10-1] = [10, 11, 10,
    10, 10, 10, 10, 9]; rank r holds stages r and r + 4: [20, 21, 20, 19]. Rank 1's 21 is not a
    multiple of vpp 2 -- which Megatron would refuse, and torchtitan runs -- so the gate must not
    report `pipeline_layers`."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 'pipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\n'
                 "pipeline_parallel_microbatch_size = 1", source=LLAMA_70B)
    result, data = _json(path, *H100, "--gpus", "64")
    par = data["parallelism"]
    assert (par["pp"], par["vpp"], par["pipeline_layers"]) == (4, 2, [20, 21, 20, 19])
    assert "pipeline_layers" not in _rules(data)


def test_layer_sac_every_second_block_is_full(tmp_path):
    """selective_ac_option "2": blocks 2, 4, ..., 32 of 32 are fully checkpointed (16), the other
    16 keep everything (torchtitan _apply_layer_sac)."""
    path = _edit(tmp_path, 'selective_ac_option = "op"', 'selective_ac_option = "2"')
    result, data = _json(path, *H100, "--gpus", "8")
    assert data["stages"][0]["recompute"] == {"none": 16, "selective": 0, "full": 16}


@pytest.mark.parametrize("old,new", [
    ('# converters = ["float8"]', 'converters = ["float8"]'),
    ('# converters = ["float8"]', 'converters = ["quantize.linear.float8"]'),
    ("[compile]", "[float8]\nenable_float8_linear = true\n\n[compile]"),
])
def test_float8_converter_means_fp8(tmp_path, old, new):
    result, data = _json(_edit(tmp_path, old, new), *H100, "--gpus", "8")
    assert data["parallelism"]["precision"] == "fp8"


def test_older_key_names_read_the_same(tmp_path):
    """Before 2025-03 the degrees lived in [training] / [experimental]; before 2025-06
    local_batch_size was batch_size."""
    text = LLAMA_8B.read_text().replace("local_batch_size = 2", "batch_size = 2").replace(
        "[parallelism]\n", "[experimental]\n")
    text = text.replace("data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = -1\n"
                        "tensor_parallel_degree = 1\n", "")
    text = text.replace("[training]\n", "[training]\ndata_parallel_shard_degree = 8\n"
                                        "tensor_parallel_degree = 1\n")
    path = tmp_path / "old.toml"
    path.write_text(text)
    result, data = _json(path, *H100)
    assert result.exit_code == 0, result.output
    par = data["parallelism"]
    assert (par["dp"], par["micro_batch_size"], par["global_batch_size"]) == (8, 2, 16)


# --- failures ---------------------------------------------------------------------------------

def test_70b_preset_on_8_gpus_overflows_memory():
    """64-GPU preset on 8: tp 8 leaves shard 1 -> no FSDP (ZeRO-0). Each GPU holds 70.55e9 / 8 =
    8.82e9 parameters; Adam's two fp32 moments alone are 8 B x 8.82e9 = 65.7 GiB, and with even a
    2 B weight 82.1 GiB > 79.6 GiB."""
    result, data = _json(LLAMA_70B, *H100, "--gpus", "8")
    assert result.exit_code == 1
    par = data["parallelism"]
    assert (par["dp"], par["tp"], par["zero_stage"]) == (1, 8, 0)
    assert "memory_exceeds" in _rules(data)
    mem = data["memory_bytes"]
    assert mem["optimizer_states"] / 2**30 == pytest.approx(8 * 70_553_706_496 / 8 / 2**30, rel=0.02)
    assert mem["total"] > mem["capacity"]


def test_ddp_with_tp_is_refused(tmp_path):
    """replicate 2 x shard 1 with tp 4: torchtitan's DDP is 1-D only."""
    path = _edit(tmp_path, "data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = -1\n"
                           "tensor_parallel_degree = 1",
                 "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 1\n"
                 "tensor_parallel_degree = 4")
    result, data = _json(path, *H100)
    assert result.exit_code == 1
    (msg,) = _rules(data)["torchtitan_ddp"]
    assert "data_parallel_replicate_degree=2" in msg and "tp=4" in msg


def test_etp_other_than_1_or_tp_is_refused(tmp_path):
    """qwen3-30b-a3b (not a catalog flavor of the file: --model), tp 2, ep 4, etp 4."""
    path = _edit(tmp_path, 'name = "llama3"\nflavor = "8B"', 'name = "qwen3"\nflavor = "30B-A3B"')
    path.write_text(path.read_text().replace(
        "tensor_parallel_degree = 1", "tensor_parallel_degree = 2\nexpert_parallel_degree = 4\n"
                                      "expert_tensor_parallel_degree = 4"))
    result, data = _json(path, *H100, "--gpus", "8", "--model", "qwen3-30b-a3b")
    assert result.exit_code == 1
    (msg,) = _rules(data)["torchtitan_parallel_dims"]
    assert "expert_tensor_parallel_degree=4" in msg and "tp (2)" in msg


def test_global_batch_not_a_multiple_of_local_times_dp(tmp_path):
    """pp 4 on 8 GPUs -> dp 2; local 4, global 12: 12 % (4 x 2) = 4 (torchtitan asserts), while
    12 % (dp 2 x micro-batch 2) = 0, so only torchtitan's own check catches it."""
    path = _edit(tmp_path, "local_batch_size = 2", "local_batch_size = 4\nglobal_batch_size = 12")
    path.write_text(path.read_text().replace(
        "pipeline_parallel_degree = 1",
        "pipeline_parallel_degree = 4\npipeline_parallel_microbatch_size = 2"))
    result, data = _json(path, *H100, "--gpus", "8")
    assert result.exit_code == 1
    (msg,) = _rules(data)["torchtitan_batch"]
    assert "12" in msg and "4 x 2 = 8" in msg


def test_local_batch_not_divisible_by_pipeline_microbatch(tmp_path):
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 "pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 3")
    result, data = _json(path, *H100, "--gpus", "8")
    assert result.exit_code == 1
    (msg,) = _rules(data)["torchtitan_batch"]
    assert "local_batch_size 2" in msg and "pipeline_parallel_microbatch_size 3" in msg


def test_single_stage_schedule_with_two_stages_per_rank(tmp_path):
    """pp 2, 1F1B, layers_per_stage 9: ceil(34 / 9) = 4 virtual stages = 2 per rank; 1F1B runs one."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 "pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 9")
    result, data = _json(path, *H100, "--gpus", "8")
    assert result.exit_code == 1
    (msg,) = _rules(data)["torchtitan_pipeline_stages"]
    assert "1 stage per rank, got 2" in msg


def test_stage_count_not_divisible_by_pp(tmp_path):
    """pp 2, Interleaved1F1B, layers_per_stage 5: ceil(34 / 5) = 7 stages, 7 % 2 != 0."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "interleaved1f1b"\n'
                 "pipeline_parallel_layers_per_stage = 5")
    result, data = _json(path, *H100, "--gpus", "8")
    assert result.exit_code == 1
    (msg,) = _rules(data)["torchtitan_pipeline_stages"]
    assert "7 virtual stages" in msg and "pipeline_parallel_degree 2" in msg


# --- bad input (exit 2, one line naming the file and key / option) ---------------------------

def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = _edit(tmp_path, "seq_len = 8192", "seq_len = = 8192")
    _one_line_error(_check(path, *H100, "--gpus", "8"), str(path), "line")


@pytest.mark.parametrize("old,new,key", [
    ("tensor_parallel_degree = 1", 'tensor_parallel_degree = "8"', "parallelism.tensor_parallel_degree"),
    ('mode = "selective"', 'mode = "partial"', "activation_checkpoint.mode"),
    ('mode = "selective"', 'mode = "memory_budget"', "activation_checkpoint.mode"),
    ('selective_ac_option = "op"', 'selective_ac_option = "every"', "activation_checkpoint.selective_ac_option"),
    ("seq_len = 8192", 'seq_len = 8192\nmixed_precision_param = "float32"', "training.mixed_precision_param"),
    ("pipeline_parallel_degree = 1", 'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "GPipe"',
     "parallelism.pipeline_parallel_schedule"),
    ("local_batch_size = 2", "local_batch_size = 2\nbatch_size = 2", "training.batch_size"),
    ("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 0", "parallelism.data_parallel_shard_degree"),
])
def test_malformed_values_name_file_and_key(tmp_path, old, new, key):
    path = _edit(tmp_path, old, new)
    _one_line_error(_check(path, *H100, "--gpus", "8"), str(path), key)


@pytest.mark.parametrize("args,option", [
    (["--gpus", "8"], "--cluster"),
    (H100, "--gpus"),
])
def test_missing_option_is_named(args, option):
    _one_line_error(_check(LLAMA_8B, *args), option)


def test_missing_seq_len_and_unknown_flavor_name_their_options(tmp_path):
    path = _edit(tmp_path, "seq_len = 8192\n", "")
    _one_line_error(_check(path, *H100, "--gpus", "8"), "--seq-len")
    assert _check(path, *H100, "--gpus", "8", "--seq-len", "8192").exit_code == 0
    path = _edit(tmp_path, 'flavor = "8B"', 'flavor = "debugmodel"', name="debug.toml")
    _one_line_error(_check(path, *H100, "--gpus", "8"), "--model", "debugmodel")


def test_ranks_the_degrees_do_not_multiply_to_fail_the_world_size_rule(tmp_path):
    """shard 8 launched on 16 GPUs: torchtitan's ParallelDims._validate asserts dp_replicate x dp_shard
    x cp x tp x pp == world_size at start-up, a check failure (exit 1, rule world_size, as Megatron-LM's
    world size that tp x pp x cp does not divide), not bad input (fresh-user review 7 #6)."""
    path = _edit(tmp_path, "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 8")
    result, data = _json(path, *H100, "--gpus", "16")
    assert result.exit_code == 1
    (message,) = _rules(data)["world_size"]
    assert "= 8 differs from the 16 GPUs" in message


def test_key_typo_is_named_with_the_real_key(tmp_path):
    """torchtitan rejects unknown fields at start-up ('Invalid field names'): the error
    torchtitan_unknown_key (exit 1, as an unknown command-line field), naming the real key; the value
    is not read (degree 1 costed), and said so."""
    path = _edit(tmp_path, "tensor_parallel_degree = 1", "tensor_paralel_degree = 2")
    result, data = _json(path, *H100, "--gpus", "8")
    assert result.exit_code == 1
    (message,) = _rules(data)["torchtitan_unknown_key"]
    assert "parallelism.tensor_paralel_degree is not a field; did you mean parallelism.tensor_parallel_degree" \
        in message and "costed at its default" in message


@pytest.mark.parametrize("args,words", [
    (["--gpus", "8", "--model", "llama-3.1-70b"], ["--model llama-3.1-70b", "llama-3.1-8b"]),
    (["--gpus", "8", "--seq-len", "4096"], ["--seq-len 4096", "8192"]),
])
def test_option_contradicting_the_file_names_both(tmp_path, args, words):
    path = _edit(tmp_path, "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 8")
    _one_line_error(_check(path, *H100, *args), *words)


def test_cpu_offload_offloads_parameters_and_optimizer(tmp_path):
    path = _edit(tmp_path, "seq_len = 8192", "seq_len = 8192\nenable_cpu_offload = true")
    result, data = _json(path, *H100, "--gpus", "8")
    assert data["parallelism"]["offload"] == ["optimizer", "parameters"]


def test_module_fqns_per_model_part_gives_the_split(tmp_path):
    """Two model parts holding layers 0-9 and 10-31: pipeline_layers [10, 22]."""
    first = ["tok_embeddings", *(f"layers.{i}" for i in range(10))]
    last = [*(f"layers.{i}" for i in range(10, 32)), "norm", "output"]
    path = _edit(tmp_path, "pipeline_parallel_degree = 1",
                 f"pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {json.dumps([first, last])}")
    result, data = _json(path, *H100, "--gpus", "8")
    assert data["parallelism"]["pipeline_layers"] == [10, 22]


def test_older_microbatch_count(tmp_path):
    """Before 2025-04 [experimental] pipeline_parallel_microbatches was the count: local batch 2
    in 2 micro-batches -> micro-batch 1."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1\n", "")
    path.write_text(path.read_text() + "\n[experimental]\npipeline_parallel_degree = 2\n"
                                       "pipeline_parallel_microbatches = 2\n")
    result, data = _json(path, *H100, "--gpus", "8")
    par = data["parallelism"]
    assert (par["pp"], par["micro_batch_size"], par["dp"]) == (2, 1, 4)


def test_older_microbatch_count_defaults_to_pp(tmp_path):
    """[experimental] pipeline_parallel_degree 2 without a micro-batch key: the old default was
    pp = 2 micro-batches, so local batch 4 -> micro-batch 4 / 2 = 2 (the current default would be
    pipeline_parallel_microbatch_size 1)."""
    path = _edit(tmp_path, "pipeline_parallel_degree = 1\n", "")
    path.write_text(path.read_text().replace("local_batch_size = 2", "local_batch_size = 4")
                    + "\n[experimental]\npipeline_parallel_degree = 2\n")
    result, data = _json(path, *H100, "--gpus", "8")
    assert data["parallelism"]["micro_batch_size"] == 2


def test_world_size_from_the_degrees_that_the_cluster_refuses_names_the_file(tmp_path):
    """shard 12 x 1 x 1 x 1 x 1 = 12 GPUs, neither part of one 8-GPU dgx-h100 node nor whole
    nodes: the error names the file and its degrees, not the cluster file alone and a --gpus
    never passed."""
    path = _edit(tmp_path, "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 12")
    result = _check(path, *H100)
    _one_line_error(result, str(path), "parallelism.data_parallel_shard_degree", "1x12x1x1x1",
                    "world size 12", "1..7 or a multiple of 8")


def test_unknown_key_is_a_warning_naming_it(tmp_path):
    """torchtitan's ConfigManager raises 'Invalid field names' on training.frobnicate (from eadca48);
    the reader's field list is of two commits and fields differ between releases, so it warns
    (naming the key and saying the list may be stale), never fails the file."""
    path = _edit(tmp_path, "steps = 1000", "steps = 1000\nfrobnicate = 3")
    result, data = _json(path, *H100, "--gpus", "8")
    found = [v for v in data["violations"] if v["rule"] == "torchtitan_unknown_key"]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    message = found[0]["message"]
    assert "training.frobnicate" in message and "may be stale" in message and "Invalid field names" in message
    assert "rejects" not in message


@pytest.mark.parametrize("compile_block, fails", [
    ("[compile]\nenable=false\ncomponents = [\"model\", \"loss\"]", True),
    ("[compile]\nenable=true\ncomponents = [\"loss\"]", True),      # 'model' not compiled
    ("[compile]\nenable=true\ncomponents = [\"model\", \"loss\"]", False),
])
def test_async_tp_without_compile_fails_as_torchtitan_raises(tmp_path, compile_block, fails):
    """pytorch/torchtitan@238fa99 distributed/tensor_parallel.py maybe_enable_async_tp (under TP):
    raise RuntimeError("Async TP requires 'model' in --compile.components and --compile.enable").
    The review's tt10 case passed with the overlap silently off."""
    text = LLAMA_70B.read_text().replace("context_parallel_degree = 1",
                                         "context_parallel_degree = 1\nenable_async_tensor_parallel = true", 1)
    text = text.replace("[compile]\nenable=false\ncomponents = [\"model\", \"loss\"]", compile_block, 1)
    path = tmp_path / "async.toml"
    path.write_text(text)
    result, data = _json(path, *H100, "--gpus", "64")
    rules = {v["rule"]: v for v in data["violations"]}
    assert ("async_tp_needs_compile" in rules) == fails
    if fails:
        assert rules["async_tp_needs_compile"]["severity"] == "error" and result.exit_code == 1
        assert "tp=8" in rules["async_tp_needs_compile"]["message"]
    else:
        assert data["parallelism"]["overlap"]["tp_comm_overlap"] is True


@pytest.mark.parametrize("source, gpus", [(LLAMA_8B, "8"), (LLAMA_70B, "64")])
def test_shipped_presets_have_no_unknown_key(source, gpus):
    result, data = _json(source, *H100, "--gpus", gpus)
    assert data is not None, result.output
    assert "torchtitan_unknown_key" not in _rules(data)


def test_reshard_never_without_pipeline_is_zero2(tmp_path):
    """Fresh-user defect: `fsdp_reshard_after_forward = "never"` (FSDP2 keeping parameters
    unsharded after forward: ZeRO-2) was read as ZeRO-3, so check costed less memory than the run
    uses. Without PP it is ZeRO-2; under PP torchtitan never reshards anyway (ZeRO-3's run)."""
    path = _edit(tmp_path, "data_parallel_shard_degree = -1",
                 'data_parallel_shard_degree = -1\nfsdp_reshard_after_forward = "never"')
    result, data = _json(path, *H100, "--gpus", "8")
    assert data["parallelism"]["zero_stage"] == 2
    piped = _edit(tmp_path, "pipeline_parallel_degree = 1",
                  'pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1',
                  source=path, name="piped.toml")
    result, data = _json(piped, *H100, "--gpus", "8")
    assert data["parallelism"]["zero_stage"] == 3
