"""A shipped online meta-RL policy (PPO across the prior, :mod:`icrl_gym.meta_policy`) as a bandit agent.

The agent keeps the same history features the policy was trained on (:class:`HistoryFeatures`,
batched over runs) and, for the recurrent (RL^2) policy, one LSTM state per run.  ``policy``
returns pi(. | features of D_{t-1}, A_t); the LSTM state advances once per step, in ``update``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_gym.algorithm import BanditAgent
from icrl_gym.checkpoint import CheckpointError, resolve_checkpoint
from icrl_gym.device import resolve_device
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.meta_policy import HistoryFeatures, load_policy


class MetaRLAgent(BanditAgent):
    """Plays an exported meta-RL policy (sampled, or greedy)."""

    name = "meta_rl"

    def __init__(self, checkpoint: str | Path, greedy: bool = False, device: str = "cpu", seed: int | None = None):
        super().__init__(seed)
        self.checkpoint, self.greedy = str(checkpoint), bool(greedy)
        self.device = resolve_device(device)
        self.algo, self.meta = load_policy(resolve_checkpoint(checkpoint), device=str(self.device))
        self.cfg = self.meta["meta_rl"]
        self.spec = BanditSpec.from_dict(self.meta["env"])
        self.recurrent = self.cfg["algo"] == "recurrent_ppo"
        self.features = HistoryFeatures(self.spec, self.cfg["features"], 1)
        self._lstm: Any = None
        self._next_lstm: Any = None
        self._episode_start: np.ndarray | None = None

    def check_environment(self, spec: Any) -> None:
        """Raise when ``spec`` differs from the training prior in d, A, the kind of arms or T."""
        for key in ("dim", "num_actions", "arms", "horizon"):
            if getattr(spec, key) != getattr(self.spec, key):
                raise CheckpointError(
                    f"{self.checkpoint} was trained for {key}={getattr(self.spec, key)!r} "
                    f"but the environment has {key}={getattr(spec, key)!r}"
                )

    def _reset(self, w_star: np.ndarray | None) -> None:
        if (self.dim, self.num_actions) != (self.spec.dim, self.spec.num_actions):
            raise ValueError(
                f"{self.checkpoint} plays d={self.spec.dim}, A={self.spec.num_actions}; "
                f"the environment has d={self.dim}, A={self.num_actions}"
            )
        self.features.reset(self.batch_size)
        if self.recurrent:
            policy = self.algo.policy
            n_layers, hidden = policy.lstm_actor.num_layers, policy.lstm_actor.hidden_size
            zeros = torch.zeros(n_layers, self.batch_size, hidden, device=self.device)
            self._lstm = (zeros, zeros.clone())
            self._episode_start = np.ones(self.batch_size, dtype=np.float32)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(self.features.features(action_sets), device=self.device)
        with torch.no_grad():
            if self.recurrent:
                starts = torch.as_tensor(self._episode_start, device=self.device)
                dist, self._next_lstm = self.algo.policy.get_distribution(obs, self._lstm, starts)
            else:
                dist = self.algo.policy.get_distribution(obs)
            probs = dist.distribution.probs.double().cpu().numpy()
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

    def config(self) -> dict[str, Any]:
        """The checkpoint and the sampling mode."""
        return {"name": self.name, "checkpoint": self.checkpoint, "greedy": self.greedy}
