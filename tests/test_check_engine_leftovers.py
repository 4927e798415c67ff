"""`planner check` of engine launches the way users write them (review leftovers of issues 10/11): vLLM's
container image, a value after a switch, chunked prefill off with fewer batched tokens than the context.
Expected behaviour from the engines' sources, cited per test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from planner.check.engine_file import check_launch_file, reader_of
from planner.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]


def _file(tmp_path: Path, text: str, name: str = "launch.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _errors(result: dict) -> list[str]:
    return [v["rule"] for v in result["violations"] if v["severity"] == "error"]


# ---------------------------------------------------------------- container images

# vllm-project/vllm docs/deployment/docker.md (@02319794): the image's ENTRYPOINT is `vllm serve`
# (docker/Dockerfile @dead20ba, target vllm-openai), so the words after the image are its arguments.
DOCKER_VLLM = ("docker run --rm --gpus all \\\n"
               "    -v ~/.cache/huggingface:/root/.cache/huggingface \\\n"
               "    -p 8000:8000 \\\n"
               "    vllm/vllm-openai:latest \\\n"
               "    meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --max-model-len 8192\n")


def test_docker_run_of_vllm_image_is_a_vllm_launch(tmp_path):
    path = _file(tmp_path, DOCKER_VLLM)
    from planner.check import vllm
    assert reader_of(path) is vllm
    result = check_launch_file(path, cluster="dgx-h100", gpus=2)
    assert result["verdict"] == "pass" and result["model"] == "llama-3.1-8b"
    assert result["launches"][0]["parallelism"]["tp"] == 2
    assert result["launches"][0]["recomputed"]["max_model_len"] == 8192


def test_docker_vllm_image_with_registry_and_model_flag_and_rules_apply(tmp_path):
    """A registry host and a version tag are the same image; --model works as on `vllm serve` (moved to the
    front); the rules still bind: tp 3 does not divide Llama-3.1-8B's 32 heads."""
    path = _file(tmp_path, "docker run --gpus all docker.io/vllm/vllm-openai:v0.33.0 --model meta-llama/Llama-3.1-8B "
                           "--tensor-parallel-size 3\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=3)
    assert _errors(result) == ["heads_divisible"]


def test_docker_vllm_image_with_vllm_serve_repeated_is_bad_input(tmp_path):
    """`vllm/vllm-openai vllm serve M`: the entrypoint runs `vllm serve vllm serve M` -> 'unrecognized arguments'."""
    path = _file(tmp_path, "docker run --gpus all vllm/vllm-openai:latest vllm serve meta-llama/Llama-3.1-8B\n")
    with pytest.raises(SpecError, match="entrypoint is already `vllm serve`"):
        check_launch_file(path, cluster="dgx-h100", gpus=1)


def test_docker_run_with_other_entrypoint_is_not_the_image_launch(tmp_path):
    path = _file(tmp_path, "docker run --entrypoint bash vllm/vllm-openai:latest -c 'echo hi'\n")
    with pytest.raises(SpecError, match="no `vllm serve` command line"):
        check_launch_file(path, cluster="dgx-h100", gpus=1)


@pytest.mark.parametrize("entrypoint", ["--entrypoint vllm", "--entrypoint=vllm"])
def test_docker_run_with_entrypoint_vllm_then_serve_is_the_vllm_serve_launch(tmp_path, entrypoint):
    """review-fresh5 #9: `--entrypoint vllm IMAGE serve M` runs `vllm serve M` (Docker reference, `docker run
    --entrypoint`: it overwrites the image's ENTRYPOINT and the words after the image are its arguments)."""
    path = _file(tmp_path, f"docker run --gpus all {entrypoint} vllm/vllm-openai:latest serve "
                           "meta-llama/Llama-3.1-8B-Instruct -tp 2\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=2)
    assert result["verdict"] == "pass" and result["model"] == "llama-3.1-8b"
    assert result["launches"][0]["parallelism"]["tp"] == 2


def _image_warnings(result: dict) -> list[dict]:
    return [v for v in result["violations"] if v["rule"] == "image_version"]


def test_image_tag_of_another_vllm_release_notes_the_modelled_defaults(tmp_path):
    """review-fresh5 #9: `vllm/vllm-openai:v0.6.3` is costed with vLLM 0.33.0's defaults, gpu_memory_utilization
    0.92 (`vllm/config/cache.py` line 215 @0.33.0) where 2023's releases used 0.9 (vllm-project/vllm pull
    request 2162): a warning says so, naming the flag that pins it; none for the modelled release, `latest`,
    or when the launch gives the fraction (the fix is then empty)."""
    old = check_launch_file(_file(tmp_path, "docker run --gpus all vllm/vllm-openai:v0.6.3 "
                                            "meta-llama/Llama-3.1-8B-Instruct -tp 2\n", "old.sh"), cluster="dgx-h100", gpus=2)
    (warning,) = _image_warnings(old)
    assert warning["severity"] == "warning" and old["verdict"] == "pass"
    assert "runs vLLM 0.6.3; this check models vLLM 0.33.0" in warning["message"]
    assert "default 0.92" in warning["message"] and warning["fix"] == "pass --gpu-memory-utilization to pin the budget"
    for tag in ("v0.33.0", "latest"):
        same = check_launch_file(_file(tmp_path, f"docker run vllm/vllm-openai:{tag} meta-llama/Llama-3.1-8B\n",
                                       f"{tag}.sh"), cluster="dgx-h100", gpus=1)
        assert _image_warnings(same) == []
    pinned = check_launch_file(_file(tmp_path, "docker run vllm/vllm-openai:v0.10.1 meta-llama/Llama-3.1-8B "
                                               "--gpu-memory-utilization 0.9\n", "pinned.sh"), cluster="dgx-h100", gpus=1)
    (warning,) = _image_warnings(pinned)
    assert "0.92" not in warning["message"] and warning["fix"] == ""


def test_docker_run_of_sglang_image_is_an_sglang_launch(tmp_path):
    """sgl-project/sglang docs/get_started/install.md (@010db98c), 'Method 3: Using docker', verbatim but the
    token: the image runs the launcher named after it."""
    path = _file(tmp_path, "docker run --gpus all \\\n    --shm-size 32g \\\n    -p 30000:30000 \\\n"
                           "    -v ~/.cache/huggingface:/root/.cache/huggingface \\\n"
                           "    --env \"HF_TOKEN=secret\" \\\n    --ipc=host \\\n    lmsysorg/sglang:latest \\\n"
                           "    python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                           "--host 0.0.0.0 --port 30000\n")
    from planner.check import sglang
    assert reader_of(path) is sglang
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert result["verdict"] == "pass" and result["model"] == "llama-3.1-8b"


# ---------------------------------------------------------------- stray positional words

def test_enforce_eager_true_is_an_unrecognized_argument(tmp_path):
    """--enforce-eager is a BooleanOptionalAction (vLLM 0.33.0 engine/arg_utils.py; --no-enforce-eager in the
    recorded flag list): `true` is a second positional and `vllm serve` exits 2 'unrecognized arguments: true'
    (its parser's one positional, model_tag, is the model). check fails it naming the word."""
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --enforce-eager true --max-model-len 8192\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert _errors(result) == ["unrecognized_argument"]
    found = result["violations"][0]
    assert "'unrecognized arguments: true'" in found["message"] and "--enforce-eager is a switch" in found["message"]
    assert found["fix"].startswith("remove true")
    run = subprocess.run([sys.executable, "-m", "planner", "check", str(path), "--cluster", "dgx-h100", "--gpus", "1"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1 and "unrecognized arguments: true" in " ".join(run.stdout.split())


def test_enforce_eager_true_with_model_flag_is_read_with_the_right_model(tmp_path):
    """`vllm serve --model M --enforce-eager true`: vLLM moves --model to the front (argparse_utils.py parse_args),
    so `true` is again left over; the model is M, not 'true'."""
    path = _file(tmp_path, "vllm serve --model meta-llama/Llama-3.1-8B --enforce-eager true --max-model-len 8192\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert result["model"] == "llama-3.1-8b" and _errors(result) == ["unrecognized_argument"]


def test_shell_redirections_are_not_arguments(tmp_path):
    """`> log 2>&1 < /dev/null` are applied by the shell, never passed to vLLM (POSIX shell 2.7 Redirection)."""
    path = _file(tmp_path, "nohup vllm serve meta-llama/Llama-3.1-8B --max-model-len 8192 > vllm.log 2>&1 "
                           "</dev/null &\nvllm serve meta-llama/Llama-3.1-8B --max-model-len 8192 --port 8001 "
                           "2>>err.log | tee out.log\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=8)
    assert "unrecognized_argument" not in _errors(result)


def test_switch_alone_passes(tmp_path):
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --enforce-eager --max-model-len 8192\n")
    assert check_launch_file(path, cluster="dgx-h100", gpus=1)["verdict"] == "pass"


def test_api_server_module_ignores_a_positional_model(tmp_path):
    """`python -m vllm.entrypoints.openai.api_server M`: the module parses model_tag but serves args.model
    (vLLM 0.33.0 entrypoints/launchers/api_server/entry.py; only cli/serve.py copies model_tag), default
    Qwen/Qwen3-0.6B (config/model.py)."""
    path = _file(tmp_path, "python -m vllm.entrypoints.openai.api_server meta-llama/Llama-3.1-8B --max-model-len 8192\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert _errors(result) == ["model_ignored"]
    assert "Qwen/Qwen3-0.6B" in result["violations"][0]["message"]
    good = _file(tmp_path, "python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B "
                           "--max-model-len 8192\n", "good.sh")
    assert check_launch_file(good, cluster="dgx-h100", gpus=1)["verdict"] == "pass"


# ---------------------------------------------------------------- chunked prefill off

@pytest.mark.parametrize("off", ["--no-enable-chunked-prefill", "--disable-chunked-prefill"])
def test_chunked_prefill_off_needs_batched_tokens_of_max_model_len(tmp_path, off):
    """vLLM 0.33.0 config/scheduler.py SchedulerConfig.verify_max_model_len: max_num_batched_tokens <
    max_model_len and not enable_chunked_prefill -> ValueError at start-up. 4096 < 8192 here."""
    path = _file(tmp_path, f"vllm serve meta-llama/Llama-3.1-8B {off} --max-num-batched-tokens 4096 "
                           f"--max-model-len 8192\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert _errors(result) == ["batched_tokens_below_max_model_len"]
    found = result["violations"][0]
    assert "max_num_batched_tokens (4096) is smaller than max_model_len (8192)" in found["message"]
    assert found["fix"].startswith("--max-num-batched-tokens 8192")


def test_chunked_prefill_on_allows_fewer_batched_tokens(tmp_path):
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --enable-chunked-prefill --max-num-batched-tokens 4096 "
                           "--max-model-len 8192\n")
    assert check_launch_file(path, cluster="dgx-h100", gpus=1)["verdict"] == "pass"


def test_chunked_prefill_off_unset_batched_tokens_become_max_model_len(tmp_path):
    """Unset, vLLM raises max_num_batched_tokens to max(max_model_len, default) with chunked prefill off
    (engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args): 32768 > the H100 default 8192,
    so the activation peak is that of a 32,768-token pass."""
    on = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --max-model-len 32768\n", "on.sh"),
                           cluster="dgx-h100", gpus=1)
    off = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --no-enable-chunked-prefill "
                                            "--max-model-len 32768\n", "off.sh"), cluster="dgx-h100", gpus=1)
    act = lambda r: r["launches"][0]["recomputed"]["memory_bytes"]["activations"]  # noqa: E731
    assert off["verdict"] == "pass" and act(off) > act(on)


def test_batched_tokens_below_max_num_seqs(tmp_path):
    """verify_max_model_len: max_num_batched_tokens (128) must be >= max_num_seqs (256)."""
    path = _file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B --max-num-seqs 256 --max-num-batched-tokens 128 "
                           "--max-model-len 8192\n")
    result = check_launch_file(path, cluster="dgx-h100", gpus=1)
    assert _errors(result) == ["batched_tokens_below_max_num_seqs"]


# ---------------------------------------------------------------- Hugging Face ids with release / quantization suffixes

GIB = 2**30


def _weights(result: dict) -> int:
    return result["launches"][0]["recomputed"]["memory_bytes"]["weights"]


def test_qwen_fp8_id_is_the_catalog_model_with_block_fp8_weights(tmp_path):
    """Qwen/Qwen3-235B-A22B-FP8 (the id of the vLLM rows of serving_measurements.csv): Qwen's -FP8 releases are
    'fine-grained fp8 quantization with block size of 128' (model card) -- one byte per weight: at tp 8 about
    235e9 / 8 = 29.4e9 B of weights per GPU, half the bf16 release's (hand arithmetic, 2 B per weight)."""
    fp8 = check_launch_file(_file(tmp_path, "vllm serve Qwen/Qwen3-235B-A22B-FP8 --tensor-parallel-size 8\n"),
                            cluster="hgx-h200", gpus=8)
    base = check_launch_file(_file(tmp_path, "vllm serve Qwen/Qwen3-235B-A22B --tensor-parallel-size 8\n", "b.sh"),
                             cluster="hgx-h200", gpus=8)
    assert fp8["verdict"] == "pass" and fp8["model"] == "qwen3-235b-a22b-fp8" and base["model"] == "qwen3-235b-a22b"
    assert 29.0e9 < _weights(fp8) < 30.5e9 and 58.0e9 < _weights(base) < 60.5e9


@pytest.mark.parametrize("ref, quant, fmt", [
    ("Qwen/Qwen3-32B-AWQ", "gptq", "int4"),          # AWQ checkpoint: gptq is another family (vLLM _verify_quantization)
    ("Qwen/Qwen3-235B-A22B-GPTQ-Int4", "awq", "int4"),
    ("Qwen/Qwen3-30B-A3B-FP8", "awq", "fp8-block"),
])
def test_quantization_suffix_sets_the_checkpoint_format_and_is_checked_against_the_flag(tmp_path, ref, quant, fmt):
    from planner.specs.hf_ids import lookup
    assert lookup(ref).weight_format == fmt
    ok = check_launch_file(_file(tmp_path, f"vllm serve {ref} --tensor-parallel-size 4\n"), cluster="hgx-h200", gpus=4)
    assert ok["verdict"] == "pass"
    bad = check_launch_file(_file(tmp_path, f"vllm serve {ref} --tensor-parallel-size 4 --quantization {quant}\n",
                                  "bad.sh"), cluster="hgx-h200", gpus=4)
    assert _errors(bad) == ["quantization_mismatch"]


def test_int4_suffix_holds_a_quarter_of_bf16_weights_plus_scales(tmp_path):
    """Qwen3-32B-AWQ: 4 bits + (16-bit scale + 4-bit zero) / 128 per quantized weight = 4.156 bits, a
    quarter-and-a-bit of bf16's 16 (cost.serving WEIGHT_FORMATS int4); embeddings and LM head stay bf16.
    So its weights lie between 1/4 and 1/3 of the bf16 release's."""
    awq = check_launch_file(_file(tmp_path, "vllm serve Qwen/Qwen3-32B-AWQ\n"), cluster="hgx-h200", gpus=1)
    bf16 = check_launch_file(_file(tmp_path, "vllm serve Qwen/Qwen3-32B\n", "b.sh"), cluster="hgx-h200", gpus=1)
    assert bf16["verdict"] == "pass" and 0.25 < _weights(awq) / _weights(bf16) < 1 / 3


def test_release_suffix_carries_its_context(tmp_path):
    """Qwen3-235B-A22B-Instruct-2507: 'Context Length: 262,144 natively' (model card) against the base's
    max_position_embeddings 40,960: --max-model-len 131072 passes on the 2507 release, fails on the base."""
    line = "--tensor-parallel-size 8 --max-model-len 131072\n"
    new = check_launch_file(_file(tmp_path, f"vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 {line}"),
                            cluster="hgx-h200", gpus=8)
    assert new["verdict"] == "pass" and new["model"] == "qwen3-235b-a22b-instruct-2507-fp8"
    old = check_launch_file(_file(tmp_path, f"vllm serve Qwen/Qwen3-235B-A22B {line}", "old.sh"),
                            cluster="hgx-h200", gpus=8)
    assert "context_exceeds_model" in _errors(old)
    from planner.specs.hf_ids import lookup
    thinking = lookup("qwen/qwen3-30b-a3b-thinking-2507")
    assert thinking.max_position_embeddings == 262144 and thinking.weight_format is None


def test_sglang_reads_suffixed_ids_too(tmp_path):
    result = check_launch_file(_file(tmp_path, "python -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B-FP8 "
                                               "--tp 8\n"), cluster="hgx-h200", gpus=8)
    assert result["verdict"] == "pass" and result["model"] == "qwen3-235b-a22b-fp8"


def test_unknown_suffix_or_publisher_stays_bad_input():
    from planner.specs.hf_ids import lookup
    assert lookup("Qwen/Qwen3-235B-A22B-NVFP4") is None
    assert lookup("someone/Qwen3-235B-A22B-FP8") is None


# ---------------------------------------------------------------- emitted max-model-len margin

def _served(model: str, context: int, pools: list[int], given: bool = False, engine: str = "vllm"):
    from planner.emit.engine_launch import served_length
    data = {"request": {"model": model, "max_model_len": context, "max_model_len_given": given},
            "deployment": {"mix": [{"longest_context": p} for p in pools]}}
    return served_length(data, engine)[0]


def test_emitted_max_model_len_rounds_up_to_a_power_of_two():
    # 4,000 + 500 = 4,500 -> 8,192 (2^13), below Llama-3.1-70B's 131,072 and a pool of 400,000 tokens.
    assert _served("llama-3.1-70b", 4500, [400_000]) == 8192
    assert _served("llama-3.1-70b", 8192, [400_000]) == 8192      # already a power of two: unchanged


def test_emitted_max_model_len_capped_by_the_model_and_the_pool():
    # Qwen3-32B: max_position_embeddings 40,960 (models/qwen3-32b.yaml); 38,000 -> 65,536 > 40,960 -> 40,960.
    assert _served("qwen3-32b", 38_000, [500_000]) == 40_960
    # A pool that holds 14,000 tokens of one sequence: 12,000 -> 16,384 would not start; 14,000 is written.
    assert _served("llama-3.1-8b", 12_000, [14_000, 90_000]) == 14_000
    # Never below what was planned, and the user's own --max-model-len is kept as given.
    assert _served("llama-3.1-8b", 12_000, [11_000]) == 12_000
    assert _served("llama-3.1-8b", 5_000, [90_000], given=True) == 5_000


def test_serve_plan_emit_writes_the_margin_and_says_why():
    proc = subprocess.run([sys.executable, "-m", "planner", "serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100",
                           "--gpus", "1", "--input-len", "2000", "--output-len", "300", "--tpot-ms", "20",
                           "--emit", "sglang"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--context-length 4096" in proc.stdout and "# max-model-len 4096: input + output = 2,300" in proc.stdout
    given = subprocess.run([sys.executable, "-m", "planner", "serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100",
                            "--gpus", "1", "--input-len", "2000", "--output-len", "300", "--max-model-len", "2500",
                            "--emit", "vllm"], capture_output=True, text=True, cwd=ROOT)
    assert given.returncode == 0 and "--max-model-len 2500" in given.stdout and "# max-model-len" not in given.stdout


# ---------------------------------------------------------------- the id serve-plan --emit serves

def _emit_words(*model_args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "planner", "serve-plan", *model_args, "-c", "dgx-h100", "--gpus", "1",
                           "--input-len", "2000", "--output-len", "300", "--emit", "vllm"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if " vllm serve " in line)
    return line.split()


def test_emit_serves_the_instruct_release_of_a_catalog_model():
    """models/llama-3.1-8b.yaml lists meta-llama/Llama-3.1-8B-Instruct in hf_aliases (same config.json); the
    serving measurements were taken on it (serving_measurements.csv: 154 rows of meta-llama/Llama-3.1-8B-Instruct)."""
    words = _emit_words("-m", "llama-3.1-8b")
    assert words[words.index("serve") + 1] == "meta-llama/Llama-3.1-8B-Instruct"


def test_emit_serves_the_id_given_as_the_model():
    """The override: -m names the checkpoint to serve (the base id, or a suffixed release read through
    planner.specs.hf_ids, costed in its own format)."""
    words = _emit_words("-m", "meta-llama/Llama-3.1-8B")
    assert words[words.index("serve") + 1] == "meta-llama/Llama-3.1-8B"


def test_load_model_reads_hugging_face_ids():
    from planner.specs.model import load_model
    spec = load_model("Qwen/Qwen3-235B-A22B-FP8")
    assert spec.name == "qwen3-235b-a22b-fp8" and spec.weight_format == "fp8-block"
    assert load_model("meta-llama/Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    with pytest.raises(SpecError):
        load_model("nobody/NoSuchModel-7B")


# ---------------------------------------------------------------- SGLang chunked prefill off (issue 11)

def _sglang(tmp_path, flags: str, name: str = "sg.sh") -> dict:
    path = _file(tmp_path, f"python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct {flags}\n",
                 name)
    return check_launch_file(path, cluster="dgx-h100", gpus=1)


def _warnings(result: dict) -> dict:
    return {v["rule"]: v for v in result["violations"] if v["severity"] == "warning"}


def test_sglang_chunked_prefill_off_prefills_the_whole_context_in_one_forward(tmp_path):
    """SGLang 0.5.23: --chunked-prefill-size -1 disables chunking (srt/arg_groups/fields/schedule.py l. 52-55);
    the first request of a batch is admitted whatever its length (srt/managers/schedule_policy.py l. 1627-1632),
    while mem_fraction_static reserves activations for max(--max-prefill-tokens 16384, 2048) tokens
    (srt/arg_groups/memory_hook.py l. 303-307). Llama-3.1-8B's context 131,072 > 16,384: SGLang starts (a
    warning, not vLLM's start-up error) and the forward is costed at 131,072 tokens, more activation memory than
    the default 8,192-token chunk of an H100 (memory_hook.py handle_gpu_memory_settings, < 160 GiB)."""
    on = _sglang(tmp_path, "", "on.sh")
    off = _sglang(tmp_path, "--chunked-prefill-size -1", "off.sh")
    warning = _warnings(off)["prefill_not_chunked"]
    assert "131,072 tokens in one forward" in warning["message"]
    assert "max(16,384, 2048) = 16,384 tokens" in warning["message"]
    assert warning["fix"] == ("remove --chunked-prefill-size -1 (chunked prefill splits long prompts), or "
                              "--context-length 16384 (prompts SGLang's reserve covers)")
    act = lambda r: r["launches"][0]["recomputed"]["memory_bytes"]["activations"]  # noqa: E731
    assert act(off) > act(on) and "prefill_not_chunked" not in _warnings(on)


def test_sglang_chunked_prefill_off_within_the_reserve_is_silent(tmp_path):
    """A context the reserve covers (8,192 <= 16,384): no warning; the forward holds up to
    max(--max-prefill-tokens, context) = 16,384 input tokens, so activations exceed those of the
    8,192-token default chunk."""
    off = _sglang(tmp_path, "--chunked-prefill-size -1 --context-length 8192", "short.sh")
    on = _sglang(tmp_path, "--context-length 8192", "short_on.sh")
    assert off["verdict"] == "pass" and "prefill_not_chunked" not in _warnings(off)
    act = lambda r: r["launches"][0]["recomputed"]["memory_bytes"]["activations"]  # noqa: E731
    assert act(off) > act(on)


def test_sglang_chunked_prefill_off_reserve_follows_max_prefill_tokens():
    """memory_hook.py: off, the reserve is 512 + 1.5 x max(max_prefill_tokens, 2048) MiB (+ tp x pp / 8 x 1024,
    graphs), with no prefill graph (its max batch is the chunk size, -1). Hand arithmetic, H100 (81,559 MiB),
    tp 1, non-MLA, max_prefill_tokens 16384: decode graphs 256 x 2 = 512; reserved 512 + 24576 + 128 + 512 =
    25,728 MiB (above the 10,240 floor); (81559 - 25728) / 81559 = 0.68454 -> 0.685."""
    from planner.frameworks.sglang import default_mem_fraction_static
    assert default_mem_fraction_static(81559, tp=1, pp=1, chunked_prefill_size=-1, max_running_requests=None,
                                       mla=False, attn_dp=1, role=None, a2a="none") == 0.685


# ---------------------------------------------------------------- docker run --gpus (issue 11)

def _docker(tmp_path, gpus: str, degrees: str = "--tensor-parallel-size 2", name: str = "d.sh") -> dict:
    path = _file(tmp_path, f"docker run --rm --gpus {gpus} -p 8000:8000 vllm/vllm-openai:latest "
                           f"meta-llama/Llama-3.1-8B-Instruct {degrees} --max-model-len 8192\n", name)
    return check_launch_file(path, cluster="dgx-h100")


@pytest.mark.parametrize("gpus", ["all", "2", "4", "'\"device=0,1\"'", "device=GPU-3f2a", "count=2",
                                  "'\"capabilities=compute,utility\",count=2'"])
def test_docker_gpus_that_cover_the_ranks_pass(tmp_path, gpus):
    """docker/cli@f79193c opts/gpus.go: `all` (count -1: every GPU), a count, a device list inside one quoted CSV
    field; tp 2 x pp 1 x dp 1 = 2 ranks fit each (one device only when listed alone: see the next test)."""
    result = _docker(tmp_path, gpus, "--tensor-parallel-size 1" if gpus == "device=GPU-3f2a" else "--tensor-parallel-size 2")
    assert result["verdict"] == "pass", result["violations"]


@pytest.mark.parametrize("gpus, seen", [("1", 1), ("device=3", 1), ("'\"device=0,1\"'", 2),
                                        ("capabilities=compute", 1)])
def test_docker_gpus_fewer_than_the_ranks_fail_the_world_size(tmp_path, gpus, seen):
    """tp 2 x pp 2 = 4 ranks on a container that sees `seen` GPUs: vLLM fails at start-up. A request with
    neither count nor device is a count of 1 (opts/gpus.go: `req.Count = 1`)."""
    result = _docker(tmp_path, gpus, "--tensor-parallel-size 2 --pipeline-parallel-size 2", "few.sh")
    (found,) = [v for v in result["violations"] if v["rule"] == "world_size"]
    text = " ".join(found["message"].split())
    assert "starts 4 ranks" in text and f"gives it {seen} GPU" in text and "--gpus" in text
    assert found["fix"].startswith("give 4 GPUs in --gpus")


def test_docker_unquoted_device_list_is_the_daemons_count_and_devices_refusal(tmp_path):
    """`--gpus device=0,1`: the CSV record is `device=0` and a bare `1` (a count), and moby@5c48736
    daemon/nvidia_linux.go refuses 'cannot set both Count and DeviceIDs on device request'."""
    result = _docker(tmp_path, "device=0,1", name="unquoted.sh")
    assert _errors(result) == ["docker_gpus"]
    found = result["violations"][0]
    assert "cannot set both Count and DeviceIDs" in found["message"]
    assert found["fix"] == "quote the device list inside the value: --gpus '\"device=0,1\"'"


@pytest.mark.parametrize("gpus, says", [("foo=1", "unexpected key 'foo'"), ("2,3", "specified only once"),
                                        ("two", "must be an integer or all")])
def test_docker_gpus_the_cli_refuses_is_bad_input(tmp_path, gpus, says):
    with pytest.raises(SpecError, match=says):
        _docker(tmp_path, gpus, name="bad.sh")


def test_cuda_visible_devices_inside_the_container_wins(tmp_path):
    """An explicit CUDA_VISIBLE_DEVICES (the environment the engine's process gets) limits what it sees whatever
    the container exposes: still the message names CUDA_VISIBLE_DEVICES."""
    path = _file(tmp_path, "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct "
                           "--tensor-parallel-size 2 --max-model-len 8192\n", "cvd.sh")
    (found,) = [v for v in check_launch_file(path, cluster="dgx-h100")["violations"] if v["rule"] == "world_size"]
    assert "CUDA_VISIBLE_DEVICES gives it 1 GPU" in found["message"]


# ---------------------------------------------------------------- quantizing publishers, unknown suffixes (issue 11)

@pytest.mark.parametrize("ref, name", [("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b"),
                                       ("nvidia/Llama-3.1-405B-Instruct-FP8", "llama-3.1-405b"),
                                       ("NVIDIA/llama-3.1-70b-instruct-fp8", "llama-3.1-70b")])
def test_nvidia_fp8_release_is_the_llama_model_with_per_tensor_fp8(ref, name):
    """NVIDIA's ModelOpt FP8 Llama 3.1 releases (model card of nvidia/Llama-3.1-405B-Instruct-FP8: the linear
    weights and activations of the blocks in FP8, 16 -> 8 bits per parameter) on meta-llama's -Instruct
    architecture: the catalog model's shapes with fp8 weights (one scale per tensor)."""
    from planner.specs.hf_ids import lookup
    from planner.specs.model import load_model
    spec, base = lookup(ref), load_model(name)
    assert spec.weight_format == "fp8" and spec.extra["hf_id"] == ref
    assert (spec.num_hidden_layers, spec.hidden_size, spec.num_key_value_heads) == (
        base.num_hidden_layers, base.hidden_size, base.num_key_value_heads)


def test_nvidia_fp8_release_served_holds_about_half_the_bf16_weights(tmp_path):
    """8.03e9 parameters: bf16 16.06e9 B; fp8 8 bits for everything but the 16-bit embedding and LM head
    (2 x 128,256 x 4,096 = 1.05e9 parameters stay bf16 in vLLM's FP8 linear method): well under 0.6 x."""
    fp8 = check_launch_file(_file(tmp_path, "vllm serve nvidia/Llama-3.1-8B-Instruct-FP8 --max-model-len 8192\n",
                                  "fp8.sh"), cluster="dgx-h100", gpus=1)
    bf16 = check_launch_file(_file(tmp_path, "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n",
                                   "bf16.sh"), cluster="dgx-h100", gpus=1)
    weights = lambda r: r["launches"][0]["recomputed"]["memory_bytes"]["weights"]  # noqa: E731
    assert fp8["verdict"] == "pass" and weights(fp8) < 0.6 * weights(bf16)


@pytest.mark.parametrize("ref, says", [
    ("Qwen/Qwen3-235B-A22B-NVFP4", "Qwen/Qwen3-235B-A22B is a catalog id, but the suffix '-NVFP4' is not one"),
    ("nvidia/Llama-3.1-8B-Instruct-FP4", "meta-llama/Llama-3.1-8B-Instruct is a catalog id, but the suffix '-FP4'"),
    ("Qwen/Qwen9-1B-FP8", "no catalog id of Qwen that it extends")])
def test_unknown_suffix_is_named_in_the_error(ref, says):
    from planner.specs.model import load_model
    with pytest.raises(SpecError, match=re.escape(says)):
        load_model(ref)
