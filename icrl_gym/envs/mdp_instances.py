"""The instances of tabular MDPs: dense arrays, the dark room's compact form, and Q* by backward induction.

The bottom of the MDP environments: plain arrays, no spec.  An :class:`MDPInstances` is what a kind's
dynamics (:data:`icrl_gym.envs.mdp_core.DYNAMICS`) draws: :class:`DenseInstances` (P, R, mu as
arrays; the Dirichlet prior's and every instance given to ``reset``) or :class:`DarkRoomInstances`
(a dark room stored by its goal cell: the moves are one (S, A) table of successors shared by every
instance, the next state and the reward are looked up from it, and Q* is solved once per distinct
goal, :class:`InstanceTable`, so 10,000 rooms take megabytes, not gigabytes; its ``P``, ``R`` and
``mu`` are read-only views or built on demand, equal to the dense arrays).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


def max_over_actions(q: np.ndarray) -> np.ndarray:
    """max_a q[..., a], the same numbers as ``q.max(axis=-1)``, as A - 1 elementwise maxima.

    numpy reduces a short last axis one small strided loop per row; with a handful of actions that is
    5-60x slower than comparing whole (..., ) slices, and the planners below take this maximum once per
    step of every backward induction.
    """
    v = q[..., 0].copy()
    for a in range(1, q.shape[-1]):
        np.maximum(v, q[..., a], out=v)
    return v


def backward_induction(
    P: np.ndarray, R: np.ndarray, horizon: int, first_step: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Optimal Q*_h (B, H, S, A) and V*_h (B, H + 1, S) of B instances (V*_{H+1} = 0).

    ``P`` (B, H_P, S, A, S) and ``R`` (B, H_R, S, A) with H_P, H_R in {1, H} (stationary when 1).
    Only the steps h >= ``first_step`` are solved (the rows below it stay 0).
    """
    B, _, S, A = R.shape
    Q = np.zeros((B, horizon, S, A))
    V = np.zeros((B, horizon + 1, S))
    for h in range(horizon - 1, first_step - 1, -1):
        Ph = P[:, h if P.shape[1] > 1 else 0]
        Rh = R[:, h if R.shape[1] > 1 else 0]
        Q[:, h] = Rh + np.einsum("bsat,bt->bsa", Ph, V[:, h + 1])
        V[:, h] = max_over_actions(Q[:, h])
    return Q, V


class InstanceTable:
    """A per-instance table (B, ...) stored once per distinct instance: row b is ``table[index[b]]``.

    Indexing takes the instance axis first, like the dense array it stands for (``q[rows, h, states]``,
    ``q[b]``); ``np.asarray`` builds that dense array.
    """

    def __init__(self, table: np.ndarray, index: np.ndarray) -> None:
        self.table, self.index = table, index

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the dense array: (B, ...)."""
        return (len(self.index), *self.table.shape[1:])

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        return self.table[(self.index[key[0]],) + tuple(key[1:])]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.table[self.index], dtype=dtype)


class MDPInstances(Protocol):
    """B instances of one prior as :class:`MDPBatch` steps them: dense arrays, or a kind's compact form.

    The uniform numbers are the batch's (one per run for the start state and one for the transition,
    whatever the instance: common random numbers); the instances turn them into states.
    """

    @property
    def goal(self) -> np.ndarray | None:
        """(B,) goal cells, for a kind whose instances are defined by one (else None)."""
        ...

    @property
    def P(self) -> np.ndarray:
        """Transitions P_h(s' | s, a), (B, H_P, S, A, S)."""
        ...

    @property
    def R(self) -> np.ndarray:
        """Mean rewards R_h(s, a), (B, H_R, S, A)."""
        ...

    @property
    def mu(self) -> np.ndarray:
        """Initial distributions, (B, S)."""
        ...

    def solve(self, horizon: int) -> tuple[np.ndarray | InstanceTable, np.ndarray]:
        """Q*_h(s, a) (indexed like a (B, H, S, A) array) and V*_1(mu) (B,)."""
        ...

    def start_states(self, u: np.ndarray) -> np.ndarray:
        """(B,) initial states from (B, 1) uniform numbers."""
        ...

    def mean_rewards(self, rows: np.ndarray, h: int, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """(B,) R_h(s, a) of every run at its state and action."""
        ...

    def next_states(
        self, rows: np.ndarray, h: int, states: np.ndarray, actions: np.ndarray, u: np.ndarray
    ) -> np.ndarray:
        """(B,) next states s' ~ P_h(. | s, a) from (B, 1) uniform numbers."""
        ...


def _inverse_cdf(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One index per row of ``probs`` (B, S) from the (B, 1) uniform numbers ``u``."""
    cdf = np.cumsum(probs, axis=-1)
    return np.minimum((cdf <= u * cdf[:, -1:]).sum(axis=1), probs.shape[-1] - 1)


class DenseInstances:
    """B instances as dense arrays: P (B, H_P, S, A, S), R (B, H_R, S, A), mu (B, S), H_P, H_R in {1, H}."""

    goal: np.ndarray | None = None

    def __init__(self, P: np.ndarray, R: np.ndarray, mu: np.ndarray) -> None:
        self.P, self.R, self.mu = P, R, mu

    def solve(self, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """Backward induction; V*_1(mu) = sum_s mu(s) V*_1(s)."""
        q, v = backward_induction(self.P, self.R, horizon)
        return q, (self.mu * v[:, 0]).sum(axis=1)

    def start_states(self, u: np.ndarray) -> np.ndarray:
        """Initial states drawn from mu."""
        return _inverse_cdf(self.mu, u)

    def mean_rewards(self, rows: np.ndarray, h: int, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """R_h(s, a)."""
        return self.R[rows, h if self.R.shape[1] > 1 else 0, states, actions]

    def next_states(
        self, rows: np.ndarray, h: int, states: np.ndarray, actions: np.ndarray, u: np.ndarray
    ) -> np.ndarray:
        """The next states, drawn from P_h(. | s, a)."""
        return _inverse_cdf(self.P[rows, h if self.P.shape[1] > 1 else 0, states, actions], u)


DARK_ROOM_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1), (0, 0))
"""(row, column) displacement of the actions up, down, left, right, stay; walls stop a move."""


def dark_room_successors(size: int) -> np.ndarray:
    """The deterministic moves of a size x size room: next state of (s, a), shape (S, A)."""
    s = np.arange(size * size)
    row, col = s // size, s % size
    return np.stack(
        [np.clip(row + dr, 0, size - 1) * size + np.clip(col + dc, 0, size - 1) for dr, dc in DARK_ROOM_MOVES], axis=1
    )


def dark_room_transitions(size: int) -> np.ndarray:
    """The moves as a transition table: P of shape (1, S, A, S), one-hot rows."""
    nxt = dark_room_successors(size)
    S, A = nxt.shape
    P = np.zeros((1, S, A, S))
    P[0, np.arange(S)[:, None], np.arange(A), nxt] = 1.0
    return P


class DarkRoomInstances:
    """B DarkRoom instances by their goals: the shared moves, mean reward 1{s = goal}, start in the centre."""

    def __init__(self, size: int, goal: np.ndarray) -> None:
        self.size, self.goal = size, goal
        self.successors = dark_room_successors(size)  # (S, A)
        self.centre = (size // 2) * size + size // 2

    @property
    def P(self) -> np.ndarray:
        """(B, 1, S, A, S): the moves, a read-only view of one table."""
        moves = dark_room_transitions(self.size)[None]
        return np.broadcast_to(moves, (len(self.goal), *moves.shape[1:]))

    @property
    def R(self) -> np.ndarray:
        """(B, 1, S, A): reward 1 for every step taken from the goal cell (built on each access)."""
        S, A = self.successors.shape
        R = np.zeros((len(self.goal), 1, S, A))
        R[np.arange(len(self.goal)), 0, self.goal, :] = 1.0
        return R

    @property
    def mu(self) -> np.ndarray:
        """(B, S): every episode starts in the centre cell (a read-only view of one row)."""
        row = np.zeros(self.size * self.size)
        row[self.centre] = 1.0
        return np.broadcast_to(row, (len(self.goal), self.size * self.size))

    def solve(self, horizon: int) -> tuple[InstanceTable, np.ndarray]:
        """Q*_h (as an :class:`InstanceTable` over the distinct goals) and V*_1(centre) (B,).

        With goal g: Q*_h(s, a) = 1{s = g} + V*_{h+1}(next(s, a)), V*_h(s) = max_a Q*_h(s, a); the same
        numbers as backward induction on the dense P, R (a one-hot row of P picks V*_{h+1}(next) exactly).
        """
        goals, index = np.unique(self.goal, return_inverse=True)
        S, A = self.successors.shape
        Q = np.zeros((len(goals), horizon, S, A))
        V = np.zeros((len(goals), horizon + 1, S))
        reward = (np.arange(S) == goals[:, None]).astype(np.float64)[:, :, None]  # (G, S, 1)
        for h in range(horizon - 1, -1, -1):
            Q[:, h] = reward + V[:, h + 1][:, self.successors]
            V[:, h] = max_over_actions(Q[:, h])
        return InstanceTable(Q, index), V[index, 0, self.centre]

    def start_states(self, u: np.ndarray) -> np.ndarray:
        """Every run starts in the centre (the uniform numbers are drawn all the same)."""
        return np.full(len(self.goal), self.centre)

    def mean_rewards(self, rows: np.ndarray, h: int, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """1 on the goal cell, else 0."""
        return (states == self.goal).astype(np.float64)

    def next_states(
        self, rows: np.ndarray, h: int, states: np.ndarray, actions: np.ndarray, u: np.ndarray
    ) -> np.ndarray:
        """The deterministic move (the uniform numbers are drawn all the same)."""
        return self.successors[states, actions]
