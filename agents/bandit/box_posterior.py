"""The exact posterior of a linear bandit with the uniform prior w* ~ Unif([low, high]^d), by Monte-Carlo.

Under the environment's prior and noise N(0, s2) the posterior is the Gaussian likelihood restricted
to the box, p(w | D) ∝ exp(-sum_j (r_j - <a_j, w>)^2 / (2 s2)) 1{w in box}.  The matched Gaussian
posterior N(mu_t, s2 V_t^{-1}) of :mod:`agents.bandit.linear_posterior` (prior N(m 1, lambda I), m and
lambda the box's mean and variance) is the same likelihood times N(w; m 1, lambda I), so drawing
w_1..w_M from it and weighting

    omega_i ∝ 1{w_i in box} / N(w_i; m 1, lambda I) ∝ 1{w_i in box} exp(||w_i - m 1||^2 / (2 lambda))

is self-normalised importance sampling from the exact posterior (the weights are bounded on the box,
by exp(d (h - l)^2 / (8 lambda)) = exp(1.5 d) relative to the centre).  Rules on the weighted draws:

- ``"sample"``: posterior sampling, one draw resampled with probabilities omega (sampling-importance-
  resampling; exact as M -> infinity);
- ``"quantile"``: Bayes-UCB, the weighted 1 - 1/(t (log T)^c) quantile of <a_{t,k}, w> per arm;
- ``"mean"``: greedy on the weighted posterior mean.

Cost per step: M fresh draws per run, O(B M d^2) for the Cholesky products and O(B A M log M) for the
quantile's sort; M = 256, B = 2,000, d = 5, A = 10, T = 200 takes about a minute on one core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.bandit.bayes_ucb import _HorizonMixin, quantile_level
from agents.bandit.linear_posterior import GaussianModelMixin
from icrl_gym.algorithm import BanditAgent
from icrl_gym.envs.bandit_core import BanditPrior, BanditReward
from icrl_gym.envs.validation import MAX_SCALE, check_integer, check_number

RULES = ("sample", "quantile", "mean")


class BoxPosteriorMC(GaussianModelMixin, _HorizonMixin, BanditAgent):
    """Posterior sampling, Bayes-UCB or posterior-mean greedy on the exact Unif-box posterior (importance sampling)."""

    name = "linear_box_posterior"
    deterministic = False
    ridge_statistics = True

    def __init__(
        self,
        rule: str = "sample",
        num_particles: int = 256,
        c: float = 0.0,
        horizon: int | None = None,
        model_used: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        """``model_used`` is what ``config()`` records after a reset; it is re-read at every reset, not used."""
        super().__init__(seed)
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        num_particles = check_integer("num_particles", num_particles)
        c = check_number("c", c, low=0.0, max_abs=MAX_SCALE)
        horizon = None if horizon is None else check_integer("horizon", horizon)
        self.rule, self.num_particles, self.c, self.horizon = rule, num_particles, c, horizon
        self._init_model(None, None, None)
        self._used_horizon = None

    def _memory_bytes(self) -> int:
        """The base statistics, the M particles of every run and, for the quantile rule, their scores per arm."""
        B, M, A, d = self.batch_size, self.num_particles, self.num_actions, self.dim
        return super()._memory_bytes() + 8 * B * M * (3 * d + 4 + 3 * A)

    def _reset(self, w_star: np.ndarray | None) -> None:
        spec = None if self.env_model is None else self.env_model.bandit
        if spec is None:
            raise ValueError("the box posterior needs the environment's model: reset with the env's reset info")
        if spec.prior is not BanditPrior.UNIFORM or spec.reward is not BanditReward.GAUSSIAN:
            raise ValueError(
                f"the box posterior needs a uniform prior and Gaussian noise, got {spec.prior!r}, {spec.reward!r}"
            )
        self.low, self.high = spec.prior_low, spec.prior_high
        self.stats = self._resolve_model().statistics(self.batch_size, self.dim)
        self._used_horizon = self._resolve_horizon() if self.rule == "quantile" else spec.horizon

    def particles(self) -> tuple[np.ndarray, np.ndarray]:
        """M weighted posterior draws per run: w (B, M, d) and normalised weights (B, M)."""
        mean, cov = self.model.posterior(self.stats)
        z = self.rng.standard_normal((self.batch_size, self.num_particles, self.dim))
        w = mean[:, None, :] + np.einsum("bij,bmj->bmi", np.linalg.cholesky(cov), z)
        inside = np.all((w >= self.low) & (w <= self.high), axis=-1)
        log_w = np.where(inside, ((w - self.model.prior_mean) ** 2).sum(-1) / (2 * self.model.prior_var), -np.inf)
        # A run whose draws all leave the box (never seen at d=5) falls back to its Gaussian draws.
        log_w = np.where(inside.any(axis=1, keepdims=True), log_w, 0.0)
        weights = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        return w, weights / weights.sum(axis=1, keepdims=True)

    def _scores(self, action_sets: np.ndarray) -> np.ndarray:
        w, weights = self.particles()
        if self.rule == "mean":
            return np.einsum("bad,bd->ba", action_sets, np.einsum("bm,bmd->bd", weights, w))
        if self.rule == "sample":
            cdf = np.cumsum(weights, axis=1)
            pick = np.minimum((cdf < self.rng.random((self.batch_size, 1))).sum(axis=1), self.num_particles - 1)
            return np.einsum("bad,bd->ba", action_sets, w[np.arange(self.batch_size), pick])
        values = np.einsum("bad,bmd->bam", action_sets, w)  # (B, A, M)
        order = np.argsort(values, axis=-1)
        cum = np.cumsum(np.take_along_axis(np.broadcast_to(weights[:, None, :], values.shape), order, -1), -1)
        level = quantile_level(self.t + 1, self.used_horizon, self.c)
        first = np.minimum((cum < level).sum(axis=-1), self.num_particles - 1)  # weighted quantile
        return np.take_along_axis(np.take_along_axis(values, order, -1), first[..., None], -1)[..., 0]

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._scores(action_sets).argmax(axis=1)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return np.eye(self.num_actions)[self._act(action_sets)]

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(action_sets[np.arange(self.batch_size), actions], rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters and, after a reset, the model used (the environment's, never overridden)."""
        out = {"name": self.name, "rule": self.rule, "num_particles": self.num_particles, "c": self.c}
        out["horizon"] = self.horizon
        model = self._model_config()
        return {**out, **({"model_used": model["model_used"]} if "model_used" in model else {})}
