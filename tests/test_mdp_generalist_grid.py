"""The MDP generalist on the mdp grid experiment: paired rows, bounds, reruns, split rows, its deployment schedules."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from agents.learned.mdp_generalist import MDPGeneralistAgent
from icrl_gym.checkpoint import CheckpointKind, save_checkpoint
from icrl_gym.envs.dark_room import dark_room_spec
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.mdp_env import reset_info
from icrl_gym.training.mdp_generalist import MDPGeneralistTrainConfig
from icrl_gym.utils.provenance import software_environment
from tests.helpers import TINY_MDP_GENERALIST, slow_failure_fraction, slow_quantile, tiny_mdp_generalist
from tests.test_mdp_generalist import _saved


def test_the_mdp_grid_pairs_the_rows_checks_the_bounds_and_reruns_only_a_new_model(tmp_path, monkeypatch):
    from dataclasses import replace

    from benchmarks.experiments.grid import run as grid_run
    from benchmarks.experiments.grid.cells import MODEL
    from benchmarks.experiments.mdp_generalization.cells import MDP_GENERALIZATION
    from benchmarks.experiments.mdp_generalization.cli import main as grid_main
    from benchmarks.experiments.mdp_generalization.run import run_mdp_generalization

    path, model = _saved(tmp_path)
    exp = replace(MDP_GENERALIZATION, fixed=(3, 2, 3, 2), rooms=((3, 4, 2),))
    out = tmp_path / "eval"
    results = run_mdp_generalization(exp, out, 4, checkpoint=str(path), groups=("fixed", "dark"))
    folder = out / exp.name
    fixed, room = results
    assert fixed.totals[MODEL].shape == (8,) and room.totals[MODEL].shape == (4,)  # twice the runs
    assert set(room.totals) == {MODEL, *exp.room_references}
    assert set(fixed.totals) == {MODEL, *exp.references, *exp.fixed_references}
    # the model's paired difference and ratio to PSRL, from the per-run regrets
    with open(folder / "cells.csv") as fh:
        line = next(r for r in csv.DictReader(fh) if r["row"] == MODEL and r["kind"] == "dark_room")
    model_room, psrl_room = room.totals[MODEL], room.totals["PSRL (DarkRoom prior)"]
    assert float(line["diff_psrl"]) == pytest.approx((model_room - psrl_room).mean(), rel=1e-5)
    assert float(line["ratio_psrl"]) == pytest.approx(model_room.mean() / psrl_room.mean(), rel=1e-5)
    # tails against the best compared reference (lowest mean), recomputed by plain loops
    compared = [label for label in exp.compared if room.totals.get(label) is not None]
    best = min(compared, key=lambda label: room.totals[label].mean())
    assert line["best_reference"] == best
    assert float(line["p99"]) == pytest.approx(slow_quantile(model_room, 0.99), rel=1e-5)
    assert float(line["p99_ratio_to_best"]) == pytest.approx(
        slow_quantile(model_room, 0.99) / slow_quantile(room.totals[best], 0.99), rel=1e-5
    )
    assert float(line["failure_fraction"]) == slow_failure_fraction(model_room, room.totals[best])
    assert "model p99 / best's p99" in (folder / "summary.md").read_text()
    with open(folder / "checks.csv") as fh:
        bounds = {(r["cell"], r["check"]): float(r["threshold"]) for r in csv.DictReader(fh)}
    assert bounds[(fixed.cell.label, "<= 0.80 x PSRL")] == pytest.approx(0.8 * fixed.totals["PSRL"].mean(), rel=1e-5)
    bdpt = fixed.totals["Bayes DPT policy (greedy)"].mean()
    assert bounds[(fixed.cell.label, "<= 1.10 x greedy Bayes DPT")] == pytest.approx(1.1 * bdpt, rel=1e-5)
    assert bounds[(fixed.cell.label, "<= 13.3 (fixed-size DPT model)")] == 13.3
    assert (folder / "heatmap-psrl.png").stat().st_size > 0 and (folder / "heatmap-bayes-dpt.png").exists()
    # a model-only process (beside one playing the references), here from the other end of the grid,
    # meets the same instances and noise
    only = run_mdp_generalization(
        exp, tmp_path / "only", 4, checkpoint=str(path), groups=("fixed", "dark"), model_only=True, reverse=True
    )
    assert [r.cell for r in only] == [room.cell, fixed.cell] and set(only[0].totals) == {MODEL}
    assert np.array_equal(only[0].totals[MODEL], model_room)
    with open(tmp_path / "only" / exp.name / "cells.csv") as fh:  # no reference played: the p99 alone
        (alone,) = (r for r in csv.DictReader(fh) if r["kind"] == "dark_room")
    assert float(alone["p99"]) == pytest.approx(slow_quantile(model_room, 0.99), rel=1e-5)
    assert alone["failure_fraction"] == alone["best_reference"] == ""

    calls: list[str] = []
    real = grid_run.total_regret

    def counted(spec, agent, runs, seed, **kwargs):
        calls.append(agent["name"])
        return real(spec, agent, runs, seed, **kwargs)

    monkeypatch.setattr(grid_run, "total_regret", counted)
    again = run_mdp_generalization(exp, out, 4, checkpoint=str(path), groups=("fixed", "dark"))
    assert calls == [] and np.array_equal(again[0].totals[MODEL], fixed.totals[MODEL])
    # new weights: only the model's rows run again
    with torch.no_grad():
        model.count_in.bias.add_(0.5)
    trained = MDPGeneralistTrainConfig(model=TINY_MDP_GENERALIST, max_states=6, dark_room_fraction=0.0)
    record = trained.checkpoint_fields()
    other = save_checkpoint(tmp_path / "other", model, record, kind=CheckpointKind.MDP_GENERALIST)
    run_mdp_generalization(exp, out, 4, checkpoint=str(other), groups=("fixed", "dark"))
    assert calls == ["mdp_generalist", "mdp_generalist"]
    # the command line reaches every option: a second checkpoint, model only, re-plays only its row
    cli = ["--cells", "fixed", "--runs", "2", "--out", str(tmp_path / "cli"), "--workers", "1"]  # counted here
    grid_main(["--checkpoint", str(path), *cli])
    before = len(calls)
    grid_main(["--checkpoint", str(other), *cli, "--model-only", "--reverse"])
    assert calls[before:] == ["mdp_generalist"]
    # stored rows only: nothing is played, and what is not stored is n/a
    (fresh,) = run_mdp_generalization(
        exp, tmp_path / "fresh", 4, checkpoint=str(path), groups=("dark",), stored_only=True
    )
    assert len(calls) == before + 1 and all(v is None for v in fresh.totals.values())
    assert "| dark rooms; 3x3; H=4, K=2 | n/a |" in (tmp_path / "fresh" / exp.name / "summary.md").read_text()


def test_a_references_only_and_a_model_only_run_fill_one_store_that_a_stored_only_run_reads(tmp_path, monkeypatch):
    from dataclasses import replace

    from benchmarks.experiments.grid.cells import MODEL
    from benchmarks.experiments.mdp_generalization import cli as grid_cli
    from benchmarks.experiments.mdp_generalization.cells import MDP_GENERALIZATION
    from benchmarks.experiments.mdp_generalization.cli import main as grid_main
    from benchmarks.experiments.mdp_generalization.run import run_mdp_generalization

    path, _ = _saved(tmp_path)
    exp = replace(MDP_GENERALIZATION, fixed=(3, 2, 3, 2), rooms=((3, 4, 2),))
    groups = ("fixed", "dark")
    whole = run_mdp_generalization(exp, tmp_path / "whole", 4, checkpoint=str(path), groups=groups)
    shared = tmp_path / "shared"
    first = run_mdp_generalization(exp, shared, 4, checkpoint=str(path), groups=groups, references_only=True)
    assert [r.cell for r in first] == [r.cell for r in whole] and all(MODEL not in r.totals for r in first)
    run_mdp_generalization(exp, shared, 4, checkpoint=str(path), groups=groups, model_only=True, device="cpu")
    final = run_mdp_generalization(exp, shared, 4, checkpoint=str(path), groups=groups, stored_only=True)
    for alone, pieced in zip(whole, final, strict=True):
        assert set(pieced.totals) == set(alone.totals)
        for label, totals in alone.totals.items():
            assert np.array_equal(pieced.totals[label], totals), label
    row = json.loads(next((shared / exp.name / "cells").glob("*/generalist.json")).read_text())
    assert row["device"] == "cpu" and "device" not in row["key"]["agent"]
    with pytest.raises(ValueError, match="exclude each other"):
        run_mdp_generalization(exp, shared, 4, groups=groups, model_only=True, references_only=True)
    # the command line passes the workers, the rows and the device through, and refuses negative workers
    seen: dict = {}
    monkeypatch.setattr(grid_cli, "run_mdp_generalization", lambda *args, **kwargs: seen.update(kwargs))
    grid_main(["--workers", "3", "--references-only", "--device", "auto", "--out", str(tmp_path / "cli")])
    assert seen["executor"].workers == 3 and seen["references_only"] and seen["device"] == "auto"
    with pytest.raises(SystemExit):
        grid_main(["--workers", "-1"])


def test_the_default_deployment_explores_then_exploits_on_random_mdps_and_samples_in_dark_rooms():
    model = tiny_mdp_generalist(dtype=torch.float32)
    room, random = dark_room_spec(3, horizon=4, episodes=2), MDPSpec(num_states=3, num_actions=2, horizon=3)
    for greedy, expected in ((None, {"random": True, "dark_room": False}), (True, None), (False, None)):
        agent = MDPGeneralistAgent.from_model(model, greedy=greedy)
        for spec in (random, room):
            agent.reset(reset_info(spec, MDPBatch(spec, 2, np.random.default_rng(0))))
            want = greedy if expected is None else expected[spec.kind]
            scheduled = greedy is None and spec.kind == "random"
            assert agent.greedy is want and agent.deterministic is (want and not scheduled), (greedy, spec.kind)
            assert agent.scheduled is scheduled and agent.config()["greedy"] is greedy
    # the schedule: temperature 0.3 while the steps left (this one included) are >= 12 S A, then the argmax
    spec = MDPSpec(num_states=2, num_actions=2, horizon=3, episodes=20)  # T = 60, 12 S A = 48
    temperatures = _schedule(MDPGeneralistAgent.from_model(model, seed=0), spec)
    assert temperatures == [0.3] * 13 + [0.0] * 47  # steps left 60..48, then 47..1 (50 S A = 200 > T: no wide phase)
    # with the wide phase inside the run: 0.7 while the steps left are >= 14 S A = 56, 0.3 while >= 48
    agent = MDPGeneralistAgent.from_model(model, seed=0, wide_visits=14)
    assert (agent.wide_temperature, agent.wide_visits, agent.explore_visits) == (0.7, 14.0, 12.0)
    assert _schedule(agent, spec) == [0.7] * 5 + [0.3] * 8 + [0.0] * 47


def _schedule(agent: MDPGeneralistAgent, spec: MDPSpec) -> list[float]:
    """The agent's temperature at every step of a run of 4 instances of ``spec``."""
    env = MDPBatch(spec, 4, np.random.default_rng(1))
    agent.reset(reset_info(spec, env))
    temperatures = []
    for _ in range(spec.total_steps):
        s, h = env.state.copy(), env.h
        a = agent.act_batch(s, h)
        temperatures.append(agent._temperature())
        out = env.step(a)
        agent.update_batch(s, h, a, out["reward"], out["next_state"])
    return temperatures


def test_the_schedule_takes_its_parameters_and_the_deployment_sweep_plays_each_on_the_same_instances(tmp_path):
    from benchmarks.experiments.grid.run import total_regret
    from benchmarks.experiments.mdp_deployment import cells as deployment_cells
    from benchmarks.experiments.mdp_deployment.cli import main as deployment_main
    from benchmarks.experiments.mdp_deployment.run import play_deployments

    path, _ = _saved(tmp_path)
    agent = MDPGeneralistAgent(path, explore_temperature=0.5, explore_visits=0)
    assert (agent.explore_temperature, agent.explore_visits) == (0.5, 0.0)
    assert agent.config() == {
        "name": "mdp_generalist",
        "checkpoint": str(path),
        "greedy": None,
        "explore_temperature": 0.5,
        "explore_visits": 0.0,
    }
    with pytest.raises(ValueError, match="wide_temperature must be a finite number >= 0"):
        MDPGeneralistAgent(path, wide_temperature=-0.1)
    with pytest.raises(ValueError, match="explore_visits must be a finite number >= 0"):
        MDPGeneralistAgent(path, explore_visits=-1)
    # the sweep: every deployment equals a direct rollout of the agent with its keywords, on the same instances
    spec, runs, seed = MDPSpec(num_states=3, num_actions=2, horizon=3, episodes=4), 6, 11
    rows = play_deployments(((3, 2, 3, 4),), runs, seed, str(path))
    assert [r["row"] for r in rows] == ["PSRL", *deployment_cells.DEPLOYMENTS]
    psrl = total_regret(spec, {"name": "psrl"}, runs, seed)
    for row in rows[1:]:
        keywords = deployment_cells.DEPLOYMENTS[row["row"]]
        direct = total_regret(spec, {"name": "mdp_generalist", "checkpoint": str(path), **keywords}, runs, seed)
        assert row["mean"] == pytest.approx(direct.mean()) and row["ratio_psrl"] == pytest.approx(
            direct.mean() / psrl.mean()
        )
        assert row["p99"] == pytest.approx(np.quantile(direct, 0.99))
        assert row["failures"] == pytest.approx(np.mean((direct > 3 * psrl) & (direct > 20)))
    by_name = {r["row"]: r["mean"] for r in rows}
    # temperature 0 for the whole run is the argmax, and the default schedule at T = 12 < 12 S A is too
    assert by_name["schedule (default)"] == pytest.approx(by_name["argmax"])
    assert by_name["0.3 then argmax"] == pytest.approx(by_name["argmax"])
    deployment_main(["--cells", "3,2,3,4", "--runs", "3", "--checkpoint", str(path), "--out", str(tmp_path / "d")])
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["software"] == software_environment()
    assert (
        config["seed"] == deployment_cells.SEED and (tmp_path / "d" / "deployment.csv").read_text().count("\n") == 10
    )  # header, PSRL, 8 deployments
    with pytest.raises(SystemExit):
        deployment_main(["--cells", "3,2,3"])
