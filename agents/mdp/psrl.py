"""Posterior sampling for reinforcement learning (PSRL; Osband, Russo & Van Roy, 2013): the Bayesian reference.

With the prior of ICRL-TabularMDP-v0 -- P_h(. | s, a) ~ Dirichlet(c 1_S), R_h(s, a) ~ Beta(1, 1), Bernoulli
rewards -- the posterior is conjugate: Dirichlet(c + N_h(s, a, .)) and Beta(1 + successes, 1 + failures).
At the start of every episode PSRL samples an MDP from the posterior, solves it by backward
induction and follows its greedy policy for the episode.  This is exactly what DPT's reduced expert
(posterior sampling) does, so it is the reference for DPT-pretrained MDP transformers.
``stationary=True`` pools the counts over h (the default ``None`` follows the environment's ``info``);
the concentration c is likewise the environment's (``info["model"]["concentration"]``, the prior it
draws P from) unless given, and 1 when the agent is reset without a model.

Both classes also give the posterior of the optimal action, P(a* = a | D_{t-1}) at the current
(s_t, h_t), with a* the first maximiser of Q*_h(s_t, .) (the convention of the hard DPT label): the
Rao-Blackwellised DPT target.  Since E[1{a* = a} | D] = P(a* = a | D), cross-entropy against it has
the same minimiser as against the hard label a* of the true instance, with less variance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.mdp.greedy_q import GreedyQAgent
from icrl_gym.envs.mdp_core import MDPKind
from icrl_gym.envs.mdp_instances import InstanceTable, backward_induction
from icrl_gym.envs.validation import MAX_SCALE, check_integer, check_memory, check_number


class PSRL(GreedyQAgent):
    """Dirichlet-Beta posterior sampling, re-sampled at every episode."""

    name = "psrl"
    keeps_counts = True

    def __init__(
        self,
        concentration: float | None = None,
        stationary: bool | None = None,
        posterior_samples: int = 32,
        seed: int | None = None,
    ) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.posterior_samples = check_integer("posterior_samples", posterior_samples)
        if concentration is not None:
            concentration = check_number("concentration", concentration, low=0.0, strict=True, max_abs=MAX_SCALE)
        self.concentration, self.stationary = concentration, stationary
        self.used_concentration: float | None = None

    def _reset(self, instance: Any) -> None:
        spec = None if self.env_model is None else self.env_model.mdp
        env_c = 1.0 if spec is None else float(spec.concentration)
        self.used_concentration = env_c if self.concentration is None else float(self.concentration)
        self.counts = self._new_counts(self.stationary)
        self._draws: tuple[np.ndarray, np.ndarray] | None = None  # M posterior MDPs kept for the labels

    def _draw(self, n_sas: np.ndarray, n_sa: np.ndarray, reward_sum: np.ndarray, samples: tuple[int, ...] = ()):
        """Posterior draws given counts: P rows ~ Dirichlet(c + N(s, a, .)), R ~ Beta(1 + successes, 1 + failures).

        ``n_sas`` (..., S), ``n_sa`` and ``reward_sum`` (...); ``samples`` prepends draw axes (e.g. (M,)).
        """
        gamma = self.rng.gamma(self.used_concentration + np.broadcast_to(n_sas, (*samples, *n_sas.shape)))
        succ = np.broadcast_to(reward_sum, (*samples, *reward_sum.shape))
        R = self.rng.beta(1.0 + succ, 1.0 + np.broadcast_to(n_sa, succ.shape) - succ)
        return gamma / gamma.sum(axis=-1, keepdims=True), R

    def sample_mdp(self) -> tuple[np.ndarray, np.ndarray]:
        """One posterior draw per run: P (B, H_P, S, A, S) and mean rewards R (B, H_P, S, A)."""
        c = self.counts
        return self._draw(c.n_sas, c.n_sa, c.reward_sum)

    def _begin_episode(self) -> None:
        P, R = self.sample_mdp()
        self.q, _ = backward_induction(P, R, self.horizon)

    def _update(self, states, h, actions, rewards, next_states) -> None:
        self.counts.update(states, h, actions, rewards, next_states)
        if self._draws is not None:  # only the row (h, s, a) of every run has a new posterior: redraw it
            P, R = self._draws
            c, rows, i = self.counts, np.arange(self.batch_size), self.counts.index(h)
            index = (rows, i, states, actions)
            draws = self._draw(c.n_sas[index], c.n_sa[index], c.reward_sum[index], (self.posterior_samples,))
            full = (slice(None), *index)
            P[full], R[full] = draws

    def optimal_action_probs(self, states: np.ndarray, h: int) -> np.ndarray:
        """P(a* = a | D) at (states, h), (B, A), by Monte-Carlo over ``posterior_samples`` posterior MDPs.

        The M draws are kept between calls and only the posterior rows that changed are redrawn
        (the posterior factorises over (h, s, a), so every call still sees M exact posterior draws).
        Each draw is solved by backward induction from H down to h and votes for its first maximiser
        of Q_h(s, .).
        """
        M, B, A = self.posterior_samples, self.batch_size, self.num_actions
        c = self.counts
        if self._draws is None:
            H, S = self.horizon, self.num_states
            need = 8 * M * B * (c.n_sa.shape[1] * S * A * (2 * S + 1) + H * S * A + (H + 1) * S)
            check_memory(need, f"{self.name}'s {M} posterior draws of {B:,} runs", self.max_memory_gib)
            self._draws = self._draw(c.n_sas, c.n_sa, c.reward_sum, (M,))
        P, R = self._draws  # (M, B, H', S, A, S), (M, B, H', S, A): solved as M B instances from step h on
        q, _ = backward_induction(P.reshape(M * B, *P.shape[2:]), R.reshape(M * B, *R.shape[2:]), self.horizon, h)
        q = q.reshape(M, B, *q.shape[1:])[:, np.arange(B), h, states]  # (M, B, A)
        votes = np.eye(A)[q.argmax(-1)]  # (M, B, A)
        return votes.mean(axis=0)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {
            "name": self.name,
            "concentration": self.concentration,
            "stationary": self.stationary,
            "posterior_samples": self.posterior_samples,
            **({} if self.used_concentration is None else {"model_used": {"concentration": self.used_concentration}}),
        }


class PosteriorMeanPlanner(PSRL):
    """Certainty equivalence on PSRL's posterior: every episode plans on the posterior-mean MDP.

    E[P(. | s, a) | D] = (c + N(s, a, .)) / (S c + N(s, a)) under the Dirichlet(c) prior, and
    E[R(s, a) | D] = (1 + successes) / (2 + N(s, a)) under Beta(1, 1); backward induction on that one
    MDP, ties broken at random.  With per-step (non-stationary) dynamics the factors of a trajectory's
    probability are independent under the posterior, so this plan maximises the posterior-expected
    return of the episode among plans fixed at its start; it explores only where the prior mean
    (E[R] = 1/2 for an unvisited pair) makes an action look good.  A reference for short runs, where
    there is little to gain from exploring.
    """

    name = "posterior_mean_planner"

    def sample_mdp(self) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean per run: P (B, H_P, S, A, S) and mean rewards R (B, H_P, S, A)."""
        if self.used_concentration is None:
            raise RuntimeError(f"{self.name}: call reset() before planning")
        c = self.counts
        alpha = self.used_concentration + c.n_sas
        return alpha / alpha.sum(axis=-1, keepdims=True), (1.0 + c.reward_sum) / (2.0 + c.n_sa)


class DarkRoomPSRL(GreedyQAgent):
    """Posterior sampling under the DarkRoom prior: known deterministic moves, goal uniform over the cells.

    The posterior over the goal is uniform over the cells not yet ruled out (a cell left with reward
    0 is not the goal; a reward of 1 reveals it).  At each episode a goal is drawn from it and the
    agent follows the shortest-path policy to that goal (backward induction on the known moves).
    The moves are read from the environment's reset info, since the prior puts all its mass on them.
    """

    name = "dark_room_psrl"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(temperature=0.0, seed=seed)

    def _reset(self, instance: Any) -> None:
        spec = None if self.env_model is None else self.env_model.mdp
        if spec is not None and spec.kind is not MDPKind.DARK_ROOM:
            raise ValueError(
                f"{self.name} assumes the DarkRoom prior (known deterministic moves, a uniform goal) and needs a "
                f"DarkRoom environment (kind='dark_room'), got kind={spec.kind!r}; use 'psrl' for other MDPs"
            )
        if instance is None:
            raise ValueError("DarkRoom PSRL needs the (known) moves P from the environment's reset info")
        P = instance[0]
        moves = P[0, 0]  # (S, A, S): the moves of the first run, which every run must share
        self.next_state = moves.argmax(axis=-1)  # (S, A) deterministic successor
        if P.shape[1] != 1 or not np.all(np.take_along_axis(moves, self.next_state[..., None], axis=-1) == 1.0):
            raise ValueError(f"{self.name} needs deterministic, stationary moves: P has rows that are not one-hot")
        if P.strides[0] != 0:  # not one table broadcast over the runs (the environments'): compare, a chunk at a time
            for start in range(1, self.batch_size, 64):
                if not (P[start : start + 64, 0] == moves).all():
                    raise ValueError("DarkRoom runs of one batch must share the moves")
        self.candidates = np.ones((self.batch_size, self.num_states), dtype=bool)
        self._q_by_goal: np.ndarray | None = None

    def _memory_bytes(self) -> int:
        """Q* of every goal (S, H, S, A), the moves of every goal and the candidates (no table per run)."""
        B, S, A, H = self.batch_size, self.num_states, self.num_actions, self.horizon
        return 8 * (B * (S + H + 4 * A) + S * (H * S * A + (H + 1) * S + S * A * S + S * A)) + B * S

    def _goal_values(self) -> np.ndarray:
        """Q*_h(s, a) of every possible goal g, (G, H, S, A), by backward induction on the known moves (per reset).

        With goal g the reward is 1{s = g} for every action, so Q_h(s, a) = 1{s = g} + V_{h+1}(next(s, a)).
        """
        if self._q_by_goal is None:
            G, S, A = self.num_states, self.num_states, self.num_actions
            P = np.zeros((G, 1, S, A, S))
            P[:, 0, np.arange(S)[:, None], np.arange(A), self.next_state] = 1.0
            R = np.zeros((G, 1, S, A))
            R[np.arange(G), 0, np.arange(G)] = 1.0
            self._q_by_goal, _ = backward_induction(P, R, self.horizon)
        return self._q_by_goal

    def optimal_action_probs(self, states: np.ndarray, h: int) -> np.ndarray:
        """P(a* = a | D) at (states, h), (B, A), exactly: sum over the candidate goals g of 1{a = a*_g(h, s)} / |C|.

        a*_g(h, s) is the first maximiser of Q*_h(s, .) when the goal is g (:meth:`_goal_values`).
        """
        weights = self.candidates / self.candidates.sum(axis=1, keepdims=True)  # (B, G)
        best = self._goal_values()[:, h, states].argmax(axis=-1).T  # (B, G)
        return np.einsum("bg,bga->ba", weights, np.eye(self.num_actions)[best])

    def _begin_episode(self) -> None:
        weights = self.candidates / self.candidates.sum(axis=1, keepdims=True)
        cdf = np.cumsum(weights, axis=1)
        goal = np.minimum((cdf <= self.rng.random((self.batch_size, 1))).sum(axis=1), self.num_states - 1)
        self.q = InstanceTable(self._goal_values(), goal)  # plan for the sampled goal: row b is Q* of goal[b]

    def _update(self, states, h, actions, rewards, next_states) -> None:
        rows = np.arange(self.batch_size)
        found = rewards > 0
        self.candidates[rows[~found], states[~found]] = False
        self.candidates[found] = False
        self.candidates[rows[found], states[found]] = True

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (none)."""
        return {"name": self.name}
