"""Playing a grid's rows: one common-random-numbers batch per row and cell, each finished row stored at once."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agents import make_agent
from benchmarks.experiments.grid.cells import MODEL, Cell, CellResult
from icrl_gym.checkpoint import CheckpointError
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditSpec, MDPSpec
from icrl_gym.registry import agent_class
from icrl_gym.utils.fileio import atomic_write_bytes


def total_regret(spec: BanditSpec | MDPSpec, agent: dict[str, Any], runs: int, seed: int) -> np.ndarray:
    """Per-run cumulative regret (runs,): one CRN batch of all runs, so every row meets the same instances.

    Bandits: R_T = sum_t (max_a mu_a - mu_{a_t}); MDPs: sum_k (V*_1(mu) - V^{pi_k}_1(mu)) over the K episodes.
    """
    if isinstance(spec, MDPSpec):
        return rollout_mdp(spec, agent, runs, seed=seed, batch_size=runs).episode_regret.sum(axis=1)
    return evaluate_regret(spec, make_agent(agent), runs, seed=seed, batch_size=runs).sum(axis=1)


def _slug(text: str) -> str:
    """A file name for a cell label (letters, digits, '.', '=' and '-' kept; the rest becomes '_')."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def _row_key(
    cell: Cell, label: str, agent: dict[str, Any], runs: int, seed: int, model_id: str | None
) -> dict[str, Any]:
    """What a stored row result must match to be reused: the environment, the row's agent, runs, seed, weights.

    The Gittins table folder is left out (a moved results folder still resumes), and so is the device a
    model plays on (CPU and CUDA play the same policy; the row file records which one played it); the
    model row is identified by its weights' sha256, not its checkpoint's path or name (a shipped copy
    of an evaluated checkpoint reuses its rows).  Rows are stored one by one, so a new model
    re-runs only its own rows and the references of every cell are computed once.
    """
    return {
        "cell": cell.label,
        "env": cell.spec.to_dict(),
        "runs": runs,
        "seed": seed,
        "row": label,
        "agent": {k: v for k, v in agent.items() if k not in ("cache_dir", "checkpoint", "device")}
        | ({"weights": model_id} if label == MODEL else {})
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
    return store / _slug(cell.label) / f"{_slug(label)}.json"


def _load_row(store: Path, cell: Cell, key: dict[str, Any]) -> tuple[np.ndarray | None, str | None] | None:
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


def _save_row(
    store: Path, cell: Cell, key: dict[str, Any], totals: np.ndarray | None, note: str | None, device: str
) -> None:
    """Write a finished row atomically: its key, per-run totals (JSON floats round-trip exactly), note and device."""
    path = _row_path(store, cell, key["row"])
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key, "totals": None if totals is None else totals.tolist(), "note": note, "device": device}
    atomic_write_bytes(path, json.dumps(record).encode())


def run_rows(
    cell: Cell,
    refs: dict[str, dict[str, Any]],
    model: dict[str, Any] | None,
    runs: int,
    seed: int,
    store: Path | None = None,
    model_id: str | None = None,
    optional: set[str] | frozenset[str] = frozenset(),
    compared: tuple[str, ...] | None = None,
    stored_only: bool = False,
) -> CellResult:
    """The reference rows ``refs``, then ``model`` (if any), on the same ``runs`` instances of ``cell``.

    A row that refuses the size (the model's range, a reference in ``optional`` or any reference of a
    cell beyond the trained range, e.g. by its memory estimate) is kept with its reason instead of
    numbers.  The best reference of the cell is the best of ``compared`` (default: every reference).
    With ``stored_only``, a row not in ``store`` is not played but kept as missing ("n/a: not run yet").
    With ``store``, every finished row is written there at once (atomically), and a stored
    row with the same environment, agent, runs, seed and model weights (``model_id``) is reused, so an
    interrupted grid resumes where it stopped and a new model re-runs only its own rows.
    """
    rows = {**refs, **({MODEL: model} if model is not None else {})}
    result = CellResult(cell, {}, references=tuple(refs) if compared is None else compared)
    for label, agent in rows.items():
        key = _row_key(cell, label, agent, runs, seed, model_id)
        if store is not None and (stored := _load_row(store, cell, key)) is not None:
            result.totals[label], note = stored
            if note is not None:
                result.notes[label] = note
            continue
        if stored_only:
            result.totals[label], result.notes[label] = None, "n/a: not run yet"
            continue
        may_refuse = label == MODEL or label in optional or not cell.in_range
        try:
            result.totals[label] = total_regret(cell.spec, agent, runs, seed)
        except ValueError as err:  # the size is beyond what this row can play: marked n/a
            if not may_refuse or isinstance(err, CheckpointError):  # a missing or damaged model is no size limit
                raise
            result.totals[label], result.notes[label] = None, f"n/a: {err}"
        if store is not None:
            _save_row(store, cell, key, result.totals[label], result.notes.get(label), agent.get("device", "cpu"))
    return result


def play_cells(
    cells: list[Cell], play: Callable[[Cell], CellResult], progress: Callable[[str], None] | None
) -> list[CellResult]:
    """``play(cell)`` for every cell in order; each finished cell's label and the seconds so far go to ``progress``."""
    start = time.perf_counter()
    results = []
    for cell in cells:
        results.append(play(cell))
        if progress is not None:
            progress(f"{cell.label} ({time.perf_counter() - start:.0f}s)")
    return results


def run_identity(name: str, runs: int, eval_seed: int, seed_offset: int) -> dict[str, Any]:
    """The ``config.json`` fields that say which instances a grid played (every cell: one CRN batch of all runs)."""
    return {
        "experiment": name,
        "runs": runs,
        "seed": eval_seed,
        "seed_note": f"every cell: crn_batches(seed={eval_seed}, batch_size=runs); training seeds < {seed_offset}",
    }
