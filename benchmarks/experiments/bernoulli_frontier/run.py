"""The frontier's computations: exact policy values over count states, the certificate, Monte-Carlo rows.

The backward pass over the count states and the count-state policies (a DP table, the Bernoulli
generalist played greedily) are :mod:`icrl_gym.training.exact_bernoulli`'s, which the fine-tuning's
exact validation also uses; this module adds the told Gittins, the certificate and the Monte-Carlo rows.

The Monte-Carlo rows are tasks (:class:`UninformedTask`): each prior's runs in slices, played
anywhere, stored as they finish and joined in order.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.bandit.bernoulli_bayes_optimal import FamilyPredictive, family_bayes_table
from agents.bandit.family_gittins import EVIDENCE_POWER, FamilyGittinsIndex
from agents.learned.generalist import fresh_arm_floor
from benchmarks.executor.local import InlineExecutor
from benchmarks.executor.memory import EXPERT_STEP_BYTES, MODEL_STEP_BYTES
from benchmarks.executor.store import FileTaskStore
from benchmarks.executor.tasks import Executor, cost_factor, run_sweep
from benchmarks.experiments.bernoulli_frontier.cells import FLOOR_ROW, TOLD_GITTINS
from benchmarks.experiments.grid.cells import SLICE_RUNS
from benchmarks.experiments.grid.tasks import slice_sizes
from icrl_gym.checkpoint import checkpoint_files, load_checkpoint, resolve_checkpoint
from icrl_gym.data.crn import paired_quantile_ratio, paired_ratio
from icrl_gym.data.rollout import play
from icrl_gym.estimators.fresh_arm import fresh_arm_rule
from icrl_gym.estimators.gittins import GittinsTable, cached_gittins_table
from icrl_gym.kinds import CheckpointKind
from icrl_gym.models.generalist import GeneralistTransformer
from icrl_gym.training.exact_bernoulli import (
    Policy,
    best_totals,
    generalist_logits_at,
    generalist_policy,
    policy_values,
    table_policy,
)


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
    top = best_totals(num_arms, horizon, tuple((float(a), float(b)) for a, b in grid))
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


def uninformed_slice(
    num_arms: int,
    horizon: int,
    priors: Sequence[Sequence[float]],
    j: int,
    runs: int,
    seed: int,
    index: int,
    cache_dir: str | Path,
    generalist: GeneralistTransformer | None = None,
    policies: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Per-run regret of every policy of :func:`uninformed_regrets` on slice ``index`` (``runs`` runs) of prior ``j``.

    ``policies`` (None: all) keeps told Gittins and the named ones: every policy's ties come from its
    own copy of the ties stream, so a policy's row does not depend on which others are played.

    The slice's means and reward draws come from ``default_rng([seed, j, 0, index])``, its ties from
    ``default_rng([seed, j, 1, index])``: for slice 0 these are the generators ``[seed, j]`` and
    ``[seed, j, 1]`` (NumPy pads a seed's words with zeros), so a prior of one slice plays as before
    slices; the slices are independent of each other and of the order they are played in.
    """
    grid = np.asarray(priors, dtype=np.float64).reshape(-1, 2)
    a, b = grid[j]
    tables = [cached_gittins_table(horizon, cache_dir, a_, b_) for a_, b_ in grid]
    uniform = cached_gittins_table(horizon, cache_dir, 1.0, 1.0)
    family = FamilyPredictive(grid, np.ones(len(grid)), horizon)
    names = [TOLD_GITTINS, "Gittins told U[0, 1]", "posterior vote", "evidence-mixed index", "family Gittins"]
    names += [] if generalist is None else ["model (greedy)", FLOOR_ROW]
    if policies is not None:
        names = [name for name in names if name == TOLD_GITTINS or name in policies]
    rng = np.random.default_rng([seed, j, 0, index])
    means = rng.beta(a, b, (runs, num_arms))
    draws = rng.random((horizon, runs))

    def scores(name: str) -> Scorer:
        if name == TOLD_GITTINS:
            return lambda s, f, t: tables[j].lookup(s, f, horizon - t)
        if name == "Gittins told U[0, 1]":
            return lambda s, f, t: uniform.lookup(s, f, horizon - t)
        if name == "model (greedy)" and generalist is not None:
            return lambda s, f, t: generalist_logits_at(generalist, s, f, t, horizon)
        if name == FLOOR_ROW and generalist is not None:
            rule = fresh_arm_rule(horizon)
            return lambda s, f, t: fresh_arm_floor(
                generalist_logits_at(generalist, s, f, t, horizon), s, f, rule, horizon - t
            )
        if name == "family Gittins":
            index = FamilyGittinsIndex(horizon, grid, cache_dir=cache_dir, evidence_power=EVIDENCE_POWER)
            return lambda s, f, t: index.scores(s, f, horizon - t)
        return lambda s, f, t: uninformed_indices(tables, family, s, f, horizon - t)[name]

    return {name: play_index(scores(name), means, draws, np.random.default_rng([seed, j, 1, index])) for name in names}


Scorer = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
"""An index policy's scores (B, K) from the successes and failures (B, K) before step t."""


def play_index(scores: Scorer, means: np.ndarray, draws: np.ndarray, ties: np.random.Generator) -> np.ndarray:
    """Per-run regret (B,) of the argmax of ``scores`` (ties broken by ``ties``) on arms ``means`` and ``draws``.

    Played through :func:`icrl_gym.data.rollout.play` on a :class:`DrawnBernoulli`; the counts are the
    label hook's.
    """
    runs, num_arms = means.shape
    s = np.zeros((runs, num_arms), np.int64)
    f = np.zeros((runs, num_arms), np.int64)
    regret = np.zeros(runs)
    rows = np.arange(runs)

    def choose(t: int) -> np.ndarray:
        score = scores(s, f, t)
        best = score >= score.max(axis=1, keepdims=True) - 1e-12
        return (best * ties.random(best.shape)).argmax(axis=1)

    def count(t: int, arm: np.ndarray, outcome: dict[str, Any]) -> None:
        win = outcome["reward"].astype(bool)
        s[rows, arm] += win
        f[rows, arm] += ~win
        regret[:] += outcome["regret"]

    play(DrawnBernoulli(means, draws), draws.shape[0], choose, count)
    return regret


@dataclass
class DrawnBernoulli:
    """Bernoulli arms whose reward draws are fixed in advance: step t pays 1 where ``draws[t] < p_arm``.

    Every policy of a slice faces the same means (B, K) and the same uniforms (T, B) (common random
    numbers down to the draws), played through :func:`icrl_gym.data.rollout.play`.
    """

    means: np.ndarray
    draws: np.ndarray
    t: int = 0
    batch_size: int = field(init=False)
    """B, from the means."""

    def __post_init__(self) -> None:
        self.batch_size = self.means.shape[0]

    def step(self, arms: np.ndarray) -> dict[str, Any]:
        """The rewards (B,) of ``arms`` (B,) at the next step, and their regret max_k p_k - p_arm."""
        pulled = self.means[np.arange(self.batch_size), arms]
        reward = (self.draws[self.t] < pulled).astype(np.float64)
        self.t += 1
        return {"reward": reward, "regret": self.means.max(axis=1) - pulled}


@functools.lru_cache(maxsize=2)
def load_generalist(name: str) -> GeneralistTransformer:
    """The Bernoulli generalist of a checkpoint (a shipped name or a path), loaded once per process."""
    model, _ = load_checkpoint(resolve_checkpoint(name), kind=CheckpointKind.GENERALIST_TRANSFORMER)
    model.eval()
    return model


@functools.lru_cache(maxsize=8)
def weights_sha256(name: str) -> str:
    """sha256 of a checkpoint's weights file (a stored slice is reused only for the same weights)."""
    weights, _ = checkpoint_files(resolve_checkpoint(name))
    return hashlib.sha256(Path(weights).read_bytes()).hexdigest()


@dataclass(frozen=True)
class UninformedTask:
    """Slice ``index`` (``runs`` runs) of prior ``j`` of the Monte-Carlo rows (:func:`.run.uninformed_slice`)."""

    num_arms: int
    horizon: int
    priors: tuple[tuple[float, ...], ...]
    """The family of Beta priors (every task holds all of them: the uninformed policies mix them)."""
    j: int
    """The prior the instances come from."""
    runs: int
    seed: int
    index: int
    cache_dir: str
    """The folder of Gittins tables."""
    generalist: GeneralistTransformer | str | None = None
    """The Bernoulli generalist (a model, or a checkpoint's name or path, loaded in the worker)."""
    policies: tuple[str, ...] | None = None
    """The policies played besides told Gittins (None: all of :func:`uninformed_slice`'s)."""

    @property
    def name(self) -> str:
        """``K=k, T=t, Beta(a, b)/slice i``."""
        a, b = self.priors[self.j]
        return f"K={self.num_arms}, T={self.horizon}, Beta({a:g}, {b:g})/slice {self.index}"

    @property
    def cost(self) -> float:
        """Runs x steps x priors mixed (with the model's rows: a generalist's :func:`cost_factor` more)."""
        factor = 1.0 if self.generalist is None else cost_factor("generalist")
        return self.runs * self.horizon * len(self.priors) * factor

    @property
    def setup(self) -> tuple[str, float] | None:
        """None: its Gittins tables are built before the tasks (:func:`uninformed_regrets`), every slice loads them."""
        return None

    @property
    def memory(self) -> float:
        """Runs x steps x a row's bytes per run-step (:mod:`benchmarks.executor.memory`; the model's when it plays)."""
        return float(self.runs * self.horizon * (EXPERT_STEP_BYTES if self.generalist is None else MODEL_STEP_BYTES))

    @property
    def key(self) -> dict[str, Any]:
        """What a stored slice must match: sizes, priors, prior, runs, seed, slice and the model's weights."""
        model: str | None = None
        if isinstance(self.generalist, str):
            model = weights_sha256(self.generalist)
        elif self.generalist is not None:
            model = "a model in memory"
        return {
            "num_arms": self.num_arms,
            "horizon": self.horizon,
            "priors": [list(p) for p in self.priors],
            "prior": self.j,
            "runs": self.runs,
            "seed": self.seed,
            "slice": self.index,
            "model_weights_sha256": model,
            **({} if self.policies is None else {"policies": list(self.policies)}),
        }

    @property
    def store_path(self) -> Path:
        """``K<k>-T<t>/prior<j>-slice<i>.json`` in the store."""
        return Path(f"K{self.num_arms}-T{self.horizon}") / f"prior{self.j}-slice{self.index}.json"

    def run(self) -> dict[str, np.ndarray]:
        """Every policy's per-run regret on the slice."""
        model = load_generalist(self.generalist) if isinstance(self.generalist, str) else self.generalist
        return uninformed_slice(
            self.num_arms,
            self.horizon,
            self.priors,
            self.j,
            self.runs,
            self.seed,
            self.index,
            self.cache_dir,
            model,
            self.policies,
        )


def uninformed_regrets(
    num_arms: int,
    horizon: int,
    priors: Sequence[tuple[float, float]],
    runs: int,
    seed: int,
    cache_dir: str | Path,
    generalist: GeneralistTransformer | str | None = None,
    executor: Executor | None = None,
    store: Path | None = None,
    slice_runs: int = SLICE_RUNS,
    policies: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Monte-Carlo regret per prior of told Gittins and of policies not told it (the docstring of ``cli.py``).

    Every policy of a prior's cell plays the same means and the same uniform draws u_t (the reward
    of the pulled arm is 1[u_t < p_a]); ties are broken at random from a separate stream.  With
    ``generalist`` (a model, or a checkpoint's name or path) a row "model (greedy)" plays its argmax
    from the counts (:func:`generalist_logits_at`).  The runs of each prior are played in slices of
    ``slice_runs`` (:func:`uninformed_slice`), the tasks of ``executor`` (default: this process),
    each stored in ``store`` as it finishes (a stopped run resumes), and joined in slice order.
    ``policies`` (None: all) plays only told Gittins and those named (e.g. ``["model (greedy)"]``),
    with the same rows as a run of all of them.  Each row's ``ratio`` to the told Gittins comes with its paired
    standard error ``ratio_se`` (:func:`~icrl_gym.data.crn.paired_ratio`) and its ``p99_ratio`` with the 90%
    paired bootstrap interval [``p99_ratio_low``, ``p99_ratio_high``]
    (:func:`~icrl_gym.data.crn.paired_quantile_ratio`): a 99th percentile of 1,000 runs is their tenth largest.
    """
    for a, b in [*priors, (1.0, 1.0)]:  # built once here and cached in cache_dir: every slice loads them
        cached_gittins_table(horizon, cache_dir, a, b)
    if policies is None or "family Gittins" in policies:
        FamilyGittinsIndex(horizon, priors, cache_dir=cache_dir)  # its four lattice tables, likewise
    tasks = [
        UninformedTask(
            num_arms,
            horizon,
            tuple(map(tuple, priors)),
            j,
            n,
            seed,
            index,
            str(cache_dir),
            generalist,
            None if policies is None else tuple(policies),
        )
        for j in range(len(priors))
        for index, n in enumerate(slice_sizes(runs, slice_runs))
    ]
    results = run_sweep(
        executor or InlineExecutor(), tasks, None if store is None else FileTaskStore(store), desc="bernoulli frontier"
    )
    rows = []
    for j, (a, b) in enumerate(np.asarray(priors, dtype=np.float64).reshape(-1, 2)):
        parts = [r for task, r in zip(tasks, results, strict=True) if task.j == j]
        regrets = {name: np.concatenate([np.asarray(p[name], dtype=np.float64) for p in parts]) for name in parts[0]}
        ref = regrets[TOLD_GITTINS]
        for name, regret in regrets.items():
            ratio, ratio_se = paired_ratio(regret, ref)
            p99_ratio, p99_low, p99_high = paired_quantile_ratio(regret, ref, seed=seed)
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
                    "ratio": ratio,
                    "ratio_se": ratio_se,
                    "p99": float(np.percentile(regret, 99)),
                    "p99_ratio": p99_ratio,
                    "p99_ratio_low": p99_low,
                    "p99_ratio_high": p99_high,
                }
            )
    return rows
