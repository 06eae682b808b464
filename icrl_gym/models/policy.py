"""The learned-policy contract: what every in-context model offers to the one rollout agent.

A pretrained in-context model is an algorithm ``Alg_theta(. | D_{t-1}, s_t)`` (Section 2, Eq. (2)).
Online it is played one step at a time through a cache of the history, so that step t costs at most
O(context) instead of re-reading the whole prefix.  Every model of :mod:`icrl_gym.models` (the
paper's bandit transformer, the MDP transformer, the Bernoulli and the linear generalists) implements
:class:`InContextPolicy`:

- ``new_cache(batch_size, env_info, device)``: an empty cache for B runs of the environment that
  ``env_info`` (:class:`EnvInfo`) describes; the sizes a model needs at every step (K, T, sigma, d)
  and whatever else it is told of the runs (per-run noise levels, stationarity, known moves) go
  into the cache, so ``step`` takes nothing but the step's data.  It is the only way to make a
  cache, with this one signature for every model: neither an agent nor a trainer writes into one;
- ``step(cache, observation, prev_action, prev_reward) -> PolicyOutput``: append the outcome of the
  previous step (None at the first step) and the new observation to the cache, and return the
  policy's logits at this step.

The agent side (``agents/learned``) is written once over this contract; a model adds only an
adapter from the agent's decoded observation to ``observation``.  The protocol is generic in the
model's cache type (``InContextPolicy[KVCache]``, ...), so that every model satisfies it as written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor

from icrl_gym.config import POSITIVE, POSITIVE_INT, Allowed, DictConfig, check_fields

REWARDS = ("bernoulli", "gaussian")
"""The reward distributions :attr:`EnvInfo.reward` names (a bandit spec's ``reward``)."""


class PolicyOutput(NamedTuple):
    """Read-out of a learned policy, from ``forward`` (B, T, A) or from one rollout ``step`` (B, A).

    ``Alg_theta(. | D_{t-1}, s_t) = softmax(logits)``; ``values`` regresses an expert's per-arm index
    (the bandit model's auxiliary head) and is None for a model without a value head.  A tuple, so
    ``logits, values = model(...)`` unpacks it.
    """

    logits: Tensor
    """Policy logits over the A actions."""
    values: Tensor | None
    """Per-action values of the auxiliary head, or None."""


@dataclass(frozen=True)
class EnvInfo:
    """What a learned policy is told about the environment of its runs before the first step.

    The field names are the environments' own (their reset ``info`` and spec): a bandit has
    ``num_actions`` arms of dimension ``dim`` over ``horizon`` = T steps with noise ``noise_std``; a
    tabular MDP has ``num_states``, ``num_actions``, ``horizon`` = H steps per episode and ``episodes``
    = K, so a run is T = K H steps (:attr:`steps`).  ``noise_std`` is None where the environment does
    not state it (a user's own bandit).  The fields after ``episodes`` say more of the runs, for the
    models that read it (each is ignored by the others): per-run values of a batch that mixes
    instances, whether an MDP is stationary, the moves its prior knows, a bandit's reward distribution.
    """

    num_actions: int
    """A: arms of a bandit, actions of an MDP."""
    horizon: int
    """T of a bandit; H (steps per episode) of an MDP."""
    dim: int | None = None
    """d, the dimension of a bandit's arms (None for an MDP)."""
    noise_std: float | None = None
    """sigma, the reward noise of a linear bandit, where the environment states it."""
    num_states: int | None = None
    """S of a tabular MDP (None for a bandit)."""
    episodes: int = 1
    """K, the episodes of an MDP run (1 for a bandit)."""
    run_noise_std: tuple[float, ...] | None = None
    """sigma of every run (B values, NaN: unknown) where the runs do not share one (instances that draw
    their own, or a training batch of mixed instances); it overrides ``noise_std`` (the linear generalist)."""
    run_dims: tuple[int, ...] | None = None
    """d of every run (B values, each <= ``dim``) of a batch that mixes dimensions, the arms zero-padded
    to ``dim`` (the linear generalist's training); None: every run has ``dim``."""
    stationary: bool = False
    """Whether an MDP's transitions and rewards are the same at every step h (its reset info's
    ``stationary``): the MDP generalist then pools its counts over h."""
    known_moves: tuple[tuple[int, ...], ...] | None = None
    """The successor (S rows of A states) of every (s, a) where the prior knows the moves for certain
    (a dark room's), or None: the MDP generalist starts from them as counts."""
    reward: str | None = None
    """A bandit's reward distribution, one of :data:`REWARDS`, where it matters to the model (None: the
    model's default; the Bernoulli generalist keeps grouped counts for 'bernoulli' and None, every key
    for 'gaussian')."""

    def __post_init__(self) -> None:
        rules = {name: POSITIVE_INT for name in ("num_actions", "horizon", "episodes", "dim", "num_states")}
        rules["noise_std"] = POSITIVE
        rules["reward"] = Allowed(choices=REWARDS)
        check_fields(self, {name: rule for name, rule in rules.items() if getattr(self, name) is not None})
        if self.run_noise_std is not None and not all(math.isnan(s) or s > 0 for s in self.run_noise_std):
            raise ValueError(f"EnvInfo.run_noise_std must be > 0 or NaN (unknown), got {self.run_noise_std}")
        if self.run_dims is not None and not all(1 <= d <= (self.dim or 0) for d in self.run_dims):
            raise ValueError(f"EnvInfo.run_dims must lie in [1, dim={self.dim}], got {self.run_dims}")
        if self.known_moves is not None:
            bad = len(self.known_moves) != self.num_states or any(
                len(row) != self.num_actions or not all(0 <= s < len(self.known_moves) for s in row)
                for row in self.known_moves
            )
            if bad:
                raise ValueError(
                    f"EnvInfo.known_moves must hold S={self.num_states} rows of A={self.num_actions} states in [0, S)"
                )

    @property
    def steps(self) -> int:
        """T = K H, the steps of one run (the horizon of a bandit)."""
        return self.horizon * self.episodes


@runtime_checkable
class PolicyCache(Protocol):
    """The history of B runs as a model keeps it between steps."""

    batch_size: int
    """B, the runs the cache holds."""

    def reset(self) -> None:
        """Empty the cache for new runs of the same environment, keeping its buffers."""


@runtime_checkable
class RewindableCache(Protocol):
    """A cache that can take its last step back, as every shipped model's can.

    It lets an agent answer a second observation of one step (:mod:`agents.learned.rollout`)
    without holding the step twice.  ``mark()`` is called before a ``step`` and returns what
    ``rewind(mark)`` needs to bring the cache back, exactly, to where it was; both are cheap next to
    a step (no copy of the history).
    """

    def mark(self) -> Any:
        """The cache before the next step."""
        ...

    def rewind(self, mark: Any) -> None:
        """Take back the step made since ``mark``, exactly."""
        ...


CacheT = TypeVar("CacheT", bound=PolicyCache)
"""A model's own cache type."""


@runtime_checkable
class InContextPolicy(Protocol[CacheT]):
    """An in-context model played online, one step at a time, through its cache (module docstring).

    Generic in the cache type the model makes and steps (``InContextPolicy[Any]`` takes any model).
    """

    @property
    def config(self) -> DictConfig:
        """The model's architecture (its checkpoint record's ``model``)."""
        ...

    def new_cache(self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None) -> CacheT:
        """An empty cache for ``batch_size`` runs of the environment ``env_info`` (default: the model's device)."""
        ...

    def step(
        self, cache: CacheT, observation: Tensor, prev_action: Tensor | None, prev_reward: Tensor | None
    ) -> PolicyOutput:
        """Append the previous step's outcome (None at step 0) and ``observation``; the logits (B, A) now."""
        ...


def check_env_sizes(env_info: EnvInfo, fixed: dict[str, int], max_steps: int, model: str) -> None:
    """Refuse an environment whose sizes are not those of a fixed-size model (ValueError naming every field).

    ``fixed`` maps :class:`EnvInfo` fields to the model's values; a run may be shorter than the
    model's ``max_steps`` (T = K H) but not longer.
    """
    problems = [
        f"{name}={getattr(env_info, name)} (the model has {name}={value})"
        for name, value in fixed.items()
        if getattr(env_info, name) != value
    ]
    if env_info.steps > max_steps:
        problems.append(f"{env_info.steps} steps per run (the model holds at most {max_steps})")
    if problems:
        raise ValueError(f"this {model} model cannot play the environment: " + "; ".join(problems))
