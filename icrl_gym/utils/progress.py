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
import time
from collections.abc import Callable, Sequence
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


def progress_bar(total: int, desc: str, unit: str = "it", initial: int = 0, bar_format: str | None = None) -> tqdm:
    """A tqdm bar on stderr, disabled when quiet or when stderr is not a terminal."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        initial=initial,
        file=sys.stderr,
        disable=not bars_enabled(),
        leave=False,
        bar_format=bar_format,
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


def duration(seconds: float) -> str:
    """``seconds`` as a person reads it: ``45s``, ``12m05s``, ``3h07m``."""
    whole = max(int(round(seconds)), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class WorkProgress:
    """One bar over a list of tasks of unequal size, whose time left is weighted by each task's estimated cost.

    Tasks played longest first finish ever faster, so a count-based rate (tqdm's own) overstates the
    time left for most of a sweep.  Here the rate is the estimated cost of the tasks finished so far
    (those reused from a store not counted) per second since the start, and the time left is the
    cost still to play at that rate: ``elapsed * left / finished``.  The estimate is only as good as
    the costs' ratios, and it ignores the tasks in flight, so early on it errs long.

    On a terminal the bar shows the count and that estimate.  Where no bar is drawn (a log file, a
    pipe) and not quiet, a plain line with the same figures goes to stderr at most every
    ``interval`` seconds, so a sweep run in the background still says how far it is.
    """

    BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} tasks [{elapsed}{postfix}]"

    def __init__(
        self,
        costs: Sequence[float],
        desc: str,
        finished: int = 0,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``costs``: the estimated cost of each task still to play; ``finished``: tasks already done (reused)."""
        self.desc = desc
        self.total = len(costs) + finished
        self.count = finished
        self.work = float(sum(costs))
        """The estimated cost of every task to play."""
        self.played = 0.0
        """The estimated cost of those finished."""
        self.interval = interval
        self.clock = clock
        self.start = self.last_line = clock()
        self.bar = progress_bar(self.total, desc, unit="task", initial=finished, bar_format=self.BAR_FORMAT)

    def left(self) -> float:
        """The estimated cost still to play."""
        return max(self.work - self.played, 0.0)

    def seconds_left(self) -> float | None:
        """The estimated seconds until the last task finishes (``None`` before the first played task)."""
        if self.played <= 0:
            return None
        return (self.clock() - self.start) * self.left() / self.played

    def status(self) -> str:
        """``desc: n/N tasks, P% of the estimated work, E elapsed, about L left``."""
        share = f", {100 * min(self.played / self.work, 1.0):.0f}% of the estimated work" if self.work > 0 else ""
        left = self.seconds_left()
        eta = "" if left is None else f", about {duration(left)} left"
        elapsed = duration(self.clock() - self.start)
        return f"{self.desc}: {self.count}/{self.total} tasks{share}, {elapsed} elapsed{eta}"

    def advance(self, cost: float) -> None:
        """One task of estimated ``cost`` has finished."""
        self.count += 1
        self.played += cost
        if not self.bar.disable:
            left = self.seconds_left()
            self.bar.set_postfix_str("" if left is None else f"about {duration(left)} left", refresh=False)
            self.bar.update(1)
        elif not _quiet and self.clock() - self.last_line >= self.interval:
            self.last_line = self.clock()
            log(self.status())

    def close(self) -> None:
        """Remove the bar from the terminal."""
        self.bar.close()
