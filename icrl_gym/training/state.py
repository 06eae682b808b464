"""The resumable state of a training run, written and read as one verified unit.

Pretraining (:mod:`icrl_gym.training.pretrain`), fine-tuning (:mod:`icrl_gym.training.finetune`)
and the generalist trainers (:mod:`icrl_gym.training.generalist`,
:mod:`icrl_gym.training.linear_generalist`) keep their resume state here.  A
state is the model's weights, the optimiser state, the random-number generators (torch, CUDA when
in use, numpy's and Python's global ones), the step, the run's configuration and the trainer's
JSON record (history, wall time, ...).  In the run folder:

- ``checkpoints/step_NNNNNNN.safetensors`` + ``.json``: the weights at step N, an ordinary
  checkpoint (:mod:`icrl_gym.checkpoint`) that every reader of checkpoints accepts;
- ``checkpoints/step_NNNNNNN.state.pt``: the step, the optimiser and the RNG states
  (``torch.save``; read with ``weights_only=True``: loading executes no code);
- ``resume.json``: the manifest, the one file that says which state is current: the step, the
  configuration, the record, and the relative path, size and SHA-256 of every file of the state,
  with the hash of its own content (``content_sha256``, :func:`icrl_gym.utils.fileio.content_sha256`).

:meth:`RunState.save` writes every payload file atomically under its step's name, then replaces
the manifest atomically (the commit), and only then deletes what the new manifest no longer
names.  A process killed at any moment thus leaves the previous committed state intact and loses
at most the steps since it.  :meth:`RunState.load` follows the manifest alone and checks every
file against it; a missing, truncated, altered or mismatched file is a :class:`TrainingStateError`
naming the file and the problem, never a silent mix of two moments of the run.  Paths are stored
relative to the run folder, so a run folder can be moved and resumed from its new place.

A folder that holds weights or other training files but no manifest is refused rather than
overwritten (:meth:`RunState.load`), folders of the layout before the manifest included.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, cast

import numpy as np
import torch

from icrl_gym.checkpoint import (
    RUN_MANIFEST,
    CheckpointError,
    CheckpointKind,
    checkpoint_files,
    read_checkpoint,
    save_checkpoint,
)
from icrl_gym.training.run_lock import LOCK_FILE, RunFolderBusy, RunFolderLock
from icrl_gym.utils.fileio import CONTENT_HASH_FIELD, atomic_write_bytes, content_sha256, json_round_trip

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "LOCK_FILE",
    "MANIFEST",
    "PAYLOAD_DIR",
    "STATE_SUFFIX",
    "FileEntry",
    "RunFolderBusy",
    "RunFolderLock",
    "RunState",
    "TrainingState",
    "TrainingStateError",
    "check_config",
    "rng_state",
    "set_rng_state",
]

FORMAT = "icrl-gym-training-state"
FORMAT_VERSION = 1
MANIFEST = RUN_MANIFEST
"""The manifest of a run folder: the one file that names the current state."""
PAYLOAD_DIR = "checkpoints"
"""Subfolder of the run folder that holds the files of the states (``step_NNNNNNN.*``)."""
STATE_SUFFIX = ".state.pt"
"""Suffix of the optimiser + RNG file beside a step's checkpoint."""
_STEP_FILE = re.compile(r"step_(\d+)\.")


class TrainingStateError(ValueError):
    """A training state that cannot be resumed: a file missing, truncated, corrupt or from another moment."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a committed state, as the manifest records it."""

    path: str
    """Path relative to the run folder (POSIX separators)."""
    sha256: str
    """SHA-256 of the file's bytes (hex)."""
    size: int
    """Size in bytes."""

    def to_dict(self) -> dict[str, Any]:
        """The manifest's form."""
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


def rng_state() -> dict[str, Any]:
    """The state of every global random-number generator a training step may draw from."""
    np_state = cast(tuple, np.random.get_state())  # noqa: NPY002  (the global generator is what is saved)
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": str(np_state[0]),
            "key": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore the generators of :func:`rng_state` (those ``state`` holds; CUDA only when in use)."""
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "numpy" in state:
        s = state["numpy"]
        key = s["key"].numpy().astype(np.uint32)
        legacy = (s["bit_generator"], key, s["pos"], s["has_gauss"], s["cached_gaussian"])
        np.random.set_state(legacy)  # noqa: NPY002  (the global generator is what is restored)
    if "python" in state:
        s = state["python"]
        random.setstate((s["version"], tuple(s["internal"]), s["gauss"]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _differences(old: Any, new: Any, path: str) -> list[tuple[str, Any, Any]]:
    """``(dotted path, old, new)`` for every leaf where two JSON values differ (dicts compared key by key)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [
            diff
            for key in sorted(set(old) | set(new), key=str)
            for diff in _differences(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{path}.{key}" if path else key)
        ]
    return [] if old == new else [(path, old, new)]


def check_config(
    run_dir: str | os.PathLike,
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    ignore: Iterable[str] = (),
    allowed: Iterable[str] = (),
    folder_field: str = "out_dir",
) -> list[str]:
    """Compare the configuration a run was saved with to the one it is resumed with.

    Fields in ``ignore`` (the run folder's own path) are not compared; differences in the
    top-level fields ``allowed`` (e.g. a longer ``steps``) are returned as ``"field: old -> new"``
    lines.  Any other difference raises :class:`TrainingStateError` naming every differing field
    (nested fields by their dotted path) with both values.
    """
    ignore, allowed = set(ignore), set(allowed)
    old = json_round_trip({k: v for k, v in saved.items() if k not in ignore})
    new = json_round_trip({k: v for k, v in current.items() if k not in ignore})
    differing = _differences(old, new, "")
    refused = [(key, old, new) for key, old, new in differing if key.split(".")[0] not in allowed]
    if refused:
        fields = "; ".join(f"{key}: {old!r} in the run, {new!r} now" for key, old, new in refused)
        raise TrainingStateError(
            f"{run_dir} holds a run with another configuration ({fields}); resume it with the run's values "
            f"or use a new {folder_field}"
        )
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in differing]


@dataclass
class TrainingState:
    """A verified state read from a run folder (:meth:`RunState.load`)."""

    step: int
    """Steps done."""
    config: dict[str, Any]
    """The configuration the run was saved with (as JSON)."""
    record: dict[str, Any]
    """The trainer's JSON record (history, wall time, ...)."""
    weights: dict[str, torch.Tensor]
    """The model's state dict (on the CPU)."""
    meta: dict[str, Any]
    """The record of the weights' checkpoint."""
    optimizer: dict[str, Any]
    """The optimiser's state dict (on the CPU; ``load_state_dict`` moves it to the parameters' device)."""
    rng: dict[str, Any]
    """The generators' states (:func:`rng_state`)."""
    source: str
    """Where the state was read from, for the log."""

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Load the weights and the optimiser state (the RNG states: :func:`set_rng_state` where the loop starts)."""
        try:
            model.load_state_dict(self.weights)
            optimizer.load_state_dict(self.optimizer)
        except (RuntimeError, ValueError, KeyError) as err:
            raise TrainingStateError(f"{self.source} does not fit this model or optimiser: {err}") from err


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _torch_load(path: Path, data: bytes) -> Any:
    """``torch.load`` of ``data`` (the bytes of ``path``) with ``weights_only=True``, errors as TrainingStateError."""
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types (UnpicklingError, RuntimeError, EOFError, ...)
        raise TrainingStateError(f"{path} cannot be read (corrupt or truncated): {err}") from err


def _read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    try:
        return read_checkpoint(path)
    except CheckpointError as err:
        raise TrainingStateError(str(err)) from err


class RunState:
    """The resume state of one run folder: :meth:`load` the committed state, :meth:`save` a new one.

    ``keep`` is how many step checkpoints stay in ``checkpoints/`` (the newest; files a manifest
    names always stay); with ``keep_every`` > 0 those of the steps that are multiples of it stay too
    (a learning curve; the manifest does not name them, each is an ordinary checkpoint).
    """

    def __init__(self, run_dir: str | os.PathLike, keep: int = 1, keep_every: int = 0) -> None:
        if keep < 1:
            raise ValueError(f"RunState keep must be >= 1, got {keep}")
        if keep_every < 0:
            raise ValueError(f"RunState keep_every must be >= 0, got {keep_every}")
        self.run_dir = Path(run_dir)
        self.keep = keep
        self.keep_every = keep_every
        self.manifest_path = self.run_dir / MANIFEST
        self.payload_dir = self.run_dir / PAYLOAD_DIR
        self._files: dict[str, FileEntry] = {}  # the committed manifest's files
        self._checkpoints: dict[str, int] = {}  # role -> step of the committed manifest's checkpoints

    # --- reading -------------------------------------------------------------------------------

    def load(self) -> TrainingState | None:
        """The committed state, verified; ``None`` for a new run.

        A folder without a manifest that holds training files is refused (:class:`TrainingStateError`).
        """
        if not self.manifest_path.exists():
            self._refuse_foreign_files()
            return None
        manifest = self._read_manifest()
        state_path = self.run_dir / self._files["state"].path
        data = self._read_verified(self._files["state"])
        weights, meta = _read_checkpoint(self.checkpoint(""))
        for role in self._checkpoints:
            if role:
                _read_checkpoint(self.checkpoint(role))  # every kept checkpoint is whole
        payload = _torch_load(state_path, data)
        if not isinstance(payload, dict) or not {"step", "optimizer", "rng"} <= set(payload):
            raise TrainingStateError(f"{state_path} is not a training state file")
        if payload["step"] != manifest["step"]:
            raise TrainingStateError(
                f"{state_path} holds step {payload['step']} but {self.manifest_path} step {manifest['step']}: "
                "the files do not belong together"
            )
        return TrainingState(
            step=manifest["step"],
            config=manifest["config"],
            record=manifest["record"],
            weights=weights,
            meta=meta,
            optimizer=payload["optimizer"],
            rng=payload["rng"],
            source=f"{self.manifest_path} (step {manifest['step']})",
        )

    def _read_manifest(self) -> dict[str, Any]:
        path = self.manifest_path
        try:
            manifest = json.loads(path.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise TrainingStateError(f"{path} is corrupt or truncated: {err}") from err
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise TrainingStateError(f"{path} is not an icrl-gym training state manifest")
        if manifest.get(CONTENT_HASH_FIELD) != content_sha256(manifest):
            raise TrainingStateError(f"{path} is corrupt: its content does not match its own SHA-256")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise TrainingStateError(
                f"{path} has format version {manifest.get('format_version')}, need {FORMAT_VERSION}"
            )
        try:
            files = {role: FileEntry(**entry) for role, entry in manifest["files"].items()}
            checkpoints = {role: int(step) for role, step in manifest["checkpoints"].items()}
            _ = manifest["step"], manifest["config"], manifest["record"], files["state"]
        except (KeyError, TypeError, ValueError) as err:
            raise TrainingStateError(f"{path} lacks a field of a training state manifest: {err!r}") from err
        for entry in files.values():
            relative = PurePosixPath(entry.path)
            if relative.is_absolute() or ".." in relative.parts:
                raise TrainingStateError(f"{path} names {entry.path}, outside the run folder")
        self._files, self._checkpoints = files, checkpoints
        return manifest

    def _read_verified(self, entry: FileEntry) -> bytes:
        path = self.run_dir / entry.path
        if not path.exists():
            raise TrainingStateError(f"{path} is missing ({self.manifest_path} names it as part of the current state)")
        data = path.read_bytes()
        if len(data) != entry.size:
            raise TrainingStateError(
                f"{path} is truncated or altered: {len(data)} bytes, {self.manifest_path} records {entry.size}"
            )
        if _sha256(data) != entry.sha256:
            raise TrainingStateError(
                f"{path} is corrupt: its SHA-256 differs from the one {self.manifest_path} records"
            )
        return data

    def _stem(self, role: str) -> Path:
        """The stem of the checkpoint ``role`` ('' the current weights) after checking both its files."""
        for kind in ("weights", "record"):
            self._read_verified(self._files[f"{role}.{kind}" if role else kind])
        return self.run_dir / self._files[f"{role}.record" if role else "record"].path[: -len(".json")]

    @property
    def committed(self) -> bool:
        """Whether a manifest was read or written."""
        return bool(self._checkpoints)

    def checkpoint(self, role: str = "") -> Path:
        """The stem of the committed checkpoint ``role`` (``''``: the current weights), its files verified."""
        if role not in self._checkpoints:
            raise KeyError(f"{self.manifest_path} keeps no checkpoint {role!r}; it keeps {sorted(self._checkpoints)}")
        return self._stem(role)

    def _refuse_foreign_files(self) -> None:
        found = sorted(p.name for p in self.run_dir.glob("*.safetensors"))
        if self.payload_dir.is_dir():  # the files of an unfinished first commit (step 0) are no run yet
            found += sorted(
                f"{PAYLOAD_DIR}/{p.name}"
                for p in self.payload_dir.iterdir()
                if (m := _STEP_FILE.match(p.name)) is not None and int(m.group(1)) > 0
            )
        if found:
            shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
            raise TrainingStateError(
                f"{self.run_dir} holds training files ({shown}) but no training-state manifest {MANIFEST}: "
                "it cannot be resumed and is not overwritten (a run of another version, a damaged run or other "
                "files); move them away or use another folder"
            )

    # --- writing -------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        config: dict[str, Any],
        record: dict[str, Any],
        meta: dict[str, Any],
        model_config: dict[str, Any] | None = None,
        kind: CheckpointKind | None = None,
        also_keep: Mapping[str, int] | None = None,
    ) -> Path:
        """Commit the state at ``step``: the payload files, then the manifest; returns the checkpoint's stem.

        ``meta``, ``model_config`` and ``kind`` go to :func:`save_checkpoint`.  ``also_keep`` names
        earlier checkpoints the manifest keeps (role -> step, e.g. ``{"best": 75}``): each must be
        the step being saved or one the committed manifest keeps.  Files no longer named are
        deleted after the commit.
        """
        self.payload_dir.mkdir(parents=True, exist_ok=True)
        stem = save_checkpoint(self.payload_dir / f"step_{step:07d}", model, meta, config=model_config, kind=kind)
        buffer = io.BytesIO()
        torch.save({"step": step, "optimizer": optimizer.state_dict(), "rng": rng_state()}, buffer)
        state_path = stem.with_name(stem.name + STATE_SUFFIX)
        atomic_write_bytes(state_path, buffer.getvalue())
        weights_path, record_path = checkpoint_files(stem)
        files = {
            "weights": self._entry(weights_path, weights_path.read_bytes()),
            "record": self._entry(record_path, record_path.read_bytes()),
            "state": self._entry(state_path, buffer.getvalue()),
        }
        checkpoints = {"": step}
        for role, at in (also_keep or {}).items():
            if not role or "." in role:
                raise ValueError(f"checkpoint role {role!r} must be a non-empty name without dots")
            if at == step:
                source = {"weights": files["weights"], "record": files["record"]}
            elif self._checkpoints.get(role) == at or self._checkpoints.get("") == at:
                prefix = f"{role}." if self._checkpoints.get(role) == at else ""
                source = {kind: self._files[prefix + kind] for kind in ("weights", "record")}
            else:
                raise ValueError(f"no committed checkpoint of step {at} to keep as {role!r}")
            files.update({f"{role}.{kind}": entry for kind, entry in source.items()})
            checkpoints[role] = at
        body = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "step": step,
            "config": config,
            "record": record,
            "files": {role: entry.to_dict() for role, entry in files.items()},
            "checkpoints": checkpoints,
        }
        body = json_round_trip(body)  # hash what a reader will parse (tuples become lists)
        body[CONTENT_HASH_FIELD] = content_sha256(body)
        atomic_write_bytes(self.manifest_path, json.dumps(body, indent=1, sort_keys=True).encode())
        self._files, self._checkpoints = files, checkpoints
        self._prune()
        return stem

    def _entry(self, path: Path, data: bytes) -> FileEntry:
        return FileEntry(path.relative_to(self.run_dir).as_posix(), _sha256(data), len(data))

    def _prune(self) -> None:
        """Delete the files the committed manifest does not name (but the newest ``keep``, the ``keep_every`` ones)."""
        named = {PurePosixPath(entry.path).name for entry in self._files.values()}
        current = self._checkpoints[""]
        # whole checkpoints (the record is written last) up to the committed step; the newest keep stay
        steps = sorted(int(m.group(1)) for p in self.payload_dir.glob("step_*.json") if (m := _STEP_FILE.match(p.name)))
        kept = {s for s in steps if s <= current}
        kept = set(sorted(kept)[-self.keep :]) | {s for s in kept if self.keep_every and s % self.keep_every == 0}
        for path in self.payload_dir.iterdir():
            m = _STEP_FILE.match(path.name)
            stale = path.name.startswith(".step_") and path.name.endswith(".tmp")  # a killed writer's temporary file
            if stale or (m is not None and path.name not in named and int(m.group(1)) not in kept):
                path.unlink(missing_ok=True)
        for path in self.run_dir.glob(f".{MANIFEST}.*.tmp"):
            path.unlink(missing_ok=True)

    def publish(self, stem: str | os.PathLike, role: str = "") -> Path:
        """Copy the committed checkpoint ``role`` to ``<stem>.safetensors`` + ``<stem>.json`` (each atomically).

        The copy is for readers of a fixed name (pretraining's ``checkpoint``); weights are written
        first, the record last, as :func:`save_checkpoint` does.
        """
        source = self.checkpoint(role)
        for src, dst in zip(checkpoint_files(source), checkpoint_files(Path(stem)), strict=True):
            for stale in dst.parent.glob(f".{dst.name}.*.tmp"):  # left by a process killed while writing
                stale.unlink(missing_ok=True)
            atomic_write_bytes(dst, src.read_bytes())
        return Path(stem)
