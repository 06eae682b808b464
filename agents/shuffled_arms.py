"""Any bandit algorithm played with the arms in a random order per run: a check of how much the order decides.

Index policies break their ties to the first arm, and so do the learned policies' greedy actions
(:func:`~icrl_gym.agent_base.first_argmax`).  On a prior of exchangeable arms that choice changes nothing in law,
but on a bandit whose arms come in an order (the generalization grid's skewed sets put their high arms first, the
reversed sets last) it decides which arms a policy tries first, and a comparison of two policies then measures
whether their first pulls follow that order alike.  ``ShuffledArms(inner)`` shows the inner algorithm every run's
arms in an order sigma_b drawn at reset, uniformly among the K! orders:

- the inner algorithm's arm j is the bandit's arm sigma_b(j): a linear bandit's action set reaches it with its rows
  permuted, a K-armed bandit's as the arms e_1..e_K (one-hot arms are labels, so relabelling them is the
  permutation), and the arm means w* of a K-armed bandit are permuted with them;
- its action j is played as sigma_b(j), and the bandit's arm a is fed back as sigma_b^{-1}(a);
- its action probabilities p_j are those of the arms sigma_b(j).

The orders are the first draw from the agent's generator at each reset, so two wrapped algorithms reset with the
same generator (the common random numbers of :mod:`icrl_gym.data.crn`) face the same orders, and a ratio of their
regrets stays paired.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from icrl_gym.algorithm import BanditAgent
from icrl_gym.registry import make_bandit_agent


class ShuffledArms(BanditAgent):
    """``inner`` (an algorithm or its specification) played on every run's arms in a random order (module docstring)."""

    name = "shuffled_arms"

    def __init__(self, inner: BanditAgent | Mapping[str, Any] | str, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        built = make_bandit_agent(inner, "shuffled_arms")
        self.inner = built
        self.binary_rewards, self.reward_bounds = built.binary_rewards, built.reward_bounds
        self.order = np.zeros((0, 0), dtype=np.int64)
        """(B, A): the inner algorithm's arm j of run b is the bandit's arm ``order[b, j]``."""
        self.inverse = np.zeros((0, 0), dtype=np.int64)
        """(B, A): the bandit's arm a of run b is the inner algorithm's arm ``inverse[b, a]``."""

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.order = np.argsort(self.rng.random((self.batch_size, self.num_actions)), axis=1)
        self.inverse = np.argsort(self.order, axis=1)
        if w_star is not None and self.one_hot_arms:  # a K-armed bandit's w* are its arm means
            w_star = np.take_along_axis(w_star, self.order, axis=1)
        sizes = self._wrapped_sizes(w_star)
        self.inner.reset(self.reset_info, rng=np.random.default_rng(self.rng.integers(2**63)), **sizes)

    def _inner_sets(self, action_sets: np.ndarray) -> np.ndarray:
        """The action sets as the inner algorithm sees them (rows permuted; one-hot arms as they are)."""
        if self.one_hot_arms:
            return action_sets
        return np.take_along_axis(action_sets, self.order[:, :, None], axis=1)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        chosen = self.inner.act_batch(self._inner_sets(action_sets))
        return self.order[np.arange(self.batch_size), chosen]

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        probs = self.inner.policy_batch(self._inner_sets(action_sets))
        return np.take_along_axis(probs, self.inverse, axis=1)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        inner_actions = self.inverse[np.arange(self.batch_size), actions]
        self.inner.update_batch(self._inner_sets(action_sets), inner_actions, rewards)

    def config(self) -> dict[str, Any]:
        """The inner algorithm's configuration."""
        return {**super().config(), "inner": self.inner.config()}
