"""The algorithms, one per file, all implementing :mod:`icrl_gym.algorithm`'s batched interface.

Importing this package registers each of them by name with :mod:`icrl_gym.registry` (the table
below; ``setup.py`` declares this package in the registry's entry-point group, so the core finds
them by name without importing them), whose ``make_agent`` (re-exported here) builds any of them
from a plain, JSON-serialisable specification, the dictionary that ``agent.config()`` returns, and
:func:`pretrained` gives a ready agent for every shipped model::

    make_agent("linucb", alpha=2.0)
    make_agent({"name": "mixture", "weights": [0.5, 0.5],
                "components": [{"name": "bernoulli_ts"}, {"name": "uniform"}]})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from agents.bandit.bayes_ucb import BayesUCB, LinearBayesUCB
from agents.bandit.bernoulli_bayes_optimal import BernoulliBayesOptimal
from agents.bandit.box_posterior import BoxPosteriorMC
from agents.bandit.empirical_mean import EmpiricalMean
from agents.bandit.family_gittins import FamilyGittins
from agents.bandit.gittins import Gittins
from agents.bandit.index_agent import IndexAgent
from agents.bandit.kl_ucb import KLUCB
from agents.bandit.linear_posterior import PosteriorMeanGreedy
from agents.bandit.linucb import LinUCB, SoftLinUCB
from agents.bandit.model_average import ModelAveragedBayesUCB, ModelAveragedGittins, ModelAveragedMOSS
from agents.bandit.optimal import Optimal
from agents.bandit.thompson import BernoulliThompson, LinearThompson
from agents.bandit.ucb import UCB
from agents.bandit.uniform import Uniform
from agents.fresh_arm_floor import FreshArmFloor
from agents.mdp.greedy_q import MDPOptimal
from agents.mdp.posterior_dpt import PosteriorOptimalAction
from agents.mdp.psrl import PSRL, DarkRoomPSRL, PosteriorMeanPlanner
from agents.mdp.ucbvi import UCBVI
from agents.mdp.uniform import MDPUniform
from agents.mixture import MDPMixture, Mixture
from agents.safety_net import SafetyNet
from agents.shuffled_arms import ShuffledArms
from icrl_gym.algorithm import Agent, BanditAgent, MDPAgent
from icrl_gym.registry import make_agent, register_agent

for _algorithm in (
    # bandit algorithms
    LinUCB,
    LinearThompson,
    BernoulliThompson,
    Gittins,
    FamilyGittins,
    UCB,
    KLUCB,
    BayesUCB,
    LinearBayesUCB,
    ModelAveragedBayesUCB,
    ModelAveragedMOSS,
    ModelAveragedGittins,
    PosteriorMeanGreedy,
    BoxPosteriorMC,
    BernoulliBayesOptimal,
    EmpiricalMean,
    Uniform,
    Optimal,
    # tabular-MDP algorithms
    MDPOptimal,
    MDPUniform,
    UCBVI,
    PSRL,
    DarkRoomPSRL,
    PosteriorMeanPlanner,
    PosteriorOptimalAction,
    # either kind: the mixture builds an MDP mixture when every component is an MDP algorithm
    Mixture,
    # a robust index's guard around any linear-bandit algorithm
    SafetyNet,
    # any bandit algorithm on every run's arms in a random order
    ShuffledArms,
    # any K-armed Bernoulli algorithm never trying fewer fresh arms than the Gittins index told U[0, 1]
    FreshArmFloor,
):
    register_agent(_algorithm.name, _algorithm)
register_agent(SoftLinUCB.name, SoftLinUCB, defaults={"temperature": 0.1})  # the paper's soft LinUCB (App. E.2)

# learned algorithms import torch: registered by entry point, imported on first use; one per checkpoint kind,
# under the name its row of the kind table (icrl_gym.kinds.KINDS) gives
register_agent("transformer", "agents.learned.transformer:TransformerAgent")
register_agent("mdp_transformer", "agents.learned.mdp_transformer:MDPTransformerAgent")
register_agent("meta_rl", "agents.learned.meta_rl:MetaRLAgent")
register_agent("generalist", "agents.learned.generalist:GeneralistAgent")
register_agent("linear_generalist", "agents.learned.linear_generalist:LinearGeneralistAgent")
register_agent("mdp_generalist", "agents.learned.mdp_generalist:MDPGeneralistAgent")


def pretrained(
    name: str | os.PathLike, seed: int | None = None, safety_net: bool | dict[str, Any] = False, **kwargs: Any
) -> Agent[Any]:
    """A ready agent for a shipped model by name, or for your own by path (:func:`agents.learned.pretrained`).

    A path may be a training run's folder (``runs/NAME``), a checkpoint stem or a Hub-layout folder.
    Imported on first use, so ``import agents`` alone never loads torch.
    """
    from agents.learned import pretrained as load

    return load(name, seed=seed, safety_net=safety_net, **kwargs)


def ts_uniform_mixture(alpha: float, thompson: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Specification of Alg_0 = alpha * TS + (1 - alpha) * Uniform (Appendix B)."""
    return {
        "name": Mixture.name,
        "components": [dict(thompson or {"name": BernoulliThompson.name}), {"name": Uniform.name}],
        "weights": [float(alpha), 1.0 - float(alpha)],
    }


__all__ = [
    "BanditAgent",
    "BayesUCB",
    "BernoulliBayesOptimal",
    "BernoulliThompson",
    "BoxPosteriorMC",
    "DarkRoomPSRL",
    "EmpiricalMean",
    "FreshArmFloor",
    "Gittins",
    "IndexAgent",
    "KLUCB",
    "LinUCB",
    "LinearBayesUCB",
    "LinearThompson",
    "MDPAgent",
    "MDPMixture",
    "MDPOptimal",
    "MDPUniform",
    "Mixture",
    "Optimal",
    "PSRL",
    "PosteriorMeanPlanner",
    "PosteriorMeanGreedy",
    "PosteriorOptimalAction",
    "ShuffledArms",
    "SoftLinUCB",
    "UCB",
    "UCBVI",
    "Uniform",
    "make_agent",
    "pretrained",
    "ts_uniform_mixture",
]
