"""Offline trajectories for supervised pretraining: collect with Alg_0, label with Alg_E, store.

Section 3 of the paper: a context algorithm Alg_0 interacts with N
instances M ~ Lambda for T steps, giving D_T = (A_1, a_1, r_1, ..., A_T, a_T, r_T); an expert
labels every step t with an action a-bar_t.  The label modes ("ad", "dpt", "approx_dpt",
"expert", "none") are :class:`icrl_gym.data.labels.LabelMode`; the loop is
:func:`icrl_gym.data.pipeline.run_collection`, run here on a :class:`BanditRecorder`.

The same loop evaluates algorithms: :func:`evaluate_regret` is a collection without labels.

In memory a dataset is a :class:`TrajectoryData` holding the arrays below (N runs, horizon T,
A arms, dimension d):

================== ========================= ===================================================
key                shape / dtype             meaning
================== ========================= ===================================================
action_sets        (N, A, d) or (N, T, A, d) the action set (fixed, or one per step), float32
actions            (N, T) int16              arm index a_t pulled by Alg_0
rewards            (N, T) float32            observed reward r_t
expected_rewards   (N, T) float32            <a_t, w*>
best_rewards       (N, T) float32            max_k <a_{t,k}, w*>
w_star             (N, d) float32            the instance
labels             (N, T) int16              expert label a-bar_t (absent for mode "none")
label_probs        (N, T, A) float16         expert's action distribution (optional)
label_values       (N, T, A) float32         expert's per-arm index, e.g. LinUCB's v_{t,k} (optional)
================== ========================= ===================================================

On disk (format version 2) a dataset is one ``.npz`` (loaded with ``allow_pickle=False``)
holding ``meta_json``, the JSON of the configuration and seed that made it (also written beside
it as ``<name>.json``), and the arrays stored without redundancy, every step reproduced bit for
bit on loading:

- ``actions`` and ``labels`` in the smallest unsigned integer type holding A-1 (uint8 for A <= 256);
  ``labels`` is not stored when it equals ``actions`` (label "ad": the context algorithm labels itself);
- ``best_rewards`` as ``best_reward`` (N,) when it is the same at every step (fixed action sets);
- ``expected_rewards`` as ``arm_means`` (N, A), the float32 <a_k, w*> of every arm, when every
  step's value is the mean of the arm pulled (fixed action sets).  The means are copied from the
  recorded steps, not recomputed: <a_k, w*> from the float32 copies of a_k and w* differs from the
  environment's float64 value in the last float32 bit for about 30% of the steps;
- ``label_values`` in float32, or float16 with ``save_trajectories(..., compact_values=True)``: an
  error of at most 2^-11 relative (measured on paper-size LinUCB indices in [-3.7, 6.6]: largest
  absolute error 0.00195, root mean square 0.00022), far below the noise of a value-loss fit,
  but not nothing, so it is not the default.

Rewards, action sets and w* stay float32, as collected: the environment's rewards and means are
float64, and float32 keeps 24 bits (7 digits), beyond the noise (sd 1.5) and the statistical
error of any estimate made from 200 steps by a factor of 10^5.  Files of format version 1
(every array as held in memory) still load.

Writes are atomic (a temporary file renamed over the target), so an interrupted save never
leaves a half-written dataset under the final name.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from icrl_gym.algorithm import BanditAgent, MDPAgent
from icrl_gym.data.batch_recorder import BatchRecorder
from icrl_gym.data.crn import CRNBatch
from icrl_gym.data.labels import AgentSpec, Labelling, LabelMode
from icrl_gym.data.pipeline import Labels, Step, run_collection
from icrl_gym.envs.bandit_core import BanditBatch, BanditSpec
from icrl_gym.fileio import atomic_write, describe_size
from icrl_gym.statistics import RidgeStatistics

FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_log = logging.getLogger(__name__)
_REQUIRED = ("action_sets", "actions", "rewards", "expected_rewards", "best_rewards", "w_star")


class DatasetError(ValueError):
    """A trajectory file that is missing, corrupt, truncated or made for another environment."""


@dataclass
class TrajectoryData:
    """N trajectories of length T (arrays documented in the module docstring) and their metadata."""

    action_sets: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    expected_rewards: np.ndarray
    best_rewards: np.ndarray
    w_star: np.ndarray
    labels: np.ndarray | None = None
    label_probs: np.ndarray | None = None
    label_values: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_trajectories(self) -> int:
        """Number of runs N."""
        return self.actions.shape[0]

    @property
    def horizon(self) -> int:
        """Number of steps T."""
        return self.actions.shape[1]

    @property
    def spec(self) -> BanditSpec:
        """The environment prior the data was drawn from."""
        return BanditSpec.from_dict(self.meta["env"])

    @property
    def regret(self) -> np.ndarray:
        """Per-step pseudo-regret max_k <a_{t,k}, w*> - <a_t, w*>, shape (N, T)."""
        return self.best_rewards.astype(np.float64) - self.expected_rewards.astype(np.float64)

    def step_action_sets(self, index: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Action sets of the selected runs at every step, shape (n, T, A, d) (a broadcast view)."""
        sets = self.action_sets[index]
        if sets.ndim == 3:
            return np.broadcast_to(sets[:, None], (sets.shape[0], self.horizon, *sets.shape[1:]))
        return sets

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that are present, by name."""
        names = (*_REQUIRED, "labels", "label_probs", "label_values")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}

    def validate(self) -> None:
        """Check that all arrays agree in N, T, A and d; raise :class:`DatasetError` if not."""
        n, t = self.actions.shape
        d = self.w_star.shape[-1]
        a = self.action_sets.shape[-2]
        expected = {
            "rewards": (n, t),
            "expected_rewards": (n, t),
            "best_rewards": (n, t),
            "w_star": (n, d),
            "labels": (n, t),
            "label_probs": (n, t, a),
            "label_values": (n, t, a),
        }
        if self.action_sets.shape not in ((n, a, d), (n, t, a, d)):
            raise DatasetError(f"action_sets has shape {self.action_sets.shape}, expected ({n}, [{t},] A, {d})")
        for key, shape in expected.items():
            arr = getattr(self, key)
            if arr is not None and arr.shape != shape:
                raise DatasetError(f"{key} has shape {arr.shape}, expected {shape}")
        if self.actions.size and (self.actions.min() < 0 or self.actions.max() >= a):
            raise DatasetError(f"actions outside [0, {a})")


def _index_dtype(num_actions: int) -> type[np.unsignedinteger]:
    """The smallest unsigned integer type holding the arm indices 0..A-1."""
    return np.uint8 if num_actions <= 256 else np.uint16


def _pack(data: TrajectoryData, compact_values: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays stored for ``data`` (format version 2) and the storage notes for its metadata."""
    arrays = data.arrays()
    notes: dict[str, Any] = {}
    n, num_actions = data.num_trajectories, data.action_sets.shape[-2]
    index_dtype = _index_dtype(num_actions)
    arrays["actions"] = data.actions.astype(index_dtype)
    if data.labels is not None:
        if np.array_equal(data.labels, data.actions):
            del arrays["labels"]
            notes["labels"] = "actions"
        else:
            arrays["labels"] = data.labels.astype(index_dtype)
    best = data.best_rewards
    if best.size and np.array_equal(best, np.broadcast_to(best[:, :1], best.shape)):
        del arrays["best_rewards"]
        arrays["best_reward"] = best[:, 0].copy()
    if data.action_sets.ndim == 3 and data.actions.size:
        # copy each arm's mean from a step that pulled it; arms never pulled keep NaN
        rows = np.arange(n)[:, None]
        means = np.full((n, num_actions), np.nan, data.expected_rewards.dtype)
        means[rows, data.actions] = data.expected_rewards
        if np.array_equal(means[rows, data.actions], data.expected_rewards):
            del arrays["expected_rewards"]
            arrays["arm_means"] = means
    if compact_values and data.label_values is not None:
        arrays["label_values"] = data.label_values.astype(np.float16)
        notes["label_values"] = "float16"
    return arrays, notes


def _unpack(contents: dict[str, np.ndarray], notes: dict[str, Any]) -> dict[str, np.ndarray]:
    """Inverse of :func:`_pack`: the in-memory arrays (int16 indices, float32 values, every step)."""
    actions = contents["actions"].astype(np.int16)
    contents["actions"] = actions
    if "labels" in contents:
        contents["labels"] = contents["labels"].astype(np.int16)
    elif notes.get("labels") == "actions":
        contents["labels"] = actions.copy()
    if "best_reward" in contents:
        best = contents.pop("best_reward")
        contents["best_rewards"] = np.repeat(best[:, None], actions.shape[1], axis=1)
    if "arm_means" in contents:
        means = contents.pop("arm_means")
        if actions.size and (actions.min() < 0 or actions.max() >= means.shape[-1]):
            raise DatasetError(f"actions outside [0, {means.shape[-1]})")
        contents["expected_rewards"] = np.take_along_axis(means, actions.astype(np.intp), axis=1)
    if "label_values" in contents:
        contents["label_values"] = contents["label_values"].astype(np.float32)
    return contents


def save_trajectories(data: TrajectoryData, path: str | os.PathLike, compact_values: bool = False) -> Path:
    """Write ``data`` atomically to ``path`` (.npz) and its metadata to ``path`` with suffix .json.

    The arrays are stored without redundancy (module docstring) and load back bit for bit;
    ``compact_values`` stores the per-arm index values in float16 (relative error <= 2^-11).
    """
    data.validate()
    path = Path(path)
    if path.suffix != ".npz":
        path = Path(str(path) + ".npz")  # not with_suffix: names may hold dots (alpha0.5)
    stored, notes = _pack(data, compact_values)
    meta = {**data.meta, "format_version": FORMAT_VERSION, "storage": notes}
    meta_json = json.dumps(meta, indent=2, sort_keys=True)
    arrays: dict[str, Any] = {**stored, "meta_json": np.array(meta_json)}  # Any: savez takes **kwds
    atomic_write(path, lambda fh: np.savez(fh, **arrays))
    atomic_write(Path(str(path)[: -len(".npz")] + ".json"), lambda fh: fh.write(meta_json.encode()))
    _log.info("wrote %s", describe_size(path))
    return path


def load_trajectories(path: str | os.PathLike, expect: BanditSpec | None = None) -> TrajectoryData:
    """Load a dataset written by :func:`save_trajectories` without executing any pickled code.

    Reads format versions 1 and 2 and returns the in-memory arrays of the module docstring.
    Raises :class:`DatasetError` for a missing, truncated or corrupt file, an unknown format
    version, inconsistent arrays, or (when ``expect`` is given) a dataset drawn from a prior
    with another d, A or T.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"no trajectory file at {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            contents = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as err:
        raise DatasetError(f"{path} is corrupt or truncated ({type(err).__name__}: {err})") from err
    if "meta_json" not in contents:
        raise DatasetError(f"{path} is not an icrl-gym trajectory file: missing ['meta_json']")
    meta = json.loads(str(contents.pop("meta_json")))
    version = meta.get("format_version")
    if version not in _READABLE_VERSIONS:
        raise DatasetError(f"{path} has format version {version}, expected one of {_READABLE_VERSIONS}")
    if "actions" in contents:
        contents = _unpack(contents, meta.pop("storage", {}))
    missing = [k for k in _REQUIRED if k not in contents]
    if missing:
        raise DatasetError(f"{path} is not an icrl-gym trajectory file: missing {missing}")
    data = TrajectoryData(**contents, meta=meta)
    data.validate()
    if expect is not None:
        check_spec_matches(data.spec, expect, what=f"dataset {path}")
    return data


def check_spec_matches(found: BanditSpec, expect: BanditSpec, what: str) -> None:
    """Raise :class:`DatasetError` when d, A or T of two environment priors differ."""
    for name in ("dim", "num_actions", "horizon", "arms", "action_set"):
        if getattr(found, name) != getattr(expect, name):
            raise DatasetError(
                f"{what} was made for {name}={getattr(found, name)!r} "
                f"but the environment has {name}={getattr(expect, name)!r}"
            )


def _ridge_argmax_labels(step_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray, lam: float) -> np.ndarray:
    """Approximate-DPT labels: argmax_k <a_{t,k}, w_hat> with w_hat the ridge fit on all of D_T."""
    n, t = actions.shape
    stats = RidgeStatistics(n, step_sets.shape[-1], lam)
    rows = np.arange(n)
    for s in range(t):
        stats.update(step_sets[:, s][rows, actions[:, s]], rewards[:, s])
    w_hat = stats.estimate()
    return np.einsum("ntad,nd->nta", step_sets, w_hat).argmax(axis=-1)


class BanditRecorder(BatchRecorder[BanditBatch]):
    """The bandit side of :func:`~icrl_gym.data.pipeline.run_collection`: instances, :class:`TrajectoryData`."""

    default_batch_size = 10_000

    def __init__(self, spec: BanditSpec, num_runs: int) -> None:
        n, t, a, d = num_runs, spec.horizon, spec.num_actions, spec.dim
        self.spec, self.num_steps, self.num_actions = spec, t, a
        self.fixed = spec.action_set == "fixed"
        self.data = TrajectoryData(
            action_sets=np.zeros((n, a, d) if self.fixed else (n, t, a, d), np.float32),
            actions=np.zeros((n, t), np.int16),
            rewards=np.zeros((n, t), np.float32),
            expected_rewards=np.zeros((n, t), np.float32),
            best_rewards=np.zeros((n, t), np.float32),
            w_star=np.zeros((n, d), np.float32),
        )
        self._rows = slice(0, 0)
        self._batch = None

    def begin(self, batch: CRNBatch) -> None:
        """Draw w* (and the first action sets) of the batch's instances from its environment generator."""
        self._rows, self._batch = batch.rows, BanditBatch(self.spec, batch.size, batch.env_rng)
        self.data.w_star[batch.rows] = self._batch.w_star
        if self.fixed:
            self.data.action_sets[batch.rows] = self._batch.action_sets

    def reset(self, agent: BanditAgent | MDPAgent, rng: np.random.Generator) -> None:
        """Reset a bandit algorithm on the batch; the env's model lets Bayesian agents read noise and prior."""
        if not isinstance(agent, BanditAgent):
            raise TypeError(f"a bandit prior needs bandit algorithms, got {type(agent).__name__}")
        spec, batch = self.spec, self.batch
        info = {"model": spec.to_dict()}  # what the env's reset info carries
        agent.reset(
            info, batch_size=batch.batch_size, dim=spec.dim, num_actions=spec.num_actions, w_star=batch.w_star, rng=rng
        )

    def observe(self, t: int) -> tuple[np.ndarray]:
        """The action sets of step t (recorded when they change every step)."""
        sets = self.batch.action_sets
        if not self.fixed:
            self.data.action_sets[self._rows, t] = sets
        return (sets,)

    def step(self, t: int, actions: np.ndarray) -> Step:
        """Pull the arms; records a_t, r_t, <a_t, w*> and max_k <a_{t,k}, w*>."""
        out = self.batch.step(actions)
        rows, data = self._rows, self.data
        data.actions[rows, t] = actions
        data.rewards[rows, t] = out["reward"]
        data.expected_rewards[rows, t] = out["expected_reward"]
        data.best_rewards[rows, t] = out["best_expected_reward"]
        return Step(feedback=(out["reward"],), optimal_action=out["optimal_action"])

    def hindsight_labels(self, rows: slice, lam: float) -> np.ndarray:
        """Approximate-DPT labels: argmax_k <a_{t,k}, w_hat> with w_hat the ridge fit on all of D_T."""
        data = self.data
        return _ridge_argmax_labels(data.step_action_sets(rows), data.actions[rows], data.rewards[rows], lam)

    def result(self, labels: Labels, meta: dict[str, Any]) -> TrajectoryData:
        """The trajectories with their labels and ``meta``."""
        self.data.labels, self.data.label_probs, self.data.label_values = labels.labels, labels.probs, labels.values
        self.data.meta = {"env": self.spec.to_dict(), **meta}
        return self.data


def collect_trajectories(
    spec: BanditSpec,
    context: AgentSpec,
    num_trajectories: int,
    seed: int = 0,
    label: LabelMode | str = LabelMode.NONE,
    expert: AgentSpec | None = None,
    store_probs: bool = False,
    store_values: bool = False,
    batch_size: int = BanditRecorder.default_batch_size,
    approx_dpt_lam: float = 1.0,
    progress: Callable[[int], Any] | None = None,
) -> TrajectoryData:
    """Run Alg_0 on ``num_trajectories`` fresh bandit instances and label every step (``label``, a :class:`LabelMode`).

    :func:`icrl_gym.data.pipeline.run_collection` on a :class:`BanditRecorder`.  Instances, noise
    and the algorithms' randomness come from ``seed`` by the common-random-numbers convention of
    :mod:`icrl_gym.data.crn`: every algorithm run with the same seed and batch size faces the same
    instances and the same noise.  ``store_probs`` keeps the labeller's action distribution;
    ``store_values`` keeps an index labeller's per-arm index values.  ``progress`` is an optional
    callable taking the number of runs finished.
    """
    labelling = Labelling(LabelMode.parse(label), expert=expert, store_probs=store_probs, store_values=store_values)
    return run_collection(
        BanditRecorder(spec, num_trajectories),
        context,
        num_trajectories,
        labelling,
        seed=seed,
        batch_size=batch_size,
        approx_dpt_lam=approx_dpt_lam,
        progress=progress,
    )


def evaluate_regret(
    spec: BanditSpec,
    agent: AgentSpec,
    num_runs: int,
    seed: int = 0,
    batch_size: int = BanditRecorder.default_batch_size,
) -> np.ndarray:
    """Per-step pseudo-regret (num_runs, T) of ``agent`` on fresh instances drawn with ``seed``."""
    return collect_trajectories(spec, agent, num_runs, seed=seed, batch_size=batch_size).regret
