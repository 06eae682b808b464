"""Online pretraining of the MDP generalist (:class:`~icrl_gym.models.mdp_generalist.MDPGeneralist`): every size.

Every step draws one MDP prior and B instances of it (:func:`sample_prior`):

- random MDPs (ICRL-TabularMDP-v0): S in [min_states, max_states], A in [min_arms, max_arms] (the
  shared field names: "arms" are the MDP's actions), H in [min_horizon, max_horizon], K in
  [1, max_episodes] with T = K H <= max_steps, the Dirichlet concentration c log-uniform in
  [min_concentration, max_concentration] (sparse to dense transitions), random starts with
  probability ``random_start_fraction``, per-step (non-stationary) dynamics with probability
  ``nonstationary_fraction``;
- with probability ``dark_room_fraction``, dark rooms of side in [min_room, max_room] with H in
  [min_horizon, room_max_horizon] and K in [1, room_max_episodes];

rolls them out (:func:`sample_batch`) with a behaviour policy -- posterior sampling (PSRL, or
DarkRoom PSRL), or, with probability ``dagger_fraction`` from step ``dagger_start`` on, the greedy
model itself (DAgger) -- each run mixed with uniform actions at a rate eps ~ U[0, max_epsilon]; and
at ``queries`` decision steps t shared by the batch labels every run with the posterior of the
optimal action P(a* = a | D_{t-1}, s_t) under the batch's prior (the Rao-Blackwellised DPT target,
Section 3.2): PSRL's ``optimal_action_probs`` (Monte-Carlo over ``posterior_samples`` Dirichlet-Beta
posterior draws) or DarkRoom PSRL's (exact).  The loss is the cross-entropy of the model's logits at
those steps to the labels, whose minimiser over all algorithms is the posterior itself; the model's
input is the counts of the history before step t (:class:`~icrl_gym.models.mdp_generalist.CountStats`,
the same statistics its online cache keeps).

The shared loop (:func:`icrl_gym.training.generalist_task.train_generalist`) makes the run resumable (a
committed state every ``checkpoint_every`` steps, bit-exact continuation), bounded by
``time_budget_hours`` of training wall time summed over resumes, and logs every ``log_every`` steps;
every ``eval_every`` steps the model (deployed as its agent's default: an exploring schedule on random MDPs, sampled
in dark rooms) plays ``eval_instances`` fresh instances of each of ``eval_cells`` against PSRL and the
greedy Bayes DPT policy (and in dark rooms the sampled one) on the same instances and noise (common
random numbers, seed 1), logged to ``train.log``.  Run as::

    OMP_NUM_THREADS=1 python -m icrl_gym.training.mdp_generalist icrl_gym/pretrained/configs/tabular-mdp-generalist.json

The shipped ``tabular-mdp-generalist`` ran this config (15,000 planned steps) to its committed state at
step 7,900, then resumed with ``steps=9000`` (the cosine schedule's last 1,100 steps, from lr 4.3e-5
down to 2.5e-5) to the end: 2.78 h of one CPU thread (docs/mdp-generalist.md).

(resume: the same command; under ``torchrun``, data-parallel: :mod:`icrl_gym.training.generalist_task`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch

from agents.learned.mdp_generalist import MDPGeneralistAgent
from agents.mdp.posterior_dpt import PosteriorOptimalAction
from agents.mdp.psrl import PSRL
from icrl_gym.algorithm import MDPAgent
from icrl_gym.config import POSITIVE, POSITIVE_INT, PROBABILITY, Allowed, checked
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.envs.dark_room import dark_room_spec
from icrl_gym.envs.mdp_core import MDPSpec
from icrl_gym.models.mdp_generalist import (
    MDPGeneralist,
    MDPGeneralistConfig,
)
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.generalist_task import (
    GeneralistTrainer,
    soft_label_loss,
    train_generalist,
)
from icrl_gym.training.loop import GeneralistLoopConfig, Logger
from icrl_gym.training.loop import main as run_main
from icrl_gym.training.mdp_expert_rollout import (
    QueryBatch,
    expert_name,
    posterior_expert,
    rollout_queries,
)

DEFAULT_EVAL_CELLS = (
    {"num_states": 5, "num_actions": 3, "horizon": 10, "episodes": 20},
    {"num_states": 10, "num_actions": 4, "horizon": 10, "episodes": 20},
    {"kind": "dark_room", "size": 5, "horizon": 20, "episodes": 10},
)
"""The in-training evaluation: today's fixed size, a larger random MDP, a small dark room."""


@dataclass
class MDPGeneralistTrainConfig(GeneralistLoopConfig):
    """Everything that defines a pretraining run of the MDP generalist (the module docstring).

    The shared fields keep their meaning with the MDP's names: ``min_arms``/``max_arms`` bound A,
    ``min_horizon``/``max_horizon`` bound H (steps per episode); ``model`` holds
    :class:`~icrl_gym.models.mdp_generalist.MDPGeneralistConfig` fields.
    """

    out_dir: str = "runs/mdp-generalist"
    max_arms: int = 6
    min_horizon: int = 2
    max_horizon: int = 30
    queries: int = 8
    min_batch: int = 4
    max_batch: int = 64
    max_epsilon: float = 0.3
    cost_per_batch: float = 3.0e7
    """B = cost_per_batch / (queries H S A (S + 64)), within [min_batch, max_batch]: about constant
    compute per step (the training forward costs ~ H S A (S + 2 d) per query)."""
    min_states: int = checked(2, Allowed(low=2, integer=True))
    """Smallest S of a random MDP."""
    max_states: int = checked(20, POSITIVE_INT)
    """Largest S of a random MDP."""
    max_episodes: int = checked(50, POSITIVE_INT)
    """Largest K of a random MDP."""
    max_steps: int = checked(1000, POSITIVE_INT)
    """Largest T = K H of a run (K is drawn in [1, min(max_episodes, max_steps // H)])."""
    min_concentration: float = checked(0.1, POSITIVE)
    """Smallest Dirichlet concentration c (sparse transitions); c is log-uniform."""
    max_concentration: float = checked(5.0, POSITIVE)
    """Largest Dirichlet concentration c (dense transitions)."""
    random_start_fraction: float = checked(0.3, PROBABILITY)
    """Probability that a batch's MDPs start from mu ~ Dirichlet(1) instead of state 0."""
    nonstationary_fraction: float = checked(0.3, PROBABILITY)
    """Probability that a batch's MDPs have one P_h, R_h per step h."""
    dark_room_fraction: float = checked(0.15, PROBABILITY)
    """Probability that a batch is dark rooms."""
    min_room: int = checked(4, Allowed(low=2, integer=True))
    """Smallest side of a dark room."""
    max_room: int = checked(12, POSITIVE_INT)
    """Largest side of a dark room."""
    room_max_horizon: int = checked(30, POSITIVE_INT)
    """Largest H of a dark room batch."""
    room_max_episodes: int = checked(10, POSITIVE_INT)
    """Largest K of a dark room batch."""
    posterior_samples: int = checked(8, POSITIVE_INT)
    """M, PSRL's posterior draws per label: the Monte-Carlo estimate of P(a* | D) of random MDPs.  The
    loss is linear in the label, so an unbiased estimate leaves the expected gradient (and the
    minimiser) unchanged: a few draws suffice, and the first draw of the posterior dominates a
    batch's sampling time (M B H' S^2 A gamma variates)."""
    eval_posterior_samples: int = checked(32, POSITIVE_INT)
    """M of the greedy Bayes DPT reference of the evaluation (its argmax needs a sharper estimate)."""
    dagger_start: int = 1000
    dagger_fraction: float = 0.1
    dagger_max_steps: int = checked(200, POSITIVE_INT)
    """A DAgger batch (rolled out by the model, ~T (H - h) planning levels) keeps K <= dagger_max_steps // H."""
    eval_every: int = 500
    eval_instances: int = 100
    eval_cells: list[dict[str, Any]] = field(default_factory=lambda: [dict(c) for c in DEFAULT_EVAL_CELLS])
    """MDPSpec fields of the evaluation's priors (a dark room: kind, size, horizon, episodes)."""
    playable_range: dict[str, list[int]] = field(
        default_factory=lambda: {
            "num_states": [2, 144],
            "num_actions": [2, 8],
            "horizon": [1, 100],
            "episodes": [1, 100],
        }
    )
    """The sizes the checkpoint's agent agrees to play (beyond the trained range: out-of-distribution use)."""

    resumable_changes: ClassVar[tuple[str, ...]] = (
        *GeneralistLoopConfig.resumable_changes,
        "eval_cells",
        "eval_posterior_samples",
        "playable_range",
    )
    """Fields a resumed run may change: its length and budget, logging, evaluation and the playable range."""

    def checkpoint_fields(self) -> dict[str, Any]:
        """The priors, the trained range (per family and overall) and the playable range."""
        families: dict[str, dict[str, list[float]]] = {
            "random": {
                "num_states": [self.min_states, self.max_states],
                "num_actions": [self.min_arms, self.max_arms],
                "horizon": [self.min_horizon, self.max_horizon],
                "episodes": [1, self.max_episodes],
                "steps": [1, self.max_steps],
                "concentration": [self.min_concentration, self.max_concentration],
            }
        }
        if self.dark_room_fraction > 0:
            families["dark_room"] = {
                "size": [self.min_room, self.max_room],
                "num_states": [self.min_room**2, self.max_room**2],
                "num_actions": [5, 5],
                "horizon": [max(self.min_horizon, 2), self.room_max_horizon],
                "episodes": [1, self.room_max_episodes],
            }
        overall = {
            name: [min(f[name][0] for f in families.values()), max(f[name][1] for f in families.values())]
            for name in ("num_states", "num_actions", "horizon", "episodes")
        }
        return {
            "env": {"kind": sorted(families), "reward": "bernoulli"},
            "trained_range": {**overall, **families},
            "playable_range": self.playable_range,
        }

    def check(self) -> None:
        """The ranges are ordered; the model's fields build an :class:`MDPGeneralistConfig`; T fits H."""
        super().check()
        self.check_order(
            ("min_states", "max_states"),
            ("min_concentration", "max_concentration"),
            ("min_room", "max_room"),
            ("min_horizon", "room_max_horizon"),
            ("max_horizon", "max_steps"),
        )
        if self.min_arms < 2:
            raise ValueError(f"MDPGeneralistTrainConfig.min_arms={self.min_arms} must be >= 2 (actions of an MDP)")
        try:
            MDPGeneralistConfig.from_dict(self.model)
        except (TypeError, ValueError) as err:
            problem = f"MDPGeneralistTrainConfig.model={self.model!r} is not an MDPGeneralistConfig: {err}"
            raise ValueError(problem) from err
        for cell in self.eval_cells:
            eval_spec(cell)


def eval_spec(cell: dict[str, Any]) -> MDPSpec:
    """The prior of an evaluation cell (a dark room from its side, else :class:`MDPSpec` fields)."""
    cell = dict(cell)
    if cell.get("kind") == "dark_room":
        return dark_room_spec(int(cell["size"]), int(cell["horizon"]), int(cell["episodes"]))
    return MDPSpec(**cell)


def log_uniform_int(rng: np.random.Generator, low: int, high: int) -> int:
    """An integer in [low, high], log-uniform (small sizes as often as large ones, per octave)."""
    return int(min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high + 0.5)))))))


def sample_prior(cfg: MDPGeneralistTrainConfig, rng: np.random.Generator) -> MDPSpec:
    """The prior of one batch (module docstring)."""
    if rng.random() < cfg.dark_room_fraction:
        size = int(rng.integers(cfg.min_room, cfg.max_room + 1))
        horizon = log_uniform_int(rng, max(cfg.min_horizon, 2), cfg.room_max_horizon)
        episodes = log_uniform_int(rng, 1, max(1, min(cfg.room_max_episodes, cfg.max_steps // horizon)))
        return dark_room_spec(size, horizon, episodes)
    horizon = log_uniform_int(rng, cfg.min_horizon, cfg.max_horizon)
    return MDPSpec(
        num_states=log_uniform_int(rng, cfg.min_states, cfg.max_states),
        num_actions=int(rng.integers(cfg.min_arms, cfg.max_arms + 1)),
        horizon=horizon,
        episodes=log_uniform_int(rng, 1, max(1, min(cfg.max_episodes, cfg.max_steps // horizon))),
        concentration=float(math.exp(rng.uniform(math.log(cfg.min_concentration), math.log(cfg.max_concentration)))),
        random_start=bool(rng.random() < cfg.random_start_fraction),
        stationary=bool(rng.random() >= cfg.nonstationary_fraction),
    )


def batch_size_for(cfg: MDPGeneralistTrainConfig, spec: MDPSpec) -> int:
    """B of a batch of ``spec`` (``cost_per_batch``)."""
    S, A, H = spec.num_states, spec.num_actions, spec.horizon
    return int(np.clip(round(cfg.cost_per_batch / (cfg.queries * H * S * A * (S + 64))), cfg.min_batch, cfg.max_batch))


def sample_batch(
    cfg: MDPGeneralistTrainConfig,
    rng: np.random.Generator,
    model: MDPGeneralist | None = None,
) -> QueryBatch:
    """A training batch: a prior (:func:`sample_prior`), B (:func:`batch_size_for`), its labelled rollouts.

    Rolled out by ``model`` (DAgger), the runs keep at most ``dagger_max_steps`` steps (fewer episodes).
    """
    spec = sample_prior(cfg, rng)
    if model is not None and spec.total_steps > cfg.dagger_max_steps:
        spec = dataclasses.replace(spec, episodes=max(1, cfg.dagger_max_steps // spec.horizon))
    return rollout_queries(
        spec, batch_size_for(cfg, spec), cfg.queries, cfg.max_epsilon, cfg.posterior_samples, rng, model
    )


def batch_loss(
    model: MDPGeneralist | torch.nn.Module, batch: QueryBatch, device: torch.device
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the logits at the query steps to the labels; the KL and argmax-agreement metrics.

    ``agree``: the fraction of queries whose argmax has positive label mass (the action could be optimal).
    """
    stats, states, h, k = batch.model_input(device)
    logits = model(stats, states, h, k, batch.spec.horizon, batch.spec.episodes)
    return soft_label_loss(logits, torch.as_tensor(batch.targets.reshape(-1, batch.targets.shape[-1]), device=device))


def generalist_agent(model: MDPGeneralist) -> MDPAgent:
    """The ``"mdp_generalist"`` agent around ``model`` in its default deployment."""
    return MDPGeneralistAgent.from_model(model)


def reference_agents(spec: MDPSpec, posterior_samples: int) -> dict[str, MDPAgent]:
    """The references of an evaluation: posterior sampling and the Bayes DPT policy on its posterior.

    The greedy Bayes DPT policy always; in a dark room also the sampled one (the model's deployment there).
    """
    posterior: dict[str, Any] = {"name": expert_name(spec)}
    if posterior["name"] == PSRL.name:
        posterior["posterior_samples"] = posterior_samples
    out: dict[str, MDPAgent] = {
        "psrl": posterior_expert(spec),
        "bayes_dpt": PosteriorOptimalAction(posterior=posterior, greedy=True),
    }
    if spec.kind == "dark_room":
        out["bayes_dpt_sampled"] = PosteriorOptimalAction(posterior=posterior, greedy=False)
    return out


def run_regret(spec: MDPSpec, agent: Any, instances: int, seed: int) -> np.ndarray:
    """Regret per run, sum_k (V*_1(mu) - return_k), (instances,), on the instances of ``seed`` (CRN)."""
    rollouts = rollout_mdp(spec, agent, instances, seed=seed, batch_size=instances)
    return rollouts.episode_regret.sum(axis=1)


def evaluate_cells(
    model: MDPGeneralist,
    cells: list[dict[str, Any]],
    instances: int,
    seed: int,
    posterior_samples: int,
    references: dict[str, dict[str, float]],
) -> list[dict[str, Any]]:
    """The model's mean regret (and s.e.) per cell, with the references' (computed once into ``references``)."""
    learned = generalist_agent(model)
    rows = []
    for cell in cells:
        spec = eval_spec(cell)
        key = str(sorted(cell.items()))
        if key not in references:
            references[key] = {
                name: float(run_regret(spec, agent, instances, seed).mean())
                for name, agent in reference_agents(spec, posterior_samples).items()
            }
        ours = run_regret(spec, learned, instances, seed)
        rows.append(
            {
                "cell": cell,
                "regret": float(ours.mean()),
                "se": float(ours.std(ddof=1) / math.sqrt(instances)),
                **references[key],
            }
        )
    return rows


def train(cfg: MDPGeneralistTrainConfig, echo: bool = True) -> MDPGeneralist:
    """Train (or resume) the run in ``cfg.out_dir``; returns the model.  See the module docstring."""

    def build(device: torch.device, ctx: DistContext) -> GeneralistTrainer[MDPGeneralist, Any]:
        model = MDPGeneralist(MDPGeneralistConfig.from_dict(cfg.model)).to(device)
        references: dict[str, dict[str, float]] = {}

        def evaluate(step: int, log: Logger) -> dict[str, Any]:
            rows = evaluate_cells(model, cfg.eval_cells, cfg.eval_instances, 1, cfg.eval_posterior_samples, references)
            for row in rows:
                log(
                    f"eval step {step}: {row['cell']} regret {row['regret']:.2f} +- {row['se']:.2f} "
                    f"(PSRL {row['psrl']:.2f}, greedy Bayes DPT {row['bayes_dpt']:.2f}"
                    + (f", sampled Bayes DPT {row['bayes_dpt_sampled']:.2f}" if "bayes_dpt_sampled" in row else "")
                    + f"; {cfg.eval_instances} instances, seed 1)"
                )
            return {"step": step, "eval": rows}

        return GeneralistTrainer(model, partial(sample_batch, cfg), batch_loss, evaluate)

    return train_generalist(cfg, echo, build)


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.training.mdp_generalist CONFIG.json [key=value ...]`` (see :func:`.loop.main`)."""
    run_main(argv, __doc__, MDPGeneralistTrainConfig, train)


if __name__ == "__main__":
    main()
