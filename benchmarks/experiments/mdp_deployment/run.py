"""Play every deployment of the MDP generalist, and PSRL, on the same instances of each cell."""

from __future__ import annotations

from typing import Any

from benchmarks.evaluations.pretrained_eval import mean_se
from benchmarks.experiments.grid.cells import failure_fraction, regret_quantile
from benchmarks.experiments.grid.run import total_regret
from benchmarks.experiments.mdp_deployment.cells import DEPLOYMENTS
from benchmarks.experiments.rows import mdp_generalist
from icrl_gym.envs import MDPSpec


def play_deployments(
    cells: tuple[tuple[int, int, int, int], ...], runs: int, seed: int, checkpoint: str | None = None
) -> list[dict[str, Any]]:
    """One row per (cell, deployment), PSRL first: mean regret, standard error, the ratio to PSRL's mean, the tails."""
    model = mdp_generalist() if checkpoint is None else {**mdp_generalist(), "checkpoint": checkpoint}
    rows = []
    for S, A, H, K in cells:
        spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
        psrl = total_regret(spec, {"name": "psrl"}, runs, seed)
        plays = {"PSRL": psrl} | {
            name: total_regret(spec, {**model, **keywords}, runs, seed) for name, keywords in DEPLOYMENTS.items()
        }
        cell = f"({S}, {A}, {H}, {K})"
        rows += [
            {
                "cell": cell,
                "row": name,
                **mean_se(totals),
                "ratio_psrl": float(totals.mean() / psrl.mean()),
                "p99": regret_quantile(totals),
                "p99_ratio_psrl": regret_quantile(totals) / regret_quantile(psrl),
                "failures": failure_fraction(totals, psrl),
            }
            for name, totals in plays.items()
        ]
    return rows
