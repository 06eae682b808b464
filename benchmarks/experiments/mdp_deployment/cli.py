"""How the MDP generalist should act on its policy: the deployments of its agent, side by side.

The model imitates P(a* = a | D).  Its agent can take the argmax (the greedy Bayes DPT policy), draw
from softmax(logits / tau) for a whole run, or follow its default schedule on random MDPs: draws at
temperature ``wide_temperature`` while the steps left are at least ``wide_visits`` S A, at
``explore_temperature`` while at least ``explore_visits`` S A, then the argmax
(:class:`~agents.learned.mdp_generalist.MDPGeneralistAgent`).  This script plays each of them,
next to PSRL, on random MDPs of the training prior's defaults, every row of a cell on the same
instances with the same noise (common random numbers), and writes ``deployment.csv`` (mean regret,
standard error, ratio to PSRL; the tails: the 99th percentile of per-run regret, its ratio to
PSRL's, and the fraction of runs with more than 3x PSRL's regret on the same instance and more than
20) and ``config.json`` to ``--out``.  Every argument (the cells' sizes, the runs' memory, the seed,
the checkpoint, ``--out``) is checked before the first cell is played, and a folder that already
holds these two files of an earlier run is refused unless ``--overwrite`` is given.  Every row is
played in slices of runs, the tasks of ``--workers`` processes (default: one per core) or of a Ray
cluster (``--ray``), joined in a fixed order (the numbers do not depend on either); each finished
slice and row is kept in ``--out``/``cells/``, so a stopped sweep resumes.

The default seed, 5e7, is neither a training seed (small integers) nor the ``mdp-generalization``
grid's evaluation seed (4e7): the schedule's parameters were chosen on it, and the grid checks them
on other instances.  The default cells are the 13 the schedule was chosen on::

    OMP_NUM_THREADS=1 python -m benchmarks.evaluations.mdp_deployment --runs 200 --out runs/mdp-deployment
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.command_checks import add_overwrite_flag
from benchmarks.executor import add_executor_flags, make_executor
from benchmarks.experiments.mdp_deployment.cells import CELLS, SEED
from benchmarks.experiments.mdp_deployment.checks import check_arguments
from benchmarks.experiments.mdp_deployment.report import write_deployment
from benchmarks.experiments.mdp_deployment.run import play_deployments
from icrl_gym.utils.cli import doc_parser


def main(argv: list[str] | None = None) -> None:
    """Command line (the module's docstring)."""
    parser = doc_parser(__doc__)
    parser.add_argument("--cells", nargs="+", default=CELLS, help="S,A,H,K each")
    parser.add_argument("--runs", type=int, default=200, help="instances per cell")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--checkpoint", default=None, help="an MDP generalist checkpoint (default: the shipped one)")
    parser.add_argument("--out", default="runs/mdp-deployment")
    add_overwrite_flag(parser)
    add_executor_flags(parser)
    args = parser.parse_args(argv)
    try:
        cells = tuple((int(S), int(A), int(H), int(K)) for S, A, H, K in (cell.split(",") for cell in args.cells))
    except ValueError:
        parser.error(f"--cells takes S,A,H,K (four integers each), got {args.cells}")
    check_arguments(parser, args, cells)
    out, start = Path(args.out), time.perf_counter()
    with make_executor(args.workers, args.ray) as executor:
        rows = play_deployments(cells, args.runs, args.seed, args.checkpoint, executor, out / "cells")
    write_deployment(out, rows, cells, args.runs, args.seed, args.checkpoint, time.perf_counter() - start)
