"""Common random numbers: N runs in batches of B, seeded so that every algorithm meets the same instances.

Every loop that runs algorithms on fresh instances (collection, evaluation, diagnostics) goes
through :func:`crn_batches`, one convention for all of them.  Under ``seed``, batch i holds the runs
[i B, min((i + 1) B, N)) and draws its randomness from three places:

- the environment (instances and reward/transition noise): ``np.random.default_rng([seed, i])``;
- the acting algorithm Alg_0: ``np.random.default_rng([seed, i, 1])``;
- the j-th observer, an algorithm that sees the actor's history without acting (an expert or
  posterior that labels it, a model compared with it, a component of another mixture):
  child j of the actor's seed, ``SeedSequence([seed, i, 1], spawn_key=(j,))`` -- what
  ``actor_rng.spawn`` hands out, but fixed whatever the actor does with its own generator.

So two algorithms run with one seed and batch size face the same instances and the same noise, and
their paired regret differences have the variance of the algorithms alone.  The instances depend
on B (a batch is drawn at once), so comparisons keep B fixed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CRNBatch:
    """Batch ``index`` of a common-random-numbers loop: the runs ``rows`` and their generators."""

    index: int
    """Batch number i."""
    rows: slice
    """The runs [start, stop) of the batch among all N."""
    seed: int
    """The loop's seed."""
    env_rng: np.random.Generator
    """Instances and noise: ``default_rng([seed, i])``."""
    agent_rng: np.random.Generator
    """The acting algorithm: ``default_rng([seed, i, 1])``."""

    @property
    def size(self) -> int:
        """Number of runs B_i in the batch (the last one may be smaller)."""
        return self.rows.stop - self.rows.start

    def observer_rng(self, j: int = 0) -> np.random.Generator:
        """Generator of observer ``j``: child j of the actor's seed sequence [seed, i, 1]."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, self.index, 1], spawn_key=(j,)))


def crn_batches(num_runs: int, batch_size: int, seed: int = 0, first: int = 0) -> Iterator[CRNBatch]:
    """The batches of ``num_runs`` runs in groups of ``batch_size`` under ``seed`` (module docstring).

    ``first`` numbers the batches from ``first`` on (their generators are those of batches
    ``first``, ``first`` + 1, ... of a longer loop; the rows still count from 0): a slice of a
    sweep, batch i played alone with ``first=i``, meets exactly the instances and noise it meets in
    the whole loop, so slices played apart and joined in order equal the whole.
    """
    if num_runs < 1 or batch_size < 1 or first < 0:
        raise ValueError(
            f"need num_runs >= 1, batch_size >= 1 and first >= 0, got {num_runs}, {batch_size} and {first}"
        )
    for k, start in enumerate(range(0, num_runs, batch_size)):
        i = first + k
        yield CRNBatch(
            index=i,
            rows=slice(start, min(start + batch_size, num_runs)),
            seed=seed,
            env_rng=np.random.default_rng([seed, i]),
            agent_rng=np.random.default_rng([seed, i, 1]),
        )


def _paired_samples(numerator: np.ndarray, denominator: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two samples as float arrays, checked to be 1-D, paired by run and at least 2 runs long."""
    x, y = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(f"need two paired 1-D samples of at least 2 runs, got shapes {x.shape} and {y.shape}")
    return x, y


def paired_ratio(numerator: np.ndarray, denominator: np.ndarray) -> tuple[float, float]:
    """The ratio of two means over the same runs, R = mean(x) / mean(y), and its standard error.

    The ``numerator`` x and the ``denominator`` y hold one number per run, paired by run (e.g. two algorithms'
    total regrets under common random numbers).  The delta method for a ratio of means gives
    Var(R) ~= Var(x_i - R y_i) / (n mean(y)^2), whose pairing removes what the two share (the instance's
    difficulty), so the error is that of the comparison, not of either mean alone.
    """
    x, y = _paired_samples(numerator, denominator)
    y_mean = float(y.mean())
    if y_mean == 0.0:
        raise ValueError("the denominator's mean is 0: the ratio is undefined")
    ratio = float(x.mean()) / y_mean
    return ratio, float((x - ratio * y).std(ddof=1) / (np.sqrt(len(x)) * abs(y_mean)))


def paired_difference(first: np.ndarray, second: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """The difference of two policies' means over the same runs in units of a reference's mean, and its s.e.

    D = (mean(a) - mean(b)) / mean(r) for per-run totals a, b and r paired by run (three rows of one draw under
    common random numbers): how far apart two policies sit on a ratio-to-reference scale.  It is the
    :func:`paired_ratio` of the per-run differences a_i - b_i to r, so its error is that of the comparison itself,
    with what the two policies share on each run taken out; combining their two ratios' errors as if independent
    would count that shared part twice.
    """
    a, b = _paired_samples(first, second)
    return paired_ratio(a - b, reference)


def paired_quantile_ratio(
    numerator: np.ndarray,
    denominator: np.ndarray,
    q: float = 99.0,
    resamples: int = 2000,
    level: float = 0.9,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The ratio of two q-th percentiles over the same runs and its paired bootstrap interval (ratio, low, high).

    A tail line such as "p99 at most 1.5x the reference's" rests on the tenth largest of 1,000 runs, which moves
    far more from draw to draw than a mean.  The interval resamples the runs with replacement, each run's pair
    (x_i, y_i) together so that the instance they share stays shared, recomputes percentile_q(x*) /
    percentile_q(y*) for each of ``resamples`` resamples and takes the central ``level`` of them (the percentile
    bootstrap; Efron and Tibshirani 1993, ch. 13).  ``seed`` fixes the resamples, so a table is reproducible.
    """
    x, y = _paired_samples(numerator, denominator)
    if not 0.0 < q < 100.0 or not 0.0 < level < 1.0 or resamples < 1:
        raise ValueError(f"need 0 < q < 100, 0 < level < 1 and resamples >= 1, got {q}, {level} and {resamples}")
    y_q = float(np.percentile(y, q))
    if y_q <= 0.0:
        raise ValueError(f"the denominator's {q:g}th percentile is {y_q:g}: the ratio is undefined")
    rng, boot = np.random.default_rng(seed), np.empty(resamples)
    chunk = max(1, 4_000_000 // len(x))  # resamples per block: a few million values at a time, whatever N
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, len(x), size=(min(chunk, resamples - start), len(x)))
        boot[start : start + len(idx)] = np.percentile(x[idx], q, axis=1) / np.maximum(
            np.percentile(y[idx], q, axis=1), 1e-300
        )
    tail = 50.0 * (1.0 - level)
    low, high = np.percentile(boot, [tail, 100.0 - tail])
    return float(np.percentile(x, q)) / y_q, float(low), float(high)
