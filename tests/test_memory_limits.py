"""The memory guard and the compact DarkRoom batch, measured (estimates, not allocations); inputs far beyond any prior.

Each test asserts the error type and the message, or the memory a batch takes.
"""

import tracemalloc

import gymnasium as gym
import numpy as np

import icrl_gym  # noqa: F401  (registers the environments)
from agents import make_agent
from icrl_gym.envs import MDPBatch, backward_induction, dark_room_spec
from icrl_gym.envs.dark_room import DarkRoomVectorEnv
from icrl_gym.envs.linear_bandit import LinearBanditEnv
from icrl_gym.envs.mdp_env import TabularMDPEnv
from icrl_gym.envs.validation import MEMORY_ENV, MemoryLimitError, max_memory_bytes, memory_limit
from tests.helpers import raises


# ----------------------------------------------------------------------------- memory
def test_a_billion_arms_is_refused_before_allocating_with_the_estimate():
    tracemalloc.start()
    try:
        with raises(MemoryLimitError, "a bandit environment needs about", "GiB (estimate), above the limit of 4 GiB"):
            LinearBanditEnv(num_actions=10**9)
        with raises(MemoryLimitError, "ucb for a batch of 1 needs about", "GiB"):
            make_agent("ucb").reset(batch_size=1, dim=5, num_actions=10**9)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20
    assert issubclass(MemoryLimitError, ValueError)


def test_the_memory_limit_has_explicit_overrides(monkeypatch):
    spec_bytes = LinearBanditEnv(num_actions=10**5).bandit_spec.memory_bytes(1)  # about 10 MB
    assert 2**20 < spec_bytes < 2**30
    with raises(MemoryLimitError, "above the limit of 0.001 GiB"):
        LinearBanditEnv(num_actions=10**5, max_memory_gib=0.001)
    monkeypatch.setenv(MEMORY_ENV, "0.001")
    with raises(MemoryLimitError, "above the limit of 0.001 GiB"):
        LinearBanditEnv(num_actions=10**5)
    LinearBanditEnv(num_actions=10**5, max_memory_gib=1).reset(seed=0)  # the argument wins over the variable
    with memory_limit(1.0):  # and a block raises it for everything built inside (here: the batch at reset)
        assert max_memory_bytes() == 2**30
        env = LinearBanditEnv(num_actions=10**5)
    with raises(MemoryLimitError, "a batch of 1 bandit instances needs about"):
        env.reset(seed=0)  # outside the block: the variable's limit again
    agent = make_agent("ucb")
    with raises(MemoryLimitError, "ucb for a batch of 1,000"):
        agent.reset(batch_size=1000, dim=5, num_actions=10**5)
    agent.max_memory_gib = 64  # an algorithm's own override: nothing is allocated beyond the need (8 MB here)
    agent.reset(batch_size=1, dim=5, num_actions=10**5)
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with raises(ValueError, f"{MEMORY_ENV} must be a finite number of GiB > 0, got 'lots'"):
        max_memory_bytes()
    with raises(ValueError, "max_memory_gib must be a finite number > 0, got -1"):
        LinearBanditEnv(max_memory_gib=-1)


def test_a_huge_dark_room_or_mdp_is_refused_with_its_estimate():
    with raises(MemoryLimitError, "a dark_room MDP environment needs about", "GiB"):
        gym.make("ICRL-DarkRoom-v0", size=10**5)
    with raises(MemoryLimitError, "a vector environment of 1,000 random MDP runs needs about"):
        gym.make_vec("ICRL-TabularMDP-v0", num_envs=1000, num_states=500, vectorization_mode="vector_entry_point")
    with raises(MemoryLimitError, "ucbvi for a batch of 20,000"):
        make_agent("ucbvi").reset(DarkRoomVectorEnv(num_envs=20_000).reset(seed=0)[1])


def test_ten_thousand_dark_rooms_fit_in_a_few_hundred_megabytes():
    """Before: a dense (B, S, A, S) cumulative P and (B, H, S, A) Q* (8.5 GB at B = 10,000); now about 120 MB."""
    tracemalloc.start()
    try:
        env = DarkRoomVectorEnv(num_envs=10_000)
        obs, info = env.reset(seed=0)
        total = 0.0
        for _ in range(30):
            obs, reward, *_ = env.step(np.full(10_000, 3))
            total += reward.sum()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert obs.shape == (10_000, 200) and info["P"].shape == (10_000, 1, 100, 5, 100)


def test_the_compact_dark_room_equals_the_dense_instance_it_stands_for():
    spec = dark_room_spec(size=4, horizon=7, episodes=3)
    compact = MDPBatch(spec, 12, np.random.default_rng(0))
    dense = MDPBatch(spec, 12, np.random.default_rng(1), {"P": compact.P, "R": compact.R, "mu": compact.mu})
    q, v = backward_induction(np.array(compact.P), compact.R, spec.horizon)
    np.testing.assert_array_equal(np.asarray(compact.q_star), q)
    np.testing.assert_array_equal(compact.q_star[np.arange(12), 3, compact.state], q[np.arange(12), 3, compact.state])
    np.testing.assert_array_equal(compact.v_star, dense.v_star)
    np.testing.assert_array_equal(compact.R.sum(axis=(1, 3)), 5 * np.eye(16)[compact.goal])
    compact.rng, dense.rng = np.random.default_rng(7), np.random.default_rng(7)
    actions = np.random.default_rng(3)
    while not compact.done:
        a = actions.integers(0, 5, size=12)
        x, y = compact.step(a), dense.step(a)
        for key in ("reward", "expected_reward", "state", "next_state"):
            np.testing.assert_array_equal(x[key], y[key])
    assert dense.done


def test_dense_mdp_batches_no_longer_keep_a_cumulative_copy_of_p():
    env = TabularMDPEnv(num_states=4, num_actions=2, horizon=3, episodes=1)
    env.reset(seed=0)
    assert not any(
        isinstance(v, np.ndarray) and v.shape == env._batch.P.shape for k, v in vars(env._batch).items() if k != "_P"
    )


def test_observations_and_rewards_far_beyond_any_prior_are_refused_before_they_overflow():
    env = gym.make("ICRL-LinearBandit-v0").unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent("linucb")
    agent.reset(info)
    huge = obs.astype(np.float64)
    huge[3] = 1e300
    with raises(ValueError, "observation must be finite with magnitude <= 1e+50, got 1e+300 at index [0, 0, 3]"):
        agent.act(huge)
    agent.act(obs)
    with raises(ValueError, "rewards must be finite with magnitude <= 1e+50, got -1e+60"):
        agent.update(0, -1e60)


def test_learned_agents_refuse_rewards_their_float32_network_cannot_take():
    from agents.learned.transformer import TransformerAgent
    from icrl_gym.models.transformer import BanditTransformer, TransformerConfig

    model = BanditTransformer(TransformerConfig(n_layer=1, n_head=1, n_embd=8, dim=3, num_actions=3, horizon=8))
    agent = TransformerAgent.from_model(model.eval(), seed=0)
    env = gym.make("ICRL-BernoulliBandit-v0", num_arms=3, horizon=8).unwrapped
    obs, info = env.reset(seed=0)
    agent.reset(info)
    agent.act(obs)
    with raises(ValueError, "rewards must be finite with magnitude <= 1e+06, got -9.2e+18"):
        agent.update(0, -9.2e18)  # found by the fuzzer: the layer norms overflowed, the policy became NaN
    assert np.isfinite(agent.policy(obs)).all()


def test_as_float_array_builds_its_message_only_for_bad_input():
    """The check runs on every observation and reward: formatting the value (a repr of 50,000 floats
    per step, 8% of a 1,000-instance rollout when it was eager) must wait for an error."""
    from icrl_gym.envs.validation import as_float_array

    class NoRepr(np.ndarray):
        def __repr__(self):
            raise AssertionError("repr() of a valid input")

    good = np.arange(6.0).reshape(2, 3).view(NoRepr)
    out = as_float_array("observation", good)
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3))
    plain = np.arange(3.0)
    assert as_float_array("reward", plain) is plain  # float64 in, no copy (as np.asarray)
    with raises(TypeError, "reward must be an array of numbers, got str '1.0'"):
        as_float_array("reward", "1.0")


def test_a_huge_integer_concentration_is_stored_as_a_float_and_draws_dirichlet_rows():
    # 10**30 passes the range check; as a Python int numpy would build an object array and fail
    env = TabularMDPEnv(num_states=4, num_actions=2, horizon=3, episodes=1, concentration=10**30)
    assert type(env.mdp_spec.concentration) is float
    _, info = env.reset(seed=0)
    P = np.asarray(info["P"])
    assert np.allclose(P.sum(-1), 1.0) and np.allclose(P, 0.25, atol=1e-6)  # c -> inf: uniform rows
