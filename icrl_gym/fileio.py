"""Small shared helpers for artefacts: atomic writes and strict dataclass (de)serialisation."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")
C = TypeVar("C", bound="DictConfig")  # typing.Self needs Python 3.11; the package supports 3.10


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path``, then rename it over ``path``.

    A crash or an exception mid-way leaves the previous file untouched and no temporary file.
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Atomically replace ``path`` by ``data``."""
    atomic_write(path, lambda fh: fh.write(data))


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


def config_command(
    module: str, description: str, config_cls: type[T], argv: list[str] | None
) -> tuple[T, str | None, str]:
    """The command line ``python -m MODULE CONFIG.json [--export PATH]``: (config, export path, command)."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("config", help=f"JSON file with {config_cls.__name__} fields")
    parser.add_argument("--export", default=None, help="write the result to this path (no suffix)")
    args = parser.parse_args(argv)
    cfg = config_cls.from_dict(json.loads(Path(args.config).read_text()))  # type: ignore[attr-defined]
    command = f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:])
    return cfg, args.export, command
