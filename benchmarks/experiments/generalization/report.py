"""The generalization grid's outputs: ``cells.csv``, ``checks.csv``, ``summary.md``, heatmaps, ``config.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.experiments.generalization.cells import FAMILIES, FAMILY_TITLES, MODEL_OF, GridExperiment
from benchmarks.experiments.generalization.checks import CHECK_SCOPE, CHECK_SCOPES, checks
from benchmarks.experiments.grid.cells import MODEL, Cell, CellResult
from benchmarks.experiments.grid.report import checks_table, heatmap, tails_table, write_checks_csv
from benchmarks.experiments.models import describe_range
from benchmarks.plots import describe_env
from icrl_gym.envs import BanditSpec
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv
from icrl_gym.utils.provenance import software_environment

HEATMAP_PER_ROW = {"bernoulli-beta": 3}
"""Heatmap panels per row of a family (others: all in one row)."""


def cell_fields(cell: Cell) -> dict[str, Any]:
    """A bandit cell's place in the heatmaps and its environment's fields (``cells.csv``, ``config.json``)."""
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
            **cell_fields(res.cell),
            "algorithm": name,
            "runs": runs,
            "seed": seed,
            **{k: (f"{st[k]:.6g}" if isinstance(st.get(k), float) else st.get(k, "")) for k in keys},
        }
        for res in results
        for name, st in res.stats().items()
    ]
    atomic_write_csv(path, lines, list(lines[0]) if lines else [])


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


def write_report(exp: GridExperiment, folder: Path, results: list[CellResult], config: dict[str, Any]) -> None:
    """Check every cell and write the grid's outputs in ``folder`` (the package's docstring); stale heatmaps go.

    ``config`` is the run's ``config.json``: its families, runs, seed, models (per family) and model records.
    """
    families, runs, eval_seed, records = config["families"], config["runs"], config["seed"], config["model_records"]
    models = {MODEL_OF[f]: config["models"][f] for f in families}
    check_rows = [c for r in results for c in checks(exp, r)]
    config = {**config, "software": software_environment()}
    atomic_write_bytes(folder / "config.json", json.dumps(config, indent=2).encode())
    write_cells_csv(folder / "cells.csv", results, runs, eval_seed)
    write_checks_csv(folder / "checks.csv", check_rows)
    kinds = dict.fromkeys(MODEL_OF[f] for f in families)
    header = (
        f"# {exp.title}\n\n{runs} runs per row and cell, seed {eval_seed} (common random numbers: every row of a "
        f"cell plays the same instances).  Models: "
        + ", ".join(f"{k}: {models[k]['checkpoint']} (step {records[k].get('steps')})" for k in kinds if models[k])
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
