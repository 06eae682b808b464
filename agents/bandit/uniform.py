"""Uniform policy: every arm with probability 1/A at every step (the context algorithm Alg_unif)."""

from __future__ import annotations

import numpy as np

from icrl_gym.algorithm import BanditAgent


class Uniform(BanditAgent):
    """Pulls an arm uniformly at random."""

    name = "uniform"

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return np.full((self.batch_size, self.num_actions), 1.0 / self.num_actions)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self.rng.integers(0, self.num_actions, size=self.batch_size)
