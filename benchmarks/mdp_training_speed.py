"""Pretraining step time of the MDP transformer: ReLU against softmax attention, with and without prev_tokens.

One optimizer step (forward, backward, AdamW) of the shipped tabular-MDP model size (L=4, D=64,
S=5, A=3, H=10, K=20: 418 tokens up to the last state token) on a batch of ``--batch`` random runs, for every
variant in the same process, interleaved over ``--repeats`` rounds so that the machine's load
falls on all of them alike.  Prints the median seconds per step and the ratio to the paper's
variant (ReLU attention, prev_tokens=0).  The learning-speed side (validation NLL per step) is in
docs/results.md.

    python -m benchmarks.mdp_training_speed [--batch 32] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import json

import numpy as np
import torch

from benchmarks.timing import interleaved
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig

VARIANTS = {
    "relu, prev_tokens=0 (paper)": {"attention": "relu", "prev_tokens": 0},
    "softmax, prev_tokens=0": {"attention": "softmax", "prev_tokens": 0},
    "softmax, prev_tokens=2 (shipped)": {"attention": "softmax", "prev_tokens": 2},
}


def train_step(model: MDPTransformer, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...]) -> None:
    """One training step (mean NLL of random labels, backward, AdamW)."""
    states, actions, rewards, labels = batch
    logits = model(states, actions, rewards).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main(argv: list[str] | None = None) -> dict:
    """Time every variant side by side and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32, help="runs per step")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = {"n_layer": 4, "n_head": 4, "n_embd": 64}
    models = {name: MDPTransformer(MDPTransformerConfig(**cfg, **v)) for name, v in VARIANTS.items()}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-3) for name, m in models.items()}
    T, c = 200, next(iter(models.values())).config
    batch = (
        torch.from_numpy(rng.integers(0, c.num_states, (args.batch, T))),
        torch.from_numpy(rng.integers(0, c.num_actions, (args.batch, T))),
        torch.from_numpy(rng.integers(0, 2, (args.batch, T)).astype(np.float32)),
        torch.from_numpy(rng.integers(0, c.num_actions, (args.batch, T))),
    )
    steps = {name: functools.partial(train_step, model, optimizers[name], batch) for name, model in models.items()}
    times = interleaved(steps, args.repeats)
    base = float(np.median(times[next(iter(models))]))
    result = {
        "batch": args.batch,
        "threads": args.threads,
        "tokens_per_run": c.state_token(T - 1) + 1,
        "seconds_per_step": {name: float(np.median(t)) for name, t in times.items()},
    }
    print(
        f"\nMDP transformer training step, batch {args.batch} x {result['tokens_per_run']} tokens, "
        f"{args.threads} thread(s)\n"
    )
    print("| variant | seconds per step (median) | speed vs paper variant |")
    print("|---|---|---|")
    for name, seconds in result["seconds_per_step"].items():
        print(f"| {name} | {seconds:.3f} | {base / seconds:.2f}x |")
    print("\n" + json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
