"""A task store of files: each finished task's result in its own JSON file, with the key that made it.

A task that is kept here has a ``key`` (a JSON-able dict: everything its result depends on) and a
``store_path`` (its file, relative to the store's folder).  Its result is written atomically the
moment it arrives, and a later sweep with the same task (same key) reads it back instead of playing
it; a file with another key, or one that cannot be read, is played again.  Results are nested
dicts, lists, tuples (read back as lists), numbers, strings, ``None`` and numpy arrays (kept with
their dtype; JSON floats round-trip exactly).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from icrl_gym.utils.fileio import atomic_write_bytes

ARRAY = "__ndarray__"
"""The marker of an encoded numpy array: ``{ARRAY: values, "dtype": name}``."""


def encode(value: Any) -> Any:
    """``value`` as JSON-able data (arrays marked with their dtype)."""
    if isinstance(value, np.ndarray):
        return {ARRAY: value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def decode(value: Any) -> Any:
    """The value :func:`encode` made ``value`` from (tuples come back as lists)."""
    if isinstance(value, dict):
        if ARRAY in value:
            return np.asarray(value[ARRAY], dtype=value["dtype"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def _canonical(key: Any) -> Any:
    """``key`` as it reads back from JSON (tuples as lists), for comparison with a stored key."""
    return json.loads(json.dumps(key))


class FileTaskStore:
    """Task results in ``folder``, one file per task (its ``store_path``), reused when their key matches."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, task: Any) -> Path:
        """The file of ``task``."""
        return self.folder / task.store_path

    def load(self, task: Any) -> Any | None:
        """The stored result of ``task`` if its file holds one made with the task's key (else ``None``)."""
        return self.read(task.store_path, task.key)

    def save(self, task: Any, result: Any) -> None:
        """Write the task's key and result to its file, atomically."""
        self.write(task.store_path, task.key, result)

    def forget(self, task: Any) -> None:
        """Remove the task's file (once its result is kept elsewhere), and its folder when that is left empty."""
        self.remove(task.store_path)

    def read(self, name: str | Path, key: dict[str, Any]) -> Any | None:
        """The result in the file ``name`` if it was stored with ``key`` (else ``None``)."""
        try:
            stored = json.loads((self.folder / name).read_bytes())
            if stored["key"] != _canonical(key):
                return None
            return decode(stored["result"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing, partial or foreign: play the task again

    def write(self, name: str | Path, key: dict[str, Any], result: Any) -> None:
        """Write ``key`` and ``result`` to the file ``name``, atomically."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps({"key": key, "result": encode(result)}).encode())

    def remove(self, name: str | Path) -> None:
        """Remove the file ``name``, and its folder when that is left empty."""
        path = self.folder / name
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass  # not empty, or already gone
