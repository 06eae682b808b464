"""The software and code that made an artefact, recorded beside its configuration and seed.

A result is reproducible from its configuration and seed only in the software that made it: a greedy
policy's argmax can flip on a near-tie when a library version, the CPU kernels torch dispatches to or
the code itself differ, and one flip changes the rest of that run.  So every results folder
(``config.json``), stored result and checkpoint record carries :func:`software_environment`: the
package, Python, numpy, torch and gymnasium versions, the platform, torch's CPU kernel level, the
state of the compiled decode kernel (:func:`icrl_gym.models.native_build.kernel_state`), and,
when the package runs from a git checkout, the commit and whether tracked files were modified.  No
path is recorded.

The commit is read once, when this module is first imported (in practice when the process first loads the
package's checkpoints, datasets or results code, which import it): a run that outlives a commit, such as a
sweep resumed over several sessions or a training run, records the code it started from in every
artefact, not the checkout's newest commit, which it never ran.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

import icrl_gym

_ROOT = Path(icrl_gym.__file__).resolve().parent.parent


def source_revision(root: Path = _ROOT, timeout: float = 5.0) -> dict[str, Any] | None:
    """``{"commit": sha, "modified": bool}`` of the git checkout at ``root``; None outside one or without git.

    ``modified`` says whether tracked files differ from the commit (``git status --porcelain
    --untracked-files=no``): a result made from modified code is not reproducible from the commit alone.
    """
    if not (root / ".git").exists():
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=timeout, check=True
        ).stdout

    try:
        commit, status = git("rev-parse", "HEAD").strip(), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": bool(status.strip())}


STARTED_FROM = source_revision()
""":func:`source_revision` of the package's checkout when this process imported this module (module docstring)."""


@functools.cache
def _versions() -> dict[str, Any]:
    """The parts of :func:`software_environment` that cannot change while the process runs."""
    import gymnasium
    import torch

    return {
        "icrl_gym": icrl_gym.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def software_environment() -> dict[str, Any]:
    """What made an artefact, as JSON (module docstring): versions, platform, CPU kernels and code revision."""
    from icrl_gym.models.native_build import kernel_state

    code = None if STARTED_FROM is None else dict(STARTED_FROM)  # a copy: a caller's edit stays its own
    return {**_versions(), "native_kernel": kernel_state(), "code": code}
