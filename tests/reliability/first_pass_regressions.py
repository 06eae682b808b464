"""First-pass probes of inputs that used to crash and of work that used to be lost (commands, harness)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import icrl_gym  # noqa: F401  (registers the environments)
from agents import make_agent
from tests.reliability import framework as rp
from tests.reliability.first_pass import (
    INF,
    MDP_AGENTS,
    _checkpoint_error,
    _each_mdp_agent,
    _linear,
    _linear_info,
    _mdp,
    _mdp_agent,
    _pretrain,
    _resume_outcome,
    _resumed,
)
from tests.reliability.framework import Outcome, Section, Verdict, probe

rp.surface("First pass: inputs that used to crash")


rp.input_probe("linear dim=2.5", Section.CRASH, lambda: _linear(dim=2.5), "dim", "2.5", kinds=(ValueError,))
rp.input_probe("linear dim='5'", Section.CRASH, lambda: _linear(dim="5"), "dim", "'5'", kinds=(ValueError,))


def _vector(num_envs: Any) -> Any:
    return gym.make_vec("ICRL-LinearBandit-v0", num_envs=num_envs, vectorization_mode="vector_entry_point")


rp.input_probe("vector env num_envs=-1", Section.CRASH, lambda: _vector(-1), "num_envs", "-1", kinds=(ValueError,))
rp.input_probe("vector env num_envs=2.5", Section.CRASH, lambda: _vector(2.5), "num_envs", "2.5", kinds=(TypeError,))
rp.input_probe(
    "linear prior_high=inf",
    Section.CRASH,
    lambda: _linear(prior_high=INF).reset(seed=0),
    "prior_high",
    "inf",
    kinds=(ValueError,),
)


@probe("step(inf) on every environment", Section.CRASH)
def _step_inf(tmp: Path) -> Outcome:
    def step(env_id: str) -> Any:
        env = gym.make(env_id).unwrapped
        env.reset(seed=0)
        return env.step(INF)

    outcome = rp.refused_by_each(
        "environments", {e: (lambda e=e: step(e)) for e in icrl_gym.ENV_IDS}, "action", "inf", kinds=(ValueError,)
    )
    if "-9223372036854775808" in outcome.behaviour:
        return Outcome(Verdict.PROBLEM, f"the message shows the wrapped integer: {outcome.behaviour}")
    return outcome


def _bandit_agent_act(obs: Any) -> Any:
    _, info = _linear().unwrapped.reset(seed=0)
    agent = make_agent("linucb")
    agent.reset(info)
    return agent.act(obs)


def _mdp_agent_act(obs: Any) -> Any:
    agent, _, _ = _mdp_agent("psrl")
    return agent.act(obs)


def _odd_observation(obs: Any, fragment: str, kind: type[Exception]) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        agents = (("linucb", _bandit_agent_act), ("psrl", _mdp_agent_act))
        cases = {name: (lambda act=act: act(obs)) for name, act in agents}
        return rp.refused_by_each("agents (linucb, psrl)", cases, fragment, kinds=(kind,))

    return run


rp.add_probe(
    "agents given a scalar observation", Section.CRASH, _odd_observation(3.0, "observation of shape ()", ValueError)
)
rp.add_probe("agents given None as the observation", Section.CRASH, _odd_observation(None, "act() needs", TypeError))


@probe("MDP agents given an observation of the wrong length", Section.CRASH)
def _wrong_length(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "MDP agents",
        _each_mdp_agent(lambda agent, obs, info: agent.act(np.zeros(7))),
        "observation",
        "(7,)",
        kinds=(ValueError,),
    )


@probe("MDP agents given bandit reset info", Section.CRASH)
def _bandit_info(tmp: Path) -> Outcome:
    info = _linear_info()
    cases = {name: (lambda name=name: make_agent(name).reset(info)) for name in (*MDP_AGENTS, "dark_room_psrl")}
    return rp.refused_by_each("MDP agents", cases, "tabular-MDP", "v_star", kinds=(ValueError,))


@probe("Bernoulli checkpoint on an MDP environment", Section.CRASH)
def _bernoulli_on_mdp(tmp: Path) -> Outcome:
    info = _mdp()[2]
    cases = {
        name: (lambda name=name: make_agent({"name": name, "checkpoint": "bernoulli-ad-ucb"}).reset(info))
        for name in ("transformer", "mdp_transformer")
    }
    return rp.refused_by_each(
        "learned agents (transformer, mdp_transformer)", cases, "bernoulli-ad-ucb", kinds=_checkpoint_error()
    )


@probe("PPO checkpoint loaded with TransformerAgent", Section.CRASH)
def _ppo_as_transformer(tmp: Path) -> Outcome:
    from agents.learned.transformer import TransformerAgent

    name = "bernoulli-ppo-statistics"
    cases = {
        "make_agent": lambda: make_agent({"name": "transformer", "checkpoint": name}),
        "TransformerAgent.pretrained": lambda: TransformerAgent.pretrained(name),
    }
    return rp.refused_by_each("ways (make_agent, TransformerAgent.pretrained)", cases, name, kinds=(ValueError,))


@probe("device='cuda' without CUDA", Section.CRASH)
def _cuda_without_cuda(tmp: Path) -> Outcome:
    import torch

    if torch.cuda.is_available():
        return Outcome(Verdict.HANDLED, "CUDA is present here: nothing to refuse")
    spec = {"name": "transformer", "checkpoint": "bernoulli-ad-ucb", "device": "cuda"}
    return rp.refused(
        lambda: make_agent(spec).reset(gym.make("ICRL-BernoulliBandit-v0").reset(seed=0)[1]),
        "cuda",
        kinds=(ValueError,),
    )


def _pretrain_command_line(tmp: Path, *overrides: str) -> Any:
    """``python -m icrl_gym.training.pretrain --set ...`` up to the point where training would start."""
    from icrl_gym.training import pretrain as module

    argv = ["--quiet", "--set", f"out_dir={tmp / 'cli-run'}", *overrides]
    with rp.replaced(module, "pretrain", rp.never_started):
        return rp.command_line(module.main, argv)


@probe("CLI --set steps=abc", Section.CRASH)
def _set_steps_abc(tmp: Path) -> Outcome:
    return rp.refused(lambda: _pretrain_command_line(tmp, "steps=abc"), "steps", "abc", kinds=(rp.CommandLineExit,))


@probe("CLI --set eval_every=0", Section.CRASH)
def _set_eval_every_zero(tmp: Path) -> Outcome:
    return rp.refused(
        lambda: _pretrain_command_line(tmp, "eval_every=0"), "eval_every", "0", kinds=(rp.CommandLineExit,)
    )


def _bench_arguments(argv: list[str]) -> Any:
    from benchmarks.harness.cli import parse_args

    return rp.command_line(parse_args, argv)


def _bench_refused(argv: list[str], *fragments: str) -> Outcome:
    """The benchmark command line given ``argv`` must exit with a message naming every fragment."""
    return rp.refused(lambda: _bench_arguments(argv), *fragments, kinds=(rp.CommandLineExit,))


@probe("benchmark CLI --runs 1", Section.CRASH)
def _bench_runs_1(tmp: Path) -> Outcome:
    return _bench_refused(["--runs", "1", "--out", str(tmp)], "--runs", "1")


@probe("benchmark CLI unknown experiment", Section.CRASH)
def _bench_unknown(tmp: Path) -> Outcome:
    argv = ["--experiments", "no-such-experiment", "--out", str(tmp)]
    return _bench_refused(argv, "no-such-experiment")


@probe("benchmark CLI --plot-only on an empty folder", Section.CRASH)
def _bench_plot_only(tmp: Path) -> Outcome:
    empty = tmp / "empty"
    empty.mkdir()
    argv = ["--plot-only", "--out", str(empty)]
    return _bench_refused(argv, "--plot-only", str(empty))


@probe("A=10**9 arms (size guard)", Section.CRASH)
def _billion_arms(tmp: Path) -> Outcome:
    from icrl_gym.envs.validation import MemoryLimitError

    result, peak = rp.traced_peak(lambda: _linear(num_actions=10**9))
    if not isinstance(result, Exception):
        return Outcome(Verdict.PROBLEM, f"accepted ({peak / 2**30:.1f} GiB traced)")
    outcome = rp.classify_error(result, ("GiB",), kinds=(MemoryLimitError,))
    if peak > 50 * 2**20:
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}, but only after allocating {peak / 2**20:.0f} MiB")
    return Outcome(outcome.verdict, f"{outcome.behaviour} (peak {peak / 2**20:.1f} MiB traced)")


@probe("10,000-instance DarkRoom vector env memory", Section.CRASH)
def _ten_thousand_dark_rooms(tmp: Path) -> Outcome:
    from icrl_gym.envs.dark_room import DarkRoomVectorEnv

    def run() -> float:
        env = DarkRoomVectorEnv(num_envs=10_000)
        env.reset(seed=0)
        return sum(float(env.step(np.full(10_000, 3))[1].sum()) for _ in range(5))

    result, peak = rp.traced_peak(run)
    if isinstance(result, Exception):
        return Outcome(Verdict.PROBLEM, f"raw {rp.described(result)} ({peak / 2**20:.0f} MiB traced)")
    verdict = Verdict.HANDLED if peak < 400 * 2**20 else Verdict.PROBLEM
    return Outcome(verdict, f"reset and 5 steps of 10,000 instances, peak {peak / 2**20:.0f} MiB traced")


rp.surface("First pass: work that used to be lost")


BENCH_FIRST, BENCH_SECOND = "tabular-mdp-nonstationary", "ood-linear-noise"
"""Two cheap experiments of the harness (an expert-only MDP one, a linear one with a shipped transformer)."""


def _bench(out: Path, experiments: str) -> list[str]:
    """``python -m benchmarks`` with a few runs into ``out``; returns the experiments it computed (not reused).

    Only the rows played count: the figures of every experiment are tasks of the same executor too.
    """
    from benchmarks.executor import tasks
    from benchmarks.harness import cli

    computed: list[str] = []

    def counting(task: Any) -> Any:
        if isinstance(task, tasks.RowTask) and task.experiment not in computed:
            computed.append(task.experiment)
        return real(task)

    real = tasks.run_task
    argv = ["--experiments", experiments, "--runs", "4", "--seed", "1", "--out", str(out), "--quiet", "--workers", "1"]
    with rp.replaced(tasks, "run_task", counting), contextlib.redirect_stdout(io.StringIO()):
        rp.command_line(cli.main, argv)
    return computed


class Stop(BaseException):
    """A stop in the middle of a run (as Ctrl-C would: not an ``Exception``)."""


@probe("benchmark stopped mid-run, then resumed", Section.LOST, slow=True)
def _bench_resume(tmp: Path) -> Outcome:
    from benchmarks.executor import tasks
    from benchmarks.harness import store

    out = tmp / "bench"
    real = tasks.run_task

    def stop_in_second(task: Any) -> Any:
        if task.experiment == BENCH_SECOND:
            raise Stop
        return real(task)

    with contextlib.suppress(Stop), rp.replaced(tasks, "run_task", stop_in_second):
        _bench(out, f"{BENCH_FIRST},{BENCH_SECOND}")
    stored = sorted(p.name for p in (out / store.STORE).glob("*.json")) if (out / store.STORE).is_dir() else []
    if stored != [f"{BENCH_FIRST}.json"]:
        return Outcome(Verdict.PROBLEM, f"after the stop the folder holds {stored or 'no stored result'} (work lost)")
    computed = _bench(out, f"{BENCH_FIRST},{BENCH_SECOND}")
    experiments = {row.split(",")[0] for row in (out / "regret.csv").read_text().splitlines()[1:]}
    if computed != [BENCH_SECOND] or experiments != {BENCH_FIRST, BENCH_SECOND}:
        return Outcome(Verdict.PROBLEM, f"the resumed run computed {computed}, its CSV holds {sorted(experiments)}")
    return Outcome(
        Verdict.HANDLED, "the finished experiment was stored at once; the resumed run computed only the other"
    )


@probe("benchmark subset into an existing folder (stale plots)", Section.LOST, slow=True)
def _bench_stale_plots(tmp: Path) -> Outcome:
    out = tmp / "bench"
    _bench(out, f"{BENCH_FIRST},{BENCH_SECOND}")
    _bench(out, BENCH_SECOND)
    stale = sorted(p.name for p in out.glob(f"{BENCH_FIRST}*.png"))
    experiments = {row.split(",")[0] for row in (out / "regret.csv").read_text().splitlines()[1:]}
    if stale or experiments != {BENCH_SECOND}:
        return Outcome(Verdict.PROBLEM, f"left {stale} beside a CSV of {sorted(experiments)}")
    return Outcome(Verdict.HANDLED, f"the plots of {BENCH_FIRST} were removed; the outputs describe the subset only")


@probe("training: run folder moved, then resumed", Section.LOST)
def _moved_run(tmp: Path) -> Outcome:
    _pretrain(tmp / "run", 1, "first")
    moved = tmp / "moved"
    (tmp / "run").rename(moved)
    try:
        training = _pretrain(moved, 2, "resume")
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"refused the moved folder: {rp.described(err)}")
    if _resumed(training):
        return Outcome(Verdict.HANDLED, f"resumed in the new place to step {training['step']}")
    return Outcome(Verdict.PROBLEM, "started again from step 0 in the moved folder (work lost)")


@probe("training: config mismatch names the field", Section.LOST)
def _config_mismatch(tmp: Path) -> Outcome:
    _pretrain(tmp / "run", 1, "first")
    return _resume_outcome(lambda: _pretrain(tmp / "run", 2, "resume", lr=5e-3), "lr")
