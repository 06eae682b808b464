"""Benchmark harness: run the regret experiments, write CSV, plots, a Markdown summary and the config.

Every algorithm of an experiment runs on the same instances with the same noise (common random
numbers: one seed draws the instances and the noise, whatever the algorithm does), so regret
differences are differences of algorithms, not of luck.  Outputs in ``--out``:

- ``regret.csv``: per experiment, algorithm and step t, mean / std / standard error of the
  cumulative regret and of the per-step suboptimality <a*_t - a_t, w*> (for MDP experiments t is
  the episode k and the suboptimality is V* - the return of episode k);
- ``<experiment>.png``: cumulative regret (+-1 standard error) and per-step suboptimality, learned
  models solid, experts dashed (``benchmarks/plots.py``);
  ``distribution-ratio-difference.png``: regret(TF) - regret(TS) per alpha;
- ``summary.md``: regret at T/4, T/2 and T with standard errors, next to the paper's numbers;
- ``config.json``: the configuration, seed and model records that reproduce the run;
- ``index.html``: the results page, one self-contained file that opens with a summary (each
  experiment's best learned agent against its best expert, the generalists first) and holds every
  figure, table and the configuration (``benchmarks/results_page.py``);
- ``experiments/<experiment>.json``: the stored result of each experiment (its curves and the key
  that made them: environment, algorithm specifications, runs, seed, device of the learned rows, the
  sha256 of every checkpoint file they play and the package version, plus a sha256 of the whole).

Each experiment's result is written (atomically) as soon as it finishes, and running the same
command into the same folder again reuses every stored result whose key matches (logged as
reused), so a stopped run resumes and loses at most the experiment it was in.  A stored result with
another key is run again and replaced; one that fails its checksum is reported and run again, never
used.  ``--rerun`` ignores stored results.  The combined outputs (CSV, plots, summary, config) are
then rebuilt from the results, each file written atomically, and describe exactly the experiments of
this run: plots of experiments not in it are removed (their stored results stay in ``experiments/``
for a later run).  A grid experiment keeps its own folder (``benchmarks/evaluations/generalization.py``).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents import make_agent
from benchmarks.command_checks import check_out_folder, check_seed
from benchmarks.evaluations.generalization import (
    FAMILIES,
    FAMILY_TITLES,
    describe_range,
    grid_cells,
    run_generalization,
)
from benchmarks.evaluations.mdp_generalization import mdp_cells, run_mdp_generalization
from benchmarks.experiments import (
    EXPERIMENTS,
    GENERALISTS,
    GRID_EXPERIMENTS,
    LEARNED,
    MDP_GRID_EXPERIMENTS,
    Experiment,
    GridExperiment,
    MDPGridExperiment,
)
from benchmarks.plots import describe_env, plot, plot_files
from benchmarks.results_page import PAGE, Headline, Row, Section, regret_cell, write_page
from icrl_gym import __version__
from icrl_gym.checkpoint import (
    PRETRAINED_DIR,
    CheckpointKind,
    CheckpointRecord,
    checkpoint_files,
    read_record,
    resolve_checkpoint,
    save_checkpoint,
)
from icrl_gym.data.mdp_rollout import optimal_values, rollout_mdp
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditSpec, MDPSpec
from icrl_gym.envs.validation import MEMORY_ENV, max_memory_bytes
from icrl_gym.utils.cli import add_field_flags
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.progress import log, progress_bar, set_quiet


@dataclass
class BenchConfig:
    """Options of ``python -m benchmarks`` (each field is a command-line flag, its docstring the help)."""

    experiments: tuple[str, ...] = ("default",)
    """Experiments to run, comma-separated: their names (listed below), 'default' (the default suite: the paper's
    experiments and the generalists) or 'all'; --list also shows each experiment's rows."""
    runs: int = 500
    """Instances per algorithm (the paper uses 500; at least 2 for standard errors)."""
    seed: int = 0
    """Seed of the instances and noise, shared by all algorithms (the generalization grid plays seed
    30,000,000 + this, above every training seed, so 0 gives its documented instances)."""
    out: str = "results/latest"
    """Results folder (created; a run into it reuses the stored result of every experiment whose settings
    match, so a stopped run resumes, and replaces the other outputs)."""
    rerun: bool = False
    """Run every selected experiment again instead of reusing its stored result in --out."""
    threads: int = 1
    """torch CPU threads for the transformers.  The results do not depend on it.  One thread is the default:
    the models are small, so more threads mostly wait on each other, and lose time when other programs share
    the cores."""
    device: str = "cpu"
    """Device of the transformers: cpu, cuda or auto."""
    list: bool = False
    """List the experiments and exit."""
    quiet: bool = False
    """No progress bars (they are drawn only when stderr is a terminal)."""
    plot_only: bool = False
    """Re-draw plots and summary from the results folder --out, running nothing."""
    retrain: bool = False
    """Retrain every learned model with its shipped config first (slow: tens of minutes each on a CPU)."""
    retrain_steps: int = 0
    """With --retrain: a quick check -- N optimizer steps, fine-tuning iterations or PPO rollouts per
    model (0: the shipped configs' own budgets)."""

    generalist: str = ""
    """Checkpoint (path or shipped name) of the Bernoulli generalist in grid experiments ('': the shipped
    'bernoulli-generalist'; its rows are reported missing when there is none)."""
    linear_generalist: str = ""
    """Checkpoint of the linear generalist in grid experiments ('': the shipped 'linear-generalist')."""
    grid_families: tuple[str, ...] = ("bernoulli", "linear")
    """Cell families of the generalization grid to run, comma-separated (the families and what each holds:
    below)."""
    grid_arms: tuple[int, ...] = ()
    """Numbers of arms K of the grid's Bernoulli cells, replacing its own (comma-separated, e.g. 2,5,10; none:
    the grid's own, listed below)."""
    grid_horizons: tuple[int, ...] = ()
    """Horizons T of the grid's Bernoulli cells, replacing its own (comma-separated, e.g. 50,200; none: the
    grid's own, listed below)."""
    mdp_generalist: str = ""
    """Checkpoint of the MDP generalist in the MDP grid ('': the shipped 'tabular-mdp-generalist')."""
    mdp_cells: tuple[str, ...] = ("in-range", "fixed", "dark", "beyond")
    """Cell groups of the MDP grid to run, comma-separated (the groups and what each holds: below)."""

    def _names(self) -> list[str]:
        if self.experiments == ("all",):
            return [*EXPERIMENTS, *GRID_EXPERIMENTS, *MDP_GRID_EXPERIMENTS]
        if self.experiments == ("default",):
            return [e.name for e in EXPERIMENTS.values() if e.default]
        names = list(self.experiments)
        known = {**EXPERIMENTS, **GRID_EXPERIMENTS, **MDP_GRID_EXPERIMENTS}
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise ValueError(
                f"unknown experiment(s) {unknown or names}; choose from {sorted(known)}, 'default' or 'all'"
            )
        return names

    def selected(self) -> list[Experiment]:
        """The curve experiments named in ``experiments`` (clear error for unknown names)."""
        return [EXPERIMENTS[n] for n in self._names() if n in EXPERIMENTS]

    def selected_grids(self) -> list[GridExperiment]:
        """The grid experiments named in ``experiments`` (opt-in: never in 'default')."""
        return [GRID_EXPERIMENTS[n] for n in self._names() if n in GRID_EXPERIMENTS]

    def selected_mdp_grids(self) -> list[MDPGridExperiment]:
        """The MDP grid experiments named in ``experiments`` (opt-in: never in 'default')."""
        return [MDP_GRID_EXPERIMENTS[n] for n in self._names() if n in MDP_GRID_EXPERIMENTS]

    def validate(self) -> None:
        """Reject option values that cannot work (``ValueError`` naming the flag, the value and what is allowed)."""
        if self.runs < 2:
            raise ValueError(
                f"--runs must be >= 2, got {self.runs}: the standard error std/sqrt(n) uses the sample "
                "standard deviation (ddof=1), which needs at least two runs"
            )
        if self.retrain_steps < 0:
            raise ValueError(f"--retrain-steps must be >= 0, got {self.retrain_steps}")
        if self.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {self.threads}")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"--device must be cpu, cuda or auto, got {self.device!r}")
        self._names()
        self.check_grid_flags()
        check_seed(self.seed)
        out = Path(self.out)
        check_out_folder(out)
        missing = [name for name in ("regret.csv", "config.json") if not (out / name).is_file()]
        if self.plot_only and missing:
            raise ValueError(
                f"--plot-only re-draws saved results, but {out} has no {' or '.join(missing)}; "
                f"run the benchmark with --out {out} first"
            )
        if self.plot_only:
            load_saved(out)  # refuse damaged results before anything in the folder is touched
        else:
            self.check_memory()

    def check_grid_flags(self) -> None:
        """Refuse grid flags outside their range (``ValueError`` naming the flag, its value and the range).

        Checked whether or not a grid experiment is selected, so that a mistyped flag never passes
        unnoticed.  ``--grid-arms`` needs K >= 2: with one arm every row has regret 0, and the
        ratios to the best reference that the grid reports are undefined.  No flag may name a value
        twice (the same cells would be played and reported twice).
        """
        for flag, sizes, low in (("--grid-arms", self.grid_arms, 2), ("--grid-horizons", self.grid_horizons, 1)):
            if any(v < low for v in sizes):
                why = " (a bandit with one arm has no regret to compare)" if low == 2 else ""
                raise ValueError(f"{flag} takes integers >= {low}{why}, got {','.join(map(str, sizes))}")
        families = self.grid_families
        if not families or any(f not in FAMILIES for f in families):
            raise ValueError(f"--grid-families takes any of {', '.join(FAMILIES)}, got {','.join(families)!r}")
        groups = MDP_GRID_EXPERIMENTS["mdp-generalization"].groups
        if not self.mdp_cells or any(g not in groups for g in self.mdp_cells):
            raise ValueError(f"--mdp-cells takes any of {', '.join(groups)}, got {','.join(self.mdp_cells)!r}")
        for flag, values in (
            ("--grid-arms", self.grid_arms),
            ("--grid-horizons", self.grid_horizons),
            ("--grid-families", self.grid_families),
            ("--mdp-cells", self.mdp_cells),
        ):
            repeated = sorted({str(v) for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{flag} names {', '.join(repeated)} more than once, got {','.join(map(str, values))}")

    def check_memory(self) -> None:
        """Refuse ``--runs`` whose estimated memory (:func:`run_memory_bytes`) exceeds the limit, before any run."""
        specs = [e.spec for e in self.selected()]
        for grid in self.selected_grids():
            cells = grid_cells(grid, self.grid_families, self.grid_arms or None, self.grid_horizons or None)
            specs += [c.spec for c in cells]
        for mdp_grid in self.selected_mdp_grids():
            specs += [c.spec for c in mdp_cells(mdp_grid, self.mdp_cells)]
        if not specs:
            return
        spec = max(specs, key=lambda s: run_memory_bytes(s, self.runs))
        need, limit = run_memory_bytes(spec, self.runs), max_memory_bytes()
        if need > limit:
            raise ValueError(
                f"--runs {self.runs:,} needs about {need / 2**30:,.2f} GiB (estimate) for {describe_env(spec)}, above "
                f"the limit of {limit / 2**30:g} GiB; use fewer runs, or raise the limit with {MEMORY_ENV}"
            )


def run_memory_bytes(spec: BanditSpec | MDPSpec, runs: int) -> int:
    """Estimated memory of one experiment's rows on ``runs`` instances: the batch of instances and the curves.

    The instances are ``spec.memory_bytes(runs)``; the per-run regret of every step (float64) is
    held about four times while the curves are computed (regret, running sum, square and mean).
    """
    steps = spec.episodes if isinstance(spec, MDPSpec) else spec.horizon
    return spec.memory_bytes(runs) + 4 * 8 * runs * steps


def _numbers(values: tuple[int, ...] | list[int]) -> str:
    """``2, 3, 5``: integers as a reader lists them."""
    return ", ".join(str(v) for v in values)


def names_help() -> str:
    """The names a user can pass, with what each is: the ``--help`` epilog of ``python -m benchmarks``.

    Built from the experiments, grids, grid families, MDP cell groups and generalist rows themselves, so
    the help lists exactly what the command accepts.
    """
    width = 2 + max(len(n) for n in (*EXPERIMENTS, *GRID_EXPERIMENTS, *MDP_GRID_EXPERIMENTS))

    def rows(pairs: list[tuple[str, str]], indent: int = 4) -> list[str]:
        return [f"{' ' * indent}{name:{width}s}{text}" for name, text in pairs]

    lines = ["experiments (--experiments NAME,...; 'default': the default suite; 'all': every one below):"]
    lines += ["  default suite:", *rows([(e.name, e.title) for e in EXPERIMENTS.values() if e.default])]
    lines += ["  opt-in (run when named or with 'all'):"]
    lines += rows([(e.name, e.title) for e in EXPERIMENTS.values() if not e.default])
    grids: list[GridExperiment | MDPGridExperiment] = [*GRID_EXPERIMENTS.values(), *MDP_GRID_EXPERIMENTS.values()]
    lines += ["  grids (opt-in; each writes a folder of its own in --out):", *rows([(g.name, g.title) for g in grids])]
    grid = GRID_EXPERIMENTS["generalization"]
    lines += ["", "grid families (--grid-families, cells of the generalization grid):"]
    families = [
        (f, FAMILY_TITLES.get(f, f) + (" (default)" if f in BenchConfig.grid_families else "")) for f in FAMILIES
    ]
    lines += rows(families, 2)
    lines += [
        f"  Bernoulli cells: K in {_numbers(grid.arms)} and T in {_numbers(grid.horizons)}; beyond the trained "
        f"range K in {_numbers(grid.ood_arms)} and T in {_numbers(grid.ood_horizons)} (--grid-arms, --grid-horizons)"
    ]
    mdp = MDP_GRID_EXPERIMENTS["mdp-generalization"]
    s, a, h, k = mdp.fixed
    groups = {
        "in-range": f"random MDPs, S in {_numbers(mdp.states)} x A in {_numbers(mdp.actions)} x H in "
        f"{_numbers(mdp.horizons)} x K in {_numbers(mdp.episodes)} (K H <= {mdp.max_steps})",
        "fixed": f"S={s}, A={a}, H={h}, K={k}: the size of the fixed-size MDP transformers",
        "dark": "dark rooms " + ", ".join(f"{n}x{n} (H={rh}, K={rk})" for n, rh, rk in mdp.rooms),
        "beyond": f"S in {_numbers(mdp.beyond_states)}, A={mdp.beyond[0]}, H={mdp.beyond[1]}, K={mdp.beyond[2]}: "
        "beyond the trained range",
    }
    lines += ["", "MDP cell groups (--mdp-cells, cells of the mdp-generalization grid):"]
    lines += rows([(g, groups.get(g, "")) for g in mdp.groups], 2)
    models = [
        ("--generalist", grid.bernoulli_model["checkpoint"]),
        ("--linear-generalist", grid.linear_model["checkpoint"]),
        ("--mdp-generalist", mdp.model["checkpoint"]),
    ]
    lines += ["", "generalist models of the grids (a shipped name or a checkpoint path; by default the shipped one):"]
    lines += rows(models, 2)
    lines += [
        "",
        "outputs in --out: index.html (the results page: open it in a browser), regret.csv, summary.md, one plot per",
        "experiment and config.json; a grid writes its folder of its own.",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> BenchConfig:
    """The options as a :class:`BenchConfig`; values that cannot work are an argparse error (exit status 2)."""
    parser = argparse.ArgumentParser(
        prog="icrl-bench",
        description=textwrap.fill(
            "Regret of in-context learning agents and of the experts they learn from, on bandits and tabular "
            "MDPs (after Lin, Bai & Mei, ICLR 2024). Every algorithm of an experiment plays the same instances "
            "with the same noise; the results go to a folder with a self-contained results page (index.html).",
            100,
        ),
        epilog=names_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_field_flags(parser, BenchConfig)
    cfg = BenchConfig(**vars(parser.parse_args(argv)))
    try:
        cfg.validate()
    except ValueError as err:
        parser.error(str(err))
    return cfg


def _curves(regret: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, std and standard error over runs of cumulative regret and per-step suboptimality."""
    n = regret.shape[0]
    cum = regret.cumsum(axis=1)
    out = {}
    for key, x in (("cumulative_regret", cum), ("suboptimality", regret)):
        std = x.std(axis=0, ddof=1)
        out[f"{key}_mean"], out[f"{key}_std"], out[f"{key}_se"] = x.mean(axis=0), std, std / np.sqrt(n)
    return out


def played_specs(exp: Experiment, device: str, checkpoints: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The agent specification of every row as it is played.

    Learned rows get their checkpoint (a retrained model's path from ``checkpoints``, else the
    shipped name) and the device.
    """
    specs = {}
    for label, spec in exp.algorithms.items():
        spec = dict(spec)
        if spec["name"] in LEARNED:
            spec["checkpoint"] = (checkpoints or {}).get(spec["checkpoint"], spec["checkpoint"])
            spec["device"] = device
        specs[label] = spec
    return specs


def run_experiment(
    exp: Experiment, runs: int, seed: int, device: str, checkpoints: dict[str, str] | None = None, progress: Any = None
) -> dict[str, dict[str, np.ndarray]]:
    """Regret curves (per step for bandits, per episode for MDPs) of every algorithm on the same instances."""
    curves = {}
    for label, spec in played_specs(exp, device, checkpoints).items():
        agent = make_agent(spec)  # a learned agent checks its checkpoint against the environment at reset
        if isinstance(exp.spec, MDPSpec):  # regret per episode: V* - return of episode k
            regret = rollout_mdp(exp.spec, agent, runs, seed=seed, batch_size=runs).episode_regret
        else:  # regret per step: max_k <a_k, w*> - <a_t, w*>
            regret = evaluate_regret(exp.spec, agent, runs, seed=seed, batch_size=runs)
        curves[label] = _curves(regret)
        if progress is not None:
            progress(label)
    return curves


CURVE_KEYS = tuple(f"{q}_{s}" for q in ("cumulative_regret", "suboptimality") for s in ("mean", "std", "se"))
"""The curves of every algorithm, in the order of the CSV columns."""

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
    data = {"key": key, "sha256": _digest(key, lists), "curves": lists}
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


def _steps(exp: Experiment) -> int:
    """Length of the experiment's curves: steps T for a bandit, episodes K for an MDP."""
    return exp.spec.episodes if isinstance(exp.spec, MDPSpec) else exp.spec.horizon


def write_csv(path: Path, results: dict[str, dict[str, dict[str, np.ndarray]]]) -> None:
    """One row per (experiment, algorithm, t); the file is replaced atomically."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["experiment", "algorithm", "t", *CURVE_KEYS])
    for exp_name, curves in results.items():
        for label, c in curves.items():
            for t in range(c[CURVE_KEYS[0]].shape[0]):
                writer.writerow([exp_name, label, t + 1, *(f"{c[k][t]:.6g}" for k in CURVE_KEYS)])
    atomic_write_bytes(path, text.getvalue().encode())


class SavedResultsError(ValueError):
    """A saved ``regret.csv`` or ``config.json`` that cannot be re-drawn (the message names the file and the fault)."""


def read_csv(path: Path) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Inverse of :func:`write_csv`, checking every line before anything is built from it.

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
        exp = EXPERIMENTS[exp_name]
        for alg, c in algs.items():
            if len(c[CURVE_KEYS[0]]) != _steps(exp):
                raise damaged(f"{exp_name} / {alg} has {len(c[CURVE_KEYS[0]])} steps, expected {_steps(exp)}")
        absent = [
            label for label in (*exp.difference, *([exp.reference] if exp.reference else [])) if label not in algs
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


def summary_header(runs: int, seed: int) -> str:
    """The first lines of ``summary.md``."""
    return f"# icrl-gym benchmark\n\n{runs} runs per algorithm, seed {seed}, common random numbers.\n"


def experiment_summary(exp_name: str, curves: dict[str, dict[str, np.ndarray]], runs: int, seed: int) -> str:
    """One experiment's Markdown: regret at T/4, T/2 and T with standard errors, the paper's numbers, budgets."""
    exp = EXPERIMENTS[exp_name]
    horizon = next(iter(curves.values()))["cumulative_regret_mean"].size
    marks = [horizon // 4, horizon // 2, horizon]
    lines = [f"## {exp.title}\n"]
    if exp.note:
        lines.append(f"{exp.note}\n")
    unit = "k" if isinstance(exp.spec, MDPSpec) else "t"
    paper_column = " paper (t=200) |" if exp.paper else ""
    lines.append("| algorithm | " + " | ".join(f"regret at {unit}={m}" for m in marks) + " |" + paper_column)
    lines.append("|---|" + "---|" * (len(marks) + bool(exp.paper)))
    for label, c in curves.items():
        cells = [regret_cell(c["cumulative_regret_mean"][m - 1], c["cumulative_regret_se"][m - 1]) for m in marks]
        paper = exp.paper.get(label)
        tail = f" {'' if paper is None else paper} |" if exp.paper else ""
        lines.append(f"| {label} | " + " | ".join(cells) + " |" + tail)
    lines.append("")
    if isinstance(exp.spec, MDPSpec):
        lines.extend(_episode_return_table(exp.spec, curves, runs, seed))
    lines.extend(_budget_table(exp))
    return "\n".join(lines)


ORACLES = ("mdp_optimal",)
"""Agent names that play knowing the instance (regret 0 by construction): references, not experts to compare with."""


def experiment_headline(exp: Experiment, curves: dict[str, dict[str, np.ndarray]]) -> Headline:
    """The experiment's line of the results page's summary: its best learned row against its best expert row.

    Best is the lowest mean cumulative regret at the last step.  Learned rows play a checkpoint
    (:data:`LEARNED`); experts are the other rows except the :data:`ORACLES`.  The experiment counts
    as a generalist experiment when every learned row is a generalist (one model for every size).
    """
    final = {
        label: Row(label, float(c["cumulative_regret_mean"][-1]), float(c["cumulative_regret_se"][-1]))
        for label, c in curves.items()
    }
    agents = {label: exp.algorithms[label]["name"] for label in curves if label in exp.algorithms}
    learned = [final[label] for label, name in agents.items() if name in LEARNED]
    experts = [final[label] for label, name in agents.items() if name not in LEARNED and name not in ORACLES]
    unit = "k" if isinstance(exp.spec, MDPSpec) else "t"
    return Headline(
        at=f"{unit}={_steps(exp)}",
        learned=min(learned, key=lambda r: r.mean, default=None),
        expert=min(experts, key=lambda r: r.mean, default=None),
        generalist=bool(learned) and all(agents[r.label] in GENERALISTS for r in learned),
    )


def summary(results: dict[str, dict[str, dict[str, np.ndarray]]], runs: int, seed: int) -> str:
    """Markdown tables of every experiment (:func:`experiment_summary`) under one header."""
    parts = [summary_header(runs, seed), *(experiment_summary(n, c, runs, seed) for n, c in results.items())]
    return "\n".join(parts)


def training_budget(checkpoint: str) -> dict[str, Any]:
    """Environment steps and wall time that made a shipped model (read from its JSON record).

    Pretrained transformers count the distinct offline trajectories x T collected by the context
    algorithm; meta-RL policies count their online steps; a fine-tuned model adds its online
    steps to its base model's.  ``trained_range`` is the record's (the generalists': the sizes they
    were trained on; ``None`` for a model of one size).
    """
    record = read_record(resolve_checkpoint(checkpoint))
    return {**_budget(record), "trained_range": record.meta.get("trained_range")}


def _budget(record: CheckpointRecord) -> dict[str, Any]:
    """How a model was trained: ``how``, ``env_steps`` (``None``: not recorded), ``minutes`` and ``threads``."""
    meta = record.meta
    horizon = record.env.get("horizon", 0) * record.env.get("episodes", 1)
    training = meta.get("training", {})
    if record.kind in (CheckpointKind.GENERALIST_TRANSFORMER, CheckpointKind.LINEAR_GENERALIST_TRANSFORMER):
        return {  # trained online on sampled sizes; the record keeps optimizer steps, not environment steps
            "how": f"online imitation (DAgger) on sampled sizes, {training['steps']:,} steps",
            "env_steps": None,
            "minutes": training.get("wall_time_s", 0.0) / 60,
            "threads": training.get("threads"),
        }
    if record.kind is CheckpointKind.META_RL_POLICY:
        return {
            "how": f"online {meta['meta_rl']['algo']}",
            "env_steps": training["env_steps"],
            "minutes": training["wall_seconds"] / 60,
            "threads": training.get("threads"),
        }
    budget = {
        "how": "offline pretraining",
        "env_steps": training.get("distinct_trajectories", 0) * horizon,
        "minutes": training.get("wall_seconds", 0.0) / 60,
        "threads": training.get("threads"),
    }
    if "finetune" in meta:
        ft = meta["finetune"]
        cfg = ft["config"]
        budget["how"] = "offline pretraining + online fine-tuning"
        budget["env_steps"] += ft["best"]["iteration"] * cfg["runs_per_iteration"] * horizon
        budget["minutes"] += ft["wall_seconds"] / 60
    return budget


def _budget_table(exp: Experiment) -> list[str]:
    """The training budget of every learned row, and the sizes it was trained on where its record names them."""
    learned = {label: s["checkpoint"] for label, s in exp.algorithms.items() if s["name"] in LEARNED}
    if not learned:
        return []
    budgets = {label: training_budget(name) for label, name in learned.items()}
    ranged = any(b["trained_range"] for b in budgets.values())
    lines = [
        "Training budgets of the learned rows:\n",
        "| algorithm | model | training | env steps | wall minutes |" + (" trained on |" if ranged else ""),
        "|---|---|---|---|---|" + ("---|" if ranged else ""),
    ]
    for label, name in learned.items():
        b = budgets[label]
        steps = "not recorded" if b["env_steps"] is None else f"{b['env_steps']:,}"
        trained = f" {describe_range(b['trained_range'])} |" if ranged else ""
        lines.append(f"| {label} | {name} | {b['how']} | {steps} | {b['minutes']:.1f} |" + trained)
    lines.append("")
    return lines


def _episode_return_table(spec: MDPSpec, curves: dict[str, dict[str, np.ndarray]], runs: int, seed: int) -> list[str]:
    """Mean return of episodes 1, K/2 and K (V*-bar minus the per-episode regret) next to V*-bar."""
    v_bar = optimal_values(spec, runs, seed=seed, batch_size=runs).mean()
    K = spec.episodes
    ks = sorted({1, max(K // 2, 1), K})
    lines = [
        f"Return per episode (optimal mean V* = {v_bar:.2f}):\n",
        "| algorithm | " + " | ".join(f"return in episode {k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    for label, c in curves.items():
        cells = [f"{v_bar - c['suboptimality_mean'][k - 1]:.2f} +- {c['suboptimality_se'][k - 1]:.2f}" for k in ks]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def retrain_models(out: Path, experiments: list[Experiment], device: str, steps: int = 0) -> dict[str, str]:
    """Retrain every learned model the experiments use from its shipped config; returns name -> path.

    The config's fields tell the kind: ``algo`` an online meta-RL policy, ``base`` an online
    fine-tuning of another model, otherwise supervised pretraining.
    """
    # the training code is imported only when retraining: evaluating shipped models never loads it
    from icrl_gym.training.pretrain import PretrainConfig, export, pretrain

    config_dir = PRETRAINED_DIR / "configs"
    learned = {s["checkpoint"]: s["name"] for e in experiments for s in e.algorithms.values() if s["name"] in LEARNED}
    kept = sorted(name for name, agent in learned.items() if agent in GENERALISTS)
    if kept:  # hours each, resumable runs of their own trainers (README: Generalist agents)
        trainers = "icrl_gym.training.generalist, linear_generalist or mdp_generalist"
        _log(f"--retrain keeps the shipped {', '.join(kept)}: retrain them with {trainers}")
    names = sorted(name for name in learned if name not in kept)
    paths = {}
    for name in names:
        data = json.loads((config_dir / f"{name}.json").read_text())
        command = f"icrl-bench --retrain ({name})"
        if "algo" in data:  # an online meta-RL policy: steps cap its environment steps
            from icrl_gym.training.meta_rl import MetaRLConfig, export_policy, train

            data["device"] = device
            if steps > 0:  # a quick pipeline check: `steps` rollouts of 8 runs
                rollout = 8 * data.get("n_steps", 200)
                data.update(num_envs=8, batch_size=min(data.get("batch_size", rollout), rollout))
                data["max_env_steps"] = steps * rollout
            algo, meta = train(MetaRLConfig.from_dict(data), command=command)
            paths[name] = str(export_policy(algo, meta, out / "models" / name))
            continue
        if "base" in data:  # online fine-tuning of another model (retrained first when it is listed)
            from icrl_gym.training.finetune import FinetuneConfig, finetune

            data.update(out_dir=str(out / "training" / name), device=device, base=paths.get(data["base"], data["base"]))
            if steps > 0:  # a quick pipeline check
                data.update(iterations=steps, eval_every=steps, runs_per_iteration=32, val_runs=64)
            model, meta = finetune(FinetuneConfig.from_dict(data), command=command)
            paths[name] = str(save_checkpoint(out / "models" / name, model, meta))
            continue
        data.update(out_dir=str(out / "training" / name), device=device)
        if steps > 0:
            data.update(steps=steps, warmup_steps=min(data["warmup_steps"], steps), eval_every=steps)
        model, meta = pretrain(PretrainConfig.from_dict(data), command=command)
        paths[name] = str(export(model, meta, out / "models" / name))
    return paths


def _log(message: str) -> None:
    """One line on stderr, printed above the progress bar instead of over it (:func:`icrl_gym.utils.progress.log`)."""
    log(message)


def stored_or_run(
    exp: Experiment,
    runs: int,
    seed: int,
    device: str,
    store: Path,
    checkpoints: dict[str, str] | None = None,
    rerun: bool = False,
    progress: Any = None,
) -> tuple[dict[str, dict[str, np.ndarray]], bool]:
    """The experiment's curves, and whether they are a stored result that was reused.

    The stored result in ``store`` is reused when its key (:func:`experiment_key`) matches and not
    ``rerun``; otherwise the experiment runs and its result is stored at once (atomically).  A stored
    result made with another key is replaced; a corrupt one is reported and replaced, never used.
    """
    key = experiment_key(exp, runs, seed, device, checkpoints)
    if not rerun:
        try:
            stored = load_result(store, key, _steps(exp))
        except StoredResultError as err:
            _log(f"warning: {exp.name}: stored result not used: {err}; running it again")
        else:
            if stored is not None:
                return stored, True
            if (store / f"{exp.name}.json").exists():
                changed = ", ".join(_changed_fields(store, key)) or "the key"
                _log(f"{exp.name}: the stored result differs in {changed}; running it again")
    curves = run_experiment(exp, runs, seed, device, checkpoints, progress)
    save_result(store, key, curves)
    return curves, False


def remove_stale_outputs(out: Path, keep: set[str]) -> list[str]:
    """Remove the harness's top-level outputs in ``out`` not named in ``keep``; returns the removed names.

    The outputs are the plots of every experiment, ``regret.csv``, ``summary.md``, ``config.json`` and
    the results page;
    only these names are touched (stored results, retrained models and grid folders stay).
    """
    names = {"regret.csv", "summary.md", "config.json", PAGE, *(f for e in EXPERIMENTS.values() for f in plot_files(e))}
    removed = sorted(n for n in names - keep if (out / n).exists())
    for name in removed:
        (out / name).unlink()
    return removed


def write_figures(
    out: Path, results: dict[str, dict[str, dict[str, np.ndarray]]], runs: int, seed: int
) -> tuple[str, list[Section]]:
    """Draw the plots of ``results`` and write ``summary.md`` (each file atomically).

    Returns the summary and the sections of the results page (each experiment's plots and tables).
    """
    sections = []
    for name, curves in results.items():
        exp = EXPERIMENTS[name]
        plot(out, exp, curves, runs, seed)
        text = experiment_summary(name, curves, runs, seed)
        images = [out / f for f in plot_files(exp)]
        sections.append(Section(name, exp.title, text, images, experiment_headline(exp, curves)))
    text = "\n".join([summary_header(runs, seed), *(section.markdown for section in sections)])
    atomic_write_bytes(out / "summary.md", text.encode())
    return text, sections


def write_results_page(out: Path, sections: list[Section], config: dict[str, Any]) -> Path:
    """``out/index.html``: the sections, the grid experiments' folders in ``out`` and the configuration."""
    grids = [out / name for name in (*GRID_EXPERIMENTS, *MDP_GRID_EXPERIMENTS) if (out / name).is_dir()]
    return write_page(out, sections, config, grids)


def _outputs(results: dict[str, Any]) -> set[str]:
    """The top-level files that describe ``results``."""
    plots = {f for name in results for f in plot_files(EXPERIMENTS[name])}
    return {"regret.csv", "summary.md", "config.json", PAGE, *plots} if results else set()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of ``python -m benchmarks`` / ``icrl-bench``."""
    cfg = parse_args(argv)
    set_quiet(cfg.quiet)
    if cfg.list:
        for exp in EXPERIMENTS.values():
            suite = "default" if exp.default else "opt-in"
            print(f"{exp.name:30s} [{suite}] {exp.title}\n{'':30s} algorithms: {', '.join(exp.algorithms)}")
        for grid in GRID_EXPERIMENTS.values():
            rows = [*grid.bernoulli_references, *grid.linear_references, *grid.mab_references, "generalist"]
            print(f"{grid.name:30s} [opt-in] {grid.title}\n{'':30s} algorithms: {', '.join(dict.fromkeys(rows))}")
        for mdp_grid in MDP_GRID_EXPERIMENTS.values():
            rows = [*mdp_grid.references, *mdp_grid.fixed_references, *mdp_grid.room_references, "MDP generalist"]
            print(
                f"{mdp_grid.name:30s} [opt-in] {mdp_grid.title}\n{'':30s} algorithms: {', '.join(dict.fromkeys(rows))}"
            )
        return {}
    out = Path(cfg.out)
    experiments = cfg.selected()
    if cfg.plot_only:  # parse_args checked the saved results; nothing was touched before
        results, saved = load_saved(out)
        _, sections = write_figures(out, results, saved["runs"], saved["seed"])
        write_results_page(out, sections, saved)
        remove_stale_outputs(out, _outputs(results))
        print(f"re-drew plots, summary and {PAGE} in {out}")
        return results
    import torch

    torch.set_num_threads(cfg.threads)
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = retrain_models(out, experiments, cfg.device, cfg.retrain_steps) if cfg.retrain else {}
    results: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    reused: list[str] = []
    start = time.perf_counter()
    total = sum(len(e.algorithms) for e in experiments)
    done = 0
    bar = progress_bar(total, "benchmarks", unit="algorithm")
    for exp in experiments:

        def progress(label: str, exp: Experiment = exp) -> None:
            nonlocal done
            done += 1
            bar.update(1)
            elapsed = time.perf_counter() - start
            _log(f"[{done}/{total}] {exp.name}: {label} ({elapsed:.0f}s)")

        store = out / STORE
        results[exp.name], was_stored = stored_or_run(
            exp, cfg.runs, cfg.seed, cfg.device, store, checkpoints, cfg.rerun, progress
        )
        if was_stored:
            reused.append(exp.name)
            done += len(exp.algorithms)
            bar.update(len(exp.algorithms))
            _log(f"[{done}/{total}] {exp.name}: reused the stored result {store / exp.name}.json (same settings)")
    bar.close()
    elapsed = time.perf_counter() - start
    for grid in cfg.selected_grids():
        run_generalization(
            grid,
            out,
            cfg.runs,
            cfg.seed,
            checkpoint=cfg.generalist or None,
            linear_checkpoint=cfg.linear_generalist or None,
            families=cfg.grid_families,
            arms=cfg.grid_arms or None,
            horizons=cfg.grid_horizons or None,
            progress=lambda label, name=grid.name: _log(f"{name}: {label}"),
        )
        print(f"{grid.name}: results in {out / grid.name}/ (summary.md, cells.csv, checks.csv, heatmap-*.png)")
    for mdp_grid in cfg.selected_mdp_grids():
        run_mdp_generalization(
            mdp_grid,
            out,
            cfg.runs,
            cfg.seed,
            checkpoint=cfg.mdp_generalist or None,
            groups=cfg.mdp_cells,
            progress=lambda label, name=mdp_grid.name: _log(f"{name}: {label}"),
        )
        print(f"{mdp_grid.name}: results in {out / mdp_grid.name}/ (summary.md, cells.csv, checks.csv, heatmap-*.png)")
    if not experiments:  # the top-level outputs describe exactly this run's curve experiments: none
        remove_stale_outputs(out, set())
        return results
    text, sections = write_figures(out, results, cfg.runs, cfg.seed)
    write_csv(out / "regret.csv", results)
    record = {
        **dataclasses.asdict(cfg),
        "seconds": elapsed,
        "experiments_run": {e.name: {"env": e.spec.to_dict(), "algorithms": e.algorithms} for e in experiments},
        "reused": reused,
        "checkpoints": checkpoints or "shipped",
    }
    atomic_write_bytes(out / "config.json", json.dumps(record, indent=2).encode())
    write_results_page(out, sections, record)
    removed = remove_stale_outputs(out, _outputs(results))
    print(text)
    if removed:
        print(f"removed outputs of experiments not in this run: {', '.join(removed)}")
    print(f"finished in {elapsed:.0f}s; results in {out}/ (regret.csv, summary.md, *.png, config.json, {PAGE})")
    return results
