"""Small shared helpers for artefacts: atomic writes, strict dataclass (de)serialisation and field checks."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

T = TypeVar("T")
C = TypeVar("C", bound="DictConfig")  # typing.Self needs Python 3.11; the package supports 3.10


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


def dataclass_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys are an error, not silently dropped."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {unknown}; known fields are {sorted(known)}")
    return cls(**data)


class DictConfig:
    """Mixin of the configuration dataclasses: a JSON-ready dict and back, unknown keys an error."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Inverse of :meth:`to_dict` (unknown keys are an error, not silently dropped)."""
        return dataclass_from_dict(cls, data)


class RunLog:
    """Progress lines ``[HH:MM:SS] msg`` appended to a log file (``None``: none) and echoed to stderr."""

    def __init__(self, path: str | os.PathLike | None, echo: bool = True) -> None:
        self.path, self.echo = (Path(path) if path is not None else None), echo

    def __call__(self, msg: str) -> None:
        """Write one line."""
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(line + "\n")
        if self.echo:
            print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Allowed:
    """The values a configuration field accepts: a number in a range, one of a few words, or a pattern."""

    low: float = -math.inf
    """Smallest allowed number (excluded when ``strict``)."""
    high: float = math.inf
    """Largest allowed number."""
    strict: bool = False
    """Whether ``low`` itself is refused."""
    integer: bool = False
    """Whether the number must be an int."""
    choices: tuple[str, ...] = ()
    """The allowed words (then the bounds do not apply)."""
    pattern: str = ""
    """A regular expression the whole string must match, described by ``text``."""
    text: str = ""
    """How the allowed values read in the error (for ``pattern``)."""

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is allowed (never a bool for a number, never NaN or an infinity)."""
        if self.choices:
            return value in self.choices
        if self.pattern:
            return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None
        kind = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
            return False
        return (value > self.low if self.strict else value >= self.low) and value <= self.high

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        if self.pattern:
            return self.text or f"a string matching {self.pattern!r}"
        what = "an integer" if self.integer else "a finite number"
        low, high = (self._shown(self.low), self._shown(self.high))
        if self.low > -math.inf and self.high < math.inf:
            return f"{what} in {'(' if self.strict else '['}{low}, {high}]"
        if self.low > -math.inf:
            return f"{what} {'>' if self.strict else '>='} {low}"
        return f"{what} <= {high}" if self.high < math.inf else what

    def _shown(self, bound: float) -> str:
        """A bound as the error shows it: an integer field's in full (2**63 - 1 is not 9.22337e+18)."""
        return str(int(bound)) if self.integer and math.isfinite(bound) else f"{bound:g}"


POSITIVE_INT = Allowed(low=1, integer=True)
NONNEGATIVE_INT = Allowed(low=0, integer=True)
POSITIVE = Allowed(low=0, strict=True)
NONNEGATIVE = Allowed(low=0)
DEVICE = Allowed(pattern=r"auto|cpu|mps|cuda(:\d+)?", text="'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'")


def check_fields(config: Any, allowed: dict[str, Allowed]) -> None:
    """One ``ValueError`` naming every field of ``config`` that ``allowed`` refuses, its value and what is allowed."""
    name = type(config).__name__
    problems = [
        f"{name}.{field} must be {rule}, got {getattr(config, field)!r}"
        for field, rule in allowed.items()
        if not rule.admits(getattr(config, field))
    ]
    if problems:
        raise ValueError("; ".join(problems))
