"""``python -m benchmarks`` (also ``icrl-bench``): the regret benchmark with the shipped models.

The command line is imported only when this module runs as the program: a worker process started
with ``spawn`` imports this module again (as ``__mp_main__``) and needs none of it.
"""

from __future__ import annotations

if __name__ == "__main__":
    from benchmarks.harness.cli import main

    main()
