"""Where the tasks of a sweep are played: in this process, on local worker processes, or on Ray.

:mod:`tasks` holds the task model (a task, the sweep that stores each result as it finishes and
returns them in task order, the order tasks are submitted in, the default suite's row tasks),
:mod:`local` the executors of this machine (in process for ``--workers 1``, else worker processes),
:mod:`ray_executor` the one that runs the same tasks on a Ray cluster, :mod:`store` a task store of
one file per task, and :mod:`collection` pretraining data collected batch by batch on an executor.
:func:`make_executor` picks an executor from the flags.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

WORKERS_HELP = (
    "worker processes that play the tasks, each with one torch thread (0: the cores this process may use; "
    "1: every task in this process, one after another).  The results do not depend on it."
)
RAY_HELP = (
    "play the tasks on a Ray cluster instead: 'auto' (the cluster this machine joined with 'ray start'), "
    "'local' (one started here with --workers CPUs) or an address HOST:PORT; needs the 'ray' extra "
    '(pip install -e ".[ray]")'
)


def make_executor(workers: int, ray: str = "", threads: int | None = None) -> Any:
    """The executor of ``--workers``/``--ray``: Ray with ``ray``, else processes when ``workers`` > 1, else in process.

    ``workers`` 0 means the cores this process may use; ``threads`` is the torch threads of the
    in-process executor (workers play with one each).  The executor is a context manager: leaving
    it closes its pool or cluster.
    """
    from benchmarks.executor.local import InlineExecutor, ProcessExecutor, available_cores

    count = workers or available_cores()
    if ray:
        from benchmarks.executor.ray_executor import RayExecutor

        return RayExecutor(ray, count)
    return ProcessExecutor(count) if count > 1 else InlineExecutor(threads)


def add_executor_flags(parser: argparse.ArgumentParser, workers: int = 0) -> None:
    """``--workers`` and ``--ray`` on an evaluation's command line (``workers``: the default)."""
    parser.add_argument("--workers", type=int, default=workers, help=WORKERS_HELP)
    parser.add_argument("--ray", default="", help=RAY_HELP)


def check_executor_flags(workers: int, ray: str) -> None:
    """Refuse a negative ``--workers``, or ``--ray`` without Ray (``ValueError`` naming the flag)."""
    if workers < 0:
        raise ValueError(f"--workers must be >= 0 (0: the cores this process may use), got {workers}")
    if ray and importlib.util.find_spec("ray") is None:
        from benchmarks.executor.ray_executor import MISSING

        raise ValueError(f"--ray {ray}: {MISSING}")
