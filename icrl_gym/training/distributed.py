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
"""

from __future__ import annotations

import os
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


def init_distributed(device: torch.device) -> tuple[DistContext, torch.device]:
    """Join torchrun's process group when launched by it; returns the context and this rank's device.

    On CUDA every local rank gets its own GPU ``cuda:LOCAL_RANK``; on CPU the backend is gloo.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext(), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank), device


def close_distributed(ctx: DistContext) -> None:
    """Leave the process group (after a final barrier)."""
    if ctx.enabled and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
