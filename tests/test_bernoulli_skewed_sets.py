"""The skewed-sets evaluation: common random numbers, the reference's ratio 1 and a closed form of uniform play."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from benchmarks.evaluations import bernoulli_skewed_sets as ss
from icrl_gym.utils.cli import parse_agent


def test_the_reference_replayed_is_one_and_uniform_play_has_its_closed_form(tmp_path):
    """Uniform play pays T (E[max] - E[mean]) = T (3/4 - 1/2) on both two-armed sets; the Gittins agent given again
    plays the reference's instances and draws (ratio exactly 1); the oracle pays nothing."""
    agents = ["same=" + json.dumps({"name": "gittins"}), 'uniform={"name": "uniform"}', 'oracle={"name": "optimal"}']
    result = ss.main(
        ["--runs", "400", "--seed", "5", "--arms", "2", "--out", str(tmp_path)]
        + [arg for agent in agents for arg in ("--agent", agent)]
    )
    assert set(result["sets"]) == {"skewed K=2", "reversed K=2"}
    for row in result["sets"].values():
        assert row[ss.REFERENCE]["ratio"] == 1.0 and row["same"]["ratio"] == 1.0
        assert row[ss.REFERENCE]["ratio_se"] == 0.0 and row["same"]["ratio_se"] == 0.0
        assert row["uniform"]["ratio_se"] > 0.0
        assert row["uniform"]["mean"] == pytest.approx(200 * 0.25, abs=4 * row["uniform"]["se"] + 1e-9)
        assert row["oracle"]["mean"] == pytest.approx(0.0, abs=1e-9)
    saved = json.loads((tmp_path / "skewed-sets.json").read_text())
    assert saved["config"]["seed"] == 5 and saved["config"]["agents"]["uniform"] == {"name": "uniform"}


@pytest.mark.parametrize(
    ("text", "message"), [("nolabel", "LABEL=JSON"), ("a={bad", "not JSON"), ('a={"arm": 1}', 'needs a "name"')]
)
def test_a_malformed_agent_is_refused_with_its_reason(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_agent(text)


def test_shuffled_every_row_faces_the_same_orders_and_the_two_orders_of_a_set_agree(tmp_path):
    """--shuffled: the reference given again is still exactly 1 (the same orders for every row), the oracle pays
    nothing, and at K = 20, whose skewed and reversed sets hold the same arms in two orders, the reference's two means
    agree within the noise (as is, they are 10.1 and 18.2 on 500 runs)."""
    agents = ["same=" + json.dumps({"name": "gittins"}), 'oracle={"name": "optimal"}']
    result = ss.main(
        ["--runs", "200", "--seed", "5", "--arms", "20", "--shuffled", "--out", str(tmp_path)]
        + [arg for agent in agents for arg in ("--agent", agent)]
    )
    skewed, reversed_ = result["sets"]["skewed K=20"], result["sets"]["reversed K=20"]
    for row in (skewed, reversed_):
        assert row["same"]["ratio"] == 1.0 and row["same"]["ratio_se"] == 0.0
        assert row["oracle"]["mean"] == pytest.approx(0.0, abs=1e-9)
    a, b = skewed[ss.REFERENCE], reversed_[ss.REFERENCE]
    assert abs(a["mean"] - b["mean"]) < 3.5 * (a["se"] ** 2 + b["se"] ** 2) ** 0.5
    assert result["config"]["shuffled"] is True


def test_a_label_may_hold_an_equals_sign() -> None:
    assert parse_agent('LinUCB (alpha=2)={"name": "linucb", "alpha": 2}') == (
        "LinUCB (alpha=2)",
        {"name": "linucb", "alpha": 2},
    )


def test_versus_gives_each_row_its_paired_difference_and_the_totals_file_holds_every_run(tmp_path):
    """--versus REF: a row's difference from the reference, in the reference's mean, is its ratio less 1 with the
    same paired error; the reference given again differs by exactly 0.  OUT/totals.npz loads back every row's runs,
    whose means are the record's."""
    agents = ["same=" + json.dumps({"name": "gittins"}), 'uniform={"name": "uniform"}']
    result = ss.main(
        ["--runs", "50", "--seed", "6", "--arms", "2", "--versus", ss.REFERENCE, "--out", str(tmp_path)]
        + [arg for agent in agents for arg in ("--agent", agent)]
    )
    totals = ss.load_totals(tmp_path / ss.TOTALS_FILE)
    assert set(totals) == set(result["sets"])
    for cell, rows in result["sets"].items():
        assert rows["same"]["minus_versus"] == 0.0 and rows["same"]["minus_versus_se"] == 0.0
        uniform = rows["uniform"]
        assert uniform["minus_versus"] == pytest.approx(uniform["ratio"] - 1.0)
        assert uniform["minus_versus_se"] == pytest.approx(uniform["ratio_se"])
        for label, row in rows.items():
            assert totals[cell][label].shape == (50,)
            assert totals[cell][label].mean() == pytest.approx(row["mean"])
    assert result["config"]["versus"] == ss.REFERENCE


def test_a_versus_row_that_is_not_played_and_a_broken_totals_file_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        ss.main(
            [
                "--runs",
                "5",
                "--arms",
                "2",
                "--versus",
                "nobody",
                "--out",
                str(tmp_path),
                "--agent",
                'u={"name": "uniform"}',
            ]
        )
    broken = tmp_path / "totals.npz"
    ss.save_totals(broken, {"skewed K=2": {"a": np.arange(4.0)}})
    broken.write_bytes(broken.read_bytes()[:40])
    with pytest.raises(ValueError, match="not a readable totals file"):
        ss.load_totals(broken)
