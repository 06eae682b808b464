"""Thread acceptance of the harness: its default against ``--threads 1`` and ``--threads 2`` with one core busy.

On a 2-core machine shared with other jobs, torch's intra-op threads fight the other jobs for the
cores, and a thread that waits for a busy core holds up every parallel region (a barrier per
matrix product).  ``python -m benchmarks`` therefore defaults to one thread.  This script checks
that choice as a measurement, in one run:

1. start a separate process that keeps one core busy (a numpy loop with a deadline, killed at the end);
2. time ``python -m benchmarks --runs 50`` (subprocesses, in turn) with the default settings, with
   ``--threads 1`` and with ``--threads 2``, each with its own ``--out``;
3. check that the three ``regret.csv`` are byte for byte the same, and print the wall times, the
   ratio default / ``--threads 1`` (acceptance: at most 1.2) and the load average before and after.

The subprocesses get the caller's environment without ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``
(a user's default); ``suite_runs=500`` also times the default suite at 500 runs.  Usage::

    python -m benchmarks.speed.thread_contention [CONFIG.json] [--set runs=50 suite_runs=500 out=/tmp/thread-contention]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.speed.timing import parse_config, timed
from icrl_gym.config import NONNEGATIVE_INT, POSITIVE, Allowed, DictConfig, check_fields, checked

BUSY_LOOP = """
import sys, time
import numpy as np
deadline = time.monotonic() + float(sys.argv[1])
x = np.random.default_rng(0).random((64, 64))
while time.monotonic() < deadline:
    x = np.tanh(x @ x.T / 64.0)
"""
TARGET_RATIO = 1.2


@dataclass
class ThreadContentionConfig(DictConfig):
    """What :func:`main` compares."""

    runs: int = checked(50, Allowed(low=2, integer=True))
    """Instances per algorithm of the compared runs (the harness's ``--runs``, at least 2)."""
    suite_runs: int = checked(0, NONNEGATIVE_INT)
    """Also time the default suite at this many runs (0: not)."""
    out: str = "/tmp/thread-contention"
    """Folder of the runs' results."""
    busy_limit: float = checked(3600.0, POSITIVE)
    """Deadline of the busy loop (seconds)."""

    def __post_init__(self) -> None:
        check_fields(self)


def _load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _bench_env() -> dict[str, str]:
    """The caller's environment without thread-count variables (the default a user gets)."""
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def time_harness(flags: list[str], out: Path) -> float:
    """Wall seconds of ``python -m benchmarks <flags> --out <out>`` (its output discarded, failure raised)."""
    cmd = [sys.executable, "-m", "benchmarks", *flags, "--out", str(out)]
    done: list[subprocess.CompletedProcess[str]] = []
    elapsed = timed(lambda: done.append(subprocess.run(cmd, env=_bench_env(), capture_output=True, text=True)))
    if done[0].returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done[0].returncode}):\n{done[0].stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the comparison; return the wall times by setting (and the ratio)."""
    args = parse_config(ThreadContentionConfig, argv)
    out = Path(args.out)
    settings = {"default": [], "--threads 1": ["--threads", "1"], "--threads 2": ["--threads", "2"]}
    print(f"cores: {os.cpu_count()}; load average before the busy loop: {_load()}", flush=True)
    busy = subprocess.Popen(
        [sys.executable, "-c", BUSY_LOOP, str(args.busy_limit)], env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    times: dict[str, float] = {}
    try:
        time.sleep(2.0)  # let the busy loop start
        for name, flags in settings.items():
            folder = out / name.strip("-").replace(" ", "")
            times[name] = time_harness(["--runs", str(args.runs), *flags], folder)
            print(f"{name:12s} --runs {args.runs}: {times[name]:6.1f} s (load average {_load()})", flush=True)
        if args.suite_runs:
            times[f"default --runs {args.suite_runs}"] = t = time_harness(
                ["--runs", str(args.suite_runs)], out / f"default-{args.suite_runs}"
            )
            print(f"default      --runs {args.suite_runs}: {t:6.1f} s (load average {_load()})", flush=True)
    finally:
        busy.kill()
        busy.wait()
    csvs = {name: (out / name.strip("-").replace(" ", "") / "regret.csv").read_bytes() for name in settings}
    same = len(set(csvs.values())) == 1
    ratio = times["default"] / times["--threads 1"]
    times["ratio"] = ratio
    print(f"regret.csv byte-identical across settings: {same}")
    verdict = "pass" if ratio <= TARGET_RATIO else "FAIL"
    print(f"ratio default / --threads 1 = {ratio:.2f} (target <= {TARGET_RATIO}: {verdict})")
    if not same:
        raise SystemExit("the settings gave different regret.csv files")
    return times


if __name__ == "__main__":
    main()
