"""Empirical mean (Emp), Appendix B.

For t <= A pull each arm once (in index order); afterwards pull the arm with the highest
average reward so far, argmax_k S_k / N_k.  Arms are identified by index, so this is meant for a
fixed action set (for per-step action sets the index of an arm carries no meaning).
"""

from __future__ import annotations

import numpy as np

from agents.bandit.index_agent import IndexAgent
from icrl_gym.estimators.statistics import ArmStatistics


class EmpiricalMean(IndexAgent):
    """Greedy on per-arm average rewards after one pull of every arm."""

    name = "emp"
    stats: ArmStatistics

    def __init__(self, temperature: float = 0.0, seed: int | None = None) -> None:
        super().__init__(temperature=temperature, seed=seed)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """Average reward per arm; +inf for arms never pulled."""
        return np.where(self.stats.counts > 0, self.stats.means(), np.inf)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)
