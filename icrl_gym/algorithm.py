"""The algorithm contract: the one interface every bandit and every tabular-MDP algorithm implements.

:class:`Agent` owns everything the two kinds share: the generator, the batch of B runs (a single
run is a batch of one, and a single environment's ``int`` actions and (A,) policies are unwrapped
from it), ``reset(info)``, ``act(obs)``, ``policy(obs)``, ``update(action, reward)`` and
``config()``.  The algorithms themselves live in ``agents/`` and are built by name through
:mod:`icrl_gym.registry`; nothing here knows any of them.  A plain Gymnasium loop drives either kind::

    obs, info = env.reset(seed=0)
    agent.reset(info)
    for _ in range(T):  # for an MDP: T = K H steps, or until terminated
        a = agent.act(obs)
        obs, r, terminated, truncated, info = env.step(a)
        agent.update(a, r)

``info`` is what the environment's ``reset`` returned: a single env gives B = 1, a vector env
B = num_envs; ``info["model"]`` (the environment's spec as a dict) is read once, by
:func:`~icrl_gym.envs.env_model.read_env_model`, and kept typed as ``env_model``.  The
two kinds differ only in how an observation is decoded and in the batched hooks a subclass implements.

Bandits
-------
An algorithm (Section 2 of the paper) maps the history D_{t-1} and the current action set
A_t to a distribution over arms.  :class:`BanditAgent` decodes an observation to the action sets
(B, A, d) and holds the history of B independent runs as incremental statistics.  ``policy(obs)``
is Alg(. | D_{t-1}, A_t), shape (A,) or (B, A), in closed form where the algorithm has one, by
Monte-Carlo for Thompson sampling.  Collectors skip the decoding with ``act_batch``,
``policy_batch`` and ``update_batch`` on (B, A, d) arrays.  Subclasses implement ``_reset``,
``_policy`` and ``_update``; ``_act`` defaults to sampling from ``_policy`` and is overridden by
deterministic (argmax) algorithms.  ``reset`` also takes the fields ``batch_size``, ``dim``,
``num_actions``, ``horizon``, ``noise_std`` and ``w_star`` as keywords (they replace those of
``info``; an algorithm reads those it uses), and
``num_arms=K`` for a K-armed bandit (arms e_1..e_K, d = A = K), so that a bandit with no
environment is a plain loop::

    agent.reset(num_arms=5, horizon=200)
    for t in range(200):
        arm = agent.act()              # no observation: the arms are e_1..e_5
        agent.update(arm, reward_of(arm))

and a linear bandit takes its (A, d) arms at every step: ``agent.act(arms)``.

Tabular MDPs (Section 4.3)
--------------------------------------------
:class:`MDPAgent` decodes an observation (the one-hot state followed by the one-hot step h) to
(states (B,), h); a transition (h, s, a, r, s') is complete when the next observation arrives (or
the episode ends, after step H, where the paper's counts record no next state).  The batched core
works on arrays: ``act_batch(states, h)``, ``policy_batch(states, h)`` and
``update_batch(states, h, actions, rewards, next_states)`` with ``next_states = -1`` after step H.
Subclasses implement ``_reset``, ``_begin_episode`` (called at h = 0, e.g. to re-plan) and the
per-step hooks.  ``episode`` counts the episodes started.

Validation
----------
Every input is checked here, once for all algorithms, by the shared validators of
:mod:`icrl_gym.envs.validation`: the sizes and the instance read at ``reset``; observations (finite
action sets of shape (A, d); a one-hot state followed by a one-hot step); the actions fed back
(integer indices in [0, A)); the rewards (finite, and 0 or 1 or inside [0, 1] where the model says
so: ``binary_rewards``, ``reward_bounds``, MDP rewards lie in [0, 1]); the batched arrays of
``act_batch``, ``policy_batch`` and ``update_batch``; and, before anything is allocated, the memory
the statistics of B runs will take (``_memory_bytes``, refused above the limit: the attribute
``max_memory_gib``, else the environment variable ``ICRL_GYM_MAX_MEMORY_GIB``).  A bad input raises
``ValueError`` or ``TypeError`` naming it, and leaves the statistics untouched; a policy is never
passed on with a NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np

from icrl_gym.envs.bandit_core import BanditArms
from icrl_gym.envs.env_model import EnvModel, read_env_model
from icrl_gym.envs.validation import (
    MAX_INPUT,
    as_float_array,
    check_finite,
    check_index_batch,
    check_integer,
    check_memory,
    plain,
)


def child_rng(rng: np.random.Generator) -> np.random.Generator:
    """A generator seeded from ``rng``: agents built from others stay reproducible under one seed."""
    return np.random.default_rng(rng.integers(2**63))


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw one index per row of ``probs`` (B, A) by inverse-CDF sampling."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random((probs.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), probs.shape[1] - 1)


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """``softmax(z)`` of every row of ``logits`` (B, A): ``exp(z - max z) / sum exp(z - max z)``."""
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def logits_action(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """The action of a learned policy from its logits (B, A): a draw from softmax(logits / temperature).

    Temperature 1 draws from the policy itself, a lower one sharpens it towards the argmax, and
    temperature 0 is the argmax.
    """
    if temperature == 0.0:
        return logits.argmax(axis=1)
    return sample_categorical(softmax_rows(logits if temperature == 1.0 else logits / temperature), rng)


def one_hot(index: np.ndarray, num_classes: int) -> np.ndarray:
    """(B,) integer indices -> (B, num_classes) one-hot float array."""
    out = np.zeros((index.shape[0], num_classes))
    out[np.arange(index.shape[0]), index] = 1.0
    return out


def resolve_horizon(info: Mapping[str, Any], default: int | None = None, agent: str = "the agent") -> int:
    """The horizon T of the runs an agent is reset for: the one resolver every agent uses.

    Precedence, first found wins: the ``horizon`` keyword of ``reset`` (merged into ``info``) or
    the reset info's own ``horizon``; the environment's model ``info["model"]["horizon"]``; the
    agent's constructor ``default``.  The environment states the truth about its own runs, so a
    constructor value is only a fallback for a bandit without an environment.  T must be a positive
    integer (``2.7`` is refused, never truncated); none at all is a ``ValueError`` naming the ways to
    give one.
    """
    given = _reset_horizon(info)
    if given is not None:
        return given
    model = read_env_model(info)
    if model is not None:  # the spec has checked it
        return model.spec.horizon
    if default is None:
        raise ValueError(
            f"{agent} needs the horizon T: reset with the environment's info, or reset(..., horizon=T), "
            "or give horizon= to its constructor"
        )
    return check_integer("horizon", default)


def _reset_horizon(info: Mapping[str, Any]) -> int | None:
    """The horizon the reset itself gives (its keyword or the info's own ``horizon``), checked; None without one."""
    value = info.get("horizon")
    return None if value is None else check_integer("horizon (from reset)", value)


ObsT = TypeVar("ObsT")
"""A decoded observation: the action sets (B, A, d) of a bandit, (states (B,), h) of an MDP."""


class Agent(Generic[ObsT]):
    """Base class of all algorithms, bandit and MDP (batched; a single run is a batch of one)."""

    name = "agent"
    deterministic = False
    """True when ``act`` is a deterministic function of the history (argmax algorithms)."""
    reset_fields: tuple[str, ...] = ()
    """Fields of the reset ``info`` that ``reset`` also accepts as keywords."""
    reward_bounds: tuple[float, float] | None = None
    """The rewards the algorithm's model admits, [low, high] (None: any finite reward)."""
    binary_rewards = False
    """True when the algorithm's model admits only the rewards 0 and 1 (Beta-Bernoulli algorithms)."""
    max_memory_gib: float | None = None
    """Memory limit of the statistics checked at reset (None: ``$ICRL_GYM_MAX_MEMORY_GIB`` or the default)."""
    action_kind = "action indices"
    """How the actions read in an error message."""
    input_bound = MAX_INPUT
    """Largest magnitude of an observation entry or a reward the algorithm computes with safely."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.batch_size = 0
        self.num_actions = 0
        self.env_model: EnvModel | None = None
        """The environment's model (``info["model"]`` at reset, typed: its spec and per-instance rows), or None.
        Bayesian algorithms read their noise level and prior from it."""
        self.reset_info: dict[str, Any] = {}
        """The reset ``info`` merged with the keywords of the last ``reset`` (what :func:`resolve_horizon` reads)."""
        self._single = False
        self._last: ObsT | None = None

    # ------------------------------------------------------------------ public API
    def reset(
        self, info: Mapping[str, Any] | None = None, rng: np.random.Generator | None = None, **fields: Any
    ) -> None:
        """Start new runs described by the environment's reset ``info``; keyword ``fields`` replace its entries."""
        unknown = sorted(set(fields) - set(self.reset_fields))
        if unknown:
            raise TypeError(f"{type(self).__name__}.reset() takes the fields {self.reset_fields}, got {unknown}")
        if info is not None and not isinstance(info, Mapping):
            raise TypeError(f"{type(self).__name__}.reset() takes the environment's reset info (a dict), got {info!r}")
        merged = {**(info or {}), **{k: v for k, v in fields.items() if v is not None}}
        if rng is not None:
            self.rng = rng
        _reset_horizon(merged)  # the reset's own T first, as resolve_horizon reads it, then the environment's model
        self.env_model = read_env_model(merged)
        self.reset_info = merged
        self._last = None
        self._start(merged)

    def act(self, obs: Any = None) -> Any:
        """An action for every run: an ``int`` for a single run, else a (B,) array.

        ``obs`` may be left out where the observation is implied (a K-armed bandit's arms e_1..e_K).
        """
        observation = self._read(obs)
        self._observe(observation)
        actions = self._act_on(observation)
        self._last = observation
        return int(actions[0]) if self._single else actions

    def policy(self, obs: Any = None) -> np.ndarray:
        """Action probabilities Alg(. | D_{t-1}, s_t): (A,) for a single run, else (B, A)."""
        observation = self._read(obs)
        self._observe(observation)
        probs = self._checked_policy(self._policy_on(observation))
        return probs[0] if self._single else probs

    def update(self, action: Any, reward: Any, obs: Any = None) -> None:
        """Feed back the action taken and the reward; ``obs`` (where it was taken) defaults to the last one acted on."""
        observation = self._last if obs is None else self._read(obs)
        if observation is None:
            raise RuntimeError("update() needs the observation acted on: call act(obs) first or pass obs")
        rewards = as_float_array("reward", reward).reshape(-1)
        if np.size(action) != self.batch_size or rewards.shape != (self.batch_size,):
            raise ValueError(
                f"update expects {self.batch_size} actions and rewards, "
                f"got shapes {np.shape(action)} and {np.shape(reward)}"
            )
        actions, rewards = self._check_feedback(np.reshape(action, -1), rewards)
        self._last = None
        self._record(observation, actions, rewards)

    def config(self) -> dict[str, Any]:
        """The hyper-parameters that define this algorithm (recorded with every artefact)."""
        return {"name": self.name}

    def trajectory_components(self) -> list[tuple[float, Agent[Any]]]:
        """(weight, algorithm) pairs of a trajectory-level mixture, whose runs each follow one component.

        A plain algorithm is its own single component: [(1.0, self)].
        """
        return [(1.0, self)]

    # ------------------------------------------------------------------ helpers
    def _read(self, obs: Any) -> ObsT:
        if self.batch_size == 0:
            raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()")
        return self._decode(self._implied_observation() if obs is None else obs)

    def _implied_observation(self) -> Any:
        """The observation ``act()`` / ``policy()`` use when given none (none by default: an error)."""
        raise TypeError(f"{type(self).__name__}.act() needs the observation (the environment's obs)")

    def _check_runs(self, runs: int) -> None:
        if runs != self.batch_size:
            raise ValueError(f"observation holds {runs} runs but the agent was reset for {self.batch_size}")

    def _check_feedback(self, actions: Any, rewards: Any) -> tuple[np.ndarray, np.ndarray]:
        """Actions (B,) as integer indices in [0, A) and rewards (B,) finite and admitted by the model.

        The one check of every outcome fed back, through ``update`` or the batched ``update_batch``.
        """
        actions = check_index_batch(actions, self.batch_size, self.num_actions, "actions", self.action_kind)
        values = as_float_array("rewards", rewards)
        if values.shape != (self.batch_size,):
            raise ValueError(f"expected rewards of shape ({self.batch_size},), got shape {values.shape}")
        check_finite("rewards", values, self.input_bound)
        if self.binary_rewards and np.any((values != 0) & (values != 1)):
            bad = values[(values != 0) & (values != 1)][0]
            raise ValueError(f"rewards must be 0 or 1 for {self.name} (a Bernoulli-reward model), got {plain(bad)!r}")
        if self.reward_bounds is not None:
            low, high = self.reward_bounds
            if np.any((values < low) | (values > high)):
                bad = values[(values < low) | (values > high)][0]
                raise ValueError(f"rewards must lie in [{low:g}, {high:g}] for {self.name}, got {plain(bad)!r}")
        return actions, np.asarray(rewards) if isinstance(rewards, np.ndarray) else values

    def _checked_policy(self, probs: np.ndarray) -> np.ndarray:
        """Refuse to pass on a policy with a NaN or an infinity (a numerical failure is never silent)."""
        if not np.all(np.isfinite(probs)):
            row = int(np.argmin(np.isfinite(probs).all(axis=-1)))
            raise ValueError(f"{self.name} computed a non-finite policy for run {row}: {probs[row].tolist()}")
        return probs

    def _memory_bytes(self) -> int:
        """Estimated memory of the statistics of ``batch_size`` runs (bytes), checked at reset before allocating."""
        return 0

    def _check_memory(self) -> None:
        """Refuse runs whose statistics would exceed the memory limit (see :attr:`max_memory_gib`)."""
        check_memory(self._memory_bytes(), f"{self.name} for a batch of {self.batch_size:,}", self.max_memory_gib)

    # ------------------------------------------------------------------ what a kind of algorithm defines
    def _start(self, info: dict[str, Any]) -> None:
        """Size the runs from the (merged) reset ``info``, set ``_single`` and start the statistics."""
        raise NotImplementedError

    def _decode(self, obs: Any) -> ObsT:
        """An observation (single or batched) in the form the batched hooks take."""
        raise NotImplementedError

    def _observe(self, observation: ObsT) -> None:
        """What seeing a new observation implies before acting on it (nothing, for a bandit)."""

    def _act_on(self, observation: ObsT) -> np.ndarray:
        """(B,) actions at a decoded observation."""
        raise NotImplementedError

    def _policy_on(self, observation: ObsT) -> np.ndarray:
        """(B, A) action probabilities at a decoded observation."""
        raise NotImplementedError

    def _record(self, observation: ObsT, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add the outcome (actions (B,), rewards (B,)) of acting at ``observation``."""
        raise NotImplementedError


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
