"""Issue 8 items 2 and 5 (search side): `plan` searches Megatron-LM's recompute and offload module
lists (`search.module_sets`), writes its choice to the plan, its file and the Megatron launch it
emits, and `check` reads it back; Megatron-LM's start-up errors on the lists are rules, each with
the text Megatron raises (NVIDIA/Megatron-LM@d98e8a6 transformer_config.py `__post_init__`,
quoted in the tests). Optimality against brute force: tests/test_plan_brute.py."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.emit import checked
from planner.placement.layout import Layout
from planner.placement.rules import check_layout, recompute_module_violations
from planner.plan import plan, plan_file
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

runner = CliRunner()

TINY_MOE = {"model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 2048,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
            "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1000,
            "max_position_embeddings": 8192}


def _files(tmp_path):
    """A small Mixtral-like model and a 4-GPU cluster of 1.5 GiB GPUs, where the fastest plan with
    selective recompute on every layer recomputes layernorm, moe_act and offloads expert_fc1
    (NVIDIA's Nemotron-H H100 recipe's pair), as files a plan file can name."""
    model = tmp_path / "tiny-moe" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(TINY_MOE))
    cluster = yaml.safe_load(open("tests/data/clusters/custom-pcie.yaml"))
    cluster["gpu"]["memory_gib"] = 1.5
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return str(model), str(path)


def _plan(tmp_path, **kw):
    model, cluster = _files(tmp_path)
    data = plan(load_model(model), load_cluster(cluster, gpus=4), seq_len=8192, global_batch_size=8,
                fixed={"micro_batch_size": 2, "recompute": "selective"}, top_k=1, reserve_bytes=0,
                headroom=0.0, **kw)
    return data, plan_file(data, 0, model_ref=model, cluster_ref=cluster)


def test_plan_file_and_megatron_launch_carry_the_chosen_lists(tmp_path):
    """The search picks a selective list other than Megatron's default core_attn on this
    memory-bound case (which one follows the cost model: it was layernorm,moe_act with expert_fc1
    offloaded before the loss backward's logits gradient was charged, moe_act after), and the plan
    file, `check` and `--emit megatron` carry exactly that choice."""
    data, doc = _plan(tmp_path)
    par = data["plans"][0]["parallelism"]
    chosen, offloaded = par["recompute_modules"], par.get("offload_modules")
    assert par["recompute"] == "selective" and chosen != ["core_attn"]
    assert "recompute_modules" not in data["request"]  # chosen by the search, not asked for
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    emitted, verdict = checked(doc, "megatron")
    assert "--recompute-granularity selective" in emitted.text
    assert f"--recompute-modules {' '.join(chosen)}" in emitted.text
    if "moe_act" in chosen:
        assert "--moe-grouped-gemm" in emitted.text  # moe_act recompute asserts it
    if offloaded:
        assert f"--offload-modules {' '.join(offloaded)}" in emitted.text
        assert "export NVTE_CPU_OFFLOAD_V1=1" in emitted.text
    assert verdict["verdict"] == "pass", verdict["violations"]
    assert not [v for v in verdict["violations"] if v["rule"] in ("recompute_modules", "offload_environment")]


def test_given_lists_are_kept(tmp_path):
    data, _ = _plan(tmp_path, recompute_modules=("core_attn",))
    par = data["plans"][0]["parallelism"]
    assert par["recompute_modules"] == ["core_attn"] and data["request"]["recompute_modules"] == ["core_attn"]


LLAMA = load_model("llama-3.1-8b")
DSV3 = load_model("deepseek-v3")


@pytest.mark.parametrize("model, layout, text", [
    (LLAMA, Layout(recompute="selective", recompute_modules=("mla_up_proj",)),
     '"mla_up_proj in recompute_modules is only supported with multi_latent_attention."'),
    (LLAMA, Layout(recompute="selective", recompute_modules=("moe_act",)),
     '"moe_act in recompute_modules is only supported with moe_grouped_gemm."'),
    (DSV3, Layout(recompute="selective", recompute_modules=("layernorm", "mla_up_proj"), precision="fp8"),
     '"Delayed scaling does not support moe_act and layernorm recompute for fp8."'),
    (DSV3, Layout(recompute="selective", recompute_modules=("moe",), offload_modules=("expert_fc1",)),
     "\"Cannot offload ['expert_fc1'] while recomputing the entire MoE layer.\""),
])
def test_megatron_start_up_errors_on_module_lists(model, layout, text):
    found = [v for v in recompute_module_violations(model, layout)]
    assert len(found) == 1 and found[0].severity == "error" and text in found[0].message
    assert "recompute_modules" in {v.rule for v in check_layout(model, load_cluster("dgx-h100", gpus=1), layout)}


@pytest.mark.parametrize("layout", [
    Layout(recompute="selective", recompute_modules=("layernorm", "mla_up_proj", "moe_act"),
           precision="fp8", fp8_recipe="tensorwise"),   # current scaling: allowed
    Layout(recompute="full", recompute_modules=("moe_act",), precision="fp8"),  # not read under full
    Layout(recompute="selective", recompute_modules=("mla_up_proj", "mlp")),    # E10's recipe
])
def test_lists_megatron_accepts(layout):
    assert recompute_module_violations(DSV3, layout) == []


MOE_ARGS = """--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --group-query-attention
--num-query-groups 4 --kv-channels 128 --ffn-hidden-size 6144 --moe-ffn-hidden-size 768
--num-experts 128 --moe-router-topk 8 --max-position-embeddings 40960 --swiglu
--normalization RMSNorm --position-embedding-type rope --vocab-size 151936
--tensor-model-parallel-size 1 --expert-model-parallel-size 8 --seq-length 4096
--micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer
"""


def _check(tmp_path, extra):
    path = tmp_path / "args.txt"
    path.write_text(MOE_ARGS + extra)
    result = runner.invoke(app, ["check", str(path), "--model", "qwen3-30b-a3b", "--cluster",
                                 "dgx-h100", "--gpus", "8", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return {v["rule"]: v for v in json.loads(result.output)["violations"]}


def test_check_moe_act_needs_grouped_gemm(tmp_path):
    found = _check(tmp_path, "--recompute-granularity selective --recompute-modules moe_act\n")
    assert found["recompute_modules"]["severity"] == "error"
    assert "only supported with moe_grouped_gemm" in found["recompute_modules"]["message"]
    found = _check(tmp_path, "--recompute-granularity selective --recompute-modules moe_act --moe-grouped-gemm\n")
    assert "recompute_modules" not in found


def test_check_module_list_without_selective_has_no_effect(tmp_path):
    found = _check(tmp_path, "--recompute-granularity full --recompute-method uniform "
                             "--recompute-num-layers 1 --recompute-modules moe_act\n")
    assert found["recompute_modules_unused"]["severity"] == "warning"
    assert "recompute_modules" not in found  # Megatron validates the list only under selective


def test_offload_off_when_asked(tmp_path):
    """`--offload-modules none` (offload_modules=()): the search keeps offloading off (the case
    whose best plan offloads expert_fc1 otherwise) and still searches the recompute lists (the
    moe_act ones of `MODULE_SETS`, the only ones for this model besides core_attn)."""
    data, _ = _plan(tmp_path, offload_modules=())
    par = data["plans"][0]["parallelism"]
    assert "offload_modules" not in par
    assert par["recompute_modules"] in (["moe_act"], ["layernorm", "moe_act"])  # still searched
    assert data["request"]["offload_modules"] is None
