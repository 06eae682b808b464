"""The frontier's settings: the family of Beta priors (the generalization grid's), the seed and the output files."""

from __future__ import annotations

from benchmarks.experiments.generalization.cells import BETA_PARAMS

BETA_GRID = tuple((a, b) for a in BETA_PARAMS for b in BETA_PARAMS)
"""The harness's bernoulli-beta cells: a, b in {0.5, 1, 2, 5}."""


MONTE_CARLO_SEED = 31_000_000
"""Seed of the Monte-Carlo rows (never used in training)."""


EXACT_OUTPUTS = ("frontier.csv", "frontier.json")
"""The files the exact pass writes to ``--out``."""


MONTE_CARLO_OUTPUTS = ("uninformed.csv", "uninformed.json")
"""The files the Monte-Carlo rows write to ``--out``."""
