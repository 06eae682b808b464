"""The documentation runs: every ```python block of README.md, docs/*.md and docs/research/*.md, verbatim, alone.

Each block runs in a fresh interpreter whose working directory is an empty temporary folder and
which can import the repository, so a block must be self-contained (its own imports) and may not
lean on an earlier block or on files of the checkout.  A block preceded by the line
``<!-- slow -->`` runs only in the slow set (``python -m pytest -m slow``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "research").glob("*.md"))]
SLOW_MARKER = "<!-- slow -->"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    """One ```python block: where it is, its code and whether it is marked slow."""

    path: Path
    line: int
    code: str
    slow: bool

    @property
    def name(self) -> str:
        """``README.md:42``, the test id."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def python_blocks(text: str, path: Path = ROOT / "README.md") -> list[Block]:
    """The ```python blocks of a Markdown text, each with its line and the slow marker before it."""
    blocks = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(path, line, match.group(1), before == SLOW_MARKER))
    return blocks


BLOCKS = [block for path in DOCS for block in python_blocks(path.read_text(), path)]


def test_blocks_found():
    """The extraction sees the README's blocks and reads the slow marker (so the runs below check something)."""
    assert sum(block.path.name == "README.md" for block in BLOCKS) >= 3
    text = "x\n```python\na = 1\n```\n\n<!-- slow -->\n```python\nb = 2\n```\n```bash\nc\n```\n"
    fast, slow = python_blocks(text)
    assert (fast.code, fast.slow, fast.line) == ("a = 1\n", False, 2)
    assert (slow.code, slow.slow, slow.line) == ("b = 2\n", True, 7)


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, id=b.name, marks=[pytest.mark.slow] if b.slow else []) for b in BLOCKS],
)
def test_block_runs(block: Block, tmp_path: Path):
    """The block runs verbatim in a fresh interpreter in an empty folder."""
    script = tmp_path / "block.py"
    script.write_text(block.code)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OMP_NUM_THREADS="1",
        MPLBACKEND="Agg",
    )
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert result.returncode == 0, f"{block.name} failed:\n{block.code}\n--- stderr ---\n{result.stderr[-4000:]}"
