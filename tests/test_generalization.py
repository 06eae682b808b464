"""The ``generalization`` grid experiment at tiny sizes: outputs, common random numbers, the missing-model path."""

import csv
import dataclasses
import json

import numpy as np
import pytest

import icrl_gym.estimators.gittins
from benchmarks.executor.local import InlineExecutor
from benchmarks.experiments.generalization.cells import GENERALIZATION
from benchmarks.experiments.generalization.run import plan_cell, run_generalization
from benchmarks.experiments.grid.cells import MODEL, failure_fraction, regret_quantile, tail_stats
from benchmarks.experiments.grid.tasks import play_plans
from benchmarks.harness.cli import main, parse_args
from icrl_gym.envs import BanditArms, BanditPrior
from icrl_gym.utils.provenance import software_environment
from tests.helpers import save_tiny_generalist, slow_failure_fraction, slow_quantile, tiny_generalization

TINY = tiny_generalization(
    bernoulli_references={**GENERALIZATION.bernoulli_references, "TS (second copy)": {"name": "bernoulli_ts"}}
)
"""The tiny grid (K=2 in range, K=3 out of range, T=6) with a second copy of TS among the Bernoulli references."""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_tiny_generalist(tmp_path_factory.mktemp("ckpt") / "tiny-generalist")


@pytest.fixture(scope="module")
def run(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("gen")
    results = run_generalization(TINY, out, runs=6, seed=1, checkpoint=checkpoint, linear_checkpoint=str(out / "none"))
    return out / TINY.name, results


def _rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_outputs_record_config_seeds_and_stats(run, checkpoint):
    folder, results = run
    names = {p.name for p in folder.iterdir()}
    assert {"cells.csv", "checks.csv", "summary.md", "config.json", "heatmap-bernoulli.png"} <= names
    assert "heatmap-linear.png" not in names  # no linear model: no ratio to draw
    config = json.loads((folder / "config.json").read_text())
    assert config["seed"] == 30_000_001 and config["runs"] == 6
    assert config["software"] == software_environment()
    assert config["models"]["bernoulli"]["checkpoint"] == checkpoint
    assert len(config["cells"]) == len(results) == 2 + 1 + 2  # K=2,3 at T=6; Beta(2,2) at K=2; linear 1 + 1
    rows = _rows(folder / "cells.csv")
    gen = [r for r in rows if r["algorithm"] == MODEL]
    assert len(gen) == 3  # every Bernoulli cell, no linear one
    for r in rows:
        assert r["seed"] == "30000001"
        assert r["status"] == "ok" or r["status"].startswith("n/a")
    for res in results:
        stats = res.stats()
        best = res.best_reference()
        assert stats[best]["diff_to_best"] == 0.0 and stats[best]["ratio_to_best"] == 1.0
        for name, st in stats.items():  # independent computation of the ratio and the paired s.e.
            r, ref = res.totals[name], res.totals[best]
            assert st["ratio_to_best"] == pytest.approx(r.mean() / ref.mean())
            assert st["diff_se"] == pytest.approx(np.std(r - ref, ddof=1) / np.sqrt(r.size))
    ood = [r for r in rows if r["row"] == "K=3"]
    assert ood and all(r["in_range"] == "False" for r in ood)
    assert {r["algorithm"] for r in ood} >= {"Bayes-optimal DP", MODEL}  # the DP runs at K=3, T=6


def test_same_instances_for_every_row(run):
    _, results = run
    for res in results:
        if res.cell.family == "bernoulli":  # two copies of one randomised agent: identical regrets
            np.testing.assert_array_equal(res.totals["TS"], res.totals["TS (second copy)"])
        # pseudo-regret against the instance's best arm: no row can be below the oracle
        assert all(r is None or (r >= -1e-9).all() for r in res.totals.values())


def test_thresholds_checked_only_in_range_with_training_prior(run):
    folder, _ = run
    checks = _rows(folder / "checks.csv")
    cells = {c["cell"] for c in checks}
    assert cells == {"means ~ U[0, 1]; K=2; T=6"}
    kinds = {c["check"] for c in checks}
    assert {"<= 1.05 x Gittins", "< TS", "< UCB", "within 10% of the Bayes-optimal DP"} <= kinds
    for c in checks:
        bound, value = float(c["threshold"]), float(c["value"])
        assert c["pass"] == str(value < bound if c["check"].startswith("< ") else value <= bound)


def test_summary_and_missing_linear_model(run):
    folder, _ = run
    text = (folder / "summary.md").read_text()
    assert "linear: the generalist model is missing" in text
    assert "K=3; T=6 *" in text  # out-of-range marker
    assert "Acceptance thresholds" in text


def test_missing_bernoulli_model_reports_references_only(tmp_path, monkeypatch):
    # a table built earlier in this process for a larger horizon would serve without writing the cache
    monkeypatch.setattr(icrl_gym.estimators.gittins, "_TABLES", {})
    exp = dataclasses.replace(TINY, prior_shifts=(), ood_arms=())
    results = run_generalization(exp, tmp_path, runs=3, checkpoint=str(tmp_path / "absent"), families=("bernoulli",))
    folder = tmp_path / exp.name
    assert all(MODEL not in r.totals for r in results)
    assert MODEL not in {r["algorithm"] for r in _rows(folder / "cells.csv")}
    assert _rows(folder / "checks.csv") == []
    assert not list(folder.glob("heatmap-*.png"))
    assert "bernoulli: the generalist model is missing" in (folder / "summary.md").read_text()
    assert list((folder / "gittins-cache").iterdir())  # the Gittins table is cached in the run's folder


def test_harness_lists_and_parses_the_grid_experiment(capsys):
    main(["--list"])
    listed = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["generalization", "[opt-in]"] for line in listed)
    cfg = parse_args(["--experiments", "generalization", "--grid-arms", "2,5", "--grid-families", "bernoulli"])
    assert cfg.selected() == [] and [g.name for g in cfg.selected_grids()] == ["generalization"]
    assert cfg.grid_arms == (2, 5) and cfg.grid_families == ("bernoulli",)
    assert "generalization" not in [e.name for e in parse_args([]).selected()]
    with pytest.raises(SystemExit):
        parse_args(["--experiments", "generalization", "--grid-families", "tabular"])


def test_harness_lists_and_parses_the_mdp_grid_experiment(capsys):
    main(["--list"])
    listed = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["mdp-generalization", "[opt-in]"] for line in listed)
    cfg = parse_args(["--experiments", "mdp-generalization", "--mdp-cells", "fixed,dark"])
    assert cfg.selected() == [] and cfg.selected_grids() == []
    assert [g.name for g in cfg.selected_mdp_grids()] == ["mdp-generalization"] and cfg.mdp_cells == ("fixed", "dark")
    assert "mdp-generalization" not in [e.name for e in parse_args([]).selected()]
    with pytest.raises(SystemExit):
        parse_args(["--experiments", "mdp-generalization", "--mdp-cells", "fixed,huge"])


def test_stopped_grid_resumes_from_finished_cells(checkpoint, tmp_path, monkeypatch):
    """A grid stopped after its second cell reruns only the cells after it; the tables equal an uninterrupted run."""
    from benchmarks.experiments.generalization import run as gen
    from benchmarks.experiments.grid import run as grid_run

    full = run_generalization(TINY, tmp_path / "full", runs=6, seed=1, checkpoint=checkpoint)
    real = grid_run.evaluate_regret
    calls = {"n": 0}

    def stop_after_two_cells(*args, **kwargs):
        calls["n"] += 1
        rows_per_cell = len(gen._reference_specs(TINY, full[0].cell, tmp_path)) + 1
        if calls["n"] > 2 * rows_per_cell:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_run, "evaluate_regret", stop_after_two_cells)
    with pytest.raises(KeyboardInterrupt):
        run_generalization(TINY, tmp_path / "stopped", runs=6, seed=1, checkpoint=checkpoint)
    stored = list((tmp_path / "stopped" / TINY.name / "cells").glob("*/*.json"))
    assert len(stored) == sum(len(r.totals) for r in full[:2])  # one file per finished row

    counted = {"n": 0}

    def count(*args, **kwargs):
        counted["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_run, "evaluate_regret", count)
    (tmp_path / "stopped").rename(tmp_path / "moved")  # a moved results folder resumes too
    resumed = run_generalization(TINY, tmp_path / "moved", runs=6, seed=1, checkpoint=checkpoint)
    rows_done = sum(len(r.totals) for r in full[:2])
    assert counted["n"] == sum(len(r.totals) for r in full) - rows_done
    for a, b in zip(full, resumed, strict=True):
        assert a.cell == b.cell and a.totals.keys() == b.totals.keys()
        for label in a.totals:
            x, y = a.totals[label], b.totals[label]
            assert (x is None and y is None) or np.array_equal(x, y)
    assert (tmp_path / "full" / TINY.name / "cells.csv").read_text() == (
        tmp_path / "moved" / TINY.name / "cells.csv"
    ).read_text()


def _run_cell(cell, model, folder, model_id):
    """Every row of one bandit cell of TINY (6 runs, seed 1) played in this process, stored in ``folder / "cells"``."""
    store = folder / "cells"
    plan = plan_cell(TINY, cell, model, 6, 1, folder, store, model_id)
    return play_plans([plan], InlineExecutor(), store, TINY.slice_runs)[0]


def test_new_model_reruns_only_its_own_rows(checkpoint, tmp_path, monkeypatch):
    """Rows are stored one by one: other weights (another model_id) re-run the model row, not the references."""
    from benchmarks.experiments.generalization import cells as gen_cells
    from benchmarks.experiments.grid import run as grid_run

    cell = gen_cells.bernoulli_cells(TINY)[0]
    model = {**TINY.bernoulli_model, "checkpoint": checkpoint}
    first = _run_cell(cell, model, tmp_path, model_id="weights-a")
    real, calls = grid_run.evaluate_regret, []

    def count(spec, agent, *args, **kwargs):
        calls.append(agent.name)
        return real(spec, agent, *args, **kwargs)

    monkeypatch.setattr(grid_run, "evaluate_regret", count)
    again = _run_cell(cell, model, tmp_path, model_id="weights-a")
    assert calls == []  # everything reused
    moved = _run_cell(cell, {**model, "checkpoint": "elsewhere"}, tmp_path, model_id="weights-a")
    assert calls == []  # the same weights under another path or name: reused too
    other = _run_cell(cell, model, tmp_path, model_id="weights-b")
    assert calls == ["generalist"]  # only the model row ran again
    for result in (again, moved, other):
        for label, totals in first.totals.items():
            assert (totals is None and result.totals[label] is None) or np.array_equal(totals, result.totals[label])


def test_stored_cell_with_other_runs_is_not_reused(checkpoint, tmp_path):
    """Changing the number of runs (part of a cell's key) runs the cell again instead of reusing it."""
    first = run_generalization(TINY, tmp_path, runs=6, seed=1, checkpoint=checkpoint, families=("bernoulli",))
    second = run_generalization(TINY, tmp_path, runs=7, seed=1, checkpoint=checkpoint, families=("bernoulli",))
    assert all(t.shape == (6,) for r in first for t in r.totals.values() if t is not None)
    assert all(t.shape == (7,) for r in second for t in r.totals.values() if t is not None)


def test_missing_model_file_is_an_error_not_a_size_limit(checkpoint, tmp_path):
    """A model whose files vanish mid-grid raises CheckpointError; it is not stored as an n/a row."""
    import shutil

    from benchmarks.experiments.generalization import cells as gen_cells
    from benchmarks.experiments.grid import run as grid_run
    from icrl_gym.checkpoint import CheckpointError, checkpoint_files

    copy = tmp_path / "copy"
    for f in checkpoint_files(checkpoint):
        shutil.copy(f, copy.with_suffix(f.suffix))
    cell = gen_cells.bernoulli_cells(TINY)[0]
    model = {**TINY.bernoulli_model, "checkpoint": str(copy)}
    copy.with_suffix(".safetensors").unlink()
    store = tmp_path / "cells"
    with pytest.raises(CheckpointError, match="does not exist"):
        _run_cell(cell, model, tmp_path, model_id="weights-a")
    assert not list(store.glob(f"*/{grid_run.slug(MODEL)}.json"))


def test_tail_statistics_equal_a_plain_loop():
    """p99 and the failure fraction against a sorted-list quantile and a run-by-run count, on made-up regrets."""
    rng = np.random.default_rng(0)
    for n in (2, 3, 7, 101, 2000):
        ref = rng.exponential(10.0, n)
        row = ref * rng.choice([0.5, 1.0, 4.0], n) + rng.normal(0, 5, n)  # some runs far above 3x the reference
        for level in (0.0, 0.5, 0.9, 0.99, 1.0):
            assert regret_quantile(row, level) == pytest.approx(slow_quantile(row, level), rel=1e-12, abs=1e-12)
        assert failure_fraction(row, ref) == slow_failure_fraction(row, ref)
        assert failure_fraction(row, ref, 2.0, 5.0) == slow_failure_fraction(row, ref, 2.0, 5.0)
        st = tail_stats(row, ref)
        assert st["p99_ratio_to_best"] == pytest.approx(slow_quantile(row, 0.99) / slow_quantile(ref, 0.99))
    # both conditions are strict: exactly 3x the reference or exactly 20 is no failure
    ref = np.array([10.0, 10.0, 5.0, 5.0, 0.0])
    row = np.array([30.0, 30.5, 20.0, 20.5, 21.0])
    assert failure_fraction(row, ref) == slow_failure_fraction(row, ref) == 3 / 5
    assert failure_fraction(ref, ref) == 0.0 and tail_stats(row, None) == {"p99": slow_quantile(row, 0.99)}
    with pytest.raises(ValueError, match="paired runs need equal shapes"):
        failure_fraction(row, ref[:3])


def _check_tails_columns(rows, results):
    """Every ok row of cells.csv: its p99, p99 ratio and failure fraction recomputed from the per-run totals."""
    by_label = {r.cell.label: r for r in results}
    for line in rows:
        if line["status"] != "ok":
            continue
        res = by_label[f"{line['panel']}; {line['row']}; {line['column']}"]
        totals, best = res.totals[line["algorithm"]], res.totals[line["best_reference"]]
        assert float(line["p99"]) == pytest.approx(slow_quantile(totals, 0.99), rel=1e-5)
        assert float(line["p99_ratio_to_best"]) == pytest.approx(
            slow_quantile(totals, 0.99) / slow_quantile(best, 0.99), rel=1e-5
        )
        assert float(line["failure_fraction"]) == pytest.approx(slow_failure_fraction(totals, best), rel=1e-5)


def test_every_row_reports_its_tails(run):
    folder, results = run
    _check_tails_columns(_rows(folder / "cells.csv"), results)
    assert "Tails: the 99% quantile (p99) of per-run regret" in (folder / "summary.md").read_text()


def test_opt_in_families_play_their_cells_references_checks_and_tails(tmp_path):
    """The Gaussian multi-armed bandit and the held-out priors, with the shipped linear generalist, at tiny sizes."""
    exp = dataclasses.replace(
        TINY,
        mab_arms=(3,),
        mab_horizons=(60,),
        mab_priors={"means ~ N(0, 1)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0}},
        held_out_size=(3, 4, 10, 1.5),
    )
    absent = str(tmp_path / "absent")
    families = ("gaussian-mab", "held-out")
    results = run_generalization(exp, tmp_path, runs=40, seed=1, checkpoint=absent, families=families)
    folder = tmp_path / exp.name
    mab, *held = results
    assert [r.cell.family for r in results] == ["gaussian-mab", "held-out", "held-out", "held-out"]
    assert mab.cell.spec.arms is BanditArms.ONE_HOT and mab.cell.spec.action_set_shape == (3, 3)
    assert [r.cell.spec.prior for r in held] == [BanditPrior.GAUSSIAN, BanditPrior.SPHERE, BanditPrior.ONE_COORDINATE]
    assert set(mab.totals) == {*exp.mab_references, MODEL} and set(held[0].totals) == {*exp.held_out_references, MODEL}
    assert mab.best_reference() in exp.mab_compared and all(r.best_reference() in exp.held_out_compared for r in held)
    rows = _rows(folder / "cells.csv")
    _check_tails_columns(rows, results)
    assert any(float(r["failure_fraction"]) > 0 for r in rows if r["status"] == "ok")  # the count is exercised
    checks = {(c["cell"], c["check"]): c for c in _rows(folder / "checks.csv")}
    for res, bound in (
        (mab, "<= 1.10 x best of Bayes-UCB/TS"),
        *((r, "<= 1.15 x best of Bayes-UCB/LinUCB") for r in held),
    ):
        best = res.totals[res.best_reference()]
        factor = float(bound.split()[1])
        assert float(checks[(res.cell.label, bound)]["threshold"]) == pytest.approx(factor * best.mean(), rel=1e-9)
        tail = checks[(res.cell.label, "p99 <= 1.5 x best reference's p99")]
        assert float(tail["threshold"]) == pytest.approx(1.5 * slow_quantile(best, 0.99), rel=1e-9)
        assert float(tail["value"]) == pytest.approx(slow_quantile(res.totals[MODEL], 0.99), rel=1e-9)
    text = (folder / "summary.md").read_text()
    assert "## Gaussian multi-armed bandits" in text and "## Held-out priors of w*" in text
    assert {p.name for p in folder.glob("heatmap-*.png")} == {"heatmap-gaussian-mab.png", "heatmap-held-out.png"}
    config = json.loads((folder / "config.json").read_text())
    assert config["families"] == list(families) and config["models"]["held-out"]["checkpoint"] == "linear-generalist-v1"


def test_harness_takes_the_opt_in_families():
    cfg = parse_args(["--experiments", "generalization", "--grid-families", "gaussian-mab,held-out"])
    assert cfg.grid_families == ("gaussian-mab", "held-out")
    assert parse_args(["--experiments", "generalization"]).grid_families == ("bernoulli", "linear")


def test_bernoulli_beta_family_plays_its_rows_and_reports_the_check(checkpoint, tmp_path):
    exp = dataclasses.replace(TINY, beta_params=(0.5, 5.0), beta_arms=(2,), beta_horizon=6)
    results = run_generalization(exp, tmp_path, runs=30, seed=1, checkpoint=checkpoint, families=("bernoulli-beta",))
    folder = tmp_path / exp.name
    assert len(results) == 6 and all(r.totals[MODEL] is not None for r in results)
    checks_rows = {c["cell"]: c for c in _rows(folder / "checks.csv")}
    for res in results:
        gittins = res.totals["Gittins (matched prior)"]
        assert res.best_reference() == "Gittins (matched prior)"
        assert ("Bayes-optimal DP (matched prior)" in res.totals) == (res.cell.spec.prior is BanditPrior.BETA)
        row = checks_rows[res.cell.label]
        assert row["check"] == "<= 1.05 x matched-prior Gittins"
        assert float(row["threshold"]) == pytest.approx(1.05 * sum(gittins) / len(gittins), rel=1e-9)
    _check_tails_columns(_rows(folder / "cells.csv"), results)
    text = (folder / "summary.md").read_text()
    assert "## Bernoulli bandits with Beta and skewed priors" in text and "Beta(1, 1) = U[0, 1] on the skewed" in text
    assert (folder / "heatmap-bernoulli-beta.png").is_file()
