"""The fine-tuning's exact validation: the Bernoulli generalist's exact K = 2 regret over the Beta family."""

import numpy as np
import pytest

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
