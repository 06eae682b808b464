"""Probes of the surfaces added after the first pass: export, Gymnasium conventions, caches, generalists, harness.

Each probe tries one case a new user or an adversary would.  Where a probe finds a problem in code
that another part of the work owns, it carries ``known`` (who fixes it): the table marks it and the
test suite expects it to fail until the fix lands.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import icrl_gym
from agents import make_agent
from tests.reliability import framework as rp
from tests.reliability.first_pass import _pretrain
from tests.reliability.framework import Outcome, Section, Verdict, probe


def handled_by_each(what: str, cases: dict[str, Callable[[], str]]) -> Outcome:
    """Every case must run and return a description of what it did; an exception makes the probe a PROBLEM."""
    shown = ""
    for label, action in cases.items():
        try:
            shown = action()
        except Exception as err:
            return Outcome(Verdict.PROBLEM, f"{label}: raw {rp.described(err)}")
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
rp.surface("Checkpoint export (Hub-layout folders)")

SHIPPED = "bernoulli-ad-ucb"
"""A small shipped checkpoint that the export probes copy."""


def _export(stem: Any, target: Path) -> Path:
    from icrl_gym.checkpoint import resolve_checkpoint
    from icrl_gym.hub import export_hf_folder

    return export_hf_folder(resolve_checkpoint(stem) if isinstance(stem, str) else stem, target)


def _export_refused(target: Path, *fragments: str, stem: Any = SHIPPED) -> Outcome:
    """Export into ``target`` must raise ``FileExistsError`` naming ``fragments`` and leave ``target`` as it was."""
    before = snapshot(target)
    outcome = rp.refused(lambda: _export(stem, target), str(target), *fragments, kinds=(FileExistsError,))
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
    outcome = rp.refused(lambda: _export(SHIPPED, tmp / "notes" / "model"), "notes", kinds=(FileExistsError,))
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
    outcome = rp.refused(lambda: _export(folder, tmp / "copy"), "model.safetensors", kinds=(CheckpointError,))
    if (tmp / "copy").exists():
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and the target was created")
    return outcome


rp.surface("Checkpoint folders: loading an export")


def _hub_folder(tmp: Path, stem: str = SHIPPED) -> Path:
    return _export(stem, tmp / "hub")


@probe("load a Hub folder whose config.json was edited", Section.SILENT)
def _load_edited_config(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    folder = _hub_folder(tmp)
    record = json.loads((folder / "config.json").read_text())
    record["model"]["n_head"] = 1
    (folder / "config.json").write_text(json.dumps(record))
    return rp.refused(lambda: load_checkpoint(folder), "config.json", kinds=(CheckpointError,))


@probe("load a Hub folder without model.safetensors", Section.CRASH)
def _load_without_weights(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    folder = _hub_folder(tmp)
    (folder / "model.safetensors").unlink()
    return rp.refused(lambda: load_checkpoint(folder), "model.safetensors", kinds=(CheckpointError,))


@probe("load an empty folder as a checkpoint", Section.CRASH)
def _load_empty_folder(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    (tmp / "empty").mkdir()
    return rp.refused(lambda: load_checkpoint(tmp / "empty"), "empty", kinds=(CheckpointError,))


rp.input_probe(
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
        ("linear_generalist", "linear-generalist-v1", "ICRL-LinearBandit-v0"),
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
rp.surface("Gymnasium conventions")


def _make_and_step(env_id: str, **kwargs: Any) -> str:
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    return f"gym.make(id, {', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) resets and steps"


@probe("gym.make(id, render_mode=None)", Section.CRASH)
def _render_mode_none(tmp: Path) -> Outcome:
    return handled_by_each("environments", each_env(lambda env_id: _make_and_step(env_id, render_mode=None)))


@probe("gym.make(id, horizn=10) and gym.make_vec: a mistyped keyword", Section.CRASH)
def _mistyped_env_keyword(tmp: Path) -> Outcome:
    def vector(env_id: str) -> Any:
        return gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", horizn=10)

    cases = {
        **each_env(lambda env_id: gym.make(env_id, horizn=10)),
        **{f"{k} (vector)": v for k, v in each_env(vector).items()},
    }
    return rp.refused_by_each(
        "environments, single and vector", cases, "'horizn'", "did you mean 'horizon'", kinds=(TypeError,)
    )


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
            return rp.refused_by_each(
                "environments",
                each_env(lambda env_id: gym.make(env_id, render_mode=mode)),
                "render_mode",
                repr(mode),
                "'ansi'",
                kinds=(ValueError,),
            )

    return run


for _mode in ("human", "rgb_array"):
    rp.add_probe(f"gym.make(id, render_mode={_mode!r})", Section.CRASH, _unlisted_render_mode(_mode))


def _render_without_mode(env_id: str) -> Any:
    env = gym.make(env_id)
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's checker warns before calling render
        return env.render()


@probe("render() without a render mode", Section.CRASH)
def _render_no_mode(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "environments", each_env(_render_without_mode), "render_mode='ansi'", kinds=(RuntimeError,)
    )


@probe("render() before reset()", Section.CRASH)
def _render_before_reset(tmp: Path) -> Outcome:
    return rp.refused_by_each(
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


def vec_env(env_id: str, num_envs: Any = 3, **kwargs: Any) -> Any:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


def _vec_next_step(env_id: str) -> str:
    venv = vec_env(env_id, autoreset_mode=AutoresetMode.NEXT_STEP)
    venv.reset(seed=0)
    venv.step(np.zeros(3, dtype=np.int64))
    return f"make_vec(..., autoreset_mode=NEXT_STEP) steps; metadata says {venv.metadata['autoreset_mode']}"


@probe("make_vec(..., vector_entry_point, autoreset_mode=NEXT_STEP)", Section.CRASH)
def _vec_autoreset_next(tmp: Path) -> Outcome:
    return handled_by_each("environments", each_env(_vec_next_step))


@probe("make_vec(..., autoreset_mode=SAME_STEP or DISABLED)", Section.CRASH)
def _vec_autoreset_other(tmp: Path) -> Outcome:
    cases = {
        f"{env_id} {mode.name}": (lambda env_id=env_id, mode=mode: vec_env(env_id, autoreset_mode=mode))
        for env_id in icrl_gym.ENV_IDS
        for mode in (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)
    }
    return rp.refused_by_each("cases", cases, "autoreset_mode", "not supported", "NEXT_STEP", kinds=(ValueError,))


rp.input_probe(
    "make_vec(..., autoreset_mode='sometimes')",
    Section.CRASH,
    lambda: vec_env("ICRL-LinearBandit-v0", autoreset_mode="sometimes"),
    "autoreset_mode",
    "'sometimes'",
    kinds=(ValueError,),
)


def _vec_text(env_id: str) -> str:
    venv = vec_env(env_id, num_envs=12, render_mode="ansi")
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
    return rp.refused_by_each(
        "environments",
        each_env(lambda env_id: vec_env(env_id, render_mode="ansi").render()),
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


rp.input_probe(
    "make_vec(..., vector_entry_point, max_episode_steps=5)",
    Section.CRASH,
    lambda: vec_env("ICRL-DarkRoom-v0", max_episode_steps=5),
    "max_episode_steps",
    kinds=(TypeError,),
)
