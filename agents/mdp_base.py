"""One interface for tabular-MDP algorithms, batched over B runs (Section Tabular-MDP-statement).

Like :class:`agents.base.BanditAgent`, an MDP agent runs in a plain Gymnasium loop::

    obs, info = env.reset(seed=0); agent.reset(info)
    while True:
        a = agent.act(obs)
        obs, r, terminated, truncated, info = env.step(a)
        agent.update(a, r)
        if terminated: break

The observation is the one-hot state followed by the one-hot step h; a transition (h, s, a, r, s')
is complete when the next observation arrives (or the episode ends, after step H, where the
paper's counts record no next state).  The batched core works on arrays:
``act_batch(states, h)``, ``policy_batch(states, h)`` and
``update_batch(states, h, actions, rewards, next_states)`` with ``next_states = -1`` after step H.
Subclasses implement ``_reset``, ``_begin_episode`` (called at h = 0, e.g. to re-plan) and the
per-step hooks.  ``episode`` counts the episodes started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.base import sample_categorical
from agents.statistics import TransitionCounts
from icrl_gym.envs.mdp_core import backward_induction


def uniform_over_maximisers(values: np.ndarray) -> np.ndarray:
    """(B, A) values -> the policy uniform over each row's maximisers (exact ties, common under the clip at H)."""
    best = np.isclose(values, values.max(axis=1, keepdims=True), rtol=0.0, atol=1e-12)
    return best / best.sum(axis=1, keepdims=True)


class MDPAgent:
    """Base class of tabular-MDP algorithms (a single run is a batch of one)."""

    name = "mdp_agent"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.batch_size = self.num_states = self.num_actions = self.horizon = self.episodes = 0
        self.env_stationary = False
        self.episode = 0
        self._single = False
        self._pending: tuple[np.ndarray, int, np.ndarray, np.ndarray] | None = None
        self._last: tuple[np.ndarray, int] | None = None
        self._planned_episode = -1

    # ------------------------------------------------------------------ public API
    def reset(self, info: Mapping[str, Any], rng: np.random.Generator | None = None) -> None:
        """Start runs sized from the environment's reset ``info`` (P, R for the oracle only)."""
        v_star = np.asarray(info["v_star"])
        self._single = v_star.ndim == 0
        self.batch_size = 1 if self._single else v_star.shape[0]
        self.num_states, self.num_actions = int(info["num_states"]), int(info["num_actions"])
        self.horizon, self.episodes = int(info["horizon"]), int(info["episodes"])
        self.env_stationary = bool(info.get("stationary", False))
        if rng is not None:
            self.rng = rng
        self.episode = 0
        self._planned_episode = -1
        self._pending = None
        instance = None
        if "P" in info:
            P, R = np.asarray(info["P"]), np.asarray(info["R"])
            instance = (P[None], R[None]) if self._single else (P, R)
        self._reset(instance)

    def act(self, obs: Any) -> Any:
        """An action for every run (an ``int`` for a single run)."""
        states, h = self._decode(obs)
        self._complete(states, h)
        actions = self.act_batch(states, h)
        self._last = (states, h)
        return int(actions[0]) if self._single else actions

    def policy(self, obs: Any) -> np.ndarray:
        """Action probabilities at the current observation, (A,) or (B, A)."""
        states, h = self._decode(obs)
        self._complete(states, h)
        probs = self.policy_batch(states, h)
        return probs[0] if self._single else probs

    def update(self, action: Any, reward: Any) -> None:
        """Record the outcome of the last ``act``; the next state comes with the next observation."""
        if self._last is None:
            raise RuntimeError("update() needs a previous act(obs)")
        states, h = self._last
        actions = np.asarray(action).reshape(-1).astype(np.int64)
        rewards = np.asarray(reward, dtype=np.float64).reshape(-1)
        if actions.shape != (self.batch_size,) or rewards.shape != (self.batch_size,):
            raise ValueError(f"update expects {self.batch_size} actions and rewards")
        self._pending = (states, h, actions, rewards)
        self._last = None
        if h == self.horizon - 1:  # episode over: no next state is recorded (N_H(s, a, s') = 0)
            self._complete(None, 0)

    # ------------------------------------------------------------------ batched array API
    def act_batch(self, states: np.ndarray, h: int) -> np.ndarray:
        """(B,) states at step h -> (B,) actions."""
        self._plan_once()
        return self._act(states, h)

    def policy_batch(self, states: np.ndarray, h: int) -> np.ndarray:
        """(B,) states at step h -> (B, A) action probabilities."""
        self._plan_once()
        return self._policy(states, h)

    def _plan_once(self) -> None:
        """Call ``_begin_episode`` once per episode, before its first action or policy."""
        if self._planned_episode != self.episode:
            self._planned_episode = self.episode
            self._begin_episode()

    def update_batch(
        self, states: np.ndarray, h: int, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray
    ) -> None:
        """Add the transitions (h, s, a, r, s') of every run; ``next_states`` is -1 after step H."""
        self._update(states, h, actions, rewards, next_states)
        if h == self.horizon - 1:
            self.episode += 1

    # ------------------------------------------------------------------ helpers
    def _decode(self, obs: Any) -> tuple[np.ndarray, int]:
        if self.batch_size == 0:
            raise RuntimeError(f"{type(self).__name__}: call reset() before act()")
        arr = np.asarray(obs, dtype=np.float32).reshape(-1, self.num_states + self.horizon)
        if arr.shape[0] != self.batch_size:
            raise ValueError(f"observation holds {arr.shape[0]} runs but the agent was reset for {self.batch_size}")
        hs = arr[:, self.num_states :].argmax(axis=1)
        if np.any(hs != hs[0]):
            raise ValueError("all runs of a batch must be at the same step h")
        return arr[:, : self.num_states].argmax(axis=1), int(hs[0])

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
        raise NotImplementedError

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        return sample_categorical(self._policy(states, h), self.rng)

    def _update(self, states, h, actions, rewards, next_states) -> None:
        """Add one transition per run."""

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (recorded with every artefact)."""
        return {"name": self.name}


class GreedyQAgent(MDPAgent):
    """Greedy on a Q table (B, H, S, A), ties broken at random (``temperature == 0``), or softmax(Q / temperature)."""

    def __init__(self, temperature: float = 0.0, seed: int | None = None) -> None:
        super().__init__(seed)
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.temperature = float(temperature)
        self.q: np.ndarray | None = None

    def _q_rows(self, states: np.ndarray, h: int) -> np.ndarray:
        return self.q[np.arange(self.batch_size), h, states]  # (B, A)

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        q = self._q_rows(states, h)
        if self.temperature == 0:
            return uniform_over_maximisers(q)
        z = np.exp((q - q.max(axis=1, keepdims=True)) / self.temperature)
        return z / z.sum(axis=1, keepdims=True)

    def _act(self, states: np.ndarray, h: int) -> np.ndarray:
        if self.temperature == 0:  # argmax, ties broken uniformly at random
            best = uniform_over_maximisers(self._q_rows(states, h))
            return (best * self.rng.random(best.shape)).argmax(axis=1)
        return super()._act(states, h)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {"name": self.name, "temperature": self.temperature}

    def _new_counts(self, stationary: bool | None) -> TransitionCounts:
        """Empty counts for the runs, pooled over h if ``stationary`` (``None``: as the environment's info says)."""
        pooled = self.env_stationary if stationary is None else bool(stationary)
        return TransitionCounts(self.batch_size, self.horizon, self.num_states, self.num_actions, pooled)


class MDPOptimal(GreedyQAgent):
    """The optimal policy of the true instance: argmax_a Q*_h(s, a) by backward induction (the DPT label)."""

    name = "mdp_optimal"

    def _reset(self, instance: tuple[np.ndarray, np.ndarray] | None) -> None:
        if instance is None:
            raise ValueError("the optimal policy needs the instance (P, R) from the environment's reset info")
        self.q, _ = backward_induction(instance[0], instance[1], self.horizon)


class MDPUniform(MDPAgent):
    """Every action with probability 1/A."""

    name = "mdp_uniform"

    def _policy(self, states: np.ndarray, h: int) -> np.ndarray:
        return np.full((self.batch_size, self.num_actions), 1.0 / self.num_actions)
