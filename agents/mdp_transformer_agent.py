"""A pretrained MDP transformer (icrl_gym.models.mdp_transformer) as a tabular-MDP algorithm.

Alg_theta(. | D_{t-1}, s_t) = softmax of the read-out at the state token of step t; online rollout
appends each step's tokens (and the empty token at an episode's end) to the key/value cache.
``greedy=False`` samples from the policy, ``greedy=True`` takes its argmax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_gym.algorithm import MDPAgent, sample_categorical
from icrl_gym.checkpoint import CheckpointError, CheckpointKind, load_checkpoint, read_record, resolve_checkpoint
from icrl_gym.device import resolve_device


class MDPTransformerAgent(MDPAgent):
    """Batched online rollout of an :class:`icrl_gym.models.mdp_transformer.MDPTransformer` checkpoint."""

    name = "mdp_transformer"

    def __init__(self, checkpoint: str | Path, greedy: bool = False, device: str = "cpu", seed: int | None = None):
        super().__init__(seed)
        self.checkpoint, self.greedy = str(checkpoint), bool(greedy)
        self.device = resolve_device(device)
        path = resolve_checkpoint(checkpoint)
        read_record(path).expect(CheckpointKind.MDP_TRANSFORMER, name=str(checkpoint))
        self.model, self.meta = load_checkpoint(path, device=self.device)
        self._cache = None
        self._logits: np.ndarray | None = None
        self._prev: tuple[torch.Tensor, torch.Tensor] | None = None

    def check_environment(self, spec: Any) -> None:
        """Raise a clear error when S, A, H or K differ from the model's."""
        cfg = self.model.config
        for key in ("num_states", "num_actions", "horizon", "episodes"):
            if getattr(cfg, key) != getattr(spec, key):
                raise CheckpointError(
                    f"model {self.checkpoint!r} was built for {key}={getattr(cfg, key)} "
                    f"but the environment has {key}={getattr(spec, key)}"
                )

    def _reset(self, instance: Any) -> None:
        self.check_environment(self)
        self._cache = self.model.new_cache(self.batch_size, device=self.device)
        self._logits, self._prev = None, None

    def _step_logits(self, states: np.ndarray) -> np.ndarray:
        if self._logits is None:
            s = torch.as_tensor(np.asarray(states, dtype=np.int64), device=self.device)
            prev_a, prev_r = self._prev if self._prev is not None else (None, None)
            self._logits = self.model.step(s, prev_a, prev_r, self._cache).double().cpu().numpy()
        return self._logits

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        z = self._step_logits(states)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        if self.greedy:
            return self._step_logits(states).argmax(axis=1)
        return sample_categorical(self._policy(states, h), self.rng)

    def _update(self, states, h, actions, rewards, next_states) -> None:
        if self._logits is None:
            self._step_logits(states)
        self._prev = (
            torch.as_tensor(np.asarray(actions, dtype=np.int64), device=self.device),
            torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=self.device),
        )
        self._logits = None

    def config(self) -> dict[str, Any]:
        """The checkpoint and the deployment mode."""
        return {"name": self.name, "checkpoint": self.checkpoint, "greedy": self.greedy}
