"""Hub-layout folders: a checkpoint exported as ``config.json`` + ``model.safetensors`` + its model card ``README.md``.

The layout of Hugging Face Hub's ``PyTorchModelHubMixin.save_pretrained``; every checkpoint reader
(:mod:`icrl_gym.checkpoint`) accepts such a folder in place of a stem.  This module sits above both
the checkpoint layer and the card writer (:mod:`icrl_gym.model_card`), which it combines; neither
of them imports it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from icrl_gym.checkpoint import (
    FORMAT,
    HF_CARD,
    HF_CONFIG,
    HF_WEIGHTS,
    checkpoint_files,
    checkpoint_stem,
    read_checkpoint,
)
from icrl_gym.model_card import card_for_record, is_sealed_card
from icrl_gym.utils.fileio import describe_size

_log = logging.getLogger(__name__)


def _is_earlier_export(folder: Path) -> bool:
    """Whether ``folder`` holds exactly what :func:`export_hf_folder` writes: a record, its weights, its card.

    The card must be as export wrote it (exports made before cards existed have none): a card edited
    since, or a README.md another tool wrote, makes the folder someone's work, not an earlier export.
    The card's seal (:func:`icrl_gym.model_card.is_sealed_card`) tells them apart.
    """
    names = sorted(entry.name for entry in folder.iterdir())
    if names not in (sorted((HF_CONFIG, HF_WEIGHTS)), sorted((HF_CARD, HF_CONFIG, HF_WEIGHTS))):
        return False
    if HF_CARD in names and not _card_unedited(folder / HF_CARD):
        return False
    try:
        record = json.loads((folder / HF_CONFIG).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(record, dict) and record.get("format") == FORMAT


def _card_unedited(card: Path) -> bool:
    """Whether ``card`` is a model card exactly as export wrote it (its seal matches its text)."""
    try:
        return card.is_file() and not card.is_symlink() and is_sealed_card(card.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return False


def _check_export_target(folder: Path) -> None:
    """Refuse a target that export would have to delete: a file, a link, or a folder holding anything else.

    Export replaces its target whole, so it may only replace what it wrote itself (an earlier
    export) or an empty folder; everything else raises ``FileExistsError`` before anything is written.
    """
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        what = "a link" if folder.is_symlink() else "a file"
        raise FileExistsError(
            f"cannot export to {folder}: it is {what}, not a folder; export writes a folder of {HF_CONFIG} and "
            f"{HF_WEIGHTS} -- name a new folder"
        )
    if folder.is_dir() and any(folder.iterdir()) and not _is_earlier_export(folder):
        entries = sorted(entry.name for entry in folder.iterdir())
        shown = ", ".join(entries[:6]) + (f" and {len(entries) - 6} more" if len(entries) > 6 else "")
        what = f"the folder holds files that no earlier export wrote ({shown})"
        if entries == sorted((HF_CARD, HF_CONFIG, HF_WEIGHTS)) and not _card_unedited(folder / HF_CARD):
            what = f"its {HF_CARD} is not the model card export wrote (edited since, or written by another tool)"
        raise FileExistsError(
            f"cannot export to {folder}: {what}; export replaces its target folder whole, so it only writes to a "
            f"new or empty folder or over an earlier export ({HF_CONFIG} + {HF_WEIGHTS} + {HF_CARD}) -- name a new "
            f"folder"
        )


def export_hf_folder(stem: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Write checkpoint ``stem`` (checked first) as the Hub-layout folder ``folder``; returns it.

    The record goes to ``config.json`` unchanged (its SHA-256 still names the weights), the weights
    to ``model.safetensors``, and the model card generated from the record (with, for a shipped
    model, its measured tables: :mod:`icrl_gym.model_card`) to ``README.md``.  Atomic: the folder is
    built beside its target and renamed into place, so ``folder`` is either the previous one or the
    complete new one.  Export never deletes what it did not write: a target that is a file, a link,
    or a folder holding anything but an earlier export (its card unedited) is refused with
    ``FileExistsError`` before anything is written.
    """
    _, meta = read_checkpoint(stem)  # refuse to export a corrupt or mismatched pair
    weights, record = checkpoint_files(stem)
    folder = Path(folder)
    _check_export_target(folder)
    card = card_for_record(meta, fallback_name=checkpoint_stem(stem).name)  # before anything is written
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a parent folder should be
        blocker = next((p for p in folder.parents if p.exists() and not p.is_dir()), folder.parent)
        raise FileExistsError(f"cannot export to {folder}: {blocker} is a file, not a folder") from None
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    old = None
    try:
        shutil.copyfile(weights, tmp / HF_WEIGHTS)
        shutil.copyfile(record, tmp / HF_CONFIG)
        (tmp / HF_CARD).write_text(card, encoding="utf-8")
        os.chmod(tmp, 0o755)
        if folder.exists():
            old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".old"))
            os.replace(folder, old / "previous")
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "previous").exists() and not folder.exists():
            os.replace(old / "previous", folder)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    _log.info("wrote %s", describe_size(folder / HF_WEIGHTS))
    return folder
