"""Posterior sampling for reinforcement learning (PSRL; Osband, Russo & Van Roy, 2013): the Bayesian reference.

With the prior of ICRL-TabularMDP-v0 -- P_h(. | s, a) ~ Dirichlet(c 1_S), R_h(s, a) ~ Beta(1, 1), Bernoulli
rewards -- the posterior is conjugate: Dirichlet(c + N_h(s, a, .)) and Beta(1 + successes, 1 + failures).
At the start of every episode PSRL samples an MDP from the posterior, solves it by backward
induction and follows its greedy policy for the episode.  This is exactly what DPT's reduced expert
(posterior sampling) does, so it is the reference for DPT-pretrained MDP transformers.
``stationary=True`` pools the counts over h.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.mdp_base import GreedyQAgent
from icrl_gym.envs.mdp_core import backward_induction


class PSRL(GreedyQAgent):
    """Dirichlet-Beta posterior sampling, re-sampled at every episode."""

    name = "psrl"

    def __init__(self, concentration: float = 1.0, stationary: bool = False, seed: int | None = None) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.concentration, self.stationary = float(concentration), bool(stationary)

    def _reset(self, instance: Any) -> None:
        hs = 1 if self.stationary else self.horizon
        B, S, A = self.batch_size, self.num_states, self.num_actions
        self.n_sas = np.zeros((B, hs, S, A, S))
        self.successes = np.zeros((B, hs, S, A))
        self.failures = np.zeros((B, hs, S, A))
        self.q = np.zeros((B, self.horizon, S, A))

    def sample_mdp(self) -> tuple[np.ndarray, np.ndarray]:
        """One posterior draw per run: P (B, H_P, S, A, S) and mean rewards R (B, H_P, S, A)."""
        gamma = self.rng.gamma(self.concentration + self.n_sas)
        P = gamma / gamma.sum(axis=-1, keepdims=True)
        R = self.rng.beta(1.0 + self.successes, 1.0 + self.failures)
        return P, R

    def _begin_episode(self) -> None:
        P, R = self.sample_mdp()
        self.q, _ = backward_induction(P, R, self.horizon)

    def _update(self, states, h, actions, rewards, next_states) -> None:
        rows = np.arange(self.batch_size)
        i = 0 if self.stationary else h
        self.successes[rows, i, states, actions] += rewards
        self.failures[rows, i, states, actions] += 1.0 - rewards
        has_next = next_states >= 0
        self.n_sas[rows[has_next], i, states[has_next], actions[has_next], next_states[has_next]] += 1

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {"name": self.name, "concentration": self.concentration, "stationary": self.stationary}
