"""What every learned algorithm shares: it plays a checkpoint, and is checked against the environment at every reset.

The check is :func:`icrl_gym.checkpoint.check_compatible` (the checkpoint's record against the
environment's reset ``info``), so a model trained on one family, kind or size of environment fails
at ``reset`` with the fields that differ, never later with a shape error or silently wrong numbers.
"""

from __future__ import annotations

from typing import Any

from icrl_gym.algorithm import Agent, ObsT
from icrl_gym.checkpoint import CheckpointRecord, check_compatible


class CheckpointAgent(Agent[ObsT]):
    """An algorithm that plays the checkpoint ``checkpoint`` (sampling, or greedy)."""

    checkpoint: str
    """The checkpoint path or shipped name (or a note for an in-memory model)."""
    record: CheckpointRecord
    """The checkpoint's record: what it is and the environment it was trained for."""
    greedy: bool
    """Take the argmax of the policy instead of sampling from it."""
    input_bound = 1e6
    """The networks compute in float32: inputs far beyond any training prior would overflow their layer norms."""

    def _start(self, info: dict[str, Any]) -> None:
        check_compatible(self.record, info, name=f"model {self.checkpoint!r}")
        super()._start(info)

    def config(self) -> dict[str, Any]:
        """The checkpoint and the deployment mode."""
        return {"name": self.name, "checkpoint": self.checkpoint, "greedy": self.greedy}
