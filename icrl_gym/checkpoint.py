"""Checkpoints of the in-context transformer: safetensors weights + a JSON record, written atomically.

A checkpoint ``<stem>`` is two files: ``<stem>.safetensors`` (tensors only: loading executes no
code) and ``<stem>.json``, which records the model configuration, the environment prior, the
pretraining configuration (context algorithm, labels, data size, seed), the training state
(steps, wall time, final validation loss, the exact command), the SHA-256 of the weights
file (``weights_sha256``) and the SHA-256 of the record itself (``content_sha256``,
:func:`icrl_gym.utils.fileio.content_sha256`: the canonical JSON of the whole record,
``weights_sha256`` included, its own field left out).  A truncated, corrupt or mismatched pair and an
edited record are detected on load (:class:`CheckpointError`).  Its ``kind``
(:class:`CheckpointKind`) says what the weights are; :class:`CheckpointRecord` is the typed view
every consumer reads, and :func:`checkpoint_kind` maps records written before ``kind`` existed.

The models shipped with the package live in :data:`PRETRAINED_DIR` and load by name
(:func:`resolve_checkpoint`, :func:`pretrained_names`).

A checkpoint may also be a folder in the Hugging Face Hub mixin layout, ``config.json`` (the same
record) + ``model.safetensors``: every reader here accepts the folder in place of the stem, and
:func:`icrl_gym.hub.export_hf_folder` writes one, with its model card as ``README.md``.
Nothing is ever fetched from the network.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError

from icrl_gym.config import DictConfig
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.mdp_core import MDPSpec
from icrl_gym.kinds import KINDS, CheckpointKind, EnvFamily, import_target
from icrl_gym.utils.fileio import CONTENT_HASH_FIELD, atomic_write_bytes, content_sha256, describe_size, json_round_trip
from icrl_gym.utils.names import did_you_mean
from icrl_gym.utils.provenance import software_environment

if TYPE_CHECKING:  # torch is imported where weights are read or written: reading a record needs only JSON
    import torch

FORMAT = "icrl-gym-checkpoint"
FORMAT_VERSION = 2
"""The record format written and read (every record carries its hash)."""

_log = logging.getLogger(__name__)

PRETRAINED_DIR = Path(str(importlib.resources.files("icrl_gym") / "pretrained"))
"""The models shipped with the package (``<name>.safetensors`` + ``<name>.json``) and their ``configs/``."""


PLAY_FIELD = "play"
"""The record's field of play defaults: ``{"defaults": {keyword: value}, "command": the command that set them}``."""


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, truncated or made for another environment."""


_OTHER_MODEL_CLASSES = {"RecurrentActorCriticPolicy": CheckpointKind.META_RL_POLICY}
"""Model classes (of records written before ``kind`` existed) that are not a row's ``model``."""


def checkpoint_kind(meta: dict[str, Any]) -> CheckpointKind:
    """The kind of a checkpoint record: its ``kind``, or for older records, the one of its ``model_class``.

    The one place where older records are mapped: those written before ``kind`` existed (the oldest,
    several shipped ones among them, have no ``model_class`` either and hold bandit transformers).
    """
    if "kind" in meta:
        try:
            kind = CheckpointKind(meta["kind"])
        except ValueError as err:
            raise CheckpointError(f"unknown checkpoint kind {meta['kind']!r}") from err
        return kind
    model_class = meta.get("model_class", "BanditTransformer")
    found = _kind_of_model_class(model_class)
    if found is None:
        raise CheckpointError(f"checkpoint record of unknown model class {model_class!r} and no kind")
    return found


def _kind_of_model_class(model_class: str) -> CheckpointKind | None:
    """The kind whose row builds ``model_class`` (by class name), or None."""
    for kind, entry in KINDS.items():
        if entry.model.rpartition(":")[2] == model_class:
            return kind
    return _OTHER_MODEL_CLASSES.get(model_class)


@dataclass(frozen=True)
class CheckpointRecord:
    """The JSON record of a checkpoint, typed: its kind and the environment it was made for."""

    kind: CheckpointKind
    """What the weights are (see :class:`CheckpointKind`)."""
    meta: dict[str, Any]
    """The whole record as stored (model configuration, training state, ...)."""

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> CheckpointRecord:
        """The typed view of a record read from disk (older records mapped by :func:`checkpoint_kind`)."""
        return cls(kind=checkpoint_kind(meta), meta=meta)

    @property
    def env(self) -> dict[str, Any]:
        """The environment prior the model was trained on (a spec as a dict)."""
        return self.meta.get("env", {})

    @property
    def play(self) -> dict[str, Any]:
        """The keywords the record asks its agent to play with (:func:`set_play`); a caller's own keywords win."""
        return dict(self.meta.get(PLAY_FIELD, {}).get("defaults", {}))

    def expect(self, kind: CheckpointKind, name: str = "checkpoint") -> None:
        """Raise :class:`CheckpointError` unless the record is of ``kind``."""
        if self.kind is not kind:
            raise CheckpointError(
                f"{name} holds a {self.kind.value}, not a {kind.value}: "
                f"play it with make_agent({self.kind.agent!r}, checkpoint=...)"
            )


def _parse_record(record_path: Path) -> dict[str, Any]:
    """The record of a checkpoint as stored, checked: an icrl-gym record of the current version, its hash verified."""
    if not record_path.exists():
        raise CheckpointError(f"checkpoint file {record_path} does not exist")
    try:
        meta = json.loads(record_path.read_bytes())
    except (ValueError, OSError, RecursionError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise CheckpointError(f"{record_path} is corrupt or truncated: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{record_path} is not an icrl-gym checkpoint record (or it was edited or is corrupt)")
    version = meta.get("format_version")
    if CONTENT_HASH_FIELD in meta:
        found = content_sha256(meta)
        if found != meta[CONTENT_HASH_FIELD]:
            raise CheckpointError(
                f"checkpoint record {record_path} was edited or is corrupt: its hash is {found}, "
                f"its {CONTENT_HASH_FIELD} says {meta[CONTENT_HASH_FIELD]!r}"
            )
    elif version == FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint record {record_path} was edited or is corrupt: format version {version} needs "
            f"{CONTENT_HASH_FIELD}, it has none"
        )
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{record_path} has format version {version}, need {FORMAT_VERSION}")
    return meta


def read_record(path: str | os.PathLike) -> CheckpointRecord:
    """The record of a checkpoint alone, its hash verified (the weights are neither read nor checked)."""
    return CheckpointRecord.from_meta(_parse_record(checkpoint_files(path)[1]))


def resolve_checkpoint(checkpoint: str | os.PathLike) -> Path:
    """A checkpoint path, the name of a model shipped in :data:`PRETRAINED_DIR`, or a training run's folder.

    A run folder (one holding :data:`RUN_MANIFEST` and no Hub weights) resolves to the checkpoint it offers for play
    (:func:`run_folder_checkpoint`); a run keeps its training configuration as ``config.json``, which does not make
    it a Hub-layout folder.  Other paths are returned as they are (:func:`find_checkpoint` also checks they exist).
    """
    path = Path(checkpoint)
    if path.is_dir() and (path / RUN_MANIFEST).exists() and not checkpoint_files(path)[0].exists():
        return run_folder_checkpoint(path)
    if not checkpoint_files(path)[1].exists() and (PRETRAINED_DIR / f"{checkpoint}.json").exists():
        return PRETRAINED_DIR / str(checkpoint)
    return path


RUN_MANIFEST = "resume.json"
"""The manifest of a training run folder (written by :mod:`icrl_gym.training.state`): it names the run's checkpoints."""

PLAYED_ROLE = "best"
"""The checkpoint a run folder offers for play when it keeps one (fine-tuning's best validated); else its latest."""


def run_folder_checkpoint(run_dir: str | os.PathLike) -> Path:
    """The stem of the checkpoint that the training run folder ``run_dir`` offers for play.

    That is the checkpoint the run keeps as ``best`` (fine-tuning keeps its best validated one), and
    otherwise its latest committed weights.  Only the manifest's names are read here: the files
    themselves are verified when the checkpoint is read (the record's SHA-256 of the weights).
    """
    manifest_path = Path(run_dir) / RUN_MANIFEST
    try:
        manifest = json.loads(manifest_path.read_bytes())
        if manifest.get(CONTENT_HASH_FIELD) != content_sha256(manifest):
            raise CheckpointError(f"{manifest_path} is corrupt: its content does not match its own SHA-256")
        files, kept = manifest["files"], manifest["checkpoints"]
        role = PLAYED_ROLE if PLAYED_ROLE in kept else ""
        record = str(files[f"{role}.record" if role else "record"]["path"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{manifest_path} is not a readable training-run manifest: {err!r}") from err
    relative = Path(record)
    if relative.is_absolute() or ".." in relative.parts or not record.endswith(".json"):
        raise CheckpointError(f"{manifest_path} names {record!r}, not a checkpoint record inside the run folder")
    return Path(run_dir) / record[: -len(".json")]


def find_checkpoint(checkpoint: str | os.PathLike) -> Path:
    """The stem of the checkpoint that ``checkpoint`` names, for play.

    ``checkpoint`` is a shipped model's name, a checkpoint stem (or its ``.json`` / ``.safetensors``
    file), a Hub-layout folder or a training run folder (:func:`run_folder_checkpoint`).

    Anything else is a :class:`CheckpointError` that lists the shipped names and the forms a path may take.
    """
    path = resolve_checkpoint(checkpoint)
    if checkpoint_files(path)[1].exists():
        return checkpoint_stem(path)
    what = "a folder that holds no checkpoint" if path.is_dir() else "no such file"
    shipped = pretrained_names()
    raise CheckpointError(
        f"no shipped model {str(checkpoint)!r}{did_you_mean(str(checkpoint), shipped)} and no "
        f"checkpoint at that path ({what}): shipped models are "
        f"{shipped}; a path may be a checkpoint stem (STEM.json + STEM.safetensors), a Hub-layout "
        f"folder ({HF_CONFIG} + {HF_WEIGHTS}) or a training run's folder (holding {RUN_MANIFEST})"
    )


def pretrained_names(kind: CheckpointKind | str | None = None) -> list[str]:
    """Names of the checkpoints shipped with the package, optionally only those of one kind."""
    names = sorted(p.name[: -len(".safetensors")] for p in PRETRAINED_DIR.glob("*.safetensors"))
    if kind is None:
        return names
    kind = CheckpointKind(kind)
    return [n for n in names if read_record(PRETRAINED_DIR / n).kind is kind]


def checkpoint_stem(path: str | os.PathLike) -> Path:
    """The stem of a checkpoint named by its stem or by one of its two files (``.json``, ``.safetensors``)."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".json", ".safetensors") else path


HF_WEIGHTS, HF_CONFIG = "model.safetensors", "config.json"
"""File names of the Hugging Face Hub mixin layout (``PyTorchModelHubMixin.save_pretrained``)."""

HF_CARD = "README.md"
"""The model card :func:`icrl_gym.hub.export_hf_folder` writes beside them (the file the Hub renders)."""


def checkpoint_files(path: str | os.PathLike) -> tuple[Path, Path]:
    """The weights and record files of a checkpoint (names may contain dots, e.g. ``alpha0.5``).

    ``path`` is a stem (``<stem>.safetensors`` + ``<stem>.json``) or, when no ``<path>.json``
    exists and ``path`` is a folder, a Hub-layout folder (``model.safetensors`` + ``config.json``).
    """
    stem = str(checkpoint_stem(path))
    if not Path(stem + ".json").exists() and Path(path).is_dir():
        return Path(path) / HF_WEIGHTS, Path(path) / HF_CONFIG
    return Path(stem + ".safetensors"), Path(stem + ".json")


def _model_config(model: torch.nn.Module) -> dict[str, Any]:
    """The configuration record of a transformer (other models pass theirs to :func:`save_checkpoint`)."""
    config = getattr(model, "config", None)
    if not isinstance(config, DictConfig):
        raise ValueError(f"no model configuration for a {type(model).__name__}: pass config=")
    return config.to_dict()


def _write_record(record_path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` atomically in the current format version, stamped with its hash."""
    record = json_round_trip({**record, "format": FORMAT, "format_version": FORMAT_VERSION})
    record[CONTENT_HASH_FIELD] = content_sha256(record)
    atomic_write_bytes(record_path, json.dumps(record, indent=2, sort_keys=True).encode())


def save_checkpoint(
    path: str | os.PathLike,
    model: torch.nn.Module,
    meta: dict[str, Any],
    config: dict[str, Any] | None = None,
    kind: CheckpointKind | None = None,
) -> Path:
    """Save ``model`` and ``meta`` as ``<stem>.safetensors`` + ``<stem>.json``; returns the stem.

    ``config`` is the model's configuration record (default: ``model.config.to_dict()``); ``kind``
    defaults to the one of the model's class.  The record carries the SHA-256 of the weights file,
    its own hash and the software that saved it (:func:`~icrl_gym.utils.provenance.software_environment`).
    """
    # the class a kind's row builds (a model of a subclass, e.g. a version of the linear generalist, is recorded as it)
    named = [cls.__name__ for cls in type(model).__mro__ if _kind_of_model_class(cls.__name__) is not None]
    model_class = named[0] if named else type(model).__name__
    if kind is None:
        kind = _kind_of_model_class(model_class)
        if kind is None:
            raise ValueError(f"no checkpoint kind for a {model_class}: pass kind=")
    from safetensors.torch import save as save_safetensors

    stem = checkpoint_stem(path)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    blob = save_safetensors(tensors)
    record = {
        **meta,
        "kind": CheckpointKind(kind).value,
        "model": _model_config(model) if config is None else config,
        "model_class": model_class,
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
        "software": software_environment(),  # what trained these weights (not a base model's record)
    }
    # Weights first, record last: a record always describes weights that are fully on disk.
    weights, record_path = checkpoint_files(stem)
    atomic_write_bytes(weights, blob)
    _write_record(record_path, record)
    _log.info("wrote %s", describe_size(weights))
    return stem


def set_play(path: str | os.PathLike, defaults: Mapping[str, Any], command: str | None = None) -> Path:
    """Record in the checkpoint at ``path`` the keywords its agent plays with unless told otherwise; returns the record.

    A deployment choice made after training (e.g. the Bernoulli family model's ``fresh_arm_floor``): the weights and
    the rest of the record stay as they are, the record's hash is renewed, and ``command`` (how the choice was made)
    is kept beside the keywords.  Empty ``defaults`` remove the field.  The agent checks the keywords when it loads
    the checkpoint, and a keyword the caller passes overrides the record's.
    """
    record_path = checkpoint_files(find_checkpoint(path))[1]
    record = _parse_record(record_path)
    record.pop(CONTENT_HASH_FIELD, None)
    if defaults:
        record[PLAY_FIELD] = {"defaults": dict(defaults), **({"command": command} if command else {})}
    else:
        record.pop(PLAY_FIELD, None)
    _write_record(record_path, record)
    return record_path


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read the weights and the record of a checkpoint, checking the record's hash and that the files belong together.

    Any damage (a missing, truncated or corrupt file, an edited record, weights that are not the
    record's) is a :class:`CheckpointError`.
    """
    weights, record_path = checkpoint_files(path)
    if not weights.exists():
        raise CheckpointError(f"checkpoint file {weights} does not exist")
    meta = _parse_record(record_path)
    try:
        blob = weights.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{weights} cannot be read: {err}") from err
    if hashlib.sha256(blob).hexdigest() != meta.get("weights_sha256"):
        raise CheckpointError(f"{weights} does not match its record {record_path}: the file is corrupt or truncated")
    from safetensors.torch import load as load_safetensors

    try:
        state = load_safetensors(blob)
    except (SafetensorError, ValueError, RuntimeError, OverflowError, MemoryError) as err:
        raise CheckpointError(f"{weights} is corrupt: {err}") from err
    return state, meta


def load_checkpoint(
    path: str | os.PathLike,
    device: torch.device | str = "cpu",
    expect: BanditSpec | MDPSpec | None = None,
    kind: CheckpointKind | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Build the model of a checkpoint of any kind from the kind table (:data:`KINDS`) and load its weights.

    Returns ``(model, record)``, the model in eval mode on ``device``.  ``kind``: refuse a checkpoint
    of another kind (:class:`CheckpointError`); ``expect``: check the environment spec it will play.
    """
    import torch

    state, meta = read_checkpoint(path)
    record = CheckpointRecord.from_meta(meta)
    if kind is not None:
        record.expect(kind, str(checkpoint_stem(path)))
    if expect is not None:
        check_compatible(record, {"model": expect.to_dict()}, name=str(checkpoint_stem(path)))
    entry = record.kind.entry
    try:
        if entry.loader is not None:
            model = import_target(entry.loader)(state, meta, torch.device(device))
        else:
            model = import_target(entry.model)(import_target(entry.config).from_dict(meta["model"]))
            model.load_state_dict(state, strict=True)
    except (KeyError, ValueError, TypeError, RuntimeError) as err:
        raise CheckpointError(
            f"checkpoint {checkpoint_stem(path)} does not fit its model configuration: {err}"
        ) from err
    return model.to(device).eval(), meta


SIZE_FIELDS = ("dim", "num_states", "num_actions", "horizon", "episodes")
"""The size fields of an environment: those a reset ``info`` may carry itself (a bandit reset by keywords has no
``model``), and those a fixed-size model's configuration records."""


def _family(env: Mapping[str, Any]) -> EnvFamily | None:
    if "num_states" in env:
        return EnvFamily.TABULAR_MDP
    if "dim" in env or "arms" in env:
        return EnvFamily.BANDIT
    return None


def check_compatible(
    record: CheckpointRecord | dict[str, Any], info: Mapping[str, Any], name: str = "checkpoint"
) -> None:
    """Raise :class:`CheckpointError` naming every field where the environment of ``info`` differs from the checkpoint.

    ``info`` is an environment's reset info: its ``model`` (the spec as a dict), completed by the sizes
    ``info`` carries itself.  The family (bandit or tabular MDP) must be the checkpoint's; a bandit
    must have the kind of arms, of rewards, d and A of the training prior, an MDP its kind, S, A and H.
    A run may be shorter than the model's capacity (T for a bandit, K episodes for an MDP), as an
    out-of-distribution use, but not longer.  The family, the exact fields and the length field of a
    kind are its row of :data:`KINDS` (a generalist plays any size: only its kind of arms and rewards
    are compared).  Fields the environment does not state are not compared.  The error says what the
    model plays (its row's ``plays``) and names every field that differs.
    """
    record = record if isinstance(record, CheckpointRecord) else CheckpointRecord.from_meta(record)
    env = {k: info[k] for k in SIZE_FIELDS if info.get(k) is not None}
    env.update(info.get("model") or {})
    trained = record.env
    entry = record.kind.entry
    seen = _family(env)
    refused = f"{name} does not fit the environment: it plays {entry.plays}"
    if seen is not None and seen is not entry.family:
        raise CheckpointError(
            f"{refused}; environment={entry.family.value!r} in the checkpoint "
            f"(a {record.kind.value}), environment={seen.value!r} in the environment"
        )
    problems = [
        f"{key}={trained[key]!r} in the checkpoint, {key}={env[key]!r} in the environment"
        for key in entry.exact_fields
        if key in env and key in trained and env[key] != trained[key]
    ]
    length = entry.length_field
    capacity = None if length is None else record.meta.get("model", {}).get(length, trained.get(length))
    if length is not None and length in env and capacity is not None and env[length] > capacity:
        problems.append(
            f"{length}<={capacity} in the checkpoint (trained with {length}={trained.get(length)}), "
            f"{length}={env[length]} in the environment"
        )
    if problems:
        raise CheckpointError(f"{refused}; " + "; ".join(problems))


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.checkpoint play CHECKPOINT [key=value ...]``: set a record's play defaults.

    :func:`set_play` with the pairs (none: the field is removed); values are JSON (``fresh_arm_floor=true``).
    """
    import argparse
    import sys

    from icrl_gym.utils.command import portable

    parser = argparse.ArgumentParser(prog="python -m icrl_gym.checkpoint", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    play = sub.add_parser("play", help="set the keywords the checkpoint's agent plays with by default")
    play.add_argument("checkpoint", help="a shipped model's name, a checkpoint stem or a run folder")
    play.add_argument("pairs", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    defaults: dict[str, Any] = {}
    for pair in args.pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            parser.error(f"expected key=value, got {pair!r}")
        try:
            defaults[key] = json.loads(value)
        except json.JSONDecodeError:
            parser.error(f'the value of {key} must be JSON (true, 200, "text"), got {value!r}')
    command = portable(" ".join(["python -m icrl_gym.checkpoint", *(sys.argv[1:] if argv is None else argv)]))
    try:
        print(set_play(args.checkpoint, defaults, command=command))
    except CheckpointError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")


if __name__ == "__main__":
    main()
