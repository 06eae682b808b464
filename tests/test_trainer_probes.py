"""Probes of the trainers' input: every bad configuration is refused before a file is written, naming the field.

Each probe is what a new user or an adversary tried: a zero that divides, a probability of 2.5, a
negative step count, a range upside down, a model too small for the range, values that crash torch
(threads, learning rate, seed), a rerun with another configuration, and two processes in one
folder.  Every refusal must raise the documented error type, name the field and leave every file
as it was.
"""

import os
import subprocess
import sys
import time

import pytest

from icrl_gym.training import finetune as finetune_module
from icrl_gym.training import generalist, linear_generalist, mdp_generalist, pretrain
from icrl_gym.training.loop import RENAMED_FIELDS, upgrade_config
from icrl_gym.training.state import LOCK_FILE, RunFolderBusy, RunFolderLock, TrainingStateError
from tests.helpers import TINY_GENERALIST, tiny_generalist_config, tiny_pretrain_config

LINEAR_MODEL = {"d_model": 8, "n_heads": 2, "n_layers": 1, "mlp_ratio": 2, "readouts": 2}


SHARED = dict(steps=2, queries=2, min_horizon=4, max_horizon=8, max_arms=3, dagger_start=100, warmup_steps=1)
"""Tiny runs of both generalist trainers: two steps, one log line each, a state at 0 and 2."""
SCHEDULE = dict(log_every=1, checkpoint_every=2, eval_every=0, device="cpu")


def _bernoulli(tmp_path, **kw):
    return tiny_generalist_config(tmp_path / "run", tmp_path / "cache", **{**SHARED, **SCHEDULE, **kw})


def _linear(tmp_path, **kw):
    base = dict(out_dir=str(tmp_path / "run"), model=LINEAR_MODEL, cost_per_batch=100.0, min_batch=2, max_batch=3)
    return linear_generalist.LinearGeneralistTrainConfig(**{**base, **SHARED, **SCHEDULE, **kw})


TRAINERS = {"bernoulli": (_bernoulli, generalist.train), "linear": (_linear, linear_generalist.train)}


def _files(folder):
    """Every file under ``folder`` with its bytes and modification time (what a refused run may not change)."""
    if not folder.exists():
        return None
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


# --- the generalist trainers' fields ------------------------------------------------------------

GENERALIST_PROBES = [
    ("queries", 0, "an integer >= 1"),  # ZeroDivisionError before
    ("checkpoint_every", 0, "an integer >= 1"),
    ("log_every", 0, "an integer >= 1"),
    ("min_horizon", 0, "an integer >= 1"),
    ("steps", -3, "an integer >= 1"),  # exited 0 after writing an untrained checkpoint
    ("dagger_fraction", 2.5, "in [0, 1]"),  # a probability, accepted before
    ("max_epsilon", 2.5, "in [0, 1]"),
    ("lr", 1e300, "in (0, 1]"),
    ("seed", 2**70, "an integer in [0, 9223372036854775807]"),
    ("threads", 100_000, "an integer in [0, 256]"),
    ("time_budget_hours", 0.0, "> 0"),
    ("eval_instances", 1, ">= 2"),
    ("label_temperature", float("nan"), ">= 0"),
    ("device", "gpu", "'auto', 'cpu'"),
]


@pytest.mark.parametrize("trainer", list(TRAINERS))
@pytest.mark.parametrize("field, value, allowed", GENERALIST_PROBES, ids=[p[0] for p in GENERALIST_PROBES])
def test_generalist_fields_are_checked_before_any_file(tmp_path, trainer, field, value, allowed):
    make, _ = TRAINERS[trainer]
    with pytest.raises(ValueError, match="TrainConfig") as err:
        make(tmp_path, **{field: value})
    message = str(err.value)
    assert f".{field} must be" in message and repr(value) in message and allowed in message, message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("trainer", list(TRAINERS))
@pytest.mark.parametrize(
    "low, high, values",
    [("min_arms", "max_arms", (5, 3)), ("min_horizon", "max_horizon", (9, 8)), ("min_batch", "max_batch", (9, 4))],
)
def test_generalist_ranges_must_be_ordered(tmp_path, trainer, low, high, values):
    """min_arms > max_arms gave a numpy error deep in the sampler."""
    make, _ = TRAINERS[trainer]
    with pytest.raises(ValueError) as err:
        make(tmp_path, **{low: values[0], high: values[1]})
    assert f".{low}={values[0]} must be <= " in str(err.value) and f".{high}={values[1]}" in str(err.value)


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"min_noise": 0.0}, ["min_noise must be a finite number > 0, got 0.0"]),  # math domain error before
        ({"min_noise": 3.0}, ["min_noise=3.0 must be <= ", "max_noise=2.5"]),
        ({"min_dim": 0}, ["min_dim must be an integer >= 1, got 0"]),
        ({"max_dim": 9}, ["max_dim=9 must be <= the model's d_max=8"]),  # was recorded as the trained range
        ({"gaussian_arms_fraction": 2.5}, ["gaussian_arms_fraction must be a finite number in [0, 1], got 2.5"]),
        ({"per_step_fraction": -0.1}, ["per_step_fraction must be a finite number in [0, 1], got -0.1"]),
        ({"dagger_max_batch": 0}, ["dagger_max_batch must be an integer >= 1, got 0"]),
        ({"eval_every": 1, "eval_cells": [{"dim": 3, "horizn": 20}]}, ["eval_cells[0] has an unknown key 'horizn'"]),
        ({"eval_every": 1, "eval_cells": [{"dim": 12}]}, ["eval_cells[0].dim=12 must be <= the model's d_max=8"]),
        ({"eval_every": 1, "eval_cells": [{"noise_std": 0}]}, ["eval_cells[0].noise_std must be a finite number > 0"]),
        ({"prior": "famly"}, ["prior must be one of 'uniform', 'family', got 'famly'"]),
        ({"expert_schedule": "ucb"}, ["expert_schedule must be one of 'constant', 'bayes_ucb', got 'ucb'"]),
        ({"one_hot_fraction": 1.5}, ["one_hot_fraction must be a finite number in [0, 1], got 1.5"]),
        ({"model": {"d_modl": 8}}, ["LinearGeneralistTrainConfig.model=", "d_modl"]),
    ],
)
def test_linear_generalist_prior_and_model_are_checked(tmp_path, kw, words):
    with pytest.raises(ValueError) as err:
        _linear(tmp_path, **kw)
    assert all(word in str(err.value) for word in words), str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "config, field, value, allowed",
    [
        (mdp_generalist.MDPGeneralistTrainConfig, "max_arms", 0, "an integer >= 1"),  # default changed: 6
        (mdp_generalist.MDPGeneralistTrainConfig, "steps", 0, "an integer >= 1"),  # changed twice (loop, schedule)
        (linear_generalist.LinearGeneralistTrainConfig, "warmup_steps", -1, "an integer >= 0"),
        (generalist.GeneralistTrainConfig, "cost_per_batch", 0.0, "a finite number > 0"),
    ],
)
def test_a_field_whose_default_a_subclass_changes_keeps_its_rule(tmp_path, config, field, value, allowed):
    """A subclass redeclares a field to change its default; the rule declared with it by the base still holds."""
    with pytest.raises(ValueError) as err:
        config(out_dir=str(tmp_path / "run"), **{field: value})
    assert f"{config.__name__}.{field} must be {allowed}, got {value!r}" in str(err.value)


def test_bernoulli_generalist_evaluation_fits_the_gittins_table(tmp_path):
    with pytest.raises(ValueError, match=r"eval_horizon=200 must be <= GeneralistTrainConfig.max_horizon=8"):
        _bernoulli(tmp_path, eval_every=1)
    with pytest.raises(ValueError, match=r"GeneralistTrainConfig.model=.*not a GeneralistConfig"):
        _bernoulli(tmp_path, model={"d_model": 8, "no_such": 1})


@pytest.mark.parametrize("trainer", list(TRAINERS))
def test_command_line_refuses_before_the_folder_exists(tmp_path, trainer, capsys):
    """``python -m ... CONFIG.json steps=-1`` exits 2 naming the field, and writes nothing."""
    make, _ = TRAINERS[trainer]
    config = tmp_path / "config.json"
    config.write_text(__import__("json").dumps(make(tmp_path).to_dict()))
    module = generalist if trainer == "bernoulli" else linear_generalist
    with pytest.raises(SystemExit) as done:
        module.main([str(config), "steps=-1"])
    assert done.value.code == 2 and "steps must be an integer >= 1, got -1" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("trainer", list(TRAINERS))
def test_a_refused_rerun_changes_no_file(tmp_path, trainer):
    """A rerun with another learning rate is refused naming it; config.json and every other file stay as they were."""
    make, train = TRAINERS[trainer]
    train(make(tmp_path), echo=False)
    before = _files(tmp_path / "run")
    assert "config.json" in before and "resume.json" in before and LOCK_FILE not in before
    time.sleep(0.01)  # a rewrite would show in the modification times too
    with pytest.raises(TrainingStateError, match=r"lr: 0\.001 in the run, 0\.002 now"):
        train(make(tmp_path, lr=2e-3), echo=False)
    assert _files(tmp_path / "run") == before


# --- pretraining and fine-tuning ------------------------------------------------------------------


def _pretrain(tmp_path, **kw):
    return tiny_pretrain_config(tmp_path / "run", **kw)


def _finetune(tmp_path, **kw):
    return finetune_module.FinetuneConfig(**{"out_dir": str(tmp_path / "run"), "device": "cpu", **kw})


@pytest.mark.parametrize("make", [_pretrain, _finetune], ids=["pretrain", "finetune"])
@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("threads", 100_000, "an integer in [0, 256]"),  # segfaulted in OpenMP
        ("threads", -1, "an integer in [0, 256]"),
        ("lr", 1e300, "a finite number in (0, 1]"),  # failed inside torch after files were written
        ("lr", 0.0, "a finite number in (0, 1]"),
        ("seed", 2**70, "an integer in [0, 9223372036854775807]"),  # the same, in torch.manual_seed
        ("seed", -1, "an integer in [0, 9223372036854775807]"),
        ("grad_clip", 0.0, "a finite number > 0"),
    ],
)
def test_pretrain_and_finetune_fields(tmp_path, make, field, value, allowed):
    with pytest.raises(ValueError) as err:
        make(tmp_path, **{field: value})
    assert f"Config.{field} must be {allowed}, got {value!r}" in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["threads=100000"], ["PretrainConfig.threads must be an integer in [0, 256], got 100000"]),
        (["lr=1e300"], ["PretrainConfig.lr must be a finite number in (0, 1], got 1e+300"]),
        ([f"seed={2**70}"], [f"PretrainConfig.seed must be an integer in [0, 9223372036854775807], got {2**70}"]),
        (["steps=-5"], ["PretrainConfig.steps must be an integer >= 1, got -5"]),
    ],
)
def test_pretrain_command_line_refuses_before_any_file(tmp_path, argv, words, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as done:
        pretrain.main(["--set", f"out_dir={out}", *argv])
    err = capsys.readouterr().err
    assert done.value.code == 2 and all(word in err for word in words), err
    assert not out.exists()


def test_old_field_names_read_by_the_one_compatibility_function(tmp_path):
    """``run_dir`` and ``warmup`` in a record are today's ``out_dir`` and ``warmup_steps``; both at once conflict."""
    assert RENAMED_FIELDS == {"run_dir": "out_dir", "warmup": "warmup_steps"}
    old = {**_linear(tmp_path).to_dict(), "warmup_steps": 7}
    old["run_dir"], old["warmup"] = old.pop("out_dir"), old.pop("warmup_steps")
    cfg = linear_generalist.LinearGeneralistTrainConfig.from_dict(old)
    assert (cfg.out_dir, cfg.warmup_steps) == (str(tmp_path / "run"), 7)
    with pytest.raises(ValueError, match=r"warmup_steps=7 .* warmup=8|warmup=8 and its new name warmup_steps=7"):
        upgrade_config({"warmup_steps": 7, "warmup": 8})


# --- two processes, one folder ------------------------------------------------------------------

HOLDER = """
import sys, time
from icrl_gym.training.state import RunFolderLock
with RunFolderLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("trainer", ["bernoulli", "linear", "pretrain"])
def test_a_folder_in_use_is_refused_naming_the_holder(tmp_path, trainer):
    """The loser of a race for a folder printed a raw FileNotFoundError; now it is told who holds the folder."""
    folder = tmp_path / "run"
    folder.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = _files(folder)
        with pytest.raises(RunFolderBusy) as err:
            if trainer == "pretrain":
                pretrain.pretrain(_pretrain(tmp_path), echo=False)
            else:
                make, train = TRAINERS[trainer]
                train(make(tmp_path), echo=False)
        message = str(err.value)
        assert f"out_dir {folder} is in use by another process (pid {holder.pid}" in message, message
        assert _files(folder) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / LOCK_FILE).write_text(f"{dead.pid}\n")  # left behind by a killed process (no lock is held)
    generalist.train(_bernoulli(tmp_path), echo=False)
    assert (folder / "resume.json").exists() and not (folder / LOCK_FILE).exists()


def test_the_lock_is_exclusive_within_a_process_and_released(tmp_path):
    with RunFolderLock(tmp_path / "run") as lock:
        assert lock.path.read_text().strip() == str(os.getpid())
        with pytest.raises(RunFolderBusy, match=rf"pid {os.getpid()}"):
            RunFolderLock(tmp_path / "run").__enter__()
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    with RunFolderLock(tmp_path / "run"):  # free again
        pass


def test_a_refused_new_run_leaves_no_folder(tmp_path):
    """A new run refused once the folder is locked (here: weights of another model) removes the folder it made."""
    other = tmp_path / "other"
    generalist.train(_bernoulli(tmp_path, out_dir=str(other)), echo=False)
    init = next((other / "checkpoints").glob("*.safetensors")).with_suffix("")
    cfg = _bernoulli(tmp_path, init_checkpoint=str(init), model={**TINY_GENERALIST, "d_model": 16})
    with pytest.raises(ValueError, match="holds a model"):
        generalist.train(cfg, echo=False)
    assert not (tmp_path / "run").exists()


def _config_class(record):
    """The trainer configuration class of a recorded configuration (by the fields only it has)."""
    if "base" in record:
        return finetune_module.FinetuneConfig
    if "min_dim" in record:
        return linear_generalist.LinearGeneralistTrainConfig
    if "min_states" in record:
        return mdp_generalist.MDPGeneralistTrainConfig
    if "eval_arms" in record:
        return generalist.GeneralistTrainConfig
    return pretrain.PretrainConfig


def _resolved(path):
    """A config file's fields over those of the file its ``extends`` names (the command line's rule, restated)."""
    import json

    data = json.loads(path.read_text())
    base = data.pop("extends", None)
    return data if base is None else {**_resolved(path.parent / base), **data}


def test_every_shipped_record_reads_as_a_config():
    """Shipped configs and the training records of shipped checkpoints, old field names included, still build."""
    import json
    from pathlib import Path

    folder = Path(pretrain.__file__).parents[1] / "pretrained"
    records = [_resolved(p) for p in sorted((folder / "configs").glob("*.json"))]
    for path in sorted(folder.glob("*.json")):
        meta = json.loads(path.read_text())
        records += [meta["pretrain"]] if "pretrain" in meta else []
        records += [meta["finetune"]["config"]] if "finetune" in meta else []
    trainer_records = [r for r in records if "algo" not in r]  # the meta-RL configs are MetaRLConfig's
    assert len(trainer_records) >= 30 and any("run_dir" in r and "warmup" in r for r in trainer_records)
    for record in trainer_records:
        cfg = _config_class(record).from_dict(record)
        assert cfg.out_dir == record.get("out_dir", record.get("run_dir"))
        if "warmup" in record or "warmup_steps" in record:
            assert cfg.warmup_steps == record.get("warmup_steps", record.get("warmup"))


@pytest.mark.parametrize("trainer", list(TRAINERS))
def test_a_run_saved_with_the_old_field_names_resumes(tmp_path, trainer):
    """A manifest written before the rename (``run_dir``, ``warmup``) resumes, and is compared field by field."""
    import json

    from icrl_gym.training.state import MANIFEST
    from icrl_gym.utils.fileio import CONTENT_HASH_FIELD, content_sha256

    make, train = TRAINERS[trainer]
    train(make(tmp_path), echo=False)
    path = tmp_path / "run" / MANIFEST
    manifest = json.loads(path.read_text())
    config = manifest["config"]
    config["run_dir"], config["warmup"] = config.pop("out_dir"), config.pop("warmup_steps")
    manifest[CONTENT_HASH_FIELD] = content_sha256(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(TrainingStateError, match=r"warmup_steps: 1 in the run, 2 now"):
        train(make(tmp_path, steps=4, warmup_steps=2), echo=False)
    train(make(tmp_path, steps=4), echo=False)
    assert "resumed from" in (tmp_path / "run" / "train.log").read_text()
    assert json.loads(path.read_text())["step"] == 4
