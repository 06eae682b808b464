"""The LINEAR generalist in-context transformer (issue 16) as a linear-bandit algorithm: any d <= 8, A, T.

The model (:class:`icrl_gym.models.linear_generalist.LinearGeneralistTransformer`) reads the raw
trajectory (the action sets, the arms pulled, the rewards) through its cache -- the linear
attention's state, O(1) per step whatever t -- and scores the A arms of the current action set.
It needs the horizon T and the noise level sigma of the environment, read from the reset
``info["model"]`` (the environment's :class:`BanditSpec`; each instance's sigma where it reports them), or
given to the constructor / ``reset`` (``horizon=``, ``noise_std=``); d and A come from the action sets.  An
environment whose sigma is marked unknown (``noise_known=False``) is played without it: a model trained to
(``noise_estimate``) estimates sigma in context, any other refuses.  ``greedy=True`` (default; the
model imitates a deterministic index policy) takes the argmax, ``greedy=False`` samples from
softmax(logits).  It was trained on Gaussian rewards, w* ~ U[0, 1]^d, d in 2..8, A in 2..20,
T <= 500, sigma in [0.4, 2.5] (Section 4.1 of Lin, Bai, Mei, ICLR 2024); it refuses d > d_max and
Bernoulli bandits with a ``ValueError``, and plays any A and T and one-hot arms (the Gaussian
multi-armed bandit; outside the trained range, an out-of-distribution use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_gym.algorithm import BanditAgent, logits_action, softmax_rows
from icrl_gym.checkpoint import CheckpointKind, CheckpointRecord, read_checkpoint, resolve_checkpoint
from icrl_gym.device import resolve_device
from icrl_gym.models.linear_generalist import (
    LinearGeneralistCache,
    LinearGeneralistConfig,
    LinearGeneralistTransformer,
)


class LinearGeneralistAgent(BanditAgent):
    """Batched online rollout of a :class:`LinearGeneralistTransformer` on linear bandits of any size."""

    name = "linear_generalist"
    reset_fields: tuple[str, ...] = (*BanditAgent.reset_fields, "horizon", "noise_std")

    def __init__(
        self,
        checkpoint: str | Path,
        greedy: bool = True,
        device: str = "cpu",
        horizon: int | None = None,
        noise_std: float | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        state, meta = read_checkpoint(resolve_checkpoint(checkpoint))
        CheckpointRecord.from_meta(meta).expect(CheckpointKind.LINEAR_GENERALIST_TRANSFORMER, str(checkpoint))
        model = LinearGeneralistTransformer(LinearGeneralistConfig.from_dict(meta["model"]))
        model.load_state_dict(state, strict=True)
        self._setup(model.to(resolve_device(device)).eval(), str(checkpoint), greedy, horizon, noise_std)

    def _setup(
        self,
        model: LinearGeneralistTransformer,
        checkpoint: str,
        greedy: bool,
        horizon: int | None,
        noise_std: float | None,
    ) -> None:
        self.model, self.checkpoint, self.greedy = model, checkpoint, bool(greedy)
        self.deterministic = self.greedy
        self.default_horizon, self.default_noise = horizon, noise_std
        self.horizon, self.noise_std = 0, torch.ones(1)
        self.device = next(model.parameters()).device
        self._cache: LinearGeneralistCache | None = None
        self._logits: np.ndarray | None = None

    @classmethod
    def from_model(
        cls,
        model: LinearGeneralistTransformer,
        greedy: bool = True,
        horizon: int | None = None,
        noise_std: float | None = None,
        seed: int | None = None,
    ) -> LinearGeneralistAgent:
        """Wrap an in-memory model (e.g. one being trained) without reading a checkpoint."""
        agent = cls.__new__(cls)
        BanditAgent.__init__(agent, seed)
        agent._setup(model.eval(), "<in-memory model>", greedy, horizon, noise_std)
        return agent

    def _start(self, info: dict[str, Any]) -> None:
        model = info.get("model") or {}
        if model.get("reward", "gaussian") != "gaussian":
            raise ValueError(
                "the linear generalist transformer plays linear bandits with Gaussian rewards only; this environment "
                f"has reward={model.get('reward')!r}"
            )
        instance = model.get("instance") or {}
        horizon = info.get("horizon", model.get("horizon", self.default_horizon))
        noise = info.get("noise_std", instance.get("noise_std", model.get("noise_std", self.default_noise)))
        if horizon is None:
            raise ValueError(
                "the linear generalist transformer needs the horizon T: reset with the environment's info "
                "(info['model']) or pass horizon="
            )
        if model.get("noise_known", True) is False and "noise_std" not in info:
            noise = np.nan  # the user's bandit of unknown noise: estimated in context
        if noise is None or (np.isnan(noise).any() and not self.model.config.noise_estimate):
            raise ValueError(
                "this linear generalist transformer needs the noise level sigma: reset with the environment's info "
                "(info['model']) or pass noise_std="
            )
        noise_arr = np.asarray(noise, dtype=np.float64)
        if not (np.isnan(noise_arr) | (noise_arr > 0)).all():
            raise ValueError(f"noise_std must be > 0, got {noise}")
        self.horizon = int(horizon)
        self.noise_std = torch.as_tensor(noise_arr.reshape(-1), dtype=torch.float32, device=self.device)
        super()._start(info)
        if self.dim > self.model.config.d_max:
            raise ValueError(
                f"the linear generalist plays d <= {self.model.config.d_max}, this bandit has d={self.dim}"
            )

    def _reset(self, w_star: np.ndarray | None) -> None:
        self._cache = self.model.new_cache(self.batch_size, self.device)
        self._logits = None

    def _step_logits(self, action_sets: np.ndarray) -> np.ndarray:
        """Logits (B, A) at the current step, computed once per step."""
        if self._logits is None:
            if self._cache is None:  # unreachable through the public API: act()/policy() check reset() first
                raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()")
            arms = torch.as_tensor(action_sets, dtype=torch.float32, device=self.device)
            logits = self.model.step(self._cache, arms, self.horizon, self.noise_std, self.dim)
            self._logits = logits.double().cpu().numpy()
        return self._logits

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return softmax_rows(self._step_logits(action_sets))

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return logits_action(self._step_logits(action_sets), self.greedy, self.rng)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        if self._cache is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before update()")
        chosen = action_sets[np.arange(self.batch_size), actions]
        self.model.append(
            self._cache,
            torch.as_tensor(chosen, dtype=torch.float32, device=self.device),
            torch.as_tensor(rewards, dtype=torch.float32, device=self.device),
        )
        self._logits = None

    def config(self) -> dict[str, Any]:
        """The checkpoint and the deployment mode."""
        return {"name": self.name, "checkpoint": self.checkpoint, "greedy": self.greedy}
