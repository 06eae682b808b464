"""Every artefact records the software and code that made it: versions, platform, CPU kernels, git commit."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess

import gymnasium
import numpy as np
import pytest
import torch

import icrl_gym
from icrl_gym.checkpoint import read_record
from icrl_gym.data.trajectories import collect_trajectories, load_trajectories, save_trajectories
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.models import native_build
from icrl_gym.utils import provenance
from icrl_gym.utils.provenance import software_environment, source_revision
from tests.helpers import save_tiny_generalist

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def test_the_versions_are_those_of_the_imported_libraries():
    env = software_environment()
    assert env["icrl_gym"] == icrl_gym.__version__
    assert env["numpy"] == np.__version__ and env["torch"] == torch.__version__
    assert env["gymnasium"] == gymnasium.__version__ and env["python"] == platform.python_version()
    assert env["platform"] == f"{platform.system()} {platform.machine()}"
    assert env["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert json.loads(json.dumps(env)) == env  # plain JSON


def test_the_compiled_kernels_switch_and_compiler_are_recorded(monkeypatch):
    """Off by the switch; else the compiler's version line (no path, even where $CC is one); or no compiler."""
    monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    assert software_environment()["native_kernel"] == "off (ICRL_GYM_NATIVE=0)"
    monkeypatch.delenv(native_build.DISABLE_ENV)
    compiler = native_build.find_compiler()
    if compiler is not None:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        monkeypatch.setenv("CC", shutil.which(compiler) or compiler)
        assert software_environment()["native_kernel"] == f"on: {version.strip()}"
    monkeypatch.setattr(native_build, "find_compiler", lambda: None)
    assert software_environment()["native_kernel"] == "on, no C compiler: the PyTorch path"


@needs_git
def test_the_revision_is_the_checkouts_commit_and_says_whether_tracked_files_changed(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = _git(tmp_path, "log", "-1", "--format=%H")
    assert source_revision(tmp_path) == {"commit": head, "modified": False}
    (tmp_path / "new.py").write_text("y = 2\n")  # untracked: the commit still describes the code
    assert source_revision(tmp_path) == {"commit": head, "modified": False}
    (tmp_path / "a.py").write_text("x = 2\n")
    assert source_revision(tmp_path) == {"commit": head, "modified": True}


def test_no_revision_outside_a_checkout_or_without_git(tmp_path, monkeypatch):
    assert source_revision(tmp_path) is None
    (tmp_path / ".git").mkdir()  # looks like a checkout, but git cannot read it
    assert source_revision(tmp_path) is None
    monkeypatch.setenv("PATH", "")  # no git program at all
    assert source_revision(tmp_path) is None


def test_the_revision_is_the_one_the_process_started_from(monkeypatch):
    """A commit made while a run goes on does not change what its later artefacts record: git is not asked again."""
    started = software_environment()["code"]
    assert started == provenance.STARTED_FROM

    def no_git(*args, **kwargs):
        raise AssertionError("git was run again")

    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setattr(provenance, "source_revision", lambda *a, **k: {"commit": "0" * 40, "modified": True})
    env = software_environment()
    assert env["code"] == started
    if started is not None:
        env["code"]["modified"] = not started["modified"]  # the record is a copy
        assert software_environment()["code"] == started


def test_no_path_of_the_machine_is_recorded():
    text = json.dumps(software_environment())
    assert str(provenance._ROOT) not in text and "/" not in text


def test_a_checkpoint_records_the_software_that_saved_it(tmp_path):
    stem = save_tiny_generalist(tmp_path / "tiny")
    assert read_record(stem).meta["software"] == software_environment()


def test_a_dataset_records_its_maker_and_keeps_it_when_saved_again(tmp_path):
    data = collect_trajectories(linear_bandit_spec(horizon=5, dim=2, num_actions=3), "linucb", 3, seed=1)
    save_trajectories(data, tmp_path / "first.npz")
    loaded = load_trajectories(tmp_path / "first.npz")
    assert loaded.meta["software"] == software_environment()
    older = {**software_environment(), "torch": "0.0.1"}
    loaded.meta["software"] = older  # as if collected elsewhere: a copy keeps who made the data
    save_trajectories(loaded, tmp_path / "copy.npz")
    assert load_trajectories(tmp_path / "copy.npz").meta["software"] == older
