"""The device mesh (`planner.placement.mesh.Mesh`) shared by training layouts and serving instances.

Numbers are hand arithmetic from the rules' sources: world = dp x tp x pp x cp (torchtitan
ParallelDims), expert-data-parallel = world / (ep x etp x pp) (Megatron-LM parallel_state
`expert_data_parallel_size`), groups as strided slices of the rank order tp-cp-ep-dp-pp
(Megatron-LM RankGenerator).
"""

from __future__ import annotations

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import serve
from planner.cost import serving as sv
from planner.cost import step_time as stt
from planner.cost.comm import collectives
from planner.placement.layout import Layout
from planner.placement.mesh import DEFAULT_RANK_ORDER, Mesh, axis_domain_sharing
from planner.placement.rules import check_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

DEGREE = st.sampled_from([1, 2, 3, 4, 8, 16])


def test_world_size_and_hsdp_split_by_hand():
    mesh = Mesh(dp=8, tp=4, pp=2, cp=2, dp_shard=2)
    assert mesh.world_size == 8 * 4 * 2 * 2 == 128
    assert (mesh.dp_shard_degree, mesh.dp_replicate_degree) == (2, 4)
    assert Mesh(dp=8).dp_shard_degree == 8 and Mesh(dp=8).dp_replicate_degree == 1


def test_expert_groups_by_hand():
    # DeepSeek-V3's 2,048 H800: pp16 ep64 (Liu et al. 2024 §3.2.2): 2048 / (64 x 1 x 16) = 2 expert-DP
    mesh = Mesh(dp=128, pp=16, ep=64)
    assert mesh.expert_dp == 2 and mesh.expert_host == 128 and mesh.expert_group_divides()
    # ep x etp = 3 x 2 = 6 does not divide dp x cp x tp = 4 x 1 x 2 = 8
    assert not Mesh(dp=4, tp=2, ep=3, etp=2).expert_group_divides()


def test_tp_domain_rule_by_hand():
    assert Mesh(tp=8, dp=4).tp_in_domain(8)
    assert not Mesh(tp=16).tp_in_domain(8)              # exceeds the domain
    assert Mesh(tp=3, dp=2).tp_in_domain(8)             # 6 GPUs: the whole mesh fits in one domain
    assert not Mesh(tp=3, dp=8).tp_in_domain(8)         # 24 GPUs: a tp3 group straddles two nodes
    assert Mesh(tp=8, pp=9).tp_in_domain(72)            # NVL72: 72 = 9 x 8


def test_sharing_follows_the_rank_order_by_hand():
    # tp2 cp2 dp4 pp2 on 8-GPU domains: strides tp 1, cp 2, dp 4, pp 16
    mesh = Mesh(tp=2, cp=2, dp=4, pp=2)
    assert mesh.domain_sharing(8) == {"tp": 2, "cp": 2, "dp": 2, "pp": 1}
    assert mesh.domain_sharing(8) == {k: v for k, v in axis_domain_sharing(
        {"tp": 2, "cp": 2, "dp": 4, "pp": 2}, domain_gpus=8).items() if k != "ep"}
    # EP carved after etp: etp 2 inside, so 8 // 2 = 4 EP ranks of a group per domain
    assert Mesh(tp=2, dp=8, ep=8, etp=2).ep_sharing(8) == 4
    # expert rank order etp, ep, edp: etp1 ep4 edp 16 / (4 x 1 x 1) = 4 -> stride 4, 2 per domain
    assert Mesh(dp=16, ep=4).edp_sharing(8) == 2


@settings(max_examples=examples(60), deadline=None)
@given(dp=DEGREE, tp=DEGREE, pp=DEGREE, cp=DEGREE, ep=DEGREE)
def test_layout_reads_its_mesh(dp, tp, pp, cp, ep):
    layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
    mesh = layout.mesh
    assert (mesh.dp, mesh.tp, mesh.pp, mesh.cp, mesh.ep) == (dp, tp, pp, cp, ep)
    assert layout.world_size == dp * tp * pp * cp == mesh.world_size
    assert layout.expert_dp == max(1, dp * tp * pp * cp // (ep * pp))
    # a replaced layout gets the mesh of its own degrees, not its parent's
    assert layout.replace(tp=tp * 2).mesh.tp == tp * 2
    assert layout.replace(tp=tp * 2).world_size == 2 * dp * tp * pp * cp


@settings(max_examples=examples(40), deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), moe=st.booleans(),
       adp=st.booleans())
def test_serving_instance_is_a_mesh(tp, pp, moe, adp):
    inst = sv.Instance(tp=tp, pp=pp, ep=tp if moe else 1, adp=tp if adp else 1)
    assert inst.gpus == tp * pp == inst.mesh.world_size
    # experts inside the stage's tp ranks: ep x etp = tp, no expert data parallelism
    assert inst.mesh.ep * inst.mesh.etp == tp and inst.mesh.expert_dp == 1


def test_training_and_serving_agree_on_which_hops_cross_the_network():
    """Disagreement fixed (issue 14 item 3): serving priced a pipeline hop over the scale-out network
    whenever the instance had more GPUs than a node (`inst.gpus > gpus_per_node`); training prices
    its pipeline p2p by the scale-up domain (`axis_domain_sharing` over `scaleup_domain_gpus`).
    The domain is right: on a GB200 NVL72 rack the 4-GPU trays share one NVLink Switch domain of 72
    GPUs (hardware/gb200-nvl72.yaml: 130 TB/s NVLink Switch System), so tp4 x pp2 on two trays hops
    over NVLink, 900 GB/s and 3.4 us, not the 9.6 us network."""
    hw = load_cluster("gb200-nvl72", gpus=8)
    spec = load_model("llama-3.1-70b")
    inst = sv.Instance(tp=4, pp=2)
    # training: the pp group of a tp4 pp2 mesh has both ranks in one domain -> p2p inside
    layout = Layout(tp=4, pp=2, global_batch_size=8)
    assert stt._sharing(layout, hw, DEFAULT_RANK_ORDER)["pp"] == 2
    assert not inst.mesh.spans_domains(hw.scaleup_domain_gpus)
    concurrency = 64
    by_hand = 3.4e-6 + concurrency * spec.hidden_size * 2 / (900 * 1e9)
    assert serve._hop_s(hw, inst, spec, concurrency) == pytest.approx(by_hand)
    # past the domain (a 16-GPU instance on 8-GPU DGX H100 nodes) both say network
    h100 = load_cluster("dgx-h100", gpus=16)
    big = sv.Instance(tp=8, pp=2)
    assert big.mesh.spans_domains(h100.scaleup_domain_gpus)
    assert stt._sharing(Layout(tp=8, pp=2, global_batch_size=8), h100, DEFAULT_RANK_ORDER)["pp"] == 1
    net = h100.network_latency_s + concurrency * spec.hidden_size * 2 / (h100.network_gb_per_s_per_gpu * 1e9)
    assert serve._hop_s(h100, big, spec, concurrency) == pytest.approx(net)


def test_tp_domain_rule_is_the_meshs():
    """The placement rule reads the mesh: tp3 on 24 GPUs of 8-GPU nodes warns, tp8 does not."""
    model = load_model("llama-3.1-8b")
    cluster = load_cluster("dgx-h100", gpus=24)
    rules = {v.rule for v in check_layout(model, cluster, Layout(tp=8, dp=3, global_batch_size=24))}
    assert "tp_spans_scaleup_domain" not in rules
    rules = {v.rule for v in check_layout(model, cluster, Layout(tp=3, dp=8, global_batch_size=24))}
    assert "tp_spans_scaleup_domain" in rules


def test_expert_collective_groups_are_the_meshs():
    """The expert gradient reduction runs over the mesh's expert-data-parallel degree."""
    model = load_model("mixtral-8x7b")
    layout = Layout(dp=8, tp=2, ep=8, global_batch_size=64, zero_stage=1)
    edp = [c for c in collectives(model, layout) if c.axis == "edp"]
    assert edp and {c.group_size for c in edp} == {layout.mesh.expert_dp} == {16 * 1 // 8}


def test_group_degrees_by_hand():
    # HSDP dp8 = 2 replicas x 4 shards, tp2, ep4: world 16, edp = 16 / (4 x 1 x 1) = 4, of which
    # the 2 HSDP replicas are split out (2 divides 4): edp 2 x dp_replicate 2
    groups = Mesh(dp=8, dp_shard=4, tp=2, ep=4).group_degrees()
    assert groups["dense"] == {"dp_replicate": 2, "dp_shard": 4, "cp": 1, "tp": 2, "pp": 1, "host": 1}
    assert groups["replicated"] == groups["dense"] and groups["replicated"] is not groups["dense"]
    assert groups["expert"] == {"ep": 4, "etp": 1, "pp": 1, "host": 1, "dp_replicate": 2, "edp": 2}
    # the product of each group's degrees is the world size
    for degrees in groups.values():
        product = 1
        for d in degrees.values():
            product *= d
        assert product == 16
