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
    cfg = FinetuneConfig(base=str(base), rollouts_per_instance=2, **overrides)
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


def test_a_first_version_checkpoint_is_refused(tmp_path):
    cfg = tiny_finetune_config("linear-generalist-v1", tmp_path / "v1", rollouts_per_instance=2)
    with pytest.raises(ValueError, match="second-version linear generalist"):
        finetune(cfg, echo=False)
