"""Any K-armed Bernoulli algorithm with the fresh-arm floor: never fewer fresh arms than the Gittins index told U[0, 1].

The learned Bernoulli generalist plays ``fresh_arm_floor`` as an option of its agent (:mod:`agents.learned.generalist`);
this wrapper gives the same floor to any algorithm, so that an index or another model can be measured with it on
the same runs.  At step t of a run of T steps, with counts (s_k, f_k) of the arms so far:

- let j be the arm that the finite-horizon Gittins index told U[0, 1] would pull, its first maximiser over
  G(s_k, f_k, T - t) (:meth:`~icrl_gym.estimators.fresh_arm.FreshArmRule.first_untried`, from thresholds shipped
  for T <= 1,000: no table is built);
- where j is an arm not pulled yet and the inner algorithm's action a is an arm already pulled, arm j is played;
  otherwise a is (:meth:`~icrl_gym.estimators.fresh_arm.FreshArmRule.floor`).

So the floor only adds tries of fresh arms, and only while the U[0, 1] index wants one: on a bandit whose arms are
all low it costs at most that index's own tries.  The inner algorithm is updated with the arm actually played and
its reward (an index reads the counts; a learned policy its history), and its probabilities become those of the
played arm: where the floor acts, the mass of every tried arm moves to j.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from icrl_gym.agent_base import resolve_horizon
from icrl_gym.algorithm import BanditAgent
from icrl_gym.envs.validation import check_number
from icrl_gym.estimators.fresh_arm import FreshArmRule, fresh_arm_rule
from icrl_gym.registry import make_bandit_agent


class FreshArmFloor(BanditAgent):
    """``inner`` (an algorithm or its specification) with the fresh-arm floor on a K-armed Bernoulli bandit."""

    name = "fresh_arm_floor"
    binary_rewards = True

    def __init__(
        self,
        inner: BanditAgent | Mapping[str, Any] | str,
        max_memory_gib: float | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        built = make_bandit_agent(inner, "fresh_arm_floor")
        self.inner = built
        self.max_memory_gib = None if max_memory_gib is None else check_number("max_memory_gib", max_memory_gib, 0.0)
        self.rule: FreshArmRule | None = None
        """The thresholds for this reset's horizon (set by ``reset``)."""
        self.horizon = 0
        self.successes = np.zeros((0, 0), dtype=np.int64)
        """(B, K) successes of every arm of every run."""
        self.failures = np.zeros((0, 0), dtype=np.int64)
        """(B, K) failures of every arm of every run."""

    def _reset(self, w_star: np.ndarray | None) -> None:
        if not self.one_hot_arms:
            raise ValueError("fresh_arm_floor plays a K-armed bandit (one-hot arms e_1..e_K), not a linear bandit")
        self.horizon = resolve_horizon(self.reset_info, None, "the fresh-arm floor")
        self.rule = fresh_arm_rule(self.horizon, self.max_memory_gib)
        self.successes = np.zeros((self.batch_size, self.num_actions), dtype=np.int64)
        self.failures = np.zeros_like(self.successes)
        sizes = self._wrapped_sizes(w_star)
        self.inner.reset(self.reset_info, rng=np.random.default_rng(self.rng.integers(2**63)), **sizes)

    def _fresh(self) -> np.ndarray:
        """(B,) the untried arm the U[0, 1] index would pull now, else -1."""
        assert self.rule is not None
        return self.rule.first_untried(self.successes, self.failures, self._steps_left())

    def _steps_left(self) -> int:
        """The pulls left, m = T - t (at least 1, as the thresholds are read)."""
        return max(self.horizon - self.t, 1)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        chosen = self.inner.act_batch(action_sets)
        assert self.rule is not None
        fresh = self.rule.floor(self.successes, self.failures, self._steps_left(), chosen)
        return np.where(fresh >= 0, fresh, chosen)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        probs = np.array(self.inner.policy_batch(action_sets), dtype=np.float64)
        fresh = self._fresh()
        rows = np.flatnonzero(fresh >= 0)
        tried = (self.successes + self.failures)[rows] > 0
        moved = np.where(tried, probs[rows], 0.0).sum(axis=1)
        probs[rows] = np.where(tried, 0.0, probs[rows])
        probs[rows, fresh[rows]] += moved
        return probs

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        rows = np.arange(self.batch_size)
        success = rewards > 0.5
        self.successes[rows, actions] += success
        self.failures[rows, actions] += ~success
        self.inner.update_batch(action_sets, actions, rewards)

    def config(self) -> dict[str, Any]:
        """The inner algorithm's configuration."""
        return {**super().config(), "inner": self.inner.config()}
