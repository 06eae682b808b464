"""What the frontier's command checks before any table is built: the memory of the exact pass and the Monte Carlo."""

from __future__ import annotations

import argparse
from math import exp, lgamma

from icrl_gym.envs.validation import GIB, MEMORY_ENV, max_memory_bytes


def gittins_memory_bytes(horizon: int, tables: int) -> int:
    """Memory of ``tables`` finite-horizon Gittins tables for T = ``horizon``, as the Gittins agent estimates it.

    Each table keeps about (T + 2)^3 / 6 float32 indices; building one holds four float32 arrays
    of 256 x (T + 2)^2 (the retirement grid) for a while, and the packed table twice.
    """
    n = horizon + 2
    return tables * 4 * (n**3 // 6) + 4 * (4 * 256 * n * n + 2 * n**3 // 6)


def exact_memory_bytes(num_arms: int, horizon: int, num_priors: int, policies: int) -> float:
    """Estimated peak memory of the exact pass (:func:`.run.frontier`) with ``policies`` policies valued at once.

    The largest layer has C(T + 2K - 1, 2K - 1) count states.  For each of them and each of the J
    priors every policy keeps its values (float64) and, while a layer is valued, its action values
    and their product with its action distribution (K each), plus the arm means, the successors'
    values and their ranks (about 2K + 2 more): 8 J (P (K + 2) + 2K + 2) bytes per state.  Measured
    with tracemalloc at K = 2, T = 40..100 and K = 3, T = 16 (J = 16): 2,250 bytes per state with
    P = 3, 2,720 with the model (P = 4), below this estimate (2,304 and 2,816).  The Gittins tables
    of the J priors come on top (:func:`gittins_memory_bytes`).  The binomial is computed from
    log-gamma (a float), so that an absurd size is estimated at once rather than counted exactly.
    """
    m = 2 * num_arms
    log_states = lgamma(horizon + m) - lgamma(m) - lgamma(horizon + 1)
    states = exp(min(log_states, 200.0))  # beyond any limit already
    per_state = 8 * num_priors * (policies * (num_arms + 2) + 2 * num_arms + 2)
    return states * per_state + gittins_memory_bytes(horizon, num_priors)


def monte_carlo_memory_bytes(num_arms: int, horizon: int, num_priors: int, runs: int) -> int:
    """Estimated peak memory of the Monte-Carlo rows (:func:`.run.uninformed_regrets`) at K = ``num_arms``.

    Per run: the uniform draws of every step (T float64) and, per arm, the counts, the means and the
    J members' indices and posterior weights (about 4 J + 8 numbers); then the Gittins tables of the
    J priors and of U[0, 1].
    """
    return 8 * runs * (horizon + num_arms * (4 * num_priors + 8)) + gittins_memory_bytes(horizon, num_priors + 1)


def check_memory_of(args: argparse.Namespace, num_priors: int) -> None:
    """Refuse a run whose exact pass or Monte-Carlo rows would exceed the memory limit (``ValueError``).

    The limit is ``--max-memory-gib``, else ``ICRL_GYM_MAX_MEMORY_GIB``, else 4 GiB; the message names
    the sizes, the estimate and both ways to raise it.
    """
    limit = max_memory_bytes(args.max_memory_gib)
    parts = []
    if args.exact:
        policies = 3 + (args.model is not None)  # told Gittins, told DP, family-Bayes (and the model)
        need = exact_memory_bytes(args.arms, args.horizon, num_priors, policies)
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
        max_memory_bytes(gib)
    except ValueError as err:
        raise ValueError(str(err) if gib is None else f"--max-memory-gib {gib}: {err}") from None
