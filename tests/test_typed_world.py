"""The typed world: spec kinds are enumerations, agents read the environment's model typed, MDP kinds dispatch once."""

import json

import gymnasium as gym
import numpy as np
import pytest

import icrl_gym.envs  # noqa: F401  (registers the environments)
from benchmarks.harness.cli import parse_args
from icrl_gym.envs import (
    ActionSet,
    BanditArms,
    BanditPrior,
    BanditReward,
    BanditSpec,
    MDPKind,
    MDPSpec,
    dark_room_spec,
)
from icrl_gym.envs.dark_room import DarkRoomDynamics
from icrl_gym.envs.env_model import read_env_model
from icrl_gym.envs.mdp_core import DYNAMICS, DirichletDynamics


def test_words_become_members_and_records_keep_the_words():
    spec = BanditSpec(dim=3, num_actions=3, arms="one_hot", reward="bernoulli", prior="beta", action_set="fixed")
    assert spec.arms is BanditArms.ONE_HOT and spec.reward is BanditReward.BERNOULLI
    assert spec.prior is BanditPrior.BETA and spec.action_set is ActionSet.FIXED
    assert spec.reward == "bernoulli" and f"{spec.reward}" == "bernoulli" and repr(spec.reward) == "'bernoulli'"
    record = json.loads(json.dumps(spec.to_dict()))
    assert (record["arms"], record["reward"], record["prior"]) == ("one_hot", "bernoulli", "beta")
    assert BanditSpec.from_dict(record) == spec
    mdp = MDPSpec(kind="dark_room", num_states=9, num_actions=5, size=3)
    assert mdp.kind is MDPKind.DARK_ROOM and json.loads(json.dumps(mdp.to_dict()))["kind"] == "dark_room"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: BanditSpec(reward="poisson"), "reward must be one of ('gaussian', 'bernoulli'), got 'poisson'"),
        (lambda: BanditSpec(arms=3), "arms must be one of ('uniform', 'one_hot', 'gaussian', 'sphere'), got 3"),
        (lambda: MDPSpec(kind="maze"), "kind must be one of ('random', 'dark_room'), got 'maze'"),
    ],
)
def test_an_unknown_kind_names_the_field_and_the_allowed_words(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert message in str(err.value)


def test_read_env_model_gives_the_environments_spec_and_instance_rows():
    env = gym.make_vec(
        "ICRL-BernoulliBandit-v0",
        num_envs=4,
        vectorization_mode="vector_entry_point",
        num_arms=3,
        horizon=5,
        prior="beta_family",
    )
    _, info = env.reset(seed=0)
    model = read_env_model(info)
    assert model is not None and model.mdp is None and model.bandit is not None
    assert model.bandit.prior is BanditPrior.BETA_FAMILY and model.bandit.num_actions == 3
    np.testing.assert_array_equal(model.instance["prior_a"], info["model"]["instance"]["prior_a"])
    _, info = gym.make("ICRL-DarkRoom-v0", size=3, horizon=4, episodes=2).reset(seed=0)
    room = read_env_model(info)
    assert room is not None and room.bandit is None and room.mdp == dark_room_spec(3, 4, 2)
    assert read_env_model({"num_states": 3}) is None


def test_every_mdp_kind_has_its_dynamics_in_the_one_table():
    assert set(DYNAMICS) == set(MDPKind)
    assert isinstance(MDPKind.RANDOM.dynamics, DirichletDynamics)
    assert isinstance(MDPKind.DARK_ROOM.dynamics, DarkRoomDynamics)
    assert MDPSpec(kind="dark_room", num_states=9, num_actions=5, size=3).is_stationary
    assert not MDPSpec(stationary=False).is_stationary


def test_bench_lists_are_tuples_written_comma_separated(capsys):
    cfg = parse_args(["--experiments", "tabular-mdp,dark-room", "--grid-arms", "2,5", "--grid-horizons", ""])
    assert cfg.experiments == ("tabular-mdp", "dark-room") and cfg.grid_arms == (2, 5) and cfg.grid_horizons == ()
    assert [e.name for e in cfg.selected()] == ["tabular-mdp", "dark-room"]
    assert parse_args([]).experiments == ("default",)
    with pytest.raises(SystemExit):
        parse_args(["--grid-arms", "2,x"])
    assert "argument --grid-arms: 'x': not an integer" in capsys.readouterr().err
