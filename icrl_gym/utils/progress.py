"""Progress bars (tqdm) for the long loops: collection, training, evaluation.

Bars go to stderr and only when stderr is a terminal, so logs and CI output stay clean;
:func:`set_quiet` (the ``--quiet`` flag of every command line) turns them off everywhere.
The switch is process-wide, like ``tqdm``'s own ``disable``: verbosity is a property of the
terminal session, not of one call.
"""

from __future__ import annotations

import sys

from tqdm import tqdm  # type: ignore[import-untyped]

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Turn progress bars off (``True``) or back on where stderr is a terminal (``False``)."""
    global _quiet
    _quiet = quiet


def bars_enabled() -> bool:
    """Whether a progress bar would be drawn now: not quiet and stderr is a terminal."""
    return not _quiet and sys.stderr.isatty()


def progress_bar(total: int, desc: str, unit: str = "it", initial: int = 0) -> tqdm:
    """A tqdm bar on stderr, disabled when quiet or when stderr is not a terminal."""
    return tqdm(
        total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr, disable=not bars_enabled(), leave=False
    )
