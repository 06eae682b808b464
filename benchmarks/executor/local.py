"""The default executors: every task in this process (``--workers 1``), or on worker processes of this machine.

``--workers 1`` plays the tasks here, one after another, in their order (with the caller's torch
threads). ``--workers N`` runs them on N processes of a :class:`ProcessPoolExecutor`, forked from a
process that has imported torch and the agents once, and sharing those pages with it: this process
when it has not imported torch before, else a fork server (:func:`worker_context`), longest first
(by each task's cost estimate, :func:`~benchmarks.executor.tasks.schedule`), so that the last long
task does not start when the others are done, and one task per worker at a time, as long as the
memory estimates of the tasks in flight stay within a budget (:mod:`benchmarks.executor.memory`: the
heaviest rows never play beside each other, so N workers peak near one worker's memory). Each worker
plays with one torch thread and one OpenMP thread, so N workers use N cores and never oversubscribe
them. The pool is kept for every sweep of a run (the suite, then the grids), so a worker imports
torch and the agents once (:meth:`ProcessExecutor.start` starts the workers while the driver
prepares the tasks), and its Gittins tables go to a disk cache the workers share. A worker that dies
(killed, out of memory) breaks the pool: the tasks that had not finished are run again, once, in a
fresh pool; a task whose worker dies twice is an error naming it. Ctrl-C stops the workers at once
(they ignore the signal themselves, so that only this process decides); every task that finished
before was already handed back, and stored by the sweep.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from types import TracebackType
from typing import Any

from benchmarks.executor import tasks as task_model
from benchmarks.executor.memory import MemoryBudget
from benchmarks.executor.preload import preload
from benchmarks.executor.tasks import Done, Task
from icrl_gym.estimators.gittins import CACHE_ENV
from icrl_gym.utils.memory import release_freed_memory
from icrl_gym.utils.progress import log, set_quiet

KILL_ENV = "ICRL_BENCH_KILL_TASK"
"""Fault injection for tests: a worker playing the task of this name kills itself with SIGKILL (as the kernel's
out-of-memory killer would), on its first attempt, or, with :data:`KILL_MARKER_ENV`, while that file does not exist."""

KILL_MARKER_ENV = "ICRL_BENCH_KILL_MARKER"
"""A file the fault injection creates before the kill: a retry (in another process, on Ray too) finds it and plays."""


def available_cores() -> int:
    """The cores this process may use (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def init_worker(gittins_cache: str | None = None, environ: dict[str, str] | None = None) -> None:
    """A worker's setup: one thread for torch and OpenMP, no progress bars, Ctrl-C left to the driving process.

    It imports torch and the task model once, here, for every task the worker will play (a no-op when
    the process it was forked from imported them, :func:`worker_context`).  ``environ`` is the
    driver's environment when the pool started: a worker forked from the fork server would otherwise
    see the server's, as it was when the first pool of this process started.  With ``gittins_cache``
    (unless the user set one) the Gittins agents keep their tables in that folder, shared by the
    run's workers: a table one worker built is loaded by the others, not built again.
    """
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    if gittins_cache is not None:
        os.environ.setdefault(CACHE_ENV, gittins_cache)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    import benchmarks.executor.tasks  # noqa: F401  (the agents and the suite's rows, before the first task)

    torch.set_num_threads(1)
    set_quiet(True)


def worker_context(first: bool = True) -> BaseContext:
    """How the local workers start: forked from this process, forked from a fork server, or spawned.

    - ``fork`` (Linux, ``first``, and torch not imported here yet): this process imports the
      workers' code (:func:`~benchmarks.executor.preload.preload`), and every worker shares its pages
      (the driver's and the workers' torch count once in memory).  A forked copy of a process whose
      torch thread pools run can hang; with no torch imported before, none runs here.
    - ``forkserver`` otherwise on Linux and macOS: a fresh server imports the workers' code once
      (:mod:`benchmarks.executor.worker_preload`) and the workers are forked from it.
    - ``spawn`` on Windows: every worker a fresh interpreter.
    """
    methods = multiprocessing.get_all_start_methods()
    if first and sys.platform.startswith("linux") and "torch" not in sys.modules:
        preload()
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload(["benchmarks.executor.worker_preload"])
        return server
    return multiprocessing.get_context("spawn")


def _ready() -> None:
    """A task that does nothing: submitted once per worker, it starts the workers while the driver prepares."""


STALL_ENV = "ICRL_BENCH_STALL_TASK"
"""Fault injection for tests: a worker playing the task of this name hangs (an hour's sleep), as a stuck one would."""


def inject_fault(task: Task, attempt: int) -> None:
    """The tests' fault injection: SIGKILL this process (:data:`KILL_ENV`), or hang it (:data:`STALL_ENV`)."""
    if os.environ.get(STALL_ENV) == task.name:
        time.sleep(3600)
    if os.environ.get(KILL_ENV) != task.name:
        return
    marker = os.environ.get(KILL_MARKER_ENV)
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    elif attempt:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _play(task: Task, attempt: int) -> Any:
    """A worker's task, after the tests' fault injection; then the heap's freed pages go back to the system.

    Without the trim a worker would keep the high-water mark of every task it played (glibc keeps
    freed blocks below its mmap threshold), and the memory budget would bound nothing.
    """
    inject_fault(task, attempt)
    try:
        return task_model.run_task(task)
    finally:
        release_freed_memory()


class InlineExecutor:
    """Every task in this process, one after another in their order (``--workers 1``).

    ``threads``: the torch threads the tasks play with (None: torch's setting is left as it is).
    """

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads

    def start(self) -> None:
        """Set the torch threads of this process (torch is imported here, not by a driver that only hands out tasks)."""
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Play each task and hand its result to ``done`` before the next starts."""
        for i, task in enumerate(tasks):
            done(i, task_model.run_task(task))

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ProcessExecutor:
    """The tasks on ``workers`` processes, longest first, within a memory budget."""

    def __init__(self, workers: int, memory_budget: float | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.memory_budget = memory_budget
        """Bytes the tasks in flight may hold by their estimates (None: :class:`MemoryBudget`'s default)."""
        self._slots = workers
        self._pool: ProcessPoolExecutor | None = None
        self._pools = 0
        self._cache: str | None = None

    def start(self) -> None:
        """Start the workers now (they import torch and the agents while the driver prepares the tasks)."""
        pool = self._pool_for(self.workers)
        for _ in range(self.workers):
            pool.submit(_ready)

    def run(self, tasks: Sequence[Task], done: Done) -> None:
        """Run every task; ``done`` is called in this process as each finishes (in the order they finish)."""
        attempts = [0] * len(tasks)
        budget = MemoryBudget([task.memory for task in tasks], self.workers, self.memory_budget)
        todo = task_model.schedule(tasks)  # longest first
        while todo:
            lost, unstarted = self._run_pool(tasks, todo, attempts, budget, done)
            twice = [tasks[i].name for i in lost if attempts[i] >= 1]
            if twice:
                raise RuntimeError(f"a worker died twice while playing {', '.join(twice)}; giving up")
            for i in lost:
                attempts[i] += 1
            if lost:
                names = ", ".join(tasks[i].name for i in lost)
                log(f"a worker died; running its unfinished tasks again in a fresh pool: {names}")
            again = set(lost) | set(unstarted)
            todo = [i for i in todo if i in again]

    def _pool_for(self, tasks: int) -> ProcessPoolExecutor:
        """The running pool, or a fresh one (of at most ``tasks`` workers when it is the first).

        The first pool's workers may be forked from this process (:func:`worker_context`); a later
        one (after a worker died) comes from a fork server, as this process may have used torch since.
        """
        if self._pool is None:
            context = worker_context(first=not self._pools)
            self._pools += 1
            self._slots = min(self.workers, max(tasks, 1))
            self._cache = self._cache or tempfile.mkdtemp(prefix="icrl-bench-gittins-")
            self._pool = ProcessPoolExecutor(
                max_workers=self._slots,
                mp_context=context,
                initializer=init_worker,
                initargs=(self._cache, dict(os.environ)),
            )
        return self._pool

    def _run_pool(
        self, tasks: Sequence[Task], todo: list[int], attempts: list[int], budget: MemoryBudget, done: Done
    ) -> tuple[list[int], list[int]]:
        """Run the tasks ``todo`` in the pool, one per worker, in that order as ``budget`` admits them.

        No task waits in the pool's queue: a queued task would count against the budget before it
        plays, and hold back a heavy task that could start beside the one still playing.

        Returns the tasks lost to a broken pool (those in flight when a worker died) and those not
        started by then.
        """
        pool = self._pool_for(len(todo))
        waiting = list(todo)
        futures: dict[Future[Any], int] = {}
        lost: list[int] = []
        broken = False
        try:
            while futures or (waiting and not broken):
                while waiting and not broken and len(futures) < self._slots:
                    i = budget.next_of(waiting)
                    if i is None:  # the next tasks wait until those in flight free their memory
                        break
                    try:
                        future = pool.submit(_play, tasks[i], attempts[i])
                    except BrokenProcessPool:  # a worker died since the last task finished
                        broken = True
                        break
                    waiting.remove(i)
                    budget.start(i)
                    futures[future] = i
                if not futures:
                    break
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=futures.__getitem__):
                    i = futures.pop(future)
                    budget.finish(i)
                    try:
                        result = future.result()
                    except BrokenProcessPool:
                        lost.append(i)
                        broken = True
                        continue
                    done(i, result)
        except BaseException:  # Ctrl-C, or a failed task or ``done``: stop the workers, keep nothing running
            self._stop()
            raise
        if broken:
            self._stop()
        return sorted(lost), waiting

    def _stop(self) -> None:
        """Kill the workers now and forget the pool (a later ``run`` starts a fresh one)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())  # the pool keeps no public list
        for process in processes:
            if process.is_alive():
                process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(timeout=10)

    def close(self) -> None:
        """Shut the pool down once its workers are idle (the end of a run), and remove the Gittins cache."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._remove_cache()

    def _remove_cache(self) -> None:
        cache, self._cache = self._cache, None
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._stop()
            self._remove_cache()
