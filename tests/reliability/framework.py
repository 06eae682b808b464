"""The probe machinery: a probe does one bad input or fault and reports what happened, as a verdict.

A probe is a small function that does what a careful user or an adversary would (a NaN prior
variance, an edited file, a training run stopped between two writes, an export over a project
folder, ...) and reports one of three outcomes:

- **clear error**: an exception of the expected type whose message names what it must (the
  argument and the value, or the file); the table shows its type and the start of its message;
- **handled**: the case works as it should (a stopped benchmark resumes, an unusable cache falls
  back to memory with a warning, 10,000 DarkRoom instances fit in memory);
- **PROBLEM**: anything else -- a silently accepted input or wrong result, an exception of another
  type or one whose message does not name the problem (a raw ``IndexError``, ``KeyError``,
  ``TypeError``, ...), or lost work.

Every :func:`refused` names the exception types it accepts and the fragments the message must
hold, so a probe asserts both.  A probe whose problem lies in code that another part of the work
will fix carries ``known`` (who fixes it): the test suite expects it to fail until then, and the
table marks it.  ``tests/test_reliability_probes.py`` runs every probe as one pytest case;
``python -m tests.reliability`` prints the table (``--out docs/reliability-probes.md`` writes it).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any


class Verdict(str, Enum):
    """Outcome class of a probe."""

    CLEAR = "clear error"
    HANDLED = "handled"
    PROBLEM = "PROBLEM"


class Section(str, Enum):
    """What would go wrong without the check: the kind of failure the probe guards against."""

    SILENT = "silently wrong"
    CRASH = "obscure crash"
    LOST = "work lost"


@dataclass(frozen=True)
class Outcome:
    """What a probe found: its verdict and a one-line description of the behaviour."""

    verdict: Verdict
    behaviour: str


@dataclass(frozen=True)
class Probe:
    """One case: ``run(tmp)`` does it in the temporary folder ``tmp`` and says what happened."""

    name: str
    section: Section
    run: Callable[[Path], Outcome]
    slow: bool = False
    """Takes more than a few seconds (left out by ``--fast`` and by the fast test)."""
    surface: str = ""
    """The part of the package probed (a heading of the table)."""
    known: str = ""
    """A known problem left to another part of the work: who fixes it (the test expects it to fail until then)."""


PROBES: list[Probe] = []
"""Every probe, in the order of registration (surface by surface)."""

_SURFACE = [""]
"""The surface that probes registered from now on belong to (:func:`surface`)."""


def surface(title: str) -> None:
    """Probes registered after this call belong to the surface ``title`` (a heading of the table)."""
    _SURFACE[0] = title


MESSAGE_CHARS = 150
"""Characters of an error message shown in the table."""


_PROBE_FOLDER = re.compile(r"[^\s'\"(]*reliability-probes-[^/\s]+/probe-[^/\s]+")
"""A probe's temporary folder in a message (shown as ``<tmp>``)."""


_CHECKOUT = str(Path(__file__).resolve().parents[2]) + "/"
"""The checkout's folder: a path into it is shown relative to it, so the table names no folder of the machine."""


def short(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line, probe folders as ``<tmp>`` and checkout paths relative, cut to ``limit`` characters."""
    text = _PROBE_FOLDER.sub("<tmp>", " ".join(str(text).split())).replace(_CHECKOUT, "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def described(err: BaseException) -> str:
    """``Type: message`` of an exception, shortened for the table."""
    return f"{type(err).__name__}: {short(str(err))}"


class Accepted(Exception):
    """Raised by a stand-in for work that a command line should never have started."""


Kinds = tuple[type[BaseException], ...]
"""The exception types a probe accepts as its clear error."""


def classify_error(err: BaseException, fragments: tuple[str, ...], kinds: Kinds = (Exception,)) -> Outcome:
    """A clear error when ``err`` is one of ``kinds`` and its message holds every fragment (case-insensitive)."""
    if isinstance(err, Accepted):
        return Outcome(Verdict.PROBLEM, f"accepted: {err}")
    message = str(err).lower()
    missing = [f for f in fragments if f.lower() not in message]
    if isinstance(err, kinds) and not missing:
        return Outcome(Verdict.CLEAR, described(err))
    why = f"does not name {missing}" if missing else f"not a {' or '.join(k.__name__ for k in kinds)}"
    return Outcome(Verdict.PROBLEM, f"raw {described(err)} ({why})")


def refused(action: Callable[[], Any], *fragments: str, kinds: Kinds) -> Outcome:
    """``action`` must raise one of ``kinds`` with a message naming ``fragments``; anything else is a PROBLEM."""
    try:
        result = action()
    except Exception as err:
        return classify_error(err, fragments, kinds)
    return Outcome(Verdict.PROBLEM, f"accepted silently (returned {short(repr(result), 80)})")


def refused_by_each(
    what: str,
    cases: dict[str, Callable[[], Any]],
    *fragments: str,
    kinds: Kinds,
) -> Outcome:
    """:func:`refused` for every case; one PROBLEM makes the probe a PROBLEM, naming the case."""
    return refused_naming(what, {label: (action, fragments) for label, action in cases.items()}, kinds)


def refused_naming(what: str, cases: dict[str, tuple[Callable[[], Any], tuple[str, ...]]], kinds: Kinds) -> Outcome:
    """:func:`refused` for every case with its own fragments; one PROBLEM makes the probe a PROBLEM, naming the case."""
    outcomes = {label: refused(action, *fragments, kinds=kinds) for label, (action, fragments) in cases.items()}
    bad = [(label, o) for label, o in outcomes.items() if o.verdict is Verdict.PROBLEM]
    if bad:
        label, outcome = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return Outcome(Verdict.PROBLEM, f"{label}: {outcome.behaviour}{more}")
    return Outcome(Verdict.CLEAR, f"all {len(cases)} {what}: {next(iter(outcomes.values())).behaviour}")


def probe(
    name: str, section: Section, slow: bool = False, known: str = ""
) -> Callable[[Callable[[Path], Outcome]], Callable]:
    """Register the decorated function ``f(tmp) -> Outcome`` as a probe of the current surface."""

    def register(run: Callable[[Path], Outcome]) -> Callable[[Path], Outcome]:
        add_probe(name, section, run, slow, known)
        return run

    return register


def add_probe(name: str, section: Section, run: Callable[[Path], Outcome], slow: bool = False, known: str = "") -> None:
    """Register ``run(tmp) -> Outcome`` as a probe of the current surface."""
    PROBES.append(Probe(name, section, run, slow, _SURFACE[0], known))


def input_probe(
    name: str, section: Section, action: Callable[[], Any], *fragments: str, kinds: Kinds, known: str = ""
) -> None:
    """Register a probe whose ``action`` must raise one of ``kinds`` with a message naming ``fragments``."""
    add_probe(name, section, lambda tmp: refused(action, *fragments, kinds=kinds), known=known)


class CommandLineExit(Exception):
    """A command line that stopped with an exit status (its message: the status and the last line of stderr)."""


def command_line(main: Callable[[list[str]], Any], argv: list[str]) -> Any:
    """Run ``main(argv)``; an exit becomes :class:`CommandLineExit` with the error line argparse printed."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return main(argv)
    except SystemExit as stop:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        raise CommandLineExit(f"exit status {stop.code}: {lines[-1] if lines else '(nothing on stderr)'}") from None


@contextlib.contextmanager
def replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` set to ``value`` inside the block (a module function the probe stands in for)."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def never_started(*args: Any, **kwargs: Any) -> Any:
    """Stands in for the work a command line starts: reaching it means the command accepted its input."""
    raise Accepted("the configuration was accepted and the work would have started")


def traced_peak(action: Callable[[], Any]) -> tuple[Any, int]:
    """``action()`` (or the exception it raised) and the peak of traced allocations (bytes) while it ran."""
    tracemalloc.start()
    try:
        try:
            result: Any = action()
        except Exception as err:
            result = err
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run_probe(item: Probe, root: Path) -> tuple[Outcome, float]:
    """Run one probe in its own temporary folder under ``root``; an exception escaping the probe is a PROBLEM."""
    tmp = Path(tempfile.mkdtemp(prefix="probe-", dir=root))
    start = time.perf_counter()
    try:
        outcome = item.run(tmp)
    except Exception as err:
        outcome = Outcome(Verdict.PROBLEM, f"the probe itself failed: {described(err)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return outcome, time.perf_counter() - start


def run_probes(items: list[Probe], echo: Callable[[str], None] | None = None) -> list[tuple[Probe, Outcome]]:
    """Every probe of ``items`` in a fresh temporary folder; ``echo`` gets a progress line per probe."""
    results = []
    with tempfile.TemporaryDirectory(prefix="reliability-probes-") as root:
        for item in items:
            outcome, seconds = run_probe(item, Path(root))
            results.append((item, outcome))
            if echo is not None:
                echo(f"[{len(results)}/{len(items)}] {outcome.verdict.value}: {item.name} ({seconds:.1f}s)")
    return results


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def count_line(results: list[tuple[Probe, Outcome]]) -> str:
    """``N probes: X clear error, Y handled, Z problem`` (and how many problems are known, left to others)."""
    counts = {v: sum(o.verdict is v for _, o in results) for v in Verdict}
    known = sum(o.verdict is Verdict.PROBLEM and bool(p.known) for p, o in results)
    line = (
        f"{len(results)} probes: {counts[Verdict.CLEAR]} clear error, {counts[Verdict.HANDLED]} handled, "
        f"{counts[Verdict.PROBLEM]} problem"
    )
    return line + (f" ({known} known, left to their owners)" if known else "")


def _verdict_cell(item: Probe, outcome: Outcome) -> str:
    if outcome.verdict is not Verdict.PROBLEM:
        return outcome.verdict.value
    return f"**{outcome.verdict.value}** (known: {item.known})" if item.known else f"**{outcome.verdict.value}**"


def report(results: list[tuple[Probe, Outcome]]) -> str:
    """One Markdown table (probe | behaviour | verdict) per surface, then the count line."""
    lines: list[str] = []
    current = None
    for item, outcome in results:
        if item.surface != current:
            current = item.surface
            lines += ["", f"### {current}", ""] if current else [""]
            lines += ["| probe | behaviour | verdict |", "|---|---|---|"]
        name = f"{_cell(item.name)} ({item.section.value})"
        lines.append(f"| {name} | {_cell(outcome.behaviour)} | {_verdict_cell(item, outcome)} |")
    return "\n".join([*lines[1:], "", count_line(results)])


def selected(probes: list[Probe], fast: bool) -> list[Probe]:
    """The probes to run: all of them, or without the slow ones."""
    return [p for p in probes if not (fast and p.slow)]
