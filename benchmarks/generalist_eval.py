"""Regret of a generalist-transformer checkpoint against Gittins, Thompson sampling and UCB (issue 16).

On every (K, T) cell of a grid, each algorithm plays the same instances with the same reward noise
(common random numbers: the vector env ``ICRL-BernoulliBandit-v0``, arm means iid U[0, 1], reset
with the same seeds for every algorithm; seed 20_000_000 + chunk, disjoint from training, whose
batches come from default_rng([seed, step])).  Prints mean +- standard error of the cumulative
regret over the instances, the ratio to Gittins and the standard error of the paired difference::

    OMP_NUM_THREADS=1 python -m benchmarks.generalist_eval CHECKPOINT --arms 2 5 --horizons 50 200 --runs 500
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import icrl_gym.envs  # noqa: F401  (registers the environments)
from agents.generalist_agent import GeneralistAgent
from icrl_gym.algorithm import BanditAgent
from icrl_gym.registry import make_agent

SEED = 20_000_000


def regrets(agent: BanditAgent, num_arms: int, horizon: int, runs: int, chunk: int = 500) -> np.ndarray:
    """Cumulative regret (runs,) of ``agent`` on ``runs`` fresh instances (seeded: the same for every agent)."""
    out = []
    for i, start in enumerate(range(0, runs, chunk)):
        n = min(chunk, runs - start)
        env = gym.make_vec(
            "ICRL-BernoulliBandit-v0",
            num_envs=n,
            vectorization_mode="vector_entry_point",
            num_arms=num_arms,
            horizon=horizon,
        )
        obs, info = env.reset(seed=SEED + i)
        extra = {"horizon": horizon} if "horizon" in agent.reset_fields else {}  # the baselines take none
        agent.reset(info, rng=np.random.default_rng(SEED + i), **extra)
        total = np.zeros(n)
        for _ in range(horizon):
            a = agent.act(obs)
            obs, r, _, _, step_info = env.step(a)
            agent.update(a, r)
            total += step_info["regret"]
        out.append(total)
    return np.concatenate(out)


def evaluate(
    checkpoint: str, arms: list[int], horizons: list[int], runs: int, baselines: bool = True
) -> list[dict[str, Any]]:
    """One row per (K, T, algorithm): mean, s.e., ratio to Gittins, seconds."""
    rows = []
    for horizon in horizons:
        for k in arms:
            algorithms: dict[str, BanditAgent] = {"generalist": GeneralistAgent(checkpoint)}
            if baselines:
                algorithms = {
                    "gittins": make_agent("gittins", horizon=horizon),
                    "ts": make_agent("bernoulli_ts"),
                    "ucb": make_agent("ucb"),
                    **algorithms,
                }
            results = {}
            for name, agent in algorithms.items():
                t0 = time.time()
                r = regrets(agent, k, horizon, runs)
                results[name] = (r, time.time() - t0)
            gittins = results["gittins"][0] if "gittins" in results else None
            base = gittins.mean() if gittins is not None else float("nan")
            for name, (r, seconds) in results.items():
                row = {
                    "arms": k,
                    "horizon": horizon,
                    "algorithm": name,
                    "mean": float(r.mean()),
                    "se": float(r.std(ddof=1) / np.sqrt(len(r))),
                    "ratio_to_gittins": float(r.mean() / base),
                    "paired_se_vs_gittins": float((r - gittins).std(ddof=1) / np.sqrt(len(r)))
                    if gittins is not None
                    else None,
                    "runs": runs,
                    "seconds": seconds,
                }
                rows.append(row)
                print(
                    f"K={k:3d} T={horizon:4d} {name:10s} regret {row['mean']:7.2f} +- {row['se']:.2f}  "
                    f"x{row['ratio_to_gittins']:.3f} Gittins (paired s.e. of the difference "
                    f"{row['paired_se_vs_gittins']:.2f})  ({runs} runs, {seconds:.0f} s)",
                    flush=True,
                )
    return rows


def main() -> None:
    """Command line: a checkpoint and the grid."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--arms", type=int, nargs="+", default=[2, 3, 5, 10, 20])
    parser.add_argument("--horizons", type=int, nargs="+", default=[50, 200, 500])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    evaluate(args.checkpoint, args.arms, args.horizons, args.runs)


if __name__ == "__main__":
    main()
