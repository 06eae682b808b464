r"""The skewed sets against the exact family lines: a two-armed Bernoulli frontier with the split prior.

The generalization grid's skewed sets put half of the arms' means in U[1/2, 1] and the other half in U[0, 1/2]
(the *skewed* set: the first arms high; the *reversed* set: the first arms low), and the widened Bernoulli
generalist is judged there against the finite-horizon Gittins index told U[0, 1].  At K = 2 the *split* prior
is the even mixture of the two sets: one arm ~ U[1/2, 1], the other ~ U[0, 1/2], which one uniform.  For every
policy P, max(Reg_skewed(P), Reg_reversed(P)) >= Reg_split(P) = (Reg_skewed(P) + Reg_reversed(P)) / 2, and a
policy that treats the arms alike has Reg_skewed = Reg_reversed = Reg_split.

The mixture DP of :mod:`icrl_gym.training.split_prior` holds the 16 Beta(a, b) priors of the family
(arms iid, weight lambda each) and the two skewed priors (weight 1/2 each).  Its Bayes-optimal policy P_lambda
minimises Reg_split(P) + lambda sum_j Reg_j(P) over every policy that is not told the prior, so the pairs
(sum_j Reg_j(P_lambda), Reg_split(P_lambda)) trace the lower-left frontier of what such a policy can have on the
family's exact line (the sum as a multiple of the family-Bayes DP's, S_F) and on the skewed line (Reg_split as a
multiple of the Gittins told U[0, 1]'s); and for every P with sum_j Reg_j(P) <= c S_F,

    Reg_split(P) >= Reg_split(P_lambda) + lambda (sum_j Reg_j(P_lambda) - c S_F)       (any lambda >= 0),

a certificate whenever the right side exceeds the skewed line.  Ties are broken uniformly, in the DP and in the
Gittins policy.  Each weighting is one backward pass over the C(T + 4, 4) count states (about 25 s at T = 100 and
5 min at T = 200 on one core, with 18 components).  ``--shares`` adds the DP of the generalist trainer's exact
batches (``exact_split_share`` s: weight s on the split prior, (1 - s) / 16 on each Beta prior; lambda = (1 - s) /
(16 s) above) and ``--model`` a Bernoulli generalist's greedy play, exactly (a count-state policy).

The sets themselves are judged per set, and the agents break their ties to the first arm: the Gittins agent, the
index agents and a learned policy's greedy play (:func:`~icrl_gym.agent_base.logits_action`).  A policy that
treats the arms alike then still differs between the two sets, by its first pull and every later tie, the
skewed set (high arm first) gaining what the reversed one pays.  ``--first-arm-ties`` plays the Gittins policy and
the DPs so, and the skewed and reversed columns are then each set against the Gittins told U[0, 1] on that set,
as the Monte-Carlo sets (:mod:`benchmarks.evaluations.bernoulli_skewed_sets`) measure them.  A model always plays
its agent's rule.  Run as::

    python -m benchmarks.evaluations.bernoulli_split_frontier --horizon 200 --lambdas 0.2 0.5 --out DIR
    python -m benchmarks.evaluations.bernoulli_split_frontier --horizon 200 --lambdas --shares 0.2 0.25 \
        --model bernoulli-generalist-family --first-arm-ties --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.experiments.bernoulli_frontier.run import gittins_policy, load_generalist, weights_sha256
from icrl_gym.agent_base import first_argmax, one_hot
from icrl_gym.estimators.gittins import cached_gittins_table
from icrl_gym.training.exact_bernoulli import family_bayes_regrets, generalist_policy
from icrl_gym.training.split_prior import SplitMixture, SplitPolicy, split_weights
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.provenance import software_environment


def gittins_told_policy(horizon: int, cache: str, first_arm_ties: bool = False) -> SplitPolicy:
    """The finite-horizon Gittins index told U[0, 1]: its maximisers played uniformly, or the first of them.

    The uniform one is the frontier's :func:`~benchmarks.experiments.bernoulli_frontier.run.gittins_policy` with the
    one table; the first-arm one plays as the ``gittins`` agent does (exact ties to the first arm).
    """
    table = cached_gittins_table(horizon, cache, 1.0, 1.0)
    if not first_arm_ties:
        told = gittins_policy([table], horizon)
        return lambda n, x: told(n, x)[:, 0]
    return lambda n, x: one_hot(first_argmax(table.lookup(x[:, [0, 2]], x[:, [1, 3]], np.int64(horizon - n)), 0.0), 2)


def model_policy(name: str, horizon: int) -> SplitPolicy:
    """A Bernoulli generalist's greedy play (a shipped name or a checkpoint path) as a two-armed count-state policy."""
    played = generalist_policy(load_generalist(name), horizon, 1)
    return lambda n, x: played(n, x)[:, 0, :]


def split_frontier(
    horizon: int,
    lambdas: Sequence[float],
    cache: str = "runs/gittins-cache",
    shares: Sequence[float] = (),
    models: Sequence[str] = (),
    first_arm_ties: bool = False,
) -> dict[str, Any]:
    """The family-Bayes DP, the Gittins told U[0, 1] and each policy on the K = 2 lines (module docstring).

    Each row holds the sum and the worst prior as multiples of the family-Bayes DP's, which prior is the worst
    (``worst_prior_beta``) and every prior's ratio (``prior_ratios``, in the order of ``beta_priors``), and the
    split prior's and each set's regret.
    """
    mix = SplitMixture(horizon)
    family = family_bayes_regrets(2, horizon, tuple(mix.family))
    s_f, members = float(family.sum()), len(mix.family)

    def row(regret: np.ndarray) -> dict[str, Any]:
        ratios = regret[:members] / family
        return {
            "family_sum": float(regret[:members].sum() / s_f),
            "worst_prior": float(ratios.max()),
            "worst_prior_beta": list(mix.family[int(ratios.argmax())]),
            "prior_ratios": [float(r) for r in ratios],
            "split": float(regret[members:].mean()),
            "skewed": float(regret[members]),
            "reversed": float(regret[members + 1]),
        }

    gittins = row(mix.regrets(policy=gittins_told_policy(horizon, cache, first_arm_ties)))
    rows: dict[str, dict[str, Any]] = {"Gittins told U[0, 1]": gittins}
    for lam in lambdas:
        weights = np.array([lam] * members + [0.5, 0.5])
        rows[f"lambda={lam:g}"] = row(mix.regrets(weights=weights, first_arm_ties=first_arm_ties))
    for share in shares:
        rows[f"share={share:g}"] = row(mix.regrets(weights=split_weights(share), first_arm_ties=first_arm_ties))
    for name in models:
        rows[f"model {name}"] = row(mix.regrets(policy=model_policy(name, horizon)))
    for values in rows.values():
        for key in ("split", "skewed", "reversed"):
            values[f"{key}_ratio"] = values[key] / gittins[key]
    return {
        "horizon": horizon,
        "first_arm_ties": first_arm_ties,
        "family_bayes_sum": s_f,
        "beta_priors": [list(pair) for pair in mix.family],
        "models": {name: weights_sha256(name) for name in models},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Compute the frontier, print it and write ``OUT/split-frontier.json`` and ``.md`` with the configuration."""
    parser: argparse.ArgumentParser = doc_parser(__doc__)
    parser.add_argument("--horizon", type=int, default=100, help="T (the states grow like T^4 / 24)")
    parser.add_argument("--lambdas", type=float, nargs="*", default=[0.2, 0.5, 1e6], help="weights of each Beta prior")
    parser.add_argument("--shares", type=float, nargs="*", default=[], help="the trainer's exact_split_share values")
    parser.add_argument("--model", action="append", default=[], help="a Bernoulli generalist (name or path; repeat)")
    parser.add_argument(
        "--first-arm-ties", action="store_true", help="the Gittins policy and the DPs break ties to the first arm"
    )
    parser.add_argument("--cache", default="runs/gittins-cache", help="where the Gittins table is kept")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    if args.horizon < 1 or any(not lam >= 0 for lam in args.lambdas):
        parser.error("--horizon must be >= 1 and every --lambdas value >= 0")
    if any(not 0 <= share <= 1 for share in args.shares):
        parser.error(f"every --shares value must be in [0, 1], got {args.shares}")
    start = time.time()
    result = split_frontier(args.horizon, args.lambdas, args.cache, args.shares, args.model, args.first_arm_ties)
    result |= {"config": {k: v for k, v in vars(args).items() if k != "out"}, "seconds": round(time.time() - start)}
    result["software"] = software_environment()
    lines = [
        f"K = 2, T = {args.horizon}; family-Bayes DP sum S_F = {result['family_bayes_sum']:.4f}; ties "
        + ("to the first arm" if args.first_arm_ties else "uniform (a model: its agent's rule)"),
        "",
        "| policy | sum / S_F | worst prior / family-Bayes DP | split prior | skewed set | reversed set |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in result["rows"].items():
        sets = " | ".join(f"{r[key]:.4f} ({r[f'{key}_ratio']:.4f}x)" for key in ("split", "skewed", "reversed"))
        worst = "Beta({:g}, {:g})".format(*r["worst_prior_beta"])
        lines.append(f"| {name} | {r['family_sum']:.4f}x | {r['worst_prior']:.3f}x, {worst} | {sets} |")
    lines += ["", "(each set's regret and its multiple of the Gittins told U[0, 1]'s on it)"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "split-frontier.json", json.dumps(result, indent=1).encode())
    atomic_write_bytes(out / "split-frontier.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
