import numpy as np
import pytest
import torch

from agents import make_agent
from agents.learned.transformer import TransformerAgent
from icrl_gym.checkpoint import (
    CheckpointError,
    CheckpointKind,
    load_checkpoint,
    pretrained_names,
    read_checkpoint,
    save_checkpoint,
)
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig
from icrl_gym.training.pretrain import PretrainConfig, learning_rate, pretrain
from icrl_gym.utils.device import resolve_device
from tests.helpers import tiny_pretrain_config

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 16, "layout": "compact"}


LEARNING_RUN = dict(
    trajectories_per_chunk=256, steps=60, batch_size=32, warmup_steps=5, val_trajectories=64, eval_every=20
)
"""Long enough for the tiny model to learn UCB's actions."""


def tiny_config(tmp_path, **overrides):
    env = bernoulli_bandit_spec(horizon=12).to_dict()
    return tiny_pretrain_config(
        tmp_path / "run", **{"env": env, "model": TINY, **LEARNING_RUN, "eval_every": 20, **overrides}
    )


def test_loss_decreases_on_a_tiny_dataset(tmp_path):
    model, meta = pretrain(tiny_config(tmp_path), echo=False)
    history = meta["training"]["history"]
    # UCB's deterministic choices are learnable: the NLL falls well below its start and log(5)
    assert history[-1]["nll"] < 0.85 * history[0]["nll"] and history[-1]["nll"] < 0.6 * np.log(5)
    assert history[-1]["accuracy"] > history[0]["accuracy"] + 0.03
    assert meta["training"]["step"] == 60


def test_value_and_probability_targets_train(tmp_path):
    cfg = tiny_config(
        tmp_path,
        env=linear_bandit_spec(horizon=10, num_actions=4, dim=3).to_dict(),
        context={"name": "soft_linucb", "temperature": 0.2},
        target="probs",
        value_loss_weight=1.0,
        steps=20,
    )
    _, meta = pretrain(cfg, echo=False)
    assert "value_mse" in meta["training"]["val"]


class Interrupt(Exception):
    pass


def test_resume_continues_exactly(tmp_path):
    full, _ = pretrain(tiny_config(tmp_path / "a", steps=40), echo=False)

    def stop_at_20(model, state):
        if state["step"] == 20:
            raise Interrupt

    with pytest.raises(Interrupt):  # the run is killed right after its step-20 checkpoint
        pretrain(tiny_config(tmp_path / "b", steps=40), echo=False, callback=stop_at_20)
    resumed, meta = pretrain(tiny_config(tmp_path / "b", steps=40), echo=False)
    assert meta["training"]["step"] == 40
    assert "resumed from step 20" in (tmp_path / "b" / "run" / "train.log").read_text()
    for (name, p), q in zip(full.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_resume_refuses_another_configuration(tmp_path):
    pretrain(tiny_config(tmp_path, steps=20), echo=False)
    with pytest.raises(ValueError, match="another configuration"):
        pretrain(tiny_config(tmp_path, steps=20, lr=5e-2), echo=False)


def test_learning_rate_schedule():
    cfg = PretrainConfig(steps=1000, warmup_steps=100, lr=1e-3, min_lr_ratio=0.1)
    assert learning_rate(cfg, 0) == pytest.approx(1e-5)
    assert learning_rate(cfg, 99) == pytest.approx(1e-3)
    assert learning_rate(cfg, 1000) == pytest.approx(1e-4)
    assert resolve_device("cpu").type == "cpu"


def _tiny_model(**overrides):
    torch.manual_seed(0)
    return BanditTransformer(TransformerConfig(**{**TINY, "dim": 5, "num_actions": 5, "horizon": 12, **overrides}))


def test_checkpoint_roundtrip_and_agent(tmp_path):
    model = _tiny_model()
    save_checkpoint(tmp_path / "m", model, {"env": bernoulli_bandit_spec(horizon=12).to_dict(), "note": "x"})
    loaded, meta = load_checkpoint(tmp_path / "m.json")
    for p, q in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q)
    assert meta["note"] == "x" and meta["model"]["n_layer"] == 2
    agent = make_agent({"name": "transformer", "checkpoint": str(tmp_path / "m"), "greedy": True})
    regret = evaluate_regret(bernoulli_bandit_spec(horizon=12), agent, 8, seed=0)
    assert regret.shape == (8, 12)


def test_dotted_names_keep_their_dots(tmp_path):
    model = _tiny_model()
    save_checkpoint(tmp_path / "model-alpha0.5", model, {"env": bernoulli_bandit_spec(horizon=12).to_dict()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model-alpha0.5.json", "model-alpha0.5.safetensors"]
    TransformerAgent(tmp_path / "model-alpha0.5")


def test_agent_cache_matches_full_forward(tmp_path):
    """The online agent's policies equal a full forward pass over the trajectory it produced.

    Three episodes: the second (same batch size) reuses the first one's cache buffers, the third
    (another batch size) gets a new cache; each matches the forward pass on its own trajectory.
    """
    model = _tiny_model()
    spec = bernoulli_bandit_spec(horizon=12)
    save_checkpoint(tmp_path / "m", model, {"env": spec.to_dict()})
    agent = TransformerAgent(tmp_path / "m", seed=0)
    rng = np.random.default_rng(0)
    caches = []
    for B in (3, 3, 2):
        agent.reset(batch_size=B, dim=5, num_actions=5)
        caches.append(agent._cache)
        sets = np.broadcast_to(np.eye(5), (B, 5, 5))
        online, acts, rews = [], [], []
        for _ in range(12):
            online.append(agent.policy_batch(sets))
            a = agent.act_batch(sets)
            r = rng.integers(0, 2, size=B).astype(float)
            agent.update_batch(sets, a, r)
            acts.append(a)
            rews.append(r)
        with torch.no_grad():
            logits, _ = model(
                torch.tensor(np.broadcast_to(sets[:, None], (B, 12, 5, 5)).copy(), dtype=torch.float32),
                torch.tensor(np.stack(acts, 1)),
                torch.tensor(np.stack(rews, 1), dtype=torch.float32),
            )
        np.testing.assert_allclose(np.stack(online, 1), torch.softmax(logits, -1).numpy(), atol=1e-5)
    assert caches[1] is caches[0] and caches[2] is not caches[0] and caches[2].batch_size == 2


def test_corrupt_and_mismatched_checkpoints(tmp_path):
    model = _tiny_model()
    save_checkpoint(tmp_path / "m", model, {"env": bernoulli_bandit_spec(horizon=12).to_dict()})
    raw = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "m.safetensors").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        read_checkpoint(tmp_path / "m")
    save_checkpoint(tmp_path / "m", model, {"env": bernoulli_bandit_spec(horizon=12).to_dict()})
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        read_checkpoint(tmp_path / "m")
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "nothing")
    save_checkpoint(tmp_path / "m", model, {"env": bernoulli_bandit_spec(horizon=12).to_dict()})
    with pytest.raises(CheckpointError, match="horizon=12"):
        load_checkpoint(tmp_path / "m", expect=bernoulli_bandit_spec(horizon=200))
    agent = TransformerAgent(tmp_path / "m")
    with pytest.raises(CheckpointError, match="dim=5 in the checkpoint, dim=4 in the environment"):
        agent.reset(batch_size=1, dim=4, num_actions=4)
    agent.reset(batch_size=1, dim=5, num_actions=5)
    for _ in range(12):
        agent.update(agent.act(np.eye(5)), 1.0)
    with pytest.raises(ValueError, match="reset for T=12 steps; .* cannot act at step 13"):
        agent.act(np.eye(5))
    with pytest.raises(ValueError, match="no shipped model 'does-not-exist'"):
        TransformerAgent.pretrained("does-not-exist")


@pytest.mark.parametrize("name", pretrained_names(CheckpointKind.BANDIT_TRANSFORMER))
def test_shipped_checkpoint_beats_uniform(name):
    agent = TransformerAgent.pretrained(name, seed=0)
    spec = agent.meta["env"]
    from icrl_gym.envs import BanditSpec

    spec = BanditSpec.from_dict(spec)
    model_regret = evaluate_regret(spec, agent, 100, seed=12345).sum(1).mean()
    uniform_regret = evaluate_regret(spec, "uniform", 100, seed=12345).sum(1).mean()
    assert model_regret < 0.4 * uniform_regret


def test_command_line_takes_several_overrides_and_bare_strings(tmp_path):
    import json

    from icrl_gym.training.pretrain import main

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_config(tmp_path).to_dict()))
    out = tmp_path / "cli-run"
    main([str(config), "--set", "steps=3", "eval_every=3", f"out_dir={out}", "--export", str(tmp_path / "m")])
    _, meta = read_checkpoint(tmp_path / "m")
    assert meta["training"]["step"] == 3 and meta["pretrain"]["out_dir"] == str(out)  # both overrides applied
    with pytest.raises(SystemExit):
        main([str(config), "--set", "no_such_field=1"])


def test_mdp_soft_dpt_config_checks():
    from icrl_gym.envs import MDPSpec

    env = MDPSpec(num_states=3, num_actions=2, horizon=3, episodes=2).to_dict()
    PretrainConfig(env=env, label="dpt", target="probs", expert={"name": "psrl"})  # the Rao-Blackwellised target
    with pytest.raises(ValueError, match="posterior"):
        PretrainConfig(env=env, label="dpt", target="probs")  # no posterior to take P(a* | D) from
    with pytest.raises(ValueError, match="needs label 'dpt' and target 'probs'"):
        PretrainConfig(env=env, label="dpt", target="label", expert={"name": "psrl"})  # the expert would be ignored
