"""The results page ``index.html``: self-contained, every figure a valid embedded PNG, the tables and seeds on it.

It opens with the summary (best learned row against best expert row per experiment, the generalists
first, numbers equal to the tables') and folds the configuration into ``<details>``.

The page is checked by parsing it (always) and, where a Chromium is installed, by rendering it in a
headless browser: every image must load and the console must stay silent.
"""

import base64
import csv
import html
import io
import json
import re
import shutil
import subprocess
import zlib
from html.parser import HTMLParser

import matplotlib.image
import numpy as np
import pytest

from benchmarks.experiments.rows import LEARNED
from benchmarks.experiments.suite.cells import EXPERIMENTS
from benchmarks.experiments.suite.report import ORACLES, experiment_headline
from benchmarks.harness.cli import main
from benchmarks.plots import plot_files
from benchmarks.results_page import markdown_html

EXPERIMENT = "generalist-bernoulli-k5-t200"
"""Cheap (3 runs of four rows) and with a paper number (TS 10.7)."""
OTHER = "ood-bernoulli-narrow"
"""A cheap experiment of the fixed-size models, run before the generalist's: the page must still list it second."""
PAGE_ORDER = (EXPERIMENT, OTHER)
"""The sections' order on the page: the generalists first, whatever the command line's order."""


class PageParser(HTMLParser):
    """Collects every tag with its attributes, the text of table cells and of headings."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cells: list[str] = []
        self.headings: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("td", "th", "h1", "h2", "h3"):
            self._in, self._text = tag, ""

    def handle_endtag(self, tag):
        if tag == self._in:
            (self.cells if tag in ("td", "th") else self.headings).append(self._text.strip())
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text += data


def png_chunks(data: bytes) -> list[bytes]:
    """The chunk types of a PNG, checking its signature and every chunk's CRC (an independent reader)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, kinds = 8, []
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        crc = int.from_bytes(data[pos + 8 + length : pos + 12 + length], "big")
        assert len(body) == length and zlib.crc32(kind + body) == crc, f"damaged {kind!r} chunk"
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    return kinds


def embedded_pngs(page: str) -> list[bytes]:
    """The decoded bytes of every ``<img>`` of the page (each must be a base64 PNG data URI)."""
    parser = PageParser()
    parser.feed(page)
    images = []
    for tag, attrs in parser.tags:
        if tag == "img":
            src = attrs.get("src") or ""
            assert src.startswith("data:image/png;base64,"), src[:60]
            images.append(base64.b64decode(src.split(",", 1)[1], validate=True))
    return images


class RowParser(HTMLParser):
    """The text of every table row's cells, one list per ``<tr>``."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def table_rows(fragment: str) -> list[list[str]]:
    """The cells of every table row of an HTML fragment."""
    parser = RowParser()
    parser.feed(fragment)
    return parser.rows


def section_html(page: str, anchor: str) -> str:
    """The HTML of the page's section whose heading has the id ``anchor``."""
    start = page.index(f'<section><h2 id="{anchor}">')
    return page[start : page.index("</section>", start)]


def summary_html(page: str) -> str:
    """The HTML of the page's summary: from its heading to the contents list."""
    return page[page.index('<h2 id="summary">') : page.index('<nav><h2 id="contents">')]


def experiment_markdown(run, name: str) -> str:
    """The part of the run's ``summary.md`` about experiment ``name``: from its title to the next title."""
    text = (run / "summary.md").read_text()
    return text.split(f"## {EXPERIMENTS[name].title}\n", 1)[1].split("\n## ", 1)[0]


def final_means(run) -> dict[str, dict[str, float]]:
    """Mean cumulative regret at the last step of every row, read from ``regret.csv`` (an independent reader)."""
    means: dict[str, dict[str, float]] = {}
    with open(run / "regret.csv", newline="") as fh:
        for line in csv.DictReader(fh):  # the steps come in order: the last one read is the last step
            means.setdefault(line["experiment"], {})[line["algorithm"]] = float(line["cumulative_regret_mean"])
    return means


def check_page(page: str) -> PageParser:
    """Self-contained: no script, no external resource; every image a complete PNG that decodes."""
    parser = PageParser()
    parser.feed(page)
    assert not [t for t, _ in parser.tags if t in ("script", "link", "iframe", "object", "embed")]
    for tag, attrs in parser.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            assert value is None or value.startswith(("data:", "#")), (tag, name, value[:80])
    for data in embedded_pngs(page):
        png_chunks(data)
        pixels = matplotlib.image.imread(io.BytesIO(data), format="png")
        assert pixels.ndim == 3 and min(pixels.shape[:2]) >= 40 and np.ptp(pixels) > 0
    return parser


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("page")
    main(["--experiments", f"{OTHER},{EXPERIMENT}", "--runs", "3", "--seed", "5", "--out", str(out), "--quiet"])
    return out


def test_page_embeds_every_figure_table_and_seed(run):
    page = (run / "index.html").read_text()
    parser = check_page(page)
    exp = EXPERIMENTS[EXPERIMENT]
    images = embedded_pngs(page)
    figures = [f for name in PAGE_ORDER for f in plot_files(EXPERIMENTS[name])]
    assert images == [(run / f).read_bytes() for f in figures]  # the run's own figures, generalists first
    assert exp.title in parser.headings
    summary = experiment_markdown(run, EXPERIMENT)
    section = table_rows(section_html(page, EXPERIMENT))
    for label in exp.algorithms:  # every row of the summary, with the same numbers, in the experiment's section
        row = next(line for line in summary.splitlines() if line.startswith(f"| {label} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells in section
    assert "paper (t=200)" in parser.cells and "10.7" in parser.cells  # the paper's TS, next to ours
    assert "seed 5, 3 runs" in page
    config = json.loads((run / "config.json").read_text())
    pre = re.search(r"<pre>(.*?)</pre>", page, re.S)
    assert pre is not None and json.loads(html.unescape(pre.group(1))) == config


def test_page_opens_with_the_summary_generalists_first(run):
    """The summary is the first thing under the title, before any figure or section, generalists first."""
    page = (run / "index.html").read_text()
    parser = check_page(page)
    assert parser.headings[:3] == [
        "icrl-gym benchmark results",
        "Summary: best learned agent against best expert",
        "Generalists: one model for every size",
    ]
    summary = summary_html(page)
    assert page.index(summary) < min(page.index("<img"), page.index("<section"), page.index("<details"))
    assert summary.index("Generalists: one model for every size") < summary.index("Other experiments")
    rows = [row for row in table_rows(summary) if row[0] != "experiment"]
    assert [row[0] for row in rows] == [EXPERIMENTS[name].title for name in PAGE_ORDER]
    for name in PAGE_ORDER:  # each row links to its experiment's section
        assert f'<a href="#{name}">{html.escape(EXPERIMENTS[name].title, quote=False)}</a>' in summary
    sections = re.findall(r'<section><h2 id="([^"]+)">', page)
    assert sections == list(PAGE_ORDER)  # the sections too: generalists first


def test_summary_numbers_are_the_tables_numbers(run):
    """Each summary row: the best learned and the best expert row at T, their regret cells equal to the tables'."""
    page = (run / "index.html").read_text()
    means = final_means(run)
    rows = {row[0]: row for row in table_rows(summary_html(page)) if row[0] != "experiment"}
    assert len(rows) == len(PAGE_ORDER)
    for name in PAGE_ORDER:
        exp = EXPERIMENTS[name]
        _, at, learned, learned_regret, expert, expert_regret, ratio = rows[exp.title]
        horizon = exp.spec.horizon
        assert at == f"t={horizon}"
        agent = {label: spec["name"] for label, spec in exp.algorithms.items()}
        final = means[name]
        learned_rows = {label: m for label, m in final.items() if agent[label] in LEARNED}
        expert_rows = {label: m for label, m in final.items() if agent[label] not in (*LEARNED, *ORACLES)}
        assert learned == min(learned_rows, key=learned_rows.__getitem__)
        assert expert == min(expert_rows, key=expert_rows.__getitem__)
        block = experiment_markdown(run, name)
        section = table_rows(section_html(page, name))
        table = [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines() if line.startswith("|")]
        column = table[0].index(f"regret at t={horizon}")
        for label, regret in ((learned, learned_regret), (expert, expert_regret)):
            assert next(row for row in table if row[0] == label)[column] == regret  # summary.md's table
            assert next(row for row in section if row[0] == label)[column] == regret  # the page's own table
        assert float(ratio) == pytest.approx(final[learned] / final[expert], abs=0.0051)


def test_configuration_is_folded_in_details(run):
    """config.json is on the page verbatim, but inside a closed ``<details>`` at its end, not spread over half of it."""
    page = (run / "index.html").read_text()
    details = re.search(r"<details( [^>]*)?>(.*?)</details>", page, re.S)
    assert details is not None and " open" not in (details.group(1) or "")
    assert page.index("<details") > page.rindex("</section>")
    assert re.search(r"<summary>[^<]*config\.json", details.group(2))
    pre = re.search(r"<pre>(.*?)</pre>", details.group(2), re.S)
    assert pre is not None and page.count("<pre>") == 1
    assert json.loads(html.unescape(pre.group(1))) == json.loads((run / "config.json").read_text())


def curves_of(means: dict[str, float], steps: int) -> dict[str, dict[str, np.ndarray]]:
    """Curves whose cumulative regret ends at each row's given mean (standard error 0.1)."""
    return {
        label: {
            "cumulative_regret_mean": np.linspace(0, mean, steps),
            "cumulative_regret_se": np.full(steps, 0.1),
        }
        for label, mean in means.items()
    }


def test_headline_picks_learned_and_expert_rows_but_never_the_oracle():
    """On an MDP experiment: episodes as the unit, the optimal policy (regret 0) is not the best expert."""
    exp = EXPERIMENTS["tabular-mdp"]
    means = {label: 10.0 + i for i, label in enumerate(exp.algorithms)}
    means.update({"Optimal": 0.0, "TF (DPT, greedy)": 3.0, "PSRL": 4.0})
    headline = experiment_headline(exp, curves_of(means, exp.spec.episodes))
    assert headline.at == f"k={exp.spec.episodes}" and not headline.generalist  # a paper model plays too
    assert headline.learned is not None and headline.learned.label == "TF (DPT, greedy)"
    assert headline.expert is not None and (headline.expert.label, headline.expert.mean) == ("PSRL", 4.0)
    assert headline.ratio == pytest.approx(0.75)
    generalist = EXPERIMENTS[EXPERIMENT]
    only_learned = experiment_headline(generalist, curves_of({"Generalist (bernoulli-generalist, greedy)": 5.0}, 200))
    assert only_learned.generalist and only_learned.expert is None and only_learned.ratio is None


def test_a_damaged_embedded_image_is_detected(run):
    """The check above can fail: a truncated PNG is caught even though a browser would still draw its top."""
    data = (run / plot_files(EXPERIMENTS[EXPERIMENT])[0]).read_bytes()
    page = f'<img src="data:image/png;base64,{base64.b64encode(data[: len(data) // 2]).decode()}">'
    with pytest.raises(AssertionError):
        check_page(page)
    with pytest.raises(AssertionError):
        check_page('<img src="plot.png">')


def test_plot_only_page_shows_grid_heatmaps(run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(run, out)
    grid = out / "generalization"
    grid.mkdir()
    heat = np.linspace(0, 1, 40 * 60 * 3).reshape(40, 60, 3)
    matplotlib.image.imsave(grid / "heatmap-bernoulli.png", heat)
    (grid / "summary.md").write_text(
        "# grid\n\n## Bernoulli bandits\n\n| cell | generalist |\n|---|---|\n| K=2 | 1.00 |\n"
    )
    (grid / "config.json").write_text(json.dumps({"runs": 6, "seed": 30000001}))
    main(["--plot-only", "--out", str(out)])
    page = (out / "index.html").read_text()
    parser = check_page(page)
    assert (grid / "heatmap-bernoulli.png").read_bytes() in embedded_pngs(page)
    assert "Bernoulli bandits" in parser.headings and "K=2" in parser.cells
    assert "generalization: seed 30000001, 6 runs" in page


def test_markdown_subset():
    text = "# T\n\nsome **bold** `x<y`\nwraps\n\n| a | b |\n|---|---|\n| 1 | <2> |\n"
    assert markdown_html(text) == (
        "<h1>T</h1>\n<p>some <strong>bold</strong> <code>x&lt;y</code> wraps</p>\n"
        "<table>\n<tr><th>a</th><th>b</th></tr>\n<tr><td>1</td><td>&lt;2&gt;</td></tr>\n</table>"
    )


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed")
def test_page_renders_in_a_headless_browser(run, tmp_path):
    """Every image loads and nothing is written to the console (a test copy adds the one script that reports)."""
    report = (
        "<script>window.addEventListener('load', () => { for (const i of document.images) "
        "i.setAttribute('data-loaded', i.complete && i.naturalWidth > 0 ? 'yes' : 'no'); });</script>"
    )
    probe = tmp_path / "probe.html"
    probe.write_text((run / "index.html").read_text().replace("</body>", report + "</body>"))
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    done = subprocess.run(
        [*command, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = re.findall(r'<img [^>]*data-loaded="(\w+)"', done.stdout)
    assert loaded == ["yes"] * sum(len(plot_files(EXPERIMENTS[name])) for name in PAGE_ORDER)
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line] == []
