"""Checks of a finished run's ``regret.csv`` and ``config.json`` before anything is re-drawn from them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.experiments.suite.cells import CURVE_KEYS, EXPERIMENTS, steps


class SavedResultsError(ValueError):
    """A saved ``regret.csv`` or ``config.json`` that cannot be re-drawn (the message names the file and the fault)."""


def read_csv(path: Path) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Inverse of :func:`.report.write_csv`, checking every line before anything is built from it.

    Raises :class:`SavedResultsError` naming the file and the line when the header is not the
    harness's, a line names an unknown experiment, a step is not the next integer, a value is not a
    finite number, a curve's length is not the experiment's horizon, a row a difference plot needs
    is missing, or there is no data at all.
    """
    header = ["experiment", "algorithm", "t", *CURVE_KEYS]
    rows: dict[str, dict[str, dict[str, list[float]]]] = {}

    def damaged(problem: str) -> SavedResultsError:
        return SavedResultsError(f"{path} is not a regret.csv of the harness: {problem}")

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise damaged(f"it is not UTF-8 text ({err})") from None
    if text and not text.endswith("\n"):  # every line written ends with a newline: the file was cut
        raise damaged("its last line is incomplete (the file was truncated)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        first = next(reader, None)
        if first is None:
            raise damaged("it is empty")
        if first != header:
            raise damaged(f"its header is {first!r}, expected {','.join(header)}")
        for line in reader:
            where = f"line {reader.line_num}"
            if len(line) != len(header):
                raise damaged(f"{where} has {len(line)} fields, expected {len(header)}")
            exp, alg, t = line[:3]
            if exp not in EXPERIMENTS:
                raise damaged(f"{where} names the unknown experiment {exp!r}")
            c = rows.setdefault(exp, {}).setdefault(alg, {})
            if t != str(len(c.get(CURVE_KEYS[0], [])) + 1):
                raise damaged(f"{where}: step t={t!r} of {exp} / {alg} is not the next step")
            try:
                values = [float(v) for v in line[3:]]
            except ValueError:
                raise damaged(f"{where} holds a value that is not a number: {line[3:]!r}") from None
            if not all(np.isfinite(values)):
                raise damaged(f"{where} holds a value that is not finite: {line[3:]!r}")
            for k, v in zip(CURVE_KEYS, values, strict=True):
                c.setdefault(k, []).append(v)
    except csv.Error as err:
        raise damaged(f"it is not CSV ({err})") from None
    if not rows:
        raise damaged("it holds no results")
    for exp_name, algs in rows.items():
        experiment = EXPERIMENTS[exp_name]
        for alg, c in algs.items():
            if len(c[CURVE_KEYS[0]]) != steps(experiment):
                raise damaged(f"{exp_name} / {alg} has {len(c[CURVE_KEYS[0]])} steps, expected {steps(experiment)}")
        absent = [
            label
            for label in (*experiment.difference, *([experiment.reference] if experiment.reference else []))
            if label not in algs
        ]
        if absent:
            raise damaged(f"{exp_name} lacks the rows {absent} that its difference plot needs")
    return {e: {a: {k: np.array(v) for k, v in c.items()} for a, c in algs.items()} for e, algs in rows.items()}


def read_saved_config(path: Path) -> dict[str, Any]:
    """The ``config.json`` of a finished run, checked: a JSON object with ``runs`` >= 2 and ``seed`` >= 0 integers."""
    try:
        saved = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SavedResultsError(f"{path} is not a readable JSON file ({type(err).__name__}: {err})") from None
    if not isinstance(saved, dict):
        raise SavedResultsError(f"{path} is not a config.json of the harness: it holds a {type(saved).__name__}")
    for name, low in (("runs", 2), ("seed", 0)):
        value = saved.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise SavedResultsError(f"{path}: field {name!r} must be an integer >= {low}, got {value!r}")
    return saved


def load_saved(out: Path) -> tuple[dict[str, dict[str, dict[str, np.ndarray]]], dict[str, Any]]:
    """The results and configuration of the run saved in ``out`` (both checked; nothing is written)."""
    return read_csv(out / "regret.csv"), read_saved_config(out / "config.json")
