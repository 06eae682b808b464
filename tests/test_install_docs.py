"""The install commands of README.md and the requirement files they name agree on one torch pin.

The CPU-only and CUDA installs cannot be run here (no index outside the machine's own is reachable),
so this checks what can be checked offline: both requirement files pin the same torch version, the
CPU file points pip at a CPU-only index (and only there), the README gives both commands verbatim,
and the torch installed in this environment is the pinned version.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _requirements(path: Path) -> tuple[list[str], dict[str, Requirement]]:
    options, reqs = [], {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-"):
            options.append(line)
        elif line:
            req = Requirement(line)
            reqs[req.name] = req
    return options, reqs


def test_both_files_pin_the_same_torch_and_the_installed_one_matches():
    _, main = _requirements(ROOT / "requirements.txt")
    options, cpu = _requirements(ROOT / "requirements-cpu.txt")
    assert str(main["torch"].specifier) == str(cpu["torch"].specifier) == "==2.13.0"
    assert list(cpu) == ["torch"]  # the CPU file brings torch alone; everything else comes from requirements.txt
    assert options == ["--index-url https://download.pytorch.org/whl/cpu"]
    assert main["torch"].specifier.contains(Version("2.13.0+cpu"))  # the CPU wheel satisfies the main pin
    assert main["torch"].specifier.contains(Version(torch.__version__))


def test_the_readme_gives_both_installs_verbatim():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    commands = {line.strip() for block in blocks for line in block.splitlines()}
    assert "pip install -r requirements-cpu.txt && pip install -r requirements.txt -e ." in commands
    assert "pip install -r requirements.txt -e ." in commands
    assert "2.7 GB" in text and "fixes the version, not the build" in text
