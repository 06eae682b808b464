"""Bayes-UCB for Bernoulli bandits (Kaufmann, Cappe & Garivier, 2012).

With Beta(1, 1) priors the index of arm k at step t is the quantile of its posterior

    index_k(t) = Q(1 - 1 / (t (log T)^c); Beta(1 + S_k, 1 + N_k - S_k)),

c = 0 (the practical choice of the paper); a_t = argmax_k index_k(t).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import betaincinv

from agents.index_agent import IndexAgent
from icrl_gym.statistics import ArmStatistics


class BayesUCB(IndexAgent):
    """Posterior-quantile index with Beta(prior_a, prior_b) priors."""

    name = "bayes_ucb"

    def __init__(
        self, c: float = 0.0, horizon: int = 200, prior_a: float = 1.0, prior_b: float = 1.0, seed: int | None = None
    ) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.c, self.horizon = float(c), int(horizon)
        self.prior_a, self.prior_b = float(prior_a), float(prior_b)
        self.stats: ArmStatistics | None = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """Posterior quantile of level 1 - 1/(t (log T)^c)."""
        t = self.t + 1
        level = 1.0 - 1.0 / (t * max(np.log(self.horizon), 1.0) ** self.c)
        a = self.prior_a + self.stats.sums
        b = self.prior_b + self.stats.counts - self.stats.sums
        return betaincinv(a, b, level)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {
            "name": self.name,
            "c": self.c,
            "horizon": self.horizon,
            "prior_a": self.prior_a,
            "prior_b": self.prior_b,
        }
