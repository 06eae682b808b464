"""The paper cell's symmetry study: its mixture Bayes-UCB against the library's Bayes-UCB and a direct evidence,
and the sign mixture of a told-prior expert against that expert played alone."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

import agents
from agents.bandit.bayes_ucb import LinearBayesUCB
from benchmarks.evaluations.paper_cell_symmetry import MixtureBayesUCB, SignMixture, priors


def _played(agent, arms, actions, rewards):
    """``agent`` reset on one run with fixed ``arms`` (A, d) and fed the history; its index after it."""
    agent.reset(batch_size=1, dim=arms.shape[1], num_actions=len(arms), horizon=50)
    for a, r in zip(actions, rewards, strict=True):
        agent.update_batch(arms[None], np.array([a]), np.array([r]))
    return agent.index(arms[None])[0]


def test_one_component_is_the_librarys_bayes_ucb():
    """One Gaussian prior N(0.3 1, 0.5 I): the index after eight steps equals LinearBayesUCB's (its level
    1 - 1/t at step t, c = 0), an independent implementation of the same posterior."""
    rng = np.random.default_rng(0)
    arms, actions, rewards = rng.uniform(-1, 1, (6, 4)), rng.integers(0, 6, 8), rng.normal(0.5, 1.0, 8)
    mixture = MixtureBayesUCB([(np.full(4, 0.3), 0.5 * np.eye(4))], noise_std=1.5)
    library = LinearBayesUCB(noise_std=1.5, prior_mean=0.3, prior_var=0.5)
    np.testing.assert_allclose(
        _played(mixture, arms, actions, rewards), _played(library, arms, actions, rewards), rtol=1e-9
    )


def test_two_components_weigh_by_their_evidence():
    """The sign mixture: the component weights are the posterior odds computed from the marginal densities
    r ~ N(X m_j, sigma^2 I + X P_j X^T) directly, and the index is the mixture's mean plus z_t times its sd."""
    rng = np.random.default_rng(1)
    components = priors(3)["told but the sign"]
    arms, actions, rewards = rng.uniform(-1, 1, (5, 3)), rng.integers(0, 5, 7), rng.normal(0.4, 1.5, 7)
    mixture = MixtureBayesUCB(components, noise_std=1.5, scale=0.5)
    index = _played(mixture, arms, actions, rewards)
    xs = arms[actions]
    log_ev = [multivariate_normal(xs @ m, 1.5**2 * np.eye(7) + xs @ p @ xs.T).logpdf(rewards) for m, p in components]
    weights = np.exp(np.array(log_ev) - max(log_ev))
    weights /= weights.sum()
    np.testing.assert_allclose(mixture.weights()[0], weights, rtol=1e-9)
    means, variances = [], []
    for m, p in components:
        cov = np.linalg.inv(xs.T @ xs / 1.5**2 + np.linalg.inv(p))
        mu = cov @ (xs.T @ rewards / 1.5**2 + np.linalg.inv(p) @ m)
        means.append(arms @ mu)
        variances.append(np.einsum("ad,de,ae->a", arms, cov, arms))
    mean = weights @ np.array(means)
    var = weights @ (np.array(variances) + (np.array(means) - mean) ** 2)
    z = norm.ppf(1 - 1 / 8)
    np.testing.assert_allclose(index, mean + 0.5 * z * np.sqrt(var), rtol=1e-9)


def _fed(agent, arms, actions, rewards):
    """``agent`` reset on one run of the paper's sizes and fed the history on the fixed ``arms``."""
    agent.reset(batch_size=1, dim=5, num_actions=10, horizon=200, noise_std=1.5)
    for a, r in zip(actions, rewards, strict=True):
        agent.update_batch(arms[None], np.array([a]), np.array([r]))
    return agent


def test_the_sign_mixture_plays_the_expert_of_the_likelier_sign_and_mirrors_exactly():
    """After a history that favours w* > 0 the sign's odds are the closed form
    exp(2 (P^-1 m)^T Lambda^-1 b / sigma^2) (P = I / 12, m = 1/2 1), the mixture plays what the told expert alone
    plays, and the same history on the mirrored arms -X gives the opposite odds and the same action."""
    rng = np.random.default_rng(4)
    arms = rng.uniform(-1, 1, (10, 5))
    actions = rng.integers(0, 10, 6)
    rewards = arms[actions] @ np.full(5, 0.6) + rng.normal(0, 0.1, 6)
    mixture = _fed(SignMixture("linear-generalist-v1", seed=0), arms, actions, rewards)
    xs = arms[actions]
    lam = xs.T @ xs / 1.5**2 + 12 * np.eye(5)
    log_odds = 2 * (12 * np.full(5, 0.5)) @ np.linalg.solve(lam, xs.T @ rewards / 1.5**2)
    p = mixture.plus_probability()[0]
    assert p == pytest.approx(1 / (1 + np.exp(-log_odds)), rel=1e-9) and p > 0.8
    alone = _fed(agents.pretrained("linear-generalist-v1"), arms, actions, rewards)
    played = mixture.act_batch(arms[None])[0]
    assert played == alone.act_batch(arms[None])[0]
    mirrored = _fed(SignMixture("linear-generalist-v1", seed=0), -arms, actions, rewards)
    assert mirrored.plus_probability()[0] == pytest.approx(1 - p, abs=1e-12)
    assert mirrored.act_batch(-arms[None])[0] == played


def test_the_sign_mixture_needs_sigma():
    with pytest.raises(ValueError, match="noise_std"):
        SignMixture("linear-generalist-v1").reset(batch_size=1, dim=5, num_actions=10, horizon=200)
