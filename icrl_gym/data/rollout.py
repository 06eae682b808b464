"""The one rollout of the trainers: a batch of environments played for T steps by an action-choice function.

Every trainer that generates its own data (the generalists' expert and DAgger batches, the
fine-tuning runs) plays through :func:`play`; none steps an environment itself.  Per step t, in
this order (so that every generator is drawn from in one fixed order):

1. ``choose(t)`` returns the actions (B,): it reads the observation from the environment it closes
   over, reads an expert's labels, steps a model, draws exploration;
2. the environment steps (``env.step(actions)``, its own draws: rewards, transitions);
3. ``on_step(t, actions, outcome)`` sees the step (the environment's per-step outputs): the label
   hook, where experts, statistics and models are told of the outcome.

:class:`ModelPlay` is a model played online through its cache (the previous action and reward fed
in at each step), and :func:`epsilon_greedy` the uniform exploration of a behaviour policy; both
are the pieces a ``choose`` is usually made of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np
import torch

from icrl_gym.algorithm import logits_action
from icrl_gym.envs.mdp_core import MDPBatch
from icrl_gym.models.policy import EnvInfo, InContextPolicy

Choose = Callable[[int], np.ndarray]
"""The actions (B,) of step t."""
OnStep = Callable[[int, np.ndarray, dict[str, Any]], None]
"""Told of step t: the actions (B,) and the environment's outputs of the step (``reward`` and its others)."""


class SteppedBatch(Protocol):
    """B environments advanced together (a :class:`~icrl_gym.envs.bandit_core.BanditBatch`, an :class:`MDPBatch`)."""

    batch_size: int

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        """Take one action per run; the step's outputs, at least ``reward`` (B,)."""
        ...


@dataclass
class Played:
    """The runs of :func:`play`: actions and rewards (B, T), the MDP states, the other outputs kept."""

    actions: np.ndarray
    """(B, T) int64 actions a_t."""
    rewards: np.ndarray
    """(B, T) float64 rewards r_t."""
    states: np.ndarray | None = None
    """(B, T) int64 states s_t the actions were taken in (an :class:`MDPBatch`; None for bandits)."""
    kept: dict[str, np.ndarray] = field(default_factory=dict)
    """(B, T) float64 per-step outputs of the environment named by ``play``'s ``keep``."""


def play(
    env: SteppedBatch, steps: int, choose: Choose, on_step: OnStep | None = None, keep: Sequence[str] = ()
) -> Played:
    """Play ``steps`` steps of ``env``: ``choose`` acts, the environment steps, ``on_step`` sees it (module docstring).

    ``keep`` names per-step outputs of the environment recorded besides the reward (e.g. a bandit's
    ``expected_reward`` and ``best_expected_reward``, an MDP's ``gap``).
    """
    b = env.batch_size
    states = np.zeros((b, steps), np.int64) if isinstance(env, MDPBatch) else None
    out = Played(np.zeros((b, steps), np.int64), np.zeros((b, steps)), states, {k: np.zeros((b, steps)) for k in keep})
    for t in range(steps):
        if states is not None:
            states[:, t] = cast(MDPBatch, env).state
        actions = choose(t)
        outcome = env.step(actions)
        out.actions[:, t], out.rewards[:, t] = actions, outcome["reward"]
        for name, values in out.kept.items():
            values[:, t] = outcome[name]
        if on_step is not None:
            on_step(t, actions, outcome)
    return out


def epsilon_greedy(
    greedy: np.ndarray, epsilon: np.ndarray, num_actions: int, rng: np.random.Generator, lazy: bool = False
) -> np.ndarray:
    """Run b takes a uniform action instead of ``greedy[b]`` with probability ``epsilon[b]``.

    Draws ``rng.random(B)`` (who explores), then ``rng.integers(0, A, B)`` (what they take).
    ``lazy`` draws neither when no run has a positive epsilon, and not the actions when no run explores.
    """
    b = greedy.shape[0]
    if not lazy:
        return np.where(rng.random(b) < epsilon, rng.integers(0, num_actions, b), greedy)
    explore = rng.random(b) < epsilon if epsilon.any() else np.zeros(b, dtype=bool)
    return np.where(explore, rng.integers(0, num_actions, b), greedy) if explore.any() else greedy


class ModelPlay:
    """An in-context model played online through its cache, no gradient needed (e.g. to roll out a behaviour).

    Each step feeds the previous step's action and reward (:meth:`tell`) and the new observation to
    ``model.step``; the model plays on ``device``, by default the one its weights are on.
    """

    def __init__(
        self, model: InContextPolicy[Any], batch_size: int, env_info: EnvInfo, device: torch.device | None = None
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ModelPlay plays a torch model, got {type(model).__name__}")
        self.model = model
        self.device = next(model.parameters()).device if device is None else device
        self.cache = model.new_cache(batch_size, env_info, self.device)
        self._prev: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)

    def logits(self, observation: torch.Tensor | np.ndarray | None) -> torch.Tensor:
        """The logits (B, A) at the current step (``observation`` as the model's ``step`` takes it, or an array)."""
        if isinstance(observation, np.ndarray):
            observation = torch.as_tensor(observation, device=self.device)
        return self.model.step(self.cache, observation, *self._prev).logits  # type: ignore[arg-type]

    def greedy(self, observation: torch.Tensor | np.ndarray | None) -> np.ndarray:
        """The argmax actions (B,) at the current step."""
        return self.logits(observation).argmax(dim=1).cpu().numpy()

    def sample(
        self, observation: torch.Tensor | np.ndarray | None, temperature: float, rng: np.random.Generator
    ) -> np.ndarray:
        """Actions (B,) drawn from softmax(logits / temperature) (:func:`~icrl_gym.algorithm.logits_action`)."""
        return logits_action(self.logits(observation).double().cpu().numpy(), temperature, rng)

    def tell(self, actions: np.ndarray, rewards: np.ndarray) -> None:
        """The outcome of the current step, fed to the model with the next observation."""
        self._prev = (
            torch.as_tensor(actions, device=self.device),
            torch.as_tensor(rewards, dtype=torch.float32, device=self.device),
        )
