"""Markdown tables of the documentation are well formed: every row has the cells its header names.

A row pasted twice on one line, or a cell with an unescaped ``|``, renders as a broken table; this reads
each table of README.md, docs/, docs/research/ and the model cards with the separator rule GitHub uses
(``|`` outside code spans, ``\\|`` escaped) and compares each row's cell count with its header's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_docs import DOCS as RUNNABLE_DOCS
from tests.test_docs import ROOT

DOCS = [*RUNNABLE_DOCS, *sorted((ROOT / "icrl_gym" / "pretrained" / "cards").glob("*.md"))]
DELIMITER = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def cells(row: str) -> list[str]:
    """The cells of a table row: split at ``|`` outside code spans and not escaped, outer pipes dropped."""
    out, current, code, i = [], "", False, 0
    while i < len(row):
        ch = row[i]
        if ch == "\\" and i + 1 < len(row) and row[i + 1] == "|":
            current += "\\|"
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append(current)
            current = ""
        else:
            current += ch
        i += 1
    out.append(current)
    if row.strip().startswith("|"):
        out = out[1:]
    if row.strip().endswith("|"):
        out = out[:-1]
    return out


def tables(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """(header line number, [(line number, row)]) for every table: a header row, a delimiter row, its rows."""
    lines = text.split("\n")
    found, fenced, i = [], False, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and i + 1 < len(lines) and "|" in lines[i] and DELIMITER.match(lines[i + 1].strip()):
            rows, j = [], i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append((j + 1, lines[j]))
                j += 1
            found.append((i + 1, [(i + 1, lines[i]), *rows]))
            i = j
            continue
        i += 1
    return found


def test_the_splitter_reads_code_spans_and_escapes():
    assert cells("| a | `x | y` | b \\| c |") == [" a ", " `x | y` ", " b \\| c "]
    assert len(tables("| a | b |\n|---|---|\n| 1 | 2 |\n\ntext\n")[0][1]) == 2


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_row_has_its_headers_cells(path: Path):
    bad = []
    for header_line, rows in tables(path.read_text(encoding="utf-8")):
        width = len(cells(rows[0][1]))
        bad += [
            f"line {n}: {len(cells(row))} cells, the header (line {header_line}) has {width}"
            for n, row in rows[1:]
            if len(cells(row)) != width
        ]
    assert not bad, f"{path.relative_to(ROOT)}: " + "; ".join(bad)
