"""The prior and horizon an agent resolved at its last reset (``used``), recorded by ``config()`` as ``model_used``."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def per_instance_summary(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with per-run arrays recorded as "per instance" (JSON-ready, of fixed size)."""
    return {k: ("per instance" if np.ndim(v) else v) for k, v in values.items()}


def resolved(agent: object, value: T | None) -> T:
    """``value``, resolved at the agent's last reset; a ``RuntimeError`` saying to reset first while it is None."""
    if value is None:
        raise RuntimeError(f"{type(agent).__name__}: call reset() first")
    return value


class ResolvedModelMixin:
    """``used``: the values resolved at the last reset (set ``_used`` in ``_reset``), recorded by ``config()``."""

    name: str
    hyper_parameters: tuple[str, ...] = ()
    """The constructor's parameters, in the order ``config()`` records them (attributes of the same names)."""
    _used: dict[str, Any] | None = None

    @property
    def used(self) -> dict[str, Any]:
        """The horizon and prior resolved at the last reset."""
        return resolved(self, self._used)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (None: the environment's) and, after a reset, the values used (``model_used``)."""
        out = {"name": self.name, **{key: getattr(self, key) for key in self.hyper_parameters}}
        if self._used is None:
            return out
        return {**out, "model_used": per_instance_summary(self._used)}
