"""The linear generalist trainer's resume state (icrl_gym.training.state through icrl_gym.training.loop).

An interrupted run resumed by ``train`` must end with the weights and optimiser state of a run that
was never interrupted, from the manifest layout and from the layout before it (``latest.json``);
damaged files and changed configurations are errors that name them.
"""

import json

import pytest
import torch

import icrl_gym.training.linear_generalist as lg
from icrl_gym.checkpoint import CheckpointKind, checkpoint_kind, read_checkpoint
from icrl_gym.training.state import MANIFEST, RunState, TrainingStateError
from tests.test_training_state import assert_same_state

TINY = {"d_model": 8, "n_heads": 2, "n_layers": 1, "mlp_ratio": 2, "readouts": 2}


def _config(folder, **kw):
    base = {
        "out_dir": str(folder),
        "model": TINY,
        "steps": 7,
        "queries": 2,
        "cost_per_batch": 100.0,
        "min_batch": 2,
        "max_batch": 4,
        "max_horizon": 24,
        "max_arms": 4,
        "warmup_steps": 1,  # the cosine schedule moves at every step: a resume with the wrong step would show
        "dagger_start": 2,
        "dagger_fraction": 0.5,
        "dagger_max_batch": 3,
        "checkpoint_every": 2,
        "log_every": 2,
        "eval_every": 0,
    }
    return lg.LinearGeneralistTrainConfig.from_dict({**base, **kw})


class Killed(BaseException):
    """Stands for the process dying in the middle of a step (nothing in the trainer catches it)."""


def _interrupted(folder, monkeypatch, at_step, **kw):
    """Run ``_config(folder)`` and die during the loss of step ``at_step`` (0-based): the last commit stays."""
    real, calls = lg.batch_loss, []

    def dying(*args, **kwargs):
        if len(calls) == at_step:
            raise Killed
        calls.append(1)
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(lg, "batch_loss", dying)
        with pytest.raises(Killed):
            lg.train(_config(folder, **kw), echo=False)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The committed state of the uninterrupted run (the reference of every resume)."""
    folder = tmp_path_factory.mktemp("whole")
    lg.train(_config(folder), echo=False)
    return RunState(folder).load()


def test_a_killed_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, monkeypatch, whole):
    folder = tmp_path / "run"
    _interrupted(folder, monkeypatch, at_step=5)  # states committed at 0, 2, 4; steps 4 and 5 are lost
    assert RunState(folder).load().step == 4
    lg.train(_config(folder), echo=False)
    resumed = RunState(folder).load()
    assert_same_state(resumed, whole)
    assert "resumed from" in (folder / "train.log").read_text()
    assert [h["step"] for h in resumed.record["history"]] == [h["step"] for h in whole.record["history"]]
    _, meta = read_checkpoint(folder / "checkpoints" / "step_0000007")
    assert checkpoint_kind(meta) is CheckpointKind.LINEAR_GENERALIST_TRANSFORMER
    assert meta["family"] == "linear" and meta["expert"]["z"] == 1.5 and meta["trained_range"]["dim"] == [2, 8]
    assert meta["training"]["steps"] == 7 and meta["pretrain"]["steps"] == 7 and "command" in meta["training"]


def test_learning_curve_checkpoints_stay_beside_the_last_two(tmp_path, monkeypatch):
    monkeypatch.setattr(lg, "CURVE_EVERY", 3)
    lg.train(_config(tmp_path, checkpoint_every=1), echo=False)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.json"))
    assert names == [f"step_{s:07d}.json" for s in (0, 3, 6, 7)]  # every 3rd, and the last two (6, 7)


def _to_older_layout(folder):
    """Rewrite a committed folder as the trainer wrote it before resume.json (latest.json + {optimizer, torch_rng})."""
    state = RunState(folder).load()
    stem = folder / "checkpoints" / f"step_{state.step:07d}"
    torch.save({"optimizer": state.optimizer, "torch_rng": state.rng["torch"]}, f"{stem}.state.pt")
    pointer = {"step": state.step, "checkpoint": stem.name, **state.record}
    (folder / "latest.json").write_text(json.dumps(pointer))
    (folder / MANIFEST).unlink()
    for path in (folder / "checkpoints").glob("step_0000000.*"):  # the older trainer never saved step 0
        path.unlink()
    return stem


def test_a_folder_of_the_older_layout_is_refused_not_overwritten(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    _interrupted(folder, monkeypatch, at_step=3)
    stem = _to_older_layout(folder)
    with pytest.raises(TrainingStateError, match="no training-state manifest resume.json"):
        lg.train(_config(folder), echo=False)
    assert (folder / "latest.json").exists() and stem.with_suffix(".state.pt").exists()


def test_a_corrupt_state_file_is_an_error_naming_it(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    _interrupted(folder, monkeypatch, at_step=3)
    state_file = folder / "checkpoints" / "step_0000002.state.pt"
    data = bytearray(state_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state_file.write_bytes(bytes(data))
    with pytest.raises(TrainingStateError, match=r"step_0000002\.state\.pt is corrupt"):
        lg.train(_config(folder), echo=False)


def test_a_changed_configuration_is_refused_naming_the_fields(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    _interrupted(folder, monkeypatch, at_step=3)
    changed = _config(folder, dagger_fraction=0.3, model={**TINY, "readouts": 3})
    with pytest.raises(TrainingStateError, match=r"dagger_fraction: 0\.5 in the run, 0\.3 now; model\.readouts: 2"):
        lg.train(changed, echo=False)
    assert (folder / MANIFEST).exists()  # nothing was overwritten
    lg.train(_config(folder, steps=4, log_every=1, threads=1), echo=False)  # the allowed fields may change
    log = (folder / "train.log").read_text()
    assert "changed on resume: steps: 7 -> 4" in log and "changed on resume: log_every: 2 -> 1" in log
    assert RunState(folder).load().step == 4
