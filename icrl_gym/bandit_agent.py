"""The bandit half of the algorithm contract: :class:`BanditAgent` (see :mod:`icrl_gym.algorithm`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from icrl_gym.agent_base import Agent, sample_categorical
from icrl_gym.envs.bandit_core import BanditArms
from icrl_gym.envs.validation import (
    as_float_array,
    check_finite,
    check_integer,
)


class BanditAgent(Agent[np.ndarray]):
    """Base class of all bandit algorithms: an observation is the action sets (B, A, d)."""

    has_index = False
    """True when :meth:`index` gives the per-arm index v (B, A) whose argmax or softmax is the policy."""
    reset_fields: tuple[str, ...] = ("batch_size", "dim", "num_actions", "num_arms", "horizon", "noise_std", "w_star")
    action_kind = "arm indices"
    ridge_statistics = False
    """True for the algorithms that keep ridge statistics, (B, d, d) per batch (sized by the memory check)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self.dim = 0
        self.t = 0
        self.one_hot_arms = False
        """True when the arms are e_1..e_K (a K-armed bandit): ``act()`` then needs no observation."""

    # ------------------------------------------------------------------ batched array API
    def act_batch(self, action_sets: np.ndarray) -> np.ndarray:
        """(B, A, d) action sets -> (B,) arm indices; the fast path used by collectors."""
        return self._act(self._check_action_sets(action_sets))

    def policy_batch(self, action_sets: np.ndarray) -> np.ndarray:
        """(B, A, d) action sets -> (B, A) action probabilities."""
        return self._checked_policy(self._policy(self._check_action_sets(action_sets)))

    def update_batch(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add step t of every run: action sets (B, A, d), arms (B,) and rewards (B,)."""
        action_sets = self._check_action_sets(action_sets)
        self._add(action_sets, *self._check_feedback(actions, rewards))

    def _add(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add checked outcomes of step t."""
        self._update(action_sets, actions, rewards)
        self.t += 1

    def _check_action_sets(self, action_sets: Any) -> np.ndarray:
        """Refuse anything but finite action sets of shape (B, A, d) (returned as they are)."""
        if self.batch_size == 0:
            raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()/update()")
        arr = np.asarray(action_sets)
        expected = (self.batch_size, self.num_actions, self.dim)
        if arr.shape != expected or arr.dtype.kind not in "fiu":
            raise ValueError(f"action sets must be a numeric array of shape {expected}, got {arr.dtype} {arr.shape}")
        check_finite("action sets", arr, self.input_bound)
        return arr

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """The per-arm index v (B, A) at the current action sets (B, A, d), where ``has_index``."""
        raise NotImplementedError(f"{type(self).__name__} has no per-arm index")

    # ------------------------------------------------------------------ the bandit side of the contract
    def _start(self, info: dict[str, Any]) -> None:
        w_star, batch_size = info.get("w_star"), info.get("batch_size")
        dim, num_actions = info.get("dim"), info.get("num_actions")
        num_arms = info.get("num_arms")
        if num_arms is not None:  # a K-armed bandit: arms e_1..e_K, so d = A = K
            num_arms = check_integer("num_arms", num_arms)
            for name, value in (("dim", dim), ("num_actions", num_actions)):
                if value is not None and value != num_arms:
                    raise ValueError(f"num_arms={num_arms} is a K-armed bandit (d = A = K), but {name}={value}")
            dim = num_actions = num_arms
        spec = None if self.env_model is None else self.env_model.bandit
        self.one_hot_arms = num_arms is not None or (spec is not None and spec.arms is BanditArms.ONE_HOT)
        single = False
        if w_star is not None:
            w_star = as_float_array("w_star", w_star)
            if w_star.ndim not in (1, 2):
                raise ValueError(f"w_star must have shape (d,) or (B, d), got {w_star.shape}")
            check_finite("w_star", w_star)
            single = w_star.ndim == 1
            w_star = np.atleast_2d(w_star)
            batch_size = batch_size if batch_size is not None else w_star.shape[0]
            dim = dim if dim is not None else w_star.shape[1]
        if batch_size is None:
            batch_size, single = 1, True
        if dim is None or num_actions is None:
            raise ValueError("reset needs dim and num_actions (pass the env's reset info, or keywords)")
        sizes = {"batch_size": batch_size, "dim": dim, "num_actions": num_actions}
        self.batch_size, self.dim, self.num_actions = (check_integer(k, v) for k, v in sizes.items())
        if w_star is not None and w_star.shape != (self.batch_size, self.dim):
            raise ValueError(f"w_star has shape {w_star.shape}, expected ({self.batch_size}, {self.dim})")
        self._single = single
        self.t = 0
        self._check_memory()
        self._reset(w_star)

    def _wrapped_sizes(self, w_star: np.ndarray | None) -> dict[str, Any]:
        """The reset keywords of an algorithm this one wraps, for the same runs.

        A K-armed bandit reset by ``num_arms`` passes ``num_arms`` on, so the wrapped algorithm knows its arms
        are e_1..e_K; otherwise the batch size, d and A.
        """
        if self.one_hot_arms and "num_arms" in self.reset_info:
            return {"batch_size": self.batch_size, "num_arms": self.num_actions, "w_star": w_star}
        return {"batch_size": self.batch_size, "dim": self.dim, "num_actions": self.num_actions, "w_star": w_star}

    def _memory_bytes(self) -> int:
        """The decoded action sets (B, A, d), per-arm statistics and scores, and ridge statistics where kept."""
        B, A, d = self.batch_size, self.num_actions, self.dim
        ridge = 8 * B * d * (3 * d + 2) if self.ridge_statistics else 0
        return 8 * B * A * (2 * d + 8) + ridge

    def _implied_observation(self) -> np.ndarray:
        """The arms e_1..e_K of every run, for a K-armed bandit (``act()`` with no observation)."""
        if not self.one_hot_arms:
            raise TypeError(
                f"{type(self).__name__}.act() needs the action set: an (A, d) array of the arms "
                "(only a K-armed bandit, reset with num_arms=K or a Bernoulli environment, implies it)"
            )
        return np.broadcast_to(np.eye(self.num_actions), (self.batch_size, self.num_actions, self.num_actions))

    def _decode(self, obs: Any) -> np.ndarray:
        """Bring an observation to (B, A, d): accepts (A*d,), (A, d), (B, A*d) or (B, A, d)."""
        arr = as_float_array("observation", obs)
        a, d = self.num_actions, self.dim
        if (arr.ndim in (2, 3) and arr.shape[-2:] == (a, d)) or (arr.ndim in (1, 2) and arr.shape[-1] == a * d):
            arr = arr.reshape(-1, a, d)
        else:
            raise ValueError(
                f"observation of shape {arr.shape} does not match A={a} arms of dimension d={d} "
                f"(expected ({a * d},), ({a}, {d}) or a batch of those)"
            )
        self._check_runs(arr.shape[0])
        check_finite("observation", arr, self.input_bound)
        return arr

    def _act_on(self, observation: np.ndarray) -> np.ndarray:
        return self._act(observation)

    def _policy_on(self, observation: np.ndarray) -> np.ndarray:
        return self._policy(observation)

    def _record(self, observation: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self._add(observation, actions, rewards)

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, w_star: np.ndarray | None) -> None:
        """Allocate the statistics of ``self.batch_size`` fresh runs."""

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no action probabilities")

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return sample_categorical(self._policy(action_sets), self.rng)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add (a_t, r_t) of every run to its statistics."""
