"""`check_layout`'s placement part is cached per batch-axes shape: it must equal `check_placement`
of a freshly composed placement for every layout, and a shape with violations must still report
each layout's own degrees."""

import itertools

from planner.placement import rules
from planner.placement.layout import Layout
from planner.placement.rules import check_layout, check_placement
from planner.placement.states import GroupPlacement, Mode, Placement, State
from planner.placement.strategies import _compose
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

DEEPSEEK = load_model("deepseek-v3")  # 256 routed experts
CLUSTER = load_cluster("hgx-h800", gpus=8)  # world-size violations are filtered out
PLACEMENT_RULES = ("gradient_integrity", "state_consistency")


def _placement_part(layout: Layout) -> list:
    return [v for v in check_layout(DEEPSEEK, CLUSTER, layout) if v.rule in PLACEMENT_RULES]


def test_every_grid_layout_equals_a_fresh_check(monkeypatch):
    """Empty caches, then a grid of dp, dp_shard, cp, pp, ep, etp, ZeRO stage (many layouts per
    shape, so most answers come from the shape cache): each equals the uncached check."""
    monkeypatch.setattr(rules, "_PLACEMENT_VIOLATIONS", {})
    monkeypatch.setattr(rules, "_CLEAN_SHAPES", {})
    grid = itertools.product([1, 2, 3, 4, 8, 16], [None, 1, 2], [1, 2, 4], [1, 2, 3], [1, 2, 4, 8],
                             [1, 2], [0, 1, 2, 3])
    checked = 0
    for dp, shard, cp, pp, ep, etp, zero in grid:
        if shard is not None and dp % shard:
            continue
        layout = Layout(dp=dp, dp_shard=shard, cp=cp, pp=pp, ep=ep, etp=etp, zero_stage=zero)
        assert _placement_part(layout) == check_placement(_compose(layout)), layout
        checked += 1
    # (dp, dp_shard): 6 with None, 6 with 1, 4 with 2 (dp even) = 16; times cp, pp, ep, etp, ZeRO
    assert checked == 16 * 3 * 3 * 4 * 2 * 4


def _materialized_gradients(layout: Layout) -> Placement:
    """A placement that never reduces the gradients over dp_shard (degree = layout.dp)."""
    degrees = {"dp_shard": layout.dp}
    modes = {State.GRADIENTS: {"dp_shard": Mode.MATERIALIZED}}
    group = GroupPlacement(degrees=degrees, modes=modes)
    return Placement(groups={"dense": group})


def test_a_shape_with_violations_reports_each_layouts_degree(monkeypatch):
    """dp=4 and dp=8 share a shape (dp_shard > 1); the second must name degree 8, not 4."""
    monkeypatch.setattr(rules, "_PLACEMENT_VIOLATIONS", {})
    monkeypatch.setattr(rules, "_CLEAN_SHAPES", {})
    monkeypatch.setattr(rules, "placement_for", _materialized_gradients)
    for dp in (4, 8):
        got = _placement_part(Layout(dp=dp))
        assert [v.message for v in got] == [
            f"dense gradients are never reduced over dp_shard (degree {dp})"]
