"""What every in-context transformer returns: the policy's logits and, where the model has one, its value head."""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor


class PolicyOutput(NamedTuple):
    """Read-out of a decoder policy, from ``forward`` (B, T, A) or from one rollout ``step`` (B, A).

    ``Alg_theta(. | D_{t-1}, s_t) = softmax(logits)``; ``values`` regresses an expert's per-arm index
    (the bandit model's auxiliary head) and is None for a model without a value head.  A tuple, so
    ``logits, values = model(...)`` unpacks it.
    """

    logits: Tensor
    """Policy logits over the A actions."""
    values: Tensor | None
    """Per-action values of the auxiliary head, or None."""
