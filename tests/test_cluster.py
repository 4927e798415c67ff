"""Cluster specs: the shipped hardware catalog, its sources, the loader's validation and --gpus.

Expected numbers are published values written out here (so the tests run on a clean clone); where
tests/data/reference/hardware.yaml (a copy of shared/reference) is cross-checked too.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from planner.errors import SpecError
from planner.specs.cluster import CATALOG_DIR, catalog_names, load_cluster, to_dict

DATA = Path(__file__).parent / "data" / "clusters"
REFERENCE = Path(__file__).resolve().parent / "data" / "reference" / "hardware.yaml"

CATALOG = ["dgx-a100-80g", "dgx-a100-40g", "dgx-h100", "hgx-h200", "hgx-h800", "dgx-b200",
           "gb200-nvl72", "mi300x", "dgx2-v100", "rtx-4090x8", "grand-teton", "jean-zay"]
"""The issue's names, grand-teton (Meta's H100 96 GB HBM2e at 500 W: the torchtitan 2024-12
benchmark rows and expert_configs E16, issue 9) and jean-zay (BLOOM-176B's machine: 4 x 100 Gb/s
Omni-Path per node, arXiv 2211.05100 Sec. 3.4.1; the training_runs.yaml bloom-176b row, issue 9)."""


def test_catalog_has_exactly_the_issue_names():
    assert sorted(catalog_names()) == sorted(CATALOG)


@pytest.mark.parametrize("name", CATALOG)
def test_every_catalog_entry_loads(name):
    cluster = load_cluster(name)
    assert cluster.name == name
    assert cluster.num_gpus >= cluster.gpus_per_node
    assert "bf16" in cluster.gpu.peak_tflops or "fp16" in cluster.gpu.peak_tflops


def _numeric_leaves(data: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key == "sources":
            continue
        if isinstance(value, dict):
            out += _numeric_leaves(value, f"{path}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(path)
    return out


def _covered(path: str, sources: dict) -> bool:
    keys = [k.strip() for group in sources for k in group.split(",")]
    return any(path == k or path.startswith(k + ".") for k in keys)


def test_source_coverage_check_itself():
    sources = {"gpu.peak_tflops": "x", "nics_per_node, nic_gbit_per_s": "y"}
    assert _covered("gpu.peak_tflops.bf16", sources) and _covered("nic_gbit_per_s", sources)
    assert not _covered("gpu.memory_gib", sources)
    assert not _covered("gpu.peak_tflops_extra", {"gpu.peak_tflops": "x"})


@pytest.mark.parametrize("name", CATALOG)
def test_every_number_has_a_source(name):
    raw = yaml.safe_load((CATALOG_DIR / f"{name}.yaml").read_text())
    sources = raw.get("sources", {})
    leaves = _numeric_leaves(raw)
    assert len(leaves) >= 13  # 9 cluster numbers + memory + bandwidth + at least 2 peaks
    missing = [p for p in leaves if not _covered(p, sources)]
    assert missing == [], f"{name}: numbers without a source: {missing}"
    assert all(isinstance(text, str) and len(text) > 20 for text in sources.values())


def test_h100_equals_published_numbers():
    # reference/hardware.yaml H100-SXM5-80GB: bf16 989.4 dense, 3350 GB/s HBM3, NVLink4 450 GB/s per
    # direction, 8x 400 Gb/s ConnectX-7 per 8-GPU node; MLPerf v4.0 SYSJSON 81559 MiB.
    c = load_cluster("dgx-h100")
    assert c.gpu.peak_tflops["bf16"] == 989.4
    assert c.gpu.peak_tflops["fp8"] == 1978.9
    assert c.gpu.hbm_gb_per_s == 3350
    assert c.scaleup_gb_per_s == 450
    assert c.network_gb_per_s_per_gpu == 8 * 400 / 8 / 8 == 50.0
    assert c.gpu.memory_gib == pytest.approx(81559 / 1024, abs=1e-3)
    assert c.gpu.memory_bytes == int(c.gpu.memory_gib * 2**30)
    assert c.peak_flops("bf16") == 989.4e12


def test_dgx2_is_the_zero_paper_machine():
    # ZeRO paper Sec 10: DGX-2 nodes, 16 V100 32GB each, 800 Gbps inter-node per node.
    c = load_cluster("dgx2-v100")
    assert c.gpus_per_node == 16 == c.scaleup_domain_gpus
    assert c.nics_per_node * c.nic_gbit_per_s == 800
    assert c.gpu.peak_tflops == {"fp32": 15.7, "fp16": 125}
    assert c.gpu.hbm_gb_per_s == 900
    with pytest.raises(SpecError, match="no bf16 peak.*fp16"):
        c.peak_flops("bf16")


def test_rtx4090_uses_fp32_accumulate_tensor_peak():
    # Ada whitepaper, RTX 4090: FP16/BF16 tensor with FP32 accumulate 165.2 dense (330.3 with FP16 acc).
    c = load_cluster("rtx-4090x8")
    assert c.gpu.peak_tflops["bf16"] == 165.2
    assert c.allow_partial_node


_REFERENCE_ROWS = {  # catalog name -> reference/hardware.yaml entry
    "dgx-a100-80g": "A100-SXM4-80GB", "dgx-h100": "H100-SXM5-80GB", "hgx-h200": "H200-SXM-141GB",
    "hgx-h800": "H800-SXM-80GB", "dgx-b200": "B200 (HGX/DGX B200, 1000 W)",
    "gb200-nvl72": "GB200 (B200 in GB200 NVL72, 1200 W)", "mi300x": "MI300X",
}


@pytest.mark.parametrize("name", sorted(_REFERENCE_ROWS))
def test_catalog_agrees_with_reference_hardware_yaml(name):
    rows = {row["name"]: row for row in yaml.safe_load(REFERENCE.read_text())["hardware"]}
    ref = rows[_REFERENCE_ROWS[name]]
    c = load_cluster(name)
    assert c.gpu.peak_tflops["bf16"] == ref["bf16_dense_tflops"]
    assert c.gpu.peak_tflops.get("fp8") == ref.get("fp8_dense_tflops")
    assert c.gpu.peak_tflops.get("fp4") == ref.get("fp4_dense_tflops")
    assert c.gpu.hbm_gb_per_s == ref["hbm_bw_gbps"]
    assert c.scaleup_domain_gpus == ref["scaleup_domain"]
    assert c.scaleup_gb_per_s == ref["scaleup_bw_gbps_per_gpu_bidirectional"] / 2
    if "nics_per_node" in ref:
        assert (c.nics_per_node, c.nic_gbit_per_s) == (ref["nics_per_node"], ref["nic_gbps"])
    # capacity: driver-reported GiB is at most the marketed figure (decimal GB or GiB) and near it
    assert 0.9 * ref["hbm_gb"] < c.gpu.memory_gib <= ref["hbm_gb"]


# --gpus ---------------------------------------------------------------------------------------

def test_default_size_is_one_node_or_one_scaleup_domain():
    assert load_cluster("dgx-h100").num_gpus == 8
    assert load_cluster("dgx2-v100").num_gpus == 16
    nvl = load_cluster("gb200-nvl72")
    assert (nvl.num_gpus, nvl.gpus_per_node, nvl.num_nodes) == (72, 4, 18)


def test_gpus_sets_whole_nodes():
    c = load_cluster("dgx-h100", gpus=1024)
    assert (c.num_gpus, c.num_nodes) == (1024, 128)
    assert load_cluster("gb200-nvl72", gpus=144).num_nodes == 36


@pytest.mark.parametrize("gpus, nearest", [(12, "8, 16"), (1001, "1000, 1008")])
def test_more_than_one_node_but_not_whole_nodes_rejected_with_nearest_counts(gpus, nearest):
    with pytest.raises(SpecError) as err:
        load_cluster("dgx-h100", gpus=gpus)
    msg = str(err.value)
    assert f"value {gpus} must be 1..7 or a multiple of 8" in msg and "--gpus" in msg
    assert f"nearest valid: {nearest}" in msg and "\n" not in msg


@pytest.mark.parametrize("gpus", [1, 6, 7])
def test_part_of_one_node_is_a_job(gpus):
    """Issue 11: jobs on part of a node are common (CUDA_VISIBLE_DEVICES, a 6-GPU vLLM engine,
    a 7-GPU DeepSpeed job): one node, `gpus` GPUs, all inside its NVLink domain."""
    c = load_cluster("dgx-h100", gpus=gpus)
    assert (c.num_gpus, c.num_nodes, c.allow_partial_node) == (gpus, 1, True)


def test_a_cluster_file_can_forbid_partial_nodes(tmp_path):
    """A scheduler that allocates whole nodes: `allow_partial_node: false` in the cluster file."""
    raw = yaml.safe_load((CATALOG_DIR / "dgx-h100.yaml").read_text())
    raw["allow_partial_node"] = False
    path = tmp_path / "whole-nodes.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=r"--gpus: value 4 must be a multiple of gpus_per_node 8 "
                                        r"\(whole nodes\); nearest valid: 8"):
        load_cluster(str(path), gpus=4)


def test_workstation_allows_a_partial_node():
    c = load_cluster("rtx-4090x8", gpus=3)
    assert (c.num_gpus, c.num_nodes) == (3, 1)
    assert load_cluster("rtx-4090x8", gpus=16).num_nodes == 2
    with pytest.raises(SpecError, match=r"value 12 must be 1\.\.7 or a multiple of 8; nearest valid: 8, 16"):
        load_cluster("rtx-4090x8", gpus=12)


@pytest.mark.parametrize("gpus", [0, -8])
def test_non_positive_gpus(gpus):
    with pytest.raises(SpecError, match=f"--gpus: value {gpus} must be a positive integer"):
        load_cluster("dgx-h100", gpus=gpus)


# user files -----------------------------------------------------------------------------------

def test_user_file_with_num_gpus_and_small_scaleup_domain():
    c = load_cluster(str(DATA / "custom-pcie.yaml"))
    assert (c.name, c.num_gpus, c.num_nodes, c.scaleup_domain_gpus) == ("custom-pcie", 16, 4, 2)
    assert c.network_gb_per_s_per_gpu == 100 / 8 / 4
    assert load_cluster(str(DATA / "custom-pcie.yaml"), gpus=8).num_gpus == 8


def test_to_dict_is_plain_and_has_units():
    d = to_dict(load_cluster("dgx-h100", gpus=16))
    assert d["num_gpus"] == 16 and d["num_nodes"] == 2
    assert d["network_gb_per_s_per_gpu"] == 50.0
    assert d["gpu"]["memory_bytes"] == int(79.647 * 2**30)
    assert d["gpu"]["peak_tflops"]["bf16"] == 989.4
    yaml.safe_dump(d)  # plain types only


# bad input: one line, SpecError, names the key/value ----------------------------------------------

def test_unknown_name_suggests_closest():
    with pytest.raises(SpecError, match="unknown cluster 'dgx-h10'; did you mean dgx-h100"):
        load_cluster("dgx-h10")


def test_missing_file():
    with pytest.raises(SpecError, match="nope.yaml: no such file"):
        load_cluster("clusters/nope.yaml")


def test_yaml_syntax_error_names_file_and_line():
    with pytest.raises(SpecError, match=r"syntax-error\.yaml: YAML syntax error at line \d+"):
        load_cluster(str(DATA / "syntax-error.yaml"))


def _write(tmp_path, mutate) -> str:
    raw = yaml.safe_load((DATA / "custom-pcie.yaml").read_text())
    mutate(raw)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("mutate, expected", [
    (lambda r: r.update(gpus_per_nod=8), r"gpus_per_nod: unknown key; did you mean 'gpus_per_node'"),
    (lambda r: r["gpu"].update(hbm_gbps=1), r"gpu\.hbm_gbps: unknown key; did you mean 'hbm_gb_per_s'"),
    (lambda r: r["gpu"]["peak_tflops"].update(int8=1), r"gpu\.peak_tflops\.int8: unknown key"),
    (lambda r: r.pop("nic_gbit_per_s"), r"nic_gbit_per_s: missing key"),
    (lambda r: r["gpu"].pop("memory_gib"), r"gpu\.memory_gib: missing key"),
    (lambda r: r.update(host_memory_gib=0), r"host_memory_gib: value 0 must be a positive number"),
    (lambda r: r.update(scaleup_gb_per_s=-1), r"scaleup_gb_per_s: value -1 must be a positive number"),
    (lambda r: r["gpu"].update(memory_gib="80GB"), r"gpu\.memory_gib: value '80GB' must be a positive number"),
    (lambda r: r.update(gpus_per_node=2.5), r"gpus_per_node: value 2\.5 must be a positive integer"),
    (lambda r: r["gpu"]["peak_tflops"].update(bf16=0), r"gpu\.peak_tflops\.bf16: value 0 must be"),
    (lambda r: r["gpu"].update(peak_tflops={"fp32": 19.5}), r"gpu\.peak_tflops: needs at least one of bf16, fp16"),
    (lambda r: r.update(allow_partial_node="yes"), r"allow_partial_node: value 'yes' must be true or false"),
    (lambda r: r.update(scaleup_domain_gpus=3), r"scaleup_domain_gpus: value 3 must divide or be a multiple"),
    (lambda r: r.update(num_gpus=6), r"num_gpus: value 6 must be 1\.\.3 or a multiple of 4"),
    (lambda r: r.update(sources={"gpu.hbm": "a datasheet"}), r"sources\.gpu\.hbm: names no key"),
    (lambda r: r.update(gpu=[1]), r"gpu: value \[1\] must be a mapping"),
])
def test_bad_values_raise_one_line_spec_error(tmp_path, mutate, expected):
    with pytest.raises(SpecError, match=expected) as err:
        load_cluster(_write(tmp_path, mutate))
    assert "\n" not in str(err.value)
    assert str(tmp_path / "c.yaml") in str(err.value)


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_cluster(str(path))


def test_network_bandwidth_per_gpu_arithmetic():
    # 8 NICs x 200 Gb/s / 8 bits / 8 GPUs = 25 GB/s (DGX A100); 1 x 100 / 8 / 8 = 1.5625 (workstation)
    assert load_cluster("dgx-a100-80g").network_gb_per_s_per_gpu == 25.0
    assert math.isclose(load_cluster("rtx-4090x8").network_gb_per_s_per_gpu, 1.5625)


def test_grand_teton_numbers_are_the_benchmark_pages():
    """torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 8 H100 per host on NVLink, 96GB HBM2e
    at 2.4 TB/s, 400 Gb/s RDMA per GPU; the peaks stay the H100 SXM datasheet's (no derating published)."""
    c = load_cluster("grand-teton", gpus=16)
    assert (c.gpus_per_node, c.nics_per_node, c.nic_gbit_per_s, c.gpu.hbm_gb_per_s) == (8, 8, 400, 2400)
    assert c.gpu.peak_tflops["bf16"] == load_cluster("dgx-h100").gpu.peak_tflops["bf16"] == 989.4
    assert c.gpu.memory_gib == pytest.approx(96 * 81559 / 81920, abs=0.005)   # 96 GiB less the 80 GB part's share
    assert 84.9 < c.gpu.memory_gib                                            # Table 6's highest published peak
