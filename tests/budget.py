"""Hypothesis profiles and example budgets of the property tests.

`make test` (and CI) runs the "ci" profile: derandomized (each test draws the same examples on
every run, from a hash of the test function), no example database, so the suite cannot fail by
chance. `make test-deep` runs the "deep" profile (`HYPOTHESIS_PROFILE=deep`): fresh random
examples under the seed `--hypothesis-seed` names, and `examples(n, deep)` of each test (at least
10x its CI budget). Source: Hypothesis settings profiles and `derandomize`
(https://hypothesis.readthedocs.io/en/latest/settings.html).
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILES = ("ci", "deep")
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise SystemExit(f"HYPOTHESIS_PROFILE={PROFILE!r} not allowed; allowed: {', '.join(PROFILES)}")

DEEP_FACTOR = 10
"""How many times its CI budget a property test draws under the deep profile (at least)."""

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("deep", derandomize=False, deadline=None)
settings.load_profile(PROFILE)


def examples(ci: int, deep: int | None = None) -> int:
    """A property test's example budget: `ci` under the CI profile; under the deep profile
    `deep`, at least DEEP_FACTOR x `ci`."""
    if PROFILE == "ci":
        return ci
    return max(deep or 0, DEEP_FACTOR * ci)
