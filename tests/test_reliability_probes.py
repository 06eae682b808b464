"""Every reliability probe (``tests/reliability/``) is a clear error or handled; the verdict machinery is checked too.

Each probe runs as its own test in a temporary folder, exactly as ``python -m tests.reliability``
runs it, and asserts what the probe asserts: the exception type and a message naming the problem,
or the case handled, and no file lost.  Slow probes (benchmark runs, kernel subprocesses) are
marked slow.  A probe that finds a known problem left to another part of the work is expected to
fail (not strictly: its fix makes it pass) until the mark is removed with the fix.
"""

import sys

import pytest

from tests import reliability
from tests.reliability import framework as rp


def _marks(p: rp.Probe) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if p.slow else []
    if p.known:
        marks.append(pytest.mark.xfail(reason=f"known problem, left to {p.known}", strict=False))
    return marks


@pytest.mark.parametrize("item", [pytest.param(p, id=p.name, marks=_marks(p)) for p in reliability.PROBES])
def test_no_probe_is_a_problem(item, tmp_path):
    outcome, _ = rp.run_probe(item, tmp_path)
    assert outcome.verdict is not rp.Verdict.PROBLEM, f"{item.name}: {outcome.behaviour}"


def test_the_probe_list_covers_every_section_and_surface():
    probes = reliability.PROBES
    assert {p.section for p in probes} == set(rp.Section)
    names = [p.name for p in probes]
    assert len(names) == len(set(names)) >= 120
    surfaces = {p.surface for p in probes}
    assert all(surfaces) and any(s.startswith("First pass") for s in surfaces) and len(surfaces) >= 12
    assert rp.selected(probes, fast=True) == [p for p in probes if not p.slow] != probes


def _raise(err):
    def action():
        raise err

    return action


@pytest.mark.parametrize(
    "action, fragments, kinds, verdict, shown",
    [
        (lambda: 3, ("dim",), (Exception,), rp.Verdict.PROBLEM, "accepted silently (returned 3)"),
        (_raise(IndexError("index 5 is out of bounds")), ("dim",), (Exception,), rp.Verdict.PROBLEM, "raw IndexError"),
        (_raise(KeyError("v_star")), ("tabular-MDP",), (Exception,), rp.Verdict.PROBLEM, "does not name"),
        (_raise(ValueError("dim must be an integer, got 2.5")), ("dim", "2.5"), (ValueError,), rp.Verdict.CLEAR, "dim"),
        (_raise(ValueError("x.npz is corrupt")), ("x.npz",), (KeyError,), rp.Verdict.PROBLEM, "not a KeyError"),
        (_raise(rp.Accepted("started")), ("steps",), (rp.CommandLineExit,), rp.Verdict.PROBLEM, "accepted: started"),
    ],
    ids=["accepted", "IndexError", "KeyError", "clear", "wrong kind", "command accepted"],
)
def test_refused_tells_a_clear_error_from_a_problem(action, fragments, kinds, verdict, shown):
    outcome = rp.refused(action, *fragments, kinds=kinds)
    assert outcome.verdict is verdict and shown in outcome.behaviour


def test_one_problem_case_makes_the_probe_a_problem():
    clear = _raise(ValueError("actions must be in [0, 3), got 99"))
    kinds = (ValueError,)
    outcome = rp.refused_by_each("agents", {"a": clear, "b": lambda: None, "c": clear}, "99", kinds=kinds)
    assert outcome.verdict is rp.Verdict.PROBLEM and outcome.behaviour.startswith("b: accepted silently")
    outcome = rp.refused_by_each("agents", {"a": clear, "c": clear}, "99", kinds=kinds)
    assert outcome == rp.Outcome(rp.Verdict.CLEAR, "all 2 agents: ValueError: actions must be in [0, 3), got 99")


def test_a_command_line_exit_carries_its_error_line():
    def main(argv):
        print("usage: prog [-h]", file=sys.stderr)
        print(f"prog: error: --runs must be >= 2, got {argv[1]}", file=sys.stderr)
        raise SystemExit(2)

    with pytest.raises(rp.CommandLineExit, match=r"^exit status 2: prog: error: --runs must be >= 2, got 1$"):
        rp.command_line(main, ["--runs", "1"])


def test_messages_show_the_probe_folder_as_tmp_and_are_cut():
    err = FileNotFoundError("/tmp/reliability-probes-ab1/probe-cd2/run/optimizer.pt is missing " + "x" * 300)
    shown = rp.classify_error(err, ("optimizer.pt",)).behaviour
    assert shown.startswith("FileNotFoundError: <tmp>/run/optimizer.pt is missing")
    assert len(shown) == len("FileNotFoundError: ") + rp.MESSAGE_CHARS and shown.endswith("...")


def test_main_prints_the_table_and_the_count_and_fails_on_an_unknown_problem(monkeypatch, tmp_path, capsys):
    from tests.reliability import __main__ as table

    kinds = (ValueError,)
    probes = [
        rp.Probe(
            "clear | piped", rp.Section.CRASH, lambda tmp: rp.refused(_raise(ValueError("n=0")), "n", kinds=kinds)
        ),
        rp.Probe("handled", rp.Section.LOST, lambda tmp: rp.Outcome(rp.Verdict.HANDLED, "resumed"), surface="Files"),
        rp.Probe("silent", rp.Section.SILENT, lambda tmp: rp.refused(lambda: None, kinds=kinds), surface="Files"),
        rp.Probe("crashes", rp.Section.SILENT, lambda tmp: {}["missing"], surface="Files", known="the lead"),
        rp.Probe("slow", rp.Section.LOST, lambda tmp: rp.refused(lambda: None, kinds=kinds), slow=True),
    ]
    monkeypatch.setattr(table, "PROBES", probes)
    assert table.main(["--fast", "--out", str(tmp_path / "probes.md")]) == 1
    printed = capsys.readouterr().out
    written = (tmp_path / "probes.md").read_text()
    assert written.startswith(table.HEADER) and written.endswith(printed)
    assert "| clear \\| piped (obscure crash) | ValueError: n=0 | clear error |" in printed
    assert "\n### Files\n" in printed
    assert "| silent (silently wrong) | accepted silently (returned None) | **PROBLEM** |" in printed
    assert "the probe itself failed: KeyError: 'missing' | **PROBLEM** (known: the lead) |" in printed
    assert printed.rstrip().endswith("4 probes: 1 clear error, 1 handled, 2 problem (1 known, left to their owners)")
    monkeypatch.setattr(table, "PROBES", [probes[0], probes[1], probes[3]])
    assert table.main([]) == 0  # a known problem alone does not fail the command
