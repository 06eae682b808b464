"""The learned algorithms: in-context models (one rollout, an adapter per model) and the meta-RL baselines.

:func:`pretrained` is the one entry point for every model shipped with the package: it reads the
checkpoint's kind and builds the agent that the kind table (:data:`icrl_gym.checkpoint.KINDS`) names::

    from agents import pretrained
    agent = pretrained("bernoulli-generalist")
"""

from __future__ import annotations

import os
from typing import Any

from icrl_gym.algorithm import Agent, BanditAgent
from icrl_gym.checkpoint import find_checkpoint, pretrained_names, read_record
from icrl_gym.registry import make_agent


def pretrained(
    name: str | os.PathLike,
    seed: int | None = None,
    safety_net: bool | dict[str, Any] = False,
    **kwargs: Any,
) -> Agent[Any]:
    """A ready agent for a model: a shipped one by name, or your own by path.

    ``name`` is a shipped model (see :func:`~icrl_gym.checkpoint.pretrained_names`), a checkpoint
    stem or file, a Hub-layout folder, or the folder of a training run (its best validated checkpoint
    when it keeps one, else its latest: :func:`~icrl_gym.checkpoint.find_checkpoint`).  The agent is
    the one the checkpoint's kind names.  ``kwargs`` go to the agent (``greedy``, ``device``, and
    fallbacks such as ``horizon``).  ``safety_net`` (a linear-bandit model; True, or the net's keywords
    such as ``margin``) wraps the agent in :class:`~agents.safety_net.SafetyNet`: it may then only pull
    arms that the model-averaged Bayes-UCB keeps in play, anchored on the model's training prior.
    """
    stem = find_checkpoint(name)
    kind = read_record(stem).kind
    checkpoint = str(name) if str(name) in pretrained_names() else str(stem)
    agent = make_agent({"name": kind.agent, "checkpoint": checkpoint, **kwargs}, seed=seed)
    if safety_net is False:
        return agent
    from agents.safety_net import SafetyNet

    if not isinstance(agent, BanditAgent):
        raise TypeError(f"the safety net guards linear-bandit models; {name} plays {kind.agent}")
    return SafetyNet(agent, seed=seed, **({} if safety_net is True else dict(safety_net)))


__all__ = ["pretrained"]
