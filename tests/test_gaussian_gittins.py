"""The finite-horizon Gittins index of a Gaussian arm (``icrl_gym.estimators.gaussian_gittins``).

The table is checked against the calibration written out independently with scipy: at two pulls left the
value of playing on is a closed form, at three one numerical integral of it; against its own structure (more
pulls left never lower the index, more effective pulls raise it less, a larger table holds a smaller one);
against the torch reader the linear generalist uses; and against measured regret: told the prior, the index
beats Bayes-UCB told the same prior on a many-armed Gaussian bandit with a short horizon, where an index that
does not look at the steps left tries too many arms.
"""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, stats

from agents import make_agent
from agents.bandit.model_average import ModelAveragedGittins, ModelAveragedMOSS
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.estimators.gaussian_gittins import (
    N_RANGE,
    build_gaussian_gittins_table,
    gaussian_gittins_table,
)
from icrl_gym.models.linear_posterior import gittins_quantile


@pytest.fixture(scope="module")
def table():
    return build_gaussian_gittins_table(60)


def _two_left(delta: float, n: float) -> float:
    """U_2(delta, n) = max(0, delta + E max(0, delta + eps)), eps ~ N(0, 1 / (n (n + 1))), in closed form."""
    s = math.sqrt(1.0 / (n * (n + 1.0)))
    return max(0.0, delta + delta * stats.norm.cdf(delta / s) + s * stats.norm.pdf(delta / s))


def _root(q, n: float) -> float:
    """The width z = -delta* sqrt(n) where Q(delta*) = 0."""
    scale = 1.0 / math.sqrt(n)
    return -optimize.brentq(q, -12.0 * scale, 1.0 + scale, xtol=1e-12) * math.sqrt(n)


@pytest.mark.parametrize("n", [0.01, 0.3, 1.0, 4.0, 30.0])
def test_two_and_three_pulls_left_match_the_calibration_integrated_by_scipy(table, n):
    s = math.sqrt(1.0 / (n * (n + 1.0)))
    two = _root(lambda d: d + d * stats.norm.cdf(d / s) + s * stats.norm.pdf(d / s), n)

    def three(d: float) -> float:
        inner = integrate.quad(lambda e: _two_left(d + e, n + 1.0) * stats.norm.pdf(e / s) / s, -10 * s, 10 * s)
        return d + inner[0]

    got = table.width(np.array([n, n]), np.array([2, 3]))
    assert got[0] == pytest.approx(two, abs=6e-3)
    assert got[1] == pytest.approx(_root(three, n), abs=1e-2)
    assert table.width(np.array(n), np.array(1)) == 0.0  # the last pull is greedy


def test_the_width_grows_with_pulls_left_and_shrinks_with_effective_pulls(table):
    widths = table.widths[1:]
    assert (np.diff(widths, axis=0) >= -1e-9).all()
    assert (np.diff(widths, axis=1) <= 1e-2).all()  # up to the grid's interpolation noise
    assert widths[-1, 0] > 5 * widths[-1, -1] > 0
    # a fresh, uncertain arm with 60 pulls left: about 1.5 prior sds of optimism (Bayes-UCB's z_t would be 2.1
    # at t = 60 whatever the horizon)
    assert 1.2 < table.width(np.array(0.25), np.array(60)) < 1.8


def test_a_larger_table_holds_the_smaller_one_and_the_cache_keeps_the_largest(table):
    np.testing.assert_array_equal(build_gaussian_gittins_table(20).widths, table.widths[:21])
    assert gaussian_gittins_table(30).horizon >= 30
    large = gaussian_gittins_table(70)
    assert gaussian_gittins_table(10) is large


def test_bad_sizes_are_refused(table):
    with pytest.raises(ValueError, match="at least one pull left"):
        build_gaussian_gittins_table(0)
    with pytest.raises(ValueError, match="pulls left must lie in 0..60"):
        table.width(np.array(1.0), np.array(61))


def test_the_torch_reader_is_the_table(table):
    rng = np.random.default_rng(0)
    sd = rng.uniform(0.05, 3.0, (3, 5, 7))
    sigma = rng.uniform(0.1, 2.0, (3, 5))
    steps = torch.as_tensor(rng.integers(0, 60, (3, 5)))
    horizon = torch.full((3, 5), 60)
    got = gittins_quantile(torch.as_tensor(sd), torch.as_tensor(sigma), steps, horizon).numpy()
    effective = np.clip((sigma[..., None] / sd) ** 2, *N_RANGE)
    left = np.broadcast_to((60 - steps.numpy())[..., None], sd.shape)
    np.testing.assert_allclose(got, gaussian_gittins_table(60).width(effective, left), rtol=1e-12, atol=1e-14)


def _play(policy: str, runs: int = 600, arms: int = 30, horizon: int = 60, sigma: float = 0.5) -> np.ndarray:
    """Regret per run of an index told the N(0, 1) prior of the means, on shared instances and noise."""
    rng = np.random.default_rng(11)
    means = rng.normal(size=(runs, arms))
    noise = sigma * rng.normal(size=(runs, horizon))
    counts, sums, regret = np.zeros((runs, arms)), np.zeros((runs, arms)), np.zeros(runs)
    table = gaussian_gittins_table(horizon)
    rows = np.arange(runs)
    for t in range(horizon):
        precision = 1.0 + counts / sigma**2
        mean, sd = sums / sigma**2 / precision, precision**-0.5
        if policy == "gittins":
            width = table.width(sigma**2 / sd**2, np.full(sd.shape, horizon - t))
        else:  # Bayes-UCB's quantile 1 - 1 / (t + 1)
            width = np.full(sd.shape, max(stats.norm.ppf(1.0 - 1.0 / (t + 1)), 0.0))
        a = np.argmax(mean + width * sd, 1)
        counts[rows, a] += 1
        sums[rows, a] += means[rows, a] + noise[:, t]
        regret += means.max(1) - means[rows, a]
    return regret


def test_the_agent_reads_the_table_on_one_hot_arms_and_plays_moss_elsewhere():
    rng = np.random.default_rng(5)
    means = rng.normal(size=6)
    gittins, moss = ModelAveragedGittins(), ModelAveragedMOSS(scale=1.0)
    gittins.reset(dim=6, num_actions=6, horizon=40, noise_std=0.5, num_arms=6)
    for _ in range(7):
        a = int(gittins.act(np.eye(6)))
        gittins.update(a, float(means[a] + 0.5 * rng.normal()))
    mean, sd = gittins.arm_posterior(np.eye(6)[None])
    width = gaussian_gittins_table(33).width(0.25 / sd**2, np.full(sd.shape, 33))  # 40 - 7 pulls left
    np.testing.assert_allclose(gittins.index(np.eye(6)[None]), mean + width * sd, rtol=1e-12)
    arms = rng.uniform(-1, 1, (5, 3))
    for agent in (gittins, moss):
        agent.reset(dim=3, num_actions=5, horizon=40, noise_std=0.5)
        for step in range(4):
            agent.update(int(agent.act(arms)), 0.3 * step)
    np.testing.assert_allclose(gittins.index(arms[None]), moss.index(arms[None]), rtol=1e-12)


def test_uninformed_on_many_arms_it_loses_less_than_the_moss_index():
    """30 Gaussian arms with N(0, 1) means, T = 60, sigma = 0.5: the grid's posterior with either width."""
    spec = linear_bandit_spec(30, 30, 60, 0.5, arms="one_hot", prior="gaussian")
    gittins = evaluate_regret(spec, make_agent("model_averaged_gittins"), 300, seed=12).sum(1)
    moss = evaluate_regret(spec, make_agent({"name": "model_averaged_moss", "scale": 1.0}), 300, seed=12).sum(1)
    diff = moss - gittins
    assert diff.mean() > 3 * diff.std() / math.sqrt(diff.size)
    assert make_agent(make_agent("model_averaged_gittins").config()).config()["scale"] == 1.0


def test_told_the_prior_the_index_beats_bayes_ucb_on_many_arms_and_a_short_horizon():
    gittins, bayes = _play("gittins"), _play("bayes_ucb")
    diff = gittins - bayes
    assert diff.mean() < -4 * diff.std() / math.sqrt(diff.size)
