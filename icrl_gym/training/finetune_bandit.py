"""Fine-tuning a bandit transformer on its checkpoint's environment (one run per instance, tau = 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from agents.learned.transformer import TransformerAgent
from icrl_gym.algorithm import BanditAgent
from icrl_gym.data.rollout import play
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditBatch, BanditSpec
from icrl_gym.models.transformer import BanditTransformer
from icrl_gym.training.finetune_core import VALIDATION_SEED, FinetuneConfig, leave_one_out_advantages


def _agent_from_model(model: BanditTransformer, seed: Any) -> BanditAgent:
    """The bandit transformer agent around ``model``."""
    return TransformerAgent.from_model(model, seed=seed)


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
    sets = np.zeros((num_runs, spec.horizon, spec.num_actions, spec.dim), np.float32)

    def choose(t: int) -> np.ndarray:
        sets[:, t] = batch.action_sets
        return agent.act_batch(sets[:, t])

    def on_step(t: int, actions: np.ndarray, step: dict[str, np.ndarray]) -> None:
        agent.update_batch(sets[:, t], actions, step["reward"])

    runs = play(batch, spec.horizon, choose, on_step, keep=("expected_reward", "best_expected_reward"))
    means, best = runs.kept["expected_reward"], runs.kept["best_expected_reward"]
    return {
        "action_sets": sets,
        "actions": runs.actions,
        "rewards": runs.rewards.astype(np.float32),
        "means": means,
        "best": best,
    }


def advantages(runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """A bandit batch's Reg_t - b_t (B, T): gaps mu*_t - mu_{a_t}, the baseline over the whole batch."""
    return leave_one_out_advantages(runs["best"] - runs["means"], runs["best"].shape[0])


def bandit_logits(model: torch.nn.Module, runs: dict[str, np.ndarray], device: torch.device) -> torch.Tensor:
    """A bandit transformer's logits (B, T, A) on a batch of runs (one causal forward pass)."""
    sets = torch.as_tensor(runs["action_sets"], device=device)
    actions = torch.as_tensor(runs["actions"], device=device)
    rewards = torch.as_tensor(runs["rewards"], device=device)
    return model(sets, actions, rewards)[0]


def validation_regret(model: BanditTransformer, spec: BanditSpec, cfg: FinetuneConfig, device) -> float:
    """Mean regret of the sampled policy on the fixed validation instances."""
    agent = _agent_from_model(model, seed=VALIDATION_SEED + cfg.seed)
    model.eval()
    regret = evaluate_regret(spec, agent, cfg.val_runs, seed=VALIDATION_SEED + cfg.seed, batch_size=cfg.val_runs)
    return float(regret.sum(axis=1).mean())


@dataclass
class BanditFinetune:
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

    @classmethod
    def for_base(cls, cfg: FinetuneConfig, meta: dict[str, Any]) -> BanditFinetune:
        """On the checkpoint's own environment: ``env`` empty, ``rollouts_per_instance`` 1, ``temperature`` 1."""
        bandit_values = {"env": {}, "rollouts_per_instance": 1, "temperature": 1.0}
        unused = [
            f"{name}={getattr(cfg, name)!r}" for name, value in bandit_values.items() if getattr(cfg, name) != value
        ]
        if unused:
            raise ValueError(
                "a bandit transformer is fine-tuned on its own environment, one run per instance at temperature 1: "
                f"FinetuneConfig {', '.join(unused)} is not allowed (env empty, rollouts_per_instance=1, temperature=1)"
            )
        return cls(BanditSpec.from_dict(meta["env"]), cfg)
