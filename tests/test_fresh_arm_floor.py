"""The fresh-arm floor as a wrapper: the learned agent's own floor replayed, the U[0, 1] index left alone."""

from __future__ import annotations

import numpy as np
import pytest

from agents import FreshArmFloor, make_agent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec


def test_the_wrapped_plain_model_replays_the_models_own_floor_run_for_run() -> None:
    """On the reversed set at K = 10 (low arms first, where the floor acts), the network alone inside the wrapper
    plays the family model's default play (its record asks for the floor) to the last reward."""
    spec = bernoulli_bandit_spec(10, horizon=120, prior="skewed_reversed")
    model = {"name": "generalist", "checkpoint": "bernoulli-generalist-family"}
    own = evaluate_regret(spec, model, 40, seed=11)
    wrapped = evaluate_regret(spec, {"name": "fresh_arm_floor", "inner": {**model, "fresh_arm_floor": False}}, 40, 11)
    plain = evaluate_regret(spec, {**model, "fresh_arm_floor": False}, 40, seed=11)
    np.testing.assert_array_equal(wrapped, own)
    assert not np.array_equal(plain, own)  # the floor acted on these runs


def test_the_index_told_uniform_is_its_own_floor() -> None:
    """The floor plays the untried arm only where the Gittins index told U[0, 1] does: wrapped, that index is itself."""
    spec = bernoulli_bandit_spec(6, horizon=80)
    np.testing.assert_array_equal(
        evaluate_regret(spec, {"name": "fresh_arm_floor", "inner": {"name": "gittins"}}, 30, seed=2),
        evaluate_regret(spec, {"name": "gittins"}, 30, seed=2),
    )


def test_the_policy_moves_every_tried_arms_mass_to_the_fresh_arm_where_the_floor_acts() -> None:
    """A uniform inner policy after one failure of arm 0 at K = 3: the index told U[0, 1] wants arm 1 (untried), so
    the wrapped policy puts arm 0's third on it; after a success of arm 0 it wants arm 0 and the policy is uniform."""
    agent = FreshArmFloor({"name": "uniform"})
    sets = np.eye(3)[None]
    for reward, expected in ((0.0, [0.0, 2 / 3, 1 / 3]), (1.0, [1 / 3, 1 / 3, 1 / 3])):
        agent.reset({"horizon": 50}, num_arms=3, batch_size=1)
        agent.update_batch(sets, np.array([0]), np.array([reward]))
        np.testing.assert_allclose(agent.policy_batch(sets)[0], expected)


def test_a_linear_bandit_is_refused() -> None:
    agent = make_agent({"name": "fresh_arm_floor", "inner": {"name": "linucb"}})
    with pytest.raises(ValueError, match="K-armed"):
        evaluate_regret(linear_bandit_spec(3, 4, 10, 0.5), agent, 2, seed=0)
