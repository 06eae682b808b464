"""The one interface every bandit algorithm implements, batched over B runs.

An algorithm (Section framework of the paper) maps the history D_{t-1} and the current
action set A_t to a distribution over arms.  :class:`BanditAgent` holds the history of B
independent runs as incremental statistics (arrays with a leading batch axis) and exposes:

- ``reset(info)``: start B new runs; ``info`` is what the environment's ``reset`` returned
  (a single env gives B = 1, a vector env B = num_envs; only the oracle reads ``w_star``).
- ``act(obs)``: an arm index (single env) or an array of B indices (vector env).
- ``update(action, reward)``: feed back the outcome of the last ``act``.
- ``policy(obs)``: the action probabilities Alg(. | D_{t-1}, A_t), shape (A,) or (B, A), in
  closed form where the algorithm has one, by Monte-Carlo for Thompson sampling.

A plain Gymnasium loop::

    obs, info = env.reset(seed=0)
    agent.reset(info)
    for _ in range(T):
        a = agent.act(obs)
        obs, r, terminated, truncated, info = env.step(a)
        agent.update(a, r)

Collectors skip the shape handling with ``act_batch``, ``policy_batch`` and ``update_batch`` on
(B, A, d) arrays.  Subclasses implement ``_reset``, ``_policy`` and ``_update``; ``_act``
defaults to sampling from ``_policy`` and is overridden by deterministic (argmax) algorithms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def child_rng(rng: np.random.Generator) -> np.random.Generator:
    """A generator seeded from ``rng``: agents built from others stay reproducible under one seed."""
    return np.random.default_rng(rng.integers(2**63))


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw one index per row of ``probs`` (B, A) by inverse-CDF sampling."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random((probs.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), probs.shape[1] - 1)


def one_hot(index: np.ndarray, num_classes: int) -> np.ndarray:
    """(B,) integer indices -> (B, num_classes) one-hot float array."""
    out = np.zeros((index.shape[0], num_classes))
    out[np.arange(index.shape[0]), index] = 1.0
    return out


class BanditAgent:
    """Base class of all bandit algorithms (batched; a single run is a batch of one)."""

    name = "agent"
    deterministic = False
    """True when ``act`` is a deterministic function of the history (argmax algorithms)."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.batch_size = 0
        self.dim = 0
        self.num_actions = 0
        self.t = 0
        self._single = False
        self._last_action_sets: np.ndarray | None = None

    # ------------------------------------------------------------------ public API
    def reset(
        self,
        info: Mapping[str, Any] | None = None,
        *,
        batch_size: int | None = None,
        dim: int | None = None,
        num_actions: int | None = None,
        w_star: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        """Start new runs, sized from the environment's reset ``info`` or from keywords."""
        info = dict(info or {})
        if w_star is None:
            w_star = info.get("w_star")
        dim = dim if dim is not None else info.get("dim")
        num_actions = num_actions if num_actions is not None else info.get("num_actions")
        single = False
        if w_star is not None:
            w_star = np.asarray(w_star, dtype=np.float64)
            single = w_star.ndim == 1
            w_star = np.atleast_2d(w_star)
            batch_size = batch_size if batch_size is not None else w_star.shape[0]
            dim = dim if dim is not None else w_star.shape[1]
            if w_star.shape != (batch_size, dim):
                raise ValueError(f"w_star has shape {w_star.shape}, expected ({batch_size}, {dim})")
        if batch_size is None:
            batch_size, single = 1, True
        if dim is None or num_actions is None:
            raise ValueError("reset needs dim and num_actions (pass the env's reset info, or keywords)")
        if rng is not None:
            self.rng = rng
        self.batch_size, self.dim, self.num_actions = int(batch_size), int(dim), int(num_actions)
        self._single = single
        self.t = 0
        self._last_action_sets = None
        self._reset(w_star)

    def act(self, obs: Any) -> Any:
        """Choose an arm for every run: an ``int`` for a single run, else a (B,) array."""
        action_sets = self._action_sets(obs)
        actions = self._act(action_sets)
        self._last_action_sets = action_sets
        return int(actions[0]) if self._single else actions

    def policy(self, obs: Any) -> np.ndarray:
        """Action probabilities Alg(. | D_{t-1}, A_t): (A,) for a single run, else (B, A)."""
        probs = self._policy(self._action_sets(obs))
        return probs[0] if self._single else probs

    def update(self, action: Any, reward: Any, obs: Any = None) -> None:
        """Feed back the arm pulled and the reward; ``obs`` defaults to the last one acted on."""
        action_sets = self._last_action_sets if obs is None else self._action_sets(obs)
        if action_sets is None:
            raise RuntimeError("update() needs the action set: call act(obs) first or pass obs")
        actions = np.asarray(action).reshape(-1)
        rewards = np.asarray(reward, dtype=np.float64).reshape(-1)
        if actions.shape != (self.batch_size,) or rewards.shape != (self.batch_size,):
            raise ValueError(
                f"update expects {self.batch_size} actions and rewards, "
                f"got shapes {np.shape(action)} and {np.shape(reward)}"
            )
        if actions.dtype.kind not in "iu" or actions.min() < 0 or actions.max() >= self.num_actions:
            raise ValueError(f"actions must be integer arm indices in [0, {self.num_actions}), got {action}")
        self.update_batch(action_sets, actions.astype(np.int64), rewards)
        self._last_action_sets = None

    # ------------------------------------------------------------------ batched array API
    def act_batch(self, action_sets: np.ndarray) -> np.ndarray:
        """(B, A, d) action sets -> (B,) arm indices; the fast path used by collectors."""
        return self._act(action_sets)

    def policy_batch(self, action_sets: np.ndarray) -> np.ndarray:
        """(B, A, d) action sets -> (B, A) action probabilities."""
        return self._policy(action_sets)

    def update_batch(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add step t of every run: action sets (B, A, d), arms (B,) and rewards (B,)."""
        self._update(action_sets, actions, rewards)
        self.t += 1

    # ------------------------------------------------------------------ helpers
    def _action_sets(self, obs: Any) -> np.ndarray:
        """Bring an observation to (B, A, d): accepts (A*d,), (A, d), (B, A*d) or (B, A, d)."""
        if self.batch_size == 0:
            raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()")
        arr = np.asarray(obs, dtype=np.float64)
        a, d, b = self.num_actions, self.dim, self.batch_size
        if arr.shape[-2:] == (a, d) and arr.ndim in (2, 3):
            arr = arr.reshape(-1, a, d)
        elif arr.shape[-1] == a * d and arr.ndim in (1, 2):
            arr = arr.reshape(-1, a, d)
        else:
            raise ValueError(
                f"observation of shape {arr.shape} does not match A={a} arms of dimension d={d} "
                f"(expected ({a * d},), ({a}, {d}) or a batch of those)"
            )
        if arr.shape[0] != b:
            raise ValueError(f"observation holds {arr.shape[0]} runs but the agent was reset for {b}")
        return arr

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, w_star: np.ndarray | None) -> None:
        """Allocate the statistics of ``self.batch_size`` fresh runs."""

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no action probabilities")

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return sample_categorical(self._policy(action_sets), self.rng)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add (a_t, r_t) of every run to its statistics."""

    def config(self) -> dict[str, Any]:
        """The hyper-parameters that define this algorithm (recorded with every artefact)."""
        return {"name": self.name}
