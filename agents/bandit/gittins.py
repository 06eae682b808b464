"""Finite-horizon Gittins index for Bernoulli bandits: a Bayes-optimal-quality reference.

An arm with Beta(a0 + s, b0 + f) posterior (s successes, f failures) and m pulls left has index

    G(s, f, m) = sup { lambda : V_lambda(s, f, m) > 0 },
    V_lambda(s, f, m) = max(0, p - lambda + p V_lambda(s+1, f, m-1) + (1-p) V_lambda(s, f+1, m-1)),

p = (a0 + s) / (a0 + b0 + s + f), V_lambda(., ., 0) = 0: the retirement reward lambda per step
at which playing the arm for up to m more pulls (stopping at will) stops being worth it
(calibration; Gittins, Glazebrook & Weber, "Multi-armed Bandit Allocation Indices", ch. 7).  At
step t the policy pulls argmax_k G(s_k, f_k, T - t + 1), with T the environment's horizon
(:func:`~icrl_gym.algorithm.resolve_horizon`; the constructor's ``horizon`` only for runs whose
environment states none).  a0 and b0 are pseudo-counts, any positive reals (Beta(0.5, 0.5) works as
Beta(1, 1) does), the environment's unless given.

The table (its math and compact storage) lives in :mod:`icrl_gym.estimators.gittins`; one table built for the
largest horizon asked for serves every smaller one.  Building it takes 40 s at T = 500 (7 min at T = 1,000), so with a
cache directory (the ``cache_dir`` argument, else the ``ICRL_GYM_GITTINS_CACHE`` environment
variable; neither: no disk cache) the table is read from there, or built once and written there for
later processes (:func:`icrl_gym.estimators.gittins.cached_gittins_table`: atomic writes, corrupt files rebuilt).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from agents.bandit.index_agent import IndexAgent
from agents.bandit.thompson import beta_prior
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.envs.validation import MAX_SCALE, check_integer, check_number
from icrl_gym.estimators.gittins import GittinsTable, gittins_build_bytes, gittins_cache_dir, told_gittins_table
from icrl_gym.estimators.statistics import ArmStatistics


class Gittins(IndexAgent):
    """Pulls the arm with the largest finite-horizon Gittins index (Beta-Bernoulli model).

    T is the environment's (the constructor's ``horizon`` for runs whose environment states none).  The
    Beta(a, b) prior (pseudo-counts, any a, b > 0) is the environment's unless given: ``prior_a``,
    ``prior_b`` of a 'beta' prior, Beta(1, 1) for the uniform one, or each instance's own prior when the
    environment draws them (``info["model"]["instance"]``), one table per distinct prior.
    """

    name = "gittins"
    binary_rewards = True
    stats: ArmStatistics
    """Successes and pulls of every arm of every run (set by ``reset``; the base class refuses to act before)."""
    tables: list[tuple[np.ndarray, GittinsTable]]
    """(runs, table): the runs (indices) that share a prior and its G(s, f, m) table (set by ``reset``)."""

    def __init__(
        self,
        horizon: int | None = None,
        prior_a: float | None = None,
        prior_b: float | None = None,
        seed: int | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        super().__init__(temperature=0.0, seed=seed)
        self.default_horizon = None if horizon is None else check_integer("horizon", horizon)
        """The constructor's T, for runs whose environment states none."""
        self.horizon = self.default_horizon or 0
        """T of the runs since the last reset."""
        self.prior_a = None if prior_a is None else check_number("prior_a", prior_a, 0.0, True, MAX_SCALE)
        self.prior_b = None if prior_b is None else check_number("prior_b", prior_b, 0.0, True, MAX_SCALE)
        self.cache_dir = gittins_cache_dir(cache_dir)
        """Where the table is kept between processes (None: memory only); not a hyper-parameter, not in config()."""

    def _start(self, info: dict[str, Any]) -> None:
        self.horizon = resolve_horizon(info, self.default_horizon, "Gittins")
        super()._start(info)

    def _memory_bytes(self) -> int:
        """The base statistics and the table (about (T + 2)^3 / 6 float32 values, built on a 256-point grid)."""
        return super()._memory_bytes() + gittins_build_bytes(self.horizon)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)
        a, b = beta_prior(self.env_model, self.prior_a, self.prior_b)
        pairs = np.stack(np.broadcast_arrays(np.ravel(a), np.ravel(b)), axis=1)  # (1 or B, 2)
        if pairs.shape[0] not in (1, self.batch_size):
            raise ValueError(
                f"the per-instance prior has {pairs.shape[0]} rows, the agent plays {self.batch_size} runs"
            )
        unique, which = np.unique(pairs, axis=0, return_inverse=True)
        runs = [np.flatnonzero(np.ravel(which) == i) for i in range(len(unique))]
        if pairs.shape[0] == 1:
            runs = [np.arange(self.batch_size)]
        self.tables = [(rows, self._table(float(pa), float(pb))) for rows, (pa, pb) in zip(runs, unique, strict=False)]

    @property
    def table(self) -> GittinsTable:
        """The G(s, f, m) table of the runs, when they all share one prior."""
        if len(self.tables) != 1:
            raise ValueError(f"the runs have {len(self.tables)} different priors, each with its own table (tables)")
        return self.tables[0][1]

    def _table(self, prior_a: float, prior_b: float) -> GittinsTable:
        return told_gittins_table(self.horizon, prior_a, prior_b, self.cache_dir)

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """G(s_k, f_k, T - t + 1) for every arm, from the table of each run's prior."""
        remaining = self.horizon - self.t
        if remaining < 1:
            raise ValueError(f"the Gittins table was built for T={self.horizon} steps")
        s = self.stats.sums.astype(np.int64)
        f = (self.stats.counts - self.stats.sums).astype(np.int64)
        out = np.empty(s.shape)
        for rows, table in self.tables:
            out[rows] = table.lookup(s[rows], f[rows], remaining)
        return out

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (None: the environment's)."""
        return {"name": self.name, "horizon": self.default_horizon, "prior_a": self.prior_a, "prior_b": self.prior_b}
