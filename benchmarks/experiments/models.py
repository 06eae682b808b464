"""The learned rows' checkpoints: whether one exists, and what its record says (training budget, trained range)."""

from __future__ import annotations

from typing import Any

from icrl_gym.checkpoint import CheckpointKind, CheckpointRecord, checkpoint_files, read_record, resolve_checkpoint


def model_available(checkpoint: str) -> bool:
    """Whether ``checkpoint`` (a path or a shipped name) exists."""
    return checkpoint_files(resolve_checkpoint(checkpoint))[1].exists()


def model_record(checkpoint: str) -> dict[str, Any]:
    """What the grid's ``config.json`` records of a model: its checkpoint, kind, training steps, trained range, seed."""
    record = read_record(resolve_checkpoint(checkpoint))
    training = record.meta.get("training", {})
    return {
        "checkpoint": checkpoint,
        "kind": record.kind.value,
        "steps": training.get("steps"),
        "trained_range": record.meta.get("trained_range"),
        "training_seed": training.get("seed"),
    }


def describe_range(trained_range: dict[str, Any] | None) -> str:
    """A checkpoint record's ``trained_range`` as text, e.g. ``num_arms 2..20, horizon 20..500``."""
    if not trained_range:
        return "the checkpoint records none"
    # a record may also hold per-family ranges (nested dicts: the MDP generalist's); the overall ones are described
    return ", ".join(f"{k} {v[0]:g}..{v[1]:g}" for k, v in trained_range.items() if not isinstance(v, dict))


def training_budget(checkpoint: str) -> dict[str, Any]:
    """Environment steps and wall time that made a shipped model (read from its JSON record).

    Pretrained transformers count the distinct offline trajectories x T collected by the context
    algorithm; meta-RL policies count their online steps; a fine-tuned model adds its online
    steps to its base model's.  ``trained_range`` is the record's (the generalists': the sizes they
    were trained on; ``None`` for a model of one size).
    """
    record = read_record(resolve_checkpoint(checkpoint))
    return {**_budget(record), "trained_range": record.meta.get("trained_range")}


def _budget(record: CheckpointRecord) -> dict[str, Any]:
    """How a model was trained: ``how``, ``env_steps`` (``None``: not recorded), ``minutes`` and ``threads``."""
    meta = record.meta
    horizon = record.env.get("horizon", 0) * record.env.get("episodes", 1)
    training = meta.get("training", {})
    if record.kind in (CheckpointKind.GENERALIST_TRANSFORMER, CheckpointKind.LINEAR_GENERALIST_TRANSFORMER):
        return {  # trained online on sampled sizes; the record keeps optimizer steps, not environment steps
            "how": f"online imitation (DAgger) on sampled sizes, {training['steps']:,} steps",
            "env_steps": None,
            "minutes": training.get("wall_time_s", 0.0) / 60,
            "threads": training.get("threads"),
        }
    if record.kind is CheckpointKind.META_RL_POLICY:
        return {
            "how": f"online {meta['meta_rl']['algo']}",
            "env_steps": training["env_steps"],
            "minutes": training["wall_seconds"] / 60,
            "threads": training.get("threads"),
        }
    budget = {
        "how": "offline pretraining",
        "env_steps": training.get("distinct_trajectories", 0) * horizon,
        "minutes": training.get("wall_seconds", 0.0) / 60,
        "threads": training.get("threads"),
    }
    if "finetune" in meta:
        ft = meta["finetune"]
        cfg = ft["config"]
        budget["how"] = "offline pretraining + online fine-tuning"
        budget["env_steps"] += ft["best"]["iteration"] * cfg["runs_per_iteration"] * horizon
        budget["minutes"] += ft["wall_seconds"] / 60
    return budget
