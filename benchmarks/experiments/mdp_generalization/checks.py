"""The MDP grid's acceptance bounds for the model, per cell, and its paired comparison with a reference row."""

from __future__ import annotations

from typing import Any

from benchmarks.experiments.grid.cells import MODEL, CellResult
from benchmarks.experiments.grid.checks import threshold_rows
from benchmarks.experiments.mdp_generalization.cells import FIXED_PANEL, MDPGridExperiment, is_room, psrl_row
from benchmarks.stats import mean_se
from icrl_gym.envs import MDPSpec

FIXED_SIZE_FIGURE = 13.3
"""Regret of the fixed-size DPT transformer at (5, 3, 10, 20) (its shipped record), the bound at that size."""


ROOM_FIGURE = (10, 100, 4, 251.9)
"""Size, H, K and regret of the fixed-size dark-room DPT transformer, the bound in that room."""


def anchored(result: CellResult, anchor: str) -> dict[str, float] | None:
    """The model's paired difference (mean, s.e.) to row ``anchor`` and the ratio of means (``None``: a row missing)."""
    model, ref = result.totals.get(MODEL), result.totals.get(anchor)
    if model is None or ref is None:
        return None
    diff = mean_se(model - ref)
    return {"diff": diff["mean"], "diff_se": diff["se"], "ratio": float(model.mean() / ref.mean())}


def checks(exp: MDPGridExperiment, result: CellResult) -> list[dict[str, Any]]:
    """The acceptance bounds on one cell: <= 0.80x PSRL and <= 1.10x greedy Bayes DPT in range, <= 0.90x PSRL beyond."""
    cell, model = result.cell, result.totals.get(MODEL)
    if model is None:
        return []
    value = float(model.mean())
    psrl = result.totals.get(psrl_row(exp, cell))
    bdpt = result.totals.get(exp.bayes_dpt)
    bounds: list[tuple[str, float | None]] = []
    room = is_room(cell)
    if cell.in_range:
        bounds.append(("<= 0.80 x PSRL", None if psrl is None else 0.80 * float(psrl.mean())))
        if not room:
            bounds.append(("<= 1.10 x greedy Bayes DPT", None if bdpt is None else 1.10 * float(bdpt.mean())))
    else:
        bounds.append(("<= 0.90 x PSRL", None if psrl is None else 0.90 * float(psrl.mean())))
    spec = cell.spec
    assert isinstance(spec, MDPSpec)
    if cell.panel == FIXED_PANEL:
        bounds.append((f"<= {FIXED_SIZE_FIGURE} (fixed-size DPT model)", FIXED_SIZE_FIGURE))
    n, H, K, figure = ROOM_FIGURE
    if room and (spec.size, spec.horizon, spec.episodes) == (n, H, K):
        bounds.append((f"<= {figure} (fixed-size dark-room model)", figure))
    return threshold_rows(cell, [(name, value, bound) for name, bound in bounds])
