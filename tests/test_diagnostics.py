import numpy as np
import pytest

from agents import LinUCB, SoftLinUCB, Uniform
from icrl_gym.diagnostics import imitation_error
from icrl_gym.envs import linear_bandit_spec


def test_identical_algorithms_have_zero_error():
    spec = linear_bandit_spec(horizon=15)
    out = imitation_error(SoftLinUCB(temperature=0.5), SoftLinUCB(temperature=0.5), spec, 20, seed=0)
    assert out["kl_per_step"] == pytest.approx(0.0, abs=1e-9)
    assert out["hellinger2_per_step"] == pytest.approx(0.0, abs=1e-9)
    assert out["agreement_per_step"] == 1.0


def test_uniform_against_a_deterministic_expert_is_closed_form():
    # expert one-hot, model uniform over A=10: CE = KL = log 10, H^2 = 1 - sqrt(1/10)
    spec = linear_bandit_spec(horizon=10)
    out = imitation_error(Uniform(), LinUCB(), spec, 16, seed=1)
    assert out["ce_per_step"] == pytest.approx(np.log(10))
    assert out["kl_per_step"] == pytest.approx(np.log(10))
    assert out["hellinger2_per_step"] == pytest.approx(1 - np.sqrt(0.1))
