"""Posterior sampling for reinforcement learning (PSRL; Osband, Russo & Van Roy, 2013): the Bayesian reference.

With the prior of ICRL-TabularMDP-v0 -- P_h(. | s, a) ~ Dirichlet(c 1_S), R_h(s, a) ~ Beta(1, 1), Bernoulli
rewards -- the posterior is conjugate: Dirichlet(c + N_h(s, a, .)) and Beta(1 + successes, 1 + failures).
At the start of every episode PSRL samples an MDP from the posterior, solves it by backward
induction and follows its greedy policy for the episode.  This is exactly what DPT's reduced expert
(posterior sampling) does, so it is the reference for DPT-pretrained MDP transformers.
``stationary=True`` pools the counts over h (the default ``None`` follows the environment's ``info``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.mdp_base import GreedyQAgent
from icrl_gym.envs.mdp_core import backward_induction


class PSRL(GreedyQAgent):
    """Dirichlet-Beta posterior sampling, re-sampled at every episode."""

    name = "psrl"

    def __init__(self, concentration: float = 1.0, stationary: bool | None = None, seed: int | None = None) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.concentration, self.stationary = float(concentration), stationary

    def _reset(self, instance: Any) -> None:
        self.counts = self._new_counts(self.stationary)
        self.q = np.zeros((self.batch_size, self.horizon, self.num_states, self.num_actions))

    def sample_mdp(self) -> tuple[np.ndarray, np.ndarray]:
        """One posterior draw per run: P (B, H_P, S, A, S) and mean rewards R (B, H_P, S, A)."""
        c = self.counts
        gamma = self.rng.gamma(self.concentration + c.n_sas)
        P = gamma / gamma.sum(axis=-1, keepdims=True)
        R = self.rng.beta(1.0 + c.reward_sum, 1.0 + c.n_sa - c.reward_sum)  # successes, failures
        return P, R

    def _begin_episode(self) -> None:
        P, R = self.sample_mdp()
        self.q, _ = backward_induction(P, R, self.horizon)

    def _update(self, states, h, actions, rewards, next_states) -> None:
        self.counts.update(states, h, actions, rewards, next_states)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {"name": self.name, "concentration": self.concentration, "stationary": self.stationary}


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
        if instance is None:
            raise ValueError("DarkRoom PSRL needs the (known) moves P from the environment's reset info")
        P = instance[0]
        self.next_state = P[:, 0].argmax(axis=-1)  # (B, S, A) deterministic successor
        self.candidates = np.ones((self.batch_size, self.num_states), dtype=bool)
        self.q = np.zeros((self.batch_size, self.horizon, self.num_states, self.num_actions))

    def _begin_episode(self) -> None:
        weights = self.candidates / self.candidates.sum(axis=1, keepdims=True)
        cdf = np.cumsum(weights, axis=1)
        goal = np.minimum((cdf <= self.rng.random((self.batch_size, 1))).sum(axis=1), self.num_states - 1)
        reward = np.zeros((self.batch_size, self.num_states))
        reward[np.arange(self.batch_size), goal] = 1.0
        v = np.zeros((self.batch_size, self.num_states))
        for h in range(self.horizon - 1, -1, -1):  # Q_h(s, a) = 1{s = goal} + V_{h+1}(next(s, a))
            self.q[:, h] = reward[:, :, None] + np.take_along_axis(
                v, self.next_state.reshape(self.batch_size, -1), 1
            ).reshape(self.next_state.shape)
            v = self.q[:, h].max(axis=-1)

    def _update(self, states, h, actions, rewards, next_states) -> None:
        rows = np.arange(self.batch_size)
        found = rewards > 0
        self.candidates[rows[~found], states[~found]] = False
        self.candidates[found] = False
        self.candidates[rows[found], states[found]] = True

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (none)."""
        return {"name": self.name}
