"""The quick probe of a linear-bandit policy: a reference's ratio is 1 exactly where it is the best."""

from __future__ import annotations

from agents.bandit.model_average import UNINFORMED_REFERENCES
from benchmarks.evaluations import linear_probe


def test_a_reference_probed_as_the_policy_is_at_least_the_best():
    assert len(linear_probe.probe_cells()) == 17
    names = ("family d=2, A=2, sigma=0.5", "MAB U[0, 1], K=20", "family d=5, A=2, T=1000")
    cells = linear_probe.probe(linear_probe.make_agent(UNINFORMED_REFERENCES["LinUCB (alpha=1)"]), 4, names)
    assert list(cells) == list(names)
    for row in cells.values():
        assert row["ratio"] >= 1.0 - 1e-12
        assert (abs(row["ratio"] - 1.0) < 1e-12) == (row["best"] == "LinUCB (alpha=1)")


def test_the_reference_cache_returns_what_was_played(tmp_path):
    """A cached cell gives the references' means of the cell played afresh, and a cache file is written once."""
    name, spec, seed = linear_probe.probe_cells()[2]  # family d=2, A=2 (cheap)
    fresh = linear_probe.reference_means(spec, 3, seed, None)
    first = linear_probe.reference_means(spec, 3, seed, tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and first == fresh
    again = linear_probe.reference_means(spec, 3, seed, tmp_path)
    assert again == fresh and list(tmp_path.iterdir()) == files
    other = linear_probe.reference_means(spec, 3, seed + 1, tmp_path)  # another seed is another entry
    assert len(list(tmp_path.iterdir())) == 2 and other != fresh
