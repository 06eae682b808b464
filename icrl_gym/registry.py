"""The registry of algorithms: a name -> entry point table, and ``make_agent`` to build from a specification.

Like Gymnasium's environment registry (:mod:`icrl_gym.envs`), every algorithm is registered here
by a string entry point ``"module:Class"`` and imported only when it is first asked for, so this
bottom layer knows no algorithm's code and loading one algorithm (say, LinUCB) never imports
torch.  The algorithms live in ``agents/``; another package registers its own with
:func:`register_agent`.

``make_agent`` builds any of them from a plain, JSON-serialisable specification, the same
dictionary that ``agent.config()`` returns, so every artefact can record (and rebuild) the
algorithms that made it::

    make_agent("linucb", alpha=2.0)
    make_agent({"name": "mixture", "weights": [0.5, 0.5],
                "components": [{"name": "bernoulli_ts"}, {"name": "uniform"}]})
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from icrl_gym.algorithm import Agent
from icrl_gym.kinds import KINDS

MIXTURE = "mixture"
"""The trajectory-level mixture, whose specification nests its components' (see ``make_agent``)."""

_ENTRY_POINTS: dict[str, str] = {
    # bandit algorithms
    "linucb": "agents.bandit.linucb:LinUCB",
    "soft_linucb": "agents.bandit.linucb:SoftLinUCB",
    "linear_ts": "agents.bandit.thompson:LinearThompson",
    "bernoulli_ts": "agents.bandit.thompson:BernoulliThompson",
    "gittins": "agents.bandit.gittins:Gittins",
    "ucb": "agents.bandit.ucb:UCB",
    "kl_ucb": "agents.bandit.kl_ucb:KLUCB",
    "bayes_ucb": "agents.bandit.bayes_ucb:BayesUCB",
    "linear_bayes_ucb": "agents.bandit.bayes_ucb:LinearBayesUCB",
    "linear_posterior_mean": "agents.bandit.linear_posterior:PosteriorMeanGreedy",
    "linear_box_posterior": "agents.bandit.box_posterior:BoxPosteriorMC",
    "bernoulli_bayes_optimal": "agents.bandit.bernoulli_bayes_optimal:BernoulliBayesOptimal",
    "emp": "agents.bandit.empirical_mean:EmpiricalMean",
    "uniform": "agents.bandit.uniform:Uniform",
    "optimal": "agents.bandit.optimal:Optimal",
    # tabular-MDP algorithms
    "mdp_optimal": "agents.mdp.greedy_q:MDPOptimal",
    "mdp_uniform": "agents.mdp.uniform:MDPUniform",
    "ucbvi": "agents.mdp.ucbvi:UCBVI",
    "psrl": "agents.mdp.psrl:PSRL",
    "dark_room_psrl": "agents.mdp.psrl:DarkRoomPSRL",
    "posterior_mean_planner": "agents.mdp.psrl:PosteriorMeanPlanner",
    "posterior_optimal_action": "agents.mdp.posterior_dpt:PosteriorOptimalAction",
    # either kind: the mixture builds an MDP mixture when every component is an MDP algorithm
    MIXTURE: "agents.mixture:Mixture",
    # learned algorithms (they import torch): one per checkpoint kind, from the kind table
    **{entry.agent: entry.agent_class for entry in KINDS.values()},
}

_DEFAULTS: dict[str, dict[str, Any]] = {
    "soft_linucb": {"temperature": 0.1},  # the paper's soft LinUCB expert (Appendix E.2)
}
"""Keyword arguments ``make_agent`` adds when the specification leaves them out."""


def register_agent(name: str, entry_point: str, overwrite: bool = False) -> None:
    """Register the class at ``entry_point`` (``"package.module:Class"``) under ``name``."""
    module, sep, attr = entry_point.partition(":")
    if not (module and sep and attr):
        raise ValueError(f"entry point must look like 'package.module:Class', got {entry_point!r}")
    if name in _ENTRY_POINTS and not overwrite and _ENTRY_POINTS[name] != entry_point:
        raise ValueError(f"agent {name!r} is already registered as {_ENTRY_POINTS[name]!r}")
    _ENTRY_POINTS[name] = entry_point


def agent_names() -> list[str]:
    """Every registered name, sorted."""
    return sorted(_ENTRY_POINTS)


def entry_points() -> dict[str, str]:
    """A copy of the name -> entry point table."""
    return dict(_ENTRY_POINTS)


class _MixtureClass(Protocol):
    """The registered mixture: built from its components by ``of`` (a bandit or an MDP mixture, as they are)."""

    def of(self, components: Sequence[Agent[Any]], weights: Sequence[float], seed: int | None = None) -> Agent[Any]:
        """The mixture of ``components`` with the given weights."""
        ...


def agent_class(name: str) -> type[Agent[Any]]:
    """The class registered under ``name``, imported on first use."""
    if name not in _ENTRY_POINTS:
        raise ValueError(f"unknown agent {name!r}; known agents: {agent_names()}")
    module, _, attr = _ENTRY_POINTS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_agent(spec: str | Mapping[str, Any], seed: int | None = None, **kwargs: Any) -> Agent[Any]:
    """Build an agent from its name or its ``config()`` dictionary (plus keyword overrides).

    A mixture's ``components`` are specifications themselves; its class is the bandit or the MDP
    mixture as its components are.  Unknown names and parameters raise ``ValueError``.  A config's
    ``model_used`` (the prior and horizon the agent resolved at its last reset) is a record, not a
    parameter: the agent reads them again from the environment at every reset, so it is left out.
    """
    if isinstance(spec, str):
        spec = {"name": spec}
    params = {**spec, **kwargs}
    name = params.pop("name", None)
    params.pop("model_used", None)
    cls = agent_class(name)
    if name == MIXTURE:
        components = [make_agent(c) for c in params.pop("components")]
        return cast(_MixtureClass, cls).of(components, params.pop("weights"), seed=seed, **params)
    params = {**_DEFAULTS.get(name, {}), **params}
    try:
        return cls(seed=seed, **params)
    except TypeError as err:
        raise ValueError(f"bad parameters for agent {name!r}: {err}") from err
