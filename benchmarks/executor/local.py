"""The default executor: worker processes on this machine, one torch thread each.

``--workers N`` runs the tasks of a sweep on N processes of a :class:`ProcessPoolExecutor` started
with ``spawn`` (a forked copy of a process that has used torch's thread pools can hang).  Each worker
plays with one torch thread and one OpenMP thread, so N workers use N cores and never oversubscribe
them.  A worker that dies (killed, out of memory) breaks the pool: the tasks that had not finished
are run again, once, in a fresh pool; a task whose worker dies twice is an error naming it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from benchmarks.executor.tasks import Curves, Done, Task, run_task
from icrl_gym.utils.progress import log, set_quiet

KILL_ENV = "ICRL_BENCH_KILL_TASK"
"""Fault injection for tests: a worker playing the task of this name (``experiment/label``) on its
first attempt kills itself with SIGKILL, as the kernel's out-of-memory killer would."""


def available_cores() -> int:
    """The cores this process may use (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def init_worker() -> None:
    """A worker's setup: one thread for torch and OpenMP, no progress bars (the driver draws the one bar)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    set_quiet(True)


def _play(task: Task, attempt: int) -> Curves:
    """A worker's task, with the test's fault injection on a first attempt."""
    if attempt == 0 and os.environ.get(KILL_ENV) == task.name:
        os.kill(os.getpid(), signal.SIGKILL)
    return run_task(task)


class ProcessExecutor:
    """The tasks on ``workers`` spawned processes; a task whose worker died is retried once in a fresh pool."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Run every task; ``done`` is called in this process as each finishes (in the order they finish)."""
        attempts = [0] * len(tasks)
        todo = list(range(len(tasks)))
        while todo:
            broken = self._run_pool(tasks, todo, attempts, done)
            twice = [tasks[i].name for i in broken if attempts[i] >= 1]
            if twice:
                raise RuntimeError(f"a worker died twice while playing {', '.join(twice)}; giving up")
            for i in broken:
                attempts[i] += 1
            if broken:
                names = ", ".join(tasks[i].name for i in broken)
                log(f"a worker died; running its unfinished tasks again in a fresh pool: {names}")
            todo = broken

    def _run_pool(self, tasks: Sequence[Task], todo: list[int], attempts: list[int], done: Done) -> list[int]:
        """Run the tasks ``todo`` in one pool; the indices of those lost to a broken pool, in order."""
        context = multiprocessing.get_context("spawn")
        workers = min(self.workers, len(todo))
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker)
        futures: dict[Future[Curves], int] = {pool.submit(_play, tasks[i], attempts[i]): i for i in todo}
        broken: list[int] = []
        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=futures.__getitem__):
                    try:
                        curves = future.result()
                    except BrokenProcessPool:
                        broken.append(futures[future])
                        continue
                    done(futures[future], curves)
        finally:
            pool.shutdown(wait=not broken, cancel_futures=True)
        return sorted(broken)
