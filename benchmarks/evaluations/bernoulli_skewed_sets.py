r"""The skewed sets of the generalization grid: Bernoulli policies against the Gittins index told U[0, 1].

The *skewed* set draws the first floor(K/2) arms' means from U[1/2, 1] and the others from U[0, 1/2]; the
*reversed* set the other way round (K = 2, 5, 10, 20; T = 200).  Neither is a prior of independent arms, and the
widened Bernoulli generalist's acceptance holds it within 1.07x of the finite-horizon Gittins index told U[0, 1] on
every one of the eight.  Every policy plays the same instances and reward draws of a set (common random numbers,
seed ``--seed`` + 10 K, + 1 for the reversed set), and each is given as a JSON agent specification named on the
command line, e.g. the family Gittins index with and without the split member
(:mod:`agents.bandit.split_member`) and a model::

    python -m benchmarks.evaluations.bernoulli_skewed_sets --runs 1000 --seed 97000000 --out DIR \
        --agent 'index={"name": "family_gittins"}' \
        --agent 'index, split 0.2={"name": "family_gittins", "split_weight": 0.2}' \
        --agent 'model={"name": "generalist", "checkpoint": "bernoulli-generalist-family"}'

Both the Gittins agent and the index agents break ties to the first arm (a learned policy's greedy play too), so
the order of a set's arms decides which arms each of them tries first: the skewed set, whose first arms are high,
favours a policy that tries its untried arms in order, the reversed set penalises it, and the reference itself
pays 1.31x its regret on the skewed set at K = 20 when the arms are shuffled (0.70x on the reversed one).
``--shuffled`` plays every row, the reference too, with each run's arms in a random order
(:class:`~agents.shuffled_arms.ShuffledArms`; the same orders for every row, so the ratios stay paired): a
comparison of the policies' play, not of how their first pulls follow the arms' order.  ``OUT/skewed-sets.json``
records the configuration, every mean and standard error, and the ratios; ``OUT/totals.npz`` every row's per-run
totals.  ``--versus LABEL`` adds each row's paired difference from that row (in units of the reference's mean, with
its standard error over the shared runs): two policies' ratios each carry an error that holds the instances' spread,
which their difference on the same runs does not.
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agents.shuffled_arms import ShuffledArms
from icrl_gym.data.crn import paired_difference, paired_quantile_ratio, paired_ratio
from icrl_gym.data.labels import AgentSpec
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.utils.cli import doc_parser, parse_agent
from icrl_gym.utils.fileio import atomic_write, atomic_write_bytes
from icrl_gym.utils.provenance import software_environment

ARMS = (2, 5, 10, 20)
"""K of the sets (the generalization grid's)."""
SETS = {"skewed": "skewed", "reversed": "skewed_reversed"}
"""The sets' names and the environment's prior of each."""
REFERENCE = "Gittins told U[0, 1]"
TOTALS_FILE = "totals.npz"
"""Every cell's per-run totals beside the JSON record (:func:`save_totals`)."""


Totals = dict[str, dict[str, np.ndarray]]
"""Per cell, per row: the per-run total regrets, paired by run across the rows of the cell."""


def play_rows(spec: BanditSpec, rows: Mapping[str, AgentSpec], runs: int, seed: int) -> dict[str, np.ndarray]:
    """Every row's per-run total regret on the same ``runs`` runs of ``spec`` (common random numbers)."""
    return {label: evaluate_regret(spec, agent, runs, seed=seed).sum(axis=1) for label, agent in rows.items()}


def paired_cell(
    totals: Mapping[str, np.ndarray], reference: str, p99: bool = False, versus: str | None = None
) -> dict[str, dict[str, Any]]:
    """Per row of one cell's paired ``totals``: the mean, the ratio to ``reference``'s and their errors.

    The mean total regret, its s.e., the ratio of means to ``reference``'s and its paired s.e.
    (:func:`paired_ratio`); with ``p99`` also the ratio of the 99th percentiles and its interval
    (:func:`paired_quantile_ratio`); with ``versus`` a row's label, every row's difference from that row in units of
    the reference's mean and its paired s.e. (:func:`paired_difference`: ``minus_versus``, ``minus_versus_se``), the
    comparison of two policies on the same runs that their two ratios' errors overstate.
    """
    for label in (reference, versus):
        if label is not None and label not in totals:
            raise ValueError(f"no row {label!r} in this cell: its rows are {list(totals)}")
    cell: dict[str, dict[str, Any]] = {}
    for label, total in totals.items():
        ratio, ratio_se = paired_ratio(total, totals[reference])
        runs = len(total)
        cell[label] = {
            "mean": float(total.mean()),
            "se": float(total.std(ddof=1) / np.sqrt(runs)),
            "ratio": ratio,
            "ratio_se": ratio_se,
        }
        if p99:
            ratio_p99, low, high = paired_quantile_ratio(total, totals[reference])
            cell[label] |= {"p99_ratio": ratio_p99, "p99_interval": [low, high]}
        if versus is not None:
            diff, diff_se = paired_difference(total, totals[versus], totals[reference])
            cell[label] |= {"minus_versus": diff, "minus_versus_se": diff_se}
    return cell


def skewed_sets(
    agents: dict[str, dict[str, Any]],
    runs: int,
    seed: int,
    arms: tuple[int, ...] = ARMS,
    horizon: int = 200,
    shuffled: bool = False,
) -> Totals:
    """Per set ("skewed K=5", ...), per policy (the reference first): the per-run total regrets of every row.

    Each set's rows share its runs (seed + 10 K, + 1 for the reversed set); :func:`paired_cell` reads them.  A
    set's ratio moves by several per cent from one draw of instances to the next, so a line like 1.07x is met on a
    draw only where the ratio is a few paired errors below it.  ``shuffled``: every row, the reference too, plays
    each run's arms in a random order, the same for every row (module docstring).
    """
    rows = {REFERENCE: {"name": "gittins"}, **agents}
    if shuffled:
        rows = {label: {"name": ShuffledArms.name, "inner": agent} for label, agent in rows.items()}
    out: Totals = {}
    for k in arms:
        for offset, (name, prior) in enumerate(SETS.items()):
            spec = bernoulli_bandit_spec(k, horizon=horizon, prior=prior)
            out[f"{name} K={k}"] = play_rows(spec, rows, runs, seed + 10 * k + offset)
    return out


def save_totals(path: Path, totals: Totals) -> None:
    """Write every cell's per-run totals to ``path`` (.npz, atomically), so later runs can pair rows with them.

    The file holds ``totals`` (entries x runs) and ``index`` ("cell<TAB>row" per entry), plain arrays that load
    without pickle.
    """
    index = [f"{cell}\t{label}" for cell, rows in totals.items() for label in rows]
    stacked = np.stack([total for rows in totals.values() for total in rows.values()])
    atomic_write(path, lambda fh: np.savez_compressed(fh, totals=stacked, index=np.array(index)))


def load_totals(path: Path) -> Totals:
    """The totals :func:`save_totals` wrote, checked: a missing, truncated or foreign file is an error naming it."""
    try:
        with np.load(path, allow_pickle=False) as data:
            stacked, index = data["totals"], data["index"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"{path} is not a readable totals file ({err})") from err
    if stacked.ndim != 2 or index.shape != (len(stacked),) or any("\t" not in str(key) for key in index):
        raise ValueError(f"{path} holds {stacked.shape} totals for {index.shape} names: not a totals file")
    out: Totals = {}
    for key, total in zip(index, stacked, strict=True):
        cell, label = str(key).split("\t", 1)
        out.setdefault(cell, {})[label] = total
    return out


def describe_row(label: str, row: Mapping[str, Any]) -> str:
    """One row of a cell for the console: mean, ratio +- paired s.e., and the paired difference when asked."""
    text = f"{label} {row['mean']:.3f} ({row['ratio']:.3f}x +- {row['ratio_se']:.3f}"
    if "minus_versus" in row:
        text += f"; {row['minus_versus']:+.3f} +- {row['minus_versus_se']:.3f} vs"
    return text + ")"


def print_cells(table: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
    """Every cell of a table on one console line (:func:`describe_row` per row)."""
    for cell, rows in table.items():
        print(f"{cell:18s}", "  ".join(describe_row(label, v) for label, v in rows.items()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Play the sets, print each policy's ratio per set and write ``OUT/skewed-sets.json`` and the totals."""
    parser = doc_parser(__doc__)
    parser.add_argument("--agent", type=parse_agent, action="append", required=True, help="LABEL=JSON (repeat)")
    parser.add_argument("--runs", type=int, default=1000, help="runs per set")
    parser.add_argument("--seed", type=int, default=97_000_000, help="seed of the sets (+ 10 K, + 1 reversed)")
    parser.add_argument("--arms", type=int, nargs="+", default=list(ARMS), help="K of the sets")
    parser.add_argument("--shuffled", action="store_true", help="every row on each run's arms in a random order")
    parser.add_argument("--versus", help="a row's label: every row's paired difference from it")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    if args.runs < 2 or any(k < 2 for k in args.arms):
        parser.error("--runs must be >= 2 and every --arms >= 2")
    agents = dict(args.agent)
    if len(agents) != len(args.agent) or REFERENCE in agents:
        parser.error(f"every --agent needs its own label, and not {REFERENCE!r}")
    if args.versus is not None and args.versus not in {REFERENCE, *agents}:
        parser.error(f"--versus {args.versus!r} names no row: the rows are {[REFERENCE, *agents]}")
    start = time.time()
    totals = skewed_sets(agents, args.runs, args.seed, tuple(args.arms), shuffled=args.shuffled)
    table = {cell: paired_cell(rows, REFERENCE, versus=args.versus) for cell, rows in totals.items()}
    print_cells(table)
    config = {
        "agents": agents,
        "runs": args.runs,
        "seed": args.seed,
        "arms": args.arms,
        "horizon": 200,
        "shuffled": args.shuffled,
        "versus": args.versus,
    }
    result = {
        "config": config,
        "sets": table,
        "seconds": round(time.time() - start),
        "software": software_environment(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_totals(out / TOTALS_FILE, totals)
    atomic_write_bytes(out / "skewed-sets.json", json.dumps(result, indent=1).encode())
    return result


if __name__ == "__main__":
    main()
