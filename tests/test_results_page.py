"""The results page ``index.html``: self-contained, every figure a valid embedded PNG, the tables and seeds on it.

The page is checked by parsing it (always) and, where a Chromium is installed, by rendering it in a
headless browser: every image must load and the console must stay silent.
"""

import base64
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

from benchmarks.experiments import EXPERIMENTS
from benchmarks.harness import main
from benchmarks.plots import plot_files
from benchmarks.results_page import markdown_html

EXPERIMENT = "generalist-bernoulli-k5-t200"
"""Cheap (3 runs of four rows) and with a paper number (TS 10.7)."""


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
    main(["--experiments", EXPERIMENT, "--runs", "3", "--seed", "5", "--out", str(out), "--quiet"])
    return out


def test_page_embeds_every_figure_table_and_seed(run):
    page = (run / "index.html").read_text()
    parser = check_page(page)
    exp = EXPERIMENTS[EXPERIMENT]
    images = embedded_pngs(page)
    assert images == [(run / f).read_bytes() for f in plot_files(exp)]  # the run's own figures
    assert exp.title in parser.headings
    summary = (run / "summary.md").read_text()
    for label in exp.algorithms:  # every row of the summary, with the same numbers, in a table cell
        row = next(line for line in summary.splitlines() if line.startswith(f"| {label} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        at = parser.cells.index(label)
        assert parser.cells[at : at + len(cells)] == cells
    assert "paper (t=200)" in parser.cells and "10.7" in parser.cells  # the paper's TS, next to ours
    assert "seed 5, 3 runs" in page
    config = json.loads((run / "config.json").read_text())
    pre = re.search(r"<pre>(.*?)</pre>", page, re.S)
    assert pre is not None and json.loads(html.unescape(pre.group(1))) == config


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
    assert loaded == ["yes"] * len(plot_files(EXPERIMENTS[EXPERIMENT]))
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line] == []
