"""Every probe of the reliability issue (``benchmarks/reliability_probes.py``) is a clear error or handled.

The probes run one by one, each in its own temporary folder, exactly as the script runs them; the two
benchmark runs are marked slow.  The helpers that turn a behaviour into a verdict are checked too, so
that a raw traceback, a silently accepted input or a lost run would fail here.
"""

import sys

import pytest

from benchmarks import reliability_probes as rp


@pytest.mark.parametrize(
    "item", [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.slow else []) for p in rp.PROBES]
)
def test_no_probe_is_a_problem(item, tmp_path):
    outcome, _ = rp.run_probe(item, tmp_path)
    assert outcome.verdict is not rp.Verdict.PROBLEM, f"{item.name}: {outcome.behaviour}"


def test_the_probe_list_covers_every_section_of_the_issue():
    sections = {p.section for p in rp.PROBES}
    assert sections == set(rp.Section)
    names = [p.name for p in rp.PROBES]
    assert len(names) == len(set(names)) >= 45
    assert rp.selected(fast=True) == [p for p in rp.PROBES if not p.slow] != rp.PROBES


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
        (_raise(ValueError("dim must be an integer, got 2.5")), ("dim", "2.5"), (Exception,), rp.Verdict.CLEAR, "dim"),
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
    outcome = rp.refused_by_each("agents", {"a": clear, "b": lambda: None, "c": clear}, "99")
    assert outcome.verdict is rp.Verdict.PROBLEM and outcome.behaviour.startswith("b: accepted silently")
    outcome = rp.refused_by_each("agents", {"a": clear, "c": clear}, "99")
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


def test_main_prints_the_table_and_the_count_and_fails_on_a_problem(monkeypatch, tmp_path, capsys):
    probes = [
        rp.Probe("clear | piped", rp.Section.CRASH, lambda tmp: rp.refused(_raise(ValueError("n=0")), "n")),
        rp.Probe("handled", rp.Section.LOST, lambda tmp: rp.Outcome(rp.Verdict.HANDLED, "resumed")),
        rp.Probe("silent", rp.Section.SILENT, lambda tmp: rp.refused(lambda: None)),
        rp.Probe("crashes", rp.Section.SILENT, lambda tmp: {}["missing"]),
        rp.Probe("slow", rp.Section.LOST, lambda tmp: rp.refused(lambda: None), slow=True),
    ]
    monkeypatch.setattr(rp, "PROBES", probes)
    assert rp.main(["--fast", "--out", str(tmp_path / "probes.md")]) == 1
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "probes.md").read_text()
    assert "| clear \\| piped (obscure crash) | ValueError: n=0 | clear error |" in printed
    assert "| silent (silently wrong) | accepted silently (returned None) | **PROBLEM** |" in printed
    assert "the probe itself failed: KeyError: 'missing'" in printed
    assert printed.rstrip().endswith("4 probes: 1 clear error, 1 handled, 2 problem")
    monkeypatch.setattr(rp, "PROBES", probes[:2])
    assert rp.main([]) == 0
