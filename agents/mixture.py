"""Trajectory-level mixture of algorithms, e.g. Alg_0 = alpha * TS + (1 - alpha) * Uniform.

Appendix exp_details ("The effect of distribution ratio"): at ``reset`` every run is assigned to
component i with probability weights[i] and follows it for the whole run.  Every component
observes every run's history (it is cheap and keeps the code batched), but a run's actions come
only from its own component.  ``policy`` returns the assigned component's probabilities, i.e.
the conditional policy given the latent assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agents.base import BanditAgent


class Mixture(BanditAgent):
    """Each run follows one component drawn at reset with the given weights."""

    name = "mixture"

    def __init__(self, components: Sequence[BanditAgent], weights: Sequence[float], seed: int | None = None):
        super().__init__(seed)
        weights = np.asarray(weights, dtype=np.float64)
        if len(components) == 0 or weights.shape != (len(components),):
            raise ValueError(f"need one weight per component, got {len(components)} and {weights.shape}")
        if np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
            raise ValueError(f"mixture weights must be >= 0 and sum to 1, got {weights.tolist()}")
        self.components = list(components)
        self.weights = weights
        self.assignment: np.ndarray | None = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        for comp in self.components:
            # Child generators drawn from ours keep the whole mixture reproducible under one seed.
            child = np.random.default_rng(self.rng.integers(2**63))
            comp.reset(batch_size=self.batch_size, dim=self.dim, num_actions=self.num_actions, w_star=w_star, rng=child)
        self.assignment = self.rng.choice(len(self.components), size=self.batch_size, p=self.weights)

    def _select(self, per_component: list[np.ndarray]) -> np.ndarray:
        stacked = np.stack(per_component)  # (C, B, ...)
        return stacked[self.assignment, np.arange(self.batch_size)]

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._select([comp.act_batch(action_sets) for comp in self.components])

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return self._select([comp.policy_batch(action_sets) for comp in self.components])

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        for comp in self.components:
            comp.update_batch(action_sets, actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters of the mixture and of every component."""
        return {
            **super().config(),
            "components": [c.config() for c in self.components],
            "weights": self.weights.tolist(),
        }
