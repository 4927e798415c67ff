"""Mesh and candidate enumeration: counts by hand, pins, rejections with reasons."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from planner.errors import SpecError
from planner.search.mesh import (
    Rejections,
    SearchSpace,
    candidate_layouts,
    divisors,
    factorization_count,
    factorizations,
    meshes,
)


def no_rules(layout):
    return []


def test_divisors_and_factorizations():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    # Ordered factorizations of 2^3 into 4 factors: exponents summing to 3 over 4 slots = C(6,3).
    assert len(list(factorizations(8, 4))) == 20
    assert all(a * b * c == 12 for a, b, c in factorizations(12, 3))


def test_factorization_count_is_the_number_of_factorizations():
    # 720,720 = 2^4 3^2 5 7 11 13: each prime's exponent spread over 4 parts, C(e + 3, 3) ways:
    # C(7,3) x C(5,3) x 4^4 = 35 x 10 x 256.
    assert factorization_count(720720, 4) == 35 * 10 * 256 == 89600
    assert factorization_count(1, 0) == 1 and factorization_count(6, 0) == 0
    for n in (1, 2, 12, 360, 1024, 30030):
        for parts in (1, 2, 3, 4):
            assert factorization_count(n, parts) == len(list(factorizations(n, parts)))


@pytest.mark.parametrize("fixed", [{}, {"cp": 2}, {"dp": 3, "pp": 5}, {"pp": 2, "cp": 3, "dp": 5}])
def test_domain_rejections_counted_in_blocks_as_one_by_one(fixed):
    """`meshes` counts the meshes whose tp exceeds the domain a block at a time; the count and the
    first example must be those of checking each factorization (in DEGREES order) in turn."""
    space = SearchSpace(num_gpus=720, max_tp=8, fixed=fixed)
    rej = Rejections()
    kept = list(meshes(space, rej))
    free = [k for k in ("dp", "tp", "pp", "cp") if k not in fixed]
    rest = 720 // math.prod(fixed.values())
    every = [{**fixed, **dict(zip(free, values))} for values in factorizations(rest, len(free))]
    over = [m for m in every if m["tp"] > 8]
    assert kept == [m for m in every if m["tp"] <= 8]
    assert rej.counts["tp exceeds the scale-up domain"] == len(over) > 0
    assert rej.examples["tp exceeds the scale-up domain"].startswith(f"tp={over[0]['tp']} > 8")


def test_tp_limited_to_scaleup_domain_and_counted():
    # 16 GPUs = 2^4: C(7,3) = 35 ordered (dp, tp, pp, cp). With max_tp 4: tp = 16 (1 mesh) and
    # tp = 8 (the factor 2 left on one of 3 axes: 3 meshes) are rejected -> 4.
    rej = Rejections()
    kept = list(meshes(SearchSpace(num_gpus=16, max_tp=4), rej))
    assert len(kept) == 35 - 4
    assert rej.as_list() == [{"reason": "tp exceeds the scale-up domain", "count": 4}]
    assert all(m["dp"] * m["tp"] * m["pp"] * m["cp"] == 16 and m["tp"] <= 4 for m in kept)


def test_pinned_tp_overrides_domain_and_pins_restrict():
    rej = Rejections()
    kept = list(meshes(SearchSpace(num_gpus=16, max_tp=4, fixed={"tp": 16}), rej))
    assert kept == [{"tp": 16, "dp": 1, "pp": 1, "cp": 1}]
    rej = Rejections()
    assert list(meshes(SearchSpace(num_gpus=16, max_tp=8, fixed={"tp": 3}), rej)) == []
    assert rej.counts["degrees do not multiply to the GPU count"] == 1
    # All four pinned, dividing 16 but multiplying to 8: refused, not yielded.
    rej = Rejections()
    every = {"dp": 2, "tp": 2, "pp": 2, "cp": 1}
    assert list(meshes(SearchSpace(num_gpus=16, max_tp=8, fixed=every), rej)) == []
    assert rej.counts["degrees do not multiply to the GPU count"] == 1
    assert list(meshes(SearchSpace(num_gpus=8, max_tp=8, fixed=every), Rejections())) == [every]


def test_knobs_enumerated_only_where_they_matter():
    space = SearchSpace(num_gpus=2, max_tp=8, micro_batch_sizes=(1, 2), zero_stages=(0, 1, 3),
                        vpp_values=(1, 2), sequence_parallel=(True, False),
                        base={"global_batch_size": 8})
    layouts = list(candidate_layouts(space, no_rules, Rejections()))
    # meshes of 2 GPUs: dp=2 | tp=2 | pp=2 | cp=2.
    # dp=2: mbs 2 x zero 3 = 6; tp=2: mbs 2 x sp 2 = 4; pp=2: mbs 2 x vpp 2 = 4; cp=2: mbs 2 x
    # zero 3 = 6 (ZeRO shards over dp x cp = 2 there: `zero_shard_group`).
    assert len(layouts) == 20
    assert all(layout.global_batch_size == 8 for layout in layouts)
    assert not any(layout.sequence_parallel for layout in layouts if layout.tp == 1)
    assert not any(layout.zero_stage for layout in layouts if layout.dp * layout.cp == 1)


def test_zero_stages_searched_at_dp1_with_context_parallel():
    """Review 12 finding 2: at dp = 1, cp = 2 ZeRO shards over the dp x cp group of 2 (Megatron's
    distributed optimizer takes `get_data_parallel_group(with_context_parallel=True)`; torchtitan's
    FSDP mesh is dp_shard x cp), so every stage is tried there; at dp = cp = 1 only ZeRO-0."""
    space = SearchSpace(num_gpus=2, max_tp=8, micro_batch_sizes=(1,), zero_stages=(0, 1, 2, 3),
                        sequence_parallel=(False,), base={"global_batch_size": 8})
    layouts = list(candidate_layouts(space, no_rules, Rejections()))
    assert sorted(layout.zero_stage for layout in layouts if layout.cp == 2) == [0, 1, 2, 3]
    assert all(layout.dp == 1 for layout in layouts if layout.cp == 2)
    assert sorted(layout.zero_stage for layout in layouts if layout.tp == 2) == [0]
    assert sorted(layout.zero_stage for layout in layouts if layout.pp == 2) == [0]


def test_expert_parallel_divides_dp_cp_tp():
    # 8 GPUs pinned dp=4, tp=2, pp=1, cp=1: dp*cp*tp = 8 -> ep in {1, 2, 4, 8} with etp=1;
    # with etp=2: ep in {1, 2, 4}.
    space = SearchSpace(num_gpus=8, max_tp=8, moe=True, micro_batch_sizes=(1,), zero_stages=(1,),
                        sequence_parallel=(True,), etp_values=(1, 2),
                        fixed={"dp": 4, "tp": 2, "pp": 1, "cp": 1})
    got = sorted((l.ep, l.etp) for l in candidate_layouts(space, no_rules, Rejections()))
    assert got == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1)]
    rej = Rejections()
    pinned = SearchSpace(num_gpus=8, max_tp=8, moe=True, fixed={"dp": 4, "tp": 2, "pp": 1,
                                                               "cp": 1, "ep": 16})
    assert list(candidate_layouts(pinned, no_rules, rej)) == []
    assert rej.counts["ep * etp must divide dp * cp * tp"] == 1


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str


def test_rejections_keep_reasons_from_validate():
    def rules(layout):
        out = []
        if layout.global_batch_size % (layout.dp * layout.micro_batch_size):
            out.append(Violation("batch not divisible by dp x micro-batch", "gbs % (dp*b)"))
        if 6 % layout.pp:
            out.append("layers not divisible by pp")
        return out

    space = SearchSpace(num_gpus=4, max_tp=2, micro_batch_sizes=(1, 2), zero_stages=(0,),
                        sequence_parallel=(False,), base={"global_batch_size": 2})
    rej = Rejections()
    kept = list(candidate_layouts(space, rules, rej))
    # 4 = 2^2 over (dp,tp,pp,cp): C(5,3)=10 meshes; tp=4 once -> rejected by the domain (1).
    # Hand count of the 9 others x mbs {1,2} (18 candidates):
    #   dp=4 (tp=pp=cp=1): gbs 2 % 4, % 8 -> 2 batch rejections.
    #   dp=2 meshes: (dp2,tp2),(dp2,pp2),(dp2,cp2): mbs 1 ok except pp... mbs 2 -> 2 % 4 rejected.
    #     (dp2,tp2): mbs1 kept, mbs2 batch. (dp2,cp2): mbs1 kept, mbs2 batch.
    #     (dp2,pp2): mbs1 kept, mbs2 batch.
    #   dp=1: (tp2,pp2),(tp2,cp2),(pp2,cp2),(pp4),(cp4): pp4 -> 6 % 4 -> 2 layer rejections;
    #     the other 4 meshes keep both mbs = 8 layouts.
    assert rej.counts["tp exceeds the scale-up domain"] == 1
    assert rej.counts["batch not divisible by dp x micro-batch"] == 2 + 3
    assert rej.counts["layers not divisible by pp"] == 2
    assert len(kept) == 3 + 8
    assert rej.examples["batch not divisible by dp x micro-batch"] == "gbs % (dp*b)"


def test_knob_rules_counted_once_per_micro_batch_size():
    """The same hand-counted space as above, with the pp rule (which ignores the micro-batch
    size) given as `validate_knobs` and only the batch rule as `validate`: the same layouts are
    kept and the pp rule still counts one rejection per candidate (pp4 x mbs {1,2} = 2)."""
    def batch(layout):
        if layout.global_batch_size % (layout.dp * layout.micro_batch_size):
            return ["batch not divisible by dp x micro-batch"]
        return []

    space = SearchSpace(num_gpus=4, max_tp=2, micro_batch_sizes=(1, 2), zero_stages=(0,),
                        sequence_parallel=(False,), base={"global_batch_size": 2})
    rej = Rejections()
    seen = []
    kept = list(candidate_layouts(space, batch, rej, validate_knobs=lambda l: (
        seen.append(l.micro_batch_size) or (["layers not divisible by pp"] if 6 % l.pp else []))))
    assert rej.counts["layers not divisible by pp"] == 2
    assert rej.counts["batch not divisible by dp x micro-batch"] == 2 + 3
    assert len(kept) == 3 + 8
    assert set(seen) == {1}  # run once per knob combination, at the first micro-batch size


def test_mesh_rules_counted_once_per_mesh():
    space = SearchSpace(num_gpus=4, max_tp=4, micro_batch_sizes=(1, 2, 4), zero_stages=(0,),
                        sequence_parallel=(False,))
    rej = Rejections()
    kept = list(candidate_layouts(space, no_rules, rej,
                                  validate_mesh=lambda l: ["no cp"] if l.cp > 1 else []))
    # meshes with cp > 1: cp=2 (3 ways to place the other factor 2) + cp=4 = 4 meshes.
    assert rej.counts["no cp"] == 4
    assert len(kept) == (10 - 4) * 3


def test_unknown_fixed_field_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown field 'tpp'"):
        SearchSpace(num_gpus=8, max_tp=8, fixed={"tpp": 2})


def test_fixed_passthrough_field_reaches_layouts():
    space = SearchSpace(num_gpus=1, max_tp=1, micro_batch_sizes=(1,),
                        fixed={"recompute": "full", "micro_batch_size": 2})
    (layout,) = list(candidate_layouts(space, no_rules, Rejections()))
    assert (layout.recompute, layout.micro_batch_size) == ("full", 2)


@pytest.mark.parametrize("name, gpus, fixed", [
    ("qwen3-30b-a3b", 1536, {}), ("mixtral-8x7b", 768, {}),
    # 2^3*3*5*7: no layout (dp must divide the batch, tp the heads, pp <= the layers), as
    # qwen3-235b-a22b on 720,720 GPUs; pinned degrees change which axes are enumerated.
    ("qwen3-235b-a22b", 840, {}), ("mixtral-8x7b", 768, {"cp": 2}),
    ("qwen3-30b-a3b", 1536, {"pp": 3, "etp": 2}), ("qwen3-30b-a3b", 96, {"tp": 16}),
    ("llama-3.1-405b", 960, {}), ("llama-3.1-70b", 96, {"cp": 2})])  # dense: one expert option
def test_staged_mesh_checks_count_every_rejection_as_the_full_check_does(name, gpus, fixed):
    """`plan` checks the degree rules once per (tp, pp), the expert rules once per dp*cp*tp and
    the other mesh rules once per mesh (`validate_degrees`, `validate_experts`: a million-GPU MoE
    request has millions of expert options), and counts meshes whose tp exceeds the domain a block
    at a time; the candidates, the rejection counts by reason and each reason's example must be
    those of checking every option in full."""
    from planner import plan as P
    from planner.placement import overlap
    from planner.placement.rules import check_mesh
    from planner.search.mesh import Rejections, SearchSpace, candidate_layouts
    from planner.specs.cluster import load_cluster
    from planner.specs.model import load_model

    model, cluster = load_model(name), load_cluster("dgx-h100", gpus=gpus)
    base = dict(seq_len=4096, global_batch_size=1024, precision="bf16", optimizer="adamw",
                framework="megatron")
    staged, rejected, _ = P._candidates(model, cluster, fixed, base, 0, 0.0)
    space = SearchSpace(num_gpus=gpus, max_tp=cluster.scaleup_domain_gpus, moe=model.is_moe,
                        max_cp=base["seq_len"] // P.CP_MIN_TOKENS_PER_RANK,
                        micro_batch_sizes=P.MICRO_BATCH_SIZES, zero_stages=P.ZERO_STAGES,
                        vpp_values=P.VPP_VALUES, layers=model.num_hidden_layers,
                        sequence_parallel=(True,), base=base, fixed=fixed)
    full = Rejections()  # plan's checks without the staging
    plain = list(candidate_layouts(
        space, lambda lay: P.errors(P.check_batch(model, cluster, lay)), full,
        validate_mesh=lambda lay: check_mesh(model, cluster, P._with_split(model, lay)),
        validate_knobs=lambda lay: [v for v in P.errors(P.check_layout(
            model, cluster, P._with_split(model, lay))) if v.rule not in P.BATCH_RULES]))
    k = P.ep_gpus_per_domain  # plan's candidates are tuned (overlaps, and the dispatcher by EP span and
    backend = P.mg.flex_backend(cluster.gpus_per_node, cluster.scaleup_domain_gpus)  # the DeepEP node counts)
    assert staged == [overlap.tuned_dispatcher(overlap.tuned(layout), k(
        layout, cluster.scaleup_domain_gpus), backend) for layout in plain]
    assert rejected.counts == full.counts and rejected.total > 0
    assert rejected.examples == full.examples
