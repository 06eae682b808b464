"""The model-averaged Bayes-UCB against direct computations: posteriors, evidences, the index."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from scipy.stats import multivariate_normal, multivariate_t, norm

import icrl_gym  # noqa: F401  (registers the environments)
from agents import make_agent
from agents.bandit.model_average import (
    ANCHOR_NOISES,
    CENTRE_SCALES,
    NOISE_PRIOR_SCALE,
    NOISE_PRIOR_SHAPE,
    PRIOR_SCALES,
    RELATIVE_CENTRES,
    RELATIVE_SCALES,
    ModelAveragedBayesUCB,
    prior_grid,
)
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.linear_bandit import linear_bandit_spec


def play(agent: ModelAveragedBayesUCB, arms: np.ndarray, w: np.ndarray, sigma: float, steps: int, seed: int):
    """Random arms for ``steps`` steps on one run; returns the pulled arms (n, d) and rewards (n,)."""
    rng = np.random.default_rng(seed)
    xs, rs = [], []
    for _ in range(steps):
        a = int(rng.integers(arms.shape[0]))
        r = float(arms[a] @ w + sigma * rng.standard_normal())
        agent.update_batch(arms[None], np.array([a]), np.array([r]))
        xs.append(arms[a])
        rs.append(r)
    return np.array(xs), np.array(rs)


@pytest.mark.parametrize("known", [True, False])
def test_posterior_and_evidence_match_a_direct_solve(known: bool) -> None:
    """Every model's Kalman posterior equals V (P^{-1} m0 + X^T r), V = (P^{-1} + X^T X)^{-1}, and its log weight
    the log prior mass plus the joint marginal density of the rewards (an anchor prior N(0.5, 0.1 I) included)."""
    d, a, sigma = 3, 6, 0.7
    rng = np.random.default_rng(1)
    arms = rng.normal(size=(a, d))
    agent = ModelAveragedBayesUCB(noise_std=sigma if known else None, anchor=(0.5, 0.1))
    agent.reset(dim=d, num_actions=a)
    x, r = play(agent, arms, rng.normal(size=d), sigma, 12, seed=2)
    if known:
        grid = list(prior_grid(d, PRIOR_SCALES, CENTRE_SCALES) / sigma**2) + [0.1 / sigma**2 * np.eye(d)]
    else:
        grid = list(prior_grid(d, RELATIVE_SCALES, RELATIVE_CENTRES)) + [0.1 / s**2 * np.eye(d) for s in ANCHOR_NOISES]
    assert agent.cov.shape[1] == len(grid) and agent.is_anchor.sum() == (1 if known else len(ANCHOR_NOISES))
    base, anchors = int((~agent.is_anchor).sum()), int(agent.is_anchor.sum())
    for m, prior in enumerate(grid):
        m0 = np.full(d, 0.5) if agent.is_anchor[m] else np.zeros(d)
        v = np.linalg.inv(np.linalg.inv(prior) + x.T @ x)
        np.testing.assert_allclose(agent.cov[0, m], v, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(agent.mean[0, m], v @ (np.linalg.solve(prior, m0) + x.T @ r), rtol=1e-8, atol=1e-10)
        shape = np.eye(len(r)) + x @ prior @ x.T  # r ~ N(X m0, sigma^2 shape), or t_{2 a0}(X m0, b0/a0 shape)
        if known or agent.is_anchor[m]:  # a fixed noise level: the known sigma, or the anchor's level
            level = sigma if known else ANCHOR_NOISES[m - base]
            density = multivariate_normal(x @ m0, level**2 * shape).logpdf(r)
        else:
            scale = NOISE_PRIOR_SCALE / NOISE_PRIOR_SHAPE * shape
            density = multivariate_t(x @ m0, scale, df=2 * NOISE_PRIOR_SHAPE).logpdf(r)
        mass = 0.5 / (anchors if agent.is_anchor[m] else base)
        assert agent.log_evidence[0, m] == pytest.approx(np.log(mass) + density, rel=1e-9)


def test_anchor_weight_is_the_evidence_for_the_anchor() -> None:
    """On instances of the anchor's own prior the anchor takes most of the weight; far outside it, almost none."""
    spec = linear_bandit_spec(dim=5, num_actions=10, horizon=200)  # w* ~ U[0, 1]^5: anchor N(0.5, 1/12)
    far = linear_bandit_spec(dim=5, num_actions=10, horizon=200, prior="gaussian", prior_var=4.0)
    weights = {}
    for name, env in (("inside", spec), ("outside", far)):
        agent = ModelAveragedBayesUCB(anchor=(0.5, 1.0 / 12.0))
        evaluate_regret(env, agent, 100, seed=3, batch_size=100)
        weights[name] = float(np.median(agent.anchor_weight()))
    assert weights["inside"] > 0.7 and weights["outside"] < 0.05, weights


def test_index_is_the_averaged_quantile() -> None:
    """u_k = m_k + Phi^{-1}(1 - 1/t) sd_k with the weights, means and variances of the mixture, computed per model."""
    d, a, sigma = 2, 4, 0.5
    rng = np.random.default_rng(3)
    arms = rng.normal(size=(a, d))
    agent = ModelAveragedBayesUCB(noise_std=sigma)
    agent.reset(dim=d, num_actions=a)
    play(agent, arms, np.array([0.3, -0.2]), sigma, 9, seed=4)
    w = np.exp(agent.log_evidence[0] - agent.log_evidence[0].max())
    w /= w.sum()
    means = np.array([[arm @ agent.mean[0, m] for arm in arms] for m in range(len(w))])
    var = np.array([[sigma**2 * arm @ agent.cov[0, m] @ arm for arm in arms] for m in range(len(w))])
    mean = w @ means
    sd = np.sqrt(w @ (var + (means - mean) ** 2))
    expected = mean + norm.ppf(1 - 1 / 10) * sd
    np.testing.assert_allclose(agent.index(arms[None])[0], expected, rtol=1e-10)


def test_one_hot_path_equals_the_general_one() -> None:
    """A K-armed bandit (one-hot arms) scores as the general linear path does on the identity action set."""
    k = 5
    fast, slow = ModelAveragedBayesUCB(noise_std=1.0), ModelAveragedBayesUCB(noise_std=1.0)
    fast.reset(num_arms=k)
    slow.reset(dim=k, num_actions=k)
    arms = np.eye(k)
    rng = np.random.default_rng(5)
    for _ in range(20):
        a, r = rng.integers(k, size=1), rng.normal(size=1)
        fast.update_batch(arms[None], a, r)
        slow.update_batch(arms[None], a, r)
    assert not slow.one_hot_arms and fast.one_hot_arms
    np.testing.assert_allclose(fast.index(arms[None]), slow.index(arms[None]), rtol=1e-12)


def test_noise_estimate_tracks_sigma() -> None:
    """Told nothing, the in-context estimate of sigma lands near the truth after 300 steps (0.2 and 2.0)."""
    for sigma in (0.2, 2.0):
        agent = ModelAveragedBayesUCB()
        agent.reset(dim=3, num_actions=5)
        rng = np.random.default_rng(6)
        play(agent, rng.normal(size=(5, 3)), rng.normal(size=3), sigma, 300, seed=7)
        assert agent.noise_estimate()[0] == pytest.approx(sigma, rel=0.15)


def test_reads_sigma_from_the_environment_and_plays_it_unknown() -> None:
    """Sigma is the environment's where stated; withheld (noise_known=False) the agent estimates it."""
    env = gymnasium.make("ICRL-LinearBandit-v0")
    _, info = env.reset(seed=0)
    agent = make_agent("model_averaged_bayes_ucb")
    agent.reset(info)
    assert agent.noise is not None and agent.noise[0] == pytest.approx(env.unwrapped.bandit_spec.noise_std)
    blind = linear_bandit_spec(dim=3, num_actions=5, horizon=40, noise_known=False)
    regret = evaluate_regret(blind, make_agent("model_averaged_bayes_ucb"), 20, seed=0, batch_size=20)
    assert regret.shape == (20, 40) and np.isfinite(regret).all()


def test_beats_uniform_and_approaches_linucb_level() -> None:
    """A known regret level: on the paper's linear bandit it is far below uniform play (common random numbers)."""
    spec = linear_bandit_spec(dim=3, num_actions=5, horizon=100)
    ours = evaluate_regret(spec, make_agent("model_averaged_bayes_ucb"), 100, seed=1, batch_size=100).sum(axis=1)
    uniform = evaluate_regret(spec, make_agent("uniform"), 100, seed=1, batch_size=100).sum(axis=1)
    assert ours.mean() < 0.35 * uniform.mean()
