"""What the frontier's command checks before any table is built: the memory of the exact pass and the Monte Carlo."""

from __future__ import annotations

import argparse
import os
from math import exp, lgamma

from benchmarks.experiments.bernoulli_frontier.cells import DEFAULT_MEMORY_GIB
from icrl_gym.envs.validation import GIB, MEMORY_ENV, max_memory_bytes
from icrl_gym.estimators.gittins import gittins_memory_bytes
from icrl_gym.training.exact_bernoulli import MODEL_CHUNK

MODEL_BYTES = 4096
"""Memory of the Bernoulli generalist per count state and arm while it scores a chunk of states (torch activations;
measured by the peak resident size: about 500 MiB for 65,536 states at K = 2, 750 MiB at K = 3)."""


def exact_memory_bytes(num_arms: int, horizon: int, num_priors: int, policies: int, model: bool = False) -> float:
    """Estimated peak memory of the exact pass (:func:`.run.frontier`) with ``policies`` policies valued at once.

    The largest layer has C(T + 2K - 1, 2K - 1) count states.  For each of them and each of the J
    priors every policy keeps its values (float64) and, while a layer is valued, its action values
    and their product with its action distribution (K each), plus the arm means, the successors'
    values and their ranks and the allocator's slack (about 2K + 8 more): 8 J (P (K + 2) + 2K + 8)
    bytes per state.  With the ``model`` (one of the P policies) its activations on a chunk of
    states come on top (:data:`MODEL_BYTES` per state and arm), and the Gittins tables of the J priors in any
    case (:func:`~icrl_gym.estimators.gittins.gittins_memory_bytes`).  Measured at K = 2, T = 100 with the model
    (P = 4, J = 16): a peak resident size 1,073 MiB above the process's start, against this
    estimate's 1,169 MiB (tracemalloc sees 2,868 bytes per state of numpy arrays, against 3,584 here);
    at K = 2, T = 40..60 and K = 3, T = 16 without it, tracemalloc sees 2,140 to 2,290 bytes per state
    (P = 3), against 3,072 and 3,712.  The binomial is computed from log-gamma (a float), so that an
    absurd size is estimated at once rather than counted exactly.
    """
    m = 2 * num_arms
    log_states = lgamma(horizon + m) - lgamma(m) - lgamma(horizon + 1)
    states = exp(min(log_states, 200.0))  # beyond any limit already
    per_state = 8 * num_priors * (policies * (num_arms + 2) + 2 * num_arms + 8)
    scored = min(states, MODEL_CHUNK) * num_arms * MODEL_BYTES if model else 0.0
    return states * per_state + scored + gittins_memory_bytes(horizon, num_priors)


def monte_carlo_memory_bytes(num_arms: int, horizon: int, num_priors: int, runs: int) -> int:
    """Estimated peak memory of the Monte-Carlo rows (:func:`.run.uninformed_regrets`) at K = ``num_arms``.

    Per run: the uniform draws of every step (T float64) and, per arm, the counts, the means and the
    J members' indices and posterior weights (about 4 J + 8 numbers); then the Gittins tables of the
    J priors and of U[0, 1], and the family Gittins index's four lattice tables (for T plus the largest
    prior strength, at most 12 more steps here).
    """
    per_run = 8 * runs * (horizon + num_arms * (4 * num_priors + 8))
    return per_run + gittins_memory_bytes(horizon, num_priors + 1) + gittins_memory_bytes(horizon + 12, 4)


def memory_limit_bytes(gib: float | None) -> float:
    """The frontier's memory limit in bytes (``ValueError`` for a value that is no positive finite number).

    ``gib`` (``--max-memory-gib``), else ``ICRL_GYM_MAX_MEMORY_GIB``, else :data:`~.cells.DEFAULT_MEMORY_GIB`.
    """
    if gib is None and not os.environ.get(MEMORY_ENV, "").strip():
        gib = DEFAULT_MEMORY_GIB
    return max_memory_bytes(gib)


def check_memory_of(args: argparse.Namespace, num_priors: int) -> None:
    """Refuse a run whose exact pass or Monte-Carlo rows would exceed the memory limit (``ValueError``).

    The limit is :func:`memory_limit_bytes`; the message names the sizes, the estimate and both ways to
    raise it.
    """
    limit = memory_limit_bytes(args.max_memory_gib)
    parts = []
    if args.exact:
        model = args.model is not None
        policies = 3 + model  # told Gittins, told DP, family-Bayes (and the model)
        need = exact_memory_bytes(args.arms, args.horizon, num_priors, policies, model)
        parts.append((f"the exact tables at --arms {args.arms} --horizon {args.horizon}", need))
    for k in args.monte_carlo_arms:
        need = monte_carlo_memory_bytes(k, args.horizon, num_priors, args.runs)
        parts.append((f"the Monte-Carlo rows at K={k} --horizon {args.horizon} --runs {args.runs:,}", need))
    for what, need in parts:
        if need > limit:
            gib = need / GIB
            shown = f"{gib:,.2f}" if gib < 1e6 else f"{gib:.1e}"  # an absurd size in a readable form
            raise ValueError(
                f"{what} need about {shown} GiB (estimate), above the limit of {limit / GIB:g} GiB; "
                f"use a smaller --horizon, --arms or --runs, or raise the limit with --max-memory-gib "
                f"(or {MEMORY_ENV})"
            )


def check_limit(gib: float | None) -> None:
    """Refuse a ``--max-memory-gib`` that is no positive finite number (``ValueError`` naming the flag).

    Without the flag the limit of ``ICRL_GYM_MAX_MEMORY_GIB`` is checked, and its own error names that variable.
    """
    try:
        memory_limit_bytes(gib)
    except ValueError as err:
        raise ValueError(str(err) if gib is None else f"--max-memory-gib {gib}: {err}") from None
