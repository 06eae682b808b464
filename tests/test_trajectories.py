import json

import numpy as np
import pytest

from agents import LinUCB, ts_uniform_mixture
from icrl_gym.data.trajectories import (
    DatasetError,
    collect_trajectories,
    load_trajectories,
    save_trajectories,
)
from icrl_gym.envs import bernoulli_bandit_spec, linear_bandit_spec


@pytest.fixture
def small_linear():
    return linear_bandit_spec(horizon=20)


def test_ad_labels_are_the_actions_and_values_are_linucb_index(small_linear):
    data = collect_trajectories(small_linear, "linucb", 50, seed=1, label="ad", store_values=True, store_probs=True)
    np.testing.assert_array_equal(data.labels, data.actions)
    # LinUCB takes the argmax of its own index; its distribution is the one-hot of that argmax.
    np.testing.assert_array_equal(data.label_values.argmax(-1), data.actions)
    np.testing.assert_array_equal(data.label_probs.argmax(-1), data.actions)
    assert data.meta["context"]["name"] == "linucb" and data.meta["seed"] == 1


def test_dpt_labels_are_optimal_actions(small_linear):
    data = collect_trajectories(small_linear, "uniform", 40, seed=2, label="dpt")
    best = np.einsum("ntad,nd->nta", data.step_action_sets(), data.w_star).argmax(-1)
    np.testing.assert_array_equal(data.labels, best)
    np.testing.assert_allclose(data.regret[np.arange(40)[:, None], np.arange(20)][data.actions == best], 0, atol=1e-6)


def test_approx_dpt_labels_use_the_whole_trajectory():
    spec = linear_bandit_spec(horizon=30, action_set="per_step")
    data = collect_trajectories(spec, "uniform", 5, seed=3, label="approx_dpt")
    sets = data.step_action_sets().astype(np.float64)
    for b in range(5):
        A = sets[b, np.arange(30), data.actions[b]]
        w_hat = np.linalg.solve(np.eye(5) + A.T @ A, A.T @ data.rewards[b].astype(np.float64))
        np.testing.assert_array_equal(data.labels[b], (sets[b] @ w_hat).argmax(-1))
    assert data.labels.shape == (5, 30)


def test_expert_labels_follow_the_context_history(small_linear):
    data = collect_trajectories(small_linear, "uniform", 10, seed=4, label="expert", expert=LinUCB(alpha=1.0))
    # replay LinUCB on the uniform policy's trajectory: its proposals are the labels
    replay = LinUCB(alpha=1.0)
    replay.reset(batch_size=10, dim=5, num_actions=10)
    sets = data.step_action_sets().astype(np.float64)
    for t in range(20):
        np.testing.assert_array_equal(replay.act_batch(sets[:, t]), data.labels[:, t])
        replay.update_batch(sets[:, t], data.actions[:, t].astype(int), data.rewards[:, t].astype(np.float64))


def test_mixture_context_and_common_random_numbers():
    spec = bernoulli_bandit_spec(horizon=10)
    a = collect_trajectories(spec, ts_uniform_mixture(0.5), 30, seed=9, label="dpt")
    b = collect_trajectories(spec, "ucb", 30, seed=9, label="dpt")
    np.testing.assert_array_equal(a.w_star, b.w_star)  # same instances under one seed
    np.testing.assert_array_equal(a.labels, b.labels)


def test_collection_is_reproducible_and_batch_independent_of_labels(small_linear):
    a = collect_trajectories(small_linear, "linear_ts", 30, seed=5, label="ad", batch_size=7)
    b = collect_trajectories(small_linear, "linear_ts", 30, seed=5, label="ad", batch_size=7)
    for k, v in a.arrays().items():
        np.testing.assert_array_equal(v, b.arrays()[k])


def test_save_load_roundtrip(tmp_path, small_linear):
    data = collect_trajectories(small_linear, "soft_linucb", 12, seed=6, label="ad", store_probs=True)
    path = save_trajectories(data, tmp_path / "d.npz")
    loaded = load_trajectories(path, expect=small_linear)
    for k, v in data.arrays().items():
        np.testing.assert_array_equal(v, loaded.arrays()[k])
    assert loaded.meta["context"] == data.meta["context"]
    assert json.loads((tmp_path / "d.json").read_text())["seed"] == 6


def test_saved_files_are_world_readable(tmp_path, small_linear):
    path = save_trajectories(collect_trajectories(small_linear, "uniform", 2, seed=0), tmp_path / "d.npz")
    assert path.stat().st_mode & 0o044 == 0o044  # not mkstemp's private 0600


def test_dotted_dataset_name(tmp_path, small_linear):
    path = save_trajectories(collect_trajectories(small_linear, "uniform", 2, seed=0), tmp_path / "run-alpha0.5")
    assert path.name == "run-alpha0.5.npz" and (tmp_path / "run-alpha0.5.json").exists()


def test_truncated_and_corrupt_files(tmp_path, small_linear):
    path = save_trajectories(collect_trajectories(small_linear, "uniform", 8, seed=0), tmp_path / "d.npz")
    raw = path.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DatasetError, match="corrupt or truncated"):
        load_trajectories(tmp_path / "trunc.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(DatasetError, match="corrupt or truncated"):
        load_trajectories(tmp_path / "junk.npz")
    with pytest.raises(DatasetError, match="no trajectory file"):
        load_trajectories(tmp_path / "missing.npz")


def test_mismatched_environment(tmp_path, small_linear):
    path = save_trajectories(collect_trajectories(small_linear, "uniform", 4, seed=0), tmp_path / "d.npz")
    with pytest.raises(DatasetError, match="horizon=20"):
        load_trajectories(path, expect=linear_bandit_spec(horizon=200))
    with pytest.raises(DatasetError, match="num_actions"):
        load_trajectories(path, expect=linear_bandit_spec(horizon=20, num_actions=8))


def test_failed_write_keeps_the_previous_file(tmp_path, small_linear, monkeypatch):
    data = collect_trajectories(small_linear, "uniform", 4, seed=0)
    path = save_trajectories(data, tmp_path / "d.npz")
    before = path.read_bytes()

    def broken_savez(fh, **arrays):
        fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        save_trajectories(data, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "d.npz"]


def test_bad_collection_requests(small_linear):
    with pytest.raises(ValueError, match="label mode"):
        collect_trajectories(small_linear, "uniform", 2, label="bc")
    with pytest.raises(ValueError, match="needs an expert"):
        collect_trajectories(small_linear, "uniform", 2, label="expert")
    with pytest.raises(ValueError, match="index expert"):
        collect_trajectories(small_linear, "linear_ts", 2, label="ad", store_values=True)


def test_compact_format_loads_bit_for_bit_and_is_smaller(tmp_path):
    spec = linear_bandit_spec(horizon=30)
    data = collect_trajectories(spec, "linucb", 40, seed=7, label="ad", store_values=True)
    path = save_trajectories(data, tmp_path / "v2.npz")
    with np.load(path) as npz:
        stored = set(npz.files)
        assert npz["actions"].dtype == np.uint8 and npz["arm_means"].shape == (40, 10)
        assert npz["best_reward"].shape == (40,)
    assert {"labels", "expected_rewards", "best_rewards"}.isdisjoint(stored)  # labels == actions for "ad"
    loaded = load_trajectories(path, expect=spec)
    for k, v in data.arrays().items():
        assert loaded.arrays()[k].dtype == v.dtype, k
        np.testing.assert_array_equal(loaded.arrays()[k], v)
    # every array as held in memory (the layout before the compact one) takes more than 10% more room
    meta_json = json.dumps({**data.meta, "format_version": 1})
    np.savez(tmp_path / "v1.npz", **data.arrays(), meta_json=np.array(meta_json))
    assert path.stat().st_size < 0.9 * (tmp_path / "v1.npz").stat().st_size
    # float16 index values: at most 2^-11 relative error, half the bytes of the float32 ones
    small = save_trajectories(data, tmp_path / "v2h.npz", compact_values=True)
    values = load_trajectories(small).label_values
    assert values.dtype == np.float32
    np.testing.assert_allclose(values, data.label_values, rtol=2.0**-11, atol=2.0**-24)
    assert small.stat().st_size < path.stat().st_size - data.label_values.nbytes // 3


def test_compact_format_keeps_per_step_action_sets_and_distinct_labels(tmp_path):
    spec = linear_bandit_spec(horizon=15, action_set="per_step")
    data = collect_trajectories(spec, "uniform", 8, seed=8, label="dpt")
    path = save_trajectories(data, tmp_path / "p.npz")
    with np.load(path) as npz:
        assert npz["labels"].dtype == np.uint8 and "expected_rewards" in npz.files
    loaded = load_trajectories(path)
    for k, v in data.arrays().items():
        assert loaded.arrays()[k].dtype == v.dtype, k
        np.testing.assert_array_equal(loaded.arrays()[k], v)
