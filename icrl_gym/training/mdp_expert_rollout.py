"""The MDP generalist's training data: the expert's rollouts and the batch of query steps they give.

:func:`rollout_queries` plays B runs of one prior under the behaviour and labels Q query steps with
the expert's (:func:`posterior_expert`) posterior of the optimal action; :class:`QueryBatch` holds
the counts and labels (:mod:`icrl_gym.training.mdp_generalist` trains on it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agents.mdp.psrl import PSRL, DarkRoomPSRL
from icrl_gym.algorithm import child_rng
from icrl_gym.data.rollout import ModelPlay, epsilon_greedy, play
from icrl_gym.envs.dark_room import dark_room_successors
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.mdp_env import reset_info
from icrl_gym.estimators.statistics import TransitionCounts
from icrl_gym.models.mdp_generalist import (
    CountStats,
    MDPGeneralist,
    known_move_counts,
)
from icrl_gym.models.policy import EnvInfo


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


def play_info(spec: MDPSpec) -> EnvInfo:
    """What the MDP generalist is told of runs of ``spec``, as its agent tells it at reset.

    Counts pooled over h when the prior is stationary; in a dark room, the room's moves as counts.
    """
    S, A, H = spec.num_states, spec.num_actions, spec.horizon
    moves = dark_room_successors(spec.size) if spec.kind == "dark_room" else None
    known = None if moves is None else tuple(tuple(row) for row in moves.tolist())
    return EnvInfo(A, H, num_states=S, episodes=spec.episodes, stationary=spec.is_stationary, known_moves=known)


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
    player = None
    if model is not None:
        player = ModelPlay(model, B, play_info(spec))
    rows, q = np.arange(B), 0

    def choose(t: int) -> np.ndarray:
        nonlocal q
        states, h = env.state.copy(), env.h
        if h == 0:
            starts[rows, states] += 1
        if q < Q and query_steps[q] == t:
            out.n_sas[:, q], out.n_sa[:, q], out.reward_sum[:, q] = counts.n_sas, counts.n_sa, counts.reward_sum
            out.starts[:, q], out.states[:, q] = starts, states
            out.targets[:, q] = labeller.optimal_action_probs(states, h)
            q += 1
        actions = expert.act_batch(states, h) if player is None else player.greedy(states)
        return epsilon_greedy(actions, epsilon, A, rng)

    def on_step(t: int, actions: np.ndarray, step: dict[str, Any]) -> None:
        transition = (step["state"], step["h"], actions, step["reward"], step["next_state"])
        expert.update_batch(*transition)
        counts.update(*transition)
        if player is not None:
            player.tell(actions, step["reward"])

    play(env, T, choose, on_step)
    return out
