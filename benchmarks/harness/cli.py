"""The command line of ``python -m benchmarks`` / ``icrl-bench``: flags, the help, the entry point."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

from benchmarks.experiments.generalization.cells import FAMILIES, FAMILY_TITLES, GRID_EXPERIMENTS, GridExperiment
from benchmarks.experiments.mdp_generalization.cells import MDP_GRID_EXPERIMENTS, MDPGridExperiment
from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.harness.config import BenchConfig
from benchmarks.harness.report import redraw
from benchmarks.harness.runner import run
from icrl_gym.utils.cli import add_field_flags
from icrl_gym.utils.progress import set_quiet


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


def list_experiments() -> None:
    """``--list``: every experiment with its rows."""
    for exp in EXPERIMENTS.values():
        suite = "default" if exp.default else "opt-in"
        print(f"{exp.name:30s} [{suite}] {exp.title}\n{'':30s} algorithms: {', '.join(exp.algorithms)}")
    for grid in GRID_EXPERIMENTS.values():
        rows = [*grid.bernoulli_references, *grid.linear_references, *grid.mab_references, "generalist"]
        print(f"{grid.name:30s} [opt-in] {grid.title}\n{'':30s} algorithms: {', '.join(dict.fromkeys(rows))}")
    for mdp_grid in MDP_GRID_EXPERIMENTS.values():
        rows = [*mdp_grid.references, *mdp_grid.fixed_references, *mdp_grid.room_references, "MDP generalist"]
        print(f"{mdp_grid.name:30s} [opt-in] {mdp_grid.title}\n{'':30s} algorithms: {', '.join(dict.fromkeys(rows))}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of ``python -m benchmarks`` / ``icrl-bench``."""
    cfg = parse_args(argv)
    set_quiet(cfg.quiet)
    if cfg.list:
        list_experiments()
        return {}
    if cfg.plot_only:  # parse_args checked the saved results; nothing was touched before
        return redraw(Path(cfg.out))
    return run(cfg)
