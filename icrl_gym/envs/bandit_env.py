"""Gymnasium wrappers around :class:`BanditBatch`: a single environment and a native vector env.

One Gymnasium episode is one whole in-context run of T steps on one instance drawn from the
prior at ``reset``; it ends with ``terminated=True``.  The observation is the current action set
(an (A, d) ``Box``), the action an arm index (``Discrete(A)``).  ``info`` carries what regret
needs without knowing the instance: ``expected_reward`` <a_t, w*>, ``best_expected_reward``
max_k <a_{t,k}, w*>, ``regret`` (their difference), ``optimal_action`` and ``w_star``.

The reset ``info`` also carries ``"model"``: the environment's :class:`BanditSpec` as a plain
dict (``spec.to_dict()``: horizon, reward kind, noise_std, prior kind and its parameters
prior_low/prior_high, prior_var or prior_a/prior_b, arms, action_set, dim, num_actions).  It is the
model that Bayesian algorithms assume (Thompson sampling, Bayes-UCB read noise and prior from it),
so that parameters of the world are never typed a second time by hand.  When the spec draws the
prior's hyperparameters or sigma per instance (the prior family of :mod:`icrl_gym.envs.prior_family`,
a noise range), ``info["model"]["instance"]`` holds them, one row per run: the references told
each instance's own prior read them there.

A fixed instance is replayed by seeding ``reset`` or by passing it in
``options={"w_star": ..., "action_set": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from icrl_gym.envs.bandit_core import BanditBatch, BanditSpec
from icrl_gym.envs.validation import check_integer, memory_limit
from icrl_gym.envs.vector import (
    VECTOR_OPTIONS,
    BatchVectorEnv,
    SingleRunEnv,
    check_env_memory,
    check_options,
    vector_options,
)
from icrl_gym.utils.names import check_keywords, parameter_names


def _observation_space(spec: BanditSpec) -> spaces.Box:
    low, high = spec.action_bounds
    return spaces.Box(low=low, high=high, shape=(spec.num_actions * spec.dim,), dtype=np.float32)


def _instance_options(options: dict[str, Any] | None) -> dict[str, Any]:
    options = check_options(options)
    allowed = {"w_star", "action_set"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown reset options {unknown}; allowed: {sorted(allowed)}")
    return {"w_star": options.get("w_star"), "action_sets": options.get("action_set")}


def _describe(batch: BanditBatch, last: tuple[np.ndarray, np.ndarray] | None) -> tuple[str, list[str]]:
    """The text render of a bandit batch: a header and one line per run (last pull, current best arm)."""
    spec = batch.spec
    header = f"{spec.reward} bandit, d={spec.dim}, A={spec.num_actions}: step {batch.t}/{spec.horizon}"
    runs = []
    for b in range(batch.batch_size):
        best = f"best arm now {int(batch.best_arm[b])} (mean {float(batch.best_mean[b]):+.3f})"
        if last is None:
            runs.append(f"no arm pulled yet; {best}")
        else:
            runs.append(f"pulled arm {int(last[0][b])}, reward {float(last[1][b]):+.3f}; {best}")
    return header, runs


class BanditEnv(SingleRunEnv):
    """One bandit run as a Gymnasium environment (a :class:`BanditBatch` of size one)."""

    _batch: BanditBatch | None
    describe = staticmethod(_describe)

    def __init__(self, spec: BanditSpec, max_memory_gib: float | None = None, render_mode: str | None = None) -> None:
        """``max_memory_gib`` raises the memory limit (:func:`~icrl_gym.envs.validation.check_memory`).

        ``render_mode="ansi"`` makes :meth:`render` return a text description of the current step.
        """
        check_env_memory(
            spec.memory_bytes(1), spec.num_actions * spec.dim, None, "a bandit environment", max_memory_gib
        )
        self.bandit_spec, self.max_memory_gib = spec, max_memory_gib
        self._init_spaces(_observation_space(spec), spec.num_actions, render_mode)

    @property
    def w_star(self) -> np.ndarray:
        """The parameter w* of the current instance, shape (d,)."""
        return self._require_batch().w_star[0]

    def _require_batch(self) -> BanditBatch:
        if self._batch is None:
            raise RuntimeError("call reset() before step()")
        return self._batch

    def _obs(self) -> np.ndarray:
        return self._require_batch().action_sets[0].astype(np.float32).reshape(-1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Draw a new instance from the prior (or take it from ``options``) and start a run."""
        super().reset(seed=seed)
        with memory_limit(self.max_memory_gib):
            self._batch = BanditBatch(self.bandit_spec, 1, self.np_random, **_instance_options(options))
        batch, self._last = self._batch, None
        info = {
            "w_star": batch.w_star[0].copy(),
            "optimal_action": int(batch.best_arm[0]),
            "best_expected_reward": float(batch.best_mean[0]),
            "dim": self.bandit_spec.dim,
            "num_actions": self.bandit_spec.num_actions,
            "model": batch.model_info(single=True),
        }
        return self._obs(), info

    def step(self, action: Any):
        """Pull one arm; the episode terminates after T pulls."""
        batch = self._require_batch()
        if np.ndim(action) != 0:
            raise ValueError(f"expected a single arm index, got an array of shape {np.shape(action)}")
        out = batch.step(np.asarray([action]))
        self._last = (np.asarray([action]), out["reward"])
        info = {
            "expected_reward": float(out["expected_reward"][0]),
            "best_expected_reward": float(out["best_expected_reward"][0]),
            "regret": float(out["best_expected_reward"][0] - out["expected_reward"][0]),
            "optimal_action": int(out["optimal_action"][0]),
            "w_star": batch.w_star[0].copy(),
            "t": batch.t,
        }
        return self._obs(), float(out["reward"][0]), batch.done, False, info


class BanditVectorEnv(BatchVectorEnv):
    """B bandit runs stepped as arrays: the native batched version of :class:`BanditEnv`.

    All runs have the same length T, so they terminate together; the following ``step`` call
    resets every run to a new instance (``AutoresetMode.NEXT_STEP``) and returns zero rewards.
    """

    _batch: BanditBatch | None
    describe = staticmethod(_describe)

    def __init__(
        self,
        num_envs: int,
        spec: BanditSpec,
        max_memory_gib: float | None = None,
        render_mode: str | None = None,
        autoreset_mode: Any = None,
    ) -> None:
        """``max_memory_gib`` raises the memory limit; the modes are checked by :meth:`BatchVectorEnv._init_spaces`."""
        num_envs = check_integer("num_envs", num_envs)
        check_env_memory(
            spec.memory_bytes(num_envs),
            spec.num_actions * spec.dim,
            num_envs,
            f"a vector environment of {num_envs:,} bandit runs",
            max_memory_gib,
        )
        self.bandit_spec, self.max_memory_gib = spec, max_memory_gib
        self._init_spaces(num_envs, _observation_space(spec), spec.num_actions, render_mode, autoreset_mode)

    @property
    def batch(self) -> BanditBatch:
        """The underlying :class:`BanditBatch` (raises before the first reset)."""
        if self._batch is None:
            raise RuntimeError("call reset() before step()")
        return self._batch

    def _obs(self) -> np.ndarray:
        return self.batch.action_sets.astype(np.float32).reshape(self.num_envs, -1)

    def _reset_info(self) -> dict[str, Any]:
        batch = self.batch
        return {
            "w_star": batch.w_star.copy(),
            "optimal_action": batch.best_arm.copy(),
            "best_expected_reward": batch.best_mean.copy(),
            "dim": self.bandit_spec.dim,
            "num_actions": self.bandit_spec.num_actions,
            "model": batch.model_info(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Draw B new instances (``options`` may fix w_star (B, d) and the action sets)."""
        self._reseed(seed)
        with memory_limit(self.max_memory_gib):
            self._batch = BanditBatch(self.bandit_spec, self.num_envs, self.np_random, **_instance_options(options))
        self._last = None
        return self._obs(), self._reset_info()

    def step(self, actions: Any):
        """Pull ``actions[b]`` in run b; returns (obs, rewards, terminated, truncated, info)."""
        if self._autoreset:
            return self._autoreset_step()
        batch = self.batch
        out = batch.step(actions)
        self._last = (np.asarray(actions).reshape(self.num_envs), out["reward"])
        info = {
            "expected_reward": out["expected_reward"],
            "best_expected_reward": out["best_expected_reward"],
            "regret": out["best_expected_reward"] - out["expected_reward"],
            "optimal_action": out["optimal_action"],
            "w_star": batch.w_star,
        }
        self._autoreset = batch.done
        terminated = np.full(self.num_envs, batch.done)
        return self._obs(), out["reward"], terminated, np.zeros(self.num_envs, dtype=bool), info


class SpecFieldsEnv(BanditEnv):
    """A registered bandit environment: built from the keyword fields of its spec builder :meth:`make_spec`."""

    make_spec: ClassVar[Callable[..., BanditSpec]]
    """The environment's spec from its keyword fields (a preset such as ``linear_bandit_spec``)."""

    def __init__(self, *, max_memory_gib: float | None = None, render_mode: str | None = None, **fields: Any) -> None:
        check_keywords(self.make_spec, fields, type(self).__name__, also=parameter_names(SpecFieldsEnv))
        super().__init__(self.make_spec(**fields), max_memory_gib=max_memory_gib, render_mode=render_mode)


class SpecFieldsVectorEnv(BanditVectorEnv):
    """The natively batched version of a :class:`SpecFieldsEnv`: ``num_envs`` runs stepped as arrays."""

    make_spec: ClassVar[Callable[..., BanditSpec]]

    def __init__(self, num_envs: int = 1, **kwargs: Any) -> None:
        """``num_envs`` runs of ``make_spec(**fields)``; the other keywords are the vector options."""
        options, fields = vector_options(kwargs)
        also = (*parameter_names(SpecFieldsVectorEnv), *VECTOR_OPTIONS)
        check_keywords(self.make_spec, fields, type(self).__name__, also=also)
        super().__init__(num_envs, self.make_spec(**fields), **options)
