"""Docstrings, comments and docs cite Lin, Bai & Mei (ICLR 2024) by printed numbers, not LaTeX keys.

"Appendix exp_details" or "Lemma approx_ridge" cannot be followed by a reader of the published
paper; "Appendix B" and "Lemma 21" can.  KEYS are the paper's \\label keys (and two made-up ones)
that the code used to cite; a key only counts when a citation word (Section, Appendix, Lemma,
Theorem, Proposition, Definition, Eq., ...) precedes it, so ordinary words ("the experiments",
a variable ``mlp``) are not flagged.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

KEYS = (
    "exp_details",
    "approx_ridge",
    "Tabular-MDP-statement",
    "general_mle",
    "masked-attention",
    "decoder-tf",
    "tf_embed_bandit",
    "soft-LinUCB",
    "framework",
    "example_ucbvi",
    "supervised-pretraining",
    "LinUCB-statement",
    "transformer-algorithm",
    "diff_reward",
    "ts_algorithm_formula",
    "approx_smooth_linucb",
    "dist_ratio",
    "app_opt_diff_reward",
    "tf_embed_mdp",
    "mlp",
    "experiments",
    "mdp",
    "dpt-main",
    "dpt",
    "TS",
)
PREFIXES = (
    "Section",
    "Sections",
    "Sec.",
    "Appendix",
    "Appendices",
    "App.",
    "Lemma",
    "Theorem",
    "Thm.",
    "Proposition",
    "Prop.",
    "Definition",
    "Def.",
    "Equation",
    "Eq.",
    "Eqs.",
)
_SEP = r"(?:\s*,\s*(?:and\s+)?|\s+and\s+)"  # "Appendix F.1, exp_details", "Appendix F.1 and exp_details"
_PREFIX = r"(?:" + "|".join(re.escape(p) for p in sorted(PREFIXES, key=len, reverse=True)) + r")(?!\w)"
_TOKEN = r"(?!" + _PREFIX + r")\(?[\w.-]+\)?"  # the next citation word starts a new citation
_GAP = r"(?:[ \t]*~?[ \t]*|[ \t]*\n[ \t]*(?:#[ \t]*)?)"  # same line, or wrapped onto the next (comment) line
CITATION = re.compile(
    r"(?<![\w.])(?P<prefix>" + _PREFIX + r")" + _GAP + r"(?P<refs>" + _TOKEN + r"(?:" + _SEP + _TOKEN + r")*)"
)
_KEY_SET = frozenset(KEYS)


def key_citations(text: str) -> list[str]:
    """The citations in ``text`` that name a key of KEYS, e.g. ``["Appendix exp_details"]``."""
    found = []
    for m in CITATION.finditer(text):
        tokens = [t.strip("()") for t in re.split(_SEP, m["refs"])]
        tokens = [t[:-1] if t.endswith(".") else t for t in tokens]  # "... Appendix mdp."
        if any(t in _KEY_SET for t in tokens):
            found.append(" ".join(m.group(0).split()))
    return found


def _scanned_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for package in ("icrl_gym", "agents", "benchmarks"):
        files += sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)
    return [p for p in files if p.is_file()]


@pytest.mark.parametrize(
    "text",
    [
        "Appendix exp_details",
        "(Section Tabular-MDP-statement)",
        "Eq. general_mle",
        "Definition masked-attention",
        "Def. mlp",
        "Section experiments and Appendix exp_details",
        "Appendix ts_algorithm_formula, exp_details",
        "Appendix F.1 and exp_details",
        "Lemma approx_ridge: constructed",
        "Section 4.3 and Appendix mdp.",
        "(Section dpt-main)",
        "Theorem dpt)",
        "(Section 1 of SPEC, Prop. TS)",
        "Sections experiments",
        "the transformer of Section\n    # experiments",
    ],
)
def test_detects_key_citations(text: str) -> None:
    assert key_citations(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Appendix B",
        "Eq. (3)",
        "Lemma 21",
        "Definition 1",
        "Section 4.3 and Appendix G",
        "Appendices F.1 and B",
        "the paper's experiments (Section 5)",
        "mlp = MLP(cfg)  # Definition 2",
        "x = LN2(x + mlp(x))",
        "Section 5 experiments",
        "def retrain_models(out: Path, experiments: list[Experiment])",
        "UCB, TS and Emp look the same",
        "Algorithm distillation: Alg_E = Alg_0",
        "Section 1 of SPEC; in the paper's Section 3.2",
    ],
)
def test_ignores_ordinary_words_and_numbers(text: str) -> None:
    assert not key_citations(text), text


def test_no_latex_key_citations_in_code_and_docs() -> None:
    files = _scanned_files()
    assert any(p.name == "README.md" for p in files) and len(files) > 20
    bad = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            for cite in key_citations(m.group(0)):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path.relative_to(ROOT)}:{line}: {cite}")
    assert not bad, "cite the paper's printed numbers, not LaTeX keys:\n" + "\n".join(bad)
