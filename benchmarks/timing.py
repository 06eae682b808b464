"""Timing helpers of the speed benchmarks: one timed call, and interleaved rounds after a warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
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
