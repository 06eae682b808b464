"""What many tests use: tiny trainer configurations (runs of a few seconds), models with random weights, a play loop.

Each builder holds the sizes of a tiny run once; a test passes as keywords only the fields its check
depends on (a longer run, another environment, a DAgger start), so what a test changes stands out.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from benchmarks.experiments.generalization.cells import GENERALIZATION, GridExperiment
from icrl_gym.checkpoint import PRETRAINED_DIR, CheckpointKind, read_record, save_checkpoint
from icrl_gym.envs import BanditSpec, MDPSpec, bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.envs.bandit_env import BanditVectorEnv
from icrl_gym.envs.mdp_env import TabularMDPVectorEnv
from icrl_gym.kinds import KINDS
from icrl_gym.models.generalist import GeneralistConfig, GeneralistTransformer
from icrl_gym.models.mdp_generalist import MDPGeneralist, MDPGeneralistConfig
from icrl_gym.training.finetune import FinetuneConfig
from icrl_gym.training.generalist import GeneralistTrainConfig
from icrl_gym.training.mdp_generalist import MDPGeneralistTrainConfig
from icrl_gym.training.pretrain import PretrainConfig

TINY_DECODER = {"n_layer": 1, "n_head": 1, "n_embd": 8, "layout": "compact"}
"""A one-block bandit transformer of width 8, one token per step."""

TINY_GENERALIST = {"d_model": 8, "n_heads": 2, "n_layers": 1, "mlp_ratio": 2, "same_arm_bias": [0.0, 8.0]}
"""A one-block Bernoulli generalist of width 8 with two heads."""

TINY_MDP_GENERALIST = {"d_model": 8, "mlp_ratio": 1}
"""An MDP generalist of width 8 whose MLPs are as wide."""

LINEAR_EXPERTS = (
    "linucb",
    "soft_linucb",
    "linear_ts",
    "linear_bayes_ucb",
    "linear_posterior_mean",
    "linear_box_posterior",
)
"""The registered experts of the linear bandit."""


def tiny_pretrain_config(out_dir: str | Path, /, **overrides: Any) -> PretrainConfig:
    """Pretraining on UCB's actions (AD labels) on a 2-armed Bernoulli bandit of T = 6: 6 steps of batch 8."""
    env = bernoulli_bandit_spec(num_arms=2, horizon=6).to_dict()
    learner = dict(name="tiny", env=env, context={"name": "ucb"}, label="ad", model=TINY_DECODER)
    sizes = dict(trajectories_per_chunk=16, batch_size=8, val_trajectories=8)
    schedule = dict(steps=6, lr=1e-2, warmup_steps=1, eval_every=2, device="cpu")
    return PretrainConfig(**{**learner, **sizes, **schedule, "out_dir": str(out_dir), **overrides})


def tiny_generalist_config(out_dir: str | Path, table_cache: str | Path, /, **overrides: Any) -> GeneralistTrainConfig:
    """The Bernoulli generalist trainer on K <= 3, T in [4, 8]: 6 steps, DAgger from step 3, no evaluation."""
    prior = dict(max_arms=3, min_horizon=4, max_horizon=8)
    batches = dict(queries=2, cost_per_batch=1e3, max_batch=4, dagger_start=3, dagger_fraction=0.5)
    schedule = dict(steps=6, warmup_steps=1, log_every=2, checkpoint_every=2, eval_every=0, device="cpu")
    folders = dict(out_dir=str(out_dir), table_cache=str(table_cache))
    return GeneralistTrainConfig(**{"model": TINY_GENERALIST, **prior, **batches, **schedule, **folders, **overrides})


def tiny_mdp_generalist_config(out_dir: str | Path, /, **overrides: Any) -> MDPGeneralistTrainConfig:
    """The MDP generalist trainer on S <= 4, A <= 3, H <= 4 and dark rooms of side 2 or 3: 6 steps, DAgger at 2."""
    sizes = dict(max_states=4, max_arms=3, max_horizon=4, max_episodes=3, max_steps=12)
    rooms = dict(min_room=2, max_room=3, room_max_horizon=4, room_max_episodes=2, dark_room_fraction=0.3)
    batches = dict(queries=3, max_batch=4, dagger_start=2, dagger_fraction=0.5)
    schedule = dict(steps=6, warmup_steps=2, log_every=2, checkpoint_every=3, eval_every=0)
    learner = {"model": TINY_MDP_GENERALIST, **sizes, **rooms, **batches, **schedule}
    return MDPGeneralistTrainConfig(**{**learner, "out_dir": str(out_dir), **overrides})


def tiny_finetune_config(base: str | Path, out_dir: str | Path, /, **overrides: Any) -> FinetuneConfig:
    """Fine-tuning the checkpoint ``base``: 6 iterations of 4 runs, validated on 8 runs every 2 iterations."""
    schedule = dict(iterations=6, runs_per_iteration=4, lr=1e-2, val_runs=8, eval_every=2, device="cpu")
    return FinetuneConfig(**{"base": str(base), **schedule, "out_dir": str(out_dir), **overrides})


def random_weights(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in eval mode with N(0, 0.3^2) weights (seed 0; the LayerNorms kept): far from the initial ones."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" not in name:
                p.normal_(0, 0.3)
    return model.eval()


def tiny_mdp_generalist(seed: int = 0, dtype: torch.dtype = torch.float32) -> MDPGeneralist:
    """:data:`TINY_MDP_GENERALIST` in eval mode with N(0, 0.3^2) noise (seed ``seed``) added to every weight.

    A non-zero bonus and head, so that every path of the network reaches the logits.
    """
    torch.manual_seed(seed)
    model = MDPGeneralist(MDPGeneralistConfig(**TINY_MDP_GENERALIST)).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def tiny_generalization(**overrides: Any) -> GridExperiment:
    """The generalization grid, tiny: K=2 in range, K=3 out of it, T=6; one Beta prior; one linear cell and one variant.

    ``overrides``: other fields of :class:`GridExperiment` (a test's own references, a slice size).
    """
    sizes = dict(arms=(2,), horizons=(6,), ood_arms=(3,), ood_horizons=(), prior_shifts=((2.0, 2.0),), shift_horizon=6)
    linear = dict(
        linear_dims=(2,), linear_actions=(3,), linear_horizon=6, linear_variants={"sigma=0.5": {"noise_std": 0.5}}
    )
    return dataclasses.replace(GENERALIZATION, **{**sizes, "trained_arms": (2, 2), **linear, **overrides})


def save_tiny_generalist(path: str | Path) -> str:
    """A one-block Bernoulli generalist of width 16 (initial weights, seed 0) saved at ``path``; its range: K=2, T=6."""
    torch.manual_seed(0)
    config = GeneralistConfig(d_model=16, n_heads=2, n_layers=1, mlp_ratio=2, same_arm_bias=(0.0, 8.0))
    meta = {"training": {"steps": 0, "seed": 0}, "trained_range": {"num_arms": [2, 2], "horizon": [6, 6]}}
    kind = CheckpointKind.GENERALIST_TRANSFORMER
    return str(save_checkpoint(path, GeneralistTransformer(config), meta, config=config.to_dict(), kind=kind))


def play_steps(agent: Any, env: Any, steps: int, obs: Any) -> tuple[list[Any], Any]:
    """``agent`` plays ``steps`` steps of ``env`` from observation ``obs``: its actions and the last observation."""
    actions = []
    for _ in range(steps):
        a = agent.act(obs)
        obs, r, *_ = env.step(a)
        agent.update(a, r)
        actions.append(a)
    return actions, obs


def shipped_model_env(name: str, num_envs: int = 2) -> BanditVectorEnv | TabularMDPVectorEnv:
    """A vector environment the shipped model ``name`` can play (its training prior, or a size in its range)."""
    record = read_record(PRETRAINED_DIR / name)
    if record.kind is CheckpointKind.GENERALIST_TRANSFORMER:
        return BanditVectorEnv(num_envs, bernoulli_bandit_spec(num_arms=7, horizon=30))
    if record.kind is CheckpointKind.LINEAR_GENERALIST_TRANSFORMER:
        return BanditVectorEnv(num_envs, linear_bandit_spec(dim=4, num_actions=6, horizon=30, noise_std=0.5))
    if record.kind is CheckpointKind.MDP_GENERALIST:
        return TabularMDPVectorEnv(num_envs, spec=MDPSpec(num_states=7, num_actions=4, horizon=6, episodes=3))
    if KINDS[record.kind].family.value == "tabular MDP":
        return TabularMDPVectorEnv(num_envs, spec=MDPSpec.from_dict(record.env))
    return BanditVectorEnv(num_envs, BanditSpec.from_dict(record.env))


def slow_quantile(values: Any, level: float) -> float:
    """The ``level`` quantile by a plain loop: sort, h = (n - 1) level, interpolate between x[floor h] and the next."""
    xs = sorted(float(v) for v in values)
    h = (len(xs) - 1) * level
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def slow_failure_fraction(totals: Any, reference: Any, factor: float = 3.0, floor: float = 20.0) -> float:
    """Count, run by run, the runs whose regret exceeds both factor x the reference's on that run and floor."""
    failed = 0
    for r, ref in zip(totals, reference, strict=True):
        if r > factor * ref and r > floor:
            failed += 1
    return failed / len(totals)


def raises(kind: type[BaseException] | tuple[type[BaseException], ...], *fragments: str) -> Any:
    """pytest.raises(kind) whose message contains every fragment (literally)."""
    return pytest.raises(kind, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


@functools.cache
def _beta_moment(a: float, b: float, s: int, f: int, extra: int) -> float:
    """int_0^1 p^(s + extra) (1 - p)^f Beta(p; a, b) dp by quadrature (no Beta-function identities)."""
    density = stats.beta(a, b).pdf
    return float(integrate.quad(lambda p: p ** (s + extra) * (1 - p) ** f * density(p), 0.0, 1.0, limit=200)[0])


def brute_force_family_q(horizon: int, priors: tuple, weights: tuple) -> Any:
    """Q(counts) -> [Q(counts, k) for every arm] of the Bayes-optimal play of a Bernoulli bandit whose arms
    are iid Beta(a_j, b_j) under prior j ~ ``weights``: counts ((s_1, f_1), ..., (s_K, f_K)), the
    predictive by quadrature and the value by enumerating the histories (a reference for the DP)."""

    @functools.cache
    def predictive(counts: tuple, k: int) -> float:
        # P(r = 1 | counts, arm k) = sum_j pi_j prod_i m_ij * (m'_kj / m_kj) / sum_j pi_j prod_i m_ij
        num = den = 0.0
        for (a, b), w in zip(priors, weights, strict=True):
            evidence = w * np.prod([_beta_moment(a, b, s, f, 0) for s, f in counts])
            num += evidence * _beta_moment(a, b, *counts[k], 1) / _beta_moment(a, b, *counts[k], 0)
            den += evidence
        return num / den

    @functools.cache
    def q(counts: tuple) -> list[float]:
        out = []
        for k in range(len(counts)):
            p = predictive(counts, k)
            win = tuple((s + 1, f) if i == k else (s, f) for i, (s, f) in enumerate(counts))
            lose = tuple((s, f + 1) if i == k else (s, f) for i, (s, f) in enumerate(counts))
            out.append(p * (1 + value(win)) + (1 - p) * value(lose))
        return out

    @functools.cache
    def value(counts: tuple) -> float:
        return 0.0 if sum(s + f for s, f in counts) == horizon else max(q(counts))

    return q
