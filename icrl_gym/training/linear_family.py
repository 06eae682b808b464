"""Training instances of the linear generalist drawn over the prior family (its second version).

One batch shares the number of arms A and the horizon T (and whether the action sets are fixed or
redrawn every step); every trajectory draws its own

- dimension d, uniform in [min_dim, max_dim] (zero-padded to d_max);
- kind of arms: one-hot (the Gaussian multi-armed bandit: d = A, only where A <= d_max, or on fixed
  action sets with ``wide_one_hot``, where the arrays are then max(d_max, A) wide), uniform on
  the unit sphere, N(0, I / d) rows or Unif([-1, 1]^d) rows, with the probabilities of the
  configuration;
- prior over w* and its hyperparameters (:func:`icrl_gym.envs.prior_family.sample_prior` with
  ``prior="family"``), which also gives the matched Gaussian prior N(m, diag(v)) that the expert is
  told;
- noise level sigma, log-uniform in [min_noise, max_noise], and whether the model is given it
  (else it sees NaN and estimates sigma in context), with probability 1 - unknown_noise_fraction.

Everything is numpy from the generator passed in (the trainer's per-step generator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icrl_gym.envs.prior_family import sample_noise, sample_prior, sample_sphere

ARM_KINDS = ("cube", "gaussian", "sphere", "one_hot")
"""The kinds of arms of a trajectory, in the order of :attr:`FamilyDraw.arm_kind`."""


@dataclass
class FamilyDraw:
    """B trajectories' instances.

    w* (B, d_max), action sets (B, T or 1, A, d_max) float32, sigma (B,), d (B,), the matched prior mean and
    variance (B, d_max), whether sigma is given to the model (B,), the kind of arms (B,).
    """

    w: np.ndarray
    sets: np.ndarray
    sigma: np.ndarray
    dim: np.ndarray
    prior_mean: np.ndarray
    prior_var: np.ndarray
    noise_known: np.ndarray
    arm_kind: np.ndarray


@dataclass(frozen=True)
class FamilyOptions:
    """The ranges a trajectory's instance is drawn from (module docstring)."""

    dim_range: tuple[int, int]
    """Smallest and largest d."""
    noise_range: tuple[float, float]
    """sigma is log-uniform between these (equal: a fixed sigma)."""
    arm_fractions: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Probabilities of Gaussian, sphere and one-hot arms (the rest: cube)."""
    unknown_noise_fraction: float = 0.0
    """Probability that the model is not given sigma."""
    wide_one_hot: bool = False
    """Allow one-hot arms with A > d_max on fixed action sets: the arrays are then max(d_max, A) wide (the
    Gaussian multi-armed bandit of any K, for a model that plays it from per-arm statistics)."""


def draw_family(
    rng: np.random.Generator,
    batch: int,
    num_arms: int,
    horizon: int,
    per_step: bool,
    d_max: int,
    options: FamilyOptions,
) -> FamilyDraw:
    """Draw B trajectories' instances of A arms and T steps, zero-padded to d_max (module docstring)."""
    dim = rng.integers(options.dim_range[0], options.dim_range[1] + 1, batch)
    u = rng.random(batch)
    edges = np.cumsum(options.arm_fractions)
    arm_kind = 1 + np.searchsorted(edges, u, side="right")  # 1..3 below the total, 4 above: cube
    arm_kind = np.where(arm_kind > 3, 0, arm_kind)
    wide = options.wide_one_hot and not per_step
    if num_arms > d_max and not wide:
        arm_kind = np.where(arm_kind == 3, 0, arm_kind)
    one_hot = arm_kind == 3
    dim = np.where(one_hot, num_arms, dim)
    if wide and one_hot.any():
        d_max = max(d_max, num_arms)
    prior = sample_prior(rng, "family", dim, d_max)
    mask = (np.arange(d_max)[None, :] < dim[:, None]).astype(np.float32)
    shape = (batch, horizon if per_step else 1, num_arms, d_max)
    sets = rng.random(shape, dtype=np.float32) * 2.0 - 1.0  # float32: (B, T, A, d_max) may be large
    gaussian = np.flatnonzero(arm_kind == 1)
    if gaussian.size:
        scale = mask[gaussian] / np.sqrt(dim[gaussian]).astype(np.float32)[:, None]
        sets[gaussian] = rng.standard_normal((gaussian.size, *shape[1:]), dtype=np.float32) * scale[:, None, None, :]
    sphere = np.flatnonzero(arm_kind == 2)
    if sphere.size:
        sets[sphere] = sample_sphere(rng, (sphere.size, *shape[1:]), dim[sphere]).astype(np.float32)
    sets *= mask[:, None, None, :]
    if one_hot.any():
        sets[one_hot] = np.eye(num_arms, d_max, dtype=np.float32)
    sigma = sample_noise(rng, options.noise_range[0], options.noise_range[1], batch)
    known = rng.random(batch) >= options.unknown_noise_fraction
    return FamilyDraw(prior.w, sets, sigma, dim, prior.mean, prior.var, known, arm_kind)
