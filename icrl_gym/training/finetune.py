"""Online fine-tuning of a pretrained in-context transformer on regret (beyond imitation).

The paper's limitation section asks whether online training lets a transformer surpass the
expert it imitated.  Starting from a pretrained model Alg_theta, each iteration draws B fresh
instances from the prior, rolls Alg_theta out for T steps (sampling, with the KV cache) and takes
a policy-gradient step on the expected return of the whole in-context run (REINFORCE, Williams
1992), which is minus the Bayes regret up to a constant:

    grad J = -E[ sum_t grad log Alg_theta(a_t | D_{t-1}, A_t) * (Reg_t - b_t) ],
    Reg_t = sum_{s >= t} (mu*_s - mu_{a_s})      (regret-to-go with the arms' mean rewards),

which equals the REINFORCE gradient of the return: mu_{a_s} = <a_s, w*> replaces the sampled
reward r_s (E[r_s | D_{s-1}, a_s] = mu_{a_s}, and every score term with index <= s is
D_{s-1}-measurable), and the instance's best means mu*_s, fixed before a_t is drawn, act as a
per-instance baseline that removes most of the variance coming from the draw of w*.  b_t is the
leave-one-out mean of Reg_t over the other B - 1 runs (unbiased as the runs are independent).
An optional KL penalty beta * KL(Alg_theta || Alg_theta0) keeps the policy near the pretrained
one.  Validation regret on a fixed set of instances picks the checkpoint; the final comparison
uses other fresh instances (the harness's seed).

Command line: ``python -m icrl_gym.training.finetune CONFIG.json [--set key=value ...] --export PATH`` (resumable
from out_dir).  At iteration 0 and at every validation the training state (weights, optimiser, RNG
states, iteration, history, and the best validated weights) is committed to ``out_dir`` as one
verified unit (:mod:`icrl_gym.training.state`), and the best model is copied to
``out_dir/best.safetensors`` + ``best.json``; a resumed run continues exactly, also from a moved folder.
Under ``torchrun`` every rank rolls out the same B runs and computes the advantages on all of them
(the baseline needs every run), then takes the policy-gradient step on its share of the runs
(:mod:`icrl_gym.training.loop`); rank 0 validates and writes.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
import torch.nn.functional as F

from icrl_gym.algorithm import BanditAgent
from icrl_gym.checkpoint import checkpoint_kind, load_checkpoint, resolve_checkpoint, save_checkpoint
from icrl_gym.config import NONNEGATIVE, POSITIVE_INT, Allowed, checked
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditBatch, BanditSpec
from icrl_gym.models.transformer import BanditTransformer
from icrl_gym.registry import agent_class
from icrl_gym.training.curves import TrainingCurves
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.loop import (
    Logger,
    TrainerConfig,
    global_means,
    main_with_export,
    no_log,
    resume,
    run_in_folder,
    save_state,
    scale_to_global_mean,
    shard_rows,
    train_steps,
    wrap_ddp,
)
from icrl_gym.training.state import RunState, set_rng_state
from icrl_gym.utils.fileio import RunLog
from icrl_gym.utils.progress import progress_bar


@dataclass
class FinetuneConfig(TrainerConfig):
    """An online fine-tuning run (saved with every checkpoint).

    The shared fields (``out_dir``, ``seed``: of the instances and of the sampling, ``lr``: Adam's,
    ``grad_clip``, ``device``, ``threads``) are :class:`~icrl_gym.training.loop.TrainerConfig`'s.
    """

    name: str = "bernoulli-ad-ucb-finetuned"
    """Name of the exported model."""
    base: str = "bernoulli-ad-ucb"
    """The pretrained checkpoint to start from (a path or a shipped name)."""
    iterations: int = checked(300, POSITIVE_INT)
    """Policy-gradient steps."""
    runs_per_iteration: int = checked(128, Allowed(low=2, integer=True))
    """Fresh instances B per step (at least two: a run's leave-one-out baseline is the mean over the B - 1 others)."""
    lr: float = 3e-5
    kl_weight: float = checked(0.0, NONNEGATIVE)
    """beta of the KL penalty to the pretrained policy (0: none)."""
    val_runs: int = checked(1000, POSITIVE_INT)
    """Validation instances (fixed seed) for choosing the checkpoint."""
    eval_every: int = checked(25, POSITIVE_INT)
    """Iterations between validations (and resumable checkpoints)."""
    out_dir: str = "runs/bernoulli-ad-ucb-finetuned"


VALIDATION_SEED = 777_000
"""Validation instances use seed ``VALIDATION_SEED + seed`` (the harness uses 0 and 10**7)."""


class _InMemoryAgentClass(Protocol):
    """An agent class that wraps an in-memory model (the registered ``"transformer"``'s ``from_model``)."""

    def from_model(
        self, model: BanditTransformer, meta: dict[str, Any] | None = None, greedy: bool = False, seed: Any = None
    ) -> BanditAgent:
        """The agent playing ``model`` without reading a checkpoint."""
        ...


def _agent_from_model(model: BanditTransformer, seed: Any) -> BanditAgent:
    """The registered bandit transformer agent around ``model`` (looked up by name: icrl_gym never imports agents)."""
    return cast(_InMemoryAgentClass, agent_class("transformer")).from_model(model, seed=seed)


def _load_bandit_transformer(path: str | Path, device: torch.device) -> tuple[BanditTransformer, dict[str, Any]]:
    """Load a checkpoint that must hold a bandit transformer (fine-tuning supports only those)."""
    model, meta = load_checkpoint(path, device=device)
    if not isinstance(model, BanditTransformer):
        raise ValueError(
            f"fine-tuning needs a bandit transformer checkpoint; {path} holds a {checkpoint_kind(meta).value}"
        )
    return model, meta


def rollout(
    model: BanditTransformer,
    spec: BanditSpec,
    num_runs: int,
    rng: np.random.Generator,
    device: torch.device,
    instance: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Sample ``num_runs`` in-context runs from the model (KV cache, no gradient).

    ``instance`` may fix ``w_star`` (and ``action_sets``) instead of drawing them from the prior.
    """
    agent = _agent_from_model(model, seed=rng)  # the agent's cached rollout around our model
    batch = BanditBatch(spec, num_runs, rng, **(instance or {}))
    agent.reset(batch_size=num_runs, dim=spec.dim, num_actions=spec.num_actions)
    T = spec.horizon
    sets = np.zeros((num_runs, T, spec.num_actions, spec.dim), np.float32)
    actions = np.zeros((num_runs, T), np.int64)
    rewards = np.zeros((num_runs, T), np.float32)
    means = np.zeros((num_runs, T))
    best = np.zeros((num_runs, T))
    for t in range(T):
        sets[:, t] = batch.action_sets
        a = agent.act_batch(sets[:, t])
        out = batch.step(a)
        agent.update_batch(sets[:, t], a, out["reward"])
        actions[:, t], rewards[:, t] = a, out["reward"]
        means[:, t], best[:, t] = out["expected_reward"], out["best_expected_reward"]
    return {"action_sets": sets, "actions": actions, "rewards": rewards, "means": means, "best": best}


def advantages(runs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """Reg_t - b_t (B, T): the regret-to-go minus its leave-one-out mean over the batch (module docstring).

    Computed on the whole batch (the baseline of a run is the mean of the others), before a
    data-parallel rank takes its rows; also the batch's mean regret.
    """
    gaps = runs["best"] - runs["means"]
    to_go = np.flip(np.cumsum(np.flip(gaps, axis=1), axis=1), axis=1)  # Reg_t
    B = to_go.shape[0]
    baseline = (to_go.sum(axis=0, keepdims=True) - to_go) / (B - 1)  # leave-one-out mean
    return to_go - baseline, {"regret": float(gaps.sum(axis=1).mean())}


def policy_gradient_loss(
    model: BanditTransformer | torch.nn.Module,
    base: BanditTransformer | None,
    runs: dict[str, np.ndarray],
    advantage: np.ndarray,
    kl_weight: float,
    device: torch.device,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The model's forward pass for training: the REINFORCE loss of ``advantage`` (B, T) (+ the KL penalty).

    ``model`` may be the DistributedDataParallel wrapper of a :class:`BanditTransformer`.
    """
    sets = torch.as_tensor(runs["action_sets"], device=device)
    actions = torch.as_tensor(runs["actions"], device=device)
    rewards = torch.as_tensor(runs["rewards"], device=device)
    logits, _ = model(sets, actions, rewards)
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, actions[..., None])[..., 0]  # (B, T)
    weight = torch.as_tensor(advantage.astype(np.float32), device=device)
    loss = (weight * logp).sum(dim=1).mean() / advantage.shape[1]
    stats = {}
    if kl_weight > 0 and base is not None:
        with torch.no_grad():
            base_logp = F.log_softmax(base(sets, actions, rewards)[0], dim=-1)
        kl = (logp_all.exp() * (logp_all - base_logp)).sum(-1).mean()
        loss = loss + kl_weight * kl
        stats["kl"] = float(kl.detach())
    stats["loss"] = float(loss.detach())
    return loss, stats


def validation_regret(model: BanditTransformer, spec: BanditSpec, cfg: FinetuneConfig, device) -> float:
    """Mean regret of the sampled policy on the fixed validation instances."""
    agent = _agent_from_model(model, seed=VALIDATION_SEED + cfg.seed)
    model.eval()
    regret = evaluate_regret(spec, agent, cfg.val_runs, seed=VALIDATION_SEED + cfg.seed, batch_size=cfg.val_runs)
    return float(regret.sum(axis=1).mean())


def _save_state(
    store: RunState,
    model: BanditTransformer,
    optimizer: torch.optim.Optimizer,
    cfg: FinetuneConfig,
    state: dict[str, Any],
    base_meta: dict[str, Any],
) -> None:
    """Commit the state at ``state["iteration"]`` (keeping the best weights), then copy the best to ``out_dir/best``."""
    meta = {**base_meta, "finetune": state}
    keep = {"best": state["best"]["iteration"]}
    save_state(store, state["iteration"], model, optimizer, cfg, state, meta, publish={"best": "best"}, also_keep=keep)


def finetune(cfg: FinetuneConfig, command: str | None = None, echo: bool = True) -> tuple[BanditTransformer, dict]:
    """Run (or resume) the fine-tuning; returns the best model on validation and its record."""
    return run_in_folder(cfg, lambda ctx, device: _finetune(cfg, command, echo, ctx, device))


def _finetune(
    cfg: FinetuneConfig, command: str | None, echo: bool, ctx: DistContext, device: torch.device
) -> tuple[BanditTransformer, dict]:
    out = Path(cfg.out_dir)
    base_path = resolve_checkpoint(cfg.base)
    model, base_meta = _load_bandit_transformer(base_path, device)
    spec = BanditSpec.from_dict(base_meta["env"])
    base = copy.deepcopy(model).eval() if cfg.kl_weight > 0 else None
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    state: dict[str, Any] = {
        "iteration": 0,
        "history": [],
        "wall_seconds": 0.0,
        "best": None,
        "command": command,
        "command_history": [command],
        "config": cfg.to_dict(),  # exported records carry it (the harness reads it)
    }
    store = RunState(out, keep=1)
    loaded, _ = resume(store, cfg, model, optimizer)
    log: Logger = RunLog(out / "train.log", echo) if ctx.is_main else no_log
    if loaded is not None:
        state = loaded.record
        state["command_history"] = [*state.get("command_history", [state.get("command")]), command]
        state["config"] = cfg.to_dict()  # the same but for out_dir
        if ctx.is_main:
            store.publish(out / "best", role="best")  # renews a copy that a stop during the last one left unfinished
        log(f"resumed at iteration {state['iteration']} ({loaded.source})")
    elif ctx.is_main:
        start = validation_regret(model, spec, cfg, device)
        state["history"].append({"iteration": 0, "val_regret": start, "wall_seconds": 0.0})
        state["best"] = {"iteration": 0, "val_regret": start}
        _save_state(store, model, optimizer, cfg, state, base_meta)
        log(f"pretrained model: validation regret {start:.3f}")
    if ctx.enabled:
        log(f"DDP: {ctx.world_size} processes share the {cfg.runs_per_iteration} runs of every iteration")
    net = wrap_ddp(model, ctx, device, unused=True)  # the value head gets no gradient
    t_start = time.perf_counter() - state["wall_seconds"]
    # metrics.csv (+ TensorBoard): step = iteration, val = validation regret
    curves = TrainingCurves(out, start_step=state["iteration"]) if ctx.is_main else None
    bar = progress_bar(cfg.iterations, "finetune", unit="it", initial=state["iteration"])
    if loaded is not None:  # the generators as they were after the saved iteration: the run continues exactly
        set_rng_state(loaded.rng)

    def loss_at(it: int) -> tuple[torch.Tensor, dict[str, float]]:
        model.eval()
        runs = rollout(model, spec, cfg.runs_per_iteration, np.random.default_rng([cfg.seed, it]), device)
        model.train()
        advantage, stats = advantages(runs)
        rows = shard_rows(ctx, cfg.runs_per_iteration)
        if ctx.enabled:  # every rank rolled out the same runs: each takes its rows
            runs, advantage = {k: v[rows] for k, v in runs.items()}, advantage[rows]
        loss, local = policy_gradient_loss(net, base, runs, advantage, cfg.kl_weight, device)
        stats.update(global_means(ctx, local, rows.size, cfg.runs_per_iteration))
        return scale_to_global_mean(loss, ctx, rows.size, cfg.runs_per_iteration), stats

    def after_step(it: int, stats: dict[str, float], seconds: float) -> None:
        state["iteration"] = it
        bar.update(1)
        if it % 5 == 0:
            log(f"iteration {it}: batch regret {stats['regret']:.2f}, loss {stats['loss']:.4f}")
        if ctx.is_main and curves is not None and (it % cfg.eval_every == 0 or it == cfg.iterations):
            val = validation_regret(model, spec, cfg, device)
            state["wall_seconds"] = time.perf_counter() - t_start
            state["history"].append({"iteration": it, "val_regret": val, **stats})
            curves.record(it, stats["loss"], val, cfg.lr, state["wall_seconds"])
            if val < state["best"]["val_regret"]:
                state["best"] = {"iteration": it, "val_regret": val}
            _save_state(store, model, optimizer, cfg, state, base_meta)
            log(f"iteration {it}: validation regret {val:.3f} (best {state['best']['val_regret']:.3f})")

    train_steps(
        model,
        optimizer,
        state["iteration"],
        lambda it: it < cfg.iterations,
        loss_at,
        lambda it: cfg.lr,
        cfg.grad_clip,
        after_step,
    )
    bar.close()
    if curves is None:  # a rank other than 0: no validation, no files
        return model, {**base_meta, "finetune": state}
    curves.close()
    best, best_meta = _load_bandit_transformer(store.checkpoint("best"), device)
    best_meta["name"] = cfg.name
    best_meta["finetune"] = {**state, "base": str(cfg.base), "base_name": base_meta.get("name")}
    return best, best_meta


def export(model: BanditTransformer, meta: dict[str, Any], path: str | Path) -> Path:
    """Write the best model as ``<path>.safetensors`` + ``<path>.json`` (a shippable checkpoint)."""
    return save_checkpoint(path, model, meta)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m icrl_gym.training.finetune [CONFIG.json] [--set key=value ...] [--export PATH]``."""
    main_with_export(argv, __doc__, FinetuneConfig, finetune, export)


if __name__ == "__main__":
    main()
