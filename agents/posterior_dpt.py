"""The Bayes-optimal DPT policy: act on the posterior of the optimal action (Section dpt-main).

DPT pretraining minimises E[-log Alg_theta(a* | D_{t-1}, s_t)], whose minimiser over all
algorithms is the posterior P(a* = a | D_{t-1}, s_t) under the training prior (Lin, Bai & Mei,
Theorem dpt).  A perfectly pretrained DPT transformer therefore *is* this policy; the agent here
computes it from a Bayesian model instead (PSRL's Dirichlet-Beta posterior by Monte-Carlo,
DarkRoom's goal posterior exactly, see :meth:`agents.psrl.PSRL.optimal_action_probs`):

- sampled (``greedy=False``): a_t ~ P(a* = . | D_{t-1}, s_t), posterior sampling re-drawn at every
  step (PSRL draws once per episode);
- greedy: a_t = argmax_a P(a* = a | D_{t-1}, s_t), ties broken at random.

It is the reference a DPT transformer should be measured against besides PSRL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.mdp_base import uniform_over_maximisers
from icrl_gym.algorithm import MDPAgent, child_rng
from icrl_gym.registry import make_agent


class PosteriorOptimalAction(MDPAgent):
    """Acts on P(a* = a | D) of a Bayesian ``posterior`` agent (a ``make_agent`` specification)."""

    name = "posterior_optimal_action"

    def __init__(self, posterior: Mapping[str, Any] | None = None, greedy: bool = False, seed: int | None = None):
        super().__init__(seed)
        self.posterior_spec = dict(posterior or {"name": "psrl"})
        self.posterior = make_agent(self.posterior_spec)
        if not hasattr(self.posterior, "optimal_action_probs"):
            raise ValueError(f"{self.posterior_spec['name']!r} has no posterior of the optimal action")
        self.greedy = bool(greedy)

    def reset(self, info: Mapping[str, Any], rng: np.random.Generator | None = None) -> None:
        """Reset the runs and the posterior model (on a child generator of this agent's)."""
        super().reset(info, rng)
        self.posterior.reset(info, rng=child_rng(self.rng))

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        probs = self.posterior.optimal_action_probs(states, h)
        return uniform_over_maximisers(probs) if self.greedy else probs

    def _update(self, states, h, actions, rewards, next_states) -> None:
        self.posterior.update_batch(states, h, actions, rewards, next_states)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (with the posterior model's)."""
        return {"name": self.name, "posterior": self.posterior.config(), "greedy": self.greedy}
