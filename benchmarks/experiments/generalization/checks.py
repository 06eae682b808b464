"""The generalization grid's acceptance thresholds for the generalist, per cell."""

from __future__ import annotations

from typing import Any

from benchmarks.experiments.generalization.cells import GridExperiment
from benchmarks.experiments.grid.cells import MODEL, CellResult, regret_quantile
from benchmarks.experiments.grid.checks import threshold_rows
from icrl_gym.envs import linear_bandit_spec

BETA_FACTOR = 1.05
BETA_CHECK = f"<= {BETA_FACTOR:.2f} x matched-prior Gittins"
"""The threshold of every ``bernoulli-beta`` cell (Gittins told the cell's Beta prior; Beta(1, 1) on skewed cells)."""


def checks(exp: GridExperiment, result: CellResult) -> list[dict[str, Any]]:
    """The acceptance thresholds for the generalist on one cell.

    Bernoulli cells: in range with the training prior only.  ``bernoulli-beta`` cells, every one:
    <= 1.05 x the mean of Gittins told the cell's prior (:data:`BETA_CHECK`; Beta(1, 1) on the skewed
    cells, :func:`~benchmarks.experiments.generalization.run.told_beta_prior`).  Linear-reward cells (linear, Gaussian
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
        gittins_rows = [totals.get(k) for k, agent in exp.beta_references.items() if agent["name"] == "gittins"]
        bound = None if not gittins_rows or gittins_rows[0] is None else BETA_FACTOR * float(gittins_rows[0].mean())
        return threshold_rows(cell, [(BETA_CHECK, g, bound)])

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
        best = totals[result.best_reference()]
        assert best is not None
        compared = "/".join(dict.fromkeys(label.split(" (")[0] for label in result.references))
        if cell.family == "held-out":
            out.append((f"<= 1.15 x best of {compared}", g, 1.15 * float(best.mean())))
        elif cell.in_range and cell.base_prior:
            out.append((f"<= 1.10 x best of {compared}", g, 1.10 * float(best.mean())))
        out.append(("p99 <= 1.5 x best reference's p99", regret_quantile(gen), 1.5 * regret_quantile(best)))
        standard = linear_bandit_spec(5, 10, 200, 1.5)
        if spec == standard:
            out.append(("<= 14.5", g, 14.5))
    return threshold_rows(cell, out)


CHECK_SCOPE = "mean bound: in-range cells with the training prior, and held-out priors; p99 bound: every cell"
"""Where the thresholds of the linear-reward families apply (:func:`checks`)."""


CHECK_SCOPES = {
    "bernoulli": "in-range cells, training prior",
    "bernoulli-beta": "every cell; Gittins told the cell's Beta prior, Beta(1, 1) = U[0, 1] on the skewed cells",
}
"""Where the thresholds of the Bernoulli families apply (:func:`checks`)."""
