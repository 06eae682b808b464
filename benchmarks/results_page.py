"""The results page: one static, self-contained ``index.html`` beside ``regret.csv``.

Everything a reader needs is inside the one file, so it opens from disk, from an e-mail or from a
static host alike: every figure is embedded as a base64 ``data:image/png`` URI, the style sheet is
inline, and there is no script, no font and no request to any server.  The page holds, in order:

- the summary: for every experiment, its best learned agent against its best expert at the last step
  (mean cumulative regret +- standard error, as in the experiment's table, and the ratio of the two
  means), the generalist experiments first, since they are what a newcomer comes for;
- the contents, then one section per experiment (the generalist experiments first): its figures
  (cumulative regret with +-1 standard-error bands and the per-step suboptimality,
  ``benchmarks/plots.py``) and its summary tables, whose last column holds the paper's numbers where
  the paper reports them;
- the generalization grid, when its folder holds heatmaps: the heatmaps and its summary tables;
- the seeds of the run (every experiment plays seed ``seed`` through common random numbers; the
  generalization grid plays its own seed, read from its ``config.json``) and the run's
  ``config.json`` verbatim, folded in a ``<details>`` element so that it does not fill half the page.

The tables are the Markdown the harness writes to ``summary.md`` (and the grid to its own
``summary.md``), turned into HTML by :func:`markdown_html`, which knows exactly the subset those
files use: headings, paragraphs, pipe tables, ``**bold**`` and ```code```.  The summary's numbers
come from the same curves as the tables and are written by the same :func:`regret_cell`, so they
are equal to the tables' last column character for character.
"""

from __future__ import annotations

import base64
import html
import json
import re
import typing
from collections.abc import Sequence
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
details { margin: 0.8em 0; } summary { cursor: pointer; font-weight: 600; }
td.num { text-align: right; white-space: nowrap; }
"""


def regret_cell(mean: float, se: float) -> str:
    """A regret as the summary tables write it: ``mean +- standard error``, two decimals each.

    The harness's tables and the page's summary both call this, so that the summary repeats the
    tables' numbers exactly instead of rounding them a second way.
    """
    return f"{mean:.2f} +- {se:.2f}"


@dataclass(frozen=True)
class Row:
    """One algorithm of an experiment at its last step: its label and mean cumulative regret +- standard error."""

    label: str
    mean: float
    se: float


@dataclass(frozen=True)
class Headline:
    """One experiment's line of the summary: its best learned row against its best expert row.

    ``best`` means the lowest mean cumulative regret at the last step (``at``: ``t=T`` for bandits,
    ``k=K`` for MDPs).  A row is missing (``None``) when the experiment has no learned or no expert
    row.  ``generalist`` marks the experiments of the generalists (one model for every size), which
    the summary lists first.
    """

    at: str
    learned: Row | None
    expert: Row | None
    generalist: bool = False

    @property
    def ratio(self) -> float | None:
        """Mean regret of the learned row over the expert's (``None`` when either is missing or the expert's is 0)."""
        if self.learned is None or self.expert is None or self.expert.mean <= 0:
            return None
        return self.learned.mean / self.expert.mean


@dataclass
class Section:
    """One part of the page: a title, figures, then Markdown (tables and notes)."""

    anchor: str
    """The ``id`` of the section (a link target of the contents list)."""
    title: str
    markdown: str
    """Shown after the figures (its own ``##`` title, if any, is dropped: ``title`` replaces it)."""
    images: list[Path] = field(default_factory=list)
    headline: Headline | None = None
    """The experiment's line of the summary at the top of the page (``None``: not in the summary)."""


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


def _row_cells(row: Row | None) -> str:
    """The two cells of one compared row: its label and its regret (``none`` when the experiment has no such row)."""
    if row is None:
        return '<td class="note">none</td><td></td>'
    return f'<td>{_inline(row.label)}</td><td class="num">{html.escape(regret_cell(row.mean, row.se))}</td>'


def summary_html(sections: list[Section], grids: list[Section]) -> str:
    """The summary at the top of the page: one table row per experiment, the generalists' table first.

    Each row links to the experiment's section and shows its best learned row and best expert row at
    the last step, with the ratio of their mean regrets; the grids, which compare a generalist cell by
    cell, are linked under the generalists' table.
    """
    head = (
        "<tr><th>experiment</th><th>at</th><th>best learned agent</th><th>regret</th>"
        "<th>best expert</th><th>regret</th><th>learned / expert</th></tr>"
    )
    out = [
        '<h2 id="summary">Summary: best learned agent against best expert</h2>',
        '<p class="note">Mean cumulative regret at the last step (t: bandit steps, k: MDP episodes) '
        "+- one standard error over the runs; lower is better. A ratio below 1 means the learned agent "
        "beat every expert of its experiment. Learned agents are the transformers and meta-RL policies; "
        "experts are the designed algorithms (UCB, Thompson sampling, Gittins, PSRL, ...); the optimal "
        "policy, which knows the instance, is not an expert. Every row of an experiment: its section.</p>",
    ]
    for title, generalist in (("Generalists: one model for every size", True), ("Other experiments", False)):
        rows = [s for s in sections if s.headline is not None and s.headline.generalist == generalist]
        shown_grids = grids if generalist else []
        if not rows and not shown_grids:
            continue
        out.append(f"<h3>{_inline(title)}</h3>")
        if rows:
            body = []
            for s in rows:
                h = typing.cast(Headline, s.headline)
                ratio = "n/a" if h.ratio is None else f"{h.ratio:.2f}"
                body.append(
                    f'<tr><td><a href="#{html.escape(s.anchor)}">{_inline(s.title)}</a></td>'
                    f"<td>{html.escape(h.at)}</td>{_row_cells(h.learned)}{_row_cells(h.expert)}"
                    f'<td class="num">{ratio}</td></tr>'
                )
            out.append("\n".join(["<table>", head, *body, "</table>"]))
        if shown_grids:
            links = ", ".join(f'<a href="#{html.escape(g.anchor)}">{_inline(g.title)}</a>' for g in shown_grids)
            out.append(f"<p>The generalists against the references in every cell of a grid of sizes: {links}.</p>")
    return "\n".join(out)


def render_page(
    title: str, intro: str, sections: list[Section], config: dict[str, Any], seeds: str, grids: Sequence[Section] = ()
) -> str:
    """The whole page as one HTML string (no script; figures embedded).

    The summary comes first, then the contents and the sections (the generalists' first, then the
    grids, then the other experiments), and last the seeds with ``config.json`` folded in ``<details>``.
    """
    generalists = [s for s in sections if s.headline is not None and s.headline.generalist]
    others = [s for s in sections if s.headline is None or not s.headline.generalist]
    ordered = [*generalists, *grids, *others]
    toc = "".join(f'<li><a href="#{html.escape(s.anchor)}">{_inline(s.title)}</a></li>' for s in ordered)
    toc += '<li><a href="#configuration">Configuration and seeds</a></li>'
    body = [
        f"<h1>{_inline(title)}</h1>",
        markdown_html(intro),
        summary_html(sections, list(grids)),
        f'<nav><h2 id="contents">Contents</h2><ul>{toc}</ul></nav>',
    ]
    for s in ordered:
        body.append(f'<section><h2 id="{html.escape(s.anchor)}">{_inline(s.title)}</h2>')
        body += [image_html(p, f"{s.title}: {p.name}") for p in s.images]
        body += [markdown_html(_strip_title(s.markdown)), "</section>"]
    body += [
        '<h2 id="configuration">Configuration and seeds</h2>',
        "<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in seeds.splitlines()) + "</ul>",
        '<details id="config-json"><summary>config.json: the full configuration of the run</summary>',
        f"<pre>{html.escape(json.dumps(config, indent=2))}</pre>",
        "</details>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def write_page(
    out: Path,
    sections: list[Section],
    config: dict[str, Any],
    grid_folders: list[Path],
    extra: Sequence[Section] = (),
) -> Path:
    """Write ``out/index.html`` (atomically) from the experiments' sections, the grids' folders and the config.

    ``extra``: sections shown after the grids' (the Bernoulli frontier's tables).
    """
    grids = [g for g in (grid_section(f) for f in grid_folders) if g is not None] + list(extra)
    reused = config.get("reused") or []
    stored = f" ({len(reused)} reused from the stored results of an earlier, identical run)" if reused else ""
    intro = (
        f"Regret of every algorithm of {len(sections)} experiment(s){stored}, {config.get('runs')} runs each, "
        f"seed {config.get('seed')}, with icrl-gym {__version__} (`python -m benchmarks`; Lin, Bai & Mei, "
        "ICLR 2024). In the figures, bands are +-1 standard error of the mean, learned models solid lines and "
        "experts dashed; in the tables, the column 'paper' holds the paper's regret at T=200 where it reports one."
    )
    page = render_page("icrl-gym benchmark results", intro, sections, config, _seeds(config, grid_folders), grids)
    path = out / PAGE
    atomic_write_bytes(path, page.encode("utf-8"))
    return path
