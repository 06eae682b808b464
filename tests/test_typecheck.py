"""mypy runs clean on ``icrl_gym`` and ``agents`` with the settings of ``[tool.mypy]`` in pyproject.toml."""

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]


# The integrator removes this mark once `mypy` (run from the repository root) reports no errors:
# the tree is being made type-clean file by file and the remaining files still fail.
@pytest.mark.xfail(strict=False, reason="issue 12: mypy errors remain in files still being restructured")
def test_mypy_clean(monkeypatch):
    # mypy reads [tool.mypy] (files, flags, overrides) from pyproject.toml in the working directory;
    # its incremental cache (.mypy_cache, git-ignored) makes later runs much faster than the first.
    monkeypatch.chdir(ROOT)
    stdout, stderr, status = api.run([])
    report = f"mypy exit status {status}\n{stdout}{stderr}"
    assert status == 0, report
    assert "Success: no issues found" in stdout, report
