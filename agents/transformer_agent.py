"""The pretrained in-context transformer as a bandit algorithm (Section framework, Eq. transformer-algorithm).

Alg_theta(. | D_{t-1}, s_t) = softmax(read-out of TF_theta at the state token of step t).  Online,
the agent feeds one step at a time into the model's key/value cache, so step t costs O(t)
instead of re-running the whole prefix.  ``greedy=False`` samples from the policy (the
paper's deployment); ``greedy=True`` takes its argmax.

Shipped checkpoints live in ``icrl_gym/pretrained`` (see :func:`icrl_gym.checkpoint.pretrained_names`)
and load by name::

    agent = TransformerAgent.pretrained("bernoulli-dpt-ts-uniform")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_gym.algorithm import BanditAgent, sample_categorical
from icrl_gym.checkpoint import (
    PRETRAINED_DIR,
    CheckpointError,
    CheckpointKind,
    check_compatible,
    load_checkpoint,
    pretrained_names,
    read_record,
    resolve_checkpoint,
)
from icrl_gym.device import resolve_device


class TransformerAgent(BanditAgent):
    """Batched online rollout of a :class:`icrl_gym.models.transformer.BanditTransformer`."""

    name = "transformer"

    def __init__(
        self,
        checkpoint: str | Path,
        greedy: bool = False,
        device: str = "cpu",
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        device_ = resolve_device(device)
        path = resolve_checkpoint(checkpoint)
        read_record(path).expect(CheckpointKind.BANDIT_TRANSFORMER, name=str(checkpoint))
        model, meta = load_checkpoint(path, device=device_)
        self._setup(model, meta, str(checkpoint), greedy)

    def _setup(self, model: Any, meta: dict[str, Any], checkpoint: str, greedy: bool) -> None:
        self.checkpoint, self.model, self.meta = checkpoint, model, meta
        self.device = next(model.parameters()).device
        self.greedy = bool(greedy)
        self.deterministic = self.greedy
        self._cache = None
        self._logits: np.ndarray | None = None
        self._prev: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_model(
        cls, model: Any, meta: dict[str, Any] | None = None, greedy: bool = False, seed: Any = None
    ) -> TransformerAgent:
        """Wrap an in-memory model (e.g. one being fine-tuned) without reading a checkpoint."""
        agent = cls.__new__(cls)
        BanditAgent.__init__(agent, seed)
        agent._setup(model, meta or {}, "<in-memory model>", greedy)
        return agent

    @classmethod
    def pretrained(cls, name: str, **kwargs: Any) -> TransformerAgent:
        """Load a checkpoint shipped with the package by name (see :func:`pretrained_names`)."""
        shipped = pretrained_names(CheckpointKind.BANDIT_TRANSFORMER)
        if name not in shipped:
            raise ValueError(f"no pretrained bandit transformer {name!r}; shipped models: {shipped}")
        return cls(PRETRAINED_DIR / name, **kwargs)

    def check_environment(self, spec: Any) -> None:
        """Raise a clear error when the environment's d, A or T differ from the training prior."""
        check_compatible(self.meta, spec, name=f"model {self.checkpoint!r}")

    def _reset(self, w_star: np.ndarray | None) -> None:
        cfg = self.model.config
        if (self.dim, self.num_actions) != (cfg.dim, cfg.num_actions):
            raise CheckpointError(
                f"model {self.checkpoint!r} was trained for d={cfg.dim}, A={cfg.num_actions} "
                f"but the environment has d={self.dim}, A={self.num_actions}"
            )
        self._cache = self.model.new_cache(self.batch_size, device=self.device)
        self._logits = None
        self._prev = None

    def _step_logits(self, action_sets: np.ndarray) -> np.ndarray:
        """Logits of the policy at the current step, computed once per step (cached)."""
        if self._logits is None:
            if self._cache.steps >= self.model.config.horizon:
                raise ValueError(
                    f"model {self.checkpoint!r} was trained for T={self.model.config.horizon} steps; "
                    f"it cannot act at step {self._cache.steps + 1}"
                )
            sets = torch.as_tensor(np.asarray(action_sets, dtype=np.float32).copy(), device=self.device)
            prev_a, prev_r = self._prev if self._prev is not None else (None, None)
            logits, _ = self.model.step(sets, prev_a, prev_r, self._cache)
            self._logits = logits.double().cpu().numpy()
        return self._logits

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        z = self._step_logits(action_sets)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        if self.greedy:
            return self._step_logits(action_sets).argmax(axis=1)
        return sample_categorical(self._policy(action_sets), self.rng)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        if self._logits is None:  # the step's tokens must be in the cache before its outcome
            self._step_logits(action_sets)
        self._prev = (
            torch.as_tensor(actions, dtype=torch.long, device=self.device),
            torch.as_tensor(rewards, dtype=torch.float32, device=self.device),
        )
        self._logits = None

    def config(self) -> dict[str, Any]:
        """The checkpoint and the deployment mode."""
        return {"name": self.name, "checkpoint": self.checkpoint, "greedy": self.greedy}
