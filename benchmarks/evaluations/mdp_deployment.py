"""How the MDP generalist should act on its policy: the deployments of its agent, side by side.

The model imitates P(a* = a | D).  Its agent can take the argmax (the greedy Bayes DPT policy), draw
from softmax(logits / tau) for a whole run, or follow its default schedule on random MDPs: draws at
temperature ``wide_temperature`` while the steps left are at least ``wide_visits`` S A, at
``explore_temperature`` while at least ``explore_visits`` S A, then the argmax
(:class:`~agents.learned.mdp_generalist.MDPGeneralistAgent`).  This script plays each of them,
next to PSRL, on random MDPs of the training prior's defaults, every row of a cell on the same
instances with the same noise (common random numbers), and writes ``deployment.csv`` (mean regret,
standard error, ratio to PSRL; the tails: the 99th percentile of per-run regret, its ratio to
PSRL's, and the fraction of runs with more than 3x PSRL's regret on the same instance and more than
20) and ``config.json`` to ``--out``.  Every argument (the cells' sizes, the runs' memory, the seed,
the checkpoint, ``--out``) is checked before the first cell is played, and a folder that already
holds these two files of an earlier run is refused unless ``--overwrite`` is given.

The default seed, 5e7, is neither a training seed (small integers) nor the ``mdp-generalization``
grid's evaluation seed (4e7): the schedule's parameters were chosen on it, and the grid checks them
on other instances.  The default cells are the 13 the schedule was chosen on::

    OMP_NUM_THREADS=1 python -m benchmarks.evaluations.mdp_deployment --runs 200 --out runs/mdp-deployment
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from benchmarks.command_checks import (
    add_overwrite_flag,
    check_out_folder,
    check_outputs_free,
    check_seed,
    refuse_unless,
)
from benchmarks.evaluations.generalization import failure_fraction, model_available, regret_quantile, total_regret
from benchmarks.evaluations.pretrained_eval import mean_se
from benchmarks.experiments import mdp_generalist
from icrl_gym.envs import MDPSpec
from icrl_gym.envs.validation import check_memory
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv

DEPLOYMENTS: dict[str, dict[str, Any]] = {
    "argmax": {"greedy": True},
    "T 0.2": {"wide_temperature": 0.2, "wide_visits": 0.0},
    "T 0.3": {"wide_temperature": 0.3, "wide_visits": 0.0},
    "T 0.5": {"wide_temperature": 0.5, "wide_visits": 0.0},
    "T 0.7": {"wide_temperature": 0.7, "wide_visits": 0.0},
    "T 1": {"greedy": False},
    "0.3 then argmax": {"wide_temperature": 0.3},
    "schedule (default)": {},
}
"""The agent's keywords of each deployment (``wide_visits`` 0: the whole run draws at ``wide_temperature``;
"0.3 then argmax" is the default without its long-run phase)."""

CELLS = (
    "3,2,5,50 3,2,10,50 3,2,20,50 5,2,20,50 5,3,10,20 10,2,10,20 20,2,5,5 10,4,5,5 20,4,5,5 "
    "5,4,10,50 20,2,20,50 3,4,20,20 10,2,5,50"
).split()
"""S,A,H,K of the cells the default schedule was chosen on (the command line's form)."""

SEED = 50_000_000

OUTPUTS = ("deployment.csv", "config.json")
"""The files a run writes to ``--out`` (a second run into the same folder needs ``--overwrite``)."""


def check_cells(cells: tuple[tuple[int, int, int, int], ...], runs: int) -> None:
    """Refuse a cell that is no MDP size, or whose ``runs`` instances exceed the memory limit (``ValueError``).

    The same checks the rollout of the cell would make, made for every cell before the first is
    played, so that a bad last cell does not cost the time of the others.
    """
    for S, A, H, K in cells:
        try:
            spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
        except ValueError as err:
            raise ValueError(f"--cells {S},{A},{H},{K} is no MDP size: {err}") from None
        check_memory(spec.memory_bytes(runs), f"--runs {runs:,} in the cell --cells {S},{A},{H},{K}")


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


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
    parser = doc_parser(__doc__)
    parser.add_argument("--cells", nargs="+", default=CELLS, help="S,A,H,K each")
    parser.add_argument("--runs", type=int, default=200, help="instances per cell")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--checkpoint", default=None, help="an MDP generalist checkpoint (default: the shipped one)")
    parser.add_argument("--out", default="runs/mdp-deployment")
    add_overwrite_flag(parser)
    args = parser.parse_args(argv)
    try:
        cells = tuple((int(S), int(A), int(H), int(K)) for S, A, H, K in (cell.split(",") for cell in args.cells))
    except ValueError:
        parser.error(f"--cells takes S,A,H,K (four integers each), got {args.cells}")
    if args.runs < 2:
        parser.error(f"--runs must be >= 2 (the standard error needs two), got {args.runs}")
    if args.checkpoint is not None and not model_available(args.checkpoint):
        parser.error(f"--checkpoint {args.checkpoint}: no such checkpoint (a path or a shipped name)")
    out = Path(args.out)
    refuse_unless(
        parser,
        lambda: check_seed(args.seed),
        lambda: check_cells(cells, args.runs),
        lambda: check_out_folder(out),
        lambda: check_outputs_free(out, OUTPUTS, args.overwrite),
    )
    start = time.perf_counter()
    rows = play_deployments(cells, args.runs, args.seed, args.checkpoint)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(out / "deployment.csv", rows, list(rows[0]))
    config = {
        "cells": [list(c) for c in cells],
        "runs": args.runs,
        "seed": args.seed,
        "checkpoint": args.checkpoint or mdp_generalist()["checkpoint"],
        "deployments": DEPLOYMENTS,
        "seconds": time.perf_counter() - start,
    }
    atomic_write_bytes(out / "config.json", json.dumps(config, indent=2).encode())
    for row in rows:
        mean, se, ratio = row["mean"], row["se"], row["ratio_psrl"]
        tails = f"p99 {row['p99']:7.2f} ({row['p99_ratio_psrl']:.2f}x), failures {row['failures']:.3f}"
        print(f"{row['cell']:>16} {row['row']:>20} {mean:8.2f} ± {se:5.2f}  {ratio:.2f}x PSRL  {tails}")


if __name__ == "__main__":
    main()
