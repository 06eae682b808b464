"""Probes of the tools added after the first pass: the benchmark harness, the generalist trainers, the kernel cache."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.reliability import framework as rp
from tests.reliability import new_surfaces_runtime  # noqa: F401  (its surfaces come before these in the table)
from tests.reliability.first_pass_regressions import _bench, _bench_refused
from tests.reliability.framework import Outcome, Section, Verdict, probe
from tests.reliability.new_surfaces import snapshot, unchanged

# ===================================================================================== harness
rp.surface("Benchmark harness: --out, --seed, --runs, --plot-only")


@probe("benchmark --out pointing at a file", Section.CRASH)
def _bench_out_file(tmp: Path) -> Outcome:
    (tmp / "results").write_text("mine\n")
    outcome = _bench_refused(["--out", str(tmp / "results")], "--out")
    return unchanged(outcome, {".": b"mine\n"}, tmp / "results")


@probe("benchmark --out below a file", Section.CRASH)
def _bench_out_below_file(tmp: Path) -> Outcome:
    (tmp / "results").write_text("mine\n")
    return _bench_refused(["--out", str(tmp / "results" / "x")], "--out")


@probe("benchmark --seed -1", Section.CRASH)
def _bench_negative_seed(tmp: Path) -> Outcome:
    return _bench_refused(["--seed", "-1", "--out", str(tmp)], "--seed", "-1")


@probe("benchmark --runs 10**12", Section.CRASH)
def _bench_huge_runs(tmp: Path) -> Outcome:
    return _bench_refused(["--runs", str(10**12), "--out", str(tmp)], "--runs")


SAVED = {"summary.md": b"# my summary\n", "tabular-mdp-nonstationary.png": b"\x89PNG\r\n\x1a\nmy plot"}
"""Outputs of an earlier run that a refused ``--plot-only`` must leave alone."""


def _plot_only(tmp: Path, csv: bytes, config: bytes, *fragments: str) -> Outcome:
    """``--plot-only`` on a folder with ``regret.csv`` and ``config.json`` as given: refused, nothing lost."""
    from benchmarks.harness import cli

    out = tmp / "results"
    out.mkdir()
    for name, body in {**SAVED, "regret.csv": csv, "config.json": config}.items():
        (out / name).write_bytes(body)
    before = snapshot(out)
    with contextlib.redirect_stdout(io.StringIO()):
        outcome = rp.refused(
            lambda: rp.command_line(cli.main, ["--plot-only", "--out", str(out), "--quiet"]),
            *fragments,
            kinds=(rp.CommandLineExit, ValueError),
        )
    return unchanged(outcome, before, out)


CONFIG = json.dumps({"experiments": "tabular-mdp-nonstationary", "runs": 2, "seed": 0}).encode()
HEADER = b"experiment,algorithm,t,cumulative_regret_mean,cumulative_regret_std,cumulative_regret_se\n"


@probe("benchmark --plot-only on an empty regret.csv", Section.LOST)
def _plot_only_empty(tmp: Path) -> Outcome:
    return _plot_only(tmp, HEADER, CONFIG, "regret.csv")


@probe("benchmark --plot-only on a damaged regret.csv", Section.CRASH)
def _plot_only_damaged_csv(tmp: Path) -> Outcome:
    return _plot_only(tmp, HEADER + b"tabular-mdp-nonstationary,PSRL,1,abc,\x00\xff\n", CONFIG, "regret.csv")


@probe("benchmark --plot-only on a damaged config.json", Section.CRASH, slow=True)
def _plot_only_damaged_config(tmp: Path) -> Outcome:
    """A finished run (so regret.csv is sound) whose config.json was cut: refused naming it, nothing touched."""
    from benchmarks.harness import cli

    out = tmp / "bench"
    _bench(out, "tabular-mdp-nonstationary")
    (out / "config.json").write_bytes(b'{"runs": 2, "se')
    before = snapshot(out)
    with contextlib.redirect_stdout(io.StringIO()):
        outcome = rp.refused(
            lambda: rp.command_line(cli.main, ["--plot-only", "--out", str(out), "--quiet"]),
            "config.json",
            kinds=(rp.CommandLineExit, ValueError),
        )
    return unchanged(outcome, before, out)


@probe("benchmark --plot-only re-draws a finished run", Section.LOST, slow=True)
def _plot_only_redraws(tmp: Path) -> Outcome:
    out = tmp / "bench"
    _bench(out, "tabular-mdp-nonstationary")
    csv = (out / "regret.csv").read_bytes()
    from benchmarks.harness import cli

    with contextlib.redirect_stdout(io.StringIO()):
        rp.command_line(cli.main, ["--plot-only", "--out", str(out), "--quiet"])
    if (out / "regret.csv").read_bytes() != csv or not (out / "tabular-mdp-nonstationary.png").is_file():
        return Outcome(Verdict.PROBLEM, "the CSV changed or the plot is gone")
    return Outcome(Verdict.HANDLED, "plots and summary re-drawn, regret.csv unchanged")


# ===================================================================================== trainers
rp.surface("Generalist trainers' configurations")


def _config(module: str, cls: str, **fields: Any) -> Any:
    import importlib

    return getattr(importlib.import_module(module), cls)(**fields)


GENERALIST = ("icrl_gym.training.generalist", "GeneralistTrainConfig")
LINEAR = ("icrl_gym.training.linear_generalist", "LinearGeneralistTrainConfig")

for _where, _fields in (
    (GENERALIST, {"queries": 0}),
    (GENERALIST, {"checkpoint_every": 0}),
    (GENERALIST, {"log_every": 0}),
    (GENERALIST, {"min_arms": 9, "max_arms": 3}),
    (GENERALIST, {"min_horizon": 0}),
    (GENERALIST, {"max_epsilon": 2.5}),
    (GENERALIST, {"dagger_fraction": 2.5}),
    (GENERALIST, {"steps": -5}),
    (GENERALIST, {"lr": -1.0}),
    (LINEAR, {"min_noise": 0.0}),
    (LINEAR, {"min_dim": 0}),
    (LINEAR, {"max_dim": 50}),
):
    _field, _value = next(iter(_fields.items()))
    rp.input_probe(
        f"{_where[1]}({', '.join(f'{k}={v}' for k, v in _fields.items())})",
        Section.CRASH,
        lambda where=_where, fields=_fields: _config(*where, **fields),
        _field,
        str(_value),
        kinds=(ValueError,),
    )


# ===================================================================================== compiled kernel
rp.surface("Compiled decode kernel: its cache")

KERNEL_RUN = """
import warnings, torch
from icrl_gym.models.native import native_kernels
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kernel = native_kernels()
print("kernel" if kernel is not None else "fallback", "|", "; ".join(str(w.message) for w in caught))
"""


def _kernel_process(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ICRL_GYM_NATIVE_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    env.pop("ICRL_GYM_NATIVE", None)
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-c", KERNEL_RUN], env=env, cwd=root, capture_output=True, text=True)


def _kernel_outcome(done: subprocess.CompletedProcess[str]) -> Outcome:
    if done.returncode != 0:
        return Outcome(
            Verdict.PROBLEM, f"the process died (exit status {done.returncode}): {rp.short(done.stderr[-300:])}"
        )
    return Outcome(Verdict.HANDLED, rp.short(done.stdout.strip()))


@probe("kernel cache: a truncated library", Section.CRASH, slow=True)
def _kernel_truncated(tmp: Path) -> Outcome:
    first = _kernel_process(tmp / "cache")
    libraries = sorted((tmp / "cache").rglob("*.so"))
    if first.returncode != 0 or not libraries:
        return Outcome(Verdict.HANDLED, f"no compiler here, nothing cached: {rp.short(first.stdout.strip())}")
    for library in libraries:
        library.write_bytes(library.read_bytes()[:4096])
    return _kernel_outcome(_kernel_process(tmp / "cache"))


@probe("kernel cache: a file where the cache folder should be", Section.CRASH, slow=True)
def _kernel_cache_file(tmp: Path) -> Outcome:
    (tmp / "cache").write_text("not a folder\n")
    outcome = _kernel_outcome(_kernel_process(tmp / "cache"))
    return unchanged(outcome, {".": b"not a folder\n"}, tmp / "cache")
