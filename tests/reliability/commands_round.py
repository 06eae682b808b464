"""Probes of the evaluation commands, the grid flags and the compiled-kernel cache.

Each probe tries one case a new user or an adversary would, and asserts a clear error naming the
problem or a case handled correctly (earlier results kept, a bad build never stored).
"""

from __future__ import annotations
