"""Greedy (or soft) play on a Q table, shared by the tabular-MDP algorithms that plan, and the optimal policy.

The interface every MDP algorithm implements is :class:`icrl_gym.algorithm.MDPAgent`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from icrl_gym.algorithm import MDPAgent, uniform_over_maximisers
from icrl_gym.envs.mdp_instances import InstanceTable, backward_induction
from icrl_gym.envs.validation import check_number
from icrl_gym.estimators.statistics import TransitionCounts


class GreedyQAgent(MDPAgent):
    """Greedy on a Q table (B, H, S, A), ties broken at random (``temperature == 0``), or softmax(Q / temperature)."""

    q: np.ndarray | InstanceTable
    """The Q table (B, H, S, A), set by the subclass at reset or at each episode's start."""
    keeps_counts = False
    """True for the algorithms that keep transition counts (:meth:`_new_counts`), sized by the memory check."""

    def __init__(self, temperature: float = 0.0, seed: int | None = None) -> None:
        super().__init__(seed)
        self.temperature = check_number("temperature", temperature, low=0.0)

    def _memory_bytes(self) -> int:
        """The Q table (B, H, S, A) and, for the counting algorithms, the counts and the estimates built from them."""
        B, S, A, H = self.batch_size, self.num_states, self.num_actions, self.horizon
        total = super()._memory_bytes() + 8 * B * (H * S * A + (H + 1) * S)
        if self.keeps_counts:
            hs = 1 if self._pooled(getattr(self, "stationary", None)) else H
            total += 3 * 8 * B * hs * S * A * (S + 2)
        return total

    def _pooled(self, stationary: bool | None) -> bool:
        return self.env_stationary if stationary is None else bool(stationary)

    def _q_rows(self, states: np.ndarray, h: int) -> np.ndarray:
        return self.q[np.arange(self.batch_size), h, states]  # (B, A)

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        q = self._q_rows(states, h)
        if self.temperature == 0:
            return uniform_over_maximisers(q)
        z = np.exp((q - q.max(axis=1, keepdims=True)) / self.temperature)
        return z / z.sum(axis=1, keepdims=True)

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        if self.temperature == 0:  # argmax, ties broken uniformly at random
            best = uniform_over_maximisers(self._q_rows(states, h))
            return (best * self.rng.random(best.shape)).argmax(axis=1)
        return super()._act(states, h)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {"name": self.name, "temperature": self.temperature}

    def _new_counts(self, stationary: bool | None) -> TransitionCounts:
        """Empty counts for the runs, pooled over h if ``stationary`` (``None``: as the environment's info says)."""
        return TransitionCounts(
            self.batch_size, self.horizon, self.num_states, self.num_actions, self._pooled(stationary)
        )


class MDPOptimal(GreedyQAgent):
    """The optimal policy of the true instance: argmax_a Q*_h(s, a) by backward induction (the DPT label)."""

    name = "mdp_optimal"

    def _reset(self, instance: tuple[np.ndarray, np.ndarray] | None) -> None:
        if instance is None:
            raise ValueError("the optimal policy needs the instance (P, R) from the environment's reset info")
        self.q, _ = backward_induction(instance[0], instance[1], self.horizon)
