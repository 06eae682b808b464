"""UCB for multi-armed (Bernoulli) bandits, Appendix B.

a_t = argmax_k  mu_hat_{t,k} + c * sqrt(1 / N_t(k)), every arm pulled once first (N = 0 gives an
infinite index).  With c = 1 this is the paper's "LinUCB reduces to UCB" baseline (the text's form,
regret about 8.6 at K=5, T=200).

``count_offset`` n0 > 0 gives the smoothed index S_k / (n0 + N_k) + c / sqrt(n0 + N_k), defined for
unpulled arms too; with n0 = 1 it is LinUCB with lambda = 1 on one-hot arms (ridge estimate
S_k / (1 + N_k), width ||e_k||_{V^{-1}} = 1 / sqrt(1 + N_k)), the form whose regret (about 6.7 at
K=5, T=200) matches the UCB curve of the paper's Figure 1 (6.5).  The default n0 = 0 is the text's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.bandit.index_agent import IndexAgent
from icrl_gym.envs.validation import MAX_SCALE, check_number
from icrl_gym.estimators.statistics import ArmStatistics


class UCB(IndexAgent):
    """UCB with bonus ``bonus * sqrt(1 / N_k)``; soft when ``temperature > 0``."""

    name = "ucb"
    stats: ArmStatistics

    def __init__(
        self, bonus: float = 1.0, temperature: float = 0.0, count_offset: float = 0.0, seed: int | None = None
    ) -> None:
        super().__init__(temperature=temperature, seed=seed)
        self.bonus = check_number("bonus", bonus, low=0.0, max_abs=MAX_SCALE)
        self.count_offset = check_number("count_offset", count_offset, low=0.0, max_abs=MAX_SCALE)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """mu_hat_k + bonus * sqrt(1 / N_k), +inf for unpulled arms (or the smoothed index, count_offset > 0)."""
        counts = self.stats.counts
        if self.count_offset > 0:
            smoothed = self.count_offset + counts
            return self.stats.sums / smoothed + self.bonus / np.sqrt(smoothed)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = self.stats.means() + self.bonus * np.sqrt(1.0 / counts)
        return np.where(counts > 0, value, np.inf)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        out = {**super().config(), "bonus": self.bonus}
        return out if self.count_offset == 0 else {**out, "count_offset": self.count_offset}
