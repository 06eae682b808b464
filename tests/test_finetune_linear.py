"""Regret fine-tuning of the second-version linear generalist (icrl_gym.training.finetune_linear).

The network replayed on the rollout's logged inputs gives the logits of a whole-trajectory forward pass
(the features recomputed from every prefix, an independent path); the advantages equal a slow loop
over runs; a tiny run validates against the best uninformed reference and its bad configurations are
refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.bandit.model_average import UNINFORMED_REFERENCES
from icrl_gym.checkpoint import load_checkpoint
from icrl_gym.envs.linear_bandit import linear_bandit_spec
from icrl_gym.training import finetune_linear
from icrl_gym.training.finetune import finetune
from icrl_gym.training.finetune_core import FinetuneConfig
from icrl_gym.training.linear_generalist import family_instances, family_options, train
from tests.helpers import random_weights, tiny_finetune_config
from tests.test_linear_posterior import _tiny_run


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny second-version checkpoint (d_max 5, one-hot rows up to A = 8) and its record."""
    folder = tmp_path_factory.mktemp("lg2")
    train(_tiny_run(folder, steps=1), echo=False)
    return folder / "checkpoints" / "step_0000000"


def _runs(model, rng, loss_steps, horizon=15, num_arms=6, per_step=False):
    cfg = _tiny_run("unused")
    inst = family_instances(rng, family_options(cfg), 3, num_arms, horizon, per_step, model.config.d_max)
    inst = finetune_linear.repeat_instances(inst, 2, rng)
    return inst, finetune_linear.linear_rollout(model, inst, 1.0, loss_steps, rng, torch.device("cpu"))


@pytest.mark.parametrize("per_step", [False, True])
def test_replayed_network_gives_the_whole_trajectory_logits(base, per_step):
    model, _ = load_checkpoint(base)
    model = random_weights(model)  # every path of the network reaches the logits
    rng = np.random.default_rng(3)
    steps = np.array([0, 4, 9, 14])
    inst, runs = _runs(model, rng, steps, per_step=per_step)
    assert runs["actions"].shape == (6, 4) and runs["features"].shape[:3] == (6, 4, 6)
    assert model.input_log is None  # the log is switched off after the rollout
    np.testing.assert_array_equal(runs["actions"], runs["played_actions"][:, steps])
    replayed = finetune_linear.LinearGeneralistFinetune.logits(_method(base), model, runs, torch.device("cpu"))
    sets = torch.as_tensor(inst.sets).expand(-1, 15, -1, -1) if inst.sets.shape[1] == 1 else torch.as_tensor(inst.sets)
    whole = model(
        sets,
        torch.as_tensor(runs["played_actions"]),
        torch.as_tensor(runs["rewards"]),
        torch.as_tensor(steps).expand(6, -1),
        15,
        torch.as_tensor(inst.model_noise(), dtype=torch.float32),
        torch.as_tensor(inst.dim),
    )
    torch.testing.assert_close(replayed, whole, rtol=1e-4, atol=1e-4)


def _method(base, **overrides):
    _, meta = load_checkpoint(base)
    cfg = FinetuneConfig(base=str(base), **{"rollouts_per_instance": 2, **overrides})
    return finetune_linear.LinearGeneralistFinetune.for_base(cfg, meta)


def test_advantages_are_the_scaled_leave_one_out_regret_to_go(base):
    rng = np.random.default_rng(0)
    gaps = rng.exponential(1.0, (6, 10))
    steps = np.array([1, 5, 7])
    runs = {"gaps": gaps, "loss_steps": np.broadcast_to(steps, (6, 3))}
    advantage, stats = _method(base).advantages(runs)
    for b in range(6):
        other = b + 1 if b % 2 == 0 else b - 1  # the other run of the instance
        scale = 1.0 + (gaps[b].sum() + gaps[other].sum()) / 2
        for q, t in enumerate(steps):
            expected = (gaps[b, t:].sum() - gaps[other, t:].sum()) / scale
            assert advantage[b, q] == pytest.approx(expected)
    assert stats["regret"] == pytest.approx(gaps.sum(axis=1).mean())


def test_the_tail_term_adds_each_runs_hinge_over_its_siblings_minus_their_mean(base):
    """lambda (h_j - b_j) on every loss step, h_j = (R_j / (1 + m_-j) - kappa)_+, from a slow loop over runs."""
    rng = np.random.default_rng(1)
    gaps = rng.exponential(1.0, (9, 8))
    gaps[4] *= 12.0  # one run of the second instance far above its siblings
    steps = np.array([0, 3, 6])
    runs = {"gaps": gaps, "loss_steps": np.broadcast_to(steps, (9, 3))}
    plain, _ = _method(base, rollouts_per_instance=3).advantages(runs)
    advantage, stats = _method(base, rollouts_per_instance=3, tail_weight=2.0, tail_ratio=1.5).advantages(runs)
    totals = gaps.sum(axis=1)
    hinge = []
    for j in range(9):
        siblings = [k for k in range(3 * (j // 3), 3 * (j // 3) + 3) if k != j]
        hinge.append(max(totals[j] / (1.0 + np.mean(totals[siblings])) - 1.5, 0.0))
    for j in range(9):
        siblings = [k for k in range(3 * (j // 3), 3 * (j // 3) + 3) if k != j]
        expected = 2.0 * (hinge[j] - np.mean([hinge[k] for k in siblings]))
        np.testing.assert_allclose(advantage[j] - plain[j], expected, rtol=1e-12, atol=1e-12)
    assert hinge[4] > 0 and stats["tail_runs"] == pytest.approx(np.mean(np.array(hinge) > 0))


def test_a_tiny_run_validates_against_the_best_uninformed_reference(base, tmp_path, monkeypatch):
    cell = linear_bandit_spec(3, 4, 12, 0.5, prior="family")
    monkeypatch.setattr(finetune_linear, "VALIDATION_CELLS", {"tiny": cell})
    finetune_linear.uninformed_best.cache_clear()
    cfg = tiny_finetune_config(
        base,
        tmp_path / "ft",
        iterations=2,
        eval_every=2,
        rollouts_per_instance=2,
        arms_choices=[4],
        horizon_choices=[12],
        loss_steps=5,
        val_runs=6,
        lr=1e-3,
    )
    model, meta = finetune(cfg, echo=False)
    history = meta["finetune"]["history"]
    assert [h["iteration"] for h in history] == [0, 2]
    # The ratio is the greedy model's regret over the best of the uninformed references on the same instances.
    from agents.learned.linear_generalist import LinearGeneralistAgent
    from icrl_gym.data.trajectories import evaluate_regret

    seed = finetune_linear.VALIDATION_SEED + cfg.seed
    refs = [
        evaluate_regret(cell, row, 6, seed=seed, batch_size=6).sum(1).mean() for row in UNINFORMED_REFERENCES.values()
    ]
    start, _ = load_checkpoint(base)
    played = evaluate_regret(
        cell, LinearGeneralistAgent.from_model(start, meta, greedy=True), 6, seed=seed, batch_size=6
    )
    assert history[0]["val_regret"] == pytest.approx(played.sum(1).mean() / min(refs))
    assert history[0]["val tiny"] == history[0]["val_worst"] == history[0]["val_regret"]
    # A run fails above max(3 x the best reference's mean, 20); this run counts none, the score is the ratio alone.
    failed = np.mean(played.sum(1) > max(3 * min(refs), 20.0))
    assert history[0]["val failures tiny"] == history[0]["val_failures"] == pytest.approx(failed)
    assert "worst cell" in (tmp_path / "ft" / "train.log").read_text()
    finetune_linear.uninformed_best.cache_clear()


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"env": {"dim": 3}}, "env must be empty"),
        ({"rollouts_per_instance": 1}, "rollouts_per_instance must be >= 2"),
        ({"val_arms": [5]}, "val_arms is the Bernoulli generalist's only"),
    ],
)
def test_bad_configurations_are_refused(base, tmp_path, overrides, problem):
    cfg = tiny_finetune_config(base, tmp_path / "bad", **{"rollouts_per_instance": 2, **overrides})
    with pytest.raises(ValueError, match=problem):
        finetune(cfg, echo=False)


def test_the_failure_weight_adds_the_failed_fraction_to_the_score(base, monkeypatch):
    """score = mean ratio + c x mean failed fraction, the fractions as counted above failure_limit."""
    from icrl_gym.training.finetune_linear import LinearGeneralistFinetune

    cells = {"a": (1.05, 0.04), "b": (0.95, 0.0)}
    monkeypatch.setattr(finetune_linear, "validation_ratios", lambda *args: cells)
    model, _ = load_checkpoint(base)
    method = _method(base, val_failure_weight=5.0)
    assert LinearGeneralistFinetune.validation_regret(method, model, torch.device("cpu")) == pytest.approx(1.0 + 0.1)
    assert method.details["val_failures"] == pytest.approx(0.02) and method.details["val failures a"] == 0.04


def test_the_tail_fields_are_refused_outside_the_linear_generalist(tmp_path):
    for field_name in ("tail_weight", "val_failure_weight"):
        cfg = tiny_finetune_config("bernoulli-generalist", tmp_path / field_name, **{field_name: 1.0})
        with pytest.raises(ValueError, match=f"{field_name} is the linear generalist's only"):
            finetune(cfg, echo=False)


def test_a_first_version_checkpoint_is_refused(tmp_path):
    cfg = tiny_finetune_config("linear-generalist-v1", tmp_path / "v1", rollouts_per_instance=2)
    with pytest.raises(ValueError, match="second-version linear generalist"):
        finetune(cfg, echo=False)
