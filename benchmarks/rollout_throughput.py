"""Online rollout throughput of the in-context transformer: key/value cache against full recompute.

The paper's reference model (L=8, M=4, D=32, ReLU attention, two tokens per step) rolls out on
the linear bandit (d=5, A=10, T=200) over ``--instances`` instances, in one run:

- ``cache``: :class:`agents.transformer_agent.TransformerAgent`, which appends each step's tokens
  to the model's key/value cache (O(t) work at step t);
- ``recompute``: the same model re-run on the whole prefix at every step (O(t^2) per step),
  the way a rollout without a cache works.

Both compute the same policies (``tests/test_transformer.py`` and ``tests/test_pretrain.py`` check
the cache against the full forward pass).
Training throughput is the number of T=200 sequences per second of a forward+backward pass.
Targets on a 2-core CPU: >= 10,000 env-steps/s with the cache and >= 20x the recompute path.

    python -m benchmarks.rollout_throughput [--instances 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from agents.transformer_agent import TransformerAgent
from icrl_gym.checkpoint import save_checkpoint
from icrl_gym.envs import BanditBatch, linear_bandit_spec
from icrl_gym.transformer import BanditTransformer, TransformerConfig


def rollout(agent: TransformerAgent, model: BanditTransformer, n: int, steps: int, recompute: bool) -> float:
    """Roll out ``steps`` steps on ``n`` instances greedily; returns env-steps per second."""
    spec = linear_bandit_spec()
    batch = BanditBatch(spec, n, np.random.default_rng(0))
    agent.reset(batch_size=n, dim=spec.dim, num_actions=spec.num_actions)
    sets = torch.tensor(batch.action_sets, dtype=torch.float32)
    actions, rewards = [], []
    start = time.perf_counter()
    for t in range(steps):
        if recompute:
            with torch.no_grad():
                prefix_a = torch.stack([*actions, torch.zeros(n, dtype=torch.long)], 1)
                prefix_r = torch.stack([*rewards, torch.zeros(n)], 1)
                logits = model(sets[:, None].expand(n, t + 1, *sets.shape[1:]), prefix_a, prefix_r)[0][:, -1]
            a = logits.argmax(-1).numpy()
        else:
            a = agent.act_batch(batch.action_sets)
        out = batch.step(a)
        if not recompute:
            agent.update_batch(batch.action_sets, a, out["reward"])
        actions.append(torch.as_tensor(a))
        rewards.append(torch.as_tensor(out["reward"], dtype=torch.float32))
    elapsed = time.perf_counter() - start
    return n * steps / elapsed


def main(argv: list[str] | None = None) -> dict:
    """Measure and print cache vs recompute rollout rates and the training rate."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=1000, help="instances rolled out at once")
    parser.add_argument("--steps", type=int, default=200, help="steps of the cached rollout (T)")
    parser.add_argument("--recompute-steps", type=int, default=200, help="steps of the recompute rollout")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--train-batch", type=int, default=64, help="sequences per training step")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = TransformerConfig()  # the paper's reference configuration
    model = BanditTransformer(cfg).eval()
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(Path(tmp) / "m", model, {"env": linear_bandit_spec().to_dict()})
        agent = TransformerAgent(Path(tmp) / "m", greedy=True)
    cache_rate = rollout(agent, model, args.instances, args.steps, recompute=False)
    recompute_rate = rollout(agent, model, args.instances, args.recompute_steps, recompute=True)
    # training: forward + backward over full T=200 sequences
    model.train()
    x = torch.rand(args.train_batch, 200, 10, 5) * 2 - 1
    a = torch.randint(0, 10, (args.train_batch, 200))
    r = torch.randn(args.train_batch, 200)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        logits, _ = model(x, a, r)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), a.flatten()).backward()
        times.append(time.perf_counter() - start)
    train_rate = args.train_batch / float(np.median(times[1:]))
    result = {
        "model": cfg.to_dict(),
        "threads": args.threads,
        "instances": args.instances,
        "cache_env_steps_per_s": cache_rate,
        "recompute_env_steps_per_s": recompute_rate,
        "recompute_steps": args.recompute_steps,
        "speedup": cache_rate / recompute_rate,
        "train_sequences_per_s": train_rate,
    }
    print(f"rollout, {args.instances} instances, L={cfg.n_layer} D={cfg.n_embd} {cfg.layout} layout:")
    print(f"  cache     {cache_rate:>10,.0f} env-steps/s ({args.steps} steps)")
    print(f"  recompute {recompute_rate:>10,.0f} env-steps/s ({args.recompute_steps} steps)")
    print(f"  ratio     {cache_rate / recompute_rate:>10.1f}x")
    print(f"training: {train_rate:,.1f} sequences/s (T=200, batch {args.train_batch}, forward+backward)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
