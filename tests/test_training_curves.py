"""Training curves (metrics.csv, optional TensorBoard) and the quiet switch of the progress bars."""

import math

from icrl_gym.envs import bernoulli_bandit_spec
from icrl_gym.progress import bars_enabled, progress_bar, set_quiet
from icrl_gym.training.curves import COLUMNS, TrainingCurves, read_curves, tensorboard_available
from icrl_gym.training.pretrain import PretrainConfig, pretrain


def test_curves_append_rows_with_one_header(tmp_path):
    curves = TrainingCurves(tmp_path)
    curves.record(10, 1.5, 1.25, 1e-3, 2.0)
    TrainingCurves(tmp_path).record(20, 1.0, 0.75, 5e-4, 4.0)  # a resumed run appends
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and len(lines) == 3
    expected = {"step": 20, "loss": 1.0, "val": 0.75, "lr": 5e-4, "wall_seconds": 4.0}
    assert read_curves(tmp_path / "metrics.csv")[1] == expected
    assert (tmp_path / "tensorboard").exists() == tensorboard_available()


def test_pretraining_writes_its_curve_beside_the_checkpoint(tmp_path):
    cfg = PretrainConfig(
        name="tiny",
        env=bernoulli_bandit_spec(horizon=8).to_dict(),
        context={"name": "ucb"},
        label="ad",
        model={"n_layer": 1, "n_head": 1, "n_embd": 8, "layout": "compact"},
        steps=6,
        warmup_steps=1,
        batch_size=4,
        trajectories_per_chunk=16,
        val_trajectories=8,
        eval_every=3,
        out_dir=str(tmp_path / "run"),
    )
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
