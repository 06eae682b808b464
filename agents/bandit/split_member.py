r"""The split prior as a member of a Bernoulli family: a fixed number of the arms high, which ones unknown.

The generalization grid's skewed sets draw floor(K/2) of the K arms' means from U[1/2, 1] and the others from
U[0, 1/2] (or the reverse: ceil(K/2) high).  The *split* member holds both: m of the K arms are high, m in
M = {floor(K/2), ceil(K/2)} with equal mass, the high set S uniform among the C(K, m) of that size.

**One arm.** Under U[1/2, 1] (H) or U[0, 1/2] (L) an arm's posterior after s successes and f failures is
Beta(s + 1, f + 1) truncated to that half, so with I_x the regularised incomplete Beta function its evidence and
predictive are

    H(s, f) = 2 B(s + 1, f + 1) (1 - I_{1/2}(s + 1, f + 1)),    L(s, f) = 2 B(s + 1, f + 1) I_{1/2}(s + 1, f + 1),
    mu_H(s, f) = P(r = 1 | s, f, H) = (s + 1) / (s + f + 2) (1 - I_{1/2}(s + 2, f + 1)) / (1 - I_{1/2}(s + 1, f + 1))

(mu_L likewise with I), and E[p^2 | s, f, H] = mu_H(s, f) mu_H(s + 1, f) (two successes in a row).  Where a
half's mass underflows (a long run of failures under H, of successes under L) its posterior sits at the boundary,
so the predictive is 1/2 there.

**The constraint.** With r_k = H_k / L_k and e_j the elementary symmetric polynomials,

    P(x | m) = prod_k L_k e_m(r) / C(K, m),     P(k in S | x, m) = r_k e_{m-1}(r_{-k}) / e_m(r),

computed in the log domain by the recursion e_j(r_1..r_k) = e_j(r_1..r_{k-1}) + r_k e_{j-1}(r_1..r_{k-1}) over
prefixes and suffixes (the leave-one-out e_{m-1}(r_{-k}) = sum_i e_i(r_{<k}) e_{m-1-i}(r_{>k})): O(K^2) per run.
The member's evidence is the mean of P(x | m) over M, and arm k's posterior is the mixture
pi_k TruncBeta_H + (1 - pi_k) TruncBeta_L with pi_k = sum_m P(m | x) P(k in S | x, m).  Unlike the iid Beta
members, the arms' posteriors are coupled: once m arms look high, every other arm is read as low, and a run of
low arms makes the untried ones likely high.  The exact two-armed DP with this member is
:mod:`icrl_gym.training.split_prior`; the family Gittins index (:mod:`agents.bandit.family_gittins`) takes it as
one more member through the moments above.
"""

from __future__ import annotations

from math import lgamma

import numpy as np
from scipy.special import betainc, betaincc, betaln

ArmTables = tuple[np.ndarray, np.ndarray]
"""One arm's prior as tables over its counts (s, f), s, f <= n: the log-evidence and the predictive P(r = 1)."""

UNDERFLOW = 1e-280
"""A half's posterior mass below which its predictive is taken at the boundary, 1/2 (module docstring)."""


def half_uniform_arm(high: bool, max_count: int) -> ArmTables:
    """U[1/2, 1] (``high``) or U[0, 1/2]: log H(s, f) (or log L) and mu_H(s, f) (module docstring), s, f <= n."""
    s, f = np.arange(max_count + 1.0)[:, None], np.arange(max_count + 1.0)[None, :]

    def mass(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # P_{Beta(x, y)}(the half), from the upper tail for H
        return betaincc(x, y, 0.5) if high else betainc(x, y, 0.5)

    inside = mass(s + 1, f + 1)
    safe = np.maximum(inside, UNDERFLOW)
    pred = np.where(inside > UNDERFLOW, (s + 1) / (s + f + 2) * mass(s + 2, f + 1) / safe, 0.5)
    return betaln(s + 1, f + 1) + np.log(safe) + np.log(2.0), pred


def log_sum_exp(x: np.ndarray, axis: int) -> np.ndarray:
    """Log-sum-exp of x along ``axis``, -inf where every term is -inf (a numpy reduction: called every step)."""
    top = x.max(axis=axis, keepdims=True)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - shift).sum(axis=axis)) + np.squeeze(shift, axis=axis)


def log_elementary(log_r: np.ndarray) -> np.ndarray:
    """Log e_j(r_1..r_k) for every prefix k = 0..K and j = 0..K, shape (K + 1, B, K + 1), from log r (B, K)."""
    b, k_arms = log_r.shape
    out = np.full((k_arms + 1, b, k_arms + 1), -np.inf)
    out[0, :, 0] = 0.0
    for k in range(k_arms):
        out[k + 1] = out[k]
        out[k + 1, :, 1:] = np.logaddexp(out[k, :, 1:], out[k, :, :-1] + log_r[:, k, None])
    return out


class SplitMember:
    """The split member's evidence and per-arm moments from B runs' counts (module docstring), s, f <= ``max_count``."""

    def __init__(self, max_count: int) -> None:
        self.max_count = int(max_count)
        self.high, self.low = half_uniform_arm(True, max_count + 1), half_uniform_arm(False, max_count + 1)

    def high_probability(self, s: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The member's log-evidence log P(x) (B,) and pi_k = P(arm k high | x) (B, K) for counts ``s``, ``f``."""
        if s.max(initial=0) > self.max_count or f.max(initial=0) > self.max_count:
            raise ValueError(f"the split member was built for counts up to {self.max_count}")
        k_arms = s.shape[1]
        log_h, log_l = self.high[0][s, f], self.low[0][s, f]
        log_r = log_h - log_l
        prefix = log_elementary(log_r)  # prefix[k]: arms < k
        suffix = log_elementary(log_r[:, ::-1])  # suffix[k]: the last k arms
        sizes = sorted({k_arms // 2, (k_arms + 1) // 2})
        log_evidence, log_high = [], []
        for m in sizes:
            log_e = prefix[k_arms][:, m]  # (B,)
            log_evidence.append(
                log_l.sum(axis=1) + log_e - (lgamma(k_arms + 1) - lgamma(m + 1) - lgamma(k_arms - m + 1))
            )
            # log e_{m-1}(r_{-k}) = log sum_{i < m} e_i(r_{<k}) e_{m-1-i}(r_{>k}), every k at once: (K, B) -> (B, K)
            loo = (
                log_sum_exp(prefix[:k_arms, :, :m] + suffix[k_arms - 1 :: -1, :, m - 1 :: -1][:, :, :m], axis=2).T
                if m > 0
                else np.full((len(s), k_arms), -np.inf)
            )
            log_high.append(log_r + loo - log_e[:, None])
        ev = np.stack(log_evidence, axis=1) - np.log(len(sizes))  # (B, |M|)
        total = log_sum_exp(ev, axis=1)
        p_m = np.exp(ev - total[:, None])
        pi = sum(p_m[:, i, None] * np.exp(log_high[i]) for i in range(len(sizes)))
        return total, np.clip(pi, 0.0, 1.0)

    def moments(self, s: np.ndarray, f: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's posterior mean and second moment (B, K) under the member, given pi = P(high)."""
        mu_h, mu_l = self.high[1][s, f], self.low[1][s, f]
        second_h, second_l = mu_h * self.high[1][s + 1, f], mu_l * self.low[1][s + 1, f]
        return pi * mu_h + (1.0 - pi) * mu_l, pi * second_h + (1.0 - pi) * second_l
