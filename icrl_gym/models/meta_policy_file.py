"""Loading an exported meta-RL policy from its checkpoint file: the SB3 algorithm and its record.

Above :mod:`icrl_gym.models.meta_policy` (which the kind table names, so it reads no checkpoint
itself) and :mod:`icrl_gym.checkpoint`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm

from icrl_gym.checkpoint import CheckpointError, CheckpointKind, CheckpointRecord, read_checkpoint
from icrl_gym.models.meta_policy import policy_from_weights


def load_policy(path: str | Path, device: str = "cpu") -> tuple[BaseAlgorithm, dict[str, Any]]:
    """Rebuild the SB3 algorithm of an exported policy and load its weights (no pickle)."""
    weights, meta = read_checkpoint(path)
    kind = CheckpointRecord.from_meta(meta).kind
    if kind is not CheckpointKind.META_RL_POLICY:
        raise CheckpointError(f"{path} is not a meta-RL policy checkpoint (it holds a {kind.value})")
    try:
        return policy_from_weights(weights, meta, device=device), meta
    except RuntimeError as err:
        raise CheckpointError(f"{path} does not fit its policy configuration: {err}") from err
