"""Pretraining step time of the MDP transformer: ReLU against softmax attention, with and without prev_tokens.

One optimizer step (forward, backward, AdamW) of the shipped tabular-MDP model size (L=4, D=64,
S=5, A=3, H=10, K=20: 418 tokens up to the last state token) on a batch of ``--batch`` random runs, for every
variant in the same process, interleaved over ``--repeats`` rounds so that the machine's load
falls on all of them alike.  Prints the median seconds per step and the ratio to the paper's
variant (ReLU attention, prev_tokens=0).  The learning-speed side (validation NLL per step) is in
docs/results.md.

    python -m benchmarks.speed.mdp_training_speed [CONFIG.json] [--set batch=32 repeats=5 threads=1]
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmarks.speed.timing import TimedConfig, interleaved, train_step
from icrl_gym.config import POSITIVE_INT, checked
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig

VARIANTS: dict[str, dict[str, Any]] = {
    "relu, prev_tokens=0 (paper)": {"attention": "relu", "prev_tokens": 0},
    "softmax, prev_tokens=0": {"attention": "softmax", "prev_tokens": 0},
    "softmax, prev_tokens=2 (shipped)": {"attention": "softmax", "prev_tokens": 2},
}


@dataclass
class MDPTrainingSpeedConfig(TimedConfig):
    """What :func:`main` times (and the rounds and threads of :class:`TimedConfig`)."""

    batch: int = checked(32, POSITIVE_INT)
    """Runs per training step."""
    repeats: int = 5


def main(argv: list[str] | None = None) -> dict:
    """Time every variant side by side and print the table."""
    args = MDPTrainingSpeedConfig.from_command_line(argv)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg: dict[str, Any] = {"n_layer": 4, "n_head": 4, "n_embd": 64}
    models = {name: MDPTransformer(MDPTransformerConfig(**cfg, **v)) for name, v in VARIANTS.items()}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-3) for name, m in models.items()}
    T, c = 200, next(iter(models.values())).config
    batch = (
        torch.from_numpy(rng.integers(0, c.num_states, (args.batch, T))),
        torch.from_numpy(rng.integers(0, c.num_actions, (args.batch, T))),
        torch.from_numpy(rng.integers(0, 2, (args.batch, T)).astype(np.float32)),
        torch.from_numpy(rng.integers(0, c.num_actions, (args.batch, T))),
    )
    steps = {name: functools.partial(train_step, model, batch, optimizers[name]) for name, model in models.items()}
    times = interleaved(steps, args.repeats)
    base = float(np.median(times[next(iter(models))]))
    result: dict[str, Any] = {
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
