r"""What a Bernoulli bandit policy that is *not told* the prior can reach, computed exactly at K = 2.

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
(:func:`policy_values`; Gittins breaks ties uniformly at random, as the agent does), and
E_j[max_k p_k] = int_0^1 (1 - F_j(x)^K) dx by quadrature.  The table and the certificate record
the family, T, K and every weight.

**Why imitating the told expert over a family fails** (:func:`uninformed_regrets`, Monte Carlo at
any K).  A model trained by cross-entropy on labels of Gittins told each batch's prior j, while it
sees only the history x, learns at best P(label = k | x) = sum_j w_j(x) 1[k maximises G_j]/(ties),
with w_j(x) the posterior of the prior (:class:`~agents.bandit.bernoulli_bayes_optimal.FamilyPredictive`);
played greedily that is the *posterior vote* of the told experts -- not the family-Bayes policy.
The Monte-Carlo rows play it next to told Gittins, Gittins told U[0, 1] (what the shipped
generalist imitates) and the evidence-mixed index sum_j w_j(x) G_j, on the same instances and
reward draws (common random numbers).

Command line (at T = 200 on one core: 10.5 min for the first exact pass, 4 min per further
weighting; the Monte-Carlo rows at K = 2, 5, 10, 20 with 1,000 runs: 3 min)::

    python -m benchmarks.evaluations.bernoulli_frontier --horizon 200 --out runs/bernoulli-frontier
    python -m benchmarks.evaluations.bernoulli_frontier --horizon 200 --searches 0 --monte-carlo-arms 2 5 20

Before any table is built the command checks its arguments and ``--out``, and estimates the memory
of the exact pass from K and T (:func:`exact_memory_bytes`: the count states of the last layer,
C(T + 2K - 1, 2K - 1), times what each holds) and of the Monte-Carlo rows: beyond the limit
(``--max-memory-gib``, else ``ICRL_GYM_MAX_MEMORY_GIB``, else 4 GiB) it refuses, naming the sizes.  At
the default limit K = 2 reaches about T = 200 (with ``--model``), K = 3 about T = 40.  A folder that
already holds the files this run would write (``frontier.csv`` and ``frontier.json``, or
``uninformed.csv`` and ``uninformed.json``) is refused unless ``--overwrite`` is given.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from math import comb, exp, lgamma
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import integrate, stats

from agents.bandit.bernoulli_bayes_optimal import (
    CompositionRanker,
    FamilyPredictive,
    colex_combinations,
    compositions,
    family_bayes_table,
    successors,
)
from benchmarks.command_checks import (
    add_overwrite_flag,
    check_out_folder,
    check_outputs_free,
    check_seed,
    refuse_unless,
)
from benchmarks.experiments import BETA_PARAMS
from icrl_gym.checkpoint import load_checkpoint, resolve_checkpoint
from icrl_gym.envs.validation import GIB, MEMORY_ENV, max_memory_bytes
from icrl_gym.estimators.gittins import GittinsTable, cached_gittins_table
from icrl_gym.kinds import CheckpointKind
from icrl_gym.models.generalist import GeneralistTransformer
from icrl_gym.models.policy import EnvInfo
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv

BETA_GRID = tuple((a, b) for a in BETA_PARAMS for b in BETA_PARAMS)
"""The harness's bernoulli-beta cells: a, b in {0.5, 1, 2, 5}."""

MONTE_CARLO_SEED = 31_000_000
"""Seed of the Monte-Carlo rows (never used in training)."""

Policy = Callable[[int, np.ndarray], np.ndarray]
"""(layer n, states x (N, 2K) in rank order) -> action distribution (N, J, K), one per prior j."""

EXACT_OUTPUTS = ("frontier.csv", "frontier.json")
"""The files the exact pass writes to ``--out``."""
MONTE_CARLO_OUTPUTS = ("uninformed.csv", "uninformed.json")
"""The files the Monte-Carlo rows write to ``--out``."""


def gittins_memory_bytes(horizon: int, tables: int) -> int:
    """Memory of ``tables`` finite-horizon Gittins tables for T = ``horizon``, as the Gittins agent estimates it.

    Each table keeps about (T + 2)^3 / 6 float32 indices; building one holds four float32 arrays
    of 256 x (T + 2)^2 (the retirement grid) for a while, and the packed table twice.
    """
    n = horizon + 2
    return tables * 4 * (n**3 // 6) + 4 * (4 * 256 * n * n + 2 * n**3 // 6)


def exact_memory_bytes(num_arms: int, horizon: int, num_priors: int, policies: int) -> float:
    """Estimated peak memory of the exact pass (:func:`frontier`) with ``policies`` policies valued at once.

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
    """Estimated peak memory of the Monte-Carlo rows (:func:`uninformed_regrets`) at K = ``num_arms``.

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


def expected_best_mean(a: float, b: float, num_arms: int) -> float:
    """E[max_k p_k] for K iid Beta(a, b) means: int_0^1 (1 - F(x)^K) dx."""
    beta = stats.beta(a, b)
    return float(integrate.quad(lambda x: 1.0 - beta.cdf(x) ** num_arms, 0.0, 1.0, limit=200, epsabs=1e-12)[0])


def table_policy(tables: Sequence[np.ndarray], num_priors: int) -> Policy:
    """A deterministic DP action table (per layer, over ranked states) played whatever the prior."""

    def policy(n: int, x: np.ndarray) -> np.ndarray:
        one_hot = np.eye(x.shape[1] // 2)[tables[n].astype(np.int64)]  # (N, K)
        return np.broadcast_to(one_hot[:, None, :], (len(x), num_priors, one_hot.shape[1]))

    return policy


def gittins_policy(tables: Sequence[GittinsTable], horizon: int) -> Policy:
    """Gittins told prior j under prior j: uniform over the maximisers of G_j(s_k, f_k, T - n)."""

    def policy(n: int, x: np.ndarray) -> np.ndarray:
        k_arms = x.shape[1] // 2
        index = np.stack(
            [
                np.stack([t.lookup(x[:, 2 * k], x[:, 2 * k + 1], horizon - n) for k in range(k_arms)], -1)
                for t in tables
            ],
            axis=1,
        )  # (N, J, K)
        best = (index == index.max(axis=2, keepdims=True)).astype(np.float64)
        return best / best.sum(axis=2, keepdims=True)

    return policy


def generalist_logits_at(
    model: GeneralistTransformer, successes: np.ndarray, failures: np.ndarray, step: int, horizon: int
) -> np.ndarray:
    """The Bernoulli generalist's logits (N, K) at step ``step`` of T = ``horizon`` from the arms' counts (N, K).

    With its grouped cache the model's logits are a function of the counts (s_k, f_k) of every arm
    and of (t, T) only (:mod:`icrl_gym.models.generalist`): the cache is filled with the counts.
    """
    device = next(model.parameters()).device
    counts = np.stack([failures, successes], axis=-1)  # (N, K, 2): steps with reward 0, 1
    cache = model.new_cache(len(counts), EnvInfo(num_actions=counts.shape[1], horizon=horizon), device)
    cache.counts = torch.as_tensor(counts, dtype=torch.float32, device=device)
    cache.totals = cache.counts.sum(dim=1)
    cache.steps = step
    return model.step(cache, None, None, None).logits.cpu().numpy()


def generalist_policy(model: GeneralistTransformer, horizon: int, num_priors: int, chunk: int = 65_536) -> Policy:
    """The Bernoulli generalist played greedily (the argmax of its logits, as its agent plays), exactly.

    Its greedy play is a deterministic count-state policy (:func:`generalist_logits_at`).
    """

    def policy(n: int, x: np.ndarray) -> np.ndarray:
        arms = x.shape[1] // 2
        actions = np.empty(len(x), dtype=np.int64)
        for start in range(0, len(x), chunk):
            part = x[start : start + chunk]
            logits = generalist_logits_at(model, part[:, 0::2], part[:, 1::2], n, horizon)
            actions[start : start + chunk] = logits.argmax(axis=1)
        one_hot = np.eye(arms)[actions]
        return np.broadcast_to(one_hot[:, None, :], (len(x), num_priors, arms))

    return policy


def policy_values(
    num_arms: int, horizon: int, priors: np.ndarray, policies: Mapping[str, Policy | None]
) -> dict[str, np.ndarray]:
    """V_j(P), shape (J,), for each policy (None: the told Bayes-optimal value max over P, per prior).

    One backward pass over the count states; under prior j, arm k pays 1 with probability
    (a_j + s_k) / (a_j + b_j + s_k + f_k) and V_j(x) = sum_k P(k | x) [p (1 + V_j(x + e_s)) + (1 - p) V_j(x + e_f)].
    """
    priors = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    model = FamilyPredictive(priors, np.ones(len(priors)), 0)
    m = 2 * num_arms
    ranker = CompositionRanker(horizon + 1, m)
    bars = colex_combinations(horizon + m - 2, m - 1)
    size = comb(horizon + m - 1, m - 1)
    values = {name: np.zeros((size, len(priors))) for name in policies}
    for n in range(horizon - 1, -1, -1):
        x = compositions(bars, n)
        q = {name: np.empty((len(x), len(priors), num_arms)) for name in policies}
        for k in range(num_arms):
            p = model.arm_means(x, k)  # (N, J)
            r_s, r_f = (ranker.rank(y) for y in successors(x, k))
            for name, v in values.items():
                q[name][:, :, k] = p * (1.0 + v[r_s]) + (1.0 - p) * v[r_f]
        for name, policy in policies.items():
            values[name] = q[name].max(axis=2) if policy is None else (q[name] * policy(n, x)).sum(axis=2)
    return {name: v[0] for name, v in values.items()}


def frontier(
    num_arms: int,
    horizon: int,
    priors: Sequence[tuple[float, float]],
    cache_dir: str | Path,
    searches: int = 3,
    step: float = 2.0,
    echo: Callable[[str], None] = print,
    model: GeneralistTransformer | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-prior regrets (told Gittins, told DP, family-Bayes with uniform pi) and the best certificate c(pi).

    ``searches`` further passes try pi_j ∝ (1 / G_j) first, then multiply pi_j by
    exp(step (ratio_j - mean ratio)) with F_pi's ratios.  With ``model`` (a Bernoulli generalist)
    the rows also give its exact regret played greedily (:func:`generalist_policy`).
    """
    grid = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    top = np.array([horizon * expected_best_mean(a, b, num_arms) for a, b in grid])
    gittins = [cached_gittins_table(horizon, cache_dir, a, b) for a, b in grid]
    start = time.perf_counter()
    family, _ = family_bayes_table(num_arms, horizon, grid)
    policies: dict[str, Policy | None] = {
        "gittins": gittins_policy(gittins, horizon),
        "dp": None,
        "family": table_policy(family, len(grid)),
    }
    if model is not None:
        policies["model"] = generalist_policy(model, horizon, len(grid))
    values = policy_values(num_arms, horizon, grid, policies)
    echo(f"told Gittins, told DP, the uniform family-Bayes policy (and the model): {time.perf_counter() - start:.0f} s")
    told_gittins, told_dp, uniform = top - values["gittins"], top - values["dp"], top - values["family"]
    rows = [
        {
            "a": a,
            "b": b,
            "num_arms": num_arms,
            "horizon": horizon,
            "told_gittins": told_gittins[j],
            "told_dp": told_dp[j],
            "family_bayes": uniform[j],
            "family_bayes_ratio": uniform[j] / told_gittins[j],
            **(
                {}
                if model is None
                else {
                    "model": top[j] - values["model"][j],
                    "model_ratio": (top[j] - values["model"][j]) / told_gittins[j],
                    "model_to_family_bayes": (top[j] - values["model"][j]) / uniform[j],
                }
            ),
        }
        for j, (a, b) in enumerate(grid)
    ]
    tries = [{"weights": np.full(len(grid), 1 / len(grid)), "regret": uniform}]
    weights = (1 / told_gittins) / (1 / told_gittins).sum()
    for _ in range(searches):
        start = time.perf_counter()
        tables, _ = family_bayes_table(num_arms, horizon, grid, weights)
        regret = top - policy_values(num_arms, horizon, grid, {"f": table_policy(tables, len(grid))})["f"]
        tries.append({"weights": weights, "regret": regret})
        ratio = regret / told_gittins
        c = float((weights * regret).sum() / (weights * told_gittins).sum())
        echo(f"certificate c(pi) = {c:.4f} ({time.perf_counter() - start:.0f} s)")
        weights = weights * np.exp(step * (ratio - ratio.mean()))
        weights = weights / weights.sum()
    certificates = [
        {
            "c": float((t["weights"] * t["regret"]).sum() / (t["weights"] * told_gittins).sum()),
            "weights": t["weights"].tolist(),
            "family_bayes_regret": t["regret"].tolist(),
        }
        for t in tries
    ]
    best = max(certificates, key=lambda t: t["c"])
    return rows, {"best": best, "tries": certificates}


def uninformed_indices(
    tables: Sequence[GittinsTable], model: FamilyPredictive, s: np.ndarray, f: np.ndarray, remaining: int
) -> dict[str, np.ndarray]:
    """Scores (B, K) whose argmax each uninformed policy plays, from counts ``s``, ``f`` (B, K).

    "posterior vote": sum_j w_j(x) (uniform over the maximisers of G_j); "evidence-mixed index":
    sum_j w_j(x) G_j; tables[j] is member j's Gittins table.
    """
    index = np.stack([t.lookup(s, f, remaining) for t in tables], axis=-1)  # (B, K, J)
    w = model.posterior(np.stack([s, f], axis=-1).reshape(len(s), -1))[:, None, :]  # (B, 1, J)
    best = (index == index.max(axis=1, keepdims=True)).astype(np.float64)
    return {
        "posterior vote": (w * best / best.sum(axis=1, keepdims=True)).sum(axis=-1),
        "evidence-mixed index": (w * index).sum(axis=-1),
    }


def uninformed_regrets(
    num_arms: int,
    horizon: int,
    priors: Sequence[tuple[float, float]],
    runs: int,
    seed: int,
    cache_dir: str | Path,
    generalist: GeneralistTransformer | None = None,
) -> list[dict[str, Any]]:
    """Monte-Carlo regret per prior of told Gittins and of policies not told it (module docstring).

    Every policy of a prior's cell plays the same means and the same uniform draws u_t (the reward
    of the pulled arm is 1[u_t < p_a]); ties are broken at random from a separate stream.  With
    ``generalist`` a row "model (greedy)" plays its argmax from the counts (:func:`generalist_logits_at`).
    """
    grid = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    tables = [cached_gittins_table(horizon, cache_dir, a, b) for a, b in grid]
    uniform = cached_gittins_table(horizon, cache_dir, 1.0, 1.0)
    family = FamilyPredictive(grid, np.ones(len(grid)), horizon)
    names = ["told Gittins", "Gittins told U[0, 1]", "posterior vote", "evidence-mixed index"]
    names += [] if generalist is None else ["model (greedy)"]
    rows = []
    for j, (a, b) in enumerate(grid):
        rng = np.random.default_rng([seed, j])
        means = rng.beta(a, b, (runs, num_arms))
        draws = rng.random((horizon, runs))
        regrets: dict[str, np.ndarray] = {}
        for name in names:
            ties = np.random.default_rng([seed, j, 1])
            s = np.zeros((runs, num_arms), np.int64)
            f = np.zeros((runs, num_arms), np.int64)
            regret = np.zeros(runs)
            rows_ = np.arange(runs)
            for t in range(horizon):
                if name == "told Gittins":
                    score = tables[j].lookup(s, f, horizon - t)
                elif name == "Gittins told U[0, 1]":
                    score = uniform.lookup(s, f, horizon - t)
                elif name == "model (greedy)" and generalist is not None:
                    score = generalist_logits_at(generalist, s, f, t, horizon)
                else:
                    score = uninformed_indices(tables, family, s, f, horizon - t)[name]
                best = score >= score.max(axis=1, keepdims=True) - 1e-12
                arm = (best * ties.random(best.shape)).argmax(axis=1)
                win = draws[t] < means[rows_, arm]
                s[rows_, arm] += win
                f[rows_, arm] += ~win
                regret += means.max(axis=1) - means[rows_, arm]
            regrets[name] = regret
        ref = regrets["told Gittins"]
        for name, regret in regrets.items():
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "num_arms": num_arms,
                    "horizon": horizon,
                    "policy": name,
                    "runs": runs,
                    "seed": seed,
                    "mean": float(regret.mean()),
                    "se": float(regret.std(ddof=1) / np.sqrt(runs)),
                    "ratio": float(regret.mean() / ref.mean()),
                }
            )
    return rows


def _check_limit(gib: float | None) -> None:
    """Refuse a ``--max-memory-gib`` that is no positive finite number (``ValueError`` naming the flag).

    Without the flag the limit of ``ICRL_GYM_MAX_MEMORY_GIB`` is checked, and its own error names that variable.
    """
    try:
        max_memory_bytes(gib)
    except ValueError as err:
        raise ValueError(str(err) if gib is None else f"--max-memory-gib {gib}: {err}") from None


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
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
        "--max-memory-gib",
        type=float,
        default=None,
        help=f"memory limit of the exact tables and the Monte-Carlo rows (default: ${MEMORY_ENV}, else 4)",
    )
    add_overwrite_flag(parser)
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
        lambda: _check_limit(args.max_memory_gib),
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
        start = time.perf_counter()
        mc = [
            row
            for k in args.monte_carlo_arms
            for row in uninformed_regrets(k, args.horizon, BETA_GRID, args.runs, args.seed, args.cache, model)
        ]
        atomic_write_csv(out / "uninformed.csv", mc, list(mc[0]))
        run = {"arms": args.monte_carlo_arms, "horizon": args.horizon, "priors": [list(p) for p in BETA_GRID]}
        run.update(runs=args.runs, seed=args.seed, model=args.model, seconds=time.perf_counter() - start)
        atomic_write_bytes(out / "uninformed.json", json.dumps(run, indent=2).encode())
        for row in mc:
            label = f"K={row['num_arms']} Beta({row['a']:g}, {row['b']:g})"
            print(
                f"{label:>20} {row['policy']:>22} {row['mean']:8.2f} ± {row['se']:5.2f} "
                f"({row['ratio']:.2f}x told Gittins)"
            )
    if not args.exact:
        return
    start = time.perf_counter()
    rows, certificate = frontier(args.arms, args.horizon, BETA_GRID, args.cache, args.searches, model=model)
    atomic_write_csv(out / "frontier.csv", rows, list(rows[0]))
    config = {
        "arms": args.arms,
        "horizon": args.horizon,
        "priors": [list(p) for p in BETA_GRID],
        "searches": args.searches,
        "model": args.model,
        "certificate": certificate,
        "seconds": time.perf_counter() - start,
    }
    atomic_write_bytes(out / "frontier.json", json.dumps(config, indent=2).encode())
    for row in rows:
        print(
            f"Beta({row['a']:g}, {row['b']:g}): told Gittins {row['told_gittins']:.4f}, told DP {row['told_dp']:.4f}, "
            f"family-Bayes {row['family_bayes']:.4f} ({row['family_bayes_ratio']:.3f}x told Gittins)"
        )
    c = certificate["best"]["c"]
    print(f"certificate: every policy not told the prior is >= {c:.4f}x told Gittins in some cell")


if __name__ == "__main__":
    main()
