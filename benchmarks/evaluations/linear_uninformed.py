"""The linear generalist against uninformed references: held-out priors, Gaussian MABs, sigma withheld.

The cells are the held-out priors of w*, the Gaussian multi-armed bandit and the paper's cell, the
first and last also with sigma withheld; ``--family`` plays the in-family grid instead (w* from the
prior family, d in {2, 5, 8, 16}, A in {2, 10, 50}, T in {50, 200, 1000}).

Rows of every cell, all on the same instances and noise (common random numbers, one seed per cell):

- uninformed references: LinUCB (alpha in {0.5, 1, 2}), linear TS and linear Bayes-UCB with a fixed
  N(0, I) prior (sigma told), the model-averaged Bayes-UCB (:mod:`agents.bandit.model_average`);
  the cell's "best uninformed" is the lowest mean of these;
- told references (columns only): Bayes-UCB and TS told the instance's prior (matched);
- the shipped ``linear-generalist`` alone, and inside the safety net (:mod:`agents.safety_net`);
- with ``--model NAME`` (repeatable), each of these linear generalist checkpoints (a shipped name or a
  path) alone, its row named NAME, and with ``--net`` also inside the safety net ("NAME + safety net");
  ``--only-models`` leaves out the two rows of the shipped ``linear-generalist``;
- with ``--agent LABEL=JSON`` (repeatable), any agent by its specification (``{"name": "linucb", "alpha": 1.5}``,
  ``{"name": "model_averaged_gittins"}``), reported as the models are: a rule outside the references, measured
  against the same best uninformed reference.

A cell "sigma unknown" marks the noise level unknown (``noise_known=False``): the model and the
model-averaged index estimate it in context; the references that need sigma are still told it.
The runs are 1,000 per cell at T <= 200 and 300 at T = 1,000 (``--runs`` / ``--long-runs``), seeds
``--seed`` + the cell's index, never used in training.  Every cell's per-run totals are stored in
``OUT/cells/NAME.json`` as it finishes (a stopped run resumes, and a rerun with another ``--model`` plays
only the rows a cell's record lacks), then ``OUT/table.md`` and ``OUT/cells.csv`` are written with the
configuration.  Run as::

    python -m benchmarks.evaluations.linear_uninformed --out DIR
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

import agents
from agents.bandit.model_average import UNINFORMED_REFERENCES as UNINFORMED
from icrl_gym.algorithm import BanditAgent
from icrl_gym.data.crn import paired_quantile_ratio, paired_ratio
from icrl_gym.data.trajectories import evaluate_regret, failure_limit
from icrl_gym.envs import BanditSpec, linear_bandit_spec
from icrl_gym.utils.cli import doc_parser, parse_agent
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv

TOLD: dict[str, dict[str, Any]] = {
    "Bayes-UCB (matched)": {"name": "linear_bayes_ucb"},
    "TS (matched)": {"name": "linear_ts"},
}
MODELS: dict[str, tuple[str, bool]] = {
    "linear-generalist": ("linear-generalist", False),
    "linear-generalist + safety net": ("linear-generalist", True),
}
"""The model rows by default: row name -> (checkpoint, inside the safety net)."""
HELD_OUT: dict[str, dict[str, Any]] = {
    "N(0, I)": {"prior": "gaussian", "prior_var": 1.0},
    "unit sphere": {"prior": "sphere"},
    "s e_i, s ~ N(0, 1)": {"prior": "one_coordinate", "prior_var": 1.0},
}
MAB_PRIORS: dict[str, dict[str, Any]] = {
    "U[0, 1]": {"prior": "uniform"},
    "N(0, 1)": {"prior": "gaussian", "prior_var": 1.0},
}


def family_cells() -> dict[str, BanditSpec]:
    """The in-family grid: w* from the prior family, d x A x T at sigma = 0.5, then sigma x T at d = 5, A = 10."""
    out: dict[str, BanditSpec] = {}
    for t in (50, 200, 1000):
        for d in (2, 5, 8, 16):
            for a in (2, 10, 50):
                out[f"family d={d}, A={a}, T={t}, sigma=0.5"] = linear_bandit_spec(d, a, t, 0.5, prior="family")
    for sigma in (0.1, 2.0):
        for t in (50, 200, 1000):
            out[f"family d=5, A=10, T={t}, sigma={sigma:g}"] = linear_bandit_spec(5, 10, t, sigma, prior="family")
    return out


def cells() -> dict[str, BanditSpec]:
    """The cells by name: the paper's and the held-out priors (sigma told and withheld), the Gaussian MAB grid."""
    out: dict[str, BanditSpec] = {}
    for known in (True, False):
        tag = "" if known else ", sigma unknown"
        out[f"paper U[0, 1]^5{tag}"] = linear_bandit_spec(5, 10, 200, 1.5, noise_known=known)
        for name, prior in HELD_OUT.items():
            out[f"held-out {name}{tag}"] = linear_bandit_spec(5, 10, 200, 1.5, noise_known=known, **prior)
    for name, prior in MAB_PRIORS.items():
        for k in (2, 5, 20, 50):
            for t in (200, 1000):
                spec = linear_bandit_spec(k, k, t, 0.5, arms="one_hot", **prior)
                out[f"Gaussian MAB {name}, K={k}, T={t}"] = spec
    return out


def play_cell(
    spec: BanditSpec,
    runs: int,
    seed: int,
    models: dict[str, tuple[str, bool]],
    done: dict[str, Any] | None = None,
    extra: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Per-run total regrets of every row on the cell (the reason, a string, where a row cannot play it).

    The rows already in ``done`` (a stored record's totals of the same runs and seed) are kept, not replayed;
    ``extra`` adds rows by agent specification (label -> spec).
    """
    totals: dict[str, Any] = dict(done or {})
    batch = max(1, min(runs, 2_000_000 // (spec.dim * spec.dim * 24 + 1)))  # the index's (B, M, d, d) state
    rows: dict[str, Any] = {**UNINFORMED, **TOLD, **(extra or {})}
    for name, spec_row in rows.items():
        if name not in totals:
            totals[name] = evaluate_regret(spec, spec_row, runs, seed=seed, batch_size=batch).sum(1)
    for name, (checkpoint, net) in models.items():
        if name in totals:
            continue
        try:
            agent = agents.pretrained(checkpoint, safety_net=net)
            assert isinstance(agent, BanditAgent)
            totals[name] = evaluate_regret(spec, agent, runs, seed=seed, batch_size=batch).sum(1)
        except ValueError as err:  # outside what the model plays (d > d_max)
            totals[name] = str(err)
    return {name: (v.tolist() if isinstance(v, np.ndarray) else v) for name, v in totals.items()}


def summary(name: str, totals: dict[str, Any], models: dict[str, Any]) -> dict[str, Any]:
    """One CSV row: every row's mean and failures, the best uninformed reference, the models' ratios and p99 ratios.

    A run fails when its regret exceeds max(3 x the best uninformed reference's mean, 20); the references' own
    failures are kept too, to show how often a policy that is not a model fails by the same rule.  A row of
    ``models`` (the models and any ``--agent`` rows: only the keys are read) gets its ratio, with its paired
    standard error, and its p99 ratio with the 90% paired bootstrap interval
    (:func:`~icrl_gym.data.crn.paired_ratio`, :func:`~icrl_gym.data.crn.paired_quantile_ratio`).
    """
    played = {k: np.asarray(v) for k, v in totals.items() if not isinstance(v, str)}
    best = min(UNINFORMED, key=lambda k: played[k].mean())
    row: dict[str, Any] = {"cell": name, "best uninformed": best, "best mean": round(float(played[best].mean()), 3)}
    limit = failure_limit(float(played[best].mean()))
    for key, values in played.items():
        row[key] = round(float(values.mean()), 3)
        row[f"{key} s.e."] = round(float(values.std(ddof=1) / np.sqrt(len(values))), 3)
        row[f"{key} failures"] = round(float(np.mean(values > limit)), 4)
    for key in models:
        if key in played:
            ratio, ratio_se = paired_ratio(played[key], played[best])
            p99, p99_low, p99_high = paired_quantile_ratio(played[key], played[best])
            row[f"{key} ratio"], row[f"{key} ratio s.e."] = round(ratio, 3), round(ratio_se, 3)
            row[f"{key} p99 ratio"] = round(p99, 3)
            row[f"{key} p99 ratio low"], row[f"{key} p99 ratio high"] = round(p99_low, 3), round(p99_high, 3)
    return row


def main(argv: list[str] | None = None) -> None:
    """Play every cell (resuming from ``OUT/cells``), then write the table and the CSV."""
    parser = doc_parser(__doc__)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--runs", type=int, default=1000, help="instances per cell at T <= 200")
    parser.add_argument("--long-runs", type=int, default=300, help="instances per cell at T = 1,000")
    parser.add_argument("--seed", type=int, default=31_000_000, help="the first cell's seed (never a training seed)")
    parser.add_argument("--family", action="store_true", help="the in-family grid instead of the default cells")
    parser.add_argument("--cells", default="", help="semicolon-separated substrings of the cell names (default all)")
    parser.add_argument(
        "--model", action="append", default=[], help="a further linear generalist checkpoint to play (repeatable)"
    )
    parser.add_argument("--net", action="store_true", help="also play every --model inside the safety net")
    parser.add_argument("--agent", type=parse_agent, action="append", default=[], help="LABEL=JSON (repeatable)")
    parser.add_argument(
        "--only-models", action="store_true", help="play the --model rows only, not the default linear-generalist rows"
    )
    args = parser.parse_args(argv)
    models = {**({} if args.only_models else MODELS), **{name: (name, False) for name in args.model}}
    if args.net:
        models.update({f"{name} + safety net": (name, True) for name in args.model})
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    extra = dict(args.agent)
    if len(extra) != len(args.agent) or set(extra) & (set(models) | set(UNINFORMED) | set(TOLD)):
        parser.error("every --agent needs its own label, not a reference's or a model's")
    reported: dict[str, Any] = {**models, **extra}
    config = {k: (dict(v) if k == "agent" else v) for k, v in vars(args).items() if k != "out"}
    rows = []
    for index, (name, spec) in enumerate((family_cells() if args.family else cells()).items()):
        if args.cells and not any(w in name for w in args.cells.split(";")):
            continue
        path = out / "cells" / f"{name.replace('/', '-').replace(' ', '_')}.json"
        runs = args.long_runs if spec.horizon > 200 else args.runs
        record = json.loads(path.read_text()) if path.exists() else None
        if record is not None and (record["runs"] != runs or record["seed"] != args.seed + index):
            record = None  # other runs or seed: nothing of it is reused
        if record is None or not set(reported) <= set(record["totals"]):
            start = time.time()
            done = None if record is None else record["totals"]
            totals = play_cell(spec, runs, args.seed + index, models, done, extra)
            record = {"cell": name, "runs": runs, "seed": args.seed + index, "totals": totals}
            atomic_write_bytes(path, json.dumps(record).encode())
            print(f"{name}: {time.time() - start:.0f} s", flush=True)
        rows.append(summary(name, record["totals"], reported))
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k != "cell", k))
    atomic_write_csv(out / "cells.csv", rows, fields)
    lines = [
        f"Configuration: {json.dumps(config)}",
        "",
        "| cell | best uninformed | " + " | ".join(f"{key} | ratio | p99 ratio | failures" for key in reported) + " |",
        "|---|---|" + "---|---|---|---|" * len(reported),
    ]
    for r in rows:
        best = f"{r['best uninformed']} {r['best mean']:.2f}"
        parts = []
        for key in reported:
            if f"{key} ratio" in r:
                ratio = f"{r[key + ' ratio']:.2f} +- {r[key + ' ratio s.e.']:.2f}"
                p99 = f"{r[key + ' p99 ratio']:.2f} [{r[key + ' p99 ratio low']:.2f}, {r[key + ' p99 ratio high']:.2f}]"
                parts.append(f"{r[key]:.2f} +- {r[key + ' s.e.']:.2f} | {ratio} | {p99} | {r[key + ' failures']:.3f}")
            else:
                parts.append("cannot play | | |")
        lines.append(f"| {r['cell']} | {best} | " + " | ".join(parts) + " |")
    lines += [
        "",
        "The references' own failures (the same rule): the best uninformed reference's, the fewest of the",
        "uninformed references', and the Bayes-UCB told the prior's.",
        "",
        "| cell | best uninformed | fewest of the uninformed | Bayes-UCB (matched) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        fewest = min(UNINFORMED, key=lambda k: r[f"{k} failures"])
        lines.append(
            f"| {r['cell']} | {r[r['best uninformed'] + ' failures']:.3f} | {r[fewest + ' failures']:.3f} ({fewest}) | "
            f"{r['Bayes-UCB (matched) failures']:.3f} |"
        )
    atomic_write_bytes(out / "table.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
