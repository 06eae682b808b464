"""``python -m benchmarks`` (also ``icrl-bench``): the regret benchmark with the shipped models."""

from __future__ import annotations

from benchmarks.harness.cli import main

if __name__ == "__main__":
    main()
