"""The learned algorithms: in-context models (one rollout, an adapter per model) and the meta-RL baselines.

:func:`pretrained` is the one entry point for every model shipped with the package: it reads the
checkpoint's kind and builds the agent that the kind table (:data:`icrl_gym.checkpoint.KINDS`) names::

    from agents import pretrained
    agent = pretrained("bernoulli-generalist")
"""

from __future__ import annotations

from typing import Any

from icrl_gym.algorithm import Agent
from icrl_gym.checkpoint import PRETRAINED_DIR, pretrained_names, read_record
from icrl_gym.registry import make_agent


def pretrained(name: str, seed: int | None = None, **kwargs: Any) -> Agent[Any]:
    """A ready agent for the shipped model ``name`` (see :func:`~icrl_gym.checkpoint.pretrained_names`).

    ``kwargs`` go to the agent (``greedy``, ``device``, ``seed``, and fallbacks such as ``horizon``).
    """
    shipped = pretrained_names()
    if name not in shipped:
        raise ValueError(f"no shipped model {name!r}; shipped models: {shipped}")
    kind = read_record(PRETRAINED_DIR / name).kind
    return make_agent({"name": kind.agent, "checkpoint": name, **kwargs}, seed=seed)


__all__ = ["pretrained"]
