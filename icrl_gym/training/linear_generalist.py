"""Supervised pretraining of the LINEAR generalist transformer on a Bayes-level expert.

Supervised pretraining as in Section 2.2 / Section 4.1 of Lin, Bai, Mei, "Transformers as Decision
Makers" (ICLR 2024): contexts D_T are drawn from a context algorithm, and the model imitates an expert
algorithm's action at every query step (algorithm distillation with an expert, Eq. (3)).

The expert is the Gaussian-posterior index policy with the matched prior N(m 1, v I), m = 1/2,
v = 1/12 (the mean and variance of U[0, 1]; Appendix F.1):

    a_t = argmax_k  <x_{t,k}, mu_t> + z * sqrt(x_{t,k}^T Sigma_t x_{t,k}),
    Sigma_t = (I / v + sum_{s<t} x_s x_s^T / sigma^2)^{-1},   mu_t = Sigma_t (m 1 / v + sum_{s<t} x_s r_s / sigma^2),

with a constant z (``expert_z``; z = 0 is the greedy posterior mean).  z = 1.5 was measured below
the acceptance bound 1.10 x min(Bayes-UCB, TS, LinUCB) in every cell of the acceptance grid (1,000
instances per cell), with a wide margin, where z = 0 is not (sigma = 0.5, T = 500).

Every step draws a fresh batch in numpy from ``default_rng([seed, step])``: one (A, T) (A uniform
in [min_arms, max_arms], T log-uniform in [min_horizon, max_horizon]), per trajectory d uniform in
[min_dim, max_dim] (zero-padded to d_max), sigma log-uniform in [min_noise, max_noise], w* ~ U[0,1]^d,
arms Unif[-1, 1]^d or N(0, I/d) (``gaussian_arms_fraction``), fixed or per-step action sets
(``per_step_fraction``).  Behaviour: the expert with eps-uniform exploration (eps ~ U[0, max_epsilon]
per trajectory), or from ``dagger_start`` on with probability ``dagger_fraction`` the model itself
(greedy, same eps): DAgger.  At Q random query steps the target is the expert's action given the
history (hard, or softmax(index / label_temperature)); the loss is the cross-entropy.  The log also
reports ``agree`` (argmax equal to the expert's) and ``gap`` (the expert index lost by the model's
argmax, in reward units).

Resumable bit for bit: every ``checkpoint_every`` steps the training state (the weights as the
checkpoint ``checkpoints/step_NNNNNNN``, the optimiser, the RNG states, the step, the configuration
and the history) is committed as one verified unit (:mod:`icrl_gym.training.state`, manifest
``resume.json``); the last two checkpoints and every 1,000th (the learning curve) stay.  A restarted
run continues from it, also from a moved ``out_dir``; a folder of an older layout is refused, its
files kept.  Resuming with other values of the fields that define the training is refused, naming
them; those of :attr:`LinearGeneralistTrainConfig.resumable_changes` may change.  Capped at
``time_budget_hours`` of training wall time summed over resumes (recorded in every checkpoint)::

    OMP_NUM_THREADS=1 python -m icrl_gym.training.linear_generalist icrl_gym/pretrained/configs/linear-generalist.json

or under ``torchrun --standalone --nproc_per_node=N -m icrl_gym.training.linear_generalist linear-generalist.json``
with DistributedDataParallel: every rank draws the same batch and trains on its share of the
trajectories (:mod:`icrl_gym.training.loop`); rank 0 logs, evaluates and writes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import ndtri

from icrl_gym.envs.prior_family import sample_prior
from icrl_gym.estimators.statistics import RidgeStatistics, gaussian_index
from icrl_gym.models.linear_generalist import D_MAX, LinearGeneralistConfig, LinearGeneralistTransformer
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.generalist_task import (
    GeneralistTrainer,
    release_freed_memory,
    train_generalist,
)
from icrl_gym.training.linear_family import FamilyOptions, draw_family
from icrl_gym.training.linear_generalist_config import (
    EXPERT_SCHEDULES,
    PRIOR_MEAN,
    PRIOR_VAR,
    LinearGeneralistTrainConfig,
)
from icrl_gym.training.loop import Logger
from icrl_gym.training.loop import main as run_main


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


def family_options(cfg: LinearGeneralistTrainConfig) -> FamilyOptions:
    """The prior-family ranges of the configuration (one-hot arms of any A for the second version)."""
    return FamilyOptions(
        (cfg.min_dim, cfg.max_dim),
        (cfg.min_noise, cfg.max_noise),
        (cfg.gaussian_arms_fraction, cfg.sphere_arms_fraction, cfg.one_hot_fraction),
        cfg.unknown_noise_fraction,
        LinearGeneralistConfig.from_dict(cfg.model).features == "posterior",
    )


def family_instances(
    rng: np.random.Generator,
    options: FamilyOptions,
    batch: int,
    num_arms: int,
    horizon: int,
    per_step: bool,
    d_max: int,
) -> Instances:
    """B runs over the prior family (:func:`icrl_gym.training.linear_family.draw_family`) and their noise."""
    draw = draw_family(rng, batch, num_arms, horizon, per_step, d_max, options)
    noise = rng.standard_normal((batch, horizon))
    return Instances(
        draw.w, draw.sets, noise, draw.sigma, draw.dim, horizon, draw.prior_mean, draw.prior_var, draw.noise_known
    )


def sample_batch(
    cfg: LinearGeneralistTrainConfig,
    rng: np.random.Generator,
    model: LinearGeneralistTransformer | None = None,
) -> Batch:
    """Draw (A, T), B instances and their trajectories (the eps-expert's or the model's when given)."""
    num_arms = int(rng.integers(cfg.min_arms, cfg.max_arms + 1))
    horizon = int(round(math.exp(rng.uniform(math.log(cfg.min_horizon), math.log(cfg.max_horizon)))))
    most = cfg.max_batch if model is None else min(cfg.max_batch, cfg.dagger_max_batch)
    b = int(np.clip(round(cfg.cost_per_batch / (cfg.queries * num_arms + horizon / 2)), cfg.min_batch, most))
    per_step = bool(rng.random() < cfg.per_step_fraction)
    d_max = model.config.d_max if model is not None else LinearGeneralistConfig.from_dict(cfg.model).d_max
    if cfg.prior == "family":
        inst = family_instances(rng, family_options(cfg), b, num_arms, horizon, per_step, d_max)
    else:
        dim = rng.integers(cfg.min_dim, cfg.max_dim + 1, b)
        sigma = np.exp(rng.uniform(math.log(cfg.min_noise), math.log(cfg.max_noise), b))
        gaussian = rng.random(b) < cfg.gaussian_arms_fraction
        inst = draw_instances(rng, b, num_arms, horizon, dim, sigma, gaussian, per_step, d_max)
    epsilon = rng.uniform(0.0, cfg.max_epsilon, b)
    behaviour = None
    if model is None and cfg.behaviour_prior == "resampled":  # another instance's prior: actions leak nothing
        other = sample_prior(rng, "family", inst.dim, inst.sets.shape[-1])
        behaviour = (other.mean, other.var)
    actions, rewards, index, _ = rollout(inst, epsilon, rng, cfg.expert_z, model, cfg.expert_schedule, behaviour)
    query_steps = rng.integers(0, horizon, (b, cfg.queries))
    q_index = index[np.arange(b)[:, None], query_steps].astype(np.float64)
    if cfg.labels == "optimal":
        sets = inst.sets[np.arange(b)[:, None], query_steps if inst.sets.shape[1] > 1 else 0]  # (B, Q, A, width)
        means = np.einsum("bqad,bd->bqa", sets.astype(np.float64), inst.w)
        targets = targets_from_index(np.broadcast_to(means, q_index.shape), 0.0)
    else:
        targets = targets_from_index(q_index, cfg.label_temperature)
    return Batch(inst, actions, rewards, query_steps, q_index, targets)


def batch_loss(
    model: LinearGeneralistTransformer | torch.nn.Module, batch: Batch, device: torch.device
) -> tuple[torch.Tensor, dict[str, float]]:
    """The model's forward pass for training: cross-entropy to the targets; ``agree`` and ``gap`` metrics.

    ``agree``: the argmax is the expert's; ``gap``: the expert index the argmax loses.  ``model``
    may be the DistributedDataParallel wrapper of a :class:`LinearGeneralistTransformer`.
    """
    inst = batch.inst
    logits = model(
        torch.as_tensor(inst.sets, device=device).expand(-1, inst.horizon, -1, -1),
        torch.as_tensor(batch.actions, device=device),
        torch.as_tensor(batch.rewards, dtype=torch.float32, device=device),
        torch.as_tensor(batch.query_steps, device=device),
        inst.horizon,
        torch.as_tensor(inst.model_noise(), dtype=torch.float32, device=device),
        torch.as_tensor(inst.dim, device=device),
    )  # (B, Q, A)
    target = torch.as_tensor(batch.targets, dtype=torch.float32, device=device)
    loss = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    metrics_loss = loss.item()
    if not math.isfinite(metrics_loss):  # a non-finite batch leaves the weights as they are; the log shows nan
        loss = sum((p * 0.0).sum() for p in model.parameters())  # type: ignore[assignment]
    pick = logits.argmax(-1).cpu().numpy()
    chosen = np.take_along_axis(batch.index, pick[..., None], axis=-1)[..., 0]
    gap = batch.index.max(axis=-1) - chosen
    agree = pick == batch.index.argmax(axis=-1)
    return loss, {"loss": metrics_loss, "agree": float(agree.mean()), "gap": float(gap.mean())}


def evaluate(
    model: LinearGeneralistTransformer | None,
    cell: dict[str, Any],
    instances: int,
    seed: int,
    z: float,
    d_max: int | None = None,
    schedule: str = "constant",
) -> np.ndarray:
    """Per-run regret (instances,) of the greedy model (or, ``model`` None, the expert) on fixed instances.

    The same ``seed`` and ``d_max`` (the padding; default the model's) give the same instances and noise
    (common random numbers) for every policy.  A cell with ``"prior": "family"`` draws over the prior family
    (``arms`` one of uniform, gaussian, sphere, one_hot; ``noise_known``), the expert told each prior.
    """
    rng = np.random.default_rng(seed)
    d, a, horizon = int(cell.get("dim", 5)), int(cell.get("num_actions", 10)), int(cell.get("horizon", 200))
    if cell.get("arms") == "one_hot":
        d = a  # the Gaussian multi-armed bandit: d = A
    per_step = cell.get("action_set") == "per_step"
    if d_max is None:
        d_max = model.config.d_max if model is not None else max(d, D_MAX)
    if cell.get("prior", "uniform") == "family":  # the family's priors, one kind of arms, a fixed d and sigma
        arms = cell.get("arms", "uniform")
        fractions = (float(arms == "gaussian"), float(arms == "sphere"), float(arms == "one_hot"))
        sigma_cell = float(cell.get("noise_std", 0.5))
        unknown = float(not cell.get("noise_known", True))
        options = FamilyOptions((d, d), (sigma_cell, sigma_cell), fractions, unknown, wide_one_hot=True)
        inst = family_instances(rng, options, instances, a, horizon, per_step, d_max)
    else:
        dim = np.full(instances, d)
        sigma = np.full(instances, float(cell.get("noise_std", 1.5)))
        gaussian = np.full(instances, cell.get("arms", "uniform") == "gaussian")
        inst = draw_instances(rng, instances, a, horizon, dim, sigma, gaussian, per_step, d_max)
    with torch.no_grad():
        return rollout(inst, np.zeros(instances), rng, z, model, schedule)[3]


CURVE_EVERY = 1_000
"""Steps between the checkpoints that stay for the learning curve."""


def train(cfg: LinearGeneralistTrainConfig, echo: bool = True) -> LinearGeneralistTransformer:
    """Train (or resume) the run in ``cfg.out_dir``; returns the model.  See the module docstring."""

    def build(device: torch.device, ctx: DistContext) -> GeneralistTrainer:
        model = LinearGeneralistTransformer(LinearGeneralistConfig.from_dict(cfg.model)).to(device)

        def evaluate_cells(step: int, log: Logger) -> dict[str, Any]:
            entry: dict[str, Any] = {"step": step}
            for i, cell in enumerate(cfg.eval_cells):
                d_max = model.config.d_max  # the expert meets the same (padded) instances: common random numbers
                args = (cell, cfg.eval_instances, 1 + i, cfg.expert_z, d_max, cfg.expert_schedule)
                ours, ref = evaluate(model, *args), evaluate(None, *args)
                se = float(np.std(ours - ref, ddof=1) / math.sqrt(len(ours)))
                own_se = float(ours.std(ddof=1) / math.sqrt(len(ours)))
                log(
                    f"eval step {step}: {cell} regret {ours.mean():.2f} +- {own_se:.2f} "
                    f"(expert {ref.mean():.2f}, paired diff {ours.mean() - ref.mean():+.2f} +- {se:.2f})"
                )
                entry[f"eval{i}"] = round(float(ours.mean()), 3)
                entry[f"expert{i}"] = round(float(ref.mean()), 3)
            return entry

        return GeneralistTrainer(
            model=model,
            sample=lambda rng, policy: sample_batch(cfg, rng, policy),
            loss=batch_loss,
            evaluate=evaluate_cells,
            metrics={"loss": ".4f", "agree": ".3f", "gap": ".4f"},
            keep_every=CURVE_EVERY,
            after_log=release_freed_memory,
        )

    return train_generalist(cfg, echo, build)  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.training.linear_generalist CONFIG.json [key=value ...]`` (overrides as JSON values)."""
    run_main(argv, __doc__, LinearGeneralistTrainConfig, train)


if __name__ == "__main__":
    main()
