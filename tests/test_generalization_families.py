"""The generalization grid's prior families: the in-family grid and the Bernoulli Beta cells, their references."""

import dataclasses

import numpy as np
import pytest

from agents import make_agent
from benchmarks.experiments.generalization.cells import GENERALIZATION, grid_cells
from benchmarks.experiments.generalization.checks import checks
from benchmarks.experiments.generalization.run import _reference_specs, run_generalization
from benchmarks.experiments.grid.cells import MODEL, CellResult
from benchmarks.experiments.grid.run import total_regret
from benchmarks.harness.cli import parse_args
from icrl_gym.envs import ActionSet, BanditArms, BanditPrior, BanditReward, BernoulliBanditVectorEnv
from tests.helpers import slow_quantile
from tests.test_generalization import TINY, _check_tails_columns, _rows


def test_in_family_cells_are_the_acceptance_list():
    """d x A x T at sigma=0.5, and sigma in {0.1, 2} x T at d=5, A=10, all with w* from the prior family."""
    cells = grid_cells(GENERALIZATION, ("in-family",))
    expected = [(d, a, t, 0.5) for d in (2, 5, 8, 16) for a in (2, 10, 50) for t in (50, 200, 1000)]
    expected += [(5, 10, t, s) for s in (0.1, 2.0) for t in (50, 200, 1000)]
    sizes = [(c.spec.dim, c.spec.num_actions, c.spec.horizon, c.spec.noise_std) for c in cells]
    assert len(sizes) == len(set(sizes)) == 42 and set(sizes) == set(expected)
    assert len({c.label for c in cells}) == 42
    for c in cells:
        s = c.spec
        assert (c.family, s.prior, s.arms, s.action_set, s.reward) == (
            "in-family",
            BanditPrior.FAMILY,
            BanditArms.UNIFORM,
            ActionSet.FIXED,
            BanditReward.GAUSSIAN,
        )
        assert s.noise_high is None and s.noise_known  # sigma fixed per cell and told
        assert c.in_range and c.base_prior  # the second version's target range: every cell, so every check
    assert GENERALIZATION.family_compared == ("Bayes-UCB (matched)", "TS (matched)")
    narrow = dataclasses.replace(GENERALIZATION, family_range={"dim": (2, 8)})
    assert {c.spec.dim for c in grid_cells(narrow, ("in-family",)) if not c.in_range} == {16}


def test_in_family_best_reference_is_told_the_prior_and_ratio_from_totals(tmp_path):
    """A tiny in-family grid with the shipped linear generalist; an oracle row that is no compared reference."""
    exp = dataclasses.replace(
        TINY,
        family_dims=(2, 9),
        family_actions=(3,),
        family_horizons=(10,),
        family_noise_variants=(2.0,),
        family_variant_size=(2, 3),
        family_references={**GENERALIZATION.family_references, "oracle": {"name": "optimal"}},
    )
    absent = str(tmp_path / "absent")
    results = run_generalization(exp, tmp_path, runs=40, seed=1, checkpoint=absent, families=("in-family",))
    folder = tmp_path / exp.name
    assert [r.cell.spec.prior for r in results] == [BanditPrior.FAMILY] * 3
    assert results[0].totals[MODEL] is not None  # d=2: every version plays it
    lines = {(r["panel"], r["row"], r["column"], r["algorithm"]): r for r in _rows(folder / "cells.csv")}
    checks = {(c["cell"], c["check"]): c for c in _rows(folder / "checks.csv")}
    for res in results:
        means = {k: float(v.mean()) for k, v in res.totals.items() if v is not None}
        best = min(exp.family_compared, key=means.__getitem__)
        assert res.best_reference() == best and means["oracle"] < means[best]  # the oracle is never the best
        gen = res.totals[MODEL]
        if gen is None:  # the first version refuses d > 8: kept as n/a with its reason, and no check
            assert res.cell.spec.dim > 8 and "plays d <=" in res.notes[MODEL]
            assert not any(c == res.cell.label for c, _ in checks)
            continue
        line = lines[(res.cell.panel, res.cell.row, res.cell.column, MODEL)]
        assert line["best_reference"] == best
        assert float(line["ratio_to_best"]) == pytest.approx(gen.mean() / res.totals[best].mean(), rel=1e-5)
        bound = checks[(res.cell.label, "<= 1.10 x best of Bayes-UCB/TS")]
        assert float(bound["threshold"]) == pytest.approx(1.10 * res.totals[best].mean(), rel=1e-9)
        tail = checks[(res.cell.label, "p99 <= 1.5 x best reference's p99")]
        assert float(tail["threshold"]) == pytest.approx(1.5 * slow_quantile(res.totals[best], 0.99), rel=1e-9)
    _check_tails_columns(list(lines.values()), results)
    assert "## Linear bandits with w* from the prior family" in (folder / "summary.md").read_text()
    assert (folder / "heatmap-in-family.png").is_file()


def test_harness_takes_the_in_family_grid():
    assert parse_args(["--experiments", "generalization", "--grid-families", "in-family"]).grid_families == (
        "in-family",
    )


def test_bernoulli_beta_cells_are_the_acceptance_list_and_tell_the_references_their_prior(tmp_path):
    """16 Beta(a, b) priors x K, then two skewed priors x K, T=200; every Beta-Bernoulli reference told the prior."""
    cells = grid_cells(GENERALIZATION, ("bernoulli-beta",))
    params, ks = (0.5, 1.0, 2.0, 5.0), (2, 5, 10, 20)
    beta = [c for c in cells if c.spec.prior is BanditPrior.BETA]
    skewed = [c for c in cells if c.spec.prior.skewed]
    assert len(cells) == len({c.label for c in cells}) == 72 and len(beta) == 64 and len(skewed) == 8
    assert {(c.spec.prior_a, c.spec.prior_b, c.spec.num_actions) for c in beta} == {
        (a, b, k) for a in params for b in params for k in ks
    }
    assert sorted((c.spec.prior.value, c.spec.num_actions) for c in skewed) == sorted(
        (p, k) for p in ("skewed", "skewed_reversed") for k in ks
    )
    for c in cells:
        s = c.spec
        assert (c.family, s.horizon, s.reward, s.arms, c.in_range) == (
            "bernoulli-beta",
            200,
            BanditReward.BERNOULLI,
            BanditArms.ONE_HOT,
            True,
        )
        refs = _reference_specs(GENERALIZATION, c, tmp_path)
        told = (s.prior_a, s.prior_b) if s.prior is BanditPrior.BETA else (1.0, 1.0)  # skewed: U[0, 1]
        family = refs.pop("Bayes-optimal DP (family prior, not told)", None)
        by_name = {agent["name"]: agent for agent in refs.values()}
        for name in ("gittins", "bernoulli_ts", "bayes_ucb", "bernoulli_bayes_optimal"):
            if name in by_name:
                assert (by_name[name]["prior_a"], by_name[name]["prior_b"]) == told, (c.label, name)
        assert by_name["gittins"]["horizon"] == 200 and "prior_a" not in by_name["ucb"]
        assert {"gittins", "bernoulli_ts", "bayes_ucb", "ucb"} <= set(by_name)
        # the exact DP where it is cheap (K=2) and Bayes-optimal for the cell's prior (not the skewed ones)
        assert ("bernoulli_bayes_optimal" in by_name) == (s.num_actions == 2 and s.prior is BanditPrior.BETA)
        # next to it the family-Bayes DP, told no prior: the same agent in every cell, over the 16 priors
        assert (family is not None) == ("bernoulli_bayes_optimal" in by_name)
        if family is not None:
            assert "prior_a" not in family and len(family["hyperprior"]) == 16
            assert [0.5, 5.0] in family["hyperprior"] and [5.0, 0.5] in family["hyperprior"]
    assert GENERALIZATION.beta_compared == ("Gittins (matched prior)",)
    assert parse_args(["--experiments", "generalization", "--grid-families", "bernoulli-beta"]).grid_families == (
        "bernoulli-beta",
    )


def test_references_play_the_prior_they_are_told(tmp_path):
    """The rows of a Beta(5, 5) cell and of a Beta(1, 1) cell, played on the same Beta(5, 5) instances, differ."""
    exp = dataclasses.replace(GENERALIZATION, beta_params=(1.0, 5.0), beta_arms=(2,), beta_horizon=30)
    beta = [c for c in grid_cells(exp, ("bernoulli-beta",)) if c.spec.prior is BanditPrior.BETA]
    cells = {(c.spec.prior_a, c.spec.prior_b): c for c in beta}
    cell = cells[(5.0, 5.0)]
    told5 = _reference_specs(exp, cell, tmp_path)
    told1 = _reference_specs(exp, cells[(1.0, 1.0)], tmp_path)
    for label in ("Gittins (matched prior)", "Bayes-UCB (matched prior)", "Bayes-optimal DP (matched prior)"):
        r5, r1 = (total_regret(cell.spec, refs[label], 200, seed=3) for refs in (told5, told1))
        assert (r5 != r1).any(), label  # the same instances and noise: only the prior differs
    family = "Bayes-optimal DP (family prior, not told)"
    f5, f1 = (total_regret(cell.spec, refs[family], 200, seed=3) for refs in (told5, told1))
    assert (f5 == f1).all()  # told nothing: the cell's prior does not reach it
    agent = make_agent(told5["TS (matched prior)"])
    agent.reset(horizon=30, num_arms=2)
    assert (agent.a, agent.b) == (5.0, 5.0)
    # a skewed prior is no Beta prior: the DP says so unless it is told one (the grid leaves it out there)
    info = BernoulliBanditVectorEnv(2, num_arms=2, horizon=4, prior="skewed").reset(seed=0)[1]
    with pytest.raises(ValueError, match="needs one Beta prior for every run; prior='skewed'"):
        make_agent({"name": "bernoulli_bayes_optimal"}).reset(info)
    make_agent({"name": "bernoulli_bayes_optimal", "prior_a": 1.0, "prior_b": 1.0}).reset(info)


def test_bernoulli_beta_check_is_105_percent_of_the_matched_gittins_mean():
    cell = grid_cells(GENERALIZATION, ("bernoulli-beta",))[0]
    gittins, other = [1.0, 2.0, 4.0, 3.0], [0.5, 0.5, 0.5, 0.5]
    bound = 1.05 * (1.0 + 2.0 + 4.0 + 3.0) / 4  # 2.625
    for model, passed in (([2.6, 2.6, 2.6, 2.7], True), ([2.7, 2.7, 2.7, 2.7], False), ([2.625] * 4, True)):
        totals = {"Gittins (matched prior)": np.array(gittins), "UCB": np.array(other), MODEL: np.array(model)}
        result = CellResult(cell, totals, references=GENERALIZATION.beta_compared)
        (row,) = checks(GENERALIZATION, result)
        assert row["check"] == "<= 1.05 x matched-prior Gittins" and row["cell"] == cell.label
        assert row["threshold"] == pytest.approx(bound, rel=1e-12) and row["pass"] is passed
        assert result.best_reference() == "Gittins (matched prior)"  # UCB's lower mean does not compete
    result = CellResult(cell, {"Gittins (matched prior)": None, MODEL: np.array(model)})
    assert [(r["threshold"], r["pass"]) for r in checks(GENERALIZATION, result)] == [(None, None)]
