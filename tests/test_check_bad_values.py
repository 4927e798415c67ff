"""Every reader reports every bad value of a file in one run, one `error:` line each naming the file, the key
and the value, exit 2 (as the Megatron-LM reader does since fresh-user review 8 #19; fresh-user review 9: the
torchtitan, DeepSpeed and engine readers stopped at the first). The torchtitan command line's own case is in
test_check_torchtitan_cli.py."""

from __future__ import annotations

from tests.cli_run import planner


def _errors(path, *options):
    out = planner("check", str(path), "-c", "dgx-h100", *options)
    assert out.returncode == 2 and out.stdout == ""
    return out.stderr.splitlines()


def test_torchtitan_toml_every_bad_value(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n'
                    '[training]\nlocal_batch_size = "two"\nseq_len = 0\nmixed_precision_param = "fp16"\n'
                    '[parallelism]\ntensor_parallel_degree = 2\nfsdp_reshard_after_forward = "sometimes"\n'
                    '[activation_checkpoint]\nmode = "half"\n')
    assert sorted(_errors(path, "--gpus", "8")) == sorted(f"error: {path}: {line}" for line in (
        "training.seq_len: value 0 must be an integer >= 1",
        "training.local_batch_size: value 'two' must be an integer >= 1",
        "activation_checkpoint.mode: value 'half' not allowed; allowed: one of none, selective, full",
        "parallelism.fsdp_reshard_after_forward: value 'sometimes' not allowed; allowed: one of default, always, never",
        "training.mixed_precision_param: value 'fp16' not allowed; allowed: one of bfloat16, float32"))


def test_deepspeed_every_bad_value(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 0, "gradient_accumulation_steps": "4",\n'
                    ' "zero_optimization": {"stage": 5}, "bf16": {"enabled": "yes"}, "optimizer": {"type": "Lion"}}\n')
    assert _errors(path, "-m", "llama-3.1-8b", "--gpus", "8", "--seq-len", "4096") == [
        f"error: {path}: {line}" for line in (
            "train_micro_batch_size_per_gpu: value 0 must be an integer >= 1",
            "gradient_accumulation_steps: value '4' is a string; it must be an integer: write 4 without quotes",
            "zero_optimization.stage: value 5 not allowed; allowed: 0, 1, 2, 3",
            "bf16.enabled: value 'yes' must be true or false",
            "optimizer.type: value 'Lion' not supported; supported: Adam, AdamW (any case), SGD")]


def test_deepspeed_every_bad_value_of_the_zero_section_and_layout(tmp_path):
    """The ZeRO section (stage, each offload device, a bucket below DeepSpeed's bounds, named once) and the layout
    keys this reader refuses (AutoTP size, Ulysses, AutoEP, a contradicted dp) in one run (each stopped at the first:
    gate3's leftover)."""
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": true},\n'
                    ' "tensor_parallel": {"autotp_size": -1}, "sequence_parallel_size": 2,\n'
                    ' "expert_parallel": {"enabled": true}, "data_parallel_size": 3,\n'
                    ' "zero_optimization": {"stage": 5, "offload_optimizer": {"device": "gpu"},\n'
                    '                       "offload_param": {"device": "disk"}, "reduce_bucket_size": -1}}\n')
    assert _errors(path, "-m", "llama-3.1-8b", "--gpus", "8", "--seq-len", "4096") == [
        f"error: {path}: {line}" for line in (
            "tensor_parallel.autotp_size: value -1 must be an integer >= 0",
            "sequence_parallel_size: value 2: Ulysses sequence parallelism is not read by this check; check the "
            "layout with `planner explain --cp`",
            "expert_parallel.enabled: AutoEP (expert_parallel.enabled) is not read by this check; check the layout "
            "with `planner explain --ep`",
            "data_parallel_size: data_parallel_size=3 but --gpus 8 / tp 1 gives dp=8; give consistent values",
            "zero_optimization.stage: value 5 not allowed; allowed: 0, 1, 2, 3",
            "zero_optimization.offload_optimizer.device: value 'gpu' not allowed; allowed: none, cpu, nvme",
            "zero_optimization.offload_param.device: value 'disk' not allowed; allowed: none, cpu, nvme",
            "zero_optimization.reduce_bucket_size: value -1 must be an integer > 0: DeepSpeed's ZeRO config model "
            "rejects it at start-up (DeepSpeedZeroConfig)")]


def test_vllm_launch_every_bad_value(tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size two --max-model-len 8q "
                    "--gpu-memory-utilization 1.5 --kv-cache-dtype fp4 --max-num-seqs $SEQS\n")
    lines = _errors(path)
    assert len(lines) == 5 and all(line.startswith(f"error: {path}: --") for line in lines)
    for part in ("--tensor-parallel-size: value 'two' must be an integer >= 1",
                 "--max-model-len: value '8q' must be an integer >= 1, auto or -1",
                 "--gpu-memory-utilization: value '1.5' must be a number in (0, 1]",
                 "--kv-cache-dtype: value 'fp4' not modelled (KV-cache dtypes)",
                 "--max-num-seqs: value '$SEQS' uses the shell variable SEQS, which the file does not set"):
        assert sum(part in line for line in lines) == 1, part


def test_sglang_launch_every_bad_value(tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2x "
                    "--mem-fraction-static 0 --context-length lots\n")
    lines = _errors(path)
    assert len(lines) == 3
    for part in ("--tp: value '2x' must be an integer >= 1", "--context-length: value 'lots' must be an integer",
                 "--mem-fraction-static: value '0' must be a number in (0, 1]"):
        assert sum(part in line for line in lines) == 1, part


def test_one_bad_value_is_one_line_as_before(tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size two\n")
    assert _errors(path) == [f"error: {path}: --tensor-parallel-size: value 'two' must be an integer >= 1 "
                             "(a literal, not a shell variable)"]


def test_several_bad_values_in_json_and_github_formats(tmp_path):
    """JSON keeps one `error` string for the file (each value on a line of it); a GitHub annotation points at
    the first value's line."""
    import json
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --tensor-parallel-size two \\\n"
                    "  --gpu-memory-utilization 1.5\n")
    a, b = tmp_path / "a.sh", tmp_path / "b.sh"   # two files: the JSON list keeps every result
    a.write_text(path.read_text())
    b.write_text(path.read_text())
    out = planner("check", str(a), str(b), "-c", "dgx-h100", "--format", "json")
    assert out.returncode == 2
    error = json.loads(out.stdout)[0]["error"]
    assert error.splitlines() == [f"{a}: --tensor-parallel-size: value 'two' must be an integer >= 1 (a literal, "
                                  "not a shell variable)",
                                  f"error: {a}: --gpu-memory-utilization: value '1.5' must be a number in (0, 1] "
                                  "(a fraction of GPU memory)"]
    github = planner("check", str(a), "-c", "dgx-h100", "--format", "github").stdout
    assert github.startswith(f"::error file={a},line=2,")


def test_plan_file_every_bad_value(tmp_path):
    """A plan file edited by hand: every mistyped or out-of-range value named at once."""
    import yaml
    from pathlib import Path
    plan = tmp_path / "plan.yaml"
    data = yaml.safe_load((Path(__file__).parent / "data/plans/llama-3.1-70b-64xh100-pp4-cp4.plan.yaml").read_text())
    data["gpus"], data["request"]["headroom"] = 0, 7
    data["plan"]["parallelism"]["tp"], data["plan"]["parallelism"]["recompute"] = "one", "partial"
    plan.write_text(yaml.safe_dump(data))
    out = planner("check", str(plan))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"error: {plan}: {line}" for line in (
        "request.headroom: value 7 must be a number in [0, 0.9] (as --headroom)",
        "plan.parallelism.tp: value 'one'; must be an integer in [1, 4,194,304]",
        "plan.parallelism.recompute: value 'partial' not allowed; allowed: none, selective, full, or one "
        "{mode: count} mapping per stage",
        "gpus: value 0; must be an integer in [1, 4,194,304]")]


def test_serving_plan_file_every_bad_value(tmp_path):
    import yaml
    plan = tmp_path / "serve.yaml"
    assert planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--input-len", "2000",
                   "--output-len", "200", "-o", str(plan)).returncode == 0
    data = yaml.safe_load(plan.read_text())
    data["request"]["input_len"], data["request"]["engine"] = -5, "tgi"
    data["plan"]["parallelism"]["tp"] = "one"
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    out = planner("check", str(plan))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"error: {plan}: {line}" for line in (
        "request.input_len: value -5 not allowed; allowed: an integer in [1, 16,777,216]",
        "request.engine: value 'tgi' not allowed; allowed: one of vllm, sglang, trtllm",
        "plan.parallelism.tp: value 'one' not allowed; allowed: an integer in [1, 4,194,304]")]


def test_megatron_shell_and_argparse_bad_values_together(tmp_path):
    """A Megatron-LM script's values left with a shell expansion, a switch given a value and a choice outside
    its choices, with the unknown flag on the last line: one run, one line each (before, the first shell value
    stopped the file)."""
    path = tmp_path / "train.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP --micro-batch-size 1 "
                    "--global-batch-size $((N * 8)) --seq-length 4096 --bf16=yes --recompute-granularity ful "
                    "--overlap-grad-reduc\n")
    assert _errors(path, "-m", "llama-3.1-8b") == [f"error: {path}: {line}" for line in (
        "--tensor-model-parallel-size: value '$TP' uses the shell variable TP, which the file does not set; set it "
        "in the file or write the value",
        "--global-batch-size: value '$((N * 8))' is a shell arithmetic expansion $((...)) of N, which the file does "
        "not set to an integer: this reader does not evaluate it; set N in the file or write the number",
        "--bf16: takes no value (got 'yes'); it is a switch",
        "--recompute-granularity: value 'ful' not allowed; allowed: full, selective; also --overlap-grad-reduc is "
        "not a Megatron-LM flag; did you mean --overlap-grad-reduce?")]


def test_engine_launch_every_bad_input_of_every_command(tmp_path):
    """Beyond numbers, fractions and choices (a dtype not modelled, a GPU list, a weight format) and over every
    command of the file, in one run (gate3's leftover: the first command's first such error stopped the file)."""
    path = tmp_path / "serve.sh"
    path.write_text("CUDA_VISIBLE_DEVICES=a,b vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size two "
                    "--dtype float32\nvllm serve meta-llama/Llama-3.1-8B-Instruct --port 8001 "
                    "--gpu-memory-utilization 1.5 --quantization foo\n")
    lines = _errors(path)
    assert [line.split(": ")[2] for line in lines] == ["--tensor-parallel-size", "--dtype", "CUDA_VISIBLE_DEVICES",
                                                       "--quantization", "--gpu-memory-utilization"], lines
    assert "value 'a,b' must list GPU indices" in lines[2] and "value '1.5' must be a number in (0, 1]" in lines[4]
