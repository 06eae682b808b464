"""Collection on the executor: paper-size LinUCB trajectories with one worker and with several, side by side.

For each of ``repeats`` rounds this script collects ``trajectories`` LinUCB (lambda 1, alpha 2)
trajectories on the paper's linear bandit (d=5, A=10, T=200) with
:func:`~benchmarks.executor.collection.collect_on_executor`, once in one process (``--workers 1``)
and once on ``workers`` local worker processes, each a fresh subprocess that writes the data set
with :func:`~icrl_gym.data.trajectories.save_trajectories`.  It times each whole subprocess (what
a user waits for: imports, the workers' start, the collection, the write), checks that the two
``.npz`` files are byte-identical, and prints the median time ratio (several workers / one;
acceptance: at most 0.6).  Run it on a quiet machine: other jobs on the cores distort the ratio.
Usage::

    python -m benchmarks.speed.collection_scaling [CONFIG.json] [--set trajectories=100000 repeats=3 workers=2]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.speed.timing import parse_config
from icrl_gym.config import Allowed, DictConfig, check_fields, checked

TARGET_TIME_RATIO = 0.6

COLLECT = """
import sys
from benchmarks.executor import make_executor
from benchmarks.executor.collection import collect_on_executor
from icrl_gym.data.trajectories import save_trajectories
from icrl_gym.envs import linear_bandit_spec

runs, workers, seed, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with make_executor(workers) as executor:
    executor.start()
    data = collect_on_executor(linear_bandit_spec(), "linucb", runs, executor=executor, seed=seed)
save_trajectories(data, path)
"""
"""The collection each subprocess runs: ``runs``, ``workers``, ``seed``, the output path."""


@dataclass
class CollectionScalingConfig(DictConfig):
    """What :func:`main` compares."""

    trajectories: int = checked(100_000, Allowed(low=1, integer=True))
    """Trajectories collected (batches of 10,000 are the tasks)."""
    workers: int = checked(2, Allowed(low=2, integer=True))
    """The worker count compared with one."""
    repeats: int = checked(1, Allowed(low=1, integer=True))
    """Rounds (each collects once per worker count); the ratio is their median."""
    seed: int = checked(0, Allowed(low=0, integer=True))
    """Seed of the collection."""
    out: str = "/tmp/collection-scaling"
    """Folder of the data sets (one per worker count, replaced each round)."""

    def __post_init__(self) -> None:
        check_fields(self)


def timed_collection(args: CollectionScalingConfig, workers: int, path: Path) -> float:
    """Wall seconds of one subprocess collecting ``args.trajectories`` on ``workers`` workers into ``path``."""
    argv = [sys.executable, "-c", COLLECT, str(args.trajectories), str(workers), str(args.seed), str(path)]
    start = time.perf_counter()
    proc = subprocess.run(argv, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"the collection on {workers} workers failed:\n{proc.stderr.decode()[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> float:
    """Run the comparison; return the median time ratio (several workers / one)."""
    args = parse_config(CollectionScalingConfig, argv)
    out = Path(args.out)
    print(f"cores: {os.cpu_count()}; load average: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    ratios = []
    for round_ in range(args.repeats):
        seconds, digests = {}, {}
        for n in (1, args.workers):
            folder = out / f"workers-{n}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            seconds[n] = timed_collection(args, n, folder / "data.npz")
            digests[n] = hashlib.sha256((folder / "data.npz").read_bytes()).hexdigest()
            print(f"round {round_ + 1} --workers {n}: {seconds[n]:7.1f} s, sha256 {digests[n][:16]}", flush=True)
        if digests[1] != digests[args.workers]:
            raise SystemExit(f"data.npz differs between --workers 1 and --workers {args.workers}")
        ratios.append(seconds[args.workers] / seconds[1])
    ratio = statistics.median(ratios)
    verdict = "pass" if ratio <= TARGET_TIME_RATIO else "FAIL"
    print(
        f"{args.trajectories:,} trajectories: data.npz byte-identical; --workers {args.workers} / --workers 1: "
        f"time {ratio:.3f} (target <= {TARGET_TIME_RATIO}: {verdict})",
        flush=True,
    )
    return ratio


if __name__ == "__main__":
    main()
