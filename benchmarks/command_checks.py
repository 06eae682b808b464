"""The checks every benchmark command makes of its arguments before any work starts.

The harness (``python -m benchmarks``) and the evaluation commands under ``benchmarks/evaluations``
share them, so that one bad argument reads the same in every command: an argparse error (exit
status 2, the message on stderr) that names the flag, its value and what is allowed, printed
before any instance is played, any table is built or any file is written.  A command that would
replace the results of an earlier run in its ``--out`` refuses unless ``--overwrite`` is given
(:func:`check_outputs_free`), so that a second run cannot silently lose the first one's.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def check_out_folder(out: Path, flag: str = "--out") -> None:
    """Refuse an output folder that is a file, lies below a file or cannot be created (``ValueError`` naming it).

    The nearest existing folder on the way to ``out`` must be writable: that is where the command
    creates what is missing.
    """
    for folder in (out, *out.parents):
        if not folder.exists():
            continue
        if not folder.is_dir():
            where = "is a file" if folder == out else f"lies below the file {folder}"
            raise ValueError(f"{flag} must be a folder (created if missing), but {out} {where}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {out}: {folder} is not writable")
        return


def check_seed(seed: int, flag: str = "--seed") -> None:
    """Refuse a negative seed (``ValueError`` naming the flag): numpy's generators take only seeds >= 0."""
    if seed < 0:
        raise ValueError(f"{flag} must be an integer >= 0 (numpy seeds are non-negative), got {seed}")


OVERWRITE_FLAG = "--overwrite"


def add_overwrite_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--overwrite``: the permission to replace the results of an earlier run in ``--out``."""
    parser.add_argument(
        OVERWRITE_FLAG,
        action="store_true",
        help="replace the results of an earlier run in --out (without it, a folder holding them is refused)",
    )


def check_outputs_free(out: Path, names: Iterable[str], overwrite: bool, flag: str = "--out") -> None:
    """Refuse to replace the files ``names`` of an earlier run in ``out`` unless ``overwrite`` (``ValueError``).

    Only the files this run would write are checked: a folder holding other results (say, the
    Monte-Carlo rows of an earlier run, where this one computes only the exact table) is accepted.
    """
    earlier = [name for name in names if (out / name).exists()]
    if earlier and not overwrite:
        listed = " and ".join([", ".join(earlier[:-1]), earlier[-1]] if len(earlier) > 1 else earlier)
        raise ValueError(
            f"{flag} {out} already holds {listed} of an earlier run; pass {OVERWRITE_FLAG} to replace "
            f"{'it' if len(earlier) == 1 else 'them'}, or choose another {flag}"
        )


def refuse_unless(parser: argparse.ArgumentParser, *checks: Callable[[], Any]) -> None:
    """Run ``checks`` in order; the first ``ValueError`` becomes ``parser.error`` (exit status 2, message on stderr)."""
    for check in checks:
        try:
            check()
        except ValueError as err:
            parser.error(str(err))
