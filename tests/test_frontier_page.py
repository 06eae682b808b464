"""The Bernoulli frontier on the results page: its exact and Monte-Carlo rows, read back from its CSVs."""

from __future__ import annotations

import csv

import pytest

from benchmarks.experiments.bernoulli_frontier import report
from benchmarks.experiments.bernoulli_frontier.cells import MONTE_CARLO_POLICIES
from benchmarks.experiments.bernoulli_frontier.cli import main as frontier_main
from benchmarks.experiments.bernoulli_frontier.report import FOLDER, frontier_markdown, heatmap_name
from benchmarks.harness.report import write_results_page


@pytest.fixture(scope="module")
def frontier_out(tmp_path_factory):
    """A tiny frontier run (K = 2, T = 8 exact, K = 3 Monte Carlo) with the shipped generalist, in OUT/FOLDER."""
    out = tmp_path_factory.mktemp("bench")
    args = ["--horizon", "8", "--searches", "0", "--cache", str(out / "cache"), "--out", str(out / FOLDER)]
    frontier_main([*args, "--monte-carlo-arms", "3", "--runs", "4", "--model", "bernoulli-generalist"])
    return out


def test_the_tables_carry_the_csv_values_and_the_sums(frontier_out) -> None:
    """Every exact row, the sums over the priors and the certificate are those of frontier.csv / .json."""
    text = frontier_markdown(frontier_out / FOLDER)
    rows = list(csv.DictReader((frontier_out / FOLDER / "frontier.csv").open()))
    assert text is not None and len(rows) == 16
    for r in rows:
        assert f"| Beta({float(r['a']):g}, {float(r['b']):g}) | {float(r['told_gittins']):.3f} |" in text
        assert f"| {float(r['model']):.3f} | {float(r['model_to_family_bayes']):.3f} |" in text
    family = sum(float(r["family_bayes"]) for r in rows)
    model = sum(float(r["model"]) for r in rows)
    assert f"| {model:.3f} | {model / family:.3f} |" in text
    assert "Certificate: every policy not told the prior is at least" in text
    mc = list(csv.DictReader((frontier_out / FOLDER / "uninformed.csv").open()))
    assert "model (greedy)" in text and len(mc) == 16 * (1 + len(MONTE_CARLO_POLICIES))


def test_the_results_page_shows_the_frontier_section(frontier_out) -> None:
    """write_results_page adds the frontier's section when the output folder holds one."""
    page = write_results_page(frontier_out, [], {"runs": 1, "seed": 0}).read_text()
    assert 'id="bernoulli-frontier"' in page and "family-Bayes DP" in page and "bernoulli-generalist" in page
    assert 'alt="What a policy not told the prior can reach (bernoulli-frontier/): heatmap-model-greedy.png"' in page
    assert frontier_markdown(frontier_out / "missing") is None


def test_the_run_draws_a_heatmap_per_policy_but_the_reference(frontier_out) -> None:
    """One PNG per policy beside the told Gittins, named after it; none for the reference itself."""
    names = sorted(p.name for p in (frontier_out / FOLDER).glob("heatmap-*.png"))
    assert names == sorted(heatmap_name(p) for p in MONTE_CARLO_POLICIES)
    assert heatmap_name("Gittins told U[0, 1]") == "heatmap-gittins-told-u-0-1.png"
    for name in names:
        assert (frontier_out / FOLDER / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_framed_cells_are_those_over_the_lines() -> None:
    """over_the_lines picks every row over 1.25x in mean or 1.5x in p99, by column; render_heatmaps draws them."""
    cells = (
        (0.5, 1.0, report.MEAN_LINE + 0.01, 1.0),
        (1.0, 1.0, report.MEAN_LINE, report.P99_LINE + 0.01),
        (2.0, 5.0, 1.0, report.P99_LINE),
    )
    rows = [
        row
        for k in (5, 10)
        for a, b, ratio, p99 in cells
        for row in (
            {"num_arms": k, "a": a, "b": b, "policy": "told Gittins", "ratio": 1.0, "p99_ratio": 1.0},
            {"num_arms": k, "a": a, "b": b, "policy": "model (greedy)", "ratio": ratio, "p99_ratio": p99},
        )
    ]
    expected = {
        ("model (greedy)", k, a, b, key)
        for k in (5, 10)
        for a, b, key in ((0.5, 1.0, "ratio"), (1.0, 1.0, "p99_ratio"))
    }
    assert report.over_the_lines(rows) == expected
    images = report.render_heatmaps(rows, {"horizon": 200, "runs": 10, "seed": 1, "model": "m"})
    assert list(images) == ["heatmap-model-greedy.png"] and images["heatmap-model-greedy.png"][:4] == b"\x89PNG"
