"""One command-line style: typed ``--set`` overrides, field docstrings as ``--help``, argparse errors for bad input."""

import dataclasses
import json

import pytest

from benchmarks.harness import cli, config
from icrl_gym.models.meta_policy import MetaRLConfig
from icrl_gym.training import finetune, meta_rl, pretrain
from icrl_gym.training.finetune import FinetuneConfig
from icrl_gym.training.pretrain import PretrainConfig
from icrl_gym.utils.cli import ConfigParser, field_docs, parse_value, plain_text

ENTRY_POINTS = [  # (module, its config class)
    (pretrain, PretrainConfig),
    (finetune, FinetuneConfig),
    (meta_rl, MetaRLConfig),
]
CONFIGS = [cls for _, cls in ENTRY_POINTS] + [config.BenchConfig]


def parse(cls, argv):
    return ConfigParser(cls, "test", "test").parse_config(argv)[0]


def exit_message(capsys, call):
    """Run ``call``, expect an argparse error (exit status 2) and return its message."""
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_overrides_parse_to_the_field_types(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"steps": 10, "expert": {"name": "ucb"}, "label": "expert"}))
    argv = [str(config), "--set", "steps=7", "lr=3e-4", "expert=none", "label=ad", "model={}", "out_dir=runs/x"]
    cfg = parse(PretrainConfig, [*argv, "--set", "env.horizon=50", "env.noise_std=2", "value_loss_weight=1"])
    assert cfg.steps == 7 and type(cfg.steps) is int
    assert cfg.lr == 3e-4 and type(cfg.lr) is float
    assert cfg.expert is None and cfg.label == "ad" and cfg.model == {} and cfg.out_dir == "runs/x"
    assert cfg.value_loss_weight == 1.0 and type(cfg.value_loss_weight) is float  # an int text for a float field
    assert cfg.env["horizon"] == 50 and cfg.env["noise_std"] == 2  # one entry changed, the others kept
    assert {k: v for k, v in cfg.env.items() if k not in ("horizon", "noise_std")} == {
        k: v for k, v in PretrainConfig().env.items() if k not in ("horizon", "noise_std")
    }
    meta = parse(MetaRLConfig, ["--set", "normalize_reward=false", "net_arch=[64, 32]", "gamma=1"])
    assert meta.normalize_reward is False and meta.net_arch == [64, 32] and meta.gamma == 1.0
    assert parse(MetaRLConfig, ["--set", "normalize_reward=True"]).normalize_reward is True


def test_without_config_file_the_defaults_apply():
    assert parse(FinetuneConfig, []) == FinetuneConfig()
    assert parse(FinetuneConfig, ["--set", "iterations=3"]) == FinetuneConfig(iterations=3)


@pytest.mark.parametrize(
    "text, hint, value",
    [
        ("3", int, 3),
        ("2.5", float, 2.5),
        ("no", bool, False),
        ("null", int | None, None),
        ("4", int | None, 4),
        ("runs/x", str, "runs/x"),
        ('"runs/x"', str, "runs/x"),  # a JSON-quoted string is the string, not a path starting with a quote
        ('"a"b"', str, '"a"b"'),  # not JSON: as written
        ("", str, ""),
    ],
)
def test_parse_value(text, hint, value):
    assert parse_value(text, hint) == value and type(parse_value(text, hint)) is type(value)


@pytest.mark.parametrize("module, cls", ENTRY_POINTS)
@pytest.mark.parametrize(
    "override, expected",
    [
        ("no_such_field=1", ["unknown", "'no_such_field'", "known fields:", "seed", "device"]),
        ("seed=abc", ["'seed'", "'abc'", "expects int"]),
        ("seed=-1", ["seed", "-1", "must be an integer"]),
        ("device=gpu", ["device", "'gpu'", "'auto', 'cpu'"]),
        ("seed", ["expected key=value"]),
    ],
)
def test_bad_overrides_exit_2_naming_the_field(capsys, module, cls, override, expected):
    err = exit_message(capsys, lambda: module.main(["--set", override]))
    assert all(part in err for part in expected), err


@pytest.mark.parametrize(
    "override, expected",
    [
        ("steps=abc", "--set steps=abc: field 'steps' expects int, got 'abc' (not an integer)"),
        ("eval_every=0", "PretrainConfig.eval_every must be an integer >= 1, got 0"),
        ("lr=nan", "PretrainConfig.lr must be a finite number in (0, 1], got nan"),
        ("lr=inf", "PretrainConfig.lr must be a finite number in (0, 1], got inf"),
        ("batch_size=0", "PretrainConfig.batch_size must be an integer >= 1, got 0"),
        ("stpes=3", "unknown PretrainConfig field 'stpes' (did you mean 'steps'?)"),
        ("env.horizon=x", "entry 'env.horizon' holds 200, so 'x' does not fit"),
        ("env.horizon=0", "horizon must be >= 1, got 0"),
        ("steps.x=1", "field 'steps' has type int, not a dict"),
        ('context={"name":"nope"}', "PretrainConfig.context must name a registered agent"),
        ("expert=ucb", "field 'expert' expects dict[str, Any] | None, got 'ucb'"),
    ],
)
def test_pretrain_refuses_before_collecting_data(capsys, monkeypatch, override, expected):
    def no_collection(*args, **kwargs):
        raise AssertionError("data collection started before the configuration was checked")

    monkeypatch.setattr(pretrain, "collect", no_collection)
    err = exit_message(capsys, lambda: pretrain.main(["--set", override]))
    assert expected in err, err


def test_finetune_and_meta_rl_limits(capsys):
    err = exit_message(capsys, lambda: finetune.main(["--set", "runs_per_iteration=1", "eval_every=0"]))
    assert "FinetuneConfig.runs_per_iteration must be an integer >= 2, got 1" in err
    assert "FinetuneConfig.eval_every must be an integer >= 1, got 0" in err
    err = exit_message(capsys, lambda: meta_rl.main(["--set", "gamma=1.5", "net_arch=[0]"]))
    assert "MetaRLConfig.gamma must be a finite number in [0, 1], got 1.5" in err
    err = exit_message(capsys, lambda: meta_rl.main(["--set", "net_arch=[0]"]))
    assert "MetaRLConfig.net_arch must be a non-empty list of integers >= 1, got [0]" in err


def test_config_file_errors(capsys, tmp_path):
    bad_type = tmp_path / "bad_type.json"
    bad_type.write_text(json.dumps({"steps": "many"}))
    assert "field 'steps' expects int, got \"many\"" in exit_message(capsys, lambda: pretrain.main([str(bad_type)]))
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"step": 3}))
    assert "unknown PretrainConfig field 'step'" in exit_message(capsys, lambda: pretrain.main([str(unknown)]))
    assert "cannot read CONFIG.json" in exit_message(capsys, lambda: pretrain.main([str(tmp_path / "none.json")]))
    broken = tmp_path / "broken.json"
    broken.write_text("{steps: 3}")
    assert "is not valid JSON" in exit_message(capsys, lambda: pretrain.main([str(broken)]))


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_has_a_docstring(cls):
    docs = field_docs(cls)
    assert set(docs) == {f.name for f in dataclasses.fields(cls)}
    assert all(doc.strip() for doc in docs.values())


def test_field_docs_reads_the_source():
    assert field_docs(PretrainConfig)["steps"] == "Optimiser steps (the cosine schedule spans them)."
    # a docstring over several lines reads as one paragraph
    assert field_docs(MetaRLConfig)["gamma"].startswith("Discount. 1 is the regret's own objective, but PPO's regret")
    assert field_docs(config.BenchConfig)["list"] == "List the experiments and exit."


@pytest.mark.parametrize("module, cls", ENTRY_POINTS)
def test_help_lists_every_field_with_type_default_and_docstring(capsys, module, cls):
    with pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert f"{f.name}: " in text and json.dumps(default) in text
        assert plain_text(field_docs(cls)[f.name]) in text, f.name  # the docstring, its reST markup dropped
    assert "--set KEY=VALUE" in text and "--export PATH" in text


def test_harness_help_is_the_field_docstrings(capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, doc in field_docs(config.BenchConfig).items():
        assert "--" + name.replace("_", "-") in text and plain_text(doc) in text
    assert "The results do not depend on it." in text  # what --threads does, not a measurement that ages
    assert cli.parse_args([]).threads == 1


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--runs", "1"], ["--runs must be >= 2, got 1", "standard error", "two runs"]),
        (["--runs", "many"], ["--runs", "invalid int value: 'many'"]),
        (["--experiments", "bernoulli-ad-ucb,nope"], ["unknown experiment(s) ['nope']", "'bernoulli-ad-ucb'", "'all'"]),
        (["--experiments", "bernoulli-ad-ucbb"], ["['bernoulli-ad-ucbb'] (did you mean 'bernoulli-ad-ucb'?)"]),
        (["--device", "tpu"], ["--device must be cpu, cuda or auto, got 'tpu'"]),
        (["--threads", "0"], ["--threads must be >= 1, got 0"]),
    ],
)
def test_harness_errors(capsys, argv, expected):
    err = exit_message(capsys, lambda: cli.main(argv))
    assert all(part in err for part in expected), err


def test_harness_plot_only_needs_saved_results(capsys, tmp_path):
    err = exit_message(capsys, lambda: cli.main(["--plot-only", "--out", str(tmp_path)]))
    assert f"--plot-only re-draws saved results, but {tmp_path} has no regret.csv or config.json" in err


@pytest.mark.parametrize(
    ("module", "config"),
    [("generalist", "bernoulli-generalist"), ("linear_generalist", "linear-generalist-v1")],
)
def test_generalist_trainers_read_set_and_the_recorded_bare_overrides_alike(module, config, capsys, monkeypatch):
    """The shipped models' commands say ``CONFIG.json run_dir=... steps=3800``; ``--set`` says the same.

    ``run_dir`` and ``warmup`` (the shipped configs' names) are today's ``out_dir`` and ``warmup_steps``.
    """
    import importlib

    trainer = importlib.import_module(f"icrl_gym.training.{module}")
    config = f"icrl_gym/pretrained/configs/{config}.json"
    seen = []
    monkeypatch.setattr(trainer, "train", seen.append)
    trainer.main([config, "run_dir=runs/x", "steps=3800"])
    trainer.main([config, "--set", "run_dir=runs/x", "--quiet", "steps=3800"])
    trainer.main([config, "--set", "out_dir=runs/x", "steps=3800"])
    assert len(seen) == 3 and seen[0] == seen[1] == seen[2]
    assert (seen[0].out_dir, seen[0].steps) == ("runs/x", 3800)
    base = json.loads(open(config).read())
    renamed = {"run_dir": "out_dir", "warmup": "warmup_steps"}
    base = {renamed.get(k, k): v for k, v in base.items()}
    assert base["warmup_steps"] == seen[0].warmup_steps == 300
    assert {k: v for k, v in seen[0].to_dict().items() if k in base and k not in ("out_dir", "steps")} == {
        k: v for k, v in base.items() if k not in ("out_dir", "steps")
    }
    assert "field 'steps' expects int" in exit_message(capsys, lambda: trainer.main([config, "steps=abc"]))
    assert "did you mean 'steps'" in exit_message(capsys, lambda: trainer.main([config, "stepz=5"]))
    assert "CONFIG.json" in exit_message(capsys, lambda: trainer.main([]))


def test_extends_starts_from_another_file_and_replaces_whole_fields(tmp_path):
    """A file's fields override those of the file its ``extends`` names (a chain of them too), a dict field whole."""
    (tmp_path / "base.json").write_text(json.dumps({"steps": 10, "lr": 1e-3, "env": {"horizon": 30}}))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "mid.json").write_text(json.dumps({"extends": "../base.json", "steps": 20, "label": "ad"}))
    (sub / "top.json").write_text(json.dumps({"extends": "mid.json", "lr": 5e-4, "env": {"noise_std": 2.0}}))
    cfg = parse(PretrainConfig, [str(sub / "top.json"), "--set", "steps=7"])
    assert (cfg.steps, cfg.lr, cfg.label) == (7, 5e-4, "ad")
    assert cfg.env == {"noise_std": 2.0}  # the whole dict replaced, not merged
    assert parse(PretrainConfig, [str(sub / "mid.json")]).env == {"horizon": 30}


def test_extends_errors_name_the_chain(capsys, tmp_path):
    """A loop, a missing base and an 'extends' that is not a file name exit 2, naming the files."""
    (tmp_path / "a.json").write_text(json.dumps({"extends": "b.json"}))
    (tmp_path / "b.json").write_text(json.dumps({"extends": "a.json", "steps": 3}))
    err = exit_message(capsys, lambda: pretrain.main([str(tmp_path / "a.json")]))
    assert "its 'extends' chain comes back to it" in err and "a.json" in err
    (tmp_path / "c.json").write_text(json.dumps({"extends": "gone.json"}))
    err = exit_message(capsys, lambda: pretrain.main([str(tmp_path / "c.json")]))
    assert "cannot read CONFIG.json" in err and "gone.json" in err and "(extended by" in err
    (tmp_path / "d.json").write_text(json.dumps({"extends": 3}))
    assert "'extends' names the JSON file" in exit_message(capsys, lambda: pretrain.main([str(tmp_path / "d.json")]))
    (tmp_path / "e.json").write_text(json.dumps({"extends": "b2.json"}))
    (tmp_path / "b2.json").write_text(json.dumps({"stepz": 3}))
    assert "unknown PretrainConfig field 'stepz'" in exit_message(
        capsys, lambda: pretrain.main([str(tmp_path / "e.json")])
    )


def test_each_shipped_generalist_record_is_its_recorded_command_s_config():
    """The command in a Bernoulli generalist's record, read again today (its config file and the files that file
    extends), gives the configuration the record holds, field for field.

    Three fields are left out: ``out_dir`` (where the run was written) and the names of other checkpoints
    (``init_checkpoint``, ``teacher``: a shipped model is renamed -vN when its successor ships; the teacher test of
    ``test_model_card`` finds teachers by their weights).  A field newer than a record must be at its default.
    """
    import shlex
    from pathlib import Path

    from icrl_gym.training.generalist import GeneralistTrainConfig

    defaults = json.loads(json.dumps(GeneralistTrainConfig().to_dict()))
    checked = 0
    for path in sorted(Path("icrl_gym/pretrained").glob("*.json")):
        record = json.loads(path.read_text())
        command = (record.get("training") or {}).get("command", "")
        if not command.startswith("python -m icrl_gym.training.generalist "):
            continue
        cfg = json.loads(json.dumps(parse(GeneralistTrainConfig, shlex.split(command)[3:]).to_dict()))
        for key in set(cfg) - {"out_dir", "init_checkpoint", "teacher"}:
            assert cfg[key] == record["pretrain"].get(key, defaults[key]), (path.name, key)
        checked += 1
    assert checked >= 7
