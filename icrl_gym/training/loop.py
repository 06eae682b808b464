"""What the online generalist trainers share: the step loop, the schedule, the resume state, the CLI.

The Bernoulli (:mod:`icrl_gym.training.generalist`) and the linear
(:mod:`icrl_gym.training.linear_generalist`) generalist trainers draw every step's batch from
``default_rng([seed, step])`` (from ``dagger_start`` on, with probability ``dagger_fraction``, rolled
out by the model: DAgger), minimise a cross-entropy under a warm-up + cosine learning rate, log,
evaluate and commit their training state through :class:`icrl_gym.training.state.RunState`.  What
differs (the batch, the loss, the evaluation, the checkpoint record) they pass in:

- :func:`begin_run` reads the committed state (or a folder of the layout before the manifest,
  :func:`legacy_generalist_state`), checks the configuration and restores the weights and the
  optimiser;
- :func:`run_steps` runs the loop from there (restoring the RNG states first, or committing step 0
  of a new run) until ``steps`` or ``time_budget_hours``;
- :func:`save_generalist_state` commits a state with the checkpoint record both write;
- :func:`main` is the command line ``[CONFIG.json] [--set key=value ...]``.
"""

from __future__ import annotations

import ctypes
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.cli import ConfigParser
from icrl_gym.device import resolve_device
from icrl_gym.fileio import DictConfig, RunLog, atomic_write_bytes
from icrl_gym.training.state import (
    RunState,
    TrainingState,
    TrainingStateError,
    check_config,
    legacy_state,
    set_rng_state,
)

BatchT = TypeVar("BatchT")
ModelT = TypeVar("ModelT", bound=torch.nn.Module)
ConfigT = TypeVar("ConfigT", bound=DictConfig)


@dataclass
class GeneralistLoopConfig(DictConfig):
    """The fields both generalist trainers share; each trainer's configuration adds its own and its defaults."""

    run_dir: str = "runs/generalist"
    """Folder of the log, the checkpoints and the resume state."""
    seed: int = 0
    """Seed of the initialisation and of every batch (step i draws from default_rng([seed, i]))."""
    model: dict[str, Any] = field(default_factory=dict)
    """The model configuration's fields (defaults where left out)."""
    steps: int = 20_000
    """Optimiser steps (the cosine schedule spans them)."""
    time_budget_hours: float = 3.5
    """Stop (and save) once the run's training wall time, summed over resumes, exceeds this."""
    min_arms: int = 2
    """Smallest number of arms of a batch."""
    max_arms: int = 20
    """Largest number of arms of a batch."""
    min_horizon: int = 20
    """Smallest horizon T of a batch."""
    max_horizon: int = 500
    """Largest horizon T of a batch."""
    queries: int = 16
    """Query steps Q per trajectory at which the loss is computed."""
    min_batch: int = 4
    """Fewest trajectories in a batch."""
    max_batch: int = 256
    """Most trajectories in a batch."""
    max_epsilon: float = 0.5
    """Exploration rate eps of a behaviour trajectory ~ U[0, max_epsilon]."""
    dagger_start: int = 5_000
    """Step from which batches may be rolled out by the model."""
    dagger_fraction: float = 0.15
    """Probability that a batch (after dagger_start) is rolled out by the model."""
    lr: float = 1e-3
    """Peak AdamW learning rate."""
    warmup: int = 500
    """Linear warm-up steps."""
    min_lr_ratio: float = 0.05
    """Learning rate at the end of the cosine schedule, as a fraction of lr."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Clip of the gradient norm."""
    log_every: int = 50
    """Steps between log lines (averages over them)."""
    checkpoint_every: int = 250
    """Steps between saved (resumable) states."""
    eval_every: int = 1_000
    """Steps between regret evaluations (0: never)."""
    eval_instances: int = 200
    """Instances of the in-training regret evaluation."""
    device: str = "cpu"
    """'auto' (CUDA when present), 'cpu', 'cuda', ..."""
    threads: int = 1
    """torch CPU threads."""


class Logger(Protocol):
    """A line logger (:class:`icrl_gym.fileio.RunLog`)."""

    def __call__(self, msg: str) -> None:
        """Write one line."""
        ...


LEGACY_FILES = ("latest.json",)
"""The pointer of the layout before :mod:`icrl_gym.training.state` (read once, deleted at the next commit)."""


@dataclass
class Progress:
    """Where a run stands: steps done, training wall seconds (summed over resumes) and the history."""

    step: int = 0
    wall: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)


def open_run(
    cfg: GeneralistLoopConfig, echo: bool, build: Callable[[], ModelT]
) -> tuple[ModelT, torch.optim.AdamW, RunLog, torch.device]:
    """The model, its AdamW (``lr``, ``weight_decay``), the run's log and device: the same steps for both trainers.

    Sets the torch threads, opens ``cfg.run_dir`` (its ``train.log``; ``config.json`` rewritten
    atomically), builds the model under ``torch.manual_seed(cfg.seed)`` on ``cfg.device``.
    """
    torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = RunLog(run_dir / "train.log", echo)
    atomic_write_bytes(run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2).encode())
    torch.manual_seed(cfg.seed)
    model = build().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return model, optimizer, log, device


def warmup_cosine(step: int, lr: float, warmup: int, steps: int, min_lr_ratio: float) -> float:
    """The learning rate at ``step`` of the pretraining and the generalist trainers.

    Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``min_lr_ratio * lr`` at ``steps``.
    """
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def learning_rate(cfg: GeneralistLoopConfig, step: int) -> float:
    """:func:`warmup_cosine` with the generalist configuration's ``lr``, ``warmup``, ``steps`` and ``min_lr_ratio``."""
    return warmup_cosine(step, cfg.lr, cfg.warmup, cfg.steps, cfg.min_lr_ratio)


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``; a no-op elsewhere).

    Batches of varied sizes leave freed blocks of many sizes in the heap, so without it the resident
    memory climbs from ~1.5 GiB towards several GiB over a run; called every ``log_every`` steps it
    keeps the process near its working set (one trim costs ~1 s of page faults, ~2% at 50 steps).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.malloc_trim(0)


def legacy_generalist_state(run_dir: Path) -> TrainingState | None:
    """A run folder of the older layout (``latest.json`` + ``checkpoints/step_*.state.pt``), checked.

    The configuration compared on resume is the one the checkpoint's record stores (``pretrain``:
    the configuration of the process that wrote that very checkpoint); the older ``config.json``
    was rewritten at every start and is not read.
    """
    path = run_dir / "latest.json"
    if not path.exists():
        return None
    try:
        latest = json.loads(path.read_text())
        stem = run_dir / "checkpoints" / latest["checkpoint"]
        record = {"wall_time_s": latest["wall_time_s"], "history": latest["history"]}
        step = int(latest["step"])
    except (ValueError, KeyError, TypeError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise TrainingStateError(f"{path} is corrupt or truncated: {err!r}") from err
    return legacy_state(stem, stem.with_suffix(".state.pt"), lambda meta: (step, meta["pretrain"], record))


def begin_run(
    store: RunState,
    cfg: GeneralistLoopConfig,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    log: Logger,
    allowed: Iterable[str],
) -> tuple[TrainingState | None, Progress]:
    """Read the run folder's state; on resume check the configuration and restore the model and optimiser.

    Fields other than ``allowed`` (and ``run_dir``) may not differ from the saved configuration
    (:func:`check_config`; a :class:`TrainingStateError` names them).  Returns the state (``None``:
    a new run) and the progress to continue from.
    """
    loaded = store.load(legacy_generalist_state)
    if loaded is None:
        n_params = sum(p.numel() for p in model.parameters())
        log(f"new run: {n_params} parameters, config {json.dumps(cfg.to_dict())}")
        return None, Progress()
    changes = check_config(
        store.run_dir, loaded.config, cfg.to_dict(), ignore=("run_dir",), allowed=allowed, folder_field="run_dir"
    )
    loaded.restore(model, opt)
    progress = Progress(loaded.step, loaded.record["wall_time_s"], loaded.record["history"])
    log(f"resumed from {loaded.source} at step {progress.step} ({progress.wall / 3600:.2f} h of training so far)")
    for change in changes:
        log(f"changed on resume: {change}")
    return loaded, progress


def save_generalist_state(
    store: RunState,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    cfg: GeneralistLoopConfig,
    progress: Progress,
    fields: Mapping[str, Any],
    model_config: dict[str, Any],
    kind: CheckpointKind,
) -> None:
    """Commit the state at ``progress.step``; its weights are the checkpoint ``checkpoints/step_NNNNNNN``.

    The checkpoint's record is ``fields`` (env, trained_range, ...), then ``pretrain`` (the
    configuration) and ``training`` (steps, wall time, budget, threads, device, seed, command and
    the last 200 history entries).
    """
    meta = {
        **fields,
        "pretrain": cfg.to_dict(),
        "training": {
            "steps": progress.step,
            "planned_steps": cfg.steps,
            "wall_time_s": progress.wall,
            "time_budget_hours": cfg.time_budget_hours,
            "threads": torch.get_num_threads(),
            "device": str(next(model.parameters()).device),
            "seed": cfg.seed,
            "command": " ".join([sys.executable, *sys.argv]),
            "history": progress.history[-200:],
        },
    }
    record = {"wall_time_s": progress.wall, "history": progress.history}
    store.save(progress.step, model, opt, cfg.to_dict(), record, meta, model_config=model_config, kind=kind)


def run_steps(
    cfg: GeneralistLoopConfig,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    log: Logger,
    loaded: TrainingState | None,
    progress: Progress,
    sample: Callable[[np.random.Generator, bool], BatchT],
    loss_of: Callable[[BatchT], tuple[torch.Tensor, dict[str, float]]],
    metrics: Mapping[str, str],
    evaluate: Callable[[int], dict[str, Any]],
    save: Callable[[Progress], None],
    after_log: Callable[[], None] | None = None,
) -> Progress:
    """The training loop from ``progress`` (updated in place and returned); see the module docstring.

    ``loaded`` (from :func:`begin_run`) restores the RNG states before the first step, a new run
    (``None``) commits step 0.  Every step: ``sample(rng, use_model)`` with ``rng =
    default_rng([seed, step])`` (it sets the model's mode; the loop sets training mode after it),
    the learning rate, ``loss_of(batch)`` -> (loss, metrics), a clipped optimiser step.  Every
    ``log_every`` steps a line with the averages of ``metrics`` (name -> format spec) and the
    DAgger fraction, then ``after_log()``; every ``eval_every`` steps (0: never) ``evaluate(step)``
    gives a history entry; every ``checkpoint_every`` steps and at the end ``save(progress)``.
    """
    if loaded is not None:  # the generators as they were after the saved step: the run continues exactly
        set_rng_state(loaded.rng)
    else:
        save(progress)  # step 0: a folder with a state is never a foreign one
    budget = cfg.time_budget_hours * 3600
    sums: dict[str, float] = {}
    count, t_log = 0, time.time()
    while progress.step < cfg.steps and progress.wall < budget:
        t0 = time.time()
        step = progress.step
        rng = np.random.default_rng([cfg.seed, step])
        use_model = step >= cfg.dagger_start and rng.random() < cfg.dagger_fraction
        batch = sample(rng, use_model)
        model.train()
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step)
        loss, values = loss_of(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        progress.step = step = step + 1
        progress.wall += time.time() - t0
        for key, value in values.items():
            sums[key] = sums.get(key, 0.0) + value
        sums["dagger"] = sums.get("dagger", 0.0) + use_model
        count += 1
        if step % cfg.log_every == 0:
            avg = {key: value / count for key, value in sums.items()}
            shown = " ".join(f"{name} {avg[name]:{spec}}" for name, spec in metrics.items())
            log(
                f"step {step} {shown} dagger {avg['dagger']:.2f} lr {learning_rate(cfg, step - 1):.2e} "
                f"{(time.time() - t_log) / count:.3f} s/step wall {progress.wall / 3600:.2f} h"
            )
            progress.history.append({"step": step, **{k: round(v, 5) for k, v in avg.items()}})
            if after_log is not None:
                after_log()
            sums, count, t_log = {}, 0, time.time()
        if cfg.eval_every and step % cfg.eval_every == 0:
            model.eval()
            progress.history.append(evaluate(step))
        if step % cfg.checkpoint_every == 0 or step >= cfg.steps or progress.wall >= budget:
            save(progress)
    log(f"done at step {progress.step} ({progress.wall / 3600:.2f} h of training)")
    return progress


def main(argv: list[str] | None, doc: str | None, config: type[ConfigT], train: Callable[[ConfigT], Any]) -> None:
    """``[CONFIG.json] [--set key=value ...]`` -> ``train(config)``: the trainers' :mod:`icrl_gym.cli` command line.

    Values are parsed by the fields' types and checked before any work starts (an argparse error
    naming the field otherwise); ``--help`` lists the fields with their docstrings.  A bare
    ``key=value`` after CONFIG.json, the form the shipped models' recorded commands use, is read as
    ``--set key=value``.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    module = train.__module__
    if module == "__main__":  # python -m icrl_gym.training.generalist: the name it was started by
        module = getattr(sys.modules["__main__"].__spec__, "name", module)
    parser = ConfigParser(config, module, doc or "", config_required=True)
    cfg, _ = parser.parse_config(_bare_overrides_as_set(args))
    train(cfg)


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
