"""The Bernoulli generalist (:class:`~icrl_gym.models.generalist.GeneralistTransformer`) as an algorithm: any K and T.

The model reads the raw trajectory through its cache and scores the K arms at step t from the
horizon features of step t; K comes from the runs' action sets and T from the environment
(:func:`~icrl_gym.algorithm.resolve_horizon`: the reset info, its model, then the constructor's
``horizon=``).  ``greedy=True`` (default; the model imitates the deterministic Gittins policy) takes
the argmax, ``greedy=False`` samples from softmax(logits).

It was trained on Bernoulli arms (one-hot action sets, rewards in {0, 1}) only: it refuses a linear
bandit (non-one-hot arms, Gaussian rewards) with a ``ValueError``, at reset when the environment
states its model (the rollout's :func:`~icrl_gym.checkpoint.check_compatible`), else at the first
action.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agents.learned.rollout import BanditRollout
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.models.policy import EnvInfo


class GeneralistAgent(BanditRollout):
    """Batched online rollout of a :class:`~icrl_gym.models.generalist.GeneralistTransformer` on Bernoulli bandits."""

    name = "generalist"
    kind = CheckpointKind.GENERALIST_TRANSFORMER
    greedy_default = True
    default_fields = ("horizon",)
    binary_rewards = True

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        horizon = resolve_horizon(info, self.defaults.get("horizon"), "the generalist transformer")
        return EnvInfo(num_actions=self.num_actions, horizon=horizon, dim=self.dim)

    def _model_input(self, observation: np.ndarray) -> torch.Tensor:
        eye = np.eye(self.num_actions, self.dim)
        if self.dim != self.num_actions or not np.array_equal(observation, np.broadcast_to(eye, observation.shape)):
            raise ValueError("the generalist transformer plays one-hot arms e_1..e_K only (not a linear bandit)")
        return super()._model_input(observation)
