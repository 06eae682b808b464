"""Scaling of the executor: ``python -m benchmarks`` with one worker and with several, side by side.

For each of ``repeats`` rounds this script runs, in turn, the default suite (``--runs runs``) and a
small MDP grid (``--experiments mdp-generalization --mdp-cells fixed --runs mdp_runs``: one cell,
every row in slices of runs) with ``--workers 1`` and with ``--workers workers``, each a fresh
subprocess into a fresh ``--out`` (a folder holding stored results would reuse them), twice: once
timed alone, once with the memory of its process tree sampled (the sampler's reads of ``/proc``
take a share of a core, which would slow a timed run).  It records the wall time, and the peak
memory of the whole process tree (the command and every worker it started), sampled every
``sample_seconds`` from ``/proc``: the peak of the summed resident set
sizes (RSS, which counts pages shared between the processes, such as torch's libraries, once per
process) and the peak of the summed proportional set sizes (PSS, which splits a shared page
between the processes that map it).  It checks that ``regret.csv`` and the grid's ``cells.csv`` are
byte-identical across the worker counts, then prints the median time ratio (several workers / one;
acceptance: at most 0.6) and the median peak-memory ratio (acceptance: at most 1.5, on PSS: the
memory the process tree uses, each page counted once; RSS is printed beside it, but it counts a page
shared by the driver and its forked workers once per process, so it overstates what several
processes use by their shared libraries).  Run it on a quiet machine: other jobs on the cores
distort the time ratio.  With ``curve=true`` it also times every power of two below ``workers``
(the scaling curve 1, 2, 4, ..., ``workers``), and ``memory=false`` skips the memory-sampled runs
(which double the script's time) when only the times are wanted.  Usage::

    python -m benchmarks.speed.executor_scaling [CONFIG.json] [--set runs=200 mdp_runs=200 repeats=3 workers=2]
    python -m benchmarks.speed.executor_scaling --set workers=16 curve=true memory=false repeats=1
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.speed.timing import parse_config
from icrl_gym.config import POSITIVE, POSITIVE_INT, Allowed, DictConfig, check_fields, checked

TARGET_TIME_RATIO = 0.6
TARGET_MEMORY_RATIO = 1.5


@dataclass
class ExecutorScalingConfig(DictConfig):
    """What :func:`main` compares."""

    runs: int = checked(200, Allowed(low=2, integer=True))
    """Instances per algorithm of the default suite (the harness's ``--runs``)."""
    mdp_runs: int = checked(200, Allowed(low=2, integer=True))
    """Runs of the small MDP grid (its fixed-size cell plays twice as many)."""
    workers: int = checked(2, Allowed(low=2, integer=True))
    """The worker count compared with one."""
    curve: bool = False
    """Also time every power of two below ``workers`` (the counts 1, 2, 4, ..., ``workers``)."""
    memory: bool = True
    """Sample the peak memory too (each count runs a second time with the sampler on)."""
    repeats: int = checked(3, POSITIVE_INT)
    """Rounds (each runs every command once per worker count); the ratios are their medians."""
    sample_seconds: float = checked(0.05, POSITIVE)
    """Interval of the memory samples."""
    out: str = "/tmp/executor-scaling"
    """Folder of the runs' results (each run gets a fresh subfolder)."""

    def __post_init__(self) -> None:
        check_fields(self)


def _children() -> dict[int, list[int]]:
    """Every process's children, from ``/proc/<pid>/stat`` (the parent pid is the fourth field)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # the process exited
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(parent, []).append(int(entry))
    return tree


def _kib(path: str, field: str) -> int:
    """The value in KiB of ``field`` in a ``/proc`` status-like file (0 when the process is gone)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_memory(root: int) -> tuple[int, int]:
    """Summed RSS and PSS (bytes) of ``root`` and all its descendants now."""
    tree, todo, rss, pss = _children(), [root], 0, 0
    while todo:
        pid = todo.pop()
        rss += _kib(f"/proc/{pid}/status", "VmRSS:")
        pss += _kib(f"/proc/{pid}/smaps_rollup", "Pss:")
        todo += tree.get(pid, [])
    return rss * 1024, pss * 1024


def measured_run(argv: list[str], interval: float | None) -> tuple[float, int, int]:
    """Wall seconds and peak summed RSS and PSS (bytes) of the command ``argv`` and its process tree.

    With ``interval`` None nothing is sampled (memory 0): the sampler walks ``/proc`` and reads every
    process's ``smaps_rollup``, work that takes a share of a core and would slow the timed run.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0, 0]
    stop = threading.Event()

    def sample(every: float) -> None:
        while not stop.is_set():
            rss, pss = tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            stop.wait(every)

    sampler = None if interval is None else threading.Thread(target=sample, args=(interval,), daemon=True)
    if sampler is not None:
        sampler.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - start
    stop.set()
    if sampler is not None:
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    return seconds, peak[0], peak[1]


def commands(args: ExecutorScalingConfig) -> dict[str, tuple[list[str], str]]:
    """The compared commands (without ``--workers`` and ``--out``), and the output compared across worker counts."""
    harness = [sys.executable, "-m", "benchmarks", "--quiet"]
    return {
        "suite": ([*harness, "--runs", str(args.runs)], "regret.csv"),
        "mdp grid": (
            [*harness, "--experiments", "mdp-generalization", "--mdp-cells", "fixed", "--runs", str(args.mdp_runs)],
            "mdp-generalization/cells.csv",
        ),
    }


def worker_counts(args: ExecutorScalingConfig) -> tuple[int, ...]:
    """The compared worker counts: 1 and ``workers``, with the powers of two between them on a curve."""
    if not args.curve:
        return (1, args.workers)
    counts = [1]
    while counts[-1] * 2 < args.workers:
        counts.append(counts[-1] * 2)
    return (*counts, args.workers)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the comparison; return per command the median time ratio and peak-memory ratios.

    The ratios are those of ``workers`` against one worker (``time``, ``rss``, ``pss``; the memory
    ratios only with ``memory``), and on a curve ``time@N`` for every other count N.
    """
    args = parse_config(ExecutorScalingConfig, argv)
    out = Path(args.out)
    counts = worker_counts(args)
    print(f"cores: {os.cpu_count()}; load average: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results: dict[str, dict[str, float]] = {}
    for name, (command, output) in commands(args).items():
        seconds: dict[int, list[float]] = {n: [] for n in counts}
        rss: dict[int, list[int]] = {n: [] for n in counts}
        pss: dict[int, list[int]] = {n: [] for n in counts}
        runs = [(n, False) for n in counts] + ([(n, True) for n in counts] if args.memory else [])
        for round_ in range(args.repeats):
            made: dict[int, bytes] = {}
            # the worker counts take turns, so a change of the machine's load hits each; each is run timed
            # alone, then (with ``memory``) again with its memory sampled
            for n, sampled in runs:
                folder = out / name.replace(" ", "-") / f"workers-{n}"
                shutil.rmtree(folder, ignore_errors=True)
                argv = [*command, "--workers", str(n), "--out", str(folder)]
                t, r, p = measured_run(argv, args.sample_seconds if sampled else None)
                if sampled:
                    rss[n].append(r)
                    pss[n].append(p)
                    print(
                        f"{name:8s} round {round_ + 1} --workers {n}: peak RSS {r / 2**20:7.0f} MiB, "
                        f"peak PSS {p / 2**20:7.0f} MiB",
                        flush=True,
                    )
                    continue
                seconds[n].append(t)
                made[n] = (folder / output).read_bytes()
                print(f"{name:8s} round {round_ + 1} --workers {n}: {t:7.1f} s", flush=True)
            differing = [n for n in counts if made[n] != made[1]]
            if differing:
                raise SystemExit(f"{name}: {output} differs between --workers 1 and --workers {differing}")

        def ratio(values: dict[int, list[int]] | dict[int, list[float]], n: int) -> float:
            return statistics.median(a / b for a, b in zip(values[n], values[1], strict=True))

        many = args.workers
        ratios = {"time": ratio(seconds, many)}
        if args.memory:
            ratios |= {"rss": ratio(rss, many), "pss": ratio(pss, many)}
        ratios |= {f"time@{n}": ratio(seconds, n) for n in counts[1:-1]}
        results[name] = ratios
        time_verdict = "pass" if ratios["time"] <= TARGET_TIME_RATIO else "FAIL"
        line = (
            f"{name}: {output} byte-identical across --workers {', '.join(map(str, counts))}; "
            f"--workers {many} / --workers 1: time {ratios['time']:.3f} (target <= {TARGET_TIME_RATIO}: {time_verdict})"
        )
        if args.memory:
            memory_verdict = "pass" if ratios["pss"] <= TARGET_MEMORY_RATIO else "FAIL"
            line += (
                f", peak memory PSS {ratios['pss']:.2f} (target <= {TARGET_MEMORY_RATIO}: {memory_verdict}; "
                f"RSS {ratios['rss']:.2f}, which counts each shared page once per process)"
            )
        if args.curve:
            curve = ", ".join(f"{n}: {statistics.median(seconds[n]):.1f} s ({ratio(seconds, n):.3f})" for n in counts)
            line += f"\n{name} scaling curve (median seconds, ratio to one worker): {curve}"
        print(line, flush=True)
    return results


if __name__ == "__main__":
    main()
