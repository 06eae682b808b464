"""A grid's rows as tasks: every row of every cell in slices of a fixed number of runs.

Slice i of a row plays the runs [i S, min((i + 1) S, N)) of the cell (S = ``slice_runs``, N the
cell's runs): the common-random-numbers batch i of the cell's seed with batch size S
(:func:`icrl_gym.data.crn.crn_batches`, ``first=i``), so every row meets the same instances and
noise in every slice, the slices of a row joined in order are the row played in batches of S, and
nothing depends on how many workers play them or in which order.  A cell of at most S runs is one
slice: the one batch of all its runs, as a grid played before slices were.  A slice that refuses
the size (a row that may refuse it, :func:`plan_rows`) returns the reason instead of numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.executor.store import FileTaskStore
from benchmarks.executor.tasks import Executor, RowCost, run_sweep
from benchmarks.experiments.grid import run as grid_run
from benchmarks.experiments.grid.cells import MODEL, SLICE_RUNS, Cell, CellResult
from icrl_gym.checkpoint import CheckpointError
from icrl_gym.envs import BanditSpec, MDPSpec

SliceResult = tuple[np.ndarray | None, str | None]
"""A slice's per-run total regrets, or ``None`` and the reason the row refused the size."""


def slice_sizes(runs: int, size: int) -> list[int]:
    """The runs of each slice of ``runs`` runs in slices of ``size`` (the last may be smaller)."""
    if runs < 1 or size < 1:
        raise ValueError(f"need runs >= 1 and a slice size >= 1, got {runs} and {size}")
    return [min(size, runs - start) for start in range(0, runs, size)]


@dataclass(frozen=True)
class SliceTask(RowCost):
    """Slice ``index`` of one row of one cell: its ``runs`` runs of the CRN batch ``index`` under ``seed``."""

    cell: Cell
    label: str
    """The row."""
    agent: dict[str, Any]
    """The row's agent specification."""
    row_key: dict[str, Any]
    """What the row's stored result must match (``grid.run.row_key``)."""
    index: int
    """The slice, i.e. the batch of the common random numbers."""
    runs: int
    """Runs of this slice."""
    seed: int
    """The cell's seed."""
    may_refuse: bool
    """Whether a size the row cannot play gives a reason instead of an error."""

    @property
    def name(self) -> str:
        """``cell / row / slice i``."""
        return f"{self.cell.label}/{self.label}/slice {self.index}"

    @property
    def env(self) -> BanditSpec | MDPSpec:
        """The cell's environment (its cost and setup: :class:`~benchmarks.executor.tasks.RowCost`)."""
        return self.cell.spec

    @property
    def key(self) -> dict[str, Any]:
        """The row's key and the slice (what a stored slice must match)."""
        return {**self.row_key, "slice": self.index, "slice_runs": self.runs}

    @property
    def store_path(self) -> Path:
        """``<cell>/slices/<row>-<i>.json`` in the grid's row store."""
        return Path(grid_run.slug(self.cell.label)) / "slices" / f"{grid_run.slug(self.label)}-{self.index}.json"

    def run(self) -> SliceResult:
        """The slice's per-run total regrets (or the reason the row refuses the size)."""
        try:
            totals = grid_run.total_regret(self.cell.spec, self.agent, self.runs, self.seed, first_batch=self.index)
        except ValueError as err:  # the size is beyond what this row can play: marked n/a
            if not self.may_refuse or isinstance(err, CheckpointError):  # a missing or damaged model is no size limit
                raise
            return None, f"n/a: {err}"
        return totals, None


def join_slices(results: list[Any]) -> SliceResult:
    """A row's totals from its slices' results in slice order (the first reason when a slice refused)."""
    for totals, note in results:
        if totals is None:
            return None, note
    return np.concatenate([np.asarray(totals, dtype=np.float64) for totals, _ in results]), None


@dataclass
class CellPlan:
    """A cell's result as far as the store holds it, and the rows still to play (label, agent, key, may refuse)."""

    result: CellResult
    runs: int
    seed: int
    todo: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = field(default_factory=list)


def plan_rows(
    cell: Cell,
    refs: dict[str, dict[str, Any]],
    model: dict[str, Any] | None,
    runs: int,
    seed: int,
    store: Path | None = None,
    model_id: str | None = None,
    optional: set[str] | frozenset[str] = frozenset(),
    compared: tuple[str, ...] | None = None,
    stored_only: bool = False,
    slice_runs: int = SLICE_RUNS,
) -> CellPlan:
    """The rows of ``cell`` (the references ``refs``, then ``model``): those stored, and those to play.

    A stored row with the same environment, agent, runs, seed, slice size and model weights
    (``model_id``) is reused; with ``stored_only`` a row not stored is kept as missing ("n/a: not
    run yet").  A row that may refuse the size (the model, a reference in ``optional``, any
    reference of a cell beyond the trained range) is kept with its reason instead of numbers.  The
    best reference of the cell is the best of ``compared`` (default: every reference).
    """
    rows = {**refs, **({MODEL: model} if model is not None else {})}
    plan = CellPlan(CellResult(cell, {}, references=tuple(refs) if compared is None else compared), runs, seed)
    for label, agent in rows.items():
        key = grid_run.row_key(cell, label, agent, runs, seed, model_id, slice_runs)
        stored = None if store is None else grid_run.load_row(store, cell, key)
        if stored is not None or stored_only:
            totals, note = stored or (None, "n/a: not run yet")
            plan.result.totals[label] = totals
            if note is not None:
                plan.result.notes[label] = note
            continue
        plan.result.totals[label] = None  # its place in the row order, filled when its slices are in
        plan.todo.append((label, agent, key, label == MODEL or label in optional or not cell.in_range))
    return plan


def play_plans(
    plans: list[CellPlan],
    executor: Executor,
    store: Path | None = None,
    slice_runs: int = SLICE_RUNS,
    progress: Callable[[str], None] | None = None,
    desc: str = "grid",
) -> list[CellResult]:
    """Play the rows still to play of every plan, in slices, as tasks of ``executor``; the cells' results in order.

    Every slice is stored in ``store`` as it finishes (``<cell>/slices/<row>-<i>.json``; a stopped
    grid resumes from its finished slices); a row whose slices are all in is joined in slice order,
    written as the row's file and its slices removed.  Each finished cell's label and the seconds
    so far go to ``progress``; the sweep's progress bar is named ``desc``.
    """
    start = time.perf_counter()
    tasks: list[SliceTask] = []
    rows: dict[tuple[int, str], list[int]] = {}
    for p, plan in enumerate(plans):
        for label, agent, key, may_refuse in plan.todo:
            for index, runs in enumerate(slice_sizes(plan.runs, slice_runs)):
                rows.setdefault((p, label), []).append(len(tasks))
                tasks.append(SliceTask(plan.result.cell, label, agent, key, index, runs, plan.seed, may_refuse))
    owner = {i: row for row, indices in rows.items() for i in indices}
    left = [len(plan.todo) for plan in plans]
    results: dict[int, Any] = {}
    slices = None if store is None else FileTaskStore(store)

    def report(p: int) -> None:
        if progress is not None:
            progress(f"{plans[p].result.cell.label} ({time.perf_counter() - start:.0f}s)")

    def done(i: int, result: Any, reused: bool) -> None:
        results[i] = result
        p, label = owner[i]
        indices = rows[(p, label)]
        if any(j not in results for j in indices):
            return
        totals, note = join_slices([results[j] for j in indices])
        plan = plans[p]
        plan.result.totals[label] = totals
        if note is not None:
            plan.result.notes[label] = note
        if store is not None and slices is not None:
            task = tasks[i]
            grid_run.save_row(store, task.cell, task.row_key, totals, note, task.agent.get("device", "cpu"))
            for j in indices:
                slices.forget(tasks[j])
        left[p] -= 1
        if not left[p]:
            report(p)

    for p, plan in enumerate(plans):
        if not plan.todo:
            report(p)
    run_sweep(executor, tasks, slices, done, desc)
    return [plan.result for plan in plans]
