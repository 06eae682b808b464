"""Trajectory-level mixture of algorithms, e.g. Alg_0 = alpha * TS + (1 - alpha) * Uniform.

Appendix B.3 ("The effect of distribution ratio"): at ``reset`` every run is assigned to
component i with probability weights[i] and follows it for the whole run.  Every component
observes every run's history (it is cheap and keeps the code batched), but a run's actions come
only from its own component.  ``policy`` returns the assigned component's probabilities, i.e.
the conditional policy given the latent assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from icrl_gym.algorithm import BanditAgent, MDPAgent, child_rng


class _TrajectoryMixture:
    """Shared logic: checked weights, a component per run drawn at reset, per-run selection."""

    name = "mixture"
    batch_size: int
    rng: np.random.Generator
    binary_rewards: bool
    reward_bounds: tuple[float, float] | None

    def _init_mixture(self, components: Sequence[Any], weights: Sequence[float]) -> None:
        probs = np.asarray(weights, dtype=np.float64)
        if len(components) == 0 or probs.shape != (len(components),):
            raise ValueError(f"need one weight per component, got {len(components)} and {probs.shape}")
        if np.any(probs < 0) or not np.isclose(probs.sum(), 1.0):
            raise ValueError(f"mixture weights must be >= 0 and sum to 1, got {probs.tolist()}")
        self.components = list(components)
        self.weights = probs
        # the rewards every component admits, checked once before any component sees them
        self.binary_rewards = any(c.binary_rewards for c in components)
        bounds = [c.reward_bounds for c in components if c.reward_bounds is not None]
        self.reward_bounds = (max(b[0] for b in bounds), min(b[1] for b in bounds)) if bounds else None
        self.assignment: np.ndarray | None = None

    def _child_rng(self) -> np.random.Generator:
        return child_rng(self.rng)

    def _assign(self) -> None:
        self.assignment = self.rng.choice(len(self.components), size=self.batch_size, p=self.weights)

    def _select(self, per_component: list[np.ndarray]) -> np.ndarray:
        stacked = np.stack(per_component)  # (C, B, ...)
        return stacked[self.assignment, np.arange(self.batch_size)]

    def trajectory_components(self) -> list[tuple[float, Any]]:
        """(weight, component) pairs: the law of a run is sum_c w_c (law of a run of component c)."""
        return list(zip(self.weights.tolist(), self.components, strict=True))

    def _mixture_config(self, base: dict[str, Any]) -> dict[str, Any]:
        return {**base, "components": [c.config() for c in self.components], "weights": self.weights.tolist()}


class Mixture(_TrajectoryMixture, BanditAgent):
    """Each bandit run follows one component drawn at reset with the given weights."""

    def __init__(self, components: Sequence[BanditAgent], weights: Sequence[float], seed: int | None = None):
        BanditAgent.__init__(self, seed)
        self._init_mixture(components, weights)

    @staticmethod
    def of(
        components: Sequence[BanditAgent] | Sequence[MDPAgent], weights: Sequence[float], seed: int | None = None
    ) -> Mixture | MDPMixture:
        """The mixture of ``components``: an :class:`MDPMixture` when all are MDP algorithms, else a bandit one."""
        mdp = [c for c in components if isinstance(c, MDPAgent)]
        if len(mdp) == len(components):
            return MDPMixture(mdp, weights, seed=seed)
        bandit = [c for c in components if isinstance(c, BanditAgent)]
        if len(bandit) != len(components):
            raise TypeError(f"mixture components must be all bandit or all MDP algorithms, got {list(components)}")
        return Mixture(bandit, weights, seed=seed)

    def _reset(self, w_star: np.ndarray | None) -> None:
        for comp in self.components:
            comp.reset(
                {"model": self.reset_info.get("model")},  # every component assumes the same environment
                batch_size=self.batch_size,
                dim=self.dim,
                num_actions=self.num_actions,
                w_star=w_star,
                rng=self._child_rng(),
            )
        self._assign()

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._select([comp.act_batch(action_sets) for comp in self.components])

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return self._select([comp.policy_batch(action_sets) for comp in self.components])

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        for comp in self.components:
            comp.update_batch(action_sets, actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters of the mixture and of every component."""
        return self._mixture_config(BanditAgent.config(self))


class MDPMixture(_TrajectoryMixture, MDPAgent):
    """Each tabular-MDP run follows one component for all K episodes (e.g. 1/2 PSRL + 1/2 uniform)."""

    def __init__(self, components: Sequence[MDPAgent], weights: Sequence[float], seed: int | None = None):
        MDPAgent.__init__(self, seed)
        self._init_mixture(components, weights)

    def _start(self, info: dict[str, Any]) -> None:
        """Reset every component on the same runs, then draw each run's component."""
        super()._start(info)
        for comp in self.components:
            comp.reset(info, rng=self._child_rng())
        self._assign()

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        return self._select([comp.act_batch(states, h) for comp in self.components])

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        return self._select([comp.policy_batch(states, h) for comp in self.components])

    def _update(self, states, h, actions, rewards, next_states) -> None:
        for comp in self.components:
            comp.update_batch(states, h, actions, rewards, next_states)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters of the mixture and of every component."""
        return self._mixture_config(MDPAgent.config(self))
