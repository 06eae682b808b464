"""The registry of algorithms: machinery only, a name -> entry point table filled by the algorithms themselves.

The pattern is Gymnasium's: the registry knows no algorithm.  The algorithms register where they
live: ``agents/__init__.py`` calls :func:`register_agent` for each of its algorithms when the
package is imported (a learned one by its ``"module:Class"`` entry point, so that ``import agents``
never loads torch), and another package registers its own the same way.  Code of the core that
names an algorithm without importing it (the data collection's ``make_agent("linucb")``) finds it
through the installed plugins: on the first lookup the registry loads every entry point of the
group :data:`ENTRY_POINT_GROUP` (``setup.py`` declares ``agents`` there), which imports the package
and so runs its registrations, in a fresh process as on a fresh install.

``make_agent`` builds any algorithm from a plain, JSON-serialisable specification, the same
dictionary that ``agent.config()`` returns, so every artefact can record (and rebuild) the
algorithms that made it::

    make_agent("linucb", alpha=2.0)
    make_agent({"name": "mixture", "weights": [0.5, 0.5],
                "components": [{"name": "bernoulli_ts"}, {"name": "uniform"}]})
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from icrl_gym.algorithm import Agent, BanditAgent
from icrl_gym.utils.names import check_keywords, did_you_mean

ENTRY_POINT_GROUP = "icrl_gym.agents"
"""The entry-point group of the packages that register algorithms (loaded on the first lookup)."""

MIXTURE = "mixture"
"""The trajectory-level mixture, whose specification nests its components' (see ``make_agent``)."""

_ENTRY_POINTS: dict[str, str] = {}
"""Name -> ``"module:Class"`` of every registered algorithm."""

_DEFAULTS: dict[str, dict[str, Any]] = {}
"""Keyword arguments ``make_agent`` adds when the specification leaves them out (``register_agent``'s ``defaults``)."""

_plugins_loaded = False


def _load_plugins() -> None:
    """Import every package of :data:`ENTRY_POINT_GROUP` once, so that it registers its algorithms."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        entry_point.load()


def register_agent(
    name: str, entry_point: str | type, overwrite: bool = False, defaults: Mapping[str, Any] | None = None
) -> None:
    """Register an algorithm under ``name``: its class, or its ``"package.module:Class"`` (imported on first use).

    ``defaults``: keyword arguments ``make_agent`` adds when a specification leaves them out.
    """
    if isinstance(entry_point, type):
        entry_point = f"{entry_point.__module__}:{entry_point.__qualname__}"
    module, sep, attr = entry_point.partition(":")
    if not (module and sep and attr):
        raise ValueError(f"entry point must look like 'package.module:Class', got {entry_point!r}")
    if name in _ENTRY_POINTS and not overwrite and _ENTRY_POINTS[name] != entry_point:
        raise ValueError(f"agent {name!r} is already registered as {_ENTRY_POINTS[name]!r}")
    _ENTRY_POINTS[name] = entry_point
    if defaults is not None:
        _DEFAULTS[name] = dict(defaults)


def agent_names() -> list[str]:
    """Every registered name, sorted."""
    _load_plugins()
    return sorted(_ENTRY_POINTS)


def entry_points() -> dict[str, str]:
    """A copy of the name -> entry point table."""
    _load_plugins()
    return dict(_ENTRY_POINTS)


class _MixtureClass(Protocol):
    """The registered mixture: built from its components by ``of`` (a bandit or an MDP mixture, as they are)."""

    def of(self, components: Sequence[Agent[Any]], weights: Sequence[float], seed: int | None = None) -> Agent[Any]:
        """The mixture of ``components`` with the given weights."""
        ...


def agent_class(name: str) -> type[Agent[Any]]:
    """The class registered under ``name``, imported on first use."""
    _load_plugins()
    if name not in _ENTRY_POINTS:
        known = agent_names()
        raise ValueError(
            f"unknown agent {name!r}{did_you_mean(name, known)}; known agents: {known} (a package "
            f"registers its algorithms when imported, e.g. `import agents`, or through the {ENTRY_POINT_GROUP!r} "
            "entry points of its installation)"
        )
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
        check_keywords(cls, params, cls.__name__)
        return cls(seed=seed, **params)
    except TypeError as err:
        raise ValueError(f"bad parameters for agent {name!r}: {err}") from err


def make_bandit_agent(inner: BanditAgent | Mapping[str, Any] | str, wrapper: str) -> BanditAgent:
    """The bandit algorithm that a wrapper (the safety net, shuffled arms, the fresh-arm floor) plays.

    ``inner`` itself, or built from its name or specification; anything that is not a bandit algorithm is a
    ``TypeError`` naming ``wrapper``.
    """
    built = inner if isinstance(inner, BanditAgent) else make_agent(inner)
    if not isinstance(built, BanditAgent):
        raise TypeError(f"{wrapper} plays a bandit algorithm, got {type(built).__name__}")
    return built
