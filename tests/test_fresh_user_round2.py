"""The fresh user's second review of `planner check` / `plan` / `explain` (training side): memory
costed next to other errors, CRLF scripts, ZeRO bounds, torchtitan fixes that are valid values,
one exit code for one mistake, `-m -`, model YAML round trip, config.json model names, long values
in messages."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from planner.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
GIB = 2**30

# Llama 3.1 70B (models.yaml): hidden 8192, 80 layers; H100 SXM 80 GB.
_MEGATRON_70B = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
    --tensor-model-parallel-size 8 \\
    --pipeline-model-parallel-size 2 \\
    --seq-length 8192 \\
    --micro-batch-size 16 \\
    --global-batch-size 100 \\
    --rotary-base 500000 --bf16 \\
    --use-flash-atention
"""


def _check_json(path: Path, *options: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["check", str(path), "--format", "json", *options])
    return result.exit_code, json.loads(result.output)


def test_memory_is_costed_next_to_a_typo_and_a_batch_error(tmp_path):
    path = tmp_path / "pretrain.sh"
    path.write_text(_MEGATRON_70B)
    code, data = _check_json(path, "-m", "llama-3.1-70b", "-c", "dgx-h100")
    assert code == 1
    rules = {v["rule"] for v in data["violations"] if v["severity"] == "error"}
    assert {"megatron_unknown_flag", "batch_divisible", "memory_exceeds"} <= rules
    # By hand: stage 0 holds 40 layers; the input of each layer alone, s x b x h bf16 values for
    # one micro-batch, is 8192 x 16 x 8192 x 2 B x 40 layers = 80 GiB > the 79.6 GiB an H100 has
    # (and without recompute it keeps far more than the layer input).
    lower_bound = 8192 * 16 * 8192 * 2 * 40
    assert lower_bound / GIB == 80.0
    stage0 = data["stages"][0]["memory_bytes"]
    assert stage0["activations"] > lower_bound > stage0["capacity"]
    assert data["memory_verdict"] == "does_not_fit"


def test_plan_file_with_an_edited_micro_batch_is_costed(tmp_path):
    text = (ROOT / "examples/llama-3.1-70b-64xh100.plan.yaml").read_text()
    assert "    micro_batch_size: 1\n" in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("    micro_batch_size: 1\n", "    micro_batch_size: 8\n"))
    code, data = _check_json(path)
    assert code == 1
    rules = [v["rule"] for v in data["violations"]]
    assert "plan_consistency" in rules
    # the layout's memory is reported: either costed per stage or a note saying it was not
    assert data["stages"] or "memory_not_costed" in rules
    assert data["stages"], "the edited layout is buildable: its memory must be costed"


def test_memory_left_undefined_is_said_so(tmp_path):
    """Per-stage recompute counts that cover 19 of stage 3's 20 layers: no memory per stage
    exists, and the output says memory was not costed and which error leaves it undefined."""
    text = (ROOT / "examples/llama-3.1-70b-64xh100.plan.yaml").read_text()
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("    recompute: none\n", "    recompute:\n" + "    - {none: 20}\n" * 3
                                 + "    - {none: 19}\n"))
    code, data = _check_json(path)
    assert code == 1 and data["stages"] == []
    note = [v for v in data["violations"] if v["rule"] == "memory_not_costed"]
    assert len(note) == 1 and "plan_consistency" in note[0]["message"]


_LF_SCRIPT = ("#!/bin/bash\n"
              "torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
              "    --tensor-model-parallel-size 8 \\\n"
              "    --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 \\\n"
              "    --rotary-base 500000 --bf16\n")


def test_crlf_script_fails_at_the_first_broken_continuation(tmp_path):
    """bash(1) QUOTING: only backslash-newline continues a line; `\\` + CR escapes the CR, so line
    2's command ends there and line 3 (`--tensor-model-parallel-size 8 \\`) runs on its own."""
    good = tmp_path / "lf.sh"
    good.write_bytes(_LF_SCRIPT.encode())
    code, data = _check_json(good, "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert code == 0 and "crlf_line_endings" not in {v["rule"] for v in data["violations"]}
    bad = tmp_path / "crlf.sh"
    bad.write_bytes(_LF_SCRIPT.replace("\n", "\r\n").encode())
    code, data = _check_json(bad, "-m", "llama-3.1-8b", "-c", "dgx-h100")
    assert code == 1
    [error] = [v for v in data["violations"] if v["rule"] == "crlf_line_endings"]
    assert error["severity"] == "error" and error["line"] == 2
    assert "line 2 ends in a backslash and a carriage return" in error["message"]
    assert f"dos2unix {bad}" in error["fix"] and "sed -i 's/\\r$//'" in error["fix"]


def test_crlf_arguments_file_without_continuations_fails_at_line_1(tmp_path):
    path = tmp_path / "args.txt"
    path.write_bytes(b"--tensor-model-parallel-size 8\r\n--seq-length 4096 --micro-batch-size 1\r\n"
                     b"--global-batch-size 64 --rotary-base 500000 --bf16\r\n")
    code, data = _check_json(path, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8")
    [error] = [v for v in data["violations"] if v["rule"] == "crlf_line_endings"]
    assert code == 1 and error["line"] == 1 and "CRLF line endings (line 1 first)" in error["message"]


def test_sequence_fix_changes_tp_when_tp_breaks_the_heads_too(tmp_path):
    """torchtitan TOML with tp 3 on Llama 3.1 8B (32 heads, 8 KV heads, seq 8192): torchtitan needs
    the tokens of a micro-batch divisible by tp with SP (trainer.py seq_len_divisor, b5bcd76), so
    8192 % 3 fails -- but `seq_len=8193` is no fix: tp=3 divides no head count. The tp values that
    divide gcd(32, 8) = 8 are 1, 2, 4, 8, and each divides 8192."""
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\n'
                    'global_batch_size = 8\nseq_len = 8192\n[parallelism]\n'
                    'tensor_parallel_degree = 3\ndata_parallel_shard_degree = -1\n')
    code, data = _check_json(path, "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "6")
    assert code == 1
    [v] = [v for v in data["violations"] if v["rule"] == "sequence_divisible"]
    assert "8193" not in v["fix"] and "tp in {1, 2, 4, 8}" in v["fix"]
    assert "seq_len=8192" in v["fix"]


def test_expert_parallelism_on_a_dense_model_is_the_same_bad_input_everywhere():
    """Llama 3.1 8B has no routed experts: ep or etp 2 splits nothing. `plan --fix ep=2` and
    `explain --ep 2` give the same line and exit 2."""
    base = ["-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8"]
    outputs = {}
    for name, args in (("plan", ["plan", *base, "--fix", "ep=2"]),
                       ("explain", ["explain", *base, "--ep", "2"])):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (name, result.output)
        outputs[name] = " ".join(result.output.split())
    said = "ep=2 applies to routed experts; llama-3.1-8b has none (a dense model: use ep=1)"
    assert said in outputs["plan"] and said in outputs["explain"]
    assert "--fix" in outputs["plan"] and "--ep" in outputs["explain"]
    result = runner.invoke(app, ["explain", *base, "--etp", "2"])
    assert result.exit_code == 2 and "etp=2 applies to routed experts" in result.output
    # a MoE model takes ep
    result = runner.invoke(app, ["explain", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--gpus", "8",
                                 "--ep", "2", "--format", "json"])
    assert result.exit_code in (0, 1), result.output


def test_bf16_on_v100_is_bad_input_naming_the_gpu():
    """V100 tensor cores run fp16 only (hardware/dgx2-v100.yaml peak_tflops has no bf16)."""
    result = runner.invoke(app, ["explain", "-m", "llama-3.1-8b", "-c", "dgx2-v100", "--gpus", "16",
                                 "--precision", "bf16"])
    assert result.exit_code == 2
    assert "V100-SXM3-32GB has no bf16 tensor cores; it runs fp16" in " ".join(result.output.split())


def _config_json(folder: Path) -> dict:
    """Llama 3.1 8B's config fields as a Hugging Face config.json (no `name` key), model_type
    mistral (same block, read by the same builder)."""
    import yaml
    config = yaml.safe_load((ROOT / "models/llama-3.1-8b.yaml").read_text())
    for key in ("name", "source", "hf_aliases", "hf_id"):
        config.pop(key, None)
    config["model_type"] = "mistral"
    folder.mkdir(parents=True, exist_ok=True)
    return config


def test_one_model_name_in_every_command(tmp_path):
    """A config.json in a folder is named after the folder, a bare JSON file after its stem, in
    models show, plan and serve-plan alike (the family, mistral, is not the name)."""
    config = _config_json(tmp_path / "bnb")
    (tmp_path / "bnb" / "config.json").write_text(json.dumps(config))
    (tmp_path / "other.json").write_text(json.dumps(config))
    for ref, name in ((tmp_path / "bnb" / "config.json", "bnb"), (tmp_path / "bnb", "bnb"),
                      (tmp_path / "other.json", "other")):
        shown = json.loads(runner.invoke(app, ["models", "show", str(ref), "--format", "json"]).output)
        assert shown["name"] == name and shown["family"] == "mistral"
        planned = runner.invoke(app, ["plan", "-m", str(ref), "-c", "dgx-h100", "--gpus", "8",
                                      "--top", "1", "--format", "json"])
        assert json.loads(planned.output)["request"]["model"] == name
        served = runner.invoke(app, ["serve-plan", "-m", str(ref), "-c", "dgx-h100", "--gpus", "1",
                                     "--input-len", "100", "--output-len", "10", "--format", "json"])
        assert served.exit_code == 0, served.output
        assert json.loads(served.stdout)["request"]["model"] == name


def test_model_from_standard_input_is_refused_by_name():
    for option in (["-m", "-", "-c", "dgx-h100"], ["-m", "llama-3.1-8b", "-c", "-"]):
        result = runner.invoke(app, ["plan", *option, "--gpus", "8"], input="model_type: llama\n")
        assert result.exit_code == 2
        text = " ".join(result.output.split())
        assert "standard input ('-') is not read for a" in text and "unknown" not in text


def test_models_show_output_loads_again_as_the_same_model(tmp_path):
    """`models show X --format yaml|json > f; -m f`: f loads as the model X is (the oracle: loading
    X itself), for a catalog model (dense, MoE with MLA) and a config.json that has no name."""
    from planner.specs.model import load_model

    config = _config_json(tmp_path / "bnb")
    (tmp_path / "bnb" / "config.json").write_text(json.dumps(config))
    for ref in ("llama-3.1-8b", "deepseek-v3", str(tmp_path / "bnb")):
        for fmt in ("yaml", "json"):
            shown = runner.invoke(app, ["models", "show", ref, "--format", fmt])
            assert shown.exit_code == 0, shown.output
            path = tmp_path / f"shown.{fmt}"
            path.write_text(shown.output)
            assert load_model(path) == load_model(ref), (ref, fmt)
            again = runner.invoke(app, ["models", "show", str(path), "--format", fmt])
            assert again.output == shown.output, (ref, fmt)
    explained = runner.invoke(app, ["explain", "-m", str(tmp_path / "shown.yaml"), "-c", "dgx-h100",
                                    "--gpus", "8", "--zero-stage", "1", "--format", "json"])
    assert json.loads(explained.output)["model"] == "bnb"


def test_a_long_value_is_cut_to_its_start_and_length_in_error_lines(tmp_path):
    """A 5,000-character value is echoed as its first 60 characters and its length, whether the
    planner (SpecError) or click (a bad integer, an unknown option) reports it."""
    long = "x" * 5000
    base = ["-m", "llama-3.1-8b", "-c", "dgx-h100"]
    for args in (["plan", *base, "--gpus", "8", "--fix", f"tp={long}"],
                 ["explain", *base, "--gpus", "8", "--pipeline-layers", long],
                 ["plan", *base, "--gpus", long],
                 ["plan", *base, "--gpus", "8", f"--{long}"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        line = " ".join(result.output.split())
        assert len(line) < 600 and "x" * 61 not in line, line[:300]
        assert "x" * 50 not in line or "characters)" in line  # echoed: cut, with its length
    # a JSON file with a 5,000-character key value: `check --format json` holds it cut too
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": long}))
    result = runner.invoke(app, ["check", str(path), *base, "--gpus", "8", "--seq-len", "4096",
                                 "--format", "github"])
    assert result.exit_code == 2 and "x" * 61 not in result.output and "5,002 characters" in result.output


def test_shorten_keeps_short_text_and_counts_long_runs():
    from planner.errors import LONG_WORD, shorten

    assert shorten("value 'abc' must be > 0") == "value 'abc' must be > 0"
    exact = "y" * LONG_WORD
    assert shorten(exact) == exact
    assert shorten("a " + "z" * 1234 + " b") == "a " + "z" * 60 + "...(1,234 characters) b"

