"""A run of ``python -m benchmarks``: each experiment reused or played, then the grids, then the outputs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.executor import make_executor
from benchmarks.executor.tasks import Curves, Executor, experiment_tasks, merge, run_sweep
from benchmarks.experiments.generalization.run import run_generalization
from benchmarks.experiments.mdp_generalization.run import run_mdp_generalization
from benchmarks.experiments.suite.cells import Experiment
from benchmarks.harness.config import BenchConfig
from benchmarks.harness.report import PAGE, remove_stale_outputs, write_outputs
from benchmarks.harness.retrain import retrain_models
from benchmarks.harness.store import STORE, SuiteStore
from icrl_gym.utils.progress import log


def run_experiments(
    cfg: BenchConfig,
    executor: Executor,
    experiments: list[Experiment],
    checkpoints: dict[str, str],
    progress: Any,
) -> tuple[dict[str, dict[str, Curves]], list[str]]:
    """Every experiment's curves, its rows played as tasks of ``executor`` unless stored; and those reused.

    One driver whatever plays the rows (``--workers 1``: this process, one row after another): the
    same task list, the same store (:class:`SuiteStore`: an experiment's stored result is reused
    when its key matches, and written as soon as its last row finishes) and the same merge in each
    experiment's row order.  ``progress(exp, text, rows)`` is told of every row and reuse.
    """
    store = SuiteStore(Path(cfg.out) / STORE, experiments, cfg.runs, cfg.seed, cfg.device, checkpoints, cfg.rerun)
    by_name = {exp.name: exp for exp in experiments}
    for name in store.reused():
        exp = by_name[name]
        progress(exp, f"reused the stored result {store.folder / name}.json (same settings)", len(exp.algorithms))
    tasks = [t for exp in experiments for t in experiment_tasks(exp, cfg.runs, cfg.seed, cfg.device, checkpoints)]

    def done(index: int, curves: Curves, reused: bool) -> None:
        task = tasks[index]
        if not reused:
            progress(by_name[task.experiment], task.label, 1)

    played = run_sweep(executor, tasks, store, done, desc="benchmarks")
    return merge(tasks, dict(enumerate(played))), store.reused()


def run(cfg: BenchConfig) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Run the experiments of ``cfg`` into ``cfg.out`` (stored results reused), then the grids; write the outputs."""
    out = Path(cfg.out)
    experiments = cfg.selected()
    out.mkdir(parents=True, exist_ok=True)
    checkpoints: dict[str, str] = {}
    if cfg.retrain:  # retraining runs in this process, with the run's torch threads
        import torch

        torch.set_num_threads(cfg.threads)
        checkpoints = retrain_models(out, experiments, cfg.device, cfg.retrain_steps)
    start = time.perf_counter()
    total = sum(len(e.algorithms) for e in experiments)
    done = 0

    def advance(exp: Experiment, text: str, rows: int) -> None:
        nonlocal done
        done += rows
        log(f"[{done}/{total}] {exp.name}: {text} ({time.perf_counter() - start:.0f}s)")

    with make_executor(cfg.workers, cfg.ray, cfg.threads) as executor:
        executor.start()  # workers (or this process's torch threads) start while the tasks are prepared
        results, reused = run_experiments(cfg, executor, experiments, checkpoints, advance)
        elapsed = time.perf_counter() - start
        run_grids(cfg, out, executor)
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
        write_outputs(out, results, cfg.runs, cfg.seed, record, executor)  # the workers draw the plots
    print(f"finished in {elapsed:.0f}s; results in {out}/ (regret.csv, summary.md, *.png, config.json, {PAGE})")
    return results


def labelled_log(name: str) -> Callable[[str], None]:
    """A progress callback that logs each label prefixed with ``name``."""
    return lambda label: log(f"{name}: {label}")


def run_grids(cfg: BenchConfig, out: Path, executor: Executor) -> None:
    """The grid experiments of ``cfg``, each into its own folder in ``out``, their tasks played by ``executor``."""
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
            progress=labelled_log(grid.name),
            executor=executor,
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
            progress=labelled_log(mdp_grid.name),
            executor=executor,
        )
        print(f"{mdp_grid.name}: results in {out / mdp_grid.name}/ (summary.md, cells.csv, checks.csv, heatmap-*.png)")
