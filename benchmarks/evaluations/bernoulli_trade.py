r"""Two lines of the widened Bernoulli generalist's acceptance, one draw: the skewed sets and the all-high priors.

The acceptance asks one policy, not told the arms' prior, for two things at T = 200:

- on the skewed sets (:mod:`benchmarks.evaluations.bernoulli_skewed_sets`: the first floor(K/2) arms' means
  ~ U[1/2, 1] and the rest ~ U[0, 1/2], or the reverse) at most 1.07x the regret of the finite-horizon Gittins
  index told U[0, 1];
- under every Beta(a, b) prior of the family at K = 5, 10, 20 at most 1.25x the regret of the Gittins index told
  that prior, and a p99 at most 1.5x its p99.

After a high first half, a skewed set's next arms are low, while under a prior whose mass is near 1 (Beta(5, 1/2):
mean 0.91) they are high: a policy that reads the arms as exchangeable must decide from the same kind of history
whether another fresh arm is worth a pull, and the two lines ask for opposite answers.  This module plays any
policies on the same instances and reward draws (common random numbers) of both kinds of cell and reports, per
policy, the two coordinates of that trade,

    x = max over the sets of R_set(P) / R_set(Gittins told U[0, 1]),
    y = max over the priors of R_prior(P) / R_prior(Gittins told the prior),

with the largest p99 ratio, and whether the policy is inside the box x <= 1.07, y <= 1.25, p99 <= 1.5
(``--x-arms 5 10 20``: x over the sets at those K only, since the acceptance judges K = 2 exactly).  The priors
default to the four whose mass lies high (Beta(5, 1/2), Beta(2, 1/2), Beta(1, 1/2), Beta(5, 1)), where every
policy measured so far was at its largest ratio; the other twelve cells can only raise y, so a policy outside the
box here is outside it on the whole family.  This is a measurement on a finite set of policies, not a
certificate: no exact frontier is computable beyond K = 3 (:mod:`benchmarks.evaluations.bernoulli_frontier`).

    python -m benchmarks.evaluations.bernoulli_trade --runs 2000 --seed 144100000 --out DIR \
        --agent 'model={"name": "generalist", "checkpoint": "bernoulli-generalist-family"}' \
        --agent 'index, split 0.1={"name": "family_gittins", "split_weight": 0.1}'

Seeds: the sets' are --seed + 10 K (+ 1 reversed), as in ``bernoulli_skewed_sets``; the prior Beta(a, b) at K
plays --seed + 1000 + 100 i + K, i its position in --priors.  OUT/trade.json records the configuration, every
cell's means, standard errors and ratios, and the software; OUT/trade.png draws the policies against the box.
OUT/totals.npz keeps every row's per-run totals.  ``--with DIR`` joins the rows of an earlier run of the same draw
(the same runs, seed, K and priors, checked, and where DIR holds its totals, the references' runs checked equal), so
a policy measured later joins the table and the plot without replaying the others; with no ``--agent`` it only joins.
``--versus LABEL`` adds every row's paired difference from that row in each cell (in units of the cell's reference
mean, :func:`~icrl_gym.data.crn.paired_difference`), also across joined runs: the error of a difference between two
policies on the same runs is a fraction of their two ratios' errors.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evaluations.bernoulli_skewed_sets import (
    REFERENCE,
    TOTALS_FILE,
    Totals,
    load_totals,
    paired_cell,
    play_rows,
    print_cells,
    save_totals,
    skewed_sets,
)
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.utils.cli import doc_parser, parse_agent
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.provenance import software_environment

HIGH_PRIORS = ((5.0, 0.5), (2.0, 0.5), (1.0, 0.5), (5.0, 1.0))
"""The family's priors whose mass lies high (means 0.91, 0.80, 0.67, 0.83)."""
SET_LINE, MEAN_LINE, P99_LINE = 1.07, 1.25, 1.5
"""The acceptance's lines: sets against the Gittins told U[0, 1]; priors' mean and p99 against the told Gittins."""
TOLD = "Gittins told the prior"


def prior_cells(
    agents: dict[str, dict[str, Any]],
    runs: int,
    seed: int,
    priors: tuple[tuple[float, float], ...] = HIGH_PRIORS,
    arms: tuple[int, ...] = (5, 10, 20),
    horizon: int = 200,
) -> Totals:
    """Per cell ("Beta(5, 0.5) K=5", ...), per policy (the told Gittins first): the per-run total regrets."""
    out: Totals = {}
    for i, (a, b) in enumerate(priors):
        for k in arms:
            spec = bernoulli_bandit_spec(k, horizon=horizon, prior="beta", prior_a=a, prior_b=b)
            rows = {TOLD: {"name": "gittins", "prior_a": a, "prior_b": b}, **agents}
            cell_seed = seed + 1000 + 100 * i + k
            out[f"Beta({a:g}, {b:g}) K={k}"] = play_rows(spec, rows, runs, cell_seed)
    return out


def trade_summary(
    sets: dict[str, dict[str, dict[str, float]]],
    priors: dict[str, dict[str, dict[str, Any]]],
    x_arms: tuple[int, ...] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per policy: x (worst set ratio), y (worst prior mean ratio), the worst p99 ratio, their cells, in the box.

    ``x_arms``: the K of the sets that x reads (None: every set), e.g. K >= 5 where K = 2 is judged exactly.
    """
    labels = [label for label in next(iter(sets.values())) if label != REFERENCE]
    counted = [c for c in sets if x_arms is None or int(c.rsplit("K=", 1)[1]) in x_arms]
    if not counted:
        raise ValueError(f"no set has K in {x_arms}: the sets are {list(sets)}")
    summary: dict[str, dict[str, Any]] = {}
    for label in labels:
        x_cell = max(counted, key=lambda c: sets[c][label]["ratio"])
        y_cell = max(priors, key=lambda c: priors[c][label]["ratio"])
        p_cell = max(priors, key=lambda c: priors[c][label]["p99_ratio"])
        x, y, p99 = sets[x_cell][label]["ratio"], priors[y_cell][label]["ratio"], priors[p_cell][label]["p99_ratio"]
        summary[label] = {
            "worst_set": x,
            "worst_set_se": sets[x_cell][label]["ratio_se"],
            "worst_set_cell": x_cell,
            "worst_prior": y,
            "worst_prior_se": priors[y_cell][label]["ratio_se"],
            "worst_prior_cell": y_cell,
            "worst_p99": p99,
            "worst_p99_cell": p_cell,
            "sets_over": sum(sets[c][label]["ratio"] > SET_LINE for c in counted),
            "in_box": bool(x <= SET_LINE and y <= MEAN_LINE and p99 <= P99_LINE),
        }
    return summary


def plot_trade(summary: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """The policies at (x, y) with two standard errors, the box's corner at (1.07, 1.25)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 5.5))
    ax.axvline(SET_LINE, color="grey", lw=1, ls="--")
    ax.axhline(MEAN_LINE, color="grey", lw=1, ls="--")
    ax.fill_between([0.9, SET_LINE], 0.9, MEAN_LINE, color="tab:green", alpha=0.08, label="both lines met")
    markers = "osD^v<>phX*P"
    for i, (label, s) in enumerate(summary.items()):
        ax.errorbar(
            s["worst_set"],
            s["worst_prior"],
            xerr=2 * s["worst_set_se"],
            yerr=2 * s["worst_prior_se"],
            fmt=markers[i % len(markers)],
            ms=5,
            color=plt.get_cmap("tab20")(i % 20),
            label=label,
        )
    ax.set_xlabel("worst skewed set / Gittins told U[0, 1]")
    ax.set_ylabel("worst high-mass prior / Gittins told the prior")
    ax.set_title(title + " (bars: two paired standard errors)", fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def join_totals(mine: Totals, theirs: Totals, source: str) -> None:
    """Add ``theirs``' rows to ``mine``, cell by cell, after checking that the references played the same runs.

    The two reference rows (:data:`REFERENCE`, :data:`TOLD`) are deterministic given the draw, so a reference that
    differs run for run means another draw (or another version of the code) and its rows would not be paired.
    """
    for cell, rows in theirs.items():
        own = mine.setdefault(cell, {})
        for label in (REFERENCE, TOLD):
            if label in rows and label in own and not np.array_equal(rows[label], own[label]):
                raise ValueError(f"{source}: its {label!r} in {cell} played other runs than this draw's")
        mine[cell] = {**rows, **own}


def parse_prior(text: str) -> tuple[float, float]:
    """``A,B`` -> (a, b), both positive."""
    try:
        a, b = (float(v) for v in text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--priors takes A,B pairs such as 5,0.5, got {text!r}") from err
    if not (a > 0 and b > 0):
        raise argparse.ArgumentTypeError(f"a Beta prior needs a, b > 0, got {text!r}")
    return a, b


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Play both kinds of cell, print each policy's coordinates and write ``OUT/trade.json`` and the plot."""
    parser = doc_parser(__doc__)
    parser.add_argument("--agent", type=parse_agent, action="append", default=[], help="LABEL=JSON (repeat)")
    parser.add_argument(
        "--with", dest="earlier", action="append", default=[], help="an earlier OUT of the same draw to join (repeat)"
    )
    parser.add_argument("--runs", type=int, default=2000, help="runs per cell")
    parser.add_argument("--seed", type=int, default=144_100_000)
    parser.add_argument("--set-arms", type=int, nargs="+", default=[2, 5, 10, 20], help="K of the sets")
    parser.add_argument("--prior-arms", type=int, nargs="+", default=[5, 10, 20], help="K of the prior cells")
    parser.add_argument("--priors", type=parse_prior, nargs="+", default=list(HIGH_PRIORS), help="A,B pairs")
    parser.add_argument("--x-arms", type=int, nargs="+", default=None, help="the K of the sets x reads (default all)")
    parser.add_argument("--versus", help="a row's label: every row's paired difference from it")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    if args.runs < 2 or any(k < 2 for k in args.set_arms + args.prior_arms):
        parser.error("--runs must be >= 2 and every K >= 2")
    agents = dict(args.agent)
    if len(agents) != len(args.agent) or {REFERENCE, TOLD} & set(agents):
        parser.error(f"every --agent needs its own label, and not {REFERENCE!r} or {TOLD!r}")
    draw = {
        "runs": args.runs,
        "seed": args.seed,
        "set_arms": args.set_arms,
        "prior_arms": args.prior_arms,
        "priors": [list(p) for p in args.priors],
    }
    earlier = [json.loads((Path(d) / "trade.json").read_text()) for d in args.earlier]
    for d, record in zip(args.earlier, earlier, strict=True):
        theirs = {k: record["config"][k] for k in draw}
        if theirs != draw:
            parser.error(f"--with {d} is another draw ({theirs}), not this one ({draw}): its rows are not paired")
    if not agents and not earlier:
        parser.error("nothing to play: give --agent rows, or --with an earlier run to join")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    set_totals: Totals = {}
    prior_totals: Totals = {}
    if agents:
        set_totals = skewed_sets(agents, args.runs, args.seed, tuple(args.set_arms))
        prior_totals = prior_cells(agents, args.runs, args.seed, tuple(args.priors), tuple(args.prior_arms))
    summarised = []  # runs from before the per-run totals were kept: their summaries join as they are
    for d, record in zip(args.earlier, earlier, strict=True):
        path = Path(d) / TOTALS_FILE
        if not path.exists():
            summarised.append(record)
            continue
        try:
            theirs = load_totals(path)
            join_totals(set_totals, {cell: theirs[cell] for cell in record["sets"]}, f"--with {d}")
            join_totals(prior_totals, {cell: theirs[cell] for cell in record["priors"]}, f"--with {d}")
        except KeyError as err:
            parser.error(f"--with {d}: its {TOTALS_FILE} lacks the cell {err} that its record holds")
        except ValueError as err:
            parser.error(str(err))
        agents = {**record["config"]["agents"], **agents}
    if summarised and args.versus is not None:
        parser.error(f"--versus needs every row's per-run totals: {len(summarised)} --with run(s) lack {TOTALS_FILE}")
    try:
        sets = {cell: paired_cell(rows, REFERENCE, versus=args.versus) for cell, rows in set_totals.items()}
        priors = {cell: paired_cell(rows, TOLD, p99=True, versus=args.versus) for cell, rows in prior_totals.items()}
    except ValueError as err:
        parser.error(f"--versus: {err}")
    for record in summarised:
        for mine, theirs in ((sets, record["sets"]), (priors, record["priors"])):
            for cell, rows in theirs.items():
                mine[cell] = {**rows, **mine.get(cell, {})}
        agents = {**record["config"]["agents"], **agents}
    try:
        summary = trade_summary(sets, priors, None if args.x_arms is None else tuple(args.x_arms))
    except ValueError as err:
        parser.error(str(err))
    for label, s in summary.items():
        print(
            f"{label:40s} sets {s['worst_set']:.3f} +- {s['worst_set_se']:.3f} ({s['worst_set_cell']}, "
            f"{s['sets_over']} over)  priors {s['worst_prior']:.3f} +- {s['worst_prior_se']:.3f} "
            f"({s['worst_prior_cell']})  p99 {s['worst_p99']:.2f}  {'IN' if s['in_box'] else 'out'}"
        )
    if args.versus is not None:
        print_cells({**sets, **priors})
    config = {
        "agents": agents,
        **draw,
        "joined": args.earlier,
        "x_arms": args.x_arms,
        "versus": args.versus,
        "horizon": 200,
        "lines": {"set": SET_LINE, "mean": MEAN_LINE, "p99": P99_LINE},
    }
    result = {
        "config": config,
        "summary": summary,
        "sets": sets,
        "priors": priors,
        "seconds": round(time.time() - start),
        "software": software_environment(),
    }
    if set_totals or prior_totals:
        save_totals(out / TOTALS_FILE, {**set_totals, **prior_totals})
    atomic_write_bytes(out / "trade.json", json.dumps(result, indent=1).encode())
    sets_read = "every set" if args.x_arms is None else "sets at K = " + ", ".join(map(str, args.x_arms))
    plot_trade(summary, out / "trade.png", f"{args.runs} runs per cell, seed {args.seed}, x over {sets_read}")
    return result


if __name__ == "__main__":
    main()
