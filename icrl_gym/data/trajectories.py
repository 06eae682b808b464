"""Offline trajectories for supervised pretraining: collect with Alg_0, label with Alg_E, store.

Section supervised-pretraining of the paper: a context algorithm Alg_0 interacts with N
instances M ~ Lambda for T steps, giving D_T = (A_1, a_1, r_1, ..., A_T, a_T, r_T); an expert
labels every step t with an action a-bar_t.  Label modes:

- ``"ad"`` (algorithm distillation): Alg_E = Alg_0, the label is the action actually taken.
- ``"dpt"`` (Decision-Pretrained Transformer): a-bar_t = a*_t = argmax_k <a_{t,k}, w*>.
- ``"approx_dpt"``: a-bar_t = argmax_k <a_{t,k}, w_hat> with w_hat the ridge estimate from the
  whole trajectory D_T (no access to w*; Proposition app_opt_diff_reward).
- ``"expert"``: a separate history-based expert observes Alg_0's trajectory and proposes its
  own action at every step (e.g. context TS, expert LinUCB).
- ``"none"``: no labels (evaluation runs).

The same loop evaluates algorithms: :func:`evaluate_regret` is a collection without labels.

On disk a dataset is one ``.npz`` (loaded with ``allow_pickle=False``) holding the arrays
below and ``meta_json``, the JSON of the configuration and seed that made it, also written
beside it as ``<name>.json``.  Arrays (N runs, horizon T, A arms, dimension d):

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

Writes are atomic (a temporary file renamed over the target), so an interrupted save never
leaves a half-written dataset under the final name.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from icrl_gym.algorithm import BanditAgent
from icrl_gym.envs.bandit_core import BanditBatch, BanditSpec
from icrl_gym.fileio import atomic_write
from icrl_gym.registry import make_agent
from icrl_gym.statistics import RidgeStatistics

FORMAT_VERSION = 1
LABEL_MODES = ("none", "ad", "dpt", "approx_dpt", "expert")
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


def save_trajectories(data: TrajectoryData, path: str | os.PathLike) -> Path:
    """Write ``data`` atomically to ``path`` (.npz) and its metadata to ``path`` with suffix .json."""
    data.validate()
    path = Path(path)
    if path.suffix != ".npz":
        path = Path(str(path) + ".npz")  # not with_suffix: names may hold dots (alpha0.5)
    meta = {**data.meta, "format_version": FORMAT_VERSION}
    meta_json = json.dumps(meta, indent=2, sort_keys=True)
    arrays = {**data.arrays(), "meta_json": np.array(meta_json)}
    atomic_write(path, lambda fh: np.savez(fh, **arrays))
    atomic_write(Path(str(path)[: -len(".npz")] + ".json"), lambda fh: fh.write(meta_json.encode()))
    return path


def load_trajectories(path: str | os.PathLike, expect: BanditSpec | None = None) -> TrajectoryData:
    """Load a dataset written by :func:`save_trajectories` without executing any pickled code.

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
    missing = [k for k in (*_REQUIRED, "meta_json") if k not in contents]
    if missing:
        raise DatasetError(f"{path} is not an icrl-gym trajectory file: missing {missing}")
    meta = json.loads(str(contents.pop("meta_json")))
    if meta.get("format_version") != FORMAT_VERSION:
        raise DatasetError(f"{path} has format version {meta.get('format_version')}, expected {FORMAT_VERSION}")
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


def collect_trajectories(
    spec: BanditSpec,
    context: BanditAgent | str | Mapping[str, Any],
    num_trajectories: int,
    seed: int = 0,
    label: str = "none",
    expert: BanditAgent | str | Mapping[str, Any] | None = None,
    store_probs: bool = False,
    store_values: bool = False,
    batch_size: int = 10_000,
    approx_dpt_lam: float = 1.0,
    progress: Any = None,
) -> TrajectoryData:
    """Run Alg_0 on ``num_trajectories`` fresh instances and label every step.

    Instances, noise and the algorithms' randomness come from ``seed`` only: batch i uses
    ``np.random.default_rng([seed, i])`` for the environments and ``[seed, i, 1]`` for the
    algorithms, so every algorithm run with the same seed faces the same instances and the same
    noise (common random numbers).  ``store_probs`` keeps the expert's action distribution;
    ``store_values`` keeps an index expert's per-arm index values.  ``progress`` is an optional
    callable taking the number of runs finished.
    """
    if label not in LABEL_MODES:
        raise ValueError(f"unknown label mode {label!r}; choose one of {LABEL_MODES}")
    if num_trajectories < 1 or batch_size < 1:
        raise ValueError("num_trajectories and batch_size must be >= 1")
    context = context if isinstance(context, BanditAgent) else make_agent(context)
    if label == "expert":
        if expert is None:
            raise ValueError("label='expert' needs an expert algorithm")
        expert = expert if isinstance(expert, BanditAgent) else make_agent(expert)
    elif expert is not None:
        raise ValueError(f"an expert algorithm is only used with label='expert', not {label!r}")
    labeller = context if label == "ad" else expert
    if store_values and not (labeller is not None and labeller.has_index):
        raise ValueError("store_values needs an index expert (LinUCB, UCB, ...) with label 'ad' or 'expert'")
    if store_probs and label in ("none", "dpt", "approx_dpt"):
        raise ValueError(f"label mode {label!r} has no expert distribution to store (labels are argmaxes)")

    n, t_max, a, d = num_trajectories, spec.horizon, spec.num_actions, spec.dim
    fixed = spec.action_set == "fixed"
    out = TrajectoryData(
        action_sets=np.zeros((n, a, d) if fixed else (n, t_max, a, d), np.float32),
        actions=np.zeros((n, t_max), np.int16),
        rewards=np.zeros((n, t_max), np.float32),
        expected_rewards=np.zeros((n, t_max), np.float32),
        best_rewards=np.zeros((n, t_max), np.float32),
        w_star=np.zeros((n, d), np.float32),
        labels=None if label == "none" else np.zeros((n, t_max), np.int16),
        label_probs=np.zeros((n, t_max, a), np.float16) if store_probs else None,
        label_values=np.zeros((n, t_max, a), np.float32) if store_values else None,
    )
    for i, start in enumerate(range(0, n, batch_size)):
        rows = slice(start, min(start + batch_size, n))
        b = rows.stop - rows.start
        batch = BanditBatch(spec, b, np.random.default_rng([seed, i]))
        agent_rng = np.random.default_rng([seed, i, 1])
        model = {"model": spec.to_dict()}  # what the env's reset info carries: Bayesian agents read noise and prior
        context.reset(model, batch_size=b, dim=d, num_actions=a, w_star=batch.w_star, rng=agent_rng)
        if label == "expert":
            expert.reset(model, batch_size=b, dim=d, num_actions=a, w_star=batch.w_star, rng=agent_rng.spawn(1)[0])
        out.w_star[rows] = batch.w_star
        if fixed:
            out.action_sets[rows] = batch.action_sets
        for t in range(t_max):
            sets = batch.action_sets
            if not fixed:
                out.action_sets[rows, t] = sets
            if store_values:
                out.label_values[rows, t] = labeller.index(sets)
            if store_probs:
                out.label_probs[rows, t] = labeller.policy_batch(sets)
            actions = context.act_batch(sets)
            if label == "expert":
                out.labels[rows, t] = expert.act_batch(sets)
            step = batch.step(actions)
            context.update_batch(sets, actions, step["reward"])
            if label == "expert":
                expert.update_batch(sets, actions, step["reward"])
            out.actions[rows, t] = actions
            out.rewards[rows, t] = step["reward"]
            out.expected_rewards[rows, t] = step["expected_reward"]
            out.best_rewards[rows, t] = step["best_expected_reward"]
            if label == "ad":
                out.labels[rows, t] = actions
            elif label == "dpt":
                out.labels[rows, t] = step["optimal_action"]
        if label == "approx_dpt":
            out.labels[rows] = _ridge_argmax_labels(
                out.step_action_sets(rows), out.actions[rows], out.rewards[rows], approx_dpt_lam
            )
        if progress is not None:
            progress(rows.stop)
    out.meta = {
        "env": spec.to_dict(),
        "context": context.config(),
        "label": label,
        "expert": expert.config() if isinstance(expert, BanditAgent) else None,
        "num_trajectories": n,
        "seed": seed,
        "batch_size": batch_size,
        "store_probs": store_probs,
        "store_values": store_values,
        "approx_dpt_lam": approx_dpt_lam if label == "approx_dpt" else None,
    }
    return out


def evaluate_regret(
    spec: BanditSpec,
    agent: BanditAgent | str | Mapping[str, Any],
    num_runs: int,
    seed: int = 0,
    batch_size: int = 10_000,
) -> np.ndarray:
    """Per-step pseudo-regret (num_runs, T) of ``agent`` on fresh instances drawn with ``seed``."""
    return collect_trajectories(spec, agent, num_runs, seed=seed, batch_size=batch_size).regret
