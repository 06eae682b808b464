"""The torch device of a run, chosen by the caller ("auto", "cpu", "cuda", "cuda:1"), never a global."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icrl_gym.config import DEVICE

if TYPE_CHECKING:  # imported when a device is resolved: a sweep's driver names devices without loading torch
    import torch


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; ``"cpu"``, ``"mps"``, ``"cuda"``, ``"cuda:N"`` as named.

    The names are the ones every configuration admits (:data:`icrl_gym.config.DEVICE`, one rule for
    both); anything else is a ``ValueError`` naming them.  Asking for CUDA on a machine without it is
    a ``ValueError`` that says so, here rather than at the first tensor moved.
    """
    import torch

    if isinstance(device, torch.device):
        device = str(device)
    if not DEVICE.admits(device):
        raise ValueError(f"device must be {DEVICE}, got {device!r}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which is not available here (use 'auto' or 'cpu')")
    return resolved


def device_name(device: str = "auto") -> str:
    """The name of the device :func:`resolve_device` picks (``"cpu"``, ``"cuda"``, ``"cuda:1"``).

    ``"cpu"`` is named without importing torch, so a sweep's driver that only records where its
    workers play stays light; any other name is resolved (and checked) by :func:`resolve_device`.
    """
    return "cpu" if device == "cpu" else str(resolve_device(device))
