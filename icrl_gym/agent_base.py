"""The part of the algorithm contract both kinds share: :class:`Agent` and the helpers algorithms use.

:mod:`icrl_gym.algorithm` describes the whole contract; :class:`~icrl_gym.bandit_agent.BanditAgent`
and :class:`~icrl_gym.mdp_agent.MDPAgent` derive from :class:`Agent`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np

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


def maximisers(values: np.ndarray, tolerance: float = 1e-12) -> np.ndarray:
    """(N, A) values -> (N, A) bool, the entries within ``tolerance`` of their row's largest (exact ties at 1e-12)."""
    return values >= values.max(axis=1, keepdims=True) - tolerance


def uniform_over_maximisers(values: np.ndarray, tolerance: float = 1e-12) -> np.ndarray:
    """(N, A) values -> the policy uniform over each row's maximisers (within ``tolerance``: exact ties)."""
    top = maximisers(values, tolerance)
    return top / top.sum(axis=1, keepdims=True)


def first_argmax(values: np.ndarray, tolerance: float = 1e-12) -> np.ndarray:
    """(N, A) values -> (N,) the index of each row's first maximiser (within ``tolerance``).

    Every index agent's argmax breaks its ties so, and a learned policy's greedy play too (:func:`logits_action`).
    """
    return maximisers(values, tolerance).argmax(axis=1)


TIE_TOLERANCE = 1e-4
"""Logits this close to the largest are a tie in a greedy action (a probability ratio of 1.0001 at temperature 1)."""


def logits_action(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """The action of a learned policy from its logits (B, A): a draw from softmax(logits / temperature).

    Temperature 1 draws from the policy itself, a lower one sharpens it towards the argmax, and
    temperature 0 is the argmax.  At temperature 0 logits within :data:`TIE_TOLERANCE` of the largest are a tie,
    which goes to the first of them, as every index agent's argmax breaks its exact ties: a network whose teacher
    tied two arms (an arm-symmetric one at the first step, say) returns them equal up to float rounding, and that
    rounding, not the arms' order, would otherwise choose.
    """
    if temperature == 0.0:
        return first_argmax(logits, TIE_TOLERANCE)
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

    def __repr__(self) -> str:
        """``LinUCB(temperature=0.0, alpha=2.0, lam=1.0)``: the class and :meth:`config` but its registry name."""
        try:
            fields = {k: v for k, v in self.config().items() if k != "name"}
        except Exception:  # a repr must not raise (debuggers and logs call it on half-built objects)
            return object.__repr__(self)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"

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
