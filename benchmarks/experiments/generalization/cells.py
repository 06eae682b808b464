"""The generalization grid's settings (:data:`GENERALIZATION`: sizes, priors, rows) and the cells they make."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.experiments.grid.cells import SLICE_RUNS, Cell, GridSettings
from icrl_gym.envs import ActionSet, BanditArms, BanditPrior, bernoulli_bandit_spec, linear_bandit_spec


@dataclass(frozen=True)
class GridExperiment(GridSettings):
    """A regret comparison over a grid of environment sizes (``benchmarks/experiments/generalization/`` runs it).

    Every cell is one environment; in every cell all rows play the same instances (common random
    numbers) and the learned rows are compared with the best reference of the cell.
    """

    arms: tuple[int, ...]
    """Bernoulli K of the trained range (2..20)."""
    horizons: tuple[int, ...]
    """Bernoulli T of the trained range (up to 500)."""
    ood_arms: tuple[int, ...]
    """Bernoulli K beyond the trained range (cells marked out of range)."""
    ood_horizons: tuple[int, ...]
    """Bernoulli T beyond the trained range (cells marked out of range)."""
    prior_shifts: tuple[tuple[float, float], ...]
    """Beta(a, b) priors of the arm means (instead of U[0, 1]), at T=``shift_horizon`` for every in-range K."""
    shift_horizon: int
    bernoulli_references: dict[str, dict[str, Any]]
    """Reference rows; Gittins gets horizon=T and the cell's Beta prior, the DP rows only at K in ``dp_arms``."""
    dp_arms: tuple[int, ...]
    bernoulli_model: dict[str, Any]
    """The Bernoulli generalist row (its checkpoint is an option of the harness)."""
    linear_dims: tuple[int, ...]
    linear_actions: tuple[int, ...]
    linear_horizon: int
    linear_noise: float
    linear_variants: dict[str, dict[str, Any]]
    """Changes of one or two settings at d=5, A=10 (``linear_bandit_spec`` keywords)."""
    linear_references: dict[str, dict[str, Any]]
    linear_model: dict[str, Any]
    """The linear generalist row: an agent registered under this name with a shipped checkpoint of this name."""
    mab_arms: tuple[int, ...]
    """K of the Gaussian multi-armed bandits (opt-in family 'gaussian-mab'): one-hot arms, A = d = K."""
    mab_horizons: tuple[int, ...]
    mab_noise: float
    mab_priors: dict[str, dict[str, Any]]
    """Priors of the arm means, one heatmap panel each (``linear_bandit_spec`` keywords)."""
    mab_references: dict[str, dict[str, Any]]
    mab_compared: tuple[str, ...]
    """The references a Gaussian multi-armed cell's best reference is chosen from (those told the prior)."""
    held_out_size: tuple[int, int, int, float]
    """(d, A, T, sigma) of the held-out priors (opt-in family 'held-out'): the paper's linear size."""
    held_out_priors: dict[str, dict[str, Any]]
    """Priors of w* never used in training (``linear_bandit_spec`` keywords), one cell each."""
    held_out_references: dict[str, dict[str, Any]]
    held_out_compared: tuple[str, ...]
    """The references a held-out cell's best reference is chosen from (LinUCB and the matched Bayes-UCB)."""
    family_dims: tuple[int, ...]
    """d of the in-family cells (opt-in family 'in-family'): w* from the prior family, hyperparameters per instance."""
    family_actions: tuple[int, ...]
    family_horizons: tuple[int, ...]
    family_noise: float
    """sigma of the d x A x T cells (fixed per cell, told to every row)."""
    family_noise_variants: tuple[float, ...]
    """Other sigma, each at every T of ``family_horizons``, at d, A = ``family_variant_size``."""
    family_variant_size: tuple[int, int]
    family_prior: dict[str, Any]
    """The prior of w* (``linear_bandit_spec`` keywords): the whole family, one member per instance."""
    family_references: dict[str, dict[str, Any]]
    family_compared: tuple[str, ...]
    """The references an in-family cell's best reference is chosen from (those told the instance's prior)."""
    family_range: dict[str, tuple[float, float]]
    """The range the in-family cells count as in range for (``BanditSpec`` field: lowest, highest)."""
    beta_params: tuple[float, ...]
    """a and b of the Beta(a, b) priors of the opt-in family 'bernoulli-beta' (every pair: len^2 priors)."""
    beta_arms: tuple[int, ...]
    """K of the 'bernoulli-beta' cells (each Beta prior and each skewed prior at every K)."""
    beta_horizon: int
    skewed_priors: dict[str, dict[str, Any]]
    """The skewed priors of 'bernoulli-beta' (``bernoulli_bandit_spec`` keywords), one heatmap row each."""
    beta_references: dict[str, dict[str, Any]]
    """Reference rows of 'bernoulli-beta'; the Beta-Bernoulli agents among them are told the cell's Beta prior
    (Beta(1, 1) on the skewed cells), Gittins also T; the DP rows only at K in ``dp_arms`` with a Beta prior."""
    beta_compared: tuple[str, ...]
    """The references a 'bernoulli-beta' cell's best reference is chosen from: the matched-prior Gittins."""
    trained_arms: tuple[int, int] = (2, 20)
    trained_horizon: int = 500
    seed_offset: int = 30_000_000
    """Evaluation seeds start here, disjoint from every training seed."""
    default: bool = False
    slice_runs: int = SLICE_RUNS
    """Runs per task of a row (a cell's runs are played in slices of this many, one CRN batch each)."""


MATCHED_AND_LINUCB: dict[str, dict[str, Any]] = {
    "Bayes-UCB (matched)": {"name": "linear_bayes_ucb"},
    "TS (matched)": {"name": "linear_ts"},
    "LinUCB (alpha=1)": {"name": "linucb", "alpha": 1.0},
    "LinUCB (alpha=2)": {"name": "linucb", "alpha": 2.0},
}
"""Bayes-UCB and TS told the instance's (moment-matched) prior and sigma, and the prior-free LinUCB (lambda=1)."""

BETA_PARAMS = (0.5, 1.0, 2.0, 5.0)
"""The a and b of the bernoulli-beta cells' Beta(a, b) priors (16 pairs)."""

GENERALIZATION = GridExperiment(
    name="generalization",
    title="Generalist in-context agents across sizes",
    arms=(2, 3, 5, 10, 20),
    horizons=(50, 200, 500),
    ood_arms=(30, 50),
    ood_horizons=(1000,),
    prior_shifts=((2.0, 2.0), (0.5, 0.5)),
    shift_horizon=200,
    bernoulli_references={
        "Gittins (finite horizon)": {"name": "gittins"},
        "TS": {"name": "bernoulli_ts"},
        "UCB": {"name": "ucb"},
        "UCB (Fig. 1, n0=1)": {"name": "ucb", "count_offset": 1.0},
        "Bayes-optimal DP": {"name": "bernoulli_bayes_optimal"},
    },
    dp_arms=(2, 3),
    bernoulli_model={"name": "generalist", "checkpoint": "bernoulli-generalist", "greedy": True},
    linear_dims=(2, 5, 8),
    linear_actions=(5, 10, 20),
    linear_horizon=200,
    linear_noise=1.5,
    linear_variants={
        "T=100": {"horizon": 100},
        "T=500": {"horizon": 500},
        "sigma=0.5": {"noise_std": 0.5},
        "sigma=1": {"noise_std": 1.0},
        "sigma=2": {"noise_std": 2.0},
        "per-step action sets": {"action_set": ActionSet.PER_STEP},
        "Gaussian arms": {"arms": BanditArms.GAUSSIAN},
        "w* ~ N(0, I)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0},
    },
    linear_references={
        "Bayes-UCB (matched)": {"name": "linear_bayes_ucb"},
        "TS (matched)": {"name": "linear_ts"},
        "LinUCB": {"name": "linucb"},
    },
    linear_model={"name": "linear_generalist", "checkpoint": "linear-generalist-v1", "greedy": True},
    mab_arms=(2, 5, 20, 50),
    mab_horizons=(200, 1000),
    mab_noise=0.5,
    mab_priors={
        "means ~ U[0, 1]": {"prior": BanditPrior.UNIFORM},
        "means ~ N(0, 1)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0},
    },
    mab_references={**MATCHED_AND_LINUCB, "UCB": {"name": "ucb"}},
    mab_compared=("Bayes-UCB (matched)", "TS (matched)"),
    held_out_size=(5, 10, 200, 1.5),
    held_out_priors={
        "N(0, I)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0},
        "unit sphere": {"prior": BanditPrior.SPHERE},
        "s e_i, s ~ N(0, 1)": {"prior": BanditPrior.ONE_COORDINATE, "prior_var": 1.0},
    },
    held_out_references=MATCHED_AND_LINUCB,
    held_out_compared=("Bayes-UCB (matched)", "LinUCB (alpha=1)", "LinUCB (alpha=2)"),
    family_dims=(2, 5, 8, 16),
    family_actions=(2, 10, 50),
    family_horizons=(50, 200, 1000),
    family_noise=0.5,
    family_noise_variants=(0.1, 2.0),
    family_variant_size=(5, 10),
    family_prior={"prior": BanditPrior.FAMILY},
    family_references=MATCHED_AND_LINUCB,
    family_compared=("Bayes-UCB (matched)", "TS (matched)"),
    # the second version's target range (the shipped first version plays d <= 8: its rows beyond are n/a)
    family_range={"dim": (2, 16), "num_actions": (2, 50), "horizon": (1, 1000), "noise_std": (0.05, 3.0)},
    beta_params=BETA_PARAMS,
    beta_arms=(2, 5, 10, 20),
    beta_horizon=200,
    skewed_priors={
        "high half first": {"prior": BanditPrior.SKEWED},
        "low half first": {"prior": BanditPrior.SKEWED_REVERSED},
    },
    beta_references={
        "Gittins (matched prior)": {"name": "gittins"},
        "TS (matched prior)": {"name": "bernoulli_ts"},
        "Bayes-UCB (matched prior)": {"name": "bayes_ucb"},
        "UCB": {"name": "ucb"},
        "Bayes-optimal DP (matched prior)": {"name": "bernoulli_bayes_optimal"},
        # not told the prior: Bayes-optimal for an unknown member of the grid's 16 Beta priors, the
        # best any in-context learner of this family can do (benchmarks/experiments/bernoulli_frontier)
        "Bayes-optimal DP (family prior, not told)": {
            "name": "bernoulli_bayes_optimal",
            "hyperprior": [[a, b] for a in BETA_PARAMS for b in BETA_PARAMS],
        },
    },
    beta_compared=("Gittins (matched prior)",),
)

GRID_EXPERIMENTS: dict[str, GridExperiment] = {GENERALIZATION.name: GENERALIZATION}
"""Grid experiments (opt-in: they evaluate every row on tens of environments)."""


FAMILIES = ("bernoulli", "linear", "gaussian-mab", "held-out", "in-family", "bernoulli-beta")
"""The grid's cell families; all but ``bernoulli`` and ``linear`` are opt-in (not in the default run)."""


MODEL_OF = {
    "bernoulli": "bernoulli",
    "bernoulli-beta": "bernoulli",
    "linear": "linear",
    "gaussian-mab": "linear",
    "held-out": "linear",
    "in-family": "linear",
}
"""Which generalist plays the cells of a family."""


FAMILY_TITLES = {
    "bernoulli": "Bernoulli bandits",
    "linear": "Linear bandits",
    "gaussian-mab": "Gaussian multi-armed bandits (one-hot arms, Gaussian rewards)",
    "held-out": "Held-out priors of w*",
    "in-family": "Linear bandits with w* from the prior family (a prior drawn per instance)",
    "bernoulli-beta": "Bernoulli bandits with Beta and skewed priors (references told the prior)",
}


def bernoulli_cells(
    exp: GridExperiment, arms: tuple[int, ...] | None = None, horizons: tuple[int, ...] | None = None
) -> list[Cell]:
    """The Bernoulli cells: K x T under U[0, 1], then the Beta priors (``arms``, ``horizons``: other K, T)."""
    ks = arms or (*exp.arms, *exp.ood_arms)
    ts = horizons or (*exp.horizons, *exp.ood_horizons)
    lo, hi = exp.trained_arms

    def in_range(k: int, t: int) -> bool:
        return lo <= k <= hi and t <= exp.trained_horizon

    cells = [
        Cell("bernoulli", "means ~ U[0, 1]", f"K={k}", f"T={t}", bernoulli_bandit_spec(k, t), in_range(k, t), True)
        for k in ks
        for t in ts
    ]
    t = exp.shift_horizon
    for a, b in exp.prior_shifts:
        cells += [
            Cell(
                "bernoulli",
                f"means ~ Beta({a:g}, {b:g})",
                f"K={k}",
                f"T={t}",
                bernoulli_bandit_spec(k, t, prior="beta", prior_a=a, prior_b=b),
                in_range(k, t),
                False,
            )
            for k in ks
            if in_range(k, t)
        ]
    return cells


def beta_cells(exp: GridExperiment) -> list[Cell]:
    """The ``bernoulli-beta`` cells at T = ``exp.beta_horizon``: Beta(a, b), a, b in ``exp.beta_params``, then skewed.

    One heatmap panel per K of ``exp.beta_arms`` (rows a, columns b), then one panel of the skewed
    priors ``exp.skewed_priors`` (rows the prior, columns K).  In range where K and T are; no cell has
    the training prior (its threshold, ``checks.py``, applies in every cell).
    """
    lo, hi = exp.trained_arms
    t = exp.beta_horizon

    def cell(panel: str, row: str, column: str, k: int, **prior: Any) -> Cell:
        spec = bernoulli_bandit_spec(k, t, **prior)
        return Cell("bernoulli-beta", panel, row, column, spec, lo <= k <= hi and t <= exp.trained_horizon, False)

    cells = [
        cell(f"means ~ Beta(a, b), K={k}, T={t}", f"a={a:g}", f"b={b:g}", k, prior="beta", prior_a=a, prior_b=b)
        for k in exp.beta_arms
        for a in exp.beta_params
        for b in exp.beta_params
    ]
    return cells + [
        cell(f"skewed means, T={t}", name, f"K={k}", k, **prior)
        for name, prior in exp.skewed_priors.items()
        for k in exp.beta_arms
    ]


def linear_cells(exp: GridExperiment) -> list[Cell]:
    """The linear cells: d x A at T=200, sigma=1.5, then the variants at d=5, A=10."""
    t, sigma = exp.linear_horizon, exp.linear_noise
    cells = [
        Cell(
            "linear",
            f"d x A (T={t}, sigma={sigma:g})",
            f"d={d}",
            f"A={a}",
            linear_bandit_spec(d, a, t, sigma),
            True,
            True,
        )
        for d in exp.linear_dims
        for a in exp.linear_actions
    ]
    for name, change in exp.linear_variants.items():
        spec = linear_bandit_spec(**{"dim": 5, "num_actions": 10, "horizon": t, "noise_std": sigma, **change})
        cells.append(Cell("linear", "variants (d=5, A=10)", "", name, spec, True, "prior" not in change))
    return cells


def mab_cells(exp: GridExperiment) -> list[Cell]:
    """The Gaussian multi-armed bandits: one-hot arms (A = d = K), one panel per prior of the means, K x T."""
    sigma = exp.mab_noise
    return [
        Cell(
            "gaussian-mab",
            f"Gaussian MAB, {name}, sigma={sigma:g}",
            f"K={k}",
            f"T={t}",
            linear_bandit_spec(
                **{"dim": k, "num_actions": k, "horizon": t, "noise_std": sigma, **prior}, arms="one_hot"
            ),
            True,
            True,
        )
        for name, prior in exp.mab_priors.items()
        for k in exp.mab_arms
        for t in exp.mab_horizons
    ]


def held_out_cells(exp: GridExperiment) -> list[Cell]:
    """The held-out priors of w* (never a training prior) at the paper's linear size."""
    d, a, t, sigma = exp.held_out_size
    size = f"d={d}, A={a}, T={t}, sigma={sigma:g}"
    return [
        Cell("held-out", "held-out priors of w*", size, name, linear_bandit_spec(d, a, t, sigma, **prior), True, False)
        for name, prior in exp.held_out_priors.items()
    ]


def family_cells(exp: GridExperiment) -> list[Cell]:
    """The in-family cells: d x A, one panel per T, at sigma=``family_noise``; then sigma x T at one (d, A).

    w* comes from ``exp.family_prior`` (each instance draws its prior's member and hyperparameters);
    sigma is fixed per cell.  A cell is in range when its d, A, T and sigma lie in ``exp.family_range``.
    """

    def cell(panel: str, row: str, column: str, d: int, a: int, t: int, sigma: float) -> Cell:
        spec = linear_bandit_spec(d, a, t, sigma, **exp.family_prior)
        in_range = all(lo <= getattr(spec, name) <= hi for name, (lo, hi) in exp.family_range.items())
        return Cell("in-family", panel, row, column, spec, in_range, True)

    sigma = exp.family_noise
    cells = [
        cell(f"prior family, T={t}, sigma={sigma:g}", f"d={d}", f"A={a}", d, a, t, sigma)
        for t in exp.family_horizons
        for d in exp.family_dims
        for a in exp.family_actions
    ]
    d, a = exp.family_variant_size
    return cells + [
        cell(f"prior family, d={d}, A={a}", f"sigma={s:g}", f"T={t}", d, a, t, s)
        for s in exp.family_noise_variants
        for t in exp.family_horizons
    ]


def grid_cells(
    exp: GridExperiment,
    families: tuple[str, ...],
    arms: tuple[int, ...] | None = None,
    horizons: tuple[int, ...] | None = None,
) -> list[Cell]:
    """The cells of ``families`` (:data:`FAMILIES`), in that order (``arms``, ``horizons``: the Bernoulli K, T)."""
    build: dict[str, Callable[[], list[Cell]]] = {
        "bernoulli": lambda: bernoulli_cells(exp, arms, horizons),
        "linear": lambda: linear_cells(exp),
        "gaussian-mab": lambda: mab_cells(exp),
        "held-out": lambda: held_out_cells(exp),
        "in-family": lambda: family_cells(exp),
        "bernoulli-beta": lambda: beta_cells(exp),
    }
    unknown = [f for f in families if f not in build]
    if unknown:
        raise ValueError(f"unknown cell families {unknown}; the families are {', '.join(FAMILIES)}")
    return [cell for family in families for cell in build[family]()]
