"""A shipped online meta-RL policy (PPO across the prior, :mod:`icrl_gym.models.meta_policy`) as a bandit agent.

The agent keeps the same history features the policy was trained on (:class:`HistoryFeatures`,
batched over runs) and, for the recurrent (RL^2) policy, one LSTM state per run.  ``policy``
returns pi(. | features of D_{t-1}, A_t); the LSTM state advances once per step, in ``update``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy

from agents.learned.checkpoint_agent import CheckpointAgent
from icrl_gym.algorithm import BanditAgent
from icrl_gym.checkpoint import CheckpointRecord, resolve_checkpoint
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.models.meta_policy import HistoryFeatures
from icrl_gym.models.meta_policy_file import load_policy
from icrl_gym.utils.device import resolve_device


class MetaRLAgent(CheckpointAgent[np.ndarray], BanditAgent):
    """Plays an exported meta-RL policy (sampled, or greedy)."""

    name = "meta_rl"

    def __init__(self, checkpoint: str | Path, greedy: bool = False, device: str = "cpu", seed: int | None = None):
        super().__init__(seed)
        self.checkpoint, self.greedy = str(checkpoint), bool(greedy)
        self.device = resolve_device(device)
        self.algo, self.meta = load_policy(resolve_checkpoint(checkpoint), device=str(self.device))
        self.record = CheckpointRecord.from_meta(self.meta)
        self.cfg = self.meta["meta_rl"]
        self.spec = BanditSpec.from_dict(self.meta["env"])
        self.recurrent = self.cfg["algo"] == "recurrent_ppo"
        policy = self.algo.policy
        if not isinstance(policy, RecurrentActorCriticPolicy if self.recurrent else ActorCriticPolicy):
            raise TypeError(f"{checkpoint} holds a {type(policy).__name__}, not the policy of {self.cfg['algo']}")
        self.sb3_policy = policy
        self.features = HistoryFeatures(self.spec, self.cfg["features"], 1)
        self._lstm: Any = None
        self._next_lstm: Any = None
        self._episode_start: np.ndarray | None = None

    def _reset(self, w_star: np.ndarray | None) -> None:  # the environment was checked by CheckpointAgent._start
        self.features.reset(self.batch_size)
        if self.recurrent:
            assert isinstance(self.sb3_policy, RecurrentActorCriticPolicy)  # checked in __init__
            n_layers, hidden = self.sb3_policy.lstm_actor.num_layers, self.sb3_policy.lstm_actor.hidden_size
            zeros = torch.zeros(n_layers, self.batch_size, hidden, device=self.device)
            self._lstm = (zeros, zeros.clone())
            self._episode_start = np.ones(self.batch_size, dtype=np.float32)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(self.features.features(action_sets), device=self.device)
        with torch.no_grad():
            if isinstance(self.sb3_policy, RecurrentActorCriticPolicy):
                starts = torch.as_tensor(self._episode_start, device=self.device)
                dist, self._next_lstm = self.sb3_policy.get_distribution(obs, self._lstm, starts)
            else:
                dist = self.sb3_policy.get_distribution(obs)
            categorical = dist.distribution
            if not isinstance(categorical, torch.distributions.Categorical):
                raise TypeError(f"{self.checkpoint} does not choose among discrete arms")
            probs = categorical.probs.double().cpu().numpy()
        if self.greedy:
            probs = np.eye(self.num_actions)[probs.argmax(axis=1)]
        return probs / probs.sum(axis=1, keepdims=True)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        if self.recurrent:
            if self._next_lstm is None:  # update without a policy call at this step: run the LSTM now
                self._policy(action_sets)
            self._lstm, self._next_lstm = self._next_lstm, None
            self._episode_start = np.zeros(self.batch_size, dtype=np.float32)
        self.features.update(action_sets, actions, rewards)
