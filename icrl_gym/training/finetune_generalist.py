"""Fine-tuning the Bernoulli generalist on a Bernoulli prior ``env`` (any K, T): M runs per instance at tau."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from agents.bandit.gittins import Gittins
from agents.learned.generalist import GeneralistAgent
from icrl_gym.data.rollout import ModelPlay, play
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditArms, BanditBatch, BanditReward, BanditSpec, sample_w_star
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.models.generalist import GeneralistTransformer
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.exact_bernoulli import BETA_FAMILY, family_regret_ratio
from icrl_gym.training.finetune_core import VALIDATION_SEED, FinetuneConfig, instance_advantages


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
    player = ModelPlay(model, B, EnvInfo(num_actions=K, horizon=T), device)
    played = play(
        bandits,
        T,
        lambda t: player.sample(None, temperature, rng),
        lambda t, actions, step: player.tell(actions, step["reward"]),
        keep=("expected_reward", "best_expected_reward"),
    )
    return {
        "rewards": played.rewards.astype(np.float32),
        "means": played.kept["expected_reward"].astype(np.float32),
        "best": played.kept["best_expected_reward"].astype(np.float32),
        "actions": played.actions,
    }


def generalist_logits(model: torch.nn.Module, spec: BanditSpec, runs: dict[str, np.ndarray], device) -> torch.Tensor:
    """The Bernoulli generalist's logits (B, T, K) at every step of ``runs`` (one forward pass, with gradient)."""
    actions = torch.as_tensor(runs["actions"], device=device)
    rewards = torch.as_tensor(runs["rewards"], device=device)
    steps = torch.arange(actions.shape[1], device=device).expand_as(actions)
    return model(actions, rewards, steps, spec.horizon, spec.num_actions)


def family_regrets(agent: Any, num_arms: int, horizon: int, runs: int, seed: int) -> np.ndarray:
    """Mean regret (16,) of ``agent`` on ``runs`` instances of each Beta(a, b) prior j of ``BETA_FAMILY``.

    Prior j's instances and reward draws come from seed ``seed + j``: every agent played with the same
    seed faces the same bandits (common random numbers).
    """
    return np.array(
        [
            evaluate_regret(
                bernoulli_bandit_spec(num_arms, horizon, prior="beta", prior_a=a, prior_b=b),
                agent,
                runs,
                seed=seed + j,
                batch_size=runs,
            )
            .sum(1)
            .mean()
            for j, (a, b) in enumerate(BETA_FAMILY)
        ]
    )


@functools.lru_cache(maxsize=8)
def told_gittins_regrets(num_arms: int, horizon: int, runs: int, seed: int) -> np.ndarray:
    """:func:`family_regrets` of the Gittins index told each prior (computed once per validation setting)."""
    return family_regrets(Gittins(), num_arms, horizon, runs, seed)


def fixed_instance_ratio(model: GeneralistTransformer, num_arms: int, horizon: int, runs: int, seed: int) -> float:
    """sum_j Reg_j(model) / sum_j Reg_j(Gittins told j) over the 16 Beta(a, b) priors, on the same instances.

    Prior j's ``runs`` instances and reward draws come from seed ``VALIDATION_SEED + seed + j`` (common
    random numbers: every checkpoint and the Gittins reference play the same bandits); the model plays
    greedily.  Noisy only through the fixed draw, so checkpoints are compared on equal terms.
    """
    base = VALIDATION_SEED + seed
    played = family_regrets(GeneralistAgent.from_model(model), num_arms, horizon, runs, base)
    return float(played.sum() / told_gittins_regrets(num_arms, horizon, runs, base).sum())


@dataclass
class GeneralistFinetune:
    """Fine-tuning the Bernoulli generalist on the prior ``env`` (any K, T): M runs per instance at tau."""

    spec: BanditSpec
    cfg: FinetuneConfig

    def rollout(self, model: torch.nn.Module, rng: np.random.Generator, device: torch.device) -> dict[str, np.ndarray]:
        """:func:`generalist_rollout` of ``runs_per_iteration`` instances, ``rollouts_per_instance`` runs each.

        K and T are drawn from ``arms_choices`` and ``horizon_choices`` when given (the same on every
        rank: ``rng`` is the iteration's); ``num_actions`` (B,) records K for :meth:`logits`.
        """
        cfg = self.cfg
        spec = self.spec
        if cfg.arms_choices:
            num_arms = int(rng.choice(cfg.arms_choices))
            spec = dataclasses.replace(spec, dim=num_arms, num_actions=num_arms)
        if cfg.horizon_choices:
            spec = dataclasses.replace(spec, horizon=int(rng.choice(cfg.horizon_choices)))
        runs = (cfg.runs_per_iteration, cfg.rollouts_per_instance)
        played = generalist_rollout(cast(GeneralistTransformer, model), spec, runs, cfg.temperature, rng, device)
        played["num_actions"] = np.full(played["actions"].shape[0], spec.num_actions)
        return played

    def advantages(self, runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """:func:`instance_advantages` of the gaps mu* - mu_{a_t}."""
        gaps = (runs["best"] - runs["means"]).astype(np.float64)
        return instance_advantages(gaps, self.cfg.rollouts_per_instance)

    def logits(self, model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
        """:func:`generalist_logits` / tau (the sampled policy's logits), at the runs' K and T.

        K is the runs' ``num_actions`` (a rollout's), else ``env``'s; T is the runs' length.
        """
        num_arms = int(runs["num_actions"][0]) if "num_actions" in runs else self.spec.num_actions
        played = dataclasses.replace(self.spec, dim=num_arms, num_actions=num_arms, horizon=runs["actions"].shape[1])
        return generalist_logits(model, played, runs, device) / self.cfg.temperature

    details: dict[str, float] = field(default_factory=dict)
    """The last validation's further figures (the exact validation's worst prior), for the history."""

    def validation_regret(self, model: torch.nn.Module, device: torch.device) -> float:
        """The validation score of ``cfg.validation`` (lower is better).

        "monte_carlo": the mean regret of the agent's greedy play on ``val_runs`` instances, seed
        ``VALIDATION_SEED + seed``.  "exact_family": sum_j Reg_j(model) / sum_j Reg_j(F) at K = 2,
        T = ``val_horizon`` over the 16 Beta(a, b) priors, F the family-Bayes DP, exactly
        (:func:`~icrl_gym.training.exact_bernoulli.family_regret_ratio`); ``details`` then holds
        max_j Reg_j(model) / Reg_j(F) (``val_worst``).
        """
        model.eval()
        cfg = self.cfg
        if cfg.validation == "exact_family":
            generalist = cast(GeneralistTransformer, model)
            exact = family_regret_ratio(generalist, 2, cfg.val_horizon)
            self.details = {"val_worst": exact.worst}
            if not cfg.val_arms:
                return exact.ratio
            self.details["val_exact"] = exact.ratio
            for num_arms in cfg.val_arms:
                ratio = fixed_instance_ratio(generalist, num_arms, cfg.val_arms_horizon, cfg.val_runs, cfg.seed)
                self.details[f"val_k{num_arms}"] = ratio
            return float(np.mean([exact.ratio, *(self.details[f"val_k{k}"] for k in cfg.val_arms)]))
        agent = GeneralistAgent.from_model(cast(GeneralistTransformer, model))
        regret = evaluate_regret(
            self.spec, agent, self.cfg.val_runs, seed=VALIDATION_SEED + self.cfg.seed, batch_size=self.cfg.val_runs
        )
        return float(regret.sum(axis=1).mean())

    @classmethod
    def for_base(cls, cfg: FinetuneConfig, meta: dict[str, Any]) -> GeneralistFinetune:
        """``env`` gives a Bernoulli bandit prior (BanditSpec fields, one-hot arms, Bernoulli rewards)."""
        try:
            spec = BanditSpec.from_dict(cfg.env) if cfg.env else None
        except (TypeError, ValueError):
            spec = None
        if spec is None or spec.reward is not BanditReward.BERNOULLI or spec.arms is not BanditArms.ONE_HOT:
            raise ValueError(
                "FinetuneConfig.env must give a Bernoulli bandit prior (BanditSpec fields with reward='bernoulli', "
                f"arms='one_hot') for the Bernoulli generalist, got {cfg.env!r}"
            )
        return cls(spec, cfg)
