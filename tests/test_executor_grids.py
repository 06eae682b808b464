"""The grids and sweeps as tasks (cell x row x slice of runs): the same outputs in process, on processes and on Ray.

At tiny sizes with slices of 2 runs (so every row is several tasks, the last slice smaller), the
bandit generalization grid and the MDP grid write the same ``cells.csv``, byte for byte, and the
MDP deployment sweep and the Bernoulli frontier's Monte-Carlo rows give the same numbers, whether
their tasks run in this process, on two worker processes (one pool for all four sweeps) or on a Ray
cluster started here (skipped without Ray); a worker killed in the middle of a slice changes
nothing.  The joined slices of a row are the row played in common-random-numbers batches of the
slice size.  Pretraining data collected batch by batch on two workers is byte-identical to the
data one process collects.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from benchmarks.executor.local import KILL_ENV, InlineExecutor, ProcessExecutor
from benchmarks.experiments.bernoulli_frontier.run import uninformed_regrets
from benchmarks.experiments.generalization.run import run_generalization
from benchmarks.experiments.grid.cells import MODEL
from benchmarks.experiments.grid.tasks import slice_sizes
from benchmarks.experiments.mdp_deployment.run import play_deployments
from benchmarks.experiments.mdp_generalization.cells import MDP_GENERALIZATION
from benchmarks.experiments.mdp_generalization.run import run_mdp_generalization
from icrl_gym.data.trajectories import evaluate_regret
from tests.helpers import save_tiny_generalist, tiny_generalization
from tests.test_mdp_generalist import _saved

SLICE = 2
BANDIT = tiny_generalization(slice_runs=SLICE)
"""The generalization grid at K in {2, 3}, T=6, one Beta prior, one linear cell and one variant; slices of 2 runs."""

MDP = dataclasses.replace(MDP_GENERALIZATION, fixed=(3, 2, 3, 2), rooms=((3, 4, 2),), slice_runs=SLICE)
"""The MDP grid's fixed-size cell (twice the runs) and one dark room, tiny; slices of 2 runs."""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """A tiny Bernoulli generalist and a tiny MDP generalist, saved."""
    folder = tmp_path_factory.mktemp("models")
    bandit = save_tiny_generalist(folder / "bernoulli")
    mdp, _ = _saved(folder)
    return {"bernoulli": bandit, "mdp": str(mdp)}


def sweeps(executor, out: Path, models: dict[str, str]) -> dict[str, object]:
    """The four sweeps at tiny sizes into ``out`` with ``executor``: the grids' cells.csv bytes, the others' numbers."""
    run_generalization(BANDIT, out, runs=5, seed=1, checkpoint=models["bernoulli"], executor=executor)
    run_mdp_generalization(MDP, out, 3, checkpoint=models["mdp"], groups=("fixed", "dark"), executor=executor)
    deployments = play_deployments(((3, 2, 3, 4),), 5, 7, models["mdp"], executor, out / "deployment", SLICE)
    frontier = uninformed_regrets(2, 6, [(2.0, 1.0), (1.0, 1.0)], 5, 3, out / "gittins", models["bernoulli"], executor)
    return {
        "generalization": (out / BANDIT.name / "cells.csv").read_bytes(),
        "mdp-generalization": (out / MDP.name / "cells.csv").read_bytes(),
        "deployments": repr(deployments),  # repr: a NaN ratio compares equal to itself
        "frontier": repr(frontier),
    }


@pytest.fixture(scope="module")
def in_process(models, tmp_path_factory) -> dict[str, object]:
    """Every task in this process, in order (``--workers 1``)."""
    return sweeps(InlineExecutor(), tmp_path_factory.mktemp("inline"), models)


def test_two_worker_processes_give_the_same_outputs(in_process, models, tmp_path):
    with ProcessExecutor(2) as executor:
        assert sweeps(executor, tmp_path, models) == in_process


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (the 'ray' extra)")
def test_ray_gives_the_same_outputs(in_process, models, tmp_path):
    from benchmarks.executor.ray_executor import RayExecutor

    with RayExecutor("local", 2) as executor:
        assert sweeps(executor, tmp_path, models) == in_process


def test_a_worker_killed_in_a_slice_is_retried_and_cells_csv_is_unchanged(
    in_process, models, tmp_path, monkeypatch, capfd
):
    """SIGKILL from inside one slice on its first attempt: the pool breaks, its unfinished slices run again."""
    killed = "means ~ U[0, 1]; K=2; T=6/TS/slice 1"
    monkeypatch.setenv(KILL_ENV, killed)
    with ProcessExecutor(2) as executor:
        run_generalization(BANDIT, tmp_path, runs=5, seed=1, checkpoint=models["bernoulli"], executor=executor)
    err = capfd.readouterr().err
    assert "a worker died" in err and killed in err
    assert (tmp_path / BANDIT.name / "cells.csv").read_bytes() == in_process["generalization"]


def test_joined_slices_are_the_row_played_in_batches_of_the_slice_size(tmp_path, models):
    (result, *_) = run_generalization(BANDIT, tmp_path, runs=5, seed=1, checkpoint=models["bernoulli"])
    assert slice_sizes(5, SLICE) == [2, 2, 1]
    seed = BANDIT.seed_offset + 1
    for label in ("TS", "UCB", MODEL):
        agent = {**BANDIT.bernoulli_model, "checkpoint": models["bernoulli"]} if label == MODEL else None
        agent = agent or BANDIT.bernoulli_references[label]
        whole = evaluate_regret(result.cell.spec, agent, 5, seed=seed, batch_size=SLICE).sum(axis=1)
        assert np.array_equal(result.totals[label], whole), label
    # a finished row is one file; its slices were removed once joined
    store = tmp_path / BANDIT.name / "cells"
    assert not list(store.glob("*/slices/*.json")) and list(store.glob("*/TS.json"))


def test_a_prior_of_one_slice_plays_the_generators_it_played_before_slices():
    """Slice 0 of prior j draws from [seed, j, 0, 0] and [seed, j, 1, 0]: the generators [seed, j], [seed, j, 1]."""
    for seed, j in ((31_000_000, 3), (0, 0), (5, 15)):
        assert np.random.default_rng([seed, j, 0, 0]).random() == np.random.default_rng([seed, j]).random()
        assert np.random.default_rng([seed, j, 1, 0]).random() == np.random.default_rng([seed, j, 1]).random()


def test_collection_on_two_workers_writes_the_serial_bytes(tmp_path, monkeypatch):
    """Pretraining data collected batch by batch on two workers (and resumed from stored slices) is byte-identical."""
    from benchmarks.executor.collection import CollectionSlice, SliceStore, collect_on_executor
    from icrl_gym.data.collect import collect
    from icrl_gym.data.labels import Labelling
    from icrl_gym.data.trajectories import save_trajectories
    from icrl_gym.envs import MDPSpec, linear_bandit_spec

    bandit = linear_bandit_spec(3, 4, 6, 1.0)
    labelling = Labelling("ad", store_values=True)
    serial = collect(bandit, "linucb", 25, labelling, seed=4, batch_size=10)
    save_trajectories(serial, tmp_path / "serial.npz")
    mdp = MDPSpec(num_states=3, num_actions=2, horizon=3, episodes=2)
    mdp_labels = Labelling("dpt", posterior={"name": "psrl"}, store_probs=True)
    mdp_serial = collect(mdp, "psrl", 7, mdp_labels, seed=2, batch_size=3)
    with ProcessExecutor(2) as executor:
        joined = collect_on_executor(bandit, "linucb", 25, labelling, executor, seed=4, batch_size=10)
        mdp_joined = collect_on_executor(mdp, "psrl", 7, mdp_labels, executor, seed=2, batch_size=3)
    save_trajectories(joined, tmp_path / "joined.npz")
    for suffix in (".npz", ".json"):
        assert (tmp_path / f"joined{suffix}").read_bytes() == (tmp_path / f"serial{suffix}").read_bytes(), suffix
    assert mdp_joined.meta == mdp_serial.meta and mdp_joined.spec == mdp_serial.spec
    for field in ("actions", "rewards", "states", "v_star", "labels", "label_probs"):
        assert np.array_equal(getattr(mdp_joined, field), getattr(mdp_serial, field)), field
    # stored slices: a second collection into the same store reads them (and removes them once joined)
    store = tmp_path / "slices"

    task = CollectionSlice(bandit, "linucb", labelling, 4, 10, 1, 10)
    SliceStore(store).save(task, task.run())
    played, real = [], CollectionSlice.run
    monkeypatch.setattr(CollectionSlice, "run", lambda self: played.append(self.index) or real(self))
    again = collect_on_executor(bandit, "linucb", 25, labelling, store=store, seed=4, batch_size=10)
    assert played == [0, 2]  # batch 1 was stored
    save_trajectories(again, tmp_path / "again.npz")
    assert (tmp_path / "again.npz").read_bytes() == (tmp_path / "serial.npz").read_bytes()
    assert not store.exists()
