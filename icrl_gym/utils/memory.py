"""Handing memory that a process freed back to the system."""

from __future__ import annotations

import ctypes


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``; a no-op elsewhere).

    glibc keeps freed blocks below its mmap threshold (which rises to the largest block freed, up to
    32 MiB) in the heap, so a process whose allocations vary in size keeps its high-water mark.  The
    linear generalist's trainer calls it every ``log_every`` steps (its resident memory climbed from
    ~1.5 GiB towards several GiB over a run without; one trim costs ~1 s of page faults, ~2% at 50
    steps); a benchmark worker calls it after every task.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.malloc_trim(0)
