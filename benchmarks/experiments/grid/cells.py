"""A grid's cells and the per-run regret of their rows: means, paired differences to the best reference, tails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.stats import mean_se
from icrl_gym.data.trajectories import FAILURE_FACTOR, FAILURE_FLOOR
from icrl_gym.envs import BanditSpec, MDPSpec

MODEL = "generalist"
"""Row name of the learned agent in every cell."""


SLICE_RUNS = 100
"""Runs per slice of a grid's row (``tasks.py``): fixed, so the numbers do not depend on the number of workers."""


TAIL_LEVEL = 0.99
"""The quantile of per-run regret reported as a row's tail (its p99)."""


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
    """A family of the bandit grid (``generalization.cells.FAMILIES``) or 'mdp' (one heatmap figure each)."""
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
        out: dict[str, dict[str, Any]] = {}
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


@dataclass(frozen=True)
class GridSettings:
    """What every grid experiment's settings start with: its name and its title."""

    name: str
    """The name ``--experiments`` takes, and the grid's folder in ``--out``."""
    title: str
    """The title of its summary and heatmaps."""
