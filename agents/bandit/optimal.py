"""Optimal (oracle) policy: a*_t = argmax_k <a_{t,k}, w*>, the DPT label (regret 0 by definition).

It reads w* from the environment's reset ``info`` and so is not a bandit algorithm in the
paper's sense; it is the expert of the DPT pretraining mode (Section 1 of SPEC; in the paper's
Section 3.2 a transformer pretrained on these labels learns Thompson sampling).
"""

from __future__ import annotations

import numpy as np

from agents.bandit.index_agent import IndexAgent


class Optimal(IndexAgent):
    """Pulls the arm with the highest expected reward under the true w*."""

    name = "optimal"
    w_star: np.ndarray

    def __init__(self, temperature: float = 0.0, seed: int | None = None) -> None:
        super().__init__(temperature=temperature, seed=seed)

    def _reset(self, w_star: np.ndarray | None) -> None:
        if w_star is None:
            raise ValueError("the optimal policy needs the instance: reset it with the env's info (w_star)")
        self.w_star = w_star

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """Expected rewards <a_k, w*>."""
        return np.einsum("bad,bd->ba", action_sets, self.w_star)
