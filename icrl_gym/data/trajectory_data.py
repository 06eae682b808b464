"""A dataset of bandit trajectories in memory: :class:`TrajectoryData` and its checks.

Collected and stored by :mod:`icrl_gym.data.trajectories`.

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icrl_gym.data.batch_recorder import RecordedRuns
from icrl_gym.data.labels import LabelMode
from icrl_gym.envs.bandit_core import ActionSet, BanditSpec

REQUIRED_ARRAYS = ("action_sets", "actions", "rewards", "expected_rewards", "best_rewards", "w_star")
"""The arrays every dataset holds."""
_FINITE = ("action_sets", "rewards", "expected_rewards", "best_rewards", "w_star")
"""Arrays whose every value must be finite."""


class DatasetError(ValueError):
    """A trajectory file that is missing, corrupt, truncated or made for another environment."""


@dataclass(kw_only=True)
class TrajectoryData(RecordedRuns):
    """N trajectories of length T (arrays documented in the module docstring) and their metadata."""

    action_sets: np.ndarray
    expected_rewards: np.ndarray
    best_rewards: np.ndarray
    w_star: np.ndarray
    label_values: np.ndarray | None = None

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
        names = (*REQUIRED_ARRAYS, "labels", "label_probs", "label_values")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}

    def validate(self) -> None:
        """Check the arrays against each other and against the record; raise :class:`DatasetError` if they differ.

        All arrays must agree in N, T, A and d; actions and labels must lie in [0, A); rewards,
        means, action sets and w* must be finite.  Fields of :attr:`meta` that describe the arrays
        must describe them: the environment's d, A, T and kind of action sets, the number of runs,
        the label mode (labels present unless it is ``"none"``), ``store_probs`` and ``store_values``.
        """
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
        for key in ("actions", "labels"):
            arr = getattr(self, key)
            if arr is not None and arr.size and (arr.min() < 0 or arr.max() >= a):
                raise DatasetError(
                    f"{key} outside [0, {a}): {key} holds values in [{arr.min()}, {arr.max()}], "
                    f"A={a} in the arrays (action_sets of shape {self.action_sets.shape})"
                )
        for key in _FINITE:
            arr = getattr(self, key)
            if not np.isfinite(arr.sum(dtype=np.float64)) and not np.isfinite(arr).all():
                bad = arr.size - np.count_nonzero(np.isfinite(arr))
                raise DatasetError(f"{key} holds {bad} non-finite values (NaN or infinity) of {arr.size}")
        self._check_record()

    def _check_record(self) -> None:
        """The part of :meth:`validate` that compares :attr:`meta` with the arrays (shapes already agree)."""
        meta, problems = self.meta, []
        n, t = self.actions.shape
        sets = self.action_sets.shape
        env = meta.get("env")
        if env is not None:
            try:
                if not isinstance(env, dict):
                    raise TypeError(f"a {type(env).__name__}, not a dict")
                spec = BanditSpec.from_dict(env)
            except (TypeError, ValueError) as err:
                raise DatasetError(f"env in the record is not a bandit prior: {err}") from err
            found = {
                "dim": (sets[-1], f"d={sets[-1]} in the arrays (action_sets of shape {sets})"),
                "num_actions": (sets[-2], f"A={sets[-2]} in the arrays (action_sets of shape {sets})"),
                "horizon": (t, f"T={t} in the arrays (actions of shape {self.actions.shape})"),
                "action_set": (
                    ActionSet.FIXED if len(sets) == 3 else ActionSet.PER_STEP,
                    f"action_sets of shape {sets} in the arrays",
                ),
            }
            problems += [
                f"env.{name}={getattr(spec, name)!r} in the record, {where}"
                for name, (value, where) in found.items()
                if getattr(spec, name) != value
            ]
        if "num_trajectories" in meta and meta["num_trajectories"] != n:
            problems.append(
                f"num_trajectories={meta['num_trajectories']!r} in the record, "
                f"N={n} in the arrays (actions of shape {self.actions.shape})"
            )
        label = meta.get("label")
        if label is not None:
            try:
                mode = LabelMode.parse(label)
            except ValueError as err:
                problems.append(f"label={label!r} in the record: {err}")
            else:
                if mode is not LabelMode.NONE and self.labels is None:
                    problems.append(f"label={label!r} in the record needs labels, but the arrays hold none")
        for flag, key in (("store_probs", "label_probs"), ("store_values", "label_values")):
            if isinstance(meta.get(flag), bool) and meta[flag] != (getattr(self, key) is not None):
                held = "present" if getattr(self, key) is not None else "absent"
                problems.append(f"{flag}={meta[flag]!r} in the record, {key} {held} in the arrays")
        if problems:
            raise DatasetError("the record does not match the arrays: " + "; ".join(problems))
