"""examples/dpt_bernoulli_minimal.py is the library's pretraining pipeline written out, draw for draw.

At tiny sizes (seconds), the example's ``main`` and :func:`icrl_gym.training.pretrain.pretrain` with the
same settings and seed train the same weights, bit for bit, and so play the same regrets on the same
evaluation instances.  The file stays short enough to read top to bottom.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from agents import ts_uniform_mixture
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.models.transformer import BanditTransformer
from icrl_gym.training.pretrain import PretrainConfig, pretrain

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dpt_bernoulli_minimal.py"
MAX_LINES = 200

# three chunks of data (10 trajectories, 10 // 4 = 2 steps each), warm-up then cosine decay
TINY: dict[str, Any] = {
    "seed": 3,
    "arms": 3,
    "horizon": 8,
    "alpha": 0.5,
    "steps": 6,
    "batch_size": 4,
    "chunk": 10,
    "lr": 3e-3,
    "warmup": 2,
    "min_lr_ratio": 0.05,
    "weight_decay": 0.01,
    "grad_clip": 1.0,
    "layers": 1,
    "heads": 2,
    "embd": 8,
    "eval_runs": 20,
}


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dpt_bernoulli_minimal", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple and annotations resolve through the module
    spec.loader.exec_module(module)
    return module


def argv(settings: dict) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]


def library_config(settings: dict, out_dir: Path) -> PretrainConfig:
    """The same run as the library trainer's configuration (the example's names -> PretrainConfig's)."""
    return PretrainConfig(
        name="dpt-bernoulli-minimal",
        env=bernoulli_bandit_spec(num_arms=settings["arms"], horizon=settings["horizon"]).to_dict(),
        context=ts_uniform_mixture(settings["alpha"]),
        label="dpt",
        target="label",
        model={
            "n_layer": settings["layers"],
            "n_head": settings["heads"],
            "n_embd": settings["embd"],
            "layout": "compact",
            "attention": "relu",
            "positional": "learned",
        },
        steps=settings["steps"],
        warmup_steps=settings["warmup"],
        lr=settings["lr"],
        min_lr_ratio=settings["min_lr_ratio"],
        weight_decay=settings["weight_decay"],
        grad_clip=settings["grad_clip"],
        batch_size=settings["batch_size"],
        trajectories_per_chunk=settings["chunk"],
        passes_per_chunk=1.0,
        val_trajectories=4,
        eval_every=settings["steps"],
        seed=settings["seed"],
        device="cpu",
        threads=1,
        out_dir=str(out_dir),
    )


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example()


def test_the_example_is_short():
    lines = EXAMPLE.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{EXAMPLE.name} has {len(lines)} lines; a reading entry point keeps to {MAX_LINES}"


def test_the_example_trains_what_the_library_trains(example, tmp_path, capsys):
    ours = example.main([*argv(TINY), "--log-every=2"])
    printed = capsys.readouterr().out
    assert "Thompson sampling" in printed and "DPT" in printed

    library, _ = pretrain(library_config(TINY, tmp_path / "run"), echo=False)
    assert isinstance(library, BanditTransformer)
    assert library.config == ours.model.config
    mine, theirs = ours.model.state_dict(), library.state_dict()
    assert mine.keys() == theirs.keys()
    differ = [k for k in mine if not torch.equal(mine[k], theirs[k])]
    assert differ == [], f"weights differ from the library's: {differ}"

    # the weights did move: the equality above is not that of two untrained models
    torch.manual_seed(TINY["seed"])
    untrained = BanditTransformer(ours.model.config).state_dict()
    assert any(not torch.equal(untrained[k], mine[k]) for k in mine)

    # the regret the example printed is the library model's on the same instances
    spec = bernoulli_bandit_spec(num_arms=TINY["arms"], horizon=TINY["horizon"])
    seed = 10**6 * TINY["seed"] + example.EVAL_SEED_OFFSET
    theirs_regret = example.evaluate_model(library, spec, TINY["eval_runs"], seed)
    np.testing.assert_array_equal(ours.dpt_regret, theirs_regret)
    np.testing.assert_array_equal(ours.ts_regret, example.evaluate("bernoulli_ts", spec, TINY["eval_runs"], seed))
