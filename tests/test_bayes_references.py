"""Bayesian reference agents against independent computations: brute force, closed forms, Monte-Carlo."""

import functools

import numpy as np
import pytest
from scipy import integrate, stats

from agents import make_agent
from agents.bandit.bayes_ucb import LinearBayesUCB
from agents.bandit.bernoulli_bayes_optimal import BernoulliBayesOptimal, bayes_optimal_table, table_bytes
from agents.bandit.linear_posterior import GaussianModel
from agents.bandit.thompson import BernoulliThompson, LinearThompson
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BernoulliBanditEnv, LinearBanditEnv, bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.envs.tabular_mdp import RandomMDPEnv


def _brute_force_value(num_arms, horizon, a, b):
    """max over policies of E[sum r] by enumerating every history (action, outcome sequence): no counts."""

    @functools.cache
    def value(history):  # history: tuple of (arm, reward) pairs
        if len(history) == horizon:
            return 0.0
        best = 0.0
        for k in range(num_arms):
            s = sum(r for arm, r in history if arm == k)
            n = sum(1 for arm, _ in history if arm == k)
            p = (a + s) / (a + b + n)
            q = p * (1 + value((*history, (k, 1)))) + (1 - p) * value((*history, (k, 0)))
            best = max(best, q)
        return best

    return value(())


@pytest.mark.parametrize("num_arms, horizon, a, b", [(2, 5, 1.0, 1.0), (2, 6, 0.5, 2.0), (3, 4, 2.0, 1.0)])
def test_dp_value_is_the_brute_force_tree_value(num_arms, horizon, a, b):
    _, value = bayes_optimal_table(num_arms, horizon, a, b)
    assert value == pytest.approx(_brute_force_value(num_arms, horizon, a, b), abs=1e-12)


def test_bayes_optimal_regret_is_t_emax_minus_the_dp_value():
    """Monte-Carlo regret of the table policy = T E[max_k p_k] - V(0), E[max] by quadrature."""
    spec = bernoulli_bandit_spec(num_arms=2, horizon=20, prior="beta", prior_a=2.0, prior_b=3.0)
    beta = stats.beta(2.0, 3.0)
    e_max = integrate.quad(lambda x: 1.0 - beta.cdf(x) ** 2, 0.0, 1.0)[0]
    agent = BernoulliBayesOptimal(seed=0)
    regret = evaluate_regret(spec, agent, 20_000, seed=10_000_000, batch_size=20_000).sum(axis=1)
    assert agent.config()["model_used"] == {"horizon": 20, "prior_a": 2.0, "prior_b": 3.0}
    expected = 20 * e_max - agent.value
    assert regret.mean() == pytest.approx(expected, abs=4 * regret.std() / np.sqrt(regret.size))


def test_bayes_optimal_beats_thompson_and_refuses_huge_tables():
    spec = bernoulli_bandit_spec(num_arms=2, horizon=30)
    opt = evaluate_regret(spec, "bernoulli_bayes_optimal", 4000, seed=10_000_001).sum(axis=1)
    ts = evaluate_regret(spec, "bernoulli_ts", 4000, seed=10_000_001).sum(axis=1)
    assert opt.mean() < ts.mean()
    assert table_bytes(2, 500) == 504 * 503 * 502 * 501 // 24  # C(T + 2K, 2K) states, one byte each
    env = BernoulliBanditEnv(num_arms=2, horizon=500)
    with pytest.raises(ValueError, match="MiB"):
        BernoulliBayesOptimal().reset(env.reset(seed=0)[1])
    with pytest.raises(ValueError, match="Beta priors"):
        BernoulliBayesOptimal().reset(BernoulliBanditEnv(num_arms=2, prior_high=0.5).reset(seed=0)[1])


def test_bayesian_agents_read_the_environment_and_record_it():
    env = LinearBanditEnv(noise_std=0.7, prior_low=-1.0, prior_high=3.0)
    ts = LinearThompson()
    ts.reset(env.reset(seed=0)[1])
    assert ts.config()["model_used"] == {"noise_std": 0.7, "prior_mean": 1.0, "prior_var": 16 / 12}
    ts = LinearThompson(prior_mean=0.0, prior_var=1.0)  # overrides win and are recorded
    ts.reset(env.reset(seed=0)[1])
    assert ts.config()["prior_var"] == 1.0 and ts.config()["model_used"]["noise_std"] == 0.7
    assert make_agent(ts.config()).config()["prior_var"] == 1.0  # the record rebuilds the agent
    gauss = LinearBanditEnv(prior="gaussian", prior_var=4.0)
    ts.__init__()
    ts.reset(gauss.reset(seed=0)[1])
    assert ts.model == GaussianModel(1.5, 0.0, 4.0)
    bts = BernoulliThompson()
    bts.reset(BernoulliBanditEnv(prior="beta", prior_a=0.5, prior_b=2.0).reset(seed=0)[1])
    assert (bts.a, bts.b) == (0.5, 2.0)
    bts.reset(BernoulliBanditEnv().reset(seed=0)[1])
    assert (bts.a, bts.b) == (1.0, 1.0)
    ucb = make_agent("bayes_ucb")
    ucb.reset(BernoulliBanditEnv(horizon=77).reset(seed=0)[1])
    assert ucb.config()["model_used"]["horizon"] == 77
    psrl = make_agent("psrl")
    psrl.reset(RandomMDPEnv(concentration=0.3).reset(seed=0)[1])
    assert psrl.config()["model_used"] == {"concentration": 0.3}
    with pytest.raises(ValueError, match="no environment model"):
        LinearThompson().reset(batch_size=1, dim=2, num_actions=2)


def test_linear_bayes_ucb_index_is_the_gaussian_posterior_quantile():
    rng = np.random.default_rng(0)
    agent = LinearBayesUCB(c=1.0, horizon=50, noise_std=1.2, prior_mean=0.5, prior_var=0.25)
    agent.reset(batch_size=1, dim=3, num_actions=4)
    X = rng.uniform(-1, 1, size=(4, 3))
    A, y = [], []
    for _ in range(7):
        k = agent.act(X[None])[0]
        r = rng.normal()
        agent.update([k], [r])
        A.append(X[k])
        y.append(r)
    A, y = np.array(A), np.array(y)
    prec = np.eye(3) / 0.25 + A.T @ A / 1.44  # posterior precision, closed form
    cov = np.linalg.inv(prec)
    mean = cov @ (0.5 * np.ones(3) / 0.25 + A.T @ y / 1.44)
    level = 1 - 1 / (8 * np.log(50))
    expected = stats.norm.ppf(level, loc=X @ mean, scale=np.sqrt(np.einsum("ad,de,ae->a", X, cov, X)))
    np.testing.assert_allclose(agent.index(X[None])[0], expected, atol=1e-10)


def test_box_posterior_weights_match_the_exact_posterior():
    """Weighted draws reproduce the posterior mean of the box posterior computed by quadrature (d=1)."""
    env = LinearBanditEnv(dim=1, num_actions=2, noise_std=1.0, horizon=10)
    agent = make_agent({"name": "linear_box_posterior", "rule": "mean", "num_particles": 200_000}, seed=0)
    agent.reset(env.reset(seed=0)[1])
    x, r = np.array([1.0, 1.0, 1.0]), np.array([1.4, 1.9, 1.2])  # pulls far above the box [0, 1]
    for xi, ri in zip(x, r, strict=True):
        agent.update_batch(np.array([[[xi], [-xi]]]), np.array([0]), np.array([ri]))
    w, weights = agent.particles()
    lik = lambda v: np.exp(-((r - x * v) ** 2).sum() / 2)  # noqa: E731
    z = integrate.quad(lik, 0, 1)[0]
    exact_mean = integrate.quad(lambda v: v * lik(v), 0, 1)[0] / z
    assert (weights[0] @ w[0, :, 0]) == pytest.approx(exact_mean, abs=3e-3)
    assert w[0, weights[0] > 0].min() >= 0 and w[0, weights[0] > 0].max() <= 1


@pytest.mark.parametrize("name", ["linear_bayes_ucb", "linear_posterior_mean", "linear_ts", "linear_box_posterior"])
def test_matched_linear_agents_beat_linucb(name):
    spec = linear_bandit_spec(horizon=60)
    spec_agent = {"name": name, "num_particles": 64} if name == "linear_box_posterior" else name
    ours = evaluate_regret(spec, spec_agent, 300, seed=10_000_002).sum(axis=1).mean()
    assert ours < evaluate_regret(spec, "linucb", 300, seed=10_000_002).sum(axis=1).mean()


def test_ucb_count_offset_is_linucb_on_one_hot_arms():
    """S/(1+N) + 1/sqrt(1+N) by hand and as LinUCB (lambda=1, alpha=1) on the one-hot arms; the default unchanged."""
    smooth, linucb = make_agent("ucb", count_offset=1.0), make_agent("linucb", alpha=1.0, lam=1.0)
    arms = np.eye(5)[None]
    for agent in (smooth, linucb):
        agent.reset(batch_size=1, dim=5, num_actions=5)
        for k, r in [(0, 1.0), (0, 0.0), (3, 1.0)]:
            agent.update_batch(arms, np.array([k]), np.array([r]))
    n, s = np.array([2, 0, 0, 1, 0.0]), np.array([1, 0, 0, 1, 0.0])
    np.testing.assert_allclose(smooth.index(arms)[0], s / (1 + n) + 1 / np.sqrt(1 + n))
    np.testing.assert_allclose(smooth.index(arms), linucb.index(arms), atol=1e-12)
    assert make_agent("ucb").config() == {"name": "ucb", "temperature": 0.0, "bonus": 1.0}
