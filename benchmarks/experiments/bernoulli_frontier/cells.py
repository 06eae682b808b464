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


TOLD_GITTINS = "told Gittins"
"""The Monte-Carlo rows' reference, played in every run: each ratio is to it."""


FLOOR_ROW = "model (greedy, fresh-arm floor)"
"""The row of the model's greedy play under ``fresh_arm_floor`` (:func:`agents.learned.generalist.fresh_arm_floor`)."""


MONTE_CARLO_POLICIES = (
    "Gittins told U[0, 1]",
    "posterior vote",
    "evidence-mixed index",
    "family Gittins",
    "model (greedy)",
    FLOOR_ROW,
)
"""The Monte-Carlo rows' policies besides told Gittins (``--policies`` keeps some of them)."""


SLICES = "monte-carlo-slices"
"""The folder in ``--out`` that keeps the Monte-Carlo rows' finished slices until the rows are written."""


DEFAULT_MEMORY_GIB = 8.0
"""The memory limit of the exact tables and the Monte-Carlo rows when neither ``--max-memory-gib`` nor
``ICRL_GYM_MAX_MEMORY_GIB`` sets one.  Above the package's 4 GiB default (one environment batch or one
algorithm's statistics): the documented run, K = 2 and T = 200 with the model, is estimated at 5.3 GiB."""
