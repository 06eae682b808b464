"""Finite-horizon Gittins index for Bernoulli bandits: a Bayes-optimal-quality reference.

An arm with Beta(a0 + s, b0 + f) posterior (s successes, f failures) and m pulls left has index

    G(s, f, m) = sup { lambda : V_lambda(s, f, m) > 0 },
    V_lambda(s, f, m) = max(0, p - lambda + p V_lambda(s+1, f, m-1) + (1-p) V_lambda(s, f+1, m-1)),

p = (a0 + s) / (a0 + b0 + s + f), V_lambda(., ., 0) = 0: the retirement reward lambda per step
at which playing the arm for up to m more pulls (stopping at will) stops being worth it
(calibration; Gittins, Glazebrook & Weber, "Multi-armed Bandit Allocation Indices", ch. 7).  At
step t the policy pulls argmax_k G(s_k, f_k, T - t + 1).

The whole table is computed once per (T, prior): for a grid of lambda values one vectorised
backward induction over m gives V_lambda(s, f, m) for every state, and G is located between the
two grid points where V_lambda changes sign (linear interpolation); only the states reachable
with m pulls left (s + f <= T - m + 1) are computed.  The table is cached per process.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from agents.index_agent import IndexAgent
from icrl_gym.statistics import ArmStatistics


@lru_cache(maxsize=4)
def gittins_table(horizon: int, prior_a: float = 1.0, prior_b: float = 1.0, grid: int = 256) -> np.ndarray:
    """G[s, f, m] for s + f <= horizon and 1 <= m <= horizon (float32, shape (T+1, T+1, T+1))."""
    n = horizon + 1
    lam = np.linspace(0.0, 1.0, grid, dtype=np.float32)[:, None, None]  # (L, 1, 1)
    s = np.arange(n, dtype=np.float32)[:, None]
    f = np.arange(n, dtype=np.float32)[None, :]
    p = ((prior_a + s) / (prior_a + prior_b + s + f)).astype(np.float32)[None]  # (1, n, n)
    table = np.zeros((n, n, n), dtype=np.float32)
    v = np.zeros((grid, n + 1, n + 1), dtype=np.float32)  # V_lambda(., ., m - 1), padded at the far edge
    for m in range(1, n):
        r = n - m + 1  # states with s + f <= T - m + 1 can occur with m pulls left: a square is enough
        cont = p[:, :r, :r] - lam + p[:, :r, :r] * v[:, 1 : r + 1, :r] + (1 - p[:, :r, :r]) * v[:, :r, 1 : r + 1]
        # index: the largest grid lambda with V > 0, refined by interpolating V's sign change
        positive = cont > 0
        k = np.clip(positive.sum(axis=0) - 1, 0, grid - 2)  # V is decreasing in lambda
        c0 = np.take_along_axis(cont, k[None], 0)[0]
        c1 = np.take_along_axis(cont, (k + 1)[None], 0)[0]
        step = lam[1, 0, 0] - lam[0, 0, 0]
        frac = np.where(c0 > c1, np.clip(c0 / np.maximum(c0 - c1, 1e-12), 0.0, 1.0), 0.0)
        table[:r, :r, m] = np.where(positive[0], lam[k, 0, 0] + frac * step, 0.0)
        v[:, :r, :r] = np.maximum(cont, 0.0)
    return table


class Gittins(IndexAgent):
    """Pulls the arm with the largest finite-horizon Gittins index (Beta-Bernoulli model)."""

    name = "gittins"

    def __init__(self, horizon: int = 200, prior_a: float = 1.0, prior_b: float = 1.0, seed: int | None = None):
        super().__init__(temperature=0.0, seed=seed)
        self.horizon, self.prior_a, self.prior_b = int(horizon), float(prior_a), float(prior_b)
        self.stats: ArmStatistics | None = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)
        self.table = gittins_table(self.horizon, self.prior_a, self.prior_b)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """G(s_k, f_k, T - t + 1) for every arm."""
        remaining = self.horizon - self.t
        if remaining < 1:
            raise ValueError(f"the Gittins table was built for T={self.horizon} steps")
        s = self.stats.sums.astype(np.int64)
        f = (self.stats.counts - self.stats.sums).astype(np.int64)
        return self.table[s, f, remaining]

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {"name": self.name, "horizon": self.horizon, "prior_a": self.prior_a, "prior_b": self.prior_b}
