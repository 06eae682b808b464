"""What the bandit and MDP environments share: spaces and the text render; vector ones, seeding and the autoreset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from icrl_gym.envs.validation import check_integer, check_memory


def check_env_memory(batch_bytes: int, obs_size: int, num_envs: int | None, what: str, max_memory_gib: float | None):
    """Refuse an environment whose batch (``batch_bytes``) and observation spaces would not fit the memory limit.

    A float32 ``Box`` of n entries keeps low, high and two boolean masks (10 n bytes); a vector
    environment (``num_envs`` given) has the single space and the batched one of num_envs n entries.
    """
    copies = 1 if num_envs is None else num_envs + 1
    check_memory(batch_bytes + 10 * obs_size * copies, what, max_memory_gib)


def check_options(options: Any) -> dict[str, Any]:
    """The ``options`` of ``reset`` as a dict (None: empty); a ``TypeError`` for anything but a mapping."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"reset options must be a dict, got {type(options).__name__} {options!r}")
    return dict(options)


RENDER_MODES = ["ansi"]
"""The render modes of every environment: ``"ansi"``, a text description of the current step from ``render()``."""

RENDER_FPS = 4
"""Frames per second at which the text frames are meant to be shown (Gymnasium's checker asks for one)."""

RENDER_RUNS = 8
"""Runs of a vector environment that its text render lists (the rest are counted)."""


VECTOR_OPTIONS = ("max_memory_gib", "render_mode", "autoreset_mode")
"""The keywords every vector environment takes besides its model's fields."""


def vector_options(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` split into the vector options (:data:`VECTOR_OPTIONS`) and the fields of the environment's model."""
    options = {key: kwargs[key] for key in VECTOR_OPTIONS if key in kwargs}
    return options, {key: value for key, value in kwargs.items() if key not in options}


def check_render_mode(render_mode: Any) -> str | None:
    """``render_mode`` when it is None or one of :data:`RENDER_MODES`; a ``ValueError`` naming it otherwise."""
    if render_mode is None or (isinstance(render_mode, str) and render_mode in RENDER_MODES):
        return render_mode
    raise ValueError(
        f"render_mode must be None or 'ansi' (render() then returns a text description of the current step), "
        f"got {render_mode!r}"
    )


def check_autoreset_mode(autoreset_mode: Any) -> AutoresetMode:
    """The autoreset mode Gymnasium passes (an ``AutoresetMode`` or its value); only NEXT_STEP is implemented.

    The runs of a batch have equal length and end together, so all of them reset on the ``step``
    after the last one (``AutoresetMode.NEXT_STEP``); SAME_STEP and DISABLED are refused.
    """
    if autoreset_mode is None:
        return AutoresetMode.NEXT_STEP
    try:
        mode = AutoresetMode(autoreset_mode)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in AutoresetMode)
        raise ValueError(f"autoreset_mode must be an AutoresetMode ({allowed}), got {autoreset_mode!r}") from None
    if mode is not AutoresetMode.NEXT_STEP:
        raise ValueError(
            f"autoreset_mode={mode} is not supported: these vector environments end all runs together and reset "
            f"them on the next step() (AutoresetMode.NEXT_STEP); pass that mode or leave autoreset_mode out"
        )
    return mode


def render_text(render_mode: str | None, header: str, runs: list[str], numbered: bool) -> str:
    """The ``"ansi"`` render: ``header`` and one line per run (the first :data:`RENDER_RUNS` when ``numbered``).

    Without a render mode ``render()`` has nothing to return: a ``RuntimeError`` says how to ask for one.
    """
    if render_mode is None:
        raise RuntimeError(
            "render() needs a render mode: create the environment with render_mode='ansi' "
            "(gym.make(id, render_mode='ansi')) to get a text description of the current step"
        )
    if not numbered:
        return "\n".join([header, *runs]) + "\n"
    lines = [f"run {b}: {text}" for b, text in enumerate(runs[:RENDER_RUNS])]
    if len(runs) > RENDER_RUNS:
        lines.append(f"... and {len(runs) - RENDER_RUNS:,} more runs")
    return "\n".join([header, *lines]) + "\n"


class TextRender:
    """``render()`` of an environment over a batch core: the core's ``describe(batch, last)`` as text.

    ``render_mode="ansi"`` makes it a header (the step) and one line per run (its last action and reward);
    a vector environment numbers its runs.
    """

    render_mode: str | None
    numbered = False
    _batch: Any
    _last: tuple[np.ndarray, np.ndarray] | None

    @staticmethod
    def describe(batch: Any, last: tuple[np.ndarray, np.ndarray] | None) -> tuple[str, list[str]]:
        """The header and the per-run lines of ``batch`` after the actions and rewards ``last``."""
        raise NotImplementedError

    def render(self) -> str:
        """With ``render_mode="ansi"``: the current step of every run as text (:meth:`describe`)."""
        if self._batch is None:
            raise RuntimeError("call reset() before render()")
        return render_text(self.render_mode, *self.describe(self._batch, self._last), numbered=self.numbered)


class SingleRunEnv(TextRender, gym.Env):
    """One run of a batch core (a batch of one) as a Gymnasium environment."""

    metadata: dict[str, Any] = {"render_modes": RENDER_MODES, "render_fps": RENDER_FPS}

    def _init_spaces(self, observation: spaces.Box, num_actions: int, render_mode: str | None) -> None:
        """Observations ``observation``, ``Discrete(num_actions)`` actions, ``render_mode`` checked; no batch yet."""
        self.render_mode = check_render_mode(render_mode)
        self.observation_space = observation
        self.action_space = spaces.Discrete(num_actions)
        self._batch = None
        self._last = None


class BatchVectorEnv(TextRender, VectorEnv):  # type: ignore[misc]  # VectorEnv.render returns a tuple of frames
    """B runs of equal length stepped as arrays: they end together and all reset on the next ``step``."""

    numbered = True
    metadata: dict[str, Any] = {
        "render_modes": RENDER_MODES,
        "render_fps": RENDER_FPS,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def _init_spaces(
        self,
        num_envs: int,
        observation: spaces.Box,
        num_actions: int,
        render_mode: str | None = None,
        autoreset_mode: Any = None,
    ) -> None:
        """B runs with observations ``observation`` and ``Discrete(num_actions)`` actions; no batch yet.

        ``render_mode`` and ``autoreset_mode`` are the arguments ``gym.make_vec`` passes (checked here).
        """
        self.render_mode = check_render_mode(render_mode)
        self.autoreset_mode = check_autoreset_mode(autoreset_mode)
        self.num_envs = check_integer("num_envs", num_envs)
        self.single_observation_space = observation
        self.single_action_space = spaces.Discrete(num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._autoreset = False
        self._batch = None
        self._last = None

    def _reseed(self, seed: int | None) -> None:
        """Reseed the generator of new instances when ``seed`` is given; a new batch clears the autoreset."""
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        self._autoreset = False

    def _autoreset_step(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The step after the runs ended: a reset to new instances, zero rewards, nothing terminated."""
        obs, info = self.reset()
        zeros = np.zeros(self.num_envs, dtype=bool)
        return obs, np.zeros(self.num_envs), zeros, zeros.copy(), info
