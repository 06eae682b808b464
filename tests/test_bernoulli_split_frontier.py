"""The two-armed split-prior frontier (benchmarks.evaluations.bernoulli_split_frontier).

The truncated-Beta evidence and predictive against quadrature; the mixture DP against the family-Bayes DP of
agents.bandit.bernoulli_bayes_optimal (an independent implementation) when the split prior has no weight; fixed
policies against their closed-form regret on the split prior; the frontier's order; the command's files.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import integrate

from agents.bandit.bernoulli_bayes_optimal import family_bayes_advantages
from agents.bandit.family_gittins import BETA_FAMILY
from benchmarks.evaluations import bernoulli_split_frontier as sf
from benchmarks.experiments.bernoulli_frontier.run import load_generalist, weights_sha256
from icrl_gym.algorithm import first_argmax, uniform_over_maximisers
from icrl_gym.training import split_prior
from icrl_gym.training.exact_bernoulli import family_bayes_regrets, family_regret_ratio


@pytest.mark.parametrize("high", [True, False])
def test_the_half_uniform_arm_is_the_truncated_beta_by_quadrature(high):
    log_ev, pred = split_prior.half_uniform_arm(high, 60)
    low, top = (0.5, 1.0) if high else (0.0, 0.5)
    for s, f in [(0, 0), (3, 1), (0, 40), (25, 2), (7, 30)]:
        mass = integrate.quad(lambda p, s=s, f=f: p**s * (1 - p) ** f, low, top, epsabs=0, epsrel=1e-12)[0]
        first = integrate.quad(lambda p, s=s, f=f: p ** (s + 1) * (1 - p) ** f, low, top, epsabs=0, epsrel=1e-12)[0]
        assert log_ev[s, f] == pytest.approx(np.log(mass / (top - low)), rel=1e-9)
        assert pred[s, f] == pytest.approx(first / mass, rel=1e-9)


def test_without_the_split_prior_the_mixture_dp_is_the_family_bayes_dp():
    horizon = 12
    mix = split_prior.SplitMixture(horizon)
    regret = mix.regrets(weights=np.array([1.0] * 16 + [0.0, 0.0]))
    np.testing.assert_allclose(regret[:16], family_bayes_regrets(2, horizon, tuple(BETA_FAMILY)), rtol=1e-9, atol=1e-9)


def test_fixed_policies_have_their_closed_form_regret_on_the_split_prior():
    """T (E[max] - E[p_pulled]): always arm 0 pays 0 on the skewed prior and (3/4 - 1/4) T on the reversed one,
    each arm with probability 1/2 pays (3/4 - 1/2) T on both."""
    horizon = 10
    mix = split_prior.SplitMixture(horizon)
    for act, expected in (([1.0, 0.0], [0.0, 0.5]), ([0.5, 0.5], [0.25, 0.25])):
        regret = mix.regrets(policy=lambda n, x, act=act: np.tile(act, (len(x), 1)))
        np.testing.assert_allclose(regret[16:], np.array(expected) * horizon, rtol=1e-12, atol=1e-12)


def test_the_frontier_trades_the_family_sum_against_the_split_prior(tmp_path):
    result = sf.main(
        [
            "--horizon",
            "10",
            "--lambdas",
            "0",
            "0.2",
            "1000000",
            "--cache",
            str(tmp_path / "c"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    rows = result["rows"]
    split_alone, mid, family = rows["lambda=0"], rows["lambda=0.2"], rows["lambda=1e+06"]
    assert split_alone["split"] <= mid["split"] <= family["split"]  # more weight on the family: worse on the split
    assert split_alone["family_sum"] >= mid["family_sum"] >= family["family_sum"] == pytest.approx(1.0, abs=1e-9)
    assert split_alone["split"] <= rows["Gittins told U[0, 1]"]["split"] <= 0.25 * 10  # Bayes-optimal on it
    saved = json.loads((tmp_path / "out" / "split-frontier.json").read_text())
    assert saved["config"]["horizon"] == 10 and saved["rows"] == rows  # floats round-trip through JSON exactly
    assert "| lambda=0.2 |" in (tmp_path / "out" / "split-frontier.md").read_text()


def test_weights_and_a_policy_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        split_prior.SplitMixture(4).regrets()


def test_the_advantages_at_zero_split_share_are_the_family_bayes_dps():
    horizon = 9
    got = split_prior.SplitMixture(horizon).advantages(split_prior.split_weights(0.0))
    want = family_bayes_advantages(2, horizon, np.array(BETA_FAMILY))
    assert len(got) == len(want) == horizon
    for layer, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-6, err_msg=f"layer {layer}")


def test_playing_the_advantages_greedily_has_the_mixtures_bayes_regret():
    """The maximisers of the advantages (ties uniform), played as a count-state policy, are the mixture's
    Bayes-optimal policy: the same regret per component as the backward pass that plays it."""
    horizon, weights = 10, split_prior.split_weights(0.25)
    mix = split_prior.SplitMixture(horizon)
    tables = mix.advantages(weights)
    assert all(np.all(t <= 0) and np.all(t.max(axis=1) == 0) for t in tables)
    played = mix.regrets(policy=lambda n, x: uniform_over_maximisers(tables[n].astype(np.float64), 1e-6))
    np.testing.assert_allclose(played, mix.regrets(weights=weights), rtol=1e-6, atol=1e-6)
    alone = mix.regrets(weights=split_prior.split_weights(1.0))[16:].mean()
    assert alone <= played[16:].mean() + 1e-12  # told the split prior it can only do better there
    with pytest.raises(ValueError, match="split_share"):
        split_prior.split_weights(1.5)


def test_first_arm_ties_move_regret_between_the_sets_not_the_mixtures_bayes_regret():
    """At T = 1 the tied first pull goes to arm 0: the skewed prior (high arm first) loses 0, the reversed one
    3/4 - 1/4, against 1/4 each with uniform ties.  At any T the mixture's Bayes regret does not depend on how the
    optimal policy breaks its ties, and playing the advantages' first maximiser is the same policy."""
    weights = split_prior.split_weights(0.25)
    one = split_prior.SplitMixture(1)
    np.testing.assert_allclose(one.regrets(weights=weights, first_arm_ties=True)[16:], [0.0, 0.5], atol=1e-12)
    np.testing.assert_allclose(one.regrets(weights=weights)[16:], [0.25, 0.25], atol=1e-12)
    horizon = 10
    mix = split_prior.SplitMixture(horizon)
    first, uniform = mix.regrets(weights=weights, first_arm_ties=True), mix.regrets(weights=weights)
    assert weights @ first == pytest.approx(weights @ uniform, rel=1e-10)
    assert uniform[16] == pytest.approx(uniform[17]) and first[16] < uniform[16] < first[17]
    tables = mix.advantages(weights)
    played = mix.regrets(policy=lambda n, x: np.eye(2)[first_argmax(tables[n].astype(np.float64), 1e-6)])
    np.testing.assert_allclose(played, first, rtol=1e-6, atol=1e-6)


def test_the_frontier_plays_shares_models_and_first_arm_ties(tmp_path):
    """A share's row is the trainer's mixture DP; a model's exact Beta lines are those of exact_bernoulli's own
    backward pass over the family (an independent evaluation); the first-arm Gittins favours the skewed set."""
    horizon, name = 6, "bernoulli-generalist-family"
    result = sf.main(
        ["--horizon", str(horizon), "--lambdas", "--shares", "0.25", "--model", name, "--first-arm-ties"]
        + ["--cache", str(tmp_path / "c"), "--out", str(tmp_path / "out")]
    )
    rows = result["rows"]
    assert set(rows) == {"Gittins told U[0, 1]", "share=0.25", f"model {name}"} and result["first_arm_ties"]
    assert result["models"] == {name: weights_sha256(name)}  # the weights played are recorded
    mix = split_prior.SplitMixture(horizon)
    regret = mix.regrets(weights=split_prior.split_weights(0.25), first_arm_ties=True)
    assert rows["share=0.25"]["skewed"] == pytest.approx(regret[16], rel=1e-12)
    family = family_bayes_regrets(2, horizon, tuple(BETA_FAMILY))
    assert rows["share=0.25"]["worst_prior"] == pytest.approx((regret[:16] / family).max(), rel=1e-12)
    np.testing.assert_allclose(rows["share=0.25"]["prior_ratios"], regret[:16] / family, rtol=1e-12)
    assert rows["share=0.25"]["worst_prior_beta"] == list(BETA_FAMILY[int(np.argmax(regret[:16] / family))])
    assert result["beta_priors"] == [list(pair) for pair in BETA_FAMILY]
    exact = family_regret_ratio(load_generalist(name), 2, horizon)
    assert rows[f"model {name}"]["family_sum"] == pytest.approx(exact.ratio, rel=1e-9)
    assert rows[f"model {name}"]["worst_prior"] == pytest.approx(exact.worst, rel=1e-9)
    np.testing.assert_allclose(rows[f"model {name}"]["prior_ratios"], exact.model / exact.family_bayes, rtol=1e-9)
    a, b = rows[f"model {name}"]["worst_prior_beta"]
    assert f"x, Beta({a:g}, {b:g}) |" in (tmp_path / "out" / "split-frontier.md").read_text()
    gittins = rows["Gittins told U[0, 1]"]
    assert gittins["skewed"] < gittins["split"] < gittins["reversed"] and gittins["skewed_ratio"] == 1.0
    assert "| share=0.25 |" in (tmp_path / "out" / "split-frontier.md").read_text()


def test_the_frontier_refuses_a_share_outside_the_unit_interval(tmp_path):
    with pytest.raises(SystemExit):
        sf.main(["--horizon", "4", "--shares", "1.5", "--out", str(tmp_path)])
