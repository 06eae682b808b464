"""The paired ratios of means and of percentiles: the errors against fresh samples, exact cases, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from icrl_gym.data.crn import paired_difference, paired_quantile_ratio, paired_ratio


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


def test_the_quantile_ratio_interval_covers_the_true_ratio_and_matches_its_spread():
    """Log-normal pairs sharing an instance term: x = exp(0.1 + 0.8 z0 + 0.3 z1), y = exp(0.8 z0 + 0.3 z2), whose
    99th percentiles are exp(0.1 + s z_0.99) and exp(s z_0.99), so the true ratio is exp(0.1) whatever s.  Over
    200 fresh samples of 1,000 runs the 90% interval holds it at least about as often as its level (the
    percentile bootstrap of a tail quantile is a little conservative), and its width is the spread of the ratio
    itself over those samples, to within its discreteness."""
    rng = np.random.default_rng(5)
    truth, hits, widths, ratios = np.exp(0.1), 0, [], []
    for i in range(200):
        z = rng.standard_normal((3, 1000))
        x, y = np.exp(0.1 + 0.8 * z[0] + 0.3 * z[1]), np.exp(0.8 * z[0] + 0.3 * z[2])
        ratio, low, high = paired_quantile_ratio(x, y, resamples=400, seed=i)
        assert low <= ratio <= high
        hits += low <= truth <= high
        widths.append(high - low)
        ratios.append(ratio)
    assert 0.85 <= hits / 200 <= 0.99
    spread = np.subtract(*np.percentile(ratios, [95, 5]))
    assert 0.8 * spread <= np.median(widths) <= 1.4 * spread
    # the interval is that of the tail: far wider than the paired ratio of the means' error on the same runs
    assert np.median(widths) > 4 * paired_ratio(x, y)[1]


def test_quantile_ratio_exact_cases_and_refusals():
    y = np.arange(1.0, 101.0)
    assert paired_quantile_ratio(2.0 * y, y) == pytest.approx((2.0, 2.0, 2.0))
    ratio, low, high = paired_quantile_ratio(y[::-1].copy(), y, q=50.0)  # the same sample, paired in reverse
    assert ratio == pytest.approx(1.0) and low < 1.0 < high
    assert paired_quantile_ratio(y + 1.0, y, seed=7) == paired_quantile_ratio(y + 1.0, y, seed=7)
    with pytest.raises(ValueError, match="paired 1-D"):
        paired_quantile_ratio(y, y[:3])
    with pytest.raises(ValueError, match="0 < q < 100"):
        paired_quantile_ratio(y, y, q=100.0)
    with pytest.raises(ValueError, match="percentile is 0"):
        paired_quantile_ratio(y, np.zeros(100))


def test_a_long_sample_is_resampled_in_blocks_without_changing_the_interval():
    """50,000 runs are resampled in blocks of 80 (a few million values at a time): the interval is the one that
    a single draw of all 200 resamples from the same generator gives."""
    rng = np.random.default_rng(9)
    x, y = rng.exponential(size=50_000), rng.exponential(size=50_000)
    idx = np.random.default_rng(4).integers(0, len(x), size=(200, len(x)))
    boot = np.percentile(x[idx], 99, axis=1) / np.percentile(y[idx], 99, axis=1)
    expected = (np.percentile(x, 99) / np.percentile(y, 99), *np.percentile(boot, [5, 95]))
    assert paired_quantile_ratio(x, y, resamples=200, seed=4) == pytest.approx(expected, rel=1e-12)


def test_the_difference_of_two_policies_has_the_spread_of_its_estimate_and_not_of_the_two_ratios():
    """Three rows on shared runs (the reference and two policies that differ by 2% plus their own noise): the
    delta-method error of (mean(a) - mean(b)) / mean(r) from one sample is its spread over 4,000 fresh samples, and
    it is several times smaller than the two ratios' errors combined, which count the instances' spread twice."""
    rng = np.random.default_rng(4)
    n = 500

    def draw() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shared = rng.lognormal(1.0, 0.8, n)
        r = shared + rng.exponential(0.5, n)
        return 1.10 * shared + rng.normal(0.0, 0.05, n), 1.08 * shared + rng.normal(0.0, 0.05, n), r

    diffs = np.array([paired_difference(*draw())[0] for _ in range(4000)])
    ses = np.array([paired_difference(*draw())[1] for _ in range(200)])
    assert np.median(ses) == pytest.approx(diffs.std(), rel=0.1)
    mean_shared = np.exp(1.0 + 0.8**2 / 2)  # the lognormal mean
    assert diffs.mean() == pytest.approx(0.02 * mean_shared / (mean_shared + 0.5), abs=4 * diffs.std() / np.sqrt(4000))
    a, b, r = draw()
    apart = np.hypot(paired_ratio(a, r)[1], paired_ratio(b, r)[1])
    assert paired_difference(a, b, r)[1] < 0.25 * apart


def test_a_difference_of_exact_cases():
    r = np.array([1.0, 2.0, 4.0, 7.0])
    assert paired_difference(r, r, r) == (0.0, 0.0)
    assert paired_difference(r + 0.5 * r, r, r) == pytest.approx((0.5, 0.0))
    with pytest.raises(ValueError, match="paired 1-D"):
        paired_difference(r, r[:3], r)
