"""The lock of a run folder: one training process at a time in a folder (:class:`RunFolderLock`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import TracebackType


class RunFolderBusy(RuntimeError):
    """The run folder is held by another live process (its lock file names the process)."""


LOCK_FILE = "train.lock"
"""The lock file of a run folder: it holds the pid of the process training there."""


class RunFolderLock:
    """Exclusive use of a run folder by one process, for the time of a ``with`` block.

    The lock is ``fcntl.flock`` on ``<run folder>/train.lock``, which holds the holder's pid for
    the message of a refused process.  The operating system drops the lock when its process ends,
    however it ends, so a lock file left by a dead process is simply taken over (its pid is then
    replaced).  The file is deleted on release; a process that locked a file another one had just
    deleted notices (the path no longer names the file it locked) and tries again.  A folder the
    lock created is removed again when the block ends with an error and the folder is empty, so a
    refused new run leaves nothing behind.
    """

    def __init__(self, run_dir: str | os.PathLike, field: str = "out_dir") -> None:
        self.run_dir, self.field = Path(run_dir), field
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None
        self._created = False

    def __enter__(self) -> RunFolderLock:
        import fcntl  # POSIX only; imported here so that reading checkpoints never needs it

        self._created = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                self._remove_created()
                raise RunFolderBusy(
                    f"{self.field} {self.run_dir} is in use by another process (pid {holder}, lock file "
                    f"{self.path}): wait for it to finish, stop it, or use another {self.field}"
                ) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # locked a file its holder deleted on release: lock the current one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)  # still locked: no other process holds this file
            os.close(self._fd)
            self._fd = None
        if kind is not None:
            self._remove_created()

    def _remove_created(self) -> None:
        if self._created:
            try:
                self.run_dir.rmdir()  # only when empty: a refused new run leaves no folder behind
            except OSError:
                pass
