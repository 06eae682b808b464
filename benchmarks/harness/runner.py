"""A run of ``python -m benchmarks``: each experiment reused or played, then the grids, then the outputs."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.executor.local import ProcessExecutor, available_cores
from benchmarks.executor.ray_executor import RayExecutor
from benchmarks.executor.tasks import Curves, Executor, experiment_tasks, merge
from benchmarks.experiments.generalization.run import run_generalization
from benchmarks.experiments.mdp_generalization.run import run_mdp_generalization
from benchmarks.experiments.suite.cells import Experiment, steps
from benchmarks.experiments.suite.run import run_experiment
from benchmarks.harness.config import BenchConfig
from benchmarks.harness.report import PAGE, remove_stale_outputs, write_outputs
from benchmarks.harness.retrain import retrain_models
from benchmarks.harness.store import STORE, StoredResultError, _changed_fields, experiment_key, load_result, save_result
from icrl_gym.utils.progress import log, progress_bar


def stored_or_run(
    exp: Experiment,
    runs: int,
    seed: int,
    device: str,
    store: Path,
    checkpoints: dict[str, str] | None = None,
    rerun: bool = False,
    progress: Any = None,
) -> tuple[dict[str, dict[str, np.ndarray]], bool]:
    """The experiment's curves, and whether they are a stored result that was reused.

    The stored result in ``store`` is reused when its key (:func:`experiment_key`) matches and not
    ``rerun``; otherwise the experiment runs and its result is stored at once (atomically).  A stored
    result made with another key is replaced; a corrupt one is reported and replaced, never used.
    """
    key = experiment_key(exp, runs, seed, device, checkpoints)
    stored = None if rerun else reusable(exp, key, store)
    if stored is not None:
        return stored, True
    curves = run_experiment(exp, runs, seed, device, checkpoints, progress)
    save_result(store, key, curves)
    return curves, False


def reusable(exp: Experiment, key: dict[str, Any], store: Path) -> dict[str, Curves] | None:
    """The stored curves of ``exp`` in ``store`` when their key is ``key`` (else ``None``, saying why)."""
    try:
        stored = load_result(store, key, steps(exp))
    except StoredResultError as err:
        log(f"warning: {exp.name}: stored result not used: {err}; running it again")
        return None
    if stored is None and (store / f"{exp.name}.json").exists():
        changed = ", ".join(_changed_fields(store, key)) or "the key"
        log(f"{exp.name}: the stored result differs in {changed}; running it again")
    return stored


def make_executor(cfg: BenchConfig) -> Executor | None:
    """The executor of ``cfg``: Ray with ``--ray``, else worker processes with ``--workers`` > 1 (``None``: serial)."""
    workers = cfg.workers or available_cores()
    if cfg.ray:
        return RayExecutor(cfg.ray, workers)
    return ProcessExecutor(workers) if workers > 1 else None


def run_serial(
    cfg: BenchConfig, experiments: list[Experiment], checkpoints: dict[str, str], progress: Any
) -> tuple[dict[str, dict[str, Curves]], list[str]]:
    """Every experiment's curves, played here one row after another (stored results reused); and those reused."""
    store = Path(cfg.out) / STORE
    results: dict[str, dict[str, Curves]] = {}
    reused: list[str] = []
    for exp in experiments:
        results[exp.name], was_stored = stored_or_run(
            exp,
            cfg.runs,
            cfg.seed,
            cfg.device,
            store,
            checkpoints,
            cfg.rerun,
            lambda label, exp=exp: progress(exp, label, 1),
        )
        if was_stored:
            reused.append(exp.name)
            progress(exp, f"reused the stored result {store / exp.name}.json (same settings)", len(exp.algorithms))
    return results, reused


def run_on_executor(
    cfg: BenchConfig,
    executor: Executor,
    experiments: list[Experiment],
    checkpoints: dict[str, str],
    progress: Any,
) -> tuple[dict[str, dict[str, Curves]], list[str]]:
    """Every experiment's curves, playing the rows of those not stored as tasks of ``executor``; and those reused.

    An experiment's result is stored as soon as its last row finishes, so a stopped sweep resumes
    from its finished experiments.  ``progress(exp, text, rows)`` is told of every row and reuse.
    """
    store = Path(cfg.out) / STORE
    results: dict[str, dict[str, Curves]] = {}
    reused: list[str] = []
    keys: dict[str, dict[str, Any]] = {}
    tasks = []
    for exp in experiments:
        key = experiment_key(exp, cfg.runs, cfg.seed, cfg.device, checkpoints)
        stored = None if cfg.rerun else reusable(exp, key, store)
        if stored is not None:
            results[exp.name] = stored
            reused.append(exp.name)
            progress(exp, f"reused the stored result {store / exp.name}.json (same settings)", len(exp.algorithms))
            continue
        keys[exp.name] = key
        tasks += experiment_tasks(exp, cfg.runs, cfg.seed, cfg.device, checkpoints)
    by_name = {exp.name: exp for exp in experiments}
    finished: dict[int, Curves] = {}
    rows: dict[str, dict[str, Curves]] = {}

    def done(index: int, curves: Curves) -> None:
        task = tasks[index]
        finished[index] = curves
        exp = by_name[task.experiment]
        rows.setdefault(exp.name, {})[task.label] = curves
        progress(exp, task.label, 1)
        if len(rows[exp.name]) == len(exp.algorithms):  # the experiment's last row: store it, in row order
            save_result(store, keys[exp.name], {label: rows[exp.name][label] for label in exp.algorithms})

    executor.run(tasks, done)
    played = merge(tasks, finished)
    return {exp.name: results.get(exp.name) or played[exp.name] for exp in experiments}, reused


def run(cfg: BenchConfig) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Run the experiments of ``cfg`` into ``cfg.out`` (stored results reused), then the grids; write the outputs."""
    import torch

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    experiments = cfg.selected()
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = retrain_models(out, experiments, cfg.device, cfg.retrain_steps) if cfg.retrain else {}
    start = time.perf_counter()
    total = sum(len(e.algorithms) for e in experiments)
    done = 0
    bar = progress_bar(total, "benchmarks", unit="algorithm")
    executor = make_executor(cfg)

    def advance(exp: Experiment, text: str, rows: int) -> None:
        nonlocal done
        done += rows
        bar.update(rows)
        log(f"[{done}/{total}] {exp.name}: {text} ({time.perf_counter() - start:.0f}s)")

    try:
        if executor is None:
            results, reused = run_serial(cfg, experiments, checkpoints, advance)
        else:
            results, reused = run_on_executor(cfg, executor, experiments, checkpoints, advance)
    finally:
        bar.close()
    elapsed = time.perf_counter() - start
    run_grids(cfg, out)
    if not experiments:  # the top-level outputs describe exactly this run's curve experiments: none
        remove_stale_outputs(out, set())
        return results
    record = {
        **dataclasses.asdict(cfg),
        "seconds": elapsed,
        "experiments_run": {e.name: {"env": e.spec.to_dict(), "algorithms": e.algorithms} for e in experiments},
        "reused": reused,
        "checkpoints": checkpoints or "shipped",
    }
    write_outputs(out, results, cfg.runs, cfg.seed, record)
    print(f"finished in {elapsed:.0f}s; results in {out}/ (regret.csv, summary.md, *.png, config.json, {PAGE})")
    return results


def run_grids(cfg: BenchConfig, out: Path) -> None:
    """The grid experiments of ``cfg``, each into its own folder in ``out``."""
    for grid in cfg.selected_grids():
        run_generalization(
            grid,
            out,
            cfg.runs,
            cfg.seed,
            checkpoint=cfg.generalist or None,
            linear_checkpoint=cfg.linear_generalist or None,
            families=cfg.grid_families,
            arms=cfg.grid_arms or None,
            horizons=cfg.grid_horizons or None,
            progress=lambda label, name=grid.name: log(f"{name}: {label}"),
        )
        print(f"{grid.name}: results in {out / grid.name}/ (summary.md, cells.csv, checks.csv, heatmap-*.png)")
    for mdp_grid in cfg.selected_mdp_grids():
        run_mdp_generalization(
            mdp_grid,
            out,
            cfg.runs,
            cfg.seed,
            checkpoint=cfg.mdp_generalist or None,
            groups=cfg.mdp_cells,
            progress=lambda label, name=mdp_grid.name: log(f"{name}: {label}"),
        )
        print(f"{mdp_grid.name}: results in {out / mdp_grid.name}/ (summary.md, cells.csv, checks.csv, heatmap-*.png)")
