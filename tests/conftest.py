"""Loads the Hypothesis profile before any test module is collected (`budget`)."""

import budget  # noqa: F401  (registers and loads the profile)
