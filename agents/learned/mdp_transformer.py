"""A pretrained MDP transformer (:class:`~icrl_gym.models.mdp_transformer.MDPTransformer`) as a tabular-MDP algorithm.

Alg_theta(. | D_{t-1}, s_t) = softmax of the read-out at the state token of step t (Section 4.3);
online rollout appends each step's tokens (and the empty token at an episode's end) to the key/value
cache, by the rollout every learned agent shares (:class:`~agents.learned.rollout.PolicyRollout`).
The model counts the steps itself (h = t mod H, k = t div H at its step t), so an observation at another
step h than the run's (a stale state, acted on again after ``update``) is refused, not answered as if
it were at the model's h.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agents.learned.rollout import PolicyRollout
from icrl_gym.algorithm import MDPAgent, MDPObservation
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.models.policy import EnvInfo


class MDPTransformerAgent(PolicyRollout[MDPObservation], MDPAgent):
    """Batched online rollout of an :class:`~icrl_gym.models.mdp_transformer.MDPTransformer` checkpoint."""

    name = "mdp_transformer"
    kind = CheckpointKind.MDP_TRANSFORMER

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        return EnvInfo(
            num_actions=self.num_actions, horizon=self.horizon, num_states=self.num_states, episodes=self.episodes
        )

    def _model_input(self, observation: MDPObservation) -> torch.Tensor:
        return torch.as_tensor(np.asarray(observation[0], dtype=np.int64), device=self.device)

    def _check_step(self, observation: MDPObservation, step: int) -> None:
        """Refuse an observation at step h other than the run's, h = ``step`` mod H (the model's own count)."""
        h, expected = observation[1], step % self.horizon
        if h != expected:
            raise ValueError(
                f"{type(self).__name__} ({self.checkpoint!r}): the observation is at step h={h}, but the run is at "
                f"step h={expected} of episode {step // self.horizon + 1} (a stale or skipped state): act on the "
                "environment's latest observation, once per step, then update()"
            )

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        return self._rollout_policy((states, h))

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        return self._rollout_act((states, h))

    def _update(
        self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray
    ) -> None:
        self._rollout_update((states, h), actions, rewards)
