"""What every local worker needs, imported once by the fork server that the workers are forked from.

The local executor starts its workers with ``forkserver``: a fresh server process (not a fork of the
driver, whose torch thread pools may be running) imports this module once, then forks a worker per
slot.  The workers share the server's pages of torch, numpy and the agents copy-on-write, so each
starts in milliseconds instead of importing everything again (about 3 s and 250 MB per spawned
worker).  One thread each for OpenMP and MKL is set before torch is imported, as the workers use.
The imported objects are then frozen (:func:`gc.freeze`): a worker's garbage collector leaves them
alone, so it does not write to, and copy, the pages it shares with the server.
"""

from __future__ import annotations

import gc
import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import torch  # noqa: E402

import agents.learned  # noqa: E402, F401  (the learned agents and their models)
import benchmarks.executor.tasks  # noqa: E402, F401  (the agents and the suite's rows)
import benchmarks.experiments.grid.tasks  # noqa: E402, F401  (the grids' slices)

torch.set_num_threads(1)
gc.freeze()  # the objects imported so far stay out of the workers' collections, which would dirty their shared pages
