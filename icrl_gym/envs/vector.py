"""What the batched bandit and MDP vector environments share: spaces, seeding and the next-step autoreset."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


class BatchVectorEnv(VectorEnv):
    """B runs of equal length stepped as arrays: they end together and all reset on the next ``step``."""

    metadata: dict[str, Any] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def _init_spaces(self, num_envs: int, observation: spaces.Box, num_actions: int) -> None:
        """B runs with observations ``observation`` and ``Discrete(num_actions)`` actions; no batch yet."""
        self.num_envs = num_envs
        self.single_observation_space = observation
        self.single_action_space = spaces.Discrete(num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._autoreset = False

    def _reseed(self, seed: int | None) -> None:
        """Reseed the generator of new instances when ``seed`` is given; a new batch clears the autoreset."""
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        self._autoreset = False

    def _autoreset_step(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The step after the runs ended: a reset to new instances, zero rewards, nothing terminated."""
        obs, info = self.reset()
        zeros = np.zeros(self.num_envs, dtype=bool)
        return obs, np.zeros(self.num_envs), zeros, zeros.copy(), info
