"""Gymnasium wrappers around :class:`MDPBatch`: one in-context run (K episodes of H steps) per episode.

Observation: a flat ``Box`` of size S + H, the one-hot current state followed by the one-hot step
h within the episode (so an agent knows both; ``obs[:S].argmax()``, ``obs[S:].argmax()``).  Action:
``Discrete(A)``.  The Gymnasium episode ends (``terminated=True``) after the K-th MDP episode.
``info`` carries ``regret`` (the step's share of the run's regret, summing exactly to
sum_k (V*_1(mu) - return of episode k)) and ``gap`` (V*_h(s) - Q*_h(s, a) of the action taken; see
:meth:`~icrl_gym.envs.mdp_core.MDPBatch.step`), ``v_star`` (optimal value V*_1(mu)),
``expected_reward`` R_h(s, a), the MDP
episode ``k`` and step ``h``, and at reset the instance (``P``, ``R``, ``mu``) for oracle experts.
Bayes regret of a run is K V* - sum of rewards.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.validation import check_integer, memory_limit
from icrl_gym.envs.vector import BatchVectorEnv, SingleRunEnv, check_env_memory, check_options
from icrl_gym.utils.names import check_keywords, parameter_names


def mdp_observation(spec: MDPSpec, state: np.ndarray, h: int) -> np.ndarray:
    """One-hot state and one-hot step: (B,) states -> (B, S + H) float32."""
    obs = np.zeros((state.shape[0], spec.num_states + spec.horizon), dtype=np.float32)
    obs[np.arange(state.shape[0]), state] = 1.0
    obs[:, spec.num_states + h] = 1.0
    return obs


def _instance_options(options: dict[str, Any] | None) -> dict[str, Any] | None:
    options = check_options(options)
    if not options:
        return None
    unknown = sorted(set(options) - {"P", "R", "mu"})
    if unknown or not {"P", "R", "mu"} <= set(options):
        raise ValueError(f"reset options must give P, R and mu (got {sorted(options)}; unknown {unknown})")
    return dict(options)


def reset_info(spec: MDPSpec, batch: MDPBatch, index: Any = slice(None)) -> dict[str, Any]:
    """What an agent's ``reset`` reads: V*, the instance (for the oracle), the sizes and the stationarity.

    ``"model"`` is the :class:`MDPSpec` as a dict (kind, Dirichlet ``concentration`` of the transition
    prior, ``stationary``, ``random_start``, sizes): the prior that PSRL assumes is read from it.
    """
    return {
        "v_star": batch.v_star[index],
        "P": batch.P[index],
        "R": batch.R[index],
        "mu": batch.mu[index],
        "num_states": spec.num_states,
        "num_actions": spec.num_actions,
        "horizon": spec.horizon,
        "episodes": spec.episodes,
        "stationary": spec.is_stationary,
        "model": spec.to_dict(),
    }


def _describe(batch: MDPBatch, last: tuple[np.ndarray, np.ndarray] | None) -> tuple[str, list[str]]:
    """The text render of an MDP batch: a header (episode, step) and one line per run (state, last action)."""
    spec = batch.spec
    header = f"{spec.kind} MDP, S={spec.num_states}, A={spec.num_actions}: " + (
        "finished" if batch.done else f"episode {batch.k + 1}/{spec.episodes}, step {batch.h + 1}/{spec.horizon}"
    )
    runs = []
    for b in range(batch.batch_size):
        moved = "" if last is None else f"; last action {int(last[0][b])}, reward {float(last[1][b]):+.3f}"
        runs.append(f"state {int(batch.state[b])}{moved}")
    return header, runs


class TabularMDPEnv(SingleRunEnv):
    """One tabular-MDP in-context run as a Gymnasium environment (a :class:`MDPBatch` of size one)."""

    _batch: MDPBatch | None
    describe = staticmethod(_describe)

    def __init__(
        self,
        spec: MDPSpec | None = None,
        *,
        max_memory_gib: float | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        """The prior ``spec`` (or ``MDPSpec(**kwargs)``); ``max_memory_gib`` raises the memory limit.

        ``render_mode="ansi"`` makes :meth:`render` return a text description of the current step.
        """
        if spec is None:
            check_keywords(MDPSpec, kwargs, type(self).__name__, also=parameter_names(TabularMDPEnv))
        self.mdp_spec = spec if spec is not None else MDPSpec(**kwargs)
        s, self.max_memory_gib = self.mdp_spec, max_memory_gib
        check_env_memory(
            s.memory_bytes(1), s.num_states + s.horizon, None, f"a {s.kind} MDP environment", max_memory_gib
        )
        self._init_spaces(
            spaces.Box(0.0, 1.0, shape=(s.num_states + s.horizon,), dtype=np.float32), s.num_actions, render_mode
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Draw a new MDP from the prior (or take P, R, mu from ``options``) and start its first episode."""
        super().reset(seed=seed)
        with memory_limit(self.max_memory_gib):
            self._batch = MDPBatch(self.mdp_spec, 1, self.np_random, _instance_options(options))
        self._last = None
        info = reset_info(self.mdp_spec, self._batch, 0)
        info["v_star"] = float(info["v_star"])
        return mdp_observation(self.mdp_spec, self._batch.state, self._batch.h)[0], info

    def step(self, action: Any):
        """Take one action; the run terminates after K episodes of H steps."""
        if self._batch is None:
            raise RuntimeError("call reset() before step()")
        if np.ndim(action) != 0:
            raise ValueError(f"expected a single action index, got an array of shape {np.shape(action)}")
        b = self._batch
        out = b.step(np.asarray([action]))
        self._last = (np.asarray([action]), out["reward"])
        info = {
            "regret": float(out["regret"][0]),
            "gap": float(out["gap"][0]),
            "expected_reward": float(out["expected_reward"][0]),
            "v_star": float(b.v_star[0]),
            "k": int(out["k"]),
            "h": int(out["h"]),
            "episode_end": bool(out["next_state"][0] < 0),
        }
        obs = mdp_observation(self.mdp_spec, b.state, b.h)[0]
        return obs, float(out["reward"][0]), b.done, False, info


class TabularMDPVectorEnv(BatchVectorEnv):
    """B tabular-MDP runs stepped as arrays; all end together and reset on the next step."""

    _batch: MDPBatch | None
    describe = staticmethod(_describe)

    def __init__(
        self,
        num_envs: int = 1,
        spec: MDPSpec | None = None,
        *,
        max_memory_gib: float | None = None,
        render_mode: str | None = None,
        autoreset_mode: Any = None,
        **kwargs: Any,
    ) -> None:
        """``num_envs`` runs of ``spec`` (or ``MDPSpec(**kwargs)``); the options as in :class:`BanditVectorEnv`."""
        num_envs = check_integer("num_envs", num_envs)
        if spec is None:
            check_keywords(MDPSpec, kwargs, type(self).__name__, also=parameter_names(TabularMDPVectorEnv))
        self.mdp_spec = spec if spec is not None else MDPSpec(**kwargs)
        s, self.max_memory_gib = self.mdp_spec, max_memory_gib
        what = f"a vector environment of {num_envs:,} {s.kind} MDP runs"
        check_env_memory(s.memory_bytes(num_envs), s.num_states + s.horizon, num_envs, what, max_memory_gib)
        observation = spaces.Box(0.0, 1.0, shape=(s.num_states + s.horizon,), dtype=np.float32)
        self._init_spaces(num_envs, observation, s.num_actions, render_mode, autoreset_mode)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Draw B new MDPs."""
        self._reseed(seed)
        with memory_limit(self.max_memory_gib):
            self._batch = MDPBatch(self.mdp_spec, self.num_envs, self.np_random, _instance_options(options))
        self._last = None
        return mdp_observation(self.mdp_spec, self._batch.state, 0), reset_info(self.mdp_spec, self._batch, slice(None))

    def step(self, actions: Any):
        """One action per run."""
        if self._batch is None:
            raise RuntimeError("call reset() before step()")
        if self._autoreset:
            return self._autoreset_step()
        b = self._batch
        out = b.step(actions)
        self._last = (np.asarray(actions).reshape(self.num_envs), out["reward"])
        self._autoreset = b.done
        info = {
            "regret": out["regret"],
            "gap": out["gap"],
            "expected_reward": out["expected_reward"],
            "v_star": b.v_star,
            "k": out["k"],
            "h": out["h"],
        }
        obs = mdp_observation(self.mdp_spec, b.state, b.h)
        return obs, out["reward"], np.full(self.num_envs, b.done), np.zeros(self.num_envs, dtype=bool), info
