"""Online rollout throughput of the in-context transformer: key/value cache against full recompute.

The paper's reference model (L=8, M=4, D=32, ReLU attention, two tokens per step) rolls out on
the linear bandit (d=5, A=10, T=200) over ``instances`` instances, in one run:

- ``cache``: :class:`agents.learned.transformer.TransformerAgent`, which appends each step's tokens
  to the model's key/value cache (O(t) work at step t);
- ``recompute``: the same model re-run on the whole prefix at every step (O(t) tokens at step t),
  the way a rollout without a cache works; its cost is timed at a few prefix lengths and summed
  over t = 1..T by interpolation (running all T passes for 1,000 instances takes many minutes).

Both compute the same policies (the test suite checks the cache against the full forward pass).
Training throughput is the number of T=200 sequences per second of a forward+backward pass.
Targets on a 2-core CPU: >= 10,000 env-steps/s with the cache and >= 20x the recompute path.

    python -m benchmarks.speed.rollout_throughput [CONFIG.json] [--set instances=1000 threads=2]
"""

from __future__ import annotations

import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from agents.learned.transformer import TransformerAgent
from benchmarks.speed.timing import RolloutSize, TimedConfig, interleaved, timed, train_step
from icrl_gym.checkpoint import save_checkpoint
from icrl_gym.config import POSITIVE_INT, checked
from icrl_gym.envs import BanditBatch, linear_bandit_spec
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig


@dataclass
class RolloutThroughputConfig(TimedConfig, RolloutSize):
    """What :func:`main` measures: the rollout's size, the rounds of the training step, the threads and the below."""

    probes: int = checked(9, POSITIVE_INT)
    """Prefix lengths timed for the recompute path."""
    threads: int = 2
    train_batch: int = checked(64, POSITIVE_INT)
    """Sequences per training step."""


def cached_rollout(agent: TransformerAgent, n: int, steps: int) -> float:
    """Greedy rollout of ``steps`` steps on ``n`` instances with the key/value cache: env-steps/s."""
    spec = linear_bandit_spec()
    batch = BanditBatch(spec, n, np.random.default_rng(0))
    agent.reset(batch_size=n, dim=spec.dim, num_actions=spec.num_actions)

    def play() -> None:
        for _ in range(steps):
            sets = batch.action_sets
            a = agent.act_batch(sets)
            agent.update_batch(sets, a, batch.step(a)["reward"])

    return n * steps / timed(play)


def last_actions(model: BanditTransformer, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The greedy actions after the whole prefix ``inputs``: one forward pass over every step of it."""
    return model(*inputs)[0][:, -1].argmax(-1)


def recompute_rollout(model: BanditTransformer, n: int, steps: int, probes: int) -> float:
    """Env-steps/s of re-running the whole prefix at every step, for ``steps`` steps on ``n`` instances.

    Step t costs one forward pass over a prefix of t steps.  The pass is timed at ``probes``
    prefix lengths spread over 1..steps and the total sum_t cost(t) is integrated (trapezoid) from
    them, instead of running all ``steps`` passes (minutes at n = 1000).
    """
    spec = linear_bandit_spec()
    rng = np.random.default_rng(0)
    sets = torch.tensor(rng.uniform(-1, 1, (n, 1, spec.num_actions, spec.dim)), dtype=torch.float32)
    lengths = np.unique(np.linspace(1, steps, probes).round().astype(int))
    costs = []
    for t in lengths:
        actions = torch.as_tensor(rng.integers(0, spec.num_actions, (n, t)))
        rewards = torch.randn(n, t)
        inputs = (sets.expand(n, t, *sets.shape[2:]), actions, rewards)
        with torch.no_grad():
            costs.append(timed(functools.partial(last_actions, model, inputs)))
    total = float(np.interp(np.arange(1, steps + 1), lengths, costs).sum())
    return n * steps / total


def main(argv: list[str] | None = None) -> dict:
    """Measure and print cache vs recompute rollout rates and the training rate."""
    args = RolloutThroughputConfig.from_command_line(argv)
    torch.manual_seed(0)
    cfg = TransformerConfig()  # the paper's reference configuration
    model = BanditTransformer(cfg).eval()
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(Path(tmp) / "m", model, {"env": linear_bandit_spec().to_dict()})
        agent = TransformerAgent(Path(tmp) / "m", greedy=True)
    cache_rate = cached_rollout(agent, args.instances, args.steps)
    recompute_rate = recompute_rollout(model, args.instances, args.steps, args.probes)
    # training: forward + backward over full T=200 sequences
    model.train()
    x = torch.rand(args.train_batch, 200, 10, 5) * 2 - 1
    a = torch.randint(0, 10, (args.train_batch, 200))
    data = (x, a, torch.randn(args.train_batch, 200), a)
    times = interleaved({"train": lambda: train_step(model, data)}, args.repeats)["train"]
    train_rate = args.train_batch / float(np.median(times))
    result = {
        "model": cfg.to_dict(),
        "threads": args.threads,
        "instances": args.instances,
        "cache_env_steps_per_s": cache_rate,
        "recompute_env_steps_per_s": recompute_rate,
        "recompute_probes": args.probes,
        "speedup": cache_rate / recompute_rate,
        "train_sequences_per_s": train_rate,
    }
    print(f"rollout, {args.instances} instances, L={cfg.n_layer} D={cfg.n_embd} {cfg.layout} layout:")
    print(f"  cache     {cache_rate:>10,.0f} env-steps/s ({args.steps} steps)")
    print(f"  recompute {recompute_rate:>10,.0f} env-steps/s ({args.steps} steps, {args.probes} prefix lengths timed)")
    print(f"  ratio     {cache_rate / recompute_rate:>10.1f}x")
    print(f"training: {train_rate:,.1f} sequences/s (T=200, batch {args.train_batch}, forward+backward)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
