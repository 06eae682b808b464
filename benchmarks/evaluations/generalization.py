"""The ``generalization`` experiment: generalist agents against references over grids of sizes.

Bernoulli cells are (K, T) with arm means ~ U[0, 1] (plus K and T beyond the trained range, and
Beta priors at T=200); linear cells are (d, A) at T=200, sigma=1.5, and single changes at d=5, A=10.
Two opt-in families (``families``; the harness's ``--grid-families``) are played by the linear
generalist: ``gaussian-mab``, Gaussian multi-armed bandits (one-hot arms, A = d = K) with arm means
~ U[0, 1] or N(0, 1), K x T, sigma=0.5, against Bayes-UCB and TS told the prior (the best of these two
is the cell's best reference), LinUCB (alpha 1 and 2) and UCB; ``held-out``, priors of w* never
used in training (N(0, I), uniform on the unit sphere, one non-zero coordinate s e_i) at d=5, A=10,
T=200, sigma=1.5, against the matched Bayes-UCB and LinUCB (alpha 1 and 2; the best of these three is
the best reference) and the matched TS; ``in-family``, w* from the training prior family
(:mod:`icrl_gym.envs.prior_family`: a member and its hyperparameters drawn per instance), d x A x T at
sigma=0.5 and sigma variants x T at d=5, A=10, against Bayes-UCB and TS told each instance's matched
Gaussian prior (the best of these two is the best reference) and LinUCB (alpha 1 and 2).
One more opt-in family is played by the Bernoulli generalist: ``bernoulli-beta``, arm means ~ Beta(a, b)
for every a, b in ``exp.beta_params`` and the two skewed priors (the first floor(K/2) arms' means ~
U[0.5, 1], the others ~ U[0, 0.5], and the reverse), each at K in ``exp.beta_arms``, T=200, against
the finite-horizon Gittins index, Thompson sampling and Bayes-UCB told the cell's Beta prior, UCB, and
at K=2 the exact Bayes-optimal DP told the prior.  A skewed prior is no Beta prior (each arm's mean is
uniform on its own half), so on the skewed cells the Beta-Bernoulli references are told Beta(1, 1) =
U[0, 1] and the DP, Bayes-optimal only for that prior, is left out.  The cell's best reference is the
matched-prior Gittins, the reference of the acceptance threshold (<= 1.05 x its mean in every cell).
In every cell each row plays the same instances with the same noise (common random numbers,
:func:`icrl_gym.data.crn.crn_batches` through :func:`~icrl_gym.data.trajectories.evaluate_regret`
with one batch of all runs), so per-run regret differences are paired.  For every row: the mean and
standard error of the cumulative regret R_T over the runs, the paired difference R_T(row) -
R_T(best reference) with its standard error, and the ratio of the means; the best reference is the
reference with the lowest mean in the cell (of the compared ones).  Tails, per row: the 99th
percentile of per-run regret (p99, :func:`regret_quantile`), its ratio to the best reference's p99,
and the fraction of runs whose regret exceeds both 3x the best reference's on the same instance and
20 (:func:`failure_fraction`).  The acceptance thresholds (:func:`checks`) are checked for the
generalist.

Outputs in ``<out>/generalization/``: ``cells.csv`` (one line per cell and row), ``checks.csv``,
``summary.md``, ``heatmap-<family>.png`` (ratio generalist / best reference, out-of-range cells
hatched) and ``config.json``.  A missing checkpoint leaves its rows out and says so.  Each finished
cell is also written at once to ``cells/<cell>.npz`` (per-run totals of every row) and
``cells/<cell>.json`` (what made it: environment, rows, runs, seed, model weights' sha256); running
the same command again reuses every matching cell, so a stopped grid resumes at the cell it was in.
The tables, checks and heatmaps are rebuilt from the cells of the current run only (a heatmap of a
family not in the run is removed).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents import make_agent
from benchmarks.evaluations.pretrained_eval import mean_se
from benchmarks.experiments import GridExperiment
from benchmarks.plots import describe_env
from icrl_gym.checkpoint import CheckpointError, checkpoint_files, read_record, resolve_checkpoint
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditPrior, BanditSpec, MDPSpec, bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.registry import agent_class
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv

MODEL = "generalist"
"""Row name of the learned agent in every cell."""

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
HEATMAP_PER_ROW = {"bernoulli-beta": 3}
"""Heatmap panels per row of a family (others: all in one row)."""
BETA_PRIOR_AGENTS = ("gittins", "bernoulli_ts", "bayes_ucb", "bernoulli_bayes_optimal")
"""The Beta-Bernoulli references: each is told a ``bernoulli-beta`` cell's prior (:func:`told_beta_prior`)."""

TAIL_LEVEL = 0.99
"""The quantile of per-run regret reported as a row's tail (its p99)."""
FAILURE_FACTOR = 3.0
FAILURE_FLOOR = 20.0
"""A run fails when its regret exceeds both FAILURE_FACTOR x the best reference's on the same instance and this."""


def regret_quantile(totals: np.ndarray, level: float = TAIL_LEVEL) -> float:
    """The ``level`` quantile of per-run regret R_1..R_n, interpolated linearly between order statistics.

    With x_(0) <= ... <= x_(n-1) the sorted regrets and h = (n - 1) level: x_(floor h) + (h - floor h)
    (x_(floor h + 1) - x_(floor h)) (numpy's default quantile, Hyndman and Fan's definition 7).
    """
    return float(np.quantile(totals, level))


def failure_fraction(
    totals: np.ndarray, reference: np.ndarray, factor: float = FAILURE_FACTOR, floor: float = FAILURE_FLOOR
) -> float:
    """Fraction of runs i whose regret R_i exceeds both ``factor`` x R_i(reference) and ``floor``.

    Paired: run i of both rows played the same instance with the same noise (common random numbers),
    so a run counts when the row went wrong where the reference did not (a row locked on a wrong arm).
    """
    totals, reference = np.asarray(totals), np.asarray(reference)
    if totals.shape != reference.shape:
        raise ValueError(f"paired runs need equal shapes, got {totals.shape} and {reference.shape}")
    return float(np.mean((totals > factor * reference) & (totals > floor)))


def tail_stats(totals: np.ndarray, reference: np.ndarray | None) -> dict[str, float]:
    """A row's ``p99``; against a ``reference`` row of the same runs, ``p99_ratio_to_best``, ``failure_fraction``."""
    p99 = regret_quantile(totals)
    if reference is None:
        return {"p99": p99}
    ref99 = regret_quantile(reference)
    ratio = p99 / ref99 if ref99 > 0 else float("nan")
    return {"p99": p99, "p99_ratio_to_best": ratio, "failure_fraction": failure_fraction(totals, reference)}


@dataclass(frozen=True)
class Cell:
    """One environment of the grid and where it sits in the heatmaps."""

    family: str
    """One of :data:`FAMILIES` or 'mdp' (one heatmap figure each)."""
    panel: str
    """Heatmap panel (a prior, the linear (d, A) grid / variants, an MDP sub-grid)."""
    row: str
    column: str
    spec: BanditSpec | MDPSpec
    in_range: bool
    """Inside the generalist's trained range (Bernoulli: K in 2..20, T <= 500)."""
    base_prior: bool
    """The training prior (thresholds are checked only on in-range cells with it)."""

    @property
    def label(self) -> str:
        """Short unique name: panel, row and column."""
        return f"{self.panel}; {self.row}; {self.column}"


@dataclass
class CellResult:
    """Per-run total regrets of every row of a cell (``None`` and a reason where a row cannot run)."""

    cell: Cell
    totals: dict[str, np.ndarray | None]
    notes: dict[str, str] = field(default_factory=dict)
    references: tuple[str, ...] = ()

    def played_references(self) -> list[str]:
        """The compared references that have numbers."""
        return [r for r in self.references if self.totals.get(r) is not None]

    def best_reference(self) -> str:
        """The reference with the lowest mean regret."""
        return min(self.played_references(), key=lambda r: float(np.mean(self.totals[r])))  # type: ignore[arg-type]

    def tails(self) -> dict[str, dict[str, float]]:
        """Per row with numbers, :func:`tail_stats` against the best reference (only the p99 when none played)."""
        ref = self.totals[self.best_reference()] if self.played_references() else None
        return {name: tail_stats(r, ref) for name, r in self.totals.items() if r is not None}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Mean +- s.e., paired difference to the best reference +- s.e., ratio to it, and the tails, per row.

        The ratio is NaN where the best reference has no regret (as the tails' p99 ratio), not a division by zero.
        """
        best = self.best_reference()
        ref = self.totals[best]
        assert ref is not None
        tails = self.tails()
        out = {}
        for name, r in self.totals.items():
            if r is None:
                out[name] = {"status": self.notes.get(name, "n/a")}
                continue
            diff = mean_se(r - ref)
            total = mean_se(r)
            best_mean = float(ref.mean())
            out[name] = {
                **total,
                "diff_to_best": diff["mean"],
                "diff_se": diff["se"],
                # no ratio to a best reference without regret (a short run whose every draw went right)
                "ratio_to_best": total["mean"] / best_mean if best_mean != 0 else float("nan"),
                **tails[name],
                "best_reference": best,
                "status": "ok",
            }
        return out


def model_available(checkpoint: str) -> bool:
    """Whether ``checkpoint`` (a path or a shipped name) exists."""
    return checkpoint_files(resolve_checkpoint(checkpoint))[1].exists()


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
    the training prior (its threshold, :func:`checks`, applies in every cell).
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


def _compared(exp: GridExperiment, cell: Cell) -> tuple[str, ...] | None:
    """The references that compete for a cell's best reference (``None``: all of them)."""
    return {
        "gaussian-mab": exp.mab_compared,
        "held-out": exp.held_out_compared,
        "in-family": exp.family_compared,
        "bernoulli-beta": exp.beta_compared,
    }.get(cell.family)


def _reference_specs(exp: GridExperiment, cell: Cell, cache_dir: Path) -> dict[str, dict[str, Any]]:
    """The reference rows of a cell, completed with what they need from it (Gittins: T, prior, cache)."""
    linear = {
        "linear": exp.linear_references,
        "gaussian-mab": exp.mab_references,
        "held-out": exp.held_out_references,
        "in-family": exp.family_references,
    }
    if cell.family in linear:
        return dict(linear[cell.family])
    spec = cell.spec
    assert isinstance(spec, BanditSpec), "bandit cells only"
    beta = cell.family == "bernoulli-beta"
    a, b = told_beta_prior(spec)
    out = {}
    for label, agent in (exp.beta_references if beta else exp.bernoulli_references).items():
        agent = dict(agent)
        if agent["name"] == "bernoulli_bayes_optimal" and (spec.num_actions not in exp.dp_arms or spec.prior.skewed):
            continue  # too large a table, or (skewed) Bayes-optimal for another prior than the cell's
        if agent["name"] == "gittins":
            agent.update(horizon=spec.horizon, prior_a=a, prior_b=b, cache_dir=str(cache_dir))
        elif beta and agent["name"] in BETA_PRIOR_AGENTS and "hyperprior" not in agent:  # a family row is not told
            agent.update(prior_a=a, prior_b=b)
        out[label] = agent
    return out


def told_beta_prior(spec: BanditSpec) -> tuple[float, float]:
    """The Beta(a, b) prior a reference is told in a Bernoulli cell: the cell's for a 'beta' prior, else Beta(1, 1).

    Beta(1, 1) is U[0, 1]: the uniform prior itself, and for a skewed prior (no Beta prior: each arm's
    mean is uniform on its own half of [0, 1]) the prior of the arm means averaged over the arms.
    """
    return (spec.prior_a, spec.prior_b) if spec.prior is BanditPrior.BETA else (1.0, 1.0)


def total_regret(spec: BanditSpec | MDPSpec, agent: dict[str, Any], runs: int, seed: int) -> np.ndarray:
    """Per-run cumulative regret (runs,): one CRN batch of all runs, so every row meets the same instances.

    Bandits: R_T = sum_t (max_a mu_a - mu_{a_t}); MDPs: sum_k (V*_1(mu) - V^{pi_k}_1(mu)) over the K episodes.
    """
    if isinstance(spec, MDPSpec):
        return rollout_mdp(spec, agent, runs, seed=seed, batch_size=runs).episode_regret.sum(axis=1)
    return evaluate_regret(spec, make_agent(agent), runs, seed=seed, batch_size=runs).sum(axis=1)


def _slug(text: str) -> str:
    """A file name for a cell label (letters, digits, '.', '=' and '-' kept; the rest becomes '_')."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def _row_key(
    cell: Cell, label: str, agent: dict[str, Any], runs: int, seed: int, model_id: str | None
) -> dict[str, Any]:
    """What a stored row result must match to be reused: the environment, the row's agent, runs, seed, weights.

    The Gittins table folder is left out (a moved results folder still resumes), and so is the device a
    model plays on (CPU and CUDA play the same policy; the row file records which one played it); the
    model row is identified by its weights' sha256, not its checkpoint's path or name (a shipped copy
    of an evaluated checkpoint reuses its rows).  Rows are stored one by one, so a new model
    re-runs only its own rows and the references of every cell are computed once.
    """
    return {
        "cell": cell.label,
        "env": cell.spec.to_dict(),
        "runs": runs,
        "seed": seed,
        "row": label,
        "agent": {k: v for k, v in agent.items() if k not in ("cache_dir", "checkpoint", "device")}
        | ({"weights": model_id} if label == MODEL else {})
        | _deployment(agent),
    }


def _deployment(agent: dict[str, Any]) -> dict[str, str]:
    """The default deployment an agent class states in words (``deployment``), if it states one.

    A learned agent's default way to act (greedy, sampled, a temperature schedule) is part of what a
    row played: a new default must re-play the row, though the agent's specification is unchanged.
    """
    deployment = getattr(agent_class(agent["name"]), "deployment", None)
    return {} if deployment is None else {"deployment": deployment}


def _row_path(store: Path, cell: Cell, label: str) -> Path:
    return store / _slug(cell.label) / f"{_slug(label)}.json"


def _load_row(store: Path, cell: Cell, key: dict[str, Any]) -> tuple[np.ndarray | None, str | None] | None:
    """The stored (totals, note) of a row if its key matches ``key`` and its totals are whole; else ``None``."""
    try:
        stored = json.loads(_row_path(store, cell, key["row"]).read_text())
        if stored.get("key") != json.loads(json.dumps(key)):
            return None
        totals = None if stored["totals"] is None else np.asarray(stored["totals"], dtype=np.float64)
        note = stored.get("note")
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, partial or foreign: run the row again
    if totals is None and note is None or totals is not None and totals.shape != (key["runs"],):
        return None
    return totals, note


def _save_row(
    store: Path, cell: Cell, key: dict[str, Any], totals: np.ndarray | None, note: str | None, device: str
) -> None:
    """Write a finished row atomically: its key, per-run totals (JSON floats round-trip exactly), note and device."""
    path = _row_path(store, cell, key["row"])
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key, "totals": None if totals is None else totals.tolist(), "note": note, "device": device}
    atomic_write_bytes(path, json.dumps(record).encode())


def run_cell(
    exp: GridExperiment,
    cell: Cell,
    model: dict[str, Any] | None,
    runs: int,
    seed: int,
    cache_dir: Path,
    store: Path | None = None,
    model_id: str | None = None,
) -> CellResult:
    """Every row of a bandit ``cell`` (the experiment's references, then the model) on the same ``runs`` instances.

    The Bayes-optimal DP, the model, and every reference of a cell beyond the trained range (e.g. the
    Gittins table for T=1000: ~5 GiB and ~40 min to build) may refuse a size (:func:`run_rows`).
    """
    refs = _reference_specs(exp, cell, cache_dir)
    optional = {label for label, agent in refs.items() if agent["name"] == "bernoulli_bayes_optimal"}
    return run_rows(cell, refs, model, runs, seed, store, model_id, optional, _compared(exp, cell))


def run_rows(
    cell: Cell,
    refs: dict[str, dict[str, Any]],
    model: dict[str, Any] | None,
    runs: int,
    seed: int,
    store: Path | None = None,
    model_id: str | None = None,
    optional: set[str] | frozenset[str] = frozenset(),
    compared: tuple[str, ...] | None = None,
    stored_only: bool = False,
) -> CellResult:
    """The reference rows ``refs``, then ``model`` (if any), on the same ``runs`` instances of ``cell``.

    A row that refuses the size (the model's range, a reference in ``optional`` or any reference of a
    cell beyond the trained range, e.g. by its memory estimate) is kept with its reason instead of
    numbers.  The best reference of the cell is the best of ``compared`` (default: every reference).
    With ``stored_only``, a row not in ``store`` is not played but kept as missing ("n/a: not run yet").
    With ``store``, every finished row is written there at once (atomically), and a stored
    row with the same environment, agent, runs, seed and model weights (``model_id``) is reused, so an
    interrupted grid resumes where it stopped and a new model re-runs only its own rows.
    """
    rows = {**refs, **({MODEL: model} if model is not None else {})}
    result = CellResult(cell, {}, references=tuple(refs) if compared is None else compared)
    for label, agent in rows.items():
        key = _row_key(cell, label, agent, runs, seed, model_id)
        if store is not None and (stored := _load_row(store, cell, key)) is not None:
            result.totals[label], note = stored
            if note is not None:
                result.notes[label] = note
            continue
        if stored_only:
            result.totals[label], result.notes[label] = None, "n/a: not run yet"
            continue
        may_refuse = label == MODEL or label in optional or not cell.in_range
        try:
            result.totals[label] = total_regret(cell.spec, agent, runs, seed)
        except ValueError as err:  # the size is beyond what this row can play: marked n/a
            if not may_refuse or isinstance(err, CheckpointError):  # a missing or damaged model is no size limit
                raise
            result.totals[label], result.notes[label] = None, f"n/a: {err}"
        if store is not None:
            _save_row(store, cell, key, result.totals[label], result.notes.get(label), agent.get("device", "cpu"))
    return result


BETA_FACTOR = 1.05
BETA_CHECK = f"<= {BETA_FACTOR:.2f} x matched-prior Gittins"
"""The threshold of every ``bernoulli-beta`` cell (Gittins told the cell's Beta prior; Beta(1, 1) on skewed cells)."""


def checks(exp: GridExperiment, result: CellResult) -> list[dict[str, Any]]:
    """The acceptance thresholds for the generalist on one cell.

    Bernoulli cells: in range with the training prior only.  ``bernoulli-beta`` cells, every one:
    <= 1.05 x the mean of Gittins told the cell's prior (:data:`BETA_CHECK`; Beta(1, 1) on the skewed
    cells, :func:`told_beta_prior`).  Linear-reward cells (linear, Gaussian
    multi-armed, held-out priors, in-family priors): <= 1.10 x the best reference in range with the
    training prior (the Gaussian multi-armed and in-family cells: their best reference told the
    instance's prior), <= 1.15 x the best reference
    on held-out priors (LinUCB and the matched Bayes-UCB), and in every cell p99 <= 1.5 x the best
    reference's p99 (:func:`regret_quantile`).
    """
    cell, totals = result.cell, result.totals
    gen = totals.get(MODEL)
    if gen is None or cell.family == "bernoulli" and not (cell.in_range and cell.base_prior):
        return []
    g = float(gen.mean())
    if cell.family == "bernoulli-beta":
        gittins = [totals.get(k) for k, agent in exp.beta_references.items() if agent["name"] == "gittins"]
        bound = None if not gittins or gittins[0] is None else BETA_FACTOR * float(gittins[0].mean())
        return _check_rows(cell, [(BETA_CHECK, g, bound)])

    def mean(label: str) -> float | None:
        r = totals.get(label)
        return None if r is None else float(r.mean())

    out: list[tuple[str, float | None, float | None]] = []
    spec = cell.spec
    if cell.family == "bernoulli":
        refs = exp.bernoulli_references

        def ref(name: str, offset: bool = False) -> float | None:
            labels = [k for k, a in refs.items() if a["name"] == name and bool(a.get("count_offset")) == offset]
            return mean(labels[0]) if labels else None

        gittins, ts, ucb, ucb1, dp = (
            ref("gittins"),
            ref("bernoulli_ts"),
            ref("ucb"),
            ref("ucb", True),
            ref("bernoulli_bayes_optimal"),
        )
        out += [
            ("<= 1.05 x Gittins", g, None if gittins is None else 1.05 * gittins),
            ("< TS", g, ts),
            ("< UCB", g, ucb),
            ("< UCB (n0=1)", g, ucb1),
        ]
        if spec.num_actions == 2:
            out.append(("within 10% of the Bayes-optimal DP", g, None if dp is None else 1.10 * dp))
        if (spec.num_actions, spec.horizon) == (5, 200):
            out.append(("<= 6.3", g, 6.3))
    else:
        ref = totals[result.best_reference()]
        assert ref is not None
        compared = "/".join(dict.fromkeys(label.split(" (")[0] for label in result.references))
        if cell.family == "held-out":
            out.append((f"<= 1.15 x best of {compared}", g, 1.15 * float(ref.mean())))
        elif cell.in_range and cell.base_prior:
            out.append((f"<= 1.10 x best of {compared}", g, 1.10 * float(ref.mean())))
        out.append(("p99 <= 1.5 x best reference's p99", regret_quantile(gen), 1.5 * regret_quantile(ref)))
        standard = linear_bandit_spec(5, 10, 200, 1.5)
        if spec == standard:
            out.append(("<= 14.5", g, 14.5))
    return _check_rows(cell, out)


def _check_rows(cell: Cell, out: list[tuple[str, float | None, float | None]]) -> list[dict[str, Any]]:
    """One checks.csv line per (name, value, bound): a name '< ...' is strict, '<= ...' not; no bound: pass None."""
    rows = []
    for name, value, bound in out:
        strict = name.startswith("<") and not name.startswith("<=")
        passed = None if bound is None else (value < bound if strict else value <= bound)  # type: ignore[operator]
        rows.append({"cell": cell.label, "check": name, "value": value, "threshold": bound, "pass": passed})
    return rows


def _cell_fields(cell: Cell) -> dict[str, Any]:
    s = cell.spec
    assert isinstance(s, BanditSpec), "bandit cells only"
    return {
        "family": cell.family,
        "panel": cell.panel,
        "row": cell.row,
        "column": cell.column,
        "dim": s.dim,
        "num_actions": s.num_actions,
        "horizon": s.horizon,
        "noise_std": s.noise_std,
        "prior": s.prior,
        "action_set": s.action_set,
        "arms": s.arms,
        "in_range": cell.in_range,
    }


def write_cells_csv(path: Path, results: list[CellResult], runs: int, seed: int) -> None:
    """One line per (cell, row): mean, s.e., paired difference to the best reference and its s.e., ratio, tails.

    The tails (:meth:`CellResult.tails`): ``p99``, ``p99_ratio_to_best`` and ``failure_fraction``.
    """
    keys = [
        "mean",
        "se",
        "diff_to_best",
        "diff_se",
        "ratio_to_best",
        "p99",
        "p99_ratio_to_best",
        "failure_fraction",
        "best_reference",
        "status",
    ]
    lines = [
        {
            **_cell_fields(res.cell),
            "algorithm": name,
            "runs": runs,
            "seed": seed,
            **{k: (f"{st[k]:.6g}" if isinstance(st.get(k), float) else st.get(k, "")) for k in keys},
        }
        for res in results
        for name, st in res.stats().items()
    ]
    atomic_write_csv(path, lines, list(lines[0]) if lines else [])


def write_checks_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """One line per (cell, threshold)."""
    atomic_write_csv(path, rows, ["cell", "check", "value", "threshold", "pass"])


def _fmt(st: dict[str, Any]) -> str:
    if st["status"] != "ok":
        return "n/a" if st["status"].startswith("n/a") else st["status"]
    return f"{st['mean']:.2f} +- {st['se']:.2f}"


def markdown(results: list[CellResult], check_rows: list[dict[str, Any]], header: str, missing: dict[str, str]) -> str:
    """Per family: a table of cells x rows, then the thresholds.

    Every row shows mean +- s.e.; the generalist also its ratio and paired difference to the best reference.
    """
    lines = [header, ""]
    for family, note in missing.items():
        lines.append(f"**{family}: the generalist model is missing** ({note}); only the references are reported.\n")
    for family in dict.fromkeys(r.cell.family for r in results):
        fam = [r for r in results if r.cell.family == family]
        names = list(dict.fromkeys(n for r in fam for n in r.totals))
        lines += [f"## {FAMILY_TITLES.get(family, family)}\n", "Cells marked * are outside the trained range.\n"]
        extra = " ratio to best | paired diff to best |" if MODEL in names else ""
        lines.append("| cell | " + " | ".join(names) + " | best reference |" + extra)
        lines.append("|---|" + "---|" * (len(names) + 1 + 2 * bool(extra)))
        for r in fam:
            st = r.stats()
            cells = [_fmt(st[n]) if n in st else "" for n in names]
            mark = "" if r.cell.in_range else " *"
            tail = ""
            if extra:
                g = st.get(MODEL, {"status": "n/a"})
                tail = (
                    f" {g['ratio_to_best']:.3f} | {g['diff_to_best']:+.2f} +- {g['diff_se']:.2f} |"
                    if g["status"] == "ok"
                    else " n/a | n/a |"
                )
            lines.append(f"| {r.cell.label}{mark} | " + " | ".join(cells) + f" | {r.best_reference()} |" + tail)
        lines += ["", *tails_table(fam, names), ""]
        fam_checks = [c for c in check_rows if any(c["cell"] == r.cell.label for r in fam)]
        if fam_checks:
            scope = CHECK_SCOPES.get(family, CHECK_SCOPE)
            lines += checks_table(fam_checks, f"Acceptance thresholds ({scope})", "generalist")
            lines.append("")
    return "\n".join(lines)


CHECK_SCOPE = "mean bound: in-range cells with the training prior, and held-out priors; p99 bound: every cell"
"""Where the thresholds of the linear-reward families apply (:func:`checks`)."""
CHECK_SCOPES = {
    "bernoulli": "in-range cells, training prior",
    "bernoulli-beta": "every cell; Gittins told the cell's Beta prior, Beta(1, 1) = U[0, 1] on the skewed cells",
}
"""Where the thresholds of the Bernoulli families apply (:func:`checks`)."""


def tails_table(results: list[CellResult], names: list[str]) -> list[str]:
    """Markdown lines: per cell the p99 of the rows ``names``, the best reference, and the model's tails.

    The model's tails (:meth:`CellResult.tails`): its p99 over the best reference's, its failure fraction.
    """
    model = MODEL in names
    extra = " model p99 / best's p99 | model failures |" if model else ""
    lines = [
        f"Tails: the {TAIL_LEVEL:.0%} quantile (p99) of per-run regret; failures: the fraction of runs whose regret "
        f"exceeds both {FAILURE_FACTOR:g}x the best reference's on the same instance and {FAILURE_FLOOR:g}.\n",
        "| cell | " + " | ".join(f"{n} p99" for n in names) + " | best reference |" + extra,
        "|---|" + "---|" * (len(names) + 1 + 2 * model),
    ]
    for r in results:
        tails = r.tails()
        p99 = [f"{tails[n]['p99']:.1f}" if n in tails else ("n/a" if n in r.totals else "") for n in names]
        best = r.best_reference() if r.played_references() else "n/a"
        tail = ""
        if model:
            g = tails.get(MODEL, {})
            tail = (
                f" {g['p99_ratio_to_best']:.2f} | {g['failure_fraction']:.3f} |"
                if "failure_fraction" in g
                else " n/a | n/a |"
            )
        lines.append(f"| {r.cell.label} | " + " | ".join(p99) + f" | {best} |" + tail)
    return lines


def checks_table(check_rows: list[dict[str, Any]], title: str, model: str) -> list[str]:
    """Markdown lines: '<title>: passed/total pass.' and one table line per (cell, threshold) of :func:`checks`."""
    passed = sum(c["pass"] is True for c in check_rows)
    lines = [
        f"{title}: {passed}/{len(check_rows)} pass.\n",
        f"| cell | threshold | {model} | bound | pass |",
        "|---|---|---|---|---|",
    ]
    for c in check_rows:
        bound = "n/a" if c["threshold"] is None else f"{c['threshold']:.2f}"
        verdict = {True: "yes", False: "**no**", None: "n/a"}[c["pass"]]
        lines.append(f"| {c['cell']} | {c['check']} | {c['value']:.2f} | {bound} | {verdict} |")
    return lines


def describe_range(trained_range: dict[str, Any] | None) -> str:
    """A checkpoint record's ``trained_range`` as text, e.g. ``num_arms 2..20, horizon 20..500``."""
    if not trained_range:
        return "the checkpoint records none"
    # a record may also hold per-family ranges (nested dicts: the MDP generalist's); the overall ones are described
    return ", ".join(f"{k} {v[0]:g}..{v[1]:g}" for k, v in trained_range.items() if not isinstance(v, dict))


def ratio_to_best(result: CellResult) -> tuple[float, str] | None:
    """The model's ratio to the cell's best reference and the reference's short name (``None``: no model numbers)."""
    st = result.stats().get(MODEL, {"status": "n/a"})
    if st["status"] != "ok":
        return None
    return st["ratio_to_best"], result.best_reference().split(" ")[0]


def heatmap(
    path: Path,
    results: list[CellResult],
    title: str,
    trained: str,
    ratio: Callable[[CellResult], tuple[float, str] | None] = ratio_to_best,
    label: str = "regret(generalist) / regret(best reference)",
    bracket: str = "the best reference",
    per_row: int = 0,
) -> Path:
    """A ratio of the model to a reference per cell (default: to the best one), one panel per prior or sub-grid.

    ``ratio`` gives a cell's (ratio, text in brackets; ``bracket`` says what that text is, '' for
    none); out-of-range cells are hatched; ``trained`` describes the model's trained range
    (:func:`describe_range`) in the figure's note.  ``per_row`` panels per row (0: all in one row).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    panels = list(dict.fromkeys(r.cell.panel for r in results))
    values = [v[0] for r in results if (v := ratio(r)) is not None]
    top = max([1.1, *values])
    norm = TwoSlopeNorm(vmin=min([0.9, *values]), vcenter=1.0, vmax=top)
    widths = [len({r.cell.column for r in results if r.cell.panel == p}) + 1 for p in panels]
    ncols = per_row or len(panels)
    nrows = -(-len(panels) // ncols)
    width = sum(widths) if nrows == 1 else max(widths) * ncols
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * 1.4 + 2.0, 4.6 * nrows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    image = None
    for ax, panel in zip(axes.flat, panels, strict=False):
        cells = [r for r in results if r.cell.panel == panel]
        rows = list(dict.fromkeys(r.cell.row for r in cells))
        cols = list(dict.fromkeys(r.cell.column for r in cells))
        grid = np.full((len(rows), len(cols)), np.nan)
        for r in cells:
            i, j = rows.index(r.cell.row), cols.index(r.cell.column)
            value = ratio(r)
            if value is not None:
                grid[i, j] = value[0]
                text = f"{value[0]:.2f}\n({value[1]})" if value[1] else f"{value[0]:.2f}"
            else:
                text = "n/a"
            ax.text(j, i, text, ha="center", va="center", fontsize=8)
            if not r.cell.in_range:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.3", lw=1.5))
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn_r", norm=norm, aspect="auto")
        tilt = len(cols) > 4
        ax.set_xticks(range(len(cols)), cols, rotation=30 if tilt else 0, ha="right" if tilt else "center")
        ax.set_yticks(range(len(rows)), rows)
        ax.set_title(panel, fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), label=label)
    note = f"hatched: outside the trained range ({trained})" + (f"; in brackets: {bracket}" if bracket else "")
    fig.suptitle(f"{title}\n{note}", fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def model_record(checkpoint: str) -> dict[str, Any]:
    """What the grid's ``config.json`` records of a model: its checkpoint, kind, training steps, trained range, seed."""
    record = read_record(resolve_checkpoint(checkpoint))
    training = record.meta.get("training", {})
    return {
        "checkpoint": checkpoint,
        "kind": record.kind.value,
        "steps": training.get("steps"),
        "trained_range": record.meta.get("trained_range"),
        "training_seed": training.get("seed"),
    }


def play_cells(
    cells: list[Cell], play: Callable[[Cell], CellResult], progress: Callable[[str], None] | None
) -> list[CellResult]:
    """``play(cell)`` for every cell in order; each finished cell's label and the seconds so far go to ``progress``."""
    start = time.perf_counter()
    results = []
    for cell in cells:
        results.append(play(cell))
        if progress is not None:
            progress(f"{cell.label} ({time.perf_counter() - start:.0f}s)")
    return results


def run_identity(name: str, runs: int, eval_seed: int, seed_offset: int) -> dict[str, Any]:
    """The ``config.json`` fields that say which instances a grid played (every cell: one CRN batch of all runs)."""
    return {
        "experiment": name,
        "runs": runs,
        "seed": eval_seed,
        "seed_note": f"every cell: crn_batches(seed={eval_seed}, batch_size=runs); training seeds < {seed_offset}",
    }


def run_generalization(
    exp: GridExperiment,
    out: Path,
    runs: int,
    seed: int = 0,
    checkpoint: str | None = None,
    linear_checkpoint: str | None = None,
    families: tuple[str, ...] = ("bernoulli", "linear"),
    arms: tuple[int, ...] | None = None,
    horizons: tuple[int, ...] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[CellResult]:
    """Run the grid experiment into ``out/<exp.name>/`` (module docstring); returns the cells' results.

    ``families``: any of :data:`FAMILIES` (the Gaussian multi-armed bandits, the held-out and the
    in-family priors are played by the linear generalist).  ``checkpoint``/``linear_checkpoint``
    default to the experiment's shipped model names; ``arms`` and ``horizons`` replace the Bernoulli
    K and T lists (cells beyond the trained range stay marked).  Every cell uses the seed ``exp.seed_offset + seed``.
    """
    folder = out / exp.name
    folder.mkdir(parents=True, exist_ok=True)
    eval_seed = exp.seed_offset + seed
    cache_dir = folder / "gittins-cache"
    models: dict[str, dict[str, Any] | None] = {}
    missing: dict[str, str] = {}
    records: dict[str, Any] = {}
    weights: dict[str, str | None] = {}
    cells = grid_cells(exp, families, arms, horizons)
    for kind, spec, ckpt in (
        ("bernoulli", exp.bernoulli_model, checkpoint),
        ("linear", exp.linear_model, linear_checkpoint),
    ):
        name = ckpt or spec["checkpoint"]
        if model_available(name):
            models[kind] = {**spec, "checkpoint": name}
            records[kind] = model_record(name)
            weights[kind] = read_record(resolve_checkpoint(name)).meta.get("weights_sha256")
        else:
            models[kind] = None
            missing[kind] = f"no checkpoint {name!r}"
    start = time.perf_counter()

    def play(cell: Cell) -> CellResult:
        kind = MODEL_OF[cell.family]
        model_id = weights[kind] if models[kind] else None
        return run_cell(exp, cell, models[kind], runs, eval_seed, cache_dir, folder / "cells", model_id)

    results = play_cells(cells, play, progress)
    check_rows = [c for r in results for c in checks(exp, r)]
    config = {
        **run_identity(exp.name, runs, eval_seed, exp.seed_offset),
        "families": list(families),
        "models": {f: models[MODEL_OF[f]] for f in families},
        "model_records": records,
        "missing": {f: missing[MODEL_OF[f]] for f in families if MODEL_OF[f] in missing},
        "grid": asdict(exp),
        "cells": [{**_cell_fields(c), "env": c.spec.to_dict()} for c in cells],
        "seconds": time.perf_counter() - start,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_cells_csv(folder / "cells.csv", results, runs, eval_seed)
    write_checks_csv(folder / "checks.csv", check_rows)
    kinds = dict.fromkeys(MODEL_OF[f] for f in families)
    header = (
        f"# {exp.title}\n\n{runs} runs per row and cell, seed {eval_seed} (common random numbers: every row of a "
        f"cell plays the same instances).  Models: "
        + ", ".join(f"{k}: {models[k]['checkpoint']} (step {records[k].get('steps')})" for k in kinds if models[k])  # type: ignore[index]
    )
    (folder / "summary.md").write_text(markdown(results, check_rows, header, config["missing"]))
    for family in FAMILIES:
        if family not in families:
            (folder / f"heatmap-{family}.png").unlink(missing_ok=True)  # stale: not in this run
    for family in families:
        fam = [r for r in results if r.cell.family == family]
        model = models[MODEL_OF[family]]
        if fam and model is not None:
            envs = describe_env(fam[0].cell.spec).split(" (")[0]
            title = f"{exp.title}: {envs}, {model['checkpoint']}, {runs} runs, seed {eval_seed}, greedy"
            trained = describe_range(records[MODEL_OF[family]]["trained_range"])
            heatmap(folder / f"heatmap-{family}.png", fam, title, trained, per_row=HEATMAP_PER_ROW.get(family, 0))
    return results
