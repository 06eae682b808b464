"""How much memory a task holds while it plays, roughly, and which tasks may play at the same time.

A worker's memory beyond what it shares with the others is mostly what its task allocates: a learned
row's key/value cache (all its runs at once), a Gittins row's table while it is built.  Two such
tasks on two workers hold both, so a sweep on N workers would peak at the sum of the N largest
tasks, where one worker peaks at the largest.  :class:`MemoryBudget` keeps the estimates of the
tasks in flight within a budget, by default the largest task's plus :data:`BUDGET_PER_WORKER` of it for
every worker beyond the first (and at least :data:`MIN_SLACK` above it): on two workers (1.25x the
largest) the heaviest tasks play beside light ones, never beside each other, and the peak of the
sweep stays close to one worker's whatever the order in which the workers free up; on more workers
the heavy tasks play several at a time, the peak growing by a quarter of the largest task per
worker.  (A budget fixed at 1.25x whatever the workers held a 16-core machine's default suite to
0.5-0.6x the serial wall time: its heavy rows played one after another.)  The budget never holds
back tasks of the typical size: it is at least the workers times the median estimate, so a sweep of
equal tasks (a grid's slices, a collection's batches) plays on every worker.  A task over the
budget on its own still plays, alone.

The estimates need no torch (the driver does not import it): they are the allocations the agents
make, from the checkpoint record's sizes, and per run-step figures measured on the default suite
(peak resident memory above a fresh worker's, one task per forked process, at 500 runs):

| row | measured | estimate |
|---|---|---|
| linear AD transformer (4 layers, width 64, T = 200) | 249 MiB | 244 MiB |
| Bernoulli transformers (4 layers, width 32, T = 200) | 140-141 MiB | 146 MiB |
| Gittins, T = 200 (the table's build) | 181 MiB | 170 MiB |
| generalists | 50-76 MiB | 37-73 MiB |
| meta-RL (PPO, RL2) | 39-53 MiB | 73 MiB |
| experts | 7-10 MiB | 5-9 MiB |
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from icrl_gym.checkpoint import read_record, resolve_checkpoint
from icrl_gym.envs import BanditSpec, MDPSpec
from icrl_gym.estimators.gittins import gittins_build_bytes

MIB = 2**20

KV_ITEM_BYTES = 4
"""float32 keys and values."""

LEARNED_STEP_BYTES = 512
"""A learned row's memory per run-step besides its key/value cache (its observations, logits and curves)."""

MODEL_STEP_BYTES = 768
"""A learned row without a key/value cache of the transformer's kind (a generalist, a meta-RL policy): per run-step."""

EXPERT_STEP_BYTES = 96
"""An expert row's memory per run-step (its statistics and the curves)."""

BUDGET_PER_WORKER = 0.25
"""The default budget of the tasks in flight grows by this multiple of the largest task per worker beyond one."""

MIN_SLACK = 64 * MIB
"""The budget is at least this much above the largest task: tasks of a few MiB play on every worker."""


@functools.lru_cache(maxsize=64)
def kv_bytes_per_step(checkpoint: str) -> int:
    """Key/value cache bytes per run and environment step of a transformer checkpoint (its record, no weights).

    The cache holds 2 n_layer n_embd floats per token: one token per step in the "compact" layout,
    two in the paper's, and (2H + 1) / H (taken as 2) for the MDP transformer.
    """
    record = read_record(resolve_checkpoint(checkpoint))
    model = record.meta.get("model", {})
    tokens = 2 if model.get("layout") == "paper" or "episodes" in model else 1
    return 2 * int(model.get("n_layer", 4)) * int(model.get("n_embd", 64)) * KV_ITEM_BYTES * tokens


def row_memory(env: BanditSpec | MDPSpec, agent: dict[str, Any], runs: int, steps: int) -> float:
    """Estimated peak memory (bytes) of one agent row of ``runs`` runs of ``steps`` steps, beyond a worker's base."""
    name = agent["name"]
    if name == "gittins" and isinstance(env, BanditSpec):
        return float(gittins_build_bytes(agent.get("horizon") or env.horizon))
    if name in ("transformer", "mdp_transformer") and "checkpoint" in agent:
        return float(runs * steps * (kv_bytes_per_step(str(agent["checkpoint"])) + LEARNED_STEP_BYTES))
    per_step = MODEL_STEP_BYTES if "checkpoint" in agent else EXPERT_STEP_BYTES
    return float(runs * steps * per_step)


class MemoryBudget:
    """Admits a task when the estimates of the tasks in flight, with it, stay within ``budget`` bytes.

    ``budget`` None: the largest of ``1 + BUDGET_PER_WORKER (workers - 1)`` times the largest estimate
    among ``memory`` (:data:`BUDGET_PER_WORKER`), that estimate plus :data:`MIN_SLACK`, and ``workers``
    times the median estimate.  A task is
    always admitted when nothing is in flight.
    """

    def __init__(self, memory: list[float], workers: int, budget: float | None = None) -> None:
        self.memory = memory
        largest = max(memory, default=0.0)
        typical = workers * float(np.median(memory)) if memory else 0.0
        factor = 1.0 + BUDGET_PER_WORKER * (workers - 1)
        self.budget = budget if budget is not None else max(factor * largest, largest + MIN_SLACK, typical)
        self.in_flight: set[int] = set()

    def admits(self, i: int) -> bool:
        """Whether task ``i`` may start now."""
        held = sum(self.memory[j] for j in self.in_flight)
        return not self.in_flight or held + self.memory[i] <= self.budget

    def start(self, i: int) -> None:
        """Task ``i`` started."""
        self.in_flight.add(i)

    def finish(self, i: int) -> None:
        """Task ``i`` finished (or was lost with its worker)."""
        self.in_flight.discard(i)

    def next_of(self, todo: list[int]) -> int | None:
        """The first task of ``todo`` (in submission order) that may start now, or None."""
        return next((i for i in todo if self.admits(i)), None)
