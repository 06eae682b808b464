"""Batched finite-horizon tabular MDPs (Section 4.3, Appendix G).

An instance is M = (S, A, H, {P_h}, {R_h}, mu): transitions P_h(s' | s, a), mean rewards
R_h(s, a) in [0, 1] and an initial distribution mu.  One in-context run is K episodes of H steps
(T = K H).  :class:`MDPBatch` holds B instances as arrays and steps them together; it owns no
randomness (the caller passes a ``np.random.Generator``), and like the bandits it draws one
uniform number per instance per step for the reward and one for the transition, whatever the
action, so algorithms run under one seed share instances and noise.

Transitions are stored dense, ``P`` of shape (B, H_P, S, A, S) with H_P = H (time-inhomogeneous,
the paper's setting) or H_P = 1 (stationary); mean rewards ``R`` likewise (B, H_R, S, A).  Rewards
are Bernoulli(R_h(s, a)) or deterministic (r = R_h(s, a)).  A DarkRoom instance drawn from the prior
is stored by what defines it, its goal cell: the moves are one (S, A) table of successors shared by
every instance, the next state and the reward are looked up from it, and Q* is solved once per
distinct goal (:class:`InstanceTable`), so 10,000 rooms take megabytes, not gigabytes.  ``P``, ``R``
and ``mu`` are then read-only views (P, mu) or built on demand (R), equal to the dense arrays.

V*(mu) comes from backward induction, :func:`backward_induction`:
Q*_h(s, a) = R_h(s, a) + sum_{s'} P_h(s' | s, a) V*_{h+1}(s'),  V*_h(s) = max_a Q*_h(s, a),  V*_{H+1} = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from icrl_gym.config import DictConfig
from icrl_gym.envs.validation import (
    MAX_SCALE,
    as_float_array,
    check_distribution,
    check_finite,
    check_in_range,
    check_index_batch,
    check_integer,
    check_memory,
    integer_problem,
    number_problem,
    plain,
)

MDP_KINDS = ("random", "dark_room")


@dataclass(frozen=True)
class MDPSpec(DictConfig):
    """The prior over tabular MDP instances.

    ``kind="random"`` (ICRL-TabularMDP-v0): P_h(. | s, a) ~ Dirichlet(concentration * 1_S) per
    (h, s, a), R_h(s, a) ~ Unif[0, 1], Bernoulli rewards, start state 0 (or mu ~ Dirichlet(1) with
    ``random_start``).  ``kind="dark_room"`` (ICRL-DarkRoom-v0): a size x size grid, actions
    (up, down, left, right, stay), a goal cell drawn uniformly per instance, reward 1 on the goal,
    start in the centre, deterministic moves.
    """

    kind: str = "random"
    """'random' (Dirichlet transitions, uniform mean rewards) or 'dark_room'."""
    num_states: int = 5
    """Number of states S (dark_room: size * size)."""
    num_actions: int = 3
    """Number of actions A (dark_room: 5)."""
    horizon: int = 10
    """Steps H per episode."""
    episodes: int = 20
    """Episodes K per in-context run (T = K H)."""
    concentration: float = 1.0
    """Dirichlet concentration of the transition prior ('random')."""
    random_start: bool = False
    """Initial distribution mu ~ Dirichlet(1) instead of the fixed state 0 ('random')."""
    stationary: bool = True
    """One P(. | s, a) and R(s, a) shared by every step h ('random'; False: one per (h, s, a), as in
    the paper's general setting).  DarkRoom is always stationary."""
    size: int = 0
    """Side of the dark room (0 for 'random')."""

    def __post_init__(self) -> None:
        for f in fields(self):  # numpy scalars become the Python values they hold (JSON-ready, one type)
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))
        problems = []
        if not isinstance(self.kind, str) or self.kind not in MDP_KINDS:
            problems.append(f"kind must be one of {MDP_KINDS}, got {self.kind!r}")
        for name, low in (("num_states", 1), ("num_actions", 1), ("horizon", 1), ("episodes", 1), ("size", 0)):
            if (problem := integer_problem(name, getattr(self, name), low)) is not None:
                problems.append(problem)
        if (problem := number_problem("concentration", self.concentration, 0.0, True, MAX_SCALE)) is not None:
            problems.append(problem)
        for name in ("random_start", "stationary"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not problems and self.kind == "dark_room":
            if self.size < 2 or self.num_states != self.size**2 or self.num_actions != 5:
                problems.append(
                    f"a dark room of side size has size**2 states and 5 actions, got size={self.size}, "
                    f"num_states={self.num_states}, num_actions={self.num_actions}"
                )
        if problems:
            raise ValueError("invalid MDP specification: " + "; ".join(problems))

    @property
    def is_stationary(self) -> bool:
        """Whether P_h and R_h are the same for every h (what an agent may pool its counts over)."""
        return self.kind == "dark_room" or self.stationary

    @property
    def total_steps(self) -> int:
        """T = K H."""
        return self.episodes * self.horizon

    def memory_bytes(self, batch_size: int) -> int:
        """Estimated peak memory of an :class:`MDPBatch` of ``batch_size`` instances drawn from the prior (bytes).

        Random MDPs: P (B, H_P, S, A, S) twice (the Dirichlet draw and its normalisation), R, Q* and V*.
        DarkRoom: Q* and V* per distinct goal (at most S), the shared moves, R built for the reset info
        (B, S, A) and the per-instance vectors.
        """
        B, S, A, H = batch_size, self.num_states, self.num_actions, self.horizon
        if self.kind == "dark_room":
            goals = min(B, S)
            return 8 * (goals * (H * S * A + (H + 1) * S) + S * A * (S + 1) + B * S * A + 8 * B)
        hs = H if not self.stationary else 1
        return 8 * B * (2 * hs * S * A * S + hs * S * A + 2 * H * S * A + (H + 1) * S + 3 * S)


def dark_room_spec(size: int = 10, horizon: int = 100, episodes: int = 10) -> MDPSpec:
    """The DarkRoom prior (a size x size room, horizon 100 by default)."""
    size = check_integer("size", size, low=2)
    return MDPSpec(
        kind="dark_room", num_states=size * size, num_actions=5, horizon=horizon, episodes=episodes, size=size
    )


DARK_ROOM_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1), (0, 0))
"""(row, column) displacement of the actions up, down, left, right, stay; walls stop a move."""


def dark_room_successors(size: int) -> np.ndarray:
    """The deterministic moves of a size x size room: next state of (s, a), shape (S, A)."""
    s = np.arange(size * size)
    row, col = s // size, s % size
    return np.stack(
        [np.clip(row + dr, 0, size - 1) * size + np.clip(col + dc, 0, size - 1) for dr, dc in DARK_ROOM_MOVES], axis=1
    )


def _dark_room_transitions(size: int) -> np.ndarray:
    """The moves as a transition table: P of shape (1, S, A, S), one-hot rows."""
    nxt = dark_room_successors(size)
    S, A = nxt.shape
    P = np.zeros((1, S, A, S))
    P[0, np.arange(S)[:, None], np.arange(A), nxt] = 1.0
    return P


def sample_mdps(spec: MDPSpec, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Draw n instances: P (n, H_P, S, A, S), R (n, H_R, S, A), mu (n, S) and, for dark_room, goal (n,).

    Dense arrays, as :class:`MDPBatch` exposes them; the batch itself stores a DarkRoom by its goals.
    """
    S, A, H = spec.num_states, spec.num_actions, spec.horizon
    if spec.kind == "dark_room":
        goal = rng.integers(0, S, size=n)
        room = DarkRoomInstances(spec, goal)
        return {"P": room.P, "R": room.R, "mu": room.mu, "goal": goal}
    hs = 1 if spec.stationary else H
    P = rng.dirichlet(np.full(S, spec.concentration), size=(n, hs, S, A))
    R = rng.uniform(0.0, 1.0, size=(n, hs, S, A))
    if spec.random_start:
        mu = rng.dirichlet(np.ones(S), size=n)
    else:
        mu = np.zeros((n, S))
        mu[:, 0] = 1.0
    return {"P": P, "R": R, "mu": mu}


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
        V[:, h] = Q[:, h].max(axis=-1)
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


class DarkRoomInstances:
    """B DarkRoom instances by their goals: the shared moves, mean reward 1{s = goal}, start in the centre."""

    def __init__(self, spec: MDPSpec, goal: np.ndarray) -> None:
        self.spec, self.goal = spec, goal
        self.successors = dark_room_successors(spec.size)  # (S, A)
        self.centre = (spec.size // 2) * spec.size + spec.size // 2

    @property
    def P(self) -> np.ndarray:
        """(B, 1, S, A, S): the moves, a read-only view of one table."""
        moves = _dark_room_transitions(self.spec.size)[None]
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
        row = np.zeros(self.spec.num_states)
        row[self.centre] = 1.0
        return np.broadcast_to(row, (len(self.goal), self.spec.num_states))

    def solve(self) -> tuple[InstanceTable, np.ndarray]:
        """Q*_h (as an :class:`InstanceTable` over the distinct goals) and V*_1(centre) (B,).

        With goal g: Q*_h(s, a) = 1{s = g} + V*_{h+1}(next(s, a)), V*_h(s) = max_a Q*_h(s, a); the same
        numbers as backward induction on the dense P, R (a one-hot row of P picks V*_{h+1}(next) exactly).
        """
        goals, index = np.unique(self.goal, return_inverse=True)
        H, (S, A) = self.spec.horizon, self.successors.shape
        Q = np.zeros((len(goals), H, S, A))
        V = np.zeros((len(goals), H + 1, S))
        reward = (np.arange(S) == goals[:, None]).astype(np.float64)[:, :, None]  # (G, S, 1)
        for h in range(H - 1, -1, -1):
            Q[:, h] = reward + V[:, h + 1][:, self.successors]
            V[:, h] = Q[:, h].max(axis=-1)
        return InstanceTable(Q, index), V[index, 0, self.centre]


class MDPBatch:
    """B tabular MDP runs of K episodes of H steps advanced together.

    Attributes: ``state`` (B,) current states, ``h`` the step within the episode (0-based),
    ``k`` the episode (0-based), ``v_star`` (B,) the optimal value V*_1(mu) of every instance,
    ``q_star`` Q*_h(s, a) indexed like a (B, H, S, A) array (an :class:`InstanceTable` for DarkRoom),
    ``goal`` (B,) the goal cells of DarkRoom instances drawn from the prior (else None).
    """

    def __init__(
        self,
        spec: MDPSpec,
        batch_size: int,
        rng: np.random.Generator,
        instance: dict | None = None,
    ):
        """Draw ``batch_size`` instances from ``spec`` with ``rng``, or take them (P, R, mu) from ``instance``.

        The memory limit is :func:`~icrl_gym.envs.validation.memory_limit`'s (or the environment variable's).
        """
        batch_size = check_integer("batch_size", batch_size)
        check_memory(spec.memory_bytes(batch_size), f"a batch of {batch_size:,} {spec.kind} MDPs")
        self.spec, self.batch_size, self.rng = spec, batch_size, rng
        self._room: DarkRoomInstances | None = None
        self.goal: np.ndarray | None = None
        self.q_star: np.ndarray | InstanceTable
        if instance is None and spec.kind == "dark_room":
            self.goal = rng.integers(0, spec.num_states, size=batch_size)
            self._room = DarkRoomInstances(spec, self.goal)
            self.q_star, self.v_star = self._room.solve()
        else:
            inst = sample_mdps(spec, rng, batch_size) if instance is None else self._check_instance(instance)
            self._P, self._R, self._mu = inst["P"], inst["R"], inst["mu"]
            self.q_star, v = backward_induction(self._P, self._R, spec.horizon)
            self.v_star = (self._mu * v[:, 0]).sum(axis=1)
        self._rows = np.arange(batch_size)
        self.k = 0
        self.h = 0
        self.state = self._start_states()

    @property
    def P(self) -> np.ndarray:
        """Transitions P_h(s' | s, a), (B, H_P, S, A, S) (read-only for DarkRoom)."""
        return self._room.P if self._room is not None else self._P

    @property
    def R(self) -> np.ndarray:
        """Mean rewards R_h(s, a), (B, H_R, S, A)."""
        return self._room.R if self._room is not None else self._R

    @property
    def mu(self) -> np.ndarray:
        """Initial distributions, (B, S) (read-only for DarkRoom)."""
        return self._room.mu if self._room is not None else self._mu

    def _check_instance(self, inst: dict) -> dict:
        S, A, H, B = self.spec.num_states, self.spec.num_actions, self.spec.horizon, self.batch_size
        out = {}
        for key, ndim in (("P", 5), ("R", 4), ("mu", 2)):
            arr = as_float_array(key, inst[key])
            if arr.ndim == ndim - 1:
                arr = arr[None]
            if arr.ndim == ndim and arr.shape[0] == 1 and B > 1:
                arr = np.broadcast_to(arr, (B, *arr.shape[1:]))
            out[key] = arr
        P, R, mu = out["P"], out["R"], out["mu"]
        if P.ndim != 5 or P.shape[2:] != (S, A, S) or P.shape[1] not in (1, H) or P.shape[0] != B:
            raise ValueError(f"P has shape {P.shape}, expected ({B}, {H} or 1, {S}, {A}, {S})")
        if R.ndim != 4 or R.shape[2:] != (S, A) or R.shape[1] not in (1, H) or R.shape[0] != B:
            raise ValueError(f"R has shape {R.shape}, expected ({B}, {H} or 1, {S}, {A})")
        if mu.shape != (B, S):
            raise ValueError(f"mu has shape {mu.shape}, expected ({B}, {S})")
        check_distribution("P", P, "over next states s' for every (h, s, a)")
        check_distribution("mu", mu, "over initial states")
        check_finite("mean rewards R", R)
        check_in_range("mean rewards R", R, 0.0, 1.0, "R")
        return out

    def _start_states(self) -> np.ndarray:
        """Initial states of a new episode (one uniform draw per run, whatever mu: common random numbers)."""
        if self._room is not None:
            self.rng.random((self.batch_size, 1))
            return np.full(self.batch_size, self._room.centre)
        return self._draw(np.cumsum(self._mu, axis=-1))

    def _draw(self, cdf: np.ndarray) -> np.ndarray:
        u = self.rng.random((self.batch_size, 1)) * cdf[:, -1:]
        return np.minimum((cdf <= u).sum(axis=1), self.spec.num_states - 1)

    @property
    def done(self) -> bool:
        """Whether all K episodes are over."""
        return self.k >= self.spec.episodes

    def check_actions(self, actions: Any) -> np.ndarray:
        """Validate a batch of action indices: integers of shape (B,) in [0, A)."""
        return check_index_batch(actions, self.batch_size, self.spec.num_actions, "actions", "action indices")

    def _optimal_values(self, h: int, states: np.ndarray) -> np.ndarray:
        """V*_h(s) = max_a Q*_h(s, a) of every run at its state (B,)."""
        return self.q_star[self._rows, h, states].max(axis=-1)

    def step(self, actions: Any) -> dict[str, np.ndarray]:
        """Take one action per run; returns rewards, mean rewards, the next state (-1 after step H) and the regret.

        ``regret`` (B,) is the step's share of the run's regret sum_k (V*_1(mu) - sum_h r_h^k), by
        telescoping: V*_h(s_h) - r_h - V*_{h+1}(s_{h+1}) (V*_{H+1} = 0), with V*_1(mu) in place of
        V*_1(s_1) at the first step of an episode, so the steps of an episode sum exactly to
        V*_1(mu) minus its return (a single step's share may be negative: it carries the reward and
        transition noise).  ``gap`` (B,) is the action's suboptimality V*_h(s_h) - Q*_h(s_h, a_h) >= 0,
        whose expected sum over a run is the same regret.
        """
        if self.done:
            raise RuntimeError(f"the run has ended after K={self.spec.episodes} episodes; call reset() first")
        a = self.check_actions(actions)
        # One reward draw and one transition draw per run and step, whatever the instance (common random numbers).
        if self._room is not None:
            mean = (self.state == self._room.goal).astype(np.float64)
            self.rng.random(self.batch_size)
            reward = mean.copy()  # deterministic reward on the goal
            self.rng.random((self.batch_size, 1))
            nxt = self._room.successors[self.state, a]
        else:
            hp = self.h if self._P.shape[1] > 1 else 0
            hr = self.h if self._R.shape[1] > 1 else 0
            mean = self._R[self._rows, hr, self.state, a]
            reward = (self.rng.random(self.batch_size) < mean).astype(np.float64)
            if self.spec.kind == "dark_room":
                reward = mean.copy()  # deterministic reward on the goal
            nxt = self._draw(np.cumsum(self._P[self._rows, hp, self.state, a], axis=-1))
        out = {"reward": reward, "expected_reward": mean, "state": self.state.copy(), "h": self.h, "k": self.k}
        q_here = self.q_star[self._rows, self.h, self.state]  # (B, A)
        v_state = q_here.max(axis=-1)  # V*_h(s_h)
        v_here = self.v_star if self.h == 0 else v_state
        out["gap"] = v_state - q_here[self._rows, a]
        self.h += 1
        if self.h == self.spec.horizon:  # episode over: restart from mu
            out["next_state"] = np.full(self.batch_size, -1)
            out["regret"] = v_here - reward
            self.h, self.k = 0, self.k + 1
            self.state = self._start_states()
        else:
            out["next_state"] = nxt
            out["regret"] = v_here - reward - self._optimal_values(self.h, nxt)
            self.state = nxt
        return out
