"""Fine-tuning the MDP generalist on one prior ``env``: M runs per instance at temperature tau."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from icrl_gym.algorithm import logits_action
from icrl_gym.data.rollout import ModelPlay, play
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.models.mdp_generalist import MDPGeneralist, playable_problems
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.finetune_core import VALIDATION_SEED, FinetuneConfig, instance_advantages
from icrl_gym.training.mdp_expert_rollout import flat_model_input, play_info
from icrl_gym.training.mdp_generalist import generalist_agent, run_regret

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

    The model plays through its cache (no gradient) as its agent would (:func:`play_info`); the
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
    player = ModelPlay(model, B, play_info(spec), device)
    out = {name: np.zeros((B, T, *getattr(player.cache.stats, name).shape[1:]), np.float32) for name in COUNT_FIELDS}

    def choose(t: int) -> np.ndarray:
        logits = player.logits(env.state.copy())
        for name in COUNT_FIELDS:  # after the step: the counts its logits were computed from
            out[name][:, t] = getattr(player.cache.stats, name).cpu().numpy()
        return logits_action(logits.double().cpu().numpy(), temperature, rng)

    played = play(env, T, choose, lambda t, actions, step: player.tell(actions, step["reward"]), keep=("gap",))
    return {**out, "states": cast(np.ndarray, played.states), "actions": played.actions, "gap": played.kept["gap"]}


def mdp_logits(
    model: torch.nn.Module, spec: MDPSpec, runs: dict[str, np.ndarray], device: torch.device
) -> torch.Tensor:
    """The MDP generalist's logits (B, T, A) at every step of ``runs`` (one forward pass over the B T problems)."""
    B, T = runs["states"].shape
    steps = np.arange(T)
    counts = tuple(runs[name] for name in COUNT_FIELDS)
    stats, states, h, k = flat_model_input(counts, runs["states"], steps % spec.horizon, steps // spec.horizon, device)
    return model(stats, states, h, k, spec.horizon, spec.episodes).reshape(B, T, -1)


@dataclass
class MDPGeneralistFinetune:
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

    @classmethod
    def for_base(cls, cfg: FinetuneConfig, meta: dict[str, Any]) -> MDPGeneralistFinetune:
        """``env`` gives the MDP prior, within the sizes the base's record agrees to play.

        (:func:`~icrl_gym.models.mdp_generalist.playable_problems`, the rule its agent applies at reset),
        since the fine-tuned model is saved with the base's record.
        """
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
        return cls(prior, cfg)
