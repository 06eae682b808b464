"""Run the MDP grid: every row of every cell played in slices (or reused from the store), then the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.executor.local import InlineExecutor
from benchmarks.executor.tasks import Executor
from benchmarks.experiments.grid.cells import CellResult
from benchmarks.experiments.grid.run import run_identity
from benchmarks.experiments.grid.tasks import plan_rows, play_plans
from benchmarks.experiments.mdp_generalization.cells import MDPGridExperiment, cell_runs, mdp_cells, references
from benchmarks.experiments.mdp_generalization.report import write_report
from benchmarks.experiments.models import model_available, model_record
from icrl_gym.checkpoint import read_record, resolve_checkpoint
from icrl_gym.utils.device import device_name


def run_mdp_generalization(
    exp: MDPGridExperiment,
    out: Path,
    runs: int,
    seed: int = 0,
    checkpoint: str | None = None,
    groups: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    model_only: bool = False,
    reverse: bool = False,
    stored_only: bool = False,
    references_only: bool = False,
    device: str = "cpu",
    executor: Executor | None = None,
) -> list[CellResult]:
    """Run the MDP grid into ``out/<exp.name>/`` (the docstring of ``cli.py``); returns the cells' results.

    ``checkpoint`` defaults to the experiment's shipped model (missing: only the references run, and
    the summary says so).  Every cell uses the seed ``exp.seed_offset + seed``.  ``model_only`` plays
    only the model's rows (a second process beside one computing the references into the same store;
    a run without it then writes the tables from the stored rows); ``reverse`` lists the cells last
    first; ``stored_only`` plays nothing and writes the tables from the rows already stored (the
    others n/a); ``references_only`` plays only the references.  Every row of every cell is played
    in slices of ``exp.slice_runs`` runs, the tasks of ``executor`` (default: this process; worker
    processes or a Ray cluster spread them), and merged in the cells' and rows' order.  ``device``
    is where the model plays (``"auto"``: CUDA when present); a row's key leaves the device out, and
    its file records it.
    """
    if model_only and references_only:
        raise ValueError("model_only and references_only exclude each other: nothing would be played")
    folder = out / exp.name
    folder.mkdir(parents=True, exist_ok=True)
    eval_seed = exp.seed_offset + seed
    name = checkpoint or exp.model["checkpoint"]
    model: dict[str, Any] | None = None
    record: dict[str, Any] = {}
    if model_available(name) and not references_only:
        model = {**exp.model, "checkpoint": name, "device": device_name(device)}
        meta = read_record(resolve_checkpoint(name)).meta
        record = {**model_record(name), **{k: meta.get(k) for k in ("playable_range", "weights_sha256")}}
    cells = mdp_cells(exp, groups or exp.groups)[:: -1 if reverse else 1]
    start = time.perf_counter()
    store, model_id = folder / "cells", record.get("weights_sha256")
    plans = []
    for cell in cells:
        refs = {} if model_only else references(exp, cell)
        compared = tuple(label for label in exp.compared if label in refs)
        plans.append(
            plan_rows(
                cell,
                refs,
                model,
                cell_runs(exp, cell, runs),
                eval_seed,
                store,
                model_id,
                compared=compared,
                stored_only=stored_only,
                slice_runs=exp.slice_runs,
            )
        )
    results = play_plans(plans, executor or InlineExecutor(), store, exp.slice_runs, progress, exp.name)
    config = {
        **run_identity(exp.name, runs, eval_seed, exp.seed_offset, exp.slice_runs),
        "groups": list(groups or exp.groups),
        "model": model,
        "rows": "model" if model_only else "references" if references_only else "all",
        "model_record": record,
        "grid": asdict(exp),
        "cells": [{"cell": c.label, "in_range": c.in_range, "env": c.spec.to_dict()} for c in cells],
        "seconds": time.perf_counter() - start,
    }
    write_report(exp, folder, results, config, name)
    return results
