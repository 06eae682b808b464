"""The paper's pretrained bandit transformer (:class:`~icrl_gym.models.transformer.BanditTransformer`) as an algorithm.

One fixed environment size: the A arms of dimension d and at most the T steps it was trained for
(Section 4; checked at reset against its record).  Shipped checkpoints load by name::

    agent = TransformerAgent.pretrained("bernoulli-dpt-ts-uniform")
"""

from __future__ import annotations

from typing import Any

from agents.learned.rollout import BanditRollout
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.models.policy import EnvInfo


class TransformerAgent(BanditRollout):
    """Batched online rollout of a :class:`~icrl_gym.models.transformer.BanditTransformer` checkpoint."""

    name = "transformer"
    kind = CheckpointKind.BANDIT_TRANSFORMER

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        horizon = resolve_horizon(info, default=int(self.record.meta["model"]["horizon"]), agent=self.name)
        return EnvInfo(num_actions=self.num_actions, horizon=horizon, dim=self.dim)
