"""Fine-tuning the linear generalist on regret over its own training family, judged against uninformed rules.

Every iteration draws one (A, T) and whether the action sets are redrawn each step, then N instances of
the base checkpoint's training family (its record's ``pretrain`` configuration: the prior family of
:mod:`icrl_gym.training.linear_family`, d, the kinds of arms, sigma and whether the model is told it),
and plays M runs of each with the model sampling softmax(logits / tau) through its cache.  The gradient
is REINFORCE with the leave-one-out baseline over an instance's M runs
(:func:`~icrl_gym.training.finetune_core.instance_advantages`), and each instance's advantages are divided
by its M runs' mean total regret (plus one): the acceptance is a ratio of regrets, and
grad log E[Reg_i] = grad E[Reg_i] / E[Reg_i] weighs a 1% gain on a low-noise instance as much as one on a
high-noise instance (without it the sigma = 3 instances, whose regret is a hundred times that of the
sigma = 0.05 ones, would own the gradient).

The mean is not the whole acceptance: it also bounds the fraction of failed runs (a run locked on a wrong arm),
which a policy trained on the mean alone pays for with a heavy tail.  ``tail_weight`` lambda > 0 adds to run j's
objective lambda (R_j / (1 + m_-j) - kappa)_+, the excess of its regret over kappa times its instance's other
runs' mean (:func:`~icrl_gym.training.finetune_core.tail_advantages`): a risk-sensitive return, whose score
function weighs every step of the run (the hinge is not a sum over steps, so there is no regret-to-go form).

Validation (what keeps the best checkpoint) plays the model greedily, as the agent does, on fixed
instances of :data:`VALIDATION_CELLS` (seed ``VALIDATION_SEED + seed + cell``, common random numbers), and
scores the mean over the cells of its mean regret over the best uninformed reference's
(:data:`agents.bandit.model_average.UNINFORMED_REFERENCES`, played once on the same instances), plus
``val_failure_weight`` times the mean fraction of failed runs: the
measure of the acceptance, on cells of the in-family grid, a held-out prior, the Gaussian multi-armed
bandit and the paper's setting.  No reference in the score is told the prior.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
import torch

from agents.bandit.model_average import UNINFORMED_REFERENCES
from agents.learned.linear_generalist import LinearGeneralistAgent
from icrl_gym.data.rollout import ModelPlay, play
from icrl_gym.data.trajectories import evaluate_regret, failure_limit
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.linear_bandit import linear_bandit_spec
from icrl_gym.envs.padded_linear import InstanceBatch, Instances
from icrl_gym.models.linear_generalist import LinearGeneralistTransformer
from icrl_gym.models.linear_generalist_posterior import PosteriorLinearGeneralist
from icrl_gym.training.finetune_core import VALIDATION_SEED, FinetuneConfig, instance_advantages, tail_advantages
from icrl_gym.training.linear_expert import model_env_info
from icrl_gym.training.linear_generalist import LinearGeneralistTrainConfig, family_instances, family_options

VALIDATION_CELLS: dict[str, BanditSpec] = {
    "family d=5, A=10, sigma=0.5": linear_bandit_spec(5, 10, 200, 0.5, prior="family"),
    "family d=16, A=50, sigma=0.5": linear_bandit_spec(16, 50, 200, 0.5, prior="family"),
    "family d=2, A=2, sigma=0.5": linear_bandit_spec(2, 2, 200, 0.5, prior="family"),
    "family d=5, A=10, sigma=0.1 unknown": linear_bandit_spec(5, 10, 200, 0.1, prior="family", noise_known=False),
    "N(0, I), d=5, A=10, sigma=1.5": linear_bandit_spec(5, 10, 200, 1.5, prior="gaussian", prior_var=1.0),
    "MAB U[0, 1], K=20": linear_bandit_spec(20, 20, 200, 0.5, arms="one_hot"),
    "MAB N(0, 1), K=5": linear_bandit_spec(5, 5, 200, 0.5, arms="one_hot", prior="gaussian", prior_var=1.0),
    "paper U[0, 1]^5, sigma=1.5": linear_bandit_spec(5, 10, 200, 1.5),
    "family d=5, A=10, T=1000, sigma=0.1": linear_bandit_spec(5, 10, 1000, 0.1, prior="family"),
}
"""The validation cells (their seeds are ``VALIDATION_SEED + seed + position``): T = 200, and one long low-noise cell,
where a policy that locks on a wrong arm pays for it the most (the in-family grid's d = 5, A = 10, T = 1,000,
sigma = 0.1 cell, where fine-tuning on T = 200 alone brought such runs back)."""


def repeat_instances(inst: Instances, rollouts: int, rng: np.random.Generator) -> Instances:
    """Every instance's ``rollouts`` copies as consecutive rows, each with fresh reward noise."""
    rows = np.repeat(np.arange(inst.w.shape[0]), rollouts)
    optional = {
        name: None if getattr(inst, name) is None else getattr(inst, name)[rows]
        for name in ("prior_mean", "prior_var", "noise_known")
    }
    noise = rng.standard_normal((rows.size, inst.horizon))
    return Instances(inst.w[rows], inst.sets[rows], noise, inst.sigma[rows], inst.dim[rows], inst.horizon, **optional)


def linear_rollout(
    model: PosteriorLinearGeneralist,
    inst: Instances,
    temperature: float,
    loss_steps: np.ndarray,
    rng: np.random.Generator,
    device: torch.device,
) -> dict[str, np.ndarray]:
    """The model's runs on ``inst``, sampling softmax(logits / tau) through its cache (no gradient).

    At the steps ``loss_steps`` (sorted, 0-based) the network's inputs are kept (the model's
    ``input_log``): the loss replays the network on them.  Returns the gaps mu* - mu_{a_t} (B, T), and at
    the loss steps the actions (B, Q), the network inputs ``features`` (B, Q, A, F) and ``base`` (B, Q, A)
    and ``loss_steps`` (B, Q); the whole runs' ``played_actions`` and ``rewards`` (B, T) for the record.
    """
    b, horizon = inst.noise.shape
    runs = InstanceBatch(inst)
    player = ModelPlay(model, b, model_env_info(inst), device)
    wanted = set(loss_steps.tolist())
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def choose(t: int) -> np.ndarray:
        actions = player.sample(runs.arms().astype(np.float32), temperature, rng)
        assert model.input_log is not None
        if t in wanted:
            kept.append(model.input_log[-1])
        model.input_log.clear()
        return actions

    model.input_log = []
    try:
        played = play(
            runs,
            horizon,
            choose,
            lambda t, actions, step: player.tell(actions, step["reward"]),
            keep=("expected_reward", "best_expected_reward"),
        )
    finally:
        model.input_log = None
    features = torch.cat([f for f, _ in kept], dim=1)  # (B, Q, A, F)
    base = torch.cat([s for _, s in kept], dim=1)
    return {
        "gaps": played.kept["best_expected_reward"] - played.kept["expected_reward"],
        "played_actions": played.actions,
        "rewards": played.rewards.astype(np.float32),
        "actions": played.actions[:, loss_steps],
        "features": features.cpu().numpy(),
        "base": base.cpu().numpy(),
        "loss_steps": np.broadcast_to(loss_steps, (b, loss_steps.size)).copy(),
    }


@functools.lru_cache(maxsize=32)
def uninformed_best(cell: str, runs: int, seed: int) -> tuple[str, float]:
    """The best uninformed reference on the validation cell (the lowest mean regret) and that mean."""
    means = {
        name: float(evaluate_regret(VALIDATION_CELLS[cell], row, runs, seed=seed, batch_size=runs).sum(1).mean())
        for name, row in UNINFORMED_REFERENCES.items()
    }
    best = min(means, key=means.__getitem__)
    return best, means[best]


def validation_ratios(
    model: LinearGeneralistTransformer, meta: dict[str, Any], runs: int, seed: int
) -> dict[str, tuple[float, float]]:
    """Per validation cell: the greedy model's regret ratio and failed fraction against the best uninformed reference.

    The ratio is the model's mean regret over the reference's on the same instances; a run fails above
    :func:`~icrl_gym.data.trajectories.failure_limit` of the reference's mean.
    """
    out = {}
    agent = LinearGeneralistAgent.from_model(model, meta, greedy=True)  # every evaluation resets it
    for i, (cell, spec) in enumerate(VALIDATION_CELLS.items()):
        cell_seed = VALIDATION_SEED + seed + i
        totals = evaluate_regret(spec, agent, runs, seed=cell_seed, batch_size=runs).sum(1)
        best = uninformed_best(cell, runs, cell_seed)[1]
        out[cell] = (float(totals.mean()) / best, float(np.mean(totals > failure_limit(best))))
    return out


@dataclass
class LinearGeneralistFinetune:
    """Fine-tuning the linear generalist over its training family (module docstring)."""

    train: LinearGeneralistTrainConfig
    """The base checkpoint's training configuration: the family, the ranges of d, A, T and sigma."""
    meta: dict[str, Any]
    """The base checkpoint's record (the agent of the validation reads the model's ``d_max`` from it)."""
    cfg: FinetuneConfig

    def rollout(self, model: torch.nn.Module, rng: np.random.Generator, device: torch.device) -> dict[str, np.ndarray]:
        """M runs of each of N family instances of one (A, T).

        A and T come from ``arms_choices`` / ``horizon_choices`` when given, else uniform in the trained A
        range and log-uniform in its T range.
        """
        cfg, train = self.cfg, self.train
        if cfg.arms_choices:
            num_arms = int(rng.choice(cfg.arms_choices))
        else:
            num_arms = int(rng.integers(train.min_arms, train.max_arms + 1))
        if cfg.horizon_choices:
            horizon = int(rng.choice(cfg.horizon_choices))
        else:
            horizon = int(round(math.exp(rng.uniform(math.log(train.min_horizon), math.log(train.max_horizon)))))
        per_step = bool(rng.random() < train.per_step_fraction)
        assert isinstance(model, PosteriorLinearGeneralist)
        options = family_options(train)
        drawn = family_instances(rng, options, cfg.runs_per_iteration, num_arms, horizon, per_step, model.config.d_max)
        inst = repeat_instances(drawn, cfg.rollouts_per_instance, rng)
        steps = np.arange(horizon)
        if 0 < cfg.loss_steps < horizon:
            steps = np.sort(rng.choice(horizon, cfg.loss_steps, replace=False))
        return linear_rollout(model, inst, cfg.temperature, steps, rng, device)

    def advantages(self, runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """:func:`instance_advantages` of the gaps, at the loss steps (B, Q).

        Each instance's are divided by 1 + its runs' mean total regret (module docstring); with ``tail_weight``
        lambda > 0 every loss step of run j adds lambda (h_j - b_j) of the tail term (:func:`tail_advantages`),
        and ``tail_runs`` in the stats is the fraction of runs above kappa (1 + m_-j).
        """
        gaps = runs["gaps"].astype(np.float64)
        advantage, stats = instance_advantages(gaps, self.cfg.rollouts_per_instance)
        m = self.cfg.rollouts_per_instance
        run_totals = gaps.sum(axis=1)
        totals = run_totals.reshape(-1, m).mean(axis=1)  # (N,) each instance's mean total regret
        advantage = np.take_along_axis(advantage, runs["loss_steps"], axis=1)
        advantage = advantage / np.repeat(1.0 + totals, m)[:, None]
        if self.cfg.tail_weight > 0:
            tail, stats["tail_runs"] = tail_advantages(run_totals, m, self.cfg.tail_ratio)
            advantage = advantage + self.cfg.tail_weight * tail[:, None]
        return advantage, stats

    def logits(self, model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
        """The sampled policy's logits / tau (B, Q, A) at the loss steps: the network on the rollout's inputs."""
        network = cast(PosteriorLinearGeneralist, getattr(model, "module", model)).posterior
        features = torch.as_tensor(runs["features"], device=device)
        return network(features, torch.as_tensor(runs["base"], device=device), None) / self.cfg.temperature

    details: dict[str, float] = field(default_factory=dict)
    """The last validation's ratio per cell and the worst one, for the history."""
    worst_label: ClassVar[str] = "worst cell"
    """How the log names ``val_worst`` (the Bernoulli method's is the worst prior)."""

    def validation_regret(self, model: torch.nn.Module, device: torch.device) -> float:
        """The mean over :data:`VALIDATION_CELLS` of the greedy model's regret over the best uninformed reference's.

        With ``val_failure_weight`` c > 0 the score adds c times the mean over the cells of the failed runs' fraction.
        """
        model.eval()
        assert isinstance(model, LinearGeneralistTransformer)
        cells = validation_ratios(model, self.meta, self.cfg.val_runs, self.cfg.seed)
        ratios = {cell: ratio for cell, (ratio, _) in cells.items()}
        failures = {cell: failed for cell, (_, failed) in cells.items()}
        self.details = {
            "val_worst": max(ratios.values()),
            "val_failures": float(np.mean(list(failures.values()))),
            **{f"val {cell}": r for cell, r in ratios.items()},
            **{f"val failures {cell}": f for cell, f in failures.items()},
        }
        return float(np.mean(list(ratios.values()))) + self.cfg.val_failure_weight * self.details["val_failures"]

    @classmethod
    def for_base(cls, cfg: FinetuneConfig, meta: dict[str, Any]) -> LinearGeneralistFinetune:
        """The base's training family (its record's ``pretrain``); ``env`` must be empty, validation Monte Carlo."""
        if cfg.env:
            raise ValueError(
                "FinetuneConfig.env must be empty for the linear generalist: it is fine-tuned on its own training "
                f"family (the checkpoint's record), got {cfg.env!r}"
            )
        if cfg.rollouts_per_instance < 2:
            raise ValueError("FinetuneConfig.rollouts_per_instance must be >= 2 for the linear generalist")
        if meta.get("model", {}).get("features") != "posterior":
            raise ValueError("regret fine-tuning takes a second-version linear generalist (features='posterior')")
        if "pretrain" not in meta:
            raise ValueError("the linear generalist checkpoint has no training record ('pretrain') to draw from")
        return cls(LinearGeneralistTrainConfig.from_dict(meta["pretrain"]), meta, cfg)
