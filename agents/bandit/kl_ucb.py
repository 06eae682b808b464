"""KL-UCB for Bernoulli bandits (Garivier & Cappe, 2011) -- a stronger baseline than UCB.

    index_k(t) = max { q in [mu_hat_k, 1] : N_k * kl(mu_hat_k, q) <= log(t) + c log(log(t)) },

with kl(p, q) = p log(p/q) + (1-p) log((1-p)/(1-q)) the Bernoulli KL divergence, c = 0 (the
practical choice), every arm pulled once first.  The maximum is found by bisection on the whole
(B, A) batch at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.bandit.index_agent import IndexAgent
from icrl_gym.envs.validation import MAX_SCALE, check_integer, check_number
from icrl_gym.estimators.statistics import ArmStatistics


def bernoulli_kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """kl(p, q) between Bernoulli(p) and Bernoulli(q), elementwise, with 0 log 0 = 0."""
    eps = 1e-15
    p = np.clip(p, eps, 1 - eps)
    q = np.clip(q, eps, 1 - eps)
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


class KLUCB(IndexAgent):
    """KL-UCB with exploration function log(t) + c log(log(t))."""

    name = "kl_ucb"
    stats: ArmStatistics
    reward_bounds = (0.0, 1.0)

    def __init__(self, c: float = 0.0, iterations: int = 30, seed: int | None = None) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.c = check_number("c", c, low=0.0, max_abs=MAX_SCALE)
        self.iterations = check_integer("iterations", iterations)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """Upper confidence bound in KL divergence; +inf for unpulled arms."""
        counts = self.stats.counts
        t = max(self.t + 1, 2)
        budget = np.log(t) + self.c * np.log(max(np.log(t), 1e-12))
        mean = np.nan_to_num(self.stats.means(), nan=0.0)
        lo, hi = mean.copy(), np.ones_like(mean)
        for _ in range(self.iterations):  # bisection: kl(mean, q) is increasing in q >= mean
            mid = 0.5 * (lo + hi)
            inside = counts * bernoulli_kl(mean, mid) <= budget
            lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
        return np.where(counts > 0, lo, np.inf)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {"name": self.name, "c": self.c}
