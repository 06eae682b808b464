"""Probes of the evaluation commands, the grid flags and the compiled-kernel cache.

Each probe tries one case a new user or an adversary would, and asserts a clear error naming the
problem or a case handled correctly (earlier results kept, a bad build never stored).  The work a
command starts (an exact dynamic programme, a grid of cells) is stood in for by a function that
either raises :class:`~tests.reliability.framework.Accepted` (reaching it means the command took its
input) or returns a small table, so that every probe of a command line takes a second or two.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import math
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.reliability import framework as rp
from tests.reliability.first_pass_regressions import _bench_arguments, _bench_refused
from tests.reliability.framework import Outcome, Section, Verdict, probe
from tests.reliability.new_surfaces import snapshot, unchanged
from tests.reliability.new_surfaces_tools import KERNEL_RUN, _kernel_outcome

# ===================================================================================== evaluation commands
rp.surface("Evaluation commands: --out, --seed, earlier results, sizes")

EVALUATIONS: dict[str, tuple[str, ...]] = {
    "bernoulli_frontier": ("frontier", "uninformed_regrets"),
    "mdp_deployment": ("play_deployments",),
    "mdp_generalization": ("run_mdp_generalization",),
}
"""Command (``python -m benchmarks.evaluations.<name>``; its flags: ``benchmarks.experiments.<name>.cli``) -> the
functions doing its work, stood in for by the probes."""


def _evaluation(name: str, argv: list[str], work: Callable[..., Any] = rp.never_started) -> Any:
    """``python -m benchmarks.evaluations.<name> ARGV`` with its work functions replaced by ``work``, stdout muted."""
    module = importlib.import_module(f"benchmarks.experiments.{name}.cli")
    with contextlib.ExitStack() as stack:
        for function in EVALUATIONS[name]:
            stack.enter_context(rp.replaced(module, function, work))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        return rp.command_line(module.main, argv)


def _arguments(name: str, tmp: Path) -> list[str]:
    """Arguments every run of command ``name`` gets: a Gittins cache inside ``tmp`` (the frontier's), nothing else."""
    return ["--cache", str(tmp / "gittins-cache")] if name == "bernoulli_frontier" else []


def _each_evaluation(tmp: Path, argv: Callable[[str], list[str]]) -> dict[str, Callable[[], Any]]:
    """One case per evaluation command: it run with ``argv(name)`` (and :func:`_arguments`)."""
    return {name: functools.partial(_evaluation, name, [*argv(name), *_arguments(name, tmp)]) for name in EVALUATIONS}


@probe("evaluation commands with --out pointing at a file", Section.CRASH)
def _out_on_file(tmp: Path) -> Outcome:
    (tmp / "results").write_text("mine\n")
    cases = _each_evaluation(tmp, lambda name: ["--out", str(tmp / "results")])
    outcome = rp.refused_by_each("commands", cases, "--out", "is a file", kinds=(rp.CommandLineExit,))
    return unchanged(outcome, {".": b"mine\n"}, tmp / "results")


@probe("evaluation commands with --out below a file", Section.CRASH)
def _out_below_file(tmp: Path) -> Outcome:
    (tmp / "results").write_text("mine\n")
    cases = _each_evaluation(tmp, lambda name: ["--out", str(tmp / "results" / name)])
    outcome = rp.refused_by_each("commands", cases, "--out", "lies below the file", kinds=(rp.CommandLineExit,))
    return unchanged(outcome, {".": b"mine\n"}, tmp / "results")


@probe("evaluation commands with --seed -1", Section.CRASH)
def _negative_seed(tmp: Path) -> Outcome:
    cases = _each_evaluation(tmp, lambda name: ["--seed", "-1", "--out", str(tmp / name)])
    outcome = rp.refused_by_each("commands", cases, "--seed", "-1", kinds=(rp.CommandLineExit,))
    created = sorted(name for name in EVALUATIONS if (tmp / name).exists())
    if outcome.verdict is not Verdict.PROBLEM and created:
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and --out was created for {created}")
    return outcome


def _frontier_result(value: float) -> Callable[..., Any]:
    """A stand-in for :func:`~benchmarks.experiments.bernoulli_frontier.run.frontier`: a one-row table of ``value``."""

    def frontier(num_arms: int, horizon: int, *args: Any, **kwargs: Any) -> Any:
        row = {"a": 1.0, "b": 1.0, "num_arms": num_arms, "horizon": horizon, "told_gittins": value}
        row.update(told_dp=value, family_bayes=value, family_bayes_ratio=1.0)
        return [row], {"best": {"c": value, "weights": [1.0], "family_bayes_regret": [value]}, "tries": []}

    return frontier


def _deployment_result(value: float) -> Callable[..., Any]:
    """A stand-in for :func:`~benchmarks.experiments.mdp_deployment.run.play_deployments`: one row of ``value``."""

    def play(cells: Any, runs: int, seed: int, checkpoint: str | None = None, *args: Any) -> list[dict[str, Any]]:
        row = {"cell": "(3, 2, 5, 50)", "row": "PSRL", "mean": value, "se": 0.1, "ratio_psrl": 1.0}
        return [{**row, "p99": value, "p99_ratio_psrl": 1.0, "failures": 0.0}]

    return play


RERUNS: dict[str, tuple[Callable[[float], Callable[..., Any]], tuple[str, ...]]] = {
    "bernoulli_frontier": (_frontier_result, ("frontier.csv", "frontier.json")),
    "mdp_deployment": (_deployment_result, ("deployment.csv", "config.json")),
}
"""The commands that keep no store of their own: the stand-in of their work and the files a run writes."""


def _second_run(tmp: Path, name: str) -> Outcome:
    """Run ``name`` into one folder twice: the second must be refused naming ``--overwrite``, the first kept.

    Then ``--overwrite`` must replace the files (the way to a new run stays open).
    """
    result, outputs = RERUNS[name]
    out = tmp / name
    argv = ["--out", str(out), *_arguments(name, tmp)]
    try:
        _evaluation(name, argv, result(1.0))
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"the first run failed: {rp.described(err)}")
    missing = [f for f in outputs if not (out / f).is_file()]
    if missing:
        return Outcome(Verdict.PROBLEM, f"the first run wrote no {missing}")
    before = snapshot(out)
    outcome = rp.refused(lambda: _evaluation(name, argv, result(2.0)), "--overwrite", kinds=(rp.CommandLineExit,))
    outcome = unchanged(outcome, before, out)
    if outcome.verdict is Verdict.PROBLEM:
        return outcome
    try:
        _evaluation(name, [*argv, "--overwrite"], result(2.0))
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and --overwrite failed: {rp.described(err)}")
    if snapshot(out) == before:
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and --overwrite did not replace {list(outputs)}")
    return Outcome(Verdict.CLEAR, f"{outcome.behaviour} (--overwrite replaces them)")


@probe("bernoulli_frontier run twice into one --out (the certificate kept)", Section.LOST)
def _frontier_twice(tmp: Path) -> Outcome:
    return _second_run(tmp, "bernoulli_frontier")


@probe("mdp_deployment run twice into one --out (the deployment table kept)", Section.LOST)
def _deployment_twice(tmp: Path) -> Outcome:
    return _second_run(tmp, "mdp_deployment")


FRONTIER_SIZES = {
    "exact K=2, T=5000": (["--horizon", "5000"], ("--horizon 5000", "GiB", "--max-memory-gib")),
    "exact K=4, T=200": (["--arms", "4"], ("--arms 4", "GiB", "--max-memory-gib")),
    "Monte-Carlo --runs 10**9": (
        ["--no-exact", "--monte-carlo-arms", "2", "--runs", str(10**9)],
        ("--runs", "GiB", "--max-memory-gib"),
    ),
}
"""Frontier sizes far beyond memory (the exact pass at K=2, T=5000 would hold about 45 TiB): argv, fragments."""

QUICK_BYTES = 50 * 2**20
QUICK_SECONDS = 5.0
"""A refusal before allocating takes less memory and time than this."""


@probe("bernoulli_frontier with sizes beyond memory (size guard)", Section.CRASH)
def _frontier_too_big(tmp: Path) -> Outcome:
    """Refused before any table is allocated (tracemalloc's peak, the time); the documented size still runs."""
    base = ["--out", str(tmp / "frontier"), *_arguments("bernoulli_frontier", tmp)]
    shown = ""
    for label, (argv, fragments) in FRONTIER_SIZES.items():
        start = time.perf_counter()
        result, peak = rp.traced_peak(functools.partial(_evaluation, "bernoulli_frontier", [*argv, *base]))
        seconds = time.perf_counter() - start
        if not isinstance(result, Exception):
            return Outcome(Verdict.PROBLEM, f"{label}: accepted silently")
        outcome = rp.classify_error(result, fragments, (rp.CommandLineExit,))
        if outcome.verdict is Verdict.PROBLEM:
            return Outcome(Verdict.PROBLEM, f"{label}: {outcome.behaviour}")
        if peak > QUICK_BYTES or seconds > QUICK_SECONDS:
            return Outcome(Verdict.PROBLEM, f"{label}: refused after {peak / 2**20:.0f} MiB and {seconds:.1f} s")
        shown = shown or outcome.behaviour
    try:  # the module docstring's command, the model included: under the default limit
        _evaluation("bernoulli_frontier", ["--horizon", "200", "--model", "bernoulli-generalist", *base])
    except rp.Accepted:
        pass
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"the documented --horizon 200 --model ... was refused: {rp.described(err)}")
    if (tmp / "frontier").exists() and any((tmp / "frontier").iterdir()):
        return Outcome(Verdict.PROBLEM, "a refused run wrote into --out")
    return Outcome(Verdict.CLEAR, f"all {len(FRONTIER_SIZES)} sizes, before allocating: {shown}")


Cases = dict[str, tuple[Callable[[], Any], tuple[str, ...]]]
"""Label -> (an action, the fragments its error message must hold)."""


def _refused_naming(cases: Cases, kinds: Any) -> Outcome:
    """:func:`refused` for every case with its own fragments; one PROBLEM makes the probe a PROBLEM, naming the case."""
    outcomes = {label: rp.refused(action, *fragments, kinds=kinds) for label, (action, fragments) in cases.items()}
    for label, outcome in outcomes.items():
        if outcome.verdict is Verdict.PROBLEM:
            return Outcome(Verdict.PROBLEM, f"{label}: {outcome.behaviour}")
    return Outcome(Verdict.CLEAR, f"all {len(cases)} cases: {next(iter(outcomes.values())).behaviour}")


@probe("mdp_deployment with a bad last cell or too many runs (checked before the first cell)", Section.CRASH)
def _deployment_cells(tmp: Path) -> Outcome:
    out = ["--out", str(tmp / "deployment")]
    cases: Cases = {
        "--cells 3,2,5,50 0,2,3,4": (
            lambda: _evaluation("mdp_deployment", ["--cells", "3,2,5,50", "0,2,3,4", *out]),
            ("--cells", "0,2,3,4", "num_states"),
        ),
        "--runs 10**9": (lambda: _evaluation("mdp_deployment", ["--runs", str(10**9), *out]), ("--runs", "GiB")),
        "--checkpoint no-such-model": (
            lambda: _evaluation("mdp_deployment", ["--checkpoint", "no-such-model", *out]),
            ("--checkpoint", "no-such-model"),
        ),
    }
    return _refused_naming(cases, kinds=(rp.CommandLineExit,))


@probe("mdp_generalization with --workers -1, both --model-only and --references-only, or --device tpu", Section.CRASH)
def _grid_command_options(tmp: Path) -> Outcome:
    out = ["--out", str(tmp / "grid")]
    cases: Cases = {
        "--workers -1": (lambda: _evaluation("mdp_generalization", ["--workers", "-1", *out]), ("--workers", "-1")),
        "--model-only --references-only": (
            lambda: _evaluation("mdp_generalization", ["--model-only", "--references-only", *out]),
            ("--model-only", "--references-only"),
        ),
        "--device tpu": (lambda: _evaluation("mdp_generalization", ["--device", "tpu", *out]), ("--device", "tpu")),
    }
    return _refused_naming(cases, kinds=(rp.CommandLineExit,))


# ===================================================================================== grid flags
rp.surface("Benchmark grid flags")


@probe("benchmark --experiments generalization --grid-arms 1", Section.CRASH)
def _grid_arms_1(tmp: Path) -> Outcome:
    argv = ["--experiments", "generalization", "--grid-arms", "1", "--out", str(tmp)]
    return _bench_refused(argv, "--grid-arms", ">= 2", "got 1")


@probe("benchmark grid flags naming a value twice", Section.SILENT)
def _grid_flags_twice(tmp: Path) -> Outcome:
    cases: dict[str, Callable[[], Any]] = {
        f"{flag} {value}": functools.partial(_bench_arguments, [flag, value, "--out", str(tmp)])
        for flag, value in (
            ("--grid-arms", "2,5,2"),
            ("--grid-horizons", "50,50"),
            ("--grid-families", "bernoulli,bernoulli"),
            ("--mdp-cells", "fixed,fixed"),
        )
    }
    return rp.refused_by_each("flags", cases, "more than once", kinds=(rp.CommandLineExit,))


@probe("generalization cell whose best reference has no regret (T=1, every draw right)", Section.CRASH)
def _best_reference_without_regret(tmp: Path) -> Outcome:
    """The grid's tables of a cell whose best reference's mean regret is 0: written, the ratio NaN."""
    from benchmarks.experiments.generalization.report import write_cells_csv
    from benchmarks.experiments.grid.cells import MODEL, Cell, CellResult
    from icrl_gym.envs import bernoulli_bandit_spec

    cell = Cell("bernoulli", "means ~ U[0, 1]", "K=2", "T=1", bernoulli_bandit_spec(2, 1), True, True)
    totals = {"Gittins (finite horizon)": np.zeros(2), "TS": np.array([0.0, 0.4]), MODEL: np.array([0.3, 0.0])}
    result = CellResult(cell, dict(totals), references=("Gittins (finite horizon)", "TS"))
    try:
        ratio = result.stats()[MODEL]["ratio_to_best"]
        write_cells_csv(tmp / "cells.csv", [result], 2, 0)
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"raw {rp.described(err)}")
    if not math.isnan(ratio):
        return Outcome(Verdict.PROBLEM, f"the ratio to a best reference without regret is {ratio}, not NaN")
    return Outcome(Verdict.HANDLED, "cells.csv written; the model's ratio to the best reference is NaN (no regret)")


# ===================================================================================== compiled kernel
rp.surface("Compiled decode kernel: a compiler that reports success after writing half a library")

HALF_WRITING_COMPILER = """#!/bin/sh
# a C compiler that exits 0 after writing only the first half of the library (a full disk, a killed linker)
out=
while [ $# -gt 0 ]; do
    if [ "$1" = "-o" ]; then out=$2; fi
    shift
done
if [ -n "$out" ]; then cp "{half}" "$out"; fi
exit 0
"""


def _kernel_in_process(cache: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """A new process that asks for the kernel with the cache ``cache`` and the environment variables ``variables``."""
    from icrl_gym.models.native import CACHE_ENV, DISABLE_ENV

    env = {**os.environ, CACHE_ENV: str(cache), "OMP_NUM_THREADS": "1", **variables}
    env.pop(DISABLE_ENV, None)
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-c", KERNEL_RUN], env=env, cwd=root, capture_output=True, text=True)


def _half_library(tmp: Path) -> bytes | None:
    """The first half of the kernel's library as the system compiler builds it (None: no compiler here)."""
    from icrl_gym.models import native_build

    cc = native_build.find_compiler()
    compiled = None if cc is None else native_build._compile(cc, ("-O3",))
    if not isinstance(compiled, bytes):
        return None
    return compiled[: len(compiled) // 2]


@probe("kernel cache: a compiler that writes half a library and exits 0", Section.CRASH, slow=True)
def _kernel_half_compiler(tmp: Path) -> Outcome:
    half = _half_library(tmp)
    if half is None:
        return Outcome(Verdict.HANDLED, "no compiler here to imitate: nothing to probe")
    (tmp / "half.so").write_bytes(half)
    compiler = tmp / "bin" / "cc"
    compiler.parent.mkdir()
    compiler.write_text(HALF_WRITING_COMPILER.format(half=tmp / "half.so"))
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    cache = tmp / "cache"
    shown = ""
    for attempt in ("the first process", "the next process"):
        done = _kernel_in_process(cache, CC=str(compiler))
        outcome = _kernel_outcome(done)
        stored = sorted(p.name for p in cache.rglob("*.so")) if cache.is_dir() else []
        if outcome.verdict is Verdict.PROBLEM:
            return Outcome(Verdict.PROBLEM, f"{attempt}: {outcome.behaviour}")
        if stored:
            return Outcome(Verdict.PROBLEM, f"{attempt} stored the half library {stored}")
        if not done.stdout.startswith("fallback"):
            return Outcome(Verdict.PROBLEM, f"{attempt} loaded a kernel from the half library: {rp.short(done.stdout)}")
        shown = shown or outcome.behaviour
    return Outcome(Verdict.HANDLED, f"both processes live, nothing stored; {shown}")


@probe("kernel cache: a half library stored with a matching checksum (by an earlier version)", Section.CRASH, slow=True)
def _kernel_poisoned_cache(tmp: Path) -> Outcome:
    """The cache an earlier version left after such a compiler: the next processes must not die of it."""
    from icrl_gym.models import native_build

    half = _half_library(tmp)
    cc = native_build.find_compiler()
    if half is None or cc is None:
        return Outcome(Verdict.HANDLED, "no compiler here: nothing cached, nothing to probe")
    cache = tmp / "cache"
    cache.mkdir()
    for path in native_build.library_paths(cc, cache).values():  # every flag set's library, its sidecar as written
        path.write_bytes(half)
        native_build.sidecar(path).write_bytes(hashlib.sha256(half).hexdigest().encode() + b"\n")
    shown = ""
    for attempt in ("the first process", "the next process"):
        done = _kernel_in_process(cache)
        outcome = _kernel_outcome(done)
        if outcome.verdict is Verdict.PROBLEM:
            return Outcome(Verdict.PROBLEM, f"{attempt}: {outcome.behaviour}")
        shown = shown or outcome.behaviour
    trusted = [
        p.name for p in cache.glob("*.so") if p.read_bytes() == half and native_build.read_verified(p) is not None
    ]
    if trusted:
        return Outcome(Verdict.PROBLEM, f"the half library is still trusted: {trusted}")
    return Outcome(Verdict.HANDLED, f"rebuilt; both processes live: {shown}")
