"""The learned-policy contract: one entry point, one kind table, one rollout, and the agents' shared resolvers."""

import numpy as np
import pytest
import torch

import agents
from agents.learned.rollout import PolicyRollout
from agents.learned.transformer import TransformerAgent
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.checkpoint import PRETRAINED_DIR, CheckpointKind, load_checkpoint, pretrained_names, read_record
from icrl_gym.envs import bernoulli_bandit_spec, linear_bandit_spec
from icrl_gym.envs.bandit_env import BanditVectorEnv
from icrl_gym.kinds import KINDS
from icrl_gym.models.policy import EnvInfo, InContextPolicy, PolicyOutput
from icrl_gym.registry import agent_class
from tests.helpers import shipped_model_env


@pytest.mark.parametrize("name", pretrained_names())
def test_the_one_entry_point_plays_an_episode_of_every_shipped_model(name):
    agent = agents.pretrained(name, seed=0)
    env = shipped_model_env(name)
    obs, info = env.reset(seed=1)
    agent.reset(info)
    steps, done = 0, False
    while not done:
        a = agent.act(obs)
        assert a.shape == (2,) and ((a >= 0) & (a < env.single_action_space.n)).all()
        obs, r, terminated, truncated, info = env.step(a)
        agent.update(a, r)
        steps += 1
        done = bool(terminated.all() or truncated.all())
    assert steps == info.get("horizon", steps)
    assert agent.config()["checkpoint"] == name


def test_every_kind_has_one_row_and_builds_its_model():
    assert set(KINDS) == set(CheckpointKind)
    for row in KINDS.values():  # every kind's agent is registered (by agents/) under the table's name
        assert (
            agent_class(row.agent).__module__.startswith("agents.learned.") and agent_class(row.agent).name == row.agent
        )
    for name in pretrained_names():
        record = read_record(PRETRAINED_DIR / name)
        model, meta = load_checkpoint(PRETRAINED_DIR / name)
        row = KINDS[record.kind]
        assert meta["weights_sha256"] == record.meta["weights_sha256"]
        assert agent_class(row.agent) is type(agents.pretrained(name))
        if record.kind is not CheckpointKind.META_RL_POLICY:
            classes = [cls.__name__ for cls in type(model).__mro__]  # the row's class, or a version of it
            assert isinstance(model, InContextPolicy) and row.model.rpartition(":")[2] in classes


def test_transformer_agent_pretrained_loads_every_transformer_mdp_included():
    mdp = TransformerAgent.pretrained("tabular-mdp-dpt-psrl-uniform")
    assert type(mdp).__name__ == "MDPTransformerAgent"
    assert isinstance(TransformerAgent.pretrained("bernoulli-generalist"), PolicyRollout)
    with pytest.raises(ValueError, match="not an in-context model"):
        TransformerAgent.pretrained("bernoulli-ppo-statistics")
    with pytest.raises(ValueError, match="no shipped model 'nope' and no checkpoint"):
        agents.pretrained("nope")
    with pytest.raises(ValueError, match=r"no shipped model 'linear-generalst' \(did you mean 'linear-generalist'\?\)"):
        agents.pretrained("linear-generalst")
    with pytest.raises(ValueError, match=r"takes no parameter 'safety_nett' \(did you mean 'safety_net'\?\)"):
        agents.pretrained("linear-generalist", safety_nett=True)
    with pytest.raises(ValueError, match=r"'noise_sd' \(did you mean 'noise_std'\?\); it takes greedy, device, seed"):
        agents.pretrained("linear-generalist", noise_sd=1.0)


@pytest.mark.parametrize("name", ["bernoulli-generalist", "linear-generalist-v1", "bernoulli-dpt-ts-uniform"])
def test_every_learned_agent_checks_the_environment(name):
    """check_compatible runs for the generalists too: a Bernoulli model refuses a linear bandit and back."""
    agent = agents.pretrained(name)
    linear = name == "linear-generalist-v1"
    other = bernoulli_bandit_spec(5, 20) if linear else linear_bandit_spec(5, 5, 20, 1.0)
    _, info = BanditVectorEnv(2, other).reset(seed=0)
    with pytest.raises(ValueError, match="reward"):
        agent.reset(info)


def test_every_model_step_returns_a_policy_output():
    for name in ("bernoulli-generalist", "linear-generalist-v1", "bernoulli-dpt-ts-uniform"):
        model, _ = load_checkpoint(PRETRAINED_DIR / name)
        info = EnvInfo(num_actions=5, horizon=200, dim=5, noise_std=1.0)
        cache = model.new_cache(3, info)
        out = model.step(cache, torch.eye(5).expand(3, 5, 5), None, None)
        assert isinstance(out, PolicyOutput) and out.logits.shape == (3, 5)
        out = model.step(cache, torch.eye(5).expand(3, 5, 5), torch.tensor([0, 1, 2]), torch.tensor([1.0, 0.0, 1.0]))
        assert out.logits.shape == (3, 5)


def test_env_info_refuses_what_no_model_can_play():
    with pytest.raises(ValueError, match="EnvInfo.horizon must be an integer >= 1, got 0"):
        EnvInfo(num_actions=3, horizon=0)
    with pytest.raises(ValueError, match="noise_std must be a finite number > 0, got inf"):
        EnvInfo(num_actions=3, horizon=5, noise_std=float("inf"))
    model, _ = load_checkpoint(PRETRAINED_DIR / "bernoulli-dpt-ts-uniform")
    with pytest.raises(ValueError, match=r"num_actions=4 \(the model has num_actions=5\)"):
        model.new_cache(1, EnvInfo(num_actions=4, horizon=200, dim=5))


# ---------------------------------------------------------------------------- the one horizon resolver


def test_resolve_horizon_precedence_and_checks():
    assert resolve_horizon({"horizon": 50, "model": {"horizon": 80}}, 10) == 50
    assert resolve_horizon({"model": {"horizon": 80}}, 10) == 80
    assert resolve_horizon({}, 10) == 10
    with pytest.raises(ValueError, match="needs the horizon T"):
        resolve_horizon({})
    with pytest.raises(TypeError, match="horizon .* integer"):
        resolve_horizon({"horizon": 2.7})
    with pytest.raises(ValueError, match="horizon"):
        resolve_horizon({"horizon": 0})


def _play(agent, spec, runs=40, seed=3):
    env = BanditVectorEnv(runs, spec)
    obs, info = env.reset(seed=seed)
    agent.reset(info)
    actions = []
    for _ in range(spec.horizon):
        a = agent.act(obs)
        obs, r, *_ = env.step(a)
        agent.update(a, r)
        actions.append(a)
    return np.stack(actions, 1)


def test_gittins_reads_the_horizon_from_the_environment():
    told = _play(agents.Gittins(horizon=50), bernoulli_bandit_spec(5, 50))
    default = _play(agents.Gittins(), bernoulli_bandit_spec(5, 50))
    other = _play(agents.Gittins(horizon=200), bernoulli_bandit_spec(5, 50))  # the environment's T wins
    np.testing.assert_array_equal(default, told)
    np.testing.assert_array_equal(other, told)
    long = _play(agents.Gittins(), bernoulli_bandit_spec(3, 300), runs=4)  # beyond the old default of 200
    assert long.shape == (4, 300)
    with pytest.raises(ValueError, match="needs the horizon T"):
        agents.Gittins().reset(num_arms=3)
    assert agents.make_agent(agents.Gittins(horizon=50).config()).config() == agents.Gittins(horizon=50).config()


# ---------------------------------------------------------------------------- refusals of the learned agents


def test_learned_agents_refuse_non_finite_scores_in_act_and_policy():
    agent = agents.pretrained("linear-generalist-v1")
    spec = linear_bandit_spec(dim=3, num_actions=4, horizon=10, noise_std=1e-30)
    env = BanditVectorEnv(2, spec)
    obs, info = env.reset(seed=0)
    agent.reset(info)
    a = agent.act(obs)  # an empty history: finite scores
    obs, r, *_ = env.step(a)
    agent.update(a, r)
    for call in (agent.act, agent.policy):
        with pytest.raises(ValueError, match="non-finite scores for run 0"):
            call(obs)


@pytest.mark.parametrize("name", ["bernoulli-generalist", "linear-generalist-v1"])
def test_learned_agents_refuse_a_step_beyond_the_horizon_and_a_fractional_one(name):
    agent = agents.pretrained(name)
    linear = name == "linear-generalist-v1"
    spec = linear_bandit_spec(3, 4, 3, 0.5) if linear else bernoulli_bandit_spec(4, 3)
    env = BanditVectorEnv(2, spec)
    obs, info = env.reset(seed=0)
    agent.reset(info)
    for _ in range(3):
        a = agent.act(obs)
        obs, r, *_ = env.step(a)
        agent.update(a, r)
    with pytest.raises(ValueError, match="reset for T=3 steps; .* cannot act at step 4"):
        agent.act(obs)
    with pytest.raises(TypeError, match="horizon .* integer, got 2.7"):
        agent.reset(info, horizon=2.7)


def test_a_refused_update_can_be_retried():
    agent = agents.pretrained("bernoulli-generalist")
    reference = agents.pretrained("bernoulli-generalist")
    for a in (agent, reference):
        a.reset(num_arms=3, horizon=5)
    arm = agent.act()
    with pytest.raises(ValueError, match="rewards must be 0 or 1"):
        agent.update(arm, 0.5)
    agent.update(arm, 1.0)
    reference.update(reference.act(), 1.0)
    np.testing.assert_array_equal(agent.policy(), reference.policy())
