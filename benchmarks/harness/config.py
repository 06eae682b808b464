"""The options of ``python -m benchmarks`` (:class:`BenchConfig`), and the checks they pass before any work."""

from __future__ import annotations

import builtins
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from benchmarks.command_checks import check_out_folder, check_seed
from benchmarks.executor.ray_executor import MISSING
from benchmarks.experiments.generalization.cells import FAMILIES, GRID_EXPERIMENTS, GridExperiment, grid_cells
from benchmarks.experiments.mdp_generalization.cells import MDP_GRID_EXPERIMENTS, MDPGridExperiment, mdp_cells
from benchmarks.experiments.suite.cells import EXPERIMENTS, Experiment
from benchmarks.experiments.suite.checks import load_saved
from benchmarks.experiments.suite.run import run_memory_bytes
from benchmarks.plots import describe_env
from icrl_gym.envs.validation import MEMORY_ENV, max_memory_bytes
from icrl_gym.utils.names import did_you_mean


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
    workers: int = 0
    """Worker processes that play the tasks (the algorithm rows; the grids' rows in slices of runs), each with one
    torch thread (0: the cores this process may use; 1: every task in this process, one after another, with
    --threads).  The results do not depend on it."""
    ray: str = ""
    """Play the tasks on a Ray cluster instead: 'auto' (the cluster this machine joined with
    'ray start'), 'local' (one started on this machine with --workers CPUs) or an address HOST:PORT; needs the
    'ray' extra (pip install -e ".[ray]")."""
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
    """Checkpoint of the linear generalist in grid experiments ('': the shipped 'linear-generalist-v1',
    the first version, trained on w* ~ U[0, 1]^d: the grid's in-range cells are its prior)."""
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

    def _names(self) -> builtins.list[str]:
        if self.experiments == ("all",):
            return [*EXPERIMENTS, *GRID_EXPERIMENTS, *MDP_GRID_EXPERIMENTS]
        if self.experiments == ("default",):
            return [e.name for e in EXPERIMENTS.values() if e.default]
        names = list(self.experiments)
        known = {**EXPERIMENTS, **GRID_EXPERIMENTS, **MDP_GRID_EXPERIMENTS}
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            hints = "".join(did_you_mean(n, known) for n in unknown)
            raise ValueError(
                f"unknown experiment(s) {unknown or names}{hints}; choose from {sorted(known)}, 'default' or 'all'"
            )
        return names

    def selected(self) -> builtins.list[Experiment]:
        """The curve experiments named in ``experiments`` (clear error for unknown names)."""
        return [EXPERIMENTS[n] for n in self._names() if n in EXPERIMENTS]

    def selected_grids(self) -> builtins.list[GridExperiment]:
        """The grid experiments named in ``experiments`` (opt-in: never in 'default')."""
        return [GRID_EXPERIMENTS[n] for n in self._names() if n in GRID_EXPERIMENTS]

    def selected_mdp_grids(self) -> builtins.list[MDPGridExperiment]:
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
        if self.workers < 0:
            raise ValueError(f"--workers must be >= 0 (0: the cores this process may use), got {self.workers}")
        if self.ray and importlib.util.find_spec("ray") is None:
            raise ValueError(f"--ray {self.ray}: {MISSING}")
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
