"""The deployments' outputs: ``deployment.csv``, ``config.json`` and one printed line per row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.experiments.mdp_deployment.cells import DEPLOYMENTS
from benchmarks.experiments.rows import mdp_generalist
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv
from icrl_gym.utils.provenance import software_environment


def write_deployment(
    out: Path,
    rows: list[dict[str, Any]],
    cells: tuple[tuple[int, int, int, int], ...],
    runs: int,
    seed: int,
    checkpoint: str | None,
    seconds: float,
) -> None:
    """``deployment.csv`` (a line per cell and deployment) and ``config.json`` in ``out``; a line per row."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(out / "deployment.csv", rows, list(rows[0]))
    config = {
        "cells": [list(c) for c in cells],
        "runs": runs,
        "seed": seed,
        "checkpoint": checkpoint or mdp_generalist()["checkpoint"],
        "deployments": DEPLOYMENTS,
        "seconds": seconds,
        "software": software_environment(),
    }
    atomic_write_bytes(out / "config.json", json.dumps(config, indent=2).encode())
    for row in rows:
        mean, se, ratio = row["mean"], row["se"], row["ratio_psrl"]
        tails = f"p99 {row['p99']:7.2f} ({row['p99_ratio_psrl']:.2f}x), failures {row['failures']:.3f}"
        print(f"{row['cell']:>16} {row['row']:>20} {mean:8.2f} ± {se:5.2f}  {ratio:.2f}x PSRL  {tails}")
