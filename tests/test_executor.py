"""The rows of a sweep as independent tasks: the same regret.csv whatever executes them.

A small subset of the default suite (two experiments, a learned row and experts in each) is played
serially (``--workers 1``, today's in-process path), on two worker processes, on a Ray cluster
started here (skipped without Ray), and on worker processes one of which is killed in the middle
of a task: every run writes the same regret.csv and summary.md, byte for byte.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.executor.local import KILL_ENV
from benchmarks.executor.tasks import experiment_tasks, merge
from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.harness.config import BenchConfig

ROOT = Path(__file__).resolve().parents[1]
SUBSET = "generalist-linear-d3-a5,generalist-bernoulli-k5-t200"
KILLED = "generalist-linear-d3-a5/LinUCB"
OUTPUTS = ("regret.csv", "summary.md")


def bench(out: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks`` on the subset with 20 runs into ``out`` (a fresh process, as a user runs it)."""
    argv = [sys.executable, "-m", "benchmarks", "--experiments", SUBSET, "--runs", "20", "--out", str(out), "--quiet"]
    proc = subprocess.run(
        [*argv, *flags],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    """The serial run: every row in one process, one after another."""
    out = tmp_path_factory.mktemp("serial")
    bench(out, "--workers", "1")
    return out


def assert_same_outputs(out: Path, reference: Path) -> None:
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_two_workers_write_the_serial_outputs(serial, tmp_path):
    bench(tmp_path, "--workers", "2")
    assert_same_outputs(tmp_path, serial)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (the 'ray' extra)")
def test_ray_writes_the_serial_outputs(serial, tmp_path):
    bench(tmp_path, "--ray", "local", "--workers", "2")
    assert_same_outputs(tmp_path, serial)


def test_a_killed_worker_is_retried_and_the_outputs_are_unchanged(serial, tmp_path):
    """SIGKILL from inside one task on its first attempt: the pool breaks, its unfinished tasks run again."""
    proc = bench(tmp_path, "--workers", "2", env={KILL_ENV: KILLED})
    assert "a worker died" in proc.stderr and KILLED in proc.stderr
    assert_same_outputs(tmp_path, serial)


def test_results_merge_in_row_order_whatever_order_they_finish_in():
    exps = [EXPERIMENTS[name] for name in SUBSET.split(",")]
    tasks = [t for exp in exps for t in experiment_tasks(exp, 20, 0, "cpu")]
    results = {i: {"index": i} for i in reversed(range(len(tasks)))}
    merged = merge(tasks, results)  # type: ignore[arg-type]
    assert list(merged) == [exp.name for exp in exps]
    for exp in exps:
        assert list(merged[exp.name]) == list(exp.algorithms)
    with pytest.raises(RuntimeError, match="without a result"):
        merge(tasks, {0: results[0]})  # type: ignore[arg-type]


def test_ray_without_ray_is_refused_naming_the_extra(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ValueError, match=r'pip install -e "\.\[ray\]"'):
        BenchConfig(ray="auto", out=str(tmp_path / "out")).validate()
