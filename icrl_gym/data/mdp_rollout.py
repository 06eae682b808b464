"""Run MDP algorithms on fresh instances: trajectories and Bayes regret per episode.

:func:`rollout_mdp` is the collection loop of :mod:`icrl_gym.data.pipeline` on an
:class:`MDPRecorder`; batches follow the common-random-numbers convention of
:mod:`icrl_gym.data.crn` (instances and noise from ``[seed, i]``, the algorithm from
``[seed, i, 1]``), so every algorithm under one seed meets the same MDPs and noise.  The regret
of episode k is V*_1(mu) - (return of episode k); summed over the K episodes it is the run's
Bayes regret K V* - sum of rewards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from icrl_gym.algorithm import BanditAgent, MDPAgent
from icrl_gym.data.batch_recorder import BatchRecorder, RecordedRuns
from icrl_gym.data.crn import CRNBatch, crn_batches
from icrl_gym.data.labels import AgentSpec, Labelling, LabelMode
from icrl_gym.data.pipeline import Step, run_collection
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.mdp_env import reset_info


@dataclass(kw_only=True)
class MDPRollouts(RecordedRuns):
    """States, actions, rewards (N, T), the optimal values (N,) and the spec of N runs.

    With labels (pretraining data): ``labels`` (N, T) -- the action taken ("ad") or the optimal
    action argmax_a Q*_h(s, a) of the instance ("dpt") -- and optionally ``label_probs`` (N, T, A):
    the context algorithm's action distribution ("ad") or the posterior P(a* = a | D_{t-1}) at
    (s_t, h_t) of a Bayesian ``posterior`` ("dpt", the Rao-Blackwellised DPT target).
    """

    states: np.ndarray
    """(N, T) states s_t."""
    v_star: np.ndarray
    """(N,) optimal values V*_1(mu) of the instances."""
    spec: MDPSpec
    """The prior the instances were drawn from."""

    @property
    def episode_returns(self) -> np.ndarray:
        """Return of every episode, (N, K)."""
        return self.rewards.reshape(self.rewards.shape[0], self.spec.episodes, self.spec.horizon).sum(axis=2)

    @property
    def episode_regret(self) -> np.ndarray:
        """V* - return of every episode, (N, K)."""
        return self.v_star[:, None] - self.episode_returns


class MDPRecorder(BatchRecorder[MDPBatch, MDPRollouts]):
    """The MDP side of :func:`~icrl_gym.data.pipeline.run_collection`: instances, :class:`MDPRollouts`."""

    spec: MDPSpec
    default_batch_size = 1000

    def __init__(self, spec: MDPSpec, num_runs: int) -> None:
        T = spec.total_steps
        self.spec, self.num_steps, self.num_actions = spec, T, spec.num_actions
        self.data = MDPRollouts(
            states=np.zeros((num_runs, T), np.int16),
            actions=np.zeros((num_runs, T), np.int16),
            rewards=np.zeros((num_runs, T), np.float32),
            v_star=np.zeros(num_runs),
            spec=spec,
        )
        self._rows = slice(0, 0)
        self._batch = None
        self._info: dict[str, Any] = {}
        self._obs: tuple[np.ndarray, int] = (np.zeros(0, np.int64), 0)

    def begin(self, batch: CRNBatch) -> None:
        """Draw the batch's MDPs from its environment generator; records V*_1(mu)."""
        self._rows, self._batch = batch.rows, MDPBatch(self.spec, batch.size, batch.env_rng)
        self._info = reset_info(self.spec, self._batch)
        self.data.v_star[batch.rows] = self._batch.v_star

    def reset(self, agent: BanditAgent | MDPAgent, rng: np.random.Generator) -> None:
        """Reset an MDP algorithm on the batch with the environment's reset info."""
        if not isinstance(agent, MDPAgent):
            raise TypeError(f"an MDP prior needs MDP algorithms, got {type(agent).__name__}")
        agent.reset(self._info, rng=rng)

    def observe(self, t: int) -> tuple[np.ndarray, int]:
        """(states s_t, step h) of step t, recorded."""
        self._obs = (self.batch.state.copy(), self.batch.h)
        self.data.states[self._rows, t] = self._obs[0]
        return self._obs

    def step(self, t: int, actions: np.ndarray) -> Step:
        """Take the actions; records a_t and r_t.  The optimal action is argmax_a Q*_h(s_t, a)."""
        batch, (states, h) = self.batch, self._obs
        optimal = batch.q_star[np.arange(batch.batch_size), h, states].argmax(axis=1)
        out = batch.step(actions)
        self.data.actions[self._rows, t], self.data.rewards[self._rows, t] = actions, out["reward"]
        return Step(feedback=(out["reward"], out["next_state"]), optimal_action=optimal)

    def hindsight_labels(self, rows: slice, lam: float) -> np.ndarray:
        """Approximate DPT is a linear-bandit label mode (refused by :meth:`Labelling.check_environment`)."""
        raise ValueError("approximate-DPT labels need a linear bandit")


def rollout_mdp(
    spec: MDPSpec,
    agent: AgentSpec,
    num_runs: int,
    seed: int = 0,
    batch_size: int = MDPRecorder.default_batch_size,
    label: LabelMode | str = LabelMode.NONE,
    store_probs: bool = False,
    posterior: AgentSpec | None = None,
    first_batch: int = 0,
) -> MDPRollouts:
    """Run ``agent`` for K episodes on ``num_runs`` fresh instances (labelled when ``label`` is "ad" or "dpt").

    :func:`icrl_gym.data.pipeline.run_collection` on an :class:`MDPRecorder`.  ``posterior`` (with
    ``label="dpt"`` and ``store_probs``) is an agent with ``optimal_action_probs`` (e.g. PSRL): it
    sees the same transitions as ``agent``, never acts, and its P(a* = a | D) are the soft labels.
    ``first_batch``: the batches played are those from this index on of a longer loop (a slice).
    """
    labelling = Labelling(LabelMode.parse(label), posterior=posterior, store_probs=store_probs)
    labelling.check_environment(mdp=True)
    recorder = MDPRecorder(spec, num_runs)
    return run_collection(
        recorder, agent, num_runs, labelling, seed=seed, batch_size=batch_size, first_batch=first_batch
    )


def optimal_values(
    spec: MDPSpec, num_runs: int, seed: int = 0, batch_size: int = MDPRecorder.default_batch_size
) -> np.ndarray:
    """V*_1(mu) (num_runs,) of the instances :func:`rollout_mdp` meets under the same seed and batch size."""
    return np.concatenate(
        [MDPBatch(spec, batch.size, batch.env_rng).v_star for batch in crn_batches(num_runs, batch_size, seed)]
    )
