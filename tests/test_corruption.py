"""Corruption fuzz of the two stored artefacts: trajectory files (.npz) and checkpoints (.safetensors + .json).

Every corruption (random bit flips and byte overwrites anywhere, flips restricted to the zip local
headers, the npy headers, the central directory, the safetensors JSON header and the record,
truncations, and targeted edits as a person with an editor or a zip tool would make them) must
either raise the artefact's own error (``DatasetError`` / ``CheckpointError``) or, only where the
bytes still mean the same thing (a flip in a zip field the reader ignores, whitespace in a
record), load data equal to the original.  A different load or any other exception fails.

The content hashes are recomputed here independently (hashlib over the members as stored), so
the tests also pin down what the hash covers.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from icrl_gym.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, read_record, save_checkpoint
from icrl_gym.data.trajectories import (
    DatasetError,
    TrajectoryData,
    collect_trajectories,
    load_trajectories,
    save_trajectories,
)
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.hub import export_hf_folder
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig

FAST_CORRUPTIONS = 100
SLOW_CORRUPTIONS = 1200


# ---------------------------------------------------------------------------------------------
# independent recomputation of the hashes (what a third-party reader would do)


def _canonical(record: dict) -> bytes:
    body = {k: v for k, v in record.items() if k != "content_sha256"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _npz_members(raw: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def _npy(body: bytes) -> np.ndarray:
    return np.lib.format.read_array(io.BytesIO(body), allow_pickle=False)


def _trajectory_hash(members: dict[str, bytes], record: dict) -> str:
    digest = hashlib.sha256()
    for filename in sorted(members):
        name = filename[: -len(".npy")]
        if name == "meta_json":
            continue
        arr = np.ascontiguousarray(_npy(members[filename]))
        digest.update(json.dumps([name, arr.dtype.str, list(arr.shape)], separators=(",", ":")).encode() + b"\n")
        digest.update(arr.tobytes())
    digest.update(_canonical(record))
    return digest.hexdigest()


def _zip(members: dict[str, bytes]) -> bytes:
    """An .npz holding ``members`` as ``np.savez`` writes them (stored, valid CRCs): an edit made with a zip tool."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return buf.getvalue()


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _restamped_npz(arrays: dict[str, np.ndarray], meta: dict) -> bytes:
    """A file whose record and arrays are consistently hashed (a consistent forgery or a buggy writer)."""
    members = {f"{k}.npy": _npy_bytes(v) for k, v in arrays.items()}
    meta = {k: v for k, v in meta.items() if k != "content_sha256"}
    meta["content_sha256"] = _trajectory_hash(members, meta)
    members["meta_json.npy"] = _npy_bytes(np.array(json.dumps(meta)))
    return _zip(members)


# ---------------------------------------------------------------------------------------------
# the artefacts


@pytest.fixture(scope="module")
def trajectory_file(tmp_path_factory) -> tuple[Path, TrajectoryData]:
    """A small dataset whose larger members exceed zipfile's 4 kB read-ahead (headers parse before CRC checks)."""
    spec = linear_bandit_spec(horizon=20, num_actions=5, dim=4)
    data = collect_trajectories(
        spec, "linucb", 40, seed=0, label="expert", expert="linucb", store_values=True, store_probs=True
    )
    path = save_trajectories(data, tmp_path_factory.mktemp("traj") / "orig.npz")
    return path, load_trajectories(path)


def _tiny_model() -> BanditTransformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(n_layer=1, n_head=2, n_embd=8, num_actions=3, dim=2, horizon=6, attention="relu")
    return BanditTransformer(cfg)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    meta = {"env": linear_bandit_spec(horizon=6, num_actions=3, dim=2).to_dict(), "training": {"steps": 0}}
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", _tiny_model(), meta)


def _same_data(a: TrajectoryData, b: TrajectoryData) -> bool:
    x, y = a.arrays(), b.arrays()
    return (
        x.keys() == y.keys()
        and all(x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and np.array_equal(x[k], y[k]) for k in x)
        and a.meta == b.meta
    )


def _same_checkpoint(a: tuple[dict, dict], b: tuple[dict, dict]) -> bool:
    (sa, ma), (sb, mb) = a, b
    return (
        ma == mb
        and sa.keys() == sb.keys()
        and all(sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k]) for k in sa)
    )


# ---------------------------------------------------------------------------------------------
# corruption generators


def _flip(buf: bytearray, positions: np.ndarray, rng: np.random.Generator) -> None:
    """1 to 3 random bit flips or byte overwrites at ``positions`` (indices into ``buf``)."""
    for _ in range(int(rng.integers(1, 4))):
        i = int(positions[rng.integers(len(positions))])
        if rng.random() < 0.5:
            buf[i] ^= 1 << int(rng.integers(8))
        else:
            buf[i] = int(rng.integers(256))


def _npz_header_positions(raw: bytes) -> np.ndarray:
    """Byte offsets of the zip local headers, the npy headers and the central directory of an .npz."""
    spans = []
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        infos = zf.infolist()
        for info in infos:
            start = info.header_offset
            name_len, extra_len = struct.unpack("<HH", raw[start + 26 : start + 30])
            data = start + 30 + name_len + extra_len
            spans.append((start, data))  # local file header
            spans.append((data, raw.index(b"\n", data) + 1))  # npy magic + header
        spans.append((zf.start_dir, len(raw)))  # central directory + end record
    return np.concatenate([np.arange(a, b) for a, b in spans])


def _edit_npy_header(body: bytes, old: bytes, new: bytes) -> bytes:
    """``body`` with ``old`` replaced by ``new`` in its npy header, the padding adjusted to keep the header length."""
    end = body.index(b"\n")
    header = body[:end].replace(old, new, 1)
    assert header != body[:end], old
    pad = len(header) - end
    header = header[:-pad] if pad > 0 else header + b" " * -pad
    assert header.endswith(b" ") or pad <= 0
    return header + body[end:]


def _targeted_npz_edits(raw: bytes) -> list[tuple[str, bytes]]:
    """Edits a person could make: one-byte header edits in place, and consistent zip rewrites of a member."""
    members = _npz_members(raw)
    rewards = members["rewards.npy"]
    meta = json.loads(str(_npy(members["meta_json.npy"])[()]))
    unhashed = {k: v for k, v in meta.items() if k != "content_sha256"}

    def rezip(name: str, body: bytes) -> bytes:
        return _zip({**members, name: body})

    def record(edited: dict) -> bytes:
        return rezip("meta_json.npy", _npy_bytes(np.array(json.dumps(edited, indent=2, sort_keys=True))))

    def header_edit(old: bytes, new: bytes) -> bytes:
        return rezip("rewards.npy", _edit_npy_header(rewards, old, new))

    at = raw.index(rewards)  # the member's bytes, stored uncompressed
    in_place = bytearray(raw)
    in_place[at : at + len(rewards)] = rewards.replace(b"<f4", b"<f2", 1)
    shape = repr(_npy(rewards).shape).encode()
    env = meta["env"]
    edits = [
        ("<f4 -> <f2 in place", bytes(in_place)),
        ("<f4 -> <f2 rezipped", header_edit(b"<f4", b"<f2")),
        ("<f4 -> <i4 rezipped", header_edit(b"<f4", b"<i4")),
        ("<f4 -> >f4 rezipped", header_edit(b"<f4", b">f4")),
        ("shape transposed", header_edit(shape, repr(_npy(rewards).shape[::-1]).encode())),
        ("shape grown", header_edit(shape, b"(40, 21)")),
        ("absurd shape", header_edit(shape, b"(10000000000000, 20)")),
        ("fortran order", header_edit(b"False", b"True")),
        ("object dtype", header_edit(b"'<f4'", b"'|O'")),
        ("data replaced", rezip("rewards.npy", _npy_bytes(_npy(rewards) + 1))),
        ("member dropped", _zip({k: v for k, v in members.items() if k != "label_values.npy"})),
        ("member added", rezip("extra.npy", _npy_bytes(np.zeros(3)))),
        ("member renamed", _zip({("reward.npy" if k == "rewards.npy" else k): v for k, v in members.items()})),
        ("dim edited", record({**meta, "env": {**env, "dim": 7}})),
        ("horizon edited", record({**meta, "env": {**env, "horizon": 999}})),
        ("label edited", record({**meta, "label": "none"})),
        ("seed edited", record({**meta, "seed": 1})),
        ("hash nulled", record({**meta, "content_sha256": None})),
        ("hash dropped", record(unhashed)),
        ("record not JSON", rezip("meta_json.npy", _npy_bytes(np.array("{not json")))),
        ("record not text", rezip("meta_json.npy", _npy_bytes(np.arange(3)))),
        ("record a list", rezip("meta_json.npy", _npy_bytes(np.array("[1, 2]")))),
    ]
    assert all(body != raw for _, body in edits), [name for name, body in edits if body == raw]
    return edits


def trajectory_corruptions(raw: bytes, rng: np.random.Generator, n: int) -> Iterator[tuple[str, bytes]]:
    """``n`` corruptions of an .npz: the targeted edits, then random ones of every kind in turn."""
    targeted = _targeted_npz_edits(raw)
    yield from targeted
    members = _npz_members(raw)
    names = sorted(members)
    everywhere, headers = np.arange(len(raw)), _npz_header_positions(raw)
    for i in range(n - len(targeted)):
        kind = ("flip anywhere", "flip in headers", "npy header flip rezipped", "truncation")[i % 4]
        if kind == "truncation":
            yield kind, raw[: int(rng.integers(len(raw)))]
            continue
        if kind == "npy header flip rezipped":
            name = names[rng.integers(len(names))]
            body = bytearray(members[name])
            _flip(body, np.arange(body.index(b"\n") + 1), rng)
            yield kind, _zip({**members, name: bytes(body)})
            continue
        buf = bytearray(raw)
        _flip(buf, everywhere if kind == "flip anywhere" else headers, rng)
        yield kind, bytes(buf)


def _safetensors_header_positions(blob: bytes) -> np.ndarray:
    return np.arange(8 + struct.unpack("<Q", blob[:8])[0])


def _targeted_checkpoint_edits(weights: bytes, record: bytes) -> list[tuple[str, bytes, bytes]]:
    meta = json.loads(record)
    header_len = struct.unpack("<Q", weights[:8])[0]
    header = json.loads(weights[8 : 8 + header_len])

    def edit(**changes) -> bytes:
        return json.dumps({**meta, **changes}, indent=2, sort_keys=True).encode()

    def restamp(blob: bytes) -> bytes:
        """The record of ``blob`` with both hashes recomputed: a consistent forgery."""
        forged = {**meta, "weights_sha256": hashlib.sha256(blob).hexdigest()}
        forged["content_sha256"] = hashlib.sha256(_canonical(forged)).hexdigest()
        return json.dumps(forged).encode()

    name = next(k for k in header if k != "__metadata__")
    bad_header = json.dumps({**header, name: {**header[name], "data_offsets": [0, 10**12]}}).encode()
    bad_blob = struct.pack("<Q", len(bad_header)) + bad_header + weights[8 + header_len :]
    f16 = weights.replace(b'"F32"', b'"F16"', 1)
    return [
        ("n_head edited", weights, edit(model={**meta["model"], "n_head": 1})),
        ("attention edited", weights, edit(model={**meta["model"], "attention": "softmax"})),
        ("weights hash edited", weights, edit(weights_sha256="0" * 64)),
        ("steps edited", weights, edit(training={"steps": 5})),
        ("version 1 with a hash", weights, edit(format_version=1)),
        ("hash removed", weights, json.dumps({k: v for k, v in meta.items() if k != "content_sha256"}).encode()),
        ("record hash edited", weights, edit(content_sha256="0" * 64)),
        ("record is a list", weights, b"[1, 2]"),
        ("record not UTF-8", weights, b"\xff\xfe" + record[2:]),
        ("F32 -> F16 in the safetensors header", f16, record),
        ("F32 -> F16, both hashes forged", f16, restamp(f16)),
        ("offsets past the end, both hashes forged", bad_blob, restamp(bad_blob)),
        ("weights truncated, both hashes forged", weights[:50], restamp(weights[:50])),
        ("empty weights", b"", record),
    ]


def checkpoint_corruptions(
    weights: bytes, record: bytes, rng: np.random.Generator, n: int
) -> Iterator[tuple[str, bytes, bytes]]:
    """``n`` corruptions of a checkpoint (weights and record): targeted edits, then random ones of every kind."""
    targeted = _targeted_checkpoint_edits(weights, record)
    yield from targeted
    header = _safetensors_header_positions(weights)
    for i in range(n - len(targeted)):
        kind = (
            "weights flip anywhere",
            "safetensors header flip",
            "weights truncation",
            "record flip",
            "record truncation",
        )[i % 5]
        w, r = bytearray(weights), bytearray(record)
        if kind == "weights truncation":
            w = w[: int(rng.integers(len(w)))]
        elif kind == "record truncation":
            r = r[: int(rng.integers(len(r)))]
        elif kind == "record flip":
            _flip(r, np.arange(len(r)), rng)
        else:
            _flip(w, header if kind == "safetensors header flip" else np.arange(len(w)), rng)
        yield kind, bytes(w), bytes(r)


# ---------------------------------------------------------------------------------------------
# the fuzz


def _classify(load: Callable[[], object], same: Callable[[object], bool], error: type[Exception]) -> str:
    try:
        loaded = load()
    except error:
        return "error"
    except Exception as err:  # a raw traceback: counted, and the test fails naming it
        return f"RAW {type(err).__name__}: {err}"
    return "identical" if same(loaded) else "DIFFERENT"


def fuzz_trajectories(path: Path, reference: TrajectoryData, n: int, seed: int) -> collections.Counter:
    raw, target = path.read_bytes(), path.with_name("corrupt.npz")
    counts: collections.Counter = collections.Counter()
    for kind, body in trajectory_corruptions(raw, np.random.default_rng(seed), n):
        target.write_bytes(body)
        outcome = _classify(lambda: load_trajectories(target), lambda d: _same_data(d, reference), DatasetError)
        counts[outcome if outcome in ("error", "identical") else f"{outcome} <- {kind}"] += 1
    return counts


def fuzz_checkpoints(stem: Path, n: int, seed: int) -> collections.Counter:
    weights, record = stem.with_suffix(".safetensors").read_bytes(), stem.with_suffix(".json").read_bytes()
    reference = read_checkpoint(stem)
    target = stem.with_name("corrupt")
    counts: collections.Counter = collections.Counter()
    for kind, w, r in checkpoint_corruptions(weights, record, np.random.default_rng(seed), n):
        target.with_suffix(".safetensors").write_bytes(w)
        target.with_suffix(".json").write_bytes(r)
        outcome = _classify(lambda: read_checkpoint(target), lambda c: _same_checkpoint(c, reference), CheckpointError)
        counts[outcome if outcome in ("error", "identical") else f"{outcome} <- {kind}"] += 1
    return counts


def _assert_clean(counts: collections.Counter, n: int) -> None:
    assert sum(counts.values()) == n
    assert set(counts) <= {"error", "identical"}, {k: v for k, v in counts.items() if k not in ("error", "identical")}
    assert counts["error"] > 0.8 * n


def test_trajectory_fuzz(trajectory_file):
    path, reference = trajectory_file
    counts = fuzz_trajectories(path, reference, FAST_CORRUPTIONS, seed=0)
    _assert_clean(counts, FAST_CORRUPTIONS)


def test_checkpoint_fuzz(checkpoint):
    counts = fuzz_checkpoints(checkpoint, FAST_CORRUPTIONS, seed=0)
    _assert_clean(counts, FAST_CORRUPTIONS)


@pytest.mark.slow
def test_trajectory_fuzz_thorough(trajectory_file):
    path, reference = trajectory_file
    counts = fuzz_trajectories(path, reference, SLOW_CORRUPTIONS, seed=1)
    print(f"trajectory fuzz: {dict(counts)}")
    _assert_clean(counts, SLOW_CORRUPTIONS)


@pytest.mark.slow
def test_checkpoint_fuzz_thorough(checkpoint):
    counts = fuzz_checkpoints(checkpoint, SLOW_CORRUPTIONS, seed=1)
    print(f"checkpoint fuzz: {dict(counts)}")
    _assert_clean(counts, SLOW_CORRUPTIONS)


def test_every_targeted_edit_is_refused(trajectory_file, checkpoint, tmp_path):
    """The targeted edits change meaning, so each one is an error naming the file (none may load)."""
    path, _ = trajectory_file
    loaded = []
    for name, body in _targeted_npz_edits(path.read_bytes()):
        (tmp_path / "e.npz").write_bytes(body)
        with pytest.raises(DatasetError, match="e.npz"):
            load_trajectories(tmp_path / "e.npz")
            loaded.append(name)
    weights, record = checkpoint.with_suffix(".safetensors").read_bytes(), checkpoint.with_suffix(".json").read_bytes()
    for name, w, r in _targeted_checkpoint_edits(weights, record):
        (tmp_path / "e.safetensors").write_bytes(w)
        (tmp_path / "e.json").write_bytes(r)
        with pytest.raises(CheckpointError, match=r"e\.(json|safetensors)"):
            read_checkpoint(tmp_path / "e")
            loaded.append(name)
    assert not loaded


# ---------------------------------------------------------------------------------------------
# what the hashes cover, checked against the independent computation


def test_trajectory_hash_matches_an_independent_computation(trajectory_file):
    path, _ = trajectory_file
    members = _npz_members(path.read_bytes())
    meta = json.loads(str(_npy(members["meta_json.npy"])[()]))
    assert meta["format_version"] == 3
    assert meta["content_sha256"] == _trajectory_hash(members, meta)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar == meta


def test_checkpoint_record_hash_matches_an_independent_computation(checkpoint):
    meta = json.loads(checkpoint.with_suffix(".json").read_text())
    assert meta["format_version"] == 2
    assert meta["weights_sha256"] == hashlib.sha256(checkpoint.with_suffix(".safetensors").read_bytes()).hexdigest()
    assert meta["content_sha256"] == hashlib.sha256(_canonical(meta)).hexdigest()


def test_an_edited_record_loads_no_other_model(checkpoint, tmp_path):
    """Item 2: before the record hash, editing attention or n_head built a different model silently."""
    weights, record = checkpoint.with_suffix(".safetensors").read_bytes(), checkpoint.with_suffix(".json").read_bytes()
    meta = json.loads(record)
    for field, value in (("attention", "softmax"), ("n_head", 1)):
        (tmp_path / "m.safetensors").write_bytes(weights)
        edited = {**meta, "model": {**meta["model"], field: value}}
        (tmp_path / "m.json").write_text(json.dumps(edited, indent=2, sort_keys=True))
        for read in (read_checkpoint, read_record, load_checkpoint):
            with pytest.raises(CheckpointError, match=r"record .*m\.json was edited or is corrupt"):
                read(tmp_path / "m")


def test_a_saved_checkpoint_round_trips_into_a_hub_folder(checkpoint, tmp_path):
    folder = export_hf_folder(checkpoint, tmp_path / "hub")
    assert _same_checkpoint(read_checkpoint(folder), read_checkpoint(checkpoint))
    config = folder / "config.json"
    config.write_text(config.read_text().replace('"n_head": 2', '"n_head": 1'))
    with pytest.raises(CheckpointError, match="config.json was edited or is corrupt"):
        read_checkpoint(folder)
