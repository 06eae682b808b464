"""One contract for bandit and MDP algorithms, one forward contract for both models, one compatibility check."""

import numpy as np
import pytest
import torch

from agents import make_agent
from agents.learned.mdp_transformer import MDPTransformerAgent
from agents.learned.transformer import TransformerAgent
from icrl_gym.algorithm import Agent
from icrl_gym.checkpoint import CheckpointError, CheckpointKind, check_compatible, read_record, resolve_checkpoint
from icrl_gym.envs import BernoulliBanditEnv, LinearBanditEnv, MDPSpec, bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.envs.tabular_mdp import RandomMDPEnv
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig
from icrl_gym.models.policy import PolicyOutput
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig
from tests.helpers import random_weights

SMALL_MDP = dict(num_states=3, num_actions=2, horizon=3, episodes=2)


def play(env, agent: Agent, seed: int) -> tuple[list[int], list[np.ndarray], float]:
    """The README's loop, the same for every algorithm: reset(info), act(obs), update(a, r)."""
    obs, info = env.reset(seed=seed)
    agent.reset(info)
    actions, policies, total, done = [], [], 0.0, False
    while not done:
        policies.append(agent.policy(obs))
        a = agent.act(obs)
        obs, r, terminated, truncated, _ = env.step(a)
        agent.update(a, r)
        actions.append(a)
        total += r
        done = terminated or truncated
    return actions, policies, total


def _bandit_model() -> BanditTransformer:
    cfg = TransformerConfig(n_layer=2, n_head=2, n_embd=16, dim=3, num_actions=3, horizon=8)
    return random_weights(BanditTransformer(cfg))


def _mdp_model() -> MDPTransformer:
    return random_weights(MDPTransformer(MDPTransformerConfig(n_layer=2, n_head=2, n_embd=16, **SMALL_MDP)))


def _seeded(agent_cls, model):
    return agent_cls.from_model(model, seed=1)


@pytest.mark.parametrize(
    ("make_env", "make", "steps"),
    [
        (lambda: BernoulliBanditEnv(num_arms=3, horizon=8), lambda: make_agent("bernoulli_ts", seed=1), 8),
        (lambda: BernoulliBanditEnv(num_arms=3, horizon=8), lambda: _seeded(TransformerAgent, _bandit_model()), 8),
        (lambda: RandomMDPEnv(**SMALL_MDP), lambda: make_agent("psrl", seed=1), 6),
        (lambda: RandomMDPEnv(**SMALL_MDP), lambda: _seeded(MDPTransformerAgent, _mdp_model()), 6),
    ],
    ids=["bernoulli_ts", "transformer", "psrl", "mdp_transformer"],
)
def test_one_loop_drives_bandit_and_mdp_agents(make_env, make, steps):
    agent = make()
    assert isinstance(agent, Agent)
    actions, policies, total = play(make_env(), agent, seed=3)
    assert len(actions) == steps and all(isinstance(a, int) and 0 <= a < agent.num_actions for a in actions)
    assert all(p.shape == (agent.num_actions,) and np.isclose(p.sum(), 1.0) for p in policies)
    again, again_policies, again_total = play(make_env(), make(), seed=3)  # same seeds: the same run
    assert again == actions and again_total == total
    np.testing.assert_array_equal(np.stack(again_policies), np.stack(policies))
    assert agent.config()["name"] == agent.name


def test_reset_rejects_unknown_fields_and_update_needs_an_observation():
    bandit, mdp = make_agent("ucb"), make_agent("mdp_uniform")
    with pytest.raises(TypeError, match="num_states"):
        bandit.reset(batch_size=1, dim=2, num_actions=2, num_states=3)
    bandit.reset(batch_size=1, dim=2, num_actions=2)
    with pytest.raises(RuntimeError, match="call act"):
        bandit.update(0, 1.0)
    obs, info = RandomMDPEnv(**SMALL_MDP).reset(seed=0)
    mdp.reset(info)
    with pytest.raises(RuntimeError, match="call act"):
        mdp.update(0, 1.0)
    with pytest.raises(ValueError, match=r"action indices in \[0, 2\)"):
        mdp.update(5, 1.0, obs=obs)


def test_both_models_return_a_policy_output():
    bandit, mdp = _bandit_model(), _mdp_model()
    B, T = 2, 6
    sets = torch.rand(B, T, 3, 3)
    actions, rewards = torch.randint(0, 3, (B, T)), torch.rand(B, T)
    states, mdp_actions = torch.randint(0, 3, (B, T)), torch.randint(0, 2, (B, T))
    with torch.no_grad():
        out_b, out_m = bandit(sets, actions, rewards), mdp(states, mdp_actions, rewards)
    assert isinstance(out_b, PolicyOutput) and isinstance(out_m, PolicyOutput)
    assert out_b.logits.shape == out_b.values.shape == (B, T, 3)
    assert out_m.logits.shape == (B, T, 2) and out_m.values is None
    logits, values = out_b  # still unpacks as (logits, values)
    assert logits is out_b.logits and values is out_b.values
    step_b = bandit.step(bandit.new_cache(B, bandit.env_info()), sets[:, 0], None, None)
    step_m = mdp.step(mdp.new_cache(B, mdp.env_info()), states[:, 0], None, None)
    assert isinstance(step_b, PolicyOutput) and step_b.values is not None and step_m.values is None
    torch.testing.assert_close(step_b.logits, out_b.logits[:, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step_m.logits, out_m.logits[:, 0], atol=1e-5, rtol=1e-5)


def test_agents_cached_rollout_equals_full_forward():
    """Both agents, through the one shared rollout, play exactly the policies of a forward pass over their run."""
    for model, env, agent_cls in (
        (_bandit_model(), LinearBanditEnv(dim=3, num_actions=3, horizon=8), TransformerAgent),
        (_mdp_model(), RandomMDPEnv(**SMALL_MDP), MDPTransformerAgent),
    ):
        agent = agent_cls.from_model(model, seed=2)
        record: dict[str, list] = {"obs": [], "a": [], "r": []}
        obs, info = env.reset(seed=5)
        agent.reset(info)
        policies, done = [], False
        while not done:
            policies.append(agent.policy(obs))
            a = agent.act(obs)
            record["obs"].append(obs)
            obs, r, terminated, truncated, _ = env.step(a)
            agent.update(a, r)
            record["a"].append(a)
            record["r"].append(r)
            done = terminated or truncated
        actions = torch.tensor([record["a"]])
        rewards = torch.tensor([record["r"]], dtype=torch.float32)
        if agent_cls is TransformerAgent:
            first = torch.tensor(np.stack(record["obs"]), dtype=torch.float32).reshape(1, -1, 3, 3)
        else:
            first = torch.tensor([[int(np.argmax(o[: SMALL_MDP["num_states"]])) for o in record["obs"]]])
        with torch.no_grad():
            logits = model(first, actions, rewards).logits[0]
        np.testing.assert_allclose(np.stack(policies), torch.softmax(logits, -1).double().numpy(), atol=1e-5)


# ---------------------------------------------------------------------- the one compatibility check
def test_bernoulli_checkpoint_fails_at_reset_on_a_linear_bandit_with_the_same_sizes():
    agent = TransformerAgent.pretrained("bernoulli-dpt-ts-uniform")
    _, info = LinearBanditEnv(dim=5, num_actions=5).reset(seed=0)
    with pytest.raises(CheckpointError, match="arms='one_hot' in the checkpoint, arms='uniform' in the environment"):
        agent.reset(info)
    with pytest.raises(CheckpointError, match="reward='bernoulli' in the checkpoint, reward='gaussian'"):
        agent.reset(info)
    _, info = BernoulliBanditEnv(num_arms=5).reset(seed=0)
    agent.reset(info)  # and plays the environment it was trained for


def test_bandit_checkpoint_fails_at_reset_on_an_mdp():
    agent = TransformerAgent.pretrained("bernoulli-dpt-ts-uniform")
    _, info = RandomMDPEnv(num_states=5, num_actions=5).reset(seed=0)
    with pytest.raises(
        CheckpointError, match="environment='bandit' in the checkpoint.*'tabular MDP' in the environment"
    ):
        agent.reset(info)
    mdp = make_agent({"name": "mdp_transformer", "checkpoint": "tabular-mdp-dpt-psrl-uniform"})
    _, info = BernoulliBanditEnv(num_arms=3).reset(seed=0)
    with pytest.raises(CheckpointError, match="environment='tabular MDP' in the checkpoint"):
        mdp.reset(info)


def test_every_learned_agent_checks_at_every_reset():
    for spec, good in (
        ({"name": "transformer", "checkpoint": "linear-bandit-ad-linucb"}, LinearBanditEnv()),
        ({"name": "meta_rl", "checkpoint": "bernoulli-ppo-statistics"}, BernoulliBanditEnv()),
        ({"name": "mdp_transformer", "checkpoint": "tabular-mdp-ad-soft-ucbvi"}, RandomMDPEnv()),
    ):
        agent = make_agent(spec)
        agent.reset(good.reset(seed=0)[1])
        bad = RandomMDPEnv(num_states=4) if spec["name"] == "mdp_transformer" else LinearBanditEnv(num_actions=7)
        field = "num_states" if spec["name"] == "mdp_transformer" else "num_actions"
        with pytest.raises(CheckpointError, match=f"{field}=.* in the checkpoint, {field}=.* in the environment"):
            agent.reset(bad.reset(seed=0)[1])
        agent.reset(good.reset(seed=1)[1])  # a later good reset works again


def test_wrong_loader_names_the_right_one():
    with pytest.raises(CheckpointError, match="meta_rl_policy, not a bandit_transformer.*make_agent\\('meta_rl'"):
        TransformerAgent("bernoulli-ppo-statistics")
    with pytest.raises(CheckpointError, match="make_agent\\('mdp_transformer'"):
        TransformerAgent("tabular-mdp-dpt-psrl-uniform")
    with pytest.raises(CheckpointError, match="make_agent\\('transformer'"):
        MDPTransformerAgent("bernoulli-ad-ucb")


def test_check_compatible_names_every_field_with_both_values():
    record = read_record(resolve_checkpoint("linear-bandit-ad-linucb"))
    assert record.kind is CheckpointKind.BANDIT_TRANSFORMER
    check_compatible(record, {"model": linear_bandit_spec().to_dict()})
    check_compatible(record, {"model": linear_bandit_spec(horizon=50).to_dict()})  # shorter runs are fine
    with pytest.raises(CheckpointError) as err:
        check_compatible(record, {"model": linear_bandit_spec(dim=4, num_actions=8, horizon=300).to_dict()})
    message = str(err.value)
    for text in ("dim=5 in the checkpoint, dim=4", "num_actions=10 in the checkpoint, num_actions=8", "horizon<=200"):
        assert text in message
    check_compatible(record, {"dim": 5, "num_actions": 10})  # a reset by keywords: only the sizes it gives
    mdp = read_record(resolve_checkpoint("tabular-mdp-dpt-psrl-uniform"))
    check_compatible(mdp, {"model": MDPSpec(episodes=5).to_dict()})
    for change, field in (
        ({"horizon": 12}, "horizon"),
        ({"episodes": 40}, "episodes"),
        ({"kind": "dark_room"}, "kind"),
    ):
        with pytest.raises(CheckpointError, match=field):
            check_compatible(mdp, {"model": {**MDPSpec().to_dict(), **change}})
    bernoulli = read_record(resolve_checkpoint("bernoulli-ad-ucb"))
    with pytest.raises(CheckpointError, match="dim=5 in the checkpoint, dim=3"):
        check_compatible(bernoulli, {"model": bernoulli_bandit_spec(num_arms=3).to_dict()})
