"""The distribution ratio R(TS, Alg_0) of each context alpha*TS + (1-alpha)*Unif next to the regret gap.

Theorem 6 bounds the gap between the learned algorithm and its (reduced) expert by a
term growing with sqrt(R(expert, context)).  For every shipped distribution-ratio model
(``bernoulli-dpt-alpha{0,0.1,0.5,1}``) this prints the Monte-Carlo estimate of log R(TS, Alg_0)
(icrl_gym.data.diagnostics.distribution_ratio, with its interval and effective sample size; for
alpha = 0 the lower bound E[log w] is printed too, since the estimate is dominated by a few
trajectories), and the regret at T of the model and of TS on the same fresh instances.

    python -m benchmarks.evaluations.distribution_ratio [--ratio-runs 500] [--regret-runs 2000]
"""

from __future__ import annotations

import json

import numpy as np
import torch

from agents import make_agent, ts_uniform_mixture
from agents.learned.transformer import TransformerAgent
from benchmarks.experiments.rows import as_bandit_agent
from icrl_gym.data.diagnostics import distribution_ratio
from icrl_gym.data.pipeline import build_agent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import bernoulli_bandit_spec
from icrl_gym.utils.cli import doc_parser

ALPHAS = ("0", "0.1", "0.5", "1")


def main(argv: list[str] | None = None) -> list[dict]:
    """Estimate log R per alpha and print it beside regret(TF) - regret(TS)."""
    parser = doc_parser(__doc__)
    parser.add_argument("--ratio-runs", type=int, default=500, help="TS trajectories for the ratio")
    parser.add_argument("--regret-runs", type=int, default=2000, help="fresh instances for the regrets")
    parser.add_argument("--seed", type=int, default=10**7, help="seed of the fresh instances")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    spec = bernoulli_bandit_spec()
    # one batch size for all algorithms, so that the seed draws the same instances (paired differences)
    ts_regret = evaluate_regret(spec, "bernoulli_ts", args.regret_runs, seed=args.seed, batch_size=1000).sum(1)
    rows = []
    print("| alpha | log R(TS, Alg_0) [95% CI] | ESS | E[log w] | regret TF | regret TS | TF - TS |")
    print("|---|---|---|---|---|---|---|")
    for alpha in ALPHAS:
        ratio = distribution_ratio(
            as_bandit_agent(make_agent("bernoulli_ts", seed=0)),
            as_bandit_agent(make_agent(ts_uniform_mixture(float(alpha)), seed=0)), spec,
            args.ratio_runs, seed=args.seed + 1,
        )  # fmt: skip
        agent = build_agent(TransformerAgent.pretrained(f"bernoulli-dpt-alpha{alpha}", seed=0))
        tf = evaluate_regret(spec, agent, args.regret_runs, seed=args.seed, batch_size=1000).sum(1)
        gap = tf - ts_regret  # common random numbers: a paired difference
        row = {
            "alpha": float(alpha),
            **{k: ratio[k] for k in ("log_ratio", "log_ratio_se", "ess", "mean_log_weight", "warning")},
            "log_ratio_ci95": [float(x) for x in ratio["log_ratio_ci95"]],
            "regret_tf": float(tf.mean()),
            "regret_tf_se": float(tf.std(ddof=1) / np.sqrt(tf.size)),
            "regret_ts": float(ts_regret.mean()),
            "gap": float(gap.mean()),
            "gap_se": float(gap.std(ddof=1) / np.sqrt(gap.size)),
        }
        rows.append(row)
        lo, hi = row["log_ratio_ci95"]
        ci = f"[{lo:.2f}, {hi:.2f}]" if row["warning"] is None else "(unreliable: few trajectories dominate)"
        print(
            f"| {alpha} | {row['log_ratio']:.2f} {ci} | {row['ess']:.0f} | {row['mean_log_weight']:.2f} | "
            f"{row['regret_tf']:.2f} +- {row['regret_tf_se']:.2f} | {row['regret_ts']:.2f} | "
            f"{row['gap']:.2f} +- {row['gap_se']:.2f} |"
        )
    print(json.dumps(rows))
    return rows


if __name__ == "__main__":
    main()
