"""What every batched environment core shares: B runs of one spec, checked before anything is drawn.

:class:`~icrl_gym.envs.bandit_core.BanditBatch` and :class:`~icrl_gym.envs.mdp_core.MDPBatch` both take a
spec, a batch size and the caller's generator, refuse a batch whose estimated memory exceeds the limit
before drawing anything, and take one index in [0, A) per run at every step.  :class:`RunBatch` is that
part, written once; each core adds its instances, its step and when its runs are done.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from icrl_gym.envs.validation import check_index_batch, check_integer, check_memory


class BatchSpec(Protocol):
    """What :class:`RunBatch` reads of a spec: its number of actions and its memory estimate."""

    @property
    def num_actions(self) -> int:
        """Number of actions A of every step."""
        ...

    def memory_bytes(self, batch_size: int) -> int:
        """Estimated peak memory of a batch of ``batch_size`` runs of the spec (bytes)."""
        ...


SpecT = TypeVar("SpecT", bound=BatchSpec)


class RunBatch(Generic[SpecT]):
    """B runs of ``spec`` advanced together: the checked batch size, the memory check and the actions' check.

    Attributes: ``spec``, ``batch_size`` (B, a checked integer) and ``rng``, the generator every draw of the
    batch comes from (the caller's: the batch owns no randomness).
    """

    action_indices: ClassVar[str]
    """What an action indexes, as a refused action's message says it ("arm indices", "action indices")."""

    def __init__(self, spec: SpecT, batch_size: int, rng: np.random.Generator, runs: str) -> None:
        """Check ``batch_size`` and the memory of ``batch_size`` ``runs`` (e.g. "bandit instances"), then keep them.

        The memory limit is :func:`~icrl_gym.envs.validation.memory_limit`'s (or the environment variable's);
        nothing is drawn before both checks pass.
        """
        batch_size = check_integer("batch_size", batch_size)
        check_memory(spec.memory_bytes(batch_size), f"a batch of {batch_size:,} {runs}")
        self.spec = spec
        self.batch_size = batch_size
        self.rng = rng

    def check_actions(self, actions: Any) -> np.ndarray:
        """Validate the actions of one step: integers of shape (B,), each in [0, A)."""
        return check_index_batch(actions, self.batch_size, self.spec.num_actions, "actions", self.action_indices)
