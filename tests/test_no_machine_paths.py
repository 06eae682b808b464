"""No tracked file outside ``tests/`` names a folder of a developer's machine (a home or work folder).

Records, configs and docs must read the same on any machine: commands relative to the repository,
run folders as ``runs/NAME`` (``icrl_gym.utils.command.portable`` writes recorded commands that way).
The scan covers every tracked text file, the shipped checkpoint records included.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from icrl_gym.utils.command import portable, typed_command

ROOT = Path(__file__).resolve().parents[1]
MACHINE_PATH = re.compile(r"(?<![\w.~-])(?:/(?:root|home|work|Users)/|[A-Za-z]:\\Users\\)")
"""An absolute path into a home folder (``/root``, ``/home/NAME``, ``/Users/NAME``, ``C:\\Users``) or ``/work``."""


def _tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = [ROOT / name for name in listed.decode().split("\0") if name and not name.startswith("tests/")]
    return [p for p in paths if p.is_file() and b"\0" not in p.read_bytes()[:4096]]


def test_the_pattern_finds_machine_paths_and_nothing_else():
    for bad in ("/root/icrl-runs/x", "cd /work/main", "out=/home/ana/runs", '"/Users/bo/x"', "C:\\Users\\bo"):
        assert MACHINE_PATH.search(bad), bad
    for fine in ("runs/work/x", "~/work/x", "docs/home/page", "https://example.org/home/", "a/root/b"):
        assert not MACHINE_PATH.search(fine), fine


def test_no_tracked_file_names_a_machine_folder():
    files = _tracked_text_files()
    assert len(files) > 100  # the scan sees the tree
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for path in files
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not hits, "machine paths:\n" + "\n".join(hits)


def test_recorded_commands_name_no_machine_folder(tmp_path):
    line = f"/usr/bin/python {tmp_path}/icrl_gym/x.py {tmp_path}/c.json --set out_dir={tmp_path}/runs/a d=/h/me/p"
    assert (
        portable(line, cwd=tmp_path, home="/h/me") == "/usr/bin/python icrl_gym/x.py c.json --set out_dir=runs/a d=~/p"
    )
    assert portable(f"cd {tmp_path}", cwd=tmp_path, home="/h/me") == "cd ."
    assert typed_command(["a.json", "steps=3"]).endswith(" a.json steps=3")
    assert typed_command([]).startswith("python ")
