"""The one training loop of every trainer: configuration fields and their checks, the step, the state, DDP.

Pretraining (:mod:`icrl_gym.training.pretrain`), online fine-tuning
(:mod:`icrl_gym.training.finetune`) and the generalist trainers
(:mod:`icrl_gym.training.generalist_task`) differ in their
batch, their loss, their evaluation and their checkpoint record; everything else is here, once:

- the fields every trainer has (:class:`TrainerConfig`: ``out_dir``, ``seed``, ``lr``,
  ``grad_clip``, ``device``, ``threads``; :class:`ScheduleConfig` adds ``steps``,
  ``warmup_steps``, ``min_lr_ratio`` and ``weight_decay``; :class:`GeneralistLoopConfig` adds those
  the three generalist trainers share), checked when a configuration is built,
  before any file is written: a refused value raises a ``ValueError`` naming the field, the value
  and the allowed range (:func:`icrl_gym.config.check_fields`);
- :func:`upgrade_config`, the one reader of older records (configuration files and the ``pretrain``
  record of shipped checkpoints): fields that were renamed keep their meaning;
- :func:`start_process` (threads, device, torchrun's process group), :func:`resume` (the committed
  state, its configuration compared with this run's), :func:`train_steps` (the loop and its one
  optimiser step, :func:`optimizer_step`) and :func:`save_state` (the one commit of a state);
- the data-parallel pieces (:func:`shard_rows`, :func:`scale_to_global_mean`,
  :func:`global_means`): every rank draws the same global batch, keeps its share of the rows and
  scales its loss so that DDP's average of the gradients is the gradient of the global mean.

The run itself (folder, resume, commits, evaluation cadence) is the
:class:`~icrl_gym.training.trainer.Trainer`'s; the generalist trainers' shared loop is in
:mod:`icrl_gym.training.generalist_task`.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from icrl_gym.config import (
    DEVICE,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    Allowed,
    DictConfig,
    check_fields,
    checked,
    dataclass_from_dict,
)
from icrl_gym.data.labels import upgrade_label_fields
from icrl_gym.training.distributed import DistContext, close_distributed, init_distributed
from icrl_gym.training.state import (
    RunFolderLock,
    RunState,
    TrainingState,
    check_config,
)
from icrl_gym.utils.cli import ConfigParser
from icrl_gym.utils.command import portable
from icrl_gym.utils.device import resolve_device

ConfigT = TypeVar("ConfigT", bound=DictConfig)
R = TypeVar("R")

# --- configuration ------------------------------------------------------------------------------

RENAMED_FIELDS = {"run_dir": "out_dir", "warmup": "warmup_steps"}
"""Older names of trainer fields -> today's (the generalist trainers once said ``run_dir`` and ``warmup``)."""


def upgrade_config(record: Mapping[str, Any]) -> dict[str, Any]:
    """A trainer configuration as any version recorded it, in today's fields (the one compatibility reader).

    Renamed fields (:data:`RENAMED_FIELDS`) take their new name; a pretraining record's label
    fields are read by :func:`icrl_gym.data.labels.upgrade_label_fields`.  A record that holds a
    field under both names with two values is refused (``ValueError`` naming both).
    """
    out: dict[str, Any] = {}
    for key, value in record.items():
        new = RENAMED_FIELDS.get(key, key)
        if new in out and out[new] != value:
            raise ValueError(f"a trainer configuration holds {key}={value!r} and its new name {new}={out[new]!r}")
        out[new] = value
    return upgrade_label_fields(out) if "label" in out else out


SEED = Allowed(low=0, high=2**63 - 1, integer=True)
"""A seed torch accepts (``torch.manual_seed`` takes 64-bit integers)."""
LEARNING_RATE = Allowed(low=0, high=1, strict=True)
"""A peak learning rate: larger values only overflow the weights."""
MAX_THREADS = 256
"""Upper bound of ``threads`` (OpenMP crashes when asked for tens of thousands)."""
THREADS = Allowed(low=0, high=MAX_THREADS, integer=True)


@dataclass
class TrainerConfig(DictConfig):
    """The fields every trainer has; a subclass adds its own (and its defaults) and its checks.

    Building one checks every field (the rules declared with :func:`~icrl_gym.config.checked`, then
    :meth:`check`), so a refused configuration never reaches a run folder.
    """

    out_dir: str = "runs/run"
    """Folder of the resumable training state, the checkpoints and the log."""
    seed: int = checked(0, SEED)
    """Seed of the initialisation and of every batch."""
    lr: float = checked(1e-3, LEARNING_RATE)
    """Peak learning rate."""
    grad_clip: float = checked(1.0, POSITIVE)
    """Gradient-norm clipping threshold."""
    device: str = checked("auto", DEVICE)
    """"auto" (CUDA when present), "cpu", "cuda" or "cuda:N"."""
    threads: int = checked(1, THREADS)
    """torch CPU threads per process (0: leave torch's default)."""

    # older field names the command line still reads (:func:`upgrade_config` reads them in records)
    renamed_fields: ClassVar[Mapping[str, str]] = RENAMED_FIELDS

    def __post_init__(self) -> None:
        check_fields(self)
        self.check()

    def check(self) -> None:
        """Checks across fields, after each field's own rule (``ValueError`` naming the fields)."""

    def check_order(self, *pairs: tuple[str, str]) -> None:
        """A ``ValueError`` naming every pair of fields ``(low, high)`` whose values are not low <= high."""
        name = type(self).__name__
        problems = [
            f"{name}.{low}={getattr(self, low)!r} must be <= {name}.{high}={getattr(self, high)!r}"
            for low, high in pairs
            if getattr(self, low) > getattr(self, high)
        ]
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_dict(cls: type[ConfigT], data: dict[str, Any]) -> ConfigT:
        """The configuration of ``data``, which may use older field names (:func:`upgrade_config`)."""
        return dataclass_from_dict(cls, upgrade_config(data))


@dataclass
class ScheduleConfig(TrainerConfig):
    """A trainer with a fixed number of AdamW steps under a warm-up + cosine learning rate."""

    steps: int = checked(5000, POSITIVE_INT)
    """Optimiser steps (the cosine schedule spans them)."""
    warmup_steps: int = checked(200, NONNEGATIVE_INT)
    """Linear warm-up steps."""
    min_lr_ratio: float = checked(0.05, PROBABILITY)
    """Learning rate at the end of the cosine schedule, as a fraction of lr."""
    weight_decay: float = checked(0.01, NONNEGATIVE)
    """AdamW weight decay."""


def warmup_cosine(step: int, lr: float, warmup: int, steps: int, min_lr_ratio: float) -> float:
    """The learning rate at ``step``: linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay.

    The decay reaches ``min_lr_ratio * lr`` at ``steps``.
    """
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass
class GeneralistLoopConfig(ScheduleConfig):
    """The fields both generalist trainers share; each trainer's configuration adds its own and its defaults."""

    out_dir: str = "runs/generalist"
    model: dict[str, Any] = field(default_factory=dict)
    """The model configuration's fields (defaults where left out)."""
    steps: int = 20_000
    warmup_steps: int = 500
    time_budget_hours: float = checked(3.5, POSITIVE)
    """Stop (and save) once the run's training wall time, summed over resumes, exceeds this."""
    min_arms: int = checked(2, POSITIVE_INT)
    """Smallest number of arms of a batch."""
    max_arms: int = checked(20, POSITIVE_INT)
    """Largest number of arms of a batch."""
    min_horizon: int = checked(20, POSITIVE_INT)
    """Smallest horizon T of a batch."""
    max_horizon: int = checked(500, POSITIVE_INT)
    """Largest horizon T of a batch."""
    queries: int = checked(16, POSITIVE_INT)
    """Query steps Q per trajectory at which the loss is computed."""
    min_batch: int = checked(4, POSITIVE_INT)
    """Fewest trajectories in a batch."""
    max_batch: int = checked(256, POSITIVE_INT)
    """Most trajectories in a batch."""
    max_epsilon: float = checked(0.5, PROBABILITY)
    """Exploration rate eps of a behaviour trajectory ~ U[0, max_epsilon]."""
    dagger_start: int = checked(5_000, NONNEGATIVE_INT)
    """Step from which batches may be rolled out by the model."""
    dagger_fraction: float = checked(0.15, PROBABILITY)
    """Probability that a batch (after dagger_start) is rolled out by the model."""
    cost_per_batch: float = checked(2.0e6, POSITIVE)
    """The compute budget of a batch; each trainer turns it into B (its docstring)."""
    label_temperature: float = checked(0.0, NONNEGATIVE)
    """0: hard targets (the expert's maximisers); > 0: softmax(index / label_temperature)."""
    log_every: int = checked(50, POSITIVE_INT)
    """Steps between log lines (averages over them)."""
    checkpoint_every: int = checked(250, POSITIVE_INT)
    """Steps between saved (resumable) states."""
    keep_every: int = checked(0, NONNEGATIVE_INT)
    """Besides the newest saved states, keep those of the steps that are multiples of this, to be evaluated or
    shipped later (0: the trainer's own choice, the newest two only for most)."""
    eval_every: int = checked(1_000, NONNEGATIVE_INT)
    """Steps between regret evaluations (0: never)."""
    eval_instances: int = checked(200, Allowed(low=2, integer=True))
    """Instances of the in-training regret evaluation (at least two: the standard error needs them)."""

    resumable_changes: ClassVar[tuple[str, ...]] = (
        "steps",
        "time_budget_hours",
        "log_every",
        "checkpoint_every",
        "keep_every",
        "eval_every",
        "eval_instances",
        "device",
        "threads",
    )
    """The fields a resumed run may change: the loop's (its length and budget, logging, evaluation size, device
    and threads) and those each trainer adds."""

    def checkpoint_fields(self) -> dict[str, Any]:
        """The trainer's fields of the checkpoint record: what the run trained on (env, trained_range, ...)."""
        raise NotImplementedError(f"{type(self).__name__} does not say what its checkpoints record")

    def check(self) -> None:
        """The ranges are ordered."""
        self.check_order(("min_arms", "max_arms"), ("min_horizon", "max_horizon"), ("min_batch", "max_batch"))


def learning_rate(cfg: ScheduleConfig, step: int) -> float:
    """:func:`warmup_cosine` with ``lr``, ``warmup_steps``, ``steps`` and ``min_lr_ratio``."""
    return warmup_cosine(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)


# --- the run: process, state, loop --------------------------------------------------------------


class Logger(Protocol):
    """A line logger (:class:`icrl_gym.utils.fileio.RunLog`)."""

    def __call__(self, msg: str) -> None:
        """Write one line."""
        ...


def no_log(msg: str) -> None:
    """The logger of the ranks other than 0 (only rank 0 writes)."""


def start_process(cfg: TrainerConfig) -> tuple[DistContext, torch.device]:
    """Set the torch threads (``threads`` > 0), resolve ``device`` and join torchrun's process group if any."""
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    return init_distributed(resolve_device(cfg.device))


def run_in_folder(cfg: TrainerConfig, body: Callable[[DistContext, torch.device], R]) -> R:
    """``body(ctx, device)`` after :func:`start_process`, with ``out_dir`` locked by rank 0 (:class:`RunFolderLock`).

    A folder another live process trains in is refused (:class:`~icrl_gym.training.state.RunFolderBusy`)
    before anything is read or written; the process group is left when ``body`` returns.
    """
    ctx, device = start_process(cfg)
    with RunFolderLock(cfg.out_dir) if ctx.is_main else contextlib.nullcontext():
        result = body(ctx, device)
    close_distributed(ctx)
    return result


def resume(
    store: RunState,
    cfg: TrainerConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    allowed: Iterable[str] = (),
) -> tuple[TrainingState | None, list[str]]:
    """The committed state of ``out_dir`` restored into the model and optimiser; ``None`` for a new run.

    The run's configuration (read by :func:`upgrade_config`) may differ from ``cfg`` only in
    ``out_dir`` (the folder may move) and the fields ``allowed``, whose changes are returned as
    ``"field: old -> new"`` lines; any other difference is a :class:`TrainingStateError` naming it.
    A field the saved configuration lacks was added to the trainer after the run was saved, and a
    field is only ever added with a default that keeps the earlier behaviour: the run counts as
    having used that default.  Nothing is written.
    """
    loaded = store.load()
    if loaded is None:
        return None, []
    saved = upgrade_config(loaded.config)
    added = {name: value for name, value in type(cfg)().to_dict().items() if name not in saved}
    changes = check_config(store.run_dir, added | saved, cfg.to_dict(), ("out_dir",), allowed)
    loaded.restore(model, optimizer)
    return loaded, changes


def optimizer_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float, grad_clip: float
) -> None:
    """One step: the learning rate ``lr`` for every group, the gradient of ``loss`` clipped to norm ``grad_clip``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()


def train_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    keep_going: Callable[[int], bool],
    loss_at: Callable[[int], tuple[torch.Tensor, dict[str, float]]],
    lr_at: Callable[[int], float],
    grad_clip: float,
    after_step: Callable[[int, dict[str, float], float], None],
) -> int:
    """The loop of every trainer, from ``step`` while ``keep_going(step)``; returns the steps done.

    Each step: ``loss_at(step)`` (the batch and the forward pass; it sets the model's mode), one
    :func:`optimizer_step` at ``lr_at(step)``, then ``after_step(step + 1, metrics, seconds)`` (the
    trainer's logging, evaluation and saving; ``seconds``: the step's wall time).
    """
    while keep_going(step):
        t0 = time.time()
        loss, metrics = loss_at(step)
        optimizer_step(model, optimizer, loss, lr_at(step), grad_clip)
        step += 1
        after_step(step, metrics, time.time() - t0)
    return step


def save_state(
    store: RunState,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: TrainerConfig,
    record: dict[str, Any],
    meta: dict[str, Any],
    publish: Mapping[str, str] | None = None,
    **save: Any,
) -> None:
    """Commit the state at ``step`` (:meth:`RunState.save`; ``save``: its other arguments), then publish.

    ``publish`` maps a checkpoint role to a stem in ``out_dir`` that receives a copy of it (pretraining's
    ``checkpoint``, fine-tuning's ``best``), for readers of a fixed name.
    """
    store.save(step, model, optimizer, cfg.to_dict(), record, meta, **save)
    for role, stem in (publish or {}).items():
        store.publish(store.run_dir / stem, role=role)


def wrap_ddp(model: torch.nn.Module, ctx: DistContext, device: torch.device, unused: bool = False) -> torch.nn.Module:
    """``model`` itself for one process, else its DistributedDataParallel wrapper (what the forward runs through)."""
    if not ctx.enabled:
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=unused)


def shard_rows(ctx: DistContext, rows: int) -> np.ndarray:
    """The rows of a batch of ``rows`` that belong to this rank: contiguous shares differing by at most one row."""
    if rows < ctx.world_size:
        raise ValueError(f"a batch of {rows} rows cannot be shared by {ctx.world_size} processes")
    return np.array_split(np.arange(rows), ctx.world_size)[ctx.rank]


def scale_to_global_mean(loss: torch.Tensor, ctx: DistContext, local: int, total: int) -> torch.Tensor:
    """A rank's mean loss over ``local`` of ``total`` rows, scaled so that DDP's gradient average is the global mean's.

        (1/N) sum_r (N n_r / B) mean_r  =  (1/B) sum_r sum_{i in r} l_i.

    One process: ``loss`` itself.
    """
    return loss * (ctx.world_size * local / total) if ctx.enabled else loss


def global_means(ctx: DistContext, metrics: dict[str, float], local: int, total: int) -> dict[str, float]:
    """Per-rank means over ``local`` of ``total`` rows -> the means over all rows (one process: unchanged)."""
    if not ctx.enabled:
        return metrics
    values = torch.tensor([metrics[k] * local / total for k in metrics], dtype=torch.float64)
    dist.all_reduce(values)
    return {k: float(v) for k, v in zip(metrics, values.tolist(), strict=True)}


def main(argv: list[str] | None, doc: str | None, config: type[ConfigT], train: Callable[[ConfigT], Any]) -> None:
    """``[CONFIG.json] [--set key=value ...]`` -> ``train(config)``: the generalist trainers' command line.

    Values are parsed by the fields' types (:mod:`icrl_gym.utils.cli`) and checked before any work
    starts (an argparse error naming the field otherwise); ``--help`` lists the fields with their
    docstrings.  A bare ``key=value`` after CONFIG.json, the form the shipped models' recorded
    commands use, is read as ``--set key=value``.  OpenMP gets one thread unless ``OMP_NUM_THREADS``
    says otherwise (``threads`` sets torch's).
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args = list(sys.argv[1:] if argv is None else argv)
    parser = ConfigParser(config, _module_name(train), doc or "", config_required=True)
    cfg, _ = parser.parse_config(_bare_overrides_as_set(args))
    train(cfg)


def main_with_export(
    argv: list[str] | None,
    doc: str | None,
    config: type[ConfigT],
    train: Callable[..., tuple[R, dict[str, Any]]],
    export: Callable[[R, dict[str, Any], str], Path],
) -> None:
    """``[CONFIG.json] [--set key=value ...] [--export PATH]`` -> ``train(config, command=...)``, then ``export``.

    The command line of the trainers that return what they trained with its record (pretraining,
    fine-tuning, meta-RL); with ``--export PATH``, ``export(trained, record, PATH)`` writes it as
    ``PATH.safetensors`` + ``PATH.json`` and the path is printed.
    """
    parser = ConfigParser(config, _module_name(train), doc or "")
    parser.add_argument("--export", metavar="PATH", help="write the trained model to PATH.safetensors + PATH.json")
    cfg, args = parser.parse_config(argv)
    trained, meta = train(cfg, command=portable(parser.command(argv)))
    if args.export:
        print(export(trained, meta, args.export))


def _module_name(fn: Callable[..., Any]) -> str:
    """The module of ``fn`` as it was started (``python -m icrl_gym.training.pretrain`` runs it as ``__main__``)."""
    module = fn.__module__
    if module == "__main__":
        module = getattr(sys.modules["__main__"].__spec__, "name", module)
    return module


def _bare_overrides_as_set(args: list[str]) -> list[str]:
    """``CONFIG.json a=1 --quiet b=2`` -> ``CONFIG.json --set a=1 --quiet --set b=2`` (``--set``'s own values stay)."""
    out: list[str] = []
    in_set = False
    for arg in args:
        if arg.startswith("-"):
            in_set = arg == "--set"
        elif "=" in arg and not in_set:
            out.append("--set")
        out.append(arg)
    return out
