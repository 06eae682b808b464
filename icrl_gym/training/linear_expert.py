"""The linear generalist's expert and its rollouts (:mod:`icrl_gym.training.linear_generalist`).

The Gaussian-posterior index expert with the matched prior (:func:`expert_statistics`,
:func:`expert_z`), the behaviour's rollout on the instances of a batch (:func:`rollout`, played on
:class:`~icrl_gym.envs.padded_linear.InstanceBatch` by :func:`icrl_gym.data.rollout.play`) and the
batch it yields (:class:`Batch`, :func:`targets_from_index`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ndtri

from icrl_gym.data.rollout import ModelPlay, epsilon_greedy, play
from icrl_gym.envs.padded_linear import InstanceBatch, Instances
from icrl_gym.envs.padded_linear import draw_instances as draw_instances  # the tests draw with the rollout
from icrl_gym.estimators.statistics import RidgeStatistics, gaussian_index
from icrl_gym.models.linear_generalist import LinearGeneralistTransformer
from icrl_gym.models.policy import EnvInfo

EXPERT_SCHEDULES = ("constant", "bayes_ucb")
"""How the expert's z evolves over a run (``expert_schedule``)."""

PRIOR_MEAN, PRIOR_VAR = 0.5, 1.0 / 12.0
"""The matched Gaussian prior N(1/2, I/12) of w* ~ U[0, 1]^d."""


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


def model_env_info(inst: Instances) -> EnvInfo:
    """What a linear generalist playing ``inst`` is told: A, T, the arrays' width, each run's sigma and d.

    The width is that of the action sets (d_max, or A for one-hot rows wider than d_max); sigma is NaN where
    the model is not given it (:meth:`Instances.model_noise`).
    """
    return EnvInfo(
        inst.sets.shape[2],
        inst.horizon,
        dim=inst.sets.shape[-1],
        run_noise_std=tuple(inst.model_noise().tolist()),
        run_dims=tuple(inst.dim.tolist()),
    )


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
    num_arms, width = inst.sets.shape[2], inst.sets.shape[-1]
    runs = InstanceBatch(inst)
    expert = expert_statistics(inst.sigma, width, inst.prior_mean, inst.prior_var)
    actor = None if behaviour is None or model is not None else expert_statistics(inst.sigma, width, *behaviour)
    index = np.zeros((b, horizon, num_arms), dtype=np.float32)
    regret = np.zeros(b)
    player = None
    if model is not None:
        player = ModelPlay(model, b, model_env_info(inst))

    def choose(t: int) -> np.ndarray:
        arms = runs.arms()
        index[:, t] = gaussian_index(expert, arms, inst.sigma, expert_z(z, schedule, t))
        if actor is not None:
            greedy = gaussian_index(actor, arms, inst.sigma, expert_z(z, schedule, t)).argmax(axis=1)
        elif player is None:
            greedy = index[:, t].argmax(axis=1)
        else:
            greedy = player.greedy(torch.as_tensor(arms, dtype=torch.float32, device=player.device))
        return epsilon_greedy(greedy, epsilon, num_arms, rng, lazy=True)

    def on_step(t: int, actions: np.ndarray, outcome: dict[str, np.ndarray]) -> None:
        nonlocal regret
        regret += outcome["best_expected_reward"] - outcome["expected_reward"]
        expert.update(outcome["arm"], outcome["reward"])
        if actor is not None:
            actor.update(outcome["arm"], outcome["reward"])
        if player is not None:
            player.tell(actions, outcome["reward"])

    played = play(runs, horizon, choose, on_step)
    return played.actions, played.rewards, index, regret


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
