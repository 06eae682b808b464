"""The executor's memory budget: the heaviest tasks never play at the same time, and the estimates it uses."""

import time
from dataclasses import dataclass

import pytest
import torch

from benchmarks.executor.local import ProcessExecutor
from benchmarks.executor.memory import MIB, MIN_SLACK, MemoryBudget, kv_bytes_per_step, row_memory
from benchmarks.experiments.suite.cells import EXPERIMENTS
from icrl_gym.checkpoint import load_checkpoint, resolve_checkpoint
from icrl_gym.models.policy import EnvInfo


@dataclass(frozen=True)
class Sleep:
    """A task that sleeps and returns when it ran (CLOCK_MONOTONIC is one clock for every process)."""

    name: str
    memory: float
    seconds: float
    cost: float = 1.0
    setup: None = None

    def run(self) -> tuple[float, float]:
        start = time.monotonic()
        time.sleep(self.seconds)
        return start, time.monotonic()


def play(tasks: list[Sleep], budget: float | None) -> dict[str, tuple[float, float]]:
    """Each task's (start, end) on two worker processes."""
    spans: dict[str, tuple[float, float]] = {}
    with ProcessExecutor(2, memory_budget=budget) as executor:
        executor.run(tasks, lambda i, span: spans.__setitem__(tasks[i].name, span))
    return spans


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_the_heaviest_tasks_never_play_together_and_light_ones_fill_the_other_worker():
    heavy = [Sleep(f"heavy {i}", 200 * MIB, 0.4, cost=10.0) for i in range(3)]
    light = [Sleep(f"light {i}", 5 * MIB, 0.1) for i in range(6)]
    spans = play(heavy + light, None)
    assert len(spans) == 9
    for i, a in enumerate(heavy):
        for b in heavy[i + 1 :]:
            assert not overlap(spans[a.name], spans[b.name]), (a.name, b.name)
    assert any(overlap(spans[h.name], spans[x.name]) for h in heavy for x in light)
    # without a budget the two workers take the heavy tasks first, together (the check above can fail)
    unbounded = play(heavy + light, float("inf"))
    assert overlap(unbounded["heavy 0"], unbounded["heavy 1"])


def test_the_budget_admits_what_fits_and_always_one_task():
    budget = MemoryBudget([100.0, 30.0, 200.0, 10.0], workers=2)
    assert budget.budget == pytest.approx(200.0 + MIN_SLACK)  # the slack exceeds 1.25x here
    assert budget.admits(2)
    budget.start(2)
    assert budget.next_of([0, 1, 3]) is not None  # 200 + 100 bytes fit in the 64 MiB slack
    tight = MemoryBudget([100.0, 30.0, 200.0, 10.0], workers=2, budget=220.0)
    tight.start(2)
    assert tight.next_of([0, 1, 3]) == 3  # 200 + 100 and 200 + 30 exceed 220; 200 + 10 fits
    tight.finish(2)
    assert tight.admits(0) and tight.next_of([0, 1, 3]) == 0
    over = MemoryBudget([500.0], workers=2, budget=100.0)
    assert over.admits(0)  # alone, a task over the budget still plays
    equal = MemoryBudget([300 * MIB] * 6, workers=2)  # a grid's slices, a collection's batches
    assert equal.budget == 600 * MIB
    equal.start(0)
    assert equal.admits(1)  # tasks of the typical size fill every worker


def test_the_budget_grows_by_a_quarter_of_the_largest_task_per_worker():
    heavy = [300 * MIB, 300 * MIB, 250 * MIB] + [10 * MIB] * 20
    two = MemoryBudget(heavy, workers=2)
    assert two.budget == pytest.approx(1.25 * 300 * MIB)
    two.start(0)
    assert two.next_of([1, 2, 3]) == 3  # on two workers the heavy tasks never play together
    sixteen = MemoryBudget(heavy, workers=16)
    assert sixteen.budget == pytest.approx((1 + 0.25 * 15) * 300 * MIB)
    for i in (0, 1, 2):  # 850 MiB of heavy tasks within 1425 MiB: all three play at once
        assert sixteen.admits(i)
        sixteen.start(i)


def test_equal_heavy_tasks_play_on_every_worker():
    spans = play([Sleep(f"slice {i}", 300 * MIB, 0.3) for i in range(4)], None)
    assert overlap(spans["slice 0"], spans["slice 1"]) or overlap(spans["slice 0"], spans["slice 2"])


@pytest.mark.parametrize("checkpoint", ["linear-bandit-ad-linucb", "bernoulli-ad-ucb", "tabular-mdp-dpt-psrl-uniform"])
def test_the_key_value_estimate_is_the_cache_the_model_allocates(checkpoint):
    """kv_bytes_per_step x steps equals the model's own cache per run (64 runs: whole lanes of the kernel's layout)."""
    model, meta = load_checkpoint(resolve_checkpoint(checkpoint))
    env = meta["env"]
    steps = env["horizon"] * env.get("episodes", 1)
    fields = ("num_actions", "horizon", "dim", "num_states", "episodes")
    info = EnvInfo(**{name: env[name] for name in fields if name in env})
    cache = model.new_cache(64, info, torch.device("cpu"))
    allocated = sum(t.numel() * t.element_size() for t in [*cache.k, *cache.v])
    assert kv_bytes_per_step(checkpoint) * steps * 64 == pytest.approx(allocated, rel=0.05)


def test_the_suite_estimates_rank_the_rows_as_measured():
    """The linear AD transformer rows are the heaviest of the default suite, then Gittins' and the Bernoulli ones."""
    exp = EXPERIMENTS["linear-ad-linucb"]
    spec = exp.spec
    ad = row_memory(spec, {"name": "transformer", "checkpoint": "linear-bandit-ad-linucb"}, 500, spec.horizon)
    expert = row_memory(spec, {"name": "linucb"}, 500, spec.horizon)
    assert 200 * MIB < ad < 300 * MIB  # measured 249 MiB above a worker's base
    assert expert < 16 * MIB  # measured 7-10 MiB
