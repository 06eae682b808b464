"""The kind table: what each kind of checkpoint holds, which classes build it and which agent plays it.

Torch-free (every class is named by its ``"module:Class"`` entry point and imported on first use),
so :mod:`icrl_gym.checkpoint` builds every model from it without loading every model's code.  The
agent that plays a kind is named by its registered name (the algorithms register themselves,
``agents/__init__.py``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class CheckpointKind(str, Enum):
    """What the weights of a checkpoint are, and so which model class builds them and which agent plays them."""

    BANDIT_TRANSFORMER = "bandit_transformer"
    """A :class:`~icrl_gym.models.transformer.BanditTransformer` (agent ``"transformer"``)."""
    MDP_TRANSFORMER = "mdp_transformer"
    """An :class:`~icrl_gym.models.mdp_transformer.MDPTransformer` (agent ``"mdp_transformer"``)."""
    META_RL_POLICY = "meta_rl_policy"
    """A Stable-Baselines3 policy of the online meta-RL baselines (agent ``"meta_rl"``)."""
    GENERALIST_TRANSFORMER = "generalist_transformer"
    """A :class:`~icrl_gym.models.generalist.GeneralistTransformer`: Bernoulli arms, any K and T."""
    LINEAR_GENERALIST_TRANSFORMER = "linear_generalist_transformer"
    """A :class:`~icrl_gym.models.linear_generalist.LinearGeneralistTransformer`: linear arms, any A and T."""
    MDP_GENERALIST = "mdp_generalist"
    """An :class:`~icrl_gym.models.mdp_generalist.MDPGeneralist`: tabular MDPs of any S, A, H and K."""

    @property
    def entry(self) -> KindEntry:
        """The row of :data:`KINDS` for this kind."""
        return KINDS[self]

    @property
    def agent(self) -> str:
        """The registered name of the agent that plays checkpoints of this kind."""
        return KINDS[self].agent


class EnvFamily(str, Enum):
    """The family of environments a checkpoint plays."""

    BANDIT = "bandit"
    TABULAR_MDP = "tabular MDP"


def import_target(target: str) -> Any:
    """The object named by ``"module:attribute"``, imported on first use."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class KindEntry:
    """One row of the kind table: how a checkpoint of a kind is built, played and checked."""

    model: str
    """``"module:Class"`` of the model (an :class:`~icrl_gym.models.policy.InContextPolicy`, or the
    meta-RL baselines' SB3 policy)."""
    config: str
    """``"module:Class"`` of its configuration (a :class:`~icrl_gym.config.DictConfig`), read from the
    record's ``model`` (for the meta-RL policies, from ``meta_rl``)."""
    agent: str
    """The registered name (:mod:`icrl_gym.registry`) of the agent that plays it (an adapter of ``agents/learned``,
    which registers itself under this name)."""
    family: EnvFamily
    """The environments it plays."""
    exact_fields: tuple[str, ...]
    """Fields of the environment's spec that must equal the training prior's (:func:`check_compatible`)."""
    length_field: str | None = None
    """The field of a run's length, which may be shorter than the model's capacity but not longer
    (None: the model plays any length)."""
    loader: str | None = None
    """``"module:function"`` ``(weights, record, device) -> model`` for a model not built from its
    configuration alone (the SB3 policies), given what :mod:`icrl_gym.checkpoint` read (so the model's
    module never reads a checkpoint itself); None: ``model(config)`` + the weights."""
    plays: str = field(kw_only=True)
    """What the model plays, in words (the environments :func:`check_compatible`'s error says it needs)."""
    finetune: str | None = field(default=None, kw_only=True)
    """The name of the fine-tuning method that starts from a checkpoint of this kind (the training package's
    table of methods, :data:`icrl_gym.training.finetune.FINETUNE_METHODS`); None: not fine-tunable."""


BANDITS_OF_ITS_PRIOR: dict[str, Any] = {
    "family": EnvFamily.BANDIT,
    "exact_fields": ("arms", "reward", "dim", "num_actions"),
    "length_field": "horizon",
    "plays": "bandits of its training prior (its kind of arms and rewards, d and A; T up to its capacity)",
}
"""What a model trained on one bandit prior plays (the paper's transformers, the meta-RL policies): that prior's
kind of arms and rewards, d and A, and runs up to its capacity."""


KINDS: dict[CheckpointKind, KindEntry] = {
    CheckpointKind.BANDIT_TRANSFORMER: KindEntry(
        "icrl_gym.models.transformer:BanditTransformer",
        "icrl_gym.models.transformer:TransformerConfig",
        "transformer",
        **BANDITS_OF_ITS_PRIOR,
        finetune="bandit",
    ),
    CheckpointKind.MDP_TRANSFORMER: KindEntry(
        "icrl_gym.models.mdp_transformer:MDPTransformer",
        "icrl_gym.models.mdp_transformer:MDPTransformerConfig",
        "mdp_transformer",
        EnvFamily.TABULAR_MDP,
        ("kind", "num_states", "num_actions", "horizon"),
        "episodes",
        plays="tabular MDPs of its training prior (its kind, S, A and H; K episodes up to its capacity)",
    ),
    CheckpointKind.META_RL_POLICY: KindEntry(
        "stable_baselines3.common.policies:ActorCriticPolicy",
        "icrl_gym.models.meta_policy:MetaRLConfig",
        "meta_rl",
        **BANDITS_OF_ITS_PRIOR,
        loader="icrl_gym.models.meta_policy:policy_module",
    ),
    CheckpointKind.GENERALIST_TRANSFORMER: KindEntry(
        "icrl_gym.models.generalist:GeneralistTransformer",
        "icrl_gym.models.generalist:GeneralistConfig",
        "generalist",
        EnvFamily.BANDIT,
        ("arms", "reward"),
        plays="Bernoulli bandits (one-hot arms, Bernoulli rewards) of any K and T",
        finetune="generalist",
    ),
    CheckpointKind.LINEAR_GENERALIST_TRANSFORMER: KindEntry(
        "icrl_gym.models.linear_generalist:LinearGeneralistTransformer",
        "icrl_gym.models.linear_generalist:LinearGeneralistConfig",
        "linear_generalist",
        EnvFamily.BANDIT,
        ("reward",),
        plays="linear bandits with Gaussian rewards (any A and T, d up to its d_max)",
        finetune="linear_generalist",
    ),
    CheckpointKind.MDP_GENERALIST: KindEntry(
        "icrl_gym.models.mdp_generalist:MDPGeneralist",
        "icrl_gym.models.mdp_generalist:MDPGeneralistConfig",
        "mdp_generalist",
        EnvFamily.TABULAR_MDP,
        (),
        plays="tabular MDPs and dark rooms of any S, A, H and K within its record's playable_range",
        finetune="mdp_generalist",
    ),
}
"""The kind table: every checkpoint kind -> its model class, configuration class, agent and environment check.

A new kind of learned policy is one member of :class:`CheckpointKind` and one row here, one model
file (``icrl_gym/models``) and one agent adapter (``agents/learned``)."""
