"""The task model of a sweep: independent tasks, played anywhere, their results stored and merged in a fixed order.

A sweep (the default suite, a grid, a deployment sweep, the frontier's Monte-Carlo rows) is a list
of tasks.  A task holds everything it needs to play (it is pickled to a worker) and depends on
nothing else: every row of a curve experiment plays the common random numbers of the experiment's
seed, drawn as one batch of ``runs`` (:mod:`icrl_gym.data.crn`), and every slice of a grid's row
plays the common-random-numbers batch of its index under the cell's seed.  An executor runs the
tasks in any order, on any number of workers, and hands each result back with the task's index;
:func:`run_sweep` stores each result as it arrives and returns them in task order, so the outputs
do not depend on the executor, and a stopped sweep resumes from its stored tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from benchmarks.executor.memory import row_memory
from benchmarks.experiments.rows import GENERALISTS, LEARNED
from benchmarks.experiments.suite.cells import Experiment
from benchmarks.experiments.suite.run import play_row, played_specs
from icrl_gym.envs import BanditSpec, MDPSpec
from icrl_gym.utils.progress import WorkProgress

Curves = dict[str, np.ndarray]
"""One row's curves: mean, std and s.e. of cumulative regret and suboptimality per step."""

Done = Callable[[int, Any], None]
"""Called in the driving process with a task's index and its result as soon as the task finishes."""

LEARNED_COST = 30.0
"""How much longer a learned row (a transformer's forward pass per step) takes than an expert's, roughly.

Measured on one CPU thread at 200 runs of the default suite: expert rows play 0.6-1.6 M run-steps a
second, the paper-size transformers 18-47 k (``benchmarks/executor`` schedules by these estimates only).
"""

GENERALIST_COST = 80.0
"""The same for a generalist (a model for every size: 8-16 k run-steps a second)."""

POSTERIOR_ACTION_COST = 80.0
"""The same for the Bayes DPT policy (``posterior_optimal_action``: P(a* = a | D) by posterior samples, 7-10 k)."""

GITTINS_SETUP_COST = 0.5
"""The cost of building a Gittins table for horizon T is about this times T^3 (in runs x steps of an expert row).

The table for T = 200 takes about 4 s on one thread, as long as 4 M run-steps of an expert row.
"""


class Task(Protocol):
    """One independent piece of a sweep: picklable, with a name for logs and a rough cost for scheduling."""

    @property
    def name(self) -> str:
        """The task in log lines and errors (unique within its sweep)."""
        ...

    @property
    def cost(self) -> float:
        """A rough estimate of its run time (only its order matters: longer tasks are submitted first)."""
        ...

    @property
    def setup(self) -> tuple[str, float] | None:
        """A preparation it shares with other tasks, kept by a worker once made (a Gittins table): key, cost."""
        ...

    @property
    def memory(self) -> float:
        """A rough estimate of the memory it holds while it plays, in bytes (:mod:`benchmarks.executor.memory`)."""
        ...

    def run(self) -> Any:
        """Play the task and return its (picklable) result."""
        ...


def schedule(tasks: Sequence[Task]) -> list[int]:
    """The order to submit ``tasks`` in: longest first (ties in task order), so no long task starts last.

    A preparation that several tasks share (their ``setup``) counts once, on the costliest of them:
    that one goes early and makes it (a worker keeps a Gittins table in memory and on the run's
    disk cache), while the others, cheap once it exists, follow by their own cost.
    """
    cost = [task.cost for task in tasks]
    first: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.setup is not None:
            key, extra = task.setup
            j = first.get(key)
            if j is None or cost[i] + extra > cost[j] + tasks[j].setup[1]:  # type: ignore[index]
                first[key] = i
    for i in first.values():
        cost[i] += tasks[i].setup[1]  # type: ignore[index]
    return sorted(range(len(tasks)), key=lambda i: -cost[i])


def gittins_setup(env: BanditSpec | MDPSpec, agent: dict[str, Any]) -> tuple[str, float] | None:
    """The Gittins table a row needs (keyed by its prior), and the cost of building it for the row's horizon."""
    if agent["name"] != "gittins" or isinstance(env, MDPSpec):
        return None
    horizon = agent.get("horizon") or env.horizon
    prior = (agent.get("prior_a", env.prior_a), agent.get("prior_b", env.prior_b))
    return f"gittins table, Beta{prior}", GITTINS_SETUP_COST * horizon**3


def run_task(task: Task) -> Any:
    """Play ``task`` in this process: the one place every executor plays a task (tests hook it)."""
    return task.run()


class Executor(Protocol):
    """Runs a list of tasks, calling ``done(index, result)`` in the driving process as each one finishes."""

    def start(self) -> None:
        """Get ready (start workers, join a cluster) before the first tasks are known."""
        ...

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Run every task once (an executor may retry a task whose worker died); raise if one cannot finish."""
        ...


class TaskStore(Protocol):
    """Where the results of a sweep's tasks are kept as they finish (a resumed sweep plays only the others)."""

    def load(self, task: Any) -> Any | None:
        """The stored result of ``task`` when one made with the same settings is stored (else ``None``)."""
        ...

    def save(self, task: Any, result: Any) -> None:
        """Store the finished ``task``'s result atomically."""
        ...


def run_sweep(
    executor: Executor,
    tasks: Sequence[Task],
    store: TaskStore | None = None,
    done: Callable[[int, Any, bool], None] | None = None,
    desc: str = "sweep",
) -> list[Any]:
    """The results of ``tasks`` in their order: stored ones reused, the others played by ``executor``.

    Each played result is saved to ``store`` the moment it arrives, before ``done(index, result,
    reused)`` is told of it (also told of every reused result, first); a sweep stopped by an error,
    Ctrl-C or a kill keeps every finished task.  One progress bar named ``desc`` counts the tasks,
    whatever the executor, with the time left estimated from the tasks' costs
    (:class:`~icrl_gym.utils.progress.WorkProgress`: a log line now and then where no bar is drawn).
    """
    results: dict[int, Any] = {}
    todo: list[int] = []
    for i, task in enumerate(tasks):
        stored = None if store is None else store.load(task)
        if stored is None:
            todo.append(i)
            continue
        results[i] = stored
        if done is not None:
            done(i, stored, True)
    costs = [tasks[i].cost for i in todo]
    bar = WorkProgress(costs, desc, finished=len(tasks) - len(todo)) if todo else None

    def finished(j: int, result: Any) -> None:
        i = todo[j]
        if store is not None:
            store.save(tasks[i], result)
        results[i] = result
        if bar is not None:
            bar.advance(costs[j])
        if done is not None:
            done(i, result, False)

    try:
        if todo:
            executor.run([tasks[i] for i in todo], finished)
    finally:
        if bar is not None:
            bar.close()
    missing = [tasks[i].name for i in range(len(tasks)) if i not in results]
    if missing:
        raise RuntimeError(f"tasks without a result: {', '.join(missing)}")
    return [results[i] for i in range(len(tasks))]


class PlayedRow(Protocol):
    """What a task that plays one agent row has: ``runs`` runs of the environment ``env`` by ``agent``."""

    @property
    def env(self) -> BanditSpec | MDPSpec:
        """The environment played."""
        ...

    @property
    def agent(self) -> dict[str, Any]:
        """The row's agent specification."""
        ...

    @property
    def runs(self) -> int:
        """Runs played."""
        ...


class RowCost:
    """The :attr:`Task.cost` and :attr:`Task.setup` of a task that plays one agent row (a :class:`PlayedRow`)."""

    @property
    def cost(self: PlayedRow) -> float:
        """Runs x steps, times the agent's :func:`cost_factor`."""
        return self.runs * steps_of(self.env) * cost_factor(self.agent["name"])

    @property
    def setup(self: PlayedRow) -> tuple[str, float] | None:
        """The Gittins table of a Gittins row (:func:`gittins_setup`)."""
        return gittins_setup(self.env, self.agent)

    @property
    def memory(self: PlayedRow) -> float:
        """The row's estimate (:func:`~benchmarks.executor.memory.row_memory`)."""
        return row_memory(self.env, self.agent, self.runs, steps_of(self.env))


@dataclass(frozen=True)
class RowTask(RowCost):
    """One algorithm row of one curve experiment: everything needed to play it, and nothing else (picklable)."""

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

    def run(self) -> Curves:
        """Exactly the curves of the row (:func:`~benchmarks.experiments.suite.run.play_row`)."""
        return play_row(self.env, self.agent, self.runs, self.seed)


COST_FACTORS = {
    **dict.fromkeys(LEARNED, LEARNED_COST),
    **dict.fromkeys(GENERALISTS, GENERALIST_COST),
    "posterior_optimal_action": POSTERIOR_ACTION_COST,
}
"""How much longer a step of an agent takes than an expert's, by agent name (an expert's: 1)."""


def cost_factor(agent: str) -> float:
    """How much longer a step of the agent named ``agent`` takes than an expert's (:data:`COST_FACTORS`)."""
    return COST_FACTORS.get(agent, 1.0)


def steps_of(env: BanditSpec | MDPSpec) -> int:
    """Steps of one run: T for a bandit, K H for an MDP."""
    return env.total_steps if isinstance(env, MDPSpec) else env.horizon


def experiment_tasks(
    exp: Experiment, runs: int, seed: int, device: str, checkpoints: dict[str, str] | None = None
) -> list[RowTask]:
    """The tasks of one experiment, in its row order."""
    return [
        RowTask(exp.name, label, exp.spec, spec, runs, seed)
        for label, spec in played_specs(exp, device, checkpoints).items()
    ]


def merge(tasks: Sequence[RowTask], results: dict[int, Curves]) -> dict[str, dict[str, Curves]]:
    """The results by experiment, then row, in the order of ``tasks`` (whatever order they finished in)."""
    missing = [tasks[i].name for i in range(len(tasks)) if i not in results]
    if missing:
        raise RuntimeError(f"tasks without a result: {', '.join(missing)}")
    merged: dict[str, dict[str, Curves]] = {}
    for i, task in enumerate(tasks):
        merged.setdefault(task.experiment, {})[task.label] = results[i]
    return merged
