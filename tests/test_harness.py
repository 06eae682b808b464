import csv
import json

import numpy as np
import pytest

from benchmarks.experiments.suite.cells import Experiment
from benchmarks.experiments.suite.checks import read_csv
from benchmarks.experiments.suite.run import run_experiment
from benchmarks.harness.cli import main
from icrl_gym.envs import bernoulli_bandit_spec


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    argv = ["--experiments", "bernoulli-ad-ucb", "--runs", "12", "--seed", "3", "--out", str(out), "--threads", "1"]
    results = main(argv)
    return out, results


def test_outputs_and_csv_schema(small_run):
    out, results = small_run
    assert {p.name for p in out.iterdir()} >= {"regret.csv", "summary.md", "config.json", "bernoulli-ad-ucb.png"}
    assert (out / "experiments" / "bernoulli-ad-ucb.json").is_file()  # the stored result a rerun resumes from
    with open(out / "regret.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == [
        "experiment", "algorithm", "t",
        "cumulative_regret_mean", "cumulative_regret_std", "cumulative_regret_se",
        "suboptimality_mean", "suboptimality_std", "suboptimality_se",
    ]  # fmt: skip
    algorithms = {r["algorithm"] for r in rows}
    assert "UCB" in algorithms and "TF (AD UCB)" in algorithms
    assert len(rows) == len(algorithms) * 200
    ucb = [r for r in rows if r["algorithm"] == "UCB"]
    # the cumulative curve is the running sum of the per-step suboptimality
    np.testing.assert_allclose(
        np.cumsum([float(r["suboptimality_mean"]) for r in ucb]),
        [float(r["cumulative_regret_mean"]) for r in ucb],
        rtol=1e-4,
    )
    assert (out / "bernoulli-ad-ucb.png").stat().st_size > 10_000
    assert "| UCB |" in (out / "summary.md").read_text()


def test_same_seed_reproduces_exactly(small_run, tmp_path):
    out, _ = small_run
    main(["--experiments", "bernoulli-ad-ucb", "--runs", "12", "--seed", "3", "--out", str(tmp_path), "--threads", "1"])
    assert (tmp_path / "regret.csv").read_text() == (out / "regret.csv").read_text()


def test_plot_only_redraws(small_run):
    out, results = small_run
    (out / "bernoulli-ad-ucb.png").unlink()
    main(["--plot-only", "--out", str(out)])
    assert (out / "bernoulli-ad-ucb.png").exists()
    again = read_csv(out / "regret.csv")
    np.testing.assert_allclose(
        again["bernoulli-ad-ucb"]["UCB"]["cumulative_regret_mean"],
        results["bernoulli-ad-ucb"]["UCB"]["cumulative_regret_mean"],
        rtol=1e-5,
    )


def test_common_random_numbers():
    exp = Experiment(
        name="crn",
        title="crn",
        spec=bernoulli_bandit_spec(horizon=50),
        algorithms={"TS a": {"name": "bernoulli_ts"}, "TS b": {"name": "bernoulli_ts"}, "UCB": {"name": "ucb"}},
    )
    curves = run_experiment(exp, 40, seed=1, device="cpu")
    np.testing.assert_array_equal(curves["TS a"]["cumulative_regret_mean"], curves["TS b"]["cumulative_regret_mean"])
    assert not np.array_equal(curves["TS a"]["cumulative_regret_mean"], curves["UCB"]["cumulative_regret_mean"])


# bad options (exit status 2 with a message naming the flag) are tested in tests/test_cli.py


def test_retrain_runs_the_whole_pipeline(tmp_path):
    """collect -> pretrain -> export -> evaluate, with the shipped config cut to a few steps."""
    argv = ["--experiments", "bernoulli-ad-ucb", "--runs", "4", "--out", str(tmp_path), "--threads", "1"]
    main([*argv, "--retrain", "--retrain-steps", "2"])
    assert (tmp_path / "models" / "bernoulli-ad-ucb.safetensors").exists()
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["checkpoints"]["bernoulli-ad-ucb"].endswith("models/bernoulli-ad-ucb")
