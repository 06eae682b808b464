"""The configuration of the linear generalist's training (:mod:`icrl_gym.training.linear_generalist`).

:class:`LinearGeneralistTrainConfig`: the model, the batch distribution, the expert and its prior,
the evaluation cells (checked against :data:`EVAL_CELL_FIELDS`) and the loop's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from icrl_gym.config import NONNEGATIVE, POSITIVE, POSITIVE_INT, PROBABILITY, Allowed, checked
from icrl_gym.models.linear_generalist import LinearGeneralistConfig
from icrl_gym.training.generalist_task import (
    GeneralistLoopConfig,
)

EXPERT_SCHEDULES = ("constant", "bayes_ucb")
"""How the expert's z evolves over a run (``expert_schedule``)."""
PRIORS = ("uniform", "family")
"""The training priors (``prior``)."""

PRIOR_MEAN, PRIOR_VAR = 0.5, 1.0 / 12.0
"""The matched Gaussian prior N(1/2, I/12) of w* ~ U[0, 1]^d."""


@dataclass
class LinearGeneralistTrainConfig(GeneralistLoopConfig):
    """Everything that defines a pretraining run of the linear generalist transformer.

    The shared fields (:class:`~icrl_gym.training.generalist_task.GeneralistLoopConfig`) with the defaults of
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
