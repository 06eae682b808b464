"""UCB for multi-armed (Bernoulli) bandits, Appendix exp_details.

a_t = argmax_k  mu_hat_{t,k} + c * sqrt(1 / N_t(k)), every arm pulled once first (N = 0 gives an
infinite index).  With c = 1 this is the paper's "LinUCB reduces to UCB" baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.index_agent import IndexAgent
from icrl_gym.statistics import ArmStatistics


class UCB(IndexAgent):
    """UCB with bonus ``bonus * sqrt(1 / N_k)``; soft when ``temperature > 0``."""

    name = "ucb"

    def __init__(self, bonus: float = 1.0, temperature: float = 0.0, seed: int | None = None) -> None:
        super().__init__(temperature=temperature, seed=seed)
        self.bonus = float(bonus)
        self.stats: ArmStatistics | None = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """mu_hat_k + bonus * sqrt(1 / N_k); +inf for unpulled arms."""
        counts = self.stats.counts
        with np.errstate(divide="ignore", invalid="ignore"):
            value = self.stats.means() + self.bonus * np.sqrt(1.0 / counts)
        return np.where(counts > 0, value, np.inf)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {**super().config(), "bonus": self.bonus}
