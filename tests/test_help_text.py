"""``--help`` of every command speaks to users: plain text, names they can pass, no tracker or source-file talk.

The commands are found, not listed: every module under ``benchmarks/`` and ``icrl_gym/training/``
with an ``if __name__ == "__main__":`` block, and ``python -m benchmarks``.  Each is run as
``python -m MODULE --help`` would run it (``runpy`` with ``alter_sys``: the module is ``__main__``),
in this process, to keep the test quick.
"""

import contextlib
import io
import os
import re
import runpy
import sys
from pathlib import Path

import pytest

from benchmarks.experiments.generalization.cells import FAMILIES, GRID_EXPERIMENTS
from benchmarks.experiments.mdp_generalization.cells import MDP_GRID_EXPERIMENTS
from benchmarks.experiments.suite.cells import EXPERIMENTS
from icrl_gym.utils.cli import plain_text

ROOT = Path(__file__).resolve().parents[1]


def commands() -> list[str]:
    """The module names of the commands under benchmarks/ and icrl_gym/training/."""
    found = ["benchmarks"]  # benchmarks/__main__.py
    for folder in ("benchmarks", "icrl_gym/training"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "__main__.py" and re.search(r"^if __name__ == .__main__.:", path.read_text(), re.M):
                found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


COMMANDS = commands()


def help_of(module: str, monkeypatch) -> str:
    """What ``python -m module --help`` prints (it must exit with status 0)."""
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    monkeypatch.setattr(os, "environ", dict(os.environ))  # a command may set OMP_NUM_THREADS before parsing
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert done.value.code in (0, None), f"{module} --help exited with {done.value.code}"
    return out.getvalue()


def test_the_commands_are_found():
    assert {"benchmarks", "icrl_gym.training.pretrain", "benchmarks.evaluations.expert_regret"} <= set(COMMANDS)
    assert len(COMMANDS) >= 20


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")
@pytest.mark.parametrize("module", COMMANDS)
def test_help_is_plain_text_for_users(module, monkeypatch):
    text = help_of(module, monkeypatch)
    assert text.startswith("usage: "), text[:200]
    assert not re.search(r"\bissues?\b", text, re.I), re.search(r".*\bissues?\b.*", text, re.I).group(0)
    markup = re.findall(r".*(?:`|:[a-z]+:`|::$).*", text, re.M)  # literals, roles, literal-block markers
    assert markup == [], markup
    pointers = re.findall(r".*(?:\b[\w/.-]+\.py\b|\btests/).*", text)  # "see that source file", or usage: x.py
    assert pointers == [], pointers


def test_benchmark_help_lists_every_name_a_user_can_pass(monkeypatch):
    text = help_of("benchmarks", monkeypatch)
    listed = set(re.findall(r"^ +(\S+) {2,}", text, re.M))  # the first word of every name-and-description row
    names = [*EXPERIMENTS, *GRID_EXPERIMENTS, *MDP_GRID_EXPERIMENTS, *FAMILIES]
    names += [*MDP_GRID_EXPERIMENTS["mdp-generalization"].groups]
    assert [n for n in names if n not in listed] == []
    assert "bernoulli-generalist" in text and "tabular-mdp-generalist" in text  # the shipped generalists
    threads = re.search(r"\n  --threads INT(.*?)\n  --", text, re.S)
    assert threads is not None and re.findall(r"\d+", threads.group(1)) == ["1"]  # its default, and no timings


def test_plain_text_drops_the_markup_and_keeps_the_layout():
    doc = """Title ``x=1`` and :func:`~a.b.fn`, :mod:`pkg.mod`, `word`, `a link`_ and :ref:`a title <tgt>`.
    **Bold words** stay words, 10**6 * s stays arithmetic.

    - an item
      continued

    Run as::

        python -m pkg --set x=1
    """
    assert plain_text(doc) == (
        "Title x=1 and fn, pkg.mod, word, a link and a title.\n"
        "Bold words stay words, 10**6 * s stays arithmetic.\n\n"
        "- an item\n  continued\n\n"
        "Run as:\n\n"
        "    python -m pkg --set x=1"
    )
    assert plain_text(None) == "" and plain_text("Ends with a lone marker ::") == "Ends with a lone marker"
