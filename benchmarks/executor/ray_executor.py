"""The Ray executor: the tasks of a sweep as Ray tasks, on a running cluster or on one started here.

``--ray auto`` connects to the cluster this machine belongs to (``ray start``); ``--ray local``
starts one on this machine with ``--workers`` CPUs and stops it at the end; any other value is a
cluster address (``HOST:PORT`` or ``ray://HOST:PORT``).  Each task asks for one CPU and plays with
one torch thread, so Ray places as many tasks on a machine as it has cores, and reserves the task's
memory estimate (:mod:`benchmarks.executor.memory`) of the machine's memory resource, so that a
machine never takes more tasks than their estimates fit in; tasks are submitted longest first.
Every machine of the cluster needs this package and its shipped models installed (``pip install -e
".[ray]"``).  Ray retries a task once when the process that ran it dies.  The connection is kept for
every sweep of a run and closed at its end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.executor import tasks as task_model
from benchmarks.executor.local import init_worker, inject_fault
from benchmarks.executor.tasks import Done, Task

MISSING = 'Ray is not installed; install the "ray" extra: pip install -e ".[ray]" (or pip install "ray>=2.9")'
"""The error when ``--ray`` is asked for without Ray."""


def import_ray() -> Any:
    """The ``ray`` module, or a ``RuntimeError`` naming the extra that installs it."""
    try:
        import ray
    except ImportError as err:
        raise RuntimeError(MISSING) from err
    return ray


def _play(task: Task) -> Any:
    """A Ray worker's task: one thread, no progress bars, then the task."""
    init_worker()
    inject_fault(task, 0)
    return task_model.run_task(task)


class RayExecutor:
    """The tasks as Ray tasks of one CPU each, on the cluster at ``address`` (``local``: one started here)."""

    def __init__(self, address: str, num_cpus: int) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self._started = False

    def _connect(self) -> Any:
        """The ``ray`` module, connected (a cluster started or joined on the first call)."""
        ray = import_ray()
        if not ray.is_initialized():
            if self.address == "local":
                ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
            self._started = True
        return ray

    def start(self) -> None:
        """Join or start the cluster now."""
        self._connect()

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Submit every task (longest first), then call ``done`` for each as it finishes."""
        ray = self._connect()
        play = ray.remote(num_cpus=1, max_retries=1)(_play)
        order = task_model.schedule(tasks)
        refs = {play.options(memory=int(tasks[i].memory) or None).remote(tasks[i]): i for i in order}
        pending = list(refs)
        try:
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                for ref in finished:
                    done(refs[ref], ray.get(ref))
        except BaseException:  # Ctrl-C or a failed task: cancel what is still queued or running
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def close(self) -> None:
        """Stop the cluster this executor started (or leave the one it joined)."""
        if self._started:
            import_ray().shutdown()
            self._started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
