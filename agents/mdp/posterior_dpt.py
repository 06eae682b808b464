"""The Bayes-optimal DPT policy: act on the posterior of the optimal action (Section 3.2).

DPT pretraining minimises E[-log Alg_theta(a* | D_{t-1}, s_t)], whose minimiser over all
algorithms is the posterior P(a* = a | D_{t-1}, s_t) under the training prior (Lin, Bai & Mei,
Section 3.2, which cites Lee et al. 2023, Theorem 1).  A perfectly pretrained DPT transformer
therefore *is* this policy; the agent here computes it from a Bayesian model instead (PSRL's
Dirichlet-Beta posterior by Monte-Carlo, DarkRoom's goal posterior exactly, see
:meth:`agents.mdp.psrl.PSRL.optimal_action_probs`):

- sampled (``greedy=False``): a_t ~ P(a* = . | D_{t-1}, s_t), posterior sampling re-drawn at every
  step (PSRL draws once per episode);
- greedy: a_t = argmax_a P(a* = a | D_{t-1}, s_t), ties broken at random.

It is the reference a DPT transformer should be measured against besides PSRL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeGuard

import numpy as np

from icrl_gym.algorithm import MDPAgent, child_rng, uniform_over_maximisers
from icrl_gym.registry import make_agent


class OptimalActionPosterior(Protocol):
    """What the policy needs from its ``posterior`` model: an MDP algorithm with P(a* = a | D)."""

    def reset(self, info: Mapping[str, Any], rng: np.random.Generator | None = None) -> None:
        """Start new runs described by the environment's reset ``info``."""

    def update_batch(
        self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray
    ) -> None:
        """Add step h of every run."""

    def optimal_action_probs(self, states: np.ndarray, h: int) -> np.ndarray:
        """P(a* = a | D) at (states, h), shape (B, A)."""
        ...

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        ...


def has_optimal_action_posterior(agent: object) -> TypeGuard[OptimalActionPosterior]:
    """Whether ``agent`` computes the posterior of the optimal action (``optimal_action_probs``)."""
    return hasattr(agent, "optimal_action_probs")


class PosteriorOptimalAction(MDPAgent):
    """Acts on P(a* = a | D) of a Bayesian ``posterior`` agent (a ``make_agent`` specification)."""

    name = "posterior_optimal_action"

    def __init__(self, posterior: Mapping[str, Any] | None = None, greedy: bool = False, seed: int | None = None):
        super().__init__(seed)
        self.posterior_spec = dict(posterior or {"name": "psrl"})
        model = make_agent(self.posterior_spec)
        if not has_optimal_action_posterior(model):
            raise ValueError(f"{self.posterior_spec['name']!r} has no posterior of the optimal action")
        self.posterior = model
        self.greedy = bool(greedy)

    def _start(self, info: dict[str, Any]) -> None:
        """Reset the runs and the posterior model (on a child generator of this agent's)."""
        super()._start(info)
        self.posterior.reset(info, rng=child_rng(self.rng))

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        probs = self.posterior.optimal_action_probs(states, h)
        return uniform_over_maximisers(probs) if self.greedy else probs

    def _update(self, states, h, actions, rewards, next_states) -> None:
        self.posterior.update_batch(states, h, actions, rewards, next_states)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (with the posterior model's)."""
        return {"name": self.name, "posterior": self.posterior.config(), "greedy": self.greedy}
