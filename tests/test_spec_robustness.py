"""Bad spec files: one SpecError line naming the file/key/value and what is allowed, exit code 2,
never a traceback; no value the user gave silently replaced. Plus OPT's word_embed_proj_dim.

Expected counts are hand arithmetic written here (transformers' module shapes), not the code's output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.cost.params_flops import count_params, flops_per_token
from planner.errors import SpecError
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config, load_model

DATA = Path(__file__).parent / "data"
MODELS = DATA / "models"
runner = CliRunner()


def cli(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def assert_cli_error(result, *fragments: str) -> None:
    """Exit 2, exactly one line on stderr holding every fragment, no traceback, nothing on stdout."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == ""


def spec_error(load, ref, *fragments: str) -> str:
    with pytest.raises(SpecError) as err:
        load(ref)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def write_yaml(tmp_path: Path, data: dict, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------- 1. files that are not spec files

def test_binary_file_is_not_utf8():
    spec_error(load_model, "/bin/ls", "/bin/ls", "not UTF-8", "offset")
    assert_cli_error(cli("models", "show", "/bin/ls"), "/bin/ls", "not UTF-8")
    assert_cli_error(cli("hardware", "show", "/bin/ls"), "/bin/ls", "not UTF-8")


def test_utf16_config_json_and_yaml_with_byte_ff():
    spec_error(load_model, MODELS / "utf16-dir", "config.json", "not UTF-8", "byte 0xff", "UTF-16")
    spec_error(load_model, MODELS / "not-utf8.yaml", "not-utf8.yaml", "not UTF-8", "byte 0xff at offset 50")
    assert_cli_error(cli("models", "show", MODELS / "not-utf8.yaml"), "not UTF-8")


def test_name_too_long_dev_null_fifo_symlink_loop(tmp_path):
    long_name = "x" * 300 + ".yaml"
    spec_error(load_model, long_name, "file name too long", "255")
    spec_error(load_cluster, long_name, "file name too long")
    spec_error(load_model, "/dev/null", "/dev/null", "not a regular file")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    spec_error(load_model, fifo, "pipe.yaml", "not a regular file")  # returns: never opened, never blocks
    loop = tmp_path / "loop.yaml"
    os.symlink(tmp_path / "other.yaml", loop)
    os.symlink(loop, tmp_path / "other.yaml")
    spec_error(load_model, loop, "loop.yaml", "symlink loop")
    assert_cli_error(cli("models", "show", "/dev/null"), "not a regular file")
    assert_cli_error(cli("hardware", "show", fifo), "not a regular file")
    assert_cli_error(cli("hardware", "show", long_name), "file name too long")


def test_directory_given_to_hardware_show(tmp_path):
    spec_error(load_cluster, str(tmp_path), str(tmp_path), "is a directory")
    assert_cli_error(cli("hardware", "show", tmp_path), "is a directory")


def test_empty_names():
    spec_error(load_model, "", "empty model name")
    assert_cli_error(cli("models", "show", ""), "empty model name")
    assert_cli_error(cli("hardware", "show", ""), "empty cluster name")


# ---------------------------------------------------------------- 2. wrong-typed values

TINY_LLAMA = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100, max_position_embeddings=256)
BLOOM = dict(model_type="bloom", hidden_size=64, n_layer=2, num_attention_heads=4, vocab_size=100)
GPT_OSS = dict(model_type="gpt_oss", hidden_size=64, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=100,
               max_position_embeddings=256, num_local_experts=4, experts_per_token=2, sliding_window=8)
QWEN3_MOE = dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 vocab_size=100, max_position_embeddings=256, num_experts=8, num_experts_per_tok=2)

WRONG_TYPES = [
    (BLOOM, "seq_length", "abc", "positive integer"),
    (BLOOM, "seq_length", True, "positive integer"),
    (BLOOM, "seq_length", 2048.5, "positive integer"),
    (GPT_OSS, "experts_per_token", "two", "positive integer"),
    (GPT_OSS, "experts_per_token", [2], "positive integer"),
    (GPT_OSS, "experts_per_token", True, "positive integer"),
    (GPT_OSS, "experts_per_token", 2.7, "positive integer"),
    (QWEN3_MOE, "mlp_only_layers", 5, "list of layer indices, integers from 0 to 3"),
    (QWEN3_MOE, "mlp_only_layers", "0,1", "list of layer indices"),
    (QWEN3_MOE, "mlp_only_layers", [0, 4], "integers from 0 to 3"),
    (QWEN3_MOE, "mlp_only_layers", [-1], "integers from 0 to 3"),
    (QWEN3_MOE, "mlp_only_layers", [True], "list of layer indices"),
    (GPT_OSS, "layer_types", [["a"], ["b"]], "full_attention or sliding_attention"),
    (GPT_OSS, "layer_types", ["full_attention"], "list of 2 entries"),
    (QWEN3_MOE, "use_sliding_window", "no", "true or false"),
    (TINY_LLAMA, "name", ["a", "b"], "non-empty string"),
    (TINY_LLAMA, "name", 123, "non-empty string"),
    (TINY_LLAMA, "hidden_act", 5, "non-empty string"),
    (TINY_LLAMA, "attention_bias", "yes", "true or false"),
    (TINY_LLAMA, "tie_word_embeddings", 1, "true or false"),
    (TINY_LLAMA, "rope_theta", "big", "positive number"),
    (TINY_LLAMA, "source", 7, "non-empty string"),
    (TINY_LLAMA, "model_type", ["llama"], "supported: llama"),
]


@pytest.mark.parametrize("base, key, value, allowed", WRONG_TYPES,
                         ids=[f"{b['model_type']}-{k}-{v!r}" for b, k, v, _ in WRONG_TYPES])
def test_wrong_typed_values_name_key_value_and_what_is_allowed(tmp_path, base, key, value, allowed):
    path = write_yaml(tmp_path, {**base, key: value})
    # echoed as the file spells it: JSON / YAML true, null, [true]; text and numbers as Python writes them
    as_json = value is None or isinstance(value, bool) or (isinstance(value, list) and not any(
        isinstance(x, (str, list)) for x in value))
    shown = json.dumps(value) if as_json else repr(value)
    spec_error(load_model, path, str(path), f"{key}: ", shown, allowed)


def test_wrong_type_via_cli(tmp_path):
    path = write_yaml(tmp_path, {**GPT_OSS, "experts_per_token": "two"})
    assert_cli_error(cli("models", "show", path), "experts_per_token", "'two'", "positive integer")


# ---------------------------------------------------------------- 3. non-string keys

@pytest.mark.parametrize("line, shown", [("1: 2", "key 1"), ("~: 2", "key null"), ("true: 2", "key True")])
def test_non_string_keys(tmp_path, line, shown):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(TINY_LLAMA) + line + "\n")
    spec_error(load_model, path, shown, "must be a string")
    assert_cli_error(cli("models", "show", path), shown, "must be a string")
    cluster = tmp_path / "c.yaml"
    cluster.write_text((DATA / "clusters" / "custom-pcie.yaml").read_text() + line + "\n")
    spec_error(load_cluster, cluster, shown, "must be a string")


# ---------------------------------------------------------------- 4. numbers and nesting parsers refuse

def test_5000_digit_integer_in_yaml_and_json(tmp_path):
    big = "9" * 5000
    yaml_path = tmp_path / "m.yaml"
    yaml_path.write_text(yaml.safe_dump(TINY_LLAMA).replace("hidden_size: 64", f"hidden_size: {big}"))
    spec_error(load_model, yaml_path, "more than 4,300 digits")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA).replace('"hidden_size": 64', f'"hidden_size": {big}'))
    spec_error(load_model, folder, "config.json", "more than 4,300 digits")
    assert_cli_error(cli("models", "show", folder), "more than 4,300 digits")


def test_deeply_nested_json_and_yaml(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    spec_error(load_model, folder, "nested too deeply")
    path = tmp_path / "deep.yaml"
    path.write_text("x: " + "[" * 10_000 + "]" * 10_000 + "\n")
    spec_error(load_model, path, "nested too deeply")


def cluster_with(tmp_path: Path, text_edit) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text_edit((DATA / "clusters" / "custom-pcie.yaml").read_text()))
    return path


@pytest.mark.parametrize("value, shown", [
    ("1" + "0" * 400, "characters)"),    # a 401-digit integer: OverflowError before
    ("1.0e+400", "inf"),                   # YAML float overflow reads as inf
    (".nan", "nan"),
    ("1.0e-12", "1e-12"),                  # a ZeroDivisionError downstream before
    ("0.5", "0.5"),
])
def test_cluster_memory_gib_bounds(tmp_path, value, shown):
    raw = yaml.safe_load((DATA / "clusters" / "custom-pcie.yaml").read_text())
    before = f"memory_gib: {raw['gpu']['memory_gib']}"
    path = cluster_with(tmp_path, lambda t: t.replace(before, f"memory_gib: {value}"))
    assert f"memory_gib: {value}" in path.read_text()
    spec_error(load_cluster, path, "gpu.memory_gib", shown, "positive number from 1 to 1,048,576")
    assert_cli_error(cli("hardware", "show", path), "gpu.memory_gib", "from 1 to")


# ---------------------------------------------------------------- 5. impossible sizes

@pytest.mark.parametrize("key, value, limit", [
    ("num_hidden_layers", 1_000_000_000, "at most 10,000"),
    ("hidden_size", 2**31 + 1, "at most 2,147,483,648"),
    ("vocab_size", 2**40, "at most 2,147,483,648"),
    ("num_attention_heads", 65_537, "at most 65,536"),
])
def test_sizes_above_bounds_fail_fast(tmp_path, key, value, limit):
    spec_error(load_model, write_yaml(tmp_path, {**TINY_LLAMA, key: value}), key, str(value), limit)


def test_expert_count_bound(tmp_path):
    spec_error(load_model, write_yaml(tmp_path, {**QWEN3_MOE, "num_experts": 100_000}),
               "num_experts", "100000", "at most 65,536")


# ---------------------------------------------------------------- 6. zeros are errors, not defaults

@pytest.mark.parametrize("base, key", [
    (dict(model_type="falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, vocab_size=100,
          new_decoder_architecture=True), "num_kv_heads"),
    (dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=128), "n_inner"),
    (dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=128, moe_intermediate_size=16,
          num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, vocab_size=100,
          max_position_embeddings=256, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
          kv_lora_rank=32, n_routed_experts=8, num_experts_per_tok=2), "moe_layer_freq"),
    (QWEN3_MOE, "decoder_sparse_step"),
    (dict(model_type="falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, vocab_size=100),
     "ffn_hidden_size"),
])
def test_zero_where_positive_is_required(tmp_path, base, key):
    from_config(base, name="ok")  # the base itself is valid
    spec_error(load_model, write_yaml(tmp_path, {**base, key: 0}), f"{key}: value 0 must be a positive integer")


# ---------------------------------------------------------------- 7. OPT with word_embed_proj_dim

def test_opt_350m_matches_transformers_by_hand():
    spec = load_model(MODELS / "opt-350m.yaml")
    h, e, vocab, layers, ffn = 1024, 512, 50272, 24, 4096
    counts = count_params(spec)
    assert counts.embedding == vocab * e + (2048 + 2) * h + e * h          # embed_tokens, positions, project_in
    assert counts.lm_head == h * e                                          # project_out; head tied
    assert counts.final_norm == 0                                           # do_layer_norm_before false
    # per layer: q,k,v,out h*h + h each; fc1 h*ffn + ffn; fc2 ffn*h + h; two LayerNorms 2h each
    layer = 4 * (h * h + h) + (h * ffn + ffn) + (ffn * h + h) + 2 * 2 * h
    assert layer == 12 * h**2 + 13 * h
    assert counts.total == 331_196_416 == (vocab * e + 2050 * h + e * h + h * e + layers * layer)
    # forward matmul parameters: layers without norms, project_in/out, the tied 512-wide head
    matmul = layers * (layer - 4 * h) + e * h + h * e + vocab * e
    flops = flops_per_token(spec, 2048)
    assert flops.forward - flops.attention_forward == 2 * matmul


def test_opt_final_norm_and_bias_flags():
    base = dict(model_type="opt", vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                ffn_dim=256, max_position_embeddings=32)
    pre_ln = count_params(from_config({**base, "do_layer_norm_before": True}, name="a"))
    post_ln = count_params(from_config({**base, "do_layer_norm_before": False}, name="b"))
    removed = count_params(from_config({**base, "_remove_final_layer_norm": True}, name="c"))
    assert pre_ln.final_norm == 2 * 64 and post_ln.final_norm == 0 and removed.final_norm == 0
    no_bias = count_params(from_config({**base, "enable_bias": False}, name="d"))
    assert pre_ln.total - no_bias.total == 2 * (4 * 64 + 256 + 64)  # q,k,v,out + fc1 + fc2 biases
    same = count_params(from_config({**base, "word_embed_proj_dim": 64}, name="e"))
    assert same.total == pre_ln.total  # no projections when the widths agree
    with pytest.raises(SpecError, match="layer_norm_elementwise_affine: value false"):
        from_config({**base, "layer_norm_elementwise_affine": False}, name="f")


def test_opt_350m_via_cli():
    result = cli("models", "show", MODELS / "opt-350m.yaml", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params"]["total"] == 331_196_416


# ---------------------------------------------------------------- 8. wording

def test_negative_and_zero_get_the_same_wording(tmp_path):
    negative = spec_error(load_model, write_yaml(tmp_path, {**TINY_LLAMA, "hidden_size": -64}), "hidden_size")
    zero = spec_error(load_model, write_yaml(tmp_path, {**TINY_LLAMA, "hidden_size": 0}), "hidden_size")
    # only the value differs (replace it in the message after the file path, which is
    # pytest's temporary folder and may itself contain "-64", e.g. pytest-647)
    where = negative.index("hidden_size")
    assert negative[where:].replace("-64", "0") == zero[zero.index("hidden_size"):]
    assert "must be a positive integer" in zero


def test_key_is_not_repeated_in_the_message(tmp_path):
    message = spec_error(load_model, write_yaml(tmp_path, {**QWEN3_MOE, "num_experts_per_tok": 9}),
                         "num_experts_per_tok: value 9 must be between 1 and the 8 experts")
    assert message.count("num_experts_per_tok") == 1
    message = spec_error(load_model, write_yaml(tmp_path, {**TINY_LLAMA, "num_key_value_heads": 3}),
                         "num_key_value_heads: value 3 must divide num_attention_heads 4")
    assert message.count("num_key_value_heads") == 1


def test_gpt_oss_errors_name_the_key_the_file_used(tmp_path):
    message = spec_error(load_model, write_yaml(tmp_path, {**GPT_OSS, "experts_per_token": 5}),
                         "experts_per_token: value 5 must be between 1 and the 4 experts")
    assert "num_experts_per_tok" not in message
    spec_error(load_model, write_yaml(tmp_path, {**GPT_OSS, "num_experts_per_tok": 3}),
               "experts_per_token: value 2 disagrees with num_experts_per_tok 3")


def test_unknown_key_lists_close_matches_and_where_keys_are_listed():
    message = spec_error(load_model, MODELS / "unknown-key.yaml", "num_key_value_head: unknown key",
                         "'num_key_value_heads'", "planner/specs/model.py")
    assert_cli_error(cli("models", "show", MODELS / "unknown-key.yaml"), "did you mean", "planner/specs/model.py")
    assert message.count("\n") == 0


# ---------------------------------------------------------------- 9. HF configs pasted as YAML

def test_hf_gpt2_config_pasted_as_yaml_loads():
    # 50257 x 768 wte + 1024 x 768 wpe + 12 x (12 h^2 + 13 h) + ln_f 2h, head tied: 124,439,808
    # (the parameter count Hugging Face reports for openai-community/gpt2).
    h = 768
    spec = load_model(MODELS / "gpt2-hf.yaml")
    assert count_params(spec).total == 50257 * h + 1024 * h + 12 * (12 * h * h + 13 * h) + 2 * h == 124_439_808
    assert spec.hidden_act == "gelu_new"


@pytest.mark.parametrize("typo, meant", [("hidden_sise", "hidden_size"), ("tie_word_embedding", "tie_word_embeddings"),
                                         ("num_experts_per_token_", "num_experts_per_token")])
def test_likely_typos_are_still_rejected_in_yaml(tmp_path, typo, meant):
    spec_error(load_model, write_yaml(tmp_path, {**TINY_LLAMA, typo: 1}), f"{typo}: unknown key", repr(meant))


def test_config_json_stays_lenient_about_typos(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_LLAMA, "hidden_sise": 1}))
    assert load_model(tmp_path).hidden_size == 64


def test_duplicate_keys_are_not_silently_overwritten(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(TINY_LLAMA) + "hidden_size: 128\n")
    spec_error(load_model, path, "hidden_size: key given twice")


@pytest.mark.parametrize(("model_type", "key"), [("llama", "hidden_act"), ("gpt2", "activation_function")])
def test_unknown_activation_names_the_key_and_the_allowed_values(model_type, key):
    """transformers' ACT2CLS has no "swiglu" (SwiGLU is silu in a gated MLP): such a config does
    not load there, so it does not load here."""
    base = {"llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                      "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 512},
            "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
                     "n_positions": 512}}[model_type]
    with pytest.raises(SpecError) as err:
        from_config({"model_type": model_type, **base, key: "swiglu"}, name="x", file="c.json")
    text = str(err.value)
    assert text.startswith(f"c.json: {key}: value 'swiglu'") and "silu" in text and "gelu_new" in text
    spec = from_config({"model_type": model_type, **base, key: "gelu_new"}, name="x", file="c.json")
    assert spec.hidden_act == "gelu_new"


def test_config_json_takes_its_folder_name_and_an_empty_folder_names_the_catalog_it_shadows(
        tmp_path, monkeypatch):
    """Fresh-user defects: a model read from `my-model/config.json` was named "config"; an empty
    `./llama-3.1-70b/` folder hid the catalog model with "directory holds no config.json"."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text((MODELS / "tiny-llama" / "config.json").read_text())
    assert load_model(str(folder / "config.json")).name == "my-model"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama-3.1-70b").mkdir()
    with pytest.raises(SpecError) as err:
        load_model("llama-3.1-70b")
    assert "shadows the catalog model 'llama-3.1-70b'" in str(err.value)


def test_read_text_says_what_was_expected(tmp_path: Path):
    """Binary junk in a launch script is not 'a YAML or JSON file': read_text names a text file by
    default (or the caller's kind), read_mapping keeps its YAML/JSON wording."""
    from planner.check import megatron, torchtitan
    from planner.specs import files
    junk = b"#!/bin/bash\n\x00\xff\xfe\x80 binary"
    script = tmp_path / "train.sh"
    script.write_bytes(junk)
    with pytest.raises(SpecError) as exc:
        files.read_text(script)
    assert "expected a UTF-8 text file" in str(exc.value) and "YAML" not in str(exc.value)
    with pytest.raises(SpecError) as exc:
        megatron.read(script, model=None, cluster="dgx-h100", gpus=8, seq_len=None)
    assert "train.sh" in str(exc.value) and "byte 0xff at offset 13" in str(exc.value)
    assert "shell script" in str(exc.value) and "YAML" not in str(exc.value)
    toml = tmp_path / "job.toml"
    toml.write_bytes(junk)
    with pytest.raises(SpecError) as exc:
        torchtitan.read(toml, model=None, cluster="dgx-h100", gpus=8, seq_len=None)
    assert "expected a UTF-8 TOML file" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        files.read_text(tmp_path)
    assert "is a directory; expected a text file" in str(exc.value)
    config = tmp_path / "m.yaml"
    config.write_bytes(junk)
    with pytest.raises(SpecError) as exc:
        files.read_mapping(config, "model keys")
    assert "expected a UTF-8 YAML or JSON file" in str(exc.value)
