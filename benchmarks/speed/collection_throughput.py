"""Data-collection throughput: the batched core against the plain Gymnasium way, in one run.

For LinUCB (lambda=1, alpha=2) on the paper's linear bandit (d=5, A=10, T=200) this measures
env-steps per second at batch sizes 1, 100 and 10,000 for

- ``batched``: :func:`icrl_gym.data.trajectories.collect_trajectories` (AD labels recorded), B runs
  stepped as arrays, incremental Sherman-Morrison statistics;
- ``plain``: a ``gymnasium.vector.SyncVectorEnv`` of B single environments and B per-instance
  LinUCB agents stepped in a Python loop (the same work, done the usual way).  At large B the
  plain path runs only the first ``plain_steps`` steps of the runs; a rate per step is fair
  since the per-step cost of both paths does not depend on t.

Then it times the collection of ``trajectories`` paper-size trajectories (target: 100,000 in
under two minutes, >= 300,000 env-steps/s at batch 10,000 on a 2-core CPU).

    python -m benchmarks.speed.collection_throughput [CONFIG.json] [--set trajectories=100000 plain_steps=20]
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import icrl_gym  # noqa: F401  (registers the environments)
from agents import LinUCB
from benchmarks.speed.timing import parse_config, timed
from icrl_gym.config import NONNEGATIVE_INT, POSITIVE_INT, DictConfig, check_fields, checked
from icrl_gym.data.trajectories import collect_trajectories
from icrl_gym.envs import linear_bandit_spec


@dataclass
class CollectionThroughputConfig(DictConfig):
    """What :func:`main` measures."""

    trajectories: int = checked(100_000, POSITIVE_INT)
    """Size of the full collection to time."""
    plain_steps: int = checked(20, POSITIVE_INT)
    """Steps of the plain path at batch 10,000."""
    seed: int = checked(0, NONNEGATIVE_INT)
    """Seed of the instances."""

    def __post_init__(self) -> None:
        check_fields(self)


def batched_rate(batch: int, horizon: int, seed: int) -> float:
    """Env-steps/s of the batched collector for ``batch`` runs of length ``horizon``."""
    spec = linear_bandit_spec(horizon=horizon)
    seconds = timed(lambda: collect_trajectories(spec, LinUCB(), batch, seed=seed, label="ad", batch_size=batch))
    return batch * horizon / seconds


def plain_rate(batch: int, steps: int, seed: int) -> float:
    """Env-steps/s of SyncVectorEnv + one LinUCB object per instance, for ``steps`` steps."""
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("ICRL-LinearBandit-v0") for _ in range(batch)])

    def play() -> None:
        obs, info = venv.reset(seed=seed)
        agents = []
        for b in range(batch):
            agent = LinUCB()
            agent.reset(w_star=info["w_star"][b], num_actions=10)
            agents.append(agent)
        for _ in range(steps):
            actions = np.array([agent.act(o) for agent, o in zip(agents, obs, strict=True)])
            obs, rewards, *_ = venv.step(actions)
            for agent, a, r in zip(agents, actions, rewards, strict=True):
                agent.update(a, r)

    seconds = timed(play)
    venv.close()
    return batch * steps / seconds


def main(argv: list[str] | None = None) -> dict:
    """Run the comparison and print a table of rates and ratios."""
    args = parse_config(CollectionThroughputConfig, argv)

    rows = []
    print(f"{'batch':>7} {'batched steps/s':>16} {'plain steps/s':>14} {'ratio':>8}")
    for batch in (1, 100, 10_000):
        fast = batched_rate(batch, 200, args.seed)
        slow = plain_rate(batch, 200 if batch <= 100 else args.plain_steps, args.seed)
        rows.append({"batch": batch, "batched_steps_per_s": fast, "plain_steps_per_s": slow, "ratio": fast / slow})
        print(f"{batch:>7} {fast:>16,.0f} {slow:>14,.0f} {fast / slow:>7.1f}x")

    spec = linear_bandit_spec()
    elapsed = timed(
        lambda: collect_trajectories(spec, LinUCB(), args.trajectories, seed=args.seed, label="ad", store_values=True)
    )
    rate = args.trajectories * spec.horizon / elapsed
    print(
        f"{args.trajectories:,} LinUCB trajectories (T=200, AD labels and index values): "
        f"{elapsed:.1f} s ({rate:,.0f} env-steps/s)"
    )
    result = {"rows": rows, "full_collection": {"trajectories": args.trajectories, "seconds": elapsed}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
