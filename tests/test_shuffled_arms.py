"""ShuffledArms: any bandit algorithm on every run's arms in a random order."""

from __future__ import annotations

import numpy as np
import pytest

from agents import make_agent
from agents.shuffled_arms import ShuffledArms
from icrl_gym.data.trajectories import collect_trajectories, evaluate_regret
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec


@pytest.mark.parametrize(
    "spec", [bernoulli_bandit_spec(6, horizon=20), linear_bandit_spec(3, 7, 20, 0.5)], ids=["K-armed", "linear"]
)
def test_the_oracle_inside_still_pulls_the_best_arm(spec):
    """The inner algorithm's arm j is the bandit's arm order[j]: its w* and action sets are permuted consistently."""
    assert evaluate_regret(spec, {"name": "shuffled_arms", "inner": {"name": "optimal"}}, 64, seed=3).sum() == 0.0


def test_the_first_pull_is_uniform_over_the_arms():
    """An algorithm that pulls its first arm first pulls each of the K arms in 1/K of the runs, wrapped."""
    k, runs = 5, 4000
    data = collect_trajectories(bernoulli_bandit_spec(k, horizon=2), {"name": "emp"}, runs, seed=1)
    assert np.all(data.actions[:, 0] == 0)  # unwrapped: always the first arm
    wrapped = {"name": "shuffled_arms", "inner": {"name": "emp"}}
    first = collect_trajectories(bernoulli_bandit_spec(k, horizon=2), wrapped, runs, seed=1).actions[:, 0]
    counts = np.bincount(first, minlength=k)
    assert np.all(np.abs(counts - runs / k) < 4 * np.sqrt(runs * (1 / k) * (1 - 1 / k))), counts


def test_shuffled_the_two_orders_of_one_set_are_one_bandit():
    """At K = 20 the skewed and reversed sets hold the same arms in two orders (ten high first, or last).

    The Gittins index pulls the first untried arm, so as is it pays far less on the first; with the arms
    shuffled the two are one law, and its means agree within the noise.
    """
    runs = 300

    def totals(prior: str, shuffled: bool) -> np.ndarray:
        spec = {"name": "gittins"}
        agent = {"name": "shuffled_arms", "inner": spec} if shuffled else spec
        return evaluate_regret(bernoulli_bandit_spec(20, horizon=100, prior=prior), agent, runs, seed=11).sum(axis=1)

    def gap(a: np.ndarray, b: np.ndarray) -> float:  # in standard errors of the difference
        return abs(a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / runs + b.var(ddof=1) / runs)

    assert gap(totals("skewed", False), totals("skewed_reversed", False)) > 6
    assert gap(totals("skewed", True), totals("skewed_reversed", True)) < 3


def test_two_wrapped_algorithms_reset_alike_face_the_same_orders():
    """The orders are the first draw of the agent's generator at reset: common random numbers keep them paired."""
    agents = [ShuffledArms({"name": "ucb"}), ShuffledArms(make_agent("bernoulli_ts"))]
    for agent in agents:
        agent.reset(num_arms=8, batch_size=16, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(agents[0].order, agents[1].order)
    np.testing.assert_array_equal(
        np.take_along_axis(agents[0].order, agents[0].inverse, axis=1), np.tile(np.arange(8), (16, 1))
    )


def test_the_policy_is_the_inner_policy_on_the_bandits_arms():
    """p(arm order[j]) = the inner algorithm's p_j; the configuration rebuilds the wrapper."""
    agent = ShuffledArms({"name": "ucb", "temperature": 0.3})  # a softmax of UCB: deterministic, not one-hot
    arms = np.eye(4)
    agent.reset(num_arms=4, batch_size=3, rng=np.random.default_rng(2))
    for arm, reward in [(0, 1.0), (2, 0.0), (1, 1.0)]:
        agent.update(np.full(3, arm), np.full(3, reward), np.broadcast_to(arms, (3, 4, 4)))
    outer = agent.policy(np.broadcast_to(arms, (3, 4, 4)))
    inner = agent.inner.policy_batch(np.broadcast_to(arms, (3, 4, 4)))
    np.testing.assert_allclose(np.take_along_axis(outer, agent.order, axis=1), inner)
    assert not np.allclose(outer, inner)  # the orders are not the identity here: the mapping is exercised
    assert make_agent(agent.config()).config() == agent.config()
