"""The Ray executor: the tasks of a sweep as Ray tasks, on a running cluster or on one started here.

``--ray auto`` connects to the cluster this machine belongs to (``ray start``); ``--ray local``
starts one on this machine with ``--workers`` CPUs and stops it at the end; any other value is a
cluster address (``HOST:PORT`` or ``ray://HOST:PORT``).  Each task asks for one CPU and plays with
one torch thread, so Ray places as many tasks on a machine as it has cores.  Every machine of the
cluster needs this package and its shipped models installed (``pip install -e ".[ray]"``).
Ray retries a task once when the process that ran it dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.executor.local import init_worker
from benchmarks.executor.tasks import Curves, Done, Task, run_task

MISSING = 'Ray is not installed; install the "ray" extra: pip install -e ".[ray]" (or pip install "ray>=2.9")'
"""The error when ``--ray`` is asked for without Ray."""


def import_ray() -> Any:
    """The ``ray`` module, or a ``RuntimeError`` naming the extra that installs it."""
    try:
        import ray
    except ImportError as err:
        raise RuntimeError(MISSING) from err
    return ray


def _play(task: Task) -> Curves:
    """A Ray worker's task: one thread, no progress bars, then the row."""
    init_worker()
    return run_task(task)


class RayExecutor:
    """The tasks as Ray tasks of one CPU each, on the cluster at ``address`` (``local``: one started here)."""

    def __init__(self, address: str, num_cpus: int) -> None:
        self.address = address
        self.num_cpus = num_cpus

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Submit every task, then call ``done`` for each as it finishes."""
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            if self.address == "local":
                ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
        try:
            play = ray.remote(num_cpus=1, max_retries=1)(_play)
            refs = {play.remote(task): i for i, task in enumerate(tasks)}
            pending = list(refs)
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                for ref in finished:
                    done(refs[ref], ray.get(ref))
        finally:
            if started:
                ray.shutdown()
