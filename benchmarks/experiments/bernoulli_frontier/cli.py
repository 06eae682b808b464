"""What a Bernoulli bandit policy that is *not told* the prior can reach, computed exactly at K = 2.

The widened Bernoulli generalist is measured against finite-horizon Gittins told each cell's prior
Beta(a, b).  A policy that is not told the prior has to infer it in context; this module computes,
by dynamic programming over the counts (no sampling), how much that costs at the best.

For a family of priors {(a_j, b_j)} with hyperprior pi and a policy P, let Reg_j(P) be P's Bayes
regret when the arms' means are iid Beta(a_j, b_j), and G_j that of Gittins told Beta(a_j, b_j).
The family-Bayes policy F_pi (:func:`~agents.bandit.bernoulli_bayes_optimal.family_bayes_table`)
minimises sum_j pi_j Reg_j(P) over every policy that is not told j.  Hence, for every such P,

    max_j Reg_j(P) / G_j  >=  sum_j pi_j Reg_j(P) / sum_j pi_j G_j
                          >=  c(pi) := sum_j pi_j Reg_j(F_pi) / sum_j pi_j G_j,

so c(pi) > r for some pi *certifies* that no such policy -- a pretrained in-context model included --
is within r x told Gittins in every cell of the family.  Any pi gives a valid certificate; the search
starts from pi_j ∝ 1 / G_j (then c is the pi-weighted mean of the ratios) and moves weight towards the
cells where F_pi's ratio is largest (multiplicative updates), keeping the best c.

Every value is exact for the model: Reg_j(P) = T E_j[max_k p_k] - V_j(P), where V_j(P) is P's
expected total reward under Beta(a_j, b_j)^K from a backward pass over the count states
(:func:`policy_values`; Gittins breaks ties uniformly at random here, where the agent takes the first of
its tied arms: the two differ only where the arms are not exchangeable, as in the skewed sets), and
E_j[max_k p_k] = int_0^1 (1 - F_j(x)^K) dx by quadrature.  The table and the certificate record
the family, T, K and every weight.

**Why imitating the told expert over a family fails** (:func:`uninformed_regrets`, Monte Carlo at
any K).  A model trained by cross-entropy on labels of Gittins told each batch's prior j, while it
sees only the history x, learns at best P(label = k | x) = sum_j w_j(x) 1[k maximises G_j]/(ties),
with w_j(x) the posterior of the prior (:class:`~agents.bandit.bernoulli_bayes_optimal.FamilyPredictive`);
played greedily that is the *posterior vote* of the told experts -- not the family-Bayes policy.
The Monte-Carlo rows play it next to told Gittins, Gittins told U[0, 1] (what the shipped
generalist imitates), the evidence-mixed index sum_j w_j(x) G_j and the family Gittins index (the
Gittins index of each arm's moment-matched posterior under the family, :mod:`agents.bandit.family_gittins`),
on the same instances and reward draws (common random numbers).

Command line (at T = 200 on one core: 10.5 min for the first exact pass, 4 min per further
weighting; the Monte-Carlo rows at K = 2, 5, 10, 20 with 1,000 runs: 3 min)::

    python -m benchmarks.evaluations.bernoulli_frontier --horizon 200 --out runs/bernoulli-frontier
    python -m benchmarks.evaluations.bernoulli_frontier --horizon 200 --searches 0 --monte-carlo-arms 2 5 20

Before any table is built the command checks its arguments and ``--out``, and estimates the memory
of the exact pass from K and T (:func:`exact_memory_bytes`: the count states of the last layer,
C(T + 2K - 1, 2K - 1), times what each holds) and of the Monte-Carlo rows: beyond the limit
(``--max-memory-gib``, else ``ICRL_GYM_MAX_MEMORY_GIB``, else 8 GiB) it refuses, naming the sizes.  At
the default limit K = 2 reaches about T = 230 (with ``--model``), K = 3 about T = 43.  A folder that
already holds the files this run would write (``frontier.csv`` and ``frontier.json``, or
``uninformed.csv`` and ``uninformed.json``) is refused unless ``--overwrite`` is given.

The Monte-Carlo rows are played in slices of runs per prior, the tasks of ``--workers`` processes
(default: one per core) or of a Ray cluster (``--ray``), and joined in a fixed order: the numbers do
not depend on either.  Each finished slice is kept in ``--out``/``monte-carlo-slices/`` until the
rows are written, so a stopped run resumes.  ``--policies`` plays only told Gittins and the policies
named (e.g. ``--policies "model (greedy)"`` with ``--model``): every policy breaks its ties from its
own copy of the stream, so the rows are those of a run of every policy, and the costly ones are skipped.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from benchmarks.command_checks import (
    add_overwrite_flag,
    check_out_folder,
    check_outputs_free,
    check_seed,
    refuse_unless,
)
from benchmarks.executor import add_executor_flags, check_executor_flags, make_executor
from benchmarks.experiments.bernoulli_frontier.cells import (
    BETA_GRID,
    DEFAULT_MEMORY_GIB,
    EXACT_OUTPUTS,
    MONTE_CARLO_OUTPUTS,
    MONTE_CARLO_POLICIES,
    MONTE_CARLO_SEED,
    SLICES,
)
from benchmarks.experiments.bernoulli_frontier.checks import check_limit, check_memory_of
from benchmarks.experiments.bernoulli_frontier.report import write_frontier, write_uninformed
from benchmarks.experiments.bernoulli_frontier.run import frontier, uninformed_regrets
from icrl_gym.checkpoint import load_checkpoint, resolve_checkpoint
from icrl_gym.envs.validation import MEMORY_ENV
from icrl_gym.kinds import CheckpointKind
from icrl_gym.utils.cli import doc_parser


def main(argv: list[str] | None = None) -> None:
    """Command line (the module's docstring)."""
    parser = doc_parser(__doc__)
    parser.add_argument("--arms", type=int, default=2, help="K (the state space grows like T^(2K))")
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument("--searches", type=int, default=3, help="certificate passes after the uniform one")
    parser.add_argument("--cache", default="runs/gittins-cache", help="folder of Gittins tables")
    parser.add_argument("--out", default="runs/bernoulli-frontier")
    parser.add_argument("--monte-carlo-arms", type=int, nargs="*", default=[], help="K of uninformed_regrets")
    parser.add_argument("--runs", type=int, default=500, help="instances per prior in the Monte-Carlo rows")
    parser.add_argument("--seed", type=int, default=MONTE_CARLO_SEED, help="seed of the Monte-Carlo rows")
    parser.add_argument("--exact", action=argparse.BooleanOptionalAction, default=True, help="the exact K-arm table")
    parser.add_argument("--model", default=None, help="a Bernoulli generalist to evaluate exactly (name or path)")
    parser.add_argument(
        "--policies",
        nargs="+",
        default=None,
        choices=MONTE_CARLO_POLICIES,
        help="the Monte-Carlo rows' policies besides told Gittins (default: all; the rows are the same either way)",
    )
    parser.add_argument(
        "--max-memory-gib",
        type=float,
        default=None,
        help=f"memory limit of the exact tables and the Monte-Carlo rows, in GiB (default: ${MEMORY_ENV}, "
        f"else {DEFAULT_MEMORY_GIB:g})",
    )
    add_overwrite_flag(parser)
    add_executor_flags(parser)
    args = parser.parse_args(argv)
    if args.arms < 2 or args.horizon < 1 or args.searches < 0 or args.runs < 2:
        parser.error("--arms >= 2, --horizon >= 1, --searches >= 0 and --runs >= 2 are needed")
    if any(k < 2 for k in args.monte_carlo_arms):
        parser.error(f"--monte-carlo-arms takes K >= 2, got {args.monte_carlo_arms}")
    out = Path(args.out)
    outputs = [*(MONTE_CARLO_OUTPUTS if args.monte_carlo_arms else ()), *(EXACT_OUTPUTS if args.exact else ())]
    refuse_unless(
        parser,
        lambda: check_seed(args.seed),
        lambda: check_executor_flags(args.workers, args.ray),
        lambda: check_limit(args.max_memory_gib),
        lambda: check_memory_of(args, len(BETA_GRID)),
        lambda: check_out_folder(out),
        lambda: check_outputs_free(out, outputs, args.overwrite),
    )
    model = None
    if args.model is not None:
        try:
            model, _ = load_checkpoint(resolve_checkpoint(args.model), kind=CheckpointKind.GENERALIST_TRANSFORMER)
        except ValueError as err:  # a CheckpointError: missing, damaged or not a Bernoulli generalist
            parser.error(f"--model {args.model}: {err}")
        model.eval()
    out.mkdir(parents=True, exist_ok=True)
    if args.monte_carlo_arms:
        start, store = time.perf_counter(), out / SLICES
        with make_executor(args.workers, args.ray) as executor:
            mc = [
                row
                for k in args.monte_carlo_arms
                for row in uninformed_regrets(
                    k,
                    args.horizon,
                    BETA_GRID,
                    args.runs,
                    args.seed,
                    args.cache,
                    args.model,
                    executor,
                    store,
                    policies=args.policies,
                )
            ]
        run = {"arms": args.monte_carlo_arms, "horizon": args.horizon, "runs": args.runs, "seed": args.seed}
        run = {**run, **({} if args.policies is None else {"policies": args.policies})}
        write_uninformed(out, mc, {**run, "model": args.model, "seconds": time.perf_counter() - start})
        shutil.rmtree(store, ignore_errors=True)  # the rows are written: their slices are no longer needed
    if not args.exact:
        return
    start = time.perf_counter()
    rows, certificate = frontier(args.arms, args.horizon, BETA_GRID, args.cache, args.searches, model=model)
    exact = {"arms": args.arms, "horizon": args.horizon, "searches": args.searches, "model": args.model}
    write_frontier(out, rows, certificate, {**exact, "seconds": time.perf_counter() - start})
