"""Index algorithms: score every arm from the history, then take the argmax (or a softmax).

LinUCB, UCB, the empirical mean and the oracle all pick argmax_k v_k of an index v (B, A).
The soft variants of the paper (soft LinUCB, Appendix E.2) instead sample from
softmax(v / tau), which recovers the argmax as tau -> 0.  An index of +inf (an arm never
pulled) takes priority; among several such arms the lowest index is pulled first.  The argmax is the first
maximiser within 1e-12 (:func:`~icrl_gym.agent_base.first_argmax`): arms that an index computes equal by
different float paths (symmetric arms read through another arm's counts, say) differ by rounding alone, and the
arms' order, not that rounding, must choose among them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from icrl_gym.agent_base import first_argmax
from icrl_gym.algorithm import BanditAgent, one_hot
from icrl_gym.envs.validation import check_number


def softmax_policy(scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(scores / temperature) row-wise; rows with +inf put their mass on the +inf arms."""
    inf = np.isposinf(scores)
    has_inf = inf.any(axis=1, keepdims=True)
    finite = np.where(inf, -np.inf, scores)
    z = (finite - finite.max(axis=1, keepdims=True)) / temperature
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p_inf = inf / np.maximum(inf.sum(axis=1, keepdims=True), 1)
    return np.where(has_inf, p_inf, p)


class IndexAgent(BanditAgent):
    """Argmax of an index (``temperature == 0``) or softmax(index / temperature) (``> 0``).

    Subclasses implement :meth:`index`, the per-arm index v (B, A) at the action sets (B, A, d).
    """

    has_index = True

    def __init__(self, temperature: float = 0.0, seed: int | None = None) -> None:
        super().__init__(seed)
        self.temperature = check_number("temperature", temperature, low=0.0)
        self.deterministic = self.temperature == 0.0

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        scores = self.index(action_sets)
        if self.deterministic:
            return one_hot(first_argmax(scores), self.num_actions)
        return softmax_policy(scores, self.temperature)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        if self.deterministic:
            scores = self.index(action_sets)
            if np.isnan(scores).any():  # never an argmax of NaN passed on as an action
                raise ValueError(f"{self.name}'s index is NaN for run {int(np.isnan(scores).any(axis=1).argmax())}")
            return first_argmax(scores)
        return super()._act(action_sets)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters, including the softmax temperature."""
        return {**super().config(), "temperature": self.temperature}
