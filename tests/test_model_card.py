"""Model cards: every shipped model has one, its metadata parses, its ranges are its record's, export writes it.

The YAML metadata block is parsed here by a small independent reader of the block subset the Hub's
cards use (PyYAML is not a dependency; where it is installed, it is checked to read the same).  The
record-derived tables are read back from the card's Markdown and compared with the record, so a card
cannot state a range, a seed or a step count its checkpoint does not have.  The measured numbers of
the metadata must appear in the card's own tables and in the doc they are quoted from.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from icrl_gym.checkpoint import (
    PRETRAINED_DIR,
    load_checkpoint,
    pretrained_names,
    read_record,
    resolve_checkpoint,
    save_checkpoint,
)
from icrl_gym.envs import ENV_IDS
from icrl_gym.hub import export_hf_folder
from icrl_gym.kinds import EnvFamily
from icrl_gym.model_card import (
    CARD_FILE,
    CARDS_DIR,
    MODEL_INDEX_FILE,
    card_for_record,
    is_sealed_card,
    model_card,
    shipped_name,
    shipped_prose,
    shipped_results,
    to_yaml,
)
from icrl_gym.training.pretrain import pretrain
from tests.helpers import tiny_pretrain_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SHIPPED = pretrained_names()

# --------------------------------------------------------------------- a reader for the YAML block subset


def parse_yaml(text: str) -> Any:
    """Block mappings and sequences of scalars (plain, JSON-quoted, numbers, booleans, null), as cards use them."""
    lines = [(len(raw) - len(raw.lstrip(" ")), raw.strip()) for raw in text.splitlines()]
    lines = [(indent, content) for indent, content in lines if content and not content.startswith("#")]
    value, pos = _block(lines, 0, lines[0][0])
    assert pos == len(lines), f"unparsed YAML from line {pos}: {lines[pos]}"
    return value


_KEY = re.compile(r"^([A-Za-z_][\w.\-]*):(?: (.*))?$")


def _block(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[Any, int]:
    return (_sequence if lines[pos][1].startswith("- ") else _mapping)(lines, pos, indent)


def _mapping(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while pos < len(lines) and lines[pos][0] == indent and not lines[pos][1].startswith("- "):
        match = _KEY.match(lines[pos][1])
        assert match, f"not a mapping entry: {lines[pos][1]!r}"
        key, rest = match.group(1), match.group(2)
        assert key not in out, f"duplicate key {key!r}"
        pos += 1
        if rest:
            out[key] = _scalar(rest)
            continue
        assert pos < len(lines), f"{key!r} has no value"
        deeper = lines[pos][0] > indent or (lines[pos][0] == indent and lines[pos][1].startswith("- "))
        assert deeper, f"{key!r} has no value"
        out[key], pos = _block(lines, pos, lines[pos][0])
    assert pos == len(lines) or lines[pos][0] < indent, f"bad indentation at {lines[pos]}"
    return out, pos


def _sequence(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
        item = lines[pos][1][2:]
        if _KEY.match(item):  # a mapping as the item: its first entry sits after the dash
            lines[pos] = (indent + 2, item)
            value, pos = _mapping(lines, pos, indent + 2)
            out.append(value)
        else:
            out.append(_scalar(item))
            pos += 1
    return out, pos


def _scalar(text: str) -> Any:
    if text.startswith('"'):
        return json.loads(text)
    special = {"null": None, "~": None, "true": True, "false": False, "{}": {}, "[]": []}
    if text in special:
        return special[text]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*(e[-+]?\d+)?", text):
        return float(text)
    assert not text.startswith(("'", "[", "{", "&", "*", "!", "|", ">", "%", "@", "`")), f"unsupported: {text!r}"
    assert ": " not in text and " #" not in text, f"ambiguous plain scalar {text!r}"
    return text


def front_matter(card: str) -> dict[str, Any]:
    """The metadata block at the very top of a card, parsed."""
    assert card.startswith("---\n"), "a card starts with its YAML block"
    block, found, _ = card[4:].partition("\n---\n")
    assert found, "the YAML block is closed by a --- line"
    parsed = parse_yaml(block)
    assert isinstance(parsed, dict)
    return parsed


# ------------------------------------------------------------------------- reading the card's tables


def _cell_value(cell: str) -> Any:
    """A value cell as the card writes it: a code span of JSON, or of a string that reads as itself."""
    cell = cell.strip()
    inner = cell[3:-3] if cell.startswith("`` ") else cell[1:-1]
    assert cell.startswith("`") and cell.endswith("`"), f"not a code span: {cell!r}"
    inner = inner.replace("\\|", "|")
    try:
        return json.loads(inner)
    except ValueError:
        return inner


def section_table(card: str, key: str) -> dict[str, Any] | None:
    """The table under the heading that names the record entry ``key`` (``### ... (`key`)``), unflattened."""
    lines = card.splitlines()
    heading = next((i for i, line in enumerate(lines) if line.startswith("### ") and line.endswith(f"(`{key}`)")), None)
    if heading is None:
        return None
    rows = []
    for line in lines[heading + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    out: dict[str, Any] = {}
    for row in rows[2:]:  # header and rule
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        field, value = cells[0].strip().strip("`"), _cell_value(cells[1])
        *outer, last = field.split(".")
        target = out
        for part in outer:
            target = target.setdefault(part, {})
        target[last] = value
    return out


def _summary_value(card: str, label_start: str) -> Any:
    row = next(line for line in card.splitlines() if line.startswith(f"| {label_start}"))
    return _cell_value(re.split(r"(?<!\\)\|", row)[2])


def _assert_card_states_its_record(card: str, meta: dict[str, Any]) -> None:
    """Every record-derived table of ``card`` equals the record's entry, and the summary its seed and steps."""
    for key in ("env", "trained_range", "playable_range", "model"):
        expected = meta.get(key) or None
        assert section_table(card, key) == expected, key
    config_key = next((k for k in ("pretrain", "meta_rl") if k in meta), None)
    if config_key:
        expected = {k: v for k, v in meta[config_key].items() if k not in ("env", "model")}
        assert section_table(card, config_key) == expected
        if "seed" in meta[config_key]:
            assert _summary_value(card, f"seed (`{config_key}.seed`)") == meta[config_key]["seed"]
    apart = {"history", "command", "command_history", "note"}
    for key in ("training", "finetune"):
        if key in meta:
            assert section_table(card, key) == {k: v for k, v in meta[key].items() if k not in apart}, key
            for field in ("command", "note"):
                if meta[key].get(field):
                    assert str(meta[key][field]) in card
            for command in meta[key].get("command_history") or []:
                assert command is None or command in card
    training = meta.get("training", {})
    field = next((f for f in ("step", "steps", "env_steps") if f in training), None)
    if field is not None:
        label = "environment steps" if field == "env_steps" else "training steps"
        assert _summary_value(card, f"{label} (`training.{field}`)") == training[field]


# ------------------------------------------------------------------------------------------ the tests


def test_every_shipped_model_has_a_card():
    assert len(SHIPPED) >= 19
    sources = sorted(p.stem for p in CARDS_DIR.glob("*.md"))
    assert sources == SHIPPED, "one card source per shipped model, and none for a model not shipped"
    index = json.loads((CARDS_DIR / MODEL_INDEX_FILE).read_text())
    assert set(index) - {"_about"} <= set(SHIPPED)
    for name in SHIPPED:
        card = model_card(name)
        assert card.startswith("---\n") and f"\n# {name}\n" in card
        for heading in (
            "## What it was trained on",
            "## Measured results",
            "## What it is not for",
            "## How to use it",
        ):
            assert f"\n{heading}\n" in card, (name, heading)
        assert is_sealed_card(card)
        assert shipped_name(read_record(resolve_checkpoint(name)).meta) == name


def test_the_metadata_block_parses_and_holds_the_required_keys():
    for name in SHIPPED:
        record = read_record(resolve_checkpoint(name))
        metadata = front_matter(model_card(name))
        assert metadata["library_name"] == "icrl-gym"
        assert metadata["pipeline_tag"] == "reinforcement-learning"
        assert "license" not in metadata, "the package declares no license, so a card must not invent one"
        tags = metadata["tags"]
        assert {"reinforcement-learning", "in-context-learning"} <= set(tags)
        assert ("bandits" if record.kind.entry.family is EnvFamily.BANDIT else "tabular-mdp") in tags
        (entry,) = metadata["model-index"]
        assert entry["name"] == name
        expected = shipped_results(name)
        assert len(entry["results"]) == len(expected) >= 1
        for result, source in zip(entry["results"], expected, strict=True):
            assert result["task"]["type"] == "reinforcement-learning"
            assert result["dataset"]["type"] in ENV_IDS and result["dataset"]["name"]
            assert [m["value"] for m in result["metrics"]] == [float(m["value"]) for m in source["metrics"]]
            assert all(m["type"] and m["name"] and m["verified"] is False for m in result["metrics"])


def test_pyyaml_reads_the_metadata_block_alike():
    yaml = pytest.importorskip("yaml")
    for name in SHIPPED:
        card = model_card(name)
        assert yaml.safe_load(card[4:].partition("\n---\n")[0]) == front_matter(card)


def test_the_yaml_writer_quotes_what_would_read_otherwise():
    value = {
        "plain": "icrl-gym",
        "tricky": ["true", "no", "null", "1.5", "a: b", "# x", '"q"', "± 0.3", "- dash", "", "x|y"],
        "numbers": [0, -3, 0.1, 1e-05, 2.0],
        "flags": [True, False, None],
        "nested": [{"a": 1, "b": {"c": [1, 2]}}, {"empty": {}, "none": []}],
    }
    text = "\n".join(to_yaml(value))
    assert parse_yaml(text) == value
    assert "plain: icrl-gym" in text.splitlines()
    with pytest.raises(ValueError, match="finite"):
        to_yaml({"x": float("nan")})


def test_the_ranges_in_a_card_are_those_of_its_record():
    for name in SHIPPED:
        _assert_card_states_its_record(model_card(name), read_record(resolve_checkpoint(name)).meta)


def test_every_shipped_teacher_is_shipped_under_some_name():
    """A record whose training was labelled by a shipped model names it and its weights' sha256; the name may since
    have gone to a newer model (a shipped model is renamed -vN when its successor ships), so the weights are what
    must still be in the package: the teacher of every shipped model can be loaded and compared."""
    records = {name: read_record(resolve_checkpoint(name)).meta for name in SHIPPED}
    shipped_weights = {meta["weights_sha256"] for meta in records.values()}
    teachers = {name: meta["teacher"] for name, meta in records.items() if "teacher" in meta}
    assert teachers, "no shipped record names its teacher"
    for name, teacher in teachers.items():
        assert teacher["weights_sha256"] in shipped_weights, (name, teacher)


def test_measured_numbers_are_quoted_from_the_docs():
    """Each metadata number is in its card's tables and its doc; each decimal of a card source is in the docs."""
    docs_text = "\n".join(p.read_text() for p in sorted(DOCS.rglob("*.md")))
    docs_numbers = set(re.findall(r"\d+\.\d+", docs_text))
    for name in SHIPPED:
        prose = shipped_prose(name)
        flat = " ".join(prose.replace("`", " ").split())
        for result in shipped_results(name):
            source = (ROOT / result["source"]).read_text()
            for metric in result["metrics"]:
                assert re.search(rf"(?<![\d.]){re.escape(metric['value'])}(?![\d])", source), (name, metric)
                assert re.search(rf"(?<![\d.]){re.escape(metric['value'])}(?![\d])", prose), (name, metric)
            assert " ".join(result["command"].split()) in flat, (name, result["command"])
        invented = sorted(set(re.findall(r"\d+\.\d+", prose)) - docs_numbers)
        assert not invented, f"{name}: numbers that no doc states: {invented}"


def test_the_card_sources_are_package_data():
    setup = (ROOT / "setup.py").read_text()
    patterns = re.findall(r'"(pretrained/[^"]+)"', setup)
    for path in CARDS_DIR.iterdir():
        relative = path.relative_to(PRETRAINED_DIR.parent).as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), f"{relative} is not installed with the package"


def test_export_writes_the_card_and_replaces_only_an_unedited_one(tmp_path):
    stem = resolve_checkpoint("bernoulli-ad-ucb")
    folder = export_hf_folder(stem, tmp_path / "hub")
    assert sorted(p.name for p in folder.iterdir()) == [CARD_FILE, "config.json", "model.safetensors"]
    card = (folder / CARD_FILE).read_text()
    assert card == model_card("bernoulli-ad-ucb") == model_card(folder)
    _assert_card_states_its_record(card, json.loads((folder / "config.json").read_text()))

    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    export_hf_folder(folder, folder)  # onto itself: the same three files, byte for byte
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    export_hf_folder(resolve_checkpoint("bernoulli-ad-ucb-nopos"), folder)  # an earlier export is replaced
    assert "# bernoulli-ad-ucb-nopos\n" in (folder / CARD_FILE).read_text()
    (folder / CARD_FILE).unlink()  # an export made before cards existed is an earlier export too
    export_hf_folder(stem, folder)
    assert (folder / CARD_FILE).read_text() == card

    (folder / CARD_FILE).write_text(card.replace("## What it is not for", "## What it is not for\n\nMy notes."))
    edited = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(FileExistsError, match=r"its README\.md is not the model card export wrote"):
        export_hf_folder(stem, folder)
    (folder / CARD_FILE).write_text("# my model\n")
    with pytest.raises(FileExistsError, match=r"README\.md"):
        export_hf_folder(stem, folder)
    (folder / CARD_FILE).write_bytes(edited[CARD_FILE])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == edited, "a refused export leaves the folder as it was"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub"], "no temporary folder left"


@pytest.fixture(scope="module")
def own_checkpoint(tmp_path_factory) -> Path:
    """A user's checkpoint: a tiny pretraining run saved under a name of the user's."""
    out = tmp_path_factory.mktemp("own")
    model, meta = pretrain(tiny_pretrain_config(out / "runs" / "tiny", name="my-tiny-ad"), echo=False)
    return save_checkpoint(out / "my-tiny-ad", model, meta)


def test_a_users_checkpoint_gets_a_card_from_its_record_alone(own_checkpoint, tmp_path):
    meta = read_record(own_checkpoint).meta
    assert shipped_name(meta) is None
    card = model_card(own_checkpoint)
    metadata = front_matter(card)
    assert metadata["library_name"] == "icrl-gym" and "model-index" not in metadata
    assert "\n# my-tiny-ad\n" in card
    assert "No measured table ships with this checkpoint" in card
    assert "not one of the models shipped" in card
    _assert_card_states_its_record(card, meta)
    folder = export_hf_folder(own_checkpoint, tmp_path / "hub")
    assert (folder / CARD_FILE).read_text() == card
    model, _ = load_checkpoint(folder)  # the exported folder loads as before
    assert model is not None


def test_a_shipped_model_is_known_by_its_weights_not_by_its_name(tmp_path):
    """A user's weights saved under a shipped model's name get no measured table; shipped weights under any name do."""
    model, meta = load_checkpoint(resolve_checkpoint("bernoulli-ad-ucb"))
    shutil.copyfile(PRETRAINED_DIR / "bernoulli-ad-ucb.json", tmp_path / "renamed.json")
    shutil.copyfile(PRETRAINED_DIR / "bernoulli-ad-ucb.safetensors", tmp_path / "renamed.safetensors")
    assert "\n# bernoulli-ad-ucb\n" in model_card(tmp_path / "renamed")
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)
    kept = {k: v for k, v in meta.items() if k not in ("weights_sha256", "content_sha256", "model", "model_class")}
    stem = save_checkpoint(tmp_path / "bernoulli-ad-ucb", model, kept)
    card = card_for_record(read_record(stem).meta)
    assert "No measured table ships with this checkpoint" in card and "model-index" not in front_matter(card)
