"""The harness stores each experiment's result as soon as it finishes and resumes from stored results.

A run killed mid-way resumes and ends with the same regret.csv, byte for byte, as an uninterrupted
run; a changed setting or checkpoint reruns; a damaged stored result is reported and rerun; a
subset run into an old folder leaves no outputs of other experiments.  Two cheap experiments with
a few runs keep it fast: an expert-only MDP one and a linear one with a shipped transformer.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.executor import tasks
from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.harness import cli, report, store
from benchmarks.plots import plot_files
from icrl_gym.checkpoint import PRETRAINED_DIR
from icrl_gym.utils.provenance import software_environment

ROOT = Path(__file__).resolve().parents[1]
FIRST, SECOND = "tabular-mdp-nonstationary", "ood-linear-noise"


def argv(out: Path, experiments: str = f"{FIRST},{SECOND}", runs: int = 4, seed: int = 1) -> list[str]:
    """The harness command line of these tests."""
    flags = ["--runs", str(runs), "--seed", str(seed), "--out", str(out), "--quiet"]
    return ["--experiments", experiments, *flags, "--workers", "1"]  # every task in this process, which the tests hook


def rows(name: str) -> list[str]:
    """The row tasks of an experiment, as the harness names them (``experiment/label``), in row order."""
    return [f"{name}/{label}" for label in EXPERIMENTS[name].algorithms]


@pytest.fixture
def computed(monkeypatch) -> list[str]:
    """The row tasks the harness actually plays (not reuses), in order, as ``experiment/label``."""
    names: list[str] = []
    real = tasks.run_task

    def counting(task):
        if isinstance(task, tasks.RowTask):  # the figures are tasks too, drawn afresh by every run
            names.append(task.name)
        return real(task)

    monkeypatch.setattr(tasks, "run_task", counting)
    return names


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """An uninterrupted run of both experiments."""
    out = tmp_path_factory.mktemp("full")
    cli.main(argv(out))
    return out


KILLER = """
import os, signal, sys
from benchmarks.executor import tasks
from benchmarks.harness import cli

real = tasks.run_task
played = []


def run(task):  # SIGKILL when the second row of this experiment starts: no cleanup of any kind
    if task.experiment == sys.argv[1]:
        played.append(task.name)
        if len(played) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(task)


tasks.run_task = run
cli.main(sys.argv[2:])
"""


def test_killed_run_resumes_to_the_same_csv(full, tmp_path, computed, capsys):
    """SIGKILL in the second experiment's second row: the first experiment and the finished row are stored.

    Resuming plays only the rows not finished.
    """
    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, SECOND, *argv(out)], cwd=ROOT, env=env, capture_output=True, timeout=600
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    stored = sorted(p.name for p in (out / store.STORE).iterdir())
    assert stored == sorted([f"{FIRST}.json", store.ROWS])  # the finished experiment, and no temporary file
    assert next(iter(EXPERIMENTS[SECOND].algorithms)) == "TF (AD LinUCB)"  # its finished row was kept:
    assert [p.name for p in (out / store.STORE / store.ROWS / SECOND).iterdir()] == ["00-TF_AD_LinUCB.json"]
    assert not (out / "regret.csv").exists()
    first_bytes = (out / store.STORE / f"{FIRST}.json").read_bytes()

    cli.main(argv(out))
    assert computed == rows(SECOND)[1:]  # the finished experiment and row were reused, not recomputed
    assert not (out / store.STORE / store.ROWS).exists()  # the rows are in the experiment's stored result
    assert f"{FIRST}: reused the stored result" in capsys.readouterr().err
    assert (out / "regret.csv").read_bytes() == (full / "regret.csv").read_bytes()
    assert (out / store.STORE / f"{FIRST}.json").read_bytes() == first_bytes
    assert json.loads((out / "config.json").read_text())["reused"] == [FIRST]
    assert json.loads((out / "config.json").read_text())["software"] == software_environment()
    assert json.loads(first_bytes)["software"] == software_environment()  # the stored result says what played it


def test_same_command_reuses_everything(full, computed):
    before = (full / "regret.csv").read_bytes()
    cli.main(argv(full))
    assert computed == []
    assert (full / "regret.csv").read_bytes() == before


def test_row_files_left_beside_a_stored_experiment_are_removed_on_resume(full, tmp_path, computed):
    """A run stopped after writing an experiment's result, before removing its row files, left them: they go."""
    out = tmp_path / "left"
    shutil.copytree(full, out)
    left = out / store.STORE / store.ROWS / SECOND / "00-TF_AD_LinUCB.json"  # its first row's file
    left.parent.mkdir(parents=True)
    left.write_text("{}")
    cli.main(argv(out))
    assert computed == [] and not (out / store.STORE / store.ROWS).exists()
    assert (out / "regret.csv").read_bytes() == (full / "regret.csv").read_bytes()


def test_rerun_flag_ignores_stored_results(tmp_path, computed):
    cli.main(argv(tmp_path, FIRST))
    cli.main([*argv(tmp_path, FIRST), "--rerun"])
    assert computed == rows(FIRST) * 2


@pytest.mark.parametrize(("change", "field"), [({"runs": 5}, "runs"), ({"seed": 2}, "seed")])
def test_changed_runs_or_seed_reruns(tmp_path, computed, capsys, change, field):
    cli.main(argv(tmp_path, FIRST))
    cli.main(argv(tmp_path, FIRST, **change))
    assert computed == rows(FIRST) * 2
    assert f"differs in {field}" in capsys.readouterr().err
    stored = json.loads((tmp_path / store.STORE / f"{FIRST}.json").read_text())
    assert stored["key"][field] == change[field]  # the stale stored result was replaced
    # the resumed folder's CSV is that of a fresh run with the new setting
    cli.main(argv(tmp_path / "fresh", FIRST, **change))
    assert (tmp_path / "regret.csv").read_bytes() == (tmp_path / "fresh" / "regret.csv").read_bytes()


def test_key_names_checkpoints_by_content(tmp_path):
    """A copied checkpoint keys like the shipped one (the path does not count); a changed file does not."""
    exp = EXPERIMENTS[SECOND]
    name = exp.algorithms["TF (AD LinUCB)"]["checkpoint"]
    for suffix in (".safetensors", ".json"):
        shutil.copyfile(PRETRAINED_DIR / f"{name}{suffix}", tmp_path / f"copy{suffix}")
    shipped = store.experiment_key(exp, 4, 1, "cpu")
    copy = store.experiment_key(exp, 4, 1, "cpu", {name: str(tmp_path / "copy")})
    assert copy == shipped
    assert shipped["rows"]["TF (AD LinUCB)"]["weights_sha256"] is not None
    for suffix in (".json", ".safetensors"):
        with open(tmp_path / f"copy{suffix}", "ab") as fh:
            fh.write(b" ")
        changed = store.experiment_key(exp, 4, 1, "cpu", {name: str(tmp_path / "copy")})
        assert changed["rows"]["TF (AD LinUCB)"] != shipped["rows"]["TF (AD LinUCB)"]
        assert changed["rows"]["LinUCB"] == shipped["rows"]["LinUCB"]
    assert store.experiment_key(exp, 4, 1, "cuda") != shipped  # the device of the learned rows counts


def test_subset_run_removes_outputs_of_other_experiments(full, tmp_path, computed):
    out = tmp_path / "folder"
    shutil.copytree(full, out)
    (out / "notes.txt").write_text("mine")
    cli.main(argv(out, SECOND))
    assert computed == []  # stored
    names = {p.name for p in out.iterdir()}
    assert names == {
        "regret.csv",
        "summary.md",
        "config.json",
        "index.html",
        f"{SECOND}.png",
        store.STORE,
        "notes.txt",
    }
    assert {row.split(",")[0] for row in (out / "regret.csv").read_text().splitlines()[1:]} == {SECOND}
    assert EXPERIMENTS[FIRST].title not in (out / "summary.md").read_text()
    assert list(json.loads((out / "config.json").read_text())["experiments_run"]) == [SECOND]
    # the other experiment's stored result stays, so naming it again reuses it
    cli.main(argv(out, FIRST))
    assert computed == []
    assert f"{FIRST}.png" in {p.name for p in out.iterdir()} and not (out / f"{SECOND}.png").exists()


def test_remove_stale_outputs_touches_only_harness_outputs(tmp_path):
    every = ["regret.csv", "summary.md", "config.json", "index.html", "notes.txt"]
    every += [f"{name}.png" for name in EXPERIMENTS] + ["distribution-ratio-difference.png"]
    for name in every:
        (tmp_path / name).write_text("x")
    (tmp_path / store.STORE).mkdir()
    keep = {"regret.csv", "summary.md", "config.json", "bernoulli-dpt.png"}
    removed = report.remove_stale_outputs(tmp_path, keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*keep, "notes.txt", store.STORE])
    assert set(removed) == set(every) - keep - {"notes.txt"}
    assert plot_files(EXPERIMENTS["distribution-ratio"]) == [
        "distribution-ratio.png",
        "distribution-ratio-difference.png",
    ]


def _tamper(path: Path) -> None:
    """Change one stored value without updating the checksum."""
    data = json.loads(path.read_text())
    curves = next(iter(data["curves"].values()))
    curves["cumulative_regret_mean"][-1] += 1.0
    path.write_text(json.dumps(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_rows(path: Path) -> None:
    """A consistent file (checksum updated) whose curves are not the experiment's rows."""
    data = json.loads(path.read_text())
    data["curves"].pop(next(iter(data["curves"])))
    data["sha256"] = store._digest(data["key"], data["curves"])
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("damage", [_tamper, _truncate, _other_rows])
def test_corrupt_stored_result_is_rerun_with_a_warning(full, tmp_path, computed, capsys, damage):
    out = tmp_path / "folder"
    shutil.copytree(full, out)
    damage(out / store.STORE / f"{FIRST}.json")
    cli.main(argv(out))
    assert computed == rows(FIRST)  # never used: run again
    assert f"warning: {FIRST}: stored result not used" in capsys.readouterr().err
    assert (out / "regret.csv").read_bytes() == (full / "regret.csv").read_bytes()
    assert (out / store.STORE / f"{FIRST}.json").read_bytes() == (full / store.STORE / f"{FIRST}.json").read_bytes()
