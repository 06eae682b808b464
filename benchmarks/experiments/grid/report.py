"""A grid's tables (tails, thresholds), ``checks.csv`` and heatmaps of the model's ratio to a reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.experiments.grid.cells import FAILURE_FACTOR, FAILURE_FLOOR, MODEL, TAIL_LEVEL, CellResult
from icrl_gym.utils.fileio import atomic_write_csv


def write_checks_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """One line per (cell, threshold)."""
    atomic_write_csv(path, rows, ["cell", "check", "value", "threshold", "pass"])


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
