"""The prior and horizon an agent resolved at its last reset (``used``), recorded by ``config()`` as ``model_used``."""

from __future__ import annotations

from typing import Any


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
        return out if self._used is None else {**out, "model_used": dict(self._used)}
