"""Play a curve experiment: every row on the same instances, reduced to mean, std and s.e. curves per step."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.experiments.rows import LEARNED
from benchmarks.experiments.suite.cells import Experiment
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.data.pipeline import build_agent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditSpec, MDPSpec


def _curves(regret: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, std and standard error over runs of cumulative regret and per-step suboptimality."""
    n = regret.shape[0]
    cum = regret.cumsum(axis=1)
    out = {}
    for key, x in (("cumulative_regret", cum), ("suboptimality", regret)):
        std = x.std(axis=0, ddof=1)
        out[f"{key}_mean"], out[f"{key}_std"], out[f"{key}_se"] = x.mean(axis=0), std, std / np.sqrt(n)
    return out


def played_specs(exp: Experiment, device: str, checkpoints: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The agent specification of every row as it is played.

    Learned rows get their checkpoint (a retrained model's path from ``checkpoints``, else the
    shipped name) and the device.
    """
    specs = {}
    for label, spec in exp.algorithms.items():
        spec = dict(spec)
        if spec["name"] in LEARNED:
            spec["checkpoint"] = (checkpoints or {}).get(spec["checkpoint"], spec["checkpoint"])
            spec["device"] = device
        specs[label] = spec
    return specs


def run_experiment(
    exp: Experiment, runs: int, seed: int, device: str, checkpoints: dict[str, str] | None = None, progress: Any = None
) -> dict[str, dict[str, np.ndarray]]:
    """Regret curves (per step for bandits, per episode for MDPs) of every algorithm on the same instances."""
    curves = {}
    for label, spec in played_specs(exp, device, checkpoints).items():
        curves[label] = play_row(exp.spec, spec, runs, seed)
        if progress is not None:
            progress(label)
    return curves


def play_row(env: BanditSpec | MDPSpec, spec: dict[str, Any], runs: int, seed: int) -> dict[str, np.ndarray]:
    """The curves of one row: the agent of ``spec`` (as played) on the experiment's ``runs`` instances under ``seed``.

    A row depends on nothing but its arguments (the instances and noise are the common random
    numbers of ``seed``, one batch of ``runs``), so the rows of an experiment can be played in any
    order, in any process, and give the same curves.
    """
    agent = build_agent(spec)  # a learned agent checks its checkpoint against the environment at reset
    if isinstance(env, MDPSpec):  # regret per episode: V* - return of episode k
        regret = rollout_mdp(env, agent, runs, seed=seed, batch_size=runs).episode_regret
    else:  # regret per step: max_k <a_k, w*> - <a_t, w*>
        regret = evaluate_regret(env, agent, runs, seed=seed, batch_size=runs)
    return _curves(regret)


def run_memory_bytes(spec: BanditSpec | MDPSpec, runs: int) -> int:
    """Estimated memory of one experiment's rows on ``runs`` instances: the batch of instances and the curves.

    The instances are ``spec.memory_bytes(runs)``; the per-run regret of every step (float64) is
    held about four times while the curves are computed (regret, running sum, square and mean).
    """
    steps = spec.episodes if isinstance(spec, MDPSpec) else spec.horizon
    return spec.memory_bytes(runs) + 4 * 8 * runs * steps
