"""Fresh-user review 10 findings 10-13 and senior review 9 finding 11, each through the command a user
types (tests/cli_run.py, in process)."""

from __future__ import annotations

import json
import re

from tests.cli_run import planner


def test_the_review_command_ranks_only_launchable_plans_and_warns_of_none():
    """Finding 12: `plan -m llama-3.1-8b -c rtx-4090x8 --gpus 8` warned '... it runs 370.540 s/step, not
    370.540': the launch's extra recompute landed off the bottleneck stage. The search now ranks only the
    recompute settings Megatron-LM can launch (one --recompute-num-layers for every chunk), so no plan
    of the table needs that warning; the emitted script is the #1 row exactly (tests/test_module_search.py)."""
    result = planner("plan", "-m", "llama-3.1-8b", "-c", "rtx-4090x8", "--gpus", "8", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["plans"] and not [w for w in data["warnings"] if "launch as planned" in w]


def test_serve_plan_counts_and_rates_have_separators_and_no_scientific_notation():
    """Finding 13: `serve-plan --gpus 4194304` printed `4194304 x tp1 @402` and `1.80447e+08 requests/s`.
    The deployment line writes the replica count and the rate as every other count: with thousands
    separators, in positional notation, the rate the JSON's to the request."""
    args = ("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "4194304",
            "--input-len", "1000", "--output-len", "100")
    table = planner(*args)
    assert table.returncode == 0, table.stderr
    line = re.search(r"deployment: .*? requests/s", " ".join(table.stdout.split())).group(0)  # wrapped or not
    assert "e+" not in line, line
    dep = json.loads(planner(*args, "--format", "json").stdout)["deployment"]
    (plan,) = dep["mix"]
    assert line.startswith(f"deployment: {plan['parallelism']['replicas']:,} x "), line
    assert plan["parallelism"]["replicas"] >= 1000  # the separator is exercised
    rate = re.search(r", ([\d,.]+) requests/s$", line).group(1)
    assert "," in rate and abs(float(rate.replace(",", "")) - dep["requests_per_s"]) <= 0.5  # whole requests


def test_a_removed_sglang_flag_names_its_replacement_not_the_closest_name(tmp_path):
    """Finding 11: SGLang's `--enable-ep-moe` got "did you mean --enable-eplb?" (the expert load balancer).
    SGLang's deprecation list (sgl-project/sglang@d5fd0ab2 docs/references/deprecated_items.md) replaces it
    with --ep-size set to the --tp-size value; the review's own command line (/tmp/f10/sg1.sh)."""
    script = tmp_path / "sg1.sh"
    script.write_text("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 2 \\\n"
                      "  --trust-remote-code --mem-fraction-static 0.95 --enable-ep-moe --context-length 32768 "
                      "--port 30000\n")
    result = planner("check", str(script), "-c", "dgx-h100", "--format", "json")
    (finding,) = [v for v in json.loads(result.stdout)["violations"] if "--enable-ep-moe" in v["message"]]
    assert finding["rule"] == "unknown_flag" and finding["severity"] == "error"
    assert "--enable-eplb" not in finding["message"] + finding["fix"]
    assert "replaced it with --ep-size equal to --tp-size" in finding["message"]
    assert "deprecated_items.md" in finding["message"]  # the source is named
    assert finding["fix"] == "write --ep-size equal to --tp-size"


def test_a_removed_megatron_flag_names_its_replacement_and_the_commit(tmp_path):
    """Finding 11: Megatron `--fp8-hybrid` got "did you mean --fp8-recipe?"; Megatron-LM 1b7a383 (2023-08-24)
    replaced --fp8-hybrid / --fp8-e4m3 by `--fp8-format hybrid|e4m3` (`git show 1b7a383 -- megatron/arguments.py`).
    --DDP-impl was removed with nothing in its place (3fb3e95): remove it. The review's old.sh, shortened."""
    script = tmp_path / "old.sh"
    script.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                      "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
                      "--seq-length 4096 --max-position-embeddings 131072 --swiglu --normalization RMSNorm "
                      "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
                      "--bf16 --micro-batch-size 1 --global-batch-size 256 --use-distributed-optimizer "
                      "--DDP-impl local --fp8-hybrid\n")
    result = planner("check", str(script), "-c", "dgx-h100", "-m", "llama-3.1-8b", "--format", "json")
    found = {v["message"].split()[0]: v for v in json.loads(result.stdout)["violations"]
             if v["rule"] == "megatron_unknown_flag"}
    fp8, ddp = found["--fp8-hybrid"], found["--DDP-impl"]
    assert "replaced it with --fp8-format hybrid (Megatron-LM 1b7a383, 2023-08-24" in fp8["message"]
    assert fp8["fix"] == "write --fp8-format hybrid" and "--fp8-recipe" not in fp8["message"]
    assert "Megatron-LM removed it (Megatron-LM 3fb3e95" in ddp["message"] and ddp["fix"] == "remove --DDP-impl"


def _plan(*fix: str):
    return planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", *fix, "--format", "json")


def test_fix_with_a_short_name_suggests_its_key():
    """Finding 11: `plan --fix zero=3` said only "unknown key 'zero'", though plan's own messages print
    `zero=0 b=1`; `b` is the micro-batch in those messages and labels."""
    for pin, key in (("zero=3", "zero_stage"), ("b=2", "micro_batch_size")):
        result = _plan("--fix", pin)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"unknown key {pin.split('=')[0]!r} in {pin!r}; did you mean {key}?" in result.stderr


def test_fix_takes_a_comma_separated_list_as_several_pins():
    """Finding 11: `--fix "tp=8,pp=2"` said `tp='8,pp=2' must be an integer`. A comma list is several pins
    (as helm's --set a=1,b=2): the same plan as one --fix per pin; an empty pin is bad input."""
    listed = json.loads(_plan("--fix", "tp=2,pp=2", "--top", "1").stdout)
    separate = json.loads(_plan("--fix", "tp=2", "--fix", "pp=2", "--top", "1").stdout)
    assert listed["request"]["fixed"] == {"tp": 2, "pp": 2} == separate["request"]["fixed"]
    assert listed["plans"][0]["parallelism"] == separate["plans"][0]["parallelism"]
    par = listed["plans"][0]["parallelism"]
    assert (par["tp"], par["pp"]) == (2, 2)
    empty = _plan("--fix", "tp=2,")
    assert empty.returncode == 2 and "empty pin" in empty.stderr
    serve = planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--input-len", "1000",
                    "--output-len", "100", "--fix", "tp=2,pp=2", "--format", "json")
    assert serve.returncode == 0, serve.stderr
    assert {(p["parallelism"]["tp"], p["parallelism"]["pp"]) for p in json.loads(serve.stdout)["plans"]} == {(2, 2)}


def test_a_feasible_status_says_what_is_unproven():
    """Senior review 9 finding 11: `solver: FEASIBLE objective X s/step, bound X s` (torchtitan Llama-3.1-70B and
    Qwen3) did not say why a bound equal to the objective proves nothing. The line and the JSON name each open
    cause with its candidates; here torchtitan meshes with pp > 1 whose stage program's memory is not exact, and
    each mesh named is one `memory_model.exact` calls inexact: interleaved (vpp > 1) or m <= pp. A proven plan
    lists nothing."""
    args = ("plan", "-m", "llama-3.1-70b", "-c", "dgx-h100", "--gpus", "64", "--framework", "torchtitan")
    solver = json.loads(planner(*args, "--format", "json").stdout)["solver"]
    assert solver["status"] == "FEASIBLE" and solver["unproven"]
    table = " ".join(planner(*args).stdout.split())
    for why in solver["unproven"]:
        assert f"not proven: {' '.join(why.split())}" in table
    (inexact,) = [w for w in solver["unproven"] if "memory is not exact" in w]
    meshes = re.findall(r"dp\d+ tp\d+ pp(\d+)(?: vpp(\d+))? b\d+ m(\d+)", inexact)
    assert meshes
    for pp, vpp, m in meshes:
        assert int(pp) > 1 and (int(vpp or 1) > 1 or int(m) <= int(pp)), (pp, vpp, m)
    proven = json.loads(_plan("--top", "1").stdout)["solver"]
    assert proven["status"] == "OPTIMAL" and proven["unproven"] == []


def test_a_torchtitan_toml_says_its_learning_rate_is_not_the_models():
    """Finding 10, the torchtitan side: the TOML form writes no learning rate, so a TOML release runs its default
    (pytorch/torchtitan@238fa99 job_config.py: lr 8e-4); stderr says so and gives Llama 3 8B's published peak,
    3 x 10^-4 (arXiv:2407.21783 Table 3)."""
    import tomllib

    out = planner("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8", "--emit", "torchtitan-toml",
                  "--top", "1")
    assert out.returncode == 0, out.stderr
    assert "lr" not in tomllib.loads(out.stdout)["optimizer"]
    stderr = " ".join(out.stderr.split())
    assert "PLACEHOLDER: the TOML writes no learning rate or schedule, so torchtitan runs its defaults (lr 8e-4" in stderr
    assert "llama-3.1-8b's published peak is 0.0003 (The Llama 3 Herd of Models" in stderr
