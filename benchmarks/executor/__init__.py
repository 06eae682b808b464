"""Where the tasks of a sweep are played: in this process, on local worker processes, or on Ray.

:mod:`tasks` holds the task model (a task, the sweep that stores each result as it finishes and
returns them in task order, the default suite's row tasks), :mod:`local` the executors of this
machine (in process for ``--workers 1``, else worker processes) and :mod:`ray_executor` the one
that runs the same tasks on a Ray cluster.  :func:`make_executor` picks one from the flags.
"""

from __future__ import annotations

from typing import Any


def make_executor(workers: int, ray: str = "") -> Any:
    """The executor of ``--workers``/``--ray``: Ray with ``ray``, else processes when ``workers`` > 1, else in process.

    ``workers`` 0 means the cores this process may use.  The executor is a context manager: leaving
    it closes its pool or cluster.
    """
    from benchmarks.executor.local import InlineExecutor, ProcessExecutor, available_cores

    count = workers or available_cores()
    if ray:
        from benchmarks.executor.ray_executor import RayExecutor

        return RayExecutor(ray, count)
    return ProcessExecutor(count) if count > 1 else InlineExecutor()
