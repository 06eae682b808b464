"""Offline trajectories for supervised pretraining: collect with Alg_0, label with Alg_E, store.

Section 3 of the paper: a context algorithm Alg_0 interacts with N
instances M ~ Lambda for T steps, giving D_T = (A_1, a_1, r_1, ..., A_T, a_T, r_T); an expert
labels every step t with an action a-bar_t.  The label modes ("ad", "dpt", "approx_dpt",
"expert", "none") are :class:`icrl_gym.data.labels.LabelMode`; the loop is
:func:`icrl_gym.data.pipeline.run_collection`, run here on a :class:`BanditRecorder`.

The same loop evaluates algorithms: :func:`evaluate_regret` is a collection without labels.

In memory a dataset is a :class:`~icrl_gym.data.trajectory_data.TrajectoryData` (N runs, horizon T, A arms,
dimension d; its arrays are listed in :mod:`icrl_gym.data.trajectory_data`).

On disk (format version 3) a dataset is one ``.npz`` (loaded with ``allow_pickle=False``)
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
error of any estimate made from 200 steps by a factor of 10^5.

The record carries ``content_sha256``, the SHA-256 of every stored array (name, dtype, shape,
bytes) and of the canonical JSON of the record itself (:func:`icrl_gym.utils.fileio.content_sha256`).
Loading reads every array (zip CRCs checked, each ``.npy`` header checked against its data
length) and verifies the hash before anything is interpreted, then checks the record against
the arrays (d, A, T, N, the kind of action sets, labels in [0, A) and present when the label
mode needs them, finite rewards, means, action sets and w*).  Any failure is a
:class:`DatasetError` naming the file; a corrupt file never loads as different data.  Files of
the versions before the hash (1: every array as held in memory, 2: this layout) are refused by
their version: no shipped artefact is one, and a dataset is re-collected from its record.

Writes are atomic (a temporary file renamed over the target), so an interrupted save never
leaves a half-written dataset under the final name.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from icrl_gym.algorithm import BanditAgent, MDPAgent
from icrl_gym.data.batch_recorder import BatchRecorder
from icrl_gym.data.crn import CRNBatch
from icrl_gym.data.labels import AgentSpec, Labelling, LabelMode
from icrl_gym.data.pipeline import Labels, Step, run_collection
from icrl_gym.data.trajectory_data import REQUIRED_ARRAYS, DatasetError, TrajectoryData
from icrl_gym.envs.bandit_core import ActionSet, BanditBatch, BanditSpec
from icrl_gym.estimators.statistics import RidgeStatistics
from icrl_gym.utils.fileio import CONTENT_HASH_FIELD, atomic_write, content_sha256, describe_size, json_round_trip
from icrl_gym.utils.provenance import software_environment

__all__ = [
    "FORMAT_VERSION",
    "BanditRecorder",
    "DatasetError",
    "TrajectoryData",
    "check_spec_matches",
    "collect_trajectories",
    "evaluate_regret",
    "load_trajectories",
    "save_trajectories",
]

FORMAT_VERSION = 3
_log = logging.getLogger(__name__)
_STORED_FORMS = {
    "action_sets": ("f", (3, 4)),
    "actions": ("iu", (2,)),
    "rewards": ("f", (2,)),
    "expected_rewards": ("f", (2,)),
    "best_rewards": ("f", (2,)),
    "w_star": ("f", (2,)),
    "labels": ("iu", (2,)),
    "label_probs": ("f", (3,)),
    "label_values": ("f", (3,)),
    "best_reward": ("f", (1,)),
    "arm_means": ("f", (2,)),
}
"""Every array a trajectory file may hold (any format version): its dtype kinds and numbers of dimensions."""
_READ_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,  # bad CRC, bad magic, names of directory and header differ, deflate/lzma errors
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,  # also bz2's errors
    ValueError,  # the npy header (also UnicodeDecodeError, json.JSONDecodeError)
    KeyError,
    IndexError,
    OverflowError,
    NotImplementedError,  # a compression method zipfile lacks (a flip in the central directory)
    RuntimeError,  # zipfile: "File is encrypted" when the flag bit flips
    SyntaxError,  # the npy header is a Python literal
    tokenize.TokenError,
    MemoryError,  # an absurd declared size
)
"""What reading a corrupt ``.npz`` raises.

Seen in the corruption fuzz of ``tests/test_corruption.py``: BadZipFile, ValueError, TokenError,
SyntaxError, NotImplementedError, OSError, EOFError, RuntimeError; the rest are what zipfile,
zlib and the npy header parser document.
"""
_CHUNK = 1 << 24


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


def _as_indices(arr: np.ndarray, key: str) -> np.ndarray:
    """Stored arm indices as the in-memory int16, refusing values int16 cannot hold (no silent wrap-around)."""
    if arr.size and (arr.min() < 0 or arr.max() > np.iinfo(np.int16).max):
        raise DatasetError(f"{key} outside [0, A): {key} holds values in [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int16)


def _unpack(contents: dict[str, np.ndarray], notes: dict[str, Any]) -> dict[str, np.ndarray]:
    """Inverse of :func:`_pack`: the in-memory arrays (int16 indices, float32 values, every step).

    ``contents`` holds arrays of the kinds and numbers of dimensions of :data:`_STORED_FORMS`.
    """
    actions = _as_indices(contents["actions"], "actions")
    contents["actions"] = actions
    n, t = actions.shape
    if "labels" in contents:
        contents["labels"] = _as_indices(contents["labels"], "labels")
    elif notes.get("labels") == "actions":
        contents["labels"] = actions.copy()
    if "best_reward" in contents:
        best = contents.pop("best_reward")
        if best.shape != (n,):
            raise DatasetError(f"best_reward has shape {best.shape}, expected ({n},)")
        contents["best_rewards"] = np.repeat(best[:, None], t, axis=1)
    if "arm_means" in contents:
        means = contents.pop("arm_means")
        num_actions = contents["action_sets"].shape[-2] if "action_sets" in contents else means.shape[-1]
        if means.shape != (n, num_actions):
            raise DatasetError(f"arm_means has shape {means.shape}, expected ({n}, {num_actions})")
        if actions.size and actions.max() >= num_actions:
            raise DatasetError(f"actions outside [0, {num_actions})")
        contents["expected_rewards"] = np.take_along_axis(means, actions.astype(np.intp), axis=1)
    if "label_values" in contents:
        contents["label_values"] = contents["label_values"].astype(np.float32)
    return contents


def save_trajectories(data: TrajectoryData, path: str | os.PathLike, compact_values: bool = False) -> Path:
    """Write ``data`` atomically to ``path`` (.npz) and its metadata to ``path`` with suffix .json.

    The arrays are stored without redundancy (module docstring) and load back bit for bit;
    ``compact_values`` stores the per-arm index values in float16 (relative error <= 2^-11).
    The record carries the content hash (:data:`~icrl_gym.utils.fileio.CONTENT_HASH_FIELD`) of the arrays and itself,
    and the software that collected the data (:func:`~icrl_gym.utils.provenance.software_environment`).
    """
    data.validate()
    path = Path(path)
    if path.suffix != ".npz":
        path = Path(str(path) + ".npz")  # not with_suffix: names may hold dots (alpha0.5)
    stored, notes = _pack(data, compact_values)
    software = data.meta.get("software") or software_environment()  # a re-saved dataset keeps its maker's
    meta = json_round_trip({**data.meta, "format_version": FORMAT_VERSION, "storage": notes, "software": software})
    meta[CONTENT_HASH_FIELD] = content_sha256(meta, stored)
    meta_json = json.dumps(meta, indent=2, sort_keys=True)
    arrays: dict[str, Any] = {**stored, "meta_json": np.array(meta_json)}  # Any: savez takes **kwds
    atomic_write(path, lambda fh: np.savez(fh, **arrays))
    atomic_write(Path(str(path)[: -len(".npz")] + ".json"), lambda fh: fh.write(meta_json.encode()))
    _log.info("wrote %s", describe_size(path))
    return path


def _read_npy(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One ``.npy`` member, read whole (so its CRC is checked) and checked against its own header.

    The header's shape and dtype must account for exactly the member's bytes; object arrays (pickles)
    and zero-size dtypes are refused.
    """
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise DatasetError(f"member {info.filename} has npy format version {version}, expected 1.0 or 2.0")
        if dtype.hasobject or dtype.itemsize == 0:
            raise DatasetError(f"member {info.filename} has dtype {dtype}, not plain data")
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if nbytes != info.file_size - fh.tell():
            raise DatasetError(
                f"member {info.filename}: its header says {shape} {dtype.str} ({nbytes} bytes), "
                f"it holds {info.file_size - fh.tell()} bytes"
            )
        arr = np.empty(count, dtype)
        raw = arr.view(np.uint8)
        done = 0
        while done < nbytes:
            chunk = fh.read(min(_CHUNK, nbytes - done))
            if not chunk:
                raise EOFError(f"member {info.filename} ends after {done} of {nbytes} bytes")
            raw[done : done + len(chunk)] = np.frombuffer(chunk, np.uint8)
            done += len(chunk)
        if fh.read(1):  # reading to the end also checks the member's CRC
            raise DatasetError(f"member {info.filename} holds more bytes than its header says")
    return arr.reshape(shape[::-1]).T if fortran_order else arr.reshape(shape)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` by name; any damage to the file is a :class:`DatasetError`."""
    try:
        stored: dict[str, np.ndarray] = {}
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename[: -len(".npy")]
                if not info.filename.endswith(".npy") or name in stored:
                    raise DatasetError(f"unexpected or repeated member {info.filename!r}")
                stored[name] = _read_npy(zf, info)
        return stored
    except DatasetError as err:
        raise DatasetError(f"{path} is corrupt or truncated: {err}") from err
    except _READ_ERRORS as err:
        raise DatasetError(f"{path} is corrupt or truncated ({type(err).__name__}: {err})") from err


def _read_record(path: Path, stored: dict[str, np.ndarray]) -> dict[str, Any]:
    """The record of a trajectory file (popped from ``stored``), its content hash verified over it and the arrays."""
    if "meta_json" not in stored:
        raise DatasetError(f"{path} is not an icrl-gym trajectory file: missing ['meta_json']")
    meta_json = stored.pop("meta_json")
    if meta_json.dtype.kind != "U" or meta_json.ndim != 0:
        raise DatasetError(f"{path} is corrupt: meta_json is a {meta_json.dtype.str} array of shape {meta_json.shape}")
    try:
        meta = json.loads(str(meta_json[()]))
    except ValueError as err:
        raise DatasetError(f"{path} is corrupt or was edited: its record is not JSON ({err})") from err
    if not isinstance(meta, dict):
        raise DatasetError(f"{path} is corrupt or was edited: its record is a {type(meta).__name__}, not an object")
    version = meta.get("format_version")
    if CONTENT_HASH_FIELD in meta:
        found = content_sha256(meta, stored)
        if found != meta[CONTENT_HASH_FIELD]:
            raise DatasetError(
                f"{path} is corrupt or was edited: its content hash is {found}, "
                f"its record says {meta[CONTENT_HASH_FIELD]!r}"
            )
        del meta[CONTENT_HASH_FIELD]
    elif version == FORMAT_VERSION:
        raise DatasetError(
            f"{path} is corrupt or was edited: format version {version} needs {CONTENT_HASH_FIELD}, it has none"
        )
    if version != FORMAT_VERSION:
        raise DatasetError(f"{path} has format version {version}, expected {FORMAT_VERSION}")
    return meta


def load_trajectories(path: str | os.PathLike, expect: BanditSpec | None = None) -> TrajectoryData:
    """Load a dataset written by :func:`save_trajectories` without executing any pickled code.

    Reads format version 3 and returns the in-memory arrays of the module docstring.
    Raises :class:`DatasetError` for a missing, truncated, corrupt or edited file (the content
    hash is verified before anything is interpreted), another format version,
    arrays inconsistent with each other or with the record (:meth:`TrajectoryData.validate`),
    or (when ``expect`` is given) a dataset drawn from a prior with another d, A or T.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"no trajectory file at {path}")
    contents = _read_npz(path)
    meta = _read_record(path, contents)
    unknown = sorted(set(contents) - set(_STORED_FORMS))
    if unknown:
        raise DatasetError(f"{path} is not an icrl-gym trajectory file: unknown arrays {unknown}")
    for key, arr in contents.items():
        kinds, ndims = _STORED_FORMS[key]
        if arr.dtype.kind not in kinds or arr.ndim not in ndims:
            raise DatasetError(
                f"{path}: {key} is a {arr.dtype.str} array of {arr.ndim} dimensions, "
                f"expected dtype kind {'/'.join(kinds)} and {' or '.join(map(str, ndims))} dimensions"
            )
    storage = meta.pop("storage", {})
    try:
        if "actions" in contents:
            contents = _unpack(contents, storage if isinstance(storage, dict) else {})
        missing = [k for k in REQUIRED_ARRAYS if k not in contents]
        if missing:
            raise DatasetError(f"not an icrl-gym trajectory file: missing {missing}")
        data = TrajectoryData(**contents, meta=meta)
        data.validate()
    except DatasetError as err:
        raise DatasetError(f"{path}: {err}") from err
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


class BanditRecorder(BatchRecorder[BanditBatch, TrajectoryData]):
    """The bandit side of :func:`~icrl_gym.data.pipeline.run_collection`: instances, :class:`TrajectoryData`."""

    spec: BanditSpec
    default_batch_size = 10_000

    def __init__(self, spec: BanditSpec, num_runs: int) -> None:
        n, t, a, d = num_runs, spec.horizon, spec.num_actions, spec.dim
        self.spec, self.num_steps, self.num_actions = spec, t, a
        self.fixed = spec.action_set is ActionSet.FIXED
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
        info = {"model": batch.model_info()}  # what the env's reset info carries
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
        """The trajectories with their labels (the index values too) and ``meta``."""
        self.data.label_values = labels.values
        return super().result(labels, meta)


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
    first_batch: int = 0,
) -> TrajectoryData:
    """Run Alg_0 on ``num_trajectories`` fresh bandit instances and label every step (``label``, a :class:`LabelMode`).

    :func:`icrl_gym.data.pipeline.run_collection` on a :class:`BanditRecorder`.  Instances, noise
    and the algorithms' randomness come from ``seed`` by the common-random-numbers convention of
    :mod:`icrl_gym.data.crn`: every algorithm run with the same seed and batch size faces the same
    instances and the same noise.  ``store_probs`` keeps the labeller's action distribution;
    ``store_values`` keeps an index labeller's per-arm index values.  ``progress`` is an optional
    callable taking the number of runs finished.  ``first_batch``: the batches played are those
    from this index on of a longer loop (a slice played alone, :func:`~icrl_gym.data.crn.crn_batches`).
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
        first_batch=first_batch,
    )


FAILURE_FACTOR = 3.0
FAILURE_FLOOR = 20.0
"""A run fails when its regret exceeds both FAILURE_FACTOR x a reference's and this floor (the acceptance's rule)."""


def failure_limit(reference_mean: float, factor: float = FAILURE_FACTOR, floor: float = FAILURE_FLOOR) -> float:
    """The regret max(``factor`` x the reference's mean regret, ``floor``) above which a run counts as failed.

    A run is judged against the reference's mean over a cell of runs, not against the reference's run on the
    same instance (the paired form is the harness's ``failure_fraction``).  Used by the linear evaluations and
    by the fine-tuning's validation, which counts the runs of the model above this limit.
    """
    return max(factor * reference_mean, floor)


def evaluate_regret(
    spec: BanditSpec,
    agent: AgentSpec,
    num_runs: int,
    seed: int = 0,
    batch_size: int = BanditRecorder.default_batch_size,
    first_batch: int = 0,
) -> np.ndarray:
    """Per-step pseudo-regret (num_runs, T) of ``agent`` on fresh instances drawn with ``seed``.

    ``first_batch``: the batches from this index on of a longer loop (:func:`collect_trajectories`).
    """
    return collect_trajectories(spec, agent, num_runs, seed=seed, batch_size=batch_size, first_batch=first_batch).regret
