"""LinUCB and soft LinUCB(tau) (Appendix E.2; the paper's runs use lambda=1, alpha=2).

At step t with V_t = lambda I + sum_{j<t} a_j a_j^T and ridge estimate w_t = V_t^{-1} sum_{j<t} r_j a_j:

    v_{t,k} = <a_{t,k}, w_t> + alpha * sqrt(a_{t,k}^T V_t^{-1} a_{t,k}),

LinUCB pulls argmax_k v_{t,k}; soft LinUCB(tau) pulls k with probability softmax(v_t / tau)_k.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.bandit.index_agent import IndexAgent
from icrl_gym.envs.validation import MAX_SCALE, check_number
from icrl_gym.estimators.statistics import RidgeStatistics


class LinUCB(IndexAgent):
    """LinUCB with ridge parameter ``lam`` and width ``alpha``; soft when ``temperature > 0``."""

    name = "linucb"
    stats: RidgeStatistics
    ridge_statistics = True

    def __init__(self, alpha: float = 2.0, lam: float = 1.0, temperature: float = 0.0, seed: int | None = None):
        super().__init__(temperature=temperature, seed=seed)
        self.alpha = check_number("alpha", alpha, low=0.0, max_abs=MAX_SCALE)
        self.lam = check_number("lam", lam, low=0.0, strict=True, max_abs=MAX_SCALE)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = RidgeStatistics(self.batch_size, self.dim, self.lam)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """UCB index <a_k, w_t> + alpha * ||a_k||_{V_t^{-1}}, shape (B, A)."""
        w = self.stats.estimate()
        return np.einsum("bad,bd->ba", action_sets, w) + self.alpha * np.sqrt(self.stats.widths(action_sets))

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(action_sets[np.arange(self.batch_size), actions], rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {**super().config(), "alpha": self.alpha, "lam": self.lam}


class SoftLinUCB(LinUCB):
    """Soft LinUCB(tau): LinUCB's index through softmax(v / tau) (the theory's expert)."""

    name = "soft_linucb"

    def __init__(self, temperature: float = 0.1, alpha: float = 2.0, lam: float = 1.0, seed: int | None = None):
        check_number("temperature (soft LinUCB needs one)", temperature, low=0.0, strict=True)
        super().__init__(alpha=alpha, lam=lam, temperature=temperature, seed=seed)
