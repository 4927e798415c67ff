"""The per-stage recompute notation: parse and print in one place (`placement/recompute_mix`)."""

import pytest

from planner.errors import SpecError
from planner.placement import recompute_mix


def test_parse_and_print_round_trip():
    stages = recompute_mix.parse("17n/2f,20n,21n,20n", 4)
    assert stages == ({"none": 17, "full": 2}, {"none": 20}, {"none": 21}, {"none": 20})
    assert recompute_mix.format_stages(stages) == "17n/2f, 20n, 21n, 20n"
    assert recompute_mix.format_stage({"none": 0, "selective": 3, "full": 0}) == "3s"
    assert recompute_mix.format_stage({"none": 0}) == "-"


@pytest.mark.parametrize("text, pp, said", [
    ("17x,20n", 2, "counts with n, s or f"), ("17n/3n", 1, "counts with n, s or f"),
    ("n", 1, "counts with n, s or f"), ("17n,20n", 3, "gives 2 stages; pp=3")])
def test_bad_entries_name_the_rule(text, pp, said):
    with pytest.raises(SpecError, match=said) as err:
        recompute_mix.parse(text, pp)
    assert err.value.key == "--recompute-per-stage"


def test_majority_is_the_mode_most_layers_use_ties_to_the_least_recompute():
    assert recompute_mix.majority([{"none": 17, "full": 2}, {"none": 20}]) == "none"
    assert recompute_mix.majority([{"full": 3}, {"selective": 2, "none": 1}]) == "full"
    assert recompute_mix.majority([{"selective": 2}, {"full": 2}]) == "selective"  # a tie
    assert recompute_mix.majority([{"none": 1, "full": 1}]) == "none"
