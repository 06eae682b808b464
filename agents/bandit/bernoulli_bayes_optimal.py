"""The exact Bayes-optimal policy of a K-armed Bernoulli bandit with independent Beta priors.

With arm means p_k iid Beta(a, b) and horizon T, the posterior after the history is summarised by
the counts (s_k, f_k) of successes and failures of every arm, and p_k | D ~ Beta(a + s_k, b + f_k).
The Bayes-optimal policy maximises the expected total reward E[sum_t r_t] under the prior (the
Bayes-regret minimiser, the policy that the paper's DPT pretraining approximates at best,
Section 4 / Theorem 6 with Alg = posterior sampling being only its approximation).  Dynamic
programming over the counts, with n = sum_k (s_k + f_k) steps taken and T - n remaining:

    V(x) = 0 if n = T,   V(x) = max_k  p_k (1 + V(x + e_{s_k})) + (1 - p_k) V(x + e_{f_k}),
    p_k = (a + s_k) / (a + b + s_k + f_k),

and the action table argmax_k (first maximiser) is precomputed for every state once per (K, T, a, b).

States and sizes: a state is a composition of n into 2K counts, so layer n holds C(n + 2K - 1, 2K - 1)
states and the table C(T + 2K, 2K) bytes (one uint8 action per state): K=2: T=50 0.3 MiB, T=100
4.4 MiB, T=200 67 MiB (45 s to build on one core), T=300 333 MiB, T=500 2.5 GiB; K=3: T=30 1.9 MiB,
T=50 31 MiB, T=70 208 MiB, T=100 1.6 GiB.  Tables larger than ``max_table_bytes`` (default 512 MiB)
are refused with the estimate in the error.  The build time grows like the table (about T^4 for K=2).
States are ranked within a layer by the combinatorial number system (stars and bars), so lookups
of B runs are one vectorised rank computation.

**An unknown prior from a family** (``hyperprior``).  When the arms' means are iid Beta(a_J, b_J)
given a prior index J ~ pi over a finite family {(a_j, b_j)} and J is not told, the counts are still
a sufficient statistic: the posterior of J is

    w_j(x) ∝ pi_j prod_k B(a_j + s_k, b_j + f_k) / B(a_j, b_j)    (B the Beta function),

and the next reward of arm k is 1 with the mixture predictive p_k(x) = sum_j w_j(x) (a_j + s_k) /
(a_j + b_j + s_k + f_k).  The recursion above with this p_k is the Bayes-optimal policy for the
family: it minimises sum_j pi_j Reg_j, the pi-average of the Bayes regrets under the members,
over every policy that is not told J -- the best that any in-context learner trained on the family
can do (Section 4's Bayes-optimality, with the family as the prior).  A one-member family is the
told-prior policy above.

**What the priors may be.**  Every Beta parameter (``prior_a``, ``prior_b``, each a_j, b_j of the
hyperprior) must be a finite number in (0, MAX_SCALE]: Beta(a, b) is a distribution only for a, b > 0,
and a NaN or an infinity would make every p_k NaN, so that the argmax of the table would be arm 0 for
ever.  The hyperprior is a non-empty list of [a, b] pairs; its weights pi, one per pair, must be finite
and non-negative with a positive sum (they are normalised, so only their ratios matter; a zero weight
leaves its member out of the prior, which is allowed; all zeros is no prior at all).  The agent checks
them when it is built, and :class:`FamilyPredictive` when it is used directly, with a ``ValueError``
naming the argument and its value (a ``TypeError`` for an entry that is no number).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from math import comb
from typing import Any

import numpy as np
from scipy.special import betaln

from agents.bandit.resolved_model import ResolvedModelMixin
from icrl_gym.algorithm import BanditAgent, resolve_horizon
from icrl_gym.envs.bandit_core import BanditPrior, BanditReward
from icrl_gym.envs.validation import MAX_SCALE, check_number, plain
from icrl_gym.estimators.statistics import ArmStatistics


def check_hyperprior(hyperprior: Any, name: str = "hyperprior") -> list[list[float]]:
    """``hyperprior`` as [[a_1, b_1], ...] floats: a non-empty sequence of pairs of Beta parameters in (0, MAX_SCALE].

    A ``ValueError`` names the argument, the entry and its value (module docstring: what the priors may be).
    """
    if isinstance(hyperprior, (str, bytes)) or not isinstance(hyperprior, (Sequence, np.ndarray)):
        raise ValueError(f"{name} must be a list of [a, b] pairs (Beta priors), got {hyperprior!r}")
    if len(hyperprior) == 0:
        raise ValueError(f"{name} must hold at least one [a, b] pair (Beta prior), got {hyperprior!r}")
    pairs = []
    for j, pair in enumerate(hyperprior):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, (Sequence, np.ndarray)) or len(pair) != 2:
            raise ValueError(f"{name} must be a list of [a, b] pairs (Beta priors), but {name}[{j}] is {pair!r}")
        try:  # len(pair) == 2: checked above
            parts = zip("ab", pair, strict=True)
            pairs.append([check_number(f"{name}[{j}] {part}", plain(v), 0.0, True, MAX_SCALE) for part, v in parts])
        except (TypeError, ValueError) as err:  # the entry that is wrong, after what the pairs must be
            raise type(err)(f"{name} needs [a, b] pairs with a, b > 0: {err}") from None
    return pairs


def check_hyperprior_weights(weights: Any, count: int, name: str = "hyperprior_weights") -> list[float]:
    """``weights`` as ``count`` floats, each finite and >= 0 (at most MAX_SCALE), with a positive sum.

    A ``ValueError`` names the argument and the value (module docstring: what the priors may be).
    """
    if isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)) or len(weights) != count:
        raise ValueError(f"{name} must be {count} numbers, one per pair of the hyperprior, got {weights!r}")
    values = [check_number(f"{name}[{j}]", plain(w), 0.0, False, MAX_SCALE) for j, w in enumerate(weights)]
    if not sum(values) > 0:
        raise ValueError(f"{name} must not all be 0 (the prior is pi_j = w_j / sum w), got {weights!r}")
    return values


def table_bytes(num_arms: int, horizon: int) -> int:
    """Size of the action table: one byte per state, sum_{n<=T} C(n + 2K - 1, 2K - 1) = C(T + 2K, 2K)."""
    return comb(horizon + 2 * num_arms, 2 * num_arms)


def colex_combinations(size: int, r: int) -> np.ndarray:
    """All r-subsets q_1 < ... < q_r of {0, ..., size-1} in colex order, shape (C(size, r), r).

    In colex order the subsets of {0, ..., N-1} are the first C(N, r) rows, whatever size >= N.
    """
    rows = np.arange(size, dtype=np.int64)[:, None]
    for j in range(2, r + 1):  # subsets of size j: those of size j-1 below each new top element
        lengths = [comb(top, j - 1) for top in range(j - 1, size)]
        rows = np.concatenate(
            [np.column_stack([rows[:n], np.full(n, top)]) for top, n in zip(range(j - 1, size), lengths, strict=True)]
        )
    return rows


def compositions(bars: np.ndarray, n: int) -> np.ndarray:
    """Compositions of n into m parts, ranked (row r has rank r), from the colex bar positions (m-1 columns)."""
    m = bars.shape[1] + 1
    q = bars[: comb(n + m - 1, m - 1)]
    edges = np.column_stack([np.full(len(q), -1), q, np.full(len(q), n + m - 1)])
    return np.diff(edges, axis=1) - 1


class CompositionRanker:
    """Rank of a composition of n into m parts within its layer: colex rank of its bar positions.

    Bars sit at positions q_i = c_1 + ... + c_i + (i - 1), i = 1..m-1, of n + m - 1 slots; the rank
    sum_i C(q_i, i) is a bijection of the layer onto [0, C(n + m - 1, m - 1)).
    """

    def __init__(self, max_n: int, m: int) -> None:
        self.m = m
        x = np.arange(max_n + m + 1)
        self.binom = np.stack([np.array([comb(int(v), i) for v in x], dtype=np.int64) for i in range(m)], axis=1)

    def rank(self, counts: np.ndarray) -> np.ndarray:
        """Counts (..., m) -> (...,) rank within the layer n = counts.sum(-1)."""
        q = np.cumsum(counts[..., :-1], axis=-1) + np.arange(self.m - 1)
        return self.binom[q, np.arange(1, self.m)].sum(axis=-1)


class FamilyPredictive:
    """The mixture predictive p_k(x) of the module docstring for states x = (s_1, f_1, ..., s_K, f_K).

    ``priors`` (J, 2) the family's (a_j, b_j), ``weights`` (J,) the hyperprior pi (normalised here);
    both are checked (:func:`check_hyperprior`, :func:`check_hyperprior_weights`).  The log-evidence
    of one arm's counts, log B(a_j + s, b_j + f) - log B(a_j, b_j), is tabulated for s, f <= ``max_count``.
    """

    def __init__(self, priors: np.ndarray, weights: np.ndarray, max_count: int) -> None:
        self.priors = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
        check_hyperprior(self.priors, "priors")
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(self.priors),):
            raise ValueError(f"weights must be {len(self.priors)} numbers, one per prior, got shape {weights.shape}")
        check_hyperprior_weights(weights, len(self.priors), "weights")
        self.log_weights = np.log(weights / weights.sum())
        a, b = self.priors[:, 0, None, None], self.priors[:, 1, None, None]
        counts = np.arange(max_count + 1, dtype=np.float64)
        self.log_evidence = betaln(a + counts[:, None], b + counts[None, :]) - betaln(a, b)  # (J, n, n)

    def posterior(self, x: np.ndarray, power: float = 1.0) -> np.ndarray:
        """w_j(x), shape (N, J), for states ``x`` (N, 2K).

        ``power`` eta < 1 tempers the evidence, w_j ∝ pi_j L_j(x)^eta (a fractional posterior); 1 is Bayes's rule.
        """
        log_w = self.log_joint(x, power)
        w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        return w / w.sum(axis=1, keepdims=True)

    def log_joint(self, x: np.ndarray, power: float = 1.0) -> np.ndarray:
        """Log pi_j + power log L_j(x), shape (N, J): the posterior's log-weights before normalisation."""
        log_w = np.broadcast_to(self.log_weights, (len(x), len(self.priors))).copy()
        for k in range(x.shape[1] // 2):
            log_w += power * self.log_evidence[:, x[:, 2 * k], x[:, 2 * k + 1]].T
        return log_w

    def arm_means(self, x: np.ndarray, k: int) -> np.ndarray:
        """(a_j + s_k) / (a_j + b_j + s_k + f_k), shape (N, J): arm k's posterior mean under each member."""
        s, f = x[:, 2 * k, None], x[:, 2 * k + 1, None]
        return (self.priors[:, 0] + s) / (self.priors.sum(axis=1) + s + f)

    def predictive(self, x: np.ndarray) -> np.ndarray:
        """p_k(x), shape (N, K)."""
        w = self.posterior(x)
        return np.stack([(w * self.arm_means(x, k)).sum(axis=1) for k in range(x.shape[1] // 2)], axis=1)


def _family_bayes_dp(
    num_arms: int,
    horizon: int,
    priors: np.ndarray,
    weights: np.ndarray | None,
    keep: Callable[[np.ndarray], np.ndarray],
) -> tuple[list[np.ndarray], float]:
    """The DP of the module docstring; per layer n = 0..T-1, ``keep(Q)`` of its Q-values (N, K) over ranked states."""
    priors = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    model = FamilyPredictive(priors, np.ones(len(priors)) if weights is None else weights, horizon)
    m = 2 * num_arms
    ranker = CompositionRanker(horizon + 1, m)
    bars = colex_combinations(horizon + m - 2, m - 1)  # enough for the layers n <= T - 1
    v_next = np.zeros(comb(horizon + m - 1, m - 1))
    kept: list[np.ndarray] = [np.zeros(0)] * horizon
    for n in range(horizon - 1, -1, -1):
        x = compositions(bars, n)  # (C(n + m - 1, m - 1), m), row r is the state of rank r
        p = model.predictive(x) if len(priors) > 1 else None
        q = np.empty((len(x), num_arms))
        for k in range(num_arms):
            p_k = model.arm_means(x, k)[:, 0] if p is None else p[:, k]
            v_s, v_f = (v_next[ranker.rank(y)] for y in successors(x, k))
            q[:, k] = p_k * (1.0 + v_s) + (1.0 - p_k) * v_f
        kept[n] = keep(q)
        v_next = q.max(axis=1)
    return kept, float(v_next[0])


def family_bayes_table(
    num_arms: int, horizon: int, priors: np.ndarray, weights: np.ndarray | None = None
) -> tuple[list[np.ndarray], float]:
    """Action tables per layer n = 0..T-1 (uint8 over the layer's ranked states) and the value V(0).

    The DP of the module docstring with the family's mixture predictive (``weights`` None: uniform);
    V(0) is the family-Bayes-optimal expected total reward sum_j pi_j E_j[sum_t r_t].
    """
    return _family_bayes_dp(num_arms, horizon, priors, weights, lambda q: q.argmax(axis=1).astype(np.uint8))


def family_bayes_advantages(
    num_arms: int, horizon: int, priors: np.ndarray, weights: np.ndarray | None = None
) -> list[np.ndarray]:
    """Per layer n = 0..T-1, Q(x, k) - max_k' Q(x, k') (float32, (N, K) over the layer's ranked states).

    The same DP as :func:`family_bayes_table`: the expected reward an arm loses against the
    family-Bayes-optimal action before the rest is played optimally (0 for the maximisers).
    """
    tables, _ = _family_bayes_dp(
        num_arms, horizon, priors, weights, lambda q: (q - q.max(axis=1, keepdims=True)).astype(np.float32)
    )
    return tables


def count_states(stats: ArmStatistics) -> np.ndarray:
    """The count states (B, 2K) = (s_1, f_1, ..., s_K, f_K) of B runs of 0/1 rewards, as the DP ranks them."""
    s, n = stats.sums, stats.counts
    return np.stack([s, n - s], axis=-1).reshape(len(s), -1).astype(np.int64)


def successors(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The states after a success and after a failure of arm k, from states ``x`` (N, 2K)."""
    success, failure = x.copy(), x.copy()
    success[:, 2 * k] += 1
    failure[:, 2 * k + 1] += 1
    return success, failure


def bayes_optimal_table(num_arms: int, horizon: int, a: float, b: float) -> tuple[list[np.ndarray], float]:
    """Action tables per layer n = 0..T-1 (uint8 over the layer's ranked states) and the value V(0).

    V(0) is the Bayes-optimal expected total reward E[sum_t r_t] under the Beta(a, b)^K prior.
    """
    return family_bayes_table(num_arms, horizon, np.array([[a, b]]))


@functools.lru_cache(maxsize=2)
def _shared_table(
    num_arms: int, horizon: int, priors: tuple[tuple[float, float], ...], weights: tuple[float, ...]
) -> tuple[list[np.ndarray], float]:
    """:func:`family_bayes_table`, kept for the agents of the next cells (read-only).

    At K=2, T=200 on one core a table takes 31 s for a told prior and 105 s for a family of 16.
    """
    return family_bayes_table(num_arms, horizon, np.array(priors), np.array(weights))


class BernoulliBayesOptimal(ResolvedModelMixin, BanditAgent):
    """Bayes-optimal K-armed Bernoulli bandit policy by dynamic programming (prior and T from the environment).

    With ``hyperprior`` [[a_1, b_1], ...] (and optional ``hyperprior_weights``) it is not told the
    prior: it is Bayes-optimal for an unknown member of that family (module docstring) and ignores
    the environment's prior.
    """

    name = "bernoulli_bayes_optimal"
    hyper_parameters = ("prior_a", "prior_b", "hyperprior", "hyperprior_weights", "horizon", "max_table_bytes")
    deterministic = True
    binary_rewards = True

    def __init__(
        self,
        prior_a: float | None = None,
        prior_b: float | None = None,
        horizon: int | None = None,
        max_table_bytes: int = 512 * 2**20,
        seed: int | None = None,
        hyperprior: list[list[float]] | None = None,
        hyperprior_weights: list[float] | None = None,
    ) -> None:
        super().__init__(seed)
        for name, value in (("prior_a", prior_a), ("prior_b", prior_b)):  # None: the environment's
            if value is not None:
                check_number(
                    f"{name} (a Beta prior parameter, or None: the environment's)", value, 0.0, True, MAX_SCALE
                )
        self.prior_a, self.prior_b, self.horizon = prior_a, prior_b, horizon
        if hyperprior is not None and (prior_a is not None or prior_b is not None):
            raise ValueError("pass either prior_a and prior_b (a told prior) or hyperprior (a family), not both")
        if hyperprior is None and hyperprior_weights is not None:
            raise ValueError("hyperprior_weights needs hyperprior")
        self.hyperprior = None if hyperprior is None else check_hyperprior(hyperprior)
        self.hyperprior_weights = (
            None
            if hyperprior_weights is None or self.hyperprior is None
            else check_hyperprior_weights(hyperprior_weights, len(self.hyperprior))
        )
        self.max_table_bytes = int(max_table_bytes)
        self._used = None
        self._key: tuple | None = None
        self.value = float("nan")
        """V(0): the Bayes-optimal expected total reward under the prior."""

    def _resolve(self) -> tuple[int, float, float]:
        spec = None if self.env_model is None else self.env_model.bandit
        if self.env_model is not None and (spec is None or spec.reward is not BanditReward.BERNOULLI):
            got = "an MDP" if spec is None else repr(spec.reward)
            raise ValueError(f"the Bernoulli Bayes-optimal policy needs Bernoulli rewards, got {got}")
        if self.hyperprior is not None:  # not told the prior: the environment's is not read
            horizon = resolve_horizon(self.reset_info, self.horizon, "the Bayes-optimal policy")
            return horizon, float("nan"), float("nan")
        a, b = self.prior_a, self.prior_b
        if spec is not None and spec.prior is BanditPrior.BETA:
            a = spec.prior_a if a is None else a
            b = spec.prior_b if b is None else b
        elif spec is not None and spec.prior is BanditPrior.UNIFORM and (a is None or b is None):
            if (spec.prior_low, spec.prior_high) != (0.0, 1.0):
                raise ValueError(
                    f"the DP assumes Beta priors; Unif([{spec.prior_low}, {spec.prior_high}]) is not one "
                    "(only Unif([0, 1]) = Beta(1, 1) is): pass prior_a and prior_b to use a Beta prior anyway"
                )
            a, b = (1.0 if a is None else a), (1.0 if b is None else b)
        if a is None or b is None:
            if spec is not None:  # e.g. 'skewed', or a Beta prior per instance: no one Beta prior to read
                raise ValueError(
                    f"the DP needs one Beta prior for every run; prior={spec.prior!r} gives none: pass prior_a "
                    "and prior_b to use a Beta prior anyway"
                )
            raise ValueError("reset with the environment's reset info (info['model']) or pass prior_a and prior_b")
        return resolve_horizon(self.reset_info, self.horizon, "the Bayes-optimal policy"), float(a), float(b)

    def _reset(self, w_star: np.ndarray | None) -> None:
        horizon, a, b = self._resolve()
        told = self.hyperprior is None
        priors = ((a, b),) if told else tuple((p, q) for p, q in self.hyperprior or [])
        weights = (1.0,) if told else tuple(float(w) for w in self._weights())
        key = (self.num_actions, horizon, priors, weights)
        if key != self._key:
            need = table_bytes(self.num_actions, horizon)
            if need > self.max_table_bytes:
                raise ValueError(
                    f"the Bayes-optimal action table for K={self.num_actions} arms and T={horizon} has "
                    f"{need:,} states and needs {need / 2**20:,.0f} MiB (max_table_bytes={self.max_table_bytes:,}); "
                    "feasible at 512 MiB: K=2 up to T=334, K=3 up to T=81"
                )
            self.tables, self.value = _shared_table(self.num_actions, horizon, priors, weights)
            self.ranker = CompositionRanker(horizon + 1, 2 * self.num_actions)
            self._key = key
        self._used = {"horizon": horizon, "prior_a": a, "prior_b": b} if told else {"horizon": horizon}
        self.stats = ArmStatistics(self.batch_size, self.num_actions)

    def _weights(self) -> np.ndarray:
        """The hyperprior pi (uniform unless ``hyperprior_weights``)."""
        assert self.hyperprior is not None
        return np.ones(len(self.hyperprior)) if self.hyperprior_weights is None else np.array(self.hyperprior_weights)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        if self.t >= self.used["horizon"]:
            raise RuntimeError(f"the table covers T={self.used['horizon']} steps; reset for a new run")
        return self.tables[self.t][self.ranker.rank(count_states(self.stats))].astype(np.int64)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return np.eye(self.num_actions)[self._act(action_sets)]

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)  # rewards in {0, 1}: checked by the base class (binary_rewards)
