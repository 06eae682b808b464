"""The ``mdp-generalization`` experiment: the MDP generalist against PSRL and the Bayes DPT policy over MDP sizes.

Cell groups (``--cells``, any of; :data:`benchmarks.experiments.MDP_GENERALIZATION` holds the sizes):

- ``in-range``: random MDPs of the training prior's default (stationary, Dirichlet(1) transitions,
  Bernoulli rewards with uniform means, start state 0), S in {3, 5, 10, 20} x A in {2, 4, 6} x
  H in {5, 10, 20} x K in {5, 20, 50} (every T = K H <= 1000);
- ``fixed``: the fixed-size MDP transformers' size (S, A, H, K) = (5, 3, 10, 20), with twice the runs;
- ``dark``: dark rooms 5x5 (H=20, K=10), 8x8 (H=50, K=4), 10x10 (H=100, K=4), 12x12 (H=100, K=4);
- ``beyond``: S in {30, 50}, A=3, H=50, K=100 (beyond the trained range).  The Bayes DPT rows are
  left out there: they solve 32 posterior MDPs at every step (hours per cell at S=50).

In a cell every row plays the same instances with the same noise (common random numbers: the
:func:`~icrl_gym.data.mdp_rollout.rollout_mdp` batches of one slice of runs each under the cell's
seed, disjoint from training seeds), so per-run regret differences are paired.  Rows: the model (its agent's
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
every row it stored).  Every row is played in slices of runs, the tasks of ``--workers`` processes
(default: one per core) or of a Ray cluster (``--ray``), and merged in a fixed order: the outputs do
not depend on either.  A stopped grid resumes from its finished slices.  The command line checks
its arguments (``--seed``, ``--workers``, ``--ray``, ``--device``, the runs' memory in every cell,
``--out``) before the first cell is played.  Run as::

    OMP_NUM_THREADS=1 python -m benchmarks.evaluations.mdp_generalization --checkpoint CKPT --cells fixed dark
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.command_checks import check_out_folder, check_seed, refuse_unless
from benchmarks.executor import add_executor_flags, check_executor_flags, make_executor
from benchmarks.experiments.mdp_generalization.cells import MDP_GENERALIZATION, MDPGridExperiment, cell_runs, mdp_cells
from benchmarks.experiments.mdp_generalization.run import run_mdp_generalization
from icrl_gym.envs import MDPSpec
from icrl_gym.envs.validation import check_memory
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.device import resolve_device


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
    parser.add_argument("--reverse", action="store_true", help="list the cells last first (see run_mdp_generalization)")
    parser.add_argument("--stored-only", action="store_true", help="play nothing: tables from the stored rows")
    parser.add_argument(
        "--model-only", action="store_true", help="play only the model's rows (see run_mdp_generalization)"
    )
    parser.add_argument(
        "--references-only", action="store_true", help="play only the references (see run_mdp_generalization)"
    )
    parser.add_argument("--device", default="cpu", help="where the model plays: cpu, cuda, auto (CUDA when present)")
    add_executor_flags(parser)
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error(f"--runs must be >= 2 (the standard error needs two), got {args.runs}")
    if args.model_only and args.references_only:
        parser.error("--model-only and --references-only exclude each other: nothing would be played")
    out = Path(args.out)
    refuse_unless(
        parser,
        lambda: check_seed(args.seed),
        lambda: check_executor_flags(args.workers, args.ray),
        lambda: None if args.references_only else _check_device(args.device),
        lambda: check_cells_memory(exp, tuple(args.cells), args.runs),
        lambda: check_out_folder(out),
    )
    with make_executor(args.workers, args.ray) as executor:
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
            device=args.device,
            executor=executor,
        )
