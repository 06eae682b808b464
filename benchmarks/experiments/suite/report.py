"""The curve experiments' ``regret.csv`` and ``summary.md``: regret at T/4, T/2 and T, returns, budgets, headlines."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from benchmarks.experiments.models import describe_range, training_budget
from benchmarks.experiments.rows import GENERALISTS, LEARNED
from benchmarks.experiments.suite.cells import CURVE_KEYS, EXPERIMENTS, Experiment, steps
from benchmarks.results_page import Headline, Row, regret_cell
from icrl_gym.data.mdp_rollout import optimal_values
from icrl_gym.envs import MDPSpec
from icrl_gym.utils.fileio import atomic_write_bytes


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
        at=f"{unit}={steps(exp)}",
        learned=min(learned, key=lambda r: r.mean, default=None),
        expert=min(experts, key=lambda r: r.mean, default=None),
        generalist=bool(learned) and all(agents[r.label] in GENERALISTS for r in learned),
    )


def summary(results: dict[str, dict[str, dict[str, np.ndarray]]], runs: int, seed: int) -> str:
    """Markdown tables of every experiment (:func:`experiment_summary`) under one header."""
    parts = [summary_header(runs, seed), *(experiment_summary(n, c, runs, seed) for n, c in results.items())]
    return "\n".join(parts)


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
