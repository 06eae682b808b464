"""The paper cell's symmetry study: its mixture Bayes-UCB against the library's Bayes-UCB and a direct evidence."""

import numpy as np
from scipy.stats import multivariate_normal, norm

from agents.bandit.bayes_ucb import LinearBayesUCB
from benchmarks.evaluations.paper_cell_symmetry import MixtureBayesUCB, priors


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
    index = _played(MixtureBayesUCB(components, noise_std=1.5, scale=0.5), arms, actions, rewards)
    xs = arms[actions]
    log_ev = [multivariate_normal(xs @ m, 1.5**2 * np.eye(7) + xs @ p @ xs.T).logpdf(rewards) for m, p in components]
    weights = np.exp(np.array(log_ev) - max(log_ev))
    weights /= weights.sum()
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
