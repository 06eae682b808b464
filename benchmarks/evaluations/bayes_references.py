"""Regret of the Bayesian reference algorithms: mean +- standard error over fresh instances.

Common random numbers: every algorithm of a table runs on the same instances and noise (seed
10_000_000, disjoint from the training seeds).  ``python -m benchmarks.evaluations.bayes_references [--runs 2000]``
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditSpec, bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.utils.cli import doc_parser

SEED = 10_000_000
PAPER_TS = {"name": "linear_ts", "prior_mean": 0.0, "prior_var": 1.0}

TABLES: dict[str, tuple[BanditSpec, dict[str, Any]]] = {
    **{
        f"Bernoulli K=2, T={t}, Unif[0,1]": (
            bernoulli_bandit_spec(num_arms=2, horizon=t),
            {"Bayes-optimal (DP)": "bernoulli_bayes_optimal", "TS": "bernoulli_ts", "Bayes-UCB": "bayes_ucb"},
        )
        for t in (50, 200)
    },
    "Bernoulli K=5, T=200, Unif[0,1]": (
        bernoulli_bandit_spec(),
        {
            "UCB, text form mu + sqrt(1/N)": "ucb",
            "UCB, Figure 1 form S/(1+N) + 1/sqrt(1+N)": {"name": "ucb", "count_offset": 1.0},
            "TS": "bernoulli_ts",
            "Bayes-UCB": "bayes_ucb",
        },
    ),
    "Linear d=5, A=10, T=200, sigma=1.5, Unif[0,1]^5": (
        linear_bandit_spec(),
        {
            "LinUCB": "linucb",
            "TS (paper's N(0, I) prior)": PAPER_TS,
            "TS (matched prior)": "linear_ts",
            "Bayes-UCB (matched prior)": "linear_bayes_ucb",
            "greedy posterior mean (matched)": "linear_posterior_mean",
            "exact box posterior, sampling (M=256)": {"name": "linear_box_posterior", "rule": "sample"},
            "exact box posterior, Bayes-UCB (M=256)": {"name": "linear_box_posterior", "rule": "quantile"},
            "exact box posterior, greedy mean (M=256)": {"name": "linear_box_posterior", "rule": "mean"},
        },
    ),
}


def main(argv: list[str] | None = None) -> None:
    """Print one Markdown table per setting."""
    parser = doc_parser(__doc__)
    parser.add_argument("--runs", type=int, default=2000, help="instances per algorithm")
    parser.add_argument("--tables", default="", help="comma-separated substrings of the table names (default all)")
    args = parser.parse_args(argv)
    wanted = [w for w in args.tables.split(",") if w]
    for title, (spec, algorithms) in TABLES.items():
        if wanted and not any(w in title for w in wanted):
            continue
        print(f"\n### {title} ({args.runs} instances, seed {SEED})\n")
        print("| algorithm | regret at T | s.e. | time |\n|---|---|---|---|")
        for name, agent in algorithms.items():
            start = time.time()
            total = evaluate_regret(spec, agent, args.runs, seed=SEED, batch_size=1000).sum(axis=1)
            se = total.std(ddof=1) / np.sqrt(total.size)
            print(f"| {name} | {total.mean():.2f} | {se:.2f} | {time.time() - start:.0f}s |", flush=True)


if __name__ == "__main__":
    main()
