"""Collecting trajectories (pretraining data) on the executor: one task per common-random-numbers batch, joined.

:func:`icrl_gym.data.collect.collect` plays N runs in batches of B; batch i draws its instances,
noise and the algorithms' randomness from generators of ``[seed, i]`` alone
(:mod:`icrl_gym.data.crn`).  So each batch is an independent task (a slice: ``first_batch=i``, the
batch played alone), and the slices joined in batch order are, array for array, the data set one
process collects: the same bytes once saved (:func:`~icrl_gym.data.trajectories.save_trajectories`),
with the same record (``num_trajectories`` N, ``seed``, ``batch_size`` B).  The slices are the
existing batches with their existing seeds, so a data set does not change when it is collected on
several workers.  With a ``store`` folder each finished slice is written there at once
(``slice-<i>.npz``, with what made it), a stopped collection resumes from its finished slices, and
the folder is emptied once the data set is joined.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.executor.memory import EXPERT_STEP_BYTES
from benchmarks.executor.tasks import Executor, run_sweep, steps_of
from icrl_gym.data.collect import collect
from icrl_gym.data.labels import AgentSpec, Labelling
from icrl_gym.data.mdp_rollout import MDPRecorder, MDPRollouts
from icrl_gym.data.trajectories import BanditRecorder, TrajectoryData
from icrl_gym.envs import BanditSpec, MDPSpec
from icrl_gym.utils.fileio import atomic_write_bytes

Arrays = dict[str, Any]
"""A slice's result: its data set's arrays by field name (``None`` where the labelling stores none) and ``meta``."""


@dataclass(frozen=True)
class CollectionSlice:
    """Batch ``index`` (``runs`` runs) of a collection of batches of ``batch_size`` under ``seed``."""

    spec: BanditSpec | MDPSpec
    context: AgentSpec
    labelling: Labelling
    seed: int
    batch_size: int
    index: int
    runs: int
    approx_dpt_lam: float = 1.0

    @property
    def name(self) -> str:
        """``collection batch i``."""
        return f"collection batch {self.index}"

    @property
    def cost(self) -> float:
        """Runs of the batch (every batch has the same steps)."""
        return float(self.runs)

    @property
    def setup(self) -> tuple[str, float] | None:
        """None: a batch needs nothing another one prepares."""
        return None

    @property
    def memory(self) -> float:
        """Runs x steps x an expert's bytes per run-step (every batch but the last is alike)."""
        return float(self.runs * steps_of(self.spec) * EXPERT_STEP_BYTES)

    @property
    def key(self) -> dict[str, Any]:
        """What a stored slice must match: the prior, the algorithms, the labelling, seed, batch size, batch."""
        return json.loads(
            json.dumps(
                {
                    "env": self.spec.to_dict(),
                    "context": self.context,
                    "labelling": dataclasses.asdict(self.labelling),
                    "seed": self.seed,
                    "batch_size": self.batch_size,
                    "batch": self.index,
                    "runs": self.runs,
                    "approx_dpt_lam": self.approx_dpt_lam,
                },
                default=str,
            )
        )

    def run(self) -> Arrays:
        """The batch's data set, as arrays (the batch played alone: ``first_batch`` = its index)."""
        data = collect(
            self.spec,
            self.context,
            self.runs,
            self.labelling,
            seed=self.seed,
            batch_size=self.batch_size,
            first_batch=self.index,
            approx_dpt_lam=self.approx_dpt_lam,
        )
        return {f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.name != "spec"}


class SliceStore:
    """Finished slices of one collection in ``folder``: ``slice-<i>.npz`` with the slice's key and record."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, task: CollectionSlice) -> Path:
        return self.folder / f"slice-{task.index:05d}.npz"

    def load(self, task: CollectionSlice) -> Arrays | None:
        """The stored slice if it was made with the task's key (else ``None``)."""
        try:
            with np.load(self._path(task), allow_pickle=False) as stored:
                head = json.loads(bytes(stored["__head__"]).decode())
                if head["key"] != task.key:
                    return None
                arrays: Arrays = {name: None for name in head["none"]}
                arrays.update({name: stored[name] for name in stored.files if name != "__head__"})
                arrays["meta"] = head["meta"]
                return arrays
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing, partial or foreign: collect the batch again

    def save(self, task: CollectionSlice, arrays: Arrays) -> None:
        """Write the slice's arrays, key and record atomically."""
        present = {k: v for k, v in arrays.items() if k != "meta" and v is not None}
        none = [k for k, v in arrays.items() if k != "meta" and v is None]
        head = json.dumps({"key": task.key, "meta": arrays["meta"], "none": none}, default=str).encode()
        buffer = io.BytesIO()
        np.savez(buffer, __head__=np.frombuffer(head, dtype=np.uint8), **present)
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self._path(task), buffer.getvalue())


def collect_on_executor(
    spec: BanditSpec | MDPSpec,
    context: AgentSpec,
    num_runs: int,
    labelling: Labelling | None = None,
    executor: Executor | None = None,
    store: Path | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    approx_dpt_lam: float = 1.0,
) -> TrajectoryData | MDPRollouts:
    """What :func:`~icrl_gym.data.collect.collect` returns, its batches played as tasks of ``executor`` (module doc).

    ``context`` (and the labelling's algorithms) must be specifications (a name or a dict), which a
    worker builds; ``batch_size`` defaults to the recorder's (10,000 runs for bandits, 1,000 for MDPs).
    """
    from benchmarks.executor.local import InlineExecutor

    labelling = labelling or Labelling()
    mdp = isinstance(spec, MDPSpec)
    batch = batch_size or (MDPRecorder.default_batch_size if mdp else BanditRecorder.default_batch_size)
    tasks = [
        CollectionSlice(spec, context, labelling, seed, batch, i, min(batch, num_runs - start), approx_dpt_lam)
        for i, start in enumerate(range(0, num_runs, batch))
    ]
    slices = run_sweep(
        executor or InlineExecutor(), tasks, None if store is None else SliceStore(store), desc="collect"
    )
    joined: dict[str, Any] = {}
    for name in slices[0]:
        if name == "meta":
            meta = {k: v for k, v in slices[0]["meta"].items() if k != "first_batch"}
            joined["meta"] = {**meta, "num_trajectories": num_runs}
        else:
            parts = [s[name] for s in slices]
            joined[name] = None if parts[0] is None else np.concatenate(parts, axis=0)
    data: TrajectoryData | MDPRollouts = (
        MDPRollouts(**joined, spec=spec) if isinstance(spec, MDPSpec) else TrajectoryData(**joined)
    )
    if store is not None:
        shutil.rmtree(store, ignore_errors=True)  # joined: the slices are no longer needed
    return data
