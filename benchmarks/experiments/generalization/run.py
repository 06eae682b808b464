"""Run the generalization grid: a cell's references completed from it, the generalists, each row played or reused."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.executor.local import InlineExecutor
from benchmarks.executor.tasks import Executor
from benchmarks.experiments.generalization.cells import MODEL_OF, GridExperiment, grid_cells
from benchmarks.experiments.generalization.report import cell_fields, write_report
from benchmarks.experiments.grid.cells import Cell, CellResult
from benchmarks.experiments.grid.run import run_identity
from benchmarks.experiments.grid.tasks import CellPlan, plan_rows, play_plans
from benchmarks.experiments.models import model_available, model_record
from icrl_gym.checkpoint import read_record, resolve_checkpoint
from icrl_gym.envs import BanditPrior, BanditSpec

BETA_PRIOR_AGENTS = ("gittins", "bernoulli_ts", "bayes_ucb", "bernoulli_bayes_optimal")
"""The Beta-Bernoulli references: each is told a ``bernoulli-beta`` cell's prior (:func:`told_beta_prior`)."""


def _compared(exp: GridExperiment, cell: Cell) -> tuple[str, ...] | None:
    """The references that compete for a cell's best reference (``None``: all of them)."""
    return {
        "gaussian-mab": exp.mab_compared,
        "held-out": exp.held_out_compared,
        "in-family": exp.family_compared,
        "bernoulli-beta": exp.beta_compared,
    }.get(cell.family)


def _reference_specs(exp: GridExperiment, cell: Cell, cache_dir: Path) -> dict[str, dict[str, Any]]:
    """The reference rows of a cell, completed with what they need from it (Gittins: T, prior, cache)."""
    linear = {
        "linear": exp.linear_references,
        "gaussian-mab": exp.mab_references,
        "held-out": exp.held_out_references,
        "in-family": exp.family_references,
    }
    if cell.family in linear:
        return dict(linear[cell.family])
    spec = cell.spec
    assert isinstance(spec, BanditSpec), "bandit cells only"
    beta = cell.family == "bernoulli-beta"
    a, b = told_beta_prior(spec)
    out = {}
    for label, agent in (exp.beta_references if beta else exp.bernoulli_references).items():
        agent = dict(agent)
        if agent["name"] == "bernoulli_bayes_optimal" and (spec.num_actions not in exp.dp_arms or spec.prior.skewed):
            continue  # too large a table, or (skewed) Bayes-optimal for another prior than the cell's
        if agent["name"] == "gittins":
            agent.update(horizon=spec.horizon, prior_a=a, prior_b=b, cache_dir=str(cache_dir))
        elif beta and agent["name"] in BETA_PRIOR_AGENTS and "hyperprior" not in agent:  # a family row is not told
            agent.update(prior_a=a, prior_b=b)
        out[label] = agent
    return out


def told_beta_prior(spec: BanditSpec) -> tuple[float, float]:
    """The Beta(a, b) prior a reference is told in a Bernoulli cell: the cell's for a 'beta' prior, else Beta(1, 1).

    Beta(1, 1) is U[0, 1]: the uniform prior itself, and for a skewed prior (no Beta prior: each arm's
    mean is uniform on its own half of [0, 1]) the prior of the arm means averaged over the arms.
    """
    return (spec.prior_a, spec.prior_b) if spec.prior is BanditPrior.BETA else (1.0, 1.0)


def cell_rows(
    exp: GridExperiment, cell: Cell, cache_dir: Path
) -> tuple[dict[str, dict[str, Any]], set[str], tuple[str, ...] | None]:
    """A bandit cell's references, those of them that may refuse the size, and those compared for its best."""
    refs = _reference_specs(exp, cell, cache_dir)
    optional = {label for label, agent in refs.items() if agent["name"] == "bernoulli_bayes_optimal"}
    return refs, optional, _compared(exp, cell)


def plan_cell(
    exp: GridExperiment,
    cell: Cell,
    model: dict[str, Any] | None,
    runs: int,
    seed: int,
    cache_dir: Path,
    store: Path | None = None,
    model_id: str | None = None,
) -> CellPlan:
    """The rows of a bandit ``cell`` (the experiment's references, then the model): those stored, and those to play.

    The Bayes-optimal DP, the model, and every reference of a cell beyond the trained range (e.g. the
    Gittins table for T=1000: ~5 GiB and ~40 min to build) may refuse a size
    (:func:`~benchmarks.experiments.grid.tasks.plan_rows`).
    """
    refs, optional, compared = cell_rows(exp, cell, cache_dir)
    return plan_rows(cell, refs, model, runs, seed, store, model_id, optional, compared, False, exp.slice_runs)


def run_generalization(
    exp: GridExperiment,
    out: Path,
    runs: int,
    seed: int = 0,
    checkpoint: str | None = None,
    linear_checkpoint: str | None = None,
    families: tuple[str, ...] = ("bernoulli", "linear"),
    arms: tuple[int, ...] | None = None,
    horizons: tuple[int, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    executor: Executor | None = None,
) -> list[CellResult]:
    """Run the grid experiment into ``out/<exp.name>/`` (the package's docstring); returns the cells' results.

    ``families``: any of :data:`FAMILIES` (the Gaussian multi-armed bandits, the held-out and the
    in-family priors are played by the linear generalist).  ``checkpoint``/``linear_checkpoint``
    default to the experiment's shipped model names; ``arms`` and ``horizons`` replace the Bernoulli
    K and T lists (cells beyond the trained range stay marked).  Every cell uses the seed ``exp.seed_offset + seed``.
    Every row of every cell is played in slices of ``exp.slice_runs`` runs, the tasks of ``executor``
    (default: this process), and merged in the cells' and rows' order.
    """
    folder = out / exp.name
    folder.mkdir(parents=True, exist_ok=True)
    eval_seed = exp.seed_offset + seed
    cache_dir = folder / "gittins-cache"
    models: dict[str, dict[str, Any] | None] = {}
    missing: dict[str, str] = {}
    records: dict[str, Any] = {}
    weights: dict[str, str | None] = {}
    cells = grid_cells(exp, families, arms, horizons)
    for kind, spec, ckpt in (
        ("bernoulli", exp.bernoulli_model, checkpoint),
        ("linear", exp.linear_model, linear_checkpoint),
    ):
        name = ckpt or spec["checkpoint"]
        if model_available(name):
            models[kind] = {**spec, "checkpoint": name}
            records[kind] = model_record(name)
            weights[kind] = read_record(resolve_checkpoint(name)).meta.get("weights_sha256")
        else:
            models[kind] = None
            missing[kind] = f"no checkpoint {name!r}"
    start = time.perf_counter()
    store = folder / "cells"
    plans = []
    for cell in cells:
        kind = MODEL_OF[cell.family]
        model_id = weights[kind] if models[kind] else None
        plans.append(plan_cell(exp, cell, models[kind], runs, eval_seed, cache_dir, store, model_id))
    results = play_plans(plans, executor or InlineExecutor(), store, exp.slice_runs, progress, exp.name)
    config = {
        **run_identity(exp.name, runs, eval_seed, exp.seed_offset, exp.slice_runs),
        "families": list(families),
        "models": {f: models[MODEL_OF[f]] for f in families},
        "model_records": records,
        "missing": {f: missing[MODEL_OF[f]] for f in families if MODEL_OF[f] in missing},
        "grid": asdict(exp),
        "cells": [{**cell_fields(c), "env": c.spec.to_dict()} for c in cells],
        "seconds": time.perf_counter() - start,
    }
    write_report(exp, folder, results, config)
    return results
