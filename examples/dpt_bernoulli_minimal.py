"""DPT on a Bernoulli bandit in one file: collect pretraining data, pretrain a transformer, compare it with TS.

Decision-Pretrained Transformer (DPT), Section 3 of Lin, Bai & Mei, "Transformers as Decision Makers:
Provable In-Context Reinforcement Learning via Supervised Pretraining" (ICLR 2024).

Data.  An instance M ~ Lambda is a K-armed Bernoulli bandit, arm means mu_k iid Unif[0, 1].  A context
algorithm Alg_0 plays it for T steps, which gives the history D_T = (a_1, r_1, ..., a_T, r_T).  Alg_0 is
Thompson sampling on a fraction alpha of the runs and uniform on the others (Appendix B).  Every step is
labelled with the instance's optimal arm a* = argmax_k mu_k (the DPT label, which Alg_0 never sees).

Pretraining.  Maximum likelihood on every step of every trajectory i (Eq. (3)):

    theta_hat = argmax_theta  sum_i sum_{t=1..T}  log p_theta(a*^i | D_{t-1}^i).

The model that minimises this loss outputs the posterior P(a* = a | D_{t-1}).  Sampling an arm from it
is posterior sampling, which for this prior is Thompson sampling.  So a well-trained model should get
close to TS's regret.

Evaluation.  The sum over T steps of mu_{a*} - mu_{a_t} on fresh instances, with common random numbers:
the model and TS face the same instances and the same reward noise.

This file is the library's pretraining pipeline written out (icrl_gym.training.pretrain.pretrain), draw
for draw: at equal settings and seed it trains the same weights (tests/test_example_minimal.py).  Run it
from the repository root: ``python examples/dpt_bernoulli_minimal.py [--steps 500 --seed 0 ...]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from agents import ts_uniform_mixture
from agents.learned.transformer import TransformerAgent
from icrl_gym.data.labels import AgentSpec
from icrl_gym.data.trajectories import collect_trajectories, evaluate_regret
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.models.kv_cache import Attention
from icrl_gym.models.transformer import BanditTransformer, Layout, Positional, TransformerConfig
from icrl_gym.training.loop import optimizer_step, warmup_cosine
from icrl_gym.training.pretrain import pretraining_loss, pretraining_optimizer, to_tensors

EVAL_SEED_OFFSET = 700_000
"""Evaluation instances use seed 10**6 * seed + EVAL_SEED_OFFSET, never the seed of a training chunk."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The settings; the defaults take about 15-20 s of one CPU thread (plus the imports)."""
    p = argparse.ArgumentParser(description="DPT on a Bernoulli bandit: collect, pretrain, compare with TS.")
    p.add_argument("--seed", type=int, default=0, help="seeds the data, the batches and the initialisation")
    p.add_argument("--arms", type=int, default=5, help="number of arms K")
    p.add_argument("--horizon", type=int, default=50, help="steps T of one run")
    p.add_argument("--alpha", type=float, default=0.5, help="share of the pretraining runs played by TS")
    p.add_argument("--steps", type=int, default=500, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=32, help="trajectories per step")
    p.add_argument("--chunk", type=int, default=2000, help="trajectories collected at once (one pass each)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50, help="linear warm-up steps before the cosine decay")
    p.add_argument("--min-lr-ratio", type=float, default=0.05, help="final learning rate / peak")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=32)
    p.add_argument("--eval-runs", type=int, default=500, help="fresh instances of the evaluation")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return p.parse_args(argv)


def model_config(args: argparse.Namespace) -> TransformerConfig:
    """A small decoder: one token (arms, a_{t-1}, r_{t-1}) per step ("compact"), the paper's ReLU attention."""
    return TransformerConfig(
        n_layer=args.layers,
        n_head=args.heads,
        n_embd=args.embd,
        layout=Layout.COMPACT,
        attention=Attention.RELU,
        positional=Positional.LEARNED,
        dim=args.arms,  # one-hot arms: the arm vectors are e_1..e_K
        num_actions=args.arms,
        horizon=args.horizon,
    )


def pretrain(args: argparse.Namespace, spec: BanditSpec) -> BanditTransformer:
    """Maximise sum_t log p_theta(a*_t | D_{t-1}) by AdamW on minibatches of trajectories."""
    torch.manual_seed(args.seed)  # the initialisation is the only torch randomness (no dropout)
    model = BanditTransformer(model_config(args))
    optimizer = pretraining_optimizer(model, args.lr, args.weight_decay)  # AdamW, no decay on embeddings and norms
    print(f"model: {model.num_parameters():,} parameters")
    context = ts_uniform_mixture(args.alpha)  # Alg_0: each run is TS (prob. alpha) or uniform
    steps_per_chunk = max(1, args.chunk // args.batch_size)  # one pass over a chunk, then fresh data
    data = None
    model.train()
    for step in range(args.steps):
        if step % steps_per_chunk == 0:
            # chunk c is seeded 10**6 * seed + c: instances, rewards and Alg_0's coins all follow from it
            chunk = step // steps_per_chunk
            seed = 10**6 * args.seed + chunk
            data = collect_trajectories(spec, context, args.chunk, seed=seed, label="dpt")
        assert data is not None  # collected at step 0
        # the batch of step s depends on (seed, s) only, so a resumed run draws the same batches
        index = np.random.default_rng([args.seed, step]).integers(0, data.num_trajectories, size=args.batch_size)
        batch = to_tensors(data, index, torch.device("cpu"))  # action sets, a_t, r_t and the labels a*
        # mean over the B*T steps of -log p_theta(a* | D_{t-1}); the model is causal, so step t sees D_{t-1}
        loss, stats = pretraining_loss(model, batch, target="label", value_weight=0.0)
        # linear warm-up, then cosine decay to min_lr_ratio * lr at the last step
        lr = warmup_cosine(step, args.lr, args.warmup, args.steps, args.min_lr_ratio)
        optimizer_step(model, optimizer, loss, lr, args.grad_clip)  # zero_grad, backward, clip, AdamW step
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            print(f"step {step + 1:5d}  nll {stats['nll']:.3f}  accuracy {stats['accuracy']:.3f}  lr {lr:.2e}")
    return model


def evaluate(agent: AgentSpec, spec: BanditSpec, runs: int, seed: int) -> np.ndarray:
    """Cumulative regret sum_t (mu_{a*} - mu_{a_t}) of each of ``runs`` fresh instances drawn with ``seed``.

    ``agent``: the model's agent, which samples its arm from softmax(logits) as DPT deploys, or a
    registered agent's name.  The seed fixes the instances and the reward noise: equal for every agent.
    """
    return evaluate_regret(spec, agent, runs, seed=seed, batch_size=runs).sum(axis=1)


def evaluate_model(model: BanditTransformer, spec: BanditSpec, runs: int, seed: int) -> np.ndarray:
    """:func:`evaluate` of the model played online (one step at a time through its key-value cache)."""
    model.eval()
    agent = TransformerAgent.from_model(model)
    return evaluate(agent, spec, runs, seed)


class Result(NamedTuple):
    """What a run gives: the trained model and the per-instance cumulative regrets."""

    model: BanditTransformer
    dpt_regret: np.ndarray
    ts_regret: np.ndarray


def main(argv: Sequence[str] | None = None) -> Result:
    """Pretrain, then compare the model with Thompson sampling on the same fresh instances."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = bernoulli_bandit_spec(num_arms=args.arms, horizon=args.horizon)
    start = time.perf_counter()
    model = pretrain(args, spec)
    seed = 10**6 * args.seed + EVAL_SEED_OFFSET
    dpt = evaluate_model(model, spec, args.eval_runs, seed)
    ts = evaluate("bernoulli_ts", spec, args.eval_runs, seed)
    uniform = evaluate("uniform", spec, args.eval_runs, seed)  # the scale: an algorithm that never learns
    print(f"cumulative regret over T={args.horizon} steps, mean (s.e.) of {args.eval_runs} instances:")
    for name, regret in (("DPT", dpt), ("Thompson sampling", ts), ("uniform", uniform)):
        print(f"  {name:18s} {regret.mean():7.3f} ({regret.std(ddof=1) / np.sqrt(regret.size):.3f})")
    print(f"done in {time.perf_counter() - start:.1f}s")
    return Result(model, dpt, ts)


if __name__ == "__main__":
    main()
