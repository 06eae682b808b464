"""Hugging Face Hub mixin layout: config.json + model.safetensors folders, written and read offline."""

import json
import logging

import numpy as np
import pytest
import torch

from agents.learned.transformer import TransformerAgent
from icrl_gym.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, resolve_checkpoint
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.hub import export_hf_folder


def test_round_trip_through_a_hub_folder(tmp_path, caplog):
    stem = resolve_checkpoint("linear-bandit-ad-linucb")
    with caplog.at_level(logging.INFO, logger="icrl_gym.hub"):
        folder = export_hf_folder(stem, tmp_path / "hub" / "linear-bandit-ad-linucb")
    assert f"wrote {folder / 'model.safetensors'} (" in caplog.text and " MB)" in caplog.text
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert json.loads((folder / "config.json").read_text())["weights_sha256"]
    weights, meta = read_checkpoint(stem)
    weights2, meta2 = read_checkpoint(folder)
    assert meta == meta2 and weights.keys() == weights2.keys()
    assert all(torch.equal(weights[k], weights2[k]) for k in weights)
    model, _ = load_checkpoint(folder, expect=linear_bandit_spec())
    reference, _ = load_checkpoint(stem)
    assert type(model) is type(reference) and model.config == reference.config
    actions = []  # the agents built from either form act alike
    for checkpoint in (stem, folder):
        agent = TransformerAgent(checkpoint=str(checkpoint))
        agent.reset(batch_size=4, dim=5, num_actions=10, rng=np.random.default_rng(0))
        sets = np.random.default_rng(1).uniform(-1, 1, (4, 10, 5))
        actions.append(agent.act_batch(sets))
    np.testing.assert_array_equal(actions[0], actions[1])


def test_export_replaces_a_folder_atomically_and_refuses_corrupt_input(tmp_path):
    stem = resolve_checkpoint("linear-bandit-ad-linucb")
    folder = export_hf_folder(stem, tmp_path / "m")
    export_hf_folder(stem, folder)  # over an existing folder: no leftovers beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    (folder / "model.safetensors").write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError):
        export_hf_folder(folder, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_export_never_deletes_what_it_did_not_write(tmp_path):
    stem = resolve_checkpoint("bernoulli-ad-ucb")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "README.md").write_text("mine")
    (tmp_path / "notes").write_text("mine")
    for target, message in (
        (project, r"holds files that no earlier export wrote \(\.git, README\.md\)"),
        (tmp_path / "notes", "is a file, not a folder"),
        (tmp_path / "notes" / "model", "notes is a file, not a folder"),
    ):
        with pytest.raises(FileExistsError, match=message):
            export_hf_folder(stem, target)
    assert sorted(p.name for p in project.iterdir()) == [".git", "README.md"]
    assert (project / "README.md").read_text() == (tmp_path / "notes").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "project"]  # no temporary folder left
