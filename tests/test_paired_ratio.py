"""The paired ratio of means and its delta-method standard error, against a bootstrap and exact cases."""

from __future__ import annotations

import numpy as np
import pytest

from icrl_gym.data.crn import paired_ratio


def test_the_standard_error_matches_the_spread_of_the_ratio_over_fresh_samples():
    """Heavy-tailed paired samples (a shared instance difficulty plus each policy's own noise): the delta-method
    error of one sample of n runs is the spread of the ratio over 4,000 independent samples of n runs."""
    rng = np.random.default_rng(3)
    n = 500

    def draw() -> tuple[np.ndarray, np.ndarray]:
        shared = rng.lognormal(1.0, 0.8, n)
        return 1.1 * shared + rng.exponential(1.0, n), shared + rng.exponential(1.0, n)

    ratios = np.array([paired_ratio(*draw())[0] for _ in range(4000)])
    ses = np.array([paired_ratio(*draw())[1] for _ in range(200)])
    assert np.median(ses) == pytest.approx(ratios.std(), rel=0.1)
    # the pairing matters: the errors of the two means taken apart would be several times larger
    x, y = draw()
    unpaired = x.mean() / y.mean() * np.hypot(x.std() / x.mean(), y.std() / y.mean()) / np.sqrt(n)
    assert paired_ratio(x, y)[1] < 0.5 * unpaired


def test_exact_cases_and_refusals():
    y = np.array([1.0, 2.0, 4.0, 7.0])
    assert paired_ratio(3.0 * y, y) == pytest.approx((3.0, 0.0))
    ratio, se = paired_ratio(np.array([2.0, 0.0]), np.array([1.0, 1.0]))
    assert ratio == 1.0 and se == pytest.approx(np.std([1.0, -1.0], ddof=1) / np.sqrt(2))
    with pytest.raises(ValueError, match="paired 1-D"):
        paired_ratio(y, y[:3])
    with pytest.raises(ValueError, match="mean is 0"):
        paired_ratio(y, np.zeros(4))
