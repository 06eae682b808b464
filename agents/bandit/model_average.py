"""Model-averaged Bayes-UCB: a linear-bandit index that is told neither the prior nor the noise level.

The agent keeps the exact posterior of a grid of M Gaussian models of the rewards
r_t = <x_t, w*> + eps_t and averages them with their posterior weights (Bayesian model averaging, the
evidence of every model computed in context).  Model m = (s, tau) is the prior, in units of the noise
variance sigma^2,

    w* | sigma^2 ~ N(0, sigma^2 P_m),   P_m = s^2 I + tau^2 1 1^T,

a common random centre c ~ N(0, sigma^2 tau^2) on every coordinate plus independent deviations (tau = 0:
the zero-centred ridge prior; tau > 0 learns an intercept-like centre, as in a box prior or the Gaussian
multi-armed bandit's U[0, 1] means).  Every model's posterior is kept as a Kalman filter, one rank-one
update per step (Sherman-Morrison) instead of a solve:

    q = x^T V x,  e = r - x^T mu,  mu <- mu + V x e / (1 + q),  V <- V - V x x^T V / (1 + q),

with V = (P_m^{-1} + sum_s x_s x_s^T)^{-1}, so w* | D ~ N(mu, sigma^2 V).  Its log evidence grows by the
log predictive density of each reward (the chain rule of the marginal likelihood):

- **sigma known** (the environment's, or ``noise_std=``): r_t | D ~ N(x^T mu, sigma^2 (1 + q)), and the
  grid is absolute, P_m = (s^2 I + tau^2 1 1^T) / sigma^2 with s in :data:`PRIOR_SCALES`, tau in
  :data:`CENTRE_SCALES`;
- **sigma unknown**: sigma^2 ~ InvGamma(a, b) (normal-inverse-gamma, conjugate), a <- a + 1/2,
  b <- b + e^2 / (2 (1 + q)), and r_t | D is Student-t with 2a degrees of freedom, location x^T mu and
  scale^2 (b / a)(1 + q); the grid is relative to the noise, s in :data:`RELATIVE_SCALES`.

**An anchor prior** (``anchor=(m0, v0)``, e.g. the prior a pretrained model was trained on) adds the model
w* ~ N(m0 1, v0 I) to the grid with prior mass ``anchor_mass`` (the grid shares the rest): its posterior
weight (:meth:`ModelAveragedBayesUCB.anchor_weight`) is the in-context evidence that the bandit comes from
that prior.  With sigma unknown it enters once per noise level sigma_i of :data:`ANCHOR_NOISES`, each a
model with that noise level fixed (Gaussian predictive, P = v0 I / sigma_i^2 in its noise units), and the
evidence picks the level; its prior variance does not scale with the grid's inferred sigma.

Each arm k reads per model the posterior mean m_mk = x_k^T mu_m and variance v_mk = sigma_m^2 x_k^T V_m x_k
of its reward (sigma_m^2 = b_m / a when unknown).  With the posterior weights
w_m = softmax_m(log prior mass + log evidence), the prior mass uniform over the grid, the average is

    m_k = sum_m w_m m_mk,   var_k = sum_m w_m (v_mk + (m_mk - m_k)^2),

and the index is Bayes-UCB's (Kaufmann et al., 2012) u_k = m_k + z_t sqrt(var_k), z_t = Phi^{-1}(1 - 1/t)
at step t >= 1.  It is the uninformed reference of the linear generalist's acceptance and the robust index
of its safety net (:mod:`agents.safety_net`).  On one-hot arms (a K-armed Gaussian bandit)
x_k^T mu = mu_k and x_k^T V x_k = V_kk, so scoring costs O(M K) and an update O(M K^2).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import gammaln, ndtri

from agents.bandit.bayes_ucb import quantile_level
from agents.bandit.index_agent import IndexAgent
from icrl_gym.agent_base import resolve_horizon
from icrl_gym.envs.bandit_core import BanditReward
from icrl_gym.envs.validation import MAX_SCALE, check_number
from icrl_gym.estimators.gaussian_gittins import gaussian_gittins_table

PRIOR_SCALES = tuple(float(s) for s in np.geomspace(0.03, 3.0, 6))
"""Absolute prior scales s of the grid when sigma is known (0.03 to 3, log-spaced)."""
CENTRE_SCALES = (0.0, 1.0)
"""Absolute centre scales tau when sigma is known."""
RELATIVE_SCALES = tuple(float(s) for s in np.geomspace(0.01, 100.0, 9))
"""Prior scales s in units of sigma when sigma is unknown (0.01 to 100, log-spaced)."""
RELATIVE_CENTRES = (0.0, 10.0)
"""Centre scales tau in units of sigma when sigma is unknown (none, or a nearly flat intercept)."""
ANCHOR_NOISES = tuple(float(s) for s in np.geomspace(0.05, 3.2, 7))
"""The noise levels at which an anchor prior enters the grid when sigma is unknown (0.05 to 3.2, doubling)."""
NOISE_PRIOR_SHAPE, NOISE_PRIOR_SCALE = 1.0, 0.25
"""sigma^2 ~ InvGamma(a0, b0) when unknown: a0 = 1 (one pseudo-observation), b0 = 0.25 (a guess sigma ~ 0.5)."""
LOG_2PI = float(np.log(2.0 * np.pi))
UNINFORMED_REFERENCES: dict[str, dict[str, Any]] = {
    **{f"LinUCB (alpha={a:g})": {"name": "linucb", "alpha": a} for a in (0.5, 1.0, 2.0)},
    "TS, N(0, I)": {"name": "linear_ts", "prior_mean": 0.0, "prior_var": 1.0},
    "Bayes-UCB, N(0, I)": {"name": "linear_bayes_ucb", "prior_mean": 0.0, "prior_var": 1.0},
    "model-averaged Bayes-UCB": {"name": "model_averaged_bayes_ucb"},
}
"""The linear-bandit rules told neither the prior nor (the model average) the noise: row name -> agent spec.

A linear generalist is judged against the best of these in a cell (the lowest mean regret): LinUCB with
alpha in {0.5, 1, 2}, linear TS and Bayes-UCB with a fixed N(0, I) prior (told sigma), and this module's
model-averaged Bayes-UCB."""


def prior_grid(dim: int, scales: tuple[float, ...], centres: tuple[float, ...]) -> np.ndarray:
    """The prior covariances P_m = s^2 I + tau^2 1 1^T (M, d, d), m running over centres, then scales."""
    eye, ones = np.eye(dim), np.ones((dim, dim))
    return np.stack([s * s * eye + tau * tau * ones for tau in centres for s in scales])


def student_t_logpdf(x: np.ndarray, df: float, scale2: np.ndarray) -> np.ndarray:
    """The log density of a centred Student-t with ``df`` degrees of freedom and squared scale ``scale2`` at ``x``."""
    half = 0.5 * (df + 1.0)
    return (
        gammaln(half)
        - gammaln(0.5 * df)
        - 0.5 * (np.log(df * np.pi) + np.log(scale2))
        - half * np.log1p(x * x / (df * scale2))
    )


class ModelAveragedBayesUCB(IndexAgent):
    """Bayes-UCB under the evidence-weighted average of a grid of Gaussian priors (module docstring).

    ``noise_std``: sigma, or None to read it from the environment (its reset ``info["model"]``, per run
    where the environment draws it) and to estimate it in context when the environment does not state it
    (``noise_known=False``, or no environment model).
    """

    name = "model_averaged_bayes_ucb"
    ridge_statistics = True

    def __init__(
        self,
        noise_std: float | None = None,
        anchor: tuple[float, float] | list[float] | None = None,
        anchor_mass: float = 0.5,
        seed: int | None = None,
    ) -> None:
        super().__init__(temperature=0.0, seed=seed)
        if noise_std is not None:
            check_number("noise_std (or None: the environment's, else estimated)", noise_std, 0.0, True, MAX_SCALE)
        if anchor is not None:
            if len(anchor) != 2:
                raise ValueError(f"anchor is (mean, variance) of every coordinate of w*, got {anchor!r}")
            check_number("anchor mean", anchor[0], max_abs=MAX_SCALE)
            check_number("anchor variance", anchor[1], 0.0, True, MAX_SCALE)
            anchor = (float(anchor[0]), float(anchor[1]))
        self.noise_std, self.anchor = noise_std, anchor
        self.anchor_mass = check_number("anchor_mass", anchor_mass, 0.0, True)
        if self.anchor_mass >= 1.0:
            raise ValueError(f"anchor_mass is the anchor's prior probability, in (0, 1), got {anchor_mass}")
        self.noise: np.ndarray | None = None
        """sigma (B,) when known; None while it is estimated."""

    # ------------------------------------------------------------------ the noise level
    def _known_noise(self) -> np.ndarray | None:
        """The noise level (B,): the constructor's, else the environment's where it states it, else None."""
        if self.noise_std is not None:
            return np.full(self.batch_size, float(self.noise_std))
        if "noise_std" in self.reset_info:
            return np.full(self.batch_size, float(self.reset_info["noise_std"]))
        spec = None if self.env_model is None else self.env_model.bandit
        if spec is None or not spec.noise_known or spec.reward is not BanditReward.GAUSSIAN:
            return None  # not stated, or not Gaussian noise (Bernoulli rewards): estimated in context
        instance = self.env_model.instance if self.env_model is not None else None
        if instance is not None and "noise_std" in instance:
            return np.broadcast_to(np.asarray(instance["noise_std"], dtype=np.float64).reshape(-1), (self.batch_size,))
        return np.full(self.batch_size, float(spec.noise_std))

    def _memory_bytes(self) -> int:
        """The M posterior covariances (B, M, d, d) and the per-model scores (B, M, A) on top of the base's."""
        models = len(RELATIVE_SCALES) * len(RELATIVE_CENTRES) + len(ANCHOR_NOISES)
        return super()._memory_bytes() + 8 * self.batch_size * models * (
            self.dim * (self.dim + 2) + 3 * self.num_actions
        )

    def _reset(self, w_star: np.ndarray | None) -> None:
        known = self._known_noise()
        self.noise = None if known is None else np.asarray(known, dtype=np.float64).copy()
        b, d = self.batch_size, self.dim
        if self.noise is not None:
            if not (np.all(self.noise > 0) and np.all(np.isfinite(self.noise))):
                raise ValueError(f"the noise level sigma must be positive and finite, got {self.noise}")
            grid = prior_grid(d, PRIOR_SCALES, CENTRE_SCALES)[None]  # absolute, to noise units per run
            anchor_noise = self.noise[:, None]  # (B, 1): the anchor once, at the known sigma
        else:
            grid = prior_grid(d, RELATIVE_SCALES, RELATIVE_CENTRES)[None]
            anchor_noise = np.broadcast_to(np.asarray(ANCHOR_NOISES), (b, len(ANCHOR_NOISES)))
        unit = 1.0 if self.noise is None else np.square(self.noise)[:, None, None, None]
        covs, means = [np.broadcast_to(grid / unit, (b, *grid.shape[1:]))], [np.zeros((b, grid.shape[1], d))]
        self.is_anchor = np.zeros(grid.shape[1], dtype=bool)
        log_prior = [np.full(grid.shape[1], -np.log(grid.shape[1]))]
        if self.anchor is not None:
            m0, v0 = self.anchor
            k = anchor_noise.shape[1]
            covs.append(v0 / np.square(anchor_noise)[:, :, None, None] * np.eye(d))
            means.append(np.full((b, k, d), m0))
            self.is_anchor = np.concatenate([self.is_anchor, np.ones(k, dtype=bool)])
            rest = np.log1p(-self.anchor_mass)
            log_prior = [lp + rest for lp in log_prior] + [np.full(k, np.log(self.anchor_mass / k))]
        known_var = np.nan if self.noise is None else np.square(self.noise)[:, None]
        noise_var = [np.broadcast_to(known_var, (b, grid.shape[1]))]
        if self.anchor is not None:
            noise_var.append(np.square(anchor_noise))
        self.model_noise = np.broadcast_to(np.concatenate(noise_var, axis=1), (b, len(self.is_anchor))).copy()
        """sigma_m^2 (B, M) of the models with a fixed noise level; NaN for the normal-inverse-gamma ones."""
        self.cov = np.concatenate(covs, axis=1)
        self.mean = np.concatenate(means, axis=1)
        models = self.cov.shape[1]
        self.log_evidence = np.broadcast_to(np.concatenate(log_prior), (b, models)).copy()
        self.shape = NOISE_PRIOR_SHAPE
        self.rate = np.full((self.batch_size, models), NOISE_PRIOR_SCALE)

    # ------------------------------------------------------------------ posterior and index
    def weights(self, anchor: bool = True) -> np.ndarray:
        """The models' posterior weights (B, M) = softmax(log evidence); ``anchor=False``: the grid's alone."""
        log_evidence = self.log_evidence if anchor else np.where(self.is_anchor, -np.inf, self.log_evidence)
        z = log_evidence - log_evidence.max(axis=1, keepdims=True)
        w = np.exp(z)
        return w / w.sum(axis=1, keepdims=True)

    def anchor_weight(self) -> np.ndarray:
        """The posterior weight (B,) of the anchor prior (0 without one)."""
        return self.weights()[:, self.is_anchor].sum(axis=1)

    def noise_variance(self) -> np.ndarray:
        """sigma_m^2 (B, M): the known sigma^2, or the inverse-gamma's b_m / a."""
        return np.where(np.isnan(self.model_noise), self.rate / self.shape, self.model_noise)

    def arm_posterior(self, action_sets: np.ndarray, anchor: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The model-averaged posterior mean (B, A) and standard deviation (B, A) of every arm's mean reward.

        ``anchor=False`` averages the grid alone (the anchor prior left out, its weight still kept).
        """
        if self.one_hot_arms:
            means = self.mean  # (B, M, K): x_k = e_k
            quad = np.diagonal(self.cov, axis1=2, axis2=3)
        else:
            means = np.einsum("bad,bmd->bma", action_sets, self.mean)
            quad = np.einsum("bad,bmde,bae->bma", action_sets, self.cov, action_sets, optimize=True)
        var = self.noise_variance()[:, :, None] * np.maximum(quad, 0.0)
        w = self.weights(anchor)[:, :, None]
        mean = (w * means).sum(axis=1)
        spread = (w * (var + np.square(means - mean[:, None, :]))).sum(axis=1)
        return mean, np.sqrt(spread)

    def quantile(self) -> float:
        """z_t = Phi^{-1}(1 - 1/t) at step t = self.t + 1 (0 at the first step)."""
        return float(max(ndtri(quantile_level(self.t + 1, 1, 0.0)), 0.0))

    def upper(self, action_sets: np.ndarray, anchor: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The index u_k = m_k + z_t sd_k (B, A) and sd_k (B, A); ``anchor`` as in :meth:`arm_posterior`."""
        mean, sd = self.arm_posterior(action_sets, anchor)
        return mean + self.quantile() * sd, sd

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """u_k = m_k + z_t sd_k, shape (B, A)."""
        return self.upper(action_sets)[0]

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        x = action_sets[np.arange(self.batch_size), actions]  # (B, d)
        vx = np.einsum("bmde,be->bmd", self.cov, x)
        q = np.maximum(np.einsum("bmd,bd->bm", vx, x), 0.0)
        err = rewards[:, None] - np.einsum("bmd,bd->bm", self.mean, x)
        spread = 1.0 + q
        fixed = ~np.isnan(self.model_noise)
        var = np.where(fixed, self.model_noise, 1.0) * spread
        gaussian = -0.5 * (LOG_2PI + np.log(var) + err * err / var)
        self.log_evidence += np.where(
            fixed, gaussian, student_t_logpdf(err, 2.0 * self.shape, self.rate / self.shape * spread)
        )
        self.rate = self.rate + 0.5 * err * err / spread  # read only by the normal-inverse-gamma models
        self.shape += 0.5
        self.mean += vx * (err / spread)[:, :, None]
        self.cov -= np.einsum("bmd,bme->bmde", vx, vx / spread[:, :, None])

    def noise_estimate(self) -> np.ndarray:
        """The model-averaged posterior mean of sigma^2, square-rooted (B,): the known sigma when given."""
        if self.noise is not None:
            return self.noise.copy()
        mean_var = np.where(np.isnan(self.model_noise), self.rate / max(self.shape - 1.0, 0.5), self.model_noise)
        return np.sqrt((self.weights() * mean_var).sum(axis=1))

    def config(self) -> dict[str, Any]:
        """Hyper-parameters: sigma (None: the environment's, else estimated) and the anchor prior.

        No temperature: the index is played greedily and the constructor takes none, so ``make_agent(config())``
        rebuilds the agent.
        """
        out = {k: v for k, v in super().config().items() if k != "temperature"}
        return {**out, "noise_std": self.noise_std, "anchor": self.anchor, "anchor_mass": self.anchor_mass}


def moss_width(mean_sd: np.ndarray, noise: np.ndarray, steps_left: int, directions: int) -> np.ndarray:
    """z_tk = sqrt(2 log+((T - t) sd_k^2 / (D sigma^2))) (B, A): MOSS's width in posterior sds.

    MOSS (Audibert & Bubeck, 2009) explores arm k by sqrt(log+(T / (K n_k)) / n_k) in reward units; an arm's
    effective pulls under a posterior are n_k = sigma^2 / sd_k^2, the horizon is the steps left T - t (Lattimore,
    2018) and K becomes the D = min(d, A) directions the steps are shared among.  ``mean_sd`` (B, A) are the arms'
    posterior sds, ``noise`` (B,) sigma.
    """
    ratio = steps_left * np.square(mean_sd) / (directions * np.square(noise)[:, None])
    return np.sqrt(2.0 * np.maximum(np.log(np.maximum(ratio, 1e-300)), 0.0))


class ModelAveragedMOSS(ModelAveragedBayesUCB):
    """The model-averaged posterior with a horizon-aware width: u_k = m_k + c z_tk sd_k (:func:`moss_width`).

    The same evidence-weighted grid as :class:`ModelAveragedBayesUCB`, told neither the prior nor (where the
    environment does not state it) the noise, with Bayes-UCB's z_t = Phi^{-1}(1 - 1/t) replaced by MOSS's width on
    the steps left.  Bayes-UCB's z_t grows with t whatever the horizon, so with many arms and few steps it
    explores every arm it is unsure of (about 1.45x LinUCB(alpha = 1) on a 20-armed Gaussian bandit of U[0, 1]
    means at T = 200, and 1.55x LinUCB(alpha = 2) under w* ~ N(0, I)); MOSS stops exploring an arm once its
    effective pulls reach its share (T - t) / D of the steps left, and keeps z near Bayes-UCB's for arms it
    knows little of.  ``scale`` is c; T is the environment's, or ``reset(..., horizon=T)``'s.  It is not one of
    the acceptance's :data:`UNINFORMED_REFERENCES`, and it is the second version's skip index with
    ``skip_schedule="moss"`` (:func:`icrl_gym.models.linear_posterior.moss_quantile`, the same width).
    """

    name = "model_averaged_moss"

    def __init__(self, scale: float = 0.8, noise_std: float | None = None, seed: int | None = None) -> None:
        super().__init__(noise_std=noise_std, seed=seed)
        self.scale = check_number("scale", scale, 0.0, True, MAX_SCALE)
        self.used_horizon = 0
        """T of the runs, the environment's or ``reset(..., horizon=T)``'s."""

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.used_horizon = resolve_horizon(self.reset_info, None, "the model-averaged MOSS index")
        super()._reset(w_star)

    def upper(self, action_sets: np.ndarray, anchor: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The index u_k = m_k + c z_tk sd_k (B, A) and sd_k (B, A), z_tk of :func:`moss_width` at t = self.t."""
        mean, sd = self.arm_posterior(action_sets, anchor)
        left = max(self.used_horizon - self.t, 1)
        z = moss_width(sd, self.noise_estimate(), left, min(self.dim, self.num_actions))
        return mean + self.scale * z * sd, sd

    def config(self) -> dict[str, Any]:
        """Hyper-parameters: c and sigma (None: the environment's, else estimated)."""
        out = {k: v for k, v in super().config().items() if k not in ("anchor", "anchor_mass")}
        return {**out, "scale": self.scale}


class ModelAveragedGittins(ModelAveragedMOSS):
    """The model-averaged posterior with the finite-horizon Gittins width on a multi-armed bandit.

    On one-hot arms (a K-armed Gaussian bandit) the index is u_k = m_k + z(n_k, T - t) sd_k, the Gittins index of
    a Gaussian arm with posterior N(m_k, sd_k^2), effective pulls n_k = sigma^2 / sd_k^2 and T - t pulls left
    (:mod:`icrl_gym.estimators.gaussian_gittins`; sigma the environment's or estimated); elsewhere it is
    :class:`ModelAveragedMOSS`'s index with constant ``scale``.  The Gittins index is Bayes-optimal's index for
    independent arms told their prior; here the prior is the grid's evidence-weighted average, moment-matched per
    arm.  It is the second version's skip index with ``skip_schedule="gittins"``
    (:func:`icrl_gym.models.linear_posterior.gittins_quantile`), and not one of the acceptance's references.
    """

    name = "model_averaged_gittins"

    def __init__(self, scale: float = 1.0, noise_std: float | None = None, seed: int | None = None) -> None:
        super().__init__(scale=scale, noise_std=noise_std, seed=seed)

    def upper(self, action_sets: np.ndarray, anchor: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The index (B, A) and sd_k (B, A): the Gittins width on one-hot arms, MOSS's elsewhere."""
        if not self.one_hot_arms:
            return super().upper(action_sets, anchor)
        mean, sd = self.arm_posterior(action_sets, anchor)
        left = max(self.used_horizon - self.t, 1)
        effective = np.square(self.noise_estimate())[:, None] / np.maximum(np.square(sd), 1e-300)
        width = gaussian_gittins_table(left).width(effective, np.full(sd.shape, left))
        return mean + width * sd, sd
