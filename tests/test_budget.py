"""Every property test draws its budget from `budget.examples` (derandomized in `make test`,
>= 10x and random under `make test-deep`) and leaves the seed to the profile (issue 13)."""

from pathlib import Path

import budget


def test_every_property_test_takes_its_budget_from_the_profile():
    offenders = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            decorator = line.lstrip().startswith("@settings(")
            if decorator and ("examples(" not in line or "derandomize" in line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, offenders


def test_deep_budgets_are_at_least_ten_times_ci():
    assert budget.DEEP_FACTOR >= 10
    assert budget.examples(24) == 24 if budget.PROFILE == "ci" else budget.examples(24) >= 240
