"""The fine-tuning's exact validation: the Bernoulli generalist's exact K = 2 regret over the Beta family."""

import dataclasses

import numpy as np
import pytest
import torch

from benchmarks.experiments.bernoulli_frontier.cells import BETA_GRID
from benchmarks.experiments.bernoulli_frontier.run import frontier, uninformed_regrets
from icrl_gym.checkpoint import load_checkpoint, resolve_checkpoint
from icrl_gym.kinds import CheckpointKind
from icrl_gym.training.exact_bernoulli import BETA_FAMILY, family_regret_ratio
from icrl_gym.training.finetune import finetune
from tests.helpers import tiny_finetune_config


@pytest.fixture(scope="module")
def generalist():
    model, _ = load_checkpoint(resolve_checkpoint("bernoulli-generalist"), kind=CheckpointKind.GENERALIST_TRANSFORMER)
    return model.eval()


def test_the_exact_validation_is_the_frontiers_model_row(tmp_path, generalist):
    """sum_j Reg_j(model) / sum_j Reg_j(F) and the worst prior equal the frontier's rows (K = 2, T = 9)."""
    assert BETA_FAMILY == BETA_GRID
    rows, _ = frontier(2, 9, BETA_GRID, tmp_path, searches=0, echo=lambda line: None, model=generalist)
    exact = family_regret_ratio(generalist, 2, 9, chunk=50)
    np.testing.assert_array_equal(exact.model, [row["model"] for row in rows])
    np.testing.assert_array_equal(exact.family_bayes, [row["family_bayes"] for row in rows])
    assert exact.ratio == pytest.approx(sum(r["model"] for r in rows) / sum(r["family_bayes"] for r in rows), 1e-12)
    assert exact.worst == pytest.approx(max(r["model_to_family_bayes"] for r in rows), 1e-12)
    assert exact.ratio >= 1.0  # the family-Bayes policy minimises the sum over the family


def test_a_fine_tuning_validated_exactly_keeps_its_best_score_and_the_worst_prior(tmp_path):
    env = {"dim": 2, "num_actions": 2, "horizon": 6, "arms": "one_hot", "reward": "bernoulli", "prior": "beta_family"}
    cfg = tiny_finetune_config(
        "bernoulli-generalist",
        tmp_path / "ft",
        env=env,
        iterations=2,
        eval_every=1,
        rollouts_per_instance=2,
        lr=1e-3,
        validation="exact_family",
        val_horizon=5,
    )
    model, meta = finetune(cfg, echo=False)
    history = meta["finetune"]["history"]
    assert [h["iteration"] for h in history] == [0, 1, 2]
    assert all(h["val_regret"] >= 1.0 and h["val_worst"] >= h["val_regret"] for h in history)
    best = min(history, key=lambda h: h["val_regret"])
    assert meta["finetune"]["best"] == {"iteration": best["iteration"], "val_regret": best["val_regret"]}
    assert family_regret_ratio(model, 2, 5).ratio == pytest.approx(best["val_regret"], 1e-12)


def test_the_exact_validation_is_refused_for_a_bandit_transformer(tmp_path):
    cfg = tiny_finetune_config("bernoulli-ad-ucb", tmp_path / "bandit", validation="exact_family")
    with pytest.raises(ValueError, match="exact_family"):
        finetune(cfg, echo=False)


def test_monte_carlo_rows_of_some_policies_are_those_of_a_run_of_all(tmp_path, generalist):
    """``policies`` plays told Gittins and the model only; their rows equal those of a run of every policy."""
    priors = [(2.0, 1.0), (0.5, 5.0)]
    every = uninformed_regrets(3, 8, priors, 30, 11, tmp_path, generalist, slice_runs=20)
    some = uninformed_regrets(3, 8, priors, 30, 11, tmp_path, generalist, slice_runs=20, policies=["model (greedy)"])
    assert some == [row for row in every if row["policy"] in ("told Gittins", "model (greedy)")]
    assert {row["policy"] for row in some} == {"told Gittins", "model (greedy)"}


def test_a_fine_tuning_over_a_mixture_of_sizes_scores_its_validation_as_the_mean_of_the_ratios(tmp_path, generalist):
    """arms_choices / horizon_choices draw each iteration's K and T; val_arms adds a fixed-instance K = 3 ratio.

    The score is the mean of the exact K = 2 ratio and the K = 3 one, and the K = 3 ratio is the model's summed
    regret over the 16 Beta priors divided by the told Gittins' on the same instances (a slow loop here).
    """
    from agents.bandit.gittins import Gittins
    from agents.learned.generalist import GeneralistAgent
    from icrl_gym.data.trajectories import evaluate_regret
    from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
    from icrl_gym.training.finetune_core import VALIDATION_SEED
    from icrl_gym.training.finetune_generalist import GeneralistFinetune, fixed_instance_ratio

    env = {"dim": 2, "num_actions": 2, "horizon": 6, "arms": "one_hot", "reward": "bernoulli", "prior": "beta_family"}
    mixed = dict(arms_choices=[2, 3], horizon_choices=[4, 7], rollouts_per_instance=2)
    cfg = tiny_finetune_config("bernoulli-generalist", tmp_path / "mix", env=env, **mixed)
    method = GeneralistFinetune.for_base(cfg, {})
    sizes = set()
    for step in range(12):
        runs = method.rollout(generalist, np.random.default_rng([0, step]), torch.device("cpu"))
        logits = method.logits(generalist, runs, torch.device("cpu"))
        K, T = int(runs["num_actions"][0]), runs["actions"].shape[1]
        assert logits.shape == (8, T, K) and runs["actions"].max() < K
        sizes.add((K, T))
    assert sizes == {(2, 4), (2, 7), (3, 4), (3, 7)}

    ratio = fixed_instance_ratio(generalist, 3, 5, 6, seed=1)
    model_sum = gittins_sum = 0.0
    for j, prior in enumerate(BETA_FAMILY):
        spec = bernoulli_bandit_spec(3, 5, prior="beta", prior_a=prior[0], prior_b=prior[1])
        model_sum += (
            evaluate_regret(spec, GeneralistAgent.from_model(generalist), 6, seed=VALIDATION_SEED + 1 + j).sum(1).mean()
        )
        gittins_sum += evaluate_regret(spec, Gittins(), 6, seed=VALIDATION_SEED + 1 + j).sum(1).mean()
    assert ratio == pytest.approx(model_sum / gittins_sum, 1e-12)

    validated = dataclasses.replace(
        cfg,
        iterations=1,
        eval_every=1,
        validation="exact_family",
        val_horizon=4,
        val_arms=[3],
        val_arms_horizon=5,
        val_runs=6,
        seed=1,
        lr=1e-3,
    )
    _, meta = finetune(validated, echo=False)
    start = meta["finetune"]["history"][0]
    assert start["val_exact"] == pytest.approx(family_regret_ratio(generalist, 2, 4).ratio, 1e-12)
    assert start["val_k3"] == pytest.approx(ratio, 1e-12)
    assert start["val_regret"] == pytest.approx((start["val_exact"] + start["val_k3"]) / 2, 1e-12)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("arms_choices", [1, 3], "arms_choices"),
        ("val_arms", "5", "val_arms"),
        ("horizon_choices", [0], "horizon_choices"),
    ],
)
def test_the_size_lists_are_checked(tmp_path, field, value, problem):
    with pytest.raises(ValueError, match=problem):
        tiny_finetune_config("bernoulli-generalist", tmp_path / "bad", **{field: value})


def test_the_size_mixture_is_refused_for_a_bandit_transformer(tmp_path):
    cfg = tiny_finetune_config("bernoulli-ad-ucb", tmp_path / "bandit", arms_choices=[2, 5])
    with pytest.raises(ValueError, match="arms_choices is the generalists' only"):
        finetune(cfg, echo=False)
