"""Bad input to ``python -m benchmarks``: each probe gets a clear error that names the flag or file, and loses nothing.

Options are refused by argparse (exit status 2, the message on stderr) before anything runs.  For
``--plot-only`` the saved ``regret.csv`` and ``config.json`` are checked before any file of the
folder is deleted or rewritten, so every probe also compares the folder's bytes before and after.
"""

import csv
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.experiments.suite.run import run_memory_bytes
from benchmarks.harness.cli import main, parse_args
from benchmarks.plots import plot_files

EXPERIMENT = "generalist-bernoulli-k10-t100"


def refused(capsys, argv) -> str:
    """The error message of a refused command line (argparse: exit status 2)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("saved")
    main(["--experiments", EXPERIMENT, "--runs", "3", "--out", str(out), "--quiet"])
    return out


@pytest.mark.parametrize(
    "where, expected",
    [
        ("afile", "is a file"),
        ("afile/below", "lies below the file"),
        ("afile/below/deeper", "lies below the file"),
    ],
)
def test_out_that_is_or_lies_below_a_file(capsys, tmp_path, where, expected):
    (tmp_path / "afile").write_text("keep me")
    err = refused(capsys, ["--out", str(tmp_path / where), "--runs", "3"])
    assert "--out must be a folder" in err and expected in err
    assert (tmp_path / "afile").read_text() == "keep me"


@pytest.mark.parametrize("seed", ["-1", "-12345"])
def test_negative_seed(capsys, tmp_path, seed):
    err = refused(capsys, ["--seed", seed, "--out", str(tmp_path / "o")])
    assert f"--seed must be an integer >= 0, got {seed}" in err.replace(" (numpy seeds are non-negative)", "")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--runs", str(10**12)],
        ["--runs", str(10**9), "--experiments", "tabular-mdp"],
        ["--runs", str(10**8), "--experiments", "generalization", "--grid-families", "bernoulli"],
    ],
)
def test_runs_beyond_memory_are_refused_before_running(capsys, tmp_path, argv):
    err = refused(capsys, [*argv, "--out", str(tmp_path / "o")])
    assert f"--runs {int(argv[1]):,} needs about" in err and "GiB (estimate)" in err
    assert "ICRL_GYM_MAX_MEMORY_GIB" in err
    assert not (tmp_path / "o").exists()


def test_memory_estimate_counts_instances_and_curves():
    """The estimate is the batch of instances plus four float64 copies of the per-run, per-step regret."""
    spec = EXPERIMENTS[EXPERIMENT].spec
    assert run_memory_bytes(spec, 1000) == spec.memory_bytes(1000) + 4 * 8 * 1000 * spec.horizon
    parse_args(["--runs", "2000", "--experiments", "all"])  # the README's largest command passes


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _header_only(path: Path) -> None:
    path.write_text(path.read_text().splitlines()[0] + "\n")


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 1])


def _cut_last_digit(path: Path) -> None:
    """The last value loses its last digit and the newline: still nine numbers on every line."""
    path.write_bytes(path.read_bytes().rstrip()[:-1])


def _lines_dropped(path: Path) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-10]))


def _edit_field(index: int, value: str):
    """Set one field of the fifth data line (line 6 of the file; index 9: one field too many)."""

    def damage(path: Path) -> None:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
        rows[5][index:] = [value, *rows[5][index + 1 :]]
        with open(path, "w", newline="") as fh:
            csv.writer(fh).writerows(rows)

    return damage


def _binary(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 4)


def _json(value):
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        path.write_text(json.dumps(value(data)))

    return damage


CSV_DAMAGE = {
    "empty": (_empty, "it is empty"),
    "header only": (_header_only, "holds no results"),
    "truncated": (_truncated, "regret.csv"),
    "last digit cut": (_cut_last_digit, "last line is incomplete"),
    "last lines dropped": (_lines_dropped, "has 90 steps, expected 100"),
    "not a number": (_edit_field(4, "abc"), "line 6 holds a value that is not a number"),
    "nan value": (_edit_field(3, "nan"), "line 6 holds a value that is not finite"),
    "unknown experiment": (_edit_field(0, "no-such-experiment"), "unknown experiment 'no-such-experiment'"),
    "step skipped": (_edit_field(2, "9"), "step t='9'"),
    "extra field": (_edit_field(9, "1"), "line 6 has 10 fields, expected 9"),
    "binary": (_binary, "regret.csv"),
}

CONFIG_DAMAGE = {
    "empty": (_empty, "not a readable JSON file"),
    "truncated": (_truncated, "not a readable JSON file"),
    "a list": (_json(lambda d: [d]), "it holds a list"),
    "no seed": (_json(lambda d: {k: v for k, v in d.items() if k != "seed"}), "field 'seed' must be an integer >= 0"),
    "runs as text": (_json(lambda d: {**d, "runs": "3"}), "field 'runs' must be an integer >= 2, got '3'"),
    "negative seed": (_json(lambda d: {**d, "seed": -1}), "field 'seed' must be an integer >= 0, got -1"),
    "binary": (_binary, "not a readable JSON file"),
}


@pytest.mark.parametrize(
    "name, damage, expected",
    [("regret.csv", *v) for v in CSV_DAMAGE.values()] + [("config.json", *v) for v in CONFIG_DAMAGE.values()],
    ids=[f"csv-{k}" for k in CSV_DAMAGE] + [f"config-{k}" for k in CONFIG_DAMAGE],
)
def test_plot_only_refuses_damaged_results_and_touches_nothing(capsys, saved, tmp_path, name, damage, expected):
    out = tmp_path / "out"
    shutil.copytree(saved, out)
    damage(out / name)
    before = snapshot(out)
    err = refused(capsys, ["--plot-only", "--out", str(out)])
    assert str(out / name) in err and expected in err, err
    assert "Traceback" not in err
    assert snapshot(out) == before  # nothing deleted or rewritten


def test_plot_only_on_intact_results_redraws(saved, tmp_path):
    """The control: the same folder, undamaged, is re-drawn (so the refusals above are about the damage)."""
    out = tmp_path / "out"
    shutil.copytree(saved, out)
    for f in [*plot_files(EXPERIMENTS[EXPERIMENT]), "summary.md", "index.html"]:
        (out / f).unlink()
    main(["--plot-only", "--out", str(out)])
    assert all((out / f).is_file() for f in [*plot_files(EXPERIMENTS[EXPERIMENT]), "summary.md", "index.html"])
    assert (out / "regret.csv").read_bytes() == (saved / "regret.csv").read_bytes()
