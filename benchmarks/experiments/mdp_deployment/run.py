"""Play every deployment of the MDP generalist, and PSRL, on the same instances of each cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.executor.local import InlineExecutor
from benchmarks.executor.tasks import Executor
from benchmarks.experiments.grid.cells import SLICE_RUNS, Cell, failure_fraction, regret_quantile
from benchmarks.experiments.grid.tasks import plan_rows, play_plans
from benchmarks.experiments.mdp_deployment.cells import DEPLOYMENTS
from benchmarks.experiments.rows import mdp_generalist
from benchmarks.stats import mean_se
from icrl_gym.checkpoint import read_record, resolve_checkpoint
from icrl_gym.envs import MDPSpec


def play_deployments(
    cells: tuple[tuple[int, int, int, int], ...],
    runs: int,
    seed: int,
    checkpoint: str | None = None,
    executor: Executor | None = None,
    store: Path | None = None,
    slice_runs: int = SLICE_RUNS,
) -> list[dict[str, Any]]:
    """One row per (cell, deployment), PSRL first: mean regret, standard error, the ratio to PSRL's mean, the tails.

    Every row of every cell is played in slices of ``slice_runs`` runs (one common-random-numbers
    batch each, ``benchmarks.experiments.grid.tasks``), the tasks of ``executor`` (default: this
    process), and joined in order; with ``store`` every finished slice and row is kept there, so a
    stopped sweep resumes (a row is reused only with the same model weights).
    """
    model = mdp_generalist() if checkpoint is None else {**mdp_generalist(), "checkpoint": checkpoint}
    weights = read_record(resolve_checkpoint(model["checkpoint"])).meta.get("weights_sha256")
    plans = []
    for S, A, H, K in cells:
        spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
        cell = Cell("mdp", "deployments", f"S={S}, A={A}", f"H={H}, K={K}", spec, True, True)
        rows = {"PSRL": {"name": "psrl"}} | {name: {**model, **keywords} for name, keywords in DEPLOYMENTS.items()}
        plans.append(plan_rows(cell, rows, None, runs, seed, store, weights, slice_runs=slice_runs))
    results = play_plans(plans, executor or InlineExecutor(), store, slice_runs, desc="mdp deployment")
    out = []
    for (S, A, H, K), result in zip(cells, results, strict=True):
        plays = {name: totals for name, totals in result.totals.items() if totals is not None}
        psrl = plays["PSRL"]
        out += [
            {
                "cell": f"({S}, {A}, {H}, {K})",
                "row": name,
                **mean_se(totals),
                "ratio_psrl": float(totals.mean() / psrl.mean()),
                "p99": regret_quantile(totals),
                "p99_ratio_psrl": regret_quantile(totals) / regret_quantile(psrl),
                "failures": failure_fraction(totals, psrl),
            }
            for name, totals in plays.items()
        ]
    return out
