"""The combined outputs of a run in ``--out``: plots, ``summary.md``, ``regret.csv``, config, the page."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.executor.local import InlineExecutor
from benchmarks.executor.tasks import Executor, run_sweep
from benchmarks.experiments.bernoulli_frontier.report import FOLDER as FRONTIER
from benchmarks.experiments.bernoulli_frontier.report import frontier_markdown
from benchmarks.experiments.generalization.cells import GRID_EXPERIMENTS
from benchmarks.experiments.mdp_generalization.cells import MDP_GRID_EXPERIMENTS
from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.experiments.suite.checks import load_saved
from benchmarks.experiments.suite.report import experiment_headline, experiment_summary, summary_header, write_csv
from benchmarks.plots import plot_files, render, write_images
from benchmarks.results_page import PAGE, Section, write_page
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.provenance import software_environment


def remove_stale_outputs(out: Path, keep: set[str]) -> list[str]:
    """Remove the harness's top-level outputs in ``out`` not named in ``keep``; returns the removed names.

    The outputs are the plots of every experiment, ``regret.csv``, ``summary.md``, ``config.json`` and
    the results page;
    only these names are touched (stored results, retrained models and grid folders stay).
    """
    names = {"regret.csv", "summary.md", "config.json", PAGE, *(f for e in EXPERIMENTS.values() for f in plot_files(e))}
    removed = sorted(n for n in names - keep if (out / n).exists())
    for name in removed:
        (out / name).unlink()
    return removed


FIGURE_COST = 1.0
"""A figure task's cost for scheduling (they form a sweep of their own, so only their equality matters)."""


@dataclass(frozen=True)
class FigureTask:
    """The figures of one experiment as a task: drawn where the executor plays it, written by the driver."""

    experiment: str
    """The experiment's name (in :data:`EXPERIMENTS`)."""
    curves: dict[str, dict[str, np.ndarray]]
    """Its rows' curves."""
    runs: int
    """Runs per row (for the caption)."""
    seed: int
    """Seed of the common random numbers (for the caption)."""

    @property
    def name(self) -> str:
        """``experiment/figures``: the task in log lines and errors."""
        return f"{self.experiment}/figures"

    @property
    def cost(self) -> float:
        """:data:`FIGURE_COST`."""
        return FIGURE_COST

    @property
    def setup(self) -> None:
        """None: a figure shares no preparation with another."""
        return None

    @property
    def memory(self) -> float:
        """0: the figures form a sweep of their own and are alike, so every worker draws one (no estimate needed)."""
        return 0.0

    def run(self) -> dict[str, bytes]:
        """The PNG bytes of the experiment's files, by name (:func:`~benchmarks.plots.render`)."""
        return render(EXPERIMENTS[self.experiment], self.curves, self.runs, self.seed)


def write_figures(
    out: Path,
    results: dict[str, dict[str, dict[str, np.ndarray]]],
    runs: int,
    seed: int,
    executor: Executor | None = None,
) -> tuple[str, list[Section]]:
    """Draw the plots of ``results`` and write ``summary.md`` (each file atomically).

    The plots are drawn as tasks of ``executor`` (in this process when it is None), one per
    experiment, so that the workers of a run draw them side by side; this process writes the files.
    Returns the summary and the sections of the results page (each experiment's plots and tables).
    """
    tasks = [FigureTask(name, curves, runs, seed) for name, curves in results.items()]
    for images in run_sweep(executor or InlineExecutor(), tasks, desc="plots"):
        write_images(out, images)
    sections = []
    for name, curves in results.items():
        exp = EXPERIMENTS[name]
        text = experiment_summary(name, curves, runs, seed)
        images = [out / f for f in plot_files(exp)]
        sections.append(Section(name, exp.title, text, images, experiment_headline(exp, curves)))
    text = "\n".join([summary_header(runs, seed), *(section.markdown for section in sections)])
    atomic_write_bytes(out / "summary.md", text.encode())
    return text, sections


def write_results_page(out: Path, sections: list[Section], config: dict[str, Any]) -> Path:
    """``out/index.html``: the sections, the grid experiments' folders in ``out`` and the configuration."""
    grids = [out / name for name in (*GRID_EXPERIMENTS, *MDP_GRID_EXPERIMENTS) if (out / name).is_dir()]
    frontier = frontier_markdown(out / FRONTIER) if (out / FRONTIER).is_dir() else None
    title = "What a policy not told the prior can reach (bernoulli-frontier/)"
    images = sorted((out / FRONTIER).glob("heatmap-*.png"))
    extra = [] if frontier is None else [Section(FRONTIER, title, frontier, images)]
    return write_page(out, sections, config, grids, extra)


def outputs(results: dict[str, Any]) -> set[str]:
    """The top-level files that describe ``results``."""
    plots = {f for name in results for f in plot_files(EXPERIMENTS[name])}
    return {"regret.csv", "summary.md", "config.json", PAGE, *plots} if results else set()


def redraw(out: Path) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """``--plot-only``: plots, summary and page drawn again from the results saved in ``out`` (checked first)."""
    results, saved = load_saved(out)
    _, sections = write_figures(out, results, saved["runs"], saved["seed"])
    write_results_page(out, sections, saved)
    remove_stale_outputs(out, outputs(results))
    print(f"re-drew plots, summary and {PAGE} in {out}")
    return results


def write_outputs(
    out: Path,
    results: dict[str, dict[str, dict[str, np.ndarray]]],
    runs: int,
    seed: int,
    record: dict[str, Any],
    executor: Executor | None = None,
) -> None:
    """Every combined output of a run (``record``: its ``config.json``); prints the summary and what was removed.

    ``executor`` draws the plots (:func:`write_figures`).
    """
    text, sections = write_figures(out, results, runs, seed, executor)
    write_csv(out / "regret.csv", results)
    record = {**record, "software": software_environment()}
    atomic_write_bytes(out / "config.json", json.dumps(record, indent=2).encode())
    write_results_page(out, sections, record)
    removed = remove_stale_outputs(out, outputs(results))
    print(text)
    if removed:
        print(f"removed outputs of experiments not in this run: {', '.join(removed)}")
