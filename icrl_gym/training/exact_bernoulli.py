r"""Exact Bayes regret of count-state policies on K-armed Bernoulli bandits, over a family of Beta priors.

Under prior j the arms' means are iid Beta(a_j, b_j); after the history the counts (s_k, f_k) of
successes and failures of every arm are a sufficient statistic, and arm k pays 1 with probability
(a_j + s_k) / (a_j + b_j + s_k + f_k).  A policy P whose action depends only on the counts and the
step n (a *count-state policy*: a DP table, an index, or the Bernoulli generalist played greedily
through its grouped cache) has the expected total reward V_j(P) of one backward pass over the count
states (no sampling):

    V_j(x) = 0 if n = T,   V_j(x) = sum_k P(k | x) [p_jk (1 + V_j(x + e_{s_k})) + (1 - p_jk) V_j(x + e_{f_k})],

and its Bayes regret is Reg_j(P) = T E_j[max_k p_k] - V_j(P), with E_j[max_k p_k] = int_0^1 (1 - F_j(x)^K) dx
by quadrature.  The family-Bayes policy F (:func:`~agents.bandit.bernoulli_bayes_optimal.family_bayes_table`,
uniform over the family) minimises sum_j Reg_j(P) over every policy that is not told j (the
Bayes-optimality of Section 4 with the family as the prior), so

    sum_j Reg_j(P) / sum_j Reg_j(F) >= 1

for every such policy, with equality only for a policy as good as F on average: the noise-free
validation score of :func:`family_regret_ratio` (the fine-tuning's ``validation="exact_family"``).
Layer n holds C(n + 2K - 1, 2K - 1) states, so the pass costs about T^(2K) / (2K)! states: at K = 2
it is exact up to T = 200 or so.  The frontier (``benchmarks/experiments/bernoulli_frontier``) uses
the same routines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import comb

import numpy as np
import torch
from scipy import integrate, stats

from agents.bandit.bernoulli_bayes_optimal import (
    CompositionRanker,
    FamilyPredictive,
    colex_combinations,
    compositions,
    family_bayes_table,
    successors,
)
from agents.bandit.family_gittins import BETA_FAMILY
from icrl_gym.agent_base import TIE_TOLERANCE, first_argmax
from icrl_gym.models.generalist import GeneralistTransformer

Policy = Callable[[int, np.ndarray], np.ndarray]
"""(layer n, states x (N, 2K) in rank order) -> action distribution (N, J, K), one per prior j."""


MODEL_CHUNK = 65_536
"""Count states the Bernoulli generalist scores at once when it is evaluated exactly (:func:`generalist_policy`)."""


def expected_best_mean(a: float, b: float, num_arms: int) -> float:
    """E[max_k p_k] for K iid Beta(a, b) means: int_0^1 (1 - F(x)^K) dx."""
    beta = stats.beta(a, b)
    return float(integrate.quad(lambda x: 1.0 - beta.cdf(x) ** num_arms, 0.0, 1.0, limit=200, epsabs=1e-12)[0])


def table_policy(tables: Sequence[np.ndarray], num_priors: int) -> Policy:
    """A deterministic DP action table (per layer, over ranked states) played whatever the prior."""

    def policy(n: int, x: np.ndarray) -> np.ndarray:
        one_hot = np.eye(x.shape[1] // 2)[tables[n].astype(np.int64)]  # (N, K)
        return np.broadcast_to(one_hot[:, None, :], (len(x), num_priors, one_hot.shape[1]))

    return policy


def generalist_logits_at(
    model: GeneralistTransformer, successes: np.ndarray, failures: np.ndarray, step: int, horizon: int
) -> np.ndarray:
    """The Bernoulli generalist's logits (N, K) at step ``step`` of T = ``horizon`` from the arms' counts (N, K).

    With its grouped cache the model's logits are a function of the counts (s_k, f_k) of every arm
    and of (t, T) only (:mod:`icrl_gym.models.generalist`): the model decides from the counts.
    """
    device = next(model.parameters()).device
    counts = torch.as_tensor(np.stack([failures, successes], axis=-1), dtype=torch.float32, device=device)
    return model.decide_counts(counts, counts.sum(dim=1), step, horizon).cpu().numpy()  # counts: (N, K, 2)


def generalist_policy(model: GeneralistTransformer, horizon: int, num_priors: int, chunk: int = MODEL_CHUNK) -> Policy:
    """The Bernoulli generalist played greedily (the argmax of its logits, as its agent plays), exactly.

    Its greedy play is a deterministic count-state policy (:func:`generalist_logits_at`), whose near ties go to
    the first arm as in the agent's play (:func:`~icrl_gym.agent_base.logits_action`).
    """

    def policy(n: int, x: np.ndarray) -> np.ndarray:
        arms = x.shape[1] // 2
        actions = np.empty(len(x), dtype=np.int64)
        for start in range(0, len(x), chunk):
            part = x[start : start + chunk]
            logits = generalist_logits_at(model, part[:, 0::2], part[:, 1::2], n, horizon)
            actions[start : start + chunk] = first_argmax(logits, TIE_TOLERANCE)
        one_hot = np.eye(arms)[actions]
        return np.broadcast_to(one_hot[:, None, :], (len(x), num_priors, arms))

    return policy


def policy_values(
    num_arms: int, horizon: int, priors: np.ndarray, policies: Mapping[str, Policy | None]
) -> dict[str, np.ndarray]:
    """V_j(P), shape (J,), for each policy (None: the told Bayes-optimal value max over P, per prior).

    One backward pass over the count states; under prior j, arm k pays 1 with probability
    (a_j + s_k) / (a_j + b_j + s_k + f_k) and V_j(x) = sum_k P(k | x) [p (1 + V_j(x + e_s)) + (1 - p) V_j(x + e_f)].
    """
    priors = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    model = FamilyPredictive(priors, np.ones(len(priors)), 0)
    m = 2 * num_arms
    ranker = CompositionRanker(horizon + 1, m)
    bars = colex_combinations(horizon + m - 2, m - 1)
    size = comb(horizon + m - 1, m - 1)
    values = {name: np.zeros((size, len(priors))) for name in policies}
    for n in range(horizon - 1, -1, -1):
        x = compositions(bars, n)
        q = {name: np.empty((len(x), len(priors), num_arms)) for name in policies}
        for k in range(num_arms):
            p = model.arm_means(x, k)  # (N, J)
            r_s, r_f = (ranker.rank(y) for y in successors(x, k))
            for name, v in values.items():
                q[name][:, :, k] = p * (1.0 + v[r_s]) + (1.0 - p) * v[r_f]
        for name, policy in policies.items():
            values[name] = q[name].max(axis=2) if policy is None else (q[name] * policy(n, x)).sum(axis=2)
    return {name: v[0] for name, v in values.items()}


@functools.lru_cache(maxsize=4)
def family_bayes_regrets(num_arms: int, horizon: int, priors: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Reg_j(F) (J,): the exact regret under each prior of the family-Bayes policy F (uniform over the family)."""
    grid = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    tables, _ = family_bayes_table(num_arms, horizon, grid)
    values = policy_values(num_arms, horizon, grid, {"family": table_policy(tables, len(grid))})["family"]
    return best_totals(num_arms, horizon, priors) - values


@functools.lru_cache(maxsize=4)
def best_totals(num_arms: int, horizon: int, priors: tuple[tuple[float, float], ...]) -> np.ndarray:
    """T E_j[max_k p_k] (J,): the expected total of the best arm under each prior."""
    return np.array([horizon * expected_best_mean(a, b, num_arms) for a, b in priors])


@dataclass(frozen=True)
class FamilyRegret:
    """A model's exact regret Reg_j (J,) per prior next to the family-Bayes policy's, F_j."""

    model: np.ndarray
    family_bayes: np.ndarray

    @property
    def ratio(self) -> float:
        """sum_j Reg_j(model) / sum_j Reg_j(F) (>= 1 for every policy not told the prior)."""
        return float(self.model.sum() / self.family_bayes.sum())

    @property
    def worst(self) -> float:
        """max_j Reg_j(model) / Reg_j(F)."""
        return float((self.model / self.family_bayes).max())


def family_regret_ratio(
    model: GeneralistTransformer,
    num_arms: int = 2,
    horizon: int = 50,
    priors: Sequence[tuple[float, float]] = BETA_FAMILY,
    chunk: int = MODEL_CHUNK,
) -> FamilyRegret:
    """The Bernoulli generalist's exact regret, played greedily, per prior of the family and the family-Bayes DP's.

    Reg_j(model) = T E_j[max_k p_k] - V_j(model) by :func:`policy_values` with :func:`generalist_policy`;
    the family-Bayes regrets are computed once per (K, T, family) and cached.
    """
    family = tuple((float(a), float(b)) for a, b in priors)
    grid = np.asarray(family, dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        values = policy_values(num_arms, horizon, grid, {"model": generalist_policy(model, horizon, len(grid), chunk)})
    finally:
        model.train(was_training)
    return FamilyRegret(
        best_totals(num_arms, horizon, family) - values["model"], family_bayes_regrets(num_arms, horizon, family)
    )
