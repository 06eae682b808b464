"""The family Gittins index: the lattice reader, the mixture's moments, the one-member case and its regret."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import betaln

import icrl_gym  # noqa: F401  (registers the environments)
from agents import make_agent
from agents.bandit.bernoulli_bayes_optimal import FamilyPredictive
from agents.bandit.family_gittins import BETA_FAMILY, FamilyGittinsIndex, family_moments, matched_beta
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditPrior
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.estimators.gittins import BetaGittins, gittins_table


@pytest.fixture(scope="module")
def lattice() -> BetaGittins:
    return BetaGittins.build(40)


@pytest.mark.parametrize("prior", [(2.0, 5.0), (0.5, 2.0), (5.0, 0.5), (1.0, 1.0)])
def test_lattice_points_are_the_told_tables(lattice, prior):
    """Beta(a0 + s, b0 + f) for integer counts is a lattice point: the value of prior (a0, b0)'s own table."""
    table = gittins_table(40, *prior)
    for s, f, m in [(0, 0, 20), (3, 4, 10), (10, 2, 5), (0, 7, 1), (1, 0, 25)]:
        got = lattice.index(np.array(prior[0] + s), np.array(prior[1] + f), m)
        assert got == pytest.approx(float(table.lookup(s, f, m)), abs=1e-6)


def test_between_lattice_points_the_index_is_monotone(lattice):
    """G grows with alpha and falls with beta; the interpolated values keep that order between lattice points."""
    alphas = np.linspace(0.5, 6.0, 45)
    row = lattice.index(alphas, np.full_like(alphas, 3.0), 15)
    assert np.all(np.diff(row) > 0)
    betas = np.linspace(0.5, 6.0, 45)
    col = lattice.index(np.full_like(betas, 3.0), betas, 15)
    assert np.all(np.diff(col) < 0)


def test_a_posterior_beyond_the_tables_keeps_its_mean(lattice):
    """Pseudo-counts past the tables' room (11 at N = 40 with 30 pulls left) are scaled down to it, keeping
    the mean 3/4: Beta(300, 100) is read as Beta(8.25, 2.75), not refused."""
    value = lattice.index(np.array(300.0), np.array(100.0), 30)
    assert value == pytest.approx(float(lattice.index(np.array(8.25), np.array(2.75), 30)))
    assert 0.75 < value < 0.9
    with pytest.raises(IndexError, match="pulls left"):
        lattice.index(np.array(1.0), np.array(1.0), 41)


@pytest.mark.parametrize("power", [1.0, 0.7])
def test_family_moments_match_the_mixture_by_quadrature(power):
    """Mean and variance of sum_j w_j Beta(a_j + s, b_j + f), w_j ∝ L_j^eta from every arm's counts (eta = 1: the
    posterior; 0.7: tempered), by slow direct sums."""
    priors = np.array(BETA_FAMILY)
    model = FamilyPredictive(priors, np.ones(len(priors)), 50)
    s = np.array([[3, 0, 7]])
    f = np.array([[1, 2, 0]])
    mean, var = family_moments(model, s, f, power)
    log_w = power * np.array(
        [sum(betaln(a + s[0, k], b + f[0, k]) - betaln(a, b) for k in range(3)) for a, b in priors]
    )
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    for k in range(3):

        def density(p: float, k: int = k) -> float:
            return sum(wj * stats.beta.pdf(p, a + s[0, k], b + f[0, k]) for wj, (a, b) in zip(w, priors, strict=True))

        m1 = integrate.quad(lambda p: p * density(p), 0, 1, limit=200)[0]
        m2 = integrate.quad(lambda p: p * p * density(p), 0, 1, limit=200)[0]
        assert mean[0, k] == pytest.approx(m1, rel=1e-6)
        assert var[0, k] == pytest.approx(m2 - m1**2, rel=1e-5)


def test_matched_beta_inverts_the_moments():
    alpha, beta = matched_beta(
        *family_moments(FamilyPredictive(np.array([[2.0, 5.0]]), np.ones(1), 10), np.array([[3]]), np.array([[4]]))
    )
    assert alpha[0, 0] == pytest.approx(5.0) and beta[0, 0] == pytest.approx(9.0)


def test_a_one_member_family_plays_as_gittins_told_that_prior():
    """With the family {Beta(2, 5)} the index is Gittins's for that prior: the same actions on the same bandits."""
    spec = bernoulli_bandit_spec(num_arms=4, horizon=30, prior=BanditPrior.BETA, prior_a=2.0, prior_b=5.0)
    told = make_agent({"name": "gittins", "prior_a": 2.0, "prior_b": 5.0})
    family = make_agent({"name": "family_gittins", "hyperprior": [[2.0, 5.0]]})
    a = evaluate_regret(spec, told, 64, seed=3, batch_size=64)
    b = evaluate_regret(spec, family, 64, seed=3, batch_size=64)
    np.testing.assert_allclose(a, b)


def test_it_infers_a_concentrated_prior_it_is_not_told():
    """Under Beta(5, 1/2) means (K = 5, T = 100, 300 runs) the family index, told nothing, stays within 1.3x of
    Gittins told the prior, where Gittins told U[0, 1] pays 1.5x or more (the prior's cost it avoids)."""
    spec = bernoulli_bandit_spec(num_arms=5, horizon=100, prior=BanditPrior.BETA, prior_a=5.0, prior_b=0.5)
    regret = {
        name: evaluate_regret(spec, make_agent(agent), 300, seed=11, batch_size=300).sum(axis=1).mean()
        for name, agent in {
            "told": {"name": "gittins", "prior_a": 5.0, "prior_b": 0.5},
            "uniform": {"name": "gittins", "prior_a": 1.0, "prior_b": 1.0},
            "family": {"name": "family_gittins"},
        }.items()
    }
    assert regret["family"] <= 1.3 * regret["told"]
    assert regret["uniform"] >= 1.5 * regret["told"]


def test_the_agent_reads_the_horizon_and_round_trips_its_config():
    env = gym.make("ICRL-BernoulliBandit-v0", num_arms=3, horizon=12)
    agent = make_agent("family_gittins")
    obs, info = env.reset(seed=0)
    agent.reset(info=info)
    assert agent.horizon == 12 and isinstance(agent.family, FamilyGittinsIndex)
    again = make_agent(agent.config())
    assert again.config() == agent.config()
    with pytest.raises(ValueError, match="hyperprior"):
        make_agent({"name": "family_gittins", "hyperprior": [[1.0, -1.0]]})
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="evidence_power"):
            make_agent({"name": "family_gittins", "evidence_power": bad})


def test_tempering_keeps_the_priors_weights_closer_to_uniform():
    """w ∝ pi L^eta: with eta < 1 the heaviest prior's weight falls and the weights' entropy rises, on any counts."""
    model = FamilyPredictive(np.array(BETA_FAMILY), np.ones(len(BETA_FAMILY)), 60)
    x = np.array([[9, 1, 7, 0, 12, 2], [0, 5, 1, 8, 0, 0]])

    def entropy(w: np.ndarray) -> np.ndarray:
        return -(w * np.log(w)).sum(axis=1)

    full, tempered = model.posterior(x), model.posterior(x, 0.7)
    assert np.all(tempered.max(axis=1) < full.max(axis=1))
    assert np.all(entropy(tempered) > entropy(full))
    np.testing.assert_allclose(model.posterior(x, 1.0), full)


def test_its_memory_estimate_holds_one_table_built_and_three_kept():
    """At T = 500 (tables for N = 511) the estimate is one build's arrays plus three finished tables: above what the
    four finished tables hold, and below the package's default limit, so the documented horizons are not refused."""
    from icrl_gym.envs.validation import max_memory_bytes
    from icrl_gym.estimators.gittins import gittins_build_bytes

    agent = make_agent("family_gittins")
    agent.horizon = 500
    n = FamilyGittinsIndex.table_horizon(500, np.array(BETA_FAMILY))
    assert n == 511
    tables = 4 * 4 * (n + 2) ** 3 // 6
    assert tables < agent._memory_bytes() < gittins_build_bytes(n) + tables
    assert agent._memory_bytes() < max_memory_bytes()


def test_arms_equal_up_to_rounding_go_to_the_first():
    """The split member reads untried arms through the others' counts, by a different float path per arm.

    After arm 0's one failure at K = 20 the 19 untried arms are symmetric; their indices agree to 1e-15 but not
    bit for bit, and the rounding's largest is not arm 1.  The agent pulls arm 1, the first of them, as every index
    agent breaks its ties (a refactor of the arithmetic must not change the arm pulled).
    """
    agent = make_agent({"name": "family_gittins", "split_weight": 0.1, "horizon": 30})
    arms = np.eye(20)
    agent.reset(num_arms=20, batch_size=1)
    agent.update(0, 0.0, arms)
    scores = agent.index(arms[None])[0]
    assert np.ptp(scores[1:]) < 1e-14 and scores[1:].max() > scores[0]
    assert agent.act(arms) == 1
    assert np.reshape(agent.policy(arms), -1)[1] == 1.0


def fresh_news_by_loop(index: FamilyGittinsIndex, s: np.ndarray, f: np.ndarray, remaining: int) -> np.ndarray:
    """The fresh news (B, K) run by run: the *last* untried arm tried, its news read on the first one."""
    out = np.zeros(s.shape)
    for b in range(len(s)):
        fresh = np.flatnonzero(s[b] + f[b] == 0)
        if len(fresh) < 2 or remaining < 2:
            continue
        tried, other = fresh[-1], fresh[0]
        now = index.plain_scores(s[b : b + 1], f[b : b + 1], remaining)[0]
        pulled = [now[k] for k in range(s.shape[1]) if k not in fresh]
        best = max(pulled, default=0.0)
        p = index.moments(s[b : b + 1], f[b : b + 1])[0][0, tried]
        up, down = s[b : b + 1].copy(), f[b : b + 1].copy()
        up[0, tried] += 1
        down[0, tried] += 1
        g_s = index.plain_scores(up, f[b : b + 1], remaining - 1)[0, other]
        g_f = index.plain_scores(s[b : b + 1], down, remaining - 1)[0, other]
        value = p * max(g_s, best) + (1 - p) * max(g_f, best) - max(now[tried], best)
        out[b, fresh] = index.fresh_news * max(value, 0.0)
    return out


@pytest.fixture(scope="module")
def news_index(tmp_path_factory) -> FamilyGittinsIndex:
    cache = tmp_path_factory.mktemp("gittins")
    return FamilyGittinsIndex(30, cache_dir=cache, evidence_power=0.5, split_weight=0.2, fresh_news=20.0)


def test_the_fresh_news_is_the_one_step_value_run_by_run(news_index):
    """scores - plain_scores is lambda [p max(G_s, G_b) + (1 - p) max(G_f, G_b) - max(G_u, G_b)]^+ on the untried
    arms where two or more are untried (a loop that tries another untried arm: they are exchangeable), else 0."""
    rng = np.random.default_rng(5)
    for k in (2, 3, 6):
        s, f = rng.integers(0, 4, (60, k)), rng.integers(0, 4, (60, k))
        untried = rng.random((60, k)) < 0.5
        s[untried], f[untried] = 0, 0
        for remaining in (1, 2, 12):
            got = news_index.scores(s, f, remaining) - news_index.plain_scores(s, f, remaining)
            np.testing.assert_allclose(got, fresh_news_by_loop(news_index, s, f, remaining), atol=1e-12)
    assert (got > 0).any() and (got >= 0).all()
    assert (got[(s + f) > 0] == 0).all()


def test_independent_arms_carry_no_news(tmp_path):
    """A one-member family holds the arms independent, so a fresh arm's outcome leaves the others' index where it
    was and the news is exactly 0: the index is Gittins's told that prior."""
    told = FamilyGittinsIndex(30, priors=[[2.0, 1.0]], cache_dir=tmp_path, fresh_news=50.0)
    s = np.array([[6, 0, 0, 3], [0, 3, 0, 0], [0, 0, 0, 0]])
    f = np.array([[4, 0, 0, 1], [0, 1, 6, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(told.scores(s, f, 20), told.plain_scores(s, f, 20))
    family = FamilyGittinsIndex(30, cache_dir=tmp_path, fresh_news=50.0)
    assert (family.scores(s, f, 20) != family.plain_scores(s, f, 20)).any()


def test_the_agent_and_the_trainer_take_the_fresh_news():
    agent = make_agent({"name": "family_gittins", "split_weight": 0.2, "fresh_news": 20.0})
    assert make_agent(agent.config()).config()["fresh_news"] == 20.0
    assert make_agent("family_gittins").config()["fresh_news"] == 0.0
    with pytest.raises(ValueError, match="fresh_news must be >= 0"):
        make_agent({"name": "family_gittins", "fresh_news": -1.0})
