"""Closed-form posterior features of a linear bandit's history, for the linear generalist's second version.

The first version reads the raw moment matrix of the history and has to invert the posterior
precision with a few attention layers; over a family of priors and noise levels (condition numbers
up to about 1e5) it does not learn to.  The second version is given the inverse instead: for a grid
of Gaussian priors it computes each one's posterior and evidence in closed form, and the network only
has to weigh them (empirical Bayes over the prior in context) and turn them into an index.

Priors of the grid (j = (s, tau), s in :data:`PRIOR_SCALES`, tau in :data:`CENTRE_SCALES`):

    w* ~ N(0, P_j),  P_j = s^2 I + tau^2 m m^T

(m: 1 on the run's d coordinates, 0 on the padding): a common random centre c ~ N(0, tau^2) on every
coordinate plus independent N(0, s^2) deviations, i.e. w* = c 1 + u.  tau = 0 is the zero-centred
ridge prior, tau = 1 learns an intercept-like centre (a box [lo, hi]^d, the Gaussian multi-armed
bandit's U[0, 1] means).

Two models of the rewards r_s = theta(a_s) + eps_s, eps_s ~ N(0, sigma^2), each with the grid:

- **linear** (d <= d_max): theta(x) = <x, w*>.  With the sufficient statistics of the history
  G = sum x x^T, b = sum x r, rr = sum r^2, n (all blocks of the raw moment matrix), the posterior is
  N(mu_j, Lambda_j^{-1}), Lambda_j = G / sigma^2 + P_j^{-1}, mu_j = Lambda_j^{-1} b / sigma^2, and the log
  evidence (marginal likelihood of the n rewards given the arms) is

      log p_j = -1/2 [ rr / sigma^2 - b^T mu_j / sigma^2 + n log(2 pi sigma^2) + log det P_j + log det Lambda_j ].

- **arms** (a fixed action set of K arms): theta_k = c + u_k per arm (the same prior on the arms'
  identities, as if the arms were one-hot), from the per-arm counts n_k and reward sums S_k.  Lambda_j =
  D - gamma 1 1^T with D = diag(n_k / sigma^2 + 1 / s^2), gamma = tau^2 / (s^2 (s^2 + K tau^2)), inverted by
  Sherman-Morrison, and the same evidence formula.  For one-hot arms it is the linear model; for K > d_max
  it is the only one (the Gaussian multi-armed bandit of any K).

Every arm k then reads, per prior j, the posterior mean m_jk and standard deviation sd_jk of its
reward, and the grid is averaged with the posterior weights w_j = softmax_j(log p_j) over the valid
models (Bayesian model averaging: mean m_k, variance sum_j w_j (sd_jk^2 + (m_jk - m_k)^2)).  The
averaged Bayes-UCB index u_k = m_k + z_t sd_k, z_t = max(Phi^{-1}(1 - 1/(t + 1)), 0), is the network's
skip connection: a model with every other weight zero plays Bayes-UCB under the grid's hierarchical
prior.  Means and indices enter relative to the step's best arm and in units of the step's mean sd,
so the features do not depend on the scale of the rewards.

Everything is computed in float64 (rr - b^T mu is a difference of large sums at small sigma) from
state the cache keeps in O(d_max^2 + A) per run, so a step costs the same at t = 1000 as at t = 10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icrl_gym.estimators.gaussian_gittins import gaussian_gittins_table

PRIOR_SCALES = tuple(float(s) for s in torch.logspace(math.log10(0.03), math.log10(3.0), 6, dtype=torch.float64))
"""The grid of prior scales s (log-spaced, 0.03 to 3)."""
CENTRE_SCALES = (0.0, 1.0)
"""The grid of centre scales tau."""
NUM_PRIORS = len(PRIOR_SCALES) * len(CENTRE_SCALES)
"""J, the priors of the grid (per model)."""
LOG_2PI = math.log(2.0 * math.pi)
NOISE_PRIOR_STD, NOISE_PRIOR_COUNT, NOISE_RIDGE = 0.5, 1.0, 1e-2
"""The in-context noise estimate's prior guess s0, its weight nu0 (pseudo-observations) and ridge."""


def grid(device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """s^2 and tau^2 (J,) of the grid, s varying fastest."""
    s = torch.tensor(PRIOR_SCALES, dtype=torch.float64, device=device)
    tau = torch.tensor(CENTRE_SCALES, dtype=torch.float64, device=device)
    return (s**2).repeat(len(CENTRE_SCALES)), (tau**2).repeat_interleave(len(PRIOR_SCALES))


@dataclass
class Posterior:
    """Per-arm posteriors of a grid of priors: means and sds (..., J, A), log evidence (..., J)."""

    mean: torch.Tensor
    sd: torch.Tensor
    log_evidence: torch.Tensor


def linear_posterior(moments: torch.Tensor, arms: torch.Tensor, dims: torch.Tensor, sigma: torch.Tensor) -> Posterior:
    """The linear model's grid posterior (module docstring).

    Raw moments (..., E, E) of the tokens [x, r, 1] (E = d_max + 2), arms (..., A, d_max), d (...) and
    sigma (...), all broadcast over the leading dimensions.  A run's history and arms are zero beyond its d.
    """
    m = moments.double()
    dmax = m.shape[-1] - 2
    s2, tau2 = grid(m.device)
    lead = m.shape[:-2]
    # The coordinates beyond every run's d are zero in the history and the arms: their block of Lambda_j
    # is I / s^2 and cancels against log det P_j, so only the first D = max d coordinates are solved.
    width = min(dmax, int(dims.max())) if dims.numel() else dmax
    mask = (torch.arange(width, device=m.device) < dims.unsqueeze(-1)).double()  # (..., D)
    dimf = dims.double().unsqueeze(-1)  # (..., 1)
    prec = sigma.double().pow(-2).unsqueeze(-1)  # (..., 1)
    gram, b = m[..., :width, :width], m[..., :width, dmax]
    rr, n = m[..., dmax, dmax].unsqueeze(-1), m[..., dmax + 1, dmax + 1].unsqueeze(-1)
    # P_j^{-1} = (I - c_j m m^T) / s^2, c_j = tau^2 / (s^2 + d tau^2)
    c = tau2 / (s2 + dimf * tau2)  # (..., J)
    eye = torch.eye(width, dtype=m.dtype, device=m.device)
    outer = mask.unsqueeze(-1) * mask.unsqueeze(-2)  # (..., D, D)
    prior_prec = (eye - c[..., None, None] * outer.unsqueeze(-3)) / s2[:, None, None]  # (..., J, D, D)
    lam = (gram * prec.unsqueeze(-1)).unsqueeze(-3) + prior_prec
    chol = torch.linalg.cholesky(lam)
    beta = (b * prec).unsqueeze(-2).expand(*lead, s2.shape[0], width)
    mu = torch.cholesky_solve(beta.unsqueeze(-1), chol).squeeze(-1)  # (..., J, D)
    x = arms[..., :width].double()
    mean = torch.einsum("...ad,...jd->...ja", x, mu)
    half = torch.linalg.solve_triangular(chol, x.transpose(-1, -2).unsqueeze(-3), upper=False)  # (..., J, D, A)
    sd = half.pow(2).sum(-2).sqrt()
    logdet_lam = 2.0 * torch.diagonal(chol, dim1=-2, dim2=-1).log().sum(-1)
    logdet_p = width * s2.log() + torch.log1p(dimf * tau2 / s2)
    quad = (beta * mu).sum(-1)
    log_ev = -0.5 * (rr * prec - quad + n * (LOG_2PI - prec.log()) + logdet_p + logdet_lam)
    return Posterior(mean, sd, log_ev)


def arm_posterior(
    counts: torch.Tensor, sums: torch.Tensor, rr: torch.Tensor, n: torch.Tensor, sigma: torch.Tensor
) -> Posterior:
    """The independent-arms model's grid posterior (module docstring).

    Per-arm pull counts and reward sums (..., A), sum of squared rewards rr, steps n and sigma (...).
    """
    s2, tau2 = grid(counts.device)
    num = counts.shape[-1]
    prec = sigma.double().pow(-2)[..., None, None]  # (..., 1, 1)
    diag = counts.double().unsqueeze(-2) * prec + 1.0 / s2[:, None]  # (..., J, A): D
    gamma = (tau2 / (s2 * (s2 + num * tau2)))[:, None]  # (J, 1)
    inv = 1.0 / diag
    h = inv.sum(-1, keepdim=True)
    kappa = gamma / (1.0 - gamma * h)  # (..., J, 1)
    beta = sums.double().unsqueeze(-2) * prec  # (..., 1, A)
    mean = beta * inv + kappa * (beta * inv).sum(-1, keepdim=True) * inv
    sd = (inv + kappa * inv**2).sqrt()
    logdet_lam = diag.log().sum(-1) + torch.log1p(-gamma[:, 0] * h[..., 0])
    logdet_p = num * s2.log() + torch.log1p(num * tau2 / s2)
    quad = (beta * mean).sum(-1)
    p = prec[..., 0]
    log_ev = -0.5 * (rr.double().unsqueeze(-1) * p - quad + n.double().unsqueeze(-1) * (LOG_2PI - p.log()))
    log_ev = log_ev - 0.5 * (logdet_p + logdet_lam)
    return Posterior(mean, sd, log_ev)


def model_average(posteriors: list[Posterior], valid: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Bayesian model average over the grids of several models.

    ``valid`` (...) per model: where it is False that model's priors get weight 0.  Returns the
    weights (..., J_total), the averaged mean and sd (..., A).
    """
    log_ev = torch.cat(
        [torch.where(ok.unsqueeze(-1), p.log_evidence, -math.inf) for p, ok in zip(posteriors, valid, strict=True)], -1
    )
    weights = torch.softmax(log_ev, dim=-1)
    means = torch.cat([p.mean for p in posteriors], -2)
    sds = torch.cat([p.sd for p in posteriors], -2)
    w = weights.unsqueeze(-1)
    mean = (w * means).sum(-2)
    var = (w * (sds**2 + (means - mean.unsqueeze(-2)) ** 2)).sum(-2)
    return weights, mean, var.sqrt()


def ridge_linear(moments: torch.Tensor, arms: torch.Tensor, dims: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """LinUCB's ridge estimate and width (lambda = 1, Appendix E.2) of every arm, from the raw moments.

    With V = I + G and the ridge estimate w = V^{-1} b (G, b: blocks of the raw moment matrix (..., E, E)),
    arm x_k (..., A, d_max) reads the mean <x_k, w> and the width sqrt(x_k^T V^{-1} x_k), both (..., A):
    LinUCB(alpha)'s index is their sum with weight alpha on the width.  sigma is not used (LinUCB does not
    scale by it).  Only the first max(d) coordinates are solved, as in :func:`linear_posterior`.
    """
    m = moments.double()
    dmax = m.shape[-1] - 2
    width = min(dmax, int(dims.max())) if dims.numel() else dmax
    eye = torch.eye(width, dtype=m.dtype, device=m.device)
    chol = torch.linalg.cholesky(m[..., :width, :width] + eye)
    w = torch.cholesky_solve(m[..., :width, dmax].unsqueeze(-1), chol).squeeze(-1)  # (..., D)
    x = arms[..., :width].double()
    half = torch.linalg.solve_triangular(chol, x.transpose(-1, -2), upper=False)  # (..., D, A)
    return torch.einsum("...ad,...d->...a", x, w), half.pow(2).sum(-2).sqrt()


def ridge_arms(counts: torch.Tensor, sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """LinUCB's ridge mean S_k / (n_k + 1) and width 1 / sqrt(n_k + 1) of every arm (..., A) on one-hot arms.

    :func:`ridge_linear` with x_k = e_k: V = I + diag(n), so each arm is its own ridge regression; it serves
    the fixed action sets wider than d_max.
    """
    c = counts.double() + 1.0
    return sums.double() / c, c.rsqrt()


def bayes_ucb_quantile(steps: torch.Tensor) -> torch.Tensor:
    """z_t = max(Phi^{-1}(1 - 1 / (t + 1)), 0) at 0-based steps t (the pretraining expert's schedule)."""
    p = 1.0 - 1.0 / (steps.double() + 1.0)
    return (math.sqrt(2.0) * torch.erfinv(2.0 * p - 1.0)).clamp_min(0.0).nan_to_num(0.0, posinf=0.0)


def moss_quantile(
    sd: torch.Tensor, sigma: torch.Tensor, steps: torch.Tensor, horizon: torch.Tensor, directions: torch.Tensor
) -> torch.Tensor:
    """The horizon-aware width z_tk = sqrt(2 log+((T - t) sd_k^2 / (D sigma^2))) (..., A) of the skip index.

    MOSS's confidence width (Audibert & Bubeck, 2009), sqrt(log+(T / (K n_k)) / n_k) in reward units, written in
    posterior units: an arm's effective pulls are n_k = sigma^2 / sd_k^2 and the index is m_k + z_tk sd_k.  The
    horizon is the steps left, T - t (the refinement of Lattimore, 2018), and K becomes the directions D = min(d, A)
    the steps are shared among.  Unlike Bayes-UCB's z_t it stops exploring an arm once it has had its share of
    the steps left (z = 0: greedy on the posterior mean), which a short horizon with many arms rewards, and keeps
    exploring arms the posterior is unsure of at a long one.  ``sd`` (..., A), ``sigma`` and 0-based ``steps``
    t (...), ``horizon`` T and ``directions`` D broadcast against ``steps``.
    """
    left = (horizon.double() - steps.double()).clamp_min(1.0)
    ratio = left.unsqueeze(-1) * sd.double().square() / (directions.double() * sigma.double().square()).unsqueeze(-1)
    return (2.0 * ratio.clamp_min(1e-300).log().clamp_min(0.0)).sqrt()


def gittins_quantile(sd: torch.Tensor, sigma: torch.Tensor, steps: torch.Tensor, horizon: torch.Tensor) -> torch.Tensor:
    """The finite-horizon Gittins width z(n_k, T - t) (..., A) of independent Gaussian arms, in posterior sds.

    The index m_k + z sd_k of an arm whose pulls inform only itself is the Gittins index of a Gaussian arm with
    known noise sigma, effective pulls n_k = sigma^2 / sd_k^2 and T - t pulls left
    (:mod:`icrl_gym.estimators.gaussian_gittins`, read linearly in log n).  Unlike MOSS's width it does not
    divide the steps left among the arms: a fresh arm of a many-armed bandit gets less optimism and an arm pulled
    a few times more, so the policy keeps a good arm longer and tries fewer.  ``sd`` (..., A), ``sigma`` and
    0-based ``steps`` t (...), ``horizon`` T broadcast against ``steps``.
    """
    left = (horizon.long() - steps.long()).clamp(1, None).unsqueeze(-1).expand(sd.shape)
    effective = (sigma.double().unsqueeze(-1) / sd.double().clamp_min(1e-300)).square()
    table = gaussian_gittins_table(int(left.max()))
    width = table.width(effective.detach().cpu().numpy(), left.cpu().numpy())
    return torch.as_tensor(width, dtype=torch.float64, device=sd.device)


def estimate_noise_arms(counts: torch.Tensor, sums: torch.Tensor, rr: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """In-context sigma (...) of a fixed action set from per-arm counts and sums (..., A), rr and n (...).

    The residual sum of squares around the arms' own means, RSS = rr - sum_k S_k^2 / n_k, with the
    prior guess of :func:`icrl_gym.models.linear_generalist.estimate_noise`:
    sigma_hat^2 = (RSS + nu0 s0^2) / (max(n - K_pulled, 0) + nu0).
    """
    c = counts.double()
    fit = (sums.double() ** 2 / c.clamp_min(1.0)).sum(-1)
    rss = (rr.double() - fit).clamp_min(0.0)
    dof = (n.double() - (c > 0).double().sum(-1)).clamp_min(0.0) + NOISE_PRIOR_COUNT
    return ((rss + NOISE_PRIOR_COUNT * NOISE_PRIOR_STD**2) / dof).sqrt()
