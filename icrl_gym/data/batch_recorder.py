"""What the bandit and the MDP recorders of :func:`~icrl_gym.data.pipeline.run_collection` share.

:class:`RecordedRuns` is the part of a data set both environments record (actions, rewards, the
labels and the record of how the runs were made); :class:`BatchRecorder` holds the environments of
the batch in hand and hands the data set back with its labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from icrl_gym.config import DictConfig
from icrl_gym.data.pipeline import Labels


@dataclass(kw_only=True)
class RecordedRuns:
    """N runs of T steps as every collection records them; each environment's data set adds its own arrays.

    Built by keyword only (the data sets add fields of their own).
    """

    actions: np.ndarray
    """(N, T) actions a_t."""
    rewards: np.ndarray
    """(N, T) rewards r_t."""
    labels: np.ndarray | None = None
    """(N, T) the label of every step (the :class:`~icrl_gym.data.labels.LabelMode`'s), None when unlabelled."""
    label_probs: np.ndarray | None = None
    """(N, T, A) soft labels, when the labelling stores them."""
    meta: dict[str, Any] = field(default_factory=dict)
    """How the runs were made: ``env`` (the prior as a dict) and the collection's settings."""

    @property
    def num_trajectories(self) -> int:
        """Number of runs N."""
        return self.actions.shape[0]


BatchT = TypeVar("BatchT")
RunsT = TypeVar("RunsT", bound=RecordedRuns)


class BatchRecorder(Generic[BatchT, RunsT]):
    """A recorder holding the environments of the current batch (``begin()`` sets ``_batch``) and the data set."""

    spec: DictConfig
    """The prior the instances are drawn from."""
    data: RunsT
    """The data set being recorded."""
    _batch: BatchT | None = None

    @property
    def batch(self) -> BatchT:
        """The environments of the current batch."""
        if self._batch is None:
            raise RuntimeError("begin() a batch first")
        return self._batch

    def result(self, labels: Labels, meta: dict[str, Any]) -> RunsT:
        """The data set with its labels and its record: ``env`` (the prior as a dict), then ``meta``."""
        self.data.labels, self.data.label_probs = labels.labels, labels.probs
        self.data.meta = {"env": self.spec.to_dict(), **meta}
        return self.data
