"""Stable-Baselines3 on the registered environments, and the online meta-RL baselines."""

import io
import logging
import sys

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO

import icrl_gym  # noqa: F401
from agents import make_agent
from icrl_gym.checkpoint import CheckpointError
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditBatch, bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.models.meta_policy import BanditFeatureVecEnv, HistoryFeatures, MetaRLConfig, build_algorithm
from icrl_gym.models.meta_policy_file import load_policy
from icrl_gym.training.meta_rl import _Progress, export_policy, train
from icrl_gym.utils.progress import set_quiet


@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        ("ICRL-LinearBandit-v0", {"horizon": 20}),
        ("ICRL-BernoulliBandit-v0", {"horizon": 20}),
        ("ICRL-TabularMDP-v0", {"episodes": 2}),
        ("ICRL-DarkRoom-v0", {"size": 3, "horizon": 10, "episodes": 2}),
    ],
)
def test_ppo_trains_out_of_the_box(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    model = PPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=2048)
    assert model.num_timesteps >= 2048
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action))


def _bernoulli_reference(actions, rewards, num_actions, T):
    """Counts and means by an explicit loop over the history."""
    counts, sums = np.zeros(num_actions), np.zeros(num_actions)
    for a, r in zip(actions, rewards, strict=True):
        counts[a] += 1
        sums[a] += r
    means = np.array([s / n if n else 0.5 for s, n in zip(sums, counts, strict=True)])
    return np.concatenate([counts / T, means, 1 / np.sqrt(counts + 1), [len(actions) / T]])


def test_statistics_features_match_a_direct_computation():
    rng = np.random.default_rng(0)
    spec = bernoulli_bandit_spec(num_arms=4, horizon=30)
    feats = HistoryFeatures(spec, "statistics", 3)
    batch = BanditBatch(spec, 3, rng)
    history = [[], []]
    for _ in range(12):
        actions = rng.integers(0, 4, size=3)
        out = batch.step(actions)
        feats.update(batch.action_sets, actions, out["reward"])
        history[0].append(actions[1])
        history[1].append(out["reward"][1])
    np.testing.assert_allclose(feats.features(batch.action_sets)[1], _bernoulli_reference(*history, 4, 30), rtol=1e-6)

    spec = linear_bandit_spec(horizon=30)
    feats = HistoryFeatures(spec, "statistics", 2)
    batch = BanditBatch(spec, 2, rng)
    xs, rs = [], []
    for _ in range(8):
        actions = rng.integers(0, spec.num_actions, size=2)
        sets = batch.action_sets.copy()
        out = batch.step(actions)
        feats.update(sets, actions, out["reward"])
        xs.append(sets[0, actions[0]])
        rs.append(out["reward"][0])
    X, r = np.array(xs), np.array(rs)
    V = np.eye(spec.dim) + X.T @ X
    w = np.linalg.solve(V, X.T @ r)
    arms = batch.action_sets[0]
    width = np.sqrt(np.einsum("kd,de,ke->k", arms, np.linalg.inv(V), arms))
    expected = np.concatenate([arms.ravel(), w, arms @ w, width, [8 / 30]])
    np.testing.assert_allclose(feats.features(batch.action_sets)[0], expected, rtol=1e-4, atol=1e-5)


def test_previous_action_reward_features():
    spec = bernoulli_bandit_spec(num_arms=3, horizon=10)
    feats = HistoryFeatures(spec, "prev_action_reward", 2)
    sets = np.broadcast_to(np.eye(3), (2, 3, 3))
    first = feats.features(sets)
    np.testing.assert_array_equal(first[:, 9:], 0.0)  # no previous action, reward 0, t = 0
    feats.update(sets, np.array([2, 0]), np.array([1.0, 0.0]))
    np.testing.assert_allclose(feats.features(sets)[:, 9:], [[0, 0, 1, 1, 0.1], [1, 0, 0, 0, 0.1]])


def test_vec_env_resets_every_run_at_the_horizon():
    env = BanditFeatureVecEnv(bernoulli_bandit_spec(horizon=5), "statistics", 4, seed=0)
    obs = env.reset()
    assert obs.shape == (4, env.features.size)
    for t in range(5):
        env.step_async(np.zeros(4, dtype=int))
        obs, rewards, dones, infos = env.step_wait()
        assert dones.all() == (t == 4)
    assert infos[0]["episode"]["l"] == 5 and "terminal_observation" in infos[0]
    np.testing.assert_allclose(obs[:, -1], 0.0)  # fresh runs start at t = 0


@pytest.mark.parametrize("algo, features", [("ppo", "statistics"), ("recurrent_ppo", "prev_action_reward")])
def test_train_export_and_play(tmp_path, caplog, algo, features):
    spec = bernoulli_bandit_spec(num_arms=3, horizon=20)
    cfg = MetaRLConfig(
        name="tiny",
        env=spec.to_dict(),
        algo=algo,
        features=features,
        wall_minutes=5,
        max_env_steps=1600,
        num_envs=8,
        n_steps=20,
        batch_size=80,
        net_arch=[16],
        lstm_hidden_size=16,
        device="cpu",
    )
    trained, meta = train(cfg, echo=False)
    assert meta["training"]["env_steps"] >= 1600
    with caplog.at_level(logging.INFO, logger="icrl_gym.checkpoint"):
        path = export_policy(trained, meta, tmp_path / "policy")
    assert f"wrote {path}.safetensors (" in caplog.text and " MB)" in caplog.text
    algo2, meta2 = load_policy(path)
    for name, value in trained.policy.state_dict().items():
        np.testing.assert_array_equal(algo2.policy.state_dict()[name].numpy(), value.numpy())
    agent = make_agent({"name": "meta_rl", "checkpoint": str(path)})
    regret = evaluate_regret(spec, agent, 16, seed=0, batch_size=16)
    assert regret.shape == (16, 20) and np.isfinite(regret).all()
    # the batched agent reproduces SB3's own predict (greedy) step by step
    greedy = make_agent({"name": "meta_rl", "checkpoint": str(path), "greedy": True})
    batch = BanditBatch(spec, 2, np.random.default_rng(3))
    greedy.reset(batch_size=2, dim=spec.dim, num_actions=spec.num_actions)
    feats, state, start = HistoryFeatures(spec, features, 2), None, np.ones(2, dtype=bool)
    for _ in range(6):
        sb3_action, state = algo2.predict(feats.features(batch.action_sets), state, start, deterministic=True)
        ours = greedy.act_batch(batch.action_sets)
        np.testing.assert_array_equal(ours, sb3_action)
        sets = batch.action_sets.copy()
        out = batch.step(ours)
        greedy.update_batch(sets, ours, out["reward"])
        feats.update(sets, ours, out["reward"])
        start = np.zeros(2, dtype=bool)
    with pytest.raises(CheckpointError, match="dim=5 in the environment"):
        greedy.reset({"model": bernoulli_bandit_spec(num_arms=5, horizon=20).to_dict()})


class _FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_bar_follows_the_environment_steps(monkeypatch, quiet):
    spec = bernoulli_bandit_spec(num_arms=3, horizon=20)
    cfg = MetaRLConfig(
        env=spec.to_dict(), num_envs=8, n_steps=20, batch_size=80, n_epochs=1, net_arch=[8], device="cpu"
    )
    algo = build_algorithm(cfg, BanditFeatureVecEnv(spec, cfg.features, cfg.num_envs, seed=0))
    terminal = _FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    set_quiet(quiet)
    try:
        progress = _Progress(300)  # 2 rollouts of 160 steps: the bar stops at its total
        algo.learn(total_timesteps=300, callback=progress)
    finally:
        set_quiet(False)
    assert algo.num_timesteps == 320
    if quiet:
        assert terminal.getvalue() == "" and progress.bar.n == 0
    else:
        assert progress.bar.n == 300 and "meta-RL training" in terminal.getvalue()


def test_bad_config_and_not_a_policy(tmp_path):
    with pytest.raises(ValueError, match="algo must be"):
        MetaRLConfig(algo="a2c")
    with pytest.raises(CheckpointError, match="is not a meta-RL policy"):
        load_policy(icrl_gym.__path__[0] + "/pretrained/bernoulli-ad-ucb")
