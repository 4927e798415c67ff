"""The context length each engine derives from a model's config (`specs.model.engine_context_length`):
RoPE scaling factors applied as vLLM 0.33.0 (`vllm/config/model.py` _get_and_verify_max_len: factor
applied except for su / longrope / llama3 / yarn / deepseek_yarn / deepseek_llama_scaling) and SGLang
0.5.23 (`srt/utils/hf_transformers/common.py` get_context_length: factor applied unless rope_scaling
has original_max_position_embeddings or rope_type llama3) apply them; used by serve-plan's context
check, the engine readers' default max_model_len, the check's context rule and the longest context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import serve
from planner.check.engine_file import check_launch_file
from planner.errors import SpecError
from planner.specs.cluster import load_cluster
from planner.specs.model import engine_context_length, from_config, load_model

SMALL = {"model_type": "llama", "hidden_act": "silu", "hidden_size": 1024, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2816, "vocab_size": 32000,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}
LINEAR = {"rope_type": "linear", "factor": 4.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}


def _spec(scaling, positions=4096):
    return from_config({**SMALL, "max_position_embeddings": positions, "rope_scaling": scaling}, name="small")


@pytest.mark.parametrize("scaling, vllm, sglang", [
    (None, 4096, 4096),
    (LINEAR, 4 * 4096, 4 * 4096),                                  # both multiply
    ({"type": "dynamic", "factor": 2.0}, 2 * 4096, 2 * 4096),       # legacy `type` key, both multiply
    (YARN, 4096, 4096),                                             # yarn with original: neither
    ({"rope_type": "yarn", "factor": 4.0}, 4096, 4 * 4096),         # no original: SGLang multiplies
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 4096, 4096),
    ({"rope_type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}, 4096, 4096),  # no factor
])
def test_each_engine_derives_its_context_length(scaling, vllm, sglang):
    spec = _spec(scaling)
    assert engine_context_length(spec, "vllm") == vllm
    assert engine_context_length(spec, "sglang") == sglang
    assert engine_context_length(spec, "trtllm") == 4096  # its rule not read: max_position_embeddings


def _model_dir(tmp_path: Path, name: str, scaling) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**SMALL, "architectures": ["LlamaForCausalLM"],
                                                    "rope_scaling": scaling}))
    return folder


def _check(tmp_path, command: str, name: str) -> dict:
    path = tmp_path / name
    path.write_text(command + "\n")
    return check_launch_file(path, cluster="dgx-h100", gpus=1)


@pytest.mark.parametrize("launch", ["vllm serve {m} --max-model-len {n}",
                                    "python -m sglang.launch_server --model-path {m} --context-length {n}"])
def test_check_context_rule_and_default_follow_the_engine(tmp_path, launch):
    linear = _model_dir(tmp_path, "linear", LINEAR)
    ok = _check(tmp_path, launch.format(m=linear, n=16384), "ok.sh")
    assert "context_exceeds_model" not in [v["rule"] for v in ok["violations"]]
    over = _check(tmp_path, launch.format(m=linear, n=16385), "over.sh")
    v = next(v for v in over["violations"] if v["rule"] == "context_exceeds_model")
    assert v["fix"].endswith(" 16384") and "4096 x rope_scaling factor 4 = 16384" in v["message"]
    # No length flag: the engine's default is the derived length; the pool of an H100 holds more
    # than 16,384 tokens of this 4-layer model (4 x 2 x 1024 x 2 B = 16 KiB a token), so it binds.
    default = _check(tmp_path, launch.format(m=linear, n=0).rsplit(" ", 2)[0], "default.sh")
    assert default["launches"][0]["recomputed"]["longest_context"] == 16384
    yarn = _model_dir(tmp_path, "yarn", YARN)
    refused = _check(tmp_path, launch.format(m=yarn, n=8192), "yarn.sh")
    v = next(v for v in refused["violations"] if v["rule"] == "context_exceeds_model")
    assert v["fix"].endswith(" 4096") and "max_position_embeddings 4096" in v["message"]


def test_serve_plan_accepts_the_scaled_context_and_refuses_past_it():
    hw = load_cluster("dgx-h100")
    ask = dict(gpus=1, input_len=12000, output_len=1000)
    out = serve.serve_plan(_spec(LINEAR), hw, serve.ServeRequest(**ask))
    assert out["plans"][0]["longest_context"] == 16384
    with pytest.raises(SpecError, match="allowed: up to 4096"):
        serve.serve_plan(_spec(YARN), hw, serve.ServeRequest(**ask))
    with pytest.raises(SpecError, match="allowed: up to 16384"):
        serve.serve_plan(_spec(LINEAR), hw, serve.ServeRequest(gpus=1, input_len=16000, output_len=1000))


@pytest.mark.parametrize("factor, shown", [(-4, "-4"), (0, "0"), ("abc", "'abc'"), (float("inf"), "inf")])
def test_bad_rope_scaling_factor_is_bad_input_at_load(tmp_path, factor, shown):
    """review-fresh5 #3: a factor that is not a positive number is refused where it is written (one line:
    file, key rope_scaling.factor, value, what is allowed), not ignored (a string) nor blamed on
    --input-len (a negative one gave "allowed: up to -32768")."""
    folder = _model_dir(tmp_path, "rope", {"type": "linear", "factor": factor})
    with pytest.raises(SpecError) as err:
        load_model(folder)
    text = str(err.value)
    assert text.startswith(f"{folder / 'config.json'}: rope_scaling.factor: value {shown} must be a positive number")
    assert "\n" not in text


def test_null_rope_scaling_factor_means_one():
    """vLLM 0.33.0 `vllm/config/model.py` lines 2624-2632: a null factor falls back to 1.0 (with a warning)."""
    spec = _spec({"rope_type": "linear", "factor": None})
    assert engine_context_length(spec, "vllm") == 4096


QWEN3_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


@pytest.mark.parametrize("engine, override", [("vllm", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
                                              ("sglang", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")])
def test_yarn_on_40960_positions_is_40960_and_the_refusal_says_why(engine, override):
    """review-fresh5 #1's config (Qwen3's YaRN recipe in config.json). vLLM 0.33.0 `vllm/config/model.py`
    _get_and_verify_max_len: `yarn` is in the tuple (lines 2613-2620) whose factor is not applied, and the
    derived length stays max_position_embeddings 40,960 (original_max_position_embeddings is read only for
    longrope, lines 2645-2649), not 32,768 x 4 = 131,072; SGLang 0.5.23 `srt/utils/hf_transformers/common.py`
    lines 682-683 set the factor to 1 when original_max_position_embeddings is present -> 40,960. The
    refusal names the factor left unapplied and the engine's own override (vLLM lines 2677-2683, SGLang
    `srt/configs/model_config.py` lines 1302-1316)."""
    spec = _spec(QWEN3_YARN, positions=40960)
    assert engine_context_length(spec, engine) == 40960
    req = serve.ServeRequest(gpus=1, input_len=100_000, output_len=1000, engine=engine)
    with pytest.raises(SpecError) as err:
        serve.serve_plan(spec, load_cluster("dgx-h100"), req)
    text = str(err.value)
    assert "up to 40960" in text and "does not apply rope_scaling yarn factor 4" in text and override in text
