"""Quick check of a linear-generalist checkpoint (e.g. a pilot run's) against references told each instance's prior.

On a few cells of the prior family (:mod:`icrl_gym.envs.prior_family`), the Gaussian multi-armed bandit
and a bandit of unknown sigma, the model and the references play the same instances and noise (common
random numbers, one seed per cell):

- Bayes-UCB and Thompson sampling told each instance's matched Gaussian prior and sigma
  (``info["model"]["instance"]``);
- LinUCB with alpha in {1, 2} (prior-free).

Every row reports the mean regret R_T +- s.e., the ratio to the best reference's mean, the paired
difference to it +- s.e., the 99th percentile of per-run regret and the fraction of runs whose regret
exceeds both 3x the best reference's (same run) and 20.  A quick look, not the acceptance grid::

    OMP_NUM_THREADS=1 python -m benchmarks.linear_generalist_pilot CHECKPOINT [--runs 200] [--horizon 200]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditSpec, linear_bandit_spec
from icrl_gym.utils.cli import doc_parser

REFERENCES: dict[str, dict[str, Any]] = {
    "Bayes-UCB (matched)": {"name": "linear_bayes_ucb"},
    "TS (matched)": {"name": "linear_ts"},
    "LinUCB alpha=1": {"name": "linucb", "alpha": 1.0},
    "LinUCB alpha=2": {"name": "linucb", "alpha": 2.0},
}
"""The reference rows (the Bayesian ones read each instance's prior and sigma from the environment)."""


def cells(horizon: int) -> dict[str, BanditSpec]:
    """The cells of the quick check."""
    return {
        "family d=5 A=10 sigma=0.5": linear_bandit_spec(5, 10, horizon, 0.5, prior="family"),
        "family d=16 A=50 sigma=0.5": linear_bandit_spec(16, 50, horizon, 0.5, prior="family"),
        "Gaussian MAB K=10 U[0,1] sigma=0.5": linear_bandit_spec(10, 10, horizon, 0.5, arms="one_hot"),
        "Gaussian MAB K=50 U[0,1] sigma=0.5": linear_bandit_spec(50, 50, horizon, 0.5, arms="one_hot"),
        "family d=5 A=10 sigma=0.1, sigma unknown": linear_bandit_spec(
            5, 10, horizon, 0.1, prior="family", noise_known=False
        ),
        "paper d=5 A=10 sigma=1.5 U[0,1]": linear_bandit_spec(5, 10, horizon, 1.5),
    }


def compare(totals: dict[str, np.ndarray], model_row: str) -> dict[str, dict[str, float]]:
    """Per row: mean, s.e., ratio and paired difference to the best reference, p99, tail fraction."""
    refs = {k: v for k, v in totals.items() if k != model_row}
    best = min(refs, key=lambda k: refs[k].mean())
    out = {}
    for row, r in totals.items():
        diff = r - totals[best]
        out[row] = {
            "mean": float(r.mean()),
            "se": float(r.std(ddof=1) / np.sqrt(len(r))),
            "ratio": float(r.mean() / totals[best].mean()),
            "diff": float(diff.mean()),
            "diff_se": float(diff.std(ddof=1) / np.sqrt(len(r))),
            "p99": float(np.percentile(r, 99)),
            "tail": float(np.mean((r > 3 * totals[best]) & (r > 20))),
        }
    out["best reference"] = {"row": best}  # type: ignore[dict-item]
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the table (and write it as JSON with ``--out``)."""
    parser = doc_parser(__doc__)
    parser.add_argument("checkpoint", help="linear generalist checkpoint (a run's checkpoints/step_NNNNNNN)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20_241)
    parser.add_argument("--out", default=None, help="JSON file of the results")
    parser.add_argument("--sample", action="store_true", help="sample the model's actions (default: argmax)")
    parser.add_argument("--cells", nargs="*", default=None, help="only the cells whose names contain one of these")
    args = parser.parse_args(argv)
    model_row = "linear generalist"
    results: dict[str, Any] = {"checkpoint": args.checkpoint, "runs": args.runs, "seed": args.seed, "cells": {}}
    for i, (name, spec) in enumerate(cells(args.horizon).items()):
        if args.cells and not any(part in name for part in args.cells):
            continue
        model = {"name": "linear_generalist", "checkpoint": args.checkpoint, "greedy": not args.sample}
        agents = {model_row: model, **REFERENCES}
        totals = {
            row: evaluate_regret(spec, agent, args.runs, seed=args.seed + i, batch_size=args.runs).sum(1)
            for row, agent in agents.items()
        }
        table = compare(totals, model_row)
        results["cells"][name] = table
        print(f"\n{name} (T={args.horizon}, {args.runs} runs; best reference: {table['best reference']['row']})")
        print(f"  {'row':<22} {'mean':>8} {'s.e.':>6} {'ratio':>6} {'diff':>8} {'p99':>8} {'tail':>6}")
        for row in agents:
            t = table[row]
            print(
                f"  {row:<22} {t['mean']:8.2f} {t['se']:6.2f} {t['ratio']:6.2f} {t['diff']:+8.2f} "
                f"{t['p99']:8.2f} {t['tail']:6.3f}"
            )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
