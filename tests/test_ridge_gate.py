"""The linear generalist's ridge gate: LinUCB's statistics, the gated skip index, and widening a base.

LinUCB's ridge mean and width are checked against a direct numpy solve per run (V = I + X^T X); the open
gate's logits against LinUCB's index computed directly; a base widened with the gate plays exactly as
the base, and a widening that would drop a base weight is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icrl_gym.checkpoint import load_checkpoint
from icrl_gym.models.linear_generalist import LinearGeneralistConfig, LinearGeneralistTransformer
from icrl_gym.models.linear_posterior import (
    arm_posterior,
    bayes_ucb_quantile,
    linear_posterior,
    model_average,
    ridge_arms,
    ridge_linear,
)
from icrl_gym.training.finetune import widened
from icrl_gym.training.linear_generalist import train
from tests.test_linear_posterior import TINY, _moments, _tiny_run


def _ridge_direct(x_hist, r, arms, d):
    """LinUCB (lambda = 1) by a matrix inverse: the ridge mean <a, V^{-1} X^T r> and width sqrt(a^T V^{-1} a)."""
    xs, a = x_hist[:, :d], arms[:, :d]
    inv = np.linalg.inv(np.eye(d) + xs.T @ xs)
    return a @ inv @ xs.T @ r, np.sqrt(np.einsum("ad,de,ae->a", a, inv, a))


def test_ridge_statistics_equal_a_direct_solve_per_run():
    rng = np.random.default_rng(0)
    d_max, num_arms = 6, 5
    moments, arms, expected = [], [], []
    for d, n in ((2, 0), (4, 7), (6, 30)):  # runs of different d and history length in one batch
        x_hist = np.pad(rng.uniform(-1, 1, (n, d)), ((0, 0), (0, d_max - d)))
        r = rng.normal(0.3, 1.0, n)
        a = np.pad(rng.uniform(-1, 1, (num_arms, d)), ((0, 0), (0, d_max - d)))
        moments.append(_moments(x_hist, r, d_max))
        arms.append(torch.as_tensor(a))
        expected.append(_ridge_direct(x_hist, r, a, d))
    mean, width = ridge_linear(torch.stack(moments), torch.stack(arms), torch.tensor([2, 4, 6]))
    for i, (m, w) in enumerate(expected):
        np.testing.assert_allclose(mean[i].numpy(), m, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(width[i].numpy(), w, rtol=1e-10)


def test_ridge_of_the_arms_is_the_one_hot_linear_ridge():
    rng = np.random.default_rng(1)
    k, n = 4, 25
    actions = rng.integers(0, k, n)
    r = rng.normal(0.0, 1.0, n)
    eye = np.eye(k)
    mean, width = ridge_linear(_moments(eye[actions], r, k), torch.as_tensor(eye), torch.tensor(k))
    counts = torch.as_tensor(np.bincount(actions, minlength=k).astype(float))
    sums = torch.as_tensor(np.bincount(actions, weights=r, minlength=k))
    arm_mean, arm_width = ridge_arms(counts, sums)
    np.testing.assert_allclose(arm_mean.numpy(), mean.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(arm_width.numpy(), width.numpy(), rtol=1e-10)


@pytest.mark.parametrize("gate, alpha", [(1.0, 1.0), (1.0, 2.0), (0.4, 0.5)])
def test_gated_logits_move_the_bayes_ucb_index_toward_linucb(gate, alpha):
    """Head at zero: logits = alpha_net (base + g (l - base)), base = (u - max u) / S the model-averaged
    Bayes-UCB index and l = (ridge mean - max ridge mean + a sigma ridge width) / S, all computed directly, with
    a = alpha / sigma: the gated index is LinUCB(alpha)'s."""
    rng = np.random.default_rng(7)
    d, d_max, num_arms, n, sigma = 3, 5, 4, 9, 0.6
    arms = rng.uniform(-1, 1, (num_arms, d)).astype(np.float32)
    actions = rng.integers(0, num_arms, n)
    rewards = rng.normal(0.2, 1.0, n).astype(np.float32)
    config = {**TINY, "ridge_gate": True, "gate_start": gate, "gate_width_start": alpha / sigma}  # LinUCB(alpha)
    model = LinearGeneralistTransformer(LinearGeneralistConfig(**config)).eval()
    logits = model(
        torch.as_tensor(arms)[None],
        torch.as_tensor(actions)[None],
        torch.as_tensor(rewards)[None],
        torch.tensor([[n]]),
        50,
        sigma,
        d,
    )[0, 0]
    x_hist, r = arms[actions].astype(np.float64), rewards.astype(np.float64)
    padded = np.pad(arms.astype(np.float64), ((0, 0), (0, d_max - d)))
    sig = torch.tensor(sigma, dtype=torch.float32).double()
    moments = _moments(np.pad(x_hist, ((0, 0), (0, d_max - d))), r, d_max)
    lin = linear_posterior(moments, torch.as_tensor(padded), torch.tensor(d), sig)
    counts = torch.as_tensor(np.bincount(actions, minlength=num_arms).astype(float))
    sums = torch.as_tensor(np.bincount(actions, weights=r, minlength=num_arms))
    arm = arm_posterior(counts, sums, torch.tensor(r @ r), torch.tensor(float(n)), sig)
    _, mean, sd = model_average([lin, arm], [torch.tensor(True), torch.tensor(True)])
    u = mean + bayes_ucb_quantile(torch.tensor(n)) * sd
    scale = sd.mean()
    base = (u - u.max()) / scale
    ridge_mean, ridge_width = _ridge_direct(x_hist, r, arms.astype(np.float64), d)
    ridge = torch.as_tensor(ridge_mean - ridge_mean.max() + alpha * ridge_width) / scale
    expected = model.posterior.log_alpha.exp().item() * (base + gate * (ridge - base))
    torch.testing.assert_close(logits - logits.max(), (expected - expected.max()).float(), rtol=1e-4, atol=1e-4)
    if gate == 1.0:  # fully open: LinUCB(alpha)'s choice
        assert int(logits.argmax()) == int(np.argmax(ridge_mean + alpha * ridge_width))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny second-version checkpoint with a learned width (d_max 5) and its record."""
    folder = tmp_path_factory.mktemp("lg2-width")
    train(_tiny_run(folder, steps=1, model={**TINY, "noise_estimate": True, "index_width": True}), echo=False)
    return folder / "checkpoints" / "step_0000000"


def test_a_base_widened_with_the_gate_plays_as_the_base(base):
    model, meta = load_checkpoint(base)
    with torch.no_grad():  # a trained-like base: every path of the network reaches the logits
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    wide, wide_meta = widened(model, meta, {"ridge_gate": True})
    assert wide_meta["model"]["ridge_gate"] and not meta["model"].get("ridge_gate")
    added = {f"posterior.gate.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")}
    assert set(wide.state_dict()) - set(model.state_dict()) == added
    g = torch.Generator().manual_seed(4)
    sets = torch.rand(3, 1, 6, 5, generator=g).expand(3, 12, 6, 5) * 2 - 1
    actions, rewards = torch.randint(0, 6, (3, 12), generator=g), torch.randn(3, 12, generator=g)
    args = (sets, actions, rewards, torch.arange(12).expand(3, 12), 30, torch.tensor([0.5, float("nan"), 2.0]), 4)
    torch.testing.assert_close(wide(*args), model(*args), rtol=0, atol=0)


def test_a_widening_that_drops_base_weights_is_refused(base):
    model, meta = load_checkpoint(base)
    with pytest.raises(ValueError, match="posterior.width"):
        widened(model, meta, {"index_width": False})


def test_dropping_the_learned_width_plays_as_the_base_with_that_width_at_zero(base):
    """``drop`` removes a module on purpose: without its width the model plays the base whose width outputs 0."""
    model, meta = load_checkpoint(base)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    narrow, narrow_meta = widened(model, meta, {"index_width": False}, drop=("posterior.width.",))
    assert not narrow_meta["model"]["index_width"] and narrow.posterior.width is None
    with torch.no_grad():
        model.posterior.width[-1].weight.zero_()
        model.posterior.width[-1].bias.zero_()
    g = torch.Generator().manual_seed(5)
    sets = torch.rand(2, 1, 5, 5, generator=g).expand(2, 10, 5, 5) * 2 - 1
    actions, rewards = torch.randint(0, 5, (2, 10), generator=g), torch.randn(2, 10, generator=g)
    args = (sets, actions, rewards, torch.arange(10).expand(2, 10), 30, torch.tensor([0.5, 2.0]), 4)
    torch.testing.assert_close(narrow(*args), model(*args), rtol=0, atol=0)
    with pytest.raises(ValueError, match="posterior.widths"):
        widened(model, meta, {"index_width": False}, drop=("posterior.widths.",))


def test_training_only_the_gate_leaves_the_base_network_as_it_was(base, tmp_path, monkeypatch):
    from icrl_gym.envs.linear_bandit import linear_bandit_spec
    from icrl_gym.training import finetune_linear
    from icrl_gym.training.finetune import finetune
    from tests.helpers import tiny_finetune_config

    monkeypatch.setattr(
        finetune_linear, "VALIDATION_CELLS", {"tiny": linear_bandit_spec(3, 4, 12, 0.5, prior="family")}
    )
    finetune_linear.uninformed_best.cache_clear()
    common = {"rollouts_per_instance": 2, "arms_choices": [4], "horizon_choices": [12], "val_runs": 4, "lr": 1e-2}
    widen = {"ridge_gate": True, "gate_start": 0.5}
    cfg = tiny_finetune_config(
        base, tmp_path / "ft", iterations=3, eval_every=3, widen=widen, trainable=["posterior.gate."], **common
    )
    _, meta = finetune(cfg, echo=False)
    start, _ = load_checkpoint(base)
    trained = load_checkpoint(tmp_path / "ft" / "checkpoints" / "step_0000003")[
        0
    ].state_dict()  # the last, not the best
    for name, value in start.state_dict().items():
        torch.testing.assert_close(trained[name], value, rtol=0, atol=0)
    assert not torch.equal(trained["posterior.gate.2.weight"], torch.zeros_like(trained["posterior.gate.2.weight"]))
    assert meta["model"]["ridge_gate"] and meta["model"]["gate_start"] == 0.5
    typo = tiny_finetune_config(base, tmp_path / "typo", widen=widen, trainable=["posterior.gates."], **common)
    with pytest.raises(ValueError, match="'posterior.gates.' names no parameter"):
        finetune(typo, echo=False)


def test_zero_iterations_export_the_widened_base_with_its_validation(base, tmp_path, monkeypatch):
    from icrl_gym.envs.linear_bandit import linear_bandit_spec
    from icrl_gym.training import finetune_linear
    from icrl_gym.training.finetune import finetune
    from tests.helpers import tiny_finetune_config

    cell = linear_bandit_spec(3, 4, 12, 0.5, prior="family")
    monkeypatch.setattr(finetune_linear, "VALIDATION_CELLS", {"tiny": cell})
    finetune_linear.uninformed_best.cache_clear()
    widen = {"ridge_gate": True, "gate_start": 0.5, "gate_width_start": 3.0}
    cfg = tiny_finetune_config(base, tmp_path / "ft", iterations=0, widen=widen, rollouts_per_instance=2, val_runs=4)
    model, meta = finetune(cfg, echo=False)
    start, start_meta = load_checkpoint(base)
    expected, _ = widened(start, start_meta, widen)
    for name, value in expected.state_dict().items():  # the gate's drawn hidden layer too: seed 0 both times
        torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=0)
    assert [h["iteration"] for h in meta["finetune"]["history"]] == [0]
    assert meta["finetune"]["config"]["widen"] == widen
