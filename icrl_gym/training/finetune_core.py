"""What every fine-tuning method shares: the run's configuration, the advantages and the policy-gradient loss.

A method (:class:`FinetuneMethod`) is one kind of model's rollouts, advantages, logits and validation;
:mod:`icrl_gym.training.finetune` runs it on the :class:`~icrl_gym.training.trainer.Trainer` (the
estimator is described there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from icrl_gym.config import NONNEGATIVE, NONNEGATIVE_INT, POSITIVE, POSITIVE_INT, Allowed, checked
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.mdp_core import MDPSpec
from icrl_gym.training.loop import TrainerConfig


@dataclass
class FinetuneConfig(TrainerConfig):
    """An online fine-tuning run (saved with every checkpoint).

    The shared fields (``out_dir``, ``seed``: of the instances and of the sampling, ``lr``: Adam's,
    ``grad_clip``, ``device``, ``threads``) are :class:`~icrl_gym.training.loop.TrainerConfig`'s.
    """

    name: str = "bernoulli-ad-ucb-finetuned"
    """Name of the exported model."""
    base: str = "bernoulli-ad-ucb"
    """The pretrained checkpoint to start from (a path or a shipped name)."""
    iterations: int = checked(300, NONNEGATIVE_INT)
    """Policy-gradient steps (0: validate the base, widened by ``widen``, and export it as it is)."""
    runs_per_iteration: int = checked(128, Allowed(low=2, integer=True))
    """Fresh instances N per step (at least two: with one run each, a run's leave-one-out baseline is the
    mean over the N - 1 others)."""
    rollouts_per_instance: int = checked(1, POSITIVE_INT)
    """M runs of every instance, B = N M runs per step; M >= 2: a run's baseline is the mean of the M - 1
    other runs of its instance (the generalists only; a bandit transformer takes M = 1)."""
    temperature: float = checked(1.0, POSITIVE)
    """tau: the rollouts sample softmax(logits / tau), and the loss scores that policy (the generalists
    only; a bandit transformer samples its own softmax, tau = 1).  A model deployed greedily wants a small tau:
    the gradient improves the sampled policy, whose draws explore by themselves, so at tau = 1 it learns to
    explore less on purpose than the argmax then needs (the linear generalist: sampled play 22-47% above greedy
    play, and its learned index narrowed during fine-tuning)."""
    env: dict[str, Any] = field(default_factory=dict)
    """The prior to fine-tune on: :class:`~icrl_gym.envs.mdp_core.MDPSpec` fields for the MDP generalist,
    :class:`~icrl_gym.envs.bandit_core.BanditSpec` fields (Bernoulli arms) for the Bernoulli generalist
    (both play every size, so the size is part of the prior); empty for a bandit transformer (its
    checkpoint's own environment)."""
    lr: float = 3e-5
    kl_weight: float = checked(0.0, NONNEGATIVE)
    """beta of the KL penalty to the pretrained policy (0: none)."""
    val_runs: int = checked(1000, POSITIVE_INT)
    """Validation instances (fixed seed) for choosing the checkpoint."""
    validation: str = checked("monte_carlo", Allowed(choices=("monte_carlo", "exact_family")))
    """What picks the checkpoint: "monte_carlo", the mean regret on ``val_runs`` fixed instances of the
    prior; "exact_family" (the Bernoulli generalist only), the exact K = 2 regret played greedily, summed
    over the 16 Beta(a, b) priors (a, b in {0.5, 1, 2, 5}) at T = ``val_horizon``, as a multiple of the
    family-Bayes DP's (:func:`~icrl_gym.training.exact_bernoulli.family_regret_ratio`): noise-free, >= 1."""
    val_horizon: int = checked(50, POSITIVE_INT)
    """T of the exact validation (``validation="exact_family"``; its count states grow like T^4 / 24)."""
    val_arms: list[int] = field(default_factory=list)
    """With ``validation="exact_family"``: also these K (e.g. [5]), each played greedily on ``val_runs`` fixed
    instances of each of the 16 Beta(a, b) priors at T = ``val_arms_horizon``, its summed regret as a multiple
    of the Gittins told each prior on the same instances; the score is then the mean of these ratios and the
    exact one (the exact K = 2 score alone lets the policy trade low-mean priors for high-mean ones at larger K)."""
    val_arms_horizon: int = checked(200, POSITIVE_INT)
    """T of the ``val_arms`` validation."""
    arms_choices: list[int] = field(default_factory=list)
    """The Bernoulli and linear generalists: each iteration's K (A) drawn uniformly from these (empty: ``env``'s
    K; the linear generalist's trained range)."""
    horizon_choices: list[int] = field(default_factory=list)
    """The Bernoulli and linear generalists: each iteration's T drawn uniformly from these (empty: ``env``'s T;
    the linear generalist's trained range)."""
    loss_steps: int = checked(0, Allowed(low=0, integer=True))
    """The linear generalist: the loss reads this many steps of the runs, drawn uniformly without replacement
    every iteration (0: every step); an unbiased estimate of the whole runs' loss at a fraction of the cost."""
    tail_weight: float = checked(0.0, NONNEGATIVE)
    """The linear generalist: lambda of a tail term added to every run's objective (0: none).  Run j of an
    instance also pays lambda * (R_j / (1 + m_-j) - kappa)_+, R_j its total regret and m_-j the mean total
    regret of the instance's other runs, so a run that locks on where its siblings did not is penalised beyond
    its share of the mean (:func:`tail_advantages`; kappa is ``tail_ratio``)."""
    tail_ratio: float = checked(3.0, POSITIVE)
    """kappa of the tail term: a run is penalised once its regret exceeds kappa (1 + m_-j) (the acceptance counts a
    run as failed above 3x the best reference's mean)."""
    val_failure_weight: float = checked(0.0, NONNEGATIVE)
    """The linear generalist: the validation score adds this times the mean over the cells of the fraction of the
    model's runs that fail (regret above :func:`~icrl_gym.data.trajectories.failure_limit` of the best
    uninformed reference's mean): 5 weighs 2% of failed runs as 0.10 of the regret ratio."""
    widen: dict[str, Any] = field(default_factory=dict)
    """Model configuration fields to set on the base before fine-tuning (e.g. ``{"ridge_gate": true}``): the
    model is rebuilt with them and given the base's weights; the modules they add must start at zero output,
    so the widened model plays as the base at iteration 0 (refused when a base weight has no place in it)."""
    drop: list[str] = field(default_factory=list)
    """Prefixes of the base's weight names to leave out when it is rebuilt with ``widen`` (e.g.
    ``["posterior.width."]`` with ``{"index_width": false}``): modules removed on purpose (each prefix must name
    a weight of the base)."""
    trainable: list[str] = field(default_factory=list)
    """Prefixes of the parameter names to train (e.g. ``["posterior.gate."]``); the others stay frozen (empty:
    train every parameter).  With ``widen``, training only the new modules keeps the base's tuned network."""
    eval_every: int = checked(25, POSITIVE_INT)
    """Iterations between validations (and resumable checkpoints)."""
    out_dir: str = "runs/bernoulli-ad-ucb-finetuned"

    def check(self) -> None:
        """A given ``env`` is an MDP or a bandit prior; the K lists hold integers >= 2, the T list integers >= 1.

        Which prior the base's kind needs is checked at the start.
        """
        for name in ("trainable", "drop"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
                raise ValueError(f"FinetuneConfig.{name} must list parameter-name prefixes, got {value!r}")
        for name, low in (("val_arms", 2), ("arms_choices", 2), ("horizon_choices", 1)):
            values, rule = getattr(self, name), Allowed(low=low, integer=True)
            if not isinstance(values, list) or not all(rule.admits(v) for v in values):
                raise ValueError(f"FinetuneConfig.{name} must be a list of values each {rule}, got {values!r}")
        if self.env:
            errors = []
            for spec in (MDPSpec, BanditSpec):
                try:
                    spec.from_dict(self.env)
                    return
                except (TypeError, ValueError) as err:
                    errors.append(f"{spec.__name__}: {err}")
            problem = f"FinetuneConfig.env={self.env!r} is neither an MDP nor a bandit prior ({'; '.join(errors)})"
            raise ValueError(problem)


VALIDATION_SEED = 777_000
"""Validation instances use seed ``VALIDATION_SEED + seed`` (the harness uses 0 and 10**7)."""


def leave_one_out_advantages(gaps: np.ndarray, group: int) -> tuple[np.ndarray, dict[str, float]]:
    """Reg_t - b_t (B, T) from the per-step gaps g_t (B, T): the regret-to-go minus its leave-one-out mean.

    The runs come in groups of ``group`` consecutive rows (the runs of one instance, or the whole
    batch): b_t of a run is the mean of Reg_t over the other runs of its group (module docstring).
    Computed on the whole batch before a data-parallel rank takes its rows; also the batch's mean regret.
    """
    to_go = np.flip(np.cumsum(np.flip(gaps, axis=1), axis=1), axis=1)  # Reg_t
    B, T = to_go.shape
    grouped = to_go.reshape(B // group, group, T)
    return (grouped - others_mean(grouped)).reshape(B, T), {"regret": float(gaps.sum(axis=1).mean())}


def others_mean(grouped: np.ndarray) -> np.ndarray:
    """The leave-one-out mean over axis 1 (a group's runs): for each run, the mean of the group's other runs."""
    return (grouped.sum(axis=1, keepdims=True) - grouped) / (grouped.shape[1] - 1)


def instance_advantages(gaps: np.ndarray, rollouts: int) -> tuple[np.ndarray, dict[str, float]]:
    """The gaps' regret-to-go minus the baseline over an instance's M = ``rollouts`` runs (M >= 2), else the batch's."""
    return leave_one_out_advantages(gaps, rollouts if rollouts >= 2 else gaps.shape[0])


def tail_advantages(totals: np.ndarray, group: int, ratio: float) -> tuple[np.ndarray, float]:
    """h_j - b_j (B,) of the tail term h_j = (R_j / (1 + m_-j) - kappa)_+, kappa = ``ratio``, for runs in groups.

    The runs come in groups of ``group`` consecutive rows (an instance's runs); R_j is run j's total regret,
    m_-j the mean of its group's other runs, b_j the mean of h over them (the leave-one-out baseline).  m_-j is
    held fixed in the gradient: a run is judged against its siblings as they played, so the policy gains
    nothing by making the siblings worse.  The term's weight on every step of run j is h_j - b_j.  Also the
    fraction of runs with h_j > 0 (above kappa (1 + m_-j)).
    """
    b = totals.shape[0]
    grouped = np.asarray(totals, dtype=np.float64).reshape(b // group, group)
    tail = np.maximum(grouped / (1.0 + others_mean(grouped)) - ratio, 0.0)
    return (tail - others_mean(tail)).reshape(b), float(np.mean(tail > 0))


LogitsOf = Callable[[torch.nn.Module, dict[str, np.ndarray], torch.device], torch.Tensor]
"""The logits (B, T, A) of the sampling policy at every step of ``runs`` (with gradient): model, runs, device."""


def policy_gradient_loss(
    model: torch.nn.Module,
    base: torch.nn.Module | None,
    runs: dict[str, np.ndarray],
    advantage: np.ndarray,
    kl_weight: float,
    device: torch.device,
    logits_of: LogitsOf,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The model's forward pass for training: the REINFORCE loss of ``advantage`` (B, T) (+ the KL penalty).

    ``logits_of`` computes the sampling policy's logits (the method's ``logits``, e.g. a bandit transformer's
    ``bandit_logits``); ``model`` may be a DistributedDataParallel wrapper.
    """
    actions = torch.as_tensor(runs["actions"], device=device)
    logp_all = F.log_softmax(logits_of(model, runs, device), dim=-1)
    logp = logp_all.gather(-1, actions[..., None])[..., 0]  # (B, T)
    weight = torch.as_tensor(advantage.astype(np.float32), device=device)
    loss = (weight * logp).sum(dim=1).mean() / advantage.shape[1]
    stats = {}
    if kl_weight > 0 and base is not None:
        with torch.no_grad():
            base_logp = F.log_softmax(logits_of(base, runs, device), dim=-1)
        kl = (logp_all.exp() * (logp_all - base_logp)).sum(-1).mean()
        loss = loss + kl_weight * kl
        stats["kl"] = float(kl.detach())
    stats["loss"] = float(loss.detach())
    return loss, stats


class FinetuneMethod(Protocol):
    """What the fine-tuning trainer needs of one kind of model: its rollouts, advantages, logits and validation."""

    def rollout(self, model: torch.nn.Module, rng: np.random.Generator, device: torch.device) -> dict[str, np.ndarray]:
        """One iteration's runs (no gradient): arrays with the runs on the first axis."""
        ...

    def advantages(self, runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """Reg_t - b_t (B, T) and the batch's mean regret."""
        ...

    def logits(self, model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
        """The sampling policy's logits (B, T, A), with gradient (a :data:`LogitsOf`)."""
        ...

    def validation_regret(self, model: torch.nn.Module, device: torch.device) -> float:
        """Mean regret on the fixed validation instances."""
        ...

    @classmethod
    def for_base(cls, cfg: FinetuneConfig, meta: dict[str, Any]) -> FinetuneMethod:
        """The method for the base record ``meta``, refusing the fields it does not take (``ValueError``)."""
        ...
