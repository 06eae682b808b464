"""Every input probe of the reliability issue ends in a clear error that names the argument and the value.

One test per probe (parametrised over its variants); each asserts the error type and the message.
"""

import re

import gymnasium as gym
import numpy as np
import pytest

import icrl_gym  # noqa: F401  (registers the environments)
from agents import make_agent
from icrl_gym.checkpoint import CheckpointError
from icrl_gym.envs.dark_room import DarkRoomVectorEnv
from icrl_gym.envs.linear_bandit import LinearBanditVectorEnv
from tests.helpers import LINEAR_EXPERTS, raises

NAN, INF = float("nan"), float("inf")
MDP_AGENTS = ["mdp_uniform", "mdp_optimal", "ucbvi", "psrl", "posterior_optimal_action"]
SMALL_MDP = dict(num_states=3, num_actions=2, horizon=4, episodes=2)


def _mdp(env_id="ICRL-TabularMDP-v0", **kwargs):
    env = gym.make(env_id, **kwargs).unwrapped
    obs, info = env.reset(seed=0)
    return env, obs, info


def _mdp_agent(name, env_id="ICRL-TabularMDP-v0", **kwargs):
    env, obs, info = _mdp(env_id, **kwargs)
    agent = make_agent(name, seed=0)
    agent.reset(info)
    return env, obs, info, agent


# ----------------------------------------------------------------------------- silently wrong before
@pytest.mark.parametrize("value", [NAN, INF, -1.0, 0.0])
def test_linear_bandit_gaussian_prior_var_must_be_finite_positive(value):
    with raises(ValueError, "prior_var must be a finite number > 0", f"got {value!r}"):
        gym.make("ICRL-LinearBandit-v0", prior="gaussian", prior_var=value)


@pytest.mark.parametrize("field", ["horizon", "dim", "num_actions"])
@pytest.mark.parametrize("value", [2.5, 3.0, "5", None, True])
def test_bandit_sizes_must_be_integers(field, value):
    with raises(ValueError, f"{field} must be an integer, got {value!r}"):
        gym.make("ICRL-LinearBandit-v0", **{field: value})


@pytest.mark.parametrize("value", [NAN, INF, -INF, 0.0, -1.0, "1"])
def test_tabular_mdp_concentration_must_be_finite_positive(value):
    with raises(ValueError, "concentration must be a finite number > 0", f"got {value!r}"):
        gym.make("ICRL-TabularMDP-v0", concentration=value)


def _negative_p(o):
    o["P"][0, 0, 0, 0], o["P"][0, 0, 0, 1] = -0.5, o["P"][0, 0, 0, 1] + o["P"][0, 0, 0, 0] + 0.5


def _p_row_off(o):
    o["P"][0, 0, 1] *= 1.001


def _nan_r(o):
    o["R"][0, 0, 0] = NAN


def _r_above_one(o):
    o["R"][0, 0, 0] = 1.5


def _negative_mu(o):
    o["mu"][0], o["mu"][1] = 1.5, -0.5


def _nan_mu(o):
    o["mu"][0] = NAN


@pytest.mark.parametrize(
    "corrupt, fragments",
    [
        (_negative_p, ("P must be a probability distribution", "P[0, 0, 0, 0, 0] = -0.5 < 0")),
        (_p_row_off, ("P must be a probability distribution", "P[0, 0, 0, 1] sum to 1.001")),
        (_nan_r, ("mean rewards R must be finite, got nan at index [0, 0, 0, 0]",)),
        (_r_above_one, ("mean rewards R must lie in [0, 1], got R[0, 0, 0, 0] = 1.5",)),
        (_negative_mu, ("mu must be a probability distribution", "mu[0, 1] = -0.5 < 0")),
        (_nan_mu, ("mu must be finite, got nan at index [0, 0]",)),
    ],
    ids=["P<0", "P-rows", "R-nan", "R>1", "mu<0", "mu-nan"],
)
def test_mdp_reset_options_must_be_an_mdp(corrupt, fragments):
    env, _, info = _mdp()
    options = {key: np.array(info[key], dtype=np.float64) for key in ("P", "R", "mu")}
    corrupt(options)
    with raises(ValueError, *fragments):
        env.reset(options=options)


def test_mdp_reset_options_must_be_arrays_of_numbers():
    env, _, info = _mdp()
    with raises(TypeError, "P must be an array of numbers", "str"):
        env.reset(options={"P": "dense", "R": info["R"], "mu": info["mu"]})
    with raises(TypeError, "reset options must be a dict", "list"):
        env.reset(options=[("P", info["P"])])


@pytest.mark.parametrize("reward", [NAN, INF, -INF])
def test_linucb_refuses_a_non_finite_reward_and_keeps_exploring(reward):
    env = gym.make("ICRL-LinearBandit-v0").unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent("linucb")
    agent.reset(info)
    agent.act(obs)
    with raises(ValueError, "rewards must be finite", f"got {reward!r}"):
        agent.update(0, reward)
    a = agent.act(obs)  # the refused outcome left no trace: the index is still finite
    agent.update(a, 1.0)
    assert np.isfinite(agent.index(obs.reshape(1, 10, 5).astype(np.float64))).all()


BANDIT_AGENTS = [
    *LINEAR_EXPERTS,
    "ucb",
    "emp",
    "uniform",
    "optimal",
]
BERNOULLI_AGENTS = [
    "bernoulli_ts",
    "kl_ucb",
    "bayes_ucb",
    "bernoulli_bayes_optimal",
    {"name": "gittins", "horizon": 10},
]


@pytest.mark.parametrize("reward", [NAN, INF])
@pytest.mark.parametrize(
    "spec, env_id",
    [(name, "ICRL-LinearBandit-v0") for name in BANDIT_AGENTS]
    + [(spec, "ICRL-BernoulliBandit-v0") for spec in BERNOULLI_AGENTS]
    + [(name, "ICRL-TabularMDP-v0") for name in MDP_AGENTS]
    + [("dark_room_psrl", "ICRL-DarkRoom-v0")],
    ids=str,
)
def test_every_agent_refuses_non_finite_rewards_in_update_and_update_batch(spec, env_id, reward):
    kwargs = {"horizon": 10} if "Linear" in env_id else ({"size": 3, "horizon": 5} if "Dark" in env_id else {})
    kwargs = {"num_arms": 3, "horizon": 10} if "Bernoulli" in env_id else kwargs  # a small Bayes-optimal table
    env = gym.make(env_id, **kwargs).unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent(spec, seed=0)
    agent.reset(info)
    a = agent.act(obs)
    with raises(ValueError, "rewards must be finite", f"got {reward!r}"):
        agent.update(a, reward)
    with raises(ValueError, "rewards must be finite", f"got {reward!r}"):
        if "Bandit" in env_id:
            agent.update_batch(obs.reshape(1, *env.bandit_spec.action_set_shape), np.array([a]), np.array([reward]))
        else:
            agent.update_batch(np.array([0]), 0, np.array([a]), np.array([reward]), np.array([1]))


@pytest.mark.parametrize(
    "spec", ["bernoulli_ts", "bayes_ucb", "bernoulli_bayes_optimal", {"name": "gittins", "horizon": 10}]
)
def test_beta_bernoulli_agents_refuse_rewards_other_than_0_and_1(spec):
    env = gym.make("ICRL-BernoulliBandit-v0", num_arms=3, horizon=10).unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent(spec)
    agent.reset(info)
    with raises(ValueError, "rewards must be 0 or 1", "got 0.5"):
        agent.update(agent.act(obs), 0.5)


def test_a_mixture_checks_its_components_rewards_before_any_sees_them():
    mixture = make_agent(
        {"name": "mixture", "components": [{"name": "uniform"}, {"name": "bernoulli_ts"}], "weights": [0.5, 0.5]}
    )
    env = gym.make("ICRL-BernoulliBandit-v0").unwrapped
    obs, info = env.reset(seed=0)
    mixture.reset(info)
    with raises(ValueError, "rewards must be 0 or 1", "got 0.5"):
        mixture.update(mixture.act(obs), 0.5)
    assert mixture.components[0].t == 0 and mixture.components[1].t == 0


@pytest.mark.parametrize("name", MDP_AGENTS)
def test_mdp_agents_refuse_an_all_zero_observation(name):
    _, obs, _, agent = _mdp_agent(name)
    with raises(ValueError, "not a one-hot state among S=5 followed by a one-hot step among H=10", "all zeros"):
        agent.act(np.zeros_like(obs))


@pytest.mark.parametrize("name", MDP_AGENTS)
def test_mdp_agents_refuse_an_observation_of_another_mdp_of_the_same_length(name):
    _, obs, _, agent = _mdp_agent(name)  # S=5, H=10
    other = gym.make("ICRL-TabularMDP-v0", num_states=10, horizon=5).unwrapped
    other_obs = np.zeros(15, np.float32)
    other_obs[[7, 10 + 2]] = 1.0  # state 7 of 10, step 2 of 5: the same length, another layout
    assert other.observation_space.contains(other_obs) and other_obs.shape == obs.shape
    with raises(ValueError, "not a one-hot state among S=5", "nonzero entries at [7, 12]"):
        agent.act(other_obs)


@pytest.mark.parametrize("name", MDP_AGENTS + ["dark_room_psrl"])
@pytest.mark.parametrize("action, shown", [(99, "got 99, outside the range"), (1.7, "got 1.7"), (-1, "got -1")])
def test_mdp_agents_refuse_actions_out_of_range_or_fractional(name, action, shown):
    env_id, kwargs = ("ICRL-DarkRoom-v0", {"size": 3}) if name == "dark_room_psrl" else ("ICRL-TabularMDP-v0", {})
    _, obs, info, agent = _mdp_agent(name, env_id, **kwargs)
    agent.act(obs)
    A = info["num_actions"]
    with raises(ValueError, f"actions must be integer action indices in [0, {A})", shown):
        agent.update(action, 0.0)
    with raises(ValueError, f"actions must be integer action indices in [0, {A})", shown):
        agent.update_batch(np.array([0]), 0, np.array([action]), np.array([0.0]), np.array([1]))


def test_mdp_batched_api_refuses_states_steps_and_next_states_out_of_range():
    _, _, _, agent = _mdp_agent("ucbvi")
    with raises(ValueError, "states must be integer state indices in [0, 5)", "got 5"):
        agent.act_batch(np.array([5]), 0)
    with raises(ValueError, "h must be <= 9, got 10"):
        agent.policy_batch(np.array([0]), 10)
    with raises(ValueError, "next_states must be integer states (-1: none) in [-1, 5)", "got 7"):
        agent.update_batch(np.array([0]), 0, np.array([0]), np.array([0.0]), np.array([7]))


def test_dark_room_psrl_refuses_a_tabular_mdp_at_reset():
    _, _, info = _mdp()
    agent = make_agent("dark_room_psrl")
    with raises(ValueError, "dark_room_psrl", "needs a DarkRoom environment", "got kind='random'"):
        agent.reset(info)
    random_moves = dict(info)
    del random_moves["model"]  # without the model, the moves themselves give it away
    with raises(ValueError, "dark_room_psrl needs deterministic, stationary moves"):
        agent.reset(random_moves)


# ----------------------------------------------------------------------------- obscure crashes before
@pytest.mark.parametrize("value, kind", [(2.5, TypeError), ("4", TypeError), (-1, ValueError), (0, ValueError)])
@pytest.mark.parametrize("make", [LinearBanditVectorEnv, DarkRoomVectorEnv], ids=["linear", "dark_room"])
def test_num_envs_must_be_a_positive_integer(make, value, kind):
    with raises(kind, "num_envs must be", f"got {value!r}" if kind is TypeError else f"got {value}"):
        make(num_envs=value)
    with raises(kind, "num_envs must be"):
        gym.make_vec("ICRL-LinearBandit-v0", num_envs=value, vectorization_mode="vector_entry_point")


@pytest.mark.parametrize("field, value", [("prior_high", INF), ("prior_low", -INF), ("prior_high", NAN)])
def test_uniform_prior_bounds_must_be_finite(field, value):
    with raises(ValueError, f"{field} must be a finite number, got {value!r}"):
        gym.make("ICRL-LinearBandit-v0", **{field: value})


@pytest.mark.parametrize(
    "value, shown",
    [(2.5, "must be an integer, got 2.5"), ("5", "must be an integer, got '5'"), (0, "must be >= 1, got 0")],
)
def test_bernoulli_num_arms_is_named_as_given_not_as_the_specs_dim(value, shown):
    """Found beside the probes: num_arms=2.5 was reported as 'dim must be an integer ...; num_actions ...'."""
    with raises(ValueError, f"num_arms {shown}") as err:
        gym.make("ICRL-BernoulliBandit-v0", num_arms=value)
    assert "dim" not in str(err.value)


@pytest.mark.parametrize("mean, index", [(1.5, 2), (-0.25, 4)])
def test_bernoulli_reset_options_show_the_arm_mean_outside_0_1(mean, index):
    """Found beside the probes: the message of a replayed instance with a mean outside [0, 1] showed no value."""
    env = gym.make("ICRL-BernoulliBandit-v0").unwrapped
    w_star = np.full(5, 0.5)
    w_star[index] = mean
    with raises(ValueError, "Bernoulli arm means w_star must lie in [0, 1]", f"got w_star[0, {index}] = {mean}"):
        env.reset(seed=0, options={"w_star": w_star})


@pytest.mark.parametrize("field", ["prior_high", "noise_std", "prior_var"])
def test_scales_beyond_1e100_are_refused_so_that_rewards_cannot_overflow(field):
    with raises(ValueError, f"{field} must be at most 1e+100 in magnitude, got 1e+300"):
        gym.make("ICRL-LinearBandit-v0", prior="gaussian" if field == "prior_var" else "uniform", **{field: 1e300})


@pytest.mark.parametrize("env_id", icrl_gym.ENV_IDS)
@pytest.mark.parametrize(
    "action, shown",
    [(INF, "got inf"), (-INF, "got -inf"), (NAN, "got nan"), (2.5, "got 2.5"), (10**20, "got 100000000000000000000")],
)
def test_step_refuses_non_integer_and_huge_actions_showing_the_value(env_id, action, shown):
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    with raises(ValueError, "actions must be integer", shown):
        env.step(action)
    assert "-9223372036854775808" not in shown


@pytest.mark.parametrize(
    "obs, kind", [(3.0, ValueError), (None, TypeError), ("obs", TypeError), ([[1, 2], [3]], TypeError)]
)
@pytest.mark.parametrize("name", ["linucb", "ucb", "mdp_uniform", "psrl"])
def test_agents_refuse_scalar_none_and_ragged_observations(name, obs, kind):
    env_id = "ICRL-TabularMDP-v0" if name in ("mdp_uniform", "psrl") else "ICRL-LinearBandit-v0"
    env = gym.make(env_id).unwrapped
    _, info = env.reset(seed=0)
    agent = make_agent(name)
    agent.reset(info)
    message = "observation of shape ()" if kind is ValueError else "observation must be an array of numbers"
    if obs is None:  # act() with no observation: only a K-armed bandit implies one
        message = "needs the action set" if name in ("linucb", "ucb") else "needs the observation"
    with raises(kind, message):
        agent.act(obs)
    with raises(kind, message):
        agent.policy(obs)


@pytest.mark.parametrize("name", ["linucb", "linear_ts"])
def test_bandit_agents_refuse_non_finite_observations(name):
    env = gym.make("ICRL-LinearBandit-v0").unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent(name)
    agent.reset(info)
    bad = obs.copy()
    bad[7] = NAN
    with raises(ValueError, "observation must be finite", "got nan at index [0, 1, 2]"):
        agent.act(bad)
    with raises(ValueError, "action sets must be finite", "got nan"):
        agent.act_batch(bad.reshape(1, 10, 5))


@pytest.mark.parametrize(("name", "env_id"), [("ucb", "ICRL-BernoulliBandit-v0"), ("linucb", "ICRL-LinearBandit-v0")])
@pytest.mark.parametrize("reward", ["1.0", b"1", np.array(["1.0"]), ["1.0"], [None]])
def test_bandit_agents_refuse_a_reward_that_is_text_or_none(name, env_id, reward):
    """numpy parses "1.0" as a float; the agents must not: a textual reward is a bug upstream."""
    env = gym.make(env_id).unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent(name)
    agent.reset(info)
    action = agent.act(obs)
    with raises(TypeError, "reward must be an array of numbers"):
        agent.update(action, reward)
    agent.update(action, 1.0)  # the refused call changed nothing: the agent goes on as a fresh one fed 1.0
    fresh = make_agent(name)
    fresh.reset(info)
    fresh.update(fresh.act(obs), 1.0)
    np.testing.assert_array_equal(agent.policy(obs), fresh.policy(obs))


@pytest.mark.parametrize("name", MDP_AGENTS)
def test_mdp_agents_name_the_shape_of_a_wrong_length_observation(name):
    _, _, _, agent = _mdp_agent(name)
    with raises(ValueError, "observation of shape (7,) does not match S=5 states + H=10 steps", "expected (15,)"):
        agent.act(np.zeros(7))


@pytest.mark.parametrize("name", MDP_AGENTS + ["dark_room_psrl"])
def test_mdp_agents_given_bandit_info_say_what_is_missing(name):
    _, info = gym.make("ICRL-LinearBandit-v0").unwrapped.reset(seed=0)
    with raises(ValueError, "needs the reset info of a tabular-MDP environment", "lacks ['v_star'"):
        make_agent(name).reset(info)


def test_bandit_agents_given_mdp_info_say_what_is_missing():
    _, _, info = _mdp()
    with raises(ValueError, "reset needs dim and num_actions"):
        make_agent("linucb").reset(info)


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ({"name": "transformer", "checkpoint": "bernoulli-ad-ucb"}, ("environment='bandit' in the checkpoint",)),
        ({"name": "meta_rl", "checkpoint": "bernoulli-ppo-statistics"}, ("environment='bandit' in the checkpoint",)),
        ({"name": "mdp_transformer", "checkpoint": "bernoulli-ad-ucb"}, ("holds a bandit_transformer",)),
    ],
    ids=["transformer", "meta_rl", "mdp_transformer"],
)
def test_a_bernoulli_checkpoint_on_an_mdp_environment_is_refused(spec, fragments):
    _, _, info = _mdp()
    with raises(CheckpointError, *fragments):
        make_agent(spec).reset(info)
    assert issubclass(CheckpointError, ValueError)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: make_agent("linucb", alpha=NAN), "alpha"),
        (lambda: make_agent("ucb", bonus=INF), "bonus"),
        (lambda: make_agent("psrl", posterior_samples=2.5), "posterior_samples"),
        (lambda: make_agent("ucbvi", temperature=-1.0), "temperature"),
        (lambda: make_agent("kl_ucb", iterations=0), "iterations"),
        (lambda: make_agent("linear_ts", noise_std=NAN), "noise_std"),
        (lambda: make_agent("gittins", horizon=-5), "horizon"),
    ],
    ids=["alpha", "bonus", "posterior_samples", "temperature", "iterations", "noise_std", "horizon"],
)
def test_agent_hyper_parameters_are_checked_at_construction(make, field):
    with pytest.raises((ValueError, TypeError), match=re.escape(field)):
        make()
