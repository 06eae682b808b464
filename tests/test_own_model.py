"""``agents.pretrained(PATH)`` plays your own model: a training run's folder, a checkpoint stem or a Hub folder.

Each case is checked against an independent route to the same weights: the agent built from the path
must play exactly the actions of the agent built from the checkpoint file the run folder names
(``make_agent({"name": ..., "checkpoint": stem})``), and a fine-tuning run's folder plays its best
validated checkpoint, not its latest.
"""

from __future__ import annotations

import json
import shutil

import gymnasium as gym
import pytest

import agents
import icrl_gym  # noqa: F401  (registers the environments)
from icrl_gym.checkpoint import CheckpointError, find_checkpoint, read_record
from icrl_gym.hub import export_hf_folder
from icrl_gym.training.finetune import finetune
from icrl_gym.training.pretrain import pretrain
from tests.helpers import tiny_finetune_config, tiny_pretrain_config


def _actions(agent, seed: int = 3, steps: int = 6) -> list[int]:
    env = gym.make("ICRL-BernoulliBandit-v0", num_arms=2, horizon=6)
    obs, info = env.reset(seed=seed)
    agent.reset(info)
    actions = []
    for _ in range(steps):
        a = agent.act(obs)
        obs, r, *_ = env.step(a)
        agent.update(a, r)
        actions.append(int(a))
    return actions


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("own") / "runs" / "tiny"
    pretrain(tiny_pretrain_config(out), echo=False)
    return out


def test_a_pretraining_run_folder_plays_its_latest_checkpoint(run_folder):
    stem = find_checkpoint(run_folder)
    manifest = json.loads((run_folder / "resume.json").read_text())
    assert stem == run_folder / manifest["files"]["record"]["path"][: -len(".json")]
    assert stem.name == "step_0000006"  # the tiny run's last step
    expected = _actions(agents.make_agent({"name": read_record(stem).kind.agent, "checkpoint": str(stem)}, seed=0))
    # the folder, the published copy, the stem itself and its .json file name the same model
    for form in (run_folder, run_folder / "checkpoint", stem, stem.with_suffix(".json")):
        assert _actions(agents.pretrained(form, seed=0)) == expected


def test_a_hub_folder_plays(run_folder, tmp_path):
    folder = export_hf_folder(find_checkpoint(run_folder), tmp_path / "hub")
    assert _actions(agents.pretrained(folder, seed=0)) == _actions(agents.pretrained(run_folder, seed=0))


def test_a_finetuning_run_folder_plays_its_best_checkpoint(run_folder, tmp_path):
    out = tmp_path / "ft"
    finetune(tiny_finetune_config(run_folder / "checkpoint", out), echo=False)
    manifest = json.loads((out / "resume.json").read_text())
    assert "best" in manifest["checkpoints"]
    assert find_checkpoint(out) == out / manifest["files"]["best.record"]["path"][: -len(".json")]
    best = agents.make_agent({"name": "transformer", "checkpoint": str(out / "best")}, seed=0)
    assert _actions(agents.pretrained(out, seed=0)) == _actions(best)


def test_shipped_names_are_unchanged():
    assert find_checkpoint("bernoulli-generalist").name == "bernoulli-generalist"
    assert type(agents.pretrained("bernoulli-generalist")).__name__ == "GeneralistAgent"


def test_a_path_without_a_model_is_refused_with_the_forms_it_may_take(run_folder, tmp_path):
    with pytest.raises(CheckpointError, match=r"no shipped model .*nowhere.*no such file.*training run's folder"):
        agents.pretrained(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="a folder that holds no checkpoint"):
        agents.pretrained(tmp_path / "empty")
    edited = tmp_path / "edited"
    shutil.copytree(run_folder, edited)
    manifest = json.loads((edited / "resume.json").read_text())
    manifest["checkpoints"]["best"] = 1  # an edit that would redirect play
    (edited / "resume.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="resume.json is corrupt"):
        agents.pretrained(edited)
    (edited / "resume.json").write_text("{")
    with pytest.raises(CheckpointError, match="not a readable training-run manifest"):
        agents.pretrained(edited)
