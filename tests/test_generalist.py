import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import icrl_gym.envs  # noqa: F401  (registers the environments)
from agents.bandit.gittins import Gittins
from agents.learned.generalist import GeneralistAgent
from icrl_gym.checkpoint import (
    CheckpointError,
    CheckpointKind,
    find_checkpoint,
    read_checkpoint,
    save_checkpoint,
    set_play,
)
from icrl_gym.estimators.gittins import build_gittins_table, gittins_table
from icrl_gym.model_card import model_card
from icrl_gym.models.generalist import ArmSelfAttention, GeneralistConfig, GeneralistTransformer
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.generalist import TRAINED_ENV, train
from tests.helpers import tiny_generalist_config

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "mlp_ratio": 2, "same_arm_bias": [0.0, 8.0]}


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    return GeneralistTransformer(GeneralistConfig(**{**TINY, **kw}))


def _trajectory(b, s, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, k, (b, s), generator=g), torch.randint(0, 2, (b, s), generator=g).float()


def test_cached_step_equals_forward():
    model, (b, s, k) = _model(), (3, 25, 4)
    actions, rewards = _trajectory(b, s, k)
    full = model(actions, rewards, torch.arange(s).expand(b, s), s, k)  # (B, S, K)
    cache = model.new_cache(b, EnvInfo(num_actions=k, horizon=s, reward="gaussian"))
    steps = [model.step(cache, None, None, None).logits]
    for t in range(s - 1):
        steps.append(model.step(cache, None, actions[:, t], rewards[:, t]).logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [2, 5])
def test_grouped_cache_equals_forward(k):
    """The grouped cache (five grouped keys with log multiplicities) computes the full attention's logits."""
    model, (b, s) = _model(seed=4), (4, 40)
    actions, rewards = _trajectory(b, s, k, seed=5)
    full = model(actions, rewards, torch.arange(s).expand(b, s), s, k)
    cache = model.new_cache(b, EnvInfo(num_actions=k, horizon=s))
    steps = [model.step(cache, None, None, None).logits]
    steps += [model.step(cache, None, actions[:, t], rewards[:, t]).logits for t in range(s - 1)]
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
    # the multiplicities are the pulls of each (arm, reward) pair, counted by a slow loop
    slow = torch.zeros(b, k, 2)
    for i in range(b):
        for t in range(s - 1):
            slow[i, actions[i, t], int(rewards[i, t])] += 1
    torch.testing.assert_close(cache.counts, slow)
    torch.testing.assert_close(cache.totals, slow.sum(1))


def test_folded_counts_decision_equals_forward_with_large_biases_and_weights():
    """The folded cross-attention of ``decide_counts`` (three keys per head, multiplicity
    e^beta n + m) equals the full attention's logits where e^beta overflows a float (beta = 100) and the
    weights are far from their initial scale; empty arms and arms holding every pull are among the states."""
    model = _model(seed=7, n_heads=4, d_model=16, same_arm_bias=[0.0, 4.0, 16.0, 100.0])
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    b, s, k = 6, 30, 5
    actions, rewards = _trajectory(b, s, k, seed=8)
    actions[0] = 2  # one run pulls a single arm: the other arms are empty, and arm 2 holds every step
    full = model(actions, rewards, torch.arange(s).expand(b, s), s, k)
    counts = torch.zeros(b, k, 2)
    for t in range(s):
        rows = torch.arange(b)
        folded = model.decide_counts(counts, counts.sum(1), t, s)
        torch.testing.assert_close(folded, full[:, t], atol=1e-4, rtol=1e-4)
        counts[rows, actions[:, t], rewards[:, t].long()] += 1


def test_grouped_cache_keeps_the_folded_maps_for_its_runs_and_folds_new_weights_after_reset():
    """A rollout folds the cross-attention once and reuses it; after the weights change, ``reset`` makes the next
    runs fold them again: the cached decisions equal the full forward pass of the weights in force."""
    model, (b, s, k) = _model(seed=3), (3, 12, 4)
    actions, rewards = _trajectory(b, s, k, seed=4)
    cache = model.new_cache(b, EnvInfo(num_actions=k, horizon=s))
    for _ in range(2):
        full = model(actions, rewards, torch.arange(s).expand(b, s), s, k)
        maps = None
        for t in range(s):
            previous = (actions[:, t - 1], rewards[:, t - 1]) if t else (None, None)
            logits = model.step(cache, None, *previous).logits
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-5)
            maps = cache.maps if maps is None else maps
            assert maps is not None and cache.maps is maps  # folded at the first decision, then reused
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.5)
        cache.reset()
        assert cache.maps is None


def test_grouped_cache_refuses_what_it_cannot_hold():
    model = _model()
    cache = model.new_cache(2, EnvInfo(num_actions=3, horizon=5))
    with pytest.raises(ValueError, match=r"rewards in \{0, 1\} only"):
        model.step(cache, None, torch.tensor([0, 1]), torch.tensor([0.5, 1.0]))
    with pytest.raises(ValueError, match=r"actions must lie in \[0, 3\)"):
        model.step(cache, None, torch.tensor([0, 3]), torch.tensor([0.0, 1.0]))
    model.step(cache, None, torch.tensor([0, 2]), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="runs of K=3 arms"):
        model.step(cache, torch.zeros(2, 4, 4), None, None)
    with pytest.raises(ValueError, match="go together"):
        model.step(cache, None, torch.tensor([0, 2]), None)


def test_permuting_arm_labels_permutes_logits():
    model, (b, s, k) = _model(), (2, 30, 6)
    actions, rewards = _trajectory(b, s, k, seed=1)
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(2))
    queries = torch.tensor([[0, 7, 29], [3, 15, 20]])
    logits = model(actions, rewards, queries, s, k)
    permuted = model(perm[actions], rewards, queries, s, k)  # arm j is now called perm[j]
    torch.testing.assert_close(permuted[..., perm], logits, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(logits[..., 0], logits[..., 1])  # the history does tell arms apart


def test_runs_at_fifty_arms_and_a_thousand_steps():
    model, (b, k, horizon) = _model(), (2, 50, 1000)
    actions, rewards = _trajectory(b, horizon, k, seed=3)
    logits = model(actions, rewards, torch.tensor([[0, 999], [500, 998]]), horizon, k)
    assert logits.shape == (b, 2, k) and torch.isfinite(logits).all()
    cache = model.new_cache(b, EnvInfo(num_actions=k, horizon=horizon, reward="gaussian"))
    cache.steps = 989  # jump to the end of the run: the last steps see 989+ keys
    for t in range(990, 1000):
        out = model.step(cache, None, actions[:, t - 1], rewards[:, t - 1]).logits
    assert out.shape == (b, k) and torch.isfinite(out).all()


def _dense_gittins(horizon, grid=256):
    """The dense (T+1)^3 table as agents/bandit/gittins.py computed it before the compact storage."""
    n = horizon + 1
    lam = np.linspace(0.0, 1.0, grid, dtype=np.float32)[:, None, None]
    s = np.arange(n, dtype=np.float32)[:, None]
    f = np.arange(n, dtype=np.float32)[None, :]
    p = ((1.0 + s) / (2.0 + s + f)).astype(np.float32)[None]
    table = np.zeros((n, n, n), dtype=np.float32)
    v = np.zeros((grid, n + 1, n + 1), dtype=np.float32)
    for m in range(1, n):
        r = n - m + 1
        cont = p[:, :r, :r] - lam + p[:, :r, :r] * v[:, 1 : r + 1, :r] + (1 - p[:, :r, :r]) * v[:, :r, 1 : r + 1]
        positive = cont > 0
        k = np.clip(positive.sum(axis=0) - 1, 0, grid - 2)
        c0 = np.take_along_axis(cont, k[None], 0)[0]
        c1 = np.take_along_axis(cont, (k + 1)[None], 0)[0]
        frac = np.where(c0 > c1, np.clip(c0 / np.maximum(c0 - c1, 1e-12), 0.0, 1.0), 0.0)
        table[:r, :r, m] = np.where(positive[0], lam[k, 0, 0] + frac * (lam[1, 0, 0] - lam[0, 0, 0]), 0.0)
        v[:, :r, :r] = np.maximum(cont, 0.0)
    return table


def test_compact_gittins_table_equals_dense_and_serves_smaller_horizons():
    horizon = 20
    dense = _dense_gittins(horizon)
    s, f, m = np.meshgrid(np.arange(horizon + 1), np.arange(horizon + 1), np.arange(1, horizon + 1), indexing="ij")
    reachable = s + f + m <= horizon + 1
    s, f, m = s[reachable], f[reachable], m[reachable]
    small, large = build_gittins_table(horizon), build_gittins_table(horizon + 13)
    assert np.array_equal(small[s, f, m], dense[s, f, m])
    assert np.array_equal(large[s, f, m], dense[s, f, m])
    assert small.nbytes < dense.nbytes / 4
    with pytest.raises(IndexError):
        small.lookup(np.array([10]), np.array([10]), 5)


def test_gittins_actions_unchanged_by_a_larger_table():
    rng = np.random.default_rng(0)
    means = rng.random((64, 4))

    def play(agent, horizon=15):
        env_rng = np.random.default_rng(1)
        agent.reset(batch_size=64, dim=4, num_actions=4)
        actions = []
        for _ in range(horizon):
            a = agent.act_batch(np.broadcast_to(np.eye(4), (64, 4, 4)))
            r = (env_rng.random(64) < means[np.arange(64), a]).astype(float)
            agent.update_batch(np.broadcast_to(np.eye(4), (64, 4, 4)), a, r)
            actions.append(a)
        return np.stack(actions)

    dense = _dense_gittins(15)
    exact = Gittins(horizon=15)
    exact.reset(batch_size=64, dim=4, num_actions=4)
    gittins_table(40)  # cached: the agent at T=15 now reads the T=40 table
    via_large = play(Gittins(horizon=15))
    # the same policy from the dense table, played by hand
    env_rng, succ, fail, ref = np.random.default_rng(1), np.zeros((64, 4), int), np.zeros((64, 4), int), []
    for t in range(15):
        a = dense[succ, fail, 15 - t].argmax(axis=1)
        r = (env_rng.random(64) < means[np.arange(64), a]).astype(int)
        succ[np.arange(64), a] += r
        fail[np.arange(64), a] += 1 - r
        ref.append(a)
    assert np.array_equal(via_large, np.stack(ref))


def _no_build(*args, **kwargs):
    raise AssertionError("the table should have come from the disk cache")


def test_gittins_agent_keeps_its_table_in_a_cache_dir(tmp_path, monkeypatch):
    import icrl_gym.estimators.gittins as gittins_module
    from icrl_gym.registry import make_agent

    monkeypatch.delenv(gittins_module.CACHE_ENV, raising=False)
    monkeypatch.setattr(gittins_module, "_TABLES", {})
    cache = tmp_path / "cache"
    plain = Gittins(horizon=12)
    plain.reset(batch_size=2, dim=3, num_actions=3)
    assert plain.cache_dir is None and not cache.exists()  # no disk cache unless asked for

    agent = make_agent("gittins", horizon=12, cache_dir=str(cache))
    agent.reset(batch_size=2, dim=3, num_actions=3)
    assert [p.name for p in cache.iterdir()] == ["gittins_N12_a1_b1_g256.npy"]  # no temporary file left
    expected = build_gittins_table(12).values
    assert np.array_equal(np.load(cache / "gittins_N12_a1_b1_g256.npy"), expected)
    assert "cache_dir" not in agent.config()

    # a new process: nothing in memory, and building is not allowed
    monkeypatch.setattr(gittins_module, "_TABLES", {})
    monkeypatch.setattr(gittins_module, "build_gittins_table", _no_build)
    monkeypatch.setenv(gittins_module.CACHE_ENV, str(cache))
    again = Gittins(horizon=12)
    assert again.cache_dir == cache
    again.reset(batch_size=2, dim=3, num_actions=3)
    assert again.table.horizon == 12 and np.array_equal(again.table.values, expected)
    monkeypatch.setattr(gittins_module, "_TABLES", {})
    smaller = Gittins(horizon=7, cache_dir=cache)  # the cached N = 12 table serves T = 7
    smaller.reset(batch_size=2, dim=3, num_actions=3)
    assert smaller.table.horizon == 12 and sorted(p.name for p in cache.iterdir()) == ["gittins_N12_a1_b1_g256.npy"]


@pytest.mark.parametrize("corruption", ["truncated", "garbage", "float64", "short", "out_of_range", "pickle"])
def test_a_corrupt_gittins_cache_file_is_rebuilt(tmp_path, monkeypatch, corruption):
    import icrl_gym.estimators.gittins as gittins_module

    monkeypatch.setattr(gittins_module, "_TABLES", {})
    expected = build_gittins_table(9).values
    path = gittins_module.gittins_cache_path(tmp_path, 9)
    if corruption == "truncated":
        np.save(path, expected)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif corruption == "garbage":
        path.write_bytes(b"not a numpy file")
    elif corruption == "float64":
        np.save(path, expected.astype(np.float64))
    elif corruption == "short":
        np.save(path, expected[:-1])
    elif corruption == "out_of_range":
        np.save(path, np.where(np.arange(expected.size) == 5, np.float32(np.nan), expected))
    else:
        np.save(path, np.array([expected], dtype=object), allow_pickle=True)
    assert gittins_module.load_cached_table(path, 9) is None
    with pytest.warns(RuntimeWarning, match="corrupt Gittins table cache"):
        table = gittins_module.cached_gittins_table(9, tmp_path)
    assert np.array_equal(table.values, expected)
    loaded = gittins_module.load_cached_table(path, 9)  # replaced by a valid file
    assert loaded is not None and np.array_equal(loaded.values, expected)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def _train_cfg(run_dir, tmp_path, steps, **overrides):
    """K <= 4, T in [10, 30], DAgger from step 2, a saved state every 3 steps."""
    sizes = dict(max_arms=4, min_horizon=10, max_horizon=30, queries=4, cost_per_batch=2e4, max_batch=16)
    schedule = dict(steps=steps, dagger_start=2, warmup_steps=2, checkpoint_every=3)
    return tiny_generalist_config(run_dir, tmp_path / "cache", model=TINY, **sizes, **schedule, **overrides)


def test_resume_reproduces_an_uninterrupted_run(tmp_path):
    whole = train(_train_cfg(tmp_path / "whole", tmp_path, 6), echo=False)
    train(_train_cfg(tmp_path / "split", tmp_path, 3), echo=False)  # "interrupted" after a saved state at 3
    resumed = train(_train_cfg(tmp_path / "split", tmp_path, 6), echo=False)
    assert "resumed from" in (tmp_path / "split" / "train.log").read_text()
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    _, meta = read_checkpoint(tmp_path / "split" / "checkpoints" / "step_0000006")
    assert meta["kind"] == "generalist_transformer" and meta["training"]["steps"] == 6


def _checkpoint(tmp_path):
    model = _model()
    meta = {"env": TRAINED_ENV}  # the environment family the trainer records
    return save_checkpoint(
        tmp_path / "tiny", model, meta, config=model.config.to_dict(), kind=CheckpointKind.GENERALIST_TRANSFORMER
    )


def test_agent_plays_bernoulli_bandits_of_any_size(tmp_path):
    path = _checkpoint(tmp_path)
    for k, horizon in ((2, 10), (7, 25)):
        env = gym.make_vec(
            "ICRL-BernoulliBandit-v0", num_envs=3, vectorization_mode="vector_entry_point", num_arms=k, horizon=horizon
        )
        obs, info = env.reset(seed=0)
        agent = GeneralistAgent(path)
        agent.reset(info)
        for _ in range(horizon):
            a = agent.act(obs)
            obs, r, *_ = env.step(a)
            agent.update(a, r)
        assert agent.env_info.horizon == horizon and a.shape == (3,)


def test_fresh_arm_floor_plays_an_untried_arm_wherever_the_uniform_gittins_index_would(tmp_path, monkeypatch):
    """``fresh_arm_floor``: at every step the agent plays the untried arm the Gittins index told U[0, 1] picks (the
    first untried, its ties to the first arm) where that index picks an untried arm and the plain model's greedy
    choice is a tried one, and the plain model's choice everywhere else.  Reference: the Gittins agent told U[0, 1]
    and the plain agent, both fed the floored agent's history."""
    from agents.bandit.gittins import Gittins

    monkeypatch.setenv("ICRL_GYM_GITTINS_CACHE", str(tmp_path / "cache"))
    model, k, horizon, runs = _model(seed=1), 6, 30, 16  # a model that re-pulls tried arms at some steps, not all
    env = gym.make_vec(
        "ICRL-BernoulliBandit-v0", num_envs=runs, vectorization_mode="vector_entry_point", num_arms=k, horizon=horizon
    )
    obs, info = env.reset(seed=3)
    floored = GeneralistAgent.from_model(model, fresh_arm_floor=True)
    plain, index = GeneralistAgent.from_model(model), Gittins(prior_a=1, prior_b=1)
    for agent in (floored, plain, index):
        agent.reset(info)
    pulls, fired, kept = np.zeros((runs, k), dtype=np.int64), 0, 0
    for _ in range(horizon):
        a, own, told = floored.act(obs), plain.act(obs), index.act(obs)
        rows = np.arange(runs)
        rule = (pulls[rows, told] == 0) & (pulls[rows, own] > 0)
        np.testing.assert_array_equal(a, np.where(rule, told, own))
        fired, kept = fired + int(rule.sum()), kept + int((~rule).sum())
        obs, r, *_ = env.step(a)
        for agent in (floored, plain, index):
            agent.update(a, r)
        pulls[rows, a] += 1
    assert fired > 0 and kept > 0 and floored.config()["fresh_arm_floor"] is True


def test_agent_rejects_a_linear_bandit(tmp_path):
    agent = GeneralistAgent(_checkpoint(tmp_path))
    env = gym.make("ICRL-LinearBandit-v0")
    _, info = env.reset(seed=0)
    with pytest.raises(ValueError, match="Bernoulli bandits"):
        agent.reset(info)
    with pytest.raises(ValueError, match="one-hot"):  # no model in the info: caught at the first action
        agent.reset(dim=5, num_actions=10, horizon=20)
        agent.act(np.random.default_rng(0).uniform(-1, 1, (10, 5)))


def test_fine_tuning_run_starts_from_the_given_weights_and_counts_their_time(tmp_path):
    """init_checkpoint: a new run starts from another run's weights; that run's wall time is in the budget."""
    first = train(_train_cfg(tmp_path / "first", tmp_path, 3), echo=False)
    init = tmp_path / "first" / "checkpoints" / "step_0000003"
    _, first_meta = read_checkpoint(init)
    cfg = dataclasses.replace(_train_cfg(tmp_path / "second", tmp_path, 3), init_checkpoint=str(init))
    train(cfg, echo=False)
    start, _ = read_checkpoint(tmp_path / "second" / "checkpoints" / "step_0000000")  # the weights it started from
    assert start.keys() == first.state_dict().keys()
    for name, value in first.state_dict().items():
        assert torch.equal(value, start[name]), name
    _, meta = read_checkpoint(tmp_path / "second" / "checkpoints" / "step_0000003")
    assert meta["training"]["wall_time_s"] >= first_meta["training"]["wall_time_s"]
    assert meta["pretrain"]["init_checkpoint"] == str(init)
    other = dataclasses.replace(cfg, out_dir=str(tmp_path / "third"), model={**TINY, "d_model": 32, "n_heads": 2})
    with pytest.raises(ValueError, match="holds a model"):
        train(other, echo=False)


def test_a_grown_run_starts_from_the_shallower_checkpoints_policy_and_trains_its_new_blocks(tmp_path):
    """init_grow: the checkpoint's blocks first, each added block the identity, so the logits are the checkpoint's."""
    first = train(_train_cfg(tmp_path / "first", tmp_path, 3), echo=False)
    deeper = {**TINY, "n_layers": TINY["n_layers"] + 1}
    shallow = _train_cfg(tmp_path / "second", tmp_path, 3, init_checkpoint=str(tmp_path / "first"))
    cfg = dataclasses.replace(shallow, model=deeper)
    with pytest.raises(ValueError, match="holds a model"):  # fewer blocks only when asked
        train(cfg, echo=False)
    grown_run = train(dataclasses.replace(cfg, out_dir=str(tmp_path / "third"), init_grow=True), echo=False)
    start, _ = read_checkpoint(tmp_path / "third" / "checkpoints" / "step_0000000")
    grown = GeneralistTransformer(GeneralistConfig(**deeper))
    grown.load_state_dict(start)
    actions, rewards = _trajectory(3, 12, 4)
    steps = torch.tensor([[0, 5, 11]] * 3)
    with torch.no_grad():
        np.testing.assert_allclose(
            grown(actions, rewards, steps, 12, 4), first(actions, rewards, steps, 12, 4), atol=1e-5
        )
    added = grown_run.state_dict()["blocks.2.mlp.2.weight"]
    assert torch.count_nonzero(start["blocks.2.mlp.2.weight"]) == 0 and torch.count_nonzero(added) > 0
    wider = dataclasses.replace(cfg, out_dir=str(tmp_path / "fourth"), init_grow=True, model={**deeper, "d_model": 32})
    with pytest.raises(ValueError, match="holds a model"):
        train(wider, echo=False)
    # init_grow only starts a run: resuming the grown run without it goes on from its last checkpoint
    train(dataclasses.replace(cfg, out_dir=str(tmp_path / "third"), steps=4), echo=False)
    log = (tmp_path / "third" / "train.log").read_text()
    assert "resumed from" in log and "changed on resume: init_grow" in log
    assert (tmp_path / "third" / "checkpoints" / "step_0000004.safetensors").exists()


def test_fine_tuning_starts_from_a_run_folder_or_a_shipped_name(tmp_path):
    """init_checkpoint reads what play reads: a run's folder (its last checkpoint) or a shipped model's name."""
    first = train(_train_cfg(tmp_path / "first", tmp_path, 3), echo=False)
    # the run keeps its training configuration as config.json, which does not make it a Hub-layout folder
    assert (tmp_path / "first" / "config.json").exists()
    assert find_checkpoint(tmp_path / "first") == tmp_path / "first" / "checkpoints" / "step_0000003"
    played = GeneralistAgent(str(tmp_path / "first"))  # every agent constructor reads a run folder too
    for name, value in first.state_dict().items():
        assert torch.equal(value, played.model.state_dict()[name]), name
    with pytest.raises(CheckpointError, match="no shipped model"):
        GeneralistAgent(str(tmp_path / "nothing here"))
    cfg = dataclasses.replace(_train_cfg(tmp_path / "second", tmp_path, 2), init_checkpoint=str(tmp_path / "first"))
    train(cfg, echo=False)
    start, _ = read_checkpoint(tmp_path / "second" / "checkpoints" / "step_0000000")
    for name, value in first.state_dict().items():
        assert torch.equal(value, start[name]), name
    # the record names the start by its weights too (a shipped name may later go to others), also after a resume
    _, first_meta = read_checkpoint(tmp_path / "first" / "checkpoints" / "step_0000003")
    train(dataclasses.replace(cfg, steps=3), echo=False)
    _, meta = read_checkpoint(tmp_path / "second" / "checkpoints" / "step_0000003")
    expected = {"checkpoint": str(tmp_path / "first"), "weights_sha256": first_meta["weights_sha256"]}
    assert meta["training"]["initialised_from"] == expected and "initialised_from" not in first_meta["training"]
    shipped = dataclasses.replace(cfg, out_dir=str(tmp_path / "third"), init_checkpoint="bernoulli-generalist-family")
    with pytest.raises(ValueError, match="bernoulli-generalist-family holds a model"):  # found by name: not this size
        train(shipped, echo=False)
    unknown = dataclasses.replace(cfg, out_dir=str(tmp_path / "fourth"), init_checkpoint="bernoulli-generalst")
    with pytest.raises(CheckpointError, match="did you mean 'bernoulli-generalist'"):
        train(unknown, echo=False)


def test_a_run_from_a_checkpoint_with_play_defaults_is_played_as_its_start(tmp_path):
    """A student of a model whose record asks for the fresh-arm floor plays with the floor when named alone."""
    train(_train_cfg(tmp_path / "first", tmp_path, 3), echo=False)
    set_play(tmp_path / "first" / "checkpoints" / "step_0000003", {"fresh_arm_floor": True}, "by hand")
    cfg = dataclasses.replace(_train_cfg(tmp_path / "student", tmp_path, 3), init_checkpoint=str(tmp_path / "first"))
    train(cfg, echo=False)
    assert "its play defaults carried: {'fresh_arm_floor': True}" in (tmp_path / "student" / "train.log").read_text()
    for step in ("0000000", "0000003"):
        _, meta = read_checkpoint(tmp_path / "student" / "checkpoints" / f"step_{step}")
        assert meta["play"] == {
            "defaults": {"fresh_arm_floor": True},
            "command": "by hand",
            "carried_from": cfg.init_checkpoint,
        }
        assert meta["training"]["initialised_from"]["play"]["defaults"] == {"fresh_arm_floor": True}
    assert GeneralistAgent(str(tmp_path / "student")).defaults == {"fresh_arm_floor": True}
    assert f"Carried from the checkpoint its training started from, `{cfg.init_checkpoint}`" in model_card(
        tmp_path / "student"
    )
    assert GeneralistAgent(str(tmp_path / "student"), fresh_arm_floor=False).defaults == {
        "fresh_arm_floor": False
    }  # the caller's word wins
    # a start without play defaults gives none
    plain = dataclasses.replace(cfg, out_dir=str(tmp_path / "plain"), init_checkpoint=str(tmp_path / "student"))
    set_play(tmp_path / "student" / "checkpoints" / "step_0000003", {})
    train(plain, echo=False)
    _, meta = read_checkpoint(tmp_path / "plain" / "checkpoints" / "step_0000003")
    assert "play" not in meta and "play" not in meta["training"]["initialised_from"]


def test_shipped_generalist_loads_by_name_and_plays_any_size():
    """TransformerAgent.pretrained("bernoulli-generalist") is the generalist agent; it plays K=7, T=30 (reset info)."""
    from agents.learned.transformer import TransformerAgent

    agent = TransformerAgent.pretrained("bernoulli-generalist")
    assert isinstance(agent, GeneralistAgent) and agent.greedy
    env = gym.make("ICRL-BernoulliBandit-v0", num_arms=7, horizon=30)
    obs, info = env.reset(seed=0)
    agent.reset(info)
    for _ in range(30):
        action = agent.act(obs)
        assert 0 <= int(action) < 7
        obs, reward, terminated, _, info = env.step(action)
        agent.update(action, reward)
    assert terminated


def test_soft_label_loss_is_the_cross_entropy_to_the_targets_and_its_kl():
    """The shared loss against torch's soft-target cross-entropy and KL divergence, row by row."""
    from icrl_gym.training.generalist_task import soft_label_loss

    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    target = torch.tensor([[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.25] * 4, [0, 0, 0, 1], [0.1, 0.2, 0.3, 0.4]])
    target = target.to(torch.float64)
    loss, metrics = soft_label_loss(logits, target)
    expected = torch.nn.functional.cross_entropy(logits, target)
    kl = torch.nn.functional.kl_div(torch.log_softmax(logits, -1), target, reduction="batchmean")
    agree = np.mean([target[i, int(logits[i].argmax())] > 0 for i in range(5)])
    assert torch.allclose(loss, expected) and metrics["loss"] == pytest.approx(float(expected))
    assert metrics["kl"] == pytest.approx(float(kl)) and metrics["agree"] == pytest.approx(agree)


def test_one_untried_arm_keeps_the_tried_arms_and_the_first_untried_one_in_targets_and_loss(tmp_path):
    """one_untried_arm: against a loop over the queries; the loss is the cross-entropy over the kept arms alone."""
    from icrl_gym.training.generalist import Experts, batch_loss, sample_batch, untried_but_one

    rng = np.random.default_rng(4)
    actions, steps = rng.integers(0, 6, (9, 12)), rng.integers(0, 12, (9, 5))
    actions[:, :4] = rng.integers(0, 2, (9, 4))  # few arms tried early: many untried arms at the early queries
    dropped = untried_but_one(actions, steps, 6)
    for i in range(9):
        for q, t in enumerate(steps[i]):
            untried = [k for k in range(6) if k not in actions[i, :t]]
            expected = set(untried[1:])
            assert set(np.nonzero(dropped[i, q])[0]) == expected, (i, t)
    sizes = dict(min_arms=6, max_arms=6, min_horizon=10, max_horizon=30, queries=4, cost_per_batch=2e4, max_batch=16)
    cfg = tiny_generalist_config(tmp_path / "run", tmp_path / "cache", model=TINY, one_untried_arm=True, **sizes)
    assert cfg.checkpoint_fields()["trained_range"]["one_untried_arm"] is True
    batch = sample_batch(cfg, Experts(gittins=lambda a, b: gittins_table(cfg.max_horizon, a, b)), rng)
    assert batch.dropped is not None and batch.dropped.any()
    assert np.array_equal(batch.dropped, untried_but_one(batch.actions, batch.query_steps, 6))
    assert (batch.targets[batch.dropped] == 0).all() and np.allclose(batch.targets.sum(-1), 1)
    model = GeneralistTransformer(GeneralistConfig(**TINY))
    loss, _ = batch_loss(model, batch, torch.device("cpu"))
    with torch.no_grad():
        logits = model(
            torch.as_tensor(batch.actions),
            torch.as_tensor(batch.rewards, dtype=torch.float32),
            torch.as_tensor(batch.query_steps),
            batch.horizon,
            6,
        ).double()
    total, rows = 0.0, 0
    for i in range(batch.size):
        for q in range(cfg.queries):
            kept = ~batch.dropped[i, q]
            log_p = torch.log_softmax(logits[i, q][torch.as_tensor(kept)], -1)
            total -= float((torch.as_tensor(batch.targets[i, q][kept]) * log_p).sum())
            rows += 1
    assert float(loss.detach()) == pytest.approx(total / rows, rel=1e-5)
    # the untried arms share one logit (the model is permutation-equivariant), so dropping all but one loses nothing
    for i in range(batch.size):
        for q, t in enumerate(batch.query_steps[i]):
            untried = [k for k in range(6) if k not in batch.actions[i, :t]]
            if untried:
                assert torch.allclose(logits[i, q, untried], logits[i, q, untried[0]], atol=1e-5)


def test_the_default_prior_draws_uniform_means_as_the_shipped_training_did(tmp_path):
    from icrl_gym.training.generalist import sample_prior

    cfg = tiny_generalist_config(tmp_path / "run", tmp_path / "cache")
    means, prior, skewed = sample_prior(cfg, np.random.default_rng(5), 7, 3)
    assert prior == (1.0, 1.0) and not skewed and np.array_equal(means, np.random.default_rng(5).random((7, 3)))


def test_the_widened_prior_draws_beta_and_skewed_batches_labelled_by_the_gittins_told_their_prior(tmp_path):
    from icrl_gym.training.generalist import Experts, sample_batch, sample_prior

    priors = [[5.0, 0.5], [0.5, 5.0]]
    cfg = tiny_generalist_config(tmp_path / "run", tmp_path / "cache", beta_priors=priors, skewed_fraction=0.4)
    assert cfg.checkpoint_fields()["trained_range"]["beta_priors"] == priors
    rng, seen = np.random.default_rng(0), {"skewed": 0, (5.0, 0.5): [], (0.5, 5.0): []}
    for _ in range(400):
        means, prior, skewed = sample_prior(cfg, rng, 50, 4)
        assert (skewed is not None) == (prior == (1.0, 1.0))
        if skewed:  # skewed: one half of the arms in [0.5, 1], the other in [0, 0.5]
            high = means[0] >= 0.5
            assert high.sum() == 2 and (high[:2].all() or high[2:].all())
            assert np.array_equal(means >= 0.5, np.broadcast_to(high, means.shape))
            seen["skewed"] += 1
        else:
            seen[prior].append(means)
    assert 0.3 < seen["skewed"] / 400 < 0.5  # skewed_fraction 0.4
    for (a, b), draws in ((p, seen[p]) for p in ((5.0, 0.5), (0.5, 5.0))):
        x = np.concatenate(draws).ravel()  # Beta(a, b): mean a / (a + b)
        assert abs(x.mean() - a / (a + b)) < 0.01
    # the labels: at every query step the Gittins action of the prior the batch was drawn from,
    # recounted here from the trajectory and looked up in a table built for that prior
    rng, priors_seen = np.random.default_rng(3), set()
    for _ in range(8):
        batch = sample_batch(cfg, Experts(gittins=lambda a, b: gittins_table(cfg.max_horizon, a, b)), rng)
        priors_seen.add(batch.prior)
        table = build_gittins_table(cfg.max_horizon, *batch.prior, 256)
        for i in range(batch.size):
            for q, t in enumerate(batch.query_steps[i]):
                acts, rews = batch.actions[i, :t], batch.rewards[i, :t]
                s = np.array([rews[acts == k].sum() for k in range(batch.num_arms)], dtype=np.int64)
                f = np.array([(acts == k).sum() for k in range(batch.num_arms)], dtype=np.int64) - s
                index = table.lookup(s[None], f[None], batch.horizon - t)[0]
                np.testing.assert_allclose(batch.targets[i, q], (index == index.max()) / (index == index.max()).sum())
    assert priors_seen == {(5.0, 0.5), (0.5, 5.0), (1.0, 1.0)}


@pytest.mark.parametrize("share", [0.5, 0.8, 1.0])
def test_skewed_reversed_share_is_the_share_of_skewed_batches_whose_first_arms_are_low(tmp_path, share):
    """``skewed_reversed_share`` of the skewed batches draw the reversed prior (the first floor(K/2) arms below 1/2),
    the rest the skewed one; the trained range records a share other than the even one."""
    from icrl_gym.training.generalist import sample_prior

    skewed_only = {"beta_priors": [[1.0, 1.0]], "skewed_fraction": 1.0, "skewed_reversed_share": share}
    cfg = tiny_generalist_config(tmp_path / "run", tmp_path / "cache", **skewed_only)
    assert cfg.checkpoint_fields()["trained_range"].get("skewed_reversed_share", 0.5) == share
    rng, low_first, n = np.random.default_rng(5), 0, 2000
    for _ in range(n):
        means, _, skewed = sample_prior(cfg, rng, 3, 5)
        assert skewed
        first_low = means[:, :2] < 0.5
        assert np.array_equal(means[:, 2:] >= 0.5, np.broadcast_to(first_low[:, :1], (3, 3)))  # one half each side
        assert first_low.all() or not first_low.any()  # one prior per batch
        low_first += int(first_low.all())
    assert abs(low_first / n - share) < 4 * np.sqrt(share * (1 - share) / n) + 1e-12


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"beta_priors": [[1.0]]}, "holds \\(a, b\\) pairs"),
        ({"beta_priors": [[0.0, 1.0]]}, "beta_priors a"),
        ({"skewed_fraction": 0.5}, "needs beta_priors"),
        ({"teacher": "no-such-model"}, "teacher='no-such-model': no shipped model"),
    ],
)
def test_a_bad_widened_prior_is_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_generalist_config(tmp_path / "run", tmp_path / "cache", **overrides)


def test_distillation_labels_are_the_teachers_policy_on_the_states_it_reaches(tmp_path):
    """With a teacher, the labels at the query steps are softmax(z / temperature) of the teacher's logits z,
    recomputed here by its full forward pass over the trajectory; with no exploration and no DAgger the
    trajectories are the teacher's greedy play (its argmax at every step); and no Gittins table is read."""
    from icrl_gym.training.generalist import Experts, sample_batch

    teacher_path = _checkpoint(tmp_path)
    teacher = _model()  # the same seed: the weights of the checkpoint
    cfg = tiny_generalist_config(
        tmp_path / "run", tmp_path / "cache", teacher=str(teacher_path), label_temperature=0.5, max_epsilon=0.0
    )
    assert cfg.checkpoint_fields()["teacher"]["weights_sha256"] == read_checkpoint(teacher_path)[1]["weights_sha256"]
    rng = np.random.default_rng(2)
    for _ in range(4):
        batch = sample_batch(cfg, Experts(teacher=teacher.requires_grad_(False)), rng)
        b, horizon = batch.actions.shape
        actions = torch.as_tensor(batch.actions)
        rewards = torch.as_tensor(batch.rewards, dtype=torch.float32)
        every = teacher(actions, rewards, torch.arange(horizon).expand(b, horizon), horizon, batch.num_arms)
        chosen = every.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(chosen, every.max(-1).values, atol=1e-5)  # greedy teacher play (eps = 0), ties at random
        model_logits = teacher(actions, rewards, torch.as_tensor(batch.query_steps), horizon, batch.num_arms)
        expected = torch.softmax(model_logits.double() / 0.5, dim=-1).numpy()
        np.testing.assert_allclose(batch.targets, expected, atol=1e-5)


def test_the_beta_family_batches_need_a_teacher_and_draw_each_instance_its_own_prior(tmp_path):
    from icrl_gym.training.generalist import sample_prior

    with pytest.raises(ValueError, match="needs a teacher"):
        tiny_generalist_config(tmp_path / "run", tmp_path / "cache", beta_family_fraction=0.5)
    cfg = tiny_generalist_config(
        tmp_path / "run", tmp_path / "cache", teacher=str(_checkpoint(tmp_path)), beta_family_fraction=1.0
    )
    assert cfg.checkpoint_fields()["trained_range"]["beta_family_fraction"] == 1.0
    means = np.concatenate([sample_prior(cfg, np.random.default_rng(i), 1000, 2)[0] for i in range(4)])
    # the two arms of an instance share its Beta(a, b): Cov(mu_1, mu_2) = Var(a / (a + b)) > 0 (iid U[0, 1]
    # arms: 0), with a, b iid log-uniform on [0.3, 10]; the expectation by quadrature on a log grid
    grid = np.exp(np.linspace(np.log(0.3), np.log(10.0), 801))
    ratio = grid[:, None] / (grid[:, None] + grid[None, :])
    expected = ratio.var()  # E[ratio] = 1/2 by symmetry
    centred = means - 0.5
    assert abs((centred[:, 0] * centred[:, 1]).mean() - expected) < 0.01 and abs(means.mean() - 0.5) < 0.02


def _counts(batch, i: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """The successes s and failures f (K,) of each arm before step t of run i, recounted from its trajectory."""
    acts, rews = batch.actions[i, :t], batch.rewards[i, :t]
    s = np.array([rews[acts == a].sum() for a in range(batch.num_arms)], dtype=np.int64)
    return s, np.array([(acts == a).sum() for a in range(batch.num_arms)], dtype=np.int64) - s


def _assert_played_and_labelled(
    batch, i: int, t: int, values: np.ndarray, temperature: float, play_tol: float = 1e-9, label_tol: float = 1e-6
) -> None:
    """Run i played an argmax of ``values`` at step t, and its query steps there carry softmax(values / temperature)."""
    assert values[batch.actions[i, t]] == pytest.approx(values.max(), abs=play_tol)
    for j in np.flatnonzero(batch.query_steps[i] == t):
        target = np.exp((values - values.max()) / temperature)
        np.testing.assert_allclose(batch.targets[i, j], target / target.sum(), atol=label_tol)


def test_family_index_batches_are_labelled_by_the_family_gittins_index_of_the_recounted_counts(tmp_path):
    """With ``family_index`` the labels are softmax(G / label_temperature) of the family Gittins index, G read
    here at each query step from the counts recounted from the trajectory, the mixture's moments summed over
    the 16 priors one by one (weights ∝ L_j^eta, eta the recorded ``family_index_power``); with no exploration
    and no DAgger the index plays; the Beta-family instances (no told table) are allowed, a teacher beside it
    is not, and eta outside (0, 1] is refused."""
    from scipy.special import betaln

    from agents.bandit.family_gittins import BETA_FAMILY
    from icrl_gym.estimators.gittins import BetaGittins
    from icrl_gym.training.generalist import Experts, family_expert, sample_batch

    with pytest.raises(ValueError, match="keep one"):
        tiny_generalist_config(tmp_path / "r", tmp_path / "c", teacher=str(_checkpoint(tmp_path)), family_index=True)
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="family_index_power"):
            tiny_generalist_config(tmp_path / "r", tmp_path / "c", family_index=True, family_index_power=bad)
    temperature, power = 0.02, 0.7
    cfg = tiny_generalist_config(
        tmp_path / "run",
        tmp_path / "cache",
        family_index=True,
        family_index_power=power,
        beta_family_fraction=0.5,
        label_temperature=temperature,
        max_epsilon=0.0,
        dagger_start=10**6,
    )
    assert len(cfg.checkpoint_fields()["family_index"]["beta_priors"]) == 16
    assert cfg.checkpoint_fields()["family_index"]["evidence_power"] == power
    family = family_expert(cfg)
    lattice = BetaGittins.build(family.tables.horizon)
    rng = np.random.default_rng(5)
    for _ in range(4):
        batch = sample_batch(cfg, Experts(family=family), rng)
        k, horizon = batch.num_arms, batch.horizon
        for i in range(batch.size):
            for t in range(horizon):
                s, f = _counts(batch, i, t)
                log_w = power * np.array([sum(betaln(a + s, b + f) - betaln(a, b)) for a, b in BETA_FAMILY])
                w = np.exp(log_w - log_w.max()) / np.exp(log_w - log_w.max()).sum()
                index = []
                for arm in range(k):
                    mu = [(a + s[arm]) / (a + b + s[arm] + f[arm]) for a, b in BETA_FAMILY]
                    n = [a + b + s[arm] + f[arm] for a, b in BETA_FAMILY]
                    mean = sum(wj * m for wj, m in zip(w, mu, strict=True))
                    second = sum(wj * (m * (1 - m) / (nj + 1) + m * m) for wj, m, nj in zip(w, mu, n, strict=True))
                    c = mean * (1 - mean) / (second - mean**2) - 1
                    index.append(float(lattice.index(np.array(mean * c), np.array((1 - mean) * c), horizon - t)))
                _assert_played_and_labelled(batch, i, t, np.array(index), temperature)  # the index played


def _told_uniform_values(uniform, batch, i: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Gittins index told U[0, 1] at step t of run i, and the counts (s, f) recounted from its trajectory."""
    s, f = _counts(batch, i, t)
    return uniform.lookup(s, f, np.int64(batch.horizon - t)), s, f


def _skewed_told_uniform_run(tmp_path, temperature: float, told_temperature: float, **labeller):
    """A tiny run with half of its batches skewed and ``skewed_told_uniform``, no exploration and no DAgger, beside
    ``labeller`` (the family index or a teacher; labels at ``temperature``), and the Gittins table told U[0, 1]
    that labels the skewed batches (at ``told_temperature``)."""
    cfg = tiny_generalist_config(
        tmp_path / "run",
        tmp_path / "cache",
        beta_priors=[[5.0, 0.5]],
        skewed_fraction=0.5,
        skewed_told_uniform=True,
        label_temperature=temperature,
        told_uniform_temperature=told_temperature,
        max_epsilon=0.0,
        dagger_start=10**6,
        **labeller,
    )
    return cfg, build_gittins_table(cfg.max_horizon, 1.0, 1.0, 256)


def _batches_of_both_kinds(cfg, experts, seed: int):
    """Six batches of ``cfg`` (batch, whether it is skewed); both kinds must be among them."""
    from icrl_gym.training.generalist import sample_batch

    rng, kinds = np.random.default_rng(seed), set()
    for _ in range(6):
        batch = sample_batch(cfg, experts, rng)
        skewed = batch.prior == (1.0, 1.0)
        kinds.add(skewed)
        yield batch, skewed
    assert kinds == {True, False}


def test_skewed_batches_keep_the_uniform_gittins_labels_beside_the_family_index(tmp_path):
    """With ``skewed_told_uniform`` a skewed batch is played and labelled by the Gittins index told U[0, 1] (its
    table looked up at the counts recounted from the trajectory), the Beta batches still by the family index."""
    from icrl_gym.training.generalist import Experts, family_expert

    with pytest.raises(ValueError, match="skewed_told_uniform needs family_index or a teacher"):
        tiny_generalist_config(tmp_path / "r", tmp_path / "c", skewed_told_uniform=True)
    temperature, told_temperature = 0.02, 0.05
    cfg, uniform = _skewed_told_uniform_run(tmp_path, temperature, told_temperature, family_index=True)
    family = family_expert(cfg)
    experts = Experts(gittins=lambda a, b: gittins_table(cfg.max_horizon, a, b), family=family)
    for batch, skewed in _batches_of_both_kinds(cfg, experts, 2):
        for i in range(batch.size):
            for t in range(batch.horizon):
                told, s, f = _told_uniform_values(uniform, batch, i, t)
                if skewed:
                    _assert_played_and_labelled(batch, i, t, told, told_temperature)
                else:
                    family_values = family.scores(s[None], f[None], batch.horizon - t)[0]
                    _assert_played_and_labelled(batch, i, t, family_values, temperature)


def test_skewed_batches_keep_the_uniform_gittins_labels_beside_a_teacher(tmp_path):
    """With a teacher, ``skewed_told_uniform`` gives the skewed batches to the Gittins index told U[0, 1] (behaviour
    and labels, softmax(G / told_uniform_temperature) in the index's own units) and the Beta batches to the teacher,
    whose labels are softmax(z / label_temperature) of its logits z."""
    from icrl_gym.training.generalist import Experts

    temperature, told_temperature = 0.5, 0.01
    cfg, uniform = _skewed_told_uniform_run(tmp_path, temperature, told_temperature, teacher=str(_checkpoint(tmp_path)))
    teacher = _model().requires_grad_(False)  # the same seed: the weights of the checkpoint
    experts = Experts(gittins=lambda a, b: gittins_table(cfg.max_horizon, a, b), teacher=teacher)
    for batch, skewed in _batches_of_both_kinds(cfg, experts, 3):
        if skewed:
            for i in range(batch.size):
                for t in range(batch.horizon):
                    told = _told_uniform_values(uniform, batch, i, t)[0]
                    _assert_played_and_labelled(batch, i, t, told, told_temperature)
        else:
            actions, rewards = torch.as_tensor(batch.actions), torch.as_tensor(batch.rewards, dtype=torch.float32)
            logits = teacher(actions, rewards, torch.as_tensor(batch.query_steps), batch.horizon, batch.num_arms)
            target = torch.softmax(logits / temperature, -1).numpy()
            np.testing.assert_allclose(batch.targets, target, atol=1e-5)


def test_skewed_batches_told_their_halves_are_played_and_labelled_by_each_arms_half(tmp_path):
    """With ``skewed_told_halves`` a skewed batch is played and labelled by the Gittins index told each arm's half:
    the tables of Beta(6, 2) (the moments of U[1/2, 1]) and Beta(2, 6) (of U[0, 1/2]), the first floor(K/2) arms
    high on the skewed prior and low on the reversed one.  Which prior a batch drew is not recorded, so each skewed
    batch must match one of the two readings at every step, both readings must occur, and the index told U[0, 1]
    must not be what plays."""
    from icrl_gym.training.generalist import Experts, family_expert

    with pytest.raises(ValueError, match="skewed_told_halves needs skewed_told_uniform"):
        tiny_generalist_config(tmp_path / "r", tmp_path / "c", skewed_told_halves=True)
    told_temperature = 0.05
    labeller = {"family_index": True, "skewed_told_halves": True}
    cfg, uniform = _skewed_told_uniform_run(tmp_path, 0.02, told_temperature, **labeller)
    assert cfg.checkpoint_fields()["trained_range"]["skewed_labels"] == {"high": [6.0, 2.0], "low": [2.0, 6.0]}
    high, low = build_gittins_table(cfg.max_horizon, 6.0, 2.0, 256), build_gittins_table(cfg.max_horizon, 2.0, 6.0, 256)
    experts = Experts(gittins=lambda a, b: gittins_table(cfg.max_horizon, a, b), family=family_expert(cfg))
    readings, uniform_plays = set(), True
    for seed in range(4):
        for batch, skewed in _batches_of_both_kinds(cfg, experts, seed):
            if not skewed:
                continue
            half = batch.num_arms // 2
            for first_high in (True, False):
                tables = [high if (arm < half) == first_high else low for arm in range(batch.num_arms)]
                try:
                    for i in range(batch.size):
                        for t in range(batch.horizon):
                            s, f = _counts(batch, i, t)
                            left = batch.horizon - t
                            values = np.array([tab.lookup(s[a], f[a], left) for a, tab in enumerate(tables)])
                            _assert_played_and_labelled(batch, i, t, values, told_temperature)
                except AssertionError:
                    continue
                readings.add(first_high)
                break
            else:
                raise AssertionError("a skewed batch matches neither reading of its halves")
            uniform_plays &= all(
                _told_uniform_values(uniform, batch, i, t)[0][batch.actions[i, t]]
                == pytest.approx(_told_uniform_values(uniform, batch, i, t)[0].max())
                for i in range(batch.size)
                for t in range(batch.horizon)
            )
    assert readings == {True, False} and not uniform_plays


def test_exact_batches_are_labelled_by_the_family_bayes_dp_at_the_counts_of_the_trajectory(tmp_path):
    """An exact batch takes (K, T) from ``exact_cells``; at every query step its label is
    softmax((Q - max Q) / exact_temperature) of the mixture's Q-values, enumerated here over histories
    from the counts recounted from the trajectory; with no exploration and no DAgger the DP plays."""
    from agents.bandit.bernoulli_bayes_optimal import family_bayes_advantages
    from icrl_gym.training.exact_bernoulli import BETA_FAMILY
    from icrl_gym.training.generalist import Experts, sample_batch
    from tests.helpers import brute_force_family_q

    cells, temperature = [[2, 5], [3, 3]], 0.05
    cfg = tiny_generalist_config(
        tmp_path / "run",
        tmp_path / "cache",
        exact_fraction=1.0,
        exact_cells=cells,
        exact_temperature=temperature,
        max_epsilon=0.0,
    )
    exact = cfg.checkpoint_fields()["trained_range"]["exact"]
    assert exact["cells"] == cells and exact["temperature"] == temperature and len(exact["beta_priors"]) == 16
    experts = Experts(exact=lambda k, horizon: family_bayes_advantages(k, horizon, np.array(BETA_FAMILY)))
    q = {horizon: brute_force_family_q(horizon, BETA_FAMILY, (1.0,) * 16) for _, horizon in cells}
    rng, seen = np.random.default_rng(4), set()
    for _ in range(6):
        batch = sample_batch(cfg, experts, rng)
        k, horizon = batch.num_arms, batch.horizon
        seen.add((k, horizon))
        for i in range(batch.size):
            for t in range(horizon):
                s, f = _counts(batch, i, t)
                values = np.array(q[horizon](tuple(zip(s.tolist(), f.tolist(), strict=True))))
                _assert_played_and_labelled(batch, i, t, values, temperature, 1e-6, 1e-4)  # the DP played
    assert seen == {(2, 5), (3, 3)}


def test_exact_batch_instances_are_drawn_from_the_uniform_mixture_of_the_16_beta_priors():
    """E[p] = mean_j a_j / (a_j + b_j); two arms of one instance share its prior: Cov = Var_j(a_j / (a_j + b_j))."""
    from icrl_gym.training.exact_bernoulli import BETA_FAMILY
    from icrl_gym.training.generalist import family_mixture_means

    means = family_mixture_means(np.random.default_rng(0), 200_000, 3)
    centres = np.array([a / (a + b) for a, b in BETA_FAMILY])
    assert means.mean() == pytest.approx(centres.mean(), abs=0.003)
    assert np.cov(means[:, 0], means[:, 2])[0, 1] == pytest.approx(centres.var(), abs=0.003)
    assert means.var() == pytest.approx(
        np.mean([a * b / ((a + b) ** 2 * (a + b + 1)) for a, b in BETA_FAMILY]) + centres.var(), abs=0.003
    )


@pytest.mark.parametrize(
    ("cells", "message"),
    [([[2]], "holds \\[K, T\\] pairs"), ([[1, 10]], "needs K >= 2"), ([[5, 200]], "count states, more than")],
)
def test_an_exact_cell_the_dp_cannot_hold_is_refused(tmp_path, cells, message):
    with pytest.raises(ValueError, match=message):
        tiny_generalist_config(tmp_path / "run", tmp_path / "cache", exact_fraction=0.5, exact_cells=cells)


def test_a_resumed_distillation_refuses_a_teacher_name_that_now_holds_other_weights(tmp_path):
    """The teacher is read by name; a run resumes only on the weights it was trained with, under any name."""
    import shutil

    from icrl_gym.training.state import TrainingStateError

    teacher = _checkpoint(tmp_path)  # tmp_path / "tiny"
    kept = tmp_path / "tiny-v1"
    for suffix in (".json", ".safetensors"):
        shutil.copy(teacher.with_suffix(suffix), kept.with_suffix(suffix))

    def cfg(name, steps):
        return _train_cfg(tmp_path / "run", tmp_path, steps, teacher=str(name), beta_family_fraction=0.5)

    train(cfg(teacher, 3), echo=False)
    other = _model(seed=1)  # a new model ships under the teacher's name
    kind = CheckpointKind.GENERALIST_TRANSFORMER
    save_checkpoint(teacher, other, {"env": TRAINED_ENV}, config=other.config.to_dict(), kind=kind)
    with pytest.raises(TrainingStateError, match=r"the run's teacher .*tiny' held the weights with SHA-256"):
        train(cfg(teacher, 6), echo=False)
    train(cfg(kept, 6), echo=False)  # the same weights under their versioned name
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resumed from" in log and "changed on resume: teacher" in log


def test_keep_every_keeps_the_saved_states_of_its_multiples(tmp_path):
    """Saved states every 3 steps over 6: the newest two stay by default, every multiple of keep_every with it."""

    def kept(run, **overrides):
        train(_train_cfg(tmp_path / run, tmp_path, 6, **overrides), echo=False)
        return sorted(p.name for p in (tmp_path / run / "checkpoints").glob("step_*.safetensors"))

    assert kept("default") == ["step_0000003.safetensors", "step_0000006.safetensors"]
    assert kept("every", keep_every=3) == [f"step_000000{s}.safetensors" for s in (0, 3, 6)]


def test_exact_two_armed_batches_with_a_split_share_are_labelled_by_the_mixture_dp(tmp_path):
    """With ``exact_split_share`` s every label of a K = 2 exact batch is softmax(A / T) of the DP of the mixture
    with the split prior, A looked up in the DP's own enumeration of the layer at the counts recounted from the
    trajectory; K = 3 keeps the family-Bayes DP."""
    from agents.bandit.bernoulli_bayes_optimal import colex_combinations, compositions, family_bayes_advantages
    from icrl_gym.training.exact_bernoulli import BETA_FAMILY
    from icrl_gym.training.generalist import Experts, exact_advantages, sample_batch
    from icrl_gym.training.split_prior import SplitMixture, split_weights

    share, temperature, horizon = 0.5, 0.05, 6
    cfg = tiny_generalist_config(
        tmp_path / "run",
        tmp_path / "cache",
        exact_fraction=1.0,
        exact_cells=[[2, horizon]],
        exact_temperature=temperature,
        exact_split_share=share,
        max_epsilon=0.0,
    )
    assert cfg.checkpoint_fields()["trained_range"]["exact"]["split_share_at_two_arms"] == share
    mixture = SplitMixture(horizon).advantages(split_weights(share))
    for got, want in zip(exact_advantages(share, 2, horizon), mixture, strict=True):
        np.testing.assert_array_equal(got, want)
    family = family_bayes_advantages(3, 4, np.array(BETA_FAMILY))
    for got, want in zip(exact_advantages(share, 3, 4), family, strict=True):
        np.testing.assert_array_equal(got, want)
    layers = [[tuple(row) for row in compositions(colex_combinations(horizon + 2, 3), t)] for t in range(horizon)]
    batch = sample_batch(cfg, Experts(exact=lambda k, t: exact_advantages(share, k, t)), np.random.default_rng(5))
    for i in range(batch.size):
        x = [0, 0, 0, 0]
        for t in range(horizon):
            a, r = int(batch.actions[i, t]), int(batch.rewards[i, t])
            adv = mixture[t][layers[t].index(tuple(x))].astype(np.float64)
            assert adv[a] == 0.0  # the DP played (no exploration, no DAgger)
            for j in np.flatnonzero(batch.query_steps[i] == t):
                target = np.exp(adv / temperature)
                np.testing.assert_allclose(batch.targets[i, j], target / target.sum(), atol=1e-5)
            x[2 * a + (1 - r)] += 1


def test_exact_advantages_are_kept_on_disk_and_a_damaged_file_is_rebuilt(tmp_path, monkeypatch):
    """With a cache folder the exact advantages are written once, read back equal by a later call without the
    DP, and a truncated or foreign file is ignored with a warning, rebuilt and replaced; a folder that cannot be
    written still returns the DP's advantages, with one warning."""
    from icrl_gym.training import generalist as gen

    share = 0.5
    want = {(2, 6): gen.exact_advantages(share, 2, 6), (3, 4): gen.exact_advantages(share, 3, 4)}
    for (k, horizon), layers in want.items():
        assert [layer.shape for layer in layers] == [(math.comb(n + 2 * k - 1, 2 * k - 1), k) for n in range(horizon)]
        gen.exact_advantages(share, k, horizon, cache_dir=str(tmp_path))
    path = gen.exact_cache_path(tmp_path, share, 2, 6)
    assert path.name == "exact_advantages_K2_T6_split0.5_v1.npz"
    assert gen.exact_cache_path(tmp_path, share, 3, 4).name == "exact_advantages_K3_T4_v1.npz"

    def no_dp(*args, **kwargs):
        raise AssertionError("the DP ran although its advantages were on disk")

    with monkeypatch.context() as patch:
        patch.setattr(gen, "family_bayes_advantages", no_dp)
        patch.setattr(gen.SplitMixture, "advantages", no_dp)
        for (k, horizon), layers in want.items():
            got = gen.exact_advantages(share, k, horizon, cache_dir=str(tmp_path))
            for a, b in zip(got, layers, strict=True):
                np.testing.assert_array_equal(a, b)
    assert gen.load_exact_advantages(path, 3, 6) is None  # another cell's shapes
    assert gen.load_exact_advantages(path, 2, 5) is None  # another horizon's count of layers

    path.write_bytes(path.read_bytes()[:200])  # truncated
    with pytest.warns(RuntimeWarning, match="corrupt exact-batch cache"):
        got = gen.exact_advantages(share, 2, 6, cache_dir=str(tmp_path))
    for a, b in zip(got, want[2, 6], strict=True):
        np.testing.assert_array_equal(a, b)
    assert gen.load_exact_advantages(path, 2, 6) is not None  # replaced by a whole file

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.warns(
        RuntimeWarning, match="cannot use the exact-batch cache .*a file stands where the folder should be"
    ):
        got = gen.exact_advantages(share, 3, 4, cache_dir=str(blocked / "cache"))
    for a, b in zip(got, want[3, 4], strict=True):
        np.testing.assert_array_equal(a, b)


EXACT_CACHE_FINGERPRINTS = {
    1: {
        (0.5, 2, 6): (-31.122002, -1287.6664),
        (0.0, 2, 6): (-19.533251, -814.66576),
        (0.25, 3, 4): (-19.930290, -1355.4732),
    }
}
"""Per cache version: (split share, K, T) -> (sum of the advantages, sum weighted by their ranks), small cells."""


def test_the_exact_cache_version_names_what_the_dp_returns():
    """A file of the exact-batch cache is read back by its name alone (K, T, the split share and
    EXACT_CACHE_VERSION), so a change to the family-Bayes DP or the split prior that changes its advantages must
    raise the version, or every run folder's cache would hand a new run the old labels.  The DP on three small
    cells is held here to its values under the current version: a test that fails here asks for a new version
    and its fingerprints, not a new tolerance."""
    from icrl_gym.training import generalist as gen

    assert gen.EXACT_CACHE_VERSION in EXACT_CACHE_FINGERPRINTS, "record the fingerprints of the new version"
    for (share, k, horizon), (total, moment) in EXACT_CACHE_FINGERPRINTS[gen.EXACT_CACHE_VERSION].items():
        layers = [layer.astype(np.float64) for layer in gen.exact_advantages(share, k, horizon)]
        weighted = [layer * np.arange(1, layer.size + 1).reshape(layer.shape) for layer in layers]
        got = (sum(float(layer.sum()) for layer in layers), sum(float(layer.sum()) for layer in weighted))
        assert got == pytest.approx((total, moment), rel=1e-5), (
            f"the DP's advantages at split share {share}, K = {k}, T = {horizon} changed: raise EXACT_CACHE_VERSION"
        )


def test_exact_two_armed_means_come_from_the_split_prior_with_its_share(tmp_path):
    """One arm in [1/2, 1] and the other in [0, 1/2] (either order) in a share s of the K = 2 draws; K = 3 never."""
    from icrl_gym.training.generalist import exact_means

    cfg = tiny_generalist_config(
        tmp_path / "run", tmp_path / "cache", exact_fraction=1.0, exact_cells=[[2, 6]], exact_split_share=0.3
    )
    rng = np.random.default_rng(7)
    draws = [exact_means(cfg, rng, 50, 2) for _ in range(600)]
    split = np.array([bool(np.all((m[:, 0] >= 0.5) != (m[:, 1] >= 0.5))) for m in draws])
    assert abs(split.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 600)
    first_high = np.concatenate([m[:, 0] >= 0.5 for m, s in zip(draws, split, strict=True) if s])
    assert abs(first_high.mean() - 0.5) < 0.1
    three = [exact_means(cfg, rng, 50, 3) for _ in range(20)]
    assert not any(bool(np.all((m[:, 0] >= 0.5) != (m[:, 1] >= 0.5))) for m in three)


def test_a_split_share_without_a_two_armed_exact_cell_is_refused(tmp_path):
    with pytest.raises(ValueError, match="exact_split_share > 0 needs exact batches"):
        tiny_generalist_config(
            tmp_path / "run", tmp_path / "cache", exact_fraction=0.5, exact_cells=[[3, 10]], exact_split_share=0.2
        )


def test_the_family_expert_takes_the_split_member_and_records_it(tmp_path):
    """The index that labels the batches is the agent's with the same split weight: the same scores."""
    from agents.bandit.family_gittins import FamilyGittinsIndex
    from icrl_gym.training.generalist import family_expert

    cfg = tiny_generalist_config(
        tmp_path / "run", tmp_path / "cache", family_index=True, family_index_split_weight=0.2, max_horizon=12
    )
    assert cfg.checkpoint_fields()["family_index"]["split_weight"] == 0.2
    expert = family_expert(cfg)
    rng = np.random.default_rng(3)
    s, f = rng.integers(0, 4, (5, 4)), rng.integers(0, 4, (5, 4))
    want = FamilyGittinsIndex(12, cache_dir=tmp_path / "cache", evidence_power=1.0, split_weight=0.2).scores(s, f, 6)
    np.testing.assert_array_equal(expert.scores(s, f, 6), want)
    assert not np.array_equal(want, FamilyGittinsIndex(12, cache_dir=tmp_path / "cache").scores(s, f, 6))
    for index, weight, message in ((False, 0.2, "needs family_index"), (True, 1.0, "must be below 1")):
        with pytest.raises(ValueError, match=message):
            tiny_generalist_config(
                tmp_path / "r2", tmp_path / "cache", family_index=index, family_index_split_weight=weight
            )
    # the split member's evidence at its own power: the agent's index with the same split_power
    untempered = tiny_generalist_config(
        tmp_path / "r3",
        tmp_path / "cache",
        family_index=True,
        family_index_power=0.5,
        family_index_split_weight=0.2,
        family_index_split_power=1.0,
        max_horizon=12,
    )
    assert untempered.checkpoint_fields()["family_index"]["split_power"] == 1.0
    want = FamilyGittinsIndex(12, cache_dir=tmp_path / "cache", evidence_power=0.5, split_weight=0.2, split_power=1.0)
    np.testing.assert_array_equal(family_expert(untempered).scores(s, f, 6), want.scores(s, f, 6))
    with pytest.raises(ValueError, match="needs family_index_split_weight"):
        tiny_generalist_config(tmp_path / "r4", tmp_path / "cache", family_index=True, family_index_split_power=1.0)
    # the fresh news: recorded, and the agent's index with the same scale labels the batches
    news = tiny_generalist_config(
        tmp_path / "r5", tmp_path / "cache", family_index=True, family_index_fresh_news=20.0, max_horizon=12
    )
    assert news.checkpoint_fields()["family_index"]["fresh_news"] == 20.0
    assert family_expert(news).fresh_news == 20.0
    want = FamilyGittinsIndex(12, cache_dir=tmp_path / "cache", fresh_news=20.0)
    np.testing.assert_array_equal(family_expert(news).scores(s, f, 6), want.scores(s, f, 6))
    with pytest.raises(ValueError, match="family_index_fresh_news needs family_index"):
        tiny_generalist_config(tmp_path / "r6", tmp_path / "cache", family_index_fresh_news=20.0)


def test_arm_attention_is_softmax_attention_and_ignores_masked_arms():
    """The written-out attention across arms equals torch's fused attention, per head, with and without padded arms.

    Reference: ``scaled_dot_product_attention`` on the same q, k, v (masking the padded keys with ``attn_mask``); and a
    real arm's output must not change when the padded arms' tokens do.
    """
    torch.manual_seed(0)
    attn = ArmSelfAttention(GeneralistConfig(**TINY))
    b, nq, na, d = 3, 2, 6, attn.qkv.in_features
    arms = torch.randn(b, nq, na, d)
    q, k, v = attn.qkv(arms).view(b * nq, na, 3, attn.n_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True, False, True, True, False, True]])
    for arm_mask in (None, mask):
        keep = None if arm_mask is None else arm_mask.repeat_interleave(nq, 0).view(b * nq, 1, 1, na)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        expected = attn.out(y.transpose(1, 2).reshape(b, nq, na, d))
        torch.testing.assert_close(attn(arms, arm_mask), expected, rtol=1e-5, atol=1e-6)
    changed = arms.clone()
    changed[~mask.view(b, 1, na).expand(b, nq, na)] = 100.0
    real = mask.view(b, 1, na).expand(b, nq, na)
    torch.testing.assert_close(attn(changed, mask)[real], attn(arms, mask)[real], rtol=1e-5, atol=1e-6)


def test_a_resume_that_changes_the_configuration_is_recorded_in_the_checkpoints(tmp_path):
    """The steps before a resume ran under the old values: every later checkpoint says which, and from which step."""
    train(_train_cfg(tmp_path / "run", tmp_path, 3), echo=False)
    _, meta = read_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000003")
    assert "changed_on_resume" not in meta
    train(_train_cfg(tmp_path / "run", tmp_path, 6), echo=False)
    train(_train_cfg(tmp_path / "run", tmp_path, 9), echo=False)
    first = {"step": 3, "changes": ["steps: 3 -> 6"]}
    _, meta = read_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000006")
    assert meta["changed_on_resume"] == [first]
    _, meta = read_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000009")
    assert meta["changed_on_resume"] == [first, {"step": 6, "changes": ["steps: 6 -> 9"]}]
    train(_train_cfg(tmp_path / "run", tmp_path, 9), echo=False)  # a resume that changes nothing adds nothing
    _, meta = read_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000009")
    assert len(meta["changed_on_resume"]) == 2
