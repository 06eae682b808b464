"""The linear generalist's expert and its rollouts (:mod:`icrl_gym.training.linear_generalist`).

The instances of a batch (:class:`Instances`), the Gaussian-posterior index expert with the matched
prior (:func:`expert_statistics`, :func:`expert_z`), the behaviour's rollout (:func:`rollout`) and
the batch it yields (:class:`Batch`, :func:`targets_from_index`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ndtri

from icrl_gym.estimators.statistics import RidgeStatistics, gaussian_index
from icrl_gym.models.linear_generalist import LinearGeneralistTransformer
from icrl_gym.models.policy import EnvInfo

EXPERT_SCHEDULES = ("constant", "bayes_ucb")
"""How the expert's z evolves over a run (``expert_schedule``)."""

PRIOR_MEAN, PRIOR_VAR = 0.5, 1.0 / 12.0
"""The matched Gaussian prior N(1/2, I/12) of w* ~ U[0, 1]^d."""


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
        arrays = ("w", "sets", "noise", "sigma", "dim")
        return dataclasses.replace(self, **{name: getattr(self, name)[index] for name in arrays})


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


def expert_statistics(
    sigma: np.ndarray, d_max: int, prior_mean: np.ndarray | None = None, prior_var: np.ndarray | None = None
) -> RidgeStatistics:
    """The expert's posterior (module docstring) as ridge statistics of B runs with noise sigma (B,).

    The prior is N(m, diag(v)) per run (``prior_mean``, ``prior_var`` (B, d_max)), N(1/2, I/12) when not
    given: regulariser sigma^2 / v and centre m, so that the ridge estimate is the posterior mean and
    sigma^2 V^{-1} the posterior covariance (:func:`icrl_gym.estimators.statistics.gaussian_index` reads the index).
    """
    var = PRIOR_VAR if prior_var is None else prior_var
    mean = PRIOR_MEAN if prior_mean is None else prior_mean
    return RidgeStatistics(sigma.shape[0], d_max, (sigma**2)[:, None] / var, center=mean)


def expert_z(z: float, schedule: str, t: int) -> float:
    """The expert's z at step t (0-based): ``z`` ('constant') or max(Phi^{-1}(1 - 1/(t + 1)), 0) ('bayes_ucb')."""
    if schedule not in EXPERT_SCHEDULES:
        raise ValueError(f"expert_schedule must be one of {EXPERT_SCHEDULES}, got {schedule!r}")
    return z if schedule == "constant" else max(float(ndtri(1.0 - 1.0 / (t + 1))), 0.0)


def rollout(
    inst: Instances,
    epsilon: np.ndarray,
    rng: np.random.Generator,
    z: float,
    model: LinearGeneralistTransformer | None = None,
    schedule: str = "constant",
    behaviour: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Play eps-expert (``model`` None) or eps-greedy model on ``inst``.

    ``behaviour`` (prior mean and variance (B, width)): without a model, play the same index policy told
    this prior instead of the instance's (the labels stay the expert's).

    Returns actions (B, T), rewards (B, T), the expert index (B, T, A) before every step and the
    per-run pseudo-regret (B,).
    """
    b, horizon = inst.noise.shape
    num_arms = inst.sets.shape[2]
    width = inst.sets.shape[-1]
    expert = expert_statistics(inst.sigma, width, inst.prior_mean, inst.prior_var)
    actions = np.zeros((b, horizon), dtype=np.int64)
    rewards = np.zeros((b, horizon))
    index = np.zeros((b, horizon, num_arms), dtype=np.float32)
    regret = np.zeros(b)
    rows = np.arange(b)
    actor = None if behaviour is None or model is not None else expert_statistics(inst.sigma, width, *behaviour)
    cache = None
    prev: tuple[torch.Tensor, torch.Tensor] | tuple[None, None] = (None, None)
    if model is not None:
        device = next(model.parameters()).device  # the model plays where its weights are
        d_max = model.config.d_max
        noise, dims = tuple(inst.model_noise().tolist()), tuple(inst.dim.tolist())  # per run
        info = EnvInfo(num_actions=num_arms, horizon=horizon, dim=d_max, run_noise_std=noise, run_dims=dims)
        cache = model.new_cache(b, info, device)
    for t in range(horizon):
        arms = inst.action_set(t).astype(np.float64)
        index[:, t] = gaussian_index(expert, arms, inst.sigma, expert_z(z, schedule, t))
        if actor is not None:
            greedy = gaussian_index(actor, arms, inst.sigma, expert_z(z, schedule, t)).argmax(axis=1)
        elif model is None or cache is None:
            greedy = index[:, t].argmax(axis=1)
        else:
            arms_t = torch.as_tensor(arms, dtype=torch.float32, device=device)
            greedy = model.step(cache, arms_t, *prev).logits.argmax(dim=1).cpu().numpy()
        explore = rng.random(b) < epsilon if epsilon.any() else np.zeros(b, dtype=bool)
        a = np.where(explore, rng.integers(0, num_arms, b), greedy) if explore.any() else greedy
        x = arms[rows, a]
        means = np.einsum("bad,bd->ba", arms, inst.w)
        r = means[rows, a] + inst.sigma * inst.noise[:, t]
        regret += means.max(axis=1) - means[rows, a]
        expert.update(x, r)
        if actor is not None:
            actor.update(x, r)
        if model is not None:
            prev = (torch.as_tensor(a, device=device), torch.as_tensor(r, dtype=torch.float32, device=device))
        actions[:, t], rewards[:, t] = a, r
    return actions, rewards, index, regret


@dataclass
class Batch:
    """One training batch: B trajectories of one (A, T) and the expert targets at Q query steps."""

    inst: Instances
    actions: np.ndarray
    rewards: np.ndarray
    query_steps: np.ndarray
    index: np.ndarray
    """(B, Q, A) expert index at the query steps."""
    targets: np.ndarray
    """(B, Q, A) target distributions."""

    @property
    def size(self) -> int:
        """B."""
        return self.actions.shape[0]

    def rows(self, index: np.ndarray) -> Batch:
        """The batch of the trajectories ``index`` (a data-parallel rank's share)."""
        arrays = ("actions", "rewards", "query_steps", "index", "targets")
        return Batch(self.inst.rows(index), *(getattr(self, name)[index] for name in arrays))


def targets_from_index(index: np.ndarray, temperature: float) -> np.ndarray:
    """One-hot argmax (temperature 0) or softmax(index / temperature), (..., A)."""
    if temperature > 0:
        z = (index - index.max(axis=-1, keepdims=True)) / temperature
        p = np.exp(z)
        return p / p.sum(axis=-1, keepdims=True)
    return np.eye(index.shape[-1])[index.argmax(axis=-1)]
