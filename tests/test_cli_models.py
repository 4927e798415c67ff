"""CLI: `planner models`, `planner models show`, `planner hardware`, `planner hardware show`.

Each command in each format, and each bad-input kind of issue 2: exit code 2, one line on stderr,
no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.specs import cluster as cluster_spec

DATA = Path(__file__).parent / "data" / "models"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})  # no column elided


def parse(result, fmt: str):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)


# ---------------------------------------------------------------- models

def test_models_table_lists_every_catalog_model():
    result = run("models")
    assert result.exit_code == 0, result.output
    for name in ("llama-3.1-8b", "qwen3-235b-a22b", "deepseek-v3", "bloom-176b", "falcon-180b"):
        assert name in result.stdout
    assert "671.03B" in result.stdout and "37.55B" in result.stdout  # DeepSeek-V3 total / active


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_models_machine_formats(fmt):
    rows = parse(run("models", "--format", fmt), fmt)
    by_name = {row["name"]: row for row in rows}
    assert len(rows) == 20  # 17 + kimi-k2, glm-4.5, glm-4.5-air (issue 8 item 7)
    assert by_name["mixtral-8x7b"]["params_total"] == 46_702_792_704
    assert by_name["mixtral-8x7b"]["params_active"] == 12_879_925_248
    assert (by_name["llama-3.1-70b"]["heads"], by_name["llama-3.1-70b"]["kv_heads"]) == (64, 8)
    assert by_name["llama-3.1-70b"]["context"] == 131_072


def test_models_show_table_contains_the_name_and_numbers():
    result = run("models", "show", "llama-3.1-8b")
    assert result.exit_code == 0, result.output
    assert "llama-3.1-8b" in result.stdout
    assert "8,030,261,248" in result.stdout
    assert "131,072 B" in result.stdout  # KV bytes per token, bf16


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_models_show_machine_formats_hold_the_issue_fields(fmt):
    data = parse(run("models", "show", "llama-3.1-70b", "--format", fmt), fmt)
    assert data["name"] == "llama-3.1-70b" and data["family"] == "llama"
    params = data["params"]
    assert params["total"] == 70_553_706_496
    assert params["embedding"] == params["lm_head"] == 128_256 * 8_192
    assert params["active_per_token"] == params["total"]
    assert data["kv_cache_bytes_per_token"] == 327_680
    assert "PaLM" in data["mfu_convention"]
    [group] = params["per_layer"]
    assert (group["layers"], group["count"], group["kind"]) == ("0-79", 80, "dense")
    # Llama-3.1-70B block by hand: q,o 2*8192*8192 + k,v 2*8192*1024; SwiGLU 3*8192*28672; 2 RMSNorms.
    assert group["attention"] == 2 * 8192 * 8192 + 2 * 8192 * 1024
    assert group["dense_mlp"] == 3 * 8192 * 28672
    assert group["norms"] == 2 * 8192
    for key in ("routed_experts", "shared_experts", "router"):
        assert group[key] == 0


def test_models_show_groups_deepseek_dense_and_moe_layers():
    data = parse(run("models", "show", "deepseek-v3", "-f", "json"), "json")
    dense, moe = data["params"]["per_layer"]
    assert (dense["layers"], dense["kind"], moe["layers"], moe["kind"]) == ("0-2", "dense", "3-60", "moe")
    # 256 routed experts of 3*7168*2048; one shared expert of the same width; router 256*7168 + 256 bias.
    assert moe["routed_experts"] == 256 * 3 * 7168 * 2048
    assert moe["shared_experts"] == 3 * 7168 * 2048
    assert moe["router"] == 256 * 7168 + 256
    assert data["params"]["total"] == 671_026_419_200
    assert data["params"]["active_per_token"] == 37_552_297_472
    assert data["kv_cache_bytes_per_token"] == 70_272


def test_models_show_seq_len_sets_the_attention_term():
    """Llama-3.1-8B attention term: 32 layers x 2 x s x 32 heads x (128 + 128) at s = 8192."""
    flops = parse(run("models", "show", "llama-3.1-8b", "--seq-len", "8192", "-f", "json"), "json")["flops_per_token"]
    assert flops["seq_len"] == 8192
    assert flops["attention_forward"] == 32 * 2 * 8192 * 32 * 256
    assert flops["training"] == 3 * flops["forward"]
    assert flops["training_full_recompute"] == 4 * flops["forward"]


def test_models_show_gpt_oss_kv_counts_only_full_layers():
    data = parse(run("models", "show", "gpt-oss-120b", "-f", "json"), "json")
    assert data["kv_cache_bytes_per_token"] == 18 * 2 * 8 * 64 * 2
    assert data["kv_cache"]["bytes_per_token_all_layers"] == 36 * 2 * 8 * 64 * 2


@pytest.mark.parametrize("ref", [DATA / "tiny-llama" / "config.json", DATA / "tiny-llama", DATA / "tiny.yaml"])
def test_models_show_accepts_paths(ref):
    data = parse(run("models", "show", ref, "-f", "json"), "json")
    assert data["params"]["total"] == 86_848  # hand arithmetic in test_models_catalog.py


# ---------------------------------------------------------------- bad input

def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


BAD_INPUT = {
    "unknown name": (["llama-3.1-7b"], ["unknown model", "llama-3.1-8b"]),
    "missing file": ([DATA / "no-such-model.yaml"], ["no such file", "no-such-model.yaml"]),
    "directory without config.json": ([DATA / "empty-dir"], ["no config.json"]),
    "yaml syntax error": ([DATA / "bad-syntax.yaml"], ["bad-syntax.yaml", "YAML syntax error", "line 5"]),
    "json syntax error": ([DATA / "bad-syntax.json"], ["bad-syntax.json", "JSON syntax error", "line 4"]),
    "unknown key": ([DATA / "unknown-key.yaml"], ["num_key_value_head", "unknown key", "num_key_value_heads"]),
    "missing key": ([DATA / "missing-key.yaml"], ["num_hidden_layers", "missing key"]),
    "zero size": ([DATA / "zero-size.yaml"], ["hidden_size", "0", "positive"]),
    "negative size": ([DATA / "negative-size.yaml"], ["intermediate_size", "-128"]),
    "heads not divisible": ([DATA / "heads-not-divisible.yaml"], ["num_key_value_heads", "not divisible"]),
    "top-k above experts": ([DATA / "topk-too-large.yaml"], ["num_experts_per_tok", "5", "4 experts"]),
    "unsupported model_type": ([DATA / "unsupported-type.yaml"], ["mamba", "supported", "llama", "deepseek_v3", "gpt_oss"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_models_show_bad_input(case, fmt):
    args, fragments = BAD_INPUT[case]
    result = run("models", "show", *args, "--format", fmt)
    assert_one_line_error(result, *fragments)
    assert result.stdout == ""


def test_bad_format_value_exits_2_with_allowed_values():
    for args in (["models"], ["models", "show", "llama-3.1-8b"], ["hardware"]):
        result = run(*args, "--format", "xml")
        assert result.exit_code == 2
        assert "Traceback" not in result.output
        for allowed in ("table", "json", "yaml"):
            assert allowed in result.output


def test_bad_seq_len_exits_2():
    result = run("models", "show", "llama-3.1-8b", "--seq-len", "0")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_unknown_command_exits_2():
    assert run("modles").exit_code == 2


# ---------------------------------------------------------------- hardware

TINY_CLUSTER = """\
name: test-box
description: two test GPUs in one box
gpu:
  name: TestGPU-16GB
  memory_gib: 16
  hbm_gb_per_s: 1000
  peak_tflops: {bf16: 100, fp8: 200}
  source: test fixture
gpus_per_node: 2
scaleup_domain_gpus: 2
scaleup_gb_per_s: 50
scaleup_latency_s: 1.0e-6
nics_per_node: 1
nic_gbit_per_s: 100
network_latency_s: 1.0e-5
host_memory_gib: 64
host_link_gb_per_s: 25
source: test fixture
sources:
  gpu.memory_gib: fixture datasheet A
  nic_gbit_per_s: fixture datasheet B
"""


@pytest.fixture
def cluster_file(tmp_path):
    path = tmp_path / "test-box.yaml"
    path.write_text(TINY_CLUSTER)
    return path


def test_hardware_table_lists_the_catalog():
    result = run("hardware")
    assert result.exit_code == 0, result.output
    for name in cluster_spec.catalog_names():
        assert name in result.stdout


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_hardware_machine_formats(fmt):
    rows = parse(run("hardware", "-f", fmt), fmt)
    assert [row["name"] for row in rows] == cluster_spec.catalog_names()


def test_hardware_show_file_table_has_values_and_sources(cluster_file):
    result = run("hardware", "show", cluster_file)
    assert result.exit_code == 0, result.output
    assert "test-box" in result.stdout and "TestGPU-16GB" in result.stdout
    assert "fixture datasheet A" in result.stdout and "fixture datasheet B" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_hardware_show_gpus_sets_size(cluster_file, fmt):
    data = parse(run("hardware", "show", cluster_file, "--gpus", "6", "-f", fmt), fmt)
    assert (data["num_gpus"], data["num_nodes"]) == (6, 3)
    # 1 NIC x 100 Gbit/s / 8 bit per byte / 2 GPUs per node = 6.25 GB/s per GPU
    assert data["network_gb_per_s_per_gpu"] == 6.25
    assert data["gpu"]["peak_tflops"] == {"bf16": 100, "fp8": 200}


def test_hardware_show_bad_gpus_is_one_line(cluster_file):
    assert_one_line_error(run("hardware", "show", cluster_file, "--gpus", "3"), "--gpus", "nearest valid: 2, 4")


def test_hardware_show_unknown_name_suggests(cluster_file):
    names = cluster_spec.catalog_names()
    if not names:
        pytest.skip("no cluster catalog shipped yet")
    assert_one_line_error(run("hardware", "show", names[0] + "x"), "unknown cluster", names[0])


def test_hardware_show_missing_file():
    assert_one_line_error(run("hardware", "show", "no/such-cluster.yaml"), "no such file")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.parametrize("name", ["dgx-h100", "gb200-nvl72"])
def test_hardware_show_output_loads_again_as_a_cluster(tmp_path, name, fmt):
    """Fresh-user review: `hardware show X --format yaml` did not load back with `-c` ("num_nodes:
    unknown key"). The derived keys (num_nodes, network_gb_per_s_per_gpu, gpu.memory_bytes) are
    read back when they equal what the file's own keys give."""
    path = tmp_path / f"c.{fmt}"
    path.write_text(run("hardware", "show", name, "-f", fmt).stdout)
    again = parse(run("hardware", "show", path, "-f", fmt), fmt)
    assert again == parse(run("hardware", "show", name, "-f", fmt), fmt) | {"name": again["name"]}


def test_hardware_show_stale_derived_value_is_bad_input(tmp_path):
    """An edit of num_gpus that leaves num_nodes behind: 16 GPUs at 8 per node are 2 nodes, not 1."""
    data = yaml.safe_load(run("hardware", "show", "dgx-h100", "-f", "yaml").stdout)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data | {"num_gpus": 16, "num_nodes": 1}))
    assert_one_line_error(run("hardware", "show", path), "num_nodes", "they give 2")


@pytest.mark.parametrize("ref, hf_id", [
    ("deepseek-ai/DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V2-Lite"),
    ("mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1"),
    ("https://huggingface.co/org/name", "org/name"),
])
@pytest.mark.parametrize("command", [("models", "show"), ("plan",)])
def test_hugging_face_id_outside_the_catalog_says_what_to_do(ref, hf_id, command):
    """review-fresh5 #4: an id the catalog does not hold was 'no such file'; it is named as a Hugging Face id
    and the message says how to proceed (download config.json, pass its path; the catalog list)."""
    extra = ("-c", "dgx-h100", "--gpus", "8") if command == ("plan",) else ()
    result = run(*command, "-m", ref, *extra) if command == ("plan",) else run(*command, ref)
    assert_one_line_error(result, f"{ref}: a Hugging Face id that is not in the catalog",
                          f"https://huggingface.co/{hf_id}/blob/main/config.json", "`planner models`")


@pytest.mark.parametrize("ref", ["meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct",
                                 "meta-llama/Meta-Llama-3.1-70B-Instruct",
                                 "https://huggingface.co/meta-llama/Llama-3.1-70B"])
def test_models_show_takes_the_ids_model_options_take(ref):
    """`models show` accepts what `-m` accepts: a catalog model's hf_id, its hf_aliases (with the repository
    names Meta used before renaming them, meta-llama/Meta-Llama-3.1-* -> meta-llama/Llama-3.1-*: oumi-ai/oumi
    pull request 1357), and a Hub address; the YAML it prints loads again as a model file."""
    shown = parse(run("models", "show", ref, "--format", "yaml"), "yaml")
    assert shown["name"] == "llama-3.1-70b"
    assert shown["config"]["num_hidden_layers"] == 80 and shown["config"]["hidden_size"] == 8192


@pytest.mark.parametrize("ref, name, layers", [
    # meta-llama/llama-models models/sku_list.py @5309637c: Llama-3.3-70B-Instruct's arch_args = 3.1 70B's
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b", 80),
    # the catalog entry's fields are those of the Instruct-v0.1 config (models/mixtral-8x7b.yaml source)
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b", 32),
    # DeepSeek-R1's config.json: DeepseekV3ForCausalLM with DeepSeek-V3's fields (61 layers)
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3", 61),
])
def test_published_renames_of_catalog_architectures_resolve(ref, name, layers):
    """review-fresh6 finding 6: ids people put in `vllm serve` / `--model-path` for catalog architectures."""
    shown = parse(run("models", "show", ref, "--format", "yaml"), "yaml")
    assert shown["name"] == name and shown["config"]["num_hidden_layers"] == layers


def test_mixtral_8x22b_instruct_is_not_the_base_architecture():
    """Mixtral-8x22B-Instruct-v0.1 has a 32768-token vocabulary, the base 32000 (models/mixtral-8x22b.yaml
    source): not an alias, so it stays unknown rather than costed with the wrong embedding."""
    assert run("models", "show", "mistralai/Mixtral-8x22B-Instruct-v0.1").exit_code == 2
