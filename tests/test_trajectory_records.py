"""Trajectory records that do not describe their arrays, consistently hashed, so that only the checks catch them.

Every such record is refused naming the mismatch; a consistent restamped file loads; the versions before the
hash are refused by their version.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from icrl_gym.data.trajectories import (
    DatasetError,
    TrajectoryData,
    collect_trajectories,
    load_trajectories,
    save_trajectories,
)
from icrl_gym.envs import linear_bandit_spec
from tests.test_corruption import (  # noqa: F401  (trajectory_file: a fixture)
    _npy,
    _npy_bytes,
    _npz_members,
    _restamped_npz,
    _zip,
    trajectory_file,
)

# ---------------------------------------------------------------------------------------------
# item 1: records that do not describe their arrays (consistently hashed, so only the checks catch them)


@pytest.fixture(scope="module")
def ad_data() -> TrajectoryData:
    return collect_trajectories(linear_bandit_spec(horizon=50, dim=5), "linucb", 6, seed=2, label="ad")


def _stored(data: TrajectoryData) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and record of ``data`` in the version-1 layout (every array as held in memory)."""
    return dict(data.arrays()), json.loads(json.dumps({**data.meta, "format_version": 3}))


def _inconsistent_cases(data: TrajectoryData) -> list[tuple[str, dict[str, np.ndarray], dict, str]]:
    arrays, meta = _stored(data)
    env = meta["env"]
    labels = arrays["labels"].copy()
    labels[0, 3] = 10
    rewards = arrays["rewards"].copy()
    rewards[1, 2] = np.nan
    sets = arrays["action_sets"].copy()
    sets[0, 0, 0] = np.inf
    no_labels = {k: v for k, v in arrays.items() if k != "labels"}
    return [
        ("dim", arrays, {**meta, "env": {**env, "dim": 7}}, r"env\.dim=7 in the record, d=5 in the arrays"),
        ("horizon", arrays, {**meta, "env": {**env, "horizon": 999}}, r"env\.horizon=999 in the record, T=50"),
        ("num_actions", arrays, {**meta, "env": {**env, "num_actions": 4}}, r"env\.num_actions=4 in the record, A=10"),
        ("action_set", arrays, {**meta, "env": {**env, "action_set": "per_step"}}, r"env\.action_set='per_step'"),
        ("runs", arrays, {**meta, "num_trajectories": 60}, r"num_trajectories=60 in the record, N=6"),
        ("label range", {**arrays, "labels": labels}, meta, r"labels outside \[0, 10\): .*\[0, 10\], A=10"),
        ("labels missing", no_labels, meta, r"label='ad' in the record needs labels, but the arrays hold none"),
        ("label mode", arrays, {**meta, "label": "bc"}, r"label='bc' in the record: unknown label mode"),
        (
            "store_values",
            arrays,
            {**meta, "store_values": True},
            r"store_values=True in the record, label_values absent",
        ),  # noqa: E501
        ("NaN rewards", {**arrays, "rewards": rewards}, meta, r"rewards holds 1 non-finite values"),
        ("infinite action sets", {**arrays, "action_sets": sets}, meta, r"action_sets holds 1 non-finite values"),
        ("env", arrays, {**meta, "env": [1, 2]}, r"env in the record is not a bandit prior"),
    ]


@pytest.mark.parametrize("case", range(12))
def test_records_inconsistent_with_their_arrays_are_refused(ad_data, tmp_path, case):
    name, arrays, meta, message = _inconsistent_cases(ad_data)[case]
    path = tmp_path / f"{name.replace(' ', '_')}.npz"
    path.write_bytes(_restamped_npz(arrays, meta))
    with pytest.raises(DatasetError, match=message) as err:
        load_trajectories(path)
    assert str(path) in str(err.value)
    # the same data in memory is refused by the writer too
    data = TrajectoryData(**arrays, meta=meta)
    with pytest.raises(DatasetError, match=message):
        save_trajectories(data, tmp_path / "again.npz")
    assert not (tmp_path / "again.npz").exists()


def test_a_consistent_restamped_file_loads(ad_data, tmp_path):
    """The forging helper above is right: unchanged arrays and record load as the original."""
    arrays, meta = _stored(ad_data)
    (tmp_path / "ok.npz").write_bytes(_restamped_npz(arrays, meta))
    loaded = load_trajectories(tmp_path / "ok.npz")
    for k, v in ad_data.arrays().items():
        np.testing.assert_array_equal(loaded.arrays()[k], v)


def test_unhashed_versions_are_refused(ad_data, trajectory_file, tmp_path):  # noqa: F811  (the imported fixture)
    """Version-1 and -2 files (written before the hash) are refused by their version; version 3 needs its hash.

    A current file stripped of its hash and relabelled version 2 is refused the same way: an unhashed file
    never loads as unverified data.
    """
    arrays, meta = _stored(ad_data)
    path, _ = trajectory_file
    members = _npz_members(path.read_bytes())
    stripped = json.loads(str(_npy(members["meta_json.npy"])[()])) | {"format_version": 2}
    del stripped["content_sha256"]
    members["meta_json.npy"] = _npy_bytes(np.array(json.dumps(stripped)))
    (tmp_path / "v2-downgraded.npz").write_bytes(_zip(members))
    for version, name in ((1, "v1.npz"), (2, "v2.npz"), (2, "v2-downgraded.npz")):
        if name != "v2-downgraded.npz":
            np.savez(tmp_path / name, **arrays, meta_json=np.array(json.dumps({**meta, "format_version": version})))
        with pytest.raises(DatasetError, match=f"{name} has format version {version}, expected 3"):
            load_trajectories(tmp_path / name)
    np.savez(tmp_path / "v3.npz", **arrays, meta_json=np.array(json.dumps(meta)))
    with pytest.raises(DatasetError, match="format version 3 needs content_sha256, it has none"):
        load_trajectories(tmp_path / "v3.npz")
