r"""The two-armed count-state DP over the 16 Beta priors of the family and the *split* prior.

The generalization grid's skewed sets put half of the arms' means in U[1/2, 1] and the other half in U[0, 1/2].
At K = 2 the *split* prior is their even mixture: one arm ~ U[1/2, 1], the other ~ U[0, 1/2], which one uniform.
Under a U[l, h] prior an arm's posterior after s successes and f failures is Beta(s + 1, f + 1) truncated to
[l, h], so its evidence and predictive are ratios of incomplete Beta functions (I_x the regularised one, B the
Beta function):

    int_l^h p^s (1 - p)^f dp / (h - l) = B(s + 1, f + 1) [I_h(s + 1, f + 1) - I_l(s + 1, f + 1)] / (h - l),
    P(r = 1 | s, f) = (s + 1) / (s + f + 2) [I_h - I_l](s + 2, f + 1) / [I_h - I_l](s + 1, f + 1)

(the U[1/2, 1] masses from the upper tail, so that no difference of two numbers near 1 is taken).  The counts
stay a sufficient statistic for a mixture of such product priors, and the count-state DP of
:mod:`agents.bandit.bernoulli_bayes_optimal` extends to the mixture of the 16 Beta(a, b) priors of the family
(arms iid) and the two orientations of the split prior, with any weights pi over the 18 components: with the
posterior w_c(x) ∝ pi_c L_c(x) and the components' values V_c of the mixture's Bayes-optimal policy,

    Q_c(x, k) = p_ck(x) (1 + V_c(x + e_k^s)) + (1 - p_ck(x)) V_c(x + e_k^f),   Q(x, k) = sum_c w_c(x) Q_c(x, k),

and the policy plays the maximisers of Q (ties uniform).  :meth:`SplitMixture.regrets` gives each component's
Bayes regret (of that policy, or of any count-state policy), :meth:`SplitMixture.advantages` the mixture's
Q(x, k) - max_k' Q(x, k') per layer, the labels of the generalist trainer's exact K = 2 batches when the split
prior is one of their members (:mod:`icrl_gym.training.generalist`).  One backward pass over the C(T + 4, 4)
count states takes about 25 s at T = 100 and 5 min at T = 200 on one core.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import comb

import numpy as np
from scipy.special import betaln

from agents.bandit.bernoulli_bayes_optimal import CompositionRanker, colex_combinations, compositions, successors
from agents.bandit.family_gittins import BETA_FAMILY
from agents.bandit.split_member import ArmTables, half_uniform_arm
from icrl_gym.algorithm import first_argmax, one_hot, uniform_over_maximisers
from icrl_gym.training.exact_bernoulli import best_totals

SplitPolicy = Callable[[int, np.ndarray], np.ndarray]
"""(layer n, states (N, 4)) -> action distribution (N, 2)."""

SPLIT_BEST_MEAN = 0.75
"""E[max(p_1, p_2)] under the split prior: the high arm's mean, E[U[1/2, 1]]."""


def beta_arm(a: float, b: float, horizon: int) -> ArmTables:
    """Beta(a, b): log B(a + s, b + f) - log B(a, b) and (a + s) / (a + b + s + f)."""
    s, f = np.arange(horizon + 1.0)[:, None], np.arange(horizon + 1.0)[None, :]
    return betaln(a + s, b + f) - betaln(a, b), (a + s) / (a + b + s + f)


class SplitMixture:
    """The 16 Beta priors of the family (arms iid) and the two skewed priors, on two arms, over T steps."""

    def __init__(self, horizon: int, family: Sequence[tuple[float, float]] = BETA_FAMILY) -> None:
        self.horizon, self.family = horizon, [(float(a), float(b)) for a, b in family]
        high, low = half_uniform_arm(True, horizon), half_uniform_arm(False, horizon)
        betas = [beta_arm(a, b, horizon) for a, b in self.family]
        self.components: list[tuple[ArmTables, ArmTables]] = [(t, t) for t in betas] + [(high, low), (low, high)]
        self.best = np.concatenate([best_totals(2, horizon, tuple(self.family)), [SPLIT_BEST_MEAN * horizon] * 2])
        self._ranker = CompositionRanker(horizon + 1, 4)
        self._bars = colex_combinations(horizon + 2, 3)

    def _log_evidence(self, x: np.ndarray) -> np.ndarray:
        """Per component, the log-evidence (N, C) of states x."""
        s, f = x[:, 0::2], x[:, 1::2]
        return np.stack([arms[0][0][s[:, 0], f[:, 0]] + arms[1][0][s[:, 1], f[:, 1]] for arms in self.components], 1)

    def _predictive(self, x: np.ndarray) -> np.ndarray:
        """Per component, the arms' predictive P(r = 1) (N, C, 2) at states x."""
        s, f = x[:, 0::2], x[:, 1::2]
        return np.stack([np.stack([arms[k][1][s[:, k], f[:, k]] for k in (0, 1)], 1) for arms in self.components], 1)

    def _backward(self, decide: Callable[[int, np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """One backward pass; returns every component's value V_c(0) of the policy played.

        ``decide(n, x, q)`` gives the action distribution (N, 2) at layer n's states x from the components'
        Q-values q (N, C, 2).
        """
        values = np.zeros((comb(self.horizon + 3, 3), len(self.components)))
        for n in range(self.horizon - 1, -1, -1):
            x = compositions(self._bars, n)
            pred = self._predictive(x)
            q = np.empty((len(x), len(self.components), 2))
            for k in (0, 1):
                r_s, r_f = (self._ranker.rank(y) for y in successors(x, k))
                q[:, :, k] = pred[:, :, k] * (1.0 + values[r_s]) + (1.0 - pred[:, :, k]) * values[r_f]
            values = (q * decide(n, x, q)[:, None, :]).sum(axis=2)
        return values[0]

    def _log_prior(self, weights: np.ndarray) -> np.ndarray:
        """The log-prior log pi_c (C,) of the mixture's unnormalised ``weights``, one per component."""
        log_prior = np.log(np.maximum(np.asarray(weights, dtype=np.float64), 1e-300))
        if log_prior.shape != (len(self.components),):
            raise ValueError(f"weights must be {len(self.components)} numbers, one per component, got {weights!r}")
        return log_prior

    def _mixed(self, log_prior: np.ndarray, x: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The mixture's Q(x, k) = sum_c w_c(x) Q_c(x, k) (N, 2), w_c(x) ∝ pi_c L_c(x) (module docstring)."""
        log_w = self._log_evidence(x) + log_prior
        w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        return (w[:, :, None] * q).sum(axis=1) / w.sum(axis=1, keepdims=True)

    def regrets(
        self, weights: np.ndarray | None = None, policy: SplitPolicy | None = None, first_arm_ties: bool = False
    ) -> np.ndarray:
        """Per component (C,), the Bayes regret of ``policy`` or of the mixture's Bayes-optimal policy.

        ``weights``: the mixture's (unnormalised) prior over the components, whose Bayes-optimal policy is played
        (one backward pass), its ties broken uniformly or, with ``first_arm_ties``, to the first arm as every index
        agent and a learned policy's greedy play break them (:func:`~icrl_gym.agent_base.first_argmax`).  The
        mixture's own Bayes regret is the same either way; a component's is not: the skewed prior (high arm first)
        gains from the first pull's tie and the reversed one pays for it.
        """
        if (weights is None) == (policy is None):
            raise ValueError("give the mixture's weights (its Bayes-optimal policy) or a policy, not both")
        if policy is None:
            assert weights is not None
            log_prior = self._log_prior(weights)

            def decide(n: int, x: np.ndarray, q: np.ndarray) -> np.ndarray:
                mixed = self._mixed(log_prior, x, q)
                return one_hot(first_argmax(mixed), 2) if first_arm_ties else uniform_over_maximisers(mixed)

            return self.best - self._backward(decide)
        return self.best - self._backward(lambda n, x, q: policy(n, x))

    def advantages(self, weights: np.ndarray) -> list[np.ndarray]:
        """Per layer n = 0..T-1, the mixture's Q(x, k) - max_k' Q(x, k') (float32 (N, 2) over ranked states).

        The layer's states are ranked as in :func:`~agents.bandit.bernoulli_bayes_optimal.family_bayes_advantages`.

        ``weights``: the mixture's (unnormalised) prior over the components (the 16 Beta priors, then the split
        prior with the high arm first and second); the continuation is the mixture's Bayes-optimal policy.
        """
        kept: list[np.ndarray] = [np.zeros(0)] * self.horizon
        log_prior = self._log_prior(weights)

        def decide(n: int, x: np.ndarray, q: np.ndarray) -> np.ndarray:
            mixed = self._mixed(log_prior, x, q)
            kept[n] = (mixed - mixed.max(axis=1, keepdims=True)).astype(np.float32)
            return uniform_over_maximisers(mixed)

        self._backward(decide)
        return kept


def split_weights(split_share: float, members: int = len(BETA_FAMILY)) -> np.ndarray:
    """The components' prior weights (J + 2,).

    (1 - ``split_share``) / J on each of the J Beta priors, ``split_share`` / 2 on each orientation of the split
    prior.
    """
    if not 0.0 <= split_share <= 1.0:
        raise ValueError(f"split_share must be in [0, 1], got {split_share}")
    return np.array([(1.0 - split_share) / members] * members + [split_share / 2.0] * 2)
