"""The MDP generalist (a checkpoint path) against PSRL and the greedy Bayes DPT policy over grids of MDP sizes.

Cell groups (``--cells``, any of):

- ``in-range``: random MDPs of the training prior's default (stationary, Dirichlet(1) transitions,
  uniform mean rewards, start state 0), S in {3, 5, 10, 20} x A in {2, 4, 6} x H in {5, 10, 20} x
  K in {5, 20, 50} (every T = K H <= 1000);
- ``fixed``: today's fixed size (S, A, H, K) = (5, 3, 10, 20);
- ``dark``: dark rooms 5x5 (H=20, K=10), 8x8 (H=50, K=4), 10x10 (H=100, K=4), 12x12 (H=100, K=4);
- ``beyond``: S in {30, 50}, A=3, H=50, K=100 (beyond the trained range).

In a cell every row plays the same instances with the same noise (common random numbers: one
:func:`~icrl_gym.data.mdp_rollout.rollout_mdp` batch of all runs under the cell's seed, disjoint
from training seeds), so per-run regret differences are paired.  Rows: the model (its agent's
default deployment: greedy on random MDPs, sampled in dark rooms), PSRL (DarkRoom PSRL in dark
rooms), the greedy Bayes DPT policy on the same posterior, the sampled one in dark rooms, and with
``--all-references`` the sampled one everywhere, UCB-VI (bonus x0.01), uniform and optimal.  For every
row: the mean regret sum_k (V*_1(mu) - return_k) and its standard error, and for the model the paired
differences to PSRL and to the greedy Bayes DPT policy (with standard errors) and the ratios of means.

Outputs in ``--out``: ``cells/<cell>.npz`` (per-run regret of every row, written when the cell
finishes; a cell already there with the same runs and seed is reused, so a stopped grid resumes),
``cells.csv`` and ``summary.md``.  Run as::

    OMP_NUM_THREADS=1 python -m benchmarks.evaluations.mdp_generalization CHECKPOINT --cells fixed dark --runs 200
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.envs import MDPSpec, dark_room_spec
from icrl_gym.utils.fileio import atomic_write_bytes

SEED_OFFSET = 40_000_000
"""Evaluation seeds start here (training draws its batches from [seed, step] with small seeds)."""
GROUPS = ("in-range", "fixed", "dark", "beyond")
MODEL, PSRL, BAYES = "MDP generalist", "PSRL", "Bayes DPT policy (greedy)"


def cells(groups: tuple[str, ...] | list[str]) -> Iterator[tuple[str, str, MDPSpec]]:
    """(group, name, spec) of every cell of ``groups`` (module docstring)."""
    for group in groups:
        if group == "in-range":
            for S in (3, 5, 10, 20):
                for A in (2, 4, 6):
                    for H in (5, 10, 20):
                        for K in (5, 20, 50):
                            if K * H <= 1000:
                                yield (
                                    group,
                                    f"S{S}-A{A}-H{H}-K{K}",
                                    MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K),
                                )
        elif group == "fixed":
            yield group, "S5-A3-H10-K20", MDPSpec()
        elif group == "dark":
            for size, H, K in ((5, 20, 10), (8, 50, 4), (10, 100, 4), (12, 100, 4)):
                yield group, f"room{size}-H{H}-K{K}", dark_room_spec(size, H, K)
        elif group == "beyond":
            for S in (30, 50):
                yield group, f"S{S}-A3-H50-K100", MDPSpec(num_states=S, num_actions=3, horizon=50, episodes=100)
        else:
            raise ValueError(f"unknown cell group {group!r}; the groups are {GROUPS}")


def rows(spec: MDPSpec, checkpoint: str, all_references: bool) -> dict[str, dict[str, Any]]:
    """The agents of a cell, as ``make_agent`` specifications."""
    posterior = "dark_room_psrl" if spec.kind == "dark_room" else "psrl"
    out: dict[str, dict[str, Any]] = {
        MODEL: {"name": "mdp_generalist", "checkpoint": checkpoint},
        PSRL: {"name": posterior},
        BAYES: {"name": "posterior_optimal_action", "posterior": {"name": posterior}, "greedy": True},
    }
    if all_references or spec.kind == "dark_room":
        out["Bayes DPT policy (sampled)"] = {"name": "posterior_optimal_action", "posterior": {"name": posterior}}
    if all_references:
        out["UCB-VI (bonus x0.01)"] = {"name": "ucbvi", "bonus_scale": 0.01}
        out["Uniform"] = {"name": "mdp_uniform"}
        out["Optimal"] = {"name": "mdp_optimal"}
    return out


def run_cell(spec: MDPSpec, agents: dict[str, dict[str, Any]], runs: int, seed: int) -> dict[str, np.ndarray]:
    """Per-run regret (runs,) of every row on the same instances and noise."""
    return {
        label: rollout_mdp(spec, agent, runs, seed=seed, batch_size=runs).episode_regret.sum(axis=1)
        for label, agent in agents.items()
    }


def mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the mean."""
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))


def summarise(group: str, name: str, regret: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """One line per row: mean, s.e., and for the model the paired differences and ratios to PSRL and Bayes DPT."""
    out = []
    for label, values in regret.items():
        mean, se = mean_se(values)
        line: dict[str, Any] = {"group": group, "cell": name, "row": label, "mean": mean, "se": se}
        if label == MODEL:
            for ref, key in ((PSRL, "psrl"), (BAYES, "bayes_dpt")):
                diff_mean, diff_se = mean_se(values - regret[ref])
                line[f"diff_{key}"], line[f"diff_{key}_se"] = diff_mean, diff_se
                line[f"ratio_{key}"] = mean / regret[ref].mean() if regret[ref].mean() > 0 else float("nan")
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="an MDP generalist checkpoint (path stem or shipped name)")
    parser.add_argument("--cells", nargs="+", default=["fixed"], choices=GROUPS)
    parser.add_argument("--runs", type=int, default=500, help="instances per cell")
    parser.add_argument("--seed", type=int, default=0, help="added to the evaluation seeds")
    parser.add_argument("--out", default="runs/mdp-generalization")
    parser.add_argument("--all-references", action="store_true")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error(f"--runs must be >= 2 (the standard error needs two), got {args.runs}")
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = []
    for index, (group, name, spec) in enumerate(cells(args.cells)):
        seed = SEED_OFFSET + args.seed + index
        agents = rows(spec, args.checkpoint, args.all_references)
        path = out / "cells" / f"{name}.npz"
        regret: dict[str, np.ndarray] | None = None
        if path.exists():
            stored = np.load(path)
            if int(stored["seed"]) == seed and int(stored["runs"]) == args.runs and set(agents) <= set(stored):
                regret = {label: stored[label] for label in agents}
        if regret is None:
            regret = run_cell(spec, agents, args.runs, seed)
            buffer = io.BytesIO()
            arrays: dict[str, Any] = {
                "seed": np.array(seed),
                "runs": np.array(args.runs),
                **regret,
            }  # Any: savez takes **kwds
            np.savez(buffer, **arrays)
            atomic_write_bytes(path, buffer.getvalue())
        lines.extend(summarise(group, name, regret))
        model = next(line for line in lines[-len(agents) :] if line["row"] == MODEL)
        print(
            f"{name}: model {model['mean']:.2f} +- {model['se']:.2f}, "
            f"x{model['ratio_psrl']:.2f} PSRL, x{model['ratio_bayes_dpt']:.2f} greedy Bayes DPT",
            flush=True,
        )
    fields = sorted(
        {key for line in lines for key in line}, key=lambda k: list(lines[0]).index(k) if k in lines[0] else 99
    )
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(lines)
    atomic_write_bytes(out / "cells.csv", text.getvalue().encode())
    table = [
        "| cell | model | PSRL | greedy Bayes DPT | model - PSRL | ratio PSRL | ratio Bayes DPT |",
        "|---" * 7 + "|",
    ]
    by_cell: dict[str, dict[str, dict[str, Any]]] = {}
    for line in lines:
        by_cell.setdefault(line["cell"], {})[line["row"]] = line
    for name, cell in by_cell.items():
        m, p, b = cell[MODEL], cell[PSRL], cell[BAYES]
        table.append(
            f"| {name} | {m['mean']:.2f} ± {m['se']:.2f} | {p['mean']:.2f} ± {p['se']:.2f} | "
            f"{b['mean']:.2f} ± {b['se']:.2f} | {m['diff_psrl']:+.2f} ± {m['diff_psrl_se']:.2f} | "
            f"{m['ratio_psrl']:.2f} | {m['ratio_bayes_dpt']:.2f} |"
        )
    header = (
        f"MDP generalist {args.checkpoint}: {args.runs} instances per cell, seeds from {SEED_OFFSET + args.seed}\n\n"
    )
    atomic_write_bytes(out / "summary.md", (header + "\n".join(table) + "\n").encode())


if __name__ == "__main__":
    main()
