"""Commands as a record keeps them: what a reader on another machine can type, with no folder of this one.

A checkpoint records the command that trained it.  Typed as ``python -m MODULE ARGS`` from the
repository, it reads the same anywhere; but the interpreter's own path, an absolute path into the
working folder or one into the home folder would name this machine's folders.  :func:`portable`
rewrites those (the working folder's paths become relative to it, the home folder's start with
``~``), and :func:`typed_command` gives the command that started this process in that form.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path


def portable(text: str, cwd: str | os.PathLike | None = None, home: str | os.PathLike | None = None) -> str:
    """``text`` with the absolute paths of the working folder made relative to it and those of the home folder as ``~``.

    The working folder comes first (it may lie inside the home folder); the folder itself alone
    becomes ``.``.  Other text is unchanged.
    """
    cwd = str(Path.cwd() if cwd is None else cwd).rstrip("/")
    home = str(Path.home() if home is None else home).rstrip("/")
    for folder, short in ((cwd, ""), (home, "~/")):
        if not folder:  # the root folder: nothing to shorten
            continue
        text = text.replace(folder + "/", short)
        words = [("." if not short else "~") if word == folder else word for word in text.split(" ")]
        text = " ".join(word.replace("=" + folder, "=" + ("." if not short else "~")) for word in words)
    return text


def typed_command(argv: Sequence[str] | None = None) -> str:
    """The command that started this process as typed from the working folder, without this machine's paths.

    ``python -m MODULE ARGS`` when the process runs a module (``MODULE`` from ``__main__``'s spec),
    else ``python SCRIPT ARGS``; ``argv`` (default ``sys.argv[1:]``) are the arguments.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    start = f"-m {spec.name}" if spec is not None and spec.name != "__main__" else sys.argv[0]
    args = list(sys.argv[1:] if argv is None else argv)
    return portable(" ".join(["python", start, *args]))
