"""The generalist trainers' loop as a :class:`~icrl_gym.training.trainer.TrainingTask`.

The generalist trainers (:mod:`icrl_gym.training.generalist`, :mod:`icrl_gym.training.linear_generalist`,
:mod:`icrl_gym.training.mdp_generalist`) share their configuration fields
(:class:`~icrl_gym.training.loop.GeneralistLoopConfig`) and their loop (:func:`train_generalist`, run by the
:class:`~icrl_gym.training.trainer.Trainer`): every step's batch comes from ``default_rng([seed, step])``
(from ``dagger_start`` on, with probability ``dagger_fraction``, rolled out by the model: DAgger), a log line
every ``log_every`` steps, an evaluation every ``eval_every``, a committed state every ``checkpoint_every``
and at the end, under a wall-time budget ``time_budget_hours`` (the run's stop condition, with ``steps``).

Resumable bit for bit: every ``checkpoint_every`` steps the training state (the weights as the checkpoint
``checkpoints/step_NNNNNNN``, the optimiser, the RNG states, the step, the configuration and the history)
is committed as one verified unit (:mod:`icrl_gym.training.state`, manifest ``resume.json``; the last two
checkpoints stay); a restarted run (the same command) continues from it, also from a moved ``out_dir``.
Resuming with other values of the fields that define the training is refused, naming them; those of the
configuration's ``resumable_changes`` may change.  The training wall time is summed over resumes (recorded
in every checkpoint).

Each trainer runs as ``python -m icrl_gym.training.TRAINER CONFIG.json``, or the same module under
``torchrun --standalone --nproc_per_node=N -m icrl_gym.training.TRAINER CONFIG.json`` with
DistributedDataParallel: every rank draws the same batch and trains on its share of the trajectories
(:mod:`icrl_gym.training.loop`); rank 0 logs, evaluates and writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from icrl_gym.checkpoint import PLAY_FIELD
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.loop import (
    GeneralistLoopConfig,
    Logger,
    global_means,
    learning_rate,
    scale_to_global_mean,
    shard_rows,
)
from icrl_gym.training.state import TrainingState, TrainingStateError
from icrl_gym.training.trainer import Trainer, TrainingTask
from icrl_gym.utils.command import typed_command
from icrl_gym.utils.fileio import atomic_write_bytes

ModelT = TypeVar("ModelT", bound=torch.nn.Module)


class ShardableBatch(Protocol):
    """A generalist training batch: B trajectories that a rank can take a share of."""

    @property
    def size(self) -> int:
        """B."""
        ...

    def rows(self, index: np.ndarray) -> Any:
        """The batch of the trajectories ``index``."""
        ...


GBatchT = TypeVar("GBatchT", bound=ShardableBatch)


SOFT_LABEL_METRICS = {"loss": ".4f", "kl": ".4f", "agree": ".3f"}
"""The metrics of :func:`soft_label_loss` and their formats in the log line."""


def soft_label_loss(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The cross-entropy of ``logits`` (..., A) to the target distributions ``target`` (..., A), and its metrics.

    loss = mean over rows of -sum_a p(a) log softmax(z)(a); ``kl``: loss minus the targets' entropy, the
    KL divergence of the model's distribution from the target's (0 at a perfect imitation); ``agree``: the
    fraction of rows whose argmax has positive target mass (an action the target could take).
    """
    loss = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    entropy = -(target * torch.log(target.clamp_min(1e-30))).sum(-1).mean()
    agree = target.gather(-1, logits.argmax(-1, keepdim=True)).squeeze(-1) > 0
    return loss, {"loss": loss.item(), "kl": (loss - entropy).item(), "agree": agree.float().mean().item()}


@dataclass
class GeneralistTrainer(Generic[ModelT, GBatchT]):
    """What a generalist trainer passes to :func:`train_generalist`: its model, batch, loss and evaluation.

    What its checkpoints record and which fields a resumed run may change are its configuration's
    (:meth:`~icrl_gym.training.loop.GeneralistLoopConfig.checkpoint_fields`,
    :attr:`~icrl_gym.training.loop.GeneralistLoopConfig.resumable_changes`);
    the checkpoint kind is the model class's row of the kind table.
    """

    model: ModelT
    """The model (built under ``torch.manual_seed(seed)``, on the run's device)."""
    sample: Callable[[np.random.Generator, ModelT | None], GBatchT]
    """``sample(rng, policy)``: the global batch of a step, rolled out by ``policy`` (the model, in eval mode and
    without gradients) when it is not None, else by the trainer's behaviour policy."""
    loss: Callable[[torch.nn.Module, GBatchT, torch.device], tuple[torch.Tensor, dict[str, float]]]
    """``loss(net, batch, device)``: the mean loss over the batch's rows through ``net`` (the model or its DDP
    wrapper), the rows moved to the run's ``device``."""
    evaluate: Callable[[int, Logger], dict[str, Any]]
    """``evaluate(step, log)``: a history entry of the in-training evaluation."""
    metrics: Mapping[str, str] = field(default_factory=lambda: dict(SOFT_LABEL_METRICS))
    """The metrics of the log line (name -> format spec; default: :func:`soft_label_loss`'s)."""
    keep_every: int = 0
    """Steps between the checkpoints that stay for the learning curve (0: none)."""
    after_log: Callable[[], None] | None = None
    """Called after every log line."""
    init: Callable[[], tuple[float, str, dict[str, Any] | None]] | None = None
    """A new run's start (weights of another run): the training wall seconds it counts, a log line ('': none) and
    the checkpoint it read, ``{"checkpoint": NAME, "weights_sha256": ..., "play": ...}`` (None: none), which the
    record keeps as ``initialised_from``: a shipped name may later go to other weights.  ``play`` is the start's
    play defaults where its record has them (:func:`~icrl_gym.checkpoint.set_play`); the run's checkpoints carry
    them, so that a continued model is played as its start was (:func:`generalist_meta`)."""


INITIALISED_FROM = "initialised_from"
"""The record's (and the checkpoint's ``training``) entry naming the checkpoint a new run started from, by name and
weights' SHA-256."""


def generalist_meta(
    cfg: GeneralistLoopConfig, record: Mapping[str, Any], fields: Mapping[str, Any], device: str
) -> dict:
    """The checkpoint record: ``fields``, ``pretrain`` (the configuration) and ``training`` (steps, time, history).

    A run started from a checkpoint whose record sets play defaults (``initialised_from`` holds them) carries
    them in its own ``play`` field, with the start named: a student of the shipped Bernoulli family model is a
    continuation of a model that plays with the fresh-arm floor, and an evaluation that names only the
    checkpoint must play it so (``checkpoint play`` changes or removes them, as for any record).
    """
    start = record.get(INITIALISED_FROM) or {}
    play = start.get(PLAY_FIELD)
    return {
        **fields,
        **({PLAY_FIELD: {**play, "carried_from": start["checkpoint"]}} if play else {}),
        "pretrain": cfg.to_dict(),
        "training": {
            "steps": record["step"],
            "planned_steps": cfg.steps,
            "wall_time_s": record["wall_time_s"],
            "time_budget_hours": cfg.time_budget_hours,
            "threads": torch.get_num_threads(),
            "device": device,
            "seed": cfg.seed,
            "command": typed_command(),
            "history": record["history"][-200:],
            **({INITIALISED_FROM: record[INITIALISED_FROM]} if record.get(INITIALISED_FROM) else {}),
        },
    }


class GeneralistTask(TrainingTask):
    """A generalist trainer (its :class:`GeneralistTrainer`, made by ``make(device, ctx)``) as a training task.

    The record holds the steps done, the training wall seconds (summed over resumes) and the history (log
    averages and evaluations).  A commit every ``checkpoint_every`` steps and at the end (``steps`` reached or
    the ``time_budget_hours`` spent); no learning curves, no best checkpoint, no progress bar.
    """

    keep = 2
    curves = False

    def __init__(self, cfg: GeneralistLoopConfig, make: Callable[[torch.device, DistContext], GeneralistTrainer]):
        self.cfg: GeneralistLoopConfig = cfg
        self.make = make
        self.commit_every = cfg.checkpoint_every
        self.resumable = cfg.resumable_changes
        self.budget = cfg.time_budget_hours * 3600

    def build(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """The trainer's pieces after ``torch.manual_seed(seed)``; AdamW over all parameters."""
        cfg, ctx = self.cfg, self.ctx
        if cfg.min_batch < ctx.world_size:
            raise ValueError(f"min_batch={cfg.min_batch} must be >= the {ctx.world_size} processes (each takes rows)")
        torch.manual_seed(cfg.seed)
        self.pieces = self.make(self.device, ctx)
        self.keep_every = cfg.keep_every or self.pieces.keep_every
        model = self.pieces.model
        return model, torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def new_record(self) -> dict[str, Any]:
        """Step 0, after the trainer's start (``init``: weights of another run and the wall seconds they count)."""
        wall, line, start = self.pieces.init() if self.pieces.init is not None else (0.0, "", None)
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log(f"new run: {n_params} parameters, config {json.dumps(self.cfg.to_dict())}")
        if line:
            self.log(line)
        return {"step": 0, "wall_time_s": wall, "history": [], **({INITIALISED_FROM: start} if start else {})}

    def resumed(self, loaded: TrainingState, changes: list[str]) -> dict[str, Any]:
        """The saved record whole (steps, wall time, history, start), once the checkpoints read hold the same weights.

        A field of the record that names a checkpoint by its weights (a teacher: ``{"checkpoint": NAME,
        "weights_sha256": ...}``) must hold the run's weights now: a shipped name can move to other weights when a
        new model ships under it (the old one kept under a versioned name, which the resumed configuration may
        name instead), and resuming on another teacher would silently mix two runs.
        """
        now = self.cfg.checkpoint_fields()
        for key, saved in loaded.meta.items():
            if not (isinstance(saved, Mapping) and "weights_sha256" in saved and isinstance(now.get(key), Mapping)):
                continue
            if now[key].get("weights_sha256") != saved["weights_sha256"]:
                raise TrainingStateError(
                    f"{self.cfg.out_dir}: the run's {key} {saved.get('checkpoint')!r} held the weights with SHA-256 "
                    f"{saved['weights_sha256']}, and {now[key].get('checkpoint')!r} now holds "
                    f"{now[key].get('weights_sha256')}: name the checkpoint that holds the run's weights"
                )
        wall = loaded.record["wall_time_s"]
        self.log(f"resumed from {loaded.source} at step {loaded.step} ({wall / 3600:.2f} h of training so far)")
        for change in changes:
            self.log(f"changed on resume: {change}")
        return {**loaded.record, "step": loaded.step}  # the saved record whole, as every task keeps it

    def setup(self) -> None:
        """``config.json`` (rank 0: written once the run is accepted, so a refused run changes no file)."""
        if self.ctx.is_main:
            atomic_write_bytes(
                Path(self.cfg.out_dir) / "config.json", json.dumps(self.cfg.to_dict(), indent=2).encode()
            )
        self.sums: dict[str, float] = {}
        self.count, self.t_log = 0, time.time()

    def keep_going(self, step: int) -> bool:
        """``steps`` steps within the wall-time budget."""
        return step < self.cfg.steps and self.record["wall_time_s"] < self.budget

    def learning_rate(self, step: int) -> float:
        """Warm-up then cosine (:func:`~icrl_gym.training.loop.learning_rate`)."""
        return learning_rate(self.cfg, step)

    def sample(self, step: int) -> tuple[ShardableBatch, bool]:
        """The global batch of ``step`` from ``default_rng([seed, step])`` and whether the model rolled it out."""
        cfg, model = self.cfg, self.model
        rng = np.random.default_rng([cfg.seed, step])
        use_model = step >= cfg.dagger_start and rng.random() < cfg.dagger_fraction
        if use_model:
            model.eval()
        with torch.no_grad():
            batch = self.pieces.sample(rng, model if use_model else None)
        model.train()
        return batch, use_model

    def loss(self, batch: tuple[ShardableBatch, bool], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The trainer's loss over this rank's rows, scaled to the global mean; the metrics with ``dagger``."""
        whole, use_model = batch
        ctx = self.ctx
        rows = shard_rows(ctx, whole.size)
        local = whole.rows(rows) if ctx.enabled else whole
        loss, values = self.pieces.loss(self.net, local, self.device)
        values = global_means(ctx, values, rows.size, whole.size)
        return scale_to_global_mean(loss, ctx, rows.size, whole.size), {**values, "dagger": float(use_model)}

    def after_step(self, step: int, metrics: dict[str, float], seconds: float) -> None:
        """The steps and wall seconds; every ``log_every`` steps a log line and a history entry of the averages."""
        record = self.record
        record["step"] = step
        record["wall_time_s"] += seconds
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        self.count += 1
        if step % self.cfg.log_every == 0:
            avg = {key: value / self.count for key, value in self.sums.items()}
            shown = " ".join(f"{name} {avg[name]:{spec}}" for name, spec in self.pieces.metrics.items())
            self.log(
                f"step {step} {shown} dagger {avg['dagger']:.2f} lr {learning_rate(self.cfg, step - 1):.2e} "
                f"{(time.time() - self.t_log) / self.count:.3f} s/step wall {record['wall_time_s'] / 3600:.2f} h"
            )
            record["history"].append({"step": step, **{k: round(v, 5) for k, v in avg.items()}})
            if self.pieces.after_log is not None:
                self.pieces.after_log()
            self.sums, self.count, self.t_log = {}, 0, time.time()

    def evaluate_now(self, step: int) -> bool:
        """Every ``eval_every`` steps (0: never)."""
        return bool(self.cfg.eval_every) and step % self.cfg.eval_every == 0

    def evaluate(self, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        """The trainer's evaluation (the model in eval mode), appended to the history."""
        self.model.eval()
        entry = self.pieces.evaluate(step, self.log)
        self.record["history"].append(entry)
        return entry

    def commit_now(self, step: int) -> bool:
        """Every ``checkpoint_every`` steps and at the end (``steps`` reached or the budget spent)."""
        return step % self.cfg.checkpoint_every == 0 or step >= self.cfg.steps or self.wall_seconds() >= self.budget

    def wall_seconds(self) -> float:
        """The training wall seconds, summed over resumes."""
        return float(self.record["wall_time_s"])

    def meta(self) -> dict[str, Any]:
        """:func:`generalist_meta` with the trainer's checkpoint fields."""
        device = str(next(self.model.parameters()).device)
        return generalist_meta(self.cfg, self.record, self.cfg.checkpoint_fields(), device)

    def save_options(self) -> dict[str, Any]:
        """The model configuration."""
        return {"model_config": self.pieces.model.config.to_dict()}

    def finish(self) -> torch.nn.Module:
        """The last log line; the model."""
        self.log(f"done at step {self.record['step']} ({self.record['wall_time_s'] / 3600:.2f} h of training)")
        return self.model


def train_generalist(
    cfg: GeneralistLoopConfig, echo: bool, build: Callable[[torch.device, DistContext], GeneralistTrainer[ModelT, Any]]
) -> ModelT:
    """Train (or resume) a generalist run in ``cfg.out_dir``; returns the model ``build`` made.

    ``build(device, ctx)`` makes the trainer's pieces (after the model is seeded); the
    :class:`~icrl_gym.training.trainer.Trainer` runs them (:class:`GeneralistTask`): on resume the RNG
    states are restored before the first step, a new run commits step 0.  Every step: the global batch
    ``sample(rng, use_model)`` with ``rng = default_rng([seed, step])``, this rank's rows of it, ``loss``
    scaled to the global mean, one optimiser step.  Only rank 0 logs, evaluates and writes.
    """
    return Trainer(cfg, GeneralistTask(cfg, build), echo).run()
