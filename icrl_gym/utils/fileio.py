"""Small shared helpers for artefacts: atomic writes, canonical JSON and content hashes, run logs.

Configuration classes and their field rules live in :mod:`icrl_gym.config`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from icrl_gym.utils import progress

T = TypeVar("T")


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path``, then rename it over ``path``.

    A crash or an exception mid-way leaves the previous file untouched and no temporary file; the
    file's data is fsynced before the rename and the folder after it, so a power cut after the
    return does not lose the new file either.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)  # mkstemp creates 0600; give the file the usual permissions instead
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(folder: Path) -> None:
    """Flush ``folder``'s entries (the rename) to disk; a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename itself is still atomic
    finally:
        os.close(fd)


def describe_size(path: str | os.PathLike) -> str:
    """``path`` and its size in MB, for the log line of a large artefact."""
    return f"{path} ({os.path.getsize(path) / 1e6:.1f} MB)"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Atomically replace ``path`` by ``data``."""
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write_csv(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]], fieldnames: Sequence[str]) -> None:
    """Atomically replace ``path`` by a CSV table: header ``fieldnames``, one line per row (no columns: empty)."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(fieldnames))
    if fieldnames:
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_bytes(path, text.getvalue().encode())


def canonical_json(value: Any) -> bytes:
    """The canonical JSON of ``value``: sorted keys, no whitespace, ASCII only (the bytes a content hash covers).

    Values that JSON changes (tuples, non-string keys) should be round-tripped through JSON first
    (see :func:`json_round_trip`) so that the writer hashes what a reader will parse.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def json_round_trip(value: T) -> T:
    """``value`` as a reader of its JSON will see it (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value))


CONTENT_HASH_FIELD = "content_sha256"
"""The field of a stored record (checkpoint, trajectory file) that holds its :func:`content_sha256`."""


def content_sha256(record: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> str:
    """SHA-256 (hex) over ``arrays`` and the canonical JSON of ``record`` without :data:`CONTENT_HASH_FIELD`.

    Every array counts with its name, dtype (byte order included), shape and C-order bytes, in the
    order of the names; then :func:`canonical_json` of the record, its own hash field left out.
    Any edit of a stored value, dtype, shape, name or record field changes the hash.
    """
    digest, arrays = hashlib.sha256(), arrays or {}
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(canonical_json([name, arr.dtype.str, list(arr.shape)]) + b"\n")
        if arr.size:
            digest.update(arr.reshape(-1).view(np.uint8).data)
    digest.update(canonical_json({k: v for k, v in record.items() if k != CONTENT_HASH_FIELD}))
    return digest.hexdigest()


class RunLog:
    """Progress lines ``[HH:MM:SS] msg`` appended to a log file (``None``: none) and echoed to stderr.

    The echo goes through :func:`icrl_gym.utils.progress.log`, so on a terminal it lands on a line of
    its own above the training's progress bar instead of on top of it.
    """

    def __init__(self, path: str | os.PathLike | None, echo: bool = True) -> None:
        self.path, self.echo = (Path(path) if path is not None else None), echo

    def __call__(self, msg: str) -> None:
        """Write one line."""
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(line + "\n")
        if self.echo:  # above a progress bar drawn on stderr, not over it
            progress.log(line)
