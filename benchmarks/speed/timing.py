"""What every speed script shares: its command line, timed calls and rounds, one training step, thread counts.

Every script is ``python -m benchmarks.speed.<name> [CONFIG.json] [--set key=value ...]`` over a
configuration dataclass (:func:`parse_config`; :class:`TimedConfig` adds the rounds and the threads).

The scripts compare variants in one process: the tasks take turns within each round
(:func:`interleaved`), so that changes of a shared machine's load fall on all of them alike, and
they report medians.  A training step is the same everywhere (:func:`train_step`): the mean
cross-entropy of the model's logits against given labels, backward, and an optimizer step when
one is given.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch

from icrl_gym.config import POSITIVE_INT, DictConfig, check_fields, checked
from icrl_gym.utils.cli import ConfigParser

K = TypeVar("K")
C = TypeVar("C", bound=DictConfig)
T = TypeVar("T", bound="TimedConfig")


def parse_config(config: type[C], argv: list[str] | None) -> C:
    """A speed script's configuration from ``[CONFIG.json] [--set key=value ...]`` (``--help``: its docstring).

    ``config`` is the script's configuration class; the script is its module (as it was started).
    """
    module = sys.modules[config.__module__]
    name = module.__spec__.name if config.__module__ == "__main__" and module.__spec__ else config.__module__
    return ConfigParser(config, name, module.__doc__ or "").parse_config(argv)[0]


@dataclass
class RolloutSize(DictConfig):
    """The cached rollout a script times: ``instances`` runs of the paper model at once, for ``steps`` steps."""

    instances: int = checked(1000, POSITIVE_INT)
    """Instances rolled out at once."""
    steps: int = checked(200, POSITIVE_INT)
    """Steps of the rollout (T)."""


@dataclass
class TimedConfig(DictConfig):
    """What a script that times rounds in one process is told: the rounds and torch's CPU threads."""

    repeats: int = checked(3, POSITIVE_INT)
    """Timed rounds after one warm-up round."""
    threads: int = checked(1, POSITIVE_INT)
    """torch CPU threads."""

    def __post_init__(self) -> None:
        check_fields(self)  # every field's declared rule (the ``ValueError`` names the field, the value and the range)

    @classmethod
    def from_command_line(cls: type[T], argv: list[str] | None) -> T:
        """:func:`parse_config`, with torch's CPU threads set to ``threads``."""
        cfg = parse_config(cls, argv)
        torch.set_num_threads(cfg.threads)
        return cfg


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
