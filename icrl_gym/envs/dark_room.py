"""ICRL-DarkRoom-v0: the standard in-context RL grid task, as a tabular MDP instance family.

The environment and its prior's spec live here; the dark room's dynamics (:class:`DarkRoomDynamics`,
the row of ``MDPKind.DARK_ROOM`` in :data:`~icrl_gym.envs.mdp_core.DYNAMICS`) one layer down in
:mod:`icrl_gym.envs.mdp_core`, and its instances, stored by their goal cell
(:class:`~icrl_gym.envs.mdp_instances.DarkRoomInstances`), at the bottom in
:mod:`icrl_gym.envs.mdp_instances`; both are re-exported here.
"""

from __future__ import annotations

from typing import Any

from icrl_gym.envs.mdp_core import DarkRoomDynamics, MDPKind, MDPSpec
from icrl_gym.envs.mdp_env import TabularMDPEnv, TabularMDPVectorEnv
from icrl_gym.envs.mdp_instances import (
    DARK_ROOM_MOVES,
    DarkRoomInstances,
    dark_room_successors,
    dark_room_transitions,
)
from icrl_gym.envs.validation import check_integer
from icrl_gym.utils.names import check_keywords, parameter_names

__all__ = [
    "DARK_ROOM_MOVES",
    "DarkRoomDynamics",
    "DarkRoomEnv",
    "DarkRoomInstances",
    "DarkRoomVectorEnv",
    "dark_room_spec",
    "dark_room_successors",
    "dark_room_transitions",
]


def dark_room_spec(size: int = 10, horizon: int = 100, episodes: int = 10) -> MDPSpec:
    """The DarkRoom prior (a size x size room, horizon 100 by default)."""
    size = check_integer("size", size, low=2)
    return MDPSpec(
        kind=MDPKind.DARK_ROOM, num_states=size * size, num_actions=5, horizon=horizon, episodes=episodes, size=size
    )


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
    size (>= 2), horizon, episodes (integers >= 1); any other keyword is refused with the closest of
    these named.  ``max_memory_gib`` raises the memory limit
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
        **unknown: Any,
    ) -> None:
        check_keywords(dark_room_spec, unknown, type(self).__name__, also=parameter_names(type(self)))
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
        **unknown: Any,
    ) -> None:
        check_keywords(dark_room_spec, unknown, type(self).__name__, also=parameter_names(type(self)))
        spec = dark_room_spec(size, horizon, episodes)
        super().__init__(
            num_envs, spec, max_memory_gib=max_memory_gib, render_mode=render_mode, autoreset_mode=autoreset_mode
        )
