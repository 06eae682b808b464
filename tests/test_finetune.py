"""Online policy-gradient fine-tuning of a pretrained bandit transformer."""

import numpy as np
import pytest
import torch

from icrl_gym.checkpoint import save_checkpoint
from icrl_gym.envs import bernoulli_bandit_spec
from icrl_gym.training.finetune import FinetuneConfig, advantages, finetune, policy_gradient_loss
from icrl_gym.training.pretrain import export, pretrain
from tests.helpers import TINY_DECODER, tiny_finetune_config, tiny_pretrain_config


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("base")
    env = bernoulli_bandit_spec(num_arms=2, horizon=10).to_dict()
    model = {**TINY_DECODER, "n_head": 2, "n_embd": 16}
    sizes = dict(trajectories_per_chunk=64, batch_size=32, val_trajectories=32)
    # two steps at the start of the default warm-up (200 steps to lr 1e-3): weights close to their initial ones
    schedule = dict(steps=2, lr=1e-3, warmup_steps=200)
    cfg = tiny_pretrain_config(tmp / "run", env=env, context={"name": "uniform"}, model=model, **sizes, **schedule)
    model, meta = pretrain(cfg, echo=False)
    return export(model, meta, tmp / "tiny")


def test_loss_uses_regret_to_go_and_a_leave_one_out_baseline(tiny_model):
    from icrl_gym.checkpoint import load_checkpoint

    model, _ = load_checkpoint(tiny_model)
    rng = np.random.default_rng(0)
    B, T = 4, 10
    runs = {
        "action_sets": np.broadcast_to(np.eye(2, dtype=np.float32), (B, T, 2, 2)).copy(),
        "actions": rng.integers(0, 2, size=(B, T)),
        "rewards": rng.integers(0, 2, size=(B, T)).astype(np.float32),
        "means": rng.random((B, T)),
        "best": np.ones((B, T)),
    }
    advantage, stats = advantages(runs)
    loss, _ = policy_gradient_loss(model, None, runs, advantage, 0.0, torch.device("cpu"))
    # the same quantity with explicit loops
    logits, _ = model(*(torch.as_tensor(runs[k]) for k in ("action_sets", "actions", "rewards")))
    logp = torch.log_softmax(logits, -1).detach().numpy()
    to_go = np.array([[(1 - runs["means"][b, t:]).sum() for t in range(T)] for b in range(B)])
    total = 0.0
    for b in range(B):
        for t in range(T):
            others = [to_go[c, t] for c in range(B) if c != b]
            total += (to_go[b, t] - np.mean(others)) * logp[b, t, runs["actions"][b, t]]
    assert loss.item() == pytest.approx(total / (B * T), rel=1e-5)
    assert stats["regret"] == pytest.approx((1 - runs["means"]).sum(axis=1).mean())


def test_policy_gradient_is_unbiased_against_exact_enumeration(tiny_model):
    """E[grad loss] = grad E[regret] / T on a 2-step, 2-arm bandit, with E[regret] summed over all 8 histories."""
    import itertools

    from icrl_gym.checkpoint import load_checkpoint
    from icrl_gym.training.finetune import rollout

    model, _ = load_checkpoint(tiny_model)
    spec = bernoulli_bandit_spec(num_arms=2, horizon=2)
    mu = np.array([0.2, 0.9])
    eye = torch.eye(2).expand(1, 2, 2, 2)
    exact = torch.zeros(())
    for a1, r1, a2 in itertools.product(range(2), range(2), range(2)):
        actions, rewards = torch.tensor([[a1, a2]]), torch.tensor([[float(r1), 0.0]])
        logp = torch.log_softmax(model(eye, actions, rewards)[0], -1)[0]
        p_r1 = mu[a1] if r1 else 1 - mu[a1]
        prob = logp[0, a1].exp() * p_r1 * logp[1, a2].exp()
        exact = exact + prob * ((mu.max() - mu[a1]) + (mu.max() - mu[a2]))
    params = [p for n, p in model.named_parameters() if "value" not in n]  # the value head plays no part
    exact_grad = torch.autograd.grad(exact / 2, params)
    runs = rollout(model, spec, 40_000, np.random.default_rng(0), torch.device("cpu"), instance={"w_star": mu})
    assert runs["actions"].shape == (40_000, 2)
    loss, _ = policy_gradient_loss(model, None, runs, advantages(runs)[0], 0.0, torch.device("cpu"))
    estimate = torch.autograd.grad(loss, params)
    flat = lambda grads: torch.cat([g.reshape(-1) for g in grads])  # noqa: E731
    e, g = flat(exact_grad), flat(estimate)
    cosine = float(e @ g / (e.norm() * g.norm()))
    assert cosine > 0.97 and float(g.norm() / e.norm()) == pytest.approx(1.0, abs=0.1)


def test_finetuning_keeps_the_best_validated_model_and_resumes(tmp_path, tiny_model):
    validated = dict(runs_per_iteration=32, lr=3e-3, val_runs=200, eval_every=3)
    cfg = tiny_finetune_config(tiny_model, tmp_path / "ft", name="tiny-ft", **validated)
    model, meta = finetune(cfg, echo=False)
    history = meta["finetune"]["history"]
    assert [h["iteration"] for h in history] == [0, 3, 6]
    best = min(history, key=lambda h: h["val_regret"])
    assert meta["finetune"]["best"] == {"iteration": best["iteration"], "val_regret": best["val_regret"]}
    assert meta["name"] == "tiny-ft" and meta["finetune"]["base"] == str(tiny_model)
    # resuming a finished run changes nothing; another configuration in the same folder is refused
    again, _ = finetune(cfg, echo=False)
    for (k, v), w in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        torch.testing.assert_close(v, w, msg=k)
    with pytest.raises(ValueError, match="another configuration"):
        finetune(FinetuneConfig(**{**cfg.to_dict(), "lr": 1e-3}), echo=False)
    save_checkpoint(tmp_path / "exported", model, meta)
