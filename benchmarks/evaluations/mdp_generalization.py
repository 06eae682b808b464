"""The ``mdp-generalization`` experiment: the MDP generalist against PSRL and the Bayes DPT policy over MDP sizes.

Cell groups (``--cells``, any of; :data:`benchmarks.experiments.MDP_GENERALIZATION` holds the sizes):

- ``in-range``: random MDPs of the training prior's default (stationary, Dirichlet(1) transitions,
  Bernoulli rewards with uniform means, start state 0), S in {3, 5, 10, 20} x A in {2, 4, 6} x
  H in {5, 10, 20} x K in {5, 20, 50} (every T = K H <= 1000);
- ``fixed``: the fixed-size MDP transformers' size (S, A, H, K) = (5, 3, 10, 20), with twice the runs;
- ``dark``: dark rooms 5x5 (H=20, K=10), 8x8 (H=50, K=4), 10x10 (H=100, K=4), 12x12 (H=100, K=4);
- ``beyond``: S in {30, 50}, A=3, H=50, K=100 (beyond the trained range).  The Bayes DPT rows are
  left out there: they solve 32 posterior MDPs at every step (hours per cell at S=50).

In a cell every row plays the same instances with the same noise (common random numbers: one
:func:`~icrl_gym.data.mdp_rollout.rollout_mdp` batch of all runs under the cell's seed, disjoint
from training seeds), so per-run regret differences are paired.  Rows: the model (its agent's
default deployment: tempered draws then the argmax on random MDPs, sampled in rooms), PSRL (DarkRoom PSRL in dark
rooms), the greedy Bayes DPT policy on the same posterior (also the sampled one at the fixed size and
in dark rooms), UCB-VI and soft UCB-VI (bonus x0.01), uniform and optimal play.  For every row: the
mean regret sum_k (V*_1(mu) - V^{pi_k}_1(mu)) and its standard error; for the model the paired
differences to PSRL and to the greedy Bayes DPT policy (with standard errors) and the ratios of means.
Tails, per row: the 99th percentile of per-run regret, its ratio to the best reference's (the best of
the compared rows: PSRL, the Bayes DPT policies, the UCB-VI rows) and the fraction of runs whose
regret exceeds both 3x the best reference's on the same instance and 20.

Outputs in ``<out>/mdp-generalization/``: ``cells.csv``, ``checks.csv`` (the acceptance bounds),
``summary.md``, ``heatmap-psrl.png`` and ``heatmap-bayes-dpt.png`` (the model's ratios, cells beyond
the range hatched) and ``config.json``.  Every finished row is written at once under ``cells/`` with
what made it (environment, agent, runs, seed, the model's weights' sha256), so a stopped grid
resumes, and a new checkpoint re-runs only the model's rows (a second run into the same ``--out`` keeps
every row it stored).  The command line checks its arguments (``--seed``, ``--shard``, ``--device``,
the runs' memory in every cell, ``--out``) before the first cell is played.  Run as::

    OMP_NUM_THREADS=1 python -m benchmarks.evaluations.mdp_generalization --checkpoint CKPT --cells fixed dark
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.command_checks import check_out_folder, check_seed, refuse_unless
from benchmarks.evaluations.generalization import (
    MODEL,
    Cell,
    CellResult,
    checks_table,
    describe_range,
    heatmap,
    model_available,
    model_record,
    play_cells,
    run_identity,
    run_rows,
    tails_table,
    write_checks_csv,
)
from benchmarks.evaluations.pretrained_eval import mean_se
from benchmarks.experiments import MDP_GENERALIZATION, MDPGridExperiment
from icrl_gym.checkpoint import read_record, resolve_checkpoint
from icrl_gym.envs import MDPKind, MDPSpec, dark_room_spec
from icrl_gym.envs.validation import check_memory
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.device import resolve_device
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv

FIXED_SIZE_FIGURE = 13.3
"""Regret of the fixed-size DPT transformer at (5, 3, 10, 20) (its shipped record), the bound at that size."""
ROOM_FIGURE = (10, 100, 4, 251.9)
"""Size, H, K and regret of the fixed-size dark-room DPT transformer, the bound in that room."""


def _random_cell(panel: str, row: str, size: tuple[int, int, int, int], in_range: bool = True) -> Cell:
    """The cell of the random-MDP prior of size (S, A, H, K), the other prior fields at their defaults."""
    S, A, H, K = size
    spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
    return Cell("mdp", panel, row, f"H={H}, K={K}", spec, in_range, True)


def mdp_cells(exp: MDPGridExperiment, groups: tuple[str, ...] | list[str]) -> list[Cell]:
    """The cells of ``groups`` (module docstring), family 'mdp'."""
    out: list[Cell] = []
    for group in groups:
        if group == "in-range":
            out += [
                _random_cell(f"random MDPs, A={A}", f"S={S}", (S, A, H, K))
                for A in exp.actions
                for S in exp.states
                for H in exp.horizons
                for K in exp.episodes
                if K * H <= exp.max_steps
            ]
        elif group == "fixed":
            S, A = exp.fixed[:2]
            out.append(_random_cell(FIXED_PANEL, f"S={S}, A={A}", exp.fixed))
        elif group == "dark":
            out += [
                Cell("mdp", "dark rooms", f"{n}x{n}", f"H={H}, K={K}", dark_room_spec(n, H, K), True, True)
                for n, H, K in exp.rooms
            ]
        elif group == "beyond":
            A, H, K = exp.beyond
            out += [
                _random_cell(f"beyond the range (A={A})", f"S={S}", (S, A, H, K), in_range=False)
                for S in exp.beyond_states
            ]
        else:
            raise ValueError(f"unknown cell group {group!r}; the groups are {exp.groups}")
    return out


FIXED_PANEL = "fixed size"
"""Panel of the fixed-size cell (played with ``fixed_runs_factor`` times the runs)."""


def cell_runs(exp: MDPGridExperiment, cell: Cell, runs: int) -> int:
    """Runs of ``cell``: ``runs``, times ``fixed_runs_factor`` at the fixed size."""
    return runs * (exp.fixed_runs_factor if cell.panel == FIXED_PANEL else 1)


def is_room(cell: Cell) -> bool:
    """Whether ``cell`` is a dark room."""
    return isinstance(cell.spec, MDPSpec) and cell.spec.kind is MDPKind.DARK_ROOM


def references(exp: MDPGridExperiment, cell: Cell) -> dict[str, dict[str, Any]]:
    """The reference rows of a cell (module docstring)."""
    if is_room(cell):
        return dict(exp.room_references)
    if not cell.in_range:
        return {k: v for k, v in exp.references.items() if k in exp.beyond_references}
    return {**exp.references, **(exp.fixed_references if cell.panel == FIXED_PANEL else {})}


def psrl_row(exp: MDPGridExperiment, cell: Cell) -> str:
    """PSRL's row name in the cell (DarkRoom PSRL in dark rooms)."""
    return exp.psrl[1] if is_room(cell) else exp.psrl[0]


def anchored(result: CellResult, anchor: str) -> dict[str, float] | None:
    """The model's paired difference (mean, s.e.) to row ``anchor`` and the ratio of means (``None``: a row missing)."""
    model, ref = result.totals.get(MODEL), result.totals.get(anchor)
    if model is None or ref is None:
        return None
    diff = mean_se(model - ref)
    return {"diff": diff["mean"], "diff_se": diff["se"], "ratio": float(model.mean() / ref.mean())}


def checks(exp: MDPGridExperiment, result: CellResult) -> list[dict[str, Any]]:
    """The acceptance bounds on one cell: <= 0.80x PSRL and <= 1.10x greedy Bayes DPT in range, <= 0.90x PSRL beyond."""
    cell, model = result.cell, result.totals.get(MODEL)
    if model is None:
        return []
    value = float(model.mean())
    psrl = result.totals.get(psrl_row(exp, cell))
    bdpt = result.totals.get(exp.bayes_dpt)
    bounds: list[tuple[str, float | None]] = []
    room = is_room(cell)
    if cell.in_range:
        bounds.append(("<= 0.80 x PSRL", None if psrl is None else 0.80 * float(psrl.mean())))
        if not room:
            bounds.append(("<= 1.10 x greedy Bayes DPT", None if bdpt is None else 1.10 * float(bdpt.mean())))
    else:
        bounds.append(("<= 0.90 x PSRL", None if psrl is None else 0.90 * float(psrl.mean())))
    spec = cell.spec
    assert isinstance(spec, MDPSpec)
    if cell.panel == FIXED_PANEL:
        bounds.append((f"<= {FIXED_SIZE_FIGURE} (fixed-size DPT model)", FIXED_SIZE_FIGURE))
    n, H, K, figure = ROOM_FIGURE
    if room and (spec.size, spec.horizon, spec.episodes) == (n, H, K):
        bounds.append((f"<= {figure} (fixed-size dark-room model)", figure))
    return [
        {
            "cell": cell.label,
            "check": name,
            "value": value,
            "threshold": bound,
            "pass": None if bound is None else value <= bound,
        }
        for name, bound in bounds
    ]


def _fmt(values: np.ndarray | None) -> str:
    if values is None:
        return "n/a"
    st = mean_se(values)
    return f"{st['mean']:.2f} ± {st['se']:.2f}"


def _paired(result: CellResult, anchor: str) -> str:
    a = anchored(result, anchor)
    return "n/a | n/a" if a is None else f"{a['diff']:+.2f} ± {a['diff_se']:.2f} | {a['ratio']:.2f}"


def write_cells_csv(path: Path, exp: MDPGridExperiment, results: list[CellResult], seed: int, runs: int) -> None:
    """One line per (cell, row): the cell's size, mean, s.e., the model's paired differences and ratios, tails.

    The tails (:meth:`~benchmarks.evaluations.generalization.CellResult.tails`): the p99 of every row, and
    against the cell's best reference its p99 ratio and failure fraction.
    """
    lines = []
    for result in results:
        spec = result.cell.spec
        assert isinstance(spec, MDPSpec)
        size = {k: spec.to_dict()[k] for k in ("kind", "num_states", "num_actions", "horizon", "episodes")}
        tails = result.tails()
        best = result.best_reference() if result.played_references() else ""
        for row, values in result.totals.items():
            line: dict[str, Any] = {"cell": result.cell.label, **size, "in_range": result.cell.in_range, "row": row}
            line |= {"runs": cell_runs(exp, result.cell, runs), "seed": seed}
            line |= {"mean": "", "se": ""} if values is None else {k: f"{v:.6g}" for k, v in mean_se(values).items()}
            line["note"] = result.notes.get(row, "")
            for key, anchor in (("psrl", psrl_row(exp, result.cell)), ("bayes_dpt", exp.bayes_dpt)):
                a = anchored(result, anchor) if row == MODEL else None
                for stat in ("diff", "diff_se", "ratio"):
                    line[f"{stat}_{key}"] = "" if a is None else f"{a[stat]:.6g}"
            tail = tails.get(row, {})
            line |= {k: f"{tail[k]:.6g}" if k in tail else "" for k in ("p99", "p99_ratio_to_best", "failure_fraction")}
            line["best_reference"] = best
            lines.append(line)
    atomic_write_csv(path, lines, list(lines[0]) if lines else ["cell"])


def markdown(exp: MDPGridExperiment, results: list[CellResult], check_rows: list[dict[str, Any]], header: str) -> str:
    """A table of cells (model, PSRL, greedy Bayes DPT, paired differences and ratios), then the bounds."""
    lines = [
        header,
        "",
        "Cells marked * are outside the trained range.  Paired differences are model minus reference (± s.e.).\n",
        "| cell | model | PSRL | greedy Bayes DPT | model - PSRL | ratio PSRL | model - Bayes DPT | ratio Bayes DPT |",
        "|---" * 8 + "|",
    ]
    for r in results:
        psrl = psrl_row(exp, r.cell)
        mark = "" if r.cell.in_range else " *"
        lines.append(
            f"| {r.cell.label}{mark} | {_fmt(r.totals.get(MODEL))} | {_fmt(r.totals.get(psrl))} | "
            f"{_fmt(r.totals.get(exp.bayes_dpt))} | {_paired(r, psrl)} | {_paired(r, exp.bayes_dpt)} |"
        )
    lines += ["", *tails_table(results, [MODEL, *exp.psrl, exp.bayes_dpt])]
    if check_rows:
        lines += ["", *checks_table(check_rows, "Acceptance bounds", "model")]
    others = sorted({row for r in results for row in r.totals} - {MODEL, *exp.psrl, exp.bayes_dpt})
    lines += ["", f"Other rows (in cells.csv): {', '.join(others)}.", ""]
    return "\n".join(lines)


def run_mdp_generalization(
    exp: MDPGridExperiment,
    out: Path,
    runs: int,
    seed: int = 0,
    checkpoint: str | None = None,
    groups: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    model_only: bool = False,
    reverse: bool = False,
    stored_only: bool = False,
    references_only: bool = False,
    shard: tuple[int, int] = (0, 1),
    device: str = "cpu",
) -> list[CellResult]:
    """Run the MDP grid into ``out/<exp.name>/`` (module docstring); returns the cells' results.

    ``checkpoint`` defaults to the experiment's shipped model (missing: only the references run, and
    the summary says so).  Every cell uses the seed ``exp.seed_offset + seed``.  ``model_only`` plays
    only the model's rows (a second process beside one computing the references into the same store;
    a run without it then writes the tables from the stored rows); ``reverse`` plays the cells last
    first (a second process filling the same store from the other end); ``stored_only`` plays nothing
    and writes the tables from the rows already stored (the others n/a); ``references_only`` plays
    only the references.  ``shard=(i, n)`` plays every n-th cell from the i-th (n processes, on one
    machine or several, fill one store between them; the tables then come from a ``stored_only``
    run).  ``device`` is where the model plays (``"auto"``: CUDA when present); a row's key leaves
    the device out, and its file records it.
    """
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard must be (i, n) with 0 <= i < n, got {shard}")
    if model_only and references_only:
        raise ValueError("model_only and references_only exclude each other: nothing would be played")
    folder = out / exp.name
    folder.mkdir(parents=True, exist_ok=True)
    eval_seed = exp.seed_offset + seed
    name = checkpoint or exp.model["checkpoint"]
    model: dict[str, Any] | None = None
    record: dict[str, Any] = {}
    if model_available(name) and not references_only:
        model = {**exp.model, "checkpoint": name, "device": str(resolve_device(device))}
        meta = read_record(resolve_checkpoint(name)).meta
        record = {**model_record(name), **{k: meta.get(k) for k in ("playable_range", "weights_sha256")}}
    cells = mdp_cells(exp, groups or exp.groups)[:: -1 if reverse else 1][index::count]
    start = time.perf_counter()

    def play(cell: Cell) -> CellResult:
        refs = {} if model_only else references(exp, cell)
        compared = tuple(label for label in exp.compared if label in refs)
        store, model_id = folder / "cells", record.get("weights_sha256")
        return run_rows(
            cell,
            refs,
            model,
            cell_runs(exp, cell, runs),
            eval_seed,
            store,
            model_id,
            compared=compared,
            stored_only=stored_only,
        )

    results = play_cells(cells, play, progress)
    check_rows = [c for r in results for c in checks(exp, r)]
    config = {
        **run_identity(exp.name, runs, eval_seed, exp.seed_offset),
        "groups": list(groups or exp.groups),
        "model": model,
        "rows": "model" if model_only else "references" if references_only else "all",
        "shard": list(shard),
        "model_record": record,
        "grid": asdict(exp),
        "cells": [{"cell": c.label, "in_range": c.in_range, "env": c.spec.to_dict()} for c in cells],
        "seconds": time.perf_counter() - start,
    }
    atomic_write_bytes(folder / "config.json", json.dumps(config, indent=2).encode())
    write_cells_csv(folder / "cells.csv", exp, results, eval_seed, runs)
    write_checks_csv(folder / "checks.csv", check_rows)
    missing = "" if model else f"\n\n**The model is missing** (no checkpoint {name!r}); only the references ran."
    header = (
        f"# {exp.title}\n\n{runs} runs per row and cell ({runs * exp.fixed_runs_factor} at the fixed size), seed "
        f"{eval_seed} (common random numbers: every row of a cell plays the same instances).  Model: "
        f"{name} (step {record.get('steps')}){missing}"
    )
    atomic_write_bytes(folder / "summary.md", markdown(exp, results, check_rows, header).encode())
    for label, anchor_of, slug in (
        ("PSRL (DarkRoom PSRL in dark rooms)", lambda r: psrl_row(exp, r.cell), "psrl"),
        ("the greedy Bayes DPT policy", lambda r: exp.bayes_dpt, "bayes-dpt"),
    ):
        path = folder / f"heatmap-{slug}.png"
        if model is None:
            path.unlink(missing_ok=True)  # stale: no model in this run
            continue

        def ratio(result: CellResult, anchor_of: Callable[[CellResult], str] = anchor_of) -> tuple[float, str] | None:
            a = anchored(result, anchor_of(result))
            return None if a is None else (a["ratio"], "")

        heatmap(
            path,
            results,
            f"{exp.title}: {name}, {runs} runs, seed {eval_seed}",
            describe_range(record.get("trained_range")),
            ratio=ratio,
            label=f"regret(model) / regret({label})",
            bracket="",
            per_row=2,
        )
    return results


def check_cells_memory(exp: MDPGridExperiment, groups: tuple[str, ...], runs: int) -> None:
    """Refuse ``runs`` whose batch of instances exceeds the memory limit in any cell of ``groups`` (``ValueError``).

    The check every cell's rollout makes, made for all of them before the first is played.
    """
    for cell in mdp_cells(exp, groups):
        spec = cell.spec
        assert isinstance(spec, MDPSpec)
        check_memory(spec.memory_bytes(cell_runs(exp, cell, runs)), f"--runs {runs:,} in the cell {cell.label}")


def _check_device(device: str) -> None:
    """Refuse a ``--device`` the model could not play on (``ValueError`` naming the flag and the value)."""
    try:
        resolve_device(device)
    except ValueError as err:
        raise ValueError(f"--device {device!r}: {err}") from None


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
    parser = doc_parser(__doc__)
    exp = MDP_GENERALIZATION
    parser.add_argument(
        "--checkpoint", default="", help=f"an MDP generalist checkpoint (default: {exp.model['checkpoint']})"
    )
    parser.add_argument("--cells", nargs="+", default=list(exp.groups), choices=exp.groups)
    parser.add_argument("--runs", type=int, default=500, help="instances per cell")
    parser.add_argument("--seed", type=int, default=0, help="added to the evaluation seeds")
    parser.add_argument("--out", default="runs")
    parser.add_argument("--reverse", action="store_true", help="play the cells last first (see run_mdp_generalization)")
    parser.add_argument("--stored-only", action="store_true", help="play nothing: tables from the stored rows")
    parser.add_argument(
        "--model-only", action="store_true", help="play only the model's rows (see run_mdp_generalization)"
    )
    parser.add_argument(
        "--references-only", action="store_true", help="play only the references (see run_mdp_generalization)"
    )
    parser.add_argument(
        "--shard", default="0/1", help="I/N: play every N-th cell from the I-th (see run_mdp_generalization)"
    )
    parser.add_argument("--device", default="cpu", help="where the model plays: cpu, cuda, auto (CUDA when present)")
    args = parser.parse_args(argv)
    try:
        index, count = (int(part) for part in args.shard.split("/"))
    except ValueError:
        parser.error(f"--shard must be I/N with integers, got {args.shard!r}")
    if args.runs < 2:
        parser.error(f"--runs must be >= 2 (the standard error needs two), got {args.runs}")
    if not 0 <= index < count:
        parser.error(f"--shard must be I/N with 0 <= I < N, got {args.shard!r}")
    if args.model_only and args.references_only:
        parser.error("--model-only and --references-only exclude each other: nothing would be played")
    out = Path(args.out)
    refuse_unless(
        parser,
        lambda: check_seed(args.seed),
        lambda: None if args.references_only else _check_device(args.device),
        lambda: check_cells_memory(exp, tuple(args.cells), args.runs),
        lambda: check_out_folder(out),
    )
    run_mdp_generalization(
        exp,
        out,
        args.runs,
        args.seed,
        args.checkpoint or None,
        tuple(args.cells),
        progress=lambda text: print(text, flush=True),
        model_only=args.model_only,
        reverse=args.reverse,
        stored_only=args.stored_only,
        references_only=args.references_only,
        shard=(index, count),
        device=args.device,
    )


if __name__ == "__main__":
    main()
