"""The uniform tabular-MDP policy: every action with probability 1/A (a floor every algorithm must beat)."""

from __future__ import annotations

import numpy as np

from icrl_gym.algorithm import MDPAgent


class MDPUniform(MDPAgent):
    """Every action with probability 1/A."""

    name = "mdp_uniform"

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        return np.full((self.batch_size, self.num_actions), 1.0 / self.num_actions)
