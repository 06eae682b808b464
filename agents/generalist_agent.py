"""The generalist in-context transformer (issue 16) as a Bernoulli-bandit algorithm, any K and T.

The model (:class:`icrl_gym.models.generalist.GeneralistTransformer`) reads the raw trajectory
through its key/value cache, one step at a time, and scores the K arms at step t from the
horizon features of step t; K is read from the reset ``info["num_actions"]`` and T from
``info["horizon"]`` (or the environment's model ``info["model"]["horizon"]``, or the keyword
``horizon``).  ``greedy=True`` (default; the model imitates the deterministic Gittins policy)
takes the argmax, ``greedy=False`` samples from softmax(logits).

It was trained on Bernoulli arms (one-hot action sets, rewards in {0, 1}) only: it refuses a linear
bandit (non-one-hot arms, Gaussian rewards) with a ``ValueError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_gym.algorithm import BanditAgent, logits_action, softmax_rows
from icrl_gym.checkpoint import CheckpointKind, CheckpointRecord, read_checkpoint, resolve_checkpoint
from icrl_gym.device import resolve_device
from icrl_gym.models.generalist import GeneralistCache, GeneralistConfig, GeneralistTransformer


class GeneralistAgent(BanditAgent):
    """Batched online rollout of a :class:`GeneralistTransformer` on Bernoulli bandits of any size."""

    name = "generalist"
    reset_fields: tuple[str, ...] = (*BanditAgent.reset_fields, "horizon")

    def __init__(
        self,
        checkpoint: str | Path,
        greedy: bool = True,
        device: str = "cpu",
        horizon: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        state, meta = read_checkpoint(resolve_checkpoint(checkpoint))
        CheckpointRecord.from_meta(meta).expect(CheckpointKind.GENERALIST_TRANSFORMER, str(checkpoint))
        model = GeneralistTransformer(GeneralistConfig.from_dict(meta["model"]))
        model.load_state_dict(state, strict=True)
        self._setup(model.to(resolve_device(device)).eval(), str(checkpoint), greedy, horizon)

    def _setup(self, model: GeneralistTransformer, checkpoint: str, greedy: bool, horizon: int | None) -> None:
        self.model, self.checkpoint, self.greedy = model, checkpoint, bool(greedy)
        self.deterministic = self.greedy
        self.default_horizon = horizon
        self.horizon = 0
        self.device = next(model.parameters()).device
        self._cache: GeneralistCache | None = None
        self._logits: np.ndarray | None = None
        self._prev: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_model(
        cls, model: GeneralistTransformer, greedy: bool = True, horizon: int | None = None, seed: int | None = None
    ) -> GeneralistAgent:
        """Wrap an in-memory model (e.g. one being trained) without reading a checkpoint."""
        agent = cls.__new__(cls)
        BanditAgent.__init__(agent, seed)
        agent._setup(model.eval(), "<in-memory model>", greedy, horizon)
        return agent

    def _start(self, info: dict[str, Any]) -> None:
        model = info.get("model") or {}
        problems = [
            f"{key}={model[key]!r}"
            for key, allowed in (("reward", "bernoulli"), ("arms", "one_hot"))
            if key in model and model[key] != allowed
        ]
        if problems:
            raise ValueError(
                f"the generalist transformer plays Bernoulli bandits (one-hot arms, Bernoulli rewards) only; "
                f"this environment has {', '.join(problems)}"
            )
        horizon = info.get("horizon", model.get("horizon", self.default_horizon))
        if horizon is None:
            raise ValueError("the generalist transformer needs the horizon T: reset with info['horizon'] or horizon=")
        self.horizon = int(horizon)
        super()._start(info)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self._cache = self.model.new_cache(self.batch_size, self.horizon, self.device, grouped=True)
        self._logits, self._prev = None, None

    def _step_logits(self, action_sets: np.ndarray) -> np.ndarray:
        """Logits (B, K) at the current step, computed once per step."""
        if self._logits is None:
            if self._cache is None:  # unreachable through the public API: act()/policy() check reset() first
                raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()")
            eye = np.eye(self.num_actions, self.dim)
            if self.dim != self.num_actions or not np.array_equal(action_sets, np.broadcast_to(eye, action_sets.shape)):
                raise ValueError("the generalist transformer plays one-hot arms e_1..e_K only (not a linear bandit)")
            if self.t >= self.horizon:
                raise ValueError(f"the run was reset for T={self.horizon} steps; it cannot act at step {self.t + 1}")
            prev_a, prev_r = self._prev if self._prev is not None else (None, None)
            logits = self.model.step(self._cache, self.num_actions, self.horizon, prev_a, prev_r)
            self._logits = logits.double().cpu().numpy()
        return self._logits

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return softmax_rows(self._step_logits(action_sets))

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return logits_action(self._step_logits(action_sets), self.greedy, self.rng)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        if self._logits is None:  # the step's history must be in the cache before its outcome
            self._step_logits(action_sets)
        if not np.all((rewards == 0) | (rewards == 1)):
            raise ValueError("the generalist transformer plays Bernoulli rewards in {0, 1} only")
        self._prev = (
            torch.as_tensor(actions, dtype=torch.long, device=self.device),
            torch.as_tensor(rewards, dtype=torch.float32, device=self.device),
        )
        self._logits = None

    def config(self) -> dict[str, Any]:
        """The checkpoint and the deployment mode."""
        return {"name": self.name, "checkpoint": self.checkpoint, "greedy": self.greedy}
