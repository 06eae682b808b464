"""The Gaussian model that the Bayesian linear-bandit algorithms assume, read from the environment.

Bayesian linear regression (Appendix F.1 of the paper): with the prior
w* ~ N(m 1, lambda I_d) and noise eps ~ N(0, s2), s2 = sigma^2, the posterior after t-1 steps is

    w* | D_{t-1} ~ N(mu_t, s2 V_t^{-1}),   V_t = (s2/lambda) I + sum_{j<t} a_j a_j^T,
    mu_t = V_t^{-1} ((s2/lambda) m 1 + sum_{j<t} a_j r_j),

kept incrementally by :class:`~icrl_gym.estimators.statistics.RidgeStatistics` (regulariser s2/lambda, centre m).

:meth:`GaussianModel.resolve` reads sigma, m and lambda from the environment's reset
``info["model"]`` (its BanditSpec): sigma = noise_std; for ``prior="gaussian"`` the prior exactly,
N(0, prior_var I); for the uniform prior Unif([low, high]^d) (and the Beta prior) the Gaussian with
the same mean and variance per coordinate, N((low+high)/2, (high-low)^2/12 I) -- the "matched" prior,
exact posterior for the Gaussian prior and a moment-matched approximation otherwise.  An explicit
constructor value overrides the environment's (the paper's own TS uses lambda = 1, m = 0 on the
Unif([0,1]^d) prior, i.e. a deliberately misspecified prior).

:class:`PosteriorMeanGreedy` is the greedy posterior-mean policy a_t = argmax_k <a_{t,k}, mu_t>.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from agents.bandit.index_agent import IndexAgent
from agents.bandit.resolved_model import per_instance_summary
from icrl_gym.envs.bandit_core import BanditReward
from icrl_gym.envs.env_model import EnvModel
from icrl_gym.envs.validation import MAX_SCALE, check_number
from icrl_gym.estimators.statistics import RidgeStatistics

PAPER_TS_PRIOR = {"prior_mean": 0.0, "prior_var": 1.0}
"""The prior N(0, I_d) of the paper's linear Thompson sampling baseline (Appendix B)."""


@dataclass(frozen=True)
class GaussianModel:
    """Noise N(0, noise_std^2) and prior N(prior_mean, prior_var I): the model a Bayesian agent assumes.

    Numbers for one model shared by every run, or per-run arrays (an environment drawing each instance's
    prior, ``info["model"]["instance"]``): ``noise_std`` (B,), ``prior_mean`` and ``prior_var`` (B, d), the
    matched Gaussian prior N(prior_mean[b], diag(prior_var[b])) of run b.
    """

    noise_std: float | np.ndarray
    prior_mean: float | np.ndarray
    prior_var: float | np.ndarray

    @classmethod
    def resolve(
        cls,
        model: EnvModel | None,
        noise_std: float | None = None,
        prior_mean: float | None = None,
        prior_var: float | None = None,
    ) -> GaussianModel:
        """Explicit values where given, the environment's (matched, per instance where it has them) otherwise."""
        spec = None if model is None else model.bandit
        if model is None or spec is None:  # no environment, or not a bandit: every value must be given
            if noise_std is None or prior_mean is None or prior_var is None:
                given = {"noise_std": noise_std, "prior_mean": prior_mean, "prior_var": prior_var}
                missing = [name for name, value in given.items() if value is None]
                raise ValueError(
                    f"no environment model to read {missing} from: reset the agent with the environment's "
                    "reset info (info['model']) or pass them to the constructor"
                )
        else:
            instance = model.instance
            if spec.reward is not BanditReward.GAUSSIAN and noise_std is None:
                raise ValueError(f"a Gaussian linear model needs Gaussian rewards, the environment has {spec.reward!r}")
            mean, var = spec.prior_moments()
            env: dict[str, Any] = {"noise_std": spec.noise_std, "prior_mean": mean, "prior_var": var}
            for name in env:
                if instance is not None and name in instance:  # one row per run: (B,) for sigma, (B, d) the prior
                    shape = (-1,) if name == "noise_std" else (-1, spec.dim)
                    env[name] = np.asarray(instance[name], dtype=np.float64).reshape(shape)
            noise_std = env["noise_std"] if noise_std is None else noise_std
            prior_mean = env["prior_mean"] if prior_mean is None else prior_mean
            prior_var = env["prior_var"] if prior_var is None else prior_var
        if (
            not (np.all(np.asarray(noise_std) > 0) and np.all(np.asarray(prior_var) > 0))
            or not np.isfinite(prior_mean).all()
        ):
            raise ValueError(f"need noise_std > 0, prior_var > 0 and a finite prior_mean, got {noise_std, prior_var}")
        return cls(*(v if np.ndim(v) else float(v) for v in (noise_std, prior_mean, prior_var)))

    @property
    def per_run(self) -> bool:
        """Whether any part of the model differs between runs (arrays)."""
        return any(np.ndim(v) for v in (self.noise_std, self.prior_mean, self.prior_var))

    @property
    def noise_var(self) -> float | np.ndarray:
        """s2 = sigma^2 (a number, or (B,))."""
        return np.square(self.noise_std) if np.ndim(self.noise_std) else float(self.noise_std) ** 2

    def noise_column(self) -> float | np.ndarray:
        """Sigma as a number or a (B, 1) column, to scale (B, A) widths."""
        return np.reshape(self.noise_std, (-1, 1)) if np.ndim(self.noise_std) else float(self.noise_std)

    def statistics(self, batch_size: int, dim: int) -> RidgeStatistics:
        """Ridge statistics whose estimate is the posterior mean mu_t (regulariser s2/lambda, centre m)."""
        if not self.per_run:
            return RidgeStatistics(
                batch_size, dim, self.noise_var / self.prior_var, center=np.full(dim, self.prior_mean)
            )
        rows = {np.shape(v)[0] for v in (self.noise_std, self.prior_mean, self.prior_var) if np.ndim(v)}
        if rows != {batch_size}:
            raise ValueError(f"the per-instance prior has {sorted(rows)} rows, the agent plays {batch_size} runs")
        reg = np.reshape(self.noise_var, (-1, 1)) / np.asarray(self.prior_var)
        return RidgeStatistics(batch_size, dim, reg, center=self.prior_mean)

    def posterior(self, stats: RidgeStatistics) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean (B, d) and covariance s2 V^{-1} (B, d, d), symmetrised against round-off."""
        s2 = self.noise_var
        cov = (np.reshape(s2, (-1, 1, 1)) if np.ndim(s2) else s2) * stats.gram_inv
        return stats.estimate(), 0.5 * (cov + np.swapaxes(cov, 1, 2))


class GaussianModelMixin:
    """Constructor overrides (None: read from the environment), the resolved model, and their config."""

    env_model: EnvModel | None
    _model: GaussianModel | None

    def _init_model(self, noise_std: float | None, prior_mean: float | None, prior_var: float | None) -> None:
        for name, value in (("noise_std", noise_std), ("prior_var", prior_var)):
            if value is not None:
                check_number(f"{name} (or None: read from the environment)", value, 0.0, True, MAX_SCALE)
        if prior_mean is not None:
            check_number("prior_mean (or None: read from the environment)", prior_mean, max_abs=MAX_SCALE)
        self.noise_std, self.prior_mean, self.prior_var = noise_std, prior_mean, prior_var
        self._model = None

    @property
    def model(self) -> GaussianModel:
        """The model resolved at the last reset."""
        if self._model is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() first")
        return self._model

    def _resolve_model(self) -> GaussianModel:
        self._model = GaussianModel.resolve(self.env_model, self.noise_std, self.prior_mean, self.prior_var)
        return self._model

    def _model_config(self) -> dict[str, Any]:
        """The overrides (None: the environment's) and, after a reset, the values in use (``model_used``)."""
        out: dict[str, Any] = {"noise_std": self.noise_std, "prior_mean": self.prior_mean, "prior_var": self.prior_var}
        if self._model is not None:
            out["model_used"] = per_instance_summary(asdict(self._model))
        return out


class PosteriorMeanGreedy(GaussianModelMixin, IndexAgent):
    """Greedy on the posterior mean: index <a_{t,k}, mu_t> (no exploration bonus)."""

    name = "linear_posterior_mean"
    ridge_statistics = True

    def __init__(
        self,
        noise_std: float | None = None,
        prior_mean: float | None = None,
        prior_var: float | None = None,
        model_used: Mapping[str, float] | None = None,
        seed: int | None = None,
    ) -> None:
        """``model_used`` is what ``config()`` records after a reset; it is re-read at every reset, not used."""
        super().__init__(temperature=0.0, seed=seed)
        self._init_model(noise_std, prior_mean, prior_var)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = self._resolve_model().statistics(self.batch_size, self.dim)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """<a_{t,k}, mu_t>, shape (B, A)."""
        return np.einsum("bad,bd->ba", action_sets, self.stats.estimate())

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(action_sets[np.arange(self.batch_size), actions], rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters and the model used."""
        return {"name": self.name, **self._model_config()}
