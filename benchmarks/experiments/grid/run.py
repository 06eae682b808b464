"""A grid's rows: per-run total regret on a cell's common random numbers, and the store of finished rows.

Each finished row is kept in ``<grid>/cells/<cell>/<row>.json`` with what made it; the rows are
played as slices of runs (``tasks.py``), which are stored as they finish and joined into the row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.experiments.grid.cells import MODEL, Cell
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.data.pipeline import build_agent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditSpec, MDPSpec
from icrl_gym.registry import agent_class
from icrl_gym.utils.fileio import atomic_write_bytes


def total_regret(
    spec: BanditSpec | MDPSpec, agent: dict[str, Any], runs: int, seed: int, first_batch: int = 0
) -> np.ndarray:
    """Per-run cumulative regret (runs,): one CRN batch of all ``runs``, so every row meets the same instances.

    ``first_batch`` numbers that batch (a slice of a cell: batch i of its seed, ``crn_batches``).
    Bandits: R_T = sum_t (max_a mu_a - mu_{a_t}); MDPs: sum_k (V*_1(mu) - V^{pi_k}_1(mu)) over the K episodes.
    """
    if isinstance(spec, MDPSpec):
        rollouts = rollout_mdp(spec, agent, runs, seed=seed, batch_size=runs, first_batch=first_batch)
        return rollouts.episode_regret.sum(axis=1)
    return evaluate_regret(spec, build_agent(agent), runs, seed=seed, batch_size=runs, first_batch=first_batch).sum(
        axis=1
    )


def slug(text: str) -> str:
    """A file name for a cell label (letters, digits, '.', '=' and '-' kept; the rest becomes '_')."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def row_key(
    cell: Cell, label: str, agent: dict[str, Any], runs: int, seed: int, model_id: str | None, slice_runs: int
) -> dict[str, Any]:
    """What a stored row result must match to be reused: the environment, the row's agent, runs, seed, weights.

    And the runs per slice (the batch size of the common random numbers, capped at ``runs``): they
    decide which instances are played.

    The Gittins table folder is left out (a moved results folder still resumes), and so is the device a
    model plays on (CPU and CUDA play the same policy; the row file records which one played it); the
    model row (and any row whose agent names a checkpoint) is identified by its weights' sha256, not
    its checkpoint's path or name (a shipped copy of an evaluated checkpoint reuses its rows).  Rows
    are stored one by one, so a new model re-runs only its own rows and the references of every
    cell are computed once.
    """
    return {
        "cell": cell.label,
        "env": cell.spec.to_dict(),
        "runs": runs,
        "seed": seed,
        "crn_batch": min(runs, slice_runs),
        "row": label,
        "agent": {k: v for k, v in agent.items() if k not in ("cache_dir", "checkpoint", "device")}
        | ({"weights": model_id} if label == MODEL or "checkpoint" in agent else {})
        | _deployment(agent),
    }


def _deployment(agent: dict[str, Any]) -> dict[str, str]:
    """The default deployment an agent class states in words (``deployment``), if it states one.

    A learned agent's default way to act (greedy, sampled, a temperature schedule) is part of what a
    row played: a new default must re-play the row, though the agent's specification is unchanged.
    """
    deployment = getattr(agent_class(agent["name"]), "deployment", None)
    return {} if deployment is None else {"deployment": deployment}


def _row_path(store: Path, cell: Cell, label: str) -> Path:
    return store / slug(cell.label) / f"{slug(label)}.json"


def load_row(store: Path, cell: Cell, key: dict[str, Any]) -> tuple[np.ndarray | None, str | None] | None:
    """The stored (totals, note) of a row if its key matches ``key`` and its totals are whole; else ``None``."""
    try:
        stored = json.loads(_row_path(store, cell, key["row"]).read_text())
        if stored.get("key") != json.loads(json.dumps(key)):
            return None
        totals = None if stored["totals"] is None else np.asarray(stored["totals"], dtype=np.float64)
        note = stored.get("note")
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, partial or foreign: run the row again
    if totals is None and note is None or totals is not None and totals.shape != (key["runs"],):
        return None
    return totals, note


def save_row(
    store: Path, cell: Cell, key: dict[str, Any], totals: np.ndarray | None, note: str | None, device: str
) -> None:
    """Write a finished row atomically: its key, per-run totals (JSON floats round-trip exactly), note and device."""
    path = _row_path(store, cell, key["row"])
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key, "totals": None if totals is None else totals.tolist(), "note": note, "device": device}
    atomic_write_bytes(path, json.dumps(record).encode())


def run_identity(name: str, runs: int, eval_seed: int, seed_offset: int, slice_runs: int) -> dict[str, Any]:
    """The ``config.json`` fields that say which instances a grid played (every cell: CRN batches of a slice's runs)."""
    return {
        "experiment": name,
        "runs": runs,
        "seed": eval_seed,
        "slice_runs": slice_runs,
        "seed_note": f"every cell: crn_batches(seed={eval_seed}, batch_size=min(runs, {slice_runs})), one slice per "
        f"batch; training seeds < {seed_offset}",
    }
