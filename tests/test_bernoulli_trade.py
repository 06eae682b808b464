"""The trade between the skewed sets and the high-mass priors: each policy's two coordinates from its cells."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.evaluations import bernoulli_trade as bt
from benchmarks.evaluations.bernoulli_skewed_sets import REFERENCE as REF


def test_coordinates_are_the_worst_cells_and_a_copy_of_each_reference_is_exactly_one(tmp_path) -> None:
    """The reference given again is 1.000x on every set, the told Gittins given again 1.000x under its own prior;
    each policy's x, y and p99 are the largest of its cells, and the box is read from the three lines."""
    agents = [
        'same={"name": "gittins"}',
        'told={"name": "gittins", "prior_a": 5, "prior_b": 0.5}',
        'uniform={"name": "uniform"}',
    ]
    argv = ["--runs", "30", "--seed", "7", "--set-arms", "2", "5", "--prior-arms", "5", "--priors", "5,0.5", "2,1"]
    result = bt.main([*argv, "--out", str(tmp_path), *(a for agent in agents for a in ("--agent", agent))])
    sets, priors, summary = result["sets"], result["priors"], result["summary"]
    assert set(sets) == {"skewed K=2", "reversed K=2", "skewed K=5", "reversed K=5"}
    assert set(priors) == {"Beta(5, 0.5) K=5", "Beta(2, 1) K=5"}
    for cell in sets.values():
        assert cell["same"]["ratio"] == pytest.approx(1.0)
    assert priors["Beta(5, 0.5) K=5"]["told"]["ratio"] == pytest.approx(1.0)
    assert priors["Beta(5, 0.5) K=5"]["told"]["p99_ratio"] == pytest.approx(1.0)
    for label, s in summary.items():
        assert s["worst_set"] == max(cell[label]["ratio"] for cell in sets.values())
        assert s["worst_prior"] == max(cell[label]["ratio"] for cell in priors.values())
        assert s["worst_p99"] == max(cell[label]["p99_ratio"] for cell in priors.values())
        inside = s["worst_set"] <= bt.SET_LINE and s["worst_prior"] <= bt.MEAN_LINE and s["worst_p99"] <= bt.P99_LINE
        assert s["in_box"] == inside
    assert not summary["uniform"]["in_box"] and summary["uniform"]["worst_set"] > 2.0  # 200 steps of a random arm
    saved = json.loads((tmp_path / "trade.json").read_text())
    assert saved["config"]["priors"] == [[5.0, 0.5], [2.0, 1.0]] and saved["config"]["seed"] == 7
    assert (tmp_path / "trade.png").stat().st_size > 0
    np.testing.assert_allclose(saved["summary"]["same"]["worst_set"], 1.0)


def test_a_prior_that_is_not_a_pair_of_positive_numbers_is_refused() -> None:
    with pytest.raises(SystemExit):
        bt.main(["--out", "unused", "--agent", 'u={"name": "uniform"}', "--priors", "5,-1"])


def test_an_earlier_run_of_the_same_draw_joins_and_another_draw_is_refused(tmp_path) -> None:
    """--with: the earlier rows join unchanged beside the new ones; with no --agent the run only joins; an earlier
    run of another seed is refused, since its rows are not paired with these."""
    argv = ["--runs", "12", "--set-arms", "3", "--prior-arms", "3", "--priors", "2,0.5"]
    first = bt.main([*argv, "--seed", "4", "--out", str(tmp_path / "a"), "--agent", 'ucb={"name": "ucb"}'])
    second = bt.main(
        [
            *argv,
            "--seed",
            "4",
            "--out",
            str(tmp_path / "b"),
            "--agent",
            'ts={"name": "bernoulli_ts"}',
            "--with",
            str(tmp_path / "a"),
        ]
    )
    assert set(second["summary"]) == {"ucb", "ts"}
    assert second["summary"]["ucb"] == first["summary"]["ucb"]
    assert second["config"]["agents"]["ucb"] == {"name": "ucb"}
    joined = bt.main([*argv, "--seed", "4", "--out", str(tmp_path / "c"), "--with", str(tmp_path / "b")])
    assert joined["summary"] == second["summary"]
    with pytest.raises(SystemExit):
        bt.main([*argv, "--seed", "5", "--out", str(tmp_path / "d"), "--with", str(tmp_path / "a")])


def test_x_reads_only_the_sets_of_the_k_given() -> None:
    """x_arms: the worst set over those K only; a K no set has is an error naming the sets."""
    row = {REF: {"ratio": 1.0, "ratio_se": 0.0}}
    sets = {
        "skewed K=2": {**row, "p": {"ratio": 1.3, "ratio_se": 0.1}},
        "skewed K=5": {**row, "p": {"ratio": 1.05, "ratio_se": 0.02}},
    }
    priors = {"Beta(5, 0.5) K=5": {"p": {"ratio": 1.2, "ratio_se": 0.02, "p99_ratio": 1.4}}}
    assert bt.trade_summary(sets, priors)["p"]["worst_set"] == 1.3
    only = bt.trade_summary(sets, priors, (5,))["p"]
    assert only["worst_set"] == 1.05 and only["in_box"] and only["sets_over"] == 0
    with pytest.raises(ValueError, match="no set has K"):
        bt.trade_summary(sets, priors, (10,))


def test_versus_pairs_rows_played_by_two_runs_and_a_reference_of_other_runs_is_refused(tmp_path) -> None:
    """Rows played in two processes and joined with --with carry the same paired differences as rows played in
    one; an earlier run whose reference totals differ from this draw's (its totals from another seed) is refused."""
    argv = ["--runs", "16", "--seed", "8", "--set-arms", "3", "--prior-arms", "3", "--priors", "2,0.5"]
    ucb, ts = 'ucb={"name": "ucb"}', 'ts={"name": "bernoulli_ts"}'
    both = bt.main([*argv, "--out", str(tmp_path / "both"), "--agent", ucb, "--agent", ts, "--versus", "ucb"])
    bt.main([*argv, "--out", str(tmp_path / "a"), "--agent", ucb])
    joined = bt.main(
        [*argv, "--out", str(tmp_path / "b"), "--agent", ts, "--with", str(tmp_path / "a"), "--versus", "ucb"]
    )
    for table in ("sets", "priors"):
        for cell, rows in both[table].items():
            for label in ("ucb", "ts"):
                for key in ("minus_versus", "minus_versus_se", "ratio"):
                    assert joined[table][cell][label][key] == pytest.approx(rows[label][key])
            assert rows["ucb"]["minus_versus"] == 0.0
    other = bt.main([*argv[:2], "--seed", "9", *argv[4:], "--out", str(tmp_path / "c"), "--agent", ucb])
    assert other["sets"]  # a run of seed 9; its totals put under seed 8's record make a mismatched reference
    (tmp_path / "a" / "totals.npz").write_bytes((tmp_path / "c" / "totals.npz").read_bytes())
    with pytest.raises(SystemExit):
        bt.main([*argv, "--out", str(tmp_path / "d"), "--agent", ts, "--with", str(tmp_path / "a")])
