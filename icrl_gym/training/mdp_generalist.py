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

(resume: the same command; ``torchrun --standalone --nproc_per_node=N -m icrl_gym.training.mdp_generalist``
shares every batch's runs between the ranks, as for the other generalists).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from agents.learned.mdp_generalist import MDPGeneralistAgent
from agents.mdp.posterior_dpt import PosteriorOptimalAction
from agents.mdp.psrl import PSRL, DarkRoomPSRL
from icrl_gym.algorithm import MDPAgent, child_rng
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.envs.dark_room import dark_room_spec, dark_room_successors
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.mdp_env import reset_info
from icrl_gym.estimators.statistics import TransitionCounts
from icrl_gym.models.mdp_generalist import (
    CountStats,
    MDPGeneralist,
    MDPGeneralistCache,
    MDPGeneralistConfig,
    known_move_counts,
)
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.generalist_task import (
    GeneralistTrainer,
    soft_label_loss,
    train_generalist,
)
from icrl_gym.training.loop import Logger
from icrl_gym.training.loop import main as run_main
from icrl_gym.training.mdp_generalist_config import MDPGeneralistTrainConfig, eval_spec


@dataclass
class QueryBatch:
    """One training batch: B runs of one prior, their counts and labels at Q query steps shared by the runs."""

    n_sas: np.ndarray
    """(B, Q, H', S, A, S) N_h(s, a, s') before each query step."""
    n_sa: np.ndarray
    """(B, Q, H', S, A) N_h(s, a)."""
    reward_sum: np.ndarray
    """(B, Q, H', S, A) reward sums."""
    starts: np.ndarray
    """(B, Q, S) episodes started in s (the query step's own episode included)."""
    states: np.ndarray
    """(B, Q) s_t at the query steps."""
    h: np.ndarray
    """(Q,) step within the episode of each query."""
    k: np.ndarray
    """(Q,) episode of each query."""
    targets: np.ndarray
    """(B, Q, A) P(a* = a | D_{t-1}, s_t)."""
    spec: MDPSpec
    """The batch's prior."""

    @property
    def size(self) -> int:
        """B."""
        return self.states.shape[0]

    def rows(self, index: np.ndarray) -> QueryBatch:
        """The batch of the runs ``index`` (a data-parallel rank's share)."""
        arrays = ("n_sas", "n_sa", "reward_sum", "starts", "states", "targets")
        return dataclasses.replace(self, **{name: getattr(self, name)[index] for name in arrays})

    def model_input(self, device: torch.device) -> tuple[CountStats, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The B Q problems flattened (run-major): counts, states, h, k as the model's forward takes them."""
        counts = (self.n_sas, self.n_sa, self.reward_sum, self.starts)
        return flat_model_input(counts, self.states, self.h, self.k, device)


def flat_model_input(
    counts: Sequence[np.ndarray],
    states: np.ndarray,
    h: np.ndarray,
    k: np.ndarray,
    device: torch.device,
) -> tuple[CountStats, torch.Tensor, torch.Tensor, torch.Tensor]:
    """B runs' counts at Q steps each, flattened (run-major) to the B Q problems of the model's forward.

    ``counts``: (N_h(s, a, s'), N_h(s, a), R_h(s, a), N_start(s)), each (B, Q, ...); ``states`` (B, Q);
    ``h``, ``k`` (Q,): the step and episode of each of the Q steps (shared by the runs).
    """
    b, q = states.shape

    def flat(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x.reshape(b * q, *x.shape[2:]), dtype=torch.float32, device=device)

    stats = CountStats(*(flat(x) for x in counts))
    flat_states = torch.as_tensor(states.reshape(-1), dtype=torch.long, device=device)
    flat_h = torch.as_tensor(np.tile(h, b), dtype=torch.long, device=device)
    flat_k = torch.as_tensor(np.tile(k, b), dtype=torch.long, device=device)
    return stats, flat_states, flat_h, flat_k


def play_cache(model: MDPGeneralist, spec: MDPSpec, batch_size: int, device: torch.device) -> MDPGeneralistCache:
    """An empty cache of ``batch_size`` runs of ``spec`` as the agent sets it up at reset.

    Counts pooled over h when the prior is stationary; in a dark room, the room's moves as counts.
    """
    S, A, H = spec.num_states, spec.num_actions, spec.horizon
    moves = dark_room_successors(spec.size) if spec.kind == "dark_room" else None
    known = None if moves is None else tuple(tuple(row) for row in moves.tolist())
    info = EnvInfo(A, H, num_states=S, episodes=spec.episodes, stationary=spec.is_stationary, known_moves=known)
    return model.new_cache(batch_size, info, device)


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


def expert_name(spec: MDPSpec) -> str:
    """The posterior-sampling expert of a prior: DarkRoom PSRL for dark rooms, PSRL otherwise."""
    return DarkRoomPSRL.name if spec.kind == "dark_room" else PSRL.name


def posterior_expert(spec: MDPSpec, posterior_samples: int | None = None) -> PSRL | DarkRoomPSRL:
    """The expert of :func:`expert_name` (PSRL with ``posterior_samples``, its default when None)."""
    if spec.kind == "dark_room":
        return DarkRoomPSRL()
    return PSRL() if posterior_samples is None else PSRL(posterior_samples=posterior_samples)


def rollout_queries(
    spec: MDPSpec,
    batch_size: int,
    queries: int,
    max_epsilon: float,
    posterior_samples: int,
    rng: np.random.Generator,
    model: MDPGeneralist | None = None,
) -> QueryBatch:
    """Roll out ``batch_size`` instances of ``spec`` and label them at ``queries`` shared steps (module docstring).

    The expert (:func:`posterior_expert`) sees every transition; it acts unless ``model``
    is given (then the greedy model acts, through its cache); each run takes a uniform action with
    probability eps ~ U[0, max_epsilon] instead.
    """
    B, S, A, H, T = batch_size, spec.num_states, spec.num_actions, spec.horizon, spec.total_steps
    env = MDPBatch(spec, B, rng)
    expert = posterior_expert(spec, posterior_samples)
    expert.reset(reset_info(spec, env), rng=child_rng(rng))
    labeller = expert
    counts = TransitionCounts(B, H, S, A, pooled=spec.is_stationary)
    if spec.kind == "dark_room":  # the prior knows the moves: the model's input starts from them (as its cache does)
        counts.n_sas += known_move_counts(dark_room_successors(spec.size))
    starts = np.zeros((B, S))
    query_steps = np.sort(rng.choice(T, size=min(queries, T), replace=False))
    Q = len(query_steps)
    hs = counts.n_sa.shape[1]
    out = QueryBatch(
        n_sas=np.zeros((B, Q, hs, S, A, S), np.float32),
        n_sa=np.zeros((B, Q, hs, S, A), np.float32),
        reward_sum=np.zeros((B, Q, hs, S, A), np.float32),
        starts=np.zeros((B, Q, S), np.float32),
        states=np.zeros((B, Q), np.int64),
        h=query_steps % H,
        k=query_steps // H,
        targets=np.zeros((B, Q, A), np.float32),
        spec=spec,
    )
    epsilon = rng.uniform(0.0, max_epsilon, B)
    cache: MDPGeneralistCache | None = None
    if model is not None:
        device = next(model.parameters()).device  # the model plays where its weights are
        cache = play_cache(model, spec, B, device)
    prev: tuple[torch.Tensor, torch.Tensor] | None = None
    rows, q = np.arange(B), 0
    for t in range(T):
        states, h = env.state.copy(), env.h
        if h == 0:
            starts[rows, states] += 1
        if q < Q and query_steps[q] == t:
            out.n_sas[:, q], out.n_sa[:, q], out.reward_sum[:, q] = counts.n_sas, counts.n_sa, counts.reward_sum
            out.starts[:, q], out.states[:, q] = starts, states
            out.targets[:, q] = labeller.optimal_action_probs(states, h)
            q += 1
        if model is None or cache is None:
            actions = expert.act_batch(states, h)
        else:
            prev_a, prev_r = prev if prev is not None else (None, None)
            logits = model.step(cache, torch.as_tensor(states, device=device), prev_a, prev_r).logits
            actions = logits.argmax(dim=1).cpu().numpy()
        actions = np.where(rng.random(B) < epsilon, rng.integers(0, A, B), actions)
        step = env.step(actions)
        expert.update_batch(states, h, actions, step["reward"], step["next_state"])
        counts.update(states, h, actions, step["reward"], step["next_state"])
        if model is not None:
            reward = torch.as_tensor(step["reward"], dtype=torch.float32, device=device)
            prev = (torch.as_tensor(actions, device=device), reward)
    return out


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

    def build(device: torch.device, ctx: DistContext) -> GeneralistTrainer:
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

        return GeneralistTrainer(
            model=model,
            sample=lambda rng, policy: sample_batch(cfg, rng, policy),
            loss=batch_loss,
            evaluate=evaluate,
        )

    return cast(MDPGeneralist, train_generalist(cfg, echo, build))


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.training.mdp_generalist CONFIG.json [key=value ...]`` (overrides as JSON values)."""
    run_main(argv, __doc__, MDPGeneralistTrainConfig, train)


if __name__ == "__main__":
    main()
