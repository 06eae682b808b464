"""Multi-process pretraining with PyTorch DistributedDataParallel (``torchrun``).

``torchrun --nproc_per_node=N -m icrl_gym.training.pretrain CONFIG.json`` starts N copies of the same
script; each reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from its environment.  The global
batch of ``batch_size`` trajectories is drawn exactly as in a single process and split into N
equal shards, one per rank.  Every rank's loss is the mean over its shard; DDP averages the
gradients over ranks, so the update equals the single-process update on the whole batch:

    (1/N) sum_r (1/(B/N)) sum_{i in shard r} grad l_i  =  (1/B) sum_i grad l_i.

Backends: gloo on CPU, NCCL on CUDA (one GPU per local rank).  Only rank 0 logs, validates and
writes checkpoints; every rank reads the checkpoint when a run resumes.  Without torchrun's
variables (or with WORLD_SIZE=1) nothing is initialised and training is a plain single process.

The variables are read as torchrun sets them (:func:`torchrun_variables`): ``WORLD_SIZE`` a positive
integer; with WORLD_SIZE > 1 also ``RANK`` in [0, WORLD_SIZE) and, where set, ``LOCAL_RANK`` >= 0.
WORLD_SIZE=1 alone (no RANK) is a single process, as one process is all it describes and a user
who exported it expects just that.  A WORLD_SIZE > 1 without RANK is a half-set environment (a
variable left from another launcher, not torchrun): it is refused with a ``ValueError`` saying
what torchrun sets, as is a value that is not an integer, instead of a ``KeyError`` or a bare
``int()`` error, or a process that would wait for ranks that never come.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in a (possibly trivial) process group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """Whether more than one process trains."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs, validates and writes files."""
        return self.rank == 0

    def shard(self, index: np.ndarray) -> np.ndarray:
        """The contiguous share of a global batch of trajectory indices that belongs to this rank."""
        if index.size % self.world_size:
            raise ValueError(f"batch_size {index.size} is not divisible by the {self.world_size} processes")
        return index.reshape(self.world_size, -1)[self.rank]

    def barrier(self) -> None:
        """Wait for every rank (no-op for a single process)."""
        if self.enabled:
            dist.barrier()


TORCHRUN_SETS = "torchrun sets WORLD_SIZE, RANK and LOCAL_RANK for every process it starts"
"""What the errors about the variables say torchrun sets."""


def _integer_variable(name: str, environ: Mapping[str, str], low: int, high: int | None = None) -> int:
    """The environment variable ``name`` as an integer in [low, high] (``ValueError`` naming it and its value)."""
    text = environ[name]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ValueError(
            f"the environment variable {name}={text!r} must be {allowed} ({TORCHRUN_SETS}; "
            "unset WORLD_SIZE to train in one process)"
        )
    return value


def torchrun_variables(environ: Mapping[str, str] | None = None) -> DistContext:
    """The place of this process in torchrun's process group, read from ``environ`` (default ``os.environ``).

    The trivial context (one process) without ``WORLD_SIZE`` or with WORLD_SIZE=1; otherwise RANK
    must be set (module docstring).  Only reads: nothing is initialised.
    """
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" not in environ:
        return DistContext()
    world_size = _integer_variable("WORLD_SIZE", environ, low=1)
    if world_size == 1:
        return DistContext()
    if "RANK" not in environ:
        raise ValueError(
            f"the environment variable WORLD_SIZE={environ['WORLD_SIZE']!r} asks for {world_size} processes but RANK "
            f"is not set: {TORCHRUN_SETS}; start the run with torchrun --nproc_per_node={world_size} ..., or unset "
            "WORLD_SIZE to train in one process"
        )
    rank = _integer_variable("RANK", environ, low=0, high=world_size - 1)
    local_rank = _integer_variable("LOCAL_RANK", environ, low=0) if "LOCAL_RANK" in environ else 0
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank)


def init_distributed(device: torch.device) -> tuple[DistContext, torch.device]:
    """Join torchrun's process group when launched by it; returns the context and this rank's device.

    On CUDA every local rank gets its own GPU ``cuda:LOCAL_RANK``; on CPU the backend is gloo.  The
    variables are checked first (:func:`torchrun_variables`).
    """
    ctx = torchrun_variables()
    if not ctx.enabled:
        return ctx, device
    rank, world_size, local_rank = ctx.rank, ctx.world_size, ctx.local_rank
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank), device


def close_distributed(ctx: DistContext) -> None:
    """Leave the process group (after a final barrier) while the interpreter is fully alive.

    Garbage is collected before the barrier and after the group is destroyed, so that no
    DistributedDataParallel wrapper, pending work or tensor still referencing the gloo backend
    outlives this call: a backend torn down during interpreter finalisation can find its worker
    threads still joinable and abort the process (SIGABRT, "terminate called without an active
    exception") after a run that finished and saved everything.
    """
    if ctx.enabled and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
