"""The split member of a Bernoulli family, checked against enumeration over the high sets and quadrature."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from scipy import integrate
from scipy.special import betaln

from agents import make_agent
from agents.bandit.bernoulli_bayes_optimal import FamilyPredictive
from agents.bandit.family_gittins import BETA_FAMILY, FamilyGittinsIndex, family_moments
from agents.bandit.split_member import SplitMember, half_uniform_arm


def _half_integral(high: bool, power_s: int, f: int) -> float:
    low, top = (0.5, 1.0) if high else (0.0, 0.5)
    return 2.0 * integrate.quad(lambda p: p**power_s * (1 - p) ** f, low, top, epsabs=0, epsrel=1e-12)[0]


def _enumerated(s: np.ndarray, f: np.ndarray) -> tuple[float, np.ndarray]:
    """P(x) and P(arm k high | x) of one run by summing over every high set of each allowed size, by quadrature."""
    k_arms = len(s)
    h = np.array([_half_integral(True, int(s[k]), int(f[k])) for k in range(k_arms)])
    lo = np.array([_half_integral(False, int(s[k]), int(f[k])) for k in range(k_arms)])
    sizes = sorted({k_arms // 2, (k_arms + 1) // 2})
    total, high = 0.0, np.zeros(k_arms)
    for m in sizes:
        for chosen in itertools.combinations(range(k_arms), m):
            mask = np.isin(np.arange(k_arms), chosen)
            p = np.prod(np.where(mask, h, lo)) / comb(k_arms, m) / len(sizes)
            total += p
            high += p * mask
    return total, high / total


@pytest.mark.parametrize("k_arms", [2, 3, 4, 5])
def test_the_high_probabilities_and_evidence_are_the_enumeration_over_high_sets(k_arms):
    rng = np.random.default_rng(k_arms)
    s, f = rng.integers(0, 6, (4, k_arms)), rng.integers(0, 6, (4, k_arms))
    log_evidence, pi = SplitMember(12).high_probability(s, f)
    for row in range(4):
        total, high = _enumerated(s[row], f[row])
        assert log_evidence[row] == pytest.approx(np.log(total), rel=1e-8)
        np.testing.assert_allclose(pi[row], high, rtol=1e-8, atol=1e-12)


def test_the_constraint_couples_the_arms():
    """Two of four arms high: after two arms with many successes the untried ones are read as low, after two
    with many failures as high; with no pulls every arm is high with probability 1/2."""
    member = SplitMember(30)
    _, pi = member.high_probability(
        np.array([[20, 20, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]), np.array([[0, 0, 0, 0], [20, 20, 0, 0], [0, 0, 0, 0]])
    )
    assert pi[0, 2] < 1e-3 and pi[1, 2] > 1 - 1e-3
    np.testing.assert_allclose(pi[2], 0.5)


@pytest.mark.parametrize(("s", "f"), [(0, 0), (3, 1), (0, 7), (9, 2)])
def test_the_moments_are_the_truncated_posteriors_by_quadrature(s, f):
    member, pi = SplitMember(12), 0.3
    mean, second = member.moments(np.array([[s]]), np.array([[f]]), np.array([[pi]]))
    want = [
        sum(
            w * _half_integral(high, s + j, f) / _half_integral(high, s, f) for w, high in ((pi, True), (1 - pi, False))
        )
        for j in (1, 2)
    ]
    assert mean[0, 0] == pytest.approx(want[0], rel=1e-9) and second[0, 0] == pytest.approx(want[1], rel=1e-9)


def test_an_underflowing_half_reads_its_boundary():
    """After 2,000 failures U[1/2, 1]'s posterior sits at 1/2: a finite log-evidence and the predictive 1/2."""
    log_ev, pred = half_uniform_arm(True, 2000)
    assert np.isfinite(log_ev).all() and pred[0, 2000] == 0.5 and np.isfinite(pred).all()


@pytest.mark.parametrize("split_power", [None, 1.0, 0.3])
def test_the_family_moments_with_the_split_member_are_the_joint_mixture(split_power):
    """sum over the 16 Beta members (weight (1 - w) / 16, tempered evidence) and the split member (weight w, its
    evidence at its own power when given)."""
    rng, power, weight = np.random.default_rng(0), 0.5, 0.2
    s, f = rng.integers(0, 5, (3, 4)), rng.integers(0, 5, (3, 4))
    model, member = FamilyPredictive(np.array(BETA_FAMILY), np.ones(16), 12), SplitMember(12)
    mean, var = family_moments(model, s, f, power, member, weight, split_power)
    member_power = power if split_power is None else split_power
    log_split, pi = member.high_probability(s, f)
    split_mean, split_second = member.moments(s, f, pi)
    for row in range(3):
        log_w = [
            np.log((1 - weight) / 16)
            + power * sum(betaln(a + s[row, k], b + f[row, k]) - betaln(a, b) for k in range(4))
            for a, b in BETA_FAMILY
        ] + [np.log(weight) + member_power * log_split[row]]
        w = np.exp(np.array(log_w) - max(log_w))
        w /= w.sum()
        for k in range(4):
            mu = np.array([(a + s[row, k]) / (a + b + s[row, k] + f[row, k]) for a, b in BETA_FAMILY])
            n = np.array([a + b + s[row, k] + f[row, k] for a, b in BETA_FAMILY])
            m1 = (w[:16] * mu).sum() + w[16] * split_mean[row, k]
            m2 = (w[:16] * (mu * (1 - mu) / (n + 1) + mu**2)).sum() + w[16] * split_second[row, k]
            assert mean[row, k] == pytest.approx(m1, rel=1e-6) and var[row, k] == pytest.approx(m2 - m1**2, rel=1e-5)
    plain = family_moments(model, s, f, power)
    np.testing.assert_allclose(family_moments(model, s, f, power, member, 1e-300)[0], plain[0], rtol=1e-12)


def test_the_agent_takes_a_split_weight_and_refuses_a_bad_one():
    agent = make_agent({"name": "family_gittins", "split_weight": 0.2, "horizon": 20})
    assert agent.config()["split_weight"] == 0.2 and agent.config()["split_power"] is None
    assert make_agent({"name": "family_gittins", "split_weight": 0.2, "split_power": 1.0}).config()["split_power"] == 1
    with pytest.raises(ValueError, match="split_power must be"):
        make_agent({"name": "family_gittins", "split_weight": 0.2, "split_power": 0.0})
    with pytest.raises(ValueError, match="split_weight must be in \\[0, 1\\)"):
        make_agent({"name": "family_gittins", "split_weight": 1.0})
    with pytest.raises(ValueError, match="split_weight"):
        FamilyGittinsIndex(10, split_weight=-0.1)
