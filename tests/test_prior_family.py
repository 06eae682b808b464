"""The prior family of linear bandits and the references told each instance's own prior.

Every reference is checked against an independent computation: the Gaussian posterior by a direct
solve per run, the Beta quantile by scipy per run, the finite-horizon Gittins index by a slow
recursion with bisection on the retirement reward.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from scipy.stats import beta as beta_dist
from scipy.stats import norm

from agents.bandit.bayes_ucb import BayesUCB, LinearBayesUCB
from agents.bandit.gittins import Gittins
from agents.bandit.thompson import BernoulliThompson, LinearThompson
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.bernoulli_bandit import BernoulliBanditVectorEnv
from icrl_gym.envs.linear_bandit import LinearBanditEnv, LinearBanditVectorEnv
from icrl_gym.envs.prior_family import FAMILY_MEMBERS, sample_prior
from icrl_gym.estimators.gittins import build_gittins_table


def test_family_draws_are_seeded_and_every_member_follows_its_hyperparameters():
    dims = np.array([1, 3, 8, 16] * 500)
    draw = sample_prior(np.random.default_rng(0), "family", dims, 16)
    again = sample_prior(np.random.default_rng(0), "family", dims, 16)
    assert np.array_equal(draw.w, again.w) and np.array_equal(draw.member, again.member)
    assert set(np.unique(draw.member)) == set(range(len(FAMILY_MEMBERS)))
    pad = np.arange(16)[None, :] >= dims[:, None]
    assert (draw.w[pad] == 0).all() and (draw.var > 0).all()
    h = draw.hyper
    box = draw.member == FAMILY_MEMBERS.index("box")
    inside = (draw.w >= h["box_low"][:, None]) & (draw.w <= h["box_high"][:, None])
    assert (inside | pad)[box].all()
    sparse = draw.member == FAMILY_MEMBERS.index("sparse")
    assert np.array_equal((draw.w[sparse] != 0).sum(axis=1), h["support_size"][sparse])
    direction = draw.member == FAMILY_MEMBERS.index("direction")
    radius = np.linalg.norm(draw.w[direction], axis=1)
    assert (radius >= h["radius_low"][direction] - 1e-12).all() and (
        radius <= h["radius_high"][direction] + 1e-12
    ).all()


@pytest.mark.parametrize("member", FAMILY_MEMBERS)
def test_matched_gaussian_prior_has_the_moments_of_the_member(member):
    """For fixed hyperparameters, the reported mean and variance are the empirical moments of w*."""
    d = sample_prior(np.random.default_rng(2), member, np.full(40_000, 4), 4)
    # pooled over the hyperparameters: E[w] = E[mean], Var[w] = E[var] + Var[mean] (law of total variance)
    assert np.allclose(d.w.mean(0), d.mean.mean(0), atol=0.03)
    assert np.allclose(d.w.var(0), d.var.mean(0) + d.mean.var(0), rtol=0.06)


def test_env_reports_each_instance_prior_and_noise_and_keeps_old_draws():
    env = LinearBanditVectorEnv(6, dim=4, num_actions=5, prior="family", noise_std=0.05, noise_high=3.0)
    _, info = env.reset(seed=3)
    inst = info["model"]["instance"]
    assert inst["prior_mean"].shape == (6, 4) and inst["noise_std"].shape == (6,)
    assert ((inst["noise_std"] >= 0.05) & (inst["noise_std"] <= 3.0)).all()
    _, info2 = LinearBanditVectorEnv(6, dim=4, num_actions=5, prior="family", noise_std=0.05, noise_high=3.0).reset(
        seed=3
    )
    assert np.array_equal(info["w_star"], info2["w_star"])
    # the rewards' noise has each instance's sigma
    env = LinearBanditVectorEnv(3, dim=2, num_actions=2, horizon=4000, prior="box", noise_std=0.1, noise_high=2.0)
    _, info = env.reset(seed=0)
    rewards = np.array([env.step(np.zeros(3, dtype=int))[1] for _ in range(3999)])
    expected = env.batch.means[:, 0]
    assert np.allclose((rewards - expected).std(0), info["model"]["instance"]["noise_std"], rtol=0.05)
    # a fixed prior reports no instance part and draws exactly what it drew before the family existed
    _, old = LinearBanditVectorEnv(4).reset(seed=5)
    assert "instance" not in old["model"]
    rng = np.random.default_rng(5)
    assert np.array_equal(old["w_star"], rng.uniform(0.0, 1.0, (4, 5)))


def test_gaussian_multi_armed_bandit_and_sphere_arms():
    env = LinearBanditEnv(dim=6, num_actions=6, arms="one_hot", prior="hierarchical")
    obs, info = env.reset(seed=0)
    assert np.array_equal(obs.reshape(6, 6), np.eye(6))
    env = LinearBanditVectorEnv(2, dim=3, num_actions=7, arms="sphere", action_set="per_step")
    obs, _ = env.reset(seed=0)
    assert np.allclose(np.linalg.norm(obs.reshape(2, 7, 3), axis=-1), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="for Gaussian rewards"):
        BanditSpec(dim=3, num_actions=3, arms="one_hot", reward="bernoulli", prior="box")
    with pytest.raises(ValueError, match="noise_std <= noise_high"):
        BanditSpec(noise_std=2.0, noise_high=1.0)


def _posterior(mean, var, s, xs, rs):
    """Gaussian posterior of one run by a direct solve: N(m, diag(v)) prior, noise s."""
    precision = np.diag(1.0 / var) + xs.T @ xs / s**2
    cov = np.linalg.inv(precision)
    return cov @ (mean / var + xs.T @ rs / s**2), cov


def test_linear_bayes_ucb_and_ts_use_each_instance_prior():
    b, horizon = 5, 30
    env = LinearBanditVectorEnv(b, dim=3, num_actions=4, horizon=horizon, prior="family", noise_std=0.1, noise_high=2)
    obs, info = env.reset(seed=7)
    inst = info["model"]["instance"]
    ucb, ts = LinearBayesUCB(), LinearThompson(seed=0)
    ucb.reset(info)
    ts.reset(info)
    xs, rs = [[] for _ in range(b)], [[] for _ in range(b)]
    for t in range(horizon):
        sets = obs.reshape(b, 4, 3).astype(np.float64)
        z = norm.ppf(1 - 1 / (t + 1)) if t else -np.inf
        expected = np.empty((b, 4))
        for i in range(b):
            history = np.array(xs[i]).reshape(-1, 3), np.array(rs[i])
            mu, cov = _posterior(inst["prior_mean"][i], inst["prior_var"][i], inst["noise_std"][i], *history)
            width = np.sqrt(np.einsum("ad,de,ae->a", sets[i], cov, sets[i]))
            expected[i] = sets[i] @ mu + (z * width if t else 0.0)
            ts_mean, ts_cov = ts.model.posterior(ts.stats)
            assert np.allclose(ts_mean[i], mu) and np.allclose(ts_cov[i], cov)
        if t:  # at t = 1 the quantile level is 0: every index is -inf
            assert np.allclose(ucb.index(sets), expected, atol=1e-8)
        actions = ucb.act(obs)
        ts.act(obs)
        obs, rewards, *_ = env.step(actions)
        ucb.update(actions, rewards)
        ts.update(actions, rewards)
        for i in range(b):
            xs[i].append(sets[i, actions[i]])
            rs[i].append(rewards[i])
    assert ucb.config()["model_used"]["noise_std"] == "per instance"


def test_bernoulli_references_use_each_instance_beta_prior():
    b, horizon = 4, 25
    env = BernoulliBanditVectorEnv(b, num_arms=3, horizon=horizon, prior="beta_family")
    obs, info = env.reset(seed=2)
    a0, b0 = info["model"]["instance"]["prior_a"], info["model"]["instance"]["prior_b"]
    ucb, ts = BayesUCB(), BernoulliThompson(seed=0)
    ucb.reset(info)
    ts.reset(info)
    succ, fail = np.zeros((b, 3)), np.zeros((b, 3))
    for t in range(horizon):
        level = 1 - 1 / (t + 1)
        expected = np.array(
            [[beta_dist.ppf(level, a0[i] + succ[i, k], b0[i] + fail[i, k]) for k in range(3)] for i in range(b)]
        )
        assert np.allclose(ucb.index(None), expected, atol=1e-9)
        actions = ucb.act(obs)
        obs, rewards, *_ = env.step(actions)
        ucb.update(actions, rewards)
        succ[np.arange(b), actions] += rewards
        fail[np.arange(b), actions] += 1 - rewards
    samples = np.stack([ts._sample(1)[0] for _ in range(4000)])  # fresh agent: the prior itself
    assert np.allclose(samples.mean(0), (a0 / (a0 + b0))[:, None] * np.ones(3), atol=0.02)


def _slow_gittins(s, f, m, a0, b0, tol=1e-6):
    """G(s, f, m) by bisection on lambda, each V_lambda by a memoised recursion in float64."""

    def value(lam):
        @cache
        def v(s, f, m):
            if m == 0:
                return 0.0
            p = (a0 + s) / (a0 + b0 + s + f)
            return max(0.0, p - lam + p * v(s + 1, f, m - 1) + (1 - p) * v(s, f + 1, m - 1))

        p = (a0 + s) / (a0 + b0 + s + f)
        return p - lam + p * v(s + 1, f, m - 1) + (1 - p) * v(s, f + 1, m - 1)

    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if value(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("a0,b0", [(0.5, 2.5), (3.7, 0.4), (1.0, 1.0)])
def test_gittins_table_with_non_integer_pseudo_counts_matches_a_slow_recursion(a0, b0):
    horizon = 9
    table = build_gittins_table(horizon, a0, b0, grid=1024)
    for s, f, m in [(0, 0, 9), (2, 1, 5), (0, 3, 4), (4, 0, 2), (1, 1, 1)]:
        assert table.lookup(s, f, m) == pytest.approx(_slow_gittins(s, f, m, a0, b0), abs=2e-3)


def test_gittins_reads_the_horizon_and_each_instance_prior_from_the_env():
    env = BernoulliBanditVectorEnv(3, num_arms=2, horizon=6, prior="beta_family")
    obs, info = env.reset(seed=4)
    agent = Gittins()
    agent.reset(info)
    assert agent.horizon == 6 and len(agent.tables) == 3
    inst = info["model"]["instance"]
    got = agent.index(None)
    for i in range(3):
        assert np.allclose(got[i], build_gittins_table(6, inst["prior_a"][i], inst["prior_b"][i]).lookup(0, 0, 6))
    single = Gittins()
    single.reset(BernoulliBanditVectorEnv(1, num_arms=2, horizon=11).reset(seed=0)[1])
    assert single.horizon == 11 and single.table.prior_a == 1.0
