"""Bandit algorithms with one batched interface (see :mod:`agents.base`).

``make_agent`` builds any of them from a plain, JSON-serialisable specification, the same
dictionary that ``agent.config()`` returns, so every artefact can record (and rebuild) the
algorithms that made it::

    make_agent("linucb", alpha=2.0)
    make_agent({"name": "mixture", "weights": [0.5, 0.5],
                "components": [{"name": "bernoulli_ts"}, {"name": "uniform"}]})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.base import BanditAgent
from agents.bayes_ucb import BayesUCB
from agents.empirical_mean import EmpiricalMean
from agents.gittins import Gittins
from agents.index_agent import IndexAgent
from agents.kl_ucb import KLUCB
from agents.linucb import LinUCB, SoftLinUCB
from agents.mdp_base import MDPAgent, MDPOptimal, MDPUniform
from agents.mixture import MDPMixture, Mixture
from agents.oracle import Optimal
from agents.posterior_dpt import PosteriorOptimalAction
from agents.psrl import PSRL, DarkRoomPSRL
from agents.thompson import BernoulliThompson, LinearThompson
from agents.ucb import UCB
from agents.ucbvi import UCBVI
from agents.uniform import Uniform

MDP_AGENTS: dict[str, type[MDPAgent]] = {
    cls.name: cls for cls in (MDPOptimal, MDPUniform, UCBVI, PSRL, DarkRoomPSRL, PosteriorOptimalAction)
}

AGENTS: dict[str, type[BanditAgent] | type[MDPAgent]] = {
    cls.name: cls
    for cls in (
        LinUCB,
        SoftLinUCB,
        LinearThompson,
        BernoulliThompson,
        Gittins,
        UCB,
        KLUCB,
        BayesUCB,
        EmpiricalMean,
        Uniform,
        Optimal,
    )
} | MDP_AGENTS


def make_agent(spec: str | Mapping[str, Any], seed: int | None = None, **kwargs: Any) -> BanditAgent | MDPAgent:
    """Build an agent from its name or its ``config()`` dictionary (plus keyword overrides)."""
    if isinstance(spec, str):
        spec = {"name": spec}
    params = {**spec, **kwargs}
    name = params.pop("name", None)
    if name == Mixture.name:
        components = [make_agent(c) for c in params.pop("components")]
        cls = MDPMixture if all(isinstance(c, MDPAgent) for c in components) else Mixture
        return cls(components, params.pop("weights"), seed=seed, **params)
    if name == "transformer":  # imported lazily: torch is only needed by the transformer agents
        from agents.transformer_agent import TransformerAgent

        return TransformerAgent(seed=seed, **params)
    if name == "meta_rl":
        from agents.meta_rl_agent import MetaRLAgent

        return MetaRLAgent(seed=seed, **params)
    if name == "mdp_transformer":
        from agents.mdp_transformer_agent import MDPTransformerAgent

        return MDPTransformerAgent(seed=seed, **params)
    if name not in AGENTS:
        known = sorted([*AGENTS, Mixture.name, "transformer", "mdp_transformer", "meta_rl"])
        raise ValueError(f"unknown agent {name!r}; known agents: {known}")
    cls = AGENTS[name]
    if name == SoftLinUCB.name and "temperature" not in params:
        params["temperature"] = 0.1
    try:
        return cls(seed=seed, **params)
    except TypeError as err:
        raise ValueError(f"bad parameters for agent {name!r}: {err}") from err


def ts_uniform_mixture(alpha: float, thompson: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Specification of Alg_0 = alpha * TS + (1 - alpha) * Uniform (Appendix exp_details)."""
    return {
        "name": Mixture.name,
        "components": [dict(thompson or {"name": BernoulliThompson.name}), {"name": Uniform.name}],
        "weights": [float(alpha), 1.0 - float(alpha)],
    }


__all__ = [
    "AGENTS",
    "BanditAgent",
    "BayesUCB",
    "BernoulliThompson",
    "EmpiricalMean",
    "Gittins",
    "IndexAgent",
    "MDPAgent",
    "MDP_AGENTS",
    "KLUCB",
    "LinUCB",
    "LinearThompson",
    "MDPMixture",
    "Mixture",
    "Optimal",
    "PosteriorOptimalAction",
    "SoftLinUCB",
    "UCB",
    "Uniform",
    "make_agent",
    "ts_uniform_mixture",
]
