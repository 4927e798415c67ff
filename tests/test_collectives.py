"""Alpha-beta collective times: hand arithmetic (Thakur et al. 2005 ring formulas) on dgx-a100-80g."""

import pytest

from planner.cost.collectives import (NETWORK_BUS_EFFICIENCY as NET_EFF,
                                      SCALEUP_BUS_EFFICIENCY as NVL_EFF, axis_domain_sharing,
                                      collective_time)
from planner.errors import SpecError
from planner.specs.cluster import load_cluster

A100 = load_cluster("dgx-a100-80g", gpus=64)   # 300 GB/s NVLink, 8 x 200 Gb/s IB = 25 GB/s per GPU
NVL = 300e9 * NVL_EFF
NET = 25e9 * NET_EFF
A_IN, A_NET = 3.4e-6, 9.6e-6


def test_rank_order_default_tp_innermost():
    # tp8 fills the node: dp and pp groups have one GPU per node
    assert axis_domain_sharing({"tp": 8, "dp": 4, "pp": 2}, domain_gpus=8) == {
        "tp": 8, "cp": 1, "ep": 1, "dp": 1, "pp": 1}
    # tp2: 4 dp ranks share each 8-GPU node
    assert axis_domain_sharing({"tp": 2, "dp": 8}, domain_gpus=8)["dp"] == 4
    # NVL72 domain: tp8 x dp9 all inside
    assert axis_domain_sharing({"tp": 8, "dp": 9}, domain_gpus=72)["dp"] == 9


def test_rank_order_is_respected():
    got = axis_domain_sharing({"tp": 4, "dp": 2}, domain_gpus=8, order=("dp", "tp", "cp", "ep", "pp"))
    assert got["dp"] == 2 and got["tp"] == 4


def test_all_reduce_inside_node_ring():
    m = 1e9
    expected = 2 * 7 * A_IN + 2 * 7 / 8 * m / NVL
    assert collective_time("all_reduce", group_size=8, bytes_per_device=m, cluster=A100) == pytest.approx(expected)


def test_all_gather_across_nodes_one_gpu_per_node():
    m = 4e9
    expected = 15 * A_NET + 15 / 16 * m / NET
    got = collective_time("all_gather", group_size=16, bytes_per_device=m, cluster=A100, gpus_per_domain=1)
    assert got == pytest.approx(expected)


def test_hierarchical_all_reduce_is_rs_ar_ag():
    # 32 GPUs, 8 per node: RS(8) + AR(4 nodes of M/8) + AG(8)
    m = 8e9
    rs = 7 * A_IN + 7 / 8 * m / NVL
    ar = 2 * 3 * A_NET + 2 * 3 / 4 * (m / 8) / NET
    got = collective_time("all_reduce", group_size=32, bytes_per_device=m, cluster=A100, gpus_per_domain=8)
    assert got == pytest.approx(2 * rs + ar)
    flat = collective_time("all_reduce", group_size=32, bytes_per_device=m, cluster=A100, gpus_per_domain=1)
    assert got < flat


def test_all_to_all_bottleneck_is_network_share():
    m = 1e9  # 16 GPUs, 8 per node: 8/16 of the data leaves the node
    got = collective_time("all_to_all", group_size=16, bytes_per_device=m, cluster=A100, gpus_per_domain=8)
    assert got == pytest.approx(max(7 / 16 * m / NVL + 7 * A_IN, 8 / 16 * m / NET + A_NET))


def test_p2p_and_trivial_groups():
    assert collective_time("p2p", group_size=2, bytes_per_device=1e8, cluster=A100, gpus_per_domain=1) == \
        pytest.approx(A_NET + 1e8 / NET)
    assert collective_time("all_reduce", group_size=1, bytes_per_device=1e9, cluster=A100) == 0.0


def test_bad_kind():
    with pytest.raises(SpecError, match="allowed"):
        collective_time("broadcast", group_size=2, bytes_per_device=1, cluster=A100)
