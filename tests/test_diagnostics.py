import numpy as np
import pytest

from agents import LinUCB, SoftLinUCB, Uniform
from icrl_gym.data.diagnostics import imitation_error
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


def _fixed(probs):
    from icrl_gym.algorithm import BanditAgent

    class Fixed(BanditAgent):
        name = "fixed"

        def _policy(self, action_sets):
            return np.broadcast_to(np.asarray(probs), (self.batch_size, len(probs))).copy()

        def config(self):
            return {"name": self.name, "probs": list(probs)}

    return Fixed(seed=0)


def test_distribution_ratio_of_two_categorical_policies_has_a_closed_form():
    from icrl_gym.data.diagnostics import distribution_ratio
    from icrl_gym.envs import bernoulli_bandit_spec

    p1 = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    p2 = np.full(5, 0.2)
    T = 5
    exact_log = T * np.log((p1**2 / p2).sum())  # E_{p1}[prod p1/p2] = (sum p1^2/p2)^T
    out = distribution_ratio(_fixed(p1), _fixed(p2), bernoulli_bandit_spec(horizon=T), 20000, seed=0)
    assert abs(out["log_ratio"] - exact_log) < 3 * out["log_ratio_se"] + 0.01
    assert out["warning"] is None
    same = distribution_ratio(_fixed(p1), _fixed(p1), bernoulli_bandit_spec(horizon=T), 100, seed=0)
    assert same["log_ratio"] == pytest.approx(0.0, abs=1e-12)


def test_mixture_ratio_is_bounded_by_one_over_alpha_and_warns_when_heavy():
    from agents import make_agent, ts_uniform_mixture
    from icrl_gym.data.diagnostics import distribution_ratio
    from icrl_gym.envs import bernoulli_bandit_spec

    spec = bernoulli_bandit_spec(horizon=30)
    ts = {"name": "bernoulli_ts", "num_policy_samples": 500}
    out = distribution_ratio(make_agent(ts, seed=0), make_agent(ts_uniform_mixture(0.5, ts), seed=0), spec, 100)
    # the trajectory-level mixture puts weight 1/2 on TS itself, so each weight is <= 1/alpha = 2
    assert out["log_ratio"] <= np.log(2) + 1e-9 and out["log_ratio"] > 0
    heavy = distribution_ratio(make_agent(ts, seed=0), make_agent("uniform"), spec, 100)
    assert heavy["log_ratio"] > 5 and heavy["warning"] is not None
