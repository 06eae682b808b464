"""Probes of the run-time surfaces added after the first pass: vector environments, the Gittins cache, generalists."""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import icrl_gym
from agents import make_agent
from tests.reliability import framework as rp
from tests.reliability.framework import Outcome, Section, Verdict, probe
from tests.reliability.new_surfaces import each_env, handled_by_each, snapshot, unchanged, vec_env

# ===================================================================================== vector environments
rp.surface("Vector environments")

rp.input_probe(
    "vector env num_envs=0",
    Section.CRASH,
    lambda: vec_env("ICRL-LinearBandit-v0", 0),
    "num_envs",
    "0",
    kinds=(ValueError,),
)


@probe("vector env num_envs=10**9 (size guard)", Section.CRASH)
def _vec_billion(tmp: Path) -> Outcome:
    from icrl_gym.envs.validation import MemoryLimitError

    cases = each_env(lambda env_id: rp.traced_peak(lambda: vec_env(env_id, 10**9)))
    shown = ""
    for env_id, run in cases.items():
        result, peak = run()
        if not isinstance(result, MemoryLimitError) or "GiB" not in str(result):
            return Outcome(
                Verdict.PROBLEM, f"{env_id}: {rp.described(result) if isinstance(result, Exception) else 'accepted'}"
            )
        if peak > 50 * 2**20:
            return Outcome(Verdict.PROBLEM, f"{env_id}: refused only after allocating {peak / 2**20:.0f} MiB")
        shown = rp.described(result)
    return Outcome(Verdict.CLEAR, f"all {len(cases)} environments, before allocating: {shown}")


@probe("vector env step() before reset()", Section.CRASH)
def _vec_step_first(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "environments",
        each_env(lambda env_id: vec_env(env_id).step(np.zeros(3, dtype=np.int64))),
        "reset() before step()",
        kinds=(RuntimeError,),
    )


def _vec_stepped(env_id: str, actions: Any) -> Any:
    venv = vec_env(env_id)
    venv.reset(seed=0)
    return venv.step(actions)


@probe("vector env given 2 actions for 3 runs", Section.CRASH)
def _vec_two_actions(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "environments",
        each_env(lambda env_id: _vec_stepped(env_id, np.zeros(2, dtype=np.int64))),
        "(3,)",
        "(2,)",
        kinds=(ValueError,),
    )


@probe("vector env given action 99 or 0.5", Section.SILENT)
def _vec_bad_action(tmp: Path) -> Outcome:
    cases = {
        f"{env_id} {bad}": (lambda env_id=env_id, bad=bad: _vec_stepped(env_id, np.array([0, bad, 0])))
        for env_id in icrl_gym.ENV_IDS
        for bad in (99, 0.5)
    }
    return rp.refused_by_each("cases", cases, "actions", kinds=(ValueError,))


rp.input_probe(
    "vector env reset(options={'w_star': wrong shape})",
    Section.SILENT,
    lambda: vec_env("ICRL-LinearBandit-v0").reset(options={"w_star": np.zeros((2, 5))}),
    "w_star",
    "(2, 5)",
    kinds=(ValueError,),
)


@probe("vector env stepped past the end of its runs", Section.SILENT)
def _vec_past_end(tmp: Path) -> Outcome:
    def run(env_id: str) -> str:
        venv = vec_env(env_id, horizon=3)
        _, first = venv.reset(seed=0)
        steps = 3 * venv.unwrapped.mdp_spec.episodes if "MDP" in env_id or "Dark" in env_id else 3
        for _ in range(steps):
            *_, terminated, _, _ = venv.step(np.zeros(3, dtype=np.int64))
        if not terminated.all():
            raise AssertionError(f"not terminated after {steps} steps")
        obs, rewards, terminated, truncated, info = venv.step(np.zeros(3, dtype=np.int64))
        if rewards.any() or terminated.any() or truncated.any():
            raise AssertionError("the autoreset step returned rewards or ended runs")
        return "the step after the end resets every run (zero rewards, nothing ended)"

    return handled_by_each("environments", each_env(run))


# ===================================================================================== Gittins cache
rp.surface("Gittins table cache")


@contextlib.contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` inside the block."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def _gittins_with_cache(cache: Path, keep: Path) -> Outcome:
    """The Gittins agent with ``$ICRL_GYM_GITTINS_CACHE=cache``: it must act, warn once, and leave ``keep`` alone."""
    from icrl_gym.estimators.gittins import CACHE_ENV

    before = snapshot(keep)
    env = gym.make("ICRL-BernoulliBandit-v0", horizon=20).unwrapped
    obs, info = env.reset(seed=0)
    import icrl_gym.estimators.gittins as gittins

    fresh = rp.replaced(gittins, "_TABLES", {})  # as in a new process: no table in memory yet
    with fresh, environment(CACHE_ENV, str(cache)), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for _ in range(2):  # a second agent in the same process: still one warning
                agent = make_agent("gittins")
                agent.reset(info)
                action = agent.act(obs)
        except Exception as err:
            return Outcome(Verdict.PROBLEM, f"the agent stopped: raw {rp.described(err)}")
    mine = [w for w in caught if "Gittins table cache" in str(w.message)]
    if len(mine) != 1:
        return Outcome(Verdict.PROBLEM, f"{len(mine)} warnings about the cache (one expected)")
    outcome = Outcome(
        Verdict.HANDLED, f"acts (arm {action}) from a table in memory; RuntimeWarning: {rp.short(str(mine[0].message))}"
    )
    return unchanged(outcome, before, keep)


@probe("ICRL_GYM_GITTINS_CACHE pointing at a file", Section.CRASH)
def _gittins_cache_file(tmp: Path) -> Outcome:
    (tmp / "cache").write_text("not a folder\n")
    return _gittins_with_cache(tmp / "cache", tmp / "cache")


@probe("ICRL_GYM_GITTINS_CACHE pointing below a file", Section.CRASH)
def _gittins_cache_below_file(tmp: Path) -> Outcome:
    (tmp / "cache").write_text("not a folder\n")
    return _gittins_with_cache(tmp / "cache" / "gittins", tmp / "cache")


@probe("ICRL_GYM_GITTINS_CACHE pointing at a folder that cannot be written", Section.CRASH)
def _gittins_cache_read_only(tmp: Path) -> Outcome:
    """A read-only folder (the write is refused as the OS refuses it, so that the probe holds as root too)."""
    import icrl_gym.estimators.gittins as gittins

    def refuse(path: Any, write: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    (tmp / "cache").mkdir()
    with rp.replaced(gittins, "atomic_write", refuse):
        return _gittins_with_cache(tmp / "cache", tmp / "cache")


@probe("ICRL_GYM_GITTINS_CACHE set to an empty string", Section.CRASH)
def _gittins_cache_empty(tmp: Path) -> Outcome:
    from icrl_gym.estimators.gittins import CACHE_ENV, gittins_cache_dir

    with environment(CACHE_ENV, ""):
        where = gittins_cache_dir()
        agent = make_agent("gittins")
        obs, info = gym.make("ICRL-BernoulliBandit-v0", horizon=20).unwrapped.reset(seed=0)
        agent.reset(info)
        agent.act(obs)
    if where is not None or any(Path.cwd().glob("gittins_N*.npy")):
        return Outcome(Verdict.PROBLEM, f"an empty value was taken as the folder {where}")
    return Outcome(Verdict.HANDLED, "an empty value means no disk cache; the table stays in memory")


@probe("Gittins cache file truncated", Section.SILENT)
def _gittins_cache_truncated(tmp: Path) -> Outcome:
    import icrl_gym.estimators.gittins as gittins
    from icrl_gym.estimators.gittins import cached_gittins_table, gittins_cache_path, gittins_table

    cache = tmp / "cache"
    with rp.replaced(gittins, "_TABLES", {}):  # a fresh process: no table in memory
        cached_gittins_table(12, cache)
    path = gittins_cache_path(cache, 12)
    path.write_bytes(path.read_bytes()[:100])
    with rp.replaced(gittins, "_TABLES", {}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = cached_gittins_table(12, cache)
    with rp.replaced(gittins, "_TABLES", {}):
        expected = gittins_table(12).values  # built afresh for N = 12 (memory may hold a larger table)
    if not (np.array_equal(table.values, expected) and np.array_equal(np.load(path), expected)):
        return Outcome(Verdict.PROBLEM, "the truncated table was used or not rebuilt")
    return Outcome(Verdict.HANDLED, f"rebuilt and replaced; RuntimeWarning: {rp.short(str(caught[0].message))}")


# ===================================================================================== generalist agents
rp.surface("Generalist agents' inputs")

GENERALISTS = {
    "bernoulli-generalist": ("generalist", "ICRL-BernoulliBandit-v0", 1.0),
    "linear-generalist-v1": ("linear_generalist", "ICRL-LinearBandit-v0", 0.5),
}
"""Shipped generalist -> (agent name, environment, a valid reward)."""


def _generalist(ckpt: str, horizon: int = 3, **env_kwargs: Any) -> tuple[Any, np.ndarray, dict[str, Any]]:
    name, env_id, _ = GENERALISTS[ckpt]
    obs, info = gym.make(env_id, horizon=horizon, **env_kwargs).unwrapped.reset(seed=0)
    agent = make_agent({"name": name, "checkpoint": ckpt})
    agent.reset(info)
    return agent, obs, info


def _past_horizon(ckpt: str) -> Any:
    agent, obs, _ = _generalist(ckpt, horizon=3)
    reward = GENERALISTS[ckpt][2]
    for _ in range(3):
        agent.update(agent.act(obs), reward)
    return agent.act(obs)


def each_generalist(title: str, action: Callable[[str], Any], *fragments: str) -> None:
    """One probe per shipped generalist: ``action(checkpoint)`` must raise a ``ValueError`` naming ``fragments``."""
    for ckpt in GENERALISTS:
        rp.input_probe(
            f"{ckpt} {title}", Section.SILENT, lambda ckpt=ckpt: action(ckpt), *fragments, kinds=(ValueError,)
        )


each_generalist("one step past the horizon it was reset for", _past_horizon, "T=3")


def _reused_vector_env(ckpt: str) -> Any:
    """The agent on a vector env that starts its second run without the agent being reset."""
    name, env_id, _ = GENERALISTS[ckpt]
    venv = vec_env(env_id, num_envs=2, horizon=3)
    obs, info = venv.reset(seed=0)
    agent = make_agent({"name": name, "checkpoint": ckpt})
    agent.reset(info)
    for _ in range(3):  # the first run
        actions = agent.act(obs)
        obs, rewards, *_ = venv.step(actions)
        agent.update(actions, rewards)
    obs, *_ = venv.step(np.zeros(2, dtype=np.int64))  # the autoreset step: the second run starts
    return agent.act(obs)


each_generalist("on a vector env's second run without a reset", _reused_vector_env, "T=3")


def _big_reward(ckpt: str) -> Any:
    agent, obs, _ = _generalist(ckpt, horizon=5)
    agent.update(agent.act(obs), 1e40)
    return agent.act(obs)


each_generalist("given a reward of 1e40", _big_reward, "reward")


def _nan_reward(ckpt: str) -> Any:
    agent, obs, _ = _generalist(ckpt, horizon=5)
    return agent.update(agent.act(obs), float("nan"))


@probe("generalists given a NaN reward", Section.SILENT)
def _generalist_nan_reward(tmp: Path) -> Outcome:
    cases = {ckpt: (lambda ckpt=ckpt: _nan_reward(ckpt)) for ckpt in GENERALISTS}
    return rp.refused_by_each("generalists", cases, "rewards", "nan", kinds=(ValueError,))


def _reset_with_horizon(ckpt: str, horizon: Any) -> Any:
    agent, obs, info = _generalist(ckpt)
    agent.reset({**info, "horizon": horizon, "model": {**info["model"], "horizon": horizon}})
    return agent.act(obs)


for _ckpt in GENERALISTS:
    for _horizon, _kind in ((2.7, TypeError), (0, ValueError)):  # the wrong type, then a value out of range
        rp.input_probe(
            f"{_ckpt} reset with horizon={_horizon}",
            Section.SILENT,
            lambda ckpt=_ckpt, horizon=_horizon: _reset_with_horizon(ckpt, horizon),
            "horizon",
            str(_horizon),
            kinds=(_kind,),
        )


@probe("linear-generalist-v1 with noise_std=1e-30", Section.SILENT)
def _tiny_noise(tmp: Path) -> Outcome:
    agent, obs, _ = _generalist("linear-generalist-v1", horizon=5, noise_std=1e-30)
    try:
        for _ in range(3):
            action = agent.act(obs)
            agent.update(action, 0.1)
        policy = agent.policy(obs)
    except ValueError as err:  # a refusal that does not say why: the noise level is what it cannot take
        return rp.classify_error(err, ("noise_std", "1e-30"), (ValueError,))
    if not (np.isfinite(policy).all() and abs(float(policy.sum()) - 1.0) < 1e-5):
        return Outcome(Verdict.PROBLEM, f"policy {policy} is not a distribution")
    return Outcome(Verdict.HANDLED, f"a finite policy summing to 1 (plays arm {agent.act(obs)})")


@probe("generalists act() before reset()", Section.CRASH)
def _generalist_before_reset(tmp: Path) -> Outcome:
    cases = {
        ckpt: (lambda name=name, ckpt=ckpt: make_agent({"name": name, "checkpoint": ckpt}).act(np.zeros(50)))
        for ckpt, (name, _, _) in GENERALISTS.items()
    }
    return rp.refused_by_each("generalists", cases, "reset()", kinds=(RuntimeError,))


@probe("generalists given an observation of the wrong shape", Section.CRASH)
def _generalist_wrong_obs(tmp: Path) -> Outcome:
    cases = {ckpt: (lambda ckpt=ckpt: _generalist(ckpt)[0].act(np.zeros(7))) for ckpt in GENERALISTS}
    return rp.refused_by_each("generalists", cases, "observation", "(7,)", kinds=(ValueError,))


@probe("generalists update(99)", Section.SILENT)
def _generalist_update_99(tmp: Path) -> Outcome:
    def run(ckpt: str) -> Any:
        agent, obs, _ = _generalist(ckpt)
        agent.act(obs)
        return agent.update(99, GENERALISTS[ckpt][2])

    return rp.refused_by_each(
        "generalists", {c: (lambda c=c: run(c)) for c in GENERALISTS}, "actions", "99", kinds=(ValueError,)
    )


@probe("each generalist on the other bandit family", Section.SILENT)
def _generalist_wrong_family(tmp: Path) -> Outcome:
    cases = {
        "bernoulli-generalist on a linear bandit": lambda: _reset_on(
            "generalist", "bernoulli-generalist", "ICRL-LinearBandit-v0"
        ),
        "linear-generalist-v1 on a Bernoulli bandit": lambda: _reset_on(
            "linear_generalist", "linear-generalist-v1", "ICRL-BernoulliBandit-v0"
        ),
    }
    return rp.refused_by_each("generalists", cases, "reward=", kinds=(ValueError,))


def _reset_on(name: str, ckpt: str, env_id: str, **kwargs: Any) -> Any:
    agent = make_agent({"name": name, "checkpoint": ckpt})
    return agent.reset(gym.make(env_id, **kwargs).unwrapped.reset(seed=0)[1])


rp.input_probe(
    "linear-generalist-v1 on a bandit with d=9 (it plays d <= 8)",
    Section.SILENT,
    lambda: _reset_on("linear_generalist", "linear-generalist-v1", "ICRL-LinearBandit-v0", dim=9),
    "d=9",
    kinds=(ValueError,),
)


@probe("generalists on a tabular MDP", Section.CRASH)
def _generalist_on_mdp(tmp: Path) -> Outcome:
    cases = {
        ckpt: (lambda name=name, ckpt=ckpt: _reset_on(name, ckpt, "ICRL-TabularMDP-v0"))
        for ckpt, (name, _, _) in GENERALISTS.items()
    }
    return rp.refused_by_each("generalists", cases, "bandit", "MDP", kinds=(ValueError,))


@probe("generalists given the other generalist's checkpoint", Section.CRASH)
def _generalist_swapped(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError

    cases = {
        "generalist + linear-generalist-v1": lambda: make_agent(
            {"name": "generalist", "checkpoint": "linear-generalist-v1"}
        ),
        "linear_generalist + bernoulli-generalist": lambda: make_agent(
            {"name": "linear_generalist", "checkpoint": "bernoulli-generalist"}
        ),
    }
    return rp.refused_by_each("swaps", cases, "make_agent(", kinds=(CheckpointError,))


@probe("a transformer agent deep-copied and pickled after reset", Section.CRASH)
def _agent_copies(tmp: Path) -> Outcome:
    env = gym.make("ICRL-LinearBandit-v0", horizon=5).unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent({"name": "transformer", "checkpoint": "linear-bandit-ad-linucb"})
    agent.reset(info)
    agent.update(agent.act(obs), 0.1)
    try:
        clones = [copy.deepcopy(agent), pickle.loads(pickle.dumps(agent))]
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"raw {rp.described(err)}")
    expected = agent.policy(obs)
    if not all(np.allclose(c.policy(obs), expected, atol=1e-5) for c in clones):
        return Outcome(Verdict.PROBLEM, "a copy plays another policy")
    return Outcome(Verdict.HANDLED, "deep copy and pickle play the same policy as the original")
