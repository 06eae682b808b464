"""Progress bars (tqdm) for the long loops: collection, training, evaluation, and log lines that leave them whole.

Bars go to stderr and only when stderr is a terminal, so logs and CI output stay clean;
:func:`set_quiet` (the ``--quiet`` flag of every command line) turns them off everywhere.
The switch is process-wide, like ``tqdm``'s own ``disable``: verbosity is a property of the
terminal session, not of one call.

A bar is redrawn in place on the terminal's last line (a carriage return, then the bar), so a log
line printed while it is drawn would start after the bar's text, and the next redraw would write
the bar over the log line.  :func:`log` prints a line without that collision: it clears every
drawn bar's line, prints the message on the clean line, then draws the bars again below it.  Where
no bar is drawn (not a terminal, or quiet) it is a plain ``print`` to stderr.
"""

from __future__ import annotations

import sys
from typing import TextIO

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


def log(message: str, file: TextIO | None = None) -> None:
    """Print one line to ``file`` (default: stderr, read at the call) without colliding with a progress bar.

    ``tqdm.write`` clears the line of every bar drawn on the terminal, writes the message and its
    newline on the cleared line, and redraws the bars after it, so the log line stands on a line of
    its own above the bar.  The stream is flushed, so the line shows at once in a pipe too.
    """
    stream = sys.stderr if file is None else file
    tqdm.write(message, file=stream)
    stream.flush()
