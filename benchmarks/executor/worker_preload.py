"""Imported by the fork server the local workers are forked from when the driver cannot be (it has torch).

The fork server is a fresh process (not a fork of the driver, whose torch thread pools may be
running): it imports this module once, with one thread each for OpenMP and MKL set before torch is
imported, as the workers use, and the workers' code (:func:`benchmarks.executor.preload.preload`).
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import torch  # noqa: E402

from benchmarks.executor.preload import preload  # noqa: E402

torch.set_num_threads(1)
preload()
