"""The reliability probes: every bad input and fault tried against the package, each with its verdict.

:mod:`tests.reliability.framework` is the machinery (what a probe is, how a verdict is reached, the
table); :mod:`tests.reliability.first_pass` (with ``first_pass_regressions``),
:mod:`tests.reliability.new_surfaces` (with ``new_surfaces_runtime`` and ``new_surfaces_tools``),
:mod:`tests.reliability.agents_round` and :mod:`tests.reliability.commands_round` register the
probes. ``tests/test_reliability_probes.py`` runs each as one pytest case, and

    python -m tests.reliability [--out docs/reliability-probes.md] [--fast]

prints the table (probe | behaviour | verdict, one table per surface) and the line ``N probes: X clear
error, Y handled, Z problem``; ``--out`` also writes them to a file, ``--fast`` skips the slow
probes.  The exit status is 1 when a probe that is not a known problem is a PROBLEM.
"""

from tests.reliability import (  # noqa: F401  (register the probes)
    agents_round,
    commands_round,
    first_pass,
    first_pass_regressions,
    new_surfaces,
    new_surfaces_runtime,
    new_surfaces_tools,
)
from tests.reliability.framework import PROBES

__all__ = ["PROBES"]
