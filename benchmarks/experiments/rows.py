"""Agent specifications of the benchmark's rows, shared by the experiments (``agents.make_agent`` dictionaries).

Bayesian algorithms read the noise level and prior from the environment they run on, so a row only
names them; learned rows are ``{"name": ..., "checkpoint": ...}`` with a shipped model name.
"""

from __future__ import annotations

from typing import Any

from agents.bandit.linear_posterior import PAPER_TS_PRIOR
from icrl_gym.algorithm import Agent, BanditAgent

PAPER_TS = {"name": "linear_ts", **PAPER_TS_PRIOR}
"""The paper's linear TS: its N(0, I_d) prior on w* ~ Unif([0,1]^d) (misspecified); the noise level is the env's.
``{"name": "linear_ts"}`` alone is TS with the prior matched to the environment's."""


BERNOULLI_BASELINES = {"UCB": {"name": "ucb"}, "TS": {"name": "bernoulli_ts"}, "Emp": {"name": "emp"}}
"""The paper's comparison algorithms on Bernoulli bandits: UCB, Thompson sampling, the empirical mean."""


LINEAR_BASELINES: dict[str, dict[str, Any]] = {"LinUCB": {"name": "linucb"}, "TS": PAPER_TS, "Emp": {"name": "emp"}}
"""The paper's comparison algorithms on linear bandits: LinUCB, its TS (:data:`PAPER_TS`), the empirical mean."""


GENERALISTS = ("generalist", "linear_generalist", "mdp_generalist")
"""Agent names of the generalist transformers (one model for every size of their family)."""


LEARNED = ("transformer", "mdp_transformer", "meta_rl", *GENERALISTS)
"""Agent names whose specification carries a ``checkpoint`` (shipped in icrl_gym/pretrained)."""


def meta_rl(name: str, greedy: bool = False) -> dict[str, Any]:
    """Specification of a shipped online meta-RL policy (PPO across the prior)."""
    return {"name": "meta_rl", "checkpoint": name, "greedy": greedy}


def transformer(name: str, greedy: bool = False) -> dict[str, Any]:
    """Specification of a shipped transformer (sampled from its policy unless ``greedy``)."""
    return {"name": "transformer", "checkpoint": name, "greedy": greedy}


def mdp_transformer(name: str, greedy: bool = False) -> dict[str, Any]:
    """Specification of a shipped tabular-MDP transformer."""
    return {"name": "mdp_transformer", "checkpoint": name, "greedy": greedy}


SOFT_UCBVI = {"name": "ucbvi", "temperature": 0.1, "bonus_scale": 0.01}
"""The AD expert for tabular MDPs: soft UCB-VI(tau=0.1) with the paper's bonus scaled by 0.01.

With the paper's constant the bonus 2H sqrt(log(SAT/delta)/N) exceeds H until N ~ 6,000, so every
Q clips at H and UCB-VI acts uniformly within K=20 episodes (measured: 51.8 vs uniform 51.8)."""


def generalist(name: str = "bernoulli-generalist") -> dict[str, Any]:
    """Specification of the shipped Bernoulli generalist (greedy: it imitates the deterministic Gittins policy)."""
    return {"name": "generalist", "checkpoint": name, "greedy": True}


def linear_generalist(name: str = "linear-generalist-v1") -> dict[str, Any]:
    """A shipped linear generalist, by default the first version (greedy: it imitates an index policy)."""
    return {"name": "linear_generalist", "checkpoint": name, "greedy": True}


def mdp_generalist(name: str = "tabular-mdp-generalist") -> dict[str, Any]:
    """The shipped MDP generalist, as its agent's default deploys it (exploring, then greedy; sampled in rooms)."""
    return {"name": "mdp_generalist", "checkpoint": name}


def bayes_dpt(posterior: str, greedy: bool) -> dict[str, Any]:
    """The Bayes-optimal DPT policy on ``posterior``'s P(a* = a | D): what a perfectly pretrained DPT model does."""
    return {"name": "posterior_optimal_action", "posterior": {"name": posterior}, "greedy": greedy}


def as_bandit_agent(agent: Agent[Any]) -> BanditAgent:
    """``agent`` (as ``make_agent`` builds it) as a bandit algorithm; ``TypeError`` if it is not one."""
    if not isinstance(agent, BanditAgent):
        raise TypeError(f"{type(agent).__name__} is not a bandit algorithm")
    return agent
