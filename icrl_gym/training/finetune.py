r"""Online fine-tuning of a pretrained in-context model on regret (beyond imitation).

The paper's limitation section asks whether online training lets a transformer surpass the
expert it imitated.  Starting from a pretrained model Alg_theta, each iteration draws N fresh
instances from the prior, rolls Alg_theta out M times on each for T steps (sampling, with the
model's cache) and takes a policy-gradient step on the expected return of the whole in-context run
(REINFORCE, Williams 1992), which is minus the Bayes regret up to a constant:

    grad J = -E[ sum_t grad log Alg_theta(a_t | D_{t-1}, A_t) * (Reg_t - b_t) ],
    Reg_t = sum_{s >= t} g_s      (regret-to-go: the per-step gaps g_s summed from step t on).

For a bandit transformer g_s = mu*_s - mu_{a_s}, the arms' mean rewards: this equals the
REINFORCE gradient of the return, as mu_{a_s} = <a_s, w*> replaces the sampled reward r_s
(E[r_s | D_{s-1}, a_s] = mu_{a_s}, and every score term with index <= s is D_{s-1}-measurable),
and the instance's best means mu*_s, fixed before a_t is drawn, act as a per-instance baseline
that removes most of the variance coming from the draw of w*.

The Bernoulli generalist (:class:`~icrl_gym.models.generalist.GeneralistTransformer`, any K and T)
is fine-tuned on a Bernoulli prior ``env`` with the same gaps, e.g. on a family of Beta priors that
it is not told (``prior="beta_family"``): the expected return is then the family-average of the
Bayes returns, whose maximiser is the family-Bayes policy (``agents.bandit.bernoulli_bayes_optimal``),
a target that no label from an expert told the prior can give.

For the MDP generalist (:class:`~icrl_gym.models.mdp_generalist.MDPGeneralist`, any S, A, H, K;
fine-tuned on one prior, ``env``) g_s = V*_h(s_h) - Q*_h(s_h, a_h) >= 0, the action's
suboptimality at step h of its episode (Appendix G's Q*).  By the performance-difference lemma
the gaps of an episode sum in expectation to V*_1(mu) minus the episode's expected return, for
any policy, so J = -E[sum_s g_s] exactly and the estimator above is unbiased (g_s is a function
of (s_h, a_h) and the instance, known once a_s is drawn); it drops the reward and transition noise
that the realised return carries.  The rollouts sample softmax(logits / tau) (``temperature``)
and the score is that policy's.

b_t is the leave-one-out mean of Reg_t over the other runs of the same instance when M >= 2
(``rollouts_per_instance``; the instance's difficulty cancels), over the other B - 1 runs of the
batch when M = 1; unbiased either way as the runs are independent given the instance.  The loss
is (1 / (B T)) sum_{b, t} (Reg_t - b_t) log pi(a_t), B = N M runs.  An optional KL penalty
beta * KL(Alg_theta || Alg_theta0) keeps the policy near the pretrained one.  Validation regret
on a fixed set of instances picks the checkpoint (a bandit transformer sampling its policy, the
MDP generalist in its agent's default deployment); the final comparison uses other fresh
instances (the harness's seed).

Command line: ``python -m icrl_gym.training.finetune CONFIG.json [--set key=value ...] --export PATH`` (resumable
from out_dir), e.g. the MDP generalist on one cell of random MDPs::

    OMP_NUM_THREADS=1 python -m icrl_gym.training.finetune --set base=tabular-mdp-generalist \
        'env={"num_states": 20, "num_actions": 4, "horizon": 5, "episodes": 5}' \
        runs_per_iteration=32 rollouts_per_instance=4 temperature=1 lr=3e-4 iterations=400 \
        eval_every=100 val_runs=400 name=mdp-generalist-20-4-5-5 out_dir=runs/mdp-generalist-20-4-5-5

At iteration 0 and at every validation the training state (weights, optimiser, RNG
states, iteration, history, and the best validated weights) is committed to ``out_dir`` as one
verified unit (:mod:`icrl_gym.training.state`), and the best model is copied to
``out_dir/best.safetensors`` + ``best.json``; a resumed run continues exactly, also from a moved folder.
Under ``torchrun`` every rank rolls out the same B runs and computes the advantages on all of them
(the baseline needs every run), then takes the policy-gradient step on its share of the runs
(:mod:`icrl_gym.training.loop`); rank 0 validates and writes.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
import torch.nn.functional as F

from agents.learned.generalist import GeneralistAgent
from agents.learned.transformer import TransformerAgent
from icrl_gym.algorithm import BanditAgent, logits_action
from icrl_gym.checkpoint import checkpoint_kind, load_checkpoint, resolve_checkpoint, save_checkpoint
from icrl_gym.config import NONNEGATIVE, POSITIVE, POSITIVE_INT, Allowed, checked
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditArms, BanditBatch, BanditReward, BanditSpec, sample_w_star
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.kinds import CheckpointKind
from icrl_gym.models.generalist import GeneralistTransformer
from icrl_gym.models.mdp_generalist import MDPGeneralist, playable_problems
from icrl_gym.models.policy import EnvInfo
from icrl_gym.models.transformer import BanditTransformer
from icrl_gym.training.curves import TrainingCurves
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.loop import (
    Logger,
    TrainerConfig,
    global_means,
    main_with_export,
    no_log,
    resume,
    run_in_folder,
    save_state,
    scale_to_global_mean,
    shard_rows,
    train_steps,
    wrap_ddp,
)
from icrl_gym.training.mdp_generalist import flat_model_input, generalist_agent, play_cache, run_regret
from icrl_gym.training.state import RunState, set_rng_state
from icrl_gym.utils.fileio import RunLog
from icrl_gym.utils.progress import progress_bar


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
    iterations: int = checked(300, POSITIVE_INT)
    """Policy-gradient steps."""
    runs_per_iteration: int = checked(128, Allowed(low=2, integer=True))
    """Fresh instances N per step (at least two: with one run each, a run's leave-one-out baseline is the
    mean over the N - 1 others)."""
    rollouts_per_instance: int = checked(1, POSITIVE_INT)
    """M runs of every instance, B = N M runs per step; M >= 2: a run's baseline is the mean of the M - 1
    other runs of its instance (the generalists only; a bandit transformer takes M = 1)."""
    temperature: float = checked(1.0, POSITIVE)
    """tau: the rollouts sample softmax(logits / tau), and the loss scores that policy (the generalists
    only; a bandit transformer samples its own softmax, tau = 1)."""
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
    eval_every: int = checked(25, POSITIVE_INT)
    """Iterations between validations (and resumable checkpoints)."""
    out_dir: str = "runs/bernoulli-ad-ucb-finetuned"

    def check(self) -> None:
        """A given ``env`` is an MDP or a bandit prior (which one the base's kind needs is checked at the start)."""
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


def _agent_from_model(model: BanditTransformer, seed: Any) -> BanditAgent:
    """The bandit transformer agent around ``model``."""
    return TransformerAgent.from_model(model, seed=seed)


FINETUNABLE = (CheckpointKind.BANDIT_TRANSFORMER, CheckpointKind.MDP_GENERALIST, CheckpointKind.GENERALIST_TRANSFORMER)
"""The kinds of checkpoint fine-tuning starts from (each has its :class:`FinetuneTask`)."""


def _load_base(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Load a checkpoint that must hold a model fine-tuning supports (:data:`FINETUNABLE`)."""
    model, meta = load_checkpoint(path, device=device)
    if checkpoint_kind(meta) not in FINETUNABLE:
        kinds = " or ".join(kind.value for kind in FINETUNABLE)
        raise ValueError(f"fine-tuning needs a {kinds} checkpoint; {path} holds a {checkpoint_kind(meta).value}")
    return model, meta


def rollout(
    model: BanditTransformer,
    spec: BanditSpec,
    num_runs: int,
    rng: np.random.Generator,
    device: torch.device,
    instance: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Sample ``num_runs`` in-context runs from the model (KV cache, no gradient).

    ``instance`` may fix ``w_star`` (and ``action_sets``) instead of drawing them from the prior.
    """
    agent = _agent_from_model(model, seed=rng)  # the agent's cached rollout around our model
    batch = BanditBatch(spec, num_runs, rng, **(instance or {}))
    agent.reset(batch_size=num_runs, dim=spec.dim, num_actions=spec.num_actions)
    T = spec.horizon
    sets = np.zeros((num_runs, T, spec.num_actions, spec.dim), np.float32)
    actions = np.zeros((num_runs, T), np.int64)
    rewards = np.zeros((num_runs, T), np.float32)
    means = np.zeros((num_runs, T))
    best = np.zeros((num_runs, T))
    for t in range(T):
        sets[:, t] = batch.action_sets
        a = agent.act_batch(sets[:, t])
        out = batch.step(a)
        agent.update_batch(sets[:, t], a, out["reward"])
        actions[:, t], rewards[:, t] = a, out["reward"]
        means[:, t], best[:, t] = out["expected_reward"], out["best_expected_reward"]
    return {"action_sets": sets, "actions": actions, "rewards": rewards, "means": means, "best": best}


def leave_one_out_advantages(gaps: np.ndarray, group: int) -> tuple[np.ndarray, dict[str, float]]:
    """Reg_t - b_t (B, T) from the per-step gaps g_t (B, T): the regret-to-go minus its leave-one-out mean.

    The runs come in groups of ``group`` consecutive rows (the runs of one instance, or the whole
    batch): b_t of a run is the mean of Reg_t over the other runs of its group (module docstring).
    Computed on the whole batch before a data-parallel rank takes its rows; also the batch's mean regret.
    """
    to_go = np.flip(np.cumsum(np.flip(gaps, axis=1), axis=1), axis=1)  # Reg_t
    B, T = to_go.shape
    grouped = to_go.reshape(B // group, group, T)
    baseline = (grouped.sum(axis=1, keepdims=True) - grouped) / (group - 1)  # leave-one-out mean
    return (grouped - baseline).reshape(B, T), {"regret": float(gaps.sum(axis=1).mean())}


def instance_advantages(gaps: np.ndarray, rollouts: int) -> tuple[np.ndarray, dict[str, float]]:
    """The gaps' regret-to-go minus the baseline over an instance's M = ``rollouts`` runs (M >= 2), else the batch's."""
    return leave_one_out_advantages(gaps, rollouts if rollouts >= 2 else gaps.shape[0])


def advantages(runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """A bandit batch's Reg_t - b_t (B, T): gaps mu*_t - mu_{a_t}, the baseline over the whole batch."""
    return leave_one_out_advantages(runs["best"] - runs["means"], runs["best"].shape[0])


LogitsOf = Callable[[torch.nn.Module, dict[str, np.ndarray], torch.device], torch.Tensor]
"""The logits (B, T, A) of the sampling policy at every step of ``runs`` (with gradient): model, runs, device."""


def bandit_logits(model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
    """A bandit transformer's logits (B, T, A) on a batch of runs (one causal forward pass)."""
    sets = torch.as_tensor(runs["action_sets"], device=device)
    actions = torch.as_tensor(runs["actions"], device=device)
    rewards = torch.as_tensor(runs["rewards"], device=device)
    return model(sets, actions, rewards)[0]


def policy_gradient_loss(
    model: torch.nn.Module,
    base: torch.nn.Module | None,
    runs: dict[str, np.ndarray],
    advantage: np.ndarray,
    kl_weight: float,
    device: torch.device,
    logits_of: LogitsOf = bandit_logits,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The model's forward pass for training: the REINFORCE loss of ``advantage`` (B, T) (+ the KL penalty).

    ``logits_of`` computes the sampling policy's logits (a bandit transformer's by default, the MDP
    generalist's :func:`mdp_logits` over tau); ``model`` may be a DistributedDataParallel wrapper.
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


def validation_regret(model: BanditTransformer, spec: BanditSpec, cfg: FinetuneConfig, device) -> float:
    """Mean regret of the sampled policy on the fixed validation instances."""
    agent = _agent_from_model(model, seed=VALIDATION_SEED + cfg.seed)
    model.eval()
    regret = evaluate_regret(spec, agent, cfg.val_runs, seed=VALIDATION_SEED + cfg.seed, batch_size=cfg.val_runs)
    return float(regret.sum(axis=1).mean())


COUNT_FIELDS = ("n_sas", "n_sa", "reward_sum", "starts")
"""The :class:`~icrl_gym.models.mdp_generalist.CountStats` an MDP rollout records at every step."""


def mdp_rollout(
    model: MDPGeneralist,
    spec: MDPSpec,
    runs: tuple[int, int],
    temperature: float,
    rng: np.random.Generator,
    device: torch.device,
    instance: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Sample M runs of each of N instances of ``spec`` (``runs`` = (N, M)) from softmax(logits / tau).

    The model plays through its cache (no gradient) as its agent would (:func:`play_cache`); the
    runs of an instance are consecutive rows.  ``instance`` may fix P, R, mu (leading axis 1 or
    N) instead of drawing them from the prior.  Returns, per run and step (B, T, ...),
    the counts the step's logits were computed from (:data:`COUNT_FIELDS`), ``states``, ``actions``
    and ``gap`` = V*_h(s_h) - Q*_h(s_h, a_h).
    """
    num_instances, rollouts = runs
    if instance is None:
        drawn = spec.kind.dynamics.draw(spec, rng, num_instances)
        instance = {"P": drawn.P, "R": drawn.R, "mu": drawn.mu}
    arrays = {name: np.asarray(value) for name, value in instance.items()}
    repeated = {
        name: np.repeat(np.broadcast_to(value, (num_instances, *value.shape[1:])), rollouts, axis=0)
        for name, value in arrays.items()
    }
    B, T = num_instances * rollouts, spec.total_steps
    env = MDPBatch(spec, B, rng, instance=repeated)
    cache = play_cache(model, spec, B, device)
    out = {name: np.zeros((B, T, *getattr(cache.stats, name).shape[1:]), np.float32) for name in COUNT_FIELDS}
    out.update(states=np.zeros((B, T), np.int64), actions=np.zeros((B, T), np.int64), gap=np.zeros((B, T)))
    prev_action: torch.Tensor | None = None
    prev_reward: torch.Tensor | None = None
    for t in range(T):
        states = env.state.copy()
        logits = model.step(cache, torch.as_tensor(states, device=device), prev_action, prev_reward).logits
        for name in COUNT_FIELDS:  # after the step: the counts its logits were computed from
            out[name][:, t] = getattr(cache.stats, name).cpu().numpy()
        actions = logits_action(logits.double().cpu().numpy(), temperature, rng)
        step = env.step(actions)
        out["states"][:, t], out["actions"][:, t], out["gap"][:, t] = states, actions, step["gap"]
        prev_action = torch.as_tensor(actions, device=device)
        prev_reward = torch.as_tensor(step["reward"], dtype=torch.float32, device=device)
    return out


def mdp_logits(
    model: torch.nn.Module, spec: MDPSpec, runs: dict[str, np.ndarray], device: torch.device
) -> torch.Tensor:
    """The MDP generalist's logits (B, T, A) at every step of ``runs`` (one forward pass over the B T problems)."""
    B, T = runs["states"].shape
    steps = np.arange(T)
    counts = tuple(runs[name] for name in COUNT_FIELDS)
    stats, states, h, k = flat_model_input(counts, runs["states"], steps % spec.horizon, steps // spec.horizon, device)
    return model(stats, states, h, k, spec.horizon, spec.episodes).reshape(B, T, -1)


class FinetuneTask(Protocol):
    """What the fine-tuning loop needs of one kind of model: its rollouts, advantages, logits and validation."""

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


@dataclass
class BanditTask:
    """Fine-tuning a bandit transformer on its checkpoint's environment (one run per instance, tau = 1)."""

    spec: BanditSpec
    cfg: FinetuneConfig

    def rollout(self, model: torch.nn.Module, rng: np.random.Generator, device: torch.device) -> dict[str, np.ndarray]:
        """:func:`rollout` of ``runs_per_iteration`` instances."""
        return rollout(cast(BanditTransformer, model), self.spec, self.cfg.runs_per_iteration, rng, device)

    def advantages(self, runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """:func:`advantages` (the baseline over the batch)."""
        return advantages(runs)

    def logits(self, model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
        """:func:`bandit_logits`."""
        return bandit_logits(model, runs, device)

    def validation_regret(self, model: torch.nn.Module, device: torch.device) -> float:
        """:func:`validation_regret` (the sampled policy)."""
        return validation_regret(cast(BanditTransformer, model), self.spec, self.cfg, device)


@dataclass
class MDPTask:
    """Fine-tuning the MDP generalist on the prior ``env``: M runs per instance at temperature tau."""

    spec: MDPSpec
    cfg: FinetuneConfig

    def rollout(self, model: torch.nn.Module, rng: np.random.Generator, device: torch.device) -> dict[str, np.ndarray]:
        """:func:`mdp_rollout` of ``runs_per_iteration`` instances, ``rollouts_per_instance`` runs each."""
        cfg, generalist = self.cfg, cast(MDPGeneralist, model)
        runs = (cfg.runs_per_iteration, cfg.rollouts_per_instance)
        return mdp_rollout(generalist, self.spec, runs, cfg.temperature, rng, device)

    def advantages(self, runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """:func:`instance_advantages` of the gaps."""
        return instance_advantages(runs["gap"], self.cfg.rollouts_per_instance)

    def logits(self, model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
        """:func:`mdp_logits` / tau: the logits of the policy the rollouts sampled."""
        return mdp_logits(model, self.spec, runs, device) / self.cfg.temperature

    def validation_regret(self, model: torch.nn.Module, device: torch.device) -> float:
        """Mean regret of the agent's default deployment on ``val_runs`` instances (seed ``VALIDATION_SEED + seed``)."""
        model.eval()
        agent = generalist_agent(cast(MDPGeneralist, model))
        return float(run_regret(self.spec, agent, self.cfg.val_runs, VALIDATION_SEED + self.cfg.seed).mean())


def generalist_rollout(
    model: GeneralistTransformer,
    spec: BanditSpec,
    runs: tuple[int, int],
    temperature: float,
    rng: np.random.Generator,
    device: torch.device,
    instance: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Sample M runs of each of N Bernoulli instances of ``spec`` (``runs`` = (N, M)) from softmax(logits / tau).

    The model plays through its grouped cache (no gradient); the runs of an instance are consecutive
    rows.  ``instance`` may fix the arms' means (N or 1, K) instead of drawing them from the prior.
    Returns actions, rewards, the pulled arm's mean and the best mean per run and step (B, T).
    """
    num_instances, rollouts = runs
    B, K, T = num_instances * rollouts, spec.num_actions, spec.horizon
    drawn = sample_w_star(spec, rng, num_instances) if instance is None else np.asarray(instance, dtype=np.float64)
    means = np.repeat(np.broadcast_to(drawn, (num_instances, K)), rollouts, axis=0)  # (B, K)
    bandits = BanditBatch(spec, B, rng, w_star=means)
    cache = model.new_cache(B, EnvInfo(num_actions=K, horizon=T), device)
    out = {name: np.zeros((B, T), np.float32) for name in ("rewards", "means", "best")}
    out["actions"] = np.zeros((B, T), np.int64)
    prev_action: torch.Tensor | None = None
    prev_reward: torch.Tensor | None = None
    for t in range(T):
        logits = model.step(cache, None, prev_action, prev_reward).logits
        actions = logits_action(logits.double().cpu().numpy(), temperature, rng)
        step = bandits.step(actions)
        out["actions"][:, t], out["rewards"][:, t] = actions, step["reward"]
        out["means"][:, t], out["best"][:, t] = step["expected_reward"], step["best_expected_reward"]
        prev_action = torch.as_tensor(actions, device=device)
        prev_reward = torch.as_tensor(step["reward"], dtype=torch.float32, device=device)
    return out


def generalist_logits(model: torch.nn.Module, spec: BanditSpec, runs: dict[str, np.ndarray], device) -> torch.Tensor:
    """The Bernoulli generalist's logits (B, T, K) at every step of ``runs`` (one forward pass, with gradient)."""
    actions = torch.as_tensor(runs["actions"], device=device)
    rewards = torch.as_tensor(runs["rewards"], device=device)
    steps = torch.arange(actions.shape[1], device=device).expand_as(actions)
    return model(actions, rewards, steps, spec.horizon, spec.num_actions)


@dataclass
class GeneralistTask:
    """Fine-tuning the Bernoulli generalist on the prior ``env`` (any K, T): M runs per instance at tau."""

    spec: BanditSpec
    cfg: FinetuneConfig

    def rollout(self, model: torch.nn.Module, rng: np.random.Generator, device: torch.device) -> dict[str, np.ndarray]:
        """:func:`generalist_rollout` of ``runs_per_iteration`` instances, ``rollouts_per_instance`` runs each."""
        cfg = self.cfg
        runs = (cfg.runs_per_iteration, cfg.rollouts_per_instance)
        return generalist_rollout(cast(GeneralistTransformer, model), self.spec, runs, cfg.temperature, rng, device)

    def advantages(self, runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """:func:`instance_advantages` of the gaps mu* - mu_{a_t}."""
        gaps = (runs["best"] - runs["means"]).astype(np.float64)
        return instance_advantages(gaps, self.cfg.rollouts_per_instance)

    def logits(self, model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
        """:func:`generalist_logits` / tau (the sampled policy's logits)."""
        return generalist_logits(model, self.spec, runs, device) / self.cfg.temperature

    def validation_regret(self, model: torch.nn.Module, device: torch.device) -> float:
        """Mean regret of the agent's greedy play on ``val_runs`` instances, seed ``VALIDATION_SEED + seed``."""
        model.eval()
        agent = GeneralistAgent.from_model(cast(GeneralistTransformer, model))
        regret = evaluate_regret(
            self.spec, agent, self.cfg.val_runs, seed=VALIDATION_SEED + self.cfg.seed, batch_size=self.cfg.val_runs
        )
        return float(regret.sum(axis=1).mean())


def make_task(cfg: FinetuneConfig, meta: dict[str, Any]) -> FinetuneTask:
    """The task of the base checkpoint's kind, refusing the fields that kind does not take (``ValueError``).

    Called before any rollout, and before the run's state is read or written.  An MDP generalist's
    ``env`` must also lie within the sizes its record agrees to play
    (:func:`~icrl_gym.models.mdp_generalist.playable_problems`, the rule its agent applies at reset),
    since the fine-tuned model is saved with the base's record.
    """
    kind = checkpoint_kind(meta)
    if kind is CheckpointKind.MDP_GENERALIST:
        if not cfg.env:
            raise ValueError("FinetuneConfig.env must give the MDP prior (MDPSpec fields) for the MDP generalist")
        prior = MDPSpec.from_dict(cfg.env)
        sizes = EnvInfo(prior.num_actions, prior.horizon, num_states=prior.num_states, episodes=prior.episodes)
        problems = playable_problems(meta, sizes)  # the agent's own rule and the base record's ranges
        if problems:
            raise ValueError(
                f"FinetuneConfig.env={cfg.env!r} is outside the sizes the MDP generalist {cfg.base!r} plays "
                f"(its record's playable range): {'; '.join(problems)}; the fine-tuned model keeps that record, "
                "so its agent would refuse this env: choose sizes within the range"
            )
        return MDPTask(prior, cfg)
    if kind is CheckpointKind.GENERALIST_TRANSFORMER:
        try:
            spec = BanditSpec.from_dict(cfg.env) if cfg.env else None
        except (TypeError, ValueError):
            spec = None
        if spec is None or spec.reward is not BanditReward.BERNOULLI or spec.arms is not BanditArms.ONE_HOT:
            raise ValueError(
                "FinetuneConfig.env must give a Bernoulli bandit prior (BanditSpec fields with reward='bernoulli', "
                f"arms='one_hot') for the Bernoulli generalist, got {cfg.env!r}"
            )
        return GeneralistTask(spec, cfg)
    bandit_values = {"env": {}, "rollouts_per_instance": 1, "temperature": 1.0}
    unused = [f"{name}={getattr(cfg, name)!r}" for name, value in bandit_values.items() if getattr(cfg, name) != value]
    if unused:
        raise ValueError(
            "a bandit transformer is fine-tuned on its own environment, one run per instance at temperature 1: "
            f"FinetuneConfig {', '.join(unused)} is not allowed (env empty, rollouts_per_instance=1, temperature=1)"
        )
    return BanditTask(BanditSpec.from_dict(meta["env"]), cfg)


def finetune(cfg: FinetuneConfig, command: str | None = None, echo: bool = True) -> tuple[torch.nn.Module, dict]:
    """Run (or resume) the fine-tuning; returns the best model on validation and its record."""
    return run_in_folder(cfg, lambda ctx, device: _finetune(cfg, command, echo, ctx, device))


def _finetune(
    cfg: FinetuneConfig, command: str | None, echo: bool, ctx: DistContext, device: torch.device
) -> tuple[torch.nn.Module, dict]:
    out = Path(cfg.out_dir)
    base_path = resolve_checkpoint(cfg.base)
    model, base_meta = _load_base(base_path, device)
    task = make_task(cfg, base_meta)
    base = copy.deepcopy(model).eval() if cfg.kl_weight > 0 else None
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    state: dict[str, Any] = {
        "iteration": 0,
        "history": [],
        "wall_seconds": 0.0,
        "best": None,
        "command": command,
        "command_history": [command],
        "config": cfg.to_dict(),  # exported records carry it (the harness reads it)
    }
    store = RunState(out, keep=1)

    def commit() -> None:
        """Commit the state at ``state["iteration"]`` (keeping the best weights); copy the best to out_dir/best."""
        keep = {"best": state["best"]["iteration"]}
        meta = {**base_meta, "finetune": state}
        save_state(
            store, state["iteration"], model, optimizer, cfg, state, meta, publish={"best": "best"}, also_keep=keep
        )

    loaded, _ = resume(store, cfg, model, optimizer)
    log: Logger = RunLog(out / "train.log", echo) if ctx.is_main else no_log
    if loaded is not None:
        state = loaded.record
        state["command_history"] = [*state.get("command_history", [state.get("command")]), command]
        state["config"] = cfg.to_dict()  # the same but for out_dir
        if ctx.is_main:
            store.publish(out / "best", role="best")  # renews a copy that a stop during the last one left unfinished
        log(f"resumed at iteration {state['iteration']} ({loaded.source})")
    elif ctx.is_main:
        start = task.validation_regret(model, device)
        state["history"].append({"iteration": 0, "val_regret": start, "wall_seconds": 0.0})
        state["best"] = {"iteration": 0, "val_regret": start}
        commit()
        log(f"pretrained model: validation regret {start:.3f}")
    if ctx.enabled:
        log(f"DDP: {ctx.world_size} processes share the runs of every iteration")
    net = wrap_ddp(model, ctx, device, unused=True)  # the value head gets no gradient
    t_start = time.perf_counter() - state["wall_seconds"]
    # metrics.csv (+ TensorBoard): step = iteration, val = validation regret
    curves = TrainingCurves(out, start_step=state["iteration"]) if ctx.is_main else None
    bar = progress_bar(cfg.iterations, "finetune", unit="it", initial=state["iteration"])
    if loaded is not None:  # the generators as they were after the saved iteration: the run continues exactly
        set_rng_state(loaded.rng)

    def loss_at(it: int) -> tuple[torch.Tensor, dict[str, float]]:
        model.eval()
        runs = task.rollout(model, np.random.default_rng([cfg.seed, it]), device)
        model.train()
        advantage, stats = task.advantages(runs)
        total = advantage.shape[0]
        rows = shard_rows(ctx, total)
        if ctx.enabled:  # every rank rolled out the same runs: each takes its rows
            runs, advantage = {k: v[rows] for k, v in runs.items()}, advantage[rows]
        loss, local = policy_gradient_loss(net, base, runs, advantage, cfg.kl_weight, device, task.logits)
        stats.update(global_means(ctx, local, rows.size, total))
        return scale_to_global_mean(loss, ctx, rows.size, total), stats

    def after_step(it: int, stats: dict[str, float], seconds: float) -> None:
        state["iteration"] = it
        bar.update(1)
        if it % 5 == 0:
            log(f"iteration {it}: batch regret {stats['regret']:.2f}, loss {stats['loss']:.4f}")
        if ctx.is_main and curves is not None and (it % cfg.eval_every == 0 or it == cfg.iterations):
            val = task.validation_regret(model, device)
            state["wall_seconds"] = time.perf_counter() - t_start
            state["history"].append({"iteration": it, "val_regret": val, **stats})
            curves.record(it, stats["loss"], val, cfg.lr, state["wall_seconds"])
            if val < state["best"]["val_regret"]:
                state["best"] = {"iteration": it, "val_regret": val}
            commit()
            log(f"iteration {it}: validation regret {val:.3f} (best {state['best']['val_regret']:.3f})")

    train_steps(
        model,
        optimizer,
        state["iteration"],
        lambda it: it < cfg.iterations,
        loss_at,
        lambda it: cfg.lr,
        cfg.grad_clip,
        after_step,
    )
    bar.close()
    if curves is None:  # a rank other than 0: no validation, no files
        return model, {**base_meta, "finetune": state}
    curves.close()
    best, best_meta = _load_base(store.checkpoint("best"), device)
    best_meta["name"] = cfg.name
    best_meta["finetune"] = {**state, "base": str(cfg.base), "base_name": base_meta.get("name")}
    return best, best_meta


def export(model: torch.nn.Module, meta: dict[str, Any], path: str | Path) -> Path:
    """Write the best model as ``<path>.safetensors`` + ``<path>.json`` (a shippable checkpoint)."""
    return save_checkpoint(path, model, meta)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m icrl_gym.training.finetune [CONFIG.json] [--set key=value ...] [--export PATH]``."""
    main_with_export(argv, __doc__, FinetuneConfig, finetune, export)


if __name__ == "__main__":
    main()
