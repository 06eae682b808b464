"""Incremental sufficient statistics shared by the bandit algorithms (one estimator, written once).

- :class:`RidgeStatistics`: the regularised Gram matrix V_t = reg * I + sum_{j<t} a_j a_j^T kept as
  its inverse by Sherman-Morrison rank-one updates, and b_t = sum_{j<t} r_j a_j, so the ridge
  estimate w_t = V_t^{-1} b_t and the widths a^T V_t^{-1} a cost O(d^2) per step, never a solve.
  LinUCB (reg = lambda) and linear Thompson sampling (reg = sigma^2 / lambda) both use it.
- :class:`ArmStatistics`: running pull counts N_k and reward sums S_k per arm index, used by the
  empirical mean, UCB and Beta-Bernoulli Thompson sampling.
- :class:`TransitionCounts`: the tabular-MDP counts N_h(s, a, s'), N_h(s, a) and reward sums,
  pooled over h for stationary MDPs, used by UCB-VI and PSRL.
"""

from __future__ import annotations

import numpy as np


class RidgeStatistics:
    """Ridge-regression statistics of B runs: V^{-1} (B, d, d) and b (B, d)."""

    def __init__(
        self, batch_size: int, dim: int, reg: float | np.ndarray, center: np.ndarray | float | None = None
    ) -> None:
        """``center`` m shrinks the estimate towards m instead of 0: b starts at reg * m.

        ``reg`` is a number (V_0 = reg I) or an array broadcastable to (B, d), the diagonal of V_0 per run
        (a prior N(m, diag(v)) per run with noise s2 has reg = s2 / v); ``center`` broadcasts to (B, d).
        """
        diag = np.asarray(reg, dtype=np.float64)
        if not (diag > 0).all():
            raise ValueError(f"the ridge regulariser must be > 0, got {reg}")
        try:
            diag = np.broadcast_to(diag, (batch_size, dim))
            center_rows = np.broadcast_to(0.0 if center is None else center, (batch_size, dim))
        except ValueError:
            raise ValueError(
                f"the ridge regulariser {np.shape(diag)} and centre {np.shape(np.asarray(center))} must broadcast to "
                f"the (batch, dim) = {(batch_size, dim)} of the runs"
            ) from None
        self.reg = reg
        self.gram_inv = np.zeros((batch_size, dim, dim))
        self.gram_inv[:, np.arange(dim), np.arange(dim)] = 1.0 / diag
        self.target = diag * center_rows

    def update(self, x: np.ndarray, r: np.ndarray) -> None:
        """Add one observation (x (B, d), r (B,)): Sherman-Morrison on V^{-1}.

        (V + x x^T)^{-1} = V^{-1} - (V^{-1} x)(V^{-1} x)^T / (1 + x^T V^{-1} x).
        """
        vx = np.einsum("bij,bj->bi", self.gram_inv, x)  # (B, d); V^{-1} is symmetric
        denom = 1.0 + np.einsum("bi,bi->b", x, vx)
        self.gram_inv -= vx[:, :, None] * vx[:, None, :] / denom[:, None, None]
        self.target += r[:, None] * x

    def estimate(self) -> np.ndarray:
        """Ridge estimate w = V^{-1} b, shape (B, d)."""
        return np.einsum("bij,bj->bi", self.gram_inv, self.target)

    def widths(self, action_sets: np.ndarray) -> np.ndarray:
        """Squared widths a_k^T V^{-1} a_k of every arm, shape (B, A)."""
        va = np.matmul(action_sets, self.gram_inv)  # (B, A, d)
        return np.maximum((va * action_sets).sum(axis=-1), 0.0)


def gaussian_index(
    stats: RidgeStatistics, action_sets: np.ndarray, noise_std: float | np.ndarray, z: float | np.ndarray
) -> np.ndarray:
    """The Gaussian-posterior index <a_k, mu_t> + z sigma ||a_k||_{V_t^{-1}} of every arm, (B, A).

    With ``stats`` centred at the prior mean m and regularised by sigma^2 / v (prior N(m 1, v I),
    noise N(0, sigma^2)), mu_t = V_t^{-1} b_t is the posterior mean and sigma^2 a^T V_t^{-1} a the
    posterior variance of <a, w*>: z = 0 is the greedy posterior mean, a constant z the trainer's
    expert, z = Phi^{-1}(level) Bayes-UCB.  ``noise_std`` is one sigma or one per run (B,).  An arm
    of zero width gets no bonus (also for z = -inf).
    """
    mean = np.einsum("bad,bd->ba", action_sets, stats.estimate())
    width = np.sqrt(stats.widths(action_sets))
    scale = z * np.asarray(noise_std)
    scale = scale[:, None] if np.ndim(scale) == 1 else scale
    with np.errstate(invalid="ignore"):
        return mean + np.where(width > 0, scale * width, 0.0)


class ArmStatistics:
    """Pull counts N_k and reward sums S_k per arm of B runs, each (B, A)."""

    def __init__(self, batch_size: int, num_actions: int) -> None:
        self.counts = np.zeros((batch_size, num_actions))
        self.sums = np.zeros((batch_size, num_actions))
        self._rows = np.arange(batch_size)

    def update(self, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add one pull per run."""
        self.counts[self._rows, actions] += 1.0
        self.sums[self._rows, actions] += rewards

    def means(self) -> np.ndarray:
        """Empirical means S_k / N_k; NaN for arms never pulled."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.maximum(self.counts, 1.0), np.nan)


class TransitionCounts:
    """Tabular-MDP counts of B runs, pooled over h or kept per step h.

    ``n_sas`` N_h(s, a, s') (B, H', S, A, S), ``n_sa`` N_h(s, a) and ``reward_sum`` (B, H', S, A),
    with H' = 1 when ``pooled`` (one count for every h) and H' = H otherwise.
    """

    def __init__(self, batch_size: int, horizon: int, num_states: int, num_actions: int, pooled: bool) -> None:
        hs = 1 if pooled else horizon
        self.pooled = pooled
        self.n_sas = np.zeros((batch_size, hs, num_states, num_actions, num_states))
        self.n_sa = np.zeros((batch_size, hs, num_states, num_actions))
        self.reward_sum = np.zeros((batch_size, hs, num_states, num_actions))
        self._rows = np.arange(batch_size)

    def index(self, h: int) -> int:
        """The slot of step h in the count arrays."""
        return 0 if self.pooled else h

    def update(self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray):
        """Add (h, s, a, r, s') of every run; ``next_states`` is -1 after step H (N_H(s, a, s') = 0)."""
        rows, i = self._rows, self.index(h)
        self.n_sa[rows, i, states, actions] += 1
        self.reward_sum[rows, i, states, actions] += rewards
        has_next = next_states >= 0
        self.n_sas[rows[has_next], i, states[has_next], actions[has_next], next_states[has_next]] += 1
