"""The results page: one static, self-contained ``index.html`` beside ``regret.csv``.

Everything a reader needs is inside the one file, so it opens from disk, from an e-mail or from a
static host alike: every figure is embedded as a base64 ``data:image/png`` URI, the style sheet is
inline, and there is no script, no font and no request to any server.  The page holds, in order:

- the run's configuration and seeds (every experiment plays seed ``seed`` through common random
  numbers; the generalization grid plays its own seed, read from its ``config.json``);
- one section per experiment: its figures (cumulative regret with +-1 standard-error bands and the
  per-step suboptimality, ``benchmarks/plots.py``) and its summary tables, whose last column holds the
  paper's numbers where the paper reports them;
- the generalization grid, when its folder holds heatmaps: the heatmaps and its summary tables;
- the run's ``config.json`` verbatim.

The tables are the Markdown the harness writes to ``summary.md`` (and the grid to its own
``summary.md``), turned into HTML by :func:`markdown_html`, which knows exactly the subset those
files use: headings, paragraphs, pipe tables, ``**bold**`` and ```code```.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icrl_gym import __version__
from icrl_gym.utils.fileio import atomic_write_bytes

PAGE = "index.html"
"""File name of the page in the results folder."""

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1280px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2.2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; display: block; margin: 0.8em 0; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
nav ul { columns: 2; } .note { color: #555; }
"""


@dataclass
class Section:
    """One part of the page: a title, figures, then Markdown (tables and notes)."""

    anchor: str
    """The ``id`` of the section (a link target of the contents list)."""
    title: str
    markdown: str
    """Shown after the figures (its own ``##`` title, if any, is dropped: ``title`` replaces it)."""
    images: list[Path] = field(default_factory=list)


def _inline(text: str) -> str:
    """Escaped text with ``**bold**`` and ```code``` marked up."""
    text = html.escape(text, quote=False)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_html(text: str) -> str:
    """HTML of the Markdown subset of the summaries: ``#``-headings, paragraphs and pipe tables.

    A table is a run of lines starting with ``|``; its second line is the ``|---|`` separator, so
    the first is the header.  Every other run of non-blank lines is one paragraph.
    """
    out: list[str] = []
    blocks: list[list[str]] = []
    for line in text.splitlines():
        kind = "table" if line.lstrip().startswith("|") else "text"
        if not line.strip():
            blocks.append([])
        elif line.startswith("#"):
            blocks.append([line])
            blocks.append([])
        elif blocks and blocks[-1] and (blocks[-1][0].lstrip().startswith("|")) == (kind == "table"):
            blocks[-1].append(line)
        else:
            blocks.append([line])
    for block in blocks:
        if not block:
            continue
        first = block[0]
        if first.startswith("#"):
            level = min(len(first) - len(first.lstrip("#")), 6)
            out.append(f"<h{level}>{_inline(first.lstrip('#').strip())}</h{level}>")
        elif first.lstrip().startswith("|"):
            rows = [_cells(line) for line in block]
            head, body = (rows[0], rows[2:]) if len(rows) > 1 and set("".join(rows[1])) <= set("-: ") else ([], rows)
            parts = ["<table>"]
            if head:
                parts.append("<tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in body]
            out.append("\n".join([*parts, "</table>"]))
        else:
            out.append(f"<p>{_inline(' '.join(line.strip() for line in block))}</p>")
    return "\n".join(out)


def image_html(path: Path, alt: str) -> str:
    """An ``<img>`` whose source is the PNG file itself, base64-encoded in a data URI."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _strip_title(markdown: str) -> str:
    """``markdown`` without its leading ``#``/``##`` heading line."""
    lines = markdown.lstrip("\n").splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("#") else lines)


def grid_section(folder: Path) -> Section | None:
    """The generalization grid's heatmaps and tables from its folder (``None`` when it holds no heatmap)."""
    heatmaps = sorted(folder.glob("heatmap-*.png"))
    if not heatmaps:
        return None
    summary = folder / "summary.md"
    text = summary.read_text() if summary.is_file() else ""
    return Section(folder.name, f"Generalization grid ({folder.name}/)", text, heatmaps)


def _seeds(config: dict[str, Any], grid_folders: list[Path]) -> str:
    """Markdown list of the seeds: the run's, and each grid's (read from its config.json)."""
    lines = [
        f"- experiments: seed {config.get('seed')}, {config.get('runs')} runs; every row of an experiment plays "
        "the same instances and noise (common random numbers)"
    ]
    for folder in grid_folders:
        try:
            grid = json.loads((folder / "config.json").read_text())
            lines.append(f"- {folder.name}: seed {grid['seed']}, {grid['runs']} runs per row and cell")
        except (OSError, ValueError, KeyError, TypeError):
            lines.append(f"- {folder.name}: its config.json is missing or unreadable")
    return "\n".join(lines)


def render_page(title: str, intro: str, sections: list[Section], config: dict[str, Any], seeds: str) -> str:
    """The whole page as one HTML string (no script; figures embedded)."""
    toc = "".join(f'<li><a href="#{html.escape(s.anchor)}">{_inline(s.title)}</a></li>' for s in sections)
    body = [
        f"<h1>{_inline(title)}</h1>",
        markdown_html(intro),
        '<h2 id="configuration">Configuration and seeds</h2>',
        "<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in seeds.splitlines()) + "</ul>",
        '<p>The full configuration (<a href="#config-json">config.json</a>) is at the end of the page.</p>',
        f'<nav><h2 id="contents">Contents</h2><ul>{toc}</ul></nav>',
    ]
    for s in sections:
        body.append(f'<section><h2 id="{html.escape(s.anchor)}">{_inline(s.title)}</h2>')
        body += [image_html(p, f"{s.title}: {p.name}") for p in s.images]
        body += [markdown_html(_strip_title(s.markdown)), "</section>"]
    body += [
        '<h2 id="config-json">config.json</h2>',
        f"<pre>{html.escape(json.dumps(config, indent=2))}</pre>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def write_page(out: Path, sections: list[Section], config: dict[str, Any], grid_folders: list[Path]) -> Path:
    """Write ``out/index.html`` (atomically) from the experiments' sections, the grids' folders and the config."""
    grids = [g for g in (grid_section(f) for f in grid_folders) if g is not None]
    reused = config.get("reused") or []
    stored = f" ({len(reused)} reused from the stored results of an earlier, identical run)" if reused else ""
    intro = (
        f"Regret of every algorithm of {len(sections)} experiment(s){stored}, {config.get('runs')} runs each, "
        f"with icrl-gym {__version__} (`python -m benchmarks`; Lin, Bai & Mei, ICLR 2024). "
        "Bands in the figures are +-1 standard error of the mean; the column 'paper' holds the paper's "
        "regret at T=200 where it reports one. Learned models are solid lines, experts dashed."
    )
    page = render_page("icrl-gym benchmark results", intro, [*sections, *grids], config, _seeds(config, grid_folders))
    path = out / PAGE
    atomic_write_bytes(path, page.encode("utf-8"))
    return path
