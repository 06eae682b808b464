"""Batched finite-horizon tabular MDPs (Section 4.3, Appendix G).

An instance is M = (S, A, H, {P_h}, {R_h}, mu): transitions P_h(s' | s, a), mean rewards
R_h(s, a) in [0, 1] and an initial distribution mu.  One in-context run is K episodes of H steps
(T = K H).  :class:`MDPBatch` holds B instances as arrays and steps them together; it owns no
randomness (the caller passes a ``np.random.Generator``), and like the bandits it draws one
uniform number per instance per step for the reward and one for the transition, whatever the
action, so algorithms run under one seed share instances and noise.

Transitions are stored dense, ``P`` of shape (B, H_P, S, A, S) with H_P = H (time-inhomogeneous,
the paper's setting) or H_P = 1 (stationary, e.g. DarkRoom); mean rewards ``R`` likewise
(B, H_R, S, A).  Rewards are Bernoulli(R_h(s, a)) or deterministic (r = R_h(s, a)).

V*(mu) comes from backward induction, :func:`backward_induction`:
Q*_h(s, a) = R_h(s, a) + sum_{s'} P_h(s' | s, a) V*_{h+1}(s'),  V*_h(s) = max_a Q*_h(s, a),  V*_{H+1} = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from icrl_gym.envs.bandit_core import check_action_batch
from icrl_gym.fileio import DictConfig

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
        problems = []
        if self.kind not in MDP_KINDS:
            problems.append(f"kind must be one of {MDP_KINDS}, got {self.kind!r}")
        for name in ("num_states", "num_actions", "horizon", "episodes"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.concentration <= 0:
            problems.append(f"concentration must be > 0, got {self.concentration}")
        if self.kind == "dark_room" and (self.size < 2 or self.num_states != self.size**2 or self.num_actions != 5):
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


def dark_room_spec(size: int = 10, horizon: int = 100, episodes: int = 10) -> MDPSpec:
    """The DarkRoom prior (a size x size room, horizon 100 by default)."""
    return MDPSpec(
        kind="dark_room", num_states=size * size, num_actions=5, horizon=horizon, episodes=episodes, size=size
    )


def _dark_room_transitions(size: int) -> np.ndarray:
    """Deterministic moves (up, down, left, right, stay) on the grid: P of shape (1, S, A, S)."""
    s = np.arange(size * size)
    row, col = s // size, s % size
    moves = [(-1, 0), (1, 0), (0, -1), (0, 1), (0, 0)]
    P = np.zeros((1, size * size, 5, size * size))
    for a, (dr, dc) in enumerate(moves):
        nxt = np.clip(row + dr, 0, size - 1) * size + np.clip(col + dc, 0, size - 1)
        P[0, s, a, nxt] = 1.0
    return P


def sample_mdps(spec: MDPSpec, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Draw n instances: P (n, H_P, S, A, S), R (n, H_R, S, A), mu (n, S) and, for dark_room, goal (n,)."""
    S, A, H = spec.num_states, spec.num_actions, spec.horizon
    if spec.kind == "dark_room":
        goal = rng.integers(0, S, size=n)
        R = np.zeros((n, 1, S, A))
        R[np.arange(n), 0, goal, :] = 1.0  # reward 1 for every step taken from the goal cell
        mu = np.zeros((n, S))
        centre = (spec.size // 2) * spec.size + spec.size // 2
        mu[:, centre] = 1.0
        P = np.broadcast_to(_dark_room_transitions(spec.size), (n, 1, S, A, S))
        return {"P": P, "R": R, "mu": mu, "goal": goal}
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


class MDPBatch:
    """B tabular MDP runs of K episodes of H steps advanced together.

    Attributes: ``state`` (B,) current states, ``h`` the step within the episode (0-based),
    ``k`` the episode (0-based), ``v_star`` (B,) the optimal value V*_1(mu) of every instance.
    """

    def __init__(self, spec: MDPSpec, batch_size: int, rng: np.random.Generator, instance: dict | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.spec, self.batch_size, self.rng = spec, batch_size, rng
        inst = sample_mdps(spec, rng, batch_size) if instance is None else self._check_instance(instance)
        self.P, self.R, self.mu = inst["P"], inst["R"], inst["mu"]
        self.goal = inst.get("goal")
        self.q_star, v = backward_induction(self.P, self.R, spec.horizon)
        self.v_star = (self.mu * v[:, 0]).sum(axis=1)
        self._cdf_P = np.cumsum(self.P, axis=-1)
        self._rows = np.arange(batch_size)
        self.k = 0
        self.h = 0
        self.state = self._draw(np.cumsum(self.mu, axis=-1))

    def _check_instance(self, inst: dict) -> dict:
        S, A, H, B = self.spec.num_states, self.spec.num_actions, self.spec.horizon, self.batch_size
        out = {}
        for key, ndim in (("P", 5), ("R", 4), ("mu", 2)):
            arr = np.asarray(inst[key], dtype=np.float64)
            if arr.ndim == ndim - 1:
                arr = arr[None]
            if arr.shape[0] == 1 and B > 1:
                arr = np.broadcast_to(arr, (B, *arr.shape[1:]))
            out[key] = arr
        if out["P"].shape[2:] != (S, A, S) or out["P"].shape[1] not in (1, H) or out["P"].shape[0] != B:
            raise ValueError(f"P has shape {out['P'].shape}, expected ({B}, {H} or 1, {S}, {A}, {S})")
        if out["R"].shape[2:] != (S, A) or out["R"].shape[1] not in (1, H) or out["R"].shape[0] != B:
            raise ValueError(f"R has shape {out['R'].shape}, expected ({B}, {H} or 1, {S}, {A})")
        if out["mu"].shape != (B, S):
            raise ValueError(f"mu has shape {out['mu'].shape}, expected ({B}, {S})")
        if not np.allclose(out["P"].sum(-1), 1.0) or not np.allclose(out["mu"].sum(-1), 1.0):
            raise ValueError("P(. | s, a) and mu must be probability distributions")
        if out["R"].min() < 0 or out["R"].max() > 1:
            raise ValueError("mean rewards R must lie in [0, 1]")
        if "goal" in inst:
            out["goal"] = np.asarray(inst["goal"])
        return out

    def _draw(self, cdf: np.ndarray) -> np.ndarray:
        u = self.rng.random((self.batch_size, 1)) * cdf[:, -1:]
        return np.minimum((cdf <= u).sum(axis=1), self.spec.num_states - 1)

    @property
    def done(self) -> bool:
        """Whether all K episodes are over."""
        return self.k >= self.spec.episodes

    def check_actions(self, actions: Any) -> np.ndarray:
        """Validate a batch of action indices: integers of shape (B,) in [0, A)."""
        return check_action_batch(actions, self.batch_size, self.spec.num_actions)

    def step(self, actions: Any) -> dict[str, np.ndarray]:
        """Take one action per run; returns rewards, mean rewards and the next state (-1 after step H)."""
        if self.done:
            raise RuntimeError(f"the run has ended after K={self.spec.episodes} episodes; call reset() first")
        a = self.check_actions(actions)
        hp = self.h if self.P.shape[1] > 1 else 0
        hr = self.h if self.R.shape[1] > 1 else 0
        mean = self.R[self._rows, hr, self.state, a]
        reward = (self.rng.random(self.batch_size) < mean).astype(np.float64)
        if self.spec.kind == "dark_room":
            reward = mean.copy()  # deterministic reward on the goal
        nxt = self._draw(self._cdf_P[self._rows, hp, self.state, a])
        out = {"reward": reward, "expected_reward": mean, "state": self.state.copy(), "h": self.h, "k": self.k}
        self.h += 1
        if self.h == self.spec.horizon:  # episode over: restart from mu
            out["next_state"] = np.full(self.batch_size, -1)
            self.h, self.k = 0, self.k + 1
            self.state = self._draw(np.cumsum(self.mu, axis=-1))
        else:
            out["next_state"] = nxt
            self.state = nxt
        return out
