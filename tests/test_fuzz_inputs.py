"""Property-based fuzzing of every environment and every algorithm at its boundary (hypothesis).

Property: a call either succeeds with valid, finite outputs (observations in the observation space,
finite rewards and infos, actions in [0, A), probability vectors), or raises ``ValueError`` /
``TypeError`` -- never ``IndexError``, ``KeyError``, ``OverflowError``, ``ZeroDivisionError``,
``AssertionError``, and never a NaN passed on silently.  Each property runs a fast profile by
default and a 1,000-example profile marked ``slow`` (``pytest -m slow tests/test_fuzz_inputs.py``).
Everything runs under a 0.05 GiB memory limit, so that absurd sizes are refused by the guard (the
property then holds with a ``ValueError``) instead of being allocated.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import icrl_gym
from agents.learned.mdp_generalist import MDPGeneralistAgent
from agents.learned.mdp_transformer import MDPTransformerAgent
from agents.learned.transformer import TransformerAgent
from icrl_gym.algorithm import Agent, MDPAgent
from icrl_gym.envs.validation import memory_limit
from icrl_gym.models.mdp_generalist import MDPGeneralist, MDPGeneralistConfig
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig
from icrl_gym.registry import agent_class, agent_names, make_agent
from tests.helpers import LINEAR_EXPERTS, random_weights

ACCEPTED = (ValueError, TypeError)
"""The errors a bad input may raise (a ``CheckpointError`` or ``MemoryLimitError`` is a ``ValueError``)."""
LIMIT_GIB = 0.05

FAST = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
SLOW = settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def fast_and_slow(test: Any, **strategies: Any) -> tuple[Any, Any]:
    """The property under the fast profile, and again with 1,000 examples marked slow."""
    return FAST(given(**strategies)(test)), pytest.mark.slow(SLOW(given(**strategies)(test)))


# ----------------------------------------------------------------------------- strategies
ODD_INTS = st.sampled_from([-(2**63), -(10**12), -1, 0, 10**12, 2**63, 10**30])
ODD_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 1e300, 2.5])
)
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    ODD_INTS,
    ODD_FLOATS,
    st.text(max_size=3),
    st.sampled_from([[1, 2], (3,), {"a": 1}, np.int64(3), np.float32(0.5), np.array([1.0, 2.0]), b"x"]),
)


def sizes(low: int = 1, high: int = 6) -> st.SearchStrategy:
    """Mostly small valid sizes, sometimes anything."""
    return st.one_of(st.integers(low - 2, high), st.integers(low - 2, high), WEIRD)


def numbers(low: float, high: float) -> st.SearchStrategy:
    """Mostly ordinary numbers of the range, sometimes anything."""
    return st.one_of(st.floats(low, high), st.floats(low, high), WEIRD)


def choices(*words: str) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(words), st.sampled_from(words), WEIRD)


def optional(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    return st.fixed_dictionaries({}, optional=fields)


ENV_KWARGS = {
    "ICRL-LinearBandit-v0": optional(
        {
            "dim": sizes(),
            "num_actions": sizes(),
            "horizon": sizes(),
            "noise_std": numbers(0.0, 3.0),
            "prior": choices("uniform", "gaussian", "beta"),
            "prior_low": numbers(-2.0, 0.5),
            "prior_high": numbers(0.5, 2.0),
            "prior_var": numbers(0.0, 3.0),
            "action_set": choices("fixed", "per_step"),
            "arms": choices("uniform", "gaussian", "one_hot"),
            "prior_a": numbers(0.0, 3.0),
            "prior_b": numbers(0.0, 3.0),
        }
    ),
    "ICRL-BernoulliBandit-v0": optional(
        {
            "num_arms": sizes(),
            "horizon": sizes(),
            "prior": choices("uniform", "beta", "gaussian"),
            "prior_low": numbers(0.0, 0.5),
            "prior_high": numbers(0.5, 1.0),
            "prior_a": numbers(0.0, 3.0),
            "prior_b": numbers(0.0, 3.0),
            "dim": sizes(),
            "num_actions": sizes(),
        }
    ),
    "ICRL-TabularMDP-v0": optional(
        {
            "num_states": sizes(),
            "num_actions": sizes(),
            "horizon": sizes(),
            "episodes": sizes(),
            "concentration": numbers(0.0, 3.0),
            "random_start": st.one_of(st.booleans(), WEIRD),
            "stationary": st.one_of(st.booleans(), WEIRD),
        }
    ),
    "ICRL-DarkRoom-v0": optional({"size": sizes(0, 5), "horizon": sizes(), "episodes": sizes()}),
}
assert set(ENV_KWARGS) == set(icrl_gym.ENV_IDS), "every registered environment is fuzzed"

ACTIONS = st.lists(st.one_of(st.integers(-2, 8), st.integers(-2, 8), WEIRD), max_size=6)


# ----------------------------------------------------------------------------- checks of the outputs
def _check_obs(space: gym.spaces.Box, obs: np.ndarray) -> None:
    assert np.all(np.isfinite(obs)), obs
    assert space.contains(obs), (space, obs)


def _check_info(info: dict) -> None:
    for key in ("w_star", "v_star", "expected_reward", "best_expected_reward", "regret", "P", "R", "mu"):
        if key in info:
            assert np.all(np.isfinite(np.asarray(info[key], dtype=np.float64))), (key, info[key])


def _construct(make: Any) -> Any:
    """The object ``make()`` builds, or None when it refused with an accepted error."""
    try:
        return make()
    except ACCEPTED:
        return None


# ----------------------------------------------------------------------------- environments
def _reset(make: Any, seed: int) -> Any:
    """The environment ``make()`` builds, reset with ``seed`` and its first observation and info checked (None
    when it refused with an accepted error)."""
    env = _construct(make)
    if env is not None:
        obs, info = env.reset(seed=seed)
        _check_obs(env.observation_space, obs)
        _check_info(info)
    return env


def _env_property(env_id: str, kwargs: dict, actions: list, seed: int) -> None:
    with memory_limit(LIMIT_GIB):
        env = _reset(lambda: gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped, seed)
        if env is None:
            return
        for action in actions:
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except ACCEPTED:
                continue
            except RuntimeError as err:  # a step after the end of the run: the documented state error
                assert "reset" in str(err)
                obs, info = env.reset()
                continue
            _check_obs(env.observation_space, obs)
            assert math.isfinite(reward) and isinstance(terminated, bool) and truncated is False
            _check_info(info)


def _vector_property(env_id: str, num_envs: Any, kwargs: dict, actions: list, seed: int) -> None:
    with memory_limit(LIMIT_GIB):
        env = _reset(functools.partial(gym.make_vec, env_id, num_envs, "vector_entry_point", **kwargs), seed)
        if env is None:
            return
        for action in actions:
            batch = np.full(env.num_envs, action) if np.ndim(action) == 0 and action is not None else action
            try:
                obs, reward, terminated, truncated, info = env.step(batch)
            except ACCEPTED:
                continue
            _check_obs(env.observation_space, obs)
            assert np.all(np.isfinite(reward)) and reward.shape == (env.num_envs,)
            _check_info(info)


@pytest.mark.parametrize("env_id", icrl_gym.ENV_IDS)
def _env_case(env_id: str, data: st.DataObject) -> None:
    draw = data.draw
    _env_property(env_id, draw(ENV_KWARGS[env_id]), draw(ACTIONS), draw(st.integers(0, 2**32)))


@pytest.mark.parametrize("env_id", icrl_gym.ENV_IDS)
def _vector_case(env_id: str, data: st.DataObject) -> None:
    draw = data.draw
    _vector_property(env_id, draw(sizes(1, 4)), draw(ENV_KWARGS[env_id]), draw(ACTIONS), draw(st.integers(0, 2**32)))


test_env_constructors_and_steps, test_env_constructors_and_steps_slow = fast_and_slow(_env_case, data=st.data())
test_vector_env_constructors_and_steps, test_vector_env_constructors_and_steps_slow = fast_and_slow(
    _vector_case, data=st.data()
)


@pytest.mark.parametrize("env_id", icrl_gym.ENV_IDS)
def test_reset_options_of_the_wrong_kind_are_refused(env_id):
    env = gym.make(env_id).unwrapped
    _, info = env.reset(seed=0)
    for options in ("x", [1], {"nope": 1}, {"w_star": "x"}, {"P": None, "R": None, "mu": None}):
        with pytest.raises(ACCEPTED):
            env.reset(options=options)


# ----------------------------------------------------------------------------- algorithms
LEARNED = {"transformer", "mdp_transformer", "meta_rl", "generalist", "linear_generalist", "mdp_generalist"}
"""Registered algorithms that play a checkpoint (fuzzed below through tiny in-memory models)."""
SMALL = {
    "ICRL-LinearBandit-v0": {"dim": 3, "num_actions": 4, "horizon": 8},
    "ICRL-BernoulliBandit-v0": {"num_arms": 3, "horizon": 8},
    "ICRL-TabularMDP-v0": {"num_states": 3, "num_actions": 2, "horizon": 3, "episodes": 3},
    "ICRL-DarkRoom-v0": {"size": 3, "horizon": 3, "episodes": 3},
}
LINEAR = {*LINEAR_EXPERTS, "optimal", "uniform", "model_averaged_bayes_ucb", "safety_net"}
SPECS = {
    "gittins": {"name": "gittins", "horizon": 8},
    "family_gittins": {"name": "family_gittins", "horizon": 8},
    "safety_net": {"name": "safety_net", "inner": {"name": "linucb"}},
    "mixture": {"name": "mixture", "components": [{"name": "bernoulli_ts"}, {"name": "ucb"}], "weights": [0.5, 0.5]},
    "shuffled_arms": {"name": "shuffled_arms", "inner": {"name": "bernoulli_ts"}},
    "fresh_arm_floor": {"name": "fresh_arm_floor", "inner": {"name": "bernoulli_ts"}},
    "posterior_optimal_action": {
        "name": "posterior_optimal_action",
        "posterior": {"name": "psrl", "posterior_samples": 4},
    },
}


def _env_of(name: str) -> str:
    if issubclass(agent_class(name), MDPAgent):
        return "ICRL-DarkRoom-v0" if name == "dark_room_psrl" else "ICRL-TabularMDP-v0"
    return "ICRL-LinearBandit-v0" if name in LINEAR else "ICRL-BernoulliBandit-v0"


def _learned(name: str) -> Agent:
    if name == "transformer":
        cfg = TransformerConfig(n_layer=1, n_head=1, n_embd=8, dim=3, num_actions=3, horizon=8)
        return TransformerAgent.from_model(random_weights(BanditTransformer(cfg)), seed=0)
    if name == "mdp_generalist":
        return MDPGeneralistAgent.from_model(random_weights(MDPGeneralist(MDPGeneralistConfig(d_model=8))), seed=0)
    small = SMALL["ICRL-TabularMDP-v0"]
    cfg = MDPTransformerConfig(n_layer=1, n_head=1, n_embd=8, **small)
    return MDPTransformerAgent.from_model(random_weights(MDPTransformer(cfg)), seed=0)


CASES = [(name, _env_of(name)) for name in agent_names() if name not in LEARNED] + [
    ("transformer", "ICRL-BernoulliBandit-v0"),
    ("mdp_transformer", "ICRL-TabularMDP-v0"),
    ("mdp_generalist", "ICRL-TabularMDP-v0"),
]


@functools.cache
def _agent(name: str) -> Agent:
    return _learned(name) if name in LEARNED else make_agent(SPECS.get(name, name), seed=0)


def _transform(obs: np.ndarray, how: tuple) -> Any:
    """A valid observation, broken (or not) as ``how`` says."""
    kind = how[0]
    if kind == "entry":
        out = obs.astype(np.float64).copy()
        out.reshape(-1)[how[1] % out.size] = how[2]
        return out
    if kind == "shape":
        return np.resize(obs, max(obs.size + how[1], 0))
    if kind == "batch":
        return np.stack([obs] * how[1]) if how[1] else obs[None][:0]
    if kind == "zeros":
        return np.zeros_like(obs)
    if kind == "object":
        return how[1]
    if kind == "list":
        return obs.tolist()
    return obs


OBSERVATIONS = st.one_of(
    st.just(("valid",)),
    st.just(("valid",)),
    st.tuples(st.just("entry"), st.integers(0, 10**6), ODD_FLOATS),
    st.tuples(st.just("entry"), st.integers(0, 10**6), st.sampled_from([0.0, 1.0, -1.0, 0.5])),
    st.tuples(st.just("shape"), st.integers(-3, 3)),
    st.tuples(st.just("batch"), st.integers(0, 3)),
    st.just(("zeros",)),
    st.just(("list",)),
    st.tuples(st.just("object"), WEIRD),
)
REWARDS = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-2.0, 2.0), ODD_FLOATS, WEIRD)
AGENT_ACTIONS = st.one_of(st.none(), st.integers(-2, 6), WEIRD)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["act", "policy"]), OBSERVATIONS),
        st.tuples(st.just("update"), AGENT_ACTIONS, REWARDS),
        st.tuples(st.just("update_batch"), AGENT_ACTIONS, REWARDS),
    ),
    min_size=1,
    max_size=4,
)


def _check_action(agent: Agent, action: Any) -> None:
    assert isinstance(action, int) and 0 <= action < agent.num_actions, action


def _check_policy(agent: Agent, probs: np.ndarray) -> None:
    assert probs.shape == (agent.num_actions,) and np.all(np.isfinite(probs)) and np.all(probs >= 0), probs
    assert np.isclose(probs.sum(), 1.0), probs


def _update_batch(agent: Agent, obs: np.ndarray, action: Any, reward: Any) -> None:
    if isinstance(agent, MDPAgent):
        states, h = agent._decode(obs)
        agent.update_batch(states, h, np.array([action]), np.array([reward]), np.array([-1]))
    else:
        agent.update_batch(agent._decode(obs), np.array([action]), np.array([reward]))


def _agent_property(name: str, env_id: str, operations: list, seed: int) -> None:
    agent = _agent(name)
    with memory_limit(LIMIT_GIB):
        env = gym.make(env_id, **SMALL[env_id]).unwrapped
        obs, info = env.reset(seed=seed)
        agent.reset(info)
        for op in operations:
            try:
                if op[0] in ("act", "policy"):
                    seen = _transform(obs, op[1])
                    if op[0] == "act":
                        _check_action(agent, agent.act(seen))
                    else:
                        _check_policy(agent, agent.policy(seen))
                    continue
                valid = agent.act(obs)  # update() feeds back the outcome of acting at obs
                action = valid if op[1] is None else op[1]
                if op[0] == "update":
                    agent.update(action, op[2])
                else:
                    _update_batch(agent, obs, action, op[2])
                obs, *_ = env.step(valid)  # the environment moves on as if the valid action was taken
            except ACCEPTED:
                continue
        # whatever was refused or accepted, the algorithm still acts validly (no NaN passed on silently)
        _check_policy(agent, agent.policy(obs))
        _check_action(agent, agent.act(obs))


@pytest.mark.parametrize("name, env_id", CASES, ids=[c[0] for c in CASES])
def _agent_case(name: str, env_id: str, data: st.DataObject) -> None:
    _agent_property(name, env_id, data.draw(OPERATIONS), data.draw(st.integers(0, 2**32)))


test_agent_inputs, test_agent_inputs_slow = fast_and_slow(_agent_case, data=st.data())


def test_every_registered_algorithm_is_fuzzed_or_plays_a_checkpoint():
    fuzzed = {name for name, _ in CASES}
    assert set(agent_names()) - fuzzed <= LEARNED
