"""The prior and horizon an agent resolved at its last reset (``used``), recorded by ``config()`` as ``model_used``."""

from __future__ import annotations

from typing import Any

import numpy as np


def per_instance_summary(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with per-run arrays recorded as "per instance" (JSON-ready, of fixed size)."""
    return {k: ("per instance" if np.ndim(v) else v) for k, v in values.items()}


class ResolvedModelMixin:
    """``used``: the values resolved at the last reset (set ``_used`` in ``_reset``); ``config()`` records them."""

    _used: dict[str, Any] | None = None

    @property
    def used(self) -> dict[str, Any]:
        """The horizon and prior resolved at the last reset."""
        if self._used is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() first")
        return self._used

    def _with_used(self, out: dict[str, Any]) -> dict[str, Any]:
        """``out`` (the hyper-parameters) with ``model_used`` added once the agent has been reset."""
        if self._used is None:
            return out
        return {**out, "model_used": per_instance_summary(self._used)}
