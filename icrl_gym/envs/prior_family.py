"""A family of priors over linear-bandit instances, with the hyperparameters drawn per instance.

A transformer pretrained on one task prior is Bayes-optimal for that prior only; trained over a
family wide enough, it has to infer the prior in context.  Each instance first draws its prior's
hyperparameters, then w* from that prior (d = the instance's dimension; coordinates d..d_max-1 of
a zero-padded batch are 0):

- ``hierarchical``: w* ~ N(mu, s^2 I_d), centre mu ~ Unif([-1, 1]^d), scale s log-uniform in
  [0.03, 3] (two decades);
- ``box``: w* ~ Unif([lo, hi]^d), lo ~ Unif[-1, 1], hi - lo log-uniform in [0.1, 2];
- ``sparse``: k ~ Unif{2..d} coordinates (a uniformly random support; k = 1 when d = 1) are N(0, s^2),
  the others 0, s log-uniform in [0.1, 3] (k >= 2 keeps "a single non-zero coordinate" a held-out prior);
- ``direction``: w* = rho u, u uniform on the unit sphere S^{d-1}, rho ~ Unif[rho_lo, rho_hi],
  rho_hi log-uniform in [0.1, 5], rho_lo = rho_hi * Unif[0, 1];
- ``family``: one of the four above, uniformly, per instance.

Every draw also gives the *matched Gaussian prior* N(m, diag(v)) of its instance: the prior itself
for ``hierarchical``, the Gaussian with the same per-coordinate mean and variance otherwise
(box: ((lo + hi) / 2, (hi - lo)^2 / 12); sparse: (0, k s^2 / d); direction: (0, E[rho^2] / d),
E[rho^2] = (rho_lo^2 + rho_lo rho_hi + rho_hi^2) / 3).  It is what the references told the
instance's prior (Bayes-UCB, Thompson sampling, the pretraining expert) assume.

The noise level sigma of an instance is log-uniform in [low, high] (:func:`sample_noise`), and the
Bernoulli family draws Beta(a, b) arm priors with a, b log-uniform in [0.3, 10]
(:func:`sample_beta_priors`).

Everything is numpy, and all randomness comes from the generator passed in (an environment's
``np_random``), so a seed fixes the hyperparameters and the instances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FAMILY_MEMBERS = ("hierarchical", "box", "sparse", "direction")
"""The priors of the family, in the order of :attr:`PriorDraw.member`."""

FAMILY_PRIORS = (*FAMILY_MEMBERS, "family")
"""The ``prior`` values of a :class:`~icrl_gym.envs.bandit_core.BanditSpec` drawn here."""

HIERARCHICAL_SCALE = (0.03, 3.0)
BOX_WIDTH = (0.1, 2.0)
SPARSE_SCALE = (0.1, 3.0)
DIRECTION_RADIUS = (0.1, 5.0)
BETA_PARAMETER = (0.3, 10.0)


@dataclass
class PriorDraw:
    """n instances: w* (n, d_max) and the matched Gaussian prior N(mean, diag(var)) of each.

    ``member`` (n,) indexes :data:`FAMILY_MEMBERS`; ``hyper`` holds the drawn hyperparameters
    (n,) or (n, d_max), for the record.  Padded coordinates have w* = 0, mean 0 and var 1.
    """

    w: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    member: np.ndarray
    hyper: dict[str, np.ndarray]


def log_uniform(rng: np.random.Generator, low: float, high: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Draws whose logarithm is uniform in [log low, log high]."""
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def sample_prior(rng: np.random.Generator, kind: str, dims: np.ndarray, d_max: int) -> PriorDraw:
    """Draw the hyperparameters and w* of ``len(dims)`` instances (instance i has dimension dims[i]).

    Every member's draws are made for all instances (a fixed number of draws whatever the mix), then
    each instance keeps its own member's: the instances of one seed do not depend on ``kind``'s mix.
    """
    if kind not in FAMILY_PRIORS:
        raise ValueError(f"prior must be one of {FAMILY_PRIORS}, got {kind!r}")
    dims = np.asarray(dims, dtype=np.int64)
    n = dims.shape[0]
    if n and (dims.min() < 1 or dims.max() > d_max):
        raise ValueError(f"every dimension must lie in [1, {d_max}], got {dims.min()}..{dims.max()}")
    mask = np.arange(d_max)[None, :] < dims[:, None]  # (n, d_max)
    dimf = dims[:, None].astype(np.float64)
    member = np.asarray(
        rng.integers(0, len(FAMILY_MEMBERS), n) if kind == "family" else np.full(n, FAMILY_MEMBERS.index(kind))
    )
    # hierarchical: N(mu, s^2 I)
    centre = rng.uniform(-1.0, 1.0, (n, d_max))
    scale = log_uniform(rng, *HIERARCHICAL_SCALE, n)
    w_h = centre + scale[:, None] * rng.standard_normal((n, d_max))
    # box: Unif([lo, hi]^d)
    lo = np.asarray(rng.uniform(-1.0, 1.0, n))
    hi = lo + log_uniform(rng, *BOX_WIDTH, n)
    w_b = lo[:, None] + (hi - lo)[:, None] * rng.random((n, d_max))
    # sparse: k random coordinates N(0, s^2)
    k = np.minimum(np.floor(rng.random(n) * (dims - 1)).astype(np.int64) + 2, dims)
    s_sparse = log_uniform(rng, *SPARSE_SCALE, n)
    order = np.argsort(np.where(mask, rng.random((n, d_max)), np.inf), axis=1)  # a random permutation of 0..d-1
    support = np.zeros((n, d_max), dtype=bool)
    np.put_along_axis(support, order, np.arange(d_max)[None, :] < k[:, None], axis=1)
    w_s = np.where(support, s_sparse[:, None] * rng.standard_normal((n, d_max)), 0.0)
    # direction: rho u, u uniform on the sphere of the instance's dimension
    u = rng.standard_normal((n, d_max)) * mask
    u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    rho_hi = log_uniform(rng, *DIRECTION_RADIUS, n)
    rho_lo = rho_hi * rng.random(n)
    rho = rng.uniform(rho_lo, rho_hi)
    w_d = rho[:, None] * u

    pick = [member == i for i in range(len(FAMILY_MEMBERS))]
    w = np.select([p[:, None] for p in pick], [w_h, w_b, w_s, w_d]) * mask
    second = (rho_lo**2 + rho_lo * rho_hi + rho_hi**2) / 3.0
    ones = np.ones((n, d_max))
    mean = np.select([p[:, None] for p in pick], [centre, ((lo + hi) / 2)[:, None] * ones, 0 * ones, 0 * ones])
    var = np.select(
        [p[:, None] for p in pick],
        [
            (scale**2)[:, None] * ones,
            ((hi - lo) ** 2 / 12)[:, None] * ones,
            (k * s_sparse**2)[:, None] / dimf * ones,
            second[:, None] / dimf * ones,
        ],
    )
    mean = np.where(mask, mean, 0.0)
    var = np.where(mask, var, 1.0)
    hyper = {
        "centre": centre * mask,
        "scale": scale,
        "box_low": lo,
        "box_high": hi,
        "support_size": k,
        "sparse_scale": s_sparse,
        "radius_low": rho_lo,
        "radius_high": rho_hi,
    }
    return PriorDraw(w, mean, var, member, hyper)


def sample_noise(rng: np.random.Generator, low: float, high: float, n: int) -> np.ndarray:
    """Sigma of n instances, log-uniform in [low, high] (the constant ``low`` when high == low)."""
    if high == low:
        return np.full(n, float(low))
    return log_uniform(rng, low, high, n)


def sample_beta_priors(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Beta(a, b) arm priors of n instances, a and b log-uniform in :data:`BETA_PARAMETER`."""
    return log_uniform(rng, *BETA_PARAMETER, n), log_uniform(rng, *BETA_PARAMETER, n)


def sample_sphere(rng: np.random.Generator, shape: tuple[int, ...], dims: np.ndarray | int) -> np.ndarray:
    """Vectors uniform on the unit sphere of dimension dims (per leading index), zero-padded: shape (n, ..., d_max)."""
    d_max = shape[-1]
    x = rng.standard_normal(shape)
    mask = np.arange(d_max) < np.reshape(dims, (-1,) + (1,) * (len(shape) - 1))
    x = x * mask
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-300)
