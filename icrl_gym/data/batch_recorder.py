"""What the bandit and the MDP recorders of :func:`~icrl_gym.data.pipeline.run_collection` share."""

from __future__ import annotations

from typing import Generic, TypeVar

BatchT = TypeVar("BatchT")


class BatchRecorder(Generic[BatchT]):
    """A recorder holding the environments of the current batch (``begin()`` sets ``_batch``)."""

    _batch: BatchT | None = None

    @property
    def batch(self) -> BatchT:
        """The environments of the current batch."""
        if self._batch is None:
            raise RuntimeError("begin() a batch first")
        return self._batch
