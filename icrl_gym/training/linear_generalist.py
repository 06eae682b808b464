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

Resumable bit for bit (the fields of :attr:`LinearGeneralistTrainConfig.resumable_changes` may change),
capped at ``time_budget_hours`` and data-parallel under ``torchrun``, as every generalist trainer
(:mod:`icrl_gym.training.generalist_task`); besides the last two checkpoints, every 1,000th (the learning
curve) stays, and a folder of an older layout is refused, its files kept.  Run as::

    OMP_NUM_THREADS=1 python -m icrl_gym.training.linear_generalist \
        icrl_gym/pretrained/configs/linear-generalist-v1.json
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from icrl_gym.config import NONNEGATIVE, POSITIVE, POSITIVE_INT, PROBABILITY, Allowed, checked
from icrl_gym.envs.padded_linear import Instances, draw_instances
from icrl_gym.envs.prior_family import sample_prior
from icrl_gym.models.linear_generalist import D_MAX, LinearGeneralistConfig, LinearGeneralistTransformer
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.generalist_task import (
    GeneralistTrainer,
    train_generalist,
)
from icrl_gym.training.linear_expert import (
    EXPERT_SCHEDULES,
    PRIOR_MEAN,
    PRIOR_VAR,
    Batch,
    rollout,
    targets_from_index,
)
from icrl_gym.training.linear_family import FamilyOptions, draw_family
from icrl_gym.training.loop import GeneralistLoopConfig, Logger
from icrl_gym.training.loop import main as run_main
from icrl_gym.utils.memory import release_freed_memory

PRIORS = ("uniform", "family")
"""The training priors (``prior``)."""


@dataclass
class LinearGeneralistTrainConfig(GeneralistLoopConfig):
    """Everything that defines a pretraining run of the linear generalist transformer.

    The shared fields (:class:`~icrl_gym.training.loop.GeneralistLoopConfig`) with the defaults of
    this trainer; ``model`` holds :class:`LinearGeneralistConfig` fields and the evaluations run on
    ``eval_cells``.
    """

    out_dir: str = "runs/linear-generalist"
    time_budget_hours: float = 3.9
    queries: int = 32
    min_batch: int = 8
    dagger_start: int = 2_000
    dagger_fraction: float = 0.2
    warmup_steps: int = 300
    checkpoint_every: int = 200
    eval_every: int = 500
    min_dim: int = checked(2, POSITIVE_INT)
    """Smallest feature dimension d of a batch."""
    max_dim: int = checked(8, POSITIVE_INT)
    """Largest feature dimension d of a batch (the model's d_max)."""
    min_noise: float = checked(0.4, POSITIVE)
    """sigma is log-uniform in [min_noise, max_noise] per trajectory."""
    max_noise: float = checked(2.5, POSITIVE)
    """See min_noise."""
    gaussian_arms_fraction: float = checked(0.3, PROBABILITY)
    """Probability that a trajectory's arms are N(0, I/d) rows (else Unif[-1, 1]^d)."""
    per_step_fraction: float = checked(0.3, PROBABILITY)
    """Probability that a batch has a fresh action set every step (else one per run)."""
    expert_z: float = checked(1.5, NONNEGATIVE)
    """z of the expert's index <x, mu_t> + z * posterior std (module docstring), with ``expert_schedule`` 'constant'."""
    expert_schedule: str = checked("constant", Allowed(choices=EXPERT_SCHEDULES))
    """'constant': z = expert_z at every step; 'bayes_ucb': z_t = max(Phi^{-1}(1 - 1/t), 0) at step t >= 1, the
    quantile of Bayes-UCB (c = 0), which keeps exploring as t grows (no lock-on onto a wrong arm)."""
    cost_per_batch: float = 40_000.0
    """Trajectories per batch B = cost_per_batch / (Q A + T / 2), within [min_batch, max_batch]."""
    dagger_max_batch: int = checked(96, POSITIVE_INT)
    """Most trajectories in a batch rolled out by the model (its rollout costs T forward steps)."""
    prior: str = checked("uniform", Allowed(choices=PRIORS))
    """'uniform': w* ~ U[0, 1]^d and the expert's prior N(1/2, I/12) (the first version); 'family': the prior
    family of :mod:`icrl_gym.training.linear_family`, the expert told each instance's matched prior."""
    sphere_arms_fraction: float = checked(0.0, PROBABILITY)
    """Probability that a trajectory's arms are uniform on the unit sphere ('family' only)."""
    one_hot_fraction: float = checked(0.0, PROBABILITY)
    """Probability that a trajectory is a Gaussian multi-armed bandit, one-hot arms with d = A ('family' only)."""
    unknown_noise_fraction: float = checked(0.0, PROBABILITY)
    """Probability that the model is not given sigma (it sees NaN and estimates it; 'family' only)."""
    labels: str = checked("expert", Allowed(choices=("expert", "optimal")))
    """'expert': the expert's action (the matched Bayes-UCB); 'optimal': the instance's optimal arm
    argmax_k <x_k, w*> of the query step's action set (DPT's labels: the cross-entropy optimum is the
    posterior probability that each arm is optimal under the training family, played by sampling)."""
    behaviour_prior: str = checked("matched", Allowed(choices=("matched", "resampled")))
    """The prior the behaviour policy of the batches not rolled out by the model is told ('family' only):
    'matched' (the expert itself), or 'resampled' (the matched prior of a fresh family draw of the same d, so
    that the history's actions do not reveal the instance's prior, which the model would learn to copy)."""
    eval_cells: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"dim": 5, "num_actions": 10, "horizon": 200, "noise_std": 1.5},
            {"dim": 5, "num_actions": 10, "horizon": 200, "noise_std": 0.5},
            {"dim": 8, "num_actions": 20, "horizon": 200, "noise_std": 1.5},
        ]
    )
    """Evaluation settings (keys: dim, num_actions, horizon, noise_std, arms, action_set)."""

    resumable_changes: ClassVar[tuple[str, ...]] = (*GeneralistLoopConfig.resumable_changes, "eval_cells")
    """Fields a resumed run may change: its length and budget, logging, evaluation, device and threads."""

    def checkpoint_fields(self) -> dict[str, Any]:
        """The family, the trained ranges and the expert."""
        if self.prior == "family":
            env: dict[str, Any] = {
                "reward": "gaussian",
                "arms": "uniform|gaussian|sphere|one_hot",
                "prior": "family",
                "action_set": "fixed|per_step",
            }
            expert_prior: dict[str, Any] = {"prior": "matched Gaussian prior of each instance"}
        else:
            env = {
                "reward": "gaussian",
                "arms": "uniform|gaussian",
                "prior": "uniform",
                "prior_low": 0.0,
                "prior_high": 1.0,
                "action_set": "fixed|per_step",
            }
            expert_prior = {"prior_mean": PRIOR_MEAN, "prior_var": PRIOR_VAR}
        return {
            "family": "linear",
            "env": env,
            "trained_range": {
                "dim": [self.min_dim, self.max_dim],
                "num_actions": [self.min_arms, self.max_arms],
                "horizon": [self.min_horizon, self.max_horizon],
                "noise_std": [self.min_noise, self.max_noise],
            },
            "expert": {
                "name": "gaussian_posterior_index",
                "z": self.expert_z if self.expert_schedule == "constant" else "max(Phi^-1(1 - 1/t), 0)",
                **expert_prior,
            },
        }

    def check(self) -> None:
        """The ranges are ordered, d fits the model (``d_max``), every evaluation cell is one the trainer plays."""
        super().check()
        self.check_order(("min_dim", "max_dim"), ("min_noise", "max_noise"))
        try:
            d_max = LinearGeneralistConfig.from_dict(self.model).d_max
        except (TypeError, ValueError) as err:
            raise ValueError(f"LinearGeneralistTrainConfig.model={self.model!r} is not a model config: {err}") from err
        if self.max_dim > d_max:
            raise ValueError(
                f"LinearGeneralistTrainConfig.max_dim={self.max_dim} must be <= the model's d_max={d_max} "
                "(model.d_max): larger d cannot be fed to it"
            )
        for i, cell in enumerate(self.eval_cells if self.eval_every else []):  # cells are played only then
            wide = LinearGeneralistConfig.from_dict(self.model).features == "posterior"
            _check_cell(cell, f"LinearGeneralistTrainConfig.eval_cells[{i}]", d_max, wide)


EVAL_CELL_FIELDS = {
    "dim": POSITIVE_INT,
    "num_actions": POSITIVE_INT,
    "horizon": POSITIVE_INT,
    "noise_std": POSITIVE,
    "arms": Allowed(choices=("uniform", "gaussian", "sphere", "one_hot")),
    "action_set": Allowed(choices=("fixed", "per_step")),
    "prior": Allowed(choices=PRIORS),
    "noise_known": Allowed(choices=(True, False)),  # type: ignore[arg-type]
}
"""The keys of an evaluation cell and their allowed values."""


def _check_cell(cell: Any, where: str, d_max: int, wide: bool = False) -> None:
    """A ``ValueError`` naming the first key of an evaluation cell that is unknown or out of range.

    ``wide``: the model plays one-hot arms of any A (the second version).
    """
    if not isinstance(cell, dict):
        raise ValueError(f"{where} must be a dict with keys {sorted(EVAL_CELL_FIELDS)}, got {cell!r}")
    for key, value in cell.items():
        rule = EVAL_CELL_FIELDS.get(key)
        if rule is None:
            raise ValueError(f"{where} has an unknown key {key!r}; keys: {sorted(EVAL_CELL_FIELDS)}")
        if not rule.admits(value):
            raise ValueError(f"{where}.{key} must be {rule}, got {value!r}")
    if cell.get("dim", 5) > d_max and not (wide and cell.get("arms") == "one_hot"):
        raise ValueError(f"{where}.dim={cell.get('dim', 5)} must be <= the model's d_max={d_max}")


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

    def build(device: torch.device, ctx: DistContext) -> GeneralistTrainer[LinearGeneralistTransformer, Any]:
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
            model,
            partial(sample_batch, cfg),
            batch_loss,
            evaluate_cells,
            metrics={"loss": ".4f", "agree": ".3f", "gap": ".4f"},
            keep_every=CURVE_EVERY,
            after_log=release_freed_memory,
        )

    return train_generalist(cfg, echo, build)


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.training.linear_generalist CONFIG.json [key=value ...]`` (see :func:`.loop.main`)."""
    run_main(argv, __doc__, LinearGeneralistTrainConfig, train)


if __name__ == "__main__":
    main()
