"""The family-Bayes Bernoulli DP and the exact frontier against independent computations.

Brute force over histories with the predictive integrated numerically, Monte-Carlo play of the
agents, and the optimality of the family policy among policies that are not told the prior.
"""

import math

import numpy as np
import pytest

from agents import make_agent
from agents.bandit.bernoulli_bayes_optimal import (
    BernoulliBayesOptimal,
    FamilyPredictive,
    bayes_optimal_table,
    colex_combinations,
    compositions,
    family_bayes_advantages,
    family_bayes_table,
)
from benchmarks.experiments.bernoulli_frontier.run import (
    Policy,
    frontier,
    generalist_policy,
    gittins_policy,
    policy_values,
    table_policy,
    uninformed_indices,
    uninformed_regrets,
)
from icrl_gym.checkpoint import load_checkpoint, resolve_checkpoint
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BernoulliBanditEnv, bernoulli_bandit_spec
from icrl_gym.estimators.gittins import cached_gittins_table
from icrl_gym.kinds import CheckpointKind
from icrl_gym.training.exact_bernoulli import expected_best_mean
from tests.helpers import brute_force_family_q

FAMILY = np.array([[0.5, 2.0], [3.0, 1.0], [1.0, 1.0]])
WEIGHTS = np.array([0.5, 0.3, 0.2])


def test_family_dp_value_is_the_brute_force_mixture_value():
    _, value = family_bayes_table(2, 4, FAMILY, WEIGHTS)
    q = brute_force_family_q(4, tuple(map(tuple, FAMILY)), tuple(WEIGHTS))
    assert value == pytest.approx(max(q(((0, 0), (0, 0)))), abs=1e-7)


def test_family_advantages_are_the_brute_force_q_values_less_their_max():
    """Every count state of every layer: A(x, k) = Q(x, k) - max_k' Q(x, k'), Q enumerated over histories."""
    horizon = 4
    advantages = family_bayes_advantages(2, horizon, FAMILY, WEIGHTS)
    q = brute_force_family_q(horizon, tuple(map(tuple, FAMILY)), tuple(WEIGHTS))
    for n in range(horizon):
        states = compositions(colex_combinations(n + 3, 3), n)  # the layer's states in rank order
        assert len(states) == len(advantages[n]) == math.comb(n + 3, 3)
        for x, row in zip(states, advantages[n], strict=True):
            values = np.array(q(((x[0], x[1]), (x[2], x[3]))))
            np.testing.assert_allclose(row, values - values.max(), atol=1e-6)


def test_family_value_is_the_weighted_per_prior_value_and_beats_every_uninformed_policy():
    """V(0) = sum_j pi_j V_j(F); F beats the told-DP tables of single members played on the whole family."""
    horizon = 12
    tables, value = family_bayes_table(2, horizon, FAMILY, WEIGHTS)
    policies: dict[str, Policy | None] = {"family": table_policy(tables, len(FAMILY))}
    for j, (a, b) in enumerate(FAMILY):
        policies[f"member {j}"] = table_policy(bayes_optimal_table(2, horizon, a, b)[0], len(FAMILY))
    policies["told"] = None
    values = policy_values(2, horizon, FAMILY, policies)
    assert (WEIGHTS * values["family"]).sum() == pytest.approx(value, abs=1e-10)
    for j in range(len(FAMILY)):
        assert (WEIGHTS * values["family"]).sum() >= (WEIGHTS * values[f"member {j}"]).sum() - 1e-12
        # member j's own table is the told-DP policy under prior j
        assert values[f"member {j}"][j] == pytest.approx(values["told"][j], abs=1e-10)
    assert np.all(values["told"] >= values["family"] - 1e-12)  # being told the prior never hurts
    assert (WEIGHTS * values["told"]).sum() > value + 1e-3  # and here it helps


def test_exact_values_match_monte_carlo_play_of_the_agents(tmp_path):
    """T E[max] - V_j from the backward pass = the agents' simulated regret under Beta(a_j, b_j)."""
    horizon, runs = 15, 20_000
    a, b = FAMILY[0]
    spec = bernoulli_bandit_spec(num_arms=2, horizon=horizon, prior="beta", prior_a=a, prior_b=b)
    gittins = [cached_gittins_table(horizon, tmp_path, *p) for p in FAMILY]
    tables, _ = family_bayes_table(2, horizon, FAMILY, WEIGHTS)
    values = policy_values(
        2, horizon, FAMILY, {"gittins": gittins_policy(gittins, horizon), "family": table_policy(tables, 3)}
    )
    top = horizon * expected_best_mean(a, b, 2)
    family_agent = BernoulliBayesOptimal(hyperprior=FAMILY.tolist(), hyperprior_weights=WEIGHTS.tolist())
    told_gittins = {"name": "gittins", "horizon": horizon, "prior_a": a, "prior_b": b, "cache_dir": str(tmp_path)}
    for name, agent in (("family", family_agent), ("gittins", told_gittins)):
        regret = evaluate_regret(spec, agent, runs, seed=12_000_000, batch_size=runs).sum(axis=1)
        assert regret.mean() == pytest.approx(top - values[name][0], abs=4 * regret.std() / np.sqrt(runs))
    assert family_agent.config()["model_used"] == {"horizon": horizon}  # the environment's prior is not read
    assert family_agent.config()["hyperprior"] == FAMILY.tolist()


def test_expected_best_mean_closed_form():
    """E[max of 2 iid U[0, 1]] = 2/3; of 3 iid Beta(2, 1) (density 2x, cdf x^2) = int 1 - x^6 = 6/7."""
    assert expected_best_mean(1.0, 1.0, 2) == pytest.approx(2 / 3, abs=1e-10)
    assert expected_best_mean(2.0, 1.0, 3) == pytest.approx(6 / 7, abs=1e-10)


def test_one_member_certificate_is_at_most_one_and_a_family_certificate_exceeds_one(tmp_path):
    """Told the only member, F is the told DP (c <= 1); a family makes every uninformed policy pay (c > 1)."""
    rows, cert = frontier(2, 10, [(2.0, 2.0)], tmp_path, searches=1, echo=lambda _: None)
    assert rows[0]["family_bayes"] == pytest.approx(rows[0]["told_dp"], abs=1e-12)
    assert cert["best"]["c"] <= 1.0 + 1e-12
    rows, cert = frontier(2, 10, [(0.5, 5.0), (5.0, 0.5)], tmp_path, searches=2, echo=lambda _: None)
    assert cert["best"]["c"] > 1.0 and cert["best"]["c"] == max(t["c"] for t in cert["tries"])
    uniform = cert["tries"][0]
    assert uniform["c"] == pytest.approx(
        sum(r["family_bayes"] for r in rows) / sum(r["told_gittins"] for r in rows), abs=1e-12
    )


def test_family_agent_refuses_bad_hyperpriors():
    with pytest.raises(ValueError, match="not both"):
        BernoulliBayesOptimal(prior_a=1.0, prior_b=1.0, hyperprior=[[1.0, 1.0]])
    with pytest.raises(ValueError, match="a, b > 0"):
        BernoulliBayesOptimal(hyperprior=[[1.0, 0.0]])
    with pytest.raises(ValueError, match="weights"):
        BernoulliBayesOptimal(hyperprior=[[1.0, 1.0], [2.0, 2.0]], hyperprior_weights=[1.0])
    with pytest.raises(ValueError, match="needs hyperprior"):
        BernoulliBayesOptimal(hyperprior_weights=[1.0])


def test_posterior_vote_and_mixed_index_against_a_direct_loop(tmp_path):
    """The vote and the mixed index of uninformed_indices, recomputed run by run with math.lgamma."""
    horizon = 12
    tables = [cached_gittins_table(horizon, tmp_path, *p) for p in FAMILY]
    rng = np.random.default_rng(0)
    s, f = rng.integers(0, 3, (6, 3)), rng.integers(0, 3, (6, 3))
    scores = uninformed_indices(tables, FamilyPredictive(FAMILY, np.ones(3), horizon), s, f, 5)

    def log_beta(x, y):
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    for i in range(6):
        log_w = [sum(log_beta(a + s[i, k], b + f[i, k]) - log_beta(a, b) for k in range(3)) for a, b in FAMILY]
        w = np.exp(np.array(log_w) - max(log_w))
        w /= w.sum()
        vote, mixed = np.zeros(3), np.zeros(3)
        for j, table in enumerate(tables):
            index = np.array([table.lookup(s[i, k], f[i, k], 5) for k in range(3)])
            winners = np.flatnonzero(index == index.max())
            vote[winners] += w[j] / len(winners)
            mixed += w[j] * index
        assert scores["posterior vote"][i] == pytest.approx(vote, abs=1e-9)
        assert scores["evidence-mixed index"][i] == pytest.approx(mixed, abs=1e-6)


def test_monte_carlo_rows_share_instances_and_a_one_member_vote_is_told_gittins(tmp_path):
    """With one member the vote and the mixed index are told Gittins: same regret run by run (CRN)."""
    rows = uninformed_regrets(3, 15, [(2.0, 1.0)], 300, 5, tmp_path)
    by = {r["policy"]: r for r in rows}
    for name in ("posterior vote", "evidence-mixed index"):
        assert by[name]["mean"] == pytest.approx(by["told Gittins"]["mean"], abs=1e-12)
    assert by["told Gittins"]["ratio"] == 1.0
    # the tail columns: the same runs give the same 99th percentile; it lies above the mean
    assert by["posterior vote"]["p99"] == pytest.approx(by["told Gittins"]["p99"], abs=1e-12)
    assert by["told Gittins"]["p99_ratio"] == 1.0 and all(r["p99"] > r["mean"] for r in rows)
    # their errors: none for a policy that plays the reference's runs, some for one that does not
    for name in ("told Gittins", "posterior vote"):
        assert by[name]["ratio_se"] == 0.0 and by[name]["p99_ratio_low"] == by[name]["p99_ratio_high"] == 1.0
    other = by["Gittins told U[0, 1]"]
    assert other["ratio_se"] > 0.0 and other["p99_ratio_low"] <= other["p99_ratio"] <= other["p99_ratio_high"]
    assert other["p99_ratio_low"] < other["p99_ratio_high"]
    assert by["Gittins told U[0, 1]"]["mean"] != by["told Gittins"]["mean"]  # U[0, 1] is not Beta(2, 1)
    # the told-Gittins regret agrees with an exact K=2 pass on a two-arm run of the same prior
    rows2 = uninformed_regrets(2, 15, [(2.0, 1.0)], 4000, 6, tmp_path)
    gittins = [cached_gittins_table(15, tmp_path, 2.0, 1.0)]
    exact = (
        15 * expected_best_mean(2.0, 1.0, 2)
        - policy_values(2, 15, np.array([[2.0, 1.0]]), {"g": gittins_policy(gittins, 15)})["g"][0]
    )
    told = next(r for r in rows2 if r["policy"] == "told Gittins")
    assert told["mean"] == pytest.approx(exact, abs=4 * told["se"])


def test_family_agent_record_rebuilds_it_and_ignores_the_environment_prior():
    """config() -> make_agent gives the same family agent; a Beta(5, 0.5) environment does not change its play."""
    agent = BernoulliBayesOptimal(hyperprior=FAMILY.tolist(), hyperprior_weights=WEIGHTS.tolist())
    info = BernoulliBanditEnv(num_arms=2, horizon=10).reset(seed=0)[1]
    agent.reset(info)
    again = make_agent(agent.config())
    other_prior_env = BernoulliBanditEnv(num_arms=2, horizon=10, prior="beta", prior_a=5.0, prior_b=0.5)
    again.reset(other_prior_env.reset(seed=0)[1])
    assert again.config() == agent.config()
    assert all((x == y).all() for x, y in zip(agent.tables, again.tables, strict=True))


def test_the_generalist_as_a_count_state_policy_matches_its_agent():
    """Exact regret of the shipped Bernoulli generalist (greedy) = its agent's Monte-Carlo regret."""
    horizon, runs = 12, 5_000
    model, _ = load_checkpoint(resolve_checkpoint("bernoulli-generalist"), kind=CheckpointKind.GENERALIST_TRANSFORMER)
    model.eval()
    values = policy_values(2, horizon, FAMILY, {"model": generalist_policy(model, horizon, len(FAMILY), chunk=100)})
    for j in (0, 1):
        a, b = FAMILY[j]
        spec = bernoulli_bandit_spec(num_arms=2, horizon=horizon, prior="beta", prior_a=a, prior_b=b)
        agent = {"name": "generalist", "checkpoint": "bernoulli-generalist"}
        regret = evaluate_regret(spec, agent, runs, seed=12_000_100 + j, batch_size=runs).sum(axis=1)
        exact = horizon * expected_best_mean(a, b, 2) - values["model"][j]
        assert regret.mean() == pytest.approx(exact, abs=4 * regret.std() / np.sqrt(runs))


def test_the_monte_carlo_model_row_plays_the_count_state_policy(tmp_path):
    """The Monte-Carlo "model (greedy)" row agrees with the exact count-state value of the same model."""
    horizon = 10
    model, _ = load_checkpoint(resolve_checkpoint("bernoulli-generalist"), kind=CheckpointKind.GENERALIST_TRANSFORMER)
    model.eval()
    rows = uninformed_regrets(2, horizon, [(2.0, 1.0)], 6000, 7, tmp_path, model)
    row = next(r for r in rows if r["policy"] == "model (greedy)")
    exact = (
        horizon * expected_best_mean(2.0, 1.0, 2)
        - policy_values(2, horizon, np.array([[2.0, 1.0]]), {"m": generalist_policy(model, horizon, 1)})["m"][0]
    )
    assert row["mean"] == pytest.approx(exact, abs=4 * row["se"])
