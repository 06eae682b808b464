"""Thompson sampling for linear and Bernoulli bandits (Appendices F.1 and B).

Linear (Gaussian prior N(m 1, lambda I), noise N(0, s2), s2 = noise_std^2): with
V_t = (s2/lambda) I + sum_{j<t} a_j a_j^T,

    mu_t = V_t^{-1} ((s2/lambda) m 1 + sum_{j<t} a_j r_j),   w~ ~ N(mu_t, s2 V_t^{-1}),   a_t = argmax_k <a_{t,k}, w~>,

which is exact posterior sampling when w* ~ N(m 1, lambda I) and eps ~ N(0, s2).  sigma, m and
lambda are read from the environment the agent is reset on (:mod:`agents.bandit.linear_posterior`):
the noise level, and the prior itself (prior='gaussian') or the Gaussian with its moments
(Unif([low, high]^d): m = (low+high)/2, lambda = (high-low)^2/12), the "matched prior".  Explicit
constructor values override them: the paper's TS baseline is ``prior_mean=0, prior_var=1``
(:data:`~agents.bandit.linear_posterior.PAPER_TS_PRIOR`), misspecified for its w* ~ Unif([0,1]^d).
Appendix B writes "Tpsparn = sigma = 1.5" for the parameter that plays the noise
*variance*; we read sigma as the noise standard deviation of the environment (s2 = 2.25), which
gives regret 52.1 +- 0.5 at T=200 against the reference level of about 51; s2 = 1.5 gives
46.2 +- 0.5 (2,000 runs each, seed 123).

Bernoulli: Beta(a, b) priors on every arm; p~_k ~ Beta(a + S_k, b + N_k - S_k), a_t = argmax_k p~_k
(Algorithm 3.2 of Russo et al., "A tutorial on Thompson sampling").  (a, b) is the environment's
Beta prior (prior='beta'), Beta(1, 1) for its uniform prior (exact on Unif([0,1]); on a narrower
Unif([low, high]) Beta(1, 1) ignores the bounds), or the constructor's values.

``policy`` returns P(k = argmax) estimated from ``num_policy_samples`` posterior draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.bandit.linear_posterior import GaussianModelAgent
from agents.bandit.resolved_model import per_instance_summary
from icrl_gym.algorithm import BanditAgent
from icrl_gym.envs.bandit_core import BanditPrior
from icrl_gym.envs.env_model import EnvModel
from icrl_gym.envs.validation import MAX_SCALE, check_integer, check_number
from icrl_gym.estimators.statistics import ArmStatistics, RidgeStatistics


def argmax_frequencies(scores: np.ndarray, num_actions: int) -> np.ndarray:
    """Fraction of samples in which each arm is the argmax: scores (M, B, A) -> (B, A)."""
    winners = scores.argmax(axis=-1)  # (M, B)
    counts = np.zeros((scores.shape[1], num_actions))
    np.add.at(counts, (np.broadcast_to(np.arange(scores.shape[1]), winners.shape), winners), 1.0)
    return counts / scores.shape[0]


class LinearThompson(GaussianModelAgent):
    """Gaussian Thompson sampling for linear bandits (noise and prior from the environment unless given)."""

    name = "linear_ts"
    stats: RidgeStatistics
    ridge_statistics = True

    def __init__(
        self,
        noise_std: float | None = None,
        prior_var: float | None = None,
        prior_mean: float | None = None,
        num_policy_samples: int = 1000,
        seed: int | None = None,
    ) -> None:
        super().__init__(noise_std, prior_mean, prior_var, seed=seed)
        self.num_policy_samples = check_integer("num_policy_samples", num_policy_samples)

    def _memory_bytes(self) -> int:
        """The base statistics and the ``num_policy_samples`` posterior draws and scores of ``policy``."""
        M, B = self.num_policy_samples, self.batch_size
        return super()._memory_bytes() + 8 * 2 * M * B * (self.dim + self.num_actions)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = self._resolve_model().statistics(self.batch_size, self.dim)

    def _posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean (B, d) and Cholesky factor (B, d, d) of the covariance s2 V^{-1}."""
        mean, cov = self.model.posterior(self.stats)
        return mean, np.linalg.cholesky(cov)

    def _sample_scores(self, action_sets: np.ndarray, num_samples: int) -> np.ndarray:
        mean, chol = self._posterior()
        z = self.rng.standard_normal((num_samples, self.batch_size, self.dim))
        w = mean + np.einsum("bij,mbj->mbi", chol, z)  # (M, B, d)
        return np.einsum("bad,mbd->mba", action_sets, w)  # (M, B, A)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._sample_scores(action_sets, 1)[0].argmax(axis=1)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return argmax_frequencies(self._sample_scores(action_sets, self.num_policy_samples), self.num_actions)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(action_sets[np.arange(self.batch_size), actions], rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {**super().config(), **self._model_config()}


def beta_prior(
    model: EnvModel | None, prior_a: float | None, prior_b: float | None
) -> tuple[float | np.ndarray, float | np.ndarray]:
    """The Beta(a, b) prior on each arm mean: explicit values, else the environment's, else Beta(1, 1).

    A 'beta' environment gives its (prior_a, prior_b); any other fixed prior gives Beta(1, 1) (= Unif([0, 1]);
    not the 'skewed' priors, which are no Beta prior, nor a narrower uniform one);
    an environment drawing each instance's prior ('beta_family') gives per-run (B, 1) columns
    (``info["model"]["instance"]``), which broadcast over the arms.
    """
    env_a: float | np.ndarray = 1.0
    env_b: float | np.ndarray = 1.0
    instance = None if model is None else model.instance
    spec = None if model is None else model.bandit
    if instance is not None and "prior_a" in instance:
        env_a = np.reshape(np.asarray(instance["prior_a"], dtype=np.float64), (-1, 1))
        env_b = np.reshape(np.asarray(instance["prior_b"], dtype=np.float64), (-1, 1))
    elif spec is not None and spec.prior is BanditPrior.BETA:
        env_a, env_b = float(spec.prior_a), float(spec.prior_b)
    return (env_a if prior_a is None else float(prior_a)), (env_b if prior_b is None else float(prior_b))


class BernoulliThompson(BanditAgent):
    """Beta-Bernoulli Thompson sampling with Beta(a, b) priors on every arm (the environment's unless given)."""

    name = "bernoulli_ts"
    stats: ArmStatistics
    binary_rewards = True

    def __init__(
        self,
        prior_a: float | None = None,
        prior_b: float | None = None,
        num_policy_samples: int = 1000,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        for name, value in (("prior_a", prior_a), ("prior_b", prior_b)):
            if value is not None:
                check_number(f"Beta prior parameter {name} (or None: the environment's)", value, 0.0, True, MAX_SCALE)
        self.prior_a, self.prior_b = prior_a, prior_b
        self.a: float | np.ndarray
        self.b: float | np.ndarray
        self.a, self.b = beta_prior(None, prior_a, prior_b)
        self.num_policy_samples = check_integer("num_policy_samples", num_policy_samples)
        self._reset_done = False

    def _memory_bytes(self) -> int:
        """The base statistics and the ``num_policy_samples`` posterior draws of ``policy`` with their parameters."""
        return super()._memory_bytes() + 8 * 3 * self.num_policy_samples * self.batch_size * self.num_actions

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.a, self.b = beta_prior(self.env_model, self.prior_a, self.prior_b)
        self._reset_done = True
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def _sample(self, num_samples: int) -> np.ndarray:
        a = self.a + self.stats.sums
        b = self.b + self.stats.counts - self.stats.sums
        return self.rng.beta(a, b, size=(num_samples, *a.shape))  # (M, B, A)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._sample(1)[0].argmax(axis=1)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return argmax_frequencies(self._sample(self.num_policy_samples), self.num_actions)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)  # rewards in {0, 1}: checked by the base class (binary_rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        out = {**super().config(), "prior_a": self.prior_a, "prior_b": self.prior_b}
        if self._reset_done:
            out["model_used"] = per_instance_summary({"prior_a": self.a, "prior_b": self.b})
        return out
