"""A grid's acceptance thresholds as ``checks.csv`` lines."""

from __future__ import annotations

from typing import Any

from benchmarks.experiments.grid.cells import Cell


def threshold_rows(cell: Cell, out: list[tuple[str, float | None, float | None]]) -> list[dict[str, Any]]:
    """One checks.csv line per (name, value, bound): a name '< ...' is strict, '<= ...' not; no bound: pass None."""
    rows = []
    for name, value, bound in out:
        strict = name.startswith("<") and not name.startswith("<=")
        passed = None if bound is None else (value < bound if strict else value <= bound)  # type: ignore[operator]
        rows.append({"cell": cell.label, "check": name, "value": value, "threshold": bound, "pass": passed})
    return rows
