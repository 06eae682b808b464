"""Checkpoints of the in-context transformer: safetensors weights + a JSON record, written atomically.

A checkpoint ``<stem>`` is two files: ``<stem>.safetensors`` (tensors only: loading executes no
code) and ``<stem>.json``, which records the model configuration, the environment prior, the
pretraining configuration (context algorithm, labels, data size, seed), the training state
(steps, wall time, final validation loss, the exact command) and the SHA-256 of the weights
file, so a truncated, corrupt or mismatched pair is detected on load.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.fileio import atomic_write_bytes
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig

MODEL_CLASSES = {
    "BanditTransformer": (BanditTransformer, TransformerConfig),
    "MDPTransformer": (MDPTransformer, MDPTransformerConfig),
}

FORMAT = "icrl-gym-checkpoint"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, truncated or made for another environment."""


def _stem(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".json", ".safetensors") else path


def checkpoint_files(path: str | os.PathLike) -> tuple[Path, Path]:
    """The weights and record files of a checkpoint (names may contain dots, e.g. ``alpha0.5``)."""
    stem = str(_stem(path))
    return Path(stem + ".safetensors"), Path(stem + ".json")


def save_checkpoint(
    path: str | os.PathLike, model: torch.nn.Module, meta: dict[str, Any], config: dict[str, Any] | None = None
) -> Path:
    """Save ``model`` and ``meta`` as ``<stem>.safetensors`` + ``<stem>.json``; returns the stem.

    ``config`` is the model's configuration record (default: ``model.config.to_dict()``).
    """
    stem = _stem(path)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    blob = save_safetensors(tensors)
    record = {
        **meta,
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model.config.to_dict() if config is None else config,
        "model_class": type(model).__name__,
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
    }
    # Weights first, record last: a record always describes weights that are fully on disk.
    weights, record_path = checkpoint_files(stem)
    atomic_write_bytes(weights, blob)
    atomic_write_bytes(record_path, json.dumps(record, indent=2, sort_keys=True).encode())
    return stem


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read the weights and the record of a checkpoint, checking the files belong together."""
    weights, record_path = checkpoint_files(path)
    for p in (weights, record_path):
        if not p.exists():
            raise CheckpointError(f"checkpoint file {p} does not exist")
    try:
        meta = json.loads(record_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{record_path} is corrupt or truncated: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{record_path} is not an icrl-gym checkpoint record")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{record_path} has format version {meta.get('format_version')}, need {FORMAT_VERSION}")
    blob = weights.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("weights_sha256"):
        raise CheckpointError(f"{weights} does not match its record {record_path}: the file is corrupt or truncated")
    try:
        state = load_safetensors(blob)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{weights} is corrupt: {err}") from err
    return state, meta


def load_checkpoint(
    path: str | os.PathLike, device: torch.device | str = "cpu", expect: BanditSpec | None = None
) -> tuple[BanditTransformer, dict[str, Any]]:
    """Build the model of a checkpoint and load its weights; check the environment if given."""
    state, meta = read_checkpoint(path)
    if expect is not None:
        check_compatible(meta, expect, name=str(_stem(path)))
    try:
        model_cls, config_cls = MODEL_CLASSES[meta.get("model_class", "BanditTransformer")]
        model = model_cls(config_cls.from_dict(meta["model"]))
        model.load_state_dict(state, strict=True)
    except (KeyError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {_stem(path)} does not fit its model configuration: {err}") from err
    return model.to(device).eval(), meta


def check_compatible(meta: dict[str, Any], spec: BanditSpec, name: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` when a checkpoint cannot run on ``spec``.

    d, A and the kind of arms must equal the training prior's; the horizon may exceed the
    training T (an out-of-distribution use) up to the model's capacity ``meta["model"]["horizon"]``.
    """
    trained = meta.get("env", {})
    for key in ("dim", "num_actions", "arms"):
        if trained.get(key) != getattr(spec, key):
            raise CheckpointError(
                f"{name} was trained for {key}={trained.get(key)!r} but the environment has "
                f"{key}={getattr(spec, key)!r}"
            )
    capacity = meta.get("model", {}).get("horizon", trained.get("horizon"))
    if spec.horizon > capacity:
        raise CheckpointError(
            f"{name} was built for horizon={capacity} steps at most (trained with T={trained.get('horizon')}) "
            f"but the environment has horizon={spec.horizon}"
        )
