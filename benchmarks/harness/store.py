"""Stored results: each finished experiment's curves in ``<out>/experiments/<name>.json``, with their key.

:class:`SuiteStore` is the default suite's task store (:class:`~benchmarks.executor.tasks.TaskStore`):
a row task's curves come from its experiment's stored result when that matches, else from the
row's own file in ``<out>/experiments/rows/<name>/`` (written the moment the row finished); an
experiment's result is written as soon as its last row is in, and its row files are then removed.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.executor.store import FileTaskStore
from benchmarks.executor.tasks import Curves, RowTask
from benchmarks.experiments.suite.cells import CURVE_KEYS, Experiment, steps
from benchmarks.experiments.suite.run import played_specs
from icrl_gym import __version__
from icrl_gym.checkpoint import checkpoint_files, resolve_checkpoint
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.progress import log
from icrl_gym.utils.provenance import software_environment

STORE = "experiments"
"""Subfolder of the results folder with one stored result per experiment (``<experiment>.json``)."""

STORE_FORMAT = 1
"""Version of the stored-result layout (part of the key: another layout is run again)."""


def _file_sha256(path: Path) -> str | None:
    """sha256 of a file's bytes (``None`` when it does not exist: playing it then fails with the usual error)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def experiment_key(
    exp: Experiment, runs: int, seed: int, device: str, checkpoints: dict[str, str] | None = None
) -> dict[str, Any]:
    """Everything that determines an experiment's result, as JSON: a stored result is reused only when it matches.

    The environment, every row's agent specification as played (:func:`played_specs`), runs, seed and
    the package version; a learned row is identified by the sha256 of its checkpoint's weights and
    record files, not by their path (a moved or copied checkpoint still matches, a changed one does not).
    """
    rows = {}
    for label, spec in played_specs(exp, device, checkpoints).items():
        if "checkpoint" in spec:
            weights, record = checkpoint_files(resolve_checkpoint(spec.pop("checkpoint")))
            spec.update(weights_sha256=_file_sha256(weights), record_sha256=_file_sha256(record))
        rows[label] = spec
    key = {
        "format": STORE_FORMAT,
        "package_version": __version__,
        "experiment": exp.name,
        "env_class": type(exp.spec).__name__,
        "env": exp.spec.to_dict(),
        "rows": rows,
        "runs": runs,
        "seed": seed,
    }
    return json.loads(json.dumps(key))  # tuples become lists, as when read back


def _digest(key: dict[str, Any], curves: dict[str, dict[str, list[float]]]) -> str:
    """sha256 of a stored result's key and curves (canonical JSON; floats round-trip exactly)."""
    return hashlib.sha256(json.dumps({"key": key, "curves": curves}, sort_keys=True).encode()).hexdigest()


def save_result(store: Path, key: dict[str, Any], curves: dict[str, dict[str, np.ndarray]]) -> Path:
    """Write one finished experiment's curves with its key and checksum to ``store/<experiment>.json`` (atomically)."""
    lists = {label: {k: np.asarray(c[k], dtype=np.float64).tolist() for k in CURVE_KEYS} for label, c in curves.items()}
    path = store / f"{key['experiment']}.json"
    data = {"key": key, "sha256": _digest(key, lists), "software": software_environment(), "curves": lists}
    atomic_write_bytes(path, json.dumps(data).encode())
    return path


class StoredResultError(ValueError):
    """A stored result that cannot be trusted (unreadable, or its checksum or shape does not match)."""


def load_result(store: Path, key: dict[str, Any], steps: int) -> dict[str, dict[str, np.ndarray]] | None:
    """The stored curves of the experiment of ``key`` if their key matches (``None``: none stored, or another key).

    Raises :class:`StoredResultError` when the file is corrupt: not JSON, its sha256 does not match
    its content, or its curves are not the key's rows with ``steps`` values each.
    """
    path = store / f"{key['experiment']}.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_bytes())
        stored_key, lists, digest = data["key"], data["curves"], data["sha256"]
    except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise StoredResultError(f"{path} is unreadable ({type(err).__name__}: {err})") from None
    if _digest(stored_key, lists) != digest:
        raise StoredResultError(f"{path} does not match its sha256: it was changed or damaged")
    if stored_key != key:
        return None
    if list(lists) != list(key["rows"]) or any(
        list(c) != list(CURVE_KEYS) or any(len(v) != steps for v in c.values()) for c in lists.values()
    ):
        raise StoredResultError(f"{path} does not hold {steps} values of every curve of the experiment's rows")
    return {label: {k: np.array(v, dtype=np.float64) for k, v in c.items()} for label, c in lists.items()}


def _changed_fields(store: Path, key: dict[str, Any]) -> list[str]:
    """The top-level key fields in which the stored result of ``key``'s experiment differs (for the log)."""
    try:
        stored = json.loads((store / f"{key['experiment']}.json").read_bytes())["key"]
        return [k for k in key if stored.get(k) != key[k]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def reusable(exp: Experiment, key: dict[str, Any], store: Path) -> dict[str, Curves] | None:
    """The stored curves of ``exp`` in ``store`` when their key is ``key`` (else ``None``, saying why)."""
    try:
        stored = load_result(store, key, steps(exp))
    except StoredResultError as err:
        log(f"warning: {exp.name}: stored result not used: {err}; running it again")
        return None
    if stored is None and (store / f"{exp.name}.json").exists():
        changed = ", ".join(_changed_fields(store, key)) or "the key"
        log(f"{exp.name}: the stored result differs in {changed}; running it again")
    return stored


ROWS = "rows"
"""Subfolder of the store with the finished rows of experiments not yet finished (``rows/<experiment>/``)."""


class SuiteStore:
    """The stored results of the curve experiments of one run, as a task store of their row tasks.

    An experiment whose stored result matches its key (:func:`experiment_key`) gives every row
    (unless ``rerun``); otherwise each row comes from its row file when that holds the row under
    the experiment's key, or is played and its row file written atomically the moment it finishes.
    The experiment's result is written as soon as its last row is in, and its row files removed, so
    a stopped run (an error, Ctrl-C, a kill) resumes with the rows it has not finished.
    """

    def __init__(
        self,
        folder: Path,
        experiments: list[Experiment],
        runs: int,
        seed: int,
        device: str,
        checkpoints: dict[str, str] | None = None,
        rerun: bool = False,
    ) -> None:
        self.folder = folder
        self.experiments = {exp.name: exp for exp in experiments}
        self.keys = {exp.name: experiment_key(exp, runs, seed, device, checkpoints) for exp in experiments}
        self.stored = {exp.name: None if rerun else reusable(exp, self.keys[exp.name], folder) for exp in experiments}
        self.rows: dict[str, dict[str, Curves]] = {}
        self.rerun = rerun
        self.partial = FileTaskStore(folder / ROWS)
        for name in self.reused():  # a run stopped between writing an experiment and removing its rows left them
            self._remove_rows(self.experiments[name])

    def reused(self) -> list[str]:
        """The experiments whose stored result is used whole, in order."""
        return [name for name, curves in self.stored.items() if curves is not None]

    def _row(self, experiment: str, label: str) -> tuple[Path, dict[str, Any]]:
        """The file of a row (numbered by its place in the experiment's rows) and the key it is stored under."""
        place = list(self.experiments[experiment].algorithms).index(label)
        name = f"{place:02d}-{re.sub(r'[^A-Za-z0-9.=-]+', '_', label).strip('_')}.json"
        return Path(experiment) / name, {**self.keys[experiment], "row": label}

    def load(self, task: RowTask) -> Curves | None:
        """The row's curves from its experiment's stored result if that is used, else from its row file."""
        stored = self.stored[task.experiment]
        if stored is not None:
            return stored[task.label]
        curves = None if self.rerun else self.partial.read(*self._row(task.experiment, task.label))
        if curves is not None:
            self._keep(task, curves)
        return curves

    def save(self, task: RowTask, curves: Curves) -> None:
        """Write the row's file; store its experiment (rows in its order) once every row of it is in."""
        self.partial.write(*self._row(task.experiment, task.label), curves)
        self._keep(task, curves)

    def _keep(self, task: RowTask, curves: Curves) -> None:
        """Hold the row; with the experiment's last row, write the experiment and remove its row files."""
        rows = self.rows.setdefault(task.experiment, {})
        rows[task.label] = curves
        exp = self.experiments[task.experiment]
        if len(rows) < len(exp.algorithms):
            return
        save_result(self.folder, self.keys[exp.name], {label: rows[label] for label in exp.algorithms})
        self._remove_rows(exp)

    def _remove_rows(self, exp: Experiment) -> None:
        """Remove the row files of ``exp`` (its result is stored whole), and the rows folder once it is empty."""
        for label in exp.algorithms:
            self.partial.remove(self._row(exp.name, label)[0])
        try:
            (self.folder / ROWS).rmdir()
        except OSError:
            pass  # other experiments' rows are still there
