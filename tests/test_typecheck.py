"""mypy runs clean on ``icrl_gym``, ``agents`` and ``benchmarks`` with the settings of ``[tool.mypy]``."""

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_clean(monkeypatch):
    # mypy reads [tool.mypy] (files, flags, overrides) from pyproject.toml in the working directory;
    # its incremental cache (.mypy_cache, git-ignored) makes later runs much faster than the first.
    monkeypatch.chdir(ROOT)
    stdout, stderr, status = api.run([])
    report = f"mypy exit status {status}\n{stdout}{stderr}"
    assert status == 0, report
    assert "Success: no issues found" in stdout, report
