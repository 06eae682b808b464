"""Batched finite-horizon tabular MDPs (Section 4.3, Appendix G).

An instance is M = (S, A, H, {P_h}, {R_h}, mu): transitions P_h(s' | s, a), mean rewards
R_h(s, a) in [0, 1] and an initial distribution mu.  One in-context run is K episodes of H steps
(T = K H).  :class:`MDPBatch` holds B instances as arrays and steps them together; it owns no
randomness (the caller passes a ``np.random.Generator``), and like the bandits it draws one
uniform number per instance per step for the reward and one for the transition, whatever the
action, so algorithms run under one seed share instances and noise.

Transitions are stored dense, ``P`` of shape (B, H_P, S, A, S) with H_P = H (time-inhomogeneous,
the paper's setting) or H_P = 1 (stationary); mean rewards ``R`` likewise (B, H_R, S, A).  Rewards
are Bernoulli(R_h(s, a)) or deterministic (r = R_h(s, a)).

Each kind of prior (:class:`MDPKind`) has its dynamics (:class:`MDPDynamics`, the one table
:data:`DYNAMICS`): its checks, its memory, how instances are drawn and whether rewards are
Bernoulli.  The instances are an :class:`MDPInstances`: dense arrays (:class:`DenseInstances`, the
Dirichlet prior's and every instance given to ``reset``) or a compact form of the kind's own (a
DarkRoom is stored by its goal cell), both in :mod:`icrl_gym.envs.mdp_instances`,, whose ``P``, ``R`` and ``mu``
equal the dense arrays.

V*(mu) comes from backward induction, :func:`backward_induction`:
Q*_h(s, a) = R_h(s, a) + sum_{s'} P_h(s' | s, a) V*_{h+1}(s'),  V*_h(s) = max_a Q*_h(s, a),  V*_{H+1} = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from icrl_gym.config import Choice, DictConfig
from icrl_gym.envs.mdp_instances import (
    DarkRoomInstances,
    DenseInstances,
    InstanceTable,
    MDPInstances,
    max_over_actions,
)
from icrl_gym.envs.run_batch import RunBatch
from icrl_gym.envs.validation import (
    MAX_SCALE,
    as_float_array,
    check_distribution,
    check_finite,
    check_in_range,
    integer_problem,
    number_problem,
    plain,
)


class MDPKind(Choice):
    """The prior over MDP instances (:attr:`MDPSpec.kind`); its dynamics are :attr:`dynamics`."""

    RANDOM = "random"
    """Dirichlet transitions and uniform mean rewards (ICRL-TabularMDP-v0)."""
    DARK_ROOM = "dark_room"
    """A grid with a hidden goal (ICRL-DarkRoom-v0, :mod:`icrl_gym.envs.dark_room`)."""

    @property
    def dynamics(self) -> MDPDynamics:
        """The dynamics of this kind: its row of :data:`DYNAMICS`."""
        return DYNAMICS[self]


@dataclass(frozen=True)
class MDPSpec(DictConfig):
    """The prior over tabular MDP instances.

    ``kind="random"`` (ICRL-TabularMDP-v0): P_h(. | s, a) ~ Dirichlet(concentration * 1_S) per
    (h, s, a), R_h(s, a) ~ Unif[0, 1], Bernoulli rewards, start state 0 (or mu ~ Dirichlet(1) with
    ``random_start``).  ``kind="dark_room"`` (ICRL-DarkRoom-v0): a size x size grid, actions
    (up, down, left, right, stay), a goal cell drawn uniformly per instance, reward 1 on the goal,
    start in the centre, deterministic moves.
    """

    kind: MDPKind = MDPKind.RANDOM
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
        kind = MDPKind.lookup(self.kind)  # a word becomes its member (records and configs hold the words)
        if kind is None:
            problems.append(MDPKind.problem("kind", self.kind))
        object.__setattr__(self, "kind", kind)
        for name, low in (("num_states", 1), ("num_actions", 1), ("horizon", 1), ("episodes", 1), ("size", 0)):
            if (problem := integer_problem(name, getattr(self, name), low)) is not None:
                problems.append(problem)
        if (problem := number_problem("concentration", self.concentration, 0.0, True, MAX_SCALE)) is not None:
            problems.append(problem)
        else:  # a float, so numpy never sees an integer too large for int64 (10**30 would become an object array)
            object.__setattr__(self, "concentration", float(self.concentration))
        for name in ("random_start", "stationary"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not problems:
            problems = self.kind.dynamics.problems(self)
        if problems:
            raise ValueError("invalid MDP specification: " + "; ".join(problems))

    @property
    def is_stationary(self) -> bool:
        """Whether P_h and R_h are the same for every h (what an agent may pool its counts over)."""
        return self.kind.dynamics.always_stationary or self.stationary

    @property
    def total_steps(self) -> int:
        """T = K H."""
        return self.episodes * self.horizon

    def memory_bytes(self, batch_size: int) -> int:
        """Estimated peak memory of an :class:`MDPBatch` of ``batch_size`` instances drawn from the prior (bytes)."""
        return self.kind.dynamics.memory_bytes(self, batch_size)


class MDPDynamics(Protocol):
    """What a kind of prior (:class:`MDPKind`) defines: its checks, its memory, its instances and its rewards."""

    bernoulli_rewards: bool
    """Whether a reward is Bernoulli(R_h(s, a)) (else it is R_h(s, a) itself, deterministic)."""
    always_stationary: bool
    """Whether P_h and R_h never depend on h, whatever ``MDPSpec.stationary`` says."""

    def problems(self, spec: MDPSpec) -> list[str]:
        """What is wrong with the fields of ``spec`` for this kind (empty when nothing is)."""
        ...

    def memory_bytes(self, spec: MDPSpec, batch_size: int) -> int:
        """Estimated peak memory of ``batch_size`` instances drawn from ``spec`` and their solution (bytes)."""
        ...

    def draw(self, spec: MDPSpec, rng: np.random.Generator, n: int) -> MDPInstances:
        """``n`` instances drawn from the prior ``spec``."""
        ...


class DirichletDynamics:
    """The 'random' prior: P_h(. | s, a) ~ Dirichlet(c 1_S), R_h(s, a) ~ Unif[0, 1], Bernoulli rewards."""

    bernoulli_rewards = True
    always_stationary = False

    def problems(self, spec: MDPSpec) -> list[str]:
        """Every field is checked by the spec itself."""
        return []

    def memory_bytes(self, spec: MDPSpec, batch_size: int) -> int:
        """P (B, H_P, S, A, S) twice (the Dirichlet draw and its normalisation), R, Q* and V*."""
        B, S, A, H = batch_size, spec.num_states, spec.num_actions, spec.horizon
        hs = H if not spec.stationary else 1
        return 8 * B * (2 * hs * S * A * S + hs * S * A + 2 * H * S * A + (H + 1) * S + 3 * S)

    def draw(self, spec: MDPSpec, rng: np.random.Generator, n: int) -> DenseInstances:
        """P, R and mu (state 0, or mu ~ Dirichlet(1) with ``random_start``), in that order from ``rng``."""
        S, A = spec.num_states, spec.num_actions
        hs = 1 if spec.stationary else spec.horizon
        P = rng.dirichlet(np.full(S, spec.concentration), size=(n, hs, S, A))
        R = rng.uniform(0.0, 1.0, size=(n, hs, S, A))
        if spec.random_start:
            mu = rng.dirichlet(np.ones(S), size=n)
        else:
            mu = np.zeros((n, S))
            mu[:, 0] = 1.0
        return DenseInstances(P, R, mu)


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
        return DarkRoomInstances(spec.size, rng.integers(0, spec.num_states, size=n))


DYNAMICS: dict[MDPKind, MDPDynamics] = {
    MDPKind.RANDOM: DirichletDynamics(),
    MDPKind.DARK_ROOM: DarkRoomDynamics(),
}
"""The one dispatch on the kind of prior: kind -> its :class:`MDPDynamics`.  A kind's instances live
one layer down (:mod:`icrl_gym.envs.mdp_instances`), its environment one layer up (``dark_room.py``)."""


class MDPBatch(RunBatch[MDPSpec]):
    """B tabular MDP runs of K episodes of H steps advanced together.

    Attributes: ``state`` (B,) current states, ``h`` the step within the episode (0-based),
    ``k`` the episode (0-based), ``v_star`` (B,) the optimal value V*_1(mu) of every instance,
    ``q_star`` Q*_h(s, a) indexed like a (B, H, S, A) array (an :class:`InstanceTable` for DarkRoom),
    ``goal`` (B,) the goal cells of DarkRoom instances drawn from the prior (else None).
    """

    action_indices = "action indices"

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
        super().__init__(spec, batch_size, rng, f"{spec.kind} MDPs")
        batch_size = self.batch_size  # the checked integer
        self._dynamics = spec.kind.dynamics
        self.instances: MDPInstances = (
            self._dynamics.draw(spec, rng, batch_size)
            if instance is None
            else DenseInstances(**self._check_instance(instance))
        )
        """The B instances (dense, or the kind's compact form)."""
        self.goal = self.instances.goal
        self.q_star: np.ndarray | InstanceTable
        self.q_star, self.v_star = self.instances.solve(spec.horizon)
        self._rows = np.arange(batch_size)
        self.k = 0
        self.h = 0
        self.state = self._start_states()

    @property
    def P(self) -> np.ndarray:
        """Transitions P_h(s' | s, a), (B, H_P, S, A, S) (read-only for DarkRoom)."""
        return self.instances.P

    @property
    def R(self) -> np.ndarray:
        """Mean rewards R_h(s, a), (B, H_R, S, A)."""
        return self.instances.R

    @property
    def mu(self) -> np.ndarray:
        """Initial distributions, (B, S) (read-only for DarkRoom)."""
        return self.instances.mu

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
        return self.instances.start_states(self.rng.random((self.batch_size, 1)))

    @property
    def done(self) -> bool:
        """Whether all K episodes are over."""
        return self.k >= self.spec.episodes

    def _optimal_values(self, h: int, states: np.ndarray) -> np.ndarray:
        """V*_h(s) = max_a Q*_h(s, a) of every run at its state (B,)."""
        return max_over_actions(self.q_star[self._rows, h, states])

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
        mean = self.instances.mean_rewards(self._rows, self.h, self.state, a)
        u = self.rng.random(self.batch_size)
        reward = (u < mean).astype(np.float64) if self._dynamics.bernoulli_rewards else mean.copy()
        nxt = self.instances.next_states(self._rows, self.h, self.state, a, self.rng.random((self.batch_size, 1)))
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
