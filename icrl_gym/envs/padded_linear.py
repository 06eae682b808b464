"""Linear-bandit runs of mixed dimension, zero-padded to one width: the linear generalist's training environment.

B runs of one (A, T) whose feature dimension d, noise level sigma and kind of arms differ per run;
features beyond a run's d are zero.  :class:`Instances` holds them (w*, the action sets, the
pre-drawn standard normal noise of every step), :func:`draw_instances` draws them, and
:class:`InstanceBatch` steps them: the reward of arm a at step t is <a, w*> + sigma noise_t.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Instances:
    """B linear-bandit runs: w* (B, d_max), action sets (B, T or 1, A, d_max), noise (B, T), sigma (B,), d (B,).

    ``prior_mean``, ``prior_var`` (B, d_max): the expert's prior per run (None: N(1/2, I/12) for all);
    ``noise_known`` (B,): whether the model is given sigma (None: always).
    """

    w: np.ndarray
    sets: np.ndarray
    noise: np.ndarray
    sigma: np.ndarray
    dim: np.ndarray
    horizon: int
    prior_mean: np.ndarray | None = None
    prior_var: np.ndarray | None = None
    noise_known: np.ndarray | None = None

    def model_noise(self) -> np.ndarray:
        """Sigma as the model is given it (B,): NaN where it is unknown to the model."""
        return self.sigma if self.noise_known is None else np.where(self.noise_known, self.sigma, np.nan)

    def action_set(self, t: int) -> np.ndarray:
        """The action sets (B, A, d_max) of step t."""
        return self.sets[:, t if self.sets.shape[1] > 1 else 0]

    def rows(self, index: np.ndarray) -> Instances:
        """The runs ``index``."""
        arrays = ("w", "sets", "noise", "sigma", "dim", "prior_mean", "prior_var", "noise_known")
        taken: dict[str, Any] = {}
        for name in arrays:
            value = getattr(self, name)
            taken[name] = None if value is None else value[index]
        return dataclasses.replace(self, **taken)


def draw_instances(
    rng: np.random.Generator,
    batch: int,
    num_arms: int,
    horizon: int,
    dim: np.ndarray,
    sigma: np.ndarray,
    gaussian_arms: np.ndarray,
    per_step: bool,
    d_max: int = 8,
) -> Instances:
    """Draw w* ~ U[0,1]^d, the arms (Unif[-1,1]^d or N(0, I/d) rows, zero-padded) and the noise."""
    mask = np.arange(d_max)[None, :] < dim[:, None]  # (B, d_max)
    w = rng.random((batch, d_max)) * mask
    steps = horizon if per_step else 1
    shape = (batch, steps, num_arms, d_max)
    sets = rng.random(shape, dtype=np.float32) * 2.0 - 1.0  # float32: (B, T, A, d_max) may be large
    sets *= mask[:, None, None, :]
    normal = np.flatnonzero(gaussian_arms)
    if normal.size:
        scale = (mask[normal] / np.sqrt(dim[normal])[:, None]).astype(np.float32)
        sets[normal] = rng.standard_normal((normal.size, *shape[1:]), dtype=np.float32) * scale[:, None, None, :]
    noise = rng.standard_normal((batch, horizon))
    return Instances(w, sets, noise, sigma.astype(np.float64), dim, horizon)


class InstanceBatch:
    """The runs of :class:`Instances` advanced together (a batch environment of :func:`icrl_gym.data.rollout.play`)."""

    def __init__(self, inst: Instances) -> None:
        self.inst, self.batch_size, self.t = inst, inst.noise.shape[0], 0
        self._rows = np.arange(self.batch_size)

    def arms(self) -> np.ndarray:
        """The arms (B, A, d_max) of the current step, in float64."""
        return self.inst.action_set(self.t).astype(np.float64)

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Pull arm ``actions[b]`` in run b.

        Returns (B,) arrays ``reward``, ``expected_reward`` <a, w*>, ``best_expected_reward`` and the
        pulled arms' features ``arm`` (B, d_max).
        """
        arms = self.arms()
        means = np.einsum("bad,bd->ba", arms, self.inst.w)
        expected = means[self._rows, actions]
        reward = expected + self.inst.sigma * self.inst.noise[:, self.t]
        self.t += 1
        return {
            "reward": reward,
            "expected_reward": expected,
            "best_expected_reward": means.max(axis=1),
            "arm": arms[self._rows, actions],
        }
