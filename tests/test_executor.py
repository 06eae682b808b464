"""The rows of a sweep as independent tasks: the same regret.csv whatever executes them, and nothing finished lost.

A small subset of the default suite (two experiments, a learned row and experts in each) is played
in process (``--workers 1``), on two worker processes, on a Ray cluster started here (skipped
without Ray), on worker processes one of which is killed in the middle of a task (also on Ray),
and stopped by Ctrl-C while a worker hangs, then resumed: every run writes the same regret.csv and
summary.md, byte for byte, and the resumed run plays only the row that had not finished.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.executor import tasks
from benchmarks.executor.local import KILL_ENV, KILL_MARKER_ENV, STALL_ENV
from benchmarks.executor.tasks import experiment_tasks, merge
from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.harness import cli, store
from benchmarks.harness.config import BenchConfig

ROOT = Path(__file__).resolve().parents[1]
SUBSET = "generalist-linear-d3-a5,generalist-bernoulli-k5-t200"
KILLED = "generalist-linear-d3-a5/LinUCB"
OUTPUTS = ("regret.csv", "summary.md")


def argv(out: Path) -> list[str]:
    """The flags of ``python -m benchmarks`` on the subset with 20 runs into ``out``."""
    return ["--experiments", SUBSET, "--runs", "20", "--out", str(out), "--quiet"]


def bench(out: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks`` on the subset with 20 runs into ``out`` (a fresh process, as a user runs it)."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv(out), *flags],
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


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (the 'ray' extra)")
def test_a_killed_ray_worker_is_retried_and_the_outputs_are_unchanged(serial, tmp_path):
    """SIGKILL from inside one Ray task: Ray runs it again (the marker file makes the second attempt play)."""
    env = {KILL_ENV: KILLED, KILL_MARKER_ENV: str(tmp_path / "killed-once")}
    bench(tmp_path / "out", "--ray", "local", "--workers", "2", env=env)
    assert (tmp_path / "killed-once").exists()
    assert_same_outputs(tmp_path / "out", serial)


def stored_rows(out: Path) -> int:
    """Rows stored in ``out``: those of stored experiments and the row files of unfinished ones.

    An experiment's row files are removed just after its result is written: in between, its rows count once.
    """
    folder = out / store.STORE
    whole = {p.stem for p in folder.glob("*.json")}
    rows = [p for p in folder.glob(f"{store.ROWS}/*/*.json") if p.parent.name not in whole]
    return sum(len(EXPERIMENTS[name].algorithms) for name in whole) + len(rows)


def test_ctrl_c_stops_the_workers_at_once_and_a_resumed_run_plays_only_the_unfinished_row(
    serial, tmp_path, monkeypatch
):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while a worker hangs in one task.

    The run stops within seconds (the hung worker is stopped, not waited for), leaves no process
    behind, and has stored every other row; the same command then plays only the hung task's row.
    """
    out = tmp_path / "stopped"
    log = tmp_path / "stderr.log"  # a file, not a pipe: a full pipe nobody reads would block the run
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks", *argv(out), "--workers", "2"],
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1", STALL_ENV: KILLED},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            # a shell's background job (CI run with `&`) ignores SIGINT, and the run would inherit that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    total = sum(len(EXPERIMENTS[name].algorithms) for name in SUBSET.split(","))
    deadline = time.monotonic() + 300
    while stored_rows(out) < total - 1:  # every row but the hung one
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    start = time.monotonic()
    proc.wait(timeout=60)
    assert proc.returncode != 0 and time.monotonic() - start < 30
    for _ in range(100):  # the workers are gone too (the group empties once the last one has exited)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("a process of the stopped run is still alive")
    assert stored_rows(out) == total - 1 and not (out / "regret.csv").exists()

    played: list[str] = []
    real = tasks.run_task
    monkeypatch.setattr(tasks, "run_task", lambda task: played.append(task.name) or real(task))
    cli.main([*argv(out), "--workers", "1"])
    assert [name for name in played if not name.endswith("/figures")] == [KILLED]  # the figures are drawn anew
    assert_same_outputs(out, serial)


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
