"""The environment's model as an agent reads it: the reset ``info["model"]`` as typed records.

Every environment's reset info carries its model: its spec as a dict (the JSON-ready form the
records keep), with the rows drawn per instance under ``"instance"`` (a bandit whose prior
hyperparameters or noise level differ between instances).  :func:`read_env_model` is the one reader of
it: agents receive the :class:`BanditSpec` or :class:`MDPSpec` itself, never its dict keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.mdp_core import MDPSpec


@dataclass(frozen=True)
class EnvModel:
    """The prior an environment draws its instances from, and what it drew per instance."""

    spec: BanditSpec | MDPSpec
    """The environment's spec."""
    instance: Mapping[str, Any] | None = None
    """The per-instance rows of a bandit (one row per run, or the one run's row for a single environment):
    ``noise_std``, the matched Gaussian prior ``prior_mean``, ``prior_var`` or the Beta prior ``prior_a``,
    ``prior_b``, and the drawn hyperparameters; None when the spec draws none."""

    @property
    def bandit(self) -> BanditSpec | None:
        """The spec of a bandit environment (None for an MDP)."""
        return self.spec if isinstance(self.spec, BanditSpec) else None

    @property
    def mdp(self) -> MDPSpec | None:
        """The spec of a tabular-MDP environment (None for a bandit)."""
        return self.spec if isinstance(self.spec, MDPSpec) else None


def read_env_model(info: Mapping[str, Any]) -> EnvModel | None:
    """The model of a reset ``info`` (its ``"model"``) as an :class:`EnvModel`, or None when it has none.

    A model with a ``kind`` is an :class:`MDPSpec`, any other a :class:`BanditSpec`; fields it leaves
    out take the spec's defaults, and an invalid one is the spec's ``ValueError``.
    """
    model = info.get("model")
    if model is None:
        return None
    data = dict(model)
    instance = data.pop("instance", None)
    spec = MDPSpec.from_dict(data) if "kind" in data else BanditSpec.from_dict(data)
    return EnvModel(spec, instance)
