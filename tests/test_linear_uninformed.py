"""The uninformed-reference evaluation of the linear generalist: its summary against the stored totals."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from benchmarks.evaluations import linear_uninformed


def test_small_run_writes_consistent_tables(tmp_path) -> None:
    """Two tiny cells: the CSV's means, best reference and ratios are those of the stored per-run totals."""
    out = tmp_path / "lu"
    linear_uninformed.main(["--out", str(out), "--runs", "6", "--long-runs", "3", "--cells", "K=2, T=200"])
    rows = list(csv.DictReader((out / "cells.csv").open()))
    assert [r["cell"] for r in rows] == ["Gaussian MAB U[0, 1], K=2, T=200", "Gaussian MAB N(0, 1), K=2, T=200"]
    for row in rows:
        name = row["cell"].replace(" ", "_")
        stored = json.loads((out / "cells" / f"{name}.json").read_text())["totals"]
        totals = {k: np.asarray(v) for k, v in stored.items()}
        best = min(linear_uninformed.UNINFORMED, key=lambda k: totals[k].mean())
        assert row["best uninformed"] == best
        for key in linear_uninformed.MODELS:  # the default model rows
            ratio = totals[key].mean() / totals[best].mean()
            assert float(row[f"{key} ratio"]) == pytest.approx(ratio, abs=1e-3)
            se = (totals[key] - ratio * totals[best]).std(ddof=1) / (np.sqrt(len(totals[key])) * totals[best].mean())
            assert float(row[f"{key} ratio s.e."]) == pytest.approx(se, abs=1e-3)  # the paired delta method
            low, p99, high = (float(row[f"{key} p99 ratio{tag}"]) for tag in (" low", "", " high"))
            assert low <= p99 <= high
        limit = max(3 * totals[best].mean(), 20)
        for key, values in totals.items():  # every row's failures, the references' too, counted run by run
            assert float(row[f"{key} failures"]) == pytest.approx(
                sum(v > limit for v in values) / len(values), abs=1e-4
            )
    assert "Configuration:" in (out / "table.md").read_text()
    assert "The references' own failures" in (out / "table.md").read_text()


def test_a_further_model_is_played_alone_on_the_stored_cells(tmp_path, monkeypatch) -> None:
    """--model (and --net) on a finished folder plays only those rows: the stored rows stay, the table has them."""
    from icrl_gym.checkpoint import resolve_checkpoint

    out = tmp_path / "lu"
    args = ["--out", str(out), "--runs", "5", "--long-runs", "3", "--cells", "U[0, 1], K=2, T=200"]
    linear_uninformed.main(args)
    path = out / "cells" / "Gaussian_MAB_U[0,_1],_K=2,_T=200.json"
    before = json.loads(path.read_text())["totals"]
    calls = []
    real = linear_uninformed.evaluate_regret
    monkeypatch.setattr(linear_uninformed, "evaluate_regret", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    extra = str(resolve_checkpoint("linear-generalist"))
    linear_uninformed.main([*args, "--model", extra, "--net"])
    after = json.loads(path.read_text())["totals"]
    assert len(calls) == 2  # the new rows only
    assert {k: after[k] for k in before} == before
    np.testing.assert_allclose(after[extra], after["linear-generalist"])  # the same checkpoint, the same runs
    np.testing.assert_allclose(after[f"{extra} + safety net"], after["linear-generalist + safety net"])
    assert f"{extra} + safety net" in (out / "table.md").read_text()


def test_only_models_plays_the_named_models_and_the_references(tmp_path) -> None:
    """--only-models: the references and the --model rows, without the default linear-generalist rows."""
    out = tmp_path / "lu"
    args = ["--out", str(out), "--runs", "4", "--long-runs", "3", "--cells", "U[0, 1], K=2, T=200"]
    linear_uninformed.main([*args, "--model", "linear-generalist-v3", "--only-models"])
    totals = json.loads((out / "cells" / "Gaussian_MAB_U[0,_1],_K=2,_T=200.json").read_text())["totals"]
    assert "linear-generalist-v3" in totals
    assert not set(linear_uninformed.MODELS) & set(totals)
    assert set(linear_uninformed.UNINFORMED) | set(linear_uninformed.TOLD) <= set(totals)


def test_an_agent_row_is_played_on_the_same_runs_and_reported_against_the_best_reference(tmp_path) -> None:
    """--agent LABEL=JSON: a rule by its specification plays the cell's runs; given a reference's specification
    it replays that reference's totals run for run, and its ratio is the one the stored totals give."""
    out = tmp_path / "lu"
    args = ["--out", str(out), "--runs", "5", "--long-runs", "3", "--cells", "U[0, 1], K=2, T=200", "--only-models"]
    linear_uninformed.main([*args, "--agent", 'again={"name": "linucb", "alpha": 1.0}'])
    totals = json.loads((out / "cells" / "Gaussian_MAB_U[0,_1],_K=2,_T=200.json").read_text())["totals"]
    np.testing.assert_array_equal(totals["again"], totals["LinUCB (alpha=1)"])
    row = next(csv.DictReader((out / "cells.csv").open()))
    best = np.asarray(totals[row["best uninformed"]])
    assert float(row["again ratio"]) == pytest.approx(np.mean(totals["again"]) / best.mean(), abs=1e-3)
    assert "again | ratio" in (out / "table.md").read_text()
    with pytest.raises(SystemExit):  # a label taken by a reference is refused before any play
        linear_uninformed.main([*args, "--agent", 'LinUCB (alpha=1)={"name": "linucb"}'])
