"""The frontier's outputs: ``uninformed.csv`` / ``.json`` (Monte Carlo), ``frontier.csv`` / ``.json`` (exact)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.experiments.bernoulli_frontier.cells import BETA_GRID
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv


def write_uninformed(out: Path, rows: list[dict[str, Any]], config: dict[str, Any]) -> None:
    """``uninformed.csv`` (the Monte-Carlo rows) and ``uninformed.json`` (``config``, the priors); a line per row."""
    atomic_write_csv(out / "uninformed.csv", rows, list(rows[0]))
    run = {"arms": config["arms"], "horizon": config["horizon"], "priors": [list(p) for p in BETA_GRID]}
    run.update(runs=config["runs"], seed=config["seed"], model=config["model"], seconds=config["seconds"])
    atomic_write_bytes(out / "uninformed.json", json.dumps(run, indent=2).encode())
    for row in rows:
        label = f"K={row['num_arms']} Beta({row['a']:g}, {row['b']:g})"
        print(
            f"{label:>20} {row['policy']:>22} {row['mean']:8.2f} ± {row['se']:5.2f} ({row['ratio']:.2f}x told Gittins)"
        )


def write_frontier(out: Path, rows: list[dict[str, Any]], certificate: dict[str, Any], config: dict[str, Any]) -> None:
    """``frontier.csv`` (the exact rows) and ``frontier.json`` (the run and the certificate); the rows and c(pi)."""
    atomic_write_csv(out / "frontier.csv", rows, list(rows[0]))
    record = {
        "arms": config["arms"],
        "horizon": config["horizon"],
        "priors": [list(p) for p in BETA_GRID],
        "searches": config["searches"],
        "model": config["model"],
        "certificate": certificate,
        "seconds": config["seconds"],
    }
    atomic_write_bytes(out / "frontier.json", json.dumps(record, indent=2).encode())
    for row in rows:
        print(
            f"Beta({row['a']:g}, {row['b']:g}): told Gittins {row['told_gittins']:.4f}, told DP {row['told_dp']:.4f}, "
            f"family-Bayes {row['family_bayes']:.4f} ({row['family_bayes_ratio']:.3f}x told Gittins)"
        )
    c = certificate["best"]["c"]
    print(f"certificate: every policy not told the prior is >= {c:.4f}x told Gittins in some cell")
