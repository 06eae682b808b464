"""The tabular-MDP half of the algorithm contract: :class:`MDPAgent` (see :mod:`icrl_gym.algorithm`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from icrl_gym.agent_base import Agent, sample_categorical
from icrl_gym.envs.validation import (
    as_float_array,
    check_finite,
    check_index_batch,
    check_integer,
)

MDPObservation = tuple[np.ndarray, int]
"""A decoded tabular-MDP observation: the states (B,) of the runs and their common step h."""


class MDPAgent(Agent[MDPObservation]):
    """Base class of tabular-MDP algorithms: an observation is (states (B,), h)."""

    name = "mdp_agent"
    reward_bounds: tuple[float, float] | None = (0.0, 1.0)
    """Rewards of a tabular MDP lie in [0, 1] (Section 4.3: R_h(s, a) in [0, 1])."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self.num_states = self.horizon = self.episodes = 0
        self.env_stationary = False
        self.episode = 0
        self._pending: tuple[np.ndarray, int, np.ndarray, np.ndarray] | None = None
        self._planned_episode = -1

    # ------------------------------------------------------------------ batched array API
    def act_batch(self, states: np.ndarray, h: int) -> np.ndarray:
        """(B,) states at step h -> (B,) actions."""
        states, h = self._check_position(states, h)
        self._plan_once()
        return self._act(states, h)

    def policy_batch(self, states: np.ndarray, h: int) -> np.ndarray:
        """(B,) states at step h -> (B, A) action probabilities."""
        states, h = self._check_position(states, h)
        self._plan_once()
        return self._checked_policy(self._policy(states, h))

    def update_batch(
        self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray
    ) -> None:
        """Add the transitions (h, s, a, r, s') of every run; ``next_states`` is -1 after step H."""
        states, h = self._check_position(states, h)
        actions, rewards = self._check_feedback(actions, rewards)
        S = self.num_states
        next_states = check_index_batch(next_states, self.batch_size, S, "next_states", "states (-1: none)", low=-1)
        self._update(states, h, actions, rewards, next_states)
        if h == self.horizon - 1:
            self.episode += 1

    def _check_position(self, states: Any, h: Any) -> tuple[np.ndarray, int]:
        """States (B,) in [0, S) and the step h in [0, H) of every run."""
        if self.batch_size == 0:
            raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()/update()")
        h = check_integer("h", h, low=0, high=self.horizon - 1)
        return check_index_batch(states, self.batch_size, self.num_states, "states", "state indices"), h

    def _plan_once(self) -> None:
        """Call ``_begin_episode`` once per episode, before its first action or policy."""
        if self._planned_episode != self.episode:
            self._planned_episode = self.episode
            self._begin_episode()

    # ------------------------------------------------------------------ the MDP side of the contract
    def _start(self, info: dict[str, Any]) -> None:
        """Size the runs from the environment's reset ``info`` (P, R for the oracle only)."""
        needed = ("v_star", "num_states", "num_actions", "horizon", "episodes")
        missing = [key for key in needed if key not in info]
        if missing:
            raise ValueError(
                f"{type(self).__name__}.reset needs the reset info of a tabular-MDP environment, "
                f"which has {list(needed)}; this info lacks {missing} (it has {sorted(info)})"
            )
        v_star = as_float_array("v_star", info["v_star"])
        if v_star.ndim > 1 or v_star.size == 0:
            raise ValueError(f"v_star must be a number or a (B,) array, got shape {v_star.shape}")
        check_finite("v_star", v_star)
        self._single = v_star.ndim == 0
        self.batch_size = 1 if self._single else v_star.shape[0]
        self.num_states, self.num_actions, self.horizon, self.episodes = (
            check_integer(key, info[key]) for key in needed[1:]
        )
        self.env_stationary = bool(info.get("stationary", False))
        self.episode = 0
        self._planned_episode = -1
        self._pending = None
        instance = None
        if "P" in info:
            P, R = np.asarray(info["P"]), np.asarray(info["R"])
            instance = (P[None], R[None]) if self._single else (P, R)
            B, S, A, H = self.batch_size, self.num_states, self.num_actions, self.horizon
            for name, arr, tail in (("P", instance[0], (S, A, S)), ("R", instance[1], (S, A))):
                if (
                    arr.ndim != 2 + len(tail)
                    or arr.shape[0] != B
                    or arr.shape[1] not in (1, H)
                    or arr.shape[2:] != tail
                ):
                    raise ValueError(
                        f"info[{name!r}] has shape {arr.shape}, expected ({B}, 1 or {H}, {', '.join(map(str, tail))})"
                    )
        self._check_memory()
        self._reset(instance)

    def _memory_bytes(self) -> int:
        """The observation, policy and per-run vectors; subclasses add their tables."""
        return 8 * self.batch_size * (self.num_states + self.horizon + 4 * self.num_actions)

    def _decode(self, obs: Any) -> MDPObservation:
        """(S + H,) or (B, S + H) one-hot observations -> (states (B,), h)."""
        S, H = self.num_states, self.horizon
        arr = as_float_array("observation", obs)
        if arr.ndim not in (1, 2) or arr.shape[-1] != S + H:
            raise ValueError(
                f"observation of shape {arr.shape} does not match S={S} states + H={H} steps "
                f"(expected ({S + H},) or (B, {S + H}): a one-hot state, then a one-hot step)"
            )
        arr = arr.reshape(-1, S + H)
        self._check_runs(arr.shape[0])
        binary = ((arr == 0) | (arr == 1)).all(axis=1)
        one_hot = binary & (arr[:, :S].sum(axis=1) == 1) & (arr[:, S:].sum(axis=1) == 1)
        if not one_hot.all():
            b = int(np.argmin(one_hot))
            nonzero = np.flatnonzero(arr[b])[:8]
            seen = (
                f"nonzero entries at {nonzero.tolist()} with values {arr[b, nonzero].tolist()}"
                if len(nonzero)
                else "all zeros"
            )
            raise ValueError(
                f"observation {'of run ' + str(b) + ' ' if arr.shape[0] > 1 else ''}is not a one-hot state among "
                f"S={S} followed by a one-hot step among H={H} (an observation of this environment), got {seen}"
            )
        hs = arr[:, S:].argmax(axis=1)
        if np.any(hs != hs[0]):
            raise ValueError(f"all runs of a batch must be at the same step h, got steps {sorted(set(hs.tolist()))}")
        return arr[:, :S].argmax(axis=1), int(hs[0])

    def _observe(self, observation: MDPObservation) -> None:
        """A new state completes the pending transition (when it is the next step of the same episode)."""
        self._complete(*observation)

    def _act_on(self, observation: MDPObservation) -> np.ndarray:
        return self.act_batch(*observation)

    def _policy_on(self, observation: MDPObservation) -> np.ndarray:
        return self.policy_batch(*observation)

    def _record(self, observation: MDPObservation, actions: np.ndarray, rewards: np.ndarray) -> None:
        """The next state comes with the next observation; after step H there is none."""
        states, h = observation
        self._pending = (states, h, actions, rewards)
        if h == self.horizon - 1:  # episode over: no next state is recorded (N_H(s, a, s') = 0)
            self._complete(None, 0)

    def _complete(self, next_states: np.ndarray | None, h: int) -> None:
        if self._pending is None:
            return
        states, h_prev, actions, rewards = self._pending
        if next_states is None or h != h_prev + 1:
            next_states = np.full(self.batch_size, -1)
        self._pending = None
        self.update_batch(states, h_prev, actions, rewards, next_states)

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, instance: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Allocate statistics for ``batch_size`` runs."""

    def _begin_episode(self) -> None:
        """Called once per episode, before its first action (e.g. to re-plan)."""

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no action probabilities")

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        return sample_categorical(self._policy(states, h), self.rng)

    def _update(
        self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray
    ) -> None:
        """Add one transition per run."""
