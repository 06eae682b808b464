"""The one driver of every trainer: :class:`Trainer` runs a :class:`TrainingTask` (``learn()`` written once).

A trainer (pretraining, fine-tuning, the generalists) is a :class:`TrainingTask`: its model and
optimiser (:meth:`~TrainingTask.build`), the global batch of a step (:meth:`~TrainingTask.sample`),
the loss of this rank's share of it (:meth:`~TrainingTask.loss`) and its evaluation
(:meth:`~TrainingTask.evaluate`), plus what its record holds.  Everything else is the
:class:`Trainer`'s, once:

- the run folder: the torch threads, the device and torchrun's process group, ``out_dir`` locked by
  rank 0 for the run (:func:`~icrl_gym.training.loop.run_in_folder`), ``train.log``;
- resume: the committed state restored into the model and optimiser, the configuration compared with
  the saved one (:func:`~icrl_gym.training.loop.resume`), then, just before the first step, the RNG
  states as they were after the saved step (the run continues bit for bit); a new run commits step 0;
- DDP (the forward through :func:`~icrl_gym.training.loop.wrap_ddp`), the learning curves
  (``metrics.csv`` and TensorBoard, :class:`~icrl_gym.training.curves.TrainingCurves`) and the
  progress bar;
- the loop (:func:`~icrl_gym.training.loop.train_steps`), the evaluation cadence (rank 0 only), the
  commits (after every evaluation, or every ``commit_every`` steps) and the best checkpoint (the state
  keeps the best evaluated weights, published under a fixed name).

The order of everything that draws random numbers is the trainers' own from before the driver was
shared: the model is built (under ``torch.manual_seed(seed)`` where the task seeds it), the run is
resumed, the task's :meth:`~TrainingTask.setup` runs, then the RNG state is restored (a resumed run) or
:meth:`~TrainingTask.start` runs and step 0 is committed (a new run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from icrl_gym.training.curves import TrainingCurves
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.loop import (
    Logger,
    TrainerConfig,
    no_log,
    resume,
    run_in_folder,
    save_state,
    train_steps,
    wrap_ddp,
)
from icrl_gym.training.state import RunState, TrainingState, set_rng_state
from icrl_gym.utils.fileio import RunLog
from icrl_gym.utils.progress import progress_bar


class TrainingTask:
    """What one trainer supplies to :class:`Trainer`: its model, ``sample``, ``loss``, ``evaluate`` and record.

    The attributes ``ctx``, ``device``, ``log``, ``model``, ``optimizer``, ``net`` (the forward: the model or
    its DDP wrapper), ``store`` (the run's committed states) and ``record`` (the run's state, committed with
    every checkpoint) are set by the :class:`Trainer` as the run goes.
    """

    label: str | None = None
    """The progress bar's label (None: no bar)."""
    unit: str = "step"
    """What one step is called (the progress bar's unit)."""
    curves: bool = True
    """Whether rank 0 writes the learning curves (``metrics.csv``, TensorBoard) at every evaluation."""
    keep: int = 1
    """Committed states kept (:class:`~icrl_gym.training.state.RunState`)."""
    keep_every: int = 0
    """Steps between states that stay for the learning curve (0: none)."""
    ddp_unused: bool = False
    """Whether some parameters get no gradient (DDP's ``find_unused_parameters``)."""
    resumable: tuple[str, ...] = ()
    """The configuration fields a resumed run may change."""
    publish: dict[str, str] | None = None
    """Checkpoint role -> stem in ``out_dir`` that receives a copy of it at every commit (None: none)."""
    best: str | None = None
    """The record field of the evaluation value whose least is kept as the best checkpoint (None: no best)."""
    commit_every: int = 0
    """Steps between commits (0: a commit after every evaluation)."""
    step_key: str = "step"
    """The record's name of the steps done (and of the best checkpoint's step)."""

    cfg: TrainerConfig
    ctx: DistContext
    device: torch.device
    log: Logger
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    net: torch.nn.Module
    store: RunState
    record: dict[str, Any]

    # --- the pieces every task supplies ----------------------------------------------------------

    def build(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """The model (seeded as the task seeds it) and its optimiser, on ``self.device``."""
        raise NotImplementedError

    def sample(self, step: int) -> Any:
        """The global batch of ``step``."""
        raise NotImplementedError

    def loss(self, batch: Any, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of this rank's share of ``batch`` through ``self.net`` (scaled to the global mean), its metrics."""
        raise NotImplementedError

    def evaluate(self, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        """The evaluation at ``step`` (rank 0): a history entry; ``metrics`` are the step's."""
        raise NotImplementedError

    # --- the record and the cadence (defaults: a step counter, no evaluation) -----------------------

    def new_record(self) -> dict[str, Any]:
        """The record of a new run."""
        return {self.step_key: 0, "history": []}

    def resumed(self, loaded: TrainingState, changes: list[str]) -> dict[str, Any]:
        """The record of a resumed run (from ``loaded``), after logging what changed."""
        return loaded.record

    def ddp_line(self) -> str:
        """How the processes share a step (the log line of a data-parallel run)."""
        return f"{self.ctx.world_size} processes share the rows of every batch"

    def setup(self) -> None:
        """Before the RNG state is restored or step 0 is committed (e.g. the validation data)."""

    def start(self) -> None:
        """A new run, before its step 0 is committed (e.g. the evaluation of the starting weights)."""

    def keep_going(self, step: int) -> bool:
        """Whether to take step ``step`` (0-based)."""
        raise NotImplementedError

    def learning_rate(self, step: int) -> float:
        """The learning rate of step ``step``."""
        return self.cfg.lr

    def after_step(self, step: int, metrics: dict[str, float], seconds: float) -> None:
        """The record after ``step`` steps and the periodic log line."""
        self.record[self.step_key] = step

    def evaluated(self, step: int, entry: dict[str, Any]) -> None:
        """After an evaluation and its commit (e.g. its log line)."""

    def evaluate_now(self, step: int) -> bool:
        """Whether rank 0 evaluates after ``step`` steps."""
        return False

    def commit_now(self, step: int) -> bool:
        """With ``commit_every``: whether to commit after ``step`` steps."""
        return self.commit_every > 0 and step % self.commit_every == 0

    def curve_point(self, step: int, metrics: dict[str, float], entry: dict[str, Any]) -> tuple[float, float, float]:
        """(training loss, evaluation value, learning rate) of the curves at an evaluation."""
        raise NotImplementedError

    def wall_seconds(self) -> float:
        """The run's training wall time so far (the record's)."""
        return float(self.record.get("wall_seconds", 0.0))

    def meta(self) -> dict[str, Any]:
        """The checkpoint record (the JSON beside the weights)."""
        raise NotImplementedError

    def save_options(self) -> dict[str, Any]:
        """Further arguments of :meth:`RunState.save` (e.g. the model configuration)."""
        return {}

    def finish(self) -> Any:
        """What the run returns (default: the model)."""
        return self.model


CHANGED_ON_RESUME = "changed_on_resume"
"""The record's (and the checkpoint's) list of a run's resumes that changed its configuration: ``{"step": S,
"changes": ["field: old -> new", ...]}``, S the step the run resumed from (the steps before it ran under the old
values).  Absent where no resume changed anything."""


def with_resume_changes(meta: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint record ``meta`` with the run's :data:`CHANGED_ON_RESUME` list, where it has one."""
    if not record.get(CHANGED_ON_RESUME):
        return meta
    return {**meta, CHANGED_ON_RESUME: record[CHANGED_ON_RESUME]}


class Trainer:
    """Runs a :class:`TrainingTask` in ``cfg.out_dir``: resumable, data-parallel, with curves and best checkpoint."""

    def __init__(self, cfg: TrainerConfig, task: TrainingTask, echo: bool = True) -> None:
        self.cfg, self.task, self.echo = cfg, task, echo
        task.cfg = cfg

    def run(self) -> Any:
        """Train (or resume) the run; returns the task's :meth:`~TrainingTask.finish`."""
        return run_in_folder(self.cfg, self._run)

    def commit(self) -> None:
        """Commit the state at the record's step (rank 0): the weights, the optimiser, the RNG states and the record."""
        task = self.task
        if not task.ctx.is_main:
            return
        options = task.save_options()
        if task.best is not None:
            options["also_keep"] = {"best": task.record["best"][task.step_key]}
        save_state(
            self.store,
            task.record[task.step_key],
            task.model,
            task.optimizer,
            self.cfg,
            task.record,
            with_resume_changes(task.meta(), task.record),
            publish=task.publish,
            **options,
        )

    def _run(self, ctx: DistContext, device: torch.device) -> Any:
        task, out = self.task, Path(self.cfg.out_dir)
        task.ctx, task.device = ctx, device
        task.log = RunLog(out / "train.log", self.echo) if ctx.is_main else no_log
        task.model, task.optimizer = task.build()
        self.store = task.store = RunState(out, keep=task.keep, keep_every=task.keep_every)
        loaded, changes = resume(self.store, self.cfg, task.model, task.optimizer, task.resumable)
        task.record = task.new_record() if loaded is None else task.resumed(loaded, changes)
        if loaded is not None:  # the checkpoints say which steps ran under which values (the log may be lost)
            resumes = list(loaded.record.get(CHANGED_ON_RESUME, []))
            if changes:
                resumes.append({"step": task.record[task.step_key], "changes": list(changes)})
            if resumes:
                task.record[CHANGED_ON_RESUME] = resumes
        if ctx.enabled:
            task.log(f"DDP: {task.ddp_line()}")
        task.net = wrap_ddp(task.model, ctx, device, unused=task.ddp_unused)
        task.setup()
        step = task.record[task.step_key]
        curves = TrainingCurves(out, start_step=step) if ctx.is_main and task.curves else None
        bar = progress_bar(self._total(), task.label, unit=task.unit, initial=step) if task.label else None
        task.model.train()
        if loaded is not None:  # the generators as they were after the saved step: the run continues exactly
            set_rng_state(loaded.rng)
            if ctx.is_main and task.publish and self.store.committed and step > 0:
                for role, stem in task.publish.items():  # renews a copy a stop during the last one left unfinished
                    self.store.publish(out / stem, role=role)
        else:
            task.start()
            self.commit()  # step 0: a folder with a state is never a foreign one

        def loss_at(step: int) -> tuple[torch.Tensor, dict[str, float]]:
            return task.loss(task.sample(step), step)

        def after_step(step: int, metrics: dict[str, float], seconds: float) -> None:
            task.after_step(step, metrics, seconds)
            if bar is not None:
                bar.update(1)
            evaluated = ctx.is_main and task.evaluate_now(step)
            if evaluated:
                entry = task.evaluate(step, metrics)
                if curves is not None:
                    curves.record(step, *task.curve_point(step, metrics, entry), task.wall_seconds())
                if task.best is not None and entry[task.best] < task.record["best"][task.best]:
                    task.record["best"] = {task.step_key: step, task.best: entry[task.best]}
            if (evaluated and not task.commit_every) or (task.commit_every and task.commit_now(step)):
                self.commit()
            if evaluated:
                task.evaluated(step, entry)

        train_steps(
            task.model,
            task.optimizer,
            step,
            task.keep_going,
            loss_at,
            task.learning_rate,
            self.cfg.grad_clip,
            after_step,
        )
        if bar is not None:
            bar.close()
        if curves is not None:
            curves.close()
        return task.finish()

    def _total(self) -> int:
        return int(getattr(self.cfg, "steps", getattr(self.cfg, "iterations", 0)))
