"""Acceptance of the shipped models on 2,000 fresh instances (slow: ``python -m pytest -m slow``).

Seeds 10**7 and above are never used in training (chunks use 10**6 * seed + c, validation
10**6 * seed + 900,000).  Tolerances are the issue's: the linear AD model within 1.2x LinUCB and
below TS and Emp; the Bernoulli models within 5% of their expert (or better); the tabular-MDP AD
model within 10% of soft UCB-VI and the DPT model within 10% of PSRL (1,000 instances).
"""

import numpy as np
import pytest

from agents.learned.transformer import TransformerAgent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import bernoulli_bandit_spec, linear_bandit_spec

RUNS, SEED = 2000, 10**7


def _regret(spec, agent):
    total = evaluate_regret(spec, agent, RUNS, seed=SEED, batch_size=1000).sum(axis=1)
    return total.mean()


@pytest.mark.slow
def test_linear_ad_linucb_within_1_2x_of_linucb():
    spec = linear_bandit_spec()
    tf = _regret(spec, TransformerAgent.pretrained("linear-bandit-ad-linucb", greedy=True, seed=0))
    assert tf <= 1.2 * _regret(spec, "linucb")
    paper_ts = {"name": "linear_ts", "prior_mean": 0.0, "prior_var": 1.0}  # the paper's N(0, I) prior
    assert tf < _regret(spec, paper_ts) and tf < _regret(spec, "emp")


@pytest.mark.slow
@pytest.mark.parametrize("name, expert", [("bernoulli-dpt-rb-ts-uniform", "bernoulli_ts"), ("bernoulli-ad-ucb", "ucb")])
def test_bernoulli_models_within_5_percent_of_their_expert(name, expert):
    spec = bernoulli_bandit_spec()
    tf = _regret(spec, TransformerAgent.pretrained(name, seed=0))
    assert tf <= 1.05 * _regret(spec, expert)


@pytest.mark.slow
def test_distribution_ratio_regret_grows_as_alpha_falls():
    """Among contexts that mix in uniform exploration (alpha = 0.5, 0.1, 0: R = 2, 10, astronomically
    large) the regret grows with the ratio.  alpha = 1 (pure TS, R = 1) is measured worse than the
    theory suggests (a copycat shortcut, see the README), so it is not part of this ordering."""
    spec = bernoulli_bandit_spec()
    regrets = [
        _regret(spec, TransformerAgent.pretrained(f"bernoulli-dpt-alpha{a}", seed=0)) for a in ("0.5", "0.1", "0")
    ]
    assert np.all(np.diff(regrets) > 0)


@pytest.mark.slow
def test_fine_tuned_model_beats_the_expert_it_imitated():
    """Online fine-tuning (issue: beyond imitation): the fine-tuned AD model's regret is below UCB's,
    paired over the same instances with a margin of 4 standard errors (measured: 6.91 vs 8.39)."""
    spec = bernoulli_bandit_spec()
    agent = TransformerAgent.pretrained("bernoulli-ad-ucb-finetuned", seed=0)
    tf = evaluate_regret(spec, agent, RUNS, seed=SEED, batch_size=1000).sum(axis=1)
    ucb = evaluate_regret(spec, "ucb", RUNS, seed=SEED, batch_size=1000).sum(axis=1)
    diff = ucb - tf
    assert diff.mean() > 4 * diff.std(ddof=1) / np.sqrt(diff.size)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, expert, greedy",
    [
        ("tabular-mdp-ad-soft-ucbvi", {"name": "ucbvi", "temperature": 0.1, "bonus_scale": 0.01}, False),
        ("tabular-mdp-dpt-psrl-uniform", {"name": "psrl"}, True),
    ],
)
def test_tabular_mdp_models_within_10_percent_of_their_expert(name, expert, greedy):
    """AD is played as it was trained (sampled, like its softmax expert); DPT greedily on P(a* | D)."""
    from agents import make_agent
    from icrl_gym.data.mdp_rollout import rollout_mdp
    from icrl_gym.envs import MDPSpec

    spec = MDPSpec()

    def regret(config):
        return rollout_mdp(spec, make_agent(config, seed=0), 1000, seed=SEED, batch_size=500).episode_regret.sum(1)

    tf = regret({"name": "mdp_transformer", "checkpoint": name, "greedy": greedy})
    assert tf.mean() <= 1.1 * regret(expert).mean()
    assert tf.mean() < 0.9 * regret({"name": "mdp_uniform"}).mean()


@pytest.mark.slow
def test_dark_room_dpt_improves_over_episodes_and_beats_psrl():
    """Measured on 2,000 instances: 251.9 +- 3.3 against DarkRoom-PSRL's 344.8; returns 15.2 -> 44.2 over K = 4."""
    from agents import make_agent
    from icrl_gym.data.mdp_rollout import rollout_mdp
    from icrl_gym.envs import MDPSpec

    name = "dark-room-dpt-psrl-uniform"
    agent = make_agent({"name": "mdp_transformer", "checkpoint": name}, seed=0)
    spec = MDPSpec.from_dict(agent.meta["env"])
    tf = rollout_mdp(spec, agent, 500, seed=SEED, batch_size=500)
    psrl = rollout_mdp(spec, make_agent("dark_room_psrl", seed=0), 500, seed=SEED, batch_size=500)
    assert tf.episode_regret.sum(1).mean() < 0.85 * psrl.episode_regret.sum(1).mean()
    returns = tf.episode_returns.mean(axis=0)
    assert returns[-1] > 2 * returns[0]


@pytest.mark.slow
def test_linear_generalist_below_matched_bayes_ucb_at_the_paper_setting():
    """The shipped linear generalist at d=5, A=10, T=200, sigma=1.5: <= 14.5 and <= 1.10x Bayes-UCB (matched)."""
    spec = linear_bandit_spec()
    gen = _regret(spec, TransformerAgent.pretrained("linear-generalist-v1"))
    assert gen <= 14.5 and gen <= 1.10 * _regret(spec, "linear_bayes_ucb")
