"""The shared collection pipeline: common random numbers, bit-for-bit datasets, label types."""

import hashlib

import numpy as np
import pytest

from icrl_gym.data.collect import collect
from icrl_gym.data.crn import crn_batches
from icrl_gym.data.labels import Labelling, LabelMode, SoftLabel, Target, upgrade_label_fields
from icrl_gym.data.mdp_rollout import optimal_values, rollout_mdp
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.mdp_core import MDPSpec

LINEAR = BanditSpec(dim=3, num_actions=4, horizon=12)
BERNOULLI = BanditSpec(dim=4, num_actions=4, horizon=10, arms="one_hot", reward="bernoulli", noise_std=0.0)
TABULAR = MDPSpec(num_states=3, num_actions=3, horizon=4, episodes=3)
ROOM = MDPSpec(kind="dark_room", num_states=9, num_actions=5, horizon=6, episodes=2, size=3)
TS_UNIFORM = {"name": "mixture", "components": [{"name": "bernoulli_ts"}, {"name": "uniform"}], "weights": [0.5, 0.5]}


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def _arrays(data) -> dict[str, np.ndarray]:
    if hasattr(data, "arrays"):
        return data.arrays()
    names = ("states", "actions", "rewards", "v_star", "labels", "label_probs")
    return {k: getattr(data, k) for k in names if getattr(data, k) is not None}


# SHA-256 prefixes of the arrays made by the separate bandit and MDP loops before the pipeline was
# shared (commit fd8ae21), by the calls below.  The one exception is marked.
REFERENCE = {
    "bandit_ad": {
        "action_sets": "9d454f3391b11c69",
        "actions": "2b40ee5a0665dd11",
        "rewards": "b8b63ad2d48b3060",
        "expected_rewards": "f0ac3a1e5bd39db6",
        "best_rewards": "76a17f84497f15d5",
        "w_star": "ab94d30ca56be6ef",
        "labels": "2b40ee5a0665dd11",
        "label_probs": "3aa1477a5cf8dee1",
        "label_values": "310779dc1b880bdc",
    },
    "bandit_expert": {  # the expert observes: the stream of observer 0
        "action_sets": "b12db53e9c47024f",
        "actions": "b10d4eb82f33d2e2",
        "rewards": "d55ca4e0b99ad59c",
        "expected_rewards": "a0d06ee4ce2829fb",
        "best_rewards": "3ab0500bdf27c5eb",
        "w_star": "24461c0f28c6c4d8",
        "labels": "7b41b2337ba0863f",
        "label_probs": "dc1e76aa7a053b09",
    },
    "mdp_ad": {
        "states": "db89ad0d3c3b2a5e",
        "actions": "5624a723055b1948",
        "rewards": "cb9c5bd79c20173c",
        "v_star": "eefc97fdd4fc73d6",
        "labels": "5624a723055b1948",
        "label_probs": "1e19af4ac1439b3f",
    },
    "mdp_dpt": {
        "states": "9eb5ac91fe8ab967",
        "actions": "3d10968811063f28",
        "rewards": "2daffb9989739b53",
        "v_star": "31459a9f16015d0d",
        "labels": "fa74eed39850b74c",
        # changed on purpose: PSRL's Monte-Carlo posterior drew from [seed, i, 2] and is now observer 0
        # of the shared convention (it was 11637ee10a5120a9); the trajectories and hard labels are unchanged
        "label_probs": "d8e7971d17104d55",
    },
    "room_dpt": {  # DarkRoom's posterior is exact: its generator does not reach the labels
        "states": "3a89e23d032d6d51",
        "actions": "99e862a5cabb9759",
        "rewards": "66e6c6358ac7d2b4",
        "v_star": "583a75a52e1180a0",
        "labels": "67e9a1f4553ef674",
        "label_probs": "3dfb3119d47f323e",
    },
}


def _collect(case: str):
    psrl_uniform = {"name": "mixture", "components": [{"name": "psrl"}, {"name": "mdp_uniform"}], "weights": [0.5, 0.5]}
    room_mix = {
        "name": "mixture",
        "components": [{"name": "dark_room_psrl"}, {"name": "mdp_uniform"}],
        "weights": [0.5, 0.5],
    }
    if case == "bandit_ad":
        labelling = Labelling(LabelMode.AD, store_probs=True, store_values=True)
        return collect(LINEAR, "linucb", 20, labelling, seed=3, batch_size=7)
    if case == "bandit_expert":
        expert = {"name": "bernoulli_ts", "num_policy_samples": 10}
        labelling = Labelling(LabelMode.EXPERT, expert=expert, store_probs=True)
        return collect(BERNOULLI, TS_UNIFORM, 20, labelling, seed=5, batch_size=8)
    if case == "mdp_ad":
        labelling = Labelling(LabelMode.AD, store_probs=True)
        return collect(TABULAR, {"name": "ucbvi", "temperature": 0.1}, 12, labelling, seed=4, batch_size=5)
    if case == "mdp_dpt":
        labelling = Labelling(LabelMode.DPT, posterior={"name": "psrl", "posterior_samples": 4}, store_probs=True)
        return collect(TABULAR, psrl_uniform, 12, labelling, seed=6, batch_size=5)
    labelling = Labelling(LabelMode.DPT, posterior={"name": "dark_room_psrl"}, store_probs=True)
    return collect(ROOM, room_mix, 10, labelling, seed=7, batch_size=4)


@pytest.mark.parametrize("case", sorted(REFERENCE))
def test_the_shared_pipeline_reproduces_the_datasets_of_the_separate_loops(case):
    arrays = _arrays(_collect(case))
    assert {k: _digest(v) for k, v in arrays.items()} == REFERENCE[case]


def test_every_algorithm_meets_the_same_instances_and_noise():
    a = collect(LINEAR, "linucb", 9, seed=11, batch_size=4)
    b = collect(LINEAR, "uniform", 9, seed=11, batch_size=4)
    np.testing.assert_array_equal(a.w_star, b.w_star)
    np.testing.assert_array_equal(a.action_sets, b.action_sets)
    same = a.actions == b.actions  # same arm, same instance, same step: the same noisy reward
    assert same.any()
    np.testing.assert_array_equal(a.rewards[same], b.rewards[same])
    assert not np.array_equal(a.w_star, collect(LINEAR, "linucb", 9, seed=12, batch_size=4).w_star)
    psrl, uniform = (rollout_mdp(TABULAR, name, 7, seed=2, batch_size=3) for name in ("psrl", "mdp_uniform"))
    np.testing.assert_array_equal(psrl.v_star, uniform.v_star)
    np.testing.assert_array_equal(psrl.v_star, optimal_values(TABULAR, 7, seed=2, batch_size=3))
    regret = evaluate_regret(LINEAR, "linucb", 9, seed=11, batch_size=4)
    np.testing.assert_array_equal(regret, a.regret)


def test_crn_batches_follow_the_documented_convention():
    batches = list(crn_batches(10, 4, seed=3))
    assert [(b.rows.start, b.rows.stop, b.size) for b in batches] == [(0, 4, 4), (4, 8, 4), (8, 10, 2)]
    second = batches[1]
    assert second.env_rng.random() == np.random.default_rng([3, 1]).random()
    assert second.agent_rng.random() == np.random.default_rng([3, 1, 1]).random()
    actor = np.random.default_rng([3, 1, 1])
    first_child, second_child = actor.spawn(1)[0], actor.spawn(1)[0]
    assert second.observer_rng(0).random() == first_child.random()
    assert second.observer_rng(1).random() == second_child.random()
    with pytest.raises(ValueError, match="batch_size >= 1"):
        next(crn_batches(3, 0))


def test_label_types_parse_and_name_the_allowed_values():
    assert LabelMode.parse("ad") is LabelMode.AD and LabelMode.AD == "ad" and str(LabelMode.APPROX_DPT) == "approx_dpt"
    assert Target.parse("probs") is Target.PROBS
    with pytest.raises(
        ValueError, match="unknown label mode 'bc'; choose one of 'none', 'ad', 'dpt', 'approx_dpt', 'expert'"
    ):
        LabelMode.parse("bc")
    with pytest.raises(ValueError, match="choose one of 'label', 'probs'"):
        Target.parse("logits")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"label": "expert"}, "needs an expert"),
        ({"label": "ad", "expert": "linucb"}, "only used with label='expert'"),
        ({"label": "dpt", "store_probs": True}, "label 'dpt' with a posterior"),
        ({"label": "approx_dpt", "store_probs": True}, "no distribution to store"),
        ({"label": "ad", "posterior": "psrl"}, "needs label 'dpt' and target 'probs'"),
        ({"label": "dpt", "store_values": True}, "index expert"),
        ({"label": "bc"}, "choose one of"),
    ],
)
def test_labelling_refuses_inconsistent_combinations(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Labelling(**kwargs)


def test_labelling_soft_labels_and_environment_limits():
    assert Labelling(LabelMode.AD, store_probs=True).soft_label is SoftLabel.POLICY
    assert Labelling(LabelMode.DPT, posterior="psrl", store_probs=True).soft_label is SoftLabel.POSTERIOR
    assert Labelling(LabelMode.AD).soft_label is None
    with pytest.raises(ValueError, match="MDP label mode must be"):
        collect(TABULAR, "psrl", 2, Labelling(LabelMode.APPROX_DPT))
    with pytest.raises(ValueError, match="index values"):
        collect(TABULAR, "psrl", 2, Labelling(LabelMode.AD, store_values=True))
    with pytest.raises(TypeError, match="bandit algorithms"):
        collect(LINEAR, "psrl", 2)


def test_old_records_name_the_mdp_posterior_expert_and_mean_the_same():
    mdp = {"env": TABULAR.to_dict(), "label": "dpt", "target": "probs", "expert": {"name": "psrl"}}
    assert upgrade_label_fields(mdp) == {**mdp, "expert": None, "posterior": {"name": "psrl"}}
    bandit = {"env": BERNOULLI.to_dict(), "label": "expert", "target": "probs", "expert": {"name": "bernoulli_ts"}}
    assert upgrade_label_fields(bandit) == {**bandit, "posterior": None}
    new = {**mdp, "expert": None, "posterior": {"name": "psrl"}}
    assert upgrade_label_fields(new) == new


def test_an_agent_that_is_neither_a_bandit_nor_an_mdp_algorithm_is_refused_by_name():
    """build_agent plays an algorithm object as it is, builds a spec, and refuses any other agent with a TypeError."""
    from agents import make_agent
    from icrl_gym.agent_base import Agent
    from icrl_gym.data.pipeline import build_agent

    linucb = make_agent("linucb")
    assert build_agent(linucb) is linucb
    assert type(build_agent({"name": "linucb"})) is type(linucb)
    with pytest.raises(TypeError, match="is not a bandit or MDP algorithm"):
        build_agent(Agent())
    with pytest.raises(TypeError, match="is not a bandit or MDP algorithm"):
        evaluate_regret(LINEAR, Agent(), 2)
