"""ICRL-DarkRoom-v0: the standard in-context RL grid task, as a tabular MDP instance family.

The dark room's dynamics live here (:class:`DarkRoomDynamics`, the row of ``MDPKind.DARK_ROOM`` in
:data:`~icrl_gym.envs.mdp_core.DYNAMICS`): an instance drawn from the prior is stored by what
defines it, its goal cell.  The moves are one (S, A) table of successors shared by every instance,
the next state and the reward are looked up from it, and Q* is solved once per distinct goal
(:class:`~icrl_gym.envs.mdp_core.InstanceTable`), so 10,000 rooms take megabytes, not gigabytes.
``P``, ``R`` and ``mu`` are read-only views (P, mu) or built on demand (R), equal to the dense arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from icrl_gym.envs.mdp_core import InstanceTable, MDPKind, MDPSpec
from icrl_gym.envs.mdp_env import TabularMDPEnv, TabularMDPVectorEnv
from icrl_gym.envs.validation import check_integer

DARK_ROOM_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1), (0, 0))
"""(row, column) displacement of the actions up, down, left, right, stay; walls stop a move."""


def dark_room_spec(size: int = 10, horizon: int = 100, episodes: int = 10) -> MDPSpec:
    """The DarkRoom prior (a size x size room, horizon 100 by default)."""
    size = check_integer("size", size, low=2)
    return MDPSpec(
        kind=MDPKind.DARK_ROOM, num_states=size * size, num_actions=5, horizon=horizon, episodes=episodes, size=size
    )


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

    def __init__(self, spec: MDPSpec, goal: np.ndarray) -> None:
        self.spec, self.goal = spec, goal
        self.successors = dark_room_successors(spec.size)  # (S, A)
        self.centre = (spec.size // 2) * spec.size + spec.size // 2

    @property
    def P(self) -> np.ndarray:
        """(B, 1, S, A, S): the moves, a read-only view of one table."""
        moves = dark_room_transitions(self.spec.size)[None]
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
            V[:, h] = Q[:, h].max(axis=-1)
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


class DarkRoomDynamics:
    """The DarkRoom prior: a goal cell uniform over the S cells, known deterministic moves, reward 1 on the goal."""

    bernoulli_rewards = False
    always_stationary = True

    def problems(self, spec: MDPSpec) -> list[str]:
        """A room of side ``size`` >= 2 has size**2 states and 5 actions."""
        if spec.size < 2 or spec.num_states != spec.size**2 or spec.num_actions != 5:
            return [
                f"a dark room of side size has size**2 states and 5 actions, got size={spec.size}, "
                f"num_states={spec.num_states}, num_actions={spec.num_actions}"
            ]
        return []

    def memory_bytes(self, spec: MDPSpec, batch_size: int) -> int:
        """Q* and V* per distinct goal (at most S), the moves, R of the reset info (B, S, A) and the goals."""
        B, S, A, H = batch_size, spec.num_states, spec.num_actions, spec.horizon
        goals = min(B, S)
        return 8 * (goals * (H * S * A + (H + 1) * S) + S * A * (S + 1) + B * S * A + 8 * B)

    def draw(self, spec: MDPSpec, rng: np.random.Generator, n: int) -> DarkRoomInstances:
        """The goals, uniform over the cells."""
        return DarkRoomInstances(spec, rng.integers(0, spec.num_states, size=n))


class DarkRoomEnv(TabularMDPEnv):
    """Dark room: find a hidden goal in a size x size grid, again in every episode.

    ## Description
    The agent starts every episode in the centre cell of a size x size room (default 10 x 10) and
    moves deterministically (walls stop it).  A goal cell is drawn uniformly per instance and never
    shown; every step taken from the goal cell earns reward 1.  H=100 steps per episode, K episodes
    per run: an agent that found the goal in one episode can walk straight back in the next.

    ## Action Space
    ``Discrete(5)``: up, down, left, right, stay.

    ## Observation Space
    ``Box(0, 1, (size^2 + H,), float32)``: one-hot cell (row-major), then one-hot step h.

    ## Reward
    1 on the goal cell, else 0.  ``info["v_star"]`` is the optimal return per episode.

    ## Episode End
    ``terminated=True`` after K episodes.

    ## Arguments
    size (>= 2), horizon, episodes (integers >= 1).  ``max_memory_gib`` raises the memory limit
    (default 4 GiB, or ``$ICRL_GYM_MAX_MEMORY_GIB``); an instance is stored by its goal, so 10,000
    rooms of 10 x 10 take about 50 MB.

    ## References
    Laskin et al., "In-context reinforcement learning with algorithm distillation", 2022;
    Lee et al., "Supervised pretraining can learn in-context reinforcement learning", 2023.

    ## Version History
    v0: initial version.
    """

    def __init__(
        self,
        size: int = 10,
        horizon: int = 100,
        episodes: int = 10,
        *,
        max_memory_gib: float | None = None,
        render_mode: str | None = None,
    ) -> None:
        spec = dark_room_spec(size, horizon, episodes)
        super().__init__(spec, max_memory_gib=max_memory_gib, render_mode=render_mode)


class DarkRoomVectorEnv(TabularMDPVectorEnv):
    """Natively batched :class:`DarkRoomEnv`."""

    def __init__(
        self,
        num_envs: int = 1,
        size: int = 10,
        horizon: int = 100,
        episodes: int = 10,
        *,
        max_memory_gib: float | None = None,
        render_mode: str | None = None,
        autoreset_mode: Any = None,
    ) -> None:
        spec = dark_room_spec(size, horizon, episodes)
        super().__init__(
            num_envs, spec, max_memory_gib=max_memory_gib, render_mode=render_mode, autoreset_mode=autoreset_mode
        )
