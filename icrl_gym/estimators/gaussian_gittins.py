"""The finite-horizon Gittins index of a Gaussian arm with known noise, as a table in posterior units.

An arm whose mean has the posterior N(m, s^2), rewards N(mean, sigma^2), with r pulls left (this one
included) has the index m + s z(n, r), where n = sigma^2 / s^2 is its effective number of pulls.  The
index is found by calibration against a retirement reward lambda per step (Gittins, Glazebrook & Weber,
"Multi-armed Bandit Allocation Indices", ch. 7; finite horizon: Lattimore, "Regret analysis of the
finite-horizon Gittins index strategy for multi-armed bandits", COLT 2016).  In units of sigma
(sigma = 1) and with delta = m - lambda, the value of being free to play the arm for up to r more pulls
(stopping at will) in excess of retiring at once is

    U_r(delta, n) = max(0, Q_r(delta, n)),   Q_r(delta, n) = delta + E U_{r-1}(delta + eps, n + 1),
    eps ~ N(0, 1 / n - 1 / (n + 1)),          U_0 = 0,

since one more pull moves the posterior mean by eps and raises the precision by one.  The retirement
reward drops out (U depends on m and lambda only through delta), so one backward induction over r
serves every lambda: the index is lambda* = m - delta*, where Q_r(delta*, n) = 0, and in posterior sds
z(n, r) = -delta* sqrt(n).  The index does not depend on sigma, m or the game's horizon beyond r, so a
table z(n, r) over n serves every Gaussian arm; with r = 1 it is 0 (the last pull is greedy).

The induction keeps U_r on a grid of n (log-spaced, :data:`N_RANGE`) times a grid of delta in the
posterior sds of each n (:data:`Z_RANGE`).  U_{r-1}(., n + 1) is read between the two grid rows around
n + 1 (linear in log n) as the piecewise-linear function through its grid values, 0 below the grid and
U_{r-1}(top) + (r - 1)(delta - top) above it (the value of never retiring), and its expectation over eps is
exact for that function: each segment contributes a partial moment of the normal law.  So one step of the
induction is a fixed linear map per n, applied as a batched matrix product.  A table built for R pulls
holds, for every r <= R, the numbers a table built for r holds, so the largest one built serves every
smaller horizon (:func:`gaussian_gittins_table`); a build costs about 12 s of one core per 1,000 pulls.

Accuracy, measured against the calibration integrated by scipy and against grids of twice and four
times as many delta points: at r = 2 and 3 within 0.006 and 0.01 sd of scipy's values for n <= 30
(the tests), and up to r = 300 within 0.01 sd for n <= 10 and 0.03 sd at n = 100.  Where n is large the one-pull
move of the mean (sd about 1 / sqrt(n) posterior sds) is finer than the grid, and the repeated interpolation
widens the index: at n = 1,000 and r = 300 by about 0.08 sd (0.43 against 0.35 on the finest grid).
Such an arm's sd is sigma / 30, so its index moves by 0.003 sigma.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

N_RANGE = (1e-3, 1e5)
"""Smallest and largest effective pulls n = sigma^2 / s^2 of the grid (outside: the edge's width)."""
N_POINTS = 65
"""Points of the log-spaced n grid (eight per decade)."""
Z_RANGE = 8.0
"""The delta grid spans +- this many posterior sds of each n (the largest index up to r = 1,000 is 2.44 of them)."""
Z_POINTS = 257
"""Points of the delta grid."""


class GaussianGittinsTable:
    """z(n, r) (R + 1, N): the Gittins index of a Gaussian arm in posterior sds, r = 0..R pulls left."""

    def __init__(self, log_n: np.ndarray, widths: np.ndarray) -> None:
        if widths.ndim != 2 or widths.shape[1] != log_n.shape[0]:
            raise ValueError(f"a table over {log_n.shape[0]} values of n needs (R + 1, {log_n.shape[0]}) widths")
        self.log_n, self.widths = log_n, widths

    @property
    def horizon(self) -> int:
        """R, the most pulls left that the table covers."""
        return self.widths.shape[0] - 1

    def width(self, effective_pulls: np.ndarray, left: np.ndarray) -> np.ndarray:
        """z(n, r) for arrays of n = sigma^2 / s^2 > 0 and integer r in 0..R that broadcast together.

        Linear in log n between grid points; n outside :data:`N_RANGE` takes the edge's value.
        """
        left = np.asarray(left)
        if left.size and (left.min() < 0 or left.max() > self.horizon):
            raise ValueError(f"pulls left must lie in 0..{self.horizon} for this table, got {left.min()}..{left.max()}")
        lo, frac = _grid_position(self.log_n, np.asarray(effective_pulls))
        r = left.astype(np.int64)
        return self.widths[r, lo] * (1.0 - frac) + self.widths[r, lo + 1] * frac


def _grid_position(log_n: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where ``values`` fall on the equally spaced grid ``log_n`` of log n, clamped to its ends.

    The lower grid point's index and the upper one's weight, for linear interpolation in log n.
    """
    pos = np.clip((np.log(values) - log_n[0]) / (log_n[1] - log_n[0]), 0.0, log_n.size - 1.0)
    lo = np.minimum(pos.astype(np.int64), log_n.size - 2)
    return lo, pos - lo


def _expectation_operator(mean: np.ndarray, sd: np.ndarray, knots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E f(x), x ~ N(mean, sd^2), of the piecewise-linear f through (knots, values), as linear maps of the values.

    ``mean`` (N, Z) per row of ``knots`` (N, K) (equally spaced, step h per row) and ``sd`` (N,); f is 0 below
    the first knot and rises with slope s past the last: E f = weights @ values + tail s, with weights (N, Z, K)
    and tail = E (x - last)^+ (N, Z).  Exact: each segment's share is a partial moment of the normal law.
    """
    h = (knots[:, 1] - knots[:, 0])[:, None, None]
    sd3 = sd[:, None, None]
    alpha = (knots[:, None, :] - mean[:, :, None]) / sd3  # (N, Z, K)
    cdf, pdf = ndtr(alpha), np.exp(-0.5 * alpha**2) / np.sqrt(2.0 * np.pi)
    inside = cdf[..., 1:] - cdf[..., :-1]  # P(segment m) (N, Z, K - 1)
    # L_m = E[(x - knot_m) 1{segment m}] = (mean - knot_m) P_m + sd (pdf_m - pdf_m+1)
    first = -alpha[..., :-1] * sd3 * inside + sd3 * (pdf[..., :-1] - pdf[..., 1:])
    weights = np.zeros(alpha.shape)
    weights[..., 1:] += first / h  # rising half of each knot's hat, on the segment below it
    weights[..., :-1] += inside - first / h  # falling half, on the segment above it
    above = 1.0 - cdf[..., -1]
    weights[..., -1] += above  # f = f(last) + s (x - last) beyond the last knot
    tail = -alpha[..., -1] * sd3[..., 0] * above + sd3[..., 0] * pdf[..., -1]
    return weights, tail


def build_gaussian_gittins_table(horizon: int) -> GaussianGittinsTable:
    """The table z(n, r) for r = 0..``horizon`` by the backward induction of the module docstring."""
    if horizon < 1:
        raise ValueError(f"a Gittins table needs at least one pull left, got horizon={horizon}")
    log_n = np.linspace(np.log(N_RANGE[0]), np.log(N_RANGE[1]), N_POINTS)
    n = np.exp(log_n)
    z = np.linspace(-Z_RANGE, Z_RANGE, Z_POINTS)
    dz = z[1] - z[0]
    delta = z[None, :] / np.sqrt(n)[:, None]  # (N, Z): delta on each n's grid
    step_sd = np.sqrt(1.0 / (n * (n + 1.0)))
    # n + 1 on the log grid (clamped at its top): its two neighbours and the weight of the upper one
    lo, frac = _grid_position(log_n, n + 1.0)
    operators = []
    for neighbour, share in ((lo, 1.0 - frac), (lo + 1, frac)):
        weights, tail = _expectation_operator(delta, step_sd, delta[neighbour])
        operators.append((neighbour, weights * share[:, None, None], tail * share[:, None]))
    widths = np.zeros((horizon + 1, N_POINTS))
    value = np.zeros((N_POINTS, Z_POINTS))
    every = np.arange(N_POINTS)
    for r in range(1, horizon + 1):
        q = delta.copy()
        if r > 1:
            for neighbour, weights, tail in operators:
                q += np.matmul(weights, value[neighbour][..., None])[..., 0] + (r - 1) * tail
        first = np.argmax(q > 0.0, axis=1)  # Q rises in delta: its first positive grid point
        if (first == 0).any():
            raise ArithmeticError(f"the delta grid does not contain the index at r={r}; widen Z_RANGE")
        q0, q1 = q[every, first - 1], q[every, first]
        widths[r] = -(z[first - 1] + dz * (-q0) / (q1 - q0))
        value = np.maximum(q, 0.0)
    return GaussianGittinsTable(log_n, widths)


_TABLE: list[GaussianGittinsTable] = []
"""The largest table built in this process."""


def gaussian_gittins_table(horizon: int) -> GaussianGittinsTable:
    """A table covering ``horizon`` pulls left: the largest one built so far if it does, else a new one."""
    if not _TABLE or _TABLE[0].horizon < horizon:
        _TABLE[:] = [build_gaussian_gittins_table(horizon)]
    return _TABLE[0]
