"""The MDP grid's outputs: ``cells.csv``, ``checks.csv``, ``summary.md``, the heatmaps and ``config.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.experiments.grid.cells import MODEL, CellResult
from benchmarks.experiments.grid.report import checks_table, heatmap, tails_table, write_checks_csv
from benchmarks.experiments.mdp_generalization.cells import MDPGridExperiment, cell_runs, psrl_row
from benchmarks.experiments.mdp_generalization.checks import anchored, checks
from benchmarks.experiments.models import describe_range
from benchmarks.stats import mean_se
from icrl_gym.envs import MDPSpec
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv
from icrl_gym.utils.provenance import software_environment


def _fmt(values: np.ndarray | None) -> str:
    if values is None:
        return "n/a"
    st = mean_se(values)
    return f"{st['mean']:.2f} ± {st['se']:.2f}"


def _paired(result: CellResult, anchor: str) -> str:
    a = anchored(result, anchor)
    return "n/a | n/a" if a is None else f"{a['diff']:+.2f} ± {a['diff_se']:.2f} | {a['ratio']:.2f}"


def write_cells_csv(path: Path, exp: MDPGridExperiment, results: list[CellResult], seed: int, runs: int) -> None:
    """One line per (cell, row): the cell's size, mean, s.e., the model's paired differences and ratios, tails.

    The tails (:meth:`~benchmarks.experiments.grid.cells.CellResult.tails`): the p99 of every row, and
    against the cell's best reference its p99 ratio and failure fraction.
    """
    lines = []
    for result in results:
        spec = result.cell.spec
        assert isinstance(spec, MDPSpec)
        size = {k: spec.to_dict()[k] for k in ("kind", "num_states", "num_actions", "horizon", "episodes")}
        tails = result.tails()
        best = result.best_reference() if result.played_references() else ""
        for row, values in result.totals.items():
            line: dict[str, Any] = {"cell": result.cell.label, **size, "in_range": result.cell.in_range, "row": row}
            line |= {"runs": cell_runs(exp, result.cell, runs), "seed": seed}
            line |= {"mean": "", "se": ""} if values is None else {k: f"{v:.6g}" for k, v in mean_se(values).items()}
            line["note"] = result.notes.get(row, "")
            for key, anchor in (("psrl", psrl_row(exp, result.cell)), ("bayes_dpt", exp.bayes_dpt)):
                a = anchored(result, anchor) if row == MODEL else None
                for stat in ("diff", "diff_se", "ratio"):
                    line[f"{stat}_{key}"] = "" if a is None else f"{a[stat]:.6g}"
            tail = tails.get(row, {})
            line |= {k: f"{tail[k]:.6g}" if k in tail else "" for k in ("p99", "p99_ratio_to_best", "failure_fraction")}
            line["best_reference"] = best
            lines.append(line)
    atomic_write_csv(path, lines, list(lines[0]) if lines else ["cell"])


def markdown(exp: MDPGridExperiment, results: list[CellResult], check_rows: list[dict[str, Any]], header: str) -> str:
    """A table of cells (model, PSRL, greedy Bayes DPT, paired differences and ratios), then the bounds."""
    lines = [
        header,
        "",
        "Cells marked * are outside the trained range.  Paired differences are model minus reference (± s.e.).\n",
        "| cell | model | PSRL | greedy Bayes DPT | model - PSRL | ratio PSRL | model - Bayes DPT | ratio Bayes DPT |",
        "|---" * 8 + "|",
    ]
    for r in results:
        psrl = psrl_row(exp, r.cell)
        mark = "" if r.cell.in_range else " *"
        lines.append(
            f"| {r.cell.label}{mark} | {_fmt(r.totals.get(MODEL))} | {_fmt(r.totals.get(psrl))} | "
            f"{_fmt(r.totals.get(exp.bayes_dpt))} | {_paired(r, psrl)} | {_paired(r, exp.bayes_dpt)} |"
        )
    lines += ["", *tails_table(results, [MODEL, *exp.psrl, exp.bayes_dpt])]
    if check_rows:
        lines += ["", *checks_table(check_rows, "Acceptance bounds", "model")]
    others = sorted({row for r in results for row in r.totals} - {MODEL, *exp.psrl, exp.bayes_dpt})
    lines += ["", f"Other rows (in cells.csv): {', '.join(others)}.", ""]
    return "\n".join(lines)


def write_report(
    exp: MDPGridExperiment, folder: Path, results: list[CellResult], config: dict[str, Any], name: str
) -> None:
    """Check every cell and write the outputs in ``folder``: config, CSV files, summary, heatmaps (with a model).

    ``config`` is the run's ``config.json`` (its model, model record, runs and seed); ``name`` the model's checkpoint.
    """
    model, record, runs, eval_seed = config["model"], config["model_record"], config["runs"], config["seed"]
    check_rows = [c for r in results for c in checks(exp, r)]
    config = {**config, "software": software_environment()}
    atomic_write_bytes(folder / "config.json", json.dumps(config, indent=2).encode())
    write_cells_csv(folder / "cells.csv", exp, results, eval_seed, runs)
    write_checks_csv(folder / "checks.csv", check_rows)
    missing = "" if model else f"\n\n**The model is missing** (no checkpoint {name!r}); only the references ran."
    header = (
        f"# {exp.title}\n\n{runs} runs per row and cell ({runs * exp.fixed_runs_factor} at the fixed size), seed "
        f"{eval_seed} (common random numbers: every row of a cell plays the same instances).  Model: "
        f"{name} (step {record.get('steps')}){missing}"
    )
    atomic_write_bytes(folder / "summary.md", markdown(exp, results, check_rows, header).encode())
    for label, anchor_of, slug in (
        ("PSRL (DarkRoom PSRL in dark rooms)", lambda r: psrl_row(exp, r.cell), "psrl"),
        ("the greedy Bayes DPT policy", lambda r: exp.bayes_dpt, "bayes-dpt"),
    ):
        path = folder / f"heatmap-{slug}.png"
        if model is None:
            path.unlink(missing_ok=True)  # stale: no model in this run
            continue

        def ratio(result: CellResult, anchor_of: Callable[[CellResult], str] = anchor_of) -> tuple[float, str] | None:
            a = anchored(result, anchor_of(result))
            return None if a is None else (a["ratio"], "")

        heatmap(
            path,
            results,
            f"{exp.title}: {name}, {runs} runs, seed {eval_seed}",
            describe_range(record.get("trained_range")),
            ratio=ratio,
            label=f"regret(model) / regret({label})",
            bracket="",
            per_row=2,
        )
