"""Training curves (metrics.csv, optional TensorBoard) and the quiet switch of the progress bars."""

import math

import pytest

from icrl_gym.envs import bernoulli_bandit_spec
from icrl_gym.training.curves import COLUMNS, TrainingCurves, read_curves, tensorboard_available
from icrl_gym.training.pretrain import pretrain
from icrl_gym.training.trainer import Trainer
from icrl_gym.utils.progress import bars_enabled, progress_bar, set_quiet
from tests.helpers import tiny_pretrain_config


def test_curves_append_rows_with_one_header(tmp_path):
    curves = TrainingCurves(tmp_path)
    curves.record(10, 1.5, 1.25, 1e-3, 2.0)
    TrainingCurves(tmp_path).record(20, 1.0, 0.75, 5e-4, 4.0)  # a resumed run appends
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and len(lines) == 3
    expected = {"step": 20, "loss": 1.0, "val": 0.75, "lr": 5e-4, "wall_seconds": 4.0}
    assert read_curves(tmp_path / "metrics.csv")[1] == expected
    assert (tmp_path / "tensorboard").exists() == tensorboard_available()


def test_resumed_curves_drop_rows_after_the_resumed_step_and_a_torn_last_line(tmp_path):
    curves = TrainingCurves(tmp_path)
    for step in (10, 20, 30):
        curves.record(step, 1.0, 0.5, 1e-3, float(step))
    with open(tmp_path / "metrics.csv", "a") as fh:
        fh.write("40,0.9,0.")  # a kill in the middle of an append
    TrainingCurves(tmp_path, start_step=20)  # the saved state is at step 20: rows 30 and 40 come again
    assert [r["step"] for r in read_curves(tmp_path / "metrics.csv")] == [10, 20]
    TrainingCurves(tmp_path, start_step=20).record(30, 0.8, 0.4, 1e-3, 30.0)
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and [float(line.split(",")[0]) for line in lines[1:]] == [10, 20, 30]


def _tiny_config(out_dir, steps):
    """A pretraining run of a few seconds that evaluates (and writes a curve row) every 3 steps."""
    env = bernoulli_bandit_spec(horizon=8).to_dict()
    return tiny_pretrain_config(out_dir, env=env, steps=steps, batch_size=4, eval_every=3)


class _Killed(Exception):
    pass


def test_a_kill_between_the_curve_row_and_the_saved_state_does_not_repeat_the_row(tmp_path, monkeypatch):
    """The step-6 row is written, then the process dies before the step-6 state: the resumed curve equals the whole."""
    pretrain(_tiny_config(tmp_path / "whole", steps=9), echo=False)
    commit = Trainer.commit

    def dies_at_step_6(trainer):
        if trainer.task.record["step"] == 6:
            raise _Killed
        commit(trainer)

    monkeypatch.setattr(Trainer, "commit", dies_at_step_6)
    with pytest.raises(_Killed):
        pretrain(_tiny_config(tmp_path / "cut", steps=9), echo=False)
    assert [r["step"] for r in read_curves(tmp_path / "cut" / "metrics.csv")] == [3, 6]
    monkeypatch.setattr(Trainer, "commit", commit)
    pretrain(_tiny_config(tmp_path / "cut", steps=9), echo=False)
    whole = read_curves(tmp_path / "whole" / "metrics.csv")
    resumed = read_curves(tmp_path / "cut" / "metrics.csv")
    assert [r["step"] for r in resumed] == [3, 6, 9]
    for a, b in zip(whole, resumed, strict=True):  # the same numbers; the wall time differs
        assert (a["step"], a["loss"], a["val"], a["lr"]) == (b["step"], b["loss"], b["val"], b["lr"])


def test_pretraining_writes_its_curve_beside_the_checkpoint(tmp_path):
    cfg = _tiny_config(tmp_path / "run", steps=6)
    _, meta = pretrain(cfg, echo=False)
    rows = read_curves(tmp_path / "run" / "metrics.csv")
    assert [r["step"] for r in rows] == [3, 6]
    history = meta["training"]["history"]
    assert all(math.isclose(r["val"], h["loss"], rel_tol=1e-5) for r, h in zip(rows, history, strict=True))
    assert (tmp_path / "run" / "checkpoint.json").exists()


def test_quiet_and_non_terminal_disable_bars(capsys):
    set_quiet(True)
    try:
        assert not bars_enabled() and progress_bar(5, "x").disable
    finally:
        set_quiet(False)
    bar = progress_bar(5, "x")  # under pytest stderr is captured, not a terminal
    assert bar.disable
    bar.update(5)
    bar.close()
    assert capsys.readouterr().err == ""
