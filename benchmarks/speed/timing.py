"""What every speed script shares: one timed call, interleaved rounds after a warm-up, one training step, thread counts.

The scripts compare variants in one process: the tasks take turns within each round
(:func:`interleaved`), so that changes of a shared machine's load fall on all of them alike, and
they report medians.  A training step is the same everywhere (:func:`train_step`): the mean
cross-entropy of the model's logits against given labels, backward, and an optimizer step when
one is given.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import torch

K = TypeVar("K")


def timed(fn: Callable[[], object], device: torch.device | None = None) -> float:
    """Wall seconds of ``fn()`` (waiting for CUDA work to finish when ``device`` is a GPU)."""
    start = time.perf_counter()
    fn()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def interleaved(
    tasks: Mapping[K, Callable[[], object]], repeats: int, device: torch.device | None = None
) -> dict[K, list[float]]:
    """Seconds of every task in each of ``repeats`` rounds, after a warm-up round that is not counted.

    The tasks take turns within a round, so changes of the machine's load hit them alike.
    """
    times: dict[K, list[float]] = {key: [] for key in tasks}
    for round_ in range(repeats + 1):
        for key, fn in tasks.items():
            seconds = timed(fn, device)
            if round_:
                times[key].append(seconds)
    return times


def train_step(
    model: torch.nn.Module,
    data: tuple[torch.Tensor, ...],
    optimizer: torch.optim.Optimizer | None = None,
    autocast: str = "none",
) -> None:
    """One training step: ``model(*data[:3])`` logits (B, T, A), mean cross-entropy against ``data[3]``, backward.

    With ``optimizer`` the step ends with ``optimizer.step()``; without one the gradients are only
    dropped (the cost of forward + backward alone).  ``autocast="bf16"`` runs the forward pass in
    bfloat16 (for GPUs).
    """
    ctx = torch.autocast(data[0].device.type, dtype=torch.bfloat16) if autocast == "bf16" else contextlib.nullcontext()
    with ctx:
        logits = model(*data[:3])[0]
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), data[3].flatten())
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    else:
        loss.backward()
        model.zero_grad(set_to_none=True)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch CPU threads (the previous count restored after it)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
