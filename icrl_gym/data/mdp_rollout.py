"""Run MDP algorithms on fresh instances: trajectories and Bayes regret per episode.

The loop mirrors :func:`icrl_gym.data.trajectories.collect_trajectories` for tabular MDPs: batch i of
runs uses ``np.random.default_rng([seed, i])`` for the instances and noise and ``[seed, i, 1]`` for
the algorithm, so every algorithm under one seed meets the same MDPs and noise (common random
numbers).  The regret of episode k is V*_1(mu) - (return of episode k); summed over the K
episodes it is the run's Bayes regret K V* - sum of rewards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from icrl_gym.algorithm import MDPAgent
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.mdp_env import reset_info


@dataclass
class MDPRollouts:
    """States, actions, rewards (N, T), the optimal values (N,) and the spec of N runs.

    With labels (pretraining data): ``labels`` (N, T) -- the action taken ("ad") or the optimal
    action argmax_a Q*_h(s, a) of the instance ("dpt") -- and optionally ``label_probs`` (N, T, A):
    the context algorithm's action distribution ("ad") or the posterior P(a* = a | D_{t-1}) at
    (s_t, h_t) of a Bayesian ``labeller`` ("dpt", the Rao-Blackwellised DPT target).
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    v_star: np.ndarray
    spec: MDPSpec
    labels: np.ndarray | None = None
    label_probs: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    @property
    def num_trajectories(self) -> int:
        """Number of runs N."""
        return self.states.shape[0]

    @property
    def episode_returns(self) -> np.ndarray:
        """Return of every episode, (N, K)."""
        return self.rewards.reshape(self.rewards.shape[0], self.spec.episodes, self.spec.horizon).sum(axis=2)

    @property
    def episode_regret(self) -> np.ndarray:
        """V* - return of every episode, (N, K)."""
        return self.v_star[:, None] - self.episode_returns


def rollout_mdp(
    spec: MDPSpec,
    agent: MDPAgent,
    num_runs: int,
    seed: int = 0,
    batch_size: int = 1000,
    label: str = "none",
    store_probs: bool = False,
    labeller: MDPAgent | None = None,
) -> MDPRollouts:
    """Run ``agent`` for K episodes on ``num_runs`` fresh instances (labelled when ``label`` is "ad" or "dpt").

    ``labeller`` (with ``label="dpt"`` and ``store_probs``) is an agent with ``optimal_action_probs``
    (e.g. PSRL): it sees the same transitions as ``agent`` and never acts.
    """
    if label not in ("none", "ad", "dpt"):
        raise ValueError(f"MDP label mode must be 'none', 'ad' or 'dpt', got {label!r}")
    if store_probs and label == "none":
        raise ValueError("store_probs keeps soft labels: it needs label='ad' or 'dpt'")
    if (labeller is not None) != (store_probs and label == "dpt"):
        raise ValueError("soft DPT labels (label='dpt', store_probs=True) need a labeller, and only they use one")
    if labeller is not None and not hasattr(labeller, "optimal_action_probs"):
        raise ValueError(f"labeller {labeller.name!r} has no posterior of the optimal action (optimal_action_probs)")
    T = spec.total_steps
    out = MDPRollouts(
        states=np.zeros((num_runs, T), np.int16),
        actions=np.zeros((num_runs, T), np.int16),
        rewards=np.zeros((num_runs, T), np.float32),
        v_star=np.zeros(num_runs),
        spec=spec,
        labels=None if label == "none" else np.zeros((num_runs, T), np.int16),
        label_probs=np.zeros((num_runs, T, spec.num_actions), np.float16) if store_probs else None,
    )
    for i, start in enumerate(range(0, num_runs, batch_size)):
        rows = slice(start, min(start + batch_size, num_runs))
        b = rows.stop - rows.start
        batch = MDPBatch(spec, b, np.random.default_rng([seed, i]))
        info = reset_info(spec, batch)
        agent.reset(info, rng=np.random.default_rng([seed, i, 1]))
        if labeller is not None:
            labeller.reset(info, rng=np.random.default_rng([seed, i, 2]))
        out.v_star[rows] = batch.v_star
        for t in range(T):
            states, h = batch.state.copy(), batch.h
            if labeller is not None:
                out.label_probs[rows, t] = labeller.optimal_action_probs(states, h)
            elif store_probs:
                out.label_probs[rows, t] = agent.policy_batch(states, h)
            actions = agent.act_batch(states, h)
            if label == "ad":
                out.labels[rows, t] = actions
            elif label == "dpt":
                out.labels[rows, t] = batch.q_star[np.arange(b), h, states].argmax(axis=1)
            step = batch.step(actions)
            agent.update_batch(states, h, actions, step["reward"], step["next_state"])
            if labeller is not None:
                labeller.update_batch(states, h, actions, step["reward"], step["next_state"])
            out.states[rows, t], out.actions[rows, t], out.rewards[rows, t] = states, actions, step["reward"]
    out.meta = {
        "env": spec.to_dict(),
        "context": agent.config(),
        "label": label,
        "labeller": None if labeller is None else labeller.config(),
        "seed": seed,
        "num_trajectories": num_runs,
    }
    return out


def optimal_values(spec: MDPSpec, num_runs: int, seed: int = 0, batch_size: int = 1000) -> np.ndarray:
    """V*_1(mu) (num_runs,) of the instances :func:`rollout_mdp` meets under the same seed and batch size."""
    parts = []
    for i, start in enumerate(range(0, num_runs, batch_size)):
        b = min(start + batch_size, num_runs) - start
        parts.append(MDPBatch(spec, b, np.random.default_rng([seed, i])).v_star)
    return np.concatenate(parts)
