"""The training state as one verified unit (icrl_gym.training.state): crashes at every write, real kills, damage.

Every check compares against an independent computation: the weights and optimiser state of an
uninterrupted run of the same configuration, or the bytes a test wrote itself.
"""

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import icrl_gym.checkpoint as checkpoint_module
import icrl_gym.training.state as state_module
from icrl_gym.checkpoint import read_checkpoint, save_checkpoint
from icrl_gym.envs import bernoulli_bandit_spec
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig
from icrl_gym.training.finetune import finetune
from icrl_gym.training.generalist import GeneralistTrainConfig, train
from icrl_gym.training.pretrain import pretrain
from icrl_gym.training.state import (
    MANIFEST,
    RunState,
    TrainingStateError,
    check_config,
    rng_state,
    set_rng_state,
)
from icrl_gym.utils.fileio import content_sha256
from tests.helpers import tiny_finetune_config, tiny_generalist_config, tiny_pretrain_config

# --- tiny runs of the three trainers: states at steps 0, 2, 4, 6 -------------------------------


def pretrain_config(folder, steps=6, **overrides):
    return tiny_pretrain_config(folder, steps=steps, **overrides)


def run_pretrain(folder, tmp_path):
    pretrain(pretrain_config(folder), echo=False)


def run_generalist(folder, tmp_path):
    train(tiny_generalist_config(folder, tmp_path / "gittins-cache"), echo=False)


def tiny_base(tmp_path):
    """A random bandit transformer saved as a checkpoint: the start of a fine-tuning run."""
    stem = tmp_path / "base"
    if not stem.with_suffix(".json").exists():
        torch.manual_seed(0)
        config = TransformerConfig(n_layer=1, n_head=1, n_embd=8, layout="compact", dim=2, num_actions=2, horizon=5)
        save_checkpoint(
            stem, BanditTransformer(config), {"env": bernoulli_bandit_spec(num_arms=2, horizon=5).to_dict()}
        )
    return stem


def run_finetune(folder, tmp_path):
    finetune(tiny_finetune_config(tiny_base(tmp_path), folder), echo=False)


TRAINERS = {"pretrain": run_pretrain, "generalist": run_generalist, "finetune": run_finetune}


def committed(folder):
    """The committed state of a run folder, read through the manifest (verified)."""
    return RunState(folder).load()


def assert_same_state(a, b):
    """Two states hold bit-identical weights and optimiser tensors at the same step."""
    assert a.step == b.step
    assert a.weights.keys() == b.weights.keys()
    for name in a.weights:
        assert torch.equal(a.weights[name], b.weights[name]), name
    flat_a = [v for s in a.optimizer["state"].values() for v in s.values()]
    flat_b = [v for s in b.optimizer["state"].values() for v in s.values()]
    assert len(flat_a) == len(flat_b) > 0
    for x, y in zip(flat_a, flat_b, strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))


class Crash(BaseException):
    """Stands for the process dying: nothing in the trainers catches a BaseException that is not theirs."""


def patch_writer(monkeypatch, crash_at=None, names=None):
    """Replace the atomic writer of checkpoints and states: record the names, die at write ``crash_at``.

    Dying at a write leaves what a kill there leaves: the earlier files complete, a half-written
    temporary file beside the target, the target itself untouched.
    """
    real, counter = state_module.atomic_write_bytes, itertools.count()

    def write(path, data):
        index = next(counter)
        if names is not None:
            names.append(Path(path).name)
        if index == crash_at:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            (Path(path).parent / f".{Path(path).name}.killed.tmp").write_bytes(data[: len(data) // 2])
            raise Crash(index)
        real(path, data)

    for module in (state_module, checkpoint_module):
        monkeypatch.setattr(module, "atomic_write_bytes", write)


# --- (a) a crash at every write boundary of one save ------------------------------------------


CRASH_CASES = [
    ("pretrain", "every write"),
    ("generalist", "around the commit"),
    ("finetune", "around the commit"),
    pytest.param("generalist", "every write", marks=pytest.mark.slow),
    pytest.param("finetune", "every write", marks=pytest.mark.slow),
]
"""Pretraining dies at every write of a save by default; the other two trainers at every write in the slow
suite, and by default just before and just after the manifest's write (the one that commits)."""


@pytest.mark.parametrize("trainer, writes", CRASH_CASES)
def test_a_crash_at_every_write_of_a_save_loses_at_most_the_unfinished_steps(trainer, writes, tmp_path, monkeypatch):
    run = TRAINERS[trainer]
    tiny_base(tmp_path)  # written once, before the writes are counted
    names: list[str] = []
    with monkeypatch.context() as patch:
        patch_writer(patch, names=names)
        run(tmp_path / "whole", tmp_path)
    reference = committed(tmp_path / "whole")
    assert reference.step == 6
    # the writes of the save at step 4: from its first file to the first file of the save at step 6
    first = next(i for i, name in enumerate(names) if name.startswith("step_0000004."))
    after = next(i for i, name in enumerate(names) if name.startswith("step_0000006."))
    commit = next(i for i in range(first, after) if names[i] == MANIFEST)
    assert after - first >= 4, names[first:after]  # weights, record, optimiser + RNG, manifest (+ copies)
    boundaries = range(first, after + 1) if writes == "every write" else (commit, commit + 1)
    for k in boundaries:  # dying before write k: writes first..k-1 of the save are done
        folder = tmp_path / f"crash-{k}"
        with monkeypatch.context() as patch:
            patch_writer(patch, crash_at=k)
            with pytest.raises(Crash):
                run(folder, tmp_path)
        survivor = committed(folder)
        expected_step = 4 if k > commit else 2
        assert survivor.step == expected_step, f"crash before write {k} ({names[k]})"
        run(folder, tmp_path)  # the same command resumes
        final = committed(folder)
        assert_same_state(final, reference)
        leftovers = sorted(p.name for p in folder.rglob("*.tmp"))
        assert leftovers == [], f"crash before write {k}: {leftovers}"
        if trainer == "pretrain":  # the run's checkpoint (a copy) is whole and the final one
            weights, meta = read_checkpoint(folder / "checkpoint")
            assert meta["training"]["step"] == 6
            assert all(torch.equal(weights[n], reference.weights[n]) for n in weights)
        if trainer == "finetune":
            weights, _ = read_checkpoint(folder / "best")
            best, _ = read_checkpoint(tmp_path / "whole" / "best")
            assert all(torch.equal(weights[n], best[n]) for n in weights)


# --- (b) a real process killed at a random moment ---------------------------------------------


def _kill_at_random_moment(config_file, folder, rng, steps):
    """Start the pretraining command, SIGKILL it at a random moment after a random committed step; the step."""
    target = rng.randrange(1, steps - 4)  # wait for a state at or after this step, then a random delay
    command = [sys.executable, "-m", "icrl_gym.training.pretrain", str(config_file)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if json.loads((folder / MANIFEST).read_text())["step"] >= target:
                    break
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                pass
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.05))  # land anywhere in the next steps and their save
        proc.send_signal(signal.SIGKILL)
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill (rc {proc.returncode}): {err[-2000:]}"
    return committed(folder).step


def _sigkill_and_resume(tmp_path, kills, steps):
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    reference_cfg = pretrain_config(tmp_path / "whole", steps=steps, eval_every=1, threads=1)
    pretrain(reference_cfg, echo=False)
    reference = committed(tmp_path / "whole")
    folder = tmp_path / "killed"
    config_file = tmp_path / "killed.json"
    config_file.write_text(json.dumps(pretrain_config(folder, steps=steps, eval_every=1, threads=1).to_dict()))
    survived = [_kill_at_random_moment(config_file, folder, rng, steps) for _ in range(kills)]
    assert all(0 <= s < steps for s in survived), (seed, survived)
    pretrain(pretrain_config(folder, steps=steps, eval_every=1, threads=1), echo=False)
    assert_same_state(committed(folder), reference)
    weights, _ = read_checkpoint(folder / "checkpoint")
    assert all(torch.equal(weights[n], reference.weights[n]) for n in weights), seed
    assert f"resumed from step {survived[-1]}" in (folder / "train.log").read_text(), (seed, survived)


@pytest.mark.parametrize(
    "kills, steps", [(1, 20), pytest.param(5, 100, marks=pytest.mark.slow)], ids=["once", "five-times"]
)
def test_a_pretraining_process_killed_at_random_moments_resumes_to_the_same_weights(tmp_path, kills, steps):
    torch_threads = torch.get_num_threads()
    try:
        _sigkill_and_resume(tmp_path, kills=kills, steps=steps)
    finally:
        torch.set_num_threads(torch_threads)


# --- (c) damaged state files -------------------------------------------------------------------


LINEAR = {"model_config": {"in": 3, "out": 2}, "kind": "bandit_transformer"}


def _tiny_state(folder, steps=(1, 2), keep=1):
    """A linear model trained a few Adam steps with a state committed after each of ``steps``."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    store = RunState(folder, keep=keep)
    for step in range(1, max(steps) + 1):
        optimizer.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
        if step in steps:
            store.save(step, model, optimizer, {"lr": 0.1}, {"history": [step]}, {"note": "x"}, **LINEAR)
    return model, optimizer, store


def _damage(path, how):
    data = path.read_bytes()
    if how == "flip":
        path.write_bytes(data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x01]) + data[len(data) // 2 + 1 :])
    elif how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.unlink()


STATE_FILES = [MANIFEST, "checkpoints/step_0000002.safetensors", "checkpoints/step_0000002.json"]
STATE_FILES += ["checkpoints/step_0000002.state.pt"]


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("name", STATE_FILES)
def test_each_damaged_state_file_is_a_clear_error_naming_it(tmp_path, name, how):
    _tiny_state(tmp_path)
    assert committed(tmp_path).step == 2
    _damage(tmp_path / name, how)
    with pytest.raises(TrainingStateError) as err:
        committed(tmp_path)
    assert Path(name).name in str(err.value)
    problem = {"flip": "corrupt", "truncate": "truncated", "delete": "missing"}[how]
    if name == MANIFEST:
        problem = {"flip": "corrupt", "truncate": "corrupt or truncated", "delete": "no training-state manifest"}[how]
    assert problem in str(err.value)


def test_a_damaged_state_stops_pretraining_with_the_error_and_leaves_the_files(tmp_path):
    pretrain(pretrain_config(tmp_path / "run", steps=2), echo=False)
    payload = tmp_path / "run" / "checkpoints" / "step_0000002.state.pt"
    _damage(payload, "flip")
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file() and p.suffix != ".log"}
    with pytest.raises(TrainingStateError, match=r"step_0000002\.state\.pt is corrupt"):
        pretrain(pretrain_config(tmp_path / "run", steps=4), echo=False)
    assert {p: p.read_bytes() for p in before} == before


def test_a_state_file_of_another_step_is_refused_even_with_matching_hashes(tmp_path):
    """The step inside the optimiser + RNG file must be the manifest's (a forged but consistent manifest)."""
    _tiny_state(tmp_path, steps=(1, 2), keep=2)
    folder = tmp_path / "checkpoints"
    shutil.copyfile(folder / "step_0000001.state.pt", folder / "step_0000002.state.pt")
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    data = (folder / "step_0000002.state.pt").read_bytes()
    manifest["files"]["state"].update(sha256=state_module._sha256(data), size=len(data))
    manifest["content_sha256"] = content_sha256(manifest)
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(TrainingStateError, match="holds step 1 but .* step 2: the files do not belong together"):
        committed(tmp_path)


def test_state_round_trip_restores_weights_optimiser_and_generators(tmp_path):
    model, optimizer, store = _tiny_state(tmp_path)
    np.random.seed(5)  # noqa: NPY002  (the global generators are what a state keeps)
    random.seed(5)
    expected_rng = rng_state()
    draws = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    store.save(2, model, optimizer, {"lr": 0.1}, {"history": [2]}, {"note": "x"}, **LINEAR)
    loaded = committed(tmp_path)
    assert loaded.step == 2 and loaded.config == {"lr": 0.1} and loaded.record == {"history": [2]}
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    loaded.restore(fresh, fresh_opt)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert str(fresh_opt.state_dict()) == str(optimizer.state_dict())
    set_rng_state(expected_rng)
    assert torch.equal(torch.rand(3), draws[0])
    assert np.array_equal(np.random.rand(3), draws[1]) and random.random() == draws[2]  # noqa: NPY002
    # only the committed state's files stay (keep=1), paths in the manifest are relative
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step_0000002.json",
        "step_0000002.safetensors",
        "step_0000002.state.pt",
    ]
    assert all(
        not Path(e["path"]).is_absolute() for e in json.loads((tmp_path / MANIFEST).read_text())["files"].values()
    )


def test_keep_two_keeps_the_previous_checkpoint_and_kept_roles(tmp_path):
    _tiny_state(tmp_path, steps=(1, 2, 3), keep=2)
    stems = sorted({p.name.split(".")[0] for p in (tmp_path / "checkpoints").iterdir()})
    assert stems == ["step_0000002", "step_0000003"]
    model, optimizer, store = _tiny_state(tmp_path / "b", steps=(1,), keep=1)
    store.save(2, model, optimizer, {}, {}, {}, **LINEAR, also_keep={"best": 1})
    store.save(3, model, optimizer, {}, {}, {}, **LINEAR, also_keep={"best": 1})
    stems = sorted({p.name.split(".")[0] for p in (tmp_path / "b" / "checkpoints").iterdir()})
    assert stems == ["step_0000001", "step_0000003"]  # the best (step 1) and the current state
    reread = RunState(tmp_path / "b")
    reread.load()
    _, meta = read_checkpoint(reread.checkpoint("best"))
    assert meta["note"] == "x"  # the record of step 1
    with pytest.raises(ValueError, match="no committed checkpoint of step 2"):
        store.save(4, model, optimizer, {}, {}, {}, **LINEAR, also_keep={"best": 2})


# --- folders: foreign files, moves, other configurations, the older layout ---------------------


def test_a_folder_with_weights_but_no_manifest_is_refused_not_overwritten(tmp_path):
    folder = tmp_path / "run"
    pretrain(pretrain_config(folder, steps=2), echo=False)
    (folder / MANIFEST).unlink()
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.suffix != ".log"}
    with pytest.raises(TrainingStateError, match=f"no training-state manifest {MANIFEST}"):
        pretrain(pretrain_config(folder, steps=2), echo=False)
    assert {p: p.read_bytes() for p in before} == before
    lone = tmp_path / "lone"  # weights alone, as a run killed between the two files of a checkpoint left them
    lone.mkdir()
    (lone / "checkpoint.safetensors").write_bytes(b"weights")
    with pytest.raises(TrainingStateError, match="checkpoint.safetensors"):
        pretrain(pretrain_config(lone, steps=2), echo=False)
    assert (lone / "checkpoint.safetensors").read_bytes() == b"weights"


def test_leftovers_of_an_unfinished_first_commit_start_a_new_run(tmp_path):
    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "step_0000000.safetensors").write_bytes(b"half")
    pretrain(pretrain_config(folder, steps=2), echo=False)
    assert committed(folder).step == 2


class Interrupt(Exception):
    pass


def interrupted_pretrain(folder, at=4, steps=6):
    """A pretraining run of ``steps`` stopped right after its state at step ``at``."""

    def stop(model, state):
        if state["step"] == at:
            raise Interrupt

    with pytest.raises(Interrupt):
        pretrain(pretrain_config(folder, steps=steps), echo=False, callback=stop)


def test_a_moved_run_folder_resumes_to_the_same_weights(tmp_path):
    pretrain(pretrain_config(tmp_path / "whole", steps=6), echo=False)
    interrupted_pretrain(tmp_path / "here")
    shutil.move(tmp_path / "here", tmp_path / "elsewhere")
    pretrain(pretrain_config(tmp_path / "elsewhere", steps=6), echo=False)
    assert "resumed from step 4" in (tmp_path / "elsewhere" / "train.log").read_text()
    assert_same_state(committed(tmp_path / "elsewhere"), committed(tmp_path / "whole"))


def test_another_configuration_is_refused_naming_every_differing_field(tmp_path):
    pretrain(pretrain_config(tmp_path / "run", steps=2), echo=False)
    other = pretrain_config(tmp_path / "run", steps=4, lr=5e-2, model={"n_layer": 2, "n_head": 1, "n_embd": 8})
    with pytest.raises(TrainingStateError) as err:
        pretrain(other, echo=False)
    message = str(err.value)
    assert "lr: 0.01 in the run, 0.05 now" in message
    assert "model.n_layer: 1 in the run, 2 now" in message
    assert "model.layout: 'compact' in the run, (absent) now" in message
    assert "steps:" not in message and "out_dir:" not in message  # allowed to change, not compared
    changes = check_config("run", {"steps": 2, "out_dir": "a"}, {"steps": 4, "out_dir": "b"}, ["out_dir"], ["steps"])
    assert changes == ["steps: 2 -> 4"]


def test_a_generalist_run_refuses_another_model_but_takes_a_longer_budget(tmp_path):
    run_generalist(tmp_path / "run", tmp_path)
    base = committed(tmp_path / "run").config
    cfg = GeneralistTrainConfig.from_dict({**base, "steps": 8, "time_budget_hours": 9.0})
    train(cfg, echo=False)
    assert committed(tmp_path / "run").step == 8
    with pytest.raises(TrainingStateError, match=r"\(lr: 0\.001 in the run, 0\.002 now\); .* a new out_dir"):
        train(GeneralistTrainConfig.from_dict({**base, "lr": 2e-3, "run_dir": str(tmp_path / "run")}), echo=False)


def test_folders_of_the_older_layouts_are_refused_not_overwritten(tmp_path):
    """The layouts before the manifest (pretraining: checkpoint.* + optimizer.pt; the generalist trainer:
    latest.json + checkpoints/step_*.state.pt) are no longer read: such a folder is refused, its files kept."""
    interrupted_pretrain(tmp_path / "four")
    folder = tmp_path / "pretrain-older"
    folder.mkdir()
    for suffix in (".safetensors", ".json"):
        shutil.copyfile(tmp_path / "four" / f"checkpoint{suffix}", folder / f"checkpoint{suffix}")
    (folder / "optimizer.pt").write_bytes(b"an optimiser state")
    generalist = tmp_path / "generalist-older"
    (generalist / "checkpoints").mkdir(parents=True)
    (generalist / "checkpoints" / "step_0000004.state.pt").write_bytes(b"an optimiser state")
    (generalist / "latest.json").write_text(json.dumps({"step": 4, "checkpoint": "step_0000004"}))
    for run, start in (
        (folder, lambda: pretrain(pretrain_config(folder, steps=6), echo=False)),
        (generalist, lambda: run_generalist(generalist, tmp_path)),
    ):
        before = sorted(p.relative_to(run) for p in run.rglob("*"))
        with pytest.raises(TrainingStateError, match="no training-state manifest resume.json"):
            start()
        assert sorted(p.relative_to(run) for p in run.rglob("*") if p.name != "train.log") == before


def test_atomic_csv_reads_back_and_a_failed_write_keeps_the_old_table(tmp_path, monkeypatch):
    import csv

    import icrl_gym.utils.fileio as fileio

    path = tmp_path / "t.csv"
    rows = [{"cell": "a, b", "mean": "1.5"}, {"cell": 'say "x"', "mean": ""}]
    fileio.atomic_write_csv(path, rows, ["cell", "mean"])
    with open(path, newline="") as fh:
        assert list(csv.DictReader(fh)) == rows
    before = path.read_bytes()

    def broken(fh):
        fh.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(fileio, "atomic_write_bytes", lambda p, data: fileio.atomic_write(p, broken))
    with pytest.raises(OSError, match="disk full"):
        fileio.atomic_write_csv(path, rows[:1], ["cell", "mean"])
    assert path.read_bytes() == before
    monkeypatch.undo()
    fileio.atomic_write_csv(path, [], [])
    assert path.read_bytes() == b""
