"""Log lines and progress bars share stderr without colliding on a terminal.

A bar redraws itself in place on the terminal's last line; a log line printed while it is drawn
must start on a clean line (the bar's line cleared, or a new line) and the bar must be drawn again
after it.  The checks write to a fake terminal (a ``StringIO`` whose ``isatty()`` is true) and replay
its output through a small screen model that applies carriage returns and newlines the way a
terminal does, so a collision shows as a screen line holding both the bar and a log line.
"""

import gc
import io
import re
import sys

from benchmarks.harness import cli
from icrl_gym.utils import progress
from icrl_gym.utils.fileio import RunLog


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal, so that progress bars draw on it."""

    def isatty(self) -> bool:
        return True


UP = "\x1b[A"
"""The cursor-up sequence tqdm writes to reach a bar drawn below the current line (several bars at once)."""


def screen(output: str) -> list[str]:
    """The lines a terminal shows after ``output``: ``\\r`` returns to the line's start, later text overwrites.

    A newline moves to the start of the next line, :data:`UP` one line up; trailing blanks are dropped.
    """
    lines, row, col = [""], 0, 0
    for part in re.split(f"({re.escape(UP)}|\r|\n)", output):
        if part == "\r":
            col = 0
        elif part == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif part == UP:
            row = max(row - 1, 0)
        elif part:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + part + line[col + len(part) :]
            col += len(part)
    return [line.rstrip() for line in lines]


def use_terminal(monkeypatch) -> FakeTerminal:
    """stderr replaced by a fake terminal, with progress bars on.

    Called in the test's body, not in a fixture: pytest's own output capture sets ``sys.stderr`` again
    between a fixture's set-up and the test.
    """
    gc.collect()  # bars of earlier tests still referenced by a traceback would shift this test's bar down
    fake = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    monkeypatch.setattr(progress, "_quiet", False)
    return fake


def check_clean(output: str, messages: list[str], desc: str) -> None:
    """Each message starts on a clean line, ends with a newline, and the bar ``desc`` is redrawn after it."""
    for message in messages:
        at = output.index(message)
        before = output[:at].removesuffix(UP)  # back on the log's line after clearing a bar below it
        assert before == "" or before[-1] in "\r\n", repr(output[max(at - 80, 0) : at + len(message)])
        if desc in before:  # a bar was drawn before: its line was cleared (blanks over it, then back to the start)
            assert re.search(r"\r +\r$", before), repr(before[-120:])
        after = output[at + len(message) :]
        assert after.startswith("\n"), repr(after[:80])
        if f"\r{desc}" in after:  # the bar comes back at once, on the line below the log line
            assert re.match(f"\\n({re.escape(UP)}|\\n)*\\r{re.escape(desc)}", after), repr(after[:80])
    shown = screen(output)
    for message in messages:  # on the screen, every log line stands alone and whole
        assert message in shown, (message, shown)
    assert not [line for line in shown if desc in line and any(m in line for m in messages)], shown


def test_log_lines_land_above_the_bar(monkeypatch):
    terminal = use_terminal(monkeypatch)
    bar = progress.progress_bar(3, "work", unit="item")
    bar.refresh()
    messages = []
    for i in range(3):
        bar.update(1)
        messages.append(f"[{i + 1}/3] item {i} done")
        progress.log(messages[-1])
        tail = terminal.getvalue().rsplit(messages[-1], 1)[1]
        assert tail.startswith("\n\rwork:") and f"| {i + 1}/3 [" in tail, repr(tail)  # the bar redrawn after it
    bar.close()
    check_clean(terminal.getvalue(), messages, "work")
    assert screen(terminal.getvalue())[:3] == messages  # above the bar, in order; the closed bar left nothing


def test_a_plain_print_would_collide(monkeypatch):
    """The screen model sees the collision that :func:`progress.log` avoids."""
    terminal = use_terminal(monkeypatch)
    bar = progress.progress_bar(3, "work", unit="item")
    bar.refresh()
    print("[1/3] item 0 done", file=sys.stderr)
    bar.close()
    assert any("work" in line and "[1/3]" in line for line in screen(terminal.getvalue()))


def test_log_without_a_terminal_is_a_plain_line(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    bar = progress.progress_bar(3, "work")
    assert bar.disable
    progress.log("[1/3] item 0 done")
    bar.close()
    assert stream.getvalue() == "[1/3] item 0 done\n"


def test_run_log_echo_lands_above_a_training_bar(monkeypatch, tmp_path):
    terminal = use_terminal(monkeypatch)
    bar = progress.progress_bar(100, "pretrain", unit="step")
    bar.refresh()
    log = RunLog(tmp_path / "train.log")
    log("step 50/100 train loss=1.0000")
    bar.update(1)
    log("step 100/100 train loss=0.5000")
    bar.close()
    messages = (tmp_path / "train.log").read_text().splitlines()  # the same lines as echoed
    assert len(messages) == 2
    check_clean(terminal.getvalue(), messages, "pretrain")


def test_harness_progress_lines_never_collide_with_its_bar(monkeypatch, tmp_path):
    """A real run of the harness on a terminal: every ``[n/N]`` line on a line of its own, the bar after each."""
    terminal = use_terminal(monkeypatch)
    cli.main(["--experiments", "ood-bernoulli-narrow", "--runs", "2", "--out", str(tmp_path / "out")])
    output = terminal.getvalue()
    messages = [line for line in screen(output) if re.match(r"\[\d+/\d+\] ", line)]
    assert len(messages) == 5 and "\rbenchmarks:" in output  # one per row; the bar was drawn
    check_clean(output, messages, "benchmarks")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_as_hours_minutes_seconds():
    assert [progress.duration(s) for s in (0, 44.6, 60, 725, 3600, 11_220)] == [
        "0s",
        "45s",
        "1m00s",
        "12m05s",
        "1h00m",
        "3h07m",
    ]


def test_time_left_is_weighted_by_the_tasks_costs(monkeypatch):
    """Two tasks reused, three to play of costs 8, 1, 1: after the 8 in 4 s, 2 units are left at 2 a second."""
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    clock = Clock()
    work = progress.WorkProgress([8.0, 1.0, 1.0], "grid", finished=2, clock=clock)
    assert work.seconds_left() is None and work.status() == "grid: 2/5 tasks, 0% of the estimated work, 0s elapsed"
    clock.now += 4.0
    work.advance(8.0)
    assert work.seconds_left() == 4.0 * 2 / 8  # a count-based rate (1 task in 4 s) would say 8 s
    assert work.status() == "grid: 3/5 tasks, 80% of the estimated work, 4s elapsed, about 1s left"
    clock.now += 1.0
    work.advance(1.0)
    assert work.seconds_left() == 5.0 * 1 / 9
    work.advance(1.0)
    assert work.seconds_left() == 0.0 and work.count == work.total == 5
    work.close()


def test_without_a_terminal_the_progress_is_a_log_line_at_most_every_interval(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "_quiet", False)
    clock = Clock()
    work = progress.WorkProgress([1.0] * 6, "grid", interval=60.0, clock=clock)
    for seconds in (30, 31, 10, 30, 50, 5):  # finished at 30, 61, 71, 101, 151, 156 s: lines at 61 and 151 s
        clock.now += seconds
        work.advance(1.0)
    work.close()
    assert stream.getvalue().splitlines() == [
        "grid: 2/6 tasks, 33% of the estimated work, 1m01s elapsed, about 2m02s left",
        "grid: 5/6 tasks, 83% of the estimated work, 2m31s elapsed, about 30s left",
    ]
    monkeypatch.setattr(progress, "_quiet", True)
    quiet = progress.WorkProgress([1.0], "grid", interval=0.0, clock=clock)
    clock.now += 5
    quiet.advance(1.0)
    assert stream.getvalue().count("\n") == 2  # quiet: nothing more


def test_on_a_terminal_the_bar_shows_the_tasks_and_the_time_left(monkeypatch):
    terminal = use_terminal(monkeypatch)
    clock = Clock()
    work = progress.WorkProgress([3.0, 1.0], "grid", finished=1, clock=clock)
    clock.now += 6.0
    work.advance(3.0)
    work.bar.refresh()
    shown = [line for line in screen(terminal.getvalue()) if line.startswith("grid:")]
    assert shown and "2/3 tasks" in shown[-1] and "about 2s left" in shown[-1], shown
    work.close()


def test_a_sweep_counts_its_reused_tasks_in_its_one_bar(monkeypatch):
    """``run_sweep`` draws one bar over all its tasks, whatever the executor; the stored ones count as done."""
    from benchmarks.executor.local import InlineExecutor
    from benchmarks.executor.tasks import run_sweep

    class Square:
        def __init__(self, x: int) -> None:
            self.x = x
            self.name, self.cost, self.setup, self.memory = f"square {x}", float(x), None, 0.0

        def run(self) -> int:
            return self.x * self.x

    class Stored:
        def load(self, task: Square) -> int | None:
            return 4 if task.x == 2 else None

        def save(self, task: Square, result: int) -> None:
            pass

    terminal = use_terminal(monkeypatch)
    assert run_sweep(InlineExecutor(), [Square(x) for x in (1, 2, 3)], Stored(), desc="squares") == [1, 4, 9]
    bars = [line for line in screen(terminal.getvalue().replace("\r", "\n")) if line.startswith("squares:")]
    assert bars and bars[0].split("| ")[1].startswith("1/3 tasks"), bars  # drawn first with the stored task done
