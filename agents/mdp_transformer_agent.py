"""A pretrained MDP transformer (icrl_gym.models.mdp_transformer) as a tabular-MDP algorithm.

Alg_theta(. | D_{t-1}, s_t) = softmax of the read-out at the state token of step t; online rollout
appends each step's tokens (and the empty token at an episode's end) to the key/value cache, by the
rollout shared with the bandit model (:class:`~agents.transformer_agent.TransformerRollout`).
``greedy=False`` samples from the policy, ``greedy=True`` takes its argmax.
"""

from __future__ import annotations

import numpy as np
import torch

from agents.transformer_agent import TransformerRollout
from icrl_gym.algorithm import MDPAgent, MDPObservation
from icrl_gym.checkpoint import CheckpointKind


class MDPTransformerAgent(TransformerRollout[MDPObservation], MDPAgent):
    """Batched online rollout of an :class:`icrl_gym.models.mdp_transformer.MDPTransformer` checkpoint."""

    name = "mdp_transformer"
    kind = CheckpointKind.MDP_TRANSFORMER

    def _model_input(self, observation: MDPObservation) -> torch.Tensor:
        return torch.as_tensor(np.asarray(observation[0], dtype=np.int64), device=self.device)

    def _max_steps(self) -> int:
        model = self.record.meta["model"]
        return int(model["episodes"] * model["horizon"])

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        return self._rollout_policy((states, h))

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        return self._rollout_act((states, h))

    def _update(
        self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray
    ) -> None:
        self._rollout_update((states, h), actions, rewards)
