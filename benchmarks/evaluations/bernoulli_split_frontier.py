r"""The skewed sets against the exact family lines: a two-armed Bernoulli frontier with the split prior.

The generalization grid's skewed sets put half of the arms' means in U[1/2, 1] and the other half in U[0, 1/2]
(the *skewed* set: the first arms high; the *reversed* set: the first arms low), and the widened Bernoulli
generalist is judged there against the finite-horizon Gittins index told U[0, 1].  At K = 2 the *split* prior
is the even mixture of the two sets: one arm ~ U[1/2, 1], the other ~ U[0, 1/2], which one uniform.  For every
policy P, max(Reg_skewed(P), Reg_reversed(P)) >= Reg_split(P) = (Reg_skewed(P) + Reg_reversed(P)) / 2, and a
policy that treats the arms alike has Reg_skewed = Reg_reversed = Reg_split.

Under a U[l, h] prior an arm's posterior after s successes and f failures is Beta(s + 1, f + 1) truncated to
[l, h], so its evidence and predictive are ratios of incomplete Beta functions (I_x the regularised one, B the
Beta function):

    int_l^h p^s (1 - p)^f dp / (h - l) = B(s + 1, f + 1) [I_h(s + 1, f + 1) - I_l(s + 1, f + 1)] / (h - l),
    P(r = 1 | s, f) = (s + 1) / (s + f + 2) [I_h - I_l](s + 2, f + 1) / [I_h - I_l](s + 1, f + 1)

(the U[1/2, 1] masses from the upper tail, so that no difference of two numbers near 1 is taken).  The counts
stay a sufficient statistic for a mixture of such product priors, and the count-state DP of
:mod:`icrl_gym.training.exact_bernoulli` extends to the mixture of the 16 Beta(a, b) priors of the family
(arms iid, weight lambda each) and the two skewed priors (weight 1/2 each).  Its Bayes-optimal policy P_lambda
minimises Reg_split(P) + lambda sum_j Reg_j(P) over every policy that is not told the prior, so the pairs
(sum_j Reg_j(P_lambda), Reg_split(P_lambda)) trace the lower-left frontier of what such a policy can have on the
family's exact line (the sum as a multiple of the family-Bayes DP's, S_F) and on the skewed line (Reg_split as a
multiple of the Gittins told U[0, 1]'s); and for every P with sum_j Reg_j(P) <= c S_F,

    Reg_split(P) >= Reg_split(P_lambda) + lambda (sum_j Reg_j(P_lambda) - c S_F)       (any lambda >= 0),

a certificate whenever the right side exceeds the skewed line.  Ties are broken uniformly, in the DP and in the
Gittins policy.  Each weighting is one backward pass over the C(T + 4, 4) count states (about 25 s at T = 100 and
5 min at T = 200 on one core, with 18 components).  Run as::

    python -m benchmarks.evaluations.bernoulli_split_frontier --horizon 200 --lambdas 0.2 0.5 --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import betainc, betaincc, betaln

from agents.bandit.bernoulli_bayes_optimal import CompositionRanker, colex_combinations, compositions, successors
from agents.bandit.family_gittins import BETA_FAMILY
from benchmarks.experiments.bernoulli_frontier.run import gittins_policy
from icrl_gym.estimators.gittins import cached_gittins_table
from icrl_gym.training.exact_bernoulli import best_totals, family_bayes_regrets
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.provenance import software_environment

ArmTables = tuple[np.ndarray, np.ndarray]
"""One arm's prior as tables over its counts (s, f), s, f <= T: the log-evidence and the predictive P(r = 1)."""

SplitPolicy = Callable[[int, np.ndarray], np.ndarray]
"""(layer n, states (N, 4)) -> action distribution (N, 2)."""

SPLIT_BEST_MEAN = 0.75
"""E[max(p_1, p_2)] under the split prior: the high arm's mean, E[U[1/2, 1]]."""


def beta_arm(a: float, b: float, horizon: int) -> ArmTables:
    """Beta(a, b): log B(a + s, b + f) - log B(a, b) and (a + s) / (a + b + s + f)."""
    s, f = np.arange(horizon + 1.0)[:, None], np.arange(horizon + 1.0)[None, :]
    return betaln(a + s, b + f) - betaln(a, b), (a + s) / (a + b + s + f)


def half_uniform_arm(high: bool, horizon: int) -> ArmTables:
    """U[1/2, 1] (``high``) or U[0, 1/2]: the truncated-Beta evidence and predictive of the module docstring."""
    s, f = np.arange(horizon + 1.0)[:, None], np.arange(horizon + 1.0)[None, :]

    def mass(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # P_{Beta(x, y)}(the half)
        return betaincc(x, y, 0.5) if high else betainc(x, y, 0.5)

    inside = mass(s + 1, f + 1)
    return betaln(s + 1, f + 1) + np.log(inside) + np.log(2.0), (s + 1) / (s + f + 2) * mass(s + 2, f + 1) / inside


class SplitMixture:
    """The 16 Beta priors of the family (arms iid) and the two skewed priors, on two arms, over T steps."""

    def __init__(self, horizon: int, family: Sequence[tuple[float, float]] = BETA_FAMILY) -> None:
        self.horizon, self.family = horizon, [(float(a), float(b)) for a, b in family]
        high, low = half_uniform_arm(True, horizon), half_uniform_arm(False, horizon)
        betas = [beta_arm(a, b, horizon) for a, b in self.family]
        self.components: list[tuple[ArmTables, ArmTables]] = [(t, t) for t in betas] + [(high, low), (low, high)]
        self.best = np.concatenate([best_totals(2, horizon, tuple(self.family)), [SPLIT_BEST_MEAN * horizon] * 2])
        self._ranker = CompositionRanker(horizon + 1, 4)
        self._bars = colex_combinations(horizon + 2, 3)

    def _log_evidence(self, x: np.ndarray) -> np.ndarray:
        """Per component, the log-evidence (N, C) of states x."""
        s, f = x[:, 0::2], x[:, 1::2]
        return np.stack([arms[0][0][s[:, 0], f[:, 0]] + arms[1][0][s[:, 1], f[:, 1]] for arms in self.components], 1)

    def _predictive(self, x: np.ndarray) -> np.ndarray:
        """Per component, the arms' predictive P(r = 1) (N, C, 2) at states x."""
        s, f = x[:, 0::2], x[:, 1::2]
        return np.stack([np.stack([arms[k][1][s[:, k], f[:, k]] for k in (0, 1)], 1) for arms in self.components], 1)

    def regrets(self, weights: np.ndarray | None = None, policy: SplitPolicy | None = None) -> np.ndarray:
        """Per component (C,), the Bayes regret of ``policy`` or of the mixture's Bayes-optimal policy.

        ``weights``: the mixture's (unnormalised) prior over the components, whose Bayes-optimal policy is played
        (one backward pass; ties broken uniformly).
        """
        if (weights is None) == (policy is None):
            raise ValueError("give the mixture's weights (its Bayes-optimal policy) or a policy, not both")
        log_prior = None if weights is None else np.log(np.maximum(np.asarray(weights, dtype=np.float64), 1e-300))
        values = np.zeros((comb(self.horizon + 3, 3), len(self.components)))
        for n in range(self.horizon - 1, -1, -1):
            x = compositions(self._bars, n)
            pred = self._predictive(x)
            q = np.empty((len(x), len(self.components), 2))
            for k in (0, 1):
                r_s, r_f = (self._ranker.rank(y) for y in successors(x, k))
                q[:, :, k] = pred[:, :, k] * (1.0 + values[r_s]) + (1.0 - pred[:, :, k]) * values[r_f]
            if policy is None:
                assert log_prior is not None
                log_w = self._log_evidence(x) + log_prior
                w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
                mixed = (w[:, :, None] * q).sum(axis=1) / w.sum(axis=1, keepdims=True)
                act = uniform_over_maximisers(mixed)
            else:
                act = policy(n, x)
            values = (q * act[:, None, :]).sum(axis=2)
        return self.best - values[0]


def uniform_over_maximisers(scores: np.ndarray, tolerance: float = 1e-12) -> np.ndarray:
    """(N, K) -> the uniform distribution over each row's maximisers (within ``tolerance``)."""
    top = scores >= scores.max(axis=1, keepdims=True) - tolerance
    return top / top.sum(axis=1, keepdims=True)


def gittins_uniform_policy(horizon: int, cache: str) -> SplitPolicy:
    """The finite-horizon Gittins index told U[0, 1], its maximisers played uniformly.

    The frontier's :func:`~benchmarks.experiments.bernoulli_frontier.run.gittins_policy` with the one table.
    """
    told = gittins_policy([cached_gittins_table(horizon, cache, 1.0, 1.0)], horizon)
    return lambda n, x: told(n, x)[:, 0]


def split_frontier(horizon: int, lambdas: Sequence[float], cache: str = "runs/gittins-cache") -> dict[str, Any]:
    """The family-Bayes DP, the Gittins told U[0, 1] and each P_lambda on the three K = 2 lines (module docstring)."""
    mix = SplitMixture(horizon)
    family = family_bayes_regrets(2, horizon, tuple(mix.family))
    s_f, members = float(family.sum()), len(mix.family)

    def row(regret: np.ndarray) -> dict[str, float]:
        return {
            "family_sum": float(regret[:members].sum() / s_f),
            "worst_prior": float((regret[:members] / family).max()),
            "split": float(regret[members:].mean()),
        }

    gittins = row(mix.regrets(policy=gittins_uniform_policy(horizon, cache)))
    rows: dict[str, dict[str, float]] = {"Gittins told U[0, 1]": gittins}
    for lam in lambdas:
        rows[f"lambda={lam:g}"] = row(mix.regrets(weights=np.array([lam] * members + [0.5, 0.5])))
    for values in rows.values():
        values["split_ratio"] = values["split"] / gittins["split"]
    return {"horizon": horizon, "family_bayes_sum": s_f, "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Compute the frontier, print it and write ``OUT/split-frontier.json`` and ``.md`` with the configuration."""
    parser: argparse.ArgumentParser = doc_parser(__doc__)
    parser.add_argument("--horizon", type=int, default=100, help="T (the states grow like T^4 / 24)")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.2, 0.5, 1e6], help="weights of each Beta prior")
    parser.add_argument("--cache", default="runs/gittins-cache", help="where the Gittins table is kept")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    if args.horizon < 1 or any(not lam >= 0 for lam in args.lambdas):
        parser.error("--horizon must be >= 1 and every --lambdas value >= 0")
    start = time.time()
    result = split_frontier(args.horizon, args.lambdas, args.cache)
    result |= {"config": {k: v for k, v in vars(args).items() if k != "out"}, "seconds": round(time.time() - start)}
    result["software"] = software_environment()
    lines = [
        f"K = 2, T = {args.horizon}; family-Bayes DP sum S_F = {result['family_bayes_sum']:.4f}",
        "",
        "| policy | sum / S_F | worst prior / family-Bayes DP | split prior / Gittins told U[0, 1] |",
        "|---|---|---|---|",
    ]
    for name, r in result["rows"].items():
        lines.append(f"| {name} | {r['family_sum']:.4f}x | {r['worst_prior']:.3f}x | {r['split_ratio']:.4f}x |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "split-frontier.json", json.dumps(result, indent=1).encode())
    atomic_write_bytes(out / "split-frontier.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
