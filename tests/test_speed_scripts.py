"""The speed scripts share one command-line style and one timing helper."""

import importlib

import pytest
import torch

from benchmarks.speed import timing

SCRIPTS = (
    "collection_throughput",
    "collection_scaling",
    "executor_scaling",
    "generalist_throughput",
    "mdp_training_speed",
    "rollout_throughput",
    "thread_contention",
    "training_speed",
)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_speed_script_documents_its_fields_and_refuses_bad_values(name, capsys):
    module = importlib.import_module(f"benchmarks.speed.{name}")
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"])
    assert stop.value.code == 0
    shown = capsys.readouterr().out
    assert f"python -m benchmarks.speed.{name}" in shown and "--set KEY=VALUE" in shown
    assert "Config fields (in CONFIG.json" in shown
    with pytest.raises(SystemExit) as stop:
        module.main(["--set", "no_such_field=1"])
    assert stop.value.code == 2 and "unknown" in capsys.readouterr().err


def test_mdp_training_speed_runs_and_refuses_a_zero_batch(capsys):
    from benchmarks.speed import mdp_training_speed

    result = mdp_training_speed.main(["--set", "batch=1", "repeats=1"])
    assert result["batch"] == 1 and len(result["seconds_per_step"]) == 3
    assert all(s > 0 for s in result["seconds_per_step"].values())
    with pytest.raises(SystemExit):
        mdp_training_speed.main(["--set", "batch=0"])
    assert "MDPTrainingSpeedConfig.batch must be an integer >= 1, got 0" in capsys.readouterr().err


def test_train_step_with_an_optimizer_moves_the_weights_and_without_one_leaves_no_gradient():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4))

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x, a, r):
            return (self.inner(x),)

    wrapped = Wrapped()
    data = (torch.randn(2, 5, 3), torch.zeros(2, 5), torch.zeros(2, 5), torch.randint(0, 4, (2, 5)))
    before = [p.detach().clone() for p in wrapped.parameters()]
    timing.train_step(wrapped, data)
    assert all(p.grad is None for p in wrapped.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, wrapped.parameters(), strict=True))
    timing.train_step(wrapped, data, torch.optim.SGD(wrapped.parameters(), lr=0.1))
    assert not all(torch.equal(a, b) for a, b in zip(before, wrapped.parameters(), strict=True))


def test_interleaved_times_every_task_each_round_after_a_warm_up():
    calls = []
    times = timing.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2)
    assert calls == ["a", "b"] * 3 and {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2}


def test_generalist_throughput_times_every_pair_mdp_included(capsys):
    from benchmarks.speed import generalist_throughput

    rows = generalist_throughput.main(["--set", "instances=2", "repeats=1"])
    mdp = [r for r in rows if r["setting"].startswith("tabular MDP")]
    assert [r["checkpoint"] for r in mdp] == ["tabular-mdp-generalist", "tabular-mdp-dpt-psrl-uniform"]
    # a run of the MDP pair has K H = 200 steps: the rate is runs x steps / seconds
    assert all(r["env_steps_per_s"] == pytest.approx(2 * 200 / r["seconds"]) for r in mdp)
    assert "| tabular MDP S=5, A=3, H=10, K=20 | generalist |" in capsys.readouterr().out


def test_generalist_throughput_does_not_time_a_pair_without_its_generalist(capsys, monkeypatch):
    from benchmarks.speed import generalist_throughput

    timed = []
    monkeypatch.setattr(generalist_throughput, "total_regret", lambda spec, agent, *a, **k: timed.append(agent))
    rows = generalist_throughput.main(["--set", "instances=2", "repeats=1", "linear=none", "mdp=none"])
    assert {a["checkpoint"] for a in timed} == {"bernoulli-generalist", "bernoulli-ad-ucb"}
    linear = {r["model"]: r for r in rows if r["setting"].startswith("linear")}
    assert linear["generalist"]["missing"] and not linear["paper model (linear-bandit-ad-linucb)"]["missing"]
    out = capsys.readouterr().out
    assert "missing: no checkpoint 'none'" in out and "| paper model (linear-bandit-ad-linucb) | not timed" in out


def test_executor_scaling_compares_one_worker_with_the_count_or_a_curve_of_powers_of_two():
    from benchmarks.speed.executor_scaling import ExecutorScalingConfig, worker_counts

    assert worker_counts(ExecutorScalingConfig(workers=16)) == (1, 16)
    assert worker_counts(ExecutorScalingConfig(workers=16, curve=True)) == (1, 2, 4, 8, 16)
    assert worker_counts(ExecutorScalingConfig(workers=6, curve=True)) == (1, 2, 4, 6)
    assert worker_counts(ExecutorScalingConfig(workers=2, curve=True)) == (1, 2)
