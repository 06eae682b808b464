"""``python -m tests.reliability [--out FILE.md] [--fast]``: run every probe, print the table and the count line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.reliability import PROBES
from tests.reliability.framework import Verdict, report, run_probes, selected

HEADER = """# Reliability probes

Every bad input and fault tried against the package, with what it does now.  Written by
`python -m tests.reliability --out docs/reliability-probes.md`; `tests/test_reliability_probes.py`
runs each probe as a test.  A **clear error** is an exception of the expected type whose message
names the problem (quoted, shortened); **handled** means the case works as it should; a
**PROBLEM** is a silent wrong result, a crash or lost work (a probe marked *known* is left to the
part of the work named beside it, and its test is expected to fail until the fix lands).
"""


def main(argv: list[str] | None = None) -> int:
    """Run the probes, print the table and the count line; exit status 1 when an unknown problem is found."""
    parser = argparse.ArgumentParser(prog="python -m tests.reliability", description=__doc__)
    parser.add_argument("--out", metavar="FILE.md", help="also write the table and the count line to FILE.md")
    parser.add_argument("--fast", action="store_true", help="skip the slow probes (the benchmark runs)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    results = run_probes(selected(PROBES, args.fast), echo=lambda line: print(line, file=sys.stderr, flush=True))
    text = report(results)
    print(text)
    print(f"({time.perf_counter() - start:.0f}s)", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(HEADER + "\n" + text + "\n")
    return int(any(o.verdict is Verdict.PROBLEM and not p.known for p, o in results))


if __name__ == "__main__":
    sys.exit(main())
