"""What the deployments' command checks before the first cell is played: the flags, every cell, ``--out``."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.command_checks import check_out_folder, check_outputs_free, check_seed, refuse_unless
from benchmarks.executor import check_executor_flags
from benchmarks.experiments.mdp_deployment.cells import OUTPUTS
from benchmarks.experiments.models import model_available
from icrl_gym.envs import MDPSpec
from icrl_gym.envs.validation import check_memory


def check_cells(cells: tuple[tuple[int, int, int, int], ...], runs: int) -> None:
    """Refuse a cell that is no MDP size, or whose ``runs`` instances exceed the memory limit (``ValueError``).

    The same checks the rollout of the cell would make, made for every cell before the first is
    played, so that a bad last cell does not cost the time of the others.
    """
    for S, A, H, K in cells:
        try:
            spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
        except ValueError as err:
            raise ValueError(f"--cells {S},{A},{H},{K} is no MDP size: {err}") from None
        check_memory(spec.memory_bytes(runs), f"--runs {runs:,} in the cell --cells {S},{A},{H},{K}")


def check_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace, cells: tuple[tuple[int, int, int, int], ...]
) -> None:
    """Refuse what could not run, as an argparse error naming the flag, before any cell is played.

    Too few ``--runs``, a missing checkpoint, a negative seed, a bad cell (:func:`check_cells`), an
    unusable ``--out``, or one holding an earlier run's files without ``--overwrite``.
    """
    if args.runs < 2:
        parser.error(f"--runs must be >= 2 (the standard error needs two), got {args.runs}")
    if args.checkpoint is not None and not model_available(args.checkpoint):
        parser.error(f"--checkpoint {args.checkpoint}: no such checkpoint (a path or a shipped name)")
    out = Path(args.out)
    refuse_unless(
        parser,
        lambda: check_seed(args.seed),
        lambda: check_executor_flags(args.workers, args.ray),
        lambda: check_cells(cells, args.runs),
        lambda: check_out_folder(out),
        lambda: check_outputs_free(out, OUTPUTS, args.overwrite),
    )
