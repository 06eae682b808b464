"""What the batched bandit and MDP vector environments share: spaces, seeding and the next-step autoreset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from icrl_gym.envs.validation import check_integer, check_memory


def check_env_memory(batch_bytes: int, obs_size: int, num_envs: int | None, what: str, max_memory_gib: float | None):
    """Refuse an environment whose batch (``batch_bytes``) and observation spaces would not fit the memory limit.

    A float32 ``Box`` of n entries keeps low, high and two boolean masks (10 n bytes); a vector
    environment (``num_envs`` given) has the single space and the batched one of num_envs n entries.
    """
    copies = 1 if num_envs is None else num_envs + 1
    check_memory(batch_bytes + 10 * obs_size * copies, what, max_memory_gib)


def check_options(options: Any) -> dict[str, Any]:
    """The ``options`` of ``reset`` as a dict (None: empty); a ``TypeError`` for anything but a mapping."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"reset options must be a dict, got {type(options).__name__} {options!r}")
    return dict(options)


class BatchVectorEnv(VectorEnv):
    """B runs of equal length stepped as arrays: they end together and all reset on the next ``step``."""

    metadata: dict[str, Any] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def _init_spaces(self, num_envs: int, observation: spaces.Box, num_actions: int) -> None:
        """B runs with observations ``observation`` and ``Discrete(num_actions)`` actions; no batch yet."""
        self.num_envs = check_integer("num_envs", num_envs)
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
