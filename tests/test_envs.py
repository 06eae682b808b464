import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import icrl_gym
from icrl_gym.envs import BanditSpec, BernoulliBanditEnv, LinearBanditEnv, LinearBanditVectorEnv

ENV_IDS = icrl_gym.ENV_IDS
BANDIT_IDS = ("ICRL-LinearBandit-v0", "ICRL-BernoulliBandit-v0")
VARIANTS = [(env_id, {}) for env_id in ENV_IDS] + [
    ("ICRL-LinearBandit-v0", {"arms": "gaussian"}),
    ("ICRL-LinearBandit-v0", {"arms": "gaussian", "action_set": "per_step"}),
    ("ICRL-LinearBandit-v0", {"prior": "beta", "prior_a": 2.0, "prior_b": 3.0}),
    ("ICRL-BernoulliBandit-v0", {"prior": "beta", "prior_a": 0.5, "prior_b": 2.0}),
    ("ICRL-BernoulliBandit-v0", {"prior": "skewed"}),
    ("ICRL-BernoulliBandit-v0", {"prior": "skewed_reversed"}),
    ("ICRL-LinearBandit-v0", {"prior": "sphere"}),
    ("ICRL-LinearBandit-v0", {"prior": "one_coordinate", "prior_var": 2.0}),
]
"""Every registered id with its defaults, plus the non-default priors and arm distributions."""
VARIANT_IDS = [env_id + "".join(f"-{k}={v}" for k, v in kw.items()) for env_id, kw in VARIANTS]


@pytest.mark.parametrize("env_id, kwargs", VARIANTS, ids=VARIANT_IDS)
def test_gymnasium_checker(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_checker_with_the_text_render(env_id):
    env = gym.make(env_id, render_mode="ansi")
    check_env(env.unwrapped, skip_render_check=False)
    env.reset(seed=0)
    env.step(1)
    frame = env.render()
    assert isinstance(frame, str) and "1" in frame.splitlines()[0]  # the header names the step or episode


@pytest.mark.parametrize("env_id, kwargs", VARIANTS, ids=VARIANT_IDS)
def test_sb3_checker_without_warnings(env_id, kwargs, recwarn):
    sb3_check_env(gym.make(env_id, **kwargs).unwrapped, warn=True)
    assert not [w for w in recwarn if "observation" in str(w.message).lower()]


def _rollout(env, seed, actions):
    obs, info = env.reset(seed=seed)
    trace = [obs, info.get("w_star", info.get("R"))]
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        trace += [obs, r, info.get("regret", info.get("expected_reward"))]
    return trace


@pytest.mark.parametrize("env_id, kwargs", VARIANTS, ids=VARIANT_IDS)
def test_same_seed_same_rollout(env_id, kwargs):
    env = gym.make(env_id, horizon=30, **kwargs)  # for the MDPs: 30 steps per episode
    actions = np.random.default_rng(0).integers(0, env.action_space.n, size=30)
    a, b = _rollout(env, 7, actions), _rollout(env, 7, actions)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    c = _rollout(env, 8, actions)
    assert not np.array_equal(a[1], c[1])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_roundtrip(env_id):
    env = gym.make(env_id)
    env.reset(seed=3)
    clone = pickle.loads(pickle.dumps(env))
    np.testing.assert_array_equal(env.step(0)[0], clone.step(0)[0])


@pytest.mark.parametrize("env_id", BANDIT_IDS)
def test_episode_is_one_run_and_regret_info(env_id):
    env = gym.make(env_id, horizon=12)
    obs, info = env.reset(seed=1)
    w = info["w_star"]
    arms = obs.reshape(env.action_space.n, -1)
    for t in range(12):
        obs, r, term, trunc, info = env.step(t % env.action_space.n)
        means = arms @ w
        assert info["expected_reward"] == pytest.approx(means[t % env.action_space.n])
        assert info["best_expected_reward"] == pytest.approx(means.max())
        assert info["regret"] >= 0
        assert term == (t == 11) and not trunc
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_linear_defaults_are_the_papers():
    env = gym.make("ICRL-LinearBandit-v0").unwrapped
    spec = env.bandit_spec
    assert (spec.dim, spec.num_actions, spec.horizon, spec.noise_std) == (5, 10, 200, 1.5)
    ws = np.stack([env.reset(seed=s)[1]["w_star"] for s in range(200)])
    assert ws.min() >= 0 and ws.max() <= 1
    obs = env.reset(seed=0)[0]
    assert obs.shape == (50,) and np.abs(obs).max() <= 1


def test_noise_level_and_bernoulli_rewards():
    env = LinearBanditEnv(horizon=2000)
    obs, info = env.reset(seed=0)
    noise = [env.step(0)[1] - info["w_star"] @ obs.reshape(10, 5)[0] for _ in range(2000)]
    assert np.std(noise) == pytest.approx(1.5, rel=0.05)
    benv = BernoulliBanditEnv()
    benv.reset(seed=0)
    rewards = {benv.step(1)[1] for _ in range(50)}
    assert rewards <= {0.0, 1.0}


def test_per_step_action_sets_change_and_gaussian_prior():
    env = LinearBanditEnv(action_set="per_step", prior="gaussian", prior_var=4.0, horizon=5)
    obs0, info = env.reset(seed=0)
    obs1 = env.step(0)[0]
    assert not np.array_equal(obs0, obs1)
    ws = np.stack([env.reset(seed=s)[1]["w_star"] for s in range(400)])
    assert ws.std() == pytest.approx(2.0, rel=0.1)


def test_replay_instance_through_options():
    env = LinearBanditEnv()
    obs, info = env.reset(seed=5)
    obs2, info2 = env.reset(seed=99, options={"w_star": info["w_star"], "action_set": obs.reshape(10, 5)})
    np.testing.assert_allclose(obs2, obs)
    np.testing.assert_allclose(info2["w_star"], info["w_star"])
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"w": 1})
    with pytest.raises(ValueError, match="w_star has shape"):
        env.reset(options={"w_star": np.zeros(3)})


@pytest.mark.parametrize("bad", [10, -1, 2.5, "a", np.array([1, 2])])
def test_bad_actions_are_rejected(bad):
    env = LinearBanditEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step(bad)


def test_step_before_reset():
    with pytest.raises(RuntimeError, match="reset"):
        LinearBanditEnv().step(0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(noise_std=-1.0), "noise_std"),
        (dict(num_actions=0), "num_actions"),
        (dict(prior="laplace"), "prior must be one of .*'laplace'"),
        (dict(arms="simplex"), "arms must be one of .*'simplex'"),
        (dict(noise_std=float("nan")), "noise_std must be a finite number >= 0, got nan"),
        (dict(prior_high=float("inf")), "prior_high must be a finite number, got inf"),
        (dict(prior="beta", prior_a=0.0), "prior_a must be a finite number > 0, got 0.0"),
        (dict(prior="beta", prior_b=-1.0), "prior_b must be a finite number > 0, got -1.0"),
        (dict(prior_var=float("nan")), "prior_var"),
        (dict(action_set="sometimes"), "action_set"),
    ],
)
def test_inconsistent_linear_kwargs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("ICRL-LinearBandit-v0", **kwargs)


@pytest.mark.parametrize(
    "env_id, vector, kwargs, message",
    [
        ("ICRL-LinearBandit-v0", False, {"dimm": 3}, "LinearBanditEnv takes no parameter 'dimm' (did you mean 'dim'?)"),
        (
            "ICRL-LinearBandit-v0",
            True,
            {"horizn": 3},
            "LinearBanditVectorEnv takes no parameter 'horizn' (did you mean",
        ),
        ("ICRL-BernoulliBandit-v0", False, {"num_arm": 3}, "takes no parameter 'num_arm' (did you mean 'num_arms'?)"),
        ("ICRL-TabularMDP-v0", False, {"num_state": 3}, "takes no parameter 'num_state' (did you mean 'num_states'?)"),
        ("ICRL-TabularMDP-v0", True, {"episodez": 3}, "takes no parameter 'episodez' (did you mean 'episodes'?)"),
        ("ICRL-LinearBandit-v0", False, {"zzz": 1, "dim": 3}, "takes no parameter 'zzz'; it takes dim, num_actions"),
        ("ICRL-DarkRoom-v0", False, {"sise": 5}, "DarkRoomEnv takes no parameter 'sise' (did you mean 'size'?)"),
        (
            "ICRL-DarkRoom-v0",
            True,
            {"episode": 2},
            "DarkRoomVectorEnv takes no parameter 'episode' (did you mean 'episodes'?)",
        ),
    ],
)
def test_a_mistyped_field_is_named_with_the_closest_one(env_id, vector, kwargs, message):
    with pytest.raises(TypeError) as err:
        if vector:
            gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", **kwargs)
        else:
            gym.make(env_id, **kwargs)
    assert message in str(err.value)
    assert "max_memory_gib" in str(err.value)  # the options the environment takes besides its fields are listed


def test_inconsistent_bernoulli_kwargs():
    with pytest.raises(ValueError, match="num_arms"):
        gym.make("ICRL-BernoulliBandit-v0", num_arms=5, dim=4)
    with pytest.raises(ValueError, match="one-hot"):
        BanditSpec(arms="one_hot", dim=5, num_actions=10)
    with pytest.raises(ValueError, match="Bernoulli"):
        BanditSpec(reward="bernoulli")
    with pytest.raises(ValueError, match="inside"):
        gym.make("ICRL-BernoulliBandit-v0", prior_high=2.0)
    with pytest.raises(ValueError, match="prior_a must be a finite number > 0, got nan"):
        gym.make("ICRL-BernoulliBandit-v0", prior="beta", prior_a=float("nan"))
    with pytest.raises(ValueError, match="Bernoulli rewards need arm means in"):
        BanditSpec(arms="one_hot", reward="bernoulli", prior="gaussian")


def test_existing_specs_draw_the_same_numbers():
    """The default priors and arms consume the generator exactly as before the new options."""
    from icrl_gym.envs import BanditBatch, bernoulli_bandit_spec, linear_bandit_spec

    batch = BanditBatch(linear_bandit_spec(), 3, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(batch.w_star, rng.uniform(0.0, 1.0, size=(3, 5)))
    np.testing.assert_array_equal(batch.action_sets, rng.uniform(-1.0, 1.0, size=(3, 10, 5)))
    noise = batch.step(np.zeros(3, dtype=int))["reward"] - batch.means[:, 0]
    np.testing.assert_allclose(noise, 1.5 * rng.standard_normal(3))
    bern = BanditBatch(bernoulli_bandit_spec(), 4, np.random.default_rng(1))
    np.testing.assert_array_equal(bern.w_star, np.random.default_rng(1).uniform(0.0, 1.0, size=(4, 5)))


def test_beta_prior_and_gaussian_arms_have_their_moments():
    from icrl_gym.envs import BanditBatch, bernoulli_bandit_spec, linear_bandit_spec

    spec = bernoulli_bandit_spec(prior="beta", prior_a=2.0, prior_b=5.0)
    w = BanditBatch(spec, 20_000, np.random.default_rng(0)).w_star
    mean, var = 2 / 7, 2 * 5 / (7**2 * 8)  # Beta(a, b): a / (a + b), a b / ((a + b)^2 (a + b + 1))
    assert w.mean() == pytest.approx(mean, abs=4 * np.sqrt(var / w.size))
    assert w.var() == pytest.approx(var, rel=0.03)
    assert spec.prior_moments() == pytest.approx((mean, var))
    arms = BanditBatch(linear_bandit_spec(arms="gaussian", dim=4), 5_000, np.random.default_rng(1)).action_sets
    cov = np.einsum("bai,baj->ij", arms, arms) / (arms.shape[0] * arms.shape[1])
    np.testing.assert_allclose(cov, np.eye(4) / 4, atol=0.01)
    assert linear_bandit_spec(prior_low=-1.0, prior_high=3.0).prior_moments() == pytest.approx((1.0, 16 / 12))


@pytest.mark.parametrize("prior, first_high", [("skewed", True), ("skewed_reversed", False)])
def test_skewed_priors_draw_each_half_of_the_arms_uniformly_from_its_half(prior, first_high):
    """K=5: the first floor(5/2) = 2 arms' means in one half of [0, 1], the other 3 in the other half."""
    from icrl_gym.envs import BanditBatch, bernoulli_bandit_spec

    spec = bernoulli_bandit_spec(5, prior=prior)
    w = BanditBatch(spec, 20_000, np.random.default_rng(0)).w_star
    high = np.array([first_high] * 2 + [not first_high] * 3)
    assert (w[:, high] >= 0.5).all() and (w[:, ~high] <= 0.5).all()
    levels = np.linspace(0.05, 0.95, 19)
    for k in range(5):  # uniform on its half [0.5 h, 0.5 (1 + h)]: the quantiles are linear
        np.testing.assert_allclose(np.quantile(w[:, k], levels), 0.5 * (high[k] + levels), atol=0.01)
    np.testing.assert_allclose(np.corrcoef(w.T), np.eye(5), atol=0.03)  # independent arms
    # another range: its halves; the environment draws from its own generator (a seed fixes the means)
    env = BernoulliBanditEnv(num_arms=3, prior=prior, prior_low=0.2, prior_high=0.6)
    means = np.array([env.reset(seed=s)[1]["w_star"] for s in range(400)])
    upper = means[:, 0] >= 0.4 if first_high else means[:, 1:].min(axis=1) >= 0.4
    assert upper.all() and means.min() >= 0.2 and means.max() <= 0.6
    np.testing.assert_array_equal(env.reset(seed=7)[1]["w_star"], means[7])
    with pytest.raises(ValueError, match="is for Bernoulli rewards"):
        BanditSpec(prior=prior)
    with pytest.raises(ValueError, match="Bernoulli rewards need arm means in"):
        bernoulli_bandit_spec(prior=prior, prior_high=2.0)
    with pytest.raises(ValueError, match="no common mean and variance"):
        spec.prior_moments()


def test_sphere_prior_draws_unit_vectors_uniformly():
    from icrl_gym.envs import BanditBatch, linear_bandit_spec

    spec = linear_bandit_spec(dim=3, prior="sphere")
    w = BanditBatch(spec, 20_000, np.random.default_rng(0)).w_star
    np.testing.assert_allclose(np.linalg.norm(w, axis=1), 1.0, rtol=0, atol=1e-12)
    # Archimedes: on the sphere S^2 every coordinate is Unif[-1, 1]; its quantiles are linear
    levels = np.linspace(0.05, 0.95, 19)
    for j in range(3):
        np.testing.assert_allclose(np.quantile(w[:, j], levels), 2 * levels - 1, atol=0.03)
    np.testing.assert_allclose(w.T @ w / len(w), np.eye(3) / 3, atol=0.01)  # E w w^T = I / d
    assert spec.prior_moments() == (0.0, 1 / 3)
    with pytest.raises(ValueError, match="Bernoulli rewards need arm means in"):
        BanditSpec(arms="one_hot", reward="bernoulli", prior="sphere")


def test_one_coordinate_prior_draws_one_gaussian_coordinate():
    from icrl_gym.envs import BanditBatch, linear_bandit_spec

    spec = linear_bandit_spec(dim=4, prior="one_coordinate", prior_var=2.0)
    w = BanditBatch(spec, 20_000, np.random.default_rng(1)).w_star
    nonzero = w != 0
    assert (nonzero.sum(axis=1) == 1).all()
    counts = nonzero.sum(axis=0)  # the coordinate is uniform over the 4: counts ~ Binomial(n, 1/4)
    assert np.abs(counts - 5_000).max() < 4 * np.sqrt(20_000 * 0.25 * 0.75)
    s = w.sum(axis=1)
    assert abs(s.mean()) < 4 * np.sqrt(2.0 / s.size) and s.var() == pytest.approx(2.0, rel=0.04)
    assert np.mean(np.abs(s) < np.sqrt(2.0)) == pytest.approx(0.6827, abs=0.015)  # Gaussian: P(|s| < sd)
    assert spec.prior_moments() == (0.0, 0.5)
    assert w.var(axis=0) == pytest.approx(np.full(4, 0.5), rel=0.06)
    with pytest.raises(ValueError, match="Bernoulli rewards need arm means in"):
        BanditSpec(arms="one_hot", reward="bernoulli", prior="one_coordinate")


@pytest.mark.parametrize("env_id, kwargs", VARIANTS, ids=VARIANT_IDS)
def test_reset_info_carries_the_model(env_id, kwargs):
    env = gym.make(env_id, **kwargs).unwrapped
    model = env.reset(seed=0)[1]["model"]
    spec = getattr(env, "bandit_spec", None) or env.mdp_spec
    assert model == spec.to_dict() and type(spec).from_dict(model) == spec
    for key, value in kwargs.items():
        assert model[key] == value
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", **kwargs)
    assert venv.reset(seed=0)[1]["model"] == model


@pytest.mark.parametrize("env_id", BANDIT_IDS)
def test_vector_env(env_id):
    venv = gym.make_vec(env_id, num_envs=6, vectorization_mode="vector_entry_point", horizon=4)
    obs, info = venv.reset(seed=0)
    assert obs.shape == (6, venv.single_observation_space.shape[0]) and info["w_star"].shape[0] == 6
    for t in range(4):
        obs, r, term, trunc, info = venv.step(np.zeros(6, dtype=int))
        assert r.shape == (6,) and term.all() == (t == 3)
        np.testing.assert_allclose(info["regret"], info["best_expected_reward"] - info["expected_reward"])
    obs, r, term, trunc, info = venv.step(np.zeros(6, dtype=int))  # next-step autoreset
    assert not term.any() and np.all(r == 0) and "w_star" in info
    with pytest.raises(ValueError, match="shape"):
        venv.step(np.zeros(5, dtype=int))


def test_vector_env_same_seed_reproducible():
    a, b = LinearBanditVectorEnv(num_envs=3), LinearBanditVectorEnv(num_envs=3)
    np.testing.assert_array_equal(a.reset(seed=4)[0], b.reset(seed=4)[0])
    np.testing.assert_array_equal(a.step(np.array([0, 1, 2]))[1], b.step(np.array([0, 1, 2]))[1])
