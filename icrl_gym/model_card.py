"""Model cards: the ``README.md`` of a checkpoint's Hub-layout folder, generated from its record.

A card has three parts, so that the part that describes the weights cannot drift from them:

- **Generated from the record** (the checkpoint's JSON, ``config.json`` of a Hub folder): the YAML
  metadata block the Hugging Face Hub reads (``library_name``, ``tags``, ``pipeline_tag`` and, for
  a shipped model, ``model-index``), what the model was trained on (the environment prior, the
  trained and playable ranges, the model configuration, the training configuration with its seed,
  the training run and its commands), how to load it and the SHA-256 of its files.
- **Hand-written, per shipped model**, in :data:`CARDS_DIR` (shipped with the package):
  ``<name>.md`` holds the prose and the measured tables (regret against the experts, each with the
  command that measured it, copied from the project's docs), and ``model-index.json`` the numbers
  of those tables that go into the metadata block.  A shipped model is recognised by the SHA-256 of
  its weights, so a user's own checkpoint never borrows a shipped model's measurements, whatever it
  is named.
- **A seal**: the last line is an HTML comment holding the SHA-256 of the text above it.  Export
  (:func:`icrl_gym.hub.export_hf_folder`) replaces a folder only if it holds what an earlier
  export wrote; the seal tells the card it wrote from one a user has edited since (which export must
  not delete).

A user's checkpoint gets a card from its record alone, saying that no measured table ships with it.

The metadata block is written in a small, always-valid subset of YAML (block mappings and sequences,
plain or JSON-quoted scalars), so no YAML library is needed to write it.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from icrl_gym.checkpoint import (
    HF_CARD,
    HF_CONFIG,
    HF_WEIGHTS,
    PLAY_FIELD,
    PRETRAINED_DIR,
    CheckpointKind,
    checkpoint_kind,
    read_record,
    resolve_checkpoint,
)
from icrl_gym.kinds import EnvFamily
from icrl_gym.utils.yaml_writer import to_yaml

CARD_FILE = HF_CARD
"""The card's file name in a Hub-layout folder (``README.md``: the file the Hub renders)."""

CARDS_DIR = PRETRAINED_DIR / "cards"
"""The hand-written parts of the shipped models' cards: ``<name>.md`` and ``model-index.json``."""

MODEL_INDEX_FILE = "model-index.json"
"""Per shipped model, the measured numbers of its card that go into the metadata's ``model-index``."""

LIBRARY_NAME = "icrl-gym"
PIPELINE_TAG = "reinforcement-learning"

SEAL_PREFIX = "<!-- icrl-gym model card; SHA-256 of the text above: "
SEAL_SUFFIX = " -->\n"
"""The card's last line is ``SEAL_PREFIX + sha256(text above) + SEAL_SUFFIX``."""

_TRAINING_CONFIGS = ("pretrain", "meta_rl")
"""Record entries that hold the configuration a model was trained with (the first present is shown)."""

_SHOWN_APART = {"history", "command", "command_history", "note"}
"""Entries of ``training`` / ``finetune`` shown in their own paragraphs (or, for the history, only counted)."""


# ----------------------------------------------------------------------------------------- public API


def model_card(checkpoint: str | os.PathLike) -> str:
    """The card of a checkpoint: a shipped model's name, a checkpoint stem or a Hub-layout folder.

    The record is read with its hash verified (:func:`icrl_gym.checkpoint.read_record`); the weights
    are not read.
    """
    path = resolve_checkpoint(checkpoint)
    record = read_record(path)
    return card_for_record(record.meta, fallback_name=_path_name(path))


def card_for_record(meta: Mapping[str, Any], fallback_name: str = "checkpoint") -> str:
    """The card of the checkpoint whose record is ``meta``, sealed (see the module's docstring).

    ``fallback_name`` names a checkpoint that is not shipped and whose record names no run (a stem's
    or folder's name).  Deterministic: the same record gives the same bytes, so exporting a folder
    onto itself leaves it unchanged.
    """
    shipped = shipped_name(meta)
    name = shipped or _record_name(meta) or fallback_name
    prose = shipped_prose(shipped) if shipped else None
    results = shipped_results(shipped) if shipped else []
    intro, rest = _split_prose(prose) if prose is not None else (_own_intro(meta, name), _own_results(name))
    parts = [
        front_matter(meta, name, results),
        f"# {name}\n",
        intro,
        _trained_on(meta),
        rest,
        _training_details(meta),
        _usage(meta, name, shipped is not None),
        _files(meta),
    ]
    return seal("\n".join(part.strip("\n") + "\n" for part in parts if part.strip()) + "\n")


def seal(text: str) -> str:
    """``text`` with the seal line appended: the SHA-256 of ``text`` in an HTML comment."""
    return text + SEAL_PREFIX + hashlib.sha256(text.encode()).hexdigest() + SEAL_SUFFIX


def is_sealed_card(text: str) -> bool:
    """Whether ``text`` is a card as :func:`seal` wrote it: its last line seals exactly the text above it.

    A card edited after it was written (or a README another tool wrote) is not.
    """
    body, found, tail = text.rpartition(SEAL_PREFIX)
    if not found or not tail.endswith(SEAL_SUFFIX):
        return False
    return tail[: -len(SEAL_SUFFIX)] == hashlib.sha256(body.encode()).hexdigest()


def shipped_name(meta: Mapping[str, Any]) -> str | None:
    """The shipped model whose weights and model configuration the record describes, or None.

    Both count (:func:`_identity`): two shipped models may hold the same weights under configurations that play
    them differently (a skip index's constants changed without training).
    """
    return _shipped_by_identity().get(_identity(meta))


def shipped_prose(name: str) -> str:
    """The hand-written part of shipped model ``name``'s card (``CARDS_DIR/<name>.md``)."""
    path = CARDS_DIR / f"{name}.md"
    if not path.exists():
        raise FileNotFoundError(f"the shipped model {name!r} has no card source {path.name} in {CARDS_DIR}")
    return path.read_text(encoding="utf-8")


def shipped_results(name: str) -> list[dict[str, Any]]:
    """The ``model-index`` results of shipped model ``name`` (``model-index.json``; [] if it has none)."""
    return list(_model_index().get(name, []))


# ------------------------------------------------------------------------------------ metadata block


def front_matter(meta: Mapping[str, Any], name: str, results: Iterable[Mapping[str, Any]]) -> str:
    """The YAML metadata block (between ``---`` lines) of the card of ``meta``, named ``name``.

    ``results`` are entries of ``model-index.json``: a ``dataset`` (``type``: the environment id,
    ``name``) and ``metrics`` (``type``, ``name``, ``value``: the number as the docs print it).
    """
    metadata: dict[str, Any] = {
        "library_name": LIBRARY_NAME,
        "pipeline_tag": PIPELINE_TAG,
        "tags": tags(meta),
    }
    index = [
        {
            "task": {"type": PIPELINE_TAG, "name": "In-context reinforcement learning"},
            "dataset": {"type": result["dataset"]["type"], "name": result["dataset"]["name"]},
            "metrics": [
                {"type": m["type"], "name": m["name"], "value": float(m["value"]), "verified": False}
                for m in result["metrics"]
            ],
        }
        for result in results
    ]
    if index:
        metadata["model-index"] = [{"name": name, "results": index}]
    return "---\n" + "\n".join(to_yaml(metadata)) + "\n---\n"


def tags(meta: Mapping[str, Any]) -> list[str]:
    """The Hub tags of a checkpoint: the task, its environment family, what kind of model and labels."""
    kind = checkpoint_kind(dict(meta))
    found = ["reinforcement-learning", "in-context-learning", LIBRARY_NAME]
    found.append("bandits" if kind.entry.family is EnvFamily.BANDIT else "tabular-mdp")
    found.append("meta-rl" if kind is CheckpointKind.META_RL_POLICY else "transformer")
    label = (meta.get("pretrain") or {}).get("label")
    if label == "ad":
        found.append("algorithm-distillation")
    elif label == "dpt":
        found.append("decision-pretrained-transformer")
    if "finetune" in meta:
        found.append("fine-tuned")
    return found


# ------------------------------------------------------------------------------- generated sections


def _trained_on(meta: Mapping[str, Any]) -> str:
    """The section "What it was trained on": kind, seed, steps, environment prior and ranges, from the record."""
    kind = checkpoint_kind(dict(meta))
    summary: list[tuple[str, str]] = [
        ("checkpoint kind (`kind`)", _cell(kind.value)),
        ("played by the agent", _cell(kind.agent)),
        ("plays", kind.entry.plays.replace("|", "\\|")),
    ]
    if "model_class" in meta:
        summary.append(("model class (`model_class`)", _cell(meta["model_class"])))
    seed, seed_field = _first(meta, [(c, "seed") for c in _TRAINING_CONFIGS] + [("training", "seed")])
    if seed_field:
        summary.append((f"seed (`{seed_field}`)", _cell(seed)))
    steps, steps_field = _first(meta, [("training", "step"), ("training", "steps"), ("training", "env_steps")])
    if steps_field:
        what = "environment steps" if steps_field.endswith("env_steps") else "training steps"
        summary.append((f"{what} (`{steps_field}`)", _cell(steps)))
    out = [
        "## What it was trained on",
        "",
        'This section and "Training details" are generated from the checkpoint\'s record (`config.json` in '
        "a Hub folder), the record whose SHA-256 of the weights is checked on every load, so they describe "
        "exactly these weights.",
        "",
        _table(("", ""), summary),
    ]
    for key, title, note in (
        ("env", "Environment prior", "The distribution of environments the training runs were drawn from."),
        ("trained_range", "Trained range", "The sizes (and, per family, the parameters) the training covered."),
        ("playable_range", "Playable range", "The sizes the agent accepts; anything larger is refused."),
    ):
        if isinstance(meta.get(key), Mapping) and meta[key]:
            out += ["", f"### {title} (`{key}`)", "", note, "", _field_table(meta[key])]
    return "\n".join(out) + "\n"


def _training_details(meta: Mapping[str, Any]) -> str:
    """The section "Training details": model, training configuration, the run and its commands, from the record."""
    out = ["## Training details"]
    if isinstance(meta.get("model"), Mapping) and meta["model"]:
        out += ["", "### Model configuration (`model`)", "", _field_table(meta["model"])]
    config_key = next((k for k in _TRAINING_CONFIGS if isinstance(meta.get(k), Mapping)), None)
    if config_key is not None:
        config = {k: v for k, v in meta[config_key].items() if k not in ("env", "model")}
        out += [
            "",
            f"### Training configuration (`{config_key}`)",
            "",
            "Data, labels, optimisation and seed; its `env` and `model` entries, where it has them, are shown above.",
            "",
            _field_table(config),
        ]
    for key, title in (("training", "Training run"), ("finetune", "Fine-tuning")):
        block = meta.get(key)
        if isinstance(block, Mapping) and block:
            shown = {k: v for k, v in block.items() if k not in _SHOWN_APART}
            out += ["", f"### {title} (`{key}`)", "", _field_table(shown)]
            if isinstance(block.get("history"), list):
                out += ["", f"The record keeps the run's log, {len(block['history'])} entries of `{key}.history`."]
    out += _commands(meta)
    return "\n".join(out) + "\n" if len(out) > 1 else ""


def _commands(meta: Mapping[str, Any]) -> list[str]:
    """The commands and notes the record keeps, verbatim, as Markdown lines."""
    out: list[str] = []
    for key in ("training", "finetune"):
        block = meta.get(key)
        if not isinstance(block, Mapping):
            continue
        if block.get("command"):
            out += ["", f"The command recorded in `{key}.command`:", "", "```sh", str(block["command"]), "```"]
        history = [str(c) for c in block.get("command_history") or [] if c]  # a run started in Python has None
        if len(history) > 1 or (history and history[-1] != block.get("command")):
            out += ["", f"The run's commands in order (`{key}.command_history`):", "", "```sh", *history, "```"]
        if block.get("note"):
            out += ["", f"Note (`{key}.note`): {block['note']}"]
    if meta.get("note"):
        out += ["", f"Note (`note`): {meta['note']}"]
    if out:
        out = ["", "### How it was trained", *out]
    return out


def _usage(meta: Mapping[str, Any], name: str, shipped: bool) -> str:
    """The section "How to use it": the agent that plays the checkpoint, by name and from a folder."""
    agent = checkpoint_kind(dict(meta)).agent
    lines = ["## How to use it", "", "```python"]
    if shipped:
        lines += ["import agents", "from agents import make_agent", ""]
        lines.append(f'agent = agents.pretrained("{name}")  # the model shipped with icrl-gym, by name')
    else:
        lines += ["from agents import make_agent", ""]
    lines += [
        f'agent = make_agent({{"name": "{agent}", "checkpoint": "path/to/this/folder"}})  # this Hub folder',
        "```",
        "",
        "Every reset checks the environment against the record (`check_compatible`): an environment "
        "the model was not made for is refused with an error naming the fields that differ.",
    ]
    play = meta.get(PLAY_FIELD)
    if isinstance(play, Mapping) and play.get("defaults"):
        words = ", ".join(f"`{key}={value!r}`" for key, value in play["defaults"].items())
        lines += ["", f"The record asks the agent to play with {words} unless given other values (`{PLAY_FIELD}`)."]
        if play.get("carried_from"):
            lines += ["", f"Carried from the checkpoint its training started from, `{play['carried_from']}`."]
        if play.get("command"):
            lines += ["", "Set by:", "", "```sh", str(play["command"]), "```"]
    return "\n".join(lines) + "\n"


def _files(meta: Mapping[str, Any]) -> str:
    """The section "Files": what the folder holds and the hashes that tie them together."""
    rows = [
        (f"`{HF_WEIGHTS}`", "the weights (safetensors: loading runs no code)"),
        (f"`{HF_CONFIG}`", "the checkpoint record (icrl-gym format), read by every loader"),
        (f"`{CARD_FILE}`", "this card, generated from the record on export"),
    ]
    lines = ["## Files", "", _table(("file", "what it is"), rows)]
    for key, what in (
        ("weights_sha256", f"SHA-256 of `{HF_WEIGHTS}`"),
        ("content_sha256", f"SHA-256 of the record in `{HF_CONFIG}`"),
    ):
        if meta.get(key):
            lines += ["", f"{what} (`{key}`): `{meta[key]}`"]
    return "\n".join(lines) + "\n"


def _own_intro(meta: Mapping[str, Any], name: str) -> str:
    """The opening of a card for a checkpoint that is not shipped with the package."""
    kind = checkpoint_kind(dict(meta))
    return (
        f"`{name}` is a checkpoint of kind `{kind.value}` written by icrl-gym: it plays {kind.entry.plays}. "
        "It is not one of the models shipped with the package; this card was generated from its record alone.\n"
    )


def _own_results(name: str) -> str:
    """The results section of a card for a checkpoint that is not shipped: there are none to show."""
    return (
        "## Measured results\n\n"
        f"No measured table ships with this checkpoint: nothing has been measured for `{name}` as such, and the "
        "shipped models' numbers do not carry over to other weights. Measure it with the benchmark harness "
        "(`python -m benchmarks`, whose experiments take a checkpoint path) on the environments you mean to "
        "use it on before relying on it.\n"
    )


# ------------------------------------------------------------------------------------------ helpers


def _split_prose(prose: str) -> tuple[str, str]:
    """A card source split at its first ``## `` heading: the introduction, then the hand-written sections."""
    match = re.search(r"^## ", prose, re.MULTILINE)
    if match is None:
        return prose, ""
    return prose[: match.start()], prose[match.start() :]


def _record_name(meta: Mapping[str, Any]) -> str | None:
    """The run name a record states (``name``, else its training or fine-tuning configuration's)."""
    candidates = [meta.get("name")]
    candidates += [(meta.get(k) or {}).get("name") for k in _TRAINING_CONFIGS]
    candidates.append(((meta.get("finetune") or {}).get("config") or {}).get("name"))
    return next((str(c) for c in candidates if isinstance(c, str) and c), None)


def _path_name(path: Path) -> str:
    """The name of a checkpoint path: a Hub folder's name, or a stem's (without ``.json`` / ``.safetensors``)."""
    return path.name if path.suffix not in (".json", ".safetensors") else path.stem


def _first(meta: Mapping[str, Any], paths: list[tuple[str, str]]) -> tuple[Any, str | None]:
    """The first ``meta[a][b]`` present among ``paths``, with its dotted name (None when none is)."""
    for outer, inner in paths:
        block = meta.get(outer)
        if isinstance(block, Mapping) and inner in block:
            return block[inner], f"{outer}.{inner}"
    return None, None


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` for every leaf of a nested mapping, keys sorted (lists are leaves)."""
    rows: list[tuple[str, Any]] = []
    for key in sorted(mapping):
        value = mapping[key]
        if isinstance(value, Mapping) and value:
            rows += flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def _cell(value: Any) -> str:
    """A record value as a table cell: JSON in a code span (a string that reads as itself is left unquoted).

    Pipes are escaped with a backslash so that values such as ``"fixed|per_step"`` stay in their cell.
    """
    text = value if isinstance(value, str) and not _reads_as_other_json(value) else json.dumps(value, sort_keys=True)
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _reads_as_other_json(text: str) -> bool:
    """Whether ``text`` would read back as JSON of another type (``5``, ``true``, ``null``, ``[1]``, ``"x"``)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _field_table(mapping: Mapping[str, Any]) -> str:
    """A two-column Markdown table of a record entry, one row per leaf (dotted keys)."""
    return _table(("field", "value"), [(f"`{key}`", _cell(value)) for key, value in flatten(mapping)])


def _table(header: tuple[str, str], rows: Iterable[tuple[str, str]]) -> str:
    """A two-column Markdown table."""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def _identity(meta: Mapping[str, Any]) -> str:
    """A record's ``weights_sha256`` and its model configuration (``model``, as canonical JSON), joined."""
    return f"{meta.get('weights_sha256')}|{json.dumps(meta.get('model'), sort_keys=True)}"


@functools.lru_cache(maxsize=1)
def _shipped_by_identity() -> dict[str, str]:
    """:func:`_identity` -> name of every shipped model (read once per process: the shipped files do not change)."""
    found: dict[str, str] = {}
    for record_path in sorted(PRETRAINED_DIR.glob("*.json")):
        weights = record_path.with_suffix(".safetensors")
        if not weights.exists():
            continue
        meta = json.loads(record_path.read_text(encoding="utf-8"))
        if isinstance(meta.get("weights_sha256"), str):
            found[_identity(meta)] = record_path.name[: -len(".json")]
    return found


@functools.lru_cache(maxsize=1)
def _model_index() -> dict[str, list[dict[str, Any]]]:
    """The ``model-index`` results of the shipped models, by name (``CARDS_DIR/model-index.json``)."""
    path = CARDS_DIR / MODEL_INDEX_FILE
    entries: dict[str, list[dict[str, Any]]] = json.loads(path.read_text(encoding="utf-8"))
    return {name: results for name, results in entries.items() if not name.startswith("_")}


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m icrl_gym.model_card NAME_OR_PATH``: print the card export would write."""
    parser = argparse.ArgumentParser(prog="python -m icrl_gym.model_card", description=main.__doc__)
    parser.add_argument("checkpoint", help="a shipped model's name, a checkpoint stem or a Hub-layout folder")
    args = parser.parse_args(argv)
    print(model_card(args.checkpoint), end="")


__all__ = [
    "CARD_FILE",
    "CARDS_DIR",
    "card_for_record",
    "front_matter",
    "is_sealed_card",
    "model_card",
    "seal",
    "shipped_name",
    "shipped_prose",
    "shipped_results",
    "tags",
    "to_yaml",
]


if __name__ == "__main__":
    main()
