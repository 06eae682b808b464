"""A learned agent asked at other observations of a step before the right one plays exactly as one never asked.

Every shipped model's cache takes a step back (``mark`` / ``rewind``), so a second ``act`` or
``policy`` before ``update`` is answered for its own observation and the cache holds every step
once: the policies of the whole run, and so every later action, equal those of a twin that only
saw the right observations (bit for bit, on batches of runs and across episode boundaries).
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents import make_agent
from icrl_gym.algorithm import MDPAgent
from icrl_gym.models.generalist import GeneralistConfig, GeneralistTransformer
from icrl_gym.models.policy import EnvInfo

LEARNED = {
    "bernoulli-generalist": ("generalist", "ICRL-BernoulliBandit-v0", {"horizon": 12}, 12),
    "linear-generalist-v1": ("linear_generalist", "ICRL-LinearBandit-v0", {"horizon": 12}, 12),
    "linear-bandit-ad-linucb": ("transformer", "ICRL-LinearBandit-v0", {"horizon": 12}, 12),
    "tabular-mdp-generalist": ("mdp_generalist", "ICRL-TabularMDP-v0", {"horizon": 3, "episodes": 4}, 12),
    "tabular-mdp-dpt-psrl-uniform": ("mdp_transformer", "ICRL-TabularMDP-v0", {"horizon": 10, "episodes": 2}, 20),
}
"""Shipped checkpoint -> (agent name, environment, its sizes, the steps of a run)."""


def _others(agent, obs):
    """Two other observations of the same step: every run moved to another state (MDP), or its arms rolled."""
    if isinstance(agent, MDPAgent):
        S = agent.num_states
        states = obs[:, :S].argmax(axis=1)
        out = []
        for shift in (1, 2):
            moved = obs.copy()
            moved[:, :S] = np.eye(S)[(states + shift) % S]
            out.append(moved)
        return out
    arms = obs.reshape(obs.shape[0], agent.num_actions, -1)
    return [np.roll(arms, shift, axis=1).reshape(obs.shape) for shift in (1, 2)]


@pytest.mark.parametrize("ckpt", list(LEARNED))
def test_other_observations_first_change_nothing(ckpt):
    name, env_id, sizes, steps = LEARNED[ckpt]
    venv = gym.make_vec(env_id, num_envs=3, vectorization_mode="vector_entry_point", **sizes)
    obs, info = venv.reset(seed=4)
    asked, twin = (make_agent({"name": name, "checkpoint": ckpt}, seed=0) for _ in range(2))
    asked.reset(info)
    twin.reset(info)
    answered = 0
    for _ in range(steps):
        for other in _others(asked, obs):
            try:
                asked.policy(other)
                answered += 1
            except ValueError as err:  # the Bernoulli generalist reads one-hot arms e_1..e_K only
                assert "one-hot" in str(err)
        expected = twin.policy(obs)
        np.testing.assert_array_equal(asked.policy(obs), expected)
        actions = expected.argmax(axis=1)
        obs_next, rewards, *_ = venv.step(actions)
        for agent in (asked, twin):
            agent.update(actions, rewards, obs=obs)
        obs = obs_next
    assert answered == (0 if name == "generalist" else 2 * steps)


def test_a_second_observation_is_answered_for_itself():
    env = gym.make("ICRL-LinearBandit-v0", horizon=5).unwrapped
    obs, info = env.reset(seed=0)
    agent, fresh = (make_agent({"name": "linear_generalist", "checkpoint": "linear-generalist-v1"}) for _ in range(2))
    agent.reset(info)
    fresh.reset(info)
    rolled = np.roll(obs.reshape(agent.num_actions, -1), 1, axis=0).reshape(obs.shape)
    agent.act(obs)
    np.testing.assert_array_equal(agent.policy(rolled), fresh.policy(rolled))


def test_the_grouped_generalist_cache_rewinds_its_counts_exactly():
    model = GeneralistTransformer(GeneralistConfig())
    cache = model.new_cache(4, EnvInfo(num_actions=3, horizon=6))
    model.step(cache, None, None, None)
    model.step(cache, None, torch.tensor([0, 2, 1, 2]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
    counts, totals, steps = cache.counts.clone(), cache.totals.clone(), cache.steps
    mark = cache.mark()
    model.step(cache, None, torch.tensor([1, 1, 0, 0]), torch.ones(4))
    cache.rewind(mark)
    assert cache.steps == steps and torch.equal(cache.counts, counts) and torch.equal(cache.totals, totals)


def test_a_cache_that_cannot_take_a_step_back_refuses_the_second_observation(monkeypatch):
    from icrl_gym.models.linear_generalist import LinearGeneralistCache

    class PlainCache(LinearGeneralistCache):
        mark = None  # no longer a RewindableCache

    monkeypatch.setattr("icrl_gym.models.linear_generalist_core.LinearGeneralistCache", PlainCache)
    env = gym.make("ICRL-LinearBandit-v0", horizon=5).unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent({"name": "linear_generalist", "checkpoint": "linear-generalist-v1"})
    agent.reset(info)
    first = agent.act(obs)
    rolled = np.roll(obs.reshape(agent.num_actions, -1), 1, axis=0).reshape(obs.shape)
    with pytest.raises(RuntimeError, match=r"another observation.*cannot take a step back.*update\(\)"):
        agent.act(rolled)
    assert agent.act(obs) == first  # the step it decided is kept: update() goes on from it
