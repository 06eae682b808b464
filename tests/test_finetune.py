"""Online policy-gradient fine-tuning of a pretrained bandit transformer."""

import itertools

import numpy as np
import pytest
import torch

from icrl_gym.checkpoint import save_checkpoint
from icrl_gym.envs import bernoulli_bandit_spec
from icrl_gym.training.finetune import FinetuneConfig, finetune
from icrl_gym.training.finetune_bandit import advantages, bandit_logits
from icrl_gym.training.finetune_core import policy_gradient_loss
from icrl_gym.training.pretrain import export, pretrain
from icrl_gym.training.state import RunState
from tests.helpers import (
    TINY_DECODER,
    TINY_MDP_GENERALIST,
    tiny_finetune_config,
    tiny_mdp_generalist,
    tiny_pretrain_config,
)


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
    loss, _ = policy_gradient_loss(model, None, runs, advantage, 0.0, torch.device("cpu"), bandit_logits)
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
    from icrl_gym.training.finetune_bandit import rollout

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
    loss, _ = policy_gradient_loss(model, None, runs, advantages(runs)[0], 0.0, torch.device("cpu"), bandit_logits)
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


def test_a_run_saved_before_a_field_was_added_resumes_with_the_fields_default(tmp_path, tiny_model, monkeypatch):
    validated = dict(runs_per_iteration=8, val_runs=20, iterations=2, eval_every=1)
    cfg = tiny_finetune_config(tiny_model, tmp_path / "old", name="tiny-ft", **validated)
    added = ("env", "rollouts_per_instance", "temperature")  # fields of the MDP path, absent from older runs
    to_dict = FinetuneConfig.to_dict
    with monkeypatch.context() as m:  # the run as the trainer saved it before those fields existed
        m.setattr(FinetuneConfig, "to_dict", lambda self: {k: v for k, v in to_dict(self).items() if k not in added})
        before, _ = finetune(cfg, echo=False)
    assert not set(added) & set(RunState(tmp_path / "old").load().config)
    again, _ = finetune(cfg, echo=False)  # the same command resumes the finished run: nothing changes
    for (k, v), w in zip(before.state_dict().items(), again.state_dict().values(), strict=True):
        torch.testing.assert_close(v, w, msg=k)
    with pytest.raises(ValueError, match="another configuration"):  # its other fields are still checked
        finetune(FinetuneConfig(**{**cfg.to_dict(), "lr": 1e-3}), echo=False)


# --- the MDP generalist ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_mdp_model(tmp_path_factory):
    from icrl_gym.kinds import CheckpointKind
    from icrl_gym.training.mdp_generalist import MDPGeneralistTrainConfig

    tmp = tmp_path_factory.mktemp("mdp-base")
    cfg = MDPGeneralistTrainConfig(
        out_dir=str(tmp / "run"), model=TINY_MDP_GENERALIST, max_states=6, dark_room_fraction=0.0
    )
    return save_checkpoint(
        tmp / "mdpg", tiny_mdp_generalist(), cfg.checkpoint_fields(), kind=CheckpointKind.MDP_GENERALIST
    )


def test_the_leave_one_out_baseline_of_an_instance_is_the_mean_of_its_other_runs():
    from icrl_gym.training.finetune_core import leave_one_out_advantages

    gaps = np.random.default_rng(0).random((6, 4))  # 3 instances x M = 2 runs, T = 4
    advantage, stats = leave_one_out_advantages(gaps, 2)
    for b in range(6):
        other = b + 1 if b % 2 == 0 else b - 1
        for t in range(4):
            assert advantage[b, t] == pytest.approx(gaps[b, t:].sum() - gaps[other, t:].sum())
    assert stats["regret"] == pytest.approx(gaps.sum() / 6)


def test_mdp_policy_gradient_is_unbiased_against_exact_enumeration():
    """E[grad loss] = grad E[regret] / T on a 2-state, 2-action MDP (H = 3, K = 1) at tau = 2.

    E[regret] = V*_1(s_1) - E[sum_h R(s_h, a_h)], with the expectation summed over every history
    (a_1, r_1, s_2, a_2, r_2, s_3, a_3) and the policy computed from counts written out by hand: no
    gap, no baseline, no rollout code.  (The first step is uniform whatever the weights: with no
    counts the actions are interchangeable, so the test needs H = 3 for a regret-to-go to matter.)
    """
    from icrl_gym.envs.mdp_core import MDPSpec
    from icrl_gym.models.mdp_generalist import CountStats
    from icrl_gym.training.finetune_mdp import MDPGeneralistFinetune, mdp_rollout

    model, tau, H = tiny_mdp_generalist(), 2.0, 3
    spec = MDPSpec(num_states=2, num_actions=2, horizon=H, episodes=1)
    # action 0 leads to state 0 (where the actions are almost the same), action 1 to state 1 (far apart):
    # the step-2 action sets the size of the step-3 mistake, which only the regret-to-go credits it with
    R = np.array([[0.5, 0.45], [1.0, 0.0]])  # R(s, a)
    P = np.array([[[0.9, 0.1], [0.1, 0.9]], [[0.9, 0.1], [0.1, 0.9]]])  # P(s' | s, a)
    v = np.zeros(2)  # V*_{h+1}, backward from V*_{H+1} = 0
    for _ in range(H):
        v = (R + P @ v).max(axis=1)

    def expected_return(h, s, n_sas, n_sa, reward_sum):
        """E[sum_{l >= h} R(s_l, a_l) | the history so far] (the counts), under softmax(logits / tau)."""
        counts = (torch.tensor(x, dtype=torch.float32)[None, None] for x in (n_sas, n_sa, reward_sum))
        stats = CountStats(*counts, starts=torch.tensor([[1.0, 0.0]]))  # the episode started in state 0
        pi = torch.softmax(model(stats, torch.tensor([s]), torch.tensor([h]), torch.tensor([0]), H, 1)[0] / tau, -1)
        total = torch.zeros(())
        for a in range(2):
            future = torch.zeros(())
            for r, s_next in itertools.product(range(2), range(2)) if h < H - 1 else ():
                more = [x.copy() for x in (n_sas, n_sa, reward_sum)]
                more[0][s, a, s_next] += 1
                more[1][s, a] += 1
                more[2][s, a] += r
                p = (R[s, a] if r else 1 - R[s, a]) * P[s, a, s_next]
                future = future + p * expected_return(h + 1, s_next, *more)
            total = total + pi[a] * (R[s, a] + future)
        return total

    exact = v[0] - expected_return(0, 0, np.zeros((2, 2, 2)), np.zeros((2, 2)), np.zeros((2, 2)))
    cfg = FinetuneConfig(env=spec.to_dict(), rollouts_per_instance=4, temperature=tau, device="cpu")
    task = MDPGeneralistFinetune(spec, cfg)
    instance = {"P": P[None, None], "R": R[None, None], "mu": np.array([[1.0, 0.0]])}
    runs = mdp_rollout(model, spec, (10_000, 4), tau, np.random.default_rng(0), torch.device("cpu"), instance)
    assert runs["actions"].shape == (40_000, H) and runs["n_sas"].shape == (40_000, H, 1, 2, 2, 2)
    _assert_estimate_is_the_exact_gradient(model, task, runs, exact, spec.total_steps, regret_tol=0.015)


def _assert_estimate_is_the_exact_gradient(model, task, runs, exact, steps, regret_tol):
    """The batch's mean regret is E[regret], and grad loss ~ grad E[regret] / T (cosine > 0.97, norm within 10%)."""
    params = list(model.parameters())
    exact_grad = torch.autograd.grad(exact / steps, params, allow_unused=True)
    advantage, stats = task.advantages(runs)
    assert stats["regret"] == pytest.approx(float(exact.detach()), abs=regret_tol)  # the mean gap sum: the regret
    loss, _ = policy_gradient_loss(model, None, runs, advantage, 0.0, torch.device("cpu"), task.logits)
    estimate = torch.autograd.grad(loss, params, allow_unused=True)

    def flat(grads):
        return torch.cat(
            [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params, strict=True)]
        )

    e, g = flat(exact_grad), flat(estimate)
    cosine = float(e @ g / (e.norm() * g.norm()))
    assert cosine > 0.97 and float(g.norm() / e.norm()) == pytest.approx(1.0, abs=0.1)


class _Crash(BaseException):
    """Stands for the process dying (nothing in the trainer catches it)."""


def test_mdp_finetuning_resumes_exactly_after_a_crash(tmp_path, tiny_mdp_model, monkeypatch):
    from icrl_gym.checkpoint import load_checkpoint
    from icrl_gym.envs.mdp_core import MDPSpec
    from icrl_gym.models.mdp_generalist import MDPGeneralist
    from icrl_gym.training.finetune_mdp import MDPGeneralistFinetune
    from icrl_gym.training.state import RunState

    env = MDPSpec(num_states=3, num_actions=2, horizon=2, episodes=2).to_dict()
    fields = dict(env=env, runs_per_iteration=3, rollouts_per_instance=2, temperature=1.5, iterations=4, lr=3e-2)

    def config(folder):
        return tiny_finetune_config(tiny_mdp_model, tmp_path / folder, name="tiny-mdp-ft", **fields)

    model, meta = finetune(config("whole"), echo=False)
    assert [h["iteration"] for h in meta["finetune"]["history"]] == [0, 2, 4]
    assert isinstance(model, MDPGeneralist) and meta["kind"] == "mdp_generalist"
    assert meta["finetune"]["config"]["env"] == env and meta["trained_range"]  # the base's record, and the run's
    whole = RunState(tmp_path / "whole").load()
    base, _ = load_checkpoint(tiny_mdp_model)
    assert any(not torch.equal(w, whole.weights[n]) for n, w in base.state_dict().items())  # it did train

    real, calls = MDPGeneralistFinetune.rollout, []

    def dying(self, *args):
        calls.append(1)
        if len(calls) == 4:  # iteration 3: after the state at iteration 2 was committed
            raise _Crash
        return real(self, *args)

    with monkeypatch.context() as patch:
        patch.setattr(MDPGeneralistFinetune, "rollout", dying)
        with pytest.raises(_Crash):
            finetune(config("crashed"), echo=False)
    assert RunState(tmp_path / "crashed").load().step == 2
    finetune(config("crashed"), echo=False)  # the same command resumes
    resumed = RunState(tmp_path / "crashed").load()
    assert resumed.step == whole.step == 4 and resumed.weights.keys() == whole.weights.keys()
    for name, weight in whole.weights.items():
        assert torch.equal(weight, resumed.weights[name]), name
    moments = [[v for s in state.optimizer["state"].values() for v in s.values()] for state in (whole, resumed)]
    assert len(moments[0]) == len(moments[1]) > 0
    for x, y in zip(*moments, strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))


def test_fields_the_base_does_not_take_are_refused(tmp_path, tiny_model, tiny_mdp_model):
    with pytest.raises(
        ValueError, match=r"FinetuneConfig.env=\{'num_states': 0\} is neither an MDP nor a bandit prior"
    ):
        tiny_finetune_config(tiny_mdp_model, tmp_path / "bad-env", env={"num_states": 0})
    assert not (tmp_path / "bad-env").exists()
    with pytest.raises(ValueError, match="FinetuneConfig.env must give the MDP prior"):
        finetune(tiny_finetune_config(tiny_mdp_model, tmp_path / "no-env"), echo=False)
    with pytest.raises(ValueError, match="FinetuneConfig rollouts_per_instance=2, temperature=0.5 is not allowed"):
        finetune(
            tiny_finetune_config(tiny_model, tmp_path / "bandit", rollouts_per_instance=2, temperature=0.5), echo=False
        )


def _tiny_generalist():
    from icrl_gym.models.generalist import GeneralistConfig, GeneralistTransformer

    torch.manual_seed(3)
    config = GeneralistConfig(d_model=16, n_heads=2, n_layers=1, mlp_ratio=2, same_arm_bias=(0.0, 8.0))
    return GeneralistTransformer(config).eval()


def test_generalist_policy_gradient_is_unbiased_against_exact_enumeration():
    """E[grad loss] = grad E[regret] / T for the Bernoulli generalist on one 2-armed instance (T = 3, tau = 2).

    E[regret] is summed over every history (a_1, r_1, a_2, r_2, a_3) with the policy from one
    forward pass per history prefix: no gap-to-go, no baseline, no rollout code.
    """
    from icrl_gym.training.finetune_generalist import GeneralistFinetune, generalist_rollout

    model, tau, T = _tiny_generalist(), 2.0, 3
    means = np.array([0.8, 0.3])
    spec = bernoulli_bandit_spec(num_arms=2, horizon=T)

    def expected_regret(actions, rewards):
        t = len(actions)
        if t == T:
            return torch.zeros(())
        padded_a = torch.tensor([actions + [0] * (T - t)])
        padded_r = torch.tensor([rewards + [0.0] * (T - t)])
        pi = torch.softmax(model(padded_a, padded_r, torch.tensor([[t]]), T, 2)[0, 0] / tau, -1)
        total = torch.zeros(())
        for a in range(2):
            future = sum(
                (means[a] if r else 1 - means[a]) * expected_regret(actions + [a], rewards + [float(r)]) for r in (0, 1)
            )
            total = total + pi[a] * (means.max() - means[a] + future)
        return total

    cfg = FinetuneConfig(env=spec.to_dict(), rollouts_per_instance=4, temperature=tau, device="cpu")
    task = GeneralistFinetune(spec, cfg)
    runs = generalist_rollout(model, spec, (10_000, 4), tau, np.random.default_rng(0), torch.device("cpu"), means[None])
    _assert_estimate_is_the_exact_gradient(model, task, runs, expected_regret([], []), T, regret_tol=0.01)


def test_generalist_task_scores_the_policy_it_sampled():
    """The forward pass's logits at every step equal the cached steps' logits the rollout sampled from."""
    from icrl_gym.models.policy import EnvInfo
    from icrl_gym.training.finetune_generalist import generalist_logits, generalist_rollout

    model = _tiny_generalist()
    spec = bernoulli_bandit_spec(num_arms=4, horizon=12, prior="beta_family")
    runs = generalist_rollout(model, spec, (3, 2), 1.0, np.random.default_rng(1), torch.device("cpu"))
    assert (runs["means"] <= runs["best"]).all() and (runs["means"][0::2] >= 0).all()
    with torch.no_grad():
        forward = generalist_logits(model, spec, runs, torch.device("cpu"))
        cache = model.new_cache(6, EnvInfo(num_actions=4, horizon=12))
        prev = (None, None)
        for t in range(12):
            step = model.step(cache, None, *prev).logits
            assert torch.allclose(step, forward[:, t], atol=1e-5), t
            prev = (torch.as_tensor(runs["actions"][:, t]), torch.as_tensor(runs["rewards"][:, t]))


def test_the_bernoulli_generalist_needs_a_bernoulli_prior(tmp_path):
    from icrl_gym.envs import linear_bandit_spec

    linear = linear_bandit_spec(dim=2, num_actions=3, horizon=5).to_dict()
    cfg = tiny_finetune_config("bernoulli-generalist", tmp_path / "linear", env=linear)
    with pytest.raises(ValueError, match="Bernoulli bandit prior .* for the Bernoulli generalist"):
        finetune(cfg, echo=False)
