"""Probes of the surfaces added after the first pass: export, Gymnasium conventions, caches, generalists, harness.

Each probe tries one case a new user or an adversary would.  Where a probe finds a problem in code
that another part of the work owns, it carries ``known`` (who fixes it): the table marks it and the
test suite expects it to fail until the fix lands.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import pickle
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import icrl_gym
from agents import make_agent
from tests.reliability.first_pass import _bench, _bench_arguments, _pretrain
from tests.reliability.framework import (
    CommandLineExit,
    Outcome,
    Section,
    Verdict,
    add_probe,
    classify_error,
    command_line,
    described,
    input_probe,
    probe,
    refused,
    refused_by_each,
    replaced,
    short,
    surface,
    traced_peak,
)


def handled_by_each(what: str, cases: dict[str, Callable[[], str]]) -> Outcome:
    """Every case must run and return a description of what it did; an exception makes the probe a PROBLEM."""
    shown = ""
    for label, action in cases.items():
        try:
            shown = action()
        except Exception as err:
            return Outcome(Verdict.PROBLEM, f"{label}: raw {described(err)}")
    return Outcome(Verdict.HANDLED, f"all {len(cases)} {what}: {shown}")


def each_env(action: Callable[[str], Any]) -> dict[str, Callable[[], Any]]:
    """``action(env_id)`` for every registered environment."""
    return {env_id: (lambda env_id=env_id: action(env_id)) for env_id in icrl_gym.ENV_IDS}


def snapshot(path: Path) -> dict[str, bytes | None]:
    """Every file under ``path`` (a file: itself) by relative name, with its bytes (None for a folder)."""
    if path.is_symlink():
        return {".": os.readlink(path).encode()}
    if path.is_file():
        return {".": path.read_bytes()}
    if not path.is_dir():
        return {}
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def unchanged(outcome: Outcome, before: dict[str, bytes | None], path: Path) -> Outcome:
    """``outcome``, unless ``path`` lost or changed a file it held: then a PROBLEM saying which (work lost)."""
    after = snapshot(path)
    lost = sorted(set(before) - set(after))
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    if lost or changed:
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and {path.name} lost {lost} changed {changed}")
    return outcome


# ===================================================================================== export
surface("Checkpoint export (Hub-layout folders)")

SHIPPED = "bernoulli-ad-ucb"
"""A small shipped checkpoint that the export probes copy."""


def _export(stem: Any, target: Path) -> Path:
    from icrl_gym.checkpoint import resolve_checkpoint
    from icrl_gym.hub import export_hf_folder

    return export_hf_folder(resolve_checkpoint(stem) if isinstance(stem, str) else stem, target)


def _export_refused(target: Path, *fragments: str, stem: Any = SHIPPED) -> Outcome:
    """Export into ``target`` must raise ``FileExistsError`` naming ``fragments`` and leave ``target`` as it was."""
    before = snapshot(target)
    outcome = refused(lambda: _export(stem, target), str(target), *fragments, kinds=(FileExistsError,))
    return unchanged(outcome, before, target)


@probe("export into a project folder holding a README and .git/", Section.LOST)
def _export_into_project(tmp: Path) -> Outcome:
    project = tmp / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "README.md").write_text("# my model\n")
    return _export_refused(project, "README.md", ".git")


@probe("export into the training run's own folder", Section.LOST)
def _export_into_run(tmp: Path) -> Outcome:
    run = tmp / "run"
    _pretrain(run, 1, "first")
    stem = next(p.with_suffix("") for p in sorted(run.glob("*.safetensors")))
    return _export_refused(run, "no earlier export wrote", stem=stem)


@probe("export to a path that is a regular file", Section.LOST)
def _export_onto_file(tmp: Path) -> Outcome:
    target = tmp / "model"
    target.write_text("my notes\n")
    return _export_refused(target, "is a file")


@probe("export to a path below a regular file", Section.CRASH)
def _export_below_file(tmp: Path) -> Outcome:
    (tmp / "notes").write_text("my notes\n")
    before = snapshot(tmp / "notes")
    outcome = refused(lambda: _export(SHIPPED, tmp / "notes" / "model"), "notes", kinds=(FileExistsError,))
    return unchanged(outcome, before, tmp / "notes")


@probe("export to a symbolic link to a project folder", Section.LOST)
def _export_onto_link(tmp: Path) -> Outcome:
    project = tmp / "project"
    project.mkdir()
    (project / "README.md").write_text("# mine\n")
    (tmp / "link").symlink_to(project, target_is_directory=True)
    outcome = _export_refused(tmp / "link", "link")
    return unchanged(outcome, {"README.md": b"# mine\n"}, project)


@probe("export into another library's Hub folder (config.json + model.safetensors)", Section.LOST)
def _export_into_foreign_hub_folder(tmp: Path) -> Outcome:
    foreign = tmp / "bert"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    (foreign / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return _export_refused(foreign, "no earlier export wrote")


@probe("export over an earlier export, and into an empty folder", Section.LOST)
def _export_over_export(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import load_checkpoint

    first = _export(SHIPPED, tmp / "hub")
    second = _export("bernoulli-ad-ucb-nopos", tmp / "hub")
    (tmp / "empty").mkdir()
    _export(SHIPPED, tmp / "empty")
    names = sorted(p.name for p in tmp.iterdir())
    if (
        first != second
        or names != ["empty", "hub"]
        or sorted(p.name for p in second.iterdir()) != sorted(("README.md", "config.json", "model.safetensors"))
    ):
        return Outcome(Verdict.PROBLEM, f"left {names} beside the exports")
    _, meta = load_checkpoint(second)
    load_checkpoint(tmp / "empty")
    return Outcome(Verdict.HANDLED, f"replaced whole (now {meta.get('name')!r}), nothing beside; empty folder filled")


@probe("export of a Hub folder onto itself", Section.LOST)
def _export_onto_itself(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import load_checkpoint

    folder = _export(SHIPPED, tmp / "hub")
    before = snapshot(folder)
    _export(folder, folder)
    load_checkpoint(folder)
    return unchanged(
        Outcome(Verdict.HANDLED, "the folder is rewritten with the same three files (record, weights, card) and loads"),
        before,
        folder,
    )


@probe("export into a folder holding only an icrl-gym config.json", Section.LOST)
def _export_into_half_folder(tmp: Path) -> Outcome:
    folder = _export(SHIPPED, tmp / "hub")
    (folder / "model.safetensors").unlink()
    return _export_refused(folder, "config.json")


@probe("export of a corrupt checkpoint", Section.SILENT)
def _export_corrupt(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError

    folder = _export(SHIPPED, tmp / "hub")
    (folder / "model.safetensors").write_bytes(b"truncated")
    outcome = refused(lambda: _export(folder, tmp / "copy"), "model.safetensors", kinds=(CheckpointError,))
    if (tmp / "copy").exists():
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and the target was created")
    return outcome


surface("Checkpoint folders: loading an export")


def _hub_folder(tmp: Path, stem: str = SHIPPED) -> Path:
    return _export(stem, tmp / "hub")


@probe("load a Hub folder whose config.json was edited", Section.SILENT)
def _load_edited_config(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    folder = _hub_folder(tmp)
    record = json.loads((folder / "config.json").read_text())
    record["model"]["n_head"] = 1
    (folder / "config.json").write_text(json.dumps(record))
    return refused(lambda: load_checkpoint(folder), "config.json", kinds=(CheckpointError,))


@probe("load a Hub folder without model.safetensors", Section.CRASH)
def _load_without_weights(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    folder = _hub_folder(tmp)
    (folder / "model.safetensors").unlink()
    return refused(lambda: load_checkpoint(folder), "model.safetensors", kinds=(CheckpointError,))


@probe("load an empty folder as a checkpoint", Section.CRASH)
def _load_empty_folder(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    (tmp / "empty").mkdir()
    return refused(lambda: load_checkpoint(tmp / "empty"), "empty", kinds=(CheckpointError,))


input_probe(
    "load a misspelt shipped name",
    Section.CRASH,
    lambda: make_agent({"name": "transformer", "checkpoint": "bernoulli-ad-ucbb"}),
    "bernoulli-ad-ucbb",
    kinds=(ValueError,),
)


@probe("play both generalists from their exported folders", Section.SILENT)
def _generalists_from_folders(tmp: Path) -> Outcome:
    shown = []
    for name, ckpt, env_id in (
        ("generalist", "bernoulli-generalist", "ICRL-BernoulliBandit-v0"),
        ("linear_generalist", "linear-generalist", "ICRL-LinearBandit-v0"),
    ):
        folder = _export(ckpt, tmp / ckpt)
        env = gym.make(env_id, horizon=5).unwrapped
        obs, info = env.reset(seed=0)
        policies = []
        for checkpoint in (ckpt, str(folder)):
            agent = make_agent({"name": name, "checkpoint": checkpoint})
            agent.reset(info)
            policies.append(agent.policy(obs))
        if not np.array_equal(policies[0], policies[1]):
            return Outcome(Verdict.PROBLEM, f"{ckpt}: the folder plays another policy than the shipped file")
        shown.append(ckpt)
    return Outcome(Verdict.HANDLED, f"{' and '.join(shown)} play the same policies from their Hub folders")


# ===================================================================================== Gymnasium conventions
surface("Gymnasium conventions")


def _make_and_step(env_id: str, **kwargs: Any) -> str:
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    return f"gym.make(id, {', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) resets and steps"


@probe("gym.make(id, render_mode=None)", Section.CRASH)
def _render_mode_none(tmp: Path) -> Outcome:
    return handled_by_each("environments", each_env(lambda env_id: _make_and_step(env_id, render_mode=None)))


def _text_frame(env_id: str) -> str:
    env = gym.make(env_id, render_mode="ansi")
    env.reset(seed=0)
    env.step(1)
    frame = env.render()
    if not isinstance(frame, str) or not frame.strip():
        raise AssertionError(f"render() returned {frame!r}, not a text frame")
    return f"render() returns text, e.g. {frame.splitlines()[0]!r}"


@probe("gym.make(id, render_mode='ansi').render()", Section.CRASH)
def _render_ansi(tmp: Path) -> Outcome:
    return handled_by_each("environments", each_env(_text_frame))


def _unlisted_render_mode(mode: str) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium's own warning that the mode is not listed
            return refused_by_each(
                "environments",
                each_env(lambda env_id: gym.make(env_id, render_mode=mode)),
                "render_mode",
                repr(mode),
                "'ansi'",
                kinds=(ValueError,),
            )

    return run


for _mode in ("human", "rgb_array"):
    add_probe(f"gym.make(id, render_mode={_mode!r})", Section.CRASH, _unlisted_render_mode(_mode))


def _render_without_mode(env_id: str) -> Any:
    env = gym.make(env_id)
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's checker warns before calling render
        return env.render()


@probe("render() without a render mode", Section.CRASH)
def _render_no_mode(tmp: Path) -> Outcome:
    return refused_by_each("environments", each_env(_render_without_mode), "render_mode='ansi'", kinds=(RuntimeError,))


@probe("render() before reset()", Section.CRASH)
def _render_before_reset(tmp: Path) -> Outcome:
    return refused_by_each(
        "environments",
        each_env(lambda env_id: gym.make(env_id, render_mode="ansi").unwrapped.render()),
        "reset() before render()",
        kinds=(RuntimeError,),
    )


@probe("Gymnasium's check_env with the render check", Section.CRASH)
def _check_env_render(tmp: Path) -> Outcome:
    from gymnasium.utils.env_checker import check_env

    def check(env_id: str) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checker's advice on infinite Box bounds
            check_env(gym.make(env_id, render_mode="ansi").unwrapped, skip_render_check=False)
        return "check_env passes, render check included"

    return handled_by_each("environments", each_env(check))


def _vec(env_id: str, num_envs: Any = 3, **kwargs: Any) -> Any:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


def _vec_next_step(env_id: str) -> str:
    venv = _vec(env_id, autoreset_mode=AutoresetMode.NEXT_STEP)
    venv.reset(seed=0)
    venv.step(np.zeros(3, dtype=np.int64))
    return f"make_vec(..., autoreset_mode=NEXT_STEP) steps; metadata says {venv.metadata['autoreset_mode']}"


@probe("make_vec(..., vector_entry_point, autoreset_mode=NEXT_STEP)", Section.CRASH)
def _vec_autoreset_next(tmp: Path) -> Outcome:
    return handled_by_each("environments", each_env(_vec_next_step))


@probe("make_vec(..., autoreset_mode=SAME_STEP or DISABLED)", Section.CRASH)
def _vec_autoreset_other(tmp: Path) -> Outcome:
    cases = {
        f"{env_id} {mode.name}": (lambda env_id=env_id, mode=mode: _vec(env_id, autoreset_mode=mode))
        for env_id in icrl_gym.ENV_IDS
        for mode in (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)
    }
    return refused_by_each("cases", cases, "autoreset_mode", "not supported", "NEXT_STEP", kinds=(ValueError,))


input_probe(
    "make_vec(..., autoreset_mode='sometimes')",
    Section.CRASH,
    lambda: _vec("ICRL-LinearBandit-v0", autoreset_mode="sometimes"),
    "autoreset_mode",
    "'sometimes'",
    kinds=(ValueError,),
)


def _vec_text(env_id: str) -> str:
    venv = _vec(env_id, num_envs=12, render_mode="ansi")
    venv.reset(seed=0)
    venv.step(np.ones(12, dtype=np.int64))
    frame = venv.render()
    if not isinstance(frame, str) or "run 0:" not in frame or "4 more runs" not in frame:
        raise AssertionError(f"render() returned {frame!r}")
    return "render() lists the first 8 runs and counts the rest"


@probe("make_vec(..., render_mode='ansi').render()", Section.CRASH)
def _vec_render(tmp: Path) -> Outcome:
    return handled_by_each("vector environments", each_env(_vec_text))


@probe("vector env render() before reset()", Section.CRASH)
def _vec_render_before_reset(tmp: Path) -> Outcome:
    return refused_by_each(
        "environments",
        each_env(lambda env_id: _vec(env_id, render_mode="ansi").render()),
        "reset() before render()",
        kinds=(RuntimeError,),
    )


@probe("an environment with render_mode='ansi' pickled mid-run", Section.SILENT)
def _pickle_ansi(tmp: Path) -> Outcome:
    def run(env_id: str) -> str:
        env = gym.make(env_id, render_mode="ansi")
        env.reset(seed=0)
        env.step(1)
        clone = pickle.loads(pickle.dumps(env))
        if clone.render() != env.render():
            raise AssertionError("the copy renders another step")
        return "the copy renders the same step"

    return handled_by_each("environments", each_env(run))


@probe("make_vec(..., vectorization_mode='sync')", Section.CRASH)
def _vec_sync(tmp: Path) -> Outcome:
    def run(env_id: str) -> str:
        venv = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
        venv.reset(seed=0)
        venv.step(np.zeros(2, dtype=np.int64))
        return "a SyncVectorEnv of single environments resets and steps"

    return handled_by_each("environments", each_env(run))


input_probe(
    "make_vec(..., vector_entry_point, max_episode_steps=5)",
    Section.CRASH,
    lambda: _vec("ICRL-DarkRoom-v0", max_episode_steps=5),
    "max_episode_steps",
    kinds=(TypeError,),
)


# ===================================================================================== vector environments
surface("Vector environments")

input_probe(
    "vector env num_envs=0",
    Section.CRASH,
    lambda: _vec("ICRL-LinearBandit-v0", 0),
    "num_envs",
    "0",
    kinds=(ValueError,),
)


@probe("vector env num_envs=10**9 (size guard)", Section.CRASH)
def _vec_billion(tmp: Path) -> Outcome:
    from icrl_gym.envs.validation import MemoryLimitError

    cases = {env_id: (lambda env_id=env_id: traced_peak(lambda: _vec(env_id, 10**9))) for env_id in icrl_gym.ENV_IDS}
    shown = ""
    for env_id, run in cases.items():
        result, peak = run()
        if not isinstance(result, MemoryLimitError) or "GiB" not in str(result):
            return Outcome(
                Verdict.PROBLEM, f"{env_id}: {described(result) if isinstance(result, Exception) else 'accepted'}"
            )
        if peak > 50 * 2**20:
            return Outcome(Verdict.PROBLEM, f"{env_id}: refused only after allocating {peak / 2**20:.0f} MiB")
        shown = described(result)
    return Outcome(Verdict.CLEAR, f"all {len(cases)} environments, before allocating: {shown}")


@probe("vector env step() before reset()", Section.CRASH)
def _vec_step_first(tmp: Path) -> Outcome:
    return refused_by_each(
        "environments",
        each_env(lambda env_id: _vec(env_id).step(np.zeros(3, dtype=np.int64))),
        "reset() before step()",
        kinds=(RuntimeError,),
    )


def _vec_stepped(env_id: str, actions: Any) -> Any:
    venv = _vec(env_id)
    venv.reset(seed=0)
    return venv.step(actions)


@probe("vector env given 2 actions for 3 runs", Section.CRASH)
def _vec_two_actions(tmp: Path) -> Outcome:
    return refused_by_each(
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
    return refused_by_each("cases", cases, "actions", kinds=(ValueError,))


input_probe(
    "vector env reset(options={'w_star': wrong shape})",
    Section.SILENT,
    lambda: _vec("ICRL-LinearBandit-v0").reset(options={"w_star": np.zeros((2, 5))}),
    "w_star",
    "(2, 5)",
    kinds=(ValueError,),
)


@probe("vector env stepped past the end of its runs", Section.SILENT)
def _vec_past_end(tmp: Path) -> Outcome:
    def run(env_id: str) -> str:
        venv = _vec(env_id, horizon=3)
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
surface("Gittins table cache")


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

    fresh = replaced(gittins, "_TABLES", {})  # as in a new process: no table in memory yet
    with fresh, environment(CACHE_ENV, str(cache)), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for _ in range(2):  # a second agent in the same process: still one warning
                agent = make_agent("gittins")
                agent.reset(info)
                action = agent.act(obs)
        except Exception as err:
            return Outcome(Verdict.PROBLEM, f"the agent stopped: raw {described(err)}")
    mine = [w for w in caught if "Gittins table cache" in str(w.message)]
    if len(mine) != 1:
        return Outcome(Verdict.PROBLEM, f"{len(mine)} warnings about the cache (one expected)")
    outcome = Outcome(
        Verdict.HANDLED, f"acts (arm {action}) from a table in memory; RuntimeWarning: {short(str(mine[0].message))}"
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
    with replaced(gittins, "atomic_write", refuse):
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
    with replaced(gittins, "_TABLES", {}):  # a fresh process: no table in memory
        cached_gittins_table(12, cache)
    path = gittins_cache_path(cache, 12)
    path.write_bytes(path.read_bytes()[:100])
    with replaced(gittins, "_TABLES", {}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = cached_gittins_table(12, cache)
    with replaced(gittins, "_TABLES", {}):
        expected = gittins_table(12).values  # built afresh for N = 12 (memory may hold a larger table)
    if not (np.array_equal(table.values, expected) and np.array_equal(np.load(path), expected)):
        return Outcome(Verdict.PROBLEM, "the truncated table was used or not rebuilt")
    return Outcome(Verdict.HANDLED, f"rebuilt and replaced; RuntimeWarning: {short(str(caught[0].message))}")


# ===================================================================================== generalist agents
surface("Generalist agents' inputs")

GENERALISTS = {
    "bernoulli-generalist": ("generalist", "ICRL-BernoulliBandit-v0", 1.0),
    "linear-generalist": ("linear_generalist", "ICRL-LinearBandit-v0", 0.5),
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
        input_probe(f"{ckpt} {title}", Section.SILENT, lambda ckpt=ckpt: action(ckpt), *fragments, kinds=(ValueError,))


each_generalist("one step past the horizon it was reset for", _past_horizon, "T=3")


def _reused_vector_env(ckpt: str) -> Any:
    """The agent on a vector env that starts its second run without the agent being reset."""
    name, env_id, _ = GENERALISTS[ckpt]
    venv = _vec(env_id, num_envs=2, horizon=3)
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
    return refused_by_each("generalists", cases, "rewards", "nan", kinds=(ValueError,))


def _reset_with_horizon(ckpt: str, horizon: Any) -> Any:
    agent, obs, info = _generalist(ckpt)
    agent.reset({**info, "horizon": horizon, "model": {**info["model"], "horizon": horizon}})
    return agent.act(obs)


for _ckpt in GENERALISTS:
    for _horizon, _kind in ((2.7, TypeError), (0, ValueError)):  # the wrong type, then a value out of range
        input_probe(
            f"{_ckpt} reset with horizon={_horizon}",
            Section.SILENT,
            lambda ckpt=_ckpt, horizon=_horizon: _reset_with_horizon(ckpt, horizon),
            "horizon",
            str(_horizon),
            kinds=(_kind,),
        )


@probe("linear-generalist with noise_std=1e-30", Section.SILENT)
def _tiny_noise(tmp: Path) -> Outcome:
    agent, obs, _ = _generalist("linear-generalist", horizon=5, noise_std=1e-30)
    try:
        for _ in range(3):
            action = agent.act(obs)
            agent.update(action, 0.1)
        policy = agent.policy(obs)
    except ValueError as err:  # a refusal that does not say why: the noise level is what it cannot take
        return classify_error(err, ("noise_std", "1e-30"), (ValueError,))
    if not (np.isfinite(policy).all() and abs(float(policy.sum()) - 1.0) < 1e-5):
        return Outcome(Verdict.PROBLEM, f"policy {policy} is not a distribution")
    return Outcome(Verdict.HANDLED, f"a finite policy summing to 1 (plays arm {agent.act(obs)})")


@probe("generalists act() before reset()", Section.CRASH)
def _generalist_before_reset(tmp: Path) -> Outcome:
    cases = {
        ckpt: (lambda name=name, ckpt=ckpt: make_agent({"name": name, "checkpoint": ckpt}).act(np.zeros(50)))
        for ckpt, (name, _, _) in GENERALISTS.items()
    }
    return refused_by_each("generalists", cases, "reset()", kinds=(RuntimeError,))


@probe("generalists given an observation of the wrong shape", Section.CRASH)
def _generalist_wrong_obs(tmp: Path) -> Outcome:
    cases = {ckpt: (lambda ckpt=ckpt: _generalist(ckpt)[0].act(np.zeros(7))) for ckpt in GENERALISTS}
    return refused_by_each("generalists", cases, "observation", "(7,)", kinds=(ValueError,))


@probe("generalists update(99)", Section.SILENT)
def _generalist_update_99(tmp: Path) -> Outcome:
    def run(ckpt: str) -> Any:
        agent, obs, _ = _generalist(ckpt)
        agent.act(obs)
        return agent.update(99, GENERALISTS[ckpt][2])

    return refused_by_each(
        "generalists", {c: (lambda c=c: run(c)) for c in GENERALISTS}, "actions", "99", kinds=(ValueError,)
    )


@probe("each generalist on the other bandit family", Section.SILENT)
def _generalist_wrong_family(tmp: Path) -> Outcome:
    cases = {
        "bernoulli-generalist on a linear bandit": lambda: _reset_on(
            "generalist", "bernoulli-generalist", "ICRL-LinearBandit-v0"
        ),
        "linear-generalist on a Bernoulli bandit": lambda: _reset_on(
            "linear_generalist", "linear-generalist", "ICRL-BernoulliBandit-v0"
        ),
    }
    return refused_by_each("generalists", cases, "reward=", kinds=(ValueError,))


def _reset_on(name: str, ckpt: str, env_id: str, **kwargs: Any) -> Any:
    agent = make_agent({"name": name, "checkpoint": ckpt})
    return agent.reset(gym.make(env_id, **kwargs).unwrapped.reset(seed=0)[1])


input_probe(
    "linear-generalist on a bandit with d=9 (it plays d <= 8)",
    Section.SILENT,
    lambda: _reset_on("linear_generalist", "linear-generalist", "ICRL-LinearBandit-v0", dim=9),
    "d=9",
    kinds=(ValueError,),
)


@probe("generalists on a tabular MDP", Section.CRASH)
def _generalist_on_mdp(tmp: Path) -> Outcome:
    cases = {
        ckpt: (lambda name=name, ckpt=ckpt: _reset_on(name, ckpt, "ICRL-TabularMDP-v0"))
        for ckpt, (name, _, _) in GENERALISTS.items()
    }
    return refused_by_each("generalists", cases, "bandit", "MDP", kinds=(ValueError,))


@probe("generalists given the other generalist's checkpoint", Section.CRASH)
def _generalist_swapped(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError

    cases = {
        "generalist + linear-generalist": lambda: make_agent({"name": "generalist", "checkpoint": "linear-generalist"}),
        "linear_generalist + bernoulli-generalist": lambda: make_agent(
            {"name": "linear_generalist", "checkpoint": "bernoulli-generalist"}
        ),
    }
    return refused_by_each("swaps", cases, "make_agent(", kinds=(CheckpointError,))


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
        return Outcome(Verdict.PROBLEM, f"raw {described(err)}")
    expected = agent.policy(obs)
    if not all(np.allclose(c.policy(obs), expected, atol=1e-5) for c in clones):
        return Outcome(Verdict.PROBLEM, "a copy plays another policy")
    return Outcome(Verdict.HANDLED, "deep copy and pickle play the same policy as the original")


# ===================================================================================== harness
surface("Benchmark harness: --out, --seed, --runs, --plot-only")


@probe("benchmark --out pointing at a file", Section.CRASH)
def _bench_out_file(tmp: Path) -> Outcome:
    (tmp / "results").write_text("mine\n")
    outcome = refused(lambda: _bench_arguments(["--out", str(tmp / "results")]), "--out", kinds=(CommandLineExit,))
    return unchanged(outcome, {".": b"mine\n"}, tmp / "results")


@probe("benchmark --out below a file", Section.CRASH)
def _bench_out_below_file(tmp: Path) -> Outcome:
    (tmp / "results").write_text("mine\n")
    return refused(lambda: _bench_arguments(["--out", str(tmp / "results" / "x")]), "--out", kinds=(CommandLineExit,))


@probe("benchmark --seed -1", Section.CRASH)
def _bench_negative_seed(tmp: Path) -> Outcome:
    return refused(
        lambda: _bench_arguments(["--seed", "-1", "--out", str(tmp)]), "--seed", "-1", kinds=(CommandLineExit,)
    )


@probe("benchmark --runs 10**12", Section.CRASH)
def _bench_huge_runs(tmp: Path) -> Outcome:
    return refused(
        lambda: _bench_arguments(["--runs", str(10**12), "--out", str(tmp)]), "--runs", kinds=(CommandLineExit,)
    )


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
        outcome = refused(
            lambda: command_line(cli.main, ["--plot-only", "--out", str(out), "--quiet"]),
            *fragments,
            kinds=(CommandLineExit, ValueError),
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
        outcome = refused(
            lambda: command_line(cli.main, ["--plot-only", "--out", str(out), "--quiet"]),
            "config.json",
            kinds=(CommandLineExit, ValueError),
        )
    return unchanged(outcome, before, out)


@probe("benchmark --plot-only re-draws a finished run", Section.LOST, slow=True)
def _plot_only_redraws(tmp: Path) -> Outcome:
    out = tmp / "bench"
    _bench(out, "tabular-mdp-nonstationary")
    csv = (out / "regret.csv").read_bytes()
    from benchmarks.harness import cli

    with contextlib.redirect_stdout(io.StringIO()):
        command_line(cli.main, ["--plot-only", "--out", str(out), "--quiet"])
    if (out / "regret.csv").read_bytes() != csv or not (out / "tabular-mdp-nonstationary.png").is_file():
        return Outcome(Verdict.PROBLEM, "the CSV changed or the plot is gone")
    return Outcome(Verdict.HANDLED, "plots and summary re-drawn, regret.csv unchanged")


# ===================================================================================== trainers
surface("Generalist trainers' configurations")


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
    input_probe(
        f"{_where[1]}({', '.join(f'{k}={v}' for k, v in _fields.items())})",
        Section.CRASH,
        lambda where=_where, fields=_fields: _config(*where, **fields),
        _field,
        str(_value),
        kinds=(ValueError,),
    )


# ===================================================================================== compiled kernel
surface("Compiled decode kernel: its cache")

KERNEL_RUN = """
import warnings, torch
from icrl_gym.models.native import relu_decode_kernel
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kernel = relu_decode_kernel()
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
            Verdict.PROBLEM, f"the process died (exit status {done.returncode}): {short(done.stderr[-300:])}"
        )
    return Outcome(Verdict.HANDLED, short(done.stdout.strip()))


@probe("kernel cache: a truncated library", Section.CRASH, slow=True)
def _kernel_truncated(tmp: Path) -> Outcome:
    first = _kernel_process(tmp / "cache")
    libraries = sorted((tmp / "cache").rglob("*.so"))
    if first.returncode != 0 or not libraries:
        return Outcome(Verdict.HANDLED, f"no compiler here, nothing cached: {short(first.stdout.strip())}")
    for library in libraries:
        library.write_bytes(library.read_bytes()[:4096])
    return _kernel_outcome(_kernel_process(tmp / "cache"))


@probe("kernel cache: a file where the cache folder should be", Section.CRASH, slow=True)
def _kernel_cache_file(tmp: Path) -> Outcome:
    (tmp / "cache").write_text("not a folder\n")
    outcome = _kernel_outcome(_kernel_process(tmp / "cache"))
    return unchanged(outcome, {".": b"not a folder\n"}, tmp / "cache")
