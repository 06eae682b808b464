"""The torch device of a run, chosen by the caller ("auto", "cpu", "cuda", "cuda:1"), never a global."""

from __future__ import annotations

import torch


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; anything else is passed to ``torch.device``.

    Asking for CUDA on a machine without it is a ``ValueError`` that says so, here rather than at
    the first tensor moved.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which is not available here (use 'auto' or 'cpu')")
    return resolved
