"""The task model of a sweep: one independent task per (experiment, algorithm row), merged in a fixed order.

Every row of a curve experiment plays the same instances with the same noise: the common random
numbers of the experiment's seed, drawn as one batch of ``runs`` (:mod:`icrl_gym.data.crn`).  A row's
curves therefore depend on its environment, its agent specification as played, ``runs`` and
``seed`` alone (:func:`~benchmarks.experiments.suite.run.play_row`), not on the other rows nor on
the process that plays it.  A sweep is the list of its tasks; an executor runs them in any order, on
any number of workers, and hands each result back with the task's index; the results are then
placed by index into each experiment's row order, so the outputs do not depend on the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from benchmarks.experiments.suite.cells import Experiment
from benchmarks.experiments.suite.run import play_row, played_specs
from icrl_gym.envs import BanditSpec, MDPSpec

Curves = dict[str, np.ndarray]
"""One row's curves: mean, std and s.e. of cumulative regret and suboptimality per step."""

Done = Callable[[int, Curves], None]
"""Called in the driving process with a task's index and its curves as soon as the task finishes."""


@dataclass(frozen=True)
class Task:
    """One algorithm row of one experiment: everything needed to play it, and nothing else (picklable)."""

    experiment: str
    """The experiment's name."""
    label: str
    """The row's label."""
    env: BanditSpec | MDPSpec
    """The experiment's environment."""
    agent: dict[str, Any]
    """The row's agent specification as played (checkpoint and device filled in)."""
    runs: int
    """Instances played."""
    seed: int
    """Seed of the common random numbers."""

    @property
    def name(self) -> str:
        """``experiment/label``: the task in log lines and errors."""
        return f"{self.experiment}/{self.label}"


def run_task(task: Task) -> Curves:
    """Play one task: exactly the curves the serial path produces for its row."""
    return play_row(task.env, task.agent, task.runs, task.seed)


def experiment_tasks(
    exp: Experiment, runs: int, seed: int, device: str, checkpoints: dict[str, str] | None = None
) -> list[Task]:
    """The tasks of one experiment, in its row order."""
    return [
        Task(exp.name, label, exp.spec, spec, runs, seed)
        for label, spec in played_specs(exp, device, checkpoints).items()
    ]


class Executor(Protocol):
    """Runs a list of tasks, calling ``done(index, curves)`` in the driving process as each one finishes."""

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Run every task once (an executor may retry a task whose worker died); raise if one cannot finish."""
        ...


def merge(tasks: Sequence[Task], results: dict[int, Curves]) -> dict[str, dict[str, Curves]]:
    """The results by experiment, then row, in the order of ``tasks`` (whatever order they finished in)."""
    missing = [tasks[i].name for i in range(len(tasks)) if i not in results]
    if missing:
        raise RuntimeError(f"tasks without a result: {', '.join(missing)}")
    merged: dict[str, dict[str, Curves]] = {}
    for i, task in enumerate(tasks):
        merged.setdefault(task.experiment, {})[task.label] = results[i]
    return merged
