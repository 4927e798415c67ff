"""`planner check`'s memory fix for an SGLang / vLLM launch that does not fit is the smallest instance `serve-plan`
would run (`serve.smallest_instances`: its shapes and its memory model, SGLang's own mem_fraction_static default
per shape), and `serve-plan` accepts it (fresh-user review 6 item 8: check proposed "more GPUs than 16 per
instance" for DeepSeek-V3 on 16 GPUs, and pp 21 / pp 9 over three replicas on 64)."""

from __future__ import annotations

import json
import re

import cli_run
import pytest

from planner.check.engine_file import check_launch_file

GIB = 2**30
SGLANG = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code "
          "--context-length 32768 --max-running-requests 512 --enable-dp-attention --dp 8 --moe-a2a-backend deepep\n")
VLLM = "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 1 --max-model-len 32768\n"


def _fix(tmp_path, text: str, gpus: int, rule: str) -> str:
    path = tmp_path / "launch.sh"
    path.write_text(text)
    result = check_launch_file(path, cluster="dgx-h100", gpus=gpus)
    return next(v["fix"] for v in result["violations"] if v["rule"] == rule)


def _served_pool_gib(model: str, engine: str, gpus: int, tp: int, pp: int, ep: int, length: int) -> float:
    proc = cli_run.planner("serve-plan", "-m", model, "-c", "dgx-h100", "--gpus", str(gpus), "--engine", engine,
                           "--input-len", str(length - 500), "--output-len", "500", "--fix", f"tp={tp}", "--fix",
                           f"pp={pp}", "--fix", f"ep={ep}", "--fix", "dp=1", "-f", "json")
    assert proc.returncode == 0, proc.stderr  # serve-plan accepts the shape check proposes
    return json.loads(proc.stdout)["plans"][0]["memory_bytes"]["kv_cache"] / GIB


@pytest.mark.parametrize("gpus", [8, 64])
def test_sglang_deepseek_fix_is_the_16_gpu_instance_serve_plan_runs(tmp_path, gpus):
    """671B at fp8 does not fit 8 x 80 GB; the smallest instance that does is 16 GPUs: tp 8 x pp 2 (the fewest
    pipeline stages of that size), at SGLang's default mem_fraction_static for that shape, whatever --gpus."""
    fix = _fix(tmp_path, SGLANG, gpus, "memory_exceeds")
    first = fix.split(";")[0]
    assert first.startswith("--tp-size 8 --pp-size 2 on 16 GPUs (2 nodes)"), fix
    pool = float(re.search(r"KV pool ([\d.]+) GiB", first)[1])
    fraction = float(re.search(r"--mem-fraction-static ([\d.]+): SGLang's default", first)[1])
    assert 0.5 < fraction < 0.95
    # the command's --moe-a2a-backend deepep stays: expert parallel over the 8 ranks of a stage (ep 8)
    assert pool == pytest.approx(_served_pool_gib("deepseek-v3", "sglang", 16, 8, 2, 8, 32768), abs=0.05)


def test_vllm_fix_is_the_smallest_tp_serve_plan_runs(tmp_path):
    """Llama-3.1-70B (bf16, 131.4 GB of weights) at tp 1 or 2 leaves no pool for a 32,768-token sequence
    (tp 2: 65.7 GiB of weights per GPU, 3.2 GiB of pool, 20,952 tokens); tp 4 is the smallest that fits (tp 3 does
    not divide the 64 heads), two replicas on 8 GPUs."""
    fix = _fix(tmp_path, VLLM, 8, "memory_exceeds")
    first = fix.split(";")[0]
    assert first.startswith("--tensor-parallel-size 4 --data-parallel-size 2 (KV pool"), fix
    pool = float(re.search(r"KV pool ([\d.]+) GiB", first)[1])
    assert pool == pytest.approx(_served_pool_gib("llama-3.1-70b", "vllm", 8, 4, 1, 1, 32768), abs=0.05)


def test_sglang_default_fraction_that_leaves_no_pool_says_it_is_sglangs_own(tmp_path):
    """Fresh-user review 7 item 5: DeepSeek-V3 over two nodes with tp 16, DP attention 16 and DeepEP: SGLang's own
    mem_fraction_static default for that command leaves no KV pool; the message says the default is SGLang's
    (the command does not set it), and a command that sets the fraction is not told so."""
    command = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dist-init-addr "
               "10.0.0.1:5000 --nnodes 2 --node-rank {rank} --attn-dp-size 16 --moe-a2a-backend deepep{extra}\n")
    path = tmp_path / "launch.sh"
    path.write_text(command.format(rank=0, extra="") + command.format(rank=1, extra=""))
    found = check_launch_file(path, cluster="dgx-h100")["violations"]
    message = next(v["message"] for v in found if v["rule"] == "memory_exceeds")
    assert "SGLang's own default for this command" in message
    path.write_text(command.format(rank=0, extra=" --mem-fraction-static 0.3")
                    + command.format(rank=1, extra=" --mem-fraction-static 0.3"))
    found = check_launch_file(path, cluster="dgx-h100")["violations"]
    assert "own default" not in next(v["message"] for v in found if v["rule"] == "memory_exceeds")


def test_sglang_shape_fix_costs_each_layout_at_sglangs_default_for_it(tmp_path):
    """--tp 3 does not divide Qwen3-32B's 64 heads; the layouts the fix lists are costed as serve-plan costs them,
    each at SGLang's own mem_fraction_static default for that layout (the command sets none), not at the
    default of the command's tp 3: the tp 4 layout's pool equals serve-plan's for tp 4."""
    path = tmp_path / "launch.sh"
    path.write_text("python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 3\n")
    found = check_launch_file(path, cluster="dgx-h100")["violations"]
    fix = next(v["fix"] for v in found if v["rule"] == "heads_divisible")
    pool = float(re.search(r"--tp-size 4 --dp-size 2 \(KV pool ([\d.]+) GiB", fix)[1])
    assert pool == pytest.approx(_served_pool_gib("qwen3-32b", "sglang", 8, 4, 1, 1, 40960), abs=0.05)
