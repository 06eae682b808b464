"""Bayes-UCB (Kaufmann, Cappe & Garivier, "On Bayesian upper confidence bounds for bandit problems", 2012).

The index of an arm is an upper quantile of the posterior of its mean reward,

    index_k(t) = Q(1 - 1 / (t (log T)^c); posterior of the mean of arm k given D_{t-1}),

c = 0 (the practical choice of the paper); a_t = argmax_k index_k(t).  The horizon T and the prior
are read from the environment the agent is reset on (its reset ``info["model"]``) unless given.

- :class:`BayesUCB`, Bernoulli arms with Beta(a, b) priors: the quantile of Beta(a + S_k, b + N_k - S_k)
  (the environment's Beta prior, Beta(1, 1) for its uniform prior).
- :class:`LinearBayesUCB`, linear bandits with the Gaussian model of :mod:`agents.bandit.linear_posterior`:
  <a_{t,k}, w*> | D_{t-1} ~ N(<a_{t,k}, mu_t>, s2 a_{t,k}^T V_t^{-1} a_{t,k}), so the index is
  <a_{t,k}, mu_t> + Phi^{-1}(1 - 1/(t (log T)^c)) sigma ||a_{t,k}||_{V_t^{-1}}: LinUCB with a
  Bayesian, time-dependent width, exact for the Gaussian prior and matched to the uniform one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import betaincinv, ndtri

from agents.bandit.index_agent import IndexAgent
from agents.bandit.linear_posterior import GaussianModelAgent
from agents.bandit.resolved_model import ResolvedModelMixin, resolved
from agents.bandit.thompson import beta_prior
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.estimators.statistics import ArmStatistics, gaussian_index


def quantile_level(t: int, horizon: int, c: float) -> float:
    """1 - 1 / (t (log T)^c) at step t >= 1 (log T floored at 1 so that T <= e keeps the level <= 1)."""
    return 1.0 - 1.0 / (t * max(np.log(horizon), 1.0) ** c)


class _HorizonMixin:
    """The horizon T of the quantile level: the environment's, else the constructor's (:func:`resolve_horizon`)."""

    reset_info: dict[str, Any]
    _used_horizon: int | None

    @property
    def used_horizon(self) -> int:
        """The horizon T resolved at the last reset."""
        return resolved(self, self._used_horizon)

    def _resolve_horizon(self) -> int:
        return resolve_horizon(self.reset_info, getattr(self, "horizon", None), "Bayes-UCB")


class BayesUCB(ResolvedModelMixin, _HorizonMixin, IndexAgent):
    """Posterior-quantile index with Beta(a, b) priors (the environment's unless given; T the environment's)."""

    name = "bayes_ucb"
    hyper_parameters = ("c", "horizon", "prior_a", "prior_b")
    stats: ArmStatistics
    binary_rewards = True

    def __init__(
        self,
        c: float = 0.0,
        horizon: int | None = None,
        prior_a: float | None = None,
        prior_b: float | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.c, self.horizon = float(c), horizon
        self.prior_a, self.prior_b = prior_a, prior_b
        self._used = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        a, b = beta_prior(self.env_model, self.prior_a, self.prior_b)
        self._used = {"horizon": self._resolve_horizon(), "prior_a": a, "prior_b": b}
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """Posterior quantile of level 1 - 1/(t (log T)^c)."""
        level = quantile_level(self.t + 1, self.used["horizon"], self.c)
        a = self.used["prior_a"] + self.stats.sums
        b = self.used["prior_b"] + self.stats.counts - self.stats.sums
        return betaincinv(a, b, level)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)


class LinearBayesUCB(GaussianModelAgent, _HorizonMixin, IndexAgent):
    """Gaussian posterior quantile of <a_{t,k}, w*> (noise and prior from the environment unless given; T its own)."""

    name = "linear_bayes_ucb"
    ridge_statistics = True

    def __init__(
        self,
        c: float = 0.0,
        horizon: int | None = None,
        noise_std: float | None = None,
        prior_mean: float | None = None,
        prior_var: float | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(noise_std, prior_mean, prior_var, seed=seed)  # temperature 0: IndexAgent's default
        self.c, self.horizon = float(c), horizon
        self._used_horizon = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = self._resolve_model().statistics(self.batch_size, self.dim)
        self._used_horizon = self._resolve_horizon()

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """<a, mu_t> + Phi^{-1}(level) sigma ||a||_{V_t^{-1}}, shape (B, A)."""
        z = ndtri(quantile_level(self.t + 1, self.used_horizon, self.c))
        # at t = 1 the level is 0 and z = -inf: an arm of zero width (a zero vector) has no bonus, not NaN
        return gaussian_index(self.stats, action_sets, self.model.noise_column(), z)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(action_sets[np.arange(self.batch_size), actions], rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (None: the environment's) and, after a reset, the model used."""
        out = {"name": self.name, "c": self.c, "horizon": self.horizon, **self._model_config()}
        if self._used_horizon is not None:
            out["model_used"] = {**out["model_used"], "horizon": self._used_horizon}
        return out
