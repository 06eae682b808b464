r"""Online fine-tuning of a pretrained in-context model on regret (beyond imitation).

The paper's limitation section asks whether online training lets a transformer surpass the
expert it imitated.  Starting from a pretrained model Alg_theta, each iteration draws N fresh
instances from the prior, rolls Alg_theta out M times on each for T steps (sampling, with the
model's cache) and takes a policy-gradient step on the expected return of the whole in-context run
(REINFORCE, Williams 1992), which is minus the Bayes regret up to a constant:

    grad J = -E[ sum_t grad log Alg_theta(a_t | D_{t-1}, A_t) * (Reg_t - b_t) ],
    Reg_t = sum_{s >= t} g_s      (regret-to-go: the per-step gaps g_s summed from step t on).

For a bandit transformer g_s = mu*_s - mu_{a_s}, the arms' mean rewards: this equals the
REINFORCE gradient of the return, as mu_{a_s} = <a_s, w*> replaces the sampled reward r_s
(E[r_s | D_{s-1}, a_s] = mu_{a_s}, and every score term with index <= s is D_{s-1}-measurable),
and the instance's best means mu*_s, fixed before a_t is drawn, act as a per-instance baseline
that removes most of the variance coming from the draw of w*.

The Bernoulli generalist (:class:`~icrl_gym.models.generalist.GeneralistTransformer`, any K and T)
is fine-tuned on a Bernoulli prior ``env`` with the same gaps, e.g. on a family of Beta priors that
it is not told (``prior="beta_family"``): the expected return is then the family-average of the
Bayes returns, whose maximiser is the family-Bayes policy (``agents.bandit.bernoulli_bayes_optimal``),
a target that no label from an expert told the prior can give.

For the MDP generalist (:class:`~icrl_gym.models.mdp_generalist.MDPGeneralist`, any S, A, H, K;
fine-tuned on one prior, ``env``) g_s = V*_h(s_h) - Q*_h(s_h, a_h) >= 0, the action's
suboptimality at step h of its episode (Appendix G's Q*).  By the performance-difference lemma
the gaps of an episode sum in expectation to V*_1(mu) minus the episode's expected return, for
any policy, so J = -E[sum_s g_s] exactly and the estimator above is unbiased (g_s is a function
of (s_h, a_h) and the instance, known once a_s is drawn); it drops the reward and transition noise
that the realised return carries.  The rollouts sample softmax(logits / tau) (``temperature``)
and the score is that policy's.

b_t is the leave-one-out mean of Reg_t over the other runs of the same instance when M >= 2
(``rollouts_per_instance``; the instance's difficulty cancels), over the other B - 1 runs of the
batch when M = 1; unbiased either way as the runs are independent given the instance.  The loss
is (1 / (B T)) sum_{b, t} (Reg_t - b_t) log pi(a_t), B = N M runs.  An optional KL penalty
beta * KL(Alg_theta || Alg_theta0) keeps the policy near the pretrained one.  Validation regret
on a fixed set of instances picks the checkpoint (a bandit transformer sampling its policy, the
MDP generalist in its agent's default deployment); the final comparison uses other fresh
instances (the harness's seed).  For the Bernoulli generalist on a family of Beta priors,
``validation="exact_family"`` picks it without noise instead: the model's greedy play is a
count-state policy, so its Bayes regret under each of the 16 Beta(a, b) priors (a, b in
{0.5, 1, 2, 5}) at K = 2, T = ``val_horizon`` is one backward pass over the count states, and the
score is its sum as a multiple of the family-Bayes DP's (:mod:`~icrl_gym.training.exact_bernoulli`).

Command line: ``python -m icrl_gym.training.finetune CONFIG.json [--set key=value ...] --export PATH`` (resumable
from out_dir), e.g. the MDP generalist on one cell of random MDPs::

    OMP_NUM_THREADS=1 python -m icrl_gym.training.finetune --set base=tabular-mdp-generalist \
        'env={"num_states": 20, "num_actions": 4, "horizon": 5, "episodes": 5}' \
        runs_per_iteration=32 rollouts_per_instance=4 temperature=1 lr=3e-4 iterations=400 \
        eval_every=100 val_runs=400 name=mdp-generalist-20-4-5-5 out_dir=runs/mdp-generalist-20-4-5-5
The run is a :class:`FinetuneTask` on the :class:`~icrl_gym.training.trainer.Trainer` (iterations
are its steps).  The method of a base checkpoint (its rollouts, advantages, logits and validation)
is the one its kind's row names (``finetune`` in :data:`~icrl_gym.kinds.KINDS`), looked up in
:data:`FINETUNE_METHODS`: :mod:`~icrl_gym.training.finetune_bandit`,
:mod:`~icrl_gym.training.finetune_generalist`, :mod:`~icrl_gym.training.finetune_mdp` and
:mod:`~icrl_gym.training.finetune_linear`; the
configuration and the loss are :mod:`~icrl_gym.training.finetune_core`'s.

At iteration 0 and at every validation the training state (weights, optimiser, RNG
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
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_gym.checkpoint import checkpoint_kind, load_checkpoint, resolve_checkpoint, save_checkpoint
from icrl_gym.kinds import KINDS, CheckpointKind
from icrl_gym.training.finetune_bandit import BanditFinetune
from icrl_gym.training.finetune_core import FinetuneConfig, FinetuneMethod, policy_gradient_loss
from icrl_gym.training.finetune_generalist import GeneralistFinetune
from icrl_gym.training.finetune_linear import LinearGeneralistFinetune
from icrl_gym.training.finetune_mdp import MDPGeneralistFinetune
from icrl_gym.training.loop import global_means, main_with_export, scale_to_global_mean, shard_rows
from icrl_gym.training.state import TrainingState
from icrl_gym.training.trainer import Trainer, TrainingTask
from icrl_gym.utils.memory import release_freed_memory

__all__ = ["FINETUNE_METHODS", "FINETUNABLE", "FinetuneConfig", "FinetuneTask", "export", "finetune", "main"]

FINETUNE_METHODS: dict[str, type[FinetuneMethod]] = {
    "bandit": BanditFinetune,
    "generalist": GeneralistFinetune,
    "mdp_generalist": MDPGeneralistFinetune,
    "linear_generalist": LinearGeneralistFinetune,
}
"""Method name (a kind row's ``finetune``) -> the fine-tuning method of that kind of model."""

FINETUNABLE = tuple(kind for kind, row in KINDS.items() if row.finetune is not None)
"""The kinds of checkpoint fine-tuning starts from (those whose row names a method)."""


def _load_base(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Load a checkpoint that must hold a model fine-tuning supports (:data:`FINETUNABLE`)."""
    model, meta = load_checkpoint(path, device=device)
    if checkpoint_kind(meta) not in FINETUNABLE:
        kinds = " or ".join(kind.value for kind in FINETUNABLE)
        raise ValueError(f"fine-tuning needs a {kinds} checkpoint; {path} holds a {checkpoint_kind(meta).value}")
    return model, meta


def widened(
    model: torch.nn.Module, meta: dict[str, Any], widen: dict[str, Any], seed: int = 0, drop: tuple[str, ...] = ()
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """``model`` rebuilt with the configuration fields ``widen`` set, holding its weights (``FinetuneConfig.widen``).

    The modules the fields add keep their initialisation, drawn under ``torch.manual_seed(seed)`` (the same
    weights every time); each starts at zero output, so a widened model plays as the base unless a field changes
    how it plays (a schedule) or a module is dropped.  The base's weights under the name prefixes ``drop``
    (``FinetuneConfig.drop``) are left out on purpose; any other base weight with no place in the new model is
    refused (``ValueError``), and so is a prefix that names no weight.  Returns the model and the record with
    the widened configuration.
    """
    if not widen and not drop:
        return model, meta
    state = model.state_dict()
    for prefix in drop:
        if not any(name.startswith(prefix) for name in state):
            raise ValueError(f"drop={list(drop)!r}: no weight of the base starts with {prefix!r}")
    kept = {name: w for name, w in state.items() if not name.startswith(tuple(drop))}
    config = type(model.config).from_dict({**meta["model"], **widen})  # type: ignore[union-attr]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wide = type(model)(config).to(next(model.parameters()).device)
    unexpected = wide.load_state_dict(kept, strict=False).unexpected_keys
    if unexpected:
        raise ValueError(f"widen={widen!r} leaves base weights without a place: {', '.join(unexpected)}")
    return wide.eval(), {**meta, "model": config.to_dict()}


def trained_parameters(model: torch.nn.Module, trainable: list[str]) -> list[torch.nn.Parameter]:
    """The parameters whose names start with one of ``trainable`` (all when empty); the others are frozen.

    ``ValueError`` when a prefix names no parameter (a typo would otherwise train nothing).
    """
    if not trainable:
        return list(model.parameters())
    names = [name for name, _ in model.named_parameters()]
    for prefix in trainable:
        if not any(name.startswith(prefix) for name in names):
            raise ValueError(f"trainable={trainable!r}: {prefix!r} names no parameter of the model")
    kept = []
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(any(name.startswith(prefix) for prefix in trainable))
        if parameter.requires_grad:
            kept.append(parameter)
    return kept


def method_for(cfg: FinetuneConfig, meta: dict[str, Any]) -> FinetuneMethod:
    """The method of the base checkpoint's kind, refusing the fields that kind does not take (``ValueError``)."""
    name = CheckpointKind(checkpoint_kind(meta)).entry.finetune
    assert name is not None  # _load_base admits only the kinds with a method
    if name != "linear_generalist":
        for field_name in ("tail_weight", "val_failure_weight"):
            if getattr(cfg, field_name):
                raise ValueError(f"{field_name} is the linear generalist's only; {cfg.base!r} is a {name} model")
    if name != "generalist":
        if cfg.validation == "exact_family":
            raise ValueError(
                f'validation="exact_family" is the Bernoulli generalist\'s only; {cfg.base!r} is a {name} model'
            )
        sizes = ("val_arms",) if name == "linear_generalist" else ("val_arms", "arms_choices", "horizon_choices")
        for field_name in sizes:
            if getattr(cfg, field_name):
                owners = "the Bernoulli generalist's" if field_name == "val_arms" else "the generalists'"
                raise ValueError(f"{field_name} is {owners} only; {cfg.base!r} is a {name} model")
    return FINETUNE_METHODS[name].for_base(cfg, meta)


class FinetuneTask(TrainingTask):
    """Fine-tuning as a :class:`~icrl_gym.training.trainer.TrainingTask`: one iteration is one step.

    A step's batch: the method's rollouts from ``default_rng([seed, iteration])``; its loss: the
    policy-gradient loss of this rank's share of the runs; every ``eval_every`` iterations and at the
    end rank 0 validates (each a commit), keeping the best validation regret (``best``).
    """

    label = "finetune"
    unit = "it"
    ddp_unused = True  # the value head gets no gradient
    publish = {"best": "best"}
    best = "val_regret"
    step_key = "iteration"

    def __init__(self, cfg: FinetuneConfig, command: str | None) -> None:
        self.cfg: FinetuneConfig = cfg
        self.command = command

    def build(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """The base checkpoint, its method (checked before any state is read or written), Adam."""
        cfg = self.cfg
        model, self.base_meta = widened(
            *_load_base(resolve_checkpoint(cfg.base), self.device), cfg.widen, cfg.seed, tuple(cfg.drop)
        )
        self.method = method_for(cfg, self.base_meta)
        self.base = copy.deepcopy(model).eval() if cfg.kl_weight > 0 else None
        return model, torch.optim.Adam(trained_parameters(model, cfg.trainable), lr=cfg.lr)

    def new_record(self) -> dict[str, Any]:
        """Iteration, history, wall time, the best validation, the commands and the configuration."""
        return {
            "iteration": 0,
            "history": [],
            "wall_seconds": 0.0,
            "best": None,
            "command": self.command,
            "command_history": [self.command],
            "config": self.cfg.to_dict(),  # exported records carry it (the harness reads it)
        }

    def resumed(self, loaded: TrainingState, changes: list[str]) -> dict[str, Any]:
        """The saved record, with this command and configuration (the same but for ``out_dir``)."""
        state = loaded.record
        state["command_history"] = [*state.get("command_history", [state.get("command")]), self.command]
        state["config"] = self.cfg.to_dict()
        self.log(f"resumed at iteration {state['iteration']} ({loaded.source})")
        return state

    def ddp_line(self) -> str:
        """Every process rolls out the same runs and takes its share."""
        return f"{self.ctx.world_size} processes share the runs of every iteration"

    def setup(self) -> None:
        """The clock."""
        self.t_start = time.perf_counter() - self.record["wall_seconds"]

    def start(self) -> None:
        """Rank 0 validates the pretrained model: iteration 0 of the history and the first best."""
        if not self.ctx.is_main:
            return
        start = self.method.validation_regret(self.model, self.device)
        details = getattr(self.method, "details", {})
        self.record["history"].append({"iteration": 0, "val_regret": start, **details, "wall_seconds": 0.0})
        self.record["best"] = {"iteration": 0, "val_regret": start}
        self.log(f"pretrained model: validation regret {start:.3f}")

    def keep_going(self, step: int) -> bool:
        """``iterations`` iterations."""
        return step < self.cfg.iterations

    def sample(self, step: int) -> dict[str, np.ndarray]:
        """The iteration's runs (the model in eval mode, no gradient), the same on every rank."""
        self.model.eval()
        runs = self.method.rollout(self.model, np.random.default_rng([self.cfg.seed, step]), self.device)
        self.model.train()
        return runs

    def loss(self, batch: dict[str, np.ndarray], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The advantages on all the runs, then the policy-gradient loss of this rank's rows."""
        ctx, runs = self.ctx, batch
        advantage, stats = self.method.advantages(runs)
        total = advantage.shape[0]
        rows = shard_rows(ctx, total)
        if ctx.enabled:  # every rank rolled out the same runs: each takes its rows
            runs, advantage = {k: v[rows] for k, v in runs.items()}, advantage[rows]
        logits = self.method.logits
        loss, local = policy_gradient_loss(
            self.net, self.base, runs, advantage, self.cfg.kl_weight, self.device, logits
        )
        stats.update(global_means(ctx, local, rows.size, total))
        return scale_to_global_mean(loss, ctx, rows.size, total), stats

    def after_step(self, step: int, metrics: dict[str, float], seconds: float) -> None:
        """The iteration; a log line every 5, after which the allocator hands freed pages back to the system."""
        self.record["iteration"] = step
        if step % 5 == 0:
            self.log(f"iteration {step}: batch regret {metrics['regret']:.2f}, loss {metrics['loss']:.4f}")
            release_freed_memory()

    def evaluate_now(self, step: int) -> bool:
        """Every ``eval_every`` iterations and at the end."""
        return step % self.cfg.eval_every == 0 or step == self.cfg.iterations

    def evaluate(self, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        """The validation regret: a history entry with the iteration's metrics."""
        val = self.method.validation_regret(self.model, self.device)
        self.record["wall_seconds"] = time.perf_counter() - self.t_start
        entry = {"iteration": step, "val_regret": val, **getattr(self.method, "details", {}), **metrics}
        self.record["history"].append(entry)
        return entry

    def curve_point(self, step: int, metrics: dict[str, float], entry: dict[str, Any]) -> tuple[float, float, float]:
        """The iteration's loss, the validation regret, the learning rate."""
        return metrics["loss"], entry["val_regret"], self.cfg.lr

    def evaluated(self, step: int, entry: dict[str, Any]) -> None:
        """The log line."""
        best = self.record["best"]["val_regret"]
        label = getattr(self.method, "worst_label", "worst prior")  # what val_worst is the worst of
        worst = f", {label} {entry['val_worst']:.4f}" if "val_worst" in entry else ""
        self.log(f"iteration {step}: validation regret {entry['val_regret']:.4f}{worst} (best {best:.4f})")

    def meta(self) -> dict[str, Any]:
        """The base's record with the run's (``finetune``)."""
        return {**self.base_meta, "finetune": self.record}

    def finish(self) -> tuple[torch.nn.Module, dict[str, Any]]:
        """Rank 0: the best validated model, named, with its record; another rank: its model."""
        if not self.ctx.is_main:
            return self.model, self.meta()
        best, best_meta = _load_base(self.store.checkpoint("best"), self.device)
        best_meta["name"] = self.cfg.name
        best_meta["finetune"] = {**self.record, "base": str(self.cfg.base), "base_name": self.base_meta.get("name")}
        return best, best_meta


def finetune(cfg: FinetuneConfig, command: str | None = None, echo: bool = True) -> tuple[torch.nn.Module, dict]:
    """Run (or resume) the fine-tuning; returns the best model on validation and its record."""
    return Trainer(cfg, FinetuneTask(cfg, command), echo).run()


def export(model: torch.nn.Module, meta: dict[str, Any], path: str | Path) -> Path:
    """Write the best model as ``<path>.safetensors`` + ``<path>.json`` (a shippable checkpoint)."""
    return save_checkpoint(path, model, meta)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m icrl_gym.training.finetune [CONFIG.json] [--set key=value ...] [--export PATH]``."""
    main_with_export(argv, __doc__, FinetuneConfig, finetune, export)


if __name__ == "__main__":
    main()
